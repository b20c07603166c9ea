"""NVIDIA DGX Cloud benchmark release v24.11.1's tables hold about twice the runs the validation
file's DGXC2411 rows take: the Llama 3.1 8B / 70B / 405B and Nemotron-4 15B / 340B columns the file
leaves out (``tests/data/dgxc2411_other_half.csv``, 33 step times read from the READMEs at
github NVIDIA/dgxc-benchmarking@35a9aec, each row's layout that of the file's row at the same GPU
count in the other precision, or the table's one stated layout; the analysis is in
docs/accuracy_training.md, "DGX Cloud benchmark releases not in the file"). Predicted, never
fitted; bounds at what the committed model measures, rounded up."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from paraplan.validation.published import read_runs, validate_rows

DATA = Path(__file__).resolve().parent / "data" / "dgxc2411_other_half.csv"


@pytest.fixture(scope="module")
def results() -> pd.DataFrame:
    out = validate_rows(read_runs(DATA))
    out["model"] = out.run_id.str.split("-").str[1]
    return out


def test_the_other_half_is_predicted_but_the_proxy_runs_without_a_vocabulary(results):
    assert len(results) == 33
    skipped = results[results.status != "ok"]
    assert len(skipped) == 3 and (skipped.model == "405b").all()
    assert skipped.reason.str.contains("needed field\\(s\\) empty: vocab").all()


def test_the_other_half_within_its_bound(results):
    ok = results[results.status == "ok"]
    assert ok.rel_error.abs().mean() <= 0.07           # 6.21% in session 63 (the dgxc runs' bf16 gradient buffer and FP8 weights); 6.49% on 2026-12-07 (the Hopper refit); 7.12% (7.22% before the sends' placement and overlap)


@pytest.mark.parametrize("model, rows, bound", [
    ("8b", 6, 0.175),     # 17.02% since session 69 (CP 2's ring passes priced, Hopper refit), predicted slow; 16.1% on 2026-12-07 (the Hopper refit); 17.1% (16.7% before the Hopper FP8 refit of session 50), predicted slow as the file's 8B rows
    ("15b", 9, 0.025),    # 2.21% on 2026-12-07 (the Hopper refit); 3.9% (6.7%)
    ("70b", 6, 0.02),     # 1.85% since session 69's refit (Hopper FP8 0.6363 -> 0.6483: the FP8 rows faster); 1.40% on 2026-12-07 (the Hopper refit); 2.3% (3.1%)
    ("340b", 6, 0.095),   # 9.28% on 2026-12-07; 9.42% (8.95% before the Hopper FP8 refit of session 50)
    ("405b", 3, 0.05),    # 4.65% on 2026-12-07, the Hopper refit (HBM 0.6406 -> 0.5547, FP8 0.6484 -> 0.6363) and the optimizer's 16-bit gradient cast; 4.18% (3.75% before the Hopper FP8 refit of session 50)
])
def test_the_other_half_per_model(results, model, rows, bound):
    part = results[(results.model == model) & (results.status == "ok")]
    assert len(part) == rows
    assert part.rel_error.abs().mean() <= bound
