"""Presets and Hugging Face readers of the models built with the parallel attention + MLP block
(GPT-J-6B, Falcon-7B / 40B / 180B, Phi-2, Command-R; ``model_specs/hf_parallel_families.py``).

Parameter counts are ``cost_models.params.total_params``'s (weight matrices, embedding, two
h-wide norm vectors a layer and the final one; no biases), derived here by hand from each
public config.json and held to the size each model is published under. The config dicts are
the checkpoints' public config.json files as published on Hugging Face (keys that do not
describe the architecture, such as token ids and auto_map, left out).
"""
from __future__ import annotations

from dataclasses import fields

import pytest

from cli_results import one_line_error, run
from cost_models.params import total_params
from hardware_specs.errors import InputError
from model_specs import load_model, model_from_hf_config

#: EleutherAI/gpt-j-6b config.json
GPTJ_6B = {"model_type": "gptj", "architectures": ["GPTJForCausalLM"], "activation_function": "gelu_new",
           "attn_pdrop": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0, "layer_norm_epsilon": 1e-05, "n_embd": 4096,
           "n_head": 16, "n_inner": None, "n_layer": 28, "n_positions": 2048, "rotary": True, "rotary_dim": 64,
           "tie_word_embeddings": False, "vocab_size": 50400}
#: tiiuae/falcon-7b config.json (transformers' falcon names)
FALCON_7B = {"model_type": "falcon", "architectures": ["FalconForCausalLM"], "alibi": False,
             "apply_residual_connection_post_layernorm": False, "attention_dropout": 0.0, "bias": False,
             "hidden_dropout": 0.0, "hidden_size": 4544, "layer_norm_epsilon": 1e-05, "multi_query": True,
             "new_decoder_architecture": False, "num_attention_heads": 71, "num_hidden_layers": 32,
             "parallel_attn": True, "vocab_size": 65024}
#: tiiuae/falcon-40b config.json
FALCON_40B = {"model_type": "falcon", "architectures": ["FalconForCausalLM"], "alibi": False,
              "apply_residual_connection_post_layernorm": False, "attention_dropout": 0.0, "bias": False,
              "hidden_dropout": 0.0, "hidden_size": 8192, "layer_norm_epsilon": 1e-05, "multi_query": True,
              "new_decoder_architecture": True, "num_attention_heads": 128, "num_hidden_layers": 60,
              "num_kv_heads": 8, "parallel_attn": True, "vocab_size": 65024}
#: tiiuae/falcon-180B config.json
FALCON_180B = {"model_type": "falcon", "architectures": ["FalconForCausalLM"], "alibi": False, "attention_dropout": 0.0,
               "bias": False, "hidden_dropout": 0.0, "hidden_size": 14848, "layer_norm_epsilon": 1e-05,
               "max_position_embeddings": 2048, "multi_query": True, "new_decoder_architecture": True,
               "num_attention_heads": 232, "num_hidden_layers": 80, "num_kv_heads": 8, "parallel_attn": True,
               "rope_scaling": None, "rope_theta": 10000.0, "vocab_size": 65024}
#: the first configs of Falcon-40B and -7B (remote code configuration_RW.py)
REFINED_WEB_40B = {"model_type": "RefinedWeb", "alibi": False, "attention_dropout": 0.0, "bias": False,
                   "hidden_dropout": 0.0, "hidden_size": 8192, "layer_norm_epsilon": 1e-05, "n_head": 128,
                   "n_head_kv": 8, "n_layer": 60, "parallel_attn": True, "vocab_size": 65024}
REFINED_WEB_MODEL_7B = {"model_type": "RefinedWebModel", "alibi": False, "attention_dropout": 0.0, "bias": False,
                        "hidden_dropout": 0.0, "hidden_size": 4544, "layer_norm_epsilon": 1e-05, "multi_query": True,
                        "n_head": 71, "n_layer": 32, "parallel_attn": True, "vocab_size": 65024}
#: microsoft/phi-2 config.json
PHI_2 = {"model_type": "phi", "architectures": ["PhiForCausalLM"], "attention_dropout": 0.0, "embd_pdrop": 0.0,
         "hidden_act": "gelu_new", "hidden_size": 2560, "intermediate_size": 10240, "layer_norm_eps": 1e-05,
         "max_position_embeddings": 2048, "num_attention_heads": 32, "num_hidden_layers": 32,
         "num_key_value_heads": 32, "partial_rotary_factor": 0.4, "qk_layernorm": False, "resid_pdrop": 0.1,
         "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 51200}
#: CohereForAI/c4ai-command-r-v01 config.json
COMMAND_R = {"model_type": "cohere", "architectures": ["CohereForCausalLM"], "attention_bias": False,
             "attention_dropout": 0.0, "hidden_act": "silu", "hidden_size": 8192, "intermediate_size": 22528,
             "layer_norm_eps": 1e-05, "logit_scale": 0.0625, "max_position_embeddings": 8192,
             "model_max_length": 131072, "num_attention_heads": 64, "num_hidden_layers": 40,
             "num_key_value_heads": 64, "rope_theta": 8000000.0, "use_qk_norm": False, "vocab_size": 256000}

CONFIGS = {"gpt-j-6b": GPTJ_6B, "falcon-7b": FALCON_7B, "falcon-40b": FALCON_40B, "falcon-180b": FALCON_180B,
           "phi-2": PHI_2, "command-r": COMMAND_R}


def _count(layers, h, heads, kv, d, ffn, vocab, gated, tied) -> int:
    """total_params by hand: per layer Q and O (h x heads d each), K and V (h x kv d each), the MLP
    (2 or 3 h x ffn) and two h-wide norms; the embedding (and an untied head) V x h; the final norm."""
    layer = 2 * h * heads * d + 2 * h * kv * d + (3 if gated else 2) * h * ffn + 2 * h
    return layers * layer + (1 if tied else 2) * vocab * h + h


# (preset, hand count from its config.json, published size in billions, the rounding it is published at)
SIZES = [
    # model card: 6,053,381,344 with biases; the weights alone 6.05B
    ("gpt-j-6b", _count(28, 4096, 16, 16, 256, 16384, 50400, False, False), 6.05, 0.005),
    ("falcon-7b", _count(32, 4544, 71, 1, 64, 18176, 65024, False, True), 7, 0.5),
    # published as "40B": 41.3B rounds to it at one significant figure
    ("falcon-40b", _count(60, 8192, 128, 8, 64, 32768, 65024, False, True), 40, 5),
    ("falcon-180b", _count(80, 14848, 232, 8, 64, 59392, 65024, False, True), 180, 5),
    ("phi-2", _count(32, 2560, 32, 32, 80, 10240, 51200, False, False), 2.78, 0.005),
    ("command-r", _count(40, 8192, 64, 64, 128, 22528, 256000, True, True), 35, 0.5),
]


@pytest.mark.parametrize("name, by_hand, published_b, rounding_b", SIZES)
def test_preset_parameter_count_is_the_hand_count_and_the_published_size(name, by_hand, published_b, rounding_b):
    model = load_model(name)
    assert total_params(model) == by_hand
    assert abs(by_hand / 1e9 - published_b) <= rounding_b, (name, by_hand / 1e9)


def test_hand_counts_in_billions():
    got = {name: round(count / 1e9, 2) for name, count, _, _ in SIZES}
    assert got == {"gpt-j-6b": 6.05, "falcon-7b": 6.92, "falcon-40b": 41.3, "falcon-180b": 178.55, "phi-2": 2.78,
                   "command-r": 34.98}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_hf_config_reads_into_the_preset(name):
    preset, read = load_model(name), model_from_hf_config(CONFIGS[name])
    differ = {f.name: (getattr(preset, f.name), getattr(read, f.name)) for f in fields(preset)
              if f.name not in ("name", "source") and getattr(preset, f.name) != getattr(read, f.name)}
    assert differ == {}
    assert read.parallel_attention_mlp is True


def test_parallel_block_norms_and_key_value_heads_per_preset():
    got = {n: (load_model(n).parallel_shared_norm, load_model(n).num_kv_heads) for n in CONFIGS}
    # one norm feeds both branches except under Falcon's new decoder architecture (ln_attn, ln_mlp)
    assert got == {"gpt-j-6b": (True, 16), "falcon-7b": (True, 1), "falcon-40b": (False, 8),
                   "falcon-180b": (False, 8), "phi-2": (True, 32), "command-r": (True, 64)}


@pytest.mark.parametrize("config, preset", [(REFINED_WEB_40B, "falcon-40b"), (REFINED_WEB_MODEL_7B, "falcon-7b")])
def test_falcon_first_model_type_names_read_as_the_falcon_configs(config, preset):
    read, want = model_from_hf_config(config), load_model(preset)
    for key in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size",
                "parallel_attention_mlp", "parallel_shared_norm", "tied_embeddings", "linear_bias",
                "position_embedding", "max_context_tokens", "seq_len"):
        assert getattr(read, key) == getattr(want, key), key


def test_falcon_layouts_beyond_the_presets():
    # Falcon2-style new architecture with one norm; a Falcon-RW-style sequential ALiBi model with
    # biases and every head its own key/value head
    one = model_from_hf_config({**FALCON_40B, "num_ln_in_parallel_attn": 1})
    assert (one.parallel_attention_mlp, one.parallel_shared_norm, one.num_kv_heads) == (True, True, 8)
    rw = model_from_hf_config({**FALCON_7B, "parallel_attn": False, "multi_query": False, "alibi": True,
                               "bias": True, "num_attention_heads": 32, "hidden_size": 2048, "num_hidden_layers": 24})
    assert (rw.parallel_attention_mlp, rw.parallel_shared_norm, rw.num_kv_heads) == (False, False, 32)
    assert (rw.position_embedding, rw.linear_bias, rw.ffn_hidden_size) == ("alibi", True, 8192)


def test_phi_and_cohere_defaults_are_their_config_classes():
    phi = {k: v for k, v in PHI_2.items() if k not in ("partial_rotary_factor", "tie_word_embeddings")}
    m = model_from_hf_config(phi)
    assert (m.rotary_fraction, m.tied_embeddings) == (0.5, False)       # PhiConfig defaults
    cohere = {k: v for k, v in COMMAND_R.items() if k != "tie_word_embeddings"}
    assert model_from_hf_config(cohere).tied_embeddings is True          # CohereConfig's default
    # a null hidden_act is unset, as a null key is in every reader (Falcon's activation, GPT-J's
    # activation_function): CohereConfig's silu; it was refused as "unknown Cohere MLP activation None"
    null_act = model_from_hf_config({**COMMAND_R, "hidden_act": None})
    assert (null_act.gated_mlp, null_act.activation, null_act.ffn_hidden_size) == (True, "swiglu", 22528)
    # Command R+ states its q/k norms and 8 key/value heads: read, the norms not modelled
    plus = model_from_hf_config({**COMMAND_R, "use_qk_norm": True, "num_key_value_heads": 8})
    assert plus.num_kv_heads == 8 and plus.parallel_shared_norm is True


@pytest.mark.parametrize("config, field, says", [
    ({**FALCON_40B, "activation": "swish"}, "hf_config.activation", "unknown MLP activation 'swish'"),
    ({**FALCON_40B, "num_ln_in_parallel_attn": 3}, "hf_config.num_ln_in_parallel_attn", "must be 1 or 2 norms"),
    ({**FALCON_7B, "parallel_attn": "yes"}, "hf_config.parallel_attn", "expected true or false"),
    ({**COMMAND_R, "hidden_act": "gelu"}, "hf_config.hidden_act", "unknown Cohere MLP activation 'gelu'"),
    ({**COMMAND_R, "use_qk_norm": 1}, "hf_config.use_qk_norm", "expected true or false"),
    ({**GPTJ_6B, "rotary_dim": 512}, "hf_config.rotary_dim", "must be 1 to the head width 256"),
    ({**PHI_2, "hidden_act": "silu"}, "hf_config.hidden_act", "unknown MLP activation 'silu'"),
])
def test_unknown_values_are_refused_naming_the_key(config, field, says):
    with pytest.raises(InputError) as err:
        model_from_hf_config(config)
    assert err.value.field == field and says in err.value.message


def test_cli_refuses_an_unknown_falcon_activation_in_one_line(tmp_path):
    import json
    (tmp_path / "config.json").write_text(json.dumps({**FALCON_40B, "activation": "swish"}))
    one_line_error(run("models", "show", tmp_path / "config.json"), "activation: unknown MLP activation 'swish'",
                   "use gelu")


def test_models_list_shows_the_presets_with_their_sizes():
    result = run("models", "list")
    assert result.exit_code == 0
    rows = {line.split()[0]: line.split() for line in result.output.splitlines() if line.strip()}
    for name, count, _, _ in SIZES:
        assert rows[name][8] == f"{count / 1e9:.2f}", (name, rows[name])


# a layout each runs on: the tp divides the key/value heads (Falcon-7B's 71 heads and one
# key/value head leave tp 1), and the run fits
SIMULATE = {
    "gpt-j-6b": ("-c", "dgx-a100-80gb", "-n", 8, "--zero", 1, "--global-batch", 256),
    "falcon-7b": ("-c", "dgx-a100-80gb", "-n", 64, "--zero", 1, "--global-batch", 512, "--recompute", "selective"),
    "falcon-40b": ("-c", "dgx-a100-80gb", "-n", 64, "--tp", 8, "--zero", 1, "--global-batch", 512,
                   "--sequence-parallel", "--recompute", "selective"),
    "falcon-180b": ("-c", "dgx-h100", "-n", 512, "--tp", 8, "--pp", 8, "--zero", 1, "--global-batch", 1024,
                    "--sequence-parallel", "--recompute", "selective"),
    "phi-2": ("-c", "dgx-a100-80gb", "-n", 8, "--zero", 1, "--global-batch", 256),
    "command-r": ("-c", "dgx-h100", "-n", 64, "--tp", 8, "--zero", 1, "--global-batch", 512,
                  "--sequence-parallel", "--recompute", "selective"),
}


@pytest.mark.parametrize("name", sorted(SIMULATE))
def test_simulate_runs_each_preset_and_it_fits(name):
    result = run("simulate", "-m", name, *SIMULATE[name])
    assert result.exit_code == 0, result.output
    assert "fits: yes" in result.output


@pytest.mark.parametrize("name", ["falcon-40b", "command-r"])
def test_serve_simulate_runs_falcon_40b_and_command_r(name):
    result = run("serve", "simulate", "-m", name, "-s", "dgx-h100", "-b", "vllm", "--tp", 4, "--batch", 32,
                 "--isl", 1024, "--osl", 512)
    assert result.exit_code == 0, result.output
    assert "tpot_ms" in result.output


def test_palm_540b_has_table_1s_540_35b_parameters():
    """Chowdhery et al. 2022, Table 1: 540.35B. The weight matrices and the shared embedding give
    540,354,281,472 (540.35B); total_params adds two 18,432-wide norm vectors a layer and the final
    one (4,368,384), 540.36B."""
    palm = load_model("palm-540b")
    h, layers = 18432, 118
    matrices = layers * (2 * h * 48 * 256 + 2 * h * 1 * 256 + 3 * h * 4 * h) + 256000 * h
    assert matrices == 540_354_281_472 and round(matrices / 1e9, 2) == 540.35
    assert total_params(palm) == matrices + layers * 2 * h + h == 540_358_649_856
    assert (palm.parallel_attention_mlp, palm.parallel_shared_norm, palm.num_kv_heads, palm.head_dim,
            palm.tied_embeddings, palm.linear_bias) == (True, True, 1, 256, True, False)


def test_palm_simulates_on_a_layout_its_one_key_value_head_allows():
    # the default stack (megatron-core) splits whole key/value heads over tp (kv_head_replication
    # off), so one head leaves tp 1; paraplan plan's best H100 layout runs and fits
    args = ("-m", "palm-540b", "-c", "dgx-h100", "-n", 3072, "--pp", 64, "--cp", 8, "--global-batch", 1536,
            "--zero", 1, "--no-sequence-parallel")
    result = run("simulate", *args)
    assert result.exit_code == 0 and "fits: yes" in result.output, result.output
    one_line_error(run("simulate", *args[:6], "--tp", 8, "--pp", 8, "--global-batch", 1536),
                   "error: tp: tp=8 is more than the 1 key/value heads of palm-540b")
