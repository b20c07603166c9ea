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

from simulator.pipeline.makespan import m_cap, order_durations, stage_work_s
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
def _stage_positions(kind: ScheduleKind, p: int, v: int) -> tuple:
    """Every (path, position) of every path, grouped by stage: (flat indices into the
    concatenated paths, ordered by stage; each stage's first index into that order;
    the position of each within its path)."""
    paths = schedule_paths(kind, p, v)
    n_paths, length = paths.shape
    stage = (paths // v).reshape(-1)
    order = np.argsort(stage, kind="stable")
    starts = np.searchsorted(stage[order], np.arange(p))
    position = np.tile(np.arange(length), n_paths)[order]
    for a in (order, starts, position):
        a.setflags(write=False)
    return order, starts, position


def flush_lower_bound_s(kind, p: int, m, v: int, f, b, w) -> np.ndarray:
    """A lower bound (s) on ``flush_makespan_s(kind, p, m, v, f, b, w)``, per row (module
    docstring: the argument).

    Args:
        kind, p, v: as ``make_schedule`` takes them.
        m: micro-batches, one for all rows or one per row.
        f, b, w: (rows, p, v) forward, input-gradient and weight-gradient seconds of one
            micro-batch through each (stage, chunk) cell.
    """
    kind = ScheduleKind(getattr(kind, "value", kind))
    f, b, w = (np.asarray(x, dtype=float) for x in (f, b, w))
    rows = f.shape[0]
    m = np.broadcast_to(np.rint(np.asarray(m, dtype=float)), (rows,))
    paths = schedule_paths(kind, p, v)
    flat = (f.reshape(rows, -1), b.reshape(rows, -1), w.reshape(rows, -1))
    back = flat[1] + flat[2] if kind in FUSED else flat[1]
    fwd_chain, back_chain = [], []
    for path in paths:
        step_f, step_b = flat[0][:, path], back[:, path]
        fwd_chain.append(np.cumsum(step_f, axis=1) - step_f)
        chain = np.cumsum(step_b, axis=1) - step_b
        if kind in SPLIT:      # the W of position 0 waits for the chain's last B
            chain[:, 1:] += flat[2][:, path[:1]]
        back_chain.append(chain)
    order, starts, _ = _stage_positions(kind, p, v)
    start = np.minimum.reduceat(np.concatenate(fwd_chain, axis=1)[:, order], starts, axis=1)     # (rows, p)
    drain = np.minimum.reduceat(np.concatenate(back_chain, axis=1)[:, order], starts, axis=1)
    work = stage_work_s(kind, f, b, w)
    trailing = np.zeros((rows, p))
    if kind not in FUSED:
        cap = m_cap(kind, p)
        m_order = np.minimum(m, cap).astype(np.int64)
        keys = np.concatenate([m_order[:, None], order_durations(kind, f, b, w)], axis=1)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        for g, key in enumerate(uniq):
            sel = np.flatnonzero(inverse == g)
            counts = trailing_w_counts(kind, p, int(key[0]), v, tuple(float(x) for x in key[1:]))
            trailing[sel] = (w[sel] * counts).sum(axis=2)
    return (start + m[:, None] * work + np.maximum(drain - trailing, 0.0)).max(axis=1)
