"""NVIDIA's DGX Cloud benchmark releases the validation file does not hold (it has v24.11.1 as
DGXC2411): 203 measured step times from releases v25.01.1-v25.05.05 of github
NVIDIA/dgxc-benchmarking, NeMo 24.12-25.04 and MaxText containers on H100 and GB200, each row citing
its README, commit and table line (``tests/data/dgxc_other_releases.csv``, read from the READMEs and
launch scripts at those commits; the analysis is in docs/accuracy_training.md, "DGX Cloud benchmark
releases not in the file"). Never fitted: the NeMo releases run as their own profiles (nemo-24.12 for
24.12 and 25.02.01, nemo-25.04 for 25.04.00 and 25.04.01: Megatron-Core 0.10-0.12's folded expert
parallelism; since 2026-12-07, before which they ran as nemo-24.09), MaxText as its own profile, whose recipes' remat
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
    # the 405B proxy runs with fewer layers state no vocabulary, and 405B is not their size. The four
    # DeepSeek-V3 rows with ep > dp (ep 64 at dp 32, ep 32 at dp 16), refused while NeMo 25.x ran as
    # NeMo 24.09's carved EP (050952c), are predicted again since 2026-12-07: NeMo 25.04 runs
    # Megatron-Core 0.12, whose expert rank generator folds EP (nemo-25.04)
    assert skipped.reason.str.contains("needed field\\(s\\) empty: vocab").all()
    assert (skipped.family == "Llama 3.1").all()


def test_mean_error_over_the_releases_within_its_bound(results):
    ok = results[results.status == "ok"]
    assert ok.rel_error.abs().mean() <= 0.08      # 7.67% over 197 rows in session 63 (NeMo 24.09's verified gradient buffer and FP8 weights, carried to 24.12 / 25.04); 7.78% in session 61 (7.77% earlier on 2026-12-07) with NeMo 25.x's own stacks (the three DeepSeek-V3 GB200 rows at -61%); 7.12% over 193 as NeMo 24.09 (8.39% over 197 before today's refit and NeMo 24.x expert TP)
    known_miss = (ok.family == "DeepSeek-V3") & (ok.gpu == "gb200")
    assert ok[~known_miss].rel_error.abs().mean() <= 0.07                     # 6.85% over 194 rows in session 63; 6.95% on 2026-12-07 (7.02% over 192 as NeMo 24.09; 7.56% over 194)


@pytest.mark.parametrize("family, gpu, rows, bound", [
    ("GPT-3", "h100-sxm-80gb", 10, 0.05),         # 4.97% since session 69's refit, all 10 predicted 2-9% fast (Hopper FP8 plateau 0.6363 -> 0.6483, which the CP rows' newly priced ring passes pushed up); 4.40% in session 63, all 10 predicted 2-8% fast (the dgxc 175B recipe's FP8-only weights: no weight cast a step); 3.92% on 2026-12-07, all 10 predicted 2-7% fast (the refit: Hopper HBM 0.6406 -> 0.5547, per kernel 25.2 -> 20 us); 3.15% since session 55 (TP collectives exposed per linear, Hopper HBM 0.675 -> 0.6406; all 10 predicted 1-7% fast); 2.8% before (2.1% before the sends' placement and overlap)
    ("Nemotron-4", "h100-sxm-80gb", 44, 0.06),    # 5.79% on 2026-12-07 (5.8%; 6.3%)
    ("Nemotron-4", "gb200", 12, 0.035),           # 3.17% in session 61; 3.24% on 2026-12-07 (Blackwell's single FP8 copy, hidden softmax and refit; 2.5%, 2.7%)
    ("Llama 3.1", "h100-sxm-80gb", 64, 0.09),     # 8.85% on 2026-12-07 (the Hopper refit); 9.32% (8.9% before the Hopper FP8 refit of session 50; the 8B CP 2 rows slow, as in DGXC2411)
    ("Llama 3.1", "gb200", 6, 0.095),             # 9.35% in session 61; 9.22% on 2026-12-07, predicted fast (Blackwell's single FP8 copy and refit; 10.1%, 8.9%)
    ("Llama 4", "gb200", 6, 0.099),               # 9.85% since session 68's refit (Blackwell HBM 0.6234 -> 0.6406); 9.51% in session 63 (FP8-only weights carried from nemo-24.09's dgxc runs); 9.44% in session 61; 9.08% on 2026-12-07, now predicted fast (Blackwell's single FP8 copy and refit); 9.65% predicted slow (4.4% before the Blackwell refit)
    ("Llama 4", "h100-sxm-80gb", 2, 0.215),       # 21.0% on 2026-12-07, predicted slow at etp = tp = 4, which is what the source runs (H100 config table line 19: ETP4; NeMo v2.3.0 llama4_e128.py sets 4), so not an etp error; unchanged under nemo-25.04 (carved or folded, the EP members sit tp = etp = 4 ranks apart); 18.1% predicted fast before (17.8% before session 50's MoE fixes)
    ("Grok-1", "h100-sxm-80gb", 20, 0.05),        # 4.76% on 2026-12-07 with NeMo 25.x's stacks: the two 25.04.00 rows at etp 1 as the source states (grok1/launch.sh ET=1: +31.1% -> +16.1%, +20.1% -> +1.8%), the 18 24.12 rows at folded EP, etp = tp (NeMo 2.1 has no expert TP setting; up to 1.7 points faster, all still predicted fast); 5.47% as NeMo 24.09 (etp = tp = 4, 050952c) and the Hopper refit; 13.9% since session 51's refit (Hopper FP8 0.6363 -> 0.6243; 13.4% before; 12.05% before session 50 dropped the dense MLP's TP collectives from MoE layers)
    ("Grok-1", "gb200", 6, 0.075),                # 6.84% in session 61; 7.09% on 2026-12-07, predicted slow at etp = tp = 4, which the source runs (GB200 table: ETP4; grok1/launch.sh ET=4), unchanged under nemo-25.04 (17.6% predicted fast; 18.8%)
    ("DeepSeek-V3", "h100-sxm-80gb", 2, 0.075),   # 7.18% on 2026-12-07 under nemo-25.04 (folded EP, etp 1 as launch.sh states), both predicted fast (-6.0%, -8.4%); refused earlier that day as NeMo 24.09 (ep 64 > dp 32); 8.4% before, 7.1% before session 51
    ("MaxText", "h100-sxm-80gb", 22, 0.07),       # 6.60% on 2026-12-07 (the Hopper refit: HBM 0.6406 -> 0.5547); 6.13% (5.19% before the Hopper refit): its recipes' remat policy (13.9% fast without it)
])
def test_error_per_family_and_gpu_within_its_bound(results, family, gpu, rows, bound):
    part = results[(results.family == family) & (results.gpu == gpu) & (results.status == "ok")]
    assert len(part) == rows
    assert part.rel_error.abs().mean() <= bound


def test_deepseek_v3_on_gb200_is_the_known_miss_predicted_at_a_third_of_its_step(results):
    """NeMo 25.04.01 measured DeepSeek-V3 on GB200 at 249 TFLOPS a GPU, 1.43x its H100 rate, where
    the model gives about 3.5x: predicted 13.2-13.4 s against 34.17-34.27 s measured at etp 1
    (-60.8% to -61.4%) on 2026-12-07 under nemo-25.04 (folded EP, etp 1 from launch.sh), as before
    that day's NeMo 24.09 mapping (13.0-13.3 s), which refused the 128 and 256 GPU rows (ep > dp) and
    priced the 512 GPU row at etp = tp = 2 (25.5 s, -25.7%)."""
    part = results[(results.family == "DeepSeek-V3") & (results.gpu == "gb200")]
    assert len(part) == 3
    assert (part.status == "ok").all()
    assert part.rel_error.between(-0.62, -0.60).all()
