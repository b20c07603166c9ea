"""Mean keys a prompt's queries attend to in a sliding-window layer (pure, numpy-friendly).

A causal prompt of n tokens: query i (1-based) attends to i keys in a full layer and to
min(i, w) in a layer with a window of w keys. Summed over the prompt, for w < n,

    sum_i min(i, w) = w (w + 1) / 2 + (n - w) w = n w - w (w - 1) / 2,

so the mean keys per query is w - w (w - 1) / (2 n) (gpt-oss-120b, n = 256, w = 128: 96.25, not
min(n / 2, w) = 128, which takes the window of the mean instead of the mean of the window);
for n <= w the window never binds and the mean is the full layer's.

A chunk of c tokens whose queries sit at positions o + 1 .. o + c (o tokens of the prompt before
it) has mean (1 / c) sum_{j=1..c} min(o + j, w): o + (c + 1) / 2 when o + c <= w, w when o >= w,
and (sum_{i=o+1..w} i + (o + c - w) w) / c in between. The serving cost models do not price
chunks one by one: every chunk of a prompt of n tokens is priced with the prompt's mean keys
(``prefill_keys`` = n / 2 for the full layers, so the chunks sum to the prompt's causal
attention; ``simulator.serving.aggregated``), and the window layers likewise take the prompt's
window mean above for every chunk, so the chunks' window attention sums to the prompt's exactly.

The full layers' n / 2 is the continuous mean (half a key below the discrete (n + 1) / 2); the
window mean is capped at it, so a window layer never charges more keys than a full one (the
half key matters only for n just above w).
"""
from __future__ import annotations

import numpy as np


def causal_window_mean_keys(mean_keys, window):
    """Mean keys per query of a causal prompt's sliding-window layer (window ``window`` keys),
    given the full layers' mean ``mean_keys`` = n / 2 of a prompt of n tokens (numpy-friendly):
    min(n / 2, w - w (w - 1) / (2 n)) for n > w, n / 2 otherwise (module docstring)."""
    k = np.asarray(mean_keys, dtype=float)
    w = float(window)
    n = 2.0 * k
    inside = w - w * (w - 1.0) / (2.0 * np.maximum(n, 1e-12))
    return np.where(n > w, np.minimum(k, inside), k)
