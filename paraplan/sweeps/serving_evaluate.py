"""Evaluate serving sweep points: each point is ``paraplan serve plan``'s search
(``planners.serving.search.plan_serving`` on ``serving_api.serving_context``, vectorised over the layouts, batches and worker counts of
that point), its winning deployment one row (``SERVING_COLUMNS``); a point whose objective no
layout meets keeps its row with status ``infeasible`` and serve plan's one-line reason."""
from __future__ import annotations

import math
from typing import Any, Mapping

import pandas as pd

from hardware_specs.errors import InputError
from paraplan.sweeps.reasons import sweep_reason
from paraplan.sweeps.serving_spec import SERVING_MODES

#: the point's own values (``ttft_slo_ms`` / ``tpot_slo_ms``: the objective searched under)
SERVING_POINT_COLUMNS = ("point", "kind", "search", "model", "system", "gpus", "backend", "isl", "osl",
                         "ttft_slo_ms", "tpot_slo_ms", "precision", "modes", "status", "reason")
#: the winning deployment (``planners.serving.search.COLUMNS`` with units; empty when infeasible;
#: for a disaggregated winner ``layout``, ``tp`` ... ``workers`` are empty and ``batch`` is the
#: decode workers' batch per rank; ``tokens_per_s`` = per GPU x GPUs used; ``engine_refuses``:
#: why the engine cannot launch it as priced, "" when it can; a dense model's ``expert_format``,
#: ``moe_tp`` and ``moe_ep`` are empty, <NA> in the table's nullable ``string`` / ``Int64``
#: columns (``runner.normalise``), as serve plan's --json gives null: the search's moe_tp = tp,
#: moe_ep = 1 are no split a user could set)
SERVING_PLAN_COLUMNS = ("stack", "gpu", "dense_format", "expert_format", "mode", "layout", "prefill_layout",
                        "decode_layout", "tp", "pp", "adp", "moe_tp", "moe_ep", "batch", "workers", "prefill_batch",
                        "prefill_workers", "decode_workers", "gpus_used", "concurrency", "ttft_ms", "ttft_p90_ms",
                        "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s", "tokens_per_s_per_user", "efficiency_fitted",
                        "candidates_evaluated", "engine_refuses")
SERVING_COLUMNS = SERVING_POINT_COLUMNS + SERVING_PLAN_COLUMNS


def _plain(value):
    """A table cell: numpy scalars as Python ones, NaN (a column the other mode fills) as None."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and math.isnan(value) else value


def _best(row: dict, point: Mapping[str, Any]) -> None:
    from paraplan.serving_api import serving_context
    from planners.serving.search import plan_serving
    precision = None if point["precision"] == "auto" else point["precision"]
    try:
        ctx = serving_context(point["model"], point["system"], point["backend"], precision=precision)
    except InputError as exc:
        row.update(status="invalid", reason=sweep_reason(exc))
        return
    moe = ctx.model.moe is not None
    row.update(stack=ctx.stack.name, gpu=ctx.cluster.gpu.name, dense_format=ctx.dense_format,
               expert_format=ctx.expert_format if moe else None, efficiency_fitted=not ctx.efficiency.prior)
    try:
        plan = plan_serving(ctx, point["gpus"], point["isl"], point["osl"], point["ttft_ms"], point["tpot_ms"],
                            modes=SERVING_MODES[point["modes"]])
    except InputError as exc:
        row.update(status="infeasible", reason=sweep_reason(exc))
        return
    best = plan.best
    for k in SERVING_PLAN_COLUMNS:
        if k in best.index:
            row[k] = _plain(best[k]) if moe or k not in ("moe_tp", "moe_ep") else None
    row["candidates_evaluated"] = int(plan.evaluated)
    row["tokens_per_s"] = float(best["tokens_per_s_per_gpu"]) * float(best["gpus_used"])
    # as serve plan says it: a winner the engine cannot launch as priced (vLLM has no router for
    # disaggregated workers) is marked, with the engine's reason
    from paraplan.commands.serve import launch_of_row
    why_not = launch_of_row(best, ctx, {"isl": point["isl"], "osl": point["osl"], "kv_cache_dtype": "auto"})[1]
    row["engine_refuses"] = "" if why_not is None else sweep_reason(f"{why_not.field}: {why_not.message}")


def evaluate_serving_points(indexed_points: list[tuple[int, Mapping[str, Any]]]) -> pd.DataFrame:
    """One row per serving point (``SERVING_COLUMNS``), in the order given."""
    rows = []
    for index, point in indexed_points:
        row = {"point": index, "kind": "serving", "search": "best", "model": point["model"],
               "system": point["system"], "gpus": point["gpus"], "backend": point["backend"], "isl": point["isl"],
               "osl": point["osl"], "ttft_slo_ms": point["ttft_ms"], "tpot_slo_ms": point["tpot_ms"],
               "precision": point["precision"], "modes": point["modes"], "status": "ok", "reason": ""}
        _best(row, point)
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=list(SERVING_COLUMNS))
