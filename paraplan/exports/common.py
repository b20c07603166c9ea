"""What every framework export shares: the plan as one validated dict, its one-line summary,
and the plan's pipeline stage layout.

``plan_fields`` accepts a row of ``paraplan.api.simulate`` / ``paraplan.api.plan``, a one-row
DataFrame, a ``StepReport``, a ``planners.PlanResult`` (its winner) or a plain dict of
``ParallelConfig`` fields plus ``model`` and ``seq_len``.
"""
from __future__ import annotations

import math
from dataclasses import fields as dc_fields
from typing import Any, Mapping

from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from model_specs.model_spec import ModelSpec
from simulator.parallel_config import ParallelConfig
from simulator.report import StepReport

CONFIG_FIELDS = tuple(f.name for f in dc_fields(ParallelConfig))

#: stage-layout fields a plan row may carry beside ``ParallelConfig`` (decoder layers on the
#: first / last pipeline stage); when absent the layout follows ``stage_layer_counts``' rule.
LAYOUT_FIELDS = ("first_stage_layers", "last_stage_layers")


def plan_fields(plan_row: Any) -> dict:
    """The plan as a dict: every ``ParallelConfig`` field (validated), ``model`` (a ``ModelSpec``),
    ``model_name``, ``seq_len``, ``n_gpus``, the stage-layout fields when the row has them, and
    the prediction fields it carries (``step_time_s``, ``tokens_per_s``, ``mfu``, ...)."""
    row = _row(plan_row)
    if isinstance(row.get("config"), Mapping):
        row = {**row, **row["config"]}
    config_kwargs = {k: _plain(row[k]) for k in CONFIG_FIELDS if k in row and _present(row[k])}
    for required in ("tp", "pp", "micro_batch", "global_batch"):
        if required not in config_kwargs:
            raise InputError(required, "missing from the plan row", "pass a full plan row (it names every degree)")
    if "dp" not in config_kwargs:
        n = row.get("n_gpus") or row.get("gpus")
        if n is None:
            raise InputError("dp", "missing from the plan row", "add dp (or n_gpus)")
        config_kwargs["dp"] = int(n) // (config_kwargs["tp"] * config_kwargs["pp"] * int(config_kwargs.get("cp", 1)))
    config = ParallelConfig(**config_kwargs)
    out = config.as_dict()
    spec = _model(row.get("model"))
    seq_len = row.get("seq_len")
    if not _present(seq_len):
        tokens = row.get("global_batch_tokens") or row.get("tokens_per_step")
        seq_len = int(round(tokens / config.global_batch)) if _present(tokens) else (spec.seq_len if spec else None)
    if seq_len is None:
        raise InputError("seq_len", "missing from the plan row", "add seq_len (tokens per sequence)")
    out["seq_len"] = int(seq_len)
    out["model"] = spec
    out["model_name"] = spec.name if spec is not None else str(row.get("model") or "")
    out["n_gpus"] = config.n_gpus
    for key in LAYOUT_FIELDS:
        if key in row and _present(row[key]):
            out[key] = int(_plain(row[key]))
    for key in ("cluster", "gpu", "step_time_s", "tokens_per_s", "mfu", "memory_gib"):
        if key in row and _present(row[key]):
            out[key] = _plain(row[key])
    return out


def require_model(p: dict, framework: str) -> ModelSpec:
    """The plan's model; an export builds the model, so a plan without one is refused."""
    if p["model"] is None:
        raise InputError("model", f"the {framework} export builds the model, but the plan names no catalog model "
                         f"({p['model_name'] or 'none'!s})", "pass a row whose model is a catalog name or a ModelSpec")
    return p["model"]


def _row(plan_row: Any) -> dict:
    if hasattr(plan_row, "plans") and hasattr(plan_row, "seq_len"):   # a planners.PlanResult: its winner
        result = plan_row
        if len(result.plans) == 0:
            raise InputError("plan", "the search found no plan", "relax the request")
        return {**result.plans.iloc[0].to_dict(), "model": result.model, "seq_len": result.seq_len,
                "cluster": result.cluster, "gpu": result.gpu}
    if isinstance(plan_row, StepReport):
        row = {**plan_row.as_dict(), **dict(plan_row.config)}
        row["seq_len"] = int(round(plan_row.tokens_per_step / plan_row.config["global_batch"]))
        return row
    if hasattr(plan_row, "to_dict"):      # pandas Series (or a one-row DataFrame)
        row = plan_row.to_dict()
        if row and all(isinstance(v, dict) for v in row.values()):   # DataFrame.to_dict()
            if len(plan_row) != 1:
                raise InputError("plan", f"expected one plan, got {len(plan_row)} rows", "pass plans.iloc[0]")
            row = plan_row.iloc[0].to_dict()
        return row
    if isinstance(plan_row, Mapping):
        return dict(plan_row)
    raise InputError("plan", f"cannot read a plan from {type(plan_row).__name__}",
                     "pass a row of paraplan.api.plan/simulate, a StepReport or a dict")


def _model(model: Any) -> ModelSpec | None:
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, str) and model:
        try:
            return load_model(model)
        except InputError:
            return None                      # a name the catalog does not know
    return None


def _present(v: Any) -> bool:
    if v is None:
        return False
    return not (isinstance(v, float) and v != v)


def _plain(v: Any) -> Any:
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 0) == 0:
        return v.item()
    return v


def summary(p: dict) -> str:
    """One line naming the plan and its prediction (the first line of every export)."""
    parts = [f"dp={p['dp']} tp={p['tp']} pp={p['pp']}"]
    for k in ("vpp", "cp", "ep"):
        if p[k] > 1:
            parts.append(f"{k}={p[k]}")
    parts.append(f"micro_batch={p['micro_batch']} global_batch={p['global_batch']} x {p['seq_len']} tokens")
    parts.append(f"zero={p['zero_stage']} recompute={p['recompute']} schedule={p['schedule']} dtype={p['dtype']}")
    head = f"{p['model_name'] or 'model'} on {p['n_gpus']} GPUs"
    if p.get("gpu"):
        head += f" ({p['gpu']}{', ' + p['cluster'] if p.get('cluster') else ''})"
    pred = ""
    if "step_time_s" in p:
        pred = f"; predicted {p['step_time_s']:.2f} s/step"
        if "tokens_per_s" in p:
            pred += f", {p['tokens_per_s']:,.0f} tokens/s"
        if "mfu" in p:
            pred += f", MFU {100 * p['mfu']:.1f}%"
    return f"paraplan plan: {head}: " + ", ".join(parts) + pred


def stage_layer_counts(num_layers: int, pp: int, vpp: int = 1, mtp_layers: int = 0,
                       first_stage_layers: int | None = None,
                       last_stage_layers: int | None = None) -> tuple[int, ...]:
    """Decoder layers of each of the ``pp * vpp`` model chunks, in layer order (chunk ``c``
    runs on pipeline rank ``c mod pp``); the ``mtp_layers`` MTP modules follow the last chunk.

    With ``first_stage_layers`` / ``last_stage_layers`` (decoder layers on the first / last
    chunk) the other chunks share the rest evenly. Without them: an even split when the chunks
    divide the layers; otherwise the rule behind the step model's slowest stage,
    ``ceil((L + mtp) / chunks)`` units per chunk (an MTP module counts as one unit of the last
    chunk), with the shortfall taken one unit at a time from the ends inwards (last, first,
    second-to-last, ...), so no chunk is longer than the step model's slowest one. For 61
    DeepSeek-V3 layers plus one MTP module on pp 4 that is 15 | 16 | 16 | 14 + MTP.
    """
    chunks = pp * vpp
    if chunks < 1 or num_layers < chunks:
        raise InputError("pp", f"cannot lay {num_layers} layers on {chunks} pipeline chunks",
                         "choose pp * vpp no larger than the layer count")
    if first_stage_layers is not None or last_stage_layers is not None:
        first = first_stage_layers
        last = last_stage_layers
        inner = chunks - (first is not None) - (last is not None)
        rest = num_layers - (first or 0) - (last or 0)
        if inner < 0 or rest < 0 or (inner == 0 and rest) or (inner and rest % inner):
            raise InputError("first_stage_layers", f"{first} / {last} layers on the first / last stage leave "
                             f"{rest} layers for {inner} other stages", "give counts that leave an even split")
        each = rest // inner if inner else 0
        counts = [each] * chunks
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
        if min(counts) < 1:
            raise InputError("first_stage_layers", f"the layout {counts} leaves a stage without layers",
                             "give every stage at least one layer")
        return tuple(counts)
    if num_layers % chunks == 0:
        return (num_layers // chunks,) * chunks
    units = num_layers + mtp_layers
    per = math.ceil(units / chunks)
    counts = [per] * chunks
    counts[-1] -= mtp_layers
    if counts[-1] < 1:
        raise InputError("pp", f"{mtp_layers} MTP module(s) fill the last of {chunks} pipeline chunks "
                         f"({per} units each)", "choose fewer pipeline stages")
    shortfall = sum(counts) - num_layers
    order = [(chunks - 1 - k // 2) if k % 2 == 0 else k // 2 for k in range(chunks)]
    while shortfall:
        for i in order:
            if shortfall and counts[i] > 1:
                counts[i] -= 1
                shortfall -= 1
    return tuple(counts)
