"""Closed-form pipeline bubbles, for even stages and free point-to-point communication.

The event simulator (:func:`simulator.pipeline.event_sim.simulate_schedule`) reproduces each
formula exactly under those conditions (tests/test_pipeline_schedules.py); use it for uneven
stages, communication time, or the schedules listed without a formula.
"""
from __future__ import annotations

import math
from numbers import Real

from hardware_specs.errors import InputError, shown
from simulator.pipeline.schedules import ScheduleKind, _kind, _positive_int


def bubble_fraction_closed_form(schedule_kind, p: int, m: int, v: int = 1, t_f: float = 1.0,
                                t_b: float = 1.0, t_w: float = 1.0) -> float:
    """Idle share of ``p * makespan`` for one flush of the schedule (dimensionless).

    * GPipe and 1F1B: ``(p - 1) / (m + p - 1)``. The bubble lasts ``(p - 1)(t_f + t_b)``
      against ``m (t_f + t_b)`` of work (Huang et al. 2019; Narayanan et al. 2021, eq. 1,
      which states it relative to the ideal time as ``(p - 1) / m``).
    * Interleaved 1F1B with v chunks: the bubble shrinks by v to ``(p - 1)(t_f + t_b) / v``
      (Narayanan et al. 2021, section 2.2.2), so ``(p - 1) / (v m + p - 1)``; needs ``m % p == 0``.
    * ZB-H1: bubble ``(p - 1)(t_f + t_b - t_w)`` against ``m (t_f + t_b + t_w)`` (Qi et al.
      2023, section 2.1; derived there for ``t_f = t_b = t_w``, where it is a third of 1F1B's),
      valid for ``m >= p``.
    * ZB-H2: ``(p - 1) max(0, t_f + t_b - 2 t_w)`` (Qi et al. 2023, section 2.2), i.e. zero for
      equal passes. This counts the steady-state ("parallelogram") bubble, compare it with
      ``ScheduleResult.pipelined_bubble_fraction``; needs ``m >= 2p - 1``.

    ``t_f``, ``t_b``, ``t_w`` (any common unit; finite, >= 0, not all zero) matter only for the
    zero-bubble schedules, whose formulas hold for the generated orders when
    ``t_w <= min(t_f, t_b)`` (a W then fits the slots it is meant to fill) and m is in the range
    above. Outside it (where the event simulation's bubble differs: ZB-H1 p 4, m 8, times
    (1, 1, 1.5) idles 0.097 against the formula's 0.051; ZB-H2 p 2, m 2 idles 0.143 against 0),
    and for the other schedules, ``InputError``: simulate.
    """
    kind = _kind(schedule_kind)
    p, m, v = _positive_int("p", p), _positive_int("m", m), _positive_int("v", v)
    t_f, t_b, t_w = _time("t_f", t_f), _time("t_b", t_b), _time("t_w", t_w)
    if t_f + t_b + t_w == 0.0:
        raise InputError("t_f", "t_f, t_b and t_w are all 0: there is no work to idle against",
                         "give the passes' times, e.g. 1.0 each")
    simulate = "or simulate_schedule(make_schedule(...), ...)"
    if kind in (ScheduleKind.ZB_H1, ScheduleKind.ZB_H2):
        if t_w > min(t_f, t_b):
            raise InputError("t_w", f"{kind.value}'s closed form holds for t_w <= min(t_f, t_b) = {min(t_f, t_b):g}, "
                                    f"got {t_w:g}", f"use a shorter t_w {simulate}")
        least = p if kind == ScheduleKind.ZB_H1 else 2 * p - 1
        if m < least:
            raise InputError("m", f"{kind.value}'s closed form needs m >= {'p' if least == p else '2p - 1'} = {least} "
                                  f"micro-batches, got {m}", f"use m >= {least} {simulate}")
    if kind in (ScheduleKind.GPIPE, ScheduleKind.ONE_F_ONE_B):
        return (p - 1) / (m + p - 1)
    if kind == ScheduleKind.INTERLEAVED:
        if m % p:
            raise InputError("m", f"interleaved 1F1B needs m a multiple of p={p}, got {m}")
        return (p - 1) / (v * m + p - 1)
    if kind in (ScheduleKind.ZB_H1, ScheduleKind.ZB_H2):
        work = m * (t_f + t_b + t_w)
        bubble = (p - 1) * (t_f + t_b - t_w if kind == ScheduleKind.ZB_H1 else max(0.0, t_f + t_b - 2 * t_w))
        return bubble / (work + bubble)
    raise InputError("schedule_kind", f"no closed form for {kind.value}",
                     "use simulate_schedule(make_schedule(...), ...)")


def _time(field: str, value) -> float:
    """A pass time: a finite real number >= 0 (an ``InputError`` naming ``field`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value < 0:
        raise InputError(field, f"must be a finite number >= 0, got {shown(value)}", "give the pass's time, e.g. 1.0")
    return float(value)
