"""Event-level pipeline schedules: generate, validate, simulate, trace and draw.

    schedule = make_schedule("zb-h1", p=8, m=32)
    result = simulate_schedule(schedule, f_time_s=1e-3, b_time_s=1e-3, w_time_s=1e-3)
    write_chrome_trace("zb-h1.json", result, schedule)

``draw_gantt`` lives in :mod:`simulator.pipeline.gantt` (imports matplotlib).
"""
from simulator.pipeline.closed_form import bubble_fraction_closed_form
from simulator.pipeline.event_sim import ScheduleResult, simulate_schedule
from simulator.pipeline.schedules import (Dependency, Op, OpRef, PipelineSchedule, ScheduleKind, make_schedule,
                                          validate_schedule)
from simulator.pipeline.trace import to_chrome_trace, write_chrome_trace

__all__ = ["Dependency", "Op", "OpRef", "PipelineSchedule", "ScheduleKind", "ScheduleResult",
           "bubble_fraction_closed_form", "make_schedule", "simulate_schedule", "to_chrome_trace",
           "validate_schedule", "write_chrome_trace"]
