"""The heterogeneous planner: its numbers are the simulator's, its layer split is the ILP's
optimum, identical pools plan at least as well as one pool of their sum, adding a pool never
lowers the best plan, and a mixed
A100 + H100 cluster beats either pool alone."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hardware_specs.catalog import load_cluster
from hardware_specs.errors import InputError
from hardware_specs.pools import Pool, PooledCluster, PoolLink
from model_specs.catalog import load_model
from planners.hetero_split import split_layers, split_layers_ilp
from planners.heterogeneous import canonical, plan_heterogeneous
from simulator.heterogeneous import pool_efficiencies, simulate_heterogeneous

GIB = 2**30
A100, H100, A40 = load_cluster("dgx-a100-80gb"), load_cluster("dgx-h100"), load_cluster("dgx-a100-40gb")
SMALL = load_model("gpt3-1.3b")
#: a small search: 1.3B model, one micro-batch size, no recomputation choice
FAST = dict(global_batch=64, max_micro_batch=2, recomputes=("none",), zeros=(0, 1))


# --------------------------------------------------------------------------------------------
# the layer split
# --------------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_the_vectorized_split_finds_the_ilp_optimum(data):
    K = data.draw(st.integers(1, 4))
    mult = np.array([data.draw(st.integers(0, 3)) for _ in range(K)])
    mult[0] = max(mult[0], 1)
    tau = np.array([data.draw(st.floats(0.5, 3.0)) for _ in range(K)])
    extra = np.array([data.draw(st.floats(0.0, 5.0)) for _ in range(K)])
    cap = np.array([data.draw(st.sampled_from([np.inf, 2, 5, 9])) for _ in range(K)], dtype=float)
    L = data.draw(st.integers(int(mult.sum()), 30))
    split = split_layers(mult[None], tau[None], extra[None], cap[None], L)
    stages = [(tau[c], extra[c], cap[c]) for c in range(K) for _ in range(mult[c])]
    ilp = split_layers_ilp([s[0] for s in stages], [s[1] for s in stages], [s[2] for s in stages], L)
    assert bool(split.feasible[0]) == (ilp is not None)
    if ilp is None:
        return
    used = mult > 0
    lo = np.where(split.count_lo[0] > 0, split.layers_hi[0] - 1, split.layers_hi[0])
    assert (split.layers_hi[0] * split.count_hi[0] + (split.layers_hi[0] - 1) * split.count_lo[0]).sum() == L
    assert (lo[used] >= 1).all() and (split.layers_hi[0][used] <= cap[used]).all()
    # the vectorized split is exact; CBC's is optimal within its own tolerances (a fresh clone's
    # examples drew a 2.0000066 s split from it where a 2.0 s one exists): never worse than the
    # ILP's, and equal to it within the solver's tolerance
    assert split.slowest_s[0] <= ilp[1] * (1 + 1e-9)
    assert split.slowest_s[0] == pytest.approx(ilp[1], rel=1e-5)


def test_layers_go_to_the_faster_pool_in_proportion_to_its_speed():
    # stage on a 3x faster pool: 3 layers there for each on the slower one
    split = split_layers(np.array([[1, 1]]), np.array([[3.0, 1.0]]), np.zeros((1, 2)), np.full((1, 2), np.inf), 40)
    assert list(split.layers_hi[0]) == [10, 30] and split.slowest_s[0] == pytest.approx(30.0)


# --------------------------------------------------------------------------------------------
# the table's numbers are the simulator's
# --------------------------------------------------------------------------------------------

def test_every_ranked_plan_simulates_to_the_same_numbers():
    cluster = PooledCluster("mix", (Pool("a100", A100, 16), Pool("h100", H100, 8)))
    result = plan_heterogeneous(SMALL, cluster, top=10**6, **FAST)
    plans = result.plans
    assert set(plans["kind"]) == {"single-pool", "data-parallel mix", "pipeline mix"}
    rng = np.random.default_rng(3)
    picks = set(range(5))
    for kind in ("single-pool", "data-parallel mix", "pipeline mix"):
        rows = np.flatnonzero(plans["kind"].to_numpy() == kind)
        picks |= set(rows[:3]) | set(rng.choice(rows, size=min(8, len(rows)), replace=False))
    for i in sorted(int(i) for i in picks):
        plan, cl = result.row_plan(i)
        rep = simulate_heterogeneous(SMALL, cl, plan)
        row = result.plans.iloc[i]
        assert rep.step_time_s == pytest.approx(row["step_time_s"], rel=1e-9)
        assert rep.tokens_per_s == pytest.approx(row["tokens_per_s"], rel=1e-9)
        assert rep.memory_bytes == pytest.approx(row["memory_gib"] * GIB, rel=1e-9)
        assert rep.mfu == pytest.approx(row["mfu"], rel=1e-9)
        assert rep.fits
    tps = result.plans["tokens_per_s"].to_numpy()
    assert np.all(np.diff(tps) <= 0)
    assert result.best_report.tokens_per_s == pytest.approx(tps[0], rel=1e-9)


def test_a_tie_for_most_gpus_compares_the_other_pool_and_one_pool_is_one_row():
    """Two pools of 8: 'most GPUs' was the first listed, so with the fastest listed first the
    comparison showed the H100s twice and never the A100s alone; a tie now goes to the other
    pool, labelled as one of as many GPUs (it said "most GPUs"). When the fastest pool is also the largest, the comparison has one row for it."""
    tie = plan_heterogeneous(SMALL, PooledCluster("tie", (Pool("h100", H100, 8), Pool("a100", A100, 8))), **FAST)
    assert (tie.fastest_pool, tie.largest_pool) == ("h100", "a100")
    assert list(tie.comparison()["plan"]) == ["best plan", "only h100 (fastest GPU)", "only a100 (as many GPUs as h100)"]
    assert list(plan_heterogeneous(SMALL, PooledCluster("more", (Pool("h100", H100, 8), Pool("a100", A100, 16))),
                                   **FAST).comparison()["plan"])[2] == "only a100 (most GPUs)"
    big_fast = plan_heterogeneous(SMALL, PooledCluster("bf", (Pool("a100", A100, 8), Pool("h100", H100, 16))), **FAST)
    comp = big_fast.comparison()
    assert list(comp["plan"]) == ["best plan", "only h100 (fastest GPU, most GPUs)"]
    assert comp["tokens_per_s"].iloc[1] == pytest.approx(big_fast.fastest_only[1].tokens_per_s, rel=1e-12)
    assert big_fast.explain.count("  vs only ") == 1


def test_the_comparison_holds_the_best_plans_of_the_fastest_and_the_largest_pool_alone():
    cluster = PooledCluster("mix", (Pool("a100", A100, 16), Pool("h100", H100, 8)))
    result = plan_heterogeneous(SMALL, cluster, **FAST)
    assert result.fastest_pool == "h100" and result.largest_pool == "a100"
    alone = plan_heterogeneous(SMALL, PooledCluster("h", (Pool("h100", H100, 8),)), **FAST)
    assert result.fastest_only[1].tokens_per_s == pytest.approx(alone.best_report.tokens_per_s, rel=1e-9)
    assert result.best_report.tokens_per_s >= result.fastest_only[1].tokens_per_s
    assert result.best_report.tokens_per_s >= result.largest_only[1].tokens_per_s
    comp = result.comparison()
    assert list(comp["plan"])[0] == "best plan" and comp["best_gain_pct"].iloc[0] == 0.0
    # MFU as every output shows it: percent of the bf16 peaks (a bf16 plan: its own dtype's too)
    assert "mfu" not in comp.columns
    assert comp["mfu_bf16_pct"].iloc[0] == pytest.approx(100 * result.best_report.mfu_reference, rel=1e-12)
    assert comp["mfu_bf16_pct"].iloc[0] == pytest.approx(100 * result.best_report.mfu, rel=1e-9)


# --------------------------------------------------------------------------------------------
# invariants
# --------------------------------------------------------------------------------------------

def test_identical_pools_joined_at_their_own_speed_are_merged_and_others_are_not():
    two = PooledCluster("x", (Pool("a", H100, 16), Pool("b", H100, 8), Pool("c", A100, 8)))
    merged, effs = canonical(two, pool_efficiencies(two))
    assert merged.pool_names == ("a+b", "c") and merged.pool("a+b").gpus == 24 and len(effs) == 2
    slow = PooledCluster("y", two.pools, (PoolLink(("a", "b"), 1e9, 5e-6),))
    assert canonical(slow, pool_efficiencies(slow))[0].pool_names == ("a", "b", "c")


@settings(max_examples=6, deadline=None)
@given(nodes_a=st.integers(1, 3), nodes_b=st.integers(1, 3), kind=st.sampled_from(["dgx-h100", "dgx-a100-80gb"]))
def test_two_identical_pools_plan_at_least_like_one_pool_of_their_sum(nodes_a, nodes_b, kind):
    """Merged, the two pools are searched as the one pool (every plan of it is a candidate); as
    they are, they add pipelines whose segments take different tensor-parallel degrees (8 + 16
    A100s: tp1 on one pool > tp2 on the other, +2.5%), which one pool's search does not lay out."""
    c = load_cluster(kind)
    two = plan_heterogeneous(SMALL, PooledCluster("two", (Pool("a", c, 8 * nodes_a), Pool("b", c, 8 * nodes_b))),
                             **FAST)
    one = plan_heterogeneous(SMALL, PooledCluster("one", (Pool("m", c, 8 * (nodes_a + nodes_b)),)), **FAST)
    assert two.best_report.tokens_per_s >= one.best_report.tokens_per_s * (1 - 1e-12)
    assert two.best_report.step_time_s <= one.best_report.step_time_s * (1 + 1e-12)


_KINDS = {"h100": H100, "a100": A100, "a40": A40}


@settings(max_examples=6, deadline=None)
@given(base=st.lists(st.tuples(st.sampled_from(sorted(_KINDS)), st.integers(1, 2)), min_size=1, max_size=2),
       extra=st.tuples(st.sampled_from(sorted(_KINDS)), st.integers(1, 2)))
def test_adding_a_pool_never_lowers_the_best_plans_throughput(base, extra):
    pools = tuple(Pool(f"p{i}", _KINDS[k], 8 * n) for i, (k, n) in enumerate(base))
    before = plan_heterogeneous(SMALL, PooledCluster("before", pools), **FAST)
    grown = pools + (Pool("new", _KINDS[extra[0]], 8 * extra[1]),)
    after = plan_heterogeneous(SMALL, PooledCluster("after", grown), **FAST)
    assert after.best_report.tokens_per_s >= before.best_report.tokens_per_s * (1 - 1e-12)


def test_70b_on_256_a100_and_256_h100_beats_either_pool_alone():
    cluster = PooledCluster("mix", (Pool("a100", A100, 256), Pool("h100", H100, 256)))
    result = plan_heterogeneous("llama3-70b", cluster, global_batch_tokens=4 * 2**20)
    best, h100, a100 = (result.best_report, result.fastest_only[1], result.largest_only[1])
    # measured: 367,215 tokens/s mixed vs 272,190 on the H100 pool (+34.9%) and 107,366 on the A100s
    assert best.tokens_per_s >= h100.tokens_per_s * 1.10
    assert best.tokens_per_s >= a100.tokens_per_s
    assert best.n_gpus > 256 and {p.pool for p in best.pools} == {"a100", "h100"}
    # the mix cannot beat the two pools' rates added up
    assert best.tokens_per_s <= h100.tokens_per_s + a100.tokens_per_s


# --------------------------------------------------------------------------------------------
# bad requests
# --------------------------------------------------------------------------------------------

def test_a_request_nothing_fits_and_a_dtype_a_pool_lacks_are_one_line_errors():
    tiny = PooledCluster("tiny", (Pool("a", A40, 1),))
    with pytest.raises(InputError, match="memory: no plan of llama3-70b at 8,192-token sequences fits any pool of tiny in memory"):
        plan_heterogeneous("llama3-70b", tiny, global_batch=8, max_micro_batch=1, zeros=(0,))
    turing = PooledCluster("t", (Pool("a", A100, 8), Pool("t", load_cluster("dgx-a100-80gb").with_gpu(
        __import__("hardware_specs.catalog", fromlist=["load_gpu"]).load_gpu("titan-rtx")), 8)))
    with pytest.raises(InputError, match=r"pools\.t\.dtype: titan-rtx has no bf16 peak"):
        plan_heterogeneous(SMALL, turing, global_batch=8, dtype="bf16")
    with pytest.raises(InputError, match="mixture-of-experts|MTP"):
        plan_heterogeneous("mixtral-8x7b", PooledCluster("m", (Pool("a", H100, 8),)), global_batch=8)


def test_a_pooled_cluster_of_more_pools_than_the_search_covers_is_refused_at_once(tmp_path):
    # the search tries every subset of the pools: 20 pools ran five minutes without a word
    from pathlib import Path

    import yaml

    from planners.heterogeneous import MAX_SEARCHED_POOLS, plan_heterogeneous
    src = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples/clusters/a100-h100.yaml").read_text())
    pools = [dict(src["pools"][i % 2], name=f"p{i}", gpus=8) for i in range(MAX_SEARCHED_POOLS + 1)]
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump({"name": "many", "pools": pools}))
    with pytest.raises(InputError, match=f"has {MAX_SEARCHED_POOLS + 1} pools"):
        plan_heterogeneous("llama3-70b", str(path), 512)
