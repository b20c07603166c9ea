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
  same micro-batch; so after ``a`` only W ops run on k, ``W_k`` seconds in all: read off the
  order (the trailing W ops per cell) where it is fixed, and for the list-scheduled orders
  (ZB-H2, ZB-V) at most what the memory cap lets a stage defer (below). ``a`` ends at
  >= ``S_k + m work_k - W_k``, and the B chain of ``a``'s micro-batch down to position 0
  follows it: at least the least over k's positions u of the backward chain below u (each
  B-type op at least b; b + w where every backward is fused, GPipe / 1F1B / interleaved), plus,
  when the chain is not empty and every backward is split (ZB-H1 / ZB-H2 / ZB-V), the W at
  position 0 that waits for its last B.

So ``makespan >= S_k + m work_k + max(0, drain_k - W_k)`` for every k, and for any ``U_k >=
W_k`` in place of ``W_k`` (the term only shrinks).

ZB-H2 and ZB-V build their order per pass-time ratio (``generators.timed_greedy_order``,
``zb_v_block_order``), and reading ``W_k`` off each row's orders cost a list-scheduled order per
(m, ratio) the batch holds: 88% of a ``plan --schedule zb-h2`` search (Llama-3 70B on 512 H100,
928 orders for 49 (p, m) pairs). Instead ``U_k`` needs no order: every trailing W is the W of a
distinct (micro-batch, chunk) activation set that k holds right after ``a`` (its F has run, its W
not), and no order ever lets a stage hold more than its memory cap ``H`` (ZB-H2 ``2p - 1``
micro-batches, Qi et al. 2023, section 2.2; ZB-V ``2p`` chunk sets, section 6: the greedy
admits an F only below the cap, the block order runs a W instead of an F at ``2p``), nor more
than the ``m`` sets of one chunk. So the counts n_c per chunk satisfy ``n_c <= min(m, H)``,
``sum n_c <= H``, and ``W_k <= U_k``, the most ``sum n_c w_kc`` under those limits: the heaviest
chunk's W filled first (``held_cap_trailing_w_s``), for any pass times and either order. (The
planner prices every row that can rank by its exact makespan, so the plans it reports do not
move: the looser U_k only lets more rows reach that pricing.)

The former bound added the whole drain after the busiest stage's work: true where the stage's
last op is a B (the fused schedules), not where it is a deferred W that runs while the B chain
descends (ZB-H1's stage i ends on i + 1 W passes).

Long flushes: beyond ``m_cap`` micro-batches the makespan is the extrapolation
``T(cap) + (m - cap) rate`` with ``rate`` at least every stage's work per micro-batch
(``makespan._flush``). The bound takes ``W_k`` (``U_k``) from the order at ``min(m, cap)``; each
stage's term grows by ``work_k <= rate`` per micro-batch past the cap, and at the cap it is proven
above, so it stays below the extrapolated value.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from simulator.pipeline.makespan import m_cap, stage_work_s
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


#: most activation sets one stage of a list-scheduled order holds at once, by schedule and p: the
#: memory caps ``schedules._generate`` builds them with
HELD_CAP = {ScheduleKind.ZB_H2: lambda p: 2 * p - 1, ScheduleKind.ZB_V: lambda p: 2 * p}


def held_cap_trailing_w_s(kind: ScheduleKind, p: int, m: np.ndarray, w) -> np.ndarray:
    """(rows, p) seconds at least those of the W passes each stage of a list-scheduled flush
    (ZB-H2, ZB-V) runs after its last B, in any order its generators build for any pass times
    (module docstring): ``n_c`` W passes per chunk, ``n_c <= min(m, H)`` and ``sum_c n_c <= H``
    (``H`` = ``HELD_CAP``; ``m`` capped at ``m_cap`` as the swept order is), the chunks with the
    heaviest W taking the most. No order is built."""
    w = np.asarray(w, dtype=float)
    cap = HELD_CAP[kind](p)
    per_chunk = np.minimum(np.minimum(m, m_cap(kind, p)), cap)[:, None, None]       # (rows, 1, 1)
    heavy_first = -np.sort(-w, axis=2)
    j = np.arange(w.shape[2])[None, None, :]
    counts = np.clip(cap - j * per_chunk, 0.0, per_chunk)
    return (heavy_first * counts).sum(axis=2)


def _trailing_w_s(kind: ScheduleKind, p: int, m: np.ndarray, v: int, f, b, w) -> np.ndarray:
    """(rows, p) seconds at least those of the W passes each stage runs after its last B or BW,
    in the order the flush's makespan is swept on (``m`` capped at ``m_cap``): read off the order
    where it does not depend on the pass times (ZB-H1, DualPipe), else ``held_cap_trailing_w_s``,
    which holds for every order ``makespan.candidate_orders`` may sweep."""
    if kind in HELD_CAP:
        return held_cap_trailing_w_s(kind, p, m, w)
    rows = f.shape[0]
    m_order = np.minimum(m, m_cap(kind, p)).astype(np.int64)
    out = np.empty((rows, p))
    for mv in np.unique(m_order):
        sel = np.flatnonzero(m_order == mv)
        out[sel] = (w[sel] * trailing_w_counts(kind, p, int(mv), v)).sum(axis=2)
    return out
