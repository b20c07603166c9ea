"""The comparison rows of the pooled planner ("only p", "only q", "fastest GPU") where a review
found them wrong: identical pools the search skips as duplicates, and ties in the choice of the
"fastest GPU" pool that went to whichever pool was listed first."""
from __future__ import annotations

import pytest

from hardware_specs.catalog import load_cluster
from hardware_specs.pools import Pool, PooledCluster
from planners.heterogeneous import plan_heterogeneous

_H100 = load_cluster("dgx-h100")


def test_a_pool_identical_to_an_earlier_one_gets_its_own_only_row_equal_to_planning_it_alone():
    """Pools p and q are the same 16 H100s: the search scores {p} and skips {q} (same signature),
    yet "only q" is q's best plan, which is planning q alone (p's plan on q's GPUs)."""
    two = PooledCluster("two", (Pool("p", _H100, 16), Pool("q", _H100, 16)))
    res = plan_heterogeneous("llama3-8b", two, 32, micro_batches=(1, 2))
    alone = plan_heterogeneous("llama3-8b", PooledCluster("q", (Pool("q", _H100, 16),)), 32, micro_batches=(1, 2))
    only_q = res.pool_only["q"]
    assert only_q is not None
    plan, report = only_q
    assert {st.pool for g in plan.groups for st in g.stages} == {"q"}
    assert report.step_time_s == pytest.approx(alone.best_report.step_time_s, rel=1e-12)
    assert report.step_time_s == pytest.approx(res.pool_only["p"][1].step_time_s, rel=1e-12)
    assert res.largest_only is not None and res.largest_pool == "q"


def test_the_fastest_gpu_between_two_of_one_peak_is_the_one_that_runs_the_model_faster_whatever_the_order():
    """H100 and H200 share the 989 TFLOP/s bf16 peak (hardware_specs/gpus); the peak tie went to
    the first listed pool. Listed either way, "fastest GPU" is the pool whose own best plan gives
    more tokens/s per GPU (equal pools: 16 each), and its row and gain are the same."""
    h200 = load_cluster("hgx-h200")
    assert h200.gpu.peak_flops_per_s["bf16"] == _H100.gpu.peak_flops_per_s["bf16"]
    results = [plan_heterogeneous("llama3-8b", PooledCluster("o", pools), 32, micro_batches=(1, 2))
               for pools in ((Pool("h100", _H100, 16), Pool("h200", h200, 16)),
                             (Pool("h200", h200, 16), Pool("h100", _H100, 16)))]
    for res in results:
        own = {n: pr[1].tokens_per_s / pr[1].n_gpus for n, pr in res.pool_only.items()}
        assert res.fastest_pool == max(own, key=own.get)
        assert res.largest_pool != res.fastest_pool
    assert results[0].fastest_pool == results[1].fastest_pool
    assert results[0].fastest_only[1].step_time_s == pytest.approx(results[1].fastest_only[1].step_time_s, rel=1e-12)

