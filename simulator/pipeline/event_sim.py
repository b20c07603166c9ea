"""Event-level timing of a pipeline schedule: start and end of every operation.

Each stage runs its operations one at a time in the schedule's order. An operation starts
when (a) the previous operation on its stage has finished and (b) the operation it depends on
(see :mod:`simulator.pipeline.schedules`) has finished, plus the point-to-point transfer time
when that operation ran on another stage. Start times are therefore the longest paths through
the dependency DAG; :func:`sweep` computes them in one topological pass over flat Python
lists (no per-op objects), waking a stage when the op it waits for completes.

Memory: an F takes one activation set of its (micro-batch, chunk) when it starts and the W
(or fused BW) of the same pair releases it when it ends (Qi et al. 2023, section 2: the
activations are needed until the weight gradient is computed).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hardware_specs.errors import InputError, shown
from simulator.pipeline.schedules import BW, F, KIND_NAMES, PipelineSchedule, W

#: a makespan above a stage's work by less than this share of it is floating-point rounding of
#: the sums, not idle time (pp = 1 gave 8.9e-16 s of a 7 s step, printed as "-0.0%" idle);
#: ``simulator.step_model.pipeline_bubble_s`` clamps the breakdown's bubble by the same share
BUBBLE_ROUNDING_SHARE = 1e-12


def stage_idle_s(makespan_s, busy_s):
    """Idle seconds ``makespan - busy`` per stage, 0 where within ``BUBBLE_ROUNDING_SHARE`` of
    the makespan (rounding, not idle time: no stage idles a negative time)."""
    idle = makespan_s - np.asarray(busy_s, dtype=float)
    return np.where(idle > BUBBLE_ROUNDING_SHARE * makespan_s, idle, 0.0)


def sweep(schedule: PipelineSchedule, dur_s: np.ndarray, comm_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end time (s) of every op, given per-op durations and input transfer times.

    Args:
        dur_s: (n_ops,) duration of each op in seconds.
        comm_s: (n_ops,) seconds between the end of an op's predecessor and the moment its
            input is available (0 for same-stage predecessors).

    Raises:
        InputError: the per-stage orders deadlock (some stage waits for an op that can only
            run after it).
    """
    pred = schedule.predecessor.tolist()
    dur, comm = dur_s.tolist(), comm_s.tolist()
    ptr = schedule.stage_ptr.tolist()
    n, p = len(pred), schedule.p
    start, end = [0.0] * n, [-1.0] * n          # end < 0: not run yet
    waiter = [-1] * n                           # stage blocked on this op, if any
    pos, stop, clock = ptr[:-1], ptr[1:], [0.0] * p
    work = list(range(p - 1, -1, -1))
    while work:
        s = work.pop()
        j, e, t = pos[s], stop[s], clock[s]
        while j < e:
            d = pred[j]
            if d >= 0:
                ready = end[d]
                if ready < 0:
                    waiter[d] = s
                    break
                ready += comm[j]
                if ready > t:
                    t = ready
            start[j] = t
            t += dur[j]
            end[j] = t
            if waiter[j] >= 0:
                work.append(waiter[j])
            j += 1
        pos[s], clock[s] = j, t
    stuck = [s for s in range(p) if pos[s] < stop[s]]
    if stuck:
        s = stuck[0]
        j = pos[s]
        d = pred[j]
        op = schedule.ops(s)[j - ptr[s]]
        dst = int(schedule.op_stage[d])
        raise InputError("schedule", f"deadlock: stage {s} op {op.kind}{op.microbatch} (chunk {op.chunk}) waits for "
                         f"{KIND_NAMES[int(schedule.op_kind[d])]}{int(schedule.op_mb[d])} on stage {dst}, "
                         f"which never runs ({len(stuck)} stage(s) stuck)",
                         "reorder the stage's ops so that every dependency can finish first")
    return np.array(start), np.array(end)


@dataclass(frozen=True, eq=False)
class ScheduleResult:
    """Timing and memory of one simulated schedule. Times in seconds; arrays are read-only.

    Attributes:
        start_s, end_s: (n_ops,) per op, aligned with the schedule's flat op arrays.
        comm_start_s, comm_end_s: (n_ops,) the transfer that delivers each op's input from
            another stage (sender's end to arrival); NaN where the input is local.
        makespan_s: end of the last op (one flush, all stages start at 0).
        busy_s, idle_s: (p,) compute time and ``makespan - busy`` per stage.
        first_start_s, last_end_s: (p,) first op start and last op end per stage.
        bubble_fraction: ``sum(idle) / (p * makespan)``.
        pipelined_bubble_fraction: ``1 - sum(busy) / (p * max(last_end - first_start))``, the
            bubble when consecutive steps overlap as a parallelogram (each stage starts the next
            step once it is done, e.g. with Qi et al.'s optimizer post-validation): the fill
            offsets of a single flush are not counted.
        inflight: (n_ops,) activation sets held on the op's stage after it (F counted from its
            start, W/BW released at its end).
        inflight_time_s: (n_ops,) when ``inflight`` takes that value (F start, else op end).
        peak_inflight: (p,) most activation sets held at once per stage (micro-batch chunks).
        stage_ptr: (p+1,) the schedule's per-stage offsets into the op arrays.
        inflight_bytes, peak_activation_bytes: same in bytes, if ``activation_bytes`` was given.
        prologue: work run before the flush (``with_prologue``), None if none: its time is in
            ``makespan_s``, ``busy_s``, ``idle_s`` and the fractions; the op times come after it.
    """

    start_s: np.ndarray
    end_s: np.ndarray
    comm_start_s: np.ndarray
    comm_end_s: np.ndarray
    makespan_s: float
    busy_s: np.ndarray
    idle_s: np.ndarray
    first_start_s: np.ndarray
    last_end_s: np.ndarray
    bubble_fraction: float
    pipelined_bubble_fraction: float
    inflight: np.ndarray
    inflight_time_s: np.ndarray
    peak_inflight: np.ndarray
    stage_ptr: np.ndarray
    inflight_bytes: np.ndarray | None = None
    peak_activation_bytes: np.ndarray | None = None
    prologue: "Prologue | None" = None

    @property
    def bubble_s(self) -> float:
        """Total idle time summed over stages (s)."""
        return float(self.idle_s.sum())

    def inflight_timeline(self, stage: int, in_bytes: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Step function of the activations held on ``stage``: (times_s, value from that time on).

        Starts at (0, 0); values are activation sets, or bytes with ``in_bytes`` (needs
        ``activation_bytes`` at simulation).
        """
        lo, hi = self.stage_ptr[stage], self.stage_ptr[stage + 1]
        values = self.inflight_bytes if in_bytes else self.inflight
        if values is None:
            raise InputError("in_bytes", "simulated without activation_bytes", "pass activation_bytes")
        return np.r_[0.0, self.inflight_time_s[lo:hi]], np.r_[0, values[lo:hi]]


@dataclass(frozen=True, eq=False)
class Prologue:
    """Operations run one after another before a schedule's flush, each on one (stage, chunk)
    cell, e.g. the once-a-step low-precision weight casts. Arrays (n,), read-only, seconds.

    Attributes:
        name: what each operation is (``"weight cast"``), for traces and charts.
        stage, chunk: the cell each operation runs on.
        start_s, end_s: its interval; the first starts at 0, each starts when the one before ends.
    """

    name: str
    stage: np.ndarray
    chunk: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray

    @property
    def duration_s(self) -> float:
        """The seconds the flush starts later (the last operation's end; 0 if none)."""
        return float(self.end_s[-1]) if self.end_s.size else 0.0


def with_prologue(result: ScheduleResult, schedule: PipelineSchedule, name: str, cells, dur_s) -> ScheduleResult:
    """``result`` with a serial prologue before its flush: the operation on flat cell
    ``cells[i]`` (``stage * v + chunk``) lasting ``dur_s[i]`` seconds runs after the one before it,
    and every op of the flush starts the prologue's total later. Each stage's ``busy_s`` gains
    its prologue operations; ``makespan_s`` the total; idle and bubble fractions follow.
    Operations of 0 s are left out."""
    s = schedule
    cells = np.asarray(cells, dtype=np.int64).reshape(-1)
    dur = _numbers(name, dur_s).reshape(-1)
    if cells.shape != dur.shape or np.any((cells < 0) | (cells >= s.p * s.v)):
        raise InputError(name, f"{cells.size} cells (each in [0, {s.p * s.v})) for {dur.size} durations",
                         "give one cell stage * v + chunk per duration")
    if not np.all(np.isfinite(dur)) or np.any(dur < 0):
        raise InputError(name, "must be finite and >= 0 (seconds)")
    keep = dur > 0
    cells, dur = cells[keep], dur[keep]
    end = np.cumsum(dur)
    start = np.r_[0.0, end[:-1]]
    shift = float(end[-1]) if end.size else 0.0
    stage, chunk = cells // s.v, cells % s.v
    busy = result.busy_s + np.bincount(stage, weights=dur, minlength=s.p)
    makespan = result.makespan_s + shift
    first = result.first_start_s + shift
    np.minimum.at(first, stage, start)              # a stage's first work is now its first cast
    last = result.last_end_s + shift
    idle = stage_idle_s(makespan, busy)
    span = float((last - first).max()) if s.p else 0.0
    bubble = float(idle.sum() / (s.p * makespan)) if makespan > 0 else 0.0
    pipelined = float(1.0 - busy.sum() / (s.p * span)) if span > 0 else 0.0
    moved = [x + shift for x in (result.start_s, result.end_s, result.comm_start_s, result.comm_end_s,
                                 result.inflight_time_s)]
    prologue = Prologue(name, *_readonly(stage, chunk, start, end))
    _readonly(*moved, busy, idle, first, last)
    return replace(result, start_s=moved[0], end_s=moved[1], comm_start_s=moved[2], comm_end_s=moved[3],
                   inflight_time_s=moved[4], makespan_s=makespan, busy_s=busy, idle_s=idle, first_start_s=first,
                   last_end_s=last, bubble_fraction=bubble, pipelined_bubble_fraction=pipelined, prologue=prologue)


def _numbers(name: str, value, fix: str = "pass a float, a (p, 1) column or a (p, v) array") -> np.ndarray:
    """``value`` as a float array; an ``InputError`` naming ``name`` for anything but real
    numbers (a string, None, a bool: numpy would read '1.5' and True as numbers)."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):
        a = np.asarray(None)
    if a.dtype.kind not in "iuf":
        raise InputError(name, f"must be a number or an array of numbers (seconds), got {shown(value)}", fix)
    return a.astype(float)


def _per_cell(name: str, value, p: int, v: int) -> np.ndarray:
    numbers = _numbers(name, value)
    try:
        a = np.broadcast_to(numbers, (p, v))
    except ValueError:
        raise InputError(name, f"shape {np.shape(value)} does not broadcast to (p, v) = ({p}, {v})",
                         "pass a scalar, a (p,) column as (p, 1), or a (p, v) array") from None
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise InputError(name, "must be finite and >= 0 (seconds)")
    return a


def _readonly(*arrays):
    for a in arrays:
        if a is not None:
            a.setflags(write=False)
    return arrays


def simulate_schedule(schedule: PipelineSchedule, f_time_s, b_time_s, w_time_s, p2p_time_s=0.0,
                      activation_bytes=None, bw_time_s=None) -> ScheduleResult:
    """Simulate one flush of ``schedule``.

    Args:
        f_time_s, b_time_s, w_time_s: forward, input-gradient backward and weight-gradient
            backward time of one micro-batch through one chunk, seconds; broadcast to (p, v)
            (stage, chunk), so stages may be uneven. A fused BW lasts ``b + w``.
        p2p_time_s: seconds to send an activation or gradient from a stage to a neighbouring
            stage; a scalar or (p,) indexed by the sending stage. Transfers do not occupy the
            compute stream (they overlap with compute, as with Megatron's async p2p).
        activation_bytes: optional (p, v) bytes held per in-flight (micro-batch, chunk).
        bw_time_s: optional time of a fused BW op per cell, where it differs from the split
            B and W ops' ``b + w`` (a fused backward hides its collectives under both halves);
            None: ``b + w``.

    Returns:
        :class:`ScheduleResult`.
    """
    s = schedule
    f, b, w = (_per_cell(n, x, s.p, s.v) for n, x in
               (("f_time_s", f_time_s), ("b_time_s", b_time_s), ("w_time_s", w_time_s)))
    p2p = _numbers("p2p_time_s", p2p_time_s, "pass a float or a (p,) array")
    try:
        p2p = np.broadcast_to(p2p, (s.p,))
    except ValueError:
        raise InputError("p2p_time_s", f"shape {np.shape(p2p_time_s)} is neither a scalar nor (p,) = ({s.p},)") from None
    if not np.all(np.isfinite(p2p)) or np.any(p2p < 0):
        raise InputError("p2p_time_s", "must be finite and >= 0 (seconds)")
    stage, chunk, kind = s.op_stage, s.op_chunk.astype(np.int64), s.op_kind
    bw = b + w if bw_time_s is None else _per_cell("bw_time_s", bw_time_s, s.p, s.v)
    table = np.stack([f, b, w, bw])                          # (4, p, v), indexed by kind code
    dur = table[kind, stage, chunk]
    pred = s.predecessor
    remote = (pred >= 0) & (stage[np.maximum(pred, 0)] != stage)
    comm = np.where(remote, p2p[stage[np.maximum(pred, 0)]], 0.0)
    start, end = sweep(s, dur, comm)

    heads = s.stage_ptr[:-1]
    busy = np.add.reduceat(dur, heads)
    makespan = float(end.max()) if end.size else 0.0
    idle = stage_idle_s(makespan, busy)
    first, last = start[heads], np.maximum.reduceat(end, heads)
    span = float((last - first).max())
    bubble = float(idle.sum() / (s.p * makespan)) if makespan > 0 else 0.0
    pipelined = float(1.0 - busy.sum() / (s.p * span)) if span > 0 else 0.0
    comm_start = np.where(remote, end[np.maximum(pred, 0)], np.nan)
    comm_end = comm_start + np.where(remote, comm, np.nan)

    sign = np.where(kind == F, 1, np.where((kind == W) | (kind == BW), -1, 0))
    event_t = np.where(kind == F, start, end)

    def running(delta):
        total = np.cumsum(delta)
        base = total[heads] - delta[heads]
        return total - np.repeat(base, np.diff(s.stage_ptr))

    inflight = running(sign)
    peak = np.maximum.reduceat(inflight, heads)
    inflight_bytes = peak_bytes = None
    if activation_bytes is not None:
        act = _per_cell("activation_bytes", activation_bytes, s.p, s.v)
        inflight_bytes = running(sign * act[stage, chunk])
        peak_bytes = np.maximum.reduceat(inflight_bytes, heads)
    _readonly(start, end, comm_start, comm_end, busy, idle, first, last, inflight, event_t, peak,
              inflight_bytes, peak_bytes)
    return ScheduleResult(start, end, comm_start, comm_end, makespan, busy, idle, first, last, bubble, pipelined,
                          inflight, event_t, peak, s.stage_ptr, inflight_bytes, peak_bytes)
