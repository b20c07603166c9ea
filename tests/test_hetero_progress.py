"""``plan_heterogeneous(progress=...)``: the pooled search reports its progress step by step
within each set of the pools (``search_steps``), as ``planners.plan`` does, so the CLI shows its
bar on a long search (three pools of 1,024 B200, 2,048 H100 and 2,048 A100 for Llama-3.1-405B
ran 10 s without a sign of progress; two pools of 256 A100 + 256 H100, 2 s, showed none: 1.4 s of
it is the set of both pools, reported once at the search's end)."""
from __future__ import annotations

from hardware_specs.catalog import load_cluster
from hardware_specs.pools import Pool, PooledCluster
from planners.heterogeneous import plan_heterogeneous, search_steps


def test_progress_counts_every_step_of_every_subset_of_the_pools_once_up_to_the_total():
    three = PooledCluster("three", (Pool("b200", load_cluster("dgx-b200"), 8), Pool("h100", load_cluster("dgx-h100"), 8),
                                    Pool("a100", load_cluster("dgx-a100-80gb"), 8)))
    calls = []
    res = plan_heterogeneous("gpt3-1.3b", three, 32, micro_batches=(1,), progress=lambda d, t: calls.append((d, t)))
    # 2^3 - 1 = 7 subsets, none merged (three GPU kinds): {b200}, {h100}, {a100} one step each;
    # each of the three pairs 2 pools' templates + the data-parallel mixes + the pipeline mixes
    # each way = 5; all three 3 templates + the data-parallel mixes = 4: 3 + 15 + 4 = 22
    assert [search_steps(n) for n in (1, 2, 3)] == [1, 5, 4]
    assert calls == [(d, 22) for d in range(1, 23)]
    silent = plan_heterogeneous("gpt3-1.3b", three, 32, micro_batches=(1,))
    assert res.best_report.step_time_s == silent.best_report.step_time_s      # progress changes nothing


def test_two_pools_report_within_the_set_of_both_and_end_at_the_total():
    # the README's 256 A100 + 256 H100: {a100}, {h100} one step each, then the five of the pair
    # (each pool's templates, the data-parallel mixes, the pipeline mixes each way): 7; before,
    # the pair was one report at the end, after the 1.4 s of its 2 s search
    from hardware_specs.catalog import load_pooled_cluster
    from pathlib import Path
    cl = load_pooled_cluster(str(Path(__file__).resolve().parents[1] / "examples" / "clusters" / "a100-h100.yaml"))
    calls = []
    plan_heterogeneous("llama3-70b", cl, global_batch_tokens=4 * 2**20, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(d, 7) for d in range(1, 8)]
