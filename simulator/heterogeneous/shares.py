"""Micro-batches per replica group that finish the step soonest (Poplar / HexiScale).

A replica of group g that runs m micro-batches takes ``f_g(m) = fill_g + (m - 1) * t_g``
seconds (the pipeline's stage times summed, then one slowest-stage time per further
micro-batch; ``compose`` folds the once-per-step weight casts and the group's data-parallel
reduction exposed past its own end into fill_g, and the per-micro-batch straggler wait into
both). The step's pipeline part is the largest f_g(m) over every replica, and the shares
minimise it over integer counts, every replica running at least one micro-batch and all of them
M in all (``speed_shares``).

Exact by greedy: hand out the micro-batches one at a time, each to the replica whose finish time
after taking it is smallest. That is optimal for any finish times that grow with m (the discrete
min-max resource allocation problem; Ibaraki & Katoh, "Resource Allocation Problems", MIT Press
1988): write T* for the optimal makespan; f_g grows in m, so the replicas' finish times at or
below T* number at least the M handed out, and the greedy, taking the smallest available each
time, never takes one above T*. Identical replicas of a group have the same finish times, so the
greedy fills a group level by level (all its d_g replicas from m to m + 1 at the same finish
time) and the group's replicas differ by at most one micro-batch: its time is set by
``ceil(total / d_g)``.

Fast start: the real-valued shares that finish every group together solve sum_g d_g m_g = M
with m_g = 1 + (T - fill_g) / t_g,

    T = (M - sum_g d_g + sum_g d_g fill_g / t_g) / sum_g (d_g / t_g)

(a group that would get fewer than one micro-batch gets one, and the rest is solved again).
That T lower-bounds T*, so every group's floor(m_g) is a prefix of the greedy order; the greedy
then adds the few micro-batches left, a whole level of a group at a time, vectorized over plans.
Zhang et al., "Poplar" (AAAI 2025) and Yan et al., "HexiScale" (2024) assign batch in proportion
to measured speed; rounding those shares (largest remainder, then the busiest replica's ceiling)
could cost more than a whole micro-batch of the slow group, and made a faster GPU give a slower
step. Both need a framework that accepts uneven per-rank batches.
"""
from __future__ import annotations

import numpy as np


def per_replica(replicas: int, busiest: int, total: int) -> list[int]:
    """Micro-batches of each replica of a group whose busiest replica runs ``busiest`` and which
    runs ``total`` in all (the greedy fills a group level by level, so its replicas differ by at
    most one; the first replicas take the extra ones)."""
    n_busy = total - replicas * (busiest - 1)
    return [busiest if r < n_busy else busiest - 1 for r in range(replicas)]


def balanced_shares(plan, d, fill, t, M) -> np.ndarray:
    """(G,) real micro-batches per replica that finish every group of a plan together (module
    doc), at least one each. All (G,) arrays but ``M`` (P,); seconds for ``fill`` and ``t``."""
    n_plans = len(M)
    pinned = np.zeros(len(d), dtype=bool)
    m = np.ones(len(d))
    budget = M - np.bincount(plan, weights=d, minlength=n_plans)
    for _ in range(len(d) + 1):
        free = ~pinned
        rate = np.bincount(plan, weights=np.where(free, d / t, 0.0), minlength=n_plans)
        lead = np.bincount(plan, weights=np.where(free, d * fill / t, 0.0), minlength=n_plans)
        T = (budget + lead) / np.where(rate > 0, rate, 1.0)
        m = np.where(pinned, 1.0, 1.0 + (T[plan] - fill) / t)
        short = free & (m < 1.0)
        if not short.any():
            break
        pinned |= short
    return np.maximum(m, 1.0)


def _first_min_per_run(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per contiguous run (first index ``starts``), the index of the first smallest value."""
    low = np.minimum.reduceat(values, starts)
    run = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(values))))
    where = np.where(values == low[run], np.arange(len(values)), len(values))
    return np.minimum.reduceat(where, starts)


def speed_shares(plan_of_group, replicas, fill_s, slowest_s, total_microbatches) -> tuple[np.ndarray, np.ndarray]:
    """(micro-batches of the busiest replica of each group, micro-batches of each group in all)
    that minimise the largest replica finish time ``fill + (m - 1) * slowest`` (module doc).

    Args:
        plan_of_group: (G,) plan index of each group (groups of a plan contiguous, plans 0..P-1).
        replicas: (G,) replicas per group; fill_s, slowest_s: (G,) seconds (see module doc).
        total_microbatches: (P,) micro-batches per step of each plan (a plan with fewer than its
            replicas gives each replica one).

    Ties in finish time go to the group listed first.
    """
    plan = np.asarray(plan_of_group, dtype=np.int64)
    d = np.asarray(replicas, dtype=np.int64)
    fill = np.asarray(fill_s, dtype=float)
    t = np.maximum(np.asarray(slowest_s, dtype=float), 1e-300)
    M = np.asarray(total_microbatches, dtype=float)
    n_plans = len(M)
    m_real = balanced_shares(plan, d.astype(float), fill, t, M)
    # per replica: floor of the balanced share (a prefix of the greedy order, see module doc)
    level = np.maximum(np.floor(m_real - 1e-9), 1.0)
    total = d * level
    left = np.maximum(M - np.bincount(plan, weights=total, minlength=n_plans), 0.0)
    busiest = level.copy()
    active = np.flatnonzero(left[plan] > 0)
    while len(active):
        p = plan[active]
        starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])
        # the next micro-batch of a group of ``level`` per replica finishes at fill + level * t
        pick = active[_first_min_per_run(fill[active] + level[active] * t[active], starts)]
        take = np.minimum(left[plan[pick]], d[pick])
        total[pick] += take
        busiest[pick] = level[pick] + 1.0
        level[pick] += 1.0
        left[plan[pick]] -= take
        active = active[left[plan[active]] > 0]
    return busiest, total
