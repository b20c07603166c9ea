"""Candidate replica groups as pipeline segments, laid out into the stage blocks ``compose`` scores.

A candidate group is a pipeline of up to two segments, each ``stages`` stages of one pool with
one layer key (tensor-parallel degree, micro-batch, recomputation, sequence parallelism). Each
segment has three classes of stages (its first, its middle ones, its last), which differ in the
sends they make and in the embedding / LM head they may hold. ``hetero_split.split_layers``
gives every class its layers (the least slowest stage, within each pool's memory), and each
class becomes one or two stage blocks (layer counts differing by one) in pipeline order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cost_models import pool_links
from cost_models.compute import activation_bytes
from hardware_specs.pools import PooledCluster
from model_specs.model_spec import ModelSpec
from cost_models.topology import pipeline_exchange_transfers
from planners.hetero_refine import refine_split
from planners.hetero_split import split_feasible, split_layers
from simulator.heterogeneous.compose import (Groups, StageBlocks, boundary_p2p_s, in_flight_microbatches,
                                             layer_activation_bytes, pass_windows_s, pool_reserved_bytes,
                                             stage_accumulation_s, stage_memory_parts, stage_param_count)
from simulator.heterogeneous.unit_costs import UnitCosts
from simulator.parallel_config import ParallelConfig


@dataclass(frozen=True)
class Pipelines:
    """Candidate replica groups, (C,) and (C, S) arrays.

    Attributes:
        plan: the candidate plan each group belongs to (0..P-1, groups of a plan contiguous).
        replicas: replicas of the group; micro_batches: per replica (NaN: from the shares).
        seg_pool, seg_key, seg_tp, seg_stages: per segment (S columns, in pipeline order; a
            segment with 0 stages is unused and only trailing ones may be).
    """

    plan: np.ndarray
    replicas: np.ndarray
    micro_batches: np.ndarray
    seg_pool: np.ndarray
    seg_key: np.ndarray
    seg_tp: np.ndarray
    seg_stages: np.ndarray

    def __len__(self) -> int:
        return int(len(self.plan))


@dataclass(frozen=True)
class Layout:
    """The stage blocks and groups of the candidates that have a split, and what was dropped."""

    blocks: StageBlocks
    groups: Groups
    plan_ok: np.ndarray          # (P,) every group of the plan has a split within memory
    slowest_s: np.ndarray        # (C,) slowest stage per micro-batch (inf: no split)


def _classes(p: Pipelines):
    """(C, 3S) class arrays: segment index, multiplicity, position, first/last flags, neighbours."""
    C, S = p.seg_stages.shape
    k = p.seg_stages.astype(np.int64)
    offset = np.concatenate([np.zeros((C, 1), dtype=np.int64), np.cumsum(k, axis=1)[:, :-1]], axis=1)
    n_seg = (k > 0).sum(axis=1)
    seg = np.repeat(np.arange(S), 3)[None, :].repeat(C, axis=0)
    kind = np.tile(np.arange(3), S)[None, :].repeat(C, axis=0)          # 0 head, 1 middle, 2 tail
    ks = k[:, seg[0]]
    mult = np.where(kind == 0, (ks >= 1), np.where(kind == 1, np.maximum(ks - 2, 0), (ks >= 2))).astype(np.int64)
    pos = offset[:, seg[0]] + np.where(kind == 0, 0, np.where(kind == 1, 1, ks - 1))
    last_seg = (seg == (n_seg[:, None] - 1))
    first = (seg == 0) & (kind == 0)
    last = last_seg & (((kind == 2) & (ks >= 2)) | ((kind == 0) & (ks == 1)))
    pool = p.seg_pool[:, seg[0]]
    tp = p.seg_tp[:, seg[0]]
    # neighbours: inside a segment its own pool and degree; at its ends the next / previous segment
    nxt_seg = np.minimum(seg + 1, S - 1)
    prv_seg = np.maximum(seg - 1, 0)
    has_next_seg = (seg + 1 < n_seg[:, None])
    has_prev_seg = seg > 0
    rows = np.arange(C)[:, None]
    next_pool = np.where((kind == 1) | ((kind == 0) & (ks >= 2)), pool,
                         np.where(has_next_seg, p.seg_pool[rows, nxt_seg], -1))
    next_tp = np.where((kind == 1) | ((kind == 0) & (ks >= 2)), tp, np.where(has_next_seg, p.seg_tp[rows, nxt_seg], 1))
    prev_pool = np.where(kind >= 1, pool, np.where(has_prev_seg, p.seg_pool[rows, prv_seg], -1))
    prev_tp = np.where(kind >= 1, tp, np.where(has_prev_seg, p.seg_tp[rows, prv_seg], 1))
    key = p.seg_key[:, seg[0]]
    return dict(mult=mult, pos=pos, first=first, last=last, pool=pool, tp=tp, key=key,
                next_pool=next_pool, next_tp=next_tp, prev_pool=prev_pool, prev_tp=prev_tp)


def _memory_caps(model: ModelSpec, cluster: PooledCluster, settings: ParallelConfig, units: UnitCosts,
                 p: Pipelines, cl, zero_of_plan, memory_limit_bytes) -> np.ndarray:
    """(C, 3S) the most layers each class's stages hold within their pool's memory limit (0 for
    unused classes, and for those whose stages cannot hold one layer), at most the model's
    layers: ``_exact_caps`` of the stage memory ``compose`` prices (``stage_memory_parts``)."""
    used = cl["mult"] > 0
    mem = _class_bytes(model, cluster, settings, units, p, cl, zero_of_plan)
    limit = np.asarray(memory_limit_bytes, dtype=float)[np.where(used, cl["pool"], 0)]
    return np.where(used, _exact_caps(mem, limit, model.num_layers), 0.0)


def _class_bytes(model: ModelSpec, cluster: PooledCluster, settings: ParallelConfig, units: UnitCosts,
                 p: Pipelines, cl, zero_of_plan):
    """The bytes per GPU of each class's stages as a function of their layers (a number or a
    (C, 3S) array; ``_stage_bytes``), with ``pp`` micro-batches per replica where the shares
    set them."""
    C = len(p)
    P = int(p.plan.max()) + 1 if C else 0
    K = cl["mult"].shape[1]
    used = cl["mult"] > 0
    pp = p.seg_stages.sum(axis=1)
    D = np.bincount(p.plan, weights=p.replicas.astype(float), minlength=P)
    key = np.where(used, cl["key"], 0)
    pool = np.where(used, cl["pool"], 0)
    tp = np.where(used, cl["tp"], 1).astype(float)
    mbs = units.micro_batch[key].astype(float)
    first, last = cl["first"] & used, cl["last"] & used
    pp_b = np.broadcast_to(pp[:, None], (C, K))
    m_est = np.where(np.isnan(p.micro_batches), pp, p.micro_batches)[:, None]
    in_flight = in_flight_microbatches(settings, m_est, pp_b, cl["pos"])
    zero = np.broadcast_to(np.asarray(zero_of_plan)[p.plan][:, None], (C, K))
    Dg = np.broadcast_to(D[p.plan][:, None], (C, K))
    rc = units.recompute[key]
    layer_act, full_act = layer_activation_bytes(model, settings, units)
    layer_act, full_act = layer_act[key], full_act[key]

    reserved = pool_reserved_bytes(cluster, pool)

    def mem(nl):
        return _stage_bytes(model, settings, nl, first, last, pp_b, tp, zero, Dg, mbs, rc, layer_act, full_act,
                            in_flight, reserved)

    return mem


def _affine_from_one(m1, m2):
    """The line through a stage's bytes at 1 and 2 layers: (bytes at 0 layers on it, bytes per
    layer). A stage's memory is affine in its layers from 1 layer on, not from 0: its first
    layer also brings the one-time recomputation buffer (``stage_memory_parts``: ``full_act -
    layer_act``, nothing at 0 layers), so the line through 0 and 1 layers is too steep."""
    per_layer = m2 - m1
    return m1 - per_layer, per_layer


def _exact_caps(mem, limit, num_layers: int) -> np.ndarray:
    """The most layers n in 0..``num_layers`` with ``mem(n) <= limit`` (0: not even one), per
    element; ``mem(n)`` is bytes at n layers (vectorised, non-decreasing in n). The line of
    ``_affine_from_one`` gives n, then n is checked against ``mem`` at n and n + 1; where either
    check fails (a non-linearity or rounding), a bisection on ``mem`` over 0..``num_layers``
    replaces it, so the cap is exact for ``mem`` whatever its shape."""
    L = float(num_layers)
    limit = np.asarray(limit, dtype=float)
    at_zero, per_layer = _affine_from_one(mem(1.0), mem(2.0))
    n = np.clip(np.floor(_layers_within(limit - at_zero, per_layer)), 0.0, L)
    n = np.where(np.isnan(n), 0.0, n)
    fits_n = (n == 0) | (mem(n) <= limit)
    over_next = (n == L) | (mem(np.minimum(n + 1, L)) > limit)
    bad = ~(fits_n & over_next)
    # invariant: lo fits (or is 0), hi does not (or is L + 1); rows already checked are settled
    lo = np.where(bad, 0.0, n)
    hi = np.where(bad, L + 1, n + 1)
    while (hi - lo > 1).any():
        mid = np.floor((lo + hi) / 2)
        ok = mem(np.minimum(mid, L)) <= limit
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return lo


def _stage_bytes(model: ModelSpec, settings: ParallelConfig, layers, first, last, pp, tp, zero, dp_shard, micro_batch,
                 recompute, layer_act, full_act, in_flight, reserved) -> np.ndarray:
    """Bytes per GPU of stages holding ``layers`` layers (``stage_memory_parts`` of their
    parameters): the one memory model of ``_memory_caps`` and ``layer_cap_bound``, so the bound
    ``might_fit`` takes stays below the caps ``fits_memory`` checks."""
    prm = stage_param_count(model, layers, first, last, pp, tp)
    return stage_memory_parts(model, settings, prm, zero, dp_shard, tp, micro_batch, recompute, layer_act, full_act,
                              layers, in_flight, last, reserved)["memory_bytes"]


def _layers_within(free_bytes, layer_bytes) -> np.ndarray:
    """The layers ``free_bytes`` hold at ``layer_bytes`` each, before the floor (``free_bytes``
    measured from the stage's bytes at 0 layers on its ``_affine_from_one`` line; a layer of no
    bytes counts 1e-9 B, so the count is finite)."""
    return free_bytes / np.maximum(layer_bytes, 1e-9)


@dataclass(frozen=True)
class CapBound:
    """Per layer key, (K,) bytes: what a stage of it has left for its layers at its lightest
    (``free_bytes``), and what each layer takes with one micro-batch in flight (``layer_bytes``)
    and per further micro-batch in flight (``in_flight_bytes``)."""

    free_bytes: np.ndarray
    layer_bytes: np.ndarray
    in_flight_bytes: np.ndarray

    def layers(self, key, in_flight=1.0) -> np.ndarray:
        """The most layers a stage of ``key`` holds with ``in_flight`` micro-batches, before the floor."""
        per_layer = self.layer_bytes[key] + (np.asarray(in_flight, dtype=float) - 1.0) * self.in_flight_bytes[key]
        return _layers_within(self.free_bytes[key], per_layer)


def layer_cap_bound(model: ModelSpec, cluster: PooledCluster, settings: ParallelConfig, units: UnitCosts,
                    zero_stage: int, dp_shard: float, memory_limit_bytes) -> CapBound:
    """Per layer key, an upper bound on the layers one stage of it holds within its pool's
    memory limit (``_memory_caps``' cap before its floor, on the ``_affine_from_one`` line: the
    stage's bytes are affine in its layers from one layer on), by micro-batches in flight: the stage
    at its lightest otherwise, with no embedding or LM head and its optimizer states sharded by
    ZeRO ``zero_stage`` over ``dp_shard`` replicas (at least a plan's). A stage's memory only
    grows with each of those, so a pipeline whose stages of a key cannot hold its layers at
    this bound fits no way (``might_fit``)."""
    tp = units.tp.astype(float)
    mbs = units.micro_batch.astype(float)
    layer_act, full_act = layer_activation_bytes(model, settings, units)
    reserved = pool_reserved_bytes(cluster, units.pool)
    none = np.zeros(len(units), dtype=bool)

    def mem(nl, in_flight):
        return _stage_bytes(model, settings, nl, 0.0, none, 1.0, tp, zero_stage, dp_shard, mbs, units.recompute,
                            layer_act, full_act, in_flight, reserved)

    m1, m2, m1_twice = mem(1.0, 1.0), mem(2.0, 1.0), mem(1.0, 2.0)
    at_zero, per_layer = _affine_from_one(m1, m2)
    limit = np.asarray(memory_limit_bytes, dtype=float)[units.pool]
    return CapBound(free_bytes=limit - at_zero, layer_bytes=per_layer,
                    in_flight_bytes=np.maximum(m1_twice - m1, 0.0))


def might_fit(p: Pipelines, bound: CapBound, settings: ParallelConfig, num_layers: int) -> np.ndarray:
    """(P,) False for the plans ``fits_memory`` rejects for certain: a group with a segment whose
    stages cannot hold a layer at ``bound``, or whose segments cannot hold the ``num_layers``
    layers. Each segment's stages are bounded at the micro-batches its last stage holds in
    flight (``in_flight_microbatches``: the fewest of the segment's), the ``_memory_caps``
    estimate of the micro-batches; a margin of 1e-9 layers covers rounding."""
    used = p.seg_stages > 0
    pp = p.seg_stages.sum(axis=1)
    last_pos = np.cumsum(p.seg_stages, axis=1) - 1
    m_est = np.where(np.isnan(p.micro_batches), pp, p.micro_batches)
    in_flight = in_flight_microbatches(settings, m_est[:, None], pp[:, None], last_pos)
    cap = np.where(used, bound.layers(p.seg_key, in_flight), np.inf)
    room = np.where(used, p.seg_stages * np.minimum(cap, num_layers), 0.0).sum(axis=1)
    ok = np.all(cap >= 1.0 - 1e-9, axis=1) & (room >= num_layers - 1e-9)
    P = int(p.plan.max()) + 1 if len(p) else 0
    return np.bincount(p.plan, weights=~ok, minlength=P) == 0


def fits_memory(model: ModelSpec, cluster: PooledCluster, settings: ParallelConfig, units: UnitCosts,
                p: Pipelines, zero_of_plan, memory_limit_bytes) -> np.ndarray:
    """(P,) whether every group of a plan has a split within memory: ``lay_out``'s ``plan_ok``,
    without the times and the split."""
    cl = _classes(p)
    cap = _memory_caps(model, cluster, settings, units, p, cl, zero_of_plan, memory_limit_bytes)
    ok = split_feasible(cl["mult"], cap, model.num_layers)
    P = int(p.plan.max()) + 1 if len(p) else 0
    return np.bincount(p.plan, weights=~ok, minlength=P) == 0


def _refined(model: ModelSpec, cluster: PooledCluster, effs, settings: ParallelConfig, units: UnitCosts, p: Pipelines,
             cl, split, cap, tau, extra, key, tp, sends, top: int):
    """``hetero_refine.refine_split`` of ``split``, with each class's forward and backward
    windows as ``compose`` prices them (``pass_windows_s``: linear in the stage's layers)."""
    used = cl["mult"] > 0
    first, last = cl["first"] & used, cl["last"] & used
    to_prev, to_next = sends
    ends = first * units["embedding_s"][key] + last * units["head_s"][key]
    ends_b = first * units["embedding_bwd_s"][key] + last * units["head_bwd_s"][key]
    hbm_bw = np.array([q.cluster.gpu.hbm_bw_bytes_per_s for q in cluster.pools])[np.where(used, cl["pool"], 0)]
    overhead = np.array([e.kernel_overhead_s for e in effs])[np.where(used, cl["pool"], 0)]

    def windows(n):
        acc = stage_accumulation_s(model, settings, np.full(tp.shape, n), first, last, tp, hbm_bw, overhead)
        return pass_windows_s(n, units["fwd_s"][key], units["bwd_s"][key], units["w_s"][key], ends, ends_b, acc,
                              to_prev, to_next)

    (f0, b0), (fa, ba) = windows(0.0), windows(1.0)
    pp = p.seg_stages.sum(axis=1)
    return refine_split(settings.schedule, split, cl["mult"], cl["pos"], cap, fa - f0, f0, ba - b0, b0,
                        units["weight_cast_s"][key], pp, p.micro_batches, tau, extra, top)


def lay_out(model: ModelSpec, cluster: PooledCluster, effs, settings: ParallelConfig, units: UnitCosts,
            p: Pipelines, zero_of_plan, memory_limit_bytes, ring_mask_of_plan=None,
            refine: int | None = None) -> Layout:
    """Split every candidate group's layers and return the stage blocks ``compose`` takes.

    ``zero_of_plan``: (P,) ZeRO stage; ``memory_limit_bytes``: (pools,) usable bytes per GPU;
    ``ring_mask_of_plan``: (P, pools) pools the data-parallel rings of a plan cross (None: each
    row's own pool). ``refine``: move the min-max split of the candidates that can rank among the
    ``refine`` fastest to its neighbour of least pipeline makespan (``hetero_refine``; for the
    splits that are scored, not for estimates; None: no move).
    """
    C = len(p)
    P = int(p.plan.max()) + 1 if C else 0
    cl = _classes(p)
    K = cl["mult"].shape[1]
    used = cl["mult"] > 0
    pp = p.seg_stages.sum(axis=1)
    d = p.replicas.astype(float)
    dtype = settings.dtype
    act_bytes = activation_bytes(dtype)
    key = np.where(used, cl["key"], 0)
    u = {name: units[name][key] for name in ("fwd_s", "bwd_s", "w_s", "head_s", "embedding_s")}
    pool = np.where(used, cl["pool"], 0)
    tp = np.where(used, cl["tp"], 1).astype(float)
    mbs = units.micro_batch[key].astype(float)
    tokens = mbs * float(model.seq_len)
    h = float(model.hidden_size)
    # sends: the boundary function compose uses, with the same stride
    _, lat_m = pool_links.path_matrix(cluster, effs)
    sides = pool_links.side_bandwidths(cluster, effs)
    stride = d[:, None] * tp
    # the group's stages on each class's pool, as compose counts them
    stages_on_pool = ((p.seg_pool[:, None, :] == pool[:, :, None]) * p.seg_stages[:, None, :]).sum(axis=2)
    flat = lambda a: np.asarray(a).reshape(-1)  # noqa: E731
    p2p = np.zeros(C * K)
    sends = []
    for other_pool, other_tp in ((cl["prev_pool"], cl["prev_tp"]), (cl["next_pool"], cl["next_tp"])):
        op = np.where(used, other_pool, -1)
        args = (cluster, effs, sides, lat_m, flat(pool), flat(tp), flat(op), flat(other_tp), flat(tokens), h, act_bytes,
                flat(stride), flat(stages_on_pool), flat(np.asarray(units.sequence_parallel, dtype=bool)[key]),
                settings.pipeline_scatter_gather)
        one = boundary_p2p_s(*args)
        p2p += one
        if refine is not None:      # the sends as compose prices them (a blocking exchange sends twice)
            transfers = pipeline_exchange_transfers(settings.pipe_exchange_blocking)
            sends.append((one if transfers == 1.0 else boundary_p2p_s(*args, transfers)).reshape(C, K))
    p2p = p2p.reshape(C, K)
    first, last = cl["first"] & used, cl["last"] & used
    # time of a stage with n layers: extra + n tau (unfused gradient accumulation is linear in n)
    tau = u["fwd_s"] + u["bwd_s"] + u["w_s"]
    extra = p2p + first * u["embedding_s"] + last * u["head_s"]
    if not settings.grad_accumulation_fusion:     # compose's, linear in the layers
        hbm_bw = np.array([q.cluster.gpu.hbm_bw_bytes_per_s for q in cluster.pools])[pool]
        overhead = np.array([e.kernel_overhead_s for e in effs])[pool]
        a0 = stage_accumulation_s(model, settings, np.zeros(tp.shape), first, last, tp, hbm_bw, overhead)
        a1 = stage_accumulation_s(model, settings, np.ones(tp.shape), first, last, tp, hbm_bw, overhead)
        tau = tau + (a1 - a0)
        extra = extra + a0
    cap = _memory_caps(model, cluster, settings, units, p, cl, zero_of_plan, memory_limit_bytes)
    split = split_layers(cl["mult"], tau, extra, cap, model.num_layers)
    if refine is not None:
        split = _refined(model, cluster, effs, settings, units, p, cl, split, cap, tau, extra, key, tp, sends,
                         int(refine))
    ok = split.feasible
    plan_ok = np.bincount(p.plan, weights=~ok, minlength=P) == 0

    # blocks: each used class as (hi, lo) sub-blocks, in pipeline order
    counts = np.stack([split.count_hi, split.count_lo], axis=2)                  # (C, K, 2)
    layers = np.stack([split.layers_hi, split.layers_hi - 1], axis=2)
    pos = np.stack([cl["pos"], cl["pos"] + split.count_hi], axis=2)
    keep = (counts > 0) & ok[:, None, None] & plan_ok[p.plan][:, None, None]
    gi, ci, si = np.nonzero(keep)
    kept_groups = np.flatnonzero(ok & plan_ok[p.plan])
    new_group = np.full(C, -1)
    new_group[kept_groups] = np.arange(len(kept_groups))
    kept_plans = np.flatnonzero(plan_ok)
    new_plan = np.full(P, -1)
    new_plan[kept_plans] = np.arange(len(kept_plans))
    pick = lambda a: np.asarray(a)[gi, ci]  # noqa: E731
    ring = None
    if ring_mask_of_plan is not None:
        ring = np.asarray(ring_mask_of_plan, dtype=bool)[p.plan[gi]]
    blocks = StageBlocks(
        group=new_group[gi], key=pick(cl["key"]), layers=layers[gi, ci, si], count=counts[gi, ci, si],
        position=pos[gi, ci, si], first=pick(first), last=pick(last), prev_pool=pick(cl["prev_pool"]),
        next_pool=pick(cl["next_pool"]), prev_tp=pick(cl["prev_tp"]), next_tp=pick(cl["next_tp"]), ring_pools=ring)
    groups = Groups(plan=new_plan[p.plan[kept_groups]], replicas=p.replicas[kept_groups],
                    stages=pp[kept_groups], micro_batches=p.micro_batches[kept_groups])
    return Layout(blocks=blocks, groups=groups, plan_ok=plan_ok, slowest_s=split.slowest_s)
