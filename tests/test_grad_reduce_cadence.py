"""When data-parallel gradients are reduced: after every micro-batch (an accumulation loop with
no no_sync: PyTorch DDP / FSDP2, torchtitan) or once a step (Megatron's no_sync_func), and what a
pipeline changes: its runtime owns the micro-batch loop and reduces on the last backward
(torch.distributed.pipelining stage.py backward_maybe_with_nosync), whatever the stack's own
accumulation loop does."""
import pytest

from paraplan import api

#: PyTorch DDP's accumulation loop has no no_sync, as torchtitan's; torchtitan has no ZeRO-1 of its
#: own (FSDP2 shards the parameters too: its training.lacks), so the ZeRO-1 rows run on pytorch-ddp
#: (one gradient bucket, as torchtitan has: the reduction after the flush waits for the whole backward)
RUN = dict(gpus=16, tp=1, global_batch=128, micro_batch=1, zero_stage=1, recompute="full", stack="pytorch-ddp",
           grad_bucket_elements=0, grad_bucket_elements_per_dp=0)


def _step(pp: int, every: bool) -> float:
    return float(api.simulate("llama3-8b", "dgx-h100", pp=pp, grad_reduce_every_microbatch=every,
                              **RUN).iloc[0].step_time_s)


def _report(every: bool, **fields):
    return api.simulate_report("llama3-8b", "dgx-h100", pp=1, grad_reduce_every_microbatch=every, **RUN, **fields)


def test_a_per_micro_batch_reduction_is_priced_without_a_pipeline():
    """Hand derivation, llama3-8b on 16 x H100 (dp 16, tp 1, pp 1), global batch 128 at micro
    batch 1: m = 128 / (16 x 1) = 8 micro-batches. PyTorch DDP reduces fp32 gradients
    (grad_reduce_bytes 4) and its ZeRO-1 reduce-scatters them (zero1_grad_all_reduce false), so
    with RS(n) = group_collective_time_s("reduce_scatter", 4 n bytes, group 16, stride 1):

    - once a step (after the flush): one RS(P), P = the stage's parameters (32 layers + the
      embedding + the output layer; the final norm's 4,096 are left out of the stage's count);
    - every micro-batch: each layer's RS(P_layer) after that layer's backward and the output
      layer's and the embedding's RS(P_head), RS(P_emb) after theirs, m x (L + 2) of them, and
      no reduction after the flush.

    Exact with the reduction not overlapped (overlap_grad_reduce false), where every second of
    it is exposed: the per-layer part lands in zero3_comm_exposed_s (the step model's per-layer
    data-parallel traffic) and the flush's RS(P) leaves dp_comm_total_s. Pricing the per-micro-
    batch reduction once a step would give L x RS(P_layer), 8x too little; pricing it twice,
    2x too much."""
    from cost_models import params
    from cost_models.topology import group_collective_time_s
    from hardware_specs.catalog import efficiency_for_cluster

    every, model, cluster = _report(True, overlap_grad_reduce=False)
    once, _, _ = _report(False, overlap_grad_reduce=False)
    eff = efficiency_for_cluster(cluster)
    m, layers, dp = 8, model.num_layers, 16
    assert every.num_microbatches == once.num_microbatches == m and every.config["dp"] == dp
    assert (every.config["grad_reduce_bytes"], every.config["zero1_grad_all_reduce"]) == (4.0, False)

    def rs(n_params: float) -> float:
        return float(group_collective_time_s("reduce_scatter", n_params * 4.0, dp, 1, cluster, eff))

    per_layer = rs(params.dense_layer_params(model))
    ends = rs(params.embedding_params(model)) + rs(params.lm_head_params(model))
    per_microbatch = m * (layers * per_layer + ends)
    assert every.time_breakdown_s["zero3_comm_exposed_s"] == pytest.approx(per_microbatch, rel=1e-12)
    assert once.time_breakdown_s["zero3_comm_exposed_s"] == 0.0

    stage_params = layers * params.dense_layer_params(model) + params.embedding_params(model) \
        + params.lm_head_params(model)
    assert once.extras["params_local"] == stage_params
    assert once.extras["dp_comm_total_s"] - every.extras["dp_comm_total_s"] == pytest.approx(rs(stage_params),
                                                                                             rel=1e-9)
    # nothing else moves: the step is longer by the m x (L + 2) reductions, shorter by the flush's
    assert every.step_time_s - once.step_time_s == pytest.approx(per_microbatch - rs(stage_params), rel=1e-9)

    # the stack overlaps the reduction (its default): each layer's RS(P_layer), 2.5 ms, hides
    # under that layer's backward (recompute, input and weight gradients: over 19 ms); the
    # embedding's and the output layer's (525M parameters each) outlast their own short backward
    # passes, so what is exposed each micro-batch is theirs alone, beyond those passes
    every_ov, _, _ = _report(True)
    once_ov, _, _ = _report(False)
    assert every_ov.config["overlap_grad_reduce"] and per_layer < every_ov.layer_bwd_s
    exposed = every_ov.time_breakdown_s["zero3_comm_exposed_s"]
    assert 0.0 < exposed < m * ends
    assert every_ov.step_time_s - once_ov.step_time_s == pytest.approx(exposed - rs(stage_params), rel=1e-9)


def test_zero2_reduce_scatters_the_layers_and_the_ends_and_gathers_them_every_micro_batch():
    """ZeRO-2 on torchtitan (FSDP2 without the reshard after forward, which still reshards after
    each backward; no no_sync), llama3-8b on 16 x H100 at 8 micro-batches, nothing overlapped:
    every micro-batch reduce-scatters each layer's fp32 gradients and the output layer's and the
    embedding's (525M parameters each), and gathers their 16-bit weights again for its forward,
    m x (L x (RS(4 P_layer) + AG(2 P_layer)) + RS + AG of each end); nothing is left for after the
    flush; the gradients held are 1/16 of 4 P."""
    from cost_models import params
    from cost_models.topology import group_collective_time_s
    from hardware_specs.catalog import efficiency_for_cluster

    z2, model, cluster = api.simulate_report("llama3-8b", "dgx-h100", pp=1, grad_reduce_every_microbatch=True,
                                             overlap_grad_reduce=False, overlap_param_gather=False,
                                             **{**RUN, "zero_stage": 2, "stack": "torchtitan"})
    eff = efficiency_for_cluster(cluster)
    assert not z2.config["collective_per_rank_copies"] and z2.num_microbatches == 8

    def coll(kind: str, nbytes: float) -> float:
        return float(group_collective_time_s(kind, nbytes, 16, 1, cluster, eff))

    layer, emb, head = (params.dense_layer_params(model), params.embedding_params(model),
                        params.lm_head_params(model))
    assert z2.config["zero2_gather_every_microbatch"]
    per_microbatch = sum(coll("reduce_scatter", 4.0 * n) + coll("all_gather", 2.0 * n)
                         for n in [layer] * model.num_layers + [emb, head])
    assert z2.time_breakdown_s["zero3_comm_exposed_s"] == pytest.approx(8 * per_microbatch, rel=1e-12)
    stage = z2.extras["params_local"]
    assert z2.extras["dp_comm_total_s"] == 0.0
    assert z2.memory_breakdown_bytes["gradients_bytes"] == pytest.approx(4.0 * stage / 16, rel=1e-12)


def test_a_pipeline_reduces_once_a_step_whatever_the_stacks_accumulation_loop_does():
    assert _step(2, True) == pytest.approx(_step(2, False), rel=1e-12)


def test_zero3_gathers_and_reduces_the_ends_as_the_layers_in_the_reduction_dtype():
    """ZeRO-3 on torchtitan (FSDP2, bf16 parameters, fp32 reduce-scatter), llama3-8b on 16 x H100
    at 8 micro-batches, pp 1, nothing recomputed, nothing overlapped: each micro-batch gathers
    every layer's and each end's 16-bit weights twice (forward and backward) and reduce-scatters
    their fp32 gradients, m x sum over L layers and the 2 ends of (2 AG(2 P) + RS(4 P)). The ends'
    reduce-scatter was sized at the 2-byte parameters."""
    from cost_models import params
    from cost_models.topology import group_collective_time_s
    from hardware_specs.catalog import efficiency_for_cluster

    z3, model, cluster = api.simulate_report("llama3-8b", "dgx-h100", pp=1, overlap_param_gather=False,
                                             overlap_grad_reduce=False,
                                             **{**RUN, "zero_stage": 3, "recompute": "none"})
    eff = efficiency_for_cluster(cluster)
    assert z3.config["grad_reduce_bytes"] == 4.0 and z3.config["zero3_persistence_elements"] == 0
    assert not z3.config["param_gather_per_tensor"] and not z3.config["collective_per_rank_copies"]

    def per_block(n: float) -> float:
        return float(2 * group_collective_time_s("all_gather", 2.0 * n, 16, 1, cluster, eff)
                     + group_collective_time_s("reduce_scatter", 4.0 * n, 16, 1, cluster, eff))

    blocks = model.num_layers * per_block(params.dense_layer_params(model)) \
        + per_block(params.embedding_params(model)) + per_block(params.lm_head_params(model))
    assert z3.time_breakdown_s["zero3_comm_exposed_s"] == pytest.approx(8 * blocks, rel=1e-12)
