"""The context-parallel flavour a stack's framework runs (``training.context_parallel_kind``):
what ``simulate`` without --cp-kind and ``plan`` without --fix cp_kind price.

Cited defaults: Megatron-Core's ``--cp-comm-type`` defaults to ``["p2p"]``, the ring
(NVIDIA/Megatron-LM@d98e8a64dd megatron/training/arguments.py:3221); torchtitan 0.2.0's
``context_parallel_rotate_method`` defaults to ``"allgather"`` (pytorch/torchtitan@v0.2.0
torchtitan/config/job_config.py:381) and 0.3.0's CP wrapper all-gathers K/V for FlexAttention
(torchtitan/distributed/context_parallel/api.py ``flex_cp_allgather``).

The hand-derived numbers use the toy cluster of ``test_cp_allgather`` (400 GB/s NVLink, zero
latency, efficiency 1): every collective takes bytes / bandwidth.
"""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from hardware_specs.catalog import load_stack
from hardware_specs.errors import InputError
from hardware_specs.stack_files import stack_from_dict
from paraplan import api
from paraplan.cli import main
from planners import plan
from planners.search_space import FIXABLE
from simulator.stack_defaults import stack_cp_kind

from toy_hardware import NVLINK, toy_cluster, toy_efficiency

MIB = 2**20


@pytest.fixture(scope="module")
def toy():
    return toy_cluster(), toy_efficiency()


def test_each_stack_names_the_cp_flavour_its_framework_runs_with_its_source():
    for name in ("torchtitan", "torchtitan-compile"):
        stack = load_stack(name)
        assert stack.training.context_parallel_kind == "allgather"
        text = stack.citations["training.context_parallel_kind"]
        assert "job_config.py" in text and "context_parallel_rotate_method" in text
        assert "context_parallel/api.py" in text and "flex_cp_allgather" in text
    for name in ("megatron-core", "megatron-core-0.12", "nemo-24", "nemo-24.09", "megatron-bridge",
                 "megatron-bridge-25.09"):
        stack = load_stack(name)
        assert stack.training.context_parallel_kind == "ring"
        assert "arguments.py:3221" in stack.citations["training.context_parallel_kind"]
        assert "default=['p2p']" in stack.citations["training.context_parallel_kind"]
    # a release without context parallelism keeps the default and says it does not apply
    assert "not applicable" in load_stack("megatron-lm-2022").citations["training.context_parallel_kind"]
    with pytest.raises(InputError, match="training.context_parallel_kind: unknown flavour 'rings'"):
        stack_from_dict({"name": "x", "framework": "f", "training": {"context_parallel_kind": "rings"}})
    assert stack_cp_kind(load_stack("torchtitan")) == "allgather"
    assert stack_cp_kind(load_stack("megatron-core")) == "ring"


def test_simulate_prices_the_stacks_cp_flavour_by_hand(toy):
    # Llama 3 8B at seq 8192, tp 2, cp 4: a rank's K and V block is 2048 tokens x 4 heads x
    # (128 + 128) x 2 B = 4 MiB; the all-gather receives 3 of the 4 blocks (12 MiB) forward, and
    # the all-gather again plus the dK/dV reduce-scatter (24 MiB) backward, all exposed (Llama 3
    # paper section 3.3.2): 36 MiB / 400 GB/s a layer, x 32 layers x 2 micro-batches
    cluster, eff = toy
    args = dict(gpus=8, tp=2, cp=4, micro_batch=1, global_batch=2, seq_len=8192, zero_stage=3, efficiency=eff)
    titan = api.simulate("llama3-8b", cluster, stack="torchtitan", **args)
    assert titan["cp_comm_exposed_s"].iloc[0] == pytest.approx(2 * 32 * 36 * MIB / NVLINK, rel=1e-12)
    # the ring hides every step under this attention (Megatron-Core's default): nothing exposed
    mcore = api.simulate("llama3-8b", cluster, stack="megatron-core", **args)
    assert mcore["cp_comm_exposed_s"].iloc[0] == 0.0
    # a flavour given wins over the stack's
    ring = api.simulate("llama3-8b", cluster, stack="torchtitan", cp_kind="ring", **args)
    assert ring["cp_comm_exposed_s"].iloc[0] == 0.0


def test_simulate_cli_says_where_the_cp_flavour_came_from():
    base = ["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "--gpus", "16", "--tp", "2", "--cp", "4",
            "--seq-len", "32768", "--global-batch", "8", "--zero", "3"]
    out = CliRunner().invoke(main, base + ["--stack", "torchtitan"])
    assert out.exit_code == 0, out.output
    assert "cp_kind=allgather (torchtitan's default; --cp-kind sets another)" in " ".join(out.output.split())
    given = CliRunner().invoke(main, base + ["--stack", "torchtitan", "--cp-kind", "ring"])
    assert "cp_kind=ring " in " ".join(given.output.split()) and "--cp-kind sets another" not in given.output
    # at cp 1 no flavour runs: ring, no note, and --cp-kind is still refused there
    one = CliRunner().invoke(main, ["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "--gpus", "8",
                                    "--global-batch", "8", "--stack", "torchtitan", "--zero", "3"])
    assert "cp_kind=ring " in " ".join(one.output.split()) and "--cp-kind sets another" not in one.output
    refused = CliRunner().invoke(main, ["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "--gpus", "8",
                                        "--global-batch", "8", "--cp-kind", "allgather"])
    assert refused.exit_code == 2 and "cp_kind" in refused.output


def test_plan_searches_the_stacks_flavour_and_agrees_with_simulate():
    from model_specs import load_model
    model = load_model("llama3-8b").with_seq_len(32768)
    for stack, fixed_kind, kind in (("torchtitan", None, "allgather"), ("torchtitan", "ring", "ring"),
                                    ("megatron-core", None, "ring"), ("megatron-core", "allgather", "allgather")):
        fixed = {"cp": 4, **({"cp_kind": fixed_kind} if fixed_kind else {})}
        result = plan(model, "dgx-h100", 16, global_batch=16, fixed=fixed, stack=stack, top=1)
        best = result.best_config
        assert best.cp == 4 and best.cp_kind.value == kind
        assert result.software[best.dtype]["cp_kind"] == kind
        # simulate of the winner without a flavour (the stack's) or with the fixed one: the same step
        sim = api.simulate(model, "dgx-h100", stack=stack, gpus=16, dp=best.dp, tp=best.tp, pp=best.pp, cp=best.cp,
                           micro_batch=best.micro_batch, global_batch=16, zero_stage=best.zero_stage,
                           recompute=best.recompute.value, sequence_parallel=best.sequence_parallel,
                           **({"cp_kind": fixed_kind} if fixed_kind else {}))
        assert sim["step_time_s"].iloc[0] == pytest.approx(float(result.plans.iloc[0]["step_time_s"]), rel=1e-12)
        assert sim["cp_comm_exposed_s"].iloc[0] == pytest.approx(float(result.plans.iloc[0]["cp_comm_exposed_s"]),
                                                                 rel=1e-12)
        assert (sim["cp_comm_exposed_s"].iloc[0] > 0) == (kind == "allgather")


def test_fix_cp_kind_is_a_planner_key_with_one_flavour_a_search():
    assert "cp_kind" in FIXABLE
    with pytest.raises(InputError, match="one context-parallel flavour"):
        plan("llama3-8b", "dgx-h100", 16, global_batch=16, fixed={"cp_kind": ["ring", "allgather"]})
    with pytest.raises(InputError, match="cp_kind='spiral'"):
        plan("llama3-8b", "dgx-h100", 16, global_batch=16, fixed={"cp_kind": "spiral"})
    help_text = " ".join(CliRunner().invoke(main, ["plan", "--help"]).output.split())
    assert "cp_kind" in help_text


def test_a_ulysses_search_keeps_only_cp_that_splits_a_tp_ranks_heads():
    # Llama 3 8B has 32 query and 8 KV heads: at tp 4 a rank holds 8 and 2, so Ulysses takes cp 2,
    # not 4, 8 or 16 (check_config's rule; TE's a2a CP splits the query and the KV heads over cp)
    from model_specs import load_model
    model = load_model("llama3-8b").with_seq_len(32768)
    result = plan(model, "dgx-h100", 64, global_batch=64, fixed={"tp": 4, "pp": 1, "cp_kind": "ulysses"},
                  stack="megatron-core", max_plans=None, top=1)
    cps = set(result.plans["cp"].astype(int))
    assert cps <= {1, 2} and 2 in cps
    assert result.software[result.dtypes[0]]["cp_kind"] == "ulysses"


def test_plot_leaves_the_flavour_to_the_stack_unless_given():
    # plot's --cp-kind defaulted to ring, so a torchtitan breakdown at cp > 1 priced the ring
    # (and the plans kind handed cp_kind to the planner as a field it did not search)
    from paraplan.commands import plot
    option = next(p for p in plot.command.params if p.name == "cp_kind")
    assert option.default is None
    opts = dict(model="llama3-8b", cluster="dgx-h100", gpus=16, gpu=None, seq_len=32768, dp=None, tp=2, pp=None,
                cp=4, ep=None, vpp=None, micro_batch=None, global_batch=8, global_batch_tokens=None, zero=3,
                recompute=None, sequence_parallel=None, dtype=None, schedule=None, cp_kind=None, stack="torchtitan")
    base = plot._base(opts, "breakdown")
    assert "cp_kind" not in base
    row = api.simulate(**base)
    assert row["cp_kind"].iloc[0] == "allgather"
