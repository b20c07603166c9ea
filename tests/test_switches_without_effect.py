"""A switch the run cannot use is refused, not printed beside numbers it did not change.

Found by session 71's review of `simulate` / `plan`: ``--attention-kernel serial|pipelined`` with
the fused attention off (``--no-flash-attention``, or a stack whose attention core is the
materialised one) gave the same step to the last bit as without it while the header printed the
kernel asked for; ``--ep-comm-overlap`` / ``--ep-dispatch-dedup`` on a model without experts
printed ``ep_comm_overlap=on`` over a step with no all-to-all to hide.
"""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from paraplan.cli import main

DENSE = ("-m", "llama3-8b", "-c", "dgx-h100", "-n", "16", "--global-batch", "64")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def _step_s(*args) -> float:
    res = run("simulate", *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["step_time_s"]


def test_the_attention_kernel_prices_only_the_fused_attention():
    """The invariant the refusal rests on: with flash attention on the kernel moves the step
    (serial pays the softmax the pipelined kernel hides), with it off every kernel gives one step."""
    on = {k: _step_s(*DENSE, "--attention-kernel", k) for k in ("serial", "pipelined")}
    assert on["serial"] > on["pipelined"] * 1.05
    off = _step_s(*DENSE, "--no-flash-attention")
    assert off > 3 * on["pipelined"]        # the materialised scores: a different core altogether


@pytest.mark.parametrize("kernel", ["serial", "pipelined"])
def test_an_attention_kernel_without_flash_attention_is_refused(kernel):
    line = one_line_error(run("simulate", *DENSE, "--no-flash-attention", "--attention-kernel", kernel))
    assert line == (f"error: attention_kernel: {kernel} is a fused (flash) attention kernel, and this run's "
                    "attention core is the materialised one (flash_attention off): it changes nothing "
                    "(drop --attention-kernel, or give --flash-attention)"), line


def test_an_attention_kernel_on_a_stack_without_flash_attention_is_refused():
    # Megatron-LM 2021 materialises the scores (its stack's attention_kernel: materialized)
    line = one_line_error(run("simulate", *DENSE, "--stack", "megatron-lm-2021", "--attention-kernel", "serial"))
    assert line.startswith("error: attention_kernel: serial is a fused (flash) attention kernel"), line
    # the stack's own default (auto) and the fused core turned back on still run
    assert run("simulate", *DENSE, "--stack", "megatron-lm-2021", "--attention-kernel", "auto").exit_code == 0
    assert run("simulate", *DENSE, "--stack", "megatron-lm-2021", "--flash-attention",
               "--attention-kernel", "serial").exit_code == 0


@pytest.mark.parametrize("command", ["simulate", "plan"])
@pytest.mark.parametrize("switch, field", [("--ep-comm-overlap", "ep_comm_overlap"),
                                           ("--ep-dispatch-dedup", "ep_dispatch_dedup")])
def test_an_expert_exchange_switch_on_a_dense_model_is_refused(command, switch, field):
    line = one_line_error(run(command, *DENSE, switch))
    assert line == (f"error: {field}: llama3-8b has no experts, so there is no expert all-to-all for "
                    f"{switch} to change (drop {switch}, or use an MoE model)"), line


def test_the_expert_switches_still_run_where_they_price_something():
    moe = ("-m", "mixtral-8x7b", "-c", "dgx-h100", "-n", "64", "--seq-len", "4096", "--global-batch", "256",
           "--zero", "1", "--ep", "2")
    res = run("simulate", *moe, "--ep-comm-overlap", "--json")
    assert res.exit_code == 0, res.output
    with_overlap = json.loads(res.stdout)["time_breakdown_s"]["ep_comm_exposed_s"]
    without = json.loads(run("simulate", *moe, "--json").stdout)["time_breakdown_s"]["ep_comm_exposed_s"]
    assert 0 < with_overlap < without
    # turning a switch off on a dense model claims nothing and stays accepted
    assert run("simulate", *DENSE, "--no-ep-comm-overlap").exit_code == 0


ZERO3_GATHER = "--zero3-recompute-gather"


def test_the_recompute_gather_prices_only_zero3_with_full_recomputation():
    """The invariant the refusal rests on: with ZeRO-3, full recomputation and the gathers exposed,
    the third gather lengthens the step; at ZeRO-1, or at ZeRO-3 without full recomputation, the
    switch gives the same step to the last bit."""
    z3 = (*DENSE, "--zero", "3", "--recompute", "full", "--no-overlap-param-gather")
    assert _step_s(*z3, ZERO3_GATHER) > _step_s(*z3, "--no-zero3-recompute-gather") * 1.01
    from paraplan import api
    common = dict(gpus=16, global_batch=64, overlap_param_gather=False)
    for zero, recompute in ((1, "full"), (3, "selective"), (3, "none")):
        on, off = (api.simulate("llama3-8b", "dgx-h100", zero_stage=zero, recompute=recompute,
                                zero3_recompute_gather=g, **common)["step_time_s"][0] for g in (True, False))
        assert on == off, (zero, recompute)


@pytest.mark.parametrize("extra, what", [
    (("--zero", "1", "--recompute", "full"), "zero=1"),
    (("--recompute", "full"), "zero=1"),                      # megatron-core's default ZeRO stage here
    (("--zero", "3", "--recompute", "selective"), "recompute=selective"),
    (("--zero", "3"), "recompute=none"),
])
def test_a_recompute_gather_without_zero3_and_full_recomputation_is_refused(extra, what):
    line = one_line_error(run("simulate", *DENSE, *extra, ZERO3_GATHER))
    assert line == ("error: zero3_recompute_gather: the third gather is ZeRO-3's for a fully recomputed layer's "
                    f"forward, and this run has {what}: it changes nothing "
                    "(drop --zero3-recompute-gather, or give --zero 3 and --recompute full)"), line


def test_a_recompute_gather_where_it_prices_runs():
    assert run("simulate", *DENSE, "--zero", "3", "--recompute", "full", ZERO3_GATHER).exit_code == 0
    # off claims nothing: accepted anywhere
    assert run("simulate", *DENSE, "--zero", "1", "--no-zero3-recompute-gather").exit_code == 0
