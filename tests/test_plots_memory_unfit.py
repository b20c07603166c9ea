"""``plots.memory`` marks a row that does not fit and draws the usable memory it is judged
against: HBM less the headroom a run keeps (``simulator.headroom``: 5% of HBM, "4 GiB of an
80 GB H100"). A 76.2 GiB bar sat unmarked under the 80 GiB HBM line while the command said
it does not fit."""
from __future__ import annotations

import pandas as pd
import pytest

from paraplan import api, plots


def _hlines(ax):
    return {round(float(l.get_ydata()[0]), 6): str(l.get_label()) for l in ax.lines if len(set(l.get_ydata())) == 1}


def test_a_bar_under_hbm_but_over_the_usable_memory_is_marked():
    df = pd.DataFrame({"config": ["a", "b"], "memory_gib": [70.0, 76.2], "weights_gib": [70.0, 76.2],
                       "hbm_gib": [80.0, 80.0], "fits": [True, False]})
    ax = plots.memory(df).axes[0]
    lines = _hlines(ax)
    assert 80.0 in lines and 76.0 in lines and "usable" in lines[76.0], lines      # 80 - 0.05 x 80
    labels = [str(t.get_text()) for t in ax.get_legend().get_texts()]
    assert any(lab.startswith("does not fit") for lab in labels), labels
    texts = [t.get_text() for t in ax.texts]
    assert sum("does not fit" in t for t in texts) == 1 and any(t.startswith("76.2") and "does not fit" in t
                                                                for t in texts), texts
    assert any("70.0" == t for t in texts)


def test_the_reviewers_row_is_marked():
    # llama3-70b on 64 H100, tp8 pp4 z1, selective + SP, micro-batch 2, seq 9216: over 76 GiB, under 80
    row = api.simulate("llama3-70b", "dgx-h100", gpus=64, tp=8, pp=4, zero_stage=1, global_batch=128,
                       recompute="selective", sequence_parallel=True, micro_batch=2, seq_len=9216)
    assert not bool(row.fits.iloc[0]) and float(row.memory_gib.iloc[0]) < float(row.hbm_gib.iloc[0])
    ax = plots.memory(row).axes[0]
    assert any("does not fit" in t.get_text() for t in ax.texts)
    assert 76.0 in _hlines(ax)
