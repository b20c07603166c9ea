"""A float too large for an integer field is quoted back as given (1e+30), not as the made-up
31-digit integer int(1e30) is (1,000,000,000,000,000,019,884,624,838,656)."""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from paraplan import api
from paraplan.sweeps import spec_from_dict

BASE = dict(model="llama3-70b", cluster="dgx-h100", tp=8, pp=4, global_batch=128)


@pytest.mark.parametrize("field", ["gpus", "seq_len", "global_batch", "tp"])
def test_api_sweep_quotes_a_float_as_given(field):
    with pytest.raises(InputError) as exc:
        api.sweep(BASE, field, [1e30])
    text = str(exc.value)
    assert text.startswith(f"{field}: 1e+30 is above the largest supported value"), text
    assert "19884624838656" not in text.replace(",", "")


def test_an_integer_is_still_quoted_with_separators():
    with pytest.raises(InputError, match=r"gpus: 33,554,432 is above the largest supported value 16,777,216"):
        api.sweep(BASE, "gpus", [2**25])


@pytest.mark.parametrize("key", ["gpus", "config"])
def test_sweep_spec_quotes_a_float_as_given(key):
    grid = {"kind": "training", "search": "simulate", "models": ["llama3-8b"], "clusters": ["dgx-h100"],
            "gpus": [8], "global_batch": [64], "config": {"tp": [1]}}
    if key == "gpus":
        grid["gpus"] = [1e30]
    else:
        grid["config"] = {"tp": [1e30]}
    with pytest.raises(InputError) as exc:
        spec_from_dict(grid)
    assert "1e+30 is above the largest supported value" in str(exc.value), str(exc.value)
