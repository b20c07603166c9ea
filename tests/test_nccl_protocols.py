"""NCCL's protocol envelope (cost_models.nccl_protocols) against times derived by hand from
NCCL's tuning constants (NVIDIA/nccl@v2.27.7-1 src/graph/tuning.cc)."""
import numpy as np
import pytest

from cost_models import nccl_protocols as nccl
from cost_models import collectives as coll
from cost_models.topology import group_collective_time_s
from hardware_specs import load_cluster
from hardware_specs.efficiency_model import EfficiencyModel

MiB = 1048576.0
A100_EFF = EfficiencyModel("ampere", {"bf16": 0.8}, scaleup_fraction=0.8, scaleout_fraction=0.8)


def _a100_all_reduce_us(nbytes, n):
    cluster = load_cluster("dgx-a100-80gb")       # NVLink 300 GB/s x 0.8 = 240 GB/s, 3 us a hop
    return float(group_collective_time_s("all_reduce", nbytes, n, 1, cluster, A100_EFF)) * 1e6


def test_ll_reaches_half_the_link_capped_per_generation_and_node_count():
    assert float(nccl.protocol_bus_bw(nccl.LL, 240e9, 1, "ampere")) == pytest.approx(87.7e9)   # 120 > 87.7 cap
    assert float(nccl.protocol_bus_bw(nccl.LL, 100e9, 1, "hopper")) == pytest.approx(50e9)     # under the 141 cap
    assert float(nccl.protocol_bus_bw(nccl.LL, 240e9, 2, "ampere")) == pytest.approx(39.0e9)
    assert float(nccl.protocol_bus_bw(nccl.LL, 240e9, 16, "ampere")) == pytest.approx(20.4e9)
    assert float(nccl.protocol_bus_bw(nccl.LL128, 240e9, 1, "ampere")) == pytest.approx(225e9)  # 120/128
    assert float(nccl.protocol_bus_bw(nccl.SIMPLE, 240e9, 16, "ampere")) == pytest.approx(240e9)


def test_only_nvidia_generations_run_nccl_protocols():
    assert nccl.protocols_for("ampere") == (nccl.LL, nccl.LL128, nccl.SIMPLE)
    assert nccl.protocols_for("tpu-v4") == nccl.PLAIN
    # a TPU pod keeps the single alpha-beta line: no base latency, no LL
    cluster = load_cluster("tpu-v4-pod")
    eff = EfficiencyModel("tpu-v4", {"bf16": 0.8}, scaleup_fraction=1.0)
    t = float(group_collective_time_s("all_reduce", 1e6, 8, 1, cluster, eff))
    # tp 8 along one axis of the 16 x 16 x 16 torus: 2 of the chip's 6 links (tests/test_torus_links.py)
    two_links = 2 * cluster.scaleup.bw_bytes_per_s / 6
    assert t == pytest.approx(float(coll.ring_allreduce_time_s(1e6, 8, two_links, cluster.scaleup.latency_s)))


def test_one_mib_all_reduce_on_eight_a100_runs_ll():
    # LL: 6.6 us base + 14 hops x 3 x 0.6/3.4 us + 2*7/8 MiB at 87.7 GB/s
    ll = 6.6 + 14 * 3 * 0.6 / 3.4 + 2 * 7 / 8 * MiB / 87.7e9 * 1e6          # 34.93 us
    ll128 = 14.0 + 14 * 3 * 1.9 / 3.4 + 2 * 7 / 8 * MiB / 225e9 * 1e6        # 45.63 us
    simple = 8.4 + 14 * 3 + 2 * 7 / 8 * MiB / 240e9 * 1e6                    # 58.05 us
    assert ll < ll128 < simple
    assert _a100_all_reduce_us(MiB, 8) == pytest.approx(ll, rel=1e-9)
    assert ll == pytest.approx(34.93, abs=0.01)


def test_four_mib_all_reduce_on_eight_a100_runs_ll128():
    ll = 6.6 + 14 * 3 * 0.6 / 3.4 + 2 * 7 / 8 * 4 * MiB / 87.7e9 * 1e6      # 97.70 us
    ll128 = 14.0 + 14 * 3 * 1.9 / 3.4 + 2 * 7 / 8 * 4 * MiB / 225e9 * 1e6    # 70.09 us
    simple = 8.4 + 14 * 3 + 2 * 7 / 8 * 4 * MiB / 240e9 * 1e6                # 80.98 us
    assert ll128 < simple < ll
    assert _a100_all_reduce_us(4 * MiB, 8) == pytest.approx(ll128, rel=1e-9)
    assert ll128 == pytest.approx(70.09, abs=0.01)


def test_large_all_reduce_runs_simple_and_pays_its_base_latency():
    simple = 8.4 + 14 * 3 + 2 * 7 / 8 * 256 * MiB / 240e9 * 1e6             # 2007.6 us
    assert _a100_all_reduce_us(256 * MiB, 8) == pytest.approx(simple, rel=1e-9)


def test_two_gpu_all_reduce_pays_the_per_call_base_latency():
    # 2 MiB over 2 GPUs: Simple, 8.4 + 2 x 3 us + 2 MiB / 240 GB/s = 23.14 us (the alpha-beta
    # line alone, without NCCL's base latency, gave 14.74 us)
    assert _a100_all_reduce_us(2 * MiB, 2) == pytest.approx(8.4 + 6.0 + 2 * MiB / 240e9 * 1e6, rel=1e-9)


def test_envelope_never_exceeds_the_simple_line_and_grows_with_size():
    sizes = np.geomspace(1e3, 1e9, 25)
    cluster = load_cluster("dgx-h100")
    eff = EfficiencyModel("hopper", {"bf16": 0.8}, scaleup_fraction=0.8)
    for n in (2, 4, 8):
        t = group_collective_time_s("all_reduce", sizes, n, 1, cluster, eff)
        simple = coll.ring_allreduce_time_s(sizes, n, 450e9 * 0.8, cluster.scaleup.latency_s) + 8.4e-6
        assert np.all(t <= simple + 1e-15)
        assert np.all(np.diff(t) > 0)
