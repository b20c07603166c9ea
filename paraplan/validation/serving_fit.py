"""Fit the serving efficiency of each GPU generation to the measured serving runs, rerunnably.

``python -m paraplan.validation.serving_fit`` reads ``serving_runs.csv`` (the resolved path,
``paraplan.validation.datasets``), fits the factors of ``FIT_RANGES``
(``hardware_specs.serving_efficiency``) per GPU generation by Nelder-Mead on bounded
(logit-transformed) coordinates, starting from the hand-set prior (``default.yaml``, so a rerun
returns the same numbers), minimising the mean over rows and both metrics (TTFT, TPOT) of
|log(predicted / measured)| (symmetric in over- and under-prediction, so no row's noise pulls
the factors harder one way than the other), and writes
``hardware_specs/serving_efficiency/<generation>.yaml`` with exactly the values it found
(rounded to 4 significant digits, the rounding re-evaluated). The search restarts from the point
it found, with a fresh simplex, while a restart still lowers the objective (``MAX_RESTARTS``,
``RESTART_GAIN``): Nelder-Mead's simplex collapses early in nine dimensions, and near a range end
the logit map is flat. A factor that stays within 1% of its range's end is reported: the physics
is then missing something the factor is absorbing.

``--cv`` adds leave-one-group-out cross-validation: for each model (and each backend) the
factors are refitted without that group's rows and the group is predicted with them; the
pooled held-out errors are the honest forecast for runs the fit never saw. Each refit starts
from the prior too, so nothing of the held-out group leaks in through the starting point; a
factor no training row depends on (the synchronisation of a scheduler kind whose only engine
is held out) stays at its prior.

A GPU generation of ``hardware_specs/gpus/`` that no serving run measured gets a written prior,
``hardware_specs/serving_efficiency/<generation>.yaml`` with ``prior: true``: the fitted factors
of its donor, the fitted serving generation reached along the training fit's chain
(``paraplan.validation.fit.ROWLESS_DONOR``, then ``NEIGHBOUR``: MI300X's CDNA3 -> Hopper,
CDNA2 -> Ampere -> Hopper), as training does (``fit.write_rowless_priors``): a prior no more
optimistic than the measured generations, not the hand-set ``default.yaml`` (attention at 0.4 of
peak where Hopper's fit gives 0.18, clients synchronised 1.0 where Hopper's give 1.7-4.3, 20 ms
of host time a request where Hopper's give 48 ms, which made MI300X's TTFT half H100's at 1.32x
its FP8 peak). ``--write`` writes them after the fitted files; ``--write-priors`` writes only
them, from the committed fitted files, without fitting. ``default.yaml`` stays the point every
fit starts from and the profile of a generation no donor reaches (a user's GPU file naming a new
generation). The generations the training chain names no donor for (TPUs, CPU) join it at
``FALLBACK_DONOR`` (Hopper) and walk on from there; one no donor reaches at all has its stale
written prior removed, so that what loads is what the fitter printed (``default.yaml``). A
generation with no serving file at all gets a prior with a warning (a new generation's first
prior, or a fitted file gone missing: restore it rather than keep the prior). Every file is read
and every profile computed before the first file is written; a damaged file is one line
``error: <field>: <what> (<fix>)`` and exit 2, as ``paraplan.validation.fit``.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from hardware_specs.catalog import BUILTIN_DIR, load_gpu, load_serving_efficiency, serving_efficiency_path
from hardware_specs.errors import InputError
from hardware_specs.serving_efficiency import FIT_RANGES, ServingEfficiency
from paraplan.validation.datasets import SERVING_RUNS, validation_file
from paraplan.validation.fit import NEIGHBOUR, ROWLESS_DONOR
from paraplan.validation.serving import evaluate_prepared, prepare, read_rows

PARAMS = tuple(FIT_RANGES)


def _to_unit(value: float, lo: float, hi: float) -> float:
    x = min(max((value - lo) / (hi - lo), 1e-6), 1 - 1e-6)
    return math.log(x / (1 - x))


def _from_unit(z: float, lo: float, hi: float) -> float:
    return lo + (hi - lo) / (1.0 + math.exp(-z))


def _round(x: float) -> float:
    return float(f"{x:.4g}")


#: the first simplex's step along each (logit) coordinate: scipy's default, 5% of the
#: coordinate's value (0.00025 where it is 0), leaves a factor whose prior sits mid-range (logit
#: 0) all but unexplored; one logit unit moves such a fraction by about a quarter of its range
SIMPLEX_STEP = 1.0


def initial_simplex(z0) -> np.ndarray:
    """Nelder-Mead's first simplex: ``z0`` and ``z0`` + ``SIMPLEX_STEP`` along each axis."""
    z0 = np.asarray(z0, dtype=float)
    return np.vstack([z0, z0 + SIMPLEX_STEP * np.eye(len(z0))])


def errors(prep, measured_ttft, measured_tpot, efficiency: dict, rows: np.ndarray, generations=None):
    """(|log ratio| per used row and metric, relative errors of TTFT, of TPOT) over ``rows``."""
    ttft, tpot = evaluate_prepared(prep, efficiency, generations)
    out = []
    rel = []
    for pred, meas in ((ttft, measured_ttft), (tpot, measured_tpot)):
        m = rows & np.isfinite(pred) & (meas > 0) & (pred > 0)
        out.append(np.abs(np.log(pred[m] / meas[m])))
        rel.append((pred[m] - meas[m]) / meas[m])
    return np.concatenate(out), rel[0], rel[1]


def generation_rows(prep, generation: str) -> np.ndarray:
    """Boolean mask of the prepared rows whose deployment runs on ``generation``."""
    rows = np.zeros(prep.n, dtype=bool)
    for g in prep.groups:
        if g.generation == generation:
            rows[g.index] = True
    return rows


#: restarts of the search from the point it found, while one lowers the objective (mean |log
#: ratio|) by more than ``RESTART_GAIN``
MAX_RESTARTS = 4
RESTART_GAIN = 1e-4


def unidentified_factors(prep, generation: str, rows: np.ndarray) -> set[str]:
    """The client-synchronisation factors of the scheduler kinds no row of ``generation`` in
    ``rows`` runs: nothing in the objective depends on them, so a search would only drift them
    (each restart's fresh simplex steps every coordinate). With TensorRT-LLM held out (the only
    engine scheduling whole prompts in mixed steps) the restarts carried ``arrival_sync_whole`` to
    9-24 and the held-out engine's TTFT to 2.4x its measurement; held where the fit starts (the
    prior), the held-out engine gets the neutral synchronisation."""
    every = {ServingEfficiency.arrival_sync_field(mixed, chunked) for mixed in (False, True) for chunked in (False, True)}
    used = {ServingEfficiency.arrival_sync_field(g.context.behaviour.mixed_batches, g.context.behaviour.chunked_prefill)
            for g in prep.groups if g.generation == generation and rows[g.index].any()}
    return every - used


def fit_generation(prep, measured_ttft, measured_tpot, generation: str, rows: np.ndarray,
                   start: ServingEfficiency, maxiter: int = 400) -> tuple[ServingEfficiency, float]:
    """The factors of ``generation`` minimising mean |log ratio| over ``rows``; (profile, loss).
    A factor no row depends on (``unidentified_factors``) stays at ``start``."""
    held = unidentified_factors(prep, generation, rows) if prep is not None else set()
    free = [i for i, p in enumerate(PARAMS) if p not in held]
    z_start = [_to_unit(getattr(start, p), *FIT_RANGES[p]) for p in PARAMS]
    z0 = [z_start[i] for i in free]

    def profile(z_free):
        z = list(z_start)
        for i, zi in zip(free, z_free):
            z[i] = zi
        values = {p: _from_unit(zi, *FIT_RANGES[p]) for p, zi in zip(PARAMS, z)}
        return replace(start, **values)

    def loss(z):
        e, _, _ = errors(prep, measured_ttft, measured_tpot, {generation: profile(z)}, rows, {generation})
        return float(e.mean()) if len(e) else 0.0

    if maxiter <= 0:                 # evaluate the given profile as it is (e.g. the committed one)
        best = start
    else:
        def search(z):
            return minimize(loss, z, method="Nelder-Mead", options={"maxiter": maxiter, "xatol": 1e-3, "fatol": 1e-5,
                                                                    "initial_simplex": initial_simplex(z)})

        res = search(z0)
        # Nelder-Mead's simplex collapses before the optimum in nine dimensions (and near a range
        # end, where the logit map flattens): restart from the point found with a fresh simplex
        # while that gains more than RESTART_GAIN, so a small change of the model or the rows moves
        # the factors a little, not into another stall (session 39: one search from the prior
        # after Kimi-K2.5's int4 group fix ended at objective 0.27333 where the previous factors
        # gave 0.27310 on the same model)
        for _ in range(MAX_RESTARTS):
            again = search(res.x)
            gained = res.fun - again.fun
            if gained > 0:
                res = again
            if gained <= RESTART_GAIN:
                break
        best = profile(res.x)
    rounded = replace(best, **{p: _round(getattr(best, p)) for p in PARAMS})
    e, _, _ = errors(prep, measured_ttft, measured_tpot, {generation: rounded}, rows, {generation})
    return rounded, float(e.mean()) if len(e) else 0.0


def at_bound(profile: ServingEfficiency) -> list[str]:
    """Factors within 1% (of the range) of a bound."""
    hits = []
    for p in PARAMS:
        lo, hi = FIT_RANGES[p]
        v = getattr(profile, p)
        if (v - lo) / (hi - lo) < 0.01 or (hi - v) / (hi - lo) < 0.01:
            hits.append(f"{p}={v:g} (range {lo:g}..{hi:g})")
    return hits


def prior_profile(generation: str) -> ServingEfficiency:
    """The hand-set prior (``default.yaml``) for ``generation``: where every fit starts."""
    from hardware_specs.catalog import serving_efficiency_path
    from hardware_specs.efficiency_files import serving_efficiency_from_dict
    from hardware_specs.yaml_files import read_yaml
    data = read_yaml(serving_efficiency_path("default"), "serving_efficiency")
    return replace(serving_efficiency_from_dict(data), generation=generation, prior=False, fitted_on="")


def fit_all(df: pd.DataFrame, rows: np.ndarray | None = None, starts: dict | None = None,
            maxiter: int = 400, prep=None) -> dict[str, ServingEfficiency]:
    """Fitted profile per generation over ``rows`` (boolean mask; default all), each started
    from ``starts[generation]`` (default: the prior)."""
    prep = prep or prepare(df)
    mt = df["silicon_ttft_ms"].to_numpy(dtype=float)
    mp = df["silicon_tpot_ms"].to_numpy(dtype=float)
    rows = np.ones(len(df), dtype=bool) if rows is None else rows
    fitted = {}
    gens = sorted({g.generation for g in prep.groups if rows[g.index].any()})
    for gen in gens:
        start = (starts or {}).get(gen) or prior_profile(gen)
        start = replace(start, generation=gen, prior=False)
        fitted[gen], _ = fit_generation(prep, mt, mp, gen, rows, start, maxiter)
    return fitted


def _summary(rel_ttft, rel_tpot) -> str:
    return (f"TTFT mean |err| {100 * np.mean(np.abs(rel_ttft)):.1f}% (median {100 * np.median(np.abs(rel_ttft)):.1f}%), "
            f"TPOT mean |err| {100 * np.mean(np.abs(rel_tpot)):.1f}% (median {100 * np.median(np.abs(rel_tpot)):.1f}%)")


def cross_validate(df: pd.DataFrame, column: str, fitted: dict, prep, maxiter: int = 150) -> pd.DataFrame:
    """Leave-one-group-out over ``column``: refit without the group, predict it. One row per
    held-out (row, metric) with its relative error."""
    mt = df["silicon_ttft_ms"].to_numpy(dtype=float)
    mp = df["silicon_tpot_ms"].to_numpy(dtype=float)
    key = df[column].astype(str).to_numpy()
    records = []
    values = sorted(set(key))
    # each refit is minutes: say what runs before the first ends, and count them (the line after
    # each refit was the only output, with no total)
    print(f"  refitting without each of {len(values)} {column} values ({maxiter} Nelder-Mead iterations each)",
          file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    for n, value in enumerate(values, 1):
        held = key == value
        train = ~held
        refit = fit_all(df, train, maxiter=maxiter, prep=prep)
        profiles = {g: refit.get(g, fitted.get(g)) for g in {g.generation for g in prep.groups}}
        ttft, tpot = evaluate_prepared(prep, {k: v for k, v in profiles.items() if v is not None})
        for metric, pred, meas in (("ttft_ms", ttft, mt), ("tpot_ms", tpot, mp)):
            m = held & np.isfinite(pred) & (meas > 0)
            for i in np.flatnonzero(m):
                records.append({"held_out": value, "id": df["id"].iat[i], "metric": metric,
                                "backend": df["backend"].iat[i], "mode": df["mode"].iat[i],
                                "rel_error": (pred[i] - meas[i]) / meas[i]})
        print(f"  held out {column}={value}: {int(held.sum())} rows ({n} of {len(values)}, "
              f"{time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return pd.DataFrame.from_records(records)


def _yaml(profile: ServingEfficiency) -> str:
    if profile.prior:
        lines = ["# Written by `python -m paraplan.validation.serving_fit --write-priors` (and by `--write`):",
                 "# an UNFITTED PRIOR, no serving run of this generation was measured; the factors are its",
                 "# donor's fitted ones (fitted_on names it); see hardware_specs/serving_efficiency.py",
                 f"generation: {profile.generation}"]
    else:
        lines = ["# Written by `python -m paraplan.validation.serving_fit`; see hardware_specs/serving_efficiency.py",
                 f"generation: {profile.generation}"]
    for p in PARAMS:
        lines.append(f"{p}: {getattr(profile, p)!r}")
    lines.append(f"link_bw_fraction: {profile.link_bw_fraction!r}")
    lines.append(f"prior: {'true' if profile.prior else 'false'}")
    if profile.donor:
        lines.append(f"donor: {profile.donor}")
    if not profile.prior:        # a prior fitted no rows: no longest prompt, no errors of its own
        lines.append(f"fitted_isl_max_tokens: {int(profile.fitted_isl_max_tokens)}")
    text = profile.fitted_on.replace('"', "'")
    lines.append(f'fitted_on: "{text}"')
    if profile.validation_error_pct and not profile.prior:
        lines.append("# in-sample mean |error| of the fitted rows per engine and mode, percent (reports print it)")
        lines.append("validation_error_pct:")
        for key, rec in profile.validation_errors().items():
            lines.append(f'  "{key}": {{rows: {int(rec["rows"])}, ttft: {rec["ttft"]:.1f}, tpot: {rec["tpot"]:.1f}}}')
    return "\n".join(lines) + "\n"


#: where a generation the training chain leads to no fitted serving generation (the TPUs and the
#: generic CPU: training fits them on their own rows or not at all, ``NEIGHBOUR`` names none)
#: joins the chain: Hopper, the older of the two fitted serving generations and the nearer in time
#: to all of them. The rule is the chain's own: from here the walk goes on along ``NEIGHBOUR``
#: to the first fitted generation (Hopper, else Blackwell), and where it reaches none the
#: generation has no donor and ``default.yaml`` stands in (its stale written prior is removed).
#: vLLM and SGLang run on any vendor (``gpu_vendors: []``), so serving refuses neither.
FALLBACK_DONOR = "hopper"


def builtin_generations() -> list[str]:
    """The generations of the GPU files shipped in ``hardware_specs/gpus/`` (not a user's
    ``PARAPLAN_HARDWARE_PATH``: the committed priors cover the committed catalog)."""
    return sorted({load_gpu(str(p)).generation for p in (BUILTIN_DIR / "gpus").glob("*.yaml")})


def fitted_profiles() -> dict[str, ServingEfficiency]:
    """The committed fitted serving profiles (files with ``prior: false``) by generation, read from
    the folder of ``serving_efficiency_path``; ``InputError`` (naming the file) where one is
    damaged."""
    folder = serving_efficiency_path("default").parent
    out = {}
    for p in sorted(folder.glob("*.yaml")):
        if p.stem != "default":
            profile = load_serving_efficiency(str(p))
            if not profile.prior:
                out[p.stem] = profile
    return out


def fitted_generations() -> set[str]:
    """The generations whose committed serving file is a fit (``prior: false``)."""
    return set(fitted_profiles())


def _walk(start: str, fitted, chain: list[str]) -> list[str] | None:
    """``chain`` extended from ``start`` along ``ROWLESS_DONOR`` then ``NEIGHBOUR`` to the first
    of ``fitted``; None where the walk ends (or loops) before one."""
    chain = chain + [start] if start not in chain else None
    while chain is not None and chain[-1] not in fitted:
        step = ROWLESS_DONOR.get(chain[-1]) or NEIGHBOUR.get(chain[-1])
        chain = chain + [step] if step is not None and step not in chain else None
    return chain


def donor_chain(generation: str, fitted) -> list[str]:
    """``generation`` and the generations the training fit's chain walks from it
    (``ROWLESS_DONOR``, then ``NEIGHBOUR``) to the first of ``fitted``; where that chain reaches
    none, [generation] and the walk from ``FALLBACK_DONOR`` to the first of ``fitted`` (Hopper,
    else Blackwell); [generation] where nothing is reached."""
    if generation in fitted:
        return [generation]
    step = ROWLESS_DONOR.get(generation) or NEIGHBOUR.get(generation)
    chain = _walk(step, fitted, [generation]) if step is not None else None
    if chain is None:
        chain = _walk(FALLBACK_DONOR, fitted, [generation])
    return chain or [generation]


def serving_prior(generation: str, fitted=None) -> ServingEfficiency | None:
    """The written prior of ``generation`` (no serving row measured it): its donor's fitted
    factors (``donor_chain``), labelled a prior, with no longest prompt and no validation errors
    (no row measured it). ``fitted``: the fitted profiles by generation (default: the committed
    files, ``fitted_profiles``), or a set of generations whose committed files are read. None
    where no fitted generation is reached (``default.yaml`` then stands in)."""
    fitted = fitted_profiles() if fitted is None else fitted
    chain = donor_chain(generation, fitted)
    if len(chain) < 2:
        return None
    donor = chain[-1]
    if (ROWLESS_DONOR.get(generation) or NEIGHBOUR.get(generation)) != chain[1] and len(chain) == 2:
        why = (f"{donor}, the nearest fitted serving generation in time (the training fit's chain, "
               f"paraplan.validation.fit ROWLESS_DONOR / NEIGHBOUR, names no donor for {generation})")
    elif (ROWLESS_DONOR.get(generation) or NEIGHBOUR.get(generation)) != chain[1]:
        why = (f"{donor}, the first fitted serving generation along the training fit's chain from "
               f"{FALLBACK_DONOR} (not fitted), {' -> '.join(chain[1:])} (paraplan.validation.fit "
               f"ROWLESS_DONOR / NEIGHBOUR names no donor for {generation}; serving_fit.FALLBACK_DONOR)")
    elif ROWLESS_DONOR.get(generation) == donor:
        why = f"{donor}, its contemporary (paraplan.validation.fit ROWLESS_DONOR)"
    else:
        why = (f"{donor}, the nearest fitted serving generation along the training fit's chain "
               f"{' -> '.join(chain)} (paraplan.validation.fit ROWLESS_DONOR / NEIGHBOUR)")
    note = (f"unfitted prior: no serving measurement of {generation}; the fitted serving factors of {why}, "
            f"on this generation's own datasheet peaks and bandwidths")
    source = fitted[donor] if isinstance(fitted, dict) else load_serving_efficiency(str(serving_efficiency_path(donor)))
    return replace(source, generation=generation, prior=True, fitted_on=note, donor=donor,
                   fitted_isl_max_tokens=0.0, validation_error_pct=())


def plan_serving_priors(fitted: dict | None = None) -> tuple[dict[Path, str], list[Path], list[str]]:
    """What ``write_serving_priors`` does, computed before anything is written: (the text of each
    prior file to write, the stale prior files to remove, the lines to print). ``fitted``: the
    fitted profiles by generation (default: the committed files, ``fitted_profiles``).

    Every generation of ``builtin_generations`` not in ``fitted`` that a donor reaches gets its
    prior; one no donor reaches has its written prior removed, so that what loads is what the
    line says (``default.yaml``). A generation with no serving file at all gets a prior too (a
    new GPU generation's first), and the line says so: were it a fitted generation whose file
    went missing, its prior would hold another generation's numbers (restore the file, or
    refit with ``--write``)."""
    fitted = fitted_profiles() if fitted is None else dict(fitted)
    writes: dict[Path, str] = {}
    removals: list[Path] = []
    lines: list[str] = []
    for gen in builtin_generations():
        if gen in fitted:
            continue
        path = serving_efficiency_path(gen)
        profile = serving_prior(gen, fitted)
        if profile is None:
            if path.is_file():
                removals.append(path)
                lines.append(f"{gen}: no fitted serving generation to borrow from; default.yaml stands in "
                             f"(removing the stale prior {path})")
            else:
                lines.append(f"{gen}: no fitted serving generation to borrow from; default.yaml stands in")
            continue
        if not path.is_file():
            lines.append(f"warning: {gen}: no serving file at all ({path} is missing, neither fitted nor a written prior): "
                         f"writing a prior from {profile.donor}'s fit; if {gen} was fitted, restore its file "
                         f"or refit (--write) instead")
        lines.append(f"{gen}: {profile.fitted_on}")
        writes[path] = _yaml(profile)
    return writes, removals, lines


def write_serving_priors(fitted: dict | None = None, dry_run: bool = False) -> list[Path]:
    """Write ``serving_prior`` of every generation of ``builtin_generations`` not in ``fitted``
    (default: the committed fitted files) that a donor reaches, and remove the stale written prior
    of one no donor reaches (``plan_serving_priors``); the paths written. Everything is computed
    (every file read) before the first file is written: a damaged file raises ``InputError``
    with nothing written."""
    return _apply(plan_serving_priors(fitted), dry_run)


def _apply(plan, dry_run: bool = False) -> list[Path]:
    """Print ``plan_serving_priors``'s lines, then (unless ``dry_run``) remove and write its files."""
    writes, removals, lines = plan
    for line in lines:
        print(line)
    if dry_run:
        return []
    for path in removals:
        path.unlink()
    for path, text in writes.items():
        path.write_text(text)
        print(f"  wrote {path}")
    return list(writes)


def validation_errors(prep, df: pd.DataFrame, fitted: dict, generation: str) -> dict:
    """Per "engine mode" (``vllm agg``...), the rows of ``generation`` predicted and their mean
    |error| of TTFT and TPOT in percent, rounded as written (``ServingEfficiency.validation_error_pct``)."""
    mt = df["silicon_ttft_ms"].to_numpy(dtype=float)
    mp = df["silicon_tpot_ms"].to_numpy(dtype=float)
    rows = generation_rows(prep, generation)
    key = (df["backend"].astype(str).str.strip().str.lower() + " "
           + df["mode"].astype(str).str.strip().str.lower()).to_numpy()
    out = {}
    for value in sorted(set(key[rows])):
        _, t, p = errors(prep, mt, mp, fitted, rows & (key == value), {generation})
        if len(t) and len(p):
            out[value] = {"rows": int(len(t)), "ttft": round(100 * float(np.mean(np.abs(t))), 1),
                          "tpot": round(100 * float(np.mean(np.abs(p))), 1)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", default=None, help="serving-runs CSV (default: the resolved serving_runs.csv)")
    ap.add_argument("--write", action="store_true",
                    help="write hardware_specs/serving_efficiency/<generation>.yaml, the fitted ones and then the priors")
    ap.add_argument("--write-priors", action="store_true",
                    help="only write the priors of the generations no serving run measured, from the committed "
                         "fitted files (no fit)")
    ap.add_argument("--cv", choices=["model_path", "backend", "both"], default=None,
                    help="also leave-one-group-out cross-validation by model, by backend, or both")
    ap.add_argument("--cv-maxiter", type=int, default=250,
                    help="Nelder-Mead iterations per refit (each starts from the prior)")
    ap.add_argument("--maxiter", type=int, default=600,
                    help="Nelder-Mead iterations of the full fit (0 = take the committed profiles as they are)")
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except InputError as exc:
        # one line, exit 2, nothing written (as paraplan.validation.fit.main): every file is read
        # and every profile computed before the first is written
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args) -> int:
    """``main`` after parsing (``InputError`` on bad input)."""
    if args.write_priors:
        write_serving_priors()
        return 0
    path = args.path or validation_file(SERVING_RUNS)
    df = read_rows(path)
    prep = prepare(df)
    if args.maxiter <= 0:       # take the committed profiles as they are
        fitted = fit_all(df, maxiter=0, prep=prep,
                         starts={g.generation: load_serving_efficiency(g.generation) for g in prep.groups})
    else:
        gens = sorted({g.generation for g in prep.groups})
        print(f"fitting {len(gens)} generations ({', '.join(gens)}; {args.maxiter} Nelder-Mead iterations each, "
              "minutes)", file=sys.stderr, flush=True)
        fitted = fit_all(df, maxiter=args.maxiter, prep=prep)
    mt = df["silicon_ttft_ms"].to_numpy(dtype=float)
    mp = df["silicon_tpot_ms"].to_numpy(dtype=float)
    everything = np.ones(len(df), dtype=bool)
    _, rt, rp = errors(prep, mt, mp, fitted, everything)
    print(f"in-sample over {len(rt)} rows: {_summary(rt, rp)}")
    cv_text = ""
    if args.cv:
        for column in (("model_path", "backend") if args.cv == "both" else (args.cv,)):
            cv = cross_validate(df, column, fitted, prep, maxiter=args.cv_maxiter)
            t = cv[cv.metric == "ttft_ms"].rel_error.to_numpy()
            p = cv[cv.metric == "tpot_ms"].rel_error.to_numpy()
            line = f"leave-one-{column}-out: {_summary(t, p)}"
            print(line)
            for (backend, mode), g in cv.groupby(["backend", "mode"]):
                gt = g[g.metric == "ttft_ms"].rel_error.to_numpy()
                gp = g[g.metric == "tpot_ms"].rel_error.to_numpy()
                print(f"  {backend} {mode}: {len(gt)} rows, {_summary(gt, gp)}")
            cv.to_csv(f"serving_cv_{column}.csv", index=False)
            cv_text += f"; {line}"
    for gen, profile in sorted(fitted.items()):
        rows = generation_rows(prep, gen)
        _, gt, gp = errors(prep, mt, mp, fitted, rows, {gen})
        note = (f"Nelder-Mead on mean |log(pred/measured)| of TTFT and TPOT over {len(gt)} rows of "
                f"{Path(path).name}; in-sample {_summary(gt, gp)}{cv_text}")
        isl = pd.to_numeric(df["isl"], errors="coerce").to_numpy(dtype=float)[rows]
        fitted[gen] = replace(profile, fitted_on=note,
                              fitted_isl_max_tokens=float(np.nanmax(isl)) if isl.size else 0.0)
        fitted[gen] = replace(fitted[gen], validation_error_pct=validation_errors(prep, df, fitted, gen))
        bounds = at_bound(profile)
        print(f"{gen}: " + ", ".join(f"{p}={getattr(profile, p):g}" for p in PARAMS)
              + (f"  AT BOUND: {bounds}" if bounds else ""))
    if args.write:
        # the priors borrow the profiles about to be written; all are computed (every committed
        # file read) before the first is written
        texts = {serving_efficiency_path(gen): _yaml(profile) for gen, profile in sorted(fitted.items())}
        priors = plan_serving_priors({**fitted_profiles(), **fitted})
        for path, text in texts.items():
            path.write_text(text)
            print(f"  wrote {path}")
        _apply(priors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
