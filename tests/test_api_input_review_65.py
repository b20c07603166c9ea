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


# --- 2. plan_heterogeneous's options ----------------------------------------------------------------

def _one_pool():
    from hardware_specs.catalog import load_cluster
    from hardware_specs.pools import Pool, PooledCluster
    return PooledCluster("q", (Pool("q", load_cluster("dgx-h100"), 16),))


@pytest.mark.parametrize("kwargs, field, message", [
    # stack=None: refused as planners.plan (and so api.plan) refuses it; an AttributeError before
    ({"stack": None}, "stack", "expected a stack name or file, got NoneType"),
    ({"stack": 0}, "stack", "expected a stack name or file, got int"),
    # max_tp as planners.plan checks it (whole_number): inf / nan / '8' failed inside int()
    ({"max_tp": float("inf")}, "max_tp", "must be a whole number >= 1, got inf"),
    ({"max_tp": float("nan")}, "max_tp", "must be a whole number >= 1, got nan"),
    ({"max_tp": "8"}, "max_tp", "must be a whole number >= 1, got '8'"),
    ({"max_tp": 0}, "max_tp", "must be a whole number >= 1, got 0"),
    ({"max_micro_batch": 0}, "max_micro_batch", "must be a whole number >= 1, got 0"),
    # micro_batches=5 was a TypeError (not iterable); 0 and [] were silently the default search
    ({"micro_batches": 5}, "micro_batches", "must be a list of micro-batch sizes, got 5"),
    ({"micro_batches": 0}, "micro_batches", "must be a list of micro-batch sizes, got 0"),
    ({"micro_batches": []}, "micro_batches", "names no micro-batch size"),
    ({"micro_batches": [1.5]}, "micro_batches", "must be a whole number >= 1, got 1.5"),
])
def test_plan_heterogeneous_names_a_bad_option(kwargs, field, message):
    from planners.heterogeneous import plan_heterogeneous
    with pytest.raises(InputError) as err:
        plan_heterogeneous("llama3-8b", _one_pool(), 32, **kwargs)
    assert (err.value.field, err.value.message) == (field, message)


def test_plan_heterogeneous_stack_none_as_api_plan():
    from paraplan import api
    with pytest.raises(InputError) as err:
        api.plan("llama3-8b", "dgx-h100", 8, global_batch=16, stack=None)
    assert (err.value.field, err.value.message) == ("stack", "expected a stack name or file, got NoneType")


def test_plan_heterogeneous_takes_numpy_options():
    from planners.heterogeneous import plan_heterogeneous
    given = plan_heterogeneous("llama3-8b", _one_pool(), 32, max_tp=4, micro_batches=[1, 2])
    numpy = plan_heterogeneous("llama3-8b", _one_pool(), 32, max_tp=np.int64(4), micro_batches=np.array([1, 2]))
    assert numpy.best_report.step_time_s == given.best_report.step_time_s


# --- 3. what_if_gpu takes a GPU's name ------------------------------------------------------------

def test_what_if_gpu_loads_a_name_as_what_if_cluster_does():
    from hardware_specs.catalog import load_gpu
    from paraplan import api
    # a name failed as a TypeError in dataclasses.replace
    by_name = api.what_if_gpu("h100-sxm-80gb", hbm_gib=96)
    assert by_name == api.what_if_gpu(load_gpu("h100-sxm-80gb"), hbm_gib=96)
    assert (by_name.name, by_name.hbm_bytes) == ("h100-sxm-80gb", 96 * 2**30)
    assert api.what_if_gpu("h100-sxm-80gb") == load_gpu("h100-sxm-80gb")


@pytest.mark.parametrize("gpu, message", [
    (5, "expected a catalog name or a YAML file path, got int"),
    (None, "expected a catalog name or a YAML file path, got NoneType"),
    ([1], "expected a catalog name or a YAML file path, got list"),
    (pd.NA, "missing value (pandas NA)"),
])
def test_what_if_gpu_names_gpu_for_anything_else(gpu, message):
    from paraplan import api
    with pytest.raises(InputError) as err:
        api.what_if_gpu(gpu, hbm_gib=80)
    assert (err.value.field, err.value.message) == ("gpu", message)
    with pytest.raises(InputError) as err:
        api.what_if_gpu("no-such-gpu", hbm_gib=80)
    assert err.value.field == "gpu" and err.value.message == "unknown gpu 'no-such-gpu'"


# --- 4. no input read by its truth value ------------------------------------------------------------

@pytest.mark.parametrize("best", ["abc", np.nan, -8, [8], 1, None])
def test_sweep_best_must_be_a_bool(best):
    from paraplan import api
    # each ran (or skipped) the planner by its truth value
    with pytest.raises(InputError) as err:
        api.sweep(dict(model="llama3-8b", cluster="dgx-h100", gpus=8, global_batch=16), "hbm_gib", [80], best=best)
    assert err.value.field == "best" and err.value.message == f"must be True or False, got {best!r}"


def test_sweep_best_takes_a_numpy_bool():
    from paraplan import api
    base = dict(model="llama3-8b", cluster="dgx-h100", gpus=8, global_batch=16)
    numpy = api.sweep(base, "hbm_gib", [80], best=np.True_)
    assert list(numpy["config"]) == list(api.sweep(base, "hbm_gib", [80], best=True)["config"])


@pytest.mark.parametrize("stack, message", [
    (0, "expected a catalog name or a YAML file path, got int"),
    (False, "expected a catalog name or a YAML file path, got bool"),
    ([], "expected a catalog name or a YAML file path, got list"),
    ("", "unknown stack ''"),
])
def test_simulate_stack_is_a_name_or_a_stack_spec(stack, message):
    from paraplan import api
    # each silently ran the default stack
    for call in (lambda: api.simulate("llama3-8b", "dgx-h100", **BASE, stack=stack),
                 lambda: api.layer_ops("llama3-8b", "dgx-h100", stack=stack),
                 lambda: api.best_plan_for("megatron", "llama3-8b", "dgx-h100", 8, global_batch=16, stack=stack)):
        with pytest.raises(InputError) as err:
            call()
        assert err.value.field == "stack" and err.value.message == message


def test_simulate_stack_none_or_a_spec_runs():
    from hardware_specs.catalog import load_stack
    from paraplan import api
    spec = api.simulate("llama3-8b", "dgx-h100", **BASE, stack=load_stack("torchtitan"))
    named = api.simulate("llama3-8b", "dgx-h100", **BASE, stack="torchtitan")
    assert spec["step_time_s"].iloc[0] == named["step_time_s"].iloc[0]
    assert api.simulate("llama3-8b", "dgx-h100", **BASE, stack=None)["stack"].iloc[0] == "megatron-core"


@pytest.mark.parametrize("field", ["moe_load_imbalance", "offload_optimizer_fraction", "grad_bucket_elements",
                                   "param_prefetch_forward", "master_weight_bytes"])
@pytest.mark.parametrize("flag, quoted", [(True, "true"), (False, "false"), (np.True_, "true"), (np.False_, "false")])
def test_float_fields_refuse_bools(field, flag, quoted):
    from paraplan import api
    # moe_load_imbalance=True was read as 1.0 (a balanced load); numpy's bools as 1.0 / 0.0 elsewhere
    with pytest.raises(InputError) as err:
        api.simulate("mixtral-8x7b" if field == "moe_load_imbalance" else "llama3-8b", "dgx-h100",
                     **{**BASE, field: flag})
    # quoted as a YAML file or a flag writes it (the CLI's --moe-load-imbalance reads the same check)
    assert err.value.field == field and err.value.message.endswith(f"got {quoted}")


# --- 5. paraplan measure names the option that makes a run too big -----------------------------------

@pytest.mark.parametrize("size, field, flag, most", [
    ({"steps": 100_000}, "steps", "--steps", 1_839),     # was named 'model'
    ({"global_batch": 100_000}, "global_batch", "--global-batch", 1_839),
    ({"copies": 128, "steps": 100}, "copies", "copies", 18),  # 128 x the default copies, 25 x its steps
    ({"hidden_size": 8192, "num_layers": 64}, "hidden_size", "--hidden", 1_448),  # 4 heads divide it
    ({"seq_len": 2**20, "global_batch": 1}, "seq_len", "--seq-len", 26_911),
])
def test_run_size_refusal_names_the_option_that_makes_it_too_big(size, field, flag, most):
    from dataclasses import replace

    from paraplan.measure.train import RUN_FLOPS, RunConfig
    run = RunConfig(**size)
    with pytest.raises(InputError) as err:
        run.check_fits("cpu", host_bytes=0.0)
    assert err.value.field == field and err.value.message.startswith("the run is about ")
    assert err.value.fix.startswith(f"lower {flag} to {most:,} or less, or measure a smaller run: lower ")
    # the value the fix gives is a run that fits with the other options as they are; the next the
    # run takes (a hidden size its 4 heads divide) does not
    after = 4 if field == "hidden_size" else 1
    assert replace(run, **{field: most}).training_flops() <= RUN_FLOPS["cpu"] < \
        replace(run, **{field: most + after}).training_flops()


def test_measure_steps_names_steps():
    pytest.importorskip("torch")        # the run-size check comes after torch is loaded
    from cli_results import one_line_error, run
    line = one_line_error(run("measure", "--steps", "100000"))
    # the command's own --global-batch 4 and --seq-len 128: 1,839 steps of its default run fit
    assert line.startswith("error: --steps: the run is about 1.1e+15 FLOPs, more than the 2e+13 ")
    assert line.endswith("(lower --steps to 1,839 or less, or measure a smaller run: lower --seq-len, --hidden, "
                         "--layers or --global-batch)")
