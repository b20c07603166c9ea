"""The `simulate` command a plan prints for its best row runs and gives the plan's numbers: an
uneven layer split the search priced is asked for by name, and a zero-bubble schedule is never
offered on one stage (where `simulate` refuses it: it runs as 1F1B)."""
from __future__ import annotations

import json
import shlex

import pytest
from click.testing import CliRunner

from paraplan.cli import main
from simulator.parallel_config import Schedule
from simulator.validate_config import needs_uneven_split


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("layers, pp, vpp, schedule, uneven", [
    (61, 16, 1, Schedule.DUALPIPE, True),        # DeepSeek-V3 on DualPipe's 2 x 16 chunks: 61 % 32 = 29
    (60, 15, 1, Schedule.ZB_V, False),           # 60 % 30 = 0
    (61, 8, 1, Schedule.ONE_F_ONE_B, False),     # plain 1F1B stages may differ by a layer
    (80, 4, 5, Schedule.INTERLEAVED, False),     # 80 % 20 = 0
    (126, 8, 2, Schedule.INTERLEAVED, False),    # 126 % 16 = 14, but 126 + 2 = 128 % 16 = 0
    (61, 4, 2, Schedule.INTERLEAVED, True),      # 61 % 8 = 5 and 63 % 8 = 7
])
def test_which_pipelines_need_an_uneven_split(layers, pp, vpp, schedule, uneven):
    assert needs_uneven_split(layers, pp, vpp, schedule) is uneven
    assert needs_uneven_split(layers, pp, vpp, schedule.value) is uneven


def _best_command(out: str) -> list[str]:
    block = out.split("best plan as one run", 1)[1].split("\n", 1)[1]
    lines = []
    for line in block.splitlines():
        lines.append(line.rstrip(" \\").strip())
        if not line.rstrip().endswith("\\"):
            break
    return shlex.split(" ".join(lines))[1:]          # drop "paraplan"


def test_dualpipe_on_61_layers_prints_a_command_that_reproduces_the_plan():
    args = ["-m", "deepseek-v3", "-c", "h800-node", "-n", 1024, "--global-batch", 2048, "--schedule", "dualpipe"]
    shown = run("plan", *args)
    assert shown.exit_code == 0, shown.output
    command = _best_command(shown.output)
    assert "--uneven-layers" in command
    best = json.loads(run("plan", *args, "--json").output)["plans"][0]
    again = run(*command, "--json")
    assert again.exit_code == 0, again.output
    report = json.loads(again.output)
    assert report["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-9)


@pytest.mark.parametrize("schedule", ["zb-h1", "zb-h2", "zb-v"])
def test_a_zero_bubble_schedule_is_never_planned_on_one_stage(schedule):
    out = run("plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", 16, "--global-batch", 64, "--schedule", schedule,
              "--top", 15, "--json")
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    plans = result["plans"]
    assert plans and all(p["pp"] > 1 and p["schedule"] == schedule for p in plans)
    assert result["pruned"]["one_stage"] > 0
