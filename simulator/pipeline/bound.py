"""A proven lower bound on a flush's makespan, for every schedule, far cheaper than the DAG sweep.

The planner ranks rows by a closed-form estimate, computes the exact makespan
(``makespan.flush_makespan_s``) of the best and stops once the next rows' lower bound exceeds
the best exact time (``planners.refine``); a bound above the exact makespan would prune a better
plan, so this one is proven for the orders ``make_schedule`` builds, whatever the per-cell times.

The argument, for one stage k (and then the largest over the stages). Ops run one at a time in
their stage's order; an op starts after its stage's previous op and the op it depends on
(``schedules``: F at position u after F at u-1; B or BW at u after B at u+1, or after the F at
the last position; W after the B of its cell).

* Start: k's first op is an F at some position u of a path on k, which waits for the F chain
  through positions 0..u-1: it starts at ``S_k`` >= the least forward chain to a position of k.
* Work: k then runs all its ops, ``m * work_k`` seconds (every chunk's f + b + w per
  micro-batch; DualPipe: half of it, each micro-batch runs one direction): it ends at
  >= ``S_k + m work_k``.
* Drain: let ``a`` be k's last B-type op (B or BW). Every F on k precedes the B of its cell,
  also on k, and a B at a later position of a path precedes the B at an earlier one of the
  same micro-batch; so after ``a`` only W ops run on k, ``W_k`` seconds in all, read off the
  order (the trailing W ops per cell). ``a`` ends at >= ``S_k + m work_k - W_k``, and the B
  chain of ``a``'s micro-batch down to position 0 follows it: at least the least over k's
  positions u of the backward chain below u (each B-type op at least b; b + w where every
  backward is fused, GPipe / 1F1B / interleaved), plus, when the chain is not empty and every
  backward is split (ZB-H1 / ZB-H2 / ZB-V), the W at position 0 that waits for its last B.

So ``makespan >= S_k + m work_k + max(0, drain_k - W_k)`` for every k. The former bound added
the whole drain after the busiest stage's work: true where the stage's last op is a B (the
fused schedules), not where it is a deferred W that runs while the B chain descends (ZB-H1's
stage i ends on i + 1 W passes).

Long flushes: beyond ``m_cap`` micro-batches the makespan is the extrapolation
``T(cap) + (m - cap) rate`` with ``rate`` at least every stage's work per micro-batch
(``makespan._flush``). The bound takes ``W_k`` from the order at ``min(m, cap)``; each stage's
term grows by ``work_k <= rate`` per micro-batch past the cap, and at the cap it is proven
above, so it stays below the extrapolated value.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from simulator.pipeline.makespan import RATIO_STEP, candidate_orders, m_cap, stage_work_s
from simulator.pipeline.schedules import B, BW, W, ScheduleKind, make_schedule, schedule_paths

#: schedules whose every backward is a fused BW: no W ever trails a stage's last backward
FUSED = (ScheduleKind.GPIPE, ScheduleKind.ONE_F_ONE_B, ScheduleKind.INTERLEAVED)
#: schedules whose every backward is split into B and W
SPLIT = (ScheduleKind.ZB_H1, ScheduleKind.ZB_H2, ScheduleKind.ZB_V)


@lru_cache(maxsize=4096)
def trailing_w_counts(kind: ScheduleKind, p: int, m: int, v: int, durations=(1.0, 1.0, 1.0)) -> np.ndarray:
    """(p, v) W ops per cell that run on each stage after its last B or BW, in the order
    ``make_schedule(kind, p, m, v, durations=durations)`` (read-only)."""
    kind = ScheduleKind(getattr(kind, "value", kind))
    out = np.zeros((p, v))
    if kind not in FUSED:
        s = make_schedule(kind, p, m, v, durations=durations)
        for stage in range(p):
            lo, hi = s.stage_ptr[stage], s.stage_ptr[stage + 1]
            ops = s.op_kind[lo:hi]
            last = np.flatnonzero((ops == B) | (ops == BW))[-1]
            tail = lo + last + 1 + np.flatnonzero(ops[last + 1:] == W)
            np.add.at(out[stage], s.op_chunk[tail], 1.0)
    out.setflags(write=False)
    return out


@lru_cache(maxsize=1024)
def _first_positions(kind: ScheduleKind, p: int, v: int) -> np.ndarray:
    """(n_paths, p) each stage's first position on each path (read-only). Chains of
    non-negative passes only grow along a path, so the least chain to any of a stage's
    positions is the one to its first; every stage's first position is below p."""
    paths = schedule_paths(kind, p, v)
    stage = paths // v
    out = np.array([[np.flatnonzero(row == k)[0] for k in range(p)] for row in stage], dtype=np.int64)
    out.setflags(write=False)
    return out


def _chain_to(steps: np.ndarray, first: np.ndarray) -> np.ndarray:
    """(rows, p) sums of ``steps`` (rows, positions) over the positions before each of ``first``."""
    head = steps[:, :max(int(first.max()), 1)]
    cum = np.cumsum(head, axis=1)
    out = cum[:, np.maximum(first - 1, 0)]
    out[:, first == 0] = 0.0
    return out


def flush_lower_bound_s(kind, p: int, m, v: int, f, b, w, work=None) -> np.ndarray:
    """A lower bound (s) on ``flush_makespan_s(kind, p, m, v, f, b, w)``, per row (module
    docstring: the argument).

    Args:
        kind, p, v: as ``make_schedule`` takes them.
        m: micro-batches, one for all rows or one per row.
        f, b, w: (rows, p, v) forward, input-gradient and weight-gradient seconds of one
            micro-batch through each (stage, chunk) cell.
        work: ``makespan.stage_work_s`` of these cells, when the caller has it.
    """
    kind = ScheduleKind(getattr(kind, "value", kind))
    f, b, w = (np.asarray(x, dtype=float) for x in (f, b, w))
    rows = f.shape[0]
    m = np.broadcast_to(np.rint(np.asarray(m, dtype=float)), (rows,))
    paths = schedule_paths(kind, p, v)
    firsts = _first_positions(kind, p, v)
    reach = int(firsts.max()) + 1                      # positions any chain here runs through
    start = drain = None
    for path, first in zip(paths, firsts):
        cells = path[:reach]
        stage, chunk = cells // v, cells % v
        step_f = f[:, stage, chunk]
        step_b = b[:, stage, chunk] + w[:, stage, chunk] if kind in FUSED else b[:, stage, chunk]
        s_k, d_k = _chain_to(step_f, first), _chain_to(step_b, first)
        if kind in SPLIT:      # the W of position 0 waits for the chain's last B
            d_k += np.where(first > 0, w[:, stage[0], chunk[0]][:, None], 0.0)
        start = s_k if start is None else np.minimum(start, s_k)
        drain = d_k if drain is None else np.minimum(drain, d_k)
    work = stage_work_s(kind, f, b, w) if work is None else work
    if kind not in FUSED:
        drain = np.maximum(drain - _trailing_w_s(kind, p, m, v, f, b, w), 0.0)
    return (start + m[:, None] * work + drain).max(axis=1)


def _trailing_w_s(kind: ScheduleKind, p: int, m: np.ndarray, v: int, f, b, w) -> np.ndarray:
    """(rows, p) seconds of the W passes each stage runs after its last B or BW, in the order
    the flush's makespan is swept on (``m`` capped at ``m_cap``; ZB-H2 / ZB-V: the most over the
    orders built for the row's candidate pass-time ratios, ``makespan.candidate_orders``)."""
    rows = f.shape[0]
    m_order = np.minimum(m, m_cap(kind, p)).astype(np.int64)
    span = int(round(16.0 / RATIO_STEP)) + 1
    out = np.full((rows, p), -np.inf)
    # the flush is the shortest over its candidate orders: the bound takes the order that trails
    # the most W passes, so it stays below each of them
    candidates = candidate_orders(kind, f, b, w)
    for c in range(candidates.shape[1]):
        ratios = candidates[:, c]
        grid = np.rint(ratios[:, 1:] / RATIO_STEP).astype(np.int64)          # integers <= 16 / RATIO_STEP
        key = (m_order * span + grid[:, 0]) * span + grid[:, 1]
        uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        for g, i in enumerate(first):
            sel = np.flatnonzero(inverse == g) if len(uniq) > 1 else slice(None)
            counts = trailing_w_counts(kind, p, int(m_order[i]), v, tuple(float(x) for x in ratios[i]))
            out[sel] = np.maximum(out[sel], (w[sel] * counts).sum(axis=2))
    return out
