"""Where a communication group sits on the cluster, and the collective times that follows.

A group that spans scale-up domains uses every NIC its members have there: NCCL builds one ring
(channel) per NIC of a node and splits the buffer over them, so a group with ``n_intra`` members
per node crosses node boundaries at ``n_intra`` NICs' bandwidth (capped by NVLink). NCCL's tuner
picks, per call, the algorithm its model predicts fastest for the message size and group shape;
so does ``group_collective_time_s`` with ``algorithm="auto"`` (the default). All-reduce has two:
the ring (bandwidth-optimal, ``2(n-1)`` latency steps) and the tree (a chain inside the node,
double binary trees across nodes: ``2 log2`` steps; Sanders et al. 2009, NCCL 2.4), so the tree
wins small messages on many nodes. Every ring call runs on NCCL's fastest protocol for its size
(``cost_models.nccl_protocols``: LL / LL128 / Simple, each with its per-call base latency, hop
latency and share of the bandwidth). All-gather and reduce-scatter are rings only (NCCL's
``ncclAllGather`` / ``ncclReduceScatter`` have no tree), so each call pays ``n - 1`` start-up
steps however small it is: the ``n_inter - 1`` that cross nodes at the NIC's latency, the others
at the scale-up link's (``ring_step_latency_s``). Groups inside one domain use the scale-up link.

Ranks are numbered with tensor parallelism fastest, then context, data, pipeline (Megatron's
default order ``tp-cp-dp-pp``). A group of ``group_size`` ranks whose members are ``stride``
ranks apart has ``n_intra`` members inside one scale-up domain and spans ``n_inter`` domains.
The fast tier is the scale-up link (NVLink); the slow tier is each GPU's own NIC (rail-
optimised fabrics give every GPU its own path), divided by the fabric's oversubscription.
Achieved bandwidth = link bandwidth x the generation's fitted fraction x the collective kind's
fraction (``EfficiencyModel.collective_bw_fraction``, 1 unless a calibration measured less),
and across nodes at most what one communicator was measured to reach on the fabric, where the
cluster file states it (``communicator_bus_bw``).
"""
from __future__ import annotations

from functools import partial

import numpy as np

from cost_models import collectives as coll
from cost_models.distinct import once_per_distinct
from cost_models import nccl_protocols
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel


def group_span(group_size, stride, gpus_per_node):
    """(n_intra, n_inter): members per scale-up domain and domains spanned, as float arrays."""
    group_size = np.asarray(group_size, dtype=float)
    stride = np.asarray(stride, dtype=float)
    per_node = np.floor(gpus_per_node / np.maximum(stride, 1.0))
    n_intra = np.minimum(np.maximum(per_node, 1.0), group_size)     # clip, without its overhead
    n_inter = np.ceil(group_size / n_intra)
    return n_intra, n_inter


def tp_tiles_node(gpus_per_node, tp, world=None):
    """Whether tensor-parallel groups of ``tp`` consecutive ranks (Megatron numbers tp fastest)
    tile the scale-up domains of ``gpus_per_node`` GPUs (numpy-friendly): ``tp`` divides the
    domain, so every group sits inside one, or is a multiple of it, so every group holds whole
    ones; with ``world`` (the job's GPU count) at most one domain, any ``tp`` does. Only then is
    every group priced as it runs: ``group_span`` gives one (n_intra, n_inter) to all the groups.
    Two 6-GPU nodes hold two groups of 4, not three (ranks 4-7 span both); a group of 8 on them
    holds 6 + 2 GPUs, not two NICs' worth of 6."""
    g, t = np.asarray(gpus_per_node), np.asarray(tp)
    tiles = (g % t == 0) | (t % g == 0)
    return tiles if world is None else tiles | (np.asarray(world) <= g)


def group_blocks(tp, cp, dp, ep=1, etp=1, zero_shard_group=0):
    """The communication groups of a layout as (name, block) pairs, ``block`` being the run of
    consecutive ranks one group of that kind fills (numpy-friendly).

    Ranks are numbered with tensor parallelism fastest, then context, data, pipeline (Megatron's
    ``tp-cp-dp-pp``; ``RankGenerator(order="tp-cp-ep-dp-pp")`` with ep folded into dp), and the
    experts' grid ``tp-ep-dp-pp`` with expert tensor parallelism fastest
    (NVIDIA/Megatron-LM@d98e8a64 megatron/core/parallel_state.py ``initialize_model_parallel``).
    So a group of ``size`` members ``stride`` ranks apart fills a block of ``size * stride``
    consecutive ranks: tp (tp), etp (etp), the expert-parallel group (ep x etp), the context-
    parallel ring (tp x cp), the ZeRO shard group of hybrid sharding (tp x zero_shard_group; its
    expert counterpart fills the same run), and the data-parallel group, which the plain ZeRO
    shard group, the HSDP replica group and the expert-data-parallel group fill too (tp x cp x dp).
    """
    tp, cp, dp = np.asarray(tp), np.asarray(cp), np.asarray(dp)
    ep, etp, zsg = np.asarray(ep), np.asarray(etp), np.asarray(zero_shard_group)
    return (("tp", tp), ("etp", etp), ("ep", ep * etp), ("cp", tp * cp),
            ("zero_shard_group", np.where(zsg > 0, tp * zsg, tp)), ("dp", tp * cp * dp))


def group_tiling(gpus_per_node, world, tp, cp, dp, ep=1, etp=1, zero_shard_group=0):
    """Each communication group of the layout as (name, block, tiles), in ``group_blocks``'
    order: ``tiles`` is ``tp_tiles_node`` of its block (numpy-friendly). ``groups_tile_node`` is
    all of them; ``validate_config.check_cluster`` names the first that does not tile."""
    return tuple((name, block, tp_tiles_node(gpus_per_node, block, world))
                 for name, block in group_blocks(tp, cp, dp, ep, etp, zero_shard_group))


def groups_tile_node(gpus_per_node, world, tp, cp, dp, ep=1, etp=1, zero_shard_group=0):
    """Whether every communication group of the layout tiles the scale-up domains
    (``group_tiling``: ``tp_tiles_node`` for each block of ``group_blocks``), numpy-friendly:
    each group then sits inside one domain or holds the same members in each of the domains it
    spans, which is the one shape ``group_span`` gives all of them. A job on one domain tiles it
    whatever its groups. The one rule ``check_cluster`` and the planner's ``scaleup`` rule apply.

    A group that straddles a domain boundary runs at the pace of its worst-placed member set:
    16 expert-parallel ranks 64-79 of 144 GPUs on NVL72 racks hold 8 GPUs in each of two racks,
    an all-to-all whose NIC half ``group_span`` (16 on one NVLink) would not price."""
    ok = np.asarray(True)
    for _, _, tiles in group_tiling(gpus_per_node, world, tp, cp, dp, ep, etp, zero_shard_group):
        ok = ok & tiles
    return ok


def tier_bandwidths(cluster: ClusterSpec, eff: EfficiencyModel, n_intra=None, stride=1.0):
    """Achieved (bw_intra, lat_intra, bw_inter, lat_inter) in bytes/s and seconds.

    ``n_intra``: the group's members inside one scale-up domain, ``stride`` ranks apart
    (numpy-friendly); on a full-mesh scale-up tier they reach each other over ``n_intra - 1``
    peers' links only, on a torus (TPU ICI) over the links of the axes they span
    (``NetworkTier.group_bw_bytes_per_s``). None = the whole domain (the tier's per-GPU bandwidth)."""
    link = (cluster.scaleup.bw_bytes_per_s if n_intra is None
            else cluster.scaleup.group_bw_bytes_per_s(n_intra, stride))
    bw_intra = link * eff.scaleup_fraction
    bw_inter = cluster.scaleout.bw_bytes_per_s * eff.scaleout_fraction / cluster.oversubscription
    return bw_intra, cluster.scaleup.latency_s, bw_inter, cluster.scaleout.latency_s


def communicator_bus_bw(cluster: ClusterSpec, kind_fraction=1.0) -> float:
    """The most bus bandwidth one communicator's ring reaches across nodes, bytes/s: the
    fabric's measured ``communicator_bus_bw_bytes_per_s`` (times the collective kind's fraction),
    else unbounded (inf: the NICs and the generation's scale-out fraction bound it).

    Where NCCL's transport reaches less than the links: on Jean Zay's Omni-Path (NCCL 2.10.3 over
    the hfi1 verbs, 2 channels) a 4 GB fp32 all-reduce over 32 ranks on 4 nodes took 1.53 s,
    5.07 GB/s of bus bandwidth against the 50 GB/s of a node's four 100 Gb/s links
    (hardware_specs/clusters/jean-zay-a100.yaml)."""
    cap = cluster.scaleout.communicator_bus_bw_bytes_per_s
    return float("inf") if cap is None else cap * kind_fraction


def ring_step_latency_s(group_size, n_inter, lat_intra, lat_inter):
    """Mean start-up per step of a flat ring over ``group_size`` ranks on ``n_inter`` nodes, seconds.

    Of an all-gather's n - 1 steps, n_inter - 1 cross a node boundary at the scale-out latency
    and the other n - n_inter stay on the scale-up link: NCCL's own cost model
    (NVIDIA/nccl@v2.8.4-1 src/graph/tuning.cc ``ncclTopoTuneModel``: ring latency
    ``(nsteps - nInterSteps) * intraLat + nInterSteps * interLat`` with ``nInterSteps =
    nNodes - 1``, twice both for all-reduce). 1,536 ranks on 192 nodes: 1,344 NVLink steps and
    191 network steps, (1,344 x 3 + 191 x 5) / 1,535 = 3.25 us a step on a DGX A100 cluster.
    """
    n = np.maximum(np.asarray(group_size, dtype=float), 2.0)
    n_inter = np.minimum(np.maximum(np.asarray(n_inter, dtype=float), 1.0), n)
    return ((n - n_inter) * lat_intra + (n_inter - 1.0) * lat_inter) / (n - 1.0)


_FLAT = {
    "all_reduce": coll.ring_allreduce_time_s,
    "reduce_scatter": coll.reduce_scatter_time_s,
    "all_gather": coll.all_gather_time_s,
    "all_to_all": coll.all_to_all_time_s,
}

_HIER = {
    "all_reduce": coll.hierarchical_allreduce_time_s,
    "reduce_scatter": coll.hierarchical_reduce_scatter_time_s,
    "all_gather": coll.hierarchical_all_gather_time_s,
    "all_to_all": coll.hierarchical_all_to_all_time_s,
}


def group_collective_time_s(kind: str, bytes_, group_size, stride, cluster: ClusterSpec,
                            eff: EfficiencyModel, algorithm: str = "auto"):
    """Time of collective ``kind`` over a group placed by (size, stride) on ``cluster``, seconds.

    ``kind`` is one of all_reduce, reduce_scatter, all_gather, all_to_all; ``bytes_`` as the
    matching function in ``cost_models.collectives`` defines it. ``algorithm``: ``auto`` (as
    NCCL's tuner picks: the faster of ring and tree for all-reduce, the ring otherwise),
    ``ring`` (flat ring; across domains each node's members drive their own NICs in parallel
    channels), ``tree`` (all-reduce only: a chain inside the domain pipelined with double
    binary trees across domains, ``_tree_protocol_envelope_s``) or ``hierarchical`` (the same split
    with a ring across: a what-if, not an NCCL algorithm). All-to-all always splits its traffic
    between the tiers, the NVLink and NIC parts running at once.

    Elementwise in ``bytes_``, ``group_size`` and ``stride``: a planner's batch is computed once
    per distinct triple (``distinct.once_per_distinct``; the same numbers).
    """
    if _no_peer_anywhere(kind, bytes_, group_size, algorithm):
        # every group is one rank: the formula's answer is its final ``np.where(group_size > 1,
        # t, 0.0)``, zeros of the broadcast shape, without computing t (about half of a small
        # configuration's collective calls: dp, cp or tp of 1)
        return np.zeros(np.broadcast(np.asarray(bytes_), np.asarray(group_size), np.asarray(stride)).shape)
    return once_per_distinct(partial(_group_collective_time_s, kind, cluster=cluster, eff=eff, algorithm=algorithm),
                             bytes_, group_size, stride)


def _no_peer_anywhere(kind: str, bytes_, group_size, algorithm: str) -> bool:
    """Whether ``_group_collective_time_s`` is 0.0 on every element without computing it: every
    group size exactly 1 (0 or NaN keep the full computation, and the warnings it prints), finite
    float64 or whole byte counts (the float64 result the full computation returns, and no
    overflow warning skipped), and an algorithm it accepts for ``kind`` (an unknown one still
    raises there)."""
    known = kind in _FLAT and (kind == "all_to_all" or algorithm in ("auto", "ring", "hierarchical")
                               or (algorithm == "tree" and kind == "all_reduce"))
    if not known:
        return False
    size = np.asarray(bytes_)
    if not (size.dtype.kind in "iub" or size.dtype == np.float64):
        return False
    return bool(np.all(np.asarray(group_size) == 1)) and bool(np.isfinite(size).all())


def _group_collective_time_s(kind: str, bytes_, group_size, stride, cluster: ClusterSpec,
                             eff: EfficiencyModel, algorithm: str = "auto"):
    """``group_collective_time_s`` computed on every element."""
    n_intra, n_inter = group_span(group_size, stride, cluster.gpus_per_node)
    bw_i, lat_i, bw_o, lat_o = tier_bandwidths(cluster, eff, n_intra, stride)
    kind_fraction = eff.collective_fraction(kind)
    bw_i, bw_o = bw_i * kind_fraction, bw_o * kind_fraction
    if kind == "all_to_all":
        t = _HIER[kind](bytes_, n_intra, n_inter, bw_i, lat_i, bw_o, lat_o)
        return np.where(np.asarray(group_size) > 1, t, 0.0)
    spans = n_inter > 1
    # a flat ring across domains: the cross-node hop of every channel is one member's NIC, and a
    # node's n_intra members cross in parallel on their own NICs, up to what one communicator
    # was measured to reach on this fabric (``communicator_bus_bw``)
    cap = communicator_bus_bw(cluster, kind_fraction)
    ring_bw = np.where(spans, np.minimum(np.minimum(bw_i, n_intra * bw_o), cap), bw_i)
    # the n_intra trees (or rings, ``hierarchical``) a communicator runs across nodes, one per
    # member's NIC, share that cap
    bw_o_each = np.minimum(bw_o, cap / np.maximum(n_intra, 1.0))
    times = []
    ring = _ring_protocol_envelope_s(kind, bytes_, group_size, n_intra, n_inter, spans, ring_bw, lat_i, lat_o,
                                     cluster.gpu.generation)
    if algorithm in ("auto", "ring"):
        times.append(ring)
    if algorithm == "hierarchical":
        times.append(np.where(spans, _HIER[kind](bytes_, n_intra, n_inter, bw_i, lat_i, bw_o_each, lat_o),
                              _FLAT[kind](bytes_, group_size, bw_i, lat_i)))
    if kind == "all_reduce" and algorithm in ("auto", "tree"):
        # a chain inside the domain pipelined with double binary trees across domains, one per
        # member's NIC (Sanders et al. 2009, NCCL 2.4): the slower tier sets the bandwidth
        tree_bw = np.minimum(bw_i, np.maximum(n_intra, 1.0) * bw_o_each)
        tree = _tree_protocol_envelope_s(bytes_, n_intra, n_inter, tree_bw, lat_i, lat_o, cluster.gpu.generation)
        times.append(np.where(spans, tree, ring))
    if not times:
        raise ValueError(f"unknown algorithm {algorithm!r} for {kind}")
    t = times[0]
    for other in times[1:]:
        t = np.minimum(t, other)
    return np.where(np.asarray(group_size) > 1, t, 0.0)


def _ring_protocol_envelope_s(kind, bytes_, group_size, n_intra, n_inter, spans, ring_bw, lat_i, lat_o, generation):
    """Flat-ring time of ``kind`` on the fastest NCCL protocol (``cost_models.nccl_protocols``), seconds.

    Each protocol pays its base latency per call, its hop latency per step (the scale-up link's
    for steps inside a node, the NIC's for the ``n_inter - 1`` crossings, as in
    ``ring_step_latency_s``) and moves the bytes at its share of the ring's bandwidth. As
    NVIDIA/nccl@v2.27.7-1 src/graph/tuning.cc charges them: with one rank per node the crossings
    are fully exposed and pay the tree's network hop (line 332, ``hwLat[NET][TREE]``: LL 5.0,
    LL128 8.5 us against the ring's 2.7, 4.0), and on a ring across nodes an in-node hop costs at
    least the proxy's overhead (line 353, ``nccl_protocols.ring_net_overhead_ratio``).
    """
    # every protocol at once along a leading axis (``nccl_protocols.protocol_columns``): the same
    # operations on each element as one protocol at a time, in one pass of array operations
    cols = nccl_protocols.protocol_columns(generation)
    col = _protocol_axis(bytes_, group_size, n_intra, n_inter, spans, ring_bw, lat_i, lat_o)
    one_per_node = np.asarray(n_intra, dtype=float) <= 1.0
    hop_i = lat_i * col(cols.nvlink_hop_ratio)
    hop_o = lat_o * np.where(one_per_node, col(cols.tree_net_hop_ratio), col(cols.net_hop_ratio))
    hop_i = np.where(spans, np.maximum(hop_i, lat_i * col(cols.ring_net_overhead)), hop_i)
    lat = np.where(spans, ring_step_latency_s(group_size, n_inter, hop_i, hop_o), hop_i)
    bw = np.asarray(ring_bw, dtype=float) * col(cols.bw_fraction)          # protocol_bus_bw
    if cols.any_capped:
        cap = nccl_protocols._ll_max_bus_bw(n_inter, nccl_protocols.LL_MAX_BUS_BW_BYTES_PER_S.get(generation, np.inf))
        bw = np.where(col(cols.ll_capped), np.minimum(bw, cap), bw)
    t = _FLAT[kind](bytes_, group_size, bw, lat) + col(cols.ring_base_latency_s)
    return t.min(axis=0)


def _protocol_axis(*args):
    """A function reshaping a per-protocol column to broadcast along a leading axis against ``args``."""
    nd = max(np.ndim(a) for a in args)
    return lambda column: column.reshape(column.shape + (1,) * nd)


def _tree_protocol_envelope_s(bytes_, n_intra, n_inter, bus_bw, lat_i, lat_o, generation):
    """Tree all-reduce of a ``bytes_`` buffer across ``n_inter`` domains of ``n_intra`` members
    on the fastest NCCL protocol, seconds, as NCCL's tuner models it (NVIDIA/nccl@v2.27.7-1
    src/graph/tuning.cc): the intra-node chain and the inter-node double binary trees run
    pipelined on the same chunks, so the buffer moves once up and once down at the tree's bus
    bandwidth: algorithm bandwidth ``busBw * .5`` (line 325), ``busBw`` the slower tier's
    ``bus_bw`` x .92 x the protocol's share (lines 281-283, ``nccl_protocols.tree_bus_bw``);
    latency ``baseLat[Tree] + 2 ((ppn - 1) intraLat + log2i(nNodes) interLat)`` (lines 357-361)
    with the tree's own hop latencies (``hwLat`` Tree columns, scaled to the cluster's link
    latencies as the ring's are). 64 MiB over 1,024 H100 (128 DGX nodes): LL128,
    2 x 67.1 MB / (340 GB/s x .92 x 120/128) = 458 us + 14 + 2 (7 x 1.10 + 7 x 3.04) us = 530 us.
    The tuner's size-bucket ``treeCorrectionFactor`` (lines 555-569) scales the bandwidth; where
    it steps up, a message would run faster than one just below it, so the time is held at the
    largest time of any smaller message (each protocol's running maximum)."""
    cols = nccl_protocols.protocol_columns(generation)
    col = _protocol_axis(bytes_, n_intra, n_inter, bus_bw, lat_i, lat_o)
    n_intra = np.maximum(np.asarray(n_intra, dtype=float), 1.0)
    log_nodes = np.floor(np.log2(np.maximum(np.asarray(n_inter, dtype=float), 1.0)))
    hop_i, hop_o = lat_i * col(cols.tree_nvlink_hop_ratio), lat_o * col(cols.tree_net_hop_ratio)
    lat = col(cols.tree_base_latency_s) + 2.0 * ((n_intra - 1.0) * hop_i + log_nodes * hop_o)
    # nccl_protocols.tree_bus_bw on every protocol at once
    bw = np.asarray(bus_bw, dtype=float)
    if cols.tree_tables is None:
        bw = bw * col(cols.tree_bw_fraction)
    else:
        bw = bw * nccl_protocols.TREE_ALLREDUCE_BW_FRACTION * col(cols.tree_bw_fraction)
        if cols.any_capped:
            cap = nccl_protocols._ll_max_bus_bw(n_inter, nccl_protocols.LL_MAX_BUS_BW_TWO_NODES)
            bw = np.where(col(cols.ll_capped), np.minimum(bw, cap), bw)
    size = np.asarray(bytes_, dtype=float)
    t = 2.0 * size / (bw * _tree_bw_corrections(cols, size)) + lat
    if cols.edges.shape[1]:
        # each protocol's running maximum over the sizes where its correction steps, at once: the
        # largest of the boundary times at or below the message size (max is exact in any order)
        at_edge = lambda column: column.reshape(column.shape + (1,) * (t.ndim - 1))
        edges = at_edge(cols.edges)
        edge_t = 2.0 * edges / (bw[:, None] * at_edge(cols.factors_below)) + lat[:, None]
        below = np.where(at_edge(cols.edge_valid) & (size >= edges), edge_t, -np.inf)
        t = np.maximum(t, below.max(axis=1))
    return t.min(axis=0)


def _tree_bw_corrections(cols, size):
    """``nccl_protocols.tree_bw_correction`` of every protocol of ``cols`` at once, along a leading axis."""
    if cols.tree_tables is None:
        return np.ones((len(cols.tree_bw_fraction),) + size.shape)
    n_buckets = cols.tree_tables.shape[1]
    log_size = np.floor(np.log2(np.maximum(np.floor(size / 64.0), 1.0)))
    inside = (size >= 64.0) & (log_size < n_buckets)
    index = np.minimum(np.maximum(log_size, 0.0), n_buckets - 1.0).astype(int)      # np.clip, without its overhead
    return np.where(inside, cols.tree_tables[:, index], 1.0)


def group_forwarded_all_to_all_time_s(intra_bytes, inter_bytes, group_size, stride, cluster: ClusterSpec,
                                      eff: EfficiencyModel):
    """A forwarding all-to-all (``collectives.forwarded_all_to_all_time_s``) over a group placed
    by (size, stride) on ``cluster``, given each GPU's NVLink and NIC volumes in bytes; seconds."""
    n_intra, n_inter = group_span(group_size, stride, cluster.gpus_per_node)
    bw_i, lat_i, bw_o, lat_o = tier_bandwidths(cluster, eff, n_intra, stride)
    kind_fraction = eff.collective_fraction("all_to_all")
    t = coll.forwarded_all_to_all_time_s(intra_bytes, inter_bytes, group_size, n_inter, bw_i * kind_fraction,
                                         lat_i, bw_o * kind_fraction, lat_o)
    return np.where(np.asarray(group_size) > 1, t, 0.0)


def pipeline_send_slicing(tp, sequence_parallel, scatter_gather):
    """``(sliced, gathered)``, boolean arrays: whether each tensor-parallel rank sends 1/tp of a
    stage boundary's [s, b, h] tensor (under sequence parallelism it holds only its slice;
    without it, only where the stack scatters: ``scatter_gather``, Megatron-LM 2021-2022's and
    DeepSpeed's pipeline engines), and whether the receiver then all-gathers the slices over its
    tensor-parallel group (scattered without sequence parallelism, tp > 1; Narayanan et al. 2021
    section 4.1). The one rule the step model (``simulator.step_model.pipeline_send_s``) and the
    pooled composer (``simulator.heterogeneous.compose.boundary_p2p_s``) send by."""
    tp = np.asarray(tp, dtype=float)
    sp = np.asarray(sequence_parallel, dtype=bool)
    gathered = np.asarray(scatter_gather, dtype=bool) & ~sp & (tp > 1)
    return sp | gathered, gathered


def p2p_stage_time_s(bytes_, stride, stages, cluster: ClusterSpec, eff: EfficiencyModel):
    """Send/recv between neighbouring pipeline stages ``stride`` ranks apart, ``stages`` of them
    placed one after the other from a node's first GPU, seconds (numpy-friendly).

    The stages' sends run together, so the slowest boundary sets the time: NVLink only when all
    ``stages`` x ``stride`` ranks share one node; a stride below a node whose stages still span
    several nodes crosses the NIC at some boundary (tp 4, pp 4 on two 8-GPU nodes: stage 1 -> 2).
    A send inside a domain is a group of two: one peer's links on a full mesh, one link on a
    torus (the neighbouring stage's chip is ``stride`` ranks along the torus)."""
    bw_i, lat_i, bw_o, lat_o = tier_bandwidths(cluster, eff, 2.0, stride)
    bw_i, bw_o = bw_i * eff.collective_fraction("p2p"), bw_o * eff.collective_fraction("p2p")
    inside = np.asarray(stride) * np.asarray(stages) <= cluster.gpus_per_node
    return np.where(inside, coll.p2p_time_s(bytes_, bw_i, lat_i), coll.p2p_time_s(bytes_, bw_o, lat_o))


def pipeline_exchange_transfers(blocking):
    """Transfers one stage boundary's exchange costs (numpy-friendly): 2 when the stack's send
    waits for the peer's receive and only then receives the other direction's tensor (DeepSpeed's
    ``PipelineEngine``: blocking ``dist.send`` / ``dist.recv``, one command after the other in each
    ``TrainSchedule`` step, deepspeed/runtime/pipe at v0.19.8), 1 when both directions are posted
    together and overlap (Megatron's ``batch_isend_irecv``) (``ParallelConfig.pipe_exchange_blocking``)."""
    return np.where(np.asarray(blocking, dtype=bool), 2.0, 1.0)
