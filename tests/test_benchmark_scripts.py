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
