"""What of a pipeline stage's memory does not depend on recomputation or offload, for
``stage_memory``.

A stage's static parts (``static_parts``): the model states of its layers and ends under ZeRO
over the shard group (the experts' over their expert-data-parallel ranks of one replica
group), the quantised weight copies of low-precision recipes, one micro-batch's logits on the
stages with the LM head or MTP heads, one MoE layer's dispatch buffers, ZeRO-3's gathered
parameters, the host memory of an offloaded optimizer share.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from cost_models import context_parallel, memory, offload
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from simulator.config_batch import CP_KIND_CODES, ConfigBatch
from simulator.memory_rows import _degrees, row_terms
from simulator.parallel_config import CPKind
from simulator.stage_activations import layer_activation_bytes
from simulator.stage_cells import StageCells
from simulator.step_pipeline import _take


class StageContext:
    """What every stage computation of a batch shares: the model, the dtype's byte counts
    (``low_precision``, ``full_precision``, ``copy_bytes``), the per-row terms (``per_row``:
    ``memory_rows.row_terms``) and the per-layer activation bytes (``act``:
    ``layer_activation_bytes``), all arrays of the batch's length; ``reserved_bytes``: the
    device's runtime reserve (``memory.runtime_reserved_bytes``)."""

    def __init__(self, model, low_precision, full_precision, copy_bytes, per_row, act, edp=None,
                 reserved_bytes: float = memory.RUNTIME_RESERVED_BYTES):
        self.model, self.low_precision, self.full_precision = model, low_precision, full_precision
        self.copy_bytes, self.per_row, self.act, self.edp = copy_bytes, per_row, act, edp
        self.reserved_bytes = reserved_bytes


def stage_context(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch,
                  once_per_run=None, layer_key_fields=()) -> StageContext:
    """The ``StageContext`` of ``batch``; ``once_per_run(batch, fields, fn, *args)``: the step
    model's evaluation of ``fn`` once per run of rows equal in ``layer_key_fields``."""
    n = len(batch)
    terms = row_terms(model, cluster, eff, batch)
    dp, tp, pp, cp, ep, etp, vpp = _degrees(batch)
    mbs = np.asarray(batch.micro_batch, dtype=float)
    fn = partial(layer_activation_bytes, model, batch.dtype)
    args = (mbs, tp, cp, batch.sequence_parallel, batch.recompute, batch.flash_attention, ep, etp,
            batch.moe_load_imbalance, batch.recompute_modules, batch.selective_modules, batch.moe_probs_in_expert)
    act = once_per_run(batch, layer_key_fields, fn, *args) if once_per_run else fn(*args)
    act = {k: np.broadcast_to(np.asarray(v, dtype=float), (n,)) for k, v in act.items()}
    # context parallelism's exchange buffers of the computing layer (ring steps' K/V and dK/dV,
    # Ulysses' all-to-all outputs, all-gather's gathered K/V and dK/dV): a transient of the layer
    # computing, beside its recompute buffer (``context_parallel.cp_transient_bytes``;
    # ``stage_activations``); where all-gather CP saves the gathered K/V for backward they are an
    # activation of every layer not recomputed in full (``kept_*``, ``host_*``) and the transient
    # is the dK/dV alone
    gather = np.zeros(n)
    if np.any(cp > 1):
        tokens_local = mbs * float(model.seq_len) / cp
        saves = np.broadcast_to(np.asarray(batch.cp_allgather_saves_kv, dtype=bool), (n,))
        gather = context_parallel.cp_transient_bytes(model, np.asarray(batch.cp_kind), tokens_local, cp, tp,
                                                     cluster.gpus_per_node, saves) + gather
        gathers = (np.asarray(batch.cp_kind) == CP_KIND_CODES[CPKind.ALLGATHER]) & (cp > 1)
        if np.any(gathers):
            step = context_parallel.ring_attention_step_bytes(model, tokens_local, tp)
            kept = np.where(gathers, context_parallel.allgather_saved_kv_bytes(step, cp, saves), 0.0)
            if np.any(kept > 0):
                # (``full_*``: a layer recomputed in full gathers them again and its attention keeps them)
                for k in ("kept_dense", "kept_moe", "host_dense", "host_moe", "full_dense", "full_moe"):
                    act[k] = act[k] + kept
    act["cp_buffers"] = gather
    per_row = {k: v for k, v in terms.items() if k not in ("edp", "low_precision", "full_precision", "copy_bytes")}
    return StageContext(model, terms["low_precision"], terms["full_precision"], terms["copy_bytes"], per_row, act,
                        terms["edp"], memory.runtime_reserved_bytes(cluster.gpu))


class RunStatic:
    """``static_parts`` of every stage, held once per run of equal stages (``values``: the
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


class StageRows:
    """Stages laid out row after row: each stage's ``row`` and ``local`` place in its row."""

    def __init__(self, row, local):
        self.row, self.local = row, local

    def __len__(self) -> int:
        return len(self.row)


def static_parts_by_run(ctx: StageContext, sidx, fc: StageRows, cells: StageCells, pos) -> RunStatic:
    """``static_parts`` of the stages ``fc`` (stage ``pos`` of ``cells`` each; ``sidx``: their
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
        return RunStatic(flat(static_parts(ctx, sidx, cells.view(pos, fc.row))), None)
    run = np.cumsum(new) - 1                # each stage's run
    return RunStatic(flat(static_parts(ctx, sidx[starts], cells.view(pos[starts], fc.row[starts]))), run)


def static_parts(ctx: StageContext, sidx, fc: StageCells) -> dict:
    """What of a stage's memory does not depend on recomputation or offload (per stage of
    ``fc``; ``sidx``: each stage's batch row): model states, logits, MoE dispatch and ZeRO-3
    buffers (``parts``), the host memory of an offloaded optimizer (``host``), the logits freed
    before the stage's layers recompute (``loss_freed``: ``memory_rows.loss_freed_bytes`` on the
    stages computing logits), and ``params`` / ``expert_params`` (before ZeRO) and ``layers``."""
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
    held = dict(grad_bytes=g["grad_buffer"], fp8_param_gather=g["fp8_param_gather"],
                zero3_master_params=g["zero3_master"], master_bytes=g["master"])
    w1, g1, o1 = memory.model_state_bytes(layer_p, g["zero"], g["shard"], lp, fp, ctx.copy_bytes, mom, **held)
    w2, g2, o2 = memory.model_state_bytes(end_p, g["zero"], g["shard"], lp, fp, 0.0, mom, **held)
    w3, g3, o3 = memory.model_state_bytes(expert_p, g["zero"], g["expert_shard"], lp, fp, ctx.copy_bytes, mom, **held)
    opt = o1 + o2 + o3
    opt_params = opt / (2.0 * mom if fp else g["master"] + 2.0 * mom)
    parts = {"weights_bytes": w1 + w2 + w3, "gradients_bytes": g1 + g2 + g3,
             "optimizer_bytes": opt * (1.0 - g["off"]), "logits_bytes": (head + mtp) * g["logits"],
             "moe_dispatch_bytes": np.where(L_m > 0, ctx.act["dispatch"][sidx], 0.0),
             # a stage computing logits gathers the output projection (``row_terms``' ``z3_head``)
             "zero3_buffers_bytes": np.where((head + mtp) > 0, g["z3_head"], g["z3"]) + 0.0 * L_d}
    return {"parts": parts, "tensors": sum(parts.values()),
            "host": g["off"] * opt_params * offload.HOST_OPTIMIZER_BYTES_PER_PARAM,
            "loss_freed": (head + mtp) * g["loss_freed"],
            "params": layer_p + end_p, "layer_params": layer_p, "expert_params": expert_p, "layers": L_d + L_m}
