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
