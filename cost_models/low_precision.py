"""Low-precision training recipes: which ops run in which dtype, what quantisation costs.

Recipes (NVIDIA Transformer Engine, as Megatron-Core drives them with ``--fp8-recipe``):

* ``fp8``: tensor-scaled FP8 (Micikevicius et al. 2022, "FP8 Formats for Deep Learning",
  arXiv 2209.05433; TE ``DelayedScaling`` / ``Float8CurrentScaling``). One fp32 scale per
  tensor; E4M3 for activations and weights, E5M2 for gradients (Megatron's default ``hybrid``
  format). Hopper's FP8 tensor cores take only the "TN" layout, so TE keeps a transposed FP8
  copy of each operand a backward GEMM reads transposed. Delayed scaling takes the scale
  from the amax history and records the new amax inside the cast kernel (no extra pass);
  current scaling reads the tensor once more for its amax.
* ``mxfp8``: OCP Microscaling FP8 (OCP MX spec v1.0, 2023; Blackwell). E4M3 elements with one
  E8M0 (1-byte) scale per 32 consecutive elements. The block runs along the GEMM's reduction
  dimension, which differs between fprop and the backward GEMMs, so every operand is
  quantised twice (row-wise and column-wise copies); scales are local, no amax pass.
* ``nvfp4``: NVFP4 (NVIDIA 2025, "Pretraining Large Language Models with NVFP4", arXiv
  2509.25149, section 4). E2M1 elements (two per byte), one E4M3 scale per 16 elements and an
  fp32 per-tensor scale (needs the tensor's amax: one more read). Weights use 16x16 2-D blocks
  so fprop and dgrad see the same quantised values; the inputs of the weight-gradient GEMM
  (activations and output gradients, column-wise copies) get a 16x16 random Hadamard
  transform first, which has its own amax; gradients use stochastic rounding. The paper keeps
  a few leading and trailing layers in BF16 (e.g. 2 + 8 of 62 for its 12B model).

What stays in higher precision (all recipes): the attention core (QK^T, softmax, AV) in
BF16 with fp32 softmax statistics (TE's FP8 attention is opt-in); layer norms and softmax
compute in fp32 with BF16 inputs and outputs; the MoE router (BF16 or fp32); the input
embedding and the output layer (LM head) in BF16; gradient reduction in fp32 (Megatron's
main-grad buffers); the optimizer with fp32 master weights and moments (``OP_DTYPES``).

Every function takes numpy arrays or scalars for the shapes.
"""
from __future__ import annotations

import numpy as np

#: dtype of each op class per recipe (documentation and a table the CLI can print).
_COMMON = {
    "attention_core": "bf16 (fp32 softmax statistics)",
    "layernorm_softmax": "fp32 compute, bf16 in/out",
    "activation_fn": "bf16",
    "router": "bf16 or fp32",
    "embedding": "bf16",
    "lm_head": "bf16",
    "grad_reduce": "fp32",
    "optimizer": "fp32 master weights, moments (bf16 working copy)",
}
OP_DTYPES = {
    "bf16": {"linear_fprop": "bf16", "linear_dgrad": "bf16", "linear_wgrad": "bf16", **_COMMON},
    "fp8": {"linear_fprop": "e4m3 x e4m3, per-tensor scale",
            "linear_dgrad": "e5m2 grad x e4m3 weight (transposed copy)",
            "linear_wgrad": "e4m3 act (transposed) x e5m2 grad (transposed)", **_COMMON},
    "mxfp8": {"linear_fprop": "mxfp8 e4m3, 1x32 e8m0 scales (row-wise)",
              "linear_dgrad": "mxfp8 e4m3 (grad row-wise, weight column-wise)",
              "linear_wgrad": "mxfp8 e4m3 (column-wise act and grad)", **_COMMON},
    "nvfp4": {"linear_fprop": "nvfp4 e2m1, 1x16 e4m3 scales + fp32 tensor scale; weights 16x16 blocks",
              "linear_dgrad": "nvfp4 (grad stochastic rounding, weight 16x16 blocks)",
              "linear_wgrad": "nvfp4 after 16x16 random Hadamard transform of both inputs",
              **_COMMON},
}

#: bytes per element of a quantised copy, scales included (per-tensor scales negligible).
ELEMENT_BYTES = {"fp8": 1.0, "mxfp8": 1.0 + 1.0 / 32.0, "nvfp4": 0.5 + 1.0 / 16.0}
#: bytes per element of the 16-bit source a quantisation kernel reads.
SOURCE_BYTES = 2.0
PASSES = ("fprop", "dgrad", "wgrad")


def _f(x):
    return np.asarray(x, dtype=float)


def quantised_copies(dtype: str, transposed_copy: bool = True) -> int:
    """Quantised copies kept per GEMM operand (row-wise for one GEMM, column-wise for the other).

    fp8: 2 with Hopper's transposed copy, 1 where the tensor cores read either layout
    (``transposed_copy=False``, e.g. Blackwell per-tensor FP8); mxfp8 and nvfp4: 2; else 0.
    """
    if dtype == "fp8":
        return 2 if transposed_copy else 1
    return 2 if dtype in ("mxfp8", "nvfp4") else 0


#: kernels that stream a tensor in one standalone quantisation of a 16-bit tensor (into all its
#: copies), by recipe: each pays the per-kernel fixed time (``EfficiencyModel.kernel_overhead_s``)
#: and is issued by the host. Transformer Engine (NVIDIA/TransformerEngine@v2.14, the release the
#: Megatron-Bridge 26.04 and 26.04.01 containers pin, uv.lock at Bridge v0.4.0 / v0.4.2:
#: TransformerEngine@71bbefb, 2.14.0, and @366798e, 2.14.1): delayed scaling casts (and
#: transposes) in one kernel that records the amax as it goes (``nvte_quantize``); current
#: (per-tensor, "tensorwise") scaling reduces the tensor's amax in one pass and casts in a second
#: (transformer_engine/pytorch/csrc/quantizer.cpp ``Float8CurrentScalingQuantizer::quantize_impl``:
#: ``nvte_compute_amax_with_config``, ``nvte_compute_scale_from_amax``, ``nvte_quantize_v2``):
#: two tensor kernels; the scalar launches around them are ``SCALAR_QUANTISE_KERNELS``. MXFP8 and
#: block scaling write both copies with their local scales in one kernel.
#: NVFP4 activations and gradients (the recipe's random Hadamard transform on their column-wise
#: copies): one kernel takes both amaxes in one read (``nvte_hadamard_transform_amax``), then a
#: row-wise cast and a fused Hadamard-transform-and-cast of the column-wise copy, each reading the
#: 16-bit tensor (NVIDIA/TransformerEngine@5671fd3, 2.12, pytorch/csrc/quantizer.cpp
#: ``NVFP4Quantizer::quantize_impl`` lines 1485, 1557, 1623-1632): three kernels. From 2.14 one
#: kernel writes both copies (``NVFP4_RHT_FUSED_KERNELS``).
QUANTISE_KERNELS = {"delayed": 1.0, "current": 2.0, "mxfp8": 1.0, "nvfp4": 3.0}
#: NVFP4 activations and gradients when Transformer Engine writes the row-wise and the
#: Hadamard-transformed column-wise copies in one kernel after the amax kernel
#: (NVIDIA/TransformerEngine@71bbefb, 2.14, pytorch/csrc/quantizer.cpp lines 2297 and 2375,
#: ``nvte_quantize_with_hadamard_transform``, eligible for 16-bit inputs with rows % 64 and columns
#: % 128 == 0; the stack's ``nvfp4_rht_cast_fusion``): two kernels, 2 + 2 + 2 x 0.5625 bytes.
NVFP4_RHT_FUSED_KERNELS = 2.0
#: the same when the norm before the GEMM produces the tensor (TE's LayerNormLinear): delayed
#: scaling writes the FP8 copy from the norm kernel itself (no extra kernel); under current
#: scaling the norm writes 16-bit output and its amax, then the cast follows
#: (transformer_engine/pytorch/csrc/extensions/normalization.cpp@v2.14, ``FUSED_NORM_AMAX_FP8``:
#: ``quantize_with_amax``, one tensor kernel after the scale's scalar one); MXFP8 quantises the
#: norm's 16-bit output after it (``Impl::UNFUSED`` unless ``NVTE_NORM_FWD_USE_CUDNN``): one kernel.
#: NVFP4 with the Hadamard transform's amax is never fused into the norm (normalization.cpp lines
#: 123-125 at @5671fd3 and @71bbefb: "Post-RHT amax is handled within NVFP4 quantizer", ``Impl::
#: UNFUSED``): the norm writes 16-bit output and the standalone quantisation follows.
FUSED_QUANTISE_KERNELS = {"delayed": 0.0, "current": 1.0, "mxfp8": 1.0, "nvfp4": 3.0}
#: one-thread launches (``<<<1, 1>>>``) of a current-scaling quantisation, standalone and after a
#: norm: ``zero_amax_kernel`` (inside ``nvte_compute_amax``) and ``compute_scale_from_amax_kernel``
#: (transformer_engine/common/recipe/current_scaling.cu@v2.14, the same at v2.8 and v2.12); after
#: a norm only the scale's. Documentation, not priced: each reads and writes one float and has no
#: wave of blocks to drain, so the per-kernel fixed time of a tensor kernel (launch latency and
#: last-wave tail, ``kernel_overhead_s``) does not describe it (its GPU time is the stream's gap
#: between dependent launches, about a microsecond), and the host launches it from the same C++
#: call as the tensor kernels (``quantize_impl``), with no Python op of its own.
SCALAR_QUANTISE_KERNELS = {"current": 2.0, "current_fused": 1.0}


def quantise_kernels(dtype: str, current_scaling=False, fused=False, rht_cast_fusion=False):
    """Tensor kernels that quantise one tensor for a low-precision GEMM (``QUANTISE_KERNELS``,
    or ``FUSED_QUANTISE_KERNELS`` when the producing norm computes it; the one-thread scale
    launches, ``SCALAR_QUANTISE_KERNELS``, are not counted); ``current_scaling`` (per row
    allowed) picks per-tensor current scaling over delayed scaling for ``fp8``;
    ``rht_cast_fusion`` (per row allowed) one kernel for both NVFP4 copies
    (``NVFP4_RHT_FUSED_KERNELS``); 0 for 16/32-bit dtypes."""
    if not quantised_copies(dtype):
        return 0.0 * np.asarray(current_scaling, dtype=float)
    table = FUSED_QUANTISE_KERNELS if fused else QUANTISE_KERNELS
    if dtype == "fp8":
        return np.where(current_scaling, table["current"], table["delayed"])
    if dtype == "nvfp4":
        return np.where(np.asarray(rht_cast_fusion, dtype=bool), NVFP4_RHT_FUSED_KERNELS, table[dtype]) \
            + 0.0 * np.asarray(current_scaling, dtype=float)
    return table[dtype] + 0.0 * np.asarray(current_scaling, dtype=float)


def quantise_bytes_per_element(dtype: str, operand: str, scaling: str = "delayed",
                               transposed_copy: bool = True, rht_cast_fusion: bool = False) -> float:
    """HBM bytes per element to quantise one GEMM operand into all the copies it needs.

    ``operand``: ``activation`` (GEMM input X: row-wise for fprop, column-wise for wgrad),
    ``weight`` (W: row-wise for fprop, column-wise for dgrad) or ``grad`` (output gradient dY:
    row-wise for dgrad, column-wise for wgrad). Bytes = read the 16-bit source once (2) + per
    copy: its amax pass if the recipe needs one (2) + the copy's write (``ELEMENT_BYTES``).

    * fp8, delayed scaling: 2 + 1 + 1 = 4 (3 without the transposed copy); current scaling
      adds one amax read: 6 (5).
    * mxfp8: 2 + 2 x 1.03125 = 4.0625.
    * nvfp4 activations and gradients: row copy needs the per-tensor amax, the column copy the
      amax of its Hadamard transform, both taken in one read; each copy's cast reads the tensor
      again: 2 + 2 x (2 + 0.5625) = 7.125 (Transformer Engine 2.12: ``QUANTISE_KERNELS``). With
      ``rht_cast_fusion`` one kernel reads it once and writes both: 2 + 2 + 2 x 0.5625 = 5.125
      (``NVFP4_RHT_FUSED_KERNELS``). Weights (2-D blocks, one amax for both layouts):
      2 + 2 + 2 x 0.5625 = 5.125.
    * 16/32-bit dtypes: 0.
    """
    copies = quantised_copies(dtype, transposed_copy)
    if copies == 0:
        return 0.0
    write = ELEMENT_BYTES[dtype]
    if dtype == "fp8":
        amax_per_copy, amax_once = 0.0, (SOURCE_BYTES if scaling == "current" else 0.0)
    elif dtype == "mxfp8":
        amax_per_copy, amax_once = 0.0, 0.0
    elif operand == "weight" or rht_cast_fusion:   # nvfp4, 2-D blocks or the fused kernel: one read
        amax_per_copy, amax_once = 0.0, SOURCE_BYTES
    else:                                          # nvfp4: tensor amax + Hadamard amax
        amax_per_copy, amax_once = SOURCE_BYTES, 0.0
    return SOURCE_BYTES + amax_once + copies * (amax_per_copy + write)


def cast_bytes_per_gemm(m, n, k, dtype: str, pass_: str, include_weights=True, scaling: str = "delayed",
                        transposed_copy: bool = True):
    """HBM bytes of the quantisation kernels charged to one pass of a linear layer, bytes.

    The layer computes Y[m, n] = X[m, k] W[k, n]; ``pass_`` is ``fprop`` (Y = XW), ``dgrad``
    (dX = dY W^T) or ``wgrad`` (dW = X^T dY). Each operand is quantised once, into all its
    copies, by the first pass that needs it (TE quantises both usages in one kernel):
    fprop pays for X (m*k) and, if ``include_weights``, W (k*n); dgrad pays for dY (m*n);
    wgrad reuses the stored column-wise copies and pays nothing. Weights are quantised once per
    optimizer step and cached across micro-batches, so pass ``include_weights=False`` for all
    micro-batches but the first. Per-element costs: ``quantise_bytes_per_element``.

    (The simulator charges these per pass through ``layer_costs.linear_cast_bytes``, which
    adds where Transformer Engine fuses the quantisation into the producing kernel.)
    """
    if pass_ not in PASSES:
        raise ValueError(f"pass_ must be one of {PASSES}, got {pass_!r}")
    m, n, k = _f(m), _f(n), _f(k)
    if pass_ == "fprop":
        x = m * k * quantise_bytes_per_element(dtype, "activation", scaling, transposed_copy)
        w = k * n * quantise_bytes_per_element(dtype, "weight", scaling, transposed_copy)
        return x + np.where(include_weights, w, 0.0)
    if pass_ == "dgrad":
        return m * n * quantise_bytes_per_element(dtype, "grad", scaling, transposed_copy)
    return 0.0 * (m + n + k)


def weight_copy_bytes_per_param(dtype: str, transposed_copy: bool = True) -> float:
    """Extra bytes per parameter for the quantised weight copies kept through a step.

    Kept on top of the 16-bit working weights (``memory.WEIGHT_BYTES``): fp8 1 + 1 (the
    transposed copy; 1 without it), mxfp8 2 x 1.03125 = 2.0625, nvfp4 2 x 0.5625 = 1.125;
    0 for 16/32-bit. Megatron's ``--fp8-param-gather`` makes these copies the only weights,
    dropping the 16-bit ones (``memory.model_state_bytes(fp8_param_gather=...)``).
    """
    return quantised_copies(dtype, transposed_copy) * ELEMENT_BYTES.get(dtype, 0.0)


def saved_gemm_input_bytes_per_element(dtype: str) -> float:
    """Bytes per element of a linear layer's input kept for its weight gradient.

    Low-precision recipes keep only the column-wise quantised copy (TE drops the 16-bit
    input after forward): ``ELEMENT_BYTES[dtype]``; 16-bit training keeps 2 bytes.
    """
    return ELEMENT_BYTES.get(dtype, SOURCE_BYTES)
