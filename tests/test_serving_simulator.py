"""Serving simulator and planner: invariants, errors that name the field, planner = simulator."""
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hardware_specs.errors import InputError
from planners.serving import pareto_front, plan_serving
from simulator.serving.context import ServingContext
from simulator.serving.deployment import Deployment, WorkerLayout
from simulator.serving.evaluate import evaluate_agg_columns, evaluate_disagg_columns
from simulator.serving.simulate import simulate_serving

CASES = [("llama3.1-70b", "dgx-h100", "vllm", "fp8", 4, 1, 1),
         ("deepseek-r1", "hgx-h200", "sglang", "fp8", 8, 1, 8),
         ("qwen3-235b-a22b", "dgx-b200", "trtllm", "nvfp4", 4, 1, 4),
         ("gpt-oss-120b", "dgx-b200", "trtllm", "nvfp4", 1, 4, 4),
         ("llama3.1-70b", "dgx-b200", "sglang", "fp8", 4, 1, 1)]     # Blackwell's fitted arrival_sync_alone


def _ctx(model, system, backend, fmt):
    return ServingContext.build(model, system, backend, fmt, fmt)


@settings(max_examples=25, deadline=None)
@given(case=st.sampled_from(CASES), isl=st.sampled_from([128, 1024, 8192]), osl=st.sampled_from([64, 1024, 4096]))
def test_a_larger_batch_never_lowers_tokens_per_gpu_while_it_fits(case, isl, osl):
    model, system, backend, fmt, tp, adp, ep = case
    ctx = _ctx(model, system, backend, fmt)
    batch = 2.0 ** np.arange(0, 12)
    moe_tp = tp * adp // ep
    out = evaluate_agg_columns(ctx, {"tp": tp, "pp": 1, "adp": adp, "moe_tp": moe_tp, "moe_ep": ep,
                                     "batch": batch, "isl": isl, "osl": osl})
    fits = out["fits"]
    tps = out["tokens_per_s_per_gpu"][fits]
    assert len(tps) >= 2
    assert np.all(np.diff(tps) >= -1e-9 * tps[:-1])


@pytest.mark.xfail(strict=True, reason=(
    "known: the synchronised wait behind other prompts is not capped at the (b - 1) prompts a closed "
    "loop can hold ahead (simulator/serving/aggregated.py module docstring); with Blackwell's fitted "
    "arrival_sync_alone (SGLang) a second client waits 148 ms behind one 55 ms prompt, so at outputs "
    "of 16 tokens or fewer 2 clients give fewer tokens/s per GPU than 1. Capping it and refitting "
    "(session 48) put Blackwell's prefill GEMM fraction on its bound (0.2049, range 0.2..1) and TTFT "
    "34.2% -> 35.9%: the measured low-concurrency SGLang TTFT holds a cost the model does not name yet"))
def test_short_outputs_on_sglang_blackwell_keep_tokens_per_gpu_from_one_client_to_two():
    ctx = _ctx("llama3.1-70b", "dgx-b200", "sglang", "fp8")
    out = evaluate_agg_columns(ctx, {"tp": 4, "pp": 1, "adp": 1, "moe_tp": 4, "moe_ep": 1,
                                     "batch": np.array([1.0, 2.0]), "isl": 2048, "osl": 4})
    assert out["fits"].all()
    one, two = out["tokens_per_s_per_gpu"]
    assert two >= one


def _disagg_at_rate(ctx, lay, rate, isl, osl, prefill_batch):
    """Disaggregated metrics (1 prefill + 1 decode worker of layout ``lay``, free KV link) at the
    decode concurrency whose request rate equals ``rate``: the concurrency doubles from 1 until
    its rate reaches ``rate`` (at most 2^20), then 50 bisection steps, each keeping the half
    whose ends bracket ``rate``; the metrics are those at the bracket's upper end.

    The step model prices a column of concurrencies row by row (the same numbers as one at a
    time), so the doublings are priced in one call and the bisection six steps a call: every
    midpoint the next six steps could visit (63) is priced at once, then the path is walked.
    The concurrency reached is the one the one-at-a-time search reaches, bit for bit."""
    cols = {**{f"prefill_{k}": v for k, v in lay.items()}, **{f"decode_{k}": v for k, v in lay.items()},
            "prefill_batch": prefill_batch, "prefill_workers": 1, "decode_workers": 1, "isl": isl, "osl": osl}
    gpus = 2 * lay["tp"] * lay["adp"]

    def run(batch):
        out = evaluate_disagg_columns(ctx, {**cols, "decode_batch": batch}, kv_link_free=True)
        return out, out["tokens_per_s_per_gpu"] * gpus / osl

    doublings = 2.0 ** np.arange(21)                 # 1, 2, ..., 2^20 (the first at or past 1e6)
    rates = run(doublings)[1]
    # even one client per rank runs at least as many requests (to rounding: the two loops' rates
    # at one client agree to ~1e-11, and a concurrency of 1 + 1e-4 already waits behind a wave)
    if rates[0] >= rate * (1 - 1e-9):
        return run(1.0)[0]
    reached = np.flatnonzero(rates >= rate)
    i = int(reached[0]) if len(reached) else len(doublings) - 1
    lo, hi = doublings[i - 1], doublings[i]
    steps, depth = 50, 6
    while steps:
        d = min(depth, steps)
        brackets, mids = [(lo, hi)], []          # the midpoints of d steps, level by level
        for _ in range(d):
            level = [(a, 0.5 * (a + b), b) for a, b in brackets]
            mids.extend(m for _, m, _ in level)
            brackets = [x for a, m, b in level for x in ((a, m), (m, b))]
        r = run(np.array(mids))[1]
        node = 0                                 # index of the current midpoint within its level
        for level in range(d):
            k = (2 ** level - 1) + node
            mid = mids[k]
            lo, hi = (mid, hi) if r[k] < rate else (lo, mid)
            node = 2 * node + (1 if r[k] < rate else 0)
        steps -= d
    return run(hi)[0]


@settings(max_examples=25, deadline=None)
@given(case=st.sampled_from(CASES), isl=st.sampled_from([256, 1024, 8192]), osl=st.sampled_from([128, 1024]),
       batch=st.sampled_from([1, 4, 16, 64]))
def test_disaggregated_with_a_free_kv_link_is_never_slower_in_ttft_than_aggregated_at_the_same_load(case, isl, osl, batch):
    """Same load = the same request rate; the prefill worker has the aggregated worker's layout
    and scheduler and packs prompts by the same token budget. The scheduler is held the same:
    TensorRT-LLM's real context servers run without the overlap scheduler
    (``context_overlap_scheduler``), each prefill step exposing the host step the aggregated
    worker hides, which is priced (tests/test_serving_context_overlap.py) and no part of the
    packing this compares."""
    import dataclasses
    model, system, backend, fmt, tp, adp, ep = case
    ctx = _ctx(model, system, backend, fmt)
    stack = dataclasses.replace(ctx.stack, serving=dataclasses.replace(ctx.stack.serving, context_overlap_scheduler=True))
    same_scheduler = ServingContext.build(model, system, stack, fmt, fmt)
    lay = {"tp": tp, "pp": 1, "adp": adp, "moe_tp": tp * adp // ep, "moe_ep": ep}
    agg = evaluate_agg_columns(ctx, {**lay, "batch": batch, "isl": isl, "osl": osl})
    if not agg["fits"][0]:
        return
    rate = agg["tokens_per_s_per_gpu"][0] * tp * adp / osl
    dis = _disagg_at_rate(same_scheduler, lay, rate, isl, osl, max(1, ctx.token_budget // isl))
    assert dis["ttft_s"][0] <= agg["ttft_s"][0] * (1 + 1e-6)


def test_planner_and_simulator_agree_exactly_on_the_winner():
    ctx = _ctx("llama3.1-70b", "dgx-h100", "vllm", "fp8")
    plan = plan_serving(ctx, 8, 1024, 512, 2000.0, 40.0, modes=("agg",))
    b = plan.best
    dep = Deployment(model="llama3.1-70b", system="dgx-h100", backend=ctx.stack.name, isl=1024, osl=512,
                     dense_format="fp8", expert_format="fp8",
                     layout=WorkerLayout(tp=int(b.tp), pp=int(b.pp), adp=int(b.adp), moe_tp=int(b.moe_tp),
                                         moe_ep=int(b.moe_ep), batch=int(b.batch)), workers=int(b.workers))
    rep = simulate_serving(dep, ctx)
    assert rep.metrics["ttft_s"] * 1e3 == b.ttft_ms
    assert rep.metrics["tpot_s"] * 1e3 == b.tpot_ms
    assert rep.metrics["tokens_per_s_per_gpu"] == b.tokens_per_s_per_gpu


def test_plan_front_is_pareto_and_the_best_meets_the_slo():
    ctx = _ctx("deepseek-r1", "hgx-h200", "trtllm", "fp8")
    plan = plan_serving(ctx, 32, 1024, 1024, 1500.0, 40.0)
    assert plan.best.ttft_ms <= 1500 and plan.best.tpot_ms <= 40
    assert plan.best.tokens_per_s_per_gpu == plan.candidates[plan.candidates.meets_slo].tokens_per_s_per_gpu.max()
    for mode, g in plan.front.groupby("mode"):
        x, y = g.tokens_per_s_per_user.to_numpy(), g.tokens_per_s_per_gpu.to_numpy()
        pool = plan.candidates[(plan.candidates["mode"] == mode) & (plan.candidates.ttft_ms <= 1500)]
        for xi, yi in zip(x, y):   # nothing in the pool beats a front point on both axes
            assert not ((pool.tokens_per_s_per_user > xi) & (pool.tokens_per_s_per_gpu > yi)).any()
    assert {"agg", "disagg"} <= set(plan.candidates["mode"])


def test_pareto_front_keeps_exactly_the_undominated_points():
    x = np.array([1, 2, 3, 2, np.nan])
    y = np.array([3, 2, 1, 1, 9])
    assert sorted(pareto_front(x, y).tolist()) == [0, 1, 2]


def test_an_slo_no_layout_meets_names_the_binding_constraint_and_what_would_meet_it():
    ctx = _ctx("llama3.1-70b", "dgx-h100", "vllm", "fp8")
    with pytest.raises(InputError, match=r"--tpot-ms: no layout on 8 GPUs reaches TPOT 1 ms: the fastest is .*allow --tpot-ms"):
        plan_serving(ctx, 8, 1024, 512, 2000.0, 1.0)
    # the layout of the lowest TTFT meets TPOT 100 ms: a looser --tpot-ms would not help, so the
    # error no longer suggests it (nor repeats the same TTFT as "the lowest of any layout")
    with pytest.raises(InputError) as err:
        plan_serving(ctx, 8, 1024, 512, 0.5, 100.0)
    assert re.fullmatch(r"--ttft-ms: no layout on 8 GPUs reaches TTFT 0.5 ms: the lowest is (\d+\.\d) ms \((agg|disagg), "
                        r"batch \d+\) \(allow --ttft-ms (\d+) or more, or use more or faster GPUs\)", str(err.value))
    # the lowest TTFT of any layout misses TPOT 3 ms (candidates by hand: the searches' own
    # lowest-TTFT layouts, one client on the widest worker, now also decode fastest): the message
    # names the lowest TTFT among the layouts meeting it, and the lowest of any
    from planners.serving.search import _no_layout_error
    cands = pd.DataFrame({"mode": ["agg", "agg", "disagg"], "batch": [1, 4, 8],
                          "ttft_ms": [40.0, 75.4, 120.0], "tpot_ms": [3.4, 2.9, 2.5]})
    err = _no_layout_error(cands, 0.01, 3.0, 8)
    assert str(err) == ("--ttft-ms: no layout on 8 GPUs reaches TTFT 0.01 ms: the lowest of any layout is 40.0 ms "
                        "(agg, batch 1, TPOT 3.40 ms), 75.4 ms meeting TPOT 3 ms (allow --ttft-ms 76 or more, or "
                        "--ttft-ms 40 with --tpot-ms 3.4, or use more or faster GPUs)")
    # a looser TPOT is offered only with the value that works: at TTFT 50 ms the layout starting in
    # time decodes at 3.4 ms, so TPOT binds (it had said "reaches TTFT" and offered "a looser
    # --tpot-ms" even where no TPOT would reach the TTFT)
    err = _no_layout_error(cands, 50.0, 3.0, 8)
    assert str(err) == ("--tpot-ms: no layout reaching TTFT 50 ms meets TPOT 3 ms: the fastest of them is 3.40 ms "
                        "(agg, batch 1); meeting TPOT 3 ms the lowest TTFT is 75.4 ms (allow --tpot-ms 3.4 or more, "
                        "or --ttft-ms 76 or more)")
    # the objective between two TTFTs that round alike (31.1 ms against 30.8 and 31.2): TPOT binds,
    # not TTFT (a rounded comparison called it "the lowest is 31 ms" and blamed TTFT)
    close = pd.DataFrame({"mode": ["agg", "agg"], "batch": [1, 1], "ttft_ms": [30.82, 31.2], "tpot_ms": [2.689, 2.6]})
    err = _no_layout_error(close, 31.1, 2.66, 8)
    assert err.field == "--tpot-ms" and str(err).endswith("(allow --tpot-ms 2.7 or more, or --ttft-ms 32 or more)")
    # both objectives out of reach: one message names both and what meets both (at TPOT 3.4 ms
    # the layouts allowed start at 40 ms), not one after the other
    err = _no_layout_error(cands, 10.0, 1.0, 8)
    assert str(err) == ("--tpot-ms: no layout on 8 GPUs reaches TPOT 1 ms: the fastest is 2.5 ms (disagg, batch 8); "
                        "nor TTFT 10 ms (the lowest of any layout is 40 ms) (allow --tpot-ms 2.5 and --ttft-ms 120 "
                        "or more, or use faster GPUs)")
    # only formats smaller than the planned one that fit are suggested (an fp8 plan was told to
    # use fp8; on one GPU no smaller format of DeepSeek-R1 fits either), and the GPUs that would
    with pytest.raises(InputError) as err:
        plan_serving(_ctx("deepseek-r1", "dgx-h100", "vllm", "fp8"), 1, 1024, 1024, 1000.0, 50.0)
    # (10: tp2-pp5, 671 GB of weights at 67 GB a GPU; every pipeline depth is searched)
    assert str(err.value) == ("--gpus: no layout of deepseek-r1 with fp8 weights fits in 1 x h100-sxm-80gb "
                              "(add GPUs (a layout fits on 10))")
    with pytest.raises(InputError) as err:
        plan_serving(_ctx("deepseek-r1", "dgx-h100", "vllm", "int4_wo"), 1, 1024, 1024, 1000.0, 50.0)
    assert str(err.value).endswith("with int4_wo weights fits in 1 x h100-sxm-80gb (add GPUs (a layout fits on 6))")


def test_a_model_that_fits_no_searched_worker_is_not_told_to_add_gpus_that_cannot_help():
    # Llama-3.1-405B in bf16 is 810 GB: 101 GB a GPU at tp 8 (one DGX H100 domain), so it fits only
    # with pipeline stages (tp4-pp3: 68 GB a GPU on 12; tp8-pp2: 51 GB on 16). Without them (--no-pp, or disaggregated workers,
    # which have none) no GPU count fits, yet the error said "add GPUs" on 64 H100
    ctx = _ctx("llama3.1-405b", "dgx-h100", "trtllm", "bf16")
    formats = "a smaller weight format: --precision fp8 / fp8_block / nvfp4 / mxfp4 / int4_wo"
    with pytest.raises(InputError) as err:
        plan_serving(ctx, 64, 1024, 1024, 1000.0, 50.0, allow_pp=False)
    assert err.value.fix == f"aggregated workers with pipeline stages fit (tp4-pp3): plan without --no-pp, or {formats}"
    with pytest.raises(InputError) as err:
        plan_serving(ctx, 16, 1024, 1024, 1000.0, 50.0, modes=("disagg",))
    assert err.value.fix == (f"aggregated workers with pipeline stages fit (tp4-pp3): plan with --mode agg (or both), "
                             f"or {formats}")
    # 8 GPUs: tp4-pp3 needs 12, so more GPUs do help
    with pytest.raises(InputError) as err:
        plan_serving(ctx, 8, 1024, 1024, 1000.0, 50.0)
    assert err.value.fix == f"add GPUs (a layout fits on 12), or {formats}"


def test_simulate_rejects_a_tp_that_does_not_divide_the_heads_and_a_batch_that_does_not_fit():
    base = dict(model="llama3.1-70b", system="dgx-h100", backend="vllm", dense_format="fp8", expert_format="fp8")
    with pytest.raises(InputError, match=r"--tp: 3 does not divide the 64 attention heads .*use one of 1, 2, 4, 8"):
        simulate_serving(Deployment(**base, layout=WorkerLayout(tp=3, moe_tp=3, batch=8)))
    with pytest.raises(InputError, match=r"--batch: 4096 requests per rank need .* so at most \d+ fit \(use --batch \d+"):
        simulate_serving(Deployment(**base, layout=WorkerLayout(tp=4, moe_tp=4, batch=4096), isl=8192, osl=1024))
    with pytest.raises(InputError, match="batch: must be a whole number >= 1"):
        WorkerLayout(tp=1, batch=0)
    with pytest.raises(InputError, match="mode: unknown mode"):
        Deployment(**base, mode="hybrid", layout=WorkerLayout())
    with pytest.raises(InputError, match="isl: must be a whole number >= 1, got nan"):
        Deployment(**base, layout=WorkerLayout(), isl=float("nan"))


def test_a_disaggregated_report_carries_kv_transfer_and_prefill_utilisation():
    dep = Deployment(model="deepseek-r1", system="gb200-nvl72", backend="trtllm", mode="disagg", isl=8192, osl=1024,
                     dense_format="nvfp4", expert_format="nvfp4",
                     prefill=WorkerLayout(tp=1, adp=4, moe_tp=1, moe_ep=4, batch=1, where="prefill"), prefill_workers=2,
                     decode=WorkerLayout(tp=1, adp=16, moe_tp=1, moe_ep=16, batch=32, where="decode"), decode_workers=1)
    rep = simulate_serving(dep)
    assert dep.gpus == 24 and dep.concurrency == 512
    assert 0 < rep.extra["prefill_utilization_fraction"] < 1
    assert rep.extra["kv_transfer_s"] > 0
    assert rep.metrics["latency_s"] == pytest.approx(rep.metrics["ttft_s"] + 1023 * rep.metrics["tpot_s"])


@pytest.mark.parametrize("overlap, steps", [(False, 0.5), (True, 1.5)])
def test_one_client_starts_at_once_and_two_wait_half_a_step_or_with_an_overlap_scheduler_one_and_a_half(overlap, steps):
    # one closed-loop client: the engine is idle when its request arrives (it was waiting for the
    # previous answer), so TTFT = the request's host time + its own prefill, no step to join. With
    # more clients a request arrives mid-step: an overlap scheduler has formed batch n+1 while
    # step n runs, so it joins batch n+2, 1.5 steps instead of 0.5. No host time, so the steps
    # themselves do not depend on the flag.
    from dataclasses import replace

    from hardware_specs.serving_behaviour import ServingBehaviour
    from hardware_specs.stack_spec import StackSpec
    from simulator.serving.aggregated import join_steps
    stack = StackSpec(name="quiet", framework="test",
                      serving=ServingBehaviour(host_step_s=0.0, host_launch_s=0.0, overlap_scheduler=overlap))
    ctx = replace(_ctx("llama3.1-70b", "dgx-h100", "vllm", "fp8"), stack=stack)
    assert join_steps(stack.serving, 2) == steps and join_steps(stack.serving, 1) == 0.0
    cols = dict(tp=4.0, pp=1.0, adp=1.0, moe_tp=4.0, moe_ep=1.0, batch=1.0, isl=2048.0, osl=256.0)
    out = evaluate_agg_columns(ctx, cols)
    own = out["prefill_own_s"][0]
    assert out["queue_wait_s"][0] == 0.0
    host = ctx.efficiency.request_host_s
    assert out["ttft_s"][0] == pytest.approx(host + own, rel=1e-9)
    assert out["ttft_p90_s"][0] == pytest.approx(host + own, rel=1e-9)


def test_the_request_host_time_adds_once_to_every_first_token_and_never_to_a_step():
    # one client (agg: batch 1; disagg: one decode slot): no queue, so TTFT is a sum of its
    # parts and the host time enters it exactly once; the steps do not see it. Hand-derived:
    # 50 ms more host time = 50 ms more TTFT; TPOT is the decode step either way.
    from dataclasses import replace
    # (an FP8 KV cache, stated: auto keeps the 16-bit one of the release quantised at load time)
    base = ServingContext.build("llama3.1-70b", "dgx-h100", "vllm", "fp8", "fp8", "fp8")
    agg = dict(tp=4.0, pp=1.0, adp=1.0, moe_tp=4.0, moe_ep=1.0, batch=1.0, isl=2048.0, osl=256.0)
    side = dict(tp=4.0, pp=1.0, adp=1.0, moe_tp=4.0, moe_ep=1.0, batch=1.0, workers=1.0)
    dis = {**{f"prefill_{k}": v for k, v in side.items()}, **{f"decode_{k}": v for k, v in side.items()},
           "isl": 2048.0, "osl": 256.0}
    outs = {}
    for host in (0.0, 0.05):
        ctx = replace(base, efficiency=replace(base.efficiency, request_host_s=host))
        outs[host] = (evaluate_agg_columns(ctx, agg), evaluate_disagg_columns(ctx, dis))
    (a0, d0), (a1, d1) = outs[0.0], outs[0.05]
    # (to the closed loop's resolution: the disaggregated rate is bisected, and Little's-law
    # residual of the solved rate is ~1e-12 s)
    for lo, hi in ((a0, a1), (d0, d1)):
        assert hi["ttft_s"][0] - lo["ttft_s"][0] == pytest.approx(0.05, abs=1e-9)
        assert hi["ttft_p90_s"][0] - lo["ttft_p90_s"][0] == pytest.approx(0.05, abs=1e-9)
    assert d1["tpot_s"][0] == d0["tpot_s"][0]
    # one client: no other prompt interrupts its decode (its own ran before its first token), so
    # TPOT is the decode step, whatever the host time
    for a in (a0, a1):      # (to the bisection's resolution: the loop's rate is solved numerically)
        assert a["tpot_s"][0] == pytest.approx(a["decode_step_s"][0], rel=1e-9)
    # disaggregated, one client: TTFT = host + one prompt's prefill step + the KV transfer
    assert d1["ttft_s"][0] == pytest.approx(0.05 + d1["prefill_step_s"][0] + d1["kv_transfer_s"][0], rel=1e-12)


def test_a_negative_or_infinite_request_host_time_is_refused_naming_the_field():
    from hardware_specs.serving_efficiency import ServingEfficiency
    for bad in (-0.01, float("inf"), float("nan")):
        with pytest.raises(InputError, match=r"serving_efficiency hopper.request_host_s: must be a finite number"):
            ServingEfficiency(generation="hopper", request_host_s=bad)


def _held(backend, **holds):
    """The catalog ``backend`` context with its serving behaviour's hold settings replaced."""
    from dataclasses import replace
    base = _ctx("llama3.1-70b", "dgx-b200", backend, "fp8")
    return replace(base, stack=replace(base.stack, serving=replace(base.stack.serving, **holds)))


_HOLD_COLS = dict(tp=4.0, pp=1.0, adp=1.0, moe_tp=4.0, moe_ep=1.0, isl=1024.0, osl=1024.0)


def test_the_engine_default_holds_are_exactly_zero_and_leave_ttft_unchanged_to_the_bit():
    # every serving stack states the engines' defaults (poll every step, hold nothing), so the
    # hold term is an exact 0.0 at any load, and (join + 0.0) x t_d is join x t_d to the bit:
    # TTFT and its 90th percentile equal those of the stack rebuilt with the defaults spelled out
    from simulator.serving.aggregated import hold_steps
    clients = np.array([1.0, 2.0, 8.0, 64.0, 1024.0])
    for backend in ("vllm-0.11", "vllm-0.14", "sglang-0.5", "trtllm-1"):
        ctx = _ctx("llama3.1-70b", "dgx-b200", backend, "fp8")
        beh = ctx.behaviour
        assert (beh.recv_interval_steps, beh.context_wait_steps) == (1, 0)
        assert np.all(hold_steps(beh, clients) == 0.0)
        cols = {**_HOLD_COLS, "batch": np.array([1.0, 8.0, 64.0])}
        a = evaluate_agg_columns(ctx, cols)
        b = evaluate_agg_columns(_held(backend, recv_interval_steps=1, context_wait_steps=0), cols)
        assert np.array_equal(a["ttft_s"], b["ttft_s"]) and np.array_equal(a["ttft_p90_s"], b["ttft_p90_s"])


@pytest.mark.parametrize("holds, steps", [(dict(recv_interval_steps=10), 4.5), (dict(recv_interval_steps=31), 15.0),
                                          (dict(context_wait_steps=20), 20.0),
                                          (dict(recv_interval_steps=3, context_wait_steps=60), 61.0)])
def test_a_hold_adds_its_steps_to_the_lead_only_while_other_requests_decode(holds, steps):
    # SGLang --scheduler-recv-interval N: read every N steps, a random arrival waits (N - 1) / 2
    # more; TensorRT-LLM batch_wait_timeout_iters K (a token ratio the batch does not reach): K
    # steps. Hand-derived: N = 10 -> 4.5, N = 31 -> 15, K = 20 -> 20, N = 3 with K = 60 -> 61.
    from simulator.serving.aggregated import hold_steps, join_steps
    backend = "trtllm-1"
    ctx = _held(backend, **holds)
    assert np.array_equal(hold_steps(ctx.behaviour, np.array([1.0, 2.0, 64.0])), [0.0, steps, steps])
    base = evaluate_agg_columns(_ctx("llama3.1-70b", "dgx-b200", backend, "fp8"), {**_HOLD_COLS, "batch": 1.0})
    held = evaluate_agg_columns(ctx, {**_HOLD_COLS, "batch": 1.0})
    # one client: the engine is idle when its request arrives (no decodes to hold it behind), so
    # TTFT is the default's to the bit
    assert held["ttft_s"][0] == base["ttft_s"][0] and held["ttft_p90_s"][0] == base["ttft_p90_s"][0]
    # four clients: the lead grows by steps x the decode step. The closed loop then runs fewer
    # requests per second (less prompt work in the steps, a shorter wait behind other prompts),
    # so TTFT grows by at most that lead (by 99.99 % of it here: the loop moves little)
    base = evaluate_agg_columns(_ctx("llama3.1-70b", "dgx-b200", backend, "fp8"), {**_HOLD_COLS, "batch": 4.0})
    held = evaluate_agg_columns(ctx, {**_HOLD_COLS, "batch": 4.0})
    lead = steps * held["decode_step_s"][0]
    rise = held["ttft_s"][0] - base["ttft_s"][0]
    assert 0.99 * lead < rise <= lead * (1 + 1e-9)
    assert held["ttft_p90_s"][0] - base["ttft_p90_s"][0] == pytest.approx(rise, rel=0.1)
    assert join_steps(ctx.behaviour) == 1.5                 # the hold comes on top of the overlap join


@pytest.mark.parametrize("name, least", [("recv_interval_steps", 1), ("context_wait_steps", 0)])
def test_a_hold_setting_that_is_not_a_whole_number_of_steps_in_range_is_refused_naming_the_field(name, least):
    from hardware_specs.stack_files import stack_from_dict
    from hardware_specs.serving_behaviour import ServingBehaviour
    ServingBehaviour(**{name: least})
    ServingBehaviour(**{name: 30})
    for bad in (least - 1, -1, float("nan"), 1.5, 1e30, 10 ** 30, True, "10"):
        with pytest.raises(InputError, match=rf"serving\.{name}: must be a whole number of steps"):
            ServingBehaviour(**{name: bad})
    # a stack file: a one-line error that names the file's section and the field
    for bad in (least - 1, 1.5, 1e30):
        with pytest.raises(InputError, match=rf"stack x\.serving\.{name}"):
            stack_from_dict({"name": "x", "framework": "f", "serving": {name: bad}})


def test_a_winner_that_leaves_gpus_idle_says_so_with_the_layout_giving_most_in_all():
    # DeepSeek-R1 on 64 H200 at TPOT 30 ms: the best tokens/s/GPU is a disaggregated deployment
    # on 40 GPUs (prefill 8 + decode 32), so 24 earn nothing; the reason lines say how many,
    # what the 40 give in all (tokens/s/GPU x GPUs), and the layout meeting the SLO that gives
    # the 64 the most, which uses more of them (56 since disaggregated decode steps carry only the
    # requests decoding; 64 before)
    ctx = ServingContext.build("deepseek-r1", "hgx-h200", "vllm-0.14", "fp8")
    plan = plan_serving(ctx, 64, 1024, 1024, 1000.0, 30.0)
    b = plan.best
    assert b["mode"] == "disagg" and b["gpus_used"] == 40
    line = next(ln for ln in plan.why if "idle" in ln)
    assert "uses 40 of the 64 GPUs (24 idle)" in line
    assert f"{b['tokens_per_s_per_gpu'] * 40:,.0f} tokens/s in all" in line
    meets = plan.candidates[plan.candidates.meets_slo]
    total = meets.tokens_per_s_per_gpu * meets.gpus_used
    top = meets.loc[total.idxmax()]
    assert total.max() > b["tokens_per_s_per_gpu"] * 40 and top["gpus_used"] > 40
    assert line.endswith(f"{total.max():,.0f} tokens/s on {top['gpus_used']:.0f} GPUs (--rank-by total picks it)")


def test_one_client_per_attention_dp_rank_still_joins_a_step_in_flight():
    # 8 attention-DP ranks with one client each: the ranks step together through the expert
    # all-to-all, so a request arriving at one finds the others' step in flight (1.5 steps with
    # SGLang's overlap scheduler); with one client on the whole engine it starts at once
    ctx = _ctx("deepseek-r1", "dgx-b200", "sglang", "fp8_block")
    host = ctx.efficiency.request_host_s
    for adp, steps in ((8, 1.5), (1, 0.0)):
        cols = dict(tp=8.0 / adp, pp=1.0, adp=float(adp), moe_tp=1.0, moe_ep=8.0, batch=1.0, isl=1024.0, osl=256.0)
        out = evaluate_agg_columns(ctx, cols)
        assert out["queue_wait_s"][0] == 0.0
        assert out["ttft_s"][0] == pytest.approx(steps * out["decode_step_s"][0] + host + out["prefill_own_s"][0],
                                                 rel=1e-9)


@pytest.mark.parametrize("backend, batch", [("sglang", 72), ("vllm", 8), ("trtllm", 4096)])
def test_an_aggregated_ttft_is_the_sum_of_its_parts(backend, batch):
    # the wave wait (most of SGLang's TTFT at 72 clients on B200) was shown nowhere: queue_wait
    # held only the wait for a KV slot
    ctx = _ctx("llama3.1-70b", "dgx-b200", backend, "fp8")
    cols = dict(tp=4.0, pp=1.0, adp=1.0, moe_tp=4.0, moe_ep=1.0, batch=float(batch), isl=1024.0, osl=1024.0)
    out = evaluate_agg_columns(ctx, cols)
    parts = out["join_s"] + out["prefill_own_s"] + out["wait_behind_s"] + out["queue_wait_s"]
    assert float(parts[0]) == pytest.approx(float(out["ttft_s"][0]), rel=1e-9)
    assert min(float(out[k][0]) for k in ("join_s", "prefill_own_s", "wait_behind_s", "queue_wait_s")) >= 0.0
