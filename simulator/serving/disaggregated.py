"""Disaggregated serving: prefill workers, decode workers, the KV cache moved between them.

Decode workers only decode: every step carries the ``batch`` requests of a rank at mean
context isl + osl / 2, so TPOT is one decode step (DistServe, Zhong et al. OSDI 2024, section
2: no prefill-decode interference).

Prefill workers form a queue: ``c`` = prefill workers x their adp ranks, each serving batches
of up to ``batch`` prompts (``prefill_batch_size``) in one step of the prompt tokens. A request's
TTFT = its host time (``ServingEfficiency.request_host_s``) + wait for a prefill rank (behind the other prompts, each taking its share 1 / mu of a
full prefill step) + its own prefill step + moving its KV cache to the decode
worker (over NVLink when both sit in one NVLink domain, else the NICs: at the rate of the busiest
link, whose GPU sends or receives the most, ``cost_models.inference_comm.kv_busiest_link_bytes``:
with distinct KV shards on every GPU the side with fewer GPUs; a tp above the KV heads, or MLA's
latent on every rank, makes each receiver need a replicated piece; ``kv_transfer_time_s``; the share
inside one domain from the whole deployment's size, ``kv_same_domain_share``).

Closed loop with N = decode batch x decode ranks clients: throughput X = N / (TTFT + (osl - 1)
TPOT) (Little's law), which sets the prefill utilisation rho = X / (c mu), mu = batch / step.
The wait behind other prompts is the larger of the closed loop's partly synchronised wait
(``aggregated.synchronised_wait_s`` with N / c clients per prefill rank, the per-prompt share
of a full prefill step and the decode step) and the M/D/c queue's by Sakasegawa's approximation (Sakasegawa 1977, Ann. Inst.
Statist. Math. 29, "An approximation formula L_q ~ alpha rho^beta / (1 - rho)"):
W_q = rho^(sqrt(2(c+1)) - 1) / (c (1 - rho)) x (c_a^2 + c_s^2) / 2 / mu with Poisson-like
arrivals (c_a^2 = 1) and deterministic service (c_s^2 = 0); its 90th percentile from the
exponential tail of the M/M/c waiting time scaled the same way; the queue term at most the
other N - 1 clients' service spread over the c ranks (a closed loop cannot queue more; the
fitted synchronised term is not held to it, as in ``aggregated``). X is found by bisection
(the left side increases with X). When even saturated prefill (rho -> 1) cannot serve N
clients, X = c mu and the excess waits in the queue (Little again).
"""
from __future__ import annotations

import numpy as np

from cost_models.inference_comm import kv_busiest_link_bytes, kv_peers, kv_transfer_time_s
from cost_models.inference_step import STEP_PARTS, step_time
from cost_models.kv_cache import kv_bytes_per_token_model, kv_shards, linear_state_bytes_model
from simulator.serving.aggregated import SYNC_P90, decoding_requests, memory_columns, synchronised_wait_s
from simulator.serving.rate_bisection import BISECTION_STEPS, bisect_rate_rows


def _f(x):
    return np.asarray(x, dtype=float)


def mdc_wait_s(rho, servers, service_s):
    """(mean, 90th-percentile) queueing wait of an M/D/c queue, seconds (Sakasegawa)."""
    wq, p_wait, service_s, idle = _mdc_mean_wait(rho, servers, service_s)
    # P(W > t) = p_wait exp(-t / theta), theta = mean wait of a waiting request
    theta = _MDC_SCV * service_s / idle
    w90 = np.where(p_wait > 0.1, theta * np.log(np.maximum(p_wait, 1e-12) / 0.1), 0.0)
    return wq, w90


def mdc_mean_wait_s(rho, servers, service_s):
    """``mdc_wait_s``'s mean alone (the same numbers), seconds: for a bisection on it."""
    return _mdc_mean_wait(rho, servers, service_s)[0]


#: (c_a^2 + c_s^2) / 2 with c_a^2 = 1 (Poisson arrivals), c_s^2 = 0 (deterministic service)
_MDC_SCV = 0.5


def _mdc_mean_wait(rho, servers, service_s):
    """(mean wait, probability of waiting, service time, c (1 - rho)) of an M/D/c queue."""
    queue = _mdc_queue(servers, service_s)
    wq, p_wait, idle = _mdc_mean_wait_at(rho, *queue)
    return wq, p_wait, queue[2], idle


def _mdc_queue(servers, service_s):
    """(c, Sakasegawa's exponent sqrt(2 (c + 1)) - 1, service time) of an M/D/c queue: what its
    wait at any utilisation shares (a bisection over the utilisation computes them once)."""
    c = np.maximum(_f(servers), 1.0)
    return c, np.sqrt(2.0 * (c + 1.0)) - 1.0, _f(service_s)


def _mdc_mean_wait_at(rho, c, exponent, service_s):
    """(mean wait, probability of waiting, c (1 - rho)) of the M/D/c queue ``_mdc_queue`` gave."""
    # clipped to [0, 0.999999] and [0, 1] (np.clip's bounds, without its overhead)
    rho = np.minimum(np.maximum(_f(rho), 0.0), 0.999999)
    p_wait = np.minimum(np.maximum(rho ** exponent, 0.0), 1.0)
    idle = c * (1.0 - rho)
    wq = p_wait / idle * _MDC_SCV * service_s
    return wq, p_wait, idle


def decode_step(ctx, tp, adp, pp, moe_tp, moe_ep, running, isl, osl) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One decode-only step of ``running`` requests a rank at mean context isl + osl / 2
    (``step_time``'s parts, seconds) and the tokens it yields a request on average over its decode
    of osl - 1 tokens (1 unless speculating; ``ServingContext.tokens_per_step_within``)."""
    isl, osl = _f(isl), _f(osl)
    per_step = ctx.tokens_per_step_within(np.maximum(osl - 1.0, 1.0))
    dec = step_time(ctx.model, ctx.cluster, ctx.efficiency, ctx.behaviour, ctx.dense_format, ctx.expert_format,
                    ctx.kv_bytes, tp, adp, pp, moe_tp, moe_ep, 0.0 * running, 0.0, running, isl + osl / 2.0,
                    draft_tokens=ctx.speculative_tokens, kept_tokens=per_step, draft_head=ctx.draft_head)
    return dec, per_step


def decode_side(ctx, tp, adp, pp, moe_tp, moe_ep, batch, isl, osl) -> dict[str, np.ndarray]:
    """Per decode-worker layout: TPOT of one decode-only step of the whole batch (every client
    decoding: the most the closed loop can put in a step, ``combine`` refines it), its parts,
    memory, fit, and the layout (``tp`` ... ``moe_ep``, ``batch``: the clients a rank holds, at
    most what fits) that ``combine`` prices its steps with."""
    isl, osl = _f(isl), _f(osl)
    mem = memory_columns(ctx, tp, adp, pp, moe_tp, moe_ep, isl, osl)
    b_req = np.maximum(_f(batch), 1.0)
    b = np.maximum(np.minimum(b_req, mem["max_batch_per_rank"]), 1.0)
    dec, per_step = decode_step(ctx, tp, adp, pp, moe_tp, moe_ep, b, isl, osl)
    shape = np.shape(dec["step_s"])
    out = {"tpot_s": dec["step_s"] / per_step, "step_s": dec["step_s"],
           "clients": b_req * _f(adp), "gpus": _f(tp) * _f(pp) * _f(adp), "kv_gpus": _f(tp) * _f(pp),
           "kv_tp": _f(tp), "kv_pp": _f(pp),
           "fits": (mem["kv_pool_bytes"] > 0) & (b_req <= mem["max_batch_per_rank"])}
    out.update({k: np.broadcast_to(_f(v), shape).copy() for k, v in
                (("tp", tp), ("adp", adp), ("pp", pp), ("moe_tp", moe_tp), ("moe_ep", moe_ep), ("batch", b))})
    for part in STEP_PARTS:
        out["decode_" + part] = dec[part]
    out.update(mem)
    return out


def prefill_side(ctx, tp, adp, pp, moe_tp, moe_ep, batch, isl) -> dict[str, np.ndarray]:
    """Per prefill-worker layout: the step of one prompt and of a full batch, requests per
    second per rank, KV-transfer bytes, memory, fit. The steps run as a context-only worker
    runs them (``ServingBehaviour.context_only``: TensorRT-LLM's context servers without the
    overlap scheduler, as the export launches them, so each exposes the whole host step)."""
    beh = ctx.behaviour.context_only()
    isl = _f(isl)
    common = (ctx.model, ctx.cluster, ctx.efficiency, beh, ctx.dense_format, ctx.expert_format, ctx.kv_bytes,
              tp, adp, pp, moe_tp, moe_ep)
    pb = np.maximum(_f(batch), 1.0)
    mem, fits = prefill_memory(ctx, tp, adp, pp, moe_tp, moe_ep, pb, isl)
    # with speculative decoding the prefill worker also runs the drafter over the prompt
    k = ctx.speculative_tokens
    pre_full = step_time(*common, pb * isl, isl / 2.0, 0.0, 0.0, pb, draft_tokens=k, draft_head=ctx.draft_head)["step_s"]
    pre_one = step_time(*common, isl, isl / 2.0, 0.0, 0.0, 1.0, draft_tokens=k, draft_head=ctx.draft_head)["step_s"]
    return {"pre_one_s": pre_one, "pre_full_s": pre_full, "batch": pb, "mu_per_rank": pb / pre_full,
            "ranks": _f(adp), "kv_gpus": _f(tp) * _f(pp), "kv_tp": _f(tp), "kv_pp": _f(pp),
            "gpus": _f(tp) * _f(pp) * _f(adp),
            "weights_bytes": mem["weights_bytes"], "max_batch_per_rank": mem["max_batch_per_rank"], "fits": fits}


def prefill_memory(ctx, tp, adp, pp, moe_tp, moe_ep, batch, isl):
    """(memory columns, fit) of a prefill rank running ``batch`` whole prompts of ``isl`` tokens a
    step (launched with exactly that many tokens a step, ``exports.serving_common.Launch.
    step_tokens``, so its activations are sized for them): it fits where the KV pool is positive
    and holds the batch."""
    mem = memory_columns(ctx, tp, adp, pp, moe_tp, moe_ep, isl, 1.0, token_budget=batch * isl)
    return mem, (mem["kv_pool_bytes"] > 0) & (batch <= mem["max_batch_per_rank"])


def largest_prefill_batch(ctx, tp, adp, pp, moe_tp, moe_ep, isl, most: int) -> int:
    """The most prompts of ``isl`` tokens, at most ``most``, one prefill rank of this layout runs
    in a step (``prefill_side``'s fit at that batch): the largest k whose KV cache fits the pool
    left beside the weights and the activation workspace of a k x isl-token step. Bisection over
    whole k (the pool shrinks and the need grows with k); 0 where not even one prompt fits."""
    def fits(k: int) -> bool:
        return bool(np.all(prefill_memory(ctx, tp, adp, pp, moe_tp, moe_ep, float(k), _f(isl))[1]))
    lo, hi = 0, int(most)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def kv_same_domain_share(prefill_gpus, decode_gpus, p_workers, d_workers, domain_gpus):
    """Share of the KV transfers that stay inside one NVLink domain of ``domain_gpus`` GPUs, per
    row: all when the whole deployment (p_workers x prefill_gpus + d_workers x decode_gpus) fits
    one domain; none when a prefill and a decode worker cannot share one; else the share of the
    other GPUs of the deployment that sit in a worker's domain, (domain - its GPUs) / (all - its
    GPUs), the smaller of the prefill and the decode worker's view (the router picks decode workers
    by load, not by place, so a prefill worker's transfers go to a decode worker beside it that
    often). 3 prefill workers and one decode worker of 4 GPUs on 8-GPU domains: 1 / 3."""
    pre, dec, dom = _f(prefill_gpus), _f(decode_gpus), float(domain_gpus)
    total = _f(p_workers) * pre + _f(d_workers) * dec
    # seen from either side, a worker's domain holds dom - its own GPUs of the others; the side
    # whose workers are larger leaves fewer of those places (12 one-GPU prefill workers and one
    # 4-GPU decode worker on 8-GPU domains: 4 of the 12 sit beside it, 1/3, not 7/15)
    share = np.minimum((dom - pre) / np.maximum(total - pre, 1.0), (dom - dec) / np.maximum(total - dec, 1.0))
    return np.where(total <= dom, 1.0, np.where(pre + dec <= dom, np.minimum(np.maximum(share, 0.0), 1.0), 0.0))


def _throughput_bisection(lo, width, steps, capacity, queue, cap, before_wait, sync, t_kv, decode_s, n_clients):
    """The closed loop's request rate (``combine``; ``rate_bisection.bisect_rate_rows``): the rate
    x in [lo, lo + width] (``steps`` halvings, per row) at which x (TTFT(x) + decode) meets the
    clients, TTFT(x) the mean one (``_mdc_mean_wait_at`` of x / capacity, at most ``cap``, at
    least ``sync``, after ``before_wait``, plus ``t_kv``). Flat rows in, flat rates out.

    ``ttft_at``'s mean in place; the clip of the waiting probability to [0, 1] is left out: rho in
    [0, 0.999999] to a power >= 1 (c >= 1) already lies there, and NaN passes either way."""
    c, exponent, service_s = queue
    rows = np.broadcast_shapes(*(np.shape(v) for v in (lo, width, capacity, c, exponent, service_s, cap,
                                                        before_wait, sync, t_kv, decode_s, n_clients)))
    flat = lambda v: v if np.ndim(v) == 0 else np.broadcast_to(v, rows).ravel()      # noqa: E731
    # x (before_wait + max(min(wq, cap), sync) + t_kv + decode): the constant parts summed once
    after = before_wait + t_kv + decode_s
    # p_wait / idle x 0.5 x service = p_wait / idle x (0.5 x service) bit for bit: a power of two
    # scales exactly (no subnormal service times), so the half is folded into the column once
    columns = tuple(flat(_f(v)) for v in (capacity, exponent, c, _f(service_s) * _MDC_SCV, cap, sync, after))
    scratch = {}

    def in_flight_at(mid, wait, cols):
        capa, expo, servers, svc, lim, syn, rest = cols
        rho = scratch.get("rho")
        rho = scratch["rho"] = np.empty(np.shape(mid)) if rho is None or len(rho) < len(mid) else rho
        rho = rho[:len(mid)]
        # _mdc_mean_wait_at(mid / capacity): rho clipped, p_wait = rho ** exponent, idle = c (1 - rho);
        # the clip's floor at 0 left out: mid >= 0 (lo >= 0 plus a half-width >= 0) over a capacity
        # > 0 (servers >= 1 times a positive rate) is never below it, and NaN passes either way
        np.divide(mid, capa, out=rho)
        np.minimum(rho, 0.999999, out=rho)
        np.power(rho, expo, out=wait)
        np.subtract(1.0, rho, out=rho)
        np.multiply(servers, rho, out=rho)
        np.divide(wait, rho, out=wait)
        np.multiply(wait, svc, out=wait)
        # TTFT: before_wait + max(min(wq, cap), sync) + t_kv; in flight: x (TTFT + decode)
        np.minimum(wait, lim, out=wait)
        np.maximum(wait, syn, out=wait)
        np.add(wait, rest, out=wait)
        np.multiply(mid, wait, out=wait)

    lo, width, steps, need = flat(_f(lo)), flat(_f(width)), flat(steps), flat(_f(n_clients))
    size = int(np.prod(rows))
    flat_wait = _flat_wait_rows(lo, width, columns, size)
    if flat_wait.size == 0:
        x = bisect_rate_rows(lo, width, steps, need, columns, in_flight_at)
        return x.reshape(rows)
    # rows whose wait is their synchronised one at every rate of the bracket: the in-flight count
    # x (sync + after), the same numbers as ``in_flight_at`` gives them, for an add's price
    capa, expo, servers, svc, lim, syn, rest = columns
    pick = lambda v, at: v if np.ndim(v) == 0 else np.broadcast_to(v, (size,))[at]      # noqa: E731

    def in_flight_flat(mid, out, cols):
        np.multiply(mid, cols[0], out=out)

    x = np.empty(size)
    other = np.ones(size, dtype=bool)
    other[flat_wait] = False
    other = np.flatnonzero(other)
    per_rate = np.add(pick(syn, flat_wait), pick(rest, flat_wait))
    x[flat_wait] = bisect_rate_rows(pick(lo, flat_wait), pick(width, flat_wait), pick(steps, flat_wait),
                                    pick(need, flat_wait), (per_rate,), in_flight_flat)
    if other.size:
        x[other] = bisect_rate_rows(pick(lo, other), pick(width, other), pick(steps, other), pick(need, other),
                                    tuple(pick(v, other) for v in columns), in_flight_at)
    return x.reshape(rows)


#: relative room left between the mean M/D/c wait at a bracket's top and the synchronised wait
#: for ``_flat_wait_rows`` (the computed wait's rounding is a few units in the last place)
_FLAT_WAIT_ROOM = 1e-9


def _flat_wait_rows(lo, width, columns, size):
    """The flat rows (of ``size``) of ``_throughput_bisection`` whose computed wait
    max(min(wq(x), cap), sync) is ``sync`` itself, bit for bit, at every rate x of the bracket
    [lo, lo + width]: the synchronised wait at least ``cap`` (then min(wq, cap) <= cap <= sync),
    or the mean M/D/c wait at the bracket's top below it with room to spare (wq rises with x: the
    bracket's rates are at most its top, and their computed waits within rounding of the exact
    ones). Only rows whose wait is a finite number at every rate qualify: capacity, exponent,
    servers and service finite and positive (as ``in_flight_at`` computes it, NaN stays NaN)."""
    capa, expo, servers, svc, lim, syn, _ = (np.broadcast_to(v, (size,)) for v in columns)
    top = lo + width
    with np.errstate(all="ignore"):
        rho = np.minimum(top / capa, 0.999999)
        wq = rho ** expo / (servers * (1.0 - rho)) * svc
        finite = (np.isfinite(capa) & (capa > 0.0) & np.isfinite(expo) & (expo >= 0.0) & np.isfinite(servers)
                  & (servers > 0.0) & np.isfinite(svc) & (svc >= 0.0) & np.isfinite(lo) & (lo >= 0.0)
                  & np.isfinite(width) & (width >= 0.0))
        # (a NaN cap would turn min(wq, cap) into NaN: only a number qualifies; a synchronised wait
        # far above the smallest normal numbers, where rounding is relative)
        below = ~np.isnan(lim) & (syn >= 1e-300) & np.isfinite(wq) & (wq * (1.0 + _FLAT_WAIT_ROOM) < syn)
        flat_wait = finite & ((syn >= lim) | below)
    return np.flatnonzero(flat_wait)


def _warm_bracket(x0, n_clients, hi, capacity, queue, cap, before_wait, sync, t_kv, decode_s):
    """(lo, width, steps) of a bracket around the new closed-loop rate from the row's rate ``x0``
    at its previous decode step (``combine``'s later passes). The in-flight count
    f(x) = x (A(x) + decode), A(x) = before_wait + max(min(wq(x), cap), sync) + t_kv, has A
    non-decreasing in x, so with f(x0) above the clients N the root lies in [x0 N / f(x0), x0]
    (below x0, f(x) <= x f(x0) / x0), and with f(x0) at or below N in [x0, x0 N / f(x0)]
    (above x0, f(x) >= x f(x0) / x0), at most ``hi``. ``steps`` halves the bracket to the cold
    bisection's precision, ``hi`` 2^-BISECTION_STEPS: BISECTION_STEPS + log2(width / hi), rounded up."""
    c, exponent, service_s = queue
    wq = np.minimum(_mdc_mean_wait_at(x0 / capacity, c, exponent, service_s)[0], cap)
    in_flight = x0 * (before_wait + np.maximum(wq, sync) + t_kv + decode_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = n_clients / in_flight
        lo = x0 * np.minimum(ratio, 1.0)
        up = np.minimum(x0 * np.maximum(ratio, 1.0), hi)
        width = np.maximum(up - lo, 0.0)
        steps = np.ceil(BISECTION_STEPS + np.log2(width / hi))
    good = np.isfinite(lo) & np.isfinite(steps) & (lo >= 0.0)
    steps = np.where(good, np.minimum(np.maximum(steps, 0.0), BISECTION_STEPS), BISECTION_STEPS).astype(np.int64)
    return np.where(good, lo, 0.0), np.where(good, width, hi), steps


def _rows(value, rows, shape):
    """``value`` (a scalar or an array broadcasting to ``shape``) at the flat ``rows`` of ``shape``
    (itself where ``rows`` is None or it is a scalar)."""
    if rows is None or np.ndim(value) == 0:
        return value
    return np.broadcast_to(value, shape).ravel()[rows]


#: closed-loop passes at most for the requests decoding (the first prices the whole batch)
_DECODING_PASSES = 8
#: a row's passes stop once the requests it decodes and Little's law on its output agree to this
#: relative error (later passes then reprice the same count: the same numbers, so a row does not
#: depend on the rows evaluated beside it)
_DECODING_TOLERANCE = 1e-6


def combine(ctx, dec: dict, pre: dict, p_workers, d_workers, isl, osl, kv_link_free=False) -> dict[str, np.ndarray]:
    """The closed loop of one prefill pool and one decode pool (arrays already aligned per row):
    TTFT (mean, p90), TPOT, latency, throughput, prefill utilisation, and the requests a decode
    rank has decoding (``decoding_per_rank``).

    A decode step carries only the requests decoding, not the clients waiting for or in their
    prefill: r = X / ranks x (osl - 1) x TPOT(r) (``aggregated.decoding_requests``, Little's law on
    the decode phase, at least 1, at most ``dec["batch"]``), the loop's fixed point. ``dec`` is
    the whole batch's step (``decode_side``), the first pass; each further pass reprices the step
    at r (``decode_step``) and solves the loop again. h(r) = X (osl - 1) TPOT(r) / ranks never
    decreases with r (a slower step lowers X but raises X TPOT) and h(batch) <= batch, so the
    root of r - h(r) lies in [1, batch]: secant steps kept inside the bracket found so far, a
    plain pass r = h(r) where the secant leaves it (a step time nearly linear in r gives the root
    in two or three passes). With prefill the bottleneck (llama3.1-70b fp8 on 2 x tp4 H100, isl
    8192, osl 256, 64 clients) about 7 of the 64 decode at a time, and TPOT is the step at those."""
    isl, osl = _f(isl), _f(osl)
    gen = np.maximum(osl - 1.0, 1.0)
    pre_one, pre_full, pb = pre["pre_one_s"], pre["pre_full_s"], pre["batch"]
    servers = np.maximum(_f(p_workers) * pre["ranks"], 1.0)
    mu = pre["mu_per_rank"]
    service = 1.0 / mu
    # one copy of the prompt's KV cache (the drafter's own too), cut into kv_shards pieces by tp:
    # the busiest link carries what its GPU sends or receives (``kv_busiest_link_bytes``: a tp
    # above the KV heads, or MLA's latent, replicates pieces every receiving GPU needs)
    kv_bytes = isl * (kv_bytes_per_token_model(ctx.model, ctx.kv_bytes) + ctx.draft_kv_bytes_per_token(1))
    sides = (pre["kv_tp"], pre["kv_pp"], dec["kv_tp"], dec["kv_pp"])
    link_bytes = kv_busiest_link_bytes(kv_bytes, kv_shards(ctx.model), *sides)
    la = ctx.model.linear_attention
    if la is not None:      # the recurrent state, split over its value heads
        link_bytes = link_bytes + kv_busiest_link_bytes(linear_state_bytes_model(ctx.model), la.num_value_heads, *sides)
    same_domain = kv_same_domain_share(pre["gpus"], dec["gpus"], p_workers, d_workers, ctx.cluster.gpus_per_node)
    # each busiest GPU exchanges with kv_peers GPUs of the other side: on a full mesh over those
    # peers' links only
    t_kv = kv_transfer_time_s(link_bytes, 1.0, same_domain, ctx.cluster, ctx.efficiency, peers=kv_peers(*sides))
    if kv_link_free:
        t_kv = 0.0 * t_kv
    n_clients = dec["clients"] * _f(d_workers)
    capacity = servers * mu
    arrival_sync = ctx.efficiency.arrival_sync(ctx.behaviour.mixed_batches, ctx.behaviour.chunked_prefill)

    # a prompt's own prefill is one prompt's step, as the aggregated model charges its own chunks
    # (``aggregated.evaluate_agg``: ``own``). Known short: a prompt riding a step of several is
    # served when the whole step ends (a 4-prompt step at 98% utilisation: TTFT 992 ms, below
    # host + step + KV, 1,002 ms). Charging the whole step here alone (tried 2026-12-05, session
    # 47) made a disaggregated deployment with a free KV link slower in TTFT than the aggregated
    # one at the same load (gpt-oss-120b on B200, adp 4: 138 against 137 ms), which both pack
    # the same way: the two must move together.
    own = pre_one
    host = ctx.efficiency.request_host_s         # the request's time outside any engine step

    # only the clients beyond the prefill servers can be ahead: the front end sends a prompt
    # to an idle prefill rank while there is one (load-balanced dispatch), so with no more
    # clients than ranks nobody waits, as an aggregated rank's single client does not
    cap = np.maximum(n_clients - servers, 0.0) * service / servers
    queue = _mdc_queue(servers, service)

    def loop_at(tpot, step_s, rows=None, warm=None):
        """(rate, TTFT mean, TTFT p90) of the loop with this decode step, at ``rows`` (all: None);
        ``warm``: the rows' rates at their previous step, to bracket the new one around."""
        n, c, svc, kv, capa, lim, before_wait = (_rows(v, rows, shape) for v in
                                                 (n_clients, servers, service, t_kv, capacity, cap, host + own))
        sync = synchronised_wait_s(n / c, svc, step_s, arrival_sync)
        decode_s = _rows(gen, rows, shape) * tpot
        lo = np.zeros_like(n)
        hi = np.minimum(capa * 0.999999, n / (decode_s + kv))
        q = tuple(_rows(v, rows, shape) for v in queue)
        width, steps = hi, BISECTION_STEPS
        if warm is not None:
            lo, width, steps = _warm_bracket(warm, n, hi, capa, q, lim, before_wait, sync, kv, decode_s)
        x = _throughput_bisection(lo, width, steps, capa, q, lim, before_wait, sync, kv, decode_s, n)
        wq, w90 = mdc_wait_s(x / capa, c, svc)
        wq, w90 = np.minimum(wq, lim), np.minimum(w90, lim)
        return (x, before_wait + np.maximum(wq, sync) + kv,
                before_wait + np.maximum(w90, SYNC_P90 * sync) + kv)

    ranks = _f(d_workers) * dec["adp"]
    most = dec["batch"]
    lay = (dec["tp"], dec["adp"], dec["pp"], dec["moe_tp"], dec["moe_ep"])
    # the first pass prices the whole batch (``dec``), every row
    shape = None
    x, ttft, ttft_p90 = loop_at(dec["tpot_s"], dec["step_s"])
    shape = np.broadcast_shapes(np.shape(x), np.shape(dec["tpot_s"]), np.shape(most), np.shape(ranks))
    x, ttft, ttft_p90 = (np.array(np.broadcast_to(v, shape), dtype=float) for v in (x, ttft, ttft_p90))
    parts = {k: np.array(np.broadcast_to(dec[k], shape), dtype=float)
             for k in ("step_s", "tpot_s", *("decode_" + p for p in STEP_PARTS))}
    most_all, ranks_all, gen_all = (np.broadcast_to(v, shape) for v in (most, ranks, gen))
    running = np.array(most_all, dtype=float)
    residual = running - decoding_requests(x / ranks_all, gen_all, parts["tpot_s"], most_all)
    done = np.abs(residual) <= _DECODING_TOLERANCE * running
    bracket_lo, bracket_hi = np.ones(shape), running.copy()
    before = None
    # each further pass reprices only the rows not yet done: a done row's passes would reprice the
    # same count (the same numbers), so its columns are those of the pass it stopped at
    for k in range(1, _DECODING_PASSES):
        if np.all(done):
            break
        act = np.flatnonzero(~done.ravel())
        r, res = running.ravel()[act], residual.ravel()[act]
        b_lo = np.where(res < 0.0, np.maximum(bracket_lo.ravel()[act], r), bracket_lo.ravel()[act])
        b_hi = np.where(res >= 0.0, np.minimum(bracket_hi.ravel()[act], r), bracket_hi.ravel()[act])
        step = r - res                                 # the plain pass: r = h(r)
        if before is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                secant = r - res * (r - before[0].ravel()[act]) / (res - before[1].ravel()[act])
            inside = np.isfinite(secant) & (secant >= b_lo) & (secant <= b_hi)
            step = np.where(inside, secant, step)
        before = (running.copy(), residual.copy())
        bracket_lo.ravel()[act], bracket_hi.ravel()[act] = b_lo, b_hi
        running.ravel()[act] = step
        got, per_step = decode_step(ctx, *(_rows(v, act, shape) for v in lay), step,
                                    _rows(isl, act, shape), _rows(osl, act, shape))
        tpot_a = got["step_s"] / per_step
        x_a, ttft_a, p90_a = loop_at(tpot_a, got["step_s"], act, x.ravel()[act])
        for name, value in (("step_s", got["step_s"]), ("tpot_s", tpot_a),
                            *(("decode_" + p, got[p]) for p in STEP_PARTS)):
            parts[name].ravel()[act] = value
        x.ravel()[act], ttft.ravel()[act], ttft_p90.ravel()[act] = x_a, ttft_a, p90_a
        res = step - decoding_requests(x_a / ranks_all.ravel()[act], gen_all.ravel()[act], tpot_a, most_all.ravel()[act])
        residual.ravel()[act] = res
        done.ravel()[act] = np.abs(res) <= _DECODING_TOLERANCE * step
    tpot = parts["tpot_s"]
    # saturated prefill: clients left over wait in the queue (Little's law)
    extra = np.maximum(n_clients / np.maximum(x, 1e-12) - (ttft + gen * tpot), 0.0)
    ttft = ttft + extra
    ttft_p90 = ttft_p90 + extra
    latency = ttft + gen * tpot
    gpus = pre["gpus"] * _f(p_workers) + dec["gpus"] * _f(d_workers)
    queue_wait = np.maximum(ttft - host - own - t_kv, 0.0)     # no queue: 0, not the -1e-17 of rounding
    out = {
        "ttft_s": ttft, "ttft_p90_s": ttft_p90, "tpot_s": tpot, "latency_s": latency,
        "tokens_per_s_per_user": 1.0 / np.maximum(tpot, 1e-12),
        "tokens_per_s_per_gpu": np.minimum(x, n_clients / latency) * osl / gpus,
        "prefill_step_s": pre_full, "prefill_own_s": own + 0.0 * ttft, "decode_step_s": parts["step_s"] + 0.0 * ttft,
        "tokens_per_step": ctx.tokens_per_step_within(gen) + 0.0 * ttft, "kv_transfer_s": t_kv,
        "prefill_utilization_fraction": x / capacity, "queue_wait_s": queue_wait, "gpus": gpus,
        # TTFT's last part, so the parts shown (host + own + KV move + queue) add up to it
        "request_host_s": host + 0.0 * ttft,
        "decoding_per_rank": running + 0.0 * ttft, "fits": dec["fits"] & pre["fits"],
    }
    for part in STEP_PARTS:        # the parts of the step as priced, at the requests decoding
        out["decode_" + part] = parts["decode_" + part] + 0.0 * ttft
    return out


def evaluate_disagg(ctx, p_tp, p_adp, p_pp, p_moe_tp, p_moe_ep, p_batch, p_workers,
                    d_tp, d_adp, d_pp, d_moe_tp, d_moe_ep, d_batch, d_workers, isl, osl, kv_link_free=False):
    """Disaggregated-serving metrics per row; ``kv_link_free`` makes the KV transfer cost nothing
    (for what-if comparisons)."""
    dec = decode_side(ctx, d_tp, d_adp, d_pp, d_moe_tp, d_moe_ep, d_batch, isl, osl)
    pre = prefill_side(ctx, p_tp, p_adp, p_pp, p_moe_tp, p_moe_ep, p_batch, isl)
    out = combine(ctx, dec, pre, p_workers, d_workers, isl, osl, kv_link_free)
    for key, value in dec.items():
        # the decode step's parts as the loop priced them (``combine``), not the whole batch's
        if key not in out and (key.startswith("decode_") or key.endswith("_bytes")
                               or key in ("max_batch_per_rank", "kv_bytes_per_request")):
            out[key] = value
    out["prefill_weights_bytes"] = pre["weights_bytes"]
    out["prefill_max_batch_per_rank"] = pre["max_batch_per_rank"]
    return out
