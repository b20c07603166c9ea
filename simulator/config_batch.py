"""Many parallel configurations as numpy columns: the input of the vectorized step model.

The planner builds a ``ConfigBatch`` from enumerated arrays; the simulator builds one of
length 1 from a ``ParallelConfig``. Both then call the same ``step_model.evaluate``.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from cost_models.cross_entropy import CROSS_ENTROPY_CODES
from cost_models.memory import MODULE_BITS
from cost_models.moe import EXPERT_OUTPUT_BIAS_CODES
from hardware_specs.stack_spec import CROSS_ENTROPY_IMPLS, EXPERT_OUTPUT_BIAS_IMPLS
from simulator.parallel_config import (RECOMPUTE_MODULES, AttentionKernel, CPKind, ParallelConfig, Recompute,
                                       RecomputeMethod, Schedule)
from simulator.stack_support import lacks_mask, lacks_names

RECOMPUTE_CODES = {Recompute.NONE: 0, Recompute.SELECTIVE: 1, Recompute.FULL: 2}
SCHEDULE_CODES = {s: i for i, s in enumerate(Schedule)}
CP_KIND_CODES = {k: i for i, k in enumerate(CPKind)}
ATTENTION_KERNEL_CODES = {k: i for i, k in enumerate(AttentionKernel)}
RECOMPUTE_METHOD_CODES = {k: i for i, k in enumerate(RecomputeMethod)}


def modules_mask(names) -> int:
    """The ``recompute_modules`` bit mask of a tuple of module names."""
    return sum(MODULE_BITS[n] for n in names)


def modules_names(mask: int) -> tuple[str, ...]:
    """The module names of a ``recompute_modules`` bit mask."""
    return tuple(n for n in RECOMPUTE_MODULES if int(mask) & MODULE_BITS[n])


def gpus_on_a_node(world, gpus_per_node: int):
    """The GPUs of a job of ``world`` GPUs on its fullest node (numpy-friendly, float):
    min(world, gpus_per_node). Jobs are placed on whole nodes in rank order, so a job smaller
    than a node holds that many of one node's GPUs and leaves the node's other GPUs, and their
    share of the host (its PCIe uplinks, memory bandwidth and memory), to something else."""
    return np.minimum(np.asarray(world, dtype=float), float(gpus_per_node))


def node_host_share(gpus_on_node, gpus_per_node: int, gpus_per_host: int | None):
    """The share of a node's host resources that ``gpus_on_node`` of its GPUs can use (numpy-
    friendly): their hosts' share of the node, ceil(gpus_on_node / gpus_per_host) x gpus_per_host
    / gpus_per_node. A node that is one host (a DGX: gpus_per_host = gpus_per_node, or unstated)
    gives all of it to any job on it; a GB200 NVL72 rack states its 36 Grace CPUs' memory and
    bandwidth as one 72-GPU node of 18 four-GPU trays, so a 4-GPU job has one tray's 1/18."""
    per_host = float(gpus_per_host or gpus_per_node)
    hosts = np.ceil(np.asarray(gpus_on_node, dtype=float) / per_host)
    return np.minimum(hosts * per_host / float(gpus_per_node), 1.0)


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
    ep_dispatch_dedup: np.ndarray
    grad_reduce_bytes: np.ndarray
    grad_bucket_elements: np.ndarray
    grad_bucket_elements_per_dp: np.ndarray
    grad_reduce_every_microbatch: np.ndarray
    param_prefetch_forward: np.ndarray
    param_prefetch_backward: np.ndarray
    param_prefetch_max_elements: np.ndarray
    tp_backward_overlap: np.ndarray
    softmax_fusion: np.ndarray
    softmax_scale_pass: np.ndarray
    pipe_exchange_blocking: np.ndarray
    attention_unpad: np.ndarray
    glu_clamp_eager: np.ndarray
    cross_entropy: np.ndarray        # index into CROSS_ENTROPY_IMPLS
    param_gather_per_tensor: np.ndarray
    cuda_graphs: np.ndarray
    zero3_persistence_elements: np.ndarray
    collective_per_rank_copies: np.ndarray
    zero3_grad_all_reduce: np.ndarray
    zero1_grad_all_reduce: np.ndarray
    uneven_layers: np.ndarray
    recompute_num_layers: np.ndarray = None
    recompute_method: np.ndarray = None       # index into RecomputeMethod
    recompute_layers_decrement: np.ndarray = None
    recompute_modules: np.ndarray = None      # bit mask of MODULE_BITS
    selective_modules: np.ndarray = None      # bit mask of MODULE_BITS: the stack's selective checkpointing
    offload_activation_layers: np.ndarray = None
    offload_optimizer_fraction: np.ndarray = None
    zero_shard_group: np.ndarray = None       # 0 = all dp*cp ranks
    pipeline_layout: np.ndarray = None        # object array of layout strings ("" = none)
    loss_chunk_tokens: np.ndarray = None
    optimizer_moment_bytes: np.ndarray = None
    fp8_current_scaling: np.ndarray = None
    grad_buffer_bytes: np.ndarray = None
    offload_weight_bytes: np.ndarray = None   # bytes a parameter the host's optimizer step sends back
    fp8_param_gather: np.ndarray = None
    zero3_master_params: np.ndarray = None
    master_weight_bytes: np.ndarray = None
    moments_in_param_dtype: np.ndarray = None
    nvfp4_rht_cast_fusion: np.ndarray = None
    grouped_gemm_streams: np.ndarray = None
    unfused_block_ops: np.ndarray = None
    yarn_rope_eager: np.ndarray = None
    moe_probs_in_expert: np.ndarray = None
    ep_carved_from_dp: np.ndarray = None
    zero3_once_per_step: np.ndarray = None
    zero2_grad_last_microbatch: np.ndarray = None
    zero2_gather_every_microbatch: np.ndarray = None
    cp_allgather_saves_kv: np.ndarray = None
    kv_head_replication: np.ndarray = None    # bool, the stack's: read by no cost, kept for row()
    pipeline_p2p_overlap: np.ndarray = None
    pipeline_scatter_gather: np.ndarray = None
    expert_output_bias: np.ndarray = None     # index into EXPERT_OUTPUT_BIAS_IMPLS
    stack_lacks: np.ndarray = None            # bit mask of stack_support.FEATURE_BITS: read by no cost, kept for row()
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        # columns added after the first release default to "not set" for every row, so callers
        # that build a batch field by field need not know them
        n = len(self)
        for name, fill in _NEW_COLUMNS.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.full(n, fill, dtype=object if name == "pipeline_layout" else None))

    def __len__(self) -> int:
        return int(np.shape(self.dp)[0])

    def host_share_of_node(self, gpus_per_node: int, gpus_per_host: int | None) -> np.ndarray:
        """The share of a node's host resources (the memory and memory bandwidth a cluster file
        states per node) the job's GPUs on its fullest node can use, per row (float):
        ``node_host_share(gpus_on_a_node, gpus_per_node, gpus_per_host)``."""
        return node_host_share(self.gpus_on_a_node(gpus_per_node), gpus_per_node, gpus_per_host)

    def gpus_on_a_node(self, gpus_per_node: int) -> np.ndarray:
        """The job's GPUs on its fullest node, per row: ``gpus_on_a_node(dp x tp x pp x cp)``."""
        world = (np.asarray(self.dp, dtype=float) * np.asarray(self.tp, dtype=float)
                 * np.asarray(self.pp, dtype=float) * np.asarray(self.cp, dtype=float))
        return gpus_on_a_node(world, gpus_per_node)

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
            ep_dispatch_dedup=col("ep_dispatch_dedup", bool, bool),
            grad_reduce_bytes=col("grad_reduce_bytes", float, float),
            grad_bucket_elements=col("grad_bucket_elements", float, float),
            grad_bucket_elements_per_dp=col("grad_bucket_elements_per_dp", float, float),
            grad_reduce_every_microbatch=col("grad_reduce_every_microbatch", bool, bool),
            param_prefetch_forward=col("param_prefetch_forward", float, float),
            param_prefetch_backward=col("param_prefetch_backward", float, float),
            param_prefetch_max_elements=col("param_prefetch_max_elements", float, float),
            tp_backward_overlap=col("tp_backward_overlap", bool, bool),
            softmax_fusion=col("softmax_fusion", bool, bool),
            softmax_scale_pass=col("softmax_scale_pass", bool, bool),
            pipe_exchange_blocking=col("pipe_exchange_blocking", bool, bool),
            pipeline_p2p_overlap=col("pipeline_p2p_overlap", bool, bool),
            pipeline_scatter_gather=col("pipeline_scatter_gather", bool, bool),
            attention_unpad=col("attention_unpad", bool, bool),
            glu_clamp_eager=col("glu_clamp_eager", bool, bool),
            expert_output_bias=col("expert_output_bias", EXPERT_OUTPUT_BIAS_CODES.get),
            unfused_block_ops=col("unfused_block_ops", bool, bool),
            yarn_rope_eager=col("yarn_rope_eager", bool, bool),
            cross_entropy=col("cross_entropy", CROSS_ENTROPY_CODES.get),
            param_gather_per_tensor=col("param_gather_per_tensor", bool, bool),
            cuda_graphs=col("cuda_graphs", bool, bool),
            zero3_persistence_elements=col("zero3_persistence_elements", float, float),
            collective_per_rank_copies=col("collective_per_rank_copies", bool, bool),
            zero3_grad_all_reduce=col("zero3_grad_all_reduce", bool, bool),
            zero1_grad_all_reduce=col("zero1_grad_all_reduce", bool, bool),
            uneven_layers=col("uneven_layers", bool, bool),
            recompute_num_layers=col("recompute_num_layers"),
            recompute_method=col("recompute_method", RECOMPUTE_METHOD_CODES.get),
            recompute_layers_decrement=col("recompute_layers_decrement"),
            recompute_modules=col("recompute_modules", modules_mask),
            selective_modules=col("selective_modules", modules_mask),
            offload_activation_layers=col("offload_activation_layers"),
            offload_optimizer_fraction=col("offload_optimizer_fraction", float, float),
            zero_shard_group=col("zero_shard_group"),
            pipeline_layout=col("pipeline_layout", str, object),
            loss_chunk_tokens=col("loss_chunk_tokens"),
            optimizer_moment_bytes=col("optimizer_moment_bytes", float, float),
            fp8_current_scaling=col("fp8_current_scaling", bool, bool),
            grad_buffer_bytes=col("grad_buffer_bytes", float, float),
            offload_weight_bytes=col("offload_weight_bytes", float, float),
            fp8_param_gather=col("fp8_param_gather", bool, bool),
            zero3_master_params=col("zero3_master_params", bool, bool),
            master_weight_bytes=col("master_weight_bytes", float, float),
            moments_in_param_dtype=col("moments_in_param_dtype", bool, bool),
            nvfp4_rht_cast_fusion=col("nvfp4_rht_cast_fusion", bool, bool),
            moe_probs_in_expert=col("moe_probs_in_expert", bool, bool),
            ep_carved_from_dp=col("ep_carved_from_dp", bool, bool),
            zero3_once_per_step=col("zero3_once_per_step", bool, bool),
            kv_head_replication=col("kv_head_replication", bool, bool),
            stack_lacks=col("stack_lacks", lacks_mask),
            zero2_grad_last_microbatch=col("zero2_grad_last_microbatch", bool, bool),
            zero2_gather_every_microbatch=col("zero2_gather_every_microbatch", bool, bool),
            cp_allgather_saves_kv=col("cp_allgather_saves_kv", bool, bool),
            grouped_gemm_streams=col("grouped_gemm_streams"),
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
            ep_comm_overlap=bool(self.ep_comm_overlap[i]), ep_dispatch_dedup=bool(self.ep_dispatch_dedup[i]),
            grad_reduce_bytes=float(self.grad_reduce_bytes[i]),
            grad_bucket_elements=float(self.grad_bucket_elements[i]),
            grad_bucket_elements_per_dp=float(self.grad_bucket_elements_per_dp[i]),
            grad_reduce_every_microbatch=bool(self.grad_reduce_every_microbatch[i]),
            param_prefetch_forward=float(self.param_prefetch_forward[i]),
            param_prefetch_backward=float(self.param_prefetch_backward[i]),
            param_prefetch_max_elements=float(self.param_prefetch_max_elements[i]),
            tp_backward_overlap=bool(self.tp_backward_overlap[i]), softmax_fusion=bool(self.softmax_fusion[i]),
            softmax_scale_pass=bool(self.softmax_scale_pass[i]),
            pipe_exchange_blocking=bool(self.pipe_exchange_blocking[i]),
            pipeline_p2p_overlap=bool(self.pipeline_p2p_overlap[i]),
            pipeline_scatter_gather=bool(self.pipeline_scatter_gather[i]),
            attention_unpad=bool(self.attention_unpad[i]), glu_clamp_eager=bool(self.glu_clamp_eager[i]),
            unfused_block_ops=bool(self.unfused_block_ops[i]), yarn_rope_eager=bool(self.yarn_rope_eager[i]),
            cross_entropy=CROSS_ENTROPY_IMPLS[int(self.cross_entropy[i])],
            expert_output_bias=EXPERT_OUTPUT_BIAS_IMPLS[int(self.expert_output_bias[i])],
            param_gather_per_tensor=bool(self.param_gather_per_tensor[i]), cuda_graphs=bool(self.cuda_graphs[i]),
            zero3_persistence_elements=float(self.zero3_persistence_elements[i]),
            collective_per_rank_copies=bool(self.collective_per_rank_copies[i]),
            zero3_grad_all_reduce=bool(self.zero3_grad_all_reduce[i]),
            zero1_grad_all_reduce=bool(self.zero1_grad_all_reduce[i]),
            uneven_layers=bool(self.uneven_layers[i]),
            recompute_num_layers=int(self.recompute_num_layers[i]),
            recompute_method=list(RecomputeMethod)[int(self.recompute_method[i])],
            recompute_layers_decrement=int(self.recompute_layers_decrement[i]),
            recompute_modules=modules_names(self.recompute_modules[i]),
            selective_modules=modules_names(self.selective_modules[i]),
            offload_activation_layers=int(self.offload_activation_layers[i]),
            offload_optimizer_fraction=float(self.offload_optimizer_fraction[i]),
            zero_shard_group=int(self.zero_shard_group[i]),
            pipeline_layout=str(self.pipeline_layout[i] or ""),
            loss_chunk_tokens=int(self.loss_chunk_tokens[i]),
            optimizer_moment_bytes=float(self.optimizer_moment_bytes[i]),
            fp8_current_scaling=bool(self.fp8_current_scaling[i]),
            grad_buffer_bytes=float(self.grad_buffer_bytes[i]),
            offload_weight_bytes=float(self.offload_weight_bytes[i]),
            fp8_param_gather=bool(self.fp8_param_gather[i]),
            zero3_master_params=bool(self.zero3_master_params[i]),
            master_weight_bytes=float(self.master_weight_bytes[i]),
            moments_in_param_dtype=bool(self.moments_in_param_dtype[i]),
            nvfp4_rht_cast_fusion=bool(self.nvfp4_rht_cast_fusion[i]),
            moe_probs_in_expert=bool(self.moe_probs_in_expert[i]),
            ep_carved_from_dp=bool(self.ep_carved_from_dp[i]),
            zero3_once_per_step=bool(self.zero3_once_per_step[i]),
            kv_head_replication=bool(self.kv_head_replication[i]),
            stack_lacks=lacks_names(self.stack_lacks[i]),
            zero2_grad_last_microbatch=bool(self.zero2_grad_last_microbatch[i]),
            zero2_gather_every_microbatch=bool(self.zero2_gather_every_microbatch[i]),
            cp_allgather_saves_kv=bool(self.cp_allgather_saves_kv[i]),
            grouped_gemm_streams=int(self.grouped_gemm_streams[i]),
        )


#: columns with a default, and the value that means "not set"
_NEW_COLUMNS = {"recompute_num_layers": 0, "recompute_method": 0, "recompute_layers_decrement": 0,
                "recompute_modules": 0, "selective_modules": MODULE_BITS["core_attn"], "unfused_block_ops": False, "yarn_rope_eager": False, "offload_activation_layers": 0, "offload_optimizer_fraction": 0.0,
                "zero_shard_group": 0, "pipeline_layout": "", "loss_chunk_tokens": 0, "optimizer_moment_bytes": 4.0,
                "fp8_current_scaling": False, "grad_buffer_bytes": 4.0, "offload_weight_bytes": 2.0, "fp8_param_gather": False,
                "zero3_master_params": False, "master_weight_bytes": 4.0, "moments_in_param_dtype": False,
                "nvfp4_rht_cast_fusion": False,
                "grouped_gemm_streams": 1, "moe_probs_in_expert": False, "ep_carved_from_dp": False,
                "zero3_once_per_step": False, "kv_head_replication": False,
                "zero2_grad_last_microbatch": False, "zero2_gather_every_microbatch": False, "cp_allgather_saves_kv": False,
                "stack_lacks": 0, "pipeline_p2p_overlap": False,
                "pipeline_scatter_gather": False, "expert_output_bias": 0}
