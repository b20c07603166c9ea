"""The pooled search's micro-batches, ranked table and dtype: every divisor of the global batch
is tried (a one-pool file then plans as ``plan`` on that kind), with the pipelines a memory
bound rules out dropped before their layout and nothing else; no plan is listed twice; and a
subset of the pools runs its own default dtype, so adding a pool never changes the plans
without it."""
from __future__ import annotations

import numpy as np

from hardware_specs.catalog import load_cluster, load_stack
from hardware_specs.pools import Pool, PooledCluster
from model_specs.catalog import load_model
from planners import hetero_candidates as cand
from planners.hetero_pipelines import fits_memory, layer_cap_bound, might_fit
from planners.heterogeneous import plan_heterogeneous
from planners.plan import plan
from simulator import headroom
from simulator.config_batch import RECOMPUTE_CODES
from simulator.heterogeneous.unit_costs import pool_efficiencies, unit_costs
from simulator.parallel_config import ParallelConfig, Recompute
from simulator.stack_defaults import stack_config_fields

GIB = 2**30
A100, H100, V100 = load_cluster("dgx-a100-80gb"), load_cluster("dgx-h100"), load_cluster("dgx2-v100")


def test_one_pool_plans_every_micro_batch_as_the_one_kind_planner():
    """gpt3-125m, 1,024 sequences on 8 H100: its best micro-batch is 32, which the pooled search
    capped at 8 missed (1.093 s against 0.958 s). With every divisor the one-pool file finds the
    one-kind planner's best plan (restricted to what the pooled search covers: ZeRO 0-1, no CP)."""
    one = PooledCluster("one8", (Pool("h100", H100, 8),))
    pooled = plan_heterogeneous("gpt3-125m", one, 1024)
    alone = plan("gpt3-125m", H100, 8, 1024, fixed={"zero": (0, 1), "cp": (1,)})
    best = alone.plans.iloc[0]
    assert int(best["micro_batch"]) > 8
    assert int(pooled.plans.iloc[0]["micro_batch"]) == int(best["micro_batch"])
    assert np.isclose(pooled.best_report.step_time_s, float(best["step_time_s"]), rtol=1e-9)
    # a cap still caps
    capped = plan_heterogeneous("gpt3-125m", one, 1024, max_micro_batch=8)
    assert capped.plans["micro_batch"].max() <= 8
    assert capped.best_report.step_time_s > pooled.best_report.step_time_s


def test_the_memory_bound_drops_only_plans_that_do_not_fit():
    """Llama-3-70B on 64 A100 + 64 H100, 512 sequences, every micro-batch: ``might_fit`` is False
    for no pipeline mix ``fits_memory`` accepts, and rules out most of those it rejects (the
    large micro-batches), which is what makes every divisor affordable."""
    model = load_model("llama3-70b")
    cluster = PooledCluster("ah", (Pool("a", A100, 64), Pool("h", H100, 64)))
    settings = ParallelConfig(dtype="bf16", **stack_config_fields(load_stack("megatron-core"), "bf16", model.name, None))
    gbs = 512
    mbs = tuple(int(m) for m in cand.divisors(gbs))
    keys = cand.make_keys(model, cluster.pools, 8, mbs, tuple(RECOMPUTE_CODES[r] for r in Recompute), (False, True))
    effs = pool_efficiencies(cluster)
    units = unit_costs(model, cluster, effs, keys.pool, keys.tp, keys.micro_batch, keys.recompute,
                       keys.sequence_parallel, settings)
    limits = np.array([p.cluster.gpu.hbm_bytes - headroom.headroom_gib(p.cluster.gpu.hbm_bytes, None) * GIB
                       for p in cluster.pools])
    bound = layer_cap_bound(model, cluster, settings, units, 1, 128, limits)
    for family in (cand.pipeline_mix, cand.pipeline_mix_smaller):
        pipes, zero = family(model, keys, 0, 1, 64, 64, gbs, (0, 1))
        fits = fits_memory(model, cluster, settings, units, pipes, zero, limits)
        maybe = might_fit(pipes, bound, settings, model.num_layers)
        assert not (fits & ~maybe).any()
        assert fits.any()
        assert (~maybe).sum() > 0.5 * (~fits).sum()


def test_no_plan_is_ranked_twice():
    """1 A100 + 3 H100, gpt3-1.3b, 127 sequences: the all-tp-1 data-parallel mix (1x a tp1 pp1 +
    1x h tp1 pp3) was built under sp off and again under sp on (a tp-1 template serves either),
    and ranked 3rd and 4th. Every row of the table is now a different plan, and that mix is
    still ranked (once)."""
    tiny = PooledCluster("tiny", (Pool("a", A100, 1), Pool("h", H100, 3)))
    res = plan_heterogeneous("gpt3-1.3b", tiny, 127, top=500)
    plans = [res.row_plan(i)[0] for i in range(len(res.plans))]
    assert len(plans) == len(res.plans) > 20
    assert len({repr(p) for p in plans}) == len(plans)       # HeteroPlan holds a dict: not hashable
    cols = ["kind", "pools", "layout", "micro_batch", "zero_stage", "recompute", "sequence_parallel"]
    assert not res.plans.duplicated(subset=cols).any()
    mix = res.plans[(res.plans["kind"] == "data-parallel mix") & (res.plans["micro_batch"] == 1)
                    & (res.plans["zero_stage"] == 0) & (res.plans["recompute"] == "none")]
    # its H100 pipeline's split follows the fitted rates ([9,9,6] before session 51's refit)
    assert mix["layout"].str.startswith("1x a tp1 pp1 [24] + 1x h tp1 pp3 [").sum() == 1


def test_adding_a_pool_without_bf16_leaves_the_plans_without_it_in_bf16():
    """64 H100 alone plan Llama-3-8B (128 sequences) in bf16; with 16 V100 beside them (no bf16)
    the whole file's common dtype is fp16, which the H100-only plans took too. Each set of pools
    now runs its own default: the best H100-only plan is the same plan with the same numbers,
    the plans on the V100 run fp16, and a dtype the request gives applies to every plan."""
    model = "llama3-8b"
    alone = plan_heterogeneous(model, PooledCluster("h64", (Pool("h100", H100, 64),)), 128)
    both = plan_heterogeneous(model, PooledCluster("add", (Pool("h100", H100, 64), Pool("v100", V100, 16))), 128,
                              top=10_000)      # every fitting plan, the V100 ones too
    plan_alone, rep_alone = alone.pool_only["h100"]
    plan_both, rep_both = both.pool_only["h100"]
    assert plan_alone.dtype == "bf16" and plan_both == plan_alone
    assert rep_both.step_time_s == rep_alone.step_time_s
    assert rep_both.memory_bytes == rep_alone.memory_bytes
    assert both.pool_only["v100"][0].dtype == "fp16"
    # the best plan of both is H100-only, so it and its dtype are the H100 pool's
    assert both.best == alone.best and both.dtype == "bf16"
    rows = [both.row_plan(i) for i in range(len(both.plans))]
    assert all(p.dtype == ("fp16" if "v100" in cl.pool_names else "bf16") for p, cl in rows)
    # the table's dtype column against the GPU specs of the pools each row names: the H100 has
    # bf16, the V100 only fp16 (and fp32), so a row on the H100 alone runs bf16, any row with
    # the V100 fp16
    assert "bf16" in H100.gpu.peak_flops_per_s and "fp16" in H100.gpu.peak_flops_per_s
    assert "bf16" not in V100.gpu.peak_flops_per_s and "fp16" in V100.gpu.peak_flops_per_s
    expected = {"h100": "bf16", "v100": "fp16", "h100+v100": "fp16"}
    assert set(both.plans["pools"]) == set(expected)
    assert list(both.plans["dtype"]) == [expected[pools] for pools in both.plans["pools"]]
    fixed = plan_heterogeneous(model, PooledCluster("add", (Pool("h100", H100, 64), Pool("v100", V100, 16))), 128,
                               dtype="fp16", micro_batches=(1, 2))
    assert {p.dtype for p, _ in (fixed.row_plan(i) for i in range(len(fixed.plans)))} == {"fp16"}
    assert fixed.pool_only["h100"][0].dtype == "fp16"


def test_the_layer_bound_is_the_largest_count_the_stage_memory_model_fits():
    """``layer_cap_bound`` and ``_memory_caps`` price a stage with one helper (``_stage_bytes``)
    and turn bytes into layers with one (``_layers_within``): at one micro-batch in flight the
    bound's floor fits the limit by that memory model for every key, and is the most that do
    for every key that holds a layer, recomputation included (the memory is affine from one
    layer on: the one-time recompute buffer is not a layer's; the line through 0 and 1 layer
    made the cap conservative, the same in ``fits_memory``)."""
    from planners.hetero_pipelines import _stage_bytes
    from simulator.heterogeneous.compose import layer_activation_bytes, pool_reserved_bytes

    model = load_model("gpt3-1.3b")
    cluster = PooledCluster("ah", (Pool("a", A100, 8), Pool("h", H100, 8)))
    settings = ParallelConfig(dtype="bf16", **stack_config_fields(load_stack("megatron-core"), "bf16", model.name, None))
    keys = cand.make_keys(model, cluster.pools, 8, (1, 4, 16), tuple(RECOMPUTE_CODES[r] for r in Recompute), (False, True))
    units = unit_costs(model, cluster, pool_efficiencies(cluster), keys.pool, keys.tp, keys.micro_batch,
                       keys.recompute, keys.sequence_parallel, settings)
    limits = np.array([40.0 * GIB, 70.0 * GIB])
    bound = layer_cap_bound(model, cluster, settings, units, 1, 16, limits)
    n = np.floor(bound.layers(np.arange(len(units))))
    layer_act, full_act = layer_activation_bytes(model, settings, units)
    none = np.zeros(len(units), dtype=bool)

    def stage(nl):
        return _stage_bytes(model, settings, nl, 0.0, none, 1.0, units.tp.astype(float), 1, 16,
                            units.micro_batch.astype(float), units.recompute, layer_act, full_act, 1.0,
                            pool_reserved_bytes(cluster, units.pool))

    limit = limits[units.pool]
    assert (n >= 1).any() and (n < model.num_layers).any()
    assert (stage(n) <= limit * (1 + 1e-12)).all()
    holds = n >= 1
    assert (units.recompute[holds] != RECOMPUTE_CODES[Recompute.NONE]).any()
    assert (stage(n + 1)[holds] > limit[holds] * (1 - 1e-12)).all()
