"""Score a ``SearchSpace`` with the simulator's own step model, in bounded chunks.

Every row goes through ``simulator.step_model`` (the one cost formula the simulator uses too);
nothing is re-derived here. Rows are evaluated ``chunk_rows`` at a time, one ``ConfigBatch``
per dtype: first their memory (``memory_parts``, after a lower bound and the end stages drop
rows that cannot fit), then the step time (``evaluate``) of the rows that fit, which alone are kept, so memory
stays bounded by the chunk size plus the fitting rows. When the caller keeps only the fastest
rows (``keep``), the fitting rows are timed lowest step-time floor first
(``simulator.step_bounds``) until the rest provably cannot be kept (``time_pruning``); and a
chunk of a larger search may skip the memory model on the rows that the rows other chunks
keep rule out by a floor needing no memory model (``memory_screen``: ``Evaluated.fitting`` then
counts the rows shown to fit, ``unchecked`` the others). Large searches are split over
processes (fork), each evaluating whole chunks.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Callable, Mapping

import numpy as np

from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from planners.memory_screen import Screen, _floor_any_memory_s, _no_screened, _rescreened, _screened_out, screen_for
from planners.refine import TOP_EXACT
from planners.search_space import SearchSpace
from planners.time_pruning import excluded, held_by_row, kept_summary, next_to_time, order_of_subset, skippable
from simulator.config_batch import ConfigBatch
from simulator.ep_overlap_rules import batch_runnable
from simulator.parallel_config import ParallelConfig
from simulator.report import TIME_PARTS
from simulator.memory_rows import static_lower_bound_bytes
from simulator.step_bounds import step_time_floor_s
from simulator.step_model import evaluate, memory_parts

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
        min_memory_bytes, min_memory_row, min_memory_dtype: the smallest footprint seen among
            the rows over the memory limit (to say how far an infeasible request is from
            fitting); row -1 when no row was seen over it. min_memory_offload: the activation
            layers per chunk the memory search offloads in that row.
        host_bound: (host memory per node in bytes, row, dtype index, offloaded layers per
            chunk) of the row needing the least host memory among those that fit the limit only
            by offloading more activations than the host holds; () when there is none.
        wall_s: seconds spent scoring (batches, step model, fit filter, collection); cpu_s: CPU
            seconds of this process meanwhile (less contention-sensitive; excludes workers).
        bound_pruned: rows the memory lower bound or the end stages dropped before the whole
            stage model (their memory is not seen: when nothing fits, ``min_memory_*`` is exact
            only if this is 0).
        fitting: rows shown to fit (all dtypes); ``rows`` are all of them unless the search was
            told which it keeps (``evaluate_space(keep=...)``), then those it had to time.
        unchecked: rows whose memory was never evaluated (``Screen``: their step-time floor
            could not rank among what other chunks keep): each may fit or not, so ``fitting``
            is then a lower bound (0 unless screened).
        unrefined: with a ``refine``, the rows' ``KEPT_OUTPUTS`` and ``CHOSEN_FIELDS`` as timed,
            before it (what ``evaluate_space`` of any set of these rows gives them before its
            own refinement: ``planners.plan`` rebuilds its table from them); None without.
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
    fitting: int = 0
    unrefined: Mapping[str, np.ndarray] | None = None
    unchecked: int = 0
    min_memory_offload: int = 0
    host_bound: tuple = ()


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
    floors: bool = False              # give every fitting row its step-time floor (``step_bounds``)
    screening: bool = False           # the rows may be screened (``Screen``): keep their stand-ins


#: ``memory_parts`` outputs the step model reads (``evaluate(memory_by_part=...)``), kept for
#: every fitting row between its memory and its step time
_MEMORY_KEYS = ("memory_bytes", "host_memory_bytes", "host_fits", "params_local", "expert_params_local",
                "_p_dense_layer", "_p_moe_layer", "_p_expert_layer", "_edp", "_p_first", "_p_first_layers",
                "_p_first_expert",
                "_act_kept_dense", "_act_kept_moe", "_count_first_layers", "_count_last_layers")

_JOB: _Job | None = None   # set before forking so workers inherit it without pickling
_FITTING: "_Fitting | None" = None


def _memory_chunk(job: _Job, dtype_index: int, start: int, stop: int, screen: Screen | None = None) -> "_ChunkResult":
    """Memory of every row of the chunk (a row whose lower bound, or whose first or last stage,
    is over the limit cannot fit: the whole stage model runs on the others); of the rows that
    fit, what their step time needs (the memory search's counts, ``_MEMORY_KEYS``) and, with
    ``job.floors``, their step-time floor. With a ``screen``, the rows it rules out are not
    modelled (``_ChunkResult.screened``)."""
    defaults = job.defaults[dtype_index] if job.defaults else None
    batch = config_batch(job.columns, job.dtypes[dtype_index], job.global_batch, start, stop, defaults)
    return _memory_of(job, dtype_index, batch, np.arange(start, stop), start, stop, screen)


def _memory_of(job: _Job, dtype_index: int, batch: ConfigBatch, ids: np.ndarray, start: int, stop: int,
               screen: Screen | None) -> "_ChunkResult":
    """``_memory_chunk`` of the rows ``ids`` of the space (``batch``: those rows, one dtype);
    ``start``, ``stop``: the task's row range, for progress."""
    limit = job.memory_limit_bytes if job.memory_search else None
    # a row this dtype's stack runs with ep_comm_overlap in a combination Megatron-Core refuses
    # (the search's own rule drops only rows every dtype breaks) does not fit, as ``simulate``
    # refuses it; counted with the rows the memory drops
    runnable = batch_runnable(batch, job.dtypes[dtype_index], job.model.mtp_layers)
    maybe = np.flatnonzero(runnable)
    lower = None
    if job.prune_by_bound:
        lower = np.asarray(static_lower_bound_bytes(job.model, job.cluster, job.eff, batch))
        maybe = np.flatnonzero(runnable & (lower <= job.memory_limit_bytes))
    screening = (screen is not None or job.screening) and lower is not None and len(maybe)
    if len(maybe) < len(batch) and not screening:
        batch = batch.take(maybe)
    screened = candidates = _no_screened()
    if screening:
        # rows that cannot be among the rows other chunks keep, by a floor good for any memory
        # search outcome and the memory lower bound: no per-stage model (checked again, and
        # modelled if need be, once the chunk's own rows are timed: ``_time_and_refine``). The
        # others keep their stand-ins too, for the chunk's final screen (``Evaluation.memory``).
        # (The batch is cut once, to the rows modelled, not first to the rows the bound passes.)
        floor_any = _floor_any_memory_s(job, batch, ids[maybe], at_rows=maybe)
        lb = lower[maybe]
        out = np.zeros(len(maybe), dtype=bool)
        if screen is not None:
            out = _screened_out(job, screen, ids[maybe], floor_any, lb)
        both = {"rows": ids[maybe], "dtype_index": np.full(len(maybe), dtype_index), "floor_s": floor_any,
                "memory_lower_bytes": lb}
        screened = {k: v[out] for k, v in both.items()}
        if job.screening:
            candidates = {k: v[~out] for k, v in both.items()}
        if out.any():
            maybe = maybe[~out]
        if len(maybe) < len(batch):
            batch = batch.take(maybe)
    n_screened = len(screened["rows"])
    if not len(maybe):
        return _ChunkResult(dtype_index, start, stop, np.zeros(0, dtype=np.int64), _no_memory(), None, np.inf, -1,
                            len(ids) - n_screened, screened, candidates)
    # then the rows over the limit at an end stage (after the search) skip the rest of the stage
    # model: memory inf, pruned like the bound's rows
    parts = memory_parts(job.model, job.cluster, job.eff, batch, fit_limit_bytes=limit,
                         drop_over_bytes=job.memory_limit_bytes if job.prune_by_bound else None, by_part=False)
    mem = np.asarray(parts["memory_bytes"], dtype=float)
    host_fits = np.asarray(parts["host_fits"], dtype=bool)
    host_node = np.asarray(parts["host_memory_node_bytes"], dtype=float)
    pruned = len(ids) - n_screened - int(np.count_nonzero(np.isfinite(mem)))
    fit = np.flatnonzero((mem <= job.memory_limit_bytes) & host_fits)
    kept = {k: np.array(np.broadcast_to(parts[k], (len(batch),))[fit]) for k in _MEMORY_KEYS}
    # the plan fields per row: the memory search's choice, or the batch's own
    chosen = {f: np.asarray(np.broadcast_to(parts[f"_{f}"] if job.memory_search else getattr(batch, f), (len(batch),)))
              for f in CHOSEN_FIELDS}
    for f in CHOSEN_FIELDS:
        kept[f] = chosen[f][fit].astype(np.int64)
    floor = None
    if job.floors and len(fit):
        timed = replace(batch.take(fit), **{f: kept[f] for f in CHOSEN_FIELDS})
        floor = np.array(step_time_floor_s(job.model, job.cluster, job.eff, timed, kept), dtype=float)
    offload = chosen["offload_activation_layers"]
    gpu, host = _nearest_of_chunk(mem, host_node, host_fits, job.memory_limit_bytes)
    return _ChunkResult(dtype_index, start, stop, ids[maybe[fit]], kept, floor,
                        float(mem[gpu]) if gpu >= 0 else np.inf, int(ids[maybe[gpu]]) if gpu >= 0 else -1, pruned,
                        screened, candidates, int(offload[gpu]) if gpu >= 0 else 0,
                        (float(host_node[host]), int(ids[maybe[host]]), dtype_index,
                         int(offload[host])) if host >= 0 else ())


def _nearest_of_chunk(mem: np.ndarray, host_node: np.ndarray, host_fits: np.ndarray, limit: float) -> tuple[int, int]:
    """(the row of least GPU memory among those over ``limit``, the row of least host memory
    among those under it whose offloaded activations overflow the host), -1 for none. The
    smallest footprint over every row was a row the search had offloaded to fit, failing on
    the host: 'nothing fits in 76 GiB ... needs 55.8 GiB'."""
    over = np.isfinite(mem) & (mem > limit)
    gpu = int(np.flatnonzero(over)[np.argmin(mem[over])]) if over.any() else -1
    on_host = (mem <= limit) & ~host_fits
    host = int(np.flatnonzero(on_host)[np.argmin(host_node[on_host])]) if on_host.any() else -1
    return gpu, host


def nearest_kw(results, kw: dict | None = None) -> dict:
    """``Evaluated``'s ``min_memory_*`` and ``host_bound`` over chunk results (and ``kw``, those
    already found)."""
    out = {} if kw is None else {k: kw[k] for k in _NEAREST_KEYS}
    for r in results:
        if r.min_memory_bytes < out.get("min_memory_bytes", np.inf) or "min_memory_bytes" not in out:
            out.update(min_memory_bytes=r.min_memory_bytes, min_memory_row=r.min_memory_row,
                       min_memory_dtype=r.dtype_index, min_memory_offload=r.min_memory_offload)
        if r.host_bound and (not out.get("host_bound") or r.host_bound < out["host_bound"]):
            out["host_bound"] = r.host_bound
    out.setdefault("host_bound", ())
    return out


_NEAREST_KEYS = ("min_memory_bytes", "min_memory_row", "min_memory_dtype", "min_memory_offload", "host_bound")


def _no_memory() -> dict:
    kinds = {**dict.fromkeys(CHOSEN_FIELDS, np.int64), "host_fits": bool}
    return {k: np.zeros(0, dtype=kinds.get(k, float)) for k in _MEMORY_KEYS + CHOSEN_FIELDS}


@dataclass(frozen=True)
class _ChunkResult:
    dtype_index: int
    start: int
    stop: int
    fit_rows: np.ndarray
    memory: Mapping[str, np.ndarray]      # _MEMORY_KEYS and CHOSEN_FIELDS of the fitting rows
    floor_s: np.ndarray | None
    min_memory_bytes: float
    min_memory_row: int
    bound_pruned: int = 0
    #: rows ``Screen`` kept from the memory model: row, dtype index, floor for any memory search
    #: outcome, memory lower bound
    screened: Mapping[str, np.ndarray] = field(default_factory=_no_screened)
    #: with ``_Job.screening``, the same of the rows it modelled, for a later screen
    candidates: Mapping[str, np.ndarray] = field(default_factory=_no_screened)
    min_memory_offload: int = 0           # as ``Evaluated``'s
    host_bound: tuple = ()                # as ``Evaluated``'s


@dataclass(frozen=True)
class _Fitting:
    """Every fitting row of a search (row, dtype index) with its memory-phase outputs, and the
    rows screened from the memory model (``_ChunkResult.screened``, concatenated)."""

    rows: np.ndarray
    dtype_index: np.ndarray
    memory: Mapping[str, np.ndarray]
    floor_s: np.ndarray | None
    screened: Mapping[str, np.ndarray] = field(default_factory=_no_screened)


def _time_rows(job: _Job, fitting: _Fitting, at: np.ndarray) -> dict:
    """``KEPT_OUTPUTS`` and ``CHOSEN_FIELDS`` of the fitting rows ``at`` (one dtype, rows in
    order): the step time by the closed-form pipeline estimate and its lower bound; ``plan``
    computes the exact DAG makespan of the rows that can matter (``refine.refine_exact``).
    ``evaluate`` is row-wise, so any subset gives each row the numbers the whole space would."""
    d = int(fitting.dtype_index[at[0]])
    cols = {k: v[fitting.rows[at]] for k, v in job.columns.items()}
    for f in CHOSEN_FIELDS:
        cols[f] = fitting.memory[f][at]
    batch = config_batch(cols, job.dtypes[d], job.global_batch, defaults=job.defaults[d] if job.defaults else None)
    memory = {k: fitting.memory[k][at] for k in _MEMORY_KEYS}
    out = evaluate(job.model, job.cluster, job.eff, batch, memory_by_part=memory,
                   exact_pipeline=np.zeros(len(at), dtype=bool))
    kept = {k: np.asarray(out[k], dtype=float) for k in KEPT_OUTPUTS}
    for f in CHOSEN_FIELDS:
        kept[f] = fitting.memory[f][at].astype(float)
    return kept


def _time_worker(at):
    return _time_rows(_JOB, _FITTING, at)


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
    return _memory_chunk(_JOB, *task)


def _run_memory_task(job: _Job, task):
    return _memory_chunk(job, *task)


def _tasks(n_rows: int, n_dtypes: int, chunk_rows: int) -> list[tuple[int, int, int]]:
    return [(d, s, min(s + chunk_rows, n_rows)) for d in range(n_dtypes) for s in range(0, n_rows, chunk_rows)]


def _run(fn, tasks: list, workers: int, on_result=None) -> list:
    """``fn(task)`` of every task, over ``workers`` forked processes when more than one (``_JOB``
    and ``_FITTING`` are inherited); ``on_result(result)`` as each comes in."""
    results = []
    if workers > 1 and len(tasks) > 1 and "fork" in mp.get_all_start_methods():
        with mp.get_context("fork").Pool(min(workers, len(tasks))) as pool:
            for res in pool.imap(fn, tasks):
                results.append(res)
                if on_result is not None:
                    on_result(res)
    else:
        for task in tasks:
            results.append(fn(task))
            if on_result is not None:
                on_result(results[-1])
    return results


class _Shared:
    """Tasks handed out one at a time, to the workers of a pool (each gets its next task when
    it returns one) and to this process (``run_rest``), so a process that comes free takes
    the next task whoever it is: the caller can keep one CPU for other work meanwhile and join
    the pool's workers when done."""

    def __init__(self, pool, fn, local_fn, tasks: list, n_workers: int):
        self.pool, self.fn, self.local_fn = pool, fn, local_fn
        self.todo = deque(enumerate(tasks))
        self.results: list = [None] * len(tasks)
        self.lock, self.idle = threading.Lock(), threading.Condition()
        self.running, self.error = 0, None
        self.extra: tuple = ()              # arguments every task handed out from now on gets
        for _ in range(n_workers):
            self._hand_out()

    def _with_extra(self, task):
        """``task`` with the arguments set by ``extra`` (a tuple task then), as handed out now."""
        return task + self.extra if self.extra else task

    def _next(self):
        with self.lock:
            return self.todo.popleft() if self.todo else None

    def _hand_out(self) -> None:
        with self.lock:                     # (not after ``close``: it empties ``todo`` under the lock)
            if not self.todo:
                return
            i, task = self.todo.popleft()
            with self.idle:
                self.running += 1
            self.pool.apply_async(self.fn, (self._with_extra(task),), callback=partial(self._returned, i),
                                  error_callback=self._failed)

    def _returned(self, i: int, res) -> None:          # the pool's result thread
        self.results[i] = res
        self._hand_out()
        with self.idle:
            self.running -= 1
            self.idle.notify_all()

    def _failed(self, exc) -> None:
        with self.idle:
            self.error = exc
            self.running -= 1
            self.idle.notify_all()

    def run_rest(self, on_result=None) -> list:
        """Every task's result, in order: the tasks not handed out yet run here, one at a time
        (the workers keep taking theirs), then this waits for the workers'. ``on_result(result)``
        is called here once for each, after each task this process runs (for the results in by
        then) and at the end."""
        told = np.zeros(len(self.results), dtype=bool)

        def tell():
            for i in np.flatnonzero(~told):
                if self.results[i] is not None:
                    told[i] = True
                    if on_result is not None:
                        on_result(self.results[i])

        try:
            while (nxt := self._next()) is not None:
                self.results[nxt[0]] = self.local_fn(self._with_extra(nxt[1]))
                tell()
            with self.idle:
                while self.running and self.error is None:
                    self.idle.wait()
        finally:
            self.close()
        if self.error is not None:
            raise self.error
        tell()
        return self.results

    def close(self) -> None:
        """Hand out nothing more and end the workers."""
        with self.lock:
            self.todo.clear()
        self.pool.terminate()


def evaluate_space(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, space: SearchSpace,
                   global_batch: int, memory_limit_bytes: float, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                   workers: int | None = None,
                   progress: Callable[[int, int], None] | None = None, defaults: tuple = (),
                   memory_search: bool = True, prune_by_bound: bool = True, refine: Callable | None = None,
                   keep: int | None = None, kept_elsewhere: tuple | None = None) -> Evaluated:
    """Evaluate every row of ``space`` in every dtype; keep those with memory <= the limit.

    ``workers``: processes (None: all CPUs when the search is large, else 1).
    ``defaults``: per dtype of ``space.dtypes``, the ParallelConfig fields the planner does not
    search (the software stack's, ``simulator.stack_defaults.stack_config_fields``).
    ``progress(done_rows, total_rows)`` is called after each chunk's memory.
    ``memory_search``: rows that recompute in full and fit only with some recomputation get the
    fewest recomputed layers that fit,
    rows that do not fit the fewest offloaded layers that make them fit
    (``step_model.memory_parts(fit_limit_bytes=...)``); their counts are in ``CHOSEN_FIELDS``.
    ``prune_by_bound``: rows whose memory lower bound (``memory_rows.static_lower_bound_bytes``)
    is over the limit skip the stage model, and those whose first or last stage is (after the
    memory search: ``stage_memory.memory_parts(drop_over_bytes=...)``) the rest of it (they
    cannot fit; the fitting rows and their numbers are the same either way).
    ``refine(model, cluster, eff, space, global_batch, ev, defaults=, cache=, trace=)``: applied
    to the timed rows (``refine.refine_exact``).
    ``keep``: the caller keeps only ``space_scoring.kept_rows(..., keep)`` of the refined rows;
    the fitting rows that provably cannot be among them nor change the refinement are not timed
    (``time_pruning``, lowest step-time floor first): ``rows`` are the timed rows, ``fitting``
    counts them all. The kept rows and their numbers are those of timing every row.
    ``kept_elsewhere``: (tokens/s, memory bytes, GPU counts) of the rows other parts of the same
    search keep (``space_scoring.score_space``'s earlier chunks), with ``keep``: rows that
    cannot be among the whole search's kept rows are not timed either
    (``time_pruning.excluded``); the rows this returns may then differ, but
    ``kept_rows`` of them together with the other parts' is the same set with the same numbers.
    """
    return start_evaluation(model, cluster, eff, space, global_batch, memory_limit_bytes, chunk_rows, workers,
                            progress, defaults, memory_search, prune_by_bound, refine, keep).finish(kept_elsewhere)


class Evaluation:
    """An ``evaluate_space`` under way (``start_evaluation``): its memory phase runs in worker
    processes from the start (when it has workers), so the caller can do other work meanwhile
    (``space_scoring.score_space`` times the previous chunk); ``finish`` waits for it, then
    times and refines the fitting rows."""

    def __init__(self, model, cluster, eff, space, global_batch, job: "_Job", refine, keep, workers: int,
                 chunk_rows: int, progress, pool, results):
        self.model, self.cluster, self.eff, self.space, self.global_batch = model, cluster, eff, space, global_batch
        self.job, self.refine, self.keep, self.workers, self.chunk_rows = job, refine, keep, workers, chunk_rows
        self.progress, self._pool, self._results = progress, pool, results
        self._fitting = self._ev_kw = self._screen = None
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def screen_by(self, kept) -> None:
        """Screen the memory tasks not begun yet by ``kept`` (tokens/s, memory bytes, GPU counts
        of rows other chunks of the same search keep: ``Screen``), when the rows are timed by
        branch and bound (``keep``) and at least ``keep`` rows are held; or by ``kept`` itself
        when it is a ``Screen`` (``seed_screen``)."""
        if not self.job.screening or self._fitting is not None or self._results is None:
            return
        screen = kept if isinstance(kept, Screen) else \
            screen_for(kept, self.keep, float(self.global_batch) * float(self.model.seq_len))
        if screen is None:
            return
        self._screen = screen
        if self._pool is not None:
            self._results.extra = (screen,)
        else:
            self._results = [task[:3] + (screen,) for task in self._results]

    def close(self) -> None:
        """End the memory phase's workers, if it is still under way (an evaluation given up)."""
        if self._pool is not None:
            self._results.close()
            self._pool = self._results = None

    def memory(self) -> None:
        """Wait for the memory phase (the fitting rows and their memory), if not done yet."""
        global _JOB
        if self._fitting is not None or not len(self.space):
            return
        space, job = self.space, self.job
        total = len(space) * len(space.dtypes)
        done = [0]

        def tick(res):
            done[0] += res.stop - res.start
            if self.progress is not None:
                self.progress(done[0], total)

        if self._pool is None:
            before, _JOB = _JOB, job
            try:
                results = _run(_worker, self._results, self.workers, tick)
            finally:
                _JOB = before
        else:
            results = self._results.run_rest(tick)
        self._pool = self._results = None
        if self._screen is not None:
            # every row of the chunk by the last screen, whichever its task had: the same rows
            # are screened (and counted) whatever the workers and their timing
            results = [_rescreened(job, self._screen, r) for r in results]
        floors = [r.floor_s for r in results if r.floor_s is not None]
        self._fitting = _Fitting(np.concatenate([r.fit_rows for r in results]),
                                 np.concatenate([np.full(len(r.fit_rows), r.dtype_index, dtype=np.int64)
                                                 for r in results]),
                                 {k: np.concatenate([r.memory[k] for r in results])
                                  for k in _MEMORY_KEYS + CHOSEN_FIELDS},
                                 np.concatenate(floors + [np.zeros(0)]) if job.floors else None,
                                 {k: np.concatenate([r.screened[k] for r in results]) for k in _no_screened()})
        self._ev_kw = dict(evaluated=total, **nearest_kw(results),
                           bound_pruned=sum(r.bound_pruned for r in results), fitting=len(self._fitting.rows),
                           unchecked=len(self._fitting.screened["rows"]))

    def fitting_count(self) -> int:
        """How many rows fit (the memory phase alone, no row timed): without ``keep`` and
        screening, the number of rows ``finish`` would time and return."""
        self.memory()
        return 0 if self._fitting is None else len(self._fitting.rows)

    def finish(self, kept_elsewhere: tuple | None = None, timing_workers: int | None = None) -> Evaluated:
        """The evaluation (``evaluate_space``'s result; ``kept_elsewhere`` as there);
        ``timing_workers``: processes that time the rows (default: the memory phase's)."""
        global _JOB, _FITTING
        if not len(self.space):
            empty = {k: np.zeros(0) for k in KEPT_OUTPUTS + CHOSEN_FIELDS}
            return Evaluated(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), empty, 0, np.inf, -1, -1)
        self.memory()
        _JOB, _FITTING = self.job, self._fitting
        try:
            ev = _time_and_refine(self.model, self.cluster, self.eff, self.space, self.global_batch, self.job,
                                  self._fitting, self.refine, self.keep,
                                  self.workers if timing_workers is None else timing_workers, self.chunk_rows,
                                  self._ev_kw,
                                  kept_elsewhere)
        finally:
            _JOB = _FITTING = None
        return replace(ev, wall_s=time.perf_counter() - self.t0, cpu_s=time.process_time() - self.c0)


def start_evaluation(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, space: SearchSpace,
                     global_batch: int, memory_limit_bytes: float, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                     workers: int | None = None, progress: Callable[[int, int], None] | None = None,
                     defaults: tuple = (), memory_search: bool = True, prune_by_bound: bool = True,
                     refine: Callable | None = None, keep: int | None = None,
                     screen_by: tuple | None = None, screening: bool = False) -> Evaluation:
    """``evaluate_space`` begun (arguments as there): with more than one worker its memory phase
    is handed to forked workers at once and runs while the caller goes on; ``finish`` ends it.
    ``screening``: the rows may be screened from the memory model (``Screen``), by ``screen_by``
    or by ``Evaluation.screen_by`` later: (tokens/s, memory bytes, GPU counts) of rows other
    chunks of the same search keep, at least ``keep`` of them; the rows they show cannot be
    kept skip it (``Evaluated.unchecked`` counts those never modelled). The kept rows and their
    numbers are the same; ``fitting`` then counts the rows shown to fit. Which rows are
    screened depends on the last screen given before ``memory`` alone, not on the workers."""
    global _JOB
    n = len(space)
    total = n * len(space.dtypes)
    prune_time = keep is not None and refine is not None
    job = _Job(model, cluster, eff, space.columns, space.dtypes, global_batch, memory_limit_bytes, tuple(defaults),
               memory_search, prune_by_bound, prune_time, screening and prune_time and prune_by_bound)
    if workers is None:
        workers = (os.cpu_count() or 1) if total >= PARALLEL_MIN_ROWS else 1
    if mp.current_process().daemon:
        # a daemonic process (a sweep's Dask worker, a multiprocessing pool's) may not have
        # children: it searches alone, as the one core its parent gave it
        workers = 1
    if workers > 1 and n:
        # at least two chunks per worker so the work splits evenly
        chunk_rows = max(1, min(chunk_rows, -(-n // (2 * workers))))
    tasks = _tasks(n, len(space.dtypes), chunk_rows) if n else []
    pool, results = None, tasks
    if workers > 1 and len(tasks) > 1 and "fork" in mp.get_all_start_methods():
        # workers - 1 processes forked now, with this job (the caller's later work does not
        # reach them), start on the tasks; this process takes the rest with them once the
        # caller asks for the memory (``Evaluation.memory``)
        before, _JOB = _JOB, job
        try:
            pool = mp.get_context("fork").Pool(min(workers, len(tasks)) - 1)
        finally:
            _JOB = before
        results = _Shared(pool, _worker, partial(_run_memory_task, job), tasks, min(workers, len(tasks)) - 1)
    evaluation = Evaluation(model, cluster, eff, space, global_batch, job, refine, keep, workers, chunk_rows, progress,
                            pool, results)
    evaluation.screen_by(screen_by)
    return evaluation


def _time_and_refine(model, cluster, eff, space, global_batch: int, job: _Job, fitting: _Fitting, refine, keep,
                     workers: int, chunk_rows: int, ev_kw: dict, kept_elsewhere: tuple | None = None) -> Evaluated:
    """The fitting rows timed (all, or by branch and bound when ``keep`` is given: see
    ``evaluate_space``) and refined, as ``Evaluated``. Rows the memory phase screened
    (``Screen``) are open rows of the branch and bound too, by their floor for any memory
    search outcome and their memory lower bound (each at most the row's own, so a row shown
    skippable by them is skippable); one that is not shown so when no modelled row is left to
    time gets the memory model then (``_with_late``), and joins the fitting rows if it fits."""
    global _FITTING
    n_fit = len(fitting.rows)
    ev_kw = dict(ev_kw)

    def timed(at):
        """Outputs of the fitting rows ``at`` (sorted), in chunks of one dtype."""
        cuts = np.flatnonzero(np.diff(fitting.dtype_index[at])) + 1
        tasks = [part[s:s + chunk_rows] for part in np.split(at, cuts) for s in range(0, len(part), chunk_rows)]
        parts = _run(_time_worker, tasks, workers) if len(at) else []
        return {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0) for k in KEPT_OUTPUTS + CHOSEN_FIELDS}

    def evaluated(at, outputs) -> Evaluated:
        return Evaluated(rows=fitting.rows[at], dtype_index=fitting.dtype_index[at], outputs=outputs, **ev_kw)

    screened = fitting.screened
    if not len(screened["rows"]) and (refine is None or keep is None or n_fit <= max(keep, TOP_EXACT)):
        at = np.arange(n_fit)
        ev = evaluated(at, timed(at))
        if not (refine and n_fit):
            return replace(ev, unrefined=ev.outputs) if refine else ev
        return replace(refine(model, cluster, eff, space, global_batch, ev, defaults=job.defaults),
                       unrefined=ev.outputs)
    cols = space.columns
    all_gpus = cols["dp"] * cols["tp"] * cols["pp"] * cols["cp"]
    tokens = float(global_batch) * float(model.seq_len)
    summary = kept_summary(*kept_elsewhere, keep) if kept_elsewhere is not None and len(kept_elsewhere[0]) >= keep \
        else None
    outputs = {k: np.zeros(n_fit) for k in KEPT_OUTPUTS + CHOSEN_FIELDS}
    cache = (None, np.zeros(n_fit, dtype=bool), {k: np.zeros(n_fit) for k in KEPT_OUTPUTS})
    is_timed = np.zeros(n_fit, dtype=bool)

    def derived():
        """What the rounds read of the fitting rows (recomputed when screened rows join them)."""
        n_gpus = all_gpus[fitting.rows]
        fit_memory = fitting.memory["memory_bytes"]
        # the fitting rows by memory, once: each round's untimed rows are looked up in that order
        # (``time_pruning.rank_among``)
        by_memory = np.argsort(fit_memory, kind="stable")
        held = elsewhere = None
        if summary is not None:
            held = held_by_row(fit_memory, n_gpus, summary, by_memory)
            elsewhere = excluded(fitting.floor_s, tokens, keep, *held)
        s_gpus = all_gpus[screened["rows"]]
        s_held = held_by_row(screened["memory_lower_bytes"], s_gpus, summary, s_by_memory) \
            if summary is not None else None
        return fitting.floor_s, n_gpus, fit_memory, by_memory, held, elsewhere, s_gpus, s_held

    # the screened rows by their memory lower bound, likewise (~1 M rows looked up a round)
    s_by_memory = np.argsort(screened["memory_lower_bytes"])
    floor, n_gpus, fit_memory, by_memory, held, elsewhere, s_gpus, s_held = derived()
    # the first round: the lowest floors; with other chunks' kept rows, those of the rows they
    # do not rule out, fewer (the kept rows of the timed and the other chunks' rows together
    # rule out more rows each round), and at least TOP_EXACT rows, so the refinement's
    # thresholds exist
    order = np.argsort(floor, kind="stable")
    # rows timed a round (each round is a refinement pass over the timed rows)
    step = max(keep // 4, 1024)
    if elsewhere is None:
        new = np.sort(order[:keep + keep // 16 + TOP_EXACT])
    else:
        first = order[~elsewhere[order]]
        new = np.sort(first[:step + TOP_EXACT] if len(first) >= TOP_EXACT else order[:TOP_EXACT])
    while True:
        _FITTING = fitting                # what ``_time_worker`` reads
        res = timed(new)
        for k in outputs:
            outputs[k][new] = res[k]
        is_timed[new] = True
        at = np.flatnonzero(is_timed)
        trace: dict = {}
        ev = refine(model, cluster, eff, space, global_batch, evaluated(at, {k: v[at] for k, v in outputs.items()}),
                    defaults=job.defaults, cache=(at,) + cache[1:], trace=trace)
        untimed = ~is_timed
        rest = np.flatnonzero(untimed)
        rest_by_memory = order_of_subset(by_memory, untimed)
        skip = skippable(floor[rest], fit_memory[rest], n_gpus[rest], tokens,
                         ev.outputs["tokens_per_s"], ev.outputs["memory_bytes"], n_gpus[at], trace, keep,
                         None if held is None else (held[0], held[1][rest], held[2][rest]), rest_by_memory)
        open_rows = rest[~skip]
        if not len(open_rows) and len(screened["rows"]):
            # the screened rows by their stand-ins: those not shown skippable get the memory
            # model, the most promising first (``next_to_time``), and the fitting ones become
            # untimed rows of the next round
            s_skip = skippable(screened["floor_s"], screened["memory_lower_bytes"], s_gpus, tokens,
                               ev.outputs["tokens_per_s"], ev.outputs["memory_bytes"], n_gpus[at], trace, keep,
                               s_held, s_by_memory)
            s_open = np.flatnonzero(~s_skip)
            if len(s_open):
                late = np.zeros(len(s_skip), dtype=bool)
                late[s_open[next_to_time(screened["floor_s"][s_open], screened["memory_lower_bytes"][s_open],
                                         s_gpus[s_open], trace.get("peak_s", np.zeros(0)),
                                         ev.outputs["memory_bytes"], n_gpus[at], step)]] = True
                fitting, ev_kw, place = _with_late(job, fitting, ev_kw, late)
                # (the screened rows left keep their order: their sorting permutation is the old
                # one less the rows now modelled)
                s_by_memory = order_of_subset(s_by_memory, ~late)
                screened = fitting.screened
                n_old = len(is_timed)
                is_timed = _placed(is_timed, place, n_old, False)
                outputs = {k: _placed(v, place, n_old, 0.0) for k, v in outputs.items()}
                cache = (None, _placed(cache[1], place, n_old, False),
                         {k: _placed(v, place, n_old, 0.0) for k, v in cache[2].items()})
                floor, n_gpus, fit_memory, by_memory, held, elsewhere, s_gpus, s_held = derived()
                new = np.zeros(0, dtype=np.int64)
                continue
        if not len(open_rows):
            return replace(ev, unrefined={k: v[at] for k, v in outputs.items()})
        # a row once skippable stays so: the next come from the open rows only
        new = np.sort(open_rows[next_to_time(floor[open_rows], fit_memory[open_rows],
                                             n_gpus[open_rows], trace["peak_s"], ev.outputs["memory_bytes"],
                                             n_gpus[at], step)])


def _placed(values: np.ndarray, place: np.ndarray, n_old: int, fill) -> np.ndarray:
    """``values`` (one per row of a fitting set) laid out for the enlarged set: old row ``i``
    at ``place[i]``, the new rows ``fill``."""
    out = np.full(len(place), fill, dtype=values.dtype)
    out[place[:n_old]] = values
    return out


def _with_late(job: _Job, fitting: _Fitting, ev_kw: dict, late: np.ndarray) -> tuple:
    """(``fitting`` with the screened rows ``late`` (mask) modelled: the fitting ones in their
    place, every array in (dtype, row) order as the memory phase gives it; the rest stay
    screened; ``ev_kw`` with the counts moved; where each row of the concatenation (old rows,
    then the new ones) went)."""
    sc = fitting.screened
    results = []
    for d in np.unique(sc["dtype_index"][late]):
        ids = np.sort(sc["rows"][late & (sc["dtype_index"] == d)])
        cols = {k: v[ids] for k, v in job.columns.items()}
        batch = config_batch(cols, job.dtypes[int(d)], job.global_batch,
                             defaults=job.defaults[int(d)] if job.defaults else None)
        results.append(_memory_of(job, int(d), batch, ids, 0, len(ids), None))
    rows = np.concatenate([fitting.rows] + [r.fit_rows for r in results])
    dtype_index = np.concatenate([fitting.dtype_index] + [np.full(len(r.fit_rows), r.dtype_index, dtype=np.int64)
                                                          for r in results])
    order = np.lexsort((rows, dtype_index))
    place = np.empty(len(order), dtype=np.int64)
    place[order] = np.arange(len(order))
    memory = {k: np.concatenate([fitting.memory[k]] + [r.memory[k] for r in results])[order]
              for k in _MEMORY_KEYS + CHOSEN_FIELDS}
    floors = [fitting.floor_s] + [r.floor_s for r in results if r.floor_s is not None]
    merged = _Fitting(rows[order], dtype_index[order], memory, np.concatenate(floors)[order],
                      {k: v[~late] for k, v in sc.items()})
    n_late = int(np.count_nonzero(late))
    kw = dict(ev_kw, fitting=len(merged.rows), unchecked=ev_kw["unchecked"] - n_late,
              bound_pruned=ev_kw["bound_pruned"] + sum(r.bound_pruned for r in results))
    kw.update(nearest_kw(results, kw))
    return merged, kw, place
