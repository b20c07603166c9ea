"""Time of one transformer layer of an inference step on one GPU (prefill chunks and decodes).

A step of one engine (one attention-data-parallel rank, ``tp`` GPUs) processes ``P`` prompt
tokens whose queries attend on average to ``Kp`` keys, and one new token for each of ``d``
decoding requests whose context is ``Ld`` tokens long: ``T = P + d`` tokens in all.

Every kernel is timed by its roofline, max(FLOPs / achieved FLOP/s, bytes / achieved HBM
bytes/s), with the serving efficiency of the GPU generation:

* GEMMs (attention projections, dense MLP, shared and routed experts, LM head) read their
  weights once per step and run 2 x T x weights FLOPs at ``gemm_peak_fraction`` of the weight
  format's tensor-core peak (``cost_models.weight_formats``); at decode batch sizes the weight
  bytes dominate (a batched GEMV), at prefill the FLOPs.
* The attention core of decode reads each request's KV cache (``cost_models.kv_cache``); that
  of prefill does the causal FLOPs at ``attention_peak_fraction`` of the 16-bit peak (of the
  FP8 peak where the engine runs its context FMHA / context MLA in FP8 over an FP8 KV cache,
  ``ServingBehaviour.prefill_attention_format``: TensorRT-LLM). MLA
  decodes in the absorbed form (queries projected into the latent: scores over
  kv_lora + rope, values over kv_lora; DeepSeek-V2, arXiv 2405.04434, appendix C) and prefills
  in the expanded form (qk_nope + rope and v_head per head). The absorbed decode does
  2 x heads/tp x (2 kv_lora + rope) FLOPs per cached latent of (kv_lora + rope) x kv_bytes
  bytes: ~60 FLOP/byte at 16 heads a GPU and an FP8 cache, so its compute side matters; it
  runs in a decode kernel of its own (FlashMLA, FlashInfer MLA, TRT-LLM's MLA kernels), not
  the prefill FMHA, and where that kernel's compute-bound rate is published
  (``MLA_DECODE_PEAK_FRACTION``: Hopper) that rate is used; Blackwell, with none published,
  runs it at Hopper's published rate (``MLA_DECODE_PRIOR_FLOPS_PER_S``, an unfitted prior);
  other generations at the prefill attention fraction.
* A routed-expert layer streams only the experts some token activated
  (``cost_models.expert_activation``): the expert group (moe_tp x moe_ep GPUs = tp x adp) sees
  the tokens of all adp ranks; the step waits for the GPU with the most active experts, so the
  experts streamed are the busiest GPU's expected count (``expected_busiest_gpu_experts``), not
  the mean over the moe_ep GPUs; each active expert it holds (a slice of it under expert
  tensor parallelism) adds ``expert_fixed_s``, the grouped GEMMs' per-expert tile cost.
* Norms, activations, residual adds, rotary embedding: memory-bound bytes.
* Activation quantisation of W8A8 / W4A4 GEMM inputs in kernels of their own
  (``activation_quant_s``, the engine's ``ServingBehaviour.activation_quant_inputs``): one
  kernel per quantised input, memory-bound (read 16-bit, write the quantised bytes and scales).

Kernel counts per layer (``KERNELS``) say how many kernels each block launches in the engines'
fused implementations; each costs ``kernel_fixed_s`` of GPU time. All inputs may be numpy
arrays (one row per layout); model, hardware and formats are scalars.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cost_models.attention_keys import causal_window_mean_keys
from cost_models.expert_activation import expected_busiest_gpu_experts
from cost_models.kv_cache import kv_bytes_per_token_layer, kv_heads_per_gpu, layer_counts, linear_state_bytes_per_layer
from cost_models.params import routed_expert_width
from cost_models.weight_formats import compute_dtype, weight_bytes
from hardware_specs.gpu_spec import GPUSpec
from hardware_specs.serving_efficiency import ServingEfficiency
from model_specs.model_spec import ModelSpec

#: activation / communication bytes per element (16-bit)
ACT_BYTES = 2.0
#: kernels per layer block in fused engine implementations: softmax attention (norm, QKV GEMM,
#: rotary + KV write, attention, output GEMM, residual/all-reduce), MLA (q_a, q-norm, q_b,
#: kv_a, kv-norm, rotary + latent write, absorb GEMMs x2, attention, output GEMM, residual),
#: linear attention (norm, in-projections, conv, gates, chunked scan / state update, gated
#: norm, output GEMM, residual), dense MLP (norm, gate-up GEMM, activation, down GEMM),
#: routed experts (router GEMM, top-k, permute, two grouped GEMMs, activation, finalize) and the
#: LM head + sampling (norm, GEMM, softmax / top-p, sample).
KERNELS = {"attention": 6.0, "mla": 11.0, "linear_attention": 8.0, "mlp": 4.0, "moe": 7.0, "head": 4.0}
#: compute-bound rate of the absorbed-MLA decode kernel as a fraction of the GPU's dense 16-bit
#: peak, per GPU generation where it is published: FlashMLA (deepseek-ai/FlashMLA README,
#: February 2025: "up to 3000 GB/s in memory-bound configuration and 580 TFLOPS in
#: computation-bound configuration on H800 SXM5"; the H800 SXM5 has the H100 SXM5's 989.4 TFLOPS
#: dense BF16). Not fitted. A generation absent here and from ``MLA_DECODE_PRIOR_FLOPS_PER_S``
#: uses the prefill ``attention_peak_fraction``.
MLA_DECODE_PEAK_FRACTION = {"hopper": 580.0 / 989.4}
#: FLOP/s of the absorbed-MLA decode core where no rate is published, an UNFITTED PRIOR every
#: prediction resting on it carries. Blackwell: no dense SM100 MLA decode rate is published;
#: the one SM100 MLA decode figure, FlashMLA's sparse FP8 kernel, "up to 350 TFlops on B200 (which
#: is not really optimized yet)" (deepseek-ai/FlashMLA README, 2025), is below the H800's 580, so
#: the decode kernel is taken to reach Hopper's published absolute rate, not its fraction of
#: Blackwell's 2.27x larger peak (0.586 x 2,250 = 1,319 TFLOPS, tried 2026-12-05: DeepSeek decode
#: under attention DP on GB300 / B200 then predicted 15-40% fast, SGLang disagg TPOT 15.6% ->
#: 19.1% after the refit). Before either, Blackwell fell back to its fitted prefill attention
#: fraction (0.2393 x 2,250 = 538 TFLOPS), below the H100's 580: a B200 decoded the same MLA
#: batch slower than an H200; at 580 it decodes it as fast.
MLA_DECODE_PRIOR_FLOPS_PER_S = {"blackwell": 580e12}
#: memory-bound traffic per token per layer besides the GEMMs, in hidden-size elements: two
#: RMSNorms (read + write each), two residual adds (read 2, write 1 each), rotary on q and k.
ELEMENTWISE_H_PER_TOKEN = 12.0


#: bytes per element a quantised activation is written as, its scales included, per weight format
#: whose GEMMs take quantised activations: per-tensor FP8 (one fp32 scale a tensor: 1 byte);
#: fp8_block's per-token groups of 128 with an fp32 scale each (DeepSeek-V3 report, section 3.3.2:
#: 1 + 4/128); NVFP4's e2m1 pairs with an fp8 scale per 16 values (NVIDIA, "Introducing NVFP4",
#: 2025: 0.5 + 1/16)
QUANT_ACT_BYTES = {"fp8": 1.0, "fp8_block": 1.0 + 4.0 / 128.0, "nvfp4": 0.5 + 1.0 / 16.0}


def _f(x):
    return np.asarray(x, dtype=float)


@dataclass(frozen=True)
class LayerRates:
    """Achieved rates of one GPU for inference kernels (from ``ServingEfficiency``)."""

    dense_flops_per_s: float     # GEMMs with weights in the dense (attention / MLP) format
    expert_flops_per_s: float    # GEMMs with weights in the routed-expert format
    head_flops_per_s: float      # 16-bit GEMMs (LM head, router)
    attention_flops_per_s: float  # attention core at the 16-bit rate (non-MLA decode FLOPs, linear-attention scan)
    prefill_attention_flops_per_s: float  # prefill attention core (FMHA / context MLA), in its own dtype
    mla_decode_flops_per_s: float  # absorbed-MLA decode core (16-bit; ``MLA_DECODE_PEAK_FRACTION``, ``..._PRIOR_FLOPS_PER_S``)
    hbm_bytes_per_s: float
    kernel_fixed_s: float
    expert_fixed_s: float        # per active routed expert a GPU holds, per MoE layer
    dense_weight_bytes: float    # bytes per weight element, dense format
    expert_weight_bytes: float   # bytes per weight element, routed-expert format


def layer_rates(gpu: GPUSpec, eff: ServingEfficiency, dense_format: str, expert_format: str,
                int4_group_size: int = 0, prefill_attention_format: str = "bf16") -> LayerRates:
    """``LayerRates`` of ``gpu`` for weights in ``dense_format`` / ``expert_format`` (an int4
    checkpoint's ``int4_group_size``, ``weight_formats.weight_bytes``).

    ``prefill_attention_format``: the dtype the engine runs the prefill attention core's two
    BMMs in (``ServingBehaviour.prefill_attention_format``): ``bf16``, or ``fp8`` where the
    engine quantises the queries to its FP8 KV cache's format and runs an FP8 FMHA (TensorRT-LLM),
    which then does its FLOPs at ``attention_peak_fraction`` of the FP8 dense peak (twice the
    16-bit one on Hopper and Blackwell; a GPU without FP8 tensor cores keeps its 16-bit peak,
    ``weight_formats.compute_dtype``)."""
    sixteen = compute_dtype("bf16", gpu)
    if gpu.generation in MLA_DECODE_PEAK_FRACTION:
        mla_flops_per_s = gpu.sustained_flops(sixteen) * MLA_DECODE_PEAK_FRACTION[gpu.generation]
    elif gpu.generation in MLA_DECODE_PRIOR_FLOPS_PER_S:
        # Hopper's published rate, an unfitted prior; never above Hopper's published fraction of
        # this GPU's own peak (a GPU file of the generation with a smaller peak)
        mla_flops_per_s = min(MLA_DECODE_PRIOR_FLOPS_PER_S[gpu.generation],
                              gpu.sustained_flops(sixteen) * MLA_DECODE_PEAK_FRACTION["hopper"])
    else:
        mla_flops_per_s = gpu.sustained_flops(sixteen) * eff.attention_peak_fraction
    return LayerRates(
        dense_flops_per_s=gpu.sustained_flops(compute_dtype(dense_format, gpu)) * eff.gemm_peak_fraction,
        expert_flops_per_s=gpu.sustained_flops(compute_dtype(expert_format, gpu)) * eff.gemm_peak_fraction,
        head_flops_per_s=gpu.sustained_flops(sixteen) * eff.gemm_peak_fraction,
        attention_flops_per_s=gpu.sustained_flops(sixteen) * eff.attention_peak_fraction,
        prefill_attention_flops_per_s=(gpu.sustained_flops(compute_dtype(prefill_attention_format, gpu))
                                       * eff.attention_peak_fraction),
        mla_decode_flops_per_s=mla_flops_per_s,
        hbm_bytes_per_s=gpu.hbm_bw_bytes_per_s * eff.decode_hbm_fraction,
        kernel_fixed_s=eff.kernel_fixed_s,
        expert_fixed_s=eff.expert_fixed_s,
        dense_weight_bytes=weight_bytes(dense_format, int4_group_size),
        expert_weight_bytes=weight_bytes(expert_format, int4_group_size),
    )


def gemm_s(tokens, weights, flops_per_s, weight_bytes_per_elem, rates: LayerRates, in_dim, out_dim):
    """Roofline time of a GEMM of ``tokens`` rows against ``weights`` elements (in x out)."""
    t = _f(tokens)
    flops = 2.0 * t * _f(weights)
    traffic = _f(weights) * weight_bytes_per_elem + t * (_f(in_dim) + _f(out_dim)) * ACT_BYTES
    return np.maximum(flops / flops_per_s, traffic / rates.hbm_bytes_per_s)


# ---- attention ----------------------------------------------------------------------------

def attention_weights_per_gpu(model: ModelSpec, tp):
    """(weight elements one GPU holds for one softmax-attention block, its output width)."""
    h, a, d = model.hidden_size, model.num_heads, model.head_dim
    tp = _f(tp)
    if model.mla is not None:
        m = model.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        replicated = h * (m.kv_lora_rank + m.qk_rope_head_dim) + (h * m.q_lora_rank if m.q_lora_rank else 0.0)
        q_up = (m.q_lora_rank if m.q_lora_rank else h) * a * qk
        split = q_up + m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim) + a * m.v_head_dim * h
        return replicated + split / tp
    return 2.0 * h * a * d / tp + 2.0 * h * d * kv_heads_per_gpu(model, tp)


def linear_attention_weights_per_gpu(model: ModelSpec, tp):
    """Weight elements one GPU holds for one linear-attention block."""
    from cost_models.params import linear_attention_params
    return linear_attention_params(model) / _f(tp)


def attention_block_s(model: ModelSpec, rates: LayerRates, tp, prefill_tokens, prefill_keys, decode_reqs,
                      decode_ctx, kv_bytes: float, decode_queries=1.0):
    """Seconds of the attention part of one layer, averaged over the model's layer kinds
    (full, sliding-window, linear attention): projections + attention core.

    ``decode_queries``: tokens each decoding request puts through the step (1; k + 1 when the
    step verifies k drafted tokens): the projections and the core's FLOPs scale with it, the
    KV cache is read once for all of them (the verification kernels attend the k + 1 queries of
    a request in one pass over its cache)."""
    h, a = model.hidden_size, model.num_heads
    tp = _f(tp)
    P, Kp, d, Ld = _f(prefill_tokens), _f(prefill_keys), _f(decode_reqs), _f(decode_ctx)
    q = _f(decode_queries)
    T = P + d * q
    full, window, linear = layer_counts(model)
    n = float(model.num_layers)
    heads = a / tp

    w = attention_weights_per_gpu(model, tp)
    proj = gemm_s(T, w, rates.dense_flops_per_s, rates.dense_weight_bytes, rates, h, h)

    # attention core per softmax layer: decode reads the KV cache, prefill does causal FLOPs
    per_token_kv = kv_bytes_per_token_layer(model, tp, kv_bytes)
    if model.mla is not None:
        m = model.mla
        dec_dims = (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
        pre_dims = m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim
        dec_flops_per_s = rates.mla_decode_flops_per_s
    else:
        dec_dims = pre_dims = 2.0 * model.head_dim
        dec_flops_per_s = rates.attention_flops_per_s

    def core(ctx_dec, keys_pre):
        dec_bytes = d * ctx_dec * per_token_kv
        dec_flops = 2.0 * d * q * ctx_dec * heads * dec_dims
        dec = np.maximum(dec_bytes / rates.hbm_bytes_per_s, dec_flops / dec_flops_per_s)
        pre_flops = 2.0 * P * keys_pre * heads * pre_dims
        # the prefill writes its new KV entries
        pre = pre_flops / rates.prefill_attention_flops_per_s + P * per_token_kv / rates.hbm_bytes_per_s
        return dec + pre

    core_full = core(Ld, Kp)
    if window:
        win = float(model.sliding_window)
        # a decode reads at most the window; a prompt's queries attend to the mean of min(i, w)
        # over its positions, not the window of its mean (``attention_keys``)
        core_window = core(np.minimum(Ld, win), causal_window_mean_keys(Kp, win))
    else:
        core_window = 0.0
    softmax = proj + core_full * (full / max(full + window, 1e-9)) + core_window * (window / max(full + window, 1e-9))
    if model.mla is not None:
        kernels_softmax = KERNELS["mla"]
    else:
        kernels_softmax = KERNELS["attention"]
    if not linear:
        return softmax, np.full_like(T, kernels_softmax)

    la = model.linear_attention
    wl = linear_attention_weights_per_gpu(model, tp)
    lin_proj = gemm_s(T, wl, rates.dense_flops_per_s, rates.dense_weight_bytes, rates, h, h)
    state = linear_state_bytes_per_layer(model, tp)
    # decode: read and write each request's state once; prefill: a chunked scan of
    # ~4 x heads x dk x dv FLOPs per token (Yang et al. 2025, section 3.3), at the attention rate
    lin_dec = 2.0 * d * state / rates.hbm_bytes_per_s        # the state is read and written once per step
    lin_pre = 4.0 * P * la.num_value_heads / tp * la.key_head_dim * la.value_head_dim / rates.attention_flops_per_s
    lin_total = lin_proj + np.maximum(lin_dec, 0.0) + lin_pre
    mean = (softmax * (full + window) + lin_total * linear) / n
    kernels = (kernels_softmax * (full + window) + KERNELS["linear_attention"] * linear) / n
    return mean, np.full_like(T, kernels)


# ---- MLP / experts --------------------------------------------------------------------------

def dense_mlp_s(model: ModelSpec, rates: LayerRates, tp, tokens, ffn: int):
    """Seconds of one dense (gated) MLP of width ``ffn`` split over tp, for ``tokens`` tokens."""
    mats = 3.0 if model.gated_mlp else 2.0
    w = mats * model.hidden_size * ffn / _f(tp)
    return gemm_s(tokens, w, rates.dense_flops_per_s, rates.dense_weight_bytes, rates,
                  model.hidden_size, ffn / _f(tp) * (mats - 1.0))


def moe_block_s(model: ModelSpec, rates: LayerRates, tp, adp, moe_tp, moe_ep, tokens):
    """Seconds of one routed-expert layer's MLP part on one GPU (router, activated routed
    experts, shared experts), for ``tokens`` tokens per attention-DP rank."""
    moe = model.moe
    h = model.hidden_size
    d_e = routed_expert_width(model)      # the experts' width: LatentMoE's latent size, else h
    mats = 3.0 if model.gated_mlp else 2.0
    T = _f(tokens)
    group_tokens = T * _f(adp)            # tokens of every adp rank meet in the expert group
    expert_w = mats * d_e * moe.expert_ffn_hidden_size / _f(moe_tp)
    # the busiest of the moe_ep GPUs: the step and the combine after it wait for it
    active_local = expected_busiest_gpu_experts(moe.num_experts, moe.top_k, group_tokens, moe_ep)
    routed_rows = group_tokens * moe.top_k / _f(moe_ep)      # rows one GPU's experts process
    flops = 2.0 * routed_rows * expert_w
    traffic = (active_local * expert_w * rates.expert_weight_bytes
               + routed_rows * (d_e + moe.expert_ffn_hidden_size / _f(moe_tp)) * 2.0 * ACT_BYTES)
    # each active expert slice also pays a fixed time its bytes do not shrink
    # (``ServingEfficiency.expert_fixed_s``)
    routed = (np.maximum(flops / rates.expert_flops_per_s, traffic / rates.hbm_bytes_per_s)
              + active_local * rates.expert_fixed_s)
    router = gemm_s(T, h * moe.num_experts, rates.head_flops_per_s, 2.0, rates, h, moe.num_experts)
    # LatentMoE: the down and up projections around the experts (two GEMMs of h x latent,
    # ``params.latent_projection_params``), whole on every GPU like the router beside them
    if moe.latent_size:
        router = router + 2.0 * gemm_s(T, h * d_e, rates.dense_flops_per_s, rates.dense_weight_bytes, rates, h, d_e)
    shared_ffn = moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size)
    shared = dense_mlp_s(model, rates, tp, T, shared_ffn) if shared_ffn else 0.0
    kernels = KERNELS["moe"] + (KERNELS["mlp"] - 1.0 if shared_ffn else 0.0)
    return routed + router + shared, kernels


def activation_quant_s(model: ModelSpec, rates: LayerRates, tp, tokens, inputs, weight_format: str, ffn: int,
                       norm_fused=False):
    """(attention seconds, attention kernels, MLP seconds, MLP kernels) per layer of the
    activation-quantisation kernels an engine launches before a softmax-attention layer's and a
    dense MLP layer's GEMMs, for ``tokens`` tokens: one kernel per GEMM input named in ``inputs``
    (``hardware_specs.serving_behaviour.ACTIVATION_QUANT_INPUTS``: qkv and o_proj of the
    attention block, gate_up and down of the MLP), each reading the 16-bit input (2 bytes an
    element) and writing it in ``weight_format``'s activation bytes (``QUANT_ACT_BYTES``), at the
    achieved HBM bandwidth. Widths per GPU: qkv and gate_up take the hidden size h, o_proj the
    heads' a x head_dim / tp, down ffn / tp. ``norm_fused`` (numpy bool, per row): the all-reduce
    fused with the norm before qkv and gate_up quantises them (no kernel, no bytes)."""
    h = model.hidden_size
    tp = _f(tp)
    T = _f(tokens)
    per_elem = (ACT_BYTES + QUANT_ACT_BYTES[weight_format]) / rates.hbm_bytes_per_s
    keep = np.where(norm_fused, 0.0, 1.0)
    widths = {"qkv": h * keep, "o_proj": model.num_heads * model.head_dim / tp, "gate_up": h * keep,
              "down": ffn / tp}
    kernels = {"qkv": keep, "o_proj": 1.0, "gate_up": keep, "down": 1.0}
    att = [i for i in inputs if i in ("qkv", "o_proj")]
    mlp = [i for i in inputs if i in ("gate_up", "down")]
    zero = 0.0 * T * tp
    att_s = zero + sum((T * widths[i] * per_elem for i in att), 0.0)
    mlp_s = zero + sum((T * widths[i] * per_elem for i in mlp), 0.0)
    att_k = zero + sum((kernels[i] for i in att), 0.0)
    mlp_k = zero + sum((kernels[i] for i in mlp), 0.0)
    return att_s, att_k, mlp_s, mlp_k


def elementwise_s(model: ModelSpec, rates: LayerRates, tokens):
    """Memory-bound kernels of one layer (norms, residual adds, rotary), seconds."""
    return _f(tokens) * model.hidden_size * ELEMENTWISE_H_PER_TOKEN * ACT_BYTES / rates.hbm_bytes_per_s


def lm_head_s(model: ModelSpec, rates: LayerRates, tp, logits_tokens, head_dp=1.0):
    """LM head GEMM (vocab split over tp) and sampling for ``logits_tokens`` tokens, seconds.

    ``head_dp`` > 1: the vocabulary is split over tp x head_dp GPUs (``ServingBehaviour.
    lm_head_split_over_attention_dp``) and each GPU multiplies the gathered tokens of all
    head_dp attention-DP ranks (head_dp x ``logits_tokens`` rows) against its V / (tp head_dp)
    rows (SGLang ``LogitsProcessor``: ``dp_gather_replicate`` then the head); sampling stays each
    rank's own tokens."""
    g = _f(tp) * _f(head_dp)
    w = model.vocab_size * model.hidden_size / g
    head = gemm_s(_f(logits_tokens) * _f(head_dp), w, rates.head_flops_per_s, 2.0, rates, model.hidden_size,
                  model.vocab_size / g)
    # softmax / top-p over the logits: read fp32 logits a few times
    sample = _f(logits_tokens) * model.vocab_size / _f(tp) * 4.0 * 3.0 / rates.hbm_bytes_per_s
    return head + sample


def prefill_flops(model: ModelSpec, tokens, keys):
    """FLOPs of a prefill of ``tokens`` prompt tokens whose queries attend to ``keys`` keys on
    average (isl / 2 for a causal prompt), whole model, one copy: 2 x tokens x the weights a
    token multiplies (attention projections, the dense MLP or the top-k routed and shared
    experts, the router) + the attention core, 2 x tokens x keys x heads x (qk + v) per softmax
    layer (window layers: the mean over the prompt's queries of min(position, window),
    ``attention_keys.causal_window_mean_keys``), + the LM head for the one sampled token.
    Linear-attention layers' scans are not counted (a few percent)."""
    from cost_models.params import dense_layer_params, moe_layer_params
    t, k = _f(tokens), _f(keys)
    layer_weights = model.num_dense_layers * (dense_layer_params(model) - 2 * model.hidden_size)
    layer_weights += model.num_moe_layers * (moe_layer_params(model, active=True) - 2 * model.hidden_size)
    if model.mla is not None:
        m = model.mla
        dims = m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim
    else:
        dims = 2.0 * model.head_dim
    full, window, _ = layer_counts(model)
    keys_window = causal_window_mean_keys(k, model.sliding_window) if window else 0.0
    core = 2.0 * t * model.num_heads * dims * (full * k + window * keys_window)
    head = 2.0 * model.vocab_size * model.hidden_size
    return 2.0 * t * layer_weights + core + head
