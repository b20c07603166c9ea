"""The fitter's candidates scored side by side in forked processes give the fit it gives alone."""
from __future__ import annotations

import pickle
from types import MappingProxyType

from hardware_specs.catalog import load_efficiency
from paraplan.validation.fit import from_model, neutral_start, prior_model, subset
from paraplan.validation.fit_search import coordinate_step, objective, source_weights, to_model
from paraplan.validation.joint_fit import fit_to_fixed_point
from paraplan.validation.trial_scores import TrialScores


def test_an_efficiency_model_survives_pickling_with_its_read_only_mappings():
    model = load_efficiency("hopper")
    back = pickle.loads(pickle.dumps(model))
    assert back == model
    assert isinstance(back.gemm_peak_fraction, MappingProxyType)
    assert dict(back.gemm_peak_fraction) == dict(model.gemm_peak_fraction)
    assert back.fitted_factors == model.fitted_factors


def _few_hopper_rows(bundled_rows_by_generation, n=12):
    return subset(bundled_rows_by_generation["hopper"], list(range(n)))


def test_a_prefetched_score_is_the_objective_of_that_trial(bundled_rows_by_generation):
    rows = _few_hopper_rows(bundled_rows_by_generation)
    base = prior_model("hopper")
    weights = source_weights(rows.sources)
    x = from_model(base)
    trials = [dict(x, gemm16=v) for v in (0.55, 0.6, 0.65, 0.7)]
    with TrialScores({"hopper": rows}, {"hopper": base}, jobs=2) as scores:
        score = scores.of("hopper")
        score.prefetch(trials)
        got = [score(t) for t in trials]
    # the workers' floats are the parent's, bit for bit
    assert got == [objective(rows, "hopper", to_model(base, t), weights) for t in trials]
    assert len(set(got)) == 4            # four different plateaus, four different objectives


def test_a_coordinate_step_with_workers_is_the_step_without_them_even_when_a_trial_changes(
        bundled_rows_by_generation):
    """A lower 16-bit plateau clamps the 8-bit one (``under_16bit_plateau``), so after the first
    accepted candidate the later trials differ from the prefetched ones and are scored on their
    own: the step still ends where the serial one does."""
    rows = _few_hopper_rows(bundled_rows_by_generation)
    base = prior_model("hopper")
    # a start too high: a lower plateau is accepted and clamps the 8-bit one, changing the trials
    # that follow from the ones prefetched (8-bit at 0.94: from 0.9 the committed Hopper factors of
    # session 51 keep the 16-bit plateau at 0.95 on these rows, and the case would not happen)
    x = dict(from_model(base), gemm16=0.95, gemm8=0.94)
    results = []
    for jobs in (1, 2):
        with TrialScores({"hopper": rows}, {"hopper": base}, jobs=jobs) as scores:
            score = scores.of("hopper")
            results.append(coordinate_step(dict(x), score(x), "gemm16", 0, score))
    assert results[0] == results[1]
    stepped, _ = results[0]
    # the clamping case happened: a step over gemm16 moves gemm8 only by clamping it under an
    # accepted lower 16-bit plateau (at session 55's committed factors these rows end the step
    # back at 0.95 with gemm8 left at the 0.575 it was clamped to on the way)
    assert stepped["gemm8"] < 0.94


def test_a_real_fit_is_the_same_with_two_processes(bundled_rows_by_generation):
    """One coordinate-search round from the committed and from the neutral start on 12 Hopper rows
    (small, so the test stays short): factors, fitted lists and objectives identical."""
    rows = _few_hopper_rows(bundled_rows_by_generation)
    for start in (prior_model("hopper"), neutral_start(prior_model("hopper"), rows)):
        alone = fit_to_fixed_point(rows, "hopper", start, sweeps=1, max_rounds=1, jobs=1)
        forked = fit_to_fixed_point(rows, "hopper", start, sweeps=1, max_rounds=1, jobs=2)
        assert from_model(alone[0]) == from_model(forked[0])
        assert alone[0].fitted_factors == forked[0].fitted_factors == ("gemm16",)
        assert alone[1:] == forked[1:]
