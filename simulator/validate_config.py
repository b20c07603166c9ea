"""Checks that a parallel configuration fits a model and a GPU count (errors name the field)."""
from __future__ import annotations

import math

import numpy as np

from cost_models.context_parallel import ulysses_heads_ok
from cost_models.params import kv_heads_per_tp_rank, tp_splits_kv_heads
from cost_models.topology import group_tiling
from hardware_specs.errors import InputError
from model_specs.model_spec import ModelSpec
from simulator.parallel_config import ParallelConfig, Schedule
from simulator.ep_overlap_rules import check_ep_comm_overlap
from simulator.stack_support import check_stack_features


def _divisors(n: int, limit: int = 64) -> str:
    ds = [d for d in range(1, min(n, limit) + 1) if n % d == 0]
    return ", ".join(map(str, ds))


def needs_uneven_split(num_layers: int, pp: int, vpp: int, schedule) -> bool:
    """Whether ``num_layers`` decoder layers need an uneven (or custom) split on this pipeline:
    interleaved chunks (pp * vpp of them) that divide neither the layers nor the layers + 2
    (Megatron may count the embedding and the loss as one layer each), ZB-V's two chunks a rank
    (2 pp positions on its one V-shaped copy) that do not divide the layers, or DualPipe's pp
    positions that do not: DualPipe runs two model copies, each laid over the pp ranks (one
    down, one up), so a rank's two chunks are the same layers of the two copies and each copy
    holds all L layers on pp positions (``_positions``, ``stage_layout.position_layers``). A plain
    1F1B pipeline (vpp = 1) takes any count (its stages may differ by a layer). ``schedule``: a
    ``Schedule`` or its value; ``pp`` and ``vpp`` scalars (a bool back) or arrays (the planner's
    candidates, a boolean array)."""
    pp, vpp = np.asarray(pp), np.asarray(vpp)
    if Schedule(schedule) == Schedule.ZB_V:
        uneven = num_layers % (2 * pp) != 0
    elif Schedule(schedule) == Schedule.DUALPIPE:
        uneven = num_layers % pp != 0
    else:
        chunks = pp * vpp
        uneven = (vpp > 1) & (num_layers % chunks != 0) & ((num_layers + 2) % chunks != 0)
    return uneven if uneven.ndim else bool(uneven)


def cp_sequence_chunks(cp, cp_kind="ring"):
    """Equal chunks the sequence splits into under context parallelism of degree ``cp``.

    Every kind (ring, hybrid, all-gather and Ulysses) balances causal attention by giving
    each of the cp ranks two chunks, one from each end of the sequence: 2 * cp chunks (Megatron-LM
    ``get_batch_on_this_cp_rank``; ``megatron/training/arguments.py`` validate_args asserts
    ``seq_length % (2 * context_parallel_size) == 0`` for every ``--cp-comm-type``, the
    ``cp_sequence_divisible`` rule of ``paraplan/exports/megatron_flags.json``). Ulysses as
    DeepSpeed runs it (Jacobs et al. 2023) exchanges the sequence for the heads and needs no
    balancing, but Megatron-Core's Ulysses (``--cp-comm-type a2a``, Transformer Engine's all-to-all)
    shares ``get_batch_on_this_cp_rank`` and the ``2 * context_parallel_size`` assert with the other
    kinds, and no stack here runs DeepSpeed's Ulysses (megatron-deepspeed lacks context parallelism),
    so Ulysses too takes 2 * cp chunks. 1 at cp = 1 (works on arrays: ``cp`` may be one). ``cp_kind``
    is kept for callers; every kind splits alike."""
    cp = np.asarray(cp)
    return np.where(cp > 1, cp * 2, 1)


def sequence_split_ok(seq_len, cp, tp, sequence_parallel, cp_kind="ring"):
    """Whether a sequence of ``seq_len`` tokens splits as the layout needs: into
    ``cp_sequence_chunks`` equal chunks, and, with sequence parallelism, each cp rank's
    ``seq_len / cp`` tokens over tp (Megatron-LM ``tensor_parallel/mappings.py``
    ``_split_along_first_dim`` / ``_reduce_scatter_along_first_dim`` assert the first dimension,
    the sequence, divisible by the tp group). The one rule ``check_config`` and the planner's
    ``sequence`` rule apply; vectorised over numpy arrays."""
    seq, cp, tp = np.asarray(seq_len), np.asarray(cp), np.asarray(tp)
    cp_ok = seq % cp_sequence_chunks(cp, cp_kind) == 0
    sp_ok = ~(np.asarray(sequence_parallel, dtype=bool) & (tp > 1)) | ((seq // cp) % tp == 0)
    return cp_ok & sp_ok


def check_sequence_split(seq_len: int, cp: int, tp: int, sequence_parallel: bool, cp_kind="ring",
                         cp_gpus: int | None = None) -> None:
    """Raise ``InputError`` where ``sequence_split_ok`` is False, naming the field and a fix.
    ``cp_gpus``: the GPUs a cp degree shares with data parallelism (GPUs / (tp x pp)); the cp
    values the fix suggests divide it (others leave no whole data-parallel degree), else it
    says none on them does."""
    kind = getattr(cp_kind, "value", cp_kind)
    if bool(sequence_split_ok(seq_len, cp, tp, sequence_parallel, kind)):
        return
    chunks = int(cp_sequence_chunks(cp, kind))
    if not bool(sequence_split_ok(seq_len, cp, 1, False, kind)):
        tried = range(2, 1025) if cp_gpus is None else _divisors_from_2(cp_gpus)
        fits = [d for d in tried if bool(sequence_split_ok(seq_len, d, 1, False, kind))][:8]
        lo, hi = (seq_len // chunks) * chunks, (seq_len // chunks + 1) * chunks
        choose = f"choose cp from {', '.join(map(str, fits))}, or " if fits else (
            "" if cp_gpus is None else f"no cp > 1 that divides the {cp_gpus} GPUs left to cp x dp splits "
            f"{seq_len} tokens so (use cp 1, or change --gpus, --tp or --pp), or ")
        raise InputError("cp", f"{kind} context parallelism splits the sequence into 2 x cp = {chunks} equal chunks "
                         f"(two per rank, one from each end, to balance causal attention), which {seq_len} tokens are "
                         "not", f"{choose}a sequence length that is a multiple of {chunks} "
                         f"({' or '.join(str(n) for n in (lo, hi) if n > 0)})")
    # the cp split holds: sequence parallelism's split over tp is what fails
    local = seq_len // cp
    per = f"the {local} tokens of each cp rank ({seq_len} / cp {cp})" if cp > 1 else f"the {seq_len} tokens"
    tps = [t for t in range(2, 65) if bool(sequence_split_ok(seq_len, cp, t, True, kind))][:6]
    choose = f"choose tp from {', '.join(map(str, tps))}, " if tps else ""
    raise InputError("sequence_parallel", f"sequence parallelism splits {per} over tp={tp}, which does not "
                     "divide them", f"turn sequence parallelism off, {choose}or use a sequence length that is a "
                     f"multiple of {math.lcm(chunks, cp * tp)}")


def _divisors_from_2(n: int) -> list[int]:
    """The divisors of ``n`` from 2 up."""
    return [d for d in range(2, n + 1) if n % d == 0]


def _largest_chunk_layers(model: ModelSpec, c: ParallelConfig) -> int:
    """Layers (MTP modules included) of the largest model chunk of the configuration's uneven or
    custom layout: the ``--pipeline-layout`` string's, else the split ``position_layers`` makes
    of the first / last stage counts (or of an even-as-possible split); called once the layout
    has been checked."""
    # late imports: keep this module's imports light
    from simulator.config_batch import SCHEDULE_CODES
    from simulator.layout_string import parse_layout
    from simulator.pipeline.schedules import ScheduleKind
    from simulator.stage_layout import position_layers
    from simulator.step_pipeline import schedule_chunks
    if c.pipeline_layout:
        return int(max(parse_layout(c.pipeline_layout).layers()))
    lay = position_layers(ScheduleKind(c.schedule.value), c.pp, schedule_chunks(SCHEDULE_CODES[c.schedule], c.vpp),
                          model.num_layers + model.mtp_layers, c.first_stage_layers, c.last_stage_layers,
                          model.mtp_layers)
    return int(lay.max())


def most_layers_per_chunk(model: ModelSpec, c: ParallelConfig) -> int:
    """Layers (MTP modules included) of the configuration's largest model chunk: the most
    ``recompute_num_layers`` / ``offload_activation_layers`` can cover (every layer of it); of
    the uneven or custom layout where one is allowed, else of the even split."""
    custom = bool(c.uneven_layers or c.pipeline_layout or c.first_stage_layers or c.last_stage_layers)
    return (_largest_chunk_layers(model, c) if custom
            else -(-(model.num_layers + model.mtp_layers) // _positions(c)))


def _positions(c: ParallelConfig) -> int:
    """Forward positions of the configuration's schedule: p * chunks (DualPipe: p per copy)."""
    if c.schedule == Schedule.DUALPIPE:
        return c.pp
    if c.schedule == Schedule.ZB_V:
        return 2 * c.pp
    return c.pp * c.vpp


def _check_layout(model: ModelSpec, c: ParallelConfig) -> None:
    if not c.pipeline_layout:
        return
    from simulator.layout_string import parse_layout
    what = {Schedule.DUALPIPE: f"DualPipe on pp={c.pp} (one model copy's positions; the other mirrors it)",
            Schedule.ZB_V: f"ZB-V on pp={c.pp} (2 chunks per rank)"}.get(c.schedule, f"pp*vpp = {c.pp}*{c.vpp}")
    parse_layout(c.pipeline_layout).check(model.num_layers, model.mtp_layers, _positions(c), what)


def placed_and_checked(cluster, config: ParallelConfig):
    """``cluster`` as ``config``'s job of ``config.n_gpus`` GPUs uses it (``placement.placed_cluster``:
    a multi-rack NVL72 job in its Slurm segments), refused by ``check_cluster`` where its groups
    would not tile that placement: the one placement ``simulate`` and the sweeps price with."""
    from hardware_specs.placement import placed_cluster
    placed = placed_cluster(cluster, config.n_gpus)
    check_cluster(placed, config)
    return placed


#: the groups of one degree (``topology.group_blocks``' names) as ``check_cluster`` names them
_SINGLE_GROUPS = {"tp": ("a", "a tensor-parallel group"), "etp": ("an", "an expert tensor-parallel group")}
#: the groups of several dimensions: the product of degrees their block is, and their name
_BLOCK_GROUPS = {"ep": ("ep x etp", "an expert-parallel group"), "cp": ("tp x cp", "a context-parallel ring"),
                 "zero_shard_group": ("tp x zero_shard_group", "a ZeRO shard group"),
                 "dp": ("tp x cp x dp", "a data-parallel group")}


def check_cluster(cluster, config: ParallelConfig) -> None:
    """Raise ``InputError`` if ``config`` needs what ``cluster``'s file does not state (the host
    link and memory bandwidth offload runs over), or lays a communication group across scale-up
    domains unevenly: tensor-parallel, expert tensor-parallel, expert-parallel (ep x etp ranks),
    context-parallel (tp x cp), ZeRO shard (tp x zero_shard_group) or data-parallel (tp x cp x dp)
    groups (``topology.group_tiling``: the collectives price every group as the first, and the
    step waits for the worst-placed one). The planner's ``scaleup`` rule is the same
    (``topology.groups_tile_node``, over the same ``group_tiling``)."""
    g, world = cluster.gpus_per_node, config.n_gpus
    # the first group (in group_blocks' order: tp, etp, then the groups of several dimensions,
    # each a run of consecutive ranks) that does not tile, named by its degree
    for name, block, tiles in group_tiling(g, world, config.tp, config.cp, config.dp, config.ep, config.etp,
                                           config.zero_shard_group):
        if bool(tiles):
            continue
        b = int(block)
        how = "span two domains" if b < g else "span domains unevenly"
        if name in _SINGLE_GROUPS:
            # Megatron numbers the expert-tensor ranks fastest in the experts' layout, as tp in the dense one
            a, group = _SINGLE_GROUPS[name]
            raise InputError(name, f"{name} {b} does not tile the {g}-GPU scale-up domain of {cluster.name}: "
                             f"with {world} GPUs {group} would {how}",
                             f"use {a} {name} that divides {g} ({_divisors(g, g)}) or a multiple of {g}")
        product, group = _BLOCK_GROUPS[name]
        raise InputError(name, f"{product} = {b} does not tile the {g}-GPU scale-up domain of {cluster.name}: "
                         f"with {world} GPUs {group} would {how}",
                         f"make {product} divide {g} ({_divisors(g, g)}) or a multiple of {g}")
    if (config.offload_activation_layers or config.offload_optimizer_fraction) and cluster.host is None:
        raise InputError("offload", f"cluster {cluster.name} states no host link (GPU to host memory)",
                         "add host: {link, link_bw_gb_per_s, memory_gib, memory_bw_gb_per_s} to its YAML, or do not offload")
    if config.offload_optimizer_fraction and cluster.host.memory_bw_bytes_per_s is None:
        raise InputError("offload_optimizer_fraction", f"cluster {cluster.name} states no host memory bandwidth for "
                         "the host's optimizer step", "add host: {memory_bw_gb_per_s: ...} to its YAML")


def _check_edge_stage_layers(model: ModelSpec, c: ParallelConfig) -> None:
    """Megatron-Core's rules for ``--decoder-first/last-pipeline-num-layers``
    (``TransformerConfig.__post_init__``, "Uneven PP"), on decoder layers: each count given is > 0
    and, with virtual stages, divides by the chunks per stage; the stages without a count (an
    edge stage whose count is not given among them) share the other decoder layers evenly, at
    least one each, and each such stage's share divides by the chunks too. The MTP modules sit on
    the last stage beyond its decoder layers; ``last_stage_layers`` counts them
    (``stage_layout.position_layers``), so its decoder layers are ``last - mtp``."""
    chunks = _positions(c) // c.pp
    mtp = model.mtp_layers
    first, last = c.first_stage_layers, c.last_stage_layers
    last_decoder = last - mtp if last else 0
    if last and last_decoder < 1:
        raise InputError("last_stage_layers", f"{last} layers on the last stage leave no decoder layer beside its "
                         f"{mtp} MTP module{'s' if mtp != 1 else ''} (Megatron-Core needs at least one)",
                         f"give at least {mtp + 1}")
    given = [(n, f) for n, f in ((first, "first_stage_layers"), (last_decoder, "last_stage_layers")) if n]
    rest = model.num_layers - first - last_decoder
    middle = c.pp - len(given)
    said = " + ".join(f"{n} ({f.split('_')[0]})" for n, f in given)
    what_layers = "decoder layers" if mtp else "layers"
    if rest < 0 or (middle == 0 and rest != 0):
        total = model.num_layers + mtp if last else model.num_layers
        raise InputError(given[0][1], f"the edge stages' {what_layers} {said} leave {rest} of the {model.num_layers} "
                         f"{what_layers} for the other {middle} stages",
                         (f"give counts that add up to {total} with pp={c.pp}"
                          + (f" (the last stage's count holds the {mtp} MTP)" if mtp and last else ""))
                         if middle == 0 else "give smaller counts")
    if middle and (rest < middle or rest % middle):
        near = [n for n in range(max(middle, rest - middle), rest + middle + 1) if n % (middle * chunks) == 0]
        hint = (f"e.g. counts leaving {near[0]} {what_layers} ({near[0] // middle} per stage)" if near
                else "give counts whose rest divides evenly")
        what = (f"fewer than one each for the other {middle} stages" if rest < middle else
                f"do not divide evenly over the other {middle} stages (Megatron-Core requires it)")
        raise InputError(given[0][1], f"the edge stages' {what_layers} {said} leave {rest}: {what}", hint)
    for n, field in given:
        if n % chunks:
            raise InputError(field, f"{n} {what_layers} do not divide over the stage's {chunks} model chunks",
                             f"give a multiple of {chunks}" + (f" (plus the {mtp} MTP on the last)" if mtp and
                                                               field == "last_stage_layers" else ""))
    if middle and (rest // middle) % chunks:
        raise InputError(given[0][1], f"the other stages' {rest // middle} {what_layers} each do not divide over "
                         f"their {chunks} model chunks", f"give counts leaving a multiple of {middle * chunks}")


def _check_flush_size(c: ParallelConfig) -> None:
    """Refuse a pipeline whose one flush the step model could not build in seconds
    (``pipeline.makespan.flush_within_limit``: minutes of Python and gigabytes beyond it)."""
    from simulator.pipeline.makespan import flush_limit, flush_ops, flush_within_limit
    if bool(flush_within_limit(c.schedule.value, c.pp, c.num_microbatches, c.vpp)):     # one stage always is
        return
    ops = int(flush_ops(c.schedule.value, c.pp, c.num_microbatches, c.vpp))
    chunks = f" x {c.vpp} virtual stages" if c.vpp > 1 else ""
    other = " or the 1f1b / interleaved schedule" if c.schedule in (Schedule.ZB_H2, Schedule.ZB_V) else ""
    raise InputError("pp", f"a {c.schedule.value} flush over {c.pp} stages{chunks} is {ops:,} operations to build, "
                     f"more than the {flush_limit(c.schedule.value):,} the step model builds in seconds",
                     f"use fewer pipeline stages (published runs use up to 64-128){other}")


def check_kv_heads(model: ModelSpec, tp: int, replication: bool, field: str = "tp") -> None:
    """Raise ``InputError`` (naming ``field``) unless tensor degree ``tp`` splits the model's
    key/value heads (``cost_models.params.tp_splits_kv_heads``): tp divides them, or is a multiple
    of them on a stack that replicates heads (``ParallelConfig.kv_head_replication``)."""
    g = model.num_kv_heads
    if bool(tp_splits_kv_heads(g, tp, replication)):
        return
    if tp % g or replication:
        raise InputError(field, f"tp={tp} and the {g} key/value heads of {model.name} do not divide each other",
                         f"choose tp from {_divisors(g)}" + (" or a multiple of it" if replication else ""))
    # (Megatron-Core <= 0.15 asserts num_query_groups % tp == 0; torchtitan views whole heads)
    stacks = replicating_training_stacks()
    raise InputError(field, f"tp={tp} is more than the {g} key/value heads of {model.name}, and the stack splits "
                     "whole heads over tp (its kv_head_replication is off)",
                     f"choose tp from {_divisors(g)}"
                     + (f", or a stack that replicates key/value heads ({', '.join(stacks)})" if stacks else ""))


def replicating_training_stacks() -> tuple[str, ...]:
    """Catalog stacks with a training section whose ``kv_head_replication`` is on: the ones an
    error may suggest for a tp above the key/value heads (serving stacks are refused for
    training, so naming a replicating serving stack would send the user to another error)."""
    from hardware_specs.catalog import list_stacks, load_stack
    out = []
    for name in list_stacks():
        try:
            stack = load_stack(name)
        except InputError:
            continue
        if stack.training is not None and stack.training.kv_head_replication:
            out.append(name)
    return tuple(out)


def check_dualpipe_micro_batches(c: ParallelConfig) -> None:
    """DualPipe runs an even number of micro-batches per step, at least 2 pp (half enter each
    end of the pipeline; DeepSeek's reference asserts it): refused in the user's terms, micro-
    batches per step = global batch / (micro-batch x dp), with the batches that give it."""
    if c.schedule != Schedule.DUALPIPE or c.pp % 2:
        return                  # (an odd pp is refused on its own, naming pp)
    m, per = c.global_batch // (c.micro_batch * c.dp), c.micro_batch * c.dp
    if m % 2 == 0 and m >= 2 * c.pp:
        return
    least = max(2 * c.pp, m + m % 2)
    fix = f"use --global-batch {least * per} (or another even multiple of micro-batch x dp = {per} from there)"
    smaller = [mb for mb in range(c.micro_batch - 1, 0, -1)
               if c.global_batch % (mb * c.dp) == 0 and (c.global_batch // (mb * c.dp)) % 2 == 0
               and c.global_batch // (mb * c.dp) >= 2 * c.pp]
    if smaller:
        fix += f", or --micro-batch {smaller[0]}"
    raise InputError("global_batch", f"DualPipe needs an even number of micro-batches per step, at least 2 x pp = "
                     f"{2 * c.pp}; global batch {c.global_batch} / (micro-batch {c.micro_batch} x dp {c.dp}) "
                     f"gives {m}", fix)


def check_config(model: ModelSpec, config: ParallelConfig, n_gpus: int | None = None) -> None:
    """Raise ``InputError`` if ``config`` cannot run ``model`` (on ``n_gpus`` GPUs)."""
    c = config
    if n_gpus is not None and c.n_gpus != n_gpus:
        raise InputError("dp", f"dp*tp*pp*cp = {c.dp}*{c.tp}*{c.pp}*{c.cp} = {c.n_gpus} but "
                         f"the job has {n_gpus} GPUs", f"make the degrees multiply to {n_gpus}")
    if model.num_heads % c.tp:
        raise InputError("tp", f"tp={c.tp} does not divide the {model.num_heads} attention heads of "
                         f"{model.name}", f"choose tp from {_divisors(model.num_heads)}")
    check_kv_heads(model, c.tp, c.kv_head_replication)
    check_stack_features(c, moe=model.moe is not None)
    check_dualpipe_micro_batches(c)
    if model.ffn_hidden_size % c.tp:
        raise InputError("tp", f"tp={c.tp} does not divide ffn_hidden_size {model.ffn_hidden_size}")
    if c.pp > model.num_layers:
        raise InputError("pp", f"pp={c.pp} exceeds the {model.num_layers} layers")
    # Megatron may count the embedding and the loss as one layer each when splitting
    # (account_for_embedding/loss_in_pipeline_split), so L or L + 2 must divide into chunks.
    custom = bool(c.uneven_layers or c.pipeline_layout or c.first_stage_layers or c.last_stage_layers)
    if c.vpp > 1 and not custom and needs_uneven_split(model.num_layers, c.pp, c.vpp, c.schedule):
        raise InputError("vpp", f"{model.num_layers} layers do not split into pp*vpp = {c.pp}*{c.vpp} "
                         "equal chunks", "choose pp*vpp dividing the layer count (or layers + 2), or "
                         "allow a custom layout with --uneven-layers")
    if c.pp * c.vpp > model.num_layers + 2:
        raise InputError("vpp", f"pp*vpp = {c.pp * c.vpp} chunks exceed the {model.num_layers} layers")
    if c.schedule == Schedule.INTERLEAVED and c.num_microbatches % c.pp:
        raise InputError("global_batch", f"interleaved 1F1B needs the micro-batch count "
                         f"({c.num_microbatches}) to be a multiple of pp={c.pp}",
                         f"use a global batch that is a multiple of {c.pp * c.dp * c.micro_batch}")
    if c.schedule == Schedule.DUALPIPE and c.pp % 2:
        # checked here, under the plan's own name (the schedule builder said "p" and offered
        # "dualpipev", which is not a --schedule choice)
        raise InputError("pp", f"DualPipe pairs rank i with rank pp-1-i and needs an even pp, got {c.pp}",
                         "use an even --pp, or --schedule zb-v (one V-shaped model copy on any pp)")
    if c.schedule in (Schedule.ZB_V, Schedule.DUALPIPE) and not custom \
            and needs_uneven_split(model.num_layers, c.pp, c.vpp, c.schedule):
        how = (f"puts 2 chunks on each of pp={c.pp} ranks" if c.schedule == Schedule.ZB_V
               else f"lays each of its two model copies over pp={c.pp} ranks")
        raise InputError("schedule", f"{c.schedule.value} {how}; {model.num_layers} layers do not divide by "
                         f"{_positions(c)}",
                         "allow an uneven split with --uneven-layers (the first and last chunks lighter) or give "
                         "--pipeline-layout")
    if c.schedule in (Schedule.ZB_V, Schedule.DUALPIPE) and _positions(c) > model.num_layers + model.mtp_layers:
        what = "2*pp" if c.schedule == Schedule.ZB_V else "pp (per model copy)"
        raise InputError("pp", f"{c.schedule.value} needs {what} = {_positions(c)} chunks, more than the "
                         f"{model.num_layers + model.mtp_layers} layers", "choose a smaller pp")
    _check_flush_size(c)
    _check_layout(model, c)
    if (c.first_stage_layers or c.last_stage_layers) and not c.pipeline_layout:
        if c.schedule in (Schedule.ZB_V, Schedule.DUALPIPE):
            # a V puts the model's first and last chunks both on rank 0 and its middle on rank p-1
            raise InputError("first_stage_layers", f"first/last stage counts are Megatron's for a 1F1B or "
                             f"interleaved pipeline; {c.schedule.value} runs a V (rank 0 holds the first and last "
                             "chunks)", "use --uneven-layers or --pipeline-layout with this schedule")
        _check_edge_stage_layers(model, c)
    # counts of layers per model chunk: more than a chunk holds was clipped without a word; with
    # an uneven or custom layout, the largest chunk of that layout
    most_per_chunk = most_layers_per_chunk(model, c)
    for name, value in (("recompute_num_layers", c.recompute_num_layers),
                        ("offload_activation_layers", c.offload_activation_layers)):
        if value > most_per_chunk:
            raise InputError(name, f"{value} layers per model chunk, but a chunk of {model.name} on pp*vpp = "
                             f"{_positions(c)} holds at most {most_per_chunk}",
                             f"give at most {most_per_chunk}, every layer of a chunk")
    if c.recompute_modules:
        if "mla_up_proj" in c.recompute_modules and model.mla is None:
            raise InputError("recompute_modules", f"mla_up_proj recomputes multi-latent attention, which "
                             f"{model.name} does not have", "drop mla_up_proj")
        if "moe_dispatch" in c.recompute_modules and model.moe is None:
            raise InputError("recompute_modules", f"moe_dispatch recomputes the expert dispatch; {model.name} has "
                             "no experts", "drop moe_dispatch")
        if "moe" in c.recompute_modules and model.moe is None:
            raise InputError("recompute_modules", f"moe recomputes the MoE layers; {model.name} has no experts",
                             "drop moe (mlp recomputes a dense MLP)")
    if c.cp > 1 and c.cp_kind.value == "ulysses" and not ulysses_heads_ok(model.num_heads, model.num_kv_heads,
                                                                          c.tp, c.cp):
        # Transformer Engine's all-to-all CP (Megatron-Core --cp-comm-type a2a) exchanges the sequence
        # for the heads: each of the cp ranks takes an equal share of the tp rank's query heads and of
        # its key/value heads, with no K/V replication (cost_models.context_parallel.ulysses_heads_ok)
        local = model.num_heads / c.tp
        kv_local = float(kv_heads_per_tp_rank(model.num_kv_heads, c.tp))
        # cps dividing both, leaving a whole data-parallel degree on the GPUs (cp divides dp x cp)
        fits = ([d for d in range(2, int(local) + 1) if local % d == 0 and kv_local % d == 0
                 and (c.dp * c.cp) % d == 0] if local == int(local) and kv_local == int(kv_local) else [])
        raise InputError("cp", f"Ulysses needs the query and key/value heads of a TP rank divisible by cp: "
                         f"cp={c.cp} does not divide the {local:g} query and {kv_local:g} key/value heads of each "
                         f"tp rank", (f"choose cp from {', '.join(map(str, fits))}" if fits
                                      else "choose a smaller tp or cp") + ", or --cp-kind ring or hybrid")
    check_sequence_split(model.seq_len, c.cp, c.tp, c.sequence_parallel, c.cp_kind, c.dp * c.cp)
    if model.moe is not None:
        if model.moe.num_experts % c.ep:
            raise InputError("ep", f"ep={c.ep} does not divide the {model.moe.num_experts} experts",
                             f"choose ep from {_divisors(model.moe.num_experts, 512)}")
        # the busiest of the ep ranks holds experts / ep experts, so it takes at most
        # min(top_k, experts / ep) rows of each of the group's T tokens, against a mean of
        # T top_k / ep: the ratio is at most min(ep, experts / top_k) (at ep 1 it has no effect)
        per_token = model.moe.num_experts / model.moe.top_k
        most = per_token if c.ep == 1 else min(c.ep, per_token)
        if c.moe_load_imbalance > most:
            why = (f"every token's {model.moe.top_k} experts are the busiest (experts / top_k)" if most == per_token
                   else f"every token routes all its {model.moe.top_k} experts to the busiest of the ep={c.ep} "
                        "ranks (ep)")
            raise InputError("moe_load_imbalance", f"{c.moe_load_imbalance:g} is above {most:g}, the ratio when {why}",
                             f"use a ratio between 1 and {most:g}")
        if c.ep_carved_from_dp:
            # Megatron-Core <= 0.9 (NeMo 24.x) has no expert-TP setting: the experts split over the
            # whole tp group (NVIDIA/Megatron-LM@core_r0.9.0 megatron/core/transformer/moe/experts.py
            # tp_size = get_tensor_model_parallel_world_size()), and its EP groups are cut out of the
            # data-parallel ranks (parallel_state.py initialize_model_parallel: data_parallel_size %
            # expert_model_parallel_size must be 0; RankGenerator order tp-cp-ep-dp-pp, dp // ep)
            if c.etp != c.tp:
                raise InputError("etp", f"etp={c.etp}, but the stack carves expert parallelism out of data "
                                 f"parallelism (Megatron-Core <= 0.9), which splits the experts over the whole "
                                 f"tp group: etp = tp = {c.tp} only",
                                 f"set etp {c.tp} or leave it to the stack; another etp needs a stack that folds "
                                 "EP, megatron-core >= 0.10")
            if c.dp % c.ep:
                fits = ", ".join(str(d) for d in range(1, c.dp + 1) if c.dp % d == 0 and model.moe.num_experts % d == 0)
                raise InputError("ep", f"ep={c.ep} does not divide dp={c.dp}: the stack carves the expert-parallel "
                                 "groups out of the data-parallel ranks (Megatron-Core <= 0.9)",
                                 f"choose ep from {fits}, or a stack that folds EP, megatron-core >= 0.10")
        if (c.dp * c.cp * c.tp) % (c.ep * c.etp):
            ranks = c.dp * c.cp * c.tp
            # the degree to change: etp when it is what breaks the fold (ep alone divides), else ep
            field = "etp" if c.etp > 1 and ranks % c.ep == 0 else "ep"
            etps = [d for d in range(1, ranks + 1) if ranks % (c.ep * d) == 0] if ranks % c.ep == 0 else []
            eps = [d for d in range(1, ranks + 1) if ranks % (d * c.etp) == 0 and model.moe.num_experts % d == 0]
            fixes = ([f"with ep {c.ep}, etp from {', '.join(map(str, etps))}"] if etps else []) + \
                ([f"with etp {c.etp}, ep from {', '.join(map(str, eps))}"] if eps else [])
            raise InputError(field, f"ep*etp = {c.ep}*{c.etp} must divide dp*cp*tp = {ranks} "
                             "(MoE parallel folding)", "choose " + (" or ".join(fixes) if fixes else
                                                                   "ep and etp whose product divides dp*cp*tp"))
        check_ep_comm_overlap(c, model.mtp_layers)
    elif c.ep > 1:
        raise InputError("ep", f"{model.name} has no experts; expert parallelism needs an MoE model",
                         "set ep 1")
    elif c.etp > 1:     # accepted and printed before, with no effect on a dense model
        raise InputError("etp", f"{model.name} has no experts; expert tensor parallelism needs an MoE model",
                         "set etp 1; tp splits the dense MLP")
    elif c.moe_load_imbalance != 1.0:
        raise InputError("moe_load_imbalance", f"{model.name} has no experts to load unevenly",
                         "leave it 1, or use an MoE model")
