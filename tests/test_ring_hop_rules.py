"""Ring hop latencies as NVIDIA/nccl@v2.27.7-1 src/graph/tuning.cc charges them: with one rank per
node the network hop is the tree's (line 332), and on a multi-node ring an NVLink hop costs at
least the proxy's net overhead (line 353). Hand-derived on dgx-h100 (NVLink 3 us, NIC 5 us:
NCCL's 3.4 us and 14 us Simple hops scaled to them), messages of 1 KiB (LL wins)."""
import pytest

from cost_models import topology as T
from hardware_specs.catalog import load_cluster, load_efficiency

C = load_cluster("dgx-h100")
EFF = load_efficiency(C.gpu.generation)
S = 1024.0


def _t(kind, n, stride, size=S, algorithm="auto"):
    return float(T.group_collective_time_s(kind, size, n, stride, C, EFF, algorithm))


def test_one_rank_per_node_pays_the_tree_network_hop():
    """16 ranks on 16 nodes: 15 steps, all across nodes at LL's tree network hop 5.0 us (x 5/14),
    not the ring's 2.7; 6.6 us base; the bytes at LL's 20.4 GB/s cap: 33.4 us (21.1 before)."""
    ll = 6.6e-6 + 15 * 5e-6 * 5.0 / 14 + 15 / 16 * S / 20.4e9
    assert _t("all_gather", 16, 8) == pytest.approx(ll, rel=1e-9)
    # ll = 33.44 us


def test_a_multi_node_rings_nvlink_hop_pays_at_least_the_net_overhead():
    """16 ranks on 2 nodes: 14 NVLink steps at max(0.6, 1.0)/3.4 x 3 us, 1 NIC step at 2.7/14 x 5 us,
    6.6 us base, LL capped at 39 GB/s over two nodes: 19.94 us (15.0 with the bare 0.6 hop)."""
    ll = 6.6e-6 + 14 * 3e-6 * 1.0 / 3.4 + 5e-6 * 2.7 / 14 + 15 / 16 * S / 39e9
    assert _t("all_gather", 16, 1) == pytest.approx(ll, rel=1e-9)
    # ll = 19.94 us


def test_a_ring_inside_one_node_keeps_the_bare_nvlink_hop():
    """No network, no proxy: 7 steps at 0.6/3.4 x 3 us, 6.6 us base, LL at Hopper's 141 GB/s cap."""
    assert _t("all_gather", 8, 1) == pytest.approx(6.6e-6 + 7 * 3e-6 * 0.6 / 3.4 + 7 / 8 * S / 141e9, rel=1e-9)


def test_invariants():
    sizes = [2.0**k for k in range(6, 31)]
    for kind in ("all_gather", "reduce_scatter", "all_reduce"):
        for n, stride in ((16, 1), (16, 8), (64, 8), (1024, 1), (512, 2)):
            t = [_t(kind, n, stride, s) for s in sizes]
            assert all(a <= b for a, b in zip(t, t[1:])), (kind, n, stride)          # bigger message never faster
        for s in (S, 2.0**20, 2.0**28):
            one = [_t(kind, n, 8, s) for n in (2, 4, 16, 64, 256)]                 # bigger group never faster
            assert all(a <= b for a, b in zip(one, one[1:])), (kind, s)
            full = [_t(kind, n, 1, s) for n in (8, 16, 64, 256, 1024)]
            assert all(a <= b for a, b in zip(full, full[1:])), (kind, s)


def test_one_rank_per_node_all_reduce_of_1_kib_runs_the_tree():
    """16 ranks on 16 nodes, 1 KiB on LL. Ring: 30 steps at the tree network hop 5.0/14 x 5 us,
    6.6 us base, 2 x 15/16 x S at LL's 20.4 GB/s: 60.27 us. Tree: 6.8 us base + 2 log2(16) hops of
    the same 5.0/14 x 5 us, 2 S at 42.5 GB/s x .92 / 3.8 x .9 (1 KiB's size correction): 21.31 us.
    NCCL runs the tree."""
    ring = 6.6e-6 + 30 * 5e-6 * 5.0 / 14 + 2 * 15 / 16 * S / 20.4e9
    tree = 6.8e-6 + 2 * 4 * 5e-6 * 5.0 / 14 + 2 * S / (42.5e9 * 0.92 / 3.8 * 0.9)
    assert _t("all_reduce", 16, 8, algorithm="ring") == pytest.approx(ring, rel=1e-9)
    assert _t("all_reduce", 16, 8, algorithm="tree") == pytest.approx(tree, rel=1e-9)
    assert _t("all_reduce", 16, 8) == pytest.approx(tree, rel=1e-9)
