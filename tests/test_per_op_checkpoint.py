"""torchtitan's per-operation selective checkpointing (the ``per_op`` stack policy: recompute
modules ``layernorm``, ``mlp_act`` and ``every_second_linear``), with hand-derived numbers.

torchtitan's ``_apply_op_sac`` (pytorch/torchtitan@v0.2.0) saves the outputs of a block's
matmuls and attention kernel except every second matmul; a Llama block issues wq, wk, wv, wo,
w1, w3, w2, so wk, wo and w3 rerun in backward, with the norms, RoPE, SiLU, the products and the
residual adds.
"""
from __future__ import annotations

import pytest

from cost_models import memory
from cost_models.compute import compute_rates, linear_gemm_times_s, memory_bound_time_s
from cost_models.layer_costs import block_projections_in_order, every_second_linear_forward
from hardware_specs.catalog import efficiency_for_cluster, load_cluster, load_stack
from hardware_specs.stack_spec import SELECTIVE_CHECKPOINTS
from model_specs.catalog import load_model
from planners.plan import plan
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate
from simulator.stack_defaults import stack_config_fields

PER_OP = memory.MODULE_BITS["layernorm"] | memory.MODULE_BITS["mlp_act"] | memory.MODULE_BITS["every_second_linear"]
H, A, G, D, F = 4096, 32, 8, 128, 14336          # Llama 3 8B


def _llama():
    m = load_model("llama3-8b")
    assert (m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim, m.ffn_hidden_size, m.gated_mlp) == (H, A, G, D, F, True)
    return m


def test_kept_bytes_per_token_are_the_tensors_the_policy_saves():
    """Per token and layer (bf16, tp 1, flash attention, no dropout): the block input (2h) and
    the last matmul's output w2 (2h), the saved matmul outputs wq (2ad) and wv (2gd) and w1 (2f),
    the attention output (2ad) and its log-sum-exp (4a): 63,616 bytes, against Megatron's
    attention-core recompute, which keeps everything but the core's scores: 139,264."""
    m = _llama()
    per_op = memory.activation_bytes_per_layer(m, 1, 1, 1, 1, False, 1, True, modules=PER_OP)
    by_hand = 2 * H + 2 * H + 2 * A * D + 2 * G * D + 2 * F + 2 * A * D + 4 * A
    assert by_hand == 63_616
    assert float(per_op) == pytest.approx(by_hand)
    megatron = memory.activation_bytes_per_layer(m, 1, 1, 1, 1, False, 1, True)
    assert float(megatron) == pytest.approx(4 * H + 4 * H + 2 * (A * D + 2 * G * D) + 2 * A * D + 4 * F + 2 * F)
    assert float(megatron) == pytest.approx(139_264)
    # the stack's selective mask is what a plain ``selective`` keeps
    assert float(memory.activation_bytes_per_layer(m, 1, 1, 1, 1, False, 1, True, selective=PER_OP)) == by_hand


def test_the_recomputed_projections_are_the_even_matmuls_of_a_llama_block():
    m = _llama()
    order = [(float(n), float(k)) for n, k in block_projections_in_order(m, 1)]
    assert order == [(A * D, H), (G * D, H), (G * D, H), (H, A * D), (F, H), (F, H), (H, F)]
    eff = efficiency_for_cluster(load_cluster("dgx-h100"))
    rates = compute_rates(load_cluster("dgx-h100").gpu, eff, "bf16")
    tokens = 16384.0
    seconds, flops, kernels = every_second_linear_forward(m, rates, tokens, 1, False)
    # wk (1024 x 4096), wo (4096 x 4096), w3 (14336 x 4096): 36.5% of the block's projection FLOPs
    assert float(flops) == pytest.approx(2 * tokens * (G * D * H + H * A * D + F * H))
    assert float(flops) / (2 * tokens * (A * D * H + 2 * G * D * H + H * A * D + 3 * F * H)) == pytest.approx(0.3654, abs=1e-4)
    gemms = sum(float(linear_gemm_times_s(tokens, n, k, rates)[0]) for n, k in ((G * D, H), (H, A * D), (F, H)))
    # RoPE reads and writes the query and key heads (2 + 2 bytes a channel); two residual adds
    # read two rows of h and write one
    elementwise = float(memory_bound_time_s(tokens * (A + G) * D * 4 + 2 * 3 * tokens * H * 2, rates, 4))
    assert float(seconds) == pytest.approx(gemms + elementwise, rel=1e-12)
    assert kernels == 7


def test_torchtitan_stack_prices_its_own_selective_and_megatron_core_keeps_the_attention_core():
    assert SELECTIVE_CHECKPOINTS["per_op"] == ("layernorm", "mlp_act", "every_second_linear")
    fields = stack_config_fields(load_stack("torchtitan"))
    assert fields["selective_modules"] == ("layernorm", "mlp_act", "every_second_linear")
    assert stack_config_fields(load_stack("megatron-core"))["selective_modules"] == ("core_attn",)
    m, cluster = _llama(), load_cluster("dgx-h100")
    layout = dict(dp=8, micro_batch=2, global_batch=16, zero_stage=3, recompute="selective")
    titan = simulate(m, cluster, ParallelConfig(**fields, **layout))
    core = simulate(m, cluster, ParallelConfig(**{**fields, "selective_modules": ("core_attn",)}, **layout))
    # half the activations (63,616 against 139,264 bytes a token and layer), more recompute
    per_layer_tokens = 2 * 8192 * m.num_layers
    assert core.memory_breakdown_bytes["activations_bytes"] - titan.memory_breakdown_bytes["activations_bytes"] \
        == pytest.approx(per_layer_tokens * (139_264 - 63_616), rel=1e-9)
    assert titan.time_breakdown_s["recompute_s"] > core.time_breakdown_s["recompute_s"]


def test_planner_and_simulate_agree_on_a_torchtitan_selective_plan():
    m, cluster = _llama(), load_cluster("dgx-h100")
    result = plan(m, cluster, 8, 16, stack="torchtitan", fixed={"recompute": ["selective"], "tp": [1], "pp": [1]})
    best = result.best
    fields = stack_config_fields(load_stack("torchtitan"))
    config = ParallelConfig(**{**fields, **{k: best[k] for k in ("dp", "tp", "pp", "cp", "micro_batch", "zero_stage")}},
                            global_batch=16, recompute="selective", sequence_parallel=bool(best["sequence_parallel"]),
                            zero_shard_group=int(best["zero_shard_group"]),
                            offload_activation_layers=int(best["offload_activation_layers"]))
    report = simulate(m, cluster, config)
    assert best["step_time_s"] == pytest.approx(report.step_time_s, rel=1e-9)
    assert best["memory_gib"] == pytest.approx(report.memory_bytes / 2**30, rel=1e-9)
    assert best["recompute_s"] == pytest.approx(report.time_breakdown_s["recompute_s"], rel=1e-9)


def test_torchtitans_eager_block_ops_by_hand():
    """torchtitan's Llama code without torch.compile (``unfused_block_ops``), Llama 3 8B at tp 1,
    per token: RoPE on 32 + 8 heads of 128 channels at 20 bytes a channel instead of 4
    (+81,920), repeat_kv's copies of the keys and values to 32 heads (2 x (2 x 1,024 + 2 x 4,096)
    = 20,480), the output's contiguous copy (4 x 4,096 = 16,384): 118,784 bytes and 7 kernels more
    each way; the SwiGLU product as two ops: 5 / 9 units of ffn instead of 3 / 5."""
    from cost_models import layer_costs
    m = _llama()
    extra, kernels = layer_costs.unfused_attention_bytes(m, 1.0, 1)
    assert float(extra) == (20 - 4) * (A + G) * D + 2 * (2 * G * D + 2 * A * D) + 4 * A * D == 118_784
    assert float(kernels) == 2 * 2 + 2 + 1
    cluster = load_cluster("dgx-h100")
    rates = compute_rates(cluster.gpu, efficiency_for_cluster(cluster), "bf16")
    tokens = 16384.0
    fused = layer_costs.attention_block_costs(m, rates, tokens, 8192, 1, False)
    eager = layer_costs.attention_block_costs(m, rates, tokens, 8192, 1, False, unfused_ops=True)
    each_way = float(memory_bound_time_s(tokens * 118_784, rates, 7))
    assert float(eager["elem_fwd_s"] - fused["elem_fwd_s"]) == pytest.approx(each_way, rel=1e-9)
    assert float(eager["elem_bwd_s"] - fused["elem_bwd_s"]) == pytest.approx(each_way, rel=1e-9)
    mlp_fused = layer_costs.dense_mlp_costs(m, rates, tokens, 1, False)
    mlp_eager = layer_costs.dense_mlp_costs(m, rates, tokens, 1, False, unfused_ops=True)
    assert float(mlp_eager["elem_fwd_s"] - mlp_fused["elem_fwd_s"]) == pytest.approx(
        float(memory_bound_time_s(tokens * 2 * F * 2, rates, 1)), rel=1e-9)
    assert float(mlp_eager["elem_bwd_s"] - mlp_fused["elem_bwd_s"]) == pytest.approx(
        float(memory_bound_time_s(tokens * 4 * F * 2, rates, 2)), rel=1e-9)
    # only torchtitan's stack says so
    assert stack_config_fields(load_stack("torchtitan"))["unfused_block_ops"] is True
    assert stack_config_fields(load_stack("megatron-core"))["unfused_block_ops"] is False
