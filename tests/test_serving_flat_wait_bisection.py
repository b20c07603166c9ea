"""The disaggregated loop's rate bisection on rows whose wait is their synchronised one at every
rate of the bracket (``disaggregated._flat_wait_rows``): x (sync + after) alone, the same rates bit
for bit as the whole M/D/c in-flight count gives them."""
import numpy as np

from simulator.serving.disaggregated import _flat_wait_rows, _mdc_queue, _throughput_bisection
from simulator.serving.rate_bisection import BISECTION_STEPS, bisect_rate_rows


def _reference(lo, width, steps, capacity, queue, cap, before_wait, sync, t_kv, decode_s, n_clients):
    """The in-flight count as written before (mdc mean wait with its clip at 0 and its 0.5 apart)."""
    c, expo, svc = queue
    after = before_wait + t_kv + decode_s

    def in_flight(mid, out, cols):
        capa, e, s, sv, lim, syn, rest = cols
        rho = np.minimum(np.maximum(mid / capa, 0.0), 0.999999)
        wq = rho ** e / (s * (1.0 - rho)) * 0.5 * sv
        out[:] = mid * (np.maximum(np.minimum(wq, lim), syn) + rest)
    return bisect_rate_rows(lo, width, steps, n_clients, (capacity, expo, c, svc, cap, sync, after), in_flight)


def test_a_synchronised_wait_above_the_cap_gives_the_hand_rate():
    # 2 prefill servers of service 0.02 s (capacity 100 requests/s), cap 0.2 s below the
    # synchronised 0.5 s: TTFT's wait is 0.5 s at any rate, so x (0.5 + 1.5) = 10 clients: x = 5
    queue = _mdc_queue(np.array([2.0]), np.array([0.02]))
    lo, width, steps = np.zeros(1), np.array([8.0]), np.array([BISECTION_STEPS])
    cols = (np.array([100.0]), queue[1], queue[0], queue[2] * 0.5, np.array([0.2]), np.array([0.5]),
            np.array([1.5]))
    assert _flat_wait_rows(lo, width, cols, 1).tolist() == [0]
    x = _throughput_bisection(lo, width, steps, np.array([100.0]), queue, np.array([0.2]), np.array([1.0]),
                              np.array([0.5]), np.array([0.1]), np.array([0.4]), np.array([10.0]))
    assert abs(x[0] - 5.0) <= 8.0 * 2.0 ** -BISECTION_STEPS


def test_a_loaded_row_keeps_the_queue_wait():
    # one server of 0.1 s (capacity 10 /s), the bracket up to 9.9 /s: rho 0.99 waits
    # 0.99^1.83 / 0.01 x 0.05 ~ 4.9 s, far above the synchronised 0.01 s
    queue = _mdc_queue(np.array([1.0]), np.array([0.1]))
    cols = (np.array([10.0]), queue[1], queue[0], queue[2] * 0.5, np.array([10.0]), np.array([0.01]),
            np.array([0.1]))
    assert _flat_wait_rows(np.zeros(1), np.array([9.9]), cols, 1).size == 0


def test_rows_give_the_rates_of_the_whole_in_flight_count_bit_for_bit():
    rng = np.random.default_rng(7)
    n = 4000
    servers = rng.integers(1, 9, n).astype(float)
    service = rng.uniform(0.005, 0.5, n)
    capacity = servers / service
    cap = np.where(rng.random(n) < 0.3, 0.0, rng.uniform(0.0, 3.0, n))
    cap[:5] = np.nan
    sync = np.where(rng.random(n) < 0.2, 0.0, rng.uniform(0.0, 2.0, n))
    before, kv, decode = rng.uniform(0.01, 1.0, n), rng.uniform(0.0, 0.05, n), rng.uniform(0.5, 40.0, n)
    clients = rng.uniform(1.0, 2000.0, n)
    hi = np.minimum(capacity * 0.999999, clients / (decode + kv))
    lo = np.where(rng.random(n) < 0.5, 0.0, hi * rng.uniform(0.0, 0.9, n))
    width = np.where(lo > 0.0, (hi - lo) * rng.uniform(0.0, 1.0, n), hi)
    steps = np.where(lo > 0.0, rng.integers(0, BISECTION_STEPS + 1, n), BISECTION_STEPS)
    queue = _mdc_queue(servers, service)
    got = _throughput_bisection(lo, width, steps, capacity, queue, cap, before, sync, kv, decode, clients)
    want = _reference(lo, width, steps, capacity, queue, cap, before, sync, kv, decode, clients)
    flat = _flat_wait_rows(lo, width, (capacity, queue[1], queue[0], queue[2] * 0.5, cap, sync,
                                       before + kv + decode), n)
    assert 0 < flat.size < n               # both kinds of rows
    assert np.array_equal(got, want, equal_nan=True)
