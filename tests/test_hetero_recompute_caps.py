"""The mixed-cluster search's per-stage layer caps under recomputation: a stage's memory is
affine in its layers from one layer on, not from 0 (its first layer also brings the one-time
recomputation buffer, ``compose.stage_memory_parts``), so the line through 0 and 1 layers
overstated a layer and dropped plans that fit (Llama-3-70B on 16 GH200: no plan at all, while
``simulate`` fits tp4 pp4 [4x20] with full recomputation). The caps are now exact for the
memory model the simulator prices, and the bound that prunes before them stays above them."""
from __future__ import annotations

import json

import numpy as np

from cli_results import run
from hardware_specs.catalog import load_cluster, load_stack
from hardware_specs.pools import Pool, PooledCluster
from model_specs.catalog import load_model
from planners import hetero_candidates as cand
from planners.hetero_pipelines import (Pipelines, _class_bytes, _classes, _exact_caps, _memory_caps, fits_memory,
                                       layer_cap_bound, might_fit)
from simulator import headroom
from simulator.config_batch import RECOMPUTE_CODES
from simulator.heterogeneous.unit_costs import pool_efficiencies, unit_costs
from simulator.parallel_config import ParallelConfig, Recompute
from simulator.stack_defaults import stack_config_fields

GIB = 2**30
GH200 = load_cluster("alps-gh200")
A100, H100 = load_cluster("dgx-a100-80gb"), load_cluster("dgx-h100")
GH1_YAML = "name: gh1\npools:\n  - {name: gh, cluster: alps-gh200, gpus: 16}\n"


def _setup(model, cluster, max_tp, mbs, recomputes, sps):
    settings = ParallelConfig(dtype="bf16", **stack_config_fields(load_stack("megatron-core"), "bf16", model.name,
                                                                  None))
    keys = cand.make_keys(model, cluster.pools, max_tp, mbs, recomputes, sps)
    units = unit_costs(model, cluster, pool_efficiencies(cluster), keys.pool, keys.tp, keys.micro_batch,
                       keys.recompute, keys.sequence_parallel, settings)
    limits = np.array([p.cluster.gpu.hbm_bytes - headroom.headroom_gib(p.cluster.gpu.hbm_bytes, None) * GIB
                       for p in cluster.pools])
    return settings, keys, units, limits


def test_the_first_stage_of_tp4_pp4_full_recompute_holds_21_layers_of_llama3_70b_on_gh200():
    """By hand, Llama-3-70B (h 8192, 64 heads, 8 KV heads, FFN 28672 gated, vocab 128256), one
    stage of tp4 pp4 on a 96 GiB GH200 (limit 96 x 0.95 = 91.2 GiB), micro-batch 1 of 8192
    tokens, full recomputation, sequence parallel, ZeRO 0, 64 micro-batches (4 in flight on the
    first stage). A layer: 2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 28672 + 2 x 8192 =
    855,654,400 parameters, /4 x 18 B (bf16 weight, fp32 gradient, fp32 master + 2 Adam moments)
    = 3.5860 GiB, plus its stored input 8192 x 8192 x 2 B / 4 = 0.03125 GiB per micro-batch in
    flight (0.125), x 1.05 allocator = 3.8966 GiB. At 0 layers the embedding, 128256 x 8192 / 4
    x 18 B x 1.05 + 1.5 GiB reserve = 6.124 GiB. So (91.2 - 6.124) / 3.8966 = 21.83: 21 layers
    for any one-time recompute buffer under 3.2 GiB (at 22 layers 91.85 GiB > 91.2 even with
    none). The old cap took the first layer's buffer (0.517 GiB) as every layer's: 19, and
    19 + 20 + 20 + 19 < 80 refused the even split."""
    model = load_model("llama3-70b")
    cluster = PooledCluster("gh1", (Pool("gh", GH200, 16),))
    settings, keys, units, limits = _setup(model, cluster, 4, (1,), (RECOMPUTE_CODES[Recompute.FULL],), (True,))
    k = int(np.flatnonzero(keys.tp == 4)[0])
    p = Pipelines(plan=np.array([0]), replicas=np.array([1]), micro_batches=np.array([64.0]),
                  seg_pool=np.array([[0]]), seg_key=np.array([[k]]), seg_tp=np.array([[4]]),
                  seg_stages=np.array([[4]]))
    cl = _classes(p)
    assert np.isclose(limits[0], 91.2 * GIB)
    mem = _class_bytes(model, cluster, settings, units, p, cl, np.array([0]))
    per_layer = (855_654_400 / 4 * 18 + 8192 * 8192 * 2 / 4 * 4) * 1.05
    assert np.isclose(mem(2.0)[0, 0] - mem(1.0)[0, 0], per_layer, rtol=1e-9)
    assert np.isclose(mem(0.0)[0, 0], 128256 * 8192 / 4 * 18 * 1.05 + 1.5 * GIB, rtol=1e-9)
    caps = _memory_caps(model, cluster, settings, units, p, cl, np.array([0]), limits)
    assert caps[0, 0] == 21
    assert fits_memory(model, cluster, settings, units, p, np.array([0]), limits).all()
    bound = layer_cap_bound(model, cluster, settings, units, 0, 1, limits)
    assert might_fit(p, bound, settings, model.num_layers).all()


def test_the_mixed_search_finds_the_plan_simulate_fits_on_16_gh200(tmp_path):
    """``plan`` on the one-pool file gh1 (16 GH200) said no plan fits; ``simulate`` of 1x gh tp4
    pp4 (ZeRO 0, full recomputation, sp) fits every stage. The plan search now finds a plan at
    least as fast as that one, its step time is what ``simulate`` gives for the plan it prints,
    and every plan it ranks fits (its memory within 91.2 GiB)."""
    cfg = tmp_path / "gh1.yaml"
    cfg.write_text(GH1_YAML)
    ref = run("simulate", "-m", "llama3-70b", "-c", cfg, "--global-batch", "64", "--group", "1x gh:tp4:pp4",
              "--zero", "0", "--recompute", "full", "--sequence-parallel", "--json")
    assert ref.exit_code == 0, ref.output
    ref = json.loads(ref.stdout)
    assert ref["fits"]
    r = run("plan", "-m", "llama3-70b", "-c", cfg, "--global-batch", "64", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    best = data["plans"][0]
    assert best["step_time_s"] <= ref["step_time_s"] * (1 + 1e-12)
    assert all(row["memory_gib"] <= 91.2 + 1e-9 for row in data["plans"])
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(data))
    s = run("simulate", "-m", "llama3-70b", "-c", cfg, "--plan", plan_file, "--json")
    assert s.exit_code == 0, s.output
    again = json.loads(s.stdout)
    assert again["fits"]
    assert np.isclose(again["step_time_s"], best["step_time_s"], rtol=1e-9)


def test_no_cap_admits_a_layer_count_over_the_limit_and_none_leaves_one_out():
    """Every pipeline the search builds for Llama-3-70B on 64 A100 + 64 H100 (every recompute
    mode, micro-batches 1, 2 and 8, sp on and off, ZeRO 0 and 1): each class's cap n holds by
    the stage memory the simulator prices (``_class_bytes``: ``stage_memory_parts``) and n + 1
    does not (or n is all 80 layers); and the pruning bound (``might_fit``) keeps every plan
    ``fits_memory`` keeps."""
    model = load_model("llama3-70b")
    cluster = PooledCluster("ah", (Pool("a", A100, 64), Pool("h", H100, 64)))
    settings, keys, units, limits = _setup(model, cluster, 8, (1, 2, 8), tuple(RECOMPUTE_CODES[r] for r in Recompute),
                                           (False, True))
    bound = layer_cap_bound(model, cluster, settings, units, 1, 128, limits)
    L = model.num_layers
    checked = 0
    for family in (cand.pipeline_mix, cand.pipeline_mix_smaller):
        p, zero = family(model, keys, 0, 1, 64, 64, 512, (0, 1))
        cl = _classes(p)
        used = cl["mult"] > 0
        cap = _memory_caps(model, cluster, settings, units, p, cl, zero, limits)
        mem = _class_bytes(model, cluster, settings, units, p, cl, zero)
        limit = limits[np.where(used, cl["pool"], 0)]
        at_cap, at_next = mem(cap), mem(np.minimum(cap + 1, L))
        assert ((cap == 0) | (at_cap <= limit))[used].all()
        assert ((cap == L) | (at_next > limit))[used].all()
        assert ((cap > 0) & (cap < L))[used].any() and (cap == 0)[used].any()
        fits = fits_memory(model, cluster, settings, units, p, zero, limits)
        assert not (fits & ~might_fit(p, bound, settings, L)).any()
        checked += int(used.sum())
    assert checked > 1000


def test_the_cap_follows_any_memory_curve():
    """``_exact_caps`` against hand-made curves with limit 100: affine from 0 (10 + 7n: 12
    layers, 94 <= 100 < 101), a one-time 30 at the first layer (40 + 7n from n = 1: 8 layers,
    96; the line through 0 and 1 would give 2), a step of 20 from 5 layers (the 1..2 line
    says 12; 10 + 70 + 20 = 100 fits, 10 + 77 + 20 = 107 does not: 10), a curve the 1..2 line
    under-counts (5n^2: the line says 7; 80 at 4, 125 at 5: 4), nothing fits (200 at 1 layer:
    0), everything fits (1 byte a layer: at most the 80 layers)."""
    L = 80

    def curves(n):
        n = np.asarray(n, dtype=float) * np.ones(6)
        return np.array([10 + 7 * n[0],
                         10 + 7 * n[1] + 30 * (n[1] > 0),
                         10 + 7 * n[2] + 20 * (n[2] >= 5),
                         5 * n[3] ** 2,
                         200 * (n[4] > 0) + n[4],
                         float(n[5] > 0) + n[5]])

    caps = _exact_caps(curves, np.full(6, 100.0), L)
    assert caps.tolist() == [12, 8, 10, 4, 0, 80]
