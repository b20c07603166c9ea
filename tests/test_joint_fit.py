"""The host's per-kernel issue time is one factor of every fitted generation (joint_fit)."""
from __future__ import annotations

import numpy as np
import pytest

from hardware_specs.catalog import load_efficiency
from paraplan.validation.fit import (FIT_BOUNDS, MIN_ROWS_FOR_FULL_FIT, UNPINNED_PRIORS, UNPINNED_TOLERANCE, from_model,
                                     to_model, fitted_names, source_weights, subset)
from paraplan.validation.joint_fit import SHARED_FACTORS, fit_jointly, pooled_objective
from paraplan.validation.predict import predict


@pytest.fixture(scope="module")
def bundled_rows(bundled_rows_by_generation):
    return bundled_rows_by_generation


def _jointly_fitted(bundled_rows):
    return {g: rows for g, rows in bundled_rows.items()
            if len(rows) >= MIN_ROWS_FOR_FULL_FIT and load_efficiency(g).is_fitted}


def test_every_jointly_fitted_generation_carries_the_same_host_issue_time(bundled_rows):
    gens = _jointly_fitted(bundled_rows)
    assert len(gens) >= 2
    for name in SHARED_FACTORS:
        values = {g: from_model(load_efficiency(g))[name] for g in gens}
        assert len(set(values.values())) == 1, values
        listed = {g: name in load_efficiency(g).fitted_factors for g in gens}
        assert len(set(listed.values())) == 1, listed


def test_a_listed_shared_factor_is_pinned_by_the_pooled_rows(bundled_rows):
    """Listed as fitted only where its documented prior is measurably worse over all the jointly
    fitted generations' rows together (the per-generation rule, on the pooled objective)."""
    gens = _jointly_fitted(bundled_rows)
    models = {g: load_efficiency(g) for g in gens}
    xs = {g: from_model(m) for g, m in models.items()}
    fitted = pooled_objective(gens, xs, models)
    for name in SHARED_FACTORS:
        at_prior = pooled_objective(gens, {g: dict(x, **{name: UNPINNED_PRIORS[name]}) for g, x in xs.items()}, models)
        if name in models[next(iter(gens))].fitted_factors:
            assert at_prior > fitted + UNPINNED_TOLERANCE
        else:
            assert all(x[name] == UNPINNED_PRIORS[name] for x in xs.values())


def test_the_pooled_objective_weighs_a_source_over_all_its_generations(bundled_rows):
    """By hand: the weighted mean of |pred/measured - 1| over two generations' rows, each source
    weighing 1/sqrt(its rows in both): Megatron-Bridge rows on Hopper and on Blackwell are one
    source (weight 1/sqrt(8) each), not two of 1/sqrt(4)."""
    pick = {}
    for g in ("hopper", "blackwell"):
        rows = bundled_rows[g]
        mb = np.flatnonzero(np.asarray(rows.sources) == "MBRIDGE")[:4]
        other = np.flatnonzero(np.asarray(rows.sources) != "MBRIDGE")[:2]
        pick[g] = subset(rows, np.concatenate([mb, other]))
    models = {g: load_efficiency(g) for g in pick}
    errors = np.concatenate([np.abs(predict(r, {g: models[g]}) / r.measured - 1) for g, r in pick.items()])
    sources = [s for r in pick.values() for s in r.sources]
    assert sources.count("MBRIDGE") == 8
    counts = {s: sources.count(s) for s in sources}
    w = np.array([1 / np.sqrt(counts[s]) for s in sources])
    assert np.allclose(w, source_weights(sources))
    assert np.allclose(w[[i for i, s in enumerate(sources) if s == "MBRIDGE"]], 1 / np.sqrt(8))
    want = float((errors * w).sum() / w.sum())
    got = pooled_objective(pick, {g: from_model(m) for g, m in models.items()}, models)
    assert got == pytest.approx(want, rel=1e-12)


def test_no_generations_fit_to_nothing_and_a_shared_factor_cannot_be_held():
    assert fit_jointly({}, {}) == {}
    with pytest.raises(ValueError, match="cpu_issue_s"):
        fit_jointly({}, {}, hold=("cpu_issue_s",))


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
    truth = {g: to_model(load_efficiency(g), dict(from_model(load_efficiency(g)), cpu_issue_s=7.5e-5,
                                                   kernel_overhead_s=5e-6)) for g in rows}
    synthetic = {g: type(r)(r.ids, r.sources, r.inputs, predict(r, {g: truth[g]}), r.scale, r.power, r.layer_metric,
                            r.groups) for g, r in rows.items()}
    starts = {g: to_model(m, dict(from_model(m), cpu_issue_s=1e-5)) for g, m in truth.items()}
    fitted = fit_jointly(synthetic, starts, sweeps=2, hold=tuple(n for n in FIT_BOUNDS if n not in SHARED_FACTORS))
    values = {g: m.cpu_issue_s for g, m in fitted.items()}
    assert values["ampere"] == values["hopper"]
    assert values["ampere"] == pytest.approx(7.5e-5, rel=0.002)
    assert all("cpu_issue_s" in m.fitted_factors for m in fitted.values())


def test_a_held_out_prediction_does_not_move_with_the_held_out_rows_measurements(bundled_rows):
    """The leave-source-out prediction of a source is made by fits that never see its rows: scale
    its measured values by 1.3 and every held-out prediction stays the same, while the joint fit
    of what is left (vTrain's eager Ampere rows) still sets the host time."""
    from dataclasses import replace as dc_replace

    from paraplan.validation.fit import _held_out_prediction
    everything = bundled_rows["ampere"]
    ids = np.asarray(everything.ids, dtype=str)
    pick = np.concatenate([np.flatnonzero(np.char.startswith(ids, "VTRAIN-S"))[:20],
                           np.flatnonzero(np.char.startswith(ids, "KOR22-T5"))[:4]])
    rows = subset(everything, pick)
    held = np.asarray(rows.sources) == "KOR22"
    assert held.sum() == 4
    moved = dc_replace(rows, measured=np.where(held, rows.measured * 1.3, rows.measured))
    a = _held_out_prediction(rows, "KOR22", sweeps=1)
    b = _held_out_prediction(moved, "KOR22", sweeps=1)
    assert np.all(np.isfinite(a)) and np.array_equal(a, b)


def test_of_two_fits_the_fitter_keeps_the_lower_pooled_objective_and_the_first_of_a_tie(bundled_rows):
    """``best_of_starts`` on the committed models and on a copy with one fitted factor moved 20%
    off (which can only be worse or equal at a fixed point of the search): the committed one is
    kept in either order, and two identical fits keep the first."""
    from paraplan.validation.joint_fit import best_of_starts
    gens = {g: subset(rows, np.arange(min(len(rows), 12))) for g, rows in _jointly_fitted(bundled_rows).items()}
    committed = {g: load_efficiency(g) for g in gens}
    moved = {g: to_model(m, dict(from_model(m), gemm16=from_model(m)["gemm16"] * 0.8)) for g, m in committed.items()}
    score = {name: pooled_objective(gens, {g: from_model(m[g]) for g in gens}, m)
             for name, m in (("committed", committed), ("moved", moved))}
    assert score["moved"] > score["committed"]
    kept, index = best_of_starts(gens, [moved, committed])
    assert index == 1 and kept is committed
    kept, index = best_of_starts(gens, [committed, moved])
    assert index == 0 and kept is committed
    assert best_of_starts(gens, [moved, dict(moved)])[1] == 0
    with pytest.raises(ValueError):
        best_of_starts(gens, [])


def test_a_held_out_prediction_says_what_it_rests_on(bundled_rows):
    """20 vTrain-S Ampere rows and 4 Korthikanti Ampere rows: holding out KOR22 leaves 20 Ampere rows
    of another source (``MIN_ROWS_FOR_FULL_FIT``), a fit; holding out VTRAIN leaves 4 Ampere rows and
    no Hopper row (Ampere's neighbour), no fit at all. Three rows of one source: none either."""
    from paraplan.validation.fit import held_out_basis
    from paraplan.validation.fit_search import MIN_ROWS_FOR_FULL_FIT
    everything = bundled_rows["ampere"]
    ids = np.asarray(everything.ids, dtype=str)
    pick = np.concatenate([np.flatnonzero(np.char.startswith(ids, "VTRAIN-S"))[:20],
                           np.flatnonzero(np.char.startswith(ids, "KOR22-T5"))[:4]])
    rows = subset(everything, pick)
    assert MIN_ROWS_FOR_FULL_FIT == 20
    assert held_out_basis(rows) == ["none"] * 20 + ["fit"] * 4
    assert held_out_basis(subset(rows, np.arange(3))) == ["none"] * 3


def test_cross_validated_rows_without_a_fit_say_so_in_the_table_and_the_rows(tmp_path):
    from click.testing import CliRunner

    from paraplan.cli import main
    from pathlib import Path
    lines = (Path(__file__).parent / "data" / "vtrain_multi_node_runs.csv").read_text().splitlines()
    path = tmp_path / "three.csv"
    path.write_text("\n".join(lines[:4]) + "\n")
    table = CliRunner().invoke(main, ["validate", "published", str(path), "--cross-validate"]).output
    assert "note: cross-validated rows resting on no fit at all" in table and table.rstrip().endswith(": VTRAIN 3")
    out = CliRunner().invoke(main, ["validate", "published", str(path), "--cross-validate", "--json"]).output
    import json
    rows = json.loads(out)
    assert len(rows) == 3 and all("cross-validated by no fit" in r["assumptions"] for r in rows)
    # resting on no fit, each cross-validated number is an unfitted prior's (the Ampere model in-sample is fitted)
    assert all(r["efficiency_fitted"] is False for r in rows)
