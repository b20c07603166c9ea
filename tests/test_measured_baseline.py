"""The committed measured baseline, re-predicted without torch: a cost-model regression check.

``tests/data/measured_baseline.csv`` holds step times measured on a 2-core CPU machine (see
``test_measure.py``) and ``tests/data/measured_calibration.yaml`` the calibration of that
machine. Predicting the baseline's configurations from that calibration must (a) reproduce the
predictions recorded with it unless the simulator changed on purpose, and (b) stay within the
measured-validation bounds. A deliberately wrong link bandwidth, link latency or halved GEMM
peak must break the live test's bounds on the rows it measures, or they would not guard anything;
a doubled GEMM peak does not (see ``test_the_measured_checks_do_not_catch_these_mistakes``).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from hardware_specs.catalog import load_cluster
from paraplan.measure.compare import DEFAULT_MODEL, predict

DATA = Path(__file__).parent / "data"
BASELINE = DATA / "measured_baseline.csv"
CALIBRATION = DATA / "measured_calibration.yaml"
# the bounds test_measure.py applies to fresh measurements, and the layouts it measures (its
# MEASURED_NAMES; kept in step by a test below: that module needs torch, this one does not)
ERROR_BOUND = 0.35
MEAN_ERROR_BOUND = 0.20
DRIFT_MARGIN = 0.3
MEASURED_NAMES = ("dp2-zero1", "tp2-recompute", "pp2-mb1x4")
CONFIG_KEYS = ("dp", "tp", "pp", "micro_batch", "global_batch", "zero_stage", "recompute")


def _errors(cluster) -> pd.Series:
    baseline = pd.read_csv(BASELINE)
    errs = {}
    for _, row in baseline.iterrows():
        run = {**DEFAULT_MODEL, **{k: row[k] for k in CONFIG_KEYS}}
        run.update({k: int(run[k]) for k in CONFIG_KEYS if k != "recompute"})
        predicted = predict(run, cluster, "fp32").step_time_s
        errs[row["name"]] = (predicted - row["measured_step_s"]) / row["measured_step_s"]
    return pd.Series(errs)


def _with_link_bandwidth(cluster, factor: float):
    return replace(cluster, scaleup=replace(cluster.scaleup, bw_bytes_per_s=cluster.scaleup.bw_bytes_per_s * factor),
                   scaleout=replace(cluster.scaleout, bw_bytes_per_s=cluster.scaleout.bw_bytes_per_s * factor))


def _with_link_latency(cluster, factor: float):
    return replace(cluster, scaleup=replace(cluster.scaleup, latency_s=cluster.scaleup.latency_s * factor),
                   scaleout=replace(cluster.scaleout, latency_s=cluster.scaleout.latency_s * factor))


def _with_peak_flops(cluster, factor: float):
    gpu = cluster.gpu
    return replace(cluster, gpu=replace(gpu, peak_flops_per_s={k: v * factor for k, v in gpu.peak_flops_per_s.items()}))


def test_bounds_match_the_measured_test():
    import ast
    source = (Path(__file__).parent / "test_measure.py").read_text()
    names = ("ERROR_BOUND", "MEAN_ERROR_BOUND", "DRIFT_MARGIN", "MEASURED_NAMES")
    values = {node.targets[0].id: ast.literal_eval(node.value) for node in ast.parse(source).body
              if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
              and node.targets[0].id in names}
    assert values == {"ERROR_BOUND": ERROR_BOUND, "MEAN_ERROR_BOUND": MEAN_ERROR_BOUND, "DRIFT_MARGIN": DRIFT_MARGIN,
                      "MEASURED_NAMES": MEASURED_NAMES}


def test_baseline_predictions_are_reproduced_from_the_committed_calibration():
    baseline = pd.read_csv(BASELINE).set_index("name")
    errs = _errors(load_cluster(str(CALIBRATION)))
    recorded = baseline["rel_error"]
    # rounded to 5 decimals in the CSV; a cost-model change that moves a prediction by more
    # than 0.1% shows here (refresh the baseline if the change is intended)
    assert (errs - recorded).abs().max() < 1e-3, pd.DataFrame({"now": errs, "recorded": recorded})


def test_baseline_errors_are_within_the_bounds():
    errs = _errors(load_cluster(str(CALIBRATION))).abs()
    assert len(errs) >= 8
    assert errs.max() <= ERROR_BOUND, errs
    assert errs.mean() <= MEAN_ERROR_BOUND, errs


def _live_gate(cluster) -> tuple[bool, pd.DataFrame]:
    """Whether the live test (``test_measure.py``) would fail on the baseline's measured step times
    predicted from ``cluster``: exactly its rows (``MEASURED_NAMES``) and its three checks, each
    row's |error| over ``ERROR_BOUND``, their mean over ``MEAN_ERROR_BOUND``, or a row's error
    moved by more than ``DRIFT_MARGIN`` from its median over the baseline's rounds."""
    baseline = pd.read_csv(BASELINE).set_index("name")
    base = baseline["rel_error_median"] if "rel_error_median" in baseline else baseline["rel_error"]
    names = list(MEASURED_NAMES)
    errs = _errors(cluster)[names]
    drift = (errs - base[names]).abs()
    fails = bool(errs.abs().max() > ERROR_BOUND or errs.abs().mean() > MEAN_ERROR_BOUND
                 or drift.max() > DRIFT_MARGIN)
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
    |error| 16.6% (bound 20%), largest drift 0.15 (margin 0.3); bandwidth x 8 -> worst row 28%,
    drift 0.19 (communication is a minor share of these steps); zero latency -> worst row 19%.
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
