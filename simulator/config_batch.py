"""Many parallel configurations as numpy columns: the input of the vectorized step model.

The planner builds a ``ConfigBatch`` from enumerated arrays; the simulator builds one of
length 1 from a ``ParallelConfig``. Both then call the same ``step_model.evaluate``.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from simulator.parallel_config import AttentionKernel, CPKind, ParallelConfig, Recompute, Schedule

RECOMPUTE_CODES = {Recompute.NONE: 0, Recompute.SELECTIVE: 1, Recompute.FULL: 2}
SCHEDULE_CODES = {s: i for i, s in enumerate(Schedule)}
CP_KIND_CODES = {k: i for i, k in enumerate(CPKind)}
ATTENTION_KERNEL_CODES = {k: i for i, k in enumerate(AttentionKernel)}


@dataclass(frozen=True)
class ConfigBatch:
    """Columns of equal length; ``dtype`` is shared by the whole batch (the planner groups by it)."""

    dp: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    vpp: np.ndarray
    micro_batch: np.ndarray
    global_batch: np.ndarray
    zero_stage: np.ndarray
    recompute: np.ndarray            # 0 none, 1 selective, 2 full
    sequence_parallel: np.ndarray    # bool
    schedule: np.ndarray             # index into Schedule
    overlap_grad_reduce: np.ndarray  # bool
    overlap_param_gather: np.ndarray
    tp_comm_overlap: np.ndarray
    cp_kind: np.ndarray              # index into CPKind
    attention_kernel: np.ndarray     # index into AttentionKernel
    moe_load_imbalance: np.ndarray
    flash_attention: np.ndarray
    grad_accumulation_fusion: np.ndarray
    zero3_recompute_gather: np.ndarray
    first_stage_layers: np.ndarray
    last_stage_layers: np.ndarray
    ep_comm_overlap: np.ndarray
    grad_reduce_bytes: np.ndarray
    grad_bucket_elements: np.ndarray
    grad_bucket_elements_per_dp: np.ndarray
    grad_reduce_every_microbatch: np.ndarray
    param_prefetch_forward: np.ndarray
    param_prefetch_backward: np.ndarray
    param_prefetch_max_elements: np.ndarray
    tp_backward_overlap: np.ndarray
    softmax_fusion: np.ndarray
    param_gather_per_tensor: np.ndarray
    cuda_graphs: np.ndarray
    uneven_layers: np.ndarray
    dtype: str = "bf16"

    def __len__(self) -> int:
        return int(self.dp.shape[0])

    @classmethod
    def from_configs(cls, configs: list[ParallelConfig]) -> "ConfigBatch":
        if not configs:
            raise ValueError("empty configuration list")
        dtypes = {c.dtype for c in configs}
        if len(dtypes) != 1:
            raise ValueError("a ConfigBatch holds one dtype; group configurations by dtype")

        def col(name, conv=lambda v: v, dt=np.int64):
            return np.array([conv(getattr(c, name)) for c in configs], dtype=dt)

        return cls(
            dp=col("dp"), tp=col("tp"), pp=col("pp"), cp=col("cp"), ep=col("ep"), etp=col("etp"),
            vpp=col("vpp"), micro_batch=col("micro_batch"), global_batch=col("global_batch"),
            zero_stage=col("zero_stage"), recompute=col("recompute", RECOMPUTE_CODES.get),
            sequence_parallel=col("sequence_parallel", bool, bool),
            schedule=col("schedule", SCHEDULE_CODES.get),
            overlap_grad_reduce=col("overlap_grad_reduce", bool, bool),
            overlap_param_gather=col("overlap_param_gather", bool, bool),
            tp_comm_overlap=col("tp_comm_overlap", bool, bool),
            cp_kind=col("cp_kind", CP_KIND_CODES.get),
            attention_kernel=col("attention_kernel", ATTENTION_KERNEL_CODES.get),
            moe_load_imbalance=col("moe_load_imbalance", float, float),
            flash_attention=col("flash_attention", bool, bool),
            grad_accumulation_fusion=col("grad_accumulation_fusion", bool, bool),
            zero3_recompute_gather=col("zero3_recompute_gather", bool, bool),
            first_stage_layers=col("first_stage_layers"), last_stage_layers=col("last_stage_layers"),
            ep_comm_overlap=col("ep_comm_overlap", bool, bool),
            grad_reduce_bytes=col("grad_reduce_bytes", float, float),
            grad_bucket_elements=col("grad_bucket_elements", float, float),
            grad_bucket_elements_per_dp=col("grad_bucket_elements_per_dp", float, float),
            grad_reduce_every_microbatch=col("grad_reduce_every_microbatch", bool, bool),
            param_prefetch_forward=col("param_prefetch_forward", float, float),
            param_prefetch_backward=col("param_prefetch_backward", float, float),
            param_prefetch_max_elements=col("param_prefetch_max_elements", float, float),
            tp_backward_overlap=col("tp_backward_overlap", bool, bool),
            softmax_fusion=col("softmax_fusion", bool, bool),
            param_gather_per_tensor=col("param_gather_per_tensor", bool, bool),
            cuda_graphs=col("cuda_graphs", bool, bool),
            uneven_layers=col("uneven_layers", bool, bool),
            dtype=dtypes.pop(),
        )

    def take(self, index) -> "ConfigBatch":
        """Rows ``index`` (mask or integer array) as a new batch."""
        # a field given as one scalar for the whole batch (the planner's flash_attention) stays one
        kwargs = {f.name: (v[index] if np.ndim(v) else v)
                  for f in fields(self) if f.name != "dtype" for v in (getattr(self, f.name),)}
        return ConfigBatch(dtype=self.dtype, **kwargs)

    def row(self, i: int) -> ParallelConfig:
        """Row ``i`` as a validated ``ParallelConfig``."""
        inv_rc = {v: k for k, v in RECOMPUTE_CODES.items()}
        schedules = list(Schedule)
        cp_kinds = list(CPKind)
        kernels = list(AttentionKernel)
        return ParallelConfig(
            dp=int(self.dp[i]), tp=int(self.tp[i]), pp=int(self.pp[i]), cp=int(self.cp[i]),
            ep=int(self.ep[i]), etp=int(self.etp[i]), vpp=int(self.vpp[i]),
            micro_batch=int(self.micro_batch[i]), global_batch=int(self.global_batch[i]),
            zero_stage=int(self.zero_stage[i]), recompute=inv_rc[int(self.recompute[i])],
            sequence_parallel=bool(self.sequence_parallel[i]), dtype=self.dtype,
            schedule=schedules[int(self.schedule[i])],
            overlap_grad_reduce=bool(self.overlap_grad_reduce[i]),
            overlap_param_gather=bool(self.overlap_param_gather[i]),
            tp_comm_overlap=bool(self.tp_comm_overlap[i]), cp_kind=cp_kinds[int(self.cp_kind[i])],
            attention_kernel=kernels[int(self.attention_kernel[i])],
            moe_load_imbalance=float(self.moe_load_imbalance[i]),
            flash_attention=bool(self.flash_attention[i]),
            grad_accumulation_fusion=bool(self.grad_accumulation_fusion[i]),
            zero3_recompute_gather=bool(self.zero3_recompute_gather[i]),
            first_stage_layers=int(self.first_stage_layers[i]), last_stage_layers=int(self.last_stage_layers[i]),
            ep_comm_overlap=bool(self.ep_comm_overlap[i]), grad_reduce_bytes=float(self.grad_reduce_bytes[i]),
            grad_bucket_elements=float(self.grad_bucket_elements[i]),
            grad_bucket_elements_per_dp=float(self.grad_bucket_elements_per_dp[i]),
            grad_reduce_every_microbatch=bool(self.grad_reduce_every_microbatch[i]),
            param_prefetch_forward=float(self.param_prefetch_forward[i]),
            param_prefetch_backward=float(self.param_prefetch_backward[i]),
            param_prefetch_max_elements=float(self.param_prefetch_max_elements[i]),
            tp_backward_overlap=bool(self.tp_backward_overlap[i]), softmax_fusion=bool(self.softmax_fusion[i]),
            param_gather_per_tensor=bool(self.param_gather_per_tensor[i]), cuda_graphs=bool(self.cuda_graphs[i]),
            uneven_layers=bool(self.uneven_layers[i]),
        )
