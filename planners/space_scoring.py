"""A whole search space scored chunk by chunk, keeping only the rows a result can show.

The space (``search_space.SpaceBase``) is built one chunk at a time; each chunk is scored
(``vectorized.evaluate_space``: memory, then the step time of the rows it can keep, refined)
and reduced at once to ``kept_rows``, the rows a ranked table and its two frontiers (memory,
GPU count) can show, so memory is bounded by a chunk and the kept rows, not by the space.
The chunks are scored one after another, so each one need not time the rows that the earlier
chunks' kept rows show the whole search cannot keep (``time_pruning.excluded``); a chunk's
memory phase and timing are split over processes (fork) when the space is large
(``evaluate_space(workers=...)``), and the next chunk's memory phase, which needs no other
chunk, runs in the workers while this process times and refines the current one
(``vectorized.start_evaluation``).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from planners.memory_screen import seed_screen
from planners.search_space import SpaceBase
from planners.time_pruning import FRONTIER_MIN_SHARE
from planners.vectorized import DEFAULT_CHUNK_ROWS, KEPT_OUTPUTS, PARALLEL_MIN_ROWS, start_evaluation



def kept_rows(tps: np.ndarray, mem: np.ndarray, n: np.ndarray, max_plans: int | None) -> np.ndarray:
    """Mask of the rows among the ``max_plans`` fastest (with every row tied with the slowest
    of them), on the throughput-vs-memory frontier (no row with less memory is as fast, none
    with as much is faster, and more than ``time_pruning.FRONTIER_MIN_SHARE`` of the best
    tokens/s) or on the GPU frontier (the fastest of their GPU count, faster than the fastest
    of every smaller count): every row a ranked table and its two frontiers
    (``PlanResult.pareto``) can show, ties included. All rows when there are at most
    ``max_plans`` (or None)."""
    if max_plans is None or len(tps) <= max_plans:
        return np.ones(len(tps), dtype=bool)
    keep = tps >= -np.partition(-tps, max_plans - 1)[max_plans - 1]
    # frontier: only a row faster than every row in a lower memory bin can be on it; sort those
    lo_mem, span = float(mem.min()), float(mem.max() - mem.min())
    bins = ((mem - lo_mem) * (4095 / span)).astype(np.int64) if span > 0 else np.zeros(len(mem), dtype=np.int64)
    bin_best = np.full(4097, -np.inf)
    np.maximum.at(bin_best, bins + 1, tps)
    candidates = np.flatnonzero((tps > np.maximum.accumulate(bin_best)[bins])
                                & (tps > FRONTIER_MIN_SHARE * tps.max()))
    by_memory = candidates[np.lexsort((-tps[candidates], mem[candidates]))]
    ranked, ranked_mem = tps[by_memory], mem[by_memory]
    # per memory value, its fastest rows (all of them when tied: which one a table shows is
    # the ranking's choice, so keeping every tied row keeps the result independent of order)
    first = np.concatenate([[True], ranked_mem[1:] != ranked_mem[:-1]])
    group = np.cumsum(first) - 1
    group_best = ranked[first]
    best_before = np.maximum.accumulate(np.concatenate([[-np.inf], group_best[:-1]]))
    keep[by_memory[(ranked == group_best[group]) & (group_best[group] > best_before[group])]] = True
    lo = int(n.min())
    fastest = np.full(int(n.max()) - lo + 1, -np.inf)
    np.maximum.at(fastest, n - lo, tps)
    # the GPU frontier: the fastest of a count that beats every smaller count's fastest
    beaten = np.maximum.accumulate(np.concatenate([[-np.inf], fastest[:-1]]))
    keep |= (tps == fastest[n - lo]) & (tps > beaten[n - lo])
    return keep


@dataclass(frozen=True)
class Scored:
    """What a whole space's scoring keeps: the candidate rows (``kept_rows`` of each chunk) as
    (base row, combination, dtype index, row number in the space), their tokens/s, memory and
    GPU count, plus the counts and the smallest footprint seen (as ``Evaluated``). With a
    ``refine``, also the candidates' outputs as timed (``timed``: ``Evaluated.unrefined``), which
    of them the refinement computed exactly (``exact``) and those rows' exact outputs
    (``exact_outputs``, ``KEPT_OUTPUTS``), so their table needs no step model again."""

    base_rows: np.ndarray
    combos: np.ndarray
    dtype_index: np.ndarray
    positions: np.ndarray
    tokens_per_s: np.ndarray
    memory_bytes: np.ndarray
    n_gpus: np.ndarray
    evaluated: int
    fitting: int
    min_memory_bytes: float
    min_memory_pick: tuple[int, int, int]       # (base row, combination, dtype index); -1s: none
    wall_s: float
    cpu_s: float
    bound_pruned: int = 0
    timed: Mapping[str, np.ndarray] | None = None
    exact: np.ndarray | None = None
    exact_outputs: Mapping[str, np.ndarray] | None = None
    #: rows never given the memory model (``memory_screen.Screen``: their step-time floor could not
    #: rank among the rows earlier chunks kept): ``fitting`` counts the rows shown to fit, a
    #: lower bound on the fitting rows when this is not 0
    unchecked: int = 0
    #: the offloaded layers per chunk of ``min_memory_pick``, and ``Evaluated.host_bound`` with
    #: its row as (host bytes per node, base row, combination, dtype index, offloaded layers)
    min_memory_offload: int = 0
    host_bound: tuple = ()


@dataclass(frozen=True)
class _ScoreJob:
    model: ModelSpec
    cluster: ClusterSpec
    eff: EfficiencyModel
    base: SpaceBase
    memory_limit_bytes: float
    max_plans: int | None
    chunk_rows: int
    defaults: tuple = ()
    refine: Callable | None = None
    memory_search: bool = True
    prune_by_bound: bool = True
    prune_by_time: bool = True
    count_fitting: bool = False


def _start_chunk(job: _ScoreJob, i: int, workers: int = 1, kept_before: tuple | None = None, built=None):
    """Chunk ``i`` built (or ``built``, ``job.base.chunk(i)``) and its evaluation begun
    (``vectorized.start_evaluation``: with workers, its memory phase runs in them from now on);
    ``kept_before``: (tokens/s, memory, GPU counts) of the rows earlier chunks keep, to screen
    this chunk's rows with before the memory model (unless ``count_fitting``)."""
    c0 = time.process_time()
    space, rows, combo = job.base.chunk(i) if built is None else built
    screening = not job.count_fitting and job.max_plans is not None and job.prune_by_time
    if i == 0 and screening and job.base.n_chunks > 1:
        # the first chunk screens itself: the lowest floors first (``memory_screen.seed_screen``)
        kept_before = seed_screen(job.model, job.cluster, job.eff, space, job.base.global_batch,
                                  job.memory_limit_bytes, job.max_plans, job.defaults)
    # refined: exact times for every row that can rank in this chunk, a superset of those it can
    # rank among in the whole space (the chunk's thresholds are looser), so the kept rows are
    # chosen by the times the whole search would give them; rows that cannot be kept are not timed,
    # by the chunk's own rows or by ``kept_elsewhere``, the rows earlier chunks keep
    ev = start_evaluation(job.model, job.cluster, job.eff, space, job.base.global_batch, job.memory_limit_bytes,
                          chunk_rows=job.chunk_rows, workers=workers, defaults=job.defaults,
                          memory_search=job.memory_search, prune_by_bound=job.prune_by_bound, refine=job.refine,
                          keep=job.max_plans if job.prune_by_time else None,
                          screen_by=kept_before if screening else None, screening=screening)
    return space, rows, combo, ev, time.process_time() - c0


def _score_chunk(job: _ScoreJob, i: int, kept_elsewhere: tuple | None = None, workers: int = 1,
                 started=None, timing_workers: int | None = None) -> dict:
    space, rows, combo, evaluation, cpu_s = started if started is not None else _start_chunk(job, i, workers)
    c0 = time.process_time() - cpu_s
    ev = evaluation.finish(kept_elsewhere if job.prune_by_time else None, timing_workers)
    cols = space.columns
    n = (cols["dp"] * cols["tp"] * cols["pp"] * cols["cp"])[ev.rows]
    tps, mem = ev.outputs["tokens_per_s"], ev.outputs["memory_bytes"]
    keep = kept_rows(tps, mem, n, job.max_plans) if len(ev.rows) else np.zeros(0, dtype=bool)
    r = ev.rows[keep]
    row = ev.min_memory_row
    part = {"base_rows": rows[r], "combos": combo[r], "dtype_index": ev.dtype_index[keep],
            "positions": job.base.rank(rows[r], combo[r]), "tokens_per_s": tps[keep], "memory_bytes": mem[keep],
            "n_gpus": n[keep], "evaluated": ev.evaluated, "fitting": ev.fitting, "unchecked": ev.unchecked,
            "rows": len(space),
            "min_memory_bytes": ev.min_memory_bytes,
            "min_memory_pick": (int(rows[row]), int(combo[row]), ev.min_memory_dtype) if row >= 0 else (-1, -1, -1),
            "min_memory_offload": ev.min_memory_offload,
            "host_bound": (ev.host_bound[0], int(rows[ev.host_bound[1]]), int(combo[ev.host_bound[1]]),
                           *ev.host_bound[2:]) if ev.host_bound else (),
            "bound_pruned": ev.bound_pruned, "cpu_s": time.process_time() - c0}
    if ev.unrefined is not None:
        # the kept rows' outputs as timed, and those the refinement computed exactly, for the
        # table of the whole search's kept rows (``Scored.timed``)
        part["timed"] = {k: np.asarray(v)[keep] for k, v in ev.unrefined.items()}
        exact = np.asarray(ev.outputs["pipeline_exact"])[keep].astype(bool)
        part["exact"] = exact
        part["exact_outputs"] = {k: np.asarray(ev.outputs[k])[keep][exact] for k in KEPT_OUTPUTS}
    return part


def score_space(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, base: SpaceBase,
                memory_limit_bytes: float, max_plans: int | None, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                workers: int | None = None, progress: Callable[[int, int], None] | None = None,
                defaults: tuple = (), refine: Callable | None = None, memory_search: bool = True,
                prune_by_bound: bool = True, prune_by_time: bool = True, count_fitting: bool = False) -> Scored:
    """Score every row of ``base`` (each chunk built, evaluated and reduced to ``kept_rows`` in
    one step, so memory is bounded by a chunk and the kept rows, not by the space), chunk after
    chunk, each chunk's memory phase and timing over ``workers`` processes (fork; None: every
    CPU when the space is large).

    ``progress(done_rows, total_rows)`` is called after each chunk (rows of every dtype);
    ``defaults``: per dtype, the fields the planner does not search (see ``evaluate_space``);
    ``refine(model, cluster, eff, space, global_batch, ev, defaults=)``: applied to each chunk's
    evaluation before its rows are chosen (``planners.refine.refine_exact``); ``prune_by_bound``:
    see ``evaluate_space``; ``prune_by_time``: time only the rows a chunk can keep
    (``evaluate_space(keep=max_plans)``), and give the memory model only to the rows of a chunk
    that the earlier chunks' kept rows do not rule out (``memory_screen.Screen``; ``Scored.unchecked``
    counts the others) unless ``count_fitting``, which models every row and so counts exactly
    the fitting ones (the kept rows and their numbers are the same either way).
    """
    t0, c0, kids0 = time.perf_counter(), time.process_time(), _children_cpu_s()
    job = _ScoreJob(model, cluster, eff, base, memory_limit_bytes, max_plans, chunk_rows, tuple(defaults), refine,
                    memory_search, prune_by_bound, prune_by_time, count_fitting)
    total = base.total * len(base.dtypes)
    if workers is None:
        workers = (os.cpu_count() or 1) if total >= PARALLEL_MIN_ROWS else 1
    parts, done = [], 0
    started = _start_chunk(job, 0, workers) if base.n_chunks else None
    try:
        for i in range(base.n_chunks):
            # one chunk after another: the rows earlier chunks keep spare timing rows of this one
            # that the whole search cannot keep (``time_pruning.excluded``); the chunk's own work
            # is split over the workers (whole chunks scored in parallel could not: each timed at
            # least its own ``max_plans`` fastest rows). The next chunk's memory phase, which needs
            # no other chunk, runs in its workers while this one is timed and refined here.
            kept = _kept_so_far(parts) if parts and max_plans is not None else None
            current = started
            # the next chunk's rows are built while this one's memory tasks still run in the
            # workers (which take more of them meanwhile), not after, when they would wait
            built = base.chunk(i + 1) if i + 1 < base.n_chunks and workers > 1 else None
            current[3].memory()
            # (the next chunk is screened by the rows the chunks before this one keep: this one's
            # are known only once it is timed)
            started = _start_chunk(job, i + 1, workers, kept, built) if built is not None else None
            # (while the next chunk's memory phase has the workers, this one is timed over half as
            # many: on 2 CPUs, here alone, beside the one worker; both numbers are the same either way)
            timing_workers = max(1, workers // 2) if started is not None else None
            parts.append(_score_chunk(job, i, kept, workers, current, timing_workers))
            if started is not None and max_plans is not None and not count_fitting:
                # the next chunk's memory tasks not begun yet are screened by this one's kept rows too
                started[3].screen_by(_kept_so_far(parts))
            if started is None and i + 1 < base.n_chunks:
                started = _start_chunk(job, i + 1, workers, _kept_so_far(parts) if max_plans is not None else None)
            done += parts[-1]["rows"] * len(base.dtypes)
            if progress is not None:
                progress(done, total)
    finally:
        if started is not None:
            started[3].close()
    cat = {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
           for k in ("base_rows", "combos", "dtype_index", "positions", "tokens_per_s", "memory_bytes", "n_gpus")}
    smallest = min(parts, key=lambda p: p["min_memory_bytes"]) if parts else None
    if parts and all("timed" in p for p in parts):
        cat["timed"] = {k: np.concatenate([p["timed"][k] for p in parts]) for k in parts[0]["timed"]}
        cat["exact"] = np.concatenate([p["exact"] for p in parts])
        cat["exact_outputs"] = {k: np.concatenate([p["exact_outputs"][k] for p in parts]) for k in KEPT_OUTPUTS}
    return Scored(**cat, evaluated=sum(p["evaluated"] for p in parts), fitting=sum(p["fitting"] for p in parts),
                  unchecked=sum(p["unchecked"] for p in parts),
                  min_memory_bytes=smallest["min_memory_bytes"] if smallest else float("inf"),
                  min_memory_pick=smallest["min_memory_pick"] if smallest else (-1, -1, -1),
                  min_memory_offload=smallest["min_memory_offload"] if smallest else 0,
                  host_bound=min((p["host_bound"] for p in parts if p["host_bound"]), default=()),
                  wall_s=time.perf_counter() - t0, bound_pruned=sum(p["bound_pruned"] for p in parts),
                  cpu_s=(time.process_time() - c0) + (_children_cpu_s() - kids0))


def _kept_so_far(parts: list) -> tuple:
    """(tokens/s, memory bytes, GPU counts) of the rows the scored chunks ``parts`` keep."""
    return tuple(np.concatenate([p[k] for p in parts]) for k in ("tokens_per_s", "memory_bytes", "n_gpus"))


def _children_cpu_s() -> float:
    """CPU seconds of this process's finished child processes (the scoring workers)."""
    t = os.times()
    return t.children_user + t.children_system
