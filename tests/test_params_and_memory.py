"""Parameter counts and memory terms against published numbers and hand derivations."""
import numpy as np
import pytest

from cost_models import memory, params
from model_specs import ModelSpec

GIB = 2**30


def gpt(layers, hidden, heads):
    return ModelSpec(f"gpt-{layers}x{hidden}", layers, hidden, heads, heads, 4 * hidden, 51200, 2048)


def test_gpt3_175b_parameter_count():
    # Brown et al. 2020: 96 layers, d_model 12288, 96 heads, vocab 50257 -> "175B"
    m = ModelSpec("gpt3-175b", 96, 12288, 96, 96, 4 * 12288, 50257, 2048)
    # 12 l h^2 (+ 2h norms per layer) + V h (tied head)
    expected = 96 * (12 * 12288**2 + 2 * 12288) + 50257 * 12288 * 2 + 12288
    assert params.total_params(m) == expected
    assert params.total_params(m) / 1e9 == pytest.approx(174.6 + 0.6, abs=0.3)  # untied head adds 0.6B


def test_gated_mlp_has_three_matrices():
    assert params.mlp_params(4096, 14336, gated=True) == 3 * 4096 * 14336
    assert params.mlp_params(4096, 16384, gated=False) == 2 * 4096 * 16384


def test_gqa_shrinks_kv_projections():
    mha = ModelSpec("a", 1, 8192, 64, 64, 28672, 128000)
    gqa = ModelSpec("b", 1, 8192, 64, 8, 28672, 128000)
    # Q and O are h*h each; K and V shrink from h*h to h*(8*128) each
    assert params.attention_params(mha) - params.attention_params(gqa) == 2 * 8192 * (8192 - 1024)


def test_zero3_bytes_per_gpu_are_18_bytes_over_dp():
    p = 70e9
    w, g, o = memory.model_state_bytes(p, 3, 64)
    assert w + g + o == pytest.approx(18 * p / 64)
    w0, g0, o0 = memory.model_state_bytes(p, 0, 64)
    assert (w0, g0, o0) == (2 * p, 4 * p, 12 * p)
    w1, g1, o1 = memory.model_state_bytes(p, 1, 64)
    assert (w1, g1, o1) == (2 * p, 4 * p, 12 * p / 64)


def test_korthikanti_activation_formula_per_layer():
    # s b h (34 + 5 a s / h) bytes per layer without parallelism (Korthikanti et al. 2022, eq. 1)
    m = gpt(1, 6144, 64)
    b, s, h, a = 4, 2048, 6144, 64
    got = memory.activation_bytes_per_layer(m, b, s, 1, 1, False, 0, flash_attention=False)
    assert got == pytest.approx(s * b * h * (34 + 5 * a * s / h))
    # with TP t and sequence parallelism everything divides by t; selective drops 5as/h
    got = memory.activation_bytes_per_layer(m, b, s, 8, 1, True, 1, flash_attention=False)
    assert got == pytest.approx(s * b * h * 34 / 8)
    # full recompute keeps the 2sbh layer input
    got = memory.activation_bytes_per_layer(m, b, s, 8, 1, False, 2, flash_attention=False)
    assert got == pytest.approx(2 * s * b * h)


# Korthikanti et al. 2022, Figure 1 (GiB per GPU, first pipeline stage, fp16, no optimizer
# sharding): (model, tp, pp, vpp, mbs) -> (states, activations no recompute, SP + selective)
FIGURE_1 = {
    "22B": ((48, 6144, 64), 8, 1, 1, 4, (45.56, 59.25, 9.56)),
    "175B": ((96, 12288, 96), 8, 8, 3, 1, (45.56, 66.84, 12.35)),
    "530B": ((105, 20480, 128), 8, 35, 3, 1, (31.64, 114.02, 23.08)),
    "1T": ((128, 25600, 160), 8, 64, 1, 1, (32.96, 131.25, 26.56)),
}


@pytest.mark.parametrize("name", list(FIGURE_1))
def test_korthikanti_figure_1_memory_within_2_percent(name):
    (layers, hidden, heads), tp, pp, vpp, mbs, (states, act_none, act_sel) = FIGURE_1[name]
    m = gpt(layers, hidden, heads)
    layers_stage = layers // pp
    # transformer-layer weights + fp32 grads + Adam states: 18 bytes per parameter
    layer_params = layers_stage * 12 * hidden**2 / tp
    w, g, o = memory.model_state_bytes(layer_params, 0, 1)
    assert (w + g + o) / GIB == pytest.approx(states, rel=0.02)
    in_flight = memory.in_flight_microbatches(pp, vpp, 10 * pp)
    none = memory.activation_bytes_per_layer(m, mbs, 2048, tp, 1, False, 0, flash_attention=False)
    sel = memory.activation_bytes_per_layer(m, mbs, 2048, tp, 1, True, 1, flash_attention=False)
    assert none * layers_stage * in_flight / GIB == pytest.approx(act_none, rel=0.02)
    assert sel * layers_stage * in_flight / GIB == pytest.approx(act_sel, rel=0.02)


def test_in_flight_microbatches_per_schedule():
    assert memory.in_flight_microbatches(8, 1, 64) == 8            # 1F1B holds p
    assert memory.in_flight_microbatches(8, 1, 4) == 4             # fewer micro-batches than stages
    assert memory.in_flight_microbatches(8, 1, 64, True) == 64     # GPipe holds all m
    assert memory.in_flight_microbatches(8, 2, 64) == pytest.approx(8 * (1 + 7 / 16))


def test_tp_beyond_the_kv_heads_holds_whole_replicated_heads():
    """Llama-3.1-405B (h 16,384, 128 query heads, 8 KV heads of 128): at tp 16 a rank holds 8
    query heads and one whole KV head (shared with the other rank of its query group), not half
    of one. Per layer and rank: the K and V projections add 2 x 16,384 x 128 x (1 - 8/16) =
    2,097,152 weights beyond the 1/tp share; the fused QKV GEMM is 8 x 128 + 2 x 128 = 1,280
    wide (1,152 with half heads); of 8,192 tokens at 16 bits the layer keeps the queries and
    values, 8,192 x (2 x 8 x 128 + 2 x 128) = 18,874,368 bytes, and the keys, 8,192 x 2 x 128 =
    2,097,152 (Korthikanti et al. 2022's Q, K, V terms). At tp 8 nothing is replicated."""
    from cost_models.layer_costs import attention_gemm_shapes
    from model_specs.catalog import load_model
    model = load_model("llama3.1-405b")
    assert params.kv_heads_per_tp_rank(8, 16) == 1.0 and params.kv_heads_per_tp_rank(8, 4) == 2.0
    assert float(params.replicated_kv_params_per_tp_rank(model, 16)) == 2_097_152
    assert float(params.replicated_kv_params_per_tp_rank(model, 8)) == 0.0
    (qkv_n, qkv_k), _ = attention_gemm_shapes(model, np.array(16.0))
    assert (float(qkv_n), float(qkv_k)) == (1280.0, 16384.0)
    terms = memory.activation_terms(model, micro_batch=1, seq_len=8192, tp=16, cp=1, sp=True)
    assert (float(terms["qkv"]), float(terms["attn_k"])) == (8192 * (2 * 8 * 128 + 2 * 128), 8192 * 2 * 128)
