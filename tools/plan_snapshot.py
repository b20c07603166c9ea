"""Dump the ``paraplan plan --json`` of a fixed set of searches, less the timing fields, to
check that a speed change leaves every result byte-identical.

Run: ``python tools/plan_snapshot.py save DIR [--case NAME]`` before the change,
``python tools/plan_snapshot.py compare DIR [--case NAME]`` after (exit 1 and a unified diff
on any difference). The cases cover a wide MoE range search (the ``range_search_speed``
benchmark's), dense and MoE searches with and without a GPU range, two dtypes, and a search
without the memory search. ``--one-process`` runs each search in one process (``os.cpu_count``
taken as 1, so the planner scores the chunks of a large space one after another, in order,
where by default it splits them over every CPU). ``--count-fitting`` passes that flag (every
row given the memory model, so ``search.fit`` is exact on the range search too).
"""
from __future__ import annotations

import argparse
import difflib
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "deepseek-v3-1024to4096-gbs4096": ["-m", "deepseek-v3", "-c", "dgx-h100", "-n", "1024-4096",
                                       "--global-batch", "4096"],
    "llama3-70b-64to128": ["-m", "llama3-70b", "-c", "dgx-h100", "-n", "64-128", "--global-batch", "128"],
    "llama3-8b-16-no-search": ["-m", "llama3-8b", "-c", "dgx-h100", "-n", "16", "--global-batch", "64",
                               "--no-memory-search"],
    "mixtral-8x7b-64": ["-m", "mixtral-8x7b", "-c", "dgx-h100", "-n", "64", "--global-batch", "128"],
    "deepseek-v3-256to512-fp8": ["-m", "deepseek-v3", "-c", "dgx-h100", "-n", "256-512", "--global-batch", "512",
                                 "--dtype", "bf16", "--dtype", "fp8"],
}
#: fields that measure the run, not the result
_TIMING = ("wall_s", "eval_s", "evals_per_s")


#: runs the CLI with ``os.cpu_count()`` 1: the planner's default workers, one process
_ONE_PROCESS = ("import os, runpy, sys; os.cpu_count = lambda: 1; sys.argv[0] = 'paraplan'; "
                "runpy.run_module('paraplan.cli', run_name='__main__')")


def snapshot(name: str, one_process: bool = False, count_fitting: bool = False) -> str:
    """The case's ``--json`` (top 30 and the frontiers) without its timing fields, as text."""
    cli = ["-c", _ONE_PROCESS] if one_process else ["-m", "paraplan.cli"]
    cmd = [sys.executable, *cli, "plan", *CASES[name], "--top", "30", "--pareto", "--json",
           *(["--count-fitting"] if count_fitting else [])]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    for k in _TIMING:
        data.get("search", {}).pop(k, None)
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("save", "compare"))
    ap.add_argument("directory", type=Path)
    ap.add_argument("--case", choices=sorted(CASES), action="append")
    ap.add_argument("--one-process", action="store_true", help="score every search in one process")
    ap.add_argument("--count-fitting", action="store_true", help="give every row the memory model (exact fit count)")
    args = ap.parse_args(argv)
    args.directory.mkdir(parents=True, exist_ok=True)
    status = 0
    for name in args.case or CASES:
        t0 = time.perf_counter()
        text = snapshot(name, args.one_process, args.count_fitting)
        path = args.directory / f"{name}.json"
        if args.action == "save":
            path.write_text(text)
            print(f"{name}: saved ({time.perf_counter() - t0:.1f} s)")
            continue
        before = path.read_text()
        if before == text:
            print(f"{name}: identical ({time.perf_counter() - t0:.1f} s)")
        else:
            status = 1
            print(f"{name}: DIFFERENT")
            sys.stdout.writelines(list(difflib.unified_diff(before.splitlines(True), text.splitlines(True),
                                                            "before", "after"))[:200])
    return status


if __name__ == "__main__":
    sys.exit(main())
