"""Findings of a review of the notebook (Python) plotting API: ``plots.scaling`` and
``plots.bandwidth`` against a field that reaches zero, ``plots.pareto``'s title and box, and
``plots.bandwidth`` against a column that is not a number."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hardware_specs.errors import InputError
from paraplan import plots


def _offload_rows() -> pd.DataFrame:
    """A sweep over offload_activation_layers 0, 10, 40 (the review's repro, tokens/s made up)."""
    return pd.DataFrame({"offload_activation_layers": [0, 10, 40], "tokens_per_s": [58_000.0, 52_000.0, 40_000.0],
                         "step_time_s": [18.0, 20.0, 26.0], "fits": [True, True, True]})


def _points_inside(ax) -> list[tuple[float, float]]:
    """The tokens/s line's points that fall outside the axis's x limits."""
    lo, hi = sorted(ax.get_xlim())
    line = ax.get_lines()[0]
    return [(x, y) for x, y in zip(line.get_xdata(), line.get_ydata()) if not lo <= x <= hi]


@pytest.mark.parametrize("draw", [plots.scaling, plots.bandwidth])
def test_a_zero_x_is_drawn_on_a_linear_axis(draw):
    """A log2 axis dropped the offload_activation_layers 0 row without a word (xlim 9.3 .. 42.9)."""
    fig = draw(_offload_rows(), x="offload_activation_layers")
    ax = fig.axes[0]
    assert ax.get_xscale() == "linear"
    assert list(ax.get_lines()[0].get_xdata()) == [0, 10, 40]
    assert _points_inside(ax) == []
    assert ax.get_xlim()[0] < 0 < 40 < ax.get_xlim()[1]


@pytest.mark.parametrize("draw", [plots.scaling, plots.bandwidth])
def test_positive_x_keeps_the_log2_axis(draw):
    rows = _offload_rows().assign(offload_activation_layers=[1, 10, 40])
    ax = draw(rows, x="offload_activation_layers").axes[0]
    assert ax.get_xscale() == "log" and _points_inside(ax) == []


def _plans() -> pd.DataFrame:
    """Three plans: b is the fastest, c has the highest MFU, a the least memory (none dominates)."""
    return pd.DataFrame({"config": ["a", "b", "c"], "memory_gib": [20.0, 60.0, 40.0],
                         "tokens_per_s": [10_000.0, 30_000.0, 20_000.0], "mfu_bf16_pct": [30.0, 40.0, 50.0],
                         "step_time_s": [3.0, 1.0, 1.5]})


def _box(ax) -> str:
    return next(t.get_text() for t in ax.texts if "on the frontier" in t.get_text())


def test_pareto_title_and_box_name_the_axes_drawn():
    """Title 'Plans: throughput vs memory' and 'fastest on the frontier' were fixed strings
    whatever x and y were drawn."""
    ax = plots.pareto(_plans()).axes[0]
    assert ax.get_title() == "Plans: throughput vs memory"
    assert _box(ax).startswith("fastest on the frontier:")
    ax = plots.pareto(_plans(), x="step_time_s", y="mfu_bf16_pct").axes[0]
    assert ax.get_title() == "Plans: mfu_bf16_pct vs step_time_s"
    box = _box(ax)
    assert box.startswith("highest mfu_bf16_pct on the frontier:") and "fastest" not in box
    # ranked by y: c (50 %) before b (40 %); a (30 %, 3 s) is dominated by b (40 %, 1 s) and c
    assert box.splitlines()[1:] == ["1. c", "2. b"]


def test_bandwidth_against_a_column_that_is_not_a_number_names_x():
    """It said 'none of the rows has a finite cluster', as scaling did before its own check."""
    rows = pd.DataFrame({"cluster": ["dgx-h100", "dgx-a100"], "tokens_per_s": [2.0, 1.0]})
    for draw in (plots.bandwidth, plots.scaling):
        with pytest.raises(InputError) as e:
            draw(rows, x="cluster")
        assert e.value.field == "x" and "is not numeric" in str(e.value) and "finite" not in str(e.value)
