"""Where a communication group sits on the cluster, and the collective times that follows.

Collectives over a group that spans domains are modelled as flat rings whose slow links are the
members' own NICs: every byte crosses an inter-domain hop at the NIC's bandwidth. (NCCL can
spread a ring over all of a node's NICs, but the measured ZeRO-3 runs of Narayanan et al. 2021,
Table 2, move parameters at ~16 GB/s per A100 on 25 GB/s NICs, which only the flat ring
explains.) Groups inside one domain use the scale-up link.

Ranks are numbered with tensor parallelism fastest, then context, data, pipeline (Megatron's
default order ``tp-cp-dp-pp``). A group of ``group_size`` ranks whose members are ``stride``
ranks apart has ``n_intra`` members inside one scale-up domain and spans ``n_inter`` domains.
The fast tier is the scale-up link (NVLink); the slow tier is each GPU's own NIC (rail-
optimised fabrics give every GPU its own path), divided by the fabric's oversubscription.
Achieved bandwidth = link bandwidth x the generation's fitted fraction x the collective kind's
fraction (``EfficiencyModel.collective_bw_fraction``, 1 unless a calibration measured less).
"""
from __future__ import annotations

import numpy as np

from cost_models import collectives as coll
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


def tier_bandwidths(cluster: ClusterSpec, eff: EfficiencyModel):
    """Achieved (bw_intra, lat_intra, bw_inter, lat_inter) in bytes/s and seconds."""
    bw_intra = cluster.scaleup.bw_bytes_per_s * eff.scaleup_fraction
    bw_inter = cluster.scaleout.bw_bytes_per_s * eff.scaleout_fraction / cluster.oversubscription
    return bw_intra, cluster.scaleup.latency_s, bw_inter, cluster.scaleout.latency_s


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
                            eff: EfficiencyModel, algorithm: str = "ring"):
    """Time of collective ``kind`` over a group placed by (size, stride) on ``cluster``, seconds.

    ``kind`` is one of all_reduce, reduce_scatter, all_gather, all_to_all; ``bytes_`` as the
    matching function in ``cost_models.collectives`` defines it. ``algorithm`` "ring" (flat
    ring, default) or "hierarchical" (inside the domain, then across on the shard); all-to-all
    always splits its traffic between the tiers.
    """
    n_intra, n_inter = group_span(group_size, stride, cluster.gpus_per_node)
    bw_i, lat_i, bw_o, lat_o = tier_bandwidths(cluster, eff)
    kind_fraction = eff.collective_fraction(kind)
    bw_i, bw_o = bw_i * kind_fraction, bw_o * kind_fraction
    if kind == "all_to_all" or algorithm == "hierarchical":
        t = _HIER[kind](bytes_, n_intra, n_inter, bw_i, lat_i, bw_o, lat_o)
    else:
        spans = n_inter > 1
        bw = np.where(spans, min(bw_i, bw_o), bw_i)
        lat = np.where(spans, lat_o, lat_i)
        t = _FLAT[kind](bytes_, group_size, bw, lat)
    return np.where(np.asarray(group_size) > 1, t, 0.0)


def p2p_stage_time_s(bytes_, stride, cluster: ClusterSpec, eff: EfficiencyModel):
    """Send/recv between neighbouring ranks ``stride`` apart (e.g. pipeline stages), seconds."""
    bw_i, lat_i, bw_o, lat_o = tier_bandwidths(cluster, eff)
    bw_i, bw_o = bw_i * eff.collective_fraction("p2p"), bw_o * eff.collective_fraction("p2p")
    inside = np.asarray(stride) < cluster.gpus_per_node
    return np.where(inside, coll.p2p_time_s(bytes_, bw_i, lat_i), coll.p2p_time_s(bytes_, bw_o, lat_o))
