"""The DAG makespan of a flush (``simulator.pipeline.makespan``): the level-by-level sweep equals
the event simulation op for op, a hand-derived 1F1B flush, and the memo of swept rows gives the
very numbers a fresh sweep gives."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.pipeline import makespan
from simulator.pipeline.event_sim import sweep
from simulator.pipeline.makespan import SHARED_RATIOS, _flush, _sweep, candidate_orders, flush_makespan_s, order_durations, stage_work_s
from simulator.pipeline.schedules import ScheduleKind, make_schedule

CASES = [(ScheduleKind.GPIPE, 3, 5, 1), (ScheduleKind.ONE_F_ONE_B, 4, 7, 1), (ScheduleKind.INTERLEAVED, 3, 6, 2),
         (ScheduleKind.ZB_H1, 4, 6, 1), (ScheduleKind.ZB_H2, 3, 8, 1), (ScheduleKind.ZB_V, 3, 6, 2),
         (ScheduleKind.DUALPIPE, 4, 8, 2), (ScheduleKind.DUALPIPE_V, 3, 6, 2)]


def _cells(p, v, rows=5, seed=0):
    rng = np.random.default_rng(seed)
    f = rng.uniform(0.5, 2.0, (rows, p, v))
    return f, f * rng.uniform(1.0, 3.0, (rows, p, v)), f * rng.uniform(0.0, 1.5, (rows, p, v))


@pytest.mark.parametrize("kind,p,m,v", CASES)
def test_level_sweep_equals_the_event_simulation_of_every_row_exactly(kind, p, m, v):
    f, b, w = _cells(p, v)
    table = np.stack([f, b, w, b + w]).reshape(4, len(f), p * v)
    durations = tuple(float(x) for x in order_durations(kind, f, b, w)[0])
    rows = np.flatnonzero((order_durations(kind, f, b, w) == durations).all(axis=1))
    got = _sweep(kind, p, m, v, table[:, rows], durations)
    s = make_schedule(kind, p, m, v, durations=durations)
    cell = s.op_stage * v + s.op_chunk.astype(np.int64)
    for i, r in enumerate(rows):
        _, end = sweep(s, table[s.op_kind.astype(np.int64), r, cell], np.zeros(s.n_ops))
        assert got[i] == end.max()          # same max and add, in dependency order: bit for bit


def test_1f1b_flush_of_equal_stages_is_m_plus_p_minus_1_passes():
    # 1F1B, p = 4 equal stages, m = 6, f = 1, b = 2, w = 0.5 (fused BW = 2.5): the makespan is
    # (m + p - 1) (f + b + w) = 9 * 3.5 = 31.5 s (Narayanan et al. 2021, section 2.2)
    p, m = 4, 6
    f = np.ones((1, p, 1))
    assert flush_makespan_s("1f1b", p, m, 1, f, 2 * f, 0.5 * f)[0] == pytest.approx(31.5, rel=1e-12)


@pytest.mark.parametrize("kind,p,m,v", [(ScheduleKind.ONE_F_ONE_B, 3, 40, 1), (ScheduleKind.INTERLEAVED, 2, 4, 2),
                                        (ScheduleKind.ZB_V, 2, 30, 2)])
def test_memo_returns_what_a_fresh_sweep_gives_for_repeated_seen_and_new_rows(kind, p, m, v):
    makespan._MEMO.clear()
    f, b, w = _cells(p, v, rows=8, seed=1)
    first = flush_makespan_s(kind, p, m, v, f[:4], b[:4], w[:4])
    # rows 2, 3 seen before, 4..7 new, row 5 twice
    pick = np.array([3, 5, 2, 5, 4, 6, 7])
    again = flush_makespan_s(kind, p, m, v, f[pick], b[pick], w[pick])
    makespan._MEMO.clear()
    fresh = np.array([flush_makespan_s(kind, p, m, v, f[i:i + 1], b[i:i + 1], w[i:i + 1])[0] for i in range(8)])
    makespan._MEMO.clear()
    assert first.tolist() == fresh[:4].tolist()
    assert again.tolist() == fresh[pick].tolist()
    # and what the unmemoised function gives: the shortest flush over the candidate orders
    table = np.stack([f, b, w, b + w]).reshape(4, 8, p * v)
    candidates = candidate_orders(kind, f, b, w)
    for i in range(8):
        direct = min(float(_flush(kind, p, m, v, table[:, i:i + 1], tuple(key),
                                  stage_work_s(kind, f[i:i + 1], b[i:i + 1], w[i:i + 1]))[0])
                     for key in candidates[i])
        assert direct == fresh[i]


def test_memo_stays_bounded(monkeypatch):
    monkeypatch.setattr(makespan, "MEMO_ROWS", 5)
    monkeypatch.setattr(makespan, "MEMO_KEYS", 2)
    makespan._MEMO.clear()
    f, b, w = _cells(2, 1, rows=7, seed=2)
    key = (ScheduleKind.ONE_F_ONE_B, 2, 5, 1, (1.0, 1.0, 1.0))
    flush_makespan_s("1f1b", 2, 5, 1, f[:3], b[:3], w[:3])
    assert len(makespan._MEMO[key][0]) == 3
    flush_makespan_s("1f1b", 2, 5, 1, f[3:], b[3:], w[3:])      # 3 + 4 rows > 5: this call's 4 only
    assert len(makespan._MEMO[key][0]) == 4
    for m in (3, 4):
        flush_makespan_s("1f1b", 2, m, 1, f, b, w)
    assert list(makespan._MEMO) == [(ScheduleKind.ONE_F_ONE_B, 2, m, 1, (1.0, 1.0, 1.0)) for m in (3, 4)]
    makespan._MEMO.clear()


@pytest.mark.parametrize("kind,p,m,v", CASES + [(ScheduleKind.ONE_F_ONE_B, 13, 40, 1), (ScheduleKind.ONE_F_ONE_B, 16, 3, 1),
                                                (ScheduleKind.ZB_V, 5, 30, 2), (ScheduleKind.DUALPIPE, 6, 24, 2)])
def test_level_by_level_depths_equal_the_unit_event_sweep_op_for_op(kind, p, m, v, monkeypatch):
    # the depths found a level at a time (from LEVEL_STEP_MIN_STAGES stages, here from one) are
    # the unit-duration event sweep's end times less one, on every schedule kind
    monkeypatch.setattr(makespan, "LEVEL_STEP_MIN_STAGES", 1)
    s = make_schedule(kind, p, m, v)
    _, end = sweep(s, np.ones(s.n_ops), np.zeros(s.n_ops))
    assert np.array_equal(makespan._depths(s), np.rint(end).astype(np.int64) - 1)


def test_a_planner_sized_1f1b_flush_gets_the_sweeps_depths_by_levels():
    s = make_schedule(ScheduleKind.ONE_F_ONE_B, 30, 120, 1)
    assert s.p >= makespan.LEVEL_STEP_MIN_STAGES
    _, end = sweep(s, np.ones(s.n_ops), np.zeros(s.n_ops))
    assert np.array_equal(makespan._depths(s), np.rint(end).astype(np.int64) - 1)


def test_a_faster_link_never_lengthens_a_zero_bubble_v_step():
    # the order ZB-V's list scheduler builds for W/F = 0.75 was worse than the one for 0.625, so
    # 200 -> 300 Gb/s took Llama-4-Scout on 32 A100 from 14.93 to 15.19 s; the flush is now the
    # shortest over the orders for the row's ratios and their neighbours. (That run was ZeRO-2;
    # Megatron-Core runs no ZeRO-2/3 under a pipeline, lacks zero2_with_pipeline, so the layout
    # is checked with its distributed optimizer, ZeRO-1: 14.63, 14.60, 14.58, 14.56 s.)
    from paraplan import api
    kw = dict(model="llama4-scout", cluster="dgx-a100-80gb", gpus=32, tp=2, pp=4, ep=2, etp=2, global_batch=64,
              zero_stage=1, recompute="selective", moe_load_imbalance=1.5, seq_len=8192, schedule="zb-v")
    steps = [float(api.simulate(**kw, scaleout_gbit_per_s=bw)["step_time_s"].iloc[0]) for bw in (200, 300, 400, 800)]
    assert all(a >= b for a, b in zip(steps, steps[1:])), steps


@pytest.mark.parametrize("kind", [ScheduleKind.ZB_H2, ScheduleKind.ZB_V])
def test_a_list_scheduled_flush_is_the_shortest_of_its_candidate_orders_and_never_longer_than_its_own(kind):
    p, m = 4, 24
    v = 2 if kind == ScheduleKind.ZB_V else 1
    f, b, w = _cells(p, v, rows=6, seed=4)
    cand = candidate_orders(kind, f, b, w)
    assert cand.shape == (6, 1 + len(SHARED_RATIOS), 3)
    assert np.array_equal(cand[:, 0], order_durations(kind, f, b, w))
    table = np.stack([f, b, w, b + w]).reshape(4, 6, p * v)
    got, chosen = flush_makespan_s(kind, p, m, v, f, b, w, with_order=True)
    for i in range(6):
        own = _sweep(kind, p, m, v, table[:, i:i + 1], tuple(float(x) for x in cand[i, 0]))[0]
        each = [_sweep(kind, p, m, v, table[:, i:i + 1], tuple(float(x) for x in key))[0] for key in cand[i]]
        assert got[i] == min(each) <= own
        assert _sweep(kind, p, m, v, table[:, i:i + 1], tuple(float(x) for x in chosen[i]))[0] == got[i]


def test_the_distinct_orders_of_a_flush_are_np_uniques_rows_bit_for_bit():
    """The shortcut for a batch of one pass-time ratio returns what ``np.unique(axis=0)`` does;
    rows that differ (in value, in the sign of a zero, or a NaN that equals nothing) take unique."""
    from simulator.pipeline.makespan import _distinct_orders
    rng = np.random.default_rng(0)
    cases = [np.ones((1, 3)), np.tile([[1.0, 0.5, 0.25]], (7, 1)), np.array([[1, .5, .25], [1, .5, .5]]),
             np.zeros((0, 3)), np.array([[0.0, 1, 1], [-0.0, 1, 1]]), np.array([[np.nan, 1, 1]] * 2),
             np.repeat(rng.random((3, 3)), 4, axis=0), np.repeat(np.ones((4, 1, 3)), 3, axis=1)[:, 1]]
    for orders in cases:
        want, got = np.unique(orders, axis=0), _distinct_orders(orders)
        assert got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes()
