"""Per-row memory terms of a ``ConfigBatch``, and a lower bound on each row's peak memory.

``row_terms`` is what every stage of a row shares in ``simulator.stage_memory`` (parameters per
layer and per end on one GPU, the ZeRO shard groups, the ZeRO-3 buffers, the loss's
logits, the offloaded optimizer fraction). ``static_lower_bound_bytes`` bounds a row's peak from
below with those terms alone, before any stage is built, so the planner can drop the rows that
cannot fit without running the per-stage model on them.
"""
from __future__ import annotations

import numpy as np

from cost_models import cross_entropy, memory, moe as moe_costs, params, sharding
from cost_models.compute import LOW_PRECISION, compute_rates
from cost_models.cross_entropy import held_loss_bytes_per_logit
from cost_models.low_precision import weight_copy_bytes_per_param
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from simulator.config_batch import RECOMPUTE_METHOD_CODES, SCHEDULE_CODES, ConfigBatch
from simulator.parallel_config import RecomputeMethod, Schedule
from simulator.stack_support import lacks_feature
from simulator.stage_layout import moe_layers_before
from simulator.step_pipeline import _layouts

_UNIFORM = RECOMPUTE_METHOD_CODES[RecomputeMethod.UNIFORM]
_GPIPE = SCHEDULE_CODES[Schedule.GPIPE]
_DUALPIPE = SCHEDULE_CODES[Schedule.DUALPIPE]
#: relative margin the bound keeps below the per-stage figure: the bound sums the stages in
#: another order, so it may differ from an exact sum in the last bits
BOUND_MARGIN = 1e-9


def _degrees(batch: ConfigBatch):
    f = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    return (f(batch.dp), f(batch.tp), f(batch.pp), f(batch.cp), f(batch.ep), f(batch.etp), f(batch.vpp))


def fsdp_once_per_step(batch: ConfigBatch):
    """Rows whose FSDP (ZeRO-2 or ZeRO-3) gathers each stage's parameters once a step and
    reduce-scatters its gradients once, after the stage's last backward: a stack that keeps the
    parameters whole after the forward under a pipeline and whose pipeline runtime defers FSDP's
    reduction (``ParallelConfig.zero3_once_per_step``; torchtitan's ``reshard_after_forward = not
    pp_enabled``, torch.distributed.pipelining stage.py ``backward_maybe_with_nosync`` /
    ``_post_backward``). ZeRO-2 (``reshard_after_forward`` False, torchtitan's ``never``) runs
    the same way there: the runtime turns off the reshard after backward and the gradient sync
    for every backward but the last, so it neither regathers nor reduces per micro-batch, and
    torchtitan has no ZeRO-2 distinct from ZeRO-3 under a pipeline (``default`` = ``never``
    with pp > 1). Nothing of it runs per layer and micro-batch; its model states are ZeRO-1's
    (``row_terms``)."""
    return (np.asarray(batch.zero_stage) >= 2) & np.asarray(batch.zero3_once_per_step, dtype=bool) \
        & (np.asarray(batch.pp) > 1)


def zero2_reduced_once(batch: ConfigBatch):
    """ZeRO-2 rows whose stack keeps the whole gradient buffer until the last micro-batch and
    reduce-scatters it there (``ParallelConfig.zero2_grad_last_microbatch``, the stack's
    ``zero2_grad_reduce: last_microbatch``): the stack's only gradient sharding is its
    distributed optimizer, so such a row holds and moves what ZeRO-1 does (``row_terms``,
    ``step_model._dp_after_flush``). Rows gathered once a step under a pipeline
    (``fsdp_once_per_step``) are priced by that rule instead."""
    return (np.asarray(batch.zero_stage) == 2) & np.asarray(batch.zero2_grad_last_microbatch, dtype=bool) \
        & ~fsdp_once_per_step(batch)


def optimizer_moment_bytes(batch) -> np.ndarray:
    """Bytes of each Adam moment per row of a ``ConfigBatch`` (or of one ``ParallelConfig``): 2
    where the stack keeps them in the 16-bit weights' dtype (``moments_in_param_dtype``), else the
    plan's ``optimizer_moment_bytes``."""
    return np.where(np.asarray(batch.moments_in_param_dtype, dtype=bool), 2.0,
                    np.asarray(batch.optimizer_moment_bytes, dtype=float))


def losses_held(batch: ConfigBatch) -> np.ndarray:
    """Per row, micro-batches whose loss the head's stage holds between its forward and its
    backward at once: GPipe runs all m forwards before any backward (Huang et al. 2019; the
    same m as its activations, ``makespan.peak_in_flight``), every other schedule runs the
    head's backward of a micro-batch before its next forward there (1F1B's last stage,
    interleaved's last chunk, ZB-H1/H2's last stage, ZB-V's and DualPipe(V)'s head chunks, as
    their generated orders show: tests/test_memory_rows.py), so holds 1."""
    m = np.rint(np.asarray(batch.global_batch, dtype=float)
                / (np.asarray(batch.dp, dtype=float) * np.asarray(batch.micro_batch, dtype=float)))
    return cross_entropy.losses_held(np.asarray(batch.schedule) == _GPIPE, m)


def loss_freed_bytes(batch: ConfigBatch, logits_per_micro_batch, act_bytes) -> np.ndarray:
    """Per row, bytes of the head stage's loss (one micro-batch's logits at the loss's peak,
    ``cross_entropy.loss_peak_bytes_per_logit`` x ``logits_per_micro_batch``) that are freed
    before any layer of that stage is recomputed or rematerialises its selected operations, so
    never in memory with the recompute buffer: a stage's peak holds the larger of the two, not
    their sum (``memory_search.stage_total``). A micro-batch's backward on the head's chunk
    starts with the loss's and the LM head's backward, which free the logits (and their fp32
    softmax), before it reaches the chunk's last layer, whose recomputation (Megatron-Core
    megatron/core/tensor_parallel/random.py ``CheckpointFunction.backward``, run when autograd
    reaches the checkpointed block) comes after; and in every generated order but DualPipe's the
    head's stage runs no backward of another chunk while a loss is open
    (tests/test_loss_recompute_overlap.py walks them). GPipe's
    other held losses (``losses_held`` - 1 saved tensors) stay: they are not freed. DualPipe(V)
    runs the other direction's backward on the head's rank while a loss is open (its generated
    order pairs a chunk's forward with the other chunk's backward): 0 there, the sum."""
    return cross_entropy.loss_freed_bytes(logits_per_micro_batch, batch.cross_entropy, act_bytes,
                                          np.asarray(batch.schedule) == _DUALPIPE)


def layer_params(model: ModelSpec, tp, ep, etp):
    """Per-GPU parameters of one dense layer, and of one MoE layer's non-expert and expert parts."""
    dense = params.dense_layer_params(model) / tp + params.replicated_kv_params_per_tp_rank(model, tp)
    if model.moe is None:
        return dense, dense, 0.0 * tp
    moe_non_expert, moe_expert = moe_costs.moe_layer_params_local(model, tp, ep, etp)
    return dense, moe_non_expert + 0.0 * tp, moe_expert + 0.0 * tp


def row_terms(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch) -> dict:
    """Per row of ``batch`` (arrays of its length, broadcast views where constant): parameters on
    one GPU of one dense layer (``dense_p``), of one MoE layer's non-expert and expert parts
    (``moe_ne_p``, ``moe_ex_p``), of the embedding, LM head and MTP projections (``emb_p``,
    ``head_p``, ``mtp_p``); the ZeRO shard group (``shard``) and the experts' (``expert_shard``),
    ``zero`` (the ZeRO stage the model states are held at: 1 for a ZeRO-2 / ZeRO-3 row that
    gathers once a step under a pipeline, ``fsdp_once_per_step``, whose stage keeps its 16-bit
    weights and its gradients whole through the step and only the optimizer states sharded, and
    for a ZeRO-2 row whose stack reduces its gradients on the last micro-batch only,
    ``zero2_reduced_once``);
    ZeRO-3's gathered-parameter buffers, and such a row's, with the computing layer's unsharded
    gradient of ZeRO-2 / ZeRO-3 (``z3``, bytes; ``zero3_buffers_bytes``), and those of a stage
    computing logits, whose computing unit may be the larger output projection (``z3_head``, bytes,
    at least ``z3``); the loss's logits at
    its peak, one micro-batch's (a chunk's with a chunked loss) plus what the other held losses
    keep for their backward (``logits``, bytes: ``cross_entropy.held_loss_bytes_per_logit``,
    ``losses_held``); of those, what the head's backward frees before any layer of the stage
    recomputes (``loss_freed``, bytes: ``loss_freed_bytes``); the offloaded optimizer fraction
    (``off``); the uniform recomputation
    group (``rc_group``, layers); the Adam moment bytes (``moments``, ``optimizer_moment_bytes``)
    and the master copy's (``master``); the gradient buffer's bytes
    per parameter (``grad_buffer``) and whether the quantised weights are the only ones
    (``fp8_param_gather``, 0/1) and whether a ZeRO-3 shard is the fp32 master only (``zero3_master``,
    0/1; all three for ``memory.model_state_bytes``); ``offload_ok`` (the cluster
    has a host link). Also ``edp`` (expert-data-parallel ranks, not a view) and the dtype's
    ``low_precision``, ``full_precision`` and ``copy_bytes`` (scalars)."""
    n = len(batch)
    rates = compute_rates(cluster.gpu, eff, batch.dtype)
    param_bytes = rates.act_bytes
    low_precision = batch.dtype in LOW_PRECISION
    dp, tp, pp, cp, ep, etp, vpp = _degrees(batch)
    tokens = np.asarray(batch.micro_batch, dtype=float) * float(model.seq_len) / cp
    zero = np.asarray(batch.zero_stage)
    once = fsdp_once_per_step(batch)
    states_zero = np.where(once | zero2_reduced_once(batch), 1, zero)
    dense_p, moe_ne_p, moe_ex_p = layer_params(model, tp, ep, etp)
    dp_group = dp * cp
    shard = sharding.shard_size(dp_group, batch.zero_shard_group)
    replica_groups = sharding.replicas(dp_group, batch.zero_shard_group)
    edp = moe_costs.expert_data_parallel_size(dp, cp, tp, ep, etp) if model.moe is not None else dp_group
    expert_shard = np.maximum(edp / replica_groups, 1.0)
    # two layers' gathered parameters (the computing one and the prefetched one; more below for a
    # deeper prefetch), of the largest
    # kind of layer the model has; a part whose shard group is one rank is never gathered (its
    # weights are already whole on the GPU, and counted so in ``weights_bytes``): with expert
    # parallelism over all the data-parallel ranks, the experts; with one data-parallel rank
    # (dp * cp = 1) the dense layers and a MoE layer's non-expert part, while the experts may
    # still shard over their expert-data-parallel group (tp / (ep * etp) ranks)
    dense_sharded, experts_sharded = shard > 1, expert_shard > 1
    gathered_moe = np.where(dense_sharded, moe_ne_p, 0.0) + np.where(experts_sharded, moe_ex_p, 0.0)
    gathered_dense = np.where(dense_sharded, dense_p, 0.0) if model.num_dense_layers > 0 else 0.0 * dense_p
    # (a stage gathered once a step, ZeRO-2 as ZeRO-3, holds the same two blocks' flat
    # all-gather output at its first forward, before the copy into the kept parameters: FSDP2's
    # ``foreach_all_gather``)
    # a prefetch deeper than one layer holds each layer it gathers ahead: 1 + depth layers (at
    # least 2: the computing layer and the one prefetched, or in backward its gradients before
    # their reduce-scatter), the same depth the time model credits
    gathered = np.maximum(gathered_dense, gathered_moe)
    depth = sharding.prefetched_layers(np.maximum(batch.param_prefetch_forward, batch.param_prefetch_backward),
                                       batch.param_prefetch_max_elements, gathered)
    # and in backward the computing layer's unsharded gradient, in the dtype it is reduced in
    # (``grad_reduce_bytes``), lives beside them until its reduce-scatter (Zhao et al. 2023, PyTorch
    # FSDP, sections 3.3-3.4: backward prefetch gathers the next layer while the current one's
    # gradient is reduce-scattered; FSDP2 ``_fsdp_param_group.py`` ``post_backward`` copies the
    # unsharded gradients into the reduce dtype's reduce-scatter input: pytorch/pytorch v2.13.0;
    # DeepSpeed's stage3.py copies each parameter's full gradient into its reduce bucket,
    # ``reduce_bucket_size`` elements, not modelled beyond the one layer). ZeRO-2 that
    # reduce-scatters every micro-batch builds the same whole gradient of the layer (bucket)
    # before scattering it to its shard (DeepSpeed stage2.py's ``ipg`` reduce bucket, FSDP
    # ``SHARD_GRAD_OP``'s and FSDP2's ``post_backward``, Megatron-FSDP ``optim_grads``), so
    # holds it too, without the gathered parameters. The ZeRO-2 / ZeRO-3 gradients row holds
    # only the shard (``memory.model_state_bytes``); a stage gathered once a step, and a ZeRO-2
    # stack reducing on the last micro-batch only (``zero2_reduced_once``), keeps its whole
    # gradients there already (ZeRO-1 states), so adds none here.
    grad_sharded_per_layer = ((zero >= 3) | ((zero == 2) & ~zero2_reduced_once(batch))) & ~once
    grad_reduce_bytes = np.asarray(batch.grad_reduce_bytes, dtype=float)
    layer_grad = np.where(grad_sharded_per_layer, gathered * grad_reduce_bytes, 0.0)
    prefetched = np.maximum(1.0, depth) * gathered
    gathered_params = np.where((zero >= 3) | once, (prefetched + gathered) * param_bytes, 0.0)
    z3 = np.where(dense_sharded | experts_sharded, gathered_params + layer_grad, 0.0)
    # on a stage that computes logits (the LM head's, or an MTP head's, which uses the same
    # output weight) the computing unit may be the output projection, V x h / tp parameters
    # (the embedding table when tied), larger than a decoder layer (llama3-8b: 525 M against
    # 218 M): it is whole on the GPU when the logits are computed and through the head's
    # backward, which runs first, with every activation of the micro-batch and the logits
    # alive, and its unsharded gradient is built there before its reduce-scatter, while the
    # last layer's gather is prefetched. torchtitan (pytorch/torchtitan@b5bcd76c
    # torchtitan/distributed/fsdp.py apply_fsdp_to_decoder) wraps [norm, lm_head] (with tied
    # weights [tok_embeddings, norm, lm_head]) as one fully_shard unit with
    # reshard_after_forward only under the 'always' policy ('do not reshard_after_forward the
    # last layers by default since FSDP would prefetch them immediately') and sets
    # lm_head.set_modules_to_backward_prefetch([last block]); Megatron-FSDP
    # (NVIDIA/Megatron-LM@d98e8a64 megatron/core/distributed/fsdp/src/megatron_fsdp/
    # megatron_fsdp.py: the default fsdp_unit_modules are the transformer layers, the release
    # after forward is registered for those units only, other modules' parameters are
    # unsharded by a per-parameter hook and their gradients reduced per parameter by
    # register_post_accumulate_grad_hook) keeps the output layer gathered the same way; FSDP1
    # (llm-foundry) keeps the root unit's parameters, where MPT's tied embedding lives,
    # after the forward (torch/distributed/fsdp/_runtime_utils.py: the root's handle is not
    # resharded after forward); DeepSpeed ZeRO-3 gathers each submodule's parameters before
    # its forward and its backward (stage3.py fetch_sub_module / release_sub_module; the head's
    # V x h elements are far above stage3_param_persistence_threshold, 1e5) and holds its full
    # gradient until reduced. ZeRO-2 reducing every micro-batch builds that gradient too. The
    # embedding's own gather (DeepSpeed, FSDP2's tok_embeddings unit, resharded after forward)
    # is alive only before a micro-batch's first layer and after its last backward, not at the
    # stage's peak, so adds nothing. A stage gathered once a step keeps the head whole in its
    # ZeRO-1 states already (``z3_head`` = ``z3`` there).
    head_unit = np.where(dense_sharded, float(model.vocab_size * model.hidden_size) / tp, 0.0)
    unit = np.maximum(gathered, head_unit)
    head_params = np.where(once, gathered_params,
                           np.where(zero >= 3, (prefetched + unit) * param_bytes, 0.0))
    z3_head = np.where(dense_sharded | experts_sharded,
                       head_params + np.where(grad_sharded_per_layer, unit * grad_reduce_bytes, 0.0), 0.0)
    # a chunk as large as the micro-batch's tokens is the whole loss (the torchtitan export then
    # writes the unchunked loss): only a smaller one keeps nothing vocabulary-sized for backward
    chunk = np.asarray(batch.loss_chunk_tokens, dtype=float)
    chunked = (chunk > 0) & (chunk < tokens)
    loss_tokens = np.where(chunked, chunk, tokens)
    rc_group = np.where((np.asarray(batch.recompute_method) == _UNIFORM) & (np.asarray(batch.recompute_num_layers) > 0),
                        np.asarray(batch.recompute_num_layers, dtype=float), 1.0)
    terms = dict(dense_p=dense_p, moe_ne_p=moe_ne_p, moe_ex_p=moe_ex_p, emb_p=params.embedding_params(model) / tp,
                 head_p=params.lm_head_params(model) / tp,
                 mtp_p=params.mtp_projection_params(model) / tp if model.mtp_layers else 0.0 * tp,
                 shard=shard, expert_shard=expert_shard, z3=z3, z3_head=z3_head,
                 logits=loss_tokens * model.vocab_size / tp
                 * held_loss_bytes_per_logit(batch.cross_entropy, rates.act_bytes, losses_held(batch), chunked),
                 loss_freed=loss_freed_bytes(batch, loss_tokens * model.vocab_size / tp, rates.act_bytes),
                 off=np.asarray(batch.offload_optimizer_fraction, dtype=float), rc_group=rc_group, zero=states_zero,
                 moments=optimizer_moment_bytes(batch), grad_buffer=batch.grad_buffer_bytes,
                 fp8_param_gather=batch.fp8_param_gather, zero3_master=batch.zero3_master_params,
                 master=batch.master_weight_bytes)
    out = {k: np.broadcast_to(np.asarray(v, dtype=float), (n,)) for k, v in terms.items()}
    # offload needs a host link, and a stack that offloads (``TrainingBehaviour.lacks``)
    out["offload_ok"] = np.broadcast_to((cluster.host is not None) & ~lacks_feature(batch.stack_lacks,
                                                                                   "activation_offload"), (n,)).copy()
    # and the memory search recomputes some layers only where the stack can
    out["partial_ok"] = np.broadcast_to(~lacks_feature(batch.stack_lacks, "partial_recompute"), (n,)).copy()
    out.update(edp=edp, low_precision=low_precision, full_precision=rates.act_bytes > 2,
               copy_bytes=weight_copy_bytes_per_param(batch.dtype) if low_precision else 0.0)
    return out


def static_lower_bound_bytes(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch,
                             terms: dict | None = None) -> np.ndarray:
    """Per row, bytes no larger than its peak memory per GPU (``stage_memory.memory_parts``'
    ``memory_bytes``, with or without its memory search): what a stage holds whatever it
    recomputes or offloads, the mean over the row's pp stages or, with MoE layers, that of a
    stage holding ceil(MoE layers / pp) of them if more, with the allocator's allowance.

    A row's stages hold every decoder layer and the embedding and LM head once at least (MTP
    layers, copies of the embedding, dispatch buffers and activations only add); the model
    states are linear in the parameters (``memory.model_state_bytes``), each stage holds the
    ZeRO-3 buffers, the head's stage one micro-batch's logits. The largest stage holds at
    least the mean, and some stage at least ceil(M / pp) of the M MoE layers; the allowance
    grows with the tensors, and recomputation and offload change only activations: so the peak
    is at least this, less ``BOUND_MARGIN`` for rounding. Rows with a layout string get 0
    (their layout is not read here)."""
    t = row_terms(model, cluster, eff, batch) if terms is None else terms
    main_layers = model.num_layers
    moe_layers = float(moe_layers_before(main_layers, model)) if model.moe is not None else 0.0
    layer_p = (main_layers - moe_layers) * t["dense_p"] + moe_layers * t["moe_ne_p"]
    lp, fp, mom = t["low_precision"], t["full_precision"], t["moments"]
    held = dict(grad_bytes=t["grad_buffer"], fp8_param_gather=t["fp8_param_gather"],
                zero3_master_params=t["zero3_master"], master_bytes=t["master"])
    states = [memory.model_state_bytes(layer_p, t["zero"], t["shard"], lp, fp, t["copy_bytes"], mom, **held),
              memory.model_state_bytes(t["emb_p"] + t["head_p"], t["zero"], t["shard"], lp, fp, 0.0, mom, **held),
              memory.model_state_bytes(moe_layers * t["moe_ex_p"], t["zero"], t["expert_shard"], lp, fp,
                                       t["copy_bytes"], mom, **held)]
    pp = np.asarray(batch.pp, dtype=float)
    tensors = sum(w + g + o * (1.0 - t["off"]) for w, g, o in states) + t["logits"]
    tensors = tensors / pp
    if moe_layers:
        # some stage holds at least ceil(moe_layers / pp) MoE layers (whole layers: pigeonhole)
        most = np.ceil(moe_layers / pp)
        busiest = [memory.model_state_bytes(most * t["moe_ne_p"], t["zero"], t["shard"], lp, fp, t["copy_bytes"], mom,
                                            **held),
                   memory.model_state_bytes(most * t["moe_ex_p"], t["zero"], t["expert_shard"], lp, fp,
                                            t["copy_bytes"], mom, **held)]
        tensors = np.maximum(tensors, sum(w + g + o * (1.0 - t["off"]) for w, g, o in busiest))
    tensors = tensors + t["z3"]
    bound = (tensors + memory.allocator_allowance_bytes(tensors, memory.runtime_reserved_bytes(cluster.gpu))) \
        * (1.0 - BOUND_MARGIN)
    layouts = _layouts(batch, np.arange(len(batch)))
    if layouts is not None:
        bound = np.where(np.asarray(layouts, dtype=object).astype(str) != "", 0.0, bound)
    return np.broadcast_to(bound, (len(batch),))
