"""The stack's defaults on pooled clusters as on one GPU kind: pooled ``simulate`` says where a
ZeRO stage nobody gave came from (``stack_zero_stage``)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_results import run

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

