"""An elementwise cost evaluated once per distinct input gives every element its own number."""
from __future__ import annotations

import numpy as np
import pytest

from cost_models import topology
from cost_models.distinct import MIN_ELEMENTS, distinct_elements, once_per_distinct
from hardware_specs.catalog import efficiency_for_cluster, load_cluster


def test_distinct_elements_numbers_combinations_in_order_of_first_appearance():
    n = MIN_ELEMENTS
    group = np.tile([8.0, 16.0, 8.0, 16.0], n // 4)
    stride = np.tile([1.0, 1.0, 2.0, 1.0], n // 4)
    first, code = distinct_elements([group, stride])
    # (8, 1), (16, 1), (8, 2): three combinations, first seen at elements 0, 1, 2
    assert first.tolist() == [0, 1, 2]
    assert code[:8].tolist() == [0, 1, 2, 1, 0, 1, 2, 1]


def test_distinct_elements_keys_fractions_large_and_non_finite_values_without_merging_any():
    n = MIN_ELEMENTS
    values = np.array([0.5, 1.5, 2.0 ** 70, np.inf, np.nan, 3.0, 3.0, 0.5])
    x = np.tile(values, n // len(values))
    y = np.tile(np.arange(2.0), n // 2)
    first, code = distinct_elements([x, y])
    pairs = {(a, b) for a, b in zip(values.tolist(), y[:len(values)].tolist())}
    assert len(first) == len({(str(a), b) for a, b in pairs})
    # every element's combination is its representative's
    np.testing.assert_array_equal(x[first][code], x)
    np.testing.assert_array_equal(y[first][code], y)


def test_small_or_constant_inputs_are_not_deduplicated():
    assert distinct_elements([np.arange(MIN_ELEMENTS - 1.0)]) is None
    assert distinct_elements([np.broadcast_to(np.array(2.0), (MIN_ELEMENTS,))]) is None


def test_once_per_distinct_calls_the_function_on_the_representatives_only():
    calls = []

    def square_plus(x, c):
        calls.append(len(x))
        return x * x + c

    x = np.tile(np.array([1.0, 2.0, 3.0]), MIN_ELEMENTS)
    out = once_per_distinct(square_plus, x, 0.5)
    assert calls == [3]
    np.testing.assert_array_equal(out, x * x + 0.5)


@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"])
def test_group_collective_time_is_bitwise_the_same_on_a_batch_as_element_by_element(kind):
    cluster = load_cluster("dgx-h100")
    eff = efficiency_for_cluster(cluster)
    rng = np.random.default_rng(18)
    n = 3 * MIN_ELEMENTS
    bytes_ = rng.choice(np.array([1.0e3, 7.5e6, 3.3e8 / 7.0, 2.0e9, 0.0]), n)
    group = rng.choice(np.array([1.0, 2.0, 8.0, 16.0, 64.0, 512.0]), n)
    stride = rng.choice(np.array([1.0, 2.0, 8.0, 16.0]), n)
    batch = topology.group_collective_time_s(kind, bytes_, group, stride, cluster, eff)
    every = topology._group_collective_time_s(kind, bytes_, group, stride, cluster, eff)
    assert batch.shape == (n,)
    assert np.array_equal(batch, every)
    one = [float(topology._group_collective_time_s(kind, bytes_[i], group[i], stride[i], cluster, eff))
           for i in range(0, n, 997)]
    assert np.array_equal(batch[::997], one)
