"""The attention core's softmax exponentials on the special-function units, by hand.

A toy GPU (1 PFLOP/s bf16, attention at 50% of it, 4e12 exponentials/s, no kernel overhead)
makes each expected time a one-line calculation.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

import pytest

from cost_models.compute import (attention_core_exponentials, attention_core_flops, attention_time_s,
                                 compute_rates)
from hardware_specs import InputError
from hardware_specs.catalog import load_cluster, load_efficiency, load_gpu
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.gpu_spec import GPUSpec
from model_specs import load_model
from simulator import ParallelConfig, simulate

EXP_PER_S = 4e12


@pytest.fixture(scope="module")
def rates():
    gpu = GPUSpec(name="toy", generation="toy", peak_flops_per_s={"bf16": 1e15}, hbm_bytes=80e9,
                  hbm_bw_bytes_per_s=3e12, scaleup_bw_bytes_per_s=400e9, scaleup_domain_size=8,
                  sfu_exp_per_s=EXP_PER_S)
    eff = EfficiencyModel(generation="toy", gemm_peak_fraction={"bf16": 1.0}, gemm_half_dim=64,
                          attention_peak_fraction=0.5, hbm_fraction=1.0, scaleup_fraction=1.0,
                          scaleout_fraction=1.0, kernel_overhead_s=0.0)
    return compute_rates(gpu, eff, "bf16")


def test_one_exponential_per_query_key_and_head_scored():
    # 4096 queries of a 4096-token causal sequence attend to 2048 keys on average; 32 heads:
    # 4096 * 2048 * 32 = 268,435,456 exponentials, whatever the head dims
    flops = attention_core_flops(4096, 4096, 32, 128, 128)
    assert flops == pytest.approx(2 * 4096 * 2048 * 32 * 256)
    assert attention_core_exponentials(flops, 128, 128) == pytest.approx(4096 * 2048 * 32)
    # MLA-style dims (q/k 192, v 128) change the FLOPs, not the exponential count
    mla = attention_core_flops(4096, 4096, 32, 192, 128)
    assert attention_core_exponentials(mla, 192, 128) == pytest.approx(4096 * 2048 * 32)


def test_softmax_time_adds_to_the_matmul_time_in_both_passes(rates):
    flops, exps = 1e12, 1e9
    fwd, bwd = attention_time_s(flops, rates, exps)
    # matmuls at 0.5 PFLOP/s: 2 ms forward, 2.5x = 5 ms backward; 1e9 exp at 4e12/s = 0.25 ms,
    # paid in forward and again when the backward recomputes the probabilities
    assert fwd == pytest.approx(2e-3 + 0.25e-3)
    assert bwd == pytest.approx(5e-3 + 0.25e-3)
    assert rates.softmax_exposed == 1.0            # the efficiency model's default: all added
    no_sfu = replace(rates, exp_per_s=float("inf"))
    assert attention_time_s(flops, no_sfu, exps) == pytest.approx((2e-3, 5e-3))


def test_overlapped_softmax_costs_only_what_outlasts_the_matmuls(rates):
    flops = 1e12                         # 2 ms of forward matmuls, 5 ms of backward
    hidden = replace(rates, softmax_exposed=0.0)
    assert attention_time_s(flops, hidden, 1e9) == pytest.approx((2e-3, 5e-3))    # 0.25 ms hides
    # 1e10 exponentials = 2.5 ms: 0.5 ms outlasts the forward matmuls, none the backward's
    assert attention_time_s(flops, hidden, 1e10) == pytest.approx((2.5e-3, 5e-3))
    # half exposed: 1.25 ms added; the other 1.25 ms hides under the 2 ms of matmuls
    half = replace(rates, softmax_exposed=0.5)
    assert attention_time_s(flops, half, 1e10) == pytest.approx((3.25e-3, 6.25e-3))


def test_blackwell_ultra_doubles_the_exponential_rate_and_only_attention_gains():
    assert load_gpu("gb300").sfu_exp_per_s == pytest.approx(10.7e12)
    assert load_gpu("gb200").sfu_exp_per_s == pytest.approx(5.0e12)
    assert load_gpu("h100-sxm-80gb").sfu_exp_per_s == pytest.approx(3.9e12)
    # a GB300 whose special-function units ran at GB200's rate is slower only through the
    # attention core's softmax, by (exps / 5e12 - exps / 10.7e12) per forward and backward
    model = replace(load_model("llama3-8b"), seq_len=8192)
    cfg = ParallelConfig(dp=8, micro_batch=1, global_batch=64, dtype="fp8")
    gb300 = load_cluster("gb300-nvl72")
    gb200 = gb300.with_gpu(replace(gb300.gpu, sfu_exp_per_s=5.0e12))
    eff = replace(load_efficiency("blackwell"), exposed_softmax_fraction=1.0)   # all added
    r200 = simulate(model, gb200, cfg, efficiency=eff)
    r300 = simulate(model, gb300, cfg, efficiency=eff)
    assert r300.step_time_s < r200.step_time_s
    per_gpu_exps = (model.num_layers * 8192 * 4096 * model.num_heads)   # one micro-batch
    micro_batches = 64 // 8
    saved = 2 * per_gpu_exps * micro_batches * (1 / 5.0e12 - 1 / 10.7e12)
    assert r200.step_time_s - r300.step_time_s == pytest.approx(saved, rel=0.02)


def test_negative_exponential_rate_is_named(tmp_path):
    path = tmp_path / "bad-sfu.yaml"
    path.write_text("name: bad-sfu\ngeneration: hopper\npeak_tflops: {bf16: 989}\nhbm_gib: 80\n"
                    "hbm_bw_tb_per_s: 3.35\nscaleup_bw_gb_per_s: 450\nscaleup_domain_size: 8\n"
                    "sfu_tera_exp_per_s: -3.9\n")
    with pytest.raises(InputError) as info:
        load_gpu(str(path))
    assert info.value.field == "gpu bad-sfu.sfu_tera_exp_per_s"
    assert "-3.9" in str(info.value)


def test_the_attention_kernel_choice_moves_only_the_softmax_time():
    # Llama 3 8B, 8192 tokens, 8 H100 data-parallel, 8 micro-batches per step. Serial kernels add
    # every exponential (forward and backward recompute); pipelined ones hide them, since
    # the matmuls last longer: the difference is 2 * exps / 3.9e12 per layer and micro-batch.
    # (The H100's mma.sync share is set to 1 here so that only the softmax differs; the
    # serial kernel's slower matmuls are the next test's.)
    model = replace(load_model("llama3-8b"), seq_len=8192)
    cluster = load_cluster("dgx-h100")
    cluster = replace(cluster, gpu=replace(cluster.gpu, sync_mma_peak_fraction=1.0))
    times = {kernel: simulate(model, cluster, ParallelConfig(dp=8, global_batch=64, attention_kernel=kernel)).step_time_s
             for kernel in ("serial", "pipelined", "auto")}
    exps = 8192 * 4096 * model.num_heads
    expected = 2 * exps / 3.9e12 * model.num_layers * 8
    assert times["serial"] - times["pipelined"] == pytest.approx(expected, rel=0.02)
    assert times["pipelined"] <= times["auto"] <= times["serial"]
    # auto takes the generation's fitted share: half exposed lands halfway
    half = replace(load_efficiency("hopper"), exposed_softmax_fraction=0.5)
    auto_half = simulate(model, cluster, ParallelConfig(dp=8, global_batch=64), efficiency=half).step_time_s
    ends = [simulate(model, cluster, ParallelConfig(dp=8, global_batch=64, attention_kernel=k), efficiency=half).step_time_s
            for k in ("pipelined", "serial")]
    assert auto_half == pytest.approx(ends[0] + 0.5 * (ends[1] - ends[0]), rel=1e-9)


def test_an_unknown_attention_kernel_is_named():
    with pytest.raises(InputError) as info:
        ParallelConfig(attention_kernel="fa9")
    assert info.value.field == "attention_kernel"
    assert "serial" in str(info.value)



def test_flashattention2_on_hopper_runs_its_matmuls_at_the_mma_sync_rate():
    """FlashAttention-2 issues mma.sync, which reaches about 2/3 of Hopper's wgmma peak
    (Shah et al. 2024, section 2.2): its attention matmuls take 1/0.667 as long as a
    wgmma kernel's on H100, and the same on A100, where mma.sync is the native path."""
    from simulator.layer_times import attention_mma_share
    from simulator.config_batch import ATTENTION_KERNEL_CODES
    from simulator.parallel_config import AttentionKernel
    h100, a100 = load_gpu("h100-sxm-80gb"), load_gpu("a100-sxm-80gb")
    codes = np.array([ATTENTION_KERNEL_CODES[k] for k in (AttentionKernel.SERIAL, AttentionKernel.PIPELINED,
                                                          AttentionKernel.AUTO)])
    assert attention_mma_share(codes, h100).tolist() == [0.667, 1.0, 1.0]
    assert attention_mma_share(codes, a100).tolist() == [1.0, 1.0, 1.0]
    rates = compute_rates(h100, load_efficiency("hopper"), "bf16")
    flops = attention_core_flops(8192, 8192, 32, 128, 128)
    fast, _ = attention_time_s(flops, rates, 0.0, 0.0, 1.0)
    slow, _ = attention_time_s(flops, rates, 0.0, 0.0, 0.667)
    overhead = rates.kernel_overhead_s
    assert (slow - overhead) == pytest.approx((fast - overhead) / 0.667, rel=1e-12)
    assert fast - overhead == pytest.approx(flops / (989.4e12 * load_efficiency("hopper").attention_peak_fraction))


def test_a_sync_mma_share_above_one_is_refused(tmp_path):
    path = tmp_path / "bad-mma.yaml"
    text = (Path(__file__).parents[1] / "hardware_specs" / "gpus" / "h100-sxm-80gb.yaml").read_text()
    path.write_text(text.replace("sync_mma_peak_fraction: 0.667", "sync_mma_peak_fraction: 1.5"))
    with pytest.raises(InputError) as info:
        load_gpu(str(path))
    assert info.value.field.endswith("sync_mma_peak_fraction")


def test_materialised_attention_counts_each_score_pass_once():
    """The unfused core: its batched GEMMs (their roofline includes writing the scores and reading
    the probabilities) plus the softmax pass (read 2 + write 2 bytes per score) and, with
    attention dropout, the dropout pass (read 2 + write 2 + a 1-byte mask) in forward; in
    backward the four GEMMs plus dropout backward (5) and softmax backward (6)."""
    from cost_models.compute import compute_rates, gemm_time_s, materialised_attention_time_s
    from hardware_specs.catalog import load_efficiency, load_gpu
    rates = compute_rates(load_gpu("a100-sxm-80gb"), load_efficiency("ampere"), "fp16")
    s, heads, d, seqs = 1024.0, 16.0, 64.0, 2.0
    pairs = seqs * heads
    qk = gemm_time_s(s, s, d, rates, count=pairs) - (pairs - 1) * rates.kernel_overhead_s
    pv = gemm_time_s(s, d, s, rates, count=pairs) - (pairs - 1) * rates.kernel_overhead_s
    scores = pairs * s * s
    bw, k = rates.hbm_bytes_per_s, rates.kernel_overhead_s
    fwd, bwd = materialised_attention_time_s(seqs * s, s, heads, d, d, rates)
    assert float(fwd) == pytest.approx(qk + pv + scores * (4 + 5) / bw + 2 * k, rel=1e-12)
    assert float(bwd) == pytest.approx(2 * (qk + pv) + scores * (5 + 6) / bw + 2 * k, rel=1e-12)
    fwd0, bwd0 = materialised_attention_time_s(seqs * s, s, heads, d, d, rates, attention_dropout=False)
    assert float(fwd0) == pytest.approx(qk + pv + scores * 4 / bw + k, rel=1e-12)
    assert float(bwd0) == pytest.approx(2 * (qk + pv) + scores * 6 / bw + k, rel=1e-12)
    # QK^T with K = head_dim 64 is memory-bound on an A100: its roofline time is its traffic,
    # the score write included (which is why the passes above leave it out)
    intensity = 2 * s * s * d / ((2 * s * d) * 2 + s * s * 2)
    assert intensity < rates.gemm_flops_per_s / bw


def test_megatron_fused_softmax_needs_sequence_head_pairs_in_multiples_of_four():
    """``FusedScaleMaskSoftmax.is_kernel_available``: 16 < sk <= 4096, sq and sk multiples of 4,
    micro_batch x heads/tp a multiple of 4 (the causal kernel's 4 rows a block)."""
    from cost_models.layer_costs import fused_softmax_kernel_available as fits
    assert not fits(1024.0, 1024, 16 / 8)            # 1 sequence x 2 heads at tp 8: 2 pairs
    assert fits(2048.0, 1024, 16 / 8)                # 2 sequences x 2 heads: 4 pairs
    assert fits(1024.0, 1024, 16 / 4)                # 1 x 4
    assert not fits(3 * 1024.0, 1024, 16 / 8)        # 3 x 2 = 6 pairs
    assert not fits(8192.0, 8192, 32)                # keys beyond 4096
    assert not fits(1022.0, 1022, 32)                # length not a multiple of 4
    assert not fits(16.0, 16, 32)                    # 16 keys: not above 16
    assert list(fits(np.array([1024.0, 2048.0]), 1024, 2.0)) == [False, True]


def test_fused_softmax_fallback_runs_five_fp32_pytorch_ops_each_way():
    """Shape ruled out: cast up, scale, mask, softmax, cast down in forward (6+8+8+8+6 = 36 bytes
    a score against the fused 4) and their five backwards (6+12+8+8+6 = 40 against 6): 32 and
    34 more bytes a score, four more kernels each way."""
    from cost_models.compute import compute_rates, materialised_attention_time_s
    from hardware_specs.catalog import load_efficiency, load_gpu
    rates = compute_rates(load_gpu("a100-sxm-80gb"), load_efficiency("ampere"), "fp16")
    s, heads = 1024.0, 2.0
    scores = heads * s * s
    bw, k = rates.hbm_bytes_per_s, rates.kernel_overhead_s
    fused = materialised_attention_time_s(s, s, heads, 64, 64, rates)
    fallback = materialised_attention_time_s(s, s, heads, 64, 64, rates, fused_softmax_fits=False)
    assert float(fallback[0] - fused[0]) == pytest.approx(scores * 32 / bw + 4 * k, rel=1e-9)
    assert float(fallback[1] - fused[1]) == pytest.approx(scores * 34 / bw + 4 * k, rel=1e-9)
    # a stack without the fused kernel (Megatron-LM 2019) keeps its own three 16-bit passes
    unfused = materialised_attention_time_s(s, s, heads, 64, 64, rates, softmax_fusion=False, fused_softmax_fits=False)
    assert float(unfused[0] - fused[0]) == pytest.approx(scores * 8 / bw + 2 * k, rel=1e-9)



def test_fp32_scores_run_pytorch_ops_at_four_bytes_an_element_and_never_the_fused_kernel():
    """fp32 training (TF32 GEMMs): ``FusedScaleMaskSoftmax`` needs 16-bit inputs for its kernel,
    so the scores take ``forward_torch_softmax`` whatever the fusion switch, at 4 bytes a score:
    forward masked_fill_ (4 + 4) and softmax (4 + 4) = 16 bytes, two kernels, plus the scale
    (4 + 4) when the stack sets one: 24 bytes, three kernels. Backward: softmax backward (read
    P and dP, write: 12), the scale's multiply (8) and the mask's ``grad.masked_fill`` (8): 28
    bytes, three kernels; without a scale the in-place mask hit the score GEMM's output view,
    and autograd's ``CopySlices`` copies the gradient into a new base (8), clones the slice (8),
    masks it (8) and copies it back (8): 12 + 32 = 44 bytes, five kernels."""
    from cost_models.compute import compute_rates, gemm_time_s, materialised_attention_time_s
    from hardware_specs.catalog import load_efficiency, load_gpu
    rates = compute_rates(load_gpu("a100-sxm-80gb"), load_efficiency("ampere"), "tf32")
    assert rates.act_bytes == 4.0
    # OPT-350M at tp 4: 16 / 4 = 4 heads a GPU, 8 sequences of 2048: 8 x 4 x 2048^2 scores
    s, heads, d, seqs = 2048.0, 4.0, 64.0, 8.0
    pairs = seqs * heads
    scores = pairs * s * s
    assert scores == 134_217_728
    qk = gemm_time_s(s, s, d, rates, count=pairs) - (pairs - 1) * rates.kernel_overhead_s
    pv = gemm_time_s(s, d, s, rates, count=pairs) - (pairs - 1) * rates.kernel_overhead_s
    bw, k = rates.hbm_bytes_per_s, rates.kernel_overhead_s
    fwd, bwd = materialised_attention_time_s(seqs * s, s, heads, d, d, rates, softmax_fusion=False,
                                             attention_dropout=False, softmax_scale_pass=False)
    assert float(fwd) == pytest.approx(qk + pv + scores * 16 / bw + 2 * k, rel=1e-12)
    assert float(bwd) == pytest.approx(2 * (qk + pv) + scores * 44 / bw + 5 * k, rel=1e-12)
    # 2.147 GB forward and 5.906 GB backward over the scores: at 2.5 TB/s 0.86 and 2.36 ms
    assert scores * 16 == pytest.approx(2.147e9, rel=1e-3) and scores * 44 == pytest.approx(5.906e9, rel=1e-3)
    scaled = materialised_attention_time_s(seqs * s, s, heads, d, d, rates, softmax_fusion=False,
                                           attention_dropout=False)
    assert float(scaled[0]) == pytest.approx(qk + pv + scores * 24 / bw + 3 * k, rel=1e-12)
    assert float(scaled[1]) == pytest.approx(2 * (qk + pv) + scores * 28 / bw + 3 * k, rel=1e-12)
    # the fused kernel is never taken on fp32 scores: the fusion switch and the shape do not matter
    for fusion in (True, False):
        for fits in (True, False):
            assert materialised_attention_time_s(seqs * s, s, heads, d, d, rates, softmax_fusion=fusion,
                                                 attention_dropout=False, fused_softmax_fits=fits) == \
                pytest.approx(scaled, rel=1e-12)
    # attention dropout in fp32: read 4 + write 4 + a 1-byte mask, each way, one kernel each
    dropped = materialised_attention_time_s(seqs * s, s, heads, d, d, rates, attention_dropout=True)
    assert float(dropped[0] - scaled[0]) == pytest.approx(scores * 9 / bw + k, rel=1e-9)
    assert float(dropped[1] - scaled[1]) == pytest.approx(scores * 9 / bw + k, rel=1e-9)


def test_the_scale_switch_leaves_16_bit_scores_alone():
    """16-bit scores: a Megatron torch path casts them to fp32 first (a new tensor), so no
    ``CopySlices``; ``softmax_scale_pass`` changes nothing there."""
    from cost_models.compute import compute_rates, materialised_attention_time_s
    from hardware_specs.catalog import load_efficiency, load_gpu
    rates = compute_rates(load_gpu("a100-sxm-80gb"), load_efficiency("ampere"), "fp16")
    for fusion, fits in ((True, True), (True, False), (False, False)):
        a = materialised_attention_time_s(2048.0, 2048.0, 4.0, 64, 64, rates, fusion, False, fits)
        b = materialised_attention_time_s(2048.0, 2048.0, 4.0, 64, 64, rates, fusion, False, fits,
                                          softmax_scale_pass=False)
        assert a == b


def test_training_window_layers_attend_to_the_mean_of_min_position_window():
    # a causal sequence of 4096 tokens, window 128 on half the layers: a window layer's queries
    # attend on average to (sum_{i<=128} i + (4096 - 128) x 128) / 4096 = 126.0156 keys (the window
    # of the mean, min(128, 2048), said 128); the full layers to 4096 / 2
    from cost_models.compute import attention_core_flops
    n, w = 4096, 128
    window_keys = (w * (w + 1) / 2 + (n - w) * w) / n
    assert window_keys == pytest.approx(126.015625)
    flops = attention_core_flops(n, n, 64, 64, 64, window=w, window_fraction=0.5)
    # mean over layers: half at n/2 keys, half at the window mean (= w - w(w-1)/(2n) exactly)
    keys = 0.5 * n / 2 + 0.5 * window_keys
    assert float(flops) == pytest.approx(2.0 * n * keys * 64 * 128, rel=1e-12)


def test_blackwell_hides_the_softmax_under_its_matmuls_as_measured_kernels_require():
    # head dim 128: a score is 2 x (128 + 128) = 512 matmul FLOPs and one exponential. Serially
    # on a B200 at 100% of the 2.25 PFLOP/s BF16 peak and 5e12 exp/s:
    # 512 / (512 / 2.25e15 + 1 / 5e12) = 1.1975e15 FLOP/s, below FlashAttention-4's measured
    # 1,605-1,613 TFLOP/s BF16 on B200 (Zadouri, Dao et al. 2026, arXiv 2603.05451): the
    # exponentials overlap the matmuls, as Hopper's FlashAttention-3 (Shah et al. 2024).
    b200 = load_gpu("b200")
    serial_bound = 512 / (512 / b200.peak_flops("bf16") + 1 / b200.sfu_exp_per_s)
    assert serial_bound == pytest.approx(1.1975e15, rel=1e-4)
    assert serial_bound < 1.605e15
    eff = load_efficiency("blackwell")
    assert eff.exposed_softmax_fraction == 0.0
    rates = compute_rates(b200, eff, "bf16")
    # Llama-3-8B's core, 2 x 8192 tokens, 32 heads: 16384 x 4096 x 32 = 2.147e9 exponentials =
    # 0.43 ms at 5e12/s, under the matmuls (2.2e12 FLOPs at <= 2.25 PFLOP/s >= 0.98 ms): the
    # core costs its matmul time alone
    flops = attention_core_flops(16384, 8192, 32, 128, 128)
    exps = attention_core_exponentials(flops, 128, 128)
    assert exps == pytest.approx(16384 * 4096 * 32)
    assert attention_time_s(flops, rates, exps) == pytest.approx(attention_time_s(flops, rates, 0.0))


def test_blackwell_gb300_over_gb200_attention_speedup_is_its_sustained_tensor_rate_as_cudnn_measures():
    # cuDNN 9.22's SDPA benchmark, one release on both chips (NVIDIA/cudnn-frontend
    # benchmark/sdpa_benchmark_training/results/llama3.1/gb{200,300}/*.csv, bf16, batch 2, 64 q /
    # 8 kv heads, hd 128, causal), fwd + bwd ms: 8K GB200 1.397 + 4.127, GB300 1.185 + 3.832;
    # 4K GB200 0.391 + 1.198, GB300 0.323 + 1.101. GB300 / GB200 speed 1.101 and 1.116. paraplan
    # with no exposed exponentials: 2,500 / (2,500 x 0.9) = 1.111 (within 1% of both); a share of
    # 0.15 would add 2 x 0.15 exp a score at 5e12/s against 10.7e12/s: 1.127, 2.4% over 8K's.
    measured = {8192: (1.397 + 4.127) / (1.185 + 3.832), 4096: (0.391 + 1.198) / (0.323 + 1.101)}
    assert measured[8192] == pytest.approx(1.1011, abs=1e-4)
    assert measured[4096] == pytest.approx(1.1159, abs=1e-4)
    eff = load_efficiency("blackwell")

    def speedup(eff, seq):
        times = []
        for name in ("gb200", "gb300"):
            rates = compute_rates(load_gpu(name), eff, "bf16")
            flops = attention_core_flops(2 * seq, seq, 64, 128, 128)
            times.append(sum(attention_time_s(flops, rates, attention_core_exponentials(flops, 128, 128))))
        return times[0] / times[1]

    for seq, ratio in measured.items():
        assert speedup(eff, seq) == pytest.approx(2500 / 2250, rel=2e-3)
        assert speedup(eff, seq) == pytest.approx(ratio, rel=0.01)
    assert speedup(replace(eff, exposed_softmax_fraction=0.15), 8192) > 1.02 * measured[8192]
