"""The coordinate search that fits a GPU generation's efficiency factors (``fit``, ``joint_fit``).

Factors, their physical bounds and documented priors; the objective (weighted mean |predicted /
measured - 1|, each source weighing the square root of its row count); the search's steps (the
16-bit plateau and shape knee scanned together, one coordinate at a time over a grid that
narrows each sweep, unpinned host and kernel factors back to their priors). ``joint_fit`` runs
them, for one generation or for all at once with the host's factors shared, to a fixed point;
``fit`` writes the result and cross-validates.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from hardware_specs.efficiency_model import EfficiencyModel
from paraplan.validation.predict import Prepared, predict


#: fitted factors with their physical bounds. GEMM plateaus: cuBLAS reaches 0.6-0.9 of the dense
#: peak on large 16-bit GEMMs; a low-precision plateau is not a higher fraction of its (2x) peak
#: than the 16-bit one (its bound is the 16-bit value, ``factor_bounds``). Attention: FlashAttention-2
#: reports 0.5-0.73 of A100's peak forward, FA3 ~0.75 on H100 (kernels on short sequences less).
#: HBM: memory-bound kernels reach 0.6-0.93 of the datasheet bandwidth (STREAM-like copies ~0.9).
#: Kernel overhead: launch and tail time of one kernel, 1-40 us.
FIT_BOUNDS = {
    "gemm16": (0.45, 0.95),
    "gemm8": (0.3, None),            # upper bound: the fitted 16-bit plateau
    "gemm_mx8": (0.3, None),
    "gemm4": (0.3, None),
    "gemm_half_dim": (8.0, 2048.0),
    "attention_peak_fraction": (0.15, 0.9),
    "hbm_fraction": (0.4, 0.95),
    "kernel_overhead_s": (1e-6, 4e-5),
    "cpu_issue_s": (1e-6, 1e-4),
}
#: collective bus-bandwidth fractions (nccl-tests-like measurements reach ~0.75-0.85 of link
#: bandwidth): held at these priors, not fitted (fitting them lets them absorb compute errors)
PRIORS = {"scaleup_fraction": 0.8, "scaleout_fraction": 0.85}
#: a generation with fewer rows than this fits only its 16-bit GEMM plateau (the one factor
#: every row exercises); the rest stay at the prior, so a handful of rows cannot be overfitted
MIN_ROWS_FOR_FULL_FIT = 20
#: a generation with fewer rows than this is not fitted at all: it stays an unfitted prior (its
#: ``NEIGHBOUR``'s fitted factors on its own datasheet numbers), labelled as such in every output
MIN_ROWS_TO_FIT = 8
#: factors whose effect a generation's rows may not exercise (no host-bound row, no kernel-bound
#: row): when their documented prior (``UNPINNED_PRIORS``) does as well as the fitted value within
#: ``UNPINNED_TOLERANCE`` of the objective, the factor takes the prior and is not listed as fitted;
#: otherwise it is fitted, and reported on a bound like any other factor
PRIOR_ONLY_IF_UNPINNED = ("cpu_issue_s", "kernel_overhead_s")
UNPINNED_TOLERANCE = 1e-3
#: the documented values those factors take when unpinned; never the committed fit (which would
#: carry an earlier fit's value, bound included, forward as a "prior", and leak a held-out
#: source's value into its cross-validation). Kernel overhead: back-to-back short kernels cost a
#: few microseconds each on the CUDA driver's launch path (NVIDIA developer blog "Getting Started
#: with CUDA Graphs", 2019: ~3-4 us per kernel issued in a stream) plus the last wave's tail;
#: ``EfficiencyModel``'s default, 5 us. Host issue time: zero, i.e. the host keeps ahead of the
#: GPU (the case for the large models and CUDA-graphed stacks that most rows are).
UNPINNED_PRIORS = {"kernel_overhead_s": 5e-6, "cpu_issue_s": 0.0}
#: candidate values per factor for the coordinate search (log-spaced where the scale is)
GRID_POINTS = 9
DTYPE_FACTORS = (("gemm8", "fp8"), ("gemm_mx8", "mxfp8"), ("gemm4", "nvfp4"))
#: factors whose scale is searched (and whose middle is taken) in logarithm
LOG_SCALED = ("gemm_half_dim", "kernel_overhead_s", "cpu_issue_s")


def to_model(base: EfficiencyModel, x: dict) -> EfficiencyModel:
    fr = dict(base.gemm_peak_fraction)
    fr["bf16"] = fr["fp16"] = x["gemm16"]
    fr["fp8"], fr["mxfp8"], fr["nvfp4"] = x["gemm8"], x["gemm_mx8"], x["gemm4"]
    kw = {k: v for k, v in x.items() if k not in ("gemm16", "gemm8", "gemm_mx8", "gemm4")}
    kw.update(PRIORS)
    return replace(base, gemm_peak_fraction=fr, **kw)


def from_model(m: EfficiencyModel) -> dict:
    x = {"gemm16": m.gemm_fraction("bf16"), "gemm8": m.gemm_fraction("fp8"),
         "gemm_mx8": m.gemm_fraction("mxfp8"), "gemm4": m.gemm_fraction("nvfp4")}
    for k in FIT_BOUNDS:
        if k not in x:
            x[k] = float(getattr(m, k))
    return x


def factor_bounds(name: str, x: dict) -> tuple[float, float]:
    lo, hi = FIT_BOUNDS[name]
    return lo, (x["gemm16"] if hi is None else hi)


def factor_grid(name: str, x: dict) -> np.ndarray:
    lo, hi = factor_bounds(name, x)
    if name in LOG_SCALED:
        return np.geomspace(lo, hi, GRID_POINTS)
    return np.linspace(lo, hi, GRID_POINTS)


def source_weights(sources) -> np.ndarray:
    """Per row 1/sqrt(rows of its source): each source weighs sqrt(its row count) in all."""
    sources = np.asarray(sources)
    _, inverse, counts = np.unique(sources, return_inverse=True, return_counts=True)
    return 1.0 / np.sqrt(counts[inverse].astype(float))


def objective(prepared: Prepared, generation: str, eff: EfficiencyModel, weights=None) -> float:
    """Weighted mean |predicted / measured - 1| of ``prepared`` (rows of one generation)."""
    pred = predict(prepared, {generation: eff})
    err = np.abs(pred / prepared.measured - 1.0)
    w = source_weights(prepared.sources) if weights is None else weights
    return float(np.sum(err * w) / np.sum(w))


def fitted_names(prepared: Prepared, hold=()) -> list[str]:
    """The factors ``prepared``'s rows can pin down (less those in ``hold``, held at their value)."""
    if len(prepared) < MIN_ROWS_FOR_FULL_FIT:
        return ["gemm16"]
    names = [n for n in FIT_BOUNDS if n not in hold]
    if all(i.cluster.gpu.sm_count for i in prepared.inputs) and "gemm_half_dim" in names:
        names.remove("gemm_half_dim")       # GPUs with SMs: shapes follow tile and wave quantization
    dtypes = {i.config.dtype for i in prepared.inputs}
    for name, dtype in DTYPE_FACTORS:
        if dtype not in dtypes and name in names:
            names.remove(name)
    return names


def clipped_start(base: EfficiencyModel, names) -> dict:
    """``base``'s factors, each of ``names`` clipped into its range."""
    x = from_model(base)
    for n in names:
        lo, hi = factor_bounds(n, x)
        x[n] = float(np.clip(x[n], lo, hi))
    return x


def under_16bit_plateau(trial: dict) -> dict:
    """``trial`` with the low-precision plateaus kept under the 16-bit one (their upper bound)."""
    for name, _ in DTYPE_FACTORS:
        trial[name] = min(trial[name], trial["gemm16"])
    return trial


def sweep_candidates(name: str, x: dict, sweep: int) -> np.ndarray:
    """Values of factor ``name`` a coordinate sweep tries: the whole grid on the first sweep,
    then five points around the current value at a step halved each sweep."""
    lo, hi = factor_bounds(name, x)
    if sweep == 0:
        return factor_grid(name, x)
    if name in LOG_SCALED:
        step = (hi / lo) ** (1.0 / (GRID_POINTS - 1) / 2 ** sweep)
        return np.clip(x[name] * step ** np.arange(-2, 3), lo, hi)
    span = (hi - lo) / (GRID_POINTS - 1) / (2 ** sweep)
    return np.clip(np.linspace(x[name] - span, x[name] + span, 5), lo, hi)


def _prefetch(score, trials) -> None:
    """Let a scorer that can (``trial_scores.GenerationScore``) score the trials side by side
    first; the search below then reads them in its own order."""
    if hasattr(score, "prefetch"):
        score.prefetch(trials)


def scan_plateau_and_knee(x: dict, best: float, score) -> tuple[dict, float]:
    """The 16-bit plateau and the shape knee scanned jointly (they trade against each other)."""
    _prefetch(score, [under_16bit_plateau(dict(x, gemm16=float(g), gemm_half_dim=float(hd)))
                      for g in factor_grid("gemm16", x) for hd in factor_grid("gemm_half_dim", x)])
    for g in factor_grid("gemm16", x):
        for hd in factor_grid("gemm_half_dim", x):
            trial = under_16bit_plateau(dict(x, gemm16=float(g), gemm_half_dim=float(hd)))
            s = score(trial)
            if s < best - 1e-12:
                best, x = s, trial
    return x, best


def coordinate_step(x: dict, best: float, name: str, sweep: int, score) -> tuple[dict, float]:
    """``x`` with factor ``name`` moved to its best candidate of this sweep (others held)."""
    _prefetch(score, [under_16bit_plateau(dict(x, **{name: float(v)})) for v in sweep_candidates(name, x, sweep)])
    for value in sweep_candidates(name, x, sweep):
        trial = under_16bit_plateau(dict(x, **{name: float(value)}))
        s = score(trial)
        if s < best - 1e-12:
            best, x = s, trial
    return x, best


#: factor pairs that trade against each other along a diagonal valley a one-at-a-time sweep
#: cannot follow: the 16-bit plateau and the HBM fraction price the compute-bound and the
#: memory-bound share of the same rows' time, so lowering one and raising the other leaves most
#: rows where they were (``pair_step``)
TRADING_PAIRS = (("gemm16", "hbm_fraction"),)


def pair_step(x: dict, best: float, pair: tuple[str, str], sweep: int, score) -> tuple[dict, float]:
    """``x`` with the two factors of ``pair`` moved together to the best of this sweep's
    candidates of each (``sweep_candidates``, 5 x 5 around the current values; others held)."""
    a, b = pair
    trials = [under_16bit_plateau(dict(x, **{a: float(va), b: float(vb)}))
              for va in sweep_candidates(a, x, max(sweep, 1)) for vb in sweep_candidates(b, x, max(sweep, 1))]
    _prefetch(score, trials)
    for trial in trials:
        s = score(trial)
        if s < best - 1e-12:
            best, x = s, trial
    return x, best


def priors_where_unpinned(x: dict, best: float, names, score) -> tuple[dict, float, list[str]]:
    """A factor the rows cannot pin down (the objective no worse, within the tolerance, at its
    documented prior) is not fitted: it takes the prior. Returns (x, objective, fitted names)."""
    kept = list(names)
    for n in names:
        if n in PRIOR_ONLY_IF_UNPINNED:
            trial = dict(x, **{n: UNPINNED_PRIORS[n]})
            at_prior = score(trial)
            if at_prior <= best + UNPINNED_TOLERANCE:
                x, best = trial, at_prior
                kept.remove(n)
    return x, best, kept


#: refits from the previous result until the factors stop moving (``fit_to_fixed_point``)
MAX_FIT_ROUNDS = 8


def rounded_as_written(model: EfficiencyModel) -> EfficiencyModel:
    """The model with its factors rounded as they are written to YAML (so the recorded
    objective is the committed model's)."""
    return replace(model,
                   gemm_peak_fraction={k: round(float(v), 4) for k, v in model.gemm_peak_fraction.items()},
                   gemm_half_dim=round(float(model.gemm_half_dim), 2),
                   attention_peak_fraction=round(float(model.attention_peak_fraction), 4),
                   hbm_fraction=round(float(model.hbm_fraction), 4),
                   kernel_overhead_s=float(f"{model.kernel_overhead_s:.3g}"),
                   cpu_issue_s=float(f"{model.cpu_issue_s:.3g}"))


def at_bound(model: EfficiencyModel, names) -> list[str]:
    """Fitted factors that sit on a bound of their range (a sign of missing physics)."""
    x = from_model(model)
    out = []
    for n in names:
        lo, hi = factor_bounds(n, x)
        if math.isclose(x[n], lo, rel_tol=1e-3) or math.isclose(x[n], hi, rel_tol=1e-3):
            out.append(n)
    return out
