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
    # hi = mid where too fast, lo = mid elsewhere, as a select on the bits (x ^ ((x ^ mid) & mask),
    # mask all ones or zeros): the same numbers as masked copies (np.copyto(where=)), which cost
    # several times the arithmetic over rows in random order
    lo_bits, hi_bits, mid_bits = lo.view(np.int64), hi.view(np.int64), mid.view(np.int64)
    mask, diff = np.empty(shape, dtype=np.int64), np.empty(shape, dtype=np.int64)
    for _ in range(BISECTION_STEPS):
        np.add(lo, hi, out=mid)
        np.multiply(0.5, mid, out=mid)
        in_flight_at(mid, in_flight)
        np.greater(in_flight, clients, out=too_fast)
        np.subtract(0, too_fast, out=mask, dtype=np.int64)            # -1 (all ones) where too fast
        np.bitwise_xor(hi_bits, mid_bits, out=diff)
        np.bitwise_and(diff, mask, out=diff)
        np.bitwise_xor(hi_bits, diff, out=hi_bits)
        np.bitwise_xor(lo_bits, mid_bits, out=diff)
        np.bitwise_and(diff, mask, out=diff)
        np.bitwise_xor(mid_bits, diff, out=lo_bits)                   # lo where too fast, else mid
    return 0.5 * (lo + hi)


def bisect_rate_rows(lo, width, steps, clients, columns: tuple,
                     in_flight_at: Callable[[np.ndarray, np.ndarray, tuple], None]) -> np.ndarray:
    """``bisect_rate`` over flat rows, each with its own bracket [``lo``, ``lo`` + ``width``] and
    its own number of halvings ``steps`` (0 .. ``BISECTION_STEPS``): a row warm-started in a
    narrow bracket needs fewer to reach the same precision, and each row's result depends on its
    own values alone. The rows are ordered by their steps (most first), so the halving k works on
    the leading rows that still need it (views, no copies). ``in_flight_at(mid, out, cols)``
    writes x x latency(x) at ``mid`` into ``out``, ``cols`` being ``columns`` (arrays of the
    rows, or scalars) at those leading rows. Returns the middle of each row's last interval.

    The bracket moves by adding the half-width where the rate is not too fast (lo + h x ok): a
    masked copy (``np.copyto(where=)``) over rows in random order costs several times the
    arithmetic. The middles then differ from (lo + hi) / 2 in the last bits, not the precision."""
    lo = np.array(lo, dtype=float).ravel()
    width = np.broadcast_to(np.asarray(width, dtype=float), lo.shape)
    steps = np.broadcast_to(np.asarray(steps, dtype=np.int64), lo.shape)
    order = np.argsort(-steps, kind="stable")
    lo, width, steps = lo[order], width[order], steps[order]
    need = np.broadcast_to(np.asarray(clients, dtype=float), lo.shape)[order]
    cols = tuple(c if np.ndim(c) == 0 else np.broadcast_to(np.asarray(c, dtype=float), order.shape)[order]
                 for c in columns)
    # rows still halving at step k: the first active[k] (steps sorted, most first)
    active = np.searchsorted(-steps, -np.arange(BISECTION_STEPS), side="left")
    half, mid, in_flight = np.empty(lo.shape), np.empty(lo.shape), np.empty(lo.shape)
    ok = np.empty(lo.shape, dtype=bool)
    for k in range(BISECTION_STEPS):
        n = int(active[k])
        if n == 0:
            break
        h, m, f, o = half[:n], mid[:n], in_flight[:n], ok[:n]
        np.multiply(width[:n], 0.5 ** (k + 1), out=h)
        np.add(lo[:n], h, out=m)
        in_flight_at(m, f, tuple(c if np.ndim(c) == 0 else c[:n] for c in cols))
        np.less_equal(f, need[:n], out=o)
        np.multiply(h, o, out=h)
        np.add(lo[:n], h, out=lo[:n])
    x = np.empty(lo.shape)
    x[order] = lo + width * np.exp2(-(steps + 1.0))
    return x
