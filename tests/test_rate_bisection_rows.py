"""bisect_rate_rows: per-row brackets and halvings, each row's rate from its own values alone."""
import numpy as np
import pytest

from simulator.serving.rate_bisection import bisect_rate_rows


def _in_flight(mid, out, cols):
    # x (t + x): latency t + x grows with the rate; x (1 + x) = 6 at x = 2, = 12 at x = 3 (by hand)
    (t,) = cols
    np.add(t, mid, out=out)
    np.multiply(mid, out, out=out)


def test_rows_with_their_own_brackets_and_steps_find_the_hand_roots():
    lo = np.array([0.0, 1.9, 2.5, 0.0])
    width = np.array([10.0, 0.2, 1.0, 10.0])
    steps = np.array([40, 28, 36, 40])
    clients = np.array([6.0, 6.0, 12.0, 12.0])
    x = bisect_rate_rows(lo, width, steps, clients, (np.ones(4),), _in_flight)
    # final interval width x 2^-steps: 10 / 2^40 ~ 9e-12, 0.2 / 2^28 ~ 7e-10, 1 / 2^36 ~ 1.5e-11
    assert np.allclose(x, [2.0, 2.0, 3.0, 3.0], rtol=0, atol=[1e-11, 1e-9, 2e-11, 1e-11])


def test_a_row_gives_the_same_rate_alone_as_beside_others():
    lo, width, steps, clients = [0.0, 2.5, 1.9], [10.0, 1.0, 0.2], [40, 7, 28], [12.0, 12.0, 6.0]
    together = bisect_rate_rows(np.array(lo), np.array(width), np.array(steps), np.array(clients),
                                (np.ones(3),), _in_flight)
    for i in range(3):
        alone = bisect_rate_rows(np.array(lo[i:i + 1]), np.array(width[i:i + 1]), np.array(steps[i:i + 1]),
                                 np.array(clients[i:i + 1]), (np.ones(1),), _in_flight)
        assert alone[0] == together[i]


def test_no_halving_gives_the_middle_of_the_bracket():
    x = bisect_rate_rows(np.array([1.0]), np.array([2.0]), np.array([0]), np.array([6.0]), (1.0,), _in_flight)
    assert x[0] == 2.0


def test_bisect_rate_selects_the_bits_the_masked_copies_gave():
    # bisect_rate's bracket moves by a select on the bits; the masked copies it replaces, here by
    # hand, give the same rates bit for bit (x (t + x) = clients: x = 2 at t = 1, 6 clients)
    from simulator.serving.rate_bisection import BISECTION_STEPS, bisect_rate
    rng = np.random.default_rng(3)
    t = np.concatenate([[1.0, 1.0], rng.uniform(0.0, 5.0, 998)])
    clients = np.concatenate([[6.0, 12.0], rng.uniform(0.1, 400.0, 998)])

    def in_flight(mid, out):
        np.add(t, mid, out=out)
        np.multiply(mid, out, out=out)
    got = bisect_rate(0.0, 30.0, clients, t.shape, in_flight)
    lo, hi = np.zeros(t.shape), np.full(t.shape, 30.0)
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        fast = mid * (t + mid) > clients
        np.copyto(hi, mid, where=fast)
        np.copyto(lo, mid, where=~fast)
    assert np.array_equal(got, 0.5 * (lo + hi))
    assert got[0] == pytest.approx(2.0, abs=1e-10) and got[1] == pytest.approx(3.0, abs=1e-10)
