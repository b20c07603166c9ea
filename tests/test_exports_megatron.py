"""Megatron-LM exports against Megatron-LM's own interface (paraplan.exports.megatron).

Megatron-LM's training parser is not on the package index, so CI checks the exports against the
committed table ``megatron_flags.json`` (flags, types, choices, nargs and the validate_args /
TransformerConfig / micro-batch / rank-generator rules), which ``tools/megatron_flags.py``
generated from Megatron-LM main at a pinned commit, after running every export of the plan
matrix and one counterexample per rule through the real code. These tests hold the current
exports to that table and to what the real code answered.
"""
from __future__ import annotations

import shlex
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from paraplan.exports import matrix, megatron, megatron_table
from paraplan.exports.common import chunk_layers, plan_fields, stage_layer_counts
from paraplan.exports.megatron import layout_string, pipeline_layout_args
from simulator.layout_string import parse_layout
from simulator.pipeline.schedules import ScheduleKind
from simulator.stage_layout import position_layers

TABLE = megatron_table.table()
VERIFIED = {case["id"]: case for case in TABLE["verified"]["cases"]}


def flags_of(text: str) -> list[str]:
    """The argv of the emitted bash arrays, as bash would expand them."""
    argv = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("--"):
            argv += shlex.split(line)
    return argv


def env_of(text: str) -> dict[str, str]:
    return dict(line[len("export "):].split("=", 1) for line in text.splitlines() if line.startswith("export "))


def test_the_table_is_pinned_to_a_megatron_lm_main_commit_and_was_checked_against_the_real_code():
    src = TABLE["source"]
    assert src["repository"] == "NVIDIA/Megatron-LM" and src["ref"] == "main" and len(src["commit"]) == 40
    assert len(TABLE["flags"]) > 500 and len(TABLE["rules"]) >= 25
    assert "validate_args" in TABLE["verified"]["ran"] and "core_transformer_config_from_args" in TABLE["verified"]["ran"]
    assert megatron.release().startswith(f"Megatron-LM main @ {src['commit'][:12]}")


@pytest.mark.parametrize("name, row, refused", list(matrix.entries("megatron")), ids=[m[0] for m in matrix.MATRIX])
def test_every_matrix_export_passes_the_table_and_is_the_command_the_real_code_accepted(name, row, refused):
    if refused is not None:
        # a plan Megatron-LM cannot run as priced (torchtitan's per-operation checkpointing) is
        # refused, naming the field
        with pytest.raises(InputError) as err:
            megatron.emit(row)
        assert err.value.field == refused
        return
    text = megatron.emit(row)
    argv, env = flags_of(text), env_of(text)
    world = plan_fields(row)["n_gpus"]
    assert megatron_table.check_command(argv, world, env) == []
    real = VERIFIED[name]
    # the exporter still writes exactly what parse_args + validate_args + TransformerConfig saw
    assert (real["argv"], real["env"], real["world_size"]) == (argv, env, world), \
        "the export changed: rerun tools/megatron_flags.py"
    assert real["real"]["accepted"] is True
    p = plan_fields(row)
    assert real["real"]["data_parallel_size"] == p["dp"]
    assert real["real"]["num_microbatches"] == p["global_batch"] // (p["dp"] * p["micro_batch"])
    assert real["real"]["num_layers"] == p["model"].num_layers
    assert (real["real"]["virtual_pipeline_model_parallel_size"] or 1) == p["vpp"]


def test_every_rule_has_a_counterexample_the_real_code_and_the_table_both_reject():
    breaks = {c["rule"]: c for c in TABLE["verified"]["cases"] if "rule" in c}
    rules = {r["id"] for r in TABLE["rules"] if not r.get("runtime")}   # runtime checks: past the probe
    assert len(breaks) >= len(rules) - 2, sorted(rules - set(breaks))
    for rid, case in breaks.items():
        assert case["real"]["accepted"] is False, rid
        problems = megatron_table.check_command(case["argv"], case["world_size"], case["env"])
        assert any(p.startswith(rid + ":") for p in problems), (rid, problems)


def test_unknown_flags_wrong_types_and_choices_are_caught_as_argparse_would():
    base = VERIFIED["gqa-autotp"]
    argv, world, env = base["argv"], base["world_size"], base["env"]
    assert any(p.startswith("--no-such-flag") for p in megatron_table.check_command(argv + ["--no-such-flag"], world, env))
    bad_type = [v if v != "--micro-batch-size" else v for v in argv]
    i = bad_type.index("--micro-batch-size")
    bad_type[i + 1] = "one"
    assert any("not of type int" in p for p in megatron_table.check_command(bad_type, world, env))
    assert any("choices" in p for p in megatron_table.check_command(argv + ["--normalization", "BatchNorm"], world, env))


def test_deepseek_v3_61_layers_on_pp4_get_first_15_last_14_and_the_mtp_module():
    row = dict(matrix.MATRIX[[m[0] for m in matrix.MATRIX].index("mla-mtp-uneven-pp")][1])
    argv = flags_of(megatron.emit(row))
    value = dict(zip(argv, argv[1:]))
    assert value["--decoder-first-pipeline-num-layers"] == "15" and value["--decoder-last-pipeline-num-layers"] == "14"
    assert value["--mtp-num-layers"] == "1" and "--multi-latent-attention" in argv
    assert value["--moe-router-score-function"] == "sigmoid" and value["--moe-layer-freq"] == "([0]*3+[1]*58)"
    assert "--group-query-attention" not in argv


def test_layouts_use_first_last_counts_with_one_chunk_per_rank_and_a_layout_string_with_virtual_stages():
    assert pipeline_layout_args(32, 4) == []
    assert pipeline_layout_args(80, 4, 5) == [("--num-virtual-stages-per-pipeline-rank", 5)]
    assert pipeline_layout_args(32, 3) == [("--decoder-last-pipeline-num-layers", 10)]
    assert pipeline_layout_args(32, 4, 3) == [("--pipeline-model-parallel-layout", "Et*2|t*2|(t*3|)*8,t*2|t*2L")]
    # plan-fixed stage counts: the last counts the MTP module (as the step model does), the flag does not
    assert pipeline_layout_args(61, 4, 1, 1, first_stage_layers=13, last_stage_layers=13) == [
        ("--decoder-first-pipeline-num-layers", 13), ("--decoder-last-pipeline-num-layers", 12)]


#: the 16,384-GPU Llama 3.1 405B winner of the review (plan -m llama3.1-405b -c dgx-h100 -n 16384
#: --global-batch-tokens 16777216): 126 layers on pp 16 x vpp 8 = 128 chunks
LLAMA405_WINNER = dict(model="llama3.1-405b", cluster="dgx-h100", seq_len=8192, dp=64, tp=4, pp=16, vpp=8, cp=4,
                       micro_batch=1, global_batch=2048, zero_stage=1, recompute="none", sequence_parallel=True)


def test_405b_on_128_chunks_exports_an_embedding_only_and_a_loss_only_chunk_that_megatron_accepts():
    text = megatron.emit(LLAMA405_WINNER)
    argv, env = flags_of(text), env_of(text)
    assert megatron_table.check_command(argv, 16384, env) == []
    value = dict(zip(argv, argv[1:]))
    layout = value["--pipeline-model-parallel-layout"]
    assert layout == "E|(t|)*126,L"
    # the layout flag stands alone: Megatron derives vpp from it and refuses the other layout flags beside it
    for flag in ("--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage",
                 "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                 "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"):
        assert flag not in argv
    # read back, it is the plan: 128 chunks, 16 ranks x 8 virtual stages, the step model's layers per chunk
    spec = parse_layout(layout)
    assert megatron_table.layout_stages(layout) == spec.positions == 16 * 8
    units = position_layers(ScheduleKind.INTERLEAVED, 16, 8, 126)[0].tolist()
    assert list(spec.layers()) == units == [0] + [1] * 126 + [0]
    assert spec.embedding[0] == 1 and spec.loss[-1] == 1


def test_the_matrix_plans_with_empty_end_chunks_read_back_as_their_layout():
    by_name = {name: row for name, row, _ in matrix.MATRIX}
    for name, expected in (("embedding-loss-chunks", "E|(t|)*126,L"), ("mtp-alone-chunk", "E|(t|)*61,m|L")):
        row = by_name[name]
        argv = flags_of(megatron.emit(row))
        layout = argv[argv.index("--pipeline-model-parallel-layout") + 1]
        assert layout == expected
        p = plan_fields(row)
        spec = parse_layout(layout)
        decoder, mtp = chunk_layers(p["model"].num_layers, p["pp"], p["vpp"], p["model"].mtp_layers)
        assert (spec.decoder, spec.mtp) == (decoder, mtp)
        assert VERIFIED[name]["real"]["virtual_pipeline_model_parallel_size"] == p["vpp"]


def test_mtp_modules_split_over_two_chunks_are_refused_as_megatron_would():
    # two MTP modules on 64 chunks: 61 + 2 = 63 layers, the last chunk the loss alone, the MTP modules on
    # chunks 61 and 62 (ranks 13 and 14): Megatron builds them all in one chunk (validate_layer_layout)
    row = dict(next(r for n, r, _ in matrix.MATRIX if n == "mtp-alone-chunk"))
    row["model"] = replace(plan_fields(row)["model"], mtp_layers=2)
    err = megatron.refusal(plan_fields(row))
    assert err is not None and err.field == "megatron" and "layout_mtp_placement" in err.message


@settings(max_examples=200, deadline=None)
@given(layers=st.integers(2, 130), pp=st.integers(2, 16), vpp=st.integers(1, 8), mtp=st.integers(0, 2))
def test_layout_strings_read_back_as_the_plans_chunks(layers, pp, vpp, mtp):
    """Every layout the export can write parses back (Megatron's own unrolling, as the table
    reads it, and paraplan's parser) to the plan's decoder layers and MTP modules per chunk."""
    try:
        decoder, mtp_of = chunk_layers(layers, pp, vpp, mtp)
    except InputError:
        return
    text = layout_string(decoder, mtp_of)
    spec = parse_layout(text)
    assert (spec.decoder, spec.mtp) == (decoder, mtp_of)
    assert spec.embedding[0] == spec.loss[-1] == 1 and sum(spec.embedding) == sum(spec.loss) == 1
    assert megatron_table.layout_stages(text) == pp * vpp
    assert megatron_table.layout_count(text, "t") == layers and megatron_table.layout_count(text, "m") == mtp
    assert stage_layer_counts(layers, pp, vpp, mtp) == decoder


def test_environment_sets_one_connection_for_tp_or_cp_and_never_for_megatron_fsdp():
    by_name = {name: row for name, row, _ in matrix.MATRIX}
    assert env_of(megatron.emit(by_name["gqa-autotp"])) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert env_of(megatron.emit(by_name["cp-ulysses"])) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}   # tp 1, cp 4
    assert env_of(megatron.emit(by_name["zero0-ddp"])) == {}
    assert env_of(megatron.emit(by_name["zero3-full"])) == {}       # tp 4 but Megatron-FSDP
    assert "--use-megatron-fsdp" in flags_of(megatron.emit(by_name["zero3-full"]))


def test_hybrid_cp_writes_the_ulysses_by_ring_sizes_the_cost_model_uses():
    row = dict(matrix.MATRIX[[m[0] for m in matrix.MATRIX].index("cp-hybrid")][1])
    argv = flags_of(megatron.emit(row))
    i = argv.index("--hierarchical-context-parallel-sizes")
    assert argv[i + 1:i + 3] == ["4", "2"] and argv[argv.index("--cp-comm-type") + 1] == "a2a+p2p"
    with pytest.raises(InputError) as err:
        megatron.emit({k: v for k, v in row.items() if k != "cluster"})
    assert err.value.field == "cp_kind"


def test_architecture_flags_build_the_planned_model():
    by_name = {name: row for name, row, _ in matrix.MATRIX}
    llama = flags_of(megatron.emit(by_name["gqa-autotp"]))
    for flag in ("--swiglu", "--disable-bias-linear", "--group-query-attention", "--untie-embeddings-and-output-weights"):
        assert flag in llama
    value = dict(zip(llama, llama[1:]))
    assert (value["--normalization"], value["--position-embedding-type"], value["--num-query-groups"]) == (
        "RMSNorm", "rope", "8")
    gpt = flags_of(megatron.emit(by_name["dense-gpt3-tp-pp"]))
    value = dict(zip(gpt, gpt[1:]))
    assert (value["--normalization"], value["--position-embedding-type"]) == ("LayerNorm", "learned_absolute")
    assert "--disable-bias-linear" not in gpt and "--swiglu" not in gpt and "--untie-embeddings-and-output-weights" not in gpt
    assert "--squared-relu" in flags_of(megatron.emit(by_name["nemotron-squared-relu"]))


def test_gradient_accumulation_fusion_stays_on_when_the_plan_priced_it_and_goes_off_only_when_it_did_not():
    for name, row, refused in matrix.entries("megatron"):
        if refused is None:
            assert "--no-gradient-accumulation-fusion" not in flags_of(megatron.emit(row)), name
    unfused = {**dict(matrix.MATRIX[0][1]), "grad_accumulation_fusion": False}
    assert "--no-gradient-accumulation-fusion" in flags_of(megatron.emit(unfused))


def test_plans_megatron_cannot_run_are_refused_with_one_named_field():
    base = dict(matrix.MATRIX[0][1])
    cases = [({**base, "schedule": "zb-v"}, "schedule"), ({**base, "zero_stage": 2}, "zero_stage"),
             ({**base, "model": "bloom-176b", "tp": 8, "pp": 7, "dp": 1, "global_batch": 64}, "model"),
             ({**base, "model": "opt-175b"}, "model"), ({**base, "tp": 64, "pp": 4, "dp": 1}, "megatron")]
    for row, field in cases:
        with pytest.raises(InputError) as err:
            megatron.emit(row)
        assert err.value.field == field, (row, err.value)
        assert "\n" not in str(err.value)


def test_rule_expressions_are_evaluated_without_eval():
    assert megatron_table.evaluate("a % (b * 2) == 0 and c in ['x', 'y']", {"a": 8, "b": 2, "c": "x"})
    assert megatron_table.evaluate("prod(s) == 8 if s is not None else False", {"s": [4, 2]})
    with pytest.raises(ValueError):
        megatron_table.evaluate("__import__('os')", {})


def test_a_plan_priced_with_deduplicated_dispatch_exports_the_flex_dispatcher():
    # DeepEP's once-per-GPU-and-node dispatch is Megatron's flex dispatcher; a plan without it keeps
    # alltoall (one row per token and expert), the dispatcher the per-pair cost prices
    row = dict(model="qwen3-30b-a3b", seq_len=4096, dp=16, tp=1, pp=1, ep=16, micro_batch=1, global_batch=1024,
               zero_stage=1, recompute="none")
    flex = flags_of(megatron.emit(dict(row, ep_dispatch_dedup=True)))
    plain = flags_of(megatron.emit(row))
    at = flex.index("--moe-token-dispatcher-type")
    assert flex[at + 1] == "flex" and flex[flex.index("--moe-flex-dispatcher-backend") + 1] == "deepep"
    assert plain[plain.index("--moe-token-dispatcher-type") + 1] == "alltoall"
    assert "--moe-flex-dispatcher-backend" not in plain
    assert megatron_table.check_command(flex, 16, {}) == []


def test_a_plan_priced_with_fp8_current_scaling_exports_the_tensorwise_recipe():
    # per-tensor current scaling is Megatron's --fp8-recipe tensorwise; without it the export keeps
    # Megatron's default (delayed), the recipe the plan then priced
    row = dict(model="llama3-8b", seq_len=8192, dp=8, tp=1, pp=1, micro_batch=1, global_batch=128,
               zero_stage=1, recompute="none", dtype="fp8")
    current = flags_of(megatron.emit(dict(row, fp8_current_scaling=True)))
    delayed = flags_of(megatron.emit(row))
    assert current[current.index("--fp8-recipe") + 1] == "tensorwise"
    assert "--fp8-recipe" not in delayed and "--fp8-format" in delayed
    assert megatron_table.check_command(current, 8, {}) == []


def test_a_plan_counting_fp8_weights_only_exports_fp8_param_gather():
    # the plan's memory has no bf16 weight copy (ParallelConfig.fp8_param_gather): the run must
    # keep its weights in FP8 (--fp8-param-gather), which Megatron-LM allows only with the
    # distributed optimizer or FSDP; MXFP8 all-gathers through the gradient buffer as Bridge does
    row = dict(model="llama3-8b", seq_len=8192, dp=8, tp=1, pp=1, micro_batch=1, global_batch=128,
               zero_stage=1, recompute="none", dtype="fp8")
    gathered = flags_of(megatron.emit(dict(row, fp8_param_gather=True)))
    assert "--fp8-param-gather" in gathered and "--reuse-grad-buf-for-mxfp8-param-ag" not in gathered
    assert "--fp8-param-gather" not in flags_of(megatron.emit(row))
    mx = flags_of(megatron.emit(dict(row, dtype="mxfp8", fp8_param_gather=True)))
    assert "--fp8-param-gather" in mx and "--reuse-grad-buf-for-mxfp8-param-ag" in mx
    assert megatron_table.check_command(gathered, 8, {}) == []
    with pytest.raises(InputError, match="fp8_param_gather"):
        megatron.emit(dict(row, zero_stage=0, fp8_param_gather=True))


def test_the_first_line_names_the_memory_features_the_flags_set():
    # the header said 'recompute=full' for a plan recomputing 22 of 80 layers per chunk; the flags
    # below it said 22: the line that names the plan now names them too
    row = dict(model="llama3-70b", n_gpus=512, dp=256, tp=1, pp=1, cp=2, micro_batch=1, global_batch=512,
               zero_stage=3, recompute="full", recompute_num_layers=22, seq_len=8192, step_time_s=7.3)
    text = megatron.emit(row)
    first = text.splitlines()[0]
    assert "zero=3 recompute=full schedule=1f1b dtype=bf16, recompute_num_layers=22;" in first, first
    value = dict(zip(flags_of(text), flags_of(text)[1:]))
    assert value["--recompute-num-layers"] == "22"
    plain = megatron.emit({**row, "recompute": "selective", "recompute_num_layers": 0,
                           "recompute_modules": ("core_attn", "layernorm")})
    assert "dtype=bf16, recompute_modules=core_attn,layernorm;" in plain.splitlines()[0]
    assert "recompute_num_layers" not in plain.splitlines()[0]


def test_a_clamped_glu_is_named_as_what_the_flags_cannot_set():
    """gpt-oss clamps its GLU at 7 (config.json swiglu_limit); Megatron-LM's parser has no flag for
    TransformerConfig.activation_func_clamp_value, so the export says so in a comment above the
    flags (which still pass the table), and a model without a clamp gets no such line."""
    row = dict(model="gpt-oss-20b", seq_len=4096, dp=8, tp=1, pp=1, ep=8, micro_batch=1, global_batch=64,
               zero_stage=1, recompute="none")
    text = megatron.emit(row)
    notes = [ln for ln in text.splitlines() if ln.startswith("#") and "clamp" in ln]
    assert len(notes) == 1 and "gpt-oss-20b clamps its GLU at 7 (activation_func_clamp_value)" in notes[0]
    assert megatron_table.check_command(flags_of(text), 8, {}) == []
    plain = megatron.emit(dict(row, model="qwen3-30b-a3b"))
    assert "clamp" not in plain


def test_rope_base_and_llama31_scaling_are_flags_and_an_unstated_base_is_said():
    """Megatron-LM's --rotary-base defaults to 10000: Llama 3's flags built a model with another
    RoPE than the checkpoint's rope_theta 500000 (and Llama 3.1's llama3 scaling, factor 8, was
    dropped). The flags now carry them (checked by the real parse_args + validate_args for the
    matrix's Llama rows: tools/megatron_flags.py); a RoPE model whose spec does not state its base
    (here DeepSeek-V3 with its rope_theta dropped) says so in the header instead of letting the
    default stand silently."""
    from paraplan import api
    row = api.simulate("llama3.1-405b", "dgx-h100", gpus=2048, tp=8, pp=16, global_batch=2048, zero_stage=1,
                       sequence_parallel=True, recompute="full").iloc[0]
    text = megatron.emit(row)
    argv = flags_of(text)
    value = dict(zip(argv, argv[1:]))
    assert (value["--rotary-base"], value["--rope-scaling-factor"]) == ("500000", "8.0")
    assert "--use-rope-scaling" in argv
    assert megatron_table.check_command(argv, 2048, env_of(text)) == []
    llama3 = flags_of(megatron.emit(api.simulate("llama3-8b", "dgx-h100", gpus=8, global_batch=16).iloc[0]))
    assert dict(zip(llama3, llama3[1:]))["--rotary-base"] == "500000" and "--use-rope-scaling" not in llama3
    names = {m[0] for m in matrix.MATRIX}           # the matrix exports (not the rules' counterexamples)
    accepted = [c for k, c in VERIFIED.items() if k in names and "--rotary-base" in c["argv"]]
    assert len(accepted) >= 5 and all(c["real"]["accepted"] for c in accepted)
    row = api.simulate("deepseek-v3", "dgx-h100", gpus=256, pp=8, ep=32, global_batch=512, zero_stage=1,
                       recompute="full").iloc[0]
    unstated = replace(load_model("deepseek-v3"), name="ds-unstated", rope_theta=0.0)
    ds = megatron.emit(dict(row, model=unstated))
    assert "--rotary-base" not in flags_of(ds)
    header = [line for line in ds.splitlines() if line.startswith("#")]
    assert any("ds-unstated's RoPE base is not in its model spec" in line for line in header)


def _deepseek_v3_export() -> str:
    from paraplan import api
    return megatron.emit(api.simulate("deepseek-v3", "dgx-h100", gpus=256, pp=8, ep=32, global_batch=512,
                                      zero_stage=1, recompute="full").iloc[0])


def test_deepseek_v3_yarn_rope_is_flags_with_its_published_values_and_megatron_builds_them():
    """DeepSeek-V3's config.json rope_theta 10000, rope_scaling yarn factor 40, original 4096,
    beta_fast 32, beta_slow 1, mscale 1.0, mscale_all_dim 1.0 (deepseek-ai/DeepSeek-V3, as mirrored
    in ai-dynamo/aiconfigurator@095f58a). For MLA Megatron-LM@d98e8a64 takes --rope-type yarn,
    --rotary-scaling-factor (its default 1.0 replaced MLATransformerConfig's 40: the model built
    had no YaRN stretch), --mscale, --mscale-all-dim (default 0.0: without it MLA's softmax lost
    its mscale^2 = (0.1 ln 40 + 1)^2 = 1.874 factor); original / beta_fast / beta_slow have no
    flag and MLATransformerConfig fixes them at DeepSeek-V3's 4096 / 32 / 1."""
    text = _deepseek_v3_export()
    argv = flags_of(text)
    value = dict(zip(argv, argv[1:]))
    assert {k: value[k] for k in ("--position-embedding-type", "--rotary-base", "--rope-type",
                                  "--rotary-scaling-factor", "--mscale", "--mscale-all-dim")} == {
        "--position-embedding-type": "rope", "--rotary-base": "10000", "--rope-type": "yarn",
        "--rotary-scaling-factor": "40.0", "--mscale": "1.0", "--mscale-all-dim": "1.0"}
    assert not any(a.startswith("--yarn-") for a in argv)      # the non-MLA spellings, unread by MLA
    assert "yarn" not in " ".join(line for line in text.splitlines() if line.startswith("#"))  # nothing left unsaid
    assert megatron_table.check_command(argv, 256, env_of(text)) == []
    # the real parse_args + validate_args + core_transformer_config_from_args on the matrix's
    # DeepSeek-V3 exports built an MLATransformerConfig with every published value
    for case in ("mla-mtp-ep", "mla-mtp-uneven-pp"):
        real = VERIFIED[case]["real"]
        assert real["accepted"] and real["config_class"] == "MLATransformerConfig"
        assert real["rope"] == {"rotary_base": 10000, "rope_type": "yarn", "rotary_scaling_factor": 40.0,
                                "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
                                "mscale": 1.0, "mscale_all_dim": 1.0}
    # --rope-type yarn is MLA's: the table, like the real code, refuses it on other attention
    broken = VERIFIED["break:rope_type_needs_mla"]
    assert not broken["real"]["accepted"] and "rope_type" in broken["real"]["error"]
    problems = megatron_table.check_command(broken["argv"], broken["world_size"], broken["env"])
    assert len(problems) == 1 and problems[0].startswith("rope_type_needs_mla: ")


def test_yarn_parameters_megatron_cannot_set_and_yarn_without_mla_are_handled():
    """MLA with a YaRN parameter other than MLATransformerConfig's fixed one (Kimi K2's config.json
    beta_fast 1.0, ai-dynamo/aiconfigurator@095f58a moonshotai--Kimi-K2-Instruct_config.json) or
    unstated says so in the header; other attention takes --position-embedding-type yarn with the
    --yarn-* flags, except beside MTP (validate_args refuses it), which keeps rope and says so."""
    from paraplan import api
    row = api.simulate("deepseek-v3", "dgx-h100", gpus=256, pp=8, ep=32, global_batch=512, zero_stage=1,
                       recompute="full").iloc[0]
    ds = load_model("deepseek-v3")
    kimi_like = replace(ds, name="kimi-like", rope_theta=50000.0, rope_scaling_factor=32.0, rope_beta_fast=1.0,
                        rope_original_max_position_embeddings=0)
    header = " ".join(line for line in megatron.emit(dict(row, model=kimi_like)).splitlines() if line.startswith("#"))
    assert "kimi-like's YaRN beta_fast is 1, but Megatron-LM's MLA config fixes it at 32" in header
    assert "kimi-like's YaRN original_max_position_embeddings is not in its model spec" in header
    assert "beta_slow" not in header                            # 1 = the fixed value
    plain = replace(ds, name="yarn-gqa", mla=None, num_kv_heads=16, head_dim=56, mtp_layers=0)
    text = megatron.emit(dict(row, model=plain))
    argv = flags_of(text)
    value = dict(zip(argv, argv[1:]))
    assert {k: value[k] for k in ("--position-embedding-type", "--yarn-original-max-position-embeddings",
                                  "--yarn-beta-fast", "--yarn-beta-slow", "--rotary-scaling-factor", "--mscale",
                                  "--mscale-all-dim")} == {
        "--position-embedding-type": "yarn", "--yarn-original-max-position-embeddings": "4096",
        "--yarn-beta-fast": "32.0", "--yarn-beta-slow": "1.0", "--rotary-scaling-factor": "40.0",
        "--mscale": "1.0", "--mscale-all-dim": "1.0"}
    assert "--rope-type" not in argv and megatron_table.check_command(argv, 256, env_of(text)) == []
    with_mtp = megatron.emit(dict(row, model=replace(plain, mtp_layers=1)))
    argv = flags_of(with_mtp)
    assert dict(zip(argv, argv[1:]))["--position-embedding-type"] == "rope" and "--yarn-beta-fast" not in argv
    assert megatron_table.check_command(argv, 256, env_of(with_mtp)) == []
    assert any("refused beside MTP" in line for line in with_mtp.splitlines() if line.startswith("#"))


def test_gpt_oss_yarn_rope_is_flags_with_its_published_values():
    """gpt-oss-120b's config.json rope_theta 150000, rope_scaling yarn factor 32, original 4096,
    beta_fast 32, beta_slow 1 (openai/gpt-oss-120b, as mirrored in
    ai-dynamo/aiconfigurator@095f58a): GQA attention without MTP takes --position-embedding-type
    yarn and the --yarn-* flags; before the preset stated them the export kept Megatron-LM's base
    10000 and plain RoPE and said so in its header."""
    from paraplan import api
    row = api.simulate("gpt-oss-120b", "dgx-h100", gpus=64, ep=32, global_batch=128, zero_stage=1).iloc[0]
    text = megatron.emit(row)
    argv = flags_of(text)
    value = dict(zip(argv, argv[1:]))
    assert {k: value[k] for k in ("--position-embedding-type", "--rotary-base", "--rotary-scaling-factor",
                                  "--yarn-original-max-position-embeddings", "--yarn-beta-fast",
                                  "--yarn-beta-slow")} == {
        "--position-embedding-type": "yarn", "--rotary-base": "150000", "--rotary-scaling-factor": "32.0",
        "--yarn-original-max-position-embeddings": "4096", "--yarn-beta-fast": "32.0", "--yarn-beta-slow": "1.0"}
    assert "RoPE base is not in its model spec" not in text
    assert megatron_table.check_command(argv, 64, env_of(text)) == []


@pytest.mark.parametrize("stack", ["nemo-24", "megatron-bridge-25.09"])
def test_an_overlap_stack_without_sequence_parallelism_prices_tp_comm_exposed_as_its_export_runs(stack):
    """Megatron-LM takes --tp-comm-overlap only with --sequence-parallel (validate_args, rule
    tp_overlap_needs_sp), so the export of a plan without it leaves the flag out; the step it
    states must be that of the TP all-reduces exposed (simulator.layer_times.tp_overlap_applies).
    It had been priced with them hidden: llama3-70b on 64 H100s, tp4 pp4 cp2, nemo-24 without
    SP, 17.12 s with tp_comm_exposed_s 0 against 18.02 s as run. With SP the overlap still hides."""
    from paraplan import api
    plan = dict(gpus=64, tp=4, pp=4, cp=2, global_batch=128, zero_stage=1, recompute="full",
                recompute_num_layers=2, recompute_method="block", stack=stack)
    if stack == "nemo-24":
        # with Megatron's fp32 master, as the export runs it (the export refuses NeMo 1.x's Apex
        # remainders, tests/test_master_weights.py)
        plan["master_weight_bytes"] = 4.0
    if stack.startswith("megatron-bridge"):
        plan["tp_comm_overlap"] = True          # as the bridge's llama3-70b recipes on H100 set it
        # the bridge's TE cross-entropy is refused by Megatron-LM's validate_args: its native fused loss
        plan["cross_entropy"] = "megatron_fused"
    row = api.simulate("llama3-70b", "dgx-h100", sequence_parallel=False, **plan).iloc[0]
    without = api.simulate("llama3-70b", "dgx-h100", sequence_parallel=False,
                           **{**plan, "tp_comm_overlap": False}).iloc[0]
    assert row.tp_comm_exposed_s > 0.1 and row.tp_comm_exposed_s == pytest.approx(without.tp_comm_exposed_s)
    assert row.step_time_s == pytest.approx(without.step_time_s)
    text = megatron.emit(row)
    assert "--tp-comm-overlap" not in flags_of(text) and "--sequence-parallel" not in flags_of(text)
    assert f"predicted {row.step_time_s:.2f} s/step" in text
    sp = api.simulate("llama3-70b", "dgx-h100", sequence_parallel=True, **plan).iloc[0]
    sp_off = api.simulate("llama3-70b", "dgx-h100", sequence_parallel=True,
                          **{**plan, "tp_comm_overlap": False}).iloc[0]
    assert sp.tp_comm_exposed_s < 0.5 * sp_off.tp_comm_exposed_s
    assert "--tp-comm-overlap" in flags_of(megatron.emit(sp))


def test_simulate_says_the_tp_overlap_switch_has_no_effect_without_sequence_parallelism():
    """The overlap is priced as off without sequence parallelism (tp_overlap_applies): simulate's
    header had said tp_comm_overlap=on there, as if it hid the all-reduces."""
    from click.testing import CliRunner

    from paraplan.cli import main
    args = ["simulate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "64", "--tp", "8", "--pp", "2",
            "--global-batch", "128", "--tp-comm-overlap"]
    for sp, says in (("--no-sequence-parallel", "tp_comm_overlap=on (no effect without sequence parallelism)"),
                     ("--sequence-parallel", "tp_comm_overlap=on ep_comm_overlap")):
        res = CliRunner().invoke(main, args + [sp])
        assert res.exit_code == 0, res.output
        assert says in res.output
    assert "tp_comm_overlap=off" in CliRunner().invoke(main, args[:-1] + ["--no-sequence-parallel"]).output


def test_deepseek_style_routers_are_flags_and_megatron_builds_them():
    """DeepSeek-V3's router (config.json topk_method noaux_tc, routed_scaling_factor 2.5, n_group 8,
    topk_group 4): only --moe-router-score-function sigmoid was written, so Megatron-LM routed plain
    top-8 with no expert bias and unscaled weights. Kimi K2 (one group, 2.827) writes no group flags;
    MiniMax-M2.5 only the bias; Mixtral none of them."""
    argv = flags_of(_deepseek_v3_export())
    value = dict(zip(argv, argv[1:]))
    assert "--moe-router-enable-expert-bias" in argv
    assert {k: value[k] for k in ("--moe-router-topk-scaling-factor", "--moe-router-num-groups",
                                  "--moe-router-group-topk")} == {
        "--moe-router-topk-scaling-factor": "2.5", "--moe-router-num-groups": "8", "--moe-router-group-topk": "4"}
    for case in ("mla-mtp-ep", "mla-mtp-uneven-pp"):
        assert VERIFIED[case]["real"]["router"] == {
            "moe_router_topk": 8, "moe_router_score_function": "sigmoid", "moe_router_enable_expert_bias": True,
            "moe_router_bias_update_rate": 0.001, "moe_router_topk_scaling_factor": 2.5, "moe_router_num_groups": 8,
            "moe_router_group_topk": 4, "moe_router_pre_softmax": False}
    kimi = [flag for flag, _ in megatron._model_args(load_model("kimi-k2"), 4096)]
    assert ("--moe-router-enable-expert-bias" in kimi and "--moe-router-topk-scaling-factor" in kimi
            and "--moe-router-num-groups" not in kimi and "--moe-router-group-topk" not in kimi)
    assert dict(megatron._model_args(load_model("kimi-k2"), 4096))["--moe-router-topk-scaling-factor"] == 2.827
    minimax = [flag for flag, _ in megatron._model_args(load_model("minimax-m2.5"), 4096)]
    assert "--moe-router-enable-expert-bias" in minimax and "--moe-router-topk-scaling-factor" not in minimax
    mixtral = [flag for flag, _ in megatron._model_args(load_model("mixtral-8x7b"), 4096)]
    assert not any(f in mixtral for f in ("--moe-router-enable-expert-bias", "--moe-router-topk-scaling-factor",
                                          "--moe-router-num-groups", "--moe-router-group-topk"))


DEEPSEEK_V2_CONFIG = {
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 5120,
    "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 60,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 160, "n_shared_experts": 2,
    "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "vocab_size": 102400, "max_position_embeddings": 163840, "rope_theta": 10000, "scoring_func": "softmax",
    "topk_method": "group_limited_greedy", "n_group": 8, "topk_group": 3, "routed_scaling_factor": 16.0,
    "norm_topk_prob": False, "tie_word_embeddings": False, "hidden_act": "silu", "rms_norm_eps": 1e-6}


def test_a_scaled_softmax_router_that_does_not_renormalise_is_pre_softmax_and_megatron_accepts_it():
    """DeepSeek-V2 softmaxes over all 160 experts and scales the chosen 6 weights by 16 without
    renormalising them (config.json norm_topk_prob false); Megatron-LM's softmax router
    renormalises (softmax over the top-k logits) unless --moe-router-pre-softmax (moe_utils.py
    topk_routing_with_score_function). Its group-limited routing ranks a group by its best score
    (group_limited_greedy), Megatron's by the sum of its top k / group_topk = 6 / 3 = 2
    (moe_utils.group_limited_topk): DeepSeek-V2 itself is refused for that, one line; the same
    router without groups (DeepSeek-V2's greedy top-k, as V2-Lite routes) is written with the
    flag, from a config.json too, and the table accepts the command."""
    from paraplan import api
    from model_specs.hf_config import model_from_hf_config
    with pytest.raises(InputError) as err:
        megatron._router_args(load_model("deepseek-v2").moe)
    assert err.value.field == "model" and "its best score" in str(err.value) and "top 2" in str(err.value)
    # Qwen2-57B-A14B: a softmax over its 64 experts, the chosen 8 kept as they are
    text = megatron.emit(api.simulate("qwen2-57b-a14b", "dgx-h100", gpus=64, pp=4, ep=8, global_batch=512,
                                      zero_stage=1, recompute="full").iloc[0])
    argv, env = flags_of(text), env_of(text)
    value = dict(zip(argv, argv[1:]))
    assert "--moe-router-pre-softmax" in argv and "--moe-router-enable-expert-bias" not in argv
    assert "--moe-router-num-groups" not in argv and value["--moe-router-score-function"] == "softmax"
    assert megatron_table.check_command(argv, 64, env) == []
    ungrouped = replace(load_model("deepseek-v2").moe, num_groups=1, group_topk=1)
    assert megatron._router_args(ungrouped) == [("--moe-router-pre-softmax", None),
                                                 ("--moe-router-topk-scaling-factor", 16.0)]
    greedy = dict(DEEPSEEK_V2_CONFIG, topk_method="greedy")
    from_hf = dict(megatron._model_args(model_from_hf_config(greedy, name="v2"), 4096))
    assert "--moe-router-pre-softmax" in from_hf and from_hf["--moe-router-topk-scaling-factor"] == 16.0
    grouped = model_from_hf_config(DEEPSEEK_V2_CONFIG, name="v2")
    assert (grouped.moe.num_groups, grouped.moe.group_topk, grouped.moe.expert_bias) == (8, 3, False)
    # DeepSeek-V3's noaux_tc ranks by its two best, 8 / 4 = 2 in Megatron: written
    v3 = dict(megatron._model_args(load_model("deepseek-v3"), 4096))
    assert (v3["--moe-router-num-groups"], v3["--moe-router-group-topk"]) == (8, 4)
    # renormalised (Qwen3's norm_topk_prob true, Mixtral): softmax after the top-k, no flag
    for name in ("qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3"):
        assert "--moe-router-pre-softmax" not in dict(megatron._model_args(load_model(name), 4096)), name
    # not renormalised: Qwen2-57B-A14B (norm_topk_prob false), Grok-1 (model.py: top-2 of the softmax)
    for name in ("qwen2-57b-a14b", "grok-1"):
        assert "--moe-router-pre-softmax" in dict(megatron._model_args(load_model(name), 4096)), name


def test_qwen2_moe_shared_expert_gate_is_written_and_the_table_accepts_it():
    """Qwen2-57B-A14B scales its shared expert by a sigmoid gate (transformers Qwen2MoeSparseMoeBlock
    shared_expert_gate); the export wrote the shared expert's width and no gate, so Megatron-LM
    built the shared expert ungated. --moe-shared-expert-gate (TransformerConfig
    moe_shared_expert_gate) is now written; DeepSeek-V3's shared expert is ungated and gets none."""
    from paraplan import api
    text = megatron.emit(api.simulate("qwen2-57b-a14b", "dgx-h100", gpus=64, pp=4, ep=8, global_batch=512,
                                      zero_stage=1, recompute="full").iloc[0])
    argv, env = flags_of(text), env_of(text)
    assert "--moe-shared-expert-gate" in argv
    assert dict(zip(argv, argv[1:]))["--moe-shared-expert-intermediate-size"] == "20480"
    assert megatron_table.check_command(argv, 64, env) == []
    v3 = dict(megatron._model_args(load_model("deepseek-v3"), 4096))
    assert "--moe-shared-expert-intermediate-size" in v3 and "--moe-shared-expert-gate" not in v3


def test_a_router_megatron_cannot_build_is_refused_in_one_line():
    """Megatron-LM's sigmoid router divides the chosen scores by their sum whenever top_k > 1,
    with no switch, and never at top-1; a softmax top-1 router must be pre-softmax
    (TransformerConfig). A model routed otherwise is refused, naming the spec field."""
    v3, scout, mixtral = load_model("deepseek-v3"), load_model("llama4-scout"), load_model("mixtral-8x7b")
    assert "--moe-router-pre-softmax" not in dict(megatron._model_args(scout, 4096))   # sigmoid top-1 as is
    for moe, says in ((replace(v3.moe, topk_renormalized=False), "divides the chosen 8 scores by their sum"),
                      (replace(scout.moe, topk_renormalized=True), "does not divide the chosen 1 scores"),
                      (replace(mixtral.moe, top_k=1), "softmax top-1 router is renormalised")):
        with pytest.raises(InputError) as err:
            megatron._router_args(moe)
        assert err.value.field == "model" and says in str(err.value) and "\n" not in str(err.value)
    assert megatron._router_args(replace(mixtral.moe, top_k=1, topk_renormalized=False)) == [
        ("--moe-router-pre-softmax", None)]


def test_nemotron_h_routes_with_its_expert_bias_and_scaling():
    """Nemotron 3 Nano's gate carries an e_score_correction_bias and scales the chosen weights by
    its config.json routed_scaling_factor, 2.5 (Megatron-Bridge's nemotron_h_bridge.py sets
    moe_router_enable_expert_bias): the export writes both, from the preset and the config."""
    args = dict(megatron._model_args(load_model("nemotron-3-nano"), 4096))
    assert "--moe-router-enable-expert-bias" in args and args["--moe-router-topk-scaling-factor"] == 2.5
    assert load_model("nemotron-3-nano").moe.expert_bias and load_model("nemotron-3-nano").moe.topk_scaling_factor == 2.5


def test_a_model_with_linear_attention_layers_is_refused_by_every_training_export():
    """Qwen3.5's Gated DeltaNet layers: the Megatron export wrote no --experimental-attention-variant,
    so its launch built 60 softmax-attention layers; each training export now refuses in one line."""
    from paraplan import api
    from paraplan.exports import deepspeed, torchtitan
    row = api.simulate("qwen3.5-397b-a17b", "dgx-h100", gpus=64, pp=4, ep=16, global_batch=256, zero_stage=1,
                       recompute="full").iloc[0]
    for module in (megatron, torchtitan, deepspeed):
        with pytest.raises(InputError) as err:
            module.emit(row)
        assert err.value.field == "model" and "linear-attention" in str(err.value) and "\n" not in str(err.value)


def test_llama_4_weighs_the_experts_input_as_megatron_can_for_top_1():
    """Llama 4 multiplies the routed tokens by the sigmoid score before the experts (transformers
    Llama4TextMoe); with a SwiGLU expert that is not the output scaled. Megatron-LM builds it with
    --moe-apply-probs-on-input (top-1 only, experts.py asserts it); the export wrote nothing."""
    for name in ("llama4-scout", "llama4-maverick"):
        moe = load_model(name).moe
        assert moe.probs_on_input and moe.top_k == 1
        assert ("--moe-apply-probs-on-input", None) in megatron._router_args(moe)
    with pytest.raises(InputError) as err:
        megatron._router_args(replace(load_model("llama4-scout").moe, top_k=2, topk_renormalized=True))
    assert "top-1 routers only" in str(err.value)
    assert "--moe-apply-probs-on-input" not in dict(megatron._model_args(load_model("mixtral-8x7b"), 4096))


def test_the_qwen2_57b_and_deepseek_v2_presets_carry_their_config_jsons_rope_and_megatron_writes_it():
    """Qwen/Qwen2-57B-A14B config.json rope_theta 1000000 and deepseek-ai/DeepSeek-V2 config.json
    rope_theta 10000, rope_scaling {type: yarn, factor: 40, original_max_position_embeddings: 4096,
    beta_fast: 32, beta_slow: 1, mscale: 0.707, mscale_all_dim: 0.707}: the presets stated neither,
    so Megatron-LM's flags left --rotary-base at its default 10000 for Qwen2-57B (100x too small a
    base) and DeepSeek-V2 lost its YaRN 128K extension. The presets now match the imports."""
    from paraplan import api
    from model_specs.hf_config import model_from_hf_config
    rope = ("rope_theta", "rope_scaling", "rope_scaling_factor", "rope_original_max_position_embeddings",
            "rope_beta_fast", "rope_beta_slow", "rope_mscale", "rope_mscale_all_dim")
    v2_config = dict(DEEPSEEK_V2_CONFIG, rope_scaling={
        "type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
        "mscale": 0.707, "mscale_all_dim": 0.707})
    v2 = load_model("deepseek-v2")
    assert [getattr(v2, f) for f in rope] == [getattr(model_from_hf_config(v2_config), f) for f in rope] == [
        10000.0, "yarn", 40.0, 4096, 32.0, 1.0, 0.707, 0.707]
    # its 163,840-token context is the yarn window: 4096 x 40
    assert v2.max_context_tokens == v2.rope_original_max_position_embeddings * v2.rope_scaling_factor
    qwen = load_model("qwen2-57b-a14b")
    assert (qwen.rope_theta, qwen.rope_scaling) == (1e6, "")
    text = megatron.emit(api.simulate("qwen2-57b-a14b", "dgx-h100", gpus=64, pp=4, ep=8, global_batch=512,
                                      zero_stage=1, recompute="full").iloc[0])
    argv = flags_of(text)
    assert dict(zip(argv, argv[1:]))["--rotary-base"] == "1000000"
    assert megatron_table.check_command(argv, 64, env_of(text)) == []
    # V2's group-limited router has no Megatron form (refused); ungrouped, its RoPE is written
    ungrouped = replace(v2, moe=replace(v2.moe, num_groups=1, group_topk=1))
    value = dict(megatron._model_args(ungrouped, 4096))
    assert (value["--rotary-base"], value["--rotary-scaling-factor"], value["--mscale"],
            value["--mscale-all-dim"]) == (10000, 40.0, 0.707, 0.707)
