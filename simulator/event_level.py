"""The pipeline part of a step, simulated operation by operation (``simulator.pipeline``), for
timelines: Gantt charts and Chrome traces.

The per-(stage, chunk) forward, input-gradient and weight-gradient durations are the very ones
the step model computes its makespan from (``step_model.cell_times``), so the flush's makespan
equals ``StepReport.extras["pipeline_makespan_s"]`` (exactly up to the micro-batch count the
step model sweeps directly, ``pipeline.makespan.m_cap``; beyond it the step model extrapolates
the periodic regime). Point-to-point sends are inside the op durations.

Low-precision (fp8, mxfp8, nvfp4) weights are cast once a step, in each chunk's first forward;
the step model adds every chunk's casts to the pipeline as fill (the first micro-batch reaches
the end that much later) and counts each stage's own casts as its compute. The timeline draws
that accounting: the casts run one after another along the forward path(s) before the flush
(``event_sim.with_prologue``), so its makespan is the pipeline's part of the step
(``pipeline_makespan_s`` plus the fill) and the busiest stage's idle time is the breakdown's
``pipeline_bubble_s``.
"""
from __future__ import annotations

from cost_models.low_precision import ELEMENT_BYTES
from hardware_specs.catalog import efficiency_for_cluster
from hardware_specs.cluster_spec import ClusterSpec
from model_specs.model_spec import ModelSpec
from simulator.config_batch import SCHEDULE_CODES, ConfigBatch
from simulator.parallel_config import ParallelConfig


def pipeline_timeline(model: ModelSpec, config: ParallelConfig, cluster: ClusterSpec, efficiency=None):
    """Generate and simulate the configuration's schedule: returns (schedule, ScheduleResult),
    the weight casts as the result's prologue (None in 16/32-bit). Every pass is drawn at its
    paired duration: under ``ep_comm_overlap`` the step time also holds what the warm-up and
    cool-down passes with no partner micro-batch expose (``step_model.ep_unpaired_s``, in the
    report's ``ep_comm_exposed_s``), which this timeline does not place."""
    from simulator.pipeline import make_schedule, simulate_schedule
    from simulator.pipeline.event_sim import with_prologue
    from simulator.pipeline.makespan import flush_makespan_s
    from simulator.pipeline.schedules import schedule_paths
    from simulator.step_model import cell_times
    eff = efficiency if efficiency is not None else efficiency_for_cluster(cluster)
    kind, p, m, v, f, b, w, bw, casts = cell_times(model, cluster, eff, ConfigBatch.from_configs([config]),
                                                   with_fused=True, with_casts=True)
    # the order whose flush the step model took (the shortest of the candidate orders)
    _, chosen = flush_makespan_s(kind, p, m, v, f[None], b[None], w[None], with_order=True)
    durations = tuple(float(x) for x in chosen[0])
    schedule = make_schedule(kind, p, m, v, durations=durations)
    result = simulate_schedule(schedule, f, b, w, p2p_time_s=0.0, bw_time_s=bw)
    if not (casts > 0).any():
        return schedule, result
    # every path's cells in layer order (DualPipe: both copies, as the fill counts both)
    cells = schedule_paths(kind, p, v).reshape(-1)
    return schedule, with_prologue(result, schedule, "weight cast", cells, casts.reshape(-1)[cells])


def pipeline_ops(config: ParallelConfig, num_microbatches: int) -> int:
    """An upper bound on the timeline's operations: forward, backward and (zero-bubble) weight
    pass of every micro-batch on every chunk of every stage (the schedule's chunks: vpp for
    interleaved 1F1B, 2 for ZB-V and DualPipe), plus one weight cast per chunk in a
    low-precision dtype (``low_precision.ELEMENT_BYTES``; what a timeline would draw)."""
    from simulator.step_pipeline import schedule_chunks
    cells = int(config.pp) * schedule_chunks(SCHEDULE_CODES[config.schedule], int(config.vpp))
    return 3 * cells * int(num_microbatches) + (cells if config.dtype in ELEMENT_BYTES else 0)
