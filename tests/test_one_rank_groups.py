"""A collective over groups of one rank is no time, answered without running the formula.

Half the collective calls of a small configuration (dp, cp or tp of 1) are over one-rank
groups; ``group_collective_time_s`` returned ``np.where(group_size > 1, t, 0.0)`` after computing
every protocol's ``t`` for them. Zero needs no formula: nothing is sent.
"""
from __future__ import annotations

import numpy as np
import pytest

import cost_models.topology as topology
from hardware_specs.catalog import efficiency_for_cluster, load_cluster

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


@pytest.fixture
def h100():
    cluster = load_cluster("dgx-h100")
    return cluster, efficiency_for_cluster(cluster)


@pytest.mark.parametrize("kind", KINDS)
def test_one_rank_groups_take_no_time_and_run_no_formula(kind, h100, monkeypatch):
    cluster, eff = h100
    ran = []
    real = topology._group_collective_time_s
    monkeypatch.setattr(topology, "_group_collective_time_s", lambda *a, **k: ran.append(a) or real(*a, **k))
    t = topology.group_collective_time_s(kind, np.array([1e6, 2e9, 0.0]), np.ones(3), np.array([1, 8, 64]),
                                         cluster, eff)
    assert t.dtype == np.float64 and t.shape == (3,) and np.array_equal(t, [0.0, 0.0, 0.0])
    assert ran == []
    scalar = topology.group_collective_time_s(kind, 4096, 1, 1, cluster, eff)
    assert np.ndim(scalar) == 0 and scalar == 0.0 and ran == []


def test_a_group_of_two_still_runs_the_formula_and_an_unknown_algorithm_still_fails(h100):
    cluster, eff = h100
    # 1 GB all-reduce over 2 NVLink ranks: 2 (n-1)/n x 1e9 B = 1e9 B at most 450 GB/s, > 2.2 ms
    t = topology.group_collective_time_s("all_reduce", np.array([1e9, 1e9]), np.array([1, 2]), np.array([1, 1]),
                                         cluster, eff)
    assert t[0] == 0.0 and t[1] > 1e9 / 450e9
    with pytest.raises(ValueError, match="unknown algorithm"):
        topology.group_collective_time_s("all_gather", 1e6, 1, 1, cluster, eff, algorithm="tree")
