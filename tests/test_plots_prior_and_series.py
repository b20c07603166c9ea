"""Figures of rows from several systems, and the prior mark on the numbers they write
(``paraplan.plots``): ``bandwidth`` drew two systems' sweeps as one zig-zag line, with each
point's change taken against the other system's fastest row and the two systems' communication
stacked in one bar."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from paraplan import api, plots

BASE = dict(model="llama3-8b", cluster="dgx-h100", gpus=16, tp=2, pp=2, global_batch=64, recompute="selective")
BANDWIDTHS = [100, 200, 400, 800]


@pytest.fixture(scope="module")
def two_systems() -> pd.DataFrame:
    return pd.concat([api.sweep(BASE, "scaleout_gbit_per_s", BANDWIDTHS),
                      api.sweep({**BASE, "cluster": "mi300x-node"}, "scaleout_gbit_per_s", BANDWIDTHS)],
                     ignore_index=True)


def test_bandwidth_draws_one_line_per_system_each_against_its_own_fastest_point(two_systems):
    fig = plots.bandwidth(two_systems)
    ax, ax2 = fig.axes[:2]
    assert len(ax.get_lines()) == 2                     # one line per cluster, as plots.scaling draws them
    h100 = two_systems[two_systems.cluster == "dgx-h100"].set_index("scaleout_gbit_per_s").tokens_per_s
    # H100 at 100 Gb/s against H100 at 800 Gb/s: 111,313 / 113,579 - 1 = -2.0%, not -8.0% against
    # the MI300X's 121,038 at 800 Gb/s
    want = f"{100 * (h100[100] / h100[800] - 1):+.1f}%"
    assert want == "-2.0%"
    labels = [t.get_text() for t in ax.texts]
    assert labels[0].startswith(want) and not any(t.startswith("-8.0%") for t in labels)
    # each system's bars: one per system at each bandwidth, each as tall as that system's own
    # exposed communication (TP comm 0.10 s on H100, 0.87 s on MI300X; not their 0.97 s sum)
    comm = [p for p in plots.COMM_PARTS if two_systems[p].sum() > 0]
    per_row = two_systems[comm].sum(axis=1).to_numpy()
    assert len(_bar_tops(ax2)) == len(two_systems) == 8
    assert sorted(np.round(per_row, 9)) == sorted(np.round(list(_bar_tops(ax2).values()), 9))
    assert "dgx-h100" in ax2.get_title() and "mi300x-node" in ax2.get_title()


def _bar_tops(ax) -> dict:
    """The top of each stacked bar, keyed by its left edge."""
    tops: dict[float, float] = {}
    for patch in ax.patches:
        key = round(float(patch.get_x()), 9)
        tops[key] = max(tops.get(key, 0.0), patch.get_y() + patch.get_height())
    return tops


def _note(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts)


def test_numbers_that_rest_on_an_unfitted_prior_carry_the_tables_mark_and_the_note_says_what_it_means(two_systems):
    """The CLI's tables print a prior-based number as '3.0277 *' (``paraplan.priors.MARK``); the
    figures wrote the MI300X's '3.52 s (149k tok/s, MFU 37%)' unmarked, with only a line above."""
    from paraplan.priors import MARK
    assert MARK == "*"
    gpus = api.sweep(BASE, "gpu", ["h100-sxm-80gb", "mi300x", "b200"])
    assert list(gpus.efficiency_fitted) == [True, False, True]          # CDNA3: a prior (paraplan.priors)
    fig = plots.breakdown(gpus)
    h100, mi300x, b200 = (t.get_text() for t in fig.axes[0].texts)
    assert "*" not in h100 and "*" not in b200
    assert mi300x.count(" *") == 3                  # the step time, the tokens/s and the MFU
    assert mi300x.split("(")[0].strip().endswith("s *") and "tok/s *" in mi300x
    assert _note(fig).startswith("* = mi300x: ") and "unfitted prior" in _note(fig) and "mi300x" in _note(fig)

    labels = [t.get_text() for t in plots.bandwidth(two_systems).axes[0].texts]
    assert [t.endswith(" *") for t in labels] == [False] * 4 + [True] * 4      # the MI300X's four points

    scaled = plots.scaling(api.sweep({**BASE, "cluster": "mi300x-node"}, "gpus", [8, 16]))
    assert [t.get_text()[-2:] for t in scaled.axes[0].texts] == [" *", " *"]
    fitted = plots.scaling(api.sweep(BASE, "gpus", [8, 16]))
    assert not any("*" in t.get_text() for t in fitted.axes[0].texts) and not _note(fitted)

    roof = plots.roofline(api.layer_ops("llama3-8b", "mi300x-node"))
    ceiling = [lab for lab in roof.axes[0].get_legend_handles_labels()[1] if lab.startswith("achievable")]
    assert ceiling and "TFLOP/s *" in ceiling[0] and "TB/s *" in ceiling[0]
    datasheet = [lab for lab in roof.axes[0].get_legend_handles_labels()[1] if lab.startswith("datasheet")]
    assert "*" not in datasheet[0]                  # the datasheet's numbers rest on no model

    front = plots.pareto(api.plan("llama3-8b", "mi300x-node", 16, global_batch=64), annotate=2)
    box = front.axes[0].texts[-1].get_text()
    assert box.count("tok/s *") == 2 and "GiB *" not in box     # memory rests on no efficiency model
