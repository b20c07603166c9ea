"""``simulate --trace / --gantt`` in fp8 / nvfp4: the once-a-step weight casts are on the timeline.

The step model adds every chunk's weight casts to the pipeline as fill and counts the busiest
stage's own casts as its compute (``step_model.evaluate``); a timeline of the f/b/w ops alone was
short by the fill and its busiest stage idled less than ``pipeline_bubble_s`` (70B, vpp 5, fp8:
0.1204 s against 0.1334 s; the makespan 0.0173 s short), though the note beside it says
``pipeline_bubble_s`` is that stage's idle. Also: the size check counted ZB-V's two chunks as
one (vpp = 1), and a one-stage trace printed "-0.0%" idle (rounding of makespan - busy).
"""
from __future__ import annotations

import json
import re
from collections import defaultdict

import numpy as np
import pytest

from cli_results import one_line_error, run
from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs.catalog import load_model
from simulator.config_batch import ConfigBatch
from simulator.event_level import pipeline_ops, pipeline_timeline
from simulator.parallel_config import ParallelConfig
from simulator.pipeline.event_sim import simulate_schedule, with_prologue
from simulator.pipeline.schedules import make_schedule
from simulator.step_model import cell_times

#: the busiest stage's parts of the breakdown (no offload in these cases)
STAGE_PARTS = ("compute_s", "recompute_s", "tp_comm_exposed_s", "cp_comm_exposed_s", "ep_comm_exposed_s",
               "pp_comm_s", "zero3_comm_exposed_s")
CASES = {
    "70b-vpp5-fp8": "-m llama3-70b -c dgx-h100 -n 64 --tp 8 --pp 4 --vpp 5 --dtype fp8 --global-batch 64 "
                    "--sequence-parallel",
    "8b-dualpipe-fp8": "-m llama3-8b -c dgx-h100 -n 8 --pp 4 --schedule dualpipe --dtype fp8 --global-batch 16",
    "70b-b200-nvfp4": "-m llama3-70b -c dgx-b200 -n 64 --tp 4 --pp 2 --dtype nvfp4 --global-batch 128 "
                      "--sequence-parallel",
}


def _trace_and_report(tmp_path, args):
    trace = tmp_path / "t.json"
    r = run("simulate", *args.split(), "--json", "--trace", trace)
    assert r.exit_code == 0, r.output
    return json.loads(trace.read_text()), json.loads(r.stdout), r.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_the_timeline_makespan_and_busiest_idle_are_the_reports(tmp_path, case):
    trace, d, _ = _trace_and_report(tmp_path, CASES[case])
    tb = d["time_breakdown_s"]
    assert sum(tb[k] for k in ("offload_exposed_s", "sync_wait_s")) == 0.0
    busy = defaultdict(float)
    casts = defaultdict(float)
    end = 0.0
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e["tid"] == 0:
            busy[e["pid"]] += e["dur"] / 1e6
            end = max(end, (e["ts"] + e["dur"]) / 1e6)
            if e["cat"] == "prologue":
                assert e["name"].startswith("weight cast")
                casts[e["pid"]] += e["dur"] / 1e6
    assert casts and all(v > 0 for v in casts.values())
    # the pipeline's part of the step: what follows it is the DP tail and the optimizer
    pipeline = d["step_time_s"] - tb["dp_comm_exposed_s"] - tb["optimizer_s"]
    assert end == pytest.approx(pipeline, abs=1e-9)
    assert trace["otherData"]["makespan_s"] == pytest.approx(pipeline, abs=1e-9)
    # the flush after the casts is the step model's pipeline_makespan_s
    assert end - sum(casts.values()) == pytest.approx(d["extras"]["pipeline_makespan_s"], abs=1e-9)
    k = int(d["extras"]["busiest_stage"])
    assert busy[k] == pytest.approx(sum(tb[p] for p in STAGE_PARTS), abs=1e-9)
    assert end - busy[k] == pytest.approx(tb["pipeline_bubble_s"], abs=1e-9)
    # the casts run one after another, none overlapping another op of its stage
    for pid in busy:
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
                       if e["ph"] == "X" and e["tid"] == 0 and e["pid"] == pid)
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(spans, spans[1:]))


def test_the_casts_are_every_cell_once_in_path_order_and_sum_to_the_stage_compute():
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100")
    config = ParallelConfig(dp=2, pp=4, schedule="dualpipe", dtype="fp8", global_batch=16)
    kind, p, m, v, f, b, w, bw, casts = cell_times(model, cluster, efficiency_for_cluster(cluster),
                                                   ConfigBatch.from_configs([config]), with_fused=True,
                                                   with_casts=True)
    schedule, result = pipeline_timeline(model, config, cluster)
    pro = result.prologue
    # DualPipe: both copies' cells, stage 0 down to 3 on chunk 0, then 3 up to 0 on chunk 1
    assert pro.stage.tolist() == [0, 1, 2, 3, 3, 2, 1, 0] and pro.chunk.tolist() == [0] * 4 + [1] * 4
    assert np.allclose(pro.end_s - pro.start_s, casts[pro.stage, pro.chunk], rtol=1e-12, atol=0)
    assert pro.start_s[0] == 0.0 and np.array_equal(pro.start_s[1:], pro.end_s[:-1])
    assert result.start_s.min() == pro.duration_s == pytest.approx(casts.sum(), rel=1e-12)
    # each stage's busy time gains its own casts (32 layers, 4 stages, 2 copies: 16 layers each)
    flush = simulate_schedule(schedule, f, b, w, bw_time_s=bw)
    assert np.allclose(result.busy_s - flush.busy_s, casts.sum(axis=1), rtol=1e-12, atol=0)
    assert np.allclose(casts.sum(axis=1), casts.sum() / 4, rtol=1e-12, atol=0)
    assert result.makespan_s == pytest.approx(flush.makespan_s + casts.sum(), rel=1e-12)


def test_a_16_bit_timeline_has_no_casts(tmp_path):
    trace, d, err = _trace_and_report(tmp_path, "-m llama3-8b -c dgx-h100 -n 8 --pp 2 --global-batch 16")
    assert not [e for e in trace["traceEvents"] if e.get("cat") == "prologue"]
    assert "weight casts" not in err
    end = max((e["ts"] + e["dur"]) / 1e6 for e in trace["traceEvents"] if e["ph"] == "X")
    assert end == pytest.approx(d["extras"]["pipeline_makespan_s"], abs=1e-9)


def test_with_prologue_shifts_the_flush_and_adds_each_stage_its_casts():
    s = make_schedule("1f1b", 2, 3, 1)
    base = simulate_schedule(s, 1.0, 2.0, 0.0)
    r = with_prologue(base, s, "weight cast", [0, 1], [0.5, 0.25])
    assert r.makespan_s == base.makespan_s + 0.75
    assert np.array_equal(r.start_s, base.start_s + 0.75)
    assert r.busy_s.tolist() == [9.5, 9.25]                  # 3 x (1 + 2) plus the casts
    assert r.idle_s.tolist() == [r.makespan_s - 9.5, r.makespan_s - 9.25]
    assert r.first_start_s.tolist() == [0.0, 0.5]
    assert r.prologue.start_s.tolist() == [0.0, 0.5] and r.prologue.end_s.tolist() == [0.5, 0.75]
    assert r.bubble_fraction == pytest.approx(r.idle_s.sum() / (2 * r.makespan_s))


@pytest.mark.parametrize("gbs, ops", [(209, 5_016), (417, 10_008)])
def test_the_zb_v_size_limit_counts_both_chunks(tmp_path, gbs, ops):
    # ZB-V runs 2 chunks per stage: 3 ops x 4 stages x 2 chunks x m micro-batches
    line = one_line_error(run("simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "4", "--pp", "4",
                              "--schedule", "zb-v", "--global-batch", gbs, "--gantt", tmp_path / "g.png"),
                          "--gantt", f"up to {ops:,} operations", f"x {gbs:,} micro-batches")
    assert "2 chunks per stage" in line
    assert not (tmp_path / "g.png").exists()


@pytest.mark.parametrize("schedule, dtype", [("zb-v", "bf16"), ("zb-v", "fp8"), ("dualpipe", "fp8"),
                                             ("interleaved", "nvfp4")])
def test_the_size_bound_is_the_timeline_s_operations(schedule, dtype):
    model = load_model("llama3-8b")
    cluster = load_cluster("dgx-b200" if dtype == "nvfp4" else "dgx-h100")
    config = ParallelConfig(dp=1, pp=4, vpp=2 if schedule == "interleaved" else 1, schedule=schedule,
                            dtype=dtype, global_batch=8)
    schedule_, result = pipeline_timeline(model, config, cluster)
    drawn = schedule_.n_ops + (result.prologue.stage.size if result.prologue is not None else 0)
    assert pipeline_ops(config, config.num_microbatches) >= drawn
    if schedule == "zb-v":        # every (micro-batch, cell) has its F, B and W (DualPipe: half the cells, some BW)
        assert pipeline_ops(config, config.num_microbatches) == drawn


def test_one_stage_idles_zero_not_minus_zero(tmp_path):
    trace, d, err = _trace_and_report(tmp_path, "-m llama3-8b -c dgx-h100 -n 8 --zero 2 --dtype fp8 --global-batch 64 "
                                      "--offload-activation-layers 4 --offload-optimizer-fraction 0.5")
    assert trace["otherData"]["bubble_fraction"] == 0.0
    assert re.search(r"mean stage idle 0\.0%", err) and "-0.0%" not in err
