"""Review 65 of the Python API's inputs: pandas' missing value (pd.NA, pd.NaT) named where every
field arrives, not a TypeError from a check deep inside; each error an ``InputError`` naming the
argument given."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hardware_specs.errors import InputError

BASE = dict(gpus=8, tp=2, pp=1, micro_batch=1, global_batch=16)
MISSING = "missing value (pandas NA) (give a value or leave the argument out)"


# --- 1. pandas' missing value ---------------------------------------------------------------------

@pytest.mark.parametrize("field", ["zero_stage", "dtype", "stack", "grad_reduce_bytes", "cross_entropy",
                                   "optimizer_moment_bytes", "grad_buffer_bytes", "offload_weight_bytes",
                                   "master_weight_bytes"])
def test_simulate_names_a_pandas_na_field(field):
    from paraplan import api
    # each failed as "TypeError: boolean value of NA is ambiguous"
    with pytest.raises(InputError) as err:
        api.simulate("llama3-8b", "dgx-h100", **{**BASE, field: pd.NA})
    assert (err.value.field, str(err.value)) == (field, f"{field}: {MISSING}")
    with pytest.raises(InputError) as err:
        api.simulate_report("llama3-8b", "dgx-h100", **{**BASE, field: pd.NaT})
    assert err.value.field == field and err.value.message == "missing value (pandas NaT)"


def test_none_still_means_not_given():
    from paraplan import api
    given = api.simulate("llama3-8b", "dgx-h100", **BASE)
    nones = api.simulate("llama3-8b", "dgx-h100", **BASE, zero_stage=None, dtype=None, stack=None,
                         grad_reduce_bytes=None, cross_entropy=None, headroom_gib=None, hbm_gib=None)
    assert nones["step_time_s"].iloc[0] == given["step_time_s"].iloc[0]
    assert nones["stack"].iloc[0] == given["stack"].iloc[0] == "megatron-core"


def test_plan_and_sweep_name_a_pandas_na_argument():
    from paraplan import api
    for field in ("zero_stage", "grad_reduce_bytes", "cross_entropy"):
        with pytest.raises(InputError) as err:
            api.plan("llama3-8b", "dgx-h100", 8, global_batch=16, **{field: pd.NA})
        assert err.value.field == field and err.value.message == "missing value (pandas NA)"
    base = dict(model="llama3-8b", cluster="dgx-h100", **BASE)
    for kwargs, field in (({"field": pd.NA}, "field"), ({"on_error": pd.NA}, "on_error"), ({"best": pd.NA}, "best")):
        call = {"field": "tp", **kwargs}
        with pytest.raises(InputError) as err:
            api.sweep(base, call.pop("field"), [1], **call)
        assert err.value.field == field and err.value.message == "missing value (pandas NA)"
    # a swept value: named by the field swept
    with pytest.raises(InputError) as err:
        api.sweep(base, "zero_stage", [pd.NA])
    assert err.value.field == "zero_stage" and err.value.message == "missing value (pandas NA)"
    skipped = api.sweep(base, "zero_stage", [1, pd.NA], on_error="skip")
    assert list(skipped["error"]) == ["", f"zero_stage: {MISSING}"]


def test_serving_api_names_a_pandas_na_keyword():
    from paraplan import serving_api
    for field in ("osl", "kv_cache_dtype", "tp"):
        with pytest.raises(InputError) as err:
            serving_api.serve_simulate("llama3.1-8b", "dgx-h100", **{"tp": 2, "batch": 8, "isl": 512, field: pd.NA})
        assert err.value.field == field and err.value.message == "missing value (pandas NA)"
    with pytest.raises(InputError) as err:
        serving_api.serve_plan("llama3.1-8b", "dgx-h100", 8, isl=512, osl=128, rank_by=pd.NA)
    assert err.value.field == "rank_by"
    with pytest.raises(InputError) as err:
        serving_api.serve_sweep(dict(model="llama3.1-8b", system="dgx-h100"), pd.NA, [1])
    assert err.value.field == "field"
