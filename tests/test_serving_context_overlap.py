"""TensorRT-LLM's disaggregated context (prefill) servers run without the overlap scheduler
(its examples/disaggregated configs: ``disable_overlap_scheduler: True`` on context servers):
the export launches them so and the simulator prices them so, from one rule
(``ServingBehaviour.context_only``, the stack's ``context_overlap_scheduler``)."""
from __future__ import annotations

import dataclasses
import json
import shlex

import pytest

from cli_results import run
from hardware_specs.catalog import load_stack
from paraplan.exports.serving import emit_launch
from paraplan.exports.serving_common import launch_of
from simulator.serving import disaggregated as D
from simulator.serving.context import ServingContext
from simulator.serving.deployment import Deployment, WorkerLayout
from simulator.serving.simulate import simulate_serving

R1 = ("deepseek-r1", "gb200-nvl72")


def _trt(context_overlap: bool | None = None) -> ServingContext:
    """DeepSeek-R1 NVFP4 on GB200 under trtllm-1; ``context_overlap`` overrides the stack's
    ``context_overlap_scheduler`` (True: the pricing before the rule, overlap on everywhere)."""
    stack = load_stack("trtllm-1")
    if context_overlap is not None:
        stack = dataclasses.replace(stack, serving=dataclasses.replace(stack.serving,
                                                                       context_overlap_scheduler=context_overlap))
    return ServingContext.build(*R1, stack, dense_format="nvfp4", expert_format="nvfp4")


def test_the_stacks_state_which_context_servers_keep_the_overlap_scheduler():
    trt = load_stack("trtllm-1").serving
    assert trt.overlap_scheduler and not trt.context_overlap_scheduler
    assert not trt.context_only().overlap_scheduler and trt.context_only().host_step_s == trt.host_step_s
    for name in ("vllm-0.14", "sglang-0.5", "vllm-0.11"):
        beh = load_stack(name).serving
        assert beh.context_only() is beh            # prefill workers run as the stack says


@pytest.mark.parametrize("batch, isl", [(1, 128), (1, 1024), (4, 128), (4, 1024)])
def test_a_trtllm_prefill_step_exposes_the_whole_host_step(batch, isl):
    # the reviewer's case: a prefill rank of tp 1 x adp 4, experts ep 4. With the overlap scheduler
    # the 1 ms host step hides under a GPU step of tens of ms (step = busy); without it the step is
    # busy + host_step_s, so each prefill step, of one prompt or the full batch, is 1 ms longer
    ctx, before = _trt(), _trt(context_overlap=True)
    host = ctx.behaviour.host_step_s
    assert host == pytest.approx(0.001)
    new = D.prefill_side(ctx, 1, 4, 1, 1, 4, batch, isl)
    old = D.prefill_side(before, 1, 4, 1, 1, 4, batch, isl)
    for key in ("pre_one_s", "pre_full_s"):
        assert float(old[key]) > host                              # overlap hid all of it before
        assert float(new[key]) - float(old[key]) == pytest.approx(host, rel=1e-9, abs=1e-12)
    assert float(new["mu_per_rank"]) == pytest.approx(batch / float(new["pre_full_s"]), rel=1e-12)
    # the decode side keeps the overlap scheduler, unchanged
    dec_new = D.decode_side(ctx, 1, 16, 1, 1, 16, 64, isl, 1024)
    dec_old = D.decode_side(before, 1, 16, 1, 1, 16, 64, isl, 1024)
    assert float(dec_new["tpot_s"]) == float(dec_old["tpot_s"])


def _prefill_yaml(script: str) -> str:
    return script.split("# paraplan: prefill worker options as priced", 1)[1].split("PARAPLAN_EOF", 1)[0]


@pytest.mark.parametrize("context_overlap", [False, True])
def test_the_export_launches_the_context_servers_as_they_are_priced(context_overlap):
    # one rule for both: flipping the stack's context_overlap_scheduler moves the launch's
    # disable_overlap_scheduler of the context servers and the priced prefill step together
    ctx = _trt(context_overlap)
    dep = Deployment(model=R1[0], system=R1[1], backend=ctx.stack.name, mode="disagg", isl=1024, osl=1024,
                     dense_format="nvfp4", expert_format="nvfp4",
                     prefill=WorkerLayout(tp=1, adp=4, moe_tp=1, moe_ep=4, batch=1), prefill_workers=2,
                     decode=WorkerLayout(tp=1, adp=16, moe_tp=1, moe_ep=16, batch=64), decode_workers=1)
    launch = launch_of(ctx, dep, simulate_serving(dep, ctx).metrics)
    priced = bool(ctx.behaviour.context_only().overlap_scheduler)
    assert priced is context_overlap
    (pre,) = {launch.overlap(w) for w in launch.role("prefill")}
    (dec,) = {launch.overlap(w) for w in launch.role("decode")}
    assert pre is priced and dec is True
    script = emit_launch(launch)
    assert f"disable_overlap_scheduler: {'false' if priced else 'true'}\n" in _prefill_yaml(script)
    decode_yaml = script.split("# paraplan: decode worker options as priced", 1)[1].split("PARAPLAN_EOF", 1)[0]
    assert "disable_overlap_scheduler: false\n" in decode_yaml


def test_serve_plan_and_serve_simulate_agree_on_a_trtllm_disaggregated_plan():
    request = ["serve", "plan", "-m", R1[0], "-s", R1[1], "-b", "trtllm", "--precision", "nvfp4", "-n", 24,
               "--isl", 1024, "--osl", 1024, "--mode", "disagg"]
    text = run(*request, "--top", 1)
    assert text.exit_code == 0, text.output
    line = next(l for l in text.stdout.splitlines() if "as one deployment:" in l)
    command = shlex.split(line.split("as one deployment:", 1)[1])
    best = json.loads(run(*request, "--json").stdout)["best"]
    assert best["mode"] == "disagg"
    got = json.loads(run(*command[1:], "--json").stdout)
    for key in ("ttft_ms", "tpot_ms", "tokens_per_s_per_gpu"):
        assert got[key] == pytest.approx(best[key], rel=1e-12), key
