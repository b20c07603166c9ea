"""``HeteroReport``: what one heterogeneous plan costs, per stage and per pool."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from hardware_specs.mfu_reference import reference_name
from hardware_specs.pools import PooledCluster
from model_specs.model_spec import ModelSpec
from simulator.heterogeneous.plan import HeteroPlan
from simulator.heterogeneous.shares import per_replica
from simulator.report import MEMORY_PARTS, TIME_PARTS

#: where a pool's step goes, in the order printed; they sum to the step time.
POOL_TIME_PARTS = ("compute_s", "recompute_s", "tp_comm_exposed_s", "pp_comm_s", "idle_s",
                   "dp_comm_exposed_s", "optimizer_s")


@dataclass(frozen=True)
class StageReport:
    """One stage of one replica group. Times in seconds per micro-batch unless named per step."""

    group: int
    stage: int
    pool: str
    gpu: str
    tp: int
    layers: int
    replicas: int
    micro_batches_busiest_replica: int    # per step, on the group's busiest replica
    stage_time_s: float
    compute_s: float
    recompute_s: float
    tp_comm_exposed_s: float
    pp_comm_s: float
    dp_comm_exposed_s: float          # per step
    optimizer_s: float                # per step
    memory_bytes: float
    hbm_bytes: float
    fits: bool
    memory_breakdown_bytes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PoolReport:
    """Where one pool's step goes (its busiest stage), and its memory against its own HBM.

    ``efficiency_fitted``: False where the pool's efficiency model is an unfitted prior (its numbers
    rest on it), as every other output names it.
    """

    pool: str
    gpu: str
    gpus: int
    gpus_used: int
    stages: int
    layers: int
    time_s: dict
    peak_memory_bytes: float
    hbm_bytes: float
    fits: bool
    efficiency_generation: str
    efficiency_fitted: bool


@dataclass(frozen=True)
class HeteroReport:
    """One simulated step of a heterogeneous plan.

    Attributes:
        step_time_s: seconds per optimizer step; time_breakdown_s: its parts (``TIME_PARTS``)
            on the critical group's slowest stage, summing to the step.
        plan: the plan with every group's micro-batches set (the shares, when it left them open).
        groups: per group: replicas, stages, micro_batches_per_replica (one count per replica;
            they differ by at most one), micro_batches_busiest_replica (the largest, which sets
            the group's pipeline time), micro_batches_total, pipeline_s, slowest_stage_s.
        stages, pools: per stage and per pool detail; fits: every stage fits its pool's HBM.
        prior_pools: pools whose efficiency model is an unfitted prior.
    """

    model: str
    cluster: str
    plan: HeteroPlan
    n_gpus: int
    step_time_s: float
    time_breakdown_s: dict
    tokens_per_step: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_flops: float
    mfu: float
    memory_bytes: float
    fits: bool
    groups: tuple
    stages: tuple[StageReport, ...]
    pools: tuple[PoolReport, ...]
    prior_pools: tuple[str, ...] = ()
    #: model FLOPs over the step times the plan's GPUs' reference peaks (bf16; fp16 on V100):
    #: MFU as one-kind outputs show it (``hardware_specs.mfu_reference``); ``mfu`` is of the
    #: plan dtype's peaks
    mfu_reference: float = float("nan")
    mfu_reference_dtype: str = "bf16"

    def as_dict(self) -> dict:
        d = asdict(self)
        d["plan"] = plan_dict(self.plan)
        return d


def plan_dict(plan: HeteroPlan) -> dict:
    """A plan as plain data (the format ``--plan`` files use)."""
    s = plan.settings
    return {
        "micro_batch": plan.micro_batch, "global_batch": plan.global_batch, "zero_stage": s.zero_stage,
        "recompute": s.recompute.value, "sequence_parallel": plan.sequence_parallel, "dtype": s.dtype,
        "schedule": s.schedule.value, "overlap_grad_reduce": s.overlap_grad_reduce,
        "overlap_param_gather": s.overlap_param_gather, "tp_comm_overlap": s.tp_comm_overlap,
        "flash_attention": s.flash_attention, "grad_accumulation_fusion": s.grad_accumulation_fusion,
        "attention_kernel": s.attention_kernel.value, "grad_reduce_bytes": s.grad_reduce_bytes,
        "software": dict(plan.software),
        "groups": [{"replicas": g.replicas, "micro_batches": g.micro_batches,
                    "stages": [{"pool": st.pool, "tp": st.tp, "layers": st.layers} for st in g.stages]}
                   for g in plan.groups],
    }


def build_report(model: ModelSpec, cluster: PooledCluster, plan: HeteroPlan, effs, blocks, out) -> HeteroReport:
    """The report of plan 0 of ``compose``'s output ``out`` over ``blocks`` (one row per stage)."""
    f = lambda x: float(np.asarray(x).reshape(-1)[0])  # noqa: E731
    step = f(out["step_time_s"])
    m_busiest = out["group_micro_batches"]
    m_total = out["group_micro_batches_total"]
    filled = plan.with_micro_batches(m_busiest) if any(g.micro_batches is None for g in plan.groups) else plan
    if filled is not plan and not np.allclose(m_total, m_busiest * np.array([g.replicas for g in plan.groups])):
        filled = plan   # uneven replicas inside a group: keep the plan as given, counts in ``groups``
    groups = tuple({"replicas": g.replicas, "stages": g.pp,
                    "micro_batches_per_replica": per_replica(g.replicas, int(m_busiest[i]), int(m_total[i])),
                    "micro_batches_busiest_replica": int(m_busiest[i]), "micro_batches_total": int(m_total[i]), "pipeline_s": float(out["group_pipeline_s"][i]),
                    "slowest_stage_s": float(out["group_slowest_stage_s"][i])}
                   for i, g in enumerate(plan.groups))
    stages = []
    r = 0
    for gi, g in enumerate(plan.groups):
        for si, st in enumerate(g.stages):
            pool = cluster.pool(st.pool)
            mem_parts = {"weights_bytes": out["row_weights_bytes"][r], "gradients_bytes": out["row_gradients_bytes"][r],
                         "optimizer_bytes": out["row_optimizer_bytes"][r],
                         "activations_bytes": out["row_activations_bytes"][r], "logits_bytes": out["row_logits_bytes"][r],
                         "allocator_bytes": out["row_allocator_bytes"][r]}
            stages.append(StageReport(
                group=gi, stage=si, pool=st.pool, gpu=pool.cluster.gpu.name, tp=st.tp, layers=st.layers,
                replicas=g.replicas, micro_batches_busiest_replica=int(m_busiest[gi]), stage_time_s=float(out["row_stage_s"][r]),
                compute_s=float(out["row_compute_s"][r]), recompute_s=float(out["row_recompute_s"][r]),
                tp_comm_exposed_s=float(out["row_tp_s"][r]), pp_comm_s=float(out["row_p2p_s"][r]),
                dp_comm_exposed_s=float(out["row_dp_exposed_s"][r]), optimizer_s=float(out["row_optimizer_s"][r]),
                memory_bytes=float(out["row_memory_bytes"][r]), hbm_bytes=float(out["row_hbm_bytes"][r]),
                fits=bool(out["row_memory_bytes"][r] <= out["row_hbm_bytes"][r]),
                memory_breakdown_bytes={k: float(v) for k, v in mem_parts.items()}))
            r += 1
    pools = []
    for pi, pool in enumerate(cluster.pools):
        mine = [s for s in stages if s.pool == pool.name]
        used = plan.gpus_on(pool.name)
        if not mine:
            continue
        busiest = max(mine, key=lambda s: s.micro_batches_busiest_replica * s.stage_time_s)
        m = busiest.micro_batches_busiest_replica
        t = {"compute_s": m * busiest.compute_s, "recompute_s": m * busiest.recompute_s,
             "tp_comm_exposed_s": m * busiest.tp_comm_exposed_s, "pp_comm_s": m * busiest.pp_comm_s}
        t["dp_comm_exposed_s"] = max(s.dp_comm_exposed_s for s in mine)
        t["optimizer_s"] = max(s.optimizer_s for s in mine)
        t["idle_s"] = max(0.0, step - sum(t.values()))
        pools.append(PoolReport(
            pool=pool.name, gpu=pool.cluster.gpu.name, gpus=pool.gpus, gpus_used=used,
            stages=len(mine), layers=sum(s.layers for s in mine),
            time_s={k: t[k] for k in POOL_TIME_PARTS}, peak_memory_bytes=max(s.memory_bytes for s in mine),
            hbm_bytes=pool.cluster.gpu.hbm_bytes, fits=all(s.fits for s in mine),
            efficiency_generation=effs[pi].generation, efficiency_fitted=not effs[pi].is_prior))
    n_gpus = int(round(f(out["n_gpus"])))
    return HeteroReport(
        model=model.name, cluster=cluster.name, plan=filled, n_gpus=n_gpus, step_time_s=step,
        time_breakdown_s={k: f(out[k]) for k in TIME_PARTS}, tokens_per_step=f(out["tokens_per_step"]),
        tokens_per_s=f(out["tokens_per_s"]), tokens_per_s_per_gpu=f(out["tokens_per_s"]) / n_gpus,
        model_flops=f(out["model_flops"]), mfu=f(out["mfu"]), memory_bytes=f(out["memory_bytes"]),
        fits=bool(f(out["fits"])), groups=groups, stages=tuple(stages), pools=tuple(pools),
        prior_pools=tuple(p.pool for p in pools if not p.efficiency_fitted), mfu_reference=f(out["mfu_reference"]),
        mfu_reference_dtype=reference_name(p.cluster.gpu for p in cluster.pools))


__all__ = ["HeteroReport", "MEMORY_PARTS", "POOL_TIME_PARTS", "PoolReport", "StageReport", "build_report", "plan_dict"]
