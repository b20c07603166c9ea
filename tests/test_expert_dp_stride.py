"""The expert-data-parallel group is placed as Megatron-Core places it: expert tensor and expert
parallelism vary fastest (``RankGenerator(tp=etp, ep=ep, dp=edp, order="tp-ep-dp-pp")``,
NVIDIA/Megatron-LM@d98e8a64 megatron/core/parallel_state.py), so its members are ``etp * ep``
ranks apart, not ``tp * ep``: with tp 4, ep 2, etp 1 on 8-GPU nodes, 4 of them share a node and
the ring crosses nodes on 4 NICs at once, not on one."""
import pytest

from cost_models.topology import group_collective_time_s, group_span
from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from paraplan import api
from simulator.step_model import expert_dp_stride


def test_expert_dp_members_are_etp_times_ep_ranks_apart():
    assert float(expert_dp_stride(2, 1)) == 2.0
    assert float(expert_dp_stride(4, 2)) == 8.0
    # 8-GPU node, stride 2: ranks 0, 2, 4, 6 of a node; 128 members on 32 nodes
    n_intra, n_inter = group_span(128, expert_dp_stride(2, 1), 8)
    assert (float(n_intra), float(n_inter)) == (4.0, 32.0)


def test_expert_dp_ring_runs_on_four_nics():
    """A 4-byte reduce-scatter of E expert elements over those 128 ranks: (127/128) x 4E bytes at
    4 NICs x 50 GB/s x the fabric's 0.85 achieved share (dgx-h100 cluster and efficiency files;
    the latency, 127 ring steps of microseconds, is below 0.5% of it)."""
    cluster = load_cluster("dgx-h100")
    eff = efficiency_for_cluster(cluster)
    assert cluster.scaleout.bw_bytes_per_s == 50e9 and eff.scaleout_fraction == 0.85
    e = 22_548_578_304.0
    t = float(group_collective_time_s("reduce_scatter", 4.0 * e, 128, expert_dp_stride(2, 1), cluster, eff))
    assert t == pytest.approx(127.0 / 128.0 * 4.0 * e / (4 * 50e9 * 0.85), rel=5e-3)


def test_the_step_reduces_the_expert_gradients_on_the_expert_dp_placement():
    """mixtral-8x7b, 256 H100, tp 4, pp 1, ep 2, etp 1, ZeRO-1 on megatron-core (reduce-scatter
    of fp32 gradients, gather of the bf16 weights): the after-flush traffic is the dense part over
    the dp 64 group (tp = 4 apart) plus the expert part over the edp 64 x 4 / 2 = 128 group, 2
    ranks apart."""
    report, _, _ = api.simulate_report("mixtral-8x7b", "dgx-h100", gpus=256, tp=4, pp=1, ep=2, etp=1,
                                       global_batch=256, seq_len=4096, zero_stage=1, sequence_parallel=True,
                                       recompute="full")
    cluster = load_cluster("dgx-h100")
    eff = efficiency_for_cluster(cluster)
    p, e = report.extras["params_local"], report.extras["expert_params_local"]

    def traffic(expert_stride):
        return sum(float(group_collective_time_s(kind, nbytes, n, stride, cluster, eff)) for kind, nbytes, n, stride in (
            ("reduce_scatter", 4.0 * p, 64, 4), ("all_gather", 2.0 * p, 64, 4),
            ("reduce_scatter", 4.0 * e, 128, expert_stride), ("all_gather", 2.0 * e, 128, expert_stride)))

    assert report.extras["dp_comm_total_s"] == pytest.approx(traffic(2), rel=1e-9)
    # the old tp x ep = 8 stride put one member on each node: one NIC, about 4x slower
    assert traffic(8) > 2.5 * traffic(2)
