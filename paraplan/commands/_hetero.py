"""The pooled-cluster side of ``paraplan plan`` and ``paraplan simulate`` (not a command itself).

A cluster file that lists ``pools`` (``hardware_specs.pools``) switches both commands here:
``plan`` runs ``planners.heterogeneous.plan_heterogeneous`` and prints the best mixed plan next to
the best on only the fastest and only the largest pool; ``simulate`` reads a plan from
``--plan FILE`` (the ``plan`` --json ``best_plan`` format) or ``--group`` specs and prints the
step, per stage and per pool.

``--group`` grammar: ``[REPLICASx] POOL:tpT:ppK[:L1,L2,...] [> POOL:tpT:ppK[:...] ...]``, e.g.
``8x h100:tp8:pp4`` (8 replicas of a 4-stage pipeline, layers split evenly) or
``4x a100:tp8:pp1:20 > h100:tp8:pp2:30,30`` (a pipeline crossing pools with its layer counts).
"""
from __future__ import annotations

import csv
import io
import json
import re
import textwrap
from pathlib import Path


from hardware_specs.yaml_files import parse_yaml
from hardware_specs.errors import InputError, json_int, not_a_file, shown, suggest, unique_keys
from hardware_specs.pools import PooledCluster
from model_specs.model_spec import ModelSpec
from paraplan import priors
from paraplan.cli import dump_json, format_table, four_significant
from planners.hetero_explain import POOL_HEADERS, layout_text, pool_rows
from simulator import headroom
from simulator.heterogeneous import HeteroPlan, HeteroReport, ReplicaGroup, StagePlacement, plan_dict
from simulator.report import TIME_PARTS

GIB = 2**30
_SEGMENT = re.compile(r"^\s*(?P<pool>[A-Za-z0-9][A-Za-z0-9_.+-]*):tp(?P<tp>\d+):pp(?P<pp>\d+)(?::(?P<layers>[\d,\s]+))?\s*$")
_REPLICAS = re.compile(r"^\s*(?P<d>\d+)\s*x\s+(?P<rest>.+)$")


# --------------------------------------------------------------------------------------------
# Reading plans
# --------------------------------------------------------------------------------------------

def _even(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def parse_group(text: str, model: ModelSpec) -> ReplicaGroup:
    """One ``--group`` spec (module docstring) as a ``ReplicaGroup``."""
    where = "--group"
    m = _REPLICAS.match(text)
    replicas, rest = (int(m.group("d")), m.group("rest")) if m else (1, text)
    segments = []
    for part in rest.split(">"):
        s = _SEGMENT.match(part)
        if not s:
            raise InputError(where, f"cannot read {part.strip()!r}",
                             "write e.g. '8x h100:tp8:pp4' or '4x a100:tp8:pp1:20 > h100:tp8:pp2:30,30'")
        pp = int(s.group("pp"))
        layers = None
        if s.group("layers"):
            layers = [int(x) for x in s.group("layers").replace(" ", "").split(",") if x]
            if len(layers) != pp:
                raise InputError(where, f"{part.strip()!r} lists {len(layers)} layer counts for pp{pp}",
                                 "give one count per stage")
        segments.append((s.group("pool"), int(s.group("tp")), pp, layers))
    stages_total = sum(seg[2] for seg in segments)
    if stages_total < 1 or stages_total > model.num_layers:
        raise InputError(where, f"{stages_total} stages for {model.num_layers} layers", "use between 1 and the layer count")
    explicit = [seg[3] for seg in segments]
    if all(e is None for e in explicit):
        counts = _even(model.num_layers, stages_total)
    elif all(e is not None for e in explicit):
        counts = [n for e in explicit for n in e]
    else:
        raise InputError(where, "give layer counts for every segment of a group or for none",
                         f"end every segment with its stages' layer counts ('pool:tpT:ppP:n1,...,nP'), {model.num_layers} "
                         f"in all for {model.name}, or drop them all to split the layers evenly")
    stages, i = [], 0
    for pool, tp, pp, _ in segments:
        for _ in range(pp):
            stages.append(StagePlacement(pool, tp, counts[i]))
            i += 1
    return ReplicaGroup(stages=tuple(stages), replicas=replicas)


def read_plan_file(path: str) -> dict:
    """A plan file (YAML or JSON; the ``best_plan`` object of ``paraplan plan --json``)."""
    p = Path(path)
    if not p.is_file():
        raise InputError("--plan", not_a_file(path), "check the path")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("--plan", f"{path} is not UTF-8 text (byte {exc.start})", "save it as UTF-8") from None
    if p.suffix == ".json":
        try:
            data = json.loads(text, parse_int=json_int, object_pairs_hook=unique_keys)
        except InputError as exc:
            raise InputError("--plan", f"{path}: {exc.message}", exc.fix) from None
        except json.JSONDecodeError:
            raise InputError("--plan", f"cannot parse {path}", "give a YAML or JSON plan") from None
        except RecursionError:
            raise InputError("--plan", f"{path} nests values too deeply", "flatten the file") from None
    else:       # the catalog's guarded reader: alias bombs and runaway nesting are refused
        data = parse_yaml(text, "--plan", path)
    if isinstance(data, dict) and isinstance(data.get("best_plan"), dict):
        data = data["best_plan"]
    if not isinstance(data, dict) or not isinstance(data.get("groups"), list):
        raise InputError("--plan", f"{path} has no 'groups' list", "see paraplan simulate --help")
    return data


#: the keys of a replica group and of a stage in a plan file (``report.plan_dict``)
GROUP_KEYS = ("stages", "replicas", "micro_batches")
STAGE_KEYS = ("pool", "tp", "layers")


def plan_from_data(data: dict) -> HeteroPlan:
    """A plan mapping (``report.plan_dict`` format) as a ``HeteroPlan`` (errors name the field)."""
    groups = groups_from_data(data)
    keys = ("micro_batch", "global_batch", "zero_stage", "recompute", "sequence_parallel", "dtype", "schedule",
            "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "flash_attention",
            "grad_accumulation_fusion", "attention_kernel", "grad_reduce_bytes", "software")
    # efficiency_fitted labels plan's output (``plan --json``'s best_plan), not a setting: read past
    # it; seq_len is the model's (``plan_seq_len``, read by simulate before the plan)
    unknown = sorted(str(k) for k in data if k not in keys and k not in ("groups", "efficiency_fitted", "seq_len"))
    if unknown:
        # a misspelt setting would otherwise run at its default without a word
        raise InputError(f"--plan.{unknown[0]}", "not a key of a plan", suggest(unknown[0], keys + ("groups",)))
    return HeteroPlan(groups=groups, **{k: data[k] for k in keys if data.get(k) is not None})


def plan_seq_len(data: dict | None, given: int | None) -> int | None:
    """The sequence length (tokens) a plan file was planned at (its ``seq_len``, written by
    ``plan --json``), else ``given`` (``--seq-len``; None: the model's default). A ``--seq-len``
    other than the file's is an error: the plan's memory and step were found at the file's."""
    stated = (data or {}).get("seq_len")
    if stated is None:
        return given
    if isinstance(stated, bool) or not isinstance(stated, int) or stated < 1:
        raise InputError("--plan.seq_len", f"must be a positive integer, got {shown(stated)}")
    if given is not None and int(given) != stated:
        raise InputError("--seq-len", f"{given} differs from the plan file's seq_len {stated}, the length it "
                         "was planned at", "drop --seq-len, or edit seq_len in the plan file")
    return stated


def groups_from_data(data: dict) -> tuple[ReplicaGroup, ...]:
    """The replica groups of a plan mapping (its ``groups`` list; errors name the field)."""
    if not isinstance(data["groups"], list) or not data["groups"]:
        # an empty list ran on a subset of no pool, blamed on the cluster file
        raise InputError("--plan.groups", "lists no replica group", "add at least one group of stages")
    groups = []
    for gi, g in enumerate(data["groups"]):
        if not isinstance(g, dict) or not isinstance(g.get("stages"), list):
            raise InputError(f"groups[{gi}]", "needs 'stages' (a list of {pool, tp, layers})")
        extra = sorted(str(k) for k in g if k not in GROUP_KEYS)
        if extra:       # a typo ('replica') ran as the default of 1 replica without a word
            raise InputError(f"groups[{gi}].{extra[0]}", "not a key of a replica group", suggest(extra[0], GROUP_KEYS))
        stages = []
        for si, st in enumerate(g["stages"]):
            if not isinstance(st, dict) or not {"pool", "tp", "layers"} <= set(st):
                raise InputError(f"groups[{gi}].stages[{si}]", "needs pool, tp and layers")
            extra = sorted(str(k) for k in st if k not in STAGE_KEYS)
            if extra:
                raise InputError(f"groups[{gi}].stages[{si}].{extra[0]}", "not a key of a stage",
                                 suggest(extra[0], STAGE_KEYS))
            stages.append(StagePlacement(st["pool"], st["tp"], st["layers"]))
        groups.append(ReplicaGroup(stages=tuple(stages), replicas=g.get("replicas", 1),
                                   micro_batches=g.get("micro_batches")))
    return tuple(groups)


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------

def stage_fit_text(st, headroom_gib: float | None = None) -> str:
    """``yes`` when the stage leaves the headroom a run keeps free (``simulator.headroom``, as
    the planner and a one-kind cluster's ``simulate`` require), ``tight`` when it fits the HBM
    but not with that headroom, ``NO`` over the HBM."""
    keep = headroom.headroom_gib(st.hbm_bytes, headroom_gib)
    if headroom.fits(st.memory_bytes, st.hbm_bytes, keep):
        return "yes"
    return "tight" if st.memory_bytes <= st.hbm_bytes else "NO"


def report_json(report: HeteroReport, headroom_gib: float | None = None) -> dict:
    """``report.as_dict()`` with each stage's and the plan's ``fits`` judged with the headroom a run
    keeps (``fits_hbm``: the bare HBM check) and each stage's ``headroom_required_bytes``."""
    data = report.as_dict()
    ok = []
    for st, d in zip(report.stages, data.get("stages", [])):
        d["fits_hbm"] = bool(st.fits)
        d["headroom_required_bytes"] = headroom.headroom_gib(st.hbm_bytes, headroom_gib) * GIB
        d["fits"] = stage_fit_text(st, headroom_gib) == "yes"
        ok.append(d["fits"])
    for d in data.get("pools", []):
        d["fits_hbm"] = bool(d["fits"])
        d["fits"] = all(sd["fits"] for sd in data.get("stages", []) if sd["pool"] == d["pool"])
    data["fits_hbm"] = bool(report.fits)
    data.pop("mfu")         # of the plan dtype's peak: shown, as everywhere, of the reference (bf16) peak
    data[f"mfu_{data.pop('mfu_reference_dtype')}_pct"] = 100.0 * data.pop("mfu_reference")
    data["fits"] = bool(all(ok)) if ok else bool(report.fits)
    return data


def render_report(report: HeteroReport, model: ModelSpec, cluster: PooledCluster,
                  headroom_gib: float | None = None, zero_note: str = "") -> str:
    """The table of one heterogeneous step: breakdown, throughput, groups, stages, pools; a
    stage's ``fits`` keeps the headroom ``headroom_gib`` (default: ``simulator.headroom``'s);
    ``zero_note``: where the ZeRO stage came from when neither the user nor the plan file gave it
    (``paraplan.commands.simulate.zero_source_text``), printed after it as on one GPU kind."""
    plan = report.plan
    s = plan.settings
    prior = f" (rests on the unfitted efficiency prior of {', '.join(report.prior_pools)})" if report.prior_pools else ""
    settings = (f"micro_batch={plan.micro_batch} global_batch={plan.global_batch} zero={s.zero_stage}"
                + (f" ({zero_note})" if zero_note else "")
                + f" recompute={s.recompute.value} sequence_parallel={'on' if plan.sequence_parallel else 'off'} "
                f"dtype={s.dtype} schedule={s.schedule.value} gpus={report.n_gpus}")
    lines = [f"model    {report.model}  ({model.num_layers} layers, hidden {model.hidden_size}, seq_len {model.seq_len})",
             f"cluster  {cluster.name}  ({', '.join(f'{p.name}: {p.gpus}x {p.cluster.gpu.name}' for p in cluster.pools)})",
             f"plan     {layout_text(plan)}",
             *textwrap.wrap(settings, width=120, initial_indent=" " * 9, subsequent_indent=" " * 9,
                            break_long_words=False, break_on_hyphens=False), "",
             "step time (pipeline parts: the slowest replica group's slowest stage, bubble = its idle share;",
             "           dp_comm_exposed_s: the gradient reduction's end after the slowest group's, each group's",
             "           share running past its own end; optimizer_s: the largest of any group)"]
    step = report.step_time_s
    rows = [[k, f"{v:.4f}", f"{100 * v / step:.1f}"] for k, v in report.time_breakdown_s.items()]
    rows.append(["step_time_s", f"{step:.4f}", "100.0"])
    lines.append(format_table(rows, ["part", "time_s", "pct_of_step"], align="lrr", indent="  ").rstrip())
    lines += ["", "throughput" + prior,
              format_table([["tokens_per_s", f"{report.tokens_per_s:,.0f}"],
                            ["tokens_per_s_per_gpu", f"{report.tokens_per_s_per_gpu:,.1f}"],
                            [f"mfu_{report.mfu_reference_dtype}_pct", f"{100 * report.mfu_reference:.1f}"]],
                           ["metric", "value"], align="lr", indent="  ").rstrip(),
              # a group's replicas may run one micro-batch more than others (the shares): the column
              # is the busiest replica's, so replicas x micro_batches_busiest can exceed the total beside it
              "", "replica groups (micro_batches_busiest: the busiest replica's, which sets the group's time; a group's "
                  "replicas differ by at most one)"]
    rows = [[i, g["replicas"], g["stages"], g["micro_batches_busiest_replica"], g["micro_batches_total"], f"{g['slowest_stage_s'] * 1e3:.2f}",
             f"{g['pipeline_s']:.4f}"] for i, g in enumerate(report.groups)]
    lines.append(format_table(rows, ["group", "replicas", "stages", "micro_batches_busiest", "micro_batches_total",
                                     "slowest_stage_ms", "pipeline_s"], indent="  ").rstrip())
    lines += ["", "stages (per micro-batch; memory per GPU at the stage's peak)"]
    rows = [[st.group, st.stage, st.pool, st.tp, st.layers, f"{st.stage_time_s * 1e3:.2f}", f"{st.compute_s * 1e3:.2f}",
             f"{st.tp_comm_exposed_s * 1e3:.2f}", f"{st.pp_comm_s * 1e3:.2f}",
             f"{st.memory_bytes / GIB:.2f}/{st.hbm_bytes / GIB:.0f}", stage_fit_text(st, headroom_gib)]
            for st in report.stages]
    lines.append(format_table(rows, ["group", "stage", "pool", "tp", "layers", "stage_ms", "compute_ms", "tp_comm_ms",
                                     "pp_comm_ms", "memory_gib/hbm_gib", "fits"], indent="  ").rstrip())
    tight = [st for st in report.stages if stage_fit_text(st, headroom_gib) == "tight"]
    if tight:       # the headroom of the tight stages' pools only (pools differ in HBM, so in the default)
        keep = {f"{headroom.headroom_gib(st.hbm_bytes, headroom_gib):.2f}" for st in tight}
        pools = ", ".join(dict.fromkeys(st.pool for st in tight))
        lines.append(f"  tight: fits the HBM but leaves less than the {' / '.join(sorted(keep))} GiB headroom a run keeps "
                     f"free on {pools} (the planner's limit; --headroom-gib sets it)")
    over = [st for st in report.stages if stage_fit_text(st, headroom_gib) == "NO"]
    if over:        # shown, as a one-kind cluster's simulate shows it, not refused: the breakdown is the answer
        st = max(over, key=lambda x: x.memory_bytes - x.hbm_bytes)
        lines.append(f"fits: NO ({len(over)} stage{'s' if len(over) > 1 else ''} over its GPU's HBM; the most: stage "
                     f"{st.stage} of group {st.group} on {st.pool} needs {st.memory_bytes / GIB:.2f} GiB per GPU, "
                     f"{st.gpu} has {st.hbm_bytes / GIB:.0f} GiB, over by {(st.memory_bytes - st.hbm_bytes) / GIB:.2f} GiB; "
                     "use more stages or tensor parallelism there, recomputation, ZeRO or a smaller micro-batch)")
    lines += ["", "where the time goes per pool (busiest stage, seconds per step)"]
    lines.append(format_table(pool_rows(report), POOL_HEADERS, indent="  ").rstrip())
    return "\n".join(lines) + "\n"


def _mfu_in_percent(frame, reference: str):
    """``frame`` with its ``mfu_reference`` fraction as ``mfu_<reference>_pct``: percent of the
    reference (bf16) peaks summed over the plan's GPUs, as every other command's output
    (``paraplan.mfu``); the plan dtype's ``mfu`` is dropped."""
    if "mfu_reference" not in frame.columns:
        return frame
    frame = frame.copy()
    frame.insert(list(frame.columns).index("mfu"), f"mfu_{reference}_pct", 100.0 * frame["mfu_reference"])
    return frame.drop(columns=["mfu", "mfu_reference"])


def _fitted_plan_dict(plan, report, seq_len: int) -> dict:
    """``plan_dict(plan)`` with the sequence length it was planned at (tokens; ``simulate --plan``
    runs it, not the model's default) and ``efficiency_fitted``: False where a pool it runs on
    rests on an unfitted prior (``report.prior_pools``), as the comparison and plan rows say."""
    return {**plan_dict(plan), "seq_len": int(seq_len), "efficiency_fitted": not report.prior_pools}


def plan_outputs(result, top: int, as_json: bool, as_csv: bool, explain: bool, rerun: str | None = None) -> str:
    """``paraplan plan`` output for a pooled cluster; ``rerun``: the ``simulate --plan plan.json``
    command that prices the best plan once its --json is saved to plan.json (the text says so)."""
    comp = result.comparison()
    table = result.plans.head(top)
    # per row, as the one-kind plan's rows: False where a pool it runs on rests on the prior (the
    # text table marks those rows' tokens/s, as the comparison's; it printed them unmarked)
    fitted = [not any(priors.is_prior(p.cluster) for p in result.row_plan(i)[1].pools) for i in range(len(table))]
    if as_json or as_csv:
        table = _mfu_in_percent(table, result.mfu_reference_dtype)     # the comparison is in percent already
        table = table.assign(efficiency_fitted=fitted)
    if as_json:
        data = {
            "request": {"model": result.model, "cluster": result.cluster,
                        "pools": [{"name": n, "gpu": g, "gpus": c} for n, g, c in result.pools],
                        "global_batch": result.global_batch, "seq_len": result.seq_len, "dtype": result.dtype},
            "search": {"evaluated": result.evaluated, "wall_s": result.wall_s},
            "comparison": comp.to_dict("records"),
            "best_plan": _fitted_plan_dict(result.best, result.best_report, result.seq_len),
            "fastest_pool_only": (_fitted_plan_dict(*result.fastest_only, result.seq_len) if result.fastest_only
                                  else None),
            "largest_pool_only": (_fitted_plan_dict(*result.largest_only, result.seq_len) if result.largest_only
                                  else None),
            "plans": table.to_dict("records"),
            # the best plan's GPUs per pool, the idle rest, why and the fix (``planners.hetero_idle``)
            "pool_use": [dict(r) for r in result.pool_use],
            "efficiency_prior_pools": list(result.prior_pools),
        }
        if explain:
            data["explain"] = result.explain
        return dump_json(data)
    if as_csv:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(table.columns)
        for r in table.itertuples(index=False):
            writer.writerow([repr(v) if isinstance(v, float) else v for v in r])
        return buf.getvalue()
    pools = ", ".join(f"{n}: {c}x {g}" for n, g, c in result.pools)
    tokens = result.global_batch * result.seq_len
    # each set of pools runs its own default dtype: say so where the plans shown differ in it
    shown = set(result.plans["dtype"]) | {pair[0].dtype for _, pair in result.pool_only_rows() if pair}
    others = sorted(shown - {result.dtype})
    dtypes = (f"{result.dtype} in the best plan (each set of pools runs the first of bf16, fp16, fp32 all its GPUs "
              f"have: {', '.join(others)} too here)" if others else result.dtype)
    out = [f"plan: {result.model} on {result.cluster} ({pools}); global batch {result.global_batch} sequences x "
           f"{result.seq_len} = {tokens:,} tokens, {dtypes}\n",
           f"scored {result.evaluated:,} candidate plans in {result.wall_s:.2f} s\n\n"]
    mfu_head = f"mfu_{result.mfu_reference_dtype}_pct"      # percent of the reference peaks, summed over its GPUs
    # a row resting on a prior pool carries the marker beside its throughput (the note below explains it)
    rows = [[r["plan"], r["n_gpus"], "-" if r["n_gpus"] == 0 else four_significant(r['step_time_s']),
             f"{r['tokens_per_s']:,.0f}" + ("" if r["efficiency_fitted"] is not False else priors.mark_text()),
             "-" if r["n_gpus"] == 0 else f"{r[mfu_head]:.1f}",
             "-" if r["n_gpus"] == 0 else f"{r['best_gain_pct']:+.1f}"] for r in comp.to_dict("records")]
    out.append(format_table(rows, ["plan", "n_gpus", "step_time_s", "tokens_per_s", mfu_head, "best_vs_this_pct"]))
    # the 'only' rows come from the mixed search's narrower space, not from a one-kind plan
    out.append("the 'only' rows are the best plans on that pool within this mixed search (pipelines, ZeRO 0-1 unless "
               "--zero, no CP or activation offload);\n`paraplan plan -c <the pool's cluster> -n <its GPUs>` searches "
               "one kind's whole space and can be faster\n")
    out.append(f"\nbest plan: {layout_text(result.best)}\n")
    if rerun:       # as a one-kind plan prints its simulate command: the same step, per group, stage and pool
        out.append("best plan as one run (its step, each group and stage, memory per pool): save this command's "
                   f"--json (> plan.json), then\n  {rerun}\n")
    cells = []
    show_dtype = table["dtype"].nunique() > 1
    for r, ok in zip(table.to_dict("records"), fitted):
        cells.append([r["kind"], r["pools"], r["n_gpus"], r["layout"], r["micro_batch"], r["zero_stage"], r["recompute"],
                      "on" if r["sequence_parallel"] else "off"] + ([r["dtype"]] if show_dtype else [])
                     + [four_significant(r['step_time_s']), f"{r['tokens_per_s']:,.0f}" + ("" if ok else priors.mark_text()),
                        f"{100 * r['mfu_reference']:.1f}", f"{r['memory_gib']:.1f}"])
    head = (["kind", "pools", "n_gpus", "layout", "micro_batch", "zero", "recompute", "sp"]
            + (["dtype"] if show_dtype else []) + ["step_time_s", "tokens_per_s", mfu_head, "memory_gib"])
    out.append("\ntop plans\n" + format_table([[str(i + 1)] + c for i, c in enumerate(cells)], ["rank"] + head))
    if result.prior_pools:
        out.append(f"\nnote: numbers on {', '.join(result.prior_pools)} rest on an unfitted efficiency prior"
                   f" ({priors.MARK} beside the throughput of each plan that runs on them)\n")
    if explain:
        out.append("\n" + result.explain)
    return "".join(out)


__all__ = ["TIME_PARTS", "parse_group", "plan_from_data", "plan_outputs", "read_plan_file", "render_report"]
