"""Serving what-ifs from Python (notebooks): one aggregated deployment as a table row
(``serve_simulate``), the same deployment over the values of one input (``serve_sweep``), and the
best layouts under a latency objective (``serve_plan``: its best is the one ``serve plan``
headlines, the best the engine can launch as priced, ``paraplan.serving_launchable``), with units
in every column name as ``paraplan.api`` gives training rows.

The inputs are those of ``paraplan serve simulate`` / ``serve plan`` (same defaults: the
checkpoint's weight format where it states one, else fp8 on GPUs with FP8 tensor cores, else
bf16), plus what-if hardware: ``gpu`` (another accelerator on the same fabric),
``hbm_gib`` (the GPU's device memory, GiB: the KV-cache pool and so the batch a rank holds),
``hbm_tb_per_s`` (the GPU's memory bandwidth, TB/s), ``scaleup_gbit_per_s`` /
``scaleout_gbit_per_s`` (NVLink / NIC bandwidth per GPU, one direction, Gb/s). A dense model has
no routed experts, so its expert fields are missing, as ``serve simulate --json`` / ``serve plan
--json`` give null: ``expert_format`` None and the expert split (``moe_tp`` / ``moe_ep``, and
``serve_plan``'s ``prefill_`` / ``decode_`` ones) missing, in the type the table holds its
degrees in (``EXPERT_SPLIT_DTYPES``). Disaggregated
deployments are simulated with ``paraplan serve simulate --mode disagg`` or
``simulator.serving.simulate.simulate_serving``; ``serve_plan`` searches both modes.
"""
from __future__ import annotations

import numbers
import re
from dataclasses import replace
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from hardware_specs.errors import InputError, refuse_missing, shown, suggest
from model_specs.catalog import load_model
from model_specs.model_spec import ModelSpec
from paraplan import serving_priors
from paraplan.api import GBIT, GIB, what_if_cluster
from paraplan.sweep_table import sweep_table
from paraplan.serving_inputs import check_dense, check_release
from paraplan.serving_launchable import LaunchRequest, engine_best, layout_launchable
from planners.serving.search import ServingPlan, plan_serving
from simulator.serving.context import ServingContext, default_formats
from simulator.serving.deployment import Deployment, worker_layout
from simulator.serving.simulate import DECODE_PARTS, MEMORY_PARTS, simulate_serving

#: the fixed inputs of a deployment's context (``serving_context``)
CONTEXT_FIELDS = ("backend", "backend_version", "precision", "expert_precision", "kv_cache_dtype",
                  "speculative_tokens", "draft_acceptance", "draft_model", "gpu", "hbm_gib", "hbm_tb_per_s",
                  "scaleup_gbit_per_s", "scaleout_gbit_per_s")
#: the layout and load of an aggregated deployment (``serve_simulate``)
DEPLOYMENT_FIELDS = ("isl", "osl", "tp", "pp", "adp", "moe_tp", "moe_ep", "batch", "workers")
#: what ``serve_sweep`` may sweep
SWEEP_FIELDS = ("model", "system") + CONTEXT_FIELDS + DEPLOYMENT_FIELDS
#: the pandas type of the expert-split columns, whose value a dense model lacks: a deployment
#: row (``serve_simulate`` / ``serve_sweep``) keeps its degrees as integers, so nullable ``Int64``
#: (an MoE model's split stays 4, not 4.0; a dense one's is <NA>; rows of both models concatenate
#: to one ``Int64`` column, as the sweep results hold them); ``serve_plan``'s tables hold every
#: degree as float, so NaN there
EXPERT_SPLIT_DTYPES = {"deployment": "Int64", "plan": "float64"}
#: ``serve_simulate``'s row: the deployment (names, formats, layout, load), then its numbers from
#: the report's metrics (``_LATENCY_METRICS`` in ms, ``_RATE_METRICS``), the decode step and the
#: memory by part, and what the numbers rest on (``serving_priors.label_columns``: the drafts'
#: fields are ``ServingContext.draft_fields``'s); ``serving_row_columns`` lists them in order
_DEPLOYMENT_COLUMNS = ("model", "system", "gpu", "backend", "dense_format", "expert_format", "kv_bytes_per_element",
                       "isl", "osl", "tp", "pp", "adp", "moe_tp", "moe_ep", "batch", "workers", "gpus", "concurrency")
_LATENCY_METRICS = ("ttft_s", "ttft_p90_s", "tpot_s", "latency_s")
_RATE_METRICS = ("tokens_per_s_per_gpu", "tokens_per_s_per_user")
_DRAFT_COLUMNS = ("speculative_tokens", "draft_acceptance", "draft_acceptance_is_prior", "draft_model")
#: the hardware the row was priced on, what-ifs included (the GPU's and fabric's own numbers where
#: none), so rows of sweeps over what-if hardware say what they ran on: device memory (GiB), its
#: bandwidth (TB/s = 10^12 bytes/s) and the NIC / NVLink bandwidth per GPU, one direction (Gb/s),
#: named as ``paraplan.api``'s training rows name them
_HARDWARE_COLUMNS = ("hbm_gib", "hbm_tb_per_s", "scaleout_gbit_per_s", "scaleup_gbit_per_s")


def serving_row_columns(drafting: bool) -> list[str]:
    """The columns of a ``serve_simulate`` row, in order; ``drafting``: whether the deployment
    drafts tokens (its decode step then has a ``decode_draft_ms`` part, ``simulate_serving``)."""
    return [*_DEPLOYMENT_COLUMNS, *(k[:-2] + "_ms" for k in _LATENCY_METRICS), *_RATE_METRICS,
            "max_batch_per_rank", "fits",
            *(k[:-2] + "_ms" for k in DECODE_PARTS if k != "decode_draft_s" or drafting),
            *(k[:-6] + "_gib" for k in MEMORY_PARTS if k.endswith("_bytes")),
            "efficiency_fitted", *_DRAFT_COLUMNS, "validation_ttft_err_pct", "validation_tpot_err_pct",
            *_HARDWARE_COLUMNS]


#: the columns of an expert split: ``moe_tp`` / ``moe_ep`` and their ``prefill_`` / ``decode_``
#: forms (``serve_plan``'s disaggregated rows); a sweep's ``swept_moe_ep`` is not one of them: it
#: keeps the values as given (2.5, 1e30), as ``paraplan.api.sweep``'s ``sweep_value`` does
EXPERT_SPLIT_COLUMNS = tuple(p + c for p in ("", "prefill_", "decode_") for c in ("moe_tp", "moe_ep"))


def _expert_split_columns(columns) -> list[str]:
    """Those of ``columns`` that are ``EXPERT_SPLIT_COLUMNS``, in ``columns``' order."""
    return [c for c in columns if c in EXPERT_SPLIT_COLUMNS]


def _without_expert_split(plan: ServingPlan) -> ServingPlan:
    """``plan`` of a dense model with its expert-split columns NaN, as serve plan's --json gives
    null: the search's moe_tp = tp, moe_ep = 1 are no split a user could set. A copy: the
    search's own tables are untouched."""
    def frame(df):
        df = df.copy()
        for c in _expert_split_columns(df.columns):
            df[c] = pd.Series(np.nan, index=df.index, dtype=EXPERT_SPLIT_DTYPES["plan"])
        return df
    def row(r):
        if r is None:
            return None
        r = r.copy()
        for c in _expert_split_columns(r.index):
            r[c] = np.nan
        return r
    refused = plan.engine_refused_best
    if refused is not None:
        refused = replace(refused, row=row(refused.row))
    return replace(plan, candidates=frame(plan.candidates), front=frame(plan.front), best=row(plan.best),
                   engine_refused_best=refused)


#: context keywords naming something (text, or None for the default) and those that are numbers
#: (or None): a value of another kind is an ``InputError`` naming the keyword ('3' TB/s was read
#: as 3, a backend_version of 5 passed unchecked)
_TEXT_FIELDS = ("backend_version", "precision", "expert_precision")
_NUMBER_FIELDS = ("hbm_gib", "hbm_tb_per_s", "scaleup_gbit_per_s", "scaleout_gbit_per_s", "draft_acceptance")


def _check_kinds(values: Mapping[str, Any]) -> None:
    """``InputError`` on the first of ``values`` (keyword: value) of the wrong kind: text where
    ``_TEXT_FIELDS`` says so, a real number (not a bool, not text) for ``_NUMBER_FIELDS``."""
    for name, value in values.items():
        if value is None:
            continue
        if name in _TEXT_FIELDS and not isinstance(value, str):
            raise InputError(name, f"must be text, got {shown(value)}", "e.g. '0.11.0'" if name == "backend_version"
                             else "e.g. 'fp8'")
        if name in _NUMBER_FIELDS and (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real)):
            raise InputError(name, f"must be a number, got {shown(value)}", "give it as a number, not text or a bool")


#: what the serving layers (``ServingContext.build``, ``simulate_serving``, ``what_if_cluster``)
#: name where the keyword a caller gave is another: the CLI's flags are read back as keywords below
_FIELD_KEYWORDS = {"cluster": "system", "dense_format": "precision", "expert_format": "expert_precision",
                   "mode": "modes"}
#: a CLI flag (``--tpot-ms``), or an aggregated worker's degree as ``simulator.serving.deployment.
#: WorkerLayout`` names it (``layout.batch``: the keyword is ``batch``)
_FLAG = re.compile(r"--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)|\blayout\.([a-z][a-z0-9_]*)\b")
_LAYOUT = "layout."


def _keyword_error(exc: InputError, given: Iterable[str]) -> InputError:
    """``exc`` as the API's caller should read it: headed by the keyword they passed (``batch``,
    ``system``), not the CLI flag (``--batch``), layout path (``layout.batch``) or inner name
    (``cluster``) the shared layers raise with (the CLI keeps its own wording), and the CLI flags
    in its text (``use --batch 455 or less``) as keywords; ``given``: the keywords of the call."""
    known = set(given) | set(SWEEP_FIELDS) | set(DEPLOYMENT_FIELDS)

    def keyword(name: str) -> str:
        bare = (name[2:].replace("-", "_") if name.startswith("--")
                else name[len(_LAYOUT):] if name.startswith(_LAYOUT) else name)
        bare = _FIELD_KEYWORDS.get(bare, bare) if _FIELD_KEYWORDS.get(bare) in known else bare
        return bare if bare in known else name

    def text(t: str | None) -> str | None:
        return None if t is None else _FLAG.sub(lambda m: keyword(m.group(0)), t)

    field = keyword(exc.field)
    message, fix = text(exc.message), text(exc.fix)
    if (field, message, fix) == (exc.field, exc.message, exc.fix):
        return exc
    return InputError(field, message, fix)


def _refuse_unknown(context: Mapping[str, Any], what: str, known: tuple[str, ...]) -> None:
    """``InputError`` naming the first keyword of ``context`` not in ``CONTEXT_FIELDS``, with the
    nearest of ``known`` (difflib, ``suggest``), or all of ``known`` where none is near."""
    unknown = sorted(set(context) - set(CONTEXT_FIELDS))
    if unknown:
        hint = suggest(unknown[0], known)
        if not hint.startswith("did you mean"):     # no close name: all of them, not the first 12 and '...'
            hint = "known: " + ", ".join(sorted(known))
        raise InputError(unknown[0], f"not an input of {what}", hint)


def serving_context(model: str | ModelSpec, system: str, backend: str = "vllm", *,
                    backend_version: str | None = None, precision: str | None = None,
                    expert_precision: str | None = None, kv_cache_dtype: str = "auto",
                    speculative_tokens: int | None = None, draft_acceptance: float | None = None,
                    draft_model: str | None = None,
                    gpu: str | None = None, hbm_gib: float | None = None, hbm_tb_per_s: float | None = None,
                    scaleup_gbit_per_s: float | None = None,
                    scaleout_gbit_per_s: float | None = None) -> ServingContext:
    """The ``ServingContext`` ``serve simulate`` would build, on the what-if hardware, refusing
    what it refuses (``paraplan.serving_inputs``: a release beside a stack name, expert options
    on a dense model), each error headed by the keyword given (``system``, ``speculative_tokens``)."""
    refuse_missing(locals())
    try:
        return _serving_context(model, system, backend, backend_version=backend_version, precision=precision,
                                expert_precision=expert_precision, kv_cache_dtype=kv_cache_dtype,
                                speculative_tokens=speculative_tokens, draft_acceptance=draft_acceptance,
                                draft_model=draft_model, gpu=gpu, hbm_gib=hbm_gib, hbm_tb_per_s=hbm_tb_per_s,
                                scaleup_gbit_per_s=scaleup_gbit_per_s, scaleout_gbit_per_s=scaleout_gbit_per_s)
    except InputError as exc:
        raise _keyword_error(exc, CONTEXT_FIELDS + ("model", "system")) from None


def _serving_context(model, system, backend, *, backend_version, precision, expert_precision, kv_cache_dtype,
                     speculative_tokens, draft_acceptance, draft_model, gpu, hbm_gib, hbm_tb_per_s,
                     scaleup_gbit_per_s, scaleout_gbit_per_s) -> ServingContext:
    _check_kinds({"backend_version": backend_version, "precision": precision, "expert_precision": expert_precision,
                  "hbm_gib": hbm_gib, "hbm_tb_per_s": hbm_tb_per_s, "scaleup_gbit_per_s": scaleup_gbit_per_s,
                  "scaleout_gbit_per_s": scaleout_gbit_per_s, "draft_acceptance": draft_acceptance})
    for name, value in (("backend", backend), ("system", system)):
        if not isinstance(value, str):      # None / 5 / ["vllm"] reached pathlib as a TypeError
            raise InputError(name, f"must be a name (text), got {shown(value)}",
                             "e.g. 'vllm'" if name == "backend" else "e.g. 'dgx-h100'")
    check_release(backend, backend_version)
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    # the memory what-ifs (capacity, bandwidth) are the training API's (paraplan.api.what_if_gpu):
    # one set of bounds and one error, naming the unit
    cluster = what_if_cluster(system, gpu, scaleout_gbit_per_s, scaleup_gbit_per_s, hbm_gib=hbm_gib,
                              hbm_tb_per_s=hbm_tb_per_s)
    dense, expert = default_formats(spec, cluster.gpu, precision, expert_precision)     # as serve simulate
    ctx = ServingContext.build(spec, cluster, backend, dense, expert, kv_cache_dtype, backend_version=backend_version,
                               speculative_tokens=speculative_tokens, draft_acceptance=draft_acceptance,
                               draft_head=draft_model)
    check_dense(ctx.model, expert_precision)
    return ctx


def serve_simulate(model: str | ModelSpec, system: str, *, isl: int = 1024, osl: int = 1024, tp: int = 1,
                   pp: int = 1, adp: int = 1, moe_tp: int | None = None, moe_ep: int | None = None,
                   batch: int = 32, workers: int = 1, gpus: int | None = None, **context: Any) -> pd.DataFrame:
    """One aggregated deployment (``serve simulate``'s numbers) as a one-row table: its inputs,
    ``ttft_ms``, ``ttft_p90_ms``, ``tpot_ms``, ``latency_ms``, ``tokens_per_s_per_gpu``,
    ``tokens_per_s_per_user``, ``max_batch_per_rank``, ``fits``, the decode step by part
    (``decode_<part>_ms``), memory per GPU by part (``<part>_gib``), whether the numbers rest on
    fitted factors (``efficiency_fitted``) and how far the fitted model was off on measured runs
    of this engine (``validation_ttft_err_pct`` / ``validation_tpot_err_pct``, None where none)
    and the hardware priced, what-ifs included (``hbm_gib``, ``hbm_tb_per_s``,
    ``scaleout_gbit_per_s``, ``scaleup_gbit_per_s``).
    ``gpus``: the GPUs given (``serve simulate --gpus``; default the workers' own), in whose
    NVLink domains the workers must sit whole (``cost_models.worker_placement``).
    ``context``: the ``serving_context`` keywords (``CONTEXT_FIELDS``)."""
    _refuse_unknown(context, "a serving deployment", SWEEP_FIELDS)
    # pandas' missing value named here, where every keyword arrives (pd.NA as osl or kv_cache_dtype
    # failed as "TypeError: boolean value of NA is ambiguous")
    refuse_missing({**locals(), **context})
    try:
        return _serve_simulate(model, system, isl=isl, osl=osl, tp=tp, pp=pp, adp=adp, moe_tp=moe_tp, moe_ep=moe_ep,
                               batch=batch, workers=workers, gpus_given=gpus, **context)
    except InputError as exc:       # the shared layers speak the CLI's flags (--batch, --gpus)
        raise _keyword_error(exc, SWEEP_FIELDS + ("gpus",)) from None


def _serve_simulate(model, system, *, isl, osl, tp, pp, adp, moe_tp, moe_ep, batch, workers, gpus_given=None,
                    **context) -> pd.DataFrame:
    ctx = serving_context(model, system, **context)
    check_dense(ctx.model, expert_split={"moe_tp": moe_tp, "moe_ep": moe_ep})
    dep = Deployment(model=ctx.model.name, system=ctx.cluster.name, backend=ctx.stack.name, mode="agg", isl=isl,
                     osl=osl, dense_format=ctx.dense_format, expert_format=ctx.expert_format,
                     kv_cache_dtype=context.get("kv_cache_dtype", "auto"), speculative_tokens=ctx.speculative_tokens,
                     draft_acceptance=None if ctx.acceptance_is_prior else ctx.draft_acceptance,
                     draft_model=ctx.draft_head.path if ctx.draft_head is not None else None,
                     layout=worker_layout(tp, pp, adp, moe_tp, moe_ep, batch), workers=workers,
                     gpus_given=gpus_given)
    report = simulate_serving(dep, ctx)
    m = report.metrics
    moe = ctx.model.moe is not None     # a dense model's expert fields are missing (serve simulate --json: null)
    row: dict[str, Any] = {
        "model": ctx.model.name, "system": ctx.cluster.name, "gpu": ctx.cluster.gpu.name, "backend": ctx.stack.name,
        "dense_format": ctx.dense_format, "expert_format": ctx.expert_format if moe else None,
        "kv_bytes_per_element": ctx.kv_bytes,
        "isl": dep.isl, "osl": dep.osl, "tp": dep.layout.tp, "pp": dep.layout.pp, "adp": dep.layout.adp,
        "moe_tp": dep.layout.moe_tp if moe else None, "moe_ep": dep.layout.moe_ep if moe else None,
        "batch": dep.layout.batch, "workers": dep.workers,
        "gpus": dep.gpus, "concurrency": dep.concurrency,
        **{k[:-2] + "_ms": 1e3 * float(m[k]) for k in _LATENCY_METRICS},
        **{k: float(m[k]) for k in _RATE_METRICS},
        "max_batch_per_rank": int(m["max_batch_per_rank"]), "fits": bool(m["fits"]),
        **{k[:-2] + "_ms": 1e3 * float(v) for k, v in report.decode_breakdown_s.items()},
        **{k[:-6] + "_gib": float(v) / 2**30 for k, v in report.memory_bytes.items() if k.endswith("_bytes")},
        # what the numbers rest on (the efficiency prior; the drafts and their acceptance), as serve simulate --json
        **serving_priors.label_columns(ctx, drafting=True),
    }
    rec = ctx.validation_error("agg")
    row["validation_ttft_err_pct"] = rec["ttft_mean_abs_err_pct"] if rec else None
    row["validation_tpot_err_pct"] = rec["tpot_mean_abs_err_pct"] if rec else None
    gpu, cluster = ctx.cluster.gpu, ctx.cluster
    row.update(zip(_HARDWARE_COLUMNS, (gpu.hbm_bytes / GIB, gpu.hbm_bw_bytes_per_s / 1e12,
                                       cluster.scaleout.bw_bytes_per_s / GBIT, cluster.scaleup.bw_bytes_per_s / GBIT)))
    return _typed_expert_split(pd.DataFrame([row]))


def _typed_expert_split(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its expert-split columns as ``EXPERT_SPLIT_DTYPES["deployment"]``."""
    for c in _expert_split_columns(df.columns):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(EXPERT_SPLIT_DTYPES["deployment"])
    return df


def serve_sweep(base: Mapping[str, Any], field: str, values: Iterable[Any]) -> pd.DataFrame:
    """``serve_simulate(**base)`` at each value of ``field`` (``SWEEP_FIELDS``: the model, system,
    engine, formats, what-if hardware, layout or load), one row each in order, with the swept
    field's value; a value that cannot run keeps its row, its numbers empty and the one-line
    reason in ``error`` (as ``paraplan.api.sweep``: every result column on every row, NaN/None
    where a value failed, an integer or bool column with such a hole as nullable ``Int64`` /
    ``boolean``, ``paraplan.sweep_table``). Each value is its own deployment and context
    (tens of values, not a search: ``serve_plan`` searches layouts vectorised)."""
    refuse_missing({"field": field})        # pd.NA failed as a TypeError in the field check
    if not isinstance(base, Mapping) or "model" not in base or "system" not in base:
        raise InputError("base", "must be a mapping with at least model and system",
                         "e.g. dict(model='llama3.1-70b', system='dgx-h100', tp=4)")
    if field not in SWEEP_FIELDS:
        raise InputError("field", f"cannot sweep {field!r}", suggest(str(field), SWEEP_FIELDS))
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InputError("values", f"expected a list of values, got {shown(values)}", "e.g. [1, 2, 4]")
    values = list(values)
    if not values:
        raise InputError("values", f"empty sweep over {field}", "give at least one value")
    rows, failed = [], []
    for value in values:
        args = {**base, field: value}
        try:
            row = serve_simulate(args.pop("model"), args.pop("system"), **args).iloc[0].to_dict()
            row["error"] = ""
        except InputError as exc:
            row = {"error": str(exc)}
        failed.append(bool(row["error"]))
        row[f"swept_{field}"] = value
        rows.append(row)
    # a failed value's row has every result column, empty (a sweep whose values all failed had
    # none: df.tpot_ms was a KeyError), and one failure no longer turns tp 4 into 4.0
    drafting = any(bool({**base, field: v}.get("speculative_tokens")) for v in values)
    template = [*serving_row_columns(drafting), "error", f"swept_{field}"] if all(failed) else []
    return _typed_expert_split(sweep_table(rows, failed, template))


#: the keywords of ``serve_plan``
_PLAN_KEYWORDS = ("model", "system", "gpus", "isl", "osl", "ttft_ms", "tpot_ms", "modes", "max_batch", "allow_pp",
                  "rank_by") + CONTEXT_FIELDS


def serve_plan(model: str | ModelSpec, system: str, gpus: int, *, isl: int = 1024, osl: int = 1024,
               ttft_ms: float = 1000.0, tpot_ms: float = 50.0, modes=("agg", "disagg"), max_batch: int = 1024,
               allow_pp: bool = True, rank_by: str = "per-gpu", **context: Any) -> ServingPlan:
    """``serve plan``'s search on the what-if hardware, and its answer: the ``ServingPlan``
    (``best``, ``candidates`` and ``front`` tables in ms and tokens/s, ``why``).

    ``best`` is what ``serve plan`` headlines and its ``--json`` ``best`` gives: the best layout
    meeting the SLO that the engine can launch as priced (``paraplan.serving_launchable``: vLLM
    ships no router for disaggregated prefill and decode workers; each export refuses a placement
    or setting its engine lacks), ``why`` said of it. Where the search's winner is a layout the
    engine refuses, ``engine_refused_best`` (``planners.serving.search.RefusedBest``) holds that
    winner's row and the engine's refusal as ``--json``'s ``engine_refused_best.engine_refuses``
    words it (``"--mode: vLLM ships no router ..."``); else it is None. Where no layout meeting
    the SLO launches, and on a stack with no launch export (a stack file whose framework is not
    vllm, sglang or trtllm), ``best`` is the search's winner and ``engine_refused_best`` None, as
    ``serve plan`` headlines the winner there (saying the engine cannot launch it as priced);
    ``launch_refusal`` then says why the engine cannot launch ``best`` as priced, the line ``serve
    plan`` prints under its headline (and ``--json``'s ``launch_refusal``), also the last line of
    ``why`` before the notes; None where ``best`` launches.
    ``serve plan --emit`` / ``serve simulate --emit`` say whether a layout launches.
    ``candidates`` and ``front`` are the search's, whatever launches. On a dense model the
    expert-split columns are NaN (``EXPERT_SPLIT_DTYPES``), as serve plan's --json gives null."""
    _refuse_unknown(context, "a serving plan", _PLAN_KEYWORDS)     # its own keywords too: tpot -> tpot_ms
    refuse_missing({**locals(), **context})  # pd.NA named, as serve_simulate does
    ctx = serving_context(model, system, **context)
    # "agg" is one mode, not three letters; "both" as on the command line
    if isinstance(modes, str):
        modes = ("agg", "disagg") if modes == "both" else (modes,)
    elif isinstance(modes, (list, tuple)):
        modes = tuple(modes)
    else:
        raise InputError("modes", f"expected agg, disagg, both or a list of them, got {shown(modes)}", "e.g. modes='both'")
    try:        # the planner speaks the CLI's flags (--tpot-ms, --max-batch, allow --tpot-ms 2.9)
        # as serve plan: "add GPUs" names a count whose layouts the engine launches
        request = LaunchRequest(isl=isl, osl=osl, kv_cache_dtype=context.get("kv_cache_dtype", "auto"), rank_by=rank_by)
        plan = plan_serving(ctx, gpus, isl, osl, ttft_ms, tpot_ms, modes=modes, max_batch=max_batch,
                            allow_pp=allow_pp, rank_by=rank_by, launchable=layout_launchable(ctx, request))
    except InputError as exc:
        raise _keyword_error(exc, _PLAN_KEYWORDS) from None
    # serve plan's headline: the best layout the engine can launch, the refused winner beside it
    # (before the dense model's expert split is blanked: a launch is built from the row's degrees)
    plan = engine_best(plan, ctx, request, ttft_ms, tpot_ms, gpus, modes)
    if plan.launch_refusal is not None:     # no layout meeting the SLO launches: say so, as serve plan
        plan = replace(plan, why=[*plan.why, f"launch: {plan.launch_refusal}"])
    plan = plan if ctx.model.moe is not None else _without_expert_split(plan)
    # the columns and notes serve plan shows: efficiency_fitted, the drafts, the prior notes in why
    return serving_priors.labelled_plan(plan, ctx)
