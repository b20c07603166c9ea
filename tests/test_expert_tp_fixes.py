"""Expert tensor parallelism (etp) as the CLI, the API and sweeps take and check it: one explained
error where the stack's default etp does not fit, the same from each entry point; the experts
error first where no etp would fit; Megatron-Core <= 0.9's carved EP layout refused at etp != tp.

Hand cases: Mixtral 8x7B (8 experts) on 8 H100 at tp 2, ep 8: dp 4, dp*cp*tp = 8; megatron-core's
default etp = tp = 2 gives ep*etp = 16, which does not divide 8, where etp 1 (8) would.
"""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from hardware_specs.errors import InputError
from paraplan.cli import main

MIXTRAL = ["-m", "mixtral-8x7b", "-c", "dgx-h100"]


def _last_line(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    return res.exit_code, res.output.strip().splitlines()[-1]


def test_an_ep_that_does_not_divide_the_experts_is_said_before_the_default_etp():
    # 16 GPUs, tp 2, ep 16: 16 does not divide Mixtral's 8 experts; ep*etp = 32 does not divide
    # dp*cp*tp = 16 either, and etp 1 (16) would tile the ranks, but no etp makes 16 ranks of 8 experts
    code, line = _last_line("simulate", *MIXTRAL, "--gpus", 16, "--tp", 2, "--ep", 16, "--global-batch", 64)
    assert code != 0
    assert line.startswith("error: ep: ep=16 does not divide the 8 experts"), line
    assert "--etp 1" not in line


def test_the_api_says_the_default_etp_does_not_fit_as_simulate_does():
    from paraplan import api
    with pytest.raises(InputError) as err:
        api.simulate("mixtral-8x7b", "dgx-h100", gpus=8, tp=2, ep=8, global_batch=64)
    assert err.value.field == "etp"
    assert err.value.message.startswith("2 is megatron-core's default") and "ep*etp = 8*2" in err.value.message
    assert err.value.fix.startswith("etp=1")
    # stated, etp 1 runs (the check is of the default only)
    assert len(api.simulate("mixtral-8x7b", "dgx-h100", gpus=8, tp=2, ep=8, etp=1, global_batch=64)) == 1


def test_a_sweep_says_the_default_etp_does_not_fit_as_simulate_does():
    from paraplan.sweeps import evaluate as ev
    from paraplan.sweeps import spec_from_dict
    spec = spec_from_dict({"kind": "training", "search": "simulate", "models": ["mixtral-8x7b"],
                           "clusters": ["dgx-h100"], "gpus": [8], "global_batch": [64],
                           "config": {"tp": [2], "ep": [8]}})
    df = ev.evaluate_points(list(enumerate(spec.points())), "training", "simulate")
    assert list(df["status"]) == ["invalid"]
    reason = df["reason"].iloc[0]
    assert "megatron-core's default" in reason and "etp=1" in reason, reason
