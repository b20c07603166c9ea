"""Hugging Face builders for the families built with the parallel attention + MLP block
(``ModelSpec.parallel_attention_mlp``): GPT-J (model_type ``gptj``), Falcon (``falcon``, and the
``RefinedWeb`` / ``RefinedWebModel`` names its first checkpoints used), Phi-1/1.5/2 (``phi``) and
Cohere Command-R (``cohere``). GPT-NeoX's reader is ``hf_families._gpt_neox``. ``FAMILIES`` here is
merged into the dispatch table by ``model_specs/hf_config.py``; each builder returns the fields of
the matching preset (gpt-j-6b, falcon-7b / 40b / 180b, phi-2, command-r).

Keys read (names as in ``transformers``; defaults those of the family's config class):

- gptj: n_layer, n_embd, n_head, n_inner (null: 4 x n_embd), rotary_dim (null: the whole head),
  activation_function, tie_word_embeddings (false), n_positions. One LayerNorm feeds both branches
  (GPTJBlock ``ln_1``); attention projections without biases.
- falcon: num_hidden_layers / n_layer, hidden_size / n_embed, num_attention_heads / n_head,
  num_kv_heads / n_head_kv, multi_query, new_decoder_architecture, num_ln_in_parallel_attn,
  parallel_attn, ffn_hidden_size (null: 4h), activation, bias, alibi, max_position_embeddings (2048),
  rope_theta (10000), tie_word_embeddings (true). transformers FalconAttention's key/value heads:
  num_kv_heads under the new decoder architecture, else 1 with multi_query, else every head;
  FalconDecoderLayer: the new architecture is always parallel, with ``ln_attn`` and ``ln_mlp``
  (num_ln_in_parallel_attn 2, its value when unset) or one ``input_layernorm`` (1); the old one
  is parallel with one norm when parallel_attn, else sequential. ``RefinedWeb`` (Falcon-40B's first
  config) is the new architecture and ``RefinedWebModel`` (Falcon-7B's) the old one, with
  configuration_RW.py's defaults (multi_query and parallel_attn false), as transformers'
  convert_custom_code_checkpoint.py maps them.
- phi: Llama's key names, intermediate_size, partial_rotary_factor (0.5), hidden_act,
  tie_word_embeddings (false), qk_layernorm; every linear layer biased (PhiAttention, PhiMLP).
- cohere: Llama's key names, hidden_act (silu, SwiGLU), tie_word_embeddings (true), attention_bias,
  use_qk_norm, logit_scale. CohereLayerNorm is a LayerNorm without bias.

Not modelled (no parameters worth counting or no cost of their own, as for OLMo 2's q/k norms in
``hf_families``): Phi's and Command-R+'s per-head q/k LayerNorms (qk_layernorm / use_qk_norm), the
logit_scale multiply, GPT-J's and Phi's lm_head bias.
"""
from __future__ import annotations

from typing import Any, Callable

from hardware_specs.errors import InputError, shown
from model_specs.hf_config_fields import ConfigReader, training_seq_len
from model_specs.hf_families import _llama_like

#: activation names of these families' configs (transformers ``ACT2FN`` keys) -> a plain MLP's activation
_PLAIN_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu", "gelu_fast": "gelu", "gelu_pytorch_tanh": "gelu",
                      "relu": "relu"}
#: FalconConfig defaults by model_type: (new_decoder_architecture, multi_query, parallel_attn)
_FALCON_DEFAULTS = {"falcon": (False, True, True), "refinedweb": (True, False, True),
                    "refinedwebmodel": (False, False, False)}


def _plain_activation(cfg: ConfigReader, key: str, default: str) -> str:
    value = cfg.data.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, str) or value not in _PLAIN_ACTIVATIONS:
        raise InputError(f"{cfg.where}.{key}", f"unknown MLP activation {shown(value)}",
                         "use " + ", ".join(_PLAIN_ACTIVATIONS) + ", or write a model YAML file")
    return _PLAIN_ACTIVATIONS[value]


def _gptj(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    hidden = cfg.get_int("n_embd")
    heads = cfg.get_int("n_head")
    if heads < 1 or hidden < 1:
        raise InputError(f"{cfg.where}.{'n_head' if heads < 1 else 'n_embd'}", "must be >= 1",
                         "write the checkpoint's value")
    head_dim = hidden // heads
    fraction = 1.0
    if cfg.data.get("rotary_dim") is not None:
        rotary = cfg.get_int("rotary_dim")
        if not 0 < rotary <= head_dim:
            raise InputError(f"{cfg.where}.rotary_dim", f"must be 1 to the head width {head_dim}, got {rotary}",
                             "write the checkpoint's rotary_dim")
        fraction = rotary / head_dim
    return dict(num_layers=cfg.get_int("n_layer"), hidden_size=hidden, num_heads=heads, num_kv_heads=heads,
                ffn_hidden_size=cfg.get_int("n_inner", default=4 * hidden), vocab_size=cfg.get_int("vocab_size"),
                seq_len=training_seq_len(cfg, seq_len), tied_embeddings=cfg.get_bool("tie_word_embeddings", False),
                gated_mlp=False, activation=_plain_activation(cfg, "activation_function", "gelu_new"),
                position_embedding="rope", rotary_fraction=fraction, normalization="layernorm",
                # GPTJAttention's projections have no bias (GPTJMLP's do; ModelSpec has one switch)
                linear_bias=False, parallel_attention_mlp=True, parallel_shared_norm=True)


def _falcon(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    new_default, mq_default, parallel_default = _FALCON_DEFAULTS[family]
    new_arch = cfg.get_bool("new_decoder_architecture", new_default)
    multi_query = cfg.get_bool("multi_query", mq_default)
    parallel = cfg.get_bool("parallel_attn", parallel_default)
    hidden = cfg.get_int("hidden_size", "n_embed")
    heads = cfg.get_int("num_attention_heads", "n_head")
    if new_arch:
        kv = cfg.get_int("num_kv_heads", "n_head_kv", default=heads)
        norms = cfg.data.get("num_ln_in_parallel_attn")
        if norms is None:
            norms = 2
        if isinstance(norms, bool) or norms not in (1, 2):
            raise InputError(f"{cfg.where}.num_ln_in_parallel_attn", f"must be 1 or 2 norms, got {shown(norms)}",
                             "write the checkpoint's value, or drop the key (2)")
        parallel, shared = True, norms == 1
    else:
        kv = 1 if multi_query else heads
        shared = parallel
    fields = dict(num_layers=cfg.get_int("num_hidden_layers", "n_layer"), hidden_size=hidden, num_heads=heads,
                  num_kv_heads=kv, ffn_hidden_size=cfg.get_int("ffn_hidden_size", default=4 * hidden),
                  vocab_size=cfg.get_int("vocab_size"), seq_len=training_seq_len(cfg, seq_len),
                  max_context_tokens=cfg.get_int("max_position_embeddings", default=2048),
                  tied_embeddings=cfg.get_bool("tie_word_embeddings", True), gated_mlp=False,
                  activation=_plain_activation(cfg, "activation", "gelu"), normalization="layernorm",
                  linear_bias=cfg.get_bool("bias", False),
                  parallel_attention_mlp=parallel, parallel_shared_norm=parallel and shared)
    if cfg.get_bool("alibi", False):
        fields["position_embedding"] = "alibi"
    else:
        fields.update(position_embedding="rope", rope_theta=cfg.get_float("rope_theta", 10000.0))
    return fields


def _phi(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    fields = _llama_like(cfg, family, seq_len)
    if not cfg.has("partial_rotary_factor"):       # PhiConfig's default
        fields["rotary_fraction"] = 0.5
    cfg.get_bool("qk_layernorm", False)
    fields.update(gated_mlp=False, activation=_plain_activation(cfg, "hidden_act", "gelu_new"),
                  normalization="layernorm", linear_bias=True, qkv_bias=True,
                  parallel_attention_mlp=True, parallel_shared_norm=True)
    return fields


def _cohere(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    act = cfg.data.get("hidden_act")
    if act is None:                                # unset or null, as every key here: CohereConfig's default
        act = "silu"
    if act != "silu":
        raise InputError(f"{cfg.where}.hidden_act", f"unknown Cohere MLP activation {shown(act)}",
                         "use silu (CohereMLP's SwiGLU), or write a model YAML file")
    fields = _llama_like(cfg, family, seq_len)
    cfg.get_bool("use_qk_norm", False)
    cfg.get_float("logit_scale", 0.0625)
    fields.update(tied_embeddings=cfg.get_bool("tie_word_embeddings", True), normalization="layernorm",
                  linear_bias=False, parallel_attention_mlp=True, parallel_shared_norm=True)
    return fields


FAMILIES: dict[str, Callable[[ConfigReader, str, int | None], dict[str, Any]]] = {
    "gptj": _gptj, "falcon": _falcon, "refinedweb": _falcon, "refinedwebmodel": _falcon,
    "phi": _phi, "cohere": _cohere,
}
