"""A pooled pipeline whose stages hold unequal layer counts steps as the one-kind simulator's
for the same layout: both take the schedule's makespan for the stages' own forward and
backward times (``pipeline.makespan.flush_makespan_s``). The pooled model priced such a flush
as sum of stage times + (m - 1) x the slowest stage, a bound: Llama-3-70B on 32 B200s, tp4 pp2
with 41 and 39 layers, 11.0965 s (bubble 0.4332 s) against simulate's 11.0878 s (0.4245 s)."""
from __future__ import annotations

import pytest

from hardware_specs.catalog import load_cluster
from hardware_specs.pools import PooledCluster
from model_specs.catalog import load_model
from simulator.heterogeneous import HeteroPlan, ReplicaGroup, StagePlacement, simulate_heterogeneous
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate

_B200 = load_cluster("dgx-b200")


@pytest.mark.parametrize("tp, layers, schedule", [
    (4, (41, 39), "1f1b"), (4, (21, 20, 20, 19), "1f1b"), (2, (21, 20, 20, 19), "1f1b"), (4, (41, 39), "gpipe")])
def test_an_uneven_pipeline_on_one_pool_steps_as_simulate_of_that_layout(tp, layers, schedule):
    model = load_model("llama3-70b")
    pp = len(layers)
    dp = 32 // (tp * pp)
    homo = simulate(model, _B200, ParallelConfig(dp=dp, tp=tp, pp=pp, global_batch=96, zero_stage=1,
                                                 sequence_parallel=True, schedule=schedule,
                                                 first_stage_layers=layers[0], last_stage_layers=layers[-1]))
    plan = HeteroPlan(groups=(ReplicaGroup(tuple(StagePlacement("p", tp, n) for n in layers), replicas=dp),),
                      global_batch=96, zero_stage=1, sequence_parallel=True, schedule=schedule)
    het = simulate_heterogeneous(model, PooledCluster.single(_B200, 32, "p"), plan)
    assert het.step_time_s == pytest.approx(homo.step_time_s, rel=1e-12)
    for part, value in homo.time_breakdown_s.items():
        assert het.time_breakdown_s[part] == pytest.approx(value, rel=1e-9, abs=1e-12), part
    assert het.memory_bytes == pytest.approx(homo.memory_bytes, rel=1e-12)


def test_a_search_prices_exactly_every_plan_that_can_rank_however_few_rows_it_keeps():
    """A search prices exactly only the plans that can reach its ``top`` rows (``compose``'s
    ``exact_top``: the others sit above the slowest of those). Keeping 2 rows or 40, the rows
    kept are the same plans at the simulator's numbers."""
    from planners.heterogeneous import plan_heterogeneous
    model = load_model("llama3-70b")
    cluster = PooledCluster.single(_B200, 24, "p")           # 80 layers over 3 or 6 stages: uneven
    few = plan_heterogeneous(model, cluster, 48, micro_batches=(1,), top=2)
    many = plan_heterogeneous(model, cluster, 48, micro_batches=(1,), top=40)
    assert len(many.plans) > 2
    assert list(few.plans["step_time_s"]) == pytest.approx(list(many.plans["step_time_s"][:2]), rel=1e-12)
    for (plan, cl), row in zip(many.row_plans, many.plans.itertuples()):
        assert simulate_heterogeneous(model, cl, plan).step_time_s == pytest.approx(row.step_time_s, rel=1e-12)
