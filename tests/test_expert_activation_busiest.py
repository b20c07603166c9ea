"""The busiest expert-parallel GPU's active experts (review 2026-12, bug 2): the decode step and
its combine wait for the GPU with the most active experts, not the mean E[distinct] / ep."""
import math

import numpy as np
import pytest

from cost_models.expert_activation import expected_busiest_gpu_experts, expected_distinct_experts


def _busiest_by_hand(e, k, t, ep):
    # one GPU's m = e / ep experts each hit with p = 1 - (1 - k/e)^t, count ~ Binomial(m, p);
    # E[max of ep] = sum_{x=0}^{m-1} (1 - F(x)^ep)
    m = e // ep
    p = 1 - (1 - k / e) ** t

    def cdf(x):
        return sum(math.comb(m, i) * p ** i * (1 - p) ** (m - i) for i in range(x + 1))
    return sum(1 - cdf(x) ** ep for x in range(m))


def test_one_token_of_deepseek_r1_on_8_gpus_lands_2_54_experts_on_the_busiest_not_1():
    # m = 32, p = 8/256: F(0) = (31/32)^32 = 0.3621, F(1) = 0.3621 + 32 (1/32)(31/32)^31 = 0.7358,
    # F(2) = 0.9227, F(3) = 0.9829, F(4) = 0.9970, F(5) = 0.9996, ...
    # E[max] = (1 - 0.3621^8) + (1 - 0.7358^8) + (1 - 0.9227^8) + (1 - 0.9829^8) + (1 - 0.9970^8) + ...
    #        = 0.9997 + 0.9141 + 0.4748 + 0.1286 + 0.0235 + 0.0033 + 0.0004 = 2.544
    assert (31 / 32) ** 32 == pytest.approx(0.3621, abs=1e-4)
    got = expected_busiest_gpu_experts(256, 8, 1.0, 8)
    assert got == pytest.approx(2.544, abs=0.002)
    assert expected_distinct_experts(256, 8, 1.0) / 8 == pytest.approx(1.0)


@pytest.mark.parametrize("e, k, t, ep", [(256, 8, 4, 8), (256, 8, 16, 8), (128, 8, 16, 8), (384, 8, 3, 16),
                                         (128, 8, 64, 4)])
def test_matches_the_binomial_maximum_summed_by_hand(e, k, t, ep):
    assert expected_busiest_gpu_experts(e, k, float(t), ep) == pytest.approx(_busiest_by_hand(e, k, t, ep), rel=1e-5)   # the table read (BUSIEST_TABLE_POINTS)


def test_one_gpu_holds_all_experts_and_its_count_is_the_distinct_experts():
    assert expected_busiest_gpu_experts(256, 8, 5.0, 1) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 5))
    assert expected_busiest_gpu_experts(256, 8, 0.0, 8) == 0.0
    assert expected_busiest_gpu_experts(256, 8, 1e6, 8) == pytest.approx(32.0)


def test_vectorised_rows_agree_with_one_at_a_time():
    t = np.array([1.0, 4.0, 16.0, 3.0])
    ep = np.array([8.0, 8.0, 1.0, 4.0])
    got = expected_busiest_gpu_experts(256, 8, t, ep)
    want = [float(expected_busiest_gpu_experts(256, 8, a, b)) for a, b in zip(t, ep)]
    assert got.tolist() == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("t", [1, 4, 16])
def test_a_seeded_monte_carlo_of_uniform_top_k_routing_agrees(t):
    """Each token picks 8 distinct experts of 256 uniformly (the k smallest of 256 uniform keys);
    GPU g holds experts 32 g .. 32 g + 31. 3,000 draws: the standard error of the mean maximum is
    at most ~1.5 / sqrt(3000) = 0.03; the binomial-independence approximation's bias was < 1% in
    a 20,000-draw run (2.544 vs 2.562, 6.563 vs 6.574, 16.71 vs 16.70). Tolerance: 2% + 4 standard
    errors."""
    rng = np.random.default_rng(20261205)
    n, e, k, ep = 3000, 256, 8, 8
    keys = rng.random((n, t, e))
    picks = np.argpartition(keys, k, axis=-1)[..., :k]
    hit = np.zeros((n, e), dtype=bool)
    np.put_along_axis(hit, picks.reshape(n, t * k), True, axis=1)
    busiest = hit.reshape(n, ep, e // ep).sum(axis=2).max(axis=1)
    se = busiest.std() / math.sqrt(n)
    got = float(expected_busiest_gpu_experts(e, k, float(t), ep))
    assert abs(got - busiest.mean()) <= 0.02 * busiest.mean() + 4 * se
    assert got > expected_distinct_experts(e, k, t) / ep * 1.3     # well above the mean


def test_the_interpolated_table_is_the_exact_sum_within_its_stated_tolerance():
    # expected_busiest_gpu_experts reads E[max] from a table over p (a plan evaluates thousands of
    # steps); against the exact tail sum at every token count a decode step can hold
    from cost_models.expert_activation import busiest_gpu_experts_exact, expected_busiest_gpu_experts
    tokens = np.concatenate([np.arange(0, 300), np.geomspace(300, 1e5, 80)])
    for experts, top_k, ep in ((256, 8, 8), (256, 8, 2), (128, 8, 8), (160, 6, 16), (384, 8, 64), (512, 10, 2)):
        p = 1.0 - (1.0 - top_k / experts) ** tokens
        exact = busiest_gpu_experts_exact(experts // ep, ep, p)
        table = expected_busiest_gpu_experts(experts, top_k, tokens, ep)
        assert np.abs(table - exact).max() <= 1e-5 * exact.max()


def test_one_expert_a_gpu_and_one_token_streams_exactly_one_expert_on_the_busiest():
    # 8 experts top-2 on 8 GPUs, one token: exactly two GPUs hold one chosen expert each, so the
    # busiest streams 1 expert; the binomial maximum alone gives 1 - (3/4)^8 = 0.900
    assert 1 - (3 / 4) ** 8 == pytest.approx(0.8999, abs=1e-4)
    assert float(expected_busiest_gpu_experts(8, 2, [1.0], 8)[0]) == 1.0
    assert float(expected_busiest_gpu_experts(8, 2, [3.0], 8)[0]) == 1.0


def test_the_busiest_gpu_is_never_below_the_mean_or_one_tokens_pigeonhole():
    # top-8 of 16 experts on 4 GPUs (m = 4): one token puts >= ceil(8/4) = 2 on some GPU
    got = float(expected_busiest_gpu_experts(16, 8, [1.0], 4)[0])
    assert got >= 2.0
    t = np.array([0.5, 1.0, 2.0, 8.0, 64.0])
    busiest = expected_busiest_gpu_experts(64, 4, t, 8)
    assert np.all(busiest >= expected_distinct_experts(64, 4, t) / 8 - 1e-12)


def test_rows_of_several_splits_together_give_each_rows_own_count():
    # one call over rows of 4 (experts a GPU, ep) pairs and ep 1 (the step's rows are layouts of
    # every split at once): each row the number it gives alone, and the hand sums above
    e = np.array([256, 256, 128, 384, 128, 256, 256, 256], dtype=float)
    t = np.array([4.0, 16.0, 16.0, 3.0, 64.0, 5.0, 1.0, 0.0])
    ep = np.array([8, 8, 8, 16, 4, 1, 8, 8], dtype=float)
    got = expected_busiest_gpu_experts(e, 8.0, t, ep)
    alone = [float(expected_busiest_gpu_experts(e[i], 8.0, t[i], ep[i])) for i in range(e.size)]
    assert got.tolist() == alone
    for i in range(5):
        assert got[i] == pytest.approx(_busiest_by_hand(int(e[i]), 8, int(t[i]), int(ep[i])), rel=1e-5)
    assert got[5] == pytest.approx(256 * (1 - (1 - 8 / 256) ** 5))
    assert got[6] == pytest.approx(2.544, abs=0.002) and got[7] == 0.0
