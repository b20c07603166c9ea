"""ZeRO-3 model states when the parameter shard is the fp32 master (``TrainingBehaviour.
zero3_master_params``): PyTorch FSDP / FSDP2 with a mixed-precision ``param_dtype`` keeps only
the fp32 sharded parameter (the optimizer's master), the fp32 gradient shard and the two Adam
moments, 16 / n bytes a parameter; the 16-bit copy exists only while a layer is gathered
(pytorch/pytorch v2.13.0 ``MixedPrecisionPolicy``: FSDP "does not require any extra memory to keep
a high-precision copy of the parameters for the optimizer step"). DeepSpeed ZeRO-3 and
Megatron-FSDP keep a 16-bit shard beside the fp32 master: 18 / n.

Hand count, Llama 3 8B (h 4096, 32 layers, 32 heads, 8 KV heads of 128, gated MLP 14336,
vocabulary 128,256, untied): a layer holds q and o 2 x 4096^2 = 33,554,432, k and v
2 x 4096 x 1024 = 8,388,608, the MLP 3 x 4096 x 14336 = 176,160,768 and two norms 8,192:
218,112,000; 32 layers 6,979,584,000, embedding and LM head 2 x 525,336,576, final norm 4,096:
8,030,261,248 parameters. The model states count the layers, the embedding and the head
(8,030,257,152; the final norm's 4,096 are not in a stage's states): 1,003,782,144 per GPU over
8 data-parallel ranks.
"""
from __future__ import annotations

import numpy as np
import pytest

from cost_models import memory, params
from hardware_specs.catalog import efficiency_for_cluster, list_stacks, load_cluster, load_stack
from model_specs.catalog import load_model
from planners.plan import plan, row_config
from simulator.config_batch import ConfigBatch
from simulator.memory_rows import static_lower_bound_bytes
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate
from simulator.stack_defaults import stack_config_fields
from simulator.step_model import memory_parts

MODEL = load_model("llama3-8b")
CLUSTER = load_cluster("dgx-h100")
TOTAL = 8_030_261_248
STATES = TOTAL - 4096
SHARD = STATES / 8


def _config(stack="torchtitan", **kw):
    fields = {**stack_config_fields(load_stack(stack), "bf16"), **kw}
    base = dict(dp=8, tp=1, pp=1, micro_batch=1, global_batch=64, zero_stage=3, recompute="full", dtype="bf16")
    return ParallelConfig(**{**base, **fields})


def test_the_hand_count_of_llama3_8b_is_the_models():
    assert params.dense_layer_params(MODEL) == 218_112_000
    assert 32 * 218_112_000 + params.embedding_params(MODEL) + params.lm_head_params(MODEL) + 4096 == TOTAL


def test_the_fsdp_stacks_keep_the_fp32_shard_only_and_the_others_a_16_bit_shard_beside_it():
    fsdp = {"torchtitan", "torchtitan-0.3", "torchtitan-compile", "pytorch-fsdp", "llm-foundry", "maxtext"}
    for name in list_stacks():
        training = load_stack(name).training
        if training is not None:
            assert training.zero3_master_params is (name in fsdp), name


def test_fsdp_zero3_holds_16_bytes_a_parameter_over_the_shard_group():
    parts = simulate(MODEL, CLUSTER, _config()).stage_memory[0]["parts_bytes"]
    assert parts["weights_bytes"] == 0.0                                   # no 16-bit shard
    assert parts["gradients_bytes"] == pytest.approx(4 * SHARD, rel=1e-12)    # 4,015,128,576
    assert parts["optimizer_bytes"] == pytest.approx(12 * SHARD, rel=1e-12)   # fp32 master + 2 moments
    total = parts["weights_bytes"] + parts["gradients_bytes"] + parts["optimizer_bytes"]
    assert total == pytest.approx(16 * SHARD, rel=1e-12)                   # 16,060,514,304


def test_deepspeed_style_zero3_keeps_the_16_bit_shard_18_bytes_a_parameter():
    parts = simulate(MODEL, CLUSTER, _config(zero3_master_params=False)).stage_memory[0]["parts_bytes"]
    assert parts["weights_bytes"] == pytest.approx(2 * SHARD, rel=1e-12)
    total = parts["weights_bytes"] + parts["gradients_bytes"] + parts["optimizer_bytes"]
    assert total == pytest.approx(18 * SHARD, rel=1e-12)


@pytest.mark.parametrize("zero_stage", [0, 2])   # torchtitan has no ZeRO-1
def test_below_zero3_the_switch_changes_nothing(zero_stage):
    on = simulate(MODEL, CLUSTER, _config(zero_stage=zero_stage)).stage_memory[0]["parts_bytes"]
    off = simulate(MODEL, CLUSTER, _config(zero_stage=zero_stage, zero3_master_params=False)).stage_memory[0]["parts_bytes"]
    assert on == off
    assert on["weights_bytes"] == pytest.approx(2 * STATES, rel=1e-12)      # whole 16-bit weights


def test_fp32_training_has_one_fp32_copy_either_way():
    a = memory.model_state_bytes(8.0, 3, 8, full_precision=True, zero3_master_params=True)
    b = memory.model_state_bytes(8.0, 3, 8, full_precision=True, zero3_master_params=False)
    assert [float(x) for x in a] == [float(x) for x in b] == [4.0, 4.0, 8.0]


def test_the_screen_bound_stays_below_the_peak_with_and_without_the_switch():
    eff = efficiency_for_cluster(CLUSTER)
    configs = [_config(dp=dp, tp=tp, micro_batch=mb, zero_stage=z, zero3_master_params=m, sequence_parallel=tp > 1)
               for dp, tp in ((8, 1), (4, 2), (2, 4)) for mb in (1, 2) for z in (2, 3) for m in (False, True)]
    batch = ConfigBatch.from_configs(configs)
    bound = np.asarray(static_lower_bound_bytes(MODEL, CLUSTER, eff, batch))
    peak = np.asarray(memory_parts(MODEL, CLUSTER, eff, batch)["memory_bytes"])
    assert (bound <= peak).all()
    # and the bound drops by the 16-bit shard where the switch is on at ZeRO-3 (2 / 8 bytes a
    # parameter of the tensors, plus the allocator's share of them, less the bound's margin)
    z3 = [i for i, c in enumerate(configs) if c.zero_stage == 3]
    on, off = [i for i in z3 if configs[i].zero3_master_params], [i for i in z3 if not configs[i].zero3_master_params]
    assert (bound[on] < bound[off]).all() and (peak[on] < peak[off]).all()


def test_planner_rows_of_torchtitan_zero3_equal_simulate():
    result = plan(MODEL, CLUSTER, 8, 64, stack="torchtitan", fixed={"zero_stage": 3, "tp": 1, "pp": 1},
                  dtypes=("bf16",), assign_stages=False, max_plans=None)
    software = result.software["bf16"]
    assert software["zero3_master_params"] is True
    assert len(result.plans) >= 1
    for i in range(min(4, len(result.plans))):
        row = result.plans.iloc[i]
        report = simulate(MODEL, CLUSTER, row_config(row, software), n_gpus=8)
        assert report.memory_breakdown_bytes["weights_bytes"] == 0.0
        assert row["memory_gib"] * 2**30 == pytest.approx(report.memory_bytes, rel=1e-9)
        assert row["step_time_s"] == pytest.approx(report.step_time_s, rel=1e-9)
