"""Exports that the framework would reject or run differently from the plan are refused, naming
the field (review of the training exports): Megatron-Core's MoE layer without sequence
parallelism at tp > 1, Transformer Engine's Ulysses attention with key/value heads that do not
divide over cp, torchtitan's expert tensor parallelism, DeepSpeed's uneven pipeline stages."""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from paraplan import api
from paraplan.exports import megatron, megatron_table
from paraplan.exports.common import plan_fields


def _row(**kw):
    return api.simulate(**kw).iloc[0].to_dict()


MIXTRAL = dict(model="mixtral-8x22b", cluster="dgx-h100", gpus=64, tp=2, pp=8, vpp=7, cp=2, ep=8, etp=1, dp=2,
               global_batch=64, micro_batch=1, seq_len=4096, zero_stage=1)


def test_megatron_refuses_moe_with_tp_above_one_and_no_sequence_parallelism():
    # MoELayer.forward (moe_layer.py:636 at d98e8a64) raises in training when the attention TP
    # group is larger than one and sequence parallelism is off: the Megatron-Core stacks lack the
    # feature (moe_tp_without_sp), so the plan is refused before any export is written
    with pytest.raises(InputError) as err:
        megatron.emit(_row(**MIXTRAL, sequence_parallel=False))
    assert err.value.field == "sequence_parallel" and "moe_tp_without_sp" in str(err.value)
    assert "--sequence-parallel" in err.value.fix and "\n" not in str(err.value)
    row = _row(**MIXTRAL, sequence_parallel=True)
    argv, env = megatron.command(row)
    assert "--sequence-parallel" in argv and megatron.refusal(plan_fields(row)) is None
    # the table knows the rule: the same command without --sequence-parallel breaks it
    problems = megatron_table.check_command([a for a in argv if a != "--sequence-parallel"], 64, env)
    assert [p.split(":")[0] for p in problems] == ["moe_tp_needs_sp"]
    # tp = 1: no TP group, nothing to require
    one = _row(**{**MIXTRAL, "tp": 1, "dp": 4}, sequence_parallel=False)
    assert megatron.refusal(plan_fields(one)) is None


ULYSSES = dict(model="llama3-70b", cluster="dgx-h100", gpus=128, pp=4, cp=2, cp_kind="ulysses", global_batch=64,
               micro_batch=1, zero_stage=1, sequence_parallel=True)


def test_megatron_refuses_ulysses_when_the_kv_heads_of_a_tp_rank_do_not_divide_by_cp():
    # Llama 3 70B: 64 query heads, 8 KV heads. tp 8 leaves 8 query heads (divisible by cp 2) but
    # 1 KV head per rank, which TE's a2a attention cannot split over cp 2
    with pytest.raises(InputError) as err:
        megatron.emit(_row(**ULYSSES, tp=8, dp=2))
    # the plan's own check (check_config, ulysses_heads_ok) refuses it first: 64 // 8 = 8 query
    # heads, max(8 // 8, 1) = 1 KV head a rank, named by the plan's field
    assert err.value.field == "cp" and "8 query and 1 key/value heads" in str(err.value)
    assert "\n" not in str(err.value)
    # tp 4: 16 query heads and 2 KV heads per rank, both divide by cp 2
    row = _row(**ULYSSES, tp=4, dp=4)
    argv, env = megatron.command(row)
    assert argv[argv.index("--cp-comm-type") + 1] == "a2a"
    assert megatron_table.check_command(argv, 128, env) == []
    # and the table refuses the tp 8 command the export no longer writes
    bad = list(argv)
    bad[bad.index("--tensor-model-parallel-size") + 1] = "8"
    bad[bad.index("--global-batch-size") + 1] = "64"
    assert "a2a_cp_divides_heads" in [p.split(":")[0] for p in megatron_table.check_command(bad, 128, env)]


DSV3 = dict(model="deepseek-v3", cluster="dgx-h100", gpus=512, tp=2, pp=1, global_batch=512, micro_batch=1,
            zero_stage=3, seq_len=4096, sequence_parallel=True)


def test_torchtitan_runs_experts_tensor_parallel_exactly_when_expert_parallelism_is_off():
    from paraplan.exports import torchtitan
    # torchtitan 0.3.0 (models/common/moe_sharding.py): EP off and TP 2 shards every expert over
    # the 2 TP ranks; EP 8 keeps them whole on their EP rank
    assert (torchtitan.expert_tp(2, 1), torchtitan.expert_tp(2, 8), torchtitan.expert_tp(1, 1)) == (2, 1, 1)
    # whole experts on each TP rank is not what torchtitan runs
    with pytest.raises(InputError) as err:
        torchtitan.emit(_row(**DSV3, ep=1, etp=1))
    assert err.value.field == "etp" and "plan with etp 2" in str(err.value)
    # the etp = tp plan it does run is exported (it was refused)
    text = torchtitan.emit(_row(**DSV3, ep=1, etp=2))
    assert "config.parallelism.expert_parallel_degree = 1" in text
    assert "config.parallelism.tensor_parallel_degree = 2" in text
    # with EP the experts stay whole: etp 1 runs, etp 2 does not
    assert "config.parallelism.expert_parallel_degree = 8" in torchtitan.emit(_row(**DSV3, ep=8, etp=1))
    with pytest.raises(InputError) as err:
        torchtitan.emit(_row(**DSV3, ep=8, etp=2))
    assert err.value.field == "etp" and "plan with etp 1" in str(err.value)


LLAMA8 = dict(model="llama3-8b", cluster="dgx-h100", gpus=32, tp=1, pp=4, dp=8, global_batch=64, micro_batch=1,
              zero_stage=1)


def test_deepspeed_refuses_uneven_first_and_last_stages_its_partition_methods_cannot_cut():
    from paraplan.exports import deepspeed
    # 32 layers, first 5 and last 11: the middle two stages hold (32 - 5 - 11) / 2 = 8 each, while
    # PipelineModule's partition_method='type:...' regexes balance as [8, 8, 8, 8], [9, 8, 8, 7] or [8, 9, 8, 7]
    row = _row(**LLAMA8, first_stage_layers=5, last_stage_layers=11)
    for write in (deepspeed.emit, deepspeed.recipe):
        with pytest.raises(InputError) as err:
            write(row)
        assert err.value.field == "first_stage_layers" and "[5, 8, 8, 11]" in str(err.value)
        assert "[8, 8, 8, 8]" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(InputError) as err:
        deepspeed.emit(_row(**LLAMA8, last_stage_layers=5))           # 9 | 9 | 9 | 5
    assert err.value.field == "last_stage_layers" and "[9, 9, 9, 5]" in str(err.value)
    assert deepspeed.plan_stage_counts(plan_fields(row)) == (5, 8, 8, 11)
    # the even plan is written, with the counts DeepSpeed balances
    assert "the plan's decoder layers per stage [8, 8, 8, 8]" in deepspeed.recipe(_row(**LLAMA8))
    # fixing the even counts explicitly is the same plan
    assert deepspeed.refusal(plan_fields(_row(**LLAMA8, first_stage_layers=8, last_stage_layers=8))) is None
