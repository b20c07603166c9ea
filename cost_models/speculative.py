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

The acceptance is a property of the model, its MTP module and the requests' text, not of the
hardware or the engine: no measured row here states it, so ``MTP_ACCEPTANCE_PRIOR`` is a
published figure, not a fitted one, and numbers that rest on it say so.
"""
from __future__ import annotations

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
