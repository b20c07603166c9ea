"""The vectorized step model: every configuration of a ``ConfigBatch`` to step time and memory.

This is the one place where cost-model terms are combined into a training step. The
single-configuration simulator (``simulator.simulate``) and the planner both call
``evaluate``; the planner on thousands of rows at once.

Step time (per optimizer step, seconds):

    pipeline = makespan of one flush of the schedule over the actual layer layout
               (``simulator.step_pipeline``: per-cell F/B/W from ``simulator.layer_times``)
               + the low-precision weight casts of the first micro-batch (pipeline fill)
    step     = pipeline + exposed DP communication + straggler wait + optimizer step

Data-parallel traffic follows the software stack (``ParallelConfig``): ZeRO-0/1 reduce the
gradients once after the flush, overlapped (``overlap_grad_reduce``) with the first stage's
last backward, the last bucket (``dp_bucket_bytes``) exposed since it can only start when the
backward ends; ZeRO-1/2 all-gather the updated parameters, overlapped
(``overlap_param_gather``) with the next step's first forward. ZeRO-2 keeps only its gradient
shard, so it reduce-scatters every micro-batch, layer by layer under that micro-batch's
backward (DeepSpeed stage 2, FSDP ``SHARD_GRAD_OP``); ZeRO-3 also gathers every layer's
parameters in forward and backward, prefetched under the previous layer's compute. Exposed
time is what the traffic exceeds its window by: no fitted shares.

The straggler wait is ``EfficiencyModel.sync_skew_fraction`` x the step's compute on jobs of
more than one rank (0 on the GPU generations; measured on CPU hosts by ``paraplan calibrate``).
"""
from __future__ import annotations

from functools import partial

import numpy as np

from cost_models import moe, offload, params, sharding
from cost_models.compute import compute_rates
from cost_models.low_precision import ELEMENT_BYTES
from cost_models.topology import (group_collective_time_s, p2p_stage_time_s, pipeline_exchange_transfers,
                                  pipeline_send_slicing)
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from hardware_specs.errors import InputError
from simulator import stage_memory
from simulator.config_batch import RECOMPUTE_CODES, SCHEDULE_CODES, ConfigBatch
from simulator.layer_times import layer_times
from simulator.memory_rows import fsdp_once_per_step, optimizer_moment_bytes, zero2_reduced_once
from simulator.parallel_config import Recompute, Schedule
from simulator.pipeline.event_sim import BUBBLE_ROUNDING_SHARE
from simulator.step_pipeline import Ends, PerLayer, pipeline_pass
from simulator.zero3_collectives import bucket_calls, persistent_gather_s, persistent_layer_tensors, rank_copies_s

#: HBM bytes the optimizer step moves per local parameter in mixed-precision training, as
#: Megatron's optimizer runs it: fused Adam (fp32 weight, grad, m, v read; weight, m, v
#: written: 28), the gradient-norm pass for clipping (fp32 grad read: 4), the copy of the
#: fp32 master weights into the 16-bit model weights (read 4, write 2) and zeroing the fp32
#: gradient buffer for the next step (write 4).
ADAM_STEP_BYTES_PER_PARAM = 42.0
#: fp16 adds loss-scale unscaling with the inf/NaN check, in place over the fp32 gradients
#: (read 4, write 4)
ADAM_STEP_BYTES_PER_PARAM_FP16 = 50.0
#: pure fp32 (and tf32) training (torch.optim.Adam on the CPU runs): the weights are the master
#: copy, no 16-bit copy, no clipping
ADAM_STEP_BYTES_PER_PARAM_FP32 = 28.0
#: of those bytes, the Adam moments m and v are each read and written once: 4 x the moment's bytes
#: (16 at fp32 moments; BF16 moments, ``ParallelConfig.optimizer_moment_bytes`` 2, move 8)
ADAM_MOMENT_ACCESSES = 4.0
#: of those bytes, what the master weights cost an optimizer with an fp32 master copy: read and
#: write the copy (8) and the separate pass writing the 16-bit weights from it (read 4, write 2)
ADAM_MASTER_BYTES_FP32 = 14.0
#: the same with Apex's int16 remainders (``master_weight_bytes`` 2): one fused kernel reads the
#: bf16 weight and its remainder and writes both (NVIDIA/apex@810ffae3
#: apex/contrib/optimizers/distributed_fused_adam.py :2490-2565
#: ``multi_tensor_fused_adam_with_param_remainders`` over p_in, p_rem, m, v, g, p_out: 2 + 2 read,
#: 2 + 2 written); an optimizer in the weights' dtype (0) reads the 16-bit weight and writes it in
#: place and to the parameter-sync buffer (the kernel's p_in and p_out, apex@810ffae3
#: csrc/multi_tensor_distopt_adam_kernel.cu:178-181; separate unless ``contiguous_param_buffer``,
#: which NeMo's launcher recipes do not set): 2 + 2 + 2
ADAM_MASTER_BYTES_REMAINDER = 8.0
ADAM_MASTER_BYTES_NONE = 6.0
#: bytes per element of the fp32 gradients an offloaded optimizer step moves to the host.
GRAD_BUFFER_BYTES = 4.0
#: bytes per element of the fp32 main gradients the Adam step reads (the figures above assume the
#: gradient buffer is this wide: Adam reads it in place and the step zeroes it at 4 bytes)
MAIN_GRAD_BYTES = 4.0


def unfused_accumulation_bytes(grad_bytes, grad_buffer_bytes):
    """HBM bytes per parameter of one micro-batch's unfused gradient accumulation: read the
    fresh weight gradient (``grad_bytes``, the 16-bit GEMM output) and the accumulation buffer,
    write the buffer. The buffer is the one the data-parallel reduction then moves, so its
    element is ``ParallelConfig.grad_reduce_bytes``: Megatron-LM's local DDP allocates its main
    gradients in the parameter dtype unless gradients accumulate and all-reduce in fp32
    (NVIDIA/Megatron-LM@d898a8991d megatron/model/distributed.py ``_get_buffer_type``, and the
    backward hook ``param.main_grad.add_(param.grad.data)``); autograd's own accumulation into
    ``.grad`` (DeepSpeed, FSDP) adds in the gradient's dtype, the one reduced."""
    return grad_bytes + 2.0 * np.asarray(grad_buffer_bytes, dtype=float)


def unfused_accumulation_s(n_params, n_tensors, grad_bytes, grad_buffer_bytes, hbm_bw_bytes_per_s,
                           kernel_overhead_s):
    """Seconds of one micro-batch's unfused gradient accumulation on one GPU: ``n_params``
    parameters in ``n_tensors`` tensors, one add kernel per tensor (``kernel_overhead_s`` each)
    streaming ``unfused_accumulation_bytes`` per parameter at the memory's full bandwidth
    ``hbm_bw_bytes_per_s`` (a plain add)."""
    return (n_params * unfused_accumulation_bytes(grad_bytes, grad_buffer_bytes) / hbm_bw_bytes_per_s
            + n_tensors * kernel_overhead_s)


def ends_accumulation_s(model: ModelSpec, tp, grad_bytes, grad_buffer_bytes, hbm_bw_bytes_per_s, kernel_overhead_s):
    """(embedding, LM head) seconds of one micro-batch's unfused gradient accumulation on one GPU
    (``unfused_accumulation_s``): each end's V x h / ``tp`` weight is one tensor; the LM head's is
    0 where it is tied to the embedding (accumulated once, with the embedding)."""
    emb = unfused_accumulation_s(params.embedding_params(model) / tp, 1.0, grad_bytes, grad_buffer_bytes,
                                 hbm_bw_bytes_per_s, kernel_overhead_s)
    if not params.lm_head_params(model):
        return emb, 0.0 * tp
    head = unfused_accumulation_s(params.lm_head_params(model) / tp, 1.0, grad_bytes, grad_buffer_bytes,
                                  hbm_bw_bytes_per_s, kernel_overhead_s)
    return emb, head


# a makespan above the busiest stage's work by less than BUBBLE_ROUNDING_SHARE of it is
# floating-point rounding of the sum, not a pipeline bubble (pp = 1 gave 8.9e-16 s of a 7 s
# step); defined beside the event simulator, whose per-stage idle times it clamps alike


def pipeline_bubble_s(pipeline_s, busy_s):
    """Idle seconds of a pipeline's busiest stage: its makespan ``pipeline_s`` less its own work
    ``busy_s`` (seconds per step, numpy-friendly), 0 where the difference is within
    ``BUBBLE_ROUNDING_SHARE`` of the makespan (rounding of the sums, not a bubble)."""
    bubble = pipeline_s - busy_s
    return np.where(bubble > BUBBLE_ROUNDING_SHARE * pipeline_s, bubble, 0.0)
#: weight tensors of a dense transformer layer: fused QKV, output projection, MLP up (fused
#: gate+up when gated) and down, two norms. One accumulation kernel each; biases, which the
#: model specs do not record, would add one each.
DENSE_LAYER_PARAM_TENSORS = 6

_GPIPE = SCHEDULE_CODES[Schedule.GPIPE]
_DUALPIPE = SCHEDULE_CODES[Schedule.DUALPIPE]
_FULL = RECOMPUTE_CODES[Recompute.FULL]

#: ConfigBatch fields a layer's costs depend on (with the model, cluster and dtype): rows that
#: share them share every per-layer time and FLOP count.
LAYER_KEY_FIELDS = ("tp", "cp", "micro_batch", "sequence_parallel", "recompute", "ep", "etp",
                    "moe_load_imbalance", "tp_comm_overlap", "cp_kind", "attention_kernel", "flash_attention",
                    "ep_comm_overlap", "tp_backward_overlap", "softmax_fusion", "cuda_graphs", "recompute_modules",
                    "ep_dispatch_dedup", "fp8_current_scaling", "attention_unpad", "glu_clamp_eager", "expert_output_bias",
                    "grouped_gemm_streams", "cross_entropy", "softmax_scale_pass", "selective_modules",
                    "unfused_block_ops", "moe_probs_in_expert", "yarn_rope_eager", "cp_allgather_saves_kv",
                    "ep_carved_from_dp", "nvfp4_rht_cast_fusion")


def _degrees(batch: ConfigBatch):
    """(dp, tp, pp, cp, ep, etp, vpp) of ``batch`` as float arrays."""
    f = lambda x: np.asarray(x, dtype=float)  # noqa: E731
    return (f(batch.dp), f(batch.tp), f(batch.pp), f(batch.cp), f(batch.ep), f(batch.etp), f(batch.vpp))


def _runs(columns) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each run of equal keys, run index of every row) over ``columns``.

    Consecutive rows with equal values in every column form one run; the planner enumerates
    its rows sorted by the layer key, so its chunks have few runs. Scalars are constant.
    """
    arrays = [np.asarray(c) for c in columns if np.ndim(c)]
    n = len(arrays[0]) if arrays else 1
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for a in arrays:
        change[1:] |= a[1:] != a[:-1]
    return np.flatnonzero(change), np.cumsum(change) - 1


def _once_per_run(batch: ConfigBatch, key_fields, fn, *args):
    """``fn(*args)`` evaluated on the first row of each run of rows of ``batch`` equal in
    ``key_fields`` (array arguments taken at those rows, scalars as given), its outputs (a dict
    or a tuple of arrays) spread back to every row."""
    first, run = _runs([getattr(batch, k) for k in key_fields])
    out = fn(*(np.asarray(a)[first] if np.ndim(a) else a for a in args))

    def spread(v):
        if isinstance(v, np.ndarray) and v.shape == first.shape:     # one per run already: no broadcast
            return v[run]
        return np.broadcast_to(v, (len(first),))[run]

    return {k: spread(v) for k, v in out.items()} if isinstance(out, dict) else tuple(spread(v) for v in out)


# ---- memory ----------------------------------------------------------------------------------

def memory_parts(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch,
                 detail: bool = False, fit_limit_bytes=None, drop_over_bytes=None, by_part: bool = True) -> dict:
    """Peak memory per GPU, bytes, by part, per row of ``batch``: the largest pipeline stage's
    (``simulator.stage_memory``); ``memory_bytes`` is the total.

    The memory half of ``evaluate`` on its own: the planner calls it first and times only the
    rows that fit (the figures are the same arrays ``evaluate`` returns). ``fit_limit_bytes``:
    the planner's search for the fewest recomputed / offloaded layers that fit
    (``stage_memory.memory_parts``); ``drop_over_bytes``: rows shown over it from their end
    stages get only ``memory_bytes`` inf; ``by_part`` False: the total without the parts
    (``stage_memory.memory_parts``).
    """
    return stage_memory.memory_parts(model, cluster, eff, batch, detail=detail, once_per_run=_once_per_run,
                                     layer_key_fields=LAYER_KEY_FIELDS, fit_limit_bytes=fit_limit_bytes,
                                     drop_over_bytes=drop_over_bytes, by_part=by_part)


def _stage_params(mem: dict) -> dict:
    """The parameters the step's traffic needs, from ``memory_parts``' hidden keys."""
    return {"dense_layer": mem["_p_dense_layer"], "moe_layer": mem["_p_moe_layer"],
            "expert_layer": mem["_p_expert_layer"], "edp": mem["_edp"], "first": mem["_p_first"],
            "first_layers": mem["_p_first_layers"],
            "first_expert": mem["_p_first_expert"], "act_kept_dense": mem["_act_kept_dense"],
            "act_kept_moe": mem["_act_kept_moe"]}


def _link_bw(cluster: ClusterSpec, batch: ConfigBatch):
    """The GPU-host link bandwidth each GPU's copies get (one direction, bytes/s, per row) with
    every GPU of the job offloading at once: its own link or its share of a PCIe switch's uplink
    (``offload.shared_link_bw``), less PCIe's encoding and packets; an offloading batch on a
    cluster without a host link in its file is an input error.

    The uplink is shared by the job's own GPUs behind it only (a neighbour's GPUs are taken as
    idle): ``uplink_sharers`` of them."""
    host = cluster.host
    if host is not None:
        sharers = uplink_sharers(cluster, batch)
        raw = offload.shared_link_bw(host.link_bw_bytes_per_s, host.uplink_bw_bytes_per_s, sharers)
        return offload.host_link_payload_bw(host.link, raw)
    if np.any(np.asarray(batch.offload_activation_layers) > 0) or np.any(np.asarray(batch.offload_optimizer_fraction) > 0):
        raise InputError("offload", f"cluster {cluster.name} has no host link in its file",
                         "add host: {link, link_bw_gb_per_s, memory_gib} to the cluster YAML, or do not offload")
    return np.full(len(batch), np.inf)


def uplink_sharers(cluster: ClusterSpec, batch: ConfigBatch):
    """The job's GPUs behind its busiest host uplink, per row (numpy): min(gpus_per_uplink, the
    job's GPUs on one node), the node's share being min(dp*tp*pp*cp, gpus_per_node).

    The job is placed on whole nodes in rank order, so a job smaller than a node holds its GPUs
    0..n-1, and a switch holds consecutive GPUs (DGX A100: GPUs 2k and 2k+1 under switch k,
    Azure/azhpc-images@4a4565a topology/ndv4-topo.xml); the first uplink then carries
    min(gpus_per_uplink, n) of the job's GPUs, the most any of its uplinks does, and the ranks
    run in lockstep, so the step waits on that uplink's share. A 1-GPU job on a DGX A100 has its
    x16 uplink to itself (32 GB/s raw), a 2-GPU or larger job shares it two ways (16 GB/s)."""
    per_node = batch.gpus_on_a_node(cluster.gpus_per_node)
    return np.maximum(np.minimum(float(cluster.host.gpus_per_uplink), per_node), 1.0)


def expert_dp_stride(ep, etp):
    """Ranks between neighbouring members of the expert-data-parallel group (numpy-friendly):
    ``etp * ep``. Megatron-Core builds the expert grid with ``RankGenerator(tp=etp, ep=ep,
    dp=edp, order="tp-ep-dp-pp")`` (NVIDIA/Megatron-LM@d98e8a64 megatron/core/parallel_state.py
    ``initialize_model_parallel``, ``expert_decoder_rank_generator``), so expert tensor and expert
    parallelism vary fastest and the expert-DP members are ``etp * ep`` ranks apart
    (``cost_models.moe``'s layout). The dense grid's data-parallel (x cp) group is ``tp`` apart
    (order ``tp-cp-ep-dp-pp`` with ep = 1), which the dense collectives use."""
    return np.asarray(etp, dtype=float) * np.asarray(ep, dtype=float)


def gathered_layer_weight_bytes(batch: ConfigBatch, param_bytes):
    """Bytes per element a ZeRO parameter all-gather moves for the layers' weights (the expert
    ones included), per row: the low-precision element (``low_precision.ELEMENT_BYTES``: fp8 1)
    where the stack gathers the quantised copy
    (``fp8_param_gather``: Megatron's ``--fp8-param-gather`` keeps each quantised parameter as a
    Transformer Engine Float8Tensor whose data lives in the distributed optimizer's uint8
    parameter buffer, and that buffer is what the parameter all-gather moves; Hopper's
    transposed copy is rebuilt on each rank after the gather, NVIDIA/Megatron-LM@d98e8a64
    megatron/core/distributed/param_and_grad_buffer.py, megatron/core/fp8_utils.py), else the
    16-bit ``param_bytes``. The embedding and the output layer have no quantised copy and stay
    16-bit; a layer's norms are counted with its weights, as ``memory.model_state_bytes`` holds
    them (2h of about 12h^2 elements a layer). MXFP8 gathers 16-bit: Transformer Engine cannot hand
    an MXFP8Tensor's raw data to the buffer (NVIDIA/TransformerEngine@71bbefb
    transformer_engine/pytorch/tensor/utils.py:69 ``replace_raw_data`` raises for it, and
    NVIDIA/Megatron-LM@d7288711 megatron/core/distributed/param_and_grad_buffer.py:1024 skips the
    mapping), so the optimizer writes bf16 into a buffer that reuses the gradient buffer
    (``reuse_grad_buf_for_mxfp8_param_ag``, which Megatron-Bridge requires: mixed_precision.py:96
    at v0.4.0), the all-gather moves that, and each rank quantises its full weights after it
    (param_and_grad_buffer.py:472-491)."""
    quantised = ELEMENT_BYTES.get(batch.dtype) if batch.dtype != "mxfp8" else None
    on = np.asarray(batch.fp8_param_gather, dtype=bool)
    if quantised is None:
        return np.where(on, param_bytes, param_bytes)
    return np.where(on, quantised, param_bytes)


def _shard_groups(batch: ConfigBatch, dp_group, edp):
    """(shard, replicas, expert shard) per row: ZeRO shards over ``zero_shard_group`` ranks
    (all dp*cp when 0) and replicates across the rest (HSDP, ``cost_models.sharding``); the
    expert states over the expert-data-parallel ranks of one replica group."""
    shard = sharding.shard_size(dp_group, batch.zero_shard_group)
    replicas = sharding.replicas(dp_group, batch.zero_shard_group)
    return shard, replicas, np.maximum(edp / replicas, 1.0)


# ---- the step --------------------------------------------------------------------------------

def _overlapped(comm, window, tail, overlap):
    """Exposed time of traffic ``comm`` overlapped with compute lasting ``window``: what exceeds
    the window, and never less than the ``tail`` that can only start once the window is over."""
    return np.where(overlap, np.maximum(comm - window, np.minimum(tail, comm)), comm)


def _priced_zero_stage(batch: ConfigBatch):
    """The ZeRO stage each row's data-parallel traffic is priced at: its own, except ZeRO-2 on a
    stack that keeps the whole gradient buffer until the last micro-batch (``zero2_reduced_once``),
    which reduces and gathers as ZeRO-1 does, whatever else the stack does with ZeRO-1."""
    return np.where(zero2_reduced_once(batch), 1, np.asarray(batch.zero_stage))


def _grads_reduced_every_microbatch(batch: ConfigBatch, zero):
    """Rows whose data-parallel gradients are reduced after every micro-batch's backward: ZeRO-2,
    and plain DP / ZeRO-1 under a stack whose accumulation loop has no no_sync
    (``grad_reduce_every_microbatch``), but only without a pipeline: with one, the pipeline
    runtime owns the micro-batch loop and reduces on the last backward (torch.distributed.
    pipelining stage.py backward_maybe_with_nosync; Megatron-Core schedules.py no_sync_func;
    DeepSpeed's PipelineEngine after the schedule). A ZeRO-2 row whose stack defers FSDP's
    reduction under a pipeline (``fsdp_once_per_step``: torch.distributed.pipelining runs every
    backward but the last with ``set_requires_gradient_sync(False)``) reduces once, after the
    flush (``_dp_after_flush``). ``zero``: the stage as priced (``_priced_zero_stage``: a ZeRO-2
    row whose stack keeps its gradients whole to the last micro-batch is ZeRO-1)."""
    return ((zero == 2) & ~fsdp_once_per_step(batch)) \
        | ((zero <= 1) & batch.grad_reduce_every_microbatch & (batch.pp == 1))


def z2_regathers(batch: ConfigBatch, zero):
    """Rows whose ZeRO-2 parameters are sharded at rest and gathered again in every micro-batch's
    forward (``zero2_gather_every_microbatch``: FSDP ``SHARD_GRAD_OP``, FSDP2
    ``reshard_after_forward=False``), layer by layer and hidden as far as the stack prefetches,
    instead of once after the optimizer step; not where the stack gathers a stage once a step
    under a pipeline (``fsdp_once_per_step``). ``zero``: the stage as priced
    (``_priced_zero_stage``)."""
    return (zero == 2) & np.asarray(batch.zero2_gather_every_microbatch, dtype=bool) & ~fsdp_once_per_step(batch)


def zero1_reduces_whole(zero1_grad_all_reduce, offload_optimizer_fraction):
    """Whether a ZeRO-1 run all-reduces its gradients whole (arrays allowed): where the stack's
    ZeRO-1 does (``zero1_grad_all_reduce``: DeepSpeed's BF16_Optimizer) and the optimizer stays
    on the GPU. DeepSpeed builds BF16_Optimizer for bf16 + ZeRO-1 + fp32 accumulation only
    ``and not self.zero_cpu_offload()`` (deepspeed/runtime/engine.py:2305-2306 at 0.19.8,
    ``_do_optimizer_sanity_check``); with the optimizer offloaded it builds its ZeRO stage 1-2
    optimizer (engine.py:2656-2704), which reduces each rank's gradient partition to it
    (runtime/zero/stage_1_and_2.py ``average_tensor``, ``reduce_scatter`` true: one reduce per
    destination rank, a reduce-scatter's bytes) as Megatron-Core's distributed optimizer does."""
    return (np.asarray(zero1_grad_all_reduce, dtype=bool)
            & ~(np.asarray(offload_optimizer_fraction, dtype=float) > 0.0))


def grad_collective_s(zero, zero1_grad_all_reduce, reduce_scatter_s, all_reduce_s, offload_optimizer_fraction):
    """Seconds of a data-parallel gradient reduction at ZeRO stage ``zero`` (0-2), from the two
    collectives' times: ZeRO-2 reduce-scatters to the shards; ZeRO-1 reduce-scatters too, or
    all-reduces where the stack's ZeRO-1 reduces whole and the optimizer is not offloaded
    (``zero1_reduces_whole`` of ``zero1_grad_all_reduce`` and ``offload_optimizer_fraction``,
    ``ParallelConfig``); plain data parallelism all-reduces. The per-micro-batch reductions of
    the layers and the model ends (``_pipeline_inputs``), the one after the flush
    (``_dp_after_flush``) and the pooled model's (``simulator.heterogeneous.compose``) all choose
    here."""
    whole = zero1_reduces_whole(zero1_grad_all_reduce, offload_optimizer_fraction)
    return np.where(zero == 2, reduce_scatter_s,
                    np.where(zero == 1, np.where(whole, all_reduce_s, reduce_scatter_s), all_reduce_s))


def _pipeline_inputs(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch, lay: dict,
                     sp_: dict, rates, tokens):
    """(PerLayer, Ends): per-layer pass durations with the exposed ZeRO traffic and unfused
    gradient accumulation, and the model's ends with the pipeline sends, for ``pipeline_pass``."""
    gpu = cluster.gpu
    param_bytes = rates.act_bytes
    layer_weight_bytes = gathered_layer_weight_bytes(batch, param_bytes)
    dp, tp, pp, cp, ep, etp, vpp = _degrees(batch)
    rc, zero = batch.recompute, _priced_zero_stage(batch)
    h = float(model.hidden_size)
    dp_group = dp * cp
    shard, _, expert_shard = _shard_groups(batch, dp_group, sp_["edp"])

    # ---- per-layer data-parallel traffic inside the pipeline: ZeRO-3 gathers (forward,
    # backward, and again for a recompute under DeepSpeed) and reduce-scatters; ZeRO-2's per-
    # micro-batch gradient reduce-scatter; and plain DP / ZeRO-1 gradients reduced every
    # micro-batch when the stack does (PyTorch DDP without no_sync)
    # a stack that gathers each parameter tensor alone pays every collective's start-up steps
    # once per tensor (the bytes split over them); under ZeRO-3 it also reduce-scatters each
    # tensor's gradient alone (DeepSpeed 0.3: ``_reduce_scatter_gradients`` loops over the
    # parameters, one ``reduce_scatter`` each)
    # Tensors below the stack's persistence threshold stay whole on every rank: they are neither
    # gathered per use nor counted in the gathered bytes, but their gradients are still reduced
    n_persist, persist_elements = persistent_layer_tensors(model, batch)
    n_tensors = float(params.layer_param_tensors(model))
    n_calls = np.where(batch.param_gather_per_tensor, n_tensors - n_persist, 1.0)
    n_rs_calls = np.where(batch.param_gather_per_tensor, n_tensors, 1.0)
    # a ZeRO-3 stack that all-reduces its gradients does so one reduce bucket at a time
    bucket = np.asarray(batch.grad_bucket_elements, dtype=float)

    # (ZeRO-3 and ZeRO-2 collectives run inside the shard group; a per-micro-batch all-reduce of
    # plain DP spans every replica)
    def per_layer_z(dense_or_moe_params, expert_params):
        def both(kind, n_params, nbytes, calls=1.0):
            group, e_group = (dp_group, sp_["edp"]) if kind == "all_reduce" else (shard, expert_shard)
            one = group_collective_time_s(kind, n_params * nbytes / np.maximum(calls, 1.0), group, tp, cluster, eff)
            if kind != "all_reduce":
                one = one + rank_copies_s(batch, group, eff)
            t = calls * one
            if model.moe is not None:
                t = t + group_collective_time_s(kind, expert_params * nbytes, e_group, expert_dp_stride(ep, etp),
                                                cluster, eff)
            return t
        return (both("all_gather", np.maximum(dense_or_moe_params - persist_elements, 0.0), layer_weight_bytes,
                     n_calls),
                both("reduce_scatter", dense_or_moe_params, batch.grad_reduce_bytes,
                     np.where(zero >= 3, n_rs_calls, 1.0)),
                both("all_reduce", dense_or_moe_params, batch.grad_reduce_bytes,
                     np.where(zero >= 3, bucket_calls(dense_or_moe_params, bucket), 1.0)))

    def prefetch_layers(depth, layer_elements):
        return sharding.prefetched_layers(depth, batch.param_prefetch_max_elements, layer_elements)

    per_layer_f, per_layer_b, per_layer_w, per_layer_r = [], [], [], []
    r_full, r_sel, off_f, off_b = [], [], [], []
    per_layer_b_split, per_layer_w_split, off_b_split = [], [], []
    parts = {name: [] for name in ("compute", "recompute", "tp", "cp", "ep", "z3", "tp_total", "weight_cast",
                                   "recompute_full", "recompute_sel", "tp_recompute", "ep_recompute",
                                   "cp_recompute_full", "cp_recompute_sel",
                                   "tp_total_recompute", "compute_split", "tp_split", "ep_split", "z3_split")}
    link_bw = _link_bw(cluster, batch)
    # a PCIe host link is the link the NICs use too; ZeRO and expert groups larger than a node
    # send through the NICs: a ZeRO shard group's ranks are tp apart (Megatron's tp-cp-dp order),
    # an expert group's etp apart (MoE parallel folding, ``cost_models.moe``). The whole
    # collective's time is taken as the link's (its NVLink phases too), an upper bound; CP rings
    # and a plain data-parallel all-reduce beyond a node are left out
    pcie_host = cluster.host is not None and offload.is_pcie_link(cluster.host.link)
    zero_crosses = shard * tp > cluster.gpus_per_node
    ep_crosses = ep * moe.ep_member_stride(tp, cp, etp, batch.ep_carved_from_dp) > cluster.gpus_per_node
    regather = batch.zero3_recompute_gather & (rc == _FULL)
    per_mb_grads = _grads_reduced_every_microbatch(batch, zero)
    # ZeRO-3 rows that gather and reduce per layer and micro-batch (the others do it once a
    # step, after the flush: ``_dp_after_flush``; so do ZeRO-2 rows there, which
    # ``per_mb_grads`` leaves out)
    z3_per_mb = (zero >= 3) & ~fsdp_once_per_step(batch)
    # FSDP's ZeRO-2 (parameters sharded at rest) gathers each layer again for every
    # micro-batch's forward, under the passes as ZeRO-3's forward gathers (``z2_regathers``)
    z2_per_mb = z2_regathers(batch, zero)
    fwd_gathers = z3_per_mb | z2_per_mb
    for kind, layer_p, expert_p, n_tensors in (
            ("dense", sp_["dense_layer"], 0.0 * tp, DENSE_LAYER_PARAM_TENSORS),
            ("moe", sp_["moe_layer"], sp_["expert_layer"], _moe_param_tensors(model, ep))):
        f, b, w, r = lay[f"f_{kind}"], lay[f"b_{kind}"], lay[f"w_{kind}"], lay[f"r_{kind}"]
        if np.any(fwd_gathers | per_mb_grads):
            ag, rs_grad, ar_grad = per_layer_z(layer_p, expert_p)
        else:
            ag = rs_grad = ar_grad = 0.0
        elements = layer_p + expert_p

        def zero_exposed(f, b):
            """(z3f, z3b, bwd_comm): the ZeRO traffic the forward / backward passes of ``f`` / ``b``
            seconds (``w`` after them) leave exposed, and the backward's traffic itself."""
            # the windows are the passes' whole durations on the compute stream (compute, the host's
            # floor and the exposed TP / CP / EP collectives, ``layer_times``): a prefetched gather or
            # a gradient reduction on its own stream runs under all of it, so faster GEMMs never make
            # a step slower by exposing both the TP collectives and the ZeRO traffic
            fwd_window = prefetch_layers(batch.param_prefetch_forward, elements) * f
            bwd_window = prefetch_layers(batch.param_prefetch_backward, elements) * (b + w)
            # ZeRO-3: the next layer's gather runs under this layer's pass (as far as the stack
            # prefetches); in backward the gathers and the gradient reduce-scatter share the window
            z3f = np.where(fwd_gathers, _overlapped(ag, fwd_window, 0.0, batch.overlap_param_gather), 0.0)
            grad_mb = grad_collective_s(zero, batch.zero1_grad_all_reduce, rs_grad, ar_grad,
                                        batch.offload_optimizer_fraction)
            z3_grad = np.where(batch.zero3_grad_all_reduce, ar_grad, rs_grad)
            bwd_comm = np.where(z3_per_mb, ag * (1.0 + regather) + z3_grad, np.where(per_mb_grads, grad_mb, 0.0))
            grad_window = b + w
            z3b = np.where(z3_per_mb, _overlapped(bwd_comm, bwd_window, 0.0, batch.overlap_param_gather),
                           np.where(per_mb_grads, _overlapped(bwd_comm, grad_window, 0.0, batch.overlap_grad_reduce),
                                    0.0))
            return z3f, z3b, bwd_comm

        z3f, z3b, bwd_comm = zero_exposed(f, b)
        # a B pass run apart from its W (zero-bubble schedules) is the only window it has
        b_split = lay[f"b_split_{kind}"]
        z3b_split = np.where(
            z3_per_mb, _overlapped(bwd_comm, prefetch_layers(batch.param_prefetch_backward, elements) * b_split, 0.0,
                                   batch.overlap_param_gather),
            np.where(per_mb_grads, _overlapped(bwd_comm, b_split, 0.0, batch.overlap_grad_reduce), 0.0))
        # unfused gradient accumulation: each micro-batch's weight gradients land in fresh tensors
        # (written by the GEMM, counted there) that an extra kernel per parameter tensor adds into
        # the gradient buffer (in the dtype the DP reduction moves, ``unfused_accumulation_bytes``):
        # read the fresh gradient and the buffer, write the buffer. A plain add streams at the
        # memory's full bandwidth
        accum = np.where(batch.grad_accumulation_fusion, 0.0,
                         unfused_accumulation_s(layer_p + expert_p, n_tensors, param_bytes, batch.grad_reduce_bytes,
                                                gpu.hbm_bw_bytes_per_s, rates.kernel_overhead_s))
        # an offloaded layer's activations go to the host under the next layer's forward and come
        # back under the previous layer's backward (``cost_models.offload``), on the host link's
        # own copy stream: the window is the whole pass, the ZeRO-3 gather it waits on included
        # (a window of the compute alone counted the gather's wait twice, and faster GEMMs made
        # such a step slower).
        # Where the host link is the GPU's PCIe link, the NICs sit on that same link (GPUDirect
        # RDMA through the node's PCIe switch, as on DGX / HGX nodes): traffic that leaves the
        # node (ZeRO gathers and reductions of a shard group spanning nodes, the expert
        # dispatch / combine of an EP group spanning nodes, hidden or not) and the copy take
        # turns on it, so the copy hides only under the rest of the pass: the layer lasts
        # max(pass, that traffic + copy)
        kept = sp_[f"act_kept_{kind}"]
        nic_f = np.where(zero_crosses & fwd_gathers, ag, 0.0) + np.where(ep_crosses, lay[f"ep_fwd_traffic_{kind}"], 0.0)
        nic_b = np.where(zero_crosses, bwd_comm, 0.0) + np.where(ep_crosses, lay[f"ep_bwd_traffic_{kind}"], 0.0)

        def offload_exposed(f, z3f, b, z3b):
            """(forward, backward) exposed host transfer of an offloaded layer whose passes last
            ``f + z3f`` and ``b + z3b + w``."""
            win_f = np.where(pcie_host, np.maximum(f + z3f - nic_f, 0.0), f + z3f)
            win_b = np.where(pcie_host, np.maximum(b + z3b + w - nic_b, 0.0), b + z3b + w)
            return offload.exposed_transfer_s(kept, link_bw, win_f), offload.exposed_transfer_s(kept, link_bw, win_b)

        layer_off_f, layer_off_b = offload_exposed(f, z3f, b, z3b)
        off_f.append(layer_off_f)
        off_b.append(layer_off_b)
        win_bs = np.where(pcie_host, np.maximum(b_split + z3b_split - nic_b, 0.0), b_split + z3b_split)
        off_b_split.append(offload.exposed_transfer_s(kept, link_bw, win_bs))
        if kind == "moe" and not np.any(batch.ep_comm_overlap):
            ep_unpaired_layer = {part: 0.0 * tp for part in ("ep", "z3", "offload")}
        elif kind == "moe":
            # a forward and a backward with no partner micro-batch under ep_comm_overlap
            # (``ep_unpaired_s``): their whole all-to-alls, and the ZeRO traffic and offload copy
            # their longer passes then hide, against a paired pass's (an offloaded layer's share:
            # the chunk's offloaded layers over its layers)
            f_u, b_u = f + lay["ep_unpaired_f_moe"], b + lay["ep_unpaired_b_moe"]
            z3f_u, z3b_u, _ = zero_exposed(f_u, b_u)
            off_f_u, off_b_u = offload_exposed(f_u, z3f_u, b_u, z3b_u)
            chunk_layers = float(model.num_layers + model.mtp_layers) / (pp * _overlap_chunks(batch))
            off_share = np.minimum(np.asarray(batch.offload_activation_layers, dtype=float) / chunk_layers, 1.0)
            ep_unpaired_layer = {"ep": (f_u - f) + (b_u - b), "z3": (z3f_u - z3f) + (z3b_u - z3b),
                                 "offload": off_share * ((off_f_u - layer_off_f) + (off_b_u - layer_off_b))}
        per_layer_f.append(f + z3f)
        per_layer_b.append(b + z3b)
        per_layer_b_split.append(b_split + z3b_split)
        per_layer_w_split.append(lay[f"w_split_{kind}"] + accum)
        per_layer_r.append(r)
        r_full.append(lay[f"r_full_{kind}"])
        r_sel.append(lay[f"r_sel_{kind}"])
        per_layer_w.append(w + accum)
        parts["compute"].append(lay[f"compute_fwd_{kind}"] + lay[f"compute_bwd_{kind}"] + w + accum)
        parts["recompute"].append(lay[f"recompute_{kind}"])
        parts["recompute_full"].append(lay[f"recompute_full_{kind}"])
        parts["recompute_sel"].append(lay[f"recompute_sel_{kind}"])
        parts["tp"].append(lay[f"tp_base_{kind}"])
        parts["tp_recompute"].append(lay[f"tp_recompute_{kind}"])
        parts["cp"].append(lay[f"cp_exposed_{kind}"])
        parts["cp_recompute_full"].append(lay[f"cp_recompute_full_{kind}"])
        parts["cp_recompute_sel"].append(lay[f"cp_recompute_sel_{kind}"])
        parts["ep"].append(lay[f"ep_base_{kind}"])
        parts["ep_recompute"].append(lay[f"ep_recompute_{kind}"])
        parts["z3"].append(z3f + z3b)
        parts["tp_total"].append(lay[f"tp_total_base_{kind}"])
        parts["tp_total_recompute"].append(lay[f"tp_total_recompute_{kind}"])
        parts["weight_cast"].append(lay[f"weight_cast_{kind}"])
        # the same parts of a layer whose B runs apart from its W (``b_split``, ``w_split``): the
        # passes the zero-bubble schedules and DualPipe's split steps run, so that the busiest
        # stage's parts sum to the work its makespan holds
        parts["compute_split"].append(lay[f"compute_fwd_{kind}"] + lay[f"compute_bwd_split_{kind}"]
                                      + lay[f"w_split_{kind}"] + accum)
        parts["tp_split"].append(lay[f"tp_base_split_{kind}"])
        parts["ep_split"].append(lay[f"ep_base_split_{kind}"])
        parts["z3_split"].append(z3f + z3b_split)
    per_layer = PerLayer(f=tuple(per_layer_f), b=tuple(per_layer_b), w=tuple(per_layer_w), r=tuple(per_layer_r),
                         parts={k: tuple(v) for k, v in parts.items()}, r_full=tuple(r_full), r_sel=tuple(r_sel),
                         off_f=tuple(off_f), off_b=tuple(off_b), b_split=tuple(per_layer_b_split),
                         w_split=tuple(per_layer_w_split), off_b_split=tuple(off_b_split),
                         ep_unpaired=ep_unpaired_layer)

    # one send per pass and position boundary (``pipeline_send_s``); a blocking exchange
    # (DeepSpeed's pipeline engine) also waits for the other direction's transfer at that
    # boundary (ParallelConfig.pipe_exchange_blocking)
    p2p = np.where(pp > 1, pipeline_send_s(tokens * h * rates.act_bytes, tp, cp * dp, pp, batch.sequence_parallel,
                                           batch.pipeline_scatter_gather, cluster, eff,
                                           pipeline_exchange_transfers(batch.pipe_exchange_blocking)), 0.0)
    # the embedding's and the output layer's weight gradients are accumulated like a layer's
    emb_params = params.embedding_params(model) / tp
    head_params = params.lm_head_params(model) / tp
    emb_accum, head_accum = (np.where(batch.grad_accumulation_fusion, 0.0, a) for a in ends_accumulation_s(
        model, tp, param_bytes, batch.grad_reduce_bytes, gpu.hbm_bw_bytes_per_s, rates.kernel_overhead_s))

    # ZeRO-3 also shards the embedding and the output layer: gathered for the forward and the
    # backward (their first and last passes: nothing earlier to prefetch under), gradients
    # reduce-scattered (or all-reduced a bucket at a time, as the stack does) after the backward
    def z3_ends(n_params):
        if not np.any(fwd_gathers):
            return 0.0 * tp, 0.0 * tp
        copies = rank_copies_s(batch, shard, eff)
        ag = group_collective_time_s("all_gather", n_params * param_bytes, shard, tp, cluster, eff) + copies
        rs = group_collective_time_s("reduce_scatter", n_params * batch.grad_reduce_bytes, shard, tp, cluster,
                                     eff) + copies
        calls = bucket_calls(n_params, bucket)
        ar = calls * group_collective_time_s("all_reduce", n_params * batch.grad_reduce_bytes / calls, dp_group, tp,
                                             cluster, eff)
        grad = np.where(batch.zero3_grad_all_reduce, ar, rs)
        # FSDP's ZeRO-2 gathers them for the forward only (whole through the backward; its
        # gradients reduce with the other per-micro-batch reductions, ``per_microbatch_ends``)
        return np.where(fwd_gathers, ag, 0.0), np.where(z3_per_mb, ag + grad, 0.0)

    # gradients reduced every micro-batch (ZeRO-2; plain DP / ZeRO-1 on a stack with no no_sync,
    # ``_grads_reduced_every_microbatch``) include the embedding's and the output layer's: a DDP /
    # FSDP backward reduces every bucket, so each micro-batch also reduces these (the output
    # layer's after its backward, the embedding's last of all), in the collective a layer's takes,
    # hidden under the end's own backward pass as far as the stack overlaps the reduction (as a
    # layer's under its own); nothing of theirs is left for after the flush (``_dp_after_flush``)
    def per_microbatch_ends(n_params, window):
        if not np.any(per_mb_grads):
            return 0.0 * tp
        nbytes = n_params * batch.grad_reduce_bytes
        rs = group_collective_time_s("reduce_scatter", nbytes, shard, tp, cluster, eff) + rank_copies_s(batch, shard,
                                                                                                         eff)
        ar = group_collective_time_s("all_reduce", nbytes, dp_group, tp, cluster, eff)
        grad = grad_collective_s(zero, batch.zero1_grad_all_reduce, rs, ar, batch.offload_optimizer_fraction)
        return np.where(per_mb_grads, _overlapped(grad, window, 0.0, batch.overlap_grad_reduce), 0.0)

    emb_z3_f, emb_z3_bw = z3_ends(emb_params)
    head_z3_f, head_z3_bw = z3_ends(head_params) if params.lm_head_params(model) else (0.0 * tp, 0.0 * tp)
    emb_z3_bw = emb_z3_bw + per_microbatch_ends(emb_params, lay["emb_b"] + emb_accum)
    if params.lm_head_params(model):
        head_z3_bw = head_z3_bw + per_microbatch_ends(head_params, lay["head_b"] + lay["head_w"] + head_accum)
    ends = Ends(emb_f=lay["emb_f"], emb_b=lay["emb_b"], emb_w=emb_accum, head_f=lay["head_f"],
                head_b=lay["head_b"], head_w=lay["head_w"] + head_accum, mtp_f=lay["mtp_f"], mtp_b=lay["mtp_b"],
                mtp_w=lay["mtp_w"], p2p=p2p, emb_z3_f=emb_z3_f, emb_z3_bw=emb_z3_bw, head_z3_f=head_z3_f,
                head_z3_bw=head_z3_bw, p2p_overlap=p2p_overlap_applies(batch), emb_tp=lay["emb_tp_s"],
                head_tp=lay["head_tp_s"], mtp_tp=lay["mtp_tp_s"], emb_tp_total=lay["emb_tp_total_s"],
                head_tp_total=lay["head_tp_total_s"], mtp_tp_total=lay["mtp_tp_total_s"])
    return per_layer, ends


def pipeline_send_s(tensor_bytes, tp, dp_cp, pp, sequence_parallel, scatter_gather, cluster: ClusterSpec,
                    eff: EfficiencyModel, transfers=1.0):
    """Seconds one stage boundary's crossing of one micro-batch's [s/cp, b, h] tensor
    (``tensor_bytes``: tokens x h x activation bytes) costs a tensor-parallel rank, numpy-friendly.

    Under sequence parallelism each rank holds and sends 1/tp of the sequence (Megatron-Core
    ``get_tensor_shapes`` divides the sequence by tp only when ``sequence_parallel`` is on,
    NVIDIA/Megatron-LM@d98e8a64 megatron/core/pipeline_parallel/schedules.py). Without it every
    rank holds the whole tensor and sends it whole, unless the stack scatters and gathers
    (``scatter_gather``, ``ParallelConfig.pipeline_scatter_gather``): each rank sends 1/tp of it
    and the receiver all-gathers the slices over its tensor-parallel group, tp consecutive ranks
    (Narayanan et al. 2021 section 4.1; NVIDIA/Megatron-LM@d898a8991d megatron/p2p_communication.py
    ``_communicate``: ``split_tensor_into_1d_equal_chunks`` before the send,
    ``gather_split_1d_tensor`` after the receive, skipped under sequence parallelism), on the
    receiver's critical path. Neighbouring stages are tp x cp x dp ranks apart (tp-cp-dp-pp order,
    ``topology.p2p_stage_time_s``). ``transfers`` (``topology.pipeline_exchange_transfers``): the
    sends a crossing costs (2 where a blocking exchange also waits for the other direction's); the
    receiver gathers only the tensor it receives, once."""
    tp = np.asarray(tp, dtype=float)
    sliced, sg = pipeline_send_slicing(tp, sequence_parallel, scatter_gather)
    send = p2p_stage_time_s(tensor_bytes / np.where(sliced, tp, 1.0), tp * dp_cp, pp, cluster, eff)
    gather = np.where(sg, group_collective_time_s("all_gather", tensor_bytes, tp, 1, cluster, eff), 0.0)
    return send * transfers + gather


def p2p_overlap_applies(batch: ConfigBatch) -> np.ndarray:
    """Per row, whether the pipeline's sends run behind the next chunk's pass: the stack
    overlaps them (``ParallelConfig.pipeline_p2p_overlap``, Megatron-LM's ``overlap_p2p_comm``)
    and the schedule is the interleaved one (Megatron turns the overlap off without virtual
    stages: megatron/training/arguments.py validate_args)."""
    interleaved = np.asarray(batch.schedule) == SCHEDULE_CODES[Schedule.INTERLEAVED]
    return np.asarray(batch.pipeline_p2p_overlap, dtype=bool) & interleaved & (np.asarray(batch.vpp) > 1)


def cell_times(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch, row: int = 0,
               with_fused: bool = False, with_casts: bool = False):
    """The pipeline inputs of row ``row`` as the event simulator takes them: (schedule kind, p,
    m, v, f, b, w) with (p, v) arrays of one micro-batch's forward, input-gradient (with
    recomputation) and weight-gradient seconds per (stage, chunk) cell: those of the schedule's
    B and W ops (a B run apart from its W on the zero-bubble schedules and DualPipe,
    ``step_pipeline.SPLIT_W``). ``with_fused``: also the seconds of a fused BW op per cell (the
    fused backward's b + w; what DualPipe's non-zero-bubble passes last). ``with_casts``: also
    (last) the seconds of each cell's once-a-step low-precision weight casts (its layers'
    ``weight_cast_<kind>``, 0 in 16/32-bit): they sum over the cells to the pipeline fill
    ``evaluate`` adds to the makespan (``_weight_cast_fill_s``), and over a stage's cells to
    what its compute counts of them (``part_weight_cast_s``)."""
    from simulator.step_pipeline import (_CODE_TO_KIND, MIXED_W, SPLIT_W, _layouts, cell_durations, group_cells,
                                         layer_split_counts, schedule_chunks)
    one = batch.take(np.array([row]))
    rates = compute_rates(cluster.gpu, eff, one.dtype)
    dp, tp, pp, cp, ep, etp, vpp = _degrees(one)
    tokens = np.asarray(one.micro_batch, dtype=float) * model.seq_len / cp
    lay = _layer_times(model, cluster, eff, rates, one, tokens)
    sp_ = _stage_params(memory_parts(model, cluster, eff, one))
    per_layer, ends = _pipeline_inputs(model, cluster, eff, one, lay, sp_, rates, tokens)
    code, p = int(one.schedule[0]), int(one.pp[0])
    v = schedule_chunks(code, int(one.vpp[0]))
    idx = np.array([0])
    cells = group_cells(model, _CODE_TO_KIND[code], p, v, one.first_stage_layers.astype(np.int64),
                        one.last_stage_layers.astype(np.int64), _layouts(one, idx))
    split = layer_split_counts(model, one, idx, cells, v)
    kind = _CODE_TO_KIND[code]
    f, b_fused, w_fused = cell_durations(model, cells, per_layer, ends, idx, split)
    _, b, w = cell_durations(model, cells, per_layer, ends, idx, split, w_apart=kind in SPLIT_W + MIXED_W)
    m = int(round(float(one.global_batch[0]) / (float(one.dp[0]) * float(one.micro_batch[0]))))
    out = (kind, p, m, v, f[0], b[0], w[0])
    if with_fused:
        out += ((b_fused + w_fused)[0],)
    if with_casts:
        out += (cells["dense"][0] * lay["weight_cast_dense"][0] + cells["moe"][0] * lay["weight_cast_moe"][0],)
    return out


def evaluate(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch,
             memory_by_part: dict | None = None, exact_pipeline=None) -> dict:
    """Step time, breakdown and memory for every row of ``batch``; dict of float arrays.

    ``memory_by_part``: ``memory_parts`` of these rows when the caller has them already (the
    planner computes memory first to time only the rows that fit); computed here otherwise.
    ``exact_pipeline``: boolean mask of the rows whose pipeline makespan is computed on the
    schedule's DAG (default: all). The others get an estimate by the closed forms
    (``step_pipeline.even_estimate_s``) and a lower bound (``step_time_lower_s``): the planner
    uses them to pick the rows worth the exact computation.
    """
    gpu = cluster.gpu
    rates = compute_rates(gpu, eff, batch.dtype)
    param_bytes = rates.act_bytes      # 16-bit weights gathered (fp32 when training in fp32)
    dp, tp, pp, cp, ep, etp, vpp = _degrees(batch)
    mbs, gbs = np.asarray(batch.micro_batch, dtype=float), np.asarray(batch.global_batch, dtype=float)
    s = float(model.seq_len)
    m = gbs / (dp * mbs)
    tokens = mbs * s / cp
    n_rows = len(batch)

    # ---- one layer, one micro-batch (and the model's ends): depends on the layer key only ----
    lay = _layer_times(model, cluster, eff, rates, batch, tokens)

    if memory_by_part is None:
        memory_by_part = memory_parts(model, cluster, eff, batch)
    sp_ = _stage_params(memory_by_part)
    dp_group = dp * cp
    edp = sp_["edp"]
    shard, replicas, expert_shard = _shard_groups(batch, dp_group, edp)

    per_layer, ends = _pipeline_inputs(model, cluster, eff, batch, lay, sp_, rates, tokens)
    pipe = pipeline_pass(model, batch, m, per_layer, ends, exact_pipeline)

    # low-precision weights are quantised once per step (the first micro-batch's forward) and
    # reused by every later micro-batch and by recomputation; each stage casts in-line in its
    # first forward, so the first micro-batch reaches the end that much later (pipeline fill)
    n_moe_total, n_dense_total = _layers_on_path(model)
    weight_cast_fill = _weight_cast_fill_s(model, batch, lay)
    # the passes with no partner micro-batch under ep_comm_overlap, by the part their time lands in
    unpaired = {k: ep_unpaired_s(model, batch, v, m) for k, v in per_layer.ep_unpaired.items()}
    pipeline = pipe["makespan_s"] + weight_cast_fill + unpaired["ep"] + unpaired["z3"] + unpaired["offload"]

    # ---- data-parallel gradient reduction and parameter gather after the flush -------------
    grad_comm, gather_comm, bucket_share, tied_comm = _dp_after_flush(model, cluster, eff, batch, sp_, param_bytes)
    # a ZeRO-2 / ZeRO-3 stage gathered once a step gathers under its first forward, block by
    # block, the first blocks (the embedding's and the first layer's) with nothing before them to
    # hide under; its reduce-scatter runs after the stage's last backward (the pipeline runtime's
    # post-backward, after the micro-batch loop) and overlaps nothing
    grad_share, gather_share = after_flush_tail_shares(model, sp_, tp, batch, bucket_share)
    exposed_grad = _overlapped(grad_comm, pipe["first_window_bw_s"], grad_share * grad_comm, batch.overlap_grad_reduce)
    exposed_gather = _overlapped(gather_comm, pipe["first_window_f_s"], gather_share * gather_comm,
                                 batch.overlap_param_gather)
    persist_gather = persistent_gather_s(model, cluster, eff, batch, shard, param_bytes)
    dp_exposed = exposed_grad + exposed_gather + persist_gather + tied_comm

    optimizer, opt_params, off = _optimizer_step_s(cluster, eff, batch, memory_by_part, shard, expert_shard)
    # the offloaded share's gradients go to the host under the last backward (like the DP
    # reduction), the host runs Adam on them and sends the weights back before the next
    # forward (``cost_models.offload``)
    host_step = _optimizer_offload_s(cluster, batch, off * opt_params, pipe["first_window_bw_s"], exposed_grad)

    # ---- breakdown on the busiest stage (sums to step) --------------------------------------
    share = np.where(batch.schedule == _DUALPIPE, 0.5, 1.0)   # DualPipe: one chunk per micro-batch
    # the busiest stage's own weight casts count as its compute; the other stages' as pipeline fill
    compute_part = m * share * (pipe["part_compute_s"] + pipe["ends_compute_s"]) + pipe["part_weight_cast_s"]
    recompute_part = m * share * pipe["part_recompute_s"]
    tp_part = m * share * pipe["part_tp_s"]
    cp_part = m * share * pipe["part_cp_s"]
    ep_part = m * share * pipe["part_ep_s"] + unpaired["ep"]
    z3_part = m * share * pipe["part_z3_s"] + unpaired["z3"]
    pp_comm_part = m * share * pipe["ends_p2p_s"]
    offload_pipe = m * share * pipe["part_offload_s"] + unpaired["offload"]
    offload_part = offload_pipe + host_step
    # (the makespan is at least m times the busiest stage's work: only rounding can go below,
    # or above by ~1e-16 s with one stage, which is no bubble either: pipeline_bubble_s printed
    # 8.9e-16 for pp = 1 in --json, the sweep CSV and plan --explain's reasons)
    bubble = pipeline_bubble_s(pipeline, compute_part + recompute_part + tp_part + cp_part + ep_part + z3_part
                               + pp_comm_part + offload_pipe)
    # straggler wait: the fitted share of the step's compute that ranks spend waiting for the
    # slowest peer at synchronisations (EfficiencyModel.sync_skew_fraction; 0 on GPUs)
    world = dp * tp * pp * cp
    sync_wait = np.where(world > 1, eff.sync_skew_fraction * (compute_part + recompute_part), 0.0)
    step = pipeline + dp_exposed + sync_wait + optimizer + host_step

    # ---- FLOPs (whole job per step) -------------------------------------------------------
    n_gpus = dp * tp * pp * cp
    micro_batches_total = m * dp * cp       # tokens per GPU-microbatch are split by cp
    n_dense_dec = float(model.num_layers - model.num_moe_layers)
    n_moe_dec = float(model.num_moe_layers)
    layers_flops = n_dense_dec * lay["flops_dense"] + n_moe_dec * lay["flops_moe"]
    model_flops = 3.0 * micro_batches_total * tp * (layers_flops + lay["head_flops"])
    n_mtp = float(model.mtp_layers)
    if n_mtp > 0:
        mtp_kind = "moe" if model.num_moe_layers else "dense"
        mtp_flops_fwd = n_mtp * (lay[f"flops_{mtp_kind}"] + lay["mtp_flops"])
        model_flops = model_flops + 3.0 * micro_batches_total * tp * mtp_flops_fwd
    # recomputed FLOPs over the layers one micro-batch passes (MTP layers included): the fully
    # recomputed ones repeat their forward, the others their selected operations
    rc_d, rc_m = pipe["rc_dense_path"], pipe["rc_moe_path"]
    rflops = (rc_d * lay["recompute_full_flops_dense"] + (n_dense_total - rc_d) * lay["recompute_sel_flops_dense"]
              + rc_m * lay["recompute_full_flops_moe"] + (n_moe_total - rc_m) * lay["recompute_sel_flops_moe"])
    # hardware FLOPs add the recomputation and the masked scores a materialised attention core
    # computes in its forward and backward (its backward GEMMs are twice its forward's)
    masked = n_dense_dec * lay["masked_flops_dense"] + n_moe_dec * lay["masked_flops_moe"]
    if n_mtp > 0:
        masked = masked + n_mtp * lay[f"masked_flops_{mtp_kind}"]
    hardware_flops = model_flops + micro_batches_total * tp * (3.0 * masked + rflops)
    tokens_per_step = gbs * s
    peak = gpu.peak_flops(batch.dtype)
    mem = {k: v for k, v in memory_by_part.items() if not k.startswith("_")}
    layers_busiest = np.maximum(pipe["busiest_layers"], 1.0)

    return {
        "step_time_s": step,
        "compute_s": compute_part,
        "recompute_s": recompute_part,
        "tp_comm_exposed_s": tp_part,
        "cp_comm_exposed_s": cp_part,
        "ep_comm_exposed_s": ep_part,
        "pp_comm_s": pp_comm_part,
        "zero3_comm_exposed_s": z3_part,
        "pipeline_bubble_s": bubble,
        "dp_comm_exposed_s": dp_exposed,
        "sync_wait_s": sync_wait,
        "optimizer_s": optimizer,
        "offload_exposed_s": offload_part,
        "num_microbatches": m,
        "pipeline_makespan_s": pipe["makespan_s"],
        # what the passes without a partner add to the pipeline under ep_comm_overlap (in
        # ep_comm_exposed_s, and the ZeRO-3 / offload parts): the event-level timeline does not place it
        "ep_unpaired_s": unpaired["ep"] + unpaired["z3"] + unpaired["offload"],
        "step_time_lower_s": step - pipe["makespan_s"] + pipe["makespan_lower_s"],
        "pipeline_exact": np.ones(n_rows, dtype=bool) if exact_pipeline is None else np.asarray(exact_pipeline, dtype=bool),
        "busiest_stage": pipe["busiest_stage"],
        "busiest_stage_layers": pipe["busiest_layers"],
        "microbatch_stage_time_s": share * pipe["stage_busy_s"],
        # one average layer of the busiest stage (what a layer costs there, per micro-batch)
        "layer_fwd_s": share * pipe["layer_f_s"] / layers_busiest,
        "layer_bwd_s": share * pipe["layer_bw_s"] / layers_busiest,
        "layer_recompute_s": share * pipe["layer_r_s"] / layers_busiest,
        "layer_w_s": share * pipe["layer_w_s"] / layers_busiest,
        "p2p_per_microbatch_s": share * pipe["ends_p2p_s"],
        "first_stage_layers": memory_by_part["_count_first_layers"],
        "last_stage_layers": memory_by_part["_count_last_layers"],
        "tp_comm_total_s": m * share * pipe["busiest_tp_total_s"],
        "dp_comm_total_s": grad_comm + gather_comm + persist_gather + tied_comm,
        "model_flops": model_flops,
        "hardware_flops": hardware_flops,
        "tokens_per_step": tokens_per_step + 0 * step,
        "tokens_per_s": tokens_per_step / step,
        "tokens_per_s_per_gpu": tokens_per_step / step / n_gpus,
        "model_tflops_per_gpu": model_flops / step / n_gpus / 1e12,
        "hardware_tflops_per_gpu": hardware_flops / step / n_gpus / 1e12,
        "mfu": model_flops / step / n_gpus / peak,
        "hfu": hardware_flops / step / n_gpus / peak,
        **mem,
        "hbm_bytes": np.full(n_rows, gpu.hbm_bytes),
        "fits": (mem["memory_bytes"] <= gpu.hbm_bytes) & mem["host_fits"],
    }


def _layers_on_path(model: ModelSpec) -> tuple[float, float]:
    """(MoE, dense) layers one micro-batch passes, the MTP layers included."""
    n_moe_total = float(model.num_moe_layers) + (model.mtp_layers if model.num_moe_layers else 0)
    return n_moe_total, float(model.num_layers + model.mtp_layers) - n_moe_total


def _overlap_chunks(batch: ConfigBatch):
    """Model chunks per stage as Megatron-Core's combined 1F1B counts them: vpp on the
    interleaved schedule, else 1."""
    interleaved = np.asarray(batch.schedule) == SCHEDULE_CODES[Schedule.INTERLEAVED]
    return np.where(interleaved, np.asarray(batch.vpp, dtype=float), 1.0)


def ep_unpaired_passes(batch: ConfigBatch, m):
    """Forward (and as many backward) chunk passes of pipeline stage 0 that run with no partner
    micro-batch under ``ep_comm_overlap``, per row.

    Megatron-Core overlaps the expert all-to-alls by running one micro-batch's forward beside
    another's backward (``--overlap-moe-expert-parallel-comm``, core_v0.14+
    ``pipeline_parallel/combined_1f1b.py``): without a pipeline the first micro-batch's forward
    "is executed alone, no a2a overlapping" and so is the last one's backward (1 each, also at
    m = 1); with one, the warm-up forwards of the interleaved schedule run alone, and their
    backwards in the cool-down, on stage 0 (p - 1) x 2 + (v - 1) x p of them plus the one extra
    micro-batch the overlap schedules before the 1F1B phase (``schedules.py``
    ``get_pp_rank_microbatches``, its group of micro-batches per virtual stage the default p),
    at most all m x v. Megatron-Core requires vpp with a pipeline here, so ``simulate`` refuses a
    plain 1F1B pipeline with the switch (``ep_overlap_rules``); the rule's v = 1 count is then
    never priced. DualPipe overlaps a forward chunk with a backward chunk only in its main steps
    (deepseek-ai/DualPipe ``dualpipe.py`` ``step``: steps 4 and 5, ``_forward_backward_chunk``):
    on rank 0 of p its steps 1-3 run 2 (p/2 - 1) + 2 + (p/2 - 1) = 3p/2 - 1 forwards alone, and
    steps 3 and 5-7 as many backwards, at most all m (each a chunk of L / p layers). GPipe and the
    zero-bubble schedules (ZB-H1, ZB-H2, ZB-V) run no forward beside a backward: every pass is
    alone, so the switch hides nothing there."""
    p = np.asarray(batch.pp, dtype=float)
    sched = np.asarray(batch.schedule)
    interleaved = sched == SCHEDULE_CODES[Schedule.INTERLEAVED]
    v = _overlap_chunks(batch)
    total = np.asarray(m, dtype=float) * v
    warm = np.minimum(total, 2.0 * (p - 1.0) + (v - 1.0) * p + 1.0)
    one_f_one_b = interleaved | (sched == SCHEDULE_CODES[Schedule.ONE_F_ONE_B])
    dualpipe = np.minimum(total, 1.5 * p - 1.0)
    return np.where(one_f_one_b, warm, np.where(sched == _DUALPIPE, dualpipe, total))


def ep_unpaired_s(model: ModelSpec, batch: ConfigBatch, unpaired_layer_s, m):
    """Seconds the passes without a partner (``ep_unpaired_passes``) add to the step under
    ``ep_comm_overlap``: each such forward and backward exposes its MoE layers' whole all-to-alls
    instead of what a pair leaves (``layer_times``' ``ep_unpaired_f_moe`` / ``_b_moe``), with the
    ZeRO traffic and offload copies their longer passes hide (``unpaired_layer_s``: one part of
    one MoE layer's forward and backward, ``PerLayer.ep_unpaired``), over the MoE layers of one model
    chunk (the stage's average: all MoE layers / (pp x chunks)); 0 without the overlap or expert
    parallelism. A first-order account: the passes are stage 0's, on the critical path at the
    pipeline's fill and drain."""
    n_moe_total, _ = _layers_on_path(model)
    if n_moe_total == 0:
        return 0.0 * np.asarray(m, dtype=float)
    per_chunk = n_moe_total / (np.asarray(batch.pp, dtype=float) * _overlap_chunks(batch))
    on = np.asarray(batch.ep_comm_overlap, dtype=bool) & (np.asarray(batch.ep) > 1)
    return np.where(on, ep_unpaired_passes(batch, m) * per_chunk * unpaired_layer_s, 0.0)


def _weight_cast_fill_s(model: ModelSpec, batch: ConfigBatch, lay: dict):
    """Seconds the first micro-batch's low-precision weight casts add to the pipeline fill."""
    n_moe_total, n_dense_total = _layers_on_path(model)
    weight_cast_fill = n_dense_total * lay["weight_cast_dense"] + n_moe_total * lay["weight_cast_moe"]
    return np.where(batch.schedule == _DUALPIPE, 2.0, 1.0) * weight_cast_fill


def _dp_after_flush(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch, sp_: dict,
                    param_bytes):
    """(gradient traffic, parameter-gather traffic, last bucket's share, pairwise traffic)
    of the collectives after the flush, seconds, before any overlap.

    The pairwise traffic is the tied-embedding traffic plus, under DualPipe, the exchange of the
    two model copies' gradients (``dualpipe_pair_all_reduce_s``); both run after the
    data-parallel reduction with nothing left to hide them under.

    The tied-embedding traffic: a model whose LM head shares the input embedding, split over
    pipeline stages, all-reduces that weight's gradient (V x h / tp in the reduction dtype)
    between the first and the last stage after the data-parallel reduction and before the
    optimizer step, with nothing left to hide it under (Megatron-Core ``finalize_model_grads``
    -> ``_allreduce_word_embedding_grads`` over the embedding group, NVIDIA/Megatron-LM@d98e8a64dd;
    Megatron-LM v2.5 ``train_step``; DeepSpeed's pipeline engine ``ReduceTiedGrads`` ->
    ``PipelineModule.allreduce_tied_weight_gradients``, microsoft/DeepSpeed@v0.7.0)."""
    dp, tp, pp, cp, ep, etp, vpp = _degrees(batch)
    zero = _priced_zero_stage(batch)
    dp_group = dp * cp
    edp = sp_["edp"]
    shard, replicas, expert_shard = _shard_groups(batch, dp_group, edp)
    # all-reduce (ZeRO-0) or reduce-scatter (ZeRO-1; all-reduce where the stack's ZeRO-1 reduces
    # whole, ``zero1_grad_all_reduce``) of the first stage's gradients, which finishes its backward
    # last; ZeRO-2/3 reduced theirs per micro-batch already, but for a ZeRO-2 / ZeRO-3 stage
    # gathered once a step (``fsdp_once_per_step``), which reduce-scatters its whole gradients here
    params_dp = sp_["first"]
    expert_dp = sp_["first_expert"]
    grad_bytes = params_dp * batch.grad_reduce_bytes
    expert_grad_bytes = expert_dp * batch.grad_reduce_bytes
    # (HSDP: the reduce-scatter and the gather run inside the shard group; every rank's gradient
    # shard is then all-reduced across the replicas holding the same shard, once per step:
    # ``cost_models.sharding``)
    grad_rs = group_collective_time_s("reduce_scatter", grad_bytes, shard, tp, cluster, eff)
    grad_ar = group_collective_time_s("all_reduce", grad_bytes, dp_group, tp, cluster, eff)
    # the layers' weights go as the stack gathers them (``gathered_layer_weight_bytes``), the ends' 16-bit
    layer_weight_bytes = gathered_layer_weight_bytes(batch, param_bytes)
    gathered = sp_["first_layers"] * layer_weight_bytes + (params_dp - sp_["first_layers"]) * param_bytes
    param_ag = group_collective_time_s("all_gather", gathered, shard, tp, cluster, eff)
    cross = group_collective_time_s("all_reduce", grad_bytes / shard, replicas, tp * shard, cluster, eff)
    if model.moe is not None:   # expert gradients reduce over the expert-data-parallel group
        e_stride = expert_dp_stride(ep, etp)
        e_rs = group_collective_time_s("reduce_scatter", expert_grad_bytes, expert_shard, e_stride, cluster, eff)
        e_ar = group_collective_time_s("all_reduce", expert_grad_bytes, edp, e_stride, cluster, eff)
        e_ag = group_collective_time_s("all_gather", expert_dp * layer_weight_bytes, expert_shard, e_stride, cluster,
                                      eff)
        cross = cross + group_collective_time_s("all_reduce", expert_grad_bytes / expert_shard, replicas,
                                                e_stride * expert_shard, cluster, eff)
    else:
        e_rs = e_ar = e_ag = 0.0
    cross = np.where(zero >= 1, cross, 0.0)
    per_mb_grads = _grads_reduced_every_microbatch(batch, zero)
    # a ZeRO-2 / ZeRO-3 stage gathered once a step reduces its whole gradients once, as the
    # stack's ZeRO-3 reduces (``fsdp_once_per_step``: the same FSDP post-backward for both)
    z3_once = fsdp_once_per_step(batch)
    zero3 = np.where(batch.zero3_grad_all_reduce, grad_ar + e_ar, grad_rs + e_rs)
    grad_comm = np.where(per_mb_grads | (zero >= 2), 0.0,
                         grad_collective_s(zero, batch.zero1_grad_all_reduce, grad_rs + e_rs, grad_ar + e_ar,
                                           batch.offload_optimizer_fraction))
    grad_comm = np.where(z3_once, zero3, grad_comm) + cross
    # (FSDP's ZeRO-2 gathers in every micro-batch's forward instead, ``z2_regathers``)
    gather_comm = np.where((zero == 1) | ((zero == 2) & ~z2_regathers(batch, zero)) | z3_once, param_ag + e_ag, 0.0)
    # the last bucket starts only when the backward has produced it: its share of the traffic
    # (an unbucketed stack reduces everything in one collective after the backward)
    bucket_elements = np.maximum(batch.grad_bucket_elements, batch.grad_bucket_elements_per_dp * dp_group)
    total_elements = np.maximum(params_dp + expert_dp, 1.0)
    bucket_share = np.where(bucket_elements > 0, np.minimum(bucket_elements / total_elements, 1.0), 1.0)
    # the first and the last stage are (pp - 1) x tp x cp x dp ranks apart (tp-cp-dp-pp order)
    apart = first_last_stage_stride(tp * cp * dp, pp, cluster.gpus_per_node)
    tied = 0.0 * np.asarray(grad_comm, dtype=float)
    if model.tied_embeddings and np.any(pp > 1):
        tied = tied + np.where(pp > 1, tied_embedding_all_reduce_s(model, tp, batch.grad_reduce_bytes,
                                                                   apart, cluster, eff), 0.0)
    # DualPipe: the rank's gradients after the data-parallel reduction (whole at ZeRO-0, its
    # shard at ZeRO >= 1, which is all its optimizer step reads) are summed with the mirror rank's
    reduced = (np.where(zero >= 1, grad_bytes / shard, grad_bytes)
               + np.where(zero >= 1, expert_grad_bytes / expert_shard, expert_grad_bytes))
    pair = np.where(batch.schedule == _DUALPIPE,
                    dualpipe_pair_all_reduce_s(reduced, apart, cluster, eff), 0.0)
    return grad_comm, gather_comm, bucket_share, tied + pair


def first_last_stage_stride(stage_width, pp, gpus_per_node):
    """The stride to place a pair of ranks on, one on the first pipeline stage and its peer
    ``(pp - 1) x stage_width`` ranks further on the last (``stage_width`` = tp x cp x dp ranks a
    stage, tp-cp-dp-pp order), for ``topology.group_collective_time_s`` (numpy-friendly).

    Stage k holds ranks [k w, (k + 1) w), so the pairs are (r, r + (pp - 1) w) for r < w. When
    the whole job, w x pp ranks, fits in one scale-up domain, every pair is inside it; the strided
    placement would count one member per domain for a stride between half a domain and a domain
    (ranks 0 and 7 of an 8-GPU node: the tied embedding's all-reduce of a pp 8 run priced on the
    NIC, 11x its NVLink time), so such a pair is given stride 1. Otherwise the pair of r = w - 1
    (or, for w >= a domain, every pair) crosses domains, and the stride (above half a domain)
    says so."""
    w, pp = np.asarray(stage_width, dtype=float), np.asarray(pp, dtype=float)
    return end_pair_stride(w * pp, w * (pp - 1.0), gpus_per_node)


def end_pair_stride(group_ranks, ranks_apart, gpus_per_node):
    """The stride to place a first-stage / last-stage rank pair on (``first_last_stage_stride``,
    the pooled model's tied embedding): 1 where the pipeline's ``group_ranks`` fit in one scale-up
    domain (every pair inside it), else the pair's ``ranks_apart`` (numpy-friendly)."""
    return np.where(np.asarray(group_ranks) <= gpus_per_node, 1.0, np.asarray(ranks_apart, dtype=float))


def dualpipe_pair_all_reduce_s(grad_bytes, ranks_apart, cluster: ClusterSpec, eff: EfficiencyModel):
    """Seconds of DualPipe's exchange of its two model copies' gradients, once per step after the
    data-parallel reduction. Pipeline rank r holds stage r of one copy and stage p-1-r of the
    other, so each stage's gradient is split between ranks r and p-1-r and the two are summed
    before the optimizer step (deepseek-ai/DualPipe@030ce4325f examples/example_dualpipe.py
    168-177: ``p0.grad += p1all[pp_size - 1 - rank]; p1.grad += p0all[pp_size - 1 - rank]``):
    an all-reduce of the rank's ``grad_bytes`` over the two ranks. The pairs run at once, each on
    its own ranks; the step waits for the farthest, the first and the last pipeline rank,
    ``ranks_apart`` = (pp - 1) x tp x cp x dp apart in the tp-cp-dp-pp order
    (``topology.group_collective_time_s`` decides whether that crosses nodes)."""
    return group_collective_time_s("all_reduce", grad_bytes, DUALPIPE_PAIR_RANKS, ranks_apart, cluster, eff)


#: ranks of one DualPipe gradient exchange: pipeline rank r and its mirror p-1-r
DUALPIPE_PAIR_RANKS = 2.0


#: ranks of one tied-embedding gradient all-reduce: a rank of the first pipeline stage and its
#: peer on the last (Megatron's embedding group, one per pipeline and tensor-parallel rank)
TIED_EMBEDDING_RANKS = 2.0


def tied_embedding_all_reduce_s(model: ModelSpec, tp, grad_reduce_bytes, ranks_apart, cluster: ClusterSpec,
                                eff: EfficiencyModel):
    """Seconds of the tied embedding's gradient all-reduce between the first and the last
    pipeline stage, once per step after the data-parallel reduction (``_dp_after_flush``: Megatron-
    Core ``_allreduce_word_embedding_grads``, DeepSpeed ``allreduce_tied_weight_gradients``): the
    V x h / ``tp`` gradient elements of one GPU in the reduction dtype (``grad_reduce_bytes`` per
    element), over the ``TIED_EMBEDDING_RANKS`` ranks ``ranks_apart`` apart on ``cluster``
    (``topology.group_collective_time_s``). Meaningful only for a model with
    ``tied_embeddings`` split over more than one stage; the caller masks the rest."""
    nbytes = params.embedding_params(model) / tp * grad_reduce_bytes
    return group_collective_time_s("all_reduce", nbytes, TIED_EMBEDDING_RANKS, ranks_apart, cluster, eff)


def after_flush_tail_shares(model: ModelSpec, sp_: dict, tp, batch: ConfigBatch, bucket_share):
    """(gradient, gather) shares of the after-flush traffic (``_dp_after_flush``) that no compute
    window can hide, the rest hiding under the first stage's last backward / first forward as far
    as the stack overlaps them: the last bucket's share (``bucket_share``); for a ZeRO-2 / ZeRO-3
    stage gathered once a step (``fsdp_once_per_step``) the whole reduce-scatter, which runs after
    the micro-batch loop and overlaps nothing, and the first blocks' gathers
    (``_first_blocks_share``). ``evaluate`` and the planner's floor (``step_bounds``) both take
    them from here, so the floor stays below the step."""
    once = fsdp_once_per_step(batch)
    return np.where(once, 1.0, bucket_share), np.where(once, _first_blocks_share(model, sp_, tp), bucket_share)


def _first_blocks_share(model: ModelSpec, sp_: dict, tp):
    """Share of the first stage's parameters in its first FSDP blocks, the embedding's and the
    first layer's: their gathers start the step with no compute before them to hide under."""
    first_layer = np.where(model.num_dense_layers > 0, sp_["dense_layer"], sp_["moe_layer"] + sp_["expert_layer"])
    blocks = params.embedding_params(model) / tp + first_layer
    return np.minimum(blocks / np.maximum(sp_["first"] + sp_["first_expert"], 1.0), 1.0)


def adam_step_bytes_per_param(dtype: str, moment_bytes=4.0, grad_buffer_bytes=MAIN_GRAD_BYTES,
                              master_weight_bytes=4.0):
    """HBM bytes the optimizer step moves per local parameter (numpy-friendly in
    ``moment_bytes`` and ``grad_buffer_bytes``): ``ADAM_STEP_BYTES_PER_PARAM`` in mixed precision,
    the fp16 figure with its unscaling, the fp32 one for fp32 and tf32 (the weights are the master
    copy), less ``ADAM_MOMENT_ACCESSES`` x 2 bytes for 16-bit moments.

    Those figures hold for an fp32 gradient buffer (``grad_buffer_bytes`` 4). A narrower buffer
    (``ParallelConfig.grad_buffer_bytes`` 2: Megatron-LM 2021/2022 fp16 without
    ``accumulate_allreduce_grads_in_fp32``, Megatron-Core DDP without ``grad_reduce_in_fp32``) is
    cast into a new fp32 main gradient before the step, read ``grad_buffer_bytes`` and write
    ``MAIN_GRAD_BYTES`` (NVIDIA/Megatron-LM@d898a8991d megatron/optimizer/optimizer.py
    Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads:
    ``main_param.grad = model_param.main_grad.float()``, a no-op alias on an fp32 buffer; the
    distributed optimizer alike on its shard, NVIDIA/Megatron-LM@core_v0.14.0
    megatron/core/optimizer/distrib_optimizer.py ``_copy_model_grads_to_main_grads``:
    ``shard_main_param.grad = shard_model_grad.float()``), and zeroing the buffer for the next
    step (megatron/model/distributed.py ``zero_grad_buffer``) writes ``grad_buffer_bytes``, not 4
    (the fp32 copy is freed, ``zero_grad(set_to_none=True)``): 50 - 4 + 2 + 6 = 54 bytes in fp16,
    46 in bf16.

    DeepSpeed's fp16 ZeRO-1/2 keeps 16-bit gradients too but steps them otherwise
    (microsoft/DeepSpeed@v0.7.0 deepspeed/runtime/zero/stage_1_and_2.py ``step``: an overflow check
    ``x.float().sum()``, a norm over ``g.double()``, flatten then ``.to(fp32)``, ``mul_`` unscale, no
    buffer to zero: about 80 bytes); it is priced here at the Megatron count, a lower bound.

    ``master_weight_bytes`` (``ParallelConfig.master_weight_bytes``): the master copy's bytes, 4
    (``ADAM_MASTER_BYTES_FP32`` of the figures above), 2 (``ADAM_MASTER_BYTES_REMAINDER``; a bf16
    master beside FP8 primary weights is counted the same, 8 where its kernel moves 2 + 2 + 1) or 0
    (``ADAM_MASTER_BYTES_NONE``); fp32 / tf32 training has none beside its weights (unchanged)."""
    base = {"fp32": ADAM_STEP_BYTES_PER_PARAM_FP32, "tf32": ADAM_STEP_BYTES_PER_PARAM_FP32,
            "fp16": ADAM_STEP_BYTES_PER_PARAM_FP16}.get(dtype, ADAM_STEP_BYTES_PER_PARAM)
    buffer = np.asarray(grad_buffer_bytes, dtype=float)
    cast = np.where(buffer < MAIN_GRAD_BYTES, buffer + MAIN_GRAD_BYTES, 0.0)
    zeroing = buffer - MAIN_GRAD_BYTES
    master = np.asarray(master_weight_bytes, dtype=float)
    master_saving = np.where(master >= 4.0, 0.0, ADAM_MASTER_BYTES_FP32
                             - np.where(master > 0.0, ADAM_MASTER_BYTES_REMAINDER, ADAM_MASTER_BYTES_NONE))
    if dtype in ("fp32", "tf32"):
        master_saving = 0.0 * master
    return (base - ADAM_MOMENT_ACCESSES * (4.0 - np.asarray(moment_bytes, dtype=float)) + cast + zeroing
            - master_saving)


def _optimizer_step_s(cluster: ClusterSpec, eff: EfficiencyModel, batch: ConfigBatch, memory_by_part: dict, shard,
                      expert_shard):
    """(seconds of the optimizer step on the GPU, parameters it updates, offloaded fraction)."""
    gpu = cluster.gpu
    zero = batch.zero_stage
    params_local = memory_by_part["params_local"]
    expert_local = memory_by_part["expert_params_local"]
    opt_params = params_local / np.where(zero >= 1, shard, 1.0) + expert_local / np.where(zero >= 1, expert_shard, 1.0)
    adam_bytes = adam_step_bytes_per_param(batch.dtype, optimizer_moment_bytes(batch), batch.grad_buffer_bytes,
                                           batch.master_weight_bytes)
    opt_fraction = eff.optimizer_hbm_fraction or eff.hbm_fraction
    off = np.asarray(batch.offload_optimizer_fraction, dtype=float)
    optimizer = (1.0 - off) * opt_params * adam_bytes / (gpu.hbm_bw_bytes_per_s * opt_fraction)
    return optimizer, opt_params, off


def _layer_times(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, rates, batch: ConfigBatch, tokens):
    """``layer_times`` of every row, evaluated once per run of equal layer keys."""
    dp, tp, pp, cp, ep, etp, vpp = _degrees(batch)
    return _once_per_run(batch, LAYER_KEY_FIELDS, partial(layer_times, model, cluster, eff, rates),
                         tokens, tp, cp, batch.sequence_parallel, batch.recompute, ep, etp, batch.moe_load_imbalance,
                         batch.tp_comm_overlap, batch.cp_kind, batch.attention_kernel, batch.flash_attention,
                         batch.ep_comm_overlap, batch.tp_backward_overlap, batch.softmax_fusion, batch.cuda_graphs,
                         batch.recompute_modules, batch.ep_dispatch_dedup, batch.fp8_current_scaling,
                         batch.attention_unpad, batch.glu_clamp_eager, batch.grouped_gemm_streams,
                         batch.cross_entropy, batch.softmax_scale_pass, batch.selective_modules,
                         batch.unfused_block_ops, batch.yarn_rope_eager, batch.cp_allgather_saves_kv,
                         batch.ep_carved_from_dp, batch.nvfp4_rht_cast_fusion, batch.expert_output_bias)


def _optimizer_offload_s(cluster: ClusterSpec, batch: ConfigBatch, params_offloaded, grad_window_s,
                         exposed_grad_s=0.0):
    """Exposed seconds per step of the optimizer share kept on the host: the gradients' copy
    beyond the last backward, the host's Adam step (at the memory bandwidth of the hosts the
    job's GPUs on a node sit on, shared by those GPUs: ``ConfigBatch.host_share_of_node``,
    ``gpus_on_a_node``), the weights' copy back (``ConfigBatch.offload_weight_bytes`` a
    parameter, the stack's).

    The copy hides under the same backward window as the data-parallel gradient reduction
    (``exposed_grad_s`` is what of that reduction the window leaves exposed): a bucket goes to
    the host once it is reduced, on the host link's copy engine while the next bucket reduces, so
    after the last backward the two tails run side by side and the step pays the longer one,
    max(reduction tail, copy tail), not their sum (which counted the window twice: a longer
    backward, e.g. from recomputation, shortened both tails and made the step faster)."""
    if not np.any(np.asarray(batch.offload_optimizer_fraction) > 0):
        return 0.0 * np.asarray(params_offloaded, dtype=float)
    host = cluster.host
    if host is None or host.memory_bw_bytes_per_s is None:
        raise InputError("offload_optimizer_fraction", f"cluster {cluster.name} states no host memory bandwidth "
                         "for the host's optimizer step", "add host: {memory_bw_gb_per_s: ...} to the cluster YAML")
    step = offload.optimizer_offload_step(params_offloaded, GRAD_BUFFER_BYTES, _link_bw(cluster, batch),
                                          host.memory_bw_bytes_per_s
                                          * batch.host_share_of_node(cluster.gpus_per_node, cluster.gpus_per_host)
                                          / batch.gpus_on_a_node(cluster.gpus_per_node),
                                          np.asarray(batch.offload_weight_bytes, dtype=float))
    copy_tail = np.maximum(step["grads_to_host_s"] - grad_window_s, 0.0)
    return (np.maximum(copy_tail - exposed_grad_s, 0.0) + step["host_step_s"]
            + step["weights_to_gpu_s"])


def _moe_param_tensors(model: ModelSpec, ep):
    """Weight tensors of one MoE layer on a GPU: router + two matrices per local (routed, shared)
    expert, besides the attention's and the norms'."""
    if model.moe is None:
        return DENSE_LAYER_PARAM_TENSORS + 0.0 * np.asarray(ep, dtype=float)
    return (DENSE_LAYER_PARAM_TENSORS - 1 + 2.0 * model.moe.num_experts / np.asarray(ep, dtype=float)
            + 2.0 * (model.moe.num_shared_experts > 0))
