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


@lru_cache(maxsize=None)
def _published_rows() -> tuple:
    from paraplan.validation.datasets import PUBLISHED_RUNS
    from paraplan.validation.published import read_runs
    return tuple(read_runs(BUNDLED_DIR / PUBLISHED_RUNS).to_dict("records"))


def _published_row(rid: str, **changes) -> dict:
    (row,) = [r for r in _published_rows() if r["id"] == rid]
    return {**row, **changes}


def _skip_reasons(*rows) -> dict:
    from paraplan.validation.predict import prepare
    reasons = {}
    prepare(list(rows), on_skip=reasons.__setitem__)
    return reasons


LLAMA405_TOKENS = "MBRIDGE-26.06-LLAMA3.1_405B-DGX-H100-1024g-FP8-tp8pp8cp2epvp8-gbs1536-mbs1:tokens_per_s_per_gpu"


def test_a_token_rate_beyond_the_gpus_peak_is_skipped_as_a_damaged_cell():
    # Llama 3.1 405B: 126 layers of 2 x 16384^2 + 2 x 16384 x 1024 (attention) + 3 x 16384 x 53248
    # (SwiGLU) = 3.1877e9, + the 128256 x 16384 output layer = N 403.75e9 matmul parameters; at
    # 6 N a token, the H100's dense FP8 peak (1978.9 TFLOP/s, half the datasheet's 3957.8 sparse)
    # allows 1978.9e12 / (6 x 403.75e9) = 816.9 tokens/s per GPU
    rows = [_published_row(LLAMA405_TOKENS, id=f"r{v}", measured_value=v) for v in (326.0, 810.0, 825.0, 333_824.0)]
    reasons = _skip_reasons(*rows)
    assert set(reasons) == {2, 3}        # the measured 326 and 810 are kept
    for i, v in ((2, 825), (3, 333_824)):
        assert reasons[i].startswith(f"tokens_per_s_per_gpu {v} means at least ")
        assert reasons[i].endswith("above h100-sxm-80gb's fp8 peak of 1978.9 TFLOP/s, not a measurement (a damaged cell)")
    # the reviewer's cell (326 x 1,024 GPUs): 6 x 403.75e9 x 333,824 = 808,690 TFLOP/s, 409x the peak
    assert "means at least 808,6" in reasons[3]


def test_a_step_time_too_short_for_the_gpus_peak_is_skipped_as_a_damaged_cell():
    # GPT-22B (48 layers of 12 x 6144^2 = 21.74e9, + at most a 51200 x 6144 output layer, 0.31e9)
    # trains 4 x 2048 tokens a step on 8 A100s (fp16 dense peak 312 TFLOP/s): a step of at least
    # 6 x 21.74e9 x 1024 / 312e12 = 0.428 s; Korthikanti Table 5 measured 1.42 s
    rid = "KOR22-T5-22B-full:iter_time_s"
    rows = [_published_row(rid, id=f"r{v}", measured_value=v) for v in (1.42, 0.45, 0.41, 1.42e-3)]
    reasons = _skip_reasons(*rows)
    assert set(reasons) == {2, 3}
    assert reasons[2].startswith("iter_time_s 0.41 means at least ")
    assert reasons[2].endswith("above a100-sxm-80gb's fp16 peak of 312 TFLOP/s, not a measurement (a damaged cell)")


def test_no_bundled_rate_or_time_row_is_near_the_peak_cap():
    # the cap's lower bound of model FLOPs stays well under every GPU's peak on the measured rows
    from paraplan.validation.predict import RATE_AND_TIME_METRICS, min_model_flops_per_gpu_s
    from paraplan.validation.published import Skip, row_inputs, run_conventions
    from hardware_specs.errors import as_float
    from paraplan.validation.csv_structure import id_text
    rows = _published_rows()
    conventions = run_conventions(list(rows))
    worst = 0.0
    for r in rows:
        if r.get("measured_metric") not in RATE_AND_TIME_METRICS:
            continue
        try:
            inp = row_inputs(r, conventions.get(id_text(r.get("run_id")), frozenset()))
        except Skip:
            continue
        flops, _ = min_model_flops_per_gpu_s(inp, as_float(r["measured_value"]))
        worst = max(worst, flops / inp.cluster.gpu.peak_flops(inp.config.dtype))
    assert 0.3 < worst < 0.7


def test_an_mfu_written_as_a_fraction_is_skipped_not_scored_as_a_huge_error():
    # the column is in percent (data README: "mfu (percent of the dtype's dense peak)"); 0.415
    # for 41.5 percent was scored as a +10,315% error. The bundled MFU / HFU rows run 14.4 to 64.2
    mfu = _published_row("KOR22-T5-22B-full:iter_time_s", id="m", measured_metric="mfu",
                         flops_convention="korthikanti_model", measured_value=0.415)
    hfu = dict(mfu, id="h", measured_metric="hfu", flops_convention="korthikanti_hw", measured_value=0.5)
    fine = dict(mfu, id="f", measured_value=41.5)
    assert _skip_reasons(mfu, hfu, fine) == {
        0: "mfu 0.415 looks like a fraction; the column is in percent (below 1 percent, not a measurement)",
        1: "hfu 0.5 looks like a fraction; the column is in percent (below 1 percent, not a measurement)"}
    measured = [float(r["measured_value"]) for r in _published_rows() if r["measured_metric"] in ("mfu", "hfu")]
    assert min(measured) > 1.0


def test_an_mfu_row_with_an_empty_flops_convention_says_the_cell_is_empty():
    # it said "FLOP convention 'none' cannot be converted", a value the cell never held
    from paraplan.validation.published import Skip, row_inputs
    row = _published_row("KOR22-T5-22B-full:iter_time_s", measured_metric="mfu", measured_value=41.5)
    for empty in ("", "  "):
        with pytest.raises(Skip, match="^flops_convention empty: mfu cannot be converted without the FLOP "
                                       "count it was computed with \\(one of megatron_hw_eq3, "):
            row_inputs(dict(row, flops_convention=empty))
    with pytest.raises(Skip, match="^FLOP convention 'none' cannot be converted$"):
        row_inputs(dict(row, flops_convention="none"))


def test_a_serving_time_that_is_text_says_it_is_not_a_number(tmp_path):
    # it said "measured tpot_ms missing or <= 0" of a cell holding 'abc'
    good = _first_vllm_agg()
    text = _first_vllm_agg(id="text", silicon_tpot_ms="abc")
    empty = _first_vllm_agg(id="empty", silicon_ttft_ms="")
    res = _serving_results(tmp_path, good, text, empty)
    by = {(r.id, r.metric): (r.status, r.reason) for r in res.itertuples()}
    assert by[("text", "tpot_ms")] == ("skipped", "silicon_tpot_ms 'abc' is not a number")
    assert by[("text", "ttft_ms")][0] == "ok"
    assert by[("empty", "ttft_ms")] == ("skipped", "measured ttft_ms missing or <= 0")
