"""Hugging Face builders for Qwen's hybrid linear-attention models: Qwen3-Next (model_type
``qwen3_next``, flat config) and Qwen3.5 (``qwen3_5_moe_text`` / ``qwen3_5_text``, the
``text_config`` of a ``qwen3_5_moe`` / ``qwen3_5`` checkpoint, which ``hf_config`` unwraps as it
does Llama 4's). Three of every four layers are Gated DeltaNet linear attention, the fourth gated
softmax attention (``ModelSpec.linear_attention``); the MLPs are Qwen3-MoE's. ``FAMILIES`` here is
merged into the dispatch table by ``model_specs/hf_config.py``.

Keys read beyond Qwen3-MoE's (``hf_families._qwen_moe``): layer_types / full_attention_interval,
linear_num_key_heads, linear_key_head_dim, linear_num_value_heads, linear_value_head_dim,
linear_conv_kernel_dim, mamba_ssm_dtype, mtp_num_hidden_layers / num_nextn_predict_layers.

Not modelled, as in the qwen3.5-397b-a17b preset: the softmax layers' output gate
(``attn_output_gate``, an extra h x heads*head_dim projection: 0.5B of Qwen3.5-397B, 0.10B of
Qwen3-Next-80B), the q/k norms, the multimodal RoPE sections and the vision encoder.
"""
from __future__ import annotations

from typing import Any, Callable

from hardware_specs.errors import InputError
from model_specs.hf_config_fields import ConfigReader
from model_specs.hf_families import _llama_like, _qwen_moe
from model_specs.model_spec import LinearAttentionSpec

#: transformers Qwen3NextConfig / Qwen3_5TextConfig ``full_attention_interval`` default: layer i is
#: softmax attention when (i + 1) % interval == 0, linear attention otherwise
DEFAULT_FULL_ATTENTION_INTERVAL = 4
#: ``mamba_ssm_dtype`` (the recurrent state's dtype, Qwen3.5 configs: float32) -> bytes per element
_STATE_DTYPES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
_KINDS = ("linear_attention", "full_attention")


def _linear_layers(cfg: ConfigReader, num_layers: int) -> int:
    """How many of the layers are linear attention: counted from ``layer_types`` (Qwen3.5 lists
    them), else laid out by ``full_attention_interval`` (Qwen3-Next states only that); both
    stated must agree."""
    interval = cfg.get_int("full_attention_interval", default=DEFAULT_FULL_ATTENTION_INTERVAL)
    if interval < 1:
        raise InputError(f"{cfg.where}.full_attention_interval", f"must be >= 1, got {interval}",
                         "write the checkpoint's value (Qwen3-Next / Qwen3.5: 4)")
    by_interval = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(num_layers)]
    layer_types = cfg.data.get("layer_types")       # its shape was checked by sliding_window_fields
    if layer_types is None:
        return by_interval.count("linear_attention")
    other = sorted({t for t in layer_types if t not in _KINDS})
    if other:
        raise InputError(f"{cfg.where}.layer_types", f"{other[0]!r} is not a Qwen3-Next / Qwen3.5 layer kind",
                         "use " + " or ".join(_KINDS))
    if cfg.has("full_attention_interval") and layer_types != by_interval:
        first = next(i for i, (a, b) in enumerate(zip(layer_types, by_interval)) if a != b)
        raise InputError(f"{cfg.where}.layer_types", f"layer {first} is {layer_types[first]} but full_attention_interval "
                         f"{interval} makes it {by_interval[first]}", "write the checkpoint's layer_types and interval")
    return layer_types.count("linear_attention")


def _state_bytes(cfg: ConfigReader) -> float:
    """Bytes per recurrent-state element: ``mamba_ssm_dtype`` (Qwen3.5: float32). Absent (the
    Qwen3-Next configs) it stays LinearAttentionSpec's fp32 default; vLLM's ``auto`` cache dtype
    would hold that state in the model dtype (2 bytes), which a model YAML can state."""
    dtype = cfg.data.get("mamba_ssm_dtype")
    if dtype is None:
        return 4.0
    if dtype not in _STATE_DTYPES:
        raise InputError(f"{cfg.where}.mamba_ssm_dtype", f"unknown state dtype {str(dtype)[:40]!r}",
                         "use " + ", ".join(_STATE_DTYPES))
    return _STATE_DTYPES[dtype]


def _mtp_layers(cfg: ConfigReader) -> int:
    """Multi-token-prediction modules: Qwen3.5's ``mtp_num_hidden_layers``, else
    ``num_nextn_predict_layers``, else 1. The Qwen3-Next configs state neither although the
    checkpoints ship one MTP module (``mtp.*`` weights), which vLLM builds by the same default
    (vllm/model_executor/models/qwen3_next_mtp.py: getattr(config, "num_nextn_predict_layers", 1))."""
    key = "mtp_num_hidden_layers" if cfg.has("mtp_num_hidden_layers") else "num_nextn_predict_layers"
    mtp = cfg.get_int(key, default=1)
    if mtp < 0:
        raise InputError(f"{cfg.where}.{key}", f"must be a number of layers >= 0, got {mtp}",
                         "write the checkpoint's value, or drop the key")
    return mtp


def _with_linear_attention(cfg: ConfigReader, fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` (a Qwen3 / Qwen3-MoE layout) with the Gated DeltaNet layers and MTP modules."""
    if fields["sliding_window"]:        # Qwen's use_sliding_window: windowed softmax beside linear layers
        raise InputError(f"{cfg.where}.use_sliding_window", "a sliding window beside linear attention is not modelled",
                         "set use_sliding_window false")
    num_layers = fields["num_layers"]
    linear = _linear_layers(cfg, num_layers)
    if linear == num_layers:
        raise InputError(f"{cfg.where}.layer_types", "every layer is linear attention; the model needs softmax layers",
                         "write the checkpoint's layer_types / full_attention_interval")
    if linear:
        keys, values = cfg.get_int("linear_num_key_heads"), cfg.get_int("linear_num_value_heads")
        if keys > 0 and values % keys:      # each key head serves a whole group of value heads
            raise InputError(f"{cfg.where}.linear_num_value_heads", f"{values} value heads do not split over {keys} key "
                             "heads", "write the checkpoint's linear_num_key_heads / linear_num_value_heads")
        fields["linear_attention"] = LinearAttentionSpec(
            layer_fraction=linear / num_layers, num_key_heads=keys, key_head_dim=cfg.get_int("linear_key_head_dim"),
            num_value_heads=values, value_head_dim=cfg.get_int("linear_value_head_dim"),
            conv_kernel=cfg.get_int("linear_conv_kernel_dim", default=4), state_bytes=_state_bytes(cfg))
    fields["mtp_layers"] = _mtp_layers(cfg)
    return fields


def _qwen3_next(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    """Qwen3-Next (e.g. Qwen3-Next-80B-A3B) and Qwen3.5's MoE text model: Qwen3-MoE's experts
    (num_experts, num_experts_per_tok, moe_intermediate_size, one shared expert of
    shared_expert_intermediate_size, decoder_sparse_step, mlp_only_layers) under the hybrid
    attention. Qwen3.5's MoE configs state no intermediate_size (no layer is dense); the dense
    width is then the experts' (the qwen3.5-397b-a17b preset's ffn_hidden_size 1024).
    ``norm_topk_prob`` absent: true, transformers' Qwen3NextConfig default (Qwen3-MoE's is false),
    as the released Qwen3-Next and Qwen3.5 routers renormalise."""
    if not cfg.has("intermediate_size") and cfg.has("moe_intermediate_size"):
        cfg = ConfigReader({**cfg.data, "intermediate_size": cfg.data["moe_intermediate_size"]}, cfg.where)
    if not cfg.has("norm_topk_prob"):
        cfg = ConfigReader({**cfg.data, "norm_topk_prob": True}, cfg.where)
    return _with_linear_attention(cfg, _qwen_moe(cfg, family, seq_len))


def _qwen3_5_dense(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    """Qwen3.5's dense text model (model_type qwen3_5_text): Qwen3's SwiGLU MLP of
    intermediate_size under the hybrid attention."""
    return _with_linear_attention(cfg, _llama_like(cfg, family, seq_len))


FAMILIES: dict[str, Callable[[ConfigReader, str, int | None], dict[str, Any]]] = {
    "qwen3_next": _qwen3_next, "qwen3_5_moe_text": _qwen3_next, "qwen3_5_text": _qwen3_5_dense,
}
