"""Memory per pipeline stage against hand derivations: partial and per-stage recomputation,
named-op recomputation, FP8-stored GEMM inputs, the busiest stage, and the time partial
recomputation costs.

The hand-checked model is a GPT-style layer (plain MLP f = 4h, multi-head attention, dropout)
at tp = 1 without sequence parallelism, with fused attention: per token and layer it keeps
34h + 4a bytes (Korthikanti et al. 2022, eq. 1 less the 5as/h score matrix flash attention
does not store, plus its fp32 log-sum-exp per head), and 2h when recomputed in full.
"""
from __future__ import annotations

import numpy as np
import pytest

from cost_models import params
from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs import ModelSpec
from model_specs.catalog import load_model
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate
from simulator.step_model import evaluate

H, A, S = 1024, 16, 2048
MODEL = ModelSpec("gpt-8x1024", 8, H, A, A, 4 * H, 32000, S)
CLUSTER = load_cluster("dgx-h100")
KEPT = S * (34 * H + 4 * A)          # bytes one layer keeps per micro-batch (tokens = S)
INPUT = S * 2 * H                    # what a fully recomputed layer keeps


def stage_acts(config, stage):
    return simulate(MODEL, CLUSTER, config).stage_memory[stage]["parts_bytes"]


def cfg(**kw):
    base = dict(dp=1, pp=2, micro_batch=1, global_batch=8, flash_attention=True, cuda_graphs=True)
    base.update(kw)
    return ParallelConfig(**base)


def test_no_recomputation_keeps_34h_plus_4a_per_token_and_layer():
    parts = stage_acts(cfg(), 0)
    # 1F1B: stage 0 of 2 holds 2 micro-batches of its 4 layers
    assert parts["activations_bytes"] == pytest.approx(2 * 4 * KEPT, rel=1e-12)
    assert parts["recompute_buffers_bytes"] == 0


def test_recomputing_one_layer_per_chunk_keeps_its_input_and_adds_no_buffer():
    parts = stage_acts(cfg(recompute="full", recompute_num_layers=1), 0)
    assert parts["activations_bytes"] == pytest.approx(2 * (3 * KEPT + INPUT), rel=1e-12)
    # the chunk's other 3 layers have freed more than the recomputed layer brings back
    assert parts["recompute_buffers_bytes"] == 0
    last = stage_acts(cfg(recompute="full", recompute_num_layers=1), 1)
    assert last["activations_bytes"] == pytest.approx(1 * (3 * KEPT + INPUT), rel=1e-12)


def test_recomputing_every_layer_keeps_inputs_and_one_layer_less_its_input():
    parts = stage_acts(cfg(recompute="full"), 0)
    assert parts["activations_bytes"] == pytest.approx(2 * 4 * INPUT, rel=1e-12)
    assert parts["recompute_buffers_bytes"] == pytest.approx(KEPT - INPUT, rel=1e-12)
    assert stage_acts(cfg(recompute="full", recompute_num_layers=4), 0) == parts


def test_per_stage_decrement_recomputes_fewer_layers_on_later_stages():
    # NeMo's activations_checkpoint_layers_per_pipeline: stage s recomputes max(N - s k, 0)
    config = cfg(recompute="full", recompute_num_layers=3, recompute_layers_decrement=2)
    assert stage_acts(config, 0)["activations_bytes"] == pytest.approx(2 * (1 * KEPT + 3 * INPUT), rel=1e-12)
    assert stage_acts(config, 1)["activations_bytes"] == pytest.approx(1 * (3 * KEPT + 1 * INPUT), rel=1e-12)


def test_uniform_groups_keep_one_input_per_group_and_recompute_the_group_at_once():
    parts = stage_acts(cfg(recompute="full", recompute_num_layers=2, recompute_method="uniform"), 0)
    assert parts["activations_bytes"] == pytest.approx(2 * 2 * INPUT, rel=1e-12)
    assert parts["recompute_buffers_bytes"] == pytest.approx(2 * KEPT - INPUT, rel=1e-12)


@pytest.mark.parametrize("modules, kept_per_token", [
    (("core_attn",), 34 * H),                          # the fp32 log-sum-exp (4a) is not kept
    (("layernorm",), 30 * H + 4 * A),                  # the QKV and MLP inputs (2 x 2h) are not kept
    (("mlp_act",), 26 * H + 4 * A),                    # the second GEMM's input (2f = 8h)
    (("core_attn", "layernorm", "mlp_act"), 22 * H),
    (("mlp",), 18 * H + 4 * A),                        # the whole MLP: its first GEMM's output (8h) too
    (("mlp", "mlp_act"), 18 * H + 4 * A),              # the activation is part of the MLP
])
def test_named_op_recomputation_drops_exactly_its_tensors(modules, kept_per_token):
    parts = stage_acts(cfg(pp=1, recompute_modules=modules), 0)
    assert parts["activations_bytes"] == pytest.approx(8 * S * kept_per_token, rel=1e-12)


def test_fp8_recipes_keep_gemm_inputs_in_one_byte_and_two_weight_copies():
    # the QKV / MLP inputs (4h -> 2h), the output projection's input (2h -> h) and the second
    # MLP GEMM's input (8h -> 4h) are kept quantised: 27h + 4a per token
    config = cfg(pp=1, dtype="fp8")
    report = simulate(MODEL, CLUSTER, config)
    parts = report.stage_memory[0]["parts_bytes"]
    assert parts["activations_bytes"] == pytest.approx(8 * S * (27 * H + 4 * A), rel=1e-12)
    layer = params.dense_layer_params(MODEL)
    ends = params.embedding_params(MODEL) + params.lm_head_params(MODEL)
    # 16-bit weights + FP8 row-wise and transposed copies (Hopper) on the layers, 16-bit on the ends
    assert parts["weights_bytes"] == pytest.approx(8 * layer * (2 + 2) + ends * 2, rel=1e-12)


def test_partial_recomputation_costs_its_share_of_full_recomputation():
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100")
    eff = efficiency_for_cluster(cluster)
    base = dict(dp=4, tp=2, pp=4, micro_batch=1, global_batch=32, sequence_parallel=True, recompute="full")
    full = evaluate(model, cluster, eff, ConfigBatch.from_configs([ParallelConfig(**base)]))
    part = evaluate(model, cluster, eff, ConfigBatch.from_configs([ParallelConfig(recompute_num_layers=2, **base)]))
    # 8 layers per stage: 2 of them recomputed, on the busiest stage and in the whole job's FLOPs
    assert part["recompute_s"][0] == pytest.approx(full["recompute_s"][0] * 2 / 8, rel=1e-9)
    extra_full = full["hardware_flops"][0] - full["model_flops"][0]
    extra_part = part["hardware_flops"][0] - part["model_flops"][0]
    assert extra_part == pytest.approx(extra_full * 2 / 8, rel=1e-9)
    assert part["step_time_s"][0] < full["step_time_s"][0]
    assert part["memory_bytes"][0] > full["memory_bytes"][0]


def test_the_busiest_stage_decides_llama_405b_uneven_split_peaks_on_stage_1():
    # 7, 8 x 14, 7 layers under 1F1B: stage 0 holds 16 micro-batches of 7 layers (112), stage 1
    # 15 of 8 (120), so stage 1 keeps 120/112 of stage 0's activations and is the GPU's peak
    model = load_model("llama3.1-405b")
    config = ParallelConfig(dp=64, tp=8, pp=16, global_batch=2048, first_stage_layers=7, last_stage_layers=7,
                            sequence_parallel=True, zero_stage=1)
    report = simulate(model, load_cluster("dgx-h100"), config)
    acts = [s["parts_bytes"]["activations_bytes"] for s in report.stage_memory]
    assert acts[1] / acts[0] == pytest.approx(120 / 112, rel=1e-12)
    assert report.extras["memory_stage"] == 1
    assert report.memory_bytes == pytest.approx(max(s["memory_bytes"] for s in report.stage_memory), rel=1e-12)
    assert sum(report.memory_breakdown_bytes.values()) == pytest.approx(report.memory_bytes, rel=1e-12)


def test_bf16_adam_moments_keep_8_bytes_of_optimizer_state_per_parameter():
    # fp32 master weight (4) + two BF16 moments (2 + 2): DeepSeek-V3 report, section 3.3.2
    fp32 = stage_acts(cfg(pp=1), 0)["optimizer_bytes"]
    bf16 = stage_acts(cfg(pp=1, optimizer_moment_bytes=2), 0)["optimizer_bytes"]
    assert bf16 == pytest.approx(fp32 * 8 / 12, rel=1e-12)


def test_simulate_json_and_table_carry_the_memory_of_every_stage():
    import json

    from click.testing import CliRunner

    from paraplan.cli import main
    args = ["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "--gpus", "16", "--pp", "4", "--global-batch", "16",
            "--recompute", "full", "--recompute-num-layers", "2"]
    out = CliRunner().invoke(main, args + ["--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    stages = data["stage_memory"]
    assert [s["stage"] for s in stages] == [0, 1, 2, 3]
    for s in stages:
        assert sum(s["parts_bytes"].values()) == pytest.approx(s["memory_bytes"], rel=1e-12)
    assert data["memory_bytes"] == pytest.approx(max(s["memory_bytes"] for s in stages), rel=1e-12)
    table = CliRunner().invoke(main, args).stdout
    assert "memory per GPU by pipeline stage" in table and "in_flight" in table


def _fits_80gb(report):
    # fits the device with the headroom a run keeps (simulate's default: 5% of HBM)
    from simulator.headroom import fits
    return bool(fits(report.memory_bytes, report.hbm_bytes))


def test_llama_405b_published_layout_fits_with_two_recomputed_layers_per_stage_and_not_without():
    # Llama 3 paper (arXiv 2407.21783, section 3.3.2): 8,192 H100 at TP 8, PP 16, DP 64, sequence 8192,
    # first and last stages one layer short; with 2 of 8 layers recomputed per stage it fits,
    # with selective recomputation alone stage 1's 15 in-flight micro-batches do not
    model, cluster = load_model("llama3.1-405b"), load_cluster("dgx-h100")
    base = dict(dp=64, tp=8, pp=16, global_batch=2048, first_stage_layers=7, last_stage_layers=7,
                sequence_parallel=True, zero_stage=1)
    partial = simulate(model, cluster, ParallelConfig(recompute="full", recompute_num_layers=2, **base))
    selective = simulate(model, cluster, ParallelConfig(recompute="selective", **base))
    full = simulate(model, cluster, ParallelConfig(recompute="full", **base))
    assert _fits_80gb(partial) and not _fits_80gb(selective)
    assert partial.extras["memory_stage"] == 1
    assert partial.step_time_s < full.step_time_s
    # recomputing 2 of 8 layers costs a quarter of what recomputing all 8 does on the busiest stage
    assert partial.time_breakdown_s["recompute_s"] == pytest.approx(full.time_breakdown_s["recompute_s"] / 4, rel=1e-9)


def test_deepseek_v3_dualpipe_layout_fits_with_its_memory_features_and_not_with_operator_recompute_alone():
    # DeepSeek-V3 report (arXiv 2412.19437, sections 3.2-3.3): 2,048 H800, PP 16 DualPipe, EP 64,
    # ZeRO-1, FP8 GEMMs, BF16 Adam moments, RMSNorm / MLA up-projection / SwiGLU recomputed
    model, cluster = load_model("deepseek-v3"), load_cluster("h800-node")
    base = dict(dp=128, pp=16, ep=64, schedule="dualpipe", uneven_layers=True, zero_stage=1, dtype="fp8",
                global_batch=15360, optimizer_moment_bytes=2)
    ops = simulate(model, cluster, ParallelConfig(recompute="selective",
                                                  recompute_modules="layernorm,mla_up_proj,mlp_act", **base))
    fitted = simulate(model, cluster, ParallelConfig(recompute="full", recompute_num_layers=2,
                                                     recompute_modules="layernorm,mla_up_proj,mlp_act,moe_dispatch",
                                                     **base))
    assert not _fits_80gb(ops) and _fits_80gb(fitted)
    assert fitted.memory_bytes < ops.memory_bytes


def test_the_planners_total_only_memory_is_the_total_of_the_memory_by_part():
    # the planner's memory phase skips the parts (``by_part=False``): every key it keeps must be
    # the very number of the full call, with the search and the end-stage drop on
    from simulator.step_model import memory_parts
    configs = [cfg(pp=p, dp=d, zero_stage=z, recompute=r, micro_batch=m, global_batch=16)
               for p in (1, 2, 4) for d in (1, 2) for z in ((0, 1, 3) if d > 1 else (0,))
               for r in ("none", "selective", "full") for m in (1, 2)]
    batch = ConfigBatch.from_configs(configs)
    eff = efficiency_for_cluster(CLUSTER)
    full = memory_parts(MODEL, CLUSTER, eff, batch)
    limit = float(np.median(full["memory_bytes"]))
    kw = dict(fit_limit_bytes=limit, drop_over_bytes=limit)
    whole = memory_parts(MODEL, CLUSTER, eff, batch, **kw)
    total = memory_parts(MODEL, CLUSTER, eff, batch, by_part=False, **kw)
    assert np.isfinite(whole["memory_bytes"]).any() and not np.isfinite(whole["memory_bytes"]).all()
    for key in set(whole) - {"memory_stage", "weights_bytes", "gradients_bytes", "optimizer_bytes",
                             "activations_bytes", "logits_bytes", "recompute_buffers_bytes",
                             "offload_buffers_bytes", "moe_dispatch_bytes", "zero3_buffers_bytes", "allocator_bytes"}:
        np.testing.assert_array_equal(np.broadcast_to(total[key], np.shape(whole[key])), whole[key], err_msg=key)


def test_recomputing_the_moe_block_keeps_only_what_precedes_it_and_replays_its_forward():
    """Megatron's ``moe`` module checkpoints the whole MoE layer on its input (the pre-MLP norm's
    output, which the layer keeps anyway): the routed experts' tensors and the shared experts'
    MLP tensors go, and backward runs the block's forward again, all-to-all included. ``mlp``
    leaves an MoE layer alone (it is Megatron's dense-MLP module)."""
    from cost_models import memory, moe as moe_costs
    from simulator.stage_activations import layer_activation_bytes
    model = load_model("qwen3-30b-a3b")
    args = ("bf16", 1, 1, 1, False, True, 8, 1, 1.0)     # dtype, mbs, tp, cp, sp | flash, ep, etp, imbalance
    none = layer_activation_bytes(model, *args[:5], 0, *args[5:], 0)
    moe_bit, mlp_bit = memory.MODULE_BITS["moe"], memory.MODULE_BITS["mlp"]
    whole = layer_activation_bytes(model, *args[:5], 1, *args[5:], moe_bit)
    routed = moe_costs.moe_activation_bytes_per_layer(model, 1, model.seq_len, 1, 1, 8, 1, 0, 1.0, 0, 2.0)
    assert routed > 0
    assert model.moe.num_shared_experts == 0
    # Qwen3-30B-A3B has no shared experts; the MoE slot carries them as a width-1 MLP, whose two
    # tensors (gated fc1 output 4 bytes, activation output 2 bytes per token) go with the block
    placeholder = model.seq_len * (4 + 2)
    assert float(none["kept_moe"] - whole["kept_moe"]) == pytest.approx(float(routed) + placeholder, rel=1e-12)
    assert float(whole["kept_dense"]) == pytest.approx(float(none["kept_dense"]), rel=1e-12)
    dense_only = layer_activation_bytes(model, *args[:5], 1, *args[5:], mlp_bit)
    assert float(dense_only["kept_moe"]) == pytest.approx(float(none["kept_moe"]), rel=1e-12)

    cluster = load_cluster("dgx-h100")
    base = dict(dp=8, ep=8, micro_batch=1, global_batch=64, dtype="bf16")
    parts = {mods: simulate(model, cluster, ParallelConfig(recompute="selective", recompute_modules=mods, **base))
             for mods in ("mlp_act,moe_dispatch", "moe")}
    full = simulate(model, cluster, ParallelConfig(recompute="full", **base))
    rec = {k: r.time_breakdown_s["recompute_s"] for k, r in parts.items()}
    # the block's replay holds its activation and dispatch and its GEMMs and combine besides;
    # recomputing the whole layer also replays the attention
    assert rec["mlp_act,moe_dispatch"] < rec["moe"] < full.time_breakdown_s["recompute_s"]
    assert parts["moe"].memory_bytes < parts["mlp_act,moe_dispatch"].memory_bytes
