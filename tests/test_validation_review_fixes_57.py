"""Review 57 of the validation CLI: one damaged row (an unknown weight format, a cell far beyond
what the GPU can do, an MFU written as a fraction, text in a time column) is skipped with a reason
naming its column, not scored or allowed to stop the run. The rows are copies of bundled rows,
written to ``tmp_path``."""
from __future__ import annotations

from functools import lru_cache

import pandas as pd
import pytest

from paraplan.validation.datasets import BUNDLED_DIR, SERVING_RUNS
from paraplan.validation.serving import read_rows, validate_rows

KNOWN = "use one of bf16, fp16, fp8, fp8_block, nvfp4, mxfp4, int4_wo"


@lru_cache(maxsize=None)
def _serving_rows() -> pd.DataFrame:
    return pd.read_csv(BUNDLED_DIR / SERVING_RUNS, dtype=str, keep_default_na=False)


def _serving_row(where, **changes) -> dict:
    df = _serving_rows()
    row = df[where(df)].iloc[0].to_dict()
    row.update(changes)
    return row


def _first_vllm_agg(**changes) -> dict:
    return _serving_row(lambda df: (df.backend == "vllm") & (df["mode"] == "agg"), **changes)


def _kimi_gb200_disagg(**changes) -> dict:
    return _serving_row(lambda df: (df["mode"] == "disagg") & (df.system == "gb200")
                        & df.model_path.str.contains("Kimi-K2.5"), **changes)


def _serving_results(tmp_path, *rows) -> pd.DataFrame:
    path = tmp_path / "runs.csv"
    pd.DataFrame(list(rows)).to_csv(path, index=False)
    return validate_rows(read_rows(path))


def _reason_of(results, rid) -> set:
    return set(results[results.id == rid].reason)


@pytest.mark.parametrize("make", [_first_vllm_agg, _kimi_gb200_disagg])
def test_an_unknown_expert_format_skips_that_row_naming_the_column_not_the_run(tmp_path, make):
    # the expert format's scale block was read unguarded: "error: weight format: unknown weight
    # format 'w4afp8'", exit 2, no row scored
    good = make()
    bad = make(id="bad", moe_quant_mode="w4afp8")
    res = _serving_results(tmp_path, good, bad)
    assert set(res[res.id == good["id"]].status) == {"ok"}
    assert set(res[res.id == "bad"].status) == {"skipped"}
    assert _reason_of(res, "bad") == {f"moe_quant_mode: unknown weight format 'w4afp8' ({KNOWN})"}


def test_an_unknown_dense_format_and_an_unknown_precision_name_their_column(tmp_path):
    good = _first_vllm_agg()
    dense = _first_vllm_agg(id="dense", gemm_quant_mode="bogus")
    # both quant columns empty: the row's precision is the format of both
    prec = _first_vllm_agg(id="prec", precision="int8", gemm_quant_mode="", moe_quant_mode="")
    res = _serving_results(tmp_path, good, dense, prec)
    assert set(res[res.id == good["id"]].status) == {"ok"}
    assert _reason_of(res, "dense") == {f"gemm_quant_mode: unknown weight format 'bogus' ({KNOWN})"}
    assert _reason_of(res, "prec") == {f"precision: unknown weight format 'int8' (gemm_quant_mode empty; {KNOWN})"}
