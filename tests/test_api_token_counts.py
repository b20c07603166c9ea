"""A token count written as text ('2Mi': 2 x 2**20 = 2,097,152 tokens; '4M': 4,000,000) is read
the same way by every entry point of the API: ``sweep`` read it (``coerce_value``) and
``simulate``, ``plan`` and ``best_plan`` refused it ('must be a whole number >= 1, got '2Mi'')."""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from paraplan import api

TWO_MI = 2 * 2**20      # 2,097,152
BASE = dict(model="llama3-8b", cluster="dgx-h100", gpus=8, tp=1, pp=1, micro_batch=1, zero_stage=1)


def test_simulate_reads_2mi_as_2097152_tokens():
    row = api.simulate(**BASE, global_batch_tokens="2Mi")
    assert int(row["global_batch_tokens"].iloc[0]) == TWO_MI
    same = api.simulate(**BASE, global_batch_tokens=TWO_MI)
    assert row["step_time_s"].iloc[0] == same["step_time_s"].iloc[0]


@pytest.mark.parametrize("entry", [lambda t: api.plan("llama3-8b", "dgx-h100", 8, t, max_plans=2),
                                   lambda t: api.best_plan("llama3-8b", "dgx-h100", 8, t)],
                         ids=["plan", "best_plan"])
def test_plan_and_best_plan_read_2mi_as_2097152_tokens(entry):
    rows = entry("2Mi")
    assert set(rows["global_batch_tokens"].astype(int)) == {TWO_MI}


def test_sweep_reads_2mi_in_its_base_as_in_its_values():
    rows = api.sweep({**BASE, "global_batch_tokens": "2Mi"}, "tp", [1, 2])
    assert list(rows["global_batch_tokens"].astype(int)) == [TWO_MI, TWO_MI]
    swept = api.sweep(BASE, "global_batch_tokens", ["2Mi"])
    assert int(swept["global_batch_tokens"].iloc[0]) == TWO_MI


def test_text_that_is_no_token_count_is_still_refused_naming_the_field():
    for entry in (lambda: api.simulate(**BASE, global_batch_tokens="lots"),
                  lambda: api.plan("llama3-8b", "dgx-h100", 8, "lots")):
        with pytest.raises(InputError) as exc:
            entry()
        assert exc.value.field == "global_batch_tokens"
