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


def test_an_integer_fields_plot_value_is_quoted_exactly_not_through_a_float(tmp_path):
    result = run("plot", "breakdown", "-m", "gpt3-125m", "-c", "dgx-h100", "-n", 8, "--global-batch", 8,
                 "-o", tmp_path / "x.png", "--field", "pp", "--values", 10**30)
    one_line_error(result, f"pp: {10**30:,} is above")


def test_an_integer_fields_value_reads_exponents_and_refuses_fractions():
    from hardware_specs.errors import InputError
    from paraplan.api import coerce_value
    assert coerce_value("pp", "2e0") == 2 and coerce_value("tp", " 8 ") == 8
    for text in ("2.5", "abc", "nan", "1e999999999"):
        with pytest.raises(InputError):
            coerce_value("pp", text)


_SIM = ("simulate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", 64, "--tp", 8, "--pp", 4)


@pytest.mark.parametrize("extra, says", [
    (("--global-batch", 128, "--cp", 10**21), "--cp: 1,000,000,000,000,000,000,000 is above the largest supported "
                                              "value 16,777,216"),
    (("--global-batch", 128, "--vpp", 10**21), "--vpp: 1,000,000,000,000,000,000,000 is above"),
    (("--global-batch", 128, "--micro-batch", 10**21), "--micro-batch: 1,000,000,000,000,000,000,000 is above"),
    (("--global-batch-tokens", "99999999999999999999999999Mi"), "--global-batch-tokens: 104,857,599,999,999,999,"),
    (("--global-batch", 10**20), "--global-batch: 100,000,000,000,000,000,000 is above"),
])
def test_simulate_names_the_degree_or_batch_option_above_its_bound(extra, says):
    one_line_error(run(*_SIM, *extra), says)


def test_an_empty_output_file_name_is_said_to_be_empty_not_a_folder(tmp_path):
    one_line_error(run(*_SIM, "--global-batch", 128, "--trace", ""), "--trace: the file name is empty")


def test_calibrate_names_its_options_and_states_the_process_range():
    one_line_error(run("calibrate", "--out", "x.calibration.json"), "--out: x.calibration.json must end in .yaml or .yml")
    one_line_error(run("calibrate", "--out", "x.yaml", "--nprocs", 100000), "--nprocs:", "1<=x<=128")
    assert "1<=x<=128" in run("calibrate", "--help").output


def test_a_stack_reads_numbers_in_exponent_form_as_the_cluster_and_gpu_loaders_do():
    from hardware_specs.errors import InputError
    from hardware_specs.stack_files import stack_from_dict
    import yaml
    # PyYAML reads 1e-3 (no dot) as the string '1e-3'
    serving = yaml.safe_load("host_step_s: {value: 1e-3, source: x}")
    assert serving["host_step_s"]["value"] == "1e-3"
    stack = stack_from_dict({"name": "x", "framework": "vllm", "serving": serving})
    assert stack.serving.host_step_s == 1e-3
    stack = stack_from_dict({"name": "x", "framework": "f", "training": {"grad_bucket_elements": "4e7"}})
    assert stack.training.grad_bucket_elements == 4e7
    for bad in ("fast", "nan", "inf", float("nan"), None, True):
        with pytest.raises(InputError, match="serving.host_step_s: expected a number"):
            stack_from_dict({"name": "x", "framework": "vllm", "serving": {"host_step_s": bad}})
        with pytest.raises(InputError, match="training.grad_bucket_elements: expected a number"):
            stack_from_dict({"name": "x", "framework": "f", "training": {"grad_bucket_elements": bad}})


def test_a_stack_files_bad_speculative_tokens_is_named_as_the_stack_field_not_the_option(tmp_path):
    from pathlib import Path
    text = (Path(__file__).parents[1] / "hardware_specs/stacks/vllm-0.14.yaml").read_text()
    text = text.replace("name: vllm-0.14", "name: vllm-x").replace(
        "default_when_version_unstated: true", "default_when_version_unstated: false").replace(
        "  speculative_tokens:\n    value: 0", "  speculative_tokens:\n    value: 1000")
    stack = tmp_path / "vllm-x.yaml"
    stack.write_text(text)
    result = run("serve", "simulate", "-m", "llama3-8b", "-s", "dgx-h100", "-b", stack, "--tp", 1)
    one_line_error(result, "error: stack vllm-x.serving.speculative_tokens: must be a whole number in [0, 16], "
                           "got 1000", "--speculative-tokens)")
    one_line_error(run("serve", "simulate", "-m", "llama3-8b", "-s", "dgx-h100", "-b", "vllm", "--tp", 1,
                       "--speculative-tokens", 1000), "error: --speculative-tokens: must be a whole number")


def test_plan_suggests_a_larger_max_tp_only_where_it_leaves_a_layout():
    never = run("plan", "-m", "gpt3-125m", "-c", "dgx-h100", "-n", 8, "--global-batch", 8, "--tp", 16)
    one_line_error(never, "fix fewer values (tp=16)")
    assert "--max-tp" not in never.stderr
    one_line_error(run("plan", "-m", "gpt3-1.3b", "-c", "dgx-h100", "-n", 16, "--global-batch", 16, "--tp", 16),
                   "raise --max-tp to 16")


def test_a_sweep_rows_reason_names_settings_not_command_line_options():
    from paraplan.sweeps.reasons import sweep_reason
    assert sweep_reason("gpus: x (raise --max-tp to 16; shorten --isl / --osl)") == \
        "gpus: x (raise max_tp to 16; shorten isl / osl)"
    assert sweep_reason("tp-2 and x--y stay") == "tp-2 and x--y stay"


def test_a_best_sweep_row_cites_no_cli_option(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("models: [gpt3-1.3b]\nclusters: [dgx-h100]\ngpus: [16]\nglobal_batch: [16]\nsearch: best\n"
                    "config: {tp: [16]}\n")
    result = run("sweep", spec, "--out", tmp_path / "o", "--local")
    assert result.exit_code == 0, result.output
    import pandas as pd
    reason = pd.read_parquet(tmp_path / "o" / "results.parquet")["reason"].iloc[0]
    assert "raise max_tp to 16" in reason and "--" not in reason, reason
