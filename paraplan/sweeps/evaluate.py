"""Evaluate one chunk of sweep points: a DataFrame with one row per point.

``search: simulate`` points that share a model, cluster, sequence length, stack and dtype are
scored together, one ``ConfigBatch`` through the step model (``simulator.step_model.evaluate``,
the planner's scoring: closed-form pipeline bubble). ``search: best`` points each run the
planner (``planners.plan``) and keep its winner. A point that cannot run (an invalid layout,
nothing fits, an unknown name; ``run_sweep`` refuses a spec naming one first, ``check_names``)
is a row with ``status`` and the one-line ``reason``; the plan's columns are then empty.
"""
from __future__ import annotations

from dataclasses import fields
from enum import Enum
from typing import Any, Mapping

import numpy as np
import pandas as pd

from cost_models.compute import sixteen_bit_dtype
from hardware_specs.catalog import efficiency_for_cluster, load_cluster, load_stack
from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from paraplan.commands.simulate import refuse_options_without_effect
from paraplan.mfu import mfu_column, mfu_pct
from paraplan.sweeps.reasons import sweep_reason
from paraplan.sweeps.spec import AUTO_DTYPE
from planners.plan import DETAIL_COLUMNS, OUTPUT_COLUMNS
from simulator import headroom
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.report import TIME_PARTS
from simulator.stack_defaults import (check_default_expert_tp, check_stack_cp_kind, run_cp_kind, stack_config_fields,
                                      stack_expert_tp, stack_sequence_parallel, stack_zero_stage)
from simulator.step_model import evaluate
from simulator.validate_config import check_config, placed_and_checked

GIB = 2**30
#: the point's own columns, then the plan's (units in every name); ``mfu_<dtype>_pct`` columns
#: follow ``tokens_per_s_per_gpu`` (one per reference dtype present, see ``paraplan.mfu``)
POINT_COLUMNS = ("point", "kind", "search", "model", "cluster", "gpu", "stack", "seq_len", "gpus",
                 "global_batch_tokens", "status", "reason", "efficiency_fitted")
#: the plan's columns are ``paraplan plan --csv``'s (``planners.plan.OUTPUT_COLUMNS``, then
#: ``DETAIL_COLUMNS``: host memory, whether the pipeline time is the exact makespan, the step by
#: part): a best plan that offloads activations or recomputes some layers is reproducible from its
#: row, and the host memory its offload needs is in it
PLAN_COLUMNS = tuple(c for c in OUTPUT_COLUMNS if c != "mfu") + ("fits",) + DETAIL_COLUMNS
#: the plan columns that are the configuration's own fields (read from ``ParallelConfig.as_dict``)
_CONFIG_COLUMNS = tuple(c for c in PLAN_COLUMNS if c in {f.name for f in fields(ParallelConfig)})


def stack_fields(stack, dtype: str, model, gpu: str, tp: int, ep: int = 1) -> dict:
    """The ``ParallelConfig`` software fields the stack's documented behaviour sets for this run
    (``simulator.stack_defaults``, as ``paraplan simulate --stack``), sequence parallelism and the
    expert tensor-parallel degree too;
    ``stack``: a ``StackSpec`` or its name or file."""
    stack = load_stack(stack) if isinstance(stack, str) else stack
    fields = stack_config_fields(stack, dtype, model.name, gpu)
    fields["sequence_parallel"] = stack_sequence_parallel(stack, tp, model.name, gpu, dtype, model.moe is not None)
    fields["etp"] = stack_expert_tp(stack, tp, model.moe is not None, model.name, gpu, dtype, ep)
    return fields


def _batch(point: Mapping, seq_len: int) -> int:
    if "global_batch" in point:
        return int(point["global_batch"])
    tokens = int(point["global_batch_tokens"])
    if tokens % seq_len:
        raise InputError("global_batch_tokens", f"{tokens} is not a multiple of the sequence length {seq_len}")
    return tokens // seq_len


def _base_row(index: int, point: Mapping, kind: str, search: str) -> dict:
    """The point's own axis values (a point that cannot run keeps them, so its row says which
    grid point it is), then its status."""
    row = {"point": index, "kind": kind, "search": search, "model": point["model"], "cluster": point["cluster"],
           "stack": point["stack"], "gpus": point["gpus"]}
    for key in ("seq_len", "global_batch", "global_batch_tokens", "dtype"):
        if point.get(key) is not None:
            row[key] = point[key]
    row.update({k: v for k, v in dict(point.get("config") or {}).items() if k in _CONFIG_COLUMNS})
    row.update(status="ok", reason="")
    return row


def _context(point: Mapping):
    model = load_model(point["model"])
    if point["seq_len"] is not None:
        model = model.with_seq_len(point["seq_len"])
    cluster = load_cluster(point["cluster"])
    return model, cluster


def _dtype(dtype: str | None, cluster) -> str:
    """A point's dtype: ``auto`` (the spec's default) is the cluster GPU's 16-bit type."""
    return sixteen_bit_dtype(cluster.gpu) if dtype in (None, AUTO_DTYPE) else dtype


def _simulate_group(rows: list[dict], points: list[Mapping], model, cluster, eff) -> None:
    """Score the valid points of one (model, cluster, seq_len, stack, dtype) group together
    (``eff``: the cluster's efficiency model, loaded once for the group). The stack is loaded once
    per group (its fields, and the ZeRO stage a point without one runs, ``stack_zero_stage``) and
    its fields read once per (stack, dtype, tp), not per point."""
    software: dict[tuple, dict] = {}
    stacks: dict[str, object] = {}
    configs, where, placements = [], [], []
    # the placement and its check read the cluster (one per group), the GPUs and these fields of the
    # configuration only (``placed_and_checked``: ``placed_cluster(cluster, n_gpus)``, then
    # ``check_cluster``'s group tiling of tp, cp, dp, ep, etp, zero_shard_group and whether it
    # offloads): points alike in them share one verdict, the placed cluster or the error
    placed_by: dict[tuple, object] = {}
    for row, point in zip(rows, points):
        dtype = _dtype(point["dtype"], cluster)
        row["dtype"] = dtype
        try:
            given = dict(point["config"])
            # a grid value the run would not use (1f1b with a vpp runs interleaved, sequence
            # parallelism at tp 1 runs off): the row would show another configuration than its
            # point's, so it is refused with simulate's reason
            refuse_options_without_effect({"pp": 1, "tp": 1, "cp": 1, "recompute": "none", **given})
            if point["stack"] not in stacks:          # loaded once per group
                stacks[point["stack"]] = load_stack(point["stack"])
            key = (point["stack"], dtype, int(given.get("tp", 1)), int(given.get("ep", 1)))
            if key not in software:
                software[key] = stack_fields(stacks[point["stack"]], dtype, model, cluster.gpu.name, key[2], key[3])
            fields = dict(software[key])
            fields.update(given)                 # the grid's own values win over the stack's
            gbs = _batch(point, model.seq_len)
            for name in ("tp", "pp", "cp"):
                if int(fields.get(name, 1)) < 1:      # before dividing the GPUs by them
                    raise InputError(f"config.{name}", f"must be a whole number >= 1, got {fields[name]}")
            per_replica = int(fields.get("tp", 1)) * int(fields.get("pp", 1)) * int(fields.get("cp", 1))
            if "dp" not in fields:
                if point["gpus"] % per_replica:
                    raise InputError("gpus", f"{point['gpus']} GPUs do not divide by tp*pp*cp = {per_replica}")
                fields["dp"] = point["gpus"] // per_replica
            if fields.get("zero_stage") is None:
                # the stack's documented sharding, as `paraplan simulate` and the API's simulate
                fields["zero_stage"] = stack_zero_stage(stacks[point["stack"]], int(fields["dp"]),
                                                        int(fields.get("cp", 1)), model.name, cluster.gpu.name, dtype)
            if fields.get("cp_kind") is None and int(fields.get("cp", 1)) > 1:
                # the flavour the stack's framework runs, as `paraplan simulate` without --cp-kind
                fields["cp_kind"] = run_cp_kind(int(fields["cp"]), None, stacks[point["stack"]], model.name,
                                                cluster.gpu.name, dtype)
            elif int(fields.get("cp", 1)) > 1:
                # a given flavour the stack's framework does not run, as `paraplan simulate --cp-kind`
                check_stack_cp_kind(stacks[point["stack"]], fields["cp_kind"], model.name, cluster.gpu.name,
                                    dtype, flag="cp_kind=")
            if cluster.max_gpus is not None and point["gpus"] > cluster.max_gpus:
                raise InputError("gpus", f"{point['gpus']} GPUs exceed the {cluster.max_gpus} of {cluster.name}")
            cluster.gpu.peak_flops(dtype)
            config = ParallelConfig(global_batch=gbs, dtype=dtype, **fields)
            if given.get("etp") is None:
                # the stack's default etp that does not fit, said as `paraplan simulate` says it
                check_default_expert_tp(stacks[point["stack"]], model, cluster.gpu.name, dtype, config.dp, config.cp,
                                        config.tp, config.ep, config.etp, flag="etp=")
            check_config(model, config, point["gpus"])
        except (InputError, TypeError, ValueError) as exc:
            row.update(status="invalid", reason=sweep_reason(exc))
            continue
        where_key = (config.n_gpus, config.tp, config.cp, config.dp, config.ep, config.etp, config.zero_shard_group,
                     bool(config.offload_activation_layers), bool(config.offload_optimizer_fraction))
        if where_key not in placed_by:
            try:
                # the job in its Slurm segments on multi-rack NVL72, with simulate's group tiling check
                placed_by[where_key] = placed_and_checked(cluster, config)
            except (InputError, TypeError, ValueError) as exc:
                placed_by[where_key] = exc
        placed = placed_by[where_key]
        if isinstance(placed, Exception):
            row.update(status="invalid", reason=sweep_reason(placed))
            continue
        configs.append(config)
        where.append(row)
        placements.append(placed)
    by_placement: dict[int, list[int]] = {}
    for i, placed in enumerate(placements):
        by_placement.setdefault(placed.gpus_per_node, []).append(i)
    for members in by_placement.values():
        _score([where[i] for i in members], [configs[i] for i in members], model, placements[members[0]], eff)


def _score(where: list[dict], configs: list, model, cluster, eff) -> None:
    """Price ``configs`` (one placement of the cluster) into their rows, as ``simulate`` does."""
    out = evaluate(model, cluster, eff, ConfigBatch.from_configs(configs))
    hbm = cluster.gpu.hbm_bytes
    # each output column read out of its array once (as Python floats / bools), not per row
    numbers = {k: np.asarray(out[k], dtype=float).tolist()
               for k in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu") + TIME_PARTS}
    exact = np.asarray(out["pipeline_exact"], dtype=bool).tolist()
    memory = np.asarray(out["memory_bytes"], dtype=float)
    fits = np.asarray(headroom.step_fits(memory, hbm, np.asarray(out["host_fits"], dtype=bool)), dtype=bool)
    hbm_fits = np.asarray(headroom.fits(memory, hbm), dtype=bool)
    host_gib = (np.asarray(out["host_memory_bytes"], dtype=float) / GIB).tolist()
    # the columns, each computed over the whole batch (the dtype is the batch's: ConfigBatch holds one)
    columns = {k: [_plain(getattr(c, k)) for c in configs] for k in _CONFIG_COLUMNS}
    columns["n_gpus"] = [c.n_gpus for c in configs]
    columns.update({k: numbers[k] for k in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu") + TIME_PARTS})
    columns[mfu_column(cluster.gpu)] = np.asarray(mfu_pct(np.asarray(out["mfu"], dtype=float), configs[0].dtype,
                                                          cluster.gpu), dtype=float).tolist()
    columns["memory_gib"] = (memory / GIB).tolist()
    columns["headroom_gib"] = ((hbm - memory) / GIB).tolist()
    columns["host_memory_gib"] = host_gib
    columns["pipeline_exact"] = exact
    columns["fits"] = fits.tolist()
    names = tuple(columns)
    for row, values in zip(where, zip(*columns.values())):
        row.update(zip(names, values))
    kept_gib = headroom.headroom_gib(hbm)
    for i in np.flatnonzero(~fits).tolist():     # the reasons of the rows that do not fit
        where[i]["status"] = "does not fit"
        where[i]["reason"] = (f"needs {memory[i] / GIB:.1f} GiB of {hbm / GIB:.0f} GiB HBM with "
                              f"{kept_gib:.1f} GiB kept free") if not hbm_fits[i] \
            else (f"offload needs {host_gib[i]:.1f} GiB of host memory per GPU, more than "
                  "the node's host memory holds for the job's GPUs")


def _plain(value):
    """A configuration field as ``ParallelConfig.as_dict`` gives it (an enum as its value)."""
    return value.value if isinstance(value, Enum) else value


def _best(row: dict, point: Mapping, model, cluster, spec_config: Mapping, dtypes) -> None:
    from planners.plan import plan
    try:
        gbs = _batch(point, model.seq_len)
        dtypes = tuple(dict.fromkeys(_dtype(d, cluster) for d in dtypes))
        result = plan(model, cluster, point["gpus"], gbs, fixed=dict(spec_config) or None, dtypes=dtypes,
                      assign_stages=False, max_plans=1000, stack=point["stack"])
    except InputError as exc:
        row.update(status="infeasible", reason=sweep_reason(exc))
        return
    best = result.plans.iloc[0]
    for k in PLAN_COLUMNS:
        if k in best.index:
            value = best[k]
            row[k] = value.item() if hasattr(value, "item") else value
    row["recompute"], row["schedule"], row["dtype"] = str(best["recompute"]), str(best["schedule"]), str(best["dtype"])
    row[mfu_column(cluster.gpu)] = float(mfu_pct(float(best["mfu"]), str(best["dtype"]), cluster.gpu))
    row["fits"] = True


def _label_configs(df: pd.DataFrame) -> None:
    """``config``: the short label ``plan`` and ``simulate`` print (``dp8 tp8 pp4 mb1 z1 sel sp``,
    ``paraplan.api.config_labels``) for every row that has a configuration (priced, or priced and
    found not to fit); empty for points that never reached one (invalid, infeasible)."""
    from paraplan.api import config_labels
    df["config"] = ""
    if "n_gpus" not in df.columns:
        return
    priced = df["n_gpus"].notna()
    if priced.any():
        table = df.loc[priced, [c for c in _CONFIG_COLUMNS if c in df.columns]].infer_objects()
        for name in ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "zero_stage"):
            if name in table.columns:
                table[name] = table[name].astype(int)
        df.loc[priced, "config"] = config_labels(table)


def evaluate_points(indexed_points: list[tuple[int, Mapping[str, Any]]], kind: str, search: str,
                    spec_config: Mapping[str, tuple] | None = None, dtypes=(AUTO_DTYPE,)) -> pd.DataFrame:
    """One row per point (``POINT_COLUMNS``, then ``PLAN_COLUMNS`` and the MFU column)."""
    rows = [_base_row(i, p, kind, search) for i, p in indexed_points]
    points = [p for _, p in indexed_points]
    groups: dict[tuple, list[int]] = {}
    for k, p in enumerate(points):
        key = (p["model"], p["cluster"], p["seq_len"], p["stack"], p["dtype"])
        groups.setdefault(key, []).append(k)
    for key, members in groups.items():
        try:
            model, cluster = _context(points[members[0]])
        except InputError as exc:
            for k in members:
                rows[k].update(status="invalid", reason=sweep_reason(exc))
            continue
        eff = efficiency_for_cluster(cluster)       # once per group, not per point
        for k in members:
            rows[k]["gpu"] = cluster.gpu.name
            rows[k]["seq_len"] = model.seq_len
            rows[k]["global_batch_tokens"] = (points[k].get("global_batch_tokens")
                                              or points[k].get("global_batch", 0) * model.seq_len)
            rows[k]["efficiency_fitted"] = eff.is_fitted
        if search == "simulate":
            _simulate_group([rows[k] for k in members], [points[k] for k in members], model, cluster, eff)
        else:
            for k in members:
                _best(rows[k], points[k], model, cluster, spec_config or {}, tuple(dtypes))
    df = pd.DataFrame(rows)
    _label_configs(df)
    mfu_cols = sorted(c for c in df.columns if c.startswith("mfu_"))
    order = list(POINT_COLUMNS) + ["config"] + list(PLAN_COLUMNS[:PLAN_COLUMNS.index("memory_gib")]) + mfu_cols + \
        list(PLAN_COLUMNS[PLAN_COLUMNS.index("memory_gib"):])
    return df.reindex(columns=order)
