"""From the min-max layer split to the split with the least pipeline makespan among its neighbours.

``hetero_split.split_layers`` minimises the slowest stage. The flush's makespan (the simulator's,
``group_makespan.group_makespans_s``) also depends on where the slow stages sit: Llama-3-70B's
32 x (two tp4 stages on one pool > one tp8 stage on another) with 16 micro-batches runs
[22, 21] > [37] in 8.9437 s of pipeline where the min-max [21, 22] > [37] (its slowest stage
0.28 ms shorter) runs 8.9627 s, so a faster link, which moved the min-max from the first to the
second, gave a slower best plan.

The neighbours are the splits one layer away: one layer from the last of a class's larger
stages to a stage of another class (its first smaller stage, or its first stage when all are
equal), each stage keeping at least one layer and within its class's memory cap. Any of them may
win whatever its slowest stage: a layer moved from a slow pool to a fast one shortens the sum of
the stages (the fill and drain every flush pays) by the difference of the two pools' times per
layer, which can outweigh the (m - 1) x the slowest stage's growth. GPT-3 1.3B, 16 sequences,
1 x (h100 tp2 pp3 > a100 tp4 pp2), 8 micro-batches of 2 on 8 A100 + 6 H100 joined at 400 Gb/s,
1 us: the min-max [5,6,6] > [4,3] (slowest 14.080 ms) flushes slower than [6,6,6] > [4,2]
(slowest 14.096 ms, +0.12%: one H100 layer, 2.31 ms, for one A100 layer, 2.83 ms); a cut of the
neighbours to those within 0.1% of the min-max's slowest stage kept it at 5 us (whose min-max
slowest stage is 4 us longer) and lost it at 1 us, so the faster link gave the lower best plan.
A neighbour can only win where its lower bound (its receiving stage's time x micro-batches,
then ``pipeline.bound.flush_lower_bound_s``) is below the min-max split's makespan (bounded
above by sum of stages + (m - 1) x slowest, then exact); those few are priced exactly and the
least makespan (with the weight casts, which differ by pool) wins, the min-max split on ties.
Vectorized over candidates; groups whose micro-batches the shares set (NaN) keep the min-max
split.
"""
from __future__ import annotations

import numpy as np

from planners.hetero_split import Split
from simulator.heterogeneous.group_makespan import group_lower_bounds_s, group_makespans_s

#: how far above the fastest candidates' pipelines one is still refined (its step's other
#: parts, the exposed data-parallel traffic and the optimizer, are not known here)
RANK_MARGIN = 0.05


def refine_split(schedule, split: Split, mult, pos, cap, f1, f0, b1, b0, cast1, stages, micro_batches,
                 tau, extra, top: int | None = None) -> Split:
    """``split`` with each candidate's layers moved to the neighbour of least makespan.

    Args: (C, K) per class: ``mult`` stages, ``pos`` pipeline position of its first stage,
    ``cap`` most layers per stage; one micro-batch's forward window ``n f1 + f0`` and backward
    ``n b1 + b0`` seconds on a stage of n layers (``compose.pass_windows_s``), ``cast1`` weight
    cast seconds per layer, ``tau``/``extra`` the stage time model ``split_layers`` took (for
    ``slowest_s``). (C,) ``stages`` and ``micro_batches`` per replica (NaN: left alone).
    ``top``: refine only the candidates whose pipeline can come within ``RANK_MARGIN`` of the
    ``top`` fastest (at least micro-batches x slowest stage against the ``top``-th least
    sum + (m - 1) x slowest); None: all.
    """
    mult = np.asarray(mult, dtype=np.int64)
    C, K = mult.shape
    used = mult > 0
    hi = split.layers_hi.astype(np.int64)
    ch = split.count_hi.astype(np.int64)
    cl = split.count_lo.astype(np.int64)
    stages = np.asarray(stages, dtype=np.int64)
    m_all = np.asarray(micro_batches, dtype=float)
    rows = np.flatnonzero(np.isfinite(m_all) & split.feasible & (stages > 1))
    if top is not None and len(rows) > top:
        # the slowest stage's time (split_layers' model) bounds each candidate's flush from below
        # and above: m x slowest <= makespan <= pp x slowest + (m - 1) x slowest
        whole = np.maximum(np.rint(m_all[rows]), 1.0)
        low = whole * split.slowest_s[rows]
        high = (whole + stages[rows] - 1.0) * split.slowest_s[rows]
        bar = np.partition(high, top - 1)[top - 1]
        rows = rows[low <= bar * (1.0 + RANK_MARGIN)]
    if len(rows) == 0:
        return split
    R = len(rows)
    S = int(stages[rows].max())
    s_idx = np.arange(S)[None, :]
    L = np.zeros((R, S), dtype=np.int64)
    cls = np.full((R, S), -1, dtype=np.int64)
    for c in range(K):
        pc, mc = pos[rows, c][:, None], mult[rows, c][:, None]
        inside = used[rows, c][:, None] & (s_idx >= pc) & (s_idx < pc + mc)
        n = np.where(s_idx - pc < ch[rows, c][:, None], hi[rows, c][:, None], hi[rows, c][:, None] - 1)
        L = np.where(inside, n, L)
        cls = np.where(inside, c, cls)
    rr = np.arange(R)[:, None]
    ci = np.maximum(cls, 0)
    on = cls >= 0

    def table(a1, a0):
        return np.where(on, L * np.asarray(a1)[rows][rr, ci] + np.asarray(a0)[rows][rr, ci], 0.0)

    F, B = table(f1, f0), table(b1, b0)
    T = F + B
    m = m_all[rows]
    upper = T.sum(axis=1) + (np.maximum(np.rint(m), 1) - 1.0) * T.max(axis=1)

    # every one-layer move between two classes that could beat the min-max split
    t1 = np.asarray(f1) + np.asarray(b1)
    moves = []
    r_all = np.arange(R)
    for i in range(K):
        s_take = np.clip(pos[rows, i] + ch[rows, i] - 1, 0, S - 1)
        for j in range(K):
            if i == j:
                continue
            s_give = np.clip(np.where(cl[rows, j] > 0, pos[rows, j] + ch[rows, j], pos[rows, j]), 0, S - 1)
            ok = used[rows, i] & used[rows, j] & (L[r_all, s_take] >= 2) & (L[r_all, s_give] + 1 <= cap[rows, j])
            t_new = T[r_all, s_give] + t1[rows, j]
            ok &= (np.maximum(np.rint(m), 1) * t_new < upper)
            r = np.flatnonzero(ok)
            moves.append(np.stack([r, np.full(len(r), i), np.full(len(r), j), s_take[r], s_give[r]], axis=1))
    mv = np.concatenate(moves) if moves else np.zeros((0, 5), dtype=np.int64)
    if len(mv) == 0:
        return split
    vr, vi, vj, vt, vg = mv.T
    g_rows = rows[vr]
    Fv, Bv = F[vr].copy(), B[vr].copy()
    n_v = np.arange(len(mv))
    Fv[n_v, vt] -= np.asarray(f1)[g_rows, vi]
    Bv[n_v, vt] -= np.asarray(b1)[g_rows, vi]
    Fv[n_v, vg] += np.asarray(f1)[g_rows, vj]
    Bv[n_v, vg] += np.asarray(b1)[g_rows, vj]
    dcast = np.asarray(cast1)[g_rows, vj] - np.asarray(cast1)[g_rows, vi]
    lower = group_lower_bounds_s(schedule, Fv, Bv, stages[g_rows], m[vr]) + dcast
    keep = lower < upper[vr]
    if not keep.any():
        return split
    vr, vi, vj, vt, vg, Fv, Bv, dcast, lower = (a[keep] for a in (vr, vi, vj, vt, vg, Fv, Bv, dcast, lower))
    # the min-max split's exact makespan, for the candidates with a neighbour left
    base_rows = np.unique(vr)
    base = np.full(R, np.inf)
    base[base_rows] = group_makespans_s(schedule, F[base_rows], B[base_rows], stages[rows[base_rows]],
                                        m[base_rows])
    keep = lower < base[vr]
    if not keep.any():
        return split
    vr, vi, vj, Fv, Bv, dcast = (a[keep] for a in (vr, vi, vj, Fv, Bv, dcast))
    score = group_makespans_s(schedule, Fv, Bv, stages[rows[vr]], m[vr]) + dcast
    # per candidate, its best neighbour, taken only where strictly faster than the min-max split
    order = np.lexsort((score, vr))
    first = order[np.r_[True, vr[order][1:] != vr[order][:-1]]]
    win = first[score[first] < base[vr[first]] * (1.0 - 1e-12)]
    if len(win) == 0:
        return split
    g, i, j = rows[vr[win]], vi[win], vj[win]
    hi, ch, cl = hi.copy(), ch.copy(), cl.copy()
    # class i gives the last of its larger stages' layer
    ch[g, i] -= 1
    cl[g, i] += 1
    empty = ch[g, i] == 0
    hi[g[empty], i[empty]] -= 1
    ch[g[empty], i[empty]] = cl[g[empty], i[empty]]
    cl[g[empty], i[empty]] = 0
    # class j takes it on its first smaller stage, or on its first stage when all are equal
    some_lo = cl[g, j] > 0
    ch[g[some_lo], j[some_lo]] += 1
    cl[g[some_lo], j[some_lo]] -= 1
    gj, jj = g[~some_lo], j[~some_lo]
    hi[gj, jj] += 1
    ch[gj, jj] = 1
    cl[gj, jj] = mult[gj, jj] - 1
    slowest = split.slowest_s.copy()
    t_hi = np.where(used[g] & (ch[g] > 0), extra[g] + hi[g] * tau[g], -np.inf)
    t_lo = np.where(used[g] & (cl[g] > 0), extra[g] + (hi[g] - 1) * tau[g], -np.inf)
    slowest[g] = np.maximum(t_hi.max(axis=1), t_lo.max(axis=1))
    return Split(layers_hi=hi, count_hi=ch, count_lo=cl, slowest_s=slowest, feasible=split.feasible)
