"""``simulator.pipeline.bubble_fraction_closed_form`` refuses what its formulas do not cover, with
one ``InputError`` line, instead of returning nan, a negative share, a 0 the event simulation
contradicts, or raising ZeroDivisionError."""
import math

import numpy as np
import pytest

from hardware_specs.errors import InputError
from simulator.pipeline import bubble_fraction_closed_form as bf
from simulator.pipeline import make_schedule, simulate_schedule


@pytest.mark.parametrize("args, kw, field", [
    (("zb-h1", 4, 8), {"t_f": math.nan}, "t_f"),
    (("1f1b", 4, 8), {"t_b": math.inf}, "t_b"),
    (("zb-h1", 4, 8), {"t_w": -1.0}, "t_w"),
    (("zb-h1", 4, 8), {"t_b": "1"}, "t_b"),
    (("zb-h1", 4, 8), {"t_f": True}, "t_f"),
    (("zb-h1", 4, 8), {"t_f": 0.0, "t_b": 0.0, "t_w": 0.0}, "t_f"),
    (("1f1b", 4, 8), {"t_f": 0.0, "t_b": 0.0, "t_w": 0.0}, "t_f"),
    # t_w 5 > t_f + t_b: the ZB-H1 form gave (3 x -3) / (8 x 7 - 9) = -0.19
    (("zb-h1", 4, 8), {"t_w": 5.0}, "t_w"),
    # 1 < t_w 1.5 <= t_f + t_b: the form gave 0.051, the event simulation idles 0.097
    (("zb-h1", 4, 8), {"t_w": 1.5}, "t_w"),
    (("zb-h2", 4, 8), {"t_b": 0.5, "t_w": 0.8}, "t_w"),
    # m below the forms' range: ZB-H1 m 3 < p 4 (0.25 vs the simulation's 0.31), ZB-H2 m 2 < 2p - 1
    (("zb-h1", 4, 3), {}, "m"),
    (("zb-h2", 2, 2), {}, "m"),
])
def test_out_of_range_inputs_are_one_line_input_errors(args, kw, field):
    with pytest.raises(InputError) as err:
        bf(*args, **kw)
    assert err.value.field == field and "\n" not in str(err.value), str(err.value)
    assert str(err.value).startswith(f"{field}: ")


def test_the_edges_of_the_range_still_match_the_event_simulation():
    """ZB-H1 at m = p and t_w = min(t_f, t_b); ZB-H2 at m = 2p - 1 with equal passes (its
    steady-state form, 0); 1F1B with t_w 0 (times unused): (p-1)/(m+p-1) = 3/11."""
    zb1 = simulate_schedule(make_schedule("zb-h1", 4, 4), 1.0, 1.0, 1.0)
    assert bf("zb-h1", 4, 4) == pytest.approx(zb1.bubble_fraction, abs=1e-12)
    assert bf("zb-h1", 4, 4) == pytest.approx(3 * 1.0 / (4 * 3 + 3 * 1.0))
    zb2 = simulate_schedule(make_schedule("zb-h2", 4, 7), 1.0, 1.0, 1.0)
    assert bf("zb-h2", 4, 7) == 0.0 == pytest.approx(zb2.pipelined_bubble_fraction, abs=1e-12)
    assert bf("1f1b", 4, 8, t_w=0.0) == pytest.approx(3 / 11)
    assert bf("zb-h1", 4, 8, 1, np.float64(1.0), np.float32(1.2), 0.8) == pytest.approx(
        3 * 1.4 / (8 * 3.0 + 3 * 1.4), rel=1e-6)
