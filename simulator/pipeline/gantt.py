"""Gantt chart of a simulated pipeline schedule (matplotlib, Agg backend, PNG).

One row per stage (stage 0 on top); F, B, W and fused BW in distinct colours, chunk 1 and
later drawn with a hatch; idle time shows as the grey row background; micro-batch numbers are
printed inside the bars that are wide enough; the result's prologue (e.g. the weight casts
before the flush) in its own colour. The time axis is in milliseconds.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from simulator.pipeline.event_sim import ScheduleResult  # noqa: E402
from simulator.pipeline.schedules import KIND_NAMES, PipelineSchedule  # noqa: E402

COLORS = {"F": "#4c72b0", "B": "#dd8452", "W": "#55a868", "BW": "#c44e52"}
LABELS = {"F": "F forward", "B": "B input grad", "W": "W weight grad", "BW": "BW backward (B+W fused)"}
PROLOGUE_COLOR = "#8172b3"
IDLE_COLOR = "#e6e6e6"
_MS = 1e3


def draw_gantt(result: ScheduleResult, schedule: PipelineSchedule, path, title: str | None = None,
               width_in: float | None = None, dpi: int = 120) -> Path:
    """Draw the schedule's timeline to the PNG ``path``; returns the path.

    Args:
        title: replaces the default "<schedule> p= m= v=: makespan, bubble" title.
        width_in: figure width in inches (default grows with the op count, 10 to 24).
    """
    s = schedule
    start_ms, dur_ms = result.start_s * _MS, (result.end_s - result.start_s) * _MS
    makespan_ms = result.makespan_s * _MS
    ops_per_stage = s.n_ops / s.p
    width_in = width_in or float(np.clip(ops_per_stage * 0.3, 10, 24))
    height_in = 1.6 + 0.45 * s.p
    fig, ax = plt.subplots(figsize=(width_in, height_in), dpi=dpi)
    rows = s.p - 1 - s.op_stage                               # stage 0 on top
    ax.barh(np.arange(s.p), makespan_ms, left=0, height=0.8, color=IDLE_COLOR, edgecolor="none", zorder=0)
    kinds = np.array(KIND_NAMES)[s.op_kind]
    used = []
    for k, color in COLORS.items():
        sel = kinds == k
        if not sel.any():
            continue
        used.append(k)
        for later_chunk in (False, True):
            part = sel & ((s.op_chunk > 0) == later_chunk)
            if part.any():
                ax.barh(rows[part], dur_ms[part], left=start_ms[part], height=0.8, color=color,
                        edgecolor="white", linewidth=0.5, hatch="///" if later_chunk else None, zorder=2)

    pro = result.prologue
    if pro is not None and pro.stage.size:
        later = pro.chunk > 0
        for part, hatch in ((~later, None), (later, "///")):
            if part.any():
                ax.barh(s.p - 1 - pro.stage[part], (pro.end_s - pro.start_s)[part] * _MS,
                        left=pro.start_s[part] * _MS, height=0.8, color=PROLOGUE_COLOR, edgecolor="white",
                        linewidth=0.5, hatch=hatch, zorder=2)

    axes_px = width_in * dpi * 0.8                           # rough drawable width
    px_per_ms = axes_px / makespan_ms if makespan_ms > 0 else 0.0
    fontsize = 7 if s.p > 8 else 8
    for j in np.nonzero(dur_ms * px_per_ms >= 7 * (1 + len(str(s.m - 1))))[0]:
        ax.text(start_ms[j] + dur_ms[j] / 2, rows[j], str(s.op_mb[j]), ha="center", va="center",
                fontsize=fontsize, color="white", zorder=3)

    ax.set_yticks(np.arange(s.p))
    ax.set_yticklabels([f"stage {i}" for i in reversed(range(s.p))])
    ax.set_xlim(0, makespan_ms * 1.01 if makespan_ms > 0 else 1)
    ax.set_ylim(-0.6, s.p - 0.4)
    ax.set_xlabel("time (ms)")
    ax.set_title(title or f"{s.kind.value}  (p={s.p}, m={s.m}, v={s.v}):  makespan {makespan_ms:.4g} ms,  "
                 f"bubble {100 * result.bubble_fraction:.1f}%")
    handles = [Patch(facecolor=COLORS[k], label=LABELS[k]) for k in used]
    if pro is not None and pro.stage.size:
        handles.append(Patch(facecolor=PROLOGUE_COLOR, label=pro.name))
    if s.v > 1:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="chunk >= 1"))
    handles.append(Patch(facecolor=IDLE_COLOR, label="idle"))
    legend_frac = 0.4 / height_in                             # ~0.4 inch strip under the axes
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=8)
    fig.tight_layout(rect=(0, legend_frac, 1, 1))
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
