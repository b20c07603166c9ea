"""How long ``paraplan plan ... --emit <framework>`` takes, and how much of it is choosing the plan
the framework runs (``paraplan.exports.best_runnable``) rather than the search.

Case: Llama-3-70B on 64 H100 (DGX H100), global batch 128 sequences, ``--emit megatron`` and
``--emit deepspeed``. Megatron-LM runs a plan near the top of the 13,500 ranked plans; DeepSpeed
refuses the first 8,469 (a pipeline with ZeRO-2/3, interleaving, offload, ...), each of which
``best_runnable`` once validated and checked one row at a time (6.3 s of a 7.8 s command on a
loaded 2-core machine; 0.2 s once the table is screened by column conditions, ``exports.screen``).

Run: ``python benchmarks/emit_speed.py [--json] [--repeat N]``. The command runs in-process
(``paraplan.cli``, as the shell runs it, less the interpreter start); ``total_s`` is its wall time,
``best_runnable_s`` the time inside ``exports.best_runnable`` (the exact re-timing of the rows
that could beat the first runnable one included), ``rank`` the chosen plan's 1-based rank as the
note on stderr prints it. One untimed run comes first (imports, catalog reads); the median run
(by total time) of ``--repeat`` is reported. Only public entry points are used, so the script
times an older tree the same way (copy it there).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from click.testing import CliRunner  # noqa: E402

from paraplan import exports  # noqa: E402
from paraplan.cli import main as cli  # noqa: E402

ARGS = ["plan", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "64", "--global-batch", "128"]
FRAMEWORKS = ("megatron", "deepspeed")


def run_once(framework: str) -> dict:
    """One ``plan --emit framework``: its wall time, the time in ``best_runnable``, the rank."""
    inside: list[float] = []
    real = exports.best_runnable

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            inside.append(time.perf_counter() - t0)

    exports.best_runnable = timed
    try:
        t0 = time.perf_counter()
        result = CliRunner().invoke(cli, ARGS + ["--emit", framework])
        total = time.perf_counter() - t0
    finally:
        exports.best_runnable = real
    if result.exit_code != 0:
        raise SystemExit(f"plan --emit {framework} exited {result.exit_code}: {result.output[-500:]}")
    found = re.search(r"rank (\d+) of", result.output)       # the note (stderr, in click's output)
    rank = int(found.group(1)) if found else 1       # "the unrestricted winner runs": rank 1
    return {"total_s": total, "best_runnable_s": sum(inside), "rank": rank}


def run_case(framework: str, repeat: int) -> dict:
    runs = sorted((run_once(framework) for _ in range(repeat)), key=lambda r: r["total_s"])
    mid = runs[len(runs) // 2]
    return {"framework": framework, **mid, "total_s_min": runs[0]["total_s"],
            "best_runnable_s_median": statistics.median(r["best_runnable_s"] for r in runs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help='print {"cases": [...]}')
    ap.add_argument("--repeat", type=int, default=3, help="runs per framework (median reported)")
    args = ap.parse_args(argv)
    run_once(FRAMEWORKS[0])            # imports and catalog reads: not timed
    cases = [run_case(fw, max(1, args.repeat)) for fw in FRAMEWORKS]
    if args.json:
        print(json.dumps({"command": "paraplan " + " ".join(ARGS), "cases": cases}, indent=2))
        return 0
    print(f"paraplan {' '.join(ARGS)} --emit ... (median of {args.repeat})")
    print(f"{'framework':<10} {'rank':>6} {'total_s':>8} {'best_runnable_s':>16} {'search+rest_s':>14}")
    for c in cases:
        print(f"{c['framework']:<10} {c['rank']:>6} {c['total_s']:>8.2f} {c['best_runnable_s']:>16.2f} "
              f"{c['total_s'] - c['best_runnable_s']:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
