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
