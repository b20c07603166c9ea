"""Guards of the measurement commands (review s5): readings this machine cannot take, runs that
could not finish, and bad values given to the library. Nothing here trains: the measuring
functions are replaced, or the refusal comes before any rank starts."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

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
