"""Communication between pools of a mixed cluster: the slowest link on a transfer's path.

A byte from a GPU of pool a to a GPU of pool b leaves through a's NIC, crosses the link between
the pools and enters through b's NIC (``PooledCluster.path``); it moves at the slowest of the
three. Achieved bandwidth multiplies each NIC by its own generation's ``scaleout_fraction`` and
the link by the smaller of the two (NCCL's busBW on the slowest hop); inside one pool, between
nodes, the path is the pool's own scale-out tier, exactly as ``cost_models.topology`` has it.

A collective whose members sit in several pools (the data-parallel ring of replicas on
different GPU kinds) is a flat ring across nodes: every step crosses a node boundary somewhere,
so it runs at the slowest achieved path between any two of its pools, with that path's latency
(Thakur et al. 2005 ring formulas, ``cost_models.collectives``).
"""
from __future__ import annotations

import numpy as np

from cost_models import collectives as coll
from hardware_specs.pools import PooledCluster

_RING = {
    "all_reduce": coll.ring_allreduce_time_s,
    "reduce_scatter": coll.reduce_scatter_time_s,
    "all_gather": coll.all_gather_time_s,
}


def path_matrix(cluster: PooledCluster, effs) -> tuple[np.ndarray, np.ndarray]:
    """(achieved bandwidth bytes/s, latency s), each a (pools x pools) matrix: entry [a, b] is a
    transfer between a node of pool a and a node of pool b (a == b: two nodes of one pool)."""
    n = len(cluster.pools)
    bw = np.zeros((n, n))
    lat = np.zeros((n, n))
    for i, a in enumerate(cluster.pools):
        for j, b in enumerate(cluster.pools):
            raw, latency = cluster.path(a.name, b.name)
            fraction = min(effs[i].scaleout_fraction, effs[j].scaleout_fraction)
            if i != j:
                # each NIC at its own fraction, the link at the smaller one: the slowest of the three
                ca, cb = a.cluster, b.cluster
                nic_a = ca.scaleout.bw_bytes_per_s / ca.oversubscription * effs[i].scaleout_fraction
                nic_b = cb.scaleout.bw_bytes_per_s / cb.oversubscription * effs[j].scaleout_fraction
                link = cluster.link(a.name, b.name).bw_bytes_per_s * fraction
                bw[i, j] = min(nic_a, nic_b, link)
            else:
                bw[i, j] = raw * fraction
            lat[i, j] = latency
    return bw, lat


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
