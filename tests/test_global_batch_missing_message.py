"""With no global batch at all the error said "pass global_batch ... or global_batch_tokens ...,
not both", which reads as if both had been given; "not both" is for when both are."""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from paraplan import api


def test_no_global_batch_does_not_say_not_both():
    for call in (lambda: api.plan("llama3-8b", "dgx-h100", 8), lambda: api.best_plan("llama3-8b", "dgx-h100", 8)):
        with pytest.raises(InputError) as info:
            call()
        assert info.value.field == "global_batch" and "not both" not in str(info.value), str(info.value)


def test_both_still_says_not_both():
    with pytest.raises(InputError, match="not both"):
        api.plan("llama3-8b", "dgx-h100", 8, global_batch=64, global_batch_tokens=64 * 8192)
