"""``paraplan calibrate``: microbenchmark this machine into a hardware profile."""
from __future__ import annotations

from pathlib import Path

import click

from hardware_specs.errors import InputError, check_name

from paraplan.cli import check_writable, step_bar
from paraplan.measure.runtime import MAX_LOCAL_PROCESSES, MAX_RANKS_PER_CORE, max_cpu_ranks

#: library fields of run_calibration's and launch's errors that are this command's --nprocs
NPROCS_FIELDS = ("nprocs", "world_size")


@click.command("calibrate", short_help="Measure this machine and write a cluster profile.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="Cluster YAML to write (loadable wherever a cluster name is accepted); the raw timings go beside it, named after it: my-machine.yaml -> my-machine.calibration.json.")
@click.option("--nprocs", type=click.IntRange(1, MAX_LOCAL_PROCESSES), default=2, show_default=True,
              help=f"Local processes (GPUs, or CPU ranks) to measure collectives between: 1 to "
                   f"{MAX_LOCAL_PROCESSES}, at most the visible GPUs on a GPU host, at most {MAX_RANKS_PER_CORE} "
                   f"a core on a CPU ({max_cpu_ranks()} on this machine).")
@click.option("--name", default=None, help="Name of the profile [default: the --out file's stem, my-machine for my-machine.yaml].")
def command(out_path: str, nprocs: int, name: str | None) -> None:
    """What can this machine do? Runs GEMM, memory-bandwidth, attention and collective
    microbenchmarks with torch (gloo on CPU, nccl on GPUs) and writes them as a cluster profile
    with its own measured efficiency model, so `paraplan simulate --cluster FILE` predicts this
    machine. Takes under a minute on 2 CPU cores. Needs PyTorch (pip install 'paraplan[measure]').

    \b
    Example:
      paraplan calibrate --out my-machine.yaml
      paraplan simulate --cluster my-machine.yaml --model gpt3-125m --gpus 2 --dp 2 --global-batch 8 --dtype fp32
    """
    from paraplan.measure import run_calibration

    if name is not None and not name.strip():       # an empty profile name was found only after 40 s of benchmarks
        raise InputError("--name", "is empty", "give the profile a name, or leave the option out for the --out file's stem")
    if name is not None:        # before the benchmarks: every command refuses a profile with another name
        check_name("--name", name)
    check_writable(out_path)
    _refuse_bundled_preset(out_path)
    # before the benchmarks, named as the option, by run_calibration's own rule (the suffix as
    # pathlib sees it: '.yaml' is a name with no suffix, which endswith let through to fail later)
    if Path(out_path).name in (".yaml", ".yml"):
        raise InputError("--out", f"{Path(out_path).name!r} has no file name before the suffix", "e.g. --out local-cpu.yaml")
    if Path(out_path).suffix not in (".yaml", ".yml"):
        raise InputError("--out", f"{out_path} must end in .yaml or .yml", "e.g. --out local-cpu.yaml")
    from paraplan.measure.calibrate import sidecar_path
    check_writable(sidecar_path(out_path), "--out")     # the raw timings' file, before the benchmarks
    try:
        with step_bar("calibrating") as bar:
            path = run_calibration(out_path, nprocs=nprocs, name=name, progress=bar)
    except InputError as exc:           # the library names its parameter or the launcher's field
        if exc.field not in NPROCS_FIELDS:
            raise
        raise InputError("--nprocs", exc.message, "use a smaller --nprocs") from None
    click.echo(f"wrote {path}")


def _refuse_bundled_preset(out_path: str) -> None:
    """``InputError`` when ``--out`` is a file of paraplan's own catalog (``hardware_specs``):
    ``--out hardware_specs/clusters/dgx-h100.yaml`` replaced the shipped DGX H100 preset with this
    machine's profile, and every later ``-c dgx-h100`` (and each serving row on an H100 system)
    priced a CPU without a word."""
    from hardware_specs.catalog import BUILTIN_DIR
    target = Path(out_path).resolve()
    if target.is_file() and BUILTIN_DIR in target.parents:
        raise InputError("--out", f"{out_path} is a file of paraplan's bundled catalog "
                         f"({target.relative_to(BUILTIN_DIR)})", "write the profile elsewhere, e.g. --out my-machine.yaml")
