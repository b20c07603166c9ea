"""Micro-batches per replica group, in proportion to each group's speed (Poplar / HexiScale).

A replica of group g that runs m micro-batches takes ``fill_g + (m - 1) * t_g`` seconds (the
pipeline's stage times summed, then one slowest-stage time per further micro-batch). The
shares that finish every group together solve sum_g d_g m_g = M (M micro-batches per step, d_g
replicas) with m_g = 1 + (T - fill_g) / t_g:

    T = (M - sum_g d_g + sum_g d_g fill_g / t_g) / sum_g (d_g / t_g)

A group that would get fewer than one micro-batch gets one and the rest is solved again. The
real shares are then made integers by largest remainder over each group's total, and a
group's replicas split its total as evenly as integers allow (they differ by at most one), so
the group's time is set by its replicas with ``ceil(total / d_g)``. Zhang et al., "Poplar"
(AAAI 2025) and Yan et al., "HexiScale" (2024) assign batch in proportion to measured speed the
same way; both need a framework that accepts uneven per-rank batches.
"""
from __future__ import annotations

import numpy as np


def speed_shares(plan_of_group, replicas, fill_s, slowest_s, total_microbatches) -> tuple[np.ndarray, np.ndarray]:
    """(micro-batches of the busiest replica of each group, micro-batches of each group in all).

    Args:
        plan_of_group: (G,) plan index of each group (groups of a plan contiguous, plans 0..P-1).
        replicas: (G,) replicas per group; fill_s, slowest_s: (G,) seconds (see module doc).
        total_microbatches: (P,) micro-batches per step of each plan.
    """
    plan = np.asarray(plan_of_group, dtype=np.int64)
    d = np.asarray(replicas, dtype=float)
    fill = np.asarray(fill_s, dtype=float)
    t = np.maximum(np.asarray(slowest_s, dtype=float), 1e-300)
    M = np.asarray(total_microbatches, dtype=float)
    n_plans = len(M)
    pinned = np.zeros(len(d), dtype=bool)
    m = np.ones(len(d))
    for _ in range(len(d) + 1):
        free = ~pinned
        rate = np.bincount(plan, weights=np.where(free, d / t, 0.0), minlength=n_plans)
        budget = M - np.bincount(plan, weights=np.where(free, d, 0.0) + np.where(pinned, d, 0.0), minlength=n_plans)
        lead = np.bincount(plan, weights=np.where(free, d * fill / t, 0.0), minlength=n_plans)
        T = (budget + lead) / np.where(rate > 0, rate, 1.0)
        m = np.where(pinned, 1.0, 1.0 + (T[plan] - fill) / t)
        short = free & (m < 1.0)
        if not short.any():
            break
        pinned |= short
    m = np.maximum(m, 1.0)
    q = d * m
    total = np.floor(q + 1e-9)
    rest = M - np.bincount(plan, weights=total, minlength=n_plans)      # whole micro-batches left
    frac = q - total
    order = np.lexsort((-frac, plan))                                    # by plan, largest remainder first
    rank = np.empty(len(d), dtype=np.int64)
    starts = np.searchsorted(plan[order], np.arange(n_plans))
    rank[order] = np.arange(len(d)) - starts[plan[order]]
    total = total + (rank < rest[plan])
    return np.ceil(total / d - 1e-12), total
