"""The optimizer step's HBM traffic per parameter (``simulator.step_model``): 42 bytes in
mixed precision with fp32 Adam moments, 28 in fp32 / tf32 training (no 16-bit copy, the weights
are the master copy), and 8 bytes fewer with 16-bit moments (m and v each read and written once
at 2 instead of 4 bytes)."""
import pytest

from paraplan import api
from simulator.step_model import ADAM_STEP_BYTES_PER_PARAM, ADAM_STEP_BYTES_PER_PARAM_FP32

RUN = dict(gpus=8, global_batch=8)


def _optimizer_s(**fields) -> float:
    return float(api.simulate("gpt3-1.3b", "dgx-h100", **RUN, **fields).iloc[0].optimizer_s)


def test_sixteen_bit_moments_move_eight_bytes_fewer_per_parameter():
    # 42 -> 42 - 4 x (4 - 2) = 34 bytes a parameter, the rest of the step unchanged
    assert _optimizer_s(optimizer_moment_bytes=2) / _optimizer_s() == pytest.approx(34.0 / 42.0, rel=1e-12)
    assert ADAM_STEP_BYTES_PER_PARAM == 42.0


def test_tf32_training_steps_its_optimizer_as_fp32_does():
    # tf32 keeps fp32 weights as the master copy (no 16-bit copy to write): 28 bytes, as fp32
    assert _optimizer_s(dtype="tf32") == pytest.approx(_optimizer_s(dtype="fp32"), rel=1e-12)
    assert _optimizer_s(dtype="tf32") / _optimizer_s() == pytest.approx(ADAM_STEP_BYTES_PER_PARAM_FP32 / 42.0,
                                                                        rel=1e-12)


# ---- the gradient buffer's width --------------------------------------------------------------
# A 16-bit gradient buffer (Megatron-LM 2021/2022 fp16 without accumulate_allreduce_grads_in_fp32,
# Megatron-Core DDP without grad_reduce_in_fp32) is cast into a new fp32 main gradient at the
# step (NVIDIA/Megatron-LM@d898a8991d megatron/optimizer/optimizer.py
# Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads:
# ``main_param.grad = model_param.main_grad.float()``: read 2, write 4) and zeroing the buffer for
# the next step writes 2 bytes, not 4: 42 - 4 + 2 + 6 = 46 (bf16), 50 - 4 + 2 + 6 = 54 (fp16).

def test_bytes_per_parameter_follow_the_gradient_buffer_width():
    import numpy as np
    from simulator.step_model import adam_step_bytes_per_param
    assert adam_step_bytes_per_param("bf16") == 42.0
    assert adam_step_bytes_per_param("fp16") == 50.0
    assert adam_step_bytes_per_param("bf16", grad_buffer_bytes=4.0) == 42.0
    assert adam_step_bytes_per_param("fp16", grad_buffer_bytes=2.0) == 54.0
    assert adam_step_bytes_per_param("bf16", grad_buffer_bytes=2.0) == 46.0
    # 16-bit moments on a 16-bit buffer: 46 - 4 x 2 = 38
    assert adam_step_bytes_per_param("bf16", 2.0, 2.0) == 38.0
    # vectorised over the rows' buffers
    np.testing.assert_array_equal(adam_step_bytes_per_param("fp16", 4.0, np.array([4.0, 2.0, 4.0])),
                                  [50.0, 54.0, 50.0])


def _kor22_22b_selsp():
    from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
    from paraplan.validation.published import read_runs, row_inputs
    df = read_runs(validation_file(PUBLISHED_RUNS))
    return row_inputs(df[df.id == "KOR22-T5-22B-selsp:iter_time_s"].to_dict("records")[0])


def test_kor22_22b_fp16_optimizer_step_reads_its_16_bit_buffer():
    # Korthikanti et al. 2022 Table 3, 22B: h 6144, 48 layers, V 51200, tp 8, pp 1, fp16 on
    # Megatron-LM 2022 (fp16 main_grad buffer). Local parameters (48 x 12 h^2 + V h) / 8
    # = 2.7572e9 (biases and norms, 2.7e-5 of it, left out); 54 B each at the A100-80GB's
    # 2.039 TB/s x the ampere memory fraction: 2.7572e9 x 54 / (2.039e12 x 0.7952) = 91.8 ms
    # (85.0 ms at the 50 B of an fp32 buffer)
    from hardware_specs.catalog import efficiency_for_cluster
    from simulator.simulate import simulate
    inp = _kor22_22b_selsp()
    assert (inp.config.dtype, inp.config.grad_buffer_bytes, inp.config.tp) == ("fp16", 2.0, 8)
    eff = efficiency_for_cluster(inp.cluster)
    fraction = eff.optimizer_hbm_fraction or eff.hbm_fraction
    h, layers, vocab = 6144, 48, 51200
    local_params = (layers * 12 * h * h + vocab * h) / 8
    expected_s = local_params * 54.0 / (2.039e12 * fraction)
    got = simulate(inp.model, inp.cluster, inp.config).time_breakdown_s["optimizer_s"]
    assert got == pytest.approx(expected_s, rel=1e-3)


def test_planner_rows_price_each_rows_buffer_as_simulate_does():
    # one batch of the same plan with an fp32 and a 16-bit buffer: the step model (the planner's
    # path) gives each row its own bytes, 50 and 54, and the 16-bit row equals simulate's
    import dataclasses
    from hardware_specs.catalog import efficiency_for_cluster
    from simulator.config_batch import ConfigBatch
    from simulator.simulate import simulate
    from simulator.step_model import evaluate
    inp = _kor22_22b_selsp()
    fp32_buffer = dataclasses.replace(inp.config, grad_buffer_bytes=4.0)
    eff = efficiency_for_cluster(inp.cluster)
    out = evaluate(inp.model, inp.cluster, eff, ConfigBatch.from_configs([fp32_buffer, inp.config]))
    assert out["optimizer_s"][1] / out["optimizer_s"][0] == pytest.approx(54.0 / 50.0, rel=1e-12)
    assert out["optimizer_s"][1] == pytest.approx(
        simulate(inp.model, inp.cluster, inp.config).time_breakdown_s["optimizer_s"], rel=1e-12)
