"""Offload to host memory: the transfer and host-step costs by hand, the GPU and host memory an
offloaded layer moves, the exposed copy time, the host-memory check, and the refusal on a
cluster whose file states no host link."""
from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models import offload
from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from hardware_specs.cluster_spec import HostSpec
from hardware_specs.errors import InputError
from model_specs import ModelSpec
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate
from simulator.step_model import evaluate

H, A, S = 1024, 16, 2048
MODEL = ModelSpec("gpt-8x1024", 8, H, A, A, 4 * H, 32000, S)
KEPT = S * (34 * H + 4 * A)          # one layer's kept activations, one micro-batch (see test_stage_memory)
DGX = load_cluster("dgx-h100")


def test_transfer_and_exposed_copy_times():
    assert offload.transfer_time_s(64e9, 64e9) == pytest.approx(1.0)
    assert offload.exposed_transfer_s(64e9, 64e9, 0.25) == pytest.approx(0.75)
    assert offload.exposed_transfer_s(64e9, 64e9, 2.0) == 0.0


def test_optimizer_offload_step_by_hand_on_a_dgx_h100():
    # 1e9 parameters' optimizer on the host of a DGX H100 (PCIe Gen5 64 GB/s per direction, 2
    # sockets x 8 channels DDR5-4800 = 614.4 GB/s for 8 GPUs): fp32 gradients down (4 B), Adam on
    # the host (28 B per parameter of host-memory traffic), 16-bit weights back (2 B)
    host = DGX.host
    step = offload.optimizer_offload_step(1e9, 4.0, host.link_bw_bytes_per_s, host.memory_bw_bytes_per_s / 8)
    assert step["grads_to_host_s"] == pytest.approx(4e9 / 64e9)
    assert step["weights_to_gpu_s"] == pytest.approx(2e9 / 64e9)
    assert step["host_step_s"] == pytest.approx(28e9 / (614.4e9 / 8))
    assert step["host_bytes"] == pytest.approx(16e9) and step["link_bytes"] == pytest.approx(6e9)


def _report(cluster, **kw):
    base = dict(dp=1, pp=1, micro_batch=1, global_batch=4, cuda_graphs=True)
    base.update(kw)
    return simulate(MODEL, cluster, ParallelConfig(**base))


def test_offloaded_layers_move_their_activations_to_the_host():
    report = _report(DGX, offload_activation_layers=3)
    parts = report.memory_breakdown_bytes
    # pp = 1 holds one micro-batch: 5 layers kept, 3 on the host, one of them in flight on the GPU
    assert parts["activations_bytes"] == pytest.approx(5 * KEPT, rel=1e-12)
    assert parts["offload_buffers_bytes"] == pytest.approx(KEPT, rel=1e-12)
    assert report.extras["host_memory_bytes"] == pytest.approx(3 * KEPT, rel=1e-12)
    # a 1-GPU job has its node's host to itself (test_offload_host_share); a full node of such
    # GPUs needs 8 times that
    assert report.extras["host_memory_node_bytes"] == pytest.approx(3 * KEPT, rel=1e-12)
    full_node = _report(DGX, offload_activation_layers=3, dp=8, global_batch=32)
    assert full_node.extras["host_memory_node_bytes"] == pytest.approx(8 * 3 * KEPT, rel=1e-12)


def test_offload_keeps_each_chunks_last_layer_as_transformer_engine_does():
    assert _report(DGX, offload_activation_layers=8).extras["host_memory_bytes"] == pytest.approx(7 * KEPT)
    # more layers than the chunk holds is refused (it was clipped to 8 without a word)
    with pytest.raises(InputError, match="30 layers per model chunk"):
        _report(DGX, offload_activation_layers=30)


def test_exposed_offload_time_is_what_the_copies_exceed_the_layers_compute_by():
    slow = replace(DGX, host=HostSpec("pcie", 2e9, memory_bytes=DGX.host.memory_bytes, source="test"))
    eff = efficiency_for_cluster(DGX)
    config = ParallelConfig(dp=1, pp=1, micro_batch=1, global_batch=4, cuda_graphs=True, offload_activation_layers=3)
    out = evaluate(MODEL, slow, eff, ConfigBatch.from_configs([config]))
    # a PCIe link moves its raw rate less the 128b/130b encoding and 24 bytes per 256-byte packet
    copy = KEPT / (2e9 * 128 / 130 * 256 / 280)
    per_mb = 3 * (max(copy - out["layer_fwd_s"][0], 0.0) + max(copy - out["layer_bwd_s"][0], 0.0))
    assert copy > out["layer_bwd_s"][0]                 # a slow link: both copies stick out
    assert out["offload_exposed_s"][0] == pytest.approx(4 * per_mb, rel=1e-9)
    plain = evaluate(MODEL, slow, eff, ConfigBatch.from_configs([replace(config, offload_activation_layers=0)]))
    assert out["step_time_s"][0] - plain["step_time_s"][0] == pytest.approx(4 * per_mb, rel=1e-6)


def test_a_fast_link_hides_the_copies_entirely():
    fast = replace(DGX, host=HostSpec("c2c", 1e15, source="test"))
    out = _report(fast, offload_activation_layers=3)
    assert out.time_breakdown_s["offload_exposed_s"] == 0.0


def test_host_memory_beyond_the_node_does_not_fit():
    # a job filling the node: its 8 GPUs each put 2 (fits) or 3 (does not) layers on the host
    small = replace(DGX, host=HostSpec("pcie", 64e9, memory_bytes=8 * 2 * KEPT, source="test"))
    assert _report(small, offload_activation_layers=2, dp=8, global_batch=32).fits
    report = _report(small, offload_activation_layers=3, dp=8, global_batch=32)
    assert not report.fits and report.memory_bytes < report.hbm_bytes


def test_optimizer_offload_moves_its_share_of_the_states_and_pays_the_host_step():
    config = dict(dp=8, zero_stage=1, global_batch=8)
    on = _report(DGX, offload_optimizer_fraction=0.5, **config)
    off = _report(DGX, **config)
    assert on.memory_breakdown_bytes["optimizer_bytes"] == pytest.approx(
        0.5 * off.memory_breakdown_bytes["optimizer_bytes"], rel=1e-12)
    params_opt = off.memory_breakdown_bytes["optimizer_bytes"] / 12.0
    assert on.extras["host_memory_bytes"] == pytest.approx(0.5 * params_opt * 16.0, rel=1e-12)
    step = offload.optimizer_offload_step(0.5 * params_opt, 4.0, DGX.host.link_bw_bytes_per_s,
                                          DGX.host.memory_bw_bytes_per_s / 8)
    exposed = on.time_breakdown_s["offload_exposed_s"]
    assert step["host_step_s"] + step["weights_to_gpu_s"] <= exposed * (1 + 1e-12)
    assert exposed <= (step["host_step_s"] + step["weights_to_gpu_s"] + step["grads_to_host_s"]) * (1 + 1e-12)
    assert on.time_breakdown_s["optimizer_s"] == pytest.approx(0.5 * off.time_breakdown_s["optimizer_s"], rel=1e-12)


def test_offload_on_a_cluster_without_a_host_link_is_an_input_error():
    with pytest.raises(InputError) as exc:
        _report(load_cluster("mi300x-node"), offload_activation_layers=2)
    assert exc.value.field == "offload" and "host" in exc.value.fix


def test_a_pcie_host_link_moves_its_raw_rate_less_encoding_and_packet_overhead():
    # PCIe Gen5 x16: 32 GT/s x 16 lanes = 64 GB/s raw each way (the datasheets' "128 GB/s");
    # x 128/130 (encoding) x 256/(256 + 24) (payload per packet) = 57.61 GB/s of data (pinned
    # copies on H100 measure about 55). NVLink-C2C is taken at its file's rate.
    from cost_models.offload import host_link_payload_bw
    assert host_link_payload_bw("pcie-gen5-x16", 64e9) == pytest.approx(57.614e9, rel=1e-4)
    assert host_link_payload_bw("pcie-gen4-x16", 32e9) == pytest.approx(28.807e9, rel=1e-4)
    assert host_link_payload_bw("nvlink-c2c", 450e9) == 450e9
    # the generation however it is spelt; 6.0's FLITs and 2.0's 8b/10b are not these packets
    assert host_link_payload_bw("PCIe Gen5", 64e9) == host_link_payload_bw("pcie_gen5", 64e9) < 64e9
    assert host_link_payload_bw("pcie6", 128e9) == host_link_payload_bw("pcie-gen6-x16", 128e9) == 128e9
    assert host_link_payload_bw("pcie-gen2-x16", 8e9) == 8e9


def test_offload_beside_zero3_hides_under_the_whole_pass_and_faster_gemms_never_slow_the_step():
    # GPT-3 13B on 64 A100 (dp 32 x cp 2, ZeRO-3, 40 layers offloaded): the activation copy on
    # the host link, the parameter gather on the network and the compute run side by side. A
    # window of the compute alone counted the gather's wait twice, and 2x the FLOP/s made the
    # step 20% slower (1.480 -> 1.775 s, review 2026-12-04)
    from paraplan import api
    c = load_cluster("dgx-a100-80gb")
    kw = dict(gpus=64, dp=32, cp=2, tp=1, pp=1, micro_batch=1, global_batch=64, zero_stage=3,
              offload_activation_layers=40)
    steps = []
    for scale in (1.0, 1.3, 2.0):
        gpu = replace(c.gpu, peak_flops_per_s={k: v * scale for k, v in c.gpu.peak_flops_per_s.items()})
        steps.append(api.simulate("gpt3-13b", c.with_gpu(gpu), **kw).step_time_s.iloc[0])
    assert steps[0] >= steps[1] >= steps[2]
    # the regime the bug needed: the gather exposed beyond the compute, the copy beyond both
    eff = efficiency_for_cluster(c)
    from model_specs.catalog import load_model
    config = ParallelConfig(dp=32, cp=2, tp=1, pp=1, micro_batch=1, global_batch=64, zero_stage=3,
                            offload_activation_layers=40)
    out = evaluate(load_model("gpt3-13b"), c, eff, ConfigBatch.from_configs([config]))
    assert out["zero3_comm_exposed_s"][0] > 0.1 and out["offload_exposed_s"][0] > 0.1


def test_copies_take_turns_with_nic_traffic_on_a_pcie_host_link_and_not_on_c2c():
    # the same GPT-3 13B ZeRO-3 + offload run: on DGX A100 the GPU reaches its NICs and host
    # memory over one PCIe link, so a gather that leaves the node and the copy take turns (the
    # layer lasts max(pass, gather + copy)); the same link rate as a C2C host link (its own
    # path) hides the copy under the whole pass (the C2C link at the rate a DGX A100 GPU's copies
    # get: its share of its PCIe switch's uplink, less PCIe's overheads)
    from model_specs.catalog import load_model
    c = load_cluster("dgx-a100-80gb")
    share = offload.shared_link_bw(c.host.link_bw_bytes_per_s, c.host.uplink_bw_bytes_per_s, c.host.gpus_per_uplink)
    c2c = replace(c, host=replace(c.host, link="nvlink-c2c", uplink_bw_bytes_per_s=None, gpus_per_uplink=1,
                                  link_bw_bytes_per_s=float(offload.host_link_payload_bw(c.host.link, share))))
    eff = efficiency_for_cluster(c)
    cross = ParallelConfig(dp=32, cp=2, tp=1, pp=1, micro_batch=1, global_batch=64, zero_stage=3,
                           offload_activation_layers=40)
    inside = replace(cross, dp=4, cp=2, global_batch=64)          # a shard group of 8: one node
    model = load_model("gpt3-13b")
    pcie_x, c2c_x = (evaluate(model, cl, eff, ConfigBatch.from_configs([cross])) for cl in (c, c2c))
    assert pcie_x["offload_exposed_s"][0] > c2c_x["offload_exposed_s"][0] + 0.1
    # inside one node the gathers stay on NVLink: the two links give the same step
    pcie_i, c2c_i = (evaluate(model, cl, eff, ConfigBatch.from_configs([inside])) for cl in (c, c2c))
    assert pcie_i["step_time_s"][0] == pytest.approx(c2c_i["step_time_s"][0], rel=1e-12)


def test_the_pcie_rule_reads_the_link_in_any_case_and_the_expert_group_by_its_own_stride():
    from model_specs.catalog import load_model
    # a cluster file spelling its link in capitals is PCIe too (it had the encoding discount but
    # not the turn-taking with the NICs: 0.18 s of copies exposed instead of 0.97)
    c = load_cluster("dgx-a100-80gb")
    upper = replace(c, host=replace(c.host, link=c.host.link.upper()))
    eff = efficiency_for_cluster(c)
    config = ParallelConfig(dp=32, cp=2, tp=1, pp=1, micro_batch=1, global_batch=64, zero_stage=3,
                            offload_activation_layers=40)
    model = load_model("gpt3-13b")
    a, b = (evaluate(model, cl, eff, ConfigBatch.from_configs([config])) for cl in (c, upper))
    assert a["step_time_s"][0] == b["step_time_s"][0]
    # an expert group spans ep x etp GPUs (etp apart): gpt-oss-20b on 16 H100, ep 8. At tp 4 /
    # etp 1 the group stays in a node (no turn-taking: PCIe and a C2C link of the same rate give
    # the same step); at tp 1 / etp 2 it spans two nodes and takes turns with the copies
    h = load_cluster("dgx-h100")
    c2c = replace(h, host=replace(h.host, link="nvlink-c2c",
                                  link_bw_bytes_per_s=offload.host_link_payload_bw(h.host.link, h.host.link_bw_bytes_per_s)))
    eff = efficiency_for_cluster(h)
    oss = load_model("gpt-oss-20b")
    inside = ParallelConfig(dp=4, tp=4, ep=8, etp=1, micro_batch=1, global_batch=16, zero_stage=1,
                            offload_activation_layers=4)
    across = ParallelConfig(dp=16, tp=1, ep=8, etp=2, micro_batch=1, global_batch=16, zero_stage=1,
                            offload_activation_layers=4)
    p_in, c_in = (evaluate(oss, cl, eff, ConfigBatch.from_configs([inside])) for cl in (h, c2c))
    assert p_in["step_time_s"][0] == pytest.approx(c_in["step_time_s"][0], rel=1e-12)
    p_x, c_x = (evaluate(oss, cl, eff, ConfigBatch.from_configs([across])) for cl in (h, c2c))
    assert p_x["offload_exposed_s"][0] > c_x["offload_exposed_s"][0]


def test_each_offloaded_tensor_takes_its_pinned_size_in_host_memory():
    """Transformer Engine pins one host tensor per offloaded activation and PyTorch's caching host
    allocator rounds each up to a power of two. At hidden 1536 every term of a layer's
    s h (34 + 4 A / h) is 3 x a power of two (norm inputs 4sh, GEMM inputs 2sh each, masks 2sh,
    q+v 4sh, k 2sh, MLP 8sh + 8sh), so each takes 4/3 of itself; the log-sum-exp 4As is already one."""
    h = 1536
    model = ModelSpec("gpt-8x1536", 8, h, A, A, 4 * h, 32000, S)
    kept = S * (34 * h + 4 * A)
    pinned = S * 34 * h * 4 // 3 + S * 4 * A
    assert pinned == 142_737_408
    report = simulate(model, DGX, ParallelConfig(dp=1, pp=1, micro_batch=1, global_batch=4, cuda_graphs=True,
                                                  offload_activation_layers=3))
    assert report.memory_breakdown_bytes["activations_bytes"] == pytest.approx(5 * kept, rel=1e-12)
    assert report.extras["host_memory_bytes"] == pytest.approx(3 * pinned, rel=1e-12)


def test_the_gradients_copy_to_the_host_and_the_dp_reduction_share_one_backward_window():
    """GPT-3 175B on 64 H100 (tp 4, cp 2, dp 8), its whole optimizer on the host: the gradients'
    copy (fp32 over PCIe) and the DP reduction both outlast the backward. They run side by side
    after it, so the step pays the longer tail: offload_exposed = (copy - window) - (reduction -
    window) + host step + weights back = copy - reduction + ..., the same whatever the window.
    Recomputation lengthens the window and adds its own time: it must never make the step faster
    (with both tails hidden separately full recomputation took 0.70 s off a 23.7 s step)."""
    from model_specs.catalog import load_model
    base = dict(tp=4, cp=2, dp=8, pp=1, micro_batch=4, global_batch=32, zero_stage=0, sequence_parallel=True,
                offload_optimizer_fraction=1.0)
    reports = {rc: simulate(load_model("gpt3-175b"), DGX, ParallelConfig(recompute=rc, **base))
               for rc in ("none", "selective", "full")}
    steps = [reports[rc].step_time_s for rc in ("none", "selective", "full")]
    assert steps[0] <= steps[1] * (1 + 1e-12) and steps[1] <= steps[2] * (1 + 1e-12)
    dp_tail = [reports[rc].time_breakdown_s["dp_comm_exposed_s"] for rc in ("none", "selective", "full")]
    assert dp_tail[0] > dp_tail[1] > dp_tail[2] > 0.0          # the longer window hides more of the reduction
    copy_beyond = [reports[rc].time_breakdown_s["offload_exposed_s"] for rc in ("none", "selective", "full")]
    assert copy_beyond[1] == pytest.approx(copy_beyond[0], rel=1e-12)
    assert copy_beyond[2] == pytest.approx(copy_beyond[0], rel=1e-12)
