"""The planner's branch and bound on step time (``planners.time_pruning`` with
``simulator.step_bounds``): the floor never exceeds what the step model gives a row, a search
that times only the rows it can keep returns the very table of one that times them all, and it
times far fewer."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs.catalog import load_model
from planners import plan
from planners.refine import refine_exact
from planners.search_space import SearchConstraints, enumerate_space
from planners.space_scoring import kept_rows
from planners.time_pruning import FRONTIER_MIN_SHARE, excluded, held_by_row, kept_summary, order_of_subset, skippable
from planners.vectorized import CHOSEN_FIELDS, config_batch, evaluate_space
from simulator.step_bounds import step_time_floor_s
from simulator.step_model import evaluate, memory_parts

from frames import assert_frame_equal

CLUSTER = load_cluster("dgx-h100")
EFF = efficiency_for_cluster(CLUSTER)
LIMIT = CLUSTER.gpu.hbm_bytes * 0.95
ALL_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipe")


def sample_before_and_after_search(name, gpus, gbs, dtype, schedules=("1f1b", "interleaved"), n=3000, seed=18):
    """A sample of a search's rows as enumerated (counts 0), the positions in it of those that fit
    after the memory search, and those rows with the counts it chose and their memory:
    (model, before, fit, after, mem)."""
    model = load_model(name)
    space = enumerate_space(model, SearchConstraints(gpus=gpus, global_batch=gbs, max_tp=8, hsdp_gpus=8,
                                                     dtypes=(dtype,), schedules=schedules))
    rows = np.sort(np.random.default_rng(seed).choice(len(space), min(n, len(space)), replace=False))
    before = config_batch({k: v[rows] for k, v in space.columns.items()}, dtype, gbs)
    mem = memory_parts(model, CLUSTER, EFF, before, fit_limit_bytes=LIMIT)
    fit = np.flatnonzero((mem["memory_bytes"] <= LIMIT) & mem["host_fits"])
    mem = {k: np.asarray(v)[fit] if np.ndim(v) else v for k, v in mem.items()}
    after = replace(before.take(fit), **{f: mem[f"_{f}"].astype(np.int64) for f in CHOSEN_FIELDS})
    return model, before, fit, after, mem


def _fitting_sample(name, gpus, gbs, dtype, schedules=("1f1b", "interleaved"), n=3000, seed=18):
    """Rows of a search that fit after the memory search, with the counts it chose."""
    model, _, _, batch, mem = sample_before_and_after_search(name, gpus, gbs, dtype, schedules, n, seed)
    return model, batch, mem


@pytest.mark.parametrize("name, gpus, gbs, dtype, schedules, n", [
    ("deepseek-v3", (1024, 1032), 4096, "bf16", ("1f1b", "interleaved"), 3000),    # MoE, MTP, uneven stages
    ("llama3-70b", (512, 512), 512, "fp8", ("1f1b", "interleaved"), 3000),         # weight casts in the fill
    # every schedule, offload rows: 1,500 sampled rows, 1,337 fit (measured), 71-406 of each of the
    # seven schedules, 316 offloading; each ZB-H2 / ZB-V row list-schedules its own timed order,
    # so 3,000 rows cost ~4 CPU-s for no schedule the smaller sample lacks
    ("gpt3-13b", (64, 64), 512, "bf16", ALL_SCHEDULES, 1500),
    ("nemotron-3-nano", (64, 64), 512, "bf16", ("1f1b", "interleaved"), 3000),     # hybrid Mamba-attention-MoE
])
def test_floor_never_exceeds_the_step_models_lower_bound_or_estimate_and_is_tight_on_some_rows(name, gpus, gbs,
                                                                                              dtype, schedules, n):
    model, batch, mem = _fitting_sample(name, gpus, gbs, dtype, schedules, n=n)
    floor = step_time_floor_s(model, CLUSTER, EFF, batch, mem)
    out = evaluate(model, CLUSTER, EFF, batch, memory_by_part=mem, exact_pipeline=np.zeros(len(batch), dtype=bool))
    assert len(batch) > 300 and (batch.offload_activation_layers > 0).any() and (floor > 0).all()
    if schedules == ALL_SCHEDULES:      # the smaller sample still checks rows of every schedule
        assert len(np.unique(batch.schedule)) == len(ALL_SCHEDULES)
    assert (floor <= out["step_time_lower_s"]).all() and (floor <= out["step_time_s"]).all()
    # the busiest stage's m passes are most of a step: within 5% of the lower bound somewhere
    assert (out["step_time_lower_s"] / floor).min() < 1.05


def test_one_stage_floor_is_every_layers_passes_times_the_micro_batches_plus_the_optimizer_step():
    model, batch, mem = _fitting_sample("llama3-8b", (8, 8), 64, "bf16")
    one = np.flatnonzero((batch.pp == 1) & (batch.recompute == 0) & (batch.offload_activation_layers == 0)
                         & (batch.zero_stage == 0))[:1]
    batch, mem = batch.take(one), {k: np.asarray(v)[one] if np.ndim(v) else v for k, v in mem.items()}
    out = evaluate(model, CLUSTER, EFF, batch, memory_by_part=mem)
    floor = step_time_floor_s(model, CLUSTER, EFF, batch, mem)[0]
    # pp = 1, nothing recomputed or offloaded: the stage's m passes are the whole pipeline (no
    # bubble, no sends); the ZeRO-0 all-reduce's exposed part is at least its last bucket
    passes = out["num_microbatches"][0] * out["microbatch_stage_time_s"][0]
    assert out["pipeline_makespan_s"][0] == pytest.approx(passes, rel=1e-12)
    assert passes + out["optimizer_s"][0] <= floor * (1 + 1e-9)
    assert floor <= passes + out["optimizer_s"][0] + out["dp_comm_exposed_s"][0] == pytest.approx(out["step_time_s"][0])


SEARCHES = [
    # (model, gpus, global batch, plan keywords): dense and MoE, one count and a range over
    # chunks, no pipeline, every schedule, two dtypes, no memory search, one plan kept, a hybrid
    ("llama3-8b", 64, 128, dict(max_plans=40)),
    ("mixtral-8x7b", (56, 64), 256, dict(max_plans=25, space_chunk_rows=60_000)),
    ("gpt3-13b", 64, 512, dict(max_plans=10, fixed={"pp": 1})),
    # every schedule at cp 1: 14,737 fitting rows (not 73,334 with cp 2-8), and still every kept
    # schedule of the wider search (1f1b, dualpipe, interleaved, zb-h1, zb-v) in the table
    ("gpt3-13b", 64, 512, dict(max_plans=10, schedules=ALL_SCHEDULES, fixed={"pp": (2, 4), "cp": 1})),
    ("llama3-8b", (32, 48), 64, dict(max_plans=15, dtypes=("bf16", "fp8"), memory_search=False)),
    ("gpt3-2.7b", 32, 256, dict(max_plans=1)),
    ("nemotron-3-nano", 32, 128, dict(max_plans=20, assign_stages=False)),     # hybrid Mamba-attention-MoE
]


@pytest.mark.parametrize("name, gpus, gbs, kw", SEARCHES)
def test_a_search_timing_only_what_it_can_keep_returns_the_table_of_one_timing_every_row(name, gpus, gbs, kw):
    pruned = plan(name, "dgx-h100", gpus, gbs, workers=1, **kw)
    counted = plan(name, "dgx-h100", gpus, gbs, workers=1, count_fitting=True, **kw)
    every = plan(name, "dgx-h100", gpus, gbs, workers=1, prune_by_time=False, **kw)
    assert every.fitting > 3 * kw["max_plans"]           # something to prune
    assert_frame_equal(pruned.plans, every.plans, check_exact=True)
    assert_frame_equal(counted.plans, every.plans, check_exact=True)
    assert counted.fit_exact and every.fit_exact
    assert (counted.fitting, counted.evaluated, counted.pruned, counted.stage_layers, counted.explain.split("search")[0]) \
        == (every.fitting, every.evaluated, every.pruned, every.stage_layers, every.explain.split("search")[0])
    # without count_fitting a search over several chunks may leave rows unchecked for memory
    # (their floor cannot rank): its count is then a lower bound, the unchecked rows the gap
    assert pruned.fitting <= every.fitting <= pruned.fitting + pruned.fit_unchecked
    assert pruned.fitting + pruned.fit_unchecked + pruned.pruned["memory"] == pruned.evaluated == every.evaluated
    assert {k: v for k, v in pruned.pruned.items() if k != "memory"} \
        == {k: v for k, v in every.pruned.items() if k != "memory"}
    assert pruned.stage_layers == every.stage_layers


def test_branch_and_bound_times_a_fraction_of_the_fitting_rows_and_keeps_the_same_ones():
    model = load_model("mixtral-8x7b")
    space = enumerate_space(model, SearchConstraints(gpus=(64, 64), global_batch=256, max_tp=8, hsdp_gpus=8))
    args = (model, CLUSTER, EFF, space, 256, LIMIT)
    keep = 500
    pruned = evaluate_space(*args, workers=1, refine=refine_exact, keep=keep)
    every = evaluate_space(*args, workers=1, refine=refine_exact)
    assert pruned.fitting == every.fitting == len(every.rows) > 20 * keep
    assert len(pruned.rows) < every.fitting / 4          # measured: 8,339 of 43,887
    n = (space.columns["dp"] * space.columns["tp"] * space.columns["pp"] * space.columns["cp"])
    mine = kept_rows(pruned.outputs["tokens_per_s"], pruned.outputs["memory_bytes"], n[pruned.rows], keep)
    theirs = kept_rows(every.outputs["tokens_per_s"], every.outputs["memory_bytes"], n[every.rows], keep)
    np.testing.assert_array_equal(pruned.rows[mine], every.rows[theirs])
    for k in ("tokens_per_s", "memory_bytes", "step_time_s", "pipeline_exact"):
        np.testing.assert_array_equal(pruned.outputs[k][mine], every.outputs[k][theirs])


def test_a_row_is_skipped_only_when_every_condition_holds():
    # timed rows: tokens/s 10 (memory 1, 8 GPUs) and 5 (memory 3, 8 GPUs); keep 1; tokens 100,
    # so times 10 and 20 s; the frontier's bound: the best time over FRONTIER_MIN_SHARE, 20 s
    assert FRONTIER_MIN_SHARE == 0.5
    trace = {"kth_s": 10.0, "frontier_bound_s": 20.0, "gpus": np.array([8]), "upto_best_s": np.array([10.0]),
             "peak_s": np.array([10.0, 20.0])}
    timed = (np.array([10.0, 5.0]), np.array([1.0, 3.0]), np.array([8, 8]))
    # 0: floor 20 (at most 5 tok/s): below the best, dominated by the memory-1 row -> skipped;
    # 1: floor 9 could be the fastest; 2: memory 0.5, nothing timed holds less, but at most half
    # the best tokens/s -> on no kept memory frontier, skipped; 3: 16 GPUs, beaten by the 8-GPU
    # best -> on no GPU frontier, skipped; 4: 4 GPUs, fewer than any timed row: it may be the GPU
    # frontier's first point; 5: memory 0.5 at 5.26 tok/s, more than half the best: may be on
    # the memory frontier
    floor = np.array([20.0, 9.0, 20.0, 20.0, 20.0, 19.0])
    memory = np.array([2.0, 2.0, 0.5, 2.0, 2.0, 0.5])
    gpus = np.array([8, 8, 8, 16, 4, 8])
    got = skippable(floor, memory, gpus, 100.0, *timed, trace, keep=1)
    np.testing.assert_array_equal(got, [True, False, True, True, False, False])
    # a refinement round whose k-th best time reached the floor: the row could have been refined
    assert not skippable(floor[:1], memory[:1], gpus[:1], 100.0, *timed, {**trace, "kth_s": 20.0}, keep=1)[0]
    # a round whose best time over the share was above row 2's floor: its bound did not hold then
    assert not skippable(floor[2:3], memory[2:3], gpus[2:3], 100.0, *timed, {**trace, "frontier_bound_s": 21.0},
                         keep=1)[0]


def test_a_row_is_excluded_by_held_rows_only_when_it_can_be_none_of_the_kept_rows():
    # held rows: tokens/s 10 (memory 1, 8 GPUs), 6 (memory 2, 8 GPUs), 4 (memory 4, 16 GPUs);
    # keep 2: the 2nd best is 6. Tokens per step 100, so u = 100 / floor.
    summary = kept_summary(np.array([10.0, 6.0, 4.0]), np.array([1.0, 2.0, 4.0]), np.array([8, 8, 16]), keep=2)
    np.testing.assert_array_equal(np.sort(summary["top"]), [6.0, 10.0])
    np.testing.assert_array_equal(summary["gpus"], [8, 16])
    # the best at each count or fewer: 16 GPUs are beaten by the 8-GPU row
    np.testing.assert_array_equal(summary["best"], [10.0, 10.0])
    # led by the stand-in of memory -inf at half the best tokens/s
    np.testing.assert_array_equal(summary["memory"], [-np.inf, 1.0, 2.0, 4.0])
    np.testing.assert_array_equal(summary["most"], [5.0, 10.0, 10.0, 10.0])
    floor = np.array([20.0, 20.0, 12.5, 20.0, 20.0, 16.0, 20.0, 18.0, 20.0])    # u: 5, 5, 8, 5, 5, 6.25, 5, 5.56, 5
    memory = np.array([3.0, 1.0, 3.0, 3.0, 5.0, 3.0, 3.0, 0.5, 0.5])
    gpus = np.array([8, 8, 8, 16, 32, 8, 4, 8, 8])
    top, best, less = held_by_row(memory, gpus, summary)
    np.testing.assert_array_equal(best, [10.0] * 6 + [-np.inf] + [10.0] * 2)
    np.testing.assert_array_equal(less, [10.0, 5.0, 10.0, 10.0, 10.0, 10.0, 10.0, 5.0, 5.0])
    got = excluded(floor, 100.0, 2, top, best, less)
    # 0: u 5 < 6, < 10 at 8 GPUs, dominated by the memory-1 row -> excluded; 1: nothing holds
    # less memory (memory 1 is not less than 1), but u 5 is only half the best -> excluded;
    # 2: u 8 >= 6, may be among the 2 fastest; 3, 4: u 5 at 16 and 32 GPUs, beaten by 8 GPUs'
    # 10 -> on no GPU frontier, excluded; 5: u 6.25 >= the 2nd best 6; 6: 4 GPUs, fewer than
    # any held row: may be the GPU frontier's first point; 7: memory 0.5 and u 5.56, more than
    # half the best: may be on the memory frontier; 8: the same at u 5 -> excluded
    np.testing.assert_array_equal(got, [True, True, False, True, True, False, False, False, True])
    # fewer held rows than kept: any row may be among the fastest
    assert not excluded(floor, 100.0, 4, top, best, less).any()


def _half(space, rows):
    return replace(space, columns={k: v[rows] for k, v in space.columns.items()})


def test_rows_kept_by_another_chunk_spare_timing_and_leave_the_whole_kept_set_unchanged():
    # a space scored as two chunks: the second, told the first's kept rows, times fewer rows,
    # and the rows kept over both chunks (and their numbers) are the same
    model = load_model("mixtral-8x7b")
    space = enumerate_space(model, SearchConstraints(gpus=(64, 64), global_batch=256, max_tp=8, hsdp_gpus=8))
    keep = 500
    n_all = space.columns["dp"] * space.columns["tp"] * space.columns["pp"] * space.columns["cp"]
    halves = np.array_split(np.arange(len(space)), 2)
    parts = []
    for rows in halves:
        ev = evaluate_space(model, CLUSTER, EFF, _half(space, rows), 256, LIMIT, workers=1, refine=refine_exact,
                            keep=keep)
        n = n_all[rows][ev.rows]
        k = kept_rows(ev.outputs["tokens_per_s"], ev.outputs["memory_bytes"], n, keep)
        parts.append((rows[ev.rows[k]], ev.outputs["tokens_per_s"][k], ev.outputs["memory_bytes"][k], n[k], ev))
    first = parts[0]
    told = evaluate_space(model, CLUSTER, EFF, _half(space, halves[1]), 256, LIMIT, workers=1, refine=refine_exact,
                          keep=keep, kept_elsewhere=first[1:4])
    alone = parts[1][4]
    assert told.fitting == alone.fitting
    assert len(told.rows) < 0.85 * len(alone.rows)          # measured: 3,060 of 3,790
    n = n_all[halves[1]][told.rows]
    k = kept_rows(told.outputs["tokens_per_s"], told.outputs["memory_bytes"], n, keep)
    second = (halves[1][told.rows[k]], told.outputs["tokens_per_s"][k], told.outputs["memory_bytes"][k], n[k])

    def whole(a, b):
        rows, tps, mem, n = (np.concatenate([x, y]) for x, y in zip(a[:4], b[:4]))
        keep_mask = kept_rows(tps, mem, n, keep)
        order = np.argsort(rows[keep_mask])
        return rows[keep_mask][order], tps[keep_mask][order], mem[keep_mask][order]

    for mine, theirs in zip(whole(first, second), whole(first, parts[1])):
        np.testing.assert_array_equal(mine, theirs)


def test_order_of_subset_is_the_subsets_own_sorting_permutation():
    # values 3, 1, 2, 0 sort as rows 3, 1, 2, 0; keeping rows 0, 2, 3 leaves 3, 2, 0, whose
    # sorting permutation is 2, 1, 0 (the old order less row 1, renumbered)
    values = np.array([3.0, 1.0, 2.0, 0.0])
    keep = np.array([True, False, True, True])
    np.testing.assert_array_equal(order_of_subset(np.argsort(values), keep), [2, 1, 0])


def test_a_round_with_no_timed_rows_leaves_a_trace_that_rules_nothing_out_and_picks_the_lowest_floors():
    """A range-search chunk whose rows were all screened times nothing in its first round; the
    trace ``refine_exact`` leaves must still be one ``skippable`` and ``next_to_time`` read (it was
    empty, and ``paraplan plan -m deepseek-v3 -c dgx-h100 -n 1024-4096 --global-batch 15360``
    stopped on ``KeyError: 'peak_s'``). With no timed row nothing is skippable, and the next
    round takes the ``step`` lowest floors (here 2 of 4) and every row that could still be on the
    memory frontier at its floor (no row with less memory has a lower floor)."""
    from planners.time_pruning import next_to_time
    from planners.vectorized import Evaluated
    model = load_model("llama3-8b")
    space = enumerate_space(model, SearchConstraints(gpus=(8, 8), global_batch=64, max_tp=8))
    empty = Evaluated(rows=np.zeros(0, dtype=np.int64), dtype_index=np.zeros(0, dtype=np.int64),
                      outputs={"step_time_s": np.zeros(0), "memory_bytes": np.zeros(0)}, evaluated=0,
                      min_memory_bytes=np.inf, min_memory_row=-1, min_memory_dtype=-1)
    trace: dict = {}
    assert refine_exact(model, CLUSTER, EFF, space, 64, empty, trace=trace) is empty
    assert len(trace["peak_s"]) == 0 and len(trace["gpus"]) == 0 and trace["kth_s"] == -np.inf
    floor = np.array([3.0, 1.0, 2.0, 4.0])
    gpus = np.array([8, 8, 8, 8])
    none_timed = (np.zeros(0), np.zeros(0, dtype=np.int64))
    # memory falling as the floor rises, but row 0 (floor 3) has more memory than row 1 (floor 1):
    # rows 1 and 2 are the two lowest floors, 3 (least memory) is on the memory frontier, 0 is not
    memory = np.array([4e10, 3e10, 2e10, 1e10])
    assert not skippable(floor, memory, gpus, 64 * 8192.0, np.zeros(0), *none_timed, trace, keep=1).any()
    assert list(next_to_time(floor, memory, gpus, trace["peak_s"], *none_timed, step=2)) == [1, 2, 3]
    # memory rising with the row: row 0 has the least memory (on the frontier), rows 1 and 2 the
    # lowest floors, row 3 (highest floor, most memory) waits
    memory = np.array([1e10, 2e10, 3e10, 4e10])
    assert list(next_to_time(floor, memory, gpus, trace["peak_s"], *none_timed, step=2)) == [0, 1, 2]


def test_floor_stays_below_the_step_of_fsdp_stages_gathered_once_a_step():
    """torchtitan under a pipeline (``zero3_once_per_step``, ZeRO-2 and ZeRO-3): the step leaves
    only the first blocks' gathers exposed (``step_model.after_flush_tail_shares``), so the floor
    must not charge the whole gather as an unbucketed stack's last bucket (``grad_bucket_elements``
    0): it did, and exceeded the step (llama3-70b dp32 tp4 pp4: 3.936 s against 3.844 s)."""
    model, batch, _ = _fitting_sample("llama3-8b", (64, 64), 256, "bf16", n=2000)
    n = len(batch)
    batch = replace(batch, zero3_once_per_step=np.ones(n, dtype=bool), overlap_param_gather=np.ones(n, dtype=bool),
                    grad_bucket_elements=np.zeros(n), grad_bucket_elements_per_dp=np.zeros(n))
    mem = memory_parts(model, CLUSTER, EFF, batch)
    once = (batch.zero_stage >= 2) & (batch.pp > 1)
    assert once.sum() > 50
    floor = step_time_floor_s(model, CLUSTER, EFF, batch, mem)
    out = evaluate(model, CLUSTER, EFF, batch, memory_by_part=mem, exact_pipeline=np.zeros(n, dtype=bool))
    assert (floor <= out["step_time_lower_s"]).all() and (floor <= out["step_time_s"]).all()
