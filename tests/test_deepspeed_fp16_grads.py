"""DeepSpeed's fp16 optimizers keep each parameter's gradient in its 16-bit p.grad and make the fp32
gradient only at the step, for the rank's own partition (stage2.py / stage_1_and_2.py
``self.flatten(self.averaged_gradients[i]).to(self.single_partition_of_fp32_groups[i].dtype)``):
2 bytes a parameter, which reproduces the ZeRO paper's Table 1 (Rajbhandari et al. 2020, K = 12).
bf16 under BF16_Optimizer keeps fp32 gradients (4 bytes)."""
from __future__ import annotations

import pytest

from hardware_specs.catalog import load_stack
from paraplan.api import simulate_report
from simulator.stack_defaults import stack_config_fields

PSI = 7.458e9          # megatron-7.5b's parameters (the paper's 7.5B model)
N_D = 64


@pytest.mark.parametrize("zero, expected", [
    (0, (2 + 2 + 12) * PSI),                        # paper: 120 GB
    (1, (2 + 2) * PSI + 12 * PSI / N_D),             # 31.4
    (2, 2 * PSI + (2 + 12) * PSI / N_D),             # 16.6
    (3, (2 + 2 + 12) * PSI / N_D),                   # 1.88
])
def test_zero_paper_table_1_model_states(zero, expected):
    report, _, _ = simulate_report("megatron-7.5b", "dgx2-v100", gpus=64, stack="deepspeed-2021", micro_batch=1,
                                   global_batch=64, recompute="full", zero_stage=zero)
    parts = report.memory_breakdown_bytes
    states = parts["weights_bytes"] + parts["gradients_bytes"] + parts["optimizer_bytes"]
    assert states == pytest.approx(expected, rel=2e-3)


@pytest.mark.parametrize("stack, dtype, grad_bytes", [
    ("deepspeed-2021", "fp16", 2.0), ("megatron-deepspeed", "fp16", 2.0), ("gpt-neox-2022", "fp16", 2.0),
    # BF16_Optimizer's fp32_groups_gradients_flat (deepspeed/runtime/bf16_optimizer.py)
    ("megatron-deepspeed", "bf16", 4.0),
    # gpt-neox's bf16 path is not traced: the fp32 buffer stays
    ("gpt-neox-2022", "bf16", 4.0),
])
def test_deepspeed_gradient_buffer_bytes_per_dtype(stack, dtype, grad_bytes):
    assert stack_config_fields(load_stack(stack), dtype)["grad_buffer_bytes"] == grad_bytes
