"""Errors for a unit written into a number and for a misspelt serve_plan keyword say the fix.

A review found api.sweep(base, "scaleout_gbit_per_s", ["400G"]) and ("hbm_tb_per_s", ["3.35TB/s"])
stop at "expected a number, got '400G'" with no fix, against the house form
``<field>: <what> (<fix>)``; and serve_plan(..., tpot=30) listed the first twelve serving-context
keywords and '...', never tpot_ms (a keyword of serve_plan itself, not of the context).
"""
import pytest

from hardware_specs.errors import InputError
from paraplan import api, serving_api

BASE = dict(model="llama3-70b", cluster="dgx-h100", gpus=256, global_batch_tokens=4 * 2**20)


@pytest.mark.parametrize("field, value, fix", [
    ("scaleout_gbit_per_s", "400G", "give Gb/s as a plain number, e.g. 400"),
    ("scaleup_gbit_per_s", "3600Gbps", "give Gb/s as a plain number, e.g. 400"),
    ("hbm_tb_per_s", "3.35TB/s", "give TB/s as a plain number, e.g. 3.35"),
    ("hbm_gib", "80GiB", "give GiB as a plain number, e.g. 80"),
])
def test_a_number_with_its_unit_written_in_says_which_unit_to_drop(field, value, fix):
    with pytest.raises(InputError) as exc:
        api.sweep(BASE, field, [value], best=True)
    assert str(exc.value) == f"{field}: expected a number, got {value!r} ({fix})"


def test_every_float_field_refusing_text_gives_a_fix():
    for field in sorted(api._FLOAT_FIELDS):
        with pytest.raises(InputError) as exc:
            api.coerce_value(field, "fast")
        assert exc.value.fix and exc.value.fix.startswith("give "), field


def test_a_misspelt_serve_plan_keyword_suggests_its_own_keyword():
    with pytest.raises(InputError) as exc:
        serving_api.serve_plan("llama3.1-70b", "dgx-h100", 8, tpot=30)
    assert str(exc.value) == "tpot: not an input of a serving plan (did you mean tpot_ms?)"
    with pytest.raises(InputError, match=r"\(did you mean ttft_ms\?\)"):
        serving_api.serve_plan("llama3.1-70b", "dgx-h100", 8, ttft=500)


def test_an_unknown_serve_plan_keyword_lists_every_keyword_uncut():
    with pytest.raises(InputError) as exc:
        serving_api.serve_plan("llama3.1-70b", "dgx-h100", 8, zzz=1)
    assert "..." not in exc.value.fix
    listed = exc.value.fix.removeprefix("known: ").split(", ")
    assert {"tpot_ms", "ttft_ms", "isl", "osl", "backend", "scaleout_gbit_per_s"} <= set(listed)
