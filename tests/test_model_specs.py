"""Model catalog (YAML presets) and Hugging Face config loading."""
from __future__ import annotations

import json

import pytest

from hardware_specs.errors import InputError
from model_specs import (MLASpec, ModelSpec, MoESpec, list_models, load_model, model_from_dict,
                         model_from_hf_config)
from model_specs.catalog import _canonical

# --- Hugging Face configs with the published values (trimmed to the keys the loader reads) ---------

LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rope_scaling": {"factor": 8.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": False,
}
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
    "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 32000,
}
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "decoder_sparse_step": 1,
    "head_dim": 128, "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "moe_intermediate_size": 768, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "sliding_window": None, "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
    "norm_topk_prob": True,
}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "first_k_dense_replace": 3, "scoring_func": "sigmoid",
    "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "rope_scaling": {"factor": 40, "original_max_position_embeddings": 4096, "type": "yarn"},
    "tie_word_embeddings": False, "v_head_dim": 128, "vocab_size": 129280,
    "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
}
# moonshotai/Kimi-K2-Instruct config.json (model_type kimi_k2, architectures DeepseekV3ForCausalLM),
# as mirrored in ai-dynamo/aiconfigurator@095f58a aic-core/src/aiconfigurator_core/model_configs/
KIMI_K2 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "first_k_dense_replace": 1,
    "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 131072,
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_routed_experts": 384, "n_shared_experts": 1,
    "num_attention_heads": 64, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 64,
    "num_nextn_predict_layers": 0, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "scoring_func": "sigmoid", "tie_word_embeddings": False, "v_head_dim": 128, "vocab_size": 163840,
    "topk_method": "noaux_tc", "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.827, "norm_topk_prob": True,
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}
GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "experts_per_token": 4, "head_dim": 64,
    "hidden_size": 2880, "initial_context_length": 4096, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 18, "max_position_embeddings": 131072,
    "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "num_local_experts": 128, "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False,
    "vocab_size": 201088,
}
QWEN2_57B_A14B = {
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "decoder_sparse_step": 1,
    "hidden_size": 3584, "intermediate_size": 18944, "max_position_embeddings": 131072,
    "max_window_layers": 28, "moe_intermediate_size": 2560, "num_attention_heads": 28, "num_experts": 64,
    "num_experts_per_tok": 8, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "shared_expert_intermediate_size": 20480, "sliding_window": 131072, "tie_word_embeddings": False,
    "use_sliding_window": False, "vocab_size": 151936, "norm_topk_prob": False,
}
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
        "n_inner": None, "vocab_size": 50257}


# --- presets --------------------------------------------------------------------------------------

def test_every_preset_loads_and_cites_a_source():
    names = list_models()
    assert len(names) >= 50
    for name in names:
        spec = load_model(name)
        assert isinstance(spec, ModelSpec)
        assert spec.name == name
        assert len(spec.source) > 20, f"{name} has no source"


def test_preset_names_stay_distinct_when_separators_are_ignored():
    names = list_models()
    assert len({_canonical(n) for n in names}) == len(names)


@pytest.mark.parametrize("name", [
    "gpt3-125m", "gpt3-350m", "gpt3-760m", "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b",
    "megatron-1.7b", "megatron-3.6b", "megatron-7.5b", "megatron-18b", "megatron-39b", "megatron-76b",
    "megatron-145b", "megatron-310b", "megatron-530b", "megatron-1t", "gpt-22b", "gpt-175b", "mt-nlg-530b",
    "gpt-1t", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-8b",
    "llama3.1-70b", "llama3.1-405b", "bloom-176b", "opt-175b", "mpt-7b", "mpt-30b", "nemotron-4-15b",
    "nemotron-4-340b", "mixtral-8x7b", "mixtral-8x22b", "deepseek-v2", "deepseek-v3", "qwen2-57b-a14b",
    "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b", "gpt-oss-120b", "grok-1",
    "llmfoundry-125m", "llmfoundry-350m", "llmfoundry-760m", "llmfoundry-1b", "llmfoundry-3b",
    "llmfoundry-7b", "llmfoundry-13b", "llmfoundry-30b", "llmfoundry-70b",
])
def test_requested_preset_exists(name):
    assert name in list_models()


def test_gpt3_presets_have_table_2_1_shapes():
    shapes = {"gpt3-125m": (12, 768, 12), "gpt3-350m": (24, 1024, 16), "gpt3-760m": (24, 1536, 16),
              "gpt3-2.7b": (32, 2560, 32), "gpt3-6.7b": (32, 4096, 32), "gpt3-175b": (96, 12288, 96)}
    for name, (layers, hidden, heads) in shapes.items():
        spec = load_model(name)
        assert (spec.num_layers, spec.hidden_size, spec.num_heads) == (layers, hidden, heads)
        assert spec.ffn_hidden_size == 4 * hidden
        assert (spec.vocab_size, spec.seq_len, spec.gated_mlp) == (50257, 2048, False)
    assert load_model("gpt3-13b").head_dim == 128 and load_model("gpt3-13b").hidden_size == 5140


def test_megatron_series_matches_narayanan_table_1():
    table = {"1.7b": (24, 2304, 24), "3.6b": (32, 3072, 30), "7.5b": (32, 4096, 36), "18b": (48, 6144, 40),
             "39b": (64, 8192, 48), "76b": (80, 10240, 60), "145b": (96, 12288, 80),
             "310b": (128, 16384, 96), "530b": (128, 20480, 105), "1t": (160, 25600, 128)}
    for size, (heads, hidden, layers) in table.items():
        spec = load_model(f"megatron-{size}")
        assert (spec.num_heads, spec.hidden_size, spec.num_layers) == (heads, hidden, layers)
        assert (spec.vocab_size, spec.seq_len, spec.ffn_hidden_size) == (51200, 2048, 4 * hidden)


def test_korthikanti_models_have_table_3_shapes():
    assert (lambda s: (s.num_layers, s.hidden_size, s.num_heads))(load_model("gpt-22b")) == (48, 6144, 64)
    assert (lambda s: (s.num_layers, s.hidden_size, s.num_heads))(load_model("mt-nlg-530b")) == (105, 20480, 128)
    assert (lambda s: (s.num_layers, s.hidden_size, s.num_heads))(load_model("gpt-1t")) == (128, 25600, 160)


def test_llama31_405b_has_published_shape():
    spec = load_model("llama3.1-405b")
    assert (spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads) == (126, 16384, 128, 8)
    assert (spec.ffn_hidden_size, spec.vocab_size, spec.gated_mlp) == (53248, 128256, True)
    assert not spec.is_moe


def test_deepseek_v3_has_mla_and_256_experts_with_3_dense_layers():
    spec = load_model("deepseek-v3")
    assert (spec.num_layers, spec.hidden_size, spec.num_heads, spec.vocab_size) == (61, 7168, 128, 129280)
    assert spec.moe == MoESpec(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, num_shared_experts=1,
                               shared_expert_ffn_hidden_size=2048, first_dense_layers=3,
                               dense_ffn_hidden_size=18432, router_score="sigmoid", expert_bias=True,
                               topk_scaling_factor=2.5, num_groups=8, group_topk=4)
    assert spec.mla == MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                               v_head_dim=128)
    assert (spec.num_moe_layers, spec.num_dense_layers) == (58, 3)


def test_nemotron_4_340b_is_a_plain_mlp_gqa_model():
    spec = load_model("nemotron-4-340b")
    assert (spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads) == (96, 18432, 96, 8)
    assert (spec.ffn_hidden_size, spec.vocab_size, spec.gated_mlp) == (73728, 256000, False)


def test_bloom_and_grok_presets():
    bloom = load_model("bloom-176b")
    assert (bloom.num_layers, bloom.hidden_size, bloom.num_heads, bloom.vocab_size) == (70, 14336, 112, 250880)
    grok = load_model("grok-1")
    assert (grok.num_layers, grok.hidden_size, grok.num_heads, grok.num_kv_heads) == (64, 6144, 48, 8)
    assert (grok.moe.num_experts, grok.moe.top_k, grok.moe.expert_ffn_hidden_size) == (8, 2, 32768)
    assert grok.vocab_size == 131072


def test_llmfoundry_sizes_match_the_validation_file():
    for size, (layers, hidden, heads) in {"125m": (12, 768, 12), "760m": (24, 1536, 12), "3b": (32, 2560, 20),
                                          "30b": (48, 7168, 56), "70b": (80, 8192, 64)}.items():
        spec = load_model(f"llmfoundry-{size}")
        assert (spec.num_layers, spec.hidden_size, spec.num_heads) == (layers, hidden, heads)
        assert (spec.vocab_size, spec.ffn_hidden_size) == (50368, 4 * hidden)
        assert spec.max_context_tokens == 2048        # the pretrain yaml's max_seq_len
    assert (load_model("mpt-7b").max_context_tokens, load_model("mpt-30b").max_context_tokens) == (2048, 8192)


def test_preset_matches_its_hugging_face_config():
    for preset, config in (("mixtral-8x7b", MIXTRAL_8X7B), ("qwen3-30b-a3b", QWEN3_30B_A3B),
                           ("deepseek-v3", DEEPSEEK_V3), ("gpt-oss-120b", GPT_OSS_120B),
                           ("qwen2-57b-a14b", QWEN2_57B_A14B), ("kimi-k2", KIMI_K2)):
        from_yaml = load_model(preset)
        from_hf = model_from_hf_config(config, name=preset, seq_len=from_yaml.seq_len)
        for field in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_hidden_size",
                      "vocab_size", "gated_mlp", "tied_embeddings", "moe", "mla", "sliding_window",
                      "sliding_window_layer_fraction", "mtp_layers", "glu_clamp_limit"):
            assert getattr(from_hf, field) == getattr(from_yaml, field), (preset, field)


def test_hf_norm_topk_prob_is_read_and_its_absence_is_the_familys_transformers_default():
    """config.json ``norm_topk_prob`` says whether the chosen experts' weights are divided by their
    sum (topk_renormalized); absent, transformers' config default: false for Qwen2-MoE / Qwen3-MoE
    and DeepSeek-V2, true for DeepSeek-V3 / Kimi K2; Mixtral and gpt-oss always renormalise (softmax
    over the chosen), Llama 4 never (the sigmoid of its top-1). A non-boolean is refused."""
    def renorm(config):
        return model_from_hf_config(config).moe.topk_renormalized

    without = {k: v for k, v in QWEN3_30B_A3B.items() if k != "norm_topk_prob"}
    assert (renorm(QWEN3_30B_A3B), renorm(QWEN2_57B_A14B), renorm(without)) == (True, False, False)
    assert renorm({**QWEN2_57B_A14B, "norm_topk_prob": True}) is True
    v3 = {k: v for k, v in DEEPSEEK_V3.items() if k != "norm_topk_prob"}
    assert (renorm(DEEPSEEK_V3), renorm(v3), renorm({**DEEPSEEK_V3, "norm_topk_prob": False})) == (True, True, False)
    kimi = {k: v for k, v in KIMI_K2.items() if k != "norm_topk_prob"}
    assert renorm(kimi) is True
    v2 = {**v3, "model_type": "deepseek_v2", "scoring_func": "softmax", "topk_method": "group_limited_greedy",
          "routed_scaling_factor": 16.0, "n_group": 8, "topk_group": 4}
    assert renorm(v2) is False and renorm({**v2, "norm_topk_prob": True}) is True
    assert renorm(MIXTRAL_8X7B) is True and renorm(GPT_OSS_120B) is True and renorm(LLAMA4_MAVERICK) is False
    for bad in ("false", 0, [True]):
        with pytest.raises(InputError) as err:
            model_from_hf_config({**QWEN3_30B_A3B, "norm_topk_prob": bad})
        assert err.value.field.endswith("norm_topk_prob")


def test_topk_renormalized_must_be_a_bool_and_the_presets_state_their_configs():
    """The MoESpec field and its YAML key take true / false only; the presets follow their public
    config.json norm_topk_prob (DeepSeek-V2 and Qwen2-57B-A14B false, Qwen3 / DeepSeek-V3 / Kimi K2
    true) or their modelling code (Grok-1 model.py and Llama 4: not renormalised)."""
    from dataclasses import replace
    moe = load_model("mixtral-8x7b").moe
    for bad in ("yes", 1, None):
        with pytest.raises(InputError) as err:
            replace(moe, topk_renormalized=bad)
        assert err.value.field == "moe.topk_renormalized"
    assert MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=64).topk_renormalized is True
    states = {name: load_model(name).moe.topk_renormalized for name in (
        "deepseek-v2", "qwen2-57b-a14b", "grok-1", "llama4-scout", "llama4-maverick", "qwen3-30b-a3b",
        "qwen3-235b-a22b", "deepseek-v3", "deepseek-r1", "kimi-k2", "kimi-k2.5", "glm-5", "mixtral-8x7b")}
    assert [n for n, v in states.items() if not v] == ["deepseek-v2", "qwen2-57b-a14b", "grok-1", "llama4-scout",
                                                      "llama4-maverick"]
    v2 = load_model("deepseek-v2").moe
    assert (v2.router_score, v2.topk_scaling_factor, v2.num_groups, v2.group_topk) == ("softmax", 16.0, 8, 3)


def test_names_are_case_and_separator_insensitive():
    assert load_model("LLAMA3.1-405B").name == "llama3.1-405b"
    assert load_model("LLAMA3.1_405B").name == "llama3.1-405b"
    assert load_model("DeepSeekV3").name == "deepseek-v3"
    assert load_model("Qwen3_235B_a22B").name == "qwen3-235b-a22b"


# --- Hugging Face configs ---------------------------------------------------------------------------

def test_hf_llama_config_loads_with_pretraining_sequence_length():
    spec = model_from_hf_config(LLAMA31_8B, name="l8")
    assert (spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads) == (32, 4096, 32, 8)
    assert (spec.ffn_hidden_size, spec.vocab_size, spec.head_dim) == (14336, 128256, 128)
    assert spec.gated_mlp and not spec.tied_embeddings and spec.moe is None
    assert spec.seq_len == 8192          # rope_scaling.original_max_position_embeddings, not 131072


def test_hf_config_without_model_type_is_refused_for_that_not_for_its_first_key(tmp_path):
    """A config.json stripped of model_type and architectures was read as a paraplan preset and
    refused as "unknown key intermediate_size"; the error now names the missing key and the fix."""
    data = {k: v for k, v in LLAMA31_8B.items() if k not in ("model_type", "architectures")}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        load_model(str(path))
    assert err.value.field.endswith(".model_type")
    assert "model_type" in str(err.value) and "unknown key" not in str(err.value)
    path.write_text(json.dumps({**data, "model_type": "llama"}))
    assert load_model(str(path)).num_layers == 32


def test_hf_seq_len_caps_long_contexts_and_accepts_override():
    assert model_from_hf_config(QWEN3_30B_A3B).seq_len == 8192
    assert model_from_hf_config(QWEN3_30B_A3B, seq_len=32768).seq_len == 32768
    assert model_from_hf_config(GPT2).seq_len == 1024


def test_hf_mixtral_config_loads_as_8_experts_top_2():
    spec = model_from_hf_config(MIXTRAL_8X7B)
    assert spec.moe == MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=14336)
    assert (spec.num_layers, spec.num_kv_heads, spec.sliding_window) == (32, 8, 0)


def test_hf_qwen3_moe_config_uses_explicit_head_dim():
    spec = model_from_hf_config(QWEN3_30B_A3B)
    assert spec.head_dim == 128              # 2048 / 32 would be 64
    assert (spec.num_layers, spec.num_heads, spec.num_kv_heads) == (48, 32, 4)
    assert (spec.moe.num_experts, spec.moe.top_k, spec.moe.expert_ffn_hidden_size) == (128, 8, 768)
    assert (spec.moe.num_shared_experts, spec.num_moe_layers, spec.sliding_window) == (0, 48, 0)


def test_hf_qwen2_moe_shared_expert_and_sparse_step():
    spec = model_from_hf_config(QWEN2_57B_A14B)
    assert (spec.moe.num_shared_experts, spec.moe.shared_expert_ffn_hidden_size) == (1, 20480)
    assert spec.sliding_window == 0          # use_sliding_window is false
    every_other = model_from_hf_config({**QWEN2_57B_A14B, "decoder_sparse_step": 2})
    assert every_other.num_moe_layers == 14
    leading_dense = model_from_hf_config({**QWEN2_57B_A14B, "mlp_only_layers": [0, 1]})
    assert (leading_dense.moe.first_dense_layers, leading_dense.num_moe_layers) == (2, 26)
    scattered = model_from_hf_config({**QWEN2_57B_A14B, "mlp_only_layers": [3, 10, 20]})
    assert scattered.num_moe_layers == 25


def test_hf_qwen2_moe_gates_its_shared_expert_and_the_gate_is_counted():
    """transformers' Qwen2MoeSparseMoeBlock builds ``shared_expert_gate = nn.Linear(hidden_size, 1,
    bias=False)`` unconditionally (no config key) and scales the shared expert's output by its
    sigmoid; Qwen3-MoE has no shared expert, so no gate. The gate is ``hidden`` parameters per MoE
    layer: Qwen2-57B-A14B's 28 MoE layers x 3,584 = 100,352, in the total and the active count."""
    from dataclasses import replace
    from cost_models.params import total_params
    spec = model_from_hf_config(QWEN2_57B_A14B)
    assert spec.moe.shared_expert_gate is True and load_model("qwen2-57b-a14b").moe.shared_expert_gate is True
    assert model_from_hf_config(QWEN3_30B_A3B).moe.shared_expert_gate is False
    ungated = replace(spec, moe=replace(spec.moe, shared_expert_gate=False))
    assert total_params(spec) - total_params(ungated) == 28 * 3584
    assert total_params(spec, active=True) - total_params(ungated, active=True) == 28 * 3584


def test_a_shared_expert_gate_without_a_shared_expert_is_refused():
    with pytest.raises(InputError) as err:
        MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=1024, shared_expert_gate=True)
    assert err.value.field == "moe.shared_expert_gate"


def test_hf_deepseek_v3_config_loads_mla_and_moe_layout():
    spec = model_from_hf_config(DEEPSEEK_V3)
    assert spec.mla == MLASpec(1536, 512, 128, 64, 128)
    assert (spec.moe.num_experts, spec.moe.top_k, spec.moe.num_shared_experts) == (256, 8, 1)
    assert (spec.moe.first_dense_layers, spec.num_moe_layers, spec.moe.dense_ffn_hidden_size) == (3, 58, 18432)
    assert (spec.num_kv_heads, spec.head_dim, spec.seq_len) == (128, 192, 4096)
    assert spec.mtp_layers == 1                      # num_nextn_predict_layers
    assert model_from_hf_config({**DEEPSEEK_V3, "num_nextn_predict_layers": 0}).mtp_layers == 0


def test_hf_kimi_k2_config_loads_as_the_deepseek_v3_architecture():
    """Kimi K2's model_type is kimi_k2, its architecture DeepseekV3ForCausalLM; Kimi Team 2025
    (arXiv 2507.20534, section 2.3): 1.04T total, 32.6B activated parameters."""
    from cost_models.params import total_params
    spec = model_from_hf_config(KIMI_K2)
    assert spec.mla == MLASpec(1536, 512, 128, 64, 128)
    assert (spec.moe.num_experts, spec.moe.top_k, spec.moe.num_shared_experts) == (384, 8, 1)
    assert (spec.moe.first_dense_layers, spec.num_moe_layers, spec.mtp_layers) == (1, 60, 0)
    assert spec.checkpoint_format == "fp8_block"
    assert round(total_params(spec) / 1e9, 2) == 1026.41               # 1.3% under 1.04T
    assert round(total_params(spec, active=True) / 1e9, 2) == 32.86    # 0.8% over 32.6B


def test_hf_multimodal_wrapper_reads_its_text_config():
    """A vision-language checkpoint names the wrapper in model_type and nests the language model
    under text_config (moonshotai/Kimi-K2.5: kimi_k25 around kimi_k2; nvidia/Kimi-K2.5-NVFP4
    states the NVFP4 quantization_config on the wrapper, attention left 16-bit)."""
    text = {k: v for k, v in KIMI_K2.items() if k != "quantization_config"}
    wrapped = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25", "text_config": text,
               "vision_config": {"model_type": "moonvit", "hidden_size": 1152},
               "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                       "ignore": ["language_model.model.layers.0.self_attn*"]}}
    spec = model_from_hf_config(wrapped)
    assert spec.moe == model_from_hf_config(KIMI_K2).moe and spec.mla == model_from_hf_config(KIMI_K2).mla
    assert (spec.checkpoint_format, spec.expert_checkpoint_format) == ("", "nvfp4")
    assert spec.source.endswith("(text_config of a kimi_k25 checkpoint; its vision encoder is not modelled)")
    assert "vision" not in model_from_hf_config(KIMI_K2).source
    # a wrapper whose text model this reader does not know is refused by the text model's type
    with pytest.raises(InputError, match="unsupported model_type 'gemma3_text'"):
        model_from_hf_config({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}})
    # one whose text_config names no type is refused by the wrapper's (nvidia/MiniMax-M3-NVFP4)
    with pytest.raises(InputError, match="unsupported model_type 'minimax_m3_vl'"):
        model_from_hf_config({"model_type": "minimax_m3_vl", "text_config": {"hidden_size": 6144}})


# meta-llama/Llama-4-Maverick-17B-128E-Instruct config.json (text_config; the vision_config left out),
# as mirrored in ai-dynamo/aiconfigurator@64c5ddb aic-core/src/aiconfigurator_core/model_configs/
LLAMA4_MAVERICK = {
    "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
    "text_config": {
        "attention_bias": False, "attention_chunk_size": 8192, "attention_dropout": 0.0, "head_dim": 128,
        "hidden_size": 5120, "interleave_moe_layer_step": 2, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
        "max_position_embeddings": 1048576, "model_type": "llama4_text", "num_attention_heads": 40,
        "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 128,
        "rope_scaling": None, "rope_theta": 500000.0, "use_qk_norm": False, "vocab_size": 202048},
}


def test_hf_llama4_config_loads_as_the_presets():
    """Llama 4 Maverick: MoE on every 2nd layer from layer 1 (128 experts + 1 shared, 8192 wide),
    dense MLP 16384 elsewhere, 3 of 4 layers chunked (8192); Meta: 400B total / 17B active with the
    vision encoder; the llama4-maverick preset gives 400.71B / 17.18B. Scout: every layer MoE, 16
    experts (rope_scaling llama3 x16): 107.77B / 17.17B (Meta: 109B / 17B with vision)."""
    from cost_models.params import total_params
    fields = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_hidden_size", "vocab_size",
              "tied_embeddings", "moe", "sliding_window", "sliding_window_layer_fraction", "max_context_tokens")
    maverick = model_from_hf_config(LLAMA4_MAVERICK)
    for field in fields:
        assert getattr(maverick, field) == getattr(load_model("llama4-maverick"), field), field
    assert (maverick.moe.first_dense_layers, maverick.moe.moe_layer_frequency, maverick.num_moe_layers) == (1, 2, 24)
    assert round(total_params(maverick) / 1e9, 2) == 400.71
    assert round(total_params(maverick, active=True) / 1e9, 2) == 17.18
    scout_text = {**LLAMA4_MAVERICK["text_config"], "interleave_moe_layer_step": 1, "num_local_experts": 16,
                  "max_position_embeddings": 10485760, "use_qk_norm": True,
                  "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
    scout = model_from_hf_config({**LLAMA4_MAVERICK, "text_config": scout_text})
    for field in fields:
        assert getattr(scout, field) == getattr(load_model("llama4-scout"), field), field
    assert round(total_params(scout) / 1e9, 2) == 107.77
    # no_rope_layers, where given, says which layers are chunked (1 = RoPE, chunked)
    flags = [1, 0] * 24
    assert model_from_hf_config({**scout_text, "no_rope_layers": flags}).sliding_window_layer_fraction == 0.5
    with pytest.raises(InputError, match="no_rope_layers"):
        model_from_hf_config({**scout_text, "no_rope_layers": [1, 0]})


# nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json, as mirrored in ai-dynamo/aiconfigurator@095f58a
# aic-core/src/aiconfigurator_core/model_configs/ (time_step_limit as written there: [0.0, Infinity]
# in the Nemotron-H-56B and Nemotron 3 Super files)
NEMOTRON_3_NANO = """{
  "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "chunk_size": 128, "conv_kernel": 4,
  "head_dim": 128, "hidden_size": 2688, "intermediate_size": 1856, "mamba_head_dim": 64, "mamba_num_heads": 64,
  "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
  "max_position_embeddings": 262144, "mlp_hidden_act": "relu2", "moe_intermediate_size": 1856,
  "moe_shared_expert_intermediate_size": 3712, "n_groups": 8, "n_routed_experts": 128, "n_shared_experts": 1,
  "num_attention_heads": 32, "num_experts_per_tok": 6, "num_hidden_layers": 52, "num_key_value_heads": 2,
  "ssm_state_size": 128, "tie_word_embeddings": false, "time_step_limit": [0.0, Infinity], "vocab_size": 131072,
  "n_group": 1, "topk_group": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5
}"""


def test_hf_nemotron_h_config_loads_as_the_preset(tmp_path):
    """Nemotron 3 Nano 30B-A3B (NVIDIA model card: 31.6B total, 3.2B active, 3.6B with embeddings),
    read from a file that holds Infinity as real Nemotron-H configs do (was refused as not JSON);
    the nemotron-3-nano preset's spec. Newer configs (Nemotron 3 Ultra) list layers_block_type."""
    from dataclasses import replace
    from cost_models.params import total_params
    folder = tmp_path / "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
    folder.mkdir()
    (folder / "config.json").write_text(NEMOTRON_3_NANO)
    spec = load_model(folder)
    # the preset states the config's context too (max_position_embeddings 262144)
    assert spec.max_context_tokens == 262144
    assert replace(spec, name="nemotron-3-nano", source="") == replace(load_model("nemotron-3-nano"), source="")
    assert (round(total_params(spec) / 1e9, 2), round(total_params(spec, active=True) / 1e9, 2)) == (31.58, 3.58)
    data = json.loads(NEMOTRON_3_NANO.replace("Infinity", "1e308"))
    blocks = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    by_list = {**{k: v for k, v in data.items() if k != "hybrid_override_pattern"},
               "layers_block_type": [blocks[c] for c in data["hybrid_override_pattern"]]}
    assert model_from_hf_config(by_list).hybrid_pattern == data["hybrid_override_pattern"]
    # Nemotron 3 Super / Ultra carry an MTP block the spec cannot hold: said beside the source
    assert "multi-token-prediction block is not modelled" not in model_from_hf_config(by_list).source
    assert model_from_hf_config({**by_list, "num_nextn_predict_layers": 1}).source.endswith(
        "(its multi-token-prediction block is not modelled)")
    with pytest.raises(InputError, match="layers_block_type"):
        model_from_hf_config({**by_list, "layers_block_type": ["mamba", "gdn"] * 26})
    # a preset JSON file (not a Hugging Face config) still refuses Infinity
    (tmp_path / "tiny.json").write_text('{"num_layers": 2, "hidden_size": 64, "num_heads": 4, '
                                        '"ffn_hidden_size": Infinity, "vocab_size": 100}')
    with pytest.raises(InputError, match="Infinity is not a JSON number"):
        load_model(tmp_path / "tiny.json")


def test_hf_phi3_and_olmo2_configs_load_as_llama_layouts():
    """microsoft/Phi-3-mini-4k-instruct config.json (model_type phi3: hidden 3072, 32 layers, 32 heads,
    intermediate 8192, vocab 32064, sliding_window 2047): 3.82B (model card "3.8B"; 3,821,079,552);
    microsoft/phi-4 (phi3: hidden 5120, 40 layers, 40 heads / 10 KV, intermediate 17920, vocab 100352):
    14.66B (model card "14B"); allenai/OLMo-2-1124-7B (olmo2: hidden 4096, 32 layers, 32 heads,
    intermediate 11008, vocab 100352): 7.30B (model card 7B); the 7,298,617,344 weights of its checkpoint
    less the 2 x 4096 x 32 = 262,144 q/k norm weights, which are not counted."""
    from cost_models.params import total_params
    phi3 = {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064,
            "max_position_embeddings": 4096, "sliding_window": 2047, "tie_word_embeddings": False}
    spec = model_from_hf_config(phi3)
    assert (spec.sliding_window, spec.sliding_window_layer_fraction) == (2047, 1.0)
    assert total_params(spec) == 3_821_079_552
    phi4 = {**phi3, "hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40, "num_attention_heads": 40,
            "num_key_value_heads": 10, "vocab_size": 100352, "max_position_embeddings": 16384, "sliding_window": None}
    assert round(total_params(model_from_hf_config(phi4)) / 1e9, 2) == 14.66
    olmo2 = {"model_type": "olmo2", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100352,
             "max_position_embeddings": 4096, "tie_word_embeddings": False}
    assert total_params(model_from_hf_config(olmo2)) == 7_298_617_344 - 262_144


def test_hf_phi3_long_context_trains_at_its_original_context():
    """microsoft/Phi-3-mini-128k-instruct config.json states original_max_position_embeddings 4096
    beside max_position_embeddings 131072 (not inside its longrope rope_scaling): the default
    training sequence is the 4,096-token pre-training context, the served context 131,072."""
    phi3_128k = {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064,
                 "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
                 "rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}}
    spec = model_from_hf_config(phi3_128k)
    assert (spec.seq_len, spec.max_context_tokens, spec.rope_scaling) == (4096, 131072, "longrope")
    with pytest.raises(InputError, match="original_max_position_embeddings"):
        model_from_hf_config({**phi3_128k, "original_max_position_embeddings": 0})


# MiniMaxAI/MiniMax-M2.5 config.json, as mirrored in ai-dynamo/aiconfigurator@095f58a
# aic-core/src/aiconfigurator_core/model_configs/MiniMaxAI--MiniMax-M2.5_config.json
MINIMAX_M25 = {
    "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "num_hidden_layers": 62,
    "hidden_size": 3072, "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 1536, "vocab_size": 200064, "num_experts_per_tok": 8, "num_local_experts": 256,
    "max_position_embeddings": 196608, "rope_theta": 5000000, "rotary_dim": 64, "tie_word_embeddings": False,
    "use_qk_norm": True, "use_mtp": True, "num_mtp_modules": 3, "shared_intermediate_size": 0,
    "scoring_func": "sigmoid", "attn_type_list": [1] * 62,
}


def test_hf_minimax_m2_config_loads_as_the_preset():
    """MiniMax-M2.5 (MiniMax: ~229B total, ~10B active; the 11.03B here counts the 0.61B input
    embedding and 0.61B output head, which "10B activated" leaves out)."""
    from cost_models.params import total_params
    spec = model_from_hf_config(MINIMAX_M25, name="minimax-m2.5")
    preset = load_model("minimax-m2.5")
    for field in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_hidden_size",
                  "vocab_size", "tied_embeddings", "sliding_window", "mtp_layers"):
        assert getattr(spec, field) == getattr(preset, field), field
    assert (spec.moe.num_experts, spec.moe.top_k, spec.moe.router_score) == (256, 8, "sigmoid")
    assert spec.rotary_fraction == 0.5                               # rotary_dim 64 of head_dim 128
    assert round(total_params(spec) / 1e9, 2) == 228.69
    for bad in ({"attn_type_list": [0] + [1] * 61}, {"shared_intermediate_size": 1536}):
        with pytest.raises(InputError, match=next(iter(bad))):
            model_from_hf_config({**MINIMAX_M25, **bad})


def test_hf_gpt_oss_config_has_half_sliding_window_layers():
    spec = model_from_hf_config(GPT_OSS_120B)
    assert (spec.moe.num_experts, spec.moe.top_k, spec.moe.expert_ffn_hidden_size) == (128, 4, 2880)
    assert (spec.sliding_window, spec.sliding_window_layer_fraction) == (128, 0.5)
    assert (spec.head_dim, spec.num_kv_heads, spec.seq_len) == (64, 8, 4096)


def test_hf_partial_rotary_factor_is_the_rotary_fraction():
    """nvidia/Minitron-4B-Base config.json (model_type nemotron): partial_rotary_factor 0.5, which
    the Megatron export must pass on as --rotary-percent; 4.19B parameters (model card)."""
    from cost_models.params import total_params
    minitron = {"model_type": "nemotron", "hidden_size": 3072, "intermediate_size": 9216, "num_hidden_layers": 32,
                "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 256000,
                "max_position_embeddings": 4096, "partial_rotary_factor": 0.5, "tie_word_embeddings": False}
    spec = model_from_hf_config(minitron)
    assert spec.rotary_fraction == 0.5
    assert round(total_params(spec) / 1e9, 2) == 4.19
    # null is unstated: NemotronConfig's own default, partial_rotary_factor=0.5 (transformers)
    assert model_from_hf_config({**minitron, "partial_rotary_factor": None}).rotary_fraction == 0.5
    with pytest.raises(InputError, match="partial_rotary_factor"):
        model_from_hf_config({**minitron, "partial_rotary_factor": 0})


def test_hf_rope_parameters_of_transformers_v5_are_read_as_rope_scaling():
    """transformers v5 writes rope_parameters in place of rope_scaling, rope_theta and
    partial_rotary_factor (nvidia/Kimi-K2.7-Code-NVFP4 config.json text_config: rope_parameters
    {rope_type yarn, factor 64.0, original_max_position_embeddings 4096, beta_fast 32.0, beta_slow 1.0,
    mscale 1.0, mscale_all_dim 1.0, rope_theta 50000.0}); it was ignored, leaving the model unscaled
    and its training sequence at 8192 instead of the 4096 pre-training context."""
    rope = {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096, "rope_theta": 50000.0, "rope_type": "yarn"}
    v5 = {k: v for k, v in KIMI_K2.items() if k != "rope_scaling"}
    spec = model_from_hf_config({**v5, "max_position_embeddings": 262144, "rope_parameters": rope})
    assert (spec.rope_scaling, spec.rope_scaling_factor, spec.rope_original_max_position_embeddings) == ("yarn", 64.0, 4096)
    assert (spec.rope_theta, spec.rope_beta_fast, spec.seq_len, spec.max_context_tokens) == (50000.0, 32.0, 4096, 262144)
    # Qwen3.5 states its partial rotary factor there (rope_parameters partial_rotary_factor 0.25)
    llama = {**LLAMA31_8B, "rope_scaling": None,
             "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}}
    spec = model_from_hf_config(llama)
    assert (spec.rotary_fraction, spec.rope_theta, spec.rope_scaling) == (0.25, 1e7, "")
    with pytest.raises(InputError, match="per attention kind"):
        model_from_hf_config({**llama, "rope_parameters": {"full_attention": {"rope_theta": 1e6}}})


def test_hf_gpt2_config_is_plain_mlp_with_tied_embeddings():
    spec = model_from_hf_config(GPT2)
    assert (spec.ffn_hidden_size, spec.gated_mlp, spec.tied_embeddings) == (3072, False, True)


def test_hf_config_without_dropout_keys_has_no_dropout_as_transformers_builds_it():
    """LlamaConfig / MixtralConfig / DeepseekV3Config default attention_dropout 0.0 and their
    modeling code has no residual dropout: a config.json without the keys trains with none."""
    for config in (LLAMA31_8B, MIXTRAL_8X7B, DEEPSEEK_V3, QWEN3_30B_A3B, GPT_OSS_120B):
        bare = {k: v for k, v in config.items() if "dropout" not in k}
        spec = model_from_hf_config(bare)
        assert (spec.hidden_dropout, spec.attention_dropout) == (False, False), config["model_type"]
    # a stated probability keeps its value
    stated = model_from_hf_config({**LLAMA31_8B, "attention_dropout": 0.1})
    assert (stated.hidden_dropout, stated.attention_dropout) == (False, True)


def test_hf_config_dropout_keys_present_keep_their_values_and_gpt2_opt_keep_their_defaults():
    bare_gpt2 = {k: v for k, v in GPT2.items() if "pdrop" not in k}
    # GPT2Config defaults resid_pdrop = attn_pdrop = 0.1
    assert model_from_hf_config(bare_gpt2).hidden_dropout and model_from_hf_config(bare_gpt2).attention_dropout
    no_drop = model_from_hf_config({**bare_gpt2, "resid_pdrop": 0.0, "attn_pdrop": 0.0})
    assert (no_drop.hidden_dropout, no_drop.attention_dropout) == (False, False)
    only_resid = model_from_hf_config({**bare_gpt2, "resid_pdrop": 0.1, "attn_pdrop": 0.0})
    assert (only_resid.hidden_dropout, only_resid.attention_dropout) == (True, False)
    # OPT: its residual dropout key is `dropout` (OPTConfig dropout=0.1, attention_dropout=0.0)
    opt = {"model_type": "opt", "num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16,
           "ffn_dim": 4096, "vocab_size": 50272, "max_position_embeddings": 2048}
    assert (model_from_hf_config(opt).hidden_dropout, model_from_hf_config(opt).attention_dropout) == (True, False)
    opt_off = model_from_hf_config({**opt, "dropout": 0.0, "attention_dropout": 0.0})
    assert (opt_off.hidden_dropout, opt_off.attention_dropout) == (False, False)
    # BLOOM states both (bigscience/bloom config.json: hidden_dropout 0.0, attention_dropout 0.0)
    bloom = {"model_type": "bloom", "n_layer": 2, "hidden_size": 64, "n_head": 8, "vocab_size": 100}
    on = model_from_hf_config({**bloom, "hidden_dropout": 0.1, "attention_dropout": 0.1})
    assert (on.hidden_dropout, on.attention_dropout) == (True, True)
    assert model_from_hf_config(bloom).hidden_dropout is False


def test_hf_config_file_and_folder_load_through_load_model(tmp_path):
    folder = tmp_path / "Mixtral-8x7B-v0.1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(MIXTRAL_8X7B))
    by_file = load_model(folder / "config.json")
    assert by_file.name == "Mixtral-8x7B-v0.1" and by_file.moe.num_experts == 8
    assert load_model(str(folder)).moe == by_file.moe


# --- user files and the search path ------------------------------------------------------------------

def test_yaml_file_path_and_env_folder_are_loaded(tmp_path, monkeypatch):
    text = ("name: tiny\nnum_layers: 2\nhidden_size: 64\nnum_heads: 4\nffn_hidden_size: 256\n"
            "vocab_size: 1000\nmoe:\n  num_experts: 4\n  top_k: 1\n  expert_ffn_hidden_size: 128\n")
    (tmp_path / "tiny.yaml").write_text(text)
    spec = load_model(tmp_path / "tiny.yaml")
    assert (spec.num_kv_heads, spec.head_dim, spec.moe.num_experts) == (4, 16, 4)
    monkeypatch.setenv("PARAPLAN_MODEL_PATH", str(tmp_path))
    assert "tiny" in list_models()
    assert load_model("TINY") == spec


def test_a_model_is_found_by_the_other_names_its_file_lists(tmp_path, monkeypatch):
    """``aliases:`` names a model as its publishers also name it (NeMo's tables say Nemotron-340B
    for Nemotron-4 340B); a file name wins over another file's alias; a malformed list is one
    error naming the key."""
    assert load_model("Nemotron-340B") == load_model("nemotron-4-340b")
    assert load_model("Nemotron_8B").name == load_model("nemotron-3-8b").name == "nemotron-8b"
    base = "num_layers: 2\nhidden_size: 64\nnum_heads: 4\nffn_hidden_size: 256\nvocab_size: 1000\n"
    (tmp_path / "tiny-a.yaml").write_text("name: tiny-a\naliases: [Tiny-B, Tiny-E, llama3-8b]\n" + base)
    (tmp_path / "tiny-b.yaml").write_text("name: tiny-b\n" + base.replace("2", "3", 1))
    monkeypatch.setenv("PARAPLAN_MODEL_PATH", str(tmp_path))
    assert load_model("TINY e").name == "tiny-a"
    assert load_model("tiny_b").num_layers == 3            # the file named tiny-b, not the alias
    assert load_model("llama3-8b").num_layers == 32         # built-in file name wins over an alias
    (tmp_path / "tiny-c.yaml").write_text("name: tiny-c\naliases: tiny-d\n" + base)
    with pytest.raises(InputError, match="aliases"):
        load_model(tmp_path / "tiny-c.yaml")
    with pytest.raises(InputError, match="unknown model"):
        load_model("tiny-d")                                # the malformed file lends no alias


def test_a_user_file_named_as_a_built_in_preset_is_refused_not_listed_twice(tmp_path, monkeypatch):
    """A 2-layer user file stating ``name: llama3-8b`` in PARAPLAN_MODEL_PATH loaded as "llama3-8b"
    (every report labelled it as the 32-layer preset) and ``models list`` printed llama3-8b twice.
    Built-in names win: loading it by name is one error naming the file's ``name``; the listing
    skips it with a warning; given by its path it is read as it is."""
    from click.testing import CliRunner
    from paraplan.cli import main
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)
    base = "num_layers: 2\nhidden_size: 256\nnum_heads: 4\nffn_hidden_size: 512\nvocab_size: 1000\n"
    (tmp_path / "tiny.yaml").write_text("name: llama3-8b\n" + base)
    (tmp_path / "tiny2.yaml").write_text("name: Nemotron_340B\n" + base)     # a built-in's alias, spelt otherwise
    (tmp_path / "mine.yaml").write_text("name: llama3-8b-mine\n" + base)
    monkeypatch.setenv("PARAPLAN_MODEL_PATH", str(tmp_path))
    for stem, name in (("tiny", "llama3-8b"), ("tiny2", "Nemotron_340B")):
        with pytest.raises(InputError, match=f"model {tmp_path / stem}.yaml.name: '{name}' is the name of a built-in"):
            load_model(stem)
        # given by its path, the file is the user's explicit choice (an edited copy of a preset)
        assert load_model(tmp_path / f"{stem}.yaml").num_layers == 2
    assert load_model("mine").num_layers == 2 and load_model("llama3-8b").num_layers == 32
    result = CliRunner().invoke(main, ["models", "list", "--json"])
    assert result.exit_code == 0
    names = [row["name"] for row in json.loads(result.stdout)]
    assert names.count("llama3-8b") == 1 and "llama3-8b-mine" in names and "Nemotron_340B" not in names
    warnings = [ln for ln in result.stderr.splitlines() if ln.startswith("warning: skipped model")]
    assert len(warnings) == 2 and all("is the name of a built-in preset" in w for w in warnings)
    shown = CliRunner().invoke(main, ["models", "show", "tiny"])
    assert shown.exit_code == 2 and shown.stderr.count("\n") == 1 and shown.stderr.startswith("error: model ")


def test_an_mla_model_file_without_head_dim_takes_qk_nope_plus_qk_rope_as_the_import_does():
    """DeepSeek-V3's sizes written without head_dim got hidden / heads = 7168 / 128 = 56 (the
    serving activations' q/k/v width) where the HF import, and the model, have 128 + 64 = 192."""
    from cost_models.serving_memory import activation_bytes_per_gpu
    v3 = load_model("deepseek-v3")
    data = {"name": "v3-no-head-dim", "num_layers": 61, "hidden_size": 7168, "num_heads": 128,
            "ffn_hidden_size": 18432, "vocab_size": 129280,
            "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                    "v_head_dim": 128}}
    spec = model_from_dict(data)
    assert spec.head_dim == 128 + 64 == v3.head_dim
    # per token on tp 1: 3h + (128 + 2 x 128) x 192 (q, k, v) + 128 x 192 (o) + 2 x 18432 (the
    # dense MLP), 2 bytes each
    per_token = 3 * 7168 + 384 * 192 + 128 * 192 + 2 * 18432
    assert activation_bytes_per_gpu(spec, 1, 1, 1, 1000) == pytest.approx(1000 * per_token * 2)
    with pytest.raises(InputError, match=r"model.head_dim: 56 is not mla.qk_nope_head_dim 128 \+ qk_rope_head_dim 64"):
        model_from_dict({**data, "head_dim": 56})


def test_model_from_dict_defaults_and_types():
    spec = model_from_dict({"name": "m", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
                            "ffn_hidden_size": 256, "vocab_size": 1000, "gated_mlp": True,
                            "mla": {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
                                    "v_head_dim": 8}})
    assert spec.seq_len == 2048 and spec.gated_mlp and spec.mla.q_lora_rank == 0


# --- errors -----------------------------------------------------------------------------------------

def test_unknown_model_suggests_close_names():
    with pytest.raises(InputError) as err:
        load_model("llama3.1-406b")
    assert err.value.field == "model"
    assert "llama3.1-405b" in str(err.value)


def test_missing_file_is_reported(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_model(tmp_path / "nope.yaml")


def test_malformed_yaml_names_the_file(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: x\nnum_layers: [1, 2\n")
    with pytest.raises(InputError) as err:
        load_model(bad)
    assert "broken.yaml" in str(err.value)


def test_malformed_json_names_the_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", "hidden_size": 4096,,}')
    with pytest.raises(InputError) as err:
        model_from_hf_config(bad)
    assert "config.json" in str(err.value)
    with pytest.raises(InputError, match="config.json"):
        load_model(bad)


def test_missing_key_in_preset_names_the_key():
    with pytest.raises(InputError) as err:
        model_from_dict({"name": "m", "num_layers": 2, "hidden_size": 64, "num_heads": 4, "vocab_size": 10})
    assert err.value.field.endswith("ffn_hidden_size")


def test_missing_key_in_moe_mapping_names_the_key():
    with pytest.raises(InputError) as err:
        model_from_dict({"name": "m", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
                         "ffn_hidden_size": 256, "vocab_size": 10, "moe": {"num_experts": 4, "top_k": 1}})
    assert "expert_ffn_hidden_size" in err.value.field


def test_missing_key_in_hf_config_names_the_key():
    config = {k: v for k, v in LLAMA31_8B.items() if k != "intermediate_size"}
    with pytest.raises(InputError) as err:
        model_from_hf_config(config)
    assert err.value.field.endswith("intermediate_size")


@pytest.mark.parametrize("data, key", [
    ({"num_layers": "many"}, "num_layers"),
    ({"num_layers": 2.5}, "num_layers"),
    ({"gated_mlp": "yes"}, "gated_mlp"),
    ({"moe": [1, 2]}, "moe"),
    ({"colour": "red"}, "colour"),
])
def test_mistyped_or_unknown_keys_raise_input_error_naming_the_key(data, key):
    base = {"name": "m", "num_layers": 2, "hidden_size": 64, "num_heads": 4, "ffn_hidden_size": 256,
            "vocab_size": 10}
    with pytest.raises(InputError) as err:
        model_from_dict({**base, **data})
    assert key in err.value.field


def test_non_mapping_yaml_is_an_input_error(tmp_path):
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(InputError, match="list.yaml"):
        load_model(bad)


def test_hidden_size_not_divisible_by_heads_needs_head_dim():
    base = {"name": "m", "num_layers": 2, "hidden_size": 100, "num_heads": 3, "ffn_hidden_size": 256,
            "vocab_size": 10}
    with pytest.raises(InputError) as err:
        model_from_dict(base)
    assert "head_dim" in err.value.field
    assert model_from_dict({**base, "head_dim": 32}).head_dim == 32
    with pytest.raises(InputError):
        model_from_hf_config({**LLAMA31_8B, "num_attention_heads": 30, "num_key_value_heads": 10})


def test_unknown_hf_model_type_is_a_clear_error():
    with pytest.raises(InputError) as err:
        model_from_hf_config({"model_type": "t5", "d_model": 512})
    assert "model_type" in err.value.field
    assert "t5" in str(err.value) and "llama" in str(err.value)


def test_hf_config_with_wrong_types_raises_input_error():
    with pytest.raises(InputError) as err:
        model_from_hf_config({**LLAMA31_8B, "num_hidden_layers": "thirty-two"})
    assert err.value.field.endswith("num_hidden_layers")
    with pytest.raises(InputError):
        model_from_hf_config({**LLAMA31_8B, "tie_word_embeddings": "no"})


@pytest.mark.parametrize("preset, config", [
    ("bloom-176b", {"model_type": "bloom", "n_layer": 70, "hidden_size": 14336, "n_head": 112,
                    "vocab_size": 250880, "seq_length": 2048}),
    ("opt-175b", {"model_type": "opt", "num_hidden_layers": 96, "hidden_size": 12288, "num_attention_heads": 96,
                  "ffn_dim": 49152, "vocab_size": 50272, "max_position_embeddings": 2048}),
    ("gpt-neox-20b", {"model_type": "gpt_neox", "num_hidden_layers": 44, "hidden_size": 6144,
                      "num_attention_heads": 64, "intermediate_size": 24576, "vocab_size": 50432,
                      "max_position_embeddings": 2048, "tie_word_embeddings": False, "rotary_pct": 0.25}),
    ("mpt-7b", {"model_type": "mpt", "n_layers": 32, "d_model": 4096, "n_heads": 32, "expansion_ratio": 4,
                "max_seq_len": 2048, "vocab_size": 50432, "no_bias": True,
                "attn_config": {"alibi": True}}),
    ("nemotron-4-340b", {"model_type": "nemotron", "num_hidden_layers": 96, "hidden_size": 18432,
                         "num_attention_heads": 96, "num_key_value_heads": 8, "intermediate_size": 73728,
                         "vocab_size": 256000, "max_position_embeddings": 4096, "tie_word_embeddings": False}),
])
def test_hf_plain_mlp_families_match_their_presets(preset, config):
    from_hf = model_from_hf_config(config, name=preset)
    from_yaml = load_model(preset)
    # the config's context window is kept (the smallest of max_position_embeddings and MPT's
    # max_seq_len and BLOOM's seq_length, as vLLM reads them); the presets of released
    # checkpoints state it too (nemotron-4-340b: no Hugging Face config.json was released)
    stated = [config[k] for k in ("max_position_embeddings", "max_seq_len", "seq_length") if k in config]
    assert from_hf.max_context_tokens == min(stated, default=0)
    assert from_yaml.max_context_tokens == (0 if preset == "nemotron-4-340b" else from_hf.max_context_tokens)
    # these training presets keep Megatron's dropout (the papers' runs); a config.json without
    # dropout keys is built by transformers without it, except OPT (OPTConfig dropout=0.1)
    assert (from_hf.hidden_dropout, from_hf.attention_dropout) == (preset == "opt-175b", False)
    assert from_hf == ModelSpec(**{**from_yaml.__dict__, "source": from_hf.source,
                                   "max_context_tokens": from_hf.max_context_tokens,
                                   "hidden_dropout": from_hf.hidden_dropout,
                                   "attention_dropout": from_hf.attention_dropout})


def test_sliding_window_without_fraction_applies_to_all_layers():
    spec = model_from_dict({"name": "m", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
                            "ffn_hidden_size": 256, "vocab_size": 10, "sliding_window": 4096})
    assert spec.sliding_window_layer_fraction == 1.0
    mistral = model_from_hf_config({**LLAMA31_8B, "model_type": "mistral", "sliding_window": 4096})
    assert (mistral.sliding_window, mistral.sliding_window_layer_fraction) == (4096, 1.0)


def test_architecture_details_default_to_the_llama_layout_and_follow_gated_mlp():
    llama = load_model("llama3-70b")
    assert (llama.position_embedding, llama.normalization, llama.linear_bias, llama.activation) == (
        "rope", "rmsnorm", False, "swiglu")
    gpt = load_model("gpt3-175b")
    assert (gpt.position_embedding, gpt.normalization, gpt.linear_bias, gpt.qkv_bias, gpt.activation) == (
        "learned", "layernorm", True, True, "gelu")
    assert load_model("nemotron-4-15b").activation == "squared_relu"
    assert load_model("qwen2-57b-a14b").qkv_bias and not load_model("qwen2-57b-a14b").linear_bias


@pytest.mark.parametrize("field, value", [("activation", "swiglu"), ("position_embedding", "sinusoid"),
                                          ("normalization", "batchnorm"), ("rotary_fraction", 0.0)])
def test_unknown_or_inconsistent_architecture_details_are_input_errors_naming_the_field(field, value):
    base = dict(name="x", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, ffn_hidden_size=256,
                vocab_size=100, gated_mlp=False)
    with pytest.raises(InputError) as err:
        ModelSpec(**base, **{field: value})
    assert err.value.field == f"model.{field}"


def test_rope_base_and_scaling_come_from_config_json_and_need_rope_positions():
    from hardware_specs.errors import InputError
    from model_specs.hf_config import model_from_hf_config
    from model_specs.model_spec import ModelSpec
    cfg = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
           "max_position_embeddings": 131072, "rope_theta": 500000.0,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
    m = model_from_hf_config(cfg)
    assert (m.rope_theta, m.rope_scaling, m.rope_scaling_factor) == (500000.0, "llama3", 8.0)
    assert m.seq_len == 8192
    plain = model_from_hf_config({**cfg, "rope_scaling": None, "rope_theta": 1e6})
    assert (plain.rope_theta, plain.rope_scaling) == (1e6, "")
    with pytest.raises(InputError, match="model.rope_theta"):
        ModelSpec(name="gpt", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, ffn_hidden_size=256,
                  vocab_size=100, rope_theta=10000.0)           # learned positions (no gated MLP)


def test_an_mxfp4_checkpoint_names_its_experts_format():
    from model_specs.catalog import load_model
    assert load_model("gpt-oss-120b").expert_checkpoint_format == "mxfp4"
    assert load_model("gpt-oss-120b").checkpoint_format == ""            # attention and dense layers 16-bit
    # DeepSeek's released checkpoints: every linear layer in 128 x 128-block FP8
    assert load_model("deepseek-r1").expert_checkpoint_format == load_model("deepseek-r1").checkpoint_format == "fp8_block"
    assert load_model("llama3.1-70b").checkpoint_format == ""


def test_kimi_k25_preset_names_its_int4_experts_as_its_config_json_does():
    # Kimi-K2.5's release (as Kimi-K2-Thinking's): compressed-tensors pack-quantized 4-bit integer
    # weights, group 32, with self_attn, shared_experts, the dense MLP and lm_head ignored. The
    # preset served it with fp8 experts (1.03 TB of weights, a checkpoint nobody publishes):
    # Kimi-K2.5 on 8 H200 at TPOT 50 ms planned 324 tokens/s/GPU instead of 2,091
    from model_specs.catalog import load_model
    from model_specs.hf_config import checkpoint_formats
    quant = {"quant_method": "compressed-tensors", "format": "pack-quantized",
             "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                 "num_bits": 4, "type": "int", "strategy": "group", "group_size": 32, "symmetric": True}}},
             "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                        "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]}
    stated = checkpoint_formats(quant, True, "quantization_config")
    assert stated == {"expert_checkpoint_format": "int4_wo", "int4_group_size": 32}
    m = load_model("kimi-k2.5")
    assert (m.checkpoint_format, m.expert_checkpoint_format, m.int4_group_size) == ("", "int4_wo", 32)
    # one 16-bit scale per 32 weights: 0.5 + 2 / 32 = 0.5625 bytes a weight (0.515625 at group 128)
    from cost_models.weight_formats import weight_bytes
    assert (weight_bytes("int4_wo", 32), weight_bytes("int4_wo")) == (0.5625, 0.515625)
    # GPTQ / AWQ state it at the top level; GPTQ's -1 (per-channel scales) keeps the default
    assert checkpoint_formats({"quant_method": "gptq", "bits": 4, "group_size": 64}, False, "q") == {
        "checkpoint_format": "int4_wo", "int4_group_size": 64}
    assert checkpoint_formats({"quant_method": "gptq", "bits": 4, "group_size": -1}, False, "q") == {
        "checkpoint_format": "int4_wo"}
    with pytest.raises(InputError, match="group_size"):
        checkpoint_formats({"quant_method": "awq", "bits": 4, "q_group_size": 0}, False, "q")
    from hardware_specs.catalog import load_gpu
    from simulator.serving.context import default_formats
    assert default_formats(m, load_gpu("h200-sxm-141gb")) == ("bf16", "int4_wo")


def test_block_fp8_releases_name_their_format_in_their_presets():
    # Kimi K2 (README, Deployment: "Our model checkpoints are stored in the block-fp8 format") and
    # MiniMax-M2.5 (config.json quant_method fp8, weight_block_size [128, 128], attention and experts
    # quantised): without it their plans priced per-tensor FP8 with the FP8 KV cache of a ModelOpt
    # export (MiniMax-M2.5 on 8 H200, TPOT 30 ms: 5,361 tokens/s/GPU, 3,659 as released) and refused
    # Kimi K2 on 16 A100 as 16-bit weights that do not fit (vLLM serves FP8 weight-only there)
    from hardware_specs.catalog import load_gpu
    from model_specs.catalog import load_model
    from simulator.serving.context import default_formats
    for name in ("kimi-k2", "minimax-m2.5"):
        m = load_model(name)
        assert (m.checkpoint_format, m.expert_checkpoint_format) == ("fp8_block", "fp8_block")
        assert default_formats(m, load_gpu("h200-sxm-141gb")) == ("fp8_block", "fp8_block")


def test_a_block_fp8_config_json_names_its_checkpoint_format():
    from model_specs.hf_config import model_from_hf_config
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
           "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000,
           "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    assert model_from_hf_config(cfg).checkpoint_format == "fp8_block"
    cfg["quantization_config"] = {"quant_method": "fp8"}                     # per-tensor: not block FP8
    assert model_from_hf_config(cfg).checkpoint_format == "fp8"


@pytest.mark.parametrize("quant, fmt", [
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}, "nvfp4"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized"}, "fp8"),
    ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}, "nvfp4"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}}}}, "int4_wo"),
    ({"quant_method": "compressed-tensors", "format": "mixed-precision",
      "config_groups": {"group_0": {"format": "float-quantized", "weights": {"num_bits": 8, "strategy": "block"}}}},
     "fp8_block"),
    ({"quant_method": "modelopt", "quantization": {"quant_algo": "FP8"}}, "fp8"),       # the nested form
    ({"quant_method": "modelopt", "quant_algo": "FP8_PB_WO"}, "fp8_block"),
    ({"quant_method": "awq", "bits": 4}, "int4_wo"),
    ({"quant_method": "gptq", "bits": "4", "group_size": 128}, "int4_wo"),
    ({}, ""),                                               # an empty block states nothing
    # attention left unquantised: a dense model states no single format
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head", "re:.*self_attn.*"]}, ""),
])
def test_a_config_jsons_quantization_config_names_the_checkpoint_format(quant, fmt):
    # an NVFP4 ModelOpt export was priced as fp8: its stated format was not read
    from model_specs.hf_config import model_from_hf_config
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
           "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "quantization_config": quant}
    assert model_from_hf_config(cfg).checkpoint_format == fmt


@pytest.mark.parametrize("quant, what", [
    # bitsandbytes NF4 (Llama-3.1-8B-bnb-4bit's config.json) was dropped: served as fp8, 8.46 GiB
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
      "bnb_4bit_compute_dtype": "bfloat16"}, "bitsandbytes 4-bit nf4 weights"),
    ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "bitsandbytes 8-bit"),
    ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "gptq at bits 3"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128, "desc_act": False}, "gptq at bits 8"),
    ({"quant_method": "awq", "bits": 8}, "awq at bits 8"),
    # 8-bit integer weights (W8A16): no format priced here (was int4_wo, 0.52 byte, then dropped)
    ({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "int"}}}}, "compressed-tensors weights"),
    ({"quant_method": "fbgemm_fp8"}, "'fbgemm_fp8' weights"),     # attention, first / last layers BF16
    ({"quant_method": "hqq", "nbits": 4}, "'hqq' weights"),
    ({"quant_method": "modelopt", "quant_algo": "W8A8_SQ_PER_CHANNEL"}, "modelopt quant_algo"),
    ({"quant_method": "mxfp4"}, "mxfp4 on a dense model"),          # gpt-oss's is its experts only
    ({"group_size": 64, "bits": 4}, "quant_method: missing"),       # MLX
    ({"load_in_4bit": True}, "quant_method: missing"),             # bitsandbytes before quant_method
])
def test_a_quantization_config_paraplan_cannot_model_is_refused_not_served_at_the_default(quant, what, tmp_path,
                                                                                          monkeypatch):
    from click.testing import CliRunner
    from model_specs.hf_config import model_from_hf_config
    from paraplan.cli import main
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)
    with pytest.raises(InputError, match="quantization_config.quant_method") as err:
        model_from_hf_config({**LLAMA31_8B, "quantization_config": quant})
    assert what in str(err.value) and "--precision" in str(err.value)
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA31_8B, "quantization_config": quant}))
    result = CliRunner().invoke(main, ["serve", "simulate", "-m", str(tmp_path), "-s", "dgx-h100", "--tp", "1",
                                       "--batch", "8"])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: hf_config {tmp_path / 'config.json'}"
                                                   ".quantization_config.quant_method: "), lines


def test_a_4bit_awq_or_gptq_llama_is_int4_weight_only_at_its_group():
    # Llama-3.1-8B AWQ (bits 4, group 128, zero points): 4-bit weights and one 16-bit scale per 128
    from cost_models.weight_formats import weight_bytes
    from model_specs.hf_config import model_from_hf_config
    m = model_from_hf_config({**LLAMA31_8B, "quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}})
    assert (m.checkpoint_format, m.int4_group_size) == ("int4_wo", 128)
    assert weight_bytes(m.checkpoint_format, m.int4_group_size) == 0.5 + 2 / 128


MISTRAL3_W4A16 = {
    "architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
    "text_config": {"head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 32768,
                    "max_position_embeddings": 131072, "model_type": "mistral", "num_attention_heads": 32,
                    "num_hidden_layers": 40, "num_key_value_heads": 8, "rope_theta": 1000000000.0,
                    "vocab_size": 131072},
    "vision_config": {"head_dim": 64, "hidden_size": 1024, "model_type": "pixtral", "num_attention_heads": 16,
                      "num_hidden_layers": 24},
    "quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                            "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                                "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                                "group_size": 128}}},
                            "ignore": ["vision_tower.transformer.layers.0.attention.k_proj",
                                       "vision_tower.transformer.layers.0.attention.v_proj",
                                       "multi_modal_projector.linear_1", "language_model.lm_head"]}}


def test_a_vision_towers_ignored_attention_does_not_unread_the_language_models_format():
    # Mistral-Small-3.1-24B W4A16 (llm-compressor) keeps some Pixtral attention 16-bit: the substring
    # match on "attention" made the dense LM's int4 unread, served as fp8 (23.20 GiB, not 13.18)
    import copy
    from model_specs.hf_config import model_from_hf_config
    from model_specs.hf_quantization import _language_model_entries
    m = model_from_hf_config(MISTRAL3_W4A16)
    assert (m.checkpoint_format, m.int4_group_size) == ("int4_wo", 128)
    lm_only = copy.deepcopy(MISTRAL3_W4A16)
    lm_only["quantization_config"]["ignore"] = ["language_model.lm_head"]
    assert model_from_hf_config(lm_only) == m           # the vision entries change nothing
    assert _language_model_entries(["model.visual.blocks.0.attn.qkv", "re:.*vision_model.*",
                                    "re:.*self_attn.*", "lm_head"]) == ["re:.*self_attn.*", "lm_head"]
    # the language model's own attention kept 16-bit still leaves a dense model's format unread
    lm_attention = copy.deepcopy(MISTRAL3_W4A16)
    lm_attention["quantization_config"]["ignore"].append("re:.*language_model.*self_attn.*")
    assert model_from_hf_config(lm_attention).checkpoint_format == ""


def test_a_moe_checkpoint_that_keeps_attention_16_bit_names_only_its_experts_format():
    # NVIDIA's NVFP4 DeepSeek exports quantise the experts and exclude the attention projections
    from model_specs.hf_config import checkpoint_formats
    quant = {"quant_method": "modelopt",
             "quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}}
    assert checkpoint_formats(quant, True, "q") == {"expert_checkpoint_format": "nvfp4"}
    assert checkpoint_formats({**quant, "quantization": {"quant_algo": "NVFP4"}}, True, "q") == {
        "checkpoint_format": "nvfp4", "expert_checkpoint_format": "nvfp4"}


@pytest.mark.parametrize("quant, field", [("fp8", "quantization_config"), ({"quant_method": ""}, "quant_method"),
                                          ({"quant_method": 8}, "quant_method"),
                                          # a list where a number belongs was an internal TypeError (unhashable)
                                          ({"quant_method": "compressed-tensors", "format": "float-quantized",
                                            "config_groups": {"g": {"weights": {"num_bits": [8]}}}},
                                           "num_bits: expected a whole number"),
                                          # NaN read as a block size made block FP8 of it; a string
                                          # ignore list was skipped, pricing the attention it names quantised
                                          ({"quant_method": "fp8", "weight_block_size": float("nan")},
                                           "weight_block_size: expected two positive whole numbers"),
                                          ({"quant_method": "fp8", "weight_block_size": [128, 0]}, "weight_block_size"),
                                          ({"quant_method": "modelopt", "quant_algo": "FP8", "ignore": "self_attn"},
                                           "ignore: expected a list of module names")])
def test_a_malformed_quantization_config_is_refused_naming_it(quant, field):
    from model_specs.hf_config import model_from_hf_config
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
           "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "quantization_config": quant}
    with pytest.raises(InputError, match=field):
        model_from_hf_config(cfg)


def test_yarn_parameters_come_from_config_json_and_the_deepseek_presets_carry_the_published_ones():
    """DeepSeek-V3 / R1 config.json (ai-dynamo/aiconfigurator@095f58a model_configs): rope_theta
    10000, rope_scaling {type: yarn, factor: 40, original_max_position_embeddings: 4096,
    beta_fast: 32, beta_slow: 1, mscale: 1.0, mscale_all_dim: 1.0}."""
    from hardware_specs.errors import InputError
    from model_specs.catalog import load_model
    from model_specs.hf_config import model_from_hf_config
    from model_specs.model_spec import ModelSpec
    published = (10000.0, "yarn", 40.0, 4096, 32.0, 1.0, 1.0, 1.0)

    def yarn(m):
        return (m.rope_theta, m.rope_scaling, m.rope_scaling_factor, m.rope_original_max_position_embeddings,
                m.rope_beta_fast, m.rope_beta_slow, m.rope_mscale, m.rope_mscale_all_dim)
    for name in ("deepseek-v3", "deepseek-r1"):
        assert yarn(load_model(name)) == published
    cfg = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 8,
           "num_hidden_layers": 2, "num_key_value_heads": 8, "vocab_size": 1000, "max_position_embeddings": 163840,
           "rope_theta": 10000,
           "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                            "original_max_position_embeddings": 4096, "type": "yarn"}}
    m = model_from_hf_config(cfg)
    assert yarn(m) == published and isinstance(m.rope_original_max_position_embeddings, int)
    # a yarn config without mscale keys leaves them unstated (0), as Hugging Face reads them
    bare = model_from_hf_config({**cfg, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                         "original_max_position_embeddings": 32768}})
    assert yarn(bare) == (10000.0, "yarn", 4.0, 32768, 0.0, 0.0, 0.0, 0.0)
    with pytest.raises(InputError, match="model.rope_scaling"):
        ModelSpec(name="x", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, ffn_hidden_size=256,
                  vocab_size=100, gated_mlp=True, rope_scaling="llama3", rope_beta_fast=32.0)
    with pytest.raises(InputError, match="model.rope_mscale"):
        ModelSpec(name="x", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, ffn_hidden_size=256,
                  vocab_size=100, gated_mlp=True, rope_scaling="yarn", rope_mscale=-1.0)


@pytest.mark.parametrize("rope, field", [
    ({"type": "yarn", "factor": 40, "mscale": "1.0"}, "rope_scaling.mscale"),
    ({"type": "yarn", "factor": -2}, "rope_scaling.factor"),
    ({"rope_type": "linear", "factor": "8"}, "rope_scaling.factor"),
    ({"type": "yarn", "factor": 4, "mscale_all_dim": -1}, "rope_scaling.mscale_all_dim"),
    ({"type": "yarn", "factor": 4, "original_max_position_embeddings": 0},
     "rope_scaling.original_max_position_embeddings"),
    ({"type": "llama3", "factor": 8, "original_max_position_embeddings": -5},
     "rope_scaling.original_max_position_embeddings"),
    ({"type": "yarn", "factor": 4, "original_max_position_embeddings": 4096.7},
     "rope_scaling.original_max_position_embeddings"),
    ({"rope_type": 5, "factor": 4}, "rope_scaling.rope_type"),
])
def test_a_damaged_rope_scaling_value_is_refused_naming_its_key(rope, field):
    """A rope_scaling value that is not a number >= 0 (original_max_position_embeddings: not a
    positive integer) was dropped, so the Megatron export launched with Megatron-LM's default in
    its place (--mscale 0.0 for a checkpoint's 1.0), or became a sequence length of 0 refused as
    'model.seq_len'; it is refused naming the config key (found by fuzz3)."""
    from hardware_specs.errors import InputError
    from model_specs.hf_config import model_from_hf_config
    cfg = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 8,
           "num_hidden_layers": 2, "num_key_value_heads": 8, "vocab_size": 1000, "max_position_embeddings": 16384,
           "rope_scaling": rope}
    with pytest.raises(InputError) as err:
        model_from_hf_config(cfg)
    assert err.value.field.endswith(field)
    # the same mapping with float-integer and zero values is read (0 = not stated)
    fine = model_from_hf_config({**cfg, "rope_scaling": {"type": "yarn", "factor": 0, "mscale": 0.0,
                                                         "original_max_position_embeddings": 4096.0}})
    assert (fine.rope_scaling_factor, fine.rope_mscale, fine.seq_len) == (0.0, 0.0, 4096)
    assert fine.rope_original_max_position_embeddings == 4096


@pytest.mark.parametrize("change, field, says", [
    # a window of -1 read as 'none'; layer types that are not one name a layer, or an unknown
    # name, dropped the window; a rope_scaling list left the model unscaled; dropout as text off
    ({"sliding_window": -1}, "sliding_window", "must be a number of tokens >= 0"),
    ({"sliding_window": 4096, "layer_types": "sliding_attention"}, "layer_types", "one attention kind per layer"),
    ({"sliding_window": 4096, "layer_types": ["sliding_attention"]}, "layer_types", "one attention kind per layer"),
    ({"sliding_window": 4096, "layer_types": ["foo"] * 32}, "layer_types", "unknown attention kind 'foo'"),
    ({"rope_scaling": [1, 2]}, "rope_scaling", "expected a mapping"),
    ({"attention_dropout": "0.1"}, "attention_dropout", "expected a probability"),
])
def test_a_malformed_config_field_is_refused_not_dropped(tmp_path, change, field, says):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**MIXTRAL_8X7B, **change}))
    with pytest.raises(InputError, match=says) as err:
        load_model(bad)
    assert err.value.field.endswith(field)


@pytest.mark.parametrize("family, extra, field", [
    # ignored without a word before: a negative count of leading dense layers, layer indices the model lacks
    ("deepseek_v3", {"first_k_dense_replace": -3}, "first_k_dense_replace"),
    ("qwen3_moe", {"mlp_only_layers": [-1, 99]}, "mlp_only_layers"),
])
def test_moe_layer_placements_outside_the_model_are_refused(family, extra, field):
    from model_specs.hf_config import model_from_hf_config
    cfg = {"model_type": family, "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
           "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "num_experts": 8,
           "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "kv_lora_rank": 64,
           "q_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, **extra}
    with pytest.raises(InputError, match=field):
        model_from_hf_config(cfg)


_NANO = json.loads(NEMOTRON_3_NANO.replace("Infinity", "1e308"))
_NANO_BY_LIST = {**{k: v for k, v in _NANO.items() if k != "hybrid_override_pattern"},
                 "layers_block_type": ["mamba"] * 52}
_MINIMAX_NO_HEAD_DIM = {k: v for k, v in MINIMAX_M25.items() if k != "head_dim"}
_OPT_350M = {"model_type": "opt", "num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16,
             "ffn_dim": 4096, "vocab_size": 50272, "max_position_embeddings": 2048}


@pytest.mark.parametrize("config, field, says", [
    # a list entry in layers_block_type raised TypeError (unhashable) as an internal error
    ({**_NANO_BY_LIST, "layers_block_type": [["mamba"]] * 52}, "layers_block_type", "unknown block"),
    ({**_NANO_BY_LIST, "layers_block_type": [{"a": 1}] * 52}, "layers_block_type", "unknown block"),
    ({**_NANO_BY_LIST, "layers_block_type": "mamba"}, "layers_block_type", "expected a list of block names"),
    # a pattern that is not text was reported as missing
    ({**_NANO, "hybrid_override_pattern": ["M"] * 52}, "hybrid_override_pattern", "expected text"),
    # a negative MTP count was taken as an MTP block ("not modelled") and the model accepted
    ({**_NANO, "num_nextn_predict_layers": -1}, "num_nextn_predict_layers", "must be a number of layers >= 0"),
    # MiniMax-M2 with 0 heads and no head_dim raised ZeroDivisionError; a negative size blamed rotary_dim
    ({**_MINIMAX_NO_HEAD_DIM, "num_attention_heads": 0}, "num_attention_heads", "must be >= 1"),
    ({**_MINIMAX_NO_HEAD_DIM, "hidden_size": -3072}, "hidden_size", "must be >= 1"),
    ({**MINIMAX_M25, "head_dim": -128}, "head_dim", "must be >= 1, got -128"),
    # a stated head_dim 0 read as unstated and became hidden_size / num_heads without a word
    ({**MINIMAX_M25, "head_dim": 0}, "head_dim", "must be >= 1, got 0"),
    ({**LLAMA31_8B, "head_dim": 0}, "head_dim", "must be >= 1, got 0"),
    ({**_NANO, "head_dim": 0}, "head_dim", "must be >= 1, got 0"),
    # an attention kind other than 0 / 1 was reported as lightning attention (0)
    ({**MINIMAX_M25, "attn_type_list": [2] * 62}, "attn_type_list", "unknown attention kind 2"),
    # a list of another length than the layers (one entry, or 63 for 62 layers) was read as all softmax
    ({**MINIMAX_M25, "attn_type_list": [1]}, "attn_type_list", r"one attention kind per layer \(62\), got 1 "),
    ({**MINIMAX_M25, "attn_type_list": [1] * 63}, "attn_type_list", r"one attention kind per layer \(62\), got 63 "),
    # max_position_embeddings 0 was kept as max_context_tokens 0, "not stated"
    ({**LLAMA31_8B, "max_position_embeddings": 0}, "max_position_embeddings", "must be >= 1 token"),
    # a wrapper's model_type that is not text was read past (the source said "a nan checkpoint");
    # a text_config that is not a mapping was "unsupported model_type 'llama4'"; an inner model_type
    # that is not text was "missing" at the top level
    ({**LLAMA4_MAVERICK, "model_type": float("nan")}, "hf_config.model_type", "expected text"),
    ({**LLAMA4_MAVERICK, "text_config": [1]}, "hf_config.text_config", "expected a mapping"),
    ({**LLAMA4_MAVERICK, "text_config": {**LLAMA4_MAVERICK["text_config"], "model_type": 5}},
     "hf_config.text_config.model_type", "expected text"),
    ({**LLAMA4_MAVERICK, "text_config": {**LLAMA4_MAVERICK["text_config"], "vocab_size": "x"}},
     "hf_config.text_config.vocab_size", "expected an integer"),
    ({**LLAMA4_MAVERICK, "quantization_config": {"quant_method": 5}},        # the wrapper's own key
     "hf_config.quantization_config.quant_method", "expected text"),
    # a dropout probability's error named model.<key>, not the config and the text_config it is in
    ({**LLAMA4_MAVERICK, "text_config": {**LLAMA4_MAVERICK["text_config"], "attention_dropout": "0.1"}},
     "hf_config.text_config.attention_dropout", "expected a probability"),
    # an OPT activation other than relu / gelu was read as gelu
    ({**_OPT_350M, "activation_function": "abc"}, "activation_function",
     r"unknown OPT activation 'abc' \(use relu or gelu\)"),
    ({**_OPT_350M, "activation_function": ["relu"]}, "activation_function", "unknown OPT activation"),
])
def test_a_damaged_config_of_the_newer_families_is_one_input_error_naming_its_key(config, field, says):
    with pytest.raises(InputError, match=says) as err:
        model_from_hf_config(config)
    assert err.value.field.endswith(field), err.value.field


def test_a_pre_training_context_beyond_the_stated_context_is_capped_at_it():
    """original_max_position_embeddings above max_position_embeddings trained (and priced) sequences
    longer than the model's context: 1,000,000 tokens on a 131,072-token Phi-3."""
    phi3 = {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
            "num_attention_heads": 32, "vocab_size": 32064, "max_position_embeddings": 131072,
            "original_max_position_embeddings": 1_000_000}
    spec = model_from_hf_config(phi3)
    assert (spec.seq_len, spec.max_context_tokens) == (131072, 131072)
    capped = model_from_hf_config({**LLAMA31_8B, "max_position_embeddings": 4096})     # rope_scaling's 8192
    assert (capped.seq_len, capped.max_context_tokens) == (4096, 4096)
    assert model_from_hf_config(LLAMA31_8B).seq_len == 8192


# --- the MoE router ------------------------------------------------------------------------------------

def test_router_facts_are_validated_with_one_named_field():
    base = dict(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, router_score="sigmoid")
    assert MoESpec(**base, expert_bias=True, topk_scaling_factor=2.5, num_groups=8, group_topk=4).num_groups == 8
    for bad, field in ((dict(num_groups=3), "moe.num_groups"), (dict(num_groups=8, group_topk=9), "moe.group_topk"),
                       (dict(num_groups=0), "moe.num_groups"), (dict(topk_scaling_factor=0.0), "moe.topk_scaling_factor"),
                       (dict(topk_scaling_factor=float("nan")), "moe.topk_scaling_factor"),
                       (dict(topk_scaling_factor=True), "moe.topk_scaling_factor"),
                       (dict(num_groups=256, group_topk=4), "moe.group_topk"),      # 4 experts < top-8
                       (dict(expert_bias=1), "moe.expert_bias")):
        with pytest.raises(InputError) as exc:
            MoESpec(**{**base, **bad})
        assert exc.value.field == field, bad
    with pytest.raises(InputError, match="needs router_score sigmoid"):
        MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=64, expert_bias=True)
    with pytest.raises(InputError, match="expected true or false"):
        model_from_dict({"name": "k", "num_layers": 2, "hidden_size": 64, "num_heads": 4, "ffn_hidden_size": 128,
                         "vocab_size": 100, "seq_len": 64,
                         "moe": {"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 64, "expert_bias": "yes"}})


def test_presets_state_their_config_json_routers():
    """config.json values as mirrored in ai-dynamo/aiconfigurator@095f58a (topk_method noaux_tc,
    routed_scaling_factor, n_group, topk_group; MiniMax-M2.5 use_routing_bias)."""
    expected = {"deepseek-v3": (True, 2.5, 8, 4), "deepseek-r1": (True, 2.5, 8, 4), "kimi-k2": (True, 2.827, 1, 1),
                "kimi-k2.5": (True, 2.827, 1, 1), "glm-5": (True, 2.5, 1, 1), "minimax-m2.5": (True, 1.0, 1, 1),
                "mixtral-8x7b": (False, 1.0, 1, 1)}
    for name, facts in expected.items():
        m = load_model(name).moe
        assert (m.expert_bias, m.topk_scaling_factor, m.num_groups, m.group_topk) == facts, name


def test_hf_deepseek_router_follows_topk_method():
    kimi = model_from_hf_config(KIMI_K2).moe
    assert (kimi.expert_bias, kimi.topk_scaling_factor, kimi.num_groups, kimi.group_topk) == (True, 2.827, 1, 1)
    # DeepSeek-V2-Lite style: greedy ignores n_group / topk_group, no bias
    greedy = model_from_hf_config({**DEEPSEEK_V3, "model_type": "deepseek_v2", "scoring_func": "softmax",
                                   "topk_method": "greedy", "routed_scaling_factor": 1.0}).moe
    assert (greedy.expert_bias, greedy.num_groups, greedy.group_topk) == (False, 1, 1)
    limited = model_from_hf_config({**DEEPSEEK_V3, "scoring_func": "softmax", "topk_method": "group_limited_greedy",
                                    "n_group": 8, "topk_group": 3}).moe
    assert (limited.expert_bias, limited.num_groups, limited.group_topk) == (False, 8, 3)
    with pytest.raises(InputError, match="topk_method.*sigmoid"):
        model_from_hf_config({**DEEPSEEK_V3, "scoring_func": "softmax"})
    with pytest.raises(InputError, match="unknown top-k method"):
        model_from_hf_config({**DEEPSEEK_V3, "topk_method": "auxless"})
    with pytest.raises(InputError, match="7 groups do not divide the 256 experts"):
        model_from_hf_config({**DEEPSEEK_V3, "n_group": 7})
