"""``simulate --uneven-layers`` and the published-runs rules say what ``simulator.stage_layout``
does with layers that do not divide: ceil(L / stages) a stage, the shortfall taken one layer at
a time from the ends inwards. They said "first and last stages one layer lighter", which 24
layers on 5 stages (5,5,5,5,4: the first is not lighter) or on 7 (3,3,4,4,4,3,3: two a side)
contradict. The examples in the texts are checked against the code."""
import re

from click.testing import CliRunner

from paraplan.cli import main
from paraplan.validation import published
from simulator.pipeline.schedules import ScheduleKind
from simulator.stage_layout import position_layers


def _layers(layers, stages):
    return position_layers(ScheduleKind.ONE_F_ONE_B, stages, 1, layers)[0].tolist()


def test_the_help_examples_are_the_layouts_the_simulator_prices():
    text = " ".join(CliRunner().invoke(main, ["simulate", "--help"]).output.split())
    start = text.index("--uneven-layers")
    help_ = text[start:text.index("--pipeline-layout", start)]
    assert "one layer lighter" not in help_ and "ends inwards" in help_
    m = re.search(r"(\d+) layers on (\d+) stages are ([\d,]+); on (\d+) stages ([\d,]+)", help_)
    assert m, help_
    layers = int(m.group(1))
    for stages, shown in ((int(m.group(2)), m.group(3)), (int(m.group(4)), m.group(5))):
        assert [int(x) for x in shown.split(",")] == _layers(layers, stages)
    assert _layers(24, 5) == [5, 5, 5, 5, 4] and _layers(24, 7) == [3, 3, 4, 4, 4, 3, 3]


def test_the_published_rules_state_the_same_layout():
    doc = " ".join(published.__doc__.split())
    assert "one layer lighter" not in doc
    m = re.search(r"(\d+) layers on (\d+) stages are (\d+), (\d+) x (\d+), (\d+)", doc)
    assert m, doc
    L, p, a, mid, n, z = (int(x) for x in m.groups())
    assert _layers(L, p) == [a] + [mid] * n + [z] == [7] + [8] * 14 + [7]
