"""The closed loop's request rate by bisection, in place (aggregated and disaggregated serving).

A closed loop of clients, each sending its next request when the last one finishes, runs at the
rate x (requests/s) where x times a request's latency at that rate equals the clients (Little's
law); the latency grows with x, so the rate is bisected in [lo, hi]. A search sweeps tens of
thousands of rows ``BISECTION_STEPS`` times, so the step works in preallocated arrays: fresh
temporaries per operation cost as much as the arithmetic.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

#: bisection iterations for the closed loop's rate (2^-40 relative precision)
BISECTION_STEPS = 40


def bisect_rate(lo, hi, clients, shape: tuple, in_flight_at: Callable[[np.ndarray, np.ndarray], None]) -> np.ndarray:
    """The rate x in [``lo``, ``hi``] (requests/s, broadcast to ``shape``) at which the requests
    in flight, x x latency(x), meet ``clients``. ``in_flight_at(mid, out)`` writes x x latency(x)
    at the rates ``mid`` into ``out`` (both of ``shape``; ``out`` is its scratch as well);
    returns the middle of the last interval."""
    lo, hi = np.array(np.broadcast_to(lo, shape), dtype=float), np.array(np.broadcast_to(hi, shape), dtype=float)
    mid, in_flight = np.empty(shape), np.empty(shape)
    too_fast = np.empty(shape, dtype=bool)
    for _ in range(BISECTION_STEPS):
        np.add(lo, hi, out=mid)
        np.multiply(0.5, mid, out=mid)
        in_flight_at(mid, in_flight)
        np.greater(in_flight, clients, out=too_fast)
        np.copyto(hi, mid, where=too_fast)
        np.logical_not(too_fast, out=too_fast)
        np.copyto(lo, mid, where=too_fast)
    return 0.5 * (lo + hi)
