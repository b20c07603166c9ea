"""``validate published --plot`` draws every row: one beyond the y range (which holds 99.5% of
the rows) is a red triangle on the edge, counted in the legend and beside its column. Five
MBRIDGE rows at +45..+53.7% were silently not drawn under a header saying n=231."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from paraplan.validation_plots import published_error_strip


def test_rows_beyond_the_range_are_drawn_at_the_edge_and_counted():
    # 1,000 rows at +-5% and 4 far ones (+50, +53.7, +45, -60%): the 99.5th percentile of |error| is
    # 5%, so the range is the 20% floor (+-20%), and the triangles sit at +-0.97 x 20 = +-19.4%
    speed = [0.05, -0.05] * 500 + [0.50, 0.537, 0.45, -0.60]
    results = pd.DataFrame({"source": ["A"] * 1000 + ["B"] * 4, "status": "ok", "predicted": 1.0, "measured": 1.0,
                            "rel_error": speed, "speed_error": speed})
    fig = published_error_strip(results)
    ax = fig.axes[0]
    assert ax.get_ylim() == pytest.approx((-20.0, 20.0))
    ys = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections if len(c.get_offsets())])
    assert len(ys) == 1004                                     # every row is drawn
    assert sorted(ys[np.abs(ys) > 10]) == pytest.approx([-19.4, 19.4, 19.4, 19.4])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(lab.startswith("4 rows beyond +-19%") for lab in labels), labels
    notes = [t.get_text() for t in ax.texts]
    assert "3 to +54%" in notes and "1 to -60%" in notes, notes
