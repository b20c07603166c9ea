"""Which fitting rows need no step time: branch and bound on ``simulator.step_bounds``' floor.

A search keeps, of its fitting rows, the ``keep`` fastest, the throughput-vs-memory frontier
(of the rows faster than ``FRONTIER_MIN_SHARE`` of the best) and the GPU frontier (a count's
fastest row, when it is faster than every smaller count's) (``space_scoring.kept_rows``), after
``refine.refine_exact`` has timed exactly the rows that can rank. The planner times the rows lowest floor first and stops
timing a row ``i`` once the timed rows ``T`` (refined as a whole) show, with ``f`` its floor
(seconds, at most its estimated step time and its lower bound), ``u = tokens / f`` (at least
its tokens/s):

1. ``u`` is below the ``keep``-th best tokens/s of ``T``, and ``f`` above the largest
   ``top``-th best time any refinement round of ``T`` saw;
2. ``u`` is below the best tokens/s of ``T`` at ``i``'s GPU count or fewer, and ``f`` above
   the largest best time at that count or fewer any round saw;
3. some row of ``T`` with less memory, or the best row of ``T`` slowed to
   ``FRONTIER_MIN_SHARE`` of its tokens/s (a stand-in with less memory than any), reached a
   time <= ``f`` in every round (its largest time), and has tokens/s >= ``u``.

Then, round by round, ``i`` never meets a refinement threshold (its lower bound is >= ``f``)
and its estimated time is above the ``top``-th best, the best at its count or fewer and some
row (or the stand-in) with less memory, so it changes none of the thresholds; refining all
rows does what refining ``T`` did, and ``i`` keeps its estimate. By 1-3, with its tokens/s <=
``u``, it is not among the ``keep`` fastest (nor tied), on no GPU frontier and not on the
memory frontier, and removing it
changes no other row's place in them: the kept rows and their numbers are those of timing
every row. Adding rows to ``T`` only lowers these thresholds, so a row once skippable stays so.

Across chunks (``space_scoring.score_space``, chunk after chunk: each chunk keeps its own
``kept_rows``, and the whole search keeps ``kept_rows`` of their union) the rows the earlier
chunks kept, ``G`` (their refined tokens/s, memory and GPU counts), join ``T`` in the tokens/s
halves of 1-3 (``excluded`` over ``G`` and ``T``): ``u`` below the ``keep``-th best tokens/s of
``G`` and ``T`` together, below their best at ``i``'s GPU count or fewer, and at most the tokens/s
of one of them with strictly less memory (or of the stand-in). Every row of ``G`` and ``T`` is a row of the whole search
with the numbers timing every row gives it, so ``i`` is none of the whole search's kept rows
(whatever its chunk keeps); the time halves of 1-3 still hold, so its chunk's refinement and
the numbers of the rows it times are unchanged. A row the whole search keeps is then timed and
kept by its chunk (a kept row of a set is a kept row of any subset holding it), and
``kept_rows`` of a union that holds every row ``kept_rows`` of all rows keeps, and only rows with
the numbers timing every row gives them, is that set: the whole search keeps the same rows.

Rows a chunk's memory phase screened (``memory_screen.Screen``: never given the per-stage model)
are open rows too, with a floor for any memory search outcome ``f' <= f``
(``step_bounds.step_time_floor_any_memory_s``) and the memory lower bound ``b <= m`` in place
of their own. Each condition above holding for ``(f', b)`` holds for ``(f, m)``: a larger floor
only widens the time halves and lowers ``u``; fewer timed or held rows have memory below ``b``
than below ``m``, so the least time and the best tokens/s over them can only be worse. A
screened row shown skippable so is skippable whether it fits or not; one not shown so is
given the memory model (``vectorized._with_late``) and is then a row like any other.
"""
from __future__ import annotations

import numpy as np

#: the throughput-vs-memory frontier a search keeps holds only plans with more than this share
#: of the best plan's tokens/s (``space_scoring.kept_rows``). Below it a plan is no trade a user
#: would take for memory (half the throughput costs as much as a second cluster), and the plan
#: that needs the least memory of all (ZeRO-3, every layer recomputed, micro-batch 1) can be
#: thousands of times slower than the best. The bound is also what lets a range search skip the
#: memory model of its slow majority: a row whose tokens/s ceiling is at most this share of a
#: plan already held is on no frontier the search keeps.
FRONTIER_MIN_SHARE = 0.5


def rank_among(sorted_values: np.ndarray, x: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """``np.searchsorted(sorted_values, x, side="left")``, the queries taken in increasing order
    (``order``: a sorting permutation of ``x``; none: ``x`` as given): each binary search then
    starts where the last ended, in cache, where a million unordered queries into a few
    hundred thousand values cost several times their sort."""
    if order is None:
        return np.searchsorted(sorted_values, x, side="left")
    out = np.empty(len(x), dtype=np.intp)
    out[order] = np.searchsorted(sorted_values, x[order], side="left")
    return out


def order_of_subset(order: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The sorting permutation of the rows ``mask`` selects (numbered as in ``values[mask]``),
    from ``order``, a sorting permutation of all of them: the same order, without a new sort."""
    return (np.cumsum(mask) - 1)[order[mask[order]]]


def skippable(floor_s: np.ndarray, memory_bytes: np.ndarray, n_gpus: np.ndarray, tokens_per_step: float,
              timed_tokens_per_s: np.ndarray, timed_memory_bytes: np.ndarray, timed_n_gpus: np.ndarray,
              trace: dict, keep: int, elsewhere: tuple | None = None,
              memory_order: np.ndarray | None = None) -> np.ndarray:
    """Mask of the untimed rows (``floor_s``, ``memory_bytes``, ``n_gpus``) that need no step
    time, given the timed rows' refined tokens/s, memory and GPU counts and the refinement's
    ``trace`` (``refine_exact``, over the timed rows in the same order) (see the module);
    ``elsewhere``: ``held_by_row`` of the rows other chunks keep, for these rows;
    ``memory_order``: a sorting permutation of ``memory_bytes`` (``rank_among``), if known."""
    n = len(floor_s)
    if n == 0 or len(timed_tokens_per_s) == 0:
        return np.zeros(n, dtype=bool)
    # the time halves: the row changes no refinement round of the timed rows
    gpus = trace["gpus"]
    at = np.searchsorted(gpus, n_gpus, side="right") - 1
    known = at >= 0         # no timed row at this count or fewer GPUs: the row may be on the GPU frontier
    at = np.maximum(at, 0)
    order = np.argsort(timed_memory_bytes, kind="stable")
    below = rank_among(timed_memory_bytes[order], memory_bytes, memory_order)   # timed rows with less memory
    least_peak = np.minimum.accumulate(trace["peak_s"][order])
    j = np.maximum(below - 1, 0)
    # some timed row with less memory, or the frontier's share of the best (``refine_exact``),
    # reached the floor in every round
    dominated = ((below > 0) & (least_peak[j] <= floor_s)) | (trace["frontier_bound_s"] <= floor_s)
    ok = (floor_s > trace["kth_s"]) & known & (floor_s > trace["upto_best_s"][at]) & dominated
    # the tokens/s halves: not among the kept rows of the timed rows and the rows other
    # chunks kept together (1: the keep fastest, 2: on the GPU frontier, 3: dominated on the
    # memory frontier by a row with strictly less memory), so not among the whole search's
    top, best, less = held_by_row(memory_bytes, n_gpus, kept_summary(timed_tokens_per_s, timed_memory_bytes,
                                                                     timed_n_gpus, keep), memory_order)
    if elsewhere is not None:
        top, best, less = np.concatenate([top, elsewhere[0]]), np.maximum(best, elsewhere[1]), \
            np.maximum(less, elsewhere[2])
    mine = excluded(floor_s, tokens_per_step, keep, top, best, less)
    return ok & mine


def kept_summary(tokens_per_s: np.ndarray, memory_bytes: np.ndarray, n_gpus: np.ndarray, keep: int) -> dict:
    """What ``excluded`` reads of a set of rows a search holds (their refined tokens/s, memory
    and GPU counts): the ``keep`` best tokens/s (``top``), the GPU counts and the best tokens/s
    at each or fewer GPUs (``gpus``, ``best``), the memory in increasing order and the best
    tokens/s of the rows up to each (``memory``, ``most``), led by a stand-in row of memory -inf
    at ``FRONTIER_MIN_SHARE`` of the best tokens/s (a row no faster is on no kept frontier)."""
    tokens_per_s = np.asarray(tokens_per_s, dtype=float)
    top = -np.partition(-tokens_per_s, keep - 1)[:keep] if len(tokens_per_s) > keep else tokens_per_s
    gpus, group = np.unique(n_gpus, return_inverse=True)
    best = np.full(len(gpus), -np.inf)
    np.maximum.at(best, group, tokens_per_s)
    order = np.argsort(memory_bytes, kind="stable")
    share = FRONTIER_MIN_SHARE * tokens_per_s.max() if len(tokens_per_s) else -np.inf
    return {"top": top, "gpus": gpus, "best": np.maximum.accumulate(best) if len(best) else best,
            "memory": np.concatenate([[-np.inf], np.asarray(memory_bytes, dtype=float)[order]]),
            "most": np.maximum.accumulate(np.concatenate([[share], tokens_per_s[order]]))}


def compact_summary(summary: dict, keep: int) -> dict:
    """``summary`` (``kept_summary``) reduced to what ``held_by_row`` and ``excluded`` read of
    it, for ``excluded(..., keep=1, ...)``: the ``keep``-th best tokens/s alone as ``top`` (none
    when fewer rows are held), and of the memory order only the rows where the best tokens/s
    so far rises (the best of the held rows with strictly less memory than any ``x`` is that at
    the last such row below ``x``: no row between it and ``x`` raises it)."""
    top = summary["top"]
    kth = -np.partition(-top, keep - 1)[keep - 1:keep] if len(top) >= keep else np.zeros(0)
    most = summary["most"]
    rise = np.concatenate([[True], most[1:] > most[:-1]]) if len(most) else np.zeros(0, dtype=bool)
    return {"top": kth, "gpus": summary["gpus"], "best": summary["best"], "memory": summary["memory"][rise],
            "most": most[rise]}


def held_by_row(memory_bytes: np.ndarray, n_gpus: np.ndarray, summary: dict,
                memory_order: np.ndarray | None = None) -> tuple:
    """What rows (``memory_bytes``, ``n_gpus``) are up against among rows a search holds
    (``kept_summary``): their ``keep`` best tokens/s, and per row the best held tokens/s at its
    GPU count or fewer and the best of the held rows with strictly less memory (-inf: none);
    ``memory_order``: a sorting permutation of ``memory_bytes``, if known."""
    n = len(memory_bytes)
    best, less = np.full(n, -np.inf), np.full(n, -np.inf)
    gpus = summary["gpus"]
    if len(gpus) and n:
        at = np.searchsorted(gpus, n_gpus, side="right") - 1
        best = np.where(at >= 0, summary["best"][np.maximum(at, 0)], -np.inf)
        below = rank_among(summary["memory"], memory_bytes, memory_order)
        less = np.where(below > 0, summary["most"][np.maximum(below - 1, 0)], -np.inf)
    return summary["top"], best, less


def excluded(floor_s: np.ndarray, tokens_per_step: float, keep: int, top: np.ndarray, best: np.ndarray,
             less: np.ndarray) -> np.ndarray:
    """Mask of the rows (``floor_s``) that cannot be among a whole search's
    ``space_scoring.kept_rows(..., keep)`` given rows it also holds (``held_by_row``: ``top``,
    at least the ``keep`` best of their tokens/s, as the search gives them; ``best`` and
    ``less`` per row): with ``u = tokens / floor`` (at least the row's tokens/s), ``u`` is below
    the ``keep``-th best held tokens/s (no row is excluded when fewer than ``keep`` are held),
    below the best held at the row's GPU count or fewer (so it is on no GPU frontier), and some
    held row with strictly less memory, or the frontier's share of the best, has tokens/s >=
    ``u``."""
    n = len(floor_s)
    if n == 0 or len(top) < max(keep, 1):
        return np.zeros(n, dtype=bool)
    with np.errstate(divide="ignore"):
        ceiling = tokens_per_step / floor_s
    kth_best = -np.partition(-top, keep - 1)[keep - 1]
    return (ceiling < kth_best) & (ceiling < best) & (less >= ceiling)


def next_to_time(floor_s: np.ndarray, memory_bytes: np.ndarray, n_gpus: np.ndarray, timed_peak_s: np.ndarray,
                 timed_memory_bytes: np.ndarray, timed_n_gpus: np.ndarray, step: int) -> np.ndarray:
    """Indices of the open rows (``floor_s``, ``memory_bytes``, ``n_gpus``: not skippable) to
    time next: the ``step`` lowest floors, and the rows that could still be on the memory or the
    GPU frontier even at their floor (no row with less memory, or of their count or fewer, is
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
    # rows that could be on the GPU frontier: none at their count or fewer GPUs known or hoped faster
    counts, group = np.unique(np.concatenate([timed_n_gpus, n_gpus]), return_inverse=True)
    best = np.full(len(counts), np.inf)
    np.minimum.at(best, group, value)
    mine = group[len(timed_peak_s):]
    pick |= floor_s <= np.minimum.accumulate(best)[mine]
    return np.flatnonzero(pick)
