"""Wall time to generate and event-simulate every pipeline schedule at p=64 stages, m=512 micro-batches.

Run: ``python benchmarks/pipeline_speed.py [p] [m]``. Generation is memoised by make_schedule, so
the simulate column is what a planner pays per evaluation of new stage timings.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.pipeline import ScheduleKind, make_schedule, simulate_schedule  # noqa: E402


def main(p: int = 64, m: int = 512) -> None:
    print(f"p={p} stages, m={m} micro-batches (F=B=W=1 ms per 1F1B-sized stage, split over the chunks)")
    print(f"{'schedule':12s} {'v':>2s} {'ops':>8s} {'generate_s':>11s} {'simulate_s':>11s} {'bubble':>8s}")
    for kind in ScheduleKind:
        t0 = time.perf_counter()
        schedule = make_schedule(kind, p, m)
        t1 = time.perf_counter()
        chunk_s = 1e-3 * p / schedule.path_length        # a chunk holds p / path_length of a stage's layers
        result = simulate_schedule(schedule, chunk_s, chunk_s, chunk_s)
        t2 = time.perf_counter()
        print(f"{kind.value:12s} {schedule.v:2d} {schedule.n_ops:8d} {t1 - t0:11.3f} {t2 - t1:11.3f} "
              f"{100 * result.bubble_fraction:7.2f}%")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
