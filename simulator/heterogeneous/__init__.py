"""Training on mixed clusters: plans whose stages and replicas sit on different pools.

    report = simulate_heterogeneous(model, load_pooled_cluster("mixed.yaml"), plan)

``plan`` (``HeteroPlan``) lists replica groups of pipelines, each stage on a pool; ``unit_costs``
takes every layer's time from the training step model on the stage's own GPU kind, and
``compose`` lays out stages, pipelines, batch shares and cross-pool collectives, vectorized over
many plans (the planner in ``planners.heterogeneous`` scores with the same function).
"""
from simulator.heterogeneous.compose import Groups, StageBlocks, compose
from simulator.heterogeneous.plan import (HETERO_SCHEDULES, HeteroPlan, ReplicaGroup, StagePlacement, check_plan,
                                          plan_switches)
from simulator.heterogeneous.report import HeteroReport, PoolReport, StageReport, plan_dict
from simulator.heterogeneous.shares import speed_shares
from simulator.heterogeneous.simulate import plan_tables, simulate_heterogeneous
from simulator.heterogeneous.unit_costs import UnitCosts, pool_efficiencies, unit_costs

__all__ = ["Groups", "HETERO_SCHEDULES", "HeteroPlan", "HeteroReport", "PoolReport", "ReplicaGroup", "StageBlocks",
           "StagePlacement", "StageReport", "UnitCosts", "check_plan", "compose", "plan_dict", "plan_switches", "plan_tables",
           "pool_efficiencies", "simulate_heterogeneous", "speed_shares", "unit_costs"]
