"""Stored weight formats of served models: bytes per weight, and the GEMM dtype they run in.

Bytes per element include the scales each format stores:

* 16-bit (``bf16``/``fp16``, the empty quant mode): 2 bytes.
* ``fp8`` (per-tensor or per-channel scale): 1 byte.
* ``fp8_block`` (DeepSeek-V3 style, one fp32 scale per 128 x 128 block; DeepSeek-V3 report,
  section 3.3.2): 1 + 4/16384 bytes.
* ``nvfp4`` (two e2m1 values per byte, one fp8 scale per 16 values; NVIDIA, "Introducing NVFP4",
  2025): 0.5 + 1/16 bytes. ``mxfp4`` (one e8m0 scale per 32, OCP MX spec v1.0): 0.5 + 1/32.
* ``int4_wo`` (int4 weight-only, AWQ/GPTQ group 128 with a 16-bit scale; Lin et al. 2024,
  arXiv 2306.00978): 0.5 + 2/128 bytes; a checkpoint of another group g (``ModelSpec.
  int4_group_size``; Kimi-K2.5's experts: 32) 0.5 + 2/g.

A GEMM runs at the tensor-core rate of its dtype when the GPU has one (``fp8`` on Hopper and
Blackwell, ``nvfp4`` on Blackwell); otherwise the weights are dequantised in the kernel and
the math runs in 16-bit (weight-only kernels such as Marlin: int4 everywhere, fp4 on Hopper).
"""
from __future__ import annotations

import numpy as np

from hardware_specs.errors import InputError
from hardware_specs.gpu_spec import GPUSpec

WEIGHT_FORMAT_BYTES = {
    "bf16": 2.0, "fp16": 2.0,
    "fp8": 1.0, "fp8_block": 1.0 + 4.0 / 16384.0,
    "nvfp4": 0.5 + 1.0 / 16.0, "mxfp4": 0.5 + 1.0 / 32.0,
    "int4_wo": 0.5 + 2.0 / 128.0,
}
#: the tensor-core dtype each format computes in when the GPU supports it
_COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4",
                  "mxfp4": "nvfp4", "int4_wo": "bf16"}
#: spellings sources use for the same format
ALIASES = {"": "bf16", "none": "bf16", "16bit": "bf16", "bfloat16": "bf16", "float16": "fp16", "fp4": "nvfp4",
           "int4": "int4_wo", "w4a16": "int4_wo", "fp8_e4m3": "fp8"}
WEIGHT_FORMATS = tuple(WEIGHT_FORMAT_BYTES)
#: elements along a weight's dimension that share one scale where a tensor-parallel slice of the
#: dimension must hold whole blocks, or the engines refuse to shard the scales: fp8_block's 128 x
#: 128 blocks (DeepSeek-V3 report 3.3.2; vLLM ``Fp8MoEMethod.create_weights``: "The output_size
#: of gate's and up's weight = 192 is not divisible by weight quantization block_n = 128";
#: SGLang's fp8.py the same). The 4-bit formats' small groups (nvfp4 16, mxfp4 32, int4 128) are
#: padded by the engines' MoE kernels: gpt-oss-120b's 2,880-wide experts are measured at tp 8
#: (360 a GPU) on vLLM and TensorRT-LLM (serving_runs.csv); per-tensor fp8 and 16-bit: none
SCALE_BLOCK_ELEMENTS = {"fp8_block": 128}
#: bytes per KV-cache element per dtype
KV_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "auto": 2.0, "fp8": 1.0}


def canonical_format(name: str | None, field: str = "weight format") -> str:
    """The catalog name of a weight format (``None``/empty = 16-bit); unknown names are an
    ``InputError`` listing the known ones."""
    key = "" if name is None else str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in WEIGHT_FORMAT_BYTES:
        raise InputError(field, f"unknown weight format {name!r}", "use one of " + ", ".join(WEIGHT_FORMATS))
    return key


def weight_bytes(fmt: str, int4_group_size: int = 0) -> float:
    """Bytes per stored weight element of format ``fmt`` (scales included); ``int4_group_size``
    (> 0) the weights per 16-bit scale of an ``int4_wo`` checkpoint (default 128)."""
    key = canonical_format(fmt)
    if key == "int4_wo" and int4_group_size > 0:
        return 0.5 + 2.0 / float(int4_group_size)
    return WEIGHT_FORMAT_BYTES[key]


def native_compute_dtype(fmt: str) -> str:
    """The tensor-core dtype format ``fmt`` computes in on a GPU that has it."""
    return _COMPUTE_DTYPE[canonical_format(fmt)]


def runs_natively(fmt: str, gpu: GPUSpec) -> bool:
    """Whether ``gpu`` has tensor cores for ``fmt``'s own compute dtype (else its GEMMs dequantise
    the weights and run in 16-bit: ``compute_dtype``)."""
    return native_compute_dtype(fmt) in gpu.peak_flops_per_s


def compute_dtype(fmt: str, gpu: GPUSpec) -> str:
    """The dtype whose tensor-core peak a GEMM with weights in ``fmt`` runs at on ``gpu``: the
    format's own when the chip has it, else the chip's 16-bit dtype (weight-only dequant)."""
    if runs_natively(fmt, gpu):
        return native_compute_dtype(fmt)
    return "bf16" if "bf16" in gpu.peak_flops_per_s else ("fp16" if "fp16" in gpu.peak_flops_per_s else "fp32")


def kv_dtype_bytes(kv_dtype: str) -> float:
    """Bytes per KV-cache element."""
    key = str(kv_dtype).strip().lower()
    if key not in KV_DTYPE_BYTES:
        raise InputError("kv_cache_dtype", f"unknown KV-cache dtype {kv_dtype!r}", "use auto, bf16, fp16 or fp8")
    return KV_DTYPE_BYTES[key]


def scale_block(fmt: str) -> int:
    """Elements per scale block along a sharded dimension (1: no block constraint)."""
    return SCALE_BLOCK_ELEMENTS.get(canonical_format(fmt), 1)


def slice_holds_whole_blocks(width, parts, fmt: str):
    """Whether ``width`` split ``parts`` ways leaves whole scale blocks of ``fmt`` in each slice
    (numpy-friendly)."""
    width, parts = np.asarray(width, dtype=float), np.asarray(parts, dtype=float)
    block = float(scale_block(fmt))
    per = width / np.maximum(parts, 1.0)
    return (np.mod(per, 1.0) == 0) & (np.mod(per, block) == 0)

