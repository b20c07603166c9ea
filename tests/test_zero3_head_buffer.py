"""ZeRO-3 / FSDP buffers on the stage that computes logits: the output projection (V x h / tp
parameters, the embedding table when tied) is one sharded unit, larger than a decoder layer,
and it is whole on the GPU from the logits' forward through its backward, which runs first in
backward with every activation and the logits alive, while its unsharded gradient is built in
the reduce dtype and the last layer's gather is prefetched (torchtitan apply_fsdp_to_decoder:
[norm, lm_head] not resharded after forward, lm_head backward-prefetches the last block;
DeepSpeed stage3 fetch_sub_module per submodule; Megatron-FSDP keeps non-unit modules
gathered; FSDP1's root unit is not resharded after forward). So that stage's buffer is the
prefetched layer plus the larger of the layer and the head, in parameters and gradient:
max(layer rule, head rule). Other stages keep the layer rule.

Hand count, Llama 3 8B: a layer 218,112,000 parameters, the LM head 128,256 x 4096 =
525,336,576 (untied). torchtitan: bf16 parameters (2 B), fp32 reduce (4 B).
"""
from __future__ import annotations

import numpy as np
import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_cluster, load_stack
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
EFF = efficiency_for_cluster(CLUSTER)
LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096      # 218,112,000
HEAD = 128_256 * 4096                                                         # 525,336,576


def _config(stack="torchtitan", dtype="bf16", **kw):
    fields = {**stack_config_fields(load_stack(stack), dtype), **kw}
    base = dict(dp=8, tp=1, pp=1, micro_batch=1, global_batch=64, zero_stage=3, recompute="full", dtype=dtype)
    return ParallelConfig(**{**base, **fields})


def _stages(config, model=MODEL):
    return [s["parts_bytes"]["zero3_buffers_bytes"] for s in simulate(model, CLUSTER, config).stage_memory]


def test_the_hand_count():
    from cost_models import params
    assert params.dense_layer_params(MODEL) == LAYER and params.lm_head_params(MODEL) == HEAD


def test_torchtitan_zero3_one_stage_holds_the_head_gathered_and_its_fp32_gradient():
    # was 2 x LAYER x 2 B + LAYER x 4 B = 1,745,920,000 (decoder layers only); now the
    # prefetched last layer, the whole head and its fp32 gradient: 3,588,243,456
    (z3,) = _stages(_config())
    assert z3 == pytest.approx((LAYER + HEAD) * 2 + HEAD * 4, rel=1e-12)
    assert z3 == pytest.approx(3_588_243_456, rel=1e-12)
    # at least the head gathered + its gradient (3.15e9)
    assert z3 > HEAD * (2 + 4)


def test_only_the_head_stage_gets_it_under_a_per_microbatch_pipeline():
    # a ZeRO-3 that regathers per micro-batch under a pipeline: the first stage keeps the layer
    # rule, the last takes the head's
    first, last = _stages(_config(dp=4, pp=2, zero3_once_per_step=False))
    assert first == pytest.approx(LAYER * (2 * 2 + 4), rel=1e-12)
    assert last == pytest.approx((LAYER + HEAD) * 2 + HEAD * 4, rel=1e-12)
    assert last == pytest.approx(max(first, (LAYER + HEAD) * 2 + HEAD * 4), rel=1e-12)


def test_a_stage_gathered_once_a_step_is_unchanged():
    # torchtitan under a pipeline keeps the head whole in its ZeRO-1 states: both stages hold
    # the two blocks' all-gather output only
    first, last = _stages(_config(dp=4, pp=2))
    assert first == last == pytest.approx(2 * LAYER * 2, rel=1e-12)


def test_tensor_parallelism_divides_the_head():
    (z3,) = _stages(_config(dp=4, tp=2, sequence_parallel=True))
    layer, head = LAYER / 2 + 0.0, HEAD / 2
    assert z3 == pytest.approx((layer + head) * 2 + head * 4, rel=1e-9)


def test_zero2_builds_the_heads_whole_gradient():
    # ZeRO-2 reducing every micro-batch: no gathered parameters, one unit's gradient, the head's
    (z3,) = _stages(_config(zero_stage=2))
    assert z3 == pytest.approx(HEAD * 4, rel=1e-12)


def test_no_shard_group_no_head_buffer():
    (z3,) = _stages(_config(dp=1, global_batch=8))
    assert z3 == 0.0


def test_a_tied_head_is_the_embedding_table():
    model = load_model("gpt3-1.3b")                 # tied: lm_head_params 0, the embedding is the head
    from cost_models import params
    assert model.tied_embeddings and params.lm_head_params(model) == 0
    layer = params.dense_layer_params(model)
    head = model.vocab_size * model.hidden_size
    assert head > layer
    (z3,) = _stages(_config(), model)
    assert z3 == pytest.approx((layer + head) * 2 + head * 4, rel=1e-12)


def test_a_layer_larger_than_the_head_keeps_the_layer_rule():
    # a head smaller than a layer changes nothing: max(layer, head) is the layer
    from dataclasses import replace
    model = replace(MODEL, vocab_size=1024)
    (z3,) = _stages(_config(), model)
    assert z3 == pytest.approx(LAYER * (2 * 2 + 4), rel=1e-12)


def test_deepspeed_zero3_fp16_gradient_in_the_parameter_dtype():
    # DeepSpeed: fp16 buckets (2 B), prefetch capped at 5e7 elements (< one layer: the layer rule's
    # floor of one prefetched layer)
    (z3,) = _stages(_config("deepspeed-2021", "fp16"))
    assert z3 == pytest.approx((LAYER + HEAD) * 2 + HEAD * 2, rel=1e-12)


def test_the_screen_bound_stays_below_the_peak():
    configs = [_config(stack, dtype, dp=dp, tp=tp, micro_batch=mb, zero_stage=z, sequence_parallel=tp > 1)
               for stack, dtype in (("torchtitan", "bf16"), ("deepspeed-2021", "fp16"))
               for dp, tp in ((8, 1), (4, 2)) for mb in (1, 2) for z in (2, 3)]
    for model in (MODEL, load_model("gpt3-1.3b")):
        for dtype in ("bf16", "fp16"):
            sub = [c for c in configs if c.dtype == dtype]
            batch = ConfigBatch.from_configs(sub)
            bound = np.asarray(static_lower_bound_bytes(model, CLUSTER, EFF, batch))
            peak = np.asarray(memory_parts(model, CLUSTER, EFF, batch)["memory_bytes"])
            assert (bound <= peak).all()


@pytest.mark.parametrize("stack,dtype", [("torchtitan", "bf16"), ("deepspeed-2021", "fp16")])
def test_planner_rows_of_zero3_equal_simulate(stack, dtype):
    result = plan(MODEL, CLUSTER, 8, 64, stack=stack, fixed={"zero_stage": 3, "tp": 1, "pp": 1},
                  dtypes=(dtype,), assign_stages=False, max_plans=None)
    software = result.software[dtype]
    assert len(result.plans) >= 1
    for i in range(min(4, len(result.plans))):
        row = result.plans.iloc[i]
        report = simulate(MODEL, CLUSTER, row_config(row, software), n_gpus=8)
        assert report.memory_breakdown_bytes["zero3_buffers_bytes"] >= HEAD * 4 - 1
        assert row["memory_gib"] * 2**30 == pytest.approx(report.memory_bytes, rel=1e-9)
        assert row["step_time_s"] == pytest.approx(report.step_time_s, rel=1e-9)
