"""Metamorphic invariants of the training-step and serving simulators over models (dense MHA,
GQA, MoE, MLA, hybrid Mamba, sliding-window MoE) and GPUs (A100, H100, B200, GB200): what must
hold whatever the fitted factors are, so that predictions for clusters and models the fit never
saw keep their direction. The named cases are the ones a random search found violated before
the fixes they document (a 600-configuration search per seed, 6,570 checks)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs.catalog import load_model
from simulator import ParallelConfig, simulate
from simulator.config_batch import ConfigBatch
from simulator.report import MEMORY_PARTS, TIME_PARTS
from simulator.serving.context import ServingContext
from simulator.serving.evaluate import evaluate_agg_columns
from simulator.step_model import cell_times

GPUS = ("dgx-a100-80gb", "dgx-h100", "dgx-b200", "gb200-nvl72")


def _faster(cluster, flops=1.0, hbm=1.0, nvlink=1.0, nic=1.0):
    """``cluster`` with its GPU's peaks, HBM bandwidth and its two network tiers scaled."""
    gpu = replace(cluster.gpu, peak_flops_per_s={k: v * flops for k, v in cluster.gpu.peak_flops_per_s.items()},
                  hbm_bw_bytes_per_s=cluster.gpu.hbm_bw_bytes_per_s * hbm,
                  scaleup_bw_bytes_per_s=cluster.gpu.scaleup_bw_bytes_per_s * nvlink)
    return replace(cluster.with_gpu(gpu),
                   scaleup=replace(cluster.scaleup, bw_bytes_per_s=cluster.scaleup.bw_bytes_per_s * nvlink),
                   scaleout=replace(cluster.scaleout, bw_bytes_per_s=cluster.scaleout.bw_bytes_per_s * nic))


# --------------------------------------------------------------------------------------------
# faster hardware never makes a training step slower
# --------------------------------------------------------------------------------------------

#: (model, system, config) the search found slower on a faster GPU: zero-bubble schedules whose B
#: pass took the backward TP / EP exposure computed with the W pass's GEMMs as its window (so
#: faster weight-gradient GEMMs lengthened every B on the critical path), and a DualPipe run
FOUND_SLOWER = [
    ("deepseek-v2", "gb200-nvl72", dict(dp=4, tp=8, pp=4, ep=2, micro_batch=1, global_batch=32, schedule="zb-h1",
                                        recompute="full")),                       # 7.505 -> 7.509 s
    ("nemotron-3-nano", "gb200-nvl72", dict(dp=4, tp=2, pp=4, cp=2, ep=4, micro_batch=1, global_batch=32,
                                            schedule="dualpipe", sequence_parallel=True, zero_stage=3,
                                            recompute="full", dtype="fp8")),      # 1.0859 -> 1.0867 s
    ("qwen3-30b-a3b", "dgx-a100-80gb", dict(dp=8, tp=4, pp=4, micro_batch=1, global_batch=256, schedule="zb-v",
                                            zero_stage=2, recompute="selective")),  # 35.68 -> 35.88 s
    ("deepseek-v2", "dgx-b200", dict(dp=2, tp=2, pp=4, ep=4, micro_batch=1, global_batch=8, schedule="zb-h1",
                                     zero_stage=2, recompute="selective")),       # 1.769 -> 1.795 s
    ("gpt3-1.3b", "dgx-a100-80gb", dict(dp=2, tp=8, pp=4, cp=2, micro_batch=2, global_batch=32, schedule="dualpipe",
                                        sequence_parallel=True, zero_stage=3, recompute="full")),
]

GRID = [(model, system, dict(base, schedule=schedule))
        for model, base in (("llama3-8b", dict(dp=2, tp=4, pp=4, micro_batch=1, global_batch=32,
                                                   sequence_parallel=True)),
                            ("mixtral-8x7b", dict(dp=2, tp=2, pp=4, ep=2, micro_batch=1, global_batch=16,
                                                  zero_stage=1, recompute="selective")),
                            ("gpt-oss-20b", dict(dp=4, tp=2, pp=2, ep=4, micro_batch=1, global_batch=32,
                                                 recompute="full")))
        for system in GPUS for schedule in ("1f1b", "zb-h1", "dualpipe")]


@pytest.mark.parametrize("model, system, kw", FOUND_SLOWER + GRID)
def test_more_flops_hbm_bandwidth_nvlink_or_nic_never_slow_a_step(model, system, kw):
    spec, cluster = load_model(model), load_cluster(system)
    config = ParallelConfig(uneven_layers=True, **kw)
    base = simulate(spec, cluster, config).step_time_s
    for scale in (dict(flops=1.5), dict(hbm=1.5), dict(nvlink=2.0), dict(nic=2.0), dict(flops=1.3, hbm=1.3, nvlink=1.3,
                                                                                         nic=1.3)):
        faster = simulate(spec, _faster(cluster, **scale), config).step_time_s
        slower = simulate(spec, _faster(cluster, **{k: 1.0 / v for k, v in scale.items()}), config).step_time_s
        assert faster <= base * (1 + 1e-12) <= slower * (1 + 1e-12), (scale, faster, base, slower)


def test_a_zero_bubble_b_pass_does_not_lengthen_when_its_weight_gradients_get_faster():
    """The cause of the cases above, cell by cell: under ZB-H1 the B and W ops run apart, so a B
    hides its collectives under its own data-gradient GEMMs only; with 1.5x the FLOP/s no
    cell's F, B, W or fused BW gets longer, and the B passes get shorter. (Before, B took
    max(tp_bwd - dgrad - wgrad, 0) and every B grew by 1.0-1.2 ms.)"""
    spec, cluster = load_model("deepseek-v2"), load_cluster("gb200-nvl72")
    config = ParallelConfig(dp=4, tp=8, pp=4, ep=2, micro_batch=1, global_batch=32, schedule="zb-h1",
                            recompute="full", uneven_layers=True)
    cells = {}
    for name, c in (("base", cluster), ("fast", _faster(cluster, flops=1.5))):
        cells[name] = cell_times(spec, c, efficiency_for_cluster(c), ConfigBatch.from_configs([config]),
                                 with_fused=True)[4:]
    for base, fast in zip(cells["base"], cells["fast"]):
        assert (fast <= base * (1 + 1e-12)).all()
    assert cells["fast"][1].sum() < cells["base"][1].sum()
    # the split backward is never shorter than the fused one it replaces
    f, b, w, bw = cells["base"]
    assert (b + w >= bw * (1 - 1e-12)).all()


def test_list_scheduled_zb_v_keeps_a_documented_order_anomaly():
    """Not a bug fixed here, a modelling choice kept: ZB-V's order is list-scheduled for the
    pass-time ratios rounded to 1/8 (``pipeline.makespan.order_durations``), so a faster network
    that moves B/F from 1.5 to 1.625 picks another order, and that order's flush is longer (a
    Graham list-scheduling anomaly: 2.275 -> 2.325 s here, +2.2% at HEAD f7c1ee2's other
    physics (2.315 -> 2.359 s when found; the test pins the order, not these), NVLink at 0.5 -> 0.6 of
    GB200's; at 0.9 -> 1.0 before MoE layers under sequence parallelism stopped paying a dense
    MLP's TP collectives, at 0.8 -> 0.9 before the loss's bytes became the stack's (Megatron-Core's eager loss,
    ``cost_models.cross_entropy``), at 1.0 and 2.0 before the sequence-parallel gradient gather
    was exposed). With the
    order held fixed the faster network is faster. The other schedules have fixed orders and are
    monotone (above)."""
    import simulator.pipeline.makespan as makespan
    spec, cluster = load_model("mixtral-8x7b"), load_cluster("gb200-nvl72")
    # GB200 at its datasheet's tensor rate and with the HGX B200's 148 SMs, as when the case was
    # found (the file now runs it at B200's rate, ``sustained_tensor_fraction``, with the 152 SMs
    # the device reports)
    cluster = replace(cluster, gpu=replace(cluster.gpu, sustained_tensor_fraction=1.0, sm_count=148))
    config = ParallelConfig(dp=8, tp=2, pp=4, ep=4, micro_batch=1, global_batch=32, schedule="zb-v",
                            sequence_parallel=True, zero_stage=3, recompute="selective", uneven_layers=True)
    slow, fast = _faster(cluster, nvlink=0.5), _faster(cluster, nvlink=0.6)
    # the Blackwell factors the case was found at (the sixteenth round's fit; a refit moves the
    # pass times and with them which ratios round where), the softmax exposed as then (12b7029
    # hid it under Blackwell's matmuls, 1.0 -> 0.0, which moves the ratios: another case) and
    # the attention kernels at 0.525 of peak as then (the refit f7c1ee2 took them to 0.4078:
    # B/F 1.554 -> 1.651 at NVLink 0.5, both rounding to 1.625, so no order changed)
    pinned = replace(efficiency_for_cluster(cluster), hbm_fraction=0.7781, kernel_overhead_s=5e-6,
                     exposed_softmax_fraction=1.0, attention_peak_fraction=0.525,
                     gemm_peak_fraction={"bf16": 0.5281, "fp16": 0.5281, "fp8": 0.5281, "mxfp8": 0.5281,
                                         "nvfp4": 0.4666})
    orders = []
    for c in (slow, fast):
        kind, p, m, v, f, b, w = cell_times(spec, c, pinned, ConfigBatch.from_configs([config]))
        orders.append(tuple(makespan.order_durations(kind, f[None], b[None], w[None])[0]))
    assert orders == [(1.0, 1.5, 0.5), (1.0, 1.625, 0.5)]
    assert simulate(spec, fast, config, efficiency=pinned).step_time_s > simulate(spec, slow, config, efficiency=pinned).step_time_s
    kind, p, m, v, f0, b0, w0 = cell_times(spec, slow, pinned,
                                           ConfigBatch.from_configs([config]))
    _, _, _, _, f1, b1, w1 = cell_times(spec, fast, pinned, ConfigBatch.from_configs([config]))
    held = orders[0]
    spans = [makespan._sweep(kind, p, m, v, np.stack([f, b, w, b + w]).reshape(4, 1, p * v), held)[0]
             for f, b, w in ((f0, b0, w0), (f1, b1, w1))]
    assert spans[1] < spans[0]


# --------------------------------------------------------------------------------------------
# memory: ZeRO stage k+1 never needs more than k where it shards something
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model, system, kw", [
    # experts over every data-parallel rank (expert dp 1): they were counted in the ZeRO-3
    # gather buffer although never gathered (988.469 -> 988.508 GB from ZeRO-2 to 3)
    ("mixtral-8x7b", "gb200-nvl72", dict(dp=2, ep=2, micro_batch=2, global_batch=4, dtype="fp8")),
    # an all-MoE model: the buffer was sized by a dense layer the model does not have
    ("mixtral-8x7b", "dgx-h100", dict(dp=2, tp=2, pp=4, ep=4, micro_batch=2, global_batch=32)),
    ("qwen3-30b-a3b", "dgx-h100", dict(dp=2, pp=2, ep=2, micro_batch=1, global_batch=32, schedule="gpipe")),
    ("nemotron-3-nano", "dgx-h100", dict(dp=4, pp=4, ep=4, micro_batch=1, global_batch=128)),
    ("deepseek-v2", "dgx-b200", dict(dp=2, tp=2, pp=4, ep=4, micro_batch=1, global_batch=8, schedule="zb-h1")),
    ("llama3-8b", "dgx-a100-80gb", dict(dp=8, tp=1, pp=1, micro_batch=1, global_batch=8)),
    # four layers a stage over two data-parallel ranks: only ZeRO-3 paid the computing layer's
    # whole gradient before its reduce-scatter, which ZeRO-2 builds as well (50.90 GiB at ZeRO-2,
    # 51.24 at ZeRO-3)
    ("llama3-8b", "dgx-h100", dict(dp=2, tp=1, pp=8, micro_batch=1, global_batch=16)),
])
def test_each_zero_stage_needs_no_more_memory_than_the_one_before(model, system, kw):
    spec, cluster = load_model(model), load_cluster(system)
    memory = [simulate(spec, cluster, ParallelConfig(zero_stage=z, recompute="selective", uneven_layers=True,
                                                     **kw)).memory_bytes for z in range(4)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(memory, memory[1:])), memory


def test_zero3_buffer_is_two_layers_of_what_is_gathered():
    """Mixtral 8x7B, tp2 ep4 over 2 data-parallel ranks: the experts' shard group is one rank, so
    the buffer is two layers' attention + router + norms on one TP rank, 16-bit, and the
    computing layer's unsharded gradient of them in the fp32 reduce dtype:
    (2 x 2 + 4) x (attention / 2 + router / 2 + norms) bytes."""
    spec = load_model("mixtral-8x7b")
    h, kv = spec.hidden_size, spec.num_kv_heads * spec.head_dim
    attention = h * (h + 2 * kv) + h * h
    router = h * spec.moe.num_experts
    r = simulate(spec, load_cluster("dgx-h100"), ParallelConfig(dp=2, tp=2, pp=4, ep=4, micro_batch=2, global_batch=32,
                                                                zero_stage=3))
    per_gpu = (attention + router) / 2 + 2 * h
    assert r.memory_breakdown_bytes["zero3_buffers_bytes"] == pytest.approx((2 * 2 + 4) * per_gpu, rel=1e-3)


# --------------------------------------------------------------------------------------------
# the report's identities over a grid of models and GPUs
# --------------------------------------------------------------------------------------------

IDENTITY_GRID = [(model, system, kw) for model, kw in (
    ("gpt3-1.3b", dict(dp=4, tp=2, pp=1, micro_batch=2, global_batch=32, zero_stage=1)),
    ("llama3-8b", dict(dp=2, tp=4, pp=2, micro_batch=1, global_batch=16, schedule="zb-v", sequence_parallel=True)),
    ("mixtral-8x7b", dict(dp=2, tp=2, pp=4, ep=2, micro_batch=1, global_batch=16, recompute="full", zero_stage=3)),
    ("deepseek-v2", dict(dp=4, tp=2, pp=4, ep=4, micro_batch=1, global_batch=32, schedule="dualpipe")),
    ("nemotron-3-nano", dict(dp=2, tp=2, pp=2, cp=2, ep=2, micro_batch=1, global_batch=8, zero_stage=2)),
) for system in GPUS]


@pytest.mark.parametrize("model, system, kw", IDENTITY_GRID)
def test_throughput_mfu_and_breakdowns_agree_with_their_definitions(model, system, kw):
    spec = load_model(model)
    config = ParallelConfig(uneven_layers=True, **kw)
    r = simulate(spec, load_cluster(system), config)
    assert r.tokens_per_step == config.global_batch * spec.seq_len
    assert r.tokens_per_s == pytest.approx(r.tokens_per_step / r.step_time_s, rel=1e-12)
    assert r.tokens_per_s_per_gpu == pytest.approx(r.tokens_per_s / config.n_gpus, rel=1e-12)
    assert 0 < r.mfu <= r.hfu <= 1
    assert all(r.time_breakdown_s[k] >= 0 for k in TIME_PARTS)
    assert sum(r.time_breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-9)
    assert all(r.memory_breakdown_bytes[k] >= 0 for k in MEMORY_PARTS)
    assert sum(r.memory_breakdown_bytes.values()) == pytest.approx(r.memory_bytes, rel=1e-9)
    assert max(s["memory_bytes"] for s in r.stage_memory) == r.memory_bytes
    for s in r.stage_memory:
        assert sum(s["parts_bytes"].values()) == pytest.approx(s["memory_bytes"], rel=1e-9)


@pytest.mark.parametrize("model, system", [("llama3-8b", "dgx-h100"), ("deepseek-v2", "gb200-nvl72"),
                                           ("nemotron-3-nano", "dgx-b200")])
def test_doubling_dp_with_the_global_batch_keeps_each_gpus_compute(model, system):
    """Same micro-batch, same micro-batches per pipeline: each GPU runs the same passes; only the
    gradient reduction's group (and so its exposed time) changes, and the pipeline sends, which
    cross nodes once dp x tp fills one (16 GPUs here), so the bubble is not compared."""
    spec, cluster = load_model(model), load_cluster(system)
    ep = 2 if spec.moe is not None else 1
    reports = [simulate(spec, cluster, ParallelConfig(dp=dp, tp=2, pp=2, ep=ep, micro_batch=1, global_batch=8 * dp,
                                                      zero_stage=1, uneven_layers=True)) for dp in (2, 4)]
    a, b = (r.time_breakdown_s for r in reports)
    for part in ("compute_s", "recompute_s", "tp_comm_exposed_s", "cp_comm_exposed_s", "ep_comm_exposed_s"):
        assert b[part] == pytest.approx(a[part], rel=1e-9), part
    assert reports[1].tokens_per_step == 2 * reports[0].tokens_per_step


# --------------------------------------------------------------------------------------------
# serving (closed loop of clients): monotone where the physics is
# --------------------------------------------------------------------------------------------

SERVING = [("llama3.1-70b", "dgx-h100", "vllm", "fp8", 4, 1, 1),
           ("llama3.1-8b", "dgx-a100-80gb", "sglang", "fp16", 1, 1, 1),
           ("qwen3-30b-a3b", "dgx-b200", "trtllm", "fp8", 2, 1, 2),
           ("deepseek-r1", "gb200-nvl72", "sglang", "fp8", 1, 8, 8),
           ("gpt-oss-120b", "dgx-b200", "vllm", "fp8", 2, 1, 2)]


def _agg(ctx, tp, adp, ep, **kw):
    return evaluate_agg_columns(ctx, {"tp": tp, "pp": 1, "adp": adp, "moe_tp": tp * adp // ep, "moe_ep": ep, **kw})


@pytest.mark.parametrize("model, system, backend, fmt, tp, adp, ep", SERVING)
def test_serving_is_monotone_in_load_prompt_length_and_hardware(model, system, backend, fmt, tp, adp, ep):
    ctx = ServingContext.build(model, system, backend, fmt, fmt)
    batch = 2.0 ** np.arange(0, 9)
    for isl, osl in ((128, 128), (1024, 1024), (8192, 256)):
        out = _agg(ctx, tp, adp, ep, batch=batch, isl=isl, osl=osl)
        fit = out["fits"]
        assert fit.sum() >= 2
        for k in ("tpot_s", "ttft_s", "decode_step_s"):       # more clients: never faster
            assert np.all(np.diff(out[k][fit]) >= -1e-9 * out[k][fit][:-1]), k
        assert np.allclose(out["latency_s"], out["ttft_s"] + (osl - 1) * out["tpot_s"], rtol=1e-12)
        # Little's law per rank where every client is admitted: requests/s x latency = clients
        rate = out["tokens_per_s_per_gpu"] * tp / osl
        assert np.allclose((rate * out["latency_s"])[fit], batch[fit], rtol=1e-3)
        # faster hardware at the same clients: the rank serves no fewer requests, none waits
        # longer end to end. (TTFT and TPOT alone are not monotone in a closed loop: faster decode
        # brings the clients back sooner, so more prompts share the engine, e.g. 1.5x HBM
        # bandwidth on A100 raises Llama-3.1-8B's TTFT at 8k prompts from 0.97 to 1.01 s.)
        for scale in (dict(flops=1.5), dict(hbm=1.5), dict(nvlink=2.0)):
            fast = _agg(replace(ctx, cluster=_faster(ctx.cluster, **scale)), tp, adp, ep, batch=batch, isl=isl, osl=osl)
            both = fit & fast["fits"]
            assert np.all(fast["tokens_per_s_per_gpu"][both] >= out["tokens_per_s_per_gpu"][both] * (1 - 1e-9)), scale
            assert np.all(fast["latency_s"][both] <= out["latency_s"][both] * (1 + 1e-9)), scale
    isl = np.array([128, 512, 2048, 8192, 16384])
    one = _agg(ctx, tp, adp, ep, batch=1.0, isl=isl, osl=256)
    assert np.all(np.diff(one["ttft_s"]) > 0)
    assert np.all(np.diff(one["max_batch_per_rank"]) <= 0)
    assert np.all(np.diff(_agg(ctx, tp, adp, ep, batch=1.0, isl=1024, osl=isl)["max_batch_per_rank"]) <= 0)


# --------------------------------------------------------------------------------------------
# the planner's numbers are simulate's, on Blackwell and with the split-backward schedules
# --------------------------------------------------------------------------------------------

def test_planned_zero_bubble_and_dualpipe_rows_on_gb200_simulate_to_the_same_numbers():
    from planners import plan, row_config
    spec = load_model("llama3-8b")
    cluster = load_cluster("gb200-nvl72")
    cluster = cluster.with_gpu(replace(cluster.gpu, hbm_bytes=1e15))      # every row fits: all are kept
    # one search per schedule, so each one's best rows are among those the planner times exactly
    # (the zero-bubble schedules are searched on pp >= 2 only: one stage runs as 1F1B)
    picked = []
    for schedule in ("zb-h1", "zb-v", "dualpipe", "1f1b"):
        result = plan(spec, cluster, 16, 32, schedules=(schedule,), assign_stages=False)
        exact = result.plans[result.plans["pipeline_exact"]]
        picked += [(row, result.software) for _, row in exact.head(3).iterrows()]
    assert {row["schedule"] for row, _ in picked} == {"zb-h1", "zb-v", "dualpipe", "1f1b"}
    assert all(row["pp"] > 1 for row, _ in picked if row["schedule"] != "1f1b")
    for row, software in picked:
        report = simulate(spec, cluster, row_config(row, software[str(row["dtype"])]), n_gpus=16)
        assert row["step_time_s"] == pytest.approx(report.step_time_s, rel=1e-9)
        assert row["memory_gib"] * 2**30 == pytest.approx(report.memory_bytes, rel=1e-9)
