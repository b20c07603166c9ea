"""Per-stage operation orders for each pipeline schedule (timing-free).

Each generator returns, for every stage, the ordered list of ``(kind, microbatch, chunk)``
tuples with the integer op kinds of :mod:`simulator.pipeline.schedules` (``F``, ``B``, ``W``,
``BW`` = backward with the weight gradient fused in). The orders follow the papers:

* GPipe: Huang et al. 2019, all forwards then all backwards.
* 1F1B (PipeDream-Flush): Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
  on GPU Clusters Using Megatron-LM", section 2.2.1: ``p - 1 - i`` warm-up forwards on stage i.
* Interleaved 1F1B: same paper, section 2.2.2, with Megatron-LM's chunk order
  (``get_model_chunk_id``) and warm-up count ``2 (p - 1 - i) + (v - 1) p``.
* ZB-H1: Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 2.1: 1F1B with B and W
  split, stage i delays its W passes by i micro-batches so every stage holds p in flight.
* ZB-H2, ZB-V: built by :func:`timed_greedy_order`, a list scheduler in the spirit of the same
  paper's heuristic (section 3.1) run in event time with the pass durations the run has (the
  handcrafted schedules assume ``T_F = T_B = T_W``; an order built on that assumption stalls when
  B and W differ, its bubble growing with the micro-batch count), memory limits ``2p - 1``
  micro-batches (ZB-H2, section 2.2) and ``2p`` chunk activations = p micro-batches (ZB-V,
  section 6).
* ZB-V also takes the order of :func:`zb_v_block_order` where it is shorter: a repeated building
  block (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory", section 3) whose
  steady state runs each micro-batch's F, B and W of both chunks once a period on every stage,
  so its bubble does not grow with m for any pass times, at ``2p`` chunk activations.
* DualPipe / DualPipeV: the eight-step per-rank recipe of DeepSeek-V3 (DeepSeek-AI 2024,
  section 3.2.1) as published with its reference implementation; an overlapped
  "F&B" pair is emitted as F followed by B (the non-overlapped fallback).
"""
from __future__ import annotations

import heapq
from collections import deque

import numpy as np

F, B, W, BW = 0, 1, 2, 3


def gpipe_order(p: int, m: int) -> list[list[tuple]]:
    """GPipe: m forwards then m fused backwards on every stage."""
    return [[(F, k, 0) for k in range(m)] + [(BW, k, 0) for k in range(m)] for _ in range(p)]


def one_f_one_b_order(p: int, m: int) -> list[list[tuple]]:
    """1F1B: ``min(p-1-i, m)`` warm-up forwards, then F/BW pairs, then the cool-down BWs."""
    orders = []
    for i in range(p):
        warm = min(p - 1 - i, m)
        ops = [(F, k, 0) for k in range(warm)]
        for k in range(m - warm):
            ops += [(F, warm + k, 0), (BW, k, 0)]
        ops += [(BW, k, 0) for k in range(m - warm, m)]
        orders.append(ops)
    return orders


def interleaved_order(p: int, m: int, v: int) -> list[list[tuple]]:
    """Interleaved 1F1B with v chunks per stage (needs ``m % p == 0``).

    Forward number k on a stage runs chunk ``(k // p) % v`` of micro-batch
    ``(k // (p v)) p + k % p``; backward number k runs chunk ``v - 1 - (k // p) % v``.
    When ``m == p`` Megatron runs every forward first (``all_warmup_microbatches``).
    """
    total = m * v
    # the k-th forward and backward ops, the same on every stage (built once, not once a stage)
    fwd = [(F, (k // (p * v)) * p + k % p, (k // p) % v) for k in range(total)]
    bwd = [(BW, (k // (p * v)) * p + k % p, v - 1 - (k // p) % v) for k in range(total)]
    orders = []
    for i in range(p):
        warm = total if m == p else min((p - 1 - i) * 2 + (v - 1) * p, total)
        # warm-up forwards, then forward warm + k and backward k in turn, then the cool-down
        ops = fwd[:warm] + [op for pair in zip(fwd[warm:], bwd[:total - warm]) for op in pair] + bwd[total - warm:]
        orders.append(ops)
    return orders


def zb_h1_order(p: int, m: int) -> list[list[tuple]]:
    """ZB-H1: 1F1B warm-up, then F, B, and the W of micro-batch ``k - i`` on stage i.

    Stage i holds ``(p - i) + i = p`` micro-batches at most, the same as stage 0 of 1F1B; the
    i delayed W passes fill the i idle slots stage i would otherwise have at the tail.
    """
    orders = []
    for i in range(p):
        warm = min(p - 1 - i, m)
        ops = [(F, k, 0) for k in range(warm)]
        for k in range(m):
            if warm + k < m:
                ops.append((F, warm + k, 0))
            ops.append((B, k, 0))
            if k >= i:
                ops.append((W, k - i, 0))
        ops += [(W, k, 0) for k in range(max(m - i, 0), m)]
        orders.append(ops)
    return orders


def _dualpipe_rank(h: int, n_ranks: int, n_mb: int, chunk_of_phase: tuple[int, int],
                   mb_id) -> list[tuple]:
    """The eight steps of one DualPipe(V) rank (DeepSeek-V3 section 3.2.1).

    ``h``: rank index inside the (half) pipeline of ``n_ranks`` ranks; ``n_mb``: micro-batches
    per direction; ``chunk_of_phase``: which local chunk plays phase 0 and phase 1;
    ``mb_id(chunk, k)``: global micro-batch number of the k-th micro-batch of a chunk.
    B passes run with W split off ("zero bubble") only where the recipe says so; the
    others fuse W (kind BW). Split W passes are replayed first-in first-out.
    """
    f_count, b_count, w_queue, ops = [0, 0], [0, 0], deque(), []

    def fwd(phase):
        c = chunk_of_phase[phase]
        ops.append((F, mb_id(c, f_count[phase]), c))
        f_count[phase] += 1

    def bwd(phase, zero_bubble=False):
        c = chunk_of_phase[phase]
        k = mb_id(c, b_count[phase])
        b_count[phase] += 1
        if zero_bubble:
            ops.append((B, k, c))
            w_queue.append((W, k, c))
        else:
            ops.append((BW, k, c))

    def weight():
        ops.append(w_queue.popleft())

    rest = n_ranks - h - 1
    for _ in range(2 * rest):                       # 1: nF0
        fwd(0)
    for _ in range(h + 1):                          # 2: nF0F1
        fwd(0)
        fwd(1)
    for _ in range(rest):                           # 3: nB1W1F1 (zero bubble)
        bwd(1, True)
        weight()
        fwd(1)
    for _ in range(n_mb - 2 * n_ranks + h + 1):     # 4: nF0B1F1B0 (main)
        fwd(0)
        bwd(1)
        fwd(1)
        bwd(0)
    for _ in range(rest):                           # 5: nB1F1B0
        bwd(1)
        fwd(1)
        bwd(0)
    zero_bubble = False                             # 6: nB1B0, second half zero bubble
    for i in range(h + 1):
        if i == (h + 1) // 2 and h % 2 == 1:
            zero_bubble = True
        bwd(1, zero_bubble)
        if i == (h + 1) // 2 and h % 2 == 0:
            zero_bubble = True
        bwd(0, zero_bubble)
    for _ in range(rest):                           # 7: nWB0 (zero bubble)
        weight()
        bwd(0, True)
    for _ in range(h + 1):                          # 8: nW
        weight()
    assert not w_queue and f_count == [n_mb, n_mb] and b_count == [n_mb, n_mb]
    return ops


def dualpipe_v_order(p: int, m: int) -> list[list[tuple]]:
    """DualPipeV: one V-shaped pipeline; chunk 0 runs down, chunk 1 back up (needs m >= 2p)."""
    return [_dualpipe_rank(r, p, m, (0, 1), lambda c, k: k) for r in range(p)]


def dualpipe_order(p: int, m: int) -> list[list[tuple]]:
    """Bidirectional DualPipe (p even, m even, m >= 2p).

    Micro-batches ``0 .. m/2 - 1`` enter at rank 0 and use chunk 0 (rank r holds stage r of the
    first model copy); ``m/2 .. m - 1`` enter at rank p-1 and use chunk 1 (rank r holds stage
    ``p - 1 - r`` of the second copy). Ranks r and ``p - 1 - r`` run mirrored recipes.
    """
    half, n_mb = p // 2, m // 2
    orders = []
    for r in range(p):
        second = r >= half
        orders.append(_dualpipe_rank(min(r, p - 1 - r), half, n_mb, (int(second), int(not second)),
                                     lambda c, k: c * n_mb + k))
    return orders


def greedy_order(p: int, m: int, v: int, cell_path: list[tuple[int, int]], mem_cap: int,
                 chunk0_reserve: int = 0, alternate: bool = False) -> tuple[list[list[tuple]], int]:
    """List-schedule F, B and W passes in unit time (``T_F = T_B = T_W = 1``), B before F before W.

    Args:
        cell_path: the ``(stage, chunk)`` that runs each forward position, in layer order.
        mem_cap: most micro-batch activation sets (per chunk) a stage may hold; a set is taken
            by F and released by the W of the same (micro-batch, chunk).
        chunk0_reserve: slots a chunk-0 forward must leave free, so that a V-shaped stage full
            of chunk-0 activations can still take the chunk-1 forward that leads to a B.
        alternate: after a B prefer an F (1F1B rhythm), which keeps forwards of the last
            micro-batches flowing; otherwise B always comes first.

    At each unit step every stage runs, in this priority: a ready B (deepest position first),
    a ready F allowed by the memory cap (deepest first), a pending W (first-in first-out; fills
    what would be idle time, or releases memory). This follows the heuristic of Qi et al. 2023,
    section 3.1, without its search over hyper-parameters.

    Returns:
        (per-stage orders, unit-time makespan).
    """
    n_pos = len(cell_path)
    pos = [[-1] * v for _ in range(p)]
    for u, (s, c) in enumerate(cell_path):
        pos[s][c] = u
    f_end = [[] for _ in range(n_pos)]      # per position: end times of its forwards, by micro-batch
    b_end = [[] for _ in range(n_pos)]
    nxt_f = [[0] * v for _ in range(p)]
    nxt_b = [[0] * v for _ in range(p)]
    mem = [0] * p
    w_queue = [deque() for _ in range(p)]
    orders = [[] for _ in range(p)]
    chunks_deep_first = [sorted(range(v), key=lambda c, s=s: -pos[s][c]) for s in range(p)]
    last_fb = [None] * p

    def ready_f(s, t):
        for c in chunks_deep_first[s]:
            u, k = pos[s][c], nxt_f[s][c]
            if k >= m or mem[s] + 1 + (chunk0_reserve if c == 0 else 0) > mem_cap:
                continue
            if u == 0 or (len(f_end[u - 1]) > k and f_end[u - 1][k] <= t):
                return (F, k, c)
        return None

    def ready_b(s, t):                      # needs the next position's gradient (or the loss)
        for c in chunks_deep_first[s]:
            u, k = pos[s][c], nxt_b[s][c]
            if k >= m or k >= nxt_f[s][c]:
                continue
            ready = f_end[u][k] if u == n_pos - 1 else (b_end[u + 1][k] if len(b_end[u + 1]) > k else None)
            if ready is not None and ready <= t:
                return (B, k, c)
        return None

    remaining = p * m * v * 3
    t, last_end = 0, 0
    while remaining:
        for s in range(p):
            if alternate and last_fb[s] == B:
                op = ready_f(s, t) or ready_b(s, t)
            else:
                op = ready_b(s, t) or ready_f(s, t)
            if op is None and w_queue[s]:
                op = w_queue[s].popleft()
            if op is None:
                continue
            kind, k, c = op
            u = pos[s][c]
            if kind != W:
                last_fb[s] = kind
            if kind == F:
                f_end[u].append(t + 1)
                nxt_f[s][c] += 1
                mem[s] += 1
            elif kind == B:
                b_end[u].append(t + 1)
                nxt_b[s][c] += 1
                w_queue[s].append((W, k, c))
            else:
                mem[s] -= 1
            orders[s].append(op)
            remaining -= 1
            last_end = t + 1
        t += 1
        if remaining and t > last_end + 1:
            raise RuntimeError(f"greedy pipeline scheduler deadlocked at t={t} (memory cap {mem_cap} too small?)")
    return orders, last_end


def best_greedy_order(p: int, m: int, v: int, cell_path: list[tuple[int, int]], mem_cap: int,
                      chunk0_reserve: int = 0) -> list[list[tuple]]:
    """:func:`greedy_order` with and without F/B alternation; the order with the shorter unit-time makespan."""
    runs = [greedy_order(p, m, v, cell_path, mem_cap, chunk0_reserve, alternate) for alternate in (True, False)]
    return min(runs, key=lambda run: run[1])[0]


def timed_greedy_order(p: int, m: int, v: int, cell_path: list[tuple[int, int]], mem_cap: int,
                       t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0, chunk0_reserve: int = 0,
                       alternate: bool = False) -> tuple[list[list[tuple]], float]:
    """:func:`greedy_order`'s list scheduler in event time: F, B and W take ``t_f``, ``t_b``,
    ``t_w``. Whenever a stage is free it runs, in this priority, a ready B (deepest position
    first), a ready F allowed by the memory cap, a pending W; if none is ready it waits for the
    next dependency to finish. With equal durations it reproduces the unit-time scheduler.

    Returns:
        (per-stage orders, makespan in the durations' unit).
    """
    n_pos = len(cell_path)
    pos = [[-1] * v for _ in range(p)]
    for u, (s_, c) in enumerate(cell_path):
        pos[s_][c] = u
    f_end = [[] for _ in range(n_pos)]
    b_end = [[] for _ in range(n_pos)]
    nxt_f = [[0] * v for _ in range(p)]
    nxt_b = [[0] * v for _ in range(p)]
    mem = [0] * p
    w_queue = [deque() for _ in range(p)]
    orders = [[] for _ in range(p)]
    chunks_deep_first = [sorted(range(v), key=lambda c, s_=s_: -pos[s_][c]) for s_ in range(p)]
    last_fb = [None] * p
    inf = float("inf")

    # An F of chunk c is ready at the end of its micro-batch's F on the position before (at 0 on
    # the first), if the memory cap allows one more; a B at the end of the B on the position
    # after (of its own F on the last), once its F has run; never past m. The tests are spelled
    # out inline, not as functions called per chunk: a search list-schedules thousands of orders.
    cells_deep_first = [[(c, pos[s_][c]) for c in chunks_deep_first[s_]] for s_ in range(p)]
    last_pos = n_pos - 1

    def first_f(s_, t):
        nf = nxt_f[s_]
        held = mem[s_] + 1
        for c, u in cells_deep_first[s_]:
            k = nf[c]
            if k >= m or held + (chunk0_reserve if c == 0 else 0) > mem_cap:
                continue
            if u == 0:
                if 0.0 <= t:
                    return k, c
                continue
            ends = f_end[u - 1]
            if len(ends) > k and ends[k] <= t:
                return k, c
        return None

    def first_b(s_, t):
        nb, nf = nxt_b[s_], nxt_f[s_]
        for c, u in cells_deep_first[s_]:
            k = nb[c]
            if k >= m or k >= nf[c]:
                continue
            if u == last_pos:
                if f_end[u][k] <= t:
                    return k, c
                continue
            ends = b_end[u + 1]
            if len(ends) > k and ends[k] <= t:
                return k, c
        return None

    duration = {F: t_f, B: t_b, W: t_w}
    remaining = [3 * m * v for _ in range(p)]
    seq = 0                                     # ties at one time go first-come first-served
    free = [(0.0, s_, s_) for s_ in range(p)]
    heapq.heapify(free)
    makespan = 0.0
    blocked_at = [None, set()]      # stages that could not act at the current instant
    while free:
        t, _, s_ = heapq.heappop(free)
        if remaining[s_] == 0:
            continue
        # the first ready B and F, deepest chunk first; the second looked for only if needed
        if alternate and last_fb[s_] == B:
            first = first_f(s_, t)
            op = (F,) + first if first else None
            if op is None:
                first = first_b(s_, t)
                op = (B,) + first if first else None
        else:
            first = first_b(s_, t)
            op = (B,) + first if first else None
            if op is None:
                first = first_f(s_, t)
                op = (F,) + first if first else None
        if op is None and w_queue[s_]:
            op = w_queue[s_].popleft()
        seq += 1
        if op is None:
            # the next time one of its ops becomes ready: the least ``b_ready_at`` / ``f_ready_at``
            # after t (inline; the first of equal ones, as ``min`` takes)
            soon = inf
            nb, nf = nxt_b[s_], nxt_f[s_]
            for c, u in cells_deep_first[s_]:
                k = nb[c]
                if k < m and k < nf[c]:
                    if u == last_pos:
                        r = f_end[u][k]
                    else:
                        ends = b_end[u + 1]
                        r = ends[k] if len(ends) > k else inf
                    if t < r < soon:
                        soon = r
            held = mem[s_] + 1
            for c, u in cells_deep_first[s_]:
                k = nf[c]
                if k < m and held + (chunk0_reserve if c == 0 else 0) <= mem_cap:
                    if u == 0:
                        r = 0.0
                    else:
                        ends = f_end[u - 1]
                        r = ends[k] if len(ends) > k else inf
                    if t < r < soon:
                        soon = r
            if soon == inf:
                # waiting on ops no stage has scheduled yet: try again after the stages still free
                # at this instant have acted, else when the next busy one is free
                if blocked_at[0] != t:
                    blocked_at[:] = [t, set()]
                blocked_at[1].add(s_)
                blocked = blocked_at[1]
                acting = False
                for ft, _, o in free:
                    if ft <= t and remaining[o] > 0 and o not in blocked:
                        acting = True
                        break
                soon = t if acting else min([ft for ft, _, o in free if remaining[o] > 0 and ft > t], default=inf)
            if soon == inf:
                raise RuntimeError("timed greedy pipeline scheduler deadlocked "
                                   f"(memory cap {mem_cap} too small?)")
            heapq.heappush(free, (soon, seq, s_))
            continue
        if blocked_at[0] is not None:
            blocked_at[:] = [None, set()]
        kind, k, c = op
        u = pos[s_][c]
        end = t + duration[kind]
        if kind != W:
            last_fb[s_] = kind
        if kind == F:
            f_end[u].append(end)
            nxt_f[s_][c] += 1
            mem[s_] += 1
        elif kind == B:
            b_end[u].append(end)
            nxt_b[s_][c] += 1
            w_queue[s_].append((W, k, c))
        else:
            mem[s_] -= 1
        orders[s_].append(op)
        remaining[s_] -= 1
        makespan = max(makespan, end)
        heapq.heappush(free, (end, seq, s_))
    return orders, makespan


def best_timed_order(p: int, m: int, v: int, cell_path: list[tuple[int, int]], mem_cap: int,
                     t_f: float, t_b: float, t_w: float, chunk0_reserve: int = 0) -> list[list[tuple]]:
    """:func:`timed_greedy_order` with and without F/B alternation; the shorter flush."""
    runs = [timed_greedy_order(p, m, v, cell_path, mem_cap, t_f, t_b, t_w, chunk0_reserve, alternate)
            for alternate in (True, False)]
    return min(runs, key=lambda run: run[1])[0]


def zb_v_block_fb(p: int, m: int) -> list[list[tuple]]:
    """Per stage, the F and B passes of ZB-V's building block in the order the block runs them.

    One period of ``T = 2 (T_F + T_B + T_W)`` on stage i holds, in this order, F of chunk 0 of
    micro-batch k, F1 of k - (p-1-i), B1 of k - (p-1), B0 of k - (2p-2-i), W1 of k - (p-1) and
    W0 of k - (2p-2-i) (the building-block construction of Qi et al. 2024, "Pipeline
    Parallelism with Controllable Memory", NeurIPS 2024, section 3, our own block). With stage
    i's period starting ``i delta`` after stage 0's, for any ``max(T_F, T_B) <= delta <=
    T - max(T_F, T_B)`` every dependency holds: a chunk-0 hop down (or a chunk-1 hop back up)
    takes ``delta`` (``T - delta``), the turns at the last stage (F0 -> F1, B1 -> B0) and at the
    first (F1 -> B1) follow in the same period. So every stage is busy in the steady state
    whatever the pass times (the flush grows by exactly T per micro-batch), and stage i holds
    ``2p - 1 - i`` chunk-0 and ``i + 1`` chunk-1 activation sets: a set lives ``2p - 1 - i``
    periods (chunk 0) or less than ``i + 1`` (chunk 1), ``2p`` in all, 1F1B's peak. The order
    of a stage's ops is the block's (period, slot) order, which does not depend on the times.
    """
    orders = []
    for i in range(p):
        k = np.arange(m)
        # (period, slot) of F0, F1, B1, B0 of each micro-batch; slots in the period's order
        period = np.concatenate([k, k + p - 1 - i, k + p - 1, k + 2 * p - 2 - i])
        slot = np.repeat(np.arange(4), m)
        kind = np.array([F, F, B, B]).repeat(m)
        chunk = np.array([0, 1, 1, 0]).repeat(m)
        at = np.lexsort((slot, period))
        orders.append(list(zip(kind[at].tolist(), np.tile(k, 4)[at].tolist(), chunk[at].tolist())))
    return orders


def zb_v_block_order(p: int, m: int, t_f: float, t_b: float, t_w: float) -> tuple[list[list[tuple]], float]:
    """ZB-V from :func:`zb_v_block_fb`'s F and B order, with each stage's W passes placed in
    event time: a stage runs its next F or B once its input is there; while it waits it runs a
    pending W (first-in first-out), and it runs one before an F that would take a ``2p + 1``-th
    activation set. (The block's own W slots, right after the B's, idle the cool-down, where
    the B passes of the last micro-batches wait on each other: the zero-bubble paper fills
    such gaps with W passes, Qi et al. 2023, section 3.1.) The F/B order keeps the block's
    steady state, and no stage holds more than the block's ``2p`` sets: where the block would
    have run a W this order has run it or holds it pending (its B has run).

    Returns:
        (per-stage orders, makespan in the durations' unit).
    """
    cells = [(i, 0) for i in range(p)] + [(i, 1) for i in reversed(range(p))]
    pos = {cell: u for u, cell in enumerate(cells)}
    last = 2 * p - 1
    seq = zb_v_block_fb(p, m)
    f_end = [[None] * m for _ in range(2 * p)]     # per position, per micro-batch
    b_end = [[None] * m for _ in range(2 * p)]
    duration = {F: t_f, B: t_b, W: t_w}
    nxt, mem = [0] * p, [0] * p
    w_queue = [deque() for _ in range(p)]
    orders = [[] for _ in range(p)]
    remaining = [6 * m] * p
    free = [(0.0, s_, s_) for s_ in range(p)]
    heapq.heapify(free)
    seq_no, makespan = p, 0.0
    blocked_at = [None, set()]
    while free:
        t, _, s_ = heapq.heappop(free)
        if remaining[s_] == 0:
            continue
        op, ready = None, None
        if nxt[s_] < len(seq[s_]):
            kind, k, c = seq[s_][nxt[s_]]
            u = pos[(s_, c)]
            if kind == F:
                ready = 0.0 if u == 0 else f_end[u - 1][k]
            else:
                ready = f_end[u][k] if u == last else b_end[u + 1][k]
            if kind == F and mem[s_] >= 2 * p:
                op = w_queue[s_].popleft()      # the block's W of a done B is pending
            elif ready is not None and ready <= t:
                op = seq[s_][nxt[s_]]
                nxt[s_] += 1
            elif w_queue[s_]:
                op = w_queue[s_].popleft()
        elif w_queue[s_]:
            op = w_queue[s_].popleft()
        seq_no += 1
        if op is None:
            if ready is None:
                # waiting on an op no stage has started: after the stages still free at t, else
                # when the next busy one is free
                if blocked_at[0] != t:
                    blocked_at[:] = [t, set()]
                blocked_at[1].add(s_)
                acting = any(ft <= t and remaining[o] > 0 and o not in blocked_at[1] for ft, _, o in free)
                ready = t if acting else min([ft for ft, _, o in free if remaining[o] > 0 and ft > t],
                                             default=None)
                if ready is None:
                    raise RuntimeError("ZB-V block scheduler deadlocked")
            heapq.heappush(free, (ready, seq_no, s_))
            continue
        if blocked_at[0] is not None:
            blocked_at[:] = [None, set()]
        kind, k, c = op
        end = t + duration[kind]
        if kind == F:
            f_end[pos[(s_, c)]][k] = end
            mem[s_] += 1
        elif kind == B:
            b_end[pos[(s_, c)]][k] = end
            w_queue[s_].append((W, k, c))
        else:
            mem[s_] -= 1
        orders[s_].append(op)
        remaining[s_] -= 1
        makespan = max(makespan, end)
        heapq.heappush(free, (end, seq_no, s_))
    return orders, makespan


def best_zb_v_order(p: int, m: int, t_f: float, t_b: float, t_w: float) -> list[list[tuple]]:
    """ZB-V: the shortest flush of :func:`timed_greedy_order` (memory cap ``2p`` chunk sets,
    one slot kept for a chunk-1 forward; with and without F/B alternation) and
    :func:`zb_v_block_order`, the greedy's on a tie. The greedy order alone stalls at the cap
    when B and W differ from F (p = 4, T_F : T_B : T_W = 1 : 2 : 0.5: bubble 10, 13, 19, 31
    for m = 8, 16, 32, 64); the block order's bubble is the same for every m."""
    cells = [(i, 0) for i in range(p)] + [(i, 1) for i in reversed(range(p))]
    runs = [timed_greedy_order(p, m, 2, cells, 2 * p, t_f, t_b, t_w, 1, alternate) for alternate in (True, False)]
    runs.append(zb_v_block_order(p, m, t_f, t_b, t_w))
    return min(runs, key=lambda run: run[1])[0]
