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

import numpy as np

# NCCL hop latencies (us) of the ring algorithm, tuning.cc@v2.27.7-1 ``hwLat``: NVLINK / NET rows
_NVLINK_HOP_US = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}
_NET_HOP_US = {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}


@dataclass(frozen=True)
class Protocol:
    """One NCCL protocol's cost terms.

    ring_base_latency_s: fixed cost per ring call, seconds (``baseLat`` Ring row).
    nvlink_hop_ratio / net_hop_ratio: hop latency relative to Simple's on that link kind.
    bw_fraction: fraction of the link's bus bandwidth the protocol's payload reaches.
    generation_capped: whether NCCL caps the bus bandwidth per GPU generation (LL only).
    """
    name: str
    ring_base_latency_s: float
    nvlink_hop_ratio: float
    net_hop_ratio: float
    bw_fraction: float
    generation_capped: bool = False


LL = Protocol("LL", 6.6e-6, _NVLINK_HOP_US["LL"] / 3.4, _NET_HOP_US["LL"] / 14.0, 0.5, generation_capped=True)
LL128 = Protocol("LL128", 14.0e-6, _NVLINK_HOP_US["LL128"] / 3.4, _NET_HOP_US["LL128"] / 14.0, 120.0 / 128.0)
SIMPLE = Protocol("Simple", 8.4e-6, 1.0, 1.0, 1.0)
NCCL_PROTOCOLS = (LL, LL128, SIMPLE)

#: base latency of a tree all-reduce on Simple, seconds (``baseLat`` Tree row)
TREE_BASE_LATENCY_S = 8.4e-6

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
    n_inter = np.asarray(n_inter, dtype=float)
    cap = np.where(n_inter <= 1, LL_MAX_BUS_BW_BYTES_PER_S.get(generation, np.inf),
                   np.where(n_inter <= 2, LL_MAX_BUS_BW_TWO_NODES, LL_MAX_BUS_BW_MANY_NODES))
    return np.minimum(bw, cap)
