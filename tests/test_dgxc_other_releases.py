"""NVIDIA's DGX Cloud benchmark releases the validation file does not hold (it has v24.11.1 as
DGXC2411): 203 measured step times from releases v25.01.1-v25.05.05 of github
NVIDIA/dgxc-benchmarking, NeMo 24.12-25.04 and MaxText containers on H100 and GB200, each row citing
its README, commit and table line (``tests/data/dgxc_other_releases.csv``, read from the READMEs and
launch scripts at those commits; the analysis is in docs/accuracy_training.md, "DGX Cloud benchmark
releases not in the file"). Never fitted: the NeMo releases run as the newest profiled NeMo release
before them (``hardware_specs.release_match``), MaxText as its own profile, whose recipes' remat
policy (``recipe_recompute``, ``save_dots``) a row stating no recomputation runs.

The bounds are what the committed model measures, rounded up, per model family and GPU, so that a
change that helps one and hurts another shows.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from paraplan.validation.published import read_runs, validate_rows

DATA = Path(__file__).resolve().parent / "data" / "dgxc_other_releases.csv"
FAMILIES = ("Llama 3.1", "Llama 4", "Nemotron-4", "GPT-3", "Grok-1", "DeepSeek-V3", "MaxText")


@pytest.fixture(scope="module")
def results() -> pd.DataFrame:
    rows = read_runs(DATA)
    out = validate_rows(rows)
    out["family"] = [next(f for f in FAMILIES if f in m) for m in rows.model]
    out["gpu"] = rows.gpu_profile.to_numpy()
    return out


def test_all_but_six_rows_are_predicted_and_the_six_say_why(results):
    assert len(results) == 203
    skipped = results[results.status != "ok"]
    assert len(skipped) == 6
    # the 405B proxy runs with fewer layers state no vocabulary, and 405B is not their size
    assert skipped.reason.str.contains("needed field\\(s\\) empty: vocab").all()


def test_mean_error_over_the_releases_within_its_bound(results):
    ok = results[results.status == "ok"]
    assert ok.rel_error.abs().mean() <= 0.09                                  # 8.39%
    known_miss = (ok.family == "DeepSeek-V3") & (ok.gpu == "gb200")
    assert ok[~known_miss].rel_error.abs().mean() <= 0.08                     # 7.56% over 194 rows


@pytest.mark.parametrize("family, gpu, rows, bound", [
    ("GPT-3", "h100-sxm-80gb", 10, 0.035),        # 3.15% since session 55 (TP collectives exposed per linear, Hopper HBM 0.675 -> 0.6406; all 10 predicted 1-7% fast); 2.8% before (2.1% before the sends' placement and overlap)
    ("Nemotron-4", "h100-sxm-80gb", 44, 0.06),    # 5.8% (6.3%)
    ("Nemotron-4", "gb200", 12, 0.03),            # 2.5% (2.7%)
    ("Llama 3.1", "h100-sxm-80gb", 64, 0.095),    # 9.32% (8.9% before the Hopper FP8 refit of session 50; the 8B CP 2 rows slow, as in DGXC2411)
    ("Llama 3.1", "gb200", 6, 0.105),             # 10.1% (8.9%)
    ("Llama 4", "gb200", 6, 0.1),                 # 9.65%, predicted slow (4.4% before the Blackwell refit)
    ("Llama 4", "h100-sxm-80gb", 2, 0.185),       # 18.1%, predicted fast (17.8% before session 50's MoE fixes)
    ("Grok-1", "h100-sxm-80gb", 20, 0.145),       # 13.9% since session 51's refit (Hopper FP8 0.6363 -> 0.6243; 13.4% before; 12.05% before session 50 dropped the dense MLP's TP collectives from MoE layers)
    ("Grok-1", "gb200", 6, 0.18),                 # 17.6%, predicted fast (18.8%)
    ("DeepSeek-V3", "h100-sxm-80gb", 2, 0.09),    # 8.4% since session 51 (the ends' TP collectives, Hopper HBM 0.589 -> 0.675 at the refit; 7.1% before)
    ("MaxText", "h100-sxm-80gb", 22, 0.065),      # 6.13% (5.19% before the Hopper refit): its recipes' remat policy (13.9% fast without it)
])
def test_error_per_family_and_gpu_within_its_bound(results, family, gpu, rows, bound):
    part = results[(results.family == family) & (results.gpu == gpu) & (results.status == "ok")]
    assert len(part) == rows
    assert part.rel_error.abs().mean() <= bound


def test_deepseek_v3_on_gb200_is_the_known_miss_predicted_at_a_third_of_its_step(results):
    """NeMo 25.04.01 measured DeepSeek-V3 on GB200 at 249 TFLOPS a GPU, 1.43x its H100 rate, where
    the model gives about 3.5x: predicted 13.0-13.3 s against 34.2-34.3 s measured."""
    part = results[(results.family == "DeepSeek-V3") & (results.gpu == "gb200")]
    assert len(part) == 3
    assert part.rel_error.between(-0.65, -0.55).all()
