"""DualPipe's closed-form bubble (``step_pipeline.bubble_closed_form_s``) as DeepSeek-V3's
table 2 (arXiv 2412.19437) means it: (p/2-1)(F&B + B - 3W) with B the whole backward b + w, as
in the table's 1F1B line (p-1)(F+B). It had B = b and F&B = f + b: 0 for p 8 and f = b = w = 1,
so the planner's estimate (48) fell below the event simulation's flush (51)."""
import numpy as np
import pytest

from simulator.pipeline import make_schedule, simulate_schedule
from simulator.pipeline.makespan import flush_makespan_s
from simulator.pipeline.schedules import ScheduleKind
from simulator.step_pipeline import bubble_closed_form_s, even_estimate_s

ONE = np.array([1.0])


def test_table_2_bubble_for_equal_passes():
    """p 8, f = b = w = 1: F&B = f + b + w = 3, B = b + w = 2, (8/2 - 1)(3 + 2 - 3) = 6; the
    estimate 16 x 3 + 6 = 54 is above the event simulation's 51 (48 of work and 3 idle)."""
    assert bubble_closed_form_s(ScheduleKind.DUALPIPE, 8, 2, ONE, ONE, ONE)[0] == pytest.approx(6.0)
    est = even_estimate_s(ScheduleKind.DUALPIPE, 8, 16, 2, ONE, ONE, ONE)[0]
    assert est == pytest.approx(54.0)
    assert simulate_schedule(make_schedule("dualpipe", 8, 16), 1.0, 1.0, 1.0).makespan_s == pytest.approx(51.0)


def test_table_2_bubble_with_a_heavier_backward():
    """p 4, f 1, b 2, w 0.5: (4/2 - 1)(f + 2b - w) = 1 + 4 - 0.5 = 4.5 (the fill terms f + b = 3
    and 2f - w = 1.5 are smaller); one stage pair, p 2, has none."""
    f, b, w = np.array([1.0]), np.array([2.0]), np.array([0.5])
    assert bubble_closed_form_s(ScheduleKind.DUALPIPE, 4, 2, f, b, w)[0] == pytest.approx(4.5)
    assert bubble_closed_form_s(ScheduleKind.DUALPIPE, 2, 2, f, b, w)[0] == 0.0


@pytest.mark.parametrize("p", [2, 4, 6, 8, 12, 16, 24])
def test_estimate_never_below_the_event_makespan(p):
    """Equal cells at random (f, b, w), w = 0 on some: the estimate bounds the DAG makespan from
    above for every even m from 2p (the schedule's least) to 8p."""
    rng = np.random.default_rng(p)
    rows = 200
    f = rng.uniform(0.05, 4.0, rows)
    b = rng.uniform(0.05, 4.0, rows)
    w = rng.uniform(0.0, 4.0, rows)
    w[:20] = 0.0
    grid = lambda x: np.broadcast_to(x[:, None, None], (rows, p, 2))   # noqa: E731
    for m in sorted({2 * p, 2 * p + 2, 3 * p + (3 * p) % 2, 4 * p, 8 * p}):
        exact = flush_makespan_s(ScheduleKind.DUALPIPE, p, m, 2, grid(f), grid(b), grid(w))
        upper = even_estimate_s(ScheduleKind.DUALPIPE, p, m, 2, f, b, w)
        assert (exact <= upper * (1 + 1e-12)).all(), (m, (exact - upper).max())
