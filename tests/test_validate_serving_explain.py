"""``paraplan validate serving --explain ID``: one measured deployment as the serving simulator
reads it and the parts of its TTFT and TPOT; predicting the row alone gives the numbers the
file's report gives it."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from paraplan.cli import main
from paraplan.validation.datasets import SERVING_RUNS, validation_file

PREDICTED = ["minimaxm2_5_b300_vllm_fp8_agg_8192x1024_c128_cfg733",       # vLLM, aggregated
             "qwen3_5_b300_sglang_fp4_agg_8192x1024_c32_cfg736",          # SGLang, aggregated
             "dsr1_b200_trtllm_fp4_agg_1024x1024_c32_cfg91",              # TensorRT-LLM, aggregated
             "dsr1_gb200_sglang_fp4_disagg_1024x1024_c4_cfg486",          # SGLang, disaggregated
             "kimik2_5_gb200_trtllm_fp4_disagg_8192x1024_c15_cfg763"]     # TensorRT-LLM, disaggregated
SKIPPED = "dsr1_gb200_sglang_fp8_disagg_1024x1024_c4096_cfg236"


@pytest.fixture(scope="module")
def rows_csv(tmp_path_factory):
    df = pd.read_csv(validation_file(SERVING_RUNS), dtype=str, keep_default_na=False)
    picked = df[df["id"].isin(PREDICTED + [SKIPPED])]
    assert len(picked) == len(PREDICTED) + 1
    path = tmp_path_factory.mktemp("serving_explain") / "rows.csv"
    picked.to_csv(path, index=False)
    return path


def _run(*args):
    return CliRunner().invoke(main, ["validate", "serving", *map(str, args)])


@pytest.fixture(scope="module")
def reported(rows_csv) -> dict:
    res = _run(rows_csv, "--json")
    assert res.exit_code == 0, res.output
    return {(r["id"], r["metric"]): r for r in json.loads(res.stdout)}


@pytest.mark.parametrize("row_id", PREDICTED)
def test_a_row_explained_alone_has_the_prediction_of_the_files_report(rows_csv, reported, row_id):
    res = _run(rows_csv, "--explain", row_id, "--json")
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    for r in shown["metrics"]:
        listed = reported[(row_id, r["metric"])]
        assert r["status"] == listed["status"] == "ok"
        assert r["predicted"] == pytest.approx(listed["predicted"], rel=1e-12)
        assert r["measured"] == listed["measured"]
    by_metric = {r["metric"]: r["predicted"] for r in shown["metrics"]}
    # the parts are the evaluation's own: its TTFT and TPOT are the predicted ones, in seconds
    assert 1e3 * shown["parts"]["ttft_s"] == pytest.approx(by_metric["ttft_ms"], rel=1e-12)
    assert 1e3 * shown["parts"]["tpot_s"] == pytest.approx(by_metric["tpot_ms"], rel=1e-12)
    mode = shown["reading"]["mode"]
    assert mode == ("agg" if "_agg_" in row_id else "disagg")
    # the layout read is the row's: its request shape, and a disaggregated row's worker counts
    isl, osl = (int(x) for x in row_id.split(f"_{mode}_")[1].split("_")[0].split("x"))
    assert (shown["layout"]["isl"], shown["layout"]["osl"]) == (isl, osl)


def test_the_table_shows_measured_predicted_and_the_decode_step_parts(rows_csv, reported):
    row_id = PREDICTED[0]
    res = _run(rows_csv, "--explain", row_id)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    ttft = reported[(row_id, "ttft_ms")]
    assert lines[0].split() == ["row", row_id]
    assert lines[1].startswith("ttft     measured") and f"({100 * ttft['rel_error']:+.1f}%)" in lines[1]
    assert lines[3].startswith("read as  agg: minimax-m2.5 on dgx-b300")
    assert any(line.split()[:1] == ["decode_step_ms"] for line in lines)


def test_a_skipped_row_says_why(rows_csv, reported):
    res = _run(rows_csv, "--explain", SKIPPED)
    assert res.exit_code == 0, res.output
    reason = reported[(SKIPPED, "ttft_ms")]["reason"]
    assert reason and res.stdout == f"row {SKIPPED}: skipped: {reason}\n"


@pytest.mark.parametrize("args, field", [
    (["--explain", "dsr1_b200_trtllm_fp4_agg_1024x1024_c32_cfg9"], "--explain"),
    (["--explain", ""], "--explain"),
    (["--explain", PREDICTED[0], "--backend", "vllm"], "--backend"),
    (["--explain", PREDICTED[0], "--list-skipped"], "--list-skipped"),
])
def test_bad_explain_input_is_one_line(rows_csv, args, field):
    res = _run(rows_csv, *args)
    assert res.exit_code == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), res.stderr
