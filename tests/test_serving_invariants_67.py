"""Invariants of the serving simulator and planner that session 67's randomized audit checked over
~1,000 aggregated and ~200,000 vectorised deployments and 400 plans (none violated), kept here on a
small grid so a change that breaks one fails: a finite, positive report for every row that fits;
the 90th-percentile TTFT at or above the mean; a request's latency = TTFT + (osl - 1) x TPOT; a
free KV link never giving a slower disaggregated TTFT; and ``serve plan``'s disaggregated best
repriced exactly by the simulator."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from paraplan.serving_api import serve_plan, serving_context
from simulator.serving.deployment import Deployment, worker_layout
from simulator.serving.evaluate import AGG_COLUMNS, DISAGG_COLUMNS, evaluate_agg_columns, evaluate_disagg_columns
from simulator.serving.simulate import simulate_serving

METRICS = ("ttft_s", "ttft_p90_s", "tpot_s", "latency_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user")
#: a dense model on vLLM, an MoE model with attention DP on SGLang, MoE on TensorRT-LLM: each
#: engine's scheduler kind (chunked, whole prompts, prefill alone) and both kinds of model
CONTEXTS = [("llama3.1-70b", "dgx-h100", "vllm"), ("qwen3-235b-a22b", "dgx-b200", "sglang"),
            ("gpt-oss-120b", "hgx-h200", "trtllm")]
SHAPES = [(128, 2), (1024, 256), (8192, 64)]


def _layouts(moe: bool):
    """(tp, adp, moe_tp, moe_ep) of 1-8 GPUs: attention TP, and for MoE attention DP and expert parallelism."""
    out = [(t, 1, t, 1) for t in (1, 2, 4, 8)]
    if moe:
        out += [(1, a, 1, a) for a in (2, 4, 8)] + [(t, 1, 1, t) for t in (2, 4, 8)]
    return out


def _check_rows(out, isl, osl, rows):
    for k in METRICS:
        v = out[k][rows]
        assert np.all(np.isfinite(v)) and np.all(v > 0), k
    assert np.all(out["ttft_p90_s"][rows] >= out["ttft_s"][rows] * (1 - 1e-12))
    np.testing.assert_allclose(out["latency_s"][rows], out["ttft_s"][rows] + (osl - 1) * out["tpot_s"][rows],
                               rtol=1e-12)


@pytest.mark.parametrize("model, system, backend", CONTEXTS)
def test_every_fitting_aggregated_row_is_finite_its_p90_above_its_mean_and_latency_ttft_plus_tpots(model, system,
                                                                                                    backend):
    ctx = serving_context(model, system, backend)
    lays = _layouts(ctx.model.moe is not None)
    batches = (1, 2, 7, 64, 129, 512)
    checked = 0
    for isl, osl in SHAPES:
        rows = np.array([(t, pp, a, mt, me, b, isl, osl) for (t, a, mt, me), pp, b in
                         itertools.product(lays, (1, 2), batches)], float)
        out = evaluate_agg_columns(ctx, dict(zip(AGG_COLUMNS, rows.T)))
        fit = (out["kv_pool_bytes"] > 0) & (rows[:, 5] <= out["max_batch_per_rank"])
        _check_rows(out, isl, osl, fit)
        checked += int(fit.sum())
    assert checked >= 50        # the grid is not vacuous: most of its rows fit


@pytest.mark.parametrize("model, system, backend", CONTEXTS)
def test_a_free_kv_link_never_gives_a_slower_disaggregated_ttft(model, system, backend):
    """The same pairing with the KV transfer priced at zero (``kv_link_free``, the planner's bound)
    is never slower to first token, and both reports keep the aggregated invariants."""
    ctx = serving_context(model, system, backend)
    lays = _layouts(ctx.model.moe is not None)
    checked = 0
    for isl, osl in SHAPES:
        rows = np.array([(pt, 1, pa, pmt, pme, 1, pw, dt, 1, da, dmt, dme, db, 1, isl, osl)
                         for (pt, pa, pmt, pme), (dt, da, dmt, dme), pw, db in
                         itertools.product(lays, lays, (1, 3), (1, 16, 256))], float)
        cols = dict(zip(DISAGG_COLUMNS, rows.T))
        priced, free = evaluate_disagg_columns(ctx, cols), evaluate_disagg_columns(ctx, cols, kv_link_free=True)
        fit = (priced["fits"] > 0) & (priced["kv_pool_bytes"] > 0) & (free["fits"] > 0)
        _check_rows(priced, isl, osl, fit)
        _check_rows(free, isl, osl, fit)
        assert np.all(free["ttft_s"][fit] <= priced["ttft_s"][fit] * (1 + 1e-12))
        assert np.all(free["kv_transfer_s"][fit] <= priced["kv_transfer_s"][fit])
        checked += int(fit.sum())
    assert checked >= 100


def test_serve_plans_disaggregated_best_is_what_the_simulator_gives_that_deployment():
    """Llama-3.1-8B on 8 H200 with TensorRT-LLM, isl / osl 256, TTFT 3 s and TPOT 15 ms: the best is a
    disaggregated pairing (as the audit found it), and simulating exactly that deployment gives
    its numbers to the last bit."""
    ctx = serving_context("llama3.1-8b", "hgx-h200", "trtllm")
    plan = serve_plan("llama3.1-8b", "hgx-h200", 8, isl=256, osl=256, ttft_ms=3000, tpot_ms=15, backend="trtllm")
    b = plan.best
    assert b["mode"] == "disagg" and b["meets_slo"]

    def lay(side, batch):
        return worker_layout(int(b[f"{side}_tp"]), int(b[f"{side}_pp"]), int(b[f"{side}_adp"]), None, None, int(batch))

    dep = Deployment(model=ctx.model.name, system=ctx.cluster.name, backend=ctx.stack.name, mode="disagg", isl=256,
                     osl=256, dense_format=ctx.dense_format, expert_format=ctx.expert_format,
                     prefill=lay("prefill", b["prefill_batch"]), prefill_workers=int(b["prefill_workers"]),
                     decode=lay("decode", b["batch"]), decode_workers=int(b["decode_workers"]), gpus_given=8)
    m = simulate_serving(dep, ctx).metrics
    for k in ("ttft_s", "ttft_p90_s", "tpot_s"):
        assert 1e3 * m[k] == b[k[:-2] + "_ms"], k
    for k in ("tokens_per_s_per_gpu", "tokens_per_s_per_user"):
        assert m[k] == b[k], k
