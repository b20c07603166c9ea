"""``simulate`` says what ``plan`` says of the same point: a time resting on activation offload
over PCIe or optimizer offload, which no measured run in the validation files exercises.

Found by session 71's review: ``plan -m llama3-70b -c dgx-h100 -n 64 --global-batch 128 --fix
zero=1`` noted that its best plan's offload "rests on the link and overlap model alone", and the
``simulate`` command it printed for that very plan gave the same 0.548 s of offload_exposed_s
without a word (and plan's note said "1 layers per chunk").
"""
from __future__ import annotations

import json

from click.testing import CliRunner

from paraplan.cli import main

BASE = ["simulate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "64", "--tp", "4", "--pp", "4", "--vpp", "10",
        "--global-batch", "128", "--zero", "1", "--sequence-parallel"]
NOTE = ("note: activation offload over PCIe (1 layer per chunk), which no measured run in the validation files "
        "exercises: offload_exposed_s rests on the link and overlap model alone")


def run(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.stdout


def test_simulate_notes_pcie_activation_offload_as_plan_does_for_its_best_plan():
    text = run(*BASE, "--offload-activation-layers", "1")
    assert NOTE in " ".join(text.split()), text[-800:]
    data = json.loads(run(*BASE, "--offload-activation-layers", "1", "--json"))
    assert data["unmeasured_features"] == "activation offload over PCIe (1 layer per chunk)"
    assert data["time_breakdown_s"]["offload_exposed_s"] > 0       # the number the note is about


def test_plans_best_offloading_row_and_its_simulate_command_say_the_same():
    plan = json.loads(run("plan", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "64", "--global-batch", "128",
                          "--fix", "zero=1", "--json", "--top", "1"))
    best = plan["plans"][0]
    assert best["offload_activation_layers"] == 1 and best["vpp"] == 10
    sim = json.loads(run(*BASE, "--offload-activation-layers", "1", "--micro-batch", "1", "--json"))
    assert sim["unmeasured_features"] == plan["best_unmeasured_features"]
    assert sim["step_time_s"] == best["step_time_s"]


def test_optimizer_offload_is_noted_and_a_run_without_offload_is_not():
    text = run(*BASE, "--offload-optimizer-fraction", "0.5")
    assert "note: optimizer offload, which no measured run" in " ".join(text.split())
    plain = run(*BASE, "--recompute", "selective")
    assert "no measured run in the validation files" not in plain
    assert json.loads(run(*BASE, "--recompute", "selective", "--json"))["unmeasured_features"] == ""
