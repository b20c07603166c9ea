"""What would make an infeasible plan request feasible: the ``InputError`` the planner raises.

Two ways to fail: no layout passes the divisibility rules (``no_layout``: say which GPU counts
near the request, or which global batch, would), or layouts exist but none fits in memory
(``nothing_fits``: say how far the smallest is from fitting and which of more GPUs, a smaller
micro-batch, ZeRO-3 or full recomputation would help). Suggested GPU counts and batches are
checked by running the search rules on them, not guessed.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np

from cost_models.topology import group_tiling, groups_tile_node, tp_tiles_node
from hardware_specs.errors import InputError
from hardware_specs.stack_spec import STACK_FEATURES
from model_specs.model_spec import ModelSpec
from planners.search_space import (DEFAULT_SCHEDULES, FIXABLE, MAX_COUNTS_ABOVE_TABLE, MAX_TABLE_GPUS,
                                   RECOMPUTE_NAMES, SCHEDULE_NAMES, SearchConstraints, divisibility_only,
                                   enumerate_chunks, enumerate_space)
from simulator.parallel_config import Schedule
from simulator.stack_support import ZERO_BUBBLE_SCHEDULES, features_in_use
from simulator.validate_config import needs_uneven_split

GIB = 2**30


def _layout_exists(model: ModelSpec, c: SearchConstraints) -> bool:
    try:
        return next(enumerate_chunks(model, c)).total_rows > 0
    except InputError:          # a suggested range too wide to search is no suggestion
        return False


def _nearby_counts(model: ModelSpec, c: SearchConstraints, node: int, limit: int = 2) -> list[int]:
    """Up to ``limit`` GPU counts closest to the request that have a valid layout, whole nodes of
    ``node`` GPUs first."""
    lo, hi = c.gpus
    span = max(4 * node, hi // 16)
    if hi + span > MAX_TABLE_GPUS:      # counted one count at a time there: a window of millions hangs
        span = min(span, MAX_COUNTS_ABOVE_TABLE // 4)
    t = divisibility_only(model, (max(1, lo - span), hi + span), c.global_batch, c.max_tp, c.fixed,
                          c.kv_head_replication)
    ok = c.global_batch % t["dp"] == 0
    counts = np.unique(t["n"][ok])
    counts = counts[(counts < lo) | (counts > hi)]
    found = []
    for n in sorted(counts.tolist(), key=lambda n: (n % node != 0, min(abs(n - lo), abs(n - hi)), n)):
        if _layout_exists(model, replace(c, gpus=(n, n))):
            found.append(n)
            if len(found) == limit:
                break
    return sorted(found)


def _batch_suggestion(model: ModelSpec, c: SearchConstraints, dps, per_pp: tuple[int, ...] = ()) -> str | None:
    """The global batches nearest the request (one below, one above) that some layout divides;
    ``per_pp``: multiples k of a fixed pp the micro-batches per step may also need to be
    (interleaved: 1, DualPipe: 2), whose batches are tried too."""
    mb = min(c.fixed.get("micro_batch", (1,)))
    units = sorted(set(int(d) * mb for d in dps)
                   | {int(d) * mb * k * int(p) for d in dps for k in per_pp for p in c.fixed.get("pp", ())})
    candidates = set()
    for u in units[:16]:
        below = (c.global_batch // u) * u
        candidates.update(x for x in (below, below + u) if x >= 1 and x != c.global_batch)
    found = {}
    for b in sorted(candidates, key=lambda b: (abs(b - c.global_batch), b)):
        side = b > c.global_batch
        if side not in found and _layout_exists(model, replace(c, global_batch=b)):
            found[side] = b
        if len(found) == 2:
            break
    if not found:
        return None
    return "a global batch of " + " or ".join(str(found[k]) for k in sorted(found)) + " sequences"


def _kv_rule(model: ModelSpec, c: SearchConstraints) -> str:
    """What tp must do with the key/value heads, for an error (empty when they are the heads)."""
    g = model.num_kv_heads
    if g == model.num_heads:
        return ""
    if c.kv_head_replication:
        return f", the {g} key/value heads or a multiple of them (the stack replicates them)"
    return f", the {g} key/value heads (the stack splits whole heads over tp)"


#: the fixed fields that decide a stack feature, as ``stack_support.features_in_use`` takes them
_FEATURE_FIELDS = {"pp": "pp", "vpp": "vpp", "cp": "cp", "ep": "ep", "zero_stage": "zero_stage",
                   "sequence_parallel": "sequence_parallel", "schedule": "zero_bubble", "recompute": "selective"}


def _lacked_feature(key: str, values, lacks) -> str | None:
    """The feature of ``lacks`` that every fixed value of ``key`` needs, else None."""
    if key not in _FEATURE_FIELDS or not lacks:
        return None
    if key == "schedule":
        values = [str(v) in ZERO_BUBBLE_SCHEDULES for v in values]
    elif key == "recompute":
        values = [str(getattr(v, "value", v)) == "selective" for v in values]
    used = features_in_use(**{_FEATURE_FIELDS[key]: np.asarray(list(values))})
    for name in lacks:
        if name in used and bool(np.all(used[name])):
            return name
    return None


def _stack_at_fault(model: ModelSpec, c: SearchConstraints, what: str) -> InputError | None:
    """When the request has layouts on a stack that lacks nothing and none on this one, the error
    names the features they all need (a fixed ZeRO-2 beside a fixed pp on DeepSpeed's pipeline
    engine, only zero-bubble schedules asked of Megatron-LM 2021); None otherwise."""
    if not c.stack_lacks or not _layout_exists(model, replace(c, stack_lacks=())):
        return None
    needed = [f for f in c.stack_lacks
              if _layout_exists(model, replace(c, stack_lacks=tuple(x for x in c.stack_lacks if x != f)))]
    names = ", ".join(STACK_FEATURES[f] for f in (needed or c.stack_lacks))
    return InputError("stack", f"every layout of {model.name} on {what} that the request allows needs {names}, which "
                      f"the software stack lacks (its training.lacks)",
                      "drop the fixed values or schedules that need it, or use a stack that has it: paraplan hardware stacks")


def _interleaved_rule(model: ModelSpec, c: SearchConstraints, lead: str = "interleaved, ") -> str:
    """The rule an interleaved pipeline's layers and micro-batches follow, or, where the fixed pp
    and vpp break it, which split they ask for."""
    L, pps, vpps = model.num_layers, c.fixed.get("pp", ()), c.fixed.get("vpp", ())
    if pps and vpps and all(needs_uneven_split(L, int(p), int(v), Schedule.INTERLEAVED) for p in pps for v in vpps):
        return (f"neither its {L} layers nor {L + 2} (the embedding and the loss on chunks of their own) split into "
                f"pp*vpp = {'/'.join(map(str, pps))}*{'/'.join(map(str, vpps))} equal chunks")
    return (f"{lead}pp x vpp must divide its {L} layers (or {L + 2}, the embedding and the loss on chunks of their "
            "own) with pp > 1, and the micro-batches per step must be a multiple of pp")


def _freed(c: SearchConstraints, keep) -> SearchConstraints:
    """``c`` with only the fixed values of ``keep``; a schedule the request fixed narrowed the
    searched schedules to it, so freed it searches the default ones too."""
    fixed = {k: v for k, v in c.fixed.items() if k in keep}
    schedules = c.schedules
    if "schedule" in c.fixed and "schedule" not in keep:
        schedules = tuple(dict.fromkeys(DEFAULT_SCHEDULES + tuple(c.schedules)))
    return replace(c, fixed=fixed, schedules=schedules)


def _ulysses_heads_blamed(model: ModelSpec, c: SearchConstraints, keep) -> bool:
    """Whether Ulysses' heads rule (``ulysses_heads_ok``) is what leaves the fixed values ``keep``
    no layout: run as ring instead of Ulysses, they would have one."""
    if "ulysses" not in c.cp_kinds:
        return False
    ring = replace(c, cp_kinds=tuple(dict.fromkeys("ring" if k == "ulysses" else k for k in c.cp_kinds)))
    return not _left_no_layout(model, ring, keep)


def _ulysses_rule(model: ModelSpec) -> str:
    return (f"Ulysses needs the query and key/value heads of a TP rank divisible by cp (the {model.num_heads} query "
            f"and {model.num_kv_heads} key/value heads of {model.name} over tp, then over cp; Transformer Engine's "
            "all-to-all context parallelism replicates no key/value heads)")


#: how an error names each ``SearchConstraints.expert_tp_choices`` value
#: (``hardware_specs.stack_spec.EXPERT_TP_DEFAULTS``)
EXPERT_TP_CHOICE_TEXT = {"tp": "the row's tp", "one": "1", "tp_without_ep": "the row's tp at ep 1 and 1 with ep > 1"}


def _etp_rule(model: ModelSpec, c: SearchConstraints) -> str:
    """The expert tensor-parallel degrees a search runs (``SearchConstraints.expert_tp_choices``)."""
    if model.moe is None:
        return f"{model.name} has no experts, so etp is 1"
    where = " or ".join(EXPERT_TP_CHOICE_TEXT[e] for e in c.expert_tp_choices)
    return (f"the search runs etp only at {where} (the stack's default, and 1 where the release folds EP); "
            "paraplan simulate --etp prices another etp")


def _why_one(model: ModelSpec, c: SearchConstraints, key: str, values) -> str:
    """Why no layout has the fixed ``key`` in ``values`` (whatever else is free)."""
    lacked = _lacked_feature(key, values, c.stack_lacks)
    if lacked:
        return f"the software stack has no {STACK_FEATURES[lacked]} (its training.lacks lists {lacked})"
    if key in ("cp", "tp") and _ulysses_heads_blamed(model, c, (key,)):
        return _ulysses_rule(model)
    if key == "ep" and model.moe is None:
        return f"{model.name} has no experts, so ep is 1"
    if key == "etp":
        return _etp_rule(model, c)
    if key == "vpp":
        return _interleaved_rule(model, c)
    if key == "schedule" and set(map(str, values)) == {Schedule.INTERLEAVED.value}:
        return _interleaved_rule(model, replace(c, fixed={}), "interleaved needs vpp > 1, and ")
    if key == "zero_shard_group":
        return ("the ZeRO shard group must divide the data-parallel ranks (dp x cp) of some layout, be 2 or more, "
                "and shard ZeRO 1-3")
    if key == "tp":
        g = c.scaleup_gpus
        spans = g and not all(tp_tiles_node(g, int(t), c.gpus[1]) for t in values)     # True on one domain
        return (f"tp must divide the {model.num_heads} heads{_kv_rule(model, c)} and the GPUs"
                + (f", and on more GPUs than the {g} of one scale-up domain divide {g} or be a multiple of it "
                   "(else a tensor-parallel group spans domains unevenly)" if spans else ""))
    if key == "cp":
        return (f"cp must divide the GPUs, and 2 x cp the sequence of {model.seq_len} tokens (context "
                "parallelism gives each rank two equal chunks, one from each end)")
    if key == "sequence_parallel" and any(bool(v) for v in values):
        return (f"sequence parallelism needs tp > 1 dividing the heads and the {model.seq_len} / cp tokens of each "
                "cp rank (it splits them over the tensor-parallel ranks)")
    if key == "pp":
        return f"pp must divide the GPUs and not exceed the {model.num_layers} layers"
    return "no layout there has it"


#: the fixed values whose product is the GPU count
_DEGREES = ("dp", "tp", "pp", "cp")


def _why_two(model: ModelSpec, c: SearchConstraints, pair: tuple[str, str], what: str) -> str:
    """Why no layout has the fixed values of ``pair`` together (each has layouts alone)."""
    if set(pair) == {"pp", "vpp"}:
        return _interleaved_rule(model, c)
    if set(pair) <= set(_DEGREES):
        if _ulysses_heads_blamed(model, c, pair):
            return _ulysses_rule(model)
        return f"dp x tp x pp x cp must be the {what}"
    if "etp" in pair and (set(pair) - {"etp"}) <= {"tp", "ep"}:
        return _etp_rule(model, c)
    if set(pair) == {"vpp", "schedule"}:
        return ("virtual stages (vpp > 1) are the interleaved schedule's; the others run one model chunk per stage "
                "(ZB-V and DualPipe two, by construction), and interleaved needs vpp > 1")
    if set(pair) == {"tp", "sequence_parallel"}:
        if all(int(t) > 1 for t in c.fixed["tp"]):
            return (f"sequence parallelism splits the {model.seq_len} / cp tokens of each cp rank over tp, and "
                    f"tp={'/'.join(map(str, c.fixed['tp']))} divides them for no cp of a layout there")
        return "sequence parallelism splits activations over the tensor-parallel ranks, so it needs tp > 1"
    return "no layout there has both"


def _any_batch(c: SearchConstraints) -> SearchConstraints:
    """``c`` at a global batch every layout's dp x micro-batch divides (and whose micro-batches per
    step a pipeline takes): what a set of fixed values leaves no layout at while this one has
    some is the batch's fault with them, not theirs alone."""
    mb = math.lcm(*(int(v) for v in c.fixed.get("micro_batch", (1,))))
    return replace(c, global_batch=c.global_batch * c.gpus[1] * mb)


def _left_no_layout(model: ModelSpec, c: SearchConstraints, keep) -> bool:
    """Whether the fixed values ``keep`` alone leave no layout, at the request's batch or any."""
    return not _layout_exists(model, _freed(c, keep)) and not _layout_exists(model, _freed(_any_batch(c), keep))


def _fixed_keys(model: ModelSpec, c: SearchConstraints) -> list[str]:
    """The fixed keys to blame, in ``FIXABLE`` order (the layout's degrees before the schedule
    they decide; a tp above --max-tp is said apart); none when freeing them all leaves no layout."""
    if not c.fixed or not _layout_exists(model, _freed(c, ())):
        return []
    keys = [k for k in FIXABLE if k in c.fixed] + [k for k in c.fixed if k not in FIXABLE]
    return [k for k in keys if not (k == "tp" and any(int(t) > c.max_tp for t in c.fixed[k]))]


def _micro_batch_at_fault(c: SearchConstraints) -> InputError | None:
    """When every fixed micro-batch is above --max-micro-batch, or divides the global batch on no
    layout (a micro-batch must divide it: dp x micro-batch does), the error names that rule,
    whatever the GPU count (it named the GPUs: --global-batch 64 --fix micro_batch=3)."""
    mbs = sorted(int(v) for v in c.fixed.get("micro_batch", ()))
    if not mbs:
        return None
    shown = "/".join(map(str, mbs))
    if c.max_micro_batch and mbs[0] > c.max_micro_batch:
        return InputError("max_micro_batch", f"the fixed micro_batch={shown} is above --max-micro-batch "
                                             f"{c.max_micro_batch}",
                          f"raise --max-micro-batch to {mbs[0]} or fix a micro-batch <= {c.max_micro_batch}")
    if all(c.global_batch % mb for mb in mbs):
        divisors = [d for d in range(1, min(c.global_batch, 64) + 1) if c.global_batch % d == 0]
        return InputError("micro_batch", f"the fixed micro_batch={shown} does not divide the global batch of "
                                         f"{c.global_batch} sequences (dp x micro-batch must)",
                          f"fix a divisor of it ({', '.join(map(str, divisors[:8]))}"
                          f"{', ...' if len(divisors) > 8 else ''}) or a global batch that is a multiple of {mbs[0]}")
    return None


def _fixed_value_at_fault(model: ModelSpec, c: SearchConstraints, what: str) -> InputError | None:
    """When the request has layouts once the fixed values are freed, and none with one fixed
    value alone fixed, the error names that value (it blamed the global batch: ``--fix ep=2`` on a
    dense model, ``--fix vpp=1000``, ``--zero-shard-group 3`` on 16 GPUs, ``--pp 4 --vpp 2`` on
    DeepSeek-V3's 61 layers, where an interleaved schedule fixed with them had left no layout
    even with every value freed)."""
    for key in _fixed_keys(model, c):
        if not _left_no_layout(model, c, (key,)):
            continue
        values = c.fixed[key]
        return InputError(key, f"{key}={'/'.join(map(str, values))} leaves no layout of {model.name} on {what}: "
                               f"{_why_one(model, c, key, values)}", f"drop the fixed {key} or change it")
    return None


def _fixed_pair_at_fault(model: ModelSpec, c: SearchConstraints, what: str) -> InputError | None:
    """As ``_fixed_value_at_fault``, for two fixed values that have layouts each alone and none
    together (--pp 8 --vpp 8 on 32 layers, --dp 64 --tp 2 on 64 GPUs: it blamed the batch)."""
    for first, second in itertools.combinations(_fixed_keys(model, c), 2):
        if not _left_no_layout(model, c, (first, second)):
            continue
        shown = " with ".join(f"{k}={'/'.join(map(str, c.fixed[k]))}" for k in (first, second))
        return InputError(second, f"{shown} leaves no layout of {model.name} on {what}: "
                                  f"{_why_two(model, c, (first, second), what)}",
                          f"drop the fixed {first} or {second}, or change one")
    return None


def _schedule_rule(c: SearchConstraints, schedule: str) -> str | None:
    """The rule ``schedule`` sets on the pipeline and its micro-batches per step (the search's
    ``batch``, ``dualpipe`` and ``one_stage`` rules), None for a schedule that sets none."""
    pps = sorted(int(p) for p in c.fixed.get("pp", ()))
    if schedule == Schedule.DUALPIPE.value:
        least = f" = {2 * pps[0]}" if len(pps) == 1 else ""
        return f"dualpipe needs an even pp and an even number of micro-batches per step >= 2 x pp{least}"
    if schedule == Schedule.INTERLEAVED.value:
        return ("interleaved needs vpp > 1 with pp > 1, pp x vpp dividing the layers, and the micro-batches per "
                "step a multiple of pp" + (f" = {pps[0]}" if len(pps) == 1 else ""))
    if schedule in ZERO_BUBBLE_SCHEDULES:
        return f"{schedule} needs pp > 1"
    return None


def _schedule_at_fault(model: ModelSpec, c: SearchConstraints, what: str, dps) -> InputError | None:
    """When some layout divides the global batch into dp x micro-batch and yet none is left, and
    every searched schedule sets a rule on the micro-batches per step (DualPipe, interleaved) or
    on pp, the error names those rules, not the batch: ``--pp 2 --schedule dualpipe --global-batch
    2`` on 8 GPUs divides the batch (dp 1 x mb 1) but has 2 micro-batches, not the 4 DualPipe
    needs. None when the batch divides no layout, or a schedule without such a rule is searched."""
    mbs = [int(v) for v in c.fixed.get("micro_batch", (1,))]
    if not any(c.global_batch % (int(d) * mb) == 0 for d in dps for mb in mbs):
        return None
    schedules, vpp_fixed = _schedules_run(c)
    rules = [_schedule_rule(c, s) for s in schedules]
    if not rules or None in rules:
        return None
    per_pp = tuple(sorted({1 if s == Schedule.INTERLEAVED.value else 2 for s in schedules
                           if s in (Schedule.INTERLEAVED.value, Schedule.DUALPIPE.value)}))
    batch = _batch_suggestion(model, c, dps, per_pp)
    other = ("or fix vpp=1 (1f1b has no such rule)" if vpp_fixed
             else "or another --schedule (1f1b has no such rule)")
    fixes = ([f"use {batch}"] if batch else []) + [other]
    under = "/".join(schedules) + (" (the fixed vpp > 1 runs interleaved)" if vpp_fixed else "")
    return InputError("schedule", f"no layout of {model.name} on {what} runs the global batch of {c.global_batch} "
                      f"sequences under {under}: some divide it into dp x micro-batch, but "
                      + "; ".join(rules), " ".join(fixes))


def _schedules_run(c: SearchConstraints) -> tuple[tuple[str, ...], bool]:
    """(the searched schedules a row can run under the fixed vpp, whether a fixed vpp > 1 chose
    interleaved): vpp > 1 is always interleaved and interleaved needs vpp > 1 (the search's
    ``schedule`` rule), so a fixed vpp > 1 leaves interleaved alone and a fixed vpp 1 drops it
    (``--fix pp=4 --fix vpp=2`` with the default schedules runs interleaved only)."""
    vpps = [int(v) for v in c.fixed.get("vpp", ())]
    inter = Schedule.INTERLEAVED.value
    if vpps and min(vpps) > 1 and inter in c.schedules:
        return (inter,), True
    if vpps and max(vpps) == 1:
        return tuple(s for s in c.schedules if s != inter), False
    return tuple(c.schedules), False


#: how an error names the group of each ``topology.group_blocks`` block, as ``check_cluster`` does
_GROUP_TEXT = {"tp": ("tp", "tensor-parallel"), "etp": ("etp", "expert tensor-parallel"),
               "ep": ("ep x etp", "expert-parallel"), "cp": ("tp x cp", "context-parallel"),
               "zero_shard_group": ("tp x zero_shard_group", "ZeRO shard"), "dp": ("tp x cp x dp", "data-parallel")}


def _tiling_dps(model: ModelSpec, c: SearchConstraints) -> np.ndarray:
    """The dp of the layouts under ``c`` whose tensor-, context- and data-parallel groups tile the
    scale-up domain, at any global batch: the data-parallel degrees a batch suggestion builds on."""
    t = divisibility_only(model, c.gpus, c.global_batch, c.max_tp, c.fixed, c.kv_head_replication)
    tiles = groups_tile_node(int(c.scaleup_gpus), t["n"], t["tp"], t["cp"], t["dp"])
    return np.unique(t["dp"][np.broadcast_to(tiles, t["dp"].shape)])


def _scaleup_at_fault(model: ModelSpec, c: SearchConstraints, what: str, gpus_per_node: int) -> InputError | None:
    """When the scale-up domain tiling (the search's ``scaleup`` rule, ``check_cluster``'s: every
    communication group divides the domain or is a multiple of it) is what leaves no layout (one
    is left without it), the error names that rule and the groups it refuses: on 4608 GPUs of
    NVL72 racks at a global batch of 4096 every dp dividing the batch is a power of 2, so no
    tp x cp x dp is a multiple of 72 (it blamed the batch, which dp 8 x micro-batch 1 divides).
    The fixes offered are checked by the search's rules; None when the tiling is not at fault."""
    g = int(c.scaleup_gpus)
    if not g or not _layout_exists(model, replace(c, scaleup_gpus=0)):
        return None
    batch_too = _layout_exists(model, _any_batch(c))       # a layout tiles, at another batch
    t = divisibility_only(model, c.gpus, c.global_batch, c.max_tp, c.fixed, c.kv_head_replication)
    if batch_too:
        keep = c.global_batch % t["dp"] == 0
        t = {k: v[keep] for k, v in t.items()}
    # the groups of the base layouts (ep 1, no shard group) that none of them tiles; the expert
    # and shard groups are crossed in later, and named together where those are what refuses
    failing = [(name, block) for name, block, tiles in group_tiling(g, t["n"], t["tp"], t["cp"], t["dp"])
               if len(t["n"]) and not bool(np.any(tiles))]
    if failing:
        name, block = failing[-1]       # the widest (dp) first: a narrower group failing fails it too
        product, group = _GROUP_TEXT[name]
        sizes = np.unique(block)
        shown = ", ".join(str(b) for b in sizes[:6]) + (", ..." if len(sizes) > 6 else "")
        groups = f"{product} is {shown}, so a {group} group would span domains unevenly"
    else:
        groups = ("each has a tensor-, context-, expert-, data-parallel or ZeRO shard group that would span "
                  "domains unevenly")
    which = (f"dividing the global batch of {c.global_batch} sequences into dp x micro-batch " if batch_too else "")
    reason = (f"no layout of {model.name} on {what} {which}tiles the {g}-GPU scale-up domain: "
              f"every communication group must divide {g} or be a multiple of it, and in those layouts {groups}")
    fixes = []
    near = _nearby_counts(model, c, gpus_per_node)
    if near:
        fixes.append("use " + " or ".join(str(n) for n in near) + " GPUs")
    if batch_too:
        batch = _batch_suggestion(model, c, _tiling_dps(model, c))
        if batch:
            fixes.append(f"use {batch}")
    if c.fixed and not fixes:
        # the fixed values are not the fault alone (_fixed_value_at_fault), but with the tiling
        # they may leave no batch: freed, some layout may tile at this batch or a nearby one
        freed = replace(c, fixed={})
        drop = "drop the fixed " + ", ".join(f"{k}={'/'.join(map(str, v))}" for k, v in c.fixed.items())
        if _layout_exists(model, freed):
            fixes.append(drop)
        elif _layout_exists(model, _any_batch(freed)):
            batch = _batch_suggestion(model, freed, _tiling_dps(model, freed))
            if batch:
                fixes.append(f"{drop} and use {batch}")
    if not fixes:
        fixes.append(f"use a GPU count whose layouts' groups tile the {g}-GPU domain")
    return InputError("gpus", reason, "; ".join(fixes))


def no_layout(model: ModelSpec, c: SearchConstraints, gpus_per_node: int = 1) -> InputError:
    """The error for a request where no configuration passes the divisibility rules."""
    lo, hi = c.gpus
    what = f"{lo} GPUs" if lo == hi else f"{lo}-{hi} GPUs"
    at_fault = _micro_batch_at_fault(c)
    if at_fault is not None:
        return at_fault
    at_fault = _fixed_value_at_fault(model, c, what)
    if at_fault is not None:
        return at_fault
    lacked = _stack_at_fault(model, c, what)
    if lacked is not None:
        return lacked
    at_fault = _fixed_pair_at_fault(model, c, what)
    if at_fault is not None:
        return at_fault
    at_fault = _scaleup_at_fault(model, c, what, gpus_per_node)
    if at_fault is not None:
        return at_fault
    t = divisibility_only(model, c.gpus, c.global_batch, c.max_tp, c.fixed, c.kv_head_replication)
    fixes = []
    if len(t["dp"]) == 0:
        reason = (f"no dp*tp*pp*cp = {what} has tp <= {c.max_tp} dividing the {model.num_heads} heads"
                  f"{_kv_rule(model, c)}, "
                  f"pp <= {model.num_layers} layers and 2 x cp dividing the sequence of {model.seq_len} (ring context "
                  "parallelism: two chunks per rank)")
    else:
        dps = np.unique(t["dp"])
        at_fault = _schedule_at_fault(model, c, what, dps)
        if at_fault is not None:
            return at_fault
        shown = ", ".join(str(d) for d in dps[:6]) + (", ..." if len(dps) > 6 else "")
        reason = (f"no layout of {what} divides the global batch of {c.global_batch} sequences into "
                  f"dp x micro-batch (the layouts of {model.name} there have dp in {shown})")
        batch = _batch_suggestion(model, c, dps)
        if batch:
            fixes.append(batch)
    near = _nearby_counts(model, c, gpus_per_node)
    if near:
        fixes.insert(0, "use " + " or ".join(str(n) for n in near) + " GPUs")
    wide_tp = [int(t) for t in c.fixed.get("tp", ()) if int(t) > c.max_tp]
    # a fixed tp above --max-tp (default: one node's GPUs) can never be searched; raising it is
    # said only where it leaves a layout (tp 16 on 8 GPUs divides neither them nor the heads)
    if wide_tp and _layout_exists(model, replace(c, max_tp=max(wide_tp))):
        fixes.insert(0, f"raise --max-tp to {max(wide_tp)} (its default is the GPUs of one node, "
                        f"{c.max_tp} here: wider tensor parallelism runs over the NICs)")
    if c.fixed:
        fixes.append("fix fewer values (" + ", ".join(f"{k}={'/'.join(map(str, v))}" for k, v in c.fixed.items()) + ")")
    return InputError("gpus", reason, "; ".join(fixes) if fixes else "try another GPU count or global batch")


def _describe(space, row: int, dtype: str, offload_layers: int = 0) -> str:
    """A configuration of the search in full: its layout, sequence parallelism, schedule, and the
    activation layers per chunk the memory search offloaded in it."""
    col = space.columns
    ep = f" ep={col['ep'][row]}" if "ep" in col and col["ep"][row] > 1 else ""
    if "etp" in col and (col["etp"][row] > 1 or ep):      # the expert TP the row runs
        ep += f" etp={col['etp'][row]}"
    offload = f", {offload_layers} layers a chunk offloaded to the host" if offload_layers else ""
    return (f"dp={col['dp'][row]} tp={col['tp'][row]} pp={col['pp'][row]} cp={col['cp'][row]}{ep} "
            f"vpp={col['vpp'][row]} micro_batch={col['micro_batch'][row]} zero={col['zero_stage'][row]} "
            f"recompute={RECOMPUTE_NAMES[col['recompute'][row]]} "
            f"sequence_parallel={'on' if col['sequence_parallel'][row] else 'off'} "
            f"schedule={SCHEDULE_NAMES[col['schedule'][row]]} {dtype}{offload}")


def _host_need(space, ev, cluster) -> str:
    """The configuration of ``ev.host_bound`` and the host memory it needs, for an error."""
    host_bytes, row, dtype_index, offload = ev.host_bound
    from simulator.config_batch import gpus_on_a_node, node_host_share
    col = space.columns
    on_node = int(gpus_on_a_node(col["dp"][row] * col["tp"][row] * col["pp"][row] * col["cp"][row],
                                 cluster.gpus_per_node))
    share = float(node_host_share(on_node, cluster.gpus_per_node, cluster.gpus_per_host))
    has = f", of the {cluster.host.memory_bytes * share / GIB:,.0f} GiB its hosts hold" if cluster.host is not None \
        and cluster.host.memory_bytes is not None else ""
    return (f"({_describe(space, row, space.dtypes[dtype_index], offload)}) needs {host_bytes / GIB:,.1f} GiB of host "
            f"memory per node of {on_node} GPUs{has}")


def _something_fits(model, cluster, eff, c: SearchConstraints, limit: float) -> bool:
    """Whether some configuration under ``c`` fits in ``limit`` bytes (the search's space and
    memory model, chunk by chunk; a request too wide to search is no suggestion). Only the
    memory phase runs: whether a row fits does not need its step time."""
    from planners.vectorized import start_evaluation   # noqa: PLC0415 - only on this error path

    try:
        for space in enumerate_chunks(model, c):
            if len(space) and start_evaluation(model, cluster, eff, space, c.global_batch, limit,
                                               workers=1).fitting_count():
                return True
    except InputError:
        return False
    return False


def _more_gpus(model, cluster, eff, c: SearchConstraints, limit: float) -> int | None:
    """The smallest of 2x, 4x, 8x, 16x the GPUs at which something fits, if any."""
    for k in (2, 4, 8, 16):
        n = c.gpus[1] * k
        if cluster.max_gpus is not None and n > cluster.max_gpus:
            break
        if _something_fits(model, cluster, eff, replace(c, gpus=(n, n)), limit):
            return n
    return None


def _fixed_text(c: SearchConstraints, keys) -> str:
    """``--fix`` values as the request gave them: ``zero_stage=0, tp=1``."""
    return ", ".join(f"{k}={'/'.join(str(getattr(v, 'value', v)) for v in c.fixed[k])}" for k in keys)


#: what freeing a fixed value that binds lets the search use (``nothing_fits``)
_FREED_GIVES = {"zero_stage": "ZeRO-3", "recompute": "full recompute", "micro_batch": "a smaller micro-batch",
                "tp": "another tp", "pp": "another pp", "cp": "another cp", "dp": "another dp"}


def _binding_fixed(model, cluster, eff, c: SearchConstraints, limit: float) -> tuple[list[str], bool]:
    """(the fixed values each of which, freed alone, lets something fit; whether freeing all of
    them does), in ``FIXABLE`` order: the request's constraints that bind."""
    keys = [k for k in FIXABLE if k in c.fixed] + [k for k in c.fixed if k not in FIXABLE]
    alone = [k for k in keys if _something_fits(model, cluster, eff, _freed(c, [x for x in keys if x != k]), limit)]
    together = bool(alone) or (len(keys) > 1 and _something_fits(model, cluster, eff, _freed(c, ()), limit))
    return alone, together


def sequence_text(model: ModelSpec) -> str:
    """The sequence length a memory error names (activations and the KV of attention grow with
    it, so a --seq-len of 1e9 had been reported as 'nothing fits' without it): '8,192-token
    sequences', and where the model states a shorter context, that too."""
    text = f"{model.seq_len:,}-token sequences"
    if 0 < model.max_context_tokens < model.seq_len:
        text += f" (longer than the model's {model.max_context_tokens:,}-token context)"
    return text


def _shorter_sequences(model: ModelSpec, cluster, eff, c: SearchConstraints, limit: float) -> str | None:
    """'sequences of at most 8,192 tokens (--seq-len 8192 fits)' where the sequences are longer
    than the model's stated context and something fits at that context, else None."""
    ctx = model.max_context_tokens
    if not 0 < ctx < model.seq_len or not _something_fits(replace(model, seq_len=ctx), cluster, eff, c, limit):
        return None
    return f"sequences of at most {ctx:,} tokens (--seq-len {ctx} fits)"


def nothing_fits(model: ModelSpec, cluster, eff, c: SearchConstraints, space, ev, limit: float,
                 headroom_gib: float) -> InputError:
    """The error for a request whose valid configurations all exceed the memory limit, or fit in
    it only by offloading more activations than the host memory holds (``ev.host_bound``)."""
    fixes = []
    lacks = set(c.stack_lacks)
    over_gpu = ev.min_memory_row >= 0
    shorter = _shorter_sequences(model, cluster, eff, c, limit)
    if shorter:
        fixes.append(shorter)
    # each suggestion is one a search under it shows to fit: more GPUs (2x-16x; with fixed tp, pp,
    # cp and ZeRO-0 every count needs the same per GPU), freeing fixed values, a wider tp, less headroom
    more = _more_gpus(model, cluster, eff, c, limit)
    if more:
        fixes.append(f"more GPUs ({more} fit)")
    fixed = c.fixed
    if fixed:
        alone, together = _binding_fixed(model, cluster, eff, c, limit)
        for key in alone:
            fixes.append(f"{_FREED_GIVES.get(key, 'another ' + key)} (the fixed {_fixed_text(c, [key])} binds)"
                         if key != "zero_stage" or "zero3" not in lacks else
                         f"another ZeRO stage (the fixed {_fixed_text(c, [key])} binds)")
        if together and not alone:
            fixes.append(f"none of the fixed {_fixed_text(c, list(fixed))} (together they bind)")
    if c.max_tp < cluster.gpus_per_node and "tp" not in fixed and \
            _something_fits(model, cluster, eff, replace(c, max_tp=cluster.gpus_per_node), limit):
        fixes.append(f"a larger --max-tp than {c.max_tp}")
    # with no headroom the limit is the HBM: less headroom helps only a need below it
    if headroom_gib > 0 and (not over_gpu or ev.min_memory_bytes <= cluster.gpu.hbm_bytes):
        fixes.append(f"less headroom than {headroom_gib:g} GiB")
    # what would shrink the footprint that the stack cannot run (``TrainingBehaviour.lacks``)
    saving = [STACK_FEATURES[f] for f in ("pipeline", "zero1", "zero2", "zero3", "selective_recompute",
                                          "activation_offload") if f in lacks]
    if saving:
        fixes.append("a stack that has " + ", ".join(saving) + " (this one lacks them: its training.lacks)")
    if over_gpu and cluster.host is not None and "optimizer_offload" not in lacks:
        # the search keeps optimizer states on the GPU; one run can put them on the host
        fixes.append("the optimizer states on the host (the search does not offload them: paraplan simulate "
                     "--offload-optimizer-fraction 1 prices one layout so)")
    hbm = cluster.gpu.hbm_bytes
    where = f"{limit / GIB:.1f} GiB per GPU" + (f" ({hbm / GIB:.0f} GiB HBM - {headroom_gib:g} GiB headroom)"
                                                if headroom_gib > 0 else "") + f" at {sequence_text(model)}"
    if over_gpu:
        smallest = _describe(space, ev.min_memory_row, space.dtypes[ev.min_memory_dtype], ev.min_memory_offload)
        message = (f"nothing fits in {where}: the smallest of {ev.evaluated:,} configurations "
                   f"({smallest}) needs {ev.min_memory_bytes / GIB:.1f} GiB")
        if ev.host_bound:
            message += (f"; those that fit in it only offload more activations than the host holds: the "
                        f"smallest {_host_need(space, ev, cluster)}")
    elif ev.host_bound:
        message = (f"nothing fits in {where} without offloading more activations than the host holds: the smallest "
                   f"of {ev.evaluated:,} configurations {_host_need(space, ev, cluster)}")
        fixes.append("a node with more host memory")
    else:
        message = f"nothing fits in {where} ({ev.evaluated:,} configurations)"
    return InputError("memory", message, "use " + ", or ".join(fixes) if fixes else
                      "no change the search can try fits: a GPU with more memory, or a smaller model or sequence")
