"""A sweep sets ZeRO's hybrid-sharding group (``zero_shard_group``) as ``plan`` and ``simulate``
do: the planner's fixable fields are the sweep's, and a simulated point is api.simulate's row."""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from paraplan import api
from paraplan.sweeps import spec_from_dict
from paraplan.sweeps.spec import PLANNER_KEYS
from planners.search_space import FIXABLE

GRID = {"search": "simulate", "models": ["llama3-8b"], "clusters": ["dgx-h100"], "gpus": [64],
        "global_batch": [128], "config": {"tp": [2], "zero_stage": [3], "zero_shard_group": [0, 4]}}


def test_a_best_sweep_may_fix_every_field_the_planner_can():
    assert set(PLANNER_KEYS) == set(FIXABLE)
    spec = spec_from_dict(dict(GRID, search="best", config={"zero_shard_group": [4, 8]}))
    assert spec.config == {"zero_shard_group": (4, 8)}


@pytest.mark.parametrize("value", [-1, 1.5, "four", True])
def test_a_shard_group_that_is_not_a_whole_number_from_zero_up_fails_the_spec(value):
    with pytest.raises(InputError) as err:
        spec_from_dict(dict(GRID, config={"zero_stage": [3], "zero_shard_group": [value]}))
    assert err.value.field == "config.zero_shard_group"


def test_simulated_shard_groups_equal_api_simulate():
    df = api.sweep_grid(GRID)
    assert list(df["status"]) == ["ok", "ok"] and list(df["zero_shard_group"]) == [0, 4]
    for _, row in df.iterrows():
        one = api.simulate("llama3-8b", "dgx-h100", gpus=64, tp=2, zero_stage=3, zero_shard_group=int(row.zero_shard_group),
                           global_batch=128).iloc[0]
        assert row.step_time_s == pytest.approx(one.step_time_s, rel=1e-12)
        assert row.memory_gib == pytest.approx(one.memory_gib, rel=1e-12)
    # sharding over 4 ranks instead of all 32 keeps 8x the sharded states
    assert df.memory_gib[1] > df.memory_gib[0]
