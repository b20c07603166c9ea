"""Session 66's audit of the pooled (mixed-cluster) surfaces: what it found broken in the Python API,
each pinned here with its error or its numbers.

The CLI's damaged cluster files (0 / negative / nan / 1e30 / huge GPU counts and bandwidths, unknown
GPUs, duplicated pools, empty or mapping pool lists, links to missing pools) already gave one line
and exit 2, and the best plan re-simulated from ``plan --json`` matched to the last bit; those are
covered by ``test_hetero_cli.py`` and ``test_pools.py``. What failed was the API behind them:
``plan_heterogeneous``'s search options, the efficiency overrides of ``plan_heterogeneous`` and
``simulate_heterogeneous``, and ``PooledCluster`` / ``PoolLink`` built by hand.
"""
from __future__ import annotations

import pytest

from hardware_specs.catalog import load_cluster, load_efficiency
from hardware_specs.errors import InputError
from hardware_specs.pools import Pool, PooledCluster, PoolLink
from model_specs.catalog import load_model
from planners.heterogeneous import plan_heterogeneous
from simulator.heterogeneous.plan import HeteroPlan, ReplicaGroup, StagePlacement
from simulator.heterogeneous.simulate import simulate_heterogeneous


@pytest.fixture(scope="module")
def small():
    """8 A100 and 8 H100, one DGX node each (the search takes a fraction of a second)."""
    return PooledCluster("small", (Pool("a100", load_cluster("dgx-a100-80gb"), 8),
                                   Pool("h100", load_cluster("dgx-h100"), 8)))


@pytest.fixture(scope="module")
def model():
    return load_model("gpt3-1.3b")


def _plan(model, cluster, **kw):
    return plan_heterogeneous(model, cluster, 16, max_micro_batch=2, **kw)


def _error(fn) -> str:
    with pytest.raises(InputError) as info:
        fn()
    e = info.value
    return f"{e.field}: {e.message}" + (f" ({e.fix})" if e.fix else "")


def test_keep_below_one_is_refused_not_a_slower_best_plan():
    # keep=0 dropped every data-parallel and pipeline mix before the exact score: the best plan fell
    # back to one pool alone (Llama-3-8B on 16 A100 + 16 H100, 64 sequences: 3.717 s, the H100s
    # alone, instead of 2.887 s on both pools)
    mixed = PooledCluster("mixed", (Pool("a100", load_cluster("dgx-a100-80gb"), 16),
                                    Pool("h100", load_cluster("dgx-h100"), 16)))
    llama = load_model("llama3-8b")
    result = plan_heterogeneous(llama, mixed, 64, max_micro_batch=2)
    used = {st.pool for g in result.best.groups for st in g.stages}
    assert used == {"a100", "h100"}
    assert result.best_report.step_time_s < 0.8 * result.fastest_only[1].step_time_s
    for bad, shown in ((0, "0"), (-1, "-1"), (float("nan"), "nan"), (2.5, "2.5")):
        assert _error(lambda: plan_heterogeneous(llama, mixed, 64, max_micro_batch=2, keep=bad)) == \
            f"keep: must be a whole number >= 1, got {shown}"


def test_top_below_one_or_fractional_is_refused(small, model):
    # top=0 said "no plan ... fits any pool in memory", top=-1 returned the whole table (thousands of
    # rows), top=1.5 raised a pandas TypeError
    for bad, shown in ((0, "0"), (-1, "-1"), (1.5, "1.5")):
        assert _error(lambda: _plan(model, small, top=bad)) == f"top: must be a whole number >= 1, got {shown}"
    assert len(_plan(model, small, top=3).plans) == 3


def test_zero_stages_must_be_a_list_of_zero_or_one(small, model):
    assert _error(lambda: _plan(model, small, zeros=5)) == "zeros: must be a list, got 5 (e.g. zeros=(0, 1))"
    assert _error(lambda: _plan(model, small, zeros=None)) == "zeros: must be a list, got None (e.g. zeros=(0, 1))"
    # 0.5 was truncated to ZeRO-0 and searched silently; '1' and True were read as 1
    for bad, shown in ((0.5, "0.5"), ("1", "'1'"), (True, "true")):
        assert _error(lambda: _plan(model, small, zeros=(bad,))) == f"zeros: must be a whole number >= 0, got {shown}"
    # an empty list blamed the stack: "every zero_stage asked for is one megatron-core lacks"
    assert _error(lambda: _plan(model, small, zeros=())) == \
        "zeros: names no value (give at least one (e.g. zeros=(0, 1)), or leave it out)"
    assert _error(lambda: _plan(model, small, zeros=(2,))) == \
        "zero_stage: ZeRO-2 is not modelled across pools yet (use ZeRO 0 or 1)"
    assert set(_plan(model, small, zeros=(1,)).plans["zero_stage"]) == {1}


def test_recompute_modes_are_checked_names(small, model):
    # 'bogus' raised enum's ValueError; the string 'full' was read letter by letter ('f' is not a
    # valid Recompute); [] silently searched every mode
    assert _error(lambda: _plan(model, small, recomputes=["bogus"])) == \
        "recomputes: unknown recomputation 'bogus' (use none, selective, full)"
    assert _error(lambda: _plan(model, small, recomputes="full")) == \
        "recomputes: must be a list, got 'full' (e.g. recomputes=['none', 'full'])"
    assert _error(lambda: _plan(model, small, recomputes=[])).startswith("recomputes: names no value")
    assert set(_plan(model, small, recomputes=["full"]).plans["recompute"]) == {"full"}


def test_sequence_parallel_modes_are_booleans(small, model):
    # ('yes',) searched sequence parallelism on (a non-empty string is truthy); () blamed the stack
    assert _error(lambda: _plan(model, small, sequence_parallel=("yes",))) == \
        "sequence_parallel: must be True or False, got 'yes' (e.g. sequence_parallel=(False, True))"
    assert _error(lambda: _plan(model, small, sequence_parallel="yes")).startswith("sequence_parallel: must be a list")
    assert _error(lambda: _plan(model, small, sequence_parallel=())).startswith("sequence_parallel: names no value")
    assert set(_plan(model, small, sequence_parallel=(False,)).plans["sequence_parallel"]) == {False}


def test_efficiency_overrides_name_real_pools_and_models(small, model):
    plan = HeteroPlan(groups=(ReplicaGroup(stages=(StagePlacement("a100", 8, 24),), replicas=1),),
                      global_batch=16, micro_batch=2)
    hopper = load_efficiency("hopper")
    for run in (lambda eff: simulate_heterogeneous(model, small, plan, eff), lambda eff: _plan(model, small, efficiency=eff)):
        # a name instead of a model failed inside the cost model as AttributeError ('str' has no gemm_fraction)
        assert _error(lambda: run({"a100": "hopper"})) == ("efficiency.a100: must be an EfficiencyModel, got str "
                                                           "(pass hardware_specs.catalog.load_efficiency(generation or file))")
        # a misspelt pool's override was silently unused
        assert _error(lambda: run({"a10": hopper})).startswith("efficiency.a10: small has no pool 'a10' (did you mean a100")
        # a list failed as AttributeError ('list' has no get) or dict()'s ValueError
        assert _error(lambda: run(["hopper"])).startswith("efficiency: must map pool names to efficiency models, got list")
    # a real override still moves the numbers: the A100 priced on the Hopper model differs from its own
    own = simulate_heterogeneous(model, small, plan).step_time_s
    swapped = simulate_heterogeneous(model, small, plan, {"a100": hopper}).step_time_s
    assert own > 0 and swapped > 0 and swapped != own


def test_plan_heterogeneous_names_a_wrong_model_or_cluster_type(small, model):
    assert _error(lambda: plan_heterogeneous(5, small, 16)) == \
        "model: expected a model name, file or ModelSpec, got int (e.g. 'llama3-70b' (paraplan models list))"
    assert _error(lambda: plan_heterogeneous(model, 5, 16)).startswith(
        "cluster: expected a cluster name, file, PooledCluster or ClusterSpec, got int")
    # a ClusterSpec failed as AttributeError ('ClusterSpec' has no 'pools'); as its name, it is one pool
    # of its max_gpus, or the same error as the name gives when it has none
    assert _error(lambda: plan_heterogeneous(model, load_cluster("dgx-h100"), 16)).startswith(
        "gpus: cluster dgx-h100 is one GPU kind without a GPU count")
    one = PooledCluster.single(load_cluster("dgx-h100"), 8)
    assert plan_heterogeneous(model, one, 16, max_micro_batch=2).best_report.n_gpus <= 8


def test_pooled_cluster_built_by_hand_refuses_what_is_not_a_pool_or_link():
    a100 = load_cluster("dgx-a100-80gb")
    assert _error(lambda: PooledCluster("x", [{"name": "a"}])).startswith("cluster x.pools[0]: must be a Pool, got dict")
    assert _error(lambda: PooledCluster("x", None)).startswith("cluster x.pools: must be a list of Pool, got NoneType")
    assert _error(lambda: PooledCluster("x", "ab")).startswith("cluster x.pools: must be a list of Pool, got str")
    assert _error(lambda: PooledCluster("x", [Pool("a", a100, 8)], [{"between": ["a", "b"]}])).startswith(
        "cluster x.links[0]: must be a PoolLink, got dict")


def test_a_link_given_a_numeric_string_holds_a_number():
    # '1e9' passed the plausibility check (as_float reads it) and stayed a string: path() then failed
    # as min(float, str)
    link = PoolLink(("a", "h"), "1.25e10", "5e-6")
    assert link.bw_bytes_per_s == 1.25e10 and link.latency_s == 5e-6
    cl = PooledCluster("x", (Pool("a", load_cluster("dgx-a100-80gb"), 8), Pool("h", load_cluster("dgx-h100"), 8)),
                       (link,))
    # the path is the slowest of the A100's 200 Gb/s NIC (25e9 B/s), the link and the H100's 400 Gb/s
    assert cl.path("a", "h") == (1.25e10, 5e-6)
