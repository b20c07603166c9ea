"""serve plan's disaggregated search does not lose the SLO optimum to its decode-only front.

The front per worker size dropped DeepSeek-R1's decode tp8-etp2xep4 at batches 16 and 32
(tp8-etp4xep2 is faster there) and kept only its batch 64, which misses a 30 ms TPOT; the SLO
batch search started only from pairings meeting the objective at a kept batch, so batch 59 of
that layout (121.5 tokens/s/GPU, TPOT 29.9 ms) was never tried and the plan stopped at 117.
"""
import numpy as np
import pytest

from paraplan.serving_api import serving_context
from planners.serving.search import plan_serving
from planners.serving.space import worker_layouts
from simulator.serving.deployment import Deployment, WorkerLayout
from simulator.serving.disaggregated import combine, decode_side, prefill_side
from simulator.serving.simulate import simulate_serving


def test_the_plan_reaches_a_decode_layout_whose_slo_batches_the_front_dropped():
    ctx = serving_context("deepseek-r1", "hgx-h200", "sglang")
    m = simulate_serving(Deployment(
        model="deepseek-r1", system="hgx-h200", backend="sglang", mode="disagg", isl=1024, osl=1024,
        dense_format=ctx.dense_format, expert_format=ctx.expert_format,
        prefill=WorkerLayout(tp=1, adp=8, moe_tp=1, moe_ep=8, batch=8, where="prefill"), prefill_workers=1,
        decode=WorkerLayout(tp=8, moe_tp=2, moe_ep=4, batch=59, where="decode"), decode_workers=1), ctx).metrics
    assert m["tpot_s"] * 1e3 <= 30.0 and m["ttft_s"] * 1e3 <= 1000.0      # it meets the SLO on 16 GPUs
    plan = plan_serving(ctx, 16, 1024, 1024, 1000.0, 30.0, modes=("disagg",))
    assert plan.best["tokens_per_s_per_gpu"] >= m["tokens_per_s_per_gpu"] * (1 - 1e-12)
    assert plan.best["tokens_per_s_per_gpu"] > 118.0         # the front-only search stopped at 117
    # the winner is on the Pareto front the plan reports
    front = plan.front[plan.front["mode"] == "disagg"]
    assert np.isclose(front.tokens_per_s_per_gpu, plan.best["tokens_per_s_per_gpu"], rtol=1e-12).any()


#: rows of one ``combine`` call in ``_brute_force`` (enough that numpy's per-call overhead is small)
_ROWS_PER_CALL = 1 << 16


def _brute_force(ctx, gpus, isl, osl, ttft_ms, tpot_ms):
    """The most tokens/s per GPU and in all meeting the SLO over every disaggregated deployment
    the search builds: every prefill layout and prompts per step, every decode layout at every
    batch its KV cache holds, every worker count that fits (each evaluated as serve simulate
    does, through the same ``decode_side`` / ``prefill_side`` / ``combine``). No batch is left
    out for its whole-batch TPOT: a step carries only the requests decoding (``combine``), so a
    batch whose every client decoding would miss the objective can meet it.

    The deployments go to ``combine`` as flat rows, about ``_ROWS_PER_CALL`` a call, not one call
    per (prefill, decode) pair (1,040 calls of ~1,600 rows for Qwen3-235B on 12 GPUs, most of the
    time numpy's per-call overhead): ``combine`` computes each row from its own values alone
    (``rate_bisection.bisect_rate_rows``; its decoding passes stop per row), so the optima are the
    same numbers either way."""
    lay = worker_layouts(ctx.model, gpus - 1, ctx.cluster.gpus_per_node, False, ctx.behaviour, ctx.expert_format)
    decs = []
    for tp, pp, adp, mtp, mep in lay:
        b = np.arange(1.0, 1025.0)
        d = decode_side(ctx, tp + 0 * b, adp + 0 * b, pp + 0 * b, mtp + 0 * b, mep + 0 * b, b, isl, osl)
        d = {k: np.broadcast_to(v, b.shape) for k, v in d.items() if isinstance(v, np.ndarray) or np.isscalar(v)}
        ok = d["fits"]
        if ok.any():
            decs.append((tp * pp * adp, {k: v[ok] for k, v in d.items()}))
    best = {"per_gpu": 0.0, "total": 0.0}
    blocks, rows = [], 0

    def flush():
        if not blocks:
            return
        cat = lambda side: {k: np.concatenate([b[side][k] for b in blocks]) for k in blocks[0][side]}  # noqa: E731
        p_workers, d_workers = (np.concatenate([b[2][:, j] for b in blocks]) for j in (0, 1))
        o = combine(ctx, cat(0), cat(1), p_workers, d_workers, isl, osl)
        ok = o["fits"] & (o["ttft_s"] * 1e3 <= ttft_ms) & (o["tpot_s"] * 1e3 <= tpot_ms)
        if ok.any():
            best["per_gpu"] = max(best["per_gpu"], o["tokens_per_s_per_gpu"][ok].max())
            best["total"] = max(best["total"], (o["tokens_per_s_per_gpu"] * o["gpus"])[ok].max())
        blocks.clear()

    for tp, pp, adp, mtp, mep in lay:
        gp = tp * pp * adp
        for pb in (1.0, 2.0, 4.0, 8.0):
            pre = prefill_side(ctx, *(np.array([v]) for v in (tp, adp, pp, mtp, mep)), np.array([pb]), isl)
            if not pre["fits"][0]:
                continue
            for gd, d in decs:
                counts = np.array([(a, c) for a in range(1, int(gpus // gp) + 1)
                                   for c in range(1, int((gpus - a * gp) // gd) + 1)], dtype=float).reshape(-1, 2)
                if counts.size == 0:
                    continue
                n = d["tpot_s"].size
                ci, bi = np.repeat(np.arange(len(counts)), n), np.tile(np.arange(n), len(counts))
                blocks.append(({k: v[bi] for k, v in d.items()},
                               {k: np.broadcast_to(v, bi.shape) for k, v in pre.items()}, counts[ci]))
                rows += bi.size
                if rows >= _ROWS_PER_CALL:
                    flush()
                    rows = 0
    flush()
    return best["per_gpu"], best["total"]


def test_the_disaggregated_plan_is_the_brute_force_optimum_ranked_either_way():
    # Qwen3-235B on 12 B200 under 200 / 15 ms: the front-only search planned decode tp1-adp8 at
    # batch 12 (592 tokens/s/GPU); the best of every deployment is decode tp2-adp4 at batch 25
    # (599). Every worker count up to 12 GPUs is on the search's grid, so the two must agree,
    # ranked per GPU and in all; one brute force (most of this file's time) returns both optima,
    # so both rankings are checked in this one test (two tests could run it twice under -n 2)
    ctx = serving_context("qwen3-235b-a22b", "dgx-b200")
    per_gpu, total = _brute_force(ctx, 12, 1024, 1024, 200.0, 15.0)
    best = plan_serving(ctx, 12, 1024, 1024, 200.0, 15.0, modes=("disagg",), rank_by="per-gpu").best
    assert best["tokens_per_s_per_gpu"] == pytest.approx(per_gpu, rel=1e-12)
    assert per_gpu > 595.0
    best = plan_serving(ctx, 12, 1024, 1024, 200.0, 15.0, modes=("disagg",), rank_by="total").best
    assert best["tokens_per_s_per_gpu"] * best["gpus_used"] == pytest.approx(total, rel=1e-12)


def test_a_batch_whose_whole_batch_tpot_misses_can_be_the_optimum():
    # Llama-3.1-8B on 5 H100 (vLLM), isl 4096 / osl 256 under 2000 / 12 ms: the optimum meets TPOT
    # with only part of its batch decoding, though the step of the whole batch is over 12 ms
    # (at the session-58 factors prefill tp1 x2 at 8 prompts a step + decode tp1 x1 at batch 99,
    # 2209.76 tokens/s/GPU; at the factors before that refit batch 128 with about 92 decoding,
    # where the bound that ranked decode batches by their whole-batch TPOT stopped at batch 116:
    # 2221.58 against the optimum's 2221.77)
    ctx = serving_context("llama3.1-8b", "dgx-h100", "vllm")
    per_gpu, _ = _brute_force(ctx, 5, 4096, 256, 2000.0, 12.0)
    best = plan_serving(ctx, 5, 4096, 256, 2000.0, 12.0, modes=("disagg",)).best
    assert best["tokens_per_s_per_gpu"] == pytest.approx(per_gpu, rel=1e-12)
    whole = decode_side(ctx, *(np.array([v]) for v in (best["decode_tp"], best["decode_adp"], best["decode_pp"],
                                                       best["decode_moe_tp"], best["decode_moe_ep"])),
                        np.array([best["batch"]]), 4096, 256)
    assert whole["tpot_s"][0] * 1e3 > 12.0 >= best["tpot_ms"]
