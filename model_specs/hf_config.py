"""Build a ``ModelSpec`` from a local Hugging Face ``config.json``.

Supported ``model_type`` families and the keys read (names as in ``transformers``):

- llama, mistral, qwen2, qwen3, phi3, olmo2 (gated SwiGLU MLP): num_hidden_layers, hidden_size,
  num_attention_heads, num_key_value_heads, intermediate_size, vocab_size, head_dim,
  tie_word_embeddings, max_position_embeddings, sliding_window (+ use_sliding_window /
  max_window_layers for Qwen, layer_types where given).
- nemotron (squared-ReLU plain MLP): as llama, plus kv_channels for the head width.
- every RoPE family above: partial_rotary_factor (the share of each head RoPE rotates), rope_theta,
  rope_scaling, or transformers v5's rope_parameters (which holds all three) in its place.
- gpt2, opt, bloom, gpt_neox, mpt (plain two-matrix MLP): each family's own key names.
- mixtral: + num_local_experts, num_experts_per_tok.
- minimax_m2: as mixtral, + head_dim, scoring_func, rotary_dim (``_minimax_m2``).
- nemotron_h (hybrid Mamba-Transformer): hybrid_override_pattern / layers_block_type, the
  mamba_* / ssm_state_size / n_groups sizes, n_routed_experts, moe_latent_size (``_nemotron_h``).
- llama4_text (Llama 4's text_config): + intermediate_size_mlp, num_local_experts, interleave_moe_layer_step,
  moe_layers, attention_chunk_size, no_rope_layers (``_llama4``).
- qwen2_moe, qwen3_moe: + num_experts, num_experts_per_tok, moe_intermediate_size,
  shared_expert_intermediate_size, decoder_sparse_step, mlp_only_layers.
- deepseek_v2, deepseek_v3, kimi_k2: + n_routed_experts, num_experts_per_tok, moe_intermediate_size,
  n_shared_experts, first_k_dense_replace, moe_layer_freq, and the multi-latent attention sizes
  q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim; num_nextn_predict_layers
  (multi-token-prediction modules).
- gpt_oss: + num_local_experts, experts_per_token, sliding_window, layer_types, swiglu_limit.

Sequence length: a config states the longest context the model supports (kept as
``max_context_tokens``, which ``serve`` checks prompt + output against), not the length it
was trained at. ``seq_len`` is taken, in order, from the ``seq_len`` argument, the pre-training
context the config names (``rope_scaling.original_max_position_embeddings``,
``initial_context_length``), or ``max_position_embeddings`` capped at ``MAX_DEFAULT_SEQ_LEN``.

For multi-latent attention ``head_dim`` is the query/key head width
(``qk_nope_head_dim + qk_rope_head_dim``); the exact projection sizes are in ``ModelSpec.mla``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from hardware_specs.errors import InputError, check_spec_size, json_int, not_a_file, safe_name, unique_keys
from model_specs.model_spec import MambaSpec, MLASpec, ModelSpec, MoESpec, check_size

# Longest default training sequence taken from max_position_embeddings; longer contexts are
# usually reached by a short extension phase, not the bulk of training.
MAX_DEFAULT_SEQ_LEN = 8192
# Models with learned-free positions (ALiBi) and no stated context.
FALLBACK_SEQ_LEN = 2048

_MISSING = object()
#: largest integer a config may give (the largest ``ModelSpec`` size, the sequence length, is
#: 2**30; ``ModelSpec`` bounds each size on its own)
MAX_INT = 2**30


def read_json(path: Path, what: str = "model", non_finite: bool = False) -> dict[str, Any]:
    """Parse one JSON object; unreadable or malformed files raise ``InputError`` naming the file.

    ``NaN`` / ``Infinity`` are refused unless ``non_finite`` (a Hugging Face config.json, which
    Python's reader writes them into: every Nemotron-H config has ``time_step_limit`` [0.0,
    Infinity]); the reader's typed getters then refuse such a value in any key they read."""
    check_spec_size(path, what)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")     # a BOM is not part of the JSON
    except OSError as exc:
        raise InputError(what, f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(what, f"{path} is not UTF-8 text (byte {exc.start})", "save it as UTF-8") from None
    try:
        data = json.loads(text, parse_constant=float if non_finite else _refuse_constant, parse_int=json_int,
                          object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise InputError(what, f"malformed JSON in {path} at line {exc.lineno}: {exc.msg}",
                         "fix the file's syntax") from None
    except RecursionError:
        raise InputError(what, f"{path} nests values too deeply", "flatten the file") from None
    except InputError as exc:           # NaN / Infinity, an integer of absurd length
        raise InputError(what, f"{path}: {exc.message}", exc.fix) from None
    if not isinstance(data, dict):
        raise InputError(what, f"{path} must hold a JSON object")
    return data


def _refuse_constant(name: str):
    """``NaN`` / ``Infinity`` are not JSON (Python's reader accepts them; a config must not)."""
    raise InputError("json", f"{name} is not a JSON number", "write a finite number or null")


class _Config:
    """Typed access to one config mapping; every error names the config and the key."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data = data
        self.where = where

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get_int(self, *keys: str, default: Any = _MISSING) -> int:
        """The first of ``keys`` that is set, as an integer."""
        for key in keys:
            value = self.data.get(key)
            if value is None:
                continue
            if isinstance(value, bool):
                raise InputError(f"{self.where}.{key}", f"expected an integer, got {value!r}")
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, int):
                if abs(value) > MAX_INT:
                    raise InputError(f"{self.where}.{key}", f"{value:,} is above the largest supported value "
                                     f"{MAX_INT:,}", "check the number")
                return value
            raise InputError(f"{self.where}.{key}", f"expected an integer, got {value!r}")
        if default is _MISSING:
            raise InputError(f"{self.where}.{keys[0]}", "missing", f"add '{keys[0]}' to the config")
        return default

    def get_float(self, key: str, default: float) -> float:
        """``key`` as a finite number, or ``default`` when the config does not set it."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"{self.where}.{key}", f"expected a finite number, got {value!r}")
        return float(value)

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InputError(f"{self.where}.{key}", f"expected true or false, got {value!r}")
        return value

    def get_int_list(self, key: str) -> list[int]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                   for v in value):
            raise InputError(f"{self.where}.{key}", f"expected a list of layer indices, got {value!r}")
        return value


#: config keys of the residual (hidden) and of the attention-probability dropout (GPT-2
#: ``resid_pdrop`` / ``attn_pdrop``; BERT-style ``hidden_dropout_prob`` /
#: ``attention_probs_dropout_prob``; Llama, Mistral, DeepSeek ``attention_dropout``)
_HIDDEN_DROPOUT_KEYS = ("hidden_dropout", "resid_pdrop", "hidden_dropout_prob")
_ATTENTION_DROPOUT_KEYS = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob")
#: a family's own name for its residual dropout (transformers OPTConfig ``dropout``)
_FAMILY_HIDDEN_DROPOUT_KEYS = {"opt": ("dropout",)}
#: (hidden, attention) dropout probability when the config.json states no key: the defaults of
#: the family's transformers config class, which is what ``from_pretrained`` builds. Nonzero
#: only for GPT2Config (resid_pdrop=0.1, attn_pdrop=0.1) and OPTConfig (dropout=0.1,
#: attention_dropout=0.0). Every other family read here defaults to no dropout: LlamaConfig,
#: MistralConfig, Qwen2Config, Qwen3Config, MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig,
#: DeepseekV2Config, DeepseekV3Config, GptOssConfig and NemotronConfig have
#: attention_dropout=0.0 and no residual dropout in their modeling code; BloomConfig and
#: GPTNeoXConfig have hidden_dropout=0.0 and attention_dropout=0.0; MptConfig resid_pdrop=0.0
#: and MptAttentionConfig attn_pdrop=0.0 (transformers ``models/<family>/configuration_*.py``).
#: Absent keys therefore do not fall back to ModelSpec's Megatron-style default (on).
_ABSENT_DROPOUT_DEFAULTS = {"gpt2": (0.1, 0.1), "opt": (0.1, 0.0)}


def _dropout_fields(data: dict, family: str) -> dict:
    """``hidden_dropout`` / ``attention_dropout`` as the config states them (a probability > 0
    is on), each absent one at its transformers config-class default for ``family``
    (``_ABSENT_DROPOUT_DEFAULTS``: off except GPT-2 and OPT)."""
    def stated(source, keys):
        for k in keys:      # a probability written as text ("0.1") was dropped, leaving dropout off
            v = source.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0):
                raise InputError(f"model.{k}", f"expected a probability from 0 to 1, got {v!r}",
                                 "write the checkpoint's number")
        values = [source[k] for k in keys if source.get(k) is not None]
        return None if not values else any(v > 0 for v in values)

    hidden_default, attention_default = _ABSENT_DROPOUT_DEFAULTS.get(family, (0.0, 0.0))
    hidden = stated(data, _HIDDEN_DROPOUT_KEYS + _FAMILY_HIDDEN_DROPOUT_KEYS.get(family, ()))
    attention = stated(data, _ATTENTION_DROPOUT_KEYS)
    if attention is None and isinstance(data.get("attn_config"), dict):
        attention = stated(data["attn_config"], ("attn_pdrop",))      # MPT nests it
    return {"hidden_dropout": hidden_default > 0 if hidden is None else hidden,
            "attention_dropout": attention_default > 0 if attention is None else attention}


def _rope_fields(cfg: _Config) -> dict[str, Any]:
    """``rope_theta`` and the ``rope_scaling`` type and factor a RoPE model's config states, and
    YaRN's parameters when the type is ``yarn``. A stated value that is not a number >= 0 (a
    string, a negative) is refused, not dropped: the Megatron export would otherwise launch with
    Megatron-LM's default in its place (``--mscale`` 0.0 where the checkpoint says 1.0)."""
    out: dict[str, Any] = {}
    rope = _rope_scaling(cfg)
    if cfg.has("rope_theta"):
        out["rope_theta"] = cfg.get_float("rope_theta", 0.0)
    elif rope is not None and rope.has("rope_theta"):         # transformers v5: inside rope_parameters
        out["rope_theta"] = rope.get_float("rope_theta", 0.0)
    if rope is not None:
        key = "rope_type" if rope.has("rope_type") else "type"
        kind = rope.data.get(key)
        if kind is not None and not isinstance(kind, str):
            raise InputError(f"{rope.where}.{key}", f"expected text (linear, dynamic, yarn, llama3, ...), got {kind!r}",
                             "write the checkpoint's rope_type")
        if kind and kind != "default":
            out["rope_scaling"] = kind
            factor = _rope_number(rope, "factor")
            if factor is not None:
                out["rope_scaling_factor"] = factor
            if kind == "yarn":
                # YaRN's parameters (DeepSeek-V3: original_max_position_embeddings 4096, beta_fast 32,
                # beta_slow 1, mscale 1.0, mscale_all_dim 1.0)
                original = _original_context(rope)
                if original is not None:
                    out["rope_original_max_position_embeddings"] = original
                for name in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim"):
                    value = _rope_number(rope, name)
                    if value is not None:
                        out[f"rope_{name}"] = value
    return out


def _rope_scaling(cfg: _Config) -> _Config | None:
    """The config's ``rope_scaling`` mapping, else its ``rope_parameters`` (the name transformers
    v5 writes, with ``rope_theta`` and ``partial_rotary_factor`` inside: nvidia/Kimi-K2.7-Code-NVFP4
    config.json ``rope_parameters`` {rope_type yarn, factor 64, original_max_position_embeddings
    4096, rope_theta 50000}); None when neither is given. Anything but a mapping is refused (a list
    was ignored, leaving the model unscaled), and so is a ``rope_parameters`` given per attention
    kind (Gemma 3's full_attention / sliding_attention entries), which no family read here has."""
    key = "rope_scaling" if cfg.data.get("rope_scaling") is not None else "rope_parameters"
    rope = cfg.data.get(key)
    if rope is None:
        return None
    if not isinstance(rope, dict):
        raise InputError(f"{cfg.where}.{key}", f"expected a mapping (rope_type, factor, ...) or null, got {rope!r}",
                         f"write the checkpoint's {key}")
    nested = sorted(k for k, v in rope.items() if isinstance(v, dict))
    if nested:
        raise InputError(f"{cfg.where}.{key}.{nested[0]}", "RoPE parameters given per attention kind are not read",
                         f"give one {key} mapping (rope_type, rope_theta, factor, ...)")
    return _Config(rope, f"{cfg.where}.{key}")


def _rope_number(rope: _Config, key: str) -> float | None:
    """A ``rope_scaling`` number (factor, beta_*, mscale*) as a float >= 0; None when unstated."""
    if not rope.has(key):
        return None
    value = rope.get_float(key, 0.0)
    if value < 0:
        raise InputError(f"{rope.where}.{key}", f"must be >= 0, got {value:g}",
                         "write the checkpoint's value, or drop the key")
    return value


def _original_context(rope: _Config | None) -> int | None:
    """``rope_scaling.original_max_position_embeddings`` (the pre-training context) as a positive
    integer; None when unstated."""
    if rope is None or not rope.has("original_max_position_embeddings"):
        return None
    value = rope.get_int("original_max_position_embeddings")
    if value < 1:
        raise InputError(f"{rope.where}.original_max_position_embeddings", f"must be >= 1 token, got {value}",
                         "write the checkpoint's pre-training context, or drop the key")
    return value


def _seq_len(cfg: _Config, seq_len: int | None) -> int:
    if seq_len is not None:
        return int(seq_len)
    original = _original_context(_rope_scaling(cfg))
    if original is not None:
        return original
    if cfg.has("initial_context_length"):
        return cfg.get_int("initial_context_length")
    max_pos = cfg.get_int("max_position_embeddings", "n_positions", "max_seq_len", default=FALLBACK_SEQ_LEN)
    return min(max_pos, MAX_DEFAULT_SEQ_LEN)


#: the attention kinds transformers' configs name in ``layer_types`` (Gemma 2/3, gpt-oss: full /
#: sliding; Qwen3-Next / Qwen3.5: linear; Llama 4: chunked)
LAYER_KINDS = ("full_attention", "sliding_attention", "linear_attention", "chunked_attention")


def _sliding_window(cfg: _Config, num_layers: int, family: str) -> tuple[int, float]:
    """(window tokens, fraction of layers that use it); (0, 0.0) for full attention everywhere."""
    window = cfg.get_int("sliding_window", default=0)
    if window < 0:
        raise InputError(f"{cfg.where}.sliding_window", f"must be a number of tokens >= 0, got {window}",
                         "write null (or 0) for full attention everywhere")
    layer_types = cfg.data.get("layer_types")
    if layer_types is not None and (not isinstance(layer_types, list) or len(layer_types) != num_layers
                                    or not all(isinstance(t, str) for t in layer_types)):
        raise InputError(f"{cfg.where}.layer_types", f"expected one attention kind per layer ({num_layers} names such "
                         f"as full_attention / sliding_attention), got {str(layer_types)[:80]}",
                         "write the checkpoint's layer_types")
    unknown = sorted({t for t in layer_types or () if t not in LAYER_KINDS})
    if unknown:
        raise InputError(f"{cfg.where}.layer_types", f"unknown attention kind {unknown[0]!r}",
                         "use " + ", ".join(LAYER_KINDS))
    if window == 0:
        return 0, 0.0
    if isinstance(layer_types, list) and layer_types:
        sliding = sum(1 for t in layer_types if t == "sliding_attention")
        return (window, sliding / len(layer_types)) if sliding else (0, 0.0)
    if family in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        # Qwen configs carry a window that is off unless use_sliding_window is set; then
        # layers from max_window_layers on use it.
        if not cfg.get_bool("use_sliding_window", False):
            return 0, 0.0
        full = min(num_layers, cfg.get_int("max_window_layers", default=num_layers))
        fraction = (num_layers - full) / num_layers
        return (window, fraction) if fraction > 0 else (0, 0.0)
    return window, 1.0


def _moe_layout(num_layers: int, moe_layers: list[int]) -> tuple[int, int]:
    """(first_dense_layers, moe_layer_frequency) that reproduce the set of MoE layer indices.

    ``MoESpec`` places MoE layers at first, first + freq, ...; when a config's layout is not of
    that form the pair returned keeps the number of MoE layers, which is what the cost depends on.
    """
    wanted = sorted(set(moe_layers))
    if not wanted:
        raise InputError("hf_config", "the layer layout leaves no mixture-of-experts layer",
                         "load it as a dense model")
    first = wanted[0]
    for freq in range(1, num_layers + 1):
        if list(range(first, num_layers, freq)) == wanted:
            return first, freq
    return num_layers - len(wanted), 1


def _dense_width(fields: dict[str, Any], first_dense: int, freq: int) -> int:
    """Width of the dense-MLP layers of an MoE model, stated only when there are such layers."""
    return fields["ffn_hidden_size"] if first_dense > 0 or freq > 1 else 0


def _attention(cfg: _Config, *heads_keys: str) -> dict[str, int]:
    num_heads = cfg.get_int(*heads_keys, "num_attention_heads")
    return {
        "num_heads": num_heads,
        "num_kv_heads": cfg.get_int("num_key_value_heads", default=num_heads),
        "head_dim": cfg.get_int("head_dim", default=0),
    }


def _llama_like(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    # bounded before the per-layer layouts below walk the layers
    num_layers = check_size(f"{cfg.where}.num_hidden_layers", cfg.get_int("num_hidden_layers"),
                            size="num_layers")
    window, fraction = _sliding_window(cfg, num_layers, family)
    return dict(
        num_layers=num_layers,
        hidden_size=cfg.get_int("hidden_size"),
        **_attention(cfg),
        ffn_hidden_size=cfg.get_int("intermediate_size"),
        vocab_size=cfg.get_int("vocab_size"),
        seq_len=_seq_len(cfg, seq_len),
        gated_mlp=True,
        position_embedding="rope",
        normalization="rmsnorm",
        tied_embeddings=cfg.get_bool("tie_word_embeddings", False),
        sliding_window=window,
        sliding_window_layer_fraction=fraction,
        # share of each head that RoPE rotates: transformers' RoPE initialisation reads
        # partial_rotary_factor for every family (Nemotron / Minitron 0.5); Megatron's --rotary-percent
        rotary_fraction=_rotary_fraction(cfg),
        # Qwen2 always biases q/k/v (transformers' Qwen2Attention); others say attention_bias
        qkv_bias=True if family in ("qwen2", "qwen2_moe") else cfg.get_bool("attention_bias", False),
        linear_bias=cfg.get_bool("mlp_bias", False) and cfg.get_bool("attention_bias", False),
    )


def _nemotron(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    fields = _llama_like(cfg, family, seq_len)
    fields["head_dim"] = cfg.get_int("head_dim", "kv_channels", default=0)
    fields["gated_mlp"] = False      # squared-ReLU two-matrix MLP
    fields.update(normalization="layernorm", activation="squared_relu")
    return fields


#: transformers NemotronHConfig ``layers_block_type`` names -> ``HYBRID_SYMBOLS``
_NEMOTRON_H_BLOCKS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _nemotron_h(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    """Nemotron-H / Nemotron 3 (model_type nemotron_h), a hybrid Mamba-Transformer: the layer list
    from ``hybrid_override_pattern`` (M Mamba-2, * attention, - MLP, E MoE) or ``layers_block_type``
    (mamba / attention / mlp / moe, newer configs); squared-ReLU MLPs of ``intermediate_size``,
    attention without positions, the Mamba-2 mixer of ``mamba_num_heads`` x ``mamba_head_dim``,
    ``ssm_state_size``, ``n_groups``, ``conv_kernel``, ``chunk_size``; MoE blocks of
    ``n_routed_experts`` top-``num_experts_per_tok`` of ``moe_intermediate_size``, shared experts of
    ``moe_shared_expert_intermediate_size``, routed at ``moe_latent_size`` when given (LatentMoE),
    sigmoid-scored, as the nemotron-h-* / nemotron-3-nano presets. The MTP block of Nemotron 3
    Super / Ultra (num_nextn_predict_layers) is not modelled: ModelSpec has no MTP for hybrids."""
    pattern = cfg.data.get("hybrid_override_pattern")
    if pattern is None and isinstance(cfg.data.get("layers_block_type"), list):
        blocks = cfg.data["layers_block_type"]
        unknown = sorted({str(b) for b in blocks if b not in _NEMOTRON_H_BLOCKS})
        if unknown:
            raise InputError(f"{cfg.where}.layers_block_type", f"unknown block {unknown[0]!r}",
                             "use " + ", ".join(_NEMOTRON_H_BLOCKS))
        pattern = "".join(_NEMOTRON_H_BLOCKS[b] for b in blocks)
    if not isinstance(pattern, str) or not pattern:
        raise InputError(f"{cfg.where}.hybrid_override_pattern", "missing",
                         "give the layer pattern (M = Mamba, * = attention, - = MLP, E = MoE)")
    num_layers = cfg.get_int("num_hidden_layers", default=len(pattern))
    hidden = cfg.get_int("hidden_size")
    fields = dict(num_layers=num_layers, hybrid_pattern=pattern, hidden_size=hidden, **_attention(cfg),
                  ffn_hidden_size=cfg.get_int("intermediate_size"), vocab_size=cfg.get_int("vocab_size"),
                  seq_len=_seq_len(cfg, seq_len), gated_mlp=False, activation="squared_relu",
                  position_embedding="none", normalization="rmsnorm",
                  linear_bias=cfg.get_bool("mlp_bias", False) and cfg.get_bool("attention_bias", False),
                  tied_embeddings=cfg.get_bool("tie_word_embeddings", False))
    fields["head_dim"] = cfg.get_int("head_dim", "attention_head_dim", default=0)
    if "M" in pattern:
        fields["mamba"] = MambaSpec(num_heads=cfg.get_int("mamba_num_heads"), head_dim=cfg.get_int("mamba_head_dim"),
                                    state_size=cfg.get_int("ssm_state_size"), num_groups=cfg.get_int("n_groups"),
                                    conv_kernel=cfg.get_int("conv_kernel", default=4),
                                    chunk_size=cfg.get_int("chunk_size", default=128))
    if "E" in pattern:
        shared = cfg.get_int("moe_shared_expert_intermediate_size", default=0)
        fields["moe"] = MoESpec(num_experts=cfg.get_int("n_routed_experts"), top_k=cfg.get_int("num_experts_per_tok"),
                                expert_ffn_hidden_size=cfg.get_int("moe_intermediate_size"),
                                num_shared_experts=cfg.get_int("n_shared_experts", default=1) if shared else 0,
                                shared_expert_ffn_hidden_size=shared, router_score="sigmoid",
                                latent_size=cfg.get_int("moe_latent_size", default=0))
    return fields


def _mixtral(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    fields = _llama_like(cfg, family, seq_len)
    fields["moe"] = MoESpec(num_experts=cfg.get_int("num_local_experts"),
                            top_k=cfg.get_int("num_experts_per_tok"),
                            expert_ffn_hidden_size=fields["ffn_hidden_size"])
    return fields


def _minimax_m2(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    """MiniMax-M2 / M2.5 / M2.7 (model_type minimax_m2): Mixtral's layout with GQA heads of an
    explicit ``head_dim`` and a sigmoid-scored router (``scoring_func``); RoPE over ``rotary_dim``
    of each head (64 of 128). Every layer must be softmax attention (``attn_type_list`` all 1;
    0 is MiniMax-01's lightning attention) and no shared expert (``shared_intermediate_size`` 0),
    as in the released M2 configs; anything else is refused. The MTP modules (num_mtp_modules 3)
    are not modelled, as in the minimax-m2.5 preset."""
    fields = _mixtral(cfg, family, seq_len)
    kinds = cfg.get_int_list("attn_type_list")
    if any(k != 1 for k in kinds):
        raise InputError(f"{cfg.where}.attn_type_list", "lightning (linear) attention layers (0) are not modelled",
                         "write a model YAML file with linear_attention")
    if cfg.get_int("shared_intermediate_size", default=0):
        raise InputError(f"{cfg.where}.shared_intermediate_size", "a MiniMax shared expert is not read",
                         "write a model YAML file with moe.num_shared_experts")
    score = cfg.data.get("scoring_func", "softmax")
    if score not in ("softmax", "sigmoid"):
        raise InputError(f"{cfg.where}.scoring_func", f"unknown router scoring {score!r}", "use softmax or sigmoid")
    fields["moe"] = MoESpec(num_experts=fields["moe"].num_experts, top_k=fields["moe"].top_k,
                            expert_ffn_hidden_size=fields["moe"].expert_ffn_hidden_size, router_score=score)
    head_dim = fields["head_dim"] or fields["hidden_size"] // fields["num_heads"]
    if cfg.has("rotary_dim") and not cfg.has("partial_rotary_factor"):
        rotary = cfg.get_int("rotary_dim")
        if not 0 < rotary <= head_dim:
            raise InputError(f"{cfg.where}.rotary_dim", f"must be 1 to head_dim {head_dim}, got {rotary}")
        fields["rotary_fraction"] = rotary / head_dim
    return fields


def _llama4(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    """Llama 4's language model (model_type llama4_text, the ``text_config`` of Llama-4-Scout /
    Maverick), as transformers' Llama4TextConfig lays it out: MoE layers at ``moe_layers``, else
    every ``interleave_moe_layer_step``-th layer from step - 1 (Maverick: 1, 3, ..., 47); each has
    ``num_local_experts`` routed experts and one always-on shared expert, all ``intermediate_size``
    wide, sigmoid-scored; the other layers a dense MLP of ``intermediate_size_mlp``. The RoPE layers
    (``no_rope_layers`` 1, by default all but every ``no_rope_layer_interval``-th = 4th) attend within
    ``attention_chunk_size`` chunks, modelled as a window of that size, as the llama4-* presets do."""
    fields = _llama_like(cfg, family, seq_len)
    num_layers = fields["num_layers"]
    dense = cfg.get_int("intermediate_size_mlp")
    expert = cfg.get_int("intermediate_size")
    fields["ffn_hidden_size"] = dense
    if cfg.has("moe_layers"):
        moe_layers = cfg.get_int_list("moe_layers")
    else:
        step = cfg.get_int("interleave_moe_layer_step", default=1)
        if step < 1:
            raise InputError(f"{cfg.where}.interleave_moe_layer_step", f"must be >= 1, got {step}")
        moe_layers = list(range(step - 1, num_layers, step))
    outside = sorted(i for i in moe_layers if not 0 <= i < num_layers)
    if outside:
        raise InputError(f"{cfg.where}.moe_layers", f"layer {outside[0]} is not one of the {num_layers} layers",
                         f"list layer indices 0 to {num_layers - 1}")
    first_dense, freq = _moe_layout(num_layers, moe_layers)
    fields["moe"] = MoESpec(num_experts=cfg.get_int("num_local_experts"), top_k=cfg.get_int("num_experts_per_tok"),
                            expert_ffn_hidden_size=expert, num_shared_experts=1, shared_expert_ffn_hidden_size=expert,
                            first_dense_layers=first_dense, dense_ffn_hidden_size=_dense_width(fields, first_dense, freq),
                            moe_layer_frequency=freq, router_score="sigmoid")
    chunk = cfg.get_int("attention_chunk_size", default=0)
    if chunk < 0:
        raise InputError(f"{cfg.where}.attention_chunk_size", f"must be a number of tokens >= 0, got {chunk}")
    layer_types = cfg.data.get("layer_types")
    if isinstance(layer_types, list) and layer_types:             # checked by _sliding_window
        chunked = sum(1 for t in layer_types if t == "chunked_attention")
    elif cfg.has("no_rope_layers"):
        flags = cfg.get_int_list("no_rope_layers")
        if len(flags) != num_layers or any(f not in (0, 1) for f in flags):
            raise InputError(f"{cfg.where}.no_rope_layers", f"expected {num_layers} flags of 0 or 1, got {str(flags)[:80]}",
                             "write the checkpoint's no_rope_layers")
        chunked = sum(flags)
    else:
        interval = cfg.get_int("no_rope_layer_interval", default=4)
        if interval < 1:
            raise InputError(f"{cfg.where}.no_rope_layer_interval", f"must be >= 1, got {interval}")
        chunked = sum(1 for i in range(num_layers) if (i + 1) % interval != 0)
    if chunk and chunked:
        fields["sliding_window"], fields["sliding_window_layer_fraction"] = chunk, chunked / num_layers
    return fields


def _qwen_moe(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    fields = _llama_like(cfg, family, seq_len)
    num_layers = fields["num_layers"]
    step = cfg.get_int("decoder_sparse_step", default=1)
    if step < 1:
        raise InputError(f"{cfg.where}.decoder_sparse_step", f"must be >= 1, got {step}")
    dense_only = set(cfg.get_int_list("mlp_only_layers"))
    outside = sorted(i for i in dense_only if not 0 <= i < num_layers)
    if outside:         # a layer index the model does not have was ignored without a word
        raise InputError(f"{cfg.where}.mlp_only_layers", f"layer {outside[0]} is not one of the {num_layers} layers",
                         f"list layer indices 0 to {num_layers - 1}")
    moe_layers = [i for i in range(num_layers) if (i + 1) % step == 0 and i not in dense_only]
    first_dense, freq = _moe_layout(num_layers, moe_layers)
    shared = cfg.get_int("shared_expert_intermediate_size", default=0)
    fields["moe"] = MoESpec(
        num_experts=cfg.get_int("num_experts"),
        top_k=cfg.get_int("num_experts_per_tok"),
        expert_ffn_hidden_size=cfg.get_int("moe_intermediate_size"),
        num_shared_experts=1 if shared > 0 else 0,
        shared_expert_ffn_hidden_size=shared,
        first_dense_layers=first_dense,
        dense_ffn_hidden_size=_dense_width(fields, first_dense, freq),
        moe_layer_frequency=freq,
    )
    return fields


def _deepseek(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    fields = _llama_like(cfg, family, seq_len)
    num_layers = fields["num_layers"]
    # Multi-latent attention: every query head has its own (decompressed) key and value.
    fields["num_kv_heads"] = fields["num_heads"]
    nope = cfg.get_int("qk_nope_head_dim")
    rope = cfg.get_int("qk_rope_head_dim")
    fields["mla"] = MLASpec(q_lora_rank=cfg.get_int("q_lora_rank", default=0),
                            kv_lora_rank=cfg.get_int("kv_lora_rank"),
                            qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                            v_head_dim=cfg.get_int("v_head_dim"))
    fields["head_dim"] = nope + rope
    # multi-token-prediction modules shipped with the weights (DeepSeek-V3: 1)
    fields["mtp_layers"] = cfg.get_int("num_nextn_predict_layers", default=0)
    if cfg.has("n_routed_experts"):
        score = cfg.data.get("scoring_func", "softmax")
        if score not in ("softmax", "sigmoid"):
            raise InputError(f"{cfg.where}.scoring_func", f"unknown router scoring {score!r}",
                             "use softmax or sigmoid")
        first_k = cfg.get_int("first_k_dense_replace", default=0)
        if not 0 <= first_k <= num_layers:
            raise InputError(f"{cfg.where}.first_k_dense_replace", f"must be 0 to the {num_layers} layers, got {first_k}")
        freq = cfg.get_int("moe_layer_freq", default=1)
        if freq < 1:
            raise InputError(f"{cfg.where}.moe_layer_freq", f"must be >= 1, got {freq}")
        moe_layers = [i for i in range(num_layers) if i >= first_k and i % freq == 0]
        first_dense, layout_freq = _moe_layout(num_layers, moe_layers)
        expert = cfg.get_int("moe_intermediate_size")
        fields["moe"] = MoESpec(
            num_experts=cfg.get_int("n_routed_experts"),
            top_k=cfg.get_int("num_experts_per_tok"),
            expert_ffn_hidden_size=expert,
            num_shared_experts=cfg.get_int("n_shared_experts", default=0),
            shared_expert_ffn_hidden_size=expert,
            first_dense_layers=first_dense,
            dense_ffn_hidden_size=_dense_width(fields, first_dense, layout_freq),
            moe_layer_frequency=layout_freq,
            router_score=score,
        )
    return fields


def _gpt_oss(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    fields = _llama_like(cfg, family, seq_len)
    fields["moe"] = MoESpec(num_experts=cfg.get_int("num_local_experts", "num_experts"),
                            top_k=cfg.get_int("experts_per_token", "num_experts_per_tok"),
                            expert_ffn_hidden_size=fields["ffn_hidden_size"])
    fields["linear_bias"] = True     # biased attention and expert projections (model card, section 2)
    fields["glu_clamp_limit"] = cfg.get_float("swiglu_limit", default=0.0)
    return fields


#: GPT-2-era layout: learned absolute positions, LayerNorm, biased linear layers.
_GPT_STYLE = dict(position_embedding="learned", normalization="layernorm", linear_bias=True)


def _gpt2(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    hidden = cfg.get_int("n_embd")
    return dict(num_layers=cfg.get_int("n_layer"), hidden_size=hidden, **_attention(cfg, "n_head"),
                ffn_hidden_size=cfg.get_int("n_inner", default=4 * hidden), vocab_size=cfg.get_int("vocab_size"),
                seq_len=_seq_len(cfg, seq_len), tied_embeddings=cfg.get_bool("tie_word_embeddings", True),
                **_GPT_STYLE)


def _opt(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    return dict(num_layers=cfg.get_int("num_hidden_layers"), hidden_size=cfg.get_int("hidden_size"),
                **_attention(cfg), ffn_hidden_size=cfg.get_int("ffn_dim"), vocab_size=cfg.get_int("vocab_size"),
                seq_len=_seq_len(cfg, seq_len), tied_embeddings=cfg.get_bool("tie_word_embeddings", True),
                **{**_GPT_STYLE, "linear_bias": cfg.get_bool("enable_bias", True)},
                activation="relu" if cfg.data.get("activation_function", "relu") == "relu" else "gelu")


def _bloom(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    hidden = cfg.get_int("hidden_size", "n_embed")
    return dict(num_layers=cfg.get_int("n_layer", "num_hidden_layers"), hidden_size=hidden,
                **_attention(cfg, "n_head"), ffn_hidden_size=4 * hidden, vocab_size=cfg.get_int("vocab_size"),
                seq_len=_seq_len(cfg, seq_len), tied_embeddings=cfg.get_bool("tie_word_embeddings", True),
                **{**_GPT_STYLE, "position_embedding": "alibi"})


def _gpt_neox(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    return dict(num_layers=cfg.get_int("num_hidden_layers"), hidden_size=cfg.get_int("hidden_size"),
                **_attention(cfg), ffn_hidden_size=cfg.get_int("intermediate_size"),
                vocab_size=cfg.get_int("vocab_size"), seq_len=_seq_len(cfg, seq_len),
                tied_embeddings=cfg.get_bool("tie_word_embeddings", False),
                **{**_GPT_STYLE, "position_embedding": "rope"}, rotary_fraction=_fraction(cfg, "rotary_pct"))


def _mpt(cfg: _Config, family: str, seq_len: int | None) -> dict[str, Any]:
    hidden = cfg.get_int("d_model")
    ratio = cfg.get_int("expansion_ratio", default=4)
    return dict(num_layers=cfg.get_int("n_layers"), hidden_size=hidden, **_attention(cfg, "n_heads"),
                ffn_hidden_size=ratio * hidden, vocab_size=cfg.get_int("vocab_size"),
                seq_len=_seq_len(cfg, seq_len), tied_embeddings=cfg.get_bool("tie_word_embeddings", True),
                position_embedding=_mpt_positions(cfg), normalization="layernorm",
                linear_bias=not cfg.get_bool("no_bias", False))


def _mpt_positions(cfg: _Config) -> str:
    attn = cfg.data.get("attn_config") or {}
    if isinstance(attn, dict) and attn.get("alibi"):
        return "alibi"
    if isinstance(attn, dict) and attn.get("rope"):
        return "rope"
    return "learned" if cfg.get_bool("learned_pos_emb", True) else "none"


def _rotary_fraction(cfg: _Config) -> float:
    """``partial_rotary_factor`` at the top level, else inside ``rope_parameters`` (transformers
    v5); 1.0 when neither states it."""
    rope = _rope_scaling(cfg)
    if not cfg.has("partial_rotary_factor") and rope is not None and rope.has("partial_rotary_factor"):
        return _fraction(rope, "partial_rotary_factor")
    return _fraction(cfg, "partial_rotary_factor")


def _fraction(cfg: _Config, key: str) -> float:
    """``key`` as a fraction in (0, 1]; 1.0 when the config does not set it (or sets null)."""
    value = cfg.data.get(key)
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise InputError(f"{cfg.where}.{key}", f"expected a fraction in (0, 1], got {value!r}")
    return float(value)


_FAMILIES: dict[str, Callable[[_Config, str, int | None], dict[str, Any]]] = {
    "llama": _llama_like, "mistral": _llama_like, "qwen2": _llama_like, "qwen3": _llama_like,
    # Llama's parameter tensors under other names: Phi-3 / Phi-4 fuse qkv and gate/up (transformers
    # Phi3Attention qkv_proj, Phi3MLP gate_up_proj); OLMo 2 moves the norms after each block and
    # adds q/k RMSNorms (Olmo2Attention q_norm, k_norm: 2 x h weights a layer, not counted)
    "phi3": _llama_like, "olmo2": _llama_like,
    "nemotron": _nemotron, "nemotron_h": _nemotron_h,
    "mixtral": _mixtral, "minimax_m2": _minimax_m2, "llama4_text": _llama4,
    "qwen2_moe": _qwen_moe, "qwen3_moe": _qwen_moe,
    # Kimi K2 (model_type kimi_k2) is DeepSeek-V3's architecture (config.json architectures
    # DeepseekV3ForCausalLM) with other sizes (Kimi Team 2025, arXiv 2507.20534, section 2.3)
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek, "kimi_k2": _deepseek,
    "gpt_oss": _gpt_oss,
    "gpt2": _gpt2, "opt": _opt, "bloom": _bloom, "gpt_neox": _gpt_neox, "mpt": _mpt,
}


def supported_model_types() -> list[str]:
    return sorted(_FAMILIES)


def is_hf_config(data: dict[str, Any]) -> bool:
    """Whether a JSON mapping looks like a Hugging Face config rather than a paraplan preset."""
    return "model_type" in data or "architectures" in data


def _default_name(path: Path | None, data: dict[str, Any], family: str) -> str:
    """The checkpoint's folder (or file) name, or its ``_name_or_path``, as a safe name
    (``hardware_specs.errors.safe_name``: it is written into launch scripts)."""
    if path is not None:
        return safe_name(path.parent.name if path.name == "config.json" and path.parent.name else path.stem)
    name_or_path = data.get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path:
        return safe_name(name_or_path.rstrip("/").split("/")[-1])
    return safe_name(family)


#: ModelOpt's quant_algo (hf_quant_config.json / config.json ``quantization_config``, quant_method
#: "modelopt", the algorithm at the top level or under ``quantization``) -> weight format:
#: NVIDIA/TensorRT-Model-Optimizer modelopt/torch/export (QUANTIZATION_FP8, QUANTIZATION_NVFP4,
#: QUANTIZATION_FP8_PB_WO: 128 x 128-block FP8, QUANTIZATION_FP8_PC_PT: per-channel FP8,
#: QUANTIZATION_W4A16_AWQ); others are not read
MODELOPT_ALGOS = {"FP8": "fp8", "NVFP4": "nvfp4", "FP8_PB_WO": "fp8_block", "FP8_PER_CHANNEL_PER_TOKEN": "fp8",
                  "W4A16_AWQ": "int4_wo"}
#: module-name fragments that mark the attention projections as left unquantised in an
#: ``ignore`` / ``modules_to_not_convert`` / ``exclude_modules`` list
_ATTENTION_NAMES = ("self_attn", "attn", "attention", "q_proj", "qkv_proj", "o_proj")


def _compressed_tensors_format(quant: dict, where: str = "quantization_config") -> str:
    """The weight format of an llm-compressor (compressed-tensors) config: its ``format`` (per
    config group where the top level says mixed-precision or nothing, all groups alike), float
    8-bit weights -> fp8 (fp8_block with the block strategy), nvfp4-pack-quantized -> nvfp4,
    pack-quantized 4-bit integer weights -> int4_wo; anything else (8-bit integer weights, groups
    that differ) is not read."""
    groups = [g for g in (quant.get("config_groups") or {}).values() if isinstance(g, dict)] \
        if isinstance(quant.get("config_groups"), dict) else []
    fmt = str(quant.get("format") or "").strip().lower()
    if fmt in ("", "mixed-precision"):
        found = {str(g.get("format") or "").strip().lower() for g in groups}
        fmt = found.pop() if len(found) == 1 else ""
    weights = [g.get("weights") for g in groups if isinstance(g.get("weights"), dict)]
    bits = set()
    for w in weights:
        b = w.get("num_bits")
        if b is not None and (isinstance(b, bool) or not isinstance(b, int)):
            raise InputError(f"{where}.config_groups.weights.num_bits", f"expected a whole number, got {b!r}",
                             "write num_bits as the checkpoint's config.json has it (e.g. 8)")
        bits.add(b)
    strategy = {str(w.get("strategy") or "").lower() for w in weights}
    if fmt == "float-quantized" and bits <= {8}:
        return "fp8_block" if strategy == {"block"} else "fp8"
    if fmt == "nvfp4-pack-quantized":
        return "nvfp4"
    if fmt == "pack-quantized" and bits == {4}:
        return "int4_wo"
    return ""


def checkpoint_formats(quant, moe: bool, where: str) -> dict[str, str]:
    """The ``checkpoint_format`` / ``expert_checkpoint_format`` a config.json's
    ``quantization_config`` states (empty when it states none this reader knows):

    * ``fp8`` with ``weight_block_size`` (DeepSeek-V3 / R1, Qwen3-FP8): 128 x 128-block FP8 in every
      linear layer -> fp8_block; without it, per-tensor FP8 -> fp8;
    * ``mxfp4`` on a MoE model (gpt-oss): the routed experts only (modules_to_not_convert keeps
      attention, router and embeddings 16-bit);
    * ``modelopt`` (NVIDIA ModelOpt exports, e.g. nvidia/*-FP8, *-NVFP4): ``quant_algo``
      (``MODELOPT_ALGOS``);
    * ``compressed-tensors`` (llm-compressor): ``_compressed_tensors_format``;
    * ``awq`` / ``gptq`` at 4 bits -> int4_wo.

    Where the ignore list (``ignore``, ``modules_to_not_convert``, ``exclude_modules``) names the
    attention projections, only a MoE model's experts take the format (its attention stays 16-bit,
    as NVIDIA's NVFP4 DeepSeek exports keep it); a dense model's format is then not read.
    Meta's ``fbgemm_fp8`` leaves attention and its first and last layers in BF16 and is not read.
    A ``quantization_config`` that is not a mapping, or a ``quant_method`` that is not text, is an
    ``InputError``; one without ``quant_method`` (mlx, older bitsandbytes) states nothing read here."""
    if quant is None:
        return {}
    if not isinstance(quant, dict):
        raise InputError(where, f"expected a mapping, got {type(quant).__name__} {str(quant)[:40]!r}",
                         "write it as the checkpoint's config.json has it, or remove it")
    method = quant.get("quant_method")
    if method is None:
        return {}
    if not isinstance(method, str) or not method.strip():
        raise InputError(f"{where}.quant_method", f"expected text, got {method!r}",
                         "name the method (e.g. fp8, modelopt, compressed-tensors), or remove quantization_config")
    method = method.strip().lower()
    fmt = ""
    if method == "fp8":
        fmt = "fp8_block" if quant.get("weight_block_size") else "fp8"
    elif method == "mxfp4":
        return {"expert_checkpoint_format": "mxfp4"} if moe else {}
    elif method == "modelopt":
        algo = quant.get("quant_algo")
        if algo is None and isinstance(quant.get("quantization"), dict):
            algo = quant["quantization"].get("quant_algo")
        fmt = MODELOPT_ALGOS.get(str(algo or "").strip().upper(), "")
    elif method == "compressed-tensors":
        fmt = _compressed_tensors_format(quant, where)
    elif method in ("awq", "gptq") and quant.get("bits") in (4, "4"):
        fmt = "int4_wo"
    if not fmt:
        return {}
    nested = quant.get("quantization") if isinstance(quant.get("quantization"), dict) else {}
    ignored = []
    for key in ("ignore", "modules_to_not_convert", "exclude_modules"):
        for value in (quant.get(key), nested.get(key)):
            if isinstance(value, list):
                ignored += [str(v).lower() for v in value]
    attention_kept = any(name in item for item in ignored for name in _ATTENTION_NAMES)
    if attention_kept:
        return {"expert_checkpoint_format": fmt} if moe else {}
    return {"checkpoint_format": fmt, **({"expert_checkpoint_format": fmt} if moe else {})}


def _language_model_config(data: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config: multimodal checkpoints nest it under
    ``text_config`` and name the wrapper in the top-level ``model_type`` (Kimi-K2.5:
    ``kimi_k25`` around a ``kimi_k2`` text model; Mistral-Small-3.1: ``mistral3`` around
    ``mistral``). The nested one is read when the top level names no model_type or one this
    reader does not know; the vision encoder is not modelled. A ``quantization_config`` the
    wrapper states (and the text model does not) still applies to the text model's weights."""
    text = data.get("text_config")
    if not isinstance(text, dict):
        return data
    outer = data.get("model_type")
    if isinstance(outer, str) and outer.lower() in _FAMILIES:
        return data
    if outer is not None and "model_type" not in text:     # refused by the wrapper's own type
        return data
    if "quantization_config" in data and "quantization_config" not in text:
        text = {**text, "quantization_config": data["quantization_config"]}
    return text


def model_from_hf_config(path_or_dict: str | Path | dict[str, Any], name: str | None = None,
                         seq_len: int | None = None) -> ModelSpec:
    """The ``ModelSpec`` described by a Hugging Face ``config.json`` (a path, its folder, or the dict).

    ``name`` defaults to the config's folder name; ``seq_len`` overrides the default training
    sequence length (see the module docstring).
    """
    path: Path | None = None
    if isinstance(path_or_dict, dict):
        data = path_or_dict
        where = "hf_config"
    else:
        path = Path(path_or_dict)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise InputError("model", not_a_file(path))
        data = read_json(path, non_finite=True)
        where = f"hf_config {path}"
    data = _language_model_config(data)
    family = data.get("model_type")
    if not isinstance(family, str) or not family:
        raise InputError(f"{where}.model_type", "missing",
                         "a Hugging Face config.json names its model_type")
    family = family.lower()
    build = _FAMILIES.get(family)
    if build is None:
        raise InputError(f"{where}.model_type", f"unsupported model_type '{family}'",
                         "supported: " + ", ".join(supported_model_types())
                         + "; or write a model YAML file with the ModelSpec fields")
    cfg = _Config(data, where)
    fields = build(cfg, family, seq_len)
    if cfg.has("max_position_embeddings"):
        # the longest context the model serves (engines default their maximum model length to it)
        fields.setdefault("max_context_tokens", cfg.get_int("max_position_embeddings"))
    if fields.get("position_embedding") == "rope":
        fields.update(_rope_fields(cfg))
    for key, value in checkpoint_formats(data.get("quantization_config"), fields.get("moe") is not None,
                                         f"{where}.quantization_config").items():
        fields.setdefault(key, value)
    for key, value in _dropout_fields(data, family).items():
        fields.setdefault(key, value)
    source = f"Hugging Face config {path}" if path is not None else "Hugging Face config (dict)"
    return ModelSpec(name=name or _default_name(path, data, family), source=source, **fields)
