"""``paraplan plan``: the fastest parallel configurations of a model on a cluster that fit.

Prints the top plans as a table (one config label: degrees, micro-batch, ZeRO, recompute; step time, tokens/s,
MFU, memory and headroom per GPU), or ``--json`` / ``--csv``; ``--pareto`` adds the
throughput-vs-memory frontier (and throughput-vs-GPUs when ``--gpus`` is a range);
``--explain`` says why the winner beats the runner-up and what each pruning rule removed.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import shlex
import textwrap

import click
import numpy as np

from hardware_specs.catalog import DEFAULT_TRAINING_STACK, load_cluster, load_stack
from hardware_specs.placement import placement_note
from hardware_specs.errors import InputError
from hardware_specs.gpu_spec import KNOWN_DTYPES
from model_specs.catalog import load_model
from model_specs.model_spec import ModelSpec
from paraplan import mfu as mfu_units
from paraplan import priors
from paraplan.cli import (PROGRESS_AFTER_S, LazyBar, dump_json, exact_number_text, format_table,
                          four_significant)
from planners.explain import fit_text, stage_layers_text
from planners.plan import PlanResult, parse_gpus, plan
from simulator.parallel_config import Recompute, Schedule
from simulator.stack_defaults import run_cp_kind
from simulator.validate_config import needs_uneven_split
from paraplan.commands.simulate import (STACK_HELP, ep_comm_overlap_option, ep_dispatch_dedup_option,
                                       refuse_expert_switch_on_dense, stack_profile_note, unmeasured_features,
                                       write_launch, UNMEASURED_NOTE)
from paraplan.commands.token_count import TOKENS

POS = click.IntRange(min=1)
_EXPLICIT = ("dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "zero", "recompute", "schedule", "zero_shard_group")


def parse_fix(items) -> dict[str, str]:
    """``("dp=8", "zero=3")`` -> {"dp": "8", "zero": "3"} (values checked by the planner)."""
    out: dict[str, list[str]] = {}
    for item in items:
        if "=" not in item:
            raise InputError("--fix", f"cannot read {item!r}", "write NAME=VALUE, e.g. --fix dp=8")
        name, value = (x.strip() for x in item.split("=", 1))
        if not name or not value:
            raise InputError("--fix", f"cannot read {item!r}", "write NAME=VALUE, e.g. --fix dp=8")
        choices = [v.strip() for v in value.split(",")]
        if not all(choices):        # 'pp=4,,8' dropped the empty choice without a word
            raise InputError("--fix", f"an empty choice in {item!r}", "give one value between each pair of commas")
        out.setdefault(name, []).extend(choices)
    return {k: tuple(v) for k, v in out.items()}


def _cells(df) -> list[list[str]]:
    rows = []
    for r in df.itertuples(index=False):
        d = r._asdict()
        rows.append([str(d[c]) if c not in _FORMATS else _FORMATS[c](d[c]) for c in df.columns])
    return rows


_FORMATS = {
    "sequence_parallel": lambda v: "on" if v else "off",
    "step_time_s": four_significant,
    "tokens_per_s": lambda v: f"{v:,.0f}",
    "tokens_per_s_per_gpu": lambda v: f"{v:,.1f}",
    "mfu_bf16_pct": lambda v: f"{v:.1f}",
    "mfu_fp16_pct": lambda v: f"{v:.1f}",
    "mfu_fp32_pct": lambda v: f"{v:.1f}",
    "memory_gib": lambda v: f"{v:.1f}",
    "headroom_gib": lambda v: f"{v:.1f}",
}


def display(df, cluster):
    """The plans as every output shows them: MFU in percent of the reference peak
    (``paraplan.mfu``) instead of the fraction of the row dtype's peak, and whether the times
    rest on a fitted efficiency model (``efficiency_fitted``, see ``paraplan.priors``)."""
    out = mfu_units.mfu_pct_columns(df, cluster.gpu)
    out["efficiency_fitted"] = not priors.is_prior(cluster)
    return out


def machine_rows(df, cluster):
    """``display`` for --json / --csv: the table's ``config`` label first (as in the table and
    ``simulate --json``), every field after it."""
    from paraplan.api import config_labels
    out = display(df, cluster)
    out.insert(0, "config", config_labels(out).to_numpy() if len(out) else [])
    return out


#: what the ``config`` column's abbreviations mean (``paraplan.api.config_label``)
CONFIG_LEGEND = ("config: dp tp pp (cp ep etp vpp when > 1) degrees, mb micro-batch, z ZeRO stage, hsdpG ZeRO over groups "
                 "of G ranks,\n        sel / full / fullN recompute (N layers per chunk; fullNdM: M fewer each later "
                 "stage),\n        offN layers per chunk whose activations are offloaded, sp sequence parallel; 1f1b "
                 "(interleaved if vpp > 1)\n        and bf16 unless named; every field: --csv, --json\n")


def _table(df, ranked: bool = True, show_gpus: bool = False) -> str:
    """The plans as a table that fits a terminal: the configuration as one ``config`` label
    (every field stays a column in --csv / --json), then the step time, throughput, MFU and
    memory; n_gpus only when the request is a range of counts."""
    from paraplan.api import LABEL_FIELDS, config_labels
    df = df.copy()
    star = "" if df.empty or bool(df["efficiency_fitted"].iloc[0]) else priors.mark_text()
    df = df.drop(columns="efficiency_fitted")
    shown = df.drop(columns=[c for c in df.columns if c in LABEL_FIELDS or c in ("global_batch", "cp_kind")
                             or (c == "n_gpus" and not show_gpus)])
    shown.insert(1 if show_gpus else 0, "config", config_labels(df).to_numpy() if len(df) else [])
    headers = list(shown.columns)
    rows = _cells(shown)
    if star:        # every time in the table rests on the prior: the marker beside each (MFU is one too)
        for c in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", *(h for h in headers if h.startswith("mfu_"))):
            if c in headers:
                i = headers.index(c)
                rows = [r[:i] + [r[i] + star] + r[i + 1:] for r in rows]
    if ranked:
        headers = ["rank"] + headers
        rows = [[str(i + 1)] + r for i, r in enumerate(rows)]
    text = format_table(rows, headers)
    if max(map(len, text.splitlines())) <= TABLE_WIDTH:
        return text
    # an MoE label (ep8 etp2 cp2 vpp17 off1 ...) pushes the table past a terminal: the throughput
    # and memory columns, whose names are wider than their numbers, take their short names
    short = [_SHORT_HEADERS.get(h, h) for h in headers]
    legend = ", ".join(f"{s} = {h}" for s, h in zip(short, headers) if s != h)
    return format_table(rows, short) + textwrap.fill(
        f"columns: {legend}; --csv and --json keep the long names", TABLE_WIDTH,
        subsequent_indent=" " * 9) + "\n"


#: a plan table's lines are at most this wide (a wider one takes ``_SHORT_HEADERS``)
TABLE_WIDTH = 120

#: the table's names for columns whose full names are wider than their numbers, units kept
_SHORT_HEADERS = {"tokens_per_s": "tokens/s", "tokens_per_s_per_gpu": "tokens/s/gpu", "memory_gib": "mem_gib",
                  "headroom_gib": "free_gib"}


def _estimated_ranks(plans) -> str:
    """The ranks (1-based, as ``_table`` numbers them) of the ``plans`` rows whose pipeline time
    is the estimate (``pipeline_exact`` False), as text ("7, 9-12"); '' when every row is exact."""
    ranks = [i + 1 for i, exact in enumerate(plans["pipeline_exact"].tolist()) if not exact]
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _emit(result: PlanResult, spec, framework: str, cl=None, switches=None, stack=None) -> str:
    """The launch of the fastest plan ``framework`` can run; a note on stderr says which rank it
    had and how much slower than the unrestricted winner it is (DeepSpeed's recipe follows).
    ``switches``: the software switches given on the command line, which every plan ran with;
    ``stack``: the stack the plans were priced on (what their ``selective`` recomputes)."""
    from paraplan import exports
    from paraplan.api import config_label
    if cl is not None:
        exports.check_hardware(cl.gpu, framework)
    context = {"model": spec, "seq_len": result.seq_len, "gpu": result.gpu, "cluster": result.cluster,
               **(switches or {})}
    refine = None
    if cl is not None:      # the cluster as loaded (a file's too), for the launch's hosts
        context["gpus_per_host"] = cl.launch_gpus_per_host
        context["efficiency_fitted"] = not priors.is_prior(cl)     # the header says when it rests on a prior
        # the ranked table times exactly only the rows that can rank near its top: the plan the
        # framework runs is the fastest it can run by the exact time, which the header prints
        # (what ``simulate`` gives it), and its rank and slowdown are against exact times too
        from functools import partial
        from hardware_specs.catalog import efficiency_for_cluster
        from planners.refine import refine_table
        refine = partial(refine_table, spec, cl, efficiency_for_cluster(cl), software=result.software)
    row, rank, slowdown = exports.best_runnable(result.plans, framework, software=result.software, refine=refine,
                                                **context)
    if rank == 0:
        note = f"the unrestricted winner runs in {framework} as planned"
    else:
        winner = {**exports.with_stack_fields(result.plans.iloc[0].to_dict(), result.software), **context}
        why = exports.refusal(winner, framework)
        note = (f"best plan {framework} can run: rank {rank + 1} of {len(result.plans)}, {100 * slowdown:.1f}% "
                f"slower than the unrestricted winner ({config_label(winner)}: {why.field}: {why.message})")
    # the plans and the predicted step are the stack's behaviour, not the framework's
    profile = stack_profile_note(stack, framework, "ranked and predicted") if stack is not None else ""
    return write_launch(row, framework, note + (f"; {profile}" if profile else ""))


def simulate_command(row, model: str, cluster: str, seq_len: int | None = None,
                     stack: str = DEFAULT_TRAINING_STACK, switches: dict | None = None,
                     headroom_gib: float | None = None, num_layers: int | None = None,
                     default_cp_kind: str | None = None, moe: bool = False) -> str:
    """The ``paraplan simulate`` command of a plan row (its label's abbreviations as options:
    ``off7`` is --offload-activation-layers 7, ``full2d1`` --recompute full --recompute-num-layers 2
    --recompute-layers-decrement 1, ``hsdp8`` --zero-shard-group 8), with the request's model,
    cluster, sequence length, stack, switches and headroom (``headroom_gib``, when the request gave
    one: without it ``plan --headroom-gib 0``'s winner, planned to 79.8 of 80 GiB, printed a command
    whose ``simulate`` said "fits: NO" against its default 4 GiB), and ``--uneven-layers`` where the
    model's ``num_layers`` do not split into the row's chunks (DeepSeek-V3's 61 layers on DualPipe's
    2 x 16), and ``--cp-kind`` where the row's context-parallel flavour (``cp_kind``) is not
    ``default_cp_kind``, the one ``simulate`` runs without it on this stack
    (``stack_defaults.run_cp_kind``; None: given at every cp > 1), and ``--etp`` for an MoE model
    (``moe``) always: the search tries etp 1 besides the stack's default (tp) under a folding
    stack, and a command without it re-ran DeepSeek-V3's etp-1 winner on 256 H100 at etp = tp
    (29.27 s against the plan's 21.01 s); it prints the row's step time and fit verdict."""
    get = lambda k, d=0: row[k] if k in row and row[k] is not None else d     # noqa: E731
    args = ["paraplan", "simulate", "-m", model, "-c", cluster, "-n", str(int(get("n_gpus")))]
    if seq_len is not None:
        args += ["--seq-len", str(seq_len)]
    for option, key in (("--tp", "tp"), ("--pp", "pp"), ("--cp", "cp"), ("--ep", "ep"), ("--vpp", "vpp")):
        if int(get(key, 1)) > 1:
            args += [option, str(int(get(key)))]
    if moe:
        args += ["--etp", str(int(get("etp", 1)))]
    args += ["--micro-batch", str(int(get("micro_batch", 1))), "--global-batch", str(int(get("global_batch"))),
             "--zero", str(int(get("zero_stage")))]
    if int(get("zero_shard_group")) > 0:
        args += ["--zero-shard-group", str(int(get("zero_shard_group")))]
    if str(get("recompute", "none")) != "none":
        args += ["--recompute", str(get("recompute"))]
    for option, key in (("--recompute-num-layers", "recompute_num_layers"),
                        ("--recompute-layers-decrement", "recompute_layers_decrement"),
                        ("--offload-activation-layers", "offload_activation_layers")):
        if int(get(key)) > 0:
            args += [option, str(int(get(key)))]
    args.append("--sequence-parallel" if bool(get("sequence_parallel", False)) else "--no-sequence-parallel")
    default_schedule = Schedule.INTERLEAVED.value if int(get("vpp", 1)) > 1 else Schedule.ONE_F_ONE_B.value
    if str(get("schedule", default_schedule)) != default_schedule:
        args += ["--schedule", str(get("schedule"))]
    if int(get("cp", 1)) > 1 and "cp_kind" in row and str(row["cp_kind"]) != default_cp_kind:
        args += ["--cp-kind", str(row["cp_kind"])]
    # the search prices every pipeline with an uneven split where the chunks need one
    # (``planners.plan.row_config``); simulate asks for it by name
    if num_layers is not None and int(get("pp", 1)) > 1 and needs_uneven_split(
            num_layers, int(get("pp", 1)), int(get("vpp", 1)), str(get("schedule", default_schedule))):
        args.append("--uneven-layers")
    args += ["--dtype", str(get("dtype", "bf16"))]
    if stack != DEFAULT_TRAINING_STACK:
        args += ["--stack", stack]
    for key, value in (switches or {}).items():
        flag = key.replace("_", "-")
        args.append(f"--{flag}" if value else f"--no-{flag}")
    if headroom_gib is not None:
        args += ["--headroom-gib", exact_number_text(headroom_gib)]
    return " ".join(shlex.quote(a) for a in args)


def wrap_command(command: str, width: int = 118, indent: str = "  ") -> str:
    """``command`` over lines of at most ``width`` characters joined by shell continuations
    (`` \\``), an option kept beside its value, so it pastes into a shell as it is."""
    words = shlex.split(command)
    pieces, i = [], 0
    while i < len(words):
        take = 2 if words[i].startswith("-") and i + 1 < len(words) and not words[i + 1].startswith("-") else 1
        pieces.append(" ".join(shlex.quote(w) for w in words[i:i + take]))
        i += take
    lines, line = [], indent
    for piece in pieces:
        if line.strip() and len(line) + 1 + len(piece) + 2 > width:
            lines.append(line + " \\")
            line = indent + "    "
        line += ("" if not line.strip() else " ") + piece
    lines.append(line)
    return "\n".join(lines)


def _priced_chunks(result: PlanResult, spec) -> list[tuple[int, int]]:
    """The best plan's decoder layers per model chunk as [start, stop) ranges in layer order: the
    layout the step model prices and the exports launch (``planners.explain.priced_chunks``); []
    when there is no plan or no such layout (a hybrid model)."""
    from planners.explain import priced_chunks
    return priced_chunks(result.plans.iloc[0], spec) if len(result.plans) else []


def _unchecked_host_memory(plan: dict, cluster) -> str:
    """A note when ``plan`` keeps offloaded state in host memory that the cluster file does not
    bound (its ``host:`` states no ``memory_gib``): the search then admits any amount, and its
    winner can need more than a node holds (Llama-3.1-405B on 2,048 H200 at a 16Mi batch: 101
    layers per GPU offloaded, 3,854 GiB per node, where a DGX H200 has 2 TB); '' otherwise, as
    ``simulate`` says "unchecked" under its memory table."""
    host = getattr(cluster, "host", None)
    per_gpu = float(plan.get("host_memory_gib") or 0.0)
    if per_gpu <= 0 or host is None or host.memory_bytes is not None:
        return ""
    from simulator.config_batch import gpus_on_a_node
    world = int(plan.get("dp", 1)) * int(plan.get("tp", 1)) * int(plan.get("pp", 1)) * int(plan.get("cp", 1))
    on_node = int(gpus_on_a_node(world, cluster.gpus_per_node))
    return (f"note: the best plan keeps {per_gpu:,.1f} GiB per GPU in host memory, "
            f"{per_gpu * on_node:,.1f} GiB per node of {on_node} GPUs, which no plan "
            f"was checked against: {cluster.name} states no host memory per node (give its host: memory_gib "
            "in a cluster file, or --no-offload)\n")


def _header(result: PlanResult, seq_len_note: str = "") -> str:
    """The plan's first lines; ``seq_len_note`` (``default_seq_len_note``) a third one."""
    lo, hi = result.gpus
    gpus = f"{lo}" if lo == hi else f"{lo}-{hi}"
    tokens = result.global_batch * result.seq_len
    return (f"plan: {result.model} on {gpus} x {result.gpu} ({result.cluster}); global batch "
            f"{result.global_batch} sequence{'' if result.global_batch == 1 else 's'} x {result.seq_len} = "
            f"{tokens:,} tokens\n"
            f"searched {result.raw_size:,} configurations in {result.wall_s:.2f} s: {result.evaluated:,} evaluated "
            f"({result.evals_per_s:,.0f}/s), {fit_text(result)} in {result.memory_limit_bytes / 2**30:.1f} GiB\n"
            + (f"{seq_len_note}\n" if seq_len_note else ""))


def default_seq_len_note(spec: ModelSpec, seq_len_given: bool) -> str:
    """Where the sequence length is the model's default ``seq_len`` and that default is its whole
    context window (``max_context_tokens``; the Mixtral presets: 8x7B's paper states it trained at
    that 32K context, no source states 8x22B's training length), a line saying so, since a
    ``--global-batch-tokens`` budget then counts few, very long sequences; else ''."""
    if seq_len_given or not spec.max_context_tokens or spec.seq_len < spec.max_context_tokens:
        return ""
    return (f"sequence length {spec.seq_len}: {spec.name}'s default seq_len, its whole context window "
            "(--seq-len sets another)")


def _gpus_json(gpus: tuple[int, int]):
    """``request.gpus``: the count searched, or ``{"min": lo, "max": hi}`` for a range."""
    lo, hi = (int(g) for g in gpus)
    return lo if lo == hi else {"min": lo, "max": hi}


def _cp_kind_json(result: PlanResult):
    """``request.cp_kind``: the context-parallel flavour the search priced at cp > 1 (the one
    --fix cp_kind gave, else the stack's), one name, or dtype -> name where the stack's differs
    by dtype (rows at cp 1 run none: their ``cp_kind`` is ring)."""
    kinds = {d: str(result.software.get(d, {}).get("cp_kind", "ring")) for d in result.dtypes}
    return next(iter(kinds.values())) if len(set(kinds.values())) == 1 else kinds


def _json(result: PlanResult, top: int, pareto: bool, explain: bool, cluster, spec) -> str:
    data = {
        "request": {"model": result.model, "cluster": result.cluster, "gpu": result.gpu,
                    "gpus": _gpus_json(result.gpus), "global_batch": result.global_batch, "seq_len": result.seq_len,
                    "dtypes": list(result.dtypes), "cp_kind": _cp_kind_json(result),
                    "memory_limit_bytes": result.memory_limit_bytes,
                    "headroom_required_bytes": result.hbm_bytes - result.memory_limit_bytes,
                    **priors.json_fields(cluster)},
        "search": {"configurations": result.raw_size, "evaluated": result.evaluated, "fit": result.fitting,
                   "fit_exact": result.fit_exact, "fit_unchecked": result.fit_unchecked, "plans_kept": len(result.plans),
                   "wall_s": result.wall_s, "eval_s": result.eval_s, "evals_per_s": result.evals_per_s},
        "pruned": dict(result.pruned),
        "plans": machine_rows(result.top(top, detailed=True), cluster).to_dict("records"),
        "stage_layers": [list(x) for x in _priced_chunks(result, spec)] or None,
        "balanced_stage_layers": [list(x) for x in result.stage_layers] if result.stage_layers else None,
        # what the best plan uses that no measured run in the validation files exercises ('' none)
        "best_unmeasured_features": unmeasured_features(result.plans.iloc[0].to_dict(), cluster)
        if len(result.plans) else "",
    }
    if pareto:
        data["pareto_memory"] = machine_rows(result.pareto("memory", detailed=True), cluster).to_dict("records")
        if result.gpus[0] != result.gpus[1]:
            data["pareto_gpus"] = machine_rows(result.pareto("gpus", detailed=True), cluster).to_dict("records")
    if explain:
        data["explain"] = result.explain
        data["without_features"] = _without_features(result, cluster)
    return dump_json(data)


def _without_features(result: PlanResult, cluster) -> list[dict]:
    """``--json --explain``'s ``without_features``: per exotic feature of the winner (and all of
    them together), the fastest kept plan without it (``planners.explain.plainer_plans``): its
    1-based ``rank`` and ``plan`` row, ``slower_pct`` (its step time over the winner's, less one,
    in percent); rank, plan and slower_pct null when no kept plan is without it."""
    from planners.explain import plainer_plans
    out = []
    for p in plainer_plans(result.plans):
        found = p.index is not None
        out.append({"without": list(p.without), "rank": p.index + 1 if found else None,
                    "slower_pct": 100 * p.slower_share if found else None, "plans_kept": p.kept,
                    "plan": machine_rows(result.plans.iloc[[p.index]][result.columns(detailed=True)],
                                         cluster).to_dict("records")[0]
                    if found else None})
    return out


def pareto_rows(result: PlanResult, cluster):
    """``--pareto --csv``: the frontiers --json gives (``pareto_memory``, over a range of GPU
    counts also ``pareto_gpus``), one after the other, each row's first column ``frontier``
    saying which (``memory`` or ``gpus``). Over a range it printed the GPU frontier alone."""
    import pandas as pd
    kinds = ("memory", "gpus") if result.gpus[0] != result.gpus[1] else ("memory",)
    frames = []
    for kind in kinds:
        rows = machine_rows(result.pareto(kind, detailed=True), cluster)
        rows.insert(0, "frontier", kind)
        frames.append(rows)
    return pd.concat(frames, ignore_index=True)


def _csv(df) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(df.columns)
    for r in df.itertuples(index=False):
        writer.writerow([repr(v) if isinstance(v, float) else v for v in r])
    return buf.getvalue()


@click.command("plan", short_help="Search every parallel configuration; rank what fits by throughput.")
@click.option("--model", "-m", required=True, help="Model preset (see `paraplan models list`), YAML file, or HF config.json.")
@click.option("--cluster", "-c", required=True, help="Cluster name (see `paraplan hardware list`) or YAML file.")
@click.option("--gpus", "-n", help="GPU count (1024) or a range of counts to compare (256-1024); not for a pooled "
                                    "cluster, whose pools state their counts.")
@click.option("--global-batch", type=POS, help="Sequences per optimizer step.")
@click.option("--global-batch-tokens", type=TOKENS, help="Tokens per optimizer step, a multiple of the sequence length: 4194304, 4Mi (= 4,194,304) or 4M (= 4,000,000).")
@click.option("--seq-len", type=POS, help="Sequence length in tokens (default: the model's).")
@click.option("--top", type=POS, default=10, show_default=True, help="Plans to print.")
@click.option("--max-tp", type=POS, help="Largest tensor-parallel degree [default: the cluster's GPUs per node].")
@click.option("--fix", "fix", multiple=True, metavar="NAME=VALUE",
              help="Fix a dimension (repeatable; one name given twice adds its choices: --fix zero=1 --fix zero=3 is zero=1,3; VALUE may list choices: --fix pp=4,8). Names: dp tp pp cp ep etp (expert "
                   "TP, MoE: searched at tp or 1 only; simulate --etp prices another) vpp micro_batch zero recompute sequence_parallel schedule zero_shard_group cp_kind (one context-parallel "
                   "flavour, ring ulysses hybrid allgather; default: the --stack's context_parallel_kind).")
@click.option("--dp", type=POS, help="Fix the data-parallel degree.")
@click.option("--tp", type=POS, help="Fix the tensor-parallel degree.")
@click.option("--pp", type=POS, help="Fix the pipeline-parallel degree.")
@click.option("--cp", type=POS, help="Fix the context-parallel degree.")
@click.option("--ep", type=POS, help="Fix the expert-parallel degree (MoE).")
@click.option("--vpp", type=POS, help="Fix the virtual pipeline stages per rank.")
@click.option("--micro-batch", type=POS, help="Fix the micro-batch (sequences).")
@click.option("--max-micro-batch", type=POS, help="Largest micro-batch to try [default: any divisor of the global batch].")
@click.option("--zero", type=click.IntRange(0, 3), help="Fix the ZeRO stage.")
@click.option("--recompute", type=click.Choice([r.value for r in Recompute]),
              help="Fix the recomputation, as `paraplan simulate --recompute` runs it: full recomputes every "
                   "layer of each model chunk (or --recompute-num-layers N of them); the memory search does not "
                   "thin it. Left out, the search tries none, selective and full, and gives a full plan that "
                   "fits with fewer recomputed layers the fewest that fit (fullN in the table).")
@click.option("--recompute-num-layers", type=POS, metavar="N",
              help="With --recompute full: recompute N layers of each model chunk (Megatron's block method), "
                   "as `paraplan simulate --recompute-num-layers N`.")
@click.option("--schedule", type=click.Choice([s.value for s in Schedule]),
              help="Fix the pipeline schedule (default: 1f1b, interleaved when vpp > 1).")
@click.option("--headroom-gib", type=float, default=None,
              help="Memory to leave free per GPU, GiB [default: 5% of HBM, see simulator/headroom.py; 0 plans "
                   "to the modelled peak].")
@click.option("--zero-shard-group", type=click.IntRange(0), metavar="G",
              help="Fix hybrid sharding: ZeRO shards over groups of G data-parallel ranks (0 = all of them) "
                   "[default: try both all ranks and one node's].")
@click.option("--memory-search/--no-memory-search", default=True, show_default=True,
              help="Give each plan that needs recomputation to fit the fewest recomputed layers per chunk that fit "
                   "(stage by stage), and each plan that fits no other way the fewest layers offloaded to the host.")
@click.option("--offload/--no-offload", default=True, show_default=True,
              help="Let a plan that fits no other way offload activations to the host (when the cluster has a "
                   "host link); --no-offload searches as if it had none, keeping the rest of the memory search.")
@click.option("--count-fitting", is_flag=True,
              help="Give every configuration the memory model, so the fit count is exact. By default a search "
                   "over several space chunks skips it on the rows whose step-time floor shows they cannot "
                   "rank among the plans already kept, and says \"at least N fit\"; the plans are the same.")
@click.option("--hsdp/--no-hsdp", default=True, show_default=True,
              help="Also try ZeRO 2-3 sharded within a node and replicated across nodes (HSDP).")
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(list(KNOWN_DTYPES)),
              help="GEMM dtype to allow (repeatable) [default: the GPU's 16-bit type].")
@click.option("--stack", default=None, metavar="NAME|FILE",
              help=STACK_HELP + " every plan runs (its overlap, kernels, fusion, gradient dtype and recipe "
                   "for this model). The expert switches below override it, as in `paraplan simulate`. "
                   "[default: megatron-core; with --emit torchtitan, torchtitan]")
@ep_comm_overlap_option
@ep_dispatch_dedup_option
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON (request, search counts, pruned, plans, stage_layers). request.gpus is the GPU "
                   "count, or {\"min\": lo, \"max\": hi} for a range; stage_layers lists the best plan's "
                   "[start, end) decoder layers per model chunk as priced and exported, 0-based and end-exclusive "
                   "([[0, 80]] = the table's 0:0-79); balanced_stage_layers a split minimising the slowest chunk.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the top plans (or, with --pareto, the frontier) as CSV.")
@click.option("--pareto", is_flag=True, help="Also print the throughput-vs-memory frontier (of the plans with more than "
                                                "half the best plan's throughput) and, for a range, the throughput-vs-GPUs "
                                                "frontier (each GPU count whose best beats every smaller count's).")
@click.option("--explain", is_flag=True,
              help="Explain the winner against the runner-up, and against the fastest kept plan without each "
                   "of its exotic features (activation offload, ZeRO-3, full recomputation); pruned counts per "
                   "rule. With --json: explain and without_features.")
@click.option("--emit", type=click.Choice(["megatron", "torchtitan", "deepspeed"]),
              help="Print the launch of the best plan this framework can run as planned (Megatron-LM: env + "
                   "flags; torchtitan 0.3.0: a config module; DeepSpeed 0.19.8: JSON, recipe on stderr) "
                   "instead of the table, and say how much slower it is than the unrestricted winner.")
def command(model, cluster, gpus, global_batch, global_batch_tokens, seq_len, top, max_tp, fix, headroom_gib,
            dtypes, stack, as_json, as_csv, pareto, explain, max_micro_batch, emit, memory_search, hsdp,
            ep_comm_overlap, ep_dispatch_dedup, count_fitting, offload=True, **explicit) -> None:
    """Find the parallel configurations of MODEL on CLUSTER with the highest throughput that fit
    in memory: every factorisation of the GPUs over dp x tp x pp x cp (x ep), virtual pipeline
    stages, micro-batch, ZeRO 0-3 (and hybrid sharding within a node), recomputation and sequence
    parallelism, scored by the same step model as `paraplan simulate`. A plan that needs
    recomputation to fit recomputes only the layers it needs (recompute_num_layers, stage by stage);
    one that fits no other way offloads the fewest layers' activations to the host
    (--no-memory-search turns both off).

    \b
    Examples:
      paraplan plan -m llama3.1-405b -c dgx-h100 -n 16384 --global-batch-tokens 16777216
      paraplan plan -m megatron-530b -c dgx-a100-80gb -n 4480-5120 --global-batch 2520 --pareto
      paraplan plan -m llama3-70b -c dgx-h100 -n 64 --global-batch 128 --fix zero=1 --explain
      paraplan plan -m llama3-70b -c dgx-h100 -n 256 --global-batch-tokens 4Mi --emit megatron > launch.sh
      paraplan plan -m llama3-70b -c dgx-h100 -n 256 --global-batch-tokens 4194304 --emit torchtitan > paraplan_plan.py

    A pooled (mixed) cluster file plans across its pools: pipelines on one pool, each pool's
    own replicas sharing the batch by speed, pipelines crossing two pools, with every micro-batch
    that divides the global batch (--max-micro-batch caps it); it prints the best
    plan next to the best on only the fastest and only the largest pool (--explain: where the
    time goes per pool).

    \b
      # from a paraplan checkout (examples/ is not installed with the package):
      paraplan plan -m llama3-70b -c examples/clusters/a100-h100.yaml --global-batch-tokens 4194304 --explain
    """
    if as_json and as_csv:
        raise InputError("--json", "give --json or --csv, not both", "drop one of the two")
    if emit:        # the launch replaces the table: say so rather than drop the other outputs silently
        dropped = [flag for flag, given in (("--json", as_json), ("--csv", as_csv), ("--pareto", pareto),
                                            ("--explain", explain)) if given]
        if dropped:
            raise InputError("--emit", f"prints the launch instead of the table, so {' / '.join(dropped)} would "
                             "print nothing", f"run --emit and {dropped[0]} as two commands")
    if as_csv and explain:      # the CSV holds plan rows only; --json carries the explanation
        raise InputError("--csv", "prints plan rows only, so --explain would print nothing",
                         "use --json, which carries the explanation, or run --csv and --explain as two commands")
    if (global_batch is None) == (global_batch_tokens is None):
        # as simulate says it, with the flags (the search's own check names its keywords)
        raise InputError("--global-batch", "missing" if global_batch is None else
                         "give --global-batch or --global-batch-tokens, not both",
                         "give --global-batch SEQUENCES or --global-batch-tokens TOKENS")
    spec = load_model(model)
    if seq_len is not None:
        spec = spec.with_seq_len(seq_len)
    switches = {k: v for k, v in (("ep_comm_overlap", ep_comm_overlap), ("ep_dispatch_dedup", ep_dispatch_dedup))
                if v is not None}
    if spec.moe is None:    # no expert all-to-all to overlap or deduplicate: simulate refuses it too
        for key in (k for k, v in switches.items() if v):
            refuse_expert_switch_on_dense(key, spec)
    # the stack's behaviour with every switch given overriding it (its recipes' too), as simulate does
    from paraplan.exports import default_stack
    stack_arg = stack if stack is not None else default_stack(emit)
    stack = load_stack(stack_arg).with_training(**switches)
    from hardware_specs.catalog import is_pooled
    if is_pooled(cluster):
        given = click.get_current_context().get_parameter_source
        for name, value in (("hsdp", hsdp), ("memory_search", memory_search), ("offload", offload)):
            if given(name) == click.core.ParameterSource.COMMANDLINE and value:
                # the pooled search never shards over groups, searches memory or offloads
                raise InputError("--" + name.replace("_", "-"), "not searched on pooled clusters", "drop it")
        if count_fitting:       # it ran and printed the table without a word: the pooled search counts no fits
            raise InputError("--count-fitting", "a pooled cluster's search reports no count of fitting plans",
                             "drop it")
        _plan_pooled(spec, model, cluster, gpus, global_batch, global_batch_tokens, top, max_tp, fix, headroom_gib, dtypes,
                     as_json, as_csv, pareto, explain, max_micro_batch, emit, explicit, stack)
        return
    if gpus is None:
        raise InputError("--gpus", "missing", "give the GPU count (1024) or a range (256-1024)")
    cl = load_cluster(cluster)
    fixed = parse_fix(fix)
    for name in _EXPLICIT:
        value = explicit.get(name)
        if value is not None:
            if name in fixed:
                flag = f"--{name.replace('_', '-')}"
                raise InputError(flag, f"given both as an option and in --fix {name}=...",
                                 f"give it once: {flag} {value} or --fix {name}={','.join(map(str, fixed[name]))}")
            fixed[name] = (value,)
    bar = LazyBar("evaluating configurations", PROGRESS_AFTER_S)
    try:
        # without the host link no plan offloads (activation offload needs one); nothing else of a
        # plan uses the link, so every plan's numbers are the cluster's own
        searched = cl if offload else dataclasses.replace(cl, host=None)
        result = plan(spec, searched, parse_gpus(gpus), global_batch, global_batch_tokens=global_batch_tokens,
                      max_tp=max_tp, fixed=fixed, headroom_gib=headroom_gib, dtypes=dtypes or None,
                      max_micro_batch=max_micro_batch, progress=bar, stack=stack, memory_search=memory_search,
                      hsdp=hsdp, count_fitting=count_fitting, top=top,
                      recompute_num_layers=explicit.get("recompute_num_layers"))
    finally:
        bar.close()
    is_range = result.gpus[0] != result.gpus[1]
    if emit:
        click.echo(_emit(result, spec, emit, cl, switches, stack), nl=False)
        return
    if as_json:
        click.echo(_json(result, top, pareto, explain, cl, spec), nl=False)
        return
    if as_csv:
        click.echo(_csv(pareto_rows(result, cl) if pareto else machine_rows(result.top(top, detailed=True), cl)),
                   nl=False)
        return
    notes = "\n".join(n for n in (default_seq_len_note(spec, seq_len is not None),
                                   placement_note(cl, int(result.gpus[1]))) if n)
    out = [_header(result, notes),
           _table(display(result.top(top), cl), show_gpus=is_range), CONFIG_LEGEND]
    if not is_range and len(result.plans):
        out.append(_scaleup_note(result, spec, searched, dict(
            global_batch=global_batch, global_batch_tokens=global_batch_tokens, max_tp=max_tp, fixed=fixed,
            headroom_gib=headroom_gib, dtypes=dtypes or None, max_micro_batch=max_micro_batch, stack=stack,
            memory_search=memory_search, hsdp=hsdp, top=top,
            recompute_num_layers=explicit.get("recompute_num_layers"))))
    estimated = _estimated_ranks(result.top(top, detailed=True))
    if estimated:
        out.append(f"note: rank {estimated} carry the closed-form estimate of the pipeline time, not the exact "
                   "makespan (pipeline_exact false in --csv / --json: the search computes at most "
                   "refine.MAX_EXACT + --top rows exactly); simulate gives their exact time\n")
    priced = _priced_chunks(result, spec)
    if priced:
        n = len(priced)
        key = "stage:first-last layer" if n <= 16 else "n xk = k chunks of n layers"
        out.append(f"best plan's layers per model chunk, as priced and exported ({n} chunk{'s' if n > 1 else ''}; "
                   f"{key}): {stage_layers_text(priced)}\n")
        balanced = [tuple(x) for x in result.stage_layers] if result.stage_layers else None
        if balanced and balanced != priced:
            out.append(textwrap.fill(f"a split minimising its slowest chunk's time (dynamic programming over per-layer "
                                     f"costs; not the one priced): {stage_layers_text(balanced)}", TABLE_WIDTH,
                                     initial_indent="  ", subsequent_indent="    ", break_long_words=False) + "\n")
    if len(result.plans):
        best = result.plans.iloc[0].to_dict()
        layers = spec.num_layers
        # the flavour simulate runs without --cp-kind at this cp (the stack's; ring at cp 1)
        default_kind = run_cp_kind(int(best["cp"]), None, stack, spec.name, cl.gpu.name, str(best["dtype"]))
        command = simulate_command(best, model, cluster, seq_len, stack_arg, switches, headroom_gib, layers,
                                   default_kind, moe=spec.moe is not None)
        out.append(f"best plan as one run (its step, memory per stage and why):\n{wrap_command(command)}\n")
        unmeasured = unmeasured_features(best, cl)
        if unmeasured:
            out.append(f"note: the best plan uses {unmeasured}, {UNMEASURED_NOTE}: its time rests on the link and "
                       "overlap model alone (--no-offload plans without it)\n")
        unchecked = _unchecked_host_memory(best, cl)
        if unchecked:
            out.append(unchecked)
    if pareto:
        out.append("\npareto frontier: tokens/s vs memory per GPU (no plan with less memory is as fast; plans over "
                   "half the best tokens/s)\n")
        out.append(_table(display(result.pareto("memory"), cl), ranked=False, show_gpus=is_range))
        if is_range:
            out.append("\npareto frontier: tokens/s vs GPU count (no smaller count is as fast)\n")
            out.append(_table(display(result.pareto("gpus"), cl), ranked=False, show_gpus=True))
    if explain:
        out.append("\n" + result.explain)
    note = priors.footnote(cl)
    if note:
        out.append(note + "\n")
    click.echo("".join(out), nl=False)


def _scaleup_note(result, spec, cluster, plan_kwargs) -> str:
    """``planners.scaleup_note``'s line for a one-count plan: where the scale-up tiling rule removed
    layouts of a job placed a non-power-of-two a domain, the same request is planned on the
    largest smaller count placed a power of two a domain (``scaleup_note.tiling_count``: 576 GPUs
    on NVL72 -> 512) and the line says how much more it gets per GPU; '' where it does not apply
    or that count has no plan."""
    from planners.scaleup_note import scaleup_note, tiling_count
    n = int(result.gpus[1])
    pruned = int(result.pruned.get("scaleup", 0))
    smaller = tiling_count(cluster, n) if pruned else None
    if smaller is None:
        return ""
    try:
        other = plan(spec, cluster, (smaller, smaller), **plan_kwargs)
    except InputError:
        return ""
    if not len(other.plans):
        return ""
    return scaleup_note(cluster, n, pruned, float(result.plans.iloc[0]["tokens_per_s_per_gpu"]), smaller,
                        float(other.plans.iloc[0]["tokens_per_s_per_gpu"]))


def _check_pooled_schedule(schedule) -> None:
    """``--schedule`` on a pooled cluster: a schedule is no degree. The pooled search prices 1F1B
    (``planners.heterogeneous``: every ``HeteroPlan`` it builds runs the default schedule), so
    1f1b is what it runs anyway; GPipe is modelled across unequal stages (pooled ``simulate``
    prices it) but not searched; the others are not modelled across unequal stages, which is
    pooled ``simulate``'s reason (``HeteroPlan``)."""
    from simulator.heterogeneous.plan import HETERO_SCHEDULES

    if schedule is None or Schedule(schedule) == Schedule.ONE_F_ONE_B:
        return
    if Schedule(schedule) in HETERO_SCHEDULES:
        raise InputError("--schedule", f"the mixed-plan search prices {Schedule.ONE_F_ONE_B.value} only, not "
                         f"{Schedule(schedule).value}", f"drop it, then price the chosen plan with simulate --plan / "
                         f"--group --schedule {Schedule(schedule).value}")
    raise InputError("--schedule", f"{Schedule(schedule).value} is not modelled across unequal stages",
                     "use " + " or ".join(s.value for s in HETERO_SCHEDULES) + " (the mixed-plan search prices "
                     f"{Schedule.ONE_F_ONE_B.value})")


def pooled_simulate_command(model: str, cluster: str, plan_file: str, headroom_gib: float | None = None) -> str:
    """The ``paraplan simulate`` command that prices a pooled plan saved by ``plan --json`` to
    ``plan_file`` (``--plan`` reads its ``best_plan``: the groups, batch, seq_len, dtype and the
    stack's switches it was planned with), with the request's model, cluster and headroom (the
    fit verdict's). ``--group`` cannot say it: it has no per-group micro-batch counts, and the
    groups' share of the batch is what the search chose."""
    args = ["paraplan", "simulate", "-m", model, "-c", cluster, "--plan", plan_file]
    if headroom_gib is not None:
        args += ["--headroom-gib", f"{headroom_gib:g}"]
    return " ".join(shlex.quote(a) for a in args)


def _plan_pooled(spec, model, cluster, gpus, global_batch, global_batch_tokens, top, max_tp, fix, headroom_gib, dtypes,
                 as_json, as_csv, pareto, explain, max_micro_batch, emit, explicit, stack=DEFAULT_TRAINING_STACK) -> None:
    """``plan`` on a pooled cluster (``planners.heterogeneous``; output in ``commands._hetero``);
    ``model``: the model as given (a name or a file), for the ``simulate`` command it prints."""
    from hardware_specs.catalog import load_pooled_cluster
    from paraplan.commands._hetero import plan_outputs
    from planners.heterogeneous import plan_heterogeneous

    if gpus is not None:
        raise InputError("--gpus", "a pooled cluster states its pools' GPU counts", "drop --gpus")
    for flag, given in (("--fix", bool(fix)), ("--pareto", pareto), ("--emit", emit is not None)):
        if given:
            raise InputError(flag, "not available for a pooled cluster", "drop it")
    for name in ("dp", "tp", "pp", "cp", "ep", "vpp"):
        if explicit.get(name) is not None:
            raise InputError(f"--{name}", "the degrees differ per pool in a mixed plan; the search chooses them",
                             "drop it (--max-tp limits tensor parallelism)" if name == "tp" else "drop it")
    _check_pooled_schedule(explicit.get("schedule"))
    if explicit.get("recompute_num_layers") is not None:   # every stage of a pooled plan recomputes in full
        raise InputError("--recompute-num-layers", "not modelled on pooled clusters", "drop it")
    if explicit.get("zero_shard_group") is not None:       # ZeRO shards over every replica across pools
        raise InputError("--zero-shard-group", "not modelled on pooled clusters", "drop it")
    if dtypes and len(dtypes) > 1:
        raise InputError("--dtype", "a mixed plan runs one dtype on every pool", "give one --dtype")
    mb = explicit.get("micro_batch")
    bar = LazyBar("searching plans across the pools", PROGRESS_AFTER_S)     # seconds on two pools of 256
    try:
        result = plan_heterogeneous(
            spec, load_pooled_cluster(cluster), global_batch, global_batch_tokens=global_batch_tokens,
            dtype=dtypes[0] if dtypes else None, max_tp=max_tp, max_micro_batch=max_micro_batch,
            micro_batches=(mb,) if mb is not None else None,
            recomputes=(explicit["recompute"],) if explicit.get("recompute") else None,
            zeros=(explicit["zero"],) if explicit.get("zero") is not None else (0, 1), headroom_gib=headroom_gib,
            top=max(top, 1), stack=stack, progress=bar)
    finally:
        bar.close()
    click.echo(plan_outputs(result, top, as_json, as_csv, explain,
                            rerun=pooled_simulate_command(model, cluster, "plan.json", headroom_gib)), nl=False)
