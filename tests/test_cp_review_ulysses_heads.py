"""Ulysses (Megatron-Core --cp-comm-type a2a, Transformer Engine's all-to-all CP) splits a TP
rank's query heads AND its key/value heads over cp, and the sequence into 2 x cp chunks.

TE ``AttnFuncWithCPAndQKVOA2A.forward`` (NVIDIA/TransformerEngine@015d22571b
transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py) asserts
``q.shape[-2] % cp == 0`` and ``k.shape[-2] % cp == 0`` ("The number of attention heads needs to be
divisible by CP size!"); Megatron-LM ``arguments.py`` asserts ``seq_length % (2 *
context_parallel_size) == 0`` for every ``--cp-comm-type``.
"""
import subprocess
import sys

import pytest

import cost_models.context_parallel as cpm
from hardware_specs.errors import InputError


def test_heads_rule_needs_the_kv_heads_of_a_tp_rank_divisible_by_cp():
    # Llama 3.1 70B: 64 query, 8 KV heads. tp 8 -> 8 query, 1 KV head a rank: no cp > 1
    assert not cpm.ulysses_heads_ok(64, 8, 8, 2) and not cpm.ulysses_heads_ok(64, 8, 8, 4)
    # tp 4 -> 16 query, 2 KV: cp 2 only
    assert cpm.ulysses_heads_ok(64, 8, 4, 2) and not cpm.ulysses_heads_ok(64, 8, 4, 4)
    # Llama 3 8B at tp 1: 32 query, 8 KV heads: cp 8 yes, cp 16 and 32 no
    assert cpm.ulysses_heads_ok(32, 8, 1, 8)
    assert not cpm.ulysses_heads_ok(32, 8, 1, 16) and not cpm.ulysses_heads_ok(32, 8, 1, 32)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "paraplan.cli", *args], capture_output=True, text=True)


def test_simulate_refuses_ulysses_over_one_kv_head_a_tp_rank():
    r = _cli("simulate", "-m", "llama3.1-70b", "-c", "dgx-h100", "-n", "64", "--tp", "8", "--cp", "4", "--seq-len",
             "131072", "--global-batch", "8", "--cp-kind", "ulysses", "--recompute", "full", "--sequence-parallel")
    assert r.returncode == 2, r.stdout[-500:]
    assert "Ulysses needs the query and key/value heads of a TP rank divisible by cp" in r.stderr
    assert "8 query and 1 key/value heads" in r.stderr


def test_simulate_refuses_ulysses_on_a_sequence_not_split_into_2cp_chunks():
    # 131080 = 8 x 16385: 8 chunks but not 16
    r = _cli("simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "8", "--tp", "1", "--cp", "8", "--seq-len",
             "131080", "--global-batch", "8", "--cp-kind", "ulysses", "--no-sequence-parallel")
    assert r.returncode == 2 and "2 x cp = 16 equal chunks" in r.stderr


def test_plan_ulysses_ranks_no_layout_that_splits_kv_heads_below_one_a_cp_rank():
    from model_specs import load_model
    from planners.plan import plan
    model = load_model("llama3-8b").with_seq_len(131072)
    result = plan(model, "dgx-h100", 64, global_batch=8, fixed={"cp_kind": "ulysses"}, stack="megatron-core",
                  max_plans=None, top=1)
    t, c = result.plans["tp"].astype(int), result.plans["cp"].astype(int)
    # 8 KV heads: kv/tp (at least 1) must divide by cp
    kv_local = [max(8 // x, 1) for x in t]
    assert all(k % y == 0 for k, y in zip(kv_local, c)) and (c > 1).any()
    # tp 8 leaves one KV head a rank: no Ulysses cp > 1 at all, said so
    model70 = load_model("llama3.1-70b").with_seq_len(131072)
    with pytest.raises(InputError, match="Ulysses needs the query and key/value heads of a TP rank divisible by cp"):
        plan(model70, "dgx-h100", 128, global_batch=16, fixed={"cp_kind": "ulysses", "tp": 8}, stack="megatron-core")


@pytest.mark.parametrize("extra", [("--cp", "16", "--tp", "4"), ("--cp", "64")])
def test_plan_blames_the_heads_rule_for_a_fixed_ulysses_cp(extra):
    # tp 4 x cp 16 = 64 GPUs with dp 1, and 131072 % 128 == 0: only the heads rule fails (8 KV heads)
    r = _cli("plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "64", "--seq-len", "131072", "--global-batch", "8",
             *extra, "--fix", "cp_kind=ulysses")
    assert r.returncode == 2
    assert "Ulysses needs the query and key/value heads of a TP rank divisible by cp" in r.stderr
    assert "dp x tp x pp x cp must be" not in r.stderr and "ring context" not in r.stderr
