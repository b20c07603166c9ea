"""Which checkpoint a serving deployment loads, and so what an ``auto`` KV cache is.

A priced weight format is served either from a checkpoint that stores it (the model's own
release, ``ModelSpec.checkpoint_format`` / ``expert_checkpoint_format``, or a known quantised
export such as NVIDIA ModelOpt's) or from the 16-bit release quantised at load time by an engine
that can (vLLM / SGLang ``--quantization fp8``). The difference matters beyond the weights: an
engine whose KV dtype ``auto`` reads the checkpoint's quantisation config
(``ServingBehaviour.kv_dtype_from_checkpoint``) keeps an FP8 KV cache for a ModelOpt FP8 /
NVFP4 export (its hf_quant_config.json states ``kv_cache_quant_algo FP8``), and the model's
16-bit KV for a 16-bit release quantised online (vLLM's online ``--quantization fp8`` leaves
``CacheConfig.cache_dtype`` at ``auto``, the model dtype). ``served_checkpoint`` is that one
choice; ``ServingContext.build`` prices it and the launch exports load it.
"""
from __future__ import annotations

from typing import Mapping

#: Hugging Face checkpoints whose stored weight formats are known: (model preset, dense GEMM
#: format, routed-expert format) -> repository. Each is the repository's own statement of its
#: format (its config.json ``quantization_config`` or model card); only these are offered as
#: the default ``MODEL`` of an export, any other priced format asks for a checkpoint.
CHECKPOINTS: Mapping[tuple[str, str, str], str] = {
    # 16-bit releases (config.json torch_dtype bfloat16, no quantization_config)
    ("llama3.1-8b", "bf16", "bf16"): "meta-llama/Llama-3.1-8B-Instruct",
    ("llama3.1-70b", "bf16", "bf16"): "meta-llama/Llama-3.1-70B-Instruct",
    ("llama3.1-405b", "bf16", "bf16"): "meta-llama/Llama-3.1-405B-Instruct",
    ("qwen3-32b", "bf16", "bf16"): "Qwen/Qwen3-32B",
    ("qwen3-235b-a22b", "bf16", "bf16"): "Qwen/Qwen3-235B-A22B",
    ("qwen3-30b-a3b", "bf16", "bf16"): "Qwen/Qwen3-30B-A3B",
    # the authors' block-scaled FP8 releases (quantization_config quant_method fp8,
    # weight_block_size [128, 128])
    ("deepseek-r1", "fp8_block", "fp8_block"): "deepseek-ai/DeepSeek-R1",
    ("deepseek-v3", "fp8_block", "fp8_block"): "deepseek-ai/DeepSeek-V3",
    ("qwen3-235b-a22b", "fp8_block", "fp8_block"): "Qwen/Qwen3-235B-A22B-FP8",
    ("kimi-k2", "fp8_block", "fp8_block"): "moonshotai/Kimi-K2-Instruct",
    ("minimax-m2.5", "fp8_block", "fp8_block"): "MiniMaxAI/MiniMax-M2.5",
    # NVIDIA ModelOpt export (hf_quant_config.json quant_algo FP8: every linear layer of the
    # blocks per-tensor FP8, KV FP8). NVIDIA's NVFP4 exports leave some attention projections in
    # 16-bit (their model cards), which is not the all-NVFP4 a plan prices: none is named
    ("llama3.1-8b", "fp8", "fp8"): "nvidia/Llama-3.1-8B-Instruct-FP8",
    # OpenAI's release: attention and dense layers in bf16, the routed experts in MXFP4
    ("gpt-oss-120b", "bf16", "mxfp4"): "openai/gpt-oss-120b",
    ("gpt-oss-20b", "bf16", "mxfp4"): "openai/gpt-oss-20b",
    # Moonshot's release (compressed-tensors pack-quantized, quantisation-aware trained): the routed
    # experts in int4 weight-only, attention, shared experts, dense layer and LM head in bf16
    ("kimi-k2.5", "bf16", "int4_wo"): "moonshotai/Kimi-K2.5",
}
#: formats an engine can make at load time from a 16-bit checkpoint (``--quantization fp8``:
#: per-tensor FP8 weights, dynamic activation scales)
ONLINE_QUANTISATION = {"fp8"}
#: engines that quantise a 16-bit checkpoint to FP8 at load time: vLLM (docs "FP8 W8A8": "online
#: dynamic quantization ... --quantization fp8") and SGLang (docs "Quantization": online
#: quantization with ``--quantization fp8``); TensorRT-LLM's PyTorch backend reads the format of
#: a pre-quantised (ModelOpt) checkpoint (docs "Quantization": "the PyTorch backend ... supports
#: pre-quantized checkpoints"), so it needs one
ONLINE_FP8_ENGINES = frozenset({"vllm", "sglang"})
#: weight formats whose quantised exports name an FP8 KV cache (NVIDIA ModelOpt's per-tensor FP8
#: and NVFP4: ``kv_cache_quant_algo FP8``); block-scaled FP8 (``fp8_block``) checkpoints come from
#: the models' authors without a KV format
KV_NAMING_FORMATS = frozenset({"fp8", "nvfp4"})


def stored_formats(model, repository) -> tuple[str, str] | None:
    """(dense, expert) weight formats the Hugging Face ``repository`` stores, where ``CHECKPOINTS``
    names it as a checkpoint of ``model`` (a ``ModelSpec``); None where it is not known. Ids are
    compared without case (the Hub resolves ``moonshotai/kimi-k2.5`` to ``moonshotai/Kimi-K2.5``)."""
    key = str(repository or "").strip().lower()
    for (name, dense, expert), repo in CHECKPOINTS.items():
        if name == model.name and repo.lower() == key:
            return dense, expert
    return None


def names_expert_checkpoint(model, expert: str) -> bool:
    """Whether ``CHECKPOINTS`` names a checkpoint of ``model`` storing its routed experts in
    ``expert`` (e.g. an NVFP4 export beside a release in MXFP4)."""
    return any(name == model.name and stored == expert for (name, _, stored) in CHECKPOINTS)


def served_checkpoint(model, dense: str, expert: str, framework: str,
                      prequantised: bool = False) -> tuple[str | None, bool]:
    """(repository, online): the checkpoint a deployment of ``model`` (a ``ModelSpec``) in
    ``dense`` / ``expert`` weight formats loads on ``framework`` (``vllm``, ``sglang``,
    ``trtllm``), and whether it is a 16-bit release the engine quantises to FP8 at load time.

    The model's own release when it stores the formats (``checkpoint_format`` /
    ``expert_checkpoint_format``), else a known checkpoint storing them (``CHECKPOINTS``), else,
    for per-tensor FP8 on an engine that quantises at load time, the known 16-bit release
    (online); else (None, False): a checkpoint storing the formats, which whoever launches names.
    ``prequantised``: the caller states that the checkpoint served stores the formats (a
    quantised export), so it is never the 16-bit release quantised online."""
    moe = model.moe is not None
    expert = expert if moe else dense
    repo = CHECKPOINTS.get((model.name, dense, expert))
    if repo is not None:
        return repo, False
    stored = dense == model.checkpoint_format or (moe and expert == model.expert_checkpoint_format)
    if not (prequantised or stored) and framework.lower() in ONLINE_FP8_ENGINES and \
            dense in ONLINE_QUANTISATION and expert == dense:
        base = CHECKPOINTS.get((model.name, "bf16", "bf16"))
        if base is not None:
            return base, True
    return None, False


def checkpoint_names_fp8_kv(model, dense: str, expert: str, framework: str, prequantised: bool = False) -> bool:
    """Whether the checkpoint served (``served_checkpoint``) is a quantised export naming an FP8
    KV cache: it stores a ``KV_NAMING_FORMATS`` format rather than being a 16-bit release
    quantised at load time (which names no KV format)."""
    if not KV_NAMING_FORMATS & {dense, expert}:
        return False
    return not served_checkpoint(model, dense, expert, framework, prequantised)[1]
