"""Quantisation kernels of low-precision GEMMs and per-expert GEMM launches
(``cost_models.low_precision``, ``layer_costs.linear_cast_bytes``, ``moe.grouped_gemm_time_s``):
hand-derived bytes and kernel counts, and what they add to a layer's passes."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cost_models import low_precision as lp
from cost_models import moe
from cost_models.compute import compute_rates, gemm_time_s, kernel_counting_rates
from cost_models.layer_costs import cast_times, linear_cast_bytes
from hardware_specs.catalog import load_cluster, load_efficiency, load_stack
from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from simulator.config_batch import ATTENTION_KERNEL_CODES, CP_KIND_CODES
from simulator.layer_times import layer_times
from simulator.parallel_config import AttentionKernel, CPKind, ParallelConfig
from simulator.stack_defaults import stack_config_fields

ONE = [(4096.0, 8192.0)]          # one linear layer: Y[m, 4096] = X[m, 8192] W


def test_current_scaling_reads_each_tensor_once_more_in_two_tensor_kernels():
    delayed = linear_cast_bytes(1024, ONE, "fp8", [False], [False])
    current = linear_cast_bytes(1024, ONE, "fp8", [False], [False], current_scaling=True)
    # delayed: read 2 B, write the row-wise and transposed FP8 copies 1 + 1 B, one kernel;
    # current: the amax pass reads 2 B more; amax and cast are two tensor kernels (TE v2.14
    # launches four: zero_amax and compute_scale_from_amax are <<<1, 1>>> and not priced)
    assert float(delayed["fprop"]) == 1024 * 8192 * 4.0 and float(delayed["fprop_kernels"]) == 1.0
    assert float(current["fprop"]) == 1024 * 8192 * 6.0 and float(current["fprop_kernels"]) == 2.0
    assert float(delayed["dgrad"]) == 1024 * 4096 * 4.0 and float(current["dgrad"]) == 1024 * 4096 * 6.0
    assert float(current["dgrad_kernels"]) == 2.0
    assert lp.SCALAR_QUANTISE_KERNELS == {"current": 2.0, "current_fused": 1.0}
    # weights are cast once per step, the same under both
    assert float(current["weights"]) == float(delayed["weights"]) == 8192 * 4096 * 4.0


def test_a_norm_fed_input_is_free_under_delayed_scaling_and_one_tensor_kernel_under_current():
    delayed = linear_cast_bytes(1024, ONE, "fp8", [True], [False])
    current = linear_cast_bytes(1024, ONE, "fp8", [True], [False], current_scaling=True)
    assert float(delayed["fprop"]) == 0.0 and float(delayed["fprop_kernels"]) == 0.0
    # the norm writes 16-bit output and its amax; the (one-thread) scale and the cast follow:
    # read 2 B, write 2 x 1 B in one tensor kernel
    assert float(current["fprop"]) == 1024 * 8192 * 4.0 and float(current["fprop_kernels"]) == 1.0
    assert lp.quantise_kernels("fp8", True, fused=True) == 1.0
    assert lp.quantise_kernels("bf16", True) == 0.0


def test_per_expert_operands_quantise_once_per_expert_except_under_delayed_scaling():
    current = linear_cast_bytes(1024, ONE, "fp8", [False], [False], current_scaling=True, groups=8)
    delayed = linear_cast_bytes(1024, ONE, "fp8", [False], [False], groups=8)
    mx = linear_cast_bytes(1024, ONE, "mxfp8", [False], [False], groups=8)
    assert float(current["fprop_kernels"]) == 2.0 * 8 and float(current["dgrad_kernels"]) == 2.0 * 8
    assert float(delayed["fprop_kernels"]) == 1.0           # TE's multi-tensor cast-transpose
    assert float(mx["fprop_kernels"]) == 8.0
    # the bytes do not depend on how the rows are split
    assert float(current["fprop"]) == 1024 * 8192 * 6.0


def test_sequence_parallelism_quantises_the_shard_before_the_all_gather():
    full = linear_cast_bytes(4096, ONE, "fp8", [False], [False], current_scaling=True)
    shard = linear_cast_bytes(4096, ONE, "fp8", [False], [False], current_scaling=True, seq_split=4.0,
                              input_sharded=[True], grad_sharded=[True])
    assert float(shard["fprop"]) == float(full["fprop"]) / 4 == 1024 * 8192 * 6.0
    assert float(shard["dgrad"]) == float(full["dgrad"]) / 4
    assert float(shard["fprop_kernels"]) == 2.0


def test_cast_seconds_are_bytes_at_the_memory_rate_plus_each_kernels_fixed_time():
    rates = compute_rates(load_cluster("dgx-h100").gpu, load_efficiency("hopper"), "fp8")
    casts = cast_times(linear_cast_bytes(1024, ONE, "fp8", [False], [False], current_scaling=True), rates)
    assert float(casts["cast_fwd_s"]) == pytest.approx(1024 * 8192 * 6.0 / rates.hbm_bytes_per_s
                                                       + 2 * rates.kernel_overhead_s, rel=1e-12)
    assert float(casts["weight_cast_s"]) == pytest.approx(8192 * 4096 * 4.0 / rates.hbm_bytes_per_s, rel=1e-12)


def test_a_grouped_gemm_launches_one_gemm_per_expert():
    rates = compute_rates(load_cluster("dgx-h100").gpu, load_efficiency("hopper"), "bf16")
    count = kernel_counting_rates(rates)
    assert float(moe.grouped_gemm_time_s(512, 1536, 2048, 16, count)) == 16.0
    assert float(moe.grouped_gemm_time_s(512, 1536, 2048, 16, count, launches=1)) == 1.0
    per_expert = float(gemm_time_s(512, 1536, 2048, rates))
    assert float(moe.grouped_gemm_time_s(512, 1536, 2048, 16, rates)) == pytest.approx(16 * per_expert, rel=1e-12)


def test_an_fp8_moe_block_counts_its_per_expert_gemms_and_quantisations():
    model = load_model("qwen3-30b-a3b")             # 128 experts, top 8, SwiGLU experts
    rates = kernel_counting_rates(compute_rates(load_cluster("dgx-h100").gpu, load_efficiency("hopper"), "fp8"))
    # ep 16: 8 local experts; two grouped GEMMs (fc1, fc2) of 8 launches and the router GEMM
    current = moe.moe_mlp_costs(model, rates, 4096.0, 16, 1, current_scaling=True)
    delayed = moe.moe_mlp_costs(model, rates, 4096.0, 16, 1)
    assert float(current["gemm_fwd_s"]) == 1 + 2 * 8
    assert float(current["gemm_dgrad_s"]) == 1 + 2 * 8 and float(current["gemm_wgrad_s"]) == 1 + 2 * 8
    # fc1 and fc2 inputs (forward) and output gradients (backward), per expert, 2 tensor kernels each
    assert float(current["cast_fwd_s"]) == 2 * 8 * 2 and float(current["cast_bwd_s"]) == 2 * 8 * 2
    assert float(delayed["cast_fwd_s"]) == 2 and float(delayed["cast_bwd_s"]) == 2


def _dense_layer(eff, current, cuda_graphs=True):
    model = load_model("llama3-8b")
    cluster = load_cluster("dgx-h100")
    rates = compute_rates(cluster.gpu, eff, "fp8")
    return layer_times(model, cluster, eff, rates, np.array([4096.0]), np.array([1.0]), np.array([1.0]),
                       np.array([False]), np.array([0]), np.array([1.0]), np.array([1.0]), np.array([1.0]),
                       np.array([False]), np.array([CP_KIND_CODES[CPKind.RING]]),
                       np.array([ATTENTION_KERNEL_CODES[AttentionKernel.AUTO]]), np.array([True]),
                       np.array([False]), cuda_graphs=np.array([cuda_graphs]),
                       fp8_current_scaling=np.array([current])), rates


def test_current_scaling_adds_the_hand_counted_bytes_and_kernels_to_a_dense_layers_forward():
    eff = load_efficiency("hopper")
    cur, rates = _dense_layer(eff, True)
    dly, _ = _dense_layer(eff, False)
    # Llama-3-8B, 4096 tokens, tp 1: h 4096, attention width 32 x 128 = 4096, FFN 14336.
    # qkv and fc1 read a norm's output: delayed 0 B / 0 kernels, current 4 B / 1 tensor kernel;
    # the output projection's and fc2's inputs (the attention core's and the activation's
    # outputs) alone: 4 B / 1 kernel vs 6 B / 2 tensor kernels
    extra_bytes = 4096 * (4096 * 4 + 4096 * 2 + 4096 * 4 + 14336 * 2)
    extra_kernels = 1 + 1 + 1 + 1
    delta = float(cur["compute_fwd_dense"][0] - dly["compute_fwd_dense"][0])
    assert delta == pytest.approx(extra_bytes / rates.hbm_bytes_per_s + extra_kernels * rates.kernel_overhead_s,
                                  rel=1e-9)


def test_a_host_bound_pass_issues_the_quantisation_kernels_too():
    # with one second per issued kernel the pass lasts its kernel count in seconds: current
    # scaling issues the 4 extra forward tensor kernels of the test above
    eff = replace(load_efficiency("hopper"), cpu_issue_s=1.0)
    cur, _ = _dense_layer(eff, True, cuda_graphs=False)
    dly, _ = _dense_layer(eff, False, cuda_graphs=False)
    assert float(cur["f_dense"][0] - dly["f_dense"][0]) == pytest.approx(4.0, abs=1e-6)


def test_the_stacks_fp8_recipe_sets_current_scaling():
    assert stack_config_fields(load_stack("megatron-bridge"), "fp8")["fp8_current_scaling"] is True
    assert stack_config_fields(load_stack("megatron-core"), "fp8")["fp8_current_scaling"] is False


def test_the_expert_output_bias_is_added_per_local_expert_in_six_row_passes_and_undone_in_eight():
    # 16 local experts, 16,384 routed rows of 2,880 bf16 elements (GPT-OSS 120B at EP 8). Backward,
    # as autograd runs _apply_bias: the two products of b * p and their reductions (6 passes), the
    # split of the expert output concatenates its gradient (SplitWithSizesBackward0 = at::cat: read,
    # write), the split of the probabilities theirs (16,384 x 2 bytes read and written)
    work = moe.expert_output_bias_work(16384.0, 2880, 16.0, 2.0)
    assert float(work["fwd_bytes"]) == 6 * 16384 * 2880 * 2
    assert float(work["bwd_bytes"]) == 8 * 16384 * 2880 * 2 + 16384 * 2 * 2
    assert float(work["fwd_kernels"]) == 2 * 16 + 1 and float(work["bwd_kernels"]) == 4 * 16 + 2


def test_a_biased_moe_block_pays_the_bias_passes_and_an_unbiased_one_does_not():
    rates = compute_rates(load_cluster("dgx-h100").gpu, load_efficiency("hopper"), "bf16")
    biased = load_model("gpt-oss-120b")
    plain = replace(biased, linear_bias=False)
    with_bias = moe.moe_mlp_costs(biased, rates, 4096.0, 8, 1)
    without = moe.moe_mlp_costs(plain, rates, 4096.0, 8, 1)
    # 4096 tokens x top 4 = 16,384 rows on the GPU, 128 / 8 = 16 local experts
    work = moe.expert_output_bias_work(16384.0, 2880, 16.0, 2.0)
    assert float(with_bias["elem_fwd_s"] - without["elem_fwd_s"]) == pytest.approx(
        float(work["fwd_bytes"]) / rates.hbm_bytes_per_s + float(work["fwd_kernels"]) * rates.kernel_overhead_s,
        rel=1e-9)
    assert float(with_bias["elem_bwd_s"] - without["elem_bwd_s"]) == pytest.approx(
        float(work["bwd_bytes"]) / rates.hbm_bytes_per_s + float(work["bwd_kernels"]) * rates.kernel_overhead_s,
        rel=1e-9)


def test_float32_probabilities_promote_the_expert_output_bias_to_float32():
    # HybridEP / DeepEP hand the experts float32 probabilities (Megatron-LM@d7288711
    # token_dispatcher.py:1033-1039, :1178-1184), so _apply_bias (experts.py:251-268) computes
    # b * p, the add and the concatenation in fp32 and casts back with .to(bf16). Per element of
    # the rows x hidden output, forward: b * p writes 4; the add reads 2 (bf16 output) + 4, writes 4;
    # the cat reads 4, writes 4; .to reads 4, writes 2: 28 bytes (bf16 probabilities: 12), one
    # kernel more (.to). Backward: .to's backward reads 2, writes 4; the two products read 4 and
    # write 4 each, their reductions read 4 each (24); each expert output's gradient is cast back
    # (read 4, write 2) and the split's at::cat copies them (read 2, write 2): 6 + 24 + 6 + 4 = 40
    # bytes (bf16: 16); per row the probabilities' split copies their fp32 gradient (8 bytes; bf16 4),
    # per bias element its gradient is cast back (read 4, write 2). Kernels 4 e + 2 + 1 + 2 e.
    elems = 65536 * 2880
    fp32 = moe.expert_output_bias_work(65536.0, 2880, 2.0, 2.0, probs_bytes=4.0)
    assert float(fp32["fwd_bytes"]) == 28 * elems
    assert float(fp32["bwd_bytes"]) == 40 * elems + 65536 * 8 + 2 * 2880 * 6
    assert float(fp32["fwd_kernels"]) == 2 * 2 + 1 + 1 and float(fp32["bwd_kernels"]) == 4 * 2 + 2 + 1 + 2 * 2
    # bf16 probabilities (the all-to-all dispatcher, gpt-oss's router dtype unset)
    same = moe.expert_output_bias_work(65536.0, 2880, 2.0, 2.0, probs_bytes=2.0)
    assert float(same["fwd_bytes"]) == 12 * elems and float(same["bwd_bytes"]) == 16 * elems + 65536 * 4
    assert float(same["fwd_kernels"]) == 5 and float(same["bwd_kernels"]) == 10


def test_the_op_fusers_grouped_mlp_adds_the_bias_in_the_gemm_epilogue():
    # GPT-OSS 120B on GB300 at EP 16 (the 26.06 / 26.08 MXFP8 presets): 16,384 tokens x top 4 =
    # 65,536 rows of 2,880, 128 / 16 = 8 local experts. Forward, both: the FC2 kernel adds the bias
    # in its epilogue; only the 8 bias vectors are stacked for it (read and write 8 x 2,880 x 2).
    unscaled = moe.fused_expert_output_bias_work(65536.0, 2880, 8.0, 2.0, scaled=False)
    scaled = moe.fused_expert_output_bias_work(65536.0, 2880, 8.0, 2.0, scaled=True)
    for work in (unscaled, scaled):
        assert float(work["fwd_bytes"]) == 2 * 8 * 2880 * 2 and float(work["fwd_kernels"]) == 1
    # backward, unscaled (26.06): the gradient's MXFP8 quantisation writes fp32 partial bias sums,
    # 65,536 / 128 = 512 rows of 2,880, which one more kernel reads and reduces to 8 x 2,880 bf16
    assert float(unscaled["bwd_bytes"]) == 2 * 512 * 2880 * 4 + 8 * 2880 * 2
    assert float(unscaled["bwd_kernels"]) == 1
    # scaled (26.08): a Triton kernel reads the bf16 gradient once, the fp32 probability and its
    # gradient (read, write) per row; stack, zeroed fp32 buffer, the kernel's read and atomics and the
    # cast back cost 4 x 2 + 16 bytes per bias element; 4 kernels
    assert float(scaled["bwd_bytes"]) == 65536 * 2880 * 2 + 65536 * 12 + 8 * 2880 * 24
    assert float(scaled["bwd_kernels"]) == 4
    # bf16 probabilities (not what the flex dispatcher hands) would be cast up for the epilogue
    cast = moe.fused_expert_output_bias_work(65536.0, 2880, 8.0, 2.0, scaled=True, probs_bytes=2.0)
    assert float(cast["fwd_bytes"]) == 2 * 8 * 2880 * 2 + 65536 * 6 and float(cast["fwd_kernels"]) == 2


def test_the_stacks_expert_output_bias_picks_the_bias_path_and_the_float32_promotion():
    rates = compute_rates(load_cluster("dgx-h100").gpu, load_efficiency("hopper"), "bf16")
    biased = load_model("gpt-oss-120b")
    plain = replace(biased, linear_bias=False)

    def bias_s(dedup, impl, eager=True):
        """What the bias adds to the block's element-wise seconds, forward and backward."""
        kw = dict(dispatch_dedup=dedup, expert_output_bias=impl, glu_clamp_eager=eager)
        b, p = moe.moe_mlp_costs(biased, rates, 4096.0, 8, 1, **kw), moe.moe_mlp_costs(plain, rates, 4096.0, 8, 1, **kw)
        return float(b["elem_fwd_s"] - p["elem_fwd_s"]), float(b["elem_bwd_s"] - p["elem_bwd_s"])

    def priced(work):
        return tuple(float(work[f"{d}_bytes"]) / rates.hbm_bytes_per_s + float(work[f"{d}_kernels"]) * rates.kernel_overhead_s
                     for d in ("fwd", "bwd"))
    # 4096 tokens x top 4 = 16,384 rows of 2,880 on the GPU, 16 local experts: fp32 under the flex
    # dispatcher on the unfused path, whatever the clamp does; bf16 under the all-to-all dispatcher
    fp32 = priced(moe.expert_output_bias_work(16384.0, 2880, 16.0, 2.0, probs_bytes=4.0))
    bf16 = priced(moe.expert_output_bias_work(16384.0, 2880, 16.0, 2.0))
    assert bias_s(True, "megatron_eager") == pytest.approx(fp32, rel=1e-9)
    assert bias_s(True, "megatron_eager", eager=False) == pytest.approx(fp32, rel=1e-9)
    assert bias_s(False, "megatron_eager") == pytest.approx(bf16, rel=1e-9)
    # the op fuser's paths run no _apply_bias
    for impl, scaled in (("fused_mlp_epilogue", False), ("fused_mlp_scaled", True)):
        fused = priced(moe.fused_expert_output_bias_work(16384.0, 2880, 16.0, 2.0, scaled))
        assert bias_s(True, impl, eager=False) == pytest.approx(fused, rel=1e-9)
    # 16 more bytes an element forward under fp32 than bf16 probabilities
    assert fp32[0] - bf16[0] == pytest.approx(16 * 16384 * 2880 / rates.hbm_bytes_per_s + rates.kernel_overhead_s,
                                              rel=1e-9)
    # codes per row, as the planner's batches pass them
    codes = np.array([moe.EXPERT_OUTPUT_BIAS_CODES[n] for n in ("megatron_eager", "fused_mlp_epilogue")])
    rows = moe.moe_mlp_costs(biased, rates, 4096.0, 8, 1, dispatch_dedup=True, expert_output_bias=codes)
    one = [moe.moe_mlp_costs(biased, rates, 4096.0, 8, 1, dispatch_dedup=True, expert_output_bias=n)
           for n in ("megatron_eager", "fused_mlp_epilogue")]
    assert rows["elem_bwd_s"] == pytest.approx([float(o["elem_bwd_s"]) for o in one], rel=1e-12)


def test_the_bridge_presets_that_run_the_op_fuser_add_the_expert_bias_in_the_fused_mlp():
    # the GB200 / GB300 MXFP8 presets set use_transformer_engine_op_fuser (te_op_fuser in
    # megatron_bridge_presets.csv); Megatron-Core cd4afffa (26.08) scales FC2's bias, d0b3b775 (26.06) not
    for stack, impl in (("megatron-bridge-26.06", "fused_mlp_epilogue"), ("megatron-bridge-26.06.01", "fused_mlp_epilogue"),
                        ("megatron-bridge", "fused_mlp_scaled")):
        fields = stack_config_fields(load_stack(stack), "mxfp8", "gpt-oss-120b", "gb300")
        assert fields["expert_output_bias"] == impl and fields["glu_clamp_eager"] is False
        assert stack_config_fields(load_stack(stack), "bf16", "gpt-oss-120b", "gb300")["expert_output_bias"] == "megatron_eager"
        assert stack_config_fields(load_stack(stack), "mxfp8", "gpt-oss-120b", "b300")["expert_output_bias"] == "megatron_eager"
    assert stack_config_fields(load_stack("megatron-core"))["expert_output_bias"] == "megatron_eager"
    with pytest.raises(InputError, match="expert_output_bias"):
        ParallelConfig(expert_output_bias="fused")


def test_nemotron_3_nano_moe_block_at_ep8_prices_two_tensor_kernels_per_expert_operand():
    # 128 experts / ep 8 = 16 local experts, squared-ReLU (not gated) experts and one shared
    # expert. Forward: fc1 and fc2 inputs split per expert, amax + cast each: 2 x 16 x 2 = 64;
    # the shared expert's fc1 reads the pre-MLP norm (cast after the norm's amax: 1) and its fc2
    # input is quantised alone (2): 67. Backward: the output gradients of fc1 and fc2 per expert
    # (64) and of the shared expert's two linears (2 x 2): 68. Transformer Engine v2.14 launches
    # twice as many per split (zero_amax and compute_scale_from_amax, <<<1, 1>>>), not priced.
    model = load_model("nemotron-3-nano")
    rates = kernel_counting_rates(compute_rates(load_cluster("dgx-h100").gpu, load_efficiency("hopper"), "fp8"))
    block = moe.moe_mlp_costs(model, rates, 8192.0, 8, 1, current_scaling=True)
    assert float(block["cast_fwd_s"]) == 2 * 16 * 2 + 1 + 2
    assert float(block["cast_bwd_s"]) == 2 * 16 * 2 + 2 * 2


def test_blackwell_per_tensor_fp8_keeps_no_transposed_copy():
    # Transformer Engine v2.14.1: nvte_is_non_tn_fp8_gemm_supported() is true for compute
    # capability 10.x-11.x (common/transformer_engine.cpp:1099-1110) and the quantizer writes a
    # transposed copy only where it is false (pytorch/csrc/quantizer.cpp:574-584). Per element:
    # H100 current scaling standalone 2 read + 2 amax read + 1 + 1 write = 6, after a norm
    # 2 read + 1 + 1 write = 4, weights (delayed) 2 + 1 + 1 = 4; B200 one copy: 5, 3 and 3.
    from hardware_specs.catalog import load_gpu
    h100, b200 = load_gpu("h100-sxm-80gb"), load_gpu("b200")
    assert not h100.fp8_gemm_any_layout and b200.fp8_gemm_any_layout
    eff = load_efficiency("blackwell")
    for gpu, alone, after_norm, weight in ((h100, 6.0, 4.0, 4.0), (b200, 5.0, 3.0, 3.0)):
        rates = compute_rates(gpu, eff, "fp8")
        c = linear_cast_bytes(1024, ONE, "fp8", [False], [False], current_scaling=True,
                              transposed_copy=rates.fp8_transposed_copy)
        n = linear_cast_bytes(1024, ONE, "fp8", [True], [False], current_scaling=True,
                              transposed_copy=rates.fp8_transposed_copy)
        assert float(c["fprop"]) == 1024 * 8192 * alone
        assert float(c["dgrad"]) == 1024 * 4096 * alone
        assert float(n["fprop"]) == 1024 * 8192 * after_norm
        assert float(c["weights"]) == 8192 * 4096 * weight
    # the block-scaled recipes keep both copies on Blackwell too: mxfp8 2 + 2 x 1.03125
    m = linear_cast_bytes(1024, ONE, "mxfp8", [False], [False],
                          transposed_copy=compute_rates(b200, eff, "mxfp8").fp8_transposed_copy)
    assert float(m["fprop"]) == 1024 * 8192 * 4.0625
