"""A job's GPUs share the host of their node, not the node's other GPUs: the host Adam step of
an optimizer-offloading job runs at the host memory bandwidth divided among the job's GPUs on
the node (min(world, gpus_per_node)), and the host memory it needs is its GPUs' share, so a
1-GPU ZeRO-Offload run (Ren et al. 2021, "ZeRO-Offload", section 5: one GPU and its host's CPU)
has the whole host to itself."""
from __future__ import annotations

from dataclasses import replace

import pytest

from hardware_specs.catalog import load_cluster
from model_specs import ModelSpec
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate

H, A, S = 1024, 16, 2048
MODEL = ModelSpec("gpt-8x1024", 8, H, A, A, 4 * H, 32000, S)
DGX = load_cluster("dgx-h100")        # 8 GPUs a node, 614.4 GB/s of host memory bandwidth
HOST_ADAM_BYTES = 28.0                 # fp32 weight, gradient, m, v read; weight, m, v written


def _faster_host(cluster, factor):
    return replace(cluster, host=replace(cluster.host, memory_bw_bytes_per_s=cluster.host.memory_bw_bytes_per_s * factor))


@pytest.mark.parametrize("dp, sharers", [(1, 1), (2, 2), (4, 4), (16, 8)])
def test_the_host_adam_step_divides_the_host_bandwidth_among_the_job_s_gpus_on_a_node(dp, sharers):
    # ZeRO-0 keeps the whole optimizer on every GPU, so each GPU's host step moves 28 bytes for
    # each of the model's P parameters whatever dp is. Doubling the host bandwidth B takes
    # 28 P sharers / B - 28 P sharers / (2 B) = 14 P sharers / B off the step, and nothing else
    # (the copies over PCIe and the backward window do not change)
    config = ParallelConfig(dp=dp, pp=1, micro_batch=1, global_batch=dp, zero_stage=0, offload_optimizer_fraction=1.0)
    base = simulate(MODEL, DGX, config)
    fast = simulate(MODEL, _faster_host(DGX, 2.0), config)
    params = base.extras["host_memory_bytes"] / 16.0          # 16 host bytes a parameter (fp32 master, m, v, grad)
    saved = base.time_breakdown_s["offload_exposed_s"] - fast.time_breakdown_s["offload_exposed_s"]
    assert saved == pytest.approx(HOST_ADAM_BYTES / 2.0 * params * sharers / DGX.host.memory_bw_bytes_per_s, rel=1e-9)
    assert base.step_time_s - fast.step_time_s == pytest.approx(saved, rel=1e-9)


@pytest.mark.parametrize("dp, sharers", [(1, 1), (4, 4), (16, 8)])
def test_the_host_memory_a_job_needs_on_a_node_is_its_own_gpus_share(dp, sharers):
    config = ParallelConfig(dp=dp, pp=1, micro_batch=1, global_batch=dp, zero_stage=0, offload_optimizer_fraction=1.0)
    report = simulate(MODEL, DGX, config)
    assert report.extras["host_memory_node_bytes"] == pytest.approx(report.extras["host_memory_bytes"] * sharers, rel=1e-12)
    # a host holding 1.5 GPUs' worth fits a 1-GPU job and refuses a 2-GPU one
    one_and_a_half = replace(DGX, host=replace(DGX.host, memory_bytes=1.5 * report.extras["host_memory_bytes"]))
    assert simulate(MODEL, one_and_a_half, replace(config, dp=1, global_batch=1)).fits
    assert not simulate(MODEL, one_and_a_half, replace(config, dp=2, global_batch=2)).fits


GB200 = load_cluster("gb200-nvl72")    # one 72-GPU node: 18 trays of 4 GPUs and 2 Grace CPUs each;
                                        # the file states the rack's 36 Graces: 16,093 GiB, 18,400 GB/s


def test_a_job_on_part_of_a_gb200_rack_has_its_trays_share_of_the_rack_s_host():
    # 4 GPUs = one tray = 1/18 of the rack's host: 18,400 / 18 = 1,022.2 GB/s for its 4 GPUs,
    # 255.6 GB/s each (not 18,400 / 4); 16,093 / 18 = 894.1 GiB of host memory
    from simulator.config_batch import node_host_share
    assert node_host_share(4, 72, 4) == pytest.approx(1 / 18)
    assert node_host_share(6, 72, 4) == pytest.approx(2 / 18)         # two trays, partly used
    assert node_host_share(72, 72, 4) == 1.0 and node_host_share(3, 8, None) == 1.0
    config = ParallelConfig(dp=4, pp=1, micro_batch=1, global_batch=4, zero_stage=0, offload_optimizer_fraction=1.0)
    base = simulate(MODEL, GB200, config)
    fast = simulate(MODEL, _faster_host(GB200, 2.0), config)
    params = base.extras["host_memory_bytes"] / 16.0
    per_gpu_bw = 18400e9 / 18 / 4
    saved = base.time_breakdown_s["offload_exposed_s"] - fast.time_breakdown_s["offload_exposed_s"]
    assert saved == pytest.approx(HOST_ADAM_BYTES * params / per_gpu_bw / 2.0, rel=1e-9)


def test_a_4_gpu_job_on_a_gb200_rack_fits_one_tray_s_host_memory_not_the_rack_s():
    tray_gib = GB200.host.memory_bytes / 18 / 2**30
    assert tray_gib == pytest.approx(16093 / 18)
    config = ParallelConfig(dp=4, pp=1, micro_batch=1, global_batch=4, zero_stage=0, offload_optimizer_fraction=1.0)
    need = simulate(MODEL, GB200, config).extras["host_memory_bytes"]
    # a host memory of 18 trays x (4 GPUs' need x 1.01) fits; x 0.99 does not
    for scale, fits in ((1.01, True), (0.99, False)):
        host = replace(GB200.host, memory_bytes=18 * 4 * need * scale)
        assert simulate(MODEL, replace(GB200, host=host), config).fits is fits
