"""Compare pipeline schedules for one plan: step time, bubble %, stage-0 peak memory.

Default: GPT-3 175B on 1024 A100 (dgx-a100-80gb), tp 8 x pp 8 x dp 16, micro-batch 1,
global batch 1536, selective recompute + sequence parallelism. Every schedule gets the same
degrees; interleaved uses vpp 2; ZB-V and DualPipe hold two chunks per rank.

    python benchmarks/schedule_comparison.py [--model M --cluster C --tp 8 --pp 8 --dp 16 ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hardware_specs import load_cluster  # noqa: E402
from model_specs import load_model  # noqa: E402
from simulator import ParallelConfig, simulate  # noqa: E402
from simulator.event_level import pipeline_timeline  # noqa: E402

GIB = 2**30
SCHEDULES = (("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1), ("zb-h2", 1), ("zb-v", 1),
             ("dualpipe", 1))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt3-175b")
    ap.add_argument("--cluster", default="dgx-a100-80gb")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--pp", type=int, default=8)
    ap.add_argument("--dp", type=int, default=16)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--global-batch", type=int, default=1536)
    args = ap.parse_args(argv)
    model, cluster = load_model(args.model), load_cluster(args.cluster)
    print(f"{model.name} on {args.tp * args.pp * args.dp} x {cluster.gpu.name}: tp={args.tp} pp={args.pp} "
          f"dp={args.dp} micro_batch={args.micro_batch} global_batch={args.global_batch}, selective recompute + SP")
    print(f"{'schedule':12s} {'step_time_s':>11s} {'bubble_pct':>10s} {'stage0_inflight':>15s} {'stage0_peak_act_gib':>19s} "
          f"{'stage0_peak_mem_gib':>19s} {'sim_wall_s':>10s}")
    for name, vpp in SCHEDULES:
        cfg = ParallelConfig(dp=args.dp, tp=args.tp, pp=args.pp, vpp=vpp, micro_batch=args.micro_batch,
                             global_batch=args.global_batch, recompute="selective", sequence_parallel=True,
                             schedule=name)
        t0 = time.perf_counter()
        report = simulate(model, cluster, cfg)
        _, result = pipeline_timeline(model, cfg, cluster)
        wall = time.perf_counter() - t0
        bubble = report.time_breakdown_s["pipeline_bubble_s"] / report.step_time_s
        # stage 0's memory as the step model prices it; the event timeline (simulated without
        # activation bytes) gives the most micro-batch chunks stage 0 holds at once
        stage0 = report.stage_memory[0]
        peak_act = float(stage0["parts_bytes"]["activations_bytes"])
        inflight = int(np.asarray(result.peak_inflight)[0])
        print(f"{name:12s} {report.step_time_s:11.3f} {100 * bubble:10.1f} {inflight:15d} {peak_act / GIB:19.2f} "
              f"{float(stage0['memory_bytes']) / GIB:19.2f} {wall:10.3f}")


if __name__ == "__main__":
    main()
