"""A chosen plan as the launch configuration of the framework that will run it.

One module per framework, each with ``emit(plan_row)``, ``refusal(p)`` (why the framework
cannot run the plan as planned, or None) and ``can_run(plan_row)``:

* ``paraplan.exports.megatron``: Megatron-LM ``pretrain_gpt.py`` environment and flags (bash),
  for the main-branch commit of ``megatron_flags.json``, checked against that table;
* ``paraplan.exports.torchtitan``: a torchtitan 0.3.0 ``config_registry`` module (Python);
* ``paraplan.exports.deepspeed``: a DeepSpeed 0.19.8 config (JSON), plus ``recipe`` for the
  launch around it.

``plan_row`` is a row of ``paraplan.api.simulate`` / ``paraplan.api.plan``, a
``planners.PlanResult`` (its winner), a ``StepReport``, or a dict of ``ParallelConfig`` fields
plus ``model`` and ``seq_len``. A plan a framework cannot run as planned raises ``InputError``
naming the field, never an export of a different plan. ``best_runnable`` picks, from a ranked
plan table, the fastest plan a framework can run and how much slower it is than the winner.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from hardware_specs.catalog import DEFAULT_TRAINING_STACK
from hardware_specs.errors import InputError
from paraplan.exports import deepspeed, megatron, screen, torchtitan
from paraplan.exports.common import (chunk_layers, cluster_gpus_per_host, plan_fields, stage_layer_counts,
                                     with_stack_fields)
from planners.explain import slower_share

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")
MODULES = {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed}
#: the stack a plan for each framework is ranked and priced on when the caller names none: the
#: profile of the release the export writes where the catalog has one (torchtitan 0.3.0,
#: ``paraplan.exports.torchtitan.RELEASE``: ``hardware_specs/stacks/torchtitan-0.3.yaml``, not
#: 0.2.0's ``torchtitan.yaml``, whose CP backward gathers K/V again and whose attention is SDPA),
#: else Megatron-Core's. A torchtitan launch priced on Megatron-Core's behaviour predicted
#: Llama-3-70B on 512 H100 (dp64 tp4 pp2 vpp8 z2) at 7.68 s/step where the torchtitan 0.2 profile
#: gives 8.90 s, and ranked its plans by it.
DEFAULT_STACK = DEFAULT_TRAINING_STACK
FRAMEWORK_STACKS = {"torchtitan": "torchtitan-0.3"}
#: the stack frameworks (``StackSpec.framework``) whose behaviour each export target runs
STACK_FRAMEWORKS = {"megatron": ("megatron-core", "megatron-lm", "megatron-bridge", "nemo"),
                    "torchtitan": ("torchtitan",), "deepspeed": ("deepspeed",)}


def default_stack(framework: str | None) -> str:
    """The stack name a plan for ``framework`` (None: no export) is priced on by default."""
    return FRAMEWORK_STACKS.get(framework or "", DEFAULT_STACK)

__all__ = ["FRAMEWORKS", "MODULES", "check_hardware", "emit", "emit_megatron", "emit_torchtitan", "emit_deepspeed", "refusal",
           "can_run", "best_runnable", "file_suffix", "plan_fields", "stage_layer_counts", "chunk_layers",
           "launch_notes", "DEFAULT_STACK", "FRAMEWORK_STACKS", "STACK_FRAMEWORKS", "default_stack",
           "with_stack_fields"]


def module(framework: str, argument: str = "--emit"):
    """The export module of ``framework`` (megatron, torchtitan, deepspeed); an unknown name is
    an ``InputError`` naming ``argument``, the caller's name for it (the CLI's ``--emit``, the
    API's ``framework``)."""
    key = str(framework).strip().lower()
    if key not in MODULES:
        raise InputError(argument, f"unknown framework {framework!r}", "choose megatron, torchtitan or deepspeed")
    return MODULES[key]


def emit(plan_row: Any, framework: str, note: str = "") -> str:
    """The plan as ``framework``'s launch configuration: ``megatron`` (bash: environment and flag
    arrays), ``torchtitan`` (a Python config module) or ``deepspeed`` (JSON). ``note`` is added
    as a comment where the format has comments."""
    return module(framework).emit(plan_row, note=note)


def emit_megatron(plan_row: Any) -> str:
    return megatron.emit(plan_row)


def emit_torchtitan(plan_row: Any) -> str:
    return torchtitan.emit(plan_row)


def emit_deepspeed(plan_row: Any) -> str:
    return deepspeed.emit(plan_row)


#: the GPU vendors the three training frameworks run on (CUDA and ROCm builds of PyTorch;
#: Megatron-LM's and DeepSpeed's ROCm ports, torchtitan on ROCm); TPUs and CPUs are not among them
TRAINING_VENDORS = ("nvidia", "amd")


def check_hardware(gpu, framework: str) -> None:
    """``InputError`` when ``framework`` does not run on ``gpu`` (a ``GPUSpec``) at all."""
    name = str(framework).strip().lower()
    module(name)                                       # an unknown framework is named first
    vendor = (gpu.vendor or "").lower()
    if vendor and vendor not in TRAINING_VENDORS:      # a GPU file need not state its vendor
        raise InputError("--emit", f"{name} runs on NVIDIA or AMD GPUs, not "
                         f"on {gpu.name} ({vendor})",
                         "emit for a cluster of NVIDIA or AMD GPUs; the plan itself stands")


def refusal(plan_row: Any, framework: str) -> InputError | None:
    """Why ``framework`` cannot run the plan as planned (an ``InputError``), or None."""
    return module(framework).refusal(plan_fields(plan_row))


def can_run(plan_row: Any, framework: str) -> bool:
    return refusal(plan_row, framework) is None


def launch_notes(plan_row: Any, framework: str, note: str = "") -> str:
    """What to print beside the export: DeepSpeed's launch recipe (its JSON has no comments);
    empty for the others, whose files carry their own notes."""
    return deepspeed.recipe(plan_row, note) if module(framework) is deepspeed else ""


def best_runnable(plans: pd.DataFrame, framework: str, software: Mapping[str, Mapping] | None = None,
                  refine: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
                  **context: Any) -> tuple[dict, int, float]:
    """``(row, rank, slowdown)``: the fastest row of ``plans`` (ranked fastest first) that
    ``framework`` can run as planned, its 0-based rank, and how much slower it is than row 0
    (its step time over row 0's, minus 1, ``planners.explain.slower_share``: row 0's tokens/s
    over its own, minus 1; 0 when row 0 runs). ``software``: the stack fields the plans
    were priced with, per dtype (``PlanResult.software``; a ranked row carries only its searched
    fields, and an export reads the rest: compile, FSDP resharding, the recomputation policy);
    ``context`` fills fields the rows lack (``model``, ``seq_len``, ``cluster``, ``gpu``). Rows are
    tried in rank order up to the first that runs; past the first 64, the rows the framework
    refuses by a column condition (its ``screened``, ``exports.screen``) are skipped without being
    boxed, where every row has one model. Raises ``InputError`` when none runs, counting every
    row's refusal by field (each row then checked in rank order, as a row that raises raises).
    A skipped row is not validated: a table mixing rows ``plan_fields`` rejects among rows the
    framework refuses anyway may return a later row that runs where a walk of every row raised.

    ``refine``: the exact pipeline makespan of chosen rows (``planners.refine.refine_table`` bound
    to the search's model, cluster and efficiency). A ranked table times exactly only the rows that
    can rank near its top (``pipeline_exact``); the others carry an estimate, and a lower bound
    (``step_time_lower_s``). With ``refine`` the row is the fastest runnable one by its exact
    time, and carries that time (what ``simulate`` gives it): the later rows that run and whose
    bound is below the first runnable row's exact time are refined with it, lowest bound first,
    until no row left estimated could beat the fastest; ``rank`` and ``slowdown`` are its place in
    the table ranked again with the times computed. Without it the first row that runs is taken
    with the table's time (an estimate where ``pipeline_exact`` is False)."""
    mod = module(framework)
    if len(plans) == 0:
        raise InputError("plan", "the search found no plan", "relax the request")
    reasons: dict[str, int] = {}
    fixes: dict[str, str] = {}         # each refusing field's own fix, the first one met
    # the rows name one cluster (or a few): its file is read once per call, not once per row
    # (load_cluster per row was 23 s of a 153 s test over ~51,000 rows)
    cluster_hosts = lru_cache(maxsize=None)(cluster_gpus_per_host)

    def check(rec: dict) -> tuple[dict, InputError | None]:
        row = {**with_stack_fields(rec, software), **context}
        return row, mod.refusal(plan_fields(row, cluster_hosts))

    def count(err: InputError) -> None:
        if err.field == "model":        # the model, not the plan: no other row can do better
            raise err
        reasons[err.field] = reasons.get(err.field, 0) + 1
        fixes.setdefault(err.field, err.fix)

    def runnable(rec: dict) -> dict | None:
        row, err = check(rec)
        if err is None:
            return row
        count(err)
        return None

    # past the first rows, those the framework refuses by a plain column condition are skipped
    # unboxed (a DeepSpeed search refused its first 8,469 rows of 13,500 one at a time); the others
    # are checked in rank order up to the first that runs
    skipped = lru_cache(maxsize=None)(lambda: _screened(plans, mod, software, context))
    met: dict[int, InputError] = {}     # the refusals of the rows checked, by rank
    found = None

    def candidates():
        head = min(len(plans), _FIRST_ROWS)
        yield from enumerate(_records(plans.iloc[:head]))
        if head < len(plans):
            order = head + np.flatnonzero(~skipped()[head:])
            yield from zip(order.tolist(), _records(plans.iloc[order]))

    for rank, rec in candidates():
        try:
            row, err = check(rec)
        except Exception:       # noqa: BLE001 - raised again below, in its rank order
            break
        if err is None:
            found = (rank, row)
            break
        if err.field == "model":
            break
        met[rank] = err
    if found is None:
        # none runs (or a row raised): every row in rank order, as the refusals are counted and a
        # row that raises raises, the first of them (the rows checked above are not checked again)
        for rank, rec in enumerate(_records(plans)):
            err = met.get(rank)
            if err is None:
                row, err = check(rec)
                if err is None:
                    found = (rank, row)
                    break
            count(err)
    if found is None:
        ranked = sorted(reasons.items(), key=lambda kv: -kv[1])
        counts = ", ".join(f"{n} by {field}" for field, n in ranked)
        top = fixes.get(ranked[0][0]) if ranked else None
        raise InputError("--emit", f"none of the {len(plans)} plans that fit runs in {framework} as planned "
                         f"(refused: {counts})",
                         (f"for {ranked[0][0]}: {top}; or " if top else "") + "relax the request or emit another framework")
    rank, row = found
    if refine is not None and all(k in plans for k in ("step_time_s", "step_time_lower_s", "pipeline_exact")):
        rank, row, best = _fastest_exact(plans, rank, row, runnable, refine, skipped)
    else:
        best = plans["tokens_per_s"].iloc[0] if "tokens_per_s" in plans else None
    mine = row.get("tokens_per_s")
    # step time over the winner's, minus 1 (``explain.slower_share``; one global batch, so the
    # inverse ratio of the tokens/s), not the throughput lost (1 - mine/best), which read 48.5%
    # where the step took 94% longer
    slowdown = slower_share(1.0 / mine, 1.0 / best) if best and mine else 0.0
    return row, rank, max(0.0, float(slowdown))


def _fastest_exact(plans: pd.DataFrame, first: int, row: dict, runnable, refine,
                   skipped: Callable[[], np.ndarray]) -> tuple[int, dict, float]:
    """``best_runnable``'s refinement: from the first runnable row (``first``, as ``row``), the
    runnable row of ``plans`` fastest by its exact step time (as a row for the export), its rank
    in ``plans`` ranked again with the times computed, and the tokens/s of that ranking's first.
    ``skipped()``: the rows the framework refuses by a column condition (not checked one by one
    where more than a block of rows could beat it)."""
    exact = plans["pipeline_exact"].to_numpy().astype(bool)
    time_s = plans["step_time_s"].to_numpy(dtype=float)
    lower = plans["step_time_lower_s"].to_numpy(dtype=float)
    tps = plans["tokens_per_s"].to_numpy(dtype=float, copy=True)
    best_s = time_s[first] if exact[first] else float(refine(plans.iloc[[first]])["step_time_s"].iloc[0])
    # a later row can beat it only if its bound (its time, when exact) is below its exact time;
    # every such row that runs is refined with it. No row before ``first`` runs.
    later = np.flatnonzero(np.where(exact, time_s, lower) < best_s)
    later = later[later > first]
    if len(later) > _FIRST_ROWS:
        later = later[~skipped()[later]]
    chosen = [first] + [int(i) for i, rec in zip(later, _records(plans.iloc[later])) if runnable(rec) is not None]
    if chosen == [first] and exact[first]:       # the first that runs, exact (near the top): the table's row
        return first, row, float(max(tps[0], tps[first]))
    if exact[chosen].all():
        pick = int(np.argmin(time_s[chosen]))             # the first of equal times: the table's order
        refined = plans.iloc[[chosen[pick]]]
    else:
        # refine_table leaves no estimated row whose bound reaches the fastest: that one is exact
        refined = refine(plans.iloc[chosen])
        tps[chosen] = refined["tokens_per_s"].to_numpy(dtype=float)
        pick = int(np.argmin(refined["step_time_s"].to_numpy(dtype=float)))
        refined = refined.iloc[[pick]]
    fastest = chosen[pick]
    row = runnable(refined.to_dict("records")[0])
    mine = tps[fastest]
    # ranked again: the rows faster than it, and the earlier ones as fast (the table's order)
    rank = int(np.count_nonzero(tps > mine) + np.count_nonzero(tps[:fastest] == mine))
    return rank, row, float(max(tps[0], mine))


def _screened(plans: pd.DataFrame, mod, software, context: Mapping[str, Any]) -> np.ndarray:
    """The rows of ``plans`` that ``mod`` (an export module) refuses by a column condition
    (``screen.refused_rows`` with its ``screened``): none unless every row has one model (the
    context's, or one catalog name in the table), whose own refusal (field ``model``) is then the
    same on every row, so no row that runs can come after a row that raises it."""
    if "model" not in context and "model" in plans.columns:
        names = plans["model"].to_numpy(dtype=object)
        if not (len(names) and isinstance(names[0], str) and (names == names[0]).all()):
            return np.zeros(len(plans), dtype=bool)
    return screen.refused_rows(plans, mod.screened, software, context)


#: the rows ``best_runnable`` checks one by one before it screens the table by column conditions
#: (most searches have a runnable row among them: Megatron-LM ran rank 5 of 13,500)
_FIRST_ROWS = 64


def _records(plans: pd.DataFrame, first_rows: int = 64):
    """The rows of ``plans`` as dicts, in order, boxed a block at a time (a block twice the size
    of the one before): a search that stops early does not box a table of tens of thousands of
    rows."""
    start, size = 0, first_rows
    while start < len(plans):
        yield from plans.iloc[start:start + size].to_dict("records")
        start, size = start + size, 2 * size


def file_suffix(framework: str) -> str:
    """The usual file suffix of ``framework``'s output (``.sh``, ``.py``, ``.json``)."""
    return module(framework).SUFFIX
