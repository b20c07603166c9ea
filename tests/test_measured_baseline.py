"""The committed measured baseline, re-predicted without torch: a cost-model regression check.

``tests/data/measured_baseline.csv`` holds step times measured on a 2-core CPU machine (see
``test_measure.py``) and ``tests/data/measured_calibration.yaml`` the calibration of that
machine. Predicting the baseline's configurations from that calibration must (a) reproduce the
predictions recorded with it unless the simulator changed on purpose, and (b) stay within the
measured-validation bounds (``measured_bounds``: per row, on average, and the predicted ratios
between layouts that differ by one physical change). A deliberately wrong link bandwidth, link
latency or halved GEMM peak, a constant predictor and a simulator blind to recomputation must
break the live test's bounds on the rows it measures, or they would not guard anything; a
doubled GEMM peak does not (see ``test_the_measured_checks_do_not_catch_these_mistakes``).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from hardware_specs.catalog import load_cluster
from measured_bounds import (BASELINE_NAMES, DRIFT_MARGIN, ERROR_BOUND, KNOWN_RATIO_MISSES, MEAN_ERROR_BOUND, MEASURED_NAMES,
                             RATIO_PAIRS, ratio_error, ratio_failures, row_drift)
from paraplan.measure.compare import DEFAULT_MODEL, predict

DATA = Path(__file__).parent / "data"
BASELINE = DATA / "measured_baseline.csv"
CALIBRATION = DATA / "measured_calibration.yaml"
CONFIG_KEYS = ("dp", "tp", "pp", "micro_batch", "global_batch", "zero_stage", "recompute")


def _run(row) -> dict:
    run = {**DEFAULT_MODEL, **{k: row[k] for k in CONFIG_KEYS}}
    run.update({k: int(run[k]) for k in CONFIG_KEYS if k != "recompute"})
    return run


def _errors_of(step_time_s) -> pd.Series:
    """Each baseline row's relative error when ``step_time_s(run)`` predicts its step."""
    baseline = pd.read_csv(BASELINE)
    return pd.Series({row["name"]: (step_time_s(_run(row)) - row["measured_step_s"]) / row["measured_step_s"]
                      for _, row in baseline.iterrows()})


def _errors(cluster) -> pd.Series:
    return _errors_of(lambda run: predict(run, cluster, "fp32").step_time_s)


def _ratio_failures(errs: pd.Series, names=None) -> list[str]:
    baseline = pd.read_csv(BASELINE).set_index("name")
    keep = list(errs.index if names is None else names)
    return ratio_failures(errs[keep], baseline["measured_step_s"][keep], baseline["rel_error_spread"][keep])


def _with_link_bandwidth(cluster, factor: float):
    return replace(cluster, scaleup=replace(cluster.scaleup, bw_bytes_per_s=cluster.scaleup.bw_bytes_per_s * factor),
                   scaleout=replace(cluster.scaleout, bw_bytes_per_s=cluster.scaleout.bw_bytes_per_s * factor))


def _with_link_latency(cluster, factor: float):
    return replace(cluster, scaleup=replace(cluster.scaleup, latency_s=cluster.scaleup.latency_s * factor),
                   scaleout=replace(cluster.scaleout, latency_s=cluster.scaleout.latency_s * factor))


def _with_peak_flops(cluster, factor: float):
    gpu = cluster.gpu
    return replace(cluster, gpu=replace(gpu, peak_flops_per_s={k: v * factor for k, v in gpu.peak_flops_per_s.items()}))


def test_the_measured_test_judges_by_the_same_bounds():
    # one definition (measured_bounds), imported by both modules: not a copy kept in step
    import ast
    tree = ast.parse((Path(__file__).parent / "test_measure.py").read_text())
    imported = {a.name for node in tree.body if isinstance(node, ast.ImportFrom) and node.module == "measured_bounds"
                for a in node.names}
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
    shared = {"ERROR_BOUND", "MEAN_ERROR_BOUND", "DRIFT_MARGIN", "MEASURED_NAMES", "ratio_failures"}
    assert shared <= imported and not shared & assigned


def test_baseline_predictions_are_reproduced_from_the_committed_calibration():
    baseline = pd.read_csv(BASELINE).set_index("name")
    errs = _errors(load_cluster(str(CALIBRATION)))
    recorded = baseline["rel_error"]
    # rounded to 5 decimals in the CSV; a cost-model change that moves a prediction by more
    # than 0.1% shows here (refresh the baseline if the change is intended)
    assert (errs - recorded).abs().max() < 1e-3, pd.DataFrame({"now": errs, "recorded": recorded})


def _all_rows_fail(errs: pd.Series) -> bool:
    """Whether the baseline's rows, all of them, break a bound: a row's |error| over
    ``ERROR_BOUND``, their mean over ``MEAN_ERROR_BOUND``, or a pair's predicted ratio
    (``RATIO_PAIRS``) off the measured one beyond the baseline's scatter."""
    return bool(errs.abs().max() > ERROR_BOUND or errs.abs().mean() > MEAN_ERROR_BOUND or _ratio_failures(errs))


def test_baseline_errors_are_within_the_bounds():
    errs = _errors(load_cluster(str(CALIBRATION)))
    assert len(errs) >= 8
    assert errs.abs().max() <= ERROR_BOUND, errs
    assert errs.abs().mean() <= MEAN_ERROR_BOUND, errs
    assert _ratio_failures(errs) == []
    assert not _all_rows_fail(errs)


def test_every_ratio_pair_is_judged_on_the_baseline():
    names = set(pd.read_csv(BASELINE)["name"])
    assert {n for pair in RATIO_PAIRS + KNOWN_RATIO_MISSES for n in pair} <= names
    # what refresh_baseline measures again is what the committed file holds (it measured only the
    # live test's four layouts, so a refresh dropped the ratio checks' single-rank references)
    assert names == set(BASELINE_NAMES)
    assert set(MEASURED_NAMES) <= set(BASELINE_NAMES)
    assert {"tp2", "tp2-recompute"} <= set(MEASURED_NAMES)        # the live test judges recomputation as a ratio


@pytest.mark.parametrize("constant_s", [0.12, 0.13, 0.14, 0.15, 0.16])
def test_a_constant_predictor_fails(constant_s):
    """A predictor that says ``constant_s`` for every layout passed the row bounds (worst row
    18-30%, mean 12-14% on all 8 rows; the live rows alike) but predicts every ratio as 1: the
    measured tp2-recompute/tp2 ratio is 0.17059 / 0.12503 = 1.364, so its ratio error is
    1 / 1.364 - 1 = -26.7% against a tolerance of (0.10989 + 0.25178) / 2 = 18.1%; pp2-mb1x4/single
    0.11972 / 0.15343 = 0.780 gives +28.2% against (0.2164 + 0.19613) / 2 = 20.6%."""
    errs = _errors_of(lambda run: constant_s)
    failures = _ratio_failures(errs)
    assert any(f.startswith("tp2-recompute/tp2: measured ratio 1.364, predicted 1.000 (-26.7%, tolerance 18.1%)")
               for f in failures), failures
    assert any(f.startswith("pp2-mb1x4/single: measured ratio 0.780, predicted 1.000 (+28.2%, tolerance 20.6%)")
               for f in failures), failures
    assert _all_rows_fail(errs)
    assert _live_gate_errors(errs)[0]


def test_a_simulator_blind_to_recomputation_fails():
    """Pricing recompute='full' as none: single-recompute and tp2-recompute predicted as single
    and tp2, so their ratios are 1 where 1.207 and 1.364 were measured; tp2-recompute/tp2 misses
    by -26.7% (tolerance 18.1%), on the baseline and in the live test's rows."""
    cluster = load_cluster(str(CALIBRATION))
    errs = _errors_of(lambda run: predict({**run, "recompute": "none"}, cluster, "fp32").step_time_s)
    assert ratio_error(errs, "tp2-recompute", "tp2") == pytest.approx(0.12503 / 0.17059 - 1, abs=1e-9)
    assert _all_rows_fail(errs)
    assert _live_gate_errors(errs)[0]


@pytest.mark.parametrize("layout, reference", KNOWN_RATIO_MISSES)
@pytest.mark.xfail(strict=True, reason="the simulator predicts dp2 28% faster than one rank; measured equal")
def test_known_ratio_misses(layout, reference):
    """Said out loud: the one physical difference the simulator does not reproduce within the
    baseline's scatter (``measured_bounds.KNOWN_RATIO_MISSES``). Strict: when a cost-model change
    makes it pass, move the pair into ``RATIO_PAIRS``."""
    errs = _errors(load_cluster(str(CALIBRATION)))
    assert _ratio_failures(errs[[layout, reference]]) == [] and \
        abs(ratio_error(errs, layout, reference)) <= 0.5 * (0.21080 + 0.19613)     # the two rows' spreads


def _live_gate(cluster) -> tuple[bool, pd.DataFrame]:
    """Whether the live test (``test_measure.py``) would fail on the baseline's measured step times
    predicted from ``cluster``: exactly its rows (``MEASURED_NAMES``) and its three checks, each
    row's |error| over ``ERROR_BOUND``, their mean over ``MEAN_ERROR_BOUND``, or a row's error
    moved by more than ``DRIFT_MARGIN`` from its median over the baseline's rounds, less the
    rows' common move (``row_drift``)."""
    return _live_gate_errors(_errors(cluster))


def _live_gate_errors(all_errors: pd.Series) -> tuple[bool, pd.DataFrame]:
    """``_live_gate`` of the baseline rows' relative errors ``all_errors``: the rows of
    ``MEASURED_NAMES``, the per-row and mean bounds, the drift margin and the ratio pairs
    (``RATIO_PAIRS``) whose rows the live test measures."""
    baseline = pd.read_csv(BASELINE).set_index("name")
    base = baseline["rel_error_median"] if "rel_error_median" in baseline else baseline["rel_error"]
    names = list(MEASURED_NAMES)
    errs = all_errors[names]
    drift = row_drift(errs, base[names])
    fails = bool(errs.abs().max() > ERROR_BOUND or errs.abs().mean() > MEAN_ERROR_BOUND
                 or drift.max() > DRIFT_MARGIN or _ratio_failures(all_errors, names))
    return fails, pd.DataFrame({"error": errs, "drift": drift})


def _wrong(mistake: str):
    cluster = load_cluster(str(CALIBRATION))
    return {"link bandwidth in bits read as bytes / 8": lambda: _with_link_bandwidth(cluster, 1 / 8),
            "link bandwidth 8x (bytes read as bits)": lambda: _with_link_bandwidth(cluster, 8.0),
            "link latency 10x (ms vs us slip)": lambda: _with_link_latency(cluster, 10.0),
            "link latency 0": lambda: _with_link_latency(cluster, 0.0),
            "GEMM peak halved (FLOPs counted twice)": lambda: _with_peak_flops(cluster, 0.5),
            "GEMM peak doubled (FLOPs counted once)": lambda: _with_peak_flops(cluster, 2.0)}[mistake]()


def test_the_committed_calibration_passes_the_live_gate():
    fails, table = _live_gate(load_cluster(str(CALIBRATION)))
    assert not fails, table


@pytest.mark.parametrize("mistake", ["link bandwidth in bits read as bytes / 8",
                                     "link latency 10x (ms vs us slip)",
                                     "GEMM peak halved (FLOPs counted twice)"])
def test_the_measured_checks_catch_a_wrong_cost_model(mistake):
    """The live test (its three rows, per-row bound, mean bound, drift from the baseline) fails on
    each of these mistakes.

    On the committed baseline's dp2-zero1, tp2-recompute and pp2-mb1x4: bandwidth / 8 ->
    dp2-zero1 +156%; latency x 10 -> tp2-recompute +149%; a halved GEMM peak -> pp2-mb1x4 +64%,
    mean |error| 45%.
    """
    fails, table = _live_gate(_wrong(mistake))
    assert fails, table


@pytest.mark.parametrize("mistake", ["GEMM peak doubled (FLOPs counted once)",
                                     "link bandwidth 8x (bytes read as bits)",
                                     "link latency 0"])
def test_the_measured_checks_do_not_catch_these_mistakes(mistake):
    """What the live test cannot see, said out loud (this test fails, and the docstrings and the
    README must be corrected, if that changes).

    On the same three rows: a doubled GEMM peak -> worst row dp2-zero1 -24% (bound 35%), mean
    |error| 16.6% (bound 20%), largest drift 0.13 (margin 0.3; ``row_drift``, less the rows'
    median move); bandwidth x 8 -> worst row 28%, drift 0.21 (communication is a minor share of
    these steps); zero latency -> worst row 18%.
    Sharper bounds would not hold on this machine: the correct cost model's errors on these rows
    are 7-11% (medians over the baseline's rounds), one round moves a row by up to 0.22 (the
    baseline's ``rel_error_spread``) and the host by 10-20% over minutes, so a mean bound under
    16.6% or a drift margin under 0.15 would fail correct code.
    """
    fails, table = _live_gate(_wrong(mistake))
    assert not fails, table


BLOCK_TORCH = '''
import sys
class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch' (blocked by the test)")
        return None
sys.meta_path.insert(0, _NoTorch())
'''


@pytest.mark.parametrize("args", [["calibrate", "--out", "{tmp}/local.yaml"],
                                  ["validate", "measured", "{tmp}/local.yaml"],
                                  ["measure", "--tp", "2"]])
def test_missing_torch_is_one_line_naming_the_extra(tmp_path, args):
    import os
    import subprocess
    import sys
    (tmp_path / "sitecustomize.py").write_text(BLOCK_TORCH)
    (tmp_path / "local.yaml").write_text(CALIBRATION.read_text()) if args[0] == "validate" else None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    argv = [a.format(tmp=tmp_path) for a in args]
    out = subprocess.run([sys.executable, "-c", "from paraplan.cli import main; main()", *argv],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2, out
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "torch" in lines[0] and "pip install" in lines[0], lines[0]
    if args[0] == "calibrate":
        assert not (tmp_path / "local.yaml").exists()


def repredict_baseline(path: Path = BASELINE) -> None:
    """Rewrite the baseline's predicted_step_s and rel_error from the committed calibration after
    an intended cost-model change; the measured step times (and the calibration) stay as they
    were measured (``python tests/test_measured_baseline.py --repredict``)."""
    baseline = pd.read_csv(path)
    cluster = load_cluster(str(CALIBRATION))
    for i, row in baseline.iterrows():
        run = {**DEFAULT_MODEL, **{k: row[k] for k in CONFIG_KEYS}}
        run.update({k: int(run[k]) for k in CONFIG_KEYS if k != "recompute"})
        predicted = predict(run, cluster, "fp32").step_time_s
        baseline.at[i, "predicted_step_s"] = round(predicted, 5)
        baseline.at[i, "rel_error"] = round((predicted - row["measured_step_s"]) / row["measured_step_s"], 5)
    baseline.to_csv(path, index=False)


if __name__ == "__main__":
    import sys
    if "--repredict" in sys.argv:
        repredict_baseline()


def test_row_drift_is_a_rows_own_move_not_the_calibrations():
    """The fresh clone's round of 2026-12-06, in shape: every row predicted high, pp2-mb1x4 0.34
    from its baseline: the rows' median move (0.19) is the calibration's, and the row's own move
    is 0.15. A row that moves alone keeps its whole move; with two rows nothing is removed."""
    import pandas as pd
    drift = row_drift(pd.Series([0.27, 0.20, 0.15, 0.18]), pd.Series([-0.07, 0.0, 0.0, 0.0]))
    assert list(drift.round(6)) == [0.15, 0.01, 0.04, 0.01]
    alone = row_drift(pd.Series([0.28, 0.0, 0.0, 0.0]), pd.Series([-0.07, 0.0, 0.0, 0.0]))
    assert alone.iloc[0] == pytest.approx(0.35) and alone.iloc[0] > DRIFT_MARGIN
    two = row_drift(pd.Series([0.27, 0.20]), pd.Series([-0.07, 0.0]))
    assert list(two.round(6)) == [0.34, 0.2]
