"""Aggregated serving: one engine does prefill and decode, continuous batching, closed loop.

Load model: ``b`` clients per attention-DP rank, each sending its next request as soon as the
previous one finishes (the concurrency benchmarks of the engines and of AIConfigurator's
measured rows). Requests of equal length that start together finish together and come back
together, so the engine serves them in *waves*: every cycle opens with the b prompts, which the
scheduler packs ``C`` tokens per step (the stack's token budget; whole prompts when it does
not chunk them), and continues with decode steps of all b requests.

Mean field over one wave, per rank (``r = isl / P`` steps per prompt, ``P`` prompt tokens per
prefill step, ``n_p = b * isl / P`` prefill steps):

* request i's first token comes after ceil(i r) prefill steps; averaged over i = 1..b that is
  ``k = r (b + 1) / 2 + (1 - min(r, 1)) / 2`` steps (exact when r is integral or 1/r divides b);
  TTFT = k x t_prefill_step, its 90th percentile ceil(ceil(0.9 b) r) steps.
* a request that got its first token waits out the remaining n_p - k prefill steps. Engines
  that mix prompts and decodes in one step (``ServingBehaviour.mixed_batches``) give it a token
  in each of them, at the mixed step's time; the others (SGLang) pause its decoding. The
  remaining tokens come from decode steps of all b requests at mean context isl + osl / 2.
  TPOT = mean time between a request's tokens.
* a mixed prefill step carries, besides its P prompt tokens, the decodes of the requests
  already past their prompt: b (n_p - 1) / (2 n_p) on average.

Capacity: at most ``n_fit`` requests hold KV cache at once (pool / one request's KV at full
length; the stack's ``max_running_requests``). Beyond it requests queue; by Little's law the
mean time in system is b / X with X = n_fit / cycle, and the wait is added to TTFT.
"""
from __future__ import annotations

import numpy as np

from cost_models.inference_step import step_time
from cost_models.kv_cache import kv_bytes_per_request
from cost_models.serving_memory import activation_bytes_per_gpu, kv_pool_bytes_per_gpu, weight_bytes_per_gpu


def _f(x):
    return np.asarray(x, dtype=float)


def memory_columns(ctx, tp, adp, pp, moe_tp, moe_ep, isl, osl, token_budget=None):
    """Per-GPU memory parts (bytes) and the largest number of requests one attention-DP rank can
    keep (KV at full length isl + osl)."""
    model, beh = ctx.model, ctx.behaviour
    budget = ctx.token_budget if token_budget is None else token_budget
    weights = weight_bytes_per_gpu(model, tp, adp, pp, moe_tp, moe_ep, ctx.dense_format, ctx.expert_format)
    acts = activation_bytes_per_gpu(model, tp, adp, moe_ep, budget)
    pool = kv_pool_bytes_per_gpu(ctx.cluster.gpu.hbm_bytes, weights, acts, beh)
    per_request = kv_bytes_per_request(model, tp, _f(isl) + _f(osl), ctx.kv_bytes, pp)
    n_fit = np.floor(np.maximum(pool, 0.0) / np.maximum(per_request, 1.0))
    if beh.max_running_requests:
        n_fit = np.minimum(n_fit, beh.max_running_requests)
    reserve = beh.runtime_reserved_gib * 2**30
    return {"weights_bytes": _f(weights), "activations_bytes": np.where(beh.reserve_covers_activations, 0.0, acts),
            "reserved_bytes": np.full_like(_f(weights), reserve), "kv_pool_bytes": np.maximum(pool, 0.0),
            "kv_bytes_per_request": _f(per_request), "max_batch_per_rank": n_fit}


def prefill_schedule(isl, batch, budget, chunked: bool):
    """(P prompt tokens per prefill step, number of prefill steps n_p, r = isl / P) for ``batch``
    prompts of ``isl`` tokens under a ``budget``-token step."""
    isl, b = _f(isl), _f(batch)
    if chunked:
        P = np.minimum(_f(budget), b * isl)
    else:
        per_step = np.maximum(np.floor(_f(budget) / isl), 1.0)     # whole prompts, at least one
        P = np.minimum(per_step, b) * isl
    n_p = b * isl / P
    return P, n_p, isl / P


def mean_first_token_steps(r, batch):
    """Mean over requests i = 1..b of ceil(i r): the prefill steps until request i's first token."""
    r, b = _f(r), _f(batch)
    return r * (b + 1.0) / 2.0 + (1.0 - np.minimum(r, 1.0)) / 2.0


def evaluate_agg(ctx, tp, adp, pp, moe_tp, moe_ep, batch, isl, osl):
    """Aggregated-serving metrics per row (seconds, tokens/s, bytes); see the module docstring."""
    beh = ctx.behaviour
    b_req = np.maximum(_f(batch), 1.0)
    isl, osl = _f(isl), _f(osl)
    mem = memory_columns(ctx, tp, adp, pp, moe_tp, moe_ep, isl, osl)
    n_fit = mem["max_batch_per_rank"]
    b = np.maximum(np.minimum(b_req, n_fit), 1.0)

    P, n_p, r = prefill_schedule(isl, b, ctx.token_budget, beh.chunked_prefill)
    mixed_decodes = b * np.maximum(n_p - 1.0, 0.0) / (2.0 * n_p) if beh.mixed_batches else 0.0 * b
    common = (ctx.model, ctx.cluster, ctx.efficiency, beh, ctx.dense_format, ctx.expert_format, ctx.kv_bytes,
              tp, adp, pp, moe_tp, moe_ep)
    pre = step_time(*common, P, isl / 2.0, mixed_decodes, isl)
    dec = step_time(*common, 0.0 * b, 0.0, b, isl + osl / 2.0)
    t_pre, t_dec = pre["step_s"], dec["step_s"]

    k = np.minimum(mean_first_token_steps(r, b), n_p)
    k90 = np.minimum(np.ceil(np.ceil(0.9 * b) * r), np.ceil(n_p))
    ttft = k * t_pre
    ttft_p90 = np.maximum(k90, 1.0) * t_pre
    gen = np.maximum(osl - 1.0, 1.0)
    left = np.minimum(np.maximum(n_p - k, 0.0), gen)      # prefill steps after a request's first token
    if beh.mixed_batches:
        decode_time = left * t_pre + (gen - left) * t_dec
    else:
        decode_time = left * t_pre + gen * t_dec
    tpot = np.where(osl > 1, decode_time / gen, 0.0)
    cycle = ttft + gen * tpot
    # requests beyond what fits queue for a slot (Little's law on the rank)
    queue_wait = np.maximum(b_req / b - 1.0, 0.0) * cycle
    ttft = ttft + queue_wait
    ttft_p90 = ttft_p90 + np.where(b_req > b, np.ceil(b_req / b - 1.0) * cycle, 0.0)
    latency = ttft + gen * tpot
    gpus_per_rank = _f(tp) * _f(pp)
    out = {
        "ttft_s": ttft, "ttft_p90_s": ttft_p90, "tpot_s": tpot, "latency_s": latency,
        "tokens_per_s_per_user": np.where(tpot > 0, 1.0 / np.maximum(tpot, 1e-12), 0.0),
        "tokens_per_s_per_gpu": b_req * osl / latency / gpus_per_rank,
        "prefill_step_s": t_pre, "decode_step_s": t_dec, "prefill_tokens_per_step": P,
        "queue_wait_s": queue_wait, "running_per_rank": b,
    }
    for part in ("attention_s", "mlp_s", "elementwise_s", "lm_head_s", "comm_s", "kernel_fixed_s", "host_s"):
        out["decode_" + part] = dec[part]
    out.update(mem)
    out["fits"] = (mem["kv_pool_bytes"] > 0) & (b_req <= n_fit)
    return out
