"""Makespan of each replica group's pipeline flush, from its stage blocks.

A group of ``p`` stages running ``m`` micro-batches takes the schedule's makespan for its own
per-stage forward and backward times: ``pipeline.makespan.flush_makespan_s``, the function the
one-kind step model (``step_pipeline.pipeline_pass``) calls, so a group on one pool steps as
``simulate`` does for the same layout. ``sum of stage times + (m - 1) x slowest stage`` (the
first micro-batch crosses every stage, then the slowest paces the rest) only approximates it:
with stages of 41 and 39 layers on B200s it overstated Llama-3-70B's 1F1B flush by 9 ms.
A search scoring many plans prices exactly the ones that can rank (``compose``'s
``exact_top``), bounded below by ``pipeline.bound.flush_lower_bound_s``, the one-kind planner's
bound.
"""
from __future__ import annotations

import numpy as np

from simulator.parallel_config import Schedule
from simulator.pipeline.bound import flush_lower_bound_s
from simulator.pipeline.makespan import flush_makespan_s
from simulator.pipeline.schedules import ScheduleKind


def stage_table(f_row, b_row, group, position, count, n_groups: int, max_stages: int):
    """(G, max_stages) forward and backward seconds of every stage of every group (0 past a
    group's last stage), from the block rows (``compose.StageBlocks``: ``group``, pipeline
    ``position`` of the block's first stage, ``count`` stages)."""
    count = np.asarray(count, dtype=np.int64)
    rows = np.repeat(np.arange(len(count)), count)
    first_of_row = np.repeat(np.cumsum(count) - count, count)
    stage = np.asarray(position, dtype=np.int64)[rows] + (np.arange(len(rows)) - first_of_row)
    gi = np.asarray(group, dtype=np.int64)[rows]
    f = np.zeros((n_groups, max(int(max_stages), 1)))
    b = np.zeros_like(f)
    f[gi, stage] = np.asarray(f_row, dtype=float)[rows]
    b[gi, stage] = np.asarray(b_row, dtype=float)[rows]
    return f, b


def _whole(micro_batches) -> np.ndarray:
    return np.maximum(np.rint(np.asarray(micro_batches, dtype=float)), 1).astype(np.int64)


def group_makespans_s(schedule: Schedule, f, b, stages, micro_batches, which=None) -> np.ndarray:
    """(G,) seconds of one flush of each group ``which`` selects (bool mask; None: all; the
    others NaN).

    Args:
        schedule: the pipeline schedule (1F1B or GPipe: one chunk per stage, W fused in BW).
        f, b: (G, S) ``stage_table``: one micro-batch's forward and backward (with the weight
            gradients) on each stage, sends in that direction included.
        stages: (G,) stages per group; micro_batches: (G,) micro-batches per replica (whole).
    """
    stages = np.asarray(stages, dtype=np.int64)
    out = np.full(len(stages), np.nan)
    sel_all = np.ones(len(stages), bool) if which is None else np.asarray(which, dtype=bool)
    if not sel_all.any():
        return out
    m = _whole(micro_batches)
    kind = ScheduleKind(schedule.value)
    key = stages * (int(m.max()) + 1) + m
    for k in np.unique(key[sel_all]):
        sel = np.flatnonzero(sel_all & (key == k))
        p, mm = int(stages[sel[0]]), int(m[sel[0]])
        fs, bs = f[sel, :p, None], b[sel, :p, None]
        out[sel] = flush_makespan_s(kind, p, mm, 1, fs, bs, np.zeros_like(fs))
    return out


def group_lower_bounds_s(schedule: Schedule, f, b, stages, micro_batches) -> np.ndarray:
    """(G,) a lower bound on ``group_makespans_s`` (``pipeline.bound.flush_lower_bound_s``)."""
    stages = np.asarray(stages, dtype=np.int64)
    out = np.zeros(len(stages))
    m = _whole(micro_batches)
    kind = ScheduleKind(schedule.value)
    for p in np.unique(stages):
        sel = np.flatnonzero(stages == p)
        fs, bs = f[sel, :p, None], b[sel, :p, None]
        out[sel] = flush_lower_bound_s(kind, int(p), m[sel], 1, fs, bs, np.zeros_like(fs))
    return out
