"""Mixture-of-experts layers on one GPU: routed tokens, grouped expert GEMMs, all-to-all, memory.

Layout (Megatron-Core MoE with parallel folding, Liu et al. 2025, "MoE Parallel Folding",
arXiv 2504.14960): the attention part of a layer is split tp x cp x dp; the MoE part re-splits
the same dp*cp*tp ranks of a pipeline stage as etp x ep x edp, expert tensor parallelism
fastest (Megatron's expert rank order ``tp-ep-dp-pp`` with tp := etp). So

* the EP group's members are ``etp`` ranks apart (stride = etp; Megatron's default
  ``expert_tensor_parallel_size = tensor_model_parallel_size`` makes that stride tp), and it
  stays inside one NVLink domain when ``ep * etp <= gpus_per_node``;
* the expert-data-parallel group, over which ZeRO shards the expert states, has
  ``edp = dp * cp * tp / (ep * etp)`` members (``expert_data_parallel_size``).

Tokens. With tensor parallelism Megatron requires sequence parallelism for MoE, so each GPU
*routes* ``tokens / tp`` of the ``tokens = micro_batch * seq / cp`` its attention block sees.
Every routed token goes to ``top_k`` experts (no deduplication: Megatron's all-to-all
dispatcher sends one row per (token, expert) pair). A GPU holds ``E / ep`` experts, each cut
``etp`` ways along the FFN width, and receives rows from the whole ep x etp group, so it
processes on average ``routed * top_k * etp`` rows of which each local expert gets
``routed * top_k * ep * etp / E``; the FLOPs per GPU are those of its own routed tokens.

``load_imbalance`` is the busiest EP rank's routed rows over the mean (the all-to-all
synchronises the group, so the busiest rank sets the layer time). With ep = 1 every expert
lives on the GPU and its row count is exact, so the factor is then ignored by the layer
costs (``_rank_imbalance``).

Every function takes numpy arrays or scalars for the sizes and degrees (planner and simulator
share them); model and hardware specs are scalars.
"""
from __future__ import annotations

import math

import numpy as np

from cost_models import memory
from cost_models.compute import (ACT_BYTES, ComputeRates, gemm_roofline_s, linear_gemm_times_s,
                                 memory_bound_time_s)
from cost_models.layer_costs import (ACTIVATION_UNITS, ELEMENTWISE_KERNELS_FWD, REPLICATED_ELEMENTWISE_UNITS,
                                     REPLICATED_ELEMENTWISE_UNITS_BWD, RESIDUAL_FORK_KERNELS_BWD, block_cast_bytes,
                                     cast_times, linear_cast_bytes, mlp_gemm_shapes)
from cost_models.params import (attention_params, expert_params_per_moe_layer, latent_projection_params, mlp_params,
                                 replicated_kv_params_per_tp_rank, routed_expert_width)
from cost_models.topology import group_collective_time_s, group_forwarded_all_to_all_time_s, group_span
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.stack_spec import EXPERT_OUTPUT_BIAS_IMPLS
from model_specs.model_spec import ModelSpec

#: fp32 router work per (token, expert) logit in forward: write logits (4), softmax/sigmoid
#: read + write (8), top-k read (4); bytes.
ROUTER_BYTES_PER_LOGIT_FWD = 16.0
#: fp32 router backward per logit: read the probabilities and their gradient, write the
#: logits' gradient; bytes.
ROUTER_BYTES_PER_LOGIT_BWD = 12.0
#: router state kept for backward per logit: fp32 logits/scores and fp32 probabilities.
ROUTER_BYTES_PER_LOGIT_SAVED = 8.0
#: memory-bound kernels of one MoE block's forward besides the GEMMs: router (softmax, top-k,
#: aux loss), permute, sort by local expert, activation, unsort, unpermute, plus the norm and
#: residual half of the layer's element-wise kernels.
MOE_ELEMENTWISE_KERNELS_FWD = 6.0 + ELEMENTWISE_KERNELS_FWD / 2


def _f(x):
    return np.asarray(x, dtype=float)


def _rank_imbalance(load_imbalance, ep):
    """The imbalance factor that applies to one GPU's rows: 1 when all experts are local."""
    return np.where(_f(ep) > 1, _f(load_imbalance), 1.0)


def capped_rank_imbalance(load_imbalance, ep, capacity_factor=0.0):
    """The busiest GPU's rows over the mean after token dropping: ``min(imbalance, c)``.

    With a capacity factor c > 0 (GShard, Lepikhin et al. 2020, section 2.2; Megatron
    ``moe_expert_capacity_factor``) each sending rank keeps at most ``c`` times its mean rows per
    expert and drops the rest *before* the dispatch, so the busiest rank receives, computes on,
    keeps and sends back at most ``c`` times the mean (``moe_tokens_per_expert`` caps the
    expert GEMMs the same way). c = 0 (dropless) leaves ``_rank_imbalance`` as it is; with
    ep = 1 the imbalance is 1 and only a c < 1 cap applies. Every use of the busiest rank's rows
    (expert GEMMs, all-to-all volume, kept activations, dispatch buffers, the recomputed
    activation) takes this one factor.
    """
    return _capped(_rank_imbalance(load_imbalance, ep), capacity_factor)


def _capped(imbalance, capacity_factor):
    """``min(imbalance, c)`` where a capacity factor c > 0 drops the rows beyond it, else the
    imbalance (c = 0: dropless)."""
    imb, cf = _f(imbalance), _f(capacity_factor)
    return np.where(cf > 0, np.minimum(imb, cf), imb)


def shared_ffn_total(model: ModelSpec) -> int:
    """Width of all shared experts fused into one MLP (Megatron's SharedExpertMLP), 0 if none."""
    moe = model.moe
    if moe is None or not moe.num_shared_experts:
        return 0
    return moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size)


# ---- tokens ---------------------------------------------------------------------------------

def moe_tokens_per_expert(tokens, top_k, num_experts, ep, load_imbalance=1.0, capacity_factor=0.0, etp=1):
    """Rows (token copies) the busiest local expert processes per micro-batch on one GPU.

    ``tokens`` are the tokens this GPU routes (``micro_batch * seq / (cp * tp)``). The mean a
    local expert receives from the ep x etp group is ``tokens * top_k * ep * etp / E``
    (every rank routes ``tokens * top_k`` copies over all E experts). The busiest gets
    ``load_imbalance`` times that. With a capacity factor c > 0 (GShard, Lepikhin et al.
    2020, section 2.2; Megatron ``moe_expert_capacity_factor``) each sending rank keeps at
    most ``c * tokens * top_k / E`` rows per expert and drops the rest, so an expert never
    processes more than ``c`` times the mean. c = 0 means dropless.

    Returns a float array (rows, possibly fractional as an expectation).
    """
    mean = _f(tokens) * _f(top_k) * _f(ep) * _f(etp) / _f(num_experts)
    return mean * _capped(load_imbalance, capacity_factor)


def moe_routed_tokens_per_gpu(tokens, tp):
    """Tokens one GPU routes per micro-batch: the attention block's ``tokens`` split by tp (SP)."""
    return _f(tokens) / _f(tp)


# ---- compute ----------------------------------------------------------------------------------

def grouped_gemm_time_s(m_per_group, n, k, groups, rates: ComputeRates, launches=None, streams=1):
    """One grouped GEMM of ``groups`` problems of shape (m, n, k), seconds.

    Each problem pays its own shape efficiency (small per-expert M leaves tiles and SMs idle:
    ``gemm_shape_factor`` in ``cost_models.compute``) and streams its own weights. ``launches``:
    the kernels the group runs as, each with its fixed time (default ``groups``: Transformer
    Engine's ``GroupedLinear``, which Megatron-Core's ``TEGroupedMLP`` uses, launches one cuBLAS
    GEMM per expert, round-robin over its compute streams: NVIDIA/TransformerEngine@v2.12
    common/gemm/cublaslt_gemm.cu ``multi_stream_cublas_gemm``; its single-kernel CUTLASS grouped
    GEMM is opt-in, ``NVTE_USE_CUTLASS_GROUPED_GEMM``, Hopper and 16-bit only; 1 for a single
    grouped kernel).

    ``streams`` (``TrainingBehaviour.grouped_gemm_streams``): how many of the GEMMs run at once.
    ``multi_stream_cublas_gemm`` (NVIDIA/TransformerEngine@v2.14 common/gemm/cublaslt_gemm.cu)
    issues GEMM ``i`` on compute stream ``i % S``, ``S = nvte_get_num_compute_streams()`` = 4
    (common/util/multi_stream.cpp), and joins the streams afterwards. A GEMM's time splits into
    its *work*, the time its tiles keep every SM busy (concurrent GEMMs share the SMs and HBM,
    so work adds up), and its *fixed* time: the idle SMs of its partly filled last wave (the
    tail of ``compute.gemm_roofline_s(with_tail=True)``) and its launch (``kernel_overhead_s``),
    which a GEMM on another stream fills. With S streams the fixed times of S consecutive GEMMs
    overlap: ``groups x work + ceil(groups / S) x tail + ceil(launches / S) x overhead``. At
    S = 1 this is the serial sum ``groups x (work + tail) + launches x overhead``, computed as
    before (bit for bit).
    """
    m = np.maximum(_f(m_per_group), 1.0)
    groups = _f(groups)
    launches = groups if launches is None else _f(launches)
    streams = np.maximum(_f(streams), 1.0)
    concurrent_rows = bool(np.any(streams > 1))
    if concurrent_rows:
        busy, tail = gemm_roofline_s(m, n, k, rates, with_tail=True)
    else:
        busy = gemm_roofline_s(m, n, k, rates)
    serial = groups * (busy + rates.kernel_overhead_s) - (groups - launches) * rates.kernel_overhead_s
    if not concurrent_rows:
        return serial
    concurrent = (groups * (busy - tail) + np.ceil(groups / streams) * tail
                  + np.ceil(launches / streams) * rates.kernel_overhead_s)
    return np.where(streams > 1, concurrent, serial)


#: bytes of one routing probability as Megatron-Core's ``flex`` token dispatcher hands it to the
#: experts: HybridEP and DeepEP take float32 probabilities only and cast bf16 ones up
#: (NVIDIA/Megatron-LM@d7288711 megatron/core/transformer/moe/token_dispatcher.py:1033-1039 HybridEP,
#: :1178-1184 DeepEP, ``self.token_probs = self.token_probs.float()``; the same at b0cc2706, 2edffadb,
#: d0b3b775 and cd4afffa, the cores Megatron-Bridge 26.02-26.08 pin). The all-to-all dispatcher
#: keeps the router's dtype (``moe_router_dtype``, unset for gpt-oss: the activations').
FLEX_DISPATCH_PROBS_BYTES = 4.0


def expert_output_bias_work(rows, hidden, local_experts, act_bytes, probs_bytes=None):
    """HBM bytes and kernels of adding the routed experts' output bias, weighted by the routing
    probabilities, one micro-batch on one GPU, forward and backward, on Megatron-Core's unfused
    expert path (``expert_output_bias`` ``megatron_eager``).

    Megatron-Core's ``TEGroupedMLP`` runs the second expert GEMM without its bias and adds it
    per local expert in Python (NVIDIA/Megatron-LM@d7288711 megatron/core/transformer/moe/
    experts.py:251-268 ``_apply_bias``, the same at d0b3b775 :296-313 and cd4afffa:
    ``torch.cat([t + b * p for t, b, p in zip(torch.split(out.view(-1, h), n), biases,
    torch.split(probs, n))]).view(shape).to(t.dtype)``). The weighted bias and the sum are computed
    in the promoted dtype of the bias (``act_bytes``) and the probabilities (``probs_bytes``,
    default ``act_bytes``; ``FLEX_DISPATCH_PROBS_BYTES`` under DeepEP / HybridEP):
    ``s = max(act_bytes, probs_bytes)`` bytes an element. Per element of ``rows * hidden``,
    forward: ``b * p`` writes s, the add reads the expert output (a) and ``b * p`` (s) and writes
    s, the concatenation reads and writes s; where s > a the final ``.to`` reads s and writes a
    (one more kernel): ``a + 5 s (+ s + a)`` bytes, ``2 e + 1 (+ 1)`` kernels for ``e`` local
    experts (in 16-bit, 6 passes of a).

    Backward, as PyTorch's autograd runs it (``CatBackward0`` hands each input a ``narrow`` view
    of the gradient, ``ViewBackward0`` and ``UnsqueezeBackward0`` reshape, no copy;
    ``SplitWithSizesBackward0`` is ``split_with_sizes_backward``, an ``at::cat`` of the pieces'
    gradients, a copy): per expert the two products of ``b * p``'s backward (gradient times
    ``p``, gradient times ``b``: read s, write s) and their reductions to ``b``'s and ``p``'s shapes
    (read s): 6 s and ``4 e`` kernels; the split of the expert output concatenates its gradient
    (read a, write a, one kernel) and the split of the probabilities theirs (``rows`` of
    ``probs_bytes``, read and write, one kernel). Where s > a: the ``.to``'s backward casts the
    gradient up (read a, write s, one kernel), the engine casts each expert output's gradient back
    to its dtype (read s, write a, ``e`` kernels) and each bias gradient (``hidden`` elements, read
    s, write a, ``e`` kernels). ``6 s + 2 a (+ 2 (a + s))`` bytes an element, ``4 e + 2 (+ 1 + 2 e)``
    kernels.
    """
    a = _f(act_bytes)
    p = a if probs_bytes is None else _f(probs_bytes)
    s = np.maximum(a, p)
    promoted = np.where(s > a, 1.0, 0.0)
    rows = _f(rows)
    elems = rows * float(hidden)
    e = _f(local_experts)
    return {"fwd_bytes": elems * (a + 5.0 * s + promoted * (s + a)),
            "bwd_bytes": (elems * (6.0 * s + 2.0 * a + promoted * 2.0 * (a + s)) + rows * 2.0 * p
                          + promoted * e * float(hidden) * (s + a)),
            "fwd_kernels": 2.0 * e + 1.0 + promoted,
            "bwd_kernels": 4.0 * e + 2.0 + promoted * (1.0 + 2.0 * e)}


#: rows of one partial bias-gradient row that Transformer Engine's grouped MXFP8 quantisation
#: writes when it reduces the bias gradient on the way (``CHUNK_DIM_Y``,
#: NVIDIA/TransformerEngine@4220403e transformer_engine/common/cast/mxfp8/group_quantize_mxfp8.cuh:35,
#: the fp32 workspace ``DIVUP(rows, CHUNK_DIM_Y) x hidden`` at :874-878, reduced by
#: ``grouped_reduce_dbias`` at :991)
DBIAS_QUANTIZE_CHUNK_ROWS = 128.0


def fused_expert_output_bias_work(rows, hidden, local_experts, act_bytes, scaled, probs_bytes=4.0):
    """HBM bytes and kernels of the routed experts' output bias where Megatron-Core runs the
    experts through Transformer Engine's op fuser and its fused MXFP8 grouped MLP (``expert_output_bias``
    ``fused_mlp_epilogue`` / ``fused_mlp_scaled``), one micro-batch on one GPU.

    Megatron-Core builds FC2 as a ``te.pytorch.ops.GroupedLinear`` with the bias
    (NVIDIA/Megatron-LM@d0b3b775 megatron/core/transformer/moe/experts.py:494-519 ``_make_fused_ops``;
    cd4afffa adds ``scale_bias=True`` and passes the probabilities to it, experts.py:536-549, :673-683,
    and requires ``NVTE_CUTEDSL_FUSED_GROUPED_MLP`` for a GLU, :389), and Transformer Engine fuses FC1, the scaled GLU and FC2 into cuDNN
    front-end CuTe kernels where ``NVTE_CUTEDSL_FUSED_GROUPED_MLP`` is set on an SM 10.x GPU under
    MXFP8 (NVIDIA/TransformerEngine@4220403e transformer_engine/pytorch/ops/_common.py:212-290
    ``fuse_grouped_mlp_ops``; the Megatron-Bridge presets set it with the fuser, v0.5.0
    scripts/performance/perf_plugins.py:308-309, v0.6.0 perf_recipes/gpt_oss/gb300/gpt_oss.py:171).

    Forward: the FC2 kernel adds the bias (times the probability where ``scaled``) in its
    epilogue (TE@4220403e ops/fused/forward_grouped_mlp.py:388-404 ``bias_tensor``, ``prob_tensor``;
    TE@4329ff84 ops/fused/grouped_mlp.py:1370-1378): no pass over the rows; the per-expert biases
    are stacked for it (``_pack_grouped_linear_bias_for_cudnn``, ``torch.stack``: ``e * hidden``
    elements read and written, one kernel), and where ``scaled`` with probabilities narrower than
    fp32 they are cast up (``rows``, one kernel; HybridEP / DeepEP hand fp32 ones).

    Backward, unscaled (Megatron-Core d0b3b775 with TE 2.16, NeMo 26.06 / 26.06.01): the output
    gradient's MXFP8 quantisation reduces the bias gradient on the way
    (TE@4220403e ops/fused/backward_grouped_mlp.py:409-415 ``tex.bgrad_group_quantize``): fp32
    partial sums, ``ceil(rows / DBIAS_QUANTIZE_CHUNK_ROWS) x hidden``, written and read back by one
    more kernel that writes the ``e x hidden`` gradient. Scaled (Megatron-Core cd4afffa with TE
    2.17.1, NeMo 26.08): the quantisation carries no bias gradient; the biases are stacked again,
    an fp32 gradient buffer zeroed, and a Triton kernel reads the output gradient once for the bias
    gradient (sum of gradient times probability) and the probabilities' (gradient dot bias, fp32
    atomics into the ``rows`` probability gradients), then the bias gradient is cast to the
    activations' dtype (TE@4329ff84 ops/fused/grouped_mlp.py:1846-1858
    ``compute_grouped_dbias_dscales``, triton/grouped_dbias_dscales.py:73-125): ``rows * hidden``
    of a, 3 fp32 a row (the probability read, its gradient read and written), and per bias element
    ``4 a + 16`` (stack 2 a, zeroing 4, the kernel's read a and fp32 atomics 8, the cast 4 + a); 4
    kernels.
    """
    a = _f(act_bytes)
    scaled = np.asarray(scaled, dtype=bool)
    rows = _f(rows)
    e = _f(local_experts)
    vec = e * float(hidden)                  # the local experts' bias elements
    up_cast = np.where(scaled & (_f(probs_bytes) < 4.0), 1.0, 0.0)
    partial = np.ceil(rows / DBIAS_QUANTIZE_CHUNK_ROWS) * float(hidden) * 4.0
    unscaled_bwd = 2.0 * partial + vec * a
    scaled_bwd = rows * float(hidden) * a + rows * 12.0 + vec * (4.0 * a + 16.0)
    return {"fwd_bytes": 2.0 * vec * a + up_cast * rows * (_f(probs_bytes) + 4.0),
            "bwd_bytes": np.where(scaled, scaled_bwd, unscaled_bwd),
            "fwd_kernels": 1.0 + up_cast,
            "bwd_kernels": np.where(scaled, 4.0, 1.0)}


#: expert-output-bias implementation name -> integer code (``ConfigBatch.expert_output_bias``)
EXPERT_OUTPUT_BIAS_CODES = {name: i for i, name in enumerate(EXPERT_OUTPUT_BIAS_IMPLS)}


def expert_bias_work(rows, hidden, local_experts, act_bytes, dispatch_dedup, impl):
    """``expert_output_bias_work`` or ``fused_expert_output_bias_work``, per row of ``impl`` (a name
    of ``EXPERT_OUTPUT_BIAS_IMPLS`` or codes): the probabilities reach the experts in fp32 under the
    flex dispatcher (``dispatch_dedup``, ``FLEX_DISPATCH_PROBS_BYTES``), else in ``act_bytes``."""
    code = (np.asarray(EXPERT_OUTPUT_BIAS_CODES[impl]) if isinstance(impl, str)
            else np.asarray(impl, dtype=np.int64))
    probs_bytes = np.where(np.asarray(dispatch_dedup, dtype=bool), FLEX_DISPATCH_PROBS_BYTES, _f(act_bytes))
    eager = expert_output_bias_work(rows, hidden, local_experts, act_bytes, probs_bytes)
    fused = fused_expert_output_bias_work(rows, hidden, local_experts, act_bytes,
                                          code == EXPERT_OUTPUT_BIAS_CODES["fused_mlp_scaled"], probs_bytes)
    on_eager = code == EXPERT_OUTPUT_BIAS_CODES["megatron_eager"]
    return {key: np.where(on_eager, eager[key], fused[key]) for key in eager}


#: forward and backward passes over one FC1-output half (width f) per row of an eagerly clamped
#: GLU (``glu_clamp_bytes``), and the kernels each direction launches
GLU_CLAMP_UNITS_FWD = 8.0
GLU_CLAMP_UNITS_BWD = 10.0
GLU_CLAMP_KERNELS = 3.0


def glu_clamp_bytes(rows, ffn_local, bytes_per_element):
    """HBM bytes (forward, backward) of clamping a GLU's two halves with separate ops before the
    activation kernel, for ``rows`` rows of ``ffn_local`` columns per half.

    Megatron-Core's ``weighted_bias_quick_geglu_impl`` (NVIDIA/Megatron-LM
    megatron/core/fusions/fused_bias_geglu.py, the same at core commits 0d8e0714, 2edffadb,
    d0b3b775 and cd4afffa, which Megatron-Bridge v0.2.0, v0.4.2, v0.5.0 and v0.6.0 pin) splits
    the FC1 output [rows, 2f] into gate and linear halves, clamps each (``x_glu.clamp(max=l)``,
    ``x_linear.clamp(-l, l)``: read f, write f each) and concatenates them (read 2f, write 2f)
    before the fused activation: 8 f elements a row forward. Autograd's backward: each clamp's
    gradient reads its output gradient and its input and writes the masked gradient (3 f each),
    and the split's backward writes the two halves into one [rows, 2f] gradient (read 2f, write
    2f): 10 f a row. Each direction launches ``GLU_CLAMP_KERNELS`` kernels (two clamps, one
    concatenation)."""
    elems = np.asarray(rows, dtype=float) * np.asarray(ffn_local, dtype=float) * float(bytes_per_element)
    return GLU_CLAMP_UNITS_FWD * elems, GLU_CLAMP_UNITS_BWD * elems


def eager_glu_clamp(model: ModelSpec, glu_clamp_eager):
    """Where (per row of ``glu_clamp_eager``) the experts pay ``glu_clamp_bytes``: the stack clamps
    eagerly and the model has a clamp (``ModelSpec.glu_clamp_limit``)."""
    return np.asarray(glu_clamp_eager, dtype=bool) & (model.glu_clamp_limit > 0)


def glu_clamp_forward_s(model: ModelSpec, rates: ComputeRates, rows, ffn_local, glu_clamp_eager):
    """Forward seconds of the eager clamp (``glu_clamp_bytes`` forward, ``GLU_CLAMP_KERNELS``)
    where ``eager_glu_clamp``, else 0: what recomputing the activation repeats."""
    fwd, _ = glu_clamp_bytes(rows, ffn_local, rates.act_bytes)
    return np.where(eager_glu_clamp(model, glu_clamp_eager), memory_bound_time_s(fwd, rates, GLU_CLAMP_KERNELS), 0.0)


def routed_expert_gemms(model: ModelSpec, tokens, ep, etp=1, load_imbalance=1.0, tp=1):
    """The routed experts' grouped GEMMs on one GPU, one micro-batch, as ``moe_mlp_costs`` times
    them: (``routed``: tokens the GPU routes, ``tokens / tp``; ``m``: rows of each local expert on
    the busiest rank, ``moe_tokens_per_expert``; ``local_experts``: E / ep, the groups of each
    grouped GEMM; ``shapes``: the forward (n, k) of each expert matrix, ``mlp_gemm_shapes`` of
    the experts' width and FFN split by etp). ``tokens``: as ``moe_mlp_costs`` takes them."""
    moe = model.moe
    if moe is None:
        raise ValueError(f"{model.name} has no experts")
    E, k = moe.num_experts, moe.top_k
    tokens, tp, ep, etp = _f(tokens), _f(tp), _f(ep), _f(etp)
    routed = moe_routed_tokens_per_gpu(tokens, tp)
    imb = _rank_imbalance(load_imbalance, ep)
    local_experts = E / ep
    m_exp = moe_tokens_per_expert(routed, k, E, ep, imb, moe.capacity_factor, etp)
    shapes = mlp_gemm_shapes(routed_expert_width(model), moe.expert_ffn_hidden_size, model.gated_mlp, etp)
    return routed, m_exp, local_experts, shapes


def moe_mlp_costs(model: ModelSpec, rates: ComputeRates, tokens, ep, etp, load_imbalance=1.0, tp=1, sp=True,
                  current_scaling=False, glu_clamp_eager=False, grouped_gemm_streams=1, dispatch_dedup=False,
                  rht_cast_fusion=False, expert_output_bias="megatron_eager"):
    """Forward seconds, FLOPs and all-to-all sizes of one MoE block on one GPU, one micro-batch.

    ``tokens`` is the same quantity ``layer_costs.dense_mlp_costs`` takes: tokens the GPU's
    attention block sees per micro-batch (``micro_batch * seq / cp``); the GPU routes
    ``tokens / tp`` of them. Parts:

    * router: GEMM (routed, E, h), replicated over TP, plus fp32 softmax/top-k traffic;
    * routed experts: one grouped GEMM per matrix over the ``E/ep`` local experts, M = rows of
      the busiest expert on the busiest rank (``moe_tokens_per_expert``), N/K = expert FFN
      width / etp and the experts' width d (``params.routed_expert_width``: h, or LatentMoE's
      latent size, in which case two (routed, d, h) GEMMs project the routed tokens down before
      the dispatch and up after the combine, and the routed rows move d wide); gated (SwiGLU:
      up+gate fused, then down) or plain;
    * shared experts: one dense MLP of width ``num_shared * shared_ffn`` split by tp, on all
      ``tokens`` (as ``dense_mlp_costs``);
    * memory-bound: permute (read+write every routed row), sort/unsort by local expert when
      E/ep > 1 under the all-to-all dispatcher (not under ``dispatch_dedup``), activation function, unpermute with probabilities (read k rows, write one),
      and the norm/residual half of the layer's element-wise work (split by tp under SP);
      with ``glu_clamp_eager`` and a clamped GLU (``ModelSpec.glu_clamp_limit``) the experts'
      clamp and concatenation before the activation (``glu_clamp_bytes``).

    ``dispatch_dedup`` (per row): the stack runs Megatron's ``flex`` token dispatcher (DeepEP /
    HybridEP; ``ParallelConfig.ep_dispatch_dedup``). Its received rows come out already grouped by
    local expert, so it has no sort and unsort passes: in Megatron-LM core_v0.16.1
    megatron/core/transformer/moe/token_dispatcher.py ``sort_chunks_by_idxs`` is called only by
    ``MoEAlltoAllTokenDispatcher`` (~l.732 dispatch_postprocess, ~l.767 combine_preprocess);
    ``MoEFlexTokenDispatcher.dispatch_postprocess`` (~l.1459-1476) passes its tensors through and the
    HybridEP manager (~l.942-955) permutes for the experts in one step inside the dispatch.

    ``grouped_gemm_streams``: how many per-expert GEMMs of each grouped GEMM run at once
    (``grouped_gemm_time_s``; ``TrainingBehaviour.grouped_gemm_streams``, 1 = one after another).
    ``rht_cast_fusion`` (per row): NVFP4's two copies of an operand in one kernel
    (``layer_costs.linear_cast_bytes``).
    ``expert_output_bias`` (a name of ``EXPERT_OUTPUT_BIAS_IMPLS``, or codes per row): how a biased
    model's routed-expert output bias is added, Megatron-Core's unfused ``_apply_bias``
    (``expert_output_bias_work``, its arithmetic in fp32 under ``dispatch_dedup``) or inside the op
    fuser's fused grouped MLP (``fused_expert_output_bias_work``).

    Returns a dict of float arrays: ``gemm_fwd_s`` (router + experts + shared),
    ``expert_gemm_fwd_s``, ``shared_gemm_fwd_s``, the shared experts' fc1 and fc2 GEMM seconds
    per pass (``tp_col_gemm_*_s``, ``tp_row_gemm_*_s``; 0 without them), ``router_fwd_s``, ``elem_fwd_s``, the
    quantisation times ``cast_fwd_s``, ``cast_bwd_s``, ``weight_cast_s`` (as
    ``layer_costs.linear_cast_bytes``; 0 in 16-bit),
    ``gemm_flops_fwd`` (router + mean routed + shared; the per-GPU share, like the dense
    functions, so x tp gives the layer's FLOPs), ``router_flops_fwd`` (not in Megatron's
    model-FLOP convention), ``expert_rows`` (rows on the busiest rank), and
    ``a2a_dispatch_buffer_bytes`` (``moe_dispatch_bytes`` of the routed tokens at 16-bit).
    The routed FLOPs use the mean rows (what the model-FLOP conventions count); the time uses
    the busiest rank's rows. Backward: ``gemm_dgrad_s`` and ``gemm_wgrad_s`` with their own shapes
    (``compute.linear_gemm_times_s``).
    The router GEMM is timed at the rates' GEMM dtype although frameworks keep it in 16/32-bit
    (it is ~0.5% of the block's FLOPs for DeepSeek-V3).
    """
    moe = model.moe
    if moe is None:
        raise ValueError(f"{model.name} has no experts")
    h, E, k = model.hidden_size, moe.num_experts, moe.top_k
    f_exp = moe.expert_ffn_hidden_size
    d_e = routed_expert_width(model)        # the experts' width (LatentMoE's latent size, else h)
    tokens, tp, ep, etp = _f(tokens), _f(tp), _f(ep), _f(etp)
    zero = 0.0 * (tokens + tp + ep + etp + _f(load_imbalance))   # broadcast every output alike
    routed, m_exp, local_experts, expert_shapes = routed_expert_gemms(model, tokens, ep, etp, load_imbalance, tp)
    rows = m_exp * local_experts

    router_s, router_dgrad, router_wgrad = linear_gemm_times_s(routed, E, h, rates)
    router_flops = 2.0 * routed * E * h
    # LatentMoE: the routed tokens go down to the experts' width before the dispatch and back up
    # after the combine, two (routed, d_e, h) GEMMs (Megatron-Bridge flop_utils moe_layer_flops:
    # 4 B s h latent a layer, forward)
    latent = bool(moe.latent_size)
    if latent:
        down = linear_gemm_times_s(routed, d_e, h, rates)
        up = linear_gemm_times_s(routed, h, d_e, rates)
        proj_s, proj_dgrad, proj_wgrad = (down[i] + up[i] for i in range(3))
        proj_flops = 2.0 * 2.0 * routed * h * d_e
    else:
        proj_s = proj_dgrad = proj_wgrad = proj_flops = 0.0

    expert_s = expert_dgrad = expert_wgrad = 0.0
    streams = _f(grouped_gemm_streams)
    for n, kk in expert_shapes:
        # data gradient (m, k, n) and weight gradient (k, n, m) of every local expert
        expert_s = expert_s + grouped_gemm_time_s(m_exp, n, kk, local_experts, rates, streams=streams)
        expert_dgrad = expert_dgrad + grouped_gemm_time_s(m_exp, kk, n, local_experts, rates, streams=streams)
        expert_wgrad = expert_wgrad + grouped_gemm_time_s(kk + 0.0 * m_exp, n, np.maximum(m_exp, 1.0),
                                                          local_experts, rates, streams=streams)
    # quantisation of the grouped GEMMs' operands: permuted rows and their gradients are
    # quantised by standalone kernels; each local expert's weights once per step
    expert_casts = linear_cast_bytes(rows, expert_shapes, rates.dtype, [False, False], [False, False],
                                     current_scaling, local_experts, transposed_copy=rates.fp8_transposed_copy,
                                     rht_cast_fusion=rht_cast_fusion)
    expert_casts["weights"] = expert_casts["weights"] * local_experts
    up = (3.0 if model.gated_mlp else 2.0)
    expert_flops = 2.0 * routed * k * up * d_e * f_exp

    f_sh = shared_ffn_total(model)
    shared_s = shared_dgrad = shared_wgrad = zero
    shared_flops = zero
    # the shared experts' column-parallel (fc1) and row-parallel (fc2) GEMMs apart: the windows
    # of the block's own TP collectives (``layer_costs._linear_times``' ``tp_col_*`` / ``tp_row_*``)
    shared_ends = {f"tp_{end}_gemm_{p}_s": zero for end in ("col", "row") for p in ("fwd", "dgrad", "wgrad")}
    casts = dict(expert_casts)
    if f_sh:
        shared_shapes = mlp_gemm_shapes(h, f_sh, model.gated_mlp, tp)
        for end, (n, kk) in zip(("col", "row"), shared_shapes):
            fwd, dgrad, wgrad = linear_gemm_times_s(tokens, n, kk, rates)
            shared_s, shared_dgrad, shared_wgrad = shared_s + fwd, shared_dgrad + dgrad, shared_wgrad + wgrad
            shared_ends.update({f"tp_{end}_gemm_fwd_s": fwd, f"tp_{end}_gemm_dgrad_s": dgrad,
                                f"tp_{end}_gemm_wgrad_s": wgrad})
            shared_flops = shared_flops + 2.0 * tokens * n * kk
        shared_casts = block_cast_bytes(tokens, shared_shapes, rates.dtype, current_scaling, tp, sp,
                                        rates.fp8_transposed_copy, rht_cast_fusion)
        casts = {key: casts[key] + shared_casts[key] for key in casts}

    split = np.where(sp, tp, 1.0)
    row_bytes = d_e * rates.act_bytes       # the routed rows move at the experts' width
    # sort by local expert after the dispatch and unsort before the combine: only the all-to-all
    # dispatcher's (sort_chunks_by_idxs); the flex dispatcher's rows arrive grouped by expert
    sort = np.where((local_experts > 1) & ~np.asarray(dispatch_dedup, dtype=bool), 1.0, 0.0)
    act_fwd, act_bwd = ACTIVATION_UNITS[bool(model.gated_mlp)]
    moves = (2.0 * routed * k * row_bytes                                 # permute
             + 2.0 * 2.0 * sort * rows * row_bytes)                       # sort + unsort
    elem_bytes = (routed * E * ROUTER_BYTES_PER_LOGIT_FWD + moves
                  + rows * act_fwd * f_exp / etp * rates.act_bytes        # activation function
                  + (k + 1.0) * routed * row_bytes                        # unpermute (weighted sum)
                  + tokens * act_fwd * f_sh / tp * rates.act_bytes        # shared experts' activation
                  + tokens * h * rates.act_bytes * (REPLICATED_ELEMENTWISE_UNITS / 2) / split)
    # backward: the router's score gradient (read probabilities and their gradient, write the
    # logits' gradient), the same row moves in reverse, the activation's backward, and the
    # weighted sum's (read the output gradient and the k rows for the weights' gradient,
    # write k row gradients)
    elem_bwd_bytes = (routed * E * ROUTER_BYTES_PER_LOGIT_BWD + moves
                      + rows * act_bwd * f_exp / etp * rates.act_bytes
                      + (2.0 * k + 1.0) * routed * row_bytes
                      + tokens * act_bwd * f_sh / tp * rates.act_bytes
                      + tokens * h * rates.act_bytes * (REPLICATED_ELEMENTWISE_UNITS_BWD / 2) / split)
    bias = (expert_bias_work(rows, d_e, local_experts, rates.act_bytes, dispatch_dedup, expert_output_bias)
            if model.linear_bias else None)
    clamp = eager_glu_clamp(model, glu_clamp_eager)
    clamp_fwd, clamp_bwd = glu_clamp_bytes(rows, f_exp / etp, rates.act_bytes)
    clamp_kernels = np.where(clamp, GLU_CLAMP_KERNELS, 0.0)
    elem_s = memory_bound_time_s(elem_bytes + np.where(clamp, clamp_fwd, 0.0) + (bias["fwd_bytes"] if bias else 0.0),
                                 rates, MOE_ELEMENTWISE_KERNELS_FWD + clamp_kernels + (bias["fwd_kernels"] if bias else 0.0))
    elem_bwd_s = memory_bound_time_s(elem_bwd_bytes + np.where(clamp, clamp_bwd, 0.0) + (bias["bwd_bytes"] if bias else 0.0),
                                     rates, MOE_ELEMENTWISE_KERNELS_FWD + RESIDUAL_FORK_KERNELS_BWD + clamp_kernels
                                     + (bias["bwd_kernels"] if bias else 0.0))

    out = {
        "gemm_fwd_s": router_s + proj_s + expert_s + shared_s,
        "gemm_dgrad_s": router_dgrad + proj_dgrad + expert_dgrad + shared_dgrad,
        "gemm_wgrad_s": router_wgrad + proj_wgrad + expert_wgrad + shared_wgrad,
        "expert_gemm_fwd_s": expert_s,
        "shared_gemm_fwd_s": shared_s,
        **shared_ends,
        "router_fwd_s": router_s,
        "elem_fwd_s": elem_s,
        "elem_bwd_s": elem_bwd_s,
        **cast_times(casts, rates),
        "gemm_flops_fwd": router_flops + proj_flops + expert_flops + shared_flops,
        "router_flops_fwd": router_flops,
        "expert_rows": rows,
        "a2a_dispatch_buffer_bytes": moe_dispatch_bytes(routed, k, d_e, rates.act_bytes),
    }
    return {key: value + zero for key, value in out.items()}


# ---- all-to-all -------------------------------------------------------------------------------

def moe_dispatch_bytes(tokens, top_k, hidden, bytes_per_element):
    """Per-GPU buffer of one dispatch all-to-all, bytes: ``tokens * top_k * hidden * bytes``.

    ``tokens`` are the tokens the GPU routes; each goes out once per chosen expert. This is the
    ``bytes_`` that ``collectives.all_to_all_time_s`` / ``group_collective_time_s("all_to_all")``
    take (the GPU holds it and keeps the 1/ep addressed to itself). Combine is the same size in
    its own dtype (DeepSeek-V3 dispatches in fp8 and combines in bf16, report section 3.3.2).
    """
    return _f(tokens) * _f(top_k) * _f(hidden) * _f(bytes_per_element)


def moe_dispatch_bytes_sent(tokens, top_k, hidden, bytes_per_element, ep):
    """Bytes that leave one GPU in one dispatch all-to-all under uniform routing.

    ``moe_dispatch_bytes * (ep - 1) / ep``: of the rows the GPU routes, the 1/ep addressed to
    its own experts stay local. Of what leaves, the share to ranks in the same NVLink domain
    goes over NVLink and the rest over the NIC (``collectives.hierarchical_all_to_all_time_s``).
    """
    ep = _f(ep)
    return moe_dispatch_bytes(tokens, top_k, hidden, bytes_per_element) * (ep - 1.0) / ep


def destination_hit_probability(num_experts, top_k, experts_at_destination):
    """Probability that a token's ``top_k`` distinct experts include at least one of the
    ``experts_at_destination`` held by one destination (a GPU or a node) when the router picks
    them uniformly among ``num_experts``: ``1 - C(E - m, k) / C(E, k)``
    (hypergeometric; = ``1 - prod_{i<k} (E - m - i) / (E - i)``)."""
    e = float(num_experts)
    m = _f(experts_at_destination)
    miss = np.ones_like(m)
    for i in range(int(top_k)):
        miss = miss * np.maximum(e - m - i, 0.0) / (e - i)
    return 1.0 - miss


def group_limited_hit_probability(num_experts, top_k, experts_at_destination, num_groups=1, group_topk=1):
    """``destination_hit_probability`` under group-limited routing, per destination.

    DeepSeek-V2/V3 (V3 report sections 2.1.2 and 3.2.2, config.json ``n_group`` / ``topk_group``)
    split the E experts into ``G = num_groups`` equal groups of ``g = E / G``; a token picks
    ``T = group_topk`` groups, then its ``top_k`` experts among those ``T g`` experts. Under
    uniform routing the T groups are a uniform T-subset and the k experts a uniform k-subset of
    their experts. Experts sit on the EP ranks in order (rank r holds experts ``[r e, (r+1) e)``),
    so a destination holding ``m`` consecutive experts touches ``q`` groups with ``c = m / q`` of
    its experts in each: ``q = m / g``, ``c = g`` when it holds whole groups (DeepSeek-V3 on
    8-GPU nodes at ep 64: a node holds one group of 32); ``q = 1``, ``c = m`` when it sits inside
    one (a GPU's 4 experts). The number ``J`` of its groups among the token's T is
    hypergeometric, ``P(J = j) = C(q, j) C(G - q, T - j) / C(G, T)``, and given J the token misses
    it with probability ``C(T g - j c, k) / C(T g, k)``, so

        ``P(hit) = 1 - sum_j P(J = j) C(T g - j c, k) / C(T g, k)``.

    A token then reaches at most T destinations that each hold whole groups (``sum`` of the
    node hit probabilities ``<= T``: the report's "at most M = 4 nodes"). ``G = 1`` (or
    ``T >= G``) is plain top-k, ``destination_hit_probability``. A destination that straddles
    groups unevenly (``m`` and ``g`` not dividing one another) is taken as ``q = ceil(m / g)``
    groups with ``m / q`` each, an approximation.

    Uniform routing inside the chosen groups is a choice: if the groups are ranked by the
    sum of their two best i.i.d. scores (``noaux_tc``) the chosen groups are hit more often
    (a simulation of that case gives 3.95 distinct nodes a token for DeepSeek-V3 at ep 64, 8 GPUs
    a node, against 3.62 here; the bound is 4).
    """
    G, T, E, k = int(num_groups), int(group_topk), int(num_experts), int(top_k)
    if G <= 1 or T >= G:
        return destination_hit_probability(num_experts, top_k, experts_at_destination)
    g = E / G
    pool = T * g
    total = math.comb(G, T)

    def one(m):
        m = float(m)
        if m <= 0.0:
            return 0.0
        q = int(min(G, max(1, math.ceil(m / g - 1e-9))))
        c = m / q
        miss = 0.0
        for j in range(max(0, T - (G - q)), min(q, T) + 1):
            miss_j = 1.0
            for i in range(k):
                miss_j *= max(pool - j * c - i, 0.0) / (pool - i)
            miss += math.comb(q, j) * math.comb(G - q, T - j) / total * miss_j
        return 1.0 - miss
    # evaluated once per distinct count (a planner column holds a handful: E / ep for each ep)
    m = _f(experts_at_destination)
    values, inverse = np.unique(m, return_inverse=True)
    return np.array([one(v) for v in values], dtype=float)[inverse].reshape(m.shape)


def deduplicated_dispatch_volumes(token_bytes, num_experts, top_k, ep, stride, gpus_per_node, num_groups=1,
                                  group_topk=1):
    """(NVLink bytes, NIC bytes) one GPU sends in one dispatch under a deduplicating dispatcher.

    ``token_bytes``: the GPU's routed tokens x hidden x bytes per element (one copy each). The
    dispatcher (DeepEP's normal kernels, NVIDIA HybridEP: Megatron's ``flex`` token dispatcher)
    sends a token once to each node of the EP group that holds one of its experts, over the NIC
    to the GPU of the same local index, which forwards it over NVLink to each GPU of that node
    that needs it; inside the own node it sends one copy per destination GPU. With
    ``R`` group members per node, ``N`` nodes, ``e = E / ep`` experts per GPU,
    ``p_gpu = destination_hit_probability(E, k, e)`` and ``p_node`` the same for ``R e``:

    * NIC: ``token_bytes * (N - 1) * p_node``;
    * NVLink: ``token_bytes * (R - 1) * p_gpu`` inside the own node, plus forwarding on arrival:
      per needed remote node, the expected GPUs needing the token there (``R p_gpu / p_node``)
      less the receiving GPU when it is one of them (``p_gpu / p_node``), which sums to
      ``token_bytes * (R - 1) * N * p_gpu``.

    Under uniform routing; the combine moves the same volumes back. With group-limited routing
    (``num_groups`` / ``group_topk``: DeepSeek-V3's node-limited routing, each token reaches at
    most 4 nodes) both probabilities are ``group_limited_hit_probability``; the forwarding sum
    above holds as it is (it only uses the per-GPU and per-node marginals).
    """
    n_intra, n_inter = group_span(ep, stride, gpus_per_node)
    per_gpu = float(num_experts) / np.maximum(_f(ep), 1.0)
    p_gpu = group_limited_hit_probability(num_experts, top_k, per_gpu, num_groups, group_topk)
    p_node = group_limited_hit_probability(num_experts, top_k, n_intra * per_gpu, num_groups, group_topk)
    tb = _f(token_bytes)
    return tb * (n_intra - 1.0) * n_inter * p_gpu, tb * (n_inter - 1.0) * p_node


def ep_member_stride(tp, cp, etp, carved_from_dp):
    """Ranks between two members of an expert-parallel group: ``etp`` under MoE parallel folding
    (Megatron-Core >= 0.10's expert RankGenerator tp=etp, ep, dp), ``tp * cp`` where the stack
    carves the EP groups out of data parallelism in the rank order tp-cp-ep-dp-pp (Megatron-Core
    <= 0.9, NVIDIA/Megatron-LM@core_r0.9.0 megatron/core/parallel_state.py RankGenerator;
    ``ParallelConfig.ep_carved_from_dp``). Elementwise over arrays; an EP group spans
    ``ep * stride`` consecutive ranks."""
    return np.where(carved_from_dp, np.asarray(tp, dtype=float) * np.asarray(cp, dtype=float),
                    np.asarray(etp, dtype=float))


def moe_all_to_all_time_s(dispatch_bytes, ep, etp, cluster: ClusterSpec, eff: EfficiencyModel,
                          overlap=0.0, load_imbalance=1.0, combine_bytes=None, stride=None,
                          dedup=False, num_experts=None, top_k=None, capacity_factor=0.0, num_groups=1,
                          group_topk=1):
    """Expert-parallel communication of one MoE layer, seconds (forward and backward).

    Forward = dispatch all-to-all + combine all-to-all over the EP group; backward = the same
    two in reverse (gradients of combine and of dispatch). The EP group is ``ep`` ranks
    ``stride`` apart (default ``etp``: MoE parallel folding, see the module docstring; pass
    ``tp * cp`` for the older layout that carved EP out of data parallelism); it is timed by
    ``topology.group_collective_time_s("all_to_all", ...)`` so it runs over NVLink while
    ``ep * stride <= gpus_per_node`` and over the NICs beyond. The busiest rank receives
    ``load_imbalance`` times the mean, which scales the buffer; with a capacity factor c > 0 the
    senders drop what exceeds c times the mean before sending, so the buffer scales by
    ``min(load_imbalance, c)`` (``capped_rank_imbalance``). With etp > 1 the received rows
    are all-gathered over the ETP group (stride 1) before the experts and reduce-scattered
    after them (Megatron ``MoEAlltoAllTokenDispatcher``). ``overlap`` in [0, 1] is the fraction
    hidden under compute (DualPipe, Megatron's EP-overlapped 1F1B); 0 = fully exposed.

    ``dispatch_bytes`` / ``combine_bytes``: ``moe_dispatch_bytes`` in the dispatch / combine
    dtype (combine defaults to the dispatch size).

    ``dedup`` (per row): the stack's dispatcher sends each token once per destination GPU and
    node instead of once per chosen expert (``deduplicated_dispatch_volumes``; needs
    ``num_experts`` and ``top_k``, and ``num_groups`` / ``group_topk`` for group-limited routing); False = Megatron's ``alltoall`` dispatcher, one row per
    (token, expert) pair.

    Returns a dict of float arrays: ``dispatch_s``, ``combine_s``, ``etp_s`` (all-gather +
    reduce-scatter), ``etp_gather_s`` (its all-gather alone; 0 at etp 1), ``fwd_s``, ``bwd_s`` (totals), ``fwd_exposed_s``, ``bwd_exposed_s``.
    """
    ep, etp = _f(ep), _f(etp)
    stride = etp if stride is None else _f(stride)
    imb = capped_rank_imbalance(load_imbalance, ep, capacity_factor)
    d_bytes = _f(dispatch_bytes) * imb
    c_bytes = (_f(dispatch_bytes) if combine_bytes is None else _f(combine_bytes)) * imb
    dispatch = group_collective_time_s("all_to_all", d_bytes, ep, stride, cluster, eff)
    combine = group_collective_time_s("all_to_all", c_bytes, ep, stride, cluster, eff)
    if np.any(dedup):
        def forwarded(bytes_):
            intra, inter = deduplicated_dispatch_volumes(bytes_ / float(top_k), num_experts, top_k, ep, stride,
                                                         cluster.gpus_per_node, num_groups, group_topk)
            return group_forwarded_all_to_all_time_s(intra, inter, ep, stride, cluster, eff)
        dispatch = np.where(dedup, forwarded(d_bytes), dispatch)
        combine = np.where(dedup, forwarded(c_bytes), combine)
    etp_gather = group_collective_time_s("all_gather", d_bytes * etp, etp, 1, cluster, eff)
    etp_s = etp_gather + group_collective_time_s("reduce_scatter", c_bytes * etp, etp, 1, cluster, eff)
    fwd = dispatch + combine + etp_s
    hidden = np.clip(_f(overlap), 0.0, 1.0)
    return {"dispatch_s": dispatch, "combine_s": combine, "etp_s": etp_s, "etp_gather_s": etp_gather,
            "fwd_s": fwd, "bwd_s": fwd,
            "fwd_exposed_s": fwd * (1.0 - hidden), "bwd_exposed_s": fwd * (1.0 - hidden)}


# ---- memory -----------------------------------------------------------------------------------

def expert_data_parallel_size(dp, cp, tp, ep, etp):
    """Ranks holding the same expert shard: ``dp * cp * tp / (ep * etp)`` (ZeRO shards over them)."""
    return _f(dp) * _f(cp) * _f(tp) / (_f(ep) * _f(etp))


def moe_layer_params_local(model: ModelSpec, tp, ep, etp):
    """(non-expert, expert) parameters of one MoE layer on one GPU, before ZeRO.

    Non-expert: attention and shared experts split by tp, router (h x E) and the two norms
    replicated. Expert: the routed experts split by ep (whole experts) and etp (FFN width).
    The non-expert part is sharded by ZeRO over dp*cp, the expert part over
    ``expert_data_parallel_size``.
    """
    h = model.hidden_size
    moe = model.moe
    shared = mlp_params(h, shared_ffn_total(model), model.gated_mlp)
    router = h * moe.num_experts
    # the LatentMoE projections are replicated over tp, like the router they sit beside
    non_expert = ((attention_params(model) + shared) / _f(tp) + replicated_kv_params_per_tp_rank(model, tp) + router
                  + latent_projection_params(model) + 2 * h)
    expert = expert_params_per_moe_layer(model) / (_f(ep) * _f(etp))
    return non_expert, expert


def expert_model_state_bytes(expert_params_local, zero_stage, dp, cp, tp, ep, etp, low_precision=False,
                             grad_bytes=memory.GRAD_BYTES, fp8_param_gather=False):
    """(weights, gradients, optimizer) bytes of ``expert_params_local`` expert parameters.

    Same per-parameter bytes as ``memory.model_state_bytes`` (18 B mixed-precision Adam, less
    with a 16-bit gradient buffer ``grad_bytes`` or ``fp8_param_gather``), with ZeRO sharding
    over the expert-data-parallel group instead of dp*cp (Megatron's distributed optimizer
    shards expert states over the expert-DP group).
    """
    edp = expert_data_parallel_size(dp, cp, tp, ep, etp)
    return memory.model_state_bytes(expert_params_local, zero_stage, edp, low_precision,
                                    grad_bytes=grad_bytes, fp8_param_gather=fp8_param_gather)


def moe_activation_bytes_per_layer(model: ModelSpec, micro_batch, seq_len, tp, cp, ep, etp, recompute,
                                   load_imbalance=1.0, modules=None, gemm_input_bytes=2.0, probs_in_expert=False,
                                   pinned=False, element_bytes=ACT_BYTES):
    """Activation bytes the routed-expert part of one MoE layer keeps, one micro-batch, one GPU.

    The rest of the layer (attention, norms, the MLP input, shared experts) is
    ``memory.activation_bytes_per_layer(model, ..., ffn=num_shared * shared_ffn)`` (ffn=0 when
    there is no shared expert). With ``routed = micro_batch * seq / (cp * tp)`` and
    ``rows = routed * top_k * etp * imbalance`` (rows on the busiest rank; imbalance capped at the
    capacity factor, ``capped_rank_imbalance``):

    * router: fp32 logits and probabilities, ``routed * E * 8``;
    * expert input after dispatch (fc1's wgrad input), ``rows * d * g`` (d = the experts' width,
      ``params.routed_expert_width``: h, or LatentMoE's latent size; g =
      ``gemm_input_bytes``: 2, or 1 under FP8 recipes); dropped when the ``moe_dispatch``
      module is recomputed (the permutation and all-to-all run again in backward);
    * expert intermediates per row: fc1's output (gated ``2 f / etp``, plain ``f / etp``
      elements of ``element_bytes``) and the activation's output, fc2's input (``g f / etp``;
      dropped by ``mlp_act``);
    * expert outputs back at the source before the weighted sum (probabilities' gradient),
      ``routed * top_k * d * element_bytes``, unless ``probs_in_expert``: the probabilities scale the
      activation's output inside the expert (Megatron-Core >= 0.13, NVIDIA/Megatron-LM
      !2668 "Memory efficient token permutation", core_v0.13.0 experts.py ``permuted_probs``;
      the combine's unpermute then takes no probabilities), whose gradient reads the fc1 output
      already kept; with LatentMoE also the up projection's input, ``routed * d * element_bytes``.

    ``element_bytes``: bytes of an activation element, 2 in 16-bit and FP8-recipe training
    (their activations are bf16), 4 in fp32 / tf32 training (``compute.activation_bytes``, as
    ``memory.activation_terms`` takes it); ``gemm_input_bytes`` equals it outside FP8 recipes.

    ``pinned``: each of these tensors as its pinned host copy takes it (``memory.pinned_bytes``:
    an offloaded layer's host bytes).

    ``recompute`` 2 (full) or the ``moe`` module keep none of it (the layer input, or the
    block's input, is in the generic formula); otherwise ``modules`` (a ``memory.MODULE_BITS`` mask, None = from ``recompute`` alone via
    ``memory.effective_modules``) says what is recomputed.
    """
    moe = model.moe
    h, E, k = model.hidden_size, moe.num_experts, moe.top_k
    d_e = routed_expert_width(model)
    gb = _f(gemm_input_bytes)
    mods = memory.effective_modules(recompute, 0 if modules is None else modules)
    routed = _f(micro_batch) * _f(seq_len) / (_f(cp) * _f(tp))
    rows = routed * k * _f(etp) * capped_rank_imbalance(load_imbalance, ep, moe.capacity_factor)
    f_local = moe.expert_ffn_hidden_size / _f(etp)
    eb = _f(element_bytes)
    fc1_out = (2.0 if model.gated_mlp else 1.0) * f_local * eb
    drop_dispatch = (mods & memory.MODULE_BITS["moe_dispatch"]) != 0
    drop_act = (mods & memory.MODULE_BITS["mlp_act"]) != 0
    # LatentMoE: the up projection's input (the combined rows at the latent width) is kept for
    # its weight gradient; the down projection's input is the norm's output the layer keeps
    latent_input = routed * d_e * eb if moe.latent_size else 0.0
    size = memory.pinned_bytes if pinned else (lambda x: x)
    kept = (size(routed * E * ROUTER_BYTES_PER_LOGIT_SAVED)
            + np.where(drop_dispatch, 0.0, size(rows * d_e * gb))
            + size(rows * fc1_out) + np.where(drop_act, 0.0, size(rows * gb * f_local))
            + np.where(probs_in_expert, 0.0, size(routed * k * d_e * eb)) + size(latent_input))
    # ``moe``: the whole block is recomputed from its input (the norm's output, kept by the layer)
    whole_block = (mods & memory.MODULE_BITS["moe"]) != 0
    return np.where((np.asarray(recompute) == 2) | whole_block, 0.0, kept)


def moe_dispatch_buffer_bytes(model: ModelSpec, micro_batch, seq_len, tp, cp, etp, load_imbalance=1.0, ep=1,
                              bytes_per_element=ACT_BYTES):
    """Transient bytes of one MoE layer's token exchange on one GPU: the permuted rows it sends
    (``routed * top_k * d``, d the experts' width ``params.routed_expert_width``) and the rows it
    receives (``rows * d``), live together while the
    dispatch (and, mirrored, the combine) all-to-all runs; freed when the layer is done, so one
    layer's worth at a time. ``bytes_per_element``: the activations' element size (2 in 16-bit
    and FP8-recipe training, 4 in fp32 / tf32: ``compute.activation_bytes``)."""
    moe = model.moe
    k = moe.top_k
    routed = _f(micro_batch) * _f(seq_len) / (_f(cp) * _f(tp))
    rows = routed * k * _f(etp) * capped_rank_imbalance(load_imbalance, ep, moe.capacity_factor)
    return (routed * k + rows) * routed_expert_width(model) * _f(bytes_per_element)
