"""Pareto front of two maximised objectives, vectorized (sort by one, running max of the other)."""
from __future__ import annotations

import numpy as np


def pareto_front(x, y) -> np.ndarray:
    """Indices of the points no other point beats in both ``x`` and ``y`` (both maximised),
    ordered by decreasing ``x``. Ties in x keep the best y; NaNs are never on the front."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    if ok.size == 0:
        return ok
    order = ok[np.lexsort((-y[ok], -x[ok]))]          # x descending, then y descending
    ys = y[order]
    best_before = np.concatenate(([-np.inf], np.maximum.accumulate(ys)[:-1]))
    return order[ys > best_before]
