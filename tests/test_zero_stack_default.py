"""Without --zero, every entry that simulates one configuration runs the --stack's documented
sharding (``default_zero_stage`` in hardware_specs/stacks/*.yaml, as ``validate published`` reads
a row that states none): torchtitan always shards with FSDP FULL_SHARD (ZeRO-3:
pytorch/torchtitan ``parallelize_llama`` applies ``fully_shard`` to every block whenever the
data-parallel shard degree is above 1), Megatron-Core's documented recipes use the distributed
optimizer (ZeRO-1, ``--use-distributed-optimizer``), and with dp*cp = 1 there is nothing to shard."""
import json

from click.testing import CliRunner

from paraplan import api
from paraplan.cli import main

REPRO = ["simulate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "64", "--tp", "8", "--stack", "torchtitan",
         "--micro-batch", "8", "--global-batch", "64", "--recompute", "full"]


def _cli(args):
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    return out.output


def test_simulate_without_zero_runs_the_stacks_default_and_says_so():
    data = json.loads(_cli(REPRO + ["--json"]))
    assert data["config"]["zero_stage"] == 3
    text = _cli(REPRO)
    assert "zero=3 (torchtitan's default; --zero sets another)" in text
    # llama3-70b's optimizer states (12 bytes x 70.6e9 / 8-way tp = 98.6 GiB a GPU unsharded)
    # over 8 FSDP ranks fit an 80 GB H100 with room to spare
    assert "fits: yes" in text
    # megatron-core: the distributed optimizer
    plain = ["simulate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "64", "--tp", "8", "--pp", "4",
             "--global-batch", "64"]
    assert "zero=1 (megatron-core's default; --zero sets another)" in _cli(plain)
    assert json.loads(_cli(plain + ["--zero", "0", "--json"]))["config"]["zero_stage"] == 0
    # dp = 1: nothing to shard
    one = ["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "8", "--tp", "8", "--global-batch", "8"]
    assert json.loads(_cli(one + ["--stack", "torchtitan", "--json"]))["config"]["zero_stage"] == 0


def test_cli_api_and_sweep_agree_without_a_zero():
    cli = json.loads(_cli(REPRO + ["--json"]))
    row = api.simulate("llama3-70b", "dgx-h100", gpus=64, tp=8, stack="torchtitan", micro_batch=8,
                       global_batch=64, recompute="full").iloc[0]
    grid = {"models": ["llama3-70b"], "clusters": ["dgx-h100"], "gpus": [64], "global_batch": [64],
            "stacks": ["torchtitan"], "search": "simulate",
            "config": {"tp": [8], "micro_batch": [8], "recompute": ["full"]}}
    swept = api.sweep_grid(grid).iloc[0]
    assert "z3" in row.config and "z3" in swept.config
    assert cli["step_time_s"] == row.step_time_s == swept.step_time_s
    assert row.memory_gib == swept.memory_gib


def test_pooled_simulate_takes_the_stacks_default_and_refuses_one_it_cannot_model():
    from pathlib import Path
    mixed = str(Path(__file__).resolve().parents[1] / "examples" / "clusters" / "a100-h100.yaml")
    group = ["simulate", "-m", "llama3-70b", "-c", mixed, "--global-batch", "512", "--group", "32x h100:tp8:pp1",
             "--group", "8x a100:tp8:pp4", "--sequence-parallel"]
    data = json.loads(_cli(group + ["--json"]))
    assert data["plan"]["zero_stage"] == 1                     # megatron-core's, over 40 replicas
    assert json.loads(_cli(group + ["--zero", "0", "--json"]))["plan"]["zero_stage"] == 0
    refused = CliRunner().invoke(main, group + ["--stack", "torchtitan"])
    assert refused.exit_code != 0 and "torchtitan's default ZeRO-3 across pools is not modelled" in refused.output
