"""Pipeline schedules as data: which operation each stage runs, in which order.

A schedule assigns to every pipeline stage (device) an ordered list of operations
``(kind, microbatch, chunk)``:

* ``F``: forward of one micro-batch through one model chunk;
* ``B``: backward for the input gradient (the "B" pass of Qi et al. 2023);
* ``W``: backward for the weight gradient ("W" pass); it needs the B of the same
  (micro-batch, chunk) and nothing else;
* ``BW``: B with W fused into it, used by schedules that do not split the backward
  (GPipe, 1F1B, interleaved 1F1B, and DualPipe's non-zero-bubble passes). A BW counts as
  both the B and the W of its (micro-batch, chunk).

Layer placement is a *path*: the sequence of ``(stage, chunk)`` cells a micro-batch's forward
visits, in layer order. 1F1B-like schedules use ``[(0,0), (1,0), ..., (p-1,0)]``; interleaved
puts chunk c of stage i at virtual stage ``c p + i`` (Narayanan et al. 2021); V-shaped
schedules (ZB-V, DualPipeV) run chunk 0 down and chunk 1 back up the same devices, so stage i
holds virtual stages i and ``2p - 1 - i``; bidirectional DualPipe has two paths, one per
direction, each micro-batch using one of them.

Dependencies (all "finish-to-start"): F at path position u waits for F at u-1; B (or BW) at u
waits for B at u+1, or for the F at the last position; W waits for the B at the same cell.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from numbers import Real
from functools import cached_property, lru_cache
from typing import NamedTuple

import numpy as np

from hardware_specs.errors import InputError, shown
from simulator.pipeline import generators as gen

F, B, W, BW = gen.F, gen.B, gen.W, gen.BW
KIND_NAMES = ("F", "B", "W", "BW")


class ScheduleKind(str, Enum):
    """Schedules the generator knows: ``simulator.parallel_config.Schedule``'s values, plus ``dualpipev``."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    ZB_H1 = "zb-h1"
    ZB_H2 = "zb-h2"
    ZB_V = "zb-v"
    DUALPIPE = "dualpipe"       # bidirectional, two model copies (DeepSeek-V3)
    DUALPIPE_V = "dualpipev"    # V-shaped "cut in half" DualPipe, one copy


V_SHAPED = (ScheduleKind.ZB_V, ScheduleKind.DUALPIPE_V)
TWO_CHUNK = (ScheduleKind.ZB_V, ScheduleKind.DUALPIPE, ScheduleKind.DUALPIPE_V)


class Op(NamedTuple):
    """One operation on a stage: kind in {"F", "B", "W", "BW"}, micro-batch and local chunk."""

    kind: str
    microbatch: int
    chunk: int


class OpRef(NamedTuple):
    """An operation located on its stage."""

    stage: int
    kind: str
    microbatch: int
    chunk: int


class Dependency(NamedTuple):
    """``op`` may start only after ``after`` has finished (plus p2p time when ``cross_stage``)."""

    op: OpRef
    after: OpRef
    cross_stage: bool


def _kind(value) -> ScheduleKind:
    raw = getattr(value, "value", value)
    try:
        return ScheduleKind(str(raw).lower())
    except ValueError:
        raise InputError("schedule", f"unknown pipeline schedule {raw!r}",
                         "choose one of " + ", ".join(k.value for k in ScheduleKind)) from None


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class PipelineSchedule:
    """Per-stage operation orders of one pipeline schedule, stored flat (stage-major).

    Attributes:
        kind: the schedule.
        p: pipeline stages (devices); m: micro-batches; v: model chunks per stage.
        stage_ptr: (p+1,) offsets; stage i's ops are ``stage_ptr[i]:stage_ptr[i+1]``, in order.
        op_kind, op_mb, op_chunk: (n_ops,) kind code (F=0, B=1, W=2, BW=3), micro-batch, chunk.
        paths: (n_paths, p*v) or (2, p) for DualPipe; ``paths[j, u]`` is the cell
            ``stage * v + chunk`` that runs forward position u of path j.
        mb_path: (m,) which path each micro-batch follows.
        num_layers: transformer layers of the model, if given (checked to split evenly).
    """

    kind: ScheduleKind
    p: int
    m: int
    v: int
    stage_ptr: np.ndarray
    op_kind: np.ndarray
    op_mb: np.ndarray
    op_chunk: np.ndarray
    paths: np.ndarray
    mb_path: np.ndarray
    num_layers: int | None = None

    def __post_init__(self) -> None:
        n = int(self.stage_ptr[-1]) if len(self.stage_ptr) else -1
        if len(self.stage_ptr) != self.p + 1 or self.stage_ptr[0] != 0 or np.any(np.diff(self.stage_ptr) < 0):
            raise InputError("stage_ptr", f"need p+1 = {self.p + 1} non-decreasing offsets starting at 0")
        for name in ("op_kind", "op_mb", "op_chunk"):
            if getattr(self, name).shape != (n,):
                raise InputError(name, f"shape {getattr(self, name).shape}, expected ({n},) to match stage_ptr")
        if np.any((self.op_kind < F) | (self.op_kind > BW)):
            raise InputError("op_kind", "kind codes are 0 (F), 1 (B), 2 (W) and 3 (BW)")
        if self.paths.ndim != 2 or self.mb_path.shape != (self.m,) or np.any(self.mb_path >= self.paths.shape[0]):
            raise InputError("paths", "need a (n_paths, length) array and an (m,) mb_path indexing it")
        if np.any((self.paths < 0) | (self.paths >= self.p * self.v)):
            raise InputError("paths", f"cells are stage * v + chunk, in [0, {self.p * self.v})")

    @property
    def n_ops(self) -> int:
        return int(self.op_kind.size)

    @property
    def path_length(self) -> int:
        """Forward positions (virtual stages) a micro-batch passes through."""
        return int(self.paths.shape[1])

    @property
    def layers_per_chunk(self) -> int | None:
        """Layers in one (stage, chunk) cell; DualPipe keeps two model copies of p stages each."""
        if self.num_layers is None:
            return None
        return self.num_layers // self.path_length

    @cached_property
    def op_stage(self) -> np.ndarray:
        """(n_ops,) stage of each op."""
        return _readonly(np.repeat(np.arange(self.p), np.diff(self.stage_ptr)))

    @cached_property
    def op_position(self) -> np.ndarray:
        """(n_ops,) forward-path position (virtual stage) of each op; -1 if off its path."""
        where = np.full((self.paths.shape[0], self.p * self.v), -1, dtype=np.int64)
        for j, path in enumerate(self.paths):
            where[j, path] = np.arange(path.size)
        return _readonly(where[self.mb_path[self.op_mb], self.op_stage * self.v + self.op_chunk])

    def ops(self, stage: int) -> tuple[Op, ...]:
        """Stage ``stage``'s operations in execution order."""
        lo, hi = self.stage_ptr[stage], self.stage_ptr[stage + 1]
        return tuple(Op(KIND_NAMES[k], mb, c) for k, mb, c in
                     zip(self.op_kind[lo:hi].tolist(), self.op_mb[lo:hi].tolist(), self.op_chunk[lo:hi].tolist()))

    @property
    def stage_ops(self) -> tuple[tuple[Op, ...], ...]:
        """Every stage's operation list (index = stage)."""
        return tuple(self.ops(s) for s in range(self.p))

    def virtual_stage(self, stage: int, chunk: int, path: int = 0) -> int:
        """Position in layer order of chunk ``chunk`` on ``stage`` (along ``path``); -1 if unused."""
        hits = np.nonzero(self.paths[path] == stage * self.v + chunk)[0]
        return int(hits[0]) if hits.size else -1

    def _key(self, klass: np.ndarray, mb: np.ndarray, position: np.ndarray) -> np.ndarray:
        return (klass.astype(np.int64) * self.m + mb) * self.path_length + position

    @cached_property
    def predecessor(self) -> np.ndarray:
        """(n_ops,) flat index of the op each op waits for across the DAG (-1: none).

        Only meaningful for a schedule that passes :func:`validate_schedule`'s count checks.
        """
        klass = np.where(self.op_kind == BW, B, self.op_kind).astype(np.int64)   # BW is found as a B
        pos = self.op_position
        table = np.full(3 * self.m * self.path_length, -1, dtype=np.int64)
        table[self._key(klass, self.op_mb, np.maximum(pos, 0))] = np.arange(self.n_ops)
        last = self.path_length - 1
        want_klass = np.where(klass == F, F, np.where(klass == W, B, np.where(pos == last, F, B)))
        want_pos = np.where(klass == F, pos - 1, np.where(klass == W, pos, np.where(pos == last, pos, pos + 1)))
        pred = table[self._key(want_klass, self.op_mb, np.clip(want_pos, 0, last))]
        return _readonly(np.where(want_pos < 0, -1, pred))

    def dependencies(self) -> list[Dependency]:
        """Every data dependency, as readable records (one per op that has one)."""
        pred, stage = self.predecessor, self.op_stage
        kind, mb, chunk = self.op_kind.tolist(), self.op_mb.tolist(), self.op_chunk.tolist()
        out = []
        for j, d in enumerate(pred.tolist()):
            if d >= 0:
                out.append(Dependency(OpRef(int(stage[j]), KIND_NAMES[kind[j]], mb[j], chunk[j]),
                                      OpRef(int(stage[d]), KIND_NAMES[kind[d]], mb[d], chunk[d]),
                                      bool(stage[j] != stage[d])))
        return out


def _build(kind: ScheduleKind, p: int, m: int, v: int, orders: list[list[tuple]],
           paths: np.ndarray, mb_path: np.ndarray, num_layers: int | None) -> PipelineSchedule:
    flat = np.array([op for ops in orders for op in ops], dtype=np.int64).reshape(-1, 3)
    ptr = np.zeros(p + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(ops) for ops in orders])
    return PipelineSchedule(kind, p, m, v, _readonly(ptr), _readonly(flat[:, 0].copy()),
                            _readonly(flat[:, 1].copy()), _readonly(flat[:, 2].copy()),
                            _readonly(np.asarray(paths, dtype=np.int64)),
                            _readonly(np.asarray(mb_path, dtype=np.int64)), num_layers)


def _positive_int(field: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(field, f"must be an integer >= 1, got {shown(value)}")
    return int(value)


def _check_request(kind: ScheduleKind, p: int, m: int, v: int | None, num_layers) -> int:
    """Validate (kind, p, m, v, num_layers); return v (defaulted)."""
    p, m = _positive_int("p", p), _positive_int("m", m)
    if v is None:
        v = 2 if kind in (ScheduleKind.INTERLEAVED, *TWO_CHUNK) else 1
    v = _positive_int("v", v)
    if kind == ScheduleKind.INTERLEAVED:
        if v < 2:
            raise InputError("v", f"interleaved 1F1B needs v >= 2 chunks per stage, got {v}",
                             "use v >= 2, or the 1f1b schedule")
        if m % p:
            raise InputError("m", f"interleaved 1F1B needs the micro-batch count to be a multiple of p={p} "
                             f"(Megatron-LM), got m={m}", f"use m = {p * max(1, round(m / p))}")
    elif kind in TWO_CHUNK:
        if v != 2:
            raise InputError("v", f"{kind.value} places exactly 2 chunks per stage, got v={v}", "use v=2")
    elif v != 1:
        raise InputError("v", f"{kind.value} runs one chunk per stage, got v={v}",
                         "use v=1, or the interleaved schedule for v > 1")
    if kind == ScheduleKind.DUALPIPE:
        if p % 2:
            raise InputError("p", f"DualPipe pairs rank i with rank p-1-i and needs an even p, got {p}",
                             "use an even p, or dualpipev")
        if m % 2 or m < 2 * p:
            raise InputError("m", f"DualPipe needs an even number of micro-batches m >= 2p = {2 * p}, got {m}",
                             f"use an even m >= {2 * p} (in a run: micro-batches per step = global batch / "
                             f"(micro-batch x dp), so a global batch of at least {2 * p} x micro-batch x dp, "
                             "an even multiple of micro-batch x dp)")
    if kind == ScheduleKind.DUALPIPE_V and m < 2 * p:
        raise InputError("m", f"DualPipeV needs m >= 2p = {2 * p} micro-batches, got {m}", f"use m >= {2 * p}")
    if num_layers is not None:
        num_layers = _positive_int("num_layers", num_layers)
        cells = p if kind == ScheduleKind.DUALPIPE else p * v
        if num_layers % cells:
            raise InputError("num_layers", f"{num_layers} layers do not split evenly over "
                             f"{cells} pipeline chunks (p={p} x v={v if kind != ScheduleKind.DUALPIPE else 1})",
                             f"use a multiple of {cells} layers")
    return v


def _check_size(kind: ScheduleKind, p: int, m: int, v: int) -> None:
    """Refuse to build a flush of more operations than ``makespan.flush_limit(kind)``: beyond it
    the order takes minutes of Python and gigabytes (1F1B over 5,000 stages and micro-batches ran
    out of memory; ZB-H2 over 300 stages and 600 micro-batches took 15 s). Counted over all ``m``
    micro-batches (``makespan.flush_ops(..., capped=False)``), since this call builds them all, and
    for GPipe too: stricter than ``flush_within_limit``, which ``simulate`` and ``plan`` apply to
    the flush of at most ``m_cap`` micro-batches they build (extrapolating longer ones) and which
    passes GPipe (its peak and flush need no order)."""
    from simulator.pipeline.makespan import flush_limit, flush_ops     # (makespan imports this module)
    per_micro_batch = int(flush_ops(kind, p, 1, v, capped=False))
    chunks = per_micro_batch // (3 * p)
    ops, limit = per_micro_batch * m, flush_limit(kind)
    if ops > limit:
        most_m = limit // (3 * p * chunks)
        field, fix = ("m", f"use m <= {most_m:,} at p={p}") if most_m >= 1 else \
            ("p", f"use p <= {limit // (3 * chunks):,}")
        raise InputError(field, f"{kind.value} over p={p} stages x {chunks} chunk(s) and m={m} micro-batches is "
                                f"{ops:,} operations, over the {limit:,} a flush is built with", fix)


def _check_durations(durations) -> tuple[float, float, float]:
    """``durations`` as three positive finite pass times (F, B, W), or an ``InputError``."""
    bad = InputError("durations", f"need three positive finite pass times (F, B, W), got {shown(durations)}",
                     "pass e.g. (1.0, 1.0, 1.0)")
    if isinstance(durations, (str, bytes)) or not hasattr(durations, "__len__") or len(durations) != 3:
        raise bad
    if any(isinstance(x, bool) or not isinstance(x, Real) for x in durations):
        raise bad
    out = tuple(float(x) for x in durations)
    if not all(0.0 < x < float("inf") for x in out):
        raise bad
    return out


def make_schedule(kind, p: int, m: int, v: int | None = None, num_layers: int | None = None,
                  validate: bool = False, durations: tuple[float, float, float] | None = None) -> PipelineSchedule:
    """Generate schedule ``kind`` for p stages, m micro-batches and v chunks per stage.

    Args:
        kind: a :class:`ScheduleKind`, a ``simulator.parallel_config.Schedule`` or its string value.
        v: chunks per stage; defaults to 2 for interleaved, ZB-V and DualPipe(V), else 1.
        num_layers: if given, must split evenly over the ``p * v`` chunks (``p`` for DualPipe,
            whose two model copies have p stages each).
        validate: also run :func:`validate_schedule` (a full dependency sweep).
        durations: (F, B, W) times the list-scheduled orders (ZB-H2, ZB-V) are built for
            (default equal); the others' orders do not depend on them.

    Raises:
        InputError: p or m below 1; v other than 1 for GPipe/1F1B/ZB-H1/ZB-H2, below 2 for
            interleaved, other than 2 for ZB-V/DualPipe(V); interleaved with m not a multiple of
            p (Megatron-LM's requirement); DualPipe with odd p, odd m or m < 2p; DualPipeV with
            m < 2p (both as in DeepSeek's reference); num_layers not divisible by the chunks;
            a flush of more than ``makespan.flush_limit(kind)`` operations (3 x p x chunks x m,
            all m micro-batches: ``simulate`` and ``plan`` hold the same limit against the at
            most ``m_cap`` micro-batches they build, and build no GPipe order); ``durations`` not
            three positive finite numbers.
    """
    kind = _kind(kind)
    v = _check_request(kind, p, m, v, num_layers)
    _check_size(kind, p, m, v)
    if durations is not None:
        durations = _check_durations(durations)
    if kind not in (ScheduleKind.ZB_H2, ScheduleKind.ZB_V) or durations is None:
        durations = (1.0, 1.0, 1.0)
    schedule = _generate(kind, int(p), int(m), v, None if num_layers is None else int(num_layers), durations)
    if validate:
        validate_schedule(schedule)
    return schedule


@lru_cache(maxsize=64)
def schedule_paths(kind: ScheduleKind, p: int, v: int) -> np.ndarray:
    """(n_paths, positions) cells ``stage * v + chunk`` each forward path visits, in layer order
    (read-only): one path, except DualPipe's two (the second copy runs up the ranks on chunk 1)."""
    kind = _kind(kind)
    u = np.arange(p * v)
    if kind == ScheduleKind.INTERLEAVED:
        paths = ((u % p) * v + u // p)[None, :]
    elif kind in V_SHAPED:
        stage = np.where(u < p, u, 2 * p - 1 - u)
        paths = (stage * v + (u >= p))[None, :]
    elif kind == ScheduleKind.DUALPIPE:
        paths = np.array([np.arange(p) * v, (p - 1 - np.arange(p)) * v + 1])
    else:
        paths = np.arange(p)[None, :] * v
    return _readonly(paths.astype(np.int64))


@lru_cache(maxsize=64)
def _generate(kind: ScheduleKind, p: int, m: int, v: int, num_layers: int | None,
              durations: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> PipelineSchedule:
    """Build (and memoise: schedules are immutable) the op orders of a checked request."""
    paths = schedule_paths(kind, p, v)
    mb_path = np.zeros(m, dtype=np.int64)
    if kind == ScheduleKind.GPIPE:
        orders = gen.gpipe_order(p, m)
    elif kind == ScheduleKind.ONE_F_ONE_B:
        orders = gen.one_f_one_b_order(p, m)
    elif kind == ScheduleKind.ZB_H1:
        orders = gen.zb_h1_order(p, m)
    elif kind == ScheduleKind.ZB_H2:
        cells = [(i, 0) for i in range(p)]
        orders = gen.best_timed_order(p, m, 1, cells, 2 * p - 1, *durations)
    elif kind == ScheduleKind.INTERLEAVED:
        orders = gen.interleaved_order(p, m, v)
    elif kind in V_SHAPED:
        cells = [(i, 0) for i in range(p)] + [(i, 1) for i in reversed(range(p))]
        if kind == ScheduleKind.ZB_V:
            orders = gen.best_zb_v_order(p, m, *durations)
        else:
            orders = gen.dualpipe_v_order(p, m)
    else:   # DUALPIPE
        mb_path[m // 2:] = 1
        orders = gen.dualpipe_order(p, m)
    return _build(kind, p, m, v, orders, paths, mb_path, num_layers)


def validate_schedule(schedule: PipelineSchedule) -> None:
    """Check that ``schedule`` is runnable and complete; raise ``InputError`` otherwise.

    Checks: every op's (stage, chunk) lies on its micro-batch's path; every (micro-batch,
    position) has exactly one F, and either exactly one B and one W or exactly one BW; and the
    per-stage orders admit a topological order of all dependencies (no stage waits on an op
    queued behind it, directly or through other stages). The last check is a full sweep of
    the dependency DAG (the event simulator with unit durations).
    """
    s = schedule
    if np.any(s.op_mb < 0) or np.any(s.op_mb >= s.m) or np.any(s.op_chunk < 0) or np.any(s.op_chunk >= s.v):
        raise InputError("schedule", "an op has a micro-batch or chunk index out of range")
    bad = np.nonzero(s.op_position < 0)[0]
    if bad.size:
        j = int(bad[0])
        raise InputError("schedule", f"stage {int(s.op_stage[j])} runs chunk {int(s.op_chunk[j])} of micro-batch "
                         f"{int(s.op_mb[j])}, which that micro-batch's path does not visit")
    size = s.m * s.path_length
    flat = s.op_mb.astype(np.int64) * s.path_length + s.op_position
    counts = np.stack([np.bincount(flat[s.op_kind == k], minlength=size) for k in (F, B, W, BW)])
    ok = (counts[0] == 1) & (((counts[1] == 1) & (counts[2] == 1) & (counts[3] == 0))
                             | ((counts[1] == 0) & (counts[2] == 0) & (counts[3] == 1)))
    if not np.all(ok):
        j = int(np.nonzero(~ok)[0][0])
        mb, u = divmod(j, s.path_length)
        got = ", ".join(f"{n}x{KIND_NAMES[k]}" for k, n in enumerate(counts[:, j]))
        raise InputError("schedule", f"micro-batch {mb} at virtual stage {u} has {got}; "
                         "need exactly one F and either one B and one W, or one BW")
    from simulator.pipeline.event_sim import sweep   # late import: event_sim imports this module
    unit = np.ones(s.n_ops)
    sweep(s, unit, np.zeros(s.n_ops))
