"""Large searches stay bounded: the space is built and scored in chunks, a search keeps the
fastest ``max_plans`` plans plus every frontier plan, and a request too wide to search is
refused at once. Each bounded search must give the numbers the unbounded one gives."""
from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from planners import SearchConstraints, enumerate_space, plan
from planners.refine import TOP_EXACT
from planners.search_space import (MAX_FACTORISATIONS, _factorisations, enumerate_base, enumerate_chunks,
                                   factorisation_count)
from planners.space_scoring import kept_rows
from planners.time_pruning import FRONTIER_MIN_SHARE

from frames import assert_frame_equal

#: a range search small enough to run unbounded in a test (a few hundred thousand rows)
MODEL, CLUSTER, GPUS, GBS = "llama3-8b", "dgx-h100", (48, 96), 96


@pytest.mark.parametrize("lo, hi", [(1, 1), (1, 300), (1024, 1100), (16384, 16384), (5000, 5128),
                                    (2**24 - 40, 2**24), (720720, 720720)])
def test_factorisation_count_is_the_number_of_layouts_enumerated(lo, hi):
    assert factorisation_count(lo, hi) == len(_factorisations(lo, hi)[0])


@pytest.mark.parametrize("gpus, says", [((1, 65536), f"{MAX_FACTORISATIONS:,}"), ((1, 1_000_000), "GPU counts")])
def test_a_range_with_too_many_layouts_is_refused_before_anything_is_built(gpus, says):
    model = load_model("gpt3-125m")
    with pytest.raises(InputError) as err:
        enumerate_space(model, SearchConstraints(gpus=gpus, global_batch=32, max_tp=8))
    assert err.value.field == "gpus" and says in err.value.message and "narrower" in err.value.fix
    assert factorisation_count(1, 65536) > MAX_FACTORISATIONS > factorisation_count(1024, 4096)


def test_chunks_hold_every_row_of_the_space_once_each_sorted_by_the_layer_key():
    model = load_model("mixtral-8x7b")
    c = SearchConstraints(gpus=(32, 64), global_batch=256, max_tp=8)
    whole = enumerate_space(model, c)
    chunks = list(enumerate_chunks(model, c, max_rows=7000))
    assert len(chunks) > 10 and all(ch.total_rows == len(whole) for ch in chunks)
    as_rows = lambda spaces: pd.DataFrame({k: np.concatenate([s.columns[k] for s in spaces]) for k in whole.columns})
    a = as_rows(chunks).sort_values(list(whole.columns)).reset_index(drop=True)
    b = as_rows([whole]).sort_values(list(whole.columns)).reset_index(drop=True)
    assert_frame_equal(a, b)
    key = ["tp", "cp", "micro_batch", "sequence_parallel", "recompute", "ep"]
    for ch in chunks:
        codes = pd.DataFrame({k: ch.columns[k] for k in key})
        assert codes.equals(codes.sort_values(key, kind="stable").reset_index(drop=True))
    base = enumerate_base(model, c, max_rows=7000)
    assert base.offsets[-1] == len(whole) and list(base.offsets) == sorted(base.offsets)


@pytest.fixture(scope="module")
def unbounded():
    return plan(MODEL, CLUSTER, GPUS, GBS, max_plans=None, space_chunk_rows=None,
                assign_stages=False, workers=1)


@pytest.mark.parametrize("max_plans, chunk_rows, workers", [(None, 20_000, 1), (500, None, 1), (500, 20_000, 2)])
def test_bounded_search_keeps_the_ranking_and_both_frontiers_of_the_unbounded_one(unbounded, max_plans, chunk_rows,
                                                                                     workers):
    bounded = plan(MODEL, CLUSTER, GPUS, GBS, max_plans=max_plans, space_chunk_rows=chunk_rows,
                   assign_stages=False, workers=workers)
    assert unbounded.fitting == len(unbounded.plans) > 5000 and unbounded.fit_exact
    # a bounded search over chunks leaves the rows its earlier chunks' kept rows rule out
    # unchecked for memory (``memory_screen.Screen``): its count is at most the exact one, the
    # unchecked rows at least the gap
    assert bounded.fitting <= unbounded.fitting <= bounded.fitting + bounded.fit_unchecked
    if bounded.fit_exact:
        assert bounded.fitting == unbounded.fitting
    assert bounded.evaluated == unbounded.evaluated
    assert bounded.pruned["memory"] + bounded.fit_unchecked >= unbounded.pruned["memory"] >= bounded.pruned["memory"]
    assert {k: v for k, v in bounded.pruned.items() if k != "memory"} \
        == {k: v for k, v in unbounded.pruned.items() if k != "memory"}
    if max_plans is None:
        assert_frame_equal(bounded.plans, unbounded.plans)
    else:
        assert max_plans <= len(bounded.plans) < 2 * max_plans
    # the rows a result shows: the best (exact pipeline makespans, planners.refine.TOP_EXACT) and
    # both frontiers; further down the ranking rests on estimates either way
    assert_frame_equal(bounded.top(TOP_EXACT), unbounded.top(TOP_EXACT))
    assert_frame_equal(bounded.pareto("memory"), unbounded.pareto("memory"))
    assert_frame_equal(bounded.pareto("gpus"), unbounded.pareto("gpus"))


def test_kept_rows_are_the_fastest_the_memory_frontier_and_the_gpu_frontier():
    rng = np.random.default_rng(18)
    for trial in range(100):
        n = int(rng.integers(5, 2000))
        tps = rng.choice([1.0, 2.0, 3.0], n) if trial % 3 == 0 else rng.random(n)
        mem = rng.choice([1.0, 2.0, 4.0], n) if trial % 2 == 0 else rng.random(n)
        gpus = rng.integers(1, 6, n)
        k = int(rng.integers(1, n))
        expected = tps >= np.sort(tps)[::-1][k - 1]
        # on the frontier: nothing smaller as fast, nothing as small faster (row i against every j)
        smaller_as_fast = (mem[None, :] < mem[:, None]) & (tps[None, :] >= tps[:, None])
        as_small_faster = (mem[None, :] == mem[:, None]) & (tps[None, :] > tps[:, None])
        # ... and more than FRONTIER_MIN_SHARE of the best
        expected |= ~smaller_as_fast.any(axis=1) & ~as_small_faster.any(axis=1) & (tps > FRONTIER_MIN_SHARE * tps.max())
        # the GPU frontier: a count's fastest, when faster than every smaller count's fastest
        for g in np.unique(gpus):
            fewer = tps[gpus < g]
            count_best = tps[gpus == g].max()
            if not len(fewer) or count_best > fewer.max():
                expected |= (gpus == g) & (tps == count_best)
        assert np.array_equal(kept_rows(tps, mem, gpus, k), expected)


def test_kept_table_from_the_scoring_outputs_is_the_table_of_scoring_the_kept_rows_again(monkeypatch):
    # the table of the whole search's kept rows is built from what the chunks timed and refined
    # (``Scored.timed``, ``exact_outputs``); scoring those rows again must give the same frame
    plan_module = importlib.import_module("planners.plan")
    kw = dict(max_plans=500, space_chunk_rows=20_000, assign_stages=False, workers=1)
    # 48-64 GPUs (not the module's 48-96): 65,676 rows in four chunks, 60,073 fitting, 553 kept of
    # which 110 refined exactly (measured) -- chunks, a range of GPU counts and exact rows to
    # reuse, at two thirds of the CPU time of the wider range for each of the two searches
    gpus = (48, 64)
    reused = plan(MODEL, CLUSTER, gpus, GBS, **kw)
    score_space = plan_module.score_space
    seen = []

    def without_outputs(*args, **kwargs):
        scored = score_space(*args, **kwargs)
        seen.append(scored.timed is not None and bool(scored.exact.any()))
        return replace(scored, timed=None, exact=None, exact_outputs=None)

    monkeypatch.setattr(plan_module, "score_space", without_outputs)
    rescored = plan(MODEL, CLUSTER, gpus, GBS, **kw)
    assert seen == [True]
    assert len(reused.plans) >= 500 and reused.plans["pipeline_exact"].any()
    assert_frame_equal(reused.plans, rescored.plans, check_exact=True)
    assert reused.fitting == rescored.fitting and reused.evaluated == rescored.evaluated


def test_space_rules_per_distinct_combination_key_drop_what_the_full_grid_drops():
    """The space's last-axes rules are evaluated per row once per distinct value of the
    combination fields they read (``_by_combination``) and spread only while applied: each
    rule's pruned count and the kept mask equal the same rules given as full (rows x
    combinations) grids, and a rule that drops nothing still reports its name with 0."""
    from planners.search_space import _by_combination, _Counter
    rng = np.random.default_rng(7)
    pp, tp = rng.choice([1, 2, 4, 8], 500), rng.choice([1, 2, 8], 500)
    sp, zero = np.repeat([0, 1], 12), np.tile(np.arange(4), 6)          # 24 combinations, some repeated
    dense = [("one_stage", (pp[:, None] > 1) | (zero[None, :] == 0)),
             ("sp_needs_tp", (sp[None, :] == 0) | (tp[:, None] > 1)),
             ("nothing", np.broadcast_to(np.True_, (500, 24))),
             ("mixed", (pp[:, None] * (zero[None, :] + 1)) % 3 != 0)]
    lazy = [("one_stage", _by_combination(500, [zero], lambda i: (pp > 1) | (zero[i] == 0))),
            ("sp_needs_tp", _by_combination(500, [sp], lambda i: (sp[i] == 0) | (tp > 1))),
            ("nothing", _by_combination(500, [sp], lambda i: True)),
            ("mixed", _by_combination(500, [sp, zero], lambda i: (pp * (zero[i] + 1)) % 3 != 0))]
    full, spread = {}, {}
    kept_full = _Counter(full).apply2d(dense, (500, 24), 3)
    kept_spread = _Counter(spread).apply2d(lazy, (500, 24), 3)
    # by hand: the first rule drops every (pp 1, ZeRO > 0) cell, 3 of each 4 combinations of a pp-1 row
    assert full["one_stage"] == 3 * int((pp == 1).sum()) * 18
    assert np.array_equal(kept_full, kept_spread) and list(full.items()) == list(spread.items())
    assert spread["nothing"] == 0 and spread["mixed"] > 0
