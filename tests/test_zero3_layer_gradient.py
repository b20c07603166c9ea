"""ZeRO-3 / FSDP's gathered buffers hold, in backward, the computing layer's and the prefetched
layer's 16-bit parameters and the computing layer's unsharded gradient, in the dtype it is
reduce-scattered in, until that reduce-scatter (Zhao et al. 2023 sections 3.3-3.4; FSDP2
post_backward). The gradients row holds only the shard, so the layer's whole gradient is not
counted twice; a stage gathered once a step keeps its whole gradients in that row instead."""
from __future__ import annotations

from dataclasses import replace

import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs.catalog import load_model
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.step_model import memory_parts

CLUSTER = load_cluster("dgx-h100")
EFF = efficiency_for_cluster(CLUSTER)
MODEL = load_model("llama3-8b")
# one Llama-3-8B layer: q, o 4096 x 4096; k, v 4096 x 1024; gate, up, down 4096 x 14336;
# two RMSNorm weights of 4096
LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096      # 218,112,000
assert LAYER == 218_112_000


# the layer rule on its own: a vocabulary of 4,096 makes the LM head (16.8 M parameters) smaller
# than a layer, so the one stage's computing unit is a layer (a larger head is
# tests/test_zero3_head_buffer.py's)
SMALL_HEAD = replace(MODEL, vocab_size=4096)


def _parts(**kw):
    cfg = ParallelConfig(dp=16, tp=1, pp=1, micro_batch=1, global_batch=64, zero_stage=3, recompute="full", **kw)
    return memory_parts(SMALL_HEAD, CLUSTER, EFF, ConfigBatch.from_configs([cfg]))


@pytest.mark.parametrize("reduce_bytes", [2.0, 4.0])
def test_buffers_hold_two_layers_of_parameters_and_one_layers_gradient(reduce_bytes):
    # bf16 parameters, 2 bytes, for the computing and the prefetched layer; the gradient in bf16
    # (FSDP2's default reduce dtype) or fp32 (torchtitan's float32 reduce)
    parts = _parts(grad_reduce_bytes=reduce_bytes)
    assert parts["zero3_buffers_bytes"][0] == pytest.approx(LAYER * (2 * 2 + reduce_bytes), rel=1e-12)


def test_a_deeper_prefetch_adds_parameters_not_gradients():
    # two layers prefetched: three layers of parameters, still one layer's gradient
    parts = _parts(grad_reduce_bytes=2.0, param_prefetch_forward=2.0, param_prefetch_backward=2.0)
    assert parts["zero3_buffers_bytes"][0] == pytest.approx(LAYER * (3 * 2 + 2), rel=1e-12)


def test_a_stage_gathered_once_a_step_counts_its_whole_gradients_once():
    cfg = ParallelConfig(dp=8, tp=1, pp=2, micro_batch=1, global_batch=64, zero_stage=3, recompute="full",
                         zero3_once_per_step=True, grad_reduce_bytes=2.0)
    parts = memory_parts(MODEL, CLUSTER, EFF, ConfigBatch.from_configs([cfg]))
    assert parts["zero3_buffers_bytes"][0] == pytest.approx(LAYER * 2 * 2, rel=1e-12)


@pytest.mark.parametrize("zero, etp, expected_layers", [
    # experts sharded over tp / (ep * etp) = 8 expert-data-parallel ranks: two MoE layers' experts
    # gathered (16-bit) and the computing one's expert gradient (fp32); the attention, router and
    # norms are whole on the GPU (dp * cp = 1) and never gathered
    (3, 1, 2 * 2 + 4),
    # etp 8: every expert is sliced over the 8 GPUs, expert data parallelism 1: nothing to gather
    (3, 8, 0),
    # ZeRO-2 gathers no parameters (its gradient transient is the next test's)
    (2, 8, 0),
])
def test_experts_sharded_with_one_data_parallel_rank_are_gathered(zero, etp, expected_layers):
    """Mixtral 8x7B on 8 GPUs, tp 8, ep 1, dp 1: the experts' ZeRO group is dp * cp * tp /
    (ep * etp) ranks, so ZeRO-3 shards (and so gathers) the experts although the data-parallel
    group is one rank. One MoE layer's experts on a GPU: 8 experts x gate, up, down of 4096 x
    14336, whole (etp 1)."""
    spec = load_model("mixtral-8x7b")
    experts = 8 * 3 * 4096 * 14336
    cfg = ParallelConfig(dp=1, tp=8, pp=1, ep=1, etp=etp, micro_batch=1, global_batch=8, zero_stage=zero,
                         sequence_parallel=True, recompute="full", grad_reduce_bytes=4.0)
    parts = memory_parts(spec, CLUSTER, EFF, ConfigBatch.from_configs([cfg]))
    assert parts["zero3_buffers_bytes"][0] == pytest.approx(experts * expected_layers, rel=1e-12)


@pytest.mark.parametrize("zero, last_microbatch, expected_layers", [
    # ZeRO-2 reduce-scattering every micro-batch (DeepSpeed stage 2, FSDP SHARD_GRAD_OP): the
    # computing layer's whole gradient, fp32, before its reduce-scatter; no gathered parameters
    (2, False, 4),
    # a stack that keeps the whole gradient buffer until the last micro-batch holds it in the
    # gradients row already (ZeRO-1 states), as ZeRO-1 does
    (2, True, 0),
    (1, False, 0),
    # ZeRO-3: two layers' 16-bit parameters beside the same gradient
    (3, False, 2 * 2 + 4),
])
def test_zero2_holds_the_computing_layers_whole_gradient(zero, last_microbatch, expected_layers):
    cfg = ParallelConfig(dp=2, tp=1, pp=8, micro_batch=1, global_batch=16, zero_stage=zero, grad_reduce_bytes=4.0,
                         zero2_grad_last_microbatch=last_microbatch)
    parts = memory_parts(MODEL, CLUSTER, EFF, ConfigBatch.from_configs([cfg]))
    assert parts["zero3_buffers_bytes"][0] == pytest.approx(LAYER * expected_layers, rel=1e-12)
