"""Fixes from a fuzzing review of the CLI's error contract: each bad input is one line naming
what the user typed, exit 2, nothing written half-way."""
from __future__ import annotations

import json

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


# --- an integer too large for a float (10**400) is refused as above its bound, not exit 1 ------

_HUGE = 10**400                 # float(10**400) raises OverflowError; 10**308 converts
_SERVE = ("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100")


@pytest.mark.parametrize("extra, says", [
    (("--batch", _HUGE), "--batch: an integer of 401 digits is above"),
    (("--mode", "disagg", "--decode-batch", _HUGE), "--decode-batch: an integer of 401 digits"),
    (("--mode", "disagg", "--prefill-batch", _HUGE), "--prefill-batch: an integer of 401 digits"),
    (("--isl", _HUGE), "isl: longer than 10 million tokens"),
    (("--osl", _HUGE), "osl: longer than 10 million tokens"),
    (("--tp", _HUGE), "--tp: a worker of tp an integer of 401 digits"),
    (("--pp", _HUGE), "--pp: a worker of tp 1 x pp an integer of 401 digits"),
    (("--workers", _HUGE), "--workers: the deployment spans an integer of 401 digits"),
    (("--speculative-tokens", _HUGE), "--speculative-tokens: must be a whole number in [0, 16]"),
])
def test_serve_simulate_refuses_an_integer_too_large_for_a_float_naming_the_option(extra, says):
    one_line_error(run(*_SERVE, *extra), says)


@pytest.mark.parametrize("batch, shown", [(10**308, "an integer of 309 digits"), (_HUGE, "an integer of 401 digits"),
                                          (2**24 + 1, "16,777,217")])
def test_a_serving_batch_above_serve_plans_max_batch_bound_is_refused_with_the_bound(batch, shown):
    # 10**308 requests were told they 'need inf GiB of KV cache': serve plan's --max-batch range
    # (1 .. 2**24 = 16,777,216) bounds serve simulate's per-rank batch too; an integer of more than
    # 40 digits is quoted by its size
    line = one_line_error(run(*_SERVE, "--batch", batch),
                          f"--batch: {shown} is above the largest supported value 16,777,216")
    assert "inf" not in line


@pytest.mark.parametrize("extra, says", [
    (("-n", _HUGE), "--gpus: "),
    (("-n", 8, "--isl", _HUGE), "--isl: an integer of 401 digits"),
    (("-n", 8, "--osl", _HUGE), "--osl: an integer of 401 digits"),
])
def test_serve_plan_refuses_an_integer_too_large_for_a_float_naming_the_option(extra, says):
    one_line_error(run("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", *extra), says)


def test_the_shared_number_checks_read_an_integer_too_large_for_a_float():
    from hardware_specs.errors import InputError, is_finite, require_plausible, require_positive, whole_number
    assert is_finite(10**308) and not is_finite(_HUGE) and not is_finite(-_HUGE) and is_finite(10**30)
    assert whole_number("x", _HUGE) == _HUGE                 # whole however large: its caller bounds it
    with pytest.raises(InputError, match=r"^x: an integer of 401 digits is above the largest supported value 16 \(check"):
        whole_number("x", _HUGE, maximum=16)
    with pytest.raises(InputError, match=r"^x: an integer of 401 digits is above the largest supported value"):
        require_positive("x", _HUGE)
    with pytest.raises(InputError, match=r"^x: must be > 0, got a negative integer of 401 digits$"):
        require_positive("x", -_HUGE)
    with pytest.raises(InputError, match=r"^x: an integer of 401 digits is above the plausible maximum 1000"):
        require_plausible("x", _HUGE, 1.0, 1e3)


def test_the_apis_refuse_an_integer_too_large_for_a_float_as_input_errors_and_sweeps_record_them():
    from hardware_specs.catalog import load_gpu
    from hardware_specs.errors import InputError
    from paraplan import api, serving_api as sa
    with pytest.raises(InputError, match=r"^tp: an integer of 401 digits is above the largest supported value 16,777,216"):
        api.simulate("gpt3-125m", "dgx-h100", gpus=8, global_batch=16, tp=_HUGE)
    with pytest.raises(InputError, match=r"^hbm_gib: an integer of 401 digits is above the plausible maximum"):
        api.what_if_gpu(load_gpu("h100-sxm-80gb"), hbm_gib=_HUGE)
    with pytest.raises(InputError, match=r"^scaleout_gbit_per_s: an integer of 401 digits is above the plausible"):
        api.what_if_cluster("dgx-h100", scaleout_gbit_per_s=_HUGE)
    for kwargs, says in ((dict(gpus=_HUGE), "^gpus: "), (dict(gpus=8, isl=_HUGE), "^isl: an integer of 401 digits"),
                         (dict(gpus=8, max_batch=_HUGE), "^max_batch: an integer of 401 digits is above the largest supported "
                                                         "value 16,777,216")):
        with pytest.raises(InputError, match=says):
            sa.serve_plan("llama3.1-8b", "dgx-h100", **kwargs)
    with pytest.raises(InputError, match=r"^batch: an integer of 401 digits is above the largest supported value 16,777,216"):
        sa.serve_simulate("llama3.1-8b", "dgx-h100", batch=_HUGE)
    err = sa.serve_sweep(dict(model="llama3.1-8b", system="dgx-h100"), "batch", [_HUGE]).error.iloc[0]
    assert err.startswith("batch: an integer of 401 digits") and "16,777,216" in err
    rows = api.sweep(dict(model="gpt3-125m", cluster="dgx-h100", gpus=8, global_batch=16), "tp", [_HUGE],
                     on_error="skip")
    assert rows.error.iloc[0].startswith("tp: an integer of 401 digits") and "16,777,216" in rows.error.iloc[0]


@pytest.mark.parametrize("slo", ["ttft_ms", "tpot_ms"])
def test_a_serving_slo_given_as_an_int_above_2_64_is_read_as_the_number_it_is(slo):
    # np.isfinite(10**30) raised TypeError; a 10**30 ms objective is as loose as 1e30 (no bound)
    from planners.serving.search import plan_serving
    from hardware_specs.errors import InputError
    from simulator.serving.context import ServingContext
    ctx = ServingContext.build("llama3.1-8b", "dgx-h100", "vllm", "bf16", "bf16")
    objective = dict(ttft_ms=1000.0, tpot_ms=50.0)
    with pytest.raises(InputError, match=f"--{slo.replace('_', '-')}: must be a finite number > 0"):
        plan_serving(ctx, 8, 1024, 1024, **{**objective, slo: -(10**30)}, modes=("agg",), max_batch=16)
    with pytest.raises(InputError, match=f"--{slo.replace('_', '-')}: must be a finite number > 0"):
        plan_serving(ctx, 8, 1024, 1024, **{**objective, slo: _HUGE}, modes=("agg",), max_batch=16)
    loose = plan_serving(ctx, 1, 1024, 1024, **{**objective, slo: 10**30}, modes=("agg",), max_batch=16)
    assert loose.best is not None


@pytest.mark.parametrize("kind, extra", [("pareto", ()), ("pareto", ("-n", 16)), ("breakdown", ())])
def test_a_plot_on_a_pooled_cluster_says_so_first_not_that_gpus_or_the_batch_are_missing(tmp_path, kind, extra):
    # pareto without -n said '--gpus: missing', and given -n 16 then refused the pooled cluster
    from pathlib import Path
    pooled = Path(__file__).resolve().parents[1] / "examples" / "clusters" / "a100-h100.yaml"
    one_line_error(run("plot", kind, "-m", "llama3-8b", "-c", pooled, *extra, "-o", tmp_path / "p.png"),
                   "error: cluster a100-h100: lists 2 pools: it is a pooled (mixed) cluster")
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize("args, field", [
    (("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--json", "--out"), "--out"),
    (("simulate", "-m", "gpt3-125m", "-c", "dgx-h100", "-n", 8, "--global-batch", 16, "--gantt"), "--gantt"),
])
def test_an_output_path_the_system_refuses_or_through_a_file_is_named_as_its_option(tmp_path, args, field):
    suffix = ".json" if field == "--out" else ".png"
    # a name over 255 bytes: 'error: io: [Errno 36] File name too long', naming no option
    one_line_error(run(*args, tmp_path / ("a" * 300 + suffix)), f"error: {field}: cannot write ",
                   "File name too long (give a shorter file name)")
    # a folder that is a regular file had been said not to exist
    (tmp_path / "h.json").write_text("{}")
    one_line_error(run(*args, tmp_path / "h.json" / f"x{suffix}"), f"error: {field}: {tmp_path / 'h.json'} is a file, "
                   "not a folder")
    assert (tmp_path / "h.json").read_text() == "{}" and sorted(p.name for p in tmp_path.iterdir()) == ["h.json"]


def test_an_output_name_near_the_systems_limit_is_written_its_temp_name_kept_short(tmp_path):
    # the temp file '.<name>.XXXXXXXX.tmp' of a 250-character name was over 255 bytes
    out = tmp_path / ("b" * 245 + ".json")
    result = run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--json", "--out", out)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


def test_a_legal_name_whose_suffix_is_long_is_written_through_its_temp_file(tmp_path):
    # 't.' + 250 characters: the temp name kept the whole 251-character suffix, went over 255 bytes
    # and printed 'error: io: [Errno 36]', naming no option
    out = tmp_path / ("t." + "j" * 250)
    result = run("simulate", "-m", "gpt3-125m", "-c", "dgx-h100", "--gpus", 8, "--global-batch", 16, "--trace", out)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    assert json.loads(out.read_text())


_HUGER = 10**5000              # more digits than Python writes as text (4,300): f"{n:,}" raises ValueError


@pytest.mark.parametrize("call, says", [
    (lambda sa, api: sa.serve_plan("llama3.1-8b", "dgx-h100", gpus=8, max_batch=_HUGER), "^max_batch: an integer of over 4,000 digits is above"),
    (lambda sa, api: sa.serve_plan("llama3.1-8b", "dgx-h100", gpus=_HUGER), "^gpus: an integer of over 4,000 digits GPUs"),
    (lambda sa, api: sa.serve_simulate("llama3.1-8b", "dgx-h100", tp=_HUGER), "^tp: a worker of tp an integer of over 4,000 digits"),
    (lambda sa, api: sa.serve_simulate("llama3.1-8b", "dgx-h100", workers=_HUGER), "^workers: the deployment spans an integer of over"),
    (lambda sa, api: api.simulate("gpt3-125m", "dgx-h100", gpus=8, global_batch=16, tp=_HUGER), "^tp: an integer of over 4,000 digits"),
    (lambda sa, api: api.plan("gpt3-125m", "dgx-h100", gpus=8, global_batch=_HUGER), "^global_batch: must be between 1 and"),
])
def test_an_integer_of_more_digits_than_python_writes_is_an_input_error_quoted_by_its_size(call, says):
    # the first fix quoted such a value with f"{n:,}", which raises ValueError past 4,300 digits
    from hardware_specs.errors import InputError
    from paraplan import api, serving_api as sa
    with pytest.raises(InputError, match=says):
        call(sa, api)
