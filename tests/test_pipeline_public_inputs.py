"""``make_schedule`` / ``simulate_schedule`` (public API) answer bad input with one InputError
line naming the field: a duration that is no number had been reported as a shape error, the
order durations 5 / 'abc' raised TypeError / ValueError, and p, m had no upper bound (1F1B over
5,000 stages and micro-batches ran out of memory; ZB-H2 over 300 x 600 took 15 s)."""
import time

import pytest

from hardware_specs.errors import InputError
from simulator.pipeline import make_schedule, simulate_schedule
from simulator.pipeline.makespan import MAX_LIST_SCHEDULED_FLUSH_OPS, MAX_SWEPT_FLUSH_OPS


def _one_line(err, field):
    assert err.value.field == field and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("durations", [5, "abc", (1.0, 2.0), (1.0, "x", 1.0), (1.0, True, 1.0),
                                       (1.0, float("nan"), 1.0), (0.0, 1.0, 1.0)])
def test_order_durations_must_be_three_positive_numbers(durations):
    with pytest.raises(InputError) as err:
        make_schedule("zb-h2", 4, 8, durations=durations)
    _one_line(err, "durations")


@pytest.mark.parametrize("kind, p, m, field", [
    ("1f1b", 5000, 5000, "m"),      # 3 x 5,000 x 5,000 = 75 M operations > 13 M
    ("zb-h2", 300, 600, "m"),       # 3 x 300 x 600 = 540,000 > 300,000
    ("gpipe", 5_000_000, 1, "p"),   # 15 M > 13 M even at m = 1
    ("zb-v", 200, 400, "m"),        # 3 x 200 x 2 x 400 = 480,000 > 300,000
])
def test_a_flush_beyond_the_step_models_limit_is_refused_at_once(kind, p, m, field):
    t0 = time.perf_counter()
    with pytest.raises(InputError) as err:
        make_schedule(kind, p, m)
    assert time.perf_counter() - t0 < 0.5
    _one_line(err, field)


def test_the_limit_is_the_step_models_and_a_flush_within_it_is_built():
    """The refusal starts one micro-batch past the limit: ZB-H2 over 100 stages x 1,000
    micro-batches is 3 x 100 x 1,000 = 300,000 counted operations, the list-scheduled limit
    exactly, 1,001 is over; 1F1B over 1,000 stages stops at m = 4,333 (12,999,000 <= 13 M).
    A flush within it is built whole: 1F1B p 8 m 16 runs F and a fused BW, 2 x 8 x 16 ops."""
    from simulator.pipeline.schedules import _check_size, ScheduleKind
    assert 3 * 100 * 1000 == MAX_LIST_SCHEDULED_FLUSH_OPS
    _check_size(ScheduleKind.ZB_H2, 100, 1000, 1)
    with pytest.raises(InputError):
        make_schedule("zb-h2", 100, 1001)
    assert 3 * 1000 * 4333 <= MAX_SWEPT_FLUSH_OPS < 3 * 1000 * 4334
    _check_size(ScheduleKind.ONE_F_ONE_B, 1000, 4333, 1)
    with pytest.raises(InputError):
        make_schedule("1f1b", 1000, 4334)
    assert len(make_schedule("1f1b", 8, 16).op_kind) == 2 * 8 * 16


@pytest.mark.parametrize("kw, field", [
    ({"f_time_s": "abc"}, "f_time_s"), ({"b_time_s": None}, "b_time_s"), ({"w_time_s": True}, "w_time_s"),
    ({"f_time_s": "1.5"}, "f_time_s"), ({"p2p_time_s": "x"}, "p2p_time_s"),
    ({"f_time_s": [1.0, 2.0, 3.0]}, "f_time_s"),      # a real shape error still says shape
])
def test_simulate_schedule_names_a_duration_that_is_no_number(kw, field):
    times = dict(f_time_s=1.0, b_time_s=1.0, w_time_s=1.0)
    times.update(kw)
    with pytest.raises(InputError) as err:
        simulate_schedule(make_schedule("1f1b", 4, 8), **times)
    _one_line(err, field)
    number = not isinstance(next(iter(kw.values())), list)
    assert ("must be a number" in err.value.message) == number, str(err.value)


def test_numbers_of_every_kind_still_simulate():
    """1F1B p 4 m 8, f 1, b 1 (a (p, 1) column), w 0: (m + p - 1)(f + b) = 22."""
    s = make_schedule("1f1b", 4, 8)
    assert simulate_schedule(s, 1, [[1.0]] * 4, 0).makespan_s == pytest.approx(22.0)


def test_make_schedule_counts_every_micro_batch_and_gpipe_unlike_the_step_models_capped_flush():
    """1F1B over 1,024 stages and 5,000 micro-batches: 3 x 1,024 x 5,000 = 15,360,000 operations to
    build directly, over the 13,000,000 limit; the step model builds m_cap = 4,096 of them
    (12,582,912) and passes. GPipe over 1,024 x 5,000 is refused here, passed by the step model."""
    from simulator.pipeline.makespan import flush_ops, flush_within_limit
    assert int(flush_ops("1f1b", 1024, 5000, 1, capped=False)) == 15_360_000
    assert int(flush_ops("1f1b", 1024, 5000, 1)) == 12_582_912 and bool(flush_within_limit("1f1b", 1024, 5000, 1))
    for kind in ("1f1b", "gpipe"):
        with pytest.raises(InputError, match="is 15,360,000 operations, over the 13,000,000") as err:
            make_schedule(kind, 1024, 5000)
        assert err.value.field == "m" and "use m <= 4,231 at p=1024" in err.value.fix
    assert bool(flush_within_limit("gpipe", 1024, 5000, 1))
    # interleaved counts its v chunks: 3 x 512 x 2 x 2,560 = 7,864,320 > 6,500,000
    with pytest.raises(InputError, match="512 stages x 2 chunk\\(s\\) and m=2560 micro-batches is 7,864,320"):
        make_schedule("interleaved", 512, 2560, v=2)
