"""Software-stack profile: what a framework release does, as documented behaviour (data).

Speed depends on the framework as much as on the chip: whether the data-parallel gradient
reduction overlaps the backward pass, which attention kernel runs, whether gradient
accumulation is fused into the weight-gradient GEMM, and so on. Each built-in stack is one YAML
file in ``hardware_specs/stacks/`` (one per framework and release where behaviour changed);
every value carries the citation (framework code or docs) it comes from. Nothing here is
fitted: the hardware efficiency stays one model per GPU generation, fitted across stacks.

A stack has a ``training`` section (``TrainingBehaviour``, read by the training simulator as the
defaults of a ``ParallelConfig``'s software fields) and/or a ``serving`` section
(``ServingBehaviour``, read by the serving simulator).
"""
from __future__ import annotations

import math
import re
import numbers
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Mapping

from hardware_specs.errors import InputError, require_positive, shown
from hardware_specs.serving_behaviour import ServingBehaviour

#: attention kernels a training stack may run (``ParallelConfig.attention_kernel`` and
#: ``flash_attention``): ``serial`` = FlashAttention-2 (softmax between a tile's two matmuls),
#: ``pipelined`` = FlashAttention-3 / cuDNN fused attention on Hopper+ (softmax hidden under the
#: matmuls), ``auto`` = the GPU generation's usual kernel, ``materialized`` = no fused kernel
#: (the score matrix is written to memory, 2020-2022 Megatron).
ATTENTION_KERNELS = ("auto", "serial", "pipelined", "materialized")
#: how ZeRO-2 / FSDP SHARD_GRAD_OP reduce sharded gradients: after every micro-batch's backward
#: (DeepSpeed stage 2, FSDP), or once after the last one (Megatron's distributed optimizer keeps
#: full gradients in its buffer until then, which is ZeRO-1's traffic).
ZERO2_REDUCE = ("every_microbatch", "last_microbatch")
#: how ZeRO-3 reduces gradients: each rank receives its shard, or every bucket is all-reduced
#: whole and each rank keeps its shard (DeepSpeed 0.3 unless ``reduce_scatter: true``)
ZERO3_GRAD_REDUCE = ("reduce_scatter", "all_reduce")
#: what ZeRO-3 / FSDP (and ZeRO-2, FSDP without the reshard after forward) does when a pipeline
#: runs the micro-batches (``TrainingBehaviour.zero3_under_pipeline``): ``per_microbatch`` =
#: what it does without one, each layer gathered in every micro-batch's forward and backward
#: and its gradients reduced after every backward;
#: ``once_per_step`` = each stage's parameters gathered at its first forward and kept whole
#: through the step, its gradients accumulated whole and reduce-scattered once, after the
#: stage's last backward (torchtitan's ``reshard_after_forward = not pp_enabled`` with
#: ``torch.distributed.pipelining``'s deferred FSDP reduction)
ZERO3_UNDER_PIPELINE = ("per_microbatch", "once_per_step")
#: context-parallel flavours a training stack may run (``TrainingBehaviour.context_parallel_kind``;
#: the names of ``simulator.parallel_config.CPKind``, priced in ``cost_models.context_parallel``):
#: ``ring`` = K/V blocks passed around the CP ring under attention (Megatron-Core / Transformer
#: Engine ``cp_comm_type="p2p"``), ``ulysses`` = all-to-alls over heads (DeepSpeed-Ulysses),
#: ``hybrid`` = Ulysses inside the scale-up domain and ring across it (``a2a+p2p``),
#: ``allgather`` = every rank all-gathers the CP group's K/V before attention (``all_gather``;
#: torchtitan's CP wrapper, Llama 3's CP).
CP_KINDS = ("ring", "ulysses", "hybrid", "allgather")
#: what all-gather CP's backward does for K/V (``TrainingBehaviour.cp_allgather_backward``):
#: ``regather`` = autograd saved only the local K/V chunk and backward all-gathers them again
#: (Transformer Engine ``AttnFuncWithCPAndKVAllGather``; PyTorch's SDPA context_parallel, torchtitan
#: 0.2); ``saved`` = autograd saved the gathered K/V (cp x the local chunk, kept per layer until its
#: backward) and backward only reduce-scatters dK/dV (PyTorch ``flex_cp_allgather`` feeding
#: FlexAttention, torchtitan 0.3)
CP_ALLGATHER_BACKWARD = ("regather", "saved")
#: FP8 scaling recipes (Transformer Engine names; ``none`` = the stack has no FP8 path).
FP8_RECIPES = ("delayed", "tensorwise", "blockwise", "mxfp8", "nvfp4", "none")
#: what dtype a training stack keeps its gradient buffer (the gradients a backward accumulates
#: into, one element per parameter) in: ``fp32`` = 4 bytes whatever the reduction (today's
#: default, also where a stack's buffer is not traced), ``reduce`` = the buffer is the
#: data-parallel reduction buffer, in the dtype the run reduces in (``grad_reduce_bytes`` as
#: resolved for the run's dtype; Megatron-Core ``grad_reduce_in_fp32``, Megatron-LM local DDP
#: ``--accumulate-allreduce-grads-in-fp32``); ``fp16_reduce`` = ``reduce`` in fp16 runs, ``fp32``
#: in every other dtype (a stack whose fp16 gradients are traced and whose bf16 path is not:
#: DeepSpeed's fp16 optimizers keep the 16-bit ``p.grad``, its BF16_Optimizer fp32 gradients).
GRAD_BUFFERS = ("fp32", "reduce", "fp16_reduce")
#: ``TrainingBehaviour.master_weights`` values: how the optimizer keeps the weights it updates
MASTER_WEIGHTS = ("fp32", "bf16_remainder", "param_dtype")
#: what a stack's selective activation checkpointing recomputes in each layer, by name
#: (``TrainingBehaviour.selective_checkpoint``), as the recompute modules of
#: ``cost_models.memory.RECOMPUTE_MODULES``: ``core_attn`` = Megatron's (the attention core only:
#: Megatron-LM 2022, Megatron-Core's default ``recompute_modules``); ``per_op`` = PyTorch's
#: per-operation policy as torchtitan runs it (matmul and attention-kernel outputs saved, every
#: second matmul and all element-wise work rerun: the norms, the activation, and the projections
#: with what lies between them); ``save_dots`` = a remat policy that saves the attention
#: projections' outputs and reruns the attention core, the norms and the MLP's input projections
#: with the activation (MaxText ``save_dot_except_mlpwi`` / ``save_dot_except_mlp`` as the DGX
#: Cloud recipes run them, AI-Hypercomputer/maxtext@8e55ab1aa MaxText/layers/models.py)
SELECTIVE_CHECKPOINTS = {"core_attn": ("core_attn",), "per_op": ("layernorm", "mlp_act", "every_second_linear"),
                         "save_dots": ("core_attn", "layernorm", "mlp_fc1")}
#: what a run of a stack recomputes when it states nothing (``TrainingBehaviour.recipe_recompute``)
RECIPE_RECOMPUTE = ("none", "selective", "full")
#: language-model loss implementations a training stack may run (``TrainingBehaviour.cross_entropy``;
#: their HBM traffic per logit is counted in ``cost_models.cross_entropy``): ``megatron_unfused`` =
#: Megatron's eager ``vocab_parallel_cross_entropy`` on an fp32 copy, ``megatron_fused`` = Megatron-Core
#: ``cross_entropy_loss_fusion`` with the ``native`` (``torch.compile``d) implementation,
#: ``te_triton`` = the same flag with ``cross_entropy_fusion_impl: te`` (Transformer Engine's Triton
#: kernels), ``torch_eager`` = ``F.cross_entropy`` on an fp32 copy in eager PyTorch,
#: ``flash_attn_xentropy`` = flash-attn's fused ``CrossEntropyLoss``.
CROSS_ENTROPY_IMPLS = ("megatron_unfused", "megatron_fused", "te_triton", "torch_eager", "flash_attn_xentropy")
#: how a stack adds a biased MoE's routed-expert output bias, scaled by the routing probabilities
#: (``TrainingBehaviour.expert_output_bias``; HBM traffic and kernels in ``cost_models.moe``):
#: ``megatron_eager`` = Megatron-Core's unfused ``TEGroupedMLP._apply_bias``, per-expert PyTorch ops
#: after the FC2 GEMM (``moe.expert_output_bias_work``); ``fused_mlp_epilogue`` = Megatron-Core's op
#: fuser (``use_transformer_engine_op_fuser``) running Transformer Engine's fused MXFP8 grouped MLP,
#: the bias added unscaled in FC2's epilogue and its gradient reduced in the output gradient's
#: quantisation (Megatron-Core d0b3b775); ``fused_mlp_scaled`` = the same with FC2's
#: ``scale_bias`` (Megatron-Core cd4afffa), the epilogue adding bias times probability and a Triton
#: kernel reading the output gradient for the bias and probability gradients
#: (``moe.fused_expert_output_bias_work``)
EXPERT_OUTPUT_BIAS_IMPLS = ("megatron_eager", "fused_mlp_epilogue", "fused_mlp_scaled")
#: parallelisms and sharding a training stack may lack (``TrainingBehaviour.lacks``), each with
#: what a plan uses when it needs it: a release without one cannot run such a plan, so
#: ``simulate`` refuses it and the planner does not propose it (``simulator.stack_support``).
STACK_FEATURES = {
    "pipeline": "pipeline parallelism (pp > 1)",
    "interleaved_schedule": "the interleaved pipeline schedule (vpp > 1)",
    "zero_bubble_schedules": "the zero-bubble and DualPipe schedules (zb-h1, zb-h2, zb-v, dualpipe)",
    "sequence_parallel": "Megatron sequence parallelism",
    "context_parallel": "context parallelism (cp > 1)",
    "expert_parallel": "expert parallelism (ep > 1)",
    "zero1": "ZeRO-1 (optimizer states sharded over data parallelism)",
    "zero2": "ZeRO-2 (gradients sharded too)",
    "zero3": "ZeRO-3 / FSDP (parameters sharded too)",
    "zero2_with_pipeline": "ZeRO-2 or ZeRO-3 together with pipeline parallelism",
    "selective_recompute": "selective activation recomputation",
    "partial_recompute": "recomputation of some layers only (the block method's layer count)",
    "activation_offload": "activation offload to host memory",
    "optimizer_offload": "optimizer offload to host memory",
    "moe_tp_without_sp": "MoE layers with tensor parallelism but without sequence parallelism",
}


def feature_names(names, field: str) -> tuple[str, ...]:
    """``names`` (a tuple, list or comma-separated text) as a tuple of ``STACK_FEATURES`` names
    without repeats, in that table's order, else an ``InputError`` naming ``field``."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    try:
        names = tuple(names)
    except TypeError:
        raise InputError(field, f"must be a list of feature names, got {shown(names)}") from None
    for n in names:
        if not isinstance(n, str):
            raise InputError(field, f"each entry must be a feature name (text), got {shown(n)}",
                             "choose from " + ", ".join(STACK_FEATURES))
        if n not in STACK_FEATURES:
            raise InputError(field, f"unknown feature {n!r}", "choose from " + ", ".join(STACK_FEATURES))
    return tuple(n for n in STACK_FEATURES if n in names)


#: prefetch depths above this are not a documented framework behaviour (and would be a typo).
MAX_PREFETCH_LAYERS = 8.0
#: most concurrent GEMM streams a grouped linear can have (Transformer Engine runs 4; CUDA has at
#: most 32 hardware work queues, CUDA_DEVICE_MAX_CONNECTIONS)
MAX_GROUPED_GEMM_STREAMS = 32


def check_grouped_gemm_streams(field: str, value) -> int:
    """``value`` as a stream count of a grouped linear (an integer in 1 ..
    ``MAX_GROUPED_GEMM_STREAMS``; a whole float, as a sweep's float column holds it, counts),
    else an ``InputError`` naming ``field``."""
    if type(value) is int and 1 <= value <= MAX_GROUPED_GEMM_STREAMS:
        return value                     # a plain int in range, as the checks below return it
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral)) \
            and math.isfinite(value) and value == int(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
            or not 1 <= value <= MAX_GROUPED_GEMM_STREAMS:
        raise InputError(field, f"must be an integer from 1 to {MAX_GROUPED_GEMM_STREAMS}, got {shown(value)}",
                         "Transformer Engine runs 4 compute streams; 1 = one GEMM after another")
    return int(value)


#: ``TrainingBehaviour.expert_tp_default`` values
EXPERT_TP_DEFAULTS = ("one", "tp", "tp_without_ep")
#: ``TrainingBehaviour.expert_parallel_layout`` values
EXPERT_PARALLEL_LAYOUTS = ("folded", "carved_from_dp")

#: the training fields that take one of a listed set of values: (field, its values, what the
#: error calls an unknown one), checked in this order by ``TrainingBehaviour.__post_init__``
_TRAINING_CHOICES = (
    ("expert_tp_default", EXPERT_TP_DEFAULTS, "value"),
    ("expert_parallel_layout", EXPERT_PARALLEL_LAYOUTS, "layout"),
    ("selective_checkpoint", SELECTIVE_CHECKPOINTS, "policy"),
    ("recipe_recompute", RECIPE_RECOMPUTE, "value"),
    ("attention_kernel", ATTENTION_KERNELS, "kernel"),
    ("zero2_grad_reduce", ZERO2_REDUCE, "value"),
    ("zero01_grad_reduce", ZERO2_REDUCE, "value"),
    ("zero3_grad_reduce", ZERO3_GRAD_REDUCE, "value"),
    ("bf16_zero1_grad_reduce", ZERO3_GRAD_REDUCE, "value"),
    ("zero3_under_pipeline", ZERO3_UNDER_PIPELINE, "value"),
    ("grad_buffer", GRAD_BUFFERS, "value"),
    ("master_weights", MASTER_WEIGHTS, "value"),
    ("context_parallel_kind", CP_KINDS, "flavour"),
    ("cp_allgather_backward", CP_ALLGATHER_BACKWARD, "value"),
    ("cross_entropy", CROSS_ENTROPY_IMPLS, "implementation"),
    ("expert_output_bias", EXPERT_OUTPUT_BIAS_IMPLS, "implementation"),
)


@dataclass(frozen=True)
class TrainingBehaviour:
    """What a training framework release does by default (documented, not fitted).

    Attributes:
        overlap_grad_reduce: DP gradient buckets reduce while the backward pass still runs
            (PyTorch DDP buckets; Megatron-Core ``overlap_grad_reduce``); False = one reduction
            after the backward (Megatron-LM 2019-2021, Megatron-DeepSpeed without buckets).
        overlap_param_gather: the distributed optimizer's (ZeRO-1/2) parameter all-gather, and
            ZeRO-3/FSDP parameter gathers, are prefetched under compute.
        grad_reduce_bytes: bytes per gradient element in the DP reduction of an fp16 run, and of
            a bf16 run unless ``bf16_grads_in_fp32`` (4 = fp32 main gradients, FSDP
            ``reduce_dtype=float32``; 2 = reduced in the 16-bit training dtype, DeepSpeed fp16 /
            Megatron-LM fp16 without ``--accumulate-allreduce-grads-in-fp32`` / Megatron-Bridge
            performance recipes' ``grad_reduce_in_fp32=False``). A run's bytes are
            ``4 if dtype is bf16 and bf16_grads_in_fp32 else grad_reduce_bytes``; FP8 runs keep
            bf16 parameters and count as bf16.
        zero2_grad_reduce: ``every_microbatch`` or ``last_microbatch`` (see ``ZERO2_REDUCE``).
        zero01_grad_reduce: the same choice for plain data parallelism and ZeRO-1, whose gradients
            are not sharded: ``last_microbatch`` = accumulated locally and reduced once per step
            (Megatron; DeepSpeed stages 0/1 at the accumulation boundary; PyTorch DDP under
            ``no_sync``), ``every_microbatch`` = every backward reduces (PyTorch DDP's default
            without ``no_sync``).
        tp_comm_overlap: tensor-parallel collectives overlap the GEMMs (Transformer Engine
            userbuffers / ``--tp-comm-overlap``).
        ep_comm_overlap: expert-parallel dispatch/combine all-to-all overlaps compute
            (DeepEP / ``--overlap-moe-expert-parallel-comm``, DualPipe).
        ep_dispatch_dedup: the expert-parallel dispatcher sends each token once per destination
            GPU over NVLink and once per destination node over the NIC, forwarding it inside the
            node (DeepEP / HybridEP: Megatron ``--moe-token-dispatcher-type flex``), instead of
            one row per (token, expert) pair (Megatron's ``alltoall`` dispatcher).
        attention_kernel: one of ``ATTENTION_KERNELS``.
        grad_accumulation_fusion: the weight-gradient GEMM accumulates into the fp32 gradient
            buffer in place (Megatron ``--gradient-accumulation-fusion``).
        grad_accumulation_fusion_fp32: the same, but only for 16-bit runs whose gradients
            accumulate in fp32 (the resolved gradient bytes are 4: bf16 under
            ``bf16_grads_in_fp32``, or ``grad_reduce_bytes`` 4); read only where
            ``grad_accumulation_fusion`` is false. Megatron-LM 2022 keeps
            ``--gradient-accumulation-fusion`` on by default and switches it off whenever
            gradients accumulate in 16 bits (NVIDIA/Megatron-LM@d898a8991d megatron/arguments.py
            lines 176-188; fp16 accumulation was fused from 07916bf245, 2022-09-27).
        sequence_parallel_with_tp: Megatron sequence parallelism is on whenever tp > 1 (the
            stack's recipes turn it on).
        zero3_recompute_gather: under ZeRO-3 with full recomputation, the recompute forward
            gathers each layer's parameters again (DeepSpeed's per-module release).
        cuda_graphs: the step is captured in CUDA graphs (no per-kernel launch gap).
        fp8_recipe: the FP8 scaling recipe an FP8 run uses unless the run says otherwise, one of
            ``FP8_RECIPES``.
        grad_bucket_elements: gradient elements per data-parallel reduction bucket; the bucket of
            a run is ``max(grad_bucket_elements, grad_bucket_elements_per_dp * dp)``. ``0`` = not
            bucketed: all of a stage's gradients reduce in one collective after the backward
            pass. Under ZeRO-3/FSDP sharding the unit is the wrapped module (one transformer
            block) whatever this value. Elements, not bytes: bytes = elements x
            ``grad_reduce_bytes``.
        grad_bucket_elements_per_dp: bucket growth per data-parallel rank (Megatron-Core:
            ``max(40e6, 1e6 * dp)`` elements); 0 for a fixed bucket.
        param_prefetch_layers_forward: ZeRO-3/FSDP: layers (sharding units) whose parameter
            all-gather may be in flight ahead of the layer computing in the forward pass
            (1 = the next layer's gather overlaps this layer's compute; 0 = each gather is
            issued when its layer starts and is exposed).
        param_prefetch_layers_backward: the same in the backward pass (FSDP ``BACKWARD_PRE`` =
            1; ``BACKWARD_POST`` = 0: the next gather is issued after this layer's gradients).
        param_prefetch_max_elements: cap on parameter elements fetched ahead, 0 = none (DeepSpeed
            ZeRO-3 ``stage3_prefetch_bucket_size``, 5e7 by default, counts elements not layers).
        default_zero_stage: the data-parallel sharding the stack's documented recipes use when the
            user does not say (0 = plain DDP, 1 = distributed optimizer / ZeRO-1, 2 = ZeRO-2 /
            SHARD_GRAD_OP, 3 = ZeRO-3 / FSDP FULL_SHARD).
        tp_backward_overlap: in the backward pass of a column-parallel linear, the tensor-parallel
            collective on the input gradient (all-reduce, or reduce-scatter with sequence
            parallelism) runs under the weight-gradient GEMM, and with sequence parallelism the
            input all-gather runs under the data-gradient GEMM (Megatron-LM
            ``LinearWithGradAccumulationAndAsyncCommunication`` since 2021-08-30, Transformer Engine
            ``Linear``/``LayerNormLinear``). Independent of ``tp_comm_overlap`` (userbuffers).
            It does not cover the all-gather of a row-parallel output's gradient under sequence
            parallelism, which both gradient GEMMs wait for (``simulator.layer_times``).
        softmax_fusion: with ``attention_kernel: materialized``, scale, mask and softmax run as one
            fused kernel over the score matrix (Megatron ``scaled_upper_triang_masked_softmax``,
            v2.0+); False = separate PyTorch ops, one memory pass each (Megatron 2019-2020).
            Irrelevant for the flash/fused kernels.
        attention_unpad: the attention wrapper hands the fused core packed (unpadded) rows: it
            gathers the query, key and value rows into new tensors and scatters the output back
            (flash-attn ``bert_padding.index_first_axis`` / ``pad_input``, as llm-foundry's
            ``flash_attn_fn`` calls them), even when nothing is padded; the backward gathers and
            scatters the gradients. Megatron-Core hands Transformer Engine the sbhd tensors as
            they are (False).
        unfused_block_ops: the model code runs RoPE, the grouped-query key/value repetition,
            the attention output's layout copy and the gated MLP's product as separate eager
            PyTorch ops (torchtitan's Llama code without ``torch.compile``), where the catalog
            counts fused kernels (``layer_costs.UNFUSED_*``).
        yarn_rope_eager: the stack rotates the queries and keys of a YaRN model whose
            concentration factor is not 1 (``layer_costs.yarn_concentration_factor``: gpt-oss
            1.35) with Megatron-Core's eager ``_apply_rotary_pos_emb_bshd`` (rotate-half,
            cos/sin products, sum, concatenations: forward 24 and backward 20 bytes a rotated
            channel against the fused kernel's 4, ``layer_costs.MEGATRON_EAGER_ROPE_*``), as
            Megatron-Core from core_v0.16.0 does when Transformer Engine's fused RoPE cannot
            take mscale != 1 (NVIDIA/Megatron-LM@core_v0.17.0 megatron/core/models/common/
            embeddings/rope_utils.py apply_rotary_pos_emb lines 279-284, attention.py lines 1111,
            1124; commit 987395813b) and Megatron-Bridge from v0.2.0 does by turning
            apply_rope_fusion off for position_embedding_type 'yarn' (src/megatron/bridge/utils/
            fusions.py validate_rope_fusion_compatibility). Multi-latent attention keeps its own
            fused RoPE (the cos/sin cache scaled by mscale). False = the fused kernel (or RoPE
            priced by ``unfused_block_ops``).
        glu_clamp_eager: a clamped GLU (``ModelSpec.glu_clamp_limit``, gpt-oss) is clamped by
            separate PyTorch ops before the fused activation kernel: two clamps and a concat
            (forward 8 and backward 10 passes over the FC1 output's width, in 16-bit;
            ``moe.glu_clamp_bytes``), as Megatron-Core's ``weighted_bias_quick_geglu_impl`` does;
            False = the clamp runs inside the activation kernel (Transformer Engine's
            ``ScaledClampedQGeGLU`` under Megatron-Core's op fuser) or the model has no clamp.
        expert_output_bias: how the routed experts' output bias of a biased MoE (gpt-oss,
            ``ModelSpec.linear_bias``) is added, one of ``EXPERT_OUTPUT_BIAS_IMPLS``: Megatron-Core's
            unfused per-expert ``_apply_bias`` (``megatron_eager``, in fp32 where the flex
            dispatcher hands fp32 probabilities), or inside the op fuser's fused grouped MLP
            (``fused_mlp_epilogue`` without, ``fused_mlp_scaled`` with FC2's ``scale_bias``). Time only
            (``cost_models.moe.expert_output_bias_work`` / ``fused_expert_output_bias_work``).
        pipe_exchange_blocking: at a pipeline-stage boundary the stage's send waits for the
            peer's receive, then the stage receives the other direction's tensor (DeepSpeed's
            PipelineEngine: blocking ``dist.send`` / ``dist.recv``, one command after the other in
            each ``TrainSchedule`` step), so a crossing costs two transfers; False = both
            directions posted together and overlapping (Megatron's ``batch_isend_irecv``,
            ``torch.distributed.pipelining``) (``ParallelConfig.pipe_exchange_blocking``).
        pipeline_p2p_overlap: under the interleaved schedule a stage's sends and receives run in
            the background while its next model chunk computes (Megatron-LM's
            ``overlap_p2p_comm``: ``--no-overlap-p2p-communication`` turns it off, on by default
            since NVIDIA/Megatron-LM 4eeff55d, 2023-10-12; forced off without virtual stages), so
            only what a transfer takes beyond the chunk's pass shows; False = each send is paid in
            full on the stage's critical path (``ParallelConfig.pipeline_p2p_overlap``).
        pipeline_scatter_gather: without sequence parallelism each tensor-parallel rank sends only
            1/tp of the [s, b, h] tensor across a stage boundary and the receiving stage all-gathers
            it over its tensor-parallel group (Megatron-LM 2021-2022 ``_communicate`` with
            ``scatter_gather_tensors_in_pipeline``, on by default, NVIDIA/Megatron-LM 72e4230bb5;
            DeepSpeed's PipelineEngine ``PartitionedTensor`` over the model-parallel group); False =
            every rank sends the whole tensor (Megatron-Core ``get_tensor_shapes`` divides the
            sequence by tp only under sequence parallelism) (``ParallelConfig.pipeline_scatter_gather``).
        grouped_gemm_streams: how many of a grouped linear's per-expert GEMMs run concurrently
            (``moe.grouped_gemm_time_s``): Transformer Engine's ``GroupedLinear`` issues one cuBLAS
            GEMM per local expert round-robin over its 4 compute streams
            (``multi_stream_cublas_gemm``), which run side by side (with one hardware work queue,
            ``CUDA_DEVICE_MAX_CONNECTIONS=1``, too: it fixes the order in which kernels start, as
            Megatron-Core's TP overlap relies on); 1 = one after another (a stack that loops over
            the experts on one stream).
        kv_head_replication: tensor parallelism may exceed the model's key/value heads (tp a
            multiple of them), each head held whole by the tp / kv_heads ranks that share it, as
            ``cost_models.params.kv_heads_per_tp_rank`` prices it. False = the stack splits whole
            key/value heads over tp and refuses a tp that does not divide them
            (``simulator.validate_config.check_config``; the planner does not propose one):
            Megatron-Core <= 0.15 ``TransformerConfig.__post_init__`` ("num_query_groups must be a
            multiple of tensor_model_parallel_size") and ``Attention.__init__``
            (``divide(num_query_groups, world_size)``), torchtitan's whole-head view of its
            ``wk``/``wv`` shard. Megatron-Core >= 0.16 accepts tp > kv heads by sub-sharding the
            QKV activations (weights split 1/tp, an all-gather over tp), which is not replication
            and is not priced, so its stacks say False too. Multi-head-only stacks are False
            ("not applicable"). Serving engines replicate (``cost_models.kv_cache``).
        zero3_gather_per_tensor: ZeRO-3 gathers every parameter tensor of a module in its own
            collective (DeepSpeed 0.3.x ``_allgather_param`` per parameter) instead of one
            collective per module (FSDP's flat parameter, later DeepSpeed coalescing).
        zero3_persistence_threshold_elements: ZeRO-3 parameter tensors with fewer elements stay
            whole on every rank (biases, norm weights): not gathered per use, gathered once
            after each optimizer step (DeepSpeed ``stage3_param_persistence_threshold``); 0 =
            none persist.
        collective_per_rank_copies: the stack hands each ZeRO all-gather / reduce-scatter a
            list of one tensor per rank, so PyTorch's c10d copies every rank's slice in its own
            kernel (``n`` kernels per call; DeepSpeed 0.3 with PyTorch <= 1.8's list API), and
            gathers its persistent parameters with one copy per parameter and rank.
        zero3_grad_reduce: how ZeRO-3 reduces the gradients, one of ``ZERO3_GRAD_REDUCE``:
            ``reduce_scatter`` (each rank receives its shard) or ``all_reduce`` (each reduce
            bucket all-reduced whole, the shard kept: DeepSpeed 0.3's default).
        bf16_zero1_grad_reduce: how a bf16 run's ZeRO-1 (sharded optimizer state, full gradients)
            reduces the gradients, one of ``ZERO3_GRAD_REDUCE``: ``reduce_scatter`` (each rank
            receives the shard it steps: Megatron-Core's distributed optimizer) or ``all_reduce``
            (the whole gradient all-reduced, then each rank steps its shard and all-gathers the
            16-bit weights: DeepSpeed's BF16_Optimizer, which a DeepSpeed pipeline engine runs
            for bf16). Other dtypes reduce-scatter.
        zero3_under_pipeline: what ZeRO-3 / FSDP does with pipeline parallelism, one of
            ``ZERO3_UNDER_PIPELINE``. ``per_microbatch`` (default): as without a pipeline.
            ``once_per_step``: the stage's 16-bit parameters are gathered once, at its first
            micro-batch's forward, and stay whole (torchtitan ``apply_fsdp``: the ``default``
            ``reshard_after_forward_policy`` is ``not pp_enabled``); every backward runs with
            ``set_requires_gradient_sync(False)`` / ``set_reshard_after_backward(False)``, so
            whole gradients accumulate, and the stage reduce-scatters them once after its last
            backward (``torch.distributed.pipelining`` ``stage.py`` ``backward_maybe_with_nosync``
            / ``_post_backward``, called by the schedule after the micro-batch loop), overlapping
            nothing. Memory: whole 16-bit weights and gradients, sharded optimizer states (ZeRO-1's
            model states). ZeRO-2 (``reshard_after_forward`` False: torchtitan's ``never``,
            which under a pipeline is its ``default`` too) runs the same way under the pipeline
            runtime and is priced so: no reduce-scatter per micro-batch, whole gradients.
            Only read when pp > 1.
        bf16_grads_in_fp32: when the run's dtype is bf16 the stack accumulates and reduces
            gradients in fp32 (4 bytes) whatever ``grad_reduce_bytes`` says for fp16 (Megatron-LM
            forces ``--accumulate-allreduce-grads-in-fp32`` with ``--bf16``; DeepSpeed's
            BF16_Optimizer reduces its fp32 gradients).
        grad_buffer: the dtype of the gradient buffer, one of ``GRAD_BUFFERS``: ``reduce`` = the
            buffer the backward accumulates into is the reduction buffer, so it holds
            ``grad_reduce_bytes`` (as resolved for the run's dtype) per parameter (Megatron-Core
            DDP: ``torch.float if grad_reduce_in_fp32 else param.dtype``; Megatron-LM 2021-2022
            local DDP the same with ``--accumulate-allreduce-grads-in-fp32``); ``fp32`` = 4 bytes
            whatever the reduction; ``fp16_reduce`` = ``reduce`` in fp16 runs, 4 bytes otherwise.
        offload_weight_bytes: bytes per parameter that cross the host link when the host's
            optimizer step (optimizer offload) sends the updated weights back to the GPU, in a
            16-bit or 8-bit run (fp32 / tf32 runs: 4): 4 where the fp32 values cross and the GPU
            holds or converts them (Megatron-Core ``HybridDeviceOptimizer``: its host copy is the
            fp32 main parameter, copied back with a non-blocking ``copy_``, which PyTorch converts
            on the GPU), 2 where the host converts them to the 16-bit parameter first (DeepSpeed
            0.9+ ZeRO-Offload's blocking ``copy_``). Default 2: a stack without optimizer offload
            of its own is priced as before.
        fp8_param_gather: ``fp8`` and ``mxfp8`` runs keep the model's compute weights only as
            Transformer Engine quantised tensors (Megatron ``--fp8-param-gather``, Megatron-Bridge
            ``mixed_precision.fp8_param_gather``): no 16-bit working copy, the fp32 master copy in
            the optimizer; the quantised tensors hold what ``low_precision.
            weight_copy_bytes_per_param`` counts (FP8 row-wise data and, on Hopper, its transpose;
            MXFP8 row-wise and column-wise data with their scales). Other dtypes ignore it.
        zero3_master_params: at ZeRO-3 each parameter's shard is kept only in fp32, and it is the
            optimizer's master weight: the 16-bit copy exists only while a layer is gathered
            (PyTorch FSDP / FSDP2 with a mixed-precision ``param_dtype``, which casts the fp32
            shard at the all-gather). False: a 16-bit shard beside the fp32 master (DeepSpeed
            ZeRO-3, Megatron-FSDP). Memory only (``memory.model_state_bytes``).
        master_weights: how a mixed-precision optimizer keeps the weights it steps, one of
            ``MASTER_WEIGHTS``: ``fp32`` = a 4-byte fp32 master copy beside fp32 Adam moments,
            the 16-bit weights written from it by a separate copy (Megatron's
            ``Float16OptimizerWithFloat16Params`` and distributed optimizer, DeepSpeed, FSDP's fp32
            shards); ``bf16_remainder`` = Apex ``DistributedFusedAdam(store_param_remainders=True)``:
            the bf16 parameter is the fp32 master's upper 16 bits and only a 2-byte int16
            remainder is stored, stepped in one fused kernel (NVIDIA/apex@810ffae3
            apex/contrib/optimizers/distributed_fused_adam.py:447-453, :2490-2565), which NeMo 1.x
            picks for an fp32 optimizer over bf16 weights without FP8 primary weights (those keep
            an fp32 copy, ``store_params=True``), fp16 runs keep fp32; ``param_dtype`` = the
            optimizer runs in the parameters' dtype (NeMo ``optim.dtype: bf16``): 2-byte moments and
            no master copy, or a bf16 one beside FP8 primary weights. Memory and the optimizer
            step's bytes (``stack_defaults.master_weight_fields``).
        nvfp4_rht_cast_fusion: Transformer Engine quantises an ``nvfp4`` run's activations and
            gradients into their row-wise and Hadamard-transformed column-wise copies with one
            kernel after the amax kernel (NVIDIA/TransformerEngine >= 2.14,
            ``nvte_quantize_with_hadamard_transform``: 5.125 bytes an element, 2 kernels); False: a
            row-wise cast and a column-wise transform-and-cast, each reading the tensor (2.12: 7.125
            bytes, 3 kernels). Time only (``layer_costs.linear_cast_bytes``).
        selective_checkpoint: what ``recompute: selective`` recomputes on this stack, one of
            ``SELECTIVE_CHECKPOINTS`` (Megatron's attention core, torchtitan's per-operation
            policy, or MaxText's save-the-projections policy); a plan that names
            ``recompute_modules`` recomputes those instead.
        moe_probs_in_expert: the router's probabilities scale the experts' activation output
            inside the expert (Megatron-Core 0.13's memory-efficient token permutation: the
            weighted SwiGLU, ``permuted_probs``), so the combine keeps no copy of the expert
            outputs for the probabilities' gradient; False: they scale the expert outputs at
            the combine (Megatron-Core <= 0.12 ``unpermute(..., probs=...)``), which keeps
            top_k x hidden 16-bit values per token (``moe.moe_activation_bytes_per_layer``).
        expert_tp_default: the expert tensor-parallel degree of a run that does not state one,
            one of ``EXPERT_TP_DEFAULTS``: ``tp`` where the release splits the routed experts over
            the whole tensor-parallel group (Megatron-Core <= 0.9 has no expert-TP setting:
            NVIDIA/Megatron-LM@core_r0.9.0 megatron/core/transformer/moe/experts.py:67-71
            ``tp_size = get_tensor_model_parallel_world_size()`` unless ``moe_extended_tp``;
            >= 0.10 ``--expert-tensor-parallel-size`` defaults to tp, core_v0.10.0
            megatron/training/arguments.py:259-260); ``tp_without_ep``: tp at ep 1, 1 with expert
            parallelism (torchtitan 0.3.0: dense placement over the TP axis without EP, the experts
            split over EP only with it, ``paraplan.exports.torchtitan.expert_tp``); ``one`` (default): experts whole on each
            rank, today's price where the release's default is not known or its recipes set 1.
        expert_parallel_layout: where an expert-parallel group's members sit, one of
            ``EXPERT_PARALLEL_LAYOUTS``: ``folded`` (default; Megatron-Core >= 0.10's separate
            expert RankGenerator tp=etp, ep, dp: members ``etp`` ranks apart, ``cost_models.moe``)
            or ``carved_from_dp`` (Megatron-Core <= 0.9: EP cut out of data parallelism in the
            rank order tp-cp-ep-dp-pp, core_r0.9.0 megatron/core/parallel_state.py:362
            RankGenerator, so members ``tp * cp`` ranks apart). Sets
            ``ParallelConfig.ep_carved_from_dp``.
        recipe_recompute: what a run on this stack recomputes when it does not say, for a stack
            without per-layout performance presets (``stack_presets``): the recomputation of the
            stack's own published performance recipes, one of ``RECIPE_RECOMPUTE``. Default
            ``none``.
        zero2_gather_every_microbatch: ZeRO-2 is FSDP with the parameters sharded at rest: every
            micro-batch's forward gathers each layer's parameters again (they stay whole through
            that micro-batch's backward and are resharded after it): PyTorch FSDP
            ``ShardingStrategy.SHARD_GRAD_OP``, FSDP2 ``reshard_after_forward=False`` (torchtitan's
            ``never``), FairScale FSDP ``reshard_after_forward=False``. False: ZeRO-2 keeps the
            16-bit parameters whole and all-gathers the updated shards once, after the optimizer
            step (DeepSpeed stage 2; Megatron-FSDP ``optim_grads``, which shards only gradients
            and optimizer states).
        lacks: what the release cannot run, names of ``STACK_FEATURES`` (empty = everything
            the model prices): Megatron-LM 2019 has no pipeline, ZeRO or sequence parallelism,
            DeepSpeed's pipeline engine refuses ZeRO-2/3 and interleaving, no 2019-2023 release
            has context parallelism. ``simulate`` refuses a plan that uses one
            (``simulator.stack_support.check_stack_features``) and the planner does not search
            it; each stack file cites where the release shows the absence.
        context_parallel_kind: the context-parallel flavour the release runs when a run does not
            choose one, one of ``CP_KINDS``: Megatron-Core (and NeMo / Megatron-Bridge on it) default
            to the ring (``--cp-comm-type`` default ``["p2p"]``), torchtitan all-gathers K/V
            (``allgather``). ``paraplan simulate`` without ``--cp-kind``, the API's ``simulate``
            without ``cp_kind`` and ``paraplan plan`` without ``--fix cp_kind`` run it
            (``simulator.stack_defaults.stack_cp_kind``); read only where cp > 1. Default ``ring``.
        context_parallel_kinds: the context-parallel flavours the release can run at all, names of
            ``CP_KINDS`` including ``context_parallel_kind``: ``simulate`` refuses a ``--cp-kind``
            outside them and ``plan`` a ``--fix cp_kind`` outside them
            (``simulator.stack_defaults.check_stack_cp_kind``); each stack file cites its set.
            Default: every flavour (a stack that does not say is not restricted).
        cp_allgather_backward: what the release's all-gather CP keeps for backward, one of
            ``CP_ALLGATHER_BACKWARD``: ``regather`` (the local K/V; backward all-gathers them
            again, then reduce-scatters dK/dV) or ``saved`` (the gathered K/V, ``cp`` x the local
            chunk, an activation of every layer in flight; backward only reduce-scatters; a layer
            recomputed in full gathers again in its recomputed forward). Read only where
            ``cp_kind`` is ``allgather`` and cp > 1. Default ``regather``.
        cross_entropy: the language-model loss implementation, one of ``CROSS_ENTROPY_IMPLS``
            (Megatron ``--cross-entropy-loss-fusion`` and ``--cross-entropy-fusion-impl``,
            Megatron-Bridge ``model.cross_entropy_loss_fusion`` / ``cross_entropy_fusion_impl``);
            what each moves through HBM per logit is counted in ``cost_models.cross_entropy``.
            Default ``megatron_unfused``: Megatron-Core's own default (``cross_entropy_loss_fusion:
            bool = False``, megatron/core/model_parallel_config.py).
    """

    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    grad_reduce_bytes: float = 4.0
    zero2_grad_reduce: str = "every_microbatch"
    zero01_grad_reduce: str = "last_microbatch"
    tp_comm_overlap: bool = False
    ep_comm_overlap: bool = False
    ep_dispatch_dedup: bool = False
    attention_kernel: str = "auto"
    grad_accumulation_fusion: bool = True
    grad_accumulation_fusion_fp32: bool = False
    sequence_parallel_with_tp: bool = False
    zero3_recompute_gather: bool = False
    cuda_graphs: bool = False
    fp8_recipe: str = "delayed"
    grad_bucket_elements: float = 40e6
    grad_bucket_elements_per_dp: float = 1e6
    param_prefetch_layers_forward: float = 1.0
    param_prefetch_layers_backward: float = 1.0
    param_prefetch_max_elements: float = 0.0
    default_zero_stage: int = 1
    tp_backward_overlap: bool = True
    softmax_fusion: bool = True
    attention_unpad: bool = False
    glu_clamp_eager: bool = False
    expert_output_bias: str = "megatron_eager"
    unfused_block_ops: bool = False
    yarn_rope_eager: bool = False
    pipe_exchange_blocking: bool = False
    pipeline_p2p_overlap: bool = False
    pipeline_scatter_gather: bool = False
    grouped_gemm_streams: int = 1
    bf16_grads_in_fp32: bool = True
    kv_head_replication: bool = False
    zero3_gather_per_tensor: bool = False
    zero3_persistence_threshold_elements: float = 0.0
    collective_per_rank_copies: bool = False
    zero3_grad_reduce: str = "reduce_scatter"
    zero3_under_pipeline: str = "per_microbatch"
    bf16_zero1_grad_reduce: str = "reduce_scatter"
    grad_buffer: str = "fp32"
    offload_weight_bytes: float = 2.0
    fp8_param_gather: bool = False
    zero3_master_params: bool = False
    master_weights: str = "fp32"
    nvfp4_rht_cast_fusion: bool = False
    cross_entropy: str = "megatron_unfused"
    context_parallel_kind: str = "ring"
    context_parallel_kinds: tuple = CP_KINDS
    cp_allgather_backward: str = "regather"
    selective_checkpoint: str = "core_attn"
    recipe_recompute: str = "none"
    moe_probs_in_expert: bool = False
    expert_tp_default: str = "one"
    expert_parallel_layout: str = "folded"
    lacks: tuple = ()
    zero2_gather_every_microbatch: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "lacks", feature_names(self.lacks, "training.lacks"))
        for name, allowed, noun in _TRAINING_CHOICES:
            value = getattr(self, name)
            if value not in allowed:
                raise InputError(f"training.{name}", f"unknown {noun} {value!r}", "choose one of " + ", ".join(allowed))
        # each flavour once, in order, as lacks (the refusal's advice had said "use --cp-kind allgather or
        # use --cp-kind allgather"); none at all is a release without CP: lacks: [context_parallel]
        object.__setattr__(self, "context_parallel_kinds", tuple(dict.fromkeys(self.context_parallel_kinds)))
        if not self.context_parallel_kinds:
            raise InputError("training.context_parallel_kinds", "lists no flavour",
                             "list the flavours the release runs; a release without context parallelism "
                             "says lacks: [context_parallel]")
        for kind in self.context_parallel_kinds:
            if kind not in CP_KINDS:
                raise InputError("training.context_parallel_kinds", f"unknown flavour {kind!r}",
                                 "choose from " + ", ".join(CP_KINDS))
        if self.context_parallel_kind not in self.context_parallel_kinds:
            raise InputError("training.context_parallel_kind", f"{self.context_parallel_kind!r} is not among the "
                             f"flavours the release runs ({', '.join(self.context_parallel_kinds)})",
                             "add it to training.context_parallel_kinds or choose one of them")
        for name in ("grad_reduce_bytes", "offload_weight_bytes"):
            if getattr(self, name) not in (2.0, 4.0):
                raise InputError(f"training.{name}", f"must be 2 or 4, got {shown(getattr(self, name))}")
        if self.fp8_recipe not in FP8_RECIPES:
            raise InputError("training.fp8_recipe", f"unknown recipe {self.fp8_recipe!r}",
                             "choose one of " + ", ".join(FP8_RECIPES))
        for name in ("grad_bucket_elements", "grad_bucket_elements_per_dp", "param_prefetch_max_elements",
                     "zero3_persistence_threshold_elements"):
            require_positive(f"training.{name}", getattr(self, name), allow_zero=True)
        for name in ("param_prefetch_layers_forward", "param_prefetch_layers_backward"):
            value = getattr(self, name)
            require_positive(f"training.{name}", value, allow_zero=True)
            if value > MAX_PREFETCH_LAYERS:
                raise InputError(f"training.{name}", f"must be <= {MAX_PREFETCH_LAYERS}, got {shown(value)}",
                                 "frameworks prefetch one or two layers ahead")
        check_grouped_gemm_streams("training.grouped_gemm_streams", self.grouped_gemm_streams)
        if self.default_zero_stage not in (0, 1, 2, 3):
            raise InputError("training.default_zero_stage", f"must be 0, 1, 2 or 3, got {shown(self.default_zero_stage)}")


def behaviour_error(error: InputError, where: str) -> InputError:
    """``error`` of ``TrainingBehaviour``'s own checks (named ``training.<key>``) named where the
    file sets the behaviour: ``stack <name>.recipes[0].training.master_weights``, not the stack's
    top-level ``training.master_weights``, which may be valid."""
    field_ = error.field
    if field_.startswith("training."):
        field_ = f"{where}.{field_[len('training.'):]}"
    return InputError(field_, error.message, error.fix)


def model_key(name: str) -> str:
    """A model name reduced to lower-case letters and digits ("LLAMA3_70B (Megatron-Bridge)" and
    "llama3-70b" both give "llama370b"), for matching recipe entries."""
    return _model_key(str(name))


@lru_cache(maxsize=4096)
def _model_key(name: str) -> str:
    """``model_key`` of text (memoised: validation keys every recipe of a stack for every row,
    ~28,000 calls in ``validate published``, over a few dozen distinct names)."""
    head = name.split("(")[0]
    return "".join(ch for ch in head.lower() if ch.isalnum())


@dataclass(frozen=True)
class RecipeOverride:
    """Behaviour a release's own recipe for some models sets on top of its defaults (framework
    code, e.g. NeMo's ``conf/training/llama/llama3_70b.yaml`` turning on userbuffers TP overlap).

    Attributes:
        models: model names the recipe is for (matched by ``model_key``).
        training: behaviour -> value (``TrainingBehaviour`` keys).
        source: where the recipe says so.
        gpus: GPU kinds (canonical names, e.g. ``h100-sxm-80gb``, ``gb200``) the recipe is for;
            empty = any.
        dtypes: training dtypes (``bf16``, ``fp8``, ``mxfp8``, ``nvfp4``) the recipe is for;
            empty = any.
    """

    models: tuple[str, ...]
    training: Mapping[str, Any]
    source: str
    gpus: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", tuple(model_key(m) for m in self.models))
        object.__setattr__(self, "training", MappingProxyType(dict(self.training)))
        object.__setattr__(self, "gpus", tuple(str(g).lower() for g in self.gpus))
        object.__setattr__(self, "dtypes", tuple(str(d).lower() for d in self.dtypes))

    def applies_to(self, model_name: str, gpu: str | None = None, dtype: str | None = None) -> bool:
        if model_key(model_name) not in self.models:
            return False
        if self.gpus and (gpu is None or str(gpu).lower() not in self.gpus):
            return False
        return not self.dtypes or (dtype is not None and str(dtype).lower() in self.dtypes)


def _release_key(version) -> str:
    """A release string as profiles compare it: stripped, lower case, no leading ``v``."""
    return str(version).strip().lower().lstrip("v")


_LEADING_NUMBERS = re.compile(r"v?(\d+(?:\.\d+)*)")
#: what may follow a listed release in a release it covers: a patch (``.``), a build or rc
#: (``-``, ``rc``), a local label (``+``)
_COVERED_AFTER = (".", "-", "+", "rc")


#: how sources write a release around its number: a container image reference
#: (``nvcr.io/nvidia/nemo:24.09``: a tag after the last ``:`` that reads as a dotted release; not
#: a digest, ``@sha256:...``, nor ``commit:1234abc``) and Megatron-LM's git tags of
#: Megatron-Core releases (``core_r0.9.0``, ``core_v0.12.0``)
_RELEASE_WRAPPING = re.compile(r"^(?:[^@\s]*:(?=v?\d+(?:\.\d+)+))?(?:core[_-]?[rv](?=\d))?")


def release_parts(version) -> tuple[tuple[int, ...] | None, str]:
    """A release string split into its leading numeric components and the rest (lower case):
    ``'26.04.01'`` -> ((26, 4, 1), ''), ``'v0.5.10.post1'`` -> ((0, 5, 10), '.post1'),
    ``'1.2.0rc6'`` -> ((1, 2, 0), 'rc6'), ``'core_r0.9.0'`` -> ((0, 9, 0), ''),
    ``'nvcr.io/nvidia/nemo:24.09'`` -> ((24, 9), ''); (None, the release key) when it does not
    start with a number (``main``). Components compare as numbers: 26.04.1, 26.4.1 and 26.04.01
    are one release."""
    key = _RELEASE_WRAPPING.sub("", str(version).strip().lower(), count=1)
    m = _LEADING_NUMBERS.match(key)
    if m is None:
        return None, _release_key(version)
    return tuple(int(part) for part in m.group(1).split(".")), key[m.end():]


def _covers_release(listed, version) -> bool:
    """Whether release ``version`` is ``listed`` or a patch, rc, build or local label of it, its
    numbers compared component by component (a text prefix read 26.04.1 as a patch of 26.04 and
    26.04.01 as another release)."""
    (ln, lrest), (vn, vrest) = release_parts(listed), release_parts(version)
    if ln is None or vn is None:
        lv, v = _release_key(listed), _release_key(version)
        return v == lv or any(v.startswith(lv + sep) for sep in _COVERED_AFTER)
    if vn[:len(ln)] != ln:
        return False
    if len(vn) > len(ln):             # more components: a patch of the listed release
        return not lrest
    return vrest == lrest or any(vrest.startswith(lrest + sep) for sep in _COVERED_AFTER)


@dataclass(frozen=True)
class StackSpec:
    """One software stack (framework and release).

    Attributes:
        name: catalog name, e.g. ``megatron-core-0.13``.
        framework: the framework as the validation files name it (``megatron-core``, ``nemo``,
            ``torchtitan``, ``vllm``, ...).
        versions: releases this profile describes (as sources state them: a release, a container
            tag or a year).
        description: one line for people.
        training: training behaviour, None for a serving-only stack.
        serving: serving behaviour (``ServingBehaviour``), None for a training-only stack.
        citations: per behaviour key, where the framework documents it (file and commit, or docs
            page).
        recipes: ``RecipeOverride`` entries: what the release's recipes for particular models set
            on top of its defaults (``training_for``).
        default_when_version_unstated: this profile also describes runs of ``framework`` whose
            source does not state a version (at most one stack per framework may say so, and its
            file says why; ``catalog.stack_for`` reads it).
    """

    name: str
    framework: str
    versions: tuple[str, ...] = ()
    description: str = ""
    training: TrainingBehaviour | None = None
    serving: ServingBehaviour | None = None
    citations: Mapping[str, str] = field(default_factory=dict)
    default_when_version_unstated: bool = False
    recipes: tuple = ()

    def __post_init__(self) -> None:
        if self.training is None and self.serving is None:
            raise InputError(f"stack {self.name}", "has neither a training nor a serving section")
        object.__setattr__(self, "versions", tuple(str(v) for v in self.versions))
        object.__setattr__(self, "citations", MappingProxyType(dict(self.citations)))
        object.__setattr__(self, "recipes", tuple(self.recipes))

    def training_for(self, model_name: str | None = None, gpu: str | None = None,
                     dtype: str | None = None) -> TrainingBehaviour | None:
        """The release's training behaviour for ``model_name`` (on ``gpu`` in ``dtype``): its
        defaults with the overrides of every recipe written for that model, in file order."""
        if self.training is None or model_name is None:
            return self.training
        out = self.training
        for i, recipe in enumerate(self.recipes):
            if recipe.applies_to(model_name, gpu, dtype):
                try:
                    out = replace(out, **dict(recipe.training))
                except InputError as error:     # a value the recipes applied before it make invalid
                    raise behaviour_error(error, f"stack {self.name}.recipes[{i}].training") from None
        return out

    def with_training(self, **behaviour: Any) -> "StackSpec":
        """This stack with ``behaviour`` (``TrainingBehaviour`` keys) set for every run: the
        defaults take the values and no recipe overrides them, as a switch the user sets on the
        command line overrides the stack's behaviour (``paraplan simulate`` / ``plan
        --ep-comm-overlap``). Unknown keys are an ``InputError``."""
        if self.training is None:
            raise InputError("stack", f"{self.name} describes serving only, not training",
                             "pick a training stack (paraplan hardware stacks)")
        unknown = [k for k in behaviour if k not in self.training_keys()]
        if unknown:
            raise InputError(unknown[0], "not a training behaviour of a stack")
        if not behaviour:
            return self
        recipes = tuple(replace(r, training={k: v for k, v in r.training.items() if k not in behaviour})
                        for r in self.recipes)
        return replace(self, training=replace(self.training, **behaviour), recipes=recipes)

    def recipes_for(self, model_name: str, gpu: str | None = None, dtype: str | None = None) -> list:
        """The recipes that apply to ``model_name`` on ``gpu`` in ``dtype``."""
        return [r for r in self.recipes if r.applies_to(model_name, gpu, dtype)]

    @classmethod
    def training_keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(TrainingBehaviour))

    @classmethod
    def serving_keys(cls) -> tuple[str, ...]:
        return ServingBehaviour.keys()

    def lists(self, version: str | None) -> bool:
        """Whether ``version`` is one of this profile's listed releases (case, a leading ``v``
        and leading zeros of a numeric component ignored: 26.4.1 is 26.04.01)."""
        return version is not None and release_parts(version) in {release_parts(x) for x in self.versions}

    def covers(self, version: str | None) -> bool:
        """Whether this profile describes release ``version``: a listed release, or one whose
        numbers extend a listed release's (a patch: 26.04.1 of 26.04), or that follows a listed
        release's with ``.``, ``-``, ``+`` or ``rc`` (0.19.post1, 0.5.1-rc0, 0.6.3+cu118); numbers
        compare component by component (``release_parts``)."""
        return version is not None and any(_covers_release(listed, version) for listed in self.versions)
