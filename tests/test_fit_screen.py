"""Rows screened from the memory model (``planners.memory_screen.Screen``): their floor for any
memory search outcome (``step_bounds.step_time_floor_any_memory_s``) never exceeds the floor the
branch and bound reads after the search, the compact summary the workers get answers as the
full one, and a search that screens keeps the same plans and reports its fit count as "at least"
(``--count-fitting``: exact)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from model_specs.catalog import load_model
from paraplan.cli import main as cli
from paraplan.commands.plan import _header, _json
from planners import plan
from planners.search_space import SearchConstraints, enumerate_space
from planners.time_pruning import compact_summary, excluded, held_by_row, kept_summary
from planners.vectorized import config_batch
from simulator.step_bounds import step_time_floor_any_memory_s, step_time_floor_s
from simulator.step_model import evaluate

from frames import assert_frame_equal
from test_time_pruning import ALL_SCHEDULES, CLUSTER, EFF, LIMIT, sample_before_and_after_search


@pytest.mark.parametrize("name, gpus, gbs, dtype, schedules, n", [
    ("deepseek-v3", (1024, 1032), 4096, "bf16", ("1f1b", "interleaved"), 2000),    # MoE, MTP, uneven stages
    ("llama3-70b", (512, 512), 512, "fp8", ("1f1b", "interleaved"), 2000),         # weight casts in the fill
    ("gpt3-13b", (64, 64), 512, "bf16", ALL_SCHEDULES, 1500),                     # every schedule, offload
    ("nemotron-3-nano", (64, 64), 512, "bf16", ("1f1b", "interleaved"), 2000),     # hybrid Mamba-attention-MoE
])
def test_floor_for_any_memory_outcome_is_at_most_the_floor_after_the_search(name, gpus, gbs, dtype, schedules, n):
    model, before, fit, after, mem = sample_before_and_after_search(name, gpus, gbs, dtype, schedules, n)
    any_outcome = step_time_floor_any_memory_s(model, CLUSTER, EFF, before)[fit]
    floor = step_time_floor_s(model, CLUSTER, EFF, after, mem)
    # the sample holds what the stand-in leaves out: counts the search chose, offloaded layers,
    # every ZeRO stage (its traffic), so the bound is checked where it is loose too
    assert (after.recompute_num_layers > 0).any() and (after.offload_activation_layers > 0).any()
    assert set(np.unique(after.zero_stage)) == {0, 1, 2, 3}
    assert (any_outcome > 0).all() and (any_outcome <= floor).all()
    # measured (these samples): a median 0.80-0.98 of the floor, and within 0.02% of it on some row
    # (0.013% in gpt3-13b's since DualPipe's even splits joined its space and its sample)
    assert np.median(any_outcome / floor) > 0.75 and (any_outcome / floor).max() > 0.9998


def test_floor_for_any_memory_outcome_of_one_stage_is_the_micro_batches_passes_whatever_the_zero_stage():
    # pp 1, nothing recomputed or offloaded, ZeRO-0: the flush is the m passes of the one stage
    # (no bubble, no sends, no ZeRO traffic in a pass), and the stand-in leaves out only the
    # optimizer step and the data-parallel tail: it is those passes. A ZeRO-3 sibling (same row
    # otherwise) gets the same figure, the ZeRO-0 row's passes, below its own (its gathers).
    model, before, fit, after, mem = sample_before_and_after_search("llama3-8b", (8, 8), 64, "bf16", ("1f1b",), 3000)
    key = ("dp", "tp", "pp", "cp", "micro_batch", "sequence_parallel", "recompute", "zero_shard_group")
    plain = np.flatnonzero((after.pp == 1) & (after.recompute == 0) & (after.offload_activation_layers == 0)
                           & (after.zero_stage == 0))
    found = False
    for i in plain:
        sibling = np.flatnonzero((after.zero_stage == 3) & np.logical_and.reduce(
            [np.asarray(getattr(after, k)) == np.asarray(getattr(after, k))[i] for k in key]))
        if not len(sibling):
            continue
        pair = np.array([i, sibling[0]])
        batch, m = after.take(pair), {k: np.asarray(v)[pair] if np.ndim(v) else v for k, v in mem.items()}
        out = evaluate(model, CLUSTER, EFF, batch, memory_by_part=m)
        passes = out["num_microbatches"] * out["microbatch_stage_time_s"]
        stand_in = step_time_floor_any_memory_s(model, CLUSTER, EFF, before.take(fit[pair]))
        # equal but for rounding: 1.0e-9 apart at Hopper's session-45 factors (summed in another order)
        assert stand_in[0] == pytest.approx(passes[0], rel=1e-8)
        assert stand_in[1] == stand_in[0] and passes[1] > passes[0]
        found = True
        break
    assert found


def test_compact_summary_answers_as_the_whole_summary():
    rng = np.random.default_rng(18)
    for trial in range(60):
        n_held, n = int(rng.integers(1, 400)), int(rng.integers(1, 400))
        coarse = trial % 2 == 0            # ties in memory and tokens/s
        tps = rng.choice([1.0, 2.0, 3.0, 4.0], n_held) if coarse else rng.random(n_held) * 4
        mem = rng.choice([1.0, 2.0, 3.0], n_held) if coarse else rng.random(n_held) * 3
        gpus = rng.integers(1, 6, n_held)
        keep = int(rng.integers(1, 2 * n_held))
        floor = 1.0 / (rng.random(n) * 4 + 1e-3)
        row_mem = rng.choice([0.5, 1.0, 2.0, 3.0, 4.0], n) if coarse else rng.random(n) * 4
        row_gpus = rng.integers(1, 7, n)
        whole = kept_summary(tps, mem, gpus, keep)
        expected = excluded(floor, 1.0, keep, *held_by_row(row_mem, row_gpus, whole))
        got = excluded(floor, 1.0, 1, *held_by_row(row_mem, row_gpus, compact_summary(whole, keep)))
        np.testing.assert_array_equal(got, expected)


@pytest.fixture(scope="module")
def searches():
    # Mixtral-8x7B on 56-64 GPUs in 30k-row chunks, 25 plans kept: the later chunks' rows are
    # screened by the earlier chunks' kept rows (60k-row chunks screened none once Megatron-Core
    # refused ZeRO-2/3 under a pipeline: the space shrank to two chunks)
    kw = dict(max_plans=25, space_chunk_rows=30_000, workers=1, assign_stages=False)
    return (plan("mixtral-8x7b", "dgx-h100", (56, 64), 256, **kw),
            plan("mixtral-8x7b", "dgx-h100", (56, 64), 256, count_fitting=True, **kw))


def test_a_screening_search_keeps_the_plans_and_says_its_fit_count_is_a_lower_bound(searches):
    screened, counted = searches
    assert screened.fit_unchecked > 0 and not screened.fit_exact
    assert counted.fit_unchecked == 0 and counted.fit_exact
    assert_frame_equal(screened.plans, counted.plans, check_exact=True)
    assert screened.fitting < counted.fitting <= screened.fitting + screened.fit_unchecked
    # every evaluated row is shown to fit, shown not to, or unchecked
    assert screened.fitting + screened.fit_unchecked + screened.pruned["memory"] == screened.evaluated
    assert counted.fitting + counted.pruned["memory"] == counted.evaluated == screened.evaluated
    # the table header, the explanation and the JSON say so
    text = f"at least {screened.fitting:,} fit ({screened.fit_unchecked:,} not checked for memory"
    assert text in _header(screened) and text in screened.explain
    assert "at least" not in _header(counted) and "at least" not in counted.explain
    assert f"{counted.fitting:,} fit in" in _header(counted)
    data = json.loads(_json(screened, 3, False, False, CLUSTER, load_model("mixtral-8x7b")))["search"]
    assert (data["fit"], data["fit_exact"], data["fit_unchecked"]) \
        == (screened.fitting, False, screened.fit_unchecked)
    data = json.loads(_json(counted, 3, False, False, CLUSTER, load_model("mixtral-8x7b")))["search"]
    assert (data["fit"], data["fit_exact"], data["fit_unchecked"]) == (counted.fitting, True, 0)


def test_count_fitting_flag_reaches_the_planner():
    out = CliRunner().invoke(cli, ["plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "16", "--global-batch", "64",
                                   "--count-fitting", "--json", "--top", "1"])
    assert out.exit_code == 0, out.output
    search = json.loads(out.output)["search"]
    assert search["fit_exact"] is True and search["fit_unchecked"] == 0 and search["fit"] > 0


def test_the_rows_screened_do_not_depend_on_the_workers(searches):
    # with two processes the next chunk's memory tasks start before this chunk's kept rows are
    # known; every row is screened again by the last screen, so the counts are the same
    screened, _ = searches
    two = plan("mixtral-8x7b", "dgx-h100", (56, 64), 256, max_plans=25, space_chunk_rows=30_000, workers=2,
               assign_stages=False)
    assert (two.fitting, two.fit_unchecked, two.pruned) == (screened.fitting, screened.fit_unchecked, screened.pruned)
    assert_frame_equal(two.plans, screened.plans, check_exact=True)


def test_the_first_chunks_seed_screen_rules_out_the_rows_above_a_floor_quantile():
    # no other chunk's kept rows screen the first chunk: it rules out the rows whose floor for
    # any memory search outcome is above the q-quantile of a fixed sample's (q: three times the
    # rows kept over the rows past the memory lower bound, at least a quarter), whatever their
    # GPU count or memory
    from planners.memory_screen import Screen, seed_screen
    model = load_model("mixtral-8x7b")
    space = enumerate_space(model, SearchConstraints(gpus=(64, 64), global_batch=256, max_tp=8, hsdp_gpus=8))
    screen = seed_screen(model, CLUSTER, EFF, space, 256, LIMIT, keep=500)
    assert isinstance(screen, Screen) and screen.keep == 1
    tokens = 256.0 * model.seq_len
    threshold_s = tokens / screen.summary["top"][0]
    rows = np.arange(0, len(space), 7)
    batch = config_batch({k: v[rows] for k, v in space.columns.items()}, "bf16", 256)
    floor = np.asarray(step_time_floor_any_memory_s(model, CLUSTER, EFF, batch))
    n_gpus = (space.columns["dp"] * space.columns["tp"] * space.columns["pp"] * space.columns["cp"])[rows]
    memory = np.random.default_rng(1).random(len(rows)) * LIMIT
    out = excluded(floor, tokens, 1, *held_by_row(memory, n_gpus, screen.summary))
    np.testing.assert_array_equal(out, floor > threshold_s)
    assert 0.5 < out.mean() < 0.8          # a quarter to a third of the rows kept for the model
    # keeping (nearly) every row: no screen
    assert seed_screen(model, CLUSTER, EFF, space, 256, LIMIT, keep=len(space)) is None
