"""TensorRT-LLM runs the prefill attention core in FP8 over an FP8 KV cache
(``cpp/tensorrt_llm/thop/attentionOp.cpp``: ``mFP8ContextFMHA = ... || (hasFp8KvCache() &&
use_paged_context_fmha)``, ``mFP8ContextMLA = (SM 90/100/103/120) && hasFp8KvCache()``): its
causal FLOPs run at the FP8 tensor peak, twice the 16-bit one on Hopper and Blackwell
(``ServingBehaviour.fp8_context_attention``, ``prefill_attention_format``)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models.inference_step import step_time
from hardware_specs.catalog import load_cluster, load_stack
from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.serving_efficiency import ServingEfficiency
from model_specs.catalog import load_model

EFF = ServingEfficiency(generation="hopper", decode_hbm_fraction=0.8, gemm_peak_fraction=0.6,
                        attention_peak_fraction=0.5, kernel_fixed_s=0.0)
PLAIN = ServingBehaviour(host_step_s=0.0, host_launch_s=0.0)
FP8_FMHA = replace(PLAIN, fp8_context_attention=True)

#: Llama-3.1-70B at tp 4, a prompt chunk of 8,192 tokens whose queries attend to 4,096 keys on
#: average: per layer 2 (QK and PV) x 8,192 x 4,096 x 64 / 4 heads x 2 x 128 (q.k and p.v
#: widths) = 2^1 x 2^13 x 2^12 x 2^4 x 2^8 = 2^38 FLOPs
LAYER_FLOPS = 2.0 * 8192 * 4096 * (64 // 4) * 2 * 128
LAYERS = 80


def _prefill_core_s(beh, kv_bytes, cluster_name="dgx-h100"):
    """Seconds the 4,096 keys add to the chunk's step (the prefill attention core's FLOPs: the
    projections, the KV write and everything else do not depend on the keys)."""
    model, cluster = load_model("llama3.1-70b"), load_cluster(cluster_name)

    def step(keys):
        return float(step_time(model, cluster, EFF, beh, "fp8", "fp8", kv_bytes, 4, 1, 1, 4, 1,
                               8192.0, keys, 0.0, 0.0)["step_s"])
    return step(4096.0) - step(0.0), cluster.gpu


def test_the_hand_flops():
    assert LAYER_FLOPS == 2**38 == 274_877_906_944


def test_an_fp8_cache_runs_the_context_attention_at_the_fp8_peak_under_fp8_context_attention():
    # H100 SXM: 1,978.9 TFLOPS dense FP8, 989.4 dense BF16 (datasheet), times the file's
    # sustained tensor fraction, times the attention fraction 0.5
    core, gpu = _prefill_core_s(FP8_FMHA, 1.0)
    fp8_rate = 1978.9e12 * gpu.sustained_tensor_fraction * 0.5
    assert core == pytest.approx(LAYERS * LAYER_FLOPS / fp8_rate, rel=1e-6)
    # the same engine with a 16-bit cache, and an engine without the FP8 path, stay at BF16
    bf16_rate = 989.4e12 * gpu.sustained_tensor_fraction * 0.5
    for beh, kv_bytes in ((FP8_FMHA, 2.0), (PLAIN, 1.0)):
        core16, _ = _prefill_core_s(beh, kv_bytes)
        assert core16 == pytest.approx(LAYERS * LAYER_FLOPS / bf16_rate, rel=1e-6)


def test_a_gpu_without_fp8_tensor_cores_keeps_its_16_bit_rate():
    # A100: no FP8 peak in its file; an FP8 cache there is stored, not computed in FP8
    core, gpu = _prefill_core_s(FP8_FMHA, 1.0, "dgx-a100-80gb")
    assert "fp8" not in gpu.peak_flops_per_s
    assert core == pytest.approx(LAYERS * LAYER_FLOPS / (gpu.sustained_flops("bf16") * 0.5), rel=1e-6)


def test_the_stacks_state_which_engine_runs_fp8_context_attention():
    assert load_stack("trtllm-1").serving.fp8_context_attention
    assert load_stack("trtllm-1").serving.prefill_attention_format(1.0) == "fp8"
    assert load_stack("trtllm-1").serving.prefill_attention_format(2.0) == "bf16"
    for name in ("vllm-0.11", "vllm-0.14", "sglang-0.5"):
        beh = load_stack(name).serving
        assert not beh.fp8_context_attention and beh.prefill_attention_format(1.0) == "bf16"


def test_the_decode_step_does_not_move():
    # the FP8 path is the context attention's: a decode-only step is priced the same either way
    model, cluster = load_model("llama3.1-70b"), load_cluster("dgx-h100")
    a = step_time(model, cluster, EFF, PLAIN, "fp8", "fp8", 1.0, 4, 1, 1, 4, 1, 0.0, 0.0, 64.0, 2048.0)
    b = step_time(model, cluster, EFF, FP8_FMHA, "fp8", "fp8", 1.0, 4, 1, 1, 4, 1, 0.0, 0.0, 64.0, 2048.0)
    assert float(a["step_s"]) == float(b["step_s"])
