"""Figures for the notebooks and ``paraplan plot``: matplotlib, no pyplot state, no display needed.

Each function takes the DataFrames of :mod:`paraplan.api` (or ``StepReport`` objects, or lists
of them), returns a ``matplotlib.figure.Figure``, and also writes it when given a ``path``
(PNG, SVG or PDF by the suffix). Figures are built on ``matplotlib.figure.Figure`` directly,
so they render with the Agg canvas on a headless machine and display inline in Jupyter.

* :func:`breakdown` -- where a step's time goes (stacked bars of ``TIME_PARTS``);
* :func:`memory` -- per-GPU memory by part against the HBM capacity;
* :func:`roofline` -- a layer's operations on a GPU's roofline (``api.layer_ops``);
* :func:`pareto` -- plans by throughput and memory, with the Pareto frontier;
* :func:`scaling` -- tokens/s and MFU against the GPU count (one line per model, cluster or ``hue``);
* :func:`bandwidth` -- throughput and exposed communication against network bandwidth.

A number a figure writes that rests on an unfitted prior efficiency model (a row with
``efficiency_fitted`` False: step time, tokens/s, MFU, their shares) carries the CLI tables'
mark, ``3.52 s *``, and the line above the figure says what ``*`` means (``prior_note``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import Formatter, FuncFormatter

from hardware_specs.efficiency_model import PRIOR_MARK, prior_mark
from hardware_specs.errors import InputError, suggest, whole_number
from simulator.report import MEMORY_PARTS, TIME_PARTS, StepReport

#: human names of the step-time parts (keys: ``TIME_PARTS``).
TIME_LABELS = {
    "compute_s": "compute",
    "recompute_s": "recompute",
    "tp_comm_exposed_s": "TP comm (exposed)",
    "cp_comm_exposed_s": "CP comm (exposed)",
    "ep_comm_exposed_s": "EP all-to-all (exposed)",
    "pp_comm_s": "PP send/recv",
    "zero3_comm_exposed_s": "ZeRO-3 gathers, per-micro-batch grad reductions (exposed)",
    "pipeline_bubble_s": "pipeline bubble",
    "dp_comm_exposed_s": "DP grad reduce (exposed)",
    "sync_wait_s": "straggler wait",
    "optimizer_s": "optimizer step",
    "offload_exposed_s": "activation offload (exposed)",
}
#: human names of the memory parts whose name is not readable as it stands
_MEMORY_NAMES = {
    "optimizer_bytes": "optimizer states",
    "recompute_buffers_bytes": "recompute buffers",
    "offload_buffers_bytes": "offload buffers",
    "moe_dispatch_bytes": "MoE dispatch buffers",
    "zero3_buffers_bytes": "ZeRO-2/3 buffers",
    "allocator_bytes": "allocator + workspaces",
}
#: human names of the memory columns of ``api`` rows, one per ``MEMORY_PARTS`` in its order (a
#: part added there is drawn with its own name spelled out: a hand-kept list missed three, and
#: the stacked bars fell short of the total written above them)
MEMORY_LABELS = {p.replace("_bytes", "_gib"): _MEMORY_NAMES.get(p, p[:-len("_bytes")].replace("_", " "))
                 for p in MEMORY_PARTS}
COMM_PARTS = ("tp_comm_exposed_s", "cp_comm_exposed_s", "ep_comm_exposed_s", "pp_comm_s",
              "zero3_comm_exposed_s", "dp_comm_exposed_s")
_PALETTE = ("#4C72B0", "#8172B3", "#DD8452", "#C44E52", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974",
            "#64B5CD", "#55A868", "#1F3A5F", "#B07AA1")


def _color(name: str, names: Sequence[str]) -> str:
    return _PALETTE[list(names).index(name) % len(_PALETTE)] if name in names else _PALETTE[-1]


def _mfu_columns(df: pd.DataFrame) -> list[str]:
    """The rows' MFU columns (``mfu_bf16_pct``; a sweep over GPUs may add ``mfu_fp16_pct``)."""
    return [c for c in df.columns if c.startswith("mfu_") and c.endswith("_pct")]


def _mfu_pct(df: pd.DataFrame) -> pd.Series | None:
    """Each row's MFU in percent of its GPU's reference peak (``paraplan.mfu``), or None."""
    cols = _mfu_columns(df)
    if not cols:
        return None
    return df[cols].astype(float).bfill(axis=1).iloc[:, 0]


def _mfu_reference(df: pd.DataFrame) -> str:
    """``bf16`` (the dtype the MFU columns are percent of; ``bf16/fp16`` when they differ)."""
    return "/".join(c[len("mfu_"):-len("_pct")] for c in _mfu_columns(df)) or "bf16"


def frame(data: Any) -> pd.DataFrame:
    """A DataFrame of result rows from a DataFrame, a ``StepReport``, a dict, or a list of them."""
    if isinstance(data, pd.DataFrame):
        return data.reset_index(drop=True)
    if isinstance(data, pd.Series):
        return data.to_frame().T.reset_index(drop=True)
    if isinstance(data, (StepReport, dict)):
        data = [data]
    rows = []
    for item in data:
        if isinstance(item, StepReport):
            from paraplan.api import report_row
            rows.append(report_row(item))
        elif isinstance(item, pd.Series):
            rows.append(item.to_dict())
        else:
            rows.append(dict(item))
    return pd.DataFrame(rows)


#: the columns of ``api.layer_ops`` that :func:`roofline` reads
ROOFLINE_COLUMNS = ("op", "intensity_flop_per_byte", "achieved_tflop_per_s", "peak_tflop_per_s", "hbm_tb_per_s",
                    "achieved_peak_tflop_per_s", "achieved_hbm_tb_per_s", "gpu", "dtype")


def _checked(data: Any, needs: Iterable[str] = (), path: str | Path | None = None, *, drawn: Iterable[str] = (),
             **columns: str | None) -> pd.DataFrame:
    """``frame(data)`` when it can be drawn, else ``InputError``: a non-empty table of rows with the
    ``needs`` columns, each named option in ``columns`` (``label=``, ``hue=``, ``x=``, ...) naming
    one of its columns, and ``path``'s folder existing (matplotlib's own IndexError, KeyError or
    FileNotFoundError said none of that).

    Rows whose ``drawn`` columns are not all finite numbers (an ``invalid`` row of a sweep has no
    step time) cannot be drawn: they are dropped and counted in ``df.attrs["not_drawn"]``, which
    ``_finish`` writes above the figure; a table with no drawable row is an ``InputError``
    (matplotlib's 'Axis limits cannot be NaN or Inf', or blank and partial bars, said nothing)."""
    try:
        df = frame(data)
    except (TypeError, ValueError):
        raise InputError("data", f"expected a DataFrame of paraplan.api rows (or StepReports, dicts, a list of "
                                 f"them), got {type(data).__name__}") from None
    if df.empty:
        raise InputError("data", "no rows to plot", "check the filter or sweep that made the table")
    for option, name in columns.items():
        if name is not None and name not in df.columns:
            raise InputError(option, f"{name!r} is not a column of the rows", suggest(str(name), map(str, df.columns)))
    missing = [c for c in needs if c not in df.columns]
    if missing:
        raise InputError("data", f"the rows lack the column {missing[0]!r}",
                         "pass api.layer_ops's table" if missing[0] in ROOFLINE_COLUMNS
                         else "pass rows of api.simulate, sweep, plan or best_plan")
    check_folder(path)
    drawn = [c for c in drawn if c in df.columns]
    if drawn:
        values = df[drawn].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
        ok = np.isfinite(values).all(axis=1)
        if not ok.any():
            why = ""
            if "reason" in df.columns and str(df["reason"].iloc[0] or "").strip():
                why = f"; the first row's reason: {' '.join(str(df['reason'].iloc[0]).split())}"
            raise InputError("data", f"no row to plot: none of the {len(df)} rows has a finite "
                             f"{' and '.join(drawn)}{why}", "plot rows that simulated (status ok or does not fit)")
        if not ok.all():
            n = int((~ok).sum())
            status = (f", status {', '.join(sorted(map(str, df.loc[~ok, 'status'].dropna().unique())))}"
                      if "status" in df.columns else "")
            df = df[ok].reset_index(drop=True)
            df.attrs["not_drawn"] = f"{n} row{'s' if n > 1 else ''} not drawn (no {' or '.join(drawn)}{status})"
    return df


def check_folder(path: str | Path | None) -> None:
    """``InputError`` naming ``path`` when its folder does not exist (matplotlib's savefig raised
    FileNotFoundError after drawing the whole figure); None (no file) passes."""
    if path is not None and not Path(path).parent.is_dir():
        raise InputError("path", f"the folder {str(Path(path).parent)!r} does not exist", "create it first")


def _labels(df: pd.DataFrame, label: str | None) -> list[str]:
    if label is not None and label in df.columns:
        return [str(v) for v in df[label]]
    if "sweep_field" in df.columns:
        return [_fmt_value(v) for v in df["sweep_value"]]
    if "config" in df.columns:
        return [str(v) for v in df["config"]]
    return [str(i) for i in range(len(df))]


def _fmt_value(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return f"{int(v)}"
    return str(v)


def _subject(df: pd.DataFrame) -> str:
    """'llama3-70b on 256 x h100-sxm-80gb' when the rows share them."""
    parts = []
    for col in ("model",):
        if col in df.columns and df[col].nunique() == 1:
            parts.append(str(df[col].iloc[0]))
    gpus = df["n_gpus"].iloc[0] if "n_gpus" in df.columns and df["n_gpus"].nunique() == 1 else None
    gpu = df["gpu"].iloc[0] if "gpu" in df.columns and df["gpu"].nunique() == 1 else None
    if gpu is not None:
        parts.append(f"on {int(gpus)} x {gpu}" if gpus is not None else f"on {gpu}")
    return " ".join(parts)


def prior_mask(df: pd.DataFrame) -> np.ndarray:
    """True for the rows whose times rest on an unfitted prior efficiency model
    (``efficiency_fitted`` False, ``paraplan.priors``); all False without the column."""
    if "efficiency_fitted" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return df["efficiency_fitted"].astype(object).eq(False).to_numpy()


def prior_marks(df: pd.DataFrame) -> list[str]:
    """Per row, what follows a number the figure writes that rests on the row's times (a step
    time, tokens/s, MFU, a share of them): ``" *"`` (``PRIOR_MARK``, as the CLI's tables mark
    such a cell, ``paraplan.priors``) for a row on an unfitted prior, else nothing. Memory rests
    on no efficiency model and is written unmarked, as the tables print it."""
    return [prior_mark(bool(p)) for p in prior_mask(df)]


def prior_note(df: pd.DataFrame) -> str | None:
    """The line a figure carries when any of its rows rests on an unfitted prior efficiency model
    (``efficiency_fitted`` False, ``paraplan.priors``), saying what the ``PRIOR_MARK`` beside
    such numbers means (``prior_marks``), as the tables' footnote does; else None."""
    prior = prior_mask(df)
    if not prior.any():
        return None
    gpus = sorted({str(g) for g in df.loc[prior, "gpu"]}) if "gpu" in df.columns else []
    return (f"{PRIOR_MARK} = {', '.join(gpus) or 'these GPUs'}: an unfitted prior efficiency model; no measured "
            f"run has checked the numbers marked {PRIOR_MARK} (read them as a sketch)")


def _finish(fig: Figure, path: str | Path | None, df: pd.DataFrame | None = None) -> Figure:
    notes = [prior_note(df), df.attrs.get("not_drawn")] if df is not None else []
    note = "\n".join(n for n in notes if n)
    if note:
        fig.text(0.5, 1.02, note, fontsize=8, color="#C44E52", ha="center", va="bottom")   # above the title
    if path is not None:
        fig.savefig(path, dpi=fig.dpi, bbox_inches="tight")
    return fig


def _count_scale(magnitude: float) -> tuple[float, str]:
    """(divisor, suffix) for a count of ``magnitude``: 1e6 "M" from a million, 1e3 "k" from a thousand."""
    return (1e6, "M") if magnitude >= 1e6 else (1e3, "k") if magnitude >= 1e3 else (1.0, "")


def _decimals(values: Sequence[float], cap: int = 3) -> int:
    """The fewest decimals (at most ``cap``) that write every value exactly, to a part in a million.

    For tick positions, all multiples of the locator's step, this is the step's decimals: a
    2.5 step (272.5k) needs one, a 5 step none, so neighbouring ticks never share a label.
    """
    vals = np.asarray(values, dtype=float)
    vals = vals[np.isfinite(vals)]
    for d in range(cap + 1):
        scaled = vals * 10 ** d
        if np.all(np.abs(scaled - np.round(scaled)) <= 1e-6 * np.maximum(1.0, np.abs(scaled))):
            return d
    return cap


def _strip_zeros(text: str) -> str:
    """'272.50' -> '272.5', '270.0' -> '270': no trailing zeros after the point."""
    return text.rstrip("0").rstrip(".") if "." in text else text


def _thousands(x, _pos=None) -> str:
    """One count (tokens/s) in three significant figures: 1500 -> '1.5k', 272345 -> '272k', 1.25e6 -> '1.25M'."""
    if not np.isfinite(x):
        return f"{x}"
    rounded = float(f"{x:.3g}")      # first, so 999,700 is '1M', not '1000k'
    scale, suffix = _count_scale(abs(rounded))
    return _strip_zeros(f"{rounded / scale:.3f}") + suffix


def count_tick_labels(ticks: Sequence[float]) -> list[str]:
    """Labels of an axis's count ticks like 270k / 272.5k / 1.2M, one scale for the axis.

    The decimals come from the tick step (``_decimals`` of the ticks in the scale), so distinct
    ticks get distinct labels (272500 -> '272.5k', not '272k'); trailing zeros are dropped ('270k'),
    and zero is '0'.
    """
    vals = np.asarray(ticks, dtype=float)
    finite = vals[np.isfinite(vals)]
    scale, suffix = _count_scale(float(np.abs(finite).max()) if finite.size else 0.0)
    digits = _decimals(finite / scale)
    return ["0" if v == 0 else _strip_zeros(f"{v / scale:.{digits}f}") + suffix for v in vals]


class _CountFormatter(Formatter):
    """A matplotlib formatter writing ``count_tick_labels`` of the axis's current major ticks."""

    def set_locs(self, locs) -> None:
        self._tick_locs = list(locs)       # not ``self.locs``: Matplotlib 3.11 deprecates that attribute

    def _ticks(self) -> list[float]:
        locs = list(getattr(self, "_tick_locs", None) or [])
        if not locs and self.axis is not None:
            locs = list(self.axis.get_majorticklocs())
        return locs

    def format_ticks(self, values) -> list[str]:
        self.set_locs(values)
        return count_tick_labels(values)

    def __call__(self, x, pos=None) -> str:
        ticks = self._ticks()
        return count_tick_labels([*ticks, x])[-1] if ticks else _thousands(x)


def _count_axis(axis) -> None:
    """Tick labels like 210k / 272.5k / 1.2M, with the decimals the tick step needs (``count_tick_labels``)."""
    axis.set_major_formatter(_CountFormatter())


#: the mark of a row whose ``fits`` is False: its GPU memory, or the host memory its offload needs
#: (``simulator.headroom.step_fits``), so not "HBM" alone
UNFIT_LABEL = "does not fit in memory (GPU or host)"


# --------------------------------------------------------------------------------------------
# Step-time breakdown
# --------------------------------------------------------------------------------------------

def breakdown(data: Any, path: str | Path | None = None, *, label: str | None = None,
              title: str | None = None, ylabel: str | None = None) -> Figure:
    """Horizontal stacked bars: seconds per optimizer step, split into ``TIME_PARTS``, one bar per row.

    Parts that are zero on every row are left out of the legend. The total (and the tokens/s,
    when known) is written at the end of each bar, in red with ``UNFIT_LABEL`` for a row that
    does not fit (``fits`` False: GPU memory, or the host memory its offload needs).
    """
    df = _checked(data, ("step_time_s",), path, drawn=("step_time_s",), label=label)
    parts = [p for p in TIME_PARTS if p in df.columns and df[p].fillna(0).abs().sum() > 0]
    labels = _labels(df, label)
    height = max(2.6, 0.55 * len(df) + 1.8)
    fig = Figure(figsize=(10, height), dpi=110)
    ax = fig.add_subplot()
    y = np.arange(len(df))[::-1]
    left = np.zeros(len(df))
    for part in parts:
        values = df[part].fillna(0).to_numpy(dtype=float)
        ax.barh(y, values, left=left, color=_color(part, TIME_PARTS), label=TIME_LABELS.get(part, part),
                edgecolor="white", linewidth=0.5)
        left += values
    total = df["step_time_s"].to_numpy(dtype=float) if "step_time_s" in df.columns else left
    mfu = _mfu_pct(df)
    unfit = unfit_mask(df)
    marks = prior_marks(df)
    for yi, t, i in zip(y, total, range(len(df))):
        mark = marks[i]
        text = f" {t:.2f} s{mark}"
        if "tokens_per_s" in df.columns and np.isfinite(df["tokens_per_s"].iloc[i]):
            text += f"  ({_thousands(df['tokens_per_s'].iloc[i])} tok/s{mark}"
            if mfu is not None and np.isfinite(mfu.iloc[i]):
                text += f", MFU {mfu.iloc[i]:.0f}%{mark}"
            text += ")"
        if unfit[i]:
            text += "  " + UNFIT_LABEL
        ax.text(t, yi, text, va="center", fontsize=8, color="#C44E52" if unfit[i] else "black")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("time per optimizer step (s)")
    if ylabel is None and label is None and "sweep_field" in df.columns:
        ylabel = str(df["sweep_field"].iloc[0])
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.set_xlim(0, float(np.nanmax(total)) * 1.45 if len(df) else 1)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1 - 0.35 / height), ncol=min(4, max(1, len(parts))),
              fontsize=8, frameon=False)
    subject = _subject(df)
    ax.set_title(title or f"Where the step time goes{': ' + subject if subject else ''}")
    return _finish(fig, path, df)


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------

def memory(data: Any, path: str | Path | None = None, *, label: str | None = None,
           title: str | None = None) -> Figure:
    """Stacked bars of peak memory per GPU (GiB, on the pipeline stage with the most,
    ``StepReport.extras["memory_stage"]``) against the HBM line and the usable-memory line under
    it (HBM less the headroom a run keeps, ``simulator.headroom``: 76 of an H100's 80 GiB). A
    row that does not fit (``fits`` False: over the usable memory, even under the HBM line) is
    outlined and hatched in red, its total written in red with 'does not fit'."""
    df = _checked(data, ("memory_gib",), path, drawn=("memory_gib",), label=label)
    parts = [c for c in MEMORY_LABELS if c in df.columns and df[c].fillna(0).sum() > 0]
    labels = _labels(df, label)
    fig = Figure(figsize=(max(6.5, 1.0 * len(df) + 3.5), 5), dpi=110)
    ax = fig.add_subplot()
    x = np.arange(len(df))
    bottom = np.zeros(len(df))
    names = list(MEMORY_LABELS)
    for part in parts:
        values = df[part].fillna(0).to_numpy(dtype=float)
        ax.bar(x, values, bottom=bottom, color=_color(part, names), label=MEMORY_LABELS[part],
               edgecolor="white", linewidth=0.5, width=0.6)
        bottom += values
    total = df["memory_gib"].to_numpy(dtype=float) if "memory_gib" in df.columns else bottom
    near_line = df["hbm_gib"].to_numpy(dtype=float) * 0.93 if "hbm_gib" in df.columns else np.full(len(df), np.inf)
    unfit = unfit_mask(df)
    if unfit.any():
        ax.bar(x[unfit], total[unfit], width=0.6, fill=False, edgecolor="#C44E52", hatch="//", linewidth=1.8,
               label="does not fit (over HBM less the headroom)", zorder=3)
    for xi, t, lim, drawn, bad in zip(x, total, near_line, bottom, unfit):
        # the total would sit on the HBM line: write it inside the bar's top, in white, where the
        # bar reaches it (above a bar drawn short of its total, white text is unreadable)
        if bad:
            ax.text(xi, max(t, lim / 0.93 if np.isfinite(lim) else t), f"{t:.1f}\ndoes not fit", ha="center",
                    va="bottom", fontsize=8, color="#C44E52", fontweight="bold")
        elif t > lim and np.isclose(drawn, t, rtol=1e-3):
            ax.text(xi, t - 0.5, f"{t:.1f}", ha="center", va="top", fontsize=8, color="white", fontweight="bold")
        else:
            ax.text(xi, t, f"{t:.1f}", ha="center", va="bottom", fontsize=8)
    if "hbm_gib" in df.columns:
        from simulator.headroom import GIB, headroom_gib
        hbm = df["hbm_gib"].to_numpy(dtype=float)
        # what ``fits`` checks against: the HBM less the headroom a run keeps (the rows' default)
        usable = np.array([h - headroom_gib(h * GIB) for h in hbm])
        if np.allclose(hbm, hbm[0]):
            ax.axhline(hbm[0], color="black", linestyle="--", linewidth=1.2, label=f"HBM capacity ({hbm[0]:.0f} GiB)")
            ax.axhline(usable[0], color="#C44E52", linestyle=":", linewidth=1.2,
                       label=f"usable: HBM less {hbm[0] - usable[0]:.0f} GiB headroom ({usable[0]:.0f} GiB)")
        else:
            ax.hlines(hbm, x - 0.4, x + 0.4, colors="black", linestyles="--", linewidth=1.2, label="HBM capacity")
            ax.hlines(usable, x - 0.4, x + 0.4, colors="#C44E52", linestyles=":", linewidth=1.2,
                      label="usable: HBM less the headroom")
        top = max(float(np.nanmax(total)), float(np.nanmax(hbm)))
    else:
        top = float(np.nanmax(total))
    ax.set_ylim(0, top * (1.2 if unfit.any() else 1.15))
    ax.set_xlim(-0.5 - 0.5 * max(1, 4 - len(df)) / 2, len(df) - 0.5 + 0.5 * max(1, 4 - len(df)) / 2)
    ax.set_xticks(x, labels, rotation=20 if max(len(s) for s in labels) > 8 else 0, ha="right"
                  if max(len(s) for s in labels) > 8 else "center", fontsize=8)
    ax.set_ylabel("peak memory per GPU (GiB)")
    if "sweep_field" in df.columns:
        ax.set_xlabel(str(df["sweep_field"].iloc[0]))
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    subject = _subject(df)
    ax.set_title(title or f"Memory per GPU{': ' + subject if subject else ''}")
    return _finish(fig, path, df)


# --------------------------------------------------------------------------------------------
# Roofline
# --------------------------------------------------------------------------------------------

def roofline(ops: pd.DataFrame, path: str | Path | None = None, *, title: str | None = None) -> Figure:
    """A layer's operations (``api.layer_ops``) on the GPU's roofline, log-log.

    x: arithmetic intensity (FLOP per byte of compulsory HBM traffic); y: achieved TFLOP/s as
    the simulator times each op. Solid: the datasheet roofline min(peak, I x HBM bandwidth);
    dashed: the ceiling the efficiency model allows (plateau GEMM rate, achieved bandwidth).
    """
    df = _checked(ops, ROOFLINE_COLUMNS, path)
    peak = float(df["peak_tflop_per_s"].iloc[0])
    bw = float(df["hbm_tb_per_s"].iloc[0])
    apeak = float(df["achieved_peak_tflop_per_s"].iloc[0])
    abw = float(df["achieved_hbm_tb_per_s"].iloc[0])
    lo = min(1.0, float(df["intensity_flop_per_byte"].min()) / 3)
    hi = max(peak / bw * 30, float(df["intensity_flop_per_byte"].max()) * 3)
    xs = np.logspace(np.log10(lo), np.log10(hi), 300)
    fig = Figure(figsize=(9, 5.6), dpi=110)
    ax = fig.add_subplot()
    ax.loglog(xs, np.minimum(peak, xs * bw), color="black", linewidth=1.8,
              label=f"datasheet roofline ({peak:.0f} TFLOP/s, {bw:.2f} TB/s)")
    mark = prior_marks(df.iloc[:1])[0]     # the achieved rates are the efficiency model's
    ax.loglog(xs, np.minimum(apeak, xs * abw), color="gray", linestyle="--", linewidth=1.2,
              label=f"achievable ceiling ({apeak:.0f} TFLOP/s{mark}, {abw:.2f} TB/s{mark})")
    ridge = peak / bw
    ax.axvline(ridge, color="black", alpha=0.25, linewidth=0.8)
    ax.text(ridge, peak * 0.02, f"  ridge {ridge:.0f} FLOP/B", fontsize=8, rotation=90, va="bottom", alpha=0.7)
    ops_order = list(dict.fromkeys(df["op"]))
    markers = {"forward": "o", "backward": "s"}
    for _, row in df.iterrows():
        color = _color(row["op"], ops_order)
        ax.scatter(row["intensity_flop_per_byte"], row["achieved_tflop_per_s"], s=55, color=color,
                   marker=markers.get(row.get("pass", "forward"), "o"), zorder=3, edgecolor="black", linewidth=0.5)
    for op in ops_order:      # legend entries, one per op
        ax.scatter([], [], color=_color(op, ops_order), edgecolor="black", linewidth=0.5, s=55, label=op)
    if "pass" in df.columns and (df["pass"] == "backward").any():
        ax.scatter([], [], color="white", edgecolor="black", marker="s", s=55, label="(square: backward pass)")
    ax.legend(fontsize=8, loc="lower right", frameon=True)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of HBM traffic)")
    ax.set_ylabel("achieved throughput (TFLOP/s)")
    ax.set_ylim(min(peak, lo * bw) / 3, peak * 2)
    ax.set_xlim(lo, hi)
    ax.grid(which="both", alpha=0.2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    meta = df.iloc[0]
    ep = f", ep={int(meta['ep'])}" if "groups" in df.columns and (df["groups"] > 1).any() and "ep" in df.columns else ""
    desc = f"{meta.get('model', '')}, tp={int(meta.get('tp', 1))}{ep}, {int(meta.get('tokens', 0))} tokens/micro-batch"
    ax.set_title(title or f"Roofline of one layer's ops on {meta['gpu']} ({meta['dtype']}): {desc}", fontsize=10)
    return _finish(fig, path, ops)


# --------------------------------------------------------------------------------------------
# Pareto frontier
# --------------------------------------------------------------------------------------------

def pareto_mask(df: pd.DataFrame, x: str = "memory_gib", y: str = "tokens_per_s",
                min_share: float | None = None) -> np.ndarray:
    """Rows no other row beats on both axes (lower ``x`` and higher ``y`` are better); with
    ``min_share``, only those with more than that share of the largest ``y`` (``plan --pareto``
    keeps the plans over ``planners.time_pruning.FRONTIER_MIN_SHARE`` of the fastest's tokens/s).
    The planner's own rule (``planners.plan.frontier_mask``)."""
    from planners.plan import frontier_mask
    if not isinstance(df, pd.DataFrame):
        raise InputError("df", f"expected a DataFrame of plans, got {type(df).__name__}")
    for option, name in (("x", x), ("y", y)):
        if name not in df.columns:
            raise InputError(option, f"{name!r} is not a column of the rows", suggest(str(name), map(str, df.columns)))
    return frontier_mask(df[x].to_numpy(dtype=float), df[y].to_numpy(dtype=float), min_share)


def _time_exact(df: pd.DataFrame) -> np.ndarray:
    """Rows whose step time is the exact pipeline makespan: ``pipeline_exact`` not False, or one
    pipeline stage of one chunk (``pp`` 1, ``vpp`` 1), whose flush is its passes in sequence:
    the planner's closed-form estimate (``simulator.step_pipeline.pipeline_pass``: every cell at
    the slowest cell's times) and its lower bound are then that sum, and the planner leaves such
    rows ``pipeline_exact`` False without their time being an estimate (llama3-8b on 16 H100 at a
    batch of 128: 1,905 such rows, each what ``simulate`` gives)."""
    exact = (df["pipeline_exact"].astype(object).ne(False).to_numpy() if "pipeline_exact" in df.columns
             else np.ones(len(df), dtype=bool))
    if "pp" in df.columns:
        one_stage = pd.to_numeric(df["pp"], errors="coerce").to_numpy(dtype=float) == 1
        if "vpp" in df.columns:
            one_stage &= pd.to_numeric(df["vpp"], errors="coerce").fillna(1).to_numpy(dtype=float) <= 1
        exact = exact | one_stage
    return exact


#: short names of the columns ``pareto`` draws by default, for its title (any other: its column name)
_AXIS_NAMES = {"tokens_per_s": "throughput", "memory_gib": "memory"}


def _axis_name(column: str) -> str:
    return _AXIS_NAMES.get(column, column)


def pareto(plans: Any, path: str | Path | None = None, *, x: str = "memory_gib", y: str = "tokens_per_s",
           label: str | None = None, annotate: int = 6, title: str | None = None) -> Figure:
    """Every plan as a point (memory per GPU vs tokens/s) with the Pareto frontier drawn through
    the plans no other plan beats on both; the frontier's fastest plans are labelled.

    On the default axes the frontier is ``plan --pareto``'s: the undominated plans over
    ``FRONTIER_MIN_SHARE`` of the fastest's tokens/s (``PlanResult.pareto``), every one of which
    the planner timed with its exact pipeline makespan (``planners.refine``); a frontier point
    with ``pipeline_exact`` False (a table from elsewhere) is drawn hollow and named estimated.
    The other plans are grey; their legend says when some carry the planner's closed-form
    estimate of the pipeline time (``pipeline_exact`` False with more than one stage, ``pp`` > 1:
    an upper bound, not what
    ``simulate`` gives) and, when the table holds fewer plans than fit (``attrs["fitting"]``,
    ``api.plan``'s ``max_plans``), how many of how many are drawn."""
    from planners.time_pruning import FRONTIER_MIN_SHARE
    df = _checked(plans, (), path, drawn=(x, y), x=x, y=y, label=label)
    annotate = whole_number("annotate", annotate, minimum=0)
    share = FRONTIER_MIN_SHARE if (x, y) == ("memory_gib", "tokens_per_s") else None
    mask = pareto_mask(df, x, y, share)
    exact = _time_exact(df)
    labels = _labels(df, label)
    fig = Figure(figsize=(9.5, 5.6), dpi=110)
    ax = fig.add_subplot()
    n_other = int((~mask).sum())
    fitting = getattr(plans, "attrs", {}).get("fitting") or df.attrs.get("fitting")
    fitting = int(fitting) if fitting else None
    other = f"other plans ({n_other:,}"
    estimated = int((~exact[~mask]).sum())
    if estimated:
        other += f"; {estimated:,} with estimated pipeline time" if estimated < n_other \
            else ", estimated pipeline time"
    if fitting is not None and fitting > len(df):
        at_least = "" if getattr(plans, "attrs", {}).get("fit_exact", True) else "at least "
        other += f"; {len(df):,} of {at_least}{fitting:,} fitting plans drawn"
    other += ")"
    ax.scatter(df.loc[~mask, x], df.loc[~mask, y], s=12, color="#B0B0B0", alpha=0.6, label=other)
    front = df[mask].sort_values(x)
    floor = f"; over {100 * share:.0f}% of the fastest" if share is not None else ""
    ax.plot(front[x], front[y], "-", color="#C44E52", linewidth=1.5, zorder=3)
    front_exact = exact[front.index.to_numpy()]
    ax.plot(front.loc[front_exact, x], front.loc[front_exact, y], "o", color="#C44E52", markersize=6, zorder=4,
            label=f"Pareto frontier ({len(front)}{floor})")
    if (~front_exact).any():
        ax.plot(front.loc[~front_exact, x], front.loc[~front_exact, y], "o", markerfacecolor="white",
                markeredgecolor="#C44E52", markersize=6, zorder=4,
                label=f"frontier, estimated pipeline time ({int((~front_exact).sum())})")
    if "hbm_gib" in df.columns and x == "memory_gib":
        hbm = float(df["hbm_gib"].iloc[0])
        ax.axvline(hbm, color="black", linestyle="--", linewidth=1, label=f"HBM ({hbm:.0f} GiB)")
    # number the frontier's fastest plans and list them in a box (labels beside crowded points overlap)
    shown = front.sort_values(y, ascending=False).head(annotate)
    legend_lines = []
    marks = prior_marks(df)
    for rank, (i, row) in enumerate(shown.iterrows(), start=1):
        ax.annotate(str(rank), (row[x], row[y]), xytext=(-3, 6 if rank % 2 else -14), textcoords="offset points",
                    fontsize=8, fontweight="bold", color="#C44E52", ha="right")
        legend_lines.append(f"{rank}. {labels[i]}  ({_thousands(row[y])} tok/s{marks[i]}, {row[x]:.1f} GiB)"
                            if y == "tokens_per_s" and x == "memory_gib" else f"{rank}. {labels[i]}")
    if legend_lines:     # numbered by y, highest first: 'fastest' only when y is the throughput
        ranked = "fastest" if y == "tokens_per_s" else f"highest {_axis_name(y)}"
        ax.text(0.98, 0.3, f"{ranked} on the frontier:\n" + "\n".join(legend_lines), transform=ax.transAxes,
                fontsize=7, ha="right", va="bottom", family="monospace", multialignment="left",
                bbox=dict(boxstyle="round", facecolor="white", edgecolor="#C44E52", alpha=0.9))
    ax.set_xlabel("peak memory per GPU (GiB)" if x == "memory_gib" else x)
    ax.set_ylabel("throughput (tokens/s)" if y == "tokens_per_s" else y)
    _count_axis(ax.yaxis)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    subject = _subject(df)
    ax.set_title(title or f"Plans: {_axis_name(y)} vs {_axis_name(x)}{': ' + subject if subject else ''}",
                 fontsize=10)
    return _finish(fig, path, df)


# --------------------------------------------------------------------------------------------
# Scaling
# --------------------------------------------------------------------------------------------

def scaling(data: Any, path: str | Path | None = None, *, x: str = "n_gpus", hue: str | None = None,
            title: str | None = None) -> Figure:
    """Tokens/s (left axis) and MFU (right axis, dashed) against ``x``, one line per ``hue``
    value. Against the GPU count each point is marked with its share of ideal linear scaling from
    its series' smallest count (drawn dotted); against any other numeric field (tp at a fixed GPU
    count) linear scaling means nothing, and each point is marked with its share of its series'
    fastest point instead. Rows that do not fit in memory (``fits`` False) are crossed.

    ``x`` must be a numeric column (a categorical one, ``cluster`` or ``gpu``, is compared with
    :func:`breakdown`). ``hue`` defaults to whichever of ``model``, ``cluster`` and ``gpu`` varies
    across the rows (one line each, not one zig-zag line through all of them); where several vary
    and none of them alone tells the series apart, name ``hue=``."""
    df = _checked(data, ("tokens_per_s",), path, x=x, hue=hue)
    _require_numeric(df, x, "compare clusters, GPUs or models at one setting with plots.breakdown")
    hue = hue if hue is not None else _default_hue(df, x)
    df = _checked(df, ("tokens_per_s",), drawn=(x, "tokens_per_s"), x=x)
    df = df.sort_values(x, kind="stable").reset_index(drop=True)
    fig = Figure(figsize=(8.5, 5), dpi=110)
    ax = fig.add_subplot()
    ax2 = ax.twinx()
    gpu_axis = x in GPU_COUNT_FIELDS
    mfu_all = _mfu_pct(df)
    mfu_all = mfu_all.to_numpy(dtype=float) if mfu_all is not None else np.full(len(df), np.nan)
    groups: Iterable = df.groupby(hue, sort=True) if hue else [(None, df)]
    top, mfu_top = [0.0], [0.0]
    for series, (key, g) in enumerate(groups):
        color = "#4C72B0" if hue is None else f"C{series % 10}"     # matplotlib's distinct cycle
        key = key[0] if isinstance(key, tuple) and len(key) == 1 else key
        xs = g[x].to_numpy(dtype=float)
        tps = g["tokens_per_s"].to_numpy(dtype=float)
        ax.plot(xs, tps, "-o", color=color, label="tokens/s (predicted)" if hue is None else str(key))
        ok = np.isfinite(tps)
        top.append(float(np.nanmax(tps)) if ok.any() else 0.0)
        if ok.any() and gpu_axis:
            i0 = int(np.argmax(ok))
            ideal = tps[i0] * xs / xs[i0]
            top.append(float(np.nanmax(ideal)))
            label = f"linear scaling from {xs[i0]:g} GPUs" if hue is None else \
                ("linear scaling from each series' smallest count" if series == 0 else None)
            ax.plot(xs, ideal, ":", color=color, alpha=0.6, label=label)
        elif ok.any():
            ideal = np.full(len(xs), float(np.nanmax(tps)))
        if ok.any():
            for xi, t, ide, mark in zip(xs, tps, ideal, prior_marks(g)):
                if np.isfinite(t):
                    ax.annotate(f"{100 * t / ide:.0f}%{mark}", (xi, t), xytext=(-4, 8), textcoords="offset points",
                                ha="right", fontsize=8, color=color)
        mfu = mfu_all[g.index.to_numpy()]
        mfu_color = "#DD8452" if hue is None else color
        mfu_label = "MFU" if hue is None else ("MFU (dashed, right axis)" if series == 0 else None)
        ax2.plot(xs, mfu, "-s" if hue is None else "--s", color=mfu_color, label=mfu_label,
                 alpha=1.0 if hue is None else 0.6, markersize=4 if hue else 6)
        if np.isfinite(mfu).any():
            mfu_top.append(float(np.nanmax(mfu)))
    xs_all = np.unique(df[x].to_numpy(dtype=float))
    _x_axis(ax, xs_all)
    ax.set_xlabel("GPUs" if gpu_axis else x)
    ax.set_ylabel("throughput (tokens/s); % = of " + ("linear scaling" if gpu_axis else "the fastest point"))
    ax.set_ylim(0, max(top) * 1.1)
    _count_axis(ax.yaxis)
    ax.grid(alpha=0.3)
    ax2.set_ylabel(f"MFU (% of the {_mfu_reference(df)} peak)", color="#DD8452" if hue is None else "black")
    ax2.set_ylim(0, max(60.0, max(mfu_top) * 1.2))
    _cross_unfit(ax, df, x)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    subject = " ".join(str(df[c].iloc[0]) for c in ("model", "gpu") if c in df.columns and df[c].nunique() == 1)
    heading = "Scaling" if gpu_axis else f"Throughput vs {x}"
    ax.set_title(title or f"{heading}{': ' + subject if subject else ''}", fontsize=10)
    return _finish(fig, path, df)


def _log_axis(xs: np.ndarray) -> bool:
    """True when every ``x`` is above zero: GPU counts and bandwidths double, so a log2 axis
    spaces them evenly; a log axis cannot show zero or a negative value (matplotlib drops
    those points without a word: offload_activation_layers 0 vanished)."""
    return bool(len(xs)) and bool((np.asarray(xs, dtype=float) > 0).all())


def _x_axis(ax, xs: np.ndarray) -> None:
    """A log2 x axis when every value of ``xs`` is above zero, else a linear one; a tick at each."""
    if _log_axis(xs):
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{v:g}" for v in xs])


#: the columns :func:`scaling` draws one line per value of when they vary and ``hue`` is not given
SERIES_FIELDS = ("model", "cluster", "gpu")


def _require_numeric(df: pd.DataFrame, x: str, other: str) -> None:
    """``InputError`` naming ``x`` when its column holds values that are not numbers (a cluster
    name): such a column has no scale to draw a line along (it said 'none of the 6 rows has a
    finite cluster'); ``other`` says what draws it."""
    values = df[x].dropna()
    if len(values) and pd.to_numeric(values.astype(object), errors="coerce").isna().any():
        raise InputError("x", f"{x!r} is not numeric (e.g. {str(values.iloc[0])!r}): x must be a number to draw "
                         "along, such as n_gpus, tp or a bandwidth", other)


def _default_hue(df: pd.DataFrame, x: str) -> str | None:
    """The one of ``SERIES_FIELDS`` that tells apart the series the rows hold, or None when none
    varies; ``InputError`` naming ``hue=`` when several vary and none alone tells them apart (a
    cluster that fixes the GPU is enough: a sweep over clusters varies both)."""
    varying = [c for c in SERIES_FIELDS if c in df.columns and c != x and df[c].nunique(dropna=True) > 1]
    if not varying:
        return None
    together = len(df.groupby(varying, dropna=False, sort=False))
    for c in varying:
        if df[c].nunique(dropna=False) == together:
            return c
    raise InputError("hue", f"the rows vary in {' and '.join(varying)}: give hue= one of them (one line per "
                     "value), or plot each subset on its own", f"e.g. plots.scaling(rows, hue={varying[0]!r})")


#: columns that hold a job's GPU count (``scaling``'s default axis)
GPU_COUNT_FIELDS = ("n_gpus", "gpus")


def unfit_mask(df: pd.DataFrame) -> np.ndarray:
    """True for the rows that do not fit in memory (``fits`` False); all False without the column."""
    if "fits" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return df["fits"].astype(object).eq(False).to_numpy()


def _cross_unfit(ax, df: pd.DataFrame, x: str, y: str = "tokens_per_s") -> None:
    """A black cross (legend: ``UNFIT_LABEL``) on each point of a row that does not fit."""
    bad = unfit_mask(df)
    if bad.any():
        ax.scatter(df.loc[bad, x], df.loc[bad, y], marker="x", s=80, color="black", zorder=4,
                   label=UNFIT_LABEL)


# --------------------------------------------------------------------------------------------
# Network bandwidth sensitivity
# --------------------------------------------------------------------------------------------

def bandwidth(data: Any, path: str | Path | None = None, *, x: str = "scaleout_gbit_per_s",
              hue: str | None = None, title: str | None = None) -> Figure:
    """Left: tokens/s against a link's bandwidth (one line per ``hue`` value), each point marked
    with its change relative to its own series' highest bandwidth (the highest ``x``, for another
    numeric field) and crossed where the row does not fit in memory (``fits`` False); right: the
    exposed communication parts (seconds per step), one stacked bar per series at each ``x``,
    side by side and outlined in the series' line colour.

    ``hue`` defaults as :func:`scaling`'s: whichever of ``model``, ``cluster`` and ``gpu`` varies
    across the rows (two systems' sweeps were drawn as one zig-zag line, each point's change
    taken against the other system's fastest row, and their communication bars stacked on each
    other)."""
    df = _checked(data, ("tokens_per_s",), path, x=x, hue=hue)
    _require_numeric(df, x, "compare clusters, GPUs or models at one setting with plots.breakdown")
    hue = hue if hue is not None else _default_hue(df, x)
    df = _checked(df, ("tokens_per_s",), drawn=(x, "tokens_per_s"), x=x)
    fig = Figure(figsize=(12, 4.8), dpi=110)
    ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    groups: Iterable = df.groupby(hue, sort=False) if hue else [(None, df)]
    series_rows, series_keys, series_colors = [], [], []
    for series, (key, g) in enumerate(groups):
        key = key[0] if isinstance(key, tuple) and len(key) == 1 else key
        g = g.sort_values(x)
        xs = g[x].to_numpy(dtype=float)
        tps = g["tokens_per_s"].to_numpy(dtype=float)
        line, = ax.plot(xs, tps, "-o", label=str(key) if key is not None else "tokens/s")
        ref = tps[-1]
        for xi, t, mark in zip(xs, tps, prior_marks(g)):   # alternate above / below: coinciding series stay readable
            ax.annotate(f"{100 * (t / ref - 1):+.1f}%{mark}", (xi, t), xytext=(0, 7 if series % 2 == 0 else -14),
                        textcoords="offset points", ha="center", fontsize=8, color=line.get_color())
        series_rows.append(g)
        series_keys.append(key)
        series_colors.append(line.get_color())
    _cross_unfit(ax, df, x)
    xs_all = np.sort(df[x].unique().astype(float))
    for a in (ax, ax2):
        _x_axis(a, xs_all)
        a.set_xlabel(_bw_label(x))
        a.grid(alpha=0.3)
    ax.set_ylabel("throughput (tokens/s)")
    lo, hi = float(df["tokens_per_s"].min()), float(df["tokens_per_s"].max())
    ax.set_ylim(lo - 0.15 * (hi - lo) - 0.02 * hi, hi + 0.15 * (hi - lo) + 0.02 * hi)
    _count_axis(ax.yaxis)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"throughput (% vs the highest {'bandwidth' if x in BANDWIDTH_FIELDS else x}"
                 f"{' of each series' if len(series_rows) > 1 else ''})", fontsize=9)
    parts = [p for p in COMM_PARTS if p in df.columns and df[p].fillna(0).sum() > 0]
    n = len(series_rows)
    if _log_axis(xs_all):   # half the narrowest gap, in octaves, shared by the series' bars
        width = np.diff(np.log2(xs_all)).min() * 0.5 if len(xs_all) > 1 else 0.5
        edges = lambda fx, k: (fx * 2 ** (-width / 2 + k * width / n), fx * 2 ** (-width / 2 + (k + 1) * width / n))
    else:                   # a zero or negative x: half the narrowest gap, in x's own units
        width = np.diff(xs_all).min() * 0.5 if len(xs_all) > 1 else 1.0
        edges = lambda fx, k: (fx - width / 2 + k * width / n, fx - width / 2 + (k + 1) * width / n)
    labelled: set[str] = set()
    for k, (g, color) in enumerate(zip(series_rows, series_colors)):
        left_edge, right_edge = edges(g[x].to_numpy(dtype=float), k)
        bottom = np.zeros(len(g))
        for part in parts:
            vals = g[part].fillna(0).to_numpy(dtype=float)
            ax2.bar(left_edge, vals, width=right_edge - left_edge, bottom=bottom, align="edge",
                    color=_color(part, TIME_PARTS), label=None if part in labelled else TIME_LABELS.get(part, part),
                    edgecolor=color if n > 1 else "white", linewidth=1.2 if n > 1 else None)
            labelled.add(part)
            bottom += vals
    ax2.set_ylabel("communication on the critical path (s per step)")
    if parts:
        handles, names = ax2.get_legend_handles_labels()
        if n > 1:       # which bar is which series: outlined in the series' line colour, in legend order
            from matplotlib.patches import Patch
            handles += [Patch(facecolor="white", edgecolor=c, linewidth=1.2) for c in series_colors]
            names += [f"{key} (outline)" for key in series_keys]
            ax2.set_ylim(0, ax2.get_ylim()[1] * (1 + 0.08 * len(handles)))      # room for the legend
        ax2.legend(handles, names, fontsize=8, loc="upper right")
    else:       # one GPU: nothing is communicated, and an empty legend warned on stderr
        ax2.text(0.5, 0.5, "no communication on the critical path", transform=ax2.transAxes, ha="center",
                 va="center", fontsize=9, color="0.4")
    series = (f" ({series_keys[0]})" if hue and n == 1 else
              f" (bars left to right: {', '.join(map(str, series_keys))})" if n > 1 else "")
    ax2.set_title(f"exposed communication{series}", fontsize=9)
    subject = _subject(df)
    fig.suptitle(title or f"Sensitivity to {_bw_label(x).split(' (')[0]}{': ' + subject if subject else ''}",
                 fontsize=11)
    fig.tight_layout()
    return _finish(fig, path, df)


#: the link bandwidths ``bandwidth`` draws by default (any other numeric field is drawn as itself)
BANDWIDTH_FIELDS = ("scaleout_gbit_per_s", "scaleup_gbit_per_s")


def _bw_label(x: str) -> str:
    return {"scaleout_gbit_per_s": "scale-out bandwidth per GPU (Gb/s)",
            "scaleup_gbit_per_s": "scale-up (NVLink) bandwidth per GPU (Gb/s)"}.get(x, x)


#: plot kinds by name (used by ``paraplan plot``).
KINDS = {"breakdown": breakdown, "memory": memory, "roofline": roofline, "pareto": pareto,
         "scaling": scaling, "bandwidth": bandwidth}
