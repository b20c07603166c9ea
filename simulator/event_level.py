"""The pipeline part of a step, simulated operation by operation (``simulator.pipeline``), for
timelines: Gantt charts and Chrome traces.

The per-(stage, chunk) forward, input-gradient and weight-gradient durations are the very ones
the step model computes its makespan from (``step_model.cell_times``), so the event timeline's
makespan equals ``StepReport.extras["pipeline_makespan_s"]`` (exactly up to the micro-batch count
the step model sweeps directly, ``pipeline.makespan.m_cap``; beyond it the step model
extrapolates the periodic regime). Point-to-point sends are inside the op durations.
"""
from __future__ import annotations

from hardware_specs.catalog import efficiency_for_cluster
from hardware_specs.cluster_spec import ClusterSpec
from model_specs.model_spec import ModelSpec
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig


def pipeline_timeline(model: ModelSpec, config: ParallelConfig, cluster: ClusterSpec, efficiency=None):
    """Generate and simulate the configuration's schedule: returns (schedule, ScheduleResult)."""
    from simulator.pipeline import make_schedule, simulate_schedule
    from simulator.step_model import cell_times
    eff = efficiency if efficiency is not None else efficiency_for_cluster(cluster)
    kind, p, m, v, f, b, w, bw = cell_times(model, cluster, eff, ConfigBatch.from_configs([config]), with_fused=True)
    from simulator.pipeline.makespan import flush_makespan_s
    # the order whose flush the step model took (the shortest of the candidate orders)
    _, chosen = flush_makespan_s(kind, p, m, v, f[None], b[None], w[None], with_order=True)
    durations = tuple(float(x) for x in chosen[0])
    schedule = make_schedule(kind, p, m, v, durations=durations)
    return schedule, simulate_schedule(schedule, f, b, w, p2p_time_s=0.0, bw_time_s=bw)


def pipeline_ops(config: ParallelConfig, num_microbatches: int) -> int:
    """An upper bound on the schedule's operations: forward, backward and (zero-bubble) weight
    pass of every micro-batch on every chunk of every stage (what a timeline would draw)."""
    return 3 * int(config.pp) * int(config.vpp) * int(num_microbatches)
