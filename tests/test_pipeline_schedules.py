"""Pipeline schedules: generation, validation, event simulation, closed forms, trace and Gantt."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hardware_specs.errors import InputError
from simulator.parallel_config import Schedule
from simulator.pipeline import (ScheduleKind, bubble_fraction_closed_form, make_schedule, simulate_schedule,
                                to_chrome_trace, validate_schedule, write_chrome_trace)
from simulator.pipeline.schedules import BW, F, PipelineSchedule

# Fused-backward schedules use F = 1 and B + W = 2 (B = 1.5, W = 0.5); zero-bubble ones F = B = W = 1.
FUSED = dict(f_time_s=1.0, b_time_s=1.5, w_time_s=0.5)
EQUAL = dict(f_time_s=1.0, b_time_s=1.0, w_time_s=1.0)


def _per_chunk(schedule: PipelineSchedule, times: dict) -> dict:
    """Split per-stage times evenly over the chunks on a path (a V or interleaved chunk is 1/v of a stage)."""
    scale = schedule.p / schedule.path_length
    return {k: t * scale for k, t in times.items()}


def _valid_requests():
    for p in (1, 2, 3, 4, 6):
        for m in (1, 2, 3, 5, 8, 12):
            for kind in (ScheduleKind.GPIPE, ScheduleKind.ONE_F_ONE_B, ScheduleKind.ZB_H1, ScheduleKind.ZB_H2,
                         ScheduleKind.ZB_V):
                yield kind, p, m, None
            if m % p == 0:
                for v in (2, 3):
                    yield ScheduleKind.INTERLEAVED, p, m, v
            if m >= 2 * p:
                yield ScheduleKind.DUALPIPE_V, p, m, None
                if p % 2 == 0 and m % 2 == 0:
                    yield ScheduleKind.DUALPIPE, p, m, None


@pytest.mark.parametrize("kind,p,m,v", list(_valid_requests()))
def test_every_generated_schedule_validates(kind, p, m, v):
    schedule = make_schedule(kind, p, m, v)
    validate_schedule(schedule)
    n_cells = schedule.m * schedule.path_length
    assert np.count_nonzero(schedule.op_kind == F) == n_cells
    assert schedule.predecessor.size == schedule.n_ops


@pytest.mark.parametrize("p,m", [(1, 4), (2, 3), (4, 8), (4, 4), (8, 32), (5, 17)])
@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(kind, p, m):
    result = simulate_schedule(make_schedule(kind, p, m), **FUSED)
    assert result.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)
    assert result.makespan_s == pytest.approx((m + p - 1) * 3.0)
    assert result.bubble_fraction == pytest.approx(bubble_fraction_closed_form(kind, p, m), abs=1e-12)


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (4, 8, 4), (8, 32, 2), (3, 9, 3)])
def test_interleaving_divides_the_absolute_bubble_time_by_v(p, m, v):
    one = simulate_schedule(make_schedule("1f1b", p, m), **FUSED)
    inter_schedule = make_schedule("interleaved", p, m, v)
    inter = simulate_schedule(inter_schedule, **_per_chunk(inter_schedule, FUSED))
    assert inter.bubble_s == pytest.approx(one.bubble_s / v, rel=1e-12)
    assert inter.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-12)
    assert inter.bubble_fraction == pytest.approx(bubble_fraction_closed_form("interleaved", p, m, v), abs=1e-12)


@pytest.mark.parametrize("p,m", [(2, 2), (4, 8), (8, 32), (6, 7)])
def test_zb_h1_bubble_is_a_third_of_1f1b_with_the_same_peak_memory(p, m):
    # Qi et al. 2023: with T_F = T_B = T_W = T the ZB-H1 bubble is (p-1)(T_F + T_B - T_W) = (p-1) T
    # per stage against 1F1B's (p-1)(T_F + T_B + T_W) = 3 (p-1) T. The handcrafted order reaches
    # it exactly once m >= p (every stage has its i delayed W passes to fill the tail), so the
    # only tolerance needed is floating-point rounding.
    zb = simulate_schedule(make_schedule("zb-h1", p, m), **EQUAL)
    one = simulate_schedule(make_schedule("1f1b", p, m), **EQUAL)
    assert zb.bubble_s / one.bubble_s == pytest.approx(1 / 3, rel=1e-9)
    assert zb.makespan_s == pytest.approx(3 * m + p - 1)
    assert zb.peak_inflight[0] == one.peak_inflight[0] == p
    assert zb.peak_inflight.max() == p
    assert zb.bubble_fraction == pytest.approx(bubble_fraction_closed_form("zb-h1", p, m), abs=1e-12)


def test_zb_h1_closed_form_holds_for_unequal_passes_with_w_no_longer_than_f_and_b():
    result = simulate_schedule(make_schedule("zb-h1", 8, 32), 1.0, 1.2, 0.8)
    assert result.bubble_fraction == pytest.approx(bubble_fraction_closed_form("zb-h1", 8, 32, 1, 1.0, 1.2, 0.8),
                                                   abs=1e-12)


@pytest.mark.parametrize("p,m", [(4, 8), (8, 32), (3, 5)])
def test_zb_h2_has_no_steady_state_bubble_but_holds_2p_minus_1_microbatches(p, m):
    zb2 = simulate_schedule(make_schedule("zb-h2", p, m), **EQUAL)
    zb1 = simulate_schedule(make_schedule("zb-h1", p, m), **EQUAL)
    assert zb2.pipelined_bubble_fraction == pytest.approx(0.0, abs=1e-12)
    assert zb1.pipelined_bubble_fraction > 0.03
    # One isolated flush cannot beat 3m + p - 1: the last stage starts p - 1 forwards late.
    assert zb2.makespan_s == pytest.approx(3 * m + p - 1)
    assert zb2.peak_inflight[0] == 2 * p - 1 > zb1.peak_inflight[0]


@pytest.mark.parametrize("p,m", [(4, 8), (8, 32)])
def test_peak_inflight_on_stage_0_is_p_for_1f1b_and_m_for_gpipe(p, m):
    one = simulate_schedule(make_schedule("1f1b", p, m), **FUSED, activation_bytes=2e9)
    gpipe = simulate_schedule(make_schedule("gpipe", p, m), **FUSED)
    assert one.peak_inflight.tolist() == [p - i for i in range(p)]
    assert gpipe.peak_inflight.tolist() == [m] * p
    assert one.peak_activation_bytes[0] == pytest.approx(p * 2e9)


def test_v_shaped_schedules_keep_1f1b_memory_and_cut_the_bubble():
    p, m = 8, 32
    one = simulate_schedule(make_schedule("1f1b", p, m), **EQUAL)
    for kind in ("zb-v", "dualpipev"):
        schedule = make_schedule(kind, p, m)
        result = simulate_schedule(schedule, **_per_chunk(schedule, EQUAL))
        assert result.makespan_s >= 3 * m + (p - 1) / 2 - 1e-9     # last stage starts (p-1) half-stages late
        assert result.bubble_fraction < one.bubble_fraction / 3
        # Chunk activations are half a micro-batch: ZB-V stays within 1F1B's p micro-batches.
    zbv = make_schedule("zb-v", p, m)
    assert simulate_schedule(zbv, **_per_chunk(zbv, EQUAL)).peak_inflight.max() <= 2 * p


def test_layer_placement_interleaved_and_v_shape():
    inter = make_schedule("interleaved", 4, 8, 2)
    assert inter.virtual_stage(1, 0) == 1 and inter.virtual_stage(1, 1) == 5      # c * p + i
    for kind in ("zb-v", "dualpipev"):
        vee = make_schedule(kind, 4, 8)
        assert vee.virtual_stage(0, 0) == 0 and vee.virtual_stage(0, 1) == 7       # first and last layers
        assert vee.virtual_stage(3, 0) == 3 and vee.virtual_stage(3, 1) == 4       # the bottom of the V
    dual = make_schedule(Schedule.DUALPIPE, 4, 8)
    assert dual.virtual_stage(0, 1, path=1) == 3 and dual.virtual_stage(3, 1, path=1) == 0
    assert make_schedule("1f1b", 4, 8, num_layers=32).layers_per_chunk == 8
    assert make_schedule("zb-v", 4, 8, num_layers=32).layers_per_chunk == 4


def test_uneven_1f1b_hand_derived_small_case():
    # p=2, m=3; fast stage F=1, BW=2; slow stage F=2, BW=4. Stage 0 runs F0 F1 BW0 F2 BW1 BW2,
    # stage 1 runs F0 BW0 F1 BW1 F2 BW2.
    # Slow stage 1: s0 F0[0,1] F1[1,2]; s1 F0[1,3] BW0[3,7]; s0 BW0[7,9] F2[9,10];
    #   s1 F1[7,9] BW1[9,13]; s0 BW1[13,15]; s1 F2[13,15] BW2[15,19]; s0 BW2[19,21] -> 21.
    # Slow stage 0: s0 F0[0,2] F1[2,4]; s1 F0[2,3] BW0[3,5] F1[5,6] BW1[6,8]; s0 BW0[5,9]
    #   F2[9,11] BW1[11,15]; s1 F2[11,12] BW2[12,14]; s0 BW2[15,19] -> 19.
    schedule = make_schedule("1f1b", 2, 3)
    for slow, expected in ((1, 21.0), (0, 19.0)):
        f = np.array([[1.0], [1.0]])
        b = np.array([[1.5], [1.5]])
        w = np.array([[0.5], [0.5]])
        f[slow], b[slow], w[slow] = 2.0, 3.0, 1.0
        assert simulate_schedule(schedule, f, b, w).makespan_s == pytest.approx(expected)
    even = simulate_schedule(schedule, **FUSED).makespan_s
    assert even == pytest.approx(12.0)


def test_slow_last_stage_costs_every_microbatch_its_extra_time():
    # A slow last stage sets the steady-state period: makespan = sum_i (f_i + bw_i) + (m - 1) max_i(f_i + bw_i),
    # i.e. the even makespan plus m times the extra (F + BW) of the slow stage.
    p, m = 4, 8
    f = np.ones((p, 1))
    b = np.full((p, 1), 1.5)
    w = np.full((p, 1), 0.5)
    f[-1], b[-1], w[-1] = 2.0, 3.0, 1.0
    result = simulate_schedule(make_schedule("1f1b", p, m), f, b, w)
    assert result.makespan_s == pytest.approx((m + p - 1) * 3.0 + m * 3.0)
    assert result.busy_s.tolist() == [24.0, 24.0, 24.0, 48.0]


def test_p2p_time_adds_two_transfers_per_stage_boundary_for_one_microbatch():
    p, c = 4, 0.25
    result = simulate_schedule(make_schedule("1f1b", p, 1), **FUSED, p2p_time_s=c)
    assert result.makespan_s == pytest.approx(p * 3.0 + 2 * (p - 1) * c)
    assert np.count_nonzero(~np.isnan(result.comm_start_s)) == 2 * (p - 1)


@pytest.mark.parametrize("kwargs,field", [
    (dict(kind="interleaved", p=4, m=6, v=2), "m"),
    (dict(kind="interleaved", p=4, m=8, v=1), "v"),
    (dict(kind="zb-v", p=4, m=8, v=3), "v"),
    (dict(kind="dualpipe", p=4, m=8, v=1), "v"),
    (dict(kind="dualpipev", p=4, m=8, v=4), "v"),
    (dict(kind="dualpipe", p=3, m=12), "p"),
    (dict(kind="dualpipev", p=4, m=6), "m"),
    (dict(kind="1f1b", p=0, m=8), "p"),
    (dict(kind="1f1b", p=4, m=0), "m"),
    (dict(kind="1f1b", p=4, m=8, v=2), "v"),
    (dict(kind="1f1b", p=4, m=8, num_layers=30), "num_layers"),
    (dict(kind="interleaved", p=4, m=8, v=2, num_layers=36), "num_layers"),
    (dict(kind="pipedream", p=4, m=8), "schedule"),
])
def test_impossible_requests_raise_input_error_naming_the_field(kwargs, field):
    with pytest.raises(InputError) as err:
        make_schedule(**kwargs)
    assert err.value.field == field


def _with_ops(schedule: PipelineSchedule, kind, mb, chunk) -> PipelineSchedule:
    return PipelineSchedule(schedule.kind, schedule.p, schedule.m, schedule.v, schedule.stage_ptr,
                            np.asarray(kind), np.asarray(mb), np.asarray(chunk), schedule.paths,
                            schedule.mb_path, schedule.num_layers)


def test_validate_rejects_a_deadlocking_order_and_a_missing_op():
    good = make_schedule("1f1b", 2, 2)
    kind, mb, chunk = good.op_kind.copy(), good.op_mb.copy(), good.op_chunk.copy()
    # Stage 1 runs F0 BW0 F1 BW1; make it wait for BW1 before F1: BW1 needs F1 -> deadlock.
    lo = good.stage_ptr[1]
    kind[lo + 2], kind[lo + 3] = BW, F
    with pytest.raises(InputError, match="deadlock"):
        validate_schedule(_with_ops(good, kind, mb, chunk))
    kind, mb = good.op_kind.copy(), good.op_mb.copy()
    mb[0] = 1                                                  # two F1 and no F0 on stage 0
    with pytest.raises(InputError, match="micro-batch 0"):
        validate_schedule(_with_ops(good, kind, mb, chunk))


def test_dependencies_list_one_predecessor_per_op_except_first_forwards():
    schedule = make_schedule("zb-h1", 3, 4)
    deps = schedule.dependencies()
    assert len(deps) == schedule.n_ops - schedule.m
    w_deps = [d for d in deps if d.op.kind == "W"]
    assert all(d.after.kind == "B" and not d.cross_stage and d.after.stage == d.op.stage for d in w_deps)
    assert schedule.ops(0)[:2] == (("F", 0, 0), ("F", 1, 0))


def test_chrome_trace_round_trips_with_complete_counter_and_metadata_events(tmp_path):
    schedule = make_schedule("zb-h1", 3, 4)
    result = simulate_schedule(schedule, 1e-3, 1e-3, 1e-3, p2p_time_s=1e-4, activation_bytes=1e6)
    path = write_chrome_trace(tmp_path / "trace.json", result, schedule, names=["a", "b", "c"])
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert isinstance(events, list)
    complete = [e for e in events if e["ph"] == "X"]
    compute = [e for e in complete if e["tid"] == 0]
    sends = [e for e in complete if e["tid"] in (1, 2)]
    assert len(compute) == schedule.n_ops
    assert len(sends) == 2 * (schedule.p - 1) * schedule.m
    assert all({"ts", "dur", "pid", "tid", "name"} <= e.keys() for e in complete)
    assert max(e["ts"] + e["dur"] for e in compute) == pytest.approx(result.makespan_s * 1e6)
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"in-flight activations", "activation memory"}
    stage0 = [e for e in counters if e["pid"] == 0]
    assert max(e["args"]["micro-batch chunks"] for e in stage0 if e["name"] == "in-flight activations") == 3
    assert max(e["args"]["bytes"] for e in stage0 if e["name"] == "activation memory") == pytest.approx(3e6)
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "a", 1: "b", 2: "c"}
    assert to_chrome_trace(result, schedule)["otherData"]["schedule"] == "zb-h1"


def test_gantt_writes_a_png(tmp_path):
    from simulator.pipeline.gantt import draw_gantt
    schedule = make_schedule("interleaved", 4, 8, 2)
    result = simulate_schedule(schedule, 0.5e-3, 1e-3, 0.5e-3)
    path = draw_gantt(result, schedule, tmp_path / "gantt.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_event_sim_is_fast_for_64_stages_and_512_microbatches():
    import time
    schedule = make_schedule("1f1b", 64, 512)
    t0 = time.perf_counter()
    result = simulate_schedule(schedule, **FUSED)
    assert time.perf_counter() - t0 < 1.0
    assert result.bubble_fraction == pytest.approx(63 / 575)


def test_1f1b_peak_in_flight_closed_form_equals_the_simulated_flush():
    # planner's shortcut (makespan.peak_in_flight): stage s holds min(m, p - s) sets; the
    # event simulation of every (p, m) up to the sweep cap must say the same
    from simulator.pipeline.makespan import _simulated_peaks, m_cap, peak_in_flight, peak_in_flight_rows
    for p in range(1, 17):
        ms = range(1, m_cap(ScheduleKind.ONE_F_ONE_B, p) + 1)
        for m in ms:
            assert peak_in_flight(ScheduleKind.ONE_F_ONE_B, p, m, 1) == \
                _simulated_peaks(ScheduleKind.ONE_F_ONE_B, p, m, 1)
        assert peak_in_flight_rows(ScheduleKind.ONE_F_ONE_B, p, list(ms) + [10_000], 1).tolist() == \
            [list(peak_in_flight(ScheduleKind.ONE_F_ONE_B, p, m, 1)) for m in list(ms) + [10_000]]
    assert peak_in_flight(ScheduleKind.ONE_F_ONE_B, 8, 1000, 1) == (8, 7, 6, 5, 4, 3, 2, 1)
    assert peak_in_flight_rows("interleaved", 4, [4, 8], 2).tolist() == \
        [list(peak_in_flight("interleaved", 4, m, 2)) for m in (4, 8)]


# ZB-V for unequal pass times (issue 15, part 1 b): the order built by the timed greedy list
# scheduler alone stalled at its 2p memory cap, its bubble growing with m.

def _zb_v_bubble(p, m, f, b, w):
    from simulator.pipeline.makespan import flush_makespan_s
    cell = lambda x: np.full((1, p, 2), float(x))
    return float(flush_makespan_s(ScheduleKind.ZB_V, p, m, 2, cell(f), cell(b), cell(w))[0]) - m * 2 * (f + b + w)


@pytest.mark.parametrize("p, f, b, w", [(4, 1, 2, 0.5), (4, 1, 3, 0.1), (8, 1, 2, 0.5), (3, 1, 4, 1), (4, 1, 1, 1)])
def test_zb_v_bubble_does_not_grow_with_the_micro_batches(p, f, b, w):
    # a stage computes 2 (f + b + w) per micro-batch; a steady state without idle time (the
    # building block of Qi et al. 2024 runs one F, B and W of each chunk a period) keeps the
    # flush minus that work constant. Before the fix, p = 4, 1 : 2 : 0.5 gave 10, 13, 19, 31.
    bubbles = [_zb_v_bubble(p, m, f, b, w) for m in (2 * p, 4 * p, 8 * p, 16 * p)]
    for x in bubbles[1:]:
        assert x <= bubbles[0] * (1 + 1e-9) + 1e-9
    if (f, b, w) == (1, 1, 1) and p == 4:
        assert bubbles == pytest.approx([3.0] * 4)       # equal times: as before the fix


@pytest.mark.parametrize("durations", [(1.0, 2.0, 0.5), (1.0, 3.0, 0.1), (1.0, 0.5, 2.0), (1.0, 1.0, 1.0)])
@pytest.mark.parametrize("p, m", [(2, 4), (3, 9), (4, 8), (4, 24), (8, 32)])
def test_zb_v_holds_at_most_2p_chunk_activations_for_any_pass_times(p, m, durations):
    # ZB-V's claim (Qi et al. 2023, section 6): 1F1B's peak, p micro-batches = 2p chunk sets a stage
    sched = make_schedule("zb-v", p, m, durations=durations, validate=True)
    f, b, w = durations
    peak = simulate_schedule(sched, f, b, w).peak_inflight
    assert int(np.max(peak)) <= 2 * p


def test_zb_v_block_order_drawn_by_hand_p2_m2():
    # p = 2, m = 2, F = 1, B = 2, W = 0.5. Block order (period, slot): stage 0 runs F0 of k at
    # period k, F1 at k + 1, B1 at k + 1, B0 at k + 2; stage 1 F0 at k, F1 at k, B1, B0 at k + 1.
    # Stage 1: F0(0) 1-2, F1(0) 2-3, F0(1) 3-4, F1(1) 4-5, B1(0) waits for stage 0's B1(0): 6-8,
    # B0(0) 8-10, B1(1) 10-12, B0(1) 12-14, then its 4 W's to 16.
    # Stage 0: F0(0) 0-1, F0(1) 1-2, F1(0) 3-4, B1(0) 4-6, F1(1) 6-7, B1(1) 7-9, W1(0) and W1(1)
    # while B0(0) waits (9-10), B0(0) 10-12, W0(0) 12-12.5, idle, B0(1) 14-16, W0(1) 16-16.5.
    from simulator.pipeline.generators import B as B_, W as W_, zb_v_block_order
    orders, makespan = zb_v_block_order(2, 2, 1.0, 2.0, 0.5)
    assert makespan == 16.5
    assert orders[0] == [(F, 0, 0), (F, 1, 0), (F, 0, 1), (B_, 0, 1), (F, 1, 1), (B_, 1, 1), (W_, 0, 1),
                         (W_, 1, 1), (B_, 0, 0), (W_, 0, 0), (B_, 1, 0), (W_, 1, 0)]
    assert orders[1] == [(F, 0, 0), (F, 0, 1), (F, 1, 0), (F, 1, 1), (B_, 0, 1), (B_, 0, 0), (B_, 1, 1),
                         (B_, 1, 0), (W_, 0, 1), (W_, 0, 0), (W_, 1, 1), (W_, 1, 0)]
    sched = make_schedule("zb-v", 2, 2, durations=(1.0, 2.0, 0.5))
    assert simulate_schedule(sched, 1.0, 2.0, 0.5).makespan_s == pytest.approx(16.5)
