"""How long ``serve plan`` takes over its full space for a 671B MoE (DeepSeek-R1) on 64 GPUs.

Target (issue 16): under 2 s for the whole search, aggregated and disaggregated, on the
project's reference machine. Run: ``python benchmarks/serve_plan_speed.py`` (prints the median
of a few runs per system and the candidate count; exits 1 above the target).
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planners.serving import plan_serving  # noqa: E402
from simulator.serving.context import ServingContext  # noqa: E402

TARGET_S = 2.0
CASES = (("hgx-h200", "trtllm", "fp8", 1024, 1024, 1000.0, 30.0),
         ("dgx-b200", "sglang", "nvfp4", 8192, 1024, 2000.0, 40.0),
         ("gb200-nvl72", "trtllm", "nvfp4", 1024, 8192, 1000.0, 20.0))


def main() -> int:
    worst = 0.0
    for system, backend, precision, isl, osl, ttft, tpot in CASES:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            ctx = ServingContext.build("deepseek-r1", system, backend, precision, precision)
            plan = plan_serving(ctx, 64, isl, osl, ttft, tpot)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        worst = max(worst, med)
        print(f"deepseek-r1 on 64 x {system} ({backend}, {precision}, isl {isl} / osl {osl}): "
              f"{plan.evaluated:,} candidates in {med:.3f} s (median of 3); best {plan.best['mode']} "
              f"{plan.best['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU")
    print(f"slowest: {worst:.3f} s (target < {TARGET_S} s): {'ok' if worst < TARGET_S else 'TOO SLOW'}")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
