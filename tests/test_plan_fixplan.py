"""Plan-search fixes: pinned full recomputation vs chunk sizes, the context-parallel flavour
a plan carries, and API pass-throughs (review of the cp_kind / recompute changes)."""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from planners import plan

# llama3-8b: 32 decoder layers, no MTP (model_specs catalog). A chunk of a pp x vpp layout
# split as evenly as possible holds ceil(32 / (pp * vpp)) layers: pp 1 -> 32, pp 2 -> 16.


def test_pinned_full_recompute_keeps_only_chunks_that_hold_n_layers():
    result = plan("llama3-8b", "dgx-h100", 16, 64, fixed={"recompute": "full"}, recompute_num_layers=20,
                  max_plans=None)
    chunks = -(-32 // (result.plans["pp"] * result.plans["vpp"]))
    assert len(result.plans) and (chunks >= 20).all()
    assert set(result.plans["pp"]) == {1}          # only pp 1 chunks (32 layers) hold 20


def test_pinned_full_recompute_with_no_chunk_large_enough_names_the_largest():
    with pytest.raises(InputError) as err:
        plan("llama3-8b", "dgx-h100", 16, 64, fixed={"recompute": "full", "pp": 2}, recompute_num_layers=20)
    assert err.value.field == "recompute_num_layers"
    assert "at most 16" in str(err.value) and "vpp" not in str(err.value)


def test_pinned_full_recompute_of_a_whole_chunk_still_plans():
    result = plan("llama3-8b", "dgx-h100", 16, 64, fixed={"recompute": "full", "pp": 2}, recompute_num_layers=16)
    assert set(zip(result.plans["pp"], result.plans["vpp"])) == {(2, 1)}


# --- the context-parallel flavour a plan row prices (one rule: stack_defaults.run_cp_kind) ---

def test_run_cp_kind_rule():
    from hardware_specs.catalog import load_stack
    from simulator.stack_defaults import run_cp_kind
    # Megatron-Core's --cp-comm-type defaults to p2p (the ring); torchtitan all-gathers K/V
    assert run_cp_kind(4, None, load_stack("megatron-core")) == "ring"
    assert run_cp_kind(4, None, load_stack("torchtitan")) == "allgather"
    assert run_cp_kind(4, "ring", load_stack("torchtitan")) == "ring"           # given wins
    # ... among the flavours the stack runs: torchtitan 0.2's rotate methods are allgather and
    # alltoall (the ring), pytorch/torchtitan@v0.2.0 torchtitan/config/job_config.py:378-387
    with pytest.raises(InputError, match="runs no ulysses context parallelism"):
        run_cp_kind(4, "ulysses", load_stack("torchtitan"))
    assert run_cp_kind(1, None, load_stack("torchtitan")) == "ring"             # nothing runs at cp 1


_CP_REQUEST = dict(global_batch=16, cp=8, seq_len=65536)


def test_fixed_cp_kind_is_a_plan_column_and_in_the_simulate_command():
    from paraplan.commands.plan import simulate_command
    from paraplan import api
    table = api.plan("llama3-8b", "dgx-h100", 16, cp_kind="allgather", max_plans=2, **_CP_REQUEST)
    assert set(table["cp_kind"]) == {"allgather"}
    command = simulate_command(table.iloc[0].to_dict(), "llama3-8b", "dgx-h100", 65536, default_cp_kind="ring")
    assert "--cp-kind allgather" in command
    # the flavour simulate runs by default is not repeated
    assert "--cp-kind" not in simulate_command(table.iloc[0].to_dict(), "llama3-8b", "dgx-h100", 65536,
                                               default_cp_kind="allgather")


def test_best_plan_resimulates_the_fixed_cp_kind():
    from paraplan import api
    table = api.plan("llama3-8b", "dgx-h100", 16, cp_kind="allgather", max_plans=2, **_CP_REQUEST)
    best = api.best_plan("llama3-8b", "dgx-h100", 16, cp_kind="allgather", **_CP_REQUEST)
    assert best["cp_kind"].iloc[0] == "allgather"
    # the re-simulated winner is the table's winner, same flavour, same step
    assert best["step_time_s"].iloc[0] == pytest.approx(table["step_time_s"].iloc[0], rel=1e-9)


def test_cp1_rows_carry_ring():
    result = plan("llama3-8b", "dgx-h100", 8, 64, stack="torchtitan", max_plans=50)
    one = result.plans[result.plans["cp"] == 1]
    assert len(one) and set(one["cp_kind"].astype(str)) == {"ring"}


def test_best_plan_for_keeps_every_what_if():
    from paraplan import api
    what_if = dict(peak_flops_scale=2.0, hbm_gib=40, hbm_tb_per_s=2.0)
    best = api.best_plan_for("megatron", "llama3-8b", "dgx-h100", 8, global_batch=64, **what_if)
    assert best["hbm_gib"].iloc[0] == 40                   # the GPU asked for, not the H100's 80
    assert best["memory_gib"].iloc[0] < 40
    table = api.plan("llama3-8b", "dgx-h100", 8, global_batch=64, max_plans=50, **what_if)
    same = table[table["config"] == best["config"].iloc[0]]
    # the re-simulated winner's step is the row's in the what-if table (2x FLOPs, 2 TB/s HBM)
    assert len(same) and best["step_time_s"].iloc[0] == pytest.approx(same["step_time_s"].iloc[0], rel=1e-9)


def test_api_simulate_hsdp_group_takes_the_stacks_zero_stage():
    from paraplan import api
    # megatron-core.yaml: default_zero_stage 1 (the distributed optimizer), as `paraplan simulate`
    row = api.simulate("llama3-8b", "dgx-h100", gpus=16, global_batch=64, zero_shard_group=8)
    assert row["zero_stage"].iloc[0] == 1 and row["zero_shard_group"].iloc[0] == 8
    given = api.simulate("llama3-8b", "dgx-h100", gpus=16, global_batch=64, zero_shard_group=8, zero_stage=1)
    assert row["step_time_s"].iloc[0] == given["step_time_s"].iloc[0]


def test_api_plan_passes_recompute_num_layers_to_the_planner():
    from paraplan import api
    table = api.plan("llama3-8b", "dgx-h100", 16, global_batch=64, recompute="full", recompute_num_layers=3,
                     max_plans=20)
    assert len(table) and set(table["recompute"]) == {"full"} and set(table["recompute_num_layers"]) == {3}


@pytest.mark.parametrize("fixed, stack", [({"cp": 1, "cp_kind": "ulysses"}, "megatron-core"),
                                          # deepspeed-2021.yaml lacks context_parallel: every row is cp 1
                                          ({"cp_kind": "allgather"}, "deepspeed-2021")])
def test_fixed_cp_kind_without_any_cp_above_one_is_refused(fixed, stack):
    with pytest.raises(InputError) as err:
        plan("llama3-8b", "dgx-h100", 16, 64, fixed=fixed, stack=stack)
    assert err.value.field == "cp_kind" and "with cp 1 changes nothing" in str(err.value)


def test_fixed_ring_at_cp1_still_plans():
    assert len(plan("llama3-8b", "dgx-h100", 16, 64, fixed={"cp": 1, "cp_kind": "ring"}).plans)
