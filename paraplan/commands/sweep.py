"""``paraplan sweep SPEC.yaml``: a grid of what-ifs on Dask, one row per point, resumable."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from hardware_specs.errors import InputError


from paraplan.cli import PROGRESS_LINE_S, ProgressLines   # a line every PROGRESS_LINE_S s off a terminal


@click.command("sweep", short_help="Evaluate a grid of what-ifs (models x clusters x GPUs x ...) on Dask.")
@click.argument("spec_path", metavar="SPEC.yaml", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder for results.parquet, results.csv and the finished chunks (created if missing; its parent must exist).")
@click.option("--scheduler", metavar="ADDRESS", help="A running Dask scheduler (tcp://host:8786) instead of a local cluster.")
@click.option("--workers", type=click.IntRange(1, 1024), help="Processes of the local Dask cluster, at most four a core and never more than the chunks to run [default: the CPU count].")
@click.option("--local", is_flag=True, help="Evaluate in this process, without Dask.")
def command(spec_path: str, out_dir: str, scheduler: str | None, workers: int | None, local: bool) -> None:
    """Evaluate every point of the grid in SPEC.yaml (models x clusters x GPU counts x batches x
    stacks x configurations; or, with kind: serving, models x systems x GPU counts x engines x
    request shapes x latency objectives) and write one row per point, with paraplan plan's (or
    serve plan's) columns, to OUT/results.parquet and OUT/results.csv.

    \b
    Keys (each axis a list; every combination is one point):
      models, clusters, gpus    names as in `paraplan models list` / `hardware list`, GPU counts
      global_batch | global_batch_tokens   sequences or tokens per step (one of the two)
      seq_len, stacks, dtypes   optional: default each model's, megatron-core, each GPU's 16-bit
      search                    best (the planner's best plan per point, default) or simulate
      config                    simulate: a grid of ParallelConfig fields (tp, pp, cp, ep, vpp,
                                micro_batch, zero_stage, recompute, sequence_parallel, ...);
                                best: the values the planner may use
      kind, chunk_points, description   training (default) or serving, points per task, a note
    A misspelt key or name is an error before anything runs; a point that cannot run (a
    layout that does not divide, nothing fits) is a row with its status and reason.

    \b
    kind: serving (each point is `paraplan serve plan`'s best deployment):
      models, systems, gpus     names as in `paraplan models list` / `hardware list`, GPU counts
      backends                  vllm, sglang, trtllm or a stack name (default vllm)
      isl, osl                  prompt and output tokens per request (default 1024, 1024)
      ttft_ms, tpot_ms          the latency objective, ms (default 1000, 50)
      precisions, modes         weight formats (auto = serve plan's default), agg / disagg / both
    Each row: the point, then the winning mode, layouts, batch, workers, ttft_ms, tpot_ms,
    tokens_per_s_per_gpu and _per_user of the best layout the engine can launch as priced (a
    better one it cannot, e.g. vLLM's disaggregated, in engine_refuses, engine_refused_best and
    engine_refused_tokens_per_s_per_gpu); a point no layout meets is 'infeasible' with the reason,
    one whose layouts meeting it the engine cannot launch 'unlaunchable'.

    Chunks of points run as Dask tasks, each one vectorized evaluation: on a local cluster of
    this machine's cores, or on the cluster at --scheduler. Finished chunks are kept in
    OUT/chunks/ under the hash of what they hold, so a rerun (after a crash, or with points
    added) evaluates only what is missing.

    \b
    Example spec (what-if.yaml):
      kind: training
      search: simulate
      models: [llama3-8b, llama3-70b]
      clusters: [dgx-h100, dgx-b200]
      gpus: [64, 128, 256]
      global_batch_tokens: [4194304]
      stacks: [megatron-core]
      config: {tp: [1, 2, 4, 8], pp: [1, 2, 4], micro_batch: [1, 2], zero_stage: [1, 3]}
    \b
      paraplan sweep what-if.yaml --out sweep-out/
      paraplan sweep what-if.yaml --out sweep-out/ --scheduler tcp://10.0.0.5:8786
    """
    from paraplan.sweeps import load_spec, run_sweep, write_results
    from paraplan.sweeps.spec import check_names

    if local and scheduler:
        raise InputError("--local", "given with --scheduler", "use one of them")
    if not out_dir.strip():     # Path("") is the working folder: the results would land among its files
        raise InputError("--out", "is empty", "give a folder for the results, e.g. --out sweep-out/")
    spec = load_spec(spec_path)
    check_names(spec)          # before the output folder is made
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError("--out", f"{out} is a file", "give a folder")
    if not out.parent.is_dir():
        raise InputError("--out", f"folder {out.parent} does not exist", "create it first")
    from paraplan.sweeps.runner import check_results_targets
    check_results_targets(out)          # before the run, not after it
    _refuse_reading_an_output(spec_path, spec, out)
    t0 = time.perf_counter()
    with click.progressbar(length=spec.n_points, label=f"sweeping {spec.n_points:,} points", file=sys.stderr,
                           hidden=not sys.stderr.isatty()) as bar:
        shown = [0]
        lines = ProgressLines(sys.stderr, PROGRESS_LINE_S)     # off a terminal (a log, CI) instead of a bar

        def progress(done: int, total: int) -> None:
            bar.update(done - shown[0])
            shown[0] = done
            lines(done, total, f"swept {done:,} of {total:,} points ({100 * done // max(total, 1)}%)")

        # run_sweep makes the folder (and removes what it made if the run cannot start)
        df = run_sweep(spec, out, scheduler=scheduler, local=local, workers=workers, progress=progress)
    wall = time.perf_counter() - t0
    paths = write_results(df, out)
    counts = df["status"].value_counts().to_dict()
    summary = ", ".join(f"{n:,} {status}" for status, n in counts.items())
    rate = len(df) / wall
    rate_text = f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"     # a slow best sweep is not "0 points/s"
    click.echo(f"{len(df):,} point{'' if len(df) == 1 else 's'} in {wall:.1f} s ({rate_text} points/s): {summary}")
    for p in paths:
        click.echo(f"wrote {p}")


def _refuse_reading_an_output(spec_path: str, spec, out: Path) -> None:
    """A spec (or a model / cluster / stack file it names) that is one of the files the sweep
    writes, ``OUT/results.csv`` or ``.parquet``, is refused: the results replaced it."""
    from paraplan.cli import files_read_by
    reads: dict[str, str] = {os.path.realpath(spec_path): "SPEC.yaml"}
    for attr, param in (("models", "model"), ("clusters", "cluster"), ("systems", "system"),
                        ("stacks", "stack"), ("backends", "backend")):
        for value in getattr(spec, attr, ()) or ():
            for path in files_read_by(param, value):
                reads.setdefault(path, f"the spec's {attr} entry {value}")
    for suffix in (".parquet", ".csv"):
        target = out / f"results{suffix}"
        who = reads.get(os.path.realpath(target)) if target.exists() else None
        if who is not None:
            raise InputError("--out", f"{target} is also the file read by {who}", "write the output elsewhere")
