"""The materialised attention core (no fused kernel): its score-matrix traffic by hand, and it
is a kernel choice of its own that leaves the fused kernels' numbers alone."""
from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models.compute import ComputeRates
from cost_models.layer_costs import attention_block_costs, materialized_attention_times_s
from hardware_specs.catalog import load_cluster
from model_specs.catalog import load_model
from model_specs.model_spec import ModelSpec
from simulator.parallel_config import AttentionKernel, ParallelConfig
from simulator.simulate import simulate

MODEL = ModelSpec(name="m", num_layers=2, hidden_size=512, num_heads=8, num_kv_heads=8, ffn_hidden_size=2048,
                  vocab_size=1000, seq_len=1024, attention_dropout=False)


def _rates(act_bytes=2.0, dtype="bf16"):
    return ComputeRates(gemm_flops_per_s=1e15, attn_flops_per_s=1e14, hbm_bytes_per_s=1e12, half_dim=0.0,
                        kernel_overhead_s=0.0, operand_bytes=act_bytes, dtype=dtype, act_bytes=act_bytes)


def test_the_score_matrix_passes_by_hand():
    # 1024 queries x 1024 keys x 8 heads = 8.39M scores of 2 bytes: one pass takes 16.78 us at 1 TB/s
    elems = 1024 * 1024 * 8
    one_pass = elems * 2 / 1e12
    causal_flops = 2.0 * 1024 * 512 * 8 * (64 + 64)          # the fused core's forward FLOPs
    fwd, bwd = materialized_attention_times_s(MODEL, _rates(), 1024, 1024, 1, causal_flops)
    # forward: QK^T and PV (full square: 2x the causal FLOPs = 21.5 us) under their 2 passes (33.6 us),
    # then the softmax reads and writes (2 passes)
    assert fwd == pytest.approx(max(2 * causal_flops / 1e14, 2 * one_pass) + 2 * one_pass, rel=1e-12)
    # backward: 4 GEMM-side passes (over 43 us of FLOPs) and 3 for the softmax backward
    assert bwd == pytest.approx(max(4 * causal_flops / 1e14, 4 * one_pass) + 3 * one_pass, rel=1e-12)
    # fp32: 4-byte scores and an unfused softmax (masked_fill before it): 2 more passes each way
    f32, b32 = materialized_attention_times_s(MODEL, _rates(4.0, "fp32"), 1024, 1024, 1, causal_flops)
    assert f32 == pytest.approx(max(2 * causal_flops / 1e14, 4 * one_pass) + 8 * one_pass, rel=1e-12)
    assert b32 == pytest.approx(max(4 * causal_flops / 1e14, 8 * one_pass) + 10 * one_pass, rel=1e-12)
    # dropout on the probabilities adds two passes each way; tensor parallelism splits the heads
    fd, bd = materialized_attention_times_s(replace(MODEL, attention_dropout=True), _rates(), 1024, 1024, 1, causal_flops)
    assert (fd - fwd, bd - bwd) == pytest.approx((2 * one_pass, 2 * one_pass), rel=1e-9)
    f2, _ = materialized_attention_times_s(MODEL, _rates(), 1024, 1024, 2, causal_flops / 2)
    assert f2 == pytest.approx(fwd / 2, rel=1e-12)


def test_only_the_materialized_kernel_changes_the_attention_time():
    fused = attention_block_costs(MODEL, _rates(), 1024, 1024, 1, False)
    mixed = attention_block_costs(MODEL, _rates(), [1024, 1024], 1024, 1, False, materialized=[False, True])
    assert mixed["core_fwd_s"][0] == pytest.approx(float(fused["core_fwd_s"]), rel=1e-12)
    assert mixed["core_fwd_s"][1] > mixed["core_fwd_s"][0]


def test_the_materialized_kernel_stores_its_scores_and_slows_the_step():
    cfg = ParallelConfig(dp=8, tp=1, micro_batch=1, global_batch=64, attention_kernel="materialized")
    assert cfg.attention_kernel == AttentionKernel.MATERIALIZED and cfg.flash_attention is False
    model, cluster = load_model("gpt3-1.3b"), load_cluster("dgx-a100-80gb")
    flashless = simulate(model, cluster, replace(cfg, attention_kernel="auto", flash_attention=False))
    materialized = simulate(model, cluster, cfg)
    assert materialized.memory_bytes == pytest.approx(flashless.memory_bytes, rel=1e-12)   # same stored scores
    assert materialized.step_time_s > flashless.step_time_s
