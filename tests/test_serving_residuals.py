"""The residual slices of ``paraplan.validation.serving_residuals`` on rows whose errors are known
by construction."""
import numpy as np
import pandas as pd
import pytest

from paraplan.validation.serving_residuals import (decode_slopes, deployment_offsets, offset_share, osl_pairs,
                                                   report, residuals, slice_errors, slope_ratio_by)


def _layout(tp, batches, measured, predicted, backend="vllm"):
    n = len(batches)
    df = pd.DataFrame({"id": [f"{backend}-tp{tp}-c{b}" for b in batches], "backend": backend,
                       "backend_version": "0.11", "model_path": "meta-llama/Llama-3.1-70B",
                       "system": "h100_sxm", "precision": "fp8", "mode": "agg", "tp_size": float(tp),
                       "attention_dp_size": 1.0, "moe_tp_size": np.nan, "moe_ep_size": np.nan,
                       "isl": 1024, "osl": 1024, "batch_size": np.asarray(batches, dtype=float),
                       "silicon_ttft_ms": 100.0, "silicon_tpot_ms": measured})
    pred = pd.DataFrame({"pred_ttft_ms": np.full(n, 120.0), "pred_tpot_ms": predicted})
    return df, pred


def _rows():
    b = np.array([1.0, 8.0, 32.0, 64.0])
    # tp 1: measured 10 + 0.2 b ms, predicted 10 + 0.1 b (half the per-request cost);
    # tp 8: measured 8 + 0.3 b, predicted 10 + 0.1 b (a third of it, and 25% more fixed cost)
    d1, p1 = _layout(1, b, 10 + 0.2 * b, 10 + 0.1 * b)
    d8, p8 = _layout(8, b, 8 + 0.3 * b, 10 + 0.1 * b)
    return pd.concat([d1, d8], ignore_index=True), pd.concat([p1, p8], ignore_index=True)


def test_residuals_are_signed_relative_errors_positive_when_predicted_slow():
    df, pred = _rows()
    res = residuals(df, pred)
    assert res.ttft_err.to_numpy() == pytest.approx(np.full(8, 0.2))     # 120 vs 100 ms
    # tp 1 at concurrency 64: predicted 16.4, measured 22.8 ms
    row = res[(res.tp_size == 1) & (res.batch_size == 64)].iloc[0]
    assert row.tpot_err == pytest.approx((16.4 - 22.8) / 22.8)


def test_residuals_drop_rows_without_a_prediction():
    df, pred = _rows()
    pred.loc[0, "pred_tpot_ms"] = np.nan
    assert len(residuals(df, pred)) == 7


def test_slice_errors_report_mean_absolute_and_median_signed_percent():
    df, pred = _rows()
    table = slice_errors(residuals(df, pred), ["tp_size"])
    assert table.loc[1.0, "rows"] == 4
    assert table.loc[1.0, "ttft_mean_abs_pct"] == pytest.approx(20.0)
    # tp 1 TPOT errors at 1, 8, 32, 64: (10.1-10.2)/10.2, (10.8-11.6)/11.6, (13.2-16.4)/16.4, (16.4-22.8)/22.8
    errs = np.array([-0.1 / 10.2, -0.8 / 11.6, -3.2 / 16.4, -6.4 / 22.8])
    assert table.loc[1.0, "tpot_mean_abs_pct"] == pytest.approx(round(100 * np.abs(errs).mean(), 1))
    assert table.loc[1.0, "tpot_median_pct"] == pytest.approx(round(100 * np.median(errs), 1))


def test_decode_slope_ratio_recovers_the_missing_per_request_cost_per_tp():
    df, pred = _rows()
    slopes = decode_slopes(residuals(df, pred))
    by_tp = slope_ratio_by(slopes)
    assert by_tp.loc[1.0, "slope_ratio_median"] == pytest.approx(2.0)      # 0.2 / 0.1
    assert by_tp.loc[8.0, "slope_ratio_median"] == pytest.approx(3.0)      # 0.3 / 0.1
    assert by_tp.loc[1.0, "intercept_ratio_median"] == pytest.approx(1.0)
    assert by_tp.loc[8.0, "intercept_ratio_median"] == pytest.approx(0.8)  # 8 / 10


def test_a_layout_needs_three_concurrencies_for_a_slope():
    df, pred = _layout(2, [4.0, 16.0], [10.0, 12.0], [10.0, 11.0])
    assert decode_slopes(residuals(df, pred)).empty


def test_report_names_dense_and_moe_from_the_model_preset():
    df, pred = _rows()
    text = report(residuals(df, pred))
    assert "dense" in text and "slope_ratio_median" in text


def test_a_missing_or_damaged_csv_is_one_line_and_exit_2(tmp_path, capsys):
    from paraplan.validation.serving_residuals import main
    damaged = tmp_path / "damaged.csv"
    damaged.write_bytes(b"\xae\x00\xff" * 50)
    for path, field in ((tmp_path / "absent.csv", "error: path:"), (damaged, "error: path: malformed CSV damaged.csv")):
        assert main([str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(field)


def test_osl_pairs_divide_the_shorter_runs_ttft_by_the_longer_runs_at_equal_layout_and_load():
    # one layout at 4 clients measured at osl 1024 (300 ms) and 8192 (100 ms), predicted 150 ms
    # both; the same at 8 clients (200 vs 200 ms); a third load with one osl only, and one pair
    # beyond the pair concurrency limit: neither forms a pair
    rows = [(4, 1024, 300.0), (4, 8192, 100.0), (8, 1024, 200.0), (8, 8192, 200.0), (16, 1024, 90.0),
            (128, 1024, 500.0), (128, 8192, 100.0)]
    df = pd.DataFrame({"id": [f"r{i}" for i in range(len(rows))], "backend": "trtllm", "backend_version": "1.0",
                       "model_path": "meta-llama/Llama-3.1-70B", "system": "b200_sxm", "precision": "fp8",
                       "mode": "agg", "tp_size": 1.0, "attention_dp_size": 1.0, "moe_tp_size": np.nan,
                       "moe_ep_size": np.nan, "isl": 1024, "osl": [r[1] for r in rows],
                       "batch_size": [float(r[0]) for r in rows], "silicon_ttft_ms": [r[2] for r in rows],
                       "silicon_tpot_ms": 10.0})
    pred = pd.DataFrame({"pred_ttft_ms": 150.0, "pred_tpot_ms": np.full(len(rows), 10.0)})
    pairs = osl_pairs(residuals(df, pred)).set_index("batch_size")
    assert sorted(pairs.index) == [4.0, 8.0]
    assert pairs.loc[4.0, "ttft_ratio_measured"] == pytest.approx(3.0)
    assert pairs.loc[8.0, "ttft_ratio_measured"] == pytest.approx(1.0)
    assert pairs.ttft_ratio_predicted.to_numpy() == pytest.approx([1.0, 1.0])
    assert (pairs.osl_short == 1024).all() and (pairs.osl_long == 8192).all()
    assert "TTFT at the shorter osl" in report(residuals(df, pred))


def _sweeps():
    """Deployment A (vLLM, 3 loads) predicted at 0.5, 0.5, 2 x its measured TTFT; B (TensorRT-LLM,
    3 loads) at 2, 2, 4 x; C is B's layout at another osl, measured once, at 8 x."""
    rows = [("vllm", 1024, 4, 0.5), ("vllm", 1024, 16, 0.5), ("vllm", 1024, 64, 2.0),
            ("trtllm", 1024, 4, 2.0), ("trtllm", 1024, 8, 2.0), ("trtllm", 1024, 32, 4.0),
            ("trtllm", 8192, 4, 8.0)]
    df = pd.DataFrame({"id": [f"r{i}" for i in range(len(rows))], "backend": [r[0] for r in rows],
                       "backend_version": "1.0", "model_path": "meta-llama/Llama-3.1-70B", "system": "b200_sxm",
                       "precision": "fp8", "mode": "agg", "tp_size": 2.0, "attention_dp_size": 1.0,
                       "moe_tp_size": np.nan, "moe_ep_size": np.nan, "isl": 1024, "osl": [r[1] for r in rows],
                       "batch_size": [float(r[2]) for r in rows], "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0})
    pred = pd.DataFrame({"pred_ttft_ms": [100.0 * r[3] for r in rows], "pred_tpot_ms": np.full(len(rows), 10.0)})
    return residuals(df, pred)


def test_deployment_offsets_are_the_median_log_error_of_each_sweep_most_under_predicted_first():
    offsets = deployment_offsets(_sweeps())
    ln2 = np.log(2.0)
    # C (one row, another osl) is its own deployment and too short a sweep: had it joined B,
    # B's median would be 1.5 ln 2
    assert list(offsets.backend) == ["vllm", "trtllm"]
    assert offsets.offset.to_numpy() == pytest.approx([-ln2, ln2])
    assert offsets.scatter.to_numpy() == pytest.approx([2 * ln2 / 3, ln2 / 3])    # |ln 2 - (-ln 2)| / 3; ln 2 / 3
    assert offsets.rows.tolist() == [3, 3]
    assert offsets.batch_min.tolist() == [4.0, 4.0] and offsets.batch_max.tolist() == [64.0, 32.0]


def test_offset_share_is_the_error_one_constant_per_deployment_removes():
    share = offset_share(_sweeps())
    ln2 = np.log(2.0)
    vllm, trt, every = share.loc[("vllm", "agg")], share.loc[("trtllm", "agg")], share.loc[("all", "")]
    assert vllm.mean_abs_log_err == pytest.approx(round(ln2, 3))
    assert vllm.within_deployment == pytest.approx(round(2 * ln2 / 3, 3))
    assert vllm.offset_share == pytest.approx(round(1 - round(2 * ln2 / 3, 3) / round(ln2, 3), 3))
    assert (trt.rows, trt.sweep_rows, trt.deployments) == (4, 3, 1)
    assert trt.mean_abs_log_err == pytest.approx(round(4 * ln2 / 3, 3))          # ln 2, ln 2, 2 ln 2
    assert trt.within_deployment == pytest.approx(round(ln2 / 3, 3))
    assert (every.rows, every.sweep_rows, every.deployments) == (7, 6, 2)
    assert every.mean_abs_log_err == pytest.approx(round(7 * ln2 / 6, 3))
    assert every.within_deployment == pytest.approx(round(ln2 / 2, 3))          # (2 ln 2 + ln 2) / 6
    assert every.offset_share == pytest.approx(round(1 - round(ln2 / 2, 3) / round(7 * ln2 / 6, 3), 3), abs=1e-3)
    assert "per-deployment offsets" in report(_sweeps())
