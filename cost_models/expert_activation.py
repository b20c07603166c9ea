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
"""
from __future__ import annotations

import numpy as np
from scipy.special import bdtr


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
    At ep = 1 it is E[distinct] exactly."""
    e = np.asarray(num_experts, dtype=float)
    ep_ = np.maximum(np.asarray(ep, dtype=float), 1.0)
    e, k, t, ep_ = np.broadcast_arrays(e, np.asarray(top_k, dtype=float),
                                       np.maximum(np.asarray(tokens, dtype=float), 0.0), ep_)
    mean = expected_distinct_experts(e, k, t) / ep_
    m = np.maximum(np.rint(e / ep_), 1.0)
    split = ep_ > 1.0
    if not np.any(split):
        return mean
    p = np.clip(1.0 - np.clip(1.0 - k / e, 0.0, 1.0) ** t, 0.0, 1.0)
    x = np.arange(int(np.max(m[split])), dtype=float)              # 0 .. m - 1 of the largest m
    shape = (1,) * e.ndim + (-1,)
    xs = x.reshape(shape)
    mi = m.astype(np.int64)[..., None]
    cdf = bdtr(np.minimum(xs.astype(np.int64), mi), mi, p[..., None])
    tail = np.where(xs < m[..., None], 1.0 - cdf ** ep_[..., None], 0.0)
    return np.where(split, tail.sum(axis=-1), mean)
