"""The fitter's two starts side by side in forked processes give what it gives one after the other."""
from __future__ import annotations

import pickle
from types import MappingProxyType

from hardware_specs.catalog import load_efficiency
from paraplan.validation.fit import fit_starts, from_model, neutral_start, prior_model, subset
from paraplan.validation.joint_fit import fit_to_fixed_point


def test_an_efficiency_model_survives_pickling_with_its_read_only_mappings():
    model = load_efficiency("hopper")
    back = pickle.loads(pickle.dumps(model))
    assert back == model
    assert isinstance(back.gemm_peak_fraction, MappingProxyType)
    assert dict(back.gemm_peak_fraction) == dict(model.gemm_peak_fraction)
    assert back.fitted_factors == model.fitted_factors


def test_starts_in_forked_workers_keep_their_order_and_see_unpicklable_closures():
    # the closure holds a read-only mapping, which cannot be pickled: only a fork can share it
    table = MappingProxyType({"committed": 1.5, "neutral": -2.0, "third": 7.0})
    starts = ("committed", "neutral", "third")
    serial = fit_starts(lambda which: (which, table[which] * 2), starts, jobs=1)
    assert serial == [("committed", 3.0), ("neutral", -4.0), ("third", 14.0)]
    assert fit_starts(lambda which: (which, table[which] * 2), starts, jobs=2) == serial


def test_a_real_fit_from_both_starts_is_the_same_in_two_processes(bundled_rows_by_generation):
    """One coordinate-search round from the committed and from the neutral start on 12 Hopper rows
    (small, so the test stays short): the forked fits return the serial fits' factors, fitted
    lists and objectives exactly (the order of the starts is checked on distinct results above)."""
    rows = bundled_rows_by_generation["hopper"]
    few = subset(rows, list(range(12)))

    def start(which):
        return prior_model("hopper") if which == "committed" else neutral_start(prior_model("hopper"), few)

    def fit_one(which):
        return fit_to_fixed_point(few, "hopper", start(which), sweeps=1, max_rounds=1)

    serial = fit_starts(fit_one, ("committed", "neutral"), jobs=1)
    forked = fit_starts(fit_one, ("committed", "neutral"), jobs=2)
    for (m1, obj1, r1), (m2, obj2, r2) in zip(serial, forked):
        assert from_model(m1) == from_model(m2)
        assert m1.fitted_factors == m2.fitted_factors
        assert obj1 == obj2 and r1 == r2
    # the models came back through pickling with what the search decided (which factors the
    # rows pin: here the 16-bit plateau only)
    assert serial[0][0].fitted_factors == ("gemm16",)
