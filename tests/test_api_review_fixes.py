"""Input checks the API review found missing: each case was a silent wrong answer or an internal
error (AttributeError, IndexError, KeyError, ZeroDivisionError, ...) before."""
from __future__ import annotations

import math

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

from hardware_specs.catalog import load_cluster  # noqa: E402
from hardware_specs.errors import InputError  # noqa: E402
from hardware_specs.pools import Pool  # noqa: E402
from paraplan import api, plots  # noqa: E402

M, C = "llama3-8b", "dgx-h100"


@pytest.fixture(scope="module")
def own_plans():
    return api.plan(M, C, 8, 65536)


@pytest.fixture(scope="module")
def row():
    return api.simulate(M, C, tp=1, pp=1, micro_batch=1, gpus=8, global_batch_tokens=65536)


# ---- best_plan_for(plans=...) -----------------------------------------------------------------

def test_best_plan_for_refuses_a_table_of_another_model(own_plans):
    other = own_plans.assign(model="llama3-70b")
    with pytest.raises(InputError, match="^plans: the table's model is llama3-70b"):
        api.best_plan_for("deepspeed", M, C, 8, 65536, plans=other)


@pytest.mark.parametrize("change, field", [(dict(gpus=16), "n_gpus"), (dict(global_batch_tokens=131072),
                                                                       "global_batch_tokens"),
                                           (dict(scaleout_gbit_per_s=100), "scaleout_gbit_per_s"),
                                           (dict(seq_len=4096), "seq_len")])
def test_best_plan_for_refuses_a_table_of_another_request(own_plans, change, field):
    request = dict(gpus=8, global_batch_tokens=65536) | change
    gpus, tokens = request.pop("gpus"), request.pop("global_batch_tokens")
    with pytest.raises(InputError, match=f"^plans: the table's {field} is"):
        api.best_plan_for("deepspeed", M, C, gpus, tokens, plans=own_plans, **request)


def test_best_plan_for_takes_its_own_table(own_plans):
    out = api.best_plan_for("deepspeed", M, C, 8, 65536, plans=own_plans)
    assert (out["model"].iloc[0], int(out["n_gpus"].iloc[0]), int(out["global_batch"].iloc[0])) == (M, 8, 8)


def test_best_plan_for_refuses_a_list_as_plans():
    with pytest.raises(InputError, match="^plans: must be the DataFrame"):
        api.best_plan_for("deepspeed", M, C, 8, 65536, plans=[1, 2])


# ---- layer_ops ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, value", [("micro_batch", -1), ("micro_batch", math.nan), ("micro_batch", 0),
                                         ("tp", 2.5), ("tp", math.nan), ("tp", "2"), ("tp", 0), ("tp", True),
                                         ("cp", 0), ("cp", 1.5), ("cp", math.inf)])
def test_layer_ops_refuses_a_bad_number(name, value):
    with pytest.raises(InputError, match=f"^{name}: must be a whole number >= 1"):
        api.layer_ops(M, C, **{name: value})


def test_layer_ops_takes_integral_floats():
    ops = api.layer_ops(M, C, tp=8.0, micro_batch=2.0)
    assert (ops["tokens"] == 2 * 8192).all() and (ops["tp"] == 8).all()
    assert (ops["time_s"] > 0).all()


# ---- plots ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["breakdown", "memory", "pareto", "scaling", "bandwidth"])
def test_plots_refuse_an_empty_table(row, kind):
    with pytest.raises(InputError, match="^data: no rows to plot"):
        plots.KINDS[kind](row.iloc[0:0])


def test_roofline_refuses_an_empty_table_and_a_simulate_row(row):
    ops = api.layer_ops(M, C)
    with pytest.raises(InputError, match="^data: no rows to plot"):
        plots.roofline(ops.iloc[0:0])
    with pytest.raises(InputError, match="^data: the rows lack the column .*layer_ops"):
        plots.roofline(row)


@pytest.mark.parametrize("data", [[1, 2], None, "rows"])
def test_plots_refuse_what_is_not_rows(data):
    with pytest.raises(InputError, match="^data: expected a DataFrame"):
        plots.breakdown(data)


@pytest.mark.parametrize("call, field", [
    (lambda r: plots.breakdown(r, label="nope"), "label"),
    (lambda r: plots.memory(r, label="nope"), "label"),
    (lambda r: plots.bandwidth(r, hue="nope"), "hue"),
    (lambda r: plots.pareto(r, x="nope"), "x"),
    (lambda r: plots.scaling(r, x="nope"), "x"),
    (lambda r: plots.pareto(r, annotate=math.nan), "annotate"),
    (lambda r: plots.pareto(r, annotate=-1), "annotate"),
    (lambda r: plots.pareto_mask([1]), "df"),
])
def test_plots_refuse_unknown_options(row, call, field):
    with pytest.raises(InputError, match=f"^{field}: "):
        call(row)


def test_plots_refuse_a_path_in_a_missing_folder(row, tmp_path):
    with pytest.raises(InputError, match="^path: the folder .* does not exist"):
        plots.breakdown(row, tmp_path / "nodir" / "x.png")
    plots.breakdown(row, tmp_path / "x.png", label="config")
    assert (tmp_path / "x.png").stat().st_size > 0


# ---- pools ----------------------------------------------------------------------------------

def test_pool_refuses_a_cluster_name():
    with pytest.raises(InputError, match="^pools.a.cluster: must be a loaded ClusterSpec.*load_cluster"):
        Pool("a", "dgx-a100-80gb", 8)
    assert Pool("a", load_cluster("dgx-a100-80gb"), 8).gpus == 8


def test_the_api_names_its_own_argument_for_an_unknown_framework():
    """``api.best_plan_for(framework=...)`` refuses an unknown framework naming ``framework``
    (the API's argument), not the CLI's ``--emit``, which an API caller never wrote."""
    from hardware_specs.errors import InputError
    from paraplan import api
    with pytest.raises(InputError) as err:
        api.best_plan_for("megatronx", "llama3-8b", "dgx-h100", 8, 2**20)
    assert err.value.field == "framework"
    assert "megatronx" in err.value.message
