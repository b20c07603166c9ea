"""Megatron-LM 2022 fuses gradient accumulation into the weight-gradient GEMM only when gradients
accumulate in fp32 (``grad_accumulation_fusion_fp32``): NVIDIA/Megatron-LM@d898a8991d
megatron/arguments.py keeps ``--gradient-accumulation-fusion`` (on by default since 83b1e42f30)
whenever ``accumulate_allreduce_grads_in_fp32`` is set, which ``--bf16`` forces, and switches it
off for 16-bit accumulation (fp16 runs). A bf16 run on that stack used to be charged the separate
per-micro-batch add into its fp32 main gradients that Megatron never runs."""
from dataclasses import replace

import pytest
from click.testing import CliRunner

from hardware_specs.catalog import efficiency_for_cluster, load_cluster, load_stack, list_stacks
from hardware_specs.errors import InputError
from hardware_specs.stack_files import stack_from_dict
from model_specs import load_model
from paraplan.cli import main
from simulator import simulate
from simulator.parallel_config import ParallelConfig
from simulator.stack_defaults import stack_config_fields

CLUSTER = load_cluster("dgx-a100-80gb")
EFF = efficiency_for_cluster(CLUSTER)
STACK = load_stack("megatron-lm-2022")

# GPT-3 125M at tp = pp = 1, by hand: a layer holds 4 h^2 of attention, 8 h^2 of MLP and two
# norm weights (h = 768): 12 x 589,824 + 2 x 768 = 7,079,424 parameters in 6 tensors
# (step_model.DENSE_LAYER_PARAM_TENSORS); 12 layers; the embedding V x h = 50,257 x 768 =
# 38,597,376 in one tensor; the output layer is tied to it (nothing more to add)
LAYER_PARAMS = 12 * 768 ** 2 + 2 * 768
ACCUMULATED_PARAMS = 12 * LAYER_PARAMS + 50_257 * 768
ADD_KERNELS = 12 * 6 + 1
MICRO_BATCHES = 4


def _config(dtype: str) -> ParallelConfig:
    fields = stack_config_fields(STACK, dtype, "gpt3-125m", CLUSTER.gpu.name)
    return ParallelConfig(**fields, dp=1, tp=1, pp=1, micro_batch=1, global_batch=MICRO_BATCHES,
                          recompute="full", dtype=dtype)


def _step(config: ParallelConfig):
    return simulate(load_model("gpt3-125m"), CLUSTER, config, n_gpus=1)


def test_the_hand_count_is_the_models_own():
    from cost_models import params
    model = load_model("gpt3-125m")
    assert LAYER_PARAMS == params.dense_layer_params(model) == 7_079_424
    assert ACCUMULATED_PARAMS == 123_550_464
    assert params.lm_head_params(model) == 0


def test_a_bf16_megatron_lm_2022_run_pays_no_separate_accumulation_add():
    """bf16: fp32 main gradients, fusion kept; forcing it off adds, per micro-batch, a read of
    the fresh bf16 gradient (2 B) and of the fp32 buffer (4 B) and a write of it (4 B) per
    parameter at the full HBM bandwidth, plus one add kernel per weight tensor."""
    cfg = _config("bf16")
    assert cfg.grad_reduce_bytes == 4.0 and cfg.grad_accumulation_fusion is True
    per_mb = ACCUMULATED_PARAMS * (2 + 4 + 4) / CLUSTER.gpu.hbm_bw_bytes_per_s + ADD_KERNELS * EFF.kernel_overhead_s
    # 123,550,464 x 10 B = 1.2355 GB a micro-batch
    assert ACCUMULATED_PARAMS * 10 == 1_235_504_640
    fused, unfused = _step(cfg), _step(replace(cfg, grad_accumulation_fusion=False))
    assert unfused.step_time_s - fused.step_time_s == pytest.approx(MICRO_BATCHES * per_mb, rel=1e-6)


def test_an_fp16_megatron_lm_2022_run_still_pays_its_16_bit_accumulation_add():
    """fp16: gradients accumulate in fp16 (grad_reduce_bytes 2), Megatron switches the fusion
    off, so each micro-batch adds the fresh fp16 gradient into the fp16 buffer: 2 + 2 + 2 B a
    parameter and one kernel a tensor."""
    cfg = _config("fp16")
    assert cfg.grad_reduce_bytes == 2.0 and cfg.grad_accumulation_fusion is False
    per_mb = ACCUMULATED_PARAMS * (2 + 2 + 2) / CLUSTER.gpu.hbm_bw_bytes_per_s + ADD_KERNELS * EFF.kernel_overhead_s
    unfused, fused = _step(cfg), _step(replace(cfg, grad_accumulation_fusion=True))
    assert unfused.step_time_s - fused.step_time_s == pytest.approx(MICRO_BATCHES * per_mb, rel=1e-6)


def test_the_fp32_only_fusion_follows_the_resolved_gradient_bytes():
    """Megatron's condition is fp32 accumulation of 16-bit gradients: on for bf16 (forced) and for
    an fp16 stack that accumulates in fp32 (--accumulate-allreduce-grads-in-fp32), off for fp16
    accumulation and for fp32 runs (the flag stays off; fusion is switched off there too)."""
    assert stack_config_fields(STACK, "bf16")["grad_accumulation_fusion"] is True
    assert stack_config_fields(STACK, "fp16")["grad_accumulation_fusion"] is False
    assert stack_config_fields(STACK, "fp32")["grad_accumulation_fusion"] is False
    fp32_accum = stack_from_dict({"name": "x", "framework": "f", "training": {
        "grad_accumulation_fusion": False, "grad_accumulation_fusion_fp32": True, "grad_reduce_bytes": 4}})
    assert stack_config_fields(fp32_accum, "fp16")["grad_accumulation_fusion"] is True
    not_forced = stack_from_dict({"name": "x", "framework": "f", "training": {
        "grad_accumulation_fusion": False, "grad_accumulation_fusion_fp32": True, "grad_reduce_bytes": 2,
        "bf16_grads_in_fp32": False}})
    assert stack_config_fields(not_forced, "bf16")["grad_accumulation_fusion"] is False


def test_no_other_builtin_stack_changes_its_fusion():
    """Only megatron-lm-2022 sets the key; every other stack's fusion is its grad_accumulation_fusion
    in every dtype (FP8 runs keep bf16 parameters and count as bf16)."""
    for name in list_stacks():
        t = load_stack(name).training
        if t is None:
            continue
        assert t.grad_accumulation_fusion_fp32 is (name == "megatron-lm-2022"), name
        for dtype in ("bf16", "fp16", "fp8", "fp32"):
            assert stack_config_fields(load_stack(name), dtype)["grad_accumulation_fusion"] is (
                t.grad_accumulation_fusion or (name == "megatron-lm-2022" and dtype in ("bf16", "fp8"))), (name, dtype)


def test_a_non_boolean_value_is_one_line_naming_the_field(tmp_path):
    with pytest.raises(InputError, match="training.grad_accumulation_fusion_fp32: must be true or false"):
        stack_from_dict({"name": "x", "framework": "f", "training": {"grad_accumulation_fusion_fp32": "yes"}})
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "hardware_specs" / "stacks" / "megatron-lm-2022.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("name: megatron-lm-2022", "name: bad").replace(
        "  grad_accumulation_fusion_fp32:\n    value: true", "  grad_accumulation_fusion_fp32:\n    value: 1"))
    res = CliRunner().invoke(main, ["simulate", "-m", "gpt3-125m", "-c", "dgx-a100-80gb", "-n", "1",
                                    "--global-batch", "4", "--stack", str(bad)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "training.grad_accumulation_fusion_fp32: must be true or false, got 1" in lines[0]
