"""Plans the training exports wrote that the framework would reject at start-up or run other than
priced: each is now written as the plan means it, or refused in one line naming the field.

Each test cites the framework check it mirrors, at the release the export is written for
(Megatron-LM d98e8a64dd, ``megatron_flags.json``; torch 2.13 / torchtitan 0.3.0; DeepSpeed 0.19.8;
Transformer Engine v2.14)."""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from paraplan import api, exports
from paraplan.exports import megatron
from tests.cli_results import one_line_error, run


def _row(**kw):
    return api.simulate(**kw).iloc[0].to_dict()


def test_megatron_refuses_moe_hsdp_whose_expert_data_parallel_group_does_not_split_into_the_instances():
    # Megatron-LM d98e8a64dd megatron/core/parallel_state.py:880: expert dp = world / (etp * ep * pp)
    # = 16 / (1 * 8 * 2) = 1; --num-distributed-optimizer-instances = dp * cp / shard group = 8 / 4 = 2;
    # parallel_state.py:1447-1449 asserts 1 % 2 == 0 ("Expert data parallel size should be divisible
    # by partial DistOpt shard factor")
    row = _row(model="mixtral-8x7b", cluster="dgx-h100", gpus=16, tp=1, pp=2, ep=8, global_batch=64, micro_batch=1,
               zero_stage=1, zero_shard_group=4, recompute="full", seq_len=4096)
    err = exports.refusal(row, "megatron")
    assert err is not None and err.field == "zero_shard_group" and "Expert data parallel size" in str(err)
    # a shard group of 8 (one instance) leaves the expert group whole: written
    row = _row(model="mixtral-8x7b", cluster="dgx-h100", gpus=32, tp=1, pp=2, ep=8, global_batch=64, micro_batch=1,
               zero_stage=1, zero_shard_group=8, recompute="full", seq_len=4096)
    # 32 GPUs: expert dp = 32 / 16 = 2, instances = 16 / 8 = 2: divides
    assert exports.refusal(row, "megatron") is None
    assert "--num-distributed-optimizer-instances 2" in megatron.emit(row)


def test_megatron_refuses_bf16_adam_moments_without_the_distributed_optimizer():
    # Megatron-LM d98e8a64dd megatron/core/optimizer/__init__.py:1057-1060: "--use-precision-aware-
    # optimizer only supported with distributed optimizer" (ValueError); bf16 moments need that flag
    kw = dict(model="llama3-8b", cluster="dgx-h100", gpus=8, global_batch=64, micro_batch=1,
              optimizer_moment_bytes=2, recompute="full", seq_len=4096)
    err = exports.refusal(_row(**kw, zero_stage=0), "megatron")
    assert err is not None and err.field == "optimizer_moment_bytes"
    argv, _ = megatron.command(_row(**kw, zero_stage=1))
    assert "--use-precision-aware-optimizer" in argv and "--use-distributed-optimizer" in argv


def test_megatron_refuses_modules_beside_full_recompute_of_some_layers():
    # Megatron-LM d98e8a64dd megatron/core/transformer/transformer_layer.py:473-475: the modules
    # are read only when recompute_granularity == 'selective'; --recompute-granularity full with
    # 2 block layers recomputes nothing on the other layers of the stage
    row = _row(model="llama3-8b", cluster="dgx-h100", gpus=8, pp=4, global_batch=64, micro_batch=1, recompute="full",
               recompute_num_layers=2, recompute_modules=("layernorm",), seq_len=4096)
    err = exports.refusal(row, "megatron")
    assert err is not None and err.field == "recompute_modules"


def test_torchtitan_refuses_1f1b_with_fewer_micro_batches_than_stages():
    # torch 2.13 torch/distributed/pipelining/schedules.py:1020-1024: Schedule1F1B raises "Number of
    # microbatches (2) must be greater than or equal to the number of stages (4)"; torchtitan
    # (distributed/pipeline_parallel.py:303-311) passes local batch / micro-batch = 2 / 1 = 2
    result = run("plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", 8, "--global-batch", 2, "--pp", 4,
                 "--emit", "torchtitan")
    one_line_error(result, "torchtitan", "by global_batch")
    row = _row(model="llama3-8b", cluster="dgx-h100", gpus=8, tp=2, pp=4, global_batch=2, micro_batch=1)
    err = exports.refusal(row, "torchtitan")
    assert err is not None and err.field == "global_batch" and "Number of microbatches (2)" in str(err)
    row = _row(model="llama3-8b", cluster="dgx-h100", gpus=8, tp=2, pp=4, global_batch=4, micro_batch=1)
    assert exports.refusal(row, "torchtitan") is None      # 4 micro-batches on 4 stages


def test_torchtitan_refuses_interleaved_and_zero_bubble_micro_batches_not_a_multiple_of_the_rounds():
    # torch 2.13 torch/distributed/pipelining/schedules.py:2936-2942 (ScheduleInterleaved1F1B) and
    # :3046-3052 (ScheduleInterleavedZeroBubble): rounds = max(1, 18 // 4) = 4 and 18 % 4 = 2 != 0
    # raises; 16 micro-batches (4 rounds of 4) run
    result = run("plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", 8, "--global-batch", 18, "--pp", 4,
                 "--micro-batch", 1, "--schedule", "zb-h1", "--emit", "torchtitan")
    one_line_error(result, "torchtitan", "global_batch")
    kw = dict(model="llama3-8b", cluster="dgx-h100", gpus=8, tp=2, pp=4, micro_batch=1)
    err = exports.refusal(_row(**kw, global_batch=18, schedule="zb-h1"), "torchtitan")
    assert err is not None and err.field == "global_batch" and "= 4" in str(err)
    # interleaved: the step model already asks for a multiple of pp micro-batches (so of the rounds)
    with pytest.raises(InputError, match="multiple of pp"):
        _row(**kw, global_batch=18, schedule="interleaved", vpp=2)
    assert exports.refusal(_row(**kw, global_batch=16, schedule="zb-h1"), "torchtitan") is None


def test_deepspeed_refuses_bf16_zero0_under_a_pipeline():
    # DeepSpeed v0.19.8 deepspeed/runtime/engine.py:2313-2320 (used :2363): a bf16 pipeline without
    # ZeRO runs BF16_Optimizer, which partitions fp32 master weights and optimizer states over dp
    # (bf16_optimizer.py:153-182) and all-gathers the bf16 weights after each step (:593-599)
    kw = dict(model="llama3-8b", cluster="dgx-h100", gpus=8, tp=1, pp=4, global_batch=64, micro_batch=1,
              recompute="none", seq_len=4096)
    err = exports.refusal(_row(**kw, zero_stage=0), "deepspeed")
    assert err is not None and err.field == "zero_stage" and "zero_stage 1" in str(err)
    assert exports.refusal(_row(**kw, zero_stage=1), "deepspeed") is None


def test_megatron_writes_the_fused_loss_the_plan_priced_and_refuses_the_one_it_cannot_run():
    # Megatron-LM d98e8a64dd: cross_entropy_loss_fusion defaults False, impl 'native'
    # (megatron/core/model_parallel_config.py:320,325; language_module.py:173 takes the fused path only
    # when set); arguments.py:1697-1702 rejects --cross-entropy-fusion-impl te beside the fusion
    kw = dict(model="llama3-8b", cluster="dgx-h100", gpus=8, global_batch=64, micro_batch=1, zero_stage=1,
              recompute="full", seq_len=4096)
    argv, env = megatron.command(_row(**kw, cross_entropy="megatron_fused"))
    assert "--cross-entropy-loss-fusion" in argv and "--cross-entropy-fusion-impl" not in argv
    from paraplan.exports.megatron_table import check_command
    assert check_command(argv, 8, env) == []
    assert "--cross-entropy-loss-fusion" not in megatron.command(_row(**kw, cross_entropy="megatron_unfused"))[0]
    err = exports.refusal(_row(**kw, stack="megatron-bridge"), "megatron")      # te_triton
    assert err is not None and err.field == "cross_entropy"
    err = exports.refusal(_row(**kw, cross_entropy="torch_eager"), "megatron")
    assert err is not None and err.field == "cross_entropy"
    result = run("plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", 8, "--global-batch", 64,
                 "--stack", "megatron-bridge", "--emit", "megatron")
    one_line_error(result, "megatron", "cross_entropy")


def test_megatron_refuses_unfused_attention_under_context_parallelism():
    # Transformer Engine v2.14 transformer_engine/pytorch/attention/dot_product_attention/utils.py:768-772
    # turns UnfusedDotProductAttention off when context parallelism is on: --attention-backend unfused
    # with --context-parallel-size 2 has no backend left
    kw = dict(model="llama3-8b", cluster="dgx-h100", gpus=8, global_batch=64, micro_batch=1, flash_attention=False,
              recompute="full", seq_len=8192)
    err = exports.refusal(_row(**kw, cp=2), "megatron")
    assert err is not None and err.field == "flash_attention"
    argv, _ = megatron.command(_row(**kw, cp=1))
    assert argv[argv.index("--attention-backend") + 1] == "unfused"
