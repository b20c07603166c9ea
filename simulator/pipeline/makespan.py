"""Makespan of one pipeline flush for many configurations at once (vectorized over rows).

The step model needs the schedule's makespan for the actual per-stage work: stages hold
different layer counts (126 layers on 16 stages is 14 stages of 8 and 2 of 7), the first holds
the embedding and the last the LM head and loss. No closed form covers that (the critical path
of 1F1B with uneven stages zig-zags between stages), so the makespan is computed on the
schedule's dependency DAG itself: every op ends at ``max(end of the previous op on its stage,
end of the op it depends on) + its duration`` (``event_sim.sweep``'s rule, with point-to-point
time folded into the op durations). Here the DAG is swept level by level (ops whose
predecessors all lie on earlier levels are computed together), each level one numpy operation
over all rows of a group that shares the schedule, p, v and m. The planner and the single-
configuration simulator call the same function, so they agree exactly.

Long flushes: the sweep runs at most ``m_cap`` micro-batches. Beyond that a flush grows by a
constant time per micro-batch (a max-plus system settles into its periodic regime, here within
a few rounds of p), so ``T(m) = T(m_cap) + (m - m_cap) * (T(m_cap) - T(m_cap - d)) / d`` with
``d`` one round of p micro-batches, and the slope at least the busiest stage's work per
micro-batch (a stage runs one op at a time, so no flush grows slower: a smaller measured slope
is a transient of the sweep, and the lower bound of ``pipeline.bound`` relies on it).
tests/test_pipeline_bound.py checks it against the full sweep: exact (1e-12) on equal chunks
with heavier ends. Layouts whose stages differ by a layer settle later: on 4,200 sampled
planner rows (GPT-3 13B on 64 GPUs, Llama-3 70B on 128, every schedule; ~1,300 past the cap)
the floor moved 95 distinct flushes, which were -8.3% to +0.3% off the full sweep and are
-1.35% to +0.66% off with it (the others are as before).
"""
from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache

import numpy as np

from simulator.pipeline.event_sim import sweep
from simulator.pipeline.schedules import B, BW, F, W, ScheduleKind, make_schedule

#: schedules that split some backward passes into B and W and fuse the others (BW)
MIXED_W = (ScheduleKind.DUALPIPE, ScheduleKind.DUALPIPE_V)
#: most op-row cells one sweep holds at once (8 bytes each): bounds memory per call.
MAX_CELLS_PER_SWEEP = 4_000_000


def _round(kind: ScheduleKind, p: int) -> int:
    """Micro-batch granularity of a schedule: m must be a multiple of it."""
    if kind == ScheduleKind.INTERLEAVED:
        return p
    if kind == ScheduleKind.DUALPIPE:
        return 2
    return 1


def m_cap(kind, p: int) -> int:
    """Largest micro-batch count swept directly; longer flushes are extrapolated."""
    kind = ScheduleKind(getattr(kind, "value", kind))
    r = _round(kind, p)
    cap = max(4 * p, 16)
    if kind in (ScheduleKind.DUALPIPE, ScheduleKind.DUALPIPE_V, ScheduleKind.ZB_V, ScheduleKind.ZB_H2):
        cap = max(cap, 6 * p)
    return -(-cap // r) * r


#: most operations (3 per micro-batch, chunk and stage) of the one flush the step model builds and
#: sweeps for a configuration (``m_cap`` micro-batches at most). The list-scheduled orders
#: (ZB-H2, ZB-V) are built and their peaks simulated op by op in Python, about 30,000 operations a
#: second on a 2-core VM (ZB-H2 over 128 stages, 295,000 operations: 11 s); the other schedules'
#: sweeps are numpy levels, 1-3 million a second (1F1B over 1,024 stages, 12.6 million: 3.7 s;
#: interleaved over 512 stages x 2 chunks, 6.3 million: 6.9 s). A configuration over its limit
#: would take minutes of Python (and gigabytes): ``simulate`` refuses it, ``plan`` does not
#: search it (``flush_within_limit``).
MAX_LIST_SCHEDULED_FLUSH_OPS = 300_000
MAX_INTERLEAVED_FLUSH_OPS = 6_500_000
MAX_SWEPT_FLUSH_OPS = 13_000_000
_LIST_SCHEDULED = (ScheduleKind.ZB_H2, ScheduleKind.ZB_V)


def flush_ops(kind, p, m, v, capped: bool = True):
    """Operations of the flush the step model builds for ``kind`` over ``p`` stages, ``m``
    micro-batches and ``v`` chunks per stage (arrays allowed): 3 x p x chunks x min(m, m_cap)
    (two chunks for the V-shaped and DualPipe schedules, ``v`` for interleaved, one else).
    ``capped=False``: of a flush of all ``m`` micro-batches, 3 x p x chunks x m (what
    ``schedules.make_schedule`` builds when called directly)."""
    kind = ScheduleKind(getattr(kind, "value", kind))
    p = np.asarray(p, dtype=np.int64)
    chunks = 2 if kind in (ScheduleKind.ZB_V, ScheduleKind.DUALPIPE, ScheduleKind.DUALPIPE_V) else \
        (np.asarray(v, dtype=np.int64) if kind == ScheduleKind.INTERLEAVED else 1)
    if not capped:
        return 3 * p * chunks * np.asarray(m, dtype=np.int64)
    if p.ndim == 0:                      # one configuration: its own cap, no dedup to do
        cap = np.array(m_cap(kind, int(p)), dtype=np.int64)
    else:
        # ``m_cap`` once per distinct stage count (a planner batch has a handful: the divisors of
        # its GPU counts), spread back to the rows
        stages, row = np.unique(p, return_inverse=True)
        cap = np.array([m_cap(kind, int(q)) for q in stages], dtype=np.int64)[row].reshape(p.shape)
    return 3 * p * chunks * np.minimum(np.asarray(m, dtype=np.int64), cap)


def flush_limit(kind) -> int:
    """``MAX_LIST_SCHEDULED_FLUSH_OPS`` for ZB-H2 and ZB-V, ``MAX_INTERLEAVED_FLUSH_OPS`` for the
    interleaved schedule, ``MAX_SWEPT_FLUSH_OPS`` for the others."""
    kind = ScheduleKind(getattr(kind, "value", kind))
    if kind in _LIST_SCHEDULED:
        return MAX_LIST_SCHEDULED_FLUSH_OPS
    return MAX_INTERLEAVED_FLUSH_OPS if kind == ScheduleKind.INTERLEAVED else MAX_SWEPT_FLUSH_OPS


def flush_within_limit(kind, p, m, v):
    """Whether the step model can build the flush of ``kind`` in seconds (``flush_ops`` within
    ``flush_limit``), per row; GPipe's in-flight peak and flush need no order built."""
    kind = ScheduleKind(getattr(kind, "value", kind))
    if kind == ScheduleKind.GPIPE:
        return np.ones(np.shape(np.asarray(p)), dtype=bool)
    return flush_ops(kind, p, m, v) <= flush_limit(kind)


@lru_cache(maxsize=64)
def split_backward_counts(kind, p: int) -> np.ndarray:
    """(p, v) backward passes each (stage, chunk) cell of a schedule in ``MIXED_W`` runs as a B
    apart from its W (the others are fused BW), in one flush.

    DualPipe(V)'s recipe (DeepSeek-V3 section 3.2.1, ``generators._dualpipe_rank``) splits
    only the passes of its steps 3, 6 (second half) and 7, whose counts depend on the rank and
    the pipeline size but not on the micro-batches (the main step 4 fuses them all), so they
    are counted once on the shortest flush the schedule allows (m = 2p).
    tests/test_split_breakdown.py checks they do not change with m."""
    kind = ScheduleKind(getattr(kind, "value", kind))
    sched = make_schedule(kind, p, _min_m(kind, p))
    stage = np.repeat(np.arange(p), np.diff(sched.stage_ptr))
    counts = np.zeros((p, sched.v))
    np.add.at(counts, (stage[sched.op_kind == B], sched.op_chunk[sched.op_kind == B]), 1.0)
    counts.setflags(write=False)
    return counts


def _min_m(kind: ScheduleKind, p: int) -> int:
    if kind in (ScheduleKind.DUALPIPE, ScheduleKind.DUALPIPE_V):
        return 2 * p
    return 1


#: granularity of the pass-time ratios the list-scheduled orders (ZB-H2, ZB-V) are built for
RATIO_STEP = 0.125


def order_durations(kind, f, b, w):
    """(1, B/F, W/F) rounded to ``RATIO_STEP`` (per row, from its cells' means): the pass times
    a list-scheduled order is built for; (1, 1, 1) for the schedules with fixed orders."""
    kind = ScheduleKind(getattr(kind, "value", kind))
    f, b, w = (np.asarray(x, dtype=float) for x in (f, b, w))
    if kind not in _LIST_SCHEDULED:
        return np.ones((f.shape[0], 3))
    axes = tuple(range(1, f.ndim))
    mf = np.maximum(f.mean(axis=axes), 1e-300)
    rb = np.clip(np.round(b.mean(axis=axes) / mf / RATIO_STEP) * RATIO_STEP, RATIO_STEP, 16.0)
    rw = np.clip(np.round(w.mean(axis=axes) / mf / RATIO_STEP) * RATIO_STEP, RATIO_STEP, 16.0)
    return np.stack([np.ones_like(rb), rb, rw], axis=1)


@lru_cache(maxsize=256)
def _levels(kind: ScheduleKind, p: int, m: int, v: int, durations=(1.0, 1.0, 1.0)):
    """The schedule's ops renumbered level by level of the DAG (ops on one level have all their
    predecessors on earlier ones), so that each level is a contiguous slice: for each level
    (start, stop, its op count k, then the previous op on the stage of each of its k ops
    followed by the dependency op of each), with -1 (none) mapped to a zero sentinel, plus
    each renumbered op's cell and kind for building durations. (The two predecessor lists are
    one array so that ``_sweep`` gathers both with one call per level.)"""
    s = make_schedule(kind, p, m, v, durations=durations)
    n = s.n_ops
    prev_same = np.arange(n) - 1
    prev_same[s.stage_ptr[:-1]] = -1
    dep = s.predecessor.copy()
    level = _depths(s)
    order = np.argsort(level, kind="stable")
    new_of = np.empty(n + 1, dtype=np.int64)
    new_of[order] = np.arange(n)
    new_of[n] = n                                  # the sentinel stays last
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(level[order])) + 1, [n]])
    a_all = new_of[np.where(prev_same >= 0, prev_same, n)[order]]
    d_all = new_of[np.where(dep >= 0, dep, n)[order]]
    groups = tuple((int(lo), int(hi), int(hi - lo), np.concatenate([a_all[lo:hi], d_all[lo:hi]]))
                   for lo, hi in zip(bounds[:-1], bounds[1:]))
    cell = (s.op_stage * v + s.op_chunk.astype(np.int64))[order]
    kinds = s.op_kind.astype(np.int64)[order]
    for arr in (cell, kinds) + tuple(g[3] for g in groups):
        arr.setflags(write=False)
    return groups, cell, kinds, n


#: schedules of at least this many stages get their ops' depths level by level (``_depths``);
#: smaller ones by the event sweep, which costs per op where the levels cost per level (1F1B,
#: best of 15 on the 2-core VM: ~0.24 us an op against ~4.5 us a level of a few stage-wide array
#: operations; p = 16, m = 64: 0.48 against 0.70 ms; p = 30, m = 120: 1.72 against 1.35 ms;
#: p = 61, m = 244: 8.4 against 2.9 ms)
LEVEL_STEP_MIN_STAGES = 24


def _depths(s) -> np.ndarray:
    """Each op's depth in the schedule's DAG: 0 with no predecessor on its stage or across, else
    one more than the larger of theirs; the end time of an event sweep with unit durations and
    no transfer time, minus one (``event_sim.sweep``, which it falls back to, and which names a
    deadlock). A stage runs at most one op a level (its ops are a chain), so level ``L`` is
    found by checking each stage's next op once: it runs at ``L`` if the op it depends on ran
    before ``L`` (the previous op on its stage did, or the stage would not be at it). The same
    depths as the sweep, op for op (tests/test_pipeline_makespan.py)."""
    n = s.n_ops
    if s.p < LEVEL_STEP_MIN_STAGES:
        return np.rint(sweep(s, np.ones(n), np.zeros(n))[1]).astype(np.int64) - 1
    dep = np.asarray(s.predecessor, dtype=np.int64)
    depth = np.full(n + 1, np.iinfo(np.int64).max, dtype=np.int64)
    depth[n] = -1                                   # "no dependency": a sentinel before level 0
    dep = np.where(dep >= 0, dep, n)
    ptr = np.asarray(s.stage_ptr, dtype=np.int64)
    pos, stop = ptr[:-1].copy(), ptr[1:]
    stages = np.flatnonzero(pos < stop)
    level = 0
    while len(stages):
        op = pos[stages]
        ready = depth[dep[op]] < level
        if not ready.any():                         # a deadlock: the sweep says where
            return np.rint(sweep(s, np.ones(n), np.zeros(n))[1]).astype(np.int64) - 1
        depth[op[ready]] = level
        pos[stages[ready]] += 1
        stages = stages[pos[stages] < stop[stages]]
        level += 1
    return depth[:n]


def peak_in_flight(kind, p: int, m: int, v: int) -> tuple[int, ...]:
    """Most (micro-batch, chunk) activation sets each stage holds at once in one flush: an F
    takes one when it starts, the W (or fused BW) of the same pair releases it (Qi et al. 2023,
    section 2). 1F1B's first stage holds min(m, p), ZB-H2's up to 2p - 1, DualPipe's p + 1
    chunk sets (DeepSeek-V3 report, table 2), GPipe's m. The order does not depend on the pass
    times except for the list-scheduled schedules (built here for equal ones); beyond ``m_cap``
    micro-batches the steady state holds no more."""
    kind = ScheduleKind(getattr(kind, "value", kind))
    m_eff = _flush_m(kind, p, m)
    if kind == ScheduleKind.GPIPE:
        return tuple([int(m)] * p)
    if kind == ScheduleKind.ONE_F_ONE_B:
        return tuple(int(x) for x in _one_f_one_b_in_flight(np.array([m_eff]), p)[0])
    return _simulated_peaks(kind, p, m_eff, v)


def _flush_m(kind: ScheduleKind, p: int, m: int) -> int:
    """The micro-batches of the flush ``peak_in_flight`` counts on: m, capped at ``m_cap`` (not
    GPipe), made what the schedule can run (DualPipe: even, at least 2p; DualPipe-V: at least
    2p; interleaved: a multiple of p)."""
    m_eff = m if kind == ScheduleKind.GPIPE else min(m, m_cap(kind, p))
    if kind == ScheduleKind.DUALPIPE:
        m_eff = max(m_eff + m_eff % 2, 2 * p)
    elif kind == ScheduleKind.DUALPIPE_V:
        m_eff = max(m_eff, 2 * p)
    elif kind == ScheduleKind.INTERLEAVED:
        m_eff = -(-m_eff // p) * p
    return m_eff


def peak_held_chunks(kind, p: int, m: int, v: int) -> tuple[np.ndarray, ...]:
    """Per stage, the (K, v) counts of activation sets each of its v chunks holds at the moments
    that can be its activation peak: the stage's ops run one after another in the schedule's
    order, an F taking its (micro-batch, chunk) set, the W (or fused BW) of that pair releasing
    it (as ``peak_in_flight`` counts them), and of the held-count vectors after each op the ones
    no other vector dominates (>= in every chunk). With chunk c holding ``x[c]`` bytes a set,
    the stage's peak is ``max_k held[k] @ x``: on equal chunks ``peak_in_flight * x``, on unequal
    ones it depends on which chunks are in flight (interleaved 1F1B's first stage warms up
    with (p - 1) * 2 + (v - 1) * p forwards, chunk 0's first: Narayanan et al. 2021, section
    2.2.2). The same flush as ``peak_in_flight`` (``_flush_m``); memoised per (kind, p, flush
    m, v). Read-only arrays."""
    kind = ScheduleKind(getattr(kind, "value", kind))
    return _held_chunks(kind, p, _flush_m(kind, p, m), v)


@lru_cache(maxsize=4096)
def _held_chunks(kind: ScheduleKind, p: int, m: int, v: int) -> tuple[np.ndarray, ...]:
    s = make_schedule(kind, p, m, v)
    kinds, chunk = np.asarray(s.op_kind), np.asarray(s.op_chunk, dtype=np.int64)
    sign = np.where(kinds == F, 1, np.where((kinds == W) | (kinds == BW), -1, 0))
    out = []
    for st in range(p):
        lo, hi = int(s.stage_ptr[st]), int(s.stage_ptr[st + 1])
        delta = np.zeros((hi - lo, v), dtype=np.int64)
        delta[np.arange(hi - lo), chunk[lo:hi]] = sign[lo:hi]
        held = np.unique(np.cumsum(delta, axis=0), axis=0)
        # drop the vectors another one dominates (their weighted sum is never the larger)
        ge = (held[:, None, :] <= held[None, :, :]).all(axis=2)
        dominated = (ge & ~ge.T).any(axis=1)
        kept = held[~dominated]
        kept.setflags(write=False)
        out.append(kept)
    return tuple(out)


def _one_f_one_b_in_flight(m_values: np.ndarray, p: int) -> np.ndarray:
    """(len(m_values), p) activation sets each 1F1B stage holds at most: stage s runs p - s - 1
    warm-up forwards, then one forward per backward (Narayanan et al. 2021, section 2.2), so it
    holds min(m, p - s), as the simulation finds (tests/test_pipeline_schedules.py), without
    simulating the flush; ``m_cap`` is at least p, so capping m first changes nothing."""
    return np.minimum(np.asarray(m_values, dtype=np.int64)[:, None], p - np.arange(p)[None, :])


def peak_in_flight_rows(kind, p: int, m_values, v: int) -> np.ndarray:
    """``peak_in_flight`` for each micro-batch count of ``m_values``: a (len(m_values), p) array
    (1F1B's closed form at once, the other schedules count by count)."""
    kind = ScheduleKind(getattr(kind, "value", kind))
    m_values = np.asarray(m_values, dtype=np.int64)
    if kind == ScheduleKind.ONE_F_ONE_B:
        return _one_f_one_b_in_flight(m_values, p).astype(float)
    return np.array([peak_in_flight(kind, p, int(m), v) for m in m_values], dtype=float).reshape(len(m_values), p)


@lru_cache(maxsize=4096)
def _simulated_peaks(kind: ScheduleKind, p: int, m: int, v: int) -> tuple[int, ...]:
    """``peak_in_flight`` of one flush simulated with unit pass times; cached per capped
    micro-batch count, so every m beyond the cap shares one simulation."""
    from simulator.pipeline.event_sim import simulate_schedule
    result = simulate_schedule(make_schedule(kind, p, m, v), 1.0, 1.0, 1.0)
    return tuple(int(x) for x in result.peak_inflight)


def _sweep(kind: ScheduleKind, p: int, m: int, v: int, table: np.ndarray, durations=(1.0, 1.0, 1.0)) -> np.ndarray:
    """Makespan of rows given ``table`` (4, rows, p*v): per kind (F, B, W, BW) and cell, the
    op duration in seconds; the order built for ``durations``."""
    groups, cell, kinds, n = _levels(kind, p, m, v, tuple(float(x) for x in durations))
    rows = table.shape[1]
    out = np.empty(rows)
    step = max(1, MAX_CELLS_PER_SWEEP // (n + 1))
    for lo in range(0, rows, step):
        hi = min(rows, lo + step)
        dur = table[kinds, lo:hi, cell]                 # (n, r)
        end = np.zeros((n + 1, hi - lo))
        # per level: both predecessors' ends in one gather, their max in place, plus the
        # durations (the same max and add per op as ever: bit for bit; 3 calls a level, not 4,
        # for a flush swept over ~250 levels with a median of 3 rows)
        for lo_op, hi_op, k, ad in groups:
            before = end[ad]
            ready = before[:k]
            np.maximum(ready, before[k:], out=ready)
            np.add(ready, dur[lo_op:hi_op], out=end[lo_op:hi_op])
        out[lo:hi] = end[:n].max(axis=0)
    return out


def stage_work_s(kind, f, b, w) -> np.ndarray:
    """(rows, p) seconds each stage computes per micro-batch: its cells' f + b + w (DualPipe:
    half, each micro-batch runs on one of a stage's two chunks)."""
    kind = ScheduleKind(getattr(kind, "value", kind))
    share = 0.5 if kind == ScheduleKind.DUALPIPE else 1.0
    return share * (np.asarray(f, dtype=float) + np.asarray(b, dtype=float) + np.asarray(w, dtype=float)).sum(axis=2)


#: pass-time ratios (B/F, W/F) of the orders every list-scheduled flush also tries besides the one
#: built for its own ratios (``candidate_orders``): one grid for all rows, so each order is built
#: once per (schedule, p, m, v) and serves every configuration
SHARED_RATIOS = ((1.0, 1.0), (2.0, 0.5))


def candidate_orders(kind, f, b, w) -> np.ndarray:
    """(rows, K, 3) pass-time ratios of the orders a flush is swept on, per row: the row's own
    (``order_durations``) first, then for the list-scheduled schedules (ZB-H2, ZB-V) the orders
    of ``SHARED_RATIOS`` (K = 1 + len(SHARED_RATIOS) = 3; K = 1 for the others).

    A list scheduler has Graham's anomalies: the order it builds for slightly faster passes can
    be a worse order, so a faster link lengthened a step (Llama-4-Scout on 32 A100, ZB-V, 200 ->
    300 Gb/s: 14.93 -> 15.19 s, the W/F ratio rounding from 0.625 to 0.75). A fixed order's flush
    never lengthens when its passes get shorter (its makespan is a longest path), so the shortest
    over the row's own order and a fixed set of others moves with the passes wherever a fixed
    order wins, and is what a run that keeps the better of several built orders takes
    (zero-bubble's own scheduler picks the best of the schedules it builds, Qi et al. 2023,
    section 3.1)."""
    kind = ScheduleKind(getattr(kind, "value", kind))
    own = order_durations(kind, f, b, w)
    if kind not in _LIST_SCHEDULED:
        return own[:, None, :]
    out = np.repeat(own[:, None, :], 1 + len(SHARED_RATIOS), axis=1)
    for k, (rb, rw) in enumerate(SHARED_RATIOS, start=1):
        out[:, k, 1], out[:, k, 2] = rb, rw
    return out


def _distinct_orders(orders: np.ndarray) -> np.ndarray:
    """``np.unique(orders, axis=0)``: where every row is bitwise the first and equals itself (no
    NaN), that row alone (one configuration, or a batch of one pass-time ratio: most calls),
    without unique's sort of a structured view."""
    if len(orders):
        bits = np.ascontiguousarray(orders).view(np.uint64)
        if (bits == bits[0]).all() and (orders[0] == orders[0]).all():
            return orders[:1]
    return np.unique(orders, axis=0)


def flush_makespan_s(kind, p: int, m: int, v: int, f, b, w, apart=None, with_order: bool = False):
    """Makespan (s) of one flush of ``m`` micro-batches, per row.

    The shortest flush over the ``candidate_orders``; ``with_order`` also returns the (rows, 3)
    pass-time ratios of the order that gave it (``event_level`` draws that order).

    Args:
        kind: the schedule (``ScheduleKind`` or its value).
        p, m, v: stages, micro-batches, chunks per stage (as ``make_schedule`` takes them).
        f, b, w: (rows, p, v) forward, input-gradient and weight-gradient seconds of one
            micro-batch through each (stage, chunk) cell; a fused BW lasts b + w.
        apart: optional (b, w) of a B and a W run as separate ops, where the schedule mixes
            split and fused backward passes (DualPipe): its B and W ops last these, its BW ops
            ``b + w`` of the fused pair above. None: the B and W ops last ``b`` and ``w``.
    """
    kind = ScheduleKind(getattr(kind, "value", kind))
    f, b, w = (np.asarray(x, dtype=float) for x in (f, b, w))
    rows = f.shape[0]
    b_op, w_op = (b, w) if apart is None else (np.asarray(x, dtype=float) for x in apart)
    table = np.stack([f, b_op, w_op, b + w]).reshape(4, rows, p * v)
    candidates = candidate_orders(kind, f, b, w)
    spans = np.empty(candidates.shape[:2])
    for k in range(candidates.shape[1]):
        orders = candidates[:, k]
        for key in _distinct_orders(orders):
            sel = np.flatnonzero((orders == key).all(axis=1))
            spans[sel, k] = _memo_flush(kind, p, m, v, table[:, sel], tuple(float(x) for x in key))
    best = np.argmin(spans, axis=1)         # ties: the row's own order, then the first neighbour
    out = spans[np.arange(rows), best]
    if with_order:
        return out, candidates[np.arange(rows), best]
    return out


#: rows whose makespan each (schedule, p, m, v, order) memo holds, and the memos kept
MEMO_ROWS, MEMO_KEYS = 8192, 512
_MEMO: "OrderedDict[tuple, tuple[np.ndarray, np.ndarray]]" = OrderedDict()


def _row_bytes(table: np.ndarray) -> np.ndarray:
    """Each row of ``table`` (4, rows, cells) as one opaque byte string (its op durations)."""
    x = np.ascontiguousarray(np.moveaxis(table, 1, 0).reshape(table.shape[1], -1))
    return x.view(np.dtype((np.void, x.dtype.itemsize * x.shape[1]))).ravel()


def _memo_flush(kind: ScheduleKind, p: int, m: int, v: int, table: np.ndarray, durations) -> np.ndarray:
    """``_flush`` of each row, swept once per distinct row: a row whose op durations are
    byte-identical to one swept before (in this call or an earlier one: a search computes the
    same flush for configurations that differ only in what the pipeline does not see, and the
    kept plans' table again) takes that row's makespan. ``_flush`` is a pure function of the row,
    so the values are the very numbers a sweep gives. The memo is bounded: per key ``MEMO_ROWS``
    rows (past that it holds the last call's new rows only), ``MEMO_KEYS`` keys (the least
    recently used dropped)."""
    key = (kind, p, m, v, durations)
    rows = _row_bytes(table)
    uniq, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    known_keys, known_values = _MEMO.get(key, (uniq[:0], np.zeros(0)))
    at = np.minimum(np.searchsorted(known_keys, uniq), max(len(known_keys) - 1, 0))
    hit = (known_keys[at] == uniq) if len(known_keys) else np.zeros(len(uniq), dtype=bool)
    values = np.empty(len(uniq))
    values[hit] = known_values[at[hit]]
    miss = np.flatnonzero(~hit)
    if len(miss):
        sel = first[miss]
        # the stage's work; where the schedule mixes split and fused backward passes, its
        # forwards and fused backwards (no more than its split ones)
        f_, b_, w_ = (table[i, sel].reshape(len(sel), p, v) for i in range(3))
        if kind in MIXED_W:
            b_, w_ = table[3, sel].reshape(len(sel), p, v), 0.0
        values[miss] = _flush(kind, p, m, v, table[:, sel], durations, stage_work_s(kind, f_, b_, w_))
        keys, vals = np.concatenate([known_keys, uniq[miss]]), np.concatenate([known_values, values[miss]])
        if len(keys) > MEMO_ROWS:
            keys, vals = uniq[miss], values[miss]          # full: start again from this call's rows
        order = np.argsort(keys, kind="stable")
        _MEMO[key] = (keys[order], vals[order])
        _MEMO.move_to_end(key)
    elif key in _MEMO:
        _MEMO.move_to_end(key)
    while len(_MEMO) > MEMO_KEYS:
        _MEMO.popitem(last=False)
    return values[inverse.ravel()]


def _flush(kind: ScheduleKind, p: int, m: int, v: int, table: np.ndarray, durations, work) -> np.ndarray:
    cap = m_cap(kind, p)
    if m <= cap:
        return _sweep(kind, p, m, v, table, durations)
    d = max(_round(kind, p), p)
    d = -(-d // _round(kind, p)) * _round(kind, p)
    lo_m = max(cap - d, _min_m(kind, p))
    t_hi = _sweep(kind, p, cap, v, table, durations)
    t_lo = _sweep(kind, p, lo_m, v, table, durations)
    # a stage runs its ops one at a time: the flush grows by at least the busiest stage's work
    # per micro-batch (the max-plus system's cycle time); a slope below it is a transient
    rate = np.maximum((t_hi - t_lo) / (cap - lo_m), work.max(axis=1))
    return t_hi + (m - cap) * rate


__all__ = ["candidate_orders", "flush_makespan_s", "m_cap", "split_backward_counts", "order_durations", "peak_held_chunks", "peak_in_flight", "peak_in_flight_rows", "F", "W", "BW"]
