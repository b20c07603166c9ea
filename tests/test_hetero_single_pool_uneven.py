"""One pool searched alone tries the most replicas that fit even where they do not divide the
step's micro-batches (the shares give some one more), as the same GPUs written as two pools
did: Llama-3-8B, 64 sequences on 48 A100s, 24 replicas of tp 2. Before, one pool of 48 planned
4.115 s (tp4 pp3, 4 replicas) while two pools of 24 planned 3.681 s with 12 + 12 such replicas."""
from __future__ import annotations

import pytest

from hardware_specs.catalog import load_cluster
from hardware_specs.pools import Pool, PooledCluster
from model_specs.catalog import load_model
from planners.heterogeneous import plan_heterogeneous
from simulator.heterogeneous import HeteroPlan, ReplicaGroup, StagePlacement, simulate_heterogeneous

_A100 = load_cluster("dgx-a100-80gb")


def test_one_pool_plans_at_least_as_well_as_the_same_gpus_written_as_two_pools():
    model = load_model("llama3-8b")
    one = PooledCluster("one", (Pool("p", _A100, 48),))
    two = PooledCluster("two", (Pool("p", _A100, 24), Pool("q", _A100, 24)))
    best_one = plan_heterogeneous(model, one, 64).best_report.step_time_s
    best_two = plan_heterogeneous(model, two, 64).best_report.step_time_s
    # the two-pool layout, run on the one pool as two groups of 12 replicas
    stage = (StagePlacement("p", 2, model.num_layers),)
    halves = HeteroPlan(groups=(ReplicaGroup(stage, replicas=12), ReplicaGroup(stage, replicas=12)),
                        global_batch=64, zero_stage=1, sequence_parallel=True)
    split = simulate_heterogeneous(model, one, halves)
    assert split.fits
    assert best_one <= split.step_time_s * (1 + 1e-12)
    assert best_one <= best_two * (1 + 1e-12)
    # 64 sequences over 24 replicas: 16 replicas run 3 micro-batches, 8 run 2 (64 = 16 x 3 + 8 x 2)
    whole = simulate_heterogeneous(model, one, HeteroPlan(groups=(ReplicaGroup(stage, replicas=24),),
                                                          global_batch=64, zero_stage=1, sequence_parallel=True))
    assert whole.step_time_s == pytest.approx(best_one, rel=1e-12)
