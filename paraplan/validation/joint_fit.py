"""Fit every GPU generation's efficiency model at once, with the host's per-kernel issue time
shared by all of them.

Why one value: ``cpu_issue_s`` is the time the *host* takes to issue one kernel from an eager
framework (Python, the PyTorch dispatcher, the CUDA driver's launch call; ``layer_times``): a
property of the server CPU and the software path, not of the GPU behind it. Fitted per
generation it was pinned by the rows of two generations independently, in the same cell of the
search's grid (56.2 us, between its neighbours 42 and 75 us: by Ampere's eager single-node vTrain
runs and by Blackwell's Megatron-Bridge MoE rows, 2026-12 fit), and left at its prior of zero by
Hopper, whose published rows never bind it, so GH200's
eager fp32 runs (Sailor) and any held-out host-bound source had no host time at all. Fitted
jointly, the rows of every generation that exercise the host pin the one value, and a source
held out in cross-validation is predicted with the host time the other sources measured.

The search is the per-generation coordinate search (``fit.fit_generation``) run side by side:
each sweep moves every generation's own factors against its own objective, then the shared
factor against the pooled objective (every generation's rows, each source weighing the square
root of its row count, ``fit.source_weights``). A shared factor no row pins (the pooled objective
no worse at its documented prior, within ``fit.UNPINNED_TOLERANCE``) takes the prior. The two
steps weigh a source that spans generations differently (within one generation by its rows
there, in the pool by all its rows), so the alternation is not a descent on one objective; it is
run to a fixed point (``fit_jointly_to_fixed_point``), and each generation's own objective is
what its YAML records. Only generations whose rows could fit a shared factor on their own
(``fit_search.fitted_names``) take the shared value; the others keep theirs.
"""
from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np

from hardware_specs.efficiency_model import EfficiencyModel
from paraplan.validation.fit_search import (FIT_BOUNDS, MAX_FIT_ROUNDS, PRIOR_ONLY_IF_UNPINNED, UNPINNED_PRIORS,
                                            UNPINNED_TOLERANCE, clipped_start, coordinate_step, fitted_names,
                                            from_model, objective, priors_where_unpinned, rounded_as_written,
                                            TRADING_PAIRS, pair_step, scan_plateau_and_knee, source_weights,
                                            sweep_candidates, to_model, under_16bit_plateau)
from paraplan.validation.predict import Prepared, predict
from paraplan.validation.trial_scores import TrialScores

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
        pred = predict(rows, {gen: to_model(bases[gen], xs[gen])})
        errors.append(np.abs(pred / rows.measured - 1.0))
        sources.extend(rows.sources)
    w = source_weights(sources)
    return float(np.sum(np.concatenate(errors) * w) / np.sum(w))


def _fitting(rows_by_generation: dict[str, Prepared], name: str) -> list[str]:
    """The generations whose rows could fit the shared factor ``name`` on their own."""
    return [g for g in sorted(rows_by_generation) if name in fitted_names(rows_by_generation[g])]


def _shared_start(bases: dict[str, EfficiencyModel], rows_by_generation: dict[str, Prepared], name: str) -> float:
    """Where the shared factor's search starts: the value of the generation with the most rows
    among those that fit it, clipped into its range (all equal once the generations were fitted
    together, or when every start is ``fit.neutral_start``)."""
    gen = max(_fitting(rows_by_generation, name), key=lambda g: (len(rows_by_generation[g]), g))
    lo, hi = FIT_BOUNDS[name]
    return float(np.clip(from_model(bases[gen])[name], lo, hi))


def fit_jointly(rows_by_generation: dict[str, Prepared], bases: dict[str, EfficiencyModel], sweeps: int = 2,
                verbose: bool = False, hold: tuple[str, ...] = (), jobs: int = 1) -> dict[str, EfficiencyModel]:
    """Fitted models of every generation in ``rows_by_generation`` (each starting at its
    ``bases`` entry), each ``SHARED_FACTORS`` entry one value for all generations that can fit
    it (module docstring); the generations' own factors in ``hold`` keep their ``bases`` values
    (a shared factor cannot be held: ``ValueError``). No generations: no models. ``jobs`` > 1
    scores each factor's candidates in that many forked processes (``trial_scores``: the same
    fit, faster)."""
    if set(hold) & set(SHARED_FACTORS):
        raise ValueError(f"shared factors cannot be held: {sorted(set(hold) & set(SHARED_FACTORS))}")
    return _search(rows_by_generation, bases, sweeps, verbose, hold, jobs)


def fit_generation(prepared: Prepared, generation: str, base: EfficiencyModel, sweeps: int = 2,
                   verbose: bool = False, hold: tuple[str, ...] = ()) -> tuple[EfficiencyModel, float]:
    """(fitted model, objective) for ``prepared`` (rows of one generation), starting at ``base``;
    the factors in ``hold`` (the host's included) keep ``base``'s values. The joint search on one
    generation: its pooled objective is the generation's own, so the host's factor is searched
    like the others (after them, as in ``FIT_BOUNDS``).

    Coordinate search: the 16-bit plateau and the shape knee are scanned jointly first (they
    trade against each other), then each sweep scans every factor over a grid within its bounds
    holding the others, keeping the best; later sweeps refine around the current value. The
    objective has kinks (max() in roofline and overlap terms), so no derivatives are used.
    """
    model = _search({generation: prepared}, {generation: base}, sweeps, verbose, hold)[generation]
    return model, objective(prepared, generation, model, source_weights(prepared.sources))


def _search(rows_by_generation: dict[str, Prepared], bases: dict[str, EfficiencyModel], sweeps: int,
            verbose: bool, hold: tuple[str, ...], jobs: int = 1) -> dict[str, EfficiencyModel]:
    """``fit_jointly`` with any factor holdable: a held shared factor keeps each base's value
    and stays listed as fitted where the base lists it."""
    gens = sorted(rows_by_generation)
    if not gens:
        return {}
    with TrialScores(rows_by_generation, bases, jobs) as scores:
        return _search_with(rows_by_generation, bases, sweeps, verbose, hold, scores)


def _search_with(rows_by_generation, bases, sweeps, verbose, hold, scores) -> dict[str, EfficiencyModel]:
    """``_search`` with the generations' objectives from ``scores`` (``trial_scores.TrialScores``)."""
    gens = sorted(rows_by_generation)
    shared = {n: _fitting(rows_by_generation, n) for n in SHARED_FACTORS if n not in hold}
    shared = {n: fitting for n, fitting in shared.items() if fitting}
    names = {g: fitted_names(rows_by_generation[g], hold=(*SHARED_FACTORS, *hold)) for g in gens}
    x = {g: clipped_start(bases[g], names[g]) for g in gens}
    for n, fitting in shared.items():
        start = _shared_start(bases, rows_by_generation, n)
        for g in fitting:
            x[g][n] = start

    def score_of(g):
        return scores.of(g)

    best = {g: score_of(g)(x[g]) for g in gens}
    for g in gens:
        if "gemm_half_dim" in names[g]:
            x[g], best[g] = scan_plateau_and_knee(x[g], best[g], score_of(g))
    for sweep in range(sweeps):
        for g in gens:
            for n in names[g]:
                x[g], best[g] = coordinate_step(x[g], best[g], n, sweep, score_of(g))
                if verbose:
                    print(f"  sweep {sweep} {g} {n} = {x[g][n]:.4g}: {100 * best[g]:.2f}%", file=sys.stderr)
            for pair in TRADING_PAIRS:
                if set(pair) <= set(names[g]):
                    x[g], best[g] = pair_step(x[g], best[g], pair, sweep, score_of(g))
        for n, fitting in shared.items():
            x, pooled = _shared_step(rows_by_generation, bases, x, n, fitting,
                                     sweep_candidates(n, x[fitting[0]], sweep))
            best = {g: score_of(g)(x[g]) for g in gens}
            if verbose:
                print(f"  sweep {sweep} shared {n} = {x[fitting[0]][n]:.4g}: pooled {100 * pooled:.2f}%",
                      file=sys.stderr)
    kept = {}
    for g in gens:
        x[g], best[g], kept[g] = priors_where_unpinned(x[g], best[g], names[g], score_of(g))
        kept[g] += [n for n in hold if n in (bases[g].fitted_factors or ())]
    pooled = pooled_objective(rows_by_generation, x, bases)
    for n, fitting in shared.items():
        if n in PRIOR_ONLY_IF_UNPINNED:
            at_prior = {g: (dict(xg, **{n: UNPINNED_PRIORS[n]}) if g in fitting else xg) for g, xg in x.items()}
            score = pooled_objective(rows_by_generation, at_prior, bases)
            if score <= pooled + UNPINNED_TOLERANCE:
                x, pooled = at_prior, score
                continue
        for g in fitting:
            kept[g].append(n)
    return {g: replace(rounded_as_written(to_model(bases[g], x[g])),
                       fitted_factors=tuple(n for n in FIT_BOUNDS if n in kept[g]))
            for g in gens}


def _shared_step(rows_by_generation, bases, x: dict[str, dict], name: str, fitting: list[str],
                 candidates) -> tuple[dict, float]:
    """Every generation's ``x`` with the shared factor ``name`` (of the generations ``fitting``)
    at the candidate that minimises the pooled objective (the generations' own factors held)."""
    best_x, best = x, pooled_objective(rows_by_generation, x, bases)
    for value in candidates:
        trial = {g: (under_16bit_plateau(dict(xg, **{name: float(value)})) if g in fitting else xg)
                 for g, xg in x.items()}
        s = pooled_objective(rows_by_generation, trial, bases)
        if s < best - 1e-12:
            best_x, best = trial, s
    return best_x, best


def fit_jointly_to_fixed_point(rows_by_generation: dict[str, Prepared], bases: dict[str, EfficiencyModel],
                               sweeps: int = 2, verbose: bool = False,
                               max_rounds: int = MAX_FIT_ROUNDS, jobs: int = 1) -> tuple[dict[str, EfficiencyModel], int]:
    """(fitted models, rounds): ``fit_jointly`` restarted from its own result until a round
    returns the factors it started from (so rerunning the fitter on the committed files returns
    them); stops after ``max_rounds``."""
    return _to_fixed_point(lambda start: fit_jointly(rows_by_generation, start, sweeps, verbose, jobs=jobs),
                           bases, max_rounds)


def best_of_starts(rows_by_generation: dict[str, Prepared],
                   fits: list[dict[str, EfficiencyModel]]) -> tuple[dict[str, EfficiencyModel], int]:
    """(models, index): of ``fits`` (each a fit of every generation in ``rows_by_generation``,
    from a different start), the one with the lowest ``pooled_objective``; a tie keeps the earlier.

    The coordinate search is local: from the committed factors it can settle in a valley that a
    start owing nothing to them (``fit.neutral_start``) climbs out of, or the other way round.
    The fitter runs both and keeps the better, so the committed fit is the lowest objective of
    the two searches, and rerunning it on the committed files returns them (the committed start
    is then a fixed point, and the neutral start does not depend on the committed factors)."""
    if not fits:
        raise ValueError("best_of_starts needs at least one fit")
    scores = [pooled_objective(rows_by_generation, {g: from_model(m[g]) for g in rows_by_generation}, m)
              for m in fits]
    best = int(np.argmin(scores))          # the first of equal minima
    return fits[best], best


def fit_to_fixed_point(prepared: Prepared, generation: str, base: EfficiencyModel, sweeps: int = 2,
                       verbose: bool = False, max_rounds: int = MAX_FIT_ROUNDS,
                       hold: tuple[str, ...] = (), jobs: int = 1) -> tuple[EfficiencyModel, float, int]:
    """(fitted model, objective, rounds): ``fit_generation`` restarted from its own result until
    a round returns the factors it started from, so rerunning the fitter on the committed file
    returns that file (the coordinate search is local: one pass from a moved start can still
    improve). Stops after ``max_rounds`` rounds (the last round's factors are then returned and
    the caller reports that the search had not settled)."""
    models, rounds = _to_fixed_point(
        lambda start: _search({generation: prepared}, start, sweeps, verbose, hold, jobs), {generation: base},
        max_rounds)
    model = models[generation]
    return model, objective(prepared, generation, model, source_weights(prepared.sources)), rounds


def _to_fixed_point(fit_once, bases: dict[str, EfficiencyModel], max_rounds: int):
    """(models, rounds): ``fit_once(start)`` from ``bases``, then from its own result, until a
    round returns the factors and fitted lists it started from, or after ``max_rounds``."""
    models = fit_once(bases)
    for rounds in range(1, max_rounds):
        again = fit_once(models)
        if all(from_model(again[g]) == from_model(models[g]) and again[g].fitted_factors == models[g].fitted_factors
               for g in models):
            return models, rounds
        models = again
    return models, max_rounds
