"""Planner rules that emptied the space, or priced what the launch refuses (review 2026-12-05):
a fixed ZeRO stage with one data-parallel rank, which schedule rule left no layout, and the
sequence-length rules of context and sequence parallelism."""
from __future__ import annotations

import pytest

from hardware_specs.catalog import load_cluster
from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from planners import SearchConstraints, enumerate_space, plan, row_config
from simulator.simulate import simulate


def test_a_fixed_zero_stage_with_one_data_parallel_rank_is_planned_as_simulate_runs_it():
    """``--dp 1 --zero 1`` (llama3-70b, 32 H100s, tp 8 pp 4, batch 8): the dominated_zero_without_dp
    prune dropped every row (ZeRO-1 with dp*cp = 1 shards nothing), though the request fixed the
    stage and simulate runs it; the error then blamed the global batch, which dp 1 x mb 1 divides."""
    fixed = {"dp": (1,), "tp": (8,), "pp": (4,), "zero_stage": (1,)}
    model = load_model("llama3-70b")
    space = enumerate_space(model, SearchConstraints(gpus=(32, 32), global_batch=8, max_tp=8, fixed=fixed))
    assert len(space) > 0 and space.pruned["dominated_zero_without_dp"] == 0
    assert set(space.columns["zero_stage"].tolist()) == {1} and set(space.columns["dp"].tolist()) == {1}
    result = plan("llama3-70b", "dgx-h100", 32, 8, fixed=fixed, max_plans=3, workers=1)
    best = result.best
    assert (best["dp"], best["tp"], best["pp"], best["zero_stage"]) == (1, 8, 4, 1)
    # the plan's number is simulate's for the same configuration
    sim = simulate(model, load_cluster("dgx-h100"), row_config(best, result.software[str(best["dtype"])]),
                   n_gpus=32)
    assert sim.step_time_s == pytest.approx(best["step_time_s"], rel=1e-9)
    # free, the prune still drops ZeRO 1-3 without data parallelism (never the best)
    free = enumerate_space(model, SearchConstraints(gpus=(32, 32), global_batch=8, max_tp=8,
                                                    fixed={k: v for k, v in fixed.items() if k != "zero_stage"}))
    assert free.pruned["dominated_zero_without_dp"] > 0 and set(free.columns["zero_stage"].tolist()) == {0}
