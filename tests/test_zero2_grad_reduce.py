"""ZeRO-2 as the stack runs it (``zero2_grad_reduce``): gradients reduce-scattered to their shards
after every micro-batch (DeepSpeed stage 2, FSDP SHARD_GRAD_OP, Megatron-FSDP ``optim_grads``:
NVIDIA/Megatron-LM megatron_fsdp.py ``grad_reduce_every_bprop``), or kept whole until the last
micro-batch where the stack's only gradient sharding is a distributed optimizer (Megatron-LM
2019-2022, NeMo 24), which is ZeRO-1."""
import pytest

from hardware_specs.catalog import load_stack
from paraplan import api
from simulator.stack_defaults import stack_config_fields

#: llama3-8b on 16 H100 (dp 16, tp 1, pp 1), 8 micro-batches a step
RUN = dict(gpus=16, tp=1, pp=1, global_batch=128, micro_batch=1, recompute="full")


def _report(zero: int, **fields):
    report, model, _ = api.simulate_report("llama3-8b", "dgx-h100", zero_stage=zero, **RUN, **fields)
    return report


@pytest.mark.parametrize("stack, last", [("megatron-core", False), ("megatron-bridge", False),
                                         ("megatron-core-0.12", True), ("deepspeed-2021", False),
                                         ("megatron-lm-2022", True), ("nemo-24", True)])
def test_the_stack_says_when_zero2_reduces(stack, last):
    assert stack_config_fields(load_stack(stack), "bf16", "llama3-8b", "h100-sxm-80gb")[
        "zero2_grad_last_microbatch"] is last


def test_megatron_cores_zero2_is_megatron_fsdp_sharding_gradients_every_micro_batch():
    """Megatron-Core's ZeRO-2 (the Megatron export writes Megatron-FSDP optim_grads) holds 1/dp of
    the fp32 gradients: 8,030,257,152 parameters x 4 bytes / 16 = 2,007,564,288 bytes, and
    reduce-scatters them every micro-batch, so nothing of them is left for after the flush."""
    z2, z1 = _report(2), _report(1)
    params = z2.extras["params_local"]
    assert params == 8_030_257_152
    assert z2.memory_breakdown_bytes["gradients_bytes"] == pytest.approx(params * 4 / 16, rel=1e-12)
    assert z1.memory_breakdown_bytes["gradients_bytes"] == pytest.approx(params * 4, rel=1e-12)
    # after the flush only the 16-bit weights are all-gathered (2 bytes x P over 16); ZeRO-1
    # also reduce-scatters its whole fp32 gradients there
    from cost_models.topology import group_collective_time_s
    from hardware_specs.catalog import efficiency_for_cluster, load_cluster
    cluster = load_cluster("dgx-h100")
    eff = efficiency_for_cluster(cluster)
    gather = float(group_collective_time_s("all_gather", 2.0 * params, 16, 1, cluster, eff))
    assert z2.extras["dp_comm_total_s"] == pytest.approx(gather, rel=1e-9)
    assert z1.extras["dp_comm_total_s"] == pytest.approx(
        gather + float(group_collective_time_s("reduce_scatter", 4.0 * params, 16, 1, cluster, eff)), rel=1e-9)


def test_a_zero2_kept_whole_to_the_last_micro_batch_is_zero1():
    """With ``zero2_grad_last_microbatch`` the gradient buffer stays whole (params x 4 bytes) and
    is reduce-scattered once, after the last micro-batch, as ZeRO-1's: the step, its parts and the
    memory are ZeRO-1's to the last bit."""
    z2 = _report(2, zero2_grad_last_microbatch=True)
    z1 = _report(1, zero2_grad_last_microbatch=True)
    assert z2.memory_breakdown_bytes == z1.memory_breakdown_bytes
    assert z2.memory_breakdown_bytes["gradients_bytes"] == pytest.approx(z2.extras["params_local"] * 4, rel=1e-12)
    assert z2.time_breakdown_s == z1.time_breakdown_s
    assert z2.step_time_s == z1.step_time_s
    assert z2.time_breakdown_s["zero3_comm_exposed_s"] == 0.0


def test_the_planner_prices_zero2_as_simulate_does_on_a_stack_that_keeps_it_whole():
    """The planner reads the flag from the stack as simulate does: its best ZeRO-2 plan on
    Megatron-Core 0.8-0.12 (the distributed optimizer keeps whole gradients to the last
    micro-batch) re-simulated gives its numbers."""
    kw = dict(global_batch=128, stack="megatron-core-0.12", zero_stage=2)
    ranked = api.plan("llama3-8b", "dgx-h100", 16, max_plans=1, **kw)
    best = api.best_plan("llama3-8b", "dgx-h100", 16, **kw)
    assert int(ranked.iloc[0].zero_stage) == 2 and best.iloc[0].config == ranked.iloc[0].config
    assert float(best.iloc[0].step_time_s) == pytest.approx(float(ranked.iloc[0].step_time_s), rel=1e-9)
    assert float(best.iloc[0].memory_gib) == pytest.approx(float(ranked.iloc[0].memory_gib), rel=1e-9)


@pytest.mark.parametrize("stack, every", [("torchtitan", True), ("torchtitan-0.3", True), ("torchtitan-compile", True), ("pytorch-fsdp", True),
                                          ("llm-foundry", True), ("metaseq-2022", True), ("megatron-core", False),
                                          ("megatron-bridge", False), ("deepspeed-2021", False),
                                          ("megatron-deepspeed", False)])
def test_the_stack_says_whether_zero2_keeps_the_parameters_sharded(stack, every):
    """FSDP's ZeRO-2 (SHARD_GRAD_OP, FSDP2 reshard_after_forward False) reshards after each
    backward; DeepSpeed stage 2 and Megatron-FSDP optim_grads keep the 16-bit parameters whole."""
    assert stack_config_fields(load_stack(stack), "bf16", "llama3-8b", "h100-sxm-80gb")[
        "zero2_gather_every_microbatch"] is every


def test_fsdp_zero2_gathers_the_parameters_again_in_every_micro_batchs_forward():
    """With the gathers unhidden (overlap_param_gather off), ZeRO-2 that keeps its parameters
    sharded pays, in each of the 8 micro-batches' forwards, one all-gather of every layer
    (32 x 218,112,000 parameters of Llama 3 8B) and of the embedding and the output layer
    (525,336,576 each), 2 bytes a parameter over the 16 ranks, and no gather after the step;
    the other ZeRO-2 pays one all-gather of all 8,030,257,152 parameters after the step. The
    steps differ by exactly that: 8 x (32 ag(layer) + ag(emb) + ag(head)) - ag(all)."""
    from cost_models import params
    from cost_models.topology import group_collective_time_s
    from hardware_specs.catalog import efficiency_for_cluster, load_cluster
    from model_specs.catalog import load_model
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100")
    eff = efficiency_for_cluster(cluster)

    def ag(n):
        return float(group_collective_time_s("all_gather", 2.0 * n, 16, 1, cluster, eff))

    layer, emb, head = params.dense_layer_params(model), params.embedding_params(model), params.lm_head_params(model)
    assert (layer, emb, head) == (218_112_000, 525_336_576, 525_336_576)
    whole = _report(2, overlap_param_gather=False)
    sharded = _report(2, overlap_param_gather=False, zero2_gather_every_microbatch=True)
    assert whole.extras["dp_comm_total_s"] == pytest.approx(ag(8_030_257_152), rel=1e-12)
    assert sharded.extras["dp_comm_total_s"] == 0.0
    expected = 8 * (32 * ag(layer) + ag(emb) + ag(head)) - ag(8_030_257_152)
    assert sharded.step_time_s - whole.step_time_s == pytest.approx(expected, rel=1e-9)
    assert sharded.memory_breakdown_bytes == whole.memory_breakdown_bytes
    # prefetched under the forward (torchtitan's default), the gathers hide behind the passes
    hidden = _report(2, zero2_gather_every_microbatch=True)
    assert hidden.step_time_s < sharded.step_time_s


def test_the_planner_prices_fsdp_zero2_as_simulate_does():
    kw = dict(global_batch=128, stack="torchtitan", zero_stage=2)
    ranked = api.plan("llama3-8b", "dgx-h100", 16, max_plans=1, **kw)
    best = api.best_plan("llama3-8b", "dgx-h100", 16, **kw)
    assert int(ranked.iloc[0].zero_stage) == 2 and best.iloc[0].config == ranked.iloc[0].config
    assert float(best.iloc[0].step_time_s) == pytest.approx(float(ranked.iloc[0].step_time_s), rel=1e-9)
