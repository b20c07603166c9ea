"""``plan --recompute full`` pins what ``simulate --recompute full`` runs: every layer of each
model chunk (GPT-3 175B's 96 layers on pp 8 x vpp 2 = 16 chunks of 6, all 6 recomputed), not
the fewest layers the memory search finds to fit (it gave 3 of 6, Megatron's
--recompute-method block --recompute-num-layers 3); ``--recompute-num-layers N`` pins N, as in
simulate, and the two commands agree on the step."""
import json

from click.testing import CliRunner

from paraplan.cli import main

PLAN = ["plan", "-m", "gpt-175b", "-c", "dgx-a100-80gb", "-n", "1024", "--tp", "8", "--pp", "8", "--dp", "16",
        "--vpp", "2", "--micro-batch", "1", "--global-batch", "1536", "--dtype", "fp16", "--recompute", "full",
        "--zero", "0", "--fix", "sequence_parallel=false"]
SIM = ["simulate", "-m", "gpt-175b", "-c", "dgx-a100-80gb", "-n", "1024", "--tp", "8", "--pp", "8", "--vpp", "2",
       "--micro-batch", "1", "--global-batch", "1536", "--dtype", "fp16", "--recompute", "full", "--zero", "0",
       "--no-sequence-parallel", "--json"]


def _run(args):
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    return out.output


def test_plan_recompute_full_recomputes_every_layer_as_simulate_does():
    best = json.loads(_run(PLAN + ["--json"]))["plans"][0]
    assert best["recompute"] == "full" and best["recompute_num_layers"] == 0
    assert best["recompute_layers_decrement"] == 0
    sim = json.loads(_run(SIM))
    assert best["step_time_s"] == sim["step_time_s"]
    launch = _run(PLAN + ["--emit", "megatron"])
    assert "--recompute-method block" not in launch


def test_plan_recompute_num_layers_pins_n_layers_as_simulate_does():
    best = json.loads(_run(PLAN + ["--recompute-num-layers", "3", "--json"]))["plans"][0]
    assert best["recompute_num_layers"] == 3
    sim = json.loads(_run(SIM + ["--recompute-num-layers", "3"]))
    assert best["step_time_s"] == sim["step_time_s"]
    launch = _run(PLAN + ["--recompute-num-layers", "3", "--emit", "megatron"])
    assert "--recompute-method block" in launch and "--recompute-num-layers 3" in launch


def test_recompute_num_layers_needs_a_full_recompute_and_the_help_says_what_full_pins():
    out = CliRunner().invoke(main, [a for a in PLAN if a not in ("--recompute", "full")] + ["--recompute-num-layers", "2"])
    assert out.exit_code != 0 and "recompute_num_layers" in out.output
    text = " ".join(CliRunner().invoke(main, ["plan", "--help"]).output.split())
    assert "full recomputes every layer of each model chunk" in text and "--recompute-num-layers" in text
