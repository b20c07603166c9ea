"""Mamba-2 mixer layers of hybrid Mamba-Transformer models: FLOPs, parameters, time, memory.

The Mamba-2 block (Dao & Gu 2024, "Transformers are SSMs", arXiv 2405.21060, section 7.1;
Megatron-Core ``megatron/core/ssm/mamba_mixer.py``), per token with hidden size h, H heads of
P channels (d_inner = H P), state size N, G groups of B/C projections, conv width K:

1. ``in_proj`` (h -> 2 d_inner + 2 G N + H): z (gate), x, B, C and dt in one GEMM;
2. a depthwise causal conv1d of width K over x, B, C (d_inner + 2 G N channels) and SiLU;
3. the SSD scan (section 6) over chunks of Q tokens;
4. the gated RMSNorm: y * SiLU(z), normalised per group;
5. ``out_proj`` (d_inner -> h).

Tensor parallelism (Megatron-Core ``MambaMixer``): ``in_proj`` is column-parallel and
``out_proj`` row-parallel, so heads, groups and conv channels split over ``tp`` (Megatron
requires G % tp == 0, which keeps the per-group norm local); the block's only collectives are
those of any column/row-parallel pair: one all-reduce per pass (a reduce-scatter + all-gather
pair under sequence parallelism), as for an attention block.

``tokens`` is the tokens one GPU processes per micro-batch (micro_batch * seq_len / cp).
"""
from __future__ import annotations

import numpy as np

from cost_models.compute import ComputeRates, attention_time_s, memory_bound_time_s
from cost_models.layer_costs import (REPLICATED_ELEMENTWISE_UNITS, REPLICATED_ELEMENTWISE_UNITS_BWD,
                                     RESIDUAL_FORK_KERNELS_BWD, _linear_times, block_cast_bytes, cast_times)
from model_specs.model_spec import ModelSpec

#: memory-bound traffic per token of the conv1d + SiLU, in units of conv channels: read the
#: input and write the output (forward); read the output gradient and the input, write the input
#: gradient (backward).
CONV_UNITS = (2.0, 3.0)
#: the gated RMSNorm per token in units of d_inner: read y and z, write the output (forward);
#: read the gradient, y and z, write both gradients (backward).
GATED_NORM_UNITS = (3.0, 5.0)
#: the SSD kernels' memory traffic per token in units of d_inner: read x and write y
#: (forward, B, C and dt are a further 2 G N + H per token); backward reads x, y's gradient
#: and writes x's gradient.
SCAN_IO_UNITS = (2.0, 3.0)
#: kernels of one block's non-GEMM work per pass: conv1d, the SSD chunk kernels (chunk cumsum,
#: chunk state, state passing, chunk scan), the gated norm, the pre-norm and the residual add.
MAMBA_ELEMENTWISE_KERNELS = 8.0


def in_proj_width(model: ModelSpec) -> int:
    """Output width of ``in_proj``: 2 d_inner + 2 G N + H (z, x, B, C, dt)."""
    m = model.mamba
    return 2 * m.d_inner + 2 * m.num_groups * m.state_size + m.num_heads


def conv_channels(model: ModelSpec) -> int:
    """Channels of the depthwise conv1d: x, B and C (d_inner + 2 G N)."""
    m = model.mamba
    return m.d_inner + 2 * m.num_groups * m.state_size


def mamba_params(model: ModelSpec) -> int:
    """Weights of one Mamba-2 mixer, count: in_proj h (2 d_inner + 2 G N + H), the conv1d
    (channels x K weights + channels biases), per-head A_log, D and dt_bias (3 H), the gated
    norm's d_inner weights and out_proj d_inner h (Megatron-Core ``MambaMixer`` tensors)."""
    m, h = model.mamba, model.hidden_size
    c = conv_channels(model)
    return h * in_proj_width(model) + c * (m.conv_kernel + 1) + 3 * m.num_heads + m.d_inner + m.d_inner * h


def mamba_gemm_shapes(model: ModelSpec, tp):
    """[(n, k), ...] of the block's two projections per token row, TP-split (M = tokens)."""
    tp = np.asarray(tp, dtype=float)
    h = model.hidden_size
    return [(in_proj_width(model) / tp, h + 0 * tp), (h + 0 * tp, model.mamba.d_inner / tp)]


def ssd_scan_flops(model: ModelSpec, tokens, tp=1.0):
    """Forward FLOPs of the SSD chunked scan for ``tokens`` tokens on one GPU (heads and groups
    split by ``tp``).

    Dao & Gu 2024, section 6 (the SSD algorithm: a sequence in chunks of Q, four steps), per
    token, counting 2 FLOPs per multiply-add and the full Q x Q blocks the kernels compute:

    * diagonal blocks: the Q x Q kernel C B^T per group (Q N per token and group: 2 Q N G) and
      its product with x per head (Q P per token and head: 2 Q P H);
    * chunk states: B^T x per head (2 N P H);
    * state passing between chunks: N P per chunk and head (2 N P H / Q);
    * state-to-output: C times the incoming state per head (2 N P H).

    Total 2 Q N G + 2 Q P H + 4 N P H + 2 N P H / Q (divided by tp).
    """
    m = model.mamba
    Q, N, P, H, G = m.chunk_size, m.state_size, m.head_dim, m.num_heads, m.num_groups
    per_token = 2.0 * Q * N * G + 2.0 * Q * P * H + 4.0 * N * P * H + 2.0 * N * P * H / Q
    return np.asarray(tokens, dtype=float) * per_token / np.asarray(tp, dtype=float)


#: the SSD kernels' speed, measured: Dao & Gu 2024, figure 10 (A100, head dim 64, state 64):
#: the SSD forward takes as long as FlashAttention-2 over a causal sequence of this length with
#: the same channels (and grows linearly beyond, where attention grows quadratically). Its
#: chunked matmuls are small (Q x N, Q x P tiles) and its state passing sequential, so it
#: reaches a small share of the tensor rate: about a tenth of its FLOPs' worth at 2K.
SSD_EQUIVALENT_CAUSAL_KEYS = 2048
#: the state size of that measurement; the state work (chunk states, state passing,
#: state-to-output) scales with N, assumed here for the whole kernel time
SSD_REFERENCE_STATE = 64


def ssd_attention_equivalent_flops(model: ModelSpec, tokens, tp=1.0):
    """The attention-core forward FLOPs whose fused-kernel time equals the SSD scan's, for
    ``tokens`` tokens on one GPU: a causal attention core over ``SSD_EQUIVALENT_CAUSAL_KEYS``
    keys with d_inner / tp channels (4 x channels x keys / 2 per token), scaled by
    N / ``SSD_REFERENCE_STATE`` (see the constants for the source and the assumption)."""
    m = model.mamba
    per_token = 4.0 * m.d_inner * SSD_EQUIVALENT_CAUSAL_KEYS / 2.0 * (m.state_size / SSD_REFERENCE_STATE)
    return np.asarray(tokens, dtype=float) * per_token / np.asarray(tp, dtype=float)


def mamba_forward_flops(model: ModelSpec, tokens, tp=1.0):
    """Forward FLOPs of one Mamba-2 block on one GPU: the two projections (2 x tokens x n x k),
    the conv1d (2 K per channel and token) and the SSD scan (``ssd_scan_flops``)."""
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    gemm = sum(2.0 * tokens * n * k for n, k in mamba_gemm_shapes(model, tp))
    conv = 2.0 * model.mamba.conv_kernel * conv_channels(model) * tokens / tp
    return gemm + conv + ssd_scan_flops(model, tokens, tp)


def mamba_block_costs(model: ModelSpec, rates: ComputeRates, tokens, tp, sp, scan_mma_share=1.0, current_scaling=False,
                      rht_cast_fusion=False):
    """Seconds and FLOPs of one Mamba-2 layer (mixer, its pre-norm and residual add; no
    communication), with the keys of ``layer_costs.attention_block_costs`` so the step model
    treats it as a sequence-mixing block: the projections as GEMMs (``gemm_*``), the SSD scan as
    the block's core (``core_*``: the time of ``ssd_attention_equivalent_flops`` at the fused
    attention rate with ``attention_time_s``'s backward ratio, never faster than its HBM traffic;
    ``core_flops_fwd`` its own FLOPs, ``ssd_scan_flops``), conv1d, gated norm, pre-norm and
    residual add as element-wise kernels. Projection inputs are quantised by their own kernels
    under low-precision recipes except in_proj's (its pre-norm writes the copy).

    ``scan_mma_share``: share of the fused attention rate the SSD kernels reach. They are Triton
    kernels (``mamba_ssm/ops/triton/ssd_*.py``), measured against FlashAttention-2 on A100, so
    on later chips they run at the portable-kernel share of the best attention kernel's rate
    (``GPUSpec.sync_mma_peak_fraction``; ``attention_time_s``'s ``mma_share``)."""
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    m = model.mamba
    shapes = mamba_gemm_shapes(model, tp)
    casts = cast_times(block_cast_bytes(tokens, shapes, rates.dtype, current_scaling, tp, sp,
                                        rates.fp8_transposed_copy, rht_cast_fusion), rates)
    gemms = _linear_times(tokens, shapes, rates)
    scan_flops = ssd_scan_flops(model, tokens, tp)
    bc_dt = 2.0 * m.num_groups * m.state_size + m.num_heads
    io_f = tokens * (SCAN_IO_UNITS[0] * m.d_inner + bc_dt) / tp * rates.act_bytes
    io_b = tokens * (SCAN_IO_UNITS[1] * m.d_inner + 2.0 * bc_dt) / tp * rates.act_bytes
    mma_f, mma_b = attention_time_s(ssd_attention_equivalent_flops(model, tokens, tp), rates,
                                    mma_share=scan_mma_share)
    core_f = np.maximum(mma_f, io_f / rates.hbm_bytes_per_s + rates.kernel_overhead_s)
    core_b = np.maximum(mma_b, io_b / rates.hbm_bytes_per_s + 2 * rates.kernel_overhead_s)
    split = np.where(sp, tp, 1.0)
    per_tp = tokens * rates.act_bytes / tp
    row = tokens * model.hidden_size * rates.act_bytes / split
    replicated = row * REPLICATED_ELEMENTWISE_UNITS / 2
    replicated_bwd = row * REPLICATED_ELEMENTWISE_UNITS_BWD / 2
    c = conv_channels(model)
    elem_f = memory_bound_time_s(per_tp * (CONV_UNITS[0] * c + GATED_NORM_UNITS[0] * m.d_inner) + replicated,
                                 rates, MAMBA_ELEMENTWISE_KERNELS / 2)
    elem_b = memory_bound_time_s(per_tp * (CONV_UNITS[1] * c + GATED_NORM_UNITS[1] * m.d_inner) + replicated_bwd,
                                 rates, MAMBA_ELEMENTWISE_KERNELS / 2 + RESIDUAL_FORK_KERNELS_BWD)
    conv_flops = 2.0 * m.conv_kernel * c * tokens / tp
    return {**gemms, "gemm_flops_fwd": gemms["gemm_flops_fwd"] + conv_flops,
            "core_fwd_s": core_f, "core_bwd_s": core_b, "core_flops_fwd": scan_flops,
            "elem_fwd_s": elem_f, "elem_bwd_s": elem_b, **casts}


def mamba_activation_terms(model: ModelSpec, micro_batch, seq_len, tp, cp, sp, gemm_input_bytes=None,
                           element_bytes=2.0) -> dict:
    """The tensors one Mamba-2 layer keeps for its backward, bytes for one micro-batch on one
    GPU, by name (Megatron-Core ``MambaMixer`` with the fused ``mamba_chunk_scan_combined`` and
    ``causal_conv1d`` kernels, which save their inputs and recompute the rest):

    * ``norm_inputs``: the pre-norm's input (2h per token in 16-bit; / tp under SP);
    * ``norm_outputs``: the pre-norm's output, in_proj's input (h in ``gemm_input_bytes``);
    * ``in_proj_out``: z, x, B, C, dt (2 d_inner + 2 G N + H, 16-bit, / tp): the conv's input
      and the gate;
    * ``conv_out``: x, B, C after conv1d + SiLU (d_inner + 2 G N, 16-bit, / tp): the scan's inputs;
    * ``scan_out``: y (d_inner, 16-bit, / tp), the gated norm's input, and the per-head fp32
      dt and chunk cumulative sums the scan keeps (2 x 4 bytes x H, / tp);
    * ``gated_norm_out``: out_proj's input (d_inner in ``gemm_input_bytes``, / tp);
    * ``layer_input``: what full recomputation keeps (2h per token, / tp under SP).
    """
    m = model.mamba
    b = np.asarray(micro_batch, dtype=float)
    tokens = b * np.asarray(seq_len, dtype=float) / np.asarray(cp, dtype=float)
    tp = np.asarray(tp, dtype=float)
    e = float(element_bytes) / 2.0
    gb = np.asarray(element_bytes if gemm_input_bytes is None else gemm_input_bytes, dtype=float)
    h = model.hidden_size
    split = np.where(sp, tp, 1.0)
    return {
        "norm_inputs": e * tokens * h * 2.0 / split,
        "norm_outputs": tokens * h * gb / split,
        "in_proj_out": e * tokens * 2.0 * in_proj_width(model) / tp,
        "conv_out": e * tokens * 2.0 * conv_channels(model) / tp,
        "scan_out": e * tokens * 2.0 * m.d_inner / tp + tokens * 8.0 * m.num_heads / tp,
        "gated_norm_out": tokens * m.d_inner * gb / tp,
        "layer_input": e * tokens * h * 2.0 / split,
    }


# ---- a hybrid pattern's layers ----------------------------------------------------------------

def non_moe_kind_shares(model: ModelSpec) -> dict:
    """{kind: share} of a hybrid pattern's layers without routed experts (``mamba``,
    ``attention``, ``mlp``): the step model's ``dense`` slot holds these, at their mean cost
    (the ``moe`` slot holds the ``E`` layers). Empty for a non-hybrid model."""
    counts = model.hybrid_counts()
    if not counts:
        return {}
    rest = counts["mamba"] + counts["attention"] + counts["mlp"]
    if rest == 0:
        return {"mamba": 0.0, "attention": 0.0, "mlp": 0.0}
    return {k: counts[k] / rest for k in ("mamba", "attention", "mlp")}


def mix(parts: dict, shares: dict) -> dict:
    """Share-weighted sum of dicts of arrays with the same keys (``{kind: dict}``)."""
    keys = set().union(*(d.keys() for d in parts.values()))
    return {k: sum(shares[kind] * parts[kind].get(k, 0.0) for kind in parts) for k in keys}
