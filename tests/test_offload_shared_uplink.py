"""GPUs behind one PCIe switch share its uplink to the CPU when they all offload at once: a DGX
A100 puts two A100s under each of four PCIe Gen4 switches, each with one 16 GT/s x16 link to a
CPU (Azure/azhpc-images@4a4565a topology/ndv4-topo.xml, the same HGX A100 / AMD Rome board), so
each GPU's copies get 32 / 2 = 16 GB/s raw, not its own x16 link's 32."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cost_models import offload
from hardware_specs.catalog import cluster_from_dict, efficiency_for_cluster, load_cluster
from hardware_specs.cluster_spec import HostSpec
from hardware_specs.errors import InputError
from model_specs import ModelSpec
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate
from simulator.step_model import evaluate

H, A, S = 1024, 16, 2048
MODEL = ModelSpec("gpt-8x1024", 8, H, A, A, 4 * H, 32000, S)
KEPT = S * (34 * H + 4 * A)          # one layer's kept activations, one micro-batch (test_offload)
GEN4_PAYLOAD = 128 / 130 * 256 / 280  # 128b/130b encoding, 256 payload bytes per 280 on the wire


def test_the_share_is_the_smaller_of_the_own_link_and_the_uplink_split_among_its_gpus():
    assert offload.shared_link_bw(32e9, 32e9, 2) == pytest.approx(16e9)      # DGX A100
    assert offload.shared_link_bw(64e9, None, 1) == pytest.approx(64e9)      # own path to the CPU
    assert offload.shared_link_bw(32e9, 128e9, 2) == pytest.approx(32e9)     # a wide uplink: own link binds
    got = offload.shared_link_bw(np.array([32e9, 64e9]), np.array([32e9, 64e9]), np.array([2, 4]))
    assert got == pytest.approx([16e9, 16e9])


def test_the_dgx_a100_files_put_two_gpus_behind_each_x16_gen4_uplink():
    for name in ("dgx-a100-80gb", "dgx-a100-40gb"):
        host = load_cluster(name).host
        assert (host.link_bw_bytes_per_s, host.uplink_bw_bytes_per_s, host.gpus_per_uplink) == (32e9, 32e9, 2)
        assert "ndv4-topo.xml" in host.source
    # a file that says nothing keeps each GPU on its own path
    assert load_cluster("dgx-h100").host.gpus_per_uplink == 1


def _exposed(out, i, copy, n_mb):
    """Exposed offload seconds of row i: 3 offloaded layers, each micro-batch's copy out under
    the layer's forward and back under its backward (test_offload's model)."""
    per_mb = 3 * (max(copy - out["layer_fwd_s"][i], 0.0) + max(copy - out["layer_bwd_s"][i], 0.0))
    return n_mb * per_mb


def test_an_offloaded_layer_copies_at_16_gb_per_s_raw_on_a_dgx_a100():
    # a 2-GPU job on a DGX A100 holds GPUs 0 and 1, both behind switch 0's one x16 uplink
    dgx = load_cluster("dgx-a100-80gb")
    eff = efficiency_for_cluster(dgx)
    config = ParallelConfig(dp=2, pp=1, micro_batch=1, global_batch=8, cuda_graphs=True, offload_activation_layers=3)
    out = evaluate(MODEL, dgx, eff, ConfigBatch.from_configs([config]))
    # 16 GB/s raw x 128/130 x 256/280 = 14.404 GB/s of data: one layer's copy (KEPT bytes) takes
    # KEPT / 14.404e9 s, twice the 28.81 GB/s of an unshared Gen4 x16
    copy = KEPT / (16e9 * GEN4_PAYLOAD)
    assert 16e9 * GEN4_PAYLOAD == pytest.approx(14.4035e9, rel=1e-4)
    assert out["offload_exposed_s"][0] == pytest.approx(_exposed(out, 0, copy, 4), rel=1e-9)
    # the same node stated as a 16 GB/s link per GPU prices the same step
    halved = replace(dgx, host=HostSpec("pcie-gen4-x16", 16e9, memory_bytes=dgx.host.memory_bytes,
                                        memory_bw_bytes_per_s=dgx.host.memory_bw_bytes_per_s))
    same = evaluate(MODEL, halved, eff, ConfigBatch.from_configs([config]))
    assert same["step_time_s"][0] == pytest.approx(out["step_time_s"][0], rel=1e-12)


def test_a_one_gpu_job_has_its_uplink_to_itself():
    # a 1-GPU job holds GPU 0; GPU 1 behind the same switch is not the job's and is taken as idle,
    # so the copies run at the whole x16 Gen4 uplink: 32 GB/s raw = 28.81 GB/s of data. In one
    # batch beside it, 2-, 3- and 16-GPU jobs share their first uplink two ways (16 GB/s raw)
    dgx = load_cluster("dgx-a100-80gb")
    eff = efficiency_for_cluster(dgx)
    configs = [ParallelConfig(dp=dp, pp=1, micro_batch=1, global_batch=4 * dp, cuda_graphs=True,
                              offload_activation_layers=3) for dp in (1, 2, 3, 16)]
    out = evaluate(MODEL, dgx, eff, ConfigBatch.from_configs(configs))
    own, shared = KEPT / (32e9 * GEN4_PAYLOAD), KEPT / (16e9 * GEN4_PAYLOAD)
    assert out["offload_exposed_s"][0] == pytest.approx(_exposed(out, 0, own, 4), rel=1e-9)
    for i in (1, 2, 3):
        assert out["offload_exposed_s"][i] == pytest.approx(_exposed(out, i, shared, 4), rel=1e-9)
    assert out["offload_exposed_s"][0] < out["offload_exposed_s"][1]
    # the 1-GPU job prices as on a node whose every GPU has its own uplink
    unshared = replace(dgx, host=replace(dgx.host, gpus_per_uplink=1))
    alone = evaluate(MODEL, unshared, eff, ConfigBatch.from_configs(configs[:1]))
    assert alone["step_time_s"][0] == pytest.approx(out["step_time_s"][0], rel=1e-12)
    # each row of the batch prices as it does on its own (the share is per row)
    for i, config in enumerate(configs):
        one = evaluate(MODEL, dgx, eff, ConfigBatch.from_configs([config]))
        assert one["step_time_s"][0] == pytest.approx(out["step_time_s"][i], rel=1e-12)


def test_optimizer_offload_on_a_dgx_a100_moves_its_bytes_at_the_share():
    dgx = load_cluster("dgx-a100-80gb")
    cfg = dict(dp=8, pp=1, micro_batch=1, global_batch=8, zero_stage=1, cuda_graphs=True)
    on = simulate(MODEL, dgx, ParallelConfig(offload_optimizer_fraction=0.5, **cfg))
    off = simulate(MODEL, dgx, ParallelConfig(**cfg))
    params = 0.5 * off.memory_breakdown_bytes["optimizer_bytes"] / 12.0
    # 2 bytes of 16-bit weight per parameter back up at 14.404 GB/s; Adam on the host at its
    # memory bandwidth per GPU (409.6 GB/s / 8), 28 bytes per parameter
    back_s = params * 2.0 / (16e9 * GEN4_PAYLOAD)
    host_s = params * 28.0 / (409.6e9 / 8)
    down_s = params * 4.0 / (16e9 * GEN4_PAYLOAD)
    exposed = on.time_breakdown_s["offload_exposed_s"]
    assert host_s + back_s <= exposed * (1 + 1e-12) and exposed <= (host_s + back_s + down_s) * (1 + 1e-12)


def test_the_planner_and_simulate_price_the_shared_link_alike():
    # Llama-3-70B on 128 A100 80GB at 256 x 8192 tokens: at tp 1 only offloading fits (the review's
    # case); the planner's offloading plan and simulate of it price the same step, at the share
    from model_specs import load_model
    from planners.plan import plan
    model = load_model("llama3-70b")
    dgx = load_cluster("dgx-a100-80gb")
    result = plan("llama3-70b", dgx, 128, 256, fixed={"tp": 1, "pp": 1, "cp": 1, "zero_stage": 3},
                  dtypes=["bf16"], stack="torchtitan", workers=1)
    offloading = (result.plans["offload_activation_layers"] > 0).to_numpy()
    assert offloading.any()
    rank = int(offloading.argmax())
    row, config = result.plans.iloc[rank], result.config(rank)
    sim = simulate(model, dgx, config)
    assert float(row["step_time_s"]) == pytest.approx(sim.step_time_s, rel=1e-9)
    unshared = replace(dgx, host=replace(dgx.host, gpus_per_uplink=1))
    assert simulate(model, unshared, config).step_time_s < sim.step_time_s


def test_the_planner_prices_a_one_gpu_job_at_its_own_uplink_like_simulate():
    from model_specs import load_model
    from planners.plan import plan
    model = load_model("gpt3-1.3b")
    dgx = load_cluster("dgx-a100-80gb")
    result = plan(model, dgx, 1, 64, fixed={"tp": 1, "pp": 1, "cp": 1}, dtypes=["bf16"], stack="torchtitan", workers=1)
    offloading = (result.plans["offload_activation_layers"] > 0).to_numpy()
    assert offloading.any()
    rank = int(offloading.argmax())
    row, config = result.plans.iloc[rank], result.config(rank)
    unshared = replace(dgx, host=replace(dgx.host, gpus_per_uplink=1))
    assert float(row["step_time_s"]) == pytest.approx(simulate(model, dgx, config).step_time_s, rel=1e-9)
    assert float(row["step_time_s"]) == pytest.approx(simulate(model, unshared, config).step_time_s, rel=1e-12)


def test_a_file_states_the_uplink_and_refuses_a_fractional_or_zero_share():
    base = {"name": "x", "gpu": "a100-sxm-80gb", "gpus_per_node": 8,
            "scaleup": {"kind": "nvlink", "bw_gb_per_s": 300}, "scaleout": {"kind": "infiniband", "bw_gbit_per_s": 200}}
    c = cluster_from_dict({**base, "host": {"link": "pcie-gen4-x16", "link_bw_gb_per_s": 32,
                                            "uplink_bw_gb_per_s": 32, "gpus_per_uplink": 2}})
    assert (c.host.uplink_bw_bytes_per_s, c.host.gpus_per_uplink) == (32e9, 2)
    for bad in (0, 1.5):
        with pytest.raises(InputError, match="gpus_per_uplink"):
            cluster_from_dict({**base, "host": {"link": "pcie-gen4-x16", "link_bw_gb_per_s": 32, "gpus_per_uplink": bad}})
