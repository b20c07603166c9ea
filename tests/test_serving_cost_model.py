"""Inference cost model: hand-derived decode step, KV bytes per token, concurrency that fits,
prefill FLOPs, expected distinct experts, and invariants."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.expert_activation import expected_distinct_experts
from cost_models.inference_layers import prefill_flops
from cost_models.inference_step import step_time
from cost_models.kv_cache import kv_bytes_per_request, kv_bytes_per_token_model
from cost_models.weight_formats import canonical_format, compute_dtype, weight_bytes
from hardware_specs.catalog import load_cluster
from hardware_specs.errors import InputError
from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.serving_efficiency import ServingEfficiency
from hardware_specs.stack_spec import StackSpec
from model_specs.catalog import load_model
from model_specs.model_spec import ModelSpec
from simulator.serving.context import ServingContext

GIB = 2**30
#: an efficiency with no fixed per-kernel time, so a decode step is pure roofline
PURE = ServingEfficiency(generation="hopper", decode_hbm_fraction=0.8, gemm_peak_fraction=0.6,
                         attention_peak_fraction=0.5, kernel_fixed_s=0.0, arrival_sync_chunked=1.0)
QUIET = StackSpec(name="quiet", framework="test", serving=ServingBehaviour(host_step_s=0.0, host_launch_s=0.0))


def test_decode_step_of_a_dense_model_at_batch_1_is_weight_bytes_over_achieved_hbm_bandwidth():
    model = load_model("llama3.1-8b")
    cluster = load_cluster("dgx-h100")
    h, f, L, V = 4096, 14336, 32, 128256
    # per layer: q and o (h x h), k and v (h x 8 x 128), gate/up/down (3 h f); LM head V x h; all bf16
    layer = 2 * h * h + 2 * h * 8 * 128 + 3 * h * f
    weight_bytes_total = 2.0 * (L * layer + V * h)
    expected = weight_bytes_total / (cluster.gpu.hbm_bw_bytes_per_s * PURE.decode_hbm_fraction)
    out = step_time(model, cluster, PURE, QUIET.serving, "bf16", "bf16", 2.0, 1, 1, 1, 1, 1, 0.0, 0.0, 1.0, 1.0)
    # the rest (one token's activations, norms, a one-token KV read) is < 1% of the weights
    assert out["step_s"] == pytest.approx(expected, rel=0.01)
    assert expected == pytest.approx(15.01e9 / (3.35e12 * 0.8), rel=0.002)   # 7.5e9 weights x 2 bytes


def test_kv_bytes_per_token_for_mha_gqa_and_mla():
    mha = ModelSpec(name="mha", num_layers=24, hidden_size=2048, num_heads=16, num_kv_heads=16,
                    ffn_hidden_size=8192, vocab_size=50000)
    # MHA: 2 (K, V) x 16 heads x 128 x 2 bytes x 24 layers
    assert kv_bytes_per_token_model(mha, 2.0) == 2 * 16 * 128 * 2 * 24
    gqa = load_model("llama3.1-70b")
    assert kv_bytes_per_token_model(gqa, 2.0) == 2 * 8 * 128 * 2 * 80 == 327_680
    # per GPU under tp 8 the 8 KV heads split: one each
    assert kv_bytes_per_request(gqa, 8, 1, 2.0) == pytest.approx(327_680 / 8)
    # tp 16 > 8 KV heads: each GPU still holds one head (replicated)
    assert kv_bytes_per_request(gqa, 16, 1, 2.0) == pytest.approx(327_680 / 8)
    mla = load_model("deepseek-r1")
    # MLA: one latent of 512 + rope key of 64 per layer, shared by the heads, 61 layers
    assert kv_bytes_per_token_model(mla, 2.0) == (512 + 64) * 2 * 61 == 70_272
    assert kv_bytes_per_request(mla, 8, 1, 2.0) == pytest.approx(70_272)   # not split by tp
    assert kv_bytes_per_token_model(mla, 1.0) == 70_272 / 2                # fp8 KV cache


def test_sliding_window_layers_hold_at_most_the_window():
    m = load_model("gpt-oss-120b")    # 36 layers, half with a 128-token window, 8 KV heads of 64
    per_token_layer = 2 * 8 * 64 * 2
    assert kv_bytes_per_request(m, 1, 10_000, 2.0) == pytest.approx(per_token_layer * (18 * 10_000 + 18 * 128))


def test_largest_concurrency_that_fits_is_the_kv_pool_over_one_requests_kv():
    ctx = ServingContext.build("llama3.1-8b", "dgx-h100", "vllm-0.14", "fp8", "fp8", efficiency=PURE)
    from simulator.serving.aggregated import memory_columns
    mem = memory_columns(ctx, 1, 1, 1, 1, 1, 2048, 1024)
    h, f, L, V = 4096, 14336, 32, 128256
    weights = L * (2 * h * h + 2 * h * 1024 + 3 * h * f) * 1.0 + 2 * V * h * 2.0   # fp8 layers, bf16 embed + head
    assert mem["weights_bytes"] == pytest.approx(weights)
    # vLLM: 0.9 of the 80 GiB, minus weights, the activation workspace and 1 GiB reserve
    pool = 0.9 * 80 * GIB - weights - float(mem["activations_bytes"]) - 1 * GIB
    assert mem["kv_pool_bytes"] == pytest.approx(pool)
    # mean context isl + osl/2; FP8 KV (vLLM >= 0.14 takes the KV dtype a ModelOpt FP8 checkpoint names)
    assert ctx.kv_bytes == 1.0
    per_request = (2048 + 512) * 2 * 8 * 128 * 1 * 32
    assert mem["max_batch_per_rank"] == min(math.floor(pool / per_request), 1024)


def test_prefill_flops_are_two_per_weight_per_token_plus_the_attention_core():
    m = load_model("llama3.1-8b")
    h, f, L, V, a, d = 4096, 14336, 32, 128256, 32, 128
    layer = 2 * h * h + 2 * h * 8 * 128 + 3 * h * f
    isl = 1024
    expected = 2 * isl * L * layer + 2 * isl * (isl / 2) * a * (2 * d) * L + 2 * V * h
    assert prefill_flops(m, isl, isl / 2) == pytest.approx(expected)


def test_expected_distinct_experts_follows_the_occupancy_formula():
    assert expected_distinct_experts(256, 8, 1) == pytest.approx(8.0)
    assert expected_distinct_experts(256, 8, 0) == pytest.approx(0.0)
    assert expected_distinct_experts(256, 8, 64) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 64))
    assert expected_distinct_experts(256, 8, 10_000) == pytest.approx(256.0)


def test_weight_formats_bytes_and_compute_dtypes():
    assert weight_bytes("bf16") == 2.0 and weight_bytes("fp8") == 1.0
    assert weight_bytes("nvfp4") == pytest.approx(0.5625)
    assert canonical_format("fp4") == "nvfp4" and canonical_format(None) == "bf16"
    h100, b200 = load_cluster("dgx-h100").gpu, load_cluster("dgx-b200").gpu
    assert compute_dtype("nvfp4", b200) == "nvfp4"
    assert compute_dtype("nvfp4", h100) == "bf16"          # Hopper: fp4 weights, 16-bit math
    assert compute_dtype("int4_wo", b200) == "bf16"
    with pytest.raises(InputError, match="unknown weight format"):
        canonical_format("int3")


@settings(max_examples=40, deadline=None)
@given(scale=st.floats(1.0, 4.0), batch=st.integers(1, 512), ctx_len=st.integers(1, 32_000),
       model=st.sampled_from(["llama3.1-8b", "deepseek-r1", "qwen3.5-397b-a17b", "gpt-oss-120b"]))
def test_more_hbm_bandwidth_never_slows_decode(scale, batch, ctx_len, model):
    from dataclasses import replace
    m = load_model(model)
    cluster = load_cluster("dgx-b200")
    faster = cluster.with_gpu(replace(cluster.gpu, hbm_bw_bytes_per_s=cluster.gpu.hbm_bw_bytes_per_s * scale))
    args = ("fp8", "fp8", 2.0, 8, 1, 1, 8 if m.moe is None else 1, 1 if m.moe is None else 8, 0.0, 0.0, batch, ctx_len)
    eff = replace(PURE, generation="blackwell")
    slow = step_time(m, cluster, eff, QUIET.serving, *args)["step_s"]
    fast = step_time(m, faster, eff, QUIET.serving, *args)["step_s"]
    assert fast <= slow * (1 + 1e-12)


def test_a_one_prompt_moe_prefill_streams_every_expert_the_tokens_touch():
    # DeepSeek-R1 (256 routed experts of 3 x 7168 x 2048, top-8, one shared expert), FP8 experts
    # split tensor-parallel over 8 H200s. A 1024-token prompt routes 8192 rows: the expected
    # number of distinct experts is 256 (1 - (1 - 8/256)^1024) = 256, so a prefill of one prompt
    # at small batch reads all routed-expert weights, like a decode step, on top of its FLOPs.
    from cost_models.inference_layers import layer_rates, moe_block_s
    model = load_model("deepseek-r1")
    gpu = load_cluster("hgx-h200").gpu
    rates = layer_rates(gpu, PURE, "fp8", "fp8")
    h, ffn, tokens = 7168, 2048, 1024
    bw = 4.8e12 * 0.8                                         # HBM bytes/s achieved
    expert_w = 3 * h * ffn / 8                                # one expert's slice on one GPU
    rows = tokens * 8                                         # routed rows
    routed_bytes = 256 * expert_w * 1.0 + rows * (h + ffn / 8) * 2 * 2.0
    routed_flops = 2.0 * rows * expert_w
    assert routed_bytes / bw > routed_flops / (1978.9e12 * 0.6)   # weight-read bound at 1k tokens
    router = max(2.0 * tokens * h * 256 / (989.4e12 * 0.6), (h * 256 * 2.0 + tokens * (h + 256) * 2.0) / bw)
    shared = max(2.0 * tokens * expert_w / (1978.9e12 * 0.6),
                 (expert_w * 1.0 + tokens * (h + 2 * ffn / 8) * 2.0) / bw)
    t, _ = moe_block_s(model, rates, 8, 1, 8, 1, tokens)
    assert float(t) == pytest.approx(routed_bytes / bw + router + shared, rel=1e-6)
    # ~0.43 ms of expert weights per layer: 25 ms over the 58 MoE layers of one 1k-token prefill
    assert 58 * routed_bytes / bw == pytest.approx(0.0249, rel=0.01)


def test_each_active_expert_slice_a_gpu_holds_adds_the_fixed_expert_time():
    """Qwen3-235B (128 experts, top-8) decoding 16 tokens on 8 H200s: 16 x 8 = 128 routed rows
    touch 128 (1 - (1 - 8/128)^16) = 82.4 distinct experts. Split tensor-parallel (moe_tp 8) each
    GPU holds a slice of all 82.4; split expert-parallel (ep 8) a GPU holds 82.4 / 8 = 10.3 whole
    ones on average, but the step waits for the busiest: each GPU's 16 experts are hit with
    p = 1 - (1 - 8/128)^16 = 0.644, its count ~ Binomial(16, p), and the expected maximum over the
    8 GPUs is sum_x (1 - F(x)^8) = 12.92 (``expected_busiest_gpu_experts``). The fixed time per
    active expert (1 us here) is paid per slice: 82.4 us against 12.92 us, and nothing else in the
    MoE block moves."""
    from dataclasses import replace

    from cost_models.inference_layers import layer_rates, moe_block_s
    model = load_model("qwen3-235b-a22b")
    gpu = load_cluster("hgx-h200").gpu
    active = 128 * (1 - (1 - 8 / 128) ** 16)
    assert active == pytest.approx(82.42, abs=0.01)
    p = 1 - (1 - 8 / 128) ** 16

    def cdf(x):
        return sum(math.comb(16, i) * p ** i * (1 - p) ** (16 - i) for i in range(x + 1))
    busiest = sum(1 - cdf(x) ** 8 for x in range(16))
    assert busiest == pytest.approx(12.92, abs=0.01)
    with_fixed = layer_rates(gpu, replace(PURE, expert_fixed_s=1e-6), "fp8", "fp8")
    without = layer_rates(gpu, PURE, "fp8", "fp8")
    for moe_tp, moe_ep, slices in ((8, 1, active), (1, 8, busiest)):
        t1, k1 = moe_block_s(model, with_fixed, 8, 1, moe_tp, moe_ep, 16.0)
        t0, k0 = moe_block_s(model, without, 8, 1, moe_tp, moe_ep, 16.0)
        assert float(t1 - t0) == pytest.approx(slices * 1e-6, rel=1e-9)
        assert k1 == k0                                   # no kernel more: a cost inside the GEMMs
    # the busiest expert-parallel GPU streams 12.92 whole experts against the tensor-parallel
    # GPU's 82.4 eighth-experts (10.3 experts' bytes): more, by up to 12.92 / 10.3
    tp_split = float(moe_block_s(model, without, 8, 1, 8, 1, 16.0)[0])
    ep_split = float(moe_block_s(model, without, 8, 1, 1, 8, 16.0)[0])
    assert tp_split < ep_split < tp_split * busiest / (active / 8)


def test_mla_decode_core_runs_at_flashmla_rate_on_hopper_and_blackwell_and_prefill_rate_elsewhere():
    """Absorbed-MLA decode of 4 requests x 4,096 latents at tp 1 (128 heads, FP8 cache): FLOPs
    2 x 4 x 4096 x 128 x (2 x 512 + 64) = 4,563,402,752; bytes 4 x 4096 x 576 = 9,437,184. On an
    H100 the FLOPs run at FlashMLA's published 580 TFLOPS (7.87 us; the bytes need 3.52 us at
    0.8 x 3.35 TB/s), not at the prefill attention fraction; on a B200, with no published dense MLA
    decode rate (FlashMLA's one SM100 decode figure, sparse FP8, is 350 TFLOPS), at Hopper's
    published 580 TFLOPS (an unfitted prior), never below an H100; on an A100 (no entry) at the
    prefill fraction, 0.5 x 312 TFLOPS."""
    from cost_models.inference_layers import attention_block_s, layer_rates
    model = load_model("deepseek-v3")
    flops = 2.0 * 4 * 4096 * 128 * (2 * 512 + 64)
    assert flops == 4_563_402_752
    for cluster_name, generation, rate in (("dgx-h100", "hopper", 580e12),
                                           ("dgx-b200", "blackwell", 580e12),
                                           ("dgx-a100-80gb", "ampere", 0.5 * 312e12)):
        gpu = load_cluster(cluster_name).gpu
        eff = ServingEfficiency(generation=generation, decode_hbm_fraction=0.8, gemm_peak_fraction=0.6,
                                attention_peak_fraction=0.5, kernel_fixed_s=0.0)
        rates = layer_rates(gpu, eff, "fp8", "fp8")
        with_ctx, _ = attention_block_s(model, rates, 1, 0.0, 0.0, 4.0, 4096.0, 1.0)
        without, _ = attention_block_s(model, rates, 1, 0.0, 0.0, 4.0, 0.0, 1.0)
        assert float(with_ctx - without) == pytest.approx(flops / rate, rel=1e-9)
        assert 9_437_184 / (gpu.hbm_bw_bytes_per_s * 0.8) < flops / rate      # compute-bound in both
    # a Blackwell GPU file with a smaller peak (200 TFLOPS 16-bit) is not given more than Hopper's
    # published fraction of it: 580 / 989.4 x 200 = 117 TFLOPS, not the 580 of the built-in parts
    from dataclasses import replace
    small = replace(load_cluster("dgx-b200").gpu, peak_flops_per_s={"bf16": 200e12, "fp8": 400e12})
    eff = ServingEfficiency(generation="blackwell", decode_hbm_fraction=0.8, gemm_peak_fraction=0.6,
                            attention_peak_fraction=0.5, kernel_fixed_s=0.0)
    assert layer_rates(small, eff, "fp8", "fp8").mla_decode_flops_per_s == pytest.approx(
        580.0 / 989.4 * small.sustained_flops("bf16"), rel=1e-12)


def test_a_fused_all_reduce_and_norm_saves_one_kernel_per_all_reduce_a_norm_follows():
    # TensorRT-LLM's AllReduceFusionOp.RESIDUAL_RMS_NORM: with tp > 1 and no attention DP the
    # all-reduce runs the residual add and the next RMSNorm in its own kernel. Only the fixed
    # time per kernel moves: kernel_fixed_s x (fewer kernels), nothing else in the step
    from dataclasses import replace
    eff = replace(PURE, kernel_fixed_s=5e-6)
    plain = ServingBehaviour(host_step_s=0.0, host_launch_s=0.0)
    fusing = replace(plain, allreduce_norm_fusion=True)
    cluster = load_cluster("dgx-h100")

    def fixed(model, beh, tp, adp, moe_ep=1):
        out = step_time(model, cluster, eff, beh, "bf16", "bf16", 2.0, tp, adp, 1, tp * adp // moe_ep, moe_ep,
                        0.0, 0.0, 8.0, 1024.0)
        return out["kernel_fixed_s"], out

    dense = load_model("llama3.1-70b")        # 80 dense layers: 2 all-reduces a layer, each before a norm
    (f0, o0), (f1, o1) = fixed(dense, plain, 4, 1), fixed(dense, fusing, 4, 1)
    assert float(f0 - f1) == pytest.approx(2 * 80 * 5e-6, rel=1e-9)
    assert float(o0["step_s"] - o1["step_s"]) == pytest.approx(2 * 80 * 5e-6, rel=1e-9)
    # at tp 1 there is no all-reduce to fuse into
    assert float(fixed(dense, plain, 1, 1)[0]) == float(fixed(dense, fusing, 1, 1)[0])
    moe = load_model("qwen3-235b-a22b")       # 94 MoE layers: the MoE output's all-reduce precedes the
    assert moe.num_moe_layers == moe.num_layers == 94     # next input norm; none counted before the experts
    (g0, _), (g1, _) = fixed(moe, plain, 4, 1), fixed(moe, fusing, 4, 1)
    assert float(g0 - g1) == pytest.approx(94 * 5e-6, rel=1e-9)
    # attention data parallelism: TensorRT-LLM turns the fusion off
    assert float(fixed(moe, plain, 2, 4, 8)[0]) == float(fixed(moe, fusing, 2, 4, 8)[0])


def test_the_engine_switch_point_not_the_faster_kernel_picks_the_all_reduce():
    # 8 B200s (NVLink 900 GB/s x link_bw_fraction 0.8 = 720 GB/s, 3 us a hop); a decode step of
    # 64 Llama-3.1-70B tokens all-reduces 64 x 8192 x 2 bytes = 1 MiB. One-shot: every GPU reads
    # the 7 peers' buffers, 3 us + 7 x 1 MiB / 720 GB/s = 13.194 us; two-shot: 6 us + 2 x 7/8 x
    # 1 MiB / 720 GB/s = 8.549 us. TensorRT-LLM runs one-shot up to 128 tokens whatever the bytes;
    # vLLM / SGLang below 256 KiB at 8 GPUs, so two-shot here; unstated: the faster
    from cost_models.inference_comm import allreduce_time_s
    cluster = load_cluster("dgx-b200")
    one = 3e-6 + 7 * 1048576 / 720e9
    two = 6e-6 + 1.75 * 1048576 / 720e9
    assert (one, two) == (pytest.approx(13.194e-6, abs=1e-9), pytest.approx(8.549e-6, abs=1e-9))
    trt = load_stack_serving("trtllm-1")
    vllm = load_stack_serving("vllm-0.14")
    sglang = load_stack_serving("sglang-0.5")
    unstated = ServingBehaviour()

    def ar(beh, tokens, group=8):
        msg = tokens * 8192 * 2.0
        oneshot, stated = beh.oneshot_allreduce(msg, group, tokens)
        return float(allreduce_time_s(msg, group, cluster, PURE, True, oneshot, stated))

    assert ar(trt, 64) == pytest.approx(one, rel=1e-12)
    assert ar(vllm, 64) == ar(sglang, 64) == ar(unstated, 64) == pytest.approx(two, rel=1e-12)
    # 129 tokens: TensorRT-LLM leaves one-shot (NCCL, taken as the two-shot volume)
    assert ar(trt, 129) == pytest.approx(6e-6 + 1.75 * 129 * 16384 / 720e9, rel=1e-12)
    # 8 tokens = 128 KiB < 256 KiB: everyone one-shot (3 us + 7 x 128 KiB / 720 GB/s)
    assert ar(vllm, 8) == ar(trt, 8) == pytest.approx(3e-6 + 7 * 131072 / 720e9, rel=1e-12)
    # vLLM at 4 GPUs: one-shot below 512 KiB (16 tokens = 256 KiB: 3 us + 3 x 256 KiB / 720 GB/s)
    assert ar(vllm, 16, 4) == pytest.approx(3e-6 + 3 * 262144 / 720e9, rel=1e-12)
    # 32 tokens = 512 KiB: vLLM runs two-shot (6 us + 1.5 x 512 KiB / 720 GB/s = 7.092 us), priced
    # no dearer than the one-shot kernel it replaced (3 us + 3 x 512 KiB / 720 GB/s = 5.185 us):
    # the switch point is the engine's measured crossover (cost_models/inference_comm.py)
    assert ar(vllm, 32, 4) == pytest.approx(min(6e-6 + 1.5 * 524288 / 720e9, 3e-6 + 3 * 524288 / 720e9),
                                            rel=1e-12)
    assert ar(vllm, 32, 4) == pytest.approx(3e-6 + 3 * 524288 / 720e9, rel=1e-12)
    # a group no entry covers (16 GPUs of one NVL72 domain) keeps the faster of the two
    nvl = load_cluster("gb200-nvl72")
    msg = 64 * 8192 * 2.0
    oneshot, stated = trt.oneshot_allreduce(msg, 16, 64)
    assert not bool(stated)
    assert float(allreduce_time_s(msg, 16, nvl, PURE, True, oneshot, stated)) == pytest.approx(
        min(3e-6 + 15 * msg / 720e9, 6e-6 + 2 * 15 / 16 * msg / 720e9), rel=1e-12)

    # in the step: Llama-3.1-70B at tp 8, 64 decodes: 2 all-reduces in each of 80 layers
    model = load_model("llama3.1-70b")
    quiet = {"host_step_s": 0.0, "host_launch_s": 0.0, "allreduce_norm_fusion": False}
    from dataclasses import replace
    steps = [step_time(model, cluster, PURE, replace(beh, **quiet), "bf16", "bf16", 2.0, 8, 1, 1, 8, 1,
                       0.0, 0.0, 64.0, 1024.0) for beh in (trt, unstated)]
    assert float(steps[0]["comm_s"] - steps[1]["comm_s"]) == pytest.approx(160 * (one - two), rel=1e-9)
    assert 160 * (one - two) == pytest.approx(0.743e-3, abs=1e-6)


def load_stack_serving(name):
    from hardware_specs.catalog import load_stack
    return load_stack(name).serving


def test_oneshot_switch_point_errors_name_the_field():
    with pytest.raises(InputError, match="oneshot_allreduce_max_bytes: bad entry 1"):
        ServingBehaviour(oneshot_allreduce_max_bytes={1: 1024})
    with pytest.raises(InputError, match="oneshot_allreduce_max_bytes: must be a mapping"):
        ServingBehaviour(oneshot_allreduce_max_bytes={})
    with pytest.raises(InputError, match="oneshot_allreduce_max_tokens: must be a whole number"):
        ServingBehaviour(oneshot_allreduce_max_tokens=-1)
    assert ServingBehaviour().oneshot_allreduce(1e6, 8, 64) == (None, None)
