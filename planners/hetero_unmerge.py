"""A plan found on merged pools (``planners.heterogeneous.canonical``) as a plan on the file's own pools.

The search merges pools the cost model cannot tell apart (same system and efficiency model,
whole nodes each, joined at their own scale-out path) into one pool named ``h1+h2``; a plan it
exports must name the pools of the file, which ``paraplan simulate --plan`` reads.

    placements = place(plan, {"h1+h2": (h1, h2)})      # per group, each replica's pool per stage
    real = unmerged(plan, placements, counts)           # one group per distinct placement

Placement fills the merged pool's members in the file's order: a replica's stages on a merged
pool go whole into the first member with room for all of them, and a replica that fits in no
member whole is placed stage by stage (each stage in the first member with room for its
tensor-parallel group). The members are whole nodes and a stage's tensor-parallel degree divides
the node, so no tensor-parallel group straddles two pools.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from hardware_specs.pools import Pool
from simulator.heterogeneous.plan import HeteroPlan, ReplicaGroup
from simulator.heterogeneous.shares import per_replica


def place(plan: HeteroPlan, members: Mapping[str, Sequence[Pool]]) -> list[list[tuple[str, ...]]]:
    """Per group of ``plan``, per replica: the real pool of each stage (``members``: merged pool
    name -> the pools it joins, in the file's order; other pools keep their name)."""
    free = {name: [p.gpus for p in pools] for name, pools in members.items()}
    out = []
    for g in plan.groups:
        merged = [name for name in dict.fromkeys(st.pool for st in g.stages) if name in members]
        reps = []
        for _ in range(g.replicas):
            where = [st.pool for st in g.stages]
            for name in merged:
                room, pools = free[name], members[name]
                idx = [i for i, st in enumerate(g.stages) if st.pool == name]
                need = sum(g.stages[i].tp for i in idx)
                whole = next((k for k, f in enumerate(room) if f >= need), None)
                for i in idx:
                    tp = g.stages[i].tp
                    k = whole if whole is not None else next((k for k, f in enumerate(room) if f >= tp), None)
                    if k is None:
                        raise ValueError(f"{name}: stage of tp {tp} fits none of {[p.name for p in pools]}")
                    room[k] -= tp
                    where[i] = pools[k].name
            reps.append(tuple(where))
        out.append(reps)
    return out


def splits(placements: list[list[tuple[str, ...]]]) -> bool:
    """True where some group's replicas land on different pools (it must become several groups)."""
    return any(len(set(reps)) > 1 for reps in placements)


def unmerged(plan: HeteroPlan, placements: list[list[tuple[str, ...]]],
             counts: Sequence[tuple[int, int]] | None = None) -> HeteroPlan:
    """``plan`` on the real pools of ``placements`` (``place``): one group per distinct
    (placement, micro-batches per replica), in the order replicas were placed.

    ``counts``: per group of ``plan``, (micro-batches of its busiest replica, of the group in all)
    as the merged plan ran them (``HeteroReport.groups``); needed where a group splits
    (``splits``), and then every group states its count, so the split plan runs the merged
    plan's shares. Without it (no group splits) each group keeps its own ``micro_batches``."""
    if counts is None and splits(placements):
        raise ValueError("a group splits across pools: give the merged plan's micro-batch counts")
    groups = []
    for gi, (g, reps) in enumerate(zip(plan.groups, placements)):
        ms = (per_replica(g.replicas, *counts[gi]) if counts is not None else [g.micro_batches] * g.replicas)
        seen: dict[tuple, int] = {}
        for where, m in zip(reps, ms):
            seen[(where, m)] = seen.get((where, m), 0) + 1
        for (where, m), n in seen.items():
            stages = tuple(replace(st, pool=pool) for st, pool in zip(g.stages, where))
            groups.append(ReplicaGroup(stages=stages, replicas=n, micro_batches=m))
    return replace(plan, groups=tuple(groups))
