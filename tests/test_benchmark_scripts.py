"""The benchmark scripts still drive the code they time (speed itself is never asserted here:
targets live in the scripts). ``benchmarks/memory_search_speed.py`` wraps the planner's
``memory_parts`` and replays its calls; when the planner began passing a keyword the wrapper did
not take, the script stopped on a TypeError and nothing noticed."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

from planners import vectorized

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_memory_search_benchmark_replays_the_planners_own_calls_and_restores_the_planner(capsys):
    bench = _load("memory_search_speed")
    original = vectorized.memory_parts
    assert bench.main(["--json", "--repeat", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert vectorized.memory_parts is original          # the wrapper is taken out again
    assert out["memory_calls"] >= 1 and out["rows"] >= out["memory_calls"]
    assert np.isfinite(out["plan_wall_s"]) and out["plan_wall_s"] > 0 and out["memory_wall_s"] > 0


def test_schedule_comparison_runs_from_anywhere_and_prints_one_row_per_schedule(tmp_path):
    """It passed the StepReport where ``pipeline_timeline`` takes the cluster (AttributeError
    'StepReport' has no attribute 'efficiency'), and without the repository on ``sys.path`` it
    imported whichever tree was installed."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "schedule_comparison.py"),
                           "--tp", "1", "--pp", "4", "--dp", "1", "--global-batch", "16",
                           "--model", "llama3-8b", "--cluster", "dgx-a100-80gb"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    bench = _load("schedule_comparison")
    rows = [line.split()[0] for line in proc.stdout.splitlines()[2:] if line.strip()]
    assert rows == [name for name, _ in bench.SCHEDULES]
