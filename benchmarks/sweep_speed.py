"""How fast a sweep runs on a 2-worker Dask LocalCluster, and that it equals the in-process run.

Run: ``python benchmarks/sweep_speed.py [--json] [--workers 2]``.

The grid: 4 models (dense and MoE) x 4 clusters (H100, B200, A100, MI300X) x 4 GPU counts x
2 batches x a 5-field configuration grid (tp, pp, micro-batch, ZeRO, recompute) with the
megatron-core stack, simulated (``search: simulate``): 30,720 points. Reported: points, wall
seconds and points per second of the Dask run (worker processes, cluster start included and
apart), of the in-process run, and whether the two tables are equal.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from paraplan.sweeps import run_sweep, spec_from_dict  # noqa: E402

GRID = {"kind": "training", "search": "simulate",
        "models": ["llama3-8b", "llama3-70b", "mixtral-8x7b", "gpt3-13b"],
        "clusters": ["dgx-h100", "dgx-b200", "dgx-a100-80gb", "mi300x-node"],
        "gpus": [64, 128, 256, 512], "global_batch_tokens": [2097152, 4194304], "stacks": ["megatron-core"],
        "config": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16], "micro_batch": [1, 2], "zero_stage": [1, 3],
                   "recompute": ["selective", "full", "none"]},
        "chunk_points": 1000}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    from dask.distributed import Client, LocalCluster
    spec = spec_from_dict(GRID)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        remote = run_sweep(spec, out, client=client)
    dask_s = time.perf_counter() - started
    client.close()
    cluster.close()
    t1 = time.perf_counter()
    local = run_sweep(spec, local=True)
    local_s = time.perf_counter() - t1
    try:
        pd.testing.assert_frame_equal(local, remote)
        equal = True
    except AssertionError:
        equal = False
    out = {"points": len(remote), "ok": int((remote.status == "ok").sum()), "workers": args.workers,
           "cluster_start_s": started - t0, "dask_wall_s": dask_s, "dask_points_per_s": len(remote) / dask_s,
           "in_process_wall_s": local_s, "in_process_points_per_s": len(local) / local_s,
           "equal_to_in_process": equal, "load_avg_1min": load}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['points']:,} points ({out['ok']:,} ok) on a {args.workers}-worker LocalCluster: "
              f"{dask_s:.1f} s ({out['dask_points_per_s']:,.0f} points/s; cluster start {out['cluster_start_s']:.1f} s "
              f"apart); in process {local_s:.1f} s ({out['in_process_points_per_s']:,.0f} points/s); "
              f"equal: {equal}; load average {load:.1f}")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
