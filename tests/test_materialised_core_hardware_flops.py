"""Hardware FLOPs count what the attention core's kernel computes.

An unfused (materialised) core, Megatron-LM 2020-2022's ``baddbmm`` + softmax + ``bmm``, computes
the full s x s square of scores and masks the upper half afterwards; FlashAttention-style kernels
skip the masked tiles and compute the causal half. Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", section 6 and appendix A) count the full square:
model FLOPs 72 B s l h^2 (1 + s / (6 h) + V / (12 l h)), and selective recomputation of the core
adds its forward once more, 4 B s^2 h per layer. Model FLOPs (MFU) stay the implementation-
independent causal count; only hardware FLOPs (HFU) depend on the kernel.
"""
from dataclasses import replace

import pytest

from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
from paraplan.validation.published import read_runs, row_inputs
from simulator.simulate import simulate


def _row(rid):
    recs = read_runs(validation_file(PUBLISHED_RUNS)).to_dict("records")
    return row_inputs(next(r for r in recs if r["id"] == rid))


def _dims(inp):
    m, c = inp.model, inp.config
    return c.global_batch, m.seq_len, m.num_layers, m.hidden_size, m.vocab_size


@pytest.mark.parametrize("rid", ["KOR22-T5-22B-selsp:iter_time_s", "KOR22-T5-1T-selsp:iter_time_s"])
def test_a_materialised_core_counts_the_full_square_in_hardware_flops(rid):
    inp = _row(rid)
    assert inp.config.flash_attention is False and inp.config.selective_modules == ("core_attn",)
    B, s, l, h, V = _dims(inp)
    # Korthikanti et al. 2022: full-square model FLOPs, plus the recomputed core's forward
    # (QK^T and AV over the whole square: 2 x 2 B s^2 h per layer)
    full_square = 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h))
    hand_hw = full_square + 4.0 * B * s * s * h * l
    rep = simulate(inp.model, inp.cluster, inp.config)
    # 22B: 1.1634e15, 1T: 6.4540e18 (before: 1.1238e15, 6.3977e18, the core at its causal half)
    assert rep.hardware_flops == pytest.approx(hand_hw, rel=1e-9)
    # model FLOPs keep the causal convention: the core's half square, 2 B s^2 h a layer forward
    causal = 72.0 * B * s * l * h * h * (1.0 + s / (12.0 * h) + V / (12.0 * l * h))
    assert rep.model_flops == pytest.approx(causal, rel=1e-9)
    assert rep.hfu == pytest.approx(rep.mfu * hand_hw / causal, rel=1e-9)


def test_a_flash_core_counts_the_causal_half_in_hardware_flops():
    inp = _row("KOR22-T5-22B-selsp:iter_time_s")
    B, s, l, h, V = _dims(inp)
    flash = simulate(inp.model, inp.cluster, replace(inp.config, flash_attention=True))
    causal = 72.0 * B * s * l * h * h * (1.0 + s / (12.0 * h) + V / (12.0 * l * h))
    # flash skips the masked tiles: the recomputed core is its causal half, 2 B s^2 h a layer
    assert flash.model_flops == pytest.approx(causal, rel=1e-9)
    assert flash.hardware_flops == pytest.approx(causal + 2.0 * B * s * s * h * l, rel=1e-9)


def test_the_masked_scores_are_the_square_less_what_the_causal_count_has():
    """Per GPU (tp 2: 4 of 8 heads, head dim 128), 2 sequences of 2048: the materialised core
    computes 2 x tokens x s x heads x (128 + 128) forward FLOPs, the causal count half of it;
    with a 512-key window on every layer the kernel still computes the whole square, the causal
    count has 512 - 512 x 511 / (2 x 2048) = 448.125 keys a query."""
    from cost_models.compute import compute_rates
    from cost_models.layer_costs import attention_block_costs
    from hardware_specs import load_cluster
    from hardware_specs.catalog import efficiency_for_cluster
    from model_specs import ModelSpec
    cluster = load_cluster("dgx-a100-80gb")
    rates = compute_rates(cluster.gpu, efficiency_for_cluster(cluster), "bf16")
    m = ModelSpec("g", 2, 1024, 8, 8, 4096, 1000, 2048)
    tokens, s, heads = 4096.0, 2048.0, 4.0
    square = 2.0 * tokens * s * heads * 256.0
    for flash, want in ((False, square / 2.0), (True, 0.0)):
        got = attention_block_costs(m, rates, tokens, s, 2, False, flash_attention=flash)
        assert float(got["core_masked_flops_fwd"]) == pytest.approx(want, rel=1e-12)
    windowed = replace(m, sliding_window=512, sliding_window_layer_fraction=1.0)
    got = attention_block_costs(windowed, rates, tokens, s, 2, False, flash_attention=False)
    keys = 512.0 - 512.0 * 511.0 / (2.0 * s)
    assert float(got["core_masked_flops_fwd"]) == pytest.approx(square - 2.0 * tokens * keys * heads * 256.0,
                                                                 rel=1e-12)
