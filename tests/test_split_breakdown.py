"""The breakdown of schedules that run a backward as a B apart from its W (ZB-H1, ZB-H2, ZB-V
all of them, DualPipe some): its parts are those of the split passes the makespan is built
from, so ``pipeline_bubble_s`` is the busiest stage's idle time in the event timeline.

Before, the parts were the fused backward's (whose TP collectives hide under the data- and
weight-gradient GEMMs together) while the makespan held the split B passes (which hide them
under their own data-gradient GEMMs only): the B passes' extra exposed traffic showed as
bubble, and ZB-H1's bubble came out larger than 1F1B's (0.0987 s against 0.0705 s on the
configuration below), the reverse of Qi et al. 2023."""
from __future__ import annotations

import numpy as np
import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs.catalog import load_model
from simulator import ParallelConfig, simulate
from simulator.config_batch import ConfigBatch
from simulator.event_level import pipeline_timeline
from simulator.pipeline.makespan import split_backward_counts
from simulator.pipeline.schedules import B, make_schedule
from simulator.step_model import cell_times

# the physics review's repro: paraplan simulate -m gpt3-13b -c dgx-h100 -n 32 --tp 8 --pp 4
# --global-batch 32 --zero 0 --sequence-parallel --schedule S (m = 32 micro-batches of 1)
BASE = dict(dp=1, tp=8, pp=4, micro_batch=1, global_batch=32, zero_stage=0, sequence_parallel=True)


def _run(schedule):
    model, cluster = load_model("gpt3-13b"), load_cluster("dgx-h100")
    cfg = ParallelConfig(**BASE, schedule=schedule)
    return model, cluster, cfg, simulate(model, cluster, cfg)


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1", "zb-v", "dualpipe"])
def test_bubble_is_the_busiest_stages_idle_in_the_timeline(schedule):
    """The breakdown's bubble is the makespan less the busiest stage's work: in the event
    timeline (the --trace file) that stage's idle time, exactly (before: zb-h1 0.0987 s against
    0.0517 s, zb-v 0.0649 against 0.0178, dualpipe 0.0125 against 0.0080)."""
    model, cluster, cfg, r = _run(schedule)
    _, result = pipeline_timeline(model, cfg, cluster)
    assert result.makespan_s == pytest.approx(r.extras["pipeline_makespan_s"], rel=1e-12)
    k = int(r.extras["busiest_stage"])
    assert r.time_breakdown_s["pipeline_bubble_s"] == pytest.approx(result.idle_s[k], rel=1e-9)
    assert sum(r.time_breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-12)


def test_zb_h1_bubble_is_qi_et_als_closed_form_and_below_1f1b():
    """Qi et al. 2023 section 2.1: ZB-H1's bubble is (p-1)(F+B-W), 1F1B's (p-1)(F+B+W).

    The pass times of the timeline's ops (the trace's durations: stage 0's F 8.852, B 11.972,
    W 3.510 ms at the refit f7c1ee2's factors; 9.494 / 11.975 / 3.718 at session 55's, 9.481 /
    11.972 / 3.718 before) give 3 x 17.314 = 51.9 ms. W is the stage's 10 layers' 4 weight-gradient
    GEMMs each, so the refit's per-kernel time (25.2 -> 20 us) takes 40 x 5.2 us = 0.208 ms off it.
    The formula is for equal stages; here stage 0 also
    holds the embedding and stage 3 the LM head and loss, so F+B-W runs from 17.02 ms (stages 1
    and 2) to 17.80 ms (stage 3): the bubble may be off the formula by up to (p-1) times that
    spread, 2.35 ms (it is 50.4 ms; 51.7 ms at session 55's factors; before the fix 98.7 ms, the
    split B passes' extra exposed TP time, 32 x 1.47 ms, counted as bubble)."""
    model, cluster, cfg, zb = _run("zb-h1")
    _, _, _, one = _run("1f1b")
    eff = efficiency_for_cluster(cluster)
    _, p, _, _, f, b, w, _, _ = cell_times(model, cluster, eff, ConfigBatch.from_configs([cfg]),
                                           with_fused=True, with_casts=True)
    per_stage = (f + b - w).sum(axis=1)                 # (p,) F + B - W of each stage, seconds
    assert (f[0, 0], b[0, 0], w[0, 0]) == pytest.approx((8.852e-3, 11.972e-3, 3.510e-3), abs=1e-6)
    assert 3.718e-3 - w[0, 0] == pytest.approx(10 * 4 * (25.2e-6 - eff.kernel_overhead_s), abs=1e-6)
    qi = (p - 1) * per_stage[0]
    assert qi == pytest.approx(0.0519, abs=1e-4)
    tolerance = (p - 1) * (per_stage.max() - per_stage.min())
    assert tolerance == pytest.approx(0.0023, abs=1e-4)
    bubble = zb.time_breakdown_s["pipeline_bubble_s"]
    assert abs(bubble - qi) <= tolerance
    assert bubble < one.time_breakdown_s["pipeline_bubble_s"]
    # the split passes expose more TP traffic than the fused backward (hidden under its own
    # data-gradient GEMMs only), and the breakdown says so
    assert zb.time_breakdown_s["tp_comm_exposed_s"] > one.time_breakdown_s["tp_comm_exposed_s"]


@pytest.mark.parametrize("kind,p", [("dualpipe", 2), ("dualpipe", 4), ("dualpipe", 6), ("dualpipe", 8),
                                    ("dualpipev", 2), ("dualpipev", 4), ("dualpipev", 6)])
def test_dualpipe_splits_the_same_passes_whatever_m(kind, p):
    """DualPipe(V)'s split B passes (recipe steps 3, 6, 7) are counted on the shortest flush;
    the count per (stage, chunk) does not change with m (the main step fuses all)."""
    counts = split_backward_counts(kind, p)
    for m in (2 * p + 2, 4 * p, 6 * p):
        sched = make_schedule(kind, p, m)
        stage = np.repeat(np.arange(p), np.diff(sched.stage_ptr))
        got = np.zeros_like(counts)
        np.add.at(got, (stage[sched.op_kind == B], sched.op_chunk[sched.op_kind == B]), 1.0)
        assert np.array_equal(got, counts), (kind, p, m)
