"""Peak memory per GPU on every pipeline stage, by part, for every row of a ``ConfigBatch``.

Each stage holds (``simulator.step_pipeline.padded_stage_batches``):

* model states of its layers and of the model's ends it carries (embedding, LM head, MTP
  projections; an MTP stage without the embedding keeps its own copy of it), under ZeRO over
  the shard group (``zero_shard_group``: HSDP), the experts' over their expert-data-parallel
  ranks of one replica group; low-precision recipes add the quantised weight copies of the
  layers (``low_precision.weight_copy_bytes_per_param``); an offloaded fraction of the
  optimizer states lives on the host (``cost_models.offload``);
* the activations of its schedule's peak of in-flight chunk sets (``makespan.peak_in_flight``):
  per layer what it keeps (``memory.activation_terms``: everything, less the recomputed
  operations; a layer recomputed in full keeps its input; an offloaded layer keeps nothing on
  the GPU, its copy is on the host);
* transients: what recomputation brings back during a layer's backward beyond what is stored
  (``_recompute_buffer``), the offloaded layer whose copy is in
  flight, one MoE layer's dispatch buffers, the
  logits of the loss (and of each MTP head) for one micro-batch (one chunk of tokens with a
  chunked loss), ZeRO-3's gathered-parameter buffers;
* the allocator's fragmentation and the runtime's reservations (``memory.allocator_allowance_bytes``).

A GPU's peak is its stage's; the job's is the largest stage's (``memory_bytes``; the parts are
that stage's). The planner calls ``memory_parts`` on every row before timing those that fit.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from cost_models import memory, moe as moe_costs, offload, params, sharding
from cost_models.compute import LOW_PRECISION, activation_bytes, compute_rates
from cost_models.low_precision import saved_gemm_input_bytes_per_element, weight_copy_bytes_per_param
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from simulator.config_batch import RECOMPUTE_CODES, RECOMPUTE_METHOD_CODES, ConfigBatch
from simulator.parallel_config import Recompute, RecomputeMethod
from simulator.step_pipeline import layer_split_counts, padded_stage_batches

#: memory parts per GPU, summing to ``memory_bytes`` (the order tables print them in)
PARTS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "logits_bytes",
         "recompute_buffers_bytes", "offload_buffers_bytes", "moe_dispatch_bytes", "zero3_buffers_bytes",
         "allocator_bytes")
_UNIFORM = RECOMPUTE_METHOD_CODES[RecomputeMethod.UNIFORM]
_FULL = RECOMPUTE_CODES[Recompute.FULL]


def _degrees(batch: ConfigBatch):
    f = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    return (f(batch.dp), f(batch.tp), f(batch.pp), f(batch.cp), f(batch.ep), f(batch.etp), f(batch.vpp))


def layer_params(model: ModelSpec, tp, ep, etp):
    """Per-GPU parameters of one dense layer, and of one MoE layer's non-expert and expert parts."""
    dense = params.dense_layer_params(model) / tp
    if model.moe is None:
        return dense, dense, 0.0 * tp
    moe_non_expert, moe_expert = moe_costs.moe_layer_params_local(model, tp, ep, etp)
    return dense, moe_non_expert + 0.0 * tp, moe_expert + 0.0 * tp


def layer_activation_bytes(model: ModelSpec, dtype: str, mbs, tp, cp, sp, rc, flash_attention, ep, etp, imbalance,
                           modules) -> dict:
    """Per layer and micro-batch on one GPU, bytes: ``kept_dense`` / ``kept_moe`` (a layer not
    recomputed in full, the selected operations recomputed), ``input`` (a layer recomputed in
    full keeps only its input), ``full_dense`` / ``full_moe`` (everything: what a recomputed
    layer materialises during its backward), ``dispatch`` (one MoE layer's transient token
    exchange buffers)."""
    s = float(model.seq_len)
    eb = activation_bytes(dtype)            # 2 in 16-bit training, 4 in fp32
    gb = saved_gemm_input_bytes_per_element(dtype) if dtype in LOW_PRECISION else eb
    mods = memory.effective_modules(rc, modules)
    dense_ffn = (model.moe.dense_ffn_hidden_size or model.ffn_hidden_size) if model.moe else None

    def kept(ffn, recompute, m):
        return memory.activation_bytes_per_layer(model, mbs, s, tp, cp, sp, recompute, flash_attention, ffn, m, gb, eb)

    not_full = np.where(np.asarray(rc) == 2, np.where(mods != 0, 1, 0), rc)   # what the other layers do
    out = {"kept_dense": kept(dense_ffn, not_full, mods), "full_dense": kept(dense_ffn, 0, 0),
           "input": memory.activation_terms(model, mbs, s, tp, cp, sp, flash_attention, element_bytes=eb)["layer_input"]}
    if model.moe is not None:
        shared_ffn = max(model.moe.num_shared_experts * (model.moe.shared_expert_ffn_hidden_size
                                                         or model.moe.expert_ffn_hidden_size), 1)
        routed = partial(moe_costs.moe_activation_bytes_per_layer, model, mbs, s, tp, cp, ep, etp)
        out["kept_moe"] = kept(shared_ffn, not_full, mods) + routed(not_full, imbalance, mods, gb)
        out["full_moe"] = kept(shared_ffn, 0, 0) + routed(0, imbalance, 0, gb)
        out["dispatch"] = moe_costs.moe_dispatch_buffer_bytes(model, mbs, s, tp, cp, etp, imbalance, ep) + 0.0 * tp
    else:
        out["kept_moe"], out["full_moe"], out["dispatch"] = out["kept_dense"], out["full_dense"], 0.0 * tp
    return {k: np.asarray(v, dtype=float) + 0.0 * np.asarray(tp, dtype=float) for k, v in out.items()}


def memory_parts(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch,
                 detail: bool = False, once_per_run=None, layer_key_fields=(), fit_limit_bytes=None) -> dict:
    """Peak memory per GPU, bytes, by part (``PARTS``), per row of ``batch``: the largest stage's.

    Returns the parts, ``memory_bytes`` (their sum), ``memory_stage`` (the stage), the host
    memory offload takes (``host_memory_bytes`` per GPU at its busiest stage,
    ``host_memory_node_bytes`` for a node of such GPUs, ``host_fits``), the parameters the step
    model times the optimizer and data-parallel traffic with (``params_local``,
    ``expert_params_local``, and ``_p_*`` keys), the per-layer activation bytes (``_act_*``),
    and with ``detail`` every stage's parts as (rows, max pp) arrays (``_stage_<part>``,
    ``_stage_memory_bytes``, ``_stage_host_memory_bytes``, ``_stage_layers``, ``_stage_in_flight``
    (peak chunk sets); NaN beyond a row's pp).
    ``once_per_run(batch, fields, fn, *args)``: the step model's evaluation of ``fn`` once per
    run of rows equal in ``layer_key_fields``.

    ``fit_limit_bytes`` (the planner): rows that recompute in full and fit only with some
    recomputation get the fewest recomputed layers per chunk that keep every stage under the limit (``recompute_num_layers`` N = the
    largest stage's need, ``recompute_layers_decrement`` the steepest per-stage decrease that
    still fits), and rows that do not fit without full recomputation get the fewest offloaded
    layers per chunk that make them fit (when the cluster has a host link); the memory returned
    is theirs and ``_recompute_num_layers``, ``_recompute_layers_decrement``,
    ``_offload_activation_layers`` hold the counts chosen (``fewest_that_fit``).
    """
    n = len(batch)
    rates = compute_rates(cluster.gpu, eff, batch.dtype)
    param_bytes = rates.act_bytes
    low_precision = batch.dtype in LOW_PRECISION
    copy_bytes = weight_copy_bytes_per_param(batch.dtype) if low_precision else 0.0
    full_precision = rates.act_bytes > 2
    dp, tp, pp, cp, ep, etp, vpp = _degrees(batch)
    mbs = np.asarray(batch.micro_batch, dtype=float)
    zero = np.asarray(batch.zero_stage)
    tokens = mbs * float(model.seq_len) / cp

    fn = partial(layer_activation_bytes, model, batch.dtype)
    args = (mbs, tp, cp, batch.sequence_parallel, batch.recompute, batch.flash_attention, ep, etp,
            batch.moe_load_imbalance, batch.recompute_modules)
    act = once_per_run(batch, layer_key_fields, fn, *args) if once_per_run else fn(*args)
    act = {k: np.broadcast_to(np.asarray(v, dtype=float), (n,)) for k, v in act.items()}

    dense_p, moe_ne_p, moe_ex_p = layer_params(model, tp, ep, etp)
    emb_p = params.embedding_params(model) / tp
    head_p = params.lm_head_params(model) / tp
    mtp_p = params.mtp_projection_params(model) / tp if model.mtp_layers else 0.0 * tp
    dp_group = dp * cp
    shard = sharding.shard_size(dp_group, batch.zero_shard_group)
    replica_groups = sharding.replicas(dp_group, batch.zero_shard_group)
    edp = moe_costs.expert_data_parallel_size(dp, cp, tp, ep, etp) if model.moe is not None else dp_group
    expert_shard = np.maximum(edp / replica_groups, 1.0)
    z3 = np.where((zero >= 3) & (shard > 1), 2.0 * np.maximum(dense_p, moe_ne_p + moe_ex_p) * param_bytes, 0.0)
    loss_tokens = np.where(np.asarray(batch.loss_chunk_tokens) > 0,
                           np.minimum(tokens, np.asarray(batch.loss_chunk_tokens, dtype=float)), tokens)
    logits_row = loss_tokens * model.vocab_size / tp * memory.LOGIT_BYTES
    off_fraction = np.asarray(batch.offload_optimizer_fraction, dtype=float)
    rc_group = np.where((np.asarray(batch.recompute_method) == _UNIFORM) & (np.asarray(batch.recompute_num_layers) > 0),
                        np.asarray(batch.recompute_num_layers, dtype=float), 1.0)

    def row(x):
        return np.broadcast_to(np.asarray(x, dtype=float), (n,))

    per_row = {k: row(v) for k, v in dict(dense_p=dense_p, moe_ne_p=moe_ne_p, moe_ex_p=moe_ex_p, emb_p=emb_p,
                                          head_p=head_p, mtp_p=mtp_p, shard=shard, expert_shard=expert_shard,
                                          z3=z3, logits=logits_row, off=off_fraction, rc_group=rc_group,
                                          zero=zero, moments=batch.optimizer_moment_bytes).items()}
    per_row["offload_ok"] = np.full(n, cluster.host is not None, dtype=bool)
    out = {k: np.zeros(n) for k in PARTS + ("memory_bytes", "memory_stage", "params_local", "expert_params_local",
                                            "host_memory_bytes", "_p_first", "_p_first_expert",
                                            "_count_first_layers", "_count_last_layers")}
    p_max = int(np.max(pp)) if n else 1
    stage_out = {k: np.full((n, p_max), np.nan) for k in PARTS + ("memory_bytes", "host_memory_bytes", "layers",
                                                                  "in_flight")} if detail else None

    ctx = _Context(model, low_precision, full_precision, copy_bytes, per_row, act)
    search = fit_limit_bytes is not None
    if search:
        out.update({"_recompute_num_layers": np.asarray(batch.recompute_num_layers, dtype=float).copy(),
                    "_recompute_layers_decrement": np.asarray(batch.recompute_layers_decrement, dtype=float).copy(),
                    "_offload_activation_layers": np.asarray(batch.offload_activation_layers, dtype=float).copy()})
    for idx, cells, in_flight, chunks, stages in padded_stage_batches(model, batch):
        static = _static_parts(ctx, idx, cells)
        split = layer_split_counts(model, batch, idx, cells, None)
        v = chunks[:, None]
        if search:
            split = _fewest_that_fit(model, batch, idx, cells, v, in_flight, split, ctx, fit_limit_bytes, out, static,
                                     stages)
        st = _stage_parts(ctx, idx, cells, split, in_flight, v, static)
        parts, total, host = st["parts"], st["total"], st["host"]
        valid = np.arange(total.shape[1])[None, :] < stages[:, None]
        total = np.where(valid, total, -np.inf)
        k = np.argmax(total, axis=1)
        rows = np.arange(len(idx))
        last = stages - 1
        for name, value in parts.items():
            out[name][idx] = value[rows, k]
        out["memory_bytes"][idx] = total[rows, k]
        out["memory_stage"][idx] = k
        out["host_memory_bytes"][idx] = np.where(valid, host, 0.0).max(axis=1)
        # the optimizer step is timed on the larger of the first and last stage's parameters (as
        # the efficiency fit was made; a middle stage can hold more when the ends are lighter)
        out["params_local"][idx] = np.maximum(st["params"][:, 0], st["params"][rows, last])
        out["expert_params_local"][idx] = np.maximum(st["expert_params"][:, 0], st["expert_params"][rows, last])
        out["_p_first"][idx] = st["params"][:, 0]
        out["_p_first_expert"][idx] = st["expert_params"][:, 0]
        out["_count_first_layers"][idx] = st["layers"][:, 0]
        out["_count_last_layers"][idx] = st["layers"][rows, last]
        if detail:
            P = total.shape[1]
            nan = lambda x: np.where(valid, x, np.nan)  # noqa: E731
            for name, value in parts.items():
                stage_out[name][idx, :P] = nan(value)
            stage_out["memory_bytes"][idx, :P] = nan(total)
            stage_out["host_memory_bytes"][idx, :P] = nan(host)
            stage_out["layers"][idx, :P] = nan(st["layers"])
            stage_out["in_flight"][idx, :P] = nan(in_flight)

    host = cluster.host
    out["host_memory_node_bytes"] = out["host_memory_bytes"] * cluster.gpus_per_node
    if host is not None and host.memory_bytes is not None:
        out["host_fits"] = out["host_memory_node_bytes"] <= host.memory_bytes
    else:
        out["host_fits"] = np.ones(n, dtype=bool)
    out.update({"_p_dense_layer": row(dense_p), "_p_moe_layer": row(moe_ne_p), "_p_expert_layer": row(moe_ex_p),
                "_edp": row(edp), "_act_kept_dense": act["kept_dense"], "_act_kept_moe": act["kept_moe"]})
    if detail:
        out.update({f"_stage_{k}": v for k, v in stage_out.items()})
    return out


class _Context:
    """What every group's stage computation shares (per-row arrays, the dtype's byte counts)."""

    def __init__(self, model, low_precision, full_precision, copy_bytes, per_row, act):
        self.model, self.low_precision, self.full_precision = model, low_precision, full_precision
        self.copy_bytes, self.per_row, self.act = copy_bytes, per_row, act


def _static_parts(ctx: _Context, idx, cells: dict) -> dict:
    """What of a group's (row, stage) memory does not depend on recomputation or offload: model
    states, logits, MoE dispatch and ZeRO-3 buffers (``parts``), the host memory of an
    offloaded optimizer (``host``), and ``params`` / ``expert_params`` (before ZeRO) and
    ``layers``."""
    model = ctx.model
    g = {k: x[idx][:, None] for k, x in ctx.per_row.items()}
    L_d, L_m = cells["stage_dense"][..., 0], cells["stage_moe"][..., 0]
    emb, head, mtp = cells["stage_emb"][..., 0], cells["stage_head"][..., 0], cells["stage_mtp"][..., 0]
    layer_p = L_d * g["dense_p"] + L_m * g["moe_ne_p"]
    # an MTP module, and a tied output layer, need the embedding: a stage without it keeps a copy
    needs_emb = (mtp > 0) | ((head > 0) & model.tied_embeddings)
    end_p = emb * g["emb_p"] + head * g["head_p"] + mtp * g["mtp_p"] + np.where(needs_emb & (emb == 0), g["emb_p"], 0.0)
    expert_p = L_m * g["moe_ex_p"]
    lp, fp, mom = ctx.low_precision, ctx.full_precision, g["moments"]
    w1, g1, o1 = memory.model_state_bytes(layer_p, g["zero"], g["shard"], lp, fp, ctx.copy_bytes, mom)
    w2, g2, o2 = memory.model_state_bytes(end_p, g["zero"], g["shard"], lp, fp, 0.0, mom)
    w3, g3, o3 = memory.model_state_bytes(expert_p, g["zero"], g["expert_shard"], lp, fp, ctx.copy_bytes, mom)
    opt = o1 + o2 + o3
    opt_params = opt / (2.0 * mom if fp else 4.0 + 2.0 * mom)
    parts = {"weights_bytes": w1 + w2 + w3, "gradients_bytes": g1 + g2 + g3,
             "optimizer_bytes": opt * (1.0 - g["off"]), "logits_bytes": (head + mtp) * g["logits"],
             "moe_dispatch_bytes": np.where(L_m > 0, ctx.act["dispatch"][idx][:, None], 0.0),
             "zero3_buffers_bytes": g["z3"] + 0.0 * L_d}
    return {"parts": parts, "tensors": sum(parts.values()),
            "host": g["off"] * opt_params * offload.HOST_OPTIMIZER_BYTES_PER_PARAM,
            "params": layer_p + end_p, "expert_params": expert_p, "layers": L_d + L_m}


def _dynamic_parts(ctx: _Context, idx, cells: dict, split: dict, in_flight, v: int) -> dict:
    """What recomputation and offload change, per (row, stage): ``activations_bytes``,
    ``recompute_buffers_bytes``, ``offload_buffers_bytes``, and ``host`` (offloaded activations)."""
    a = {k: x[idx][:, None] for k, x in ctx.act.items()}
    rc_group = ctx.per_row["rc_group"][idx][:, None, None]
    per_stage = {k: x.sum(axis=2) for k, x in split.items()}
    offd, offm = per_stage["off_dense"], per_stage["off_moe"]
    kept_d = cells["stage_dense"][..., 0] - per_stage["rc_dense"] - offd
    kept_m = cells["stage_moe"][..., 0] - per_stage["rc_moe"] - offm
    sets = in_flight / v
    return {
        "activations_bytes": sets * (kept_d * a["kept_dense"] + kept_m * a["kept_moe"]
                                     + per_stage["rc_inputs"] * a["input"]),
        "recompute_buffers_bytes": _recompute_buffer(cells, split, a, rc_group),
        "offload_buffers_bytes": offload.OFFLOAD_STAGING_LAYERS * np.maximum(
            np.where(offd > 0, a["kept_dense"], 0.0), np.where(offm > 0, a["kept_moe"], 0.0)),
        "host": sets * (offd * a["kept_dense"] + offm * a["kept_moe"]),
    }


def _total(static: dict, dynamic: dict) -> np.ndarray:
    """Stage totals with the allocator's allowance."""
    tensors = static["tensors"] + dynamic["activations_bytes"] + dynamic["recompute_buffers_bytes"] \
        + dynamic["offload_buffers_bytes"]
    return tensors + memory.allocator_allowance_bytes(tensors)


def _stage_parts(ctx: _Context, idx, cells: dict, split: dict, in_flight, v: int, static=None) -> dict:
    """Per (row, stage) of a group: ``parts`` (``PARTS`` with the allocator), ``total``,
    ``host`` (host bytes per GPU), ``params`` / ``expert_params`` (before ZeRO), ``layers``."""
    static = _static_parts(ctx, idx, cells) if static is None else static
    dyn = _dynamic_parts(ctx, idx, cells, split, in_flight, v)
    parts = dict(static["parts"])
    parts.update({k: dyn[k] for k in ("activations_bytes", "recompute_buffers_bytes", "offload_buffers_bytes")})
    parts = {k: parts[k] for k in PARTS if k != "allocator_bytes"}
    tensors = sum(parts.values())
    parts["allocator_bytes"] = memory.allocator_allowance_bytes(tensors)
    return {"parts": parts, "total": tensors + parts["allocator_bytes"], "host": static["host"] + dyn["host"],
            "params": static["params"], "expert_params": static["expert_params"], "layers": static["layers"]}


def _recompute_buffer(cells: dict, split: dict, a: dict, group) -> np.ndarray:
    """(rows, stages) bytes recomputation brings back at a stage's backward, beyond what it keeps:

    * a layer that recomputes selected operations materialises them again during its backward:
      its full activations less what it kept (the first layer a backward reaches is one of these
      unless the chunk recomputes every layer);
    * a fully recomputed layer (``uniform``: its group of layers) materialises its full
      activations less its input (stored already), less what the same micro-batch's layers of
      that chunk that keep their activations have freed by then (their backward runs first, the
      recomputed layers being the chunk's first).

    The larger of the two, over the stage's chunks."""
    a3 = {k: v[:, :, None] for k, v in a.items()}
    group = np.asarray(group)
    if not np.any(split["off_dense"]) and not np.any(split["off_moe"]) \
            and np.array_equal(split["rc_dense"] + split["rc_moe"] > 0, (split["rc_dense"] + split["rc_moe"]) ==
                               (cells["dense"] + cells["moe"])) \
            and np.all((split["rc_dense"] + split["rc_moe"] == 0) | (split["rc_dense"] + split["rc_moe"]
                                                                       == cells["dense"] + cells["moe"])):
        # each cell recomputes all its layers or none (no partial counts, no offload): a fully
        # recomputing stage brings back one layer less its input, the others the selected
        # operations of one layer
        rc_stage = (split["rc_dense"] + split["rc_moe"]).sum(axis=2) > 0
        full = np.maximum(np.where(cells["stage_dense"] > 0, a3["full_dense"], 0.0),
                          np.where(cells["stage_moe"] > 0, a3["full_moe"], 0.0))[..., 0]
        rc_need = np.maximum(group[..., 0] * full - a["input"], 0.0)
        sel = np.maximum(np.where(cells["stage_dense"] > 0, a3["full_dense"] - a3["kept_dense"], 0.0),
                         np.where(cells["stage_moe"] > 0, a3["full_moe"] - a3["kept_moe"], 0.0))[..., 0]
        return np.where(rc_stage, rc_need, np.maximum(sel, 0.0))
    if not np.any(split["rc_dense"]) and not np.any(split["rc_moe"]) and not np.any(split["off_dense"]) \
            and not np.any(split["off_moe"]):
        # no layer recomputed in full or offloaded: only the selected operations come back, during
        # the backward of the stage's first layer of each kind it holds
        sel = np.maximum(np.where(cells["stage_dense"] > 0, a3["full_dense"] - a3["kept_dense"], 0.0),
                         np.where(cells["stage_moe"] > 0, a3["full_moe"] - a3["kept_moe"], 0.0))
        return np.maximum(sel, 0.0)[..., 0]
    full = np.maximum(np.where(split["rc_dense"] > 0, a3["full_dense"], 0.0),
                      np.where(split["rc_moe"] > 0, a3["full_moe"], 0.0))
    kept_d = cells["dense"] - split["rc_dense"] - split["off_dense"]
    kept_m = cells["moe"] - split["rc_moe"] - split["off_moe"]
    kept = kept_d * a3["kept_dense"] + kept_m * a3["kept_moe"]
    rc_need = np.where(split["rc_dense"] + split["rc_moe"] > 0, np.maximum(group * full - a3["input"] - kept, 0.0), 0.0)
    sel_need = np.maximum(np.where(kept_d > 0, a3["full_dense"] - a3["kept_dense"], 0.0),
                          np.where(kept_m > 0, a3["full_moe"] - a3["kept_moe"], 0.0))
    return np.maximum(rc_need, np.maximum(sel_need, 0.0)).max(axis=2)


def _fewest_that_fit(model, batch, idx, cells, v, in_flight, split, ctx, limit, out, static, stages) -> dict:
    """The split counts of the group's rows after the planner's search (``memory_parts`` with
    ``fit_limit_bytes``): per stage, bisection on the fewest recomputed (or offloaded) layers per
    chunk whose stage total fits, on the rows that need it; the counts chosen are written to
    ``out``."""
    n_layers = cells["dense"] + cells["moe"]
    if not n_layers.size or n_layers.max() <= 0:
        return split
    p = n_layers.shape[1]
    row_max = n_layers.reshape(len(idx), -1).max(axis=1)        # the row's largest chunk
    rc = np.asarray(batch.recompute)[idx] if np.ndim(batch.recompute) else np.full(len(idx), batch.recompute)
    nl = np.asarray(batch.recompute_num_layers)[idx]
    enumerated_full = (rc == _FULL) & (nl == 0) & (np.asarray(batch.recompute_method)[idx] != _UNIFORM)

    def sub(rows_mask):
        r = np.flatnonzero(rows_mask)
        return r, {k: _take_rows(x, r) for k, x in cells.items()}, \
            {k: _take_rows(x, r) for k, x in static.items() if k != "parts"}

    def vsub(r):
        return v[r] if np.ndim(v) else v

    def totals(r, c, st, stage_rc=None, offload=None):
        trial = layer_split_counts_for(model, batch, idx[r], c, None, stage_rc=stage_rc, offload=offload)
        return _total(st, _dynamic_parts(ctx, idx[r], c, trial, in_flight[r], vsub(r))), trial

    # every row's stage totals as enumerated (full recomputation of every layer where asked)
    t_given = _total(static, _dynamic_parts(ctx, idx, cells, split, in_flight, v))
    if enumerated_full.any():
        # rows that fit recomputing every layer but not recomputing none: the fewest layers per
        # chunk N_s per stage s that fit, by bisection between 1 and every layer (a row that fits
        # without recomputation stays the "every layer" point of the memory / time trade-off; one
        # that does not fit even so is dropped by the planner)
        r, c, st = sub(enumerated_full)
        t_all = t_given[r]
        t0, _ = totals(r, c, st, stage_rc=np.zeros((len(r), p)))
        middle = (t_all.max(axis=1) <= limit) & (t0.max(axis=1) > limit)
        r, c, st = sub(np.isin(np.arange(len(idx)), r[middle]))
        t0 = t0[middle]
    if enumerated_full.any() and len(r):
        n_max = row_max[r][:, None]
        lo = np.where(t0 <= limit, 0.0, 1.0)
        hi = np.where(t0 <= limit, 0.0, n_max)
        # memory falls about linearly with the layers recomputed: two probes around the linear
        # estimate settle most rows, bisection the rest
        t_hi = t_all[middle]
        guess = np.ceil(n_max * (t0 - limit) / np.maximum(t0 - t_hi, 1.0))
        real = np.arange(p)[None, :] < stages[r][:, None]          # the row's own stages
        lo, hi = _bisect(lambda g, rows: totals(r[rows], {k: _take_rows(x, rows) for k, x in c.items()},
                                                {k: _take_rows(x, rows) for k, x in st.items()}, stage_rc=g)[0] <= limit,
                         lo, hi, guess)
        need = np.where(real, hi, 0.0)
        top = np.maximum(need.max(axis=1), 1.0)
        at = np.arange(p, dtype=float)[None, :]
        if p > 1:
            slack = np.where(real[:, 1:], (top[:, None] - need[:, 1:]) / at[:, 1:], np.inf)
            dec = np.floor(slack.min(axis=1))
            dec = np.where(np.isfinite(dec), np.maximum(dec, 0.0), 0.0)
        else:
            dec = np.zeros(len(r))
        covers_all = top >= n_max[:, 0]       # every layer recomputed: the enumerated "full"
        counts = np.where(covers_all[:, None], n_max, np.maximum(top[:, None] - at * dec[:, None], 0.0))
        out["_recompute_num_layers"][idx[r]] = np.where(covers_all, 0.0, top)
        out["_recompute_layers_decrement"][idx[r]] = np.where(covers_all | (stages[r] == 1), 0.0, dec)
        _, chosen = totals(r, c, st, stage_rc=counts)
        split = {k: np.array(x, copy=True) for k, x in split.items()}
        for k in split:
            split[k][r] = chosen[k]
    offloadable = (rc != _FULL) & ctx.per_row["offload_ok"][idx] & (np.asarray(batch.offload_activation_layers)[idx] == 0)
    if offloadable.any():
        r, c, st = sub(offloadable)
        base = t_given[r]           # these rows' split is as enumerated (the recompute search skips them)
        want = base.max(axis=1) > limit
        if want.any():
            r, c, st = sub(np.isin(np.arange(len(idx)), r[want]))
            lo = np.ones(len(r))
            hi = np.maximum(row_max[r] - 1.0, 1.0)
            t_lo = base.max(axis=1)[want]
            tried = []                # (counts, split) of every evaluation, to take the chosen one from

            def offload_fits(g, rows):
                t, trial = totals(r[rows], {k: _take_rows(x, rows) for k, x in c.items()},
                                  {k: _take_rows(x, rows) for k, x in st.items()}, offload=g)
                tried.append((rows, np.asarray(g, dtype=float), trial))
                return t.max(axis=1) <= limit

            t_hi, trial_hi = totals(r, c, st, offload=hi)
            reach = t_hi.max(axis=1) <= limit     # rows that fit offloading all it may (else: dropped)
            if reach.any():
                r, c, st = sub(np.isin(np.arange(len(idx)), r[reach]))
                lo, hi, t_lo = lo[reach], hi[reach], t_lo[reach]
                t_hi = t_hi[reach].max(axis=1)
                tried.append((np.arange(len(r)), hi.copy(), {k: x[reach] for k, x in trial_hi.items()}))
                guess = np.ceil(hi * (t_lo - limit) / np.maximum(t_lo - t_hi, 1.0))
                lo, hi = _bisect(offload_fits, lo, hi, guess)
            else:
                r = r[:0]
            if len(r):
                out["_offload_activation_layers"][idx[r]] = hi
                chosen = {k: np.array(x, copy=True) for k, x in tried[0][2].items()}
                for rows, g, trial in tried[1:]:
                    hit = g == hi[rows]
                    for k in chosen:
                        chosen[k][rows[hit]] = trial[k][hit]
                split = {k: np.array(x, copy=True) for k, x in split.items()}
                for k in split:
                    split[k][r] = chosen[k]
    return split


def _take_rows(x, rows):
    """Rows ``rows`` of ``x``; a broadcast view (every row the same layout) stays one."""
    x = np.asarray(x)
    if x.ndim and x.strides[0] == 0:
        return np.broadcast_to(x[0], (len(rows),) + x.shape[1:])
    return x[rows]


def _bisect(fits, lo, hi, guess):
    """The smallest count in [lo, hi] for which ``fits(counts, rows)`` (monotone; evaluated on
    the row indices ``rows`` only) holds, elementwise over rows (and stages): first two probes
    at the ``guess`` and next to it, then bisection on the rows still open; (lo, hi) with
    lo == hi."""
    def probe(g, rows):
        g = np.clip(g[rows], lo[rows], hi[rows])
        ok = fits(g, rows)
        open_ = lo[rows] < hi[rows]
        hi[rows] = np.where(open_ & ok, g, hi[rows])
        lo[rows] = np.where(open_ & ~ok, g + 1.0, lo[rows])
        return ok

    lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
    guess = np.broadcast_to(np.asarray(guess, dtype=float), lo.shape)

    def still_open():
        return np.flatnonzero((lo < hi).reshape(len(lo), -1).any(axis=1))

    rows = still_open()
    if len(rows):
        ok = probe(guess, rows)
        second = np.array(guess, copy=True)
        second[rows] = np.where(ok, guess[rows] - 1.0, guess[rows] + 1.0)
        rows = still_open()
        if len(rows):
            probe(second, rows)
    rows = still_open()
    while len(rows):
        probe(np.floor((lo + hi) / 2.0), rows)
        rows = still_open()
    return lo, hi


def layer_split_counts_for(model, batch, idx, cells, v, stage_rc=None, offload=None):
    """``step_pipeline.layer_split_counts`` (imported here to keep the import graph flat)."""
    from simulator.step_pipeline import layer_split_counts
    return layer_split_counts(model, batch, idx, cells, v, stage_rc=stage_rc, offload=offload)
