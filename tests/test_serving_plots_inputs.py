"""``serving_plots.serving_pareto`` checks what it is given, as ``paraplan.plots`` does: a
``ServingPlan`` is drawn by its front, and a bad front, TPOT or path is an ``InputError`` naming
it (it raised TypeError, AttributeError, KeyError or FileNotFoundError, or drew a line at a
negative speed)."""
from __future__ import annotations

import pandas as pd
import pytest

from hardware_specs.errors import InputError
from paraplan.serving_plots import serving_pareto
from planners.serving.search import ServingPlan

FRONT = pd.DataFrame({"mode": ["agg", "agg", "disagg"], "tokens_per_s_per_user": [20.0, 50.0, 40.0],
                      "tokens_per_s_per_gpu": [3000.0, 1000.0, 2500.0]})


def _refused(field: str, front=FRONT, path=None, **kw) -> InputError:
    with pytest.raises(InputError) as exc:
        serving_pareto(front, path, **kw)
    assert exc.value.field == field, str(exc.value)
    return exc.value


def test_a_tpot_that_is_not_a_positive_number_is_refused():
    _refused("tpot_ms", tpot_ms="20")
    _refused("tpot_ms", tpot_ms=True)
    for bad in (-5, 0, float("nan"), float("inf")):
        _refused("tpot_ms", tpot_ms=bad)


def test_a_tpot_of_20_ms_draws_its_line_at_50_tokens_per_s_per_user():
    ax = serving_pareto(FRONT, tpot_ms=20).axes[0]
    slo = [ln for ln in ax.get_lines() if ln.get_label() == "TPOT 20 ms"]
    assert len(slo) == 1 and list(slo[0].get_xdata()) == [50.0, 50.0]       # 1000 ms / 20 ms


def test_what_is_not_a_serving_front_is_refused_naming_front():
    _refused("front", front=[1, 2, 3])
    training_plans = pd.DataFrame({"config": ["tp8"], "memory_gib": [40.0], "tokens_per_s": [1e5]})
    assert "'mode'" in str(_refused("front", front=training_plans))


def test_a_serving_plan_is_drawn_by_its_front():
    plan = ServingPlan(candidates=FRONT, front=FRONT, best=None)
    ax = serving_pareto(plan).axes[0]
    agg = next(ln for ln in ax.get_lines() if ln.get_label() == "aggregated")
    assert list(agg.get_xdata()) == [20.0, 50.0] and list(agg.get_ydata()) == [3000.0, 1000.0]


def test_a_path_in_a_missing_folder_is_refused_before_drawing(tmp_path):
    assert "does not exist" in str(_refused("path", path=tmp_path / "nope" / "front.png"))
    serving_pareto(FRONT, tmp_path / "front.png", tpot_ms=20)
    assert (tmp_path / "front.png").stat().st_size > 0
