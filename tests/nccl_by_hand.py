"""A ring collective's time on NCCL's fastest protocol, written out from NCCL's tuning constants
(NVIDIA/nccl@v2.27.7-1 src/graph/tuning.cc) for tests that derive expected values by hand, so
that they do not call the code under test for them.

Each protocol: base latency per call + hops (the cluster's per-step latency scaled by NCCL's
LL / LL128 / Simple ratio on that link kind) + the bytes on the wire at its share of the bus
bandwidth (LL's share capped by ``ll_cap``)."""
BASE_S = {"LL": 6.6e-6, "LL128": 14.0e-6, "Simple": 8.4e-6}
NVLINK_HOP = {"LL": 0.6 / 3.4, "LL128": 1.9 / 3.4, "Simple": 1.0}
NET_HOP = {"LL": 2.7 / 14.0, "LL128": 4.0 / 14.0, "Simple": 1.0}
BW_SHARE = {"LL": 0.5, "LL128": 120.0 / 128.0, "Simple": 1.0}
#: on a ring across nodes an NVLink hop costs at least the proxy's net overhead, 1.0 us on Intel
#: x86 (x 3 on Simple), in NCCL's microseconds, hence over its 3.4 us Simple NVLink hop (line 353)
NET_OVERHEAD_HOP = {"LL": 1.0 / 3.4, "LL128": 1.0 / 3.4, "Simple": 3.0 / 3.4}


def protocol_s(protocol, wire_bytes, hops_intra, hops_inter, bus_bw, lat_intra, lat_inter, ll_cap=float("inf")):
    bw = bus_bw * BW_SHARE[protocol]
    if protocol == "LL":
        bw = min(bw, ll_cap)
    nvlink_hop = max(NVLINK_HOP[protocol], NET_OVERHEAD_HOP[protocol]) if hops_inter > 0 else NVLINK_HOP[protocol]
    return (BASE_S[protocol] + hops_intra * lat_intra * nvlink_hop
            + hops_inter * lat_inter * NET_HOP[protocol] + wire_bytes / bw)


def ring_s(wire_bytes, hops_intra, hops_inter, bus_bw, lat_intra, lat_inter, ll_cap=float("inf")):
    """The least of the three protocols' times, seconds."""
    return min(protocol_s(p, wire_bytes, hops_intra, hops_inter, bus_bw, lat_intra, lat_inter, ll_cap)
               for p in BASE_S)


#: NCCL's LL bus-bandwidth cap over more than 2 nodes
LL_CAP_MANY_NODES = 20.4e9


def flat_ring_over_nodes(cluster, eff, nodes):
    """(reduce-scatter or all-gather time, all-reduce time) functions of a buffer's bytes for a
    flat ring over ``nodes`` whole nodes of ``cluster`` (every member drives its own NIC, capped
    by NVLink): of the ring's n - 1 steps (2 (n - 1) for an all-reduce) the nodes - 1 (twice as
    many) cross nodes at the NIC's start-up, the rest stay on NVLink."""
    per_node = cluster.gpus_per_node
    n = nodes * per_node
    bw = min(cluster.scaleup.bw_bytes_per_s * eff.scaleup_fraction,
             per_node * cluster.scaleout.bw_bytes_per_s * eff.scaleout_fraction / cluster.oversubscription)
    lat_i, lat_o = cluster.scaleup.latency_s, cluster.scaleout.latency_s
    intra, inter = n - nodes, nodes - 1

    def gather_s(nbytes):
        return ring_s((n - 1) / n * nbytes, intra, inter, bw, lat_i, lat_o, LL_CAP_MANY_NODES)

    def all_reduce_s(nbytes):
        return ring_s(2 * (n - 1) / n * nbytes, 2 * intra, 2 * inter, bw, lat_i, lat_o, LL_CAP_MANY_NODES)
    return gather_s, all_reduce_s
