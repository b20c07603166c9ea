"""Model-spec fixes from a review of the presets and the Hugging Face config import: each test
failed before its fix."""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from model_specs import load_model, model_from_hf_config
from paraplan.exports.megatron import _model_args


# --- the DeepSeek-V3-style routers score by sigmoid ---------------------------------------------

@pytest.mark.parametrize("name", ["deepseek-r1", "kimi-k2.5", "glm-5", "minimax-m2.5"])
def test_sigmoid_routed_presets_say_so_and_the_megatron_export_writes_it(name):
    # each config.json states scoring_func sigmoid (DeepSeek-R1, Kimi-K2.5 text_config and GLM-5
    # also topk_method noaux_tc); unstated, router_score defaulted to softmax and the Megatron
    # export launched --moe-router-score-function softmax
    model = load_model(name)
    assert model.moe.router_score == "sigmoid"
    assert dict(_model_args(model, 4096))["--moe-router-score-function"] == "sigmoid"


# --- MPT: grouped-query attention, the gated MLP, RoPE, fractional expansion ratios -------------

MPT_GQA = {"architectures": ["MPTForCausalLM"], "model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32,
           "expansion_ratio": 4, "max_seq_len": 8192, "vocab_size": 100352, "no_bias": True,
           "learned_pos_emb": False, "tie_word_embeddings": False, "norm_type": "low_precision_layernorm",
           "attn_config": {"alibi": False, "attn_type": "grouped_query_attention", "kv_n_heads": 8, "rope": True,
                           "rope_theta": 500000},
           "ffn_config": {"ffn_type": "mptglu"}}


def test_mpt_reads_grouped_query_heads_the_gated_mlp_and_rope():
    # llm-foundry's MPTConfig: attn_config.kv_n_heads for grouped_query_attention, ffn_type mptglu
    # is act(gate) * up then down (three matrices; act gelu by default: GeGLU), rope + rope_theta.
    # All three were dropped: 32 KV heads, a two-matrix MLP and no RoPE base.
    m = model_from_hf_config(MPT_GQA)
    assert (m.num_heads, m.num_kv_heads, m.ffn_hidden_size) == (32, 8, 16384)
    assert (m.gated_mlp, m.activation, m.position_embedding, m.rope_theta) == (True, "geglu", "rope", 500000.0)
    silu = model_from_hf_config({**MPT_GQA, "ffn_config": {"ffn_type": "mptglu", "ffn_act_fn": {"name": "silu"}}})
    assert silu.activation == "swiglu"
    mqa = model_from_hf_config({**MPT_GQA, "attn_config": {"attn_type": "multiquery_attention"}})
    assert mqa.num_kv_heads == 1 and mqa.position_embedding == "none"


def test_mpt_fractional_expansion_ratio_is_read_when_whole_as_llm_foundry_does():
    # llm-foundry resolve_ffn_hidden_size: int(d_model * expansion_ratio), refused unless whole
    assert model_from_hf_config({**MPT_GQA, "expansion_ratio": 3.5}).ffn_hidden_size == 14336
    assert model_from_hf_config({**MPT_GQA, "ffn_config": {"ffn_type": "mptglu", "ffn_hidden_size": 14000}}
                                ).ffn_hidden_size == 14000
    with pytest.raises(InputError, match="not a whole FFN width"):
        model_from_hf_config({**MPT_GQA, "expansion_ratio": 3.3})


@pytest.mark.parametrize("change, field", [
    ({"ffn_config": {"ffn_type": "torch_dmoe"}}, "ffn_config.ffn_type"),
    ({"attn_config": {"attn_type": "cross_attention"}}, "attn_config.attn_type"),
    ({"attn_config": {"attn_type": "grouped_query_attention"}}, "attn_config.kv_n_heads"),
    ({"ffn_config": {"ffn_type": "mptmlp", "ffn_act_fn": {"name": "silu"}}}, "ffn_config.ffn_act_fn"),
    ({"block_overrides": {"order": []}}, "block_overrides"),
])
def test_mpt_layouts_not_read_are_refused_with_the_key(change, field):
    with pytest.raises(InputError) as err:
        model_from_hf_config({**MPT_GQA, **change})
    assert err.value.field.endswith(field)


# --- OPT: a narrower word embedding (opt-350m) ---------------------------------------------------

OPT_350M = {"model_type": "opt", "num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16,
            "ffn_dim": 4096, "vocab_size": 50272, "max_position_embeddings": 2048, "word_embed_proj_dim": 512}


def test_opt_with_a_projected_word_embedding_is_refused_not_overcounted():
    # facebook/opt-350m: 512-wide embeddings and LM head with project_in / project_out to 1024;
    # read as 1024-wide they gave 7.8% too many parameters
    with pytest.raises(InputError) as err:
        model_from_hf_config(OPT_350M)
    assert err.value.field.endswith("word_embed_proj_dim") and "512" in err.value.message
    # equal to the hidden size (every other OPT) it is the usual layout
    assert model_from_hf_config({**OPT_350M, "word_embed_proj_dim": 1024}).hidden_size == 1024


# --- context limits: GPT-2's n_positions, MPT's max_seq_len, the learned-position presets -------

def test_the_context_is_read_from_every_key_vllm_reads_the_smallest_winning():
    # vLLM _get_and_verify_max_len: max_position_embeddings (OPT), n_positions (GPT-2), max_seq_len
    # (MPT), ...: the smallest stated. GPT-2 and MPT configs were read as stating no context at all.
    gpt2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}
    assert model_from_hf_config(gpt2).max_context_tokens == 1024
    assert model_from_hf_config(MPT_GQA).max_context_tokens == 8192
    both = {**MPT_GQA, "max_position_embeddings": 4096}
    assert model_from_hf_config(both).max_context_tokens == 4096
    with pytest.raises(InputError) as err:
        model_from_hf_config({**gpt2, "n_positions": 0})
    assert err.value.field.endswith("n_positions")


@pytest.mark.parametrize("name", ["opt-175b", "gpt3-125m", "gpt3-1.3b", "gpt3-13b", "gpt3-175b", "gpt3-20b"])
def test_learned_position_presets_state_their_2048_token_table_and_serving_refuses_past_it(name):
    from simulator.serving.context import ServingContext
    assert load_model(name).max_context_tokens == 2048
    ctx = ServingContext.build(name, "dgx-h100", "vllm", "bf16")
    ctx.check_request(1536, 512)
    with pytest.raises(InputError, match="2,048-token context"):
        ctx.check_request(30000, 512)


# --- linear-attention sizes are checked like the Mamba mixer's ----------------------------------

LINEAR_MODEL = {"name": "la", "num_layers": 4, "hidden_size": 256, "num_heads": 4, "num_kv_heads": 2,
                "ffn_hidden_size": 512, "vocab_size": 1000, "gated_mlp": True,
                "linear_attention": {"layer_fraction": 0.75, "num_key_heads": 4, "key_head_dim": 64,
                                     "num_value_heads": 8, "value_head_dim": 64, "conv_kernel": 4, "state_bytes": 4}}


@pytest.mark.parametrize("key, value", [("state_bytes", float("nan")), ("state_bytes", float("inf")),
                                        ("state_bytes", 0), ("layer_fraction", float("nan")),
                                        ("num_key_heads", 2**40), ("value_head_dim", 0), ("conv_kernel", 2**20)])
def test_linear_attention_sizes_out_of_range_are_input_errors_naming_the_key(key, value):
    # state_bytes NaN passed (NaN <= 0 is false) and crashed later as an internal error; the integer
    # sizes were checked only for < 1, so 2**40 heads went through
    from model_specs import model_from_dict
    data = {**LINEAR_MODEL, "linear_attention": {**LINEAR_MODEL["linear_attention"], key: value}}
    with pytest.raises(InputError) as err:
        model_from_dict(data)
    assert err.value.field == f"linear_attention.{key}"


def test_linear_attention_from_python_refuses_fractional_heads():
    from model_specs.model_spec import LinearAttentionSpec
    with pytest.raises(InputError, match="integer"):
        LinearAttentionSpec(layer_fraction=0.75, num_key_heads=1.5, key_head_dim=64, num_value_heads=8,
                            value_head_dim=64)
    assert load_model("qwen3.5-397b-a17b").linear_attention.state_bytes == 4


# --- a MoE block whose dense layers cover the model is refused, as the HF import refuses it -----

@pytest.mark.parametrize("first_dense", [4, 5])
def test_moe_with_every_layer_dense_is_refused_not_silently_dense(first_dense):
    from model_specs import model_from_dict
    data = {"name": "m", "num_layers": 4, "hidden_size": 256, "num_heads": 4, "ffn_hidden_size": 512,
            "vocab_size": 1000, "gated_mlp": True,
            "moe": {"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 128, "first_dense_layers": first_dense}}
    with pytest.raises(InputError, match="leave no mixture-of-experts layer") as err:
        model_from_dict(data)
    assert err.value.field.endswith("first_dense_layers")
    ok = model_from_dict({**data, "moe": {**data["moe"], "first_dense_layers": 3}})
    assert ok.num_moe_layers == 1


def test_a_published_row_with_fewer_layers_than_its_presets_dense_ones_keeps_one_moe_layer():
    # validate published fits a row's layer count into its preset; deepseek-v3's 3 dense layers on a
    # 2-layer proxy are cut to 1 together with num_layers (the refusal above must not fire first)
    from test_published_rows import _llama31_8b_row
    from paraplan.validation.published import row_inputs
    row = _llama31_8b_row(model="DeepSeek-V3", layers=2, hidden=7168, ffn_hidden=18432, heads=128, kv_heads=128,
                          vocab=129280, moe_experts=256, moe_topk=8, ep=8, seq_len=4096)
    model = row_inputs(row).model
    assert (model.name, model.num_layers, model.moe.first_dense_layers, model.num_moe_layers) == ("deepseek-v3", 2, 1, 1)


# --- RoPE facts the presets left out --------------------------------------------------------------

def test_minimax_m25_rotates_half_of_each_head_at_its_rope_base_as_its_config_import_does():
    # MiniMax-M2.5 config.json: rotary_dim 64 of head_dim 128, rope_theta 5000000; the preset had
    # full rotation and no base, so the Megatron export wrote neither --rotary-percent nor --rotary-base
    model = load_model("minimax-m2.5")
    assert (model.rotary_fraction, model.rope_theta) == (0.5, 5e6)
    args = dict(_model_args(model, 4096))
    assert (args["--rotary-percent"], args["--rotary-base"]) == (0.5, 5000000)
    imported = model_from_hf_config({"model_type": "minimax_m2", "num_hidden_layers": 62, "hidden_size": 3072,
                                     "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
                                     "intermediate_size": 1536, "vocab_size": 200064, "num_local_experts": 256,
                                     "num_experts_per_tok": 8, "rotary_dim": 64, "rope_theta": 5000000,
                                     "scoring_func": "sigmoid", "max_position_embeddings": 196608})
    assert (imported.rotary_fraction, imported.rope_theta, imported.moe.router_score) == (0.5, 5e6, "sigmoid")


@pytest.mark.parametrize("name", ["nemotron-4-15b", "nemotron-4-340b"])
def test_nemotron_4_rotates_half_of_each_head(name):
    # NeMo's Nemotron4Config15B / 340B inherit NemotronConfig.rotary_percent 0.5 (as nemotron-8b / 22b);
    # the presets said 1.0, so the Megatron export left out --rotary-percent 0.5
    model = load_model(name)
    assert model.rotary_fraction == 0.5
    assert dict(_model_args(model, 4096))["--rotary-percent"] == 0.5


def test_a_nemotron_config_without_partial_rotary_factor_rotates_half_as_transformers_builds_it():
    # transformers NemotronConfig(partial_rotary_factor=0.5): an absent key is 0.5, not 1.0
    cfg = {"model_type": "nemotron", "num_hidden_layers": 32, "hidden_size": 6144, "num_attention_heads": 48,
           "num_key_value_heads": 8, "intermediate_size": 24576, "vocab_size": 256000}
    assert model_from_hf_config(cfg).rotary_fraction == 0.5
    assert model_from_hf_config({**cfg, "partial_rotary_factor": 1.0}).rotary_fraction == 1.0


# --- Qwen3.5's MTP module; the refusal for a spec without one ------------------------------------

def test_qwen35_has_its_mtp_module_and_it_drafts_with_a_full_attention_layer():
    # config.json text_config mtp_num_hidden_layers 1; vLLM's Qwen3_5MultiTokenPredictor is DeepSeek's
    # module shape (2h x h fc, one decoder layer, shared head) with a full-attention layer, which the
    # draft pass and the parameter count price as such, not as the 3/4-linear mean layer
    from dataclasses import replace
    from cost_models.inference_layers import layer_rates
    from cost_models.inference_step import mtp_draft_pass
    from cost_models.params import mtp_params
    from hardware_specs.catalog import load_cluster
    from simulator.serving.context import ServingContext
    from test_serving_speculative import PURE, QUIET
    qwen = load_model("qwen3.5-397b-a17b")
    assert qwen.mtp_layers == 1
    softmax_only = replace(qwen, linear_attention=None)
    cluster = load_cluster("dgx-h100")
    rates = layer_rates(cluster.gpu, PURE, "bf16", "bf16")
    args = (cluster, PURE, QUIET.serving, rates, 2.0, 8, 1, 8, 1, 16.0, 100_000.0)
    assert mtp_draft_pass(qwen, *args)[0] == pytest.approx(mtp_draft_pass(softmax_only, *args)[0], rel=1e-12)
    assert mtp_params(qwen) == mtp_params(softmax_only)
    ctx = ServingContext.build("qwen3.5-397b-a17b", "dgx-h100", "vllm", "bf16", speculative_tokens=1)
    assert ctx.draft_kv_bytes_per_token(8) > 0


def test_drafting_without_a_modelled_mtp_module_says_what_the_spec_states():
    # the message cited config.json num_nextn_predict_layers 0, which MiniMax-M2.5 (num_mtp_modules 3,
    # not modelled) does not say
    from simulator.serving.context import ServingContext
    with pytest.raises(InputError) as err:
        ServingContext.build("minimax-m2.5", "dgx-h100", "vllm", "fp8_block", speculative_tokens=1)
    assert "model spec has no multi-token-prediction module" in err.value.message
    assert "num_nextn_predict_layers" not in err.value.message


def test_a_minimax_config_says_its_mtp_modules_are_not_modelled():
    cfg = {"model_type": "minimax_m2", "num_hidden_layers": 62, "hidden_size": 3072, "num_attention_heads": 48,
           "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 1536, "vocab_size": 200064,
           "num_local_experts": 256, "num_experts_per_tok": 8, "rotary_dim": 64, "num_mtp_modules": 3}
    m = model_from_hf_config(cfg)
    assert m.mtp_layers == 0 and "3 multi-token-prediction modules are not modelled" in m.source


@pytest.mark.parametrize("name, theta, scaling, factor, beta_fast, fraction", [
    ("kimi-k2", 50000, "yarn", 32, 1, 1.0), ("kimi-k2.5", 50000, "yarn", 64, 32, 1.0),
    ("glm-5", 1e6, "", 0, 0, 1.0), ("qwen3.5-397b-a17b", 1e7, "", 0, 0, 0.25)])
def test_presets_state_the_rope_their_config_json_states(name, theta, scaling, factor, beta_fast, fraction):
    # left out, the Megatron export launched these at Megatron's --rotary-base 10000 and plain RoPE
    m = load_model(name)
    assert (m.rope_theta, m.rope_scaling, m.rope_scaling_factor, m.rope_beta_fast, m.rotary_fraction) == (
        theta, scaling, factor, beta_fast, fraction)
    if scaling:      # yarn: 4096 x factor is the context the preset states (vLLM's derivation)
        assert m.rope_original_max_position_embeddings * factor == m.max_context_tokens
