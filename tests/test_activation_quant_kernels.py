"""Activation quantisation in kernels of its own before W8A8 / W4A4 GEMMs
(``ServingBehaviour.activation_quant_inputs``, ``cost_models.inference_layers.activation_quant_s``).

Hand numbers: Llama-3.1-70B (80 layers, h 8192, 64 heads x 128, ffn 28672) decoding 4 requests
on one B200 (8.0 TB/s, hbm_bw_tb_per_s in hardware_specs/gpus/b200.yaml) at the Blackwell
serving efficiency of the session-58 fit (decode_hbm_fraction 0.8455, kernel_fixed_s 4.488e-6 s,
what hardware_specs/serving_efficiency/blackwell.yaml held before the session-59 refit, 0.8807 and
4.549e-6 s since; the test builds these factors itself, so its hand numbers do not move with a
refit). TensorRT-LLM (hardware_specs/stacks/trtllm-1.yaml,
whose source names the files): NVFP4 quantises the qkv, gate_up and down inputs in fp4_quantize
kernels (the attention core writes o_proj's input in NVFP4); per-tensor FP8 the qkv and gate_up
inputs (SwiGLU writes down's input in FP8); at tp > 1 the all-reduce fused with the RMSNorm also
quantises qkv's and gate_up's inputs.
"""
from dataclasses import replace

import pytest

from cost_models.inference_step import step_time
from hardware_specs.catalog import load_cluster, load_stack
from hardware_specs.errors import InputError
from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.serving_efficiency import ServingEfficiency
from model_specs.catalog import load_model

KERNEL_S = 4.488e-6
HBM = 8.0e12 * 0.8455
EFF = ServingEfficiency(generation="blackwell", decode_hbm_fraction=0.8455, gemm_peak_fraction=0.4943,
                        attention_peak_fraction=0.2608, kernel_fixed_s=KERNEL_S, arrival_sync_chunked=1.0)
H, HEADS_DIM, FFN, LAYERS = 8192, 64 * 128, 28672, 80


def _step(fmt, beh, tp, reqs=4.0, prompt=0.0):
    return step_time(load_model("llama3.1-70b"), load_cluster("dgx-b200"), EFF, beh, fmt, fmt, 1.0,
                     tp, 1, 1, tp, 1, prompt, prompt / 2, reqs, 2048.0)


def _trtllm():
    return replace(load_stack("trtllm-1").serving, host_step_s=0.0, host_launch_s=0.0)


def test_trtllm_nvfp4_decode_on_one_b200_adds_three_quant_kernels_a_layer():
    beh = _trtllm()
    before = replace(beh, activation_quant_inputs={})
    new, old = _step("nvfp4", beh, 1), _step("nvfp4", before, 1)
    # 804 kernels a step before (80 x (6 + 4) + 4 of the head), 80 x 3 = 240 more after
    assert float(old["kernel_fixed_s"]) == pytest.approx(804 * KERNEL_S, rel=1e-9)
    assert float(new["kernel_fixed_s"]) == pytest.approx(1044 * KERNEL_S, rel=1e-9)
    # bytes: 4 tokens x (8192 + 8192 + 28672) elements a layer, read at 2 bytes and written at
    # 0.5 + 1/16 (e2m1 pairs and an fp8 scale per 16)
    quant_bytes = LAYERS * 4 * (H + H + FFN) * (2.0 + 0.5625)
    assert float(new["elementwise_s"] - old["elementwise_s"]) == pytest.approx(quant_bytes / HBM, rel=1e-9)
    diff = 240 * KERNEL_S + quant_bytes / HBM              # 1.0771 ms + 0.0055 ms
    assert float(new["step_s"] - old["step_s"]) == pytest.approx(diff, rel=1e-9)
    assert diff == pytest.approx(1.0826e-3, rel=1e-3)


def test_trtllm_fp8_quantises_two_inputs_a_layer_and_nvfp4_one_more():
    beh = _trtllm()
    before = replace(beh, activation_quant_inputs={})
    fp8 = float(_step("fp8", beh, 1)["kernel_fixed_s"] - _step("fp8", before, 1)["kernel_fixed_s"])
    assert fp8 == pytest.approx(160 * KERNEL_S, rel=1e-9)
    # the formats differ by the down projection's input: one kernel a layer
    nv = float(_step("nvfp4", beh, 1)["step_s"] - _step("fp8", beh, 1)["step_s"])
    nv0 = float(_step("nvfp4", before, 1)["step_s"] - _step("fp8", before, 1)["step_s"])
    bytes_diff = LAYERS * 4 * (H * 2 * (0.5625 - 1.0) + FFN * (2.0 + 0.5625))
    assert nv - nv0 == pytest.approx(80 * KERNEL_S + bytes_diff / HBM, rel=1e-9)


def test_a_fused_all_reduce_norm_carries_the_qkv_and_gate_up_quantisation():
    beh = _trtllm()
    before = replace(beh, activation_quant_inputs={})
    new, old = _step("nvfp4", beh, 4), _step("nvfp4", before, 4)
    # tp 4: only the down projection's input (ffn / 4 = 7168 wide) is quantised on its own
    assert float(new["kernel_fixed_s"] - old["kernel_fixed_s"]) == pytest.approx(80 * KERNEL_S, rel=1e-9)
    assert float(new["elementwise_s"] - old["elementwise_s"]) == pytest.approx(
        LAYERS * 4 * (FFN / 4) * 2.5625 / HBM, rel=1e-9)


def test_prefill_pays_the_quant_bytes_of_every_prompt_token():
    beh = _trtllm()
    before = replace(beh, activation_quant_inputs={})
    new, old = _step("nvfp4", beh, 1, reqs=0.0, prompt=1024.0), _step("nvfp4", before, 1, reqs=0.0, prompt=1024.0)
    assert float(new["elementwise_s"] - old["elementwise_s"]) == pytest.approx(
        LAYERS * 1024 * (H + H + FFN) * 2.5625 / HBM, rel=1e-9)


def test_16_bit_and_weight_only_formats_and_unlisted_engines_add_nothing():
    beh = _trtllm()
    before = replace(beh, activation_quant_inputs={})
    for fmt in ("bf16", "int4_wo"):
        assert float(_step(fmt, beh, 1)["step_s"]) == float(_step(fmt, before, 1)["step_s"])
    # NVFP4 on Hopper runs weight-only (16-bit activations): nothing to quantise
    hop = dict(model=load_model("llama3.1-70b"), cluster=load_cluster("dgx-h100"), eff=replace(EFF, generation="hopper"))
    a = step_time(hop["model"], hop["cluster"], hop["eff"], beh, "nvfp4", "nvfp4", 1.0, 1, 1, 1, 1, 1, 0.0, 0.0, 4.0, 2048.0)
    b = step_time(hop["model"], hop["cluster"], hop["eff"], before, "nvfp4", "nvfp4", 1.0, 1, 1, 1, 1, 1, 0.0, 0.0, 4.0,
                  2048.0)
    assert float(a["step_s"]) == float(b["step_s"])
    assert ServingBehaviour().quant_inputs("nvfp4") == ()


def test_bad_entries_are_refused_naming_the_field():
    for bad in ({"nvfp4": ["qkv", "lm_head"]}, {"fp5": ["qkv"]}, {"nvfp4": "qkv"}, {"nvfp4": ["qkv", "qkv"]}):
        with pytest.raises(InputError, match="activation_quant_inputs"):
            ServingBehaviour(activation_quant_inputs=bad)


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "int4_wo", "mxfp4"])
def test_a_format_that_multiplies_16_bit_activations_is_refused_as_a_key(fmt):
    # 16-bit GEMMs and weight-only formats (int4_wo; MXFP4 experts as the engines run them beside
    # 16-bit activations) quantise no activation, so a stack listing one would have been charged
    # one kernel and a made-up 1-byte write per input (Llama-3.1-70B tp 1: 320 kernels a step)
    with pytest.raises(InputError, match="activation_quant_inputs"):
        ServingBehaviour(activation_quant_inputs={fmt: ["qkv", "o_proj", "gate_up", "down"]})
    for ok in ("fp8", "fp8_block", "nvfp4"):
        assert ServingBehaviour(activation_quant_inputs={ok: ["down"]}).quant_inputs(ok) == ("down",)
