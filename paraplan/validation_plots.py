"""Validation figures: how far each prediction is from its measurement, row by row.

``validate published --plot``: each predicted row's speed error (predicted speed / measured
speed - 1, in percent; + = the model is too fast; the same sign for time and rate metrics) as a
dot, one column of dots per source, the table's mean |predicted / measured - 1| of the source
written above the column, a band at +-10%; the few rows beyond the y range (99.5% of the rows)
are red triangles on its edge, counted with their farthest error. ``validate serving --plot``: predicted against measured TTFT and TPOT (ms, log axes),
one colour per backend, the line of equality and bands at +-25%. The tables give the numbers;
the figures show where the misses sit (one source, one backend, the long tail).

Built on ``matplotlib.figure.Figure`` (no pyplot state, no display), like ``paraplan.plots``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

#: half-widths of the shaded bands, percent
PUBLISHED_BAND_PCT = 10.0
SERVING_BAND_PCT = 25.0
BACKEND_COLORS = {"vllm": "#4C72B0", "sglang": "#55A868", "trtllm": "#C44E52"}
MODE_MARKERS = {"agg": "o", "disagg": "s"}


def _literal(label) -> str:
    """``label`` (a source name read from the runs file) drawn as written: matplotlib reads the
    text between two $ signs as mathtext (a run_id prefix '$x^$' was its ParseSyntaxException, an
    internal error after the table was printed); an escaped \\$ is drawn as a plain $."""
    return str(label).replace("$", "\\$")


def _ok(results: pd.DataFrame) -> pd.DataFrame:
    ok = results[results["status"] == "ok"]
    pred = pd.to_numeric(ok["predicted"], errors="coerce")
    meas = pd.to_numeric(ok["measured"], errors="coerce")
    return ok[np.isfinite(pred) & np.isfinite(meas) & (pred > 0) & (meas > 0)]


def published_error_strip(results: pd.DataFrame, path: str | Path | None = None, title: str | None = None) -> Figure:
    """Speed error of every predicted row (``results`` of ``validation.published.validate_rows``:
    columns status, source, speed_error), one column per source ordered by row count."""
    ok = _ok(results)
    err = 100.0 * pd.to_numeric(ok["speed_error"], errors="coerce")
    rel = 100.0 * pd.to_numeric(ok["rel_error"], errors="coerce")
    ok = ok.assign(err_pct=err, rel_pct=rel)[np.isfinite(err) & np.isfinite(rel)]
    sources = ok["source"].value_counts().index.tolist()
    fig = Figure(figsize=(max(6.0, 0.55 * len(sources) + 2.0), 4.6), dpi=120)
    ax = fig.add_subplot()
    ax.axhspan(-PUBLISHED_BAND_PCT, PUBLISHED_BAND_PCT, color="#DDDDDD", alpha=0.6, lw=0,
               label=f"within +-{PUBLISHED_BAND_PCT:g}%")
    ax.axhline(0.0, color="#777777", lw=0.8)
    # the y range holds 99.5% of the rows; a row beyond it is drawn on the edge as a red triangle
    # pointing out, its column's count and farthest error written beside (they were left out)
    lim = (float(np.clip(np.nanpercentile(np.abs(ok["err_pct"]), 99.5) * 1.1, 20.0, 200.0)) if len(ok)
           else None)
    edge = 0.97 * lim if lim is not None else np.inf
    rng = np.random.default_rng(0)          # the same jitter on every run: a figure diffs cleanly
    clipped = 0
    for i, src in enumerate(sources):
        rows = ok[ok["source"] == src]
        y = rows["err_pct"].to_numpy()
        x = i + rng.uniform(-0.28, 0.28, size=len(y))
        inside = np.abs(y) <= edge
        ax.scatter(x[inside], y[inside], s=9, alpha=0.55, color="#4C72B0", lw=0)
        for sign, marker in ((1.0, "^"), (-1.0, "v")):
            out = sign * y > edge
            if out.any():
                clipped += int(out.sum())
                ax.scatter(x[out], np.full(int(out.sum()), sign * edge), s=22, marker=marker, color="#C44E52",
                           lw=0, zorder=3)
                far = y[out][np.argmax(sign * y[out])]
                ax.text(i + 0.32, sign * edge, f"{int(out.sum())} to {far:+.0f}%", fontsize=6, color="#C44E52",
                        ha="left", va="top" if sign > 0 else "bottom")
        # above the column: the table's figure, mean |predicted / measured - 1| of the source
        ax.text(i, 1.0, f"{np.mean(np.abs(rows['rel_pct'])):.1f}%\nn={len(y)}", transform=ax.get_xaxis_transform(),
                ha="center", va="bottom", fontsize=6.5)
    ax.set_xticks(range(len(sources)))
    ax.set_xticklabels([_literal(src) for src in sources], rotation=60, ha="right", fontsize=7.5)
    ax.set_xlim(-0.7, len(sources) - 0.3)
    if lim is not None:
        ax.set_ylim(-lim, lim)
    if clipped:
        ax.scatter([], [], s=22, marker="^", color="#C44E52", lw=0,
                   label=f"{clipped} row{'s' if clipped > 1 else ''} beyond +-{edge:.0f}%, drawn at the edge")
    ax.set_ylabel("speed error, % (+ = predicted faster)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    mean_all = float(np.mean(np.abs(ok["rel_pct"]))) if len(ok) else float("nan")
    heading = f"published runs: {len(ok)} predicted rows, mean |predicted / measured - 1| {mean_all:.2f}%"
    fig.suptitle(f"{heading}\n{title}" if title else heading, fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=fig.dpi, bbox_inches="tight")
    return fig


def serving_scatter(results: pd.DataFrame, path: str | Path | None = None, title: str | None = None) -> Figure:
    """Predicted against measured TTFT and TPOT, ms (``results`` of
    ``validation.serving.validate_rows``: columns status, metric, predicted, measured, backend, mode)."""
    ok = _ok(results)
    fig = Figure(figsize=(10.0, 4.6), dpi=120)
    axes = fig.subplots(1, 2)
    band = SERVING_BAND_PCT / 100.0
    for ax, metric, label in zip(axes, ("ttft_ms", "tpot_ms"), ("TTFT, ms", "TPOT, ms")):
        m = ok[ok["metric"] == metric]
        pred = pd.to_numeric(m["predicted"]).to_numpy()
        meas = pd.to_numeric(m["measured"]).to_numpy()
        for (backend, mode), g in m.groupby(["backend", "mode"]):
            ax.scatter(pd.to_numeric(g["measured"]), pd.to_numeric(g["predicted"]), s=9, alpha=0.55, lw=0,
                       color=BACKEND_COLORS.get(str(backend), "#8172B2"), marker=MODE_MARKERS.get(str(mode), "^"),
                       label=f"{backend} {mode} ({len(g)})")
        if len(m):
            lo = float(min(pred.min(), meas.min())) / 1.5
            hi = float(max(pred.max(), meas.max())) * 1.5
            line = np.array([lo, hi])
            ax.plot(line, line, color="#555555", lw=0.9)
            ax.fill_between(line, line * (1 - band), line * (1 + band), color="#DDDDDD", alpha=0.6, lw=0,
                            label=f"within +-{SERVING_BAND_PCT:g}%")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            mean_abs = 100.0 * float(np.mean(np.abs(pred / meas - 1.0)))
            rows = "1 row" if len(m) == 1 else f"{len(m)} rows"
            ax.set_title(f"{label.split(',')[0]}: {rows}, mean |error| {mean_abs:.1f}%", fontsize=9)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=6.5, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=fig.dpi, bbox_inches="tight")
    return fig
