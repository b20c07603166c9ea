"""DeepSpeed's BF16_Optimizer as the pipeline engine runs it for bf16: ZeRO-1's optimizer-state
sharding, but the fp32 gradients all-reduced whole after the last micro-batch (microsoft/
DeepSpeed@v0.7.0 deepspeed/runtime/pipe/engine.py ``_bf16_reduce_grads``), then the bf16 weights
all-gathered (bf16_optimizer.py ``update_lp_params``). Megatron-Core's distributed optimizer
reduce-scatters instead. Expected values are derived by hand from the cluster's link numbers."""
from dataclasses import replace

import pytest

from cost_models import params
from hardware_specs.catalog import efficiency_for_cluster, load_cluster, load_stack
from model_specs import load_model
from simulator import simulate
from simulator.parallel_config import ParallelConfig
from simulator.stack_defaults import stack_config_fields
from nccl_by_hand import flat_ring_over_nodes

CLUSTER = load_cluster("dgx-a100-80gb")
EFF = efficiency_for_cluster(CLUSTER)
N = 32                                           # 4 nodes of 8: 3 of a ring's 31 steps cross nodes
reduce_scatter_s, all_reduce_s = flat_ring_over_nodes(CLUSTER, EFF, 4)


def test_the_pipeline_engines_bf16_zero1_is_set_by_the_stack_and_only_for_bf16():
    ds = load_stack("megatron-deepspeed")
    assert ds.training.bf16_zero1_grad_reduce == "all_reduce"
    assert stack_config_fields(ds, "bf16")["zero1_grad_all_reduce"] is True
    assert stack_config_fields(ds, "fp16")["zero1_grad_all_reduce"] is False
    assert stack_config_fields(load_stack("megatron-core"), "bf16")["zero1_grad_all_reduce"] is False


def test_all_reduced_zero1_gradients_cost_an_all_reduce_where_the_distributed_optimizer_reduce_scatters():
    """Llama-3 8B on 32 A100s, ZeRO-1, bf16 with fp32 gradients (4 bytes a parameter), one
    reduction of the whole buffer after the flush: the step differs by exactly
    all_reduce(4 P) - reduce_scatter(4 P), P the parameters (ring formulas; at these sizes the
    tree is slower than the ring on 4 nodes), and the weights' all-gather is the same in both."""
    model = load_model("llama3-8b")
    base = ParallelConfig(dp=N, tp=1, pp=1, micro_batch=1, global_batch=N, zero_stage=1, recompute="none",
                          dtype="bf16", grad_reduce_bytes=4, overlap_grad_reduce=False, overlap_param_gather=False,
                          grad_bucket_elements=0)
    rs = simulate(model, CLUSTER, base, n_gpus=N)
    ar = simulate(model, CLUSTER, replace(base, zero1_grad_all_reduce=True), n_gpus=N)
    p = params.total_params(model)
    expected = all_reduce_s(4 * p) - reduce_scatter_s(4 * p)
    # the extra 31/32 of the 32 GB buffer on the ring at min(NVLink 240, 8 NICs x 25 x 0.85) = 170 GB/s
    assert expected == pytest.approx((N - 1) / N * 4 * p / 170e9, rel=2e-3)
    assert ar.extras["dp_comm_total_s"] - rs.extras["dp_comm_total_s"] == pytest.approx(expected, rel=1e-6)
    assert ar.step_time_s - rs.step_time_s == pytest.approx(expected, rel=1e-6)


def test_with_the_optimizer_offloaded_a_bf16_optimizer_stack_reduce_scatters_its_zero1_gradients():
    """DeepSpeed builds BF16_Optimizer for bf16 ZeRO-1 only without ZeRO-Offload
    (deepspeed/runtime/engine.py:2305-2306 at 0.19.8, ``and not self.zero_cpu_offload()``); with
    the optimizer on the host its ZeRO-1 optimizer reduces each rank's partition. The same Llama-3
    8B run on 32 A100s with offload_optimizer_fraction 1: the plan priced with
    ``zero1_grad_all_reduce`` costs what the reduce-scattered one costs (2.807 s, the gradient
    reduce-scatter 0.183 s + the bf16 weight all-gather 0.092 s of data-parallel traffic), where
    it had priced the whole fp32 all-reduce (0.366 s: 2.990 s a step). Without offload the
    all-reduce stays (the test above)."""
    model = load_model("llama3-8b")
    base = ParallelConfig(dp=N, tp=1, pp=1, micro_batch=1, global_batch=N, zero_stage=1, recompute="none",
                          dtype="bf16", grad_reduce_bytes=4, overlap_grad_reduce=False, overlap_param_gather=False,
                          grad_bucket_elements=0, offload_optimizer_fraction=1.0)
    rs = simulate(model, CLUSTER, base, n_gpus=N)
    ar = simulate(model, CLUSTER, replace(base, zero1_grad_all_reduce=True), n_gpus=N)
    p = params.total_params(model)
    # the reduce-scatter of the 4-byte gradients plus the all-gather of the 2-byte weights, ring
    assert ar.extras["dp_comm_total_s"] == pytest.approx(reduce_scatter_s(4 * p) + reduce_scatter_s(2 * p), rel=1e-6)
    assert ar.step_time_s == pytest.approx(rs.step_time_s, rel=1e-12)
    on_gpu = simulate(model, CLUSTER, replace(base, zero1_grad_all_reduce=True, offload_optimizer_fraction=0.0),
                      n_gpus=N)
    assert on_gpu.extras["dp_comm_total_s"] - ar.extras["dp_comm_total_s"] == pytest.approx(
        all_reduce_s(4 * p) - reduce_scatter_s(4 * p), rel=1e-6)
