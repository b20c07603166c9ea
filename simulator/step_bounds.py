"""A lower bound on every row's step time, far cheaper than the step model: what the planner
orders its candidates by, to time exactly only those that can rank (``planners.time_pruning``).

    floor = the largest over the stages k of (``pipeline.bound``'s argument with lesser passes)
                start_k (the least forward chain to k's first position)
                + m x k's work per micro-batch
                + drain_k (the least fused backward chain below it; 0 on the schedules that
                  split a backward and defer its W)
              (every layer recomputed in full on a row that recomputes in full with no count,
              else each layer's recomputation at the cheapest its row could run it; nothing
              offloaded in the chains, each chunk's offloaded layers at their cheaper copies
              in the work)
            + the low-precision weight casts of the pipeline fill
            + the data-parallel traffic no overlap hides (the last bucket, or all of it when the
              stack does not overlap)
            + the optimizer step on the GPU

Every term comes from the step model's own functions (``simulator.step_model``) on the same
inputs, and each is at most its counterpart in ``evaluate``: the pipeline's lower bound
(``pipeline.bound.flush_lower_bound_s``) is the largest over the stages of the same sum with
each cell's own passes, which hold the recomputation and offload this bound leaves out (and
on the split schedules at least it, the drain less the deferred W being >= 0); the exposed
traffic is at least its tail whatever the window it overlaps with; the straggler wait and the
host's optimizer step are never negative. So ``floor <= step_time_lower_s <= step_time_s``
(less ``BOUND_MARGIN`` for sums taken in another order), whatever rows are timed exactly. (Until
2026-12-03 the floor was m x the busiest stage's work alone: on DeepSeek-V3 over 1,024-4,096
H100 its median was 0.76 of the lower bound, a tenth of the rows under 0.37; with the chains
0.997 and 0.80.)
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from cost_models.compute import compute_rates
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from simulator.config_batch import ConfigBatch
from simulator.memory_rows import BOUND_MARGIN, row_terms
from simulator.step_model import (_FULL, _degrees, _dp_after_flush, _layer_times, _optimizer_step_s, _overlapped,
                                  _pipeline_inputs, _shard_groups, _stage_params, _weight_cast_fill_s,
                                  after_flush_tail_shares)
from simulator.stage_cells import distinct_stage_counts

#: per-stage counts the busiest stage's work is linear in: layers, ends, and sends (forward and backward)
_COUNTS = ("stage_dense", "stage_moe", "stage_emb", "stage_head", "stage_mtp", "sends")


def step_time_floor_s(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch,
                      memory_by_part: dict) -> np.ndarray:
    """Per row of ``batch``, seconds no larger than ``evaluate``'s ``step_time_lower_s`` (and so
    than its ``step_time_s``) with the same ``memory_by_part`` (``memory_parts`` of the rows,
    after the memory search when the planner's)."""
    n = len(batch)
    if n == 0:
        return np.zeros(0)
    flush, lay, sp_, rates = _pipeline_floor_s(model, cluster, eff, batch, memory_by_part, any_counts=False)
    dp, tp, pp, cp, ep, etp, vpp = _degrees(batch)
    grad_comm, gather_comm, bucket_share, tied_comm = _dp_after_flush(model, cluster, eff, batch, sp_, rates.act_bytes)
    grad_share, gather_share = after_flush_tail_shares(model, sp_, tp, batch, bucket_share)
    dp_tail = (_overlapped(grad_comm, np.inf, grad_share * grad_comm, batch.overlap_grad_reduce)
               + _overlapped(gather_comm, np.inf, gather_share * gather_comm, batch.overlap_param_gather)
               + tied_comm)
    shard, _, expert_shard = _shard_groups(batch, dp * cp, sp_["edp"])
    optimizer = _optimizer_step_s(cluster, eff, batch, memory_by_part, shard, expert_shard)[0]
    floor = flush + _weight_cast_fill_s(model, batch, lay) + dp_tail + optimizer
    return np.broadcast_to(floor * (1.0 - BOUND_MARGIN), (n,))


def step_time_floor_any_memory_s(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel,
                                 batch: ConfigBatch) -> np.ndarray:
    """Per row of ``batch``, seconds no larger than ``step_time_floor_s`` of the row whatever its
    memory search chooses, computed without the per-stage memory model (``memory_rows.row_terms``
    only): the pipeline flush's floor with every layer's recomputation at the cheapest its row
    could run it (a search may give a fully recomputing row a count), nothing offloaded and no
    data-parallel or ZeRO traffic in the passes (each exposed collective and offload copy is
    >= 0, and ZeRO never changes a layer's compute: the layer times depend on the layer key
    alone), plus the low-precision weight casts of the fill; the data-parallel tail and the
    optimizer step (both >= 0) are left out. The planner orders and screens rows with it before
    running the memory model on them (``planners.vectorized``, ``time_pruning.excluded``)."""
    n = len(batch)
    if n == 0:
        return np.zeros(0)
    no_dp = replace(batch, zero_stage=np.zeros(n, dtype=np.asarray(batch.zero_stage).dtype),
                    grad_reduce_every_microbatch=np.zeros(n, dtype=bool),
                    offload_activation_layers=np.zeros(n, dtype=np.asarray(batch.offload_activation_layers).dtype))
    t = row_terms(model, cluster, eff, no_dp)
    zeros = np.zeros(n)
    memory_by_part = {"_p_dense_layer": t["dense_p"], "_p_moe_layer": t["moe_ne_p"], "_p_expert_layer": t["moe_ex_p"],
                      "_edp": np.broadcast_to(t["edp"], (n,)), "_p_first": zeros, "_p_first_layers": zeros,
                      "_p_first_expert": zeros,
                      "_act_kept_dense": zeros, "_act_kept_moe": zeros}
    flush, lay, _, _ = _pipeline_floor_s(model, cluster, eff, no_dp, memory_by_part, any_counts=True)
    floor = flush + _weight_cast_fill_s(model, no_dp, lay)
    return np.broadcast_to(floor * (1.0 - BOUND_MARGIN), (n,))


def _pipeline_floor_s(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch,
                      memory_by_part: dict, any_counts: bool):
    """(the flush's floor per row (``_flush_floor_s``), the layer times, the stage parameters,
    the rates); ``any_counts``: every layer's recomputation at the cheapest its row could run
    it, whatever the row's counts (else a row that recomputes in full with no count and
    offloads nothing recomputes every layer in full)."""
    n = len(batch)
    rates = compute_rates(cluster.gpu, eff, batch.dtype)
    dp, tp, pp, cp, ep, etp, vpp = _degrees(batch)
    mbs, gbs = np.asarray(batch.micro_batch, dtype=float), np.asarray(batch.global_batch, dtype=float)
    tokens = mbs * float(model.seq_len) / cp
    lay = _layer_times(model, cluster, eff, rates, batch, tokens)
    sp_ = _stage_params(memory_by_part)
    per_layer, ends = _pipeline_inputs(model, cluster, eff, batch, lay, sp_, rates, tokens)

    def row(x):
        return np.broadcast_to(np.asarray(x, dtype=float), (n,))

    # a row that recomputes in full with no count and offloads nothing recomputes every layer
    # in full (``step_pipeline.layer_split_counts``); another, a layer's selected operations or,
    # where its count covers it, the whole layer: at least the lesser
    rc = np.broadcast_to(np.asarray(batch.recompute), (n,))
    every = (rc == _FULL) & (row(batch.recompute_num_layers) == 0) & (row(batch.offload_activation_layers) == 0)
    if any_counts:
        every = np.zeros(n, dtype=bool)

    def recompute(i):
        least = np.where(rc == _FULL, np.minimum(row(per_layer.r_full[i]), row(per_layer.r_sel[i])),
                         np.minimum(row(per_layer.r[i]), row(per_layer.r_sel[i])))
        return np.where(every, row(per_layer.r_full[i]), least)

    r = (recompute(0), recompute(1))

    def layer(i):
        return row(per_layer.f[i]) + row(per_layer.b[i]) + row(per_layer.w[i]) + r[i]

    e = {k: row(getattr(ends, k)) for k in ends.__dataclass_fields__}
    # a send the stack overlaps may hide whole behind the next chunk (``step_pipeline.exposed_sends``)
    e["p2p"] = np.where(e["p2p_overlap"] > 0, 0.0, e["p2p"])
    coef = np.stack([layer(0), layer(1),
                     e["emb_f"] + e["emb_z3_f"] + e["emb_b"] + e["emb_w"] + e["emb_z3_bw"],
                     e["head_f"] + e["head_z3_f"] + e["head_b"] + e["head_w"] + e["head_z3_bw"],
                     e["mtp_f"] + e["mtp_b"] + e["mtp_w"], e["p2p"]], axis=1)
    # the chains before a stage (``pipeline.bound``), per count of ``StageChains``: a cell's
    # forward, then its fused backward (B + W, the layers' recomputation as above)
    chain_s = np.stack([row(per_layer.f[0]), row(per_layer.f[1]), e["emb_f"] + e["emb_z3_f"],
                        e["head_f"] + e["head_z3_f"], e["mtp_f"], e["p2p"]]
                       + [row(per_layer.b[i]) + row(per_layer.w[i]) + r[i] for i in (0, 1)]
                       + [e["emb_b"] + e["emb_w"] + e["emb_z3_bw"], e["head_b"] + e["head_w"] + e["head_z3_bw"],
                          e["mtp_b"] + e["mtp_w"], e["p2p"]], axis=1)
    # an offloaded layer's host copies exposed in forward and backward (the cheaper kind's)
    off = np.where(rc == _FULL, 0.0, row(batch.offload_activation_layers))
    off_cost = np.minimum(row(per_layer.off_f[0]) + row(per_layer.off_b[0]), row(per_layer.off_f[1])
                          + row(per_layer.off_b[1]))
    m = np.rint(gbs / (dp * mbs))
    return _flush_floor_s(model, batch, m, coef, chain_s, off, off_cost), lay, sp_, rates


def _flush_floor_s(model: ModelSpec, batch: ConfigBatch, m, coef: np.ndarray, chain_s: np.ndarray, off,
                   off_cost) -> np.ndarray:
    """Per row, at most ``pipeline.bound.flush_lower_bound_s`` of its flush: over its stages k,
    the largest ``start_k + m work_k (+ drain_k on the fused schedules)``, with ``work_k`` the
    stage's work per micro-batch (DualPipe: half of its two chunks), ``coef`` (rows, ``_COUNTS``)
    seconds per layer, end and send: the layout's per-stage counts times the row's costs, once
    per distinct stage vector; plus, on rows offloading ``off`` layers per chunk (not
    recomputing in full), each chunk's ``min(off, layers - 1)`` offloaded layers
    (``step_pipeline.split_counts``) at ``off_cost`` each; ``start_k + drain_k`` the least over
    the paths of the chains before the stage's first position (``StageChains`` counts times
    ``chain_s``, (rows, 12) seconds per count: each cell's passes less its offload copies, with
    a recomputation no dearer than its row's)."""
    out = np.zeros(len(batch))
    k = len(_COUNTS)
    for rows, per_stage, share, chains in distinct_stage_counts(model, batch, _COUNTS + ("cells",), chains=True):
        work = coef[rows] @ per_stage[:, :k].T                              # (rows, distinct stages)
        busy = off[rows] > 0
        if busy.any():
            r = rows[busy]
            cells = np.maximum(per_stage[:, k:] - 1.0, 0.0)                   # (stages, chunks)
            offloaded = np.minimum(off[r][:, None, None], cells[None]).sum(axis=2)
            work[busy] += offloaded * off_cost[r][:, None]
        if len(per_stage) == 1 and len(chains.stage) == 1 and not chains.chains.any():
            out[rows] = m[rows] * share * work[:, 0]
            continue
        per_count = chain_s[rows]
        fill = per_count @ chains.chains[0].T                                 # (rows, stages)
        for c in chains.chains[1:]:
            np.minimum(fill, per_count @ c.T, out=fill)
        fill += (m[rows] * share)[:, None] * work[:, chains.stage]
        out[rows] = fill.max(axis=1)
    return out
