"""Where the serving predictions miss: the residuals of ``validate serving`` sliced by what a
deployment is made of, rerunnably.

``python -m paraplan.validation.serving_residuals [PATH]`` predicts every row of the serving
runs (the committed efficiency; ``paraplan.validation.serving.predict``) and prints, for TTFT
and TPOT, the mean |error| and the median signed error (+ = predicted slow) per backend and
mode, then per tensor-parallel degree, concurrency band, request shape (isl x osl), dense vs
MoE (from the model preset, not its name), precision and system. Last, the marginal cost of a
request in a decode step: within each layout measured at three or more concurrencies
(<= ``MAX_BATCH``, aggregated), the least-squares slope of TPOT against concurrency, measured
and predicted; their ratio (measured / predicted) per tensor-parallel degree says whether the
per-token cost the model is missing grows with tp, and the intercept ratio whether the fixed
per-step cost is right. Then the output-length pairs: aggregated runs that differ only in osl
(same layout, isl and concurrency <= ``MAX_PAIR_BATCH``), the TTFT at the shorter osl over that at
the longer, measured and predicted, per backend and model; the prompt and the load are the same,
so a measured ratio far from 1 is time in the TTFT that no step of the shorter run explains.
Then the per-deployment offsets: a deployment is every column the prediction reads except the
load (``OFFSET_KEYS``), and its offset the median ln(predicted / measured) over the loads it was
measured at (deployments of ``MIN_SWEEP_ROWS`` rows or more); per backend and mode, the mean |ln error| before and after removing each
deployment's offset (how much of the error one constant per deployment carries: what a missing
engine behaviour common to a deployment's sweep would look like), and the deployments at both
ends of the TTFT ranking, with what they share. Last, the repeat-noise floor (``paraplan.validation.serving_repeats``): rows that describe one
deployment (same release, then any release) but hold different measurements, how far they
disagree, the least mean |error| one value per deployment can reach on them, the model's error
on the same rows, and that floor's share of each backend and mode's error over all its rows.

Nothing here changes a prediction; docs/accuracy_serving.md quotes its tables.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from hardware_specs.errors import InputError
from paraplan.validation.serving_repeats import DEPLOYMENT_KEYS

#: the largest concurrency used in the slope fits: beyond it the KV pool and CUDA-graph limits
#: bend the TPOT curve
MAX_BATCH = 128
#: concurrency bands of the slices
CONCURRENCY_BANDS = (0, 4, 16, 64, 256, np.inf)
#: the largest concurrency of the output-length pairs (beyond it the KV pool decides)
MAX_PAIR_BATCH = 64
#: what identifies one layout measured at several concurrencies
LAYOUT_KEYS = ("backend", "backend_version", "model_path", "system", "precision", "tp_size",
               "attention_dp_size", "moe_tp_size", "moe_ep_size", "isl", "osl")


def residuals(df: pd.DataFrame, pred: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``pred_ttft_ms``, ``pred_tpot_ms`` and the signed relative errors
    ``ttft_err``, ``tpot_err`` ((predicted - measured) / measured), rows with both predicted."""
    out = df.copy()
    out["pred_ttft_ms"] = pred["pred_ttft_ms"].to_numpy(dtype=float)
    out["pred_tpot_ms"] = pred["pred_tpot_ms"].to_numpy(dtype=float)
    for metric in ("ttft", "tpot"):
        meas = out[f"silicon_{metric}_ms"].to_numpy(dtype=float)
        out[f"{metric}_err"] = (out[f"pred_{metric}_ms"].to_numpy(dtype=float) - meas) / meas
    ok = np.isfinite(out.ttft_err) & np.isfinite(out.tpot_err)
    return out[ok]


def slice_errors(res: pd.DataFrame, keys) -> pd.DataFrame:
    """Per group of ``keys``: rows, mean |error| and median signed error of TTFT and TPOT (%)."""
    g = res.groupby(list(keys), dropna=False, observed=True)
    out = pd.DataFrame({
        "rows": g.size(),
        "ttft_mean_abs_pct": g.ttft_err.apply(lambda e: 100 * e.abs().mean()),
        "ttft_median_pct": g.ttft_err.median() * 100,
        "tpot_mean_abs_pct": g.tpot_err.apply(lambda e: 100 * e.abs().mean()),
        "tpot_median_pct": g.tpot_err.median() * 100,
    })
    return out.round(1)


def decode_slopes(res: pd.DataFrame, max_batch: float = MAX_BATCH) -> pd.DataFrame:
    """One row per aggregated layout measured at >= 3 concurrencies <= ``max_batch``: the
    least-squares TPOT = intercept + slope x concurrency of the measured and the predicted TPOT
    (ms, ms per request), and their ratios (measured / predicted)."""
    agg = res[(res["mode"] == "agg") & (res.batch_size <= max_batch)]
    records = []
    for key, g in agg.groupby(list(LAYOUT_KEYS), dropna=False):
        if g.batch_size.nunique() < 3:
            continue
        b = g.batch_size.to_numpy(dtype=float)
        slope_m, icpt_m = np.polyfit(b, g.silicon_tpot_ms.to_numpy(dtype=float), 1)
        slope_p, icpt_p = np.polyfit(b, g.pred_tpot_ms.to_numpy(dtype=float), 1)
        records.append({**dict(zip(LAYOUT_KEYS, key)), "points": len(g),
                        "slope_measured_ms": slope_m, "slope_predicted_ms": slope_p,
                        "intercept_measured_ms": icpt_m, "intercept_predicted_ms": icpt_p,
                        "slope_ratio": slope_m / slope_p if slope_p > 0 else np.nan,
                        "intercept_ratio": icpt_m / icpt_p if icpt_p > 0 else np.nan})
    return pd.DataFrame.from_records(records)


def slope_ratio_by(slopes: pd.DataFrame, keys=("tp_size",)) -> pd.DataFrame:
    """Median slope and intercept ratios per group of ``keys`` (layouts counted once each)."""
    g = slopes.groupby(list(keys), dropna=False)
    return pd.DataFrame({"layouts": g.size(), "slope_ratio_median": g.slope_ratio.median(),
                         "intercept_ratio_median": g.intercept_ratio.median()}).round(2)


def osl_pairs(res: pd.DataFrame, max_batch: float = MAX_PAIR_BATCH) -> pd.DataFrame:
    """One row per aggregated layout and concurrency (<= ``max_batch``) measured at two or more
    output lengths: the TTFT at the shortest osl over the TTFT at the longest, measured
    (``ttft_ratio_measured``) and predicted (``ttft_ratio_predicted``), and the two osl."""
    agg = res[(res["mode"] == "agg") & (res.batch_size <= max_batch)]
    keys = [k for k in LAYOUT_KEYS if k != "osl"] + ["batch_size"]
    records = []
    for key, g in agg.groupby(keys, dropna=False):
        if g.osl.nunique() < 2:
            continue
        short, long_ = g[g.osl == g.osl.min()], g[g.osl == g.osl.max()]
        records.append({**dict(zip(keys, key)), "osl_short": float(g.osl.min()), "osl_long": float(g.osl.max()),
                        "ttft_ratio_measured": short.silicon_ttft_ms.median() / long_.silicon_ttft_ms.median(),
                        "ttft_ratio_predicted": short.pred_ttft_ms.median() / long_.pred_ttft_ms.median()})
    return pd.DataFrame.from_records(records)


#: one deployment measured at several loads: every column the prediction reads except the load
#: (``batch_size``; a disaggregated row's prefill and decode batch sizes), with the release
OFFSET_KEYS = tuple(k for k in DEPLOYMENT_KEYS if k not in ("batch_size", "prefill_batch_size", "decode_batch_size")) \
    + ("backend_version",)
#: deployments listed at each end of the offset ranking in the report
OFFSET_LIST = 12
#: a deployment's offset is read only from a sweep: at least this many rows (loads); with one
#: row the offset is the row's own error and nothing is left "within" it
MIN_SWEEP_ROWS = 3


def _log_errors(res: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``res`` with ``log_err`` = ln(predicted / measured) of ``metric`` (ttft | tpot), ``dep`` (an
    integer per deployment of ``OFFSET_KEYS``; keys absent from ``res`` count as equal), ``offset``
    (the median ``log_err`` of the row's deployment) and ``sweep_rows`` (its rows)."""
    df = res.copy()
    for k in OFFSET_KEYS:
        if k not in df.columns:
            df[k] = np.nan
    df["log_err"] = np.log1p(df[f"{metric}_err"].to_numpy(dtype=float))
    df["dep"] = df.groupby(list(OFFSET_KEYS), dropna=False, sort=False).ngroup()
    df["offset"] = df.groupby("dep").log_err.transform("median")
    df["sweep_rows"] = df.groupby("dep").log_err.transform("size")
    return df


def deployment_offsets(res: pd.DataFrame, metric: str = "ttft", min_rows: int = MIN_SWEEP_ROWS) -> pd.DataFrame:
    """One row per deployment (``OFFSET_KEYS``) with at least ``min_rows`` rows: its rows, the
    lowest and highest concurrency (``batch_size``), ``offset`` = the median of ln(predicted /
    measured) of ``metric`` over its rows (negative: predicted fast) and ``scatter`` = the mean
    |ln error - offset| left around it; most under-predicted first."""
    df = _log_errors(res, metric)
    df = df[df.sweep_rows >= min_rows]
    g = df.groupby("dep")
    out = g[list(OFFSET_KEYS)].first()
    out["rows"] = g.size()
    out["batch_min"] = g.batch_size.min()
    out["batch_max"] = g.batch_size.max()
    out["offset"] = g.offset.first()
    out["scatter"] = (df.log_err - df.offset).abs().groupby(df.dep).mean()
    return out.sort_values("offset", kind="stable").reset_index(drop=True)


def offset_share(res: pd.DataFrame, metric: str = "ttft", keys=("backend", "mode"),
                 min_rows: int = MIN_SWEEP_ROWS) -> pd.DataFrame:
    """Per slice of ``keys``, over the rows of deployments (``OFFSET_KEYS``) measured at least
    ``min_rows`` times (``sweep_rows`` of ``rows``; ``deployments`` of them): the mean
    |ln(predicted / measured)| of ``metric``, the same with each deployment's median removed
    (``within_deployment``: what one constant per deployment cannot remove) and the share of the
    first the offsets carry, 1 - within / all; an ``all`` row over every row."""
    df = _log_errors(res, metric)
    df["resid"] = (df.log_err - df.offset).abs()
    df["abs"] = df.log_err.abs()

    def table(frame):
        sweep = frame[frame.sweep_rows >= min_rows]
        return {"rows": len(frame), "sweep_rows": len(sweep), "deployments": sweep.dep.nunique(),
                "mean_abs_log_err": sweep["abs"].mean(), "within_deployment": sweep.resid.mean()}

    records = [{**dict(zip(keys, k if isinstance(k, tuple) else (k,))), **table(f)}
               for k, f in df.groupby(list(keys), dropna=False)]
    records.append({**{k: "all" if i == 0 else "" for i, k in enumerate(keys)}, **table(df)})
    out = pd.DataFrame.from_records(records).set_index(list(keys))
    out["offset_share"] = 1.0 - out.within_deployment / out.mean_abs_log_err
    return out.round(3)


def _annotate(res: pd.DataFrame) -> pd.DataFrame:
    from model_specs.catalog import load_model
    from paraplan.validation.serving import model_preset_for
    moe = {}
    for path in res.model_path.dropna().unique():
        preset = model_preset_for(path)
        moe[path] = "moe" if preset and load_model(preset).moe is not None else "dense"
    out = res.copy()
    out["architecture"] = out.model_path.map(moe)
    out["concurrency"] = pd.cut(out.batch_size, CONCURRENCY_BANDS)
    out["shape"] = out.isl.astype(int).astype(str) + "x" + out.osl.astype(int).astype(str)
    return out


def report(res: pd.DataFrame) -> str:
    """The text the command prints."""
    from paraplan.validation.serving_repeats import repeats_report
    repeats = repeats_report(res)
    res = _annotate(res)
    parts = []
    for keys in (("backend", "mode"), ("backend", "mode", "tp_size"), ("backend", "concurrency"),
                 ("backend", "shape"), ("backend", "architecture"), ("precision",), ("system",)):
        parts.append(f"== by {', '.join(keys)} ==\n{slice_errors(res, keys).to_string()}")
    slopes = decode_slopes(res)
    if len(slopes):
        parts.append("== decode: measured / predicted TPOT slope and intercept against concurrency "
                     f"(<= {MAX_BATCH}), per tp ==\n{slope_ratio_by(slopes).to_string()}")
        parts.append(f"== the same per backend and tp ==\n{slope_ratio_by(slopes, ('backend', 'tp_size')).to_string()}")
    pairs = osl_pairs(res)
    if len(pairs):
        g = pairs.groupby(["backend", "model_path"], dropna=False)
        table = pd.DataFrame({"pairs": g.size(), "measured_median": g.ttft_ratio_measured.median(),
                              "measured_q75": g.ttft_ratio_measured.quantile(0.75),
                              "predicted_median": g.ttft_ratio_predicted.median()}).round(2)
        parts.append(f"== TTFT at the shorter osl / at the longer (same layout, isl, concurrency <= "
                     f"{MAX_PAIR_BATCH}) ==\n{table.to_string()}")
    for metric in ("ttft", "tpot"):
        parts.append(f"== {metric.upper()}: per-deployment offsets (ln(predicted / measured); a deployment is every "
                     f"column the prediction reads but the load; deployments of >= {MIN_SWEEP_ROWS} rows) "
                     f"==\n{offset_share(res, metric).to_string()}")
    offsets = deployment_offsets(res, "ttft")
    shown = ["backend", "mode", "model_path", "system", "precision", "backend_version", "isl", "osl", "tp_size",
             "attention_dp_size", "moe_ep_size", "rows", "batch_min", "batch_max", "offset", "scatter"]
    ends = pd.concat([offsets.head(OFFSET_LIST), offsets.tail(OFFSET_LIST)]).drop_duplicates()
    parts.append(f"== TTFT: the {OFFSET_LIST} most under- and over-predicted deployments of >= {MIN_SWEEP_ROWS} "
                 f"rows (offset = median ln(predicted / measured)) ==\n{ends[shown].round(3).to_string(index=False)}")
    parts.append(repeats)
    return "\n\n".join(parts)


def main(argv=None) -> int:
    from paraplan.validation.datasets import SERVING_RUNS, validation_file
    from paraplan.validation.serving import predict, read_rows
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", default=None, help="serving-runs CSV (default: the resolved serving_runs.csv)")
    args = ap.parse_args(argv)
    path = args.path or validation_file(SERVING_RUNS)
    try:
        if not Path(path).is_file():
            raise InputError("path", f"{path} is not a file", "give a serving-runs CSV")
        df = read_rows(path)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        print(f"error: csv: {path} cannot be read as a CSV ({type(exc).__name__}; give a serving-runs CSV)",
              file=sys.stderr)
        return 2
    print(report(residuals(df, predict(df))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
