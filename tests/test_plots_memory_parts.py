"""``plots.memory`` draws every memory part ``api`` rows carry: its labels come from
``simulator.report.MEMORY_PARTS``, so the stacked bars reach the total written above them."""
from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

from paraplan import api, plots  # noqa: E402


@pytest.fixture(scope="module")
def zero3_full_recompute():
    """Llama-3-70B on 256 H100, tp4 pp4 at micro-batch 2 with full recompute: its recompute
    buffers (0.98 GiB) are part of the peak. (It was ZeRO-3 at pp 1, 28.43 GiB, until the loss's
    stage held the larger of its logits and its recompute buffer: there the buffer hides under
    the logits the loss frees first.)"""
    return api.simulate("llama3-70b", "dgx-h100", tp=4, pp=4, micro_batch=2, zero_stage=1, recompute="full",
                        sequence_parallel=True, gpus=256, global_batch_tokens=4 * 2**20)


def _tops(ax) -> list[float]:
    tops: dict[float, float] = {}
    for patch in ax.patches:
        x = round(patch.get_x() + patch.get_width() / 2, 6)
        tops[x] = max(tops.get(x, 0.0), patch.get_y() + patch.get_height())
    return list(tops.values())


def test_memory_labels_name_every_memory_column_in_order():
    assert tuple(plots.MEMORY_LABELS) == api.MEMORY_COLUMNS
    assert plots.MEMORY_LABELS["recompute_buffers_gib"] == "recompute buffers"
    assert plots.MEMORY_LABELS["moe_dispatch_gib"] == "MoE dispatch buffers"


def test_the_memory_bars_stack_to_the_rows_peak(zero3_full_recompute):
    row = zero3_full_recompute.iloc[0]
    assert row["recompute_buffers_gib"] > 0.5
    parts = sum(row[c] for c in api.MEMORY_COLUMNS)
    assert parts == pytest.approx(row["memory_gib"], rel=1e-9)
    ax = plots.memory(zero3_full_recompute).axes[0]
    assert _tops(ax) == pytest.approx([row["memory_gib"]], rel=1e-9)
    assert "recompute buffers" in [t.get_text() for t in ax.get_legend().get_texts()]


def _total_label(ax):
    return next(t for t in ax.texts if t.get_text().replace(".", "").isdigit())


def test_a_total_near_the_hbm_line_is_written_inside_its_bar_only_where_the_bar_reaches_it(zero3_full_recompute):
    df = zero3_full_recompute.copy()
    df["hbm_gib"] = df["memory_gib"]               # the total sits on the HBM line
    label = _total_label(plots.memory(df).axes[0])
    assert label.get_color() == "white" and label.get_position()[1] < df["memory_gib"].iloc[0]
    # a table whose parts fall short of its total: white above the bar would be unreadable
    short = df.drop(columns=["recompute_buffers_gib"])
    label = _total_label(plots.memory(short).axes[0])
    assert label.get_color() != "white"
