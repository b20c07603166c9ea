"""Peak memory per GPU on every pipeline stage, by part, for every row of a ``ConfigBatch``.

Each stage holds (``simulator.stage_cells``: every row's cells, flat):

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
import pandas as pd

from cost_models import memory, moe as moe_costs, offload
from cost_models.compute import LOW_PRECISION, activation_bytes
from cost_models.low_precision import saved_gemm_input_bytes_per_element
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from simulator.config_batch import RECOMPUTE_CODES, RECOMPUTE_METHOD_CODES, ConfigBatch
from simulator.parallel_config import Recompute, RecomputeMethod
from simulator.memory_rows import _degrees, row_terms
from simulator.memory_search import fewest_that_fit
from simulator.stage_cells import StageCells, ranges, row_bounds, stage_cell_batches
from simulator.step_pipeline import _layouts, _moe_prefix, _rows, _take, split_counts

#: memory parts per GPU, summing to ``memory_bytes`` (the order tables print them in)
PARTS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "logits_bytes",
         "recompute_buffers_bytes", "offload_buffers_bytes", "moe_dispatch_bytes", "zero3_buffers_bytes",
         "allocator_bytes")
_UNIFORM = RECOMPUTE_METHOD_CODES[RecomputeMethod.UNIFORM]
_FULL = RECOMPUTE_CODES[Recompute.FULL]


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
    if model.hybrid_pattern:
        return _hybrid_activation_bytes(model, mbs, s, tp, cp, sp, rc, not_full, mods, flash_attention, ep, etp,
                                        imbalance, gb, eb)
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


#: ``memory.activation_terms`` of one transformer layer split by block: a hybrid layer holds
#: one block behind one pre-norm, so it keeps half of the per-layer norm and mask terms
_ATTENTION_TERMS = ("qkv", "mla_latents", "attn_out", "core")
_MLP_TERMS = ("mlp_fc1_out", "mlp_act_out")
_HALVED_TERMS = ("norm_inputs", "norm_outputs", "dropout_masks")


def _block_terms(terms: dict, names) -> dict:
    out = {k: terms[k] for k in names}
    out.update({k: terms[k] / 2.0 for k in _HALVED_TERMS})
    out["layer_input"] = terms["layer_input"]
    return out


def _hybrid_activation_bytes(model: ModelSpec, mbs, s, tp, cp, sp, rc, not_full, mods, flash_attention, ep, etp,
                             imbalance, gb, eb) -> dict:
    """``layer_activation_bytes`` of a hybrid pattern: the dense slot the share-weighted mean of
    its Mamba (``mamba.mamba_activation_terms``), attention and MLP layers, the moe slot an E
    layer's MoE block alone (shared experts as an MLP, routed experts as for any MoE layer)."""
    from cost_models import mamba
    kept_mods = memory.effective_modules(not_full, mods)

    def kept_and_full(terms):
        """(bytes kept by a layer not recomputed in full, everything it materialises)"""
        return memory.kept_bytes(terms, kept_mods), memory.kept_bytes(terms, 0)

    layer = memory.activation_terms(model, mbs, s, tp, cp, sp, flash_attention, None, gb, eb)
    parts = {"attention": kept_and_full(_block_terms(layer, _ATTENTION_TERMS)),
             "mlp": kept_and_full(_block_terms(layer, _MLP_TERMS))}
    if model.mamba is not None:
        parts["mamba"] = kept_and_full(mamba.mamba_activation_terms(model, mbs, s, tp, cp, sp, gb, eb))
    shares = mamba.non_moe_kind_shares(model)
    out = {"kept_dense": sum(shares[k] * v[0] for k, v in parts.items()),
           "full_dense": sum(shares[k] * v[1] for k, v in parts.items()), "input": layer["layer_input"]}
    if model.moe is not None:
        moe = model.moe
        shared_ffn = max(moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size), 1)
        shared = kept_and_full(_block_terms(memory.activation_terms(model, mbs, s, tp, cp, sp, flash_attention,
                                                                    shared_ffn, gb, eb), _MLP_TERMS))
        routed = partial(moe_costs.moe_activation_bytes_per_layer, model, mbs, s, tp, cp, ep, etp)
        out["kept_moe"] = shared[0] + routed(not_full, imbalance, mods, gb)
        out["full_moe"] = shared[1] + routed(0, imbalance, 0, gb)
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
    terms = row_terms(model, cluster, eff, batch)
    low_precision, full_precision, copy_bytes = terms["low_precision"], terms["full_precision"], terms["copy_bytes"]
    dp, tp, pp, cp, ep, etp, vpp = _degrees(batch)
    mbs = np.asarray(batch.micro_batch, dtype=float)

    fn = partial(layer_activation_bytes, model, batch.dtype)
    args = (mbs, tp, cp, batch.sequence_parallel, batch.recompute, batch.flash_attention, ep, etp,
            batch.moe_load_imbalance, batch.recompute_modules)
    act = once_per_run(batch, layer_key_fields, fn, *args) if once_per_run else fn(*args)
    act = {k: np.broadcast_to(np.asarray(v, dtype=float), (n,)) for k, v in act.items()}

    def row(x):
        return np.broadcast_to(np.asarray(x, dtype=float), (n,))

    per_row = {k: v for k, v in terms.items() if k not in ("edp", "low_precision", "full_precision", "copy_bytes")}
    rc_group = per_row["rc_group"]
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
    prefix = _moe_prefix(model)
    # rows equal in everything the activations, recomputation and offload read share their
    # stages' dynamic parts: those are computed once per distinct row (a tenth of the rows of a
    # search, which differ in ZeRO, sharding and data parallelism far more than in layout)
    reps, inverse = _distinct_dynamic_rows(batch, act, rc_group)
    rep_batch = batch.take(reps) if len(reps) < n else batch
    in_batch = np.zeros(len(reps), dtype=bool)
    rep_local = np.zeros(len(reps), dtype=np.int64)
    for ridx, rfc in stage_cell_batches(model, rep_batch):
        rows_of_rep = reps[ridx]
        rep_bounds = row_bounds(rfc.row)
        rep_stages = np.diff(np.append(rep_bounds, len(rfc)))
        rep_prm = _split_inputs(batch, rows_of_rep)
        rep_dyn = _dynamic_parts(ctx, rows_of_rep[rfc.row], rfc, _split(prefix, rep_prm, rfc, given=True))
        # the batch rows whose distinct row is in this batch, and their stages' places in it
        in_batch[:] = False
        in_batch[ridx] = True
        rep_local[ridx] = np.arange(len(ridx))
        idx = np.flatnonzero(in_batch[inverse])
        own = rep_local[inverse[idx]]
        pos = ranges(rep_bounds[own], rep_stages[own])
        # the batch's stages, each its distinct row's stage ``pos`` of ``rfc``: only their rows and
        # places are spelled out (a stage's layers and cells are read at ``pos``)
        fc = _StageRows(np.repeat(np.arange(len(idx)), rep_stages[own]), rfc.local[pos])
        sidx = idx[fc.row]                      # each stage's row of the batch
        static = _static_parts_by_run(ctx, sidx, fc, rfc, pos)
        dyn = {k: x[pos] for k, x in rep_dyn.items()}
        if search:
            n_cell = rfc.cell["dense"] + rfc.cell["moe"]
            row_max = np.maximum.reduceat(rfc.stage_max(n_cell), rep_bounds)[own] if len(rfc) else np.zeros(0)
            prm = _split_inputs(batch, idx)
            shared = _shared_dynamic(prefix, rep_prm, rfc, ctx, rows_of_rep, pos)
            dyn = fewest_that_fit(prm, idx, fc, fit_limit_bytes, out, static.stage("tensors"), dyn, row_max,
                                  ctx.per_row["offload_ok"][idx], shared)
        allocator, total = _stage_totals(static, dyn)
        host = static.stage("host") + dyn["host"]

        def part(name, where):
            """Part ``name`` of the stages at ``where``."""
            if name == "allocator_bytes":
                return allocator[where]
            return dyn[name][where] if name in dyn else static.at(name, where)

        bounds = row_bounds(fc.row)
        last = np.append(bounds[1:], len(fc)) - 1            # each row's last stage
        peak = np.maximum.reduceat(total, bounds)
        at_peak = np.where(total == np.repeat(peak, np.diff(np.append(bounds, len(fc)))), np.arange(len(fc)), len(fc))
        k = np.minimum.reduceat(at_peak, bounds)               # the first stage at the peak (as argmax)
        for name in PARTS:
            out[name][idx] = part(name, k)
        out["memory_bytes"][idx] = total[k]
        out["memory_stage"][idx] = fc.local[k]
        out["host_memory_bytes"][idx] = np.maximum.reduceat(host, bounds)
        # the optimizer step is timed on the larger of the first and last stage's parameters (as
        # the efficiency fit was made; a middle stage can hold more when the ends are lighter)
        out["params_local"][idx] = np.maximum(static.at("params", bounds), static.at("params", last))
        out["expert_params_local"][idx] = np.maximum(static.at("expert_params", bounds),
                                                     static.at("expert_params", last))
        out["_p_first"][idx] = static.at("params", bounds)
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
    out["host_memory_node_bytes"] = out["host_memory_bytes"] * cluster.gpus_per_node
    if host is not None and host.memory_bytes is not None:
        out["host_fits"] = out["host_memory_node_bytes"] <= host.memory_bytes
    else:
        out["host_fits"] = np.ones(n, dtype=bool)
    out.update({"_p_dense_layer": per_row["dense_p"], "_p_moe_layer": per_row["moe_ne_p"],
                "_p_expert_layer": per_row["moe_ex_p"], "_edp": row(terms["edp"]),
                "_act_kept_dense": act["kept_dense"], "_act_kept_moe": act["kept_moe"]})
    if detail:
        out.update({f"_stage_{k}": v for k, v in stage_out.items()})
    return out


class _Context:
    """What every group's stage computation shares (per-row arrays, the dtype's byte counts)."""

    def __init__(self, model, low_precision, full_precision, copy_bytes, per_row, act):
        self.model, self.low_precision, self.full_precision = model, low_precision, full_precision
        self.copy_bytes, self.per_row, self.act = copy_bytes, per_row, act



def _distinct_dynamic_rows(batch, act: dict, rc_group):
    """(first row of each distinct key, each row's key) over the rows of ``batch``, the key
    being everything a stage's dynamic parts read: the layout (schedule, pp, vpp, first and
    last stage layers, layout string), the micro-batches per step (the in-flight chunk sets),
    the recomputation and offload settings and the per-layer activation bytes."""
    n = len(batch)

    def col(x):
        return np.broadcast_to(np.asarray(x, dtype=float), (n,))

    m = np.rint(np.asarray(batch.global_batch, dtype=float)
                / (np.asarray(batch.dp, dtype=float) * np.asarray(batch.micro_batch, dtype=float)))
    cols = [col(getattr(batch, f)) for f in ("schedule", "pp", "vpp", "first_stage_layers", "last_stage_layers",
                                              "recompute", "recompute_num_layers", "recompute_layers_decrement",
                                              "recompute_method", "offload_activation_layers")]
    cols += [col(m), col(rc_group)] + [col(act[k]) for k in ("kept_dense", "kept_moe", "input", "full_dense",
                                                               "full_moe")]
    layouts = _layouts(batch, np.arange(n))
    if layouts is not None:
        cols.append(np.unique(np.asarray(layouts, dtype=object).astype(str), return_inverse=True)[1]
                    .reshape(-1).astype(float))
    key = np.ascontiguousarray(np.stack(cols, axis=1))
    _, first, inverse = np.unique(key.view(np.dtype((np.void, key.itemsize * key.shape[1]))).reshape(-1),
                                  return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")          # distinct rows in batch order
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.reshape(-1)]


def _split_inputs(batch, idx) -> dict:
    """Per row of ``idx``: what the layer split counts read (recompute code, num layers,
    decrement, method code, offloaded layers)."""
    return {"rc": _rows(batch.recompute, idx), "nl": _rows(batch.recompute_num_layers, idx),
            "dec": _rows(batch.recompute_layers_decrement, idx), "method": _rows(batch.recompute_method, idx),
            "off": _rows(batch.offload_activation_layers, idx)}


def _split(prefix, prm: dict, fc: StageCells, stage_rc=None, offload=None, given: bool = False):
    """Per cell of ``fc``: the layers recomputed in full and offloaded
    (``step_pipeline.split_counts``), None when no cell has any. ``stage_rc`` (per stage of
    ``fc``) and ``offload`` (per stage: its row's count) override the rows' block counts and
    offloaded layers (the search). ``given``: the rows as enumerated, where a row that
    recomputes every layer of every cell (``recompute full`` without a count, nothing
    offloaded) takes the cells' own counts (``layer_split_counts``' direct path)."""
    row = fc.cell_row
    rc, nl, off = prm["rc"], prm["nl"], prm["off"]
    if stage_rc is None and offload is None and not ((rc == _FULL) | (off > 0)).any():
        return None
    busy = None
    if stage_rc is None and offload is None:
        busy_rows = (rc == _FULL) | (off > 0)
        if not busy_rows.all():
            # only the rows that recompute in full or offload have counts: those cells, zeros elsewhere
            bounds = row_bounds(fc.row)
            ends = np.append(fc.first_cell, len(fc.cell_stage))[np.append(bounds[1:], len(fc))]
            r = np.flatnonzero(busy_rows)
            starts = fc.first_cell[bounds[r]]
            busy = ranges(starts, ends[r] - starts)
            row = row[busy]
    pick = (lambda x: x) if busy is None else (lambda x: x[busy])   # noqa: E731
    dense, moe = pick(fc.cell["dense"]), pick(fc.cell["moe"])
    out = split_counts(prefix, dense, moe, pick(fc.cell["start"]), pick(fc.local[fc.cell_stage]).astype(float),
                       rc[row], nl[row], prm["dec"][row], prm["method"][row],
                       off[row] if offload is None else pick(offload[fc.cell_stage]),
                       None if stage_rc is None else pick(stage_rc[fc.cell_stage]))
    if given:
        every = ((rc == _FULL) & (nl == 0) & (off == 0))[row]
        if every.any():
            out["rc_dense"] = np.where(every, dense, out["rc_dense"])
            out["rc_moe"] = np.where(every, moe, out["rc_moe"])
            out["rc_inputs"] = np.where(every, dense + moe, out["rc_inputs"])
    if busy is not None:
        for k, x in out.items():
            full = np.zeros(len(fc.cell_stage))
            full[busy] = x
            out[k] = full
    return out


class _RunStatic:
    """``_static_parts`` of every stage, held once per run of equal stages (``values``: the
    parts, ``tensors``, ``host``, ``params``, ``expert_params``, ``layers`` per run; ``run``:
    each stage's run, None when every stage is its own): read a stage's value through ``at``,
    so only the values read are repeated over the stages."""

    def __init__(self, values: dict, run):
        self.values, self.run = values, run

    def at(self, key, where):
        """``key`` of the stages at ``where``."""
        x = self.values[key]
        return x[where] if self.run is None else x[self.run[where]]

    def stage(self, key):
        """``key`` of every stage."""
        x = self.values[key]
        return x if self.run is None else x[self.run]


class _StageRows:
    """Stages laid out row after row: each stage's ``row`` and ``local`` place in its row."""

    def __init__(self, row, local):
        self.row, self.local = row, local

    def __len__(self) -> int:
        return len(self.row)


def _static_parts_by_run(ctx: _Context, sidx, fc: _StageRows, cells: StageCells, pos) -> _RunStatic:
    """``_static_parts`` of the stages ``fc`` (stage ``pos`` of ``cells`` each; ``sidx``: their
    batch rows), computed once per run of consecutive stages of one row that hold the same
    layers and ends (a uniform layout's middle stages: a row of p stages has about three runs):
    the same numbers, p / 3 times fewer array elements. A row's stages are a whole row of
    ``cells``, so its runs are those of that row."""
    def flat(static):
        return {**static["parts"], **{k: v for k, v in static.items() if k != "parts"}}

    new = np.ones(len(cells), dtype=bool)
    if len(cells) > 1:
        new[1:] = cells.row[1:] != cells.row[:-1]
        for key in ("stage_dense", "stage_moe", "stage_emb", "stage_head", "stage_mtp"):
            x = cells.stage[key]
            new[1:] |= x[1:] != x[:-1]
    new = new[pos]
    starts = np.flatnonzero(new)
    if len(starts) == len(fc):
        return _RunStatic(flat(_static_parts(ctx, sidx, cells.view(pos, fc.row))), None)
    run = np.cumsum(new) - 1                # each stage's run
    return _RunStatic(flat(_static_parts(ctx, sidx[starts], cells.view(pos[starts], fc.row[starts]))), run)


def _static_parts(ctx: _Context, sidx, fc: StageCells) -> dict:
    """What of a stage's memory does not depend on recomputation or offload (per stage of
    ``fc``; ``sidx``: each stage's batch row): model states, logits, MoE dispatch and ZeRO-3
    buffers (``parts``), the host memory of an offloaded optimizer (``host``), and ``params`` /
    ``expert_params`` (before ZeRO) and ``layers``."""
    model = ctx.model
    g = {k: _take(x, sidx) for k, x in ctx.per_row.items()}     # broadcast rows stay views
    L_d, L_m = fc.stage["stage_dense"], fc.stage["stage_moe"]
    emb, head, mtp = fc.stage["stage_emb"], fc.stage["stage_head"], fc.stage["stage_mtp"]
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
             "moe_dispatch_bytes": np.where(L_m > 0, ctx.act["dispatch"][sidx], 0.0),
             "zero3_buffers_bytes": g["z3"] + 0.0 * L_d}
    return {"parts": parts, "tensors": sum(parts.values()),
            "host": g["off"] * opt_params * offload.HOST_OPTIMIZER_BYTES_PER_PARAM,
            "params": layer_p + end_p, "expert_params": expert_p, "layers": L_d + L_m}


def _dynamic_parts(ctx: _Context, sidx, fc: StageCells, split) -> dict:
    """What recomputation and offload change, per stage of ``fc``: ``activations_bytes``,
    ``recompute_buffers_bytes``, ``offload_buffers_bytes``, and ``host`` (offloaded activations)."""
    a = {k: x[sidx] for k, x in ctx.act.items()}
    if split is None:
        zero = np.zeros(len(fc))
        per_stage = dict.fromkeys(("rc_dense", "rc_moe", "rc_inputs", "off_dense", "off_moe"), zero)
    else:
        per_stage = {k: fc.stage_sum(x) for k, x in split.items()}
    offd, offm = per_stage["off_dense"], per_stage["off_moe"]
    kept_d = fc.stage["stage_dense"] - per_stage["rc_dense"] - offd
    kept_m = fc.stage["stage_moe"] - per_stage["rc_moe"] - offm
    sets = fc.in_flight / fc.chunks
    return {
        "activations_bytes": sets * (kept_d * a["kept_dense"] + kept_m * a["kept_moe"]
                                     + per_stage["rc_inputs"] * a["input"]),
        "recompute_buffers_bytes": _recompute_buffer(fc, split, a, ctx.per_row["rc_group"][sidx],
                                                     (per_stage["rc_dense"] + per_stage["rc_moe"] + offd + offm) > 0),
        "offload_buffers_bytes": offload.OFFLOAD_STAGING_LAYERS * np.maximum(
            np.where(offd > 0, a["kept_dense"], 0.0), np.where(offm > 0, a["kept_moe"], 0.0)),
        "host": sets * (offd * a["kept_dense"] + offm * a["kept_moe"]),
    }


def _stage_totals(static: _RunStatic, dyn: dict):
    """(allocator allowance, total) bytes per stage, from its ``_static_parts`` and
    ``_dynamic_parts``: the parts summed in ``PARTS`` order, the parts that precede the first
    dynamic one summed once per run (the same sums: a run's stages hold equal values)."""
    v = static.values
    head = v["weights_bytes"] + v["gradients_bytes"] + v["optimizer_bytes"]
    tensors = head if static.run is None else head[static.run]
    for name in PARTS[3:-1]:
        tensors = tensors + (dyn[name] if name in dyn else static.stage(name))
    allocator = memory.allocator_allowance_bytes(tensors)
    return allocator, tensors + allocator


def _recompute_buffer(fc: StageCells, split, a: dict, group, busy) -> np.ndarray:
    """Per stage of ``fc``, bytes recomputation brings back at the stage's backward, beyond what
    it keeps:

    * a layer that recomputes selected operations materialises them again during its backward:
      its full activations less what it kept (the first layer a backward reaches is one of these
      unless the chunk recomputes every layer);
    * a fully recomputed layer (``uniform``: its group of layers) materialises its full
      activations less its input (stored already), less what the same micro-batch's layers of
      that chunk that keep their activations have freed by then (their backward runs first, the
      recomputed layers being the chunk's first).

    The larger of the two, over the stage's chunks. With nothing recomputed in full or offloaded
    (``busy`` false) that is the selected operations of one layer of each kind the stage holds."""
    sel = np.maximum(np.where(fc.stage["stage_dense"] > 0, a["full_dense"] - a["kept_dense"], 0.0),
                     np.where(fc.stage["stage_moe"] > 0, a["full_moe"] - a["kept_moe"], 0.0))
    sel = np.maximum(sel, 0.0)
    if split is None or not busy.any():
        return sel
    # the stages with a layer recomputed in full or offloaded, chunk by chunk (on the others the
    # chunk-by-chunk maximum is the stage's ``sel``)
    pos = np.flatnonzero(busy)
    counts = np.diff(np.append(fc.first_cell, len(fc.cell_stage)))
    cells = ranges(fc.first_cell[pos], counts[pos]) if len(pos) < len(fc) else slice(None)
    cell_stage = np.repeat(pos, counts[pos])
    c = {k: a[k][cell_stage] for k in ("full_dense", "full_moe", "kept_dense", "kept_moe", "input")}
    rc_d, rc_m = split["rc_dense"][cells], split["rc_moe"][cells]
    full = np.maximum(np.where(rc_d > 0, c["full_dense"], 0.0), np.where(rc_m > 0, c["full_moe"], 0.0))
    kept_d = fc.cell["dense"][cells] - rc_d - split["off_dense"][cells]
    kept_m = fc.cell["moe"][cells] - rc_m - split["off_moe"][cells]
    kept = kept_d * c["kept_dense"] + kept_m * c["kept_moe"]
    rc_need = np.where(rc_d + rc_m > 0, np.maximum(group[cell_stage] * full - c["input"] - kept, 0.0), 0.0)
    sel_need = np.maximum(np.where(kept_d > 0, c["full_dense"] - c["kept_dense"], 0.0),
                          np.where(kept_m > 0, c["full_moe"] - c["kept_moe"], 0.0))
    per_cell = np.maximum(rc_need, np.maximum(sel_need, 0.0))
    out = np.array(sel, copy=True)
    out[pos] = np.maximum.reduceat(per_cell, np.cumsum(counts[pos]) - counts[pos])
    return out


def _shared_dynamic(prefix, prm: dict, cells: StageCells, ctx: _Context, rows, shared):
    """``dynamic(pos, counts_key, counts)``: the dynamic parts of the stages ``pos`` (of the
    batch's stages) with ``counts`` (``_split``'s ``stage_rc`` or ``offload``, per stage),
    evaluated once per distinct (shared stage, count) on the distinct rows' stages ``cells``
    (their rows: batch rows ``rows``, split inputs ``prm``); ``shared``: per stage, the stage of
    ``cells`` whose dynamic parts it shares (every input of those is the same)."""
    def dynamic(pos, counts_key, counts):
        counts = np.asarray(counts, dtype=float)
        if len(pos) and (counts >= 0).all() and (counts == np.floor(counts)).all():
            key = shared[pos] * (int(counts.max()) + 1) + counts.astype(np.int64)
            # (a hash table: a sort of the keys cost more than the parts it saves)
            inverse, distinct = pd.factorize(key)
            first = np.empty(len(distinct), dtype=np.int64)
            first[inverse[::-1]] = np.arange(len(key) - 1, -1, -1)    # each key's first stage
        else:
            first, inverse = np.arange(len(pos)), slice(None)
        sub = cells.take(shared[pos[first]])
        part = _dynamic_parts(ctx, rows[sub.row], sub, _split(prefix, prm, sub, **{counts_key: counts[first]}))
        return {k: x[inverse] for k, x in part.items()}

    return dynamic
