"""Bad arguments to the Python API are an ``InputError`` naming the argument, never a raw Python
or numpy exception from deep inside the search (``AttributeError`` on an efficiency given as a
name, numpy's 'need at least one array to stack' on an empty schedule list, ...)."""
from __future__ import annotations

import pandas as pd
import pytest

from hardware_specs.errors import InputError
from paraplan import api

M, C, N = "gpt3-125m", "dgx-h100", 8


@pytest.mark.parametrize("call", [
    lambda **kw: api.plan(M, C, N, global_batch=16, **kw),
    lambda **kw: api.best_plan(M, C, N, global_batch=16, **kw),
    lambda **kw: api.best_plan_for("megatron", M, C, N, global_batch=16, **kw),
], ids=["plan", "best_plan", "best_plan_for"])
def test_an_efficiency_given_by_name_is_refused_naming_efficiency(call):
    with pytest.raises(InputError) as info:
        call(efficiency="hopper")
    assert info.value.field == "efficiency" and "got str" in str(info.value)


def test_best_plan_for_with_a_given_table_refuses_a_bad_efficiency_too():
    plans = api.plan(M, C, N, global_batch=16)
    with pytest.raises(InputError) as info:
        api.best_plan_for("megatron", M, C, N, global_batch=16, plans=plans, efficiency=0.5)
    assert info.value.field == "efficiency" and "got float" in str(info.value)


@pytest.mark.parametrize("kw", [{"schedule": []}, {"fixed": {"schedule": []}}, {"fixed": {"schedule": ()}}])
def test_an_empty_fixed_schedule_list_leaves_no_layout(kw):
    with pytest.raises(InputError) as info:
        api.plan(M, C, N, global_batch=16, **kw)
    assert info.value.field == "schedule" and "leaves no layout" in info.value.message


def test_a_fixed_schedule_still_restricts_the_search_to_it():
    plans = api.plan(M, C, N, global_batch=16, schedule=["1f1b"])
    assert len(plans) and set(plans["schedule"]) == {"1f1b"}


@pytest.mark.parametrize("dtypes", [5, [], {"fp8": 1}, ["fp8", 8], [None]])
def test_dtypes_that_are_not_dtype_names_are_refused_naming_dtypes(dtypes):
    with pytest.raises(InputError) as info:
        api.plan(M, C, N, global_batch=16, dtypes=dtypes)
    assert info.value.field == "dtypes"


def test_one_dtype_name_given_as_dtypes_is_that_dtype_not_its_letters():
    # 'fp8' was split into 'f', 'p', '8' and refused as "no f peak"
    plans = api.plan(M, C, N, global_batch=16, dtypes="fp8")
    assert set(plans["dtype"]) == {"fp8"}
    assert plans.iloc[0]["step_time_s"] == api.plan(M, C, N, global_batch=16, dtypes=["fp8"]).iloc[0]["step_time_s"]


@pytest.fixture(scope="module")
def plans():
    return api.plan(M, C, N, global_batch=16)


def test_best_plan_for_refuses_a_table_without_the_columns_it_reads(plans):
    with pytest.raises(InputError) as info:
        api.best_plan_for("megatron", M, C, N, global_batch=16, plans=pd.DataFrame())
    assert info.value.field == "plans"
    for col in api.PLANS_REQUIRED_COLUMNS:
        assert col in info.value.message
    for col in ("dtype", "tokens_per_s"):       # each a raw KeyError before
        table = plans.drop(columns=[col])
        table.attrs = {}
        with pytest.raises(InputError) as info:
            api.best_plan_for("megatron", M, C, N, global_batch=16, plans=table)
        assert info.value.field == "plans" and info.value.message == f"the table lacks the column {col}"


def test_best_plan_for_takes_plans_own_table_as_before(plans):
    given = api.best_plan_for("megatron", M, C, N, global_batch=16, plans=plans)
    searched = api.best_plan_for("megatron", M, C, N, global_batch=16)
    assert given.iloc[0]["config"] == searched.iloc[0]["config"]
    assert given.iloc[0]["step_time_s"] == pytest.approx(searched.iloc[0]["step_time_s"], rel=1e-12)


@pytest.mark.parametrize("dtype, quoted", [(["fp8"], "['fp8']"), (0, "0"), ("", "''"), (False, "false"), (8, "8")])
def test_layer_ops_refuses_a_dtype_that_is_not_a_name(dtype, quoted):
    with pytest.raises(InputError) as info:
        api.layer_ops("llama3-8b", C, dtype=dtype)
    assert info.value.field == "dtype" and info.value.message == f"must be a dtype name, got {quoted}"


def test_layer_ops_without_a_dtype_runs_in_the_gpus_16_bit_type():
    none, bf16 = api.layer_ops("llama3-8b", C), api.layer_ops("llama3-8b", C, dtype="bf16")
    assert set(none["dtype"]) == {"bf16"}
    pd.testing.assert_frame_equal(none, bf16)
    fp8 = api.layer_ops("llama3-8b", C, dtype="fp8")
    # H100 SXM's dense fp8 peak is twice its bf16 one (1979 / 989.4 TFLOP/s)
    assert fp8["peak_tflop_per_s"].iloc[0] == pytest.approx(2 * bf16["peak_tflop_per_s"].iloc[0], rel=1e-3)


def test_config_labels_refuses_what_is_not_a_table():
    with pytest.raises(InputError) as info:
        api.config_labels(None)
    assert info.value.field == "df" and "NoneType" in info.value.message


@pytest.mark.parametrize("columns, field", [
    ({"dp": ["x"], "tp": [None]}, "dp"),
    ({"dp": [2], "tp": [None]}, "tp"),
    ({"dp": [2], "tp": [1], "cp": ["x"]}, "cp"),
    ({"dp": [2], "tp": [1], "pp": [0]}, "pp"),
    ({"dp": [2], "tp": [1], "micro_batch": [1.5]}, "micro_batch"),
    ({"dp": [2], "tp": [1], "zero_stage": [-1]}, "zero_stage"),
])
def test_config_labels_and_config_label_refuse_the_same_values(columns, field):
    base = {"dp": 1, "tp": 1, "pp": 1, "micro_batch": 1, "zero_stage": 0}
    with pytest.raises(InputError) as info:
        api.config_labels(pd.DataFrame(columns))
    assert info.value.field == field
    with pytest.raises(InputError) as info:
        api.config_label({**base, **{k: v[0] for k, v in columns.items()}})
    assert info.value.field == field


def test_config_labels_matches_config_label_row_by_row(plans):
    labels = api.config_labels(plans)
    assert list(labels) == [api.config_label(r) for r in plans.to_dict("records")]
    table = pd.DataFrame({"dp": [8, 2], "tp": [1, 4], "pp": [1, 1], "micro_batch": [2, 1], "zero_stage": [1, 0],
                          "zero_shard_group": [0, 2]})
    assert list(api.config_labels(table)) == ["dp8 tp1 pp1 mb2 z1", "dp2 tp4 pp1 mb1 z0 hsdp2"]
