"""Review 46 of the measurement commands: --out over a command's own inputs, loaded rows in
validate measured, the median round of --calibrate-each-round, and the measure command's errors
named by its options. Nothing here measures: the measuring functions are replaced."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from cli_results import one_line_error, run

DATA = Path(__file__).parent / "data"


def _measured_frame(**extra) -> pd.DataFrame:
    row = {"name": "dp2", "dp": 2, "tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 4, "zero_stage": 0,
           "recompute": "none", "measured_step_s": 0.5, "predicted_step_s": 0.45, "rel_error": -0.1,
           "rel_error_spread": 0.02, "cpu_wait_fraction": 0.05, "foreign_load": 0.0}
    return pd.DataFrame([row | extra])


def _never_measure(*a, **k):
    raise AssertionError("measured although --out named an input")


# --- --out over the command's own input ---------------------------------------------------------

def test_validate_measured_refuses_an_out_over_the_profiles_calibration_timings(monkeypatch, tmp_path):
    import paraplan.measure
    monkeypatch.setattr(paraplan.measure, "compare_measured", _never_measure)
    profile = tmp_path / "machine.yaml"
    profile.write_text("x")
    side = tmp_path / "machine.calibration.json"
    side.write_text('{"device": {"threads_per_rank": 1}}')
    line = one_line_error(run("validate", "measured", profile, "--out", side))
    assert line.startswith(f"error: --out: {side} is also ") and "calibration" in line
    assert side.read_text() == '{"device": {"threads_per_rank": 1}}'


def test_a_damaged_calibration_sidecar_is_named_in_the_error(tmp_path):
    from hardware_specs.errors import InputError
    from paraplan.measure.compare import _calibrated_threads
    profile = tmp_path / "machine.yaml"
    side = tmp_path / "machine.calibration.json"
    side.write_text("name  dp  tp\ndp2   2   1\n")       # a table written over it
    try:
        _calibrated_threads(profile)
    except InputError as exc:
        assert str(side) in exc.message and "calibrate" in exc.fix
    else:
        raise AssertionError("no error")


def test_validate_gpu_record_refuses_an_out_over_a_file_of_the_record(tmp_path):
    folder = tmp_path / "rec"
    shutil.copytree(DATA / "gpu_h200", folder)
    before = (folder / "kernels.csv").read_bytes()
    for name in ("kernels.csv", "env.json", "measured_runs.json"):
        line = one_line_error(run("validate", "gpu-record", folder, "--cluster", "hgx-h200", "--out", folder / name))
        assert line.startswith(f"error: --out: {folder / name} is also "), line
    assert (folder / "kernels.csv").read_bytes() == before
    # a new file in the folder is still fine
    out = folder / "report.txt"
    result = run("validate", "gpu-record", folder, "--cluster", "hgx-h200", "--out", out)
    assert result.exit_code == 0, result.output
    assert out.is_file()


# --- --calibrate-each-round keeps the median error ------------------------------------------------

def _recalibrating(monkeypatch, errors: list[float]):
    """compare_recalibrating over len(errors) rounds of one configuration whose round r errs by
    errors[r] (measured 1.0 + r/10 s); nothing is calibrated or measured."""
    import paraplan.measure.calibrate as cal
    from paraplan.measure import compare
    monkeypatch.setattr(cal, "run_calibration", lambda path, **kw: path)
    rounds = iter(range(len(errors)))

    def fake_measured(path, configs=None, progress=None, **kw):
        r = next(rounds)
        measured = 1.0 + r / 10
        return pd.DataFrame([{"name": "dp2", "dp": 2, "measured_step_s": measured,
                              "predicted_step_s": measured * (1 + errors[r]), "rel_error": errors[r],
                              "cpu_wait_fraction": 0.05 * (r + 1), "foreign_load": 0.0,
                              "measured_step_times_s": f"{measured:.4f}"}])
    monkeypatch.setattr(compare, "compare_measured", fake_measured)
    return compare.compare_recalibrating(configs=[{"name": "dp2", "dp": 2}], rounds=len(errors)).iloc[0]


def test_calibrate_each_round_with_two_rounds_keeps_the_mean_of_both_not_the_lower(monkeypatch):
    row = _recalibrating(monkeypatch, [0.10, -0.30])
    assert abs(row["rel_error"] - (-0.10)) < 1e-12            # not -0.30, the lower round
    assert abs(row["rel_error_spread"] - 0.40) < 1e-12 and row["rounds"] == 2
    assert abs(row["measured_step_s"] - 1.05) < 1e-12
    assert abs(row["cpu_wait_fraction"] - 0.10) < 1e-12      # the worst round's contention
    assert row["measured_step_times_s"].split() == ["1.0000", "1.1000"]


def test_calibrate_each_round_with_three_rounds_keeps_the_middle_one(monkeypatch):
    row = _recalibrating(monkeypatch, [0.20, -0.30, 0.05])
    assert abs(row["rel_error"] - 0.05) < 1e-12
    assert abs(row["measured_step_s"] - 1.2) < 1e-12 and abs(row["predicted_step_s"] - 1.26) < 1e-12


def test_both_measured_paths_take_the_same_median_for_an_even_count():
    """compare_measured's _median_round and --calibrate-each-round's rule agree on two rounds."""
    import statistics

    from paraplan.measure.compare import _median_error_round
    group = pd.DataFrame({"name": ["a", "a"], "rel_error": [0.3, -0.1], "measured_step_s": [1.0, 2.0]})
    assert _median_error_round(group)["rel_error"] == statistics.median([0.3, -0.1])
    assert _median_error_round(group)["measured_step_s"] == statistics.median([1.0, 2.0])


# --- validate measured warns about loaded rows ------------------------------------------------------

def test_validate_measured_warns_once_naming_the_loaded_rows(monkeypatch, tmp_path):
    import paraplan.measure
    df = pd.concat([_measured_frame(name="dp2", cpu_wait_fraction=0.05),
                    _measured_frame(name="tp2-recompute", cpu_wait_fraction=0.67),
                    _measured_frame(name="pp2-mb1x4", cpu_wait_fraction=0.02, foreign_load=0.40)], ignore_index=True)
    monkeypatch.setattr(paraplan.measure, "compare_measured", lambda *a, **k: df)
    profile = tmp_path / "machine.yaml"
    profile.write_text("x")
    result = run("validate", "measured", profile)
    assert result.exit_code == 0, result.output
    warnings = [ln for ln in result.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1, result.stderr
    assert "tp2-recompute 67% CPU wait" in warnings[0] and "pp2-mb1x4 40% foreign load" in warnings[0]
    assert "dp2 " not in warnings[0] and "2 of 3 configurations" in warnings[0]
    assert "mean |error|" in result.stdout


def test_validate_measured_says_nothing_of_load_on_a_quiet_machine(monkeypatch, tmp_path):
    import paraplan.measure
    monkeypatch.setattr(paraplan.measure, "compare_measured",
                        lambda *a, **k: _measured_frame(cpu_wait_fraction=0.15, foreign_load=None))
    profile = tmp_path / "machine.yaml"
    profile.write_text("x")
    result = run("validate", "measured", profile)
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr


# --- calibrate --out .yaml ---------------------------------------------------------------------------

def test_calibrate_refuses_a_profile_name_with_no_stem_before_measuring(monkeypatch, tmp_path):
    """'.yaml' passed the CLI's endswith check and failed in run_calibration (whose rule is the
    pathlib suffix, '' for a dot file) after torch was imported, as out_path."""
    import paraplan.measure
    monkeypatch.setattr(paraplan.measure, "run_calibration", _never_measure)
    monkeypatch.chdir(tmp_path)
    for name in (".yaml", ".yml"):
        assert one_line_error(run("calibrate", "--out", name)) == \
            f"error: --out: '{name}' has no file name before the suffix (e.g. --out local-cpu.yaml)"
    assert one_line_error(run("calibrate", "--out", "x.yaml.bak")) == \
        "error: --out: x.yaml.bak must end in .yaml or .yml (e.g. --out local-cpu.yaml)"
    assert not list(tmp_path.iterdir())


# --- paraplan measure names its options --------------------------------------------------------------

def _no_launch(monkeypatch):
    """Every case must fail before a rank starts: starting one is a test failure, not minutes."""
    import torch.multiprocessing as mp

    def refuse(*a, **k):
        raise AssertionError("a measurement process was started")
    monkeypatch.setattr(mp, "start_processes", refuse)


def test_measure_errors_name_the_command_options_and_a_value_that_works(monkeypatch):
    import pytest
    pytest.importorskip("torch")        # the rank-count check comes after torch is loaded
    _no_launch(monkeypatch)
    cases = {("--heads", "3"): "error: --heads: the hidden size 256 is not divisible by 3 heads "
                               "(use a head count dividing the hidden size, e.g. 2 or 4)",
             ("--dp", "3"): "error: --global-batch: 4 is not a multiple of dp x micro-batch = 3 x 1 = 3 "
                            "(use a multiple of 3, e.g. 3 or 6)",
             ("--tp", "3"): "error: --tp: 4 heads are not divisible by tp=3 (use a tp dividing the head count, e.g. 2 or 4)",
             ("--pp", "8"): "error: --pp: 4 layers cannot fill 8 pipeline stages "
                            "(use at most 4 stages (one per layer), or more layers)",
             ("--steps", "2", "--warmup", "2"): "error: --warmup: must be below the 2 steps and >= 0, got 2 "
                                                "(time at least one step after the warm-up ones: raise the steps "
                                                "or lower the warm-up)"}
    for args, line in cases.items():
        assert one_line_error(run("measure", *args)) == line
    assert one_line_error(run("measure", "--seq-len", "1000000")).startswith("error: --seq-len: the run is about ")
    assert one_line_error(run("measure", "--layers", "2000")).startswith("error: --layers: 2000 is above 1,024")
    assert one_line_error(run("measure", "--dp", "64", "--global-batch", "64")).startswith("error: --dp: 64 ")
    assert one_line_error(run("measure", "--dp", "2", "--tp", "64", "--heads", "64", "--hidden", "256",
                              "--global-batch", "64")).startswith("error: --dp*--tp: 128 ")


# --- validate measured's progress counts configurations --------------------------------------------

def test_validate_measured_progress_lines_count_configurations_not_steps(monkeypatch, tmp_path):
    import paraplan.cli
    import paraplan.measure
    monkeypatch.setattr(paraplan.cli, "PROGRESS_LINE_S", 0.0)

    def fake(path, progress=None, **kw):
        for done in range(3):
            progress(done, 10, f"configuration {done + 1}, round 1 of 2")
        return _measured_frame()
    monkeypatch.setattr(paraplan.measure, "compare_measured", fake)
    profile = tmp_path / "machine.yaml"
    profile.write_text("x")
    result = run("validate", "measured", profile, "--steps", "4", "--warmup", "1")
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("measuring: ")]
    assert lines and lines[-1].startswith("measuring: 2 of 10 configurations (20%)"), result.stderr
    assert "steps" not in result.stderr
