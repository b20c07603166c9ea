"""Closed-form pipeline bubbles, for even stages and free point-to-point communication.

The event simulator (:func:`simulator.pipeline.event_sim.simulate_schedule`) reproduces each
formula exactly under those conditions (tests/test_pipeline_schedules.py); use it for uneven
stages, communication time, or the schedules listed without a formula.
"""
from __future__ import annotations

from hardware_specs.errors import InputError
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

    ``t_f``, ``t_b``, ``t_w`` (any common unit) matter only for the zero-bubble schedules, whose
    formulas hold for the generated orders when ``t_w <= min(t_f, t_b)`` (a W then fits the slots
    it is meant to fill); outside that range, and for the other schedules (which raise
    ``InputError``), simulate.
    """
    kind = _kind(schedule_kind)
    p, m, v = _positive_int("p", p), _positive_int("m", m), _positive_int("v", v)
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
