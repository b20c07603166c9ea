"""Compute time of the operations in one transformer layer, by roofline with achieved efficiency.

A GEMM of shape (M, N, K) does 2*M*N*K FLOPs and moves (M*K + K*N + M*N) elements. Its time is
the larger of FLOPs / (peak x plateau x shape factor) and bytes / (HBM bandwidth x achieved
fraction), plus a fixed kernel overhead. The shape factor is tile and wave quantization on the
chip's SMs (``wave_shape_factor``: padded output tiles, a partly idle last wave, split-K for
too few tiles, each tile's K-pipeline prologue); a K stage holds more elements in a faster
dtype, so a short-K GEMM gains less from FP8. Chips without SMs in that sense (CPUs, TPUs) use
a smooth prod x / (x + gemm_half_dim) instead.
A linear layer's backward runs two GEMMs of their own shapes (``linear_gemm_times_s``): the
data gradient reduces over the output features, the weight gradient over the tokens.
Memory-bound kernels (norms, activation functions, dropout, residual adds, casts) are timed by
the bytes they read and write. The attention core is FLOP-counted with the causal mask
halving the work (fused kernels skip masked blocks) and runs at a fitted fraction of the
16-bit peak, plus its softmax exponentials at the chip's special-function-unit rate.

Every function takes numpy arrays or scalars (planner and simulator share them).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from cost_models.attention_keys import causal_window_mean_keys
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.gpu_spec import GPUSpec

#: bytes of one activation element (bf16/fp16 activations; fp8 runs keep bf16 activations).
ACT_BYTES = 2
FULL_PRECISION = ("fp32", "tf32")


def activation_bytes(dtype: str) -> float:
    """Bytes per activation / communicated element: 4 in fp32 training, else 2 (16-bit)."""
    return 4.0 if dtype in FULL_PRECISION else float(ACT_BYTES)
LOW_PRECISION = ("fp8", "mxfp8", "nvfp4")
#: bytes per element of a GEMM operand in each dtype (nvfp4 packs two values per byte; scales
#: add ~1/16 for mx formats and ~1/16 for nvfp4 with 16-element blocks).
OPERAND_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "mxfp8": 1.03,
                 "nvfp4": 0.56}


@dataclass(frozen=True)
class ComputeRates:
    """Achieved rates for one GPU, efficiency model and GEMM dtype."""

    gemm_flops_per_s: float        # plateau GEMM FLOP/s in the GEMM dtype
    attn_flops_per_s: float        # fused attention core FLOP/s (16-bit)
    hbm_bytes_per_s: float         # achieved memory bandwidth
    half_dim: float
    kernel_overhead_s: float
    operand_bytes: float
    dtype: str = "bf16"            # the GEMM dtype (quantisation costs: ``layer_costs``)
    act_bytes: float = ACT_BYTES   # bytes per activation element
    k_half_dim: float | None = None  # half_dim of the reduction dimension, elements; None: half_dim
    exp_per_s: float = float("inf")  # softmax exponentials per second (special-function units)
    softmax_exposed: float = 1.0     # share of the softmax time not hidden under the matmuls
    sm_count: int | None = None      # SMs: GEMM tiles run in waves of this many (None: smooth factor)
    k_stage_scale: float = 1.0       # elements per K stage relative to 16-bit (peak ratio)
    fp8_transposed_copy: bool = True  # per-tensor FP8 keeps a transposed copy (GPUSpec.fp8_gemm_any_layout)


def kernel_counting_rates(rates: ComputeRates) -> ComputeRates:
    """Rates under which every time function of this module returns the number of kernels it
    launches: work is free and each kernel costs one "second" of overhead. The layer cost
    functions evaluated with them count a pass's kernels with no second bookkeeping to drift."""
    inf = float("inf")
    return replace(rates, gemm_flops_per_s=inf, attn_flops_per_s=inf, hbm_bytes_per_s=inf, exp_per_s=inf,
                   kernel_overhead_s=1.0)


def sixteen_bit_dtype(gpu: GPUSpec) -> str:
    """The 16-bit dtype ``gpu`` trains in (bf16, else fp16, else fp32 on chips with neither)."""
    return "bf16" if "bf16" in gpu.peak_flops_per_s else ("fp16" if "fp16" in gpu.peak_flops_per_s else "fp32")


def compute_rates(gpu: GPUSpec, eff: EfficiencyModel, dtype: str) -> ComputeRates:
    """Achieved GEMM, attention and memory rates of ``gpu`` in ``dtype``."""
    attn_dtype = sixteen_bit_dtype(gpu) if dtype in LOW_PRECISION else dtype
    # a GEMM tile's fixed start-up and epilogue time does not shrink with a faster dtype, while
    # each step of its K loop runs at the tensor cores' rate for the dtype: along K the fixed
    # time is worth peak(dtype) / peak(16-bit) times as many elements
    plateau = gpu.sustained_flops(dtype) * eff.gemm_fraction(dtype)
    if dtype in LOW_PRECISION:
        k_half_dim = eff.gemm_half_dim * gpu.peak_flops(dtype) / gpu.peak_flops(sixteen_bit_dtype(gpu))
    else:
        k_half_dim = eff.gemm_half_dim
    return ComputeRates(
        gemm_flops_per_s=plateau,
        attn_flops_per_s=gpu.sustained_flops(attn_dtype) * eff.attention_peak_fraction,
        hbm_bytes_per_s=gpu.hbm_bw_bytes_per_s * eff.hbm_fraction,
        half_dim=eff.gemm_half_dim,
        kernel_overhead_s=eff.kernel_overhead_s,
        operand_bytes=OPERAND_BYTES.get(dtype, 2.0),
        dtype=dtype,
        act_bytes=activation_bytes(dtype),
        k_half_dim=k_half_dim,
        exp_per_s=gpu.sfu_exp_per_s or float("inf"),
        softmax_exposed=eff.exposed_softmax_fraction,
        sm_count=gpu.sm_count,
        k_stage_scale=(gpu.peak_flops(dtype) / gpu.peak_flops(sixteen_bit_dtype(gpu))) if dtype in LOW_PRECISION else 1.0,
        fp8_transposed_copy=not gpu.fp8_gemm_any_layout,
    )


#: output tiles (M x N) of the tensor-core GEMM kernels cuBLAS / CUTLASS choose among: the
#: heuristic picks, per problem, the one that keeps the SMs busiest (small problems get small
#: tiles)
GEMM_TILES = ((256.0, 128.0), (128.0, 256.0), (128.0, 128.0), (128.0, 64.0), (64.0, 128.0), (64.0, 64.0))
#: K elements (16-bit) a tile spends filling and draining its multistage K pipeline (two stages
#: of 64: CUTLASS mainloops keep 3-5 stages in flight and the first ones run unoverlapped)
GEMM_K_PROLOGUE = 128.0
#: shortest K per split when cuBLAS splits a GEMM along K to fill the SMs
MIN_SPLIT_K = 512.0
_TILE_M = np.array([t[0] for t in GEMM_TILES])
_TILE_N = np.array([t[1] for t in GEMM_TILES])


#: largest operand (elements) whose wave shape factor is memoised: the planner's and the fitters'
#: calls are small arrays of a few GEMM shapes, asked again and again (the fit's trials price the
#: same rows with other efficiency factors, which this factor does not read)
_MEMO_ELEMENTS = 64


def wave_shape_factor(m, n, k, sm_count, k_stage_scale=1.0, with_waves=False):
    """Fraction of the plateau a (m, n, k) GEMM reaches on a GPU of ``sm_count`` SMs.

    Its output is cut into tiles (``GEMM_TILES``; the last row and column padded:
    ``m n / (tiles x tile area)``), which run in waves of one tile per SM, the last wave partly
    idle: ``tiles / (ceil(tiles / SMs) x SMs)``; with fewer tiles than SMs the K loop is split
    (split-K, at least ``MIN_SPLIT_K`` per split) to fill them. The kernel library picks the tile
    with the least waste. Each tile pays its K pipeline's prologue: ``k' / (k' + GEMM_K_PROLOGUE)``
    of the split's K (scaled to the dtype's elements per stage). This is the standard account of
    tensor-core GEMM efficiency (NVIDIA "Matrix Multiplication Background User's Guide": tile
    and wave quantization).

    ``with_waves``: return (factor, wave fill) where the wave fill is the chosen tile's
    ``tiles / (ceil(tiles / SMs) x SMs)`` term alone: the share of the SM-time of its waves that
    the last, partly idle wave does not waste (``grouped_gemm_time_s`` lets concurrent GEMMs
    fill that idle part).
    """
    m, n, k = (np.maximum(np.asarray(x, dtype=float), 1.0) for x in (m, n, k))
    if m.size <= _MEMO_ELEMENTS and n.size <= _MEMO_ELEMENTS and k.size <= _MEMO_ELEMENTS \
            and np.isfinite(m).all() and np.isfinite(n).all() and np.isfinite(k).all():
        # finite operands only: inf or NaN print numpy warnings, which a memoised answer would hide
        try:
            out = _wave_shape_memo(m.shape, m.tobytes(), n.shape, n.tobytes(), k.shape, k.tobytes(),
                                   sm_count, k_stage_scale, with_waves)
        except TypeError:            # an unhashable sm_count or k_stage_scale (an array): no memo
            return _wave_shape(m, n, k, sm_count, k_stage_scale, with_waves)
        # a copy of an array result: a caller writing into it must not change the memo
        return tuple(_fresh(x) for x in out) if with_waves else _fresh(out)
    return _wave_shape(m, n, k, sm_count, k_stage_scale, with_waves)


def _fresh(x):
    return x.copy() if isinstance(x, np.ndarray) else x


@lru_cache(maxsize=8192, typed=True)     # typed: 132 and 132.0 stay two keys
def _wave_shape_memo(m_shape, m_bytes, n_shape, n_bytes, k_shape, k_bytes, sm_count, k_stage_scale, with_waves):
    """``_wave_shape`` of the operands given as (shape, float64 bytes): the same numbers, memoised."""
    m, n, k = (np.frombuffer(b, dtype=float).reshape(shape)
               for shape, b in ((m_shape, m_bytes), (n_shape, n_bytes), (k_shape, k_bytes)))
    return _wave_shape(m, n, k, sm_count, k_stage_scale, with_waves)


def _wave_shape(m, n, k, sm_count, k_stage_scale, with_waves):
    """``wave_shape_factor`` of float operands already raised to at least 1."""
    # every candidate tile at once along a leading axis (one pass of array operations, not one
    # per tile: the planner calls this tens of thousands of times on small arrays)
    shape = (len(GEMM_TILES),) + (1,) * max(m.ndim, n.ndim, k.ndim)
    tm = _TILE_M.reshape(shape)
    tn = _TILE_N.reshape(shape)
    tiles = np.ceil(m / tm) * np.ceil(n / tn)
    padding = m * n / (tiles * tm * tn)
    # np.clip's bounds, without its overhead (min(max(x, lo), hi): the same numbers)
    split = np.minimum(np.maximum(np.floor(sm_count / tiles), 1.0), np.maximum(np.floor(k / MIN_SPLIT_K), 1.0))
    work = tiles * split
    waves = work / (np.ceil(work / sm_count) * sm_count)
    k_split = k / split
    util = padding * waves * k_split / (k_split + GEMM_K_PROLOGUE * k_stage_scale)
    if with_waves:
        pick = util.argmax(axis=0)[None]
        return (np.take_along_axis(util, pick, axis=0)[0],
                np.take_along_axis(np.broadcast_to(waves, util.shape), pick, axis=0)[0])
    return util.max(axis=0)


def gemm_shape_factor(m, n, k, half_dim, k_half_dim=None, sm_count=None, k_stage_scale=1.0):
    """Fraction of the plateau a (m, n, k) GEMM reaches: by tile and wave quantization on a chip
    with SMs (``wave_shape_factor``); else (CPUs, TPUs) the smooth prod x / (x + half_dim), with
    ``k_half_dim`` (default ``half_dim``) for the reduction dimension k."""
    if sm_count:
        return wave_shape_factor(m, n, k, sm_count, k_stage_scale)
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    kh = half_dim if k_half_dim is None else k_half_dim
    return (m / (m + half_dim)) * (n / (n + half_dim)) * (k / (k + kh))


def gemm_traffic_bytes(m, n, k, rates: ComputeRates):
    """HBM bytes a (m, n, k) GEMM moves: both operands in the GEMM dtype, output in 16/32-bit."""
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    return (m * k + k * n) * rates.operand_bytes + m * n * rates.act_bytes


def gemm_roofline_s(m, n, k, rates: ComputeRates, with_tail=False):
    """One (m, n, k) GEMM's time without its launch overhead, seconds: the larger of its FLOPs at
    the plateau times the shape factor (``gemm_shape_factor``) and its HBM traffic
    (``gemm_traffic_bytes``).

    ``with_tail``: return (time, tail), the tail being the part of the time its partly filled
    last wave leaves SMs idle (``wave_shape_factor(with_waves=True)``; 0 on a chip without SMs,
    and none of a memory-bound GEMM's time): what a GEMM on another stream can fill
    (``moe.grouped_gemm_time_s``)."""
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    flops = 2.0 * m * n * k
    if with_tail and rates.sm_count:
        shape, fill = wave_shape_factor(m, n, k, rates.sm_count, rates.k_stage_scale, with_waves=True)
    else:
        shape = gemm_shape_factor(m, n, k, rates.half_dim, rates.k_half_dim, rates.sm_count, rates.k_stage_scale)
        fill = 1.0
    compute = flops / (rates.gemm_flops_per_s * shape)
    memory = gemm_traffic_bytes(m, n, k, rates) / rates.hbm_bytes_per_s
    busy = np.maximum(compute, memory)
    if not with_tail:
        return busy
    return busy, busy - np.maximum(compute * fill, memory)


def gemm_time_s(m, n, k, rates: ComputeRates, count=1.0):
    """Time of ``count`` GEMMs of shape (m, n, k), seconds (``gemm_roofline_s`` + the launch
    overhead each).

    Only the GEMM: the quantisation kernels of low-precision GEMMs are charged per pass by
    ``layer_costs.linear_cast_bytes`` (an operand is quantised once and reused).
    """
    return count * (gemm_roofline_s(m, n, k, rates) + rates.kernel_overhead_s)


def linear_gemm_times_s(tokens, n, k, rates: ComputeRates):
    """(forward, data-gradient, weight-gradient) seconds of a linear layer Y = X W with
    X[tokens, k] and W[k, n]: forward (tokens, n, k); dX = dY W^T is (tokens, k, n); dW = X^T dY
    is (k, n, tokens), whose reduction runs over the tokens."""
    return (gemm_time_s(tokens, n, k, rates), gemm_time_s(tokens, k, n, rates), gemm_time_s(k, n, tokens, rates))


def memory_bound_time_s(bytes_, rates: ComputeRates, kernels=1.0):
    """Time of memory-bound kernels moving ``bytes_`` in total, seconds."""
    return np.asarray(bytes_, dtype=float) / rates.hbm_bytes_per_s + kernels * rates.kernel_overhead_s


def attention_core_flops(tokens, seq_len, heads, qk_dim, v_dim, window=0, window_fraction=0.0):
    """Forward FLOPs of the attention core (QK^T and AV) for ``tokens`` queries, causal.

    Each query attends on average to half the sequence (causal); windowed layers attend on
    average to w - w (w - 1) / (2 seq) keys for seq > w, the mean over the queries of
    min(position, w) (``attention_keys.causal_window_mean_keys``; min(w, seq / 2), the window
    of the mean, overstated them: gpt-oss at seq 256, w 128: 96.25 keys, not 128).
    FLOPs = 2 * tokens * keys * heads * (qk_dim + v_dim).
    """
    full_keys = np.asarray(seq_len, dtype=float) / 2.0
    if window:
        keys = ((1.0 - window_fraction) * full_keys
                + window_fraction * causal_window_mean_keys(full_keys, window))
    else:
        keys = full_keys
    return 2.0 * np.asarray(tokens, dtype=float) * keys * heads * (qk_dim + v_dim)


def materialised_attention_core_flops(tokens, seq_len, heads, qk_dim, v_dim):
    """Forward FLOPs an unfused (materialised) attention core computes for ``tokens`` queries:
    every query against all ``seq_len`` keys. Its batched GEMMs, QK^T (s, s, qk_dim) and PV
    (s, v_dim, s) per (sequence, head) pair (``materialised_attention_time_s``), run over the
    full square and the causal mask (or a sliding window) is applied to the scores afterwards
    (Megatron-LM 2020-2022 ``CoreAttention``: ``torch.baddbmm``, ``FusedScaleMaskSoftmax``,
    ``torch.bmm``); Narayanan et al. 2021 (SC21, appendix) and Korthikanti et al. 2022 (model
    FLOPs 72 B s l h^2 (1 + s / (6 h) + V / (12 l h))) count them so: 4 B s^2 h a layer.
    FLOPs = 2 * tokens * seq_len * heads * (qk_dim + v_dim).
    """
    return (2.0 * np.asarray(tokens, dtype=float) * np.asarray(seq_len, dtype=float) * np.asarray(heads, dtype=float)
            * (qk_dim + v_dim))


def attention_core_exponentials(flops_fwd, qk_dim, v_dim):
    """Softmax exponentials of the attention core's forward: one per (query, key, head) scored,
    i.e. its forward FLOPs / (2 * (qk_dim + v_dim)) (``attention_core_flops``)."""
    return np.asarray(flops_fwd, dtype=float) / (2.0 * (qk_dim + v_dim))


#: backward of a fused attention core does ~2.5x the forward matmul work (FlashAttention-2:
#: five matmuls in backward vs two in forward, Dao 2023, section 3.1).
ATTENTION_BACKWARD_RATIO = 2.5


#: HBM bytes per attention-score element of the materialised (unfused) attention core moved by
#: its memory-bound passes, 16-bit scores, as Megatron-LM ran it before fused attention
#: (``FusedScaleMaskSoftmax`` plus attention dropout, megatron/model/transformer.py, 2020-2022).
#: Forward: the fused scale-mask-softmax reads the scores and writes the probabilities (4),
#: dropout reads them and writes its output and a 1-byte mask (5, ``ATTENTION_DROPOUT_SCORE_BYTES``).
#: Backward: dropout backward reads the gradient and the mask and writes (5), softmax backward
#: reads the probabilities and the gradient and writes dS (6). The batched GEMMs' own score-sized operands and outputs (QK^T
#: writing the scores, AV reading the probabilities; dP written, dS and P read in backward) are
#: their roofline traffic (``gemm_traffic_bytes``: these GEMMs, with K = head_dim, are memory-
#: bound), so they are not counted here a second time.
MATERIALISED_SCORE_BYTES_FWD = 9.0
MATERIALISED_SCORE_BYTES_BWD = 11.0
#: the attention dropout's share of each (forward and backward): absent without attention dropout
ATTENTION_DROPOUT_SCORE_BYTES = 5.0
#: without the fused kernel, scale and mask are two more passes over the scores in forward
#: (read 2 + write 2 each; the mask's own read is small) and the scale's gradient one more in
#: backward (Megatron-LM 2019: ``attention_scores * scale``, ``masked_fill``, ``softmax``).
UNFUSED_SOFTMAX_EXTRA_BYTES_FWD = 8.0
UNFUSED_SOFTMAX_EXTRA_BYTES_BWD = 4.0
#: when the stack asks for the fused kernel but the shape rules it out
#: (``layer_costs.fused_softmax_kernel_available``), Megatron's ``FusedScaleMaskSoftmax``
#: runs ``forward_torch_softmax``: with 16-bit scores and ``softmax_in_fp32`` (forced on by
#: ``apply_query_key_layer_scaling``, the default of Megatron-LM 2020-2023 and Megatron-DeepSpeed,
#: ``--no-query-key-layer-scaling`` turns it off) that is five PyTorch ops in place of the one
#: kernel: cast up (read 2, write 4), scale (4 + 4), masked_fill (4 + 4), softmax (4 + 4), cast
#: down (4 + 2): 36 bytes an element against the fused kernel's 4. Autograd runs the five
#: backwards: cast (2 + 4), softmax backward (reads the probabilities and the gradient, writes:
#: 12), masked_fill (4 + 4), scale (4 + 4), cast (4 + 2): 40 bytes against the fused 6.
FALLBACK_SOFTMAX_EXTRA_BYTES_FWD = 36.0 - 4.0
FALLBACK_SOFTMAX_EXTRA_BYTES_BWD = 40.0 - 6.0
FALLBACK_SOFTMAX_EXTRA_KERNELS = 4.0
#: fp32 scores (fp32 training, TF32 GEMMs included): Megatron's ``FusedScaleMaskSoftmax`` takes
#: its fused kernel for 16-bit inputs only (``is_kernel_available``: ``self.input_in_float16``;
#: Megatron-LM 2020-2023 and the Megatron-DeepSpeed copy, megatron/model/fused_softmax.py), so
#: fp32 scores always run ``forward_torch_softmax`` with no casts: the scale (if the stack sets
#: one; read 4 + write 4 bytes a score), ``attention_mask_func``'s in-place ``masked_fill_``
#: (4 + 4) and ``torch.nn.Softmax`` (4 + 4). Backward, per PyTorch's derivatives
#: (tools/autograd/derivatives.yaml): softmax backward reads the probabilities and their
#: gradient and writes (12), ``masked_fill_``'s ``grad.masked_fill(mask, 0)`` (8), the scale's
#: multiply (8). Without a scale the ``masked_fill_`` runs in place on the score GEMM's output
#: view (``attention_scores = matmul_result.view(...)``), so autograd wraps its backward in
#: ``CopySlices`` (torch/csrc/autograd/functions/tensor.cpp ``CopySlices::apply``): copy the
#: gradient into a new base (8), clone the slice (8), the ``masked_fill`` (8), copy the result
#: back (8): 32 bytes and four kernels in place of 8 and one.
FP32_SOFTMAX_BYTES_FWD = 8.0
FP32_MASK_BYTES_FWD = 8.0
FP32_SCALE_BYTES = 8.0
FP32_SOFTMAX_BYTES_BWD = 12.0
FP32_MASK_BWD_BYTES = 8.0
FP32_MASK_BWD_ON_VIEW_BYTES = 32.0
FP32_MASK_BWD_ON_VIEW_KERNELS = 4.0
#: fp32 attention dropout: read 4 + write 4 bytes and a 1-byte mask each way
FP32_DROPOUT_BYTES = 9.0


def materialised_attention_time_s(tokens, seq_len, heads, qk_dim, v_dim, rates: ComputeRates, softmax_fusion=True,
                                  attention_dropout=True, fused_softmax_fits=True, softmax_scale_pass=True):
    """(forward, backward) seconds of an unfused attention core: batched GEMMs over the full
    square of scores (the causal mask is applied to them, not skipped) and memory-bound passes
    over the scores (``MATERIALISED_SCORE_BYTES_*``, less the dropout's passes without attention
    dropout).

    ``softmax_fusion`` False: the separate 16-bit scale, mask and softmax of 2019-2020 Megatron
    (``UNFUSED_SOFTMAX_*``); True but ``fused_softmax_fits`` False (per row): the fused kernel's
    fp32 PyTorch fallback (``FALLBACK_SOFTMAX_*``).

    fp32 scores (``rates.act_bytes`` 4): the fused kernel never runs, whatever ``softmax_fusion``;
    PyTorch's fp32 ops instead (``FP32_*``), with a scale pass unless ``softmax_scale_pass`` is
    False (per row allowed), in which case the mask's backward pays ``CopySlices``' copies.

    ``tokens`` queries (micro_batch * seq) over ``heads`` heads (per GPU), each against
    ``seq_len`` keys. Forward: per (sequence, head), QK^T is (s, s, qk_dim) and PV is
    (s, v_dim, s); backward: four batched GEMMs (dQ, dK, dV, dP) of the same sizes.
    """
    tokens = np.asarray(tokens, dtype=float)
    s = np.asarray(seq_len, dtype=float)
    heads = np.asarray(heads, dtype=float)
    batch = tokens / s * heads          # (sequence, head) pairs: one GEMM each, one launch in all
    qk = gemm_time_s(s, s, qk_dim, rates, count=batch) - (batch - 1.0) * rates.kernel_overhead_s
    pv = gemm_time_s(s, v_dim, s, rates, count=batch) - (batch - 1.0) * rates.kernel_overhead_s
    scores = batch * s * s
    fusion = np.asarray(softmax_fusion, dtype=float)
    unfused = 1.0 - fusion
    fallback = fusion * (1.0 - np.asarray(fused_softmax_fits, dtype=float))
    dropout = float(bool(attention_dropout))
    no_dropout = (1.0 - dropout) * ATTENTION_DROPOUT_SCORE_BYTES
    if rates.act_bytes == 4.0:
        scale = np.asarray(softmax_scale_pass, dtype=float)
        on_view = 1.0 - scale
        fwd = qk + pv + memory_bound_time_s(
            scores * (FP32_MASK_BYTES_FWD + FP32_SOFTMAX_BYTES_FWD + scale * FP32_SCALE_BYTES + dropout * FP32_DROPOUT_BYTES),
            rates, 2 + scale + dropout)
        bwd = 2.0 * (qk + pv) + memory_bound_time_s(
            scores * (FP32_SOFTMAX_BYTES_BWD + scale * (FP32_SCALE_BYTES + FP32_MASK_BWD_BYTES)
                      + on_view * FP32_MASK_BWD_ON_VIEW_BYTES + dropout * FP32_DROPOUT_BYTES),
            rates, 1 + 2 * scale + on_view * FP32_MASK_BWD_ON_VIEW_KERNELS + dropout)
        return fwd, bwd
    fwd = qk + pv + memory_bound_time_s(
        scores * (MATERIALISED_SCORE_BYTES_FWD - no_dropout + unfused * UNFUSED_SOFTMAX_EXTRA_BYTES_FWD
                  + fallback * FALLBACK_SOFTMAX_EXTRA_BYTES_FWD),
        rates, 1 + dropout + 2 * unfused + fallback * FALLBACK_SOFTMAX_EXTRA_KERNELS)
    bwd = 2.0 * (qk + pv) + memory_bound_time_s(
        scores * (MATERIALISED_SCORE_BYTES_BWD - no_dropout + unfused * UNFUSED_SOFTMAX_EXTRA_BYTES_BWD
                  + fallback * FALLBACK_SOFTMAX_EXTRA_BYTES_BWD),
        rates, 1 + dropout + unfused + fallback * FALLBACK_SOFTMAX_EXTRA_KERNELS)
    return fwd, bwd


def attention_time_s(flops_fwd, rates: ComputeRates, exps_fwd=0.0, softmax_exposed=None, mma_share=1.0):
    """(forward, backward) seconds of the attention core given its forward FLOPs and softmax
    exponentials (``attention_core_exponentials``).

    Matrix work runs at the fitted attention rate; the exponentials run on the special-function
    units at ``rates.exp_per_s``. Kernels that pipeline the softmax of one tile under the
    matmuls of another (FlashAttention-3, Shah et al. 2024, section 3.1) hide it while the
    matmuls last; kernels where the second matmul waits for the softmax of the first add it
    (NVIDIA, "Making softmax more efficient with Blackwell Ultra", 2025). The generation's
    ``exposed_softmax_fraction`` (``rates.softmax_exposed``, or ``softmax_exposed`` per row when
    given) says which share is added; the rest costs only what exceeds the matmul time. The
    backward recomputes the probabilities once (FlashAttention-2, Dao 2023, algorithm 2), so it
    pays the exponentials again. ``mma_share`` (per row allowed) scales the matrix rate for
    kernels that cannot issue the chip's fastest tensor-core instructions
    (``GPUSpec.sync_mma_peak_fraction``).
    """
    softmax = np.asarray(exps_fwd, dtype=float) / rates.exp_per_s
    share = rates.softmax_exposed if softmax_exposed is None else np.asarray(softmax_exposed, dtype=float)
    exposed = share * softmax
    hideable = softmax - exposed
    mma_fwd = flops_fwd / (rates.attn_flops_per_s * np.asarray(mma_share, dtype=float))
    mma_bwd = ATTENTION_BACKWARD_RATIO * mma_fwd
    fwd = np.maximum(mma_fwd, hideable) + exposed + rates.kernel_overhead_s
    bwd = np.maximum(mma_bwd, hideable) + exposed + 2 * rates.kernel_overhead_s
    return fwd, bwd
