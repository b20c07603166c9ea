"""Simulate one heterogeneous plan: model + pooled cluster + ``HeteroPlan`` -> ``HeteroReport``.

The plan is turned into one row per stage (``compose.StageBlocks``), its pools' layer costs
come from the step model (``unit_costs``), and ``compose`` (the same function the planner
scores with) gives the step. Nothing is computed here that the planner would compute
differently.
"""
from __future__ import annotations

import numpy as np

from hardware_specs.catalog import load_pooled_cluster, one_pool
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError
from hardware_specs.pools import PooledCluster
from model_specs.catalog import load_model
from model_specs.model_spec import ModelSpec
from simulator.config_batch import RECOMPUTE_CODES
from simulator.heterogeneous.compose import Groups, StageBlocks, compose
from simulator.heterogeneous.plan import HeteroPlan, check_plan
from simulator.heterogeneous.report import HeteroReport, build_report
from simulator.heterogeneous.unit_costs import pool_efficiencies, unit_costs


def plan_tables(model: ModelSpec, cluster: PooledCluster, plan: HeteroPlan, effs):
    """(UnitCosts, StageBlocks, Groups) of one plan: one row per stage."""
    names = cluster.pool_names
    keys: dict[tuple[int, int], int] = {}
    rows = []
    for gi, group in enumerate(plan.groups):
        for si, stage in enumerate(group.stages):
            key = keys.setdefault((names.index(stage.pool), stage.tp), len(keys))
            prev = group.stages[si - 1] if si > 0 else None
            nxt = group.stages[si + 1] if si + 1 < group.pp else None
            rows.append((gi, key, stage.layers, si, si == 0, si == group.pp - 1,
                         names.index(prev.pool) if prev else -1, names.index(nxt.pool) if nxt else -1,
                         prev.tp if prev else 1, nxt.tp if nxt else 1))
    key_pool = np.array([p for p, _ in keys], dtype=np.int64)
    key_tp = np.array([t for _, t in keys], dtype=np.int64)
    units = unit_costs(model, cluster, effs, key_pool, key_tp, plan.micro_batch,
                       RECOMPUTE_CODES[plan.settings.recompute], plan.sequence_parallel, plan.settings)
    cols = list(zip(*rows))
    # the data-parallel ring of a stage's layers runs through every pool that holds any of them
    bounds = []
    for group in plan.groups:
        edges = np.cumsum([0] + [s.layers for s in group.stages])
        bounds.append([(edges[i], edges[i + 1], names.index(s.pool)) for i, s in enumerate(group.stages)])
    ring = np.zeros((len(rows), len(names)), dtype=bool)
    r = 0
    for gi, group in enumerate(plan.groups):
        for a, b, p in bounds[gi]:
            ring[r, p] = True
            for other in bounds:
                for a2, b2, p2 in other:
                    if a2 < b and a < b2:
                        ring[r, p2] = True
            r += 1
    blocks = StageBlocks(
        group=np.array(cols[0], dtype=np.int64), key=np.array(cols[1], dtype=np.int64),
        layers=np.array(cols[2], dtype=np.int64), count=np.ones(len(rows), dtype=np.int64),
        position=np.array(cols[3], dtype=np.int64), first=np.array(cols[4], dtype=bool),
        last=np.array(cols[5], dtype=bool), prev_pool=np.array(cols[6], dtype=np.int64),
        next_pool=np.array(cols[7], dtype=np.int64), prev_tp=np.array(cols[8], dtype=np.int64),
        next_tp=np.array(cols[9], dtype=np.int64), ring_pools=ring)
    groups = Groups(plan=np.zeros(len(plan.groups), dtype=np.int64),
                    replicas=np.array([g.replicas for g in plan.groups], dtype=np.int64),
                    stages=np.array([g.pp for g in plan.groups], dtype=np.int64),
                    micro_batches=np.array([np.nan if g.micro_batches is None else g.micro_batches
                                            for g in plan.groups], dtype=float))
    return units, blocks, groups


def model_and_pools(model: ModelSpec | str, cluster: PooledCluster | ClusterSpec | str
                    ) -> tuple[ModelSpec, PooledCluster]:
    """(model, pooled cluster) from specs or names / files, as the mixed-cluster search and
    simulator take them: a one-kind cluster is one pool of its max_gpus; anything else is an
    ``InputError`` naming ``model`` or ``cluster``."""
    model = load_model(model) if isinstance(model, str) else model
    if not isinstance(model, ModelSpec):
        raise InputError("model", f"expected a model name, file or ModelSpec, got {type(model).__name__}",
                         "e.g. 'llama3-70b' (paraplan models list)")
    cluster = load_pooled_cluster(cluster) if isinstance(cluster, str) else cluster
    if isinstance(cluster, ClusterSpec):        # one GPU kind: one pool of its max_gpus, as its name gives
        cluster = one_pool(cluster)
    if not isinstance(cluster, PooledCluster):
        raise InputError("cluster", f"expected a cluster name, file, PooledCluster or ClusterSpec, got "
                         f"{type(cluster).__name__}", "e.g. load_pooled_cluster('a100-h100.yaml')")
    return model, cluster


def simulate_heterogeneous(model: ModelSpec | str, cluster: PooledCluster | str, plan: HeteroPlan,
                           efficiency: dict[str, EfficiencyModel] | None = None) -> HeteroReport:
    """Predict one training step of ``model`` under ``plan`` on the pools of ``cluster``.

    ``model`` and ``cluster`` take specs or names / files, as ``planners.heterogeneous.
    plan_heterogeneous`` does (a one-kind cluster is one pool of its max_gpus); a name failed
    here as an AttributeError ('str' object has no attribute 'moe' / 'pool_names').
    ``efficiency`` maps pool names to efficiency models that override the pools' own (what-if
    studies). Groups without ``micro_batches`` get the shares of the global batch that finish the
    step soonest (``shares``). Raises ``InputError`` naming the pool for a plan the cluster cannot run; a
    stage that does not fit its pool's memory is reported (``fits``), not raised.
    """
    model, cluster = model_and_pools(model, cluster)
    if not isinstance(plan, HeteroPlan):
        raise InputError("plan", f"expected a HeteroPlan, got {type(plan).__name__}",
                         "build one from ReplicaGroup / StagePlacement (simulator.heterogeneous)")
    check_plan(model, cluster, plan)
    effs = pool_efficiencies(cluster, efficiency)
    units, blocks, groups = plan_tables(model, cluster, plan, effs)
    out = compose(model, cluster, effs, plan.settings, units, blocks, groups, plan.zero_stage,
                  plan.microbatches_total)
    return build_report(model, cluster, plan, effs, blocks, out)
