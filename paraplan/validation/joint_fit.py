"""Fit every GPU generation's efficiency model at once, with the host's per-kernel issue time
shared by all of them.

Why one value: ``cpu_issue_s`` is the time the *host* takes to issue one kernel from an eager
framework (Python, the PyTorch dispatcher, the CUDA driver's launch call; ``layer_times``): a
property of the server CPU and the software path, not of the GPU behind it. Fitted per
generation it was pinned by the rows of two generations independently, at the same value (56.2
us by Ampere's eager single-node vTrain runs and by Blackwell's Megatron-Bridge MoE rows, 2026-12
fit), and left at its prior of zero by Hopper, whose published rows never bind it, so GH200's
eager fp32 runs (Sailor) and any held-out host-bound source had no host time at all. Fitted
jointly, the rows of every generation that exercise the host pin the one value, and a source
held out in cross-validation is predicted with the host time the other sources measured.

The search is the per-generation coordinate search (``fit.fit_generation``) run side by side:
each sweep moves every generation's own factors against its own objective, then the shared
factor against the pooled objective (every generation's rows, each source weighing the square
root of its row count, ``fit.source_weights``). A shared factor no row pins (the pooled objective
no worse at its documented prior, within ``fit.UNPINNED_TOLERANCE``) takes the prior.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from hardware_specs.efficiency_model import EfficiencyModel
from paraplan.validation.fit import (FIT_BOUNDS, MAX_FIT_ROUNDS, PRIOR_ONLY_IF_UNPINNED, UNPINNED_PRIORS,
                                     UNPINNED_TOLERANCE, _candidates, _clipped_start, _coordinate_step, _from_model,
                                     _priors_where_unpinned, _rounded, _scan_plateau_and_knee, _to_model, _under_16bit,
                                     fitted_names, objective, source_weights)
from paraplan.validation.predict import Prepared, predict

#: factors that belong to the host, not to the GPU generation: one value for every generation
#: fitted together (``fit_jointly``)
SHARED_FACTORS = ("cpu_issue_s",)


def pooled_objective(rows_by_generation: dict[str, Prepared], xs: dict[str, dict],
                     bases: dict[str, EfficiencyModel]) -> float:
    """Weighted mean |predicted / measured - 1| over every generation's rows, generation ``g``'s
    rows predicted by ``bases[g]`` with factors ``xs[g]``; each source weighs the square root of
    its row count over all generations (a source on two generations is one source)."""
    errors, sources = [], []
    for gen, rows in rows_by_generation.items():
        pred = predict(rows, {gen: _to_model(bases[gen], xs[gen])})
        errors.append(np.abs(pred / rows.measured - 1.0))
        sources.extend(rows.sources)
    w = source_weights(sources)
    return float(np.sum(np.concatenate(errors) * w) / np.sum(w))


def shared_in_play(rows_by_generation: dict[str, Prepared]) -> list[str]:
    """The shared factors some generation's rows can pin (``fit.fitted_names``)."""
    return [n for n in SHARED_FACTORS if any(n in fitted_names(rows) for rows in rows_by_generation.values())]


def _shared_start(bases: dict[str, EfficiencyModel], rows_by_generation: dict[str, Prepared], name: str) -> float:
    """Where the shared factor's search starts: the value of the generation with the most rows
    among those that fit it, clipped into its range (all equal once the generations were fitted
    together, or when every start is ``fit.neutral_start``)."""
    fitting = [g for g in rows_by_generation if name in fitted_names(rows_by_generation[g])]
    gen = max(fitting, key=lambda g: (len(rows_by_generation[g]), g))
    lo, hi = FIT_BOUNDS[name]
    return float(np.clip(_from_model(bases[gen])[name], lo, hi))


def fit_jointly(rows_by_generation: dict[str, Prepared], bases: dict[str, EfficiencyModel], sweeps: int = 2,
                verbose: bool = False, hold=()) -> dict[str, EfficiencyModel]:
    """Fitted models of every generation in ``rows_by_generation`` (each starting at its
    ``bases`` entry), the ``SHARED_FACTORS`` one value for all of them (module docstring); the
    generations' own factors in ``hold`` keep their ``bases`` values."""
    gens = sorted(rows_by_generation)
    shared = shared_in_play(rows_by_generation)
    names = {g: fitted_names(rows_by_generation[g], hold=(*SHARED_FACTORS, *hold)) for g in gens}
    weights = {g: source_weights(rows_by_generation[g].sources) for g in gens}
    x = {g: _clipped_start(bases[g], names[g]) for g in gens}
    for n in shared:
        start = _shared_start(bases, rows_by_generation, n)
        for g in gens:
            x[g][n] = start

    def score_of(g):
        return lambda trial: objective(rows_by_generation[g], g, _to_model(bases[g], trial), weights[g])

    best = {g: score_of(g)(x[g]) for g in gens}
    for g in gens:
        if "gemm_half_dim" in names[g]:
            x[g], best[g] = _scan_plateau_and_knee(x[g], best[g], score_of(g))
    pooled = pooled_objective(rows_by_generation, x, bases)
    for sweep in range(sweeps):
        for g in gens:
            for n in names[g]:
                x[g], best[g] = _coordinate_step(x[g], best[g], n, sweep, score_of(g))
        for n in shared:
            x, pooled = _shared_step(rows_by_generation, bases, x, n, _candidates(n, x[gens[0]], sweep))
            best = {g: score_of(g)(x[g]) for g in gens}
            if verbose:
                import sys
                print(f"  sweep {sweep} shared {n} = {x[gens[0]][n]:.4g}: pooled {100 * pooled:.2f}%", file=sys.stderr)
    kept = {}
    for g in gens:
        x[g], best[g], kept[g] = _priors_where_unpinned(x[g], best[g], names[g], score_of(g))
    pooled = pooled_objective(rows_by_generation, x, bases)
    for n in shared:
        if n in PRIOR_ONLY_IF_UNPINNED:
            at_prior = {g: dict(x[g], **{n: UNPINNED_PRIORS[n]}) for g in gens}
            score = pooled_objective(rows_by_generation, at_prior, bases)
            if score <= pooled + UNPINNED_TOLERANCE:
                x, pooled = at_prior, score
                continue
        for g in gens:
            if n in fitted_names(rows_by_generation[g]):
                kept[g].append(n)
    return {g: replace(_rounded(_to_model(bases[g], x[g])), fitted_factors=tuple(n for n in FIT_BOUNDS if n in kept[g]))
            for g in gens}


def _shared_step(rows_by_generation, bases, x: dict[str, dict], name: str, candidates) -> tuple[dict, float]:
    """Every generation's ``x`` with the shared factor ``name`` at the candidate that minimises the
    pooled objective (the generations' own factors held)."""
    best_x, best = x, pooled_objective(rows_by_generation, x, bases)
    for value in candidates:
        trial = {g: _under_16bit(dict(xg, **{name: float(value)})) for g, xg in x.items()}
        s = pooled_objective(rows_by_generation, trial, bases)
        if s < best - 1e-12:
            best_x, best = trial, s
    return best_x, best


def fit_jointly_to_fixed_point(rows_by_generation: dict[str, Prepared], bases: dict[str, EfficiencyModel],
                               sweeps: int = 2, verbose: bool = False,
                               max_rounds: int = MAX_FIT_ROUNDS) -> tuple[dict[str, EfficiencyModel], int]:
    """(fitted models, rounds): ``fit_jointly`` restarted from its own result until a round
    returns the factors it started from (so rerunning the fitter on the committed files returns
    them); stops after ``max_rounds``."""
    models = fit_jointly(rows_by_generation, bases, sweeps, verbose)
    for rounds in range(1, max_rounds):
        again = fit_jointly(rows_by_generation, models, sweeps, verbose)
        if all(_from_model(again[g]) == _from_model(models[g]) and again[g].fitted_factors == models[g].fitted_factors
               for g in models):
            return models, rounds
        models = again
    return models, max_rounds
