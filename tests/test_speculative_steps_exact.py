"""The exact mean steps of a speculating request's decode (cost_models.speculative): E[S(n)] by
the renewal recursion, checked against exact enumeration of the step outcomes, a Monte Carlo,
the closed form of its generating function, and the hand-derived numbers at k = 3, p = 0.85."""
import math

import numpy as np
import pytest

from cost_models.speculative import (decode_tokens_per_step, expected_decode_steps, expected_tokens_per_step,
                                     renewal_horizon)


def _step_shares(k, p):
    """P(X = j), j = 1..k + 1: j - 1 drafts accepted then one rejected, or all k accepted."""
    return [p ** (j - 1) * (1 - p) for j in range(1, k + 1)] + [p ** k]


def _enumerated_steps(n, k, p):
    """E[S(n)] by enumerating every sequence of step outcomes until n tokens are reached (a
    depth-first walk, no memo shared with the code): the sum of probability x length."""
    shares = _step_shares(k, p)

    def walk(kept, steps, prob):
        if kept >= n:
            return steps * prob
        return sum(walk(kept + j, steps + 1, prob * q) for j, q in enumerate(shares, start=1))
    return walk(0, 0, 1.0)


def _closed_form_steps(n, k, p):
    """E[S(n)] from the generating function z (1 - pz) / ((1 - z)^2 (1 - (pz)^(k+1))):
    sum over i of p^(iN) (n - iN) [iN < n] - p^(iN+1) (n - 1 - iN) [iN < n - 1], N = k + 1."""
    big = k + 1
    i = np.arange(0, n // big + 1, dtype=float)
    first = np.where(i * big < n, p ** (i * big) * (n - i * big), 0.0)
    second = np.where(i * big < n - 1, p ** (i * big + 1) * (n - 1 - i * big), 0.0)
    return float(first.sum() - second.sum())


def _recursion_steps(n, k, p):
    """E[S(m)] for m = 1..n by the recursion E[S(m)] = 1 + sum_j P(X = j) E[S(m - j)], a plain loop."""
    shares = _step_shares(k, p)
    s = [0.0] * (n + 1)
    for m in range(1, n + 1):
        s[m] = 1.0 + sum(q * s[m - j] for j, q in enumerate(shares, start=1) if m - j > 0)
    return s[n]


@pytest.mark.parametrize("n, expected", [(2, 1.739), (4, 2.759), (8, 2.850), (16, 2.964), (64, 3.123),
                                         (1023, 3.183)])
def test_tokens_per_step_over_a_decode_at_k3_p085_match_the_hand_derived_values(n, expected):
    # E(3, 0.85) = 3.187 uncapped; min(E, n) said 2 at n = 2 and 3.187 at n = 4 and above
    assert float(decode_tokens_per_step(n, 3, 0.85)) == pytest.approx(expected, abs=5e-4)


def test_the_first_steps_by_hand():
    # n = 2: one step of 1 token (0.15) needs a second: 1 + 0.15 = 1.15 steps, 2 / 1.15 = 1.739
    assert expected_decode_steps(2, 3, 0.85) == pytest.approx(1.15, rel=1e-15)
    # n = 3: 1 + 0.15 E[S(2)] + 0.1275 E[S(1)] = 1 + 0.1725 + 0.1275 = 1.3
    assert expected_decode_steps(3, 3, 0.85) == pytest.approx(1.3, rel=1e-15)
    # n = 4: 1 + 0.15 x 1.3 + 0.1275 x 1.15 + 0.108375 x 1 = 1.45  -> 4 / 1.45 = 2.7586
    assert expected_decode_steps(4, 3, 0.85) == pytest.approx(1.45, rel=1e-14)


@pytest.mark.parametrize("k, p", [(1, 0.3), (2, 0.7), (3, 0.85), (5, 0.6)])
def test_recursion_matches_exact_enumeration_of_the_step_outcomes(k, p):
    n = np.arange(1, 9)
    got = expected_decode_steps(n, k, p)
    assert got == pytest.approx([_enumerated_steps(int(m), k, p) for m in n], rel=1e-12)


def test_recursion_matches_a_monte_carlo_of_the_drafts():
    rng = np.random.default_rng(71)
    k, p, n, trials = 3, 0.85, 10, 200_000
    # each draft accepted with p while all before it were: the tokens a step keeps
    accepted = rng.random((trials, n, k)) < p
    kept = 1 + np.cumprod(accepted, axis=2).sum(axis=2)
    steps = (np.cumsum(kept, axis=1) < n).sum(axis=1) + 1
    sem = steps.std() / math.sqrt(trials)
    assert abs(steps.mean() - expected_decode_steps(n, k, p)) < 4 * sem
    assert expected_decode_steps(n, k, p) == pytest.approx(_closed_form_steps(n, k, p), rel=1e-13)


@pytest.mark.parametrize("k", [1, 3, 16])
@pytest.mark.parametrize("p", [0.05, 0.5, 0.85, 0.95, 0.99])
def test_extrapolation_beyond_the_horizon_matches_the_closed_form_at_1e5(k, p):
    # the table stops at renewal_horizon and adds 1 / E a token beyond; the closed form sums
    # every term of the generating function's expansion
    n = 100_000
    assert renewal_horizon(k, p) < n
    assert expected_decode_steps(n, k, p) == pytest.approx(_closed_form_steps(n, k, p), rel=1e-13)
    small = np.arange(1, 400)
    assert expected_decode_steps(small, k, p) == pytest.approx([_closed_form_steps(int(m), k, p) for m in small],
                                                               rel=1e-12)


@pytest.mark.parametrize("k, p", [(3, 0.85), (1, 0.99)])
def test_extrapolation_matches_the_full_recursion_at_1e5(k, p):
    # the loop's rounding accumulates over 10^5 steps (9.4e-13 of 31381.57 at k = 3, p = 0.85;
    # 40-digit arithmetic gives 31381.570895982917, the extrapolated value to the last digit)
    n = 100_000
    full = _recursion_steps(n, k, p)
    assert expected_decode_steps(n, k, p) == pytest.approx(full, rel=1e-11)
    if (k, p) == (3, 0.85):
        assert expected_decode_steps(n, k, p) == pytest.approx(31381.570895982917, rel=2e-16)


@pytest.mark.parametrize("k, p", [(1, 0.5), (3, 0.85), (3, 0.95), (16, 0.9)])
def test_the_renewal_limit_converges_geometrically_at_rate_p_to_its_constant(k, p):
    e = float(expected_tokens_per_step(k, p))
    j = np.arange(1, k + 2)
    c = float((np.array(_step_shares(k, p)) * j * (j - 1)).sum() / (2 * e * e))     # E[X(X-1)] / (2 E^2)
    r = p ** (k + 1)
    assert c == pytest.approx(p / (1 - r) - (k + 1) * r * (1 - p) / (1 - r) ** 2, rel=1e-12)
    m = np.arange(1, renewal_horizon(k, p) + 1)
    gap = np.abs(expected_decode_steps(m, k, p) - m / e - c)
    bound = 2 * (k + 1) * p ** m / (1 - r) ** 2
    assert np.all(gap <= bound + 1e-12 * m)
    # at the horizon the bound is below half an ulp of 1
    assert 2 * (k + 1) * p ** renewal_horizon(k, p) / (1 - r) ** 2 <= 2.0 ** -53


def test_horizon_is_a_few_hundred_steps_at_the_engines_acceptances():
    assert [renewal_horizon(3, p) for p in (0.5, 0.85, 0.9, 0.95)] == [57, 248, 389, 823]
    assert renewal_horizon(0, 0.85) == renewal_horizon(3, 0.0) == 1


def test_edge_cases_are_exact():
    n = np.array([1, 2, 3, 4, 5, 8, 9, 1023])
    # every draft accepted: ceil(n / (k + 1)) steps
    assert np.array_equal(expected_decode_steps(n, 3, 1.0), np.ceil(n / 4))
    assert np.array_equal(decode_tokens_per_step(n, 3, 1.0), n / np.ceil(n / 4))
    # no drafts, or none accepted: one token a step, exactly
    for k, p in ((0, 0.85), (4, 0.0)):
        assert np.array_equal(expected_decode_steps(n, k, p), n.astype(float))
        assert np.array_equal(decode_tokens_per_step(n, k, p), np.ones(len(n)))
    # p near 1 whose horizon exceeds n: the recursion runs to n itself
    assert renewal_horizon(3, 0.9999) > 1023
    assert expected_decode_steps(1023, 3, 0.9999) == pytest.approx(_closed_form_steps(1023, 3, 0.9999), rel=1e-9)
    # a table longer than the loop's runs as an IIR filter: the same recursion
    long = np.array([9000, 20000])
    assert renewal_horizon(3, 0.9999) > 20000
    closed = [_closed_form_steps(int(m), 3, 0.9999) for m in long]
    assert expected_decode_steps(long, 3, 0.9999) == pytest.approx(closed, rel=1e-9)


def test_never_above_min_e_n_and_arrays_of_drafts_and_acceptances_broadcast():
    n = np.arange(1, 3000)[:, None]
    k = np.array([1, 2, 3, 3, 8])
    p = np.array([0.5, 0.7, 0.85, 0.95, 0.6])
    got = decode_tokens_per_step(n, k, p)
    # Wald: the tokens kept by S(n) steps, E x E[S(n)], reach n; and a step keeps at least one
    assert np.all(got <= np.minimum(expected_tokens_per_step(k, p), n) * (1 + 1e-12))
    for col, (kk, pp) in enumerate(zip(k, p)):
        assert np.array_equal(got[:, col], decode_tokens_per_step(n[:, 0], int(kk), float(pp)))
