"""The data-parallel mix's per-pool cut (``planners.heterogeneous._templates_kept``): growing a pool
keeps, among its templates, those a smaller size of it kept, so the smaller cluster's best mix stays
a candidate wherever its pipelines keep their replicas on the grown pool.

Before, each pool kept only the ``keep`` (6) best templates by its own rate at its own size: on 16
B200 + 20 H200 (Llama-3-8B, 32 sequences) the H200 side of the 16-H200 optimum, 2 replicas of tp 8
(16 GPUs, 4 left idle), ranked 7th and fell out; the best was 356,507 tokens/s against 361,127 on
16 H200, and ``keep=30`` found the 361,127 plan again (session 66's audit, README "Mixed clusters").
"""
from __future__ import annotations

import numpy as np
import pytest

from hardware_specs.catalog import load_cluster
from hardware_specs.pools import Pool, PooledCluster, PoolLink
from model_specs.catalog import load_model
from planners.heterogeneous import DP_MIX, SINGLE, _templates_kept, _top_per_key, plan_heterogeneous
from simulator.heterogeneous.simulate import simulate_heterogeneous

_SPEC = {"a100": "dgx-a100-80gb", "h100": "dgx-h100", "b200": "dgx-b200", "h200": "hgx-h200"}


def _cluster(counts, links=()):
    return PooledCluster("x", tuple(Pool(n, load_cluster(_SPEC[n]), g) for n, g in counts), tuple(links))


def _rows(*rows):
    """(slowest_s, shared key, cells = tp x pp, replicas) columns of template rows."""
    s, key, cells, d = zip(*rows)
    return np.array(s, dtype=float), np.array(key, dtype=np.int64).reshape(-1, 1), np.array(cells), np.array(d)


def test_a_template_that_packs_a_smaller_pool_is_kept_beside_this_sizes_cut():
    # a 20-GPU pool, keep 1. X: tp x pp = 8, 2 replicas (16 GPUs), 1 s a micro-batch -> 2 /s.
    # Y: 5 GPUs, 4 replicas, 1/0.55 s -> 2.2 /s: this size's cut keeps Y only. On 16 GPUs (X's
    # smallest pool with 2 replicas) Y has 3 replicas, 1.65 /s < 2: X is that size's best, kept.
    # Z, alone in its key, is kept; W does not fit (inf) and its key has X-free room only for Z.
    s, key, cells, d = _rows((1.0, 0, 8, 2), (1 / 0.55, 0, 5, 4), (1.0, 1, 4, 5), (np.inf, 1, 2, 10))
    rate = np.where(np.isfinite(s), d / s, 0.0)
    assert list(_top_per_key(-rate, key, 1)) == [1, 2]
    assert list(_templates_kept(s, key, cells, d, 1)) == [1, 2, 0]
    # Y faster per replica (1/0.7 s): 3 x 0.7 = 2.1 /s beats X on 16 GPUs too, so X stays out
    s2 = s.copy()
    s2[1] = 1 / 0.7
    assert list(_templates_kept(s2, key, cells, d, 1)) == [1, 2]


def test_a_competitor_with_too_few_replicas_on_the_smaller_pool_does_not_count_under_zero_1():
    # X: 8 GPUs x 2 replicas, 2 /s. Y: 9 GPUs x 2 replicas (18 of 20), 2.5 /s a replica -> 5 /s.
    # On 16 GPUs Y has 1 replica: 2.5 /s ranks above X's 2 under ZeRO 0; under ZeRO 1 (templates
    # of at least 2 replicas) Y is no template there, and X is that size's best
    s, key, cells, d = _rows((1.0, 0, 8, 2), (0.4, 0, 9, 2))
    assert list(_templates_kept(s, key, cells, d, 1, min_replicas=1)) == [1]
    assert list(_templates_kept(s, key, cells, d, 1, min_replicas=2)) == [1, 0]


def _best(counts, gbs=32, model="llama3-8b", links=(), **kw):
    cluster = _cluster(counts, links)
    result = plan_heterogeneous(model, cluster, gbs, **kw)
    return result, cluster


def test_growing_the_h200_pool_from_16_to_20_keeps_the_16_gpu_mix():
    small, _ = _best([("b200", 16), ("h200", 16)])
    grown, cluster = _best([("b200", 16), ("h200", 20)])
    # 361,832 until session 69's refit (Blackwell attention 0.4078 -> 0.4313, HBM 0.6406 -> 0.589)
    assert round(small.best_report.tokens_per_s) == 361_677
    # was 356,507 (8 pipelines of a B200 stage of 24 layers and an H200 stage of 8, micro-batch 1)
    assert round(grown.best_report.tokens_per_s) == 361_677
    layout = sorted((g.replicas, st.pool, st.tp, st.layers) for g in grown.best.groups for st in g.stages)
    assert layout == [(2, "h200", 8, 32), (4, "b200", 4, 32)] and grown.best.micro_batch == 2
    again = simulate_heterogeneous(load_model("llama3-8b"), cluster, grown.best)
    assert again.step_time_s == grown.best_report.step_time_s
    assert grown.plans.iloc[0]["tokens_per_s"] == again.tokens_per_s


def _replicas_kept(plan, counts) -> bool:
    """Whether each pipeline of a data-parallel mix has as many replicas as fit on ``counts``'s
    pools (the family's templates fill their pool: a plan leaving a whole replica idle is not one)."""
    gpus = dict(counts)
    return all(len({st.pool for st in g.stages}) == 1
               and g.replicas == gpus[g.stages[0].pool] // (g.stages[0].tp * len(g.stages)) for g in plan.groups)


#: (pool, GPUs) pairs, the pool grown and by how many GPUs, model and sequences: two GPU kinds of
#: A100 / H100 / B200 / H200 at 4-20 GPUs; the last three grow a pool whose best plan is a
#: data-parallel mix that keeps its replicas there (so the growth assertion runs), the first two
#: one whose best is one pool alone or a pipeline mix
CASES = [
    ([("a100", 8), ("h100", 6)], 1, 4, "gpt3-1.3b", 16),
    ([("b200", 12), ("h200", 4)], 1, 3, "llama3-8b", 16),
    ([("h200", 10), ("a100", 12)], 1, 3, "llama3-8b", 16),
    ([("b200", 20), ("h200", 8)], 1, 3, "llama3-8b", 32),
    ([("b200", 16), ("h200", 16)], 1, 7, "llama3-8b", 32),
]


@pytest.mark.parametrize("counts, pool, more, model, gbs", CASES)
def test_growing_or_adding_a_pool_never_lowers_the_best(counts, pool, more, model, gbs):
    kw = dict(model=model, gbs=gbs, max_micro_batch=2)
    small, _ = _best(counts, **kw)
    grown_counts = [(n, g + more * (i == pool)) for i, (n, g) in enumerate(counts)]
    grown, grown_cluster = _best(grown_counts, **kw)
    base = small.best_report.tokens_per_s
    # a mix whose pipelines fill the grown pool with the same replicas, or one pool alone (every
    # replica count is searched there), is a plan of the grown search
    kind = small.plans.iloc[0]["kind"]
    if kind == SINGLE or (kind == DP_MIX and _replicas_kept(small.best, grown_counts)):
        assert grown.best_report.tokens_per_s >= base * (1 - 1e-12)
    # the plan returned is simulate's, to the last bit
    again = simulate_heterogeneous(load_model(model), grown_cluster, grown.best)
    assert again.step_time_s == grown.best_report.step_time_s
    # one pool alone, searched on its own, is never better than both
    for name, g in counts:
        alone, _ = _best([(name, g)], **kw)
        assert base >= alone.best_report.tokens_per_s * (1 - 1e-12)


# CASES[0] (8 A100 + 6 H100, GPT-3 1.3B, 16 sequences) lost the 5-us link's best on the 1-us link
# until the layer split's neighbours were no longer cut to within 0.1% of the min-max split's
# slowest stage (``planners.hetero_refine``; test_hetero_refine_neighbours.py)
@pytest.mark.parametrize("counts, model, gbs", [c[:1] + c[3:] for c in CASES])
def test_a_faster_link_never_lowers_the_best(counts, model, gbs):
    kw = dict(model=model, gbs=gbs, max_micro_batch=2)
    base = _best(counts, **kw)[0].best_report.tokens_per_s
    # 400 Gb/s, 1 us between the pools: no slower than their default path (the slower scale-out
    # tier, 5 us), so every plan's step only shortens
    fast = PoolLink((counts[0][0], counts[1][0]), 400e9 / 8, 1e-6, "infiniband")
    linked, _ = _best(counts, links=(fast,), **kw)
    assert linked.best_report.tokens_per_s >= base * (1 - 1e-12)
