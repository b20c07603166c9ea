"""Collective times against the alpha-beta formulas derived by hand."""
import numpy as np
import pytest

from cost_models import collectives as coll
from cost_models.topology import group_collective_time_s, group_span
from hardware_specs import load_cluster
from hardware_specs.efficiency_model import EfficiencyModel


def test_ring_allreduce_time_matches_2n_minus_1_over_n_formula():
    # 1 GB over 8 GPUs at 100 GB/s, 5 us per step: 2*7/8 * 1e9/1e11 + 14 * 5e-6
    t = coll.ring_allreduce_time_s(1e9, 8, 100e9, 5e-6)
    assert t == pytest.approx(2 * 7 / 8 * 0.01 + 14 * 5e-6, rel=1e-12)


def test_reduce_scatter_plus_all_gather_equals_ring_allreduce():
    args = (3e8, 16, 50e9, 3e-6)
    assert coll.reduce_scatter_time_s(*args) + coll.all_gather_time_s(*args) == pytest.approx(
        coll.ring_allreduce_time_s(*args), rel=1e-12)


def test_single_gpu_group_costs_nothing():
    assert coll.ring_allreduce_time_s(1e9, 1, 1e9, 1e-5) == 0.0
    assert coll.tree_allreduce_time_s(1e9, 1, 1e9, 1e-5) == 0.0


def test_tree_allreduce_latency_grows_with_log2_n():
    t = coll.tree_allreduce_time_s(0.0, 1024, 1e9, 1e-6)
    assert t == pytest.approx(2 * 10 * 1e-6)


def test_hierarchical_allreduce_with_one_domain_is_the_intra_ring():
    t = coll.hierarchical_allreduce_time_s(1e9, 8, 1, 200e9, 2e-6, 20e9, 5e-6)
    assert t == pytest.approx(coll.ring_allreduce_time_s(1e9, 8, 200e9, 2e-6), rel=1e-12)


def test_group_span_places_tp_inside_and_dp_across_nodes():
    n_intra, n_inter = group_span(8, 1, 8)      # TP group of 8, stride 1
    assert (n_intra, n_inter) == (8, 1)
    n_intra, n_inter = group_span(16, 8, 8)     # DP group with tp=8: one GPU per node
    assert (n_intra, n_inter) == (1, 16)
    n_intra, n_inter = group_span(16, 2, 8)     # stride 2: 4 per node over 4 nodes
    assert (n_intra, n_inter) == (4, 4)


def test_tp_group_inside_a_node_uses_nvlink_and_across_nodes_uses_the_nic():
    cluster = load_cluster("dgx-h100")
    eff = EfficiencyModel("hopper", {"bf16": 0.8}, scaleup_fraction=1.0, scaleout_fraction=1.0)
    inside = group_collective_time_s("all_reduce", 1e8, 8, 1, cluster, eff)
    # 100 MB runs NCCL's Simple protocol: the ring line plus its 8.4 us per-call base latency
    base = 8.4e-6
    assert inside == pytest.approx(coll.ring_allreduce_time_s(1e8, 8, 450e9, cluster.scaleup.latency_s) + base)
    across = group_collective_time_s("all_reduce", 1e8, 16, 1, cluster, eff)
    # across two nodes each node's 8 members drive their 8 NICs (NCCL: one channel per NIC):
    # a flat ring at min(NVLink, 8 x 50 GB/s), or the tree (reduce-scatter in the node, double
    # binary tree across on the 1/8 shard, all-gather in the node); NCCL takes the faster
    lat_i, lat_o = cluster.scaleup.latency_s, cluster.scaleout.latency_s
    # the ring's 15 steps: 1 crosses the node boundary (NIC latency), 14 stay on NVLink (NCCL's
    # tuning model); the all-reduce pays that mean twice over
    lat_ring = (14 * lat_i + 1 * lat_o) / 15
    ring = coll.ring_allreduce_time_s(1e8, 16, min(450e9, 8 * 50e9), lat_ring)
    hier = (coll.reduce_scatter_time_s(1e8, 8, 450e9, lat_i) + coll.ring_allreduce_time_s(1e8 / 8, 2, 50e9, lat_o)
            + coll.all_gather_time_s(1e8, 8, 450e9, lat_i))
    # NCCL's tree: the chain in the node pipelined with the trees across, the buffer up and down
    # once at min(NVLink, 8 NICs) x .92 (tuning.cc@v2.27.7-1), Simple's tree hops
    tree = 2 * 1e8 / (min(450e9, 8 * 50e9) * 0.92) + 2 * (7 * lat_i * 4.0 / 3.4 + 1 * lat_o)
    # 100 MB over two nodes: NCCL's LL128 (120/128 of the bandwidth, hops of 1.9/3.4 of NVLink's
    # and 4.0/14 of the NIC's, 14 us base) beats Simple, whose longer hops cost more than the
    # 6% of bandwidth LL128 gives up: 563.8 us against 571.2 us
    lat_ll128 = (14 * lat_i * 1.9 / 3.4 + 1 * lat_o * 4.0 / 14.0) / 15
    ring_ll128 = coll.ring_allreduce_time_s(1e8, 16, min(450e9, 8 * 50e9) * 120 / 128, lat_ll128) + 14e-6
    assert ring_ll128 == pytest.approx(563.8e-6, abs=0.1e-6) and ring + base == pytest.approx(571.2e-6, abs=0.1e-6)
    assert across == pytest.approx(min(ring + base, ring_ll128, tree + base))
    assert float(group_collective_time_s("all_reduce", 1e8, 16, 1, cluster, eff, "hierarchical")) == pytest.approx(hier)
    # all-gather has no tree in NCCL: the ring over all NICs, n - 1 start-up steps
    ag = group_collective_time_s("all_gather", 1e8, 16, 1, cluster, eff)
    assert ag == pytest.approx(min(coll.all_gather_time_s(1e8, 16, min(450e9, 8 * 50e9), lat_ring) + base,
                                   coll.all_gather_time_s(1e8, 16, min(450e9, 8 * 50e9) * 120 / 128, lat_ll128) + 14e-6))
    assert across > inside
    # a DP group one member per node (stride 8, tp 8) has one NIC per member: a flat ring at 50 GB/s
    # (the tree, 2 x 1e8 / (50e9 x .92) = 4.35 ms, is slower)
    one_per_node = group_collective_time_s("all_reduce", 1e8, 16, 8, cluster, eff)
    assert one_per_node == pytest.approx(coll.ring_allreduce_time_s(1e8, 16, 50e9, lat_o) + base)


def test_all_to_all_splits_traffic_between_tiers():
    # 8 per domain, 2 domains: 7/16 of the data over NVLink, 8/16 over the NIC, at the same time
    t = coll.hierarchical_all_to_all_time_s(1.6e9, 8, 2, 400e9, 0.0, 50e9, 0.0)
    assert t == pytest.approx(max(1.6e9 * 7 / 16 / 400e9, 1.6e9 * 8 / 16 / 50e9))


def test_collectives_accept_numpy_arrays():
    t = coll.ring_allreduce_time_s(np.array([1e6, 1e9]), np.array([2, 8]), 1e10, 0.0)
    assert t.shape == (2,) and t[1] > t[0]


def test_a_flat_ring_over_nodes_pays_the_nic_latency_only_on_the_steps_that_cross_nodes():
    """NCCL's model (nccl v2.8.4-1 tuning.cc): an all-gather over 1,536 ranks on 192 DGX A100
    nodes has 1,535 steps, 191 across nodes at the NIC's 5 us and 1,344 over NVLink at 3 us:
    1,344 x 3 + 191 x 5 = 4,987 us of start-ups for a message too small to count."""
    from cost_models.topology import ring_step_latency_s
    cluster = load_cluster("dgx-a100-80gb")
    eff = EfficiencyModel("ampere", {"bf16": 0.8})
    assert float(ring_step_latency_s(1536, 192, 3e-6, 5e-6)) * 1535 == pytest.approx(4987e-6, rel=1e-12)
    t = group_collective_time_s("all_gather", 1536.0, 1536, 1, cluster, eff)
    # so tiny a message runs NCCL's LL protocol: hops of 3 x 0.6/3.4 us on NVLink, raised to the
    # proxy's 1.0 us net overhead (x 3/3.4, the cluster's scale) on a multi-node ring
    # (tuning.cc@v2.27.7-1 line 353), and 5 x 2.7/14 us across nodes (NCCL's LL/Simple hop
    # ratios), 6.6 us base, at LL's 20.4 GB/s cap; 902.3 us without the overhead floor
    ll = 6.6e-6 + 1344 * 3e-6 * max(0.6, 1.0) / 3.4 + 191 * 5e-6 * 2.7 / 14 + 1535 / 1536 * 1536.0 / 20.4e9
    assert float(t) == pytest.approx(ll, rel=1e-9)
    # ll = 1376.7 us
    # one member per node: every step crosses a node
    assert float(ring_step_latency_s(16, 16, 3e-6, 5e-6)) == pytest.approx(5e-6)


def test_one_communicator_on_jean_zay_reaches_the_bus_bandwidth_bigscience_measured_there():
    """BigScience's all_reduce_bench on Jean Zay's A100 partition (bigscience@9e64ede
    experiments/bandwidth/all_reduce_bench-a100-n4.txt, NCCL 2.10.3 over Omni-Path): a 4.0 GB
    fp32 all-reduce over 32 ranks on 4 nodes took a median 1.529 s. The cluster file states the
    5.07 GB/s that gives; a ring of 8 members per node is bound by it, not by the node's 8 NIC
    shares (8 x 50 Gb/s x 0.85 = 42.5 GB/s), so the time is 2 x 31/32 x 4e9 / 5.07e9 = 1.52860 s
    plus twice 31 start-ups (3 of them across nodes at 5 us, 28 on NVLink at 3 us) and Simple's
    8.4 us base: 1.52881 s, within 0.02% of the measured 1.529 s."""
    cluster = load_cluster("jean-zay-a100")
    eff = EfficiencyModel(generation="ampere", gemm_peak_fraction={"bf16": 0.7}, scaleout_fraction=0.85)
    assert cluster.scaleout.communicator_bus_bw_bytes_per_s == 5.07e9
    t = float(group_collective_time_s("all_reduce", 4e9, 32, 1, cluster, eff, algorithm="ring"))
    expected = 2 * 31 / 32 * 4e9 / 5.07e9 + 2 * (3 * 5e-6 + 28 * 3e-6) + 8.4e-6
    assert t == pytest.approx(expected, rel=1e-6)
    assert t == pytest.approx(1.529, rel=2e-3)
    # without the measured cap the same ring would take 2 x 31/32 x 4e9 / 42.5e9 = 0.182 s
    from dataclasses import replace
    uncapped = replace(cluster, scaleout=replace(cluster.scaleout, communicator_bus_bw_bytes_per_s=None))
    t_links = float(group_collective_time_s("all_reduce", 4e9, 32, 1, uncapped, eff, algorithm="ring"))
    assert t_links == pytest.approx(2 * 31 / 32 * 4e9 / (8 * 50e9 / 8 * 0.85), rel=2e-3)


def test_separate_communicators_each_keep_their_own_cap_and_their_trees_share_it():
    """The cap is per communicator: a data-parallel group with one member per node (stride 8)
    runs at the smaller of its member's NIC share and the cap, min(50 Gb/s x 0.85 = 5.3125, 5.07)
    GB/s, whatever the other groups on the node do; a group with 4 members per node is bound by
    the cap, not by 4 NICs (21.25 GB/s); and the tree's 4 per-member trees across nodes share the
    cap (5.07 / 4 GB/s each), so at 1 GB the ring (2 x 7/8 x 1e9 / 5.07e9 = 0.345 s) still wins."""
    cluster = load_cluster("jean-zay-a100")
    eff = EfficiencyModel(generation="ampere", gemm_peak_fraction={"bf16": 0.7}, scaleout_fraction=0.85)
    one_per_node = float(group_collective_time_s("all_reduce", 1e9, 8, 8, cluster, eff, algorithm="ring"))
    assert one_per_node == pytest.approx(2 * 7 / 8 * 1e9 / 5.07e9, rel=1e-3)
    four_per_node = float(group_collective_time_s("all_reduce", 1e9, 8, 2, cluster, eff, algorithm="ring"))
    assert four_per_node == pytest.approx(2 * 7 / 8 * 1e9 / 5.07e9, rel=1e-3)
    # the tree (NCCL's model, tuning.cc@v2.27.7-1): the chain over 4 on NVLink (300 GB/s x 0.8)
    # pipelined with the 4 member trees across 2 nodes, which share the 5.07 GB/s cap: bus
    # bandwidth min(240, 4 x 5.07 / 4) x .92 on Simple, the buffer up and down once, plus
    # 8.4 us base and 2 (3 x 4.0/3.4 x 3 us + log2(2) x 5 us)
    tree = float(group_collective_time_s("all_reduce", 1e9, 8, 2, cluster, eff, algorithm="tree"))
    assert tree == pytest.approx(2 * 1e9 / (5.07e9 * 0.92) + 8.4e-6 + 2 * (3 * 4.0 / 3.4 * 3e-6 + 5e-6), rel=1e-6)
    auto = float(group_collective_time_s("all_reduce", 1e9, 8, 2, cluster, eff))
    assert auto == pytest.approx(min(four_per_node, tree), rel=1e-9)


def test_a_what_if_scaleout_bandwidth_scales_the_fabrics_measured_communicator_bandwidth():
    """The 5.07 GB/s was measured on Jean Zay's 50 Gb/s a GPU; a what-if of 200 Gb/s keeps the
    fabric's measured shortfall, 4 x 5.07 = 20.28 GB/s of bus bandwidth (below the links' 25e9 x
    0.85 = 21.25): the ring of 8 one-per-node members moves 2 x 7/8 x 1e9 bytes at it plus
    start-ups, 4.0x faster than the catalog's (dropping the measurement instead made the
    catalog's own 50 Gb/s faster than the catalog)."""
    from paraplan.api import what_if_cluster
    eff = EfficiencyModel(generation="ampere", gemm_peak_fraction={"bf16": 0.7}, scaleout_fraction=0.85)
    faster = what_if_cluster("jean-zay-a100", scaleout_gbit_per_s=200)
    assert faster.scaleout.communicator_bus_bw_bytes_per_s == pytest.approx(4 * 5.07e9)
    t = float(group_collective_time_s("all_reduce", 1e9, 8, 8, faster, eff, algorithm="ring"))
    assert t == pytest.approx(2 * 7 / 8 * 1e9 / (4 * 5.07e9), rel=2e-3)
    base = float(group_collective_time_s("all_reduce", 1e9, 8, 8, what_if_cluster("jean-zay-a100"), eff,
                                         algorithm="ring"))
    assert base / t == pytest.approx(4.0, rel=1e-2)
    assert what_if_cluster("jean-zay-a100", gpu="h100-sxm-80gb").scaleout.communicator_bus_bw_bytes_per_s == 5.07e9


def test_tp_groups_tile_a_domain_when_tp_divides_it_or_is_a_multiple_of_it_or_one_domain_holds_the_job():
    from cost_models.topology import tp_tiles_node
    tp = np.array([1, 2, 3, 4, 6, 8, 12, 16])
    assert tp_tiles_node(6, tp).tolist() == [True, True, True, False, True, False, True, False]
    assert tp_tiles_node(6, tp, 12).tolist() == [True, True, True, False, True, False, True, False]
    assert tp_tiles_node(6, 4, 6) and tp_tiles_node(72, 16, 64) and not tp_tiles_node(72, 16, 144)
