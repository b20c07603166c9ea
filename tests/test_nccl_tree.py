"""The tree all-reduce as NCCL's tuner models it (NVIDIA/nccl@v2.27.7-1 src/graph/tuning.cc): the
intra-node chain pipelined with the inter-node double binary trees, not a reduce-scatter, a tree
and an all-gather added one after the other."""
import dataclasses

import numpy as np
import pytest

from cost_models import topology as T
from hardware_specs.catalog import load_cluster, load_efficiency

S = 64 * 2**20


def _ar(cluster, n, stride=1, size=S, algorithm="auto"):
    eff = load_efficiency(cluster.gpu.generation)
    return float(T.group_collective_time_s("all_reduce", size, n, stride, cluster, eff, algorithm))


def test_64_mib_over_1024_h100_by_hand():
    """128 DGX H100 nodes. Bus bandwidth: min(NVLink 450 x .8, 8 NICs x 50 x .85) = 340 GB/s,
    x .92 (line 281); LL128 x 120/128 (line 283) = 293.25 GB/s, the buffer up and down once
    (algbw = busBw x .5, line 325): 2 x 67,108,864 / 293.25e9 = 457.69 us. Latency (lines
    357-361): baseLat 14 + 2 (7 x 1.25/3.4 x 3 us + log2(128) = 7 x 8.5/14 x 5 us) = 71.94 us.
    Simple: 2 S / (340e9 x .92) + 8.4 + 2 (7 x 4.0/3.4 x 3 + 7 x 5) us = 556.9 us. NCCL's size
    correction (line 569, log2(64 MiB / 64) = 20: LL128 .9, Simple .8) divides the bandwidth
    terms: LL128 457.69 / .9 + 71.94 = 580.5 us, Simple 429.08 / .8 + 127.8 = 664.2 us; LL128
    wins. The old sum (reduce-scatter + tree on the 1/8 shard + all-gather) gave 841 us."""
    c = load_cluster("dgx-h100")
    ll128 = 2 * S / (340e9 * 0.92 * 120 / 128 * 0.9) + 14e-6 + 2 * (7 * 1.25 / 3.4 * 3e-6 + 7 * 8.5 / 14 * 5e-6)
    # ll128 = 580.5 us; Simple: 2 * S / (340e9 * 0.92 * 0.8) + 8.4e-6 + 2 * (7 * 4.0 / 3.4 * 3e-6 + 7 * 5e-6)
    # = 664.2 us
    assert _ar(c, 1024, algorithm="tree") == pytest.approx(ll128, rel=1e-9)
    assert _ar(c, 1024) == pytest.approx(ll128, rel=1e-9)            # the ring: 3.80 ms
    assert _ar(c, 1024, algorithm="ring") > 3.7e-3


def test_one_gpu_per_node_tree_is_the_nic_at_92_percent():
    """A data-parallel group one member per node (stride 8): no chain, the tree on each NIC; at
    1 GiB (past the size correction) 2 S / (42.5e9 x .92) on Simple plus 8.4 + 2 log2(16) x 5 us."""
    c = load_cluster("dgx-h100")
    big = 2.0**30
    assert _ar(c, 16, 8, big, algorithm="tree") == pytest.approx(2 * big / (42.5e9 * 0.92) + 8.4e-6 + 2 * 4 * 5e-6,
                                                                  rel=1e-9)


def test_two_full_nodes_run_1_gib_on_the_ring():
    """16 H100 on 2 DGX nodes, 1 GiB on Simple. Ring: 2 x 15/16 x S over min(450 x .8, 8 NICs x
    50 x .85) = 340 GB/s, 30 steps of (14 x 3 + 1 x 5) / 15 us, 8.4 us base: 6.024 ms. Tree (the
    chain moves the whole buffer up and down): 2 S / (340 GB/s x .92) + 8.4 + 2 (7 x 4.0/3.4 x 3
    + 1 x 5) us: 6.933 ms. The ring wins (the tree wins over 128 nodes: the test above)."""
    c = load_cluster("dgx-h100")
    big = 2.0**30
    ring = 2 * 15 / 16 * big / 340e9 + 2 * (14 * 3e-6 + 5e-6) + 8.4e-6
    tree = 2 * big / (340e9 * 0.92) + 8.4e-6 + 2 * (7 * 4.0 / 3.4 * 3e-6 + 5e-6)
    assert _ar(c, 16, 1, big, "ring") == pytest.approx(ring, rel=1e-9)
    assert _ar(c, 16, 1, big, "tree") == pytest.approx(tree, rel=1e-9)
    assert _ar(c, 16, 1, big) == pytest.approx(ring, rel=1e-9)


def test_size_correction_steps_never_make_a_bigger_message_faster():
    """Simple's factor rises .5 -> .6 at 4 MiB (64 x 2^16): 4 MiB costs no less than 4 MiB - 1
    (each protocol's time is held at its running maximum)."""
    c = load_cluster("dgx-h100")
    edge = 64.0 * 2**16
    below, at = _ar(c, 16, 8, edge - 1, "tree"), _ar(c, 16, 8, edge, "tree")
    assert at >= below
    # and every edge of every protocol's table, on both sides
    for k in range(0, 25):
        e = 64.0 * 2**k
        t = [_ar(c, 16, 8, x, "tree") for x in (e - 1, e, e + 1)]
        assert t[0] <= t[1] <= t[2], k


def test_a_non_nccl_accelerator_gets_the_plain_tree():
    """MI300X (no NCCL protocols): the link's bandwidth, the cluster's own hop latencies, no base:
    2 S / min(448 x .8, 8 x 50 x f_o) + 2 (7 x 3 us + log2(4) x 5 us)."""
    c = load_cluster("mi300x-node")
    eff = load_efficiency(c.gpu.generation)
    bw = min(448e9 * eff.scaleup_fraction, 8 * 50e9 * eff.scaleout_fraction)
    assert _ar(c, 32, algorithm="tree") == pytest.approx(2 * S / bw + 2 * (7 * 3e-6 + 2 * 5e-6), rel=1e-9)


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-a100-80gb", "gb200-nvl72", "jean-zay-a100", "mi300x-node"])
def test_invariants(name):
    c = load_cluster(name)
    node = c.gpus_per_node
    sizes = [2.0**k for k in range(8, 33)]
    shapes = [(node * 2, 1), (node * 16, 1), (node * 128, 1), (16, node), (256, node), (node * 4, 2)]
    for n, stride in shapes:
        for algorithm in ("tree", "ring", "auto"):
            t = [_ar(c, n, stride, s, algorithm) for s in sizes]
            assert all(a <= b for a, b in zip(t, t[1:])), (n, stride, algorithm)      # bigger message never faster
        for s in (2.0**12, 2.0**20, 2.0**28):
            faster = dataclasses.replace(c, scaleout=dataclasses.replace(c.scaleout, bw_bytes_per_s=c.scaleout.bw_bytes_per_s * 2))
            assert _ar(faster, n, stride, s) <= _ar(c, n, stride, s)                 # more bandwidth never slower
    for s in (2.0**12, 2.0**20, 2.0**28):                                             # bigger group never faster
        for stride, sizes_n in ((1, [node * k for k in (1, 2, 4, 16, 64, 128)]), (node, [2, 4, 16, 64, 256])):
            t = [_ar(c, n, stride, s) for n in sizes_n]
            assert all(a <= b * (1 + 1e-12) for a, b in zip(t, t[1:])), (stride, s, t)
