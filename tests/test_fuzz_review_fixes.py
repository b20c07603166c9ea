"""Fixes from a fuzzing review of the CLI's error contract: each bad input is one line naming
what the user typed, exit 2, nothing written half-way."""
from __future__ import annotations

import pytest

from cli_results import one_line_error, run

_SPEC = "models: [gpt3-125m]\nclusters: [dgx-h100]\ngpus: [8]\nglobal_batch: [8]\nsearch: simulate\n"


@pytest.mark.parametrize("config, says", [
    ("tp: [1000000000000000000000000000000]", "config.tp: 1,000,000,000,000,000,000,000,000,000,000 is above"),
    ("micro_batch: [9223372036854775808]", "config.micro_batch: 9,223,372,036,854,775,808 is above"),
    ("vpp: [16777217]", "config.vpp: 16,777,217 is above the largest supported value 16,777,216"),
])
def test_a_sweep_config_degree_above_the_largest_job_is_refused_before_anything_is_written(tmp_path, config, says):
    spec = tmp_path / "spec.yaml"
    spec.write_text(_SPEC + f"config: {{{config}}}\n")
    out = tmp_path / "o"
    one_line_error(run("sweep", spec, "--out", out, "--local"), says)
    assert not out.exists()


@pytest.mark.parametrize("out", ["/proc/swout", "/proc/self", "/sys/swout"])
def test_a_sweep_out_folder_that_cannot_be_made_is_named_as_the_option(tmp_path, out):
    spec = tmp_path / "spec.yaml"
    spec.write_text(_SPEC)
    one_line_error(run("sweep", spec, "--out", out, "--local"), "error: --out: cannot create the folder")
