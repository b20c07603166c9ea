"""``paraplan simulate``'s memory table names the gradient buffer it priced: a stack whose
gradients stay in the weights' 16-bit dtype (``grad_buffer_bytes`` 2, Megatron-LM 2022 fp16) was
labelled "fp32 main gradients" beside a gradients row exactly as large as the 16-bit weights."""
from __future__ import annotations

import re

from click.testing import CliRunner

from paraplan.cli import main

GPT3 = ["simulate", "-m", "gpt3-175b", "-c", "dgx-a100-80gb", "-n", "64", "--tp", "8", "--pp", "8",
        "--global-batch", "64", "--sequence-parallel", "--recompute", "selective"]


def _memory_rows(out: str) -> dict:
    """``part -> (GiB, what)`` of the text's memory-per-GPU table."""
    rows = {}
    for line in out.split("memory per GPU (peak")[1].splitlines():
        m = re.match(r"^  (\w+)\s+([\d.]+)\s+[\d.]+\s+(.*)$", line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), m.group(3).strip())
    return rows


def test_16_bit_gradient_buffer_is_labelled_16_bit_and_weighs_as_the_weights():
    result = CliRunner().invoke(main, GPT3 + ["--dtype", "fp16", "--stack", "megatron-lm-2022"])
    assert result.exit_code == 0, result.output
    rows = _memory_rows(result.output)
    # 2 bytes a parameter for both: the same GiB, and the label says 16-bit, not fp32
    assert rows["gradients"][0] == rows["weights"][0]
    assert rows["gradients"][1].startswith("16-bit gradients")
    assert "fp32" not in rows["gradients"][1].replace("no fp32", "")


def test_fp32_main_gradients_keep_their_label_at_twice_the_16_bit_weights():
    result = CliRunner().invoke(main, GPT3 + ["--dtype", "bf16", "--stack", "megatron-core"])
    assert result.exit_code == 0, result.output
    rows = _memory_rows(result.output)
    # 4 bytes a parameter against the weights' 2 (both printed to 0.01 GiB)
    assert abs(rows["gradients"][0] - 2 * rows["weights"][0]) <= 0.011
    assert rows["gradients"][1] == "fp32 main gradients"
