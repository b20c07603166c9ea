"""Serving figures: the Pareto front of tokens/s per GPU against tokens/s per user.

Built on ``matplotlib.figure.Figure`` (no pyplot state, no display), like ``paraplan.plots``.
"""
from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from hardware_specs.errors import InputError, require_positive, shown
from paraplan.plots import check_folder

MODE_STYLE = {"agg": ("#4C72B0", "o", "aggregated"), "disagg": ("#C44E52", "s", "disaggregated")}
#: the columns of a front (``ServingPlan.front``) that :func:`serving_pareto` draws
FRONT_COLUMNS = ("mode", "tokens_per_s_per_user", "tokens_per_s_per_gpu")


def _front(front: Any) -> pd.DataFrame:
    """``front`` as the table to draw: a ``ServingPlan`` gives its ``.front``; anything but a
    table with ``FRONT_COLUMNS`` is an ``InputError`` naming ``front`` (an AttributeError on the
    plan itself, a KeyError 'mode' on a training plan's table)."""
    from planners.serving.search import ServingPlan
    if isinstance(front, ServingPlan):
        front = front.front
    if not isinstance(front, pd.DataFrame):
        raise InputError("front", f"expected a serving plan's front (a DataFrame), got {type(front).__name__}",
                         "pass serving_api.serve_plan(...) or its .front")
    missing = [c for c in FRONT_COLUMNS if c not in front.columns]
    if missing:
        raise InputError("front", f"the table lacks the column {missing[0]!r} of a serving front",
                         "pass serving_api.serve_plan(...).front (a training plan's table is drawn by plots.pareto)")
    return front


def _check_tpot(tpot_ms: Any) -> None:
    """``tpot_ms`` is None or a finite number of milliseconds > 0 (text and bools refused: '20'
    raised TypeError in the division, -5 drew the line at -200 tokens/s per user)."""
    if tpot_ms is None:
        return
    if isinstance(tpot_ms, (bool, np.bool_)) or not isinstance(tpot_ms, numbers.Real):
        raise InputError("tpot_ms", f"must be a number of milliseconds, got {shown(tpot_ms)}", "e.g. tpot_ms=20")
    require_positive("tpot_ms", tpot_ms)


def serving_pareto(front: Any, path: str | Path | None = None, *, tpot_ms: float | None = None,
                   title: str | None = None, ax=None, label_prefix: str = "", linestyle: str = "-",
                   note: str | None = None) -> Figure:
    """Plot each mode's front (columns mode, tokens_per_s_per_user, tokens_per_s_per_gpu); a
    vertical line at 1000 / ``tpot_ms`` marks the TPOT objective (layouts right of it meet it).
    ``ax`` draws into an existing axis (several fronts on one plot, told apart by
    ``label_prefix`` and ``linestyle``). ``note``: the priors the front rests on
    (``paraplan.serving_priors.notes``), printed in red above the title as the training figures
    print theirs (``paraplan.plots.prior_note``). Writes ``path`` if given. ``front``: a
    ``ServingPlan`` (its ``.front`` is drawn) or its ``.front``; ``InputError`` naming ``front``,
    ``tpot_ms`` or ``path`` for what cannot be drawn, before anything is."""
    front = _front(front)
    _check_tpot(tpot_ms)
    check_folder(path)
    fig = ax.figure if ax is not None else Figure(figsize=(7.0, 4.6), dpi=120)
    ax = ax if ax is not None else fig.add_subplot()
    for mode, g in front.groupby("mode"):
        color, marker, name = MODE_STYLE.get(mode, ("#555555", "^", mode))
        g = g.sort_values("tokens_per_s_per_user")
        ax.plot(g.tokens_per_s_per_user, g.tokens_per_s_per_gpu, marker=marker, color=color, linewidth=1.5,
                markersize=5, linestyle=linestyle, label=f"{label_prefix}{name}")
    if tpot_ms is not None:
        ax.axvline(1000.0 / tpot_ms, color="#888888", linestyle=linestyle if linestyle != "-" else ":", linewidth=1.2,
                   label=f"{label_prefix}TPOT {tpot_ms:g} ms")
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    if note:
        fig.text(0.5, 1.02, note, fontsize=8, color="#C44E52", ha="center", va="bottom")   # above the title
    if path is not None:
        fig.savefig(path, bbox_inches="tight" if note else None)
    return fig
