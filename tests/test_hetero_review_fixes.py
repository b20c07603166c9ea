"""The pooled model against the one-kind model where a review found them apart: the tied
embedding's gradient all-reduce, the stack switches the step model reads, options a pooled
cluster cannot honour, and tensor-parallel groups that do not fit a node."""
from __future__ import annotations

from dataclasses import replace

import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from hardware_specs.pools import Pool, PooledCluster, PoolLink
from model_specs.catalog import load_model
from simulator.heterogeneous import HeteroPlan, ReplicaGroup, StagePlacement, simulate_heterogeneous

_H100 = load_cluster("dgx-h100")


# --------------------------------------------------------------------------------------------
# tied embeddings
# --------------------------------------------------------------------------------------------

def _cross_pool_plan(layers=(16, 16)):
    return HeteroPlan(groups=(ReplicaGroup((StagePlacement("a", 1, layers[0]), StagePlacement("b", 1, layers[1])),
                                           replicas=16),), micro_batch=1, global_batch=128, zero_stage=1)


def test_a_tied_embedding_split_across_pools_all_reduces_its_gradient_over_the_link_between_them():
    """gpt3-6.7b's first stage on pool a, its last on pool b, joined by a 1 Gb/s link: each GPU
    all-reduces its V x h fp32 embedding gradient (50,257 x 4,096 x 4 B = 823 MB) with its peer
    over the link. Two ranks: a ring all-reduce moves 2 (n - 1) / n = 1 x the bytes at the link's
    achieved 1.25e8 B/s x the scale-out fraction (0.85 on Hopper), 7.75 s; the untied model's
    exposed DP traffic (its first stage's own reduction, the same) is the rest."""
    model = load_model("gpt3-6.7b")
    slow = PooledCluster("s", (Pool("a", _H100, 16), Pool("b", _H100, 16)), (PoolLink(("a", "b"), 1.25e8, 50e-6),))
    tied = simulate_heterogeneous(model, slow, _cross_pool_plan())
    untied = simulate_heterogeneous(replace(model, tied_embeddings=False), slow, _cross_pool_plan())
    fraction = efficiency_for_cluster(_H100).scaleout_fraction
    expected = 50257 * 4096 * 4.0 / (1.25e8 * fraction)
    extra = tied.time_breakdown_s["dp_comm_exposed_s"] - untied.time_breakdown_s["dp_comm_exposed_s"]
    assert extra == pytest.approx(expected, rel=1e-3)
    assert tied.step_time_s - untied.step_time_s == pytest.approx(extra, rel=1e-9)
    assert tied.stages[0].dp_comm_exposed_s == pytest.approx(tied.time_breakdown_s["dp_comm_exposed_s"], rel=1e-12)


def test_a_tied_pipeline_across_two_pools_joined_at_their_own_speed_is_one_pool_of_their_sum():
    """The pair's all-reduce across the pools is the one-kind collective on the path between them,
    which for two pools of one system joined at its own scale-out tier is that system's: the
    pools stay interchangeable (``planners.heterogeneous.canonical`` merges them)."""
    model = load_model("gpt3-6.7b")
    two = simulate_heterogeneous(model, PooledCluster("two", (Pool("a", _H100, 16), Pool("b", _H100, 16))),
                                 _cross_pool_plan())
    one_plan = HeteroPlan(groups=(ReplicaGroup((StagePlacement("m", 1, 16), StagePlacement("m", 1, 16)),
                                               replicas=16),), micro_batch=1, global_batch=128, zero_stage=1)
    one = simulate_heterogeneous(model, PooledCluster("one", (Pool("m", _H100, 32),)), one_plan)
    assert two.step_time_s == pytest.approx(one.step_time_s, rel=1e-9)
    assert two.time_breakdown_s["dp_comm_exposed_s"] == pytest.approx(one.time_breakdown_s["dp_comm_exposed_s"],
                                                                      rel=1e-9)


# --------------------------------------------------------------------------------------------
# one pool is the step model's own case, whatever the stack's switches
# --------------------------------------------------------------------------------------------

def _one_pool_and_one_kind(model_name, tp, pp, dp, zero=1, cluster=_H100, **software):
    """(pooled report, one-kind report) of one even pipeline on one pool of ``cluster`` (DGX
    H100s) and on the one-kind cluster, with the same software switches."""
    from simulator.parallel_config import ParallelConfig
    from simulator.simulate import simulate

    model = load_model(model_name)
    gbs = dp * 16
    homo = simulate(model, cluster, ParallelConfig(dp=dp, tp=tp, pp=pp, global_batch=gbs, zero_stage=zero, **software))
    own = {k: software.pop(k) for k in list(software) if k in ("overlap_grad_reduce", "grad_accumulation_fusion",
                                                                 "grad_reduce_bytes")}
    stages = tuple(StagePlacement("p", tp, model.num_layers // pp) for _ in range(pp))
    plan = HeteroPlan(groups=(ReplicaGroup(stages, replicas=dp),), global_batch=gbs, zero_stage=zero,
                      software=software, **own)
    return simulate_heterogeneous(model, PooledCluster.single(cluster, dp * tp * pp, "p"), plan), homo


def _assert_same_step(het, homo):
    assert het.step_time_s == pytest.approx(homo.step_time_s, rel=1e-12)
    for part, value in homo.time_breakdown_s.items():
        assert het.time_breakdown_s[part] == pytest.approx(value, rel=1e-9, abs=1e-12), part
    assert het.memory_bytes == pytest.approx(homo.memory_bytes, rel=1e-12)


def test_a_stack_whose_zero1_all_reduces_whole_gradients_prices_the_all_reduce_on_a_pool_too():
    """megatron-deepspeed's bf16 ZeRO-1 all-reduces the gradients (``zero1_grad_all_reduce``):
    twice a reduce-scatter's traffic. The pooled model reduce-scattered regardless (llama3-8b tp4
    pp2 on 64 H100s: 0.0621 s of exposed DP traffic against the step model's 0.1034 s)."""
    het, homo = _one_pool_and_one_kind("llama3-8b", 4, 2, 8, zero=1, zero1_grad_all_reduce=True,
                                       overlap_grad_reduce=False)
    _assert_same_step(het, homo)
    rs, _ = _one_pool_and_one_kind("llama3-8b", 4, 2, 8, zero=1, overlap_grad_reduce=False)
    assert het.time_breakdown_s["dp_comm_exposed_s"] > 1.5 * rs.time_breakdown_s["dp_comm_exposed_s"]


@pytest.mark.parametrize("tp, pp", [(1, 8), (2, 4)])
def test_a_tied_pipeline_inside_one_node_of_a_pool_reduces_its_embedding_over_nvlink_as_simulate_does(tp, pp):
    """gpt3-6.7b at pp 8 (or tp 2 pp 4) on one 8-GPU pool: the first and the last stage are ranks
    0 and 7 (0-1 and 6-7) of one node, so the tied embedding's 2-rank all-reduce runs on NVLink:
    823.4 MB / tp at 450 GB/s x the scale-up fraction, not the NIC's rate the pair's stride of
    7 (6) had given it in both models. The pooled step is simulate's."""
    het, homo = _one_pool_and_one_kind("gpt3-6.7b", tp, pp, 1)
    _assert_same_step(het, homo)
    eff = efficiency_for_cluster(_H100)
    nvlink = 50257 * 4096 * 4.0 / tp / (_H100.scaleup.bw_bytes_per_s * eff.scaleup_fraction)
    assert het.time_breakdown_s["dp_comm_exposed_s"] == pytest.approx(nvlink, rel=0.02)


@pytest.mark.parametrize("model_name, tp, pp, dp", [("llama3-8b", 4, 2, 8), ("gpt3-6.7b", 1, 4, 16)])
def test_unfused_gradient_accumulation_adds_the_step_models_kernels_on_a_pool_too(model_name, tp, pp, dp):
    """Without gradient-accumulation fusion every micro-batch adds each weight gradient into the
    buffer: one kernel per layer tensor, and one for the embedding (first stage) and an untied
    LM head (last stage). The pooled model left out the ends' kernels (llama3-8b tp4 pp2: compute
    short by one kernel overhead a micro-batch, 2.641716 s against 2.642144 s) and streamed a tied
    model's embedding copy on the last stage, which the step model does not accumulate."""
    het, homo = _one_pool_and_one_kind(model_name, tp, pp, dp, grad_accumulation_fusion=False)
    _assert_same_step(het, homo)


@pytest.mark.parametrize("stack", ["megatron-bridge", "nemo-24", "megatron-deepspeed", "megatron-core"])
def test_one_pool_under_a_stack_steps_as_simulate_under_that_stack(stack):
    """Every layer-key switch of the stack reaches the pooled layer costs: megatron-bridge's
    Transformer Engine loss (``cross_entropy: te_triton``) and NeMo's fused one were priced as
    Megatron's unfused loss on a pool (llama3-8b tp4 pp2: 3.8% and 1.8% slower than simulate)."""
    from hardware_specs.catalog import load_stack
    from simulator.heterogeneous import plan_switches
    from simulator.parallel_config import ParallelConfig
    from simulator.simulate import simulate
    from simulator.stack_defaults import stack_config_fields

    model = load_model("llama3-8b")
    fields = stack_config_fields(load_stack(stack), "bf16", model.name, _H100.gpu.name)
    homo = simulate(model, _H100, ParallelConfig(dp=8, tp=4, pp=2, global_batch=128, zero_stage=1, recompute="full",
                                                 **fields))
    stages = tuple(StagePlacement("p", 4, 16) for _ in range(2))
    plan = HeteroPlan(groups=(ReplicaGroup(stages, replicas=8),), global_batch=128, zero_stage=1, recompute="full",
                      **plan_switches(fields))
    _assert_same_step(simulate_heterogeneous(model, PooledCluster.single(_H100, 64, "p"), plan), homo)


@pytest.mark.parametrize("model_name, tp, pp, dp, zero, software", [
    ("gpt3-1.3b", 1, 1, 64, 1, {}),                  # one stage: the LM head's backward is in the window
    ("llama3-8b", 4, 2, 8, 1, {}),                   # the first stage's send is in its forward window
    ("llama3-8b", 4, 2, 8, 0, {"grad_accumulation_fusion": False}),   # the accumulation in its backward
])
def test_the_data_parallel_traffic_hides_under_the_first_stages_whole_passes_as_in_the_step_model(
        model_name, tp, pp, dp, zero, software):
    """On a 25 Gb/s fabric the gradient reduction and the ZeRO-1 gather outlast their windows,
    so what they leave exposed is traffic less window. The step model's windows are the first
    stage's whole backward (its layers, its ends, their gradient accumulation) and forward (with
    the send to the next stage); the pooled ones left out the LM head on a one-stage pipeline,
    the accumulation and the send (gpt3-1.3b tp1 pp1 on 64 GPUs: 1.2628 s against 1.2580 s)."""
    from hardware_specs.cluster_spec import NetworkTier

    slow = replace(_H100, name="slow", scaleout=NetworkTier("ethernet", 25e9 / 8, 5e-6))
    het, homo = _one_pool_and_one_kind(model_name, tp, pp, dp, zero=zero, cluster=slow, **software)
    assert homo.time_breakdown_s["dp_comm_exposed_s"] > 0.1 * homo.step_time_s     # the windows bind
    _assert_same_step(het, homo)


def test_a_pool_counts_the_replicated_key_value_projections_of_a_tp_wider_than_the_kv_heads():
    """llama3-70b (8 key/value heads) at tp 16 on a pool of 16-GPU nodes, with a stack that
    replicates the heads: each rank holds 2 h d (1 - 8/16) = 2 x 8,192 x 128 x 0.5 = 1,048,576 K/V
    weights a layer beyond its 1/16 share, as the step model counts them (``kv_head_replication``).
    The pooled stages left them out (on GB200 NVL72: 76.71 GB a GPU against simulate's 77.11 GB,
    and a faster optimizer)."""
    wide = replace(load_cluster("gb200-nvl72"), name="nvl16", gpus_per_node=16)
    het, homo = _one_pool_and_one_kind("llama3-70b", 16, 2, 4, zero=1, cluster=wide, kv_head_replication=True)
    _assert_same_step(het, homo)
    from simulator.heterogeneous.compose import stage_param_count
    model = load_model("llama3-70b")
    extra = stage_param_count(model, 1, 0, 0, 2, 16) - stage_param_count(model, 1, 0, 0, 2, 8) / 2
    assert extra == pytest.approx(2 * 8192 * 128 * 0.5, rel=1e-12)


# --------------------------------------------------------------------------------------------
# tensor-parallel groups inside one node
# --------------------------------------------------------------------------------------------

def _six_per_node(gpus=12):
    six = replace(_H100, name="six", gpus_per_node=6)
    return PooledCluster("six", (Pool("s", six, gpus),))


def test_tp_groups_that_cannot_all_sit_inside_a_node_are_refused_naming_the_pool():
    """Two 6-GPU nodes hold two groups of 4, not three: the third spans both nodes, and was priced
    on the scale-up tier. A pool's tp must divide its node."""
    from hardware_specs.errors import InputError

    plan = HeteroPlan(groups=(ReplicaGroup((StagePlacement("s", 4, 32),), replicas=3),), global_batch=60,
                      zero_stage=1)
    with pytest.raises(InputError, match=r"pools\.s\.tp: tensor-parallel groups of 4 do not tile the pool's nodes "
                                         r"of 6 GPUs .*use a tp dividing 6 on s: 1, 2, 3, 6"):
        simulate_heterogeneous(load_model("llama3-8b"), _six_per_node(), plan)
    ok = HeteroPlan(groups=(ReplicaGroup((StagePlacement("s", 2, 32),), replicas=6),), global_batch=60, zero_stage=1)
    assert simulate_heterogeneous(load_model("llama3-8b"), _six_per_node(), ok).n_gpus == 12


def test_the_pooled_planner_only_tries_tp_degrees_that_divide_a_pools_node():
    from planners.heterogeneous import plan_heterogeneous

    result = plan_heterogeneous("llama3-8b", _six_per_node(), global_batch=60, top=10**6)
    tps = {st.tp for i in range(len(result.plans)) for g in result.row_plan(i)[0].groups for st in g.stages}
    assert tps and tps <= {1, 2, 3, 6}
