"""A row with NaN memory or tokens/s is never on the frontier and leaves the others as they are:
``np.maximum.accumulate`` carried the NaN forward, so every row after it (by memory) was
dropped: memory 10/20/30/40 GiB at 1/NaN/3/4 tokens/s kept only the first row."""
from __future__ import annotations

import numpy as np
import pandas as pd

from paraplan import plots
from planners.plan import frontier_mask


def test_a_nan_value_drops_only_its_own_row():
    df = pd.DataFrame({"memory_gib": [10, 20, 30, 40], "tokens_per_s": [1.0, np.nan, 3.0, 4.0]})
    # 10 GiB at 1, 30 at 3, 40 at 4: each is faster than every smaller one
    assert plots.pareto_mask(df).tolist() == [True, False, True, True]


def test_a_nan_cost_drops_only_its_own_row_and_rows_without_nan_are_unchanged():
    cost = np.array([10.0, np.nan, 30.0, 40.0, 25.0])
    value = np.array([1.0, 9.0, 3.0, 4.0, 0.5])
    # 25 GiB at 0.5 is beaten by 10 GiB at 1; the NaN-memory row (9 tokens/s) is neither kept nor
    # raises the bar for the rest
    assert frontier_mask(cost, value, None).tolist() == [True, False, True, True, False]
    # min_share takes the largest known value: 4 x 0.5 = 2, so 1 tokens/s falls under it
    assert frontier_mask(cost, value, 0.5).tolist() == [False, False, True, True, False]


def test_all_nan_is_an_empty_frontier():
    assert frontier_mask(np.array([1.0, np.nan]), np.array([np.nan, 2.0])).tolist() == [False, False]
