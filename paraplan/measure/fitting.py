"""Fits that turn microbenchmark timings into catalog numbers (pure numpy, no torch).

Two models, the same ones the cost models evaluate, so that calibration and prediction agree:

* GEMM: ``t = overhead + 2*m*n*k / (peak * s(m) * s(n) * s(k))`` with the shape-saturation
  factor ``s(x) = x / (x + half_dim)`` (``EfficiencyModel.gemm_half_dim``).
* Collectives: the alpha-beta model ``t = alpha + bytes / bw`` (Hockney 1994), from which the
  ring all-reduce bus bandwidth is ``2 (n-1)/n * bytes / (t - alpha)`` (NCCL's busBW convention).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def saturation(dim, half_dim):
    """``x / (x + half_dim)``: fraction of the plateau a GEMM dimension ``x`` allows."""
    dim = np.asarray(dim, dtype=float)
    return dim / (dim + half_dim)


@dataclass(frozen=True)
class GemmFit:
    """Fitted GEMM throughput model.

    Attributes:
        peak_flops_per_s: plateau a GEMM of infinite size would reach, FLOP/s.
        half_dim: shape-saturation constant (elements).
        best_flops_per_s: best throughput actually measured, FLOP/s.
        rms_rel_error: root-mean-square relative error of the fitted times.
    """

    peak_flops_per_s: float
    half_dim: float
    best_flops_per_s: float
    rms_rel_error: float

    def predict_time_s(self, m, n, k, overhead_s: float = 0.0):
        sat = saturation(m, self.half_dim) * saturation(n, self.half_dim) * saturation(k, self.half_dim)
        return overhead_s + 2.0 * np.asarray(m, float) * n * k / (self.peak_flops_per_s * sat)


def fit_gemm(shapes: list[tuple[int, int, int]], times_s: list[float], overhead_s: float = 0.0) -> GemmFit:
    """Least-squares fit (relative error) of the GEMM model to measured ``(m, n, k) -> seconds``.

    ``half_dim`` is searched on a log grid; for each candidate the peak has a closed form in
    log space (the geometric mean of ``flops / (sat (t - overhead))``, from
    ``t = overhead + flops / (peak sat)``). Until 2026-12-04 the closed form multiplied by
    ``sat`` instead of dividing, which left the half-dimension search meaningless: on one H200
    the plateau read 590 and 759 TFLOP/s from nearly the same timings; corrected, 721-741 in
    three calibrations, beside 712-739 measured on its largest GEMMs.
    """
    mnk = np.asarray(shapes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    flops = 2.0 * mnk.prod(axis=1)
    compute_t = np.maximum(t - overhead_s, 0.05 * t)
    best = None
    for half_dim in np.concatenate([[0.0], np.geomspace(1.0, 4096.0, 200)]):
        sat = np.prod(mnk / (mnk + half_dim), axis=1)
        # t = overhead + flops / (peak sat)  =>  peak = flops / (sat (t - overhead))
        log_peak = float(np.mean(np.log(flops / (sat * compute_t))))
        pred = overhead_s + flops / (np.exp(log_peak) * sat)
        err = float(np.sqrt(np.mean(((pred - t) / t) ** 2)))
        if best is None or err < best[0]:
            best = (err, float(np.exp(log_peak)), float(half_dim))
    err, peak, half_dim = best
    return GemmFit(peak_flops_per_s=peak, half_dim=half_dim,
                   best_flops_per_s=float(np.max(flops / t)), rms_rel_error=err)


@dataclass(frozen=True)
class AlphaBetaFit:
    """``t = alpha_s + bytes / bw_bytes_per_s`` for one operation (e.g. one all-reduce).

    Attributes:
        alpha_s: fixed cost per operation, seconds.
        bw_bytes_per_s: asymptotic algorithm bandwidth (message bytes per second).
        rms_rel_error: root-mean-square relative error of the fitted times.
    """

    alpha_s: float
    bw_bytes_per_s: float
    rms_rel_error: float

    def predict_time_s(self, nbytes):
        return self.alpha_s + np.asarray(nbytes, float) / self.bw_bytes_per_s


def fit_alpha_beta(nbytes: list[float], times_s: list[float]) -> AlphaBetaFit:
    """Fit ``t = alpha + bytes/bw`` minimising relative error (small and large messages count alike).

    Weighted least squares with weights ``1/t`` on the linear model; alpha is clamped at 0.
    """
    x = np.asarray(nbytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    w = 1.0 / t
    a = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (alpha, inv_bw), *_ = np.linalg.lstsq(a, t * w, rcond=None)
    if inv_bw <= 0:       # all points latency-bound: fall back to the largest message
        inv_bw = t.max() / x.max()
    if alpha < 0:
        alpha = 0.0
        inv_bw = float(np.sum(w * w * x * t) / np.sum(w * w * x * x))
    pred = alpha + x * inv_bw
    err = float(np.sqrt(np.mean(((pred - t) / t) ** 2)))
    return AlphaBetaFit(alpha_s=float(alpha), bw_bytes_per_s=float(1.0 / inv_bw), rms_rel_error=err)


def ring_allreduce_bus_bw(algo_bw_bytes_per_s: float, n: int) -> float:
    """Bus bandwidth of a ring all-reduce: each rank sends ``2 (n-1)/n`` of the message."""
    return algo_bw_bytes_per_s * 2.0 * (n - 1) / n if n > 1 else algo_bw_bytes_per_s
