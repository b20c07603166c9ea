"""Planner review fixes (2026-12-06): the memory search's recompute decrement where the first
stage recomputes every layer, the refined rows under a large --top, duplicate HSDP shard groups,
the nothing-fits hints, and the layer split that --explain shows."""
from __future__ import annotations

import dataclasses

import pytest

from hardware_specs.catalog import load_cluster
from model_specs.catalog import load_model
from planners import plan, row_config
from simulator.simulate import simulate


def _no_offload(name):
    return dataclasses.replace(load_cluster(name), host=None)


def test_a_first_stage_recomputing_every_layer_keeps_the_later_stages_decrement():
    """llama3-70b on 40 A100-40GB, batch 64, no offload: tp4 pp5 cp2 z3 fits only when the first
    stage (16 layers) recomputes all 16, but each later stage may recompute one fewer
    (--recompute-num-layers 16 --recompute-layers-decrement 1, 45.324 s). The search collapsed such
    rows to plain full recomputation (47.60 s) and ranked tp8 z0 full14d2 (46.28 s) first."""
    model, cluster = load_model("llama3-70b"), _no_offload("dgx-a100-40gb")
    result = plan(model, cluster, 40, 64, max_plans=5, workers=1)
    best = result.best
    cfg = row_config(best, result.software[str(best["dtype"])])
    sim = simulate(model, cluster, cfg, n_gpus=40)
    assert sim.fits and sim.step_time_s == best["step_time_s"]
    assert best["step_time_s"] <= 45.3241
    # the first stage's chunk is 80 / 5 = 16 layers, all recomputed; later stages fewer
    assert (best["tp"], best["pp"], best["cp"], best["zero_stage"]) == (4, 5, 2, 3)
    assert best["recompute_num_layers"] == 16 and best["recompute_layers_decrement"] >= 1
    # recomputing every layer on every stage (what the search collapsed it to) fits and is slower
    full = simulate(model, cluster, dataclasses.replace(cfg, recompute_num_layers=0,
                                                         recompute_layers_decrement=0), n_gpus=40)
    assert full.fits and full.step_time_s > sim.step_time_s
    # no ranked row is plain full with the same layout any more: it became the decremented one
    same = result.plans[(result.plans.tp == 4) & (result.plans.cp == 2) & (result.plans.zero_stage == 3)
                        & (result.plans.micro_batch == 1) & (result.plans.pp == 5)]
    assert (same.recompute_layers_decrement >= 1).all()
