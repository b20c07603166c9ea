"""Typed reading of a Hugging Face ``config.json``: the file itself (``read_json``), one key at a
time with the config's path in every error (``ConfigReader``), and the fields several model families
share (dropout, RoPE and its scaling, the training sequence, sliding windows, MoE layer layouts,
attention heads). The families that use them are in ``model_specs/hf_families.py``; the entry
point is ``model_specs/hf_config.model_from_hf_config``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hardware_specs.errors import InputError, check_spec_size, json_int, shown, unique_keys

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


class ConfigReader:
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
                raise InputError(f"{self.where}.{key}", f"expected an integer, got {shown(value)}")
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, int):
                if abs(value) > MAX_INT:
                    raise InputError(f"{self.where}.{key}", f"{value:,} is above the largest supported value "
                                     f"{MAX_INT:,}", "check the number")
                return value
            raise InputError(f"{self.where}.{key}", f"expected an integer, got {shown(value)}")
        if default is _MISSING:
            raise InputError(f"{self.where}.{keys[0]}", "missing", f"add '{keys[0]}' to the config")
        return default

    def get_float(self, key: str, default: float) -> float:
        """``key`` as a finite number, or ``default`` when the config does not set it."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"{self.where}.{key}", f"expected a finite number, got {shown(value)}")
        return float(value)

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InputError(f"{self.where}.{key}", f"expected true or false, got {shown(value)}")
        return value

    def get_int_list(self, key: str) -> list[int]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                   for v in value):
            raise InputError(f"{self.where}.{key}", f"expected a list of layer indices, got {shown(value)}")
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


def dropout_fields(data: dict, family: str, where: str = "model") -> dict:
    """``hidden_dropout`` / ``attention_dropout`` as the config states them (a probability > 0
    is on), each absent one at its transformers config-class default for ``family``
    (``_ABSENT_DROPOUT_DEFAULTS``: off except GPT-2 and OPT)."""
    def stated(source, keys, at=where):
        for k in keys:      # a probability written as text ("0.1") was dropped, leaving dropout off
            v = source.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0):
                raise InputError(f"{at}.{k}", f"expected a probability from 0 to 1, got {shown(v)}",
                                 "write the checkpoint's number")
        values = [source[k] for k in keys if source.get(k) is not None]
        return None if not values else any(v > 0 for v in values)

    hidden_default, attention_default = _ABSENT_DROPOUT_DEFAULTS.get(family, (0.0, 0.0))
    hidden = stated(data, _HIDDEN_DROPOUT_KEYS + _FAMILY_HIDDEN_DROPOUT_KEYS.get(family, ()))
    attention = stated(data, _ATTENTION_DROPOUT_KEYS)
    if attention is None and isinstance(data.get("attn_config"), dict):
        attention = stated(data["attn_config"], ("attn_pdrop",), f"{where}.attn_config")      # MPT nests it
    return {"hidden_dropout": hidden_default > 0 if hidden is None else hidden,
            "attention_dropout": attention_default > 0 if attention is None else attention}


def rope_fields(cfg: ConfigReader) -> dict[str, Any]:
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
            raise InputError(f"{rope.where}.{key}", f"expected text (linear, dynamic, yarn, llama3, ...), got {shown(kind)}",
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


def _rope_scaling(cfg: ConfigReader) -> ConfigReader | None:
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
        raise InputError(f"{cfg.where}.{key}", f"expected a mapping (rope_type, factor, ...) or null, got {shown(rope)}",
                         f"write the checkpoint's {key}")
    nested = sorted(k for k, v in rope.items() if isinstance(v, dict))
    if nested:
        raise InputError(f"{cfg.where}.{key}.{nested[0]}", "RoPE parameters given per attention kind are not read",
                         f"give one {key} mapping (rope_type, rope_theta, factor, ...)")
    return ConfigReader(rope, f"{cfg.where}.{key}")


def _rope_number(rope: ConfigReader, key: str) -> float | None:
    """A ``rope_scaling`` number (factor, beta_*, mscale*) as a float >= 0; None when unstated."""
    if not rope.has(key):
        return None
    value = rope.get_float(key, 0.0)
    if value < 0:
        raise InputError(f"{rope.where}.{key}", f"must be >= 0, got {value:g}",
                         "write the checkpoint's value, or drop the key")
    return value


def _original_context(rope: ConfigReader | None) -> int | None:
    """``original_max_position_embeddings`` of ``rope`` (the pre-training context) as a positive
    integer; None when unstated."""
    if rope is None or not rope.has("original_max_position_embeddings"):
        return None
    value = rope.get_int("original_max_position_embeddings")
    if value < 1:
        raise InputError(f"{rope.where}.original_max_position_embeddings", f"must be >= 1 token, got {value}",
                         "write the checkpoint's pre-training context, or drop the key")
    return value


def training_seq_len(cfg: ConfigReader, seq_len: int | None) -> int:
    if seq_len is not None:
        return int(seq_len)
    original = _original_context(_rope_scaling(cfg))
    if original is None:
        # Phi-3's long-context configs state it beside max_position_embeddings, not inside rope_scaling
        # (microsoft/Phi-3-mini-128k-instruct config.json: original_max_position_embeddings 4096)
        original = _original_context(cfg if cfg.has("original_max_position_embeddings") else None)
    if original is not None:
        # no longer than the longest context the config states (a config whose pre-training context
        # exceeds it trained 1,000,000-token sequences on a model of a 131,072-token context)
        context = cfg.get_int("max_position_embeddings", default=0)
        return min(original, context) if context > 0 else original
    if cfg.has("initial_context_length"):
        return cfg.get_int("initial_context_length")
    max_pos = cfg.get_int("max_position_embeddings", "n_positions", "max_seq_len", default=FALLBACK_SEQ_LEN)
    return min(max_pos, MAX_DEFAULT_SEQ_LEN)


#: the attention kinds transformers' configs name in ``layer_types`` (Gemma 2/3, gpt-oss: full /
#: sliding; Qwen3-Next / Qwen3.5: linear; Llama 4: chunked)
LAYER_KINDS = ("full_attention", "sliding_attention", "linear_attention", "chunked_attention")


def sliding_window_fields(cfg: ConfigReader, num_layers: int, family: str) -> tuple[int, float]:
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
    if family in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text", "qwen3_5_text"):
        # Qwen configs carry a window that is off unless use_sliding_window is set; then
        # layers from max_window_layers on use it.
        if not cfg.get_bool("use_sliding_window", False):
            return 0, 0.0
        full = min(num_layers, cfg.get_int("max_window_layers", default=num_layers))
        fraction = (num_layers - full) / num_layers
        return (window, fraction) if fraction > 0 else (0, 0.0)
    return window, 1.0


def moe_layer_layout(num_layers: int, moe_layers: list[int]) -> tuple[int, int]:
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


def dense_ffn_width(fields: dict[str, Any], first_dense: int, freq: int) -> int:
    """Width of the dense-MLP layers of an MoE model, stated only when there are such layers."""
    return fields["ffn_hidden_size"] if first_dense > 0 or freq > 1 else 0


def attention_head_fields(cfg: ConfigReader, *heads_keys: str) -> dict[str, int]:
    num_heads = cfg.get_int(*heads_keys, "num_attention_heads")
    return {
        "num_heads": num_heads,
        "num_kv_heads": cfg.get_int("num_key_value_heads", default=num_heads),
        "head_dim": stated_head_dim(cfg, "head_dim"),
    }


def stated_head_dim(cfg: ConfigReader, *keys: str) -> int:
    """The first of ``keys`` the config sets, as a per-head width of at least 1, or 0 where none
    is set (the model then derives hidden_size / num_heads). A stated ``head_dim: 0`` had read as
    unstated and silently become hidden_size / num_heads."""
    value = cfg.get_int(*keys, default=0)
    if value < 1 and any(cfg.data.get(key) is not None for key in keys):
        key = next(key for key in keys if cfg.data.get(key) is not None)
        raise InputError(f"{cfg.where}.{key}", f"must be >= 1, got {value}",
                         "write the checkpoint's value, or leave it out to use hidden_size / num_attention_heads")
    return value



def rotary_fraction_field(cfg: ConfigReader, default: float = 1.0) -> float:
    """``partial_rotary_factor`` at the top level, else inside ``rope_parameters`` (transformers
    v5); ``default`` (the family's config-class default) when neither states it."""
    rope = _rope_scaling(cfg)
    if not cfg.has("partial_rotary_factor") and rope is not None and rope.has("partial_rotary_factor"):
        return fraction_field(rope, "partial_rotary_factor", default)
    return fraction_field(cfg, "partial_rotary_factor", default)


def fraction_field(cfg: ConfigReader, key: str, default: float = 1.0) -> float:
    """``key`` as a fraction in (0, 1]; ``default`` when the config does not set it (or sets null)."""
    value = cfg.data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise InputError(f"{cfg.where}.{key}", f"expected a fraction in (0, 1], got {shown(value)}")
    return float(value)

