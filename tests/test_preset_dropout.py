"""Presets of checkpoints whose config.json turns dropout off must say so.

``ModelSpec`` defaults both dropouts on (Megatron's 0.1), which keeps a residual and an
attention-probability mask per layer in training memory. The presets below describe models
whose public config.json states attention_dropout 0.0 (or no key, which transformers reads as
0.0) and whose modeling code has no residual dropout; the HF loader
(``model_specs.hf_config_fields.dropout_fields``) and Megatron-Bridge (``provider.hidden_dropout
= 0.0`` in the family's bridge) both run them without dropout. A preset and a config.json of
one model must price the same training step.
"""
from __future__ import annotations

import pytest

from model_specs import load_model
from model_specs.hf_config_fields import dropout_fields
from paraplan import api

M = "ai-dynamo/aiconfigurator@095f58a aic-core/src/aiconfigurator_core/model_configs/"

#: preset -> (the config.json's dropout keys as stated, the loader's family, where it was read)
CONFIG_FACTS = {
    "deepseek-r1": ({"attention_dropout": 0.0}, "deepseek_v3", M + "deepseek-ai--DeepSeek-R1_config.json"),
    "deepseek-v3": ({"attention_dropout": 0.0}, "deepseek_v3", M + "deepseek-ai--DeepSeek-V3_config.json"),
    "kimi-k2": ({"attention_dropout": 0.0}, "kimi_k2", M + "moonshotai--Kimi-K2-Instruct_config.json"),
    "kimi-k2.5": ({"attention_dropout": 0.0}, "kimi_k2", M + "moonshotai--Kimi-K2.5_config.json (text_config)"),
    "minimax-m2.5": ({}, "minimax_m2", M + "MiniMaxAI--MiniMax-M2.5_config.json (no dropout key)"),
    "gpt-oss-120b": ({"attention_dropout": 0.0}, "gpt_oss", M + "openai--gpt-oss-120b_config.json"),
    "gpt-oss-20b": ({"attention_dropout": 0.0}, "gpt_oss", M + "openai--gpt-oss-20b_config.json"),
    "qwen3-32b": ({"attention_dropout": 0.0}, "qwen3", M + "Qwen--Qwen3-32B_config.json"),
    "qwen3-30b-a3b": ({"attention_dropout": 0.0}, "qwen3_moe", M + "Qwen--Qwen3-30B-A3B_config.json"),
    "qwen3-235b-a22b": ({"attention_dropout": 0.0}, "qwen3_moe", M + "Qwen--Qwen3-235B-A22B_config.json"),
    "qwen3.5-397b-a17b": ({"attention_dropout": 0.0}, "qwen3_5_moe",
                          M + "Qwen--Qwen3.5-397B-A17B_config.json (text_config)"),
    "mixtral-8x7b": ({"attention_dropout": 0.0}, "mixtral", M + "mistralai--Mixtral-8x7B-v0.1_config.json"),
    "mixtral-8x22b": ({"attention_dropout": 0.0}, "mixtral", M + "mistralai--Mixtral-8x22B-v0.1_config.json"),
    "qwen2-57b-a14b": ({"attention_dropout": 0.0}, "qwen2_moe", "Hugging Face Qwen/Qwen2-57B-A14B config.json"),
    "glm-5": ({"attention_dropout": 0.0}, "glm_moe_dsa", M + "zai-org--GLM-5_config.json"),
    "llama3.1-8b": ({"attention_dropout": 0.0}, "llama", M + "meta-llama--Meta-Llama-3.1-8B_config.json"),
}


@pytest.mark.parametrize("preset", sorted(CONFIG_FACTS))
def test_preset_dropout_matches_the_loader_reading_its_config(preset):
    stated, family, _source = CONFIG_FACTS[preset]
    loader = dropout_fields(stated, family)
    model = load_model(preset)
    assert loader == {"hidden_dropout": False, "attention_dropout": False}
    assert (model.hidden_dropout, model.attention_dropout) == (loader["hidden_dropout"], loader["attention_dropout"])


def _step(model):
    row = api.simulate(model, "dgx-h100", gpus=1024, tp=2, pp=8, ep=64, global_batch=1024, seq_len=4096).iloc[0]
    return row["memory_gib"], row["step_time_s"]


def test_deepseek_r1_prices_as_deepseek_v3():
    """R1 is a post-trained V3 (same config.json architecture): one layout, one price. With
    dropout left on, R1 kept 3.45 GB more per GPU (the masks) for no reason."""
    r1, v3 = load_model("deepseek-r1"), load_model("deepseek-v3")
    assert (r1.hidden_dropout, r1.attention_dropout) == (v3.hidden_dropout, v3.attention_dropout) == (False, False)
    mem_r1, time_r1 = _step("deepseek-r1")
    mem_v3, time_v3 = _step("deepseek-v3")
    assert mem_r1 == mem_v3
    assert time_r1 == time_v3
