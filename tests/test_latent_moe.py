"""LatentMoE (``MoESpec.latent_size``): routed experts work at a latent width, with a down and an
up projection (hidden x latent each) around them, and tokens travel between GPUs latent-wide
(Megatron-Bridge@067f987 ``training/utils/flop_utils.py`` ``moe_layer_flops`` and
``theoretical_memory_utils.py``). Hand-derived counts on a small model: h 1,024, 8 experts top-2
of width 512, latent 256, one shared expert of width 1,024, plain two-matrix MLPs."""
from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models import moe as moe_costs
from cost_models.compute import compute_rates
from cost_models.params import (expert_params_per_moe_layer, latent_projection_params, moe_block_params,
                                routed_expert_width)
from cost_models.serving_memory import weight_bytes_per_gpu
from hardware_specs.catalog import load_efficiency, load_gpu
from hardware_specs.errors import InputError
from model_specs.model_spec import ModelSpec, MoESpec

H, E, K, F, L, SHARED = 1024, 8, 2, 512, 256, 1024


def _model(latent: int) -> ModelSpec:
    return ModelSpec(name="latent-toy", num_layers=4, hidden_size=H, num_heads=8, num_kv_heads=8,
                     ffn_hidden_size=F, vocab_size=32000, seq_len=1024,
                     moe=MoESpec(num_experts=E, top_k=K, expert_ffn_hidden_size=F, num_shared_experts=1,
                                 shared_expert_ffn_hidden_size=SHARED, latent_size=latent))


LATENT, PLAIN = _model(L), _model(0)


def test_expert_width_and_projections():
    assert routed_expert_width(LATENT) == L and routed_expert_width(PLAIN) == H
    assert latent_projection_params(LATENT) == 2 * H * L == 524_288
    assert latent_projection_params(PLAIN) == 0


def test_parameters_of_a_latent_moe_block():
    routed = E * 2 * L * F                       # 2,097,152: experts latent x ffn, two matrices
    projections = 2 * H * L                      # 524,288
    shared = 2 * H * SHARED                      # 2,097,152
    router = H * E                               # 8,192
    assert expert_params_per_moe_layer(LATENT) == routed
    assert moe_block_params(LATENT) == routed + projections + shared + router == 4_726_784
    # a token uses K experts, the projections, the shared expert and the router
    assert moe_block_params(LATENT, active=True) == K * 2 * L * F + projections + shared + router
    # without the latent width the experts are h wide: 4x the routed weights, no projections
    assert moe_block_params(PLAIN) == E * 2 * H * F + shared + router


def test_flops_and_dispatch_bytes_of_one_latent_moe_block():
    rates = compute_rates(load_gpu("h100-sxm-80gb"), load_efficiency("hopper"), "bf16")
    tokens = 4096.0
    out = moe_costs.moe_mlp_costs(LATENT, rates, tokens, ep=1, etp=1)
    expected = (2 * tokens * E * H              # router
                + 2 * 2 * tokens * H * L        # down and up projections
                + 2 * tokens * K * 2 * L * F    # routed experts at the latent width
                + 2 * tokens * 2 * H * SHARED)  # shared expert at the hidden width
    assert float(out["gemm_flops_fwd"]) == pytest.approx(expected, rel=1e-12)
    # the rows go out latent-wide, 16-bit: tokens x top-k x latent x 2 bytes
    assert float(out["a2a_dispatch_buffer_bytes"]) == pytest.approx(tokens * K * L * 2)
    plain = moe_costs.moe_mlp_costs(PLAIN, rates, tokens, ep=1, etp=1)
    assert float(plain["a2a_dispatch_buffer_bytes"]) == pytest.approx(tokens * K * H * 2)


def test_dispatch_buffers_and_kept_activations_shrink_with_the_latent_width():
    plain = moe_costs.moe_dispatch_buffer_bytes(PLAIN, 1, 4096, 1, 1, 1)
    latent = moe_costs.moe_dispatch_buffer_bytes(LATENT, 1, 4096, 1, 1, 1)
    assert float(latent) == pytest.approx(float(plain) * L / H)
    kept_plain = moe_costs.moe_activation_bytes_per_layer(PLAIN, 1, 4096, 1, 1, 1, 1, 0)
    kept_latent = moe_costs.moe_activation_bytes_per_layer(LATENT, 1, 4096, 1, 1, 1, 1, 0)
    # rows x (h - latent) x 2 bytes less for the expert inputs and for the outputs before the
    # weighted sum, and the up projection's latent-wide input kept in addition
    rows = 4096 * K
    saved = rows * (H - L) * 2 + rows * (H - L) * 2 - 4096 * L * 2
    assert float(kept_plain - kept_latent) == pytest.approx(saved)


def test_serving_weights_count_latent_experts_and_whole_projections():
    """bf16 everywhere, one GPU: the weights differ by the routed experts' width and the
    projections, per MoE layer (4 layers)."""
    plain = weight_bytes_per_gpu(PLAIN, 1, 1, 1, 1, 1, "bf16", "bf16")
    latent = weight_bytes_per_gpu(LATENT, 1, 1, 1, 1, 1, "bf16", "bf16")
    per_layer = (E * 2 * H * F - E * 2 * L * F - 2 * H * L) * 2.0
    assert float(plain - latent) == pytest.approx(4 * per_layer)


def test_latent_size_is_checked_like_every_size():
    with pytest.raises(InputError, match="moe.latent_size"):
        replace(LATENT.moe, latent_size=-1)
    with pytest.raises(InputError, match="moe.latent_size"):
        replace(LATENT.moe, latent_size=2**30)


def test_a_latent_moe_model_trains_faster_than_its_hidden_width_twin():
    """At Nemotron 3 Super's MoE shape (h 4,096, 512 experts top-22 of width 2,688, latent 1,024)
    the latent experts cut the routed GEMMs and the all-to-all by 4x; on the toy shape above the
    two extra projections' kernels would cost more than they save."""
    from hardware_specs.catalog import load_cluster
    from simulator.parallel_config import ParallelConfig
    from simulator.simulate import simulate

    def big(latent):
        return ModelSpec(name="latent-super-shape", num_layers=8, hidden_size=4096, num_heads=32, num_kv_heads=2,
                         head_dim=128, ffn_hidden_size=2688, vocab_size=131072, seq_len=8192,
                         moe=MoESpec(num_experts=512, top_k=22, expert_ffn_hidden_size=2688, num_shared_experts=1,
                                     shared_expert_ffn_hidden_size=5376, latent_size=latent))
    cluster = load_cluster("dgx-h100")
    config = ParallelConfig(dp=16, ep=16, tp=1, pp=1, micro_batch=1, global_batch=64, zero_stage=1,
                            recompute="full")
    latent, plain = simulate(big(1024), cluster, config), simulate(big(0), cluster, config)
    assert 0 < latent.step_time_s < 0.45 * plain.step_time_s          # 2.97 s against 7.33 s
    assert latent.memory_bytes < plain.memory_bytes
    # the all-to-all carries latent-wide rows: a quarter of the bytes (its latency terms aside)
    ratio = latent.time_breakdown_s["ep_comm_exposed_s"] / plain.time_breakdown_s["ep_comm_exposed_s"]
    assert ratio == pytest.approx(1024 / 4096, rel=0.02)


def test_a_latent_moe_yaml_serves_from_the_cli(tmp_path):
    """``moe: latent_size:`` in a model file reaches the serving simulator: decode reads fewer
    expert bytes than the hidden-width twin, so TPOT is lower."""
    import json

    from click.testing import CliRunner

    from paraplan.cli import main
    body = ("num_layers: 4\nhidden_size: 1024\nnum_heads: 8\nffn_hidden_size: 512\nvocab_size: 32000\n"
            "moe: {num_experts: 8, top_k: 2, expert_ffn_hidden_size: 512, num_shared_experts: 1, "
            "shared_expert_ffn_hidden_size: 1024, latent_size: %d}\n")
    tpot = {}
    for latent in (0, L):
        path = tmp_path / f"toy-{latent}.yaml"
        path.write_text(body % latent)
        res = CliRunner().invoke(main, ["serve", "simulate", "-m", str(path), "-s", "dgx-h100", "--tp", "1",
                                        "--batch", "64", "--precision", "bf16", "--json"])
        assert res.exit_code == 0, res.output
        tpot[latent] = json.loads(res.stdout)["tpot_ms"]
    assert 0 < tpot[L] < tpot[0]


def test_the_megatron_export_refuses_a_latent_moe_model():
    from paraplan.exports import megatron
    from paraplan.exports.common import plan_fields
    row = dict(model=LATENT, seq_len=1024, dp=4, tp=1, pp=1, ep=4, micro_batch=1, global_batch=64, zero_stage=1,
               recompute="full")
    err = megatron.refusal(plan_fields(row))
    assert err is not None and err.field == "model" and "LatentMoE" in err.message
    assert megatron.refusal(plan_fields({**row, "model": PLAIN})) is None
