"""Llama 4 and Nemotron-H presets: their parameter counts against the published sizes, their layer
layouts against the Hugging Face / Megatron-Bridge configs, and the names published tables use."""
from __future__ import annotations

import pytest

from cost_models.params import total_params
from model_specs import list_models, load_model

# (preset, published total, published active per token, where it is published). Llama 4's totals
# include the vision encoder the presets do not model (the language model alone is ~1% smaller).
PUBLISHED = [
    ("llama4-scout", 109e9, 17e9, "Meta Llama 4 model card: Scout 17B active / 109B total, 16 experts"),
    ("llama4-maverick", 400e9, 17e9, "Meta Llama 4 model card: Maverick 17B active / 400B total, 128 experts"),
    ("nemotron-h-8b", 8e9, 8e9, "NVIDIA 2025, Nemotron-H (arXiv 2504.03624): 8B"),
    ("nemotron-h-47b", 47e9, 47e9, "NVIDIA 2025, Nemotron-H (arXiv 2504.03624): 47B (MiniPuzzle from 56B)"),
    ("nemotron-h-56b", 56e9, 56e9, "NVIDIA 2025, Nemotron-H (arXiv 2504.03624): 56B"),
]


@pytest.mark.parametrize("name,total,active,where", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_parameter_counts_match_the_published_sizes_within_2_percent(name, total, active, where):
    model = load_model(name)
    assert total_params(model) == pytest.approx(total, rel=0.02), where
    assert total_params(model, active=True) == pytest.approx(active, rel=0.02), where


@pytest.mark.parametrize("alias,name", [
    ("Llama 4 Maverick 400B", "llama4-maverick"),      # Megatron-Bridge performance tables
    ("Llama4 Maverick", "llama4-maverick"),            # NeMo / DGX Cloud tables
    ("Llama 4 Maverick", "llama4-maverick"),
    ("meta-llama/Llama-4-Maverick-17B-128E", "llama4-maverick"),
    ("Llama-4-Maverick-17B-128E-Instruct", "llama4-maverick"),
    ("Llama 4 Scout 109B", "llama4-scout"),
    ("Llama4 Scout", "llama4-scout"),
    ("meta-llama/Llama-4-Scout-17B-16E", "llama4-scout"),
    ("Nemotron-H-8B-Base-8K", "nemotron-h-8b"),
    ("nvidia/Nemotron-H-47B-Base-8K", "nemotron-h-47b"),
    ("nemotronh_56b", "nemotron-h-56b"),               # Megatron-Bridge recipe name
])
def test_published_names_resolve_to_the_presets(alias, name):
    assert load_model(alias).name == name


def test_new_presets_are_listed():
    names = set(list_models())
    assert {"llama4-scout", "llama4-maverick", "nemotron-h-8b", "nemotron-h-47b", "nemotron-h-56b"} <= names


def test_maverick_alternates_dense_and_moe_layers_as_hugging_face_places_them():
    # config.json interleave_moe_layer_step 2; transformers' Llama 4 puts MoE at layers 1, 3, ..., 47
    model = load_model("llama4-maverick")
    assert [i for i, moe in enumerate(model.is_moe_layer()) if moe] == list(range(1, 48, 2))
    assert model.moe.dense_ffn_hidden_size == 16384          # intermediate_size_mlp
    assert model.moe.expert_ffn_hidden_size == 8192          # intermediate_size
    assert (model.moe.num_experts, model.moe.top_k, model.moe.num_shared_experts) == (128, 1, 1)


def test_scout_is_moe_in_every_layer_with_one_shared_expert():
    model = load_model("llama4-scout")
    assert model.num_moe_layers == 48
    assert (model.moe.num_experts, model.moe.top_k, model.moe.num_shared_experts) == (16, 1, 1)


def test_llama4_chunked_attention_is_a_window_on_three_of_four_layers():
    for name in ("llama4-scout", "llama4-maverick"):
        model = load_model(name)
        assert (model.sliding_window, model.sliding_window_layer_fraction) == (8192, 0.75)
        assert (model.hidden_size, model.num_layers, model.num_heads, model.num_kv_heads) == (5120, 48, 40, 8)
        assert (model.head_dim, model.vocab_size, model.tied_embeddings) == (128, 202048, False)


@pytest.mark.parametrize("name,layers,mamba,attention,mlp", [
    ("nemotron-h-8b", 52, 24, 4, 24),
    ("nemotron-h-47b", 98, 45, 5, 48),
    ("nemotron-h-56b", 118, 54, 10, 54),
])
def test_nemotron_h_layer_mix_follows_the_megatron_bridge_pattern(name, layers, mamba, attention, mlp):
    model = load_model(name)
    assert model.num_layers == layers
    assert model.hybrid_counts() == {"mamba": mamba, "attention": attention, "mlp": mlp, "moe": 0}
    assert model.activation == "squared_relu" and not model.gated_mlp
