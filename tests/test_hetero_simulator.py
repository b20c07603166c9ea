"""The heterogeneous simulator: per-stage and per-replica costing by hand, shares, cross-pool paths,
per-pool memory, identical pools behaving as one, and bad plans named by their pool."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models import memory
from hardware_specs.catalog import efficiency_for, load_cluster, load_gpu
from hardware_specs.cluster_spec import ClusterSpec, NetworkTier
from hardware_specs.errors import InputError
from hardware_specs.pools import Pool, PooledCluster, PoolLink
from model_specs.catalog import load_model
from model_specs.model_spec import ModelSpec
from simulator.heterogeneous import (Groups, HeteroPlan, ReplicaGroup, StageBlocks, StagePlacement, UnitCosts, compose,
                                     simulate_heterogeneous, speed_shares)
from simulator.heterogeneous.compose import stage_param_count
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate
from simulator.step_model import ADAM_STEP_BYTES_PER_PARAM

GIB = 2**30
SMALL = ModelSpec(name="small", num_layers=8, hidden_size=1024, num_heads=8, num_kv_heads=8, ffn_hidden_size=4096,
                  vocab_size=1000, seq_len=512)


def _ideal_pool(name="p", gpus=64) -> Pool:
    """An H100 pool whose links move bytes in no time (sends and rings cost ~0 s)."""
    fast = NetworkTier("ideal", 1e21, 0.0)     # the plausible maximum: instant at these sizes
    return Pool(name, ClusterSpec(name, load_gpu("h100-sxm-80gb"), 8, fast, fast), gpus)


def _units(n_keys=1, fwd=1e-3, bwd=2e-3, w=1e-3, head=3e-3, emb=0.5e-3) -> UnitCosts:
    z = np.zeros(n_keys)
    values = {"fwd_s": z + fwd, "bwd_s": z + bwd, "w_s": z + w, "tp_s": z, "recompute_s": z,
              "compute_s": z + fwd + bwd + w, "weight_cast_s": z, "head_s": z + head, "embedding_s": z + emb,
              "head_bwd_s": z + head * 2 / 3, "embedding_bwd_s": z + emb / 2, "head_tp_s": z, "embedding_tp_s": z,
              "model_flops_mb": z + 1.0}
    one = np.ones(n_keys, dtype=np.int64)
    return UnitCosts(pool=0 * one, tp=one, micro_batch=one, recompute=0 * one,
                     sequence_parallel=np.zeros(n_keys, dtype=bool), values=values)


def _blocks(rows, ring=None) -> StageBlocks:
    """rows: (group, layers, position, first, last, prev_pool, next_pool) on key 0, tp 1."""
    a = list(zip(*rows))
    n = len(rows)
    return StageBlocks(group=np.array(a[0]), key=np.zeros(n, dtype=np.int64), layers=np.array(a[1]),
                       count=np.ones(n, dtype=np.int64), position=np.array(a[2]), first=np.array(a[3]),
                       last=np.array(a[4]), prev_pool=np.array(a[5]), next_pool=np.array(a[6]),
                       prev_tp=np.ones(n, dtype=np.int64), next_tp=np.ones(n, dtype=np.int64), ring_pools=ring)


# --------------------------------------------------------------------------------------------
# per stage and per replica, by hand
# --------------------------------------------------------------------------------------------

def test_uneven_stages_pipeline_is_the_sum_of_stages_plus_m_minus_1_slowest():
    cluster = PooledCluster("x", (_ideal_pool(),))
    eff = efficiency_for(load_gpu("h100-sxm-80gb"))
    settings = ParallelConfig(overlap_grad_reduce=False, overlap_param_gather=False)
    # one replica: 3 layers (+ embedding) then 5 layers (+ LM head), 4 micro-batches; per layer 1+2+1 ms
    blocks = _blocks([(0, 3, 0, True, False, -1, 0), (0, 5, 1, False, True, 0, -1)])
    groups = Groups(plan=np.array([0]), replicas=np.array([1]), stages=np.array([2]), micro_batches=np.array([4.0]))
    out = compose(SMALL, cluster, (eff,), settings, _units(), blocks, groups, 0, 4)
    t0, t1 = 3 * 4e-3 + 0.5e-3, 5 * 4e-3 + 3e-3                   # 12.5 ms and 23 ms (sends cost ~0)
    assert out["row_stage_s"] == pytest.approx([t0, t1], rel=1e-9)
    pipeline = (t0 + t1) + 3 * t1                                  # fill, then 3 more at the slowest
    assert out["group_pipeline_s"][0] == pytest.approx(pipeline, rel=1e-9)
    # the optimizer: 42 B per parameter of the bigger stage over the achieved HBM bandwidth
    params = stage_param_count(SMALL, np.array([3, 5]), np.array([True, False]), np.array([False, True]), 2, 1)
    opt = params.max() * ADAM_STEP_BYTES_PER_PARAM / (3.35e12 * eff.hbm_fraction)
    assert out["optimizer_s"][0] == pytest.approx(opt, rel=1e-9)
    assert out["step_time_s"][0] == pytest.approx(pipeline + opt, rel=1e-9)
    # the parts of the slowest stage add up to the step
    parts = ("compute_s", "recompute_s", "tp_comm_exposed_s", "pp_comm_s", "pipeline_bubble_s", "dp_comm_exposed_s",
             "sync_wait_s", "optimizer_s")
    assert sum(out[k][0] for k in parts) == pytest.approx(out["step_time_s"][0], rel=1e-12)
    assert out["pipeline_bubble_s"][0] == pytest.approx(pipeline - 4 * t1, rel=1e-9)


def test_the_step_waits_for_the_slowest_replica_group():
    cluster = PooledCluster("x", (_ideal_pool(),))
    eff = efficiency_for(load_gpu("h100-sxm-80gb"))
    settings = ParallelConfig(overlap_grad_reduce=False, overlap_param_gather=False)
    ring = np.ones((3, 1), dtype=bool)
    blocks = _blocks([(0, 3, 0, True, False, -1, 0), (0, 5, 1, False, True, 0, -1),
                      (1, 8, 0, True, True, -1, -1)], ring)
    groups = Groups(plan=np.array([0, 0]), replicas=np.array([1, 1]), stages=np.array([2, 1]),
                    micro_batches=np.array([4.0, 2.0]))
    out = compose(SMALL, cluster, (eff,), settings, _units(), blocks, groups, 0, 6)
    g0 = (12.5e-3 + 23e-3) + 3 * 23e-3                              # 104.5 ms
    g1 = 2 * (8 * 4e-3 + 0.5e-3 + 3e-3)                             # 71 ms
    assert out["group_pipeline_s"] == pytest.approx([g0, g1], rel=1e-9)
    assert out["critical_group"][0] == 0
    # two replicas on one pool's node reduce as the step model places them (NVLink over the ideal
    # links: only its fixed per-call latencies, microseconds); the step is the slower group, that
    # exposed reduction and the optimizer
    assert 0.0 <= out["dp_comm_exposed_s"][0] < 1e-4
    assert out["step_time_s"][0] == pytest.approx(g0 + out["dp_comm_exposed_s"][0] + out["optimizer_s"][0], rel=1e-9)


def test_speed_shares_balance_two_groups_by_hand():
    # group times 1 s and 2 s per micro-batch, no fill: m1 = 1 + T, m2 = 1 + T/2, m1 + m2 = 30
    # gives T = 56/3, m = (19.67, 10.33); in whole micro-batches 20 and 10 finish at 19 s (19 and
    # 11, or 21 and 9, at 20 s)
    busiest, total = speed_shares(np.array([0, 0]), np.array([1, 1]), np.zeros(2), np.array([1.0, 2.0]), np.array([30.0]))
    assert list(total) == [20, 10] and list(busiest) == [20, 10]
    # replicas split a group's total as evenly as integers allow: 3 replicas of 10 -> busiest 4
    busiest, total = speed_shares(np.array([0, 0]), np.array([3, 1]), np.zeros(2), np.array([1.0, 1.0]), np.array([13.0]))
    assert total.sum() == 13 and busiest[0] == np.ceil(total[0] / 3)
    # a group too slow for even one micro-batch in the others' time still gets one
    busiest, total = speed_shares(np.array([0, 0]), np.array([1, 1]), np.array([0.0, 50.0]), np.array([1.0, 50.0]),
                                  np.array([10.0]))
    assert list(total) == [9, 1]


def test_a_send_across_pools_runs_at_the_slowest_link_on_its_path():
    h100 = load_cluster("dgx-h100")
    cluster = PooledCluster("x", (Pool("a", h100, 8), Pool("b", h100, 8)),
                            (PoolLink(("a", "b"), 1e9, 10e-6),))
    model = load_model("llama3-8b")
    plan = HeteroPlan(groups=(ReplicaGroup((StagePlacement("a", 8, 16), StagePlacement("b", 4, 16)), micro_batches=4),),
                      micro_batch=1, sequence_parallel=True)
    rep = simulate_heterogeneous(model, cluster, plan)
    eff = efficiency_for(h100.gpu)
    # activation of one micro-batch, 16-bit, sequence-parallel: in slices of the smaller tp (4),
    # over 1 GB/s x 0.85
    nbytes = 1 * model.seq_len * model.hidden_size * 2.0 / 4
    boundary = nbytes / (1e9 * eff.scaleout_fraction * eff.collective_fraction("p2p")) + 10e-6
    assert rep.stages[0].pp_comm_s == pytest.approx(boundary, rel=1e-9)
    assert rep.stages[1].pp_comm_s == pytest.approx(boundary, rel=1e-9)
    # without sequence parallelism Megatron-Core sends the whole tensor (no scatter/gather)
    whole = simulate_heterogeneous(model, cluster, replace(plan, sequence_parallel=False))
    assert whole.stages[0].pp_comm_s == pytest.approx(4 * (boundary - 10e-6) + 10e-6, rel=1e-9)
    # DeepSpeed's pipeline engine: the send and the other direction's receive block one after
    # the other at the boundary, two transfers where a batched exchange has one
    blocking = simulate_heterogeneous(model, cluster, replace(plan, software={"pipe_exchange_blocking": True}))
    assert blocking.stages[0].pp_comm_s == pytest.approx(2 * boundary, rel=1e-9)
    assert blocking.stages[1].pp_comm_s == pytest.approx(2 * boundary, rel=1e-9)


def test_a_blocking_stage_exchange_doubles_the_step_models_pipeline_sends():
    """The one-kind step model honours ``pipe_exchange_blocking`` as the pooled composer does:
    every send it prices (llama3-8b, 4 stages of 2 x 1 GPUs, each 1/1 slice on NVLink) costs
    two transfers, so the pipeline's send time doubles and the step grows; off is unchanged."""
    cluster, model = load_cluster("dgx-h100"), load_model("llama3-8b")
    cfg = ParallelConfig(dp=2, tp=1, pp=4, micro_batch=1, global_batch=16)
    base, blocking = simulate(model, cluster, cfg), simulate(model, cluster, replace(cfg, pipe_exchange_blocking=True))
    assert cfg.pipe_exchange_blocking is False
    assert blocking.time_breakdown_s["pp_comm_s"] == pytest.approx(2 * base.time_breakdown_s["pp_comm_s"], rel=1e-12)
    assert base.time_breakdown_s["pp_comm_s"] > 0 and blocking.step_time_s > base.step_time_s


def test_each_stage_is_checked_against_its_own_pools_memory():
    a100_40 = load_cluster("dgx-a100-40gb")
    h100 = load_cluster("dgx-h100")
    cluster = PooledCluster("x", (Pool("small", a100_40, 8), Pool("big", h100, 8)))
    model = load_model("llama3-8b")
    # the same 8-way tp stage: 40 GB A100s run out, 80 GB H100s do not
    plan = HeteroPlan(groups=(ReplicaGroup((StagePlacement("small", 8, 31), StagePlacement("big", 8, 1)), micro_batches=8),),
                      micro_batch=8)
    rep = simulate_heterogeneous(model, cluster, plan)
    small, big = rep.stages
    assert small.hbm_bytes == a100_40.gpu.hbm_bytes and big.hbm_bytes == h100.gpu.hbm_bytes
    assert not small.fits and big.fits and not rep.fits
    assert {p.pool: p.fits for p in rep.pools} == {"small": False, "big": True}


def test_fp32_activations_double_the_16_bit_ones_but_not_the_masks():
    m = SMALL
    kw = dict(micro_batch=2, seq_len=512, tp=2, cp=1, sp=False, recompute=0, flash_attention=False)
    b16 = memory.activation_bytes_per_layer(m, **kw)
    b32 = memory.activation_bytes_per_layer(m, **kw, element_bytes=4.0)
    t, h, a = 2 * 512, m.hidden_size, m.num_heads
    masks = t * h * 2.0 + a * 512 * 512 * 2 * 1.0 / 2          # two hidden masks; the probabilities' mask
    assert float(b32) == pytest.approx(2 * float(b16) - masks, rel=1e-12)
    no_drop = replace(m, attention_dropout=False, hidden_dropout=False)
    # without dropout a layer keeps: norm in/outputs (4 x 2h), Q K V, context, MLP (sharded) and the probabilities
    expected = t * h * 8.0 + t * (2 * 1024 + 4 * 1024 + 2 * 1024 + 4 * 4096) / 2 + 2.0 * a * 512 * 512 * 2 / 2
    assert float(memory.activation_bytes_per_layer(no_drop, **kw)) == pytest.approx(expected, rel=1e-12)


def test_a_stage_holds_the_activations_of_the_micro_batches_in_flight_at_its_position():
    cluster = PooledCluster("x", (Pool("p", load_cluster("dgx-h100"), 32),))
    model = load_model("llama3-8b")
    plan = HeteroPlan(groups=(ReplicaGroup(tuple(StagePlacement("p", 8, 8) for _ in range(4)), micro_batches=16),))
    rep = simulate_heterogeneous(model, cluster, plan)
    acts = [s.memory_breakdown_bytes["activations_bytes"] for s in rep.stages]
    # 1F1B: stage s holds min(m, pp - s) = 4, 3, 2, 1 micro-batches of its 8 layers
    assert np.allclose(np.array(acts) / acts[0], [1, 3 / 4, 2 / 4, 1 / 4])
    assert rep.stages[-1].memory_breakdown_bytes["logits_bytes"] > 0 == rep.stages[0].memory_breakdown_bytes["logits_bytes"]


# --------------------------------------------------------------------------------------------
# consistency with the step model and between pools
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model_name, tp, pp, dp, mb, zero, recompute, sp", [
    ("llama3-70b", 8, 4, 8, 1, 1, "selective", True),
    ("llama3-70b", 8, 4, 8, 1, 0, "full", True),
    ("llama3-8b", 2, 2, 4, 2, 1, "none", False),
    ("gpt3-1.3b", 1, 1, 16, 4, 0, "none", False),
    # tied embeddings over stages: the gradient all-reduce between the first and the last stage
    ("gpt3-6.7b", 1, 4, 16, 1, 1, "none", False),
    ("gpt3-6.7b", 2, 2, 4, 2, 0, "selective", True),
])
def test_a_single_pool_even_pipeline_reproduces_the_step_model(model_name, tp, pp, dp, mb, zero, recompute, sp):
    model, cl = load_model(model_name), load_cluster("dgx-h100")
    gbs = dp * mb * 16
    cfg = ParallelConfig(dp=dp, tp=tp, pp=pp, micro_batch=mb, global_batch=gbs, zero_stage=zero, recompute=recompute,
                         sequence_parallel=sp)
    homo = simulate(model, cl, cfg)
    layers = model.num_layers // pp
    plan = HeteroPlan(groups=(ReplicaGroup(tuple(StagePlacement("p", tp, layers) for _ in range(pp)), replicas=dp),),
                      micro_batch=mb, global_batch=gbs, zero_stage=zero, recompute=recompute, sequence_parallel=sp)
    het = simulate_heterogeneous(model, PooledCluster.single(cl, dp * tp * pp, "p"), plan)
    # the same per-layer times, stage layout, pipeline, DP exposure and optimizer: one pool of
    # even stages is the step model's own case
    assert het.step_time_s == pytest.approx(homo.step_time_s, rel=1e-9)
    for part, value in homo.time_breakdown_s.items():
        assert het.time_breakdown_s[part] == pytest.approx(value, rel=1e-9, abs=1e-12), part
    assert het.memory_bytes == pytest.approx(homo.memory_bytes, rel=1e-9)
    assert het.mfu == pytest.approx(homo.mfu, rel=1e-9)


def test_a_single_pool_counts_the_quantised_weight_copies_the_step_model_counts():
    """FP8 on Hopper keeps the FP8 weights and their transpose (2 bytes a parameter beside the
    16-bit ones, ``low_precision.weight_copy_bytes_per_param``); the pooled model took a flat
    1 byte until this test, so one pool of H100s needed less memory than the same H100s."""
    model, cl = load_model("llama3-8b"), load_cluster("dgx-h100")
    cfg = ParallelConfig(dp=4, tp=2, pp=2, micro_batch=2, global_batch=128, zero_stage=1, dtype="fp8")
    homo = simulate(model, cl, cfg)
    plan = HeteroPlan(groups=(ReplicaGroup(tuple(StagePlacement("p", 2, 16) for _ in range(2)), replicas=4),),
                      micro_batch=2, global_batch=128, zero_stage=1, dtype="fp8")
    het = simulate_heterogeneous(model, PooledCluster.single(cl, 16, "p"), plan)
    assert het.memory_bytes == pytest.approx(homo.memory_bytes, rel=1e-9)


_H100 = load_cluster("dgx-h100")
_SPLIT_MODEL = load_model("llama3-8b")


@st.composite
def _whole_node_groups(draw):
    """Replica groups whose stages fill whole 8-GPU nodes, each on pool 'a' or 'b'."""
    groups = []
    for _ in range(draw(st.integers(1, 3))):
        tp = draw(st.sampled_from([1, 2, 4, 8]))
        replicas = 8 // tp * draw(st.integers(1, 2))
        pp = draw(st.integers(1, 3))
        cut = sorted(draw(st.lists(st.integers(1, 31), min_size=pp - 1, max_size=pp - 1, unique=True)))
        layers = np.diff([0] + cut + [32]).tolist()
        pools = [draw(st.sampled_from("ab")) for _ in range(pp)]
        groups.append(ReplicaGroup(tuple(StagePlacement(p, tp, n) for p, n in zip(pools, layers)), replicas=replicas))
    return groups


@settings(max_examples=25, deadline=None)
@given(groups=_whole_node_groups(), zero=st.sampled_from([0, 1]), recompute=st.sampled_from(["none", "full"]))
def test_two_identical_pools_predict_what_one_pool_of_their_sum_does(groups, zero, recompute):
    two = PooledCluster("two", (Pool("a", _H100, 512), Pool("b", _H100, 512)))
    one = PooledCluster("one", (Pool("m", _H100, 1024),))
    merged = [ReplicaGroup(tuple(StagePlacement("m", s.tp, s.layers) for s in g.stages), replicas=g.replicas)
              for g in groups]
    replicas = sum(g.replicas for g in groups)
    kw = dict(micro_batch=1, global_batch=4 * replicas, zero_stage=zero, recompute=recompute)
    r2 = simulate_heterogeneous(_SPLIT_MODEL, two, HeteroPlan(groups=tuple(groups), **kw))
    r1 = simulate_heterogeneous(_SPLIT_MODEL, one, HeteroPlan(groups=tuple(merged), **kw))
    assert r2.step_time_s == pytest.approx(r1.step_time_s, rel=1e-9)
    assert r2.memory_bytes == pytest.approx(r1.memory_bytes, rel=1e-9)
    assert [g["micro_batches_total"] for g in r2.groups] == [g["micro_batches_total"] for g in r1.groups]


def test_a_slower_link_between_the_pools_slows_a_plan_that_crosses_it():
    kw = dict(micro_batch=1, global_batch=64)
    groups = (ReplicaGroup((StagePlacement("a", 8, 16), StagePlacement("b", 8, 16)), replicas=2),)
    fast = PooledCluster("f", (Pool("a", _H100, 16), Pool("b", _H100, 16)))
    slow = PooledCluster("s", fast.pools, (PoolLink(("a", "b"), 1e9, 50e-6),))
    t_fast = simulate_heterogeneous(_SPLIT_MODEL, fast, HeteroPlan(groups=groups, **kw)).step_time_s
    t_slow = simulate_heterogeneous(_SPLIT_MODEL, slow, HeteroPlan(groups=groups, **kw)).step_time_s
    assert t_slow > t_fast * 1.05


def test_tf32_runs_fp32_on_gpus_without_tf32_tensor_cores():
    titan = ClusterSpec("t", load_gpu("titan-rtx"), 8, NetworkTier("pcie", 15.75e9, 5e-6),
                        NetworkTier("ethernet", 1.25e9, 5e-5))
    cluster = PooledCluster("x", (Pool("t", titan, 8), Pool("h", _H100, 8)))
    plan = HeteroPlan(groups=(ReplicaGroup((StagePlacement("t", 8, 16), StagePlacement("h", 8, 16)), micro_batches=2),),
                      dtype="tf32", micro_batch=1)
    rep = simulate_heterogeneous(_SPLIT_MODEL, cluster, plan)
    assert rep.prior_pools == ("t",)           # Turing rests on the unfitted prior, and says so
    peak = 8 * (16.3e12 + 494.7e12)           # fp32 on the Titan, TF32 on the H100
    assert rep.mfu == pytest.approx(rep.model_flops / rep.step_time_s / peak, rel=1e-9)


# --------------------------------------------------------------------------------------------
# bad plans name their pool
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stages, message", [
    ((StagePlacement("a", 16, 32),), r"pools\.a\.tp: tensor-parallel group of 16 is larger than the pool's node of 8"),
    ((StagePlacement("c", 8, 32),), r"pools\.c: unknown pool"),
    ((StagePlacement("a", 3, 32),), r"pools\.a\.tp: tp=3 does not divide"),
    ((StagePlacement("a", 8, 30),), r"groups\[0\]\.layers: the stages hold 30 layers"),
])
def test_plans_a_cluster_cannot_run_raise_naming_the_pool(stages, message):
    cluster = PooledCluster("x", (Pool("a", _H100, 16), Pool("b", _H100, 16)))
    with pytest.raises(InputError, match=message):
        simulate_heterogeneous(_SPLIT_MODEL, cluster, HeteroPlan(groups=(ReplicaGroup(stages, micro_batches=1),)))


def test_a_plan_placing_more_gpus_than_a_pool_has_is_refused():
    cluster = PooledCluster("x", (Pool("a", _H100, 16),))
    plan = HeteroPlan(groups=(ReplicaGroup((StagePlacement("a", 8, 32),), replicas=3, micro_batches=1),))
    with pytest.raises(InputError, match=r"pools\.a\.gpus: the plan places 24 GPUs on a pool of 16"):
        simulate_heterogeneous(_SPLIT_MODEL, cluster, plan)


def test_plan_settings_are_validated_on_construction():
    g = (ReplicaGroup((StagePlacement("a", 8, 32),)),)
    with pytest.raises(InputError, match="global_batch: missing"):
        HeteroPlan(groups=g)
    with pytest.raises(InputError, match="zero_stage"):
        HeteroPlan(groups=g, global_batch=8, zero_stage=3)
    with pytest.raises(InputError, match="schedule"):
        HeteroPlan(groups=g, global_batch=8, schedule="zb-h1")
    with pytest.raises(InputError, match="global_batch: 9 sequences"):
        HeteroPlan(groups=(ReplicaGroup((StagePlacement("a", 8, 32),), micro_batches=4),), global_batch=9)
    with pytest.raises(InputError, match="layers: must be a positive integer"):
        StagePlacement("a", 8, 0)
