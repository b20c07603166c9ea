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


@pytest.mark.parametrize("fixed, says, enough", [
    # DualPipe on pp 2: 2 sequences are at most 2 micro-batches (dp 1 x mb 1), under 2 x pp = 4
    ({"pp": (2,), "schedule": ("dualpipe",)},
     "dualpipe needs an even pp and an even number of micro-batches per step >= 2 x pp = 4", 4),
    # interleaved on pp 4: 2 micro-batches are no multiple of 4
    ({"pp": (4,), "schedule": ("interleaved",)}, "the micro-batches per step a multiple of pp = 4", 4),
])
def test_a_schedule_rule_that_leaves_no_layout_is_named_not_the_global_batch(fixed, says, enough):
    """llama3-8b on 8 H100s, global batch 2: dp 1 x micro-batch 1 divides the batch, so the error
    that "no layout of 8 GPUs divides the global batch of 2 sequences into dp x micro-batch" was
    false; the schedule's micro-batch rule emptied the space, and the batch it suggests plans."""
    schedules = fixed["schedule"]
    with pytest.raises(InputError) as err:
        plan("llama3-8b", "dgx-h100", 8, 2, fixed=fixed, schedules=schedules)
    e = err.value
    assert e.field == "schedule" and says in e.message and "divides the global batch" not in e.message, str(e)
    assert f"a global batch of {enough} sequences" in e.fix
    best = plan("llama3-8b", "dgx-h100", 8, enough, fixed=fixed, schedules=schedules, max_plans=3, workers=1).best
    m = enough // (best["dp"] * best["micro_batch"])
    assert best["schedule"] == schedules[0] and m % best["pp"] == 0 and m >= best["pp"]


def test_the_cli_names_dualpipes_micro_batch_rule_in_one_line_and_exits_2():
    from click.testing import CliRunner
    from paraplan.cli import main
    res = CliRunner().invoke(main, ["plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "8", "--pp", "2",
                                    "--schedule", "dualpipe", "--global-batch", "2"])
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith("error: schedule: ") and ">= 2 x pp = 4" in lines[0]
