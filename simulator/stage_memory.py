"""Peak memory per GPU on every pipeline stage, by part, for every row of a ``ConfigBatch``.

Each stage holds (``simulator.step_pipeline.stage_groups``):

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
from cost_models.compute import LOW_PRECISION, compute_rates
from cost_models.low_precision import saved_gemm_input_bytes_per_element, weight_copy_bytes_per_param
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from simulator.config_batch import RECOMPUTE_CODES, RECOMPUTE_METHOD_CODES, ConfigBatch
from simulator.parallel_config import Recompute, RecomputeMethod
from simulator.step_pipeline import stage_groups

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
    gb = saved_gemm_input_bytes_per_element(dtype)
    mods = memory.effective_modules(rc, modules)
    dense_ffn = (model.moe.dense_ffn_hidden_size or model.ffn_hidden_size) if model.moe else None

    def kept(ffn, recompute, m):
        return memory.activation_bytes_per_layer(model, mbs, s, tp, cp, sp, recompute, flash_attention, ffn, m, gb)

    not_full = np.where(np.asarray(rc) == 2, np.where(mods != 0, 1, 0), rc)   # what the other layers do
    out = {"kept_dense": kept(dense_ffn, not_full, mods), "full_dense": kept(dense_ffn, 0, 0),
           "input": memory.activation_terms(model, mbs, s, tp, cp, sp, flash_attention)["layer_input"]}
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

    ``fit_limit_bytes`` (the planner): rows that recompute in full get the fewest recomputed
    layers per chunk that keep every stage under the limit (``recompute_num_layers`` N = the
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
    for idx, kind, p, v, cells, split, in_flight in stage_groups(model, batch):
        if search:
            split = _fewest_that_fit(model, batch, idx, cells, v, in_flight, split, ctx, fit_limit_bytes, out)
        st = _stage_parts(ctx, idx, cells, split, in_flight, v)
        parts, total, host = st["parts"], st["total"], st["host"]
        k = np.argmax(total, axis=1)
        rows = np.arange(len(idx))
        for name, value in parts.items():
            out[name][idx] = value[rows, k]
        out["memory_bytes"][idx] = total[rows, k]
        out["memory_stage"][idx] = k
        out["host_memory_bytes"][idx] = host.max(axis=1)
        out["params_local"][idx] = st["params"].max(axis=1)
        out["expert_params_local"][idx] = st["expert_params"].max(axis=1)
        out["_p_first"][idx] = st["params"][:, 0]
        out["_p_first_expert"][idx] = st["expert_params"][:, 0]
        out["_count_first_layers"][idx] = st["layers"][:, 0]
        out["_count_last_layers"][idx] = st["layers"][:, -1]
        if detail:
            for name, value in parts.items():
                stage_out[name][idx, :p] = value
            stage_out["memory_bytes"][idx, :p] = total
            stage_out["host_memory_bytes"][idx, :p] = host
            stage_out["layers"][idx, :p] = st["layers"]
            stage_out["in_flight"][idx, :p] = in_flight

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


def _stage_parts(ctx: _Context, idx, cells: dict, split: dict, in_flight, v: int) -> dict:
    """Per (row, stage) of a group: ``parts`` (``PARTS`` with the allocator), ``total``,
    ``host`` (host bytes per GPU), ``params`` / ``expert_params`` (before ZeRO), ``layers``."""
    model = ctx.model
    g = {k: x[idx][:, None] for k, x in ctx.per_row.items()}
    a = {k: x[idx][:, None] for k, x in ctx.act.items()}
    per_stage = {k: x.sum(axis=2) for k, x in {**cells, **split}.items() if k != "start"}
    L_d, L_m = per_stage["dense"], per_stage["moe"]
    emb, head, mtp = per_stage["emb"], per_stage["head"], per_stage["mtp"]
    rcd, rcm, inputs = per_stage["rc_dense"], per_stage["rc_moe"], per_stage["rc_inputs"]
    offd, offm = per_stage["off_dense"], per_stage["off_moe"]

    layer_p = L_d * g["dense_p"] + L_m * g["moe_ne_p"]
    # an MTP module, and a tied output layer, need the embedding: a stage without it keeps a copy
    needs_emb = (mtp > 0) | ((head > 0) & model.tied_embeddings)
    end_p = emb * g["emb_p"] + head * g["head_p"] + mtp * g["mtp_p"] + np.where(needs_emb & (emb == 0), g["emb_p"], 0.0)
    expert_p = L_m * g["moe_ex_p"]
    lp, fp = ctx.low_precision, ctx.full_precision
    mom = g["moments"]
    w1, g1, o1 = memory.model_state_bytes(layer_p, g["zero"], g["shard"], lp, fp, ctx.copy_bytes, mom)
    w2, g2, o2 = memory.model_state_bytes(end_p, g["zero"], g["shard"], lp, fp, 0.0, mom)
    w3, g3, o3 = memory.model_state_bytes(expert_p, g["zero"], g["expert_shard"], lp, fp, ctx.copy_bytes, mom)
    opt = o1 + o2 + o3
    opt_params = opt / (2.0 * mom if fp else 4.0 + 2.0 * mom)
    host_opt = g["off"] * opt_params * offload.HOST_OPTIMIZER_BYTES_PER_PARAM

    sets = in_flight / v
    kept_d, kept_m = L_d - rcd - offd, L_m - rcm - offm
    acts = sets * (kept_d * a["kept_dense"] + kept_m * a["kept_moe"] + inputs * a["input"])
    host_acts = sets * (offd * a["kept_dense"] + offm * a["kept_moe"])
    parts = {
        "weights_bytes": w1 + w2 + w3,
        "gradients_bytes": g1 + g2 + g3,
        "optimizer_bytes": opt * (1.0 - g["off"]),
        "activations_bytes": acts,
        "logits_bytes": (head + mtp) * g["logits"],
        "recompute_buffers_bytes": _recompute_buffer(cells, split, a, g["rc_group"][:, :, None]),
        "offload_buffers_bytes": offload.OFFLOAD_STAGING_LAYERS * np.maximum(
            np.where(offd > 0, a["kept_dense"], 0.0), np.where(offm > 0, a["kept_moe"], 0.0)),
        "moe_dispatch_bytes": np.where(L_m > 0, a["dispatch"], 0.0),
        "zero3_buffers_bytes": g["z3"] + 0.0 * L_d,
    }
    tensors = sum(parts.values())
    parts["allocator_bytes"] = memory.allocator_allowance_bytes(tensors)
    return {"parts": parts, "total": tensors + parts["allocator_bytes"], "host": host_opt + host_acts,
            "params": layer_p + end_p, "expert_params": expert_p, "layers": L_d + L_m}


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
    full = np.maximum(np.where(split["rc_dense"] > 0, a3["full_dense"], 0.0),
                      np.where(split["rc_moe"] > 0, a3["full_moe"], 0.0))
    kept_d = cells["dense"] - split["rc_dense"] - split["off_dense"]
    kept_m = cells["moe"] - split["rc_moe"] - split["off_moe"]
    kept = kept_d * a3["kept_dense"] + kept_m * a3["kept_moe"]
    rc_need = np.where(split["rc_dense"] + split["rc_moe"] > 0, np.maximum(group * full - a3["input"] - kept, 0.0), 0.0)
    sel_need = np.maximum(np.where(kept_d > 0, a3["full_dense"] - a3["kept_dense"], 0.0),
                          np.where(kept_m > 0, a3["full_moe"] - a3["kept_moe"], 0.0))
    return np.maximum(rc_need, np.maximum(sel_need, 0.0)).max(axis=2)


def _fewest_that_fit(model, batch, idx, cells, v, in_flight, split, ctx, limit, out) -> dict:
    """The split counts of the group's rows after the planner's search (``memory_parts`` with
    ``fit_limit_bytes``): per stage, bisection on the fewest recomputed (or offloaded) layers per
    chunk whose stage total fits; the counts chosen are written to ``out``."""
    n_layers = cells["dense"] + cells["moe"]
    n_max = float(n_layers.max()) if n_layers.size else 0.0
    p = n_layers.shape[1]
    rc = np.asarray(batch.recompute)[idx] if np.ndim(batch.recompute) else np.full(len(idx), batch.recompute)
    enumerated_full = (rc == _FULL) & (np.asarray(batch.recompute_num_layers)[idx] == 0) \
        & (np.asarray(batch.recompute_method)[idx] != _UNIFORM)
    if enumerated_full.any() and n_max > 0:
        # per stage s, the fewest layers per chunk N_s (bisection over 0..n_max) that fit
        lo = np.zeros((len(idx), p))
        hi = np.full((len(idx), p), n_max)
        for _ in range(int(np.ceil(np.log2(n_max + 1))) + 1):
            mid = np.floor((lo + hi) / 2.0)
            trial = layer_split_counts_for(model, batch, idx, cells, v, stage_rc=mid)
            fits = _stage_parts(ctx, idx, cells, trial, in_flight, v)["total"] <= limit
            hi = np.where(fits, mid, hi)
            lo = np.where(fits, lo, mid + 1.0)
            if np.all(lo >= hi):
                break
        need = hi
        top = np.maximum(need.max(axis=1), 1.0)
        stages = np.arange(p, dtype=float)[None, :]
        dec = np.where(stages > 0, np.floor((top[:, None] - need) / np.maximum(stages, 1.0)), np.inf).min(axis=1) \
            if p > 1 else np.zeros(len(idx))
        dec = np.where(np.isfinite(dec), np.maximum(dec, 0.0), 0.0)
        counts = np.maximum(top[:, None] - stages * dec[:, None], 0.0)
        covers_all = top >= n_max          # every layer recomputed: the enumerated "full"
        sel = enumerated_full
        rows = idx[sel]
        out["_recompute_num_layers"][rows] = np.where(covers_all[sel], 0.0, top[sel])
        out["_recompute_layers_decrement"][rows] = np.where(covers_all[sel] | (p == 1), 0.0, dec[sel])
        stage_rc = np.where(sel[:, None], np.where(covers_all[:, None], n_max, counts), n_max)
        split = layer_split_counts_for(model, batch, idx, cells, v, stage_rc=stage_rc) if sel.all() else \
            _merge(split, layer_split_counts_for(model, batch, idx, cells, v, stage_rc=stage_rc), sel)
    offloadable = (rc != _FULL) & ctx.per_row["offload_ok"][idx] & (np.asarray(batch.offload_activation_layers)[idx] == 0)
    if offloadable.any() and n_max > 0:
        base = _stage_parts(ctx, idx, cells, split, in_flight, v)["total"].max(axis=1)
        want = offloadable & (base > limit)
        if want.any():
            lo = np.zeros(len(idx))
            hi = np.full(len(idx), n_max)
            for _ in range(int(np.ceil(np.log2(n_max + 1))) + 1):
                mid = np.floor((lo + hi) / 2.0)
                trial = layer_split_counts_for(model, batch, idx, cells, v, offload=mid)
                fits = _stage_parts(ctx, idx, cells, trial, in_flight, v)["total"].max(axis=1) <= limit
                hi = np.where(fits, mid, hi)
                lo = np.where(fits, lo, mid + 1.0)
                if np.all(lo >= hi):
                    break
            chosen = np.where(want, hi, 0.0)
            out["_offload_activation_layers"][idx[want]] = chosen[want]
            split = _merge(split, layer_split_counts_for(model, batch, idx, cells, v, offload=chosen), want)
    return split


def layer_split_counts_for(model, batch, idx, cells, v, stage_rc=None, offload=None):
    """``step_pipeline.layer_split_counts`` (imported here to keep the import graph flat)."""
    from simulator.step_pipeline import layer_split_counts
    return layer_split_counts(model, batch, idx, cells, v, stage_rc=stage_rc, offload=offload)


def _merge(old: dict, new: dict, rows) -> dict:
    """``new``'s counts on ``rows`` (a mask over the group), ``old``'s elsewhere."""
    m = np.asarray(rows, dtype=bool)[:, None, None]
    return {k: np.where(m, new[k], old[k]) for k in old}
