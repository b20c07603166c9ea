"""A software stack's documented behaviour as the defaults of a ``ParallelConfig``'s software
fields (``hardware_specs.stacks``): what the framework does unless the user says otherwise.

    config = ParallelConfig(**stack_config_fields(load_stack("megatron-core"), tp=8), tp=8, ...)

The step model never reads a stack's name: it reads these fields.
"""
from __future__ import annotations

from hardware_specs.stack_spec import StackSpec

#: ParallelConfig fields a training stack sets (the rest are plan choices)
STACK_FIELDS = ("overlap_grad_reduce", "overlap_param_gather", "grad_reduce_bytes", "dp_bucket_bytes",
                "tp_comm_overlap", "ep_comm_overlap", "attention_kernel", "flash_attention",
                "grad_accumulation_fusion", "zero3_recompute_gather", "sequence_parallel")


def stack_config_fields(stack: StackSpec, tp: int = 1) -> dict:
    """ParallelConfig keyword arguments for ``stack``'s training behaviour with tensor degree ``tp``
    (sequence parallelism is on with tp > 1 when the stack's recipes turn it on)."""
    t = stack.training
    if t is None:
        from hardware_specs.errors import InputError
        raise InputError("stack", f"{stack.name} describes serving only, not training",
                         "pick a training stack (paraplan hardware stacks)")
    materialized = t.attention_kernel == "materialized"
    return {
        "overlap_grad_reduce": t.overlap_grad_reduce,
        "overlap_param_gather": t.overlap_param_gather,
        "grad_reduce_bytes": t.grad_reduce_bytes,
        "dp_bucket_bytes": t.dp_bucket_bytes,
        "tp_comm_overlap": t.tp_comm_overlap,
        "ep_comm_overlap": t.ep_comm_overlap,
        "attention_kernel": "auto" if materialized else t.attention_kernel,
        "flash_attention": not materialized,
        "grad_accumulation_fusion": t.grad_accumulation_fusion,
        "zero3_recompute_gather": t.zero3_recompute_gather,
        "sequence_parallel": bool(t.sequence_parallel_with_tp and tp > 1),
    }
