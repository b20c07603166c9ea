"""Pipeline sends follow the stack (``pipeline_scatter_gather``): Megatron-Core sends the whole
[s, b, h] tensor from every tensor-parallel rank unless sequence parallelism shards it
(megatron/core/pipeline_parallel/schedules.py get_tensor_shapes at NVIDIA/Megatron-LM@d98e8a64);
Megatron-LM 2021-2022 scattered it over the TP ranks and all-gathered it on the receiver over
NVLink (megatron/p2p_communication.py ``_communicate``, on by default since 72e4230bb5).

gpt3-175b (h 12288, s 2048), micro-batch 1, bf16: the tensor is 2048 x 12288 x 2 = 50,331,648
bytes. On dgx-a100-80gb, tp 8 x dp 8 puts neighbouring stages 64 ranks apart, across nodes: one
NIC at 25 GB/s x 0.85 = 21.25 GB/s, 5 us latency; NVLink 300 GB/s x 0.8 = 240 GB/s, 3 us a hop
(cluster and efficiency files). A ring all-gather of the tensor over 8 NVLink ranks on NCCL's
Simple protocol: 7/8 x bytes / 240 GB/s + 7 hops x 3 us + 8.4 us base."""
import pytest

from hardware_specs.catalog import load_stack
from paraplan import api
from simulator.stack_defaults import stack_config_fields

TENSOR = 2048 * 12288 * 2.0
NIC, NIC_LAT = 25e9 * 0.85, 5e-6
GATHER = 7.0 / 8.0 * TENSOR / (300e9 * 0.8) + 7 * 3e-6 + 8.4e-6


def _p2p(stack, sp):
    report, _, _ = api.simulate_report("gpt3-175b", "dgx-a100-80gb", gpus=1024, tp=8, pp=16, global_batch=1536,
                                       micro_batch=1, recompute="full", sequence_parallel=sp, stack=stack)
    return report.extras["p2p_per_microbatch_s"]


@pytest.mark.parametrize("stack, on", [("megatron-core", False), ("megatron-bridge", False), ("nemo-24", False),
                                       ("megatron-lm-2021", True), ("megatron-lm-2022", True),
                                       ("megatron-deepspeed", True), ("gpt-neox-2022", True)])
def test_the_stack_says_whether_it_scatters_pipeline_tensors(stack, on):
    assert stack_config_fields(load_stack(stack), "bf16")["pipeline_scatter_gather"] is on


def test_megatron_core_sends_the_whole_tensor_without_sequence_parallelism():
    assert _p2p("megatron-core", False) == pytest.approx(TENSOR / NIC + NIC_LAT, rel=1e-9)


def test_sequence_parallelism_sends_a_tp_slice_and_gathers_nothing():
    for stack in ("megatron-core", "megatron-lm-2022"):
        assert _p2p(stack, True) == pytest.approx(TENSOR / 8 / NIC + NIC_LAT, rel=1e-9)


def test_scatter_gather_sends_a_slice_and_pays_the_receivers_nvlink_all_gather():
    assert _p2p("megatron-lm-2021", False) == pytest.approx(TENSOR / 8 / NIC + NIC_LAT + GATHER, rel=1e-6)


def test_a_blocking_exchange_pays_two_sends_but_gathers_the_one_tensor_it_receives():
    """DeepSpeed's PipelineEngine (megatron-deepspeed): blocking send then receive at a boundary
    (two transfers), partitioned tensors gathered once on receipt."""
    assert _p2p("megatron-deepspeed", False) == pytest.approx(2 * (TENSOR / 8 / NIC + NIC_LAT) + GATHER, rel=1e-6)
