"""The serving API refuses what ``paraplan serve`` refuses, with the same words
(``paraplan.serving_inputs``): it had run these silently."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from hardware_specs.errors import InputError
from paraplan.cli import main
from paraplan.serving_api import serve_plan, serve_simulate

DENSE, SYSTEM = "llama3.1-8b", "dgx-h100"


@pytest.mark.parametrize("kwargs, field, cli_args", [
    (dict(expert_precision="fp8"), "expert_precision", ["--expert-precision", "fp8"]),
    (dict(backend="vllm-0.11", backend_version="0.14.0"), "backend_version",
     ["-b", "vllm-0.11", "--backend-version", "0.14.0"]),
    (dict(moe_tp=1), "moe_tp", ["--moe-tp", "1"]),
    (dict(moe_ep=1), "moe_ep", ["--moe-ep", "1"]),
])
def test_an_input_that_would_change_nothing_is_refused_as_the_cli_refuses_it(kwargs, field, cli_args):
    with pytest.raises(InputError) as api_error:
        serve_simulate(DENSE, SYSTEM, **kwargs)
    assert api_error.value.field == field
    cli = CliRunner().invoke(main, ["serve", "simulate", "-m", DENSE, "-s", SYSTEM, *cli_args])
    assert cli.exit_code != 0
    # one check, one meaning: the same sentence, each naming the input as its caller spells it
    assert api_error.value.message.replace("backend ", "-b ") in cli.output


def test_a_plan_refuses_a_release_beside_a_stack_name_and_expert_precision_on_a_dense_model():
    with pytest.raises(InputError, match="names one stack profile"):
        serve_plan(DENSE, SYSTEM, 8, backend="vllm-0.11", backend_version="0.14.0")
    with pytest.raises(InputError, match="is dense"):
        serve_plan(DENSE, SYSTEM, 8, expert_precision="fp8")


def test_a_release_beside_its_framework_still_picks_the_profile():
    assert serve_simulate(DENSE, SYSTEM, backend="vllm", backend_version="0.14.0")["backend"].iloc[0] == "vllm-0.14"
