"""The two stack behaviours of the model states (``TrainingBehaviour.grad_buffer`` and
``fp8_param_gather``) against hand derivations, the stack files, and the planner.

Hand-checked layout: Llama 3 70B (h 8192, 64 heads, 8 KV heads of 128, gated MLP 28672, 80
layers, vocabulary 128,256, untied) at tp 4, pp 4, dp 8 with the distributed optimizer (ZeRO-1).
One layer holds q and o 2 x 8192^2 = 134,217,728, k and v 2 x 8192 x 1024 = 16,777,216, the
MLP 3 x 8192 x 28672 = 704,643,072 and two norms 16,384: 855,654,400 parameters. A middle
stage holds 20 layers: 20 x 855,654,400 / 4 = 4,278,272,000 parameters per GPU; the first stage
also the embedding, 128,256 x 8192 / 4 = 262,668,288.
"""
from __future__ import annotations

import numpy as np
import pytest

from cost_models import memory, params
from hardware_specs.catalog import efficiency_for_cluster, load_cluster, load_stack
from hardware_specs.errors import InputError
from hardware_specs.stack_spec import TrainingBehaviour
from model_specs.catalog import load_model
from planners import plan
from planners.plan import row_config
from simulator.config_batch import ConfigBatch
from simulator.memory_rows import static_lower_bound_bytes
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate
from simulator.stack_defaults import stack_config_fields
from simulator.step_model import memory_parts

LLAMA = load_model("llama3-70b")
LAYER = 855_654_400
MIDDLE = 20 * LAYER // 4            # parameters per GPU of a middle stage
EMBEDDING = 128_256 * 8192 // 4     # the first stage's embedding shard


def _parts(cluster, stage, **kw):
    base = dict(dp=8, tp=4, pp=4, micro_batch=1, global_batch=64, zero_stage=1, sequence_parallel=True,
                recompute="full")
    config = ParallelConfig(**{**base, **kw})
    return simulate(LLAMA, load_cluster(cluster), config).stage_memory[stage]["parts_bytes"]


def test_the_hand_count_of_a_llama3_70b_layer_is_the_models():
    assert params.dense_layer_params(LLAMA) == LAYER
    assert params.embedding_params(LLAMA) == 4 * EMBEDDING


@pytest.mark.parametrize("grad_buffer_bytes, zero_stage, grads", [
    (4.0, 1, 4 * MIDDLE),            # fp32 main gradients: 17,113,088,000 bytes
    (2.0, 1, 2 * MIDDLE),            # bf16 buffer (grad_reduce_in_fp32=False): 8,556,544,000
    (2.0, 2, 2 * MIDDLE / 8),        # ZeRO-2 shards it over the 8 data-parallel ranks
])
def test_a_16_bit_gradient_buffer_halves_the_gradients_of_a_llama3_70b_stage(grad_buffer_bytes, zero_stage, grads):
    parts = _parts("dgx-h100", 1, grad_buffer_bytes=grad_buffer_bytes, zero_stage=zero_stage)
    assert parts["gradients_bytes"] == pytest.approx(grads, rel=1e-12)
    assert parts["weights_bytes"] == pytest.approx(2 * MIDDLE, rel=1e-12)      # the buffer is not the weights
    # the optimizer's fp32 master weights and moments do not depend on the gradient buffer
    assert parts["optimizer_bytes"] == pytest.approx(12 * MIDDLE / 8, rel=1e-12)


@pytest.mark.parametrize("cluster, dtype, copies", [
    ("dgx-h100", "fp8", 1 + 1),                      # FP8 data and its transpose (Hopper: TN GEMMs only)
    ("dgx-b200", "mxfp8", 2 * (1 + 1 / 32)),         # row- and column-wise MXFP8 with 1-byte scales per 32
])
def test_fp8_param_gather_drops_the_16_bit_weights_of_a_llama3_70b_stage(cluster, dtype, copies):
    kept = _parts(cluster, 1, dtype=dtype)["weights_bytes"]
    gathered = _parts(cluster, 1, dtype=dtype, fp8_param_gather=True)["weights_bytes"]
    assert kept == pytest.approx((2 + copies) * MIDDLE, rel=1e-12)     # fp8: 17,113,088,000 bytes
    assert gathered == pytest.approx(copies * MIDDLE, rel=1e-12)       # fp8: 8,556,544,000 bytes


def test_fp8_param_gather_keeps_the_embedding_in_16_bits():
    # the embedding is no Transformer Engine linear: no quantised copy, so its bf16 weights stay
    first = _parts("dgx-h100", 0, dtype="fp8", fp8_param_gather=True)["weights_bytes"]
    assert first == pytest.approx(2 * MIDDLE + 2 * EMBEDDING, rel=1e-12)


def test_16_bit_training_ignores_fp8_param_gather():
    assert _parts("dgx-h100", 1, fp8_param_gather=True) == _parts("dgx-h100", 1)


def test_fp32_training_keeps_fp32_gradients_whatever_the_buffer_field_says():
    w, g, o = memory.model_state_bytes(1e9, 0, 1, full_precision=True, grad_bytes=2.0)
    assert (float(w), float(g), float(o)) == (4e9, 4e9, 8e9)


def test_model_state_bytes_takes_per_row_arrays_of_both_behaviours():
    w, g, _ = memory.model_state_bytes(np.full(4, 1e9), np.array([1, 1, 3, 3]), 8, low_precision=True,
                                       copy_bytes=2.0, grad_bytes=np.array([4.0, 2.0, 4.0, 2.0]),
                                       fp8_param_gather=np.array([False, True, False, True]))
    np.testing.assert_allclose(w, [4e9, 2e9, 4e9 / 8, 2e9 / 8])
    np.testing.assert_allclose(g, [4e9, 2e9, 4e9 / 8, 2e9 / 8])      # ZeRO-3 shards both


@pytest.mark.parametrize("stack, dtype, grad_buffer_bytes, fp8_param_gather", [
    ("megatron-bridge", "bf16", 2.0, False),        # grad_reduce_in_fp32=False: bf16 buffer
    ("megatron-bridge", "fp8", 2.0, True),          # bf16 parameters, FP8 compute weights only
    ("megatron-bridge", "mxfp8", 2.0, True),
    ("megatron-bridge", "nvfp4", 2.0, False),       # --fp4-param-gather is not this field
    ("megatron-bridge", "fp32", 4.0, False),
    ("megatron-core", "bf16", 4.0, False),          # --bf16 forces fp32 accumulation
    ("megatron-core", "fp16", 2.0, False),          # fp16 without --accumulate-allreduce-grads-in-fp32
    ("megatron-lm-2021", "fp16", 2.0, False),       # local DDP: the buffer is param.dtype
    ("deepspeed-2021", "fp16", 2.0, False),         # fp16 p.grad; fp32 only for the own partition at the step
])
def test_stacks_set_the_gradient_buffer_and_fp8_parameters(stack, dtype, grad_buffer_bytes, fp8_param_gather):
    fields = stack_config_fields(load_stack(stack), dtype)
    assert fields["grad_buffer_bytes"] == grad_buffer_bytes
    assert fields["fp8_param_gather"] is fp8_param_gather


def test_bad_values_name_their_field():
    with pytest.raises(InputError, match="grad_buffer_bytes"):
        ParallelConfig(grad_buffer_bytes=3)
    with pytest.raises(InputError, match="fp8_param_gather"):
        ParallelConfig(fp8_param_gather="yes")
    with pytest.raises(InputError, match="training.grad_buffer"):
        TrainingBehaviour(grad_buffer="bf16")


def test_the_planners_memory_of_a_batch_with_both_fields_is_simulates():
    cluster = load_cluster("dgx-h100")
    eff = efficiency_for_cluster(cluster)
    configs = [ParallelConfig(dp=d, tp=4, pp=p, micro_batch=1, global_batch=64, zero_stage=z, dtype="fp8",
                              sequence_parallel=True, recompute="full", grad_buffer_bytes=g, fp8_param_gather=f)
               for d, p in ((8, 4), (4, 8)) for z in (1, 2, 3) for g in (2.0, 4.0) for f in (False, True)]
    batch = ConfigBatch.from_configs(configs)
    assert [batch.row(i) for i in range(len(batch))] == configs
    planned = memory_parts(LLAMA, cluster, eff, batch)
    bound = static_lower_bound_bytes(LLAMA, cluster, eff, batch)
    for i, config in enumerate(configs):
        report = simulate(LLAMA, cluster, config)
        assert planned["memory_bytes"][i] == report.memory_bytes
        assert planned["gradients_bytes"][i] == report.memory_breakdown_bytes["gradients_bytes"]
        assert planned["weights_bytes"][i] == report.memory_breakdown_bytes["weights_bytes"]
        assert bound[i] <= report.memory_bytes
    # each behaviour lowers the peak, all else equal
    mem = planned["memory_bytes"].reshape(-1, 2, 2)          # (layout, zero) x grad bytes x fp8 params
    assert (mem[:, 0, :] < mem[:, 1, :]).all() and (mem[:, :, 1] < mem[:, :, 0]).all()


def test_a_megatron_bridge_fp8_plan_ranks_with_the_stacks_fields_and_agrees_with_simulate():
    result = plan("llama3-70b", "dgx-h100", 64, 64, dtypes=("fp8",), stack="megatron-bridge", max_tp=8)
    software = result.software["fp8"]
    assert software["grad_buffer_bytes"] == 2.0 and software["fp8_param_gather"] is True
    rows = result.plans.head(5)
    assert len(rows) > 0
    for _, row in rows.iterrows():
        report = simulate(LLAMA, load_cluster("dgx-h100"), row_config(row, software), n_gpus=64)
        assert row["memory_gib"] * 2**30 == pytest.approx(report.memory_bytes, rel=1e-9)
        assert row["step_time_s"] == pytest.approx(report.step_time_s, rel=1e-9)
