"""``validate published`` on rows written unlike the bundled file's: each test takes a bundled
row, changes one cell the way another source would write it, and checks the row is read as the
original (same prediction) or skipped with a reason that names what to change."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from paraplan.validation.datasets import BUNDLED_DIR, PUBLISHED_RUNS
from paraplan.validation.published import read_runs, row_inputs, validate_rows

LLAMA_405B = "MBRIDGE-26.06-LLAMA3.1_405B-DGX-H100-1024g-FP8-tp8pp8cp2epvp8-gbs1536-mbs1:tokens_per_s_per_gpu"
QWEN_30B = "MBRIDGE-26.06-Qwen3_30B_a3B-DGX-H100-16g-FP8-tp1pp1cp1ep16vp-gbs1024-mbs1:tokens_per_s_per_gpu"
DEEPSEEK_V3 = "MBRIDGE-26.08-DeepSeekV3-DGX-GB200-256g-MXFP8-tp1pp4cp1ep64vp4-gbs4096-mbs1:tokens_per_s_per_gpu"
ZERO3 = "NAR21-T2-zero3-174.6B-384:tflops_per_gpu"


@pytest.fixture(scope="module")
def bundled():
    return pd.read_csv(BUNDLED_DIR / PUBLISHED_RUNS, dtype=str, keep_default_na=False)


def _results(tmp_path, bundled, base_id, variants: dict) -> dict:
    """{variant id: result row} of the bundled row ``base_id`` with each variant's cells changed
    (``variants``: id -> {column: text}); the unchanged row is ``base``."""
    row = bundled[bundled.id == base_id]
    assert len(row) == 1, base_id
    frames = [row.assign(id="base")] + [row.assign(id=name, **cells) for name, cells in variants.items()]
    path = tmp_path / "runs.csv"
    pd.concat(frames).to_csv(path, index=False)
    return {r["id"]: r for r in validate_rows(read_runs(path)).to_dict("records")}


def test_a_framework_with_one_profile_and_no_version_is_predicted_on_that_profile(tmp_path, bundled):
    got = _results(tmp_path, bundled, ZERO3, {"unstated": {"framework_version": ""},
                                              "megatron_lm": {"framework": "megatron-lm", "framework_version": ""}})
    assert got["base"]["status"] == "ok"
    assert got["unstated"]["status"] == "ok", got["unstated"]["reason"]
    # deepspeed's only profile is the one its 2021 rows name: the same prediction
    assert got["unstated"]["predicted"] == got["base"]["predicted"]
    assert ("stack=deepspeed-2021 (deepspeed version not stated; the framework's only profile)"
            in got["unstated"]["assumptions"])
    # Megatron-LM's releases behave differently (2019, 2021, 2022): the row is skipped, the
    # releases named
    assert got["megatron_lm"]["status"] == "skipped"
    assert got["megatron_lm"]["reason"] == ("software stack: framework_version: megatron-lm needs a version "
                                            "(its stacks differ by release) (known: 2019, 2021, 2022)")


def test_a_hugging_face_id_or_checkpoint_name_reads_as_the_model_it_names(tmp_path, bundled):
    dense = _results(tmp_path, bundled, LLAMA_405B, {
        "hf_id": {"model": "meta-llama/Llama-3.1-405B"},
        "meta": {"model": "Meta-Llama-3.1-405B"},
        "instruct": {"model": "Llama 3.1 405B Instruct"}})
    assert dense["base"]["status"] == "ok"
    for name in ("hf_id", "meta", "instruct"):
        # the preset (and with it the Megatron-Bridge recipe for the model) is found: the same
        # prediction as the file's own spelling
        assert dense[name]["status"] == "ok", dense[name]["reason"]
        assert dense[name]["predicted"] == dense["base"]["predicted"], name
    moe = _results(tmp_path, bundled, QWEN_30B, {
        "hf_id": {"model": "Qwen/Qwen3-30B-A3B"},
        "base_ckpt": {"model": "Qwen3-30B-A3B-Base"},
        "unknown": {"model": "Foo-30B", "moe_experts": "128", "moe_topk": "8", "layers": "48", "hidden": "2048", "heads": "32", "kv_heads": "4",
                    "vocab": "151936", "ffn_hidden": "6144"}})
    assert moe["base"]["status"] == "ok"
    for name in ("hf_id", "base_ckpt"):
        assert moe[name]["status"] == "ok", moe[name]["reason"]
        assert moe[name]["predicted"] == moe["base"]["predicted"], name
    # a MoE row that states its layers still needs a preset: the reason says why, not that the
    # architecture is missing
    assert moe["unknown"]["status"] == "skipped"
    assert moe["unknown"]["reason"] == (
        "a mixture-of-experts row needs its model's preset (expert width, shared experts and leading dense "
        "layers are not columns of the file), and no model preset is named 'Foo-30B'")


def test_a_recipe_overlap_the_rows_layout_cannot_run_is_turned_off_not_a_skip(tmp_path, bundled):
    # Megatron-Bridge 26.08's (profile megatron-bridge) DeepSeek-V3 recipe overlaps the expert all-to-all
    # (--overlap-moe-expert-parallel-comm); Megatron-Core asserts against it with full
    # recomputation, so a row that recomputed in full cannot have run it
    got = _results(tmp_path, bundled, DEEPSEEK_V3, {"full": {"recompute": "full"}})
    assert got["base"]["status"] == "ok"
    assert got["full"]["status"] == "ok", got["full"]["reason"]
    assert ("ep_comm_overlap off (on in megatron-bridge's recipes, but recompute full with ep=64: "
            "Megatron-Core's combined 1F1B refuses full recomputation (recompute_granularity full, "
            "recompute_method, recompute_num_layers))") in got["full"]["assumptions"]
    # recomputing every layer's forward costs time: slower than the base row's selective reading
    assert 0 < got["full"]["predicted"] < got["base"]["predicted"]
    row = bundled[bundled.id == DEEPSEEK_V3].iloc[0].to_dict() | {"recompute": "full"}
    assert row_inputs(row).config.ep_comm_overlap is False
    assert row_inputs(bundled[bundled.id == DEEPSEEK_V3].iloc[0].to_dict()).config.ep_comm_overlap is True


def test_an_empty_gpu_count_is_the_product_of_the_stated_degrees(tmp_path, bundled):
    got = _results(tmp_path, bundled, LLAMA_405B, {"no_n": {"n_gpus": ""},
                                                   "no_n_no_dp": {"n_gpus": "", "dp": ""}})
    # dp 8 x tp 8 x pp 8 x cp 2 = 1,024 GPUs, the count the row states
    assert got["no_n"]["status"] == "ok", got["no_n"]["reason"]
    assert "n_gpus=1024 (dp*tp*pp*cp; the cell is empty)" in got["no_n"]["assumptions"]
    assert got["no_n"]["predicted"] == got["base"]["predicted"]
    assert got["no_n_no_dp"]["status"] == "skipped"
    assert got["no_n_no_dp"]["reason"] == "needed field(s) empty: n_gpus"


def test_precision_spellings_read_as_their_precision_and_others_name_the_precisions(tmp_path, bundled):
    got = _results(tmp_path, bundled, ZERO3, {"float16": {"dtype_norm": "float16"}, "half": {"dtype_norm": "half"},
                                              "amp": {"dtype_norm": "amp_fp16"}, "e4m3": {"dtype_norm": "e4m3"}})
    for name in ("float16", "half", "amp"):
        assert got[name]["status"] == "ok", got[name]["reason"]
        assert got[name]["predicted"] == got["base"]["predicted"], name
    assert got["e4m3"]["status"] == "skipped"
    assert got["e4m3"]["reason"] == ("dtype_norm 'e4m3' is not a precision (one of fp32, tf32, bf16, fp16, fp8, "
                                     "mxfp8, nvfp4)")
    bf = _results(tmp_path, bundled, LLAMA_405B, {"bf16": {"dtype_norm": "bf16"}, "bfloat16": {"dtype_norm": "bfloat16"}})
    assert bf["bfloat16"]["status"] == "ok" and bf["bfloat16"]["predicted"] == bf["bf16"]["predicted"]


def test_an_unknown_gpu_profile_suggests_the_catalog_s_close_names(tmp_path, bundled):
    got = _results(tmp_path, bundled, ZERO3, {"short": {"gpu_profile": "a100-sxm4-80gb"}})
    assert got["short"]["status"] == "skipped"
    assert got["short"]["reason"] == ("no GPU profile for 'a100-sxm4-80gb' (did you mean a100-sxm-80gb, "
                                      "h100-sxm-80gb, a100-sxm-40gb?)")


@pytest.mark.parametrize("gpu, system", [("mi300x", "mi300x-node"), ("mi250x", "frontier-mi250x")])
def test_amd_rows_run_on_their_usual_system_not_a_generic_node(bundled, gpu, system):
    row = bundled[bundled.id == ZERO3].iloc[0].to_dict() | {"gpu_profile": gpu, "gpu": gpu.upper()}
    inputs = row_inputs(row)
    assert inputs.cluster.name == system
    # mi300x-node: one 400 Gb/s NIC per GPU (ND MI300X v5); Frontier: 200 Gb/s Slingshot per package
    assert math.isclose(inputs.cluster.scaleout.bw_bytes_per_s * 8 / 1e9, {"mi300x": 400, "mi250x": 200}[gpu])


def test_a_predicted_row_the_memory_model_says_cannot_fit_is_flagged_in_the_table_and_the_json(tmp_path, bundled):
    import json

    from click.testing import CliRunner

    from paraplan.cli import main
    # Llama-3.1-405B unsharded on one H100 a replica (tp 1, pp 1, 512 data-parallel ranks, the
    # distributed optimizer): 405e9 x 2 bytes of bf16 weights alone are 810 GB against 80 GB
    row = bundled[bundled.id == LLAMA_405B]
    unfit = row.assign(id="unfit", tp="1", pp="1", cp="1", vpp="", dp="512", n_gpus="512")
    path = tmp_path / "runs.csv"
    pd.concat([row, unfit]).to_csv(path, index=False)
    out = tmp_path / "rows.json"
    res = CliRunner().invoke(main, ["validate", "published", str(path), "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    fits = {r["id"]: r["fits"] for r in json.loads(out.read_text())}
    assert fits == {LLAMA_405B: True, "unfit": False}
    table = CliRunner().invoke(main, ["validate", "published", str(path)]).output
    assert ("note: 1 predicted row ran, yet the memory model says it does not fit in the GPU's memory (fits false "
            "in --json/--csv; the step is priced as laid out): MBRIDGE 1") in table


def test_a_name_found_as_a_checkpoint_is_the_catalog_preset_whatever_the_working_directory_holds(
        tmp_path, bundled, monkeypatch):
    # a folder named like the preset (llama3.1-405b/ with another model's config.json) is not the
    # preset a Hugging Face id names: the id is looked up in the catalog only
    folder = tmp_path / "llama3.1-405b"
    folder.mkdir()
    (folder / "config.json").write_text(
        '{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, '
        '"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 512, '
        '"vocab_size": 1000, "max_position_embeddings": 2048}')
    monkeypatch.chdir(tmp_path)
    got = _results(tmp_path, bundled, LLAMA_405B, {"hf_id": {"model": "meta-llama/Llama-3.1-405B"}})
    assert got["hf_id"]["status"] == "ok", got["hf_id"]["reason"]
    assert got["hf_id"]["predicted"] == got["base"]["predicted"]
