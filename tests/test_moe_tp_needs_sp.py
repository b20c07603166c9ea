"""MoE layers with tp > 1 need sequence parallelism on Megatron-Core stacks (Megatron-Core,
Megatron-Bridge, NeMo): Megatron-LM's arguments check and ``MoELayer.forward`` refuse it, the
Megatron export's flag table states it as runtime rule ``moe_tp_needs_sp``. The stacks list it
as ``lacks: moe_tp_without_sp``; ``check_config`` refuses such a plan in one line naming the fix,
the planner does not search it, and where a run does not say, sequence parallelism is on."""
import json
from pathlib import Path

import pytest

from hardware_specs.catalog import list_stacks, load_cluster, load_stack
from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from planners.plan import plan
from simulator.parallel_config import ParallelConfig
from simulator.stack_defaults import stack_config_fields, stack_sequence_parallel
from simulator.validate_config import check_config

ROOT = Path(__file__).resolve().parents[1]
MIXTRAL = load_model("mixtral-8x7b").with_seq_len(4096)
LLAMA = load_model("llama3-8b")
MEGATRON_CORE = ("megatron-core", "megatron-bridge", "nemo-")


def _config(stack, sp, tp=2, ep=4, dp=8):
    return ParallelConfig(**{**stack_config_fields(load_stack(stack), "bf16"), "dp": dp, "tp": tp, "ep": ep,
                             "micro_batch": 1, "global_batch": 64, "zero_stage": 1, "sequence_parallel": sp})


def test_the_megatron_core_stacks_list_it_as_the_export_s_flag_table_states_it():
    rule = next(r for r in json.loads((ROOT / "paraplan/exports/megatron_flags.json").read_text())["rules"]
                if r["id"] == "moe_tp_needs_sp")
    assert rule["when"] == "num_experts is not None and tensor_model_parallel_size > 1"
    assert rule["require"] == "sequence_parallel"
    for name in list_stacks():
        training = load_stack(name).training
        if training is not None:
            assert ("moe_tp_without_sp" in training.lacks) is name.startswith(MEGATRON_CORE), name


def test_check_config_refuses_moe_at_tp_2_without_sequence_parallelism_on_megatron_core():
    with pytest.raises(InputError, match="--sequence-parallel") as err:
        check_config(MIXTRAL, _config("megatron-core", False))
    assert err.value.field == "sequence_parallel"
    check_config(MIXTRAL, _config("megatron-core", True))                     # with it: runs
    check_config(MIXTRAL, _config("megatron-core", False, tp=1, ep=8))        # tp 1: nothing to split
    check_config(LLAMA, _config("megatron-core", False, ep=1))                # a dense model: runs
    check_config(MIXTRAL, _config("megatron-deepspeed", False))               # no such rule there


def test_simulate_exits_2_with_one_line_and_defaults_it_on(monkeypatch):
    # in-process (cli_results.completed), without PARAPLAN_DEBUG as the bare environment the
    # subprocess had; a real ``simulate`` process is test_cli's installed-entry-point test
    from cli_results import completed
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)
    args = ["simulate", "-m", "mixtral-8x7b", "-c", "dgx-h100", "-n", "16",
            "--tp", "2", "--ep", "4", "--global-batch", "64", "--zero", "1", "--seq-len", "4096"]
    bad = completed(*args, "--no-sequence-parallel")
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and bad.stderr.startswith("error: sequence_parallel:")
    assert "--sequence-parallel" in bad.stderr
    ok = completed(*args, "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["config"]["sequence_parallel"] is True
    # megatron-core's recipes leave it off for dense models: only the MoE model turns it on
    stack = load_stack("megatron-core")
    assert stack_sequence_parallel(stack, 2, moe=True) and not stack_sequence_parallel(stack, 2, moe=False)
    assert not stack_sequence_parallel(stack, 1, moe=True)


def test_the_planner_proposes_no_moe_plan_at_tp_2_without_sequence_parallelism():
    cluster = load_cluster("dgx-h100")
    with pytest.raises(InputError, match="moe_tp_without_sp|sequence parallelism"):
        plan(MIXTRAL, cluster, 32, 64, fixed={"tp": 2, "sequence_parallel": False}, dtypes=("bf16",),
             assign_stages=False)
    result = plan(MIXTRAL, cluster, 32, 64, fixed={"tp": 2}, dtypes=("bf16",), assign_stages=False, max_plans=None)
    assert len(result.plans) and bool(result.plans["sequence_parallel"].all())
