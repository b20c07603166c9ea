"""``api.simulate(headroom_gib=)``: the headroom ``paraplan simulate --headroom-gib`` and
``api.plan(headroom_gib=)`` take, with the command's ``fits`` (peak memory + headroom <= HBM,
``simulator.headroom``); it was refused as an 'unknown configuration field (did you mean hbm_gib?)'."""
from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from hardware_specs.errors import InputError
from paraplan import api
from paraplan.cli import main
from simulator import headroom

RUN = dict(gpus=16, tp=2, pp=2, global_batch=64, recompute="selective")
H100_HBM_GIB = 80           # H100 SXM datasheet: 80 GB of HBM3 (the catalog's hbm_gib: 80)


def _cli_fits(headroom_gib: float) -> bool:
    res = CliRunner().invoke(main, ["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "16", "--tp", "2",
                                    "--pp", "2", "--global-batch", "64", "--recompute", "selective",
                                    "--headroom-gib", str(headroom_gib), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)["fits"]


@pytest.mark.parametrize("headroom_gib", [0, 38, 39, 40])
def test_simulate_takes_the_commands_headroom_and_gives_its_fits(headroom_gib):
    row = api.simulate("llama3-8b", "dgx-h100", headroom_gib=headroom_gib, **RUN).iloc[0]
    # Llama-3-8B at tp 2, pp 2 holds about 41 GiB per GPU: it fits under 38 GiB of headroom, not 39 or 40
    assert 41 < row.memory_gib < 42
    assert row.fits == (row.memory_gib + headroom_gib <= H100_HBM_GIB) == (headroom_gib <= 38)
    assert row.fits == _cli_fits(headroom_gib)
    # the column stays the HBM the step leaves free, whatever headroom was asked for
    assert row.headroom_gib == pytest.approx(H100_HBM_GIB - row.memory_gib, rel=1e-12)
    report = api.simulate_report("llama3-8b", "dgx-h100", headroom_gib=headroom_gib, **RUN)[0]
    assert api.report_row(report)["fits"] == row.fits


def test_a_sweeps_base_carries_the_headroom_and_a_bad_one_fails_naming_it():
    rows = api.sweep({"model": "llama3-8b", "cluster": "dgx-h100", **RUN, "headroom_gib": 40}, "pp", [2, 4])
    assert not rows.fits.iloc[0]        # 41 + 40 GiB > 80
    for bad, words in ((-1, ">= 0"), (80, "leaves nothing"), (float("nan"), ">= 0")):
        with pytest.raises(InputError, match=words) as err:
            api.simulate("llama3-8b", "dgx-h100", headroom_gib=bad, **RUN)
        assert err.value.field == "headroom_gib"
    with pytest.raises(InputError, match="not a sweep axis") as err:       # the rows' column is the HBM left free
        api.sweep({"model": "llama3-8b", "cluster": "dgx-h100", **RUN}, "headroom_gib", [0, 4])
    assert "base" in err.value.fix


def test_the_best_plan_is_judged_against_the_headroom_it_was_planned_with():
    # planned to the last GiB (headroom 0), the 8-GPU winner holds more than the default 5% headroom
    # leaves (80 - 4 = 76 GiB): re-simulated against the default it came back fits False
    row = api.best_plan("llama3-8b", "dgx-h100", 8, global_batch=64, headroom_gib=0).iloc[0]
    assert 0.95 * H100_HBM_GIB < row.memory_gib <= H100_HBM_GIB
    assert row.fits


@pytest.mark.parametrize("bad, quoted", [("5", "'5'"), (True, "true"), (False, "false"), ([5], "[5]")])
def test_simulate_and_plan_refuse_the_same_non_numbers(bad, quoted):
    """Text ("5") and bools are not GiB: api.plan refused "5" while api.simulate read it as 5 GiB
    and True as float(True) = 1 GiB. One check (simulator.headroom.headroom_gib) for both, and for
    the headroom function itself."""
    msg = f"headroom_gib: must be a number of GiB, got {quoted}"
    with pytest.raises(InputError, match="^" + re.escape(msg)):
        api.simulate("llama3-8b", "dgx-h100", headroom_gib=bad, **RUN)
    with pytest.raises(InputError, match="^" + re.escape(msg)):
        api.plan("llama3-8b", "dgx-h100", gpus=16, global_batch=64, headroom_gib=bad)
    with pytest.raises(InputError, match="^" + re.escape(msg)):
        headroom.headroom_gib(80 * 2**30, bad)
