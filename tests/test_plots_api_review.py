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
