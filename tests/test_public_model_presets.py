"""Presets and aliases for public models AIConfigurator supports (their config.json files as mirrored
in github ai-dynamo/aiconfigurator@095f58a aic-core/src/aiconfigurator_core/model_configs/): each
preset states the config's architecture (facts below written by hand from the config.json), a
serving row's Hugging Face id finds it (``model_preset_for``), and its parameter count is the
published size the model's name (or model card) states."""
from __future__ import annotations

import pytest

from cost_models.params import total_params
from model_specs.catalog import load_preset
from paraplan.validation.serving import model_preset_for

# preset -> config.json facts: num_hidden_layers, hidden_size, num_attention_heads,
# num_key_value_heads, head_dim, vocab_size, max_position_embeddings, tie_word_embeddings,
# and for MoE (num_experts, num_experts_per_tok, moe_intermediate_size, shared expert width)
FACTS = {
    "qwen3-0.6b": dict(layers=28, hidden=1024, heads=16, kv=8, head_dim=128, vocab=151936, ctx=40960,
                       tied=True, ffn=3072),
    "qwen3-1.7b": dict(layers=28, hidden=2048, heads=16, kv=8, head_dim=128, vocab=151936, ctx=40960,
                       tied=True, ffn=6144),
    "qwen3-8b": dict(layers=36, hidden=4096, heads=32, kv=8, head_dim=128, vocab=151936, ctx=40960,
                     tied=False, ffn=12288),
    "qwen3-coder-480b-a35b": dict(layers=62, hidden=6144, heads=96, kv=8, head_dim=128, vocab=151936,
                                  ctx=262144, tied=False, moe=(160, 8, 2560, 0)),
    "qwen3.5-27b": dict(layers=64, hidden=5120, heads=24, kv=4, head_dim=256, vocab=248320, ctx=262144,
                        tied=False, ffn=17408, linear_value_heads=48, mtp=1),
    "qwen3.5-35b-a3b": dict(layers=40, hidden=2048, heads=16, kv=2, head_dim=256, vocab=248320, ctx=262144,
                            tied=False, moe=(256, 8, 512, 512), linear_value_heads=32, mtp=1),
    "qwen3.5-122b-a10b": dict(layers=48, hidden=3072, heads=32, kv=2, head_dim=256, vocab=248320, ctx=262144,
                              tied=False, moe=(256, 8, 1024, 1024), linear_value_heads=64, mtp=1),
    "nemotron-3-super-120b-a12b": dict(layers=88, hidden=4096, heads=32, kv=2, head_dim=128, vocab=131072,
                                       ctx=262144, tied=False, moe=(512, 22, 2688, 5376), latent=1024,
                                       mamba_heads=128, pattern=(40, 8, 40)),
    "nemotron-3-ultra-550b-a55b": dict(layers=108, hidden=8192, heads=64, kv=2, head_dim=128, vocab=131072,
                                       ctx=262144, tied=False, moe=(512, 22, 5120, 10240), latent=2048,
                                       mamba_heads=256, pattern=(48, 12, 48)),
    "nemotron-3.5-lightning": dict(layers=52, hidden=2688, heads=32, kv=2, head_dim=128, vocab=131072,
                                   ctx=1048576, tied=False, moe=(128, 6, 1856, 3712), latent=0,
                                   mamba_heads=64, pattern=(23, 6, 23)),
    "minimax-m2.7": dict(layers=62, hidden=3072, heads=48, kv=8, head_dim=128, vocab=200064, ctx=204800,
                         tied=False, moe=(256, 8, 1536, 0)),
}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_preset_states_its_config(name):
    f, m = FACTS[name], load_preset(name)
    assert m.name == name
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim) == \
        (f["layers"], f["hidden"], f["heads"], f["kv"], f["head_dim"])
    assert (m.vocab_size, m.max_context_tokens, m.tied_embeddings) == (f["vocab"], f["ctx"], f["tied"])
    if "ffn" in f:
        assert m.ffn_hidden_size == f["ffn"]
    if "moe" in f:
        experts, top_k, width, shared = f["moe"]
        assert (m.moe.num_experts, m.moe.top_k, m.moe.expert_ffn_hidden_size) == (experts, top_k, width)
        assert m.moe.shared_expert_ffn_hidden_size == shared
        assert m.moe.num_shared_experts == (1 if shared else 0)
    else:
        assert m.moe is None
    if "linear_value_heads" in f:       # Qwen3.5: 3 of 4 layers Gated DeltaNet, one MTP module
        la = m.linear_attention
        assert (la.layer_fraction, la.num_key_heads, la.key_head_dim, la.num_value_heads, la.value_head_dim) == \
            (0.75, 16, 128, f["linear_value_heads"], 128)
        assert (m.rotary_fraction, m.rope_theta, m.mtp_layers) == (0.25, 1e7, f["mtp"])
    if "pattern" in f:                  # Nemotron-H: Mamba-2 / attention / MoE counts of the layer pattern
        p = m.hybrid_pattern
        assert (p.count("M"), p.count("*"), p.count("E")) == f["pattern"] and len(p) == f["layers"]
        assert (m.mamba.num_heads, m.mamba.head_dim, m.mamba.state_size, m.mamba.num_groups) == \
            (f["mamba_heads"], 64, 128, 8)
        assert m.moe.latent_size == f["latent"]
        assert (m.activation, m.position_embedding, m.mtp_layers) == ("squared_relu", "none", 0)


@pytest.mark.parametrize("model_path, preset", [
    ("Qwen/Qwen3-0.6B", "qwen3-0.6b"),
    ("Qwen/Qwen3-1.7B", "qwen3-1.7b"),
    ("Qwen/Qwen3-8B", "qwen3-8b"),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "qwen3-coder-480b-a35b"),
    ("Qwen/Qwen3.5-27B", "qwen3.5-27b"),
    ("Qwen/Qwen3.5-35B-A3B", "qwen3.5-35b-a3b"),
    ("nvidia/Qwen3.6-35B-A3B-NVFP4", "qwen3.5-35b-a3b"),                      # alias: same architecture
    ("Qwen/Qwen3.5-122B-A10B", "qwen3.5-122b-a10b"),
    ("nvidia/Qwen3.5-122B-A10B-NVFP4", "qwen3.5-122b-a10b"),
    ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8", "nemotron-3-super-120b-a12b"),
    ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", "nemotron-3-super-120b-a12b"),
    ("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", "nemotron-3-ultra-550b-a55b"),   # -BF16 suffix
    ("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8", "nemotron-3-ultra-550b-a55b"),
    ("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4", "nemotron-3-ultra-550b-a55b"),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nemotron-3-nano"),
    ("nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4", "nemotron-3.5-lightning"),
    ("MiniMaxAI/MiniMax-M2.7", "minimax-m2.7"),
    ("nvidia/MiniMax-M2.7-NVFP4", "minimax-m2.7"),
    ("nvidia/Kimi-K2.6-NVFP4", "kimi-k2.5"),                                  # alias: same architecture
    ("nvidia/Kimi-K2.7-Code-NVFP4", "kimi-k2.5"),                             # alias: same architecture
    ("zai-org/GLM-5.1", "glm-5"),                                             # alias: same architecture
    ("zai-org/GLM-5.1-FP8", "glm-5"),
    ("nvidia/GLM-5.1-NVFP4", "glm-5"),
])
def test_hugging_face_id_finds_the_preset(model_path, preset):
    assert model_preset_for(model_path) == preset


@pytest.mark.parametrize("model_path", [
    "zai-org/GLM-5.2",              # head_dim 192, shared indexer (indexer_types), 1M context: not GLM-5's
    "nvidia/Qwen3.6-27B-NVFP4",     # output_gate_type swish: not stated by Qwen3.5-27B's config
])
def test_a_model_that_differs_is_not_an_alias(model_path):
    assert model_preset_for(model_path) is None


@pytest.mark.parametrize("alias, preset", [
    ("Kimi-K2.6", "kimi-k2.5"), ("Kimi-K2.7-Code", "kimi-k2.5"), ("GLM-5.1", "glm-5"),
    ("Qwen3.6-35B-A3B", "qwen3.5-35b-a3b"),
    ("NVIDIA-Nemotron-3-Super-120B-A12B", "nemotron-3-super-120b-a12b"),
    ("NVIDIA-Nemotron-3-Ultra-550B-A55B", "nemotron-3-ultra-550b-a55b"),
    ("NVIDIA-Nemotron-3.5-Lightning-30B-A3B", "nemotron-3.5-lightning"),
])
def test_alias_loads_the_preset(alias, preset):
    assert load_preset(alias).name == preset


def test_megatron_bridge_labels_find_no_nemotron_3_super_or_ultra_preset():
    """Megatron-Bridge's tables name runs Nemotron_3_Super / Nemotron_3_Ultra; the training
    validation leaves them unpredicted (their MTP block is not modelled), so the presets carry
    their sizes in their names."""
    from paraplan.validation.model_names import preset_named
    assert preset_named("Nemotron_3_Super") is None and preset_named("Nemotron_3_Ultra") is None


def _output_gate(name) -> int:
    """Qwen3.5's softmax-attention output gate (config.json attn_output_gate true): an h x
    heads*head_dim projection in each full-attention layer, not modelled (the HF loader leaves it
    out too), added back to compare with the published size."""
    m = load_preset(name)
    full_layers = m.num_layers - round(m.linear_attention.layer_fraction * m.num_layers)
    return full_layers * m.hidden_size * m.num_heads * m.head_dim


# preset -> (published total B, published active B or None); from the name unless noted
SIZES = {
    "qwen3-0.6b": (0.6, None),
    "qwen3-1.7b": (1.7, None),
    "qwen3-8b": (8.2, None),                        # the model card's 8.2B (the name rounds to 8B)
    "qwen3-coder-480b-a35b": (480, 35),
    "qwen3.5-27b": (27, None),
    "qwen3.5-35b-a3b": (35, None),
    "qwen3.5-122b-a10b": (122, None),
    "nemotron-3-super-120b-a12b": (120, None),
    "nemotron-3-ultra-550b-a55b": (550, 55),
    "nemotron-3.5-lightning": (31.6, None),         # the Nano's model card (the same layers): 31.6B
}


@pytest.mark.parametrize("name", sorted(SIZES))
def test_parameter_counts_are_the_published_sizes(name):
    m = load_preset(name)
    extra = _output_gate(name) if m.linear_attention is not None else 0
    total_b, active_b = SIZES[name]
    assert (total_params(m) + extra) / 1e9 == pytest.approx(total_b, rel=0.02)
    if active_b is not None:
        assert (total_params(m, active=True) + extra) / 1e9 == pytest.approx(active_b, rel=0.02)


def test_active_counts_the_names_round():
    """The active sizes in these names are rounded and leave out what this count includes (the
    embedding and LM head, counted here, as the minimax-m2.5 and nemotron-3-nano tests note):
    pinned, with the gap to the name."""
    active = {name: round(total_params(load_preset(name), active=True) / 1e9, 2) for name in
              ("qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "nemotron-3-super-120b-a12b", "nemotron-3.5-lightning",
               "minimax-m2.7")}
    assert active == {"qwen3.5-35b-a3b": 3.37,               # A3B; 2.35B without the 1.02B embedding + head
                      "qwen3.5-122b-a10b": 9.47,             # A10B; +0.30B output gate, vision encoder not counted
                      "nemotron-3-super-120b-a12b": 12.77,   # A12B
                      "nemotron-3.5-lightning": 3.58,        # A3B; the Nano's card: 3.2B, 3.6B with embeddings
                      "minimax-m2.7": 11.03}                 # ~10B without the 1.23B embedding + head
