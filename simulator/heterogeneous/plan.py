"""A training plan on a pooled cluster: replica groups of pipelines whose stages sit on pools.

Every replica holds the whole model once: a pipeline of stages, each stage on one pool with its
own tensor-parallel degree and layer count. Replicas that are laid out alike form a group;
groups may differ in everything (pools, stage count, layer split, tensor parallelism) and get
their own micro-batch count per step, so a faster group can take a larger share of the batch
(Poplar, Zhang et al. 2024; HexiScale, Yan et al. 2024). A pipeline may also cross pools
(Metis, Um et al. 2024; Sailor, Strati et al. 2025). Tensor-parallel groups stay inside one
node of one pool: a pool's tensor-parallel degrees divide its node (``tp_tiles_node``).

    plan = HeteroPlan(groups=(
        ReplicaGroup(stages=(StagePlacement("h100", tp=8, layers=40),
                             StagePlacement("h100", tp=8, layers=40)), replicas=16),
        ReplicaGroup(stages=(StagePlacement("a100", tp=8, layers=20),) * 4, replicas=8),
    ), micro_batch=1, global_batch=1024, zero_stage=1, recompute="selective")
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from cost_models.topology import tp_tiles_node
from hardware_specs.errors import InputError, shown, suggest
from hardware_specs.pools import PooledCluster
from model_specs.model_spec import ModelSpec
from simulator.parallel_config import ParallelConfig, Recompute, Schedule
from simulator.stack_support import check_stack_features
from simulator.validate_config import _divisors, check_kv_heads

#: pipeline schedules a heterogeneous plan may use (their makespan is the sum of the stage
#: times plus (m - 1) times the slowest; the zero-bubble and interleaved closed forms assume
#: equal stages)
HETERO_SCHEDULES = (Schedule.ONE_F_ONE_B, Schedule.GPIPE)
#: ``ParallelConfig`` fields a replica group's stages set, not ``software``
_DEGREE_FIELDS = ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "uneven_layers", "first_stage_layers",
                  "last_stage_layers")


def pool_dtype(gpu, dtype: str) -> str | None:
    """The GEMM dtype a pool's GPU runs for the plan's ``dtype``: ``dtype`` itself, or fp32
    where the plan asks for tf32 and the GPU has no TF32 tensor cores (TF32 is cuBLAS's
    permission to round fp32 GEMM inputs, not a storage format: chips without it run fp32);
    None if the GPU cannot run it."""
    peaks = gpu.peak_flops_per_s
    if dtype in peaks:
        return dtype
    if dtype == "tf32" and "fp32" in peaks:
        return "fp32"
    return None


#: ``ParallelConfig`` fields the pooled model does not read: a stage's layers are its own
#: (``StagePlacement.layers``, no layout string), every layer of a stage recomputes as the plan
#: says (no partial or per-module recomputation), nothing is offloaded, ZeRO shards over every
#: replica, the loss takes the whole micro-batch, Adam keeps fp32 moments, and there is no
#: context or expert parallelism. A plan's ``software`` may not set them (they would be ignored).
UNMODELLED_FIELDS = ("pipeline_layout", "recompute_num_layers", "recompute_method", "recompute_layers_decrement",
                     "recompute_modules", "offload_activation_layers", "offload_optimizer_fraction",
                     "zero_shard_group", "loss_chunk_tokens", "optimizer_moment_bytes", "cp_kind",
                     "moe_load_imbalance")


#: the largest count (replicas, micro-batches, degrees) a plan may state, as the other integer
#: inputs (2^24)
MAX_PLAN_COUNT = 2**24


def _positive_int(value, field_name: str, fix: str = "give a whole number, 1 or more") -> int:
    if isinstance(value, bool):
        raise InputError(field_name, f"must be a positive integer, got {shown(value)}", fix)
    try:
        as_int = int(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(field_name, f"must be a positive integer, got {shown(value)}", fix) from None
    if as_int != value or as_int < 1:
        raise InputError(field_name, f"must be a positive integer, got {shown(value)}", fix)
    if as_int > MAX_PLAN_COUNT:     # 1e15 micro-batches reported a step of 1.9 million years
        raise InputError(field_name, f"{as_int:,} is above {MAX_PLAN_COUNT:,}", "check the number")
    return as_int


@dataclass(frozen=True)
class StagePlacement:
    """One pipeline stage of a replica: the pool it runs on, its tensor-parallel degree and the
    transformer layers it holds (the first stage also holds the embedding, the last the LM
    head and loss)."""

    pool: str
    tp: int
    layers: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "pool", str(self.pool))
        object.__setattr__(self, "tp", _positive_int(self.tp, f"pools.{self.pool}.tp"))
        object.__setattr__(self, "layers", _positive_int(self.layers, f"pools.{self.pool}.layers",
                                                         "give every stage 1 layer or more, the stages' counts "
                                                         "adding up to the model's layers"))


@dataclass(frozen=True)
class ReplicaGroup:
    """``replicas`` identical pipeline replicas running ``stages`` in order.

    ``micro_batches``: micro-batches each replica runs per step; None = set from the plan's
    global batch: the whole micro-batches per replica that finish the step soonest (``shares``).
    """

    stages: tuple[StagePlacement, ...]
    replicas: int = 1
    micro_batches: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        if not self.stages:
            raise InputError("groups.stages", "a replica group needs at least one stage")
        object.__setattr__(self, "replicas", _positive_int(self.replicas, "groups.replicas"))
        if self.micro_batches is not None:
            object.__setattr__(self, "micro_batches", _positive_int(self.micro_batches, "groups.micro_batches"))

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def layers(self) -> int:
        return sum(s.layers for s in self.stages)

    def gpus_on(self, pool: str) -> int:
        """GPUs this group occupies in ``pool``."""
        return self.replicas * sum(s.tp for s in self.stages if s.pool == pool)


@dataclass(frozen=True)
class HeteroPlan:
    """Replica groups and the settings they share (per-GPU micro-batch, ZeRO, recomputation,
    precision, schedule and the software switches of ``ParallelConfig``; ``software`` takes the
    rest of them, e.g. a stack's ``simulator.stack_defaults.stack_config_fields``).

    ``global_batch`` (sequences per step) is needed when a group leaves ``micro_batches`` to
    the shares; when every group states it, it must equal the sum over groups of replicas x
    micro-batches x micro_batch (or be None).
    """

    groups: tuple[ReplicaGroup, ...]
    micro_batch: int = 1
    global_batch: int | None = None
    zero_stage: int = 0
    recompute: Recompute = Recompute.NONE
    sequence_parallel: bool = False
    dtype: str = "bf16"
    schedule: Schedule = Schedule.ONE_F_ONE_B
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: bool = False
    flash_attention: bool = True
    grad_accumulation_fusion: bool = True
    attention_kernel: str = "auto"
    grad_reduce_bytes: float = 4.0
    software: Mapping[str, Any] = field(default_factory=dict)
    settings: ParallelConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))
        if not self.groups:
            raise InputError("groups", "a plan needs at least one replica group")
        if self.global_batch is not None:
            object.__setattr__(self, "global_batch", _positive_int(self.global_batch, "global_batch"))
        # a schedule the pooled model lacks is refused before ParallelConfig asks for what it
        # would need on one GPU kind (interleaved's vpp, which pooled plans cannot take)
        try:
            asked = Schedule(self.schedule)
        except ValueError:
            asked = None                     # not a schedule at all: ParallelConfig's error names it
        if asked is not None and asked not in HETERO_SCHEDULES:
            raise InputError("schedule", f"{asked.value} is not modelled across unequal stages",
                             "use " + " or ".join(s.value for s in HETERO_SCHEDULES))
        # the shared settings, validated once by ParallelConfig (one replica, one stage)
        mb = _positive_int(self.micro_batch, "micro_batch")
        settings = ParallelConfig(
            micro_batch=mb, global_batch=mb, zero_stage=self.zero_stage, recompute=self.recompute,
            sequence_parallel=False, dtype=self.dtype, schedule=self.schedule,
            overlap_grad_reduce=self.overlap_grad_reduce, overlap_param_gather=self.overlap_param_gather,
            tp_comm_overlap=self.tp_comm_overlap, flash_attention=self.flash_attention,
            grad_accumulation_fusion=self.grad_accumulation_fusion, attention_kernel=self.attention_kernel,
            grad_reduce_bytes=self.grad_reduce_bytes, **self._software())
        if settings.grad_reduce_every_microbatch:
            raise InputError("software.grad_reduce_every_microbatch", "a gradient reduction on every micro-batch "
                             "is not modelled across pools yet", "reduce once per step")
        if settings.schedule not in HETERO_SCHEDULES:
            raise InputError("schedule", f"{settings.schedule.value} is not modelled across unequal stages",
                             "use " + " or ".join(s.value for s in HETERO_SCHEDULES))
        if settings.zero_stage > 1:
            raise InputError("zero_stage", f"ZeRO-{settings.zero_stage} across pools is not modelled yet (its "
                             "gradients sharded per micro-batch, or its parameters gathered per layer)",
                             "use zero 0 or 1")
        if not isinstance(self.sequence_parallel, bool):
            raise InputError("sequence_parallel", f"must be true or false, got {shown(self.sequence_parallel)}")
        object.__setattr__(self, "micro_batch", mb)
        object.__setattr__(self, "recompute", settings.recompute)
        object.__setattr__(self, "schedule", settings.schedule)
        object.__setattr__(self, "settings", settings)
        stated = [g.micro_batches for g in self.groups]
        if all(m is not None for m in stated):
            total = sum(g.replicas * g.micro_batches for g in self.groups) * mb
            if self.global_batch is not None and self.global_batch != total:
                raise InputError("global_batch", f"{self.global_batch} sequences, but the groups' replicas x "
                                 f"micro-batches x micro_batch add up to {total}",
                                 "drop global_batch or the groups' micro_batches")
            object.__setattr__(self, "global_batch", total)
        elif self.global_batch is None:
            raise InputError("global_batch", "missing: a group leaves its micro-batches to the shares",
                             "give the global batch, or every group's micro_batches")
        elif any(m is not None for m in stated):
            # the groups without counts share what the stated ones leave, at least one a replica
            given = sum(g.replicas * g.micro_batches for g in self.groups if g.micro_batches is not None)
            free = sum(g.replicas for g in self.groups if g.micro_batches is None)
            if self.global_batch // mb - given < free:
                raise InputError("global_batch", f"{self.global_batch} sequences leave "
                                 f"{max(self.global_batch // mb - given, 0)} micro-batches of {mb} after the "
                                 f"groups' stated {given}, fewer than the {free} replicas left to share them",
                                 "raise global_batch, or lower the stated micro_batches")

    def _software(self) -> dict:
        """The extra ``ParallelConfig`` switches of ``software`` (the stack's behaviour fields)."""
        known = {f.name for f in fields(ParallelConfig)}
        own = {f.name for f in fields(HeteroPlan)}
        if self.software is not None and not isinstance(self.software, Mapping):
            raise InputError("software", f"expected a mapping of switch: value, got {shown(self.software)}",
                             "write e.g. software: {cuda_graphs: true}, or leave it out")
        extra = dict(self.software or {})
        for key in extra:
            if key not in known or key in own or key in _DEGREE_FIELDS:
                raise InputError(f"software.{key}", "not a software switch of a plan",
                                 "use the plan's own fields for the degrees, batch, ZeRO and precision")
            if key in UNMODELLED_FIELDS:        # the pooled model would run without it
                raise InputError(f"software.{key}", "not modelled on pooled clusters",
                                 "drop it, or simulate the plan on one GPU kind with its degrees")
        object.__setattr__(self, "software", extra)
        return extra

    @property
    def replicas(self) -> int:
        """Data-parallel replicas of the model (all groups)."""
        return sum(g.replicas for g in self.groups)

    @property
    def microbatches_total(self) -> int:
        """Micro-batches per step over all replicas."""
        return self.global_batch // self.micro_batch

    def gpus_on(self, pool: str) -> int:
        return sum(g.gpus_on(pool) for g in self.groups)

    def pools_used(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for g in self.groups:
            for s in g.stages:
                seen.setdefault(s.pool, None)
        return tuple(seen)

    def with_micro_batches(self, counts) -> "HeteroPlan":
        """The plan with each group's micro-batches set (``counts`` aligned with ``groups``)."""
        groups = tuple(replace(g, micro_batches=int(m)) for g, m in zip(self.groups, counts))
        return replace(self, groups=groups, global_batch=None)


#: switches ``HeteroPlan`` holds as its own fields (the rest of a stack's go to ``software``)
_OWN_SWITCHES = ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "flash_attention",
                 "grad_accumulation_fusion", "attention_kernel", "grad_reduce_bytes")


def plan_switches(config_fields: Mapping[str, Any]) -> dict:
    """``HeteroPlan`` keyword arguments for ``ParallelConfig`` switches, e.g. a stack's
    ``simulator.stack_defaults.stack_config_fields``: the plan's own fields by name, the rest
    under ``software`` (degrees, batch, dtype and sequence parallelism are the plan's, dropped)."""
    skip = set(_DEGREE_FIELDS) | {"dtype", "sequence_parallel", "micro_batch", "global_batch", "zero_stage",
                                  "recompute", "schedule"}
    own = {k: v for k, v in config_fields.items() if k in _OWN_SWITCHES}
    if "attention_kernel" in own:
        own["attention_kernel"] = getattr(own["attention_kernel"], "value", own["attention_kernel"])
    software = {k: v for k, v in config_fields.items() if k not in _OWN_SWITCHES and k not in skip}
    return {**own, "software": software}


def check_plan(model: ModelSpec, cluster: PooledCluster, plan: HeteroPlan) -> None:
    """Raise ``InputError`` (naming the pool where one is at fault) unless ``plan`` can run
    ``model`` on ``cluster``."""
    if model.moe is not None:
        raise InputError("model", f"{model.name} is a mixture-of-experts model; plans across pools cover dense "
                         "models for now", "plan it on one pool with paraplan plan")
    if model.mtp_layers:
        raise InputError("model", f"{model.name} trains multi-token-prediction modules, not laid out across pools yet",
                         "plan it on one pool with paraplan plan")
    if plan.global_batch % plan.micro_batch:
        raise InputError("global_batch", f"{plan.global_batch} is not a multiple of micro_batch {plan.micro_batch}",
                         f"use a global batch that is a multiple of {plan.micro_batch}, or another micro-batch")
    if plan.microbatches_total < plan.replicas:
        raise InputError("global_batch", f"{plan.microbatches_total} micro-batches cannot feed {plan.replicas} replicas",
                         f"use a global batch of at least {plan.replicas * plan.micro_batch}")
    # the shared settings stand for one stage of tp 1 without sequence parallelism: test the plan's
    # own pipeline depth, widest tp and sequence parallelism against what the stack lacks
    check_stack_features(replace(plan.settings, pp=max(len(g.stages) for g in plan.groups),
                                 tp=max(s.tp for g in plan.groups for s in g.stages),
                                 sequence_parallel=plan.sequence_parallel), moe=model.moe is not None)
    names = cluster.pool_names
    for gi, group in enumerate(plan.groups):
        if group.layers != model.num_layers:
            raise InputError(f"groups[{gi}].layers", f"the stages hold {group.layers} layers, {model.name} has "
                             f"{model.num_layers}", "make each group's stage layers add up to the model's")
        for stage in group.stages:
            if stage.pool not in names:
                raise InputError(f"pools.{stage.pool}", f"unknown pool in cluster {cluster.name}", suggest(stage.pool, names))
            pool = cluster.pool(stage.pool)
            where = f"pools.{pool.name}"
            if stage.tp > pool.gpus_per_node:
                raise InputError(f"{where}.tp", f"tensor-parallel group of {stage.tp} is larger than the pool's node of "
                                 f"{pool.gpus_per_node} GPUs", f"use tp <= {pool.gpus_per_node} on {pool.name}")
            for what, n in (("attention heads", model.num_heads), ("ffn_hidden_size", model.ffn_hidden_size)):
                if n % stage.tp:
                    # the tp values this pool runs: dividing the heads and the MLP, within a node, tiling its nodes
                    fits = [t for t in range(1, pool.gpus_per_node + 1) if not model.num_heads % t
                            and not model.ffn_hidden_size % t and tp_tiles_node(pool.gpus_per_node, t, pool.gpus)]
                    raise InputError(f"{where}.tp", f"tp={stage.tp} does not divide the {n} {what} of {model.name}",
                                     f"choose tp from {', '.join(map(str, fits))} on {pool.name}")
            check_kv_heads(model, stage.tp, plan.settings.kv_head_replication, f"{where}.tp")
            if not tp_tiles_node(pool.gpus_per_node, stage.tp, pool.gpus):    # a pool inside one node: any tp
                raise InputError(f"{where}.tp", f"tensor-parallel groups of {stage.tp} do not tile the pool's nodes of "
                                 f"{pool.gpus_per_node} GPUs (a group would span two nodes)",
                                 f"use a tp dividing {pool.gpus_per_node} on {pool.name}: "
                                 + _divisors(pool.gpus_per_node, pool.gpus_per_node))
            if pool_dtype(pool.cluster.gpu, plan.settings.dtype) is None:
                raise InputError(f"{where}.dtype", f"{pool.cluster.gpu.name} has no {plan.settings.dtype} peak",
                                 "choose one of " + ", ".join(pool.cluster.gpu.peak_flops_per_s))
    for pool in cluster.pools:
        used = plan.gpus_on(pool.name)
        if used > pool.gpus:
            raise InputError(f"pools.{pool.name}.gpus", f"the plan places {used} GPUs on a pool of {pool.gpus}",
                             "use fewer replicas or stages there, or a larger pool")
