"""Communication between pools of a mixed cluster: the slowest link on a transfer's path.

A byte from a GPU of pool a to a GPU of pool b leaves through a's NIC, crosses the link between
the pools and enters through b's NIC (``PooledCluster.path``); it moves at the slowest of the
three. Achieved bandwidth multiplies each NIC by its own generation's ``scaleout_fraction`` and
the link by the smaller of the two (NCCL's busBW on the slowest hop); inside one pool, between
nodes, the path is the pool's own scale-out tier, exactly as ``cost_models.topology`` has it.

A collective whose members sit in several pools (the data-parallel ring of replicas on
different GPU kinds) is a flat ring across nodes: every step crosses a node boundary somewhere,
so it runs at the slowest achieved path between any two of its pools, with that path's latency
(Thakur et al. 2005 ring formulas, ``cost_models.collectives``). A two-rank collective
between one node of each of two pools (the tied embedding's gradient all-reduce between a
pipeline's first and last stage) is the one-kind model's own collective on the path between
them (``path_cluster``).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from cost_models import collectives as coll
from hardware_specs.cluster_spec import ClusterSpec, NetworkTier
from hardware_specs.pools import PooledCluster

_RING = {
    "all_reduce": coll.ring_allreduce_time_s,
    "reduce_scatter": coll.reduce_scatter_time_s,
    "all_gather": coll.all_gather_time_s,
}


def achieved_path(cluster: PooledCluster, effs, i: int, j: int) -> tuple[float, float]:
    """(achieved bandwidth bytes/s, latency s) of a transfer between a node of pool ``i`` and a
    node of pool ``j`` (indices into ``cluster.pools``; i == j: two nodes of one pool)."""
    a, b = cluster.pools[i], cluster.pools[j]
    raw, latency = cluster.path(a.name, b.name)
    fraction = min(effs[i].scaleout_fraction, effs[j].scaleout_fraction)
    if i == j:
        return raw * fraction, latency
    # each NIC at its own fraction, the link at the smaller one: the slowest of the three
    ca, cb = a.cluster, b.cluster
    nic_a = ca.scaleout.bw_bytes_per_s / ca.oversubscription * effs[i].scaleout_fraction
    nic_b = cb.scaleout.bw_bytes_per_s / cb.oversubscription * effs[j].scaleout_fraction
    link = cluster.link(a.name, b.name).bw_bytes_per_s * fraction
    return min(nic_a, nic_b, link), latency


def path_matrix(cluster: PooledCluster, effs) -> tuple[np.ndarray, np.ndarray]:
    """(achieved bandwidth bytes/s, latency s), each a (pools x pools) matrix: entry [a, b] is a
    transfer between a node of pool a and a node of pool b (a == b: two nodes of one pool),
    ``achieved_path``."""
    n = len(cluster.pools)
    bw = np.zeros((n, n))
    lat = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            bw[i, j], lat[i, j] = achieved_path(cluster, effs, i, j)
    return bw, lat


def side_bandwidths(cluster: PooledCluster, effs) -> tuple[np.ndarray, np.ndarray]:
    """(NIC (pools,), link (pools x pools)) achieved bytes/s one direction per GPU, the two
    sides of a send between pools apart: each pool's NIC (its fabric's per-GPU scale-out
    bandwidth over its oversubscription, at its own ``scaleout_fraction``) and the link stated
    between two pools (at the smaller fraction; inf where the file states none: the pools then
    meet on their own fabrics, which their NICs bound). With equal bytes on both sides a
    transfer runs at ``achieved_path``'s rate, the slowest of the three; with unequal ones (a
    pipeline send from tp 8 to tp 4: each sender moves 1/8 of the tensor, each receiver takes
    1/4) each side moves its own bytes at its own rate (``p2p_sides_time_s``)."""
    pools = cluster.pools
    n = len(pools)
    nic = np.array([p.cluster.scaleout.bw_bytes_per_s / p.cluster.oversubscription * e.scaleout_fraction
                    for p, e in zip(pools, effs)])
    link = np.full((n, n), np.inf)
    stated = {frozenset(link_.pools): link_ for link_ in cluster.links}
    for i in range(n):
        for j in range(n):
            one = stated.get(frozenset((pools[i].name, pools[j].name)))
            if i != j and one is not None:
                link[i, j] = one.bw_bytes_per_s * min(effs[i].scaleout_fraction, effs[j].scaleout_fraction)
    return nic, link


def p2p_sides_time_s(bytes_a, bytes_b, bw_a, bw_b, lat):
    """One send/recv between pools whose ranks on side a move ``bytes_a`` each at ``bw_a`` and
    on side b ``bytes_b`` at ``bw_b`` (each side's achieved path: its NIC, or the link between
    the pools where slower, ``side_bandwidths``): the slower side sets the time, plus the
    latency ``lat``; equal bytes give ``p2p_time_s`` at the slower of the two."""
    return np.maximum(np.asarray(bytes_a, dtype=float) / bw_a, np.asarray(bytes_b, dtype=float) / bw_b) + lat


def path_cluster(cluster: PooledCluster, effs, a: int, b: int) -> ClusterSpec:
    """Pool ``a``'s system as seen by a collective of ranks on a node of pool ``a`` and a node of
    pool ``b``: its scale-out tier replaced by the path between them (``achieved_path``: the
    slower NIC or the link, that link's latency; the tighter measured communicator cap of the two
    fabrics), stated so that ``cost_models.topology`` with pool a's efficiency model (its
    scale-out fraction and oversubscription) achieves the path's bandwidth. A collective over
    ranks a node apart in it (``topology.group_collective_time_s``) is then priced by the one-kind
    model's own function. a == b: pool a's system itself; two pools of one system joined at
    their own scale-out tier give that system's (to rounding), so the pools stay interchangeable
    (``planners.heterogeneous.canonical``)."""
    ca = cluster.pools[a].cluster
    if a == b:
        return ca
    cb = cluster.pools[b].cluster
    bw, latency = achieved_path(cluster, effs, a, b)
    caps = [c.scaleout.communicator_bus_bw_bytes_per_s for c in (ca, cb)
            if c.scaleout.communicator_bus_bw_bytes_per_s is not None]
    kind = cluster.link(cluster.pools[a].name, cluster.pools[b].name).kind
    tier = NetworkTier(kind, bw * ca.oversubscription / effs[a].scaleout_fraction, latency,
                       min(caps) if caps else None)
    return replace(ca, scaleout=tier)


def one_fabric(cluster: PooledCluster, effs) -> np.ndarray:
    """(pools x pools) bool: entry [a, b] where a collective over ranks of pools a and b is one
    over a single pool's nodes: a == b, or both pools are whole nodes of one system with one
    efficiency model, joined at their own scale-out path (``PooledCluster.path``), so their
    nodes are as the nodes of one pool (a pool of part of a node is a node of its own: never
    NVLink to another pool's GPUs)."""
    pools = cluster.pools
    n = len(pools)
    out = np.eye(n, dtype=bool)
    for i in range(n):
        for j in range(n):
            a, b = pools[i], pools[j]
            if i == j or a.cluster != b.cluster or effs[i] != effs[j]:
                continue
            whole = a.gpus % a.gpus_per_node == 0 and b.gpus % b.gpus_per_node == 0
            out[i, j] = whole and cluster.path(a.name, b.name) == cluster.path(a.name, a.name)
    return out


def ring_path(pool_mask, bw_matrix, lat_matrix) -> tuple[np.ndarray, np.ndarray]:
    """(bandwidth, latency) of a ring over the pools in each row of ``pool_mask`` (rows x
    pools, bool): the slowest path between any two of them (and within each, node to node)."""
    mask = np.asarray(pool_mask, dtype=bool)
    rows, n = mask.shape
    bw = np.full(rows, np.inf)
    lat = np.zeros(rows)
    for i in range(n):
        for j in range(i, n):
            both = mask[:, i] & mask[:, j]
            bw = np.where(both, np.minimum(bw, bw_matrix[i, j]), bw)
            lat = np.where(both, np.maximum(lat, lat_matrix[i, j]), lat)
    return bw, lat


def ring_collective_time_s(kind: str, bytes_, group_size, bw, lat):
    """Flat ring ``kind`` (all_reduce, reduce_scatter, all_gather) over ``group_size`` members at
    achieved bandwidth ``bw`` and per-step latency ``lat``, seconds (0 for one member)."""
    n = np.asarray(group_size, dtype=float)
    t = _RING[kind](bytes_, n, np.where(np.isfinite(bw), bw, 1.0), lat)
    return np.where(n > 1, t, 0.0)


def p2p_time_s(bytes_, bw, lat):
    """One send/recv of ``bytes_`` over a path of achieved bandwidth ``bw`` and latency ``lat``."""
    return coll.p2p_time_s(bytes_, bw, lat)
