"""predict memoises each group's memory (step_model.memory_parts) on the Prepared object, since a
row's memory does not depend on the efficiency model: predictions with the memo equal a fresh
step_model.evaluate of every group under each efficiency model, bit for bit, and the memo is
read-only and per object."""
from dataclasses import replace

import numpy as np
import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_efficiency
from paraplan.validation.fit import subset
from paraplan.validation.predict import predict
from simulator.step_model import evaluate, memory_parts


@pytest.fixture(scope="module")
def hopper_rows(bundled_rows_by_generation):
    rows = bundled_rows_by_generation["hopper"]
    return subset(rows, np.arange(min(40, len(rows))))


def _fresh(prepared, eff):
    """predict's answer without any memo: evaluate each group from scratch."""
    step, layer = np.zeros(len(prepared)), np.zeros(len(prepared))
    for model, cluster, batch, idx in prepared.groups:
        out = evaluate(model, cluster, eff, batch)
        step[idx] = out["step_time_s"]
        layer[idx] = out["layer_fwd_s"] + out["layer_bwd_s"] + out["layer_recompute_s"]
    t = np.where(prepared.layer_metric, layer, step)
    return prepared.scale * np.power(t, prepared.power)


def test_memoised_memory_gives_the_fresh_prediction_under_every_efficiency_model(hopper_rows):
    prior = load_efficiency("hopper")
    other = replace(prior, gemm_half_dim=prior.gemm_half_dim * 3.0, hbm_fraction=prior.hbm_fraction * 0.5,
                    kernel_overhead_s=prior.kernel_overhead_s * 4.0)
    rows = subset(hopper_rows, np.arange(len(hopper_rows)))       # a new object: an empty memo
    for eff in (prior, other, prior):
        got = predict(rows, {"hopper": eff})
        np.testing.assert_array_equal(got, _fresh(rows, eff))
    assert not np.array_equal(predict(rows, {"hopper": other}), predict(rows, {"hopper": prior}))


def test_memory_parts_does_not_read_the_efficiency_model(hopper_rows):
    model, cluster, batch, _ = hopper_rows.groups[0]
    eff = efficiency_for_cluster(cluster)
    other = replace(eff, gemm_half_dim=eff.gemm_half_dim * 3.0, hbm_fraction=eff.hbm_fraction * 0.5,
                    attention_peak_fraction=eff.attention_peak_fraction * 0.5)
    a, b = memory_parts(model, cluster, eff, batch), memory_parts(model, cluster, other, batch)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_the_memo_is_read_only_and_held_by_its_own_object(hopper_rows):
    rows = subset(hopper_rows, np.arange(len(hopper_rows)))
    predict(rows)
    mem = rows.group_memory(0, None)            # memoised: the efficiency model is not read again
    assert mem is rows.group_memory(0, None)
    with pytest.raises(ValueError):
        mem["memory_bytes"][0] = 0.0
    again = subset(rows, np.arange(len(rows)))
    assert again._group_memory == {}
