"""The pipeline part of a step, simulated operation by operation (``simulator.pipeline``).

Per-(stage, chunk) durations come from the step model's per-layer times: forward F = layers x
``layer_fwd_s``; input-gradient backward B = layers x (``layer_bwd_s`` - ``layer_w_s`` +
``layer_recompute_s``) (recomputation runs just before B); weight-gradient backward W = layers x
``layer_w_s``, plus each stage's unfused gradient accumulation (shared by its chunks by layer
count). The LM head and loss run on the last position of every path (one third forward,
two thirds backward, as their GEMMs), the embedding on the first. Pipeline sends are counted
serially per micro-batch as in the closed form, so the two agree exactly for even stages.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from cost_models.memory import activation_bytes_per_layer
from model_specs.model_spec import ModelSpec
from simulator.config_batch import RECOMPUTE_CODES
from simulator.parallel_config import ParallelConfig, Schedule
from simulator.report import StepReport

#: most pipeline operations the event-level simulation runs for a step (~1 s); beyond it (e.g.
#: 4 stages x 100,000 micro-batches) the fill and drain are a negligible share of the step and
#: the closed-form bubble, which equals the event-level one for even stages, is kept
MAX_EVENT_OPS = 300_000


def pipeline_ops(config: ParallelConfig, num_microbatches: int) -> int:
    """An upper bound on the schedule's operations: forward, backward and (zero-bubble) weight
    pass of every micro-batch on every chunk of every stage."""
    return 3 * int(config.pp) * int(config.vpp) * int(num_microbatches)


def cell_layers(schedule, num_layers: int) -> np.ndarray:
    """(p, v) layers per (stage, chunk); a remainder goes to the earliest positions of a path."""
    n = schedule.path_length
    per_position = np.full(n, num_layers // n, dtype=float)
    per_position[: num_layers % n] += 1
    cells = np.zeros(schedule.p * schedule.v)
    for path in schedule.paths:
        cells[np.asarray(path)] = per_position[: len(path)]
    return cells.reshape(schedule.p, schedule.v)


def pipeline_timeline(model: ModelSpec, config: ParallelConfig, report: StepReport):
    """Generate and simulate the configuration's schedule: returns (schedule, ScheduleResult)."""
    from simulator.pipeline import make_schedule, simulate_schedule

    m = report.num_microbatches
    v = config.vpp if config.schedule == Schedule.INTERLEAVED else None
    schedule = make_schedule(config.schedule.value, config.pp, m, v)
    # an MTP module's transformer layer is placed like any other (see simulator.step_model)
    total_layers = model.num_layers + model.mtp_layers
    layers = cell_layers(schedule, total_layers)
    w_layer = report.extras["layer_w_s"]
    b_layer = report.layer_bwd_s - w_layer + report.layer_recompute_s
    f = layers * report.layer_fwd_s
    b = layers * b_layer
    w = layers * w_layer
    layers_stage = math.ceil(total_layers / config.pp)
    per_layer = report.layer_fwd_s + report.layer_bwd_s + report.layer_recompute_s
    accum = report.extras.get("grad_accum_per_microbatch_s", 0.0)
    w = w + accum * layers / layers_stage
    ends = (report.extras["microbatch_stage_time_s"] - layers_stage * per_layer - report.extras["p2p_per_microbatch_s"]
            - accum)
    if ends > 1e-15:
        for cell in {int(path[-1]) for path in schedule.paths}:
            f[cell // schedule.v, cell % schedule.v] += ends / 3.0
            b[cell // schedule.v, cell % schedule.v] += 2.0 * ends / 3.0
    per_layer_act = activation_bytes_per_layer(
        model, config.micro_batch, model.seq_len, config.tp, config.cp, config.sequence_parallel,
        RECOMPUTE_CODES[config.recompute], flash_attention=config.flash_attention)
    act = layers * float(np.asarray(per_layer_act))
    return schedule, simulate_schedule(schedule, f, b, w, p2p_time_s=0.0, activation_bytes=act)


def with_event_level_pipeline(model: ModelSpec, config: ParallelConfig, report: StepReport) -> StepReport:
    """``report`` with its pipeline bubble (and step time) from the event-level schedule
    (unchanged when the schedule has more than ``MAX_EVENT_OPS`` operations)."""
    if pipeline_ops(config, report.num_microbatches) > MAX_EVENT_OPS:
        return report
    _, result = pipeline_timeline(model, config, report)
    parts = dict(report.time_breakdown_s)
    m = report.num_microbatches
    serial_p2p = m * report.extras["p2p_per_microbatch_s"]
    closed_pipeline = m * report.extras["microbatch_stage_time_s"] + parts["pipeline_bubble_s"]
    event_pipeline = result.makespan_s + serial_p2p
    parts["pipeline_bubble_s"] = max(0.0, parts["pipeline_bubble_s"] + event_pipeline - closed_pipeline)
    step = sum(parts.values())
    scale = report.step_time_s / step
    extras = dict(report.extras)
    extras["closed_form_step_time_s"] = report.step_time_s
    extras["event_makespan_s"] = result.makespan_s
    return replace(report, step_time_s=step, time_breakdown_s=parts,
                   tokens_per_s=report.tokens_per_s * scale,
                   tokens_per_s_per_gpu=report.tokens_per_s_per_gpu * scale,
                   model_tflops_per_gpu=report.model_tflops_per_gpu * scale,
                   hardware_tflops_per_gpu=report.hardware_tflops_per_gpu * scale,
                   mfu=report.mfu * scale, hfu=report.hfu * scale, extras=extras)
