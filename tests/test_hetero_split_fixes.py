"""Heterogeneous plans: the micro-batch shares are the makespan optimum (a faster GPU never makes
the step slower), and merging interchangeable pools loses no plan (a faster link never gives a
slower best plan)."""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from hardware_specs.catalog import efficiency_for, load_cluster, load_pooled_cluster
from hardware_specs.pools import Pool, PooledCluster, PoolLink
from model_specs.catalog import load_model
from planners.heterogeneous import MAX_UNMERGED_POOLS, plan_heterogeneous, searched_forms, signature
from simulator.heterogeneous import HeteroPlan, ReplicaGroup, StagePlacement, simulate_heterogeneous, speed_shares


# --------------------------------------------------------------------------------------------
# shares: the integer split that finishes the step soonest
# --------------------------------------------------------------------------------------------

def _brute_force(d, fill, t, M) -> float:
    """The smallest largest finish time over every integer count per replica (>= 1, M in all)."""
    reps = [(g, r) for g in range(len(d)) for r in range(d[g])]
    best = np.inf
    for counts in itertools.product(range(1, M - len(reps) + 2), repeat=len(reps)):
        if sum(counts) != M:
            continue
        best = min(best, max(fill[g] + (c - 1) * t[g] for (g, _), c in zip(reps, counts)))
    return best


def test_shares_by_hand_are_the_makespan_optimum_not_rounded_speed_shares():
    # 4 replicas at 0.7 s per micro-batch, 8 at 0.5 s, 64 micro-batches, no fill beyond one:
    # speed-proportional shares are 16.84 and 47.16; largest remainder gave 17 and 47, so one
    # replica of the first group ran 5 (3.5 s). 16 and 48 run 4 and 6 per replica: 2.8 and 3.0 s.
    busiest, total = speed_shares(np.array([0, 0]), np.array([4, 8]), np.array([0.7, 0.5]), np.array([0.7, 0.5]),
                                  np.array([64.0]))
    assert list(total) == [16, 48] and list(busiest) == [4, 6]


def test_shares_match_a_brute_force_search_over_every_integer_split():
    rng = np.random.default_rng(7)
    plans, expect = [], []
    for _ in range(60):
        n = int(rng.integers(1, 4))
        d = rng.integers(1, 3, size=n)
        t = rng.uniform(0.2, 2.0, size=n).round(2)
        fill = (t * rng.integers(1, 4, size=n) + rng.uniform(0, 1, size=n)).round(2)
        M = int(d.sum() + rng.integers(0, 7))
        plans.append((d, fill, t, M))
        expect.append(_brute_force(list(d), list(fill), list(t), M))
    # all plans in one vectorized call, as the planner makes it
    plan_of_group = np.concatenate([np.full(len(p[0]), i) for i, p in enumerate(plans)])
    d = np.concatenate([p[0] for p in plans])
    fill = np.concatenate([p[1] for p in plans])
    t = np.concatenate([p[2] for p in plans])
    busiest, total = speed_shares(plan_of_group, d, fill, t, np.array([p[3] for p in plans], dtype=float))
    span = fill + (busiest - 1) * t
    got = np.full(len(plans), -np.inf)
    np.maximum.at(got, plan_of_group, span)
    assert np.allclose(got, expect, rtol=1e-12, atol=0)
    assert np.array_equal(np.bincount(plan_of_group, weights=total), [p[3] for p in plans])
    assert np.all(busiest == np.ceil(total / d)) and np.all(total >= d)


def _pooled(tmp_path, peak_tflops: float):
    """An A100 SXM 80GB (``hardware_specs/gpus/a100-sxm-80gb.yaml``) with ``peak_tflops`` bf16/fp16,
    16 of them on 200 Gb/s scale-out, next to 16 H100s (DGX H100)."""
    text = (f"name: a100x{int(peak_tflops)}\nvendor: nvidia\ngeneration: ampere\n"
            f"peak_tflops: {{fp32: 19.5, tf32: 156, bf16: {peak_tflops}, fp16: {peak_tflops}}}\n"
            f"hbm_gib: 80\nhbm_bw_tb_per_s: 2.039\nscaleup_bw_gb_per_s: 300\nscaleup_domain_size: 8\n"
            f"source: test\n")
    gpu = tmp_path / f"g{int(peak_tflops)}.yaml"
    gpu.write_text(text)
    cluster = tmp_path / f"c{int(peak_tflops)}.yaml"
    cluster.write_text(f"name: c{int(peak_tflops)}\npools:\n"
                       f"  - {{name: a, gpu: {gpu}, gpus_per_node: 8, gpus: 16, scaleout: {{bw_gbit_per_s: 200}}}}\n"
                       f"  - {{name: h, cluster: dgx-h100, gpus: 16}}\n")
    return load_pooled_cluster(str(cluster))


def _two_groups(m_a=None, m_h=None, global_batch=64) -> HeteroPlan:
    return HeteroPlan(groups=(ReplicaGroup((StagePlacement("a", 4, 32),), replicas=4, micro_batches=m_a),
                              ReplicaGroup((StagePlacement("h", 2, 32),), replicas=8, micro_batches=m_h)),
                      micro_batch=1, global_batch=None if m_a else global_batch, zero_stage=1)


@pytest.mark.parametrize("skew", [0.0, 0.3])
def test_the_automatic_split_is_no_slower_than_any_stated_split(tmp_path, skew):
    """llama3-8b, 4 x tp4 replicas on A100s and 8 x tp2 on H100s, 64 sequences: the shares step
    equals the fastest of every split the groups can state (4 m_a + 8 m_h = 64), with and
    without a straggler wait on the A100s (it grows with each replica's micro-batches, so the
    shares must count it: ignoring it put 4 x 4 on the A100s at 4.08 s where 4 x 2 runs 3.97 s)."""
    model = load_model("llama3-8b")
    cluster = _pooled(tmp_path, 312)
    eff = {p.name: replace(efficiency_for(p.cluster.gpu), sync_skew_fraction=skew if p.name == "a" else 0.0)
           for p in cluster.pools}
    auto = simulate_heterogeneous(model, cluster, _two_groups(), eff).step_time_s
    stated = [simulate_heterogeneous(model, cluster, _two_groups(m_a, (64 - 4 * m_a) // 8), eff).step_time_s
              for m_a in range(2, 16, 2)]
    assert auto == pytest.approx(min(stated), rel=1e-12)


def test_a_faster_gpu_never_makes_the_automatic_split_slower(tmp_path):
    model = load_model("llama3-8b")
    steps = [simulate_heterogeneous(model, _pooled(tmp_path, f), _two_groups()).step_time_s
             for f in (312, 400, 500, 600, 700, 900)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(steps, steps[1:])), steps


# --------------------------------------------------------------------------------------------
# merging interchangeable pools: a faster link never gives a slower best plan
# --------------------------------------------------------------------------------------------

SMALL = load_model("gpt3-1.3b")
SMALL_SEARCH = dict(global_batch=64, max_micro_batch=2, recomputes=("none",), zeros=(0, 1))


def test_a_faster_link_between_two_pools_never_gives_a_slower_best_plan():
    """gpt3-1.3b on 8 + 16 A100s (DGX A100 80GB, 200 Gb/s HDR at 5 us): at 200 Gb/s the link is the
    pools' own tier and they merged into one pool of 24, whose search lays out one pipeline shape:
    8 x tp1 pp3 [9,9,6] at 335,396 tokens/s, below the 342,477 of the same two pools at 150 Gb/s
    (8 x tp1 on a > tp2 on b). Searched unmerged as well, the best rises with the link."""
    a100 = load_cluster("dgx-a100-80gb")
    pools = (Pool("a", a100, 8), Pool("b", a100, 16))
    lat = a100.scaleout.latency_s
    rates = []
    for gbit in (50, 150, 200, 400):
        cluster = PooledCluster("ab", pools, (PoolLink(("a", "b"), gbit * 1e9 / 8, lat),))
        rates.append(plan_heterogeneous(SMALL, cluster, **SMALL_SEARCH).best_report.tokens_per_s)
    assert all(b >= a * (1 - 1e-12) for a, b in zip(rates, rates[1:])), rates
    # no link stated: the pools' own tier, the 200 Gb/s case
    default = plan_heterogeneous(SMALL, PooledCluster("ab", pools), **SMALL_SEARCH).best_report.tokens_per_s
    assert default == pytest.approx(rates[2], rel=1e-12)


def test_merged_pools_are_searched_as_they_are_too_up_to_the_cap():
    h100 = load_cluster("dgx-h100")
    effs = (efficiency_for(h100.gpu),) * 4
    two = PooledCluster("x", (Pool("a", h100, 8), Pool("b", h100, 8)))
    forms = searched_forms(two, effs[:2])
    assert [f.pool_names for f, _ in forms] == [("a+b",), ("a", "b")]
    # sets of interchangeable pools alike but for their names share one signature (one search)
    other = PooledCluster("y", (Pool("c", h100, 8), Pool("d", h100, 8)))
    assert signature(two, effs[:2]) == signature(other, effs[:2])
    # ... and so do the same pools in another order (the families try every order)
    a100 = load_cluster("dgx-a100-80gb")
    mixed = (efficiency_for(h100.gpu), efficiency_for(a100.gpu))
    assert (signature(PooledCluster("m", (Pool("h", h100, 8), Pool("a", a100, 8))), mixed)
            == signature(PooledCluster("n", (Pool("a", a100, 8), Pool("h", h100, 8))), mixed[::-1]))
    assert (signature(PooledCluster("m", (Pool("h", h100, 8), Pool("a", a100, 8))), mixed)
            != signature(PooledCluster("n", (Pool("a", a100, 16), Pool("h", h100, 8))), mixed[::-1]))
    four = PooledCluster("z", tuple(Pool(n, h100, 8) for n in "abcd"))
    assert len(four.pools) > MAX_UNMERGED_POOLS
    assert [f.pool_names for f, _ in searched_forms(four, effs)] == [("a+b+c+d",)]


def test_groups_left_to_the_shares_split_what_the_stated_groups_leave(tmp_path):
    """The A100 group states 4 micro-batches a replica (16 of 64); the H100 group shares the
    other 48 (6 on each of its 8 replicas), the same step as stating both."""
    model = load_model("llama3-8b")
    cluster = _pooled(tmp_path, 312)
    mixed = HeteroPlan(groups=(ReplicaGroup((StagePlacement("a", 4, 32),), replicas=4, micro_batches=4),
                               ReplicaGroup((StagePlacement("h", 2, 32),), replicas=8)),
                       micro_batch=1, global_batch=64, zero_stage=1)
    rep = simulate_heterogeneous(model, cluster, mixed)
    assert [g["micro_batches_total"] for g in rep.groups] == [16, 48]
    both = simulate_heterogeneous(model, cluster, _two_groups(4, 6))
    assert rep.step_time_s == pytest.approx(both.step_time_s, rel=1e-12)
    # 60 stated of 64 leave 4 micro-batches for 8 replicas: refused
    from hardware_specs.errors import InputError
    with pytest.raises(InputError, match="fewer than the 8 replicas"):
        HeteroPlan(groups=(ReplicaGroup((StagePlacement("a", 4, 32),), replicas=4, micro_batches=15),
                           ReplicaGroup((StagePlacement("h", 2, 32),), replicas=8)),
                   micro_batch=1, global_batch=64, zero_stage=1)


# --------------------------------------------------------------------------------------------
# layer split: the surplus layers leave the stages with the slowest layer
# --------------------------------------------------------------------------------------------

def test_the_split_takes_its_surplus_layers_from_the_slowest_layers_whatever_the_class_order():
    """Two stages of tau 1 s a layer and one of tau 2 s, 9 layers: the least slowest stage is
    4 s (3 + 3 + 1 layers hold 7 < 9 below it), where the classes hold 4 + 4 + 2 = 10, one too
    many. Every stage is within 4 s whichever layer goes, so it should leave the tau-2 stage:
    stage times 4, 4, 2 (sum 10 s) against 4, 3, 4 (11 s) when it left a tau-1 stage, which the
    split did when the tau-1 class came first (the tie on stage time went to the first class).
    The pipeline's flush only shortens with the smaller sum (1F1B, 8 micro-batches)."""
    from planners.hetero_split import split_layers
    from simulator.pipeline.makespan import flush_makespan_s

    for order in ((0, 1), (1, 0)):
        mult, tau = np.array([[2, 1]])[:, order], np.array([[1.0, 2.0]])[:, order]
        s = split_layers(mult, tau, np.zeros((1, 2)), np.full((1, 2), np.inf), 9)
        fast, slow = order.index(0), order.index(1)
        assert (s.layers_hi[0, fast], s.count_hi[0, fast], s.count_lo[0, fast]) == (4, 2, 0)
        assert (s.layers_hi[0, slow], s.count_hi[0, slow]) == (1, 1)
        assert s.slowest_s[0] == pytest.approx(4.0)

    def span(times):
        t = np.array(times, dtype=float)[None, :, None]
        return flush_makespan_s("1f1b", 3, 8, 1, t / 3, 2 * t / 3, np.zeros_like(t))[0]
    assert span([4, 4, 2]) < span([4, 3, 4])


def test_doubling_the_link_between_128_a100s_and_64_h100s_does_not_slow_the_best_llama3_70b_plan():
    """Llama-3-70B, 256 sequences: the best plan at 100 Gb/s (8 replicas of a100 tp8 [17, 16] >
    h100 tp4 [24, 23]) runs faster on the 200 Gb/s link, so the best there is no slower. Before,
    the 200 Gb/s search split [17, 17] > [24, 22] (the least slowest stage, a larger sum) and priced
    flushes as sum + (m - 1) x slowest: 19.28147 s against 19.27987 s at 100 Gb/s."""
    def cluster(gbit):
        return PooledCluster("ah", (Pool("a100", load_cluster("dgx-a100-80gb"), 128),
                                    Pool("h100", load_cluster("dgx-h100"), 64)),
                             (PoolLink(("a100", "h100"), gbit * 1e9 / 8, 5e-6, "infiniband"),))
    model = load_model("llama3-70b")
    slow, fast = (plan_heterogeneous(model, cluster(g), 256) for g in (100, 200))
    on_fast = simulate_heterogeneous(model, cluster(200), slow.best)
    assert on_fast.fits
    assert on_fast.step_time_s <= slow.best_report.step_time_s * (1 + 1e-12)
    assert fast.best_report.step_time_s <= on_fast.step_time_s * (1 + 1e-12)
