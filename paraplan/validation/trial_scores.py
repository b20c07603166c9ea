"""The fitter's objective for many trial factor sets at once, in forked processes.

The coordinate search (``fit_search.coordinate_step``, ``scan_plateau_and_knee``) scores the
candidates of one factor one after the other, each built from the factors as they stand when its
turn comes. Those candidates are mostly known before the first is scored (a lower 16-bit plateau
can clamp the low-precision plateaus and change a later trial, which is then scored on its own),
so ``GenerationScore.prefetch`` scores the whole list in ``jobs`` forked processes first and the
sequential search then reads each score from the cache: the search, and so the fit, is the one it
is without the workers, about ``jobs`` times faster. The objective is a pure function of
(generation, trial): the same code on the same rows gives the same float in a worker.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from paraplan.validation.fit_search import objective, source_weights, to_model

#: what the forked workers score with (set in the parent before the pool forks, constant while it
#: lives, cleared when it is shut down; never written by the workers)
_FORKED: dict = {}


def _objective_at(rows, bases, weights, generation: str, trial: dict) -> float:
    """The generation's weighted objective at ``bases[generation]`` with ``trial``'s factors."""
    return objective(rows[generation], generation, to_model(bases[generation], trial), weights[generation])


def _score_in_worker(generation: str, trial: dict) -> float:
    return _objective_at(_FORKED["rows"], _FORKED["bases"], _FORKED["weights"], generation, trial)


def _key(generation: str, trial: dict) -> tuple:
    return generation, tuple(sorted((k, float(v)) for k, v in trial.items()))


class TrialScores:
    """``objective`` of each generation's rows at a trial's factors (``bases[g]`` with ``trial``,
    each source weighted by ``source_weights``), cached; ``prefetch`` scores a list of trials in
    ``jobs`` forked processes. Use as a context manager (the pool is shut down on exit);
    ``jobs`` = 1 scores in this process."""

    def __init__(self, rows_by_generation: dict, bases: dict, jobs: int = 1):
        weights = {g: source_weights(rows.sources) for g, rows in rows_by_generation.items()}
        self._rows, self._bases, self._weights = rows_by_generation, bases, weights
        self._cache: dict = {}
        self._pool = None
        if jobs > 1:
            if _FORKED:
                raise RuntimeError("one parallel trial scorer at a time")
            _FORKED.update(rows=rows_by_generation, bases=bases, weights=weights)
            self._pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"))

    def __enter__(self) -> TrialScores:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
            _FORKED.clear()

    def score(self, generation: str, trial: dict) -> float:
        key = _key(generation, trial)
        if key not in self._cache:
            self._cache[key] = _objective_at(self._rows, self._bases, self._weights, generation, trial)
        return self._cache[key]

    def prefetch(self, generation: str, trials: list[dict]) -> None:
        """Score the trials not yet cached, side by side in the workers (nothing without them)."""
        if self._pool is None:
            return
        todo, seen = [], set()
        for t in trials:
            key = _key(generation, t)
            if key not in self._cache and key not in seen:
                seen.add(key)
                todo.append((key, t))
        if len(todo) < 2:
            return
        scores = self._pool.map(_score_in_worker, [generation] * len(todo), [t for _, t in todo])
        for (key, _), s in zip(todo, scores):
            self._cache[key] = s

    def of(self, generation: str) -> GenerationScore:
        return GenerationScore(self, generation)


class GenerationScore:
    """One generation's objective as the coordinate search calls it: ``score(trial)``, with
    ``prefetch(trials)``."""

    def __init__(self, scores: TrialScores, generation: str):
        self._scores, self._generation = scores, generation

    def __call__(self, trial: dict) -> float:
        return self._scores.score(self._generation, trial)

    def prefetch(self, trials: list[dict]) -> None:
        self._scores.prefetch(self._generation, trials)
