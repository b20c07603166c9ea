"""How many distinct experts a batch of tokens activates in one MoE layer.

Each token picks ``top_k`` of ``E`` experts. With a router that spreads tokens uniformly and
independently, a given expert is missed by one token with probability 1 - k/E, so by ``T``
tokens with probability (1 - k/E)^T, and the expected number of distinct experts activated is

    E[distinct] = E * (1 - (1 - k/E)^T)

(the occupancy problem: Feller, "An Introduction to Probability Theory and Its Applications",
Vol. 1, 3rd ed. 1968, chapter II.5 and IV.2). Decode streams from HBM only the weights of the
experts some token of the step was routed to: at small batches a fraction of them, and all E
once T*k >> E. Real routers are skewed, which activates fewer experts than this uniform bound
at the same T; the bound is used because the skew is not known per model.

Under expert parallelism each of ``ep`` GPUs holds m = E / ep of the experts, and the step (and
the combine all-to-all after it) waits for the busiest GPU, so the experts a GPU streams are the
expected maximum over the ep GPUs of the distinct experts hit on each, not the mean E[distinct] /
ep (``expected_busiest_gpu_experts``). One GPU's count is the number of its m experts hit by at
least one of T tokens; each is hit with probability p = 1 - (1 - k/E)^T (as above), and the count
is taken as Binomial(m, p), the GPUs as independent, so P(max <= x) = F(x)^ep with F the binomial
CDF and E[max] = sum_{x=0}^{m-1} (1 - F(x)^ep) (the tail-sum formula for a non-negative integer
variable; the maximum of exchangeable counts approximated by independent ones, as in the
balls-into-bins maximum load, Raab & Steger, RANDOM 1998, "Balls into bins - a simple and tight
analysis"). Both simplifications drop negative correlations (a token's k experts are distinct;
experts hit on one GPU are not on another) and their errors offset: against a seeded Monte
Carlo of uniform top-8-of-256 routing on 8 GPUs the mean busiest count is 2.544 vs 2.56 at 1
token, 6.56 vs 6.57 at 4, 16.71 vs 16.70 at 16 (the mean: 1.0, 3.8, 12.7). Group-limited
routing (DeepSeek-V3's n_group / topk_group) concentrates a token's experts on fewer GPUs and
raises the maximum further (about 3.5 at one token for DeepSeek-R1 on 8 GPUs); it is not
modelled, so this is a lower bound for such routers.

The approximation is floored at what holds exactly for every routing: the busiest GPU streams
at least the mean ``E[distinct] / ep`` (a maximum is never below the mean), and once a token is
routed (T >= 1) at least ``ceil(k / ep)`` experts (one token's k distinct experts on ep GPUs,
pigeonhole). With one expert a GPU the binomial maximum falls below that: 8 experts top-2 on
8 GPUs, one token, gives 1 - (3/4)^8 = 0.900 while exactly two GPUs each stream one expert.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

#: points of the table of E[max] against p, for one (experts a GPU, ep): p = sin^2(u) on an even
#: u grid over [0, pi/2] (dense at both ends, where E[max] bends sharpest: a few experts hit, or
#: all but a few), read by linear interpolation; within 1e-5 of the exact sum, relative
#: (``tests/test_expert_activation_busiest.py``)
BUSIEST_TABLE_POINTS = 2049


def expected_distinct_experts(num_experts, top_k, tokens):
    """Expected distinct experts activated by ``tokens`` tokens routed top-k of E (arrays ok)."""
    e = np.asarray(num_experts, dtype=float)
    k = np.asarray(top_k, dtype=float)
    t = np.maximum(np.asarray(tokens, dtype=float), 0.0)
    miss = np.clip(1.0 - k / e, 0.0, 1.0)
    return e * (1.0 - miss ** t)


def expected_busiest_gpu_experts(num_experts, top_k, tokens, ep):
    """Expected distinct experts active on the busiest of ``ep`` GPUs that each hold
    ``num_experts / ep`` experts, for ``tokens`` tokens routed top-k of E (arrays ok): E[max] =
    sum_{x=0}^{m-1} (1 - F(x)^ep), F the Binomial(m, 1 - (1 - k/E)^T) CDF (module docstring).
    At ep = 1 it is E[distinct] exactly. Floored at the exact lower bounds
    ``max(E[distinct] / ep, ceil(k / ep) if T >= 1)`` (module docstring)."""
    e = np.asarray(num_experts, dtype=float)
    ep_ = np.maximum(np.asarray(ep, dtype=float), 1.0)
    e, k, t, ep_ = np.broadcast_arrays(e, np.asarray(top_k, dtype=float),
                                       np.maximum(np.asarray(tokens, dtype=float), 0.0), ep_)
    # (1 - k/E)^T once: ``expected_distinct_experts``'s E (1 - miss^T) and the hit probability
    # 1 - miss^T share it (the same operations, the same numbers)
    none_hit = np.clip(1.0 - k / e, 0.0, 1.0) ** t
    mean = e * (1.0 - none_hit) / ep_
    m = np.maximum(np.rint(e / ep_), 1.0)
    split = ep_ > 1.0
    if not np.any(split):
        return mean
    p = np.clip(1.0 - none_hit, 0.0, 1.0)
    out = np.array(mean, dtype=float)
    mi, epi = m.astype(np.int64), np.rint(ep_).astype(np.int64)
    # one table per (experts a GPU, ep) pair: the pairs as one integer key (no Python tuple a row)
    base = int(epi.max()) + 1
    key = mi * base + epi
    for kk in np.unique(key[split]).tolist():
        rows = split & (key == kk)
        grid, table = _busiest_table(kk // base, kk % base)
        out[rows] = np.interp(p[rows], grid, table)
    floor = np.maximum(mean, np.where(t >= 1.0, np.minimum(np.ceil(k / ep_), m), 0.0))
    return np.where(split, np.maximum(out, floor), out)


def busiest_gpu_experts_exact(m: int, ep: int, p) -> np.ndarray:
    """E[max] = sum_{x=0}^{m-1} (1 - F(x)^ep) for ``ep`` GPUs of ``m`` experts each hit with
    probability ``p`` (array): the exact sum the table of ``expected_busiest_gpu_experts`` holds."""
    from scipy.special import bdtr      # here, not at import: scipy.special costs ~0.15 s to load
    p = np.asarray(p, dtype=float)
    x = np.arange(m, dtype=np.int64)
    cdf = bdtr(x, m, p[..., None])
    return (1.0 - cdf ** ep).sum(axis=-1)


@lru_cache(maxsize=256)
def _busiest_table(m: int, ep: int) -> tuple[np.ndarray, np.ndarray]:
    """(p grid, E[max] on it) for ``ep`` GPUs of ``m`` experts: computed once per pair (a plan
    evaluates a layout's steps hundreds of times at other token counts), read-only."""
    grid = np.sin(np.linspace(0.0, np.pi / 2, BUSIEST_TABLE_POINTS)) ** 2
    table = busiest_gpu_experts_exact(m, ep, grid)
    grid.flags.writeable = False
    table.flags.writeable = False
    return grid, table
