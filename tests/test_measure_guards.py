"""Guards of the measurement commands (review s5): readings this machine cannot take, runs that
could not finish, and bad values given to the library. Nothing here trains: the measuring
functions are replaced, or the refusal comes before any rank starts."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cli_results import run

DATA = Path(__file__).parent / "data"


# --- a CPU-wait reading this machine could not take (no /proc/.../schedstat) ---------------------

def test_measure_shows_a_missing_cpu_wait_as_unavailable(monkeypatch):
    import paraplan.measure
    result = {"measured_step_s": 0.2, "tokens_per_s": 1000.0, "peak_memory_bytes": 3 * 2**28,
              "cpu_wait_fraction": None}
    monkeypatch.setattr(paraplan.measure, "run_measurement", lambda config, progress=None: result)
    r = run("measure", "--tp", "2")
    assert r.exit_code == 0, r.output
    values = dict(ln.split() for ln in r.stdout.splitlines())
    assert values == {"measured_step_s": "0.2000", "tokens_per_s": "1,000", "peak_memory_gib": "0.750",
                      "cpu_wait_pct": "unavailable"}


def test_validate_measured_shows_a_missing_cpu_wait_as_unavailable(monkeypatch, tmp_path):
    import paraplan.measure
    rows = [{"name": n, "dp": 2, "tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 4, "zero_stage": 0,
             "recompute": "none", "measured_step_s": 0.5, "predicted_step_s": 0.45, "rel_error": -0.1,
             "cpu_wait_fraction": w, "foreign_load": None} for n, w in (("dp2", None), ("dp2b", 0.25))]
    for frame in (pd.DataFrame(rows[:1]), pd.DataFrame(rows)):     # None alone; NaN beside a number
        monkeypatch.setattr(paraplan.measure, "compare_measured", lambda *a, **k: frame)
        r = run("validate", "measured", DATA / "measured_calibration.yaml", "--rounds", "1")
        assert r.exit_code == 0, r.output
        header, _, first = r.stdout.splitlines()[:3]
        cells = dict(zip(header.split(), first.split()))
        assert cells["cpu_wait_pct"] == "unavailable" and cells["rel_error_pct"] == "-10.0"
        assert "mean |error| 10.0%" in r.stdout


# --- runs that cannot finish within the launch's time limit --------------------------------------

LAUNCH_BOUND = ["--layers", "1024", "--hidden", "8", "--heads", "1", "--seq-len", "2", "--global-batch", "64",
                "--warmup", "1"]


def test_a_run_bound_by_operator_calls_is_refused_before_any_rank_starts(monkeypatch):
    # 1,024 layers of hidden 8 pass the FLOPs check (~9e8 FLOPs a step), but each rank runs 64
    # micro-batches x 1,024 layers forward and backward a step: at 101 aten calls a layer and 1 us
    # a call at the least, 100 steps take >= 100 x 64 x 1024 x 101e-6 = 662 s, past the 600 s the
    # launcher allows (on the 2-core VM a layer took 394-800 us, so ~45-90 minutes)
    import paraplan.measure.train as train
    monkeypatch.setattr(train, "launch", lambda *a, **k: (_ for _ in ()).throw(AssertionError("launched")))
    r = run("measure", *LAUNCH_BOUND, "--steps", "100")
    assert r.exit_code == 2, r.output
    line = r.output.strip().splitlines()[-1]
    assert line.startswith("error: --steps: the run needs at least 662 s"), line
    assert "600 s" in line and "--micro-batch" in line


def test_the_operator_call_floor_scales_with_steps_micro_batches_layers_and_shared_cores():
    from paraplan.measure.train import RunConfig
    run_cfg = RunConfig(num_layers=1024, hidden_size=8, num_heads=1, seq_len=2, global_batch=64, steps=2, warmup=1)
    assert run_cfg.min_run_seconds("cpu", cores=2) == pytest.approx(2 * 64 * 1024 * 101e-6)      # 13.2 s
    run_cfg.check_finishes("cpu")                       # 13 s: it can finish, so it is not refused
    pp2 = RunConfig(num_layers=1024, hidden_size=8, num_heads=1, seq_len=2, global_batch=64, steps=2, warmup=1, pp=2)
    assert pp2.min_run_seconds("cpu", cores=2) == pytest.approx(2 * 64 * 512 * 101e-6)           # half the layers a rank
    # 8 single-thread ranks on 2 cores: each gets a quarter of a core
    dp8 = RunConfig(num_layers=1024, hidden_size=8, num_heads=1, seq_len=2, global_batch=64, steps=2, warmup=1, dp=8)
    assert dp8.min_run_seconds("cpu", cores=2) == pytest.approx(2 * 8 * 1024 * 101e-6 * 4)
    assert dp8.min_run_seconds("cuda", cores=2) == pytest.approx(2 * 8 * 1024 * 101e-6)


def _sleep_rank(rank, world_size, device, choice, args):
    import time
    time.sleep(60)


def test_a_launch_past_its_time_limit_is_one_line_with_a_fix_not_a_file_error(tmp_path):
    pytest.importorskip("torch")
    from paraplan.cli import error_line
    from paraplan.measure.runtime import MeasurementTimeout, choose_device, launch
    with pytest.raises(MeasurementTimeout) as info:
        launch(_sleep_rank, 1, {}, choose_device("cpu", threads_per_rank=1), timeout_s=2.0)
    line, code = error_line(info.value)
    assert code == 2 and line.startswith("error: time: the ranks did not finish within 2 s and were stopped (")
    assert "io:" not in line and "free space" not in line and "--steps" in line


# --- validate measured --steps past what its runs may do -----------------------------------------

def _never(*a, **k):
    raise AssertionError("started although --steps was too many")


@pytest.mark.parametrize("each_round", [False, True])
def test_validate_measured_refuses_too_many_steps_naming_steps_before_any_run(monkeypatch, each_round):
    # the single-rank layouts run 2 copies (one per calibrated rank) of the 4-layer, hidden-256,
    # vocabulary-1024 GPT on 4 x 128 tokens: 6 x (12 x 256^2 x 4 + 1024 x 256) + 6 x 128 x 256 x 4
    # = 21,233,664 FLOPs a token, x 512 tokens x 2 copies = 2.174e10 a step; RUN_FLOPS allows a CPU
    # run 2e13, so 919 steps (1.998e13) and not 920 (2.0004e13)
    pytest.importorskip("torch")
    import paraplan.measure.calibrate as calibrate
    import paraplan.measure.train as train
    monkeypatch.setattr(train, "run_measurement", _never)
    monkeypatch.setattr(calibrate, "run_calibration", _never)
    how = ["--calibrate-each-round"] if each_round else [str(DATA / "measured_calibration.yaml")]
    r = run("validate", "measured", *how, "--steps", "920", "--rounds", "1")
    assert r.exit_code == 2, r.output
    line = r.output.strip().splitlines()[-1]
    assert line.startswith("error: --steps: 920 steps are too many for single") and line.endswith("(use at most 919 steps)"), line


def test_validate_measured_takes_the_most_steps_its_refusal_names(monkeypatch):
    pytest.importorskip("torch")
    import paraplan.measure.train as train

    class Started(Exception):
        pass
    monkeypatch.setattr(train, "run_measurement", lambda cfg: (_ for _ in ()).throw(Started(cfg["steps"])))
    r = run("validate", "measured", DATA / "measured_calibration.yaml", "--steps", "919", "--rounds", "1")
    assert isinstance(r.exception, Started) or "Started" in r.output, r.output


# --- values of the wrong kind given to the library ------------------------------------------------

WRONG_KIND = [({"dp": float("nan")}, "dp"), ({"tp": float("inf")}, "tp"), ({"steps": "4"}, "steps"),
              ({"tp": 2.0}, "tp"), ({"warmup": 1.5}, "warmup"), ({"micro_batch": True}, "micro_batch"),
              ({"global_batch": 1e30}, "global_batch"), ({"device": "tpu"}, "device"), ({"lr": -1.0}, "lr"),
              ({"lr": float("nan")}, "lr"), ({"lr": 0}, "lr"), ({"seed": -1}, "seed"), ({"name": None}, "name")]


@pytest.mark.parametrize("config,field", WRONG_KIND, ids=[repr(c) for c, _ in WRONG_KIND])
def test_run_config_names_a_field_of_the_wrong_kind(config, field):
    from hardware_specs.errors import InputError
    from paraplan.measure.train import RunConfig
    with pytest.raises(InputError) as info:
        RunConfig.from_dict(config)
    assert info.value.field == field


def test_run_config_still_takes_numpy_integers_and_an_integer_learning_rate():
    import numpy as np

    from paraplan.measure.train import RunConfig
    run_cfg = RunConfig.from_dict({"dp": np.int64(2), "global_batch": 4, "lr": 1})
    assert run_cfg.world_size == 2


@pytest.mark.parametrize("config,field", WRONG_KIND[:6], ids=[repr(c) for c, _ in WRONG_KIND[:6]])
def test_compare_measured_names_the_configuration_and_field_before_measuring(monkeypatch, config, field):
    pytest.importorskip("torch")
    from hardware_specs.errors import InputError
    import paraplan.measure.train as train
    from paraplan.measure.compare import compare_measured
    monkeypatch.setattr(train, "run_measurement", _never)
    with pytest.raises(InputError) as info:
        compare_measured(DATA / "measured_calibration.yaml", configs=[{"name": "bad", **config}])
    assert info.value.field == f"configs[0] (bad): {field}", info.value


# --- more ranks than the cores ----------------------------------------------------------------------
# (the two_cores_and_no_ranks fixture: tests/conftest.py)

def test_measure_refuses_32_ranks_on_2_cores_before_starting_them(two_cores_and_no_ranks):
    # dp2 x tp2 x pp8 = 32 ranks; at 4 a core a 2-core machine starts at most 8 (dp2 x tp2 x pp2)
    r = run("measure", "--dp", "2", "--tp", "2", "--pp", "8", "--layers", "8")
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1] == (
        "error: --dp*--tp*--pp: 32 CPU ranks on 2 cores; a CPU measurement starts at most 4 a core (8 here) "
        "(use fewer ranks)")


def test_measure_help_states_the_rank_limit_and_the_time_limit():
    from paraplan.measure.runtime import max_cpu_ranks
    text = " ".join(run("measure", "--help").output.split())
    assert f"at most 4 ranks a core on a CPU ({max_cpu_ranks()} on this machine)" in text
    assert "cannot finish in 600 s is refused" in text


def _return_nothing(rank, world_size, device, choice, args):
    return None


def test_a_launch_reports_its_ranks_starting_before_any_rank_reports():
    # a bar from the first second: 32 ranks on 2 cores showed nothing for minutes (the first
    # report came from rank 0's first step, after every rank's start-up and rendezvous)
    pytest.importorskip("torch")
    from paraplan.measure.runtime import choose_device, launch
    seen = []
    launch(_return_nothing, 1, {}, choose_device("cpu", threads_per_rank=1), progress=lambda *a: seen.append(a))
    assert seen[0] == (0, 1, "starting 1 rank")


def test_ranks_sharing_the_cores_are_warned_about(monkeypatch):
    # 2 single-thread ranks on 1 core: the measured step includes their contention
    pytest.importorskip("torch")
    import os

    import paraplan.measure.train as train

    class Stop(Exception):
        pass
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    monkeypatch.setattr(train, "launch", lambda *a, **k: (_ for _ in ()).throw(Stop()))
    with pytest.warns(UserWarning, match="2 ranks x 1 thread share 1 core: "), pytest.raises(Stop):
        train.run_measurement({"dp": 2, "global_batch": 4, "device": "cpu"})
