"""A sweep value that cannot run keeps a row with every result column, empty (api.sweep and
serving_api.serve_sweep promise "leaves the numbers empty for that value"): a sweep whose values
all failed had only its error columns (df.tpot_ms a KeyError), and one failed value turned the
others' integer columns float (tp 8.0)."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from paraplan import api
from paraplan import serving_api as sa

TRAIN = dict(model="llama3-70b", cluster="dgx-h100", tp=8, pp=4, global_batch=128)
SERVE = dict(model="llama3.1-70b", system="dgx-h100", tp=8, batch=16)


def test_training_sweep_all_failed_has_result_columns():
    # 63 and 65 GPUs do not divide by tp*pp = 32: both values fail
    df = api.sweep(TRAIN, "gpus", [63, 65], on_error="skip")
    assert len(df) == 2 and (df["error"] != "").all()
    for col in ("tokens_per_s", "step_time_s", "tp", "config", "memory_gib", "mfu_bf16_pct", "fits"):
        assert col in df.columns
        assert df[col].isna().all()
    assert df["gpus"].tolist() == [63, 65]


def test_training_sweep_one_failed_keeps_integer_columns():
    # 64 GPUs run (dp 2); 63 do not divide by 32
    df = api.sweep(TRAIN, "gpus", [64, 63], on_error="skip")
    assert df["error"].iloc[0] == "" and df["error"].iloc[1] != ""
    assert str(df["tp"].dtype) == "Int64" and df["tp"].iloc[0] == 8 and pd.isna(df["tp"].iloc[1])
    assert str(df["dp"].dtype) == "Int64" and df["dp"].iloc[0] == 2
    assert str(df["fits"].dtype) == "boolean"
    assert math.isnan(df["tokens_per_s"].iloc[1])
    # the columns a successful row has, in its order, on both rows
    ok = api.sweep(TRAIN, "gpus", [64])
    assert [c for c in df.columns if c != "error"] == list(ok.columns)


def test_training_sweep_without_failure_keeps_plain_ints():
    df = api.sweep(TRAIN, "gpus", [32, 64], on_error="skip")
    assert df["tp"].dtype == "int64" and df["dp"].tolist() == [1, 2]


def test_serving_sweep_all_failed_has_result_columns():
    # llama3.1-70b has no MTP module to draft with: every value fails
    df = sa.serve_sweep({**SERVE, "speculative_tokens": 3}, "hbm_tb_per_s", [1, 2])
    assert (df["error"] != "").all()
    for col in ("tpot_ms", "ttft_ms", "tokens_per_s_per_gpu", "tp", "batch", "fits", "decode_draft_ms",
                "kv_pool_gib", "draft_acceptance"):
        assert col in df.columns
        assert df[col].isna().all()
    assert df["swept_hbm_tb_per_s"].tolist() == [1, 2]


def test_serving_sweep_one_failed_keeps_integer_columns():
    # batch 16 runs; 1e30 requests per rank do not fit in any KV cache
    df = sa.serve_sweep(SERVE, "batch", [16, 10**30])
    assert df["error"].iloc[0] == "" and df["error"].iloc[1] != ""
    assert str(df["tp"].dtype) == "Int64" and df["tp"].iloc[0] == 8 and pd.isna(df["tp"].iloc[1])
    assert str(df["batch"].dtype) == "Int64" and df["batch"].iloc[0] == 16
    assert math.isnan(df["tpot_ms"].iloc[1])
    ok = sa.serve_sweep(SERVE, "batch", [16])
    assert list(df.columns) == list(ok.columns)


@pytest.mark.parametrize("base", [dict(SERVE), {**SERVE, "model": "deepseek-v3", "system": "dgx-b200", "speculative_tokens": 1}])
def test_serving_row_columns_are_serve_simulates(base):
    """The column list an all-failed sweep uses is what serve_simulate builds (drift guard)."""
    args = dict(base)
    row = sa.serve_simulate(args.pop("model"), args.pop("system"), **args)
    assert list(row.columns) == sa.serving_row_columns(bool(base.get("speculative_tokens")))


ODD_SPLITS = [2.5, 1e30, 10**40, math.inf, "x"]


@pytest.mark.parametrize("model", ["mixtral-8x7b", "llama3.1-8b"])
@pytest.mark.parametrize("field", ["moe_ep", "moe_tp"])
def test_serving_sweep_over_an_expert_split_keeps_the_swept_values_as_given(model, field):
    # the expert-split columns are typed Int64; the swept column swept_moe_ep ends in moe_ep and
    # was typed with them, so 2.5 / 1e30 / inf raised (TypeError, OverflowError) instead of
    # keeping the row with its reason, and 'x' came back as <NA>
    df = sa.serve_sweep(dict(model=model, system="dgx-h100", tp=2, batch=16), field, [2, *ODD_SPLITS])
    assert len(df) == 1 + len(ODD_SPLITS)
    swept = df[f"swept_{field}"].tolist()
    assert swept[0] == 2 and swept[1:3] == [2.5, 1e30] and swept[3] == 10**40 and swept[4] == math.inf
    assert swept[5] == "x"
    assert (df["error"].iloc[1:] != "").all()
    assert str(df[field].dtype) == "Int64" and df[field].iloc[1:].isna().all()
    if model == "mixtral-8x7b":                   # a split tp 2 can run; a dense model has none
        assert df["error"].iloc[0] == "" and df[field].iloc[0] == 2
    else:
        assert "dense" in df["error"].iloc[0]


def test_training_sweep_keeps_the_swept_values_as_given():
    df = api.sweep(TRAIN, "tp", [8, *ODD_SPLITS[:4]], on_error="skip")
    assert df["sweep_value"].tolist()[:3] == [8, 2.5, 1e30] and df["sweep_value"].iloc[3] == 10**40
    assert df["sweep_value"].iloc[4] == math.inf and (df["error"].iloc[1:] != "").all()


def test_a_mixed_swept_column_keeps_its_values_as_given_and_a_row_each():
    """A swept column mixing NaN, text and integers is not forced to Int64 (pandas raised
    "invalid literal for int() with base 10: 'nan'"): a row per value, each failure in ``error``
    (hbm_gib and batch are refused unless a finite number, a whole number >= 1 for batch)."""
    df = sa.serve_sweep(dict(model="llama3.1-8b", system="dgx-h100", tp=1, batch=8), "hbm_gib",
                        [float("nan"), "80", 40])
    assert len(df) == 3
    got = df["swept_hbm_gib"].tolist()
    assert math.isnan(got[0]) and got[1:] == ["80", 40]
    assert df["error"].iloc[0].startswith("hbm_gib: ") and df["error"].iloc[1].startswith("hbm_gib: ")
    assert df["error"].iloc[2] == "" and df["tpot_ms"].iloc[2] > 0 and math.isnan(df["tpot_ms"].iloc[0])
    df = sa.serve_sweep(dict(model="llama3.1-8b", system="dgx-h100", tp=1), "batch", [float("nan"), "3", 3])
    assert [e.split(":")[0] for e in df["error"]] == ["batch", "batch", ""]
    assert df["swept_batch"].tolist()[1:] == ["3", 3]
    # the integer columns with a hole are still nullable Int64 (their values are all integers)
    assert str(df["tp"].dtype) == "Int64" and df["tp"].iloc[2] == 1
