"""The host's per-kernel issue time is one factor of every fitted generation (joint_fit)."""
from __future__ import annotations

import numpy as np
import pytest

from hardware_specs.catalog import list_efficiency_models, load_efficiency
from paraplan.validation.datasets import BUNDLED_DIR, PUBLISHED_RUNS
from paraplan.validation.fit import (FIT_BOUNDS, MIN_ROWS_FOR_FULL_FIT, UNPINNED_PRIORS, UNPINNED_TOLERANCE, _from_model,
                                     _to_model, by_generation, fitted_names, source_weights, subset)
from paraplan.validation.joint_fit import SHARED_FACTORS, fit_jointly, pooled_objective
from paraplan.validation.predict import predict, prepare
from paraplan.validation.published import read_runs


@pytest.fixture(scope="module")
def bundled_rows():
    return by_generation(prepare(read_runs(BUNDLED_DIR / PUBLISHED_RUNS).to_dict("records")))


def _jointly_fitted(bundled_rows):
    return {g: rows for g, rows in bundled_rows.items()
            if len(rows) >= MIN_ROWS_FOR_FULL_FIT and load_efficiency(g).is_fitted}


def test_every_jointly_fitted_generation_carries_the_same_host_issue_time(bundled_rows):
    gens = _jointly_fitted(bundled_rows)
    assert len(gens) >= 2
    for name in SHARED_FACTORS:
        values = {g: _from_model(load_efficiency(g))[name] for g in gens}
        assert len(set(values.values())) == 1, values
        listed = {g: name in load_efficiency(g).fitted_factors for g in gens}
        assert len(set(listed.values())) == 1, listed


def test_a_listed_shared_factor_is_pinned_by_the_pooled_rows(bundled_rows):
    """Listed as fitted only where its documented prior is measurably worse over all the jointly
    fitted generations' rows together (the per-generation rule, on the pooled objective)."""
    gens = _jointly_fitted(bundled_rows)
    models = {g: load_efficiency(g) for g in gens}
    xs = {g: _from_model(m) for g, m in models.items()}
    fitted = pooled_objective(gens, xs, models)
    for name in SHARED_FACTORS:
        at_prior = pooled_objective(gens, {g: dict(x, **{name: UNPINNED_PRIORS[name]}) for g, x in xs.items()}, models)
        if name in models[next(iter(gens))].fitted_factors:
            assert at_prior > fitted + UNPINNED_TOLERANCE
        else:
            assert all(x[name] == UNPINNED_PRIORS[name] for x in xs.values())


def test_the_pooled_objective_weighs_a_source_over_all_its_generations(bundled_rows):
    """By hand: the weighted mean of |pred/measured - 1| over two generations' rows, each source
    weighing 1/sqrt(its rows in both)."""
    pick = {g: subset(bundled_rows[g], np.arange(5)) for g in ("ampere", "hopper")}
    models = {g: load_efficiency(g) for g in pick}
    errors = np.concatenate([np.abs(predict(r, {g: models[g]}) / r.measured - 1) for g, r in pick.items()])
    sources = [s for r in pick.values() for s in r.sources]
    counts = {s: sources.count(s) for s in sources}
    w = np.array([1 / np.sqrt(counts[s]) for s in sources])
    assert np.allclose(w, source_weights(sources))
    want = float((errors * w).sum() / w.sum())
    got = pooled_objective(pick, {g: _from_model(m) for g, m in models.items()}, models)
    assert got == pytest.approx(want, rel=1e-12)


def test_the_joint_fit_recovers_a_host_time_planted_in_two_generations(bundled_rows):
    """Rows whose 'measured' times are the model's own predictions with a 75 us host issue time
    and 5 us per kernel (vTrain's eager single-node Ampere runs, then bound by the host, and
    Hopper rows), the generations' own factors held at the truth, are fitted back to it from
    10 us: the first sweep's grid brackets it (56.2, 100 us), the second lands on 56.2 x 10^(1/16)
    = 74.99 us; both generations carry the one value."""
    amp = bundled_rows["ampere"]
    vt = subset(amp, np.flatnonzero(np.char.startswith(np.asarray(amp.ids, dtype=str), "VTRAIN-S"))[:24])
    hop = subset(bundled_rows["hopper"], np.arange(MIN_ROWS_FOR_FULL_FIT))
    rows = {"ampere": vt, "hopper": hop}
    assert all("cpu_issue_s" in fitted_names(r) for r in rows.values())
    truth = {g: _to_model(load_efficiency(g), dict(_from_model(load_efficiency(g)), cpu_issue_s=7.5e-5,
                                                   kernel_overhead_s=5e-6)) for g in rows}
    synthetic = {g: type(r)(r.ids, r.sources, r.inputs, predict(r, {g: truth[g]}), r.scale, r.power, r.layer_metric,
                            r.groups) for g, r in rows.items()}
    starts = {g: _to_model(m, dict(_from_model(m), cpu_issue_s=1e-5)) for g, m in truth.items()}
    fitted = fit_jointly(synthetic, starts, sweeps=2, hold=tuple(FIT_BOUNDS))
    values = {g: m.cpu_issue_s for g, m in fitted.items()}
    assert values["ampere"] == values["hopper"]
    assert values["ampere"] == pytest.approx(7.5e-5, rel=0.002)
    assert all("cpu_issue_s" in m.fitted_factors for m in fitted.values())
