"""Effects a CPU host (or any unfused PyTorch job) shows and a tuned GPU stack hides: collective
kinds slower than the ring model, unfused gradient accumulation, straggler wait at syncs."""
from dataclasses import replace

import pytest

from cost_models import collectives as coll
from cost_models.topology import group_collective_time_s, p2p_stage_time_s
from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from hardware_specs.efficiency_files import efficiency_from_dict
from hardware_specs.errors import InputError
from model_specs import load_model
from simulator import simulate
from simulator.parallel_config import ParallelConfig

CLUSTER = load_cluster("dgx-a100-80gb")
EFF = efficiency_for_cluster(CLUSTER)


def test_collective_fraction_divides_only_that_kinds_bandwidth():
    slow_rs = replace(EFF, collective_bw_fraction={"reduce_scatter": 0.25})
    size, n = 1e9, 8
    bw = CLUSTER.scaleup.bw_bytes_per_s * EFF.scaleup_fraction
    lat = CLUSTER.scaleup.latency_s
    # ring reduce-scatter inside a node on NCCL's Simple protocol: (n-1)/n * S / (0.25 bw) + (n-1)
    # steps of latency + its 8.4 us base latency
    expected = coll.reduce_scatter_time_s(size, n, 0.25 * bw, lat) + 8.4e-6
    assert float(group_collective_time_s("reduce_scatter", size, n, 1, CLUSTER, slow_rs)) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(7 / 8 * size / (0.25 * bw) + 7 * lat + 8.4e-6, rel=1e-12)
    for kind in ("all_reduce", "all_gather"):
        assert float(group_collective_time_s(kind, size, n, 1, CLUSTER, slow_rs)) == pytest.approx(
            float(group_collective_time_s(kind, size, n, 1, CLUSTER, EFF)), rel=1e-12)
    slow_p2p = replace(EFF, collective_bw_fraction={"p2p": 0.5})
    assert float(p2p_stage_time_s(size, 1, 2, CLUSTER, slow_p2p)) == pytest.approx(size / (0.5 * bw) + lat, rel=1e-12)


def test_unknown_collective_kind_is_one_clear_error():
    data = {"generation": "x", "gemm_peak_fraction": {"bf16": 0.7}, "collective_bw_fraction": {"allreduce": 0.5}}
    with pytest.raises(InputError) as err:
        efficiency_from_dict(data)
    assert err.value.field.endswith("collective_bw_fraction.allreduce")


def _llama8b(config):
    return simulate(load_model("llama3-8b"), CLUSTER, config, n_gpus=config.n_gpus)


def test_unfused_gradient_accumulation_costs_one_add_pass_per_microbatch():
    base = ParallelConfig(dp=1, tp=1, pp=1, micro_batch=1, global_batch=4, recompute="full")
    fused = _llama8b(base)
    unfused = _llama8b(replace(base, grad_accumulation_fusion=False))
    model = load_model("llama3-8b")
    from cost_models import params
    n_params = params.total_params(model)
    # per micro-batch: read the fresh bf16 gradient (2 B) and the fp32 buffer (4 B), write it (4 B)
    # per parameter at the full streaming bandwidth, plus one add kernel per weight tensor: fused
    # QKV, output projection, fused gate+up, down, two norms per layer; the embedding and the
    # output layer
    hbm = CLUSTER.gpu.hbm_bw_bytes_per_s
    per_mb = n_params * (2 + 4 + 4) / hbm + (6 * model.num_layers + 2) * EFF.kernel_overhead_s
    extra = unfused.step_time_s - fused.step_time_s
    assert extra == pytest.approx(4 * per_mb, rel=1e-6)
    assert unfused.time_breakdown_s["compute_s"] - fused.time_breakdown_s["compute_s"] == pytest.approx(extra, rel=1e-9)


def test_unfused_accumulation_into_fp16_main_grads_moves_six_bytes_per_parameter():
    """Megatron-LM's local DDP keeps its main gradients in the parameter dtype unless gradients
    accumulate in fp32 (megatron/model/distributed.py ``_get_buffer_type``): an fp16 run that
    reduces fp16 gradients adds each micro-batch's gradient into an fp16 buffer, 2 + 2 + 2 bytes
    per parameter, against 2 + 4 + 4 into fp32 main grads."""
    base = ParallelConfig(dp=1, tp=1, pp=1, micro_batch=1, global_batch=4, recompute="full", dtype="fp16",
                          grad_accumulation_fusion=False)
    fp32_buffer = _llama8b(replace(base, grad_reduce_bytes=4))
    fp16_buffer = _llama8b(replace(base, grad_reduce_bytes=2))
    from cost_models import params
    n_params = params.total_params(load_model("llama3-8b"))
    hbm = CLUSTER.gpu.hbm_bw_bytes_per_s
    # 4 micro-batches, 4 bytes per parameter fewer each (the buffer's read and write at 2, not 4)
    saved = 4 * n_params * (10 - 6) / hbm
    assert fp32_buffer.time_breakdown_s["compute_s"] - fp16_buffer.time_breakdown_s["compute_s"] == pytest.approx(
        saved, rel=1e-6)


def test_sync_wait_is_the_skew_fraction_of_compute_and_zero_on_one_rank():
    jittery = replace(CLUSTER, efficiency=replace(EFF, sync_skew_fraction=0.05))
    one = ParallelConfig(dp=1, micro_batch=1, global_batch=2)
    report = simulate(load_model("llama3-8b"), jittery, one, n_gpus=1)
    assert report.time_breakdown_s["sync_wait_s"] == 0.0
    two = ParallelConfig(dp=2, micro_batch=1, global_batch=4, zero_stage=1)
    report = simulate(load_model("llama3-8b"), jittery, two, n_gpus=2)
    b = report.time_breakdown_s
    assert b["sync_wait_s"] == pytest.approx(0.05 * (b["compute_s"] + b["recompute_s"]), rel=1e-9)
    assert sum(b.values()) == pytest.approx(report.step_time_s, rel=1e-9)
    # generations fitted on GPUs carry no straggler wait
    assert simulate(load_model("llama3-8b"), CLUSTER, two, n_gpus=2).time_breakdown_s["sync_wait_s"] == 0.0


def test_unfused_accumulation_in_a_pipeline_lengthens_the_1f1b_flush_by_its_closed_form():
    """1F1B whose last stage (with the LM head) is the busiest: the flush lasts sum_i t_i +
    (m-1) t_last, so adding d_i of accumulation per micro-batch to stage i adds sum_i d_i +
    (m-1) d_last (the busiest stage stays the last)."""
    from simulator.config_batch import ConfigBatch
    from simulator.step_model import cell_times
    cluster = load_cluster("dgx-h100")
    eff = efficiency_for_cluster(cluster)
    cfg = ParallelConfig(pp=4, micro_batch=1, global_batch=16)
    model = load_model("llama3-8b")
    unfused = replace(cfg, grad_accumulation_fusion=False)
    stage = {}
    for name, c in (("fused", cfg), ("unfused", unfused)):
        _, _, m, _, f, b, w = cell_times(model, cluster, eff, ConfigBatch.from_configs([c]))
        stage[name] = (f + b + w).sum(axis=1)
    assert stage["fused"].argmax() == stage["unfused"].argmax() == 3
    d = stage["unfused"] - stage["fused"]
    assert (d > 0).all()
    extra = simulate(model, cluster, unfused, n_gpus=4).step_time_s - simulate(model, cluster, cfg, n_gpus=4).step_time_s
    assert extra == pytest.approx(d.sum() + (m - 1) * d[3], rel=1e-9)


def test_switches_refuse_strings_and_the_api_parses_them():
    from paraplan import api
    with pytest.raises(InputError) as err:
        ParallelConfig(grad_accumulation_fusion="false")
    assert err.value.field == "grad_accumulation_fusion"
    df = api.sweep(dict(model="llama3-8b", cluster="dgx-h100", gpus=8, global_batch=64, micro_batch=1),
                   "grad_accumulation_fusion", ["true", "false"])
    assert list(df["grad_accumulation_fusion"]) == [True, False]
    assert df["step_time_s"].iloc[1] > df["step_time_s"].iloc[0]


def test_optimizer_fraction_sets_the_adam_bandwidth_and_zero_falls_back():
    model = load_model("llama3-8b")
    cfg = ParallelConfig(dp=1, micro_batch=1, global_batch=2)
    from cost_models import params
    n = params.total_params(model)
    base = simulate(model, CLUSTER, cfg, n_gpus=1).time_breakdown_s["optimizer_s"]
    # (to 1e-5: the step model leaves out the final norm's few thousand parameters)
    # 42 bytes per parameter in bf16: Adam 28 (fp32 weight, grad, m, v read; weight, m, v
    # written) + gradient norm 4 + master-to-model copy 4 + 2 + zeroing the gradient buffer 4
    assert base == pytest.approx(n * 42 / (CLUSTER.gpu.hbm_bw_bytes_per_s * EFF.hbm_fraction), rel=1e-5)
    fast = replace(CLUSTER, efficiency=replace(EFF, optimizer_hbm_fraction=0.9))
    assert simulate(model, fast, cfg, n_gpus=1).time_breakdown_s["optimizer_s"] == pytest.approx(
        n * 42 / (CLUSTER.gpu.hbm_bw_bytes_per_s * 0.9), rel=1e-5)
    # fp16 also unscales the gradients in place with the inf check: + 8
    fp16 = replace(cfg, dtype="fp16")
    assert simulate(model, fast, fp16, n_gpus=1).time_breakdown_s["optimizer_s"] == pytest.approx(
        n * 50 / (CLUSTER.gpu.hbm_bw_bytes_per_s * 0.9), rel=1e-5)
    fp32 = replace(cfg, dtype="fp32")
    assert simulate(model, fast, fp32, n_gpus=1).time_breakdown_s["optimizer_s"] == pytest.approx(
        n * 28 / (CLUSTER.gpu.hbm_bw_bytes_per_s * 0.9), rel=1e-5)


def test_per_tensor_zero3_pays_each_collectives_start_up_once_per_tensor():
    """DeepSpeed 0.3 gathers each parameter and reduce-scatters each gradient in its own ring: on
    a group spanning nodes every extra call adds (n - 1) steps of the NIC tier's start-up, for the
    forward gather, the backward gather and the gradient reduce-scatter of every layer."""
    model = load_model("llama3-8b")
    base = ParallelConfig(dp=32, tp=1, pp=1, micro_batch=1, global_batch=32, zero_stage=3, recompute="none",
                          overlap_param_gather=False, zero3_recompute_gather=False)
    flat = simulate(model, CLUSTER, base, n_gpus=32)
    per_tensor = simulate(model, CLUSTER, replace(base, param_gather_per_tensor=True), n_gpus=32)
    tensors = 6                                     # fused QKV, output, gate+up, down, two RMSNorms
    from cost_models import params
    layer_bytes = params.dense_layer_params(model) * 2.0      # bf16 parameters
    # one ring over the 32 ranks of 4 nodes: 3 of its 31 steps cross nodes (NIC latency), 28 stay
    # on NVLink. A whole layer's parameters (436 MB) run NCCL's Simple protocol; a sixth of them
    # (73 MB) LL128, whose shorter hops outweigh its 120/128 bandwidth at that size
    bw = min(CLUSTER.scaleup.bw_bytes_per_s * EFF.scaleup_fraction,
             8 * CLUSTER.scaleout.bw_bytes_per_s * EFF.scaleout_fraction)
    lat_i, lat_o = CLUSTER.scaleup.latency_s, CLUSTER.scaleout.latency_s
    simple_startup = 28 * lat_i + 3 * lat_o + 8.4e-6
    simple = 31 / 32 * layer_bytes / bw + simple_startup
    ll128 = 31 / 32 * layer_bytes / tensors / (bw * 120 / 128) + 28 * lat_i * 1.9 / 3.4 + 3 * lat_o * 4.0 / 14 + 14e-6
    assert ll128 < 31 / 32 * layer_bytes / tensors / bw + simple_startup
    # the fp32 gradients (bf16 runs reduce them in fp32) stay on Simple in sixths too (145 MB):
    # each extra reduce-scatter adds Simple's start-up
    grad_sixth = 31 / 32 * params.dense_layer_params(model) * 4.0 / tensors
    assert grad_sixth / bw + simple_startup < grad_sixth / (bw * 120 / 128) + 28 * lat_i * 1.9 / 3.4 + 3 * lat_o * 4.0 / 14 + 14e-6
    # a layer's forward and backward gathers, and its gradient reduce-scatter
    expected = model.num_layers * (2 * (tensors * ll128 - simple) + (tensors - 1) * simple_startup)
    extra = per_tensor.time_breakdown_s["zero3_comm_exposed_s"] - flat.time_breakdown_s["zero3_comm_exposed_s"]
    assert extra == pytest.approx(expected, rel=1e-9)
    assert per_tensor.step_time_s - flat.step_time_s == pytest.approx(expected, rel=1e-9)
