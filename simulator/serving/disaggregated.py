"""Disaggregated serving: prefill workers, decode workers, the KV cache moved between them.

Decode workers only decode: every step carries the ``batch`` requests of a rank at mean
context isl + osl / 2, so TPOT is one decode step (DistServe, Zhong et al. OSDI 2024, section
2: no prefill-decode interference).

Prefill workers form a queue: ``c`` = prefill workers x their adp ranks, each serving batches
of up to ``batch`` prompts (``prefill_batch_size``) in one step of the prompt tokens. A request's
TTFT = wait for a prefill rank + its batch's prefill step + moving its KV cache to the decode
worker (over NVLink when both sit in one NVLink domain, else the NICs of the tp GPUs holding
it; ``cost_models.inference_comm.kv_transfer_time_s``).

Closed loop with N = decode batch x decode ranks clients: throughput X = N / (TTFT + (osl - 1)
TPOT) (Little's law), which sets the prefill utilisation rho = X / (c mu), mu = batch / step.
The wait behind other prompts is the larger of the closed loop's partly synchronised wait
(``aggregated.synchronised_wait_s`` with N / c clients per prefill rank, the prefill service
time and the decode step) and the M/D/c queue's by Sakasegawa's approximation (Sakasegawa 1977, Ann. Inst.
Statist. Math. 29, "An approximation formula L_q ~ alpha rho^beta / (1 - rho)"):
W_q = rho^(sqrt(2(c+1)) - 1) / (c (1 - rho)) x (c_a^2 + c_s^2) / 2 / mu with Poisson-like
arrivals (c_a^2 = 1) and deterministic service (c_s^2 = 0); its 90th percentile from the
exponential tail of the M/M/c waiting time scaled the same way. X is found by bisection
(the left side increases with X). When even saturated prefill (rho -> 1) cannot serve N
clients, X = c mu and the excess waits in the queue (Little again).
"""
from __future__ import annotations

import numpy as np

from cost_models.inference_comm import kv_transfer_time_s
from cost_models.inference_step import step_time
from cost_models.kv_cache import kv_bytes_per_token_model, linear_state_bytes_model
from simulator.serving.aggregated import SYNC_P90, memory_columns, synchronised_wait_s

#: bisection iterations for the closed-loop throughput (2^-40 relative precision)
_BISECTION_STEPS = 40


def _f(x):
    return np.asarray(x, dtype=float)


def mdc_wait_s(rho, servers, service_s):
    """(mean, 90th-percentile) queueing wait of an M/D/c queue, seconds (Sakasegawa)."""
    rho = np.clip(_f(rho), 0.0, 0.999999)
    c = np.maximum(_f(servers), 1.0)
    scv = 0.5                                  # (c_a^2 + c_s^2) / 2 with c_a^2 = 1, c_s^2 = 0
    p_wait = np.clip(rho ** (np.sqrt(2.0 * (c + 1.0)) - 1.0), 0.0, 1.0)
    wq = p_wait / (c * (1.0 - rho)) * scv * _f(service_s)
    # P(W > t) = p_wait exp(-t / theta), theta = mean wait of a waiting request
    theta = scv * _f(service_s) / (c * (1.0 - rho))
    w90 = np.where(p_wait > 0.1, theta * np.log(np.maximum(p_wait, 1e-12) / 0.1), 0.0)
    return wq, w90


def evaluate_disagg(ctx, p_tp, p_adp, p_pp, p_moe_tp, p_moe_ep, p_batch, p_workers,
                    d_tp, d_adp, d_pp, d_moe_tp, d_moe_ep, d_batch, d_workers, isl, osl, kv_link_free=False):
    """Disaggregated-serving metrics per row; ``kv_link_free`` makes the KV transfer cost nothing
    (for what-if comparisons)."""
    beh = ctx.behaviour
    isl, osl = _f(isl), _f(osl)
    gen = np.maximum(osl - 1.0, 1.0)
    common = (ctx.model, ctx.cluster, ctx.efficiency, beh, ctx.dense_format, ctx.expert_format, ctx.kv_bytes)

    # decode workers: decode-only steps
    d_mem = memory_columns(ctx, d_tp, d_adp, d_pp, d_moe_tp, d_moe_ep, isl, osl)
    db_req = np.maximum(_f(d_batch), 1.0)
    db = np.maximum(np.minimum(db_req, d_mem["max_batch_per_rank"]), 1.0)
    dec = step_time(*common, d_tp, d_adp, d_pp, d_moe_tp, d_moe_ep, 0.0 * db, 0.0, db, isl + osl / 2.0)
    tpot = dec["step_s"]

    # prefill workers: batches of up to p_batch prompts per step
    p_mem = memory_columns(ctx, p_tp, p_adp, p_pp, p_moe_tp, p_moe_ep, isl, 1.0)
    pb = np.maximum(_f(p_batch), 1.0)
    pre_full = step_time(*common, p_tp, p_adp, p_pp, p_moe_tp, p_moe_ep, pb * isl, isl / 2.0, 0.0, 0.0, pb)["step_s"]
    pre_one = step_time(*common, p_tp, p_adp, p_pp, p_moe_tp, p_moe_ep, isl, isl / 2.0, 0.0, 0.0, 1.0)["step_s"]
    servers = np.maximum(_f(p_workers) * _f(p_adp), 1.0)
    mu = pb / pre_full                                  # requests per second per prefill rank
    service = 1.0 / mu

    kv_bytes = isl * kv_bytes_per_token_model(ctx.model, ctx.kv_bytes) + linear_state_bytes_model(ctx.model)
    same_domain = (_f(p_tp) * _f(p_adp) * _f(p_pp) + _f(d_tp) * _f(d_adp) * _f(d_pp)) <= ctx.cluster.gpus_per_node
    t_kv = kv_transfer_time_s(kv_bytes, p_tp, same_domain, ctx.cluster, ctx.efficiency)
    if kv_link_free:
        t_kv = 0.0 * t_kv

    n_clients = db_req * _f(d_adp) * _f(d_workers)
    capacity = servers * mu
    sync = synchronised_wait_s(n_clients / servers, pre_one, tpot, ctx.efficiency.arrival_sync)

    def ttft_at(x):
        rho = x / capacity
        batch_eff = np.clip(rho * pb, 1.0, pb)
        own = pre_one + (batch_eff - 1.0) / np.maximum(pb - 1.0, 1.0) * (pre_full - pre_one)
        wq, w90 = mdc_wait_s(rho, servers, service)
        return own + np.maximum(wq, sync) + t_kv, own + np.maximum(w90, SYNC_P90 * sync) + t_kv

    lo = np.zeros_like(n_clients)
    hi = np.minimum(capacity * 0.999999, n_clients / (gen * tpot + t_kv))
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        ttft_mid, _ = ttft_at(mid)
        too_fast = mid * (ttft_mid + gen * tpot) > n_clients
        hi = np.where(too_fast, mid, hi)
        lo = np.where(too_fast, lo, mid)
    x = 0.5 * (lo + hi)
    ttft, ttft_p90 = ttft_at(x)
    # saturated prefill: clients left over wait in the queue (Little's law)
    extra = np.maximum(n_clients / np.maximum(x, 1e-12) - (ttft + gen * tpot), 0.0)
    ttft = ttft + extra
    ttft_p90 = ttft_p90 + extra
    latency = ttft + gen * tpot
    gpus = _f(p_tp) * _f(p_pp) * _f(p_adp) * _f(p_workers) + _f(d_tp) * _f(d_pp) * _f(d_adp) * _f(d_workers)
    out = {
        "ttft_s": ttft, "ttft_p90_s": ttft_p90, "tpot_s": tpot, "latency_s": latency,
        "tokens_per_s_per_user": 1.0 / np.maximum(tpot, 1e-12),
        "tokens_per_s_per_gpu": n_clients * osl / latency / gpus,
        "prefill_step_s": pre_full, "decode_step_s": tpot, "kv_transfer_s": t_kv,
        "prefill_utilization": x / capacity, "queue_wait_s": ttft - pre_one - t_kv,
    }
    for part in ("attention_s", "mlp_s", "elementwise_s", "lm_head_s", "comm_s", "kernel_fixed_s", "host_s"):
        out["decode_" + part] = dec[part]
    for key, value in d_mem.items():
        out[key] = value
    out["prefill_weights_bytes"] = p_mem["weights_bytes"]
    out["prefill_max_batch_per_rank"] = p_mem["max_batch_per_rank"]
    out["fits"] = (d_mem["kv_pool_bytes"] > 0) & (db_req <= d_mem["max_batch_per_rank"]) & \
        (p_mem["kv_pool_bytes"] > 0) & (pb <= p_mem["max_batch_per_rank"])
    return out
