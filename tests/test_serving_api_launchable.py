"""``serving_api.serve_plan`` answers as ``paraplan serve plan`` does: its ``best`` is the best
layout the engine can launch as priced (the CLI's headline and ``--json`` ``best``), the search's
better winner the engine refuses kept in ``engine_refused_best`` with the refusal. It returned
the search's winner, so for Llama-3.1-70B on 8 H100 with vLLM at TPOT 20 ms a notebook got the
disaggregated layout (vLLM ships no router for disaggregated prefill and decode workers:
vllm/docs/features/disagg_prefill.md) where the CLI headlined the aggregated one."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from cli_results import completed
from paraplan.cli import main
from paraplan.serving_api import serve_plan

ROOT = Path(__file__).resolve().parents[1]
_BEST_FIELDS = ("mode", "layout", "workers", "batch", "gpus_used", "ttft_ms", "tpot_ms", "tokens_per_s_per_gpu")


def _cli_json(*args) -> dict:
    res = completed("serve", "plan", *args, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _same_best(plan, cli: dict) -> None:
    """The API's best row is the CLI --json best: the same layout and numbers."""
    for k in _BEST_FIELDS:
        api, cmd = plan.best.get(k), cli["best"].get(k)     # a mode's columns only where it was searched
        assert (api is None or pd.isna(api)) and cmd is None or api == cmd, (k, api, cmd)
    # why is said of that layout, as the CLI's (the API adds the notes the CLI's header carries,
    # and the line under the headline saying the engine cannot launch it, --json's launch_refusal)
    assert [w for w in plan.why if not w.startswith(("note: ", "launch: "))] == cli["why"]
    assert plan.launch_refusal == cli["launch_refusal"]
    assert [w for w in plan.why if w.startswith("launch: ")] == ([] if plan.launch_refusal is None
                                                                  else [f"launch: {plan.launch_refusal}"])


def _met(plan) -> pd.DataFrame:
    return plan.candidates[plan.candidates["meets_slo"].astype(bool)]


def test_the_api_best_is_the_layout_vllm_launches_and_the_refused_winner_rides_beside_it():
    args = dict(ttft_ms=1000.0, tpot_ms=20.0, backend="vllm")
    plan = serve_plan("llama3.1-70b", "dgx-h100", 8, **args)
    met = _met(plan)
    agg = met[met["mode"] == "agg"]
    # vLLM launches aggregated workers only: the best is the aggregated row with the most tokens/s/GPU
    assert plan.best["mode"] == "agg" and plan.best.tokens_per_s_per_gpu == agg.tokens_per_s_per_gpu.max()
    assert plan.why[0].startswith(f"why: agg {int(plan.best.workers)} x {plan.best.layout} ")
    # the search's winner, most tokens/s/GPU of all meeting the SLO, is disaggregated: refused, kept
    refused = plan.engine_refused_best
    assert refused is not None and refused.row["mode"] == "disagg"
    assert refused.row.tokens_per_s_per_gpu == met.tokens_per_s_per_gpu.max() > plan.best.tokens_per_s_per_gpu
    assert refused.refusal.startswith("--mode: vLLM ships no router for disaggregated prefill and decode workers")
    # a dense model's expert split is blank there too, and it carries the labels the best does
    assert pd.isna(refused.row["moe_tp"]) and refused.row["efficiency_fitted"] == plan.best["efficiency_fitted"]
    cli = _cli_json("-m", "llama3.1-70b", "-s", "dgx-h100", "-n", "8", "--tpot-ms", "20", "-b", "vllm")
    _same_best(plan, cli)
    assert cli["engine_refused_best"]["engine_refuses"] == refused.refusal
    assert cli["engine_refused_best"]["tokens_per_s_per_gpu"] == refused.row.tokens_per_s_per_gpu


def test_a_winner_the_engine_launches_stays_the_best_with_nothing_beside_it():
    plan = serve_plan("llama3.1-8b", "dgx-h100", 8)
    met = _met(plan)
    assert plan.best.tokens_per_s_per_gpu == met.tokens_per_s_per_gpu.max()
    assert plan.engine_refused_best is None
    cli = _cli_json("-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8")
    _same_best(plan, cli)
    assert cli["engine_refused_best"] is None


def test_a_stack_with_no_launch_export_keeps_the_search_winner_as_serve_plan_does(tmp_path):
    """A stack file of a framework paraplan writes no launch for (here ``lmdeploy``): every row is
    refused alike (``--emit: no launch export``), so the CLI headlines the search's winner ("best:")
    and says the engine cannot launch it as priced; the API keeps that winner, nothing beside it."""
    text = (ROOT / "hardware_specs" / "stacks" / "vllm-0.14.yaml").read_text()
    assert "\nframework: vllm\n" in text and "\nname: vllm-0.14\n" in text
    stack = tmp_path / "lmdeploy-test.yaml"
    stack.write_text(text.replace("\nframework: vllm\n", "\nframework: lmdeploy\n")
                     .replace("\nname: vllm-0.14\n", "\nname: lmdeploy-test\n"))
    plan = serve_plan("llama3.1-70b", "dgx-h100", 8, tpot_ms=20.0, backend=str(stack))
    met = _met(plan)
    assert plan.best.tokens_per_s_per_gpu == met.tokens_per_s_per_gpu.max()
    assert plan.engine_refused_best is None
    args = ("-m", "llama3.1-70b", "-s", "dgx-h100", "-n", "8", "--tpot-ms", "20", "-b", str(stack))
    cli = _cli_json(*args)
    _same_best(plan, cli)
    assert cli["engine_refused_best"] is None
    out = completed("serve", "plan", *args).stdout
    assert "\nbest: " in out and ("no layout lmdeploy can launch meets the SLO, so --emit has nothing to launch: "
                                  "none of ") in out and "(--emit: no launch export" in out


def test_where_no_layout_meeting_the_slo_launches_the_api_keeps_the_winner_as_the_cli():
    """vLLM with only disaggregated layouts searched: none launches, so the CLI headlines the
    search's winner (saying vLLM cannot launch it) and the API's best is that winner."""
    plan = serve_plan("llama3.1-70b", "dgx-h100", 8, tpot_ms=20.0, backend="vllm", modes="disagg")
    assert plan.best["mode"] == "disagg" and plan.engine_refused_best is None
    assert plan.best.tokens_per_s_per_gpu == _met(plan).tokens_per_s_per_gpu.max()
    _same_best(plan, _cli_json("-m", "llama3.1-70b", "-s", "dgx-h100", "-n", "8", "--tpot-ms", "20", "-b", "vllm",
                               "--mode", "disagg"))


def _headline_and_emit(*args) -> tuple[str, str]:
    """serve plan's text and its --emit error line (exit 2) for the same request."""
    out = completed("serve", "plan", *args)
    assert out.returncode == 0, out.stderr
    emitted = completed("serve", "plan", *args, "--emit")
    assert emitted.returncode == 2 and emitted.stderr.startswith("error: --emit: none of the "), emitted.stderr
    return out.stdout, emitted.stderr


def test_where_vllm_launches_no_disaggregated_layout_the_headline_does_not_promise_emit_one():
    """Llama-3.1-8B on 8 H100, --mode disagg, vLLM: every layout is disaggregated and vLLM ships no
    router for them (vllm/docs/features/disagg_prefill.md), so --emit exits 2. The headline said
    "--emit on this plan launches the best layout vllm can run"; it says none meets the SLO and
    gives --emit's way out (--mode agg, or -b sglang / -b trtllm)."""
    out, err = _headline_and_emit("-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8", "--isl", "1024", "--osl", "256",
                                  "--mode", "disagg")
    assert "launches the best layout vllm can run" not in out
    assert "no layout vllm can launch meets the SLO, so --emit has nothing to launch: none of the " in out
    assert "(--mode: vLLM ships no router for disaggregated prefill and decode workers)" in err
    fix = "export the aggregated plan (serve plan --mode agg), or plan with -b sglang / -b trtllm"
    assert fix in err and fix in out


def test_where_vllm_launches_no_worker_of_10_gpus_the_headline_says_whole_hosts():
    """DeepSeek-R1 on 10 H100 (hosts of 8): every layout meeting the SLO is one worker of 10 GPUs,
    which vLLM cannot place (a worker must fill whole hosts of 8 or sit in one); --emit exits 2,
    and the headline says so with the same way out."""
    out, err = _headline_and_emit("-m", "deepseek-r1", "-s", "dgx-h100", "-n", "10")
    assert "launches the best layout vllm can run" not in out
    assert "no layout vllm can launch meets the SLO" in out and "does not fill whole hosts of 8" in out
    fix = "use a worker of a multiple of 8 GPUs, or of at most 8"
    assert fix in err and fix in out


def test_nothing_fits_names_the_least_gpus_whose_layout_the_engine_launches():
    """DeepSeek-R1 (FP8) on 9 H100 fits no layout. The advice was "add GPUs (a layout fits on
    10)", but on 10 and 12 GPUs the layouts are single workers of 10 / 12 GPUs, which vLLM cannot
    place on hosts of 8 (a worker fills whole hosts or sits in one: 10 and 12 are neither <= 8 nor
    multiples of 8); the next count a worker can have above 8 is 16. The advice says both."""
    res = completed("serve", "plan", "-m", "deepseek-r1", "-s", "dgx-h100", "-n", "9")
    assert res.returncode == 2
    assert "add GPUs (a layout fits on 10, but vllm launches none on fewer than 16)" in res.stderr, res.stderr
    # the API says the same, and on 16 GPUs vLLM launches the plan (--emit writes a script)
    import pytest
    from hardware_specs.errors import InputError
    with pytest.raises(InputError, match=r"a layout fits on 10, but vllm launches none on fewer than 16"):
        serve_plan("deepseek-r1", "dgx-h100", 9)
    assert completed("serve", "plan", "-m", "deepseek-r1", "-s", "dgx-h100", "-n", "16", "--emit").returncode == 0
    assert completed("serve", "plan", "-m", "deepseek-r1", "-s", "dgx-h100", "-n", "10", "--emit").returncode == 2


def test_nothing_fits_says_when_the_engine_launches_no_layout_that_fits():
    """vLLM with only disaggregated layouts: none launches (vLLM ships no router for them), so the
    least fitting count is named with that said, not as a count to plan on."""
    res = completed("serve", "plan", "-m", "deepseek-r1", "-s", "dgx-h100", "-n", "9", "--mode", "disagg")
    assert res.returncode == 2
    assert ", but vllm cannot launch any layout that fits)" in res.stderr, res.stderr


def test_a_best_the_engine_cannot_launch_says_so_in_the_plan():
    """Where no layout meeting the SLO launches, ``best`` is the search's winner and the plan says
    the engine cannot launch it (``launch_refusal``, and in ``why``), as serve plan's text does
    under its headline. It said nothing: a notebook got a plan the engine cannot run.

    Llama-3.1-70B on 8 B200, disaggregated only: vLLM ships no router for disaggregated prefill and
    decode workers (vllm/docs/features/disagg_prefill.md). Llama-3.1-405B in bf16 on 16 H100 at
    TPOT 200 ms: 405e9 x 2 bytes = 810 GB of weights, more than one host's 8 x 80 GB = 640 GB, so
    every layout spans two hosts, and a tensor x pipeline group over hosts runs in vLLM only under
    Ray (the vLLM export's placement rule, ``paraplan.exports.vllm_serve.refusal``)."""
    disagg = serve_plan("llama3.1-70b", "dgx-b200", 8, tpot_ms=30.0, modes="disagg", backend="vllm")
    assert disagg.best["mode"] == "disagg" and disagg.engine_refused_best is None
    assert "vLLM ships no router for disaggregated prefill and decode workers" in disagg.launch_refusal
    assert f"launch: {disagg.launch_refusal}" in disagg.why
    big = serve_plan("llama3.1-405b", "dgx-h100", 16, tpot_ms=200.0, precision="bf16", backend="vllm")
    assert int(big.best["gpus_used"]) > 8 and big.engine_refused_best is None
    assert "spans hosts of 8" in big.launch_refusal and "Ray" in big.launch_refusal
    assert f"launch: {big.launch_refusal}" in big.why
    out = completed("serve", "plan", "-m", "llama3.1-405b", "-s", "dgx-h100", "-n", "16", "--tpot-ms", "200",
                    "--precision", "bf16").stdout
    assert f"\n      {big.launch_refusal}\n" in out
    _same_best(big, _cli_json("-m", "llama3.1-405b", "-s", "dgx-h100", "-n", "16", "--tpot-ms", "200",
                              "--precision", "bf16"))
    # a best the engine launches: nothing said
    agg = serve_plan("llama3.1-70b", "dgx-b200", 8, tpot_ms=30.0, modes="agg", backend="vllm")
    assert agg.launch_refusal is None and not any(w.startswith("launch: ") for w in agg.why)


def test_the_refused_winner_in_json_carries_its_degrees_and_a_command_that_prices_it_again():
    # --json gave the refused winner's layout only as a sentence; its degrees and its serve simulate
    # command now ride with it, and the command gives its numbers exactly
    cli = _cli_json("-m", "llama3.1-70b", "-s", "dgx-h100", "-n", "8", "--tpot-ms", "20", "-b", "vllm")
    refused = cli["engine_refused_best"]
    assert refused["mode"] == "disagg" and refused["tp"] is None and refused["moe_tp"] is None
    for key in ("prefill_tp", "prefill_workers", "prefill_batch", "decode_tp", "decode_workers", "batch"):
        assert isinstance(refused[key], int) and refused[key] >= 1, (key, refused[key])
    command = refused["simulate_command"]
    assert command.startswith("paraplan serve simulate -m llama3.1-70b -s dgx-h100 -b vllm ")
    assert "--mode disagg" in command      # degrees at their default of 1 are left out, as the table's
    result = CliRunner().invoke(main, shlex.split(command)[1:] + ["--json"])
    assert result.exit_code == 0, result.output
    again = json.loads(result.stdout)
    for key in ("ttft_ms", "tpot_ms", "tokens_per_s_per_gpu"):
        assert again[key] == pytest.approx(refused[key], rel=1e-12), key
