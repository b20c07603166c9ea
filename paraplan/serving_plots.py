"""Serving figures: the Pareto front of tokens/s per GPU against tokens/s per user.

Built on ``matplotlib.figure.Figure`` (no pyplot state, no display), like ``paraplan.plots``.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

MODE_STYLE = {"agg": ("#4C72B0", "o", "aggregated"), "disagg": ("#C44E52", "s", "disaggregated")}


def serving_pareto(front: pd.DataFrame, path: str | Path | None = None, *, tpot_ms: float | None = None,
                   title: str | None = None, ax=None, label_prefix: str = "", linestyle: str = "-",
                   note: str | None = None) -> Figure:
    """Plot each mode's front (columns mode, tokens_per_s_per_user, tokens_per_s_per_gpu); a
    vertical line at 1000 / ``tpot_ms`` marks the TPOT objective (layouts right of it meet it).
    ``ax`` draws into an existing axis (several fronts on one plot, told apart by
    ``label_prefix`` and ``linestyle``). ``note``: the priors the front rests on
    (``paraplan.serving_priors.notes``), printed in red above the title as the training figures
    print theirs (``paraplan.plots.prior_note``). Writes ``path`` if given."""
    fig = ax.figure if ax is not None else Figure(figsize=(7.0, 4.6), dpi=120)
    ax = ax if ax is not None else fig.add_subplot()
    for mode, g in front.groupby("mode"):
        color, marker, name = MODE_STYLE.get(mode, ("#555555", "^", mode))
        g = g.sort_values("tokens_per_s_per_user")
        ax.plot(g.tokens_per_s_per_user, g.tokens_per_s_per_gpu, marker=marker, color=color, linewidth=1.5,
                markersize=5, linestyle=linestyle, label=f"{label_prefix}{name}")
    if tpot_ms:
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
