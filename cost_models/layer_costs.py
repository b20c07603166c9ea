"""Per-layer compute times and FLOPs on one GPU, for one micro-batch.

``tokens`` is the number of tokens one GPU processes per micro-batch in a layer
(micro_batch * seq_len / cp). Tensor parallelism ``tp`` splits heads and FFN columns
(Megatron, Shoeybi et al. 2019); without sequence parallelism the norms and dropouts run
replicated on every TP rank, with it they are split by ``tp`` (Korthikanti et al. 2022, section 4.2).
"""
from __future__ import annotations

import numpy as np

from cost_models.compute import (ComputeRates, attention_core_flops, attention_time_s,
                                 gemm_time_s, memory_bound_time_s)
from model_specs.model_spec import ModelSpec

#: memory-bound traffic per token of the parts that sequence parallelism splits, in units of
#: ``hidden`` activation elements: two norms (read + write: 4) and two fused
#: bias-dropout-residual adds (read 2, write 1, 1-byte mask = 0.5: 7).
REPLICATED_ELEMENTWISE_UNITS = 11.0
#: kernels per layer outside the GEMMs and attention (norms, activation, adds, rotary, casts).
ELEMENTWISE_KERNELS_FWD = 8.0


def _attention_dims(model: ModelSpec):
    """(qk_dim, v_dim) per head."""
    if model.mla is not None:
        return model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim, model.mla.v_head_dim
    return model.head_dim, model.head_dim


def attention_gemm_shapes(model: ModelSpec, tp):
    """[(n, k), ...] of the attention projections per token row, TP-split (M = tokens)."""
    h, a, g, d = model.hidden_size, model.num_heads, model.num_kv_heads, model.head_dim
    tp = np.asarray(tp, dtype=float)
    if model.mla is not None:
        m = model.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        shapes = []
        if m.q_lora_rank:
            shapes += [(m.q_lora_rank + 0 * tp, h + 0 * tp), (a * qk / tp, m.q_lora_rank + 0 * tp)]
        else:
            shapes += [(a * qk / tp, h + 0 * tp)]
        shapes += [(m.kv_lora_rank + m.qk_rope_head_dim + 0 * tp, h + 0 * tp),
                   (a * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank + 0 * tp),
                   (h + 0 * tp, a * m.v_head_dim / tp)]
        return shapes
    return [((a * d + 2 * g * d) / tp, h + 0 * tp), (h + 0 * tp, a * d / tp)]


def mlp_gemm_shapes(hidden: int, ffn, gated: bool, tp):
    """[(n, k), ...] of one MLP's GEMMs per token row, TP-split."""
    tp = np.asarray(tp, dtype=float)
    up = (2 if gated else 1) * np.asarray(ffn, dtype=float) / tp
    return [(up, hidden + 0 * tp), (hidden + 0 * tp, np.asarray(ffn, dtype=float) / tp)]


def attention_block_costs(model: ModelSpec, rates: ComputeRates, tokens, seq_len, tp, sp):
    """Forward/backward seconds and FLOPs of one attention block (no communication).

    Returns a dict with ``gemm_fwd_s``, ``core_fwd_s``, ``core_bwd_s``, ``elem_fwd_s``,
    ``gemm_flops_fwd``, ``core_flops_fwd``.
    """
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    gemm_fwd = 0.0
    gemm_flops = 0.0
    for n, k in attention_gemm_shapes(model, tp):
        gemm_fwd = gemm_fwd + gemm_time_s(tokens, n, k, rates)
        gemm_flops = gemm_flops + 2.0 * tokens * n * k
    qk, v = _attention_dims(model)
    core_flops = attention_core_flops(tokens, seq_len, model.num_heads / tp, qk, v,
                                      model.sliding_window, model.sliding_window_layer_fraction)
    core_fwd, core_bwd = attention_time_s(core_flops, rates)
    split = np.where(sp, tp, 1.0)
    elem_bytes = tokens * model.hidden_size * rates.act_bytes * (REPLICATED_ELEMENTWISE_UNITS / 2) / split
    elem_fwd = memory_bound_time_s(elem_bytes, rates, ELEMENTWISE_KERNELS_FWD / 2)
    return {"gemm_fwd_s": gemm_fwd, "core_fwd_s": core_fwd, "core_bwd_s": core_bwd,
            "elem_fwd_s": elem_fwd, "gemm_flops_fwd": gemm_flops, "core_flops_fwd": core_flops}


def dense_mlp_costs(model: ModelSpec, rates: ComputeRates, tokens, tp, sp, ffn=None):
    """Forward seconds and FLOPs of one dense MLP block: ``gemm_fwd_s``, ``elem_fwd_s``, ``gemm_flops_fwd``."""
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    ffn = model.ffn_hidden_size if ffn is None else ffn
    gemm_fwd = 0.0
    flops = 0.0
    for n, k in mlp_gemm_shapes(model.hidden_size, ffn, model.gated_mlp, tp):
        gemm_fwd = gemm_fwd + gemm_time_s(tokens, n, k, rates)
        flops = flops + 2.0 * tokens * n * k
    act_units = (3.0 if model.gated_mlp else 2.0) * ffn / tp
    split = np.where(sp, tp, 1.0)
    elem_bytes = tokens * rates.act_bytes * (act_units + model.hidden_size * (REPLICATED_ELEMENTWISE_UNITS / 2) / split)
    elem_fwd = memory_bound_time_s(elem_bytes, rates, ELEMENTWISE_KERNELS_FWD / 2)
    return {"gemm_fwd_s": gemm_fwd, "elem_fwd_s": elem_fwd, "gemm_flops_fwd": flops}


#: bytes per logit of the fused vocab-parallel cross-entropy (fp32 logits: max, exp-sum,
#: loss forward; softmax gradient backward), forward and backward each.
CROSS_ENTROPY_BYTES_PER_LOGIT = 8.0


def lm_head_costs(model: ModelSpec, rates: ComputeRates, tokens, tp):
    """Output layer + loss on the last stage: ``fwd_s``, ``bwd_s``, ``flops_fwd``."""
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    vocab_local = model.vocab_size / tp
    gemm = gemm_time_s(tokens, vocab_local, model.hidden_size, rates)
    loss = memory_bound_time_s(tokens * vocab_local * CROSS_ENTROPY_BYTES_PER_LOGIT, rates, 3)
    return {"fwd_s": gemm + loss, "bwd_s": 2.0 * gemm + loss,
            "flops_fwd": 2.0 * tokens * vocab_local * model.hidden_size}


def embedding_costs(model: ModelSpec, rates: ComputeRates, tokens):
    """Input embedding lookup (forward) and gradient scatter (backward) on the first stage."""
    tokens = np.asarray(tokens, dtype=float)
    fwd = memory_bound_time_s(tokens * model.hidden_size * 2 * rates.act_bytes, rates, 1)
    bwd = memory_bound_time_s(tokens * model.hidden_size * (rates.act_bytes + 8), rates, 2)
    return {"fwd_s": fwd, "bwd_s": bwd}
