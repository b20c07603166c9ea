"""Score a ``SearchSpace`` with the simulator's own step model, in bounded chunks.

Every row goes through ``simulator.step_model`` (the one cost formula the simulator uses too);
nothing is re-derived here. Rows are evaluated ``chunk_rows`` at a time, one ``ConfigBatch``
per dtype: first their memory (``memory_parts``), then the step time (``evaluate``) of the rows
that fit, which alone are kept, so memory stays bounded by the chunk size plus the fitting rows.
Large searches are split over processes (fork), each evaluating whole chunks.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass, fields, replace
from typing import Callable, Mapping

import numpy as np

from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from planners.search_space import SearchSpace, SpaceBase
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.report import TIME_PARTS
from simulator.memory_rows import static_lower_bound_bytes
from simulator.stage_static import static_peak_bytes
from simulator.step_model import LAYER_KEY_FIELDS, _once_per_run as once_per_run, evaluate, memory_parts

#: step-model outputs the planner keeps for every fitting row.
KEPT_OUTPUTS = ("step_time_s", "step_time_lower_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "memory_bytes",
                "pipeline_exact", "host_memory_bytes") + TIME_PARTS
#: per-row plan fields the memory search chooses (``step_model.memory_parts(fit_limit_bytes=...)``)
CHOSEN_FIELDS = ("recompute_num_layers", "recompute_layers_decrement", "offload_activation_layers")
#: rows per ``evaluate`` call. The step model makes a few hundred temporary arrays per call, and
#: its per-call work (a schedule group's layout, the distinct rows of the memory model) is
#: shared by more rows in a larger call: on DeepSeek-V3 over 1,024-1,536 GPUs (1.76M rows, one
#: process) 16k, 32k, 64k, 128k and 256k rows took 15.2, 13.4, 11.0, 12.2 and 16.0 CPU s
#: (peak RSS 0.8 GiB at 64k, 1.8 GiB at 256k).
DEFAULT_CHUNK_ROWS = 65_536
#: below this many rows forking a second process costs more than it saves (two default chunks:
#: a search's kept plans, about 200k rows, are scored again on every CPU).
PARALLEL_MIN_ROWS = 2 * DEFAULT_CHUNK_ROWS
#: columns the step model converts to float anyway; passing float64 saves the conversion.
_FLOAT_COLUMNS = ("dp", "tp", "pp", "cp", "vpp", "micro_batch", "global_batch")


@dataclass(frozen=True)
class Evaluated:
    """The fitting rows of a search: which rows, in which dtype, and their step-model outputs.

    Attributes:
        rows: index into the ``SearchSpace`` rows.
        dtype_index: index into ``SearchSpace.dtypes``.
        outputs: ``KEPT_OUTPUTS`` name -> array aligned with ``rows``.
        evaluated: rows scored (all dtypes): each gets its memory, and its step time if it fits
            (the rows in ``rows``).
        min_memory_bytes, min_memory_row, min_memory_dtype: the smallest footprint seen (to say
            how far an infeasible request is from fitting); row -1 when nothing was evaluated.
        wall_s: seconds spent scoring (batches, step model, fit filter, collection); cpu_s: CPU
            seconds of this process meanwhile (less contention-sensitive; excludes workers).
        bound_pruned: rows the memory lower bound dropped before the stage model (their
            memory is not seen: when nothing fits, ``min_memory_*`` is exact only if this is 0).
    """

    rows: np.ndarray
    dtype_index: np.ndarray
    outputs: Mapping[str, np.ndarray]
    evaluated: int
    min_memory_bytes: float
    min_memory_row: int
    min_memory_dtype: int
    wall_s: float = 0.0
    cpu_s: float = 0.0
    bound_pruned: int = 0


def _template() -> ConfigBatch:
    return ConfigBatch.from_configs([ParallelConfig()])


def config_batch(columns: Mapping[str, np.ndarray], dtype: str, global_batch: int,
                 start: int = 0, stop: int | None = None, defaults: Mapping | None = None) -> ConfigBatch:
    """Rows ``start:stop`` of ``columns`` as a ``ConfigBatch``; fields the planner does not search
    take ``defaults`` (a software stack's fields, ``simulator.stack_defaults``) or else
    ``ParallelConfig``'s defaults (so new ConfigBatch fields need no change here)."""
    stop = len(columns["dp"]) if stop is None else stop
    n = stop - start
    template = _template() if not defaults else ConfigBatch.from_configs([ParallelConfig(**dict(defaults))])
    kwargs = {}
    for f in fields(ConfigBatch):
        name = f.name
        if name == "dtype":
            continue
        if name == "global_batch":
            kwargs[name] = np.full(n, float(global_batch))
        elif name in columns:
            col = columns[name][start:stop]
            kwargs[name] = col.astype(float) if name in _FLOAT_COLUMNS else col
        elif name == "flash_attention":
            # one scalar for the whole batch (the planner does not search it; the step model
            # takes it as a scalar or a column alike)
            kwargs[name] = template.flash_attention[0]
        else:
            kwargs[name] = np.full(n, template.__dict__[name][0])
    kwargs["sequence_parallel"] = kwargs["sequence_parallel"].astype(bool)
    return ConfigBatch(dtype=dtype, **kwargs)


@dataclass(frozen=True)
class _Job:
    model: ModelSpec
    cluster: ClusterSpec
    eff: EfficiencyModel
    columns: Mapping[str, np.ndarray]
    dtypes: tuple[str, ...]
    global_batch: int
    memory_limit_bytes: float
    defaults: tuple = ()              # per dtype: the software stack's ParallelConfig fields
    memory_search: bool = True        # choose the fewest recomputed / offloaded layers that fit
    prune_by_bound: bool = True       # skip the stage model on rows over the limit by the lower bound


_JOB: _Job | None = None   # set before forking so workers inherit it without pickling


def _evaluate_chunk(job: _Job, dtype_index: int, start: int, stop: int):
    """Memory of every row of the chunk; step time only of the rows that fit (a row that does
    not fit is never ranked, and ``evaluate`` is row-wise, so timing the fitting subset gives
    the very numbers timing the whole chunk would)."""
    defaults = job.defaults[dtype_index] if job.defaults else None
    batch = config_batch(job.columns, job.dtypes[dtype_index], job.global_batch, start, stop, defaults)
    limit = job.memory_limit_bytes if job.memory_search else None
    # rows whose lower bound is over the limit cannot fit: the stage model runs on the others
    maybe = np.arange(len(batch))
    if job.prune_by_bound:
        maybe = np.flatnonzero(static_lower_bound_bytes(job.model, job.cluster, job.eff, batch)
                               <= job.memory_limit_bytes)
        if len(maybe) < len(batch):
            batch = batch.take(maybe)
        # then the largest stage's static parts (a few distinct stages per row, not pp)
        peak = static_peak_bytes(job.model, job.cluster, job.eff, batch, once_per_run, LAYER_KEY_FIELDS)
        within = np.flatnonzero(peak <= job.memory_limit_bytes)
        if len(within) < len(batch):
            maybe, batch = maybe[within], batch.take(within)
    pruned = stop - start - len(maybe)
    if not len(maybe):
        kept = {k: np.zeros(0) for k in KEPT_OUTPUTS + CHOSEN_FIELDS}
        return _ChunkResult(dtype_index, start, stop, np.zeros(0, dtype=np.int64), kept, np.inf, -1, pruned)
    parts = memory_parts(job.model, job.cluster, job.eff, batch, fit_limit_bytes=limit)
    mem = np.asarray(parts["memory_bytes"], dtype=float)
    fit = np.flatnonzero((mem <= job.memory_limit_bytes) & np.asarray(parts["host_fits"], dtype=bool))
    if len(fit):
        fitting_parts = {k: np.asarray(v)[fit] if np.ndim(v) else v for k, v in parts.items()}
        timed = batch.take(fit)
        if job.memory_search:
            timed = replace(timed, **{f: fitting_parts[f"_{f}"].astype(np.int64) for f in CHOSEN_FIELDS})
        # the pipeline makespan of every fitting row by its closed-form estimate and lower bound;
        # ``plan`` computes the exact DAG makespan of the rows that can matter
        out = evaluate(job.model, job.cluster, job.eff, timed, memory_by_part=fitting_parts,
                       exact_pipeline=np.zeros(len(fit), dtype=bool))
        kept = {k: np.asarray(out[k], dtype=float) for k in KEPT_OUTPUTS}
        for f in CHOSEN_FIELDS:
            kept[f] = np.asarray(getattr(timed, f), dtype=float)
    else:
        kept = {k: np.zeros(0) for k in KEPT_OUTPUTS + CHOSEN_FIELDS}
    i_min = int(np.argmin(mem))
    return _ChunkResult(dtype_index, start, stop, start + maybe[fit], kept, float(mem[i_min]), start + maybe[i_min],
                        pruned)


@dataclass(frozen=True)
class _ChunkResult:
    dtype_index: int
    start: int
    stop: int
    fit_rows: np.ndarray
    kept: Mapping[str, np.ndarray]
    min_memory_bytes: float
    min_memory_row: int
    bound_pruned: int = 0


def evaluate_rows_exact(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, space: SearchSpace,
                        global_batch: int, rows: np.ndarray, dtype_index: np.ndarray, defaults=(),
                        chosen: Mapping[str, np.ndarray] | None = None) -> dict:
    """``KEPT_OUTPUTS`` of the given (row, dtype) pairs with the exact pipeline makespan;
    ``chosen``: the rows' ``CHOSEN_FIELDS`` as the memory search set them."""
    out = {k: np.zeros(len(rows)) for k in KEPT_OUTPUTS}
    for d in np.unique(dtype_index):
        sel = np.flatnonzero(dtype_index == d)
        cols = {k: v[rows[sel]] for k, v in space.columns.items()}
        for f, values in (chosen or {}).items():
            cols[f] = np.asarray(values)[sel].astype(np.int64)
        batch = config_batch(cols, space.dtypes[int(d)], global_batch, defaults=defaults[int(d)] if defaults else None)
        res = evaluate(model, cluster, eff, batch)
        for k in KEPT_OUTPUTS:
            out[k][sel] = np.asarray(res[k], dtype=float)
    return out


def _worker(task):
    return _evaluate_chunk(_JOB, *task)


def _tasks(n_rows: int, n_dtypes: int, chunk_rows: int) -> list[tuple[int, int, int]]:
    return [(d, s, min(s + chunk_rows, n_rows)) for d in range(n_dtypes) for s in range(0, n_rows, chunk_rows)]


def evaluate_space(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, space: SearchSpace,
                   global_batch: int, memory_limit_bytes: float, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                   workers: int | None = None,
                   progress: Callable[[int, int], None] | None = None, defaults: tuple = (),
                   memory_search: bool = True, prune_by_bound: bool = True) -> Evaluated:
    """Evaluate every row of ``space`` in every dtype; keep those with memory <= the limit.

    ``workers``: processes (None: all CPUs when the search is large, else 1).
    ``defaults``: per dtype of ``space.dtypes``, the ParallelConfig fields the planner does not
    search (the software stack's, ``simulator.stack_defaults.stack_config_fields``).
    ``progress(done_rows, total_rows)`` is called after each chunk.
    ``memory_search``: rows that recompute in full and fit only with some recomputation get the
    fewest recomputed layers that fit,
    rows that do not fit the fewest offloaded layers that make them fit
    (``step_model.memory_parts(fit_limit_bytes=...)``); their counts are in ``CHOSEN_FIELDS``.
    ``prune_by_bound``: rows whose memory lower bound (``memory_rows.static_lower_bound_bytes``)
    is over the limit skip the stage model (they cannot fit; the fitting rows and their numbers
    are the same either way).
    """
    global _JOB
    t0, c0 = time.perf_counter(), time.process_time()
    n = len(space)
    total = n * len(space.dtypes)
    job = _Job(model, cluster, eff, space.columns, space.dtypes, global_batch, memory_limit_bytes, tuple(defaults),
               memory_search, prune_by_bound)
    if workers is None:
        workers = (os.cpu_count() or 1) if total >= PARALLEL_MIN_ROWS else 1
    if n == 0:
        empty = {k: np.zeros(0) for k in KEPT_OUTPUTS + CHOSEN_FIELDS}
        return Evaluated(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), empty, 0, np.inf, -1, -1)
    if workers > 1:
        # at least two chunks per worker so the work splits evenly
        chunk_rows = max(1, min(chunk_rows, -(-n // (2 * workers))))
    tasks = _tasks(n, len(space.dtypes), chunk_rows)
    results = []
    done = 0
    if workers > 1 and len(tasks) > 1 and "fork" in mp.get_all_start_methods():
        _JOB = job
        try:
            with mp.get_context("fork").Pool(min(workers, len(tasks))) as pool:
                for res in pool.imap_unordered(_worker, tasks):
                    results.append(res)
                    done += res.stop - res.start
                    if progress is not None:
                        progress(done, total)
        finally:
            _JOB = None
    else:
        for task in tasks:
            res = _evaluate_chunk(job, *task)
            results.append(res)
            done += res.stop - res.start
            if progress is not None:
                progress(done, total)
    results.sort(key=lambda r: (r.dtype_index, r.start))
    rows = np.concatenate([r.fit_rows for r in results])
    dtype_index = np.concatenate([np.full(len(r.fit_rows), r.dtype_index, dtype=np.int64) for r in results])
    outputs = {k: np.concatenate([r.kept[k] for r in results]) for k in KEPT_OUTPUTS + CHOSEN_FIELDS}
    best = min(results, key=lambda r: r.min_memory_bytes)
    return Evaluated(rows=rows, dtype_index=dtype_index, outputs=outputs, evaluated=total,
                     min_memory_bytes=best.min_memory_bytes, min_memory_row=best.min_memory_row,
                     min_memory_dtype=best.dtype_index, wall_s=time.perf_counter() - t0,
                     cpu_s=time.process_time() - c0, bound_pruned=sum(r.bound_pruned for r in results))


# --------------------------------------------------------------------------------------------
# A whole space, chunk by chunk, keeping only the rows a result can show
# --------------------------------------------------------------------------------------------

def kept_rows(tps: np.ndarray, mem: np.ndarray, n: np.ndarray, max_plans: int | None) -> np.ndarray:
    """Mask of the rows among the ``max_plans`` fastest (with every row tied with the slowest
    of them), on the throughput-vs-memory frontier (no row with less memory is as fast, none
    with as much is faster), or the fastest of their GPU count: every row a ranked table, its
    frontiers and its ranking of GPU counts can show, ties included. All rows when there are at
    most ``max_plans`` (or None)."""
    if max_plans is None or len(tps) <= max_plans:
        return np.ones(len(tps), dtype=bool)
    keep = tps >= -np.partition(-tps, max_plans - 1)[max_plans - 1]
    # frontier: only a row faster than every row in a lower memory bin can be on it; sort those
    lo_mem, span = float(mem.min()), float(mem.max() - mem.min())
    bins = ((mem - lo_mem) * (4095 / span)).astype(np.int64) if span > 0 else np.zeros(len(mem), dtype=np.int64)
    bin_best = np.full(4097, -np.inf)
    np.maximum.at(bin_best, bins + 1, tps)
    candidates = np.flatnonzero(tps > np.maximum.accumulate(bin_best)[bins])
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
    keep |= tps == fastest[n - lo]
    return keep


@dataclass(frozen=True)
class Scored:
    """What a whole space's scoring keeps: the candidate rows (``kept_rows`` of each chunk) as
    (base row, combination, dtype index, row number in the space), their tokens/s, memory and
    GPU count, plus the counts and the smallest footprint seen (as ``Evaluated``)."""

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


_SCORE_JOB: _ScoreJob | None = None


def _score_chunk(job: _ScoreJob, i: int) -> dict:
    c0 = time.process_time()
    space, rows, combo = job.base.chunk(i)
    ev = evaluate_space(job.model, job.cluster, job.eff, space, job.base.global_batch, job.memory_limit_bytes,
                        chunk_rows=job.chunk_rows, workers=1, defaults=job.defaults, memory_search=job.memory_search,
                        prune_by_bound=job.prune_by_bound)
    if job.refine is not None and len(ev.rows):
        # exact times for every row that can rank in this chunk: a superset of those it can
        # rank among in the whole space (the chunk's thresholds are looser), so the kept rows
        # are chosen by the times the whole search would give them
        ev = job.refine(job.model, job.cluster, job.eff, space, job.base.global_batch, ev, defaults=job.defaults)
    cols = space.columns
    n = (cols["dp"] * cols["tp"] * cols["pp"] * cols["cp"])[ev.rows]
    tps, mem = ev.outputs["tokens_per_s"], ev.outputs["memory_bytes"]
    keep = kept_rows(tps, mem, n, job.max_plans) if len(ev.rows) else np.zeros(0, dtype=bool)
    r = ev.rows[keep]
    row = ev.min_memory_row
    return {"base_rows": rows[r], "combos": combo[r], "dtype_index": ev.dtype_index[keep],
            "positions": job.base.rank(rows[r], combo[r]), "tokens_per_s": tps[keep], "memory_bytes": mem[keep],
            "n_gpus": n[keep], "evaluated": ev.evaluated, "fitting": len(ev.rows), "rows": len(space),
            "min_memory_bytes": ev.min_memory_bytes,
            "min_memory_pick": (int(rows[row]), int(combo[row]), ev.min_memory_dtype) if row >= 0 else (-1, -1, -1),
            "bound_pruned": ev.bound_pruned, "cpu_s": time.process_time() - c0}


def _score_worker(i: int) -> dict:
    return _score_chunk(_SCORE_JOB, i)


def score_space(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, base: SpaceBase,
                memory_limit_bytes: float, max_plans: int | None, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                workers: int | None = None, progress: Callable[[int, int], None] | None = None,
                defaults: tuple = (), refine: Callable | None = None, memory_search: bool = True,
                prune_by_bound: bool = True) -> Scored:
    """Score every row of ``base`` (each chunk built, evaluated and reduced to ``kept_rows`` in
    one step, so memory is bounded by a chunk and the kept rows, not by the space); chunks are
    split over processes (fork) when the space is large.

    ``progress(done_rows, total_rows)`` is called after each chunk (rows of every dtype);
    ``defaults``: per dtype, the fields the planner does not search (see ``evaluate_space``);
    ``refine(model, cluster, eff, space, global_batch, ev, defaults=)``: applied to each chunk's
    evaluation before its rows are chosen (``planners.plan.refine_exact``); ``prune_by_bound``:
    see ``evaluate_space``.
    """
    global _SCORE_JOB
    t0, c0 = time.perf_counter(), time.process_time()
    job = _ScoreJob(model, cluster, eff, base, memory_limit_bytes, max_plans, chunk_rows, tuple(defaults), refine,
                    memory_search, prune_by_bound)
    total = base.total * len(base.dtypes)
    if workers is None:
        workers = (os.cpu_count() or 1) if total >= PARALLEL_MIN_ROWS else 1
    parts, done = [], 0
    if workers > 1 and base.n_chunks > 1 and "fork" in mp.get_all_start_methods():
        _SCORE_JOB = job
        try:
            with mp.get_context("fork").Pool(min(workers, base.n_chunks)) as pool:
                for part in pool.imap_unordered(_score_worker, range(base.n_chunks)):
                    parts.append(part)
                    done += part["rows"] * len(base.dtypes)
                    if progress is not None:
                        progress(done, total)
        finally:
            _SCORE_JOB = None
    else:
        for i in range(base.n_chunks):
            parts.append(_score_chunk(job, i))
            done += parts[-1]["rows"] * len(base.dtypes)
            if progress is not None:
                progress(done, total)
    cat = {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
           for k in ("base_rows", "combos", "dtype_index", "positions", "tokens_per_s", "memory_bytes", "n_gpus")}
    smallest = min(parts, key=lambda p: p["min_memory_bytes"]) if parts else None
    return Scored(**cat, evaluated=sum(p["evaluated"] for p in parts), fitting=sum(p["fitting"] for p in parts),
                  min_memory_bytes=smallest["min_memory_bytes"] if smallest else float("inf"),
                  min_memory_pick=smallest["min_memory_pick"] if smallest else (-1, -1, -1),
                  wall_s=time.perf_counter() - t0, bound_pruned=sum(p["bound_pruned"] for p in parts),
                  cpu_s=(time.process_time() - c0) + (sum(p["cpu_s"] for p in parts) if workers > 1 else 0.0))
