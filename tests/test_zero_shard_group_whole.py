"""``--zero-shard-group G`` where G is all of a layout's dp x cp ranks (a use-case review,
2026-12-06): ``simulate`` reads it as ZeRO over all ranks (G = 0), but ``plan`` kept only proper
divisors and refused llama3-8b on 64 H100 at G = 64 with "the ZeRO shard group must divide the
data-parallel ranks (dp x cp) of some layout", although 64 divides dp x cp = 64 of dp64 tp1 pp1,
the layout the unrestricted search picks."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from hardware_specs.catalog import load_cluster
from model_specs.catalog import load_model
from paraplan.cli import main
from planners import plan, row_config
from simulator.simulate import simulate

KEY = ["dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "zero_stage", "recompute", "sequence_parallel", "schedule"]


def test_a_shard_group_of_all_ranks_plans_as_zero_over_all_of_them():
    result = plan("llama3-8b", "dgx-h100", 64, 64, fixed={"zero_shard_group": (64,)}, max_plans=None, workers=1)
    named = result.plans
    whole = plan("llama3-8b", "dgx-h100", 64, 64, fixed={"zero_shard_group": (0,)}, max_plans=None, workers=1).plans
    # the rows named 64 are exactly the rows of all 64 dp x cp ranks, at group 0's step times
    assert len(named) and (named["dp"] * named["cp"] == 64).all() and (named["zero_shard_group"] == 64).all()
    at_64 = whole[(whole["dp"] * whole["cp"] == 64) & (whole["zero_stage"] >= 1)]
    merged = named.merge(at_64, on=KEY, suffixes=("", "_all"))
    assert len(merged) == len(named) == len(at_64)
    assert merged["step_time_s"].to_numpy() == pytest.approx(merged["step_time_s_all"].to_numpy(), rel=1e-12)
    assert (merged["memory_gib"] == merged["memory_gib_all"]).all()
    # and simulate of the best row gives its numbers, as it gives group 0's
    best = named.iloc[0]
    sim = simulate(load_model("llama3-8b"), load_cluster("dgx-h100"), row_config(best, result.software[str(best["dtype"])]),
                   n_gpus=64)
    assert row_config(best, result.software[str(best["dtype"])]).zero_shard_group == 64
    assert sim.step_time_s == pytest.approx(best["step_time_s"], rel=1e-12)


def test_a_group_that_divides_no_layout_says_the_rule():
    result = CliRunner().invoke(main, ["plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "64", "--global-batch", "64",
                                       "--zero-shard-group", "3"])
    assert result.exit_code == 2
    line = result.output.strip()
    assert line.count("\n") == 0 and line.startswith("error: zero_shard_group:")
    assert "must divide the data-parallel ranks (dp x cp) of some layout, be 2 or more" in line
