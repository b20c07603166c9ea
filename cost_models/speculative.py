"""Speculative decoding with the model's own multi-token-prediction (MTP) modules: how many tokens
a step yields, and what the draft module holds in memory.

A decode step that speculates drafts ``k`` tokens per request with the MTP module (k passes, one
token each, each feeding the next: DeepSeek-V3 report, arXiv 2412.19437, section 2.2; the
engines run one module k times when asked for more drafts than the checkpoint has modules), then
the main model verifies the request's last token and its k drafts in one pass (k + 1 queries per
request). The drafts are accepted up to the first one the main model rejects, and the step
always yields one token of the main model after them.

Accepted tokens: with each draft accepted with probability ``p`` given that all before it were
(an i.i.d. chain), a step yields on average

    E(k, p) = 1 + p + p^2 + ... + p^k = (1 - p^(k+1)) / (1 - p)

tokens (Leviathan, Kalman and Matias 2023, "Fast Inference from Transformers via Speculative
Decoding", arXiv 2211.17192, equation 1); E(k, 1) = k + 1.

A request's whole decode: E is the mean of one uncapped step. A request with n tokens left stops
at n, so its decode of n tokens takes E[S(n)] steps, S the first step at which the tokens kept
reach n. With X the tokens one step yields, P(X = j) = p^(j-1) (1 - p) for j = 1..k and
P(X = k + 1) = p^k, the renewal recursion is

    E[S(n)] = 1 + sum_j P(X = j) E[S(n - j)],   E[S(m <= 0)] = 0,

and the mean tokens per step over the decode is n / E[S(n)] (``decode_tokens_per_step``). It is
below min(E, n): at k = 3, p = 0.85 (E = 3.187) 1.739 at n = 2, 2.759 at n = 4, 2.964 at n = 16,
3.183 at n = 1023. The generating function sum_n E[S(n)] z^n = z / ((1 - z)(1 - f(z))), f the
probability generating function of X, and 1 - f(z) = (1 - z)(1 - (pz)^(k+1)) / (1 - pz), so

    E[S(n)] = n / E + c - D(n),   c = p / (1 - r) - (k + 1) r (1 - p) / (1 - r)^2,  r = p^(k+1),

with |D(n)| <= 2 (k + 1) p^n / (1 - r)^2: the renewal limit (c = E[X(X-1)] / (2 E^2)) holds
geometrically at rate p for every k (``renewal_horizon``).

The acceptance is a property of the model, its MTP module and the requests' text, not of the
hardware or the engine: no measured row here states it, so ``MTP_ACCEPTANCE_PRIOR`` is a
published figure, not a fitted one, and numbers that rest on it say so.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

#: acceptance of a drafted token (unfitted prior): DeepSeek-V3 report (arXiv 2412.19437, section
#: 5.4.3): "the acceptance rate of the second token prediction ranges between 85% and 90% across
#: various generation topics"; the lower end is taken.
MTP_ACCEPTANCE_PRIOR = 0.85
#: drafts per step above which no engine's MTP path goes in practice (TensorRT-LLM's MTP examples
#: use 1-3, vLLM / SGLang recommend 1-4); a larger value is refused as a typo
MAX_SPECULATIVE_TOKENS = 16


def expected_tokens_per_step(draft_tokens, acceptance):
    """Mean tokens a request gains per speculating step: (1 - p^(k+1)) / (1 - p) for ``k``
    drafts each accepted with probability ``p`` (k + 1 at p = 1; 1 at k = 0). Arrays broadcast."""
    k = np.asarray(draft_tokens, dtype=float)
    p = np.asarray(acceptance, dtype=float)
    safe = np.where(p < 1.0, p, 0.5)
    geometric = (1.0 - safe ** (k + 1.0)) / (1.0 - safe)
    return np.where(p < 1.0, geometric, k + 1.0)


#: absolute error allowed of an extrapolated E[S(n)] (>= 1): half an ulp of 1.0
_RENEWAL_TOLERANCE = 2.0 ** -53


def renewal_horizon(draft_tokens: int, acceptance: float) -> int:
    """Steps M beyond which E[S(n)] = E[S(M)] + (n - M) / E holds within 2^-52 (the error is
    D(M) - D(n), each at most ``_RENEWAL_TOLERANCE``): the smallest M with
    2 (k + 1) p^M / (1 - p^(k+1))^2 <= 2^-53 (the bound on D(n), module docstring). M = 1 where
    no step carries more than one token (k = 0 or p = 0). At k = 3: 57 at p = 0.5, 248 at
    p = 0.85, 389 at 0.9, 823 at 0.95, 4,506 at 0.99 (4,573 at most over k = 1..16); it grows as
    1 / (1 - p), and at p = 1 the steps are exact (ceil(n / (k + 1))), so no horizon is needed.
    Where M exceeds the n asked (p near 1), the recursion runs to n itself: exact for every p,
    at n * 8 bytes."""
    k, p = int(draft_tokens), float(acceptance)
    if k == 0 or p <= 0.0:
        return 1
    r = p ** (k + 1)
    bound = _RENEWAL_TOLERANCE * (1.0 - r) ** 2 / (2.0 * (k + 1))
    return max(int(np.ceil(np.log(bound) / np.log(p))), 1)


#: table length up to which the recursion runs as a plain loop (p <= 0.99 at any k: 4,600 at most);
#: a longer one (p nearer 1 and n beyond this) runs as scipy's IIR filter, imported only then
#: (scipy.signal takes about a second to import)
_LOOP_STEPS = 8192


@lru_cache(maxsize=64)
def _steps_table(draft_tokens: int, acceptance: float, length: int) -> np.ndarray:
    """E[S(m)] for m = 1..length (index m - 1), by the renewal recursion (sums of positive
    terms): a loop, or an IIR filter of the step's token distribution run over ones."""
    k, p = draft_tokens, acceptance
    share = [p ** (j - 1) * (1.0 - p) for j in range(1, k + 1)] + [p ** k]    # k drafts kept: k + 1
    if length <= _LOOP_STEPS:
        steps = [0.0] * (length + k + 1)          # k + 1 leading zeros: E[S(m <= 0)] = 0
        for m in range(k + 1, length + k + 1):
            steps[m] = 1.0 + sum(q * steps[m - j] for j, q in enumerate(share, start=1))
        table = np.array(steps[k + 1:])
    else:
        from scipy.signal import lfilter
        table = lfilter([1.0], np.concatenate(([1.0], -np.array(share))), np.ones(length))
    table.flags.writeable = False
    return table


def _expected_steps_one(n: np.ndarray, k: int, p: float) -> np.ndarray:
    """``expected_decode_steps`` for one (k, p) over an array of whole n >= 1."""
    if k == 0 or p <= 0.0:
        return n.copy()
    if p >= 1.0:
        return np.ceil(n / (k + 1.0))
    horizon = renewal_horizon(k, p)
    length = int(min(n.max(initial=1.0), horizon))
    table = _steps_table(k, p, length)
    per_step = float(expected_tokens_per_step(k, p))
    inside = np.minimum(n, length).astype(np.int64) - 1
    # beyond the horizon the renewal limit has converged: one more step per E tokens
    return table[inside] + np.maximum(n - length, 0.0) / per_step


def expected_decode_steps(tokens, draft_tokens, acceptance):
    """E[S(n)]: mean decode steps a request takes to generate ``tokens`` (n) tokens when each
    step drafts ``draft_tokens`` (k) accepted with probability ``acceptance`` (p) each and stops
    at n (module docstring: the renewal recursion, and beyond ``renewal_horizon`` its
    extrapolation, within 2^-52 of it). k = 0 or p = 0 gives n steps, p = 1 ceil(n / (k + 1)).
    A fractional n counts as ceil(n) (the step that reaches n). Arrays broadcast; n >= 1."""
    n = np.ceil(np.asarray(tokens, dtype=float))
    if np.ndim(draft_tokens) == 0 and np.ndim(acceptance) == 0:      # one context: the callers' case
        out = _expected_steps_one(np.atleast_1d(n), int(draft_tokens), float(acceptance)).reshape(n.shape)
        return out if out.ndim else float(out)
    n, k, p = np.broadcast_arrays(n, np.asarray(draft_tokens), np.asarray(acceptance, dtype=float))
    out = np.empty(n.shape, dtype=float)
    pairs = np.stack([k.ravel().astype(float), p.ravel()], axis=1)
    for kk, pp in np.unique(pairs, axis=0):
        rows = (k.ravel() == kk) & (p.ravel() == pp)
        out.ravel()[rows] = _expected_steps_one(n.ravel()[rows], int(kk), float(pp))
    return out if out.ndim else float(out)


def decode_tokens_per_step(tokens, draft_tokens, acceptance):
    """Mean tokens a step yields over a request's whole decode of ``tokens`` (n) tokens:
    n / E[S(n)] (``expected_decode_steps``); below min(E, n), tending to E as n grows (at k = 3,
    p = 0.85: 1.739 at n = 2 against min(E, n) = 2, 3.183 at n = 1023 against E = 3.187).
    Arrays broadcast."""
    n = np.asarray(tokens, dtype=float)
    return n / expected_decode_steps(n, draft_tokens, acceptance)
