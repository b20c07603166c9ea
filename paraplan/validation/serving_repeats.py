"""How much the measured serving rows disagree with themselves: the repeat-noise floor of the
serving error.

A *repeat group* is a set of rows that describe one deployment (every column a prediction reads:
backend, model, system, formats, mode, the agg layout or the disagg workers' layouts, batch sizes
and worker counts, isl, osl, concurrency; with or without ``backend_version``) and hold two or
more *different* measurements. Rows whose TTFT and TPOT both agree to ``COPY_TOLERANCE_MS`` are
one measurement exported twice (the file holds re-exports of one run from several source files,
some rounded to 0.01 ms), not a repeat: they count once.

A predictor gives one deployment one value, so on a group with measurements x_i the least mean
relative error |c - x_i| / x_i any predictor can reach is that of the best constant c, the
median of the x_i weighted by 1 / x_i (the error is piecewise linear in c with slopes
sum(w_i / x_i) over the rows below c minus that above). That mean is the *noise floor*; the
error of predicting the group's geometric mean is shown beside it, and the spread
|ln(x_i / geometric mean)| (in percent) says how far the measurements sit from their centre.
Both are measured from the group's own centre, which sits closer to its few measurements than
the deployment's true centre does: for n measurements with normal scatter in ln x, the mean
|ln(x_i / gm)| is sqrt((n - 1) / n) of the mean |ln(x / true centre)| (0.71 for a pair), so
``noise`` scales the spread by sqrt(n / (n - 1)): the expected |log error| of one measurement
against a predictor exact up to the repeat noise, the floor to expect on a row measured once.

Nothing here changes a prediction; ``python -m paraplan.validation.serving_residuals`` prints
these tables after its residual slices.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

#: rows whose TTFT and TPOT both differ by no more than this (ms) are one measurement: some
#: exports round to 0.01 ms (e.g. 338.336414 and 338.34 ms, 6.332719 and 6.33 ms); the closest
#: pair of different runs in serving_runs.csv differs by 0.05 ms of TTFT
COPY_TOLERANCE_MS = 0.005
_LAYOUT = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
#: what one deployment is: every column the serving prediction reads, concurrency included
DEPLOYMENT_KEYS = (("backend", "model_path", "system", "precision", "gemm_quant_mode", "moe_quant_mode",
                    "mode", "isl", "osl", "batch_size") + _LAYOUT
                   + tuple(f"{s}_{c}" for s in ("prefill", "decode") for c in _LAYOUT + ("batch_size", "num_workers")))
METRICS = ("ttft", "tpot")


def deployment_keys(same_release: bool) -> list[str]:
    """The columns that identify a deployment; ``same_release`` adds ``backend_version``."""
    return list(DEPLOYMENT_KEYS) + (["backend_version"] if same_release else [])


def distinct_measurements(frame: pd.DataFrame, same_release: bool = True) -> pd.DataFrame:
    """One row per distinct measurement of ``frame`` (rows of one deployment whose TTFT and TPOT
    both agree to ``COPY_TOLERANCE_MS`` merged into the first), with ``group`` (an integer per
    deployment), ``copies`` (rows of ``frame`` it stands for), ``measurements`` (distinct
    measurements of its group) and ``rows`` (rows of its group). Columns of
    ``DEPLOYMENT_KEYS`` absent from ``frame`` count as equal on every row."""
    keys = deployment_keys(same_release)
    df = frame.copy()
    for k in keys:
        if k not in df.columns:
            df[k] = np.nan
    df = df[(df.silicon_ttft_ms > 0) & (df.silicon_tpot_ms > 0)]
    df["group"] = df.groupby(keys, dropna=False, sort=False).ngroup()
    df = df.sort_values(["group", "silicon_ttft_ms", "silicon_tpot_ms"], kind="stable")
    same_group = df.group.eq(df.group.shift())
    copy = (same_group
            & (df.silicon_ttft_ms - df.silicon_ttft_ms.shift()).abs().le(COPY_TOLERANCE_MS)
            & (df.silicon_tpot_ms - df.silicon_tpot_ms.shift()).abs().le(COPY_TOLERANCE_MS))
    df["copies"] = (~copy).cumsum()                       # the measurement each row belongs to
    copies = df.groupby("copies").size()
    out = df[~copy].copy()
    out["copies"] = copies.to_numpy()
    out["measurements"] = out.groupby("group").group.transform("size")
    out["rows"] = out.groupby("group").copies.transform("sum")
    return out


def repeat_measurements(frame: pd.DataFrame, same_release: bool = True) -> pd.DataFrame:
    """The distinct measurements (``distinct_measurements``) of every deployment that holds two
    or more."""
    out = distinct_measurements(frame, same_release)
    return out[out.measurements >= 2]


def best_constant(values: pd.Series, group: pd.Series, weights: pd.Series | None = None) -> pd.Series:
    """Per row, the constant c that minimises sum_i w_i |c - x_i| / x_i over its group: the
    median of the x_i weighted by w_i / x_i (the lowest x_i whose cumulative weight, ascending,
    reaches half the group's)."""
    w = (pd.Series(1.0, index=values.index) if weights is None else weights.astype(float)) / values
    order = np.lexsort((values.to_numpy(), group.to_numpy()))
    v, g, w = values.iloc[order], group.iloc[order], w.iloc[order]
    cum = w.groupby(g.to_numpy()).cumsum()
    half = w.groupby(g.to_numpy()).transform("sum") / 2
    c = v.where(cum >= half * (1 - 1e-12)).groupby(g.to_numpy()).transform("min")
    return c.reindex(values.index)


def repeat_errors(reps: pd.DataFrame) -> pd.DataFrame:
    """``reps`` (from ``repeat_measurements``) with, per metric m: ``m_spread`` |ln(x / group
    geometric mean)|, ``m_noise`` that spread x sqrt(n / (n - 1)) (n measurements in the group;
    the scatter about the true centre, module docstring), ``m_gm_err`` |gm - x| / x, ``m_floor_err`` |c - x| / x with c the best
    constant over the distinct measurements, ``m_floor_rows_err`` the same with c the best
    constant over the rows (copies weighted: the least error on the file's rows), and
    ``m_maxmin`` the group's max / min (fractions)."""
    out = reps.copy()
    for m in METRICS:
        x = out[f"silicon_{m}_ms"].astype(float)
        gm = np.exp(np.log(x).groupby(out.group).transform("mean"))
        out[f"{m}_spread"] = np.abs(np.log(x / gm))
        out[f"{m}_noise"] = out[f"{m}_spread"] * np.sqrt(out.measurements / (out.measurements - 1))
        out[f"{m}_gm_err"] = np.abs(gm - x) / x
        out[f"{m}_floor_err"] = np.abs(best_constant(x, out.group) - x) / x
        out[f"{m}_floor_rows_err"] = np.abs(best_constant(x, out.group, out.copies) - x) / x
        out[f"{m}_maxmin"] = x.groupby(out.group).transform("max") / x.groupby(out.group).transform("min")
    return out


def floor_table(errs: pd.DataFrame, keys=("backend", "mode")) -> pd.DataFrame:
    """Per slice of ``keys``: repeat groups, distinct measurements and the rows they stand for;
    per metric the spread (median and mean, %), the noise (mean, %), the geometric-mean and best-constant floors
    (mean |error| over the distinct measurements, %), the model's mean |error| on the same
    measurements where ``errs`` has ``m_err`` (%), and the median and largest group max / min."""
    g = errs.groupby(list(keys), dropna=False)
    first = errs.drop_duplicates("group").groupby(list(keys), dropna=False)
    cols = {"groups": g.group.nunique(), "measurements": g.size(), "rows": g.copies.sum()}
    for m in METRICS:
        cols[f"{m}_spread_median_pct"] = 100 * g[f"{m}_spread"].median()
        cols[f"{m}_spread_mean_pct"] = 100 * g[f"{m}_spread"].mean()
        cols[f"{m}_noise_pct"] = 100 * g[f"{m}_noise"].mean()
        cols[f"{m}_floor_gm_pct"] = 100 * g[f"{m}_gm_err"].mean()
        cols[f"{m}_floor_pct"] = 100 * g[f"{m}_floor_err"].mean()
        if f"{m}_err" in errs.columns:
            cols[f"{m}_model_pct"] = 100 * errs[f"{m}_err"].abs().groupby([errs[k] for k in keys], dropna=False).mean()
        cols[f"{m}_maxmin_median"] = first[f"{m}_maxmin"].median()
        cols[f"{m}_maxmin_max"] = first[f"{m}_maxmin"].max()
    return pd.DataFrame(cols).round(2)


def floor_share(errs: pd.DataFrame, res: pd.DataFrame, keys=("backend", "mode")) -> pd.DataFrame:
    """Per slice of ``keys`` over all rows of ``res`` (the predicted rows, ``m_err`` columns):
    rows, rows in repeat groups, the model's mean |error| (%) and the least mean |error| (%) the
    repeat noise alone forces on those rows (each repeat row's best-constant error, copies
    weighted; every other row counted as 0)."""
    k = list(keys)
    total = res.groupby(k, dropna=False)
    rep = errs.groupby(k, dropna=False)
    cols = {"rows": total.size(), "rows_in_repeats": rep.copies.sum()}
    for m in METRICS:
        cols[f"{m}_model_pct"] = 100 * total[f"{m}_err"].apply(lambda e: e.abs().mean())
        forced = (errs[f"{m}_floor_rows_err"] * errs.copies).groupby([errs[c] for c in k], dropna=False).sum()
        cols[f"{m}_floor_pct"] = 100 * forced / cols["rows"]
    out = pd.DataFrame(cols)
    out["rows_in_repeats"] = out.rows_in_repeats.fillna(0).astype(int)
    for m in METRICS:
        out[f"{m}_floor_pct"] = out[f"{m}_floor_pct"].fillna(0.0)
    return out.round(2)


def repeats_report(res: pd.DataFrame) -> str:
    """The text of the repeat tables, for both readings of the deployment key."""
    parts = []
    for same_release, label in ((True, "same release"), (False, "any release")):
        dist = distinct_measurements(res, same_release)
        shared = dist[dist.rows >= 2]
        parts.append(f"== deployments ({label}): {len(res)} rows, {int(shared.copies.sum())} sharing their "
                     f"deployment with another row, {int((shared.copies - 1).sum())} of them copies of another "
                     f"row's measurement: {len(dist)} distinct measurements ==")
        errs = repeat_errors(dist[dist.measurements >= 2])
        if errs.empty:
            parts.append(f"== repeat groups ({label}): none ==")
            continue
        overall = floor_table(errs.assign(all="all"), ("all",))
        overall.index = pd.MultiIndex.from_tuples([("all", "")], names=["backend", "mode"])
        table = pd.concat([floor_table(errs), overall])
        share = floor_share(errs, res)
        share_all = floor_share(errs.assign(all="all"), res.assign(all="all"), ("all",))
        share_all.index = overall.index
        parts.append(f"== repeat groups ({label}): one deployment, two or more different measurements "
                     f"(copies within {COPY_TOLERANCE_MS} ms merged); spread |ln(x/gm)|, floor = least "
                     f"mean |error| of one value per group ==\n{table.T.to_string()}")
        parts.append(f"== the floor's share of each slice's error over all its predicted rows ({label}) ==\n"
                     f"{pd.concat([share, share_all]).to_string()}")
    return "\n\n".join(parts)
