"""The vectorized step model: every configuration of a ``ConfigBatch`` to step time and memory.

This is the one place where cost-model terms are combined into a training step. The
single-configuration simulator (``simulator.simulate``) and the planner both call
``evaluate``; the planner on thousands of rows at once.

Step time (per optimizer step, seconds), for the slowest pipeline stage:

    t_mb     = layers_on_stage * (fwd + bwd + recompute + exposed TP/CP/EP comm per layer)
               + LM head and loss (last stage) + pipeline send/recv + exposed ZeRO-3 gathers
               + unfused gradient accumulation (only with grad_accumulation_fusion off)
    pipeline = m * t_mb + bubble                   (closed forms per schedule, see bubble_time_s)
    step     = pipeline + exposed DP communication + straggler wait + optimizer step

The straggler wait is ``EfficiencyModel.sync_skew_fraction`` x the step's compute on jobs of
more than one rank (0 on the GPU generations; measured on CPU hosts by ``paraplan calibrate``).

Exposed DP communication: with ``overlap_grad_reduce`` the gradient buckets reduce under the
last micro-batch's backward (the only one after which gradients are final); with
``overlap_param_gather`` the distributed optimizer's parameter all-gather runs under the first
micro-batch's forward. The generation's fitted ``exposed_dp_fraction`` of the traffic stays
exposed (last bucket, contention), and never less than what exceeds that one pass.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from cost_models import context_parallel, layer_costs, memory, moe as moe_costs, params
from cost_models.compute import LOW_PRECISION, compute_rates, sixteen_bit_dtype
from cost_models.topology import group_collective_time_s, p2p_stage_time_s
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from simulator.config_batch import ATTENTION_KERNEL_CODES, RECOMPUTE_CODES, SCHEDULE_CODES, ConfigBatch
from simulator.parallel_config import AttentionKernel, Recompute, Schedule

#: HBM bytes the optimizer step moves per local parameter in mixed-precision training, as
#: Megatron's optimizer runs it: fused Adam (fp32 weight, grad, m, v read; weight, m, v
#: written: 28), the gradient-norm pass for clipping (fp32 grad read: 4), the copy of the
#: fp32 master weights into the 16-bit model weights (read 4, write 2) and zeroing the fp32
#: gradient buffer for the next step (write 4).
ADAM_STEP_BYTES_PER_PARAM = 42.0
#: fp16 adds loss-scale unscaling with the inf/NaN check, in place over the fp32 gradients
#: (read 4, write 4)
ADAM_STEP_BYTES_PER_PARAM_FP16 = 50.0
#: pure fp32 training (torch.optim.Adam on the CPU runs): the weights are the master copy, no
#: 16-bit copy, no clipping
ADAM_STEP_BYTES_PER_PARAM_FP32 = 28.0
#: gradients are reduced in fp32 (Megatron's main-grad buffers) except under ZeRO-3, which
#: reduce-scatters in the 16-bit parameter dtype (DeepSpeed ZeRO-3, FSDP mixed precision).
GRAD_REDUCE_BYTES = 4.0
#: weight tensors of a dense transformer layer: fused QKV, output projection, MLP up (fused
#: gate+up when gated) and down, two norms. One accumulation kernel each; biases, which the
#: model specs do not record, would add one each.
DENSE_LAYER_PARAM_TENSORS = 6
# ZeRO-3 reduce-scatters and parameter all-gathers move the parameter dtype (2 bytes in
# 16-bit training, 4 in fp32)

_GPIPE = SCHEDULE_CODES[Schedule.GPIPE]
_INTERLEAVED = SCHEDULE_CODES[Schedule.INTERLEAVED]
_ZB_H1 = SCHEDULE_CODES[Schedule.ZB_H1]
_ZB_H2 = SCHEDULE_CODES[Schedule.ZB_H2]
_ZB_V = SCHEDULE_CODES[Schedule.ZB_V]
_DUALPIPE = SCHEDULE_CODES[Schedule.DUALPIPE]


def bubble_time_s(schedule, pp, vpp, t_f, t_b, t_w):
    """Idle time of the slowest stage per step, closed forms (seconds).

    GPipe / 1F1B: (p-1)(F+B+W) (Huang et al. 2019; Narayanan et al. 2021). Interleaved:
    divided by v (Narayanan et al. 2021, section 2.2). ZB-H1: (p-1)(F+B-W); ZB-H2 and ZB-V:
    (p-1)(F+B-2W), floored at zero (Qi et al. 2023, section 3). DualPipe: (p/2-1)(F+B-3W)
    (DeepSeek-V3 report, table 2). Here B is the input-gradient part of backward and W the
    weight-gradient part; t_f, t_b, t_w are per micro-batch on the stage.
    """
    pm1 = pp - 1.0
    one_f_one_b = pm1 * (t_f + t_b + t_w)
    return np.select(
        [schedule == _INTERLEAVED, schedule == _ZB_H1, (schedule == _ZB_H2) | (schedule == _ZB_V),
         schedule == _DUALPIPE],
        [one_f_one_b / np.maximum(vpp, 1), pm1 * np.maximum(t_f + t_b - t_w, 0.0),
         pm1 * np.maximum(t_f + t_b - 2.0 * t_w, 0.0),
         np.maximum(pp / 2.0 - 1.0, 0.0) * np.maximum(t_f + t_b - 3.0 * t_w, 0.0)],
        default=one_f_one_b)


def _degrees(batch: ConfigBatch):
    """(dp, tp, pp, cp, ep, etp, vpp) of ``batch`` as float arrays."""
    f = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    return (f(batch.dp), f(batch.tp), f(batch.pp), f(batch.cp), f(batch.ep), f(batch.etp), f(batch.vpp))


def _layers_per_stage(model: ModelSpec, pp):
    """Transformer layers (MTP modules included) on the slowest pipeline stage."""
    return np.ceil((model.num_layers + float(model.mtp_layers)) / pp)


def local_params(model: ModelSpec, batch: ConfigBatch):
    """Parameters one GPU owns before ZeRO sharding, per row of ``batch``.

    Returns (dense layer's parameter count, non-expert parameters of the heavier of the
    first and last stage / tp, local expert parameters, expert-data-parallel degree). The
    first stage also holds the embedding (and the output layer when pp = 1); the last stage
    the output layer and the MTP projections (with its own embedding copy when pp > 1).
    """
    dp, tp, pp, cp, ep, etp, _ = _degrees(batch)
    n_mtp = float(model.mtp_layers)
    layers_stage = _layers_per_stage(model, pp)
    moe_share = float(model.num_moe_layers) / model.num_layers
    layer_params = params.dense_layer_params(model)
    stage_params = layers_stage * (1 - moe_share) * layer_params / tp
    if model.moe is not None:
        moe_non_expert, moe_expert = moe_costs.moe_layer_params_local(model, tp, ep, etp)
        stage_params = stage_params + layers_stage * moe_share * moe_non_expert
        expert_local = layers_stage * moe_share * moe_expert
        edp = moe_costs.expert_data_parallel_size(dp, cp, tp, ep, etp)
    else:
        expert_local = 0.0 * tp
        edp = dp * cp
    first_stage_params = stage_params + params.embedding_params(model) / tp \
        + np.where(pp == 1, params.lm_head_params(model) / tp, 0.0)
    mtp_params = n_mtp * params.mtp_projection_params(model) / tp \
        + np.where((pp > 1) & (n_mtp > 0), params.embedding_params(model) / tp, 0.0)
    last_stage_params = stage_params + params.lm_head_params(model) / tp + mtp_params
    return layer_params, np.maximum(first_stage_params, last_stage_params), expert_local, edp


def memory_parts(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch) -> dict:
    """Peak memory per GPU on the first pipeline stage (the one holding the most activations),
    bytes, by part, per row of ``batch``; ``memory_bytes`` is the total.

    The memory half of ``evaluate`` on its own: the planner calls it first and times only the
    rows that fit (the figures are the same arrays ``evaluate`` returns).
    """
    rates = compute_rates(cluster.gpu, eff, batch.dtype)
    param_bytes = rates.act_bytes
    low_precision = batch.dtype in LOW_PRECISION
    dp, tp, pp, cp, ep, etp, vpp = _degrees(batch)
    mbs, gbs = np.asarray(batch.micro_batch, dtype=float), np.asarray(batch.global_batch, dtype=float)
    sp, rc, zero = batch.sequence_parallel, batch.recompute, batch.zero_stage
    s = float(model.seq_len)
    m = gbs / (dp * mbs)
    tokens = mbs * s / cp
    layers_stage = _layers_per_stage(model, pp)
    layer_params, params_local, expert_local, edp = local_params(model, batch)

    weights_b, grads_b, optim_b = memory.model_state_bytes(params_local, zero, dp * cp, low_precision,
                                                           full_precision=rates.act_bytes > 2)
    if model.moe is not None:
        ew, eg, eo = moe_costs.expert_model_state_bytes(expert_local, zero, dp, cp, tp, ep, etp, low_precision)
        weights_b, grads_b, optim_b = weights_b + ew, grads_b + eg, optim_b + eo
    # per-layer activations depend on the layer key (and flash attention) only
    per_layer_act, full_layer_act = _once_per_run(
        batch, LAYER_KEY_FIELDS + ("flash_attention",), partial(_layer_activation_bytes, model),
        mbs, tp, cp, sp, rc, batch.flash_attention, ep, etp, batch.moe_load_imbalance)
    in_flight = memory.in_flight_microbatches(pp, vpp, m, batch.schedule == _GPIPE)
    activations = per_layer_act * layers_stage * in_flight
    recompute_work = np.where(rc == 2, full_layer_act, 0.0)
    logits = np.where(pp == 1, tokens * model.vocab_size / tp * memory.LOGIT_BYTES, 0.0)
    z3_buffers = np.where(zero >= 3, 2.0 * layer_params / tp * param_bytes, 0.0)
    tensors = weights_b + grads_b + optim_b + activations + recompute_work + logits + z3_buffers
    allowance = memory.allocator_allowance_bytes(tensors)
    return {
        "weights_bytes": weights_b,
        "gradients_bytes": grads_b,
        "optimizer_bytes": optim_b,
        "activations_bytes": activations + recompute_work,
        "logits_bytes": logits,
        "zero3_buffers_bytes": z3_buffers,
        "allocator_bytes": allowance,
        "memory_bytes": tensors + allowance,
        "params_local": params_local,
        # the parameter split ``evaluate`` reuses (not memory): expert parameters, expert-DP degree
        "_expert_local": np.broadcast_to(expert_local, tensors.shape),
        "_edp": np.broadcast_to(edp, tensors.shape),
    }


def _layer_activation_bytes(model: ModelSpec, mbs, tp, cp, sp, rc, flash_attention, ep, etp, imbalance):
    """(activation bytes one average layer keeps per micro-batch, those of a layer without
    recomputation) on one GPU, for the given layer keys."""
    s = float(model.seq_len)
    dense_ffn = (model.moe.dense_ffn_hidden_size or model.ffn_hidden_size) if model.moe else None
    per_layer_act = memory.activation_bytes_per_layer(model, mbs, s, tp, cp, sp, rc,
                                                      flash_attention=flash_attention, ffn=dense_ffn)
    if model.moe is not None:
        moe_share = float(model.num_moe_layers) / model.num_layers
        shared_ffn = model.moe.num_shared_experts * (model.moe.shared_expert_ffn_hidden_size
                                                     or model.moe.expert_ffn_hidden_size)
        moe_act = (memory.activation_bytes_per_layer(model, mbs, s, tp, cp, sp, rc, flash_attention,
                                                     ffn=max(shared_ffn, 1))
                   + moe_costs.moe_activation_bytes_per_layer(model, mbs, s, tp, cp, ep, etp, rc, imbalance))
        per_layer_act = (1 - moe_share) * per_layer_act + moe_share * moe_act
    full_layer_act = memory.activation_bytes_per_layer(model, mbs, s, tp, cp, sp, 0,
                                                       flash_attention=flash_attention)
    return per_layer_act, full_layer_act


#: ConfigBatch fields a layer's costs depend on (with the model, cluster and dtype): rows that
#: share them share every per-layer time and FLOP count.
LAYER_KEY_FIELDS = ("tp", "cp", "micro_batch", "sequence_parallel", "recompute", "ep", "etp",
                    "moe_load_imbalance", "tp_comm_overlap", "cp_kind", "attention_kernel")


def _runs(columns) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each run of equal keys, run index of every row) over ``columns``.

    Consecutive rows with equal values in every column form one run; the planner enumerates
    its rows sorted by the layer key, so its chunks have few runs. Scalars are constant.
    """
    arrays = [np.asarray(c) for c in columns if np.ndim(c)]
    n = len(arrays[0]) if arrays else 1
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for a in arrays:
        change[1:] |= a[1:] != a[:-1]
    return np.flatnonzero(change), np.cumsum(change) - 1


def _once_per_run(batch: ConfigBatch, key_fields, fn, *args):
    """``fn(*args)`` evaluated on the first row of each run of rows of ``batch`` equal in
    ``key_fields`` (array arguments taken at those rows, scalars as given), its outputs (a dict
    or a tuple of arrays) spread back to every row."""
    first, run = _runs([getattr(batch, k) for k in key_fields])
    out = fn(*(np.asarray(a)[first] if np.ndim(a) else a for a in args))

    def spread(v):
        return np.broadcast_to(v, (len(first),))[run]

    return {k: spread(v) for k, v in out.items()} if isinstance(out, dict) else tuple(spread(v) for v in out)


def _recomputed(rc, full, selective=0.0):
    """Per row, what recomputation repeats: ``full`` under full recompute (code 2),
    ``selective`` (the attention core) under selective (1), nothing otherwise."""
    return np.where(rc == 2, full, np.where(rc == 1, selective, 0.0))


def _layer_block(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, rates, tokens, tp, cp, sp, rc,
                 ep, etp, imbalance, tp_overlap, cp_kind, attention_kernel) -> dict:
    """Per-layer times (seconds, one micro-batch, one average layer of a stage) and FLOPs, and
    the model's ends (LM head, embedding, MTP modules), for the given layer keys."""
    gpu = cluster.gpu
    s = float(model.seq_len)
    h = float(model.hidden_size)
    # exposed share of the softmax exponentials: the generation's usual kernel, or the one named
    softmax_exposed = np.select([attention_kernel == ATTENTION_KERNEL_CODES[AttentionKernel.SERIAL],
                                 attention_kernel == ATTENTION_KERNEL_CODES[AttentionKernel.PIPELINED]],
                                [1.0, 0.0], eff.exposed_softmax_fraction)
    materialized = attention_kernel == ATTENTION_KERNEL_CODES[AttentionKernel.MATERIALIZED]
    attn = layer_costs.attention_block_costs(model, rates, tokens, s, tp, sp, softmax_exposed, materialized)
    dense_ffn = (model.moe.dense_ffn_hidden_size or model.ffn_hidden_size) if model.moe else None
    mlp = layer_costs.dense_mlp_costs(model, rates, tokens, tp, sp, ffn=dense_ffn)
    gemm_f = attn["gemm_fwd_s"] + mlp["gemm_fwd_s"]
    # quantisation kernels of low-precision GEMMs (0 in 16/32-bit): inputs in forward, output
    # gradients in backward; weights once per step (``weight_cast_s``, cached over the step)
    cast_f = attn["cast_fwd_s"] + mlp["cast_fwd_s"]
    weight_cast = attn["weight_cast_s"] + mlp["weight_cast_s"]
    cast_b = attn["cast_bwd_s"] + mlp["cast_bwd_s"]
    elem_f = attn["elem_fwd_s"] + mlp["elem_fwd_s"]
    elem_b = attn["elem_bwd_s"] + mlp["elem_bwd_s"]
    layer_fwd = gemm_f + cast_f + attn["core_fwd_s"] + elem_f
    recompute = _recomputed(rc, layer_fwd, attn["core_fwd_s"])
    n_moe = float(model.num_moe_layers)
    moe_share = n_moe / model.num_layers          # fraction of a stage's layers that are MoE
    layer_flops_fwd = attn["gemm_flops_fwd"] + mlp["gemm_flops_fwd"] + attn["core_flops_fwd"]
    last_layer_flops = layer_flops_fwd     # the kind the model ends with (an MTP module repeats it)
    if model.moe is not None:
        # MoE layers: the same attention block, routed + shared experts instead of the MLP
        moe = moe_costs.moe_mlp_costs(model, rates, tokens, ep, etp, imbalance, tp, sp)
        moe_gemm_f = attn["gemm_fwd_s"] + moe["gemm_fwd_s"]
        moe_cast_f = attn["cast_fwd_s"] + moe["cast_fwd_s"]
        moe_weight_cast = attn["weight_cast_s"] + moe["weight_cast_s"]
        moe_cast_b = attn["cast_bwd_s"] + moe["cast_bwd_s"]
        moe_elem_f = attn["elem_fwd_s"] + moe["elem_fwd_s"]
        moe_elem_b = attn["elem_bwd_s"] + moe["elem_bwd_s"]
        moe_fwd = moe_gemm_f + moe_cast_f + attn["core_fwd_s"] + moe_elem_f
        dispatch = moe_costs.moe_dispatch_bytes(tokens / tp, model.moe.top_k, h, rates.act_bytes)
        a2a = moe_costs.moe_all_to_all_time_s(dispatch, ep, etp, cluster, eff,
                                             overlap=1.0 - eff.exposed_ep_fraction,
                                             load_imbalance=imbalance)
        moe_rec = _recomputed(rc, moe_fwd, attn["core_fwd_s"])
        # per average layer of a stage: dense and MoE layers weighted by their share
        layer_fwd = (1 - moe_share) * layer_fwd + moe_share * moe_fwd
        gemm_f = (1 - moe_share) * gemm_f + moe_share * moe_gemm_f
        weight_cast = (1 - moe_share) * weight_cast + moe_share * moe_weight_cast
        cast_b = (1 - moe_share) * cast_b + moe_share * moe_cast_b
        elem_f = (1 - moe_share) * elem_f + moe_share * moe_elem_f
        elem_b = (1 - moe_share) * elem_b + moe_share * moe_elem_b
        recompute = (1 - moe_share) * recompute + moe_share * (moe_rec + np.where(rc == 2, a2a["fwd_exposed_s"], 0.0))
        a2a_fwd = moe_share * a2a["fwd_exposed_s"]
        a2a_bwd = moe_share * a2a["bwd_exposed_s"]
        moe_flops = attn["gemm_flops_fwd"] + moe["gemm_flops_fwd"] + attn["core_flops_fwd"]
        layer_flops_fwd = (1 - moe_share) * layer_flops_fwd + moe_share * moe_flops
        if n_moe > 0:
            last_layer_flops = moe_flops
    else:
        a2a_fwd = a2a_bwd = 0.0 * tokens

    # ---- tensor- and context-parallel communication ---------------------------------------
    act_bytes = tokens * h * rates.act_bytes
    tp_coll = group_collective_time_s("all_reduce", act_bytes, tp, 1, cluster, eff)
    tp_fwd = 2.0 * tp_coll
    # sequence parallelism all-gathers the norm output again in backward for the weight
    # gradients of the two column-parallel GEMMs (Korthikanti et al. 2022, section 4.2.2):
    # two extra all-gathers, together the time of one all-reduce
    tp_bwd = 2.0 * tp_coll + np.where(sp, tp_coll, 0.0)
    tp_rec = np.where(rc == 2, tp_fwd, 0.0)
    # forced overlap hides TP traffic behind the GEMMs; otherwise the generation's usual stack
    # leaves the fitted fraction exposed
    tp_x = eff.exposed_tp_fraction
    tp_exposed_f = np.where(tp_overlap, np.maximum(tp_fwd - gemm_f, 0.0), tp_x * tp_fwd)
    tp_exposed_b = np.where(tp_overlap, np.maximum(tp_bwd - 2 * gemm_f, 0.0), tp_x * tp_bwd)
    tp_exposed_r = np.where(tp_overlap, np.maximum(tp_rec - gemm_f, 0.0), tp_x * tp_rec)
    if np.any(cp > 1):
        cpc = context_parallel.context_parallel_costs(model, cp_kind, tokens, cp, tp, attn["core_fwd_s"],
                                                      attn["core_bwd_s"], cluster, eff)
    else:
        cpc = {"fwd_exposed_s": 0.0 * tokens, "bwd_exposed_s": 0.0 * tokens}
    # exposed context- and expert-parallel traffic per layer
    cp_fwd = cpc["fwd_exposed_s"] + a2a_fwd
    cp_bwd = cpc["bwd_exposed_s"] + a2a_bwd
    layer_w = gemm_f                                  # weight-gradient GEMMs
    layer_b = gemm_f + cast_b + attn["core_bwd_s"] + elem_b  # input-gradient part
    layer_total = (layer_fwd + layer_b + layer_w + recompute + tp_exposed_f + tp_exposed_b
                   + tp_exposed_r + cp_fwd + cp_bwd)

    # ---- the model's ends -----------------------------------------------------------------
    # the output layer stays in 16-bit under the low-precision recipes (cost_models.low_precision)
    low_precision = rates.dtype in LOW_PRECISION
    head_rates = compute_rates(gpu, eff, sixteen_bit_dtype(gpu)) if low_precision else rates
    head = layer_costs.lm_head_costs(model, head_rates, tokens, tp)
    emb = layer_costs.embedding_costs(model, rates, tokens)
    out = {
        "layer_fwd": layer_fwd, "layer_b": layer_b, "layer_w": layer_w, "recompute": recompute,
        "weight_cast_s": weight_cast, "layer_total": layer_total,
        "tp_exposed_f": tp_exposed_f, "tp_exposed_b": tp_exposed_b, "tp_exposed_r": tp_exposed_r,
        "tp_comm_s": tp_fwd + tp_bwd + tp_rec,
        "cp_fwd": cp_fwd, "cp_bwd": cp_bwd, "a2a_fwd": a2a_fwd, "a2a_bwd": a2a_bwd,
        "cp_exposed_s": cpc["fwd_exposed_s"] + cpc["bwd_exposed_s"],
        "head_s": head["fwd_s"] + head["bwd_s"], "embedding_s": emb["fwd_s"] + emb["bwd_s"],
        "layer_flops_fwd": layer_flops_fwd, "head_flops_fwd": head["flops_fwd"],
        "recompute_flops_layer": _recomputed(rc, layer_flops_fwd, attn["core_flops_fwd"]),
    }
    n_mtp = float(model.mtp_layers)
    if n_mtp > 0:
        mtp_proj = layer_costs.mtp_projection_costs(model, rates, tokens, tp)
        out["mtp_s"] = mtp_proj["fwd_s"] + mtp_proj["bwd_s"] + head["fwd_s"] + head["bwd_s"]
        out["mtp_flops_fwd"] = n_mtp * (last_layer_flops + head["flops_fwd"] + mtp_proj["flops_fwd"])
        out["mtp_recompute_flops"] = n_mtp * _recomputed(rc, last_layer_flops, attn["core_flops_fwd"])
    return out


def evaluate(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch,
             memory_by_part: dict | None = None) -> dict:
    """Step time, breakdown and memory for every row of ``batch``; dict of float arrays.

    ``memory_by_part``: ``memory_parts`` of these rows when the caller has them already (the
    planner computes memory first to time only the rows that fit); computed here otherwise.
    """
    gpu = cluster.gpu
    rates = compute_rates(gpu, eff, batch.dtype)
    param_bytes = rates.act_bytes      # 16-bit weights gathered (fp32 when training in fp32)
    dp, tp, pp, cp, ep, etp, vpp = _degrees(batch)
    mbs, gbs = np.asarray(batch.micro_batch, dtype=float), np.asarray(batch.global_batch, dtype=float)
    rc = batch.recompute
    s = float(model.seq_len)
    h = float(model.hidden_size)
    m = gbs / (dp * mbs)
    tokens = mbs * s / cp

    # ---- one layer, one micro-batch (and the model's ends): depends on the layer key only ----
    lay = _once_per_run(batch, LAYER_KEY_FIELDS, partial(_layer_block, model, cluster, eff, rates),
                        tokens, tp, cp, batch.sequence_parallel, rc, ep, etp, batch.moe_load_imbalance,
                        batch.tp_comm_overlap, batch.cp_kind, batch.attention_kernel)
    layer_fwd, layer_b, layer_w, recompute = lay["layer_fwd"], lay["layer_b"], lay["layer_w"], lay["recompute"]
    tp_exposed_f, tp_exposed_b, tp_exposed_r = lay["tp_exposed_f"], lay["tp_exposed_b"], lay["tp_exposed_r"]
    cp_fwd, cp_bwd, a2a_fwd, a2a_bwd = lay["cp_fwd"], lay["cp_bwd"], lay["a2a_fwd"], lay["a2a_bwd"]
    layer_total = lay["layer_total"]
    moe_share = float(model.num_moe_layers) / model.num_layers

    # ---- the slowest stage ----------------------------------------------------------------
    n_mtp = float(model.mtp_layers)
    layers_stage = _layers_per_stage(model, pp)
    ends = lay["head_s"] + np.where(pp == 1, lay["embedding_s"], 0.0)
    # multi-token prediction (DeepSeek-V3 report, section 2.2): each module is a transformer
    # layer (counted in layers_stage above), a 2h -> h projection and another pass through
    # the shared LM head. The runs that train it lay the pipeline out with the module in a
    # slot of its own (Megatron-Core pipeline_model_parallel_layout) so that no stage carries
    # it on top of a full share of layers: its projection and head work is spread over the
    # pp stages (exact at pp = 1)
    if n_mtp > 0:
        ends = ends + n_mtp * lay["mtp_s"] / pp
    # low-precision weights are quantised once per step (the first micro-batch's forward) and
    # the copies reused by every later micro-batch and by recomputation
    weight_cast = layers_stage * lay["weight_cast_s"]
    # scatter/gather optimisation: each TP rank sends 1/tp of the activation across stages and
    # the receiver all-gathers it over NVLink (Narayanan et al. 2021, section 4.1)
    p2p_bytes = tokens * h * rates.act_bytes / tp
    p2p = np.where(pp > 1, 2.0 * vpp * p2p_stage_time_s(p2p_bytes, tp * cp * dp, cluster, eff), 0.0)

    # parameters this GPU owns (before ZeRO); the first stage also holds the embedding
    if memory_by_part is None:
        memory_by_part = memory_parts(model, cluster, eff, batch)
    params_local = memory_by_part["params_local"]
    expert_local, edp = memory_by_part["_expert_local"], memory_by_part["_edp"]

    dp_group = dp * cp
    zero = batch.zero_stage
    # ZeRO-3: gather parameters in forward and backward, reduce-scatter gradients, per micro-batch
    # (flat rings: ZeRO-3/FSDP gathers are per-layer side-stream rings; the ZeRO-3 runs of
    # Narayanan et al. 2021, Table 2, move parameters at about one NIC's bandwidth per GPU,
    # which the flat ring reproduces and the all-NIC form does not)
    # one collective per layer and pass (FSDP wraps each transformer block; DeepSpeed's prefetch
    # buckets are no larger), so the ring's (n-1)-step latency is paid per layer. With
    # ``zero3_recompute_gather`` a fully recomputed layer is gathered a third time for its
    # recompute forward (DeepSpeed's per-module release; see ParallelConfig)
    per_layer = params_local * param_bytes / layers_stage
    gathers = 2.0 + (batch.zero3_recompute_gather & (rc == RECOMPUTE_CODES[Recompute.FULL]))
    z3_comm = layers_stage * (gathers * group_collective_time_s("all_gather", per_layer, dp_group, tp, cluster, eff)
                              + group_collective_time_s("reduce_scatter", per_layer, dp_group, tp, cluster, eff))
    compute_mb = layers_stage * (layer_fwd + layer_b + layer_w + recompute) + ends
    z3_exposed = np.where(zero >= 3,
                          np.where(batch.overlap_param_gather,
                                   np.maximum(z3_comm - compute_mb, eff.exposed_dp_fraction * z3_comm), z3_comm),
                          0.0)

    # unfused gradient accumulation: each micro-batch's weight gradients land in fresh tensors
    # (written by the GEMM, counted there) that an extra kernel per parameter tensor adds into
    # the fp32 gradient buffer: read the fresh gradient and the buffer, write the buffer. A
    # plain add streams at the memory's full bandwidth (norm and activation kernels, which
    # also compute, reach only ``hbm_fraction`` of it)
    accum_bytes = (params_local + expert_local) * (param_bytes + 2.0 * GRAD_REDUCE_BYTES)
    if model.moe is not None:   # MoE layers: router + two matrices per local (routed, shared) expert
        moe_tensors = (DENSE_LAYER_PARAM_TENSORS - 1 + 2.0 * model.moe.num_experts / ep
                       + 2.0 * (model.moe.num_shared_experts > 0))
    else:
        moe_tensors = 0.0
    param_tensors_stage = layers_stage * ((1 - moe_share) * DENSE_LAYER_PARAM_TENSORS + moe_share * moe_tensors)
    grad_accum = np.where(batch.grad_accumulation_fusion, 0.0,
                          accum_bytes / cluster.gpu.hbm_bw_bytes_per_s
                          + param_tensors_stage * rates.kernel_overhead_s)

    t_mb = layers_stage * layer_total + ends + p2p + z3_exposed + grad_accum
    t_fwd_mb = layers_stage * (layer_fwd + tp_exposed_f + cp_fwd)
    t_w_mb = layers_stage * layer_w + grad_accum
    t_b_mb = t_mb - t_fwd_mb - t_w_mb
    bubble = bubble_time_s(batch.schedule, pp, vpp, t_fwd_mb, t_b_mb, t_w_mb)
    # every stage quantises its weights in-line in its first forward (Transformer Engine's
    # first-micro-batch cast), so the first micro-batch reaches the last stage that much later
    # per upstream stage: pipeline fill
    bubble = np.where(pp > 1, bubble, 0.0) + (pp - 1.0) * weight_cast
    pipeline = m * t_mb + bubble + weight_cast

    # ---- data-parallel gradient reduction and parameter gather ----------------------------
    # gradient buckets: flat rings over each GPU's NIC (every byte crosses each node boundary at
    # one NIC's speed); Narayanan et al. 2021 Table 1 small models (dp 32, tp 1-2) need it
    dp_algorithm = "ring"
    grad_rs = group_collective_time_s("reduce_scatter", params_local * GRAD_REDUCE_BYTES, dp_group, tp, cluster, eff, dp_algorithm)
    grad_ar = group_collective_time_s("all_reduce", params_local * GRAD_REDUCE_BYTES, dp_group, tp, cluster, eff, dp_algorithm)
    param_ag = group_collective_time_s("all_gather", params_local * param_bytes, dp_group, tp, cluster, eff, dp_algorithm)
    if model.moe is not None:   # expert gradients reduce over the expert-data-parallel group
        e_rs = group_collective_time_s("reduce_scatter", expert_local * GRAD_REDUCE_BYTES, edp, tp * ep, cluster, eff, dp_algorithm)
        e_ar = group_collective_time_s("all_reduce", expert_local * GRAD_REDUCE_BYTES, edp, tp * ep, cluster, eff, dp_algorithm)
        e_ag = group_collective_time_s("all_gather", expert_local * param_bytes, edp, tp * ep, cluster, eff, dp_algorithm)
    else:
        e_rs = e_ar = e_ag = 0.0
    grad_comm = np.where(zero == 0, grad_ar + e_ar, np.where(zero <= 2, grad_rs + e_rs, 0.0))
    gather_comm = np.where((zero == 1) | (zero == 2), param_ag + e_ag, 0.0)
    # overlapped DP traffic: gradients are final only after the last micro-batch, so their
    # bucketed reduction runs under that micro-batch's backward; the distributed optimizer's
    # parameter all-gather runs under the first micro-batch's forward (Megatron-Core
    # overlap_grad_reduce / overlap_param_gather). The generation's fitted fraction stays
    # exposed, but never less than what exceeds that one pass of the stage
    grad_window = layers_stage * (layer_b + layer_w)
    gather_window = layers_stage * layer_fwd
    x = eff.exposed_dp_fraction
    exposed_grad = np.where(batch.overlap_grad_reduce,
                            np.maximum(x * grad_comm, grad_comm - grad_window), grad_comm)
    exposed_gather = np.where(batch.overlap_param_gather,
                              np.maximum(x * gather_comm, gather_comm - gather_window), gather_comm)
    dp_exposed = exposed_grad + exposed_gather

    opt_params = params_local / np.where(zero >= 1, dp_group, 1.0) + expert_local / np.where(zero >= 1, edp, 1.0)
    adam_bytes = {"fp32": ADAM_STEP_BYTES_PER_PARAM_FP32,
                  "fp16": ADAM_STEP_BYTES_PER_PARAM_FP16}.get(batch.dtype, ADAM_STEP_BYTES_PER_PARAM)
    opt_fraction = eff.optimizer_hbm_fraction or eff.hbm_fraction
    optimizer = opt_params * adam_bytes / (cluster.gpu.hbm_bw_bytes_per_s * opt_fraction)

    compute_part = m * layers_stage * (layer_fwd + layer_b + layer_w) + m * (ends + grad_accum) + weight_cast
    recompute_part = m * layers_stage * recompute
    # straggler wait: the fitted share of the step's compute that ranks spend waiting for the
    # slowest peer at synchronisations (EfficiencyModel.sync_skew_fraction; 0 on GPUs)
    world = dp * tp * pp * cp
    sync_wait = np.where(world > 1, eff.sync_skew_fraction * (compute_part + recompute_part), 0.0)

    step = pipeline + dp_exposed + sync_wait + optimizer

    # ---- breakdown (sums to step) ---------------------------------------------------------
    tp_part = m * layers_stage * (tp_exposed_f + tp_exposed_b + tp_exposed_r)
    ep_part = m * layers_stage * (a2a_fwd + a2a_bwd)
    cp_part = m * layers_stage * lay["cp_exposed_s"]
    pp_comm_part = m * p2p
    z3_part = m * z3_exposed

    # ---- FLOPs (whole job per step) -------------------------------------------------------
    layer_flops_fwd = lay["layer_flops_fwd"]
    n_gpus = dp * tp * pp * cp
    micro_batches_total = m * dp * cp       # tokens per GPU-microbatch are split by cp
    recompute_flops_layer = lay["recompute_flops_layer"]
    model_flops = 3.0 * micro_batches_total * tp * (model.num_layers * layer_flops_fwd + lay["head_flops_fwd"])
    hardware_flops = model_flops + micro_batches_total * tp * model.num_layers * recompute_flops_layer
    if n_mtp > 0:
        mtp_flops_fwd, mtp_recompute = lay["mtp_flops_fwd"], lay["mtp_recompute_flops"]
        model_flops = model_flops + 3.0 * micro_batches_total * tp * mtp_flops_fwd
        hardware_flops = hardware_flops + micro_batches_total * tp * (3.0 * mtp_flops_fwd + mtp_recompute)
    tokens_per_step = gbs * s
    peak = gpu.peak_flops(batch.dtype)

    # ---- memory on the first stage (the one holding the most activations) -----------------
    mem = {k: v for k, v in memory_by_part.items() if not k.startswith("_")}

    return {
        "step_time_s": step,
        "compute_s": compute_part,
        "recompute_s": recompute_part,
        "tp_comm_exposed_s": tp_part,
        "cp_comm_exposed_s": cp_part,
        "ep_comm_exposed_s": ep_part,
        "pp_comm_s": pp_comm_part,
        "zero3_comm_exposed_s": z3_part,
        "pipeline_bubble_s": bubble,
        "dp_comm_exposed_s": dp_exposed,
        "sync_wait_s": sync_wait,
        "optimizer_s": optimizer,
        "num_microbatches": m,
        "microbatch_stage_time_s": t_mb,
        "layer_fwd_s": layer_fwd + tp_exposed_f + cp_fwd,
        "layer_bwd_s": layer_b + layer_w + tp_exposed_b + cp_bwd,
        "layer_recompute_s": recompute + tp_exposed_r,
        "layer_w_s": layer_w,
        # the model's ends per micro-batch, for callers that lay stages out themselves
        # (simulator.heterogeneous): LM head + loss, embedding, forward + backward
        "head_s": lay["head_s"],
        "embedding_s": lay["embedding_s"],
        "p2p_per_microbatch_s": p2p,
        "grad_accum_per_microbatch_s": grad_accum,
        "tp_comm_total_s": m * layers_stage * lay["tp_comm_s"],
        "dp_comm_total_s": grad_comm + gather_comm,
        "model_flops": model_flops,
        "hardware_flops": hardware_flops,
        "tokens_per_step": tokens_per_step + 0 * step,
        "tokens_per_s": tokens_per_step / step,
        "tokens_per_s_per_gpu": tokens_per_step / step / n_gpus,
        "model_tflops_per_gpu": model_flops / step / n_gpus / 1e12,
        "hardware_tflops_per_gpu": hardware_flops / step / n_gpus / 1e12,
        "mfu": model_flops / step / n_gpus / peak,
        "hfu": hardware_flops / step / n_gpus / peak,
        **mem,
        "hbm_bytes": np.full_like(step, gpu.hbm_bytes),
        "fits": mem["memory_bytes"] <= gpu.hbm_bytes,
    }
