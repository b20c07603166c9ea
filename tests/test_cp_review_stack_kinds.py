"""A stack runs only the context-parallel flavours it has: torchtitan 0.2's
context_parallel_rotate_method is Literal['allgather', 'alltoall'] (pytorch/torchtitan@v0.2.0
torchtitan/config/job_config.py:378-387; 'alltoall' passes K/V shards around the ring), torchtitan
0.3.0 all-gathers only; neither runs Ulysses (heads all-to-all) or hybrid."""
import subprocess
import sys

import pytest

from hardware_specs.errors import InputError

B = ["-m", "llama3-8b", "-c", "dgx-h100", "-n", "64", "--seq-len", "131072", "--global-batch", "8"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "paraplan.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize("stack, kind, ok", [("torchtitan", "ulysses", False), ("torchtitan", "hybrid", False),
                                             ("torchtitan", "allgather", True), ("torchtitan-0.3", "ring", False)])
def test_simulate_refuses_a_cp_kind_the_stack_lacks(stack, kind, ok):
    r = _cli("simulate", *B, "--tp", "1", "--cp", "8", "--stack", stack, "--cp-kind", kind)
    assert r.returncode == (0 if ok else 2), r.stderr[-300:]
    if not ok:
        assert f"runs no {kind} context parallelism" in r.stderr


def test_plan_does_not_search_a_fixed_cp_kind_the_stack_lacks():
    from model_specs import load_model
    from planners.plan import plan
    model = load_model("llama3-8b").with_seq_len(131072)
    with pytest.raises(InputError, match="runs no ulysses context parallelism"):
        plan(model, "dgx-h100", 64, global_batch=8, fixed={"cp_kind": "ulysses"}, stack="torchtitan")


@pytest.mark.parametrize("stack, kinds", [
    # Megatron-Core --cp-comm-type p2p / a2a / allgather / a2a+p2p (NVIDIA/Megatron-LM@d98e8a64dd arguments.py:3221)
    ("megatron-core", {"ring", "ulysses", "hybrid", "allgather"}), ("megatron-bridge", {"ring", "ulysses", "hybrid", "allgather"}),
    ("nemo-24.09", {"ring", "ulysses", "hybrid", "allgather"}),
    # torch's own context_parallel: _RotateMethod ALL_TO_ALL (the ring) and ALL_GATHER only (pytorch/pytorch@09b101c59a)
    ("pytorch-fsdp", {"allgather", "ring"}), ("pytorch-ddp", {"allgather", "ring"}),
    ("torchtitan", {"allgather", "ring"}), ("torchtitan-0.3", {"allgather"})])
def test_each_stack_lists_the_cp_flavours_its_code_has(stack, kinds):
    from hardware_specs.catalog import load_stack
    assert set(load_stack(stack).training.context_parallel_kinds) == kinds


def test_llm_foundry_runs_no_context_parallelism():
    """The MPT benchmarks the llm-foundry stack describes run no context parallelism: cp > 1 is
    refused in one line, whichever flavour."""
    r = _cli("simulate", *B, "--tp", "1", "--cp", "8", "--stack", "llm-foundry")
    assert r.returncode == 2 and "has no context parallelism" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_api_and_a_simulate_sweep_refuse_a_given_cp_kind_the_stack_lacks():
    """torchtitan 0.3.0 all-gathers K/V only (module docstring), so a given ``cp_kind='ulysses'``
    is refused by the API's simulate, its sweep, and a ``search: simulate`` grid point, as
    ``paraplan simulate --cp-kind ulysses --stack torchtitan-0.3`` refuses it; they priced it."""
    from paraplan import api
    kw = dict(gpus=16, tp=1, cp=2, global_batch=16, stack="torchtitan-0.3")
    with pytest.raises(InputError, match="runs no ulysses context parallelism"):
        api.simulate("llama3-8b", "dgx-h100", cp_kind="ulysses", **kw)
    with pytest.raises(InputError, match="runs no ulysses context parallelism"):
        api.sweep(dict(model="llama3-8b", cluster="dgx-h100", **kw), "cp_kind", ["ulysses"])
    api.simulate("llama3-8b", "dgx-h100", cp_kind="allgather", **kw)      # the flavour it runs
    df = api.sweep_grid({"search": "simulate", "models": ["llama3-8b"], "clusters": ["dgx-h100"], "gpus": [16],
                         "global_batch": [16], "stacks": ["torchtitan-0.3"],
                         "config": {"tp": [1], "cp": [2], "cp_kind": ["ulysses", "allgather"]}})
    by_kind = dict(zip(df.cp_kind, df.status))
    assert by_kind == {"ulysses": "invalid", "allgather": "ok"}, df[["cp_kind", "status", "reason"]]
    assert "runs no ulysses" in df[df.cp_kind == "ulysses"].reason.iloc[0]
