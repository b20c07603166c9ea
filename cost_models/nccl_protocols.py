"""NCCL's three wire protocols, and the per-call and per-hop latencies its own cost model charges.

NCCL moves a collective's data with one of three protocols and, per call, uses the one its
tuner predicts fastest for the message size (NVIDIA/nccl@v2.27.7-1, commit 593de54e,
src/graph/tuning.cc ``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime``):

- **LL** (low latency): 8-byte stores carrying 4 bytes of data plus a flag, so the receiver polls
  without a memory fence. Half the link's bandwidth (``busBw * .5``), capped per GPU generation
  (``llMaxBws``), but the shortest hop (0.6 us on NVLink, 2.7 us over the network).
- **LL128**: 128-byte lines with 8 bytes of flag, 120/128 = 0.92 of the bandwidth (``busBw *
  0.92``), hop 1.9 us on NVLink, 4.0 us over the network.
- **Simple**: bulk copies with a fence per chunk; the full bandwidth, the longest hop (3.4 us on
  NVLink, 14 us over the network).

Every call also pays a fixed base latency (``baseLat``, ring: LL 6.6 us, LL128 14 us, Simple
8.4 us; tree Simple 8.4 us): kernel launch, the proxy handshake, the first chunk's round trip.
A ring collective of ``nsteps`` steps (2(n-1) for all-reduce, n-1 for reduce-scatter and
all-gather) takes ``base + nsteps * hop + bytes / bus bandwidth`` on a protocol, and NCCL runs the
protocol for which that is least. Small messages therefore run LL (latency-bound, a few us a
hop), mid-size ones LL128 and large ones Simple; the time of a 1-32 MB all-reduce on 8 GPUs of a
node is the lower envelope of the three lines, not one alpha-beta line.

The Simple hop is the cluster's own per-step latency (``ClusterSpec.scaleup`` / ``scaleout``
``latency_s``: what the hardware file states); LL and LL128 hops are NCCL's ratios to Simple on
the same link kind (NVLink 0.6/3.4 and 1.9/3.4, network 2.7/14 and 4.0/14), so a cluster file's
latency scales all three. Only NVIDIA generations run NCCL (``LL_MAX_BUS_BW_BYTES_PER_S``
lists them); other accelerators keep the single Simple-like line without a base latency.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# NCCL hop latencies (us) of the ring algorithm, tuning.cc@v2.27.7-1 ``hwLat``: NVLINK / NET rows
_NVLINK_HOP_US = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}
_NET_HOP_US = {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}
# ... and of the tree (``hwLat`` Tree columns, tuning.cc@v2.27.7-1 lines 145 and 153)
_TREE_NVLINK_HOP_US = {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}
_TREE_NET_HOP_US = {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}
#: the proxy's per-step overhead on a multi-node ring, seconds: a ring hop inside a node costs at
#: least this (``intraLat = max(intraLat, netOverhead)``, tuning.cc@v2.27.7-1 lines 347-353;
#: ``getNetOverhead`` lines 204-209: 1.0 us on Intel x86 hosts, the row the LL caps here use too,
#: 2.0 on AMD), three times it on Simple. Like the hops, in NCCL's microseconds: scaled to the
#: cluster's link latency by the same ratio (``ring_net_overhead_ratio``)
NET_OVERHEAD_US = 1.0
NET_OVERHEAD_SIMPLE_MULTIPLIER = 3.0


def ring_net_overhead_ratio(protocol: "Protocol", generation: str) -> float:
    """The floor a multi-node ring's in-node hop pays on ``protocol``, relative to the Simple
    NVLink hop (3.4 us in NCCL's table, the cluster's scale-up latency here); 0 off NCCL.
    LL: 1.0 / 3.4 (above its 0.6 / 3.4 hop), LL128: 1.0 / 3.4 (below its 1.9), Simple 3.0 / 3.4."""
    if not runs_nccl(generation):
        return 0.0
    return NET_OVERHEAD_US * (NET_OVERHEAD_SIMPLE_MULTIPLIER if protocol.name == "Simple" else 1.0) / 3.4


#: the tree all-reduce's bus bandwidth over the link's (tuning.cc@v2.27.7-1 line 281, ``busBw*.92``)
TREE_ALLREDUCE_BW_FRACTION = 0.92
#: the tree all-reduce's bandwidth correction by message size (``treeCorrectionFactor``,
#: tuning.cc@v2.27.7-1 lines 555-559: "Trees are not perfectly sticking to the model for medium
#: sizes"), index log2(bytes / 64): 23 buckets from 64 B up to 512 MiB (the last one 256 .. 512
#: MiB); 1 outside
_TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}


@dataclass(frozen=True)
class Protocol:
    """One NCCL protocol's cost terms.

    ring_base_latency_s: fixed cost per ring call, seconds (``baseLat`` Ring row).
    nvlink_hop_ratio / net_hop_ratio: hop latency relative to Simple's on that link kind.
    bw_fraction: fraction of the link's bus bandwidth the protocol's payload reaches.
    generation_capped: whether NCCL caps the bus bandwidth per GPU generation (LL only).
    tree_base_latency_s: fixed cost per tree all-reduce call, seconds (``baseLat`` Tree row).
    tree_nvlink_hop_ratio / tree_net_hop_ratio: the tree's hop latency relative to the ring's
        Simple hop on that link kind (``hwLat`` Tree columns over 3.4 us NVLink, 14 us network).
    tree_bw_fraction: fraction of the multi-node tree's bus bandwidth the protocol reaches
        (tuning.cc@v2.27.7-1 lines 282-283: LL 1/3.8, LL128 120/128 across nodes).
    """
    name: str
    ring_base_latency_s: float
    nvlink_hop_ratio: float
    net_hop_ratio: float
    bw_fraction: float
    generation_capped: bool = False
    tree_base_latency_s: float = 0.0
    tree_nvlink_hop_ratio: float = 1.0
    tree_net_hop_ratio: float = 1.0
    tree_bw_fraction: float = 1.0


LL = Protocol("LL", 6.6e-6, _NVLINK_HOP_US["LL"] / 3.4, _NET_HOP_US["LL"] / 14.0, 0.5, generation_capped=True,
              tree_base_latency_s=6.8e-6, tree_nvlink_hop_ratio=_TREE_NVLINK_HOP_US["LL"] / 3.4,
              tree_net_hop_ratio=_TREE_NET_HOP_US["LL"] / 14.0, tree_bw_fraction=1.0 / 3.8)
LL128 = Protocol("LL128", 14.0e-6, _NVLINK_HOP_US["LL128"] / 3.4, _NET_HOP_US["LL128"] / 14.0, 120.0 / 128.0,
                 tree_base_latency_s=14.0e-6, tree_nvlink_hop_ratio=_TREE_NVLINK_HOP_US["LL128"] / 3.4,
                 tree_net_hop_ratio=_TREE_NET_HOP_US["LL128"] / 14.0, tree_bw_fraction=120.0 / 128.0)
SIMPLE = Protocol("Simple", 8.4e-6, 1.0, 1.0, 1.0, tree_base_latency_s=8.4e-6,
                  tree_nvlink_hop_ratio=_TREE_NVLINK_HOP_US["Simple"] / 3.4,
                  tree_net_hop_ratio=_TREE_NET_HOP_US["Simple"] / 14.0)
NCCL_PROTOCOLS = (LL, LL128, SIMPLE)


#: LL's bus-bandwidth cap inside one node, bytes/s, by GPU generation (``llMaxBws`` N1 column:
#: Volta row for compute capability < 8.0, so Turing too); the generations listed run NCCL
LL_MAX_BUS_BW_BYTES_PER_S = {"volta": 39.0e9, "turing": 39.0e9, "ampere": 87.7e9, "hopper": 141.0e9,
                             "blackwell": 282.0e9}
#: LL's cap across 2 nodes and across more, bytes/s (``llMaxBws`` N2 / N4, x86 Intel hosts row)
LL_MAX_BUS_BW_TWO_NODES = 39.0e9
LL_MAX_BUS_BW_MANY_NODES = 20.4e9

#: a single line with no base latency: the model for accelerators that do not run NCCL
PLAIN = (Protocol("plain", 0.0, 1.0, 1.0, 1.0),)


def runs_nccl(generation: str) -> bool:
    """Whether ``generation``'s collectives run NCCL (its protocols and base latencies apply)."""
    return generation in LL_MAX_BUS_BW_BYTES_PER_S


def protocols_for(generation: str) -> tuple[Protocol, ...]:
    """The protocols whose lower envelope gives a collective's time on ``generation``."""
    return NCCL_PROTOCOLS if runs_nccl(generation) else PLAIN


def protocol_bus_bw(protocol: Protocol, bw_bytes_per_s, n_inter, generation: str):
    """Bus bandwidth ``protocol`` reaches on a link of ``bw_bytes_per_s`` across ``n_inter`` nodes, bytes/s."""
    bw = np.asarray(bw_bytes_per_s, dtype=float) * protocol.bw_fraction
    if not protocol.generation_capped:
        return bw
    return np.minimum(bw, _ll_max_bus_bw(n_inter, LL_MAX_BUS_BW_BYTES_PER_S.get(generation, np.inf)))


def _ll_max_bus_bw(n_inter, one_node):
    """LL's bus-bandwidth cap (``llMaxBws``) across ``n_inter`` nodes, bytes/s: ``one_node`` on
    one, the two-node and many-node rows beyond (numpy-friendly)."""
    n_inter = np.asarray(n_inter, dtype=float)
    return np.where(n_inter <= 1, one_node, np.where(n_inter <= 2, LL_MAX_BUS_BW_TWO_NODES, LL_MAX_BUS_BW_MANY_NODES))


def tree_bus_bw(protocol: Protocol, bw_bytes_per_s, n_inter, generation: str):
    """Bus bandwidth of a multi-node tree all-reduce on ``protocol``, bytes/s, from the bandwidth
    ``bw_bytes_per_s`` its slowest tier gives one GPU (tuning.cc@v2.27.7-1 lines 281-283:
    ``busBw*.92``, then LL ``/3.8`` capped at ``llMaxBw``, LL128 ``*120/128``). The per-channel
    caps (``perChMaxTreeBws``) need NCCL's channel count and are left out. NCCL only: other
    accelerators take the link's bandwidth."""
    bw = np.asarray(bw_bytes_per_s, dtype=float)
    if not runs_nccl(generation):
        return bw * protocol.tree_bw_fraction
    bw = bw * TREE_ALLREDUCE_BW_FRACTION * protocol.tree_bw_fraction
    if not protocol.generation_capped:
        return bw
    return np.minimum(bw, _ll_max_bus_bw(n_inter, LL_MAX_BUS_BW_TWO_NODES))    # a tree spans nodes


def tree_bw_correction(protocol: Protocol, bytes_):
    """NCCL's ``treeCorrectionFactor`` for a tree all-reduce of ``bytes_`` on ``protocol``
    (numpy-friendly; 1 for protocols NCCL does not run and outside 64 B .. 512 MiB):
    ``bw *= treeCorrectionFactor[p][log2i(nBytes >> 6)]`` (tuning.cc@v2.27.7-1 line 569)."""
    table = _TREE_CORRECTION.get(protocol.name)
    b = np.asarray(bytes_, dtype=float)
    if table is None:
        return np.ones_like(b)
    log_size = np.floor(np.log2(np.maximum(np.floor(b / 64.0), 1.0)))
    inside = (b >= 64.0) & (log_size < len(table))
    return np.where(inside, np.asarray(table)[np.clip(log_size, 0, len(table) - 1).astype(int)], 1.0)


def tree_correction_boundaries(protocol: Protocol):
    """(bytes, factor just below) at each size where ``tree_bw_correction`` steps: the smallest
    message of each 64 x 2^k bucket and the factor of the bucket under it."""
    table = _TREE_CORRECTION.get(protocol.name)
    if table is None:
        return ()
    below = (1.0,) + tuple(table)
    return tuple((64.0 * 2.0**k, below[k]) for k in range(len(table) + 1) if below[k] != (table + (1.0,))[k])


def _read_only(values, dtype=float) -> np.ndarray:
    a = np.array(values, dtype=dtype)
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class ProtocolColumns:
    """The per-protocol constants of ``protocols_for(generation)`` as read-only arrays, one
    element per protocol in that order (the same floats the ``Protocol`` fields and the functions
    above give one protocol at a time), so a collective's envelope over the protocols is computed
    on a leading protocol axis in one pass of array operations.

    ring_net_overhead: ``ring_net_overhead_ratio``; ll_capped: ``generation_capped``;
    tree_tables: (protocols, buckets) ``treeCorrectionFactor`` rows (None off NCCL);
    edges / factors_below / edge_valid: (protocols, most boundaries) ``tree_correction_boundaries``,
    padded (edge 0, factor 1, not valid) where a protocol has fewer."""
    ring_base_latency_s: np.ndarray
    nvlink_hop_ratio: np.ndarray
    net_hop_ratio: np.ndarray
    tree_net_hop_ratio: np.ndarray
    tree_nvlink_hop_ratio: np.ndarray
    tree_base_latency_s: np.ndarray
    bw_fraction: np.ndarray
    tree_bw_fraction: np.ndarray
    ring_net_overhead: np.ndarray
    ll_capped: np.ndarray
    any_capped: bool
    tree_tables: np.ndarray | None
    edges: np.ndarray
    factors_below: np.ndarray
    edge_valid: np.ndarray


@lru_cache(maxsize=None)
def protocol_columns(generation: str) -> ProtocolColumns:
    """``ProtocolColumns`` of ``generation``'s protocols (a pure function of the module's
    constants, computed once per generation)."""
    protos = protocols_for(generation)
    tables = [_TREE_CORRECTION.get(p.name) for p in protos]
    bounds = [tree_correction_boundaries(p) for p in protos]
    width = max(len(b) for b in bounds)
    pad = [list(b) + [(0.0, 1.0)] * (width - len(b)) for b in bounds]
    return ProtocolColumns(
        ring_base_latency_s=_read_only([p.ring_base_latency_s for p in protos]),
        nvlink_hop_ratio=_read_only([p.nvlink_hop_ratio for p in protos]),
        net_hop_ratio=_read_only([p.net_hop_ratio for p in protos]),
        tree_net_hop_ratio=_read_only([p.tree_net_hop_ratio for p in protos]),
        tree_nvlink_hop_ratio=_read_only([p.tree_nvlink_hop_ratio for p in protos]),
        tree_base_latency_s=_read_only([p.tree_base_latency_s for p in protos]),
        bw_fraction=_read_only([p.bw_fraction for p in protos]),
        tree_bw_fraction=_read_only([p.tree_bw_fraction for p in protos]),
        ring_net_overhead=_read_only([ring_net_overhead_ratio(p, generation) for p in protos]),
        ll_capped=_read_only([p.generation_capped for p in protos], dtype=bool),
        any_capped=any(p.generation_capped for p in protos),
        tree_tables=None if any(t is None for t in tables) else _read_only(tables),
        edges=_read_only([[e for e, _ in row] for row in pad]).reshape(len(protos), width),
        factors_below=_read_only([[f for _, f in row] for row in pad]).reshape(len(protos), width),
        edge_valid=_read_only([[i < len(b) for i in range(width)] for b in bounds], dtype=bool).reshape(len(protos), width),
    )
