"""What a second review of ``paraplan.api`` found: an efficiency model given to the search but not
to the re-simulated winner, nor to the ``efficiency_fitted`` flag; a searched field the planner
fixes but the API refused; ``dtype`` lists and None; a bad ``efficiency`` for ``layer_ops``."""
from __future__ import annotations

import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from hardware_specs.errors import InputError
from paraplan import api
from planners.search_space import FIXABLE

M, C = "llama3-8b", "dgx-h100"


@pytest.fixture(scope="module")
def a100_model():
    """Another generation's fitted model: on H100 it gives other times than H100's own."""
    return efficiency_for_cluster(load_cluster("dgx-a100-80gb"))


@pytest.fixture(scope="module")
def prior():
    eff = efficiency_for_cluster(load_cluster("mi300x-node"))
    assert not eff.is_fitted
    return eff


def test_best_plan_times_its_winner_with_the_efficiency_model_it_searched_with(a100_model):
    plans = api.plan(M, C, 16, global_batch=64, efficiency=a100_model)
    best = api.best_plan(M, C, 16, global_batch=64, efficiency=a100_model)
    top = plans.iloc[0]
    assert best.iloc[0]["config"] == top["config"]
    assert best.iloc[0]["step_time_s"] == pytest.approx(top["step_time_s"], rel=1e-9)
    # the same configuration on H100's own model is another time: the one best_plan gave before
    own = api.simulate(M, C, gpus=16, global_batch=64, **{k: best.iloc[0][k] for k in ("tp", "pp", "micro_batch",
                                                                                        "zero_stage")})
    assert abs(own.iloc[0]["step_time_s"] - top["step_time_s"]) > 0.01 * top["step_time_s"]


def test_a_best_sweep_times_each_winner_with_the_bases_efficiency_model(a100_model):
    plans = api.plan(M, C, 16, global_batch=64, efficiency=a100_model)
    swept = api.sweep(dict(model=M, cluster=C, global_batch=64, efficiency=a100_model), "gpus", [16], best=True)
    assert swept.iloc[0]["step_time_s"] == pytest.approx(plans.iloc[0]["step_time_s"], rel=1e-9)


def test_an_unfitted_efficiency_model_marks_the_rows_unfitted_on_a_fitted_cluster(prior):
    assert api.simulate(M, C, gpus=8, global_batch=64).iloc[0]["efficiency_fitted"]
    assert not api.simulate(M, C, gpus=8, global_batch=64, efficiency=prior).iloc[0]["efficiency_fitted"]
    assert not api.plan(M, C, 8, global_batch=64, efficiency=prior)["efficiency_fitted"].any()
    assert not api.best_plan_for("megatron", M, C, 8, global_batch=64, efficiency=prior).iloc[0]["efficiency_fitted"]
    # and layer_ops, which read it right already, agrees
    assert not api.layer_ops(M, C, efficiency=prior)["efficiency_fitted"].any()


def test_the_api_pins_every_field_the_planner_can_fix():
    assert set(api.PLANNER_FIXABLE) == set(FIXABLE)
    by_keyword = api.plan(M, C, 16, global_batch=64, zero_shard_group=8)
    by_fixed = api.plan(M, C, 16, global_batch=64, fixed={"zero_shard_group": 8})
    assert set(by_keyword["zero_shard_group"]) == {8}
    assert by_keyword["config"].tolist() == by_fixed["config"].tolist()


def test_plan_searches_a_list_of_dtypes_and_takes_none_as_the_gpus_16_bit_type():
    both = api.plan(M, C, 8, global_batch=64, dtype=["bf16", "fp8"])
    assert set(both["dtype"]) == {"bf16", "fp8"}
    by_planner = api.plan(M, C, 8, global_batch=64, dtypes=("bf16", "fp8"))
    assert both["config"].tolist() == by_planner["config"].tolist()
    default = api.plan(M, C, 8, global_batch=64, dtype=None)
    assert set(default["dtype"]) == {"bf16"}
    assert default["config"].tolist() == api.plan(M, C, 8, global_batch=64)["config"].tolist()


@pytest.mark.parametrize("dtype", [[], [8], 8])
def test_plan_names_dtype_when_it_is_neither_a_name_nor_a_list_of_names(dtype):
    with pytest.raises(InputError, match="dtype"):
        api.plan(M, C, 8, global_batch=64, dtype=dtype)


def test_layer_ops_names_an_efficiency_that_is_not_a_model():
    with pytest.raises(InputError, match="efficiency"):
        api.layer_ops(M, C, efficiency="x")
