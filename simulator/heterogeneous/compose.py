"""Step time and memory of heterogeneous plans, vectorized over many plans at once.

The input is a table of stage blocks: each row is one stage, or several identical consecutive
stages, of a replica group of a plan, with its pool, tensor-parallel degree, layer count, its
place in the pipeline and its layer key (an index into ``UnitCosts``). Rows of a group are
contiguous and in pipeline order; groups of a plan are contiguous. The simulator builds the
table for one plan; the planner for hundreds of thousands.

Per stage, per micro-batch (seconds):

    t_stage = layers x (fwd + bwd + w per layer, from step_model.evaluate on the stage's pool)
              + embedding (first stage) + LM head and loss (last stage)
              + send to the next stage + send back to the previous one
                (twice that with ``pipe_exchange_blocking``: each send waits for the receive
                of the other direction at the same boundary, DeepSpeed's pipeline engine)
              + unfused gradient accumulation (only with grad_accumulation_fusion off: the
                layers', the embedding's and an untied LM head's, as the step model's)

Transfers between stages of one pool follow ``cost_models.topology.p2p_stage_time_s`` (as the
step model); across pools each rank moves its 1/tp slice of the activation (Megatron's
scatter/gather, by its own stage's degree) through its own NIC, or the link between the pools
where slower, the slower side setting the time (``cost_models.pool_links.side_bandwidths``).
Per replica group of a 1F1B or GPipe pipeline running m micro-batches (Narayanan et al. 2021;
with unequal stages the first micro-batch crosses every stage, then the slowest stage paces the
rest):

    pipeline_g = makespan of the schedule's flush of m_g micro-batches over the group's stages,
                 each stage's forward and backward of one micro-batch as above (``group_makespan``:
                 the step model's function; at most sum of t_stage + (m_g - 1) x max t_stage,
                 the bound the micro-batch shares are split by)
                 + low-precision weight casts (once per step per stage)

Data-parallel traffic (ZeRO 0 or 1): each stage's gradients are reduced over all replicas of
the model once after the flush (all-reduced, or reduce-scattered to the ZeRO-1 shards unless
the stack's ZeRO-1 reduces whole: the step model's ``grad_collective_s``); inside one group on
one pool with the step model's own collective (``topology.group_collective_time_s``), otherwise
as a flat ring at the slowest path between the pools holding those layers. Overlapped traffic
is exposed by what exceeds its window (the stage's whole backward, or forward for the ZeRO-1
gather, of one micro-batch: its layers, ends, gradient accumulation and sends in that
direction) and never less than the last bucket, as in the step model
(``step_model._overlapped``). Every stage's exposure then also hides under the backward the
flush still runs after that stage's last one (the last micro-batch's backward on each stage
before it, ``backward_after_s``); what is left is exposed and the group's reduction ends with
its slowest stage's:

    exposed_g = max over g's stages s (exposed_s - sum over stages j < s of window_b_j, 0)

The step model counts the first stage's alone (it ends its backward last), which is this when
every stage's ring is alike; stages on pools with different networks are not alike (a slow
ring on a later stage was priced as hidden). A model with tied embeddings split over stages
then all-reduces the embedding's gradient between each replica's first and last stage, exposed,
after both ends' reductions (the step model's ``tied_embedding_all_reduce_s``; across pools on
the path between them, ``pool_links.path_cluster``). The optimizer step is memory-bound on each
stage's own GPU.

    step = max over groups (pipeline_g + straggler wait + exposed_g)
           + max over stages (optimizer)

(the reduction over all replicas cannot end before each group has produced its gradients and
its share has run past them: a lower bound on the ring's end that respects both the slowest
group and the slowest exposure; ``dp_comm_exposed_s`` is what it adds after the slowest group)

Memory per stage: its model states (ZeRO-sharded over all replicas), activations of the
micro-batches in flight at its position (1F1B: min(m, pp - position); GPipe: m), the logits
on the last stage, the allocator allowance; checked against its own pool's HBM.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cost_models import memory, params, pool_links
from cost_models.compute import LOW_PRECISION, activation_bytes
from cost_models.cross_entropy import held_loss_bytes_per_logit, loss_freed_bytes, losses_held
from cost_models.low_precision import saved_gemm_input_bytes_per_element, weight_copy_bytes_per_param
from cost_models.topology import (group_collective_time_s, p2p_stage_time_s, pipeline_exchange_transfers,
                                  pipeline_send_slicing)
from hardware_specs.mfu_reference import reference_dtype
from hardware_specs.pools import PooledCluster
from model_specs.model_spec import ModelSpec
from simulator.config_batch import modules_mask
from simulator.heterogeneous.group_makespan import group_lower_bounds_s, group_makespans_s, stage_table
from simulator.heterogeneous.plan import pool_dtype
from simulator.heterogeneous.shares import speed_shares
from simulator.heterogeneous.unit_costs import UnitCosts
from simulator.memory_rows import optimizer_moment_bytes
from simulator.memory_search import recompute_beyond_loss
from simulator.parallel_config import ParallelConfig, Schedule
from simulator.step_model import (_overlapped, end_pair_stride, grad_collective_s, pipeline_bubble_s,
                                  tied_embedding_all_reduce_s)
from simulator.step_model import (DENSE_LAYER_PARAM_TENSORS, adam_step_bytes_per_param, ends_accumulation_s,
                                  unfused_accumulation_s)


@dataclass(frozen=True)
class StageBlocks:
    """Rows of identical consecutive stages (see the module docstring). All arrays (R,).

    Attributes:
        group: replica group of the row (0..G-1, rows of a group contiguous, in pipeline order).
        key: row of the ``UnitCosts`` table (pool and layer key).
        layers: transformer layers per stage; count: stages in the block; position: pipeline
            position of the block's first stage.
        first, last: the block is the pipeline's first / last stage (then count is 1).
        prev_pool, next_pool: pool of the neighbouring stage before / after (-1: none);
            prev_tp, next_tp: its tensor-parallel degree. A block of several stages has the
            same pool and degree on both sides (its inner boundaries).
        ring_pools: (R, pools) bool, the pools holding this row's layers in any replica of the
            plan (the data-parallel ring's path); None: the row's own pool only.
    """

    group: np.ndarray
    key: np.ndarray
    layers: np.ndarray
    count: np.ndarray
    position: np.ndarray
    first: np.ndarray
    last: np.ndarray
    prev_pool: np.ndarray
    next_pool: np.ndarray
    prev_tp: np.ndarray
    next_tp: np.ndarray
    ring_pools: np.ndarray | None = None

    def __len__(self) -> int:
        return int(len(self.group))


@dataclass(frozen=True)
class Groups:
    """Replica groups, (G,) arrays: plan index (0..P-1, contiguous), replicas, stages and
    micro-batches per replica (NaN: set from the shares)."""

    plan: np.ndarray
    replicas: np.ndarray
    stages: np.ndarray
    micro_batches: np.ndarray

    def __len__(self) -> int:
        return int(len(self.plan))


def _starts(index: np.ndarray, n: int) -> np.ndarray:
    """First row of each of the n contiguous runs 0..n-1 of ``index``."""
    return np.searchsorted(index, np.arange(n))


def compose(model: ModelSpec, cluster: PooledCluster, effs, settings: ParallelConfig, units: UnitCosts,
            blocks: StageBlocks, groups: Groups, zero_stage, total_microbatches, exact_top: int | None = None) -> dict:
    """Step time, its parts and memory for every plan of ``blocks``/``groups``.

    ``zero_stage`` and ``total_microbatches`` (micro-batches per step) are per plan (or scalars).
    ``exact_top``: None prices every plan's pipeline exactly; n (a search) prices exactly every
    plan that can be among the n fastest fitting ones, the others at a value above all of those.
    Returns a dict of per-plan (``P``), per-group (``group_*``) and per-row (``row_*``) arrays.
    """
    G = len(groups)
    P = int(groups.plan.max()) + 1 if G else 0
    R = len(blocks)
    zero = np.broadcast_to(np.asarray(zero_stage, dtype=np.int64), (P,))
    M = np.broadcast_to(np.asarray(total_microbatches, dtype=float), (P,))
    k = blocks.key
    pool = units.pool[k]
    tp = units.tp[k].astype(float)
    mbs = units.micro_batch[k].astype(float)
    rc = units.recompute[k]
    n = blocks.layers.astype(float)
    count = blocks.count.astype(float)
    first, last = blocks.first.astype(bool), blocks.last.astype(bool)
    g = blocks.group
    plan_of_row = groups.plan[g]
    d_group = groups.replicas.astype(float)
    D = np.bincount(groups.plan, weights=d_group, minlength=P)          # replicas of the model per plan
    groups_per_plan = np.bincount(groups.plan, minlength=P)
    pp = groups.stages.astype(float)[g]
    dtype = settings.dtype
    act_bytes = activation_bytes(dtype)
    s = float(model.seq_len)
    h = float(model.hidden_size)
    tokens = mbs * s

    # ---- per-pool constants gathered to rows ---------------------------------------------------
    hbm_bw = np.array([p.cluster.gpu.hbm_bw_bytes_per_s for p in cluster.pools])[pool]
    hbm = np.array([p.cluster.gpu.hbm_bytes for p in cluster.pools])[pool]
    kernel_overhead = np.array([e.kernel_overhead_s for e in effs])[pool]
    opt_fraction = np.array([e.optimizer_hbm_fraction or e.hbm_fraction for e in effs])[pool]
    skew = np.array([e.sync_skew_fraction for e in effs])[pool]

    # ---- parameters of each stage of a row ----------------------------------------------------
    stage_params = stage_param_count(model, n, first, last, pp, tp)

    # ---- pipeline send/recv per micro-batch ---------------------------------------------------
    bw_m, lat_m = pool_links.path_matrix(cluster, effs)
    stride = d_group[g] * tp            # Megatron's rank order: stage neighbours are dp*tp apart
    # the group's stages on a pool sit one after the other on that pool's nodes
    on_pool = g.astype(np.int64) * len(cluster.pools) + pool
    stages_on_pool = np.bincount(on_pool, weights=count, minlength=G * len(cluster.pools))[on_pool]
    sp_rows = np.asarray(units.sequence_parallel, dtype=bool)[k]
    transfers = pipeline_exchange_transfers(settings.pipe_exchange_blocking)
    sides = pool_links.side_bandwidths(cluster, effs)
    to_prev = boundary_p2p_s(cluster, effs, sides, lat_m, pool, tp, blocks.prev_pool, blocks.prev_tp, tokens, h,
                             act_bytes, stride, stages_on_pool, sp_rows, settings.pipeline_scatter_gather, transfers)
    to_next = boundary_p2p_s(cluster, effs, sides, lat_m, pool, tp, blocks.next_pool, blocks.next_tp, tokens, h,
                             act_bytes, stride, stages_on_pool, sp_rows, settings.pipeline_scatter_gather, transfers)
    p2p = to_prev + to_next

    # ---- one stage, one micro-batch -------------------------------------------------------------
    fwd, bwd, w = units["fwd_s"][k], units["bwd_s"][k], units["w_s"][k]
    ends = first * units["embedding_s"][k] + last * units["head_s"][k]
    grad_accum = stage_accumulation_s(model, settings, n, first, last, tp, hbm_bw, kernel_overhead)
    t_stage = n * (fwd + bwd + w) + ends + p2p + grad_accum
    # the ends' exposed TP collectives are TP traffic, not compute (as the step model counts them)
    ends_tp = first * units["embedding_tp_s"][k] + last * units["head_tp_s"][k]
    part_compute = n * units["compute_s"][k] + ends - ends_tp + grad_accum
    part_tp = n * units["tp_s"][k] + ends_tp
    part_rc = n * units["recompute_s"][k]

    # ---- replica groups: fill, slowest stage --------------------------------------------------
    gstart = _starts(g, G)
    fill = np.add.reduceat(count * t_stage, gstart) if R else np.zeros(0)
    slowest = np.maximum.reduceat(t_stage, gstart) if R else np.zeros(0)
    casts = np.add.reduceat(count * n * units["weight_cast_s"][k], gstart) if R else np.zeros(0)
    # straggler wait: the fitted share of the compute each rank spends waiting (0 on GPUs), per micro-batch
    world = np.bincount(groups.plan, weights=d_group * np.add.reduceat(count * tp, gstart), minlength=P)
    wait_rate = (np.where(world[groups.plan] > 1, np.maximum.reduceat(skew * (part_compute + part_rc), gstart), 0.0)
                 if R else np.zeros(0))
    # each stage's forward and backward of one micro-batch (with its ends, accumulation and the
    # sends it makes in that direction): the pipeline is the schedule's makespan over them, as
    # the step model's (set below); the shares below split the micro-batches by its linear
    # approximation fill + (m - 1) x slowest
    ends_b = first * units["embedding_bwd_s"][k] + last * units["head_bwd_s"][k]
    window_f, window_b = pass_windows_s(n, fwd, bwd, w, ends, ends_b, grad_accum, to_prev, to_next)

    # ---- data-parallel gradient reduction and parameter gather ----------------------------------
    D_row = D[plan_of_row]
    grads = stage_params * settings.grad_reduce_bytes
    weights = stage_params * act_bytes
    # one group, or several whose ring for this row stays on one fabric (its own pool, or whole-node
    # pools of the same system joined at their own scale-out tier, ``one_fabric``): the ring is
    # placed as the step model places it (NVLink inside a node, scale-out between nodes), not a
    # flat ring over the scale-out path (4 x tp2 on one 8-GPU node was priced apart as 2 + 2)
    single = groups_per_plan[plan_of_row] == 1
    if blocks.ring_pools is None:
        ring = np.zeros((R, len(cluster.pools)), dtype=bool)
        ring[np.arange(R), pool] = True
    else:
        ring = np.asarray(blocks.ring_pools, dtype=bool) | (np.arange(len(cluster.pools))[None, :] == pool[:, None])
    ring_bw, ring_lat = pool_links.ring_path(ring, bw_m, lat_m)
    single = single | ~np.any(ring & ~pool_links.one_fabric(cluster, effs)[pool], axis=1)
    z = zero[plan_of_row]
    comm = {}
    for kind, nbytes in (("all_reduce", grads), ("reduce_scatter", grads), ("all_gather", weights)):
        t = np.zeros(R)
        kind_fraction = np.array([e.collective_fraction(kind) for e in effs])[pool]
        for p in np.unique(pool[single]):   # one group on one pool: the step model's placement
            rows = single & (pool == p)
            t[rows] = group_collective_time_s(kind, nbytes[rows], D_row[rows], tp[rows],
                                              cluster.pools[int(p)].cluster, effs[int(p)])
        multi = ~single
        if multi.any():
            t[multi] = pool_links.ring_collective_time_s(kind, nbytes[multi], D_row[multi],
                                                         ring_bw[multi] * kind_fraction[multi], ring_lat[multi])
        comm[kind] = t
    # all-reduce (ZeRO-0, and ZeRO-1 on a stack whose ZeRO-1 reduces whole) or reduce-scatter
    grad_comm = grad_collective_s(z, settings.zero1_grad_all_reduce, comm["reduce_scatter"], comm["all_reduce"],
                                  settings.offload_optimizer_fraction)
    gather_comm = np.where(z >= 1, comm["all_gather"], 0.0)
    # as step_model: overlapped traffic is exposed by what exceeds its window (the stage's last
    # backward for the gradients, its first forward for the ZeRO-1 gather), and never less than
    # the last bucket, which can only start when the window ends
    bucket = np.maximum(settings.grad_bucket_elements, settings.grad_bucket_elements_per_dp * D_row)
    bucket_share = np.where(bucket > 0, np.minimum(bucket / np.maximum(stage_params, 1.0), 1.0), 1.0)
    # the windows (window_f, window_b above) are the stage's whole passes of one micro-batch, as
    # the step model's (``step_pipeline``: a cell's forward and backward with its ends, their
    # gradient accumulation and the sends it makes in that direction)
    exposed_grad = _overlapped(grad_comm, window_b, bucket_share * grad_comm, settings.overlap_grad_reduce)
    exposed_gather = _overlapped(gather_comm, window_f, bucket_share * gather_comm, settings.overlap_param_gather)
    # every stage's reduction runs past its own window, and a later stage's also under the work
    # the flush still does after that stage's last backward: the last micro-batch's backward on
    # every stage before it (1F1B and GPipe drain towards stage 0), ``backward_after_s``. What is
    # left of each is exposed; the group's traffic ends with the slowest stage's. The step model
    # counts the first stage's alone, exact when all rings are alike (a later stage's shortfall
    # is then within the backwards after it); a stage on a pool with a slower ring is not (a
    # jean-zay A100 stage after an H100 one left 1.6 s of its 2.9 s reduction exposed, priced 0).
    # A tied embedding's gradient is then all-reduced between the first and the last stage,
    # exposed whole, once both have their reduced gradients
    tied = tied_embedding_s(model, cluster, effs, settings.grad_reduce_bytes, pool, tp, count, gstart, d_group,
                            groups.stages)
    tied_row = np.where(blocks.position == 0, tied[g], 0.0) if R else np.zeros(0)
    after = backward_after_s(window_b, count, g, gstart)
    dp_left = np.maximum(exposed_grad + exposed_gather - after, 0.0)
    dp_row = dp_left + tied_row
    # each group's exposed data-parallel traffic per step: its slowest stage's reduction, or the
    # tied embedding's after the later of its ends' reductions
    if R:
        gend = np.append(gstart[1:], R) - 1
        dp_group = np.maximum(np.maximum.reduceat(dp_left, gstart),
                              np.maximum(dp_left[gstart], dp_left[gend]) + tied)
    else:
        dp_group = np.zeros(0)

    # ---- micro-batches per replica group --------------------------------------------------------
    m_given = groups.micro_batches.astype(float)
    free = np.isnan(m_given)
    if free.any():
        # the groups that leave their counts to the shares split what the stated groups leave of
        # the plan's micro-batches, minimising the largest pipeline + casts + wait (each
        # replica's time, linear in m) + the group's exposed data-parallel traffic (a group's
        # reduction runs past its own end, ``tail`` below)
        stated = np.bincount(groups.plan, weights=np.where(free, 0.0, m_given * d_group), minlength=P)
        idx = np.flatnonzero(free)
        m_share, total_share = speed_shares(groups.plan[idx], groups.replicas[idx],
                                            (fill + casts + wait_rate + dp_group)[idx], (slowest + wait_rate)[idx],
                                            M - stated)
        m = m_given.copy()
        m[idx] = m_share
        group_total = np.where(free, 0.0, m_given * d_group)
        group_total[idx] = total_share
    else:
        m = m_given
        group_total = m_given * d_group
    wait_row = skew * m[g] * (part_compute + part_rc)
    sync = np.where(world[groups.plan] > 1, np.maximum.reduceat(wait_row, gstart), 0.0) if R else np.zeros(0)

    # ---- optimizer ------------------------------------------------------------------------------
    # the step model's bytes a parameter (fp32 moments: the pooled model refuses 16-bit ones) on
    # the stack's gradient buffer
    adam = float(adam_step_bytes_per_param(dtype, optimizer_moment_bytes(settings), settings.grad_buffer_bytes,
                                           settings.master_weight_bytes))
    opt_params = stage_params / np.where(z >= 1, D_row, 1.0)
    opt_row = opt_params * adam / (hbm_bw * opt_fraction)

    # ---- memory at each row's first stage (the one with the most micro-batches in flight) -------
    in_flight = in_flight_microbatches(settings, m[g], pp, blocks.position)
    layer_act, full_act = layer_activation_bytes(model, settings, units)
    reserved = pool_reserved_bytes(cluster, pool)
    mparts = stage_memory_parts(model, settings, stage_params, z, D_row, tp, mbs, rc, layer_act[k], full_act[k], n,
                                in_flight, last, reserved)
    w_b, g_b, o_b = mparts["weights_bytes"], mparts["gradients_bytes"], mparts["optimizer_bytes"]
    activations, logits = mparts["activations_bytes"], mparts["logits_bytes"]
    mem = mparts["memory_bytes"]
    tensors = mem - mparts["allocator_bytes"]

    # ---- per plan -----------------------------------------------------------------------------
    pstart_g = _starts(groups.plan, P)
    pstart_r = _starts(plan_of_row, P)
    opt_max = np.maximum.reduceat(opt_row, pstart_r) if R else np.zeros(0)
    fits = np.minimum.reduceat((mem <= hbm).astype(np.int8), pstart_r).astype(bool) if R else np.zeros(0, bool)
    f_tab, b_tab = stage_table(window_f, window_b, g, blocks.position, blocks.count, G,
                               int(groups.stages.max()) if G else 1)

    def tail(group_time):
        """Per plan: the slowest group's end and what the reduction adds after it.

        The reduction over all replicas cannot end before every group has produced its
        gradients: group g ends its backward at group_time_g and its share runs past that by
        its own exposure (dp_group_g, against its own backward window), so it ends at
        max_g(group_time_g + dp_group_g), a lower bound that respects both the slowest group
        and the slowest exposure (the slowest end plus the largest exposure of any group let a
        faster group's shorter window, hence larger exposure, lengthen the step). Written as
        max_g(dp_group_g - g's slack behind the slowest): exactly the slowest group's exposure
        where that binds."""
        if not G:
            return np.zeros(0), np.zeros(0)
        slowest_end = np.maximum.reduceat(group_time, pstart_g)
        return slowest_end, np.maximum.reduceat(dp_group - (slowest_end[groups.plan] - group_time), pstart_g)

    def steps(span):
        end, dp_after = tail(span + casts + sync)
        return end + dp_after + opt_max

    if exact_top is None or P <= exact_top:
        span = group_makespans_s(settings.schedule, f_tab, b_tab, groups.stages, m)
    else:
        # the plans that can rank among the best ``exact_top`` (fitting first) get the exact
        # makespan: the best by the linear estimate, then every plan whose lower bound is within
        # the slowest of their exact steps; the others keep the larger of estimate and bound,
        # above every exact step they could displace
        lower = group_lower_bounds_s(settings.schedule, f_tab, b_tab, groups.stages, m)
        span = np.maximum(fill + (m - 1.0) * slowest, lower)
        order = np.lexsort((steps(span), ~fits))
        chosen = np.zeros(P, dtype=bool)
        chosen[order[:exact_top]] = True
        exact = group_makespans_s(settings.schedule, f_tab, b_tab, groups.stages, m, chosen[groups.plan])
        span = np.where(chosen[groups.plan], exact, span)
        bar = steps(span)[chosen].max()
        more = ~chosen & (steps(lower) <= bar)
        if more.any():
            exact = group_makespans_s(settings.schedule, f_tab, b_tab, groups.stages, m, more[groups.plan])
            span = np.where(more[groups.plan], exact, span)
    pipeline = span + casts
    group_time = pipeline + sync
    # dp_tail: the exposed reduction after the slowest group ends (``tail``; the parts sum to the step)
    slowest_group, dp_tail = tail(group_time)
    step = slowest_group + dp_tail + opt_max

    # breakdown: the critical group's slowest stage (its parts sum to the step)
    crit_g = _argmax_by(group_time, groups.plan, P)
    crit_row = _argmax_by(np.where(g == crit_g[plan_of_row], t_stage, -np.inf), plan_of_row, P)
    mc = m[crit_g]
    tokens_step = M * (mbs[pstart_r] if R else 0.0) * s
    # FLOPs: one micro-batch of the whole model (the same on every pool), times M
    model_flops = M * (units["model_flops_mb"][k][pstart_r] if R else 0.0)
    # each used pool's peak in the dtype it runs; a pool the plans leave idle may lack the dtype
    # (the V100 of a file whose H100-only plan runs bf16) and is not asked for it
    peak_of = np.zeros(len(cluster.pools))
    for i in np.unique(pool):
        gpu = cluster.pools[int(i)].cluster.gpu
        peak_of[i] = gpu.peak_flops(pool_dtype(gpu, dtype) or dtype)
    peak = peak_of[pool]
    gpus_row = count * tp * d_group[g]
    gpus = np.bincount(plan_of_row, weights=gpus_row, minlength=P)
    peak_total = np.bincount(plan_of_row, weights=gpus_row * peak, minlength=P)
    # MFU as every one-kind output shows it: of each GPU's reference (bf16) peak, summed
    ref_peak = np.array([p.cluster.gpu.peak_flops(reference_dtype(p.cluster.gpu)) for p in cluster.pools])[pool]
    ref_peak_total = np.bincount(plan_of_row, weights=gpus_row * ref_peak, minlength=P)
    out = {
        "step_time_s": step,
        "compute_s": mc * part_compute[crit_row],
        "recompute_s": mc * part_rc[crit_row],
        "tp_comm_exposed_s": mc * part_tp[crit_row],
        "cp_comm_exposed_s": np.zeros(P),
        "ep_comm_exposed_s": np.zeros(P),
        "pp_comm_s": mc * p2p[crit_row],
        "zero3_comm_exposed_s": np.zeros(P),
        # the critical group's slowest stage idles for its makespan less its work (one stage a
        # group printed -4.4e-16 s before the rounding was cut)
        "pipeline_bubble_s": pipeline_bubble_s(pipeline[crit_g], mc * slowest[crit_g]),
        "dp_comm_exposed_s": dp_tail,
        "sync_wait_s": sync[crit_g],
        "optimizer_s": opt_max,
        "offload_exposed_s": np.zeros(P),      # pooled plans do not offload
        "tokens_per_step": tokens_step,
        "tokens_per_s": tokens_step / step,
        "n_gpus": gpus,
        "model_flops": model_flops,
        "mfu": model_flops / step / peak_total,
        "mfu_reference": model_flops / step / ref_peak_total,
        "memory_bytes": np.maximum.reduceat(mem, pstart_r) if R else np.zeros(0),
        "fits": fits,
        "replicas": D,
        "critical_group": crit_g,
        "group_micro_batches": m,
        "group_micro_batches_total": group_total,
        "group_pipeline_s": pipeline,
        "group_fill_s": fill,
        "group_slowest_stage_s": slowest,
        "row_stage_s": t_stage,
        "row_compute_s": part_compute,
        "row_tp_s": part_tp,
        "row_recompute_s": part_rc,
        "row_p2p_s": p2p,
        "row_dp_exposed_s": dp_row,
        "row_dp_comm_s": grad_comm + gather_comm + tied_row,
        "row_optimizer_s": opt_row,
        "row_memory_bytes": mem,
        "row_hbm_bytes": hbm,
        "row_params": stage_params,
        "row_weights_bytes": w_b, "row_gradients_bytes": g_b, "row_optimizer_bytes": o_b,
        "row_activations_bytes": activations, "row_logits_bytes": logits,
        "row_allocator_bytes": mem - tensors,
        "row_pool": pool,
        # (P, pools): GPUs each plan places on each pool (``n_gpus`` split by pool)
        "pool_gpus": np.stack([np.bincount(plan_of_row, weights=gpus_row * (pool == i), minlength=P)
                               for i in range(len(cluster.pools))], axis=1) if P else np.zeros((0, len(cluster.pools))),
    }
    return out


def backward_after_s(window_b, count, group, gstart) -> np.ndarray:
    """Per stage block, seconds of backward its group's pipeline still runs after the block's
    first stage ends its last backward: the last micro-batch's backward (``window_b``, one
    micro-batch, with its send to the previous stage) on every stage before it, which 1F1B and
    GPipe run after it, each waiting for the one behind (Narayanan et al. 2021, figure 4: the
    flush drains from the last stage to the first). A lower bound (a busier earlier stage may
    start that backward later), 0 on the first stage. Rows as ``StageBlocks`` (``count``
    stages a row, ``group`` its replica group, ``gstart`` each group's first row)."""
    work = np.asarray(count, dtype=float) * np.asarray(window_b, dtype=float)
    if len(work) == 0:
        return work
    before = np.cumsum(work) - work
    return before - before[np.asarray(gstart)][np.asarray(group)]


def pass_windows_s(layers, fwd_s, bwd_s, w_s, ends_s, ends_bwd_s, accumulation_s, to_prev_s, to_next_s):
    """(forward, backward) seconds of one micro-batch on a stage of ``layers`` layers: its
    layers' passes (``fwd_s``; ``bwd_s`` + ``w_s``, per layer), its ends (``ends_s`` both passes,
    ``ends_bwd_s`` of it in the backward), its gradient accumulation (backward) and the send it
    makes in that direction (``to_next_s`` forward, ``to_prev_s`` backward). The pipeline's
    makespan is taken over them (``group_makespan``); they sum to the stage's time."""
    window_b = layers * (bwd_s + w_s) + ends_bwd_s + accumulation_s + to_prev_s
    window_f = layers * fwd_s + (ends_s - ends_bwd_s) + to_next_s
    return window_f, window_b


def stage_param_count(model: ModelSpec, layers, first, last, pp, tp):
    """Parameters one GPU of a stage holds before ZeRO: its layers, the embedding on the first
    stage, the LM head on the last, split by ``tp``. An untied head has its own weights; a tied
    one is the embedding, which Megatron copies onto the last stage when the pipeline has more
    than one (megatron/model/module.py, initialize_word_embeddings). A layer split over more ranks
    than it has key/value heads also holds its replicated K and V projections, as in the step
    model (``params.replicated_kv_params_per_tp_rank``)."""
    layer_params = float(params.dense_layer_params(model))
    emb_params = float(params.embedding_params(model))
    head_params = float(params.lm_head_params(model))
    head_here = np.where(model.tied_embeddings & (np.asarray(pp) > 1), emb_params, head_params)
    layers = np.asarray(layers, dtype=float)
    return ((layers * layer_params + np.asarray(first) * emb_params + np.asarray(last) * head_here)
            / np.asarray(tp, dtype=float) + layers * params.replicated_kv_params_per_tp_rank(model, tp))


def stage_accumulation_s(model: ModelSpec, settings: ParallelConfig, layers, first, last, tp, hbm_bw_bytes_per_s,
                         kernel_overhead_s):
    """Seconds per micro-batch of a stage's unfused gradient accumulation (0 with
    ``grad_accumulation_fusion``), as the step model adds it: each of its ``layers`` layers'
    ``DENSE_LAYER_PARAM_TENSORS`` tensors, and the embedding's on the first stage and an untied LM
    head's on the last (``step_model.unfused_accumulation_s``, ``step_model.ends_accumulation_s``)."""
    if settings.grad_accumulation_fusion:
        return np.zeros(np.shape(layers))
    grad_bytes = activation_bytes(settings.dtype)
    layer = unfused_accumulation_s(stage_param_count(model, 1.0, 0.0, 0.0, 1.0, tp), DENSE_LAYER_PARAM_TENSORS,
                                   grad_bytes, settings.grad_reduce_bytes, hbm_bw_bytes_per_s, kernel_overhead_s)
    emb, head = ends_accumulation_s(model, tp, grad_bytes, settings.grad_reduce_bytes, hbm_bw_bytes_per_s,
                                    kernel_overhead_s)
    return np.asarray(layers, dtype=float) * layer + np.asarray(first) * emb + np.asarray(last) * head


def tied_embedding_s(model: ModelSpec, cluster: PooledCluster, effs, grad_reduce_bytes, pool, tp, count, gstart,
                     replicas, stages) -> np.ndarray:
    """Per replica group, seconds of the tied embedding's gradient all-reduce between each
    replica's first and last stage, once per step after the data-parallel reduction: the step
    model's ``tied_embedding_all_reduce_s`` (0 for an untied model or a one-stage pipeline).

    Rows (``pool``, ``tp``, ``count``) are the stage blocks, ``gstart`` each group's first row,
    the group's last row its last stage; ``replicas`` and ``stages`` per group. Each GPU's share
    of the V x h gradient is sized by the smaller tensor-parallel degree of the two stages (as the
    sends, ``boundary_p2p_s``). Both stages on one pool: that pool's collective with the two ranks
    as far apart as Megatron's order puts them (every stage before the last holds replicas x tp
    ranks; (pp - 1) x tp x dp in the step model), inside one node when the group's ranks fit
    in one (``step_model.first_last_stage_stride``). On two pools: a node apart on the path between
    them (``pool_links.path_cluster``), with the first stage's pool's efficiency model.
    """
    out = np.zeros(len(gstart))
    if not model.tied_embeddings or len(pool) == 0:
        return out
    gend = np.append(gstart[1:], len(pool)) - 1
    a, b = pool[gstart], pool[gend]
    pair_tp = np.minimum(tp[gstart], tp[gend])
    width = replicas * np.add.reduceat(count * tp, gstart)          # the group's ranks
    apart = width - replicas * tp[gend]
    split = np.asarray(stages) > 1
    for pa, pb in sorted(set(zip(a[split].tolist(), b[split].tolist()))):
        rows = split & (a == pa) & (b == pb)
        if pa == pb:
            one = cluster.pools[pa].cluster
            stride = end_pair_stride(width[rows], apart[rows], one.gpus_per_node)
            out[rows] = tied_embedding_all_reduce_s(model, pair_tp[rows], grad_reduce_bytes, stride, one, effs[pa])
        else:
            path = pool_links.path_cluster(cluster, effs, pa, pb)
            out[rows] = tied_embedding_all_reduce_s(model, pair_tp[rows], grad_reduce_bytes, path.gpus_per_node,
                                                    path, effs[pa])
    return out


def boundary_p2p_s(cluster: PooledCluster, effs, sides, lat_m, pool, tp, other_pool, other_tp, tokens, hidden,
                   act_bytes, stride, stages_on_pool, sequence_parallel=True, scatter_gather=False,
                   transfers=1.0):
    """Seconds to send one micro-batch's activation (or its gradient) across a stage boundary:
    from a stage on ``pool`` with ``tp`` to its neighbour on ``other_pool`` (-1: none, 0 s).

    As ``step_model.pipeline_send_s``: each sender moves its 1/tp slice under
    ``sequence_parallel`` or the stack's ``scatter_gather``, else the whole tensor;
    scatter/gather without sequence parallelism adds the all-gather of the tensor over this
    stage's tensor-parallel group on its pool, once per received tensor whatever ``transfers``
    (the sends a crossing costs, ``topology.pipeline_exchange_transfers``) says. Inside a pool,
    ``cost_models.topology.p2p_stage_time_s`` with the neighbours ``stride`` ranks apart and the
    group's ``stages_on_pool`` stages on the pool (the slices sized by the smaller degree of the
    two: one NIC kind on both sides); across pools, each side's ranks move their own bytes (the
    slice by that side's degree) through their own NIC, or the link between the pools where
    slower, and the slower side sets the time (``sides``: ``pool_links.side_bandwidths``;
    ``lat_m``: ``pool_links.path_matrix``'s latencies). A100 tp 8 -> H100 tp 4: 1/8 of the
    tensor at 25 GB/s a rank and 1/4 at 50 GB/s take the same time; the smaller degree's 1/4 at
    the slower NIC took twice it.
    """
    pool = np.asarray(pool)
    other_pool = np.asarray(other_pool)
    tp = np.asarray(tp, dtype=float)
    other_tp = np.where(other_pool >= 0, other_tp, 1).astype(float)
    sliced, sg = pipeline_send_slicing(tp, np.broadcast_to(np.asarray(sequence_parallel, dtype=bool), pool.shape),
                                       scatter_gather)
    tensor = np.broadcast_to(tokens * hidden * act_bytes, pool.shape)
    nbytes = tensor / np.where(sliced, np.minimum(tp, other_tp), 1.0)
    # across pools each side moves its own ranks' bytes at its own rate (1/tp of the tensor each)
    here_bytes = tensor / np.where(sliced, tp, 1.0)
    there_bytes = tensor / np.where(sliced, other_tp, 1.0)
    stride = np.broadcast_to(np.asarray(stride, dtype=float), pool.shape)
    stages_on_pool = np.broadcast_to(np.asarray(stages_on_pool, dtype=float), pool.shape)
    t = np.zeros(pool.shape)
    same = other_pool == pool
    for p in np.unique(pool[same]):
        rows = same & (pool == p)
        t[rows] = p2p_stage_time_s(nbytes[rows], stride[rows], stages_on_pool[rows], cluster.pools[int(p)].cluster,
                                   effs[int(p)])
    cross = (other_pool >= 0) & ~same
    if cross.any():
        a, b = pool[cross], other_pool[cross]
        fraction = np.array([e.collective_fraction("p2p") for e in effs])
        nic, link = sides
        f = np.minimum(fraction[a], fraction[b])
        t[cross] = pool_links.p2p_sides_time_s(here_bytes[cross], there_bytes[cross],
                                               np.minimum(nic[a], link[a, b]) * f, np.minimum(nic[b], link[a, b]) * f,
                                               lat_m[a, b])
    t = t * transfers
    gathered = sg & (other_pool >= 0)
    for p in np.unique(pool[gathered]):
        rows = gathered & (pool == p)
        t[rows] += group_collective_time_s("all_gather", tensor[rows], tp[rows], 1, cluster.pools[int(p)].cluster,
                                           effs[int(p)])
    return t


def in_flight_microbatches(settings: ParallelConfig, micro_batches, pp, position):
    """Micro-batches whose activations a stage at ``position`` holds at its peak: 1F1B
    min(m, pp - position) (Narayanan et al. 2021), GPipe all m."""
    m = np.asarray(micro_batches, dtype=float)
    if settings.schedule == Schedule.GPIPE:
        return m + 0.0 * np.asarray(position)
    return np.minimum(m, np.asarray(pp, dtype=float) - np.asarray(position))


def layer_activation_bytes(model: ModelSpec, settings: ParallelConfig, units: UnitCosts) -> tuple[np.ndarray, np.ndarray]:
    """Per ``UnitCosts`` row: activation bytes one layer keeps per micro-batch under the row's
    recomputation, and without recomputation (the layer being recomputed), one GPU."""
    act_bytes = activation_bytes(settings.dtype)
    # low-precision recipes keep the GEMM inputs quantised, as the step model's stages do
    # (``simulator.stage_activations``)
    gemm_in = saved_gemm_input_bytes_per_element(settings.dtype) if settings.dtype in LOW_PRECISION else None
    s = float(model.seq_len)
    selective = modules_mask(settings.selective_modules)      # the stack's selective checkpointing
    per_layer = memory.activation_bytes_per_layer(model, units.micro_batch, s, units.tp, 1.0, units.sequence_parallel,
                                                  units.recompute, settings.flash_attention, gemm_input_bytes=gemm_in,
                                                  element_bytes=act_bytes, selective=selective)
    full = memory.activation_bytes_per_layer(model, units.micro_batch, s, units.tp, 1.0, units.sequence_parallel, 0,
                                             settings.flash_attention, gemm_input_bytes=gemm_in, element_bytes=act_bytes)
    return np.broadcast_to(per_layer, (len(units),)), np.broadcast_to(full, (len(units),))


def pool_reserved_bytes(cluster: PooledCluster, pool) -> np.ndarray:
    """Per row, the runtime reserve of its pool's device (``memory.runtime_reserved_bytes``)."""
    return np.array([memory.runtime_reserved_bytes(q.cluster.gpu) for q in cluster.pools])[np.asarray(pool)]


def stage_memory_parts(model: ModelSpec, settings: ParallelConfig, stage_params, zero, dp_shard, tp, micro_batch,
                       recompute, layer_act, full_act, layers, in_flight, last,
                       reserved_bytes=memory.RUNTIME_RESERVED_BYTES) -> dict:
    """Peak bytes on one GPU of a stage, by part (``simulator.report.MEMORY_PARTS`` names):
    model states of ``stage_params`` sharded by ZeRO over ``dp_shard`` replicas, activations of
    ``layers`` layers of ``layer_act`` bytes each for ``in_flight`` micro-batches, plus what a
    layer's recomputation brings back at its backward beyond what it keeps (``full_act -
    layer_act``: the recomputed operations, or a fully recomputed layer less its stored input;
    ``simulator.stage_memory._recompute_buffer`` with every layer alike; on the last stage
    beyond the logits freed before it, ``memory_rows.loss_freed_bytes``), the logits on
    the last stage, the allocator allowance (``cost_models.memory``) with the device's runtime
    reserve (``reserved_bytes``, per row: ``memory.runtime_reserved_bytes`` of its pool's device);
    ``memory_bytes`` is the total."""
    dtype = settings.dtype
    act_bytes = activation_bytes(dtype)
    s = float(model.seq_len)
    tokens = np.asarray(micro_batch, dtype=float) * s
    # the layers keep the quantised weight copies the step model counts, the embedding and LM
    # head stay 16-bit (``simulator.memory_rows``)
    copy_bytes = weight_copy_bytes_per_param(dtype) if dtype in LOW_PRECISION else 0.0
    layer_params = stage_param_count(model, layers, 0.0, 0.0, 1.0, tp)
    held = dict(grad_bytes=settings.grad_buffer_bytes, fp8_param_gather=settings.fp8_param_gather,
                zero3_master_params=settings.zero3_master_params, master_bytes=settings.master_weight_bytes,
                moment_bytes=float(optimizer_moment_bytes(settings)))
    states = [memory.model_state_bytes(part, zero, dp_shard, dtype in LOW_PRECISION, act_bytes > 2,
                                       copy_bytes=copies, **held)
              for part, copies in ((layer_params, copy_bytes), (np.asarray(stage_params) - layer_params, 0.0))]
    w_b, g_b, o_b = (a + b for a, b in zip(*states))
    # the loss's peak on the last stage, per logit as the step model prices it
    # (``simulator.memory_rows``; the whole micro-batch: a plan cannot chunk the loss)
    # GPipe's last stage holds all its in-flight micro-batches' losses until their backward
    # (``memory_rows.losses_held``), the other schedules one
    held = losses_held(settings.schedule == Schedule.GPIPE, in_flight)
    per_micro_batch = np.asarray(last) * tokens * model.vocab_size / np.asarray(tp, dtype=float)
    logits = per_micro_batch * held_loss_bytes_per_logit(settings.cross_entropy, act_bytes, held)
    # one micro-batch's loss is freed by the head's backward before a layer is recomputed: the
    # recompute buffer adds only what exceeds it (``memory_rows.loss_freed_bytes``; DualPipe
    # overlaps them, so adds it whole)
    freed = loss_freed_bytes(per_micro_batch, settings.cross_entropy, act_bytes, settings.schedule == Schedule.DUALPIPE)
    activations = layer_act * np.asarray(layers, dtype=float) * in_flight \
        + recompute_beyond_loss(np.where(np.asarray(layers) > 0, np.maximum(full_act - layer_act, 0.0), 0.0), freed)
    tensors = w_b + g_b + o_b + activations + logits
    allocator = memory.allocator_allowance_bytes(tensors, reserved_bytes)
    return {"weights_bytes": w_b, "gradients_bytes": g_b, "optimizer_bytes": o_b, "activations_bytes": activations,
            "logits_bytes": logits, "allocator_bytes": allocator, "memory_bytes": tensors + allocator}


def _argmax_by(values: np.ndarray, index: np.ndarray, n: int) -> np.ndarray:
    """Per run of ``index`` (0..n-1, contiguous), the position of the largest of ``values``."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((-values, index))
    return order[_starts(index[order], n)]
