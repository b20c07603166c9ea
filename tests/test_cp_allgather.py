"""All-gather context parallelism (Llama 3 paper, arXiv 2407.21783, section 3.3.2), by hand.

The toy cluster of ``test_moe_and_cp`` (400 GB/s NVLink, 50 GB/s NIC, 8 GPUs a node, zero
latency, efficiency 1) makes every collective time bytes / bandwidth.
"""
from __future__ import annotations

import numpy as np
import pytest

from cost_models import context_parallel as cpm
from model_specs import load_model
from simulator.parallel_config import CPKind, ParallelConfig
from toy_hardware import NIC, NVLINK, toy_cluster, toy_efficiency

MIB = 2**20


@pytest.fixture(scope="module")
def cluster():
    return toy_cluster()


@pytest.fixture(scope="module")
def eff():
    return toy_efficiency()


def test_allgather_is_a_cp_kind():
    assert CPKind("allgather") is CPKind.ALLGATHER
    assert ParallelConfig(dp=1, tp=2, pp=1, cp=4, cp_kind="allgather").cp_kind is CPKind.ALLGATHER


def test_allgather_time_is_bytes_over_bus_bandwidth(cluster, eff):
    # Llama 3 8B: 8 K/V heads x 128; tp 2 -> 4 a rank; seq 8192 over cp 4 -> 2048 tokens a rank.
    # One rank's K and V: 2048 x 4 x (128 + 128) x 2 B = 4 MiB; gathered: cp x 4 MiB = 16 MiB.
    m = load_model("llama3-8b")
    step = cpm.ring_attention_step_bytes(m, 2048, tp=2)
    assert step == 4 * MIB
    assert cpm.allgather_kv_bytes(step, 4) == 16 * MIB
    # cp 4 at stride tp 2: 8 ranks, one node -> NVLink. Ring all-gather: each GPU receives
    # (cp-1)/cp of the 16 MiB: 12 MiB / 400e9 = 3.1457e-5 s forward; backward the all-gather
    # again plus the reduce-scatter of the 16 MiB dK/dV, twice that.
    fwd, bwd = cpm.allgather_attention_time_s(step, 4, 2, cluster, eff)
    assert fwd == pytest.approx(12 * MIB / NVLINK)
    assert bwd == pytest.approx(2 * 12 * MIB / NVLINK)
    # cp 16 at stride tp 8: every member on its own node -> the NIC: 60 MiB / 50e9
    fwd16, _ = cpm.allgather_attention_time_s(step, 16, 8, cluster, eff)
    assert fwd16 == pytest.approx(15 * 4 * MIB / NIC)
    # the transient: gathered K/V plus the gathered-size dK/dV, 2 x 16 MiB
    assert cpm.allgather_buffer_bytes(step, 4) == 32 * MIB


def test_allgather_moves_what_the_ring_does_once_all_exposed_no_ring_kernels(cluster, eff, ):
    # invariant: all-gather CP receives (cp-1)/cp of cp blocks, (cp-1) blocks a pass, the bytes of
    # the ring's cp-1 steps; the ring hides its steps behind attention, the all-gather does not,
    # and the all-gather runs one attention call (no extra launches or partial-output merges)
    from cost_models.compute import compute_rates
    m = load_model("llama3-70b")
    rates = compute_rates(cluster.gpu, eff, "bf16")
    for cp in (2, 4, 8, 16):
        step = cpm.ring_attention_step_bytes(m, 8192, tp=8)
        ring_fwd, ring_bwd = cpm.ring_attention_volume_bytes(step, cp)
        assert (cp - 1) / cp * cpm.allgather_kv_bytes(step, cp) == pytest.approx(ring_fwd)
        assert 2 * (cp - 1) / cp * cpm.allgather_kv_bytes(step, cp) == pytest.approx(ring_bwd)
        args = dict(tokens_local=8192, cp=cp, tp=8, core_fwd_s=1e-2, core_bwd_s=2.5e-2, cluster=cluster,
                    eff=eff, rates=rates)
        ag = cpm.context_parallel_costs(m, "allgather", **args)
        ring = cpm.context_parallel_costs(m, "ring", **args)
        assert ag["fwd_exposed_s"] == ag["fwd_s"] > 0 and ag["bwd_exposed_s"] == ag["bwd_s"] > 0
        assert ring["fwd_exposed_s"] == 0.0           # 1e-2 s of attention hides every step
        assert ag["allgather_bytes"] == cp * step and ag["ring_step_bytes"] == 0
        assert ag["fwd_compute_s"] == 0 and ag["bwd_compute_s"] == 0
    # vectorised beside the other kinds, and nothing at cp 1
    many = cpm.context_parallel_costs(m, np.array([0, 3, 3]), 8192, np.array([16, 16, 1]), 8, 1e-3, 2e-3,
                                      cluster, eff)
    assert many["fwd_s"][1] == pytest.approx(15 * 4 * MIB / NIC) and many["fwd_s"][2] == 0.0
