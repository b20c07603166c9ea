"""``paraplan measure``: train a small GPT here with real parallelism and time it."""
from __future__ import annotations

import click

from hardware_specs.errors import InputError
from paraplan.cli import dump_json, step_bar
from paraplan.measure.runtime import LAUNCH_TIMEOUT_S, MAX_RANKS_PER_CORE, max_cpu_ranks


#: RunConfig's fields (what run_measurement's errors name) -> this command's options
OPTIONS = {"dp": "--dp", "tp": "--tp", "pp": "--pp", "micro_batch": "--micro-batch", "global_batch": "--global-batch",
           "zero_stage": "--zero", "recompute": "--recompute", "num_layers": "--layers", "hidden_size": "--hidden",
           "num_heads": "--heads", "seq_len": "--seq-len", "steps": "--steps", "warmup": "--warmup"}


def _option(field: str, config: dict) -> str:
    """The option(s) behind a library error's ``field``: the ranks of one job (world_size) are
    --dp x --tp x --pp, named by those above 1."""
    if field == "world_size":
        return "*".join(f"--{k}" for k in ("dp", "tp", "pp") if int(config.get(k, 1)) > 1) or "--dp"
    return OPTIONS.get(field, field)


@click.command("measure", short_help="Train a small GPT here with real DP/TP/PP and time it.")
@click.option("--dp", type=click.IntRange(1), default=1, show_default=True, help="Data-parallel ranks.")
@click.option("--tp", type=click.IntRange(1), default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--pp", type=click.IntRange(1), default=1, show_default=True, help="Pipeline stages (1F1B).")
@click.option("--micro-batch", type=click.IntRange(1), default=1, show_default=True, help="Sequences per micro-batch.")
@click.option("--global-batch", type=click.IntRange(1), default=4, show_default=True,
              help="Sequences per optimizer step.")
@click.option("--zero", "zero_stage", type=click.IntRange(0, 1), default=0, show_default=True,
              help="ZeRO stage: 0 DDP, 1 optimizer states sharded.")
@click.option("--recompute", type=click.Choice(["none", "full"]), default="none", show_default=True,
              help="Activation recomputation.")
@click.option("--layers", "num_layers", type=click.IntRange(1), default=4, show_default=True, help="Transformer layers.")
@click.option("--hidden", "hidden_size", type=click.IntRange(8), default=256, show_default=True, help="Hidden size.")
@click.option("--heads", "num_heads", type=click.IntRange(1), default=4, show_default=True, help="Attention heads.")
@click.option("--seq-len", type=click.IntRange(2), default=128, show_default=True, help="Sequence length in tokens.")
@click.option("--steps", type=click.IntRange(2), default=6, show_default=True, help="Steps timed, warm-up included.")
@click.option("--warmup", type=click.IntRange(0), default=2, show_default=True,
              help="Leading steps left out of the median.")
@click.option("--json", "as_json", is_flag=True, help="Print every measured field as JSON.")
def command(as_json: bool, **config) -> None:
    """How fast does a small GPT train on this machine under this layout? Launches
    dp*tp*pp local processes (gloo on CPU, nccl on GPUs), trains with hand-written data,
    tensor (Megatron column/row-parallel) and pipeline (1F1B) parallelism for a few steps and
    reports the median step time after warm-up, tokens/s and peak memory. Needs PyTorch.

    dp*tp*pp is at most one rank per GPU on a GPU host, and at most {per_core} ranks a core on a
    CPU ({cpu_ranks} on this machine): ranks beyond the cores time their contention (a warning
    says so). A run that cannot finish in {timeout:.0f} s is refused before it starts.

    \b
    Example:
      paraplan measure --tp 2 --micro-batch 1 --global-batch 4
      paraplan measure --pp 2 --micro-batch 1 --global-batch 8 --recompute full --json
    """
    from paraplan.measure import run_measurement

    try:
        with step_bar("training") as bar:
            result = run_measurement(config, progress=bar)
    except InputError as exc:           # the library names RunConfig's fields: say the options
        raise InputError(_option(exc.field, config), exc.message, exc.fix) from None
    if as_json:
        click.echo(dump_json(result), nl=False)
        return
    shown = (("measured_step_s", "measured_step_s", 1.0, "{:.4f}"), ("tokens_per_s", "tokens_per_s", 1.0, "{:,.0f}"),
             ("peak_memory_bytes", "peak_memory_gib", 2.0**-30, "{:.3f}"),
             ("cpu_wait_fraction", "cpu_wait_pct", 100.0, "{:.1f}"))
    for key, name, scale, fmt in shown:      # median step, throughput, peak memory, share of time waiting
        if key in result:
            click.echo(f"{name:22s} {_shown(result[key], scale, fmt)}")


#: what the text output shows for a reading this machine could not take (the CPU wait comes from
#: Linux's /proc/<pid>/task/<tid>/schedstat; without it ``runtime.run_queue_wait_s`` is None)
UNAVAILABLE = "unavailable"


def _shown(value, scale: float, fmt: str) -> str:
    """``value`` scaled and formatted, or ``UNAVAILABLE`` where it is None or NaN (not read here)."""
    return UNAVAILABLE if value is None or value != value else fmt.format(scale * value)


command.help = command.help.format(per_core=MAX_RANKS_PER_CORE, cpu_ranks=max_cpu_ranks(), timeout=LAUNCH_TIMEOUT_S)
