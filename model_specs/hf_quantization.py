"""Weight formats a Hugging Face checkpoint states in its ``quantization_config`` (ModelOpt,
compressed-tensors, FP8 block scaling, MXFP4): ``checkpoint_formats``.
"""
from __future__ import annotations

import re

from hardware_specs.errors import InputError, shown

MODELOPT_ALGOS = {"FP8": "fp8", "NVFP4": "nvfp4", "FP8_PB_WO": "fp8_block", "FP8_PER_CHANNEL_PER_TOKEN": "fp8",
                  "W4A16_AWQ": "int4_wo"}
#: module-name fragments that mark the attention projections as left unquantised in an
#: ``ignore`` / ``modules_to_not_convert`` / ``exclude_modules`` list
_ATTENTION_NAMES = ("self_attn", "attn", "attention", "q_proj", "qkv_proj", "o_proj")
#: module names of a multimodal checkpoint's encoders and projectors (Mistral3 / Pixtral, Gemma 3,
#: Llava: vision_tower + multi_modal_projector; Llama 4: vision_model; Qwen2.5-VL: visual; Phi-4-mm,
#: Qwen2-Audio: audio_tower / audio_embed): not the language model, whose format is the one read
_NON_LANGUAGE_MODULES = frozenset({"vision_tower", "vision_model", "visual", "vision_encoder", "vision_embed",
                                   "multi_modal_projector", "mm_projector", "image_newline", "image_embed",
                                   "audio_tower", "audio_model", "audio_encoder", "audio_embed", "speech_encoder"})
#: the fix each refusal names: the language model modelled at a format the user picks
_REFUSED_FIX = ("remove quantization_config from config.json and pick the weight format paraplan models "
                "with --precision, e.g. int4_wo or bf16")


def _language_model_entries(ignored: list[str]) -> list[str]:
    """The ``ignore`` entries that name modules of the language model: those naming a vision or
    audio encoder or a multimodal projector (``_NON_LANGUAGE_MODULES``, as a dotted or regex name
    part) are left out, so that a vision tower kept 16-bit does not unread the LM's format."""
    return [item for item in ignored
            if not _NON_LANGUAGE_MODULES.intersection(re.split(r"[^a-z0-9_]+", item))]


def _unsupported(where: str, what: str) -> InputError:
    """The refusal of a quantization_config whose weights no format here models exactly."""
    return InputError(f"{where}.quant_method", what, _REFUSED_FIX)


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
            raise InputError(f"{where}.config_groups.weights.num_bits", f"expected a whole number, got {shown(b)}",
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


def checkpoint_formats(quant, moe: bool, where: str) -> dict[str, str | int]:
    """The ``checkpoint_format`` / ``expert_checkpoint_format`` a config.json's
    ``quantization_config`` states (empty when it has none):

    * ``fp8`` with ``weight_block_size`` (DeepSeek-V3 / R1, Qwen3-FP8): 128 x 128-block FP8 in every
      linear layer -> fp8_block; without it, per-tensor FP8 -> fp8;
    * ``mxfp4`` on a MoE model (gpt-oss): the routed experts only (modules_to_not_convert keeps
      attention, router and embeddings 16-bit);
    * ``modelopt`` (NVIDIA ModelOpt exports, e.g. nvidia/*-FP8, *-NVFP4): ``quant_algo``
      (``MODELOPT_ALGOS``);
    * ``compressed-tensors`` (llm-compressor): ``_compressed_tensors_format``;
    * ``awq`` / ``gptq`` at 4 bits -> int4_wo (4-bit weights, a 16-bit scale per group).

    Where the ignore list (``ignore``, ``modules_to_not_convert``, ``exclude_modules``) names the
    language model's attention projections, only a MoE model's experts take the format (its
    attention stays 16-bit, as NVIDIA's NVFP4 DeepSeek exports keep it); a dense model's format is
    then not read. Entries of a vision / audio encoder or a multimodal projector
    (``_language_model_entries``) do not count: the LM is what is modelled.

    Any other weights (bitsandbytes nf4 / int8, GPTQ / AWQ at 2, 3 or 8 bits, compressed-tensors
    8-bit integers, ``fbgemm_fp8``'s mixed layers, mxfp4 on a dense model, an unknown ModelOpt
    algorithm or method, an MLX or older bitsandbytes config without ``quant_method``) are an
    ``InputError`` naming ``quant_method``: served at the default format they were priced at bytes
    the checkpoint does not have. A ``quantization_config`` that is not a mapping, or a
    ``quant_method`` that is not text, is an ``InputError`` too."""
    if quant is None:
        return {}
    if not isinstance(quant, dict):
        raise InputError(where, f"expected a mapping, got {type(quant).__name__} {str(quant)[:40]!r}",
                         "write it as the checkpoint's config.json has it, or remove it")
    method = quant.get("quant_method")
    if method is None:
        if not quant:
            return {}
        stated = ", ".join(sorted(str(k) for k in quant)[:4])
        raise _unsupported(where, f"missing; the block states {stated} (an MLX or older bitsandbytes "
                                  "checkpoint?), whose weight format is not read")
    if not isinstance(method, str) or not method.strip():
        raise InputError(f"{where}.quant_method", f"expected text, got {shown(method)}",
                         "name the method (e.g. fp8, modelopt, compressed-tensors), or remove quantization_config")
    method = method.strip().lower()
    fmt = ""
    if method == "fp8":
        block = quant.get("weight_block_size")
        if block is not None and not (isinstance(block, list) and len(block) == 2
                                      and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise InputError(f"{where}.weight_block_size", f"expected two positive whole numbers, got {shown(block)}",
                             "write the block as the checkpoint's config.json has it (e.g. [128, 128]), or remove it")
        fmt = "fp8_block" if block else "fp8"
    elif method == "mxfp4":
        if not moe:
            raise _unsupported(where, "mxfp4 on a dense model: only a MoE model's routed experts (gpt-oss) "
                                      "are read as mxfp4")
        return {"expert_checkpoint_format": "mxfp4"}
    elif method == "modelopt":
        algo = quant.get("quant_algo")
        if algo is None and isinstance(quant.get("quantization"), dict):
            algo = quant["quantization"].get("quant_algo")
        fmt = MODELOPT_ALGOS.get(str(algo or "").strip().upper(), "")
        if not fmt:
            raise _unsupported(where, f"modelopt quant_algo {algo!r} is not a format paraplan models "
                                      f"(it reads {', '.join(MODELOPT_ALGOS)})")
    elif method == "compressed-tensors":
        fmt = _compressed_tensors_format(quant, where)
        if not fmt:
            raise _unsupported(where, "compressed-tensors weights other than fp8, nvfp4 or 4-bit integer "
                                      "(e.g. 8-bit integer, or groups that differ) are not a format paraplan models")
    elif method in ("awq", "gptq"):
        if quant.get("bits") not in (4, "4"):
            raise _unsupported(where, f"{method} at bits {quant.get('bits')!r}: only 4-bit {method} "
                                      "(int4_wo) is a format paraplan models")
        fmt = "int4_wo"
    elif method == "bitsandbytes":
        kind = ("8-bit (LLM.int8)" if quant.get("load_in_8bit") else
                f"4-bit {quant.get('bnb_4bit_quant_type') or 'fp4'}" if quant.get("load_in_4bit") else "")
        raise _unsupported(where, f"bitsandbytes {kind} weights are not a format paraplan models".replace("  ", " "))
    else:
        raise _unsupported(where, f"{method!r} weights are not a format paraplan models (it reads fp8, "
                                  "mxfp4 experts, modelopt, compressed-tensors, and 4-bit awq / gptq)")
    nested = quant.get("quantization") if isinstance(quant.get("quantization"), dict) else {}
    ignored = []
    for key in ("ignore", "modules_to_not_convert", "exclude_modules"):
        for value in (quant.get(key), nested.get(key)):
            if isinstance(value, list):
                ignored += [str(v).lower() for v in value]
            elif value is not None:         # a string read as a list would drop its modules unseen
                raise InputError(f"{where}.{key}", f"expected a list of module names, got {shown(str(value)[:40])}",
                                 f"write {key} as a list, e.g. [\"lm_head\"]")
    attention_kept = any(name in item for item in _language_model_entries(ignored) for name in _ATTENTION_NAMES)
    group = _int4_group_size(quant, where) if fmt == "int4_wo" else {}
    if attention_kept:
        return {"expert_checkpoint_format": fmt, **group} if moe else {}
    return {"checkpoint_format": fmt, **({"expert_checkpoint_format": fmt} if moe else {}), **group}


def _int4_group_size(quant: dict, where: str) -> dict[str, int]:
    """``{"int4_group_size": g}`` from an int4 checkpoint's group size: compressed-tensors
    ``config_groups.*.weights.group_size`` (all groups alike), GPTQ ``group_size``, AWQ
    ``q_group_size`` or ``group_size``; {} when unstated or -1 (GPTQ's per-channel scales: one
    scale per row, the bytes of 128's and less)."""
    sizes = set()
    groups = quant.get("config_groups")
    if isinstance(groups, dict):
        for g in groups.values():
            weights = g.get("weights") if isinstance(g, dict) else None
            if isinstance(weights, dict) and weights.get("group_size") is not None:
                sizes.add(("config_groups.weights.group_size", weights["group_size"]))
    for key in ("group_size", "q_group_size"):
        if quant.get(key) is not None:
            sizes.add((key, quant[key]))
    values = {v for _, v in sizes}
    for key, value in sizes:
        if isinstance(value, bool) or not isinstance(value, int) or not (value == -1 or 1 <= value <= 1 << 20):
            raise InputError(f"{where}.{key}", f"expected a whole number of weights per scale, got {shown(value)}",
                             "write the checkpoint's group_size (e.g. 128)")
    if len(values) != 1 or -1 in values:
        return {}
    return {"int4_group_size": values.pop()}


