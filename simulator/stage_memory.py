"""Peak memory per GPU on every pipeline stage, by part, for every row of a ``ConfigBatch``.

Each stage holds (``simulator.stage_cells``: every row's cells, flat):

* model states of its layers and of the model's ends it carries (embedding, LM head, MTP
  projections; an MTP stage without the embedding keeps its own copy of it), under ZeRO over
  the shard group (``zero_shard_group``: HSDP), the experts' over their expert-data-parallel
  ranks of one replica group; low-precision recipes add the quantised weight copies of the
  layers (``low_precision.weight_copy_bytes_per_param``), which replace the 16-bit weights under
  ``fp8_param_gather``; the gradient buffer holds ``grad_buffer_bytes`` a parameter (both:
  ``memory.model_state_bytes``); an offloaded fraction of the
  optimizer states lives on the host (``cost_models.offload``);
* the activations of its schedule's peak of in-flight chunk sets (``makespan.peak_in_flight``;
  where a stage's chunks hold different bytes, the peak over the schedule's order of the sets
  in flight, each chunk with its own layers: ``makespan.peak_held_chunks``):
  per layer what it keeps (``memory.activation_terms``: everything, less the recomputed
  operations; a layer recomputed in full keeps its input; an offloaded layer keeps nothing on
  the GPU, its copy is on the host);
* transients: what recomputation brings back during a layer's backward beyond what is stored
  (``_recompute_buffer``) and beyond the loss's logits, which the head's backward frees before
  (``recompute_buffers_bytes`` is that excess, ``memory_search.recompute_beyond_loss``: a stage
  computing the loss holds the larger of the two, ``memory_rows.loss_freed_bytes``), the offloaded layer whose copy is in
  flight, one MoE layer's dispatch buffers, the
  logits of the loss (and of each MTP head) for one micro-batch (one chunk of tokens with a
  chunked loss; under GPipe plus what each other in-flight micro-batch's loss saves for its
  backward, ``memory_rows.losses_held``), ZeRO-3's gathered-parameter buffers and the
  computing layer's unsharded gradient (ZeRO-2's too, ``memory_rows.row_terms``);
* the allocator's fragmentation and the runtime's reservations (``memory.allocator_allowance_bytes``).

A GPU's peak is its stage's; the job's is the largest stage's (``memory_bytes``; the parts are
that stage's). The planner calls ``memory_parts`` on every row before timing those that fit.
"""
from __future__ import annotations

import numpy as np

from cost_models import memory
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from simulator.config_batch import RECOMPUTE_CODES, ConfigBatch
from simulator.memory_search import fewest_that_fit, recompute_beyond_loss, stage_total
from simulator.parallel_config import Recompute
from simulator.stage_activations import (distinct_dynamic_rows, dynamic_parts, shared_dynamic, split_cells,
                                         split_inputs)
from simulator.stage_cells import ranges, row_bounds, stage_cell_batches
from simulator.stage_static import RunStatic, StageRows, stage_context, static_parts, static_parts_by_run
from simulator.step_pipeline import _moe_prefix

_FULL = RECOMPUTE_CODES[Recompute.FULL]
#: memory parts per GPU, summing to ``memory_bytes`` (the order tables print them in)
PARTS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "logits_bytes",
         "recompute_buffers_bytes", "offload_buffers_bytes", "moe_dispatch_bytes", "zero3_buffers_bytes",
         "allocator_bytes")



def memory_parts(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch,
                 detail: bool = False, once_per_run=None, layer_key_fields=(), fit_limit_bytes=None,
                 drop_over_bytes=None, by_part: bool = True) -> dict:
    """Peak memory per GPU, bytes, by part (``PARTS``), per row of ``batch``: the largest stage's.

    Returns the parts, ``memory_bytes`` (their sum), ``memory_stage`` (the stage), the host
    memory offload takes (``host_memory_bytes`` per GPU at its busiest stage,
    ``host_memory_node_bytes`` for the job's GPUs on its fullest node, ``host_fits``), the parameters the step
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
    ``drop_over_bytes`` (the planner; the search's limit when it searches): a row whose first
    or last stage shows it over this, after the search if any (``_over_at_an_end``), gets
    ``memory_bytes`` inf and nothing else (its other stages are not computed); every other row
    gets the very numbers it gets without. ``by_part`` False (the planner's memory phase, which
    reads the total): ``PARTS`` and ``memory_stage`` are left zero, every other key the same.
    """
    n = len(batch)
    ctx = stage_context(model, cluster, eff, batch, once_per_run, layer_key_fields)
    pp = np.asarray(batch.pp, dtype=float)
    act, per_row = ctx.act, ctx.per_row

    def row(x):
        return np.broadcast_to(np.asarray(x, dtype=float), (n,))

    rc_group = per_row["rc_group"]
    out = {k: np.zeros(n) for k in PARTS + ("memory_bytes", "memory_stage", "params_local", "expert_params_local",
                                            "host_memory_bytes", "_p_first", "_p_first_layers", "_p_first_expert",
                                            "_count_first_layers", "_count_last_layers")}
    p_max = int(np.max(pp)) if n else 1
    stage_out = {k: np.full((n, p_max), np.nan) for k in PARTS + ("memory_bytes", "host_memory_bytes", "layers",
                                                                  "in_flight")} if detail else None

    search = fit_limit_bytes is not None
    if search:
        out.update({"_recompute_num_layers": np.asarray(batch.recompute_num_layers, dtype=float).copy(),
                    "_recompute_layers_decrement": np.asarray(batch.recompute_layers_decrement, dtype=float).copy(),
                    "_offload_activation_layers": np.asarray(batch.offload_activation_layers, dtype=float).copy()})
    prefix = _moe_prefix(model)
    # rows equal in everything the activations, recomputation and offload read share their
    # stages' dynamic parts: those are computed once per distinct row (a tenth of the rows of a
    # search, which differ in ZeRO, sharding and data parallelism far more than in layout)
    reps, inverse = distinct_dynamic_rows(batch, act, rc_group)
    rep_batch = batch.take(reps) if len(reps) < n else batch
    in_batch = np.zeros(len(reps), dtype=bool)
    rep_local = np.zeros(len(reps), dtype=np.int64)
    for ridx, rfc in stage_cell_batches(model, rep_batch):
        rows_of_rep = reps[ridx]
        rep_bounds = row_bounds(rfc.row)
        rep_stages = np.diff(np.append(rep_bounds, len(rfc)))
        rep_prm = split_inputs(batch, rows_of_rep)
        rep_dyn = dynamic_parts(ctx, rows_of_rep[rfc.row], rfc, split_cells(prefix, rep_prm, rfc, given=True))
        # the batch rows whose distinct row is in this batch, and their stages' places in it
        in_batch[:] = False
        in_batch[ridx] = True
        rep_local[ridx] = np.arange(len(ridx))
        idx = np.flatnonzero(in_batch[inverse])
        own = rep_local[inverse[idx]]
        if search:
            n_cell = rfc.cell["dense"] + rfc.cell["moe"]
            rep_row_max = np.maximum.reduceat(rfc.stage_max(n_cell), rep_bounds) if len(rfc) else np.zeros(0)
        if drop_over_bytes is not None and len(idx):
            over = _over_at_an_end(ctx, prefix, split_inputs(batch, idx), idx, own, rfc, rep_bounds, rep_stages,
                                   rep_dyn, rep_prm, rows_of_rep, rep_row_max if search else None, drop_over_bytes,
                                   search)
            out["memory_bytes"][idx[over]] = np.inf
            idx, own = idx[~over], own[~over]
            if not len(idx):
                continue
        pos = ranges(rep_bounds[own], rep_stages[own])
        # the batch's stages, each its distinct row's stage ``pos`` of ``rfc``: only their rows and
        # places are spelled out (a stage's layers and cells are read at ``pos``)
        fc = StageRows(np.repeat(np.arange(len(idx)), rep_stages[own]), rfc.local[pos])
        sidx = idx[fc.row]                      # each stage's row of the batch
        static = static_parts_by_run(ctx, sidx, fc, rfc, pos)
        dyn = {k: x[pos] for k, x in rep_dyn.items()}
        if search:
            row_max = rep_row_max[own] if len(rfc) else np.zeros(0)
            prm = split_inputs(batch, idx)
            shared = shared_dynamic(prefix, rep_prm, rfc, ctx, rows_of_rep, pos)
            dyn = fewest_that_fit(prm, idx, fc, fit_limit_bytes, out, static.stage("tensors"), dyn, row_max,
                                  ctx.per_row["offload_ok"][idx], shared, ctx.per_row["partial_ok"][idx],
                                  reserved_bytes=ctx.reserved_bytes, loss_freed=static.stage("loss_freed"))
        allocator, total, shown_rc = _stage_totals(static, dyn, ctx.reserved_bytes)
        host = static.stage("host") + dyn["host"]

        def part(name, where):
            """Part ``name`` of the stages at ``where``."""
            if name == "allocator_bytes":
                return allocator[where]
            if name == "recompute_buffers_bytes":
                return shown_rc[where]
            return dyn[name][where] if name in dyn else static.at(name, where)

        bounds = row_bounds(fc.row)
        last = np.append(bounds[1:], len(fc)) - 1            # each row's last stage
        peak = np.maximum.reduceat(total, bounds)
        at_peak = np.where(total == np.repeat(peak, np.diff(np.append(bounds, len(fc)))), np.arange(len(fc)), len(fc))
        k = np.minimum.reduceat(at_peak, bounds)               # the first stage at the peak (as argmax)
        if by_part:
            for name in PARTS:
                out[name][idx] = part(name, k)
            out["memory_stage"][idx] = fc.local[k]
        out["memory_bytes"][idx] = total[k]
        out["host_memory_bytes"][idx] = np.maximum.reduceat(host, bounds)
        # the optimizer step is timed on the larger of the first and last stage's parameters (as
        # the efficiency fit was made; a middle stage can hold more when the ends are lighter)
        out["params_local"][idx] = np.maximum(static.at("params", bounds), static.at("params", last))
        out["expert_params_local"][idx] = np.maximum(static.at("expert_params", bounds),
                                                     static.at("expert_params", last))
        out["_p_first"][idx] = static.at("params", bounds)
        out["_p_first_layers"][idx] = static.at("layer_params", bounds)
        out["_p_first_expert"][idx] = static.at("expert_params", bounds)
        out["_count_first_layers"][idx] = static.at("layers", bounds)
        out["_count_last_layers"][idx] = static.at("layers", last)
        if detail:
            at = (sidx, fc.local)
            every = np.arange(len(fc))
            for name in PARTS:
                stage_out[name][at] = part(name, every)
            stage_out["memory_bytes"][at] = total
            stage_out["host_memory_bytes"][at] = host
            stage_out["layers"][at] = static.stage("layers")
            stage_out["in_flight"][at] = rfc.in_flight[pos]

    host = cluster.host
    # the job's GPUs on its fullest node share the host's memory (a job smaller than a node has
    # the host to itself, ``ConfigBatch.gpus_on_a_node``)
    out["host_memory_node_bytes"] = out["host_memory_bytes"] * batch.gpus_on_a_node(cluster.gpus_per_node)
    if host is not None and host.memory_bytes is not None:
        # the hosts those GPUs sit on hold their share of the node's stated memory (a 4-GPU job on
        # a GB200 NVL72 rack has one tray's two Grace CPUs, not the rack's 36)
        out["host_fits"] = out["host_memory_node_bytes"] <= host.memory_bytes * batch.host_share_of_node(
            cluster.gpus_per_node, cluster.gpus_per_host)
    else:
        out["host_fits"] = np.ones(n, dtype=bool)
    out.update({"_p_dense_layer": per_row["dense_p"], "_p_moe_layer": per_row["moe_ne_p"],
                "_p_expert_layer": per_row["moe_ex_p"], "_edp": row(ctx.edp),
                "_act_kept_dense": act["kept_dense"], "_act_kept_moe": act["kept_moe"]})
    if detail:
        out.update({f"_stage_{k}": v for k, v in stage_out.items()})
    return out



def _over_at_an_end(ctx, prefix, prm: dict, idx, own, rfc, rep_bounds, rep_stages, rep_dyn: dict, rep_prm: dict,
                    rows_of_rep, rep_row_max, limit, search: bool) -> np.ndarray:
    """Mask of the batch rows ``idx`` (distinct row ``own`` of ``rfc`` each) that the memory
    search leaves over ``limit``, shown from their first and last stages alone: the stage totals
    of both are computed as ``fewest_that_fit`` and ``_stage_totals`` compute them (a stage's
    total depends on its own inputs only, so these are the very numbers). A row is over when
    an end stage is over as enumerated in the search's sum (so the recomputation search leaves
    it, and with it the offload search unless the row may offload), an end stage is over in the
    final sum (``_stage_totals``), and, if it may offload (not recomputing in full, nothing
    offloaded, a host link), an end stage is over with all it may offload (so the offload
    search drops it, ``fewest_that_fit``'s ``ends_over``): then its layers stay as enumerated
    and its peak is over the limit. Without the ``search``, an end stage over in the final sum."""
    n = len(idx)
    ends = np.concatenate([rep_bounds[own], rep_bounds[own] + rep_stages[own] - 1])
    rows = np.concatenate([idx, idx])
    static = static_parts(ctx, rows, rfc.view(ends, np.arange(2 * n)))
    values = {**static["parts"], **{k: v for k, v in static.items() if k != "parts"}}
    dyn = {k: x[ends] for k, x in rep_dyn.items()}

    def either(mask):
        return mask.reshape(2, n).any(axis=0)

    over = either(_stage_totals(RunStatic(values, None), dyn, ctx.reserved_bytes)[1] > limit)
    if not search:
        return over
    freed = static["loss_freed"]
    over &= either(stage_total(static["tensors"], dyn, ctx.reserved_bytes, freed) > limit)
    may_offload = over & (prm["rc"] != _FULL) & ctx.per_row["offload_ok"][idx] & (prm["off"] == 0)
    if may_offload.any():
        r = np.flatnonzero(may_offload)
        at = np.concatenate([r, n + r])
        hi = np.maximum(rep_row_max[own[r]] - 1.0, 1.0)
        offloaded = shared_dynamic(prefix, rep_prm, rfc, ctx, rows_of_rep, ends[at])(
            np.arange(len(at)), "offload", np.concatenate([hi, hi]))
        over[r] = (stage_total(static["tensors"][at], offloaded, ctx.reserved_bytes, freed[at])
                   > limit).reshape(2, len(r)).any(axis=0)
    return over


def _stage_totals(static: RunStatic, dyn: dict, reserved_bytes: float):
    """(allocator allowance, total, recompute buffer part) bytes per stage (``reserved_bytes``:
    the device's runtime reserve, ``memory.runtime_reserved_bytes``), from its ``static_parts``
    and ``dynamic_parts``: the parts summed in ``PARTS`` order, the parts that precede the first
    dynamic one summed once per run (the same sums: a run's stages hold equal values); the
    recompute buffer counts beyond the logits freed before it (``recompute_beyond_loss``), so
    the parts still sum to the total, which holds the larger of the two."""
    v = static.values
    head = v["weights_bytes"] + v["gradients_bytes"] + v["optimizer_bytes"]
    tensors = head if static.run is None else head[static.run]
    shown_rc = recompute_beyond_loss(dyn["recompute_buffers_bytes"], static.stage("loss_freed"))
    for name in PARTS[3:-1]:
        if name == "recompute_buffers_bytes":
            tensors = tensors + shown_rc
        else:
            tensors = tensors + (dyn[name] if name in dyn else static.stage(name))
    allocator = memory.allocator_allowance_bytes(tensors, reserved_bytes)
    return allocator, tensors + allocator, shown_rc

