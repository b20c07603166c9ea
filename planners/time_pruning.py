"""Which fitting rows need no step time: branch and bound on ``simulator.step_bounds``' floor.

A search keeps, of its fitting rows, the ``keep`` fastest, the throughput-vs-memory frontier
and the fastest of each GPU count (``space_scoring.kept_rows``), after ``refine.refine_exact`` has
timed exactly the rows that can rank. The planner times the rows lowest floor first and stops
timing a row ``i`` once the timed rows ``T`` (refined as a whole) show, with ``f`` its floor
(seconds, at most its estimated step time and its lower bound), ``u = tokens / f`` (at least
its tokens/s):

1. ``u`` is below the ``keep``-th best tokens/s of ``T``, and ``f`` above the largest
   ``top``-th best time any refinement round of ``T`` saw;
2. ``u`` is below the best tokens/s of ``T`` at ``i``'s GPU count, and ``f`` above the
   largest best time of that count any round saw;
3. some row of ``T`` with less memory reached a time <= ``f`` in every round (its largest
   time), and some row of ``T`` with less memory has tokens/s >= ``u``.

Then, round by round, ``i`` never meets a refinement threshold (its lower bound is >= ``f``)
and its estimated time is above the ``top``-th best, its count's best and some row with less
memory, so it changes none of the thresholds; refining all rows does what refining ``T``
did, and ``i`` keeps its estimate. By 1-3, with its tokens/s <= ``u``, it is not among the
``keep`` fastest (nor tied), not its count's fastest and not on the frontier, and removing it
changes no other row's place in them: the kept rows and their numbers are those of timing
every row. Adding rows to ``T`` only lowers these thresholds, so a row once skippable stays so.
"""
from __future__ import annotations

import numpy as np


def skippable(floor_s: np.ndarray, memory_bytes: np.ndarray, n_gpus: np.ndarray, tokens_per_step: float,
              timed_tokens_per_s: np.ndarray, timed_memory_bytes: np.ndarray, timed_n_gpus: np.ndarray,
              trace: dict, keep: int) -> np.ndarray:
    """Mask of the untimed rows (``floor_s``, ``memory_bytes``, ``n_gpus``) that need no step
    time, given the timed rows' refined tokens/s, memory and GPU counts and the refinement's
    ``trace`` (``refine_exact``, over the timed rows in the same order) (see the module)."""
    n = len(floor_s)
    if n == 0 or len(timed_tokens_per_s) < max(keep, 1):
        return np.zeros(n, dtype=bool)
    with np.errstate(divide="ignore"):
        ceiling = tokens_per_step / floor_s                     # at least the row's tokens/s
    kth_best = -np.partition(-timed_tokens_per_s, keep - 1)[keep - 1]
    ok = (ceiling < kth_best) & (floor_s > trace["kth_s"])
    # 2: the best of the row's GPU count (a count no timed row has: the row may be its best)
    gpus = trace["gpus"]
    at = np.clip(np.searchsorted(gpus, n_gpus), 0, len(gpus) - 1)
    known = gpus[at] == n_gpus
    best = np.full(len(gpus), -np.inf)
    np.maximum.at(best, np.searchsorted(gpus, timed_n_gpus), timed_tokens_per_s)
    ok &= known & (ceiling < best[at]) & (floor_s > trace["group_best_s"][at])
    # 3: dominated on the frontier by rows with strictly less memory
    order = np.argsort(timed_memory_bytes, kind="stable")
    below = np.searchsorted(timed_memory_bytes[order], memory_bytes, side="left")   # timed rows with less memory
    least_peak = np.minimum.accumulate(trace["peak_s"][order])
    most_tps = np.maximum.accumulate(timed_tokens_per_s[order])
    j = np.maximum(below - 1, 0)
    ok &= (below > 0) & (least_peak[j] <= floor_s) & (most_tps[j] >= ceiling)
    return ok


def next_to_time(floor_s: np.ndarray, memory_bytes: np.ndarray, n_gpus: np.ndarray, timed_peak_s: np.ndarray,
                 timed_memory_bytes: np.ndarray, timed_n_gpus: np.ndarray, step: int) -> np.ndarray:
    """Indices of the open rows (``floor_s``, ``memory_bytes``, ``n_gpus``: not skippable) to
    time next: the ``step`` lowest floors, and the rows that could still be on the frontier or
    their count's fastest even at their floor (no row with less memory, or of their count, is
    known or hoped to be faster): those are what the other rows wait for to be dominated."""
    pick = np.zeros(len(floor_s), dtype=bool)
    pick[np.argsort(floor_s, kind="stable")[:step]] = True
    # optimistic frontier over the timed rows (their largest time) and the open rows (floor)
    value = np.concatenate([timed_peak_s, floor_s])
    mem = np.concatenate([timed_memory_bytes, memory_bytes])
    order = np.lexsort((value, mem))
    best_before = np.minimum.accumulate(np.concatenate([[np.inf], value[order][:-1]]))
    # rows with equal memory are not "less memory": compare with the best of strictly smaller memory
    sorted_mem = mem[order]
    first_of_equal = np.searchsorted(sorted_mem, sorted_mem, side="left")
    frontier = value[order] < best_before[first_of_equal]
    is_open = order >= len(timed_peak_s)
    pick[order[frontier & is_open] - len(timed_peak_s)] = True
    # each GPU count's lowest floor, where no timed row of the count is as fast
    counts, group = np.unique(np.concatenate([timed_n_gpus, n_gpus]), return_inverse=True)
    best = np.full(len(counts), np.inf)
    np.minimum.at(best, group, value)
    mine = group[len(timed_peak_s):]
    pick |= floor_s <= best[mine]
    return np.flatnonzero(pick)
