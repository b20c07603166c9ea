"""paraplan.api helpers: table labels."""
from __future__ import annotations

from paraplan import api
def test_config_labels_of_a_table_equal_config_label_row_by_row():
    import pandas as pd
    from simulator.parallel_config import ParallelConfig
    rows = [dict(dp=8, tp=8, pp=4, vpp=5, micro_batch=1, zero_stage=1, recompute="selective",
                 sequence_parallel=True),
            dict(dp=2, tp=1, pp=16, cp=2, ep=8, micro_batch=2, zero_stage=0, recompute="full",
                 sequence_parallel=False, schedule="dualpipe", dtype="fp8", attention_kernel="serial"),
            dict(dp=64, tp=2, pp=1, micro_batch=4, zero_stage=3, schedule="zb-h2", dtype="mxfp8",
                 attention_kernel="pipelined"),
            dict(dp=32, tp=8, pp=16, micro_batch=1, zero_stage=2, zero_shard_group=8, recompute="full",
                 recompute_num_layers=2, recompute_layers_decrement=1, offload_activation_layers=3,
                 sequence_parallel=True),
            dict(dp=128, tp=1, pp=1, cp=2, micro_batch=1, zero_stage=3, offload_activation_layers=24)]
    table = pd.DataFrame(rows)          # columns a row lacks are NaN in the table: fill as a plan table has them
    defaults = ParallelConfig().as_dict()
    table = table.fillna({k: defaults[k] for k in table.columns if k in defaults}).infer_objects()
    table = table.astype({k: int for k in ("dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "zero_stage",
                                           "zero_shard_group", "recompute_num_layers", "recompute_layers_decrement",
                                           "offload_activation_layers")})
    expected = [api.config_label({**defaults, **r}) for r in table.to_dict("records")]
    assert list(api.config_labels(table)) == expected
    assert expected[0] == "dp8 tp8 pp4 vpp5 mb1 z1 sel sp"
    assert expected[1] == "dp2 tp1 pp16 cp2 ep8 mb2 z0 full dualpipe fp8 attn-serial"
    # the memory features a plan needs are in its label
    assert expected[3] == "dp32 tp8 pp16 mb1 z2 hsdp8 full2d1 off3 sp"
    assert expected[4] == "dp128 tp1 pp1 cp2 mb1 z3 off24"
    # a table without the optional columns takes the defaults
    bare = pd.DataFrame([dict(dp=4, tp=2, pp=1, micro_batch=1, zero_stage=1)])
    assert list(api.config_labels(bare)) == ["dp4 tp2 pp1 mb1 z1"]


def test_best_plan_keeps_two_plans_and_finds_the_winner_of_the_whole_ranking():
    """``best_plan`` searches keeping ``BEST_PLAN_KEEP`` plans (the planner then times only rows
    that can be among them): its winner and numbers are row 0 of the full ranking, and its
    explanation names the same runner-up."""
    import pytest
    for model, cluster, gpus, tokens in (("llama3-8b", "dgx-h100", 16, 2**20), ("mixtral-8x7b", "dgx-h100", 16, 2**20)):
        ranked = api.plan(model, cluster, gpus, tokens)
        best = api.best_plan(model, cluster, gpus, tokens)
        assert len(ranked) > 1000 * api.BEST_PLAN_KEEP
        top = ranked.iloc[0]
        assert best.iloc[0].config == top.config
        assert float(best.iloc[0].tokens_per_s) == pytest.approx(float(top.tokens_per_s), rel=1e-9)
        runner_up = lambda text: [line for line in text.splitlines() if line.startswith("runner-up")]
        assert runner_up(best.attrs["explain"]) == runner_up(ranked.attrs["explain"]) != []
