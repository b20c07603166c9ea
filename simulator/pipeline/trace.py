"""Chrome / Perfetto trace of a simulated pipeline schedule.

Format: the Trace Event Format (``{"traceEvents": [...]}``), opened by chrome://tracing and
https://ui.perfetto.dev. One process per stage; on it, thread 0 holds the compute ops as
complete events (``ph: "X"``) (and the result's prologue, e.g. the weight casts before the flush,
category ``"prologue"``), threads 1 and 2 the point-to-point sends towards the next and
the previous stage, and counter tracks (``ph: "C"``) the in-flight activation sets (and bytes,
when simulated with ``activation_bytes``). Times are microseconds, as the format requires.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from hardware_specs.errors import InputError
from simulator.pipeline.event_sim import ScheduleResult
from simulator.pipeline.schedules import KIND_NAMES, PipelineSchedule

COMPUTE_TID, SEND_NEXT_TID, SEND_PREV_TID = 0, 1, 2
# Chrome's reserved colour names (ignored by Perfetto, which colours by name).
_CNAME = {"F": "thread_state_running", "B": "rail_response", "W": "rail_load", "BW": "rail_animation",
          "prologue": "generic_work"}
_US = 1e6


def _meta(kind: str, pid: int, tid: int | None, **args) -> dict:
    """A metadata event: ``process_name``/``thread_name`` take ``name``, ``*_sort_index`` ``sort_index``."""
    event = {"ph": "M", "name": kind, "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def to_chrome_trace(result: ScheduleResult, schedule: PipelineSchedule,
                    names: Sequence[str] | None = None, other: Mapping[str, Any] | None = None) -> dict:
    """Build the trace dict for ``result`` (simulated from ``schedule``).

    Args:
        names: optional process name per stage (default ``"stage i"``).
        other: more ``otherData`` entries (what the times rest on: ``efficiency_fitted``).

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``.
    """
    s = schedule
    names = list(names) if names is not None else [f"stage {i}" for i in range(s.p)]
    if len(names) != s.p:
        raise InputError("names", f"{len(names)} names for {s.p} stages", "give one name per stage")
    events: list[dict] = []
    for i in range(s.p):
        events += [_meta("process_name", i, None, name=names[i]), _meta("process_sort_index", i, None, sort_index=i),
                   _meta("thread_name", i, COMPUTE_TID, name="compute"),
                   _meta("thread_name", i, SEND_NEXT_TID, name="p2p send to next stage"),
                   _meta("thread_name", i, SEND_PREV_TID, name="p2p send to previous stage")]
        events += [_meta("thread_sort_index", i, tid, sort_index=tid) for tid in (COMPUTE_TID, SEND_NEXT_TID, SEND_PREV_TID)]

    stage = s.op_stage.tolist()
    kind, mb, chunk = s.op_kind.tolist(), s.op_mb.tolist(), s.op_chunk.tolist()
    position = s.op_position.tolist()
    start, end = result.start_s.tolist(), result.end_s.tolist()
    for j in range(s.n_ops):
        k = KIND_NAMES[kind[j]]
        events.append({"name": f"{k}{mb[j]}" + (f".c{chunk[j]}" if s.v > 1 else ""), "cat": k, "ph": "X",
                       "ts": start[j] * _US, "dur": (end[j] - start[j]) * _US, "pid": stage[j],
                       "tid": COMPUTE_TID, "cname": _CNAME[k],
                       "args": {"microbatch": mb[j], "chunk": chunk[j], "virtual_stage": position[j]}})

    pro = result.prologue
    if pro is not None:
        for i, c, a, b in zip(pro.stage.tolist(), pro.chunk.tolist(), pro.start_s.tolist(), pro.end_s.tolist()):
            events.append({"name": pro.name + (f".c{c}" if s.v > 1 else ""), "cat": "prologue", "ph": "X",
                           "ts": a * _US, "dur": (b - a) * _US, "pid": i, "tid": COMPUTE_TID,
                           "cname": _CNAME["prologue"], "args": {"chunk": c}})

    pred = s.predecessor.tolist()
    c0, c1 = result.comm_start_s.tolist(), result.comm_end_s.tolist()
    for j in range(s.n_ops):
        if math.isnan(c0[j]) or c1[j] <= c0[j]:
            continue
        src, dst = stage[pred[j]], stage[j]
        what = "activation" if KIND_NAMES[kind[j]] == "F" else "gradient"
        events.append({"name": f"send {what} mb{mb[j]} to stage {dst}", "cat": "p2p", "ph": "X",
                       "ts": c0[j] * _US, "dur": (c1[j] - c0[j]) * _US, "pid": src,
                       "tid": SEND_NEXT_TID if dst > src else SEND_PREV_TID,
                       "args": {"microbatch": mb[j], "from": src, "to": dst}})

    t_event, counts = result.inflight_time_s.tolist(), result.inflight.tolist()
    nbytes = result.inflight_bytes.tolist() if result.inflight_bytes is not None else None
    for i in range(s.p):
        events.append({"name": "in-flight activations", "ph": "C", "pid": i, "ts": 0.0, "args": {"micro-batch chunks": 0}})
        if nbytes is not None:
            events.append({"name": "activation memory", "ph": "C", "pid": i, "ts": 0.0, "args": {"bytes": 0.0}})
    for j in range(s.n_ops):
        if KIND_NAMES[kind[j]] == "B":                     # B neither takes nor frees activations
            continue
        events.append({"name": "in-flight activations", "ph": "C", "pid": stage[j], "ts": t_event[j] * _US,
                       "args": {"micro-batch chunks": counts[j]}})
        if nbytes is not None:
            events.append({"name": "activation memory", "ph": "C", "pid": stage[j], "ts": t_event[j] * _US,
                           "args": {"bytes": nbytes[j]}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"schedule": s.kind.value, "p": s.p, "m": s.m, "v": s.v,
                          "makespan_s": result.makespan_s, "bubble_fraction": result.bubble_fraction,
                          **dict(other or {})}}


def write_chrome_trace(path, result: ScheduleResult, schedule: PipelineSchedule,
                       names: Sequence[str] | None = None, other: Mapping[str, Any] | None = None) -> Path:
    """Write :func:`to_chrome_trace` as JSON to ``path``; returns the path."""
    path = Path(path)
    trace = to_chrome_trace(result, schedule, names, other)
    path.write_text(json.dumps(trace, default=lambda o: o.item() if isinstance(o, np.generic) else str(o)))
    return path
