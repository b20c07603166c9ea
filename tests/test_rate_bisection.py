"""The closed loop's rate by bisection (simulator.serving.rate_bisection), against Little's law
solved by hand."""
import numpy as np
import pytest

from simulator.serving.rate_bisection import bisect_rate


def test_a_fixed_latency_gives_clients_over_latency_and_a_growing_one_its_root():
    # latency 2 s whatever the rate: x x 2 = 8 clients at x = 4 requests/s;
    # latency 1 + x s: x (1 + x) = 6 at x = 2 (the positive root of x^2 + x - 6)
    clients = np.array([8.0, 6.0])
    slope = np.array([0.0, 1.0])
    base = np.array([2.0, 1.0])

    def in_flight_at(mid, out):
        np.multiply(mid, slope, out=out)
        np.add(out, base, out=out)
        np.multiply(mid, out, out=out)

    x = bisect_rate(0.0, 100.0, clients, (2,), in_flight_at)
    assert x == pytest.approx([4.0, 2.0], rel=1e-10)
