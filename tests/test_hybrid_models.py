"""Hybrid Mamba-Transformer models: the layer pattern, the Mamba-2 cost model, the Nemotron 3 Nano
preset against its published size and its source's FLOP count, and stage layouts that hold the
pattern's own layers."""
from dataclasses import replace

import numpy as np
import pytest

from cost_models import mamba
from cost_models.params import total_params, embedding_params
from hardware_specs.errors import InputError
from model_specs.catalog import load_model, model_from_dict
from model_specs.model_spec import MambaSpec, ModelSpec
from paraplan.validation.flops_conventions import megatron_core_model, megatron_core_model_causal
from paraplan.validation.published import read_runs
from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
from simulator.pipeline.schedules import ScheduleKind
from simulator.stage_layout import position_layers, position_moe_layers

#: a small hybrid: h 64; Mamba H 4 heads x P 16 (d_inner 64), N 8, G 2, K 4, Q 16
SMALL = ModelSpec(name="small-hybrid", num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden_size=128,
                  vocab_size=1000, seq_len=256, hybrid_pattern="M*M-",
                  mamba=MambaSpec(num_heads=4, head_dim=16, state_size=8, num_groups=2, conv_kernel=4, chunk_size=16))


def test_mamba_forward_flops_of_a_small_block_match_the_hand_count():
    """Per token: in_proj 2 h (2 d_inner + 2 G N + H) = 2*64*(128 + 32 + 4) = 20992; out_proj
    2 d_inner h = 8192; conv1d 2 K (d_inner + 2 G N) = 2*4*96 = 768; SSD 2QNG + 2QPH + 4NPH +
    2NPH/Q = 512 + 2048 + 2048 + 64 = 4672. Sum 34624 per token; 10 tokens 346240; TP 2 halves it."""
    assert float(mamba.ssd_scan_flops(SMALL, 1.0)) == 4672.0
    assert float(mamba.mamba_forward_flops(SMALL, 10.0)) == 346240.0
    assert float(mamba.mamba_forward_flops(SMALL, 10.0, tp=2.0)) == 173120.0


def test_mamba_params_of_a_small_block_match_the_hand_count():
    """in_proj 64*164 = 10496, conv1d 96*(4+1) = 480, A_log / D / dt_bias 3*4 = 12, gated norm 64,
    out_proj 64*64 = 4096: 15148."""
    assert mamba.mamba_params(SMALL) == 15148


def test_nemotron_3_nano_preset_has_its_published_size():
    """Megatron-Bridge docs / the Hugging Face card: 31.6B parameters in total, about 3.5B active
    per token (128 experts top-6 + 1 shared); 23 Mamba-2, 6 attention and 23 MoE layers."""
    m = load_model("Nemotron_3_Nano")          # the name Megatron-Bridge's tables use
    assert m.hybrid_counts() == {"mamba": 23, "attention": 6, "mlp": 0, "moe": 23}
    assert total_params(m) == pytest.approx(31.6e9, rel=0.005)
    assert total_params(m, active=True) == pytest.approx(3.5e9, rel=0.03)
    # without the input table (a lookup): the "A3B" of its name
    assert total_params(m, active=True) - embedding_params(m) == pytest.approx(3.2e9, rel=0.03)


def test_hybrid_flop_convention_is_megatron_bridges_count_and_matches_its_rows():
    """Megatron-Bridge's hybrid_flops per token for Nemotron 3 Nano (d_in taken as 2h = 5376):
    Mamba 2*2688*(2*5376 + 2*8*128 + 64) + 7*5376*128 + 2*5376*2688 = 102875136, x23;
    attention 4*2688*4096*(1 + 2/32) + 2*4096*8192 = 113901568, x6; MoE 4*2688*(6*1856 + 3712)
    = 159645696, x23; logits 2*2688*131072 = 704643072: 7426031616 forward, x3 = 22278094848."""
    m = load_model("nemotron-3-nano")
    assert megatron_core_model_causal(m, 1.0) / m.seq_len == pytest.approx(22278094848.0, rel=1e-12)
    # the non-causal form counts the score term twice
    assert megatron_core_model(m, 1.0) - megatron_core_model_causal(m, 1.0) == pytest.approx(
        3.0 * 6 * 2 * 4096 * 8192 * 8192, rel=1e-12)
    # the published rows: TFLOP/s over tokens/s of each run is this count to within 1%
    df = read_runs(validation_file(PUBLISHED_RUNS))
    rows = df[df.model.fillna("").str.startswith("Nemotron_3_Nano")]
    rate = rows.pivot_table(index="run_id", columns="measured_metric", values="measured_value")
    per_token = rate["tflops_per_gpu"] * 1e12 / rate["tokens_per_s_per_gpu"]
    assert len(per_token) >= 10
    assert (per_token / 22278094848.0 - 1).abs().max() < 0.01


def test_hybrid_flop_convention_counts_latent_moe_experts_at_the_latent_width():
    """Nemotron 3 Super (LatentMoE, latent 1024) by Megatron-Bridge's hybrid_flops per token
    (``moe_layer_flops`` with moe_latent_size, flop_utils.py@067f987): attention
    4*4096*4096*(1 + 2/32) + 2*4096*8192 = 138412032, x8; Mamba (d_in 2h = 8192)
    2*4096*(2*8192 + 2*8*128 + 128) + 7*8192*128 + 2*8192*4096 = 226492416, x40; MoE routed
    4*1024*22*2688 = 242221056 + projections 4*4096*1024 = 16777216 + shared 4*4096*5376 =
    88080384, x40; logits 2*4096*131072 = 1073741824: 25123880960 forward, x3 = 75371642880
    (the count at the hidden width, 160.6e9 a token, was 2.1x this)."""
    m = load_model("nemotron-3-super-120b-a12b")
    assert m.moe.latent_size == 1024
    assert megatron_core_model_causal(m, 1.0) / m.seq_len == pytest.approx(75371642880.0, rel=1e-12)


def test_gpt_flop_convention_counts_latent_moe_experts_at_the_latent_width():
    """Megatron-LM's num_floating_point_operations (training.py at d98e8a64dd) with
    moe_latent_size r: 3 x 2 x h x (k f e r/h + 2 r) a token per MoE layer in place of
    3 x 2 x h x k f e, e = 3 for SwiGLU. Mixtral-8x7B (h 4096, top-2 of 14336, SwiGLU,
    32 MoE layers) at r = 1024: 6 * 32 * 4096 * (2*14336*3*(1024/4096 - 1) + 2*1024)
    = -49123688448 FLOPs a token (4 h r forward for the two projections, as the hybrid count)."""
    import dataclasses
    m = load_model("mixtral-8x7b")
    latent = dataclasses.replace(m, moe=dataclasses.replace(m.moe, latent_size=1024))
    for count in (megatron_core_model, megatron_core_model_causal):
        assert (count(latent, 1.0) - count(m, 1.0)) / m.seq_len == pytest.approx(-49123688448.0, rel=1e-12)


def test_pipeline_stages_hold_the_patterns_own_moe_layers():
    """Nano on 4 stages holds 13 layers each; the E layers among pattern[0:13], [13:26], ... are
    5, 6, 6, 6 (MEMEM*EMEMEM* holds 5; counted from the pattern string)."""
    m = load_model("nemotron-3-nano")
    lay = position_layers(ScheduleKind.ONE_F_ONE_B, 4, 1, m.num_layers)
    assert lay.tolist() == [[13, 13, 13, 13]]
    expected = [m.hybrid_pattern[i:i + 13].count("E") for i in range(0, 52, 13)]
    assert expected == [5, 6, 6, 6]
    assert position_moe_layers(m, lay).tolist() == [expected]
    assert m.is_moe_layer().sum() == 23


@pytest.mark.parametrize("change, field", [
    (dict(hybrid_pattern="M*Mx"), "model.hybrid_pattern"),
    (dict(hybrid_pattern="M*M"), "model.hybrid_pattern"),
    (dict(mamba=None), "model.mamba"),
    (dict(hybrid_pattern="M*ME"), "model.moe"),
    (dict(hybrid_pattern="", mamba=MambaSpec(4, 16, 8, 2)), "model.mamba"),
])
def test_bad_hybrid_patterns_are_one_line_input_errors_naming_the_field(change, field):
    with pytest.raises(InputError) as err:
        replace(SMALL, **change)
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_mamba_sizes_are_checked_on_construction_and_in_preset_files():
    with pytest.raises(InputError) as err:
        MambaSpec(num_heads=6, head_dim=16, state_size=8, num_groups=4)
    assert err.value.field == "mamba.num_groups"
    with pytest.raises(InputError) as err:
        MambaSpec(num_heads=4, head_dim=0, state_size=8, num_groups=2)
    assert err.value.field == "mamba.head_dim"
    data = dict(num_layers=2, hidden_size=64, num_heads=4, ffn_hidden_size=128, vocab_size=100,
                hybrid_pattern="M*", mamba={"num_heads": 4, "head_dim": 16, "state_size": 8})
    with pytest.raises(InputError) as err:
        model_from_dict(data, default_name="x")
    assert err.value.field == "model x.mamba.num_groups"


def test_mamba_block_time_is_finite_and_grows_with_tokens():
    from hardware_specs.catalog import load_cluster
    from simulator.simulate import efficiency_for_cluster
    from cost_models.compute import compute_rates
    cl = load_cluster("dgx-h100")
    rates = compute_rates(cl.gpu, efficiency_for_cluster(cl), "bf16")
    m = load_model("nemotron-3-nano")
    a = mamba.mamba_block_costs(m, rates, np.array([8192.0, 16384.0]), 1.0, False)
    for key in ("gemm_fwd_s", "core_fwd_s", "core_bwd_s", "elem_fwd_s"):
        assert np.all(np.isfinite(a[key])) and a[key][1] > a[key][0] > 0
    # the SSD scan's FLOPs are its own; its time is the measured kernel speed's (paper anchor)
    assert float(a["core_flops_fwd"][0]) == pytest.approx(float(mamba.ssd_scan_flops(m, 8192.0)))


def test_ssd_scan_runs_at_the_portable_kernel_share_of_the_attention_rate():
    """The SSD kernels are Triton kernels: at share s of the fused attention rate, a compute-bound
    scan's matrix time is 1/s times the share-1 time (here a long scan, far above its HBM
    floor), and the layer model uses the GPU's portable-kernel share (0.37 on B200)."""
    from hardware_specs.catalog import load_cluster
    from simulator.simulate import efficiency_for_cluster
    from cost_models.compute import attention_time_s, compute_rates
    cl = load_cluster("dgx-b200")
    assert cl.gpu.sync_mma_peak_fraction == pytest.approx(1 / 2.7, abs=0.005)
    rates = compute_rates(cl.gpu, efficiency_for_cluster(cl), "bf16")
    m = load_model("nemotron-3-nano")
    tokens = np.array([65536.0])
    full = mamba.mamba_block_costs(m, rates, tokens, 1.0, False, 1.0)
    part = mamba.mamba_block_costs(m, rates, tokens, 1.0, False, 0.37)
    eq = mamba.ssd_attention_equivalent_flops(m, tokens)
    f1, b1 = attention_time_s(eq, rates, mma_share=1.0)
    f37, b37 = attention_time_s(eq, rates, mma_share=0.37)
    assert float(full["core_fwd_s"][0]) == pytest.approx(float(f1[0]))
    assert float(part["core_fwd_s"][0]) == pytest.approx(float(f37[0]))
    k = rates.kernel_overhead_s
    assert (float(part["core_fwd_s"][0]) - k) == pytest.approx((float(full["core_fwd_s"][0]) - k) / 0.37)
    assert (float(part["core_bwd_s"][0]) - 2 * k) == pytest.approx((float(full["core_bwd_s"][0]) - 2 * k) / 0.37)
    # everything else in the block is the same kernels at the same rates
    for key in ("gemm_fwd_s", "gemm_dgrad_s", "gemm_wgrad_s", "elem_fwd_s", "elem_bwd_s"):
        assert float(part[key][0]) == float(full[key][0])


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "torchtitan"])
def test_exports_refuse_hybrid_mamba_plans_in_one_line(framework):
    from paraplan import exports
    row = dict(model="nemotron-3-nano", seq_len=8192, dp=8, tp=1, pp=1, ep=8, micro_batch=1, global_batch=64,
               zero_stage=1, recompute="none")
    with pytest.raises(InputError) as err:
        exports.emit(row, framework)
    assert err.value.field == "model"
    assert "hybrid Mamba models: not supported by this export" in str(err.value)
    assert "\n" not in str(err.value)
    assert not exports.can_run(row, framework)


def test_serving_a_hybrid_model_is_refused_in_one_line():
    from click.testing import CliRunner
    from paraplan.cli import main
    result = CliRunner().invoke(main, ["serve", "simulate", "--model", "nemotron-3-nano", "--system", "dgx-h100",
                                       "--tp", "8", "--isl", "1024", "--osl", "256", "--batch", "8"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: model: ") and "hybrid Mamba model" in lines[0]
