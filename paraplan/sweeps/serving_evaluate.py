"""Evaluate serving sweep points: each point is ``paraplan serve plan``'s search
(``planners.serving.search.plan_serving`` on ``serving_api.serving_context``, vectorised over the layouts, batches and worker counts of
that point), its winning deployment one row (``SERVING_COLUMNS``); a point whose objective no
layout meets keeps its row with status ``infeasible`` and serve plan's one-line reason, one whose
layouts meeting it the engine cannot launch as priced status ``unlaunchable``."""
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
#: decode workers' batch per rank; ``tokens_per_s`` = per GPU x GPUs used. The winner is the best
#: layout the engine can launch as priced (serve plan's headline); ``engine_refuses``: why the
#: engine cannot launch the search's better winner, "" when the row is that winner, and
#: ``engine_refused_best`` / ``engine_refused_tokens_per_s_per_gpu`` that winner (serve simulate's
#: words) and its tokens/s/GPU; where no layout meeting the SLO launches, the row is the search's
#: winner with status ``unlaunchable`` and the refusal as its reason; a dense model's ``expert_format``,
#: ``moe_tp`` and ``moe_ep`` are empty, <NA> in the table's nullable ``string`` / ``Int64``
#: columns (``runner.normalise``), as serve plan's --json gives null: the search's moe_tp = tp,
#: moe_ep = 1 are no split a user could set)
SERVING_PLAN_COLUMNS = ("stack", "gpu", "dense_format", "expert_format", "mode", "layout", "prefill_layout",
                        "decode_layout", "tp", "pp", "adp", "moe_tp", "moe_ep", "batch", "workers", "prefill_batch",
                        "prefill_workers", "decode_workers", "gpus_used", "concurrency", "ttft_ms", "ttft_p90_ms",
                        "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s", "tokens_per_s_per_user", "efficiency_fitted",
                        "candidates_evaluated", "engine_refuses", "engine_refused_best",
                        "engine_refused_tokens_per_s_per_gpu")
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
    # as serve plan's headline: the best layout the engine can launch as priced (vLLM has no
    # router for disaggregated workers), a better winner it cannot launch beside it
    from paraplan.serving_launchable import LaunchRequest, launchable_best
    from planners.serving.search import describe
    launchable, _, rank, _, refusal = launchable_best(plan, ctx, LaunchRequest(isl=point["isl"], osl=point["osl"]))
    best = plan.best if launchable is None else launchable
    for k in SERVING_PLAN_COLUMNS:
        if k in best.index:
            row[k] = _plain(best[k]) if moe or k not in ("moe_tp", "moe_ep") else None
    row["candidates_evaluated"] = int(plan.evaluated)
    row["tokens_per_s"] = float(best["tokens_per_s_per_gpu"]) * float(best["gpus_used"])
    row["engine_refuses"] = "" if refusal is None else sweep_reason(f"{refusal.field}: {refusal.message}")
    if refusal is not None:
        row["engine_refused_best"] = describe(plan.best)
        row["engine_refused_tokens_per_s_per_gpu"] = float(plan.best["tokens_per_s_per_gpu"])
    if launchable is None:
        # no layout meeting the SLO launches: the row is the search's winner, not a deployment
        row.update(status="unlaunchable", reason=row["engine_refuses"])


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
