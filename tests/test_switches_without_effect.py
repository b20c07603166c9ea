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
