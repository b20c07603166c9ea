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
"""
from __future__ import annotations

import numpy as np


def expected_distinct_experts(num_experts, top_k, tokens):
    """Expected distinct experts activated by ``tokens`` tokens routed top-k of E (arrays ok)."""
    e = np.asarray(num_experts, dtype=float)
    k = np.asarray(top_k, dtype=float)
    t = np.maximum(np.asarray(tokens, dtype=float), 0.0)
    miss = np.clip(1.0 - k / e, 0.0, 1.0)
    return e * (1.0 - miss ** t)
