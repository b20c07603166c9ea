"""Aggregated serving: one engine does prefill and decode, continuous batching, closed loop.

Load model: ``b`` clients per attention-DP rank, each sending its next request as soon as the
previous one finished (the concurrency benchmarks of the engines and of AIConfigurator's
measured rows). In steady state requests arrive at the rank at rate X (Little's law:
X = b / (TTFT + (osl - 1) TPOT)) and each brings ``isl`` prompt tokens.

Per rank, with ``t_d`` the time of a step decoding all b requests (context isl + osl / 2):

* prompts waiting together are packed into steps of ``P = min(C - R d, b isl)`` prompt tokens
  (C the stack's token budget; whole prompts when it does not chunk them), which for engines that
  mix prompts and decodes in one step (``ServingBehaviour.mixed_batches``: vLLM, TensorRT-LLM)
  also carry the R running decodes, each taking d tokens of the budget (1 + k with k drafts under
  ``decode_budget_share`` ``with_drafts``: the step holds at most C tokens, decodes beyond it
  wait; ``simulator.serving.step_budget``), and run alone otherwise (SGLang: R d = 0); a
  request's own chunks likewise get C less its riders' tokens. A prompt's service ``s`` is its share
  isl / P of such a step, and its prefill work ``w_p`` the part of that share beyond the
  decoding the step does for its riders (t_d x riders / R of it: under ``with_drafts`` a prompt
  that fills the budget leaves no room for decodes, and all of its share is prefill; all of it too
  when the prefill runs alone).
* the prefill share of the engine's time is u = X w_p; decoding requests get one token per
  step, slowed (or paused) by the other b - 1 clients' prompts, (b - 1) / b of them (a
  request's own prompt runs before its first token, not during its decode), so
  TPOT = t_d / (1 - u (b - 1) / b).
* TTFT = the request's time outside the engine's steps (``ServingEfficiency.request_host_s``:
  HTTP, tokenisation, the hand-over to the engine process; the same at any load) + the steps
  before the request joins a batch (``join_steps``: it arrives mid-step; an
  engine without an overlap scheduler takes it at the next boundary, half a step on average;
  one with an overlap scheduler has already formed the next batch while the current step runs,
  so the request joins the batch after next, one and a half steps; plus ``hold_steps``: steps a
  scheduler set to poll for requests only every N steps or to hold prompts for a fuller batch
  adds, none at the engines' defaults) + its own
  prefill (the ceil(isl / C) steps carrying its chunks, the last one what is left of the prompt,
  with the other clients' decodes when mixed) +
  the wait behind other prompts. That wait lies between two limits of a closed loop: clients
  whose requests finished together come back together (fully synchronised waves: the mean
  client waits for (b - 1) / 2 other prompts, each holding the engine for its service ``s``,
  W_wave = (b - 1) s / 2), or arrive
  independently (the queue is empty and a request waits for the next step boundary,
  W_0 = t_d / 2). Measured concurrency sweeps sit in between, growing about as the square root
  of b; the wait is taken as the geometric mean of the two limits scaled by the serving
  efficiency's ``arrival_sync`` for the engine's scheduler (fitted: how synchronised the clients stay),
  W = arrival_sync x sqrt(W_wave x W_0), and never below the G/D/1 wait of independent
  arrivals at the prompt server's utilisation X s (Allen-Cunneen, Allen 1990, "Probability, Statistics and Queueing
  Theory", section 6.3: W = u / (1 - u) / 2 x s for Poisson arrivals and deterministic
  service), which dominates near saturation; that queue term never exceeds (b - 1) s (in a closed
  loop of b clients a prompt can only queue behind the other b - 1). The synchronised term is not
  held to that bound: with the fitted ``arrival_sync`` it exceeds it at a few clients (Llama-3.1-70B,
  SGLang on B200, 2 clients: 49 ms against one 5.5 ms prompt ahead), because the measured runs
  wait that long there (SGLang's TTFT at 2-4 clients sits a median 257 ms above joining plus its
  own prefill); capping it took the in-sample TTFT error from 34.1% to 36.1% and Blackwell's
  prefill GEMM fraction to 0.23 (docs/accuracy_serving.md, session 43; refitted again in session 48:
  35.9%, the fraction on its 0.2 bound). The price of leaving it uncapped: with SGLang on Blackwell
  and outputs of 16 tokens or fewer, 2 clients give fewer tokens/s per GPU than 1 (a strict xfail in
  tests/test_serving_simulator.py names the case). The 90th percentile: a wait spread evenly over
  [0, 2 W_wave] has its 90th percentile at 1.8 x its mean, so the synchronised part scales
  by sqrt(1.8); the independent part takes the exponential tail of the G/D/1 wait.
* X solves the closed loop by bisection (the loop time grows with X). The decode steps carry
  the requests actually decoding, X (osl - 1) TPOT by Little's law (not the clients waiting for
  a prompt slot): three fixed-point passes, starting from all b.

Capacity (``memory_columns``): the engine admits past their first token at most
``max_admitted_per_rank`` requests (the prompts whose KV blocks fit, or whole requests for an
engine that reserves them, ``ServingBehaviour.kv_admission``) and keeps at most ``n_fit`` =
``max_batch_per_rank`` of them decoding at once. Admitted requests beyond n_fit take turns
(preempted and resumed), so the rank finishes at most n_fit requests per gen decode steps and
their loop time beyond TTFT is decode (TPOT from Little's law); the clients beyond the admitted
ones wait for a slot before their first token, (b - admitted) / X by Little's law.
"""
from __future__ import annotations

import numpy as np

from cost_models.inference_step import STEP_PARTS, step_time
from cost_models.kv_cache import kv_bytes_per_request, kv_held_tokens
from cost_models.serving_memory import activation_bytes_per_gpu, kv_pool_bytes_per_gpu, weight_bytes_per_gpu
from simulator.serving.rate_bisection import bisect_rate
from simulator.serving.step_budget import budget_tokens_per_decode, decodes_per_step, prompt_step


def _f(x):
    return np.asarray(x, dtype=float)


def memory_columns(ctx, tp, adp, pp, moe_tp, moe_ep, isl, osl, token_budget=None):
    """Per-GPU memory parts (bytes), the largest number of requests one attention-DP rank can
    keep running (``max_batch_per_rank``) and the largest number it admits past their first
    token (``max_admitted_per_rank``), by the stack's ``kv_admission``:

    * ``prompt`` (vLLM, SGLang): a request starts when its prompt's KV blocks are free; the
      running requests then hold their mean context isl + osl / 2 in steady state (paged KV
      caches allocate blocks as tokens are generated, Kwon et al. 2023, "Efficient Memory
      Management for LLM Serving with PagedAttention"), which bounds those decoding at once;
      the pool admits pool / KV(isl) prompts, and any beyond the running bound are preempted
      and resumed in turn.
    * ``full_request`` (TensorRT-LLM GUARANTEED_NO_EVICT): a request starts only with blocks
      for isl + osl tokens reserved; admitted = running = pool / KV(isl + osl).

    Each is rounded up to whole KV blocks of the stack's ``kv_block_tokens``
    (``cost_models.kv_cache.kv_held_tokens``). Both are capped by the stack's
    ``max_running_requests``."""
    model, beh = ctx.model, ctx.behaviour
    budget = beh.rank_token_budget(ctx.token_budget, adp) if token_budget is None else token_budget
    if token_budget is None and not beh.chunked_prefill:
        # an engine that does not chunk prompts runs a whole prompt in a step when it is longer
        # than the budget (and is launched so: ``exports.serving_common.Launch.step_tokens``)
        budget = np.maximum(budget, _f(isl))
    weights = weight_bytes_per_gpu(model, tp, adp, pp, moe_tp, moe_ep, ctx.dense_format, ctx.expert_format,
                                   beh.lm_head_split_over_attention_dp)
    # the drafter (MTP modules, or an EAGLE-3 head) sits on the last stage, taken as the largest
    weights = weights + ctx.draft_weight_bytes(tp, moe_tp, moe_ep, pp)
    acts = activation_bytes_per_gpu(model, tp, adp, moe_ep, budget)
    pool = kv_pool_bytes_per_gpu(ctx.cluster.gpu.hbm_bytes, weights, acts, beh)
    isl, osl = _f(isl), _f(osl)
    held = isl + osl if beh.kv_admission == "full_request" else isl + osl / 2.0
    admit = isl + osl if beh.kv_admission == "full_request" else isl
    # the engine allocates whole blocks (pages) of the stack's kv_block_tokens: a request holds
    # its context rounded up to them (a 3-token request holds a 16-token vLLM block)
    held, admit = kv_held_tokens(held, beh.kv_block_tokens), kv_held_tokens(admit, beh.kv_block_tokens)
    per_request = kv_bytes_per_request(model, tp, held, ctx.kv_bytes, pp)
    per_prompt = kv_bytes_per_request(model, tp, admit, ctx.kv_bytes, pp)
    # the drafter keeps its own KV cache of the context (one layer per MTP module or head layer)
    per_token = ctx.draft_kv_bytes_per_token(tp)
    per_request = per_request + held * per_token
    per_prompt = per_prompt + admit * per_token
    n_fit = np.floor(np.maximum(pool, 0.0) / np.maximum(per_request, 1.0))
    n_admit = np.floor(np.maximum(pool, 0.0) / np.maximum(per_prompt, 1.0))
    if beh.max_running_requests:
        n_fit = np.minimum(n_fit, beh.max_running_requests)
        n_admit = np.minimum(n_admit, beh.max_running_requests)
    reserve = beh.runtime_reserved_gib * 2**30
    return {"weights_bytes": _f(weights), "activations_bytes": np.where(beh.reserve_covers_activations, 0.0, acts),
            "reserved_bytes": np.full_like(_f(weights), reserve), "kv_pool_bytes": np.maximum(pool, 0.0),
            "kv_bytes_per_request": _f(per_request), "max_batch_per_rank": n_fit,
            "max_admitted_per_rank": np.maximum(n_admit, n_fit)}



def no_room_reason(mem, i: int, gpu_name: str) -> str:
    """Why row ``i`` of a ``memory_columns`` result (or of an evaluation carrying its columns)
    cannot serve at all, else "": the weights leave no KV cache on a GPU of ``gpu_name``, or not
    even one request's KV cache fits in what is left. ``serve simulate`` refuses both, and
    ``validate serving`` skips such a row."""
    gib = 2.0 ** 30
    if mem["kv_pool_bytes"][i] <= 0:
        return f"the weights ({mem['weights_bytes'][i] / gib:.1f} GiB per GPU) leave no room for a KV cache on {gpu_name}"
    if mem["max_batch_per_rank"][i] < 1:
        return (f"not even one request fits: its KV cache needs {mem['kv_bytes_per_request'][i] / gib:.1f} GiB per "
                f"GPU and {mem['kv_pool_bytes'][i] / gib:.1f} GiB is free")
    return ""


def queue_wait_s(u, service_s):
    """(mean, 90th percentile) wait of a G/D/1 queue of utilisation ``u`` with Poisson-like
    arrivals (Allen-Cunneen)."""
    u = np.minimum(np.maximum(_f(u), 0.0), 0.999999)     # np.clip's bounds, without its overhead
    mean = u / (1.0 - u) / 2.0 * _f(service_s)
    cond = mean / np.maximum(u, 1e-12)                  # mean wait of a request that waits
    p90 = np.where(u > 0.1, cond * np.log(np.maximum(u, 1e-12) / 0.1), 0.0)
    return mean, p90


#: the 90th percentile of a wait spread evenly over [0, 2m] is 1.8 m; under the square root
SYNC_P90 = float(np.sqrt(1.8))


def synchronised_wait_s(clients, service_s, step_s, arrival_sync):
    """Mean wait behind other prompts of ``clients`` closed-loop clients per prefill server:
    ``arrival_sync`` x the geometric mean of the synchronised-wave wait (clients - 1) x service
    / 2 and the independent-arrival wait step / 2."""
    wave = np.maximum(_f(clients) - 1.0, 0.0) * _f(service_s) / 2.0
    return _f(arrival_sync) * np.sqrt(wave * _f(step_s) / 2.0)


#: fixed-point passes for the number of requests decoding (the first assumes all b); a row whose
#: count still moves by more than ``_RUNNING_TOLERANCE`` of itself in the last of them is solved
#: again with ``_RUNNING_MAX_ITERATIONS`` passes: next to a jump in the step's time (an engine's
#: one-shot / two-shot all-reduce switch, TensorRT-LLM's at 128 tokens) three passes could stop on
#: either side of it, so one more client could land on the slow side (TensorRT-LLM tp 8, 70B on
#: H100 at isl 128 / osl 64: 835 -> 692 tokens/s/GPU from 153 to 154 clients)
_RUNNING_ITERATIONS = 3
_RUNNING_MAX_ITERATIONS = 20
_RUNNING_TOLERANCE = 0.01


def decoding_requests(rate_per_rank, gen, tpot_s, most):
    """Requests one rank has decoding at once (numpy-friendly): Little's law on the decode phase,
    rate (requests/s a rank) x its (osl - 1) x TPOT seconds of decoding, at least 1 and at most
    ``most`` (the clients a rank holds, capped by what fits). The clients waiting for or in their
    prefill are not among them. Shared by the aggregated and the disaggregated closed loops."""
    return np.minimum(np.maximum(rate_per_rank * gen * tpot_s, 1.0), most)    # np.clip, without its overhead


def join_steps(behaviour, clients=2.0):
    """Mean steps (of the step in flight) from a request's arrival at a busy engine until the
    step that takes it starts: 0.5 (the rest of the current step) without an overlap scheduler,
    1.5 with one: the host forms batch n+1 and launches it before it processes step n's results
    and reads new requests, so a request arriving while step n runs joins batch n+2 (SGLang
    python/sglang/srt/managers/scheduler.py ``event_loop_overlap``: recv_requests,
    get_next_batch_to_run, run_batch, then process_batch_result of the previous batch; its
    authors on enabling it by default, sgl-project/sglang PR #2067: median TTFT rose "because we
    delayed the processing of the first batch in favor of launching the kernels for the next
    batch first"; TensorRT-LLM tensorrt_llm/_torch/pyexecutor/py_executor.py
    ``_executor_loop_overlap``, same order; vLLM V1 async scheduling schedules step n+1 before
    step n's output returns).

    With one client per engine (``clients`` <= 1, all its attention-DP ranks together: they step
    in lockstep through the expert all-to-all) the engine is idle when the request arrives (its
    only client was waiting for the previous answer): no step is in flight and none has been formed
    ahead, so the request starts at once, 0 steps (numpy-friendly in ``clients``)."""
    steps = 1.5 if behaviour.overlap_scheduler else 0.5
    return np.where(_f(clients) > 1.0, steps, 0.0)


def hold_steps(behaviour, clients):
    """Mean decode steps (numpy-friendly, per row of ``clients`` per rank) that the engine's
    hold settings add between a request's arrival and the step that takes it, beyond
    ``join_steps``:

        hold = (recv_interval_steps - 1) / 2 + context_wait_steps   when clients > 1, else 0.

    * ``recv_interval_steps`` N (SGLang ``--scheduler-recv-interval``; python/sglang/srt/
      managers/scheduler_recv_skipper.py ``SchedulerRecvSkipper.handle``): new requests are read
      only every N decode steps, so one arriving at a random step waits 0 .. N - 1 steps more,
      (N - 1) / 2 on average.
    * ``context_wait_steps`` K (TensorRT-LLM ``batch_wait_timeout_iters`` with a
      ``batch_wait_max_tokens_ratio`` the batch does not reach, or the attention-DP balance
      ``timeout_iters``; tensorrt_llm/_torch/pyexecutor/py_executor.py ``_waiting_requests``,
      ``_balance_adp_requests``): the waiting prompt is held K iterations. The full K is taken:
      at the concurrencies modelled one prompt plus the decodes stays far below the token
      threshold (e.g. 0.9 x 8192 tokens against a 1k prompt and 64 decodes), so only the
      timeout ends the hold. A prompt arriving while an earlier one is already held waits only
      the rest of that window (for Poisson arrivals at L per step the mean would be
      K (1 + L K / 2) / (1 + L K)); that load dependence is left out, as it matters only when
      several prompts arrive within K steps.

    Both holds need other requests decoding: with one client per rank the engine is idle when
    the request arrives (TensorRT-LLM checks batch waiting only when generation requests are
    scheduled and releases the balance hold when a rank has none; SGLang counts an idle
    iteration, microseconds long, as one step of the interval), so they add nothing there.
    At the defaults (N = 1, K = 0) the hold is exactly 0."""
    extra = (behaviour.recv_interval_steps - 1) / 2.0 + behaviour.context_wait_steps
    return np.where(_f(clients) > 1.0, float(extra), 0.0)


def _solve_loop(b, gen, t_d, own, service, w_p, sync, lead):
    """The closed loop's request rate X per rank (bisection: the loop time grows with X) and
    (TTFT, TPOT, 90th-percentile wait, prompt share u) at it; ``lead`` is the time before the
    request joins a batch ((``join_steps`` + ``hold_steps``) x the decode step, plus the request's
    host time)."""
    others = np.maximum(b - 1.0, 0.0) / np.maximum(b, 1.0)

    cap = np.maximum(b - 1.0, 0.0) * service         # only the other clients can be ahead

    def loop(x, p90=True):
        u = np.minimum(x * w_p, 0.999999)                 # share of the engine's time spent on prompts
        wq, w90 = queue_wait_s(np.minimum(x * service, 0.999999), service)
        wq = np.minimum(wq, cap)
        ttft = lead + own + np.maximum(wq, sync)
        # a request's decode steps are slowed by the other clients' prompts, not its own (which
        # ran before its first token): (b - 1) / b of the prompts the engine takes
        tpot = t_d / (1.0 - u * others)
        if not p90:             # the bisection's step: TTFT and TPOT alone, the same numbers
            return ttft, tpot
        return ttft, tpot, np.maximum(np.minimum(w90, cap), SYNC_P90 * sync), u

    lo = np.zeros_like(b)
    hi = 0.999999 / np.maximum(w_p, service)
    x = _loop_bisection(lo, hi, b, gen, t_d, own, service, w_p, sync, lead, others, cap)
    return x, loop(x)


def _loop_bisection(lo, hi, b, gen, t_d, own, service, w_p, sync, lead, others, cap):
    """``_solve_loop``'s bisection (``rate_bisection.bisect_rate``): the rate x in [lo, hi] at
    which x (TTFT(x) + gen TPOT(x)) meets the ``b`` clients. ``loop(x, p90=False)``'s operations
    in the same order, so the same numbers bit for bit, in place in preallocated arrays, without
    the 90th-percentile wait that ``queue_wait_s`` also computes and the bisection never reads
    (its second clip to 0.999999 is a no-op after the first)."""
    shape = np.broadcast_shapes(*(np.shape(v) for v in (lo, hi, b, gen, t_d, own, service, w_p, sync, lead,
                                                          others, cap)))
    service = _f(service)
    lead_own = lead + own
    u, work = np.empty(shape), np.empty(shape)

    def in_flight_at(mid, wait):
        # TPOT: t_d / (1 - u others), u = min(x w_p, 0.999999)
        np.multiply(mid, w_p, out=u)
        np.minimum(u, 0.999999, out=u)
        np.multiply(u, others, out=u)
        np.subtract(1.0, u, out=u)
        np.divide(t_d, u, out=u)
        # queue_wait_s(min(x service, 0.999999), service)'s mean: u / (1 - u) / 2 x service
        np.multiply(mid, service, out=wait)
        np.minimum(wait, 0.999999, out=wait)
        np.maximum(wait, 0.0, out=wait)
        np.subtract(1.0, wait, out=work)
        np.divide(wait, work, out=wait)
        np.divide(wait, 2.0, out=wait)
        np.multiply(wait, service, out=wait)
        # TTFT: lead + own + max(min(wq, cap), sync); in flight: x (TTFT + gen TPOT)
        np.minimum(wait, cap, out=wait)
        np.maximum(wait, sync, out=wait)
        np.add(lead_own, wait, out=wait)
        np.multiply(gen, u, out=u)
        np.add(wait, u, out=wait)
        np.multiply(mid, wait, out=wait)

    return bisect_rate(lo, hi, b, shape, in_flight_at)


def evaluate_agg(ctx, tp, adp, pp, moe_tp, moe_ep, batch, isl, osl):
    """Aggregated-serving metrics per row (seconds, tokens/s, bytes); see the module docstring.

    The closed loop's count of requests decoding is a fixed point: ``_RUNNING_ITERATIONS`` passes
    for every row, then the rows still moving solved again with ``_RUNNING_MAX_ITERATIONS`` (each
    row's answer depends on its own columns only, so a row priced alone or among thousands is
    priced the same)."""
    args = (tp, adp, pp, moe_tp, moe_ep, batch, isl, osl)
    out, moving = _evaluate_agg(ctx, *args, passes=_RUNNING_ITERATIONS)
    if not np.any(moving):
        return out
    shape = np.broadcast_shapes(*(np.shape(a) for a in args), np.shape(moving))
    idx = np.flatnonzero(np.broadcast_to(moving, shape))
    sub = [np.broadcast_to(_f(a), shape).reshape(-1)[idx] for a in args]
    again, _ = _evaluate_agg(ctx, *sub, passes=_RUNNING_MAX_ITERATIONS)
    merged = {}
    for key, value in out.items():
        redo = np.broadcast_to(np.asarray(again[key]), idx.shape)
        full = np.array(np.broadcast_to(np.asarray(value), shape), dtype=np.result_type(value, redo))
        full.reshape(-1)[idx] = redo
        merged[key] = full
    return merged


def _evaluate_agg(ctx, tp, adp, pp, moe_tp, moe_ep, batch, isl, osl, passes):
    """``evaluate_agg``'s rows after ``passes`` fixed-point passes, and which rows' count of
    requests decoding still moved by more than ``_RUNNING_TOLERANCE`` of itself in the last."""
    beh = ctx.behaviour
    eff = ctx.efficiency
    b_req = np.maximum(_f(batch), 1.0)
    isl, osl = _f(isl), _f(osl)
    gen = np.maximum(osl - 1.0, 1.0)
    mem = memory_columns(ctx, tp, adp, pp, moe_tp, moe_ep, isl, osl)
    n_fit = np.maximum(mem["max_batch_per_rank"], 1.0)
    b = np.maximum(np.minimum(b_req, mem["max_admitted_per_rank"]), 1.0)      # admitted per rank

    budget = beh.rank_token_budget(ctx.token_budget, adp)       # one attention-DP rank's steps
    # the budget as launched: an engine that does not chunk prompts gets at least one whole
    # prompt a step (``exports.serving_common.Launch.step_tokens``, ``memory_columns``)
    step_budget = budget if beh.chunked_prefill else np.maximum(budget, isl)
    common = (ctx.model, ctx.cluster, eff, beh, ctx.dense_format, ctx.expert_format, ctx.kv_bytes,
              tp, adp, pp, moe_tp, moe_ep)
    k = ctx.speculative_tokens
    # tokens a decoding request keeps a step over its whole decode (1 unless speculating; its last
    # steps stop at the tokens it has left: n / E[S(n)], ``speculative.decode_tokens_per_step``)
    per_step = ctx.tokens_per_step_within(gen)
    # an engine that mixes prompts and decodes shares the step's token budget between them
    # (``step_budget``): decodes take theirs first, the prompts what is left, and under
    # ``with_drafts`` no step holds more decodes than the budget (the rest take turns, as those
    # beyond the KV pool do below)
    if beh.mixed_batches:
        per_decode, step_decodes = budget_tokens_per_decode(beh, k), decodes_per_step(beh, step_budget, k)
    else:
        per_decode, step_decodes = 0.0, np.inf
    n_run = np.minimum(n_fit, step_decodes)
    # requests decoding = clients not waiting for or in their prefill (Little's law on the
    # decode phase): start with all b (at most a step's worth), then refine from the loop's solution
    running = np.minimum(b, step_decodes)
    previous = running
    for _ in range(passes):
        previous = running
        dec = step_time(*common, 0.0 * b, 0.0, running, isl + osl / 2.0, draft_tokens=k, kept_tokens=per_step,
                       draft_head=ctx.draft_head)
        t_d = dec["step_s"]
        riders = running if beh.mixed_batches else 0.0 * b        # decodes sharing a prompt's step
        # a request's own chunks share their steps with the other clients' decodes (with one
        # client, none: it is not decoding while its prompt runs)
        own_riders = riders * np.maximum(b - 1.0, 0.0) / b
        # what the decodes leave of the budget: the request's own chunk, and the prompts packed
        # into a step (whole prompts up to the budget when the engine does not chunk them)
        chunk, own_riders = prompt_step(beh, step_budget, own_riders, per_decode, isl, isl, beh.chunked_prefill)
        packed, riders = prompt_step(beh, step_budget, riders, per_decode, b * isl, isl, beh.chunked_prefill)
        steps_own = np.ceil(isl / chunk)
        # the prompt's last chunk carries what is left of it, not a whole chunk
        last_chunk = isl - (steps_own - 1.0) * chunk
        t_own = step_time(*common, chunk, isl / 2.0, own_riders, isl + osl / 2.0, draft_tokens=k,
                          kept_tokens=per_step, draft_head=ctx.draft_head)["step_s"]
        t_last = step_time(*common, last_chunk, isl / 2.0, own_riders, isl + osl / 2.0, draft_tokens=k,
                           kept_tokens=per_step, draft_head=ctx.draft_head)["step_s"]
        t_packed = step_time(*common, packed, isl / 2.0, riders, isl + osl / 2.0, draft_tokens=k,
                             kept_tokens=per_step, draft_head=ctx.draft_head)["step_s"]
        # every chunk but the last is a full one; the keys are the prompt's mean (isl / 2) in
        # each, which sums to the prompt's causal attention exactly
        own = (steps_own - 1.0) * t_own + t_last
        service = t_packed * isl / packed
        # the prefill work is the share beyond the decoding the packed step does anyway: the
        # riders' part of a decode step, riders / running of t_d (none when the budget left no
        # room for decodes beside the prompt, ``prompt_step``: then the whole share is prefill)
        ride_share = riders / np.maximum(running, 1.0) if beh.mixed_batches else 0.0
        w_p = np.maximum(service - t_d * isl / packed * ride_share, 1e-9)
        sync = synchronised_wait_s(b, service, t_d, eff.arrival_sync(beh.mixed_batches, beh.chunked_prefill))
        # idle only with one client per engine: attention-DP ranks step together
        lead = (join_steps(beh, b * _f(adp)) + hold_steps(beh, b)) * t_d + eff.request_host_s
        # a decode step yields ``per_step`` tokens a request: the time per token is its share
        x, (ttft, tpot, w90, u) = _solve_loop(b, gen, t_d / per_step, own, service, w_p, sync,
                                              lead)
        running = decoding_requests(x, gen, tpot, np.minimum(b, n_run))
    # more requests decoding than the KV pool (or the step's token budget) holds: the engine
    # preempts and resumes them in turn (or leaves those beyond the budget for a later step), so
    # n_run slots finish one request per gen steps each, and the admitted requests' remaining
    # loop time is decode (Little's law)
    x = np.minimum(x, n_run / (gen * tpot))
    tpot = np.maximum(tpot, (b / x - ttft) / gen)
    ttft_p90 = lead + own + w90
    # the TTFT's parts: joining the running batch (lead), the prompt's own prefill (own), the
    # wait behind the other clients' prompts (waves or a queue) and, below, for a free KV slot
    behind = np.maximum(ttft - lead - own, 0.0)
    # clients beyond the KV capacity wait for a slot (Little's law)
    queue_wait = np.maximum(b_req - b, 0.0) / np.maximum(x, 1e-12)
    ttft = ttft + queue_wait
    ttft_p90 = ttft_p90 + queue_wait
    tpot = np.where(osl > 1, tpot, 0.0)
    latency = ttft + gen * tpot
    gpus_per_rank = _f(tp) * _f(pp)
    out = {
        "ttft_s": ttft, "ttft_p90_s": ttft_p90, "tpot_s": tpot, "latency_s": latency,
        "tokens_per_s_per_user": np.where(tpot > 0, 1.0 / np.maximum(tpot, 1e-12), 0.0),
        # Little's law: the rank completes X requests per second (the bisection's root)
        "tokens_per_s_per_gpu": x * osl / gpus_per_rank,
        "prefill_work_s": w_p, "prefill_own_s": own, "prefill_service_s": service, "decode_step_s": t_d,
        "prefill_share_fraction": u,
        "queue_wait_s": queue_wait, "join_s": lead + 0.0 * ttft, "wait_behind_s": behind,
        "running_per_rank": b, "decoding_per_rank": running,
        "tokens_per_step": np.full_like(tpot, per_step),
        # the step a prompt is packed into, as priced: its prompt tokens and the decodes riding
        # (each 1 + k tokens through the model)
        "packed_prefill_tokens": packed + 0.0 * tpot, "packed_decode_requests": riders + 0.0 * tpot,
    }
    for part in STEP_PARTS:
        out["decode_" + part] = dec[part]
    out.update(mem)
    # against the KV pool's own count, not n_fit (at least 1 to keep the loop above defined): a
    # layout with room for no request does not fit, as ``simulate_serving`` and the decode side say
    out["fits"] = (mem["kv_pool_bytes"] > 0) & (b_req <= mem["max_batch_per_rank"])
    moving = np.abs(_f(running) - _f(previous)) > _RUNNING_TOLERANCE * np.maximum(_f(running), 1.0)
    return out, moving
