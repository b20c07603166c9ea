"""``plan_heterogeneous(progress=...)``: the pooled search reports its progress per subset of the
pools, as ``planners.plan`` does, so the CLI shows its bar on a long search (three pools of
1,024 B200, 2,048 H100 and 2,048 A100 for Llama-3.1-405B ran 10 s without a sign of progress)."""
from __future__ import annotations

from hardware_specs.catalog import load_cluster
from hardware_specs.pools import Pool, PooledCluster
from planners.heterogeneous import plan_heterogeneous


def test_progress_counts_every_subset_of_the_pools_once_up_to_the_total():
    three = PooledCluster("three", (Pool("b200", load_cluster("dgx-b200"), 8), Pool("h100", load_cluster("dgx-h100"), 8),
                                    Pool("a100", load_cluster("dgx-a100-80gb"), 8)))
    calls = []
    res = plan_heterogeneous("gpt3-1.3b", three, 32, micro_batches=(1,), progress=lambda d, t: calls.append((d, t)))
    # 2^3 - 1 = 7 subsets: {b200}, {h100}, {a100}, three pairs and all three
    assert calls == [(d, 7) for d in range(1, 8)]
    silent = plan_heterogeneous("gpt3-1.3b", three, 32, micro_batches=(1,))
    assert res.best_report.step_time_s == silent.best_report.step_time_s      # progress changes nothing
