"""Build a ``ModelSpec`` from a local Hugging Face ``config.json``.

Supported ``model_type`` families and the keys read (names as in ``transformers``):

- llama, mistral, qwen2, qwen3, phi3, olmo2 (gated SwiGLU MLP): num_hidden_layers, hidden_size,
  num_attention_heads, num_key_value_heads, intermediate_size, vocab_size, head_dim,
  tie_word_embeddings, max_position_embeddings, sliding_window (+ use_sliding_window /
  max_window_layers for Qwen, layer_types where given).
- nemotron (squared-ReLU plain MLP): as llama, plus kv_channels for the head width.
- every RoPE family above: partial_rotary_factor (the share of each head RoPE rotates), rope_theta,
  rope_scaling, or transformers v5's rope_parameters (which holds all three) in its place.
- gpt2, opt, bloom, gpt_neox (plain two-matrix MLP): each family's own key names.
- gptj, falcon (and its first names RefinedWeb / RefinedWebModel), phi, cohere: the parallel
  attention + MLP block, each family's keys (``hf_parallel_families``).
- mpt: llm-foundry's keys, attn_config (attn_type, kv_n_heads, alibi, rope, rope_theta, sliding_window_size) and
  ffn_config (ffn_type mptmlp / mptglu / te_ln_mlp, ffn_hidden_size, ffn_act_fn) included (``hf_families._mpt``).
- mixtral: + num_local_experts, num_experts_per_tok.
- minimax_m2: as mixtral, + head_dim, scoring_func, use_routing_bias, rotary_dim (``hf_families._minimax_m2``).
- nemotron_h (hybrid Mamba-Transformer): hybrid_override_pattern / layers_block_type, the
  mamba_* / ssm_state_size / n_groups sizes, n_routed_experts, moe_latent_size (``hf_families._nemotron_h``).
- llama4_text (Llama 4's text_config): + intermediate_size_mlp, num_local_experts, interleave_moe_layer_step,
  moe_layers, attention_chunk_size, no_rope_layers (``hf_families._llama4``).
- qwen2_moe, qwen3_moe: + num_experts, num_experts_per_tok, moe_intermediate_size,
  shared_expert_intermediate_size, decoder_sparse_step, mlp_only_layers.
- deepseek_v2, deepseek_v3, kimi_k2: + n_routed_experts, num_experts_per_tok, moe_intermediate_size,
  n_shared_experts, first_k_dense_replace, moe_layer_freq, and the multi-latent attention sizes
  q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim; num_nextn_predict_layers
  (multi-token-prediction modules); the router's scoring_func, topk_method, n_group, topk_group,
  routed_scaling_factor (``hf_families._deepseek_router``).
- gpt_oss: + num_local_experts, experts_per_token, sliding_window, layer_types, swiglu_limit.
- qwen3_next, qwen3_5_moe_text, qwen3_5_text (Qwen3-Next; Qwen3.5's text_config): Qwen3-MoE's keys (or
  Qwen3's, dense) + layer_types / full_attention_interval, linear_num_key_heads, linear_key_head_dim,
  linear_num_value_heads, linear_value_head_dim, linear_conv_kernel_dim, mamba_ssm_dtype,
  mtp_num_hidden_layers / num_nextn_predict_layers (``hf_qwen_next``).

Sequence length: a config states the longest context the model supports (kept as
``max_context_tokens``, which ``serve`` checks prompt + output against: the smallest of the
``CONTEXT_KEYS`` it states, max_position_embeddings, GPT-2's n_positions, MPT's max_seq_len, ...,
as vLLM reads them), not the length it
was trained at. ``seq_len`` is taken, in order, from the ``seq_len`` argument, the pre-training
context the config names (``rope_scaling.original_max_position_embeddings``, or Phi-3's top-level one,
``initial_context_length``; the first two no longer than ``max_position_embeddings``), or
``max_position_embeddings`` capped at ``MAX_DEFAULT_SEQ_LEN``.

For multi-latent attention ``head_dim`` is the query/key head width
(``qk_nope_head_dim + qk_rope_head_dim``); the exact projection sizes are in ``ModelSpec.mla``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hardware_specs.errors import InputError, not_a_file, safe_name
from model_specs.hf_config_fields import MAX_DEFAULT_SEQ_LEN, ConfigReader, dropout_fields, read_json, rope_fields
from model_specs.hf_families import FAMILIES as _FAMILIES
from model_specs.hf_parallel_families import FAMILIES as _PARALLEL_FAMILIES
from model_specs.hf_qwen_next import FAMILIES as _QWEN_NEXT_FAMILIES
from model_specs.hf_quantization import checkpoint_formats
from model_specs.model_spec import ModelSpec

#: model_type -> builder: ``hf_families``'s, the hybrid linear-attention Qwens (``hf_qwen_next``) and
#: the parallel-block families GPT-J, Falcon, Phi and Cohere (``hf_parallel_families``)
FAMILIES = {**_FAMILIES, **_QWEN_NEXT_FAMILIES, **_PARALLEL_FAMILIES}

__all__ = ["model_from_hf_config", "is_hf_config", "supported_model_types", "read_json", "checkpoint_formats",
           "MAX_DEFAULT_SEQ_LEN"]


#: the config keys that state the longest context, as vLLM reads them (vllm/config/model.py
#: ``_get_and_verify_max_len`` possible_keys: max_position_embeddings for OPT and most families,
#: n_positions for GPT-2, max_seq_len for MPT, seq_length for ChatGLM2, then max_sequence_length,
#: max_seq_length, seq_len), the smallest stated one winning. Not read: model_max_length (Command-R's
#: 131072 beside max_position_embeddings 8192: vLLM derives its default length from the latter and
#: only lets a user's --max-model-len go up to the former) and Whisper's max_target_positions.
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length",
                "max_seq_length", "seq_len")


def supported_model_types() -> list[str]:
    return sorted(FAMILIES)


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
#: QUANTIZATION_W4A16_AWQ); others are refused (hf_quantization.checkpoint_formats)
def _language_model_config(data: dict[str, Any], where: str) -> dict[str, Any]:
    """The language model's part of a config: multimodal checkpoints nest it under
    ``text_config`` and name the wrapper in the top-level ``model_type`` (Kimi-K2.5:
    ``kimi_k25`` around a ``kimi_k2`` text model; Mistral-Small-3.1: ``mistral3`` around
    ``mistral``). The nested one is read when the top level names no model_type or one this
    reader does not know; the vision encoder is not modelled. A ``quantization_config`` the
    wrapper states (and the text model does not) still applies to the text model's weights."""
    text = data.get("text_config")
    outer = data.get("model_type")
    if outer is not None and not isinstance(outer, str):     # was read past, the wrapper named "nan"
        raise InputError(f"{where}.model_type", f"expected text such as 'llama', got {str(outer)[:40]}",
                         "write the checkpoint's model_type")
    if isinstance(outer, str) and outer.lower() in FAMILIES:
        return data
    if text is not None and not isinstance(text, dict):     # was reported as an unsupported wrapper
        raise InputError(f"{where}.text_config", f"expected a mapping (the language model's config), got "
                         f"{type(text).__name__} {str(text)[:40]!r}", "write the checkpoint's text_config")
    if text is None:
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
    outer = data
    data = _language_model_config(data, where)
    if data is not outer:
        where += ".text_config"
    family = data.get("model_type")
    if family is not None and not isinstance(family, str):      # was reported as missing
        raise InputError(f"{where}.model_type", f"expected text such as 'llama', got {str(family)[:40]}",
                         "write the checkpoint's model_type")
    if not family:
        raise InputError(f"{where}.model_type", "missing",
                         "a Hugging Face config.json names its model_type")
    family = family.lower()
    build = FAMILIES.get(family)
    if build is None:
        raise InputError(f"{where}.model_type", f"unsupported model_type '{family}'",
                         "supported: " + ", ".join(supported_model_types())
                         + "; or write a model YAML file with the ModelSpec fields")
    cfg = ConfigReader(data, where)
    fields = build(cfg, family, seq_len)
    stated = [(key, cfg.get_int(key)) for key in CONTEXT_KEYS if cfg.has(key)]
    for key, context in stated:
        if context < 1:     # 0 was kept as max_context_tokens 0, "not stated": no context checked
            raise InputError(f"{where}.{key}", f"must be >= 1 token, got {context}",
                             "write the checkpoint's context length, or drop the key")
    if stated:
        # the longest context the model serves (engines default their maximum model length to it):
        # the smallest of the keys stated, as vLLM takes it (GPT-2 states n_positions, MPT max_seq_len)
        fields.setdefault("max_context_tokens", min(context for _, context in stated))
    if fields.get("position_embedding") == "rope":
        fields.update(rope_fields(cfg))
    inherited = data is not outer and "quantization_config" not in outer.get("text_config", {})
    quant_where = where.removesuffix(".text_config") if inherited else where      # the wrapper's own
    for key, value in checkpoint_formats(data.get("quantization_config"), fields.get("moe") is not None,
                                         f"{quant_where}.quantization_config").items():
        fields.setdefault(key, value)
    for key, value in dropout_fields(data, family, where).items():
        fields.setdefault(key, value)
    source = f"Hugging Face config {path}" if path is not None else "Hugging Face config (dict)"
    if data is not outer:       # said where `models show` prints the source: the count leaves it out
        wrapper = outer.get("model_type") or "multimodal"
        source += f" (text_config of a {wrapper} checkpoint; its vision encoder is not modelled)"
    if family == "nemotron_h":
        mtp = cfg.get_int("num_nextn_predict_layers", default=0)
        if mtp < 0:         # a negative count was taken as an MTP block
            raise InputError(f"{where}.num_nextn_predict_layers", f"must be a number of layers >= 0, got {mtp}",
                             "write the checkpoint's value, or drop the key")
        if mtp:
            source += " (its multi-token-prediction block is not modelled)"
    if family == "minimax_m2" and cfg.get_int("num_mtp_modules", default=0) > 0:
        # use_mtp / num_mtp_modules 3: vLLM's MiniMaxM2 skips those weights; mtp_layers stays 0
        source += f" (its {cfg.get_int('num_mtp_modules')} multi-token-prediction modules are not modelled)"
    return ModelSpec(name=name or _default_name(path, data, family), source=source, **fields)
