"""One parallel configuration (the plan the user runs), validated on construction."""
from __future__ import annotations

import math

from dataclasses import dataclass, fields
from enum import Enum

import numpy as np

from cost_models.memory import RECOMPUTE_MODULES
from hardware_specs.errors import InputError, as_float, as_given, shown
from hardware_specs.gpu_spec import KNOWN_DTYPES
from hardware_specs.stack_spec import (CROSS_ENTROPY_IMPLS, EXPERT_OUTPUT_BIAS_IMPLS, check_grouped_gemm_streams,
                                       feature_names)


class Recompute(str, Enum):
    """Activation recomputation (Korthikanti et al. 2022, section 5)."""

    NONE = "none"
    SELECTIVE = "selective"   # recompute the attention core only
    FULL = "full"             # store only each layer's input, recompute the whole layer


class RecomputeMethod(str, Enum):
    """Which layers a full recomputation with ``recompute_num_layers`` N covers (Megatron
    ``--recompute-method``)."""

    BLOCK = "block"       # the first N layers of each model chunk, the rest keep their activations
    UNIFORM = "uniform"   # every layer, in groups of N: only each group's input is kept




class Schedule(str, Enum):
    """Pipeline schedule."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"     # interleaved 1F1B (Narayanan et al. 2021), needs vpp > 1
    ZB_H1 = "zb-h1"
    ZB_H2 = "zb-h2"
    ZB_V = "zb-v"
    DUALPIPE = "dualpipe"


class CPKind(str, Enum):
    """Context-parallel attention flavour."""

    RING = "ring"          # P2P of K/V blocks overlapped with attention (ring attention)
    ULYSSES = "ulysses"    # all-to-all over heads (DeepSpeed-Ulysses)
    HYBRID = "hybrid"      # Ulysses inside the scale-up domain, ring across
    ALLGATHER = "allgather"  # all-gather K/V, local queries' attention (Llama 3, arXiv 2407.21783 3.3.2)


class AttentionKernel(str, Enum):
    """How the fused attention kernel schedules the softmax against its matmuls."""

    AUTO = "auto"            # the GPU generation's usual fused kernel (EfficiencyModel.exposed_softmax_fraction)
    SERIAL = "serial"        # softmax between the two matmuls of a tile (FlashAttention-2)
    PIPELINED = "pipelined"  # softmax of one tile under another's matmuls (FlashAttention-3)


def _enum(enum_cls, value, field):
    if isinstance(value, enum_cls):
        return value
    try:
        return enum_cls(str(value).lower())
    except ValueError:
        raise InputError(field, f"unknown value {value!r}",
                         "choose one of " + ", ".join(e.value for e in enum_cls)) from None


#: largest parallel degree, and largest product dp*tp*pp*cp: 2**24 (16.8 million) GPUs, over a
#: hundred times the largest training clusters built (~100k GPUs, 2024); a larger value is a
#: typo, and bounding it keeps every count exact in int64 and every time finite in float64
MAX_GPUS = 2**24
#: largest global batch in sequences (about 10**12; a 16M-token batch of 8k sequences is 2**11)
MAX_GLOBAL_BATCH = 2**40
#: largest ratio of the busiest expert's tokens to the mean (a ratio is at most experts / top_k;
#: ``validate_config.check_config`` applies that bound for the model at hand)
MAX_MOE_LOAD_IMBALANCE = 2**20

#: switches of ``ParallelConfig`` (each must be a real bool: the string "false" is truthy)
BOOL_FIELDS = ("sequence_parallel", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
               "flash_attention", "grad_accumulation_fusion", "uneven_layers", "zero3_recompute_gather",
               "ep_comm_overlap", "ep_dispatch_dedup", "grad_reduce_every_microbatch", "tp_backward_overlap", "softmax_fusion",
               "softmax_scale_pass", "attention_unpad", "glu_clamp_eager", "unfused_block_ops", "yarn_rope_eager", "pipe_exchange_blocking",
               "pipeline_p2p_overlap", "pipeline_scatter_gather",
               "param_gather_per_tensor", "cuda_graphs", "fp8_current_scaling", "collective_per_rank_copies",
               "zero3_grad_all_reduce", "zero1_grad_all_reduce", "fp8_param_gather", "zero3_master_params",
               "moments_in_param_dtype", "nvfp4_rht_cast_fusion", "moe_probs_in_expert", "ep_carved_from_dp",
               "zero3_once_per_step", "kv_head_replication", "zero2_grad_last_microbatch",
               "zero2_gather_every_microbatch", "cp_allgather_saves_kv")
#: non-negative integer fields (0 = not set)
LAYOUT_FIELDS = ("first_stage_layers", "last_stage_layers", "recompute_num_layers", "recompute_layers_decrement",
                 "offload_activation_layers", "zero_shard_group", "loss_chunk_tokens")
#: largest value of a ``LAYOUT_FIELDS`` entry: above any layer count, data-parallel group or
#: token chunk a run has, and within the int64 columns of ``ConfigBatch`` (2**63 overflowed them)
MAX_LAYOUT_VALUE = 2**40


def _modules(value, field: str = "recompute_modules") -> tuple[str, ...]:
    """``recompute_modules`` (or ``field``) as a sorted tuple of known names (a comma list or an
    iterable)."""
    if value is None:
        return ()
    if not isinstance(value, str) and not hasattr(value, "__iter__"):
        raise InputError(field, f"must be a comma list or a list of module names, got {shown(value)}",
                         "e.g. 'core_attn,mlp'")
    items = value.split(",") if isinstance(value, str) else list(value)
    names = []
    for item in items:
        name = str(item).strip().lower()
        if not name:
            continue
        if name not in RECOMPUTE_MODULES:
            raise InputError(field, f"unknown module {item!r}",
                             "choose from " + ", ".join(RECOMPUTE_MODULES))
        names.append(name)
    return tuple(m for m in RECOMPUTE_MODULES if m in names)


@dataclass(frozen=True)
class ParallelConfig:
    """How one training step is split over the GPUs.

    Degrees multiply to the GPU count: ``dp * tp * pp * cp`` (expert parallelism ``ep`` folds
    into ``dp * cp`` for the MoE layers, as in Megatron-Core's MoE parallel folding; expert
    tensor parallelism ``etp`` defaults to 1).

    Attributes:
        dp, tp, pp, cp, ep, etp: data, tensor, pipeline, context, expert, expert-tensor degrees.
        vpp: virtual pipeline stages (model chunks) per pipeline rank; > 1 means interleaved.
        micro_batch: sequences per micro-batch (per data-parallel rank).
        global_batch: sequences per optimizer step (whole job).
        zero_stage: 0 (DDP), 1 (optimizer states sharded over dp), 2 (+ gradients), 3 (+ params).
        recompute: activation recomputation.
        sequence_parallel: Megatron sequence parallelism alongside TP.
        dtype: GEMM dtype (``bf16``, ``fp16``, ``fp8``, ``mxfp8``, ``nvfp4``, ``fp32``).
        schedule: pipeline schedule; ``interleaved`` is chosen automatically when vpp > 1.
        overlap_grad_reduce: DP gradient reduction overlaps the backward pass.
        overlap_param_gather: ZeRO-3 parameter all-gathers are prefetched under compute.
        tp_comm_overlap: force TP collectives to overlap the GEMMs (userbuffers / async TP);
            off = exposed, except the backward collectives with ``tp_backward_overlap``.
        cp_kind: context-parallel flavour.
        attention_kernel: how the fused attention kernel meets the softmax exponentials
            (``cost_models.compute.attention_time_s``): ``auto`` = the GPU generation's usual
            stack; ``serial`` adds them to the matmul time (FlashAttention-2, e.g. llm-foundry);
            ``pipelined`` hides them while the matmuls last (FlashAttention-3).
        moe_load_imbalance: ratio of the busiest EP rank's routed rows to the mean over the EP group
            (1 = uniform; ``cost_models.moe._rank_imbalance``): capped at the model's capacity factor,
            ignored at ep = 1 (every expert local, its row count exact).
        flash_attention: fused attention core (no stored score matrix); False models the
            materialised softmax of 2020-2022 Megatron.
        grad_accumulation_fusion: the weight-gradient GEMM accumulates into the gradient
            buffer in place (Megatron's ``--gradient-accumulation-fusion``, on by default there
            and in NeMo); False = autograd writes each micro-batch's weight gradient to a fresh
            tensor and adds it to the buffer, an extra memory-bound pass per micro-batch
            (plain PyTorch DDP, the measured runner).
        uneven_layers: allow a layer count that does not divide over the pipeline's positions:
            every position holds ceil(layers / positions) except that the shortfall is taken
            from the first and last stages inwards (``simulator.stage_layout``), as published runs
            lay such models out (Llama 3 405B: 126 layers on 16 stages as 7, 8 x 14, 7).
        first_stage_layers, last_stage_layers: layers on the first / last pipeline stage
            (Megatron ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-...``); 0 = not
            set (an even split). The other stages share the rest evenly.
        ep_comm_overlap: the expert-parallel all-to-alls overlap compute (DeepEP, Megatron
            ``--overlap-moe-expert-parallel-comm``); off = on the critical path.
        ep_dispatch_dedup: the expert dispatcher sends a token once per destination GPU and
            node, forwarding inside the node (DeepEP / HybridEP, Megatron's ``flex``
            dispatcher; ``cost_models.moe.deduplicated_dispatch_volumes``); off = one row per
            (token, expert) pair (Megatron's ``alltoall`` dispatcher).
        grad_reduce_bytes: bytes per gradient element in the data-parallel reduction: 4 (fp32
            main gradients, Megatron-Core and FSDP's usual ``reduce_dtype``) or 2 (reduced in
            the 16-bit training dtype: DeepSpeed fp16, Megatron-LM fp16 before 2022).
        grad_bucket_elements, grad_bucket_elements_per_dp: the overlapped DP reduction's bucket,
            ``max(grad_bucket_elements, grad_bucket_elements_per_dp * dp)`` gradient elements
            (Megatron-Core: max(40e6, 1e6 dp)); the last bucket can only start once the backward
            is over, so its reduction stays exposed. 0 = not bucketed: one reduction after the
            backward.
        grad_reduce_every_microbatch: plain DP / ZeRO-1 gradients are reduced after every
            micro-batch's backward (PyTorch DDP without ``no_sync``) instead of once per step;
            only without a pipeline (pp 1): a pipeline runtime reduces on the last backward.
        param_prefetch_forward, param_prefetch_backward: ZeRO-3 / FSDP layers whose parameter
            gathers run ahead of the computing layer in each pass (1 = the next layer's gather
            under this layer's compute; 0 = every gather exposed).
        param_prefetch_max_elements: cap on prefetched parameter elements (DeepSpeed
            ``stage3_prefetch_bucket_size``); 0 = none.
        param_gather_per_tensor: ZeRO-3 gathers each parameter tensor of a layer in its own
            collective and reduce-scatters each tensor's gradient in its own (DeepSpeed 0.3: one
            ``all_gather`` and one ``reduce_scatter`` per parameter), paying the ring's start-up
            steps once per tensor; off = one collective per layer (FSDP's flat parameter).
        zero3_persistence_elements: ZeRO-3 parameter tensors smaller than this many elements
            (per rank after tensor parallelism) stay whole on every rank: no gather per use, one
            gather of them all after each optimizer step (DeepSpeed
            ``stage3_param_persistence_threshold``); 0 = every tensor is gathered per use.
        collective_per_rank_copies: every ZeRO all-gather / reduce-scatter is handed a list of
            one tensor per rank, which PyTorch's ProcessGroupNCCL (before ``_all_gather_base``)
            flattens and copies back one kernel per rank: ``n`` copy kernels of
            ``EfficiencyModel.kernel_overhead_s`` per call (DeepSpeed 0.3); off = one flat buffer.
        zero3_grad_all_reduce: under ZeRO-3 each rank all-reduces its fp16 gradients one reduce
            bucket (``grad_bucket_elements``) at a time and keeps its shard (DeepSpeed 0.3's
            default ``reduce_scatter: false``); off = reduce-scattered.
        zero2_grad_last_microbatch: ZeRO-2 keeps the whole gradient buffer until the last
            micro-batch and reduce-scatters it there (the stack's ``zero2_grad_reduce``
            ``last_microbatch``: a stack whose only gradient sharding is a distributed optimizer,
            Megatron-LM 2019-2022, Megatron-Core 0.8-0.12, NeMo 24): ZeRO-1's model states and traffic; off = the
            gradients are reduce-scattered to their shards after every micro-batch's backward
            (DeepSpeed stage 2, FSDP SHARD_GRAD_OP, Megatron-FSDP ``optim_grads``).
        zero2_gather_every_microbatch: ZeRO-2 keeps the parameters sharded at rest and gathers
            them again for every micro-batch's forward, layer by layer under the passes as ZeRO-3's
            forward gathers (FSDP ``SHARD_GRAD_OP``, FSDP2 ``reshard_after_forward=False``:
            resharded after each backward); off = the 16-bit parameters stay whole and the updated
            shards are all-gathered once, after the optimizer step (DeepSpeed stage 2,
            Megatron-FSDP ``optim_grads``). Set by the stack (``TrainingBehaviour.
            zero2_gather_every_microbatch``); not read where the stack gathers once a step under a
            pipeline (``zero3_once_per_step``) or prices ZeRO-2 as ZeRO-1.
        cp_allgather_saves_kv: all-gather CP (``cp_kind`` allgather, cp > 1) keeps the gathered K/V
            for backward (``cp`` x the local K/V, an activation of every layer in flight; backward
            only reduce-scatters dK/dV; a layer recomputed in full re-gathers in its recomputed
            forward); off = backward all-gathers K/V again from the saved local chunk. Set by the
            stack (``TrainingBehaviour.cp_allgather_backward`` ``saved``).
        zero3_once_per_step: with pipeline parallelism (pp > 1) ZeRO-3 gathers each stage's
            parameters once a step, at the stage's first forward, keeps them whole, accumulates
            whole gradients and reduce-scatters them once after the stage's last backward
            (torchtitan under ``torch.distributed.pipelining``; the stack's
            ``zero3_under_pipeline``): ZeRO-1's model states and traffic, the reduce-scatter
            exposed after the flush. ZeRO-2 (FSDP without the reshard after forward) runs the
            same way there, one reduce-scatter after the flush instead of one per micro-batch
            (the runtime turns the gradient sync off for every backward but the last), so the
            field covers it too. Off, or pp = 1: per layer and micro-batch as FSDP runs
            without a pipeline.
        zero1_grad_all_reduce: under ZeRO-1 the gradients are all-reduced whole after the last
            micro-batch (DeepSpeed's BF16_Optimizer; ``stack_defaults`` sets it for a bf16 run of a
            stack whose ``bf16_zero1_grad_reduce`` says so) before each rank steps its shard and
            all-gathers the weights; off = reduce-scattered (Megatron-Core's distributed optimizer).
            Not with optimizer offload (``offload_optimizer_fraction`` > 0): DeepSpeed then builds its
            ZeRO-1 optimizer, which reduce-scatters (``step_model.zero1_reduces_whole``).
        cuda_graphs: each pass is replayed from a captured CUDA graph, so the host issues no
            kernels one by one (``EfficiencyModel.cpu_issue_s`` does not bound it).
        fp8_current_scaling: an ``fp8`` run scales each tensor by its current amax (Transformer
            Engine ``Float8CurrentScaling``, Megatron ``--fp8-recipe tensorwise``): every
            quantisation reads the tensor once more for its amax and streams it in two kernels,
            amax and cast (``cost_models.low_precision.QUANTISE_KERNELS``; the one-thread scale
            launches between them are not priced, ``SCALAR_QUANTISE_KERNELS``); off = delayed
            scaling (one kernel, the amax from history). Ignored for other dtypes.
        tp_backward_overlap: the backward TP collectives of the column-parallel linears run under
            the weight- and data-gradient GEMMs (Megatron-LM since 2021-08, Transformer Engine);
            off = exposed. The row-parallel output gradient's all-gather (sequence parallelism)
            stays exposed either way: its GEMMs wait for it.
        softmax_fusion: the materialised attention's scale, mask and softmax are one kernel
            (Megatron v2.0+); off = three memory passes (2019-2020).
        softmax_scale_pass: fp32 scores of a materialised core (which never take the fused
            kernel) are scaled by their own op before the mask (Megatron's
            ``FusedScaleMaskSoftmax`` with a scale, e.g. under ``apply_query_key_layer_scaling``);
            off = no scale op, the mask's ``masked_fill_`` runs in place on the score GEMM's output
            and its backward pays autograd's ``CopySlices`` copies
            (``cost_models.compute.FP32_MASK_BWD_ON_VIEW_BYTES``). No effect on 16-bit scores.
        pipe_exchange_blocking: at a stage boundary the stage's send and its receive of the
            other direction (activation one way, gradient the other) are separate blocking
            ``send``/``recv`` calls one after the other, so each crossing costs two transfers
            (DeepSpeed's pipeline engine: ``TrainSchedule`` pairs ``SendGrad`` with
            ``RecvActivation`` and ``RecvGrad`` with ``SendActivation`` in one step, and
            ``deepspeed/runtime/pipe/p2p.py`` ``send``/``recv`` call ``dist.send``/``dist.recv``);
            off = the two directions in one batched exchange (Megatron-LM's
            ``send_forward_recv_backward``, ``batch_isend_irecv``), one transfer a crossing.
        pipeline_p2p_overlap: under the interleaved schedule (vpp > 1) a stage's sends and
            receives run in the background while its next model chunk computes (Megatron-LM's
            ``overlap_p2p_comm``), so a send costs only what it takes beyond its chunk's pass;
            other schedules and off: each send is paid in full
            (``TrainingBehaviour.pipeline_p2p_overlap``).
        pipeline_scatter_gather: without sequence parallelism a stage boundary's tensor is sent as
            1/tp slices, one per tensor-parallel rank, and all-gathered over the receiver's
            tensor-parallel group (Megatron-LM 2021-2022's default scatter/gather, DeepSpeed's
            partitioned pipeline tensors); off = each rank sends the whole [s, b, h] tensor
            (Megatron-Core). With sequence parallelism the tensor is 1/tp of the sequence either
            way (``TrainingBehaviour.pipeline_scatter_gather``).
        attention_unpad: the stack copies the attention core's query, key and value rows into
            packed (unpadded) tensors and scatters its output back, forward and backward
            (llm-foundry's flash path; ``layer_costs.unpad_copy_bytes``).
        unfused_block_ops: RoPE, the grouped-query key/value repetition, the attention output's
            layout copy and the gated MLP's product run as separate eager PyTorch ops
            (``TrainingBehaviour.unfused_block_ops``; ``layer_costs.UNFUSED_*``).
        yarn_rope_eager: a YaRN model whose concentration factor (mscale) is not 1 has its
            queries and keys rotated by Megatron-Core's eager RoPE instead of the fused kernel
            (``TrainingBehaviour.yarn_rope_eager``; ``layer_costs.eager_yarn_rope``); no effect on
            other models or on multi-latent attention.
        glu_clamp_eager: a clamped GLU (``ModelSpec.glu_clamp_limit``) is clamped by separate
            ops before the activation kernel (Megatron-Core without its op fuser;
            ``moe.glu_clamp_bytes``); no effect on a model without a clamp.
        expert_output_bias: how a biased MoE's routed-expert output bias is added
            (``TrainingBehaviour.expert_output_bias``, one of
            ``hardware_specs.stack_spec.EXPERT_OUTPUT_BIAS_IMPLS``): Megatron-Core's unfused
            ``_apply_bias`` or inside the op fuser's fused grouped MLP (``cost_models.moe``); no
            effect on a model without biases.
        grouped_gemm_streams: how many per-expert GEMMs of a grouped linear run concurrently
            (Transformer Engine's 4 compute streams; ``moe.grouped_gemm_time_s``); 1 = one after
            another.
        cross_entropy: the language-model loss implementation (``TrainingBehaviour.cross_entropy``,
            one of ``hardware_specs.stack_spec.CROSS_ENTROPY_IMPLS``): the HBM bytes per logit the
            loss moves forward and backward (``cost_models.cross_entropy``).
        recompute_num_layers: with ``recompute="full"``, the layers of each model chunk it covers
            (Megatron ``--recompute-num-layers``): ``block`` recomputes the first N layers of
            every chunk and keeps the others' activations; ``uniform`` recomputes every layer
            in groups of N, keeping one input per group. 0 = every layer, one by one.
        recompute_method: ``block`` or ``uniform`` (Megatron ``--recompute-method``).
        recompute_layers_decrement: stage s recomputes ``max(N - s * k, 0)`` layers per chunk
            (NeMo ``activations_checkpoint_layers_per_pipeline`` = k): later stages hold fewer
            micro-batches in flight and need less recomputation. 0 = N on every stage.
        recompute_modules: operations recomputed in every layer not recomputed in full
            (Megatron ``--recompute-modules``, ``RECOMPUTE_MODULES``): ``core_attn`` (the
            attention core: what ``selective`` means when none are named), ``layernorm`` (the
            norms' outputs, i.e. the QKV and MLP inputs), ``mlp_act`` (the MLP activation
            function's output, dense and expert), ``mla_up_proj`` (multi-latent attention's
            up-projected queries, keys and values), ``moe_dispatch`` (the tokens dispatched to
            the experts: permutation and all-to-all again), ``mlp`` (the dense layers' whole MLP
            block, from its input), ``moe`` (the MoE layers' whole block: router, dispatch,
            experts, shared experts, combine), ``every_second_linear`` (torchtitan's per-operation
            policy: every second projection with the RoPE rotation and residual adds between
            them), ``mlp_fc1`` (the dense MLP's input projections and activation, not its output
            projection: MaxText's save-the-projections remat policies). Naming any makes the
            recomputation selective.
        selective_modules: what ``recompute: selective`` recomputes when no ``recompute_modules``
            are named: the software stack's selective checkpointing
            (``TrainingBehaviour.selective_checkpoint``): Megatron's ``("core_attn",)``,
            torchtitan's per-operation policy ``("layernorm", "mlp_act", "every_second_linear")``,
            or MaxText's ``("core_attn", "layernorm", "mlp_fc1")``.
        offload_activation_layers: layers per model chunk whose kept activations are copied to
            host memory after their forward and back before their backward (Megatron /
            Transformer Engine ``--cpu-offloading-num-layers``), over the cluster's host link.
        offload_optimizer_fraction: share of this GPU's optimizer states (fp32 master weights,
            Adam moments) and of the optimizer step kept and run on the host (ZeRO-Offload,
            Megatron ``--optimizer-cpu-offload --optimizer-offload-fraction``): gradients go to
            the host, updated 16-bit weights come back.
        zero_shard_group: hybrid sharding (HSDP): ZeRO shards over groups of this many of the
            dp*cp ranks and replicates across the dp*cp / G groups (torchtitan dp_shard x
            dp_replicate, FSDP HYBRID_SHARD, MiCS); gradients are reduce-scattered in the group
            and all-reduced across groups. 0 = one group of all dp*cp ranks (plain ZeRO).
        pipeline_layout: Megatron's layout string (``--pipeline-model-parallel-layout``, see
            ``simulator.layout_string``): the layers, embedding, MTP modules and loss of every
            pipeline position. Empty = the split of ``first_stage_layers`` / ``last_stage_layers``.
        grad_buffer_bytes: bytes per parameter of the gradient buffer the backward accumulates
            into: 4 (fp32 main gradients) or 2 (the 16-bit parameter dtype: Megatron-Core DDP
            without ``grad_reduce_in_fp32``, whose buffer is ``torch.float if grad_reduce_in_fp32
            else param.dtype``); sharded like the gradients under ZeRO-2/3
            (``cost_models.memory.model_state_bytes``). Memory only.
        offload_weight_bytes: bytes per parameter the host's optimizer step copies back to the GPU
            under optimizer offload (``offload_optimizer_fraction``): 4 where the fp32 values
            cross the host link (Megatron-Core ``HybridDeviceOptimizer``), 2 where the host
            converts them to the 16-bit parameter dtype first (DeepSpeed 0.9+ ZeRO-Offload's
            blocking ``copy_``); the stack's ``TrainingBehaviour.offload_weight_bytes``
            (``simulator.stack_defaults``; 4 for fp32 / tf32 runs). Time only
            (``cost_models.offload.optimizer_offload_step``).
        fp8_param_gather: a low-precision run keeps its layers' compute weights only as the
            recipe's quantised tensors (Megatron ``--fp8-param-gather``): no 16-bit working copy
            (``cost_models.memory.model_state_bytes``); the stacks set it for ``fp8`` and
            ``mxfp8`` runs only (``simulator.stack_defaults``). The distributed optimizer's
            parameter all-gather moves the FP8 bytes (MXFP8's bf16:
            ``step_model.gathered_layer_weight_bytes``); the weights' once-per-step quantisation is
            priced as without it.
        zero3_master_params: at ZeRO-3 the parameter shard is the fp32 master weight, no 16-bit
            shard is kept (PyTorch FSDP with a mixed-precision ``param_dtype``;
            ``cost_models.memory.model_state_bytes``); set by the stack. Memory only.
        master_weight_bytes: bytes per parameter of the optimizer's master copy beside the
            16-bit weight: 4 (an fp32 copy), 2 (Apex's bf16 remainder, or a bf16 copy beside FP8
            primary weights), 0 (an optimizer in the weights' own dtype); set by the stack
            (``simulator.stack_defaults.master_weight_fields``). Memory and the optimizer step's
            bytes (``step_model.adam_step_bytes_per_param``); fp32 / tf32 runs ignore it.
        moments_in_param_dtype: the Adam moments are kept in the 16-bit weights' dtype (2 bytes)
            whatever ``optimizer_moment_bytes`` says (NeMo's ``optim.dtype: bf16``); set by the
            stack.
        nvfp4_rht_cast_fusion: an ``nvfp4`` run's activations and gradients are quantised into
            their row-wise and Hadamard-transformed column-wise copies by one kernel after the
            amax kernel (Transformer Engine >= 2.14), not by two casts (``layer_costs.
            linear_cast_bytes``); set by the stack. Time only.
        moe_probs_in_expert: the router probabilities scale the experts' activation output inside
            the expert (Megatron-Core >= 0.13), so the combine keeps no copy of the expert outputs
            (``cost_models.moe.moe_activation_bytes_per_layer``); set by the stack. Memory only.
        ep_carved_from_dp: the expert-parallel groups are carved out of data parallelism in the
            dense rank order tp-cp-ep-dp-pp (Megatron-Core <= 0.9, ``parallel_state``
            RankGenerator at core_r0.9.0), so an EP group's members are ``tp * cp`` ranks apart
            (with tp 4, cp 2 on 8-GPU nodes: one per node, every all-to-all over the NICs);
            False: MoE parallel folding (Megatron-Core >= 0.10's separate expert RankGenerator
            tp=etp, ep, dp), members ``etp`` ranks apart (``cost_models.moe``).
        kv_head_replication: the software stack replicates key/value heads over tensor-parallel
            ranks, so tp may be a multiple of the model's key/value heads (each rank holds one
            whole head); False = tp must divide them (Megatron-Core <= 0.15 asserts
            ``num_query_groups % tp == 0``), checked by ``validate_config.check_config``. Set by
            the stack (``TrainingBehaviour.kv_head_replication``); the K/V cost of tp > kv heads
            is priced replicated either way (``cost_models.params.kv_heads_per_tp_rank``).
        stack_lacks: what the software stack cannot run (``TrainingBehaviour.lacks``, names of
            ``hardware_specs.stack_spec.STACK_FEATURES``): ``validate_config.check_config``
            refuses a plan that uses one (``simulator.stack_support``). Set by the stack; read
            by no cost.
        optimizer_moment_bytes: bytes per element of each Adam moment: 4 (fp32) or 2 (BF16
            moments: DeepSeek-V3 report section 3.3.2, Megatron's precision-aware optimizer
            ``--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16``); the master weights stay fp32.
        loss_chunk_tokens: the loss is computed over chunks of this many tokens, so only one
            chunk's logits exist at a time (chunked / fused linear cross-entropy); 0 = all the
            micro-batch's logits at once.
        zero3_recompute_gather: under ZeRO-3 with full recomputation, the recompute forward
            gathers each layer's parameters again (3 gathers + 1 reduce-scatter per layer and
            micro-batch instead of 2 + 1). DeepSpeed's ZeRO-3 does this: its per-module hooks
            release the parameters after every forward, the recompute forward included, and the
            backward hook gathers them anew. PyTorch FSDP with the checkpoint inside the wrapped
            block does not (the pre-backward gather serves the recompute and the backward): the
            default.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    vpp: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    zero_stage: int = 0
    recompute: Recompute = Recompute.NONE
    sequence_parallel: bool = False
    dtype: str = "bf16"
    schedule: Schedule = Schedule.ONE_F_ONE_B
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: bool = False
    cp_kind: CPKind = CPKind.RING
    attention_kernel: AttentionKernel = AttentionKernel.AUTO
    moe_load_imbalance: float = 1.0
    flash_attention: bool = True
    grad_accumulation_fusion: bool = True
    uneven_layers: bool = False
    zero3_recompute_gather: bool = False
    first_stage_layers: int = 0
    last_stage_layers: int = 0
    ep_comm_overlap: bool = False
    ep_dispatch_dedup: bool = False
    grad_reduce_bytes: float = 4.0
    grad_bucket_elements: float = 40e6
    grad_bucket_elements_per_dp: float = 1e6
    grad_reduce_every_microbatch: bool = False
    param_prefetch_forward: float = 1.0
    param_prefetch_backward: float = 1.0
    param_prefetch_max_elements: float = 0.0
    tp_backward_overlap: bool = True
    softmax_fusion: bool = True
    softmax_scale_pass: bool = True
    pipe_exchange_blocking: bool = False
    pipeline_p2p_overlap: bool = False
    pipeline_scatter_gather: bool = False
    attention_unpad: bool = False
    glu_clamp_eager: bool = False
    expert_output_bias: str = "megatron_eager"
    unfused_block_ops: bool = False
    yarn_rope_eager: bool = False
    grouped_gemm_streams: int = 1
    cross_entropy: str = "megatron_unfused"
    param_gather_per_tensor: bool = False
    cuda_graphs: bool = False
    fp8_current_scaling: bool = False
    zero3_persistence_elements: float = 0.0
    collective_per_rank_copies: bool = False
    zero3_grad_all_reduce: bool = False
    zero1_grad_all_reduce: bool = False
    zero3_once_per_step: bool = False
    zero2_grad_last_microbatch: bool = False
    zero2_gather_every_microbatch: bool = False
    cp_allgather_saves_kv: bool = False
    recompute_num_layers: int = 0
    recompute_method: RecomputeMethod = RecomputeMethod.BLOCK
    recompute_layers_decrement: int = 0
    recompute_modules: tuple = ()
    selective_modules: tuple = ("core_attn",)
    offload_activation_layers: int = 0
    offload_optimizer_fraction: float = 0.0
    zero_shard_group: int = 0
    pipeline_layout: str = ""
    loss_chunk_tokens: int = 0
    optimizer_moment_bytes: float = 4.0
    grad_buffer_bytes: float = 4.0
    offload_weight_bytes: float = 2.0
    fp8_param_gather: bool = False
    zero3_master_params: bool = False
    master_weight_bytes: float = 4.0
    moments_in_param_dtype: bool = False
    nvfp4_rht_cast_fusion: bool = False
    moe_probs_in_expert: bool = False
    ep_carved_from_dp: bool = False
    kv_head_replication: bool = False
    stack_lacks: tuple = ()

    def __post_init__(self) -> None:
        fields_ = self.__dict__          # the instance's field values (getattr, without the lookup)
        for name in ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "global_batch"):
            value = fields_[name]
            if type(value) is int and 1 <= value <= (MAX_GLOBAL_BATCH if name == "global_batch" else MAX_GPUS):
                continue                 # a plain int in range: every check below passes
            if isinstance(value, (bool, np.bool_)):        # True is not a degree (int(True) is 1)
                raise InputError(name, f"must be a positive integer, got {shown(value)}")
            if not isinstance(value, int):
                try:
                    as_int = int(value)
                except (TypeError, ValueError, OverflowError):        # inf, nan, text
                    raise InputError(name, f"must be a positive integer, got {shown(value)}") from None
                if as_int != value:
                    raise InputError(name, f"must be a positive integer, got {shown(value)}")
                object.__setattr__(self, name, as_int)
            if getattr(self, name) < 1:
                raise InputError(name, f"must be >= 1, got {value}")
            limit = MAX_GLOBAL_BATCH if name == "global_batch" else MAX_GPUS
            if getattr(self, name) > limit:
                raise InputError(name, f"{as_given(value)} is above the largest supported value {limit:,}",
                                 "check the number")
        if self.n_gpus > MAX_GPUS:
            raise InputError("dp", f"dp*tp*pp*cp = {self.n_gpus:,} GPUs is above the largest supported "
                             f"job ({MAX_GPUS:,} GPUs)", "check the degrees")
        for name in LAYOUT_FIELDS:
            value = fields_[name]
            if type(value) is int and 0 <= value <= MAX_LAYOUT_VALUE:
                continue                 # a plain int in range: stored as it is
            # a whole float (a sweep's row, where a missing value made the column float) is the
            # integer it holds, as the degrees above accept it
            if isinstance(value, (float, np.floating)) and math.isfinite(value) and value == int(value):
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise InputError(name, f"must be an integer >= 0 (0 = not set), got {shown(value)}")
            if value > MAX_LAYOUT_VALUE:
                raise InputError(name, f"{as_given(value)} is above the largest supported value {MAX_LAYOUT_VALUE:,}",
                                 "check the number")
            object.__setattr__(self, name, int(value))
        object.__setattr__(self, "grouped_gemm_streams",
                           check_grouped_gemm_streams("grouped_gemm_streams", self.grouped_gemm_streams))
        if (self.first_stage_layers or self.last_stage_layers) and self.pp < 2:
            raise InputError("first_stage_layers", "first/last stage layer counts need pp > 1",
                             "set pp > 1 or leave them 0")
        self._check_memory_fields()
        object.__setattr__(self, "stack_lacks", feature_names(self.stack_lacks, "stack_lacks"))
        for name, widths in (("optimizer_moment_bytes", (2, 4)), ("master_weight_bytes", (0, 2, 4)),
                             ("grad_reduce_bytes", (2, 4)), ("grad_buffer_bytes", (2, 4)),
                             ("offload_weight_bytes", (2, 4))):
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)) or value not in widths:
                allowed = ", ".join(map(str, widths[:-1])) + f" or {widths[-1]}"
                raise InputError(name, f"must be {allowed}, got {shown(value)}")
            object.__setattr__(self, name, float(value))
        for name in ("grad_bucket_elements", "grad_bucket_elements_per_dp", "param_prefetch_forward",
                     "param_prefetch_backward", "param_prefetch_max_elements", "zero3_persistence_elements"):
            value = getattr(self, name)
            try:
                number = as_float(value)    # 10**400 reads as inf (float() raises OverflowError)
            except (TypeError, ValueError):
                raise InputError(name, f"must be a number >= 0, got {shown(value)}") from None
            if isinstance(value, (bool, np.bool_)) or not (0 <= number < float("inf")):
                raise InputError(name, f"must be a finite number >= 0, got {shown(value)}")
            object.__setattr__(self, name, number)
        for name in BOOL_FIELDS:
            value = fields_[name]
            if value is True or value is False:
                continue
            if isinstance(value, np.bool_):
                object.__setattr__(self, name, bool(value))
            elif not isinstance(value, bool):
                raise InputError(name, f"must be true or false, got {shown(value)}")
        if isinstance(self.zero_stage, (bool, np.bool_)) or self.zero_stage not in (0, 1, 2, 3):
            raise InputError("zero_stage", f"must be 0, 1, 2 or 3, got {shown(self.zero_stage)}")
        object.__setattr__(self, "recompute", _enum(Recompute, self.recompute, "recompute"))
        object.__setattr__(self, "schedule", _enum(Schedule, self.schedule, "schedule"))
        object.__setattr__(self, "cp_kind", _enum(CPKind, self.cp_kind, "cp_kind"))
        object.__setattr__(self, "attention_kernel",
                           _enum(AttentionKernel, self.attention_kernel, "attention_kernel"))
        if self.cross_entropy not in CROSS_ENTROPY_IMPLS:
            raise InputError("cross_entropy", f"unknown implementation {self.cross_entropy!r}",
                             "choose one of " + ", ".join(CROSS_ENTROPY_IMPLS))
        if self.expert_output_bias not in EXPERT_OUTPUT_BIAS_IMPLS:
            raise InputError("expert_output_bias", f"unknown implementation {self.expert_output_bias!r}",
                             "choose one of " + ", ".join(EXPERT_OUTPUT_BIAS_IMPLS))
        if self.dtype not in KNOWN_DTYPES:
            raise InputError("dtype", f"unknown dtype {self.dtype!r}", "choose one of " + ", ".join(KNOWN_DTYPES))
        if self.vpp > 1 and self.schedule == Schedule.ONE_F_ONE_B:
            object.__setattr__(self, "schedule", Schedule.INTERLEAVED)
        if self.vpp > 1 and self.pp == 1:
            raise InputError("vpp", "virtual pipeline stages need pp > 1", "set vpp 1 or pp > 1")
        if self.schedule == Schedule.INTERLEAVED and self.vpp == 1:
            raise InputError("schedule", "interleaved needs vpp > 1", "set --vpp 2 or more")
        if self.vpp > 1 and self.schedule != Schedule.INTERLEAVED:
            # the step model runs these with their own chunks per stage: a vpp was printed, not priced
            two = self.schedule in (Schedule.ZB_V, Schedule.DUALPIPE)
            chunks = "two model chunks per stage by construction" if two else "one model chunk per stage"
            raise InputError("vpp", f"{self.schedule.value} runs {chunks}, so vpp {self.vpp} would change nothing "
                             "(virtual stages are the interleaved schedule's)", "set vpp 1, or the interleaved schedule")
        if self.sequence_parallel and self.tp == 1:
            object.__setattr__(self, "sequence_parallel", False)
        if self.global_batch % (self.dp * self.micro_batch):
            raise InputError("global_batch", f"{self.global_batch} is not divisible by dp*micro_batch = "
                             f"{self.dp}*{self.micro_batch}",
                             f"use a multiple of {self.dp * self.micro_batch}")
        try:
            imbalance = as_float(self.moe_load_imbalance)      # 10**400: inf, refused below
        except (TypeError, ValueError):
            imbalance = None
        if imbalance is None or isinstance(self.moe_load_imbalance, (bool, np.bool_)):
            # True is not a ratio (it was read as 1.0, a balanced load)
            raise InputError("moe_load_imbalance", f"expected a number, got {shown(self.moe_load_imbalance)}",
                             "e.g. 1.2: the busiest expert-parallel rank's routed rows over the group's mean")
        if not 1.0 <= imbalance <= MAX_MOE_LOAD_IMBALANCE:      # also false for nan
            raise InputError("moe_load_imbalance", f"must be between 1 (perfectly balanced) and "
                             f"{MAX_MOE_LOAD_IMBALANCE:,}, got {shown(self.moe_load_imbalance)}")
        object.__setattr__(self, "moe_load_imbalance", imbalance)

    def _check_memory_fields(self) -> None:
        """Recomputation, offload, hybrid sharding and layout fields (types and combinations
        that need no model)."""
        object.__setattr__(self, "recompute_modules", _modules(self.recompute_modules))
        selective = _modules(self.selective_modules, "selective_modules")
        if not selective:
            raise InputError("selective_modules", "names no operation to recompute",
                             "name modules (e.g. core_attn), or leave the stack's default")
        object.__setattr__(self, "selective_modules", selective)
        object.__setattr__(self, "recompute_method",
                           _enum(RecomputeMethod, self.recompute_method, "recompute_method"))
        recompute = _enum(Recompute, self.recompute, "recompute")
        if self.recompute_modules and recompute == Recompute.NONE:
            object.__setattr__(self, "recompute", Recompute.SELECTIVE)
            recompute = Recompute.SELECTIVE
        if self.recompute_num_layers and recompute != Recompute.FULL:
            raise InputError("recompute_num_layers", "counts the layers of a full recomputation",
                             "set recompute full, or leave recompute_num_layers 0")
        if self.recompute_layers_decrement and not (self.recompute_num_layers and self.pp > 1):
            raise InputError("recompute_layers_decrement", "lowers recompute_num_layers stage by stage",
                             "set recompute_num_layers and pp > 1, or leave it 0")
        if self.recompute_method == RecomputeMethod.UNIFORM and recompute == Recompute.FULL \
                and self.recompute_layers_decrement:
            raise InputError("recompute_layers_decrement", "applies to the block method only",
                             "use recompute_method block")
        try:
            fraction = as_float(self.offload_optimizer_fraction)     # 10**400: inf, refused below
        except (TypeError, ValueError):
            raise InputError("offload_optimizer_fraction", f"must be a number in [0, 1], got "
                             f"{self.offload_optimizer_fraction!r}") from None
        if isinstance(self.offload_optimizer_fraction, (bool, np.bool_)) or not 0.0 <= fraction <= 1.0:
            raise InputError("offload_optimizer_fraction", f"must be in [0, 1], got "
                             f"{shown(self.offload_optimizer_fraction)}")
        object.__setattr__(self, "offload_optimizer_fraction", fraction)
        if fraction > 0 and self.dtype == "fp32":
            raise InputError("offload_optimizer_fraction", "offloads the fp32 master copy of mixed-precision "
                             "training", "use a 16-bit or 8-bit dtype")
        if self.zero_shard_group:
            if self.zero_stage == 0:
                raise InputError("zero_shard_group", "hybrid sharding shards ZeRO states", "set zero_stage 1-3")
            if (self.dp * self.cp) % self.zero_shard_group:
                raise InputError("zero_shard_group", f"{self.zero_shard_group} does not divide dp*cp = "
                                 f"{self.dp * self.cp}", "choose a divisor of dp*cp")
        layout = self.pipeline_layout
        if layout is None:
            layout = ""
        if not isinstance(layout, str):
            raise InputError("pipeline_layout", f"must be a string, got {shown(layout)}")
        object.__setattr__(self, "pipeline_layout", layout.strip())
        if self.pipeline_layout:
            from simulator.layout_string import parse_layout
            parse_layout(self.pipeline_layout)
            if self.first_stage_layers or self.last_stage_layers:
                raise InputError("pipeline_layout", "gives every stage's layers; first/last stage counts too",
                                 "give the layout or first/last stage layers, not both")

    @property
    def zero_shard_size(self) -> int:
        """Ranks ZeRO shards over: ``zero_shard_group``, or the whole dp*cp group."""
        return self.zero_shard_group or self.dp * self.cp

    @property
    def n_gpus(self) -> int:
        """GPUs the configuration occupies (dp * tp * pp * cp)."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per pipeline per step: global_batch / (dp * micro_batch)."""
        return self.global_batch // (self.dp * self.micro_batch)

    def as_dict(self) -> dict:
        # every field is a number, text, an enum or a tuple of text: a shallow read is the same as
        # dataclasses.asdict's deep copy, at a tenth of the time (an export's best_runnable reads
        # every plan that fits: 48,512 rows took 5 s through asdict)
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        for k, v in d.items():
            if isinstance(v, Enum):
                d[k] = v.value
        d["recompute_modules"] = list(self.recompute_modules)
        d["selective_modules"] = list(self.selective_modules)
        d["stack_lacks"] = list(self.stack_lacks)
        return d
