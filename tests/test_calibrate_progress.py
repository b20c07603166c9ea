"""``paraplan calibrate`` says how far it is: the ranks report their steps, the command draws
a progress bar and prints warnings on one line each. No torch needed."""
from __future__ import annotations

import io
import re
import types
import warnings

from click.testing import CliRunner

from paraplan.cli import main
from paraplan.measure import calibrate as cal
from paraplan.measure.runtime import PROGRESS_KEY, read_progress, report_progress


def test_calibration_steps_count_every_benchmark_pass():
    # kernel overhead 1 + GEMMs (fp32 on CPU: 1 dtype) x 2 sweeps + memory 2 + attention 1
    # + collectives 4 kinds x 2 sweeps + skew 4 gaps = 18 on 2 CPU ranks
    assert cal.calibration_steps("cpu", 2, 2) == 18
    assert cal.calibration_steps("cpu", 1, 1) == 4            # no collectives with one rank
    assert cal.calibration_steps("cuda", 8, 2) == 1 + 2 * 2 + 2 + 1 + 8 + 4


def test_rank_zero_reports_progress_and_the_launcher_reads_it(tmp_path):
    path = tmp_path / "progress"
    args = {PROGRESS_KEY: str(path)}
    assert read_progress(path) is None
    report_progress(args, 1, 3, 18, "all-gather")             # other ranks say nothing
    assert read_progress(path) is None
    report_progress(args, 0, 3, 18, "fp32 GEMMs, pass 2 of 2")
    assert read_progress(path) == (3, 18, "fp32 GEMMs, pass 2 of 2")
    report_progress({}, 0, 4, 18, "x")                        # nobody asked: no file needed
    assert read_progress(path) == (3, 18, "fp32 GEMMs, pass 2 of 2")


def test_calibrate_command_draws_progress_and_prints_warnings_on_one_line(tmp_path, monkeypatch):
    """The command took ~45 s with no sign of life, then printed Python's warning with its source
    line ('return _run(out_path, ...)')."""
    import paraplan.measure as measure
    seen = []

    def fake(out_path, nprocs=2, name=None, progress=None):
        for done, label in ((0, "kernel launch overhead"), (9, "p2p"), (18, "done")):
            progress(done, 18, label)
            seen.append(done)
        warnings.warn("ranks waited 62% of the calibration for CPUs other processes held;\n  rerun", stacklevel=2)
        return out_path

    monkeypatch.setattr(measure, "run_calibration", fake)
    out = tmp_path / "me.yaml"
    result = CliRunner().invoke(main, ["calibrate", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert seen == [0, 9, 18]
    assert result.stdout.strip() == f"wrote {out}"
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("warning")]
    assert lines == ["warning: ranks waited 62% of the calibration for CPUs other processes held; rerun"]
    assert "return _run" not in result.stderr


def test_measured_validation_reports_each_calibration_and_run(monkeypatch):
    """validate measured runs for minutes (rounds x 8 layouts, and with --calibrate-each-round a
    ~45 s calibration per round): progress counts a calibration and each run as one step."""
    import pandas as pd

    from paraplan.measure import compare
    monkeypatch.setattr(cal, "run_calibration", lambda path, **kw: path)

    def fake_measured(path, configs=None, progress=None, **kw):
        for i, c in enumerate(configs):
            progress(i, len(configs), c["name"])
        progress(len(configs), len(configs), "done")
        return pd.DataFrame([{"name": c["name"], "rel_error": 0.0} for c in configs])

    monkeypatch.setattr(compare, "compare_measured", fake_measured)
    calls = []
    configs = [{"name": n} for n in ("dp2", "tp2", "pp2")]
    compare.compare_recalibrating(configs=configs, rounds=2, progress=lambda d, t, label: calls.append((d, t, label)))
    assert {t for _, t, _ in calls} == {8}                     # 2 rounds x (1 calibration + 3 runs)
    assert [d for d, _, _ in calls] == [0, 1, 2, 3, 4, 4, 5, 6, 7, 8]
    assert calls[0][2] == "calibration, round 1 of 2" and calls[4 + 1][2] == "calibration, round 2 of 2"
    done = [d for d, _, _ in calls]
    assert done == sorted(done)


def test_measure_command_draws_the_training_steps(monkeypatch):
    """paraplan measure trains for ~7-9 s (process start, then 6 steps) with no output until the
    result; its ranks now report each step."""
    import paraplan.measure as measure
    seen = []

    def fake(config, progress=None):
        for done in range(7):
            progress(done, 6, f"step {done + 1} of 6" if done < 6 else "done")
            seen.append(done)
        return {"measured_step_s": 0.25, "tokens_per_s": 2048.0, "peak_memory_bytes": 2**29, "cpu_wait_fraction": 0.05}

    monkeypatch.setattr(measure, "run_measurement", fake)
    result = CliRunner().invoke(main, ["measure", "--tp", "2"])
    assert result.exit_code == 0, result.output
    assert seen == list(range(7))
    assert "measured_step_s        0.2500" in result.stdout and "peak_memory_gib        0.500" in result.stdout


def test_a_straggler_slope_below_a_thousandth_is_no_measured_wait():
    """CI's calibration once measured a slope of 0.0006: written as ``sync_skew_fraction`` it was
    below the efficiency model's plausible minimum (1e-3) and the calibrated cluster file would not
    load. Below what the timings resolve it is 0; from 1e-3 it is kept, and it is clipped at 1."""
    from hardware_specs.efficiency_model import MIN_FRACTION, EfficiencyModel
    from paraplan.measure.calibrate import measured_skew_fraction
    assert MIN_FRACTION == 1e-3
    assert measured_skew_fraction(0.0006) == 0.0
    assert measured_skew_fraction(-0.2) == 0.0
    assert measured_skew_fraction(0.001) == 0.001
    assert measured_skew_fraction(0.03) == 0.03
    assert measured_skew_fraction(7.0) == 1.0
    for slope in (0.0006, 0.001, 0.03):
        EfficiencyModel(generation="cpu", gemm_peak_fraction={"fp32": 0.5},
                        sync_skew_fraction=measured_skew_fraction(slope))     # loads


def test_calibrate_refuses_an_unwritable_timings_file_before_measuring_and_writes_nothing(tmp_path):
    (tmp_path / "x.calibration.json").mkdir()     # where the raw timings of x.yaml would go
    result = CliRunner().invoke(main, ["calibrate", "--out", str(tmp_path / "x.yaml"), "--nprocs", "1"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"error: --out: {tmp_path / 'x.calibration.json'} is a folder "
                                                  "(give a file name)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.calibration.json"]


def test_the_profile_and_its_timings_are_written_whole_or_not_at_all(tmp_path):
    cal._write_together({tmp_path / "a.json": "{}", tmp_path / "a.yaml": "name: a\n"})
    assert (tmp_path / "a.json").read_text() == "{}" and (tmp_path / "a.yaml").read_text() == "name: a\n"
    import pytest
    with pytest.raises(TypeError):      # the second text is not text: its temp file fails to write
        cal._write_together({tmp_path / "b.json": "{}", tmp_path / "b.yaml": object()})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "a.yaml"]     # no b.*, no temp file


def test_calibrate_help_names_the_default_profile_name_the_file_stem(tmp_path, monkeypatch):
    """--help said the name came 'from the host'; run_calibration names the profile after the
    output file's stem."""
    result = CliRunner().invoke(main, ["calibrate", "--help"])
    text = " ".join(result.output.split())
    assert "from the host" not in text
    assert "--out file's stem" in text
    names = []
    monkeypatch.setattr(cal, "require_torch", lambda: None)
    monkeypatch.setattr(cal, "choose_device", lambda *a, **k: types.SimpleNamespace(kind="cpu"))
    monkeypatch.setattr(cal, "launch", lambda *a, **k: [])
    monkeypatch.setattr(cal, "summarize", lambda *a, **k: {"cpu_wait_fraction": None})
    monkeypatch.setattr(cal, "cluster_mapping", lambda summary, ranks, world, choice, name: names.append(name) or {})
    monkeypatch.setattr(cal, "_write_together", lambda texts: None)
    cal.run_calibration(tmp_path / "my-machine.yaml", nprocs=1)
    assert names == ["my-machine"]


class _Log(io.StringIO):
    """A stream that is not a terminal (a log file, CI)."""

    def isatty(self) -> bool:
        return False


def test_step_bar_off_a_terminal_writes_progress_lines():
    """calibrate and validate measured --out printed nothing for minutes into a log: the click
    bar is hidden off a terminal. StepBar now writes a line every PROGRESS_LINE_S seconds there
    (0 here: at every report but the last), as paraplan sweep does."""
    from paraplan.cli import StepBar
    log = _Log()
    bar = StepBar("calibrating", stream=log, interval_s=0.0)
    for done, step in ((0, "kernel launch overhead"), (9, "p2p"), (18, "done")):
        bar(done, 18, step)
    bar.close()
    lines = [ln for ln in log.getvalue().splitlines() if ln.startswith("calibrating: ")]
    assert len(lines) == 2
    assert re.fullmatch(r"calibrating: 9 of 18 steps \(50%\), p2p, in \d+ s", lines[1])


def test_step_bar_on_a_terminal_writes_no_progress_lines():
    from paraplan.cli import ProgressLines

    class Tty(_Log):
        def isatty(self) -> bool:
            return True

    lines = ProgressLines(Tty(), interval_s=0.0)
    lines(1, 2, "half")
    assert lines.stream.getvalue() == ""


def test_a_calibration_warns_of_a_loaded_machine_and_of_gemm_timings_the_model_does_not_follow():
    fit = lambda rms: {"peak_flops_per_s": 1e12, "half_dim": 64.0, "best_flops_per_s": 9e11, "rms_rel_error": rms}  # noqa: E731
    quiet = {"cpu_wait_fraction": 0.02, "gemm_fits": {"fp32": fit(0.04), "bf16": fit(0.5)}}
    assert cal.calibration_warnings(quiet, "fp32") == []          # only the primary dtype's fit is judged
    loaded = {"cpu_wait_fraction": 0.3, "gemm_fits": {"fp32": fit(0.22)}}
    messages = cal.calibration_warnings(loaded, "fp32")
    assert len(messages) == 2 and "waited 30%" in messages[0]
    assert "fp32 GEMM timings scatter 22% (rms)" in messages[1] and "\n" not in messages[1]
    assert cal.calibration_warnings({"cpu_wait_fraction": None, "gemm_fits": {"fp32": fit(cal.POOR_GEMM_FIT)}},
                                    "fp32") == []


def test_calibrate_refuses_to_overwrite_a_bundled_catalog_preset_before_measuring(monkeypatch):
    """--out hardware_specs/clusters/dgx-h100.yaml replaced the shipped preset with this machine's
    CPU profile: every later `-c dgx-h100` priced a CPU without a word."""
    from hardware_specs.catalog import BUILTIN_DIR
    preset = BUILTIN_DIR / "clusters" / "dgx-h100.yaml"
    before = preset.read_bytes()
    import paraplan.measure
    monkeypatch.setattr(paraplan.measure, "run_calibration",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured")))
    result = CliRunner().invoke(main, ["calibrate", "--out", str(preset)])
    assert result.exit_code == 2
    assert result.stderr == (f"error: --out: {preset} is a file of paraplan's bundled catalog "
                             "(clusters/dgx-h100.yaml) (write the profile elsewhere, e.g. --out my-machine.yaml)\n")
    assert preset.read_bytes() == before
    assert not preset.with_name("dgx-h100.calibration.json").exists()
