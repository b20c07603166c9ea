"""Time of collective operations in the alpha-beta (latency-bandwidth) model.

Every function is pure and accepts numpy arrays or scalars. ``n`` is the group size,
``bytes_`` the payload in bytes as defined per function, ``bw_bytes_per_s`` the achieved
per-GPU bandwidth of the tier in one direction and ``latency_s`` the per-step start-up cost.

Ring formulas: Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication
Operations in MPICH" (2005): all-reduce moves 2(n-1)/n of the buffer through each GPU's link
in 2(n-1) steps; reduce-scatter and all-gather move (n-1)/n in n-1 steps. Double binary tree
(NCCL 2.4): bandwidth term 2*S/bw, latency term 2*log2(n) steps.
"""
from __future__ import annotations

import numpy as np


def _steps(n):
    return np.maximum(np.asarray(n, dtype=float) - 1.0, 0.0)


def ring_allreduce_time_s(bytes_, n, bw_bytes_per_s, latency_s):
    """Ring all-reduce of a ``bytes_`` buffer held by each of ``n`` GPUs, seconds."""
    n = np.asarray(n, dtype=float)
    frac = np.where(n > 1, 2.0 * (n - 1.0) / np.maximum(n, 1.0), 0.0)
    return frac * bytes_ / bw_bytes_per_s + 2.0 * _steps(n) * latency_s


def tree_allreduce_time_s(bytes_, n, bw_bytes_per_s, latency_s):
    """Double-binary-tree all-reduce (bandwidth 2S/bw, latency 2 log2 n), seconds."""
    n = np.asarray(n, dtype=float)
    active = n > 1
    return np.where(active, 2.0 * bytes_ / bw_bytes_per_s + 2.0 * np.log2(np.maximum(n, 1.0)) * latency_s, 0.0)


def reduce_scatter_time_s(bytes_, n, bw_bytes_per_s, latency_s):
    """Ring reduce-scatter; ``bytes_`` is the full (unscattered) buffer per GPU, seconds."""
    n = np.asarray(n, dtype=float)
    frac = np.where(n > 1, (n - 1.0) / np.maximum(n, 1.0), 0.0)
    return frac * bytes_ / bw_bytes_per_s + _steps(n) * latency_s


def all_gather_time_s(bytes_, n, bw_bytes_per_s, latency_s):
    """Ring all-gather; ``bytes_`` is the full gathered buffer per GPU, seconds."""
    return reduce_scatter_time_s(bytes_, n, bw_bytes_per_s, latency_s)


def all_to_all_time_s(bytes_, n, bw_bytes_per_s, latency_s):
    """Pairwise all-to-all; each GPU holds ``bytes_`` and keeps 1/n of it, seconds."""
    return reduce_scatter_time_s(bytes_, n, bw_bytes_per_s, latency_s)


def p2p_time_s(bytes_, bw_bytes_per_s, latency_s):
    """One point-to-point send/recv of ``bytes_``, seconds."""
    return np.asarray(bytes_, dtype=float) / bw_bytes_per_s + latency_s


def broadcast_time_s(bytes_, n, bw_bytes_per_s, latency_s):
    """Pipelined ring broadcast: S/bw plus (n-1) start-up steps, seconds."""
    n = np.asarray(n, dtype=float)
    return np.where(n > 1, bytes_ / bw_bytes_per_s + _steps(n) * latency_s, 0.0)


def hierarchical_allreduce_time_s(bytes_, n_intra, n_inter, bw_intra, lat_intra, bw_inter, lat_inter):
    """All-reduce over ``n_intra * n_inter`` GPUs, ``n_intra`` per fast domain.

    Reduce-scatter inside the domain, all-reduce of the 1/n_intra shard across domains (each GPU
    on its own NIC), all-gather inside the domain. With one GPU per domain this is a flat ring
    over the slow tier; with one domain it is a ring over the fast tier.
    """
    shard = bytes_ / np.maximum(n_intra, 1)
    return (reduce_scatter_time_s(bytes_, n_intra, bw_intra, lat_intra)
            + ring_allreduce_time_s(shard, n_inter, bw_inter, lat_inter)
            + all_gather_time_s(bytes_, n_intra, bw_intra, lat_intra))


def hierarchical_reduce_scatter_time_s(bytes_, n_intra, n_inter, bw_intra, lat_intra, bw_inter, lat_inter):
    """Reduce-scatter over ``n_intra * n_inter`` GPUs: inside the domain, then across on the shard."""
    shard = bytes_ / np.maximum(n_intra, 1)
    return (reduce_scatter_time_s(bytes_, n_intra, bw_intra, lat_intra)
            + reduce_scatter_time_s(shard, n_inter, bw_inter, lat_inter))


def hierarchical_all_gather_time_s(bytes_, n_intra, n_inter, bw_intra, lat_intra, bw_inter, lat_inter):
    """All-gather over ``n_intra * n_inter`` GPUs (mirror of the reduce-scatter)."""
    return hierarchical_reduce_scatter_time_s(bytes_, n_intra, n_inter, bw_intra, lat_intra, bw_inter, lat_inter)


def forwarded_all_to_all_time_s(intra_bytes, inter_bytes, n, n_inter, bw_intra, lat_intra, bw_inter, lat_inter):
    """All-to-all whose per-GPU NVLink and NIC volumes the caller states, seconds.

    For a dispatcher that sends a token once per destination GPU inside the domain and once per
    destination domain over the NIC, forwarding it over NVLink on arrival (DeepEP's normal
    kernels, Zhao et al. 2025, github.com/deepseek-ai/DeepEP README "internode": RDMA to the
    same-index GPU of each target node, then NVLink): the volumes depend on the routing, not
    only on the buffer (``cost_models.moe.deduplicated_dispatch_volumes``). Both tiers send at
    once; the slower sets the time, plus one start-up per peer step.
    """
    n = np.maximum(np.asarray(n, dtype=float), 1.0)
    lat = np.where(np.asarray(n_inter) > 1, lat_inter, lat_intra)
    return np.maximum(intra_bytes / bw_intra, inter_bytes / bw_inter) + _steps(n) * lat


def hierarchical_all_to_all_time_s(bytes_, n_intra, n_inter, bw_intra, lat_intra, bw_inter, lat_inter):
    """All-to-all where (n_inter-1)/n_inter of the data leaves the domain over each GPU's NIC.

    The NVLink and NIC parts are sent at once (NCCL posts every peer's send/recv together), so
    the slower of the two sets the time, plus one start-up per peer step.
    """
    n = np.maximum(n_intra * n_inter, 1)
    inside = bytes_ * (np.maximum(n_intra, 1) - 1) / n
    outside = bytes_ * (n_intra * (np.maximum(n_inter, 1) - 1)) / n
    return forwarded_all_to_all_time_s(inside, outside, n, n_inter, bw_intra, lat_intra, bw_inter, lat_inter)
