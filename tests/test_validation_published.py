"""Regression bounds on the published-run validation (../shared/validation/published_runs.csv).

The bounds are the errors measured when this test was last updated plus a small margin (or
the issue's target where it is met), so a change that makes predictions drift fails here
(measured then: KOR22 step time 2.9% mean / 5.3% worst, NAR21 5.9%, dense rows with their own
fields 9.45%, MoE rows 11.9%, context-parallel rows 10.3%, FP8/MXFP8/NVFP4 rows 12.8%). The
issue targets: KOR22 <= 3% mean and 6% worst, NAR21 <= 6%, dense rows <= 10%, MoE, CP and low
precision <= 12%.
"""
from pathlib import Path

import pytest

from paraplan.validation.published import read_runs, summarize, validate_rows
from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file

CSV = validation_file(PUBLISHED_RUNS)
DENSE_GPUS = ("a100-sxm-40gb", "a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "v100-sxm-32gb")



@pytest.fixture(scope="module")
def results():
    return validate_rows(read_runs(CSV))


def _mean_abs_pct(rows):
    return float((rows.rel_error.abs() * 100).mean())


def test_korthikanti_step_times_stay_within_bound(results):
    ok = results[(results.status == "ok") & results.id.str.startswith("KOR22-T5")
                 & results.id.str.endswith("iter_time_s")]
    assert len(ok) == 8
    assert _mean_abs_pct(ok) <= 3.0           # the target; measured 2.9%
    assert float((ok.rel_error.abs() * 100).max()) <= 6.0     # measured 5.3%


def test_narayanan_tables_stay_within_bound(results):
    ok = results[(results.status == "ok") & (results.source == "NAR21")]
    assert len(ok) == 22
    # the target; measured 5.9%. Table 1 rows are 1-20% fast (the 2021 code
    # materialised the softmax, which the rows do not state); Table 2's DeepSpeed ZeRO-3 rows
    # gather parameters again for the recompute forward and are 2-12% slow
    assert _mean_abs_pct(ok) <= 6.0


def test_dense_rows_with_their_fields_are_predicted(results):
    dense = results[results.gpu_profile.isin(DENSE_GPUS) & ~_is_vtrain_single_node(results)]
    unpredictable = dense.reason.str.contains("needed field|gpu_profile|metric|convention|preset|ep > 1", regex=True)
    from_preset = dense.assumptions.fillna("").str.contains("preset")
    modelable = dense[~unpredictable & ~from_preset]
    assert (modelable.status == "ok").mean() >= 0.90      # measured 283/306
    assert _mean_abs_pct(modelable[modelable.status == "ok"]) <= 10.0   # measured 8.62%


def _is_vtrain_single_node(results):
    """vTrain's 721 single-node Megatron-DeepSpeed runs (2-8 A100, small GPT models): the
    small-GEMM, kernel-overhead regime, bounded on their own."""
    return results.id.str.startswith("VTRAIN-S-")


def test_vtrain_single_node_rows_are_predicted_within_bound(results):
    vt = results[_is_vtrain_single_node(results)]
    ok = vt[vt.status == "ok"]
    assert len(vt) >= 721 and len(ok) == len(vt)
    # measured 21.07% when these rows arrived (16% too fast on average); the target is 8%
    assert _mean_abs_pct(ok) <= 22.0


def _with_columns(results):
    """The validation results joined with the CSV columns that select the issue's row sets."""
    cols = read_runs(CSV)[["id", "moe_experts", "cp", "dtype_norm"]]
    return results.merge(cols, on="id")


def test_moe_rows_are_predicted_within_bound(results):
    r = _with_columns(results)
    moe = r[(r.id.str.startswith("MBRIDGE") & r.moe_experts.notna())
            | (r.id.str.startswith("DGXC2411") & r.id.str.contains("grok"))]
    ok = moe[moe.status == "ok"]
    assert len(moe) == 53
    assert len(ok) >= 0.8 * len(moe)          # measured 48/53
    assert _mean_abs_pct(ok) <= 12.0          # the target; measured 11.83%


def test_context_parallel_rows_are_predicted_within_bound(results):
    r = _with_columns(results)
    cp = r[r.id.str.startswith("NEMOLS") | (r.cp.fillna(1) > 1)]
    ok = cp[cp.status == "ok"]
    assert len(ok) >= 60                      # measured 69 of 87 (NEMOLS b200 rows do not add up)
    assert _mean_abs_pct(ok) <= 10.0          # measured 9.09%


def test_low_precision_rows_are_predicted_within_bound(results):
    r = _with_columns(results)
    lp = r[r.dtype_norm.isin(["fp8", "mxfp8", "nvfp4"])
           & r.gpu_profile.isin(["h100-sxm-80gb", "b200", "b300", "gb200", "gb300"])]
    ok = lp[lp.status == "ok"]
    assert len(ok) >= 240                     # measured 245
    assert _mean_abs_pct(ok) <= 12.0          # the target; measured 11.96%


def test_every_skipped_row_says_why(results):
    skipped = results[results.status == "skipped"]
    assert (skipped.reason.str.len() > 0).all()
    assert not results[results.status == "ok"].predicted.isna().any()


def test_summary_has_one_row_per_source_plus_all(results):
    summary = summarize(results)
    assert summary.iloc[-1].source == "ALL"
    assert summary.rows_ok.iloc[:-1].sum() == summary.rows_ok.iloc[-1]

