"""Fit each GPU generation's efficiency model to the published runs (rerunnable), and measure how
well a fit predicts runs it did not see.

``python -m paraplan.validation.fit [CSV]`` predicts every row of the published-runs file that
the simulator can model (``predict``: one step-model call per model, cluster and dtype), groups
the rows by GPU generation, and fits that generation's ``EfficiencyModel`` factors to minimise
the weighted mean absolute relative error by a derivative-free coordinate search within physical
bounds (``FIT_BOUNDS``; the search is ``fit_search``). The host's per-kernel issue time is one
factor of every generation, fitted over all their rows together (``joint_fit``). Each source's total weight grows with the square root of its row count,
so a benchmark with hundreds of rows does not drown the others. Factors a generation's rows
cannot pin down keep their prior values. The search is local, so it runs from two starts, the
committed factors and the middle of every range (``neutral_start``), and keeps the fit with the
lower objective (``joint_fit.best_of_starts``). The result is written to
``hardware_specs/efficiency/<generation>.yaml`` with the objective it reached
(``fit_objective``), which ``tests/test_efficiency_fit.py`` re-evaluates on the committed
code and the bundled file: the committed factors are exactly what this fitter returned.

``--cross-validate`` also refits every generation (jointly, as above) once per source with that
source left out (starting from the middle of each factor's range, ``neutral_start``, not from the committed fit,
which saw the source) and predicts the left-out rows with it: the leave-one-source-out error, the
honest forecast for runs of a new stack or cluster. A generation left with too few rows to fit
borrows its neighbour generation's fit without the source; factors the remaining rows do not
exercise take values no row chose (``source_free``), never the committed ones.

What a framework does (overlap, kernels, fusion) is not fitted: it is the row's software stack
(``hardware_specs/stacks``). Only achieved hardware efficiency is.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import yaml

from hardware_specs.catalog import efficiency_path, load_efficiency
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError
from paraplan.validation.datasets import BUNDLED_DIR, PUBLISHED_RUNS
from paraplan.validation.predict import Prepared, predict, prepare
from paraplan.validation.published import TOTAL_ROW, read_runs, shown_source
# the search itself lives in fit_search; its names are re-exported here, where callers look for them
from paraplan.validation.fit_search import (DTYPE_FACTORS, FIT_BOUNDS, GRID_POINTS, LOG_SCALED,  # noqa: F401
                                            MAX_FIT_ROUNDS, MIN_ROWS_FOR_FULL_FIT, MIN_ROWS_TO_FIT, PRIORS,
                                            PRIOR_ONLY_IF_UNPINNED, UNPINNED_PRIORS, UNPINNED_TOLERANCE, at_bound,
                                            factor_bounds, fitted_names,
                                            from_model, objective, source_weights, to_model)
from paraplan.validation.joint_fit import (SHARED_FACTORS, best_of_starts, fit_generation, fit_jointly,  # noqa: F401
                                           fit_jointly_to_fixed_point, fit_to_fixed_point)


def write_efficiency(model: EfficiencyModel, path: Path, note: str, objective_value: float,
                     fitted: list[str]) -> None:
    data = {
        "generation": model.generation,
        "gemm_peak_fraction": {k: round(float(v), 4) for k, v in model.gemm_peak_fraction.items()},
        "gemm_half_dim": round(float(model.gemm_half_dim), 2),
        "attention_peak_fraction": round(float(model.attention_peak_fraction), 4),
        "hbm_fraction": round(float(model.hbm_fraction), 4),
        "scaleup_fraction": round(float(model.scaleup_fraction), 4),
        "scaleout_fraction": round(float(model.scaleout_fraction), 4),
        "kernel_overhead_s": float(f"{model.kernel_overhead_s:.3g}"),
        "cpu_issue_s": float(f"{model.cpu_issue_s:.3g}"),
        "exposed_softmax_fraction": round(float(model.exposed_softmax_fraction), 4),
        "optimizer_hbm_fraction": round(float(model.optimizer_hbm_fraction), 4),
        "sync_skew_fraction": round(float(model.sync_skew_fraction), 4),
        "collective_bw_fraction": {k: round(float(v), 4) for k, v in model.collective_bw_fraction.items()},
        "fitted_factors": list(fitted),
        "fit_objective": round(float(objective_value), 6),
        "fitted_on": note,
    }
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text("# Written by `python -m paraplan.validation.fit`; see hardware_specs/efficiency_model.py\n"
                   + yaml.safe_dump(data, sort_keys=False))
    tmp.replace(path)


def by_generation(prepared: Prepared) -> dict[str, Prepared]:
    """``prepared`` split into one ``Prepared`` per GPU generation."""
    gens = prepared.generations
    return {str(g): subset(prepared, np.flatnonzero(gens == g)) for g in np.unique(gens)}


def subset(prepared: Prepared, rows) -> Prepared:
    """The rows ``rows`` of ``prepared`` (regrouped)."""
    rows = np.asarray(rows, dtype=int)
    keep = set(rows.tolist())
    remap = {old: new for new, old in enumerate(rows.tolist())}
    groups = []
    for model, cluster, batch, idx in prepared.groups:
        mine = [k for k, i in enumerate(idx.tolist()) if i in keep]
        if mine:
            groups.append((model, cluster, batch.take(np.array(mine)), np.array([remap[int(idx[k])] for k in mine])))
    pick = lambda seq: tuple(seq[i] for i in rows)  # noqa: E731
    return Prepared(pick(prepared.ids), pick(prepared.sources), pick(prepared.inputs), prepared.measured[rows],
                    prepared.scale[rows], prepared.power[rows], prepared.layer_metric[rows], tuple(groups))


def prior_model(generation: str) -> EfficiencyModel:
    """The generation's starting point: its committed model with the fitted factors at the
    middle of their ranges would be arbitrary, so the committed YAML is the prior (for a
    generation never fitted it is the hand-written initial guess)."""
    return load_efficiency(generation)


#: the fitted generation whose factors stand in for a generation that has no other source to fit
#: on when one is held out (what one would use for a new GPU generation with no measured runs)
NEIGHBOUR = {"volta": "ampere", "ampere": "hopper", "hopper": "blackwell", "blackwell": "hopper", "turing": "ampere"}
#: generations no measured run covers whose prior the fitter writes from a fitted generation of
#: their time rather than by hand: the AMD Instinct parts, MI250X (CDNA2, 2021) beside A100 and
#: MI300X (CDNA3, 2023) beside H100. A hand-set 0.8 GEMM plateau and 5 us per kernel made MI300X
#: 1.79x H100 per GPU on Llama-3-70B where its bf16 peak is 1.32x: a prior no more optimistic than
#: the fitted generations is the honest one (still unfitted, and every number on it says so).
#: MI350X / MI355X (CDNA 4, 2025) stand beside B200 / B300: AMD launched them against Blackwell
#: (the MI355X's matmul share in gpus/mi355x.yaml is measured against B200's, the same donor)
ROWLESS_DONOR = {"cdna2": "ampere", "cdna3": "hopper", "cdna4": "blackwell"}


def _transfer(model: EfficiencyModel, target: EfficiencyModel) -> EfficiencyModel:
    """``target`` with ``model``'s fitted factors (the generation key and documented fields kept)."""
    x = from_model(model)
    fitted = {k: v for k, v in x.items() if k in (model.fitted_factors or FIT_BOUNDS)}
    return replace(to_model(target, {**from_model(target), **fitted}), fitted_factors=model.fitted_factors)


def neutral_start(base: EfficiencyModel, prepared: Prepared) -> EfficiencyModel:
    """``base`` with every factor ``prepared``'s rows would fit set to the middle of its range
    (geometric middle for the log-scaled ones; a low-precision plateau at the middle of its range
    under the 16-bit middle): a start that owes nothing to any row, so a fit without a source
    cannot inherit that source's influence through where the search began."""
    return to_model(base, _at_middles(from_model(base), fitted_names(prepared)))


def _at_middles(x: dict, names) -> dict:
    """``x`` with each factor of ``names`` at the middle of its range (geometric for the
    ``LOG_SCALED``), the 16-bit plateau first: the low-precision plateaus' ranges end at it."""
    x = dict(x)
    if "gemm16" in names:
        x["gemm16"] = sum(FIT_BOUNDS["gemm16"]) / 2.0
    for n in names:
        if n != "gemm16":
            lo, hi = factor_bounds(n, x)
            x[n] = math.sqrt(lo * hi) if n in LOG_SCALED else (lo + hi) / 2.0
    return x


def source_free(model: EfficiencyModel) -> EfficiencyModel:
    """``model`` with every factor its fit did not set (not in ``fitted_factors``) at a value no
    row chose: a low-precision plateau the rows did not exercise at the 16-bit plateau (the same
    share of its own peak, the bound the fit keeps it under), the host and kernel factors at
    their documented priors (``UNPINNED_PRIORS``). A held-out fit starts from the committed file,
    whose values of those factors were fitted with the held-out source; this removes them."""
    x = from_model(model)
    fitted = set(model.fitted_factors or ())
    for name, _ in DTYPE_FACTORS:
        if name not in fitted:
            x[name] = x["gemm16"]
    for name, value in UNPINNED_PRIORS.items():
        if name not in fitted:
            x[name] = value
    return replace(to_model(model, x), fitted_factors=model.fitted_factors)


def _middle_of_ranges(base: EfficiencyModel) -> EfficiencyModel:
    """``base`` with every fitted factor at the middle of its range, the host and kernel factors at
    their documented priors (no rows to fit, none to borrow)."""
    x = _at_middles(from_model(base), FIT_BOUNDS)
    x.update(UNPINNED_PRIORS)
    return replace(to_model(base, x), fitted_factors=())


def _held_out_prediction(prepared: Prepared, src: str, sweeps: int) -> np.ndarray:
    """Predictions of source ``src``'s rows by efficiency models fitted without ``src``.

    Every generation with at least ``MIN_ROWS_FOR_FULL_FIT`` rows left is fitted on them (from
    ``neutral_start``), all together (``joint_fit.fit_jointly``: the host's issue time is one
    factor of them all); one with fewer borrows its ``NEIGHBOUR``'s fit without ``src`` on its own
    datasheet (as a new generation would be predicted); one with neither takes the middle of
    every range (a generation never fitted, its hand-set prior). Factors no remaining row set
    are made ``source_free``."""
    sources = np.asarray(prepared.sources)
    gens = prepared.generations
    rest = np.flatnonzero(sources != src)
    others = by_generation(subset(prepared, rest)) if len(rest) else {}
    # every generation with enough rows left is fitted, together: the host's issue time is one
    # factor of all of them (``joint_fit``), so the held-out source's host time comes from the others
    enough = _fittable_without(prepared, src)
    fittable = {g: rows for g, rows in others.items() if g in enough}
    fitted = fit_jointly(fittable, {g: neutral_start(prior_model(g), rows) for g, rows in fittable.items()},
                         sweeps) if fittable else {}

    def fitted_without(gen):
        return fitted.get(gen)

    models = {}
    for gen in (str(g) for g in np.unique(gens[sources == src])):
        model = fitted_without(gen)
        if model is None and NEIGHBOUR.get(gen) is not None:
            donor = fitted_without(NEIGHBOUR[gen])
            model = _transfer(donor, prior_model(gen)) if donor is not None else None
        if model is None:
            base = prior_model(gen)
            model = _middle_of_ranges(base) if base.is_fitted else base
        models[gen] = source_free(model) if model.is_fitted else model
    held = np.flatnonzero(sources == src)
    return predict(subset(prepared, held), models)


#: the prepared rows a forked cross-validation worker reads (set in the parent just before the
#: workers fork; never written by them)
_FORKED_ROWS: dict = {}


def _share_rows():
    """Worker initialiser: nothing to do, the rows came with the fork."""


def _fittable_without(prepared: Prepared, src: str) -> set[str]:
    """The generations with at least ``MIN_ROWS_FOR_FULL_FIT`` rows of sources other than ``src``:
    those a held-out fit fits (``_held_out_prediction``)."""
    sources = np.asarray(prepared.sources)
    gens = np.asarray(prepared.generations).astype(str)
    left, counts = np.unique(gens[sources != src], return_counts=True)
    return {str(g) for g, n in zip(left, counts) if n >= MIN_ROWS_FOR_FULL_FIT}


def held_out_basis(prepared: Prepared) -> list[str]:
    """What each row's leave-one-source-out prediction rests on, as ``_held_out_prediction``
    chooses it: ``"fit"`` (its generation has ``MIN_ROWS_FOR_FULL_FIT`` rows of other sources),
    ``"neighbour"`` (its ``NEIGHBOUR`` generation's fit without the source, on its own datasheet)
    or ``"none"`` (no other source of either: the middle of every factor's range, or the
    generation's hand-set prior), so a report can say when a cross-validated number is no fit."""
    sources = np.asarray(prepared.sources).tolist()
    gens = np.asarray(prepared.generations).astype(str).tolist()
    enough = {src: _fittable_without(prepared, src) for src in set(sources)}
    return ["fit" if g in enough[s] else "neighbour" if NEIGHBOUR.get(g) in enough[s] else "none"
            for s, g in zip(sources, gens)]


def _held_out_in_worker(src: str, sweeps: int) -> np.ndarray:
    return _held_out_prediction(_FORKED_ROWS["rows"], src, sweeps)


def cross_validate(prepared: Prepared, sweeps: int = 2, progress=None, jobs: int = 1,
                   held_out=None) -> np.ndarray:
    """Leave-one-source-out predictions of every row of ``prepared`` (all generations): each
    source's rows predicted by efficiency models fitted without that source. A generation with no
    other source borrows the factors of its ``NEIGHBOUR`` generation fitted without the source
    (the prior, if that has none either). ``jobs`` > 1 runs the held-out fits in that many
    processes (the result is the same). ``held_out``: the sources to predict (default every
    source; the other rows stay NaN), each still by a fit on every other source's rows."""
    pred = np.full(len(prepared), np.nan)
    sources = np.asarray(prepared.sources)
    order = [src for src in np.unique(sources) if held_out is None or str(src) in held_out]
    if jobs > 1:
        # forked workers inherit the prepared rows (they hold read-only mappings that do not pickle)
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context,
                                 initializer=_share_rows, initargs=()) as pool:
            _FORKED_ROWS["rows"] = prepared
            try:
                futures = {src: pool.submit(_held_out_in_worker, str(src), sweeps) for src in order}
                for src in order:
                    pred[sources == src] = futures[src].result()
                    if progress is not None:
                        progress(str(src))
            finally:
                _FORKED_ROWS.clear()
        return pred
    for src in order:
        pred[sources == src] = _held_out_prediction(prepared, str(src), sweeps)
        if progress is not None:
            progress(str(src))
    return pred


def _fit_and_write(by_gen: dict[str, Prepared], order: list[str], args) -> None:
    """Fit the generations (jointly, ``joint_fit``; with ``--generation`` only those, the shared
    host factor held at its committed value), then the sparse ones from their neighbours, and
    write each YAML (unless ``--dry-run``)."""
    chosen = [g for g in order if len(by_gen[g]) >= MIN_ROWS_TO_FIT and (not args.generation or g in args.generation)]
    csv_name = Path(args.csv).name
    # two starts, the committed factors and the middle of every range; the lower objective is kept
    # (``joint_fit.best_of_starts``: the coordinate search is local)
    starts = ("committed", "neutral")

    def start(gen, which):
        return prior_model(gen) if which == "committed" else neutral_start(prior_model(gen), by_gen[gen])
    if args.generation:
        fits = {}
        for gen in chosen:
            tries = [fit_to_fixed_point(by_gen[gen], gen, start(gen, which), verbose=args.verbose, hold=SHARED_FACTORS,
                                        jobs=args.jobs)
                     for which in starts]
            models, pick = best_of_starts({gen: by_gen[gen]}, [{gen: t[0]} for t in tries])
            print(f"{gen}: kept the fit from the {starts[pick]} start")
            fits[gen] = (models[gen], tries[pick][2])
        joint = ""
    else:
        rows = {g: by_gen[g] for g in chosen}
        tries = [fit_jointly_to_fixed_point(rows, {g: start(g, which) for g in chosen}, verbose=args.verbose,
                                            jobs=args.jobs)
                 for which in starts]
        models, pick = best_of_starts(rows, [t[0] for t in tries])
        rounds = tries[pick][1]
        print(f"kept the joint fit from the {starts[pick]} start")
        fits = {g: (models[g], rounds) for g in chosen}
        n_rows = sum(len(by_gen[g]) for g in chosen)
        joint = (f"; {', '.join(SHARED_FACTORS)} (the host's) one value for {', '.join(chosen)}, fitted jointly "
                 f"over their {n_rows} rows")
    for gen in chosen:
        rows, (fitted, rounds) = by_gen[gen], fits[gen]
        before = objective(rows, gen, prior_model(gen))
        after = objective(rows, gen, fitted)
        srcs = sorted(set(rows.sources))
        note = (f"coordinate search on the weighted mean |pred/measured - 1| over {len(rows)} rows of "
                f"{', '.join(srcs)} in {csv_name}{joint}")
        names = list(fitted.fitted_factors)
        settled = (f"settled after {rounds} round(s)" if rounds < MAX_FIT_ROUNDS
                   else f"NOT settled after {MAX_FIT_ROUNDS} rounds")
        print(f"{gen}: {len(rows)} rows, objective {100 * before:.2f}% -> {100 * after:.2f}%; fitted {names}; {settled}")
        print("   ", {k: float(f"{v:.4g}") for k, v in from_model(fitted).items() if k in names})
        bound = at_bound(fitted, names)
        if bound:
            print(f"    at a bound of their range (missing physics?): {bound}")
        if not args.dry_run:
            write_efficiency(fitted, efficiency_path(gen), note, after, names)
    for gen in order:
        rows = by_gen[gen]
        if len(rows) >= MIN_ROWS_TO_FIT or (args.generation and gen not in args.generation):
            continue
        donor = NEIGHBOUR.get(gen)
        base = prior_model(gen)
        model = _transfer(prior_model(donor), base) if donor else base
        model = replace(model, fitted_factors=())
        note = (f"unfitted prior: {len(rows)} rows of {', '.join(sorted(set(rows.sources)))} are too few to fit "
                f"(< {MIN_ROWS_TO_FIT}); " + (f"the fitted factors of {donor} on this generation's own datasheet "
                                              f"numbers" if donor else "hand-set initial values"))
        score = objective(rows, gen, model)
        print(f"{gen}: {len(rows)} rows: {note}; objective {100 * score:.2f}%")
        if not args.dry_run:
            write_efficiency(model, efficiency_path(gen), note, score, [])
    write_rowless_priors(args.generation, args.dry_run, measured=set(by_gen))


def rowless_prior(generation: str) -> EfficiencyModel:
    """The prior of a generation no measured run covers (``ROWLESS_DONOR``): every fittable
    factor (``FIT_BOUNDS``) as its donor's committed file holds it, on this generation's own file
    (its documented fields kept), labelled unfitted. It depends on the donor's file alone, not on
    what an earlier transfer left in this one."""
    donor = replace(prior_model(ROWLESS_DONOR[generation]), fitted_factors=())     # all of FIT_BOUNDS
    return replace(_transfer(donor, prior_model(generation)), fitted_factors=())


def write_rowless_priors(generations=None, dry_run: bool = False, measured=()) -> None:
    """Write the ``ROWLESS_DONOR`` priors (``generations``: only those whose donor is listed);
    a generation in ``measured`` (it has rows now) is fitted or borrowed by the fit instead."""
    for gen, donor in ROWLESS_DONOR.items():
        if gen in measured or (generations and donor not in generations):
            continue
        note = (f"unfitted prior: no measured run of {gen}; the fitted factors of {donor} (its contemporary) "
                f"on this generation's own datasheet numbers")
        print(f"{gen}: no rows: {note}")
        if not dry_run:
            write_efficiency(rowless_prior(gen), efficiency_path(gen), note, float("nan"), [])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="?", default=str(BUNDLED_DIR / PUBLISHED_RUNS),
                    help="published-runs CSV (default: the copy bundled with paraplan)")
    ap.add_argument("--generation", action="append", help="fit only these generations")
    ap.add_argument("--dry-run", action="store_true", help="print the fit, do not write files")
    ap.add_argument("--cross-validate", action="store_true", help="also print leave-one-source-out errors")
    ap.add_argument("--skip-fit", action="store_true",
                    help="with --cross-validate: keep the committed files, only cross-validate")
    ap.add_argument("--jobs", type=int, default=1,
                    help="processes: the fit scores each factor's candidates side by side (the same fit, faster), "
                         "the cross-validation runs its held-out fits side by side")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except InputError as exc:
        # one line, exit 2, nothing written (the YAMLs are written only after every fit is done)
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args) -> int:
    """``main`` after parsing: fit and write, and/or cross-validate (``InputError`` on bad input)."""
    if args.jobs < 1:
        raise InputError("--jobs", f"{args.jobs} is not a process count", "use 1 or more")
    prepared = prepare(read_runs(args.csv).to_dict("records"))
    if len(prepared) == 0:
        raise InputError("csv", f"{args.csv} has no row the simulator can predict",
                         "use a published-runs CSV like the bundled one")
    by_gen = by_generation(prepared)
    unknown = sorted(set(args.generation or ()) - set(by_gen))
    if unknown:
        raise InputError("--generation", f"no rows of {', '.join(unknown)} in {args.csv}",
                         f"choose from {', '.join(sorted(by_gen))}")
    # generations with enough rows first, so a sparse one can borrow its neighbour's fresh fit
    order = sorted(by_gen, key=lambda g: (len(by_gen[g]) < MIN_ROWS_TO_FIT, g))
    if not args.skip_fit:
        print("fitting the efficiency models (two starts, tens of minutes; --verbose shows each sweep)",
              file=sys.stderr, flush=True)
        _fit_and_write(by_gen, order, args)
    if args.cross_validate:
        # one joint refit per source, minutes each: say so before the first ends, and count them
        n_sources = len(set(prepared.sources))
        print(f"cross-validating: one joint refit without each of {n_sources} sources (minutes each)",
              file=sys.stderr, flush=True)
        done, t0 = [0], time.perf_counter()

        def cv_progress(src: str) -> None:
            done[0] += 1
            print(f"  cross-validated {src} ({done[0]} of {n_sources}, {time.perf_counter() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
        cv = cross_validate(prepared, progress=cv_progress, jobs=args.jobs)
        ins = predict(prepared)
        for src in sorted(set(prepared.sources)):
            sel = np.asarray(prepared.sources) == src
            e_in = 100 * np.mean(np.abs(ins[sel] / prepared.measured[sel] - 1))
            e_cv = 100 * np.mean(np.abs(cv[sel] / prepared.measured[sel] - 1))
            print(f"    {shown_source(src):10s} rows {int(sel.sum()):4d}  in-sample {e_in:6.2f}%  leave-source-out {e_cv:6.2f}%",
                  flush=True)
        e_in = 100 * np.mean(np.abs(ins / prepared.measured - 1))
        e_cv = 100 * np.mean(np.abs(cv / prepared.measured - 1))
        print(f"    {TOTAL_ROW:10s} rows {len(prepared):4d}  in-sample {e_in:6.2f}%  leave-source-out {e_cv:6.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
