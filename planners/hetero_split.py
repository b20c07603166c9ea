"""Layers to unequal pipeline stages: the split that minimises the slowest stage, vectorized.

A stage s holding n_s layers takes ``extra_s + n_s * tau_s`` per micro-batch (``tau_s``: one
layer on its pool's GPU kind; ``extra_s``: embedding, LM head, sends), holds at most ``cap_s``
layers in its pool's memory and at least one. Stages come in classes of identical stages
(``mult`` of each). Since only the counts matter for a contiguous split, the least slowest
stage is the least X with

    sum_s min(cap_s, floor((X - extra_s) / tau_s)) >= L,   floor((X - extra_s) / tau_s) >= 1

found by bisection on X for many candidates at once; the surplus layers are then taken from the
classes with the slowest layer (largest tau: the split's sum of stage times, which the pipeline's
fill and drain pay, is then least), one layer per stage, so a class may split into two blocks that differ by one
layer. ``split_layers_ilp`` states the same problem for pulp/CBC (tests check both agree).
Metis (Um et al., ATC 2024) and Sailor (Strati et al., SOSP 2025) split layers over unequal
GPUs in proportion to measured speed; this is the exact min-max of that split.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: bisection steps (the bracket, about one layer's time wide, shrinks by 2^-34)
_STEPS = 34
#: layers of rounding slack in floor((X - extra) / tau), so X = extra + n tau counts n layers
_EPS = 1e-9


@dataclass(frozen=True)
class Split:
    """Per candidate (rows) and class (columns): layers on the class's first ``count_hi`` stages
    (``layers_hi``) and on the rest (``layers_hi - 1``, ``count_lo`` of them), the slowest stage
    in seconds, and whether a split exists (``feasible``)."""

    layers_hi: np.ndarray
    count_hi: np.ndarray
    count_lo: np.ndarray
    slowest_s: np.ndarray
    feasible: np.ndarray


def _feasible(mult, cap, mcap, L: float) -> np.ndarray:
    """(C,) from (K, C) classes-first arrays: no more stages than layers, every used class has
    room for a layer, and the stages have room for all of them."""
    used = mult > 0
    return (mult.sum(axis=0) <= L) & np.all(~used | (cap >= 1), axis=0) & ((mult * mcap).sum(axis=0) >= L)


def split_feasible(mult, cap, num_layers: int) -> np.ndarray:
    """Whether ``split_layers`` finds a split (its ``feasible``), without splitting: (C, K) ``mult``
    and ``cap`` as it takes them."""
    mult = np.ascontiguousarray(np.asarray(mult, dtype=float).T)
    cap = np.ascontiguousarray(np.floor(np.asarray(cap, dtype=float)).T)
    L = float(num_layers)
    return _feasible(mult, cap, np.where(mult > 0, np.minimum(cap, L), 0.0), L)


def split_layers(mult, tau, extra, cap, num_layers: int) -> Split:
    """The min-max split of ``num_layers`` layers over classes of stages, for every row.

    Args: (C, K) arrays: ``mult`` stages per class (0: unused), ``tau`` seconds per layer,
    ``extra`` fixed seconds per stage, ``cap`` largest layer count per stage (may be inf).
    """
    # classes along the first axis: the sums over classes are then K contiguous vector adds
    mult = np.ascontiguousarray(np.asarray(mult, dtype=float).T)
    tau = np.ascontiguousarray(np.maximum(np.asarray(tau, dtype=float), 1e-300).T)
    extra = np.ascontiguousarray(np.asarray(extra, dtype=float).T)
    cap = np.ascontiguousarray(np.floor(np.asarray(cap, dtype=float)).T)
    used = mult > 0
    L = float(num_layers)
    mcap = np.where(used, np.minimum(cap, L), 0.0)
    feasible = _feasible(mult, cap, mcap, L)
    lo = np.where(used, extra + tau, -np.inf).max(axis=0)        # every stage holds a layer
    tau_max = np.where(used, tau, 0).max(axis=0)
    hi = np.where(used, extra, -np.inf).max(axis=0) + L * tau_max
    # the continuous relaxation brackets the optimum within one layer of the slowest class:
    # sum mult (X - extra) / tau = L at X_c; floor loses under one layer per stage, so
    # X_c + max tau always holds L layers when no cap binds
    inv = np.where(used, 1.0 / tau, 0.0)
    w = mult * inv
    x_c = (L + (w * extra).sum(axis=0)) / np.maximum(w.sum(axis=0), 1e-300)
    lo = np.minimum(np.maximum(lo, x_c), hi)
    shift = extra * inv - _EPS

    def capacity(x):
        total = np.zeros_like(x)
        for c in range(mult.shape[0]):
            n = np.floor(x * inv[c] - shift[c])
            total += mult[c] * np.maximum(np.minimum(n, mcap[c]), 0.0)
        return total

    near = np.minimum(x_c + tau_max, hi)
    hi = np.where(capacity(near) >= L, near, hi)
    ok_lo = capacity(lo) >= L          # the lower bound itself may already be enough
    hi = np.where(ok_lo, lo, hi)
    for _ in range(_STEPS):
        mid = 0.5 * (lo + hi)
        ok = capacity(mid) >= L
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    n = np.where(used, np.clip(np.floor(hi * inv - shift), 1, np.maximum(cap, 1)), 0.0)
    surplus = (mult * n).sum(axis=0) - L
    surplus = np.where(feasible, np.maximum(surplus, 0), 0)
    # every stage is within the least slowest stage whichever layers go, so the surplus only
    # changes the sum of the stages' times (the pipeline's fill and drain): take it from the
    # classes with the slowest layer first (each layer removed saves its tau), the slowest
    # stage among equal taus
    time = np.where(used, extra + n * tau, -np.inf)
    order = np.lexsort((-time, -np.where(used, tau, -np.inf)), axis=0)
    taken = np.zeros_like(n)
    cols = np.arange(n.shape[1])
    for j in range(n.shape[0]):
        c = order[j]
        room = mult[c, cols] * (n[c, cols] - 1)
        r = np.minimum(surplus, np.maximum(room, 0))
        taken[c, cols] = r
        surplus = surplus - r
    m_safe = np.maximum(mult, 1)
    q = np.floor(taken / m_safe)
    rem = taken - q * m_safe
    layers_hi = n - q
    count_lo = np.where(used, rem, 0)
    count_hi = np.where(used, mult - rem, 0)
    t_hi = np.where(used & (count_hi > 0), extra + layers_hi * tau, -np.inf)
    t_lo = np.where(used & (count_lo > 0), extra + (layers_hi - 1) * tau, -np.inf)
    slowest = np.maximum(t_hi.max(axis=0), t_lo.max(axis=0))
    layers_hi, count_hi, count_lo = layers_hi.T, count_hi.T, count_lo.T
    return Split(layers_hi=layers_hi.astype(np.int64), count_hi=count_hi.astype(np.int64),
                 count_lo=count_lo.astype(np.int64), slowest_s=np.where(feasible, slowest, np.inf),
                 feasible=feasible)


def split_layers_ilp(tau, extra, cap, num_layers: int, time_limit_s: float = 30.0):
    """The same min-max split for one pipeline of stages in order, as an integer program.

    ``tau``, ``extra``, ``cap``: per stage. Returns (layers per stage, slowest stage seconds) or
    None when no split exists. For checks of ``split_layers``; slower.
    """
    import warnings

    import pulp

    tau = [float(t) for t in tau]
    S = len(tau)
    scale = max(max(tau), max(float(e) for e in extra), 1e-30)
    prob = pulp.LpProblem("hetero_split", pulp.LpMinimize)
    new_var = getattr(prob, "add_variable", None) or pulp.LpVariable
    top = new_var("T", lowBound=0)
    n = [new_var(f"n_{s}", lowBound=1, upBound=None if not math.isfinite(cap[s]) else int(cap[s]), cat="Integer")
         for s in range(S)]
    prob += top
    prob += pulp.lpSum(n) == int(num_layers)
    for s in range(S):
        prob += (float(extra[s]) + tau[s] * n[s]) / scale <= top
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        status = prob.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s))
    if pulp.LpStatus[status] != "Optimal":
        return None
    layers = [int(round(v.value())) for v in n]
    return layers, max(float(extra[s]) + tau[s] * layers[s] for s in range(S))
