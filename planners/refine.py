"""Exact pipeline makespans for the rows that can rank (``refine_exact``).

The step model gives every fitting row its pipeline makespan by a closed-form estimate and a
lower bound (``simulator.step_model.evaluate``, ``exact_pipeline`` False); the DAG makespan
(``simulator.pipeline.makespan``) costs far more. Rows are computed exactly, lowest bound
first, until no estimated row's lower bound beats the ``top``-th best time, the best time of a
row with less memory (the Pareto front) or the best time at its GPU count; so the reported
winners, fronts (memory, GPU count) are what ``simulate`` says of them. ``refine_table`` does the
same over chosen rows of a ranked table (the plans a framework can run: ``paraplan.exports``), so
the fastest of them is known by its exact time.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np
import pandas as pd

from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from planners.time_pruning import FRONTIER_MIN_SHARE

#: plans whose step time is computed exactly (the schedule's DAG makespan) at least: the best
#: ``TOP_EXACT`` by time, the memory and GPU-count Pareto fronts, plus every plan
#: whose lower bound could beat one of them; at most ``MAX_EXACT`` rows.
TOP_EXACT = 50
MAX_EXACT = 4000


def refine_exact(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, space, global_batch: int, ev,
                 top: int = TOP_EXACT, max_rows: int = MAX_EXACT, defaults: tuple = (), cache=None,
                 trace: dict | None = None, fronts: bool = True):
    """``ev`` with the exact pipeline makespan for every row that can rank among the best.

    Rounds: each computes, over the current times, the ``top``-th best, the best time of every
    row with less memory (stable order; at most the best time over ``FRONTIER_MIN_SHARE``) and
    the best at each GPU count or fewer; the estimated rows whose lower bound reaches one of them
    are computed exactly, lowest bound first, at most ``max_rows`` in all. ``fronts`` False: the
    ``top``-th best alone (the memory and GPU-count fronts of these rows are not wanted).

    ``cache``: (slot per row of ``ev``, known mask, values by ``KEPT_OUTPUTS`` name) of exact
    results already computed (reused, and filled in); ``trace``: a dict this fills with the
    largest ``top``-th best time any round saw (``kth_s``) and best time over
    ``FRONTIER_MIN_SHARE`` (``frontier_bound_s``), the GPU counts (``gpus``) and the largest best
    time at each or fewer GPUs (``upto_best_s``), and every row's largest time (``peak_s``):
    what ``time_pruning`` needs to show an untimed row could not have changed the rounds.
    """
    from planners.vectorized import CHOSEN_FIELDS, evaluate_rows_exact
    out = {k: np.array(v, dtype=float, copy=True) for k, v in ev.outputs.items()}
    n = len(ev.rows)
    cols = space.columns
    n_gpus = (cols["dp"] * cols["tp"] * cols["pp"] * cols["cp"])[ev.rows]
    gpu_values, gpu_group = np.unique(n_gpus, return_inverse=True)
    if trace is not None:
        # set for no rows as well: a round whose timed rows all failed to fit leaves an empty
        # trace that ``time_pruning`` reads (no timed row rules any row out)
        trace.update(kth_s=-np.inf, frontier_bound_s=-np.inf, gpus=gpu_values,
                     upto_best_s=np.full(len(gpu_values), -np.inf),
                     peak_s=np.array(out.get("step_time_s", np.zeros(0)), dtype=float, copy=True))
    if n == 0:
        return ev
    exact = out["pipeline_exact"].astype(bool)
    mem_order = np.argsort(out["memory_bytes"], kind="stable")
    budget = max_rows
    while True:
        t, lb = out["step_time_s"], out["step_time_lower_s"]
        k = min(top, n) - 1
        kth = np.partition(t, k)[k]
        run_min = np.minimum.accumulate(t[mem_order])
        frontier = np.empty(n)
        frontier[mem_order] = np.concatenate([[np.inf], run_min[:-1]])
        # a row slower than the best over ``FRONTIER_MIN_SHARE`` is on no kept memory frontier
        bound = t.min() / FRONTIER_MIN_SHARE
        np.minimum(frontier, bound, out=frontier)
        # the best time at each GPU count or fewer: a row slower is on no GPU frontier
        group_best = np.full(len(gpu_values), np.inf)
        np.minimum.at(group_best, gpu_group, t)
        group_best = np.minimum.accumulate(group_best)
        if trace is not None:
            trace["kth_s"] = max(trace["kth_s"], kth)
            trace["frontier_bound_s"] = max(trace["frontier_bound_s"], bound)
            np.maximum(trace["upto_best_s"], group_best, out=trace["upto_best_s"])
            np.maximum(trace["peak_s"], t, out=trace["peak_s"])
        if budget <= 0:
            break
        need = lb <= kth
        if fronts:
            need |= (lb < frontier) | (lb <= group_best[gpu_group])
        need &= ~exact
        if not need.any():
            break
        idx = np.flatnonzero(need)
        idx = idx[np.argsort(lb[idx], kind="stable")][:budget]
        todo = idx
        if cache is not None:
            slots, known, values = cache
            todo = idx[~known[slots[idx]]]
        if len(todo):
            res = evaluate_rows_exact(model, cluster, eff, space, global_batch, ev.rows[todo], ev.dtype_index[todo],
                                      defaults, chosen={f: out[f][todo] for f in CHOSEN_FIELDS if f in out})
            if cache is not None:
                for key, value in res.items():
                    values[key][slots[todo]] = value
                known[slots[todo]] = True
        for key in out:
            if cache is not None and key in cache[2]:
                out[key][idx] = cache[2][key][cache[0][idx]]
            elif cache is None and key in res:
                out[key][idx] = res[key]
        exact[idx] = True
        budget -= len(idx)
    out["pipeline_exact"] = exact.astype(float)
    return replace(ev, outputs=out)


_GIB = 2**30


def refine_table(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, plans: pd.DataFrame,
                 software: Mapping[str, Mapping] | None = None, top: int = 1) -> pd.DataFrame:
    """``plans`` (rows of a ranked table, ``planners.plan``'s or ``paraplan.api.plan``'s, of one
    request) with the exact pipeline makespan for every row that can be among their ``top``
    fastest: ``refine_exact`` over these rows alone, without the fronts. Rows keep their index
    and order (the caller re-ranks); the step-time columns (``planners.vectorized.KEPT_OUTPUTS``
    but the memory ones, those the table has) of the rows computed are replaced.
    ``model``, ``cluster``, ``eff``: what the search priced the plans with; ``software``: its stack
    fields per dtype (``PlanResult.software``; the table's rows carry only their searched fields).
    The numbers are those ``simulate`` gives the row: the same step model, row by row."""
    from planners.search_space import RECOMPUTE_NAMES, SCHEDULE_NAMES, SearchSpace
    from planners.vectorized import CHOSEN_FIELDS, KEPT_OUTPUTS, Evaluated
    n = len(plans)
    if n == 0 or bool(plans["pipeline_exact"].all()):
        return plans
    batches = pd.unique(plans["global_batch"])
    if len(batches) != 1:
        raise ValueError(f"rows of one request have one global batch, not {list(batches)}")
    names = plans["dtype"].astype(str).to_numpy()
    dtypes = tuple(dict.fromkeys(names))
    dtype_index = np.array([dtypes.index(d) for d in names], dtype=np.int64)
    columns = {k: plans[k].to_numpy().astype(np.int64) for k in
               ("dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "zero_stage", "zero_shard_group")}
    if "etp" in plans:      # the expert TP the row ran (``SearchConstraints.expert_tp_choices``)
        columns["etp"] = plans["etp"].to_numpy().astype(np.int64)
    columns["sequence_parallel"] = plans["sequence_parallel"].to_numpy().astype(bool).astype(np.int64)
    for key, names_of in (("recompute", RECOMPUTE_NAMES), ("schedule", SCHEDULE_NAMES)):
        code = {name: i for i, name in enumerate(names_of)}
        columns[key] = np.array([code[str(v)] for v in plans[key]], dtype=np.int64)
    space = SearchSpace(columns, {}, 0, dtypes, int(batches[0]))
    # outputs a table lacks (``api.plan`` shows ``mfu`` in percent) are computed but not written
    outputs = {k: plans[k].to_numpy(dtype=float, copy=True) if k in plans else np.full(n, np.nan)
               for k in KEPT_OUTPUTS + CHOSEN_FIELDS}
    outputs["memory_bytes"] = plans["memory_gib"].to_numpy(dtype=float) * _GIB
    outputs["host_memory_bytes"] = plans["host_memory_gib"].to_numpy(dtype=float) * _GIB
    outputs["pipeline_exact"] = plans["pipeline_exact"].to_numpy().astype(float)
    ev = Evaluated(np.arange(n), dtype_index, outputs, n, np.inf, -1, -1, fitting=n)
    defaults = tuple(dict((software or {}).get(d) or {}) for d in dtypes) if software else ()
    refined = refine_exact(model, cluster, eff, space, int(batches[0]), ev, top=top, defaults=defaults,
                           fronts=False).outputs
    done = (refined["pipeline_exact"] > 0) & ~plans["pipeline_exact"].to_numpy().astype(bool)
    out = plans.copy()
    from planners.vectorized import KEPT_OUTPUTS      # (vectorized imports this module)
    # the kept outputs the exact pipeline makespan changes (the memory columns it does not)
    for key in (k for k in KEPT_OUTPUTS if k not in ("memory_bytes", "host_memory_bytes")):
        if key in out.columns:
            values = out[key].to_numpy(copy=True)
            values[done] = refined[key][done].astype(values.dtype)
            out[key] = values
    return out
