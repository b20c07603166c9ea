"""Why the winner wins: its step-time breakdown against the runner-up, and what was pruned."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hardware_specs.efficiency_model import prior_mark
from hardware_specs.mfu_reference import mfu_pct, reference_dtype
from model_specs.model_spec import ModelSpec
from planners.search_space import RULES
from simulator.report import TIME_PARTS

_COMPARED = ("n_gpus", "dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "zero_stage", "zero_shard_group",
             "recompute", "recompute_num_layers", "offload_activation_layers", "sequence_parallel", "schedule", "dtype")


def slower_share(step_s: float, best_step_s: float) -> float:
    """How much slower a plan is than the fastest, as a share: its step time over the fastest's,
    minus 1 (2.0 s against 1.0 s is 1.0, "100% slower"). The one definition of "% slower" that
    ``--explain`` and ``--emit`` print. At one global batch the step times are in the inverse
    ratio of the tokens/s, so ``slower_share(1 / tokens_per_s, 1 / best_tokens_per_s)`` is the same."""
    return float(step_s) / float(best_step_s) - 1.0


def _config_text(row) -> str:
    sp = "on" if row["sequence_parallel"] else "off"
    extra = ""
    if row.get("recompute_num_layers", 0):
        extra += f" recompute_num_layers={row['recompute_num_layers']}"
        if row.get("recompute_layers_decrement", 0):
            extra += f"(-{row['recompute_layers_decrement']}/stage)"
    if row.get("offload_activation_layers", 0):
        extra += f" offload_layers={row['offload_activation_layers']}"
    if row.get("zero_shard_group", 0):
        extra += f" shard_group={row['zero_shard_group']}"
    etp = row.get("etp", 1)
    # the expert TP where it is not 1 or the row has experts split over ranks (etp 1 vs tp differ)
    etp = f" etp={etp}" if etp != 1 or row["ep"] > 1 else ""
    return (f"dp={row['dp']} tp={row['tp']} pp={row['pp']} cp={row['cp']} ep={row['ep']}{etp} vpp={row['vpp']} "
            f"micro_batch={row['micro_batch']} zero={row['zero_stage']} recompute={row['recompute']}{extra} "
            f"sp={sp} schedule={row['schedule']} {row['dtype']}")


def _perf_text(row, gpu=None, mark: str = "") -> str:
    """Step, throughput, MFU (percent of ``gpu``'s reference peak, as the plan table shows it;
    of the row dtype's peak without ``gpu``) and memory of one plan row; ``mark`` follows each
    number that rests on the efficiency model (time, throughput, MFU), as in the plan table."""
    if gpu is None:
        mfu = f"MFU {100 * row['mfu']:.1f}%{mark} of the {row['dtype']} peak"
    else:
        mfu = f"MFU {float(mfu_pct(row['mfu'], str(row['dtype']), gpu)):.1f}%{mark} of the {reference_dtype(gpu)} peak"
    return (f"{row['step_time_s']:.4g} s/step{mark}, {row['tokens_per_s']:,.0f} tokens/s{mark}, "
            f"{mfu}, {row['memory_gib']:.1f} GiB/GPU")


def _runner_up(plans):
    """Index of the best plan slower than the winner (or the second plan if all tie), and the
    number of plans that tie with the winner."""
    tps = plans["tokens_per_s"].to_numpy()
    ties = int((tps >= tps[0] * (1 - 1e-12)).sum()) - 1
    if len(plans) == 1:
        return None, 0
    slower = ties + 1 if ties + 1 < len(plans) else 1
    return slower, ties


#: memory features a plan may use that cost time or a framework's support, and how a ranked
#: table's row uses each (selective recomputation is not among them: it is the plain default)
EXOTIC_FEATURES = {
    "activation offload": lambda plans: plans["offload_activation_layers"].to_numpy() > 0,
    "ZeRO-3": lambda plans: plans["zero_stage"].to_numpy() >= 3,
    "full recomputation": lambda plans: plans["recompute"].astype(str).to_numpy() == "full",
}


@dataclass(frozen=True)
class Plainer:
    """The fastest kept plan without some of the winner's exotic features.

    Attributes:
        without: the features it does without (``EXOTIC_FEATURES`` names).
        index: its 0-based position in the ranked table; None when no kept plan is without them.
        kept: plans in the table (the search's kept plans, ``PlanResult.plans``).
        slower_share: its step time over the winner's, less one (0.0023 = 0.23% slower).
    """

    without: tuple[str, ...]
    index: int | None
    kept: int
    slower_share: float | None = None

    @property
    def label(self) -> str:
        return " and ".join(self.without)


def plainer_plans(plans) -> list[Plainer]:
    """For the winner (row 0 of ``plans``, ranked fastest first), the fastest plan without each
    of its exotic features (``EXOTIC_FEATURES``) and, when it uses several, without all of
    them: from the plans the search kept, no second search. Empty when it uses none."""
    if len(plans) == 0:
        return []
    uses = {name: used(plans) for name, used in EXOTIC_FEATURES.items()}
    mine = [name for name, mask in uses.items() if mask[0]]
    groups = [(name,) for name in mine] + ([tuple(mine)] if len(mine) > 1 else [])
    step = plans["step_time_s"].to_numpy()
    out = []
    for group in groups:
        free = np.flatnonzero(~np.logical_or.reduce([uses[name] for name in group]))
        if len(free) == 0:
            out.append(Plainer(group, None, len(plans)))
            continue
        i = int(free[0])
        out.append(Plainer(group, i, len(plans), slower_share(step[i], step[0])))
    return out


def _without_text(group: list[Plainer]) -> str:
    """What the plans of ``group`` (one answer) do without: ``activation offload``,
    ``activation offload or ZeRO-3`` (each alone), ``activation offload, ZeRO-3 or both`` (each
    alone and all of them together), ``activation offload and ZeRO-3`` (together only)."""
    singles = [p.label for p in group if len(p.without) == 1]
    together = [p for p in group if len(p.without) > 1]
    if not singles:
        return together[0].label
    if together:
        return ", ".join(singles) + (" or both" if len(singles) == 2 else " or all of them")
    return ", ".join(singles[:-1]) + " or " + singles[-1] if len(singles) > 1 else singles[0]


def plainer_lines(plans, found: list[Plainer], mark: str = "") -> list[str]:
    """The ``--explain`` lines of ``plainer_plans``: rank, configuration and how much slower
    (``mark`` after the seconds and the share: they rest on an unfitted prior).
    Features whose fastest plan without them is the same plan share one line (the plan without
    all of them joins that line only when it is the plan of every one)."""
    singles = [p for p in found if len(p.without) == 1]
    groups: dict = {}
    for p in singles:
        groups.setdefault(p.index, []).append(p)
    for p in found:
        if len(p.without) > 1:
            same = groups.get(p.index, [])
            if len(same) == len(singles):
                same.append(p)
            else:
                groups[("together", p.index)] = [p]
    lines = []
    for group in groups.values():
        index, kept = group[0].index, group[0].kept
        if index is None:
            it = "it" if len(group) == 1 and len(group[0].without) == 1 else "them"
            lines.append(f"  without {_without_text(group)}: none of the {kept:,} kept plan{'' if kept == 1 else 's'} "
                         f"is without {it}")
            continue
        row = plans.iloc[index]
        share = group[0].slower_share
        pace = "as fast" if share <= 0 else f"{100 * share:.2f}% slower{mark}"
        lines.append(f"  without {_without_text(group)}: rank {index + 1}, {_config_text(row)}: {pace} "
                     f"({row['step_time_s']:.4g} s/step{mark})")
    return lines


#: a part's difference smaller than this share of the step is floating-point rounding (a makespan
#: less the busy time comes out near 1e-16 s for pp = 1), not a reason one plan is faster
NOISE_SHARE_OF_STEP = 1e-9


def why_parts(deltas: dict, step_time_s: float) -> tuple[list, list]:
    """The step-time parts the runner-up spends more on (``gains``, largest first) and those the
    winner pays more for (``costs``, largest first), as (runner-up minus winner seconds, part)
    pairs from ``deltas`` (part -> runner-up minus winner, seconds). A difference within
    ``NOISE_SHARE_OF_STEP`` of ``step_time_s`` is rounding and names neither."""
    noise_s = NOISE_SHARE_OF_STEP * step_time_s
    parts = [(d, p) for p, d in deltas.items() if p != "step_time_s" and abs(d) > noise_s]
    gains = sorted(((d, p) for d, p in parts if d > 0), reverse=True)
    costs = sorted((d, p) for d, p in parts if d < 0)
    return gains, costs


def ms_text(seconds: float) -> str:
    """``seconds`` in milliseconds to three significant digits, without an exponent: 19.3 ms,
    867 ms, 3,350 ms (``:.3g`` wrote 3.35e+03 ms)."""
    ms = float(f"{seconds * 1e3:.3g}")
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def stage_layers_text(stage_layers) -> str:
    """``0:0-7 1:8-15 ...`` (stage: first-last layer) for up to 16 stages, else run lengths of
    the layer counts (``1 x126``); an empty stage (embedding or loss only) shows as ``-``."""
    if len(stage_layers) <= 16:
        return " ".join(f"{s}:{a}-{b - 1}" if b - a > 1 else (f"{s}:{a}" if b > a else f"{s}:-")
                        for s, (a, b) in enumerate(stage_layers))
    runs: list[list[int]] = []
    for a, b in stage_layers:
        if runs and runs[-1][0] == b - a:
            runs[-1][1] += 1
        else:
            runs.append([b - a, 1])
    return ", ".join(f"{n} x{k}" if k > 1 else str(n) for n, k in runs)


GIB = 2**30


def memory_feature_notes(model: ModelSpec, cluster, eff, config, limit_bytes: float) -> list[str]:
    """Lines saying which memory features the plan ``config`` needs to fit under
    ``limit_bytes``: for partial recomputation, activation offload and optimizer offload, the
    memory without it (and, for recomputation, the step time with every layer recomputed); the
    seconds carry ``PRIOR_MARK`` where ``eff`` is an unfitted prior, as the table's cells do."""
    from dataclasses import replace

    from simulator.config_batch import ConfigBatch
    from simulator.step_model import evaluate, memory_parts

    def mem(c):
        return float(memory_parts(model, cluster, eff, ConfigBatch.from_configs([c]))["memory_bytes"][0])

    def step(c):
        return float(evaluate(model, cluster, eff, ConfigBatch.from_configs([c]))["step_time_s"][0])

    mark = prior_mark(eff.is_prior)
    notes = []
    base = mem(config)
    limit = limit_bytes / GIB
    if config.recompute_num_layers:
        none = replace(config, recompute="none", recompute_num_layers=0, recompute_layers_decrement=0)
        full = replace(config, recompute_num_layers=0, recompute_layers_decrement=0)
        dec = (f", {config.recompute_layers_decrement} fewer per later stage" if config.recompute_layers_decrement
               else "")
        t, t_full = step(config), step(full)
        notes.append(f"recomputes {config.recompute_num_layers} layer{'' if config.recompute_num_layers == 1 else 's'} per chunk in full{dec}: "
                     f"{base / GIB:.1f} GiB; without recomputation {mem(none) / GIB:.1f} GiB "
                     f"({'does not fit' if mem(none) > limit_bytes else 'fits'} in {limit:.1f}); recomputing every "
                     f"layer would cost {t_full - t:+.3g} s{mark} per step")
    if config.offload_activation_layers:
        without = mem(replace(config, offload_activation_layers=0))
        notes.append(f"offloads the activations of {config.offload_activation_layers} layer{'' if config.offload_activation_layers == 1 else 's'} per chunk to the host: "
                     f"{base / GIB:.1f} GiB; without offload {without / GIB:.1f} GiB "
                     f"({'does not fit' if without > limit_bytes else 'fits'} in {limit:.1f})")
    if config.offload_optimizer_fraction:
        without = mem(replace(config, offload_optimizer_fraction=0.0))
        notes.append(f"keeps {100 * config.offload_optimizer_fraction:.0f}% of the optimizer on the host: "
                     f"without it {without / GIB:.1f} GiB")
    if config.zero_shard_group:
        plain = replace(config, zero_shard_group=0)
        # a plan fixed to hybrid sharding can be slower than sharding over all ranks: say which
        # way, not "-0.111 s per step faster"
        gain = step(plain) - step(config)
        notes.append(f"shards ZeRO-{config.zero_stage} states over groups of {config.zero_shard_group} and replicates "
                     f"across {config.dp * config.cp // config.zero_shard_group} (HSDP): {base / GIB:.1f} GiB, "
                     f"{abs(gain):.3g} s{mark} per step {'faster' if gain >= 0 else 'slower'} than sharding over all "
                     f"{config.dp * config.cp} ({mem(plain) / GIB:.1f} GiB)")
    return notes


def fit_text(result, fitting: int | None = None) -> str:
    """How many configurations fit, as the table and the explanation say it: "N fit", or, when
    some rows were never given the memory model (``PlanResult.fit_unchecked``), "at least N fit
    (M not checked ...)". ``fitting``: the count to show (default ``result.fitting``)."""
    n = result.fitting if fitting is None else fitting
    unchecked = getattr(result, "fit_unchecked", 0)
    if not unchecked:
        return f"{n:,} fit"
    return (f"at least {n:,} fit ({unchecked:,} not checked for memory: their step-time floor could not rank; "
            f"--count-fitting checks them)")


def split_stage_time_s(model: ModelSpec, cluster, eff, config, chunks=None) -> float:
    """The busiest stage's seconds per micro-batch as ``simulate`` prices ``config``
    (``extras["microbatch_stage_time_s"]``: its compute, recomputation, exposed TP / CP / EP /
    ZeRO-3 traffic, offload stalls and point-to-point sends for one micro-batch), with its
    decoder layers split as ``chunks`` ([start, stop) per model chunk, in layer order; written as
    a Megatron layout string, the embedding on the first chunk and the loss and MTP modules on the
    last) or, ``None``, as the configuration lays them out."""
    from dataclasses import replace

    from simulator.simulate import simulate
    if chunks is not None:
        from simulator.stage_layout import layout_string
        decoder = tuple(int(b) - int(a) for a, b in chunks)
        mtp = (0,) * (len(decoder) - 1) + (int(model.mtp_layers),)
        config = replace(config, pipeline_layout=layout_string(decoder, mtp), first_stage_layers=0,
                         last_stage_layers=0)
    return float(simulate(model, cluster, config, efficiency=eff).extras["microbatch_stage_time_s"])


def explain_text(result, model: ModelSpec, memory_notes=(), gpu=None, prior: bool = False,
                 split_times_s=None) -> str:
    """The ``--explain`` text of a ``PlanResult`` (``memory_notes``: ``memory_feature_notes``
    of the winner). ``prior``: the times rest on an unfitted efficiency model, so the winner's
    and runner-up's time, throughput and MFU, the step-time parts and every time the text cites
    carry ``PRIOR_MARK`` as the table's cells do.
    ``split_times_s``: (the winner's, the balanced split's) ``split_stage_time_s``, the slowest
    stage per micro-batch as ``simulate`` gives it (None: that line names no time)."""
    mark = prior_mark(prior)
    plans = result.plans
    lines = []
    lo, hi = result.gpus
    gpus = f"{lo}" if lo == hi else f"{lo}-{hi}"
    lines.append(f"search: {result.model} on {gpus} x {result.gpu} ({result.cluster}), global batch "
                 f"{result.global_batch} x {result.seq_len} tokens")
    lines.append(f"  {result.raw_size:,} candidate configurations, {result.evaluated:,} evaluated "
                 f"({result.evals_per_s:,.0f}/s), {fit_text(result, max(result.fitting, len(plans)))} in "
                 f"{result.memory_limit_bytes / 2**30:.1f} GiB; search {result.wall_s:.2f} s"
                 + (f" (the {len(plans):,} fastest and frontier plans kept)" if result.fitting > len(plans) else ""))
    lines.append("pruned (rule: configurations removed):")
    width = max(len(k) for k in RULES)
    for rule, meaning in RULES.items():
        n = result.pruned.get(rule, 0)
        if n:
            lines.append(f"  {rule:<{width}}  {n:>16,}  {meaning}")

    win = plans.iloc[0]
    lines.append("")
    lines.append(f"winner:    {_config_text(win)}")
    lines.append(f"           {_perf_text(win, gpu, mark)}")
    idx, ties = _runner_up(plans)
    if idx is None:
        lines.append("runner-up: none (only one configuration fits)")
    else:
        run = plans.iloc[idx]
        if ties:
            lines.append(f"({ties} other plan(s) tie with the winner on tokens/s; it is listed first for "
                         f"using the least memory)")
        diffs = [f"{k} {win[k]} -> {run[k]}" for k in _COMPARED if k in win and str(win[k]) != str(run[k])]
        lines.append(f"runner-up: {_config_text(run)}")
        lines.append(f"           {_perf_text(run, gpu, mark)}  ({100 * (run['step_time_s'] / win['step_time_s'] - 1):+.2f}% "
                     f"step time; differs in {', '.join(diffs) if diffs else 'nothing'})")
        lines.append("")
        lines.append(f"  {'step-time part':<22} {'winner_s':>12} {'runner_up_s':>12} {'diff_s':>12}")
        deltas = {}
        for part in TIME_PARTS + ("step_time_s",):
            a, b = float(win[part]), float(run[part])
            deltas[part] = b - a
            # seconds, as simulate prints them (with its mark where they rest on a prior)
            lines.append(f"  {part:<22} {f'{a:.4f}{mark}':>12} {f'{b:.4f}{mark}':>12} {f'{b - a:+.4f}{mark}':>12}")
        gains, costs = why_parts(deltas, max(float(win["step_time_s"]), float(run["step_time_s"])))
        why = []
        if gains:
            why.append("the runner-up spends more on " + ", ".join(f"{p} (+{d:.3g} s{mark})" for d, p in gains[:2]))
        if costs:
            why.append("the winner pays more for " + ", ".join(f"{p} ({-d:.3g} s{mark})" for d, p in costs[:2]))
        if why:
            lines.append("why: " + "; ".join(why) + ".")
    found = plainer_plans(plans)
    if found:
        lines.append("")
        lines.append("winner's exotic features (the fastest kept plan without each):")
        lines.extend(plainer_lines(plans, found, mark))
    if memory_notes:
        lines.append("")
        lines.append("winner's memory features (and whether it would fit without each):")
        lines.extend("  " + note for note in memory_notes)
    if result.stage_assignment is not None:
        sa = result.stage_assignment
        lines.append("")
        balanced = [tuple(int(x) for x in r) for r in sa.stage_layers]
        priced = priced_chunks(win, model) or balanced
        n_chunks = len(priced)
        pp = int(win["pp"])
        lines.append(f"winner's layers per stage ({n_chunks} stage{'' if n_chunks == 1 else 's'}{'' if n_chunks == pp else f', chunk c on rank c mod {pp}'}; "
                     f"embedding on the first, LM head + loss on the last), as priced and exported:")
        lines.append("  " + stage_layers_text(priced))
        # the split balances the layers' compute (forward + backward + recompute); the times
        # printed are the step model's for the whole stage, as simulate gives them
        # (microbatch_stage_time_s), not that compute-only objective
        won, even = split_times_s if split_times_s is not None else (None, None)

        def slowest(seconds):
            return "" if seconds is None else f"; simulate's microbatch_stage_time_s {ms_text(seconds)}{mark}"
        if balanced != priced:
            lines.append(f"  the split balancing the layers' compute (forward + backward + recompute; dynamic "
                         f"programming over per-layer costs; not the one priced{slowest(even)}"
                         + (f" against the winner's {ms_text(won)}{mark}" if won is not None and even is not None else "")
                         + f"): {stage_layers_text(balanced)}")
        else:
            lines.append(f"  (also the split balancing the layers' compute: forward + backward + recompute"
                         f"{slowest(won)})")
    return "\n".join(lines) + "\n"


def priced_chunks(plan, model: ModelSpec) -> list[tuple[int, int]]:
    """The decoder layers per model chunk of ``plan`` (a ranked-table row) as [start, stop)
    ranges in layer order: the layout the step model prices and the exports launch
    (``simulator.stage_layout.chunk_layers``); [] where there is none (a hybrid model, a layout
    that does not hold the layers)."""
    from hardware_specs.errors import InputError
    from simulator.stage_layout import chunk_layers
    try:
        decoder, _ = chunk_layers(model.num_layers, int(plan["pp"]), int(plan["vpp"]), model.mtp_layers,
                                  int(plan.get("first_stage_layers", 0) or 0),
                                  int(plan.get("last_stage_layers", 0) or 0), str(plan["schedule"]))
    except (InputError, ValueError):
        return []
    starts = np.cumsum([0, *decoder[:-1]])
    return [(int(a), int(a + d)) for a, d in zip(starts, decoder)]
