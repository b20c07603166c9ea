"""``paraplan plot KIND``: the figures of :mod:`paraplan.plots` from the command line.

Kinds:

* ``breakdown`` / ``memory``: step-time / per-GPU memory breakdown of one configuration, or of
  each value of a sweep (``--field F --values a,b,c``);
* ``roofline``: one layer's operations on the cluster's GPU (``--tp``, ``--micro-batch``,
  ``--seq-len``, ``--dtype`` set the shapes; for an MoE model ``--ep`` sets the rows each local
  expert's grouped GEMM gets, ``tokens / tp x top_k x ep / experts``, as the simulator times
  them, and ``--stack`` how many of those GEMMs run at once);
* ``pareto``: every plan the planner keeps for ``--gpus`` and the batch, throughput vs memory;
* ``scaling``: tokens/s and MFU against the GPU count (``--values`` are GPU counts; dp follows),
  each point as a share of linear scaling; against another numeric ``--field`` (tp at a fixed
  ``--gpus``), as a share of the fastest point;
* ``bandwidth``: throughput and exposed communication against the scale-out bandwidth
  (``--values`` in Gb/s per GPU, default 100,200,400,800; ``--field scaleup_gbit_per_s`` for NVLink).

Points of configurations that do not fit in memory (over the HBM less the headroom a run keeps,
``simulator.headroom``) are crossed (scaling, bandwidth), labelled (breakdown), or hatched and
labelled against the usable-memory line (memory), and the line the command prints counts them.

``--best`` replaces the given degrees by the planner's best plan (at each sweep value). A bad
field name or an empty sweep prints one line and exits with code 2, before any work.
"""
from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from hardware_specs.errors import InputError
from hardware_specs.gpu_spec import KNOWN_DTYPES
from paraplan.cli import atomic_output_path, check_image_path
from paraplan.commands.simulate import STACK_HELP
from simulator.parallel_config import CPKind, Recompute, Schedule
from paraplan.commands.token_count import TOKENS

KINDS = ("breakdown", "memory", "roofline", "pareto", "scaling", "bandwidth")
DEFAULT_FIELD = {"scaling": "gpus", "bandwidth": "scaleout_gbit_per_s"}
DEFAULT_VALUES = {"bandwidth": "100,200,400,800"}
POS = click.IntRange(min=1)
#: values one ``--values`` list may hold (one simulated configuration and one bar or point each)
MAX_VALUES = 64
#: longest --title (a figure's title line holds about a hundred characters)
MAX_TITLE_CHARS = 300


def parse_values(field: str, text: str | None) -> list[Any]:
    """Comma-separated ``text`` as a list of ``field``'s values; empty -> ``InputError``."""
    from paraplan import api
    items = [v.strip() for v in (text or "").split(",")]
    if not any(items):
        raise InputError("--values", f"empty sweep over {field}", "give comma-separated values, e.g. --values 1,2,4")
    if not all(items):
        raise InputError("--values", f"an empty item in {text!r}", "give one value between each pair of commas")
    if len(items) > MAX_VALUES:
        # each value is one simulated configuration and one bar or point of the figure
        raise InputError("--values", f"{len(items):,} values; a figure shows at most {MAX_VALUES}",
                         "sweep fewer values, or use paraplan sweep for a grid")
    values = [api.coerce_value(field, v) for v in items]
    seen = set()
    for text_value, value in zip(items, values):
        if repr(value) in seen:       # one configuration drawn twice (1,2,1; or 4Mi and 4194304)
            raise InputError("--values", f"{text_value!r} repeats a value of {text!r}", "list each value once")
        seen.add(repr(value))
    return values


def check_sweep(kind: str, field: str | None, values: str | None) -> tuple[str | None, list | None]:
    """Validate ``--field`` / ``--values`` for ``kind`` (cheap: nothing is loaded yet)."""
    from paraplan import api
    field = field or DEFAULT_FIELD.get(kind)
    if values is None:
        values = DEFAULT_VALUES.get(kind) if field == DEFAULT_FIELD.get(kind) else None
    if field is None:
        if values is not None:
            raise InputError("--field", "missing", "name the field --values are for, e.g. --field tp")
        return None, None
    if kind in ("roofline", "pareto"):
        raise InputError("--field", f"'{kind}' plots one configuration space, not a sweep", "drop --field/--values")
    try:
        api.check_field(field)
    except InputError as exc:
        raise InputError("--field", exc.message, exc.fix) from None
    if values is None:
        raise InputError("--values", "missing", f"give the values of {field}, e.g. --values 1,2,4")
    parsed = parse_values(field, values)
    if kind in DEFAULT_FIELD:
        check_log_axis_values(kind, field, values, parsed)
    return field, parsed


def check_log_axis_values(kind: str, field: str, text: str, values: list) -> None:
    """The scaling and bandwidth plots draw ``field`` on a base-2 logarithmic x axis: each value
    must be a number (not true / false) above 0. A 0 (--field zero_stage --values 0,1,2,3, or a
    loss_chunk_tokens of 0) was a divide by zero and matplotlib's internal error."""
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        raise InputError("--field", f"a {kind} plot needs a numeric field; {field} has values {text!r}",
                         f"use --field {DEFAULT_FIELD[kind]} (or another number), or a breakdown plot")
    low = min(values)
    if not low > 0:
        raise InputError("--values", f"a {kind} plot draws {field} on a logarithmic axis, which cannot show {low!r}",
                         "give values above 0, or draw a breakdown plot over them")


@click.command("plot", short_help="Figures: breakdown, memory, roofline, Pareto, scaling, bandwidth.")
@click.argument("kind", type=click.Choice(KINDS))
@click.option("--model", "-m", required=True, help="Model preset (see `paraplan models list`), YAML file, or HF config.json.")
@click.option("--cluster", "-c", required=True, help="Cluster name (see `paraplan hardware list`) or YAML file.")
@click.option("--gpu", help="Swap the cluster's GPU for this one (same fabric).")
@click.option("--gpus", "-n", type=POS, metavar="N", help="GPUs in the job (dp = gpus/(tp*pp*cp) unless --dp).")
@click.option("--seq-len", type=POS, metavar="N", help="Sequence length in tokens (default: the model's).")
@click.option("--dp", type=POS, metavar="N", help="Data-parallel degree (default: from --gpus).")
@click.option("--tp", type=POS, metavar="N", default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--pp", type=POS, metavar="N", default=1, show_default=True, help="Pipeline-parallel stages.")
@click.option("--cp", type=POS, metavar="N", default=1, show_default=True, help="Context-parallel degree.")
@click.option("--ep", type=POS, metavar="N", default=1, show_default=True, help="Expert-parallel degree (MoE).")
@click.option("--vpp", type=POS, metavar="N", default=1, show_default=True, help="Virtual stages per pipeline rank.")
@click.option("--micro-batch", type=POS, metavar="N", default=1, show_default=True, help="Sequences per micro-batch.")
@click.option("--global-batch", type=POS, metavar="N", help="Sequences per optimizer step.")
@click.option("--global-batch-tokens", type=TOKENS, help="Tokens per optimizer step (instead of --global-batch): 4194304, 4Mi or 4M.")
@click.option("--zero", type=click.IntRange(0, 3), metavar="{0,1,2,3}", default=None,
              help="ZeRO stage (default: the --stack's, as in `paraplan simulate`).")
@click.option("--recompute", type=click.Choice([r.value for r in Recompute]), default="none", show_default=True,
              help="Activation recomputation.")
@click.option("--sequence-parallel/--no-sequence-parallel", default=None,
              help="Megatron sequence parallelism alongside TP (default: the stack's recipes, as in "
                   "`paraplan simulate`).")
@click.option("--dtype", type=click.Choice(list(KNOWN_DTYPES)), default=None,
              help="GEMM dtype [default: the GPU's 16-bit type, bf16 (fp16 on V100)].")
@click.option("--schedule", type=click.Choice([s.value for s in Schedule]), help="Pipeline schedule.")
@click.option("--cp-kind", type=click.Choice([k.value for k in CPKind]), default=None,
              help="Context-parallel flavour (default: the --stack's context_parallel_kind at cp > 1, as in "
                   "`paraplan simulate`).")
@click.option("--stack", default="megatron-core", show_default=True, metavar="NAME|FILE",
              help=STACK_HELP + " whose documented behaviour the runs have, as in `paraplan simulate` "
                   "(and every plan runs, with --best or pareto).")
@click.option("--field", "field", metavar="FIELD", help="Sweep this field (any ParallelConfig field, gpus, gpu, "
              "model, cluster, stack, seq_len, global_batch[_tokens], scaleout_gbit_per_s, scaleup_gbit_per_s).")
@click.option("--values", "values", metavar="A,B,C", help="Comma-separated values of --field.")
@click.option("--best", is_flag=True, help="Use the planner's best plan (at each value) instead of the given degrees.")
@click.option("--title", help="Figure title (default: says what is shown).")
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False), help="Output image (.png, .svg or .pdf).")
def command(kind: str, field: str | None, values: str | None, best: bool, title: str | None, out: str,
            **opts) -> None:
    """Draw one figure of a model on a cluster and write it to --out.

    \b
    Examples:
      paraplan plot breakdown -m llama3-70b -c dgx-h100 -n 256 --tp 8 --pp 4 --zero 1 \\
          --sequence-parallel --recompute selective --global-batch 512 --field pp --values 1,2,4,8 -o pp.png
      paraplan plot roofline -m llama3-70b -c dgx-h100 --tp 8 -o roofline.png
      paraplan plot scaling -m llama3-70b -c dgx-h100 --tp 8 --pp 4 --zero 1 --sequence-parallel \\
          --recompute selective --global-batch 512 --values 64,128,256,512 -o scaling.png
      paraplan plot bandwidth -m llama3.1-405b -c dgx-h100 -n 1024 --tp 8 --pp 8 --zero 1 \\
          --recompute full --sequence-parallel --global-batch-tokens 16777216 -o network.png
    """
    field, parsed = check_sweep(kind, field, values)
    check_image_path(out)
    if title is not None:
        check_title(title)
    from paraplan import api, plots

    base = _base(opts, kind, field)
    if best or kind == "pareto":     # the planner searches the configuration: pin only what was given
        ctx = click.get_current_context()
        given = {name for name in opts if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE}
        given = {"zero_stage" if name == "zero" else name for name in given}
        base = {k: v for k, v in base.items() if k not in api.CONFIG_FIELDS or k in given or k == "global_batch"}
    from paraplan.cli import step_bar
    if field is not None:       # one simulation (or, with --best, one plan search) per value
        label, unit = f"plotting {len(parsed)} value{'s' if len(parsed) != 1 else ''} of {field}", "values"
    else:                       # the plan search of pareto / --best reports the configurations it scores
        label, unit = "evaluating configurations", "configurations"
    with step_bar(label, unit=unit, quiet=True) as bar:
        df = _rows(kind, field, parsed, best, opts, base, api, bar)
    if df.empty:
        raise InputError("--gpus", "no plan fits in memory", "add GPUs, lower the batch, or relax constraints")
    kwargs = {"title": title}
    if kind == "scaling" and field not in ("gpus", None):
        kwargs["x"] = field
    if kind == "bandwidth" and field is not None:
        kwargs["x"] = field
    fig = plots.KINDS[kind](df, None, **kwargs)
    atomic_output_path(out, lambda tmp: fig.savefig(tmp, dpi=fig.dpi, bbox_inches="tight"))
    note = plots.prior_note(df)
    unfit = int(plots.unfit_mask(df).sum())
    misfits = f"; {unfit} of {len(df)} do{'es' if unfit == 1 else ''} not fit in memory" if unfit else ""
    click.echo(f"wrote {out} ({kind}, {len(df)} row{'s' if len(df) != 1 else ''}{misfits})"
               + (f"; {note}" if note else ""))


def _rows(kind: str, field: str | None, parsed: list | None, best: bool, opts: dict, base: dict, api, progress):
    """The table the figure draws; ``progress(done, total)`` hears of the sweep's values or the
    plan search's configurations (a --best sweep over ten batches ran 17 s showing nothing)."""
    if kind == "roofline":
        return api.layer_ops(opts["model"], opts["cluster"], gpu=opts["gpu"], tp=opts["tp"],
                             micro_batch=opts["micro_batch"], seq_len=opts["seq_len"], cp=opts["cp"], ep=opts["ep"],
                             dtype=opts["dtype"], stack=opts["stack"])
    if kind == "pareto":
        return _plans(opts, base, progress)
    if field is not None:
        return api.sweep(base, field, parsed, best=best, progress=progress)
    if best:
        if opts["gpus"] is None:
            raise InputError("--gpus", "missing", "the planner needs a GPU count")
        return api.best_plan(**{k: v for k, v in base.items() if k not in ("gpus",)}, gpus=opts["gpus"],
                             progress=progress)
    return api.simulate(base.pop("model"), base.pop("cluster"), **base)


def check_title(title: str) -> None:
    """A --title matplotlib can draw: at most ``MAX_TITLE_CHARS`` characters (100,000 took
    matplotlib 14 s), and, when its $ signs pair up into mathtext (matplotlib reads '$x^2$' as
    math), math that parses: '$x^$' or '$\\frac{$' was matplotlib's ValueError, an internal
    error, once the figure was drawn."""
    if len(title) > MAX_TITLE_CHARS:
        raise InputError("--title", f"{len(title):,} characters, more than the {MAX_TITLE_CHARS} a figure shows",
                         "give a shorter title")
    from matplotlib import cbook
    from matplotlib.mathtext import MathTextParser
    if not cbook.is_math_text(title):
        return
    try:
        MathTextParser("path").parse(title)
    except ValueError:
        raise InputError("--title", f"{title[:80]!r} holds mathtext (between $ signs) that matplotlib cannot parse",
                         "write \\$ for a dollar sign, or correct the math") from None


def _base(opts: dict, kind: str, field: str | None = None) -> dict:
    """``api.simulate`` keyword arguments from the options (None = not given); the batch may be
    left out when ``field`` sweeps it. A pooled (mixed) cluster, which no plot draws, is refused
    first: it had been told '--gpus: missing', and with --gpus given, then refused."""
    if field != "cluster" and opts.get("cluster") is not None:
        from hardware_specs.catalog import load_cluster
        load_cluster(opts["cluster"])       # InputError: 'it is a pooled (mixed) cluster, ...'
    if kind != "roofline" and opts["global_batch"] is None and opts["global_batch_tokens"] is None \
            and field not in ("global_batch", "global_batch_tokens"):
        raise InputError("--global-batch", "missing", "give --global-batch SEQUENCES or --global-batch-tokens TOKENS")
    base = {"model": opts["model"], "cluster": opts["cluster"], "gpus": opts["gpus"], "gpu": opts["gpu"],
            "seq_len": opts["seq_len"], "dp": opts["dp"], "tp": opts["tp"], "pp": opts["pp"], "cp": opts["cp"],
            "ep": opts["ep"], "vpp": opts["vpp"], "micro_batch": opts["micro_batch"],
            "global_batch": opts["global_batch"], "global_batch_tokens": opts["global_batch_tokens"],
            "zero_stage": opts["zero"], "recompute": opts["recompute"],
            "sequence_parallel": opts["sequence_parallel"], "dtype": opts["dtype"], "schedule": opts["schedule"],
            "cp_kind": opts["cp_kind"], "stack": opts["stack"]}
    return {k: v for k, v in base.items() if v is not None}


def _plans(opts: dict, base: dict, progress=None):
    """Every plan the planner keeps, with the explicitly given configuration options pinned."""
    from paraplan import api
    if opts["gpus"] is None:
        raise InputError("--gpus", "missing", "the planner needs a GPU count")
    kwargs = {k: v for k, v in base.items() if k not in ("model", "cluster", "gpus")}
    return api.plan(opts["model"], opts["cluster"], opts["gpus"], progress=progress, **kwargs)
