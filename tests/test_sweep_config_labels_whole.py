"""A sweep's ``config`` label is ``plan``'s: a point that cannot run leaves a hole in the
whole-number columns, so the table holds them as floats, and the labels of the points that ran
read ``off3.0`` (Llama-3-70B on 256 H100 at ZeRO-1 beside a torchtitan point that has no ZeRO-1)
where ``paraplan plan`` and ``api.best_plan`` label the same plan ``off3``."""
import pandas as pd

from paraplan import api


def test_a_sweep_with_an_infeasible_point_labels_its_plans_as_plan_does():
    rows = api.sweep_grid(dict(models=["llama3-70b"], clusters=["dgx-h100"], gpus=[256], global_batch_tokens=["4Mi"],
                               stacks=["megatron-core", "torchtitan-0.3"], config=dict(zero_stage=[1])))
    assert list(rows.status) == ["ok", "infeasible"]
    best = api.best_plan("llama3-70b", "dgx-h100", 256, "4Mi", zero_stage=1)
    assert best.config.iloc[0] == "dp32 tp4 pp2 vpp8 mb1 z1 off3 sp"
    assert rows.config.iloc[0] == best.config.iloc[0]


def test_config_labels_of_whole_floats_are_the_labels_of_the_integers():
    ints = pd.DataFrame(dict(dp=[32, 16], tp=[4, 8], pp=[2, 1], cp=[1, 2], vpp=[8, 1], micro_batch=[1, 2],
                             zero_stage=[1, 3], zero_shard_group=[0, 8], recompute=["none", "full"],
                             recompute_num_layers=[0, 25], recompute_layers_decrement=[0, 1],
                             offload_activation_layers=[3, 0], sequence_parallel=[True, False]))
    floats = ints.astype({c: float for c in ints.columns if c not in ("recompute", "sequence_parallel")})
    expected = ["dp32 tp4 pp2 vpp8 mb1 z1 off3 sp", "dp16 tp8 pp1 cp2 mb2 z3 hsdp8 full25d1"]
    assert list(api.config_labels(ints)) == expected
    assert list(api.config_labels(floats)) == expected
