"""Hugging Face configs of Qwen's hybrid linear-attention models (model_specs/hf_qwen_next.py)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cost_models.params import total_params
from hardware_specs.errors import InputError
from model_specs import load_model, model_from_hf_config

# Qwen/Qwen3.5-397B-A17B config.json, trimmed to the keys the loader reads, with the values the
# qwen3.5-397b-a17b preset cites from it (ai-dynamo/aiconfigurator@095f58a aic-core/src/
# aiconfigurator_core/model_configs/Qwen--Qwen3.5-397B-A17B_config.json)
QWEN3_5_397B = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe", "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen3_5_moe_text", "num_hidden_layers": 60, "full_attention_interval": 4,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 15,
        "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256,
        "attn_output_gate": True, "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 64,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "float32", "num_experts": 512,
        "num_experts_per_tok": 10, "moe_intermediate_size": 1024, "shared_expert_intermediate_size": 1024,
        "vocab_size": 248320, "max_position_embeddings": 262144, "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                            "mrope_interleaved": True, "mrope_section": [11, 11, 10]},
    },
    "vision_config": {"model_type": "qwen3_5_moe"},
}
# Qwen/Qwen3-Next-80B-A3B-Instruct config.json (flat: no text_config, no layer_types, no MTP count)
QWEN3_NEXT_80B = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48,
    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "num_experts": 512, "num_experts_per_tok": 10,
    "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "full_attention_interval": 4,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4, "vocab_size": 151936, "max_position_embeddings": 262144, "partial_rotary_factor": 0.25,
    "rope_theta": 10000000, "norm_topk_prob": True, "tie_word_embeddings": False, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "intermediate_size": 5120,
}


def _layer_counts(spec):
    linear = round(spec.linear_attention.layer_fraction * spec.num_layers)
    return linear, spec.num_layers - linear, spec.num_moe_layers


def test_hf_qwen3_5_config_loads_as_the_preset():
    """The wrapper (qwen3_5_moe) is unwrapped to its text_config; the spec is the preset's but for
    the source: dropout off in both (the preset states the checkpoint's attention_dropout 0.0)."""
    preset = load_model("qwen3.5-397b-a17b")
    spec = model_from_hf_config(QWEN3_5_397B, name=preset.name, seq_len=preset.seq_len)
    assert not spec.hidden_dropout and not spec.attention_dropout
    assert replace(spec, source="") == replace(preset, source="")
    assert "text_config of a qwen3_5_moe checkpoint" in spec.source
    assert _layer_counts(spec) == (45, 15, 60)
    # the text_config alone reads the same
    assert model_from_hf_config(QWEN3_5_397B["text_config"], name=preset.name, seq_len=preset.seq_len) == \
        replace(spec, source="Hugging Face config (dict)")


def test_hf_qwen3_5_parameters_match_the_published_397b_a17b():
    """395.84B total / 16.85B active against the published 397B / 17B. Left out: the softmax layers'
    output gate (15 x 4096 x 32*256 = 0.50B, total and active) and the vision encoder; "A17B" is
    rounded to whole billions. So total within 1% (the gate is 0.13%), active within 3% (16.5 to 17.5
    rounds to 17)."""
    spec = model_from_hf_config(QWEN3_5_397B)
    assert total_params(spec) / 397e9 == pytest.approx(1.0, rel=0.01)
    assert total_params(spec, active=True) / 17e9 == pytest.approx(1.0, rel=0.03)


def test_hf_qwen3_next_80b_layers_and_parameters():
    """Layer i is softmax attention when (i + 1) % 4 == 0: 36 linear, 12 softmax, all 48 MoE.
    Read: 79.57B total, 3.77B active, of which the embedding and LM head are 0.62B. Qwen publishes
    80B total and 3B activated ("A3B", about 3.7%), whole billions; third-party listings give
    79.0B without the embeddings. 3.77B does not round to 3B, 3.15B without the embeddings does,
    so the active count is checked without them (Qwen3.5-397B's "A17B" instead includes them:
    16.85B read). Left out: the output gate (12 x 2048 x 16*256 = 0.10B). Tolerances: total within
    1%; the rounded figures within half a billion (what rounds to them)."""
    from cost_models.params import embedding_params, lm_head_params
    spec = model_from_hf_config(QWEN3_NEXT_80B)
    assert _layer_counts(spec) == (36, 12, 48)
    la = spec.linear_attention
    assert (la.num_key_heads, la.key_head_dim, la.num_value_heads, la.value_head_dim, la.conv_kernel) == \
        (16, 128, 32, 128, 4)
    assert la.state_bytes == 4.0       # no mamba_ssm_dtype: the spec's fp32 default
    assert (spec.moe.num_experts, spec.moe.top_k, spec.moe.expert_ffn_hidden_size) == (512, 10, 512)
    assert (spec.moe.num_shared_experts, spec.moe.shared_expert_ffn_hidden_size) == (1, 512)
    assert (spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.ffn_hidden_size) == (16, 2, 256, 5120)
    assert (spec.rotary_fraction, spec.rope_theta, spec.max_context_tokens, spec.mtp_layers) == (0.25, 1e7, 262144, 1)
    assert spec.tied_embeddings is False and spec.seq_len == 8192
    assert total_params(spec) / 80e9 == pytest.approx(1.0, rel=0.01)
    embeddings = embedding_params(spec) + lm_head_params(spec)
    assert round((total_params(spec) - embeddings) / 1e9) == 79
    assert round((total_params(spec, active=True) - embeddings) / 1e9) == 3


def test_hf_qwen3_next_layer_types_where_given_decide_the_layout():
    kinds = ["linear_attention", "full_attention"] * 24
    spec = model_from_hf_config({**QWEN3_NEXT_80B, "layer_types": kinds, "full_attention_interval": 2})
    assert _layer_counts(spec)[:2] == (24, 24)
    assert model_from_hf_config({**QWEN3_NEXT_80B, "num_nextn_predict_layers": 0}).mtp_layers == 0


@pytest.mark.parametrize("change, key", [
    ({"layer_types": ["linear_attention", "full_attention"] * 24}, "layer_types"),      # interval says 4
    ({"layer_types": ["sliding_attention"] * 48}, "layer_types"),
    ({"full_attention_interval": 0}, "full_attention_interval"),
    ({"full_attention_interval": 1000}, "layer_types"),                                 # every layer linear
    ({"linear_num_value_heads": 24, "linear_num_key_heads": 16}, "linear_num_value_heads"),
    ({"mamba_ssm_dtype": "float64"}, "mamba_ssm_dtype"),
    ({"num_nextn_predict_layers": -1}, "num_nextn_predict_layers"),
    ({"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 0}, "use_sliding_window"),
    ({"linear_key_head_dim": None}, "linear_key_head_dim"),
])
def test_hf_qwen3_next_unknown_or_contradictory_fields_are_one_line_input_errors(change, key):
    with pytest.raises(InputError) as err:
        model_from_hf_config({**QWEN3_NEXT_80B, **change})
    assert err.value.field == f"hf_config.{key}"
    assert "\n" not in str(err.value)


def test_hf_qwen3_5_dense_text_config_reads_its_intermediate_size():
    text = {k: v for k, v in QWEN3_5_397B["text_config"].items()
            if k not in ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size")}
    spec = model_from_hf_config({**text, "model_type": "qwen3_5_text", "intermediate_size": 17408})
    assert spec.moe is None and spec.ffn_hidden_size == 17408 and spec.linear_attention.layer_fraction == 0.75


def test_hf_qwen3_5_config_file_loads_through_load_model(tmp_path):
    folder = tmp_path / "Qwen3.5-397B-A17B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN3_5_397B))
    assert load_model(folder).linear_attention == load_model("qwen3.5-397b-a17b").linear_attention
