"""How fast the per-stage memory and its recomputation / offload search are.

Run: ``python benchmarks/memory_search_speed.py [--json] [--repeat N]``.

Times (median of ``--repeat`` runs, wall seconds, one process):
  * ``plan_wall_s``: ``paraplan.api.plan('llama3-70b', 'dgx-h100', 256,
    global_batch_tokens=4194304)``, the whole search;
  * ``memory_wall_s``: ``step_model.memory_parts`` called as the planner calls it (its memory
    limit, and the bound above which the end stages skip the rest of the stage model: the
    search for the fewest recomputed / offloaded layers that fit) on every batch that plan
    scores, summed; ``rows`` is their rows.

Measured on the shared 2-core development machine (noisy: +-20 %), llama3-70b / 256 H100,
89,268 rows in 6 memory batches; plan_wall_s / memory_wall_s, median of 3-5 warm runs:
  main without per-stage memory (85653fb):                       plan 0.71 s
  per-stage memory on (rows, P, V) arrays padded to the batch's
  largest p and v (9b9aa44):                                     plan 5.78 s, memory 4.69 s
  flat cells, one evaluation per distinct row, deduplicated
  probes (d8a6adb, merged with 85653fb):                         plan 0.95-1.05 s, memory 0.25 s
The cold single call of the issue's profile (``cProfile`` of one ``api.plan`` in a fresh
process): main 1.37-1.45 s, 9b9aa44 8.3-9.3 s, d8a6adb 1.88-2.23 s. What is left over main is
mostly the branch's larger space (HSDP) and its rows that fit only with partial recomputation
or offload: more rows timed and labelled (36,149 plan rows against main's 22,333).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paraplan import api  # noqa: E402
from planners import vectorized  # noqa: E402

CASE = {"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 256, "global_batch_tokens": 4194304}


def _plan():
    return api.plan(CASE["model"], CASE["cluster"], CASE["gpus"], global_batch_tokens=CASE["global_batch_tokens"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="runs (median reported)")
    args = ap.parse_args(argv)
    calls = []
    original = vectorized.memory_parts

    def capture(model, cluster, eff, batch, **kwargs):
        # every keyword the planner passes (fit limit, the end stages' drop bound, by_part) is
        # replayed as given, so the timed calls are the planner's own
        calls.append((model, cluster, eff, batch, kwargs))
        return original(model, cluster, eff, batch, **kwargs)

    vectorized.memory_parts = capture
    try:
        _plan()                               # warm up (catalogs, caches) and capture the batches
    finally:
        vectorized.memory_parts = original    # the planner unwrapped even if the plan fails
    plan_runs, memory_runs = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        _plan()
        plan_runs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for model, cluster, eff, batch, kwargs in calls:
            vectorized.memory_parts(model, cluster, eff, batch, **kwargs)
        memory_runs.append(time.perf_counter() - t0)
    out = {"case": CASE, "plan_wall_s": sorted(plan_runs)[len(plan_runs) // 2],
           "memory_wall_s": sorted(memory_runs)[len(memory_runs) // 2],
           "memory_calls": len(calls), "rows": sum(len(c[3]) for c in calls)}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"plan {out['plan_wall_s']:.2f} s wall; memory search {out['memory_wall_s']:.2f} s over "
              f"{out['memory_calls']} batches, {out['rows']:,} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
