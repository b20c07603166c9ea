"""``plots.pareto`` / ``paraplan plot pareto`` draw ``plan --pareto``'s frontier, every point of
it the exact time ``simulate`` gives, and say what the grey cloud is (estimated pipeline times;
how many of the fitting plans the table keeps). The frontier drew undominated plans under half
the fastest's tokens/s that the planner never timed exactly: llama3-8b on 16 H100 at a batch of
64 had 5 estimated frontier points, llama3-70b on 1,024 H100 drew one at 514,571 tok/s that
``simulate`` runs at 541,130."""
from __future__ import annotations

import pandas as pd
import pytest

from paraplan import api, plots
from planners.plan import plan as planner_plan

MODEL, CLUSTER, GPUS, BATCH = "llama3-8b", "dgx-h100", 16, 64


@pytest.fixture(scope="module")
def plans():
    return api.plan(MODEL, CLUSTER, GPUS, global_batch=BATCH)


def _frontier_points(fig):
    ax = fig.axes[0]
    pts = []
    for line in ax.lines:
        if str(line.get_label()).startswith(("Pareto frontier", "frontier, estimated")):
            pts += list(zip(line.get_xdata(), line.get_ydata()))
    return sorted(pts)


def test_the_frontier_is_plan_pareto_and_every_point_is_exact(plans):
    fig = plots.pareto(plans)
    drawn = _frontier_points(fig)
    # the table `paraplan plan --pareto` prints (PlanResult.pareto("memory"))
    table = planner_plan(MODEL, CLUSTER, GPUS, global_batch=BATCH).pareto("memory", detailed=True)
    expected = sorted(zip(table.memory_gib, table.tokens_per_s))
    assert len(drawn) == len(expected)
    # flat lists: pytest 9.2's approx refuses a list of tuples
    assert [v for p in drawn for v in p] == pytest.approx([v for p in expected for v in p], rel=1e-12)
    assert table.pipeline_exact.all()
    # each drawn point is a plan the planner timed exactly, and simulate agrees with it
    on = plans.set_index(["memory_gib", "tokens_per_s"]).loc[drawn]
    assert on.pipeline_exact.astype(bool).all()
    # the slowest frontier point (the one an estimate is most likely to be) re-simulated
    row = plans.loc[plans.tokens_per_s == min(t for _, t in drawn)].iloc[0]
    fields = [k for k in api.CONFIG_FIELDS if k in plans.columns]
    sim = api.simulate(MODEL, CLUSTER, gpus=GPUS, **{k: (row[k].item() if hasattr(row[k], "item") else row[k])
                                                    for k in fields}).iloc[0]
    assert sim.tokens_per_s == pytest.approx(row.tokens_per_s, rel=1e-9)
    # the planner's floor: no frontier point at or under half the fastest plan's tokens/s
    assert min(t for _, t in drawn) > 0.5 * plans.tokens_per_s.max()
    labels = [str(t.get_text()) for t in fig.axes[0].get_legend().get_texts()]
    assert any(lab.startswith(f"Pareto frontier ({len(table)}") for lab in labels), labels


def test_the_cloud_says_it_is_estimated_and_when_it_was_cut():
    # hand-made table: 4 plans, two of them with an estimated pipeline time, of 100 that fit
    df = pd.DataFrame({"memory_gib": [10.0, 20.0, 30.0, 25.0], "tokens_per_s": [80.0, 100.0, 90.0, 60.0],
                       "pipeline_exact": [True, True, False, False], "config": list("abcd")})
    df.attrs["fitting"] = 100
    labels = [str(t.get_text()) for t in plots.pareto(df).axes[0].get_legend().get_texts()]
    other = next(lab for lab in labels if lab.startswith("other plans"))
    assert "estimated pipeline time" in other and "4 of 100 fitting plans drawn" in other, other
    assert any(lab.startswith("Pareto frontier (2") for lab in labels), labels


def test_a_frontier_point_with_an_estimated_time_is_named_so():
    df = pd.DataFrame({"memory_gib": [10.0, 20.0], "tokens_per_s": [80.0, 100.0],
                       "pipeline_exact": [False, True], "config": ["a", "b"]})
    labels = [str(t.get_text()) for t in plots.pareto(df).axes[0].get_legend().get_texts()]
    assert any(lab.startswith("frontier, estimated pipeline time (1)") for lab in labels), labels


def test_a_one_stage_plan_is_not_counted_as_estimated():
    # pp 1: the flush is the stage's passes in sequence, which the closed form gives exactly, so
    # a pp=1 row the planner left pipeline_exact False is not an estimate; of the three grey
    # rows with pipeline_exact False only the pp=2 one is
    df = pd.DataFrame({"memory_gib": [10.0, 20.0, 30.0, 25.0, 40.0, 35.0],
                       "tokens_per_s": [80.0, 100.0, 90.0, 60.0, 120.0, 70.0],
                       "pipeline_exact": [True, True, False, False, True, False],
                       "pp": [1, 1, 1, 2, 2, 1], "vpp": [1, 1, 1, 1, 1, 1], "config": list("abcdef")})
    labels = [str(t.get_text()) for t in plots.pareto(df).axes[0].get_legend().get_texts()]
    other = next(lab for lab in labels if lab.startswith("other plans"))
    assert other == "other plans (3; 1 with estimated pipeline time)", other
    # a one-stage frontier point with pipeline_exact False is drawn as exact
    front = pd.DataFrame({"memory_gib": [10.0, 20.0], "tokens_per_s": [80.0, 100.0],
                          "pipeline_exact": [False, True], "pp": [1, 2], "config": ["a", "b"]})
    labels = [str(t.get_text()) for t in plots.pareto(front).axes[0].get_legend().get_texts()]
    assert not any(lab.startswith("frontier, estimated") for lab in labels), labels
