"""Every input error of the measured-run checks says how to fix it: ``rounds=1.5``, a config
that is not a dict, a negative seed and a name that is not text said only what was wrong."""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from paraplan.measure.compare import compare_measured
from paraplan.measure.train import RunConfig


def _fix(call):
    with pytest.raises(InputError) as info:
        call()
    return info.value


def test_rounds_and_configs_say_what_to_give():
    err = _fix(lambda: compare_measured("cpu-local", rounds=1.5))
    assert err.field == "rounds" and "rounds=3" in (err.fix or "")
    err = _fix(lambda: compare_measured("cpu-local", configs=[3]))
    assert err.field == "configs[0]" and "{'name'" in (err.fix or "")


def test_seed_name_and_recompute_say_what_to_give():
    err = _fix(lambda: RunConfig.from_dict({"seed": -1}))
    assert err.field == "seed" and "seed=0" in (err.fix or "")
    err = _fix(lambda: RunConfig.from_dict({"name": 3}))
    assert err.field == "name" and "name=" in (err.fix or "")
    err = _fix(lambda: RunConfig.from_dict({"recompute": 1}))
    assert err.field == "recompute" and "'none' or 'full'" in (err.fix or "")
