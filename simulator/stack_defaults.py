"""A software stack's documented behaviour as the defaults of a ``ParallelConfig``'s software
fields (``hardware_specs.stacks``): what the framework does unless the user says otherwise.

    config = ParallelConfig(**stack_config_fields(load_stack("megatron-core"), tp=8), tp=8, ...)

The step model never reads a stack's name: it reads these fields.
"""
from __future__ import annotations

import numpy as np

from hardware_specs.errors import InputError
from hardware_specs.stack_spec import SELECTIVE_CHECKPOINTS, StackSpec

#: ParallelConfig fields a training stack sets (the rest are plan choices)
STACK_FIELDS = ("overlap_grad_reduce", "overlap_param_gather", "grad_reduce_bytes", "grad_bucket_elements",
                "grad_bucket_elements_per_dp", "grad_reduce_every_microbatch", "param_prefetch_forward",
                "param_prefetch_backward", "param_prefetch_max_elements", "tp_comm_overlap", "tp_backward_overlap",
                "ep_comm_overlap", "ep_dispatch_dedup", "attention_kernel", "flash_attention", "softmax_fusion",
                "attention_unpad", "glu_clamp_eager", "expert_output_bias", "unfused_block_ops", "yarn_rope_eager", "pipe_exchange_blocking", "pipeline_p2p_overlap", "pipeline_scatter_gather", "grouped_gemm_streams", "cross_entropy", "grad_accumulation_fusion", "zero3_recompute_gather", "param_gather_per_tensor", "cuda_graphs",
                "fp8_current_scaling", "zero3_persistence_elements", "collective_per_rank_copies",
                "zero3_grad_all_reduce", "zero1_grad_all_reduce", "grad_buffer_bytes", "offload_weight_bytes",
                "fp8_param_gather",
                "zero3_master_params", "master_weight_bytes", "moments_in_param_dtype", "nvfp4_rht_cast_fusion",
                "selective_modules", "moe_probs_in_expert", "ep_carved_from_dp", "zero3_once_per_step", "kv_head_replication",
                "zero2_grad_last_microbatch", "zero2_gather_every_microbatch", "cp_allgather_saves_kv", "stack_lacks")
#: dtypes whose gradients a stack reduces as bf16 ones (FP8 recipes keep bf16 parameters)
_BF16_LIKE = ("bf16", "fp8", "mxfp8", "nvfp4")
#: dtypes whose weights Megatron's ``--fp8-param-gather`` keeps as FP8 tensors only
_FP8_PARAM_DTYPES = ("fp8", "mxfp8")


def _accumulates_16bit_grads_in_fp32(dtype: str, grad_bytes: float) -> bool:
    """Whether a run in ``dtype`` whose gradients the stack reduces in ``grad_bytes`` bytes (as
    ``stack_config_fields`` resolves them) accumulates 16-bit weight gradients into fp32 main
    gradients: Megatron-LM 2022's ``accumulate_allreduce_grads_in_fp32``, which ``--bf16``
    forces and fp16 runs state (NVIDIA/Megatron-LM@d898a8991d megatron/arguments.py lines
    156-188). An fp32 / tf32 run has no 16-bit gradients (the flag stays off there)."""
    return dtype not in ("fp32", "tf32") and grad_bytes == 4.0


def master_weight_fields(master_weights: str, dtype: str, fp8_param_gather: bool) -> dict:
    """``ParallelConfig.master_weight_bytes`` and ``moments_in_param_dtype`` for a stack whose
    optimizer keeps its weights as ``master_weights`` (``TrainingBehaviour.master_weights``) in a
    run in ``dtype``, with FP8 primary weights when ``fp8_param_gather`` (as resolved for the run).

    NVIDIA/NeMo@24.09-alpha.rc0 (and @r2.0.0rc1) nemo/collections/nlp/models/language_modeling/
    megatron_base_model.py ``setup_optimization`` (lines 803-812 / 797-806) picks Apex's storage:
    FP8 primary weights (``fp8_params``) -> ``store_params=True``, a master copy in the optimizer's
    dtype; optimizer dtype == model dtype -> ``store_params=False``, none; an fp32 optimizer over
    bf16 weights -> ``store_param_remainders=True``, a 2-byte remainder; otherwise an fp32 copy.
    fp32 / tf32 runs have no separate master (``memory.model_state_bytes`` ``full_precision``)."""
    master, param_moments = 4.0, False
    if master_weights == "bf16_remainder" and dtype in _BF16_LIKE and not fp8_param_gather:
        master = 2.0
    elif master_weights == "param_dtype" and dtype not in ("fp32", "tf32"):
        master, param_moments = (2.0 if fp8_param_gather else 0.0), True
    return {"master_weight_bytes": master, "moments_in_param_dtype": param_moments}


def stack_config_fields(stack: StackSpec, dtype: str = "bf16", model_name: str | None = None,
                        gpu: str | None = None) -> dict:
    """ParallelConfig keyword arguments for ``stack``'s training behaviour for a run in ``dtype``
    (the plan's degrees, batch, ZeRO stage and recomputation are not the stack's), with the
    release's recipe for ``model_name`` applied (``StackSpec.training_for``)."""
    t = stack.training_for(model_name, gpu, dtype)
    if t is None:
        from hardware_specs.errors import InputError
        raise InputError("stack", f"{stack.name} describes serving only, not training",
                         "pick a training stack (paraplan hardware stacks)")
    materialized = t.attention_kernel == "materialized"
    if dtype in ("fp32", "tf32"):
        grad_bytes = 4.0
    elif dtype in _BF16_LIKE and t.bf16_grads_in_fp32:
        grad_bytes = 4.0
    else:
        grad_bytes = float(t.grad_reduce_bytes)
    # a "reduce" buffer holds the gradients in the dtype they reduce in (fp32 or the 16-bit
    # parameter dtype; FP8 recipes' parameters are bf16); "fp16_reduce" does so in fp16 runs only
    reduces = t.grad_buffer == "reduce" or (t.grad_buffer == "fp16_reduce" and dtype == "fp16")
    grad_buffer_bytes = grad_bytes if reduces else 4.0
    return {
        "overlap_grad_reduce": t.overlap_grad_reduce,
        "overlap_param_gather": t.overlap_param_gather,
        "grad_reduce_bytes": grad_bytes,
        "grad_bucket_elements": float(t.grad_bucket_elements),
        "grad_bucket_elements_per_dp": float(t.grad_bucket_elements_per_dp),
        "grad_reduce_every_microbatch": t.zero01_grad_reduce == "every_microbatch",
        "param_prefetch_forward": float(t.param_prefetch_layers_forward),
        "param_prefetch_backward": float(t.param_prefetch_layers_backward),
        "param_prefetch_max_elements": float(t.param_prefetch_max_elements),
        "tp_comm_overlap": t.tp_comm_overlap,
        "tp_backward_overlap": t.tp_backward_overlap,
        "ep_comm_overlap": t.ep_comm_overlap,
        "ep_dispatch_dedup": t.ep_dispatch_dedup,
        "attention_kernel": "auto" if materialized else t.attention_kernel,
        "flash_attention": not materialized,
        "softmax_fusion": t.softmax_fusion,
        "attention_unpad": t.attention_unpad,
        "glu_clamp_eager": t.glu_clamp_eager,
        "expert_output_bias": t.expert_output_bias,
        "unfused_block_ops": t.unfused_block_ops,
        "yarn_rope_eager": t.yarn_rope_eager,
        "pipe_exchange_blocking": t.pipe_exchange_blocking,
        "pipeline_p2p_overlap": t.pipeline_p2p_overlap,
        "pipeline_scatter_gather": t.pipeline_scatter_gather,
        "grouped_gemm_streams": t.grouped_gemm_streams,
        "cross_entropy": t.cross_entropy,
        "grad_accumulation_fusion": t.grad_accumulation_fusion or (t.grad_accumulation_fusion_fp32
                                                                   and _accumulates_16bit_grads_in_fp32(dtype, grad_bytes)),
        "zero3_recompute_gather": t.zero3_recompute_gather,
        "param_gather_per_tensor": t.zero3_gather_per_tensor,
        "cuda_graphs": t.cuda_graphs,
        # Megatron-Core's ``tensorwise`` recipe is Transformer Engine's per-tensor current scaling
        "fp8_current_scaling": t.fp8_recipe == "tensorwise",
        "zero3_persistence_elements": float(t.zero3_persistence_threshold_elements),
        "collective_per_rank_copies": t.collective_per_rank_copies,
        "zero3_grad_all_reduce": t.zero3_grad_reduce == "all_reduce",
        # the stack's bf16 ZeRO-1 with the optimizer on the GPU; a plan that offloads it reduce-scatters
        # (step_model.zero1_reduces_whole: DeepSpeed builds no BF16_Optimizer under ZeRO-Offload)
        "zero1_grad_all_reduce": dtype == "bf16" and t.bf16_zero1_grad_reduce == "all_reduce",
        "grad_buffer_bytes": grad_buffer_bytes,
        # an fp32 / tf32 run's weights are fp32 on both sides of the link
        "offload_weight_bytes": 4.0 if dtype in ("fp32", "tf32") else float(t.offload_weight_bytes),
        "fp8_param_gather": t.fp8_param_gather and dtype in _FP8_PARAM_DTYPES,
        "zero3_master_params": t.zero3_master_params,
        **master_weight_fields(t.master_weights, dtype, t.fp8_param_gather and dtype in _FP8_PARAM_DTYPES),
        "nvfp4_rht_cast_fusion": t.nvfp4_rht_cast_fusion,
        "selective_modules": SELECTIVE_CHECKPOINTS[t.selective_checkpoint],
        "moe_probs_in_expert": t.moe_probs_in_expert,
        "ep_carved_from_dp": t.expert_parallel_layout == "carved_from_dp",
        "zero3_once_per_step": t.zero3_under_pipeline == "once_per_step",
        "kv_head_replication": t.kv_head_replication,
        "zero2_grad_last_microbatch": t.zero2_grad_reduce == "last_microbatch",
        "zero2_gather_every_microbatch": t.zero2_gather_every_microbatch,
        "cp_allgather_saves_kv": t.cp_allgather_backward == "saved",
        "stack_lacks": t.lacks,
    }


def stack_expert_tp(stack: StackSpec, tp: int, is_moe: bool, model_name: str | None = None,
                    gpu: str | None = None, dtype: str | None = None, ep: int = 1) -> int:
    """The expert tensor-parallel degree of a run on ``stack`` at expert-parallel degree ``ep``
    that does not state one: ``tp`` for an MoE model where the release splits the experts over the
    tensor-parallel group (``TrainingBehaviour.expert_tp_default`` ``tp``: Megatron-Core and NeMo;
    ``tp_without_ep`` at ep 1: torchtitan 0.3.0, ``paraplan.exports.torchtitan.expert_tp``), else 1."""
    if not is_moe:
        return 1
    return expert_tp_for(stack.training_for(model_name, gpu, dtype).expert_tp_default, tp, ep)


def expert_tp_for(mode: str, tp, ep):
    """The expert tensor-parallel degree an ``expert_tp_default`` ``mode``
    (``hardware_specs.stack_spec.EXPERT_TP_DEFAULTS``) gives at tensor degree ``tp`` and
    expert-parallel degree ``ep``: ``tp`` for ``"tp"`` (Megatron-Core and NeMo), 1 for ``"one"``,
    and for ``"tp_without_ep"`` ``tp`` at ep 1 and 1 with ep > 1 (torchtitan 0.3.0:
    ``expert_param_placement_dense`` shards w1/w3 and w2 over the TP axis, ``_sparse`` splits the
    experts over EP only). ``tp`` and ``ep`` may be ints (an int back) or int arrays, broadcast
    against each other (an int64 array back: the plan search's rows)."""
    tp, ep = np.broadcast_arrays(np.asarray(tp, dtype=np.int64), np.asarray(ep, dtype=np.int64))
    if mode == "tp":
        out = tp
    elif mode == "one":
        out = np.ones_like(tp)
    elif mode == "tp_without_ep":
        out = np.where(ep == 1, tp, 1)
    else:
        raise ValueError(f"expert_tp_default {mode!r}: not one of the stack's modes")
    return int(out) if out.ndim == 0 else np.array(out, dtype=np.int64)


def check_default_expert_tp(stack: StackSpec, model, gpu: str | None, dtype: str | None, dp: int, cp: int,
                            tp: int, ep: int, etp: int, flag: str = "--etp ") -> None:
    """Refuse, saying where it came from, a stack-default expert TP (``stack_expert_tp``: tp) whose
    expert groups do not tile the ranks (ep*etp must divide dp*cp*tp, ``check_config``), where etp 1
    would: a release that folds EP (Megatron-Core >= 0.10) takes etp 1 (``flag`` names the option:
    ``--etp `` for the command, ``etp=`` for the API and sweeps); one that carves EP out of data
    parallelism (Megatron-Core <= 0.9) runs etp = tp only and needs an ep dividing dp
    (``check_config``). The one check of ``paraplan simulate``, the API's simulate and sweeps, so
    they say the same. An ep that does not divide the experts is ``check_config``'s own error (an
    etp would not fix it); so is a default that fits, or an ep that no etp fits."""
    moe = getattr(model, "moe", None)
    ranks = dp * cp * tp
    if moe is None or moe.num_experts % ep or etp <= 1 or ranks % (ep * etp) == 0 or ranks % ep:
        return
    folded = stack_config_fields(stack, dtype or "bf16", model.name, gpu).get("ep_carved_from_dp") is not True
    what = (f"{etp} is {stack.name}'s default (expert_tp_default: the experts split over the tp group), and "
            f"ep*etp = {ep}*{etp} does not divide dp*cp*tp = {ranks}")
    fix = (f"{flag}1: whole experts on each expert rank, MoE parallel folding" if folded else
           f"an ep dividing dp = {dp}: {stack.name} carves EP out of data parallelism at etp = tp")
    raise InputError("etp", what, fix)


def searched_expert_tp(stack: StackSpec, is_moe: bool, model_name: str | None = None, gpu: str | None = None,
                       dtype: str | None = None) -> tuple[str, ...]:
    """The expert tensor-parallel choices a search of an MoE model on ``stack`` runs
    (``planners.search_space.SearchConstraints.expert_tp_choices``: ``"tp"``, the row's tp, or
    ``"one"``), the stack's default first (``stack_expert_tp``). Where the release folds the
    expert groups over the data, context and tensor ranks (``expert_parallel_layout`` ``folded``:
    Megatron-Core >= 0.10, whose --expert-tensor-parallel-size the user may set, MoE parallel
    folding, arXiv:2504.14960, with etp 1 its usual choice), etp 1 is searched besides a default
    of tp; where EP is carved out of data parallelism (``carved_from_dp``: Megatron-Core <= 0.9,
    which runs etp = tp) only the default. A dense model: ``("one",)``."""
    if not is_moe:
        return ("one",)
    t = stack.training_for(model_name, gpu, dtype)
    default = t.expert_tp_default
    if default == "tp_without_ep":       # torchtitan: no expert-TP setting, the rule only
        return (default,)
    folded = t.expert_parallel_layout == "folded"
    return tuple(dict.fromkeys((default, "one") if folded else (default,)))


def stack_sequence_parallel(stack: StackSpec, tp: int, model_name: str | None = None, gpu: str | None = None,
                            dtype: str | None = None, moe: bool = False) -> bool:
    """Whether the stack's recipes run Megatron sequence parallelism at tensor degree ``tp``: where
    they say so, and for a model with MoE layers (``moe``) on a stack that cannot run them at
    tp > 1 without it (``lacks`` ``moe_tp_without_sp``: Megatron-Core)."""
    t = stack.training_for(model_name, gpu, dtype)
    return bool(t is not None and tp > 1 and (t.sequence_parallel_with_tp or (moe and "moe_tp_without_sp" in t.lacks)))



def stack_zero_stage(stack: StackSpec, dp: int, cp: int = 1, model_name: str | None = None,
                     gpu: str | None = None, dtype: str | None = None) -> int:
    """The ZeRO stage a run on ``stack`` uses when the user does not say: the stack's documented
    ``default_zero_stage`` for this model, GPU and dtype (``StackSpec.training_for``: a recipe's
    override, e.g. Megatron-Bridge's Megatron-FSDP presets, wins over the release's default);
    0 where there is nothing to shard over (``dp * cp`` is 1) or the stack has no training
    behaviour. The same rule ``paraplan validate published`` applies to a row that states no
    sharding, and ``paraplan simulate``, the API's ``simulate`` and ``search: simulate`` sweeps
    apply when no ZeRO stage is given."""
    if dp * cp <= 1:
        return 0
    t = stack.training_for(model_name, gpu, dtype)
    return int(t.default_zero_stage) if t is not None else 0


def stack_cp_kind(stack: StackSpec, model_name: str | None = None, gpu: str | None = None,
                  dtype: str | None = None) -> str:
    """The context-parallel flavour a run on ``stack`` uses when the user does not choose one: the
    release's documented ``context_parallel_kind`` (``CPKind`` name; a recipe's override for this
    model, GPU and dtype wins, ``StackSpec.training_for``), ``ring`` for a stack without training
    behaviour. Megatron-Core's ``--cp-comm-type`` defaults to ``p2p`` (the ring), torchtitan
    all-gathers K/V. ``paraplan simulate``, the API's ``simulate`` and ``paraplan plan`` apply it;
    it matters only at cp > 1."""
    t = stack.training_for(model_name, gpu, dtype)
    return str(t.context_parallel_kind) if t is not None else "ring"


def check_stack_cp_kind(stack: StackSpec | None, kind, model_name: str | None = None, gpu: str | None = None,
                        dtype: str | None = None, flag: str = "--cp-kind ") -> None:
    """Raise ``InputError`` where ``stack`` cannot run the context-parallel flavour ``kind``: it is
    not among its ``TrainingBehaviour.context_parallel_kinds`` (torchtitan all-gathers K/V, it
    runs no Ulysses). No stack or no training behaviour: nothing to check; a stack that lacks
    context parallelism altogether is refused by ``check_stack_features`` instead."""
    t = stack.training_for(model_name, gpu, dtype) if stack is not None else None
    name = str(getattr(kind, "value", kind)).strip().lower()
    if t is None or name in t.context_parallel_kinds or "context_parallel" in t.lacks:
        return
    raise InputError("cp_kind", f"the {stack.name} stack runs no {name} context parallelism (its "
                     f"training.context_parallel_kinds: {', '.join(t.context_parallel_kinds)})",
                     " or ".join(f"use {flag}{k}" for k in t.context_parallel_kinds) + ", or another --stack")


def run_cp_kind(cp: int, given=None, stack: StackSpec | None = None, model_name: str | None = None,
                gpu: str | None = None, dtype: str | None = None) -> str:
    """The context-parallel flavour a run of ``cp`` ranks prices (``CPKind`` name): ``given``
    (a name or ``CPKind``; None: not given), else the stack's ``context_parallel_kind``
    (``stack_cp_kind``; ``ring`` without a stack) at cp > 1, and ``ring`` at cp 1 when none is
    given (nothing runs). The one rule of ``paraplan simulate`` without --cp-kind, the API's
    ``simulate``, ``search: simulate`` sweeps, ``paraplan plan``'s rows and the simulate command
    it prints; ``simulate`` refuses a given flavour other than ring at cp 1 on its own."""
    if given is not None:
        if int(cp) > 1:
            check_stack_cp_kind(stack, given, model_name, gpu, dtype)
        return str(getattr(given, "value", given)).strip().lower()
    if int(cp) <= 1 or stack is None:
        return "ring"
    return stack_cp_kind(stack, model_name, gpu, dtype)
