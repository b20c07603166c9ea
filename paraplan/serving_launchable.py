"""The best serving layout the engine can launch as priced: what ``paraplan serve plan``
headlines, what each serving sweep point's row is, and what ``serving_api.serve_plan``'s
``best`` is, so the three give one answer to one question.

A search's winner can be a layout its engine has no way to run as priced: vLLM ships no router
for disaggregated prefill and decode workers (vllm/docs/features/disagg_prefill.md; its export's
``mode_refusal``), and each export refuses a placement, engine count or setting the engine lacks
(``paraplan.exports.serving.refusal`` and ``check_launch``). Here the candidates meeting the SLO
are tried in the plan's ranking until one launches; the winner the engine refuses is kept beside
it (``planners.serving.search.RefusedBest``). No click here: a request is a ``LaunchRequest``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hardware_specs.errors import InputError
from planners.serving.search import RefusedBest, ServingPlan, describe, ranking_key, with_best

#: candidates tried, fastest first, for one the backend can launch as priced
RUNNABLE_TRIES = 5000


@dataclass(frozen=True)
class LaunchRequest:
    """What a serving plan's rows are launched with, beside the context: the request's prompt and
    output tokens (``isl`` / ``osl``, tokens), its KV-cache dtype as asked (``auto``: the engine's
    choice, ``ServingContext``) and the plan's ranking (``per-gpu`` or ``total``, as
    ``plan_serving``'s ``rank_by``)."""

    isl: int
    osl: int
    kv_cache_dtype: str = "auto"
    rank_by: str = "per-gpu"


def deployment_of_row(row, ctx, request: LaunchRequest):
    """The ``Deployment`` a ``serve plan`` row describes, and its metrics in seconds (as
    ``ServingReport.metrics``) for the launch header."""
    from simulator.serving.deployment import Deployment, WorkerLayout

    def lay(prefix: str, batch_col: str, where: str) -> WorkerLayout:
        return WorkerLayout(tp=int(row[prefix + "tp"]), pp=int(row.get(prefix + "pp", 1) or 1), adp=int(row[prefix + "adp"]),
                            moe_tp=int(row[prefix + "moe_tp"]), moe_ep=int(row[prefix + "moe_ep"]),
                            batch=int(row[batch_col]), where=where)

    common = dict(model=ctx.model.name, system=ctx.cluster.name, backend=ctx.stack.name, mode=row["mode"],
                  isl=request.isl, osl=request.osl, dense_format=ctx.dense_format, expert_format=ctx.expert_format,
                  kv_cache_dtype=request.kv_cache_dtype, speculative_tokens=ctx.speculative_tokens,
                  draft_acceptance=None if ctx.acceptance_is_prior else ctx.draft_acceptance,
                  draft_model=ctx.draft_head.path if ctx.draft_head is not None else None)
    if row["mode"] == "agg":
        dep = Deployment(**common, layout=lay("", "batch", "layout"), workers=int(row["workers"]))
    else:
        dep = Deployment(**common, prefill=lay("prefill_", "prefill_batch", "prefill"),
                         prefill_workers=int(row["prefill_workers"]), decode=lay("decode_", "batch", "decode"),
                         decode_workers=int(row["decode_workers"]))
    metrics = {"ttft_s": row["ttft_ms"] / 1e3, "tpot_s": row["tpot_ms"] / 1e3,
               "tokens_per_s_per_gpu": row["tokens_per_s_per_gpu"]}
    return dep, metrics


def launch_of_row(row, ctx, request: LaunchRequest):
    """(``ServingLaunch`` or None, why the backend cannot launch ``row`` as priced or None): a
    placement, engine count or setting the engine has no way to run is a refusal too, and so is a
    stack with no launch export (``paraplan.exports.serving.engine_module``)."""
    from paraplan.exports.serving import check_launch, refusal
    from paraplan.exports.serving_common import launch_of
    try:
        dep, metrics = deployment_of_row(row, ctx, request)
        launch = launch_of(ctx, dep, metrics)
        return launch, refusal(launch) or check_launch(launch)
    except InputError as err:
        return None, err


def layout_launchable(ctx, request: LaunchRequest):
    """``launchable(role, layouts)`` for ``planners.serving.search.plan_serving``: whether the
    engine of ``ctx.stack`` can launch each worker layout (rows tp, pp, adp, moe_tp, moe_ep) as an
    ``agg`` worker or as a disaggregated ``prefill`` / ``decode`` one (paired with the same layout
    in the other role), by ``launch_of_row`` on a one-worker row at batch 1: the engine's
    placement, mode and layout rules (``paraplan.exports.serving``), which live above the planner,
    passed down to it as this function."""
    nan = float("nan")

    def launchable(role: str, layouts) -> np.ndarray:
        out = np.zeros(len(layouts), dtype=bool)
        for i, (tp, pp, adp, moe_tp, moe_ep) in enumerate(np.asarray(layouts, dtype=int).tolist()):
            degrees = dict(tp=tp, pp=pp, adp=adp, moe_tp=moe_tp, moe_ep=moe_ep)
            if role == "agg":
                row = {"mode": "agg", **degrees, "batch": 1, "workers": 1}
            else:
                row = {"mode": "disagg", "prefill_batch": 1, "batch": 1, "prefill_workers": 1, "decode_workers": 1,
                       **{f"{side}_{k}": v for side in ("prefill", "decode") for k, v in degrees.items()}}
            row.update(ttft_ms=nan, tpot_ms=nan, tokens_per_s_per_gpu=nan)
            out[i] = launch_of_row(row, ctx, request)[1] is None
        return out

    return launchable


def launchable_best(plan: ServingPlan, ctx, request: LaunchRequest):
    """(row or None, its ``ServingLaunch``, its rank from 0, how many candidates meet the SLO, the
    engine's refusal of the search's winner or None): the best candidate meeting the SLO, in the
    plan's ranking (``request.rank_by``), that the backend can launch as priced
    (``paraplan.exports.serving.refusal`` and ``check_launch``); the row None where none of the
    first ``RUNNABLE_TRIES`` is. Tried in rank order, stopping at the first that launches; the
    rows of a mode the engine refuses outright (``exports.serving.mode_refusal``) are not built."""
    meets = plan.candidates[plan.candidates["meets_slo"].astype(bool)]
    meets = meets.assign(_score=ranking_key(meets, request.rank_by)).sort_values("_score", ascending=False,
                                                                                  kind="stable")
    head = meets.head(RUNNABLE_TRIES)
    # rows of a mode the engine refuses outright (vLLM's disaggregated ones) fail whatever their
    # layout: they are set aside at once, not built one by one (5,000 refused disaggregated rows
    # took 1.6 s); the first row is still tried, for the refusal of the winner it reports
    tried = np.ones(len(head), dtype=bool)
    if len(head):
        from paraplan.exports.serving import mode_refusal
        try:
            refused = [m for m in head["mode"].unique() if mode_refusal(ctx.stack.framework, m) is not None]
        except InputError:              # no export for this stack: every row says so
            refused = []
        tried = ~head["mode"].isin(refused).to_numpy()
        tried[0] = True
    first_err = None
    for rank in np.flatnonzero(tried):
        row = head.iloc[int(rank)]
        launch, err = launch_of_row(row, ctx, request)
        if err is None:
            return row, launch, int(rank), len(meets), first_err
        first_err = first_err or err
    return None, None, None, len(meets), first_err


def no_launch_error(framework: str, meeting: int, first_err: InputError | None) -> InputError:
    """The error ``--emit`` raises where no candidate meeting the SLO (of the first
    ``RUNNABLE_TRIES``, ``launchable_best``) launches: ``meeting`` of them, ``first_err`` the
    engine's refusal of the search's winner (None where none meets the SLO), its fix the way out
    (another backend, ``--mode agg``, whole-host workers). ``serve plan``'s headline says the same."""
    if first_err is None:
        return InputError("--emit", "no layout meets the SLO, so there is nothing to launch",
                          "relax --ttft-ms / --tpot-ms (the table says what binds)")
    return InputError("--emit", f"none of the {min(meeting, RUNNABLE_TRIES)} layouts meeting the SLO runs in "
                      f"{framework} as priced ({first_err.field}: {first_err.message})", first_err.fix)


def engine_plan(plan: ServingPlan, ctx, request: LaunchRequest, ttft_ms: float, tpot_ms: float, gpus: int,
                modes=("agg", "disagg")) -> tuple[ServingPlan, InputError | None]:
    """(``engine_best``'s plan, None where some layout meeting the SLO launches, else the error
    ``--emit`` would raise, ``no_launch_error``): so ``serve plan`` says --emit launches a layout
    only where one launches."""
    row, _, rank, meeting, first_err = launchable_best(plan, ctx, request)
    if row is None:
        err = no_launch_error(ctx.stack.framework, meeting, first_err)
        return replace(plan, launch_refusal=launch_refusal(plan.best, ctx, request, err)), err
    if rank == 0:
        return plan, None
    better = with_best(plan, row.name, ttft_ms, tpot_ms, gpus, request.rank_by, modes, bool(ctx.efficiency.prior))
    return replace(better, engine_refused_best=RefusedBest(row=plan.best, refusal=f"{first_err.field}: "
                                                                                  f"{first_err.message}")), None


def launch_refusal(best, ctx, request: LaunchRequest, unlaunchable: InputError | None = None) -> str | None:
    """The line ``serve plan`` prints under its headline where the engine cannot launch ``best``
    (a plan row) as priced, None where it launches (or ``best`` is None): with ``unlaunchable``
    (``engine_plan``'s error, no layout meeting the SLO launches) that error and its way out, else
    the engine's refusal of ``best`` (``launch_of_row``)."""
    if best is None:
        return None
    why_not = launch_of_row(best, ctx, request)[1]
    if why_not is None:
        return None
    fw = ctx.stack.framework
    if unlaunchable is not None:        # --emit has nothing to launch: say so, and its way out
        return (f"no layout {fw} can launch meets the SLO, so --emit has nothing to launch: "
                f"{unlaunchable.message}; {unlaunchable.fix}")
    return (f"{fw} cannot launch it as priced ({why_not.field}: {why_not.message}); --emit on this "
            f"plan launches the best layout {fw} can run")


def engine_best(plan: ServingPlan, ctx, request: LaunchRequest, ttft_ms: float, tpot_ms: float, gpus: int,
                modes=("agg", "disagg")) -> ServingPlan:
    """``plan`` with the best layout the backend can launch as priced (``launchable_best``) as its
    ``best``, its ``why`` lines said of that layout (``with_best``), and the search's winner the
    engine refuses in ``engine_refused_best`` (its row and the refusal, ``"field: message"``).
    ``plan`` unchanged (``engine_refused_best`` None) where the winner launches, and where no
    layout meeting the SLO launches, the stack's framework having no launch export among them
    (``serve plan`` then headlines the winner and says the engine cannot launch it as priced;
    the plan's ``launch_refusal`` holds that line)."""
    return engine_plan(plan, ctx, request, ttft_ms, tpot_ms, gpus, modes)[0]


def refused_fields(refused: RefusedBest | None) -> dict | None:
    """``ServingPlan.engine_refused_best`` as ``serve plan --json`` gives it (None where there is
    none): its mode, deployment, latencies (ms), tokens/s/GPU, GPUs used, tokens/s in all and the
    engine's refusal."""
    if refused is None:
        return None
    r = refused.row
    return {"mode": r["mode"], "deployment": describe(r), "ttft_ms": float(r["ttft_ms"]), "tpot_ms": float(r["tpot_ms"]),
            "tokens_per_s_per_gpu": float(r["tokens_per_s_per_gpu"]), "gpus_used": int(r["gpus_used"]),
            "tokens_per_s": float(r["tokens_per_s_per_gpu"]) * int(r["gpus_used"]),
            "engine_refuses": refused.refusal}


__all__ = ["LaunchRequest", "RUNNABLE_TRIES", "deployment_of_row", "engine_best", "engine_plan", "launch_of_row",
           "launch_refusal", "launchable_best", "layout_launchable", "no_launch_error", "refused_fields"]
