"""DeepSpeed 0.3's ZeRO-3 as its code runs it: persistent small tensors, per-rank copies of the
list-based collectives, and gradients all-reduced per bucket (``hardware_specs/stacks/
deepspeed-2021.yaml``). Expected values are derived by hand from the cluster's link numbers."""
from dataclasses import replace

import pytest

from cost_models import params
from hardware_specs.catalog import efficiency_for_cluster, load_cluster, load_stack
from hardware_specs.errors import InputError
from hardware_specs.stack_spec import TrainingBehaviour
from model_specs import load_model
from simulator import simulate
from simulator.parallel_config import ParallelConfig
from simulator.stack_defaults import stack_config_fields
from nccl_by_hand import flat_ring_over_nodes

CLUSTER = load_cluster("dgx-a100-80gb")
EFF = efficiency_for_cluster(CLUSTER)
N = 32                                           # 4 nodes of 8
# a ring over 4 nodes: 3 of its 31 steps (6 of an all-reduce's 62) cross nodes at the NIC's
# start-up, 28 (56) stay on NVLink; all-gather (or reduce-scatter) and all-reduce of a buffer
gather_s, all_reduce_s = flat_ring_over_nodes(CLUSTER, EFF, 4)


def _base(**kw):
    # every ZeRO-3 collective exposed (no overlap, no recompute), so differences add up exactly
    return ParallelConfig(dp=N, tp=1, pp=1, micro_batch=1, global_batch=N, zero_stage=3, recompute="none",
                          dtype="fp16", grad_reduce_bytes=2, overlap_param_gather=False, overlap_grad_reduce=False,
                          zero3_recompute_gather=False, param_gather_per_tensor=True, **kw)


def test_layer_tensor_shapes_count_gpt3_biases_and_norms_and_split_what_megatron_splits():
    gpt3 = load_model("gpt3-175b")
    h = gpt3.hidden_size
    shapes = params.layer_param_tensor_shapes(gpt3)
    assert len(shapes) == params.layer_param_tensors(gpt3) == 12
    assert shapes == ((3 * h * h, True), (3 * h, True), (h * h, True), (h, False), (4 * h * h, True),
                      (4 * h, True), (4 * h * h, True), (h, False), (h, False), (h, False), (h, False), (h, False))
    # the parameter count leaves biases out and counts the norms' weights: 9h + 2h more here
    assert sum(e for e, _ in shapes) - params.dense_layer_params(gpt3) == 11 * h
    llama = load_model("llama3-8b")
    assert len(params.layer_param_tensor_shapes(llama)) == params.layer_param_tensors(llama) == 6


def test_persistent_tensors_leave_the_per_use_gathers_and_are_gathered_once_after_the_step():
    """Llama-3 8B's two RMSNorm weights (4,096 elements) sit below DeepSpeed's 1e5 threshold:
    each layer's forward and backward gathers lose two ring calls and 2 x 4,096 fp16 elements,
    and one gather of all of them (2 a layer and the final norm) follows the optimizer step."""
    model = load_model("llama3-8b")
    h, layers = model.hidden_size, model.num_layers
    gathered = simulate(model, CLUSTER, _base(), n_gpus=N)
    persistent = simulate(model, CLUSTER, _base(zero3_persistence_elements=1e5), n_gpus=N)
    # the 4 other tensors' bytes split over 4 calls in place of all 6 over 6 (each on NCCL's
    # fastest protocol for its size)
    layer_bytes = params.dense_layer_params(model) * 2
    saved_per_pass = 6 * gather_s(layer_bytes / 6) - 4 * gather_s((layer_bytes - 2 * h * 2) / 4)
    z3 = gathered.time_breakdown_s["zero3_comm_exposed_s"] - persistent.time_breakdown_s["zero3_comm_exposed_s"]
    assert z3 == pytest.approx(layers * 2 * saved_per_pass, rel=1e-9)
    after_step = gather_s((2 * layers + 1) * h * 2)
    assert persistent.time_breakdown_s["dp_comm_exposed_s"] == pytest.approx(after_step, rel=1e-9)
    assert gathered.time_breakdown_s["dp_comm_exposed_s"] == 0.0
    # a threshold below every tensor changes nothing
    assert simulate(model, CLUSTER, _base(zero3_persistence_elements=100.0), n_gpus=N).step_time_s == \
        pytest.approx(gathered.step_time_s, rel=1e-12)


def test_list_collectives_pay_one_copy_kernel_per_rank_per_call():
    """Per layer, 6 forward gathers, 6 backward gathers and 6 gradient reduce-scatters, each
    followed (or preceded) by 32 copy kernels; the embedding and the untied output layer add a
    forward gather, a backward gather and a reduce-scatter each."""
    model = load_model("llama3-8b")
    off = simulate(model, CLUSTER, _base(), n_gpus=N)
    on = simulate(model, CLUSTER, _base(collective_per_rank_copies=True), n_gpus=N)
    calls = model.num_layers * (6 + 6 + 6) + 2 * 3
    assert on.step_time_s - off.step_time_s == pytest.approx(calls * N * EFF.kernel_overhead_s, rel=1e-9)


def test_persistent_gather_with_list_copies_adds_a_copy_per_persistent_tensor_and_rank():
    """DeepSpeed's ``_allgather_params`` copies every persistent tensor's slice of every rank on
    its own, after the list all-gather's own 32 copies: (1 + 2 x 32 + 1) x 32 kernels."""
    model = load_model("llama3-8b")
    plain = simulate(model, CLUSTER, _base(zero3_persistence_elements=1e5), n_gpus=N)
    copies = simulate(model, CLUSTER, _base(zero3_persistence_elements=1e5, collective_per_rank_copies=True),
                      n_gpus=N)
    extra = copies.time_breakdown_s["dp_comm_exposed_s"] - plain.time_breakdown_s["dp_comm_exposed_s"]
    assert extra == pytest.approx((1 + 2 * model.num_layers + 1) * N * EFF.kernel_overhead_s, rel=1e-9)


def test_all_reduced_gradients_cost_one_ring_all_reduce_per_bucket():
    """With every tensor gathered alone but the gradients all-reduced in 1e8-element buckets:
    a 218.1M-element Llama-3 8B layer is 2.18 buckets (all-reduce of 2 bytes x 218.1M / 2.18 each);
    the reduce-scatter path pays 6 reduce-scatters per layer instead. Checked on one layer's worth
    against the ring formulas (the tree is slower than the ring at these sizes on 4 nodes)."""
    model = load_model("llama3-8b")
    layer = params.dense_layer_params(model)
    bucket = 1e8
    rs = simulate(model, CLUSTER, _base(grad_bucket_elements=bucket), n_gpus=N)
    ar = simulate(model, CLUSTER, _base(grad_bucket_elements=bucket, zero3_grad_all_reduce=True), n_gpus=N)
    calls = layer / bucket
    per_layer = calls * all_reduce_s(layer * 2 / calls) - 6 * gather_s(layer * 2 / 6)
    ends = 0.0
    for n_params in (params.embedding_params(model), params.lm_head_params(model)):
        c = n_params / bucket
        ends += c * all_reduce_s(n_params * 2 / c) - gather_s(n_params * 2)
    assert ar.step_time_s - rs.step_time_s == pytest.approx(model.num_layers * per_layer + ends, rel=1e-6)


def test_deepspeed_2021_stack_sets_the_three_behaviours_and_fsdp_none():
    ds = stack_config_fields(load_stack("deepspeed-2021"), "fp16")
    assert (ds["zero3_persistence_elements"], ds["collective_per_rank_copies"], ds["zero3_grad_all_reduce"]) == \
        (1e5, True, True)
    fsdp = stack_config_fields(load_stack("pytorch-fsdp"), "bf16")
    assert (fsdp["zero3_persistence_elements"], fsdp["collective_per_rank_copies"], fsdp["zero3_grad_all_reduce"]) == \
        (0.0, False, False)


def test_bad_values_name_the_field():
    with pytest.raises(InputError, match=r"zero3_persistence_elements"):
        replace(_base(), zero3_persistence_elements=-1.0)
    with pytest.raises(InputError, match=r"zero3_persistence_elements"):
        replace(_base(), zero3_persistence_elements=float("nan"))
    with pytest.raises(InputError, match=r"collective_per_rank_copies"):
        replace(_base(), collective_per_rank_copies="yes")
    with pytest.raises(InputError, match=r"training.zero3_grad_reduce: unknown value 'sometimes'"):
        TrainingBehaviour(zero3_grad_reduce="sometimes")
    with pytest.raises(InputError, match=r"training.zero3_persistence_threshold_elements: must be >= 0"):
        TrainingBehaviour(zero3_persistence_threshold_elements=-5.0)
