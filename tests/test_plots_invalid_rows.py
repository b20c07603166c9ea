"""Rows that cannot be drawn (a sweep's ``invalid`` rows: no step time, no memory) are left out of
``plots.breakdown``, ``memory``, ``pareto`` and ``scaling`` with a note above the figure, never
drawn as blank or partial bars; a table with no drawable row is one ``InputError``."""
from __future__ import annotations

import numpy as np
import pytest

from hardware_specs.errors import InputError
from paraplan import api, plots

GRID = {"search": "simulate", "models": ["llama3-8b"], "clusters": ["dgx-h100"], "gpus": [16],
        "global_batch": [64]}


@pytest.fixture(scope="module")
def mixed():
    """tp 1, 2, 4 simulate; tp=3 does not divide 16 GPUs (status invalid, NaN step and memory)."""
    df = api.sweep_grid({**GRID, "config": {"tp": [1, 2, 3, 4]}})
    assert list(df.status == "invalid") == [False, False, True, False]
    assert np.isnan(df.step_time_s.iloc[2]) and np.isfinite(df.step_time_s.drop(2)).all()
    return df


def _notes(fig):
    return [t.get_text() for t in fig.texts]


def test_breakdown_draws_only_the_rows_with_a_step_time_and_says_one_was_left_out(mixed):
    fig = plots.breakdown(mixed, label="tp")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2", "4"]
    valid = mixed[mixed.status != "invalid"]
    # every drawn bar ends where its step time says (no NaN total drawn as a partial bar)
    ends = {}
    for bar in ax.patches:
        y = round(bar.get_y() + bar.get_height() / 2)
        ends[y] = max(ends.get(y, 0.0), bar.get_x() + bar.get_width())
    assert np.allclose(sorted(ends.values()), sorted(valid.step_time_s), rtol=1e-6)
    assert ax.get_xlim() == pytest.approx((0, valid.step_time_s.max() * 1.45))
    assert "1 row not drawn (no step_time_s, status invalid)" in _notes(fig)


def test_memory_and_pareto_and_scaling_leave_the_invalid_row_out_with_a_note(mixed):
    valid = mixed[mixed.status != "invalid"]
    fig = plots.memory(mixed, label="tp")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1", "2", "4"]
    assert np.isfinite(fig.axes[0].get_ylim()).all()
    assert "1 row not drawn (no memory_gib, status invalid)" in _notes(fig)
    fig = plots.pareto(mixed, label="tp")
    xs = np.concatenate([c.get_offsets()[:, 0] for c in fig.axes[0].collections])
    line = fig.axes[0].lines[0]
    assert sorted(set(np.r_[xs, line.get_xdata()])) == pytest.approx(sorted(valid.memory_gib))
    assert any(n.startswith("1 row not drawn (no memory_gib or tokens_per_s") for n in _notes(fig))
    fig = plots.scaling(mixed, x="tp")
    assert list(fig.axes[0].lines[0].get_xdata()) == [1, 2, 4]
    assert list(fig.axes[0].lines[0].get_ydata()) == pytest.approx(list(valid.tokens_per_s))


@pytest.mark.parametrize("plot, kwargs", [(plots.breakdown, {}), (plots.memory, {}), (plots.pareto, {}),
                                          (plots.scaling, {"x": "tp"}), (plots.bandwidth, {"x": "tp"})])
def test_a_table_with_no_drawable_row_is_one_input_error_not_matplotlibs(plot, kwargs):
    df = api.sweep_grid({**GRID, "config": {"tp": [3, 5]}})
    assert set(df.status) == {"invalid"}
    with pytest.raises(InputError) as err:
        plot(df, **kwargs)
    assert err.value.field == "data" and "no row to plot: none of the 2 rows" in str(err.value)
    assert "16 GPUs do not divide by tp*pp*cp = 3" in str(err.value) and "\n" not in str(err.value)
