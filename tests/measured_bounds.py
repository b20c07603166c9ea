"""The bounds the measured validation holds the simulator to: one definition for the live test
(``test_measure.py``, fresh measurements, needs torch) and the committed-baseline test
(``test_measured_baseline.py``, no torch).

Per-row bounds alone passed a broken predictor: on ``tests/data/measured_baseline.csv`` a
constant 0.12-0.16 s for every layout stayed within ``ERROR_BOUND`` and ``MEAN_ERROR_BOUND`` (worst
row 18-30%, mean 12-14%), and a simulator that ignored recomputation put tp2-recompute at -25%.
The rows of this VM all take 0.12-0.19 s, so a row's size says little; what a layout changes
relative to another one does. ``RATIO_PAIRS`` holds pairs of layouts that differ by one physical
change, and each pair's predicted ratio must match the measured ratio within the scatter the
baseline recorded for the two rows (``ratio_tolerance``), and in sign where that scatter cannot
explain the measured difference.
"""
from __future__ import annotations

import math
from typing import Mapping

#: |predicted - measured| / measured allowed per configuration, and on average over the set.
#: On this 2-core VM a round of calibrate-then-measure errs 2-25% per row and 7-13% on average
#: (``tests/data/measured_baseline.csv`` keeps the median of three such rounds); the host
#: drifts 10-20% over minutes.
ERROR_BOUND = 0.35
MEAN_ERROR_BOUND = 0.20
#: allowed change of a configuration's relative error against the committed baseline (single
#: rounds on the shared 2-core VM spread by up to ~0.3 in relative error: ``rel_error_spread``)
DRIFT_MARGIN = 0.3
#: rows whose errors' common shift from the baseline ``row_drift`` removes: with fewer, a row's
#: drift is its own shift (a median of one or two rows would hide the row's own move)
COMMON_SHIFT_MIN_ROWS = 3
#: the layouts of ``validate measured``  (``compare.DEFAULT_CONFIGS``) the live test measures:
#: each parallel dimension once, data parallelism through ZeRO-1, and tp2 beside tp2-recompute so
#: that recomputation is judged as a ratio (``RATIO_PAIRS``), which a simulator blind to it fails
MEASURED_NAMES = ("dp2-zero1", "tp2", "tp2-recompute", "pp2-mb1x4")

#: (layout, reference): each layout differs from its reference by one physical change the
#: simulator must reproduce: recomputation (a second forward), tp=2 (half the compute a rank plus
#: its all-reduces), pp=2 (half the layers a rank plus the 1F1B bubble at 4 micro-batches of 1).
#: On the committed baseline the measured ratios are 1.207, 1.364, 0.815 and 0.780.
RATIO_PAIRS = (("single-recompute", "single"), ("tp2-recompute", "tp2"), ("tp2", "single"), ("pp2-mb1x4", "single"))
#: pairs the simulator does not reproduce within the baseline's scatter, said out loud
#: (``test_measured_baseline.test_known_ratio_misses``): dp=2 against one rank. The single
#: layout runs 2 copies of the job (one a calibrated rank), so dp2's ranks do half its compute
#: each and add the gradient all-reduce; measured dp2 / single = 1.012 (the all-reduce of the
#: 14.7 MB fp32 gradient over gloo costs about what the halved compute saves), predicted 0.724:
#: the ratio is off by -28.5% against a tolerance of 20.4%.
KNOWN_RATIO_MISSES = (("dp2", "single"),)
#: the layouts ``tests/data/measured_baseline.csv`` holds and ``test_measure.refresh_baseline``
#: measures: the live test's ``MEASURED_NAMES``, every layout of ``RATIO_PAIRS`` and
#: ``KNOWN_RATIO_MISSES``, and dp2 with two micro-batches (dp2-mb1x2)
BASELINE_NAMES = ("single", "single-recompute", "dp2", "dp2-mb1x2", "dp2-zero1", "tp2", "tp2-recompute", "pp2-mb1x4")


def ratio_error(errors: Mapping[str, float], layout: str, reference: str) -> float:
    """(predicted layout / predicted reference) / (measured layout / measured reference) - 1,
    from the two rows' relative errors e = predicted / measured - 1: (1 + e_layout) / (1 +
    e_reference) - 1. A constant predictor's is measured reference / measured layout - 1."""
    return (1.0 + errors[layout]) / (1.0 + errors[reference]) - 1.0


def ratio_tolerance(spreads: Mapping[str, float], layout: str, reference: str) -> float:
    """How far a pair's ratio error may be from 0: half of each row's ``rel_error_spread`` (its
    max - min relative error over the baseline's rounds of calibrate-then-measure), summed. A
    row's median sits within its rounds' range, so half the range bounds how far one round moves
    it in the typical case, and the ratio of two rows compounds both. On the committed baseline:
    single-recompute/single 0.215, tp2-recompute/tp2 0.181, tp2/single 0.224, pp2-mb1x4/single
    0.206, dp2/single 0.204."""
    return 0.5 * (spreads[layout] + spreads[reference])


def ratio_failures(errors: Mapping[str, float], measured: Mapping[str, float], spreads: Mapping[str, float],
                   pairs=RATIO_PAIRS) -> list[str]:
    """One line for each of ``pairs`` whose rows are all in ``errors`` (relative errors),
    ``measured`` (measured step seconds) and ``spreads`` and whose predicted ratio misses the
    measured one: its ratio error beyond ``ratio_tolerance``, or, where the measured ratio's
    log is beyond that tolerance (a difference the scatter cannot explain), a predicted ratio on
    the other side of 1 or at 1. Pairs with a row missing are not judged."""
    out = []
    for layout, reference in pairs:
        if not all(n in m for n in (layout, reference) for m in (errors, measured, spreads)):
            continue
        err, tol = ratio_error(errors, layout, reference), ratio_tolerance(spreads, layout, reference)
        measured_log = math.log(measured[layout] / measured[reference])
        predicted_log = measured_log + math.log1p(err)
        wrong_sign = abs(measured_log) > tol and not measured_log * predicted_log > 0
        if abs(err) > tol or wrong_sign:
            out.append(f"{layout}/{reference}: measured ratio {math.exp(measured_log):.3f}, predicted "
                       f"{math.exp(predicted_log):.3f} ({err:+.1%}, tolerance {tol:.1%})")
    return out


def row_drift(errors, reference):
    """Each row's drift from the committed baseline: how far its relative error moved against
    its baseline reference (``reference``, by the same index as ``errors``), less the move the
    rows share, their median, where ``COMMON_SHIFT_MIN_ROWS`` or more rows have both.

    A calibration reads the machine's speed once, and this VM's speed wanders 10-20% over minutes
    (``ERROR_BOUND``'s comment), so one calibration moves every row's error the same way: the
    fresh clone's run of 2026-12-06 predicted every row high and put pp2-mb1x4 0.34 from its
    baseline (+27% against -7%) with no model change (``test_measured_baseline`` re-predicts the
    baseline exactly). The drift check is for a row that moved on its own, a cost-model change to
    one layout; a move every row shares is the calibration's and is judged by the per-row and
    mean bounds, which catch the wrong cost models ``test_measured_baseline`` lists."""
    shift = errors - reference
    have = shift.notna().sum()
    common = shift.median() if have >= COMMON_SHIFT_MIN_ROWS else 0.0
    return (shift - common).abs()
