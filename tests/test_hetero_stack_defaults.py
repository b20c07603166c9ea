"""The stack's defaults on pooled clusters as on one GPU kind: pooled ``simulate`` says where a
ZeRO stage nobody gave came from (``stack_zero_stage``), and the stack's context-parallel flavour
(``run_cp_kind``) changes no pooled plan, since pooled plans run cp 1 only."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_results import run
from hardware_specs.catalog import load_cluster, load_stack
from hardware_specs.pools import Pool, PooledCluster
from model_specs.catalog import load_model
from planners.heterogeneous import plan_heterogeneous
from simulator import ParallelConfig, simulate
from simulator.heterogeneous import simulate_heterogeneous
from simulator.stack_defaults import run_cp_kind

REPO = Path(__file__).resolve().parents[1]
MIXED = REPO / "examples" / "clusters" / "a100-h100.yaml"
#: megatron-core's documented default: --use-distributed-optimizer, ZeRO-1
#: (hardware_specs/stacks/megatron-core.yaml default_zero_stage, citing Megatron-LM's examples)
DEFAULT_NOTE = "zero=1 (megatron-core's default; --zero sets another)"
POOLED = ("simulate", "-m", "gpt3-1.3b", "-c", MIXED, "--global-batch", "64", "--group", "2x h100:tp8:pp1",
          "--group", "2x a100:tp8:pp1")


@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)


def test_pooled_simulate_says_where_its_default_zero_stage_came_from():
    """Four replicas, no --zero: megatron-core's ZeRO-1, said as the one-kind table says it; the
    settings wrap within 120 columns (two lines with the note)."""
    r = run(*POOLED)
    assert r.exit_code == 0, r.output
    assert DEFAULT_NOTE in r.stdout
    header = r.stdout.split("\n\n")[0].splitlines()         # model, cluster, plan and its settings
    assert len(header) == 5 and max(len(line) for line in header) <= 120
    one_kind = run("simulate", "-m", "gpt3-1.3b", "-c", "dgx-h100", "--gpus", "16", "--tp", "8", "--global-batch", "64")
    assert one_kind.exit_code == 0, one_kind.output
    assert DEFAULT_NOTE in " ".join(one_kind.stdout.split())


def test_pooled_simulate_names_no_source_for_a_zero_stage_given():
    for extra in (("--zero", "1"), ("--zero", "0")):
        r = run(*POOLED, *extra)
        assert r.exit_code == 0, r.output
        assert "--zero sets another" not in r.stdout
        assert f"zero={extra[1]} recompute=" in r.stdout


def test_pooled_simulate_with_one_replica_has_nothing_to_shard():
    r = run("simulate", "-m", "gpt3-1.3b", "-c", MIXED, "--global-batch", "64", "--group", "1x h100:tp8:pp1")
    assert r.exit_code == 0, r.output
    assert "zero=0 (dp*cp is 1: nothing to shard)" in r.stdout


def test_a_plan_files_own_zero_stage_gets_no_note_and_one_without_gets_the_stacks(tmp_path):
    data = json.loads(run(*POOLED, "--zero", "0", "--json").stdout)["plan"]
    data["zero_stage"] = 0
    given = tmp_path / "given.json"
    given.write_text(json.dumps(data))
    r = run("simulate", "-m", "gpt3-1.3b", "-c", MIXED, "--plan", given)
    assert r.exit_code == 0, r.output
    assert "zero=0 recompute=" in r.stdout and "--zero sets another" not in r.stdout
    del data["zero_stage"]
    unstated = tmp_path / "unstated.json"
    unstated.write_text(json.dumps(data))
    r = run("simulate", "-m", "gpt3-1.3b", "-c", MIXED, "--plan", unstated)
    assert r.exit_code == 0, r.output
    assert DEFAULT_NOTE in r.stdout


def test_a_torchtitan_stack_plans_pooled_clusters_as_a_ring_one_at_cp_1():
    """torchtitan all-gathers K/V for context parallelism (its ``context_parallel_kind``), which
    one GPU kind prices at cp 2; pooled plans run cp 1 only, so the flavour prices nothing: the
    ranked table is identical to that of the same stack with the ring, every plan is cp 1 with
    ``run_cp_kind``'s ring, and pooled simulate agrees with the planner. (torchtitan's own
    reduction on every micro-batch is refused across pools, so it reduces once per step here.)"""
    tt = load_stack("torchtitan").with_training(zero01_grad_reduce="last_microbatch")
    assert tt.training.context_parallel_kind == "allgather"
    ring = tt.with_training(context_parallel_kind="ring", cp_allgather_backward="saved")
    model = load_model("gpt3-1.3b")
    # the flavour is live where cp > 1: one GPU kind prices the all-gather and the ring differently
    # (8 ranks of an 8k sequence)
    config = dict(dp=1, tp=1, pp=1, cp=8, micro_batch=1, global_batch=8, zero_stage=0)
    h100, long = load_cluster("dgx-h100"), model.with_seq_len(8192)
    assert (simulate(long, h100, ParallelConfig(cp_kind="allgather", **config)).step_time_s
            != simulate(long, h100, ParallelConfig(cp_kind="ring", **config)).step_time_s)
    cluster = PooledCluster("mix", (Pool("a100", load_cluster("dgx-a100-80gb"), 16), Pool("h100", h100, 8)))
    search = dict(global_batch=64, max_micro_batch=2, recomputes=("none",), zeros=(0,), top=10**6)
    got, want = plan_heterogeneous(model, cluster, stack=tt, **search), plan_heterogeneous(model, cluster, stack=ring,
                                                                                           **search)
    assert len(got.plans) > 0 and got.plans.equals(want.plans)
    for i in range(min(5, len(got.plans))):
        plan, cl = got.row_plan(i)
        assert plan.settings.cp == 1
        assert plan.settings.cp_kind.value == run_cp_kind(1, None, tt, model.name, None, plan.settings.dtype) == "ring"
        rep = simulate_heterogeneous(model, cl, plan)
        assert rep.step_time_s == pytest.approx(got.plans.iloc[i]["step_time_s"], rel=1e-9)
