"""HBM traffic of the language-model loss (cross-entropy over the vocabulary), per logit.

The loss is memory-bound: every kernel streams the [tokens, vocab / tp] logits (or a copy of
them) through HBM. What it moves depends on the implementation a stack runs
(``TrainingBehaviour.cross_entropy``, one of ``hardware_specs.stack_spec.CROSS_ENTROPY_IMPLS``);
the counts below are read from each implementation's code, one term per vocabulary-sized tensor
a kernel reads or writes (bytes per logit, the logits 16-bit as the output layer writes them;
per-token tensors such as the max, the sum and the target logit are left out). Whether the
second read of a row hits L2 is not modelled: every read counts.

``megatron_unfused``: Megatron-Core ``tensor_parallel.vocab_parallel_cross_entropy``
(NVIDIA/Megatron-LM@d7288711 megatron/core/tensor_parallel/cross_entropy.py; the same ops
since the 2020-03-10 "memory optimization in mpu cross entropy", 57064fd6, in Megatron-LM
2020-2022, Megatron-DeepSpeed and GPT-NeoX, which call it on ``output.float()``), eager
PyTorch, one kernel per op. Forward: ``.float()`` reads 2 and writes 4; ``max`` reads 4; the
in-place subtract reads and writes 4 + 4; ``exp(out=)`` 4 + 4; ``sum`` 4; the softmax ``div_``
4 + 4 (kept for backward): 38 bytes, 6 kernels. Backward: the target scatter is per token;
``mul_`` by the output gradient reads and writes 4 + 4; autograd's backward of ``.float()``
casts the gradient back, 4 + 2: 14 bytes, 2 kernels. (Before 57064fd6 the forward also
``clone()``d the fp32 logits, 8 bytes more; no stack here runs that code: the "2019" rows quote
the README of 2020-09.)

``megatron_fused``: Megatron-Core ``fused_vocab_parallel_cross_entropy``
(``cross_entropy_loss_fusion`` with ``cross_entropy_fusion_impl: native``;
megatron/core/fusions/fused_cross_entropy.py at d7288711): three ``jit_fuser`` functions
(``torch.compile`` on PyTorch >= 2.2, megatron/core/jit.py), one kernel each, in forward:
``calculate_logits_max`` reads the 16-bit logits and writes the fp32 copy it returns (2 + 4),
``calculate_predicted_logits`` subtracts the max, exponentiates in place and sums (4 + 4),
``calculate_cross_entropy_loss`` divides in place (4 + 4): 22 bytes, 3 kernels. Backward:
``calculate_gradients`` updates the saved fp32 softmax in place (read 4, written back 4: the
compiled graph applies its input's mutation) and returns it cast to bf16 (2): 10 bytes,
1 kernel.

``te_triton``: Transformer Engine ``parallel_cross_entropy`` (``cross_entropy_fusion_impl:
te``; NVIDIA/TransformerEngine@v2.12 transformer_engine/common/triton/cross_entropy.py,
pytorch/triton/cross_entropy.py), Triton kernels on the 16-bit logits: ``online_softmax_kernel``
reads the row once (2), ``cross_entropy_kernel`` reads it again and writes the gradient over it
in place (2 + 2): 6 bytes, 2 kernels. Backward: Megatron-Core asks for the unreduced loss
(``reduce_loss=False``, megatron/core/extensions/transformer_engine.py
``te_parallel_cross_entropy``), so the output gradient is not the scalar 1 and
``element_mul_kernel`` scales the stored gradient in place (2 + 2): 4 bytes, 1 kernel.

``torch_eager``: ``F.cross_entropy(logits.float(), labels)`` in eager PyTorch (torchtitan's
``cross_entropy_loss``, pytorch/torchtitan@v0.2.0 torchtitan/components/loss.py, when the loss is
not compiled; PyTorch DDP / FSDP loops): the cast (2 + 4), then ``log_softmax``'s kernel
(aten/src/ATen/native/cuda/SoftMax.cu ``cunn_SoftMaxForward``: a max pass and a sum-of-exp pass
over the row, then a pass that reads it again and writes the output: 4 + 4 + 4 + 4) and the
per-token ``nll_loss``: 22 bytes, 2 kernels. Backward: ``nll_loss_backward`` zero-fills a
logits-sized gradient (4) and scatters per token (a per-token kernel, not counted, as
Megatron's target update is not); ``cunn_SoftMaxBackward`` sums the gradient over the row (4),
then reads it and the saved output and writes the input gradient (4 + 4 + 4); the cast's
backward (4 + 2): 26 bytes, 3 vocabulary-sized kernels.

``flash_attn_xentropy``: flash-attn's ``flash_attn.losses.cross_entropy.CrossEntropyLoss``
(llm-foundry's MPT ``loss_fn`` default ``fused_crossentropy``, llmfoundry/models/mpt/
modeling_mpt.py), one kernel each way on the 16-bit logits: forward reads the row for its max and
its sum of exponentials (2 + 2: apex's xentropy, which flash-attn 1.x wraps, makes two passes;
flash-attn 2's Triton kernel one), backward reads the logits and writes their gradient (2 + 2):
4 and 4 bytes, 1 kernel each.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cost_models.memory import LOGIT_BYTES
from hardware_specs.stack_spec import CROSS_ENTROPY_IMPLS


@dataclass(frozen=True)
class LossTraffic:
    """Bytes per logit and vocabulary-sized kernels of one loss implementation, each direction."""

    bytes_per_logit_fwd: float
    bytes_per_logit_bwd: float
    kernels_fwd: float
    kernels_bwd: float


#: implementation -> its traffic (the module docstring counts each)
CROSS_ENTROPY_TRAFFIC = {
    "megatron_unfused": LossTraffic(38.0, 14.0, 6.0, 2.0),
    "megatron_fused": LossTraffic(22.0, 10.0, 3.0, 1.0),
    "te_triton": LossTraffic(6.0, 4.0, 2.0, 1.0),
    "torch_eager": LossTraffic(22.0, 26.0, 2.0, 3.0),
    "flash_attn_xentropy": LossTraffic(4.0, 4.0, 1.0, 1.0),
}
assert set(CROSS_ENTROPY_TRAFFIC) == set(CROSS_ENTROPY_IMPLS)
#: implementation name -> integer code (``ConfigBatch.cross_entropy``)
CROSS_ENTROPY_CODES = {name: i for i, name in enumerate(CROSS_ENTROPY_IMPLS)}
_TABLE = np.array([[CROSS_ENTROPY_TRAFFIC[n].bytes_per_logit_fwd, CROSS_ENTROPY_TRAFFIC[n].bytes_per_logit_bwd,
                    CROSS_ENTROPY_TRAFFIC[n].kernels_fwd, CROSS_ENTROPY_TRAFFIC[n].kernels_bwd]
                   for n in CROSS_ENTROPY_IMPLS])


#: bytes per logit the loss holds at its peak on the last stage, where an implementation's code
#: says more than the default: the logits in the training dtype, still held by the caller, and
#: the loss's fp32 softmax beside them, i.e. activation bytes + 4 (``memory.LOGIT_BYTES``, 6, in
#: 16-bit training; 8 in fp32 / tf32). Megatron's vocab-parallel loss subtracts the maximum out of
#: place (``vocab_parallel_logits = vocab_parallel_logits - logits_max``, then ``exp_`` in place;
#: Megatron-LM 2019-2024 and Megatron-DeepSpeed, whose fp32 runs are the only fp32 rows here);
#: Megatron-Core's later in-place ``-=`` keeps 4 in fp32 (16-bit: 6 either way), not modelled.
#: ``torch_eager``: in backward, ``log_softmax``'s saved fp32 output (4),
#: ``nll_loss_backward``'s zero-filled fp32 gradient (4) and ``cunn_SoftMaxBackward``'s fp32 input
#: gradient (4) are alive at once (the 16-bit logits are gone: torchtitan's train step ``del
#: pred``s them before ``backward``, and ``.float()`` saves nothing): 12; forward reaches 10
#: (the 16-bit logits, the fp32 copy, the fp32 output).
LOSS_PEAK_BYTES_PER_LOGIT = {"torch_eager": 12.0}
#: per implementation code: its fixed peak bytes per logit, or NaN where the default applies
_PEAK_TABLE = np.array([LOSS_PEAK_BYTES_PER_LOGIT.get(n, np.nan) for n in CROSS_ENTROPY_IMPLS])
#: implementations whose peak is a whole number of copies of the logits in their own dtype, no
#: fp32 softmax beside them: ``flash_attn_xentropy`` saves the logits and the per-row log-sum-exp
#: (``ctx.save_for_backward(logits, lse, labels)``) and its backward writes the gradient into a
#: new tensor of the logits' shape and dtype (flash-attn flash_attn/ops/triton/cross_entropy.py:
#: ``dlogits = logits if ctx.inplace_backward else torch.empty_like(logits)``; llm-foundry builds
#: it without ``inplace_backward``: mosaicml/llm-foundry llmfoundry/models/mpt/modeling_mpt.py
#: ``FusedCrossEntropyLoss(ignore_index=-100)``): the logits and their gradient, 2 x act_bytes
LOSS_PEAK_LOGIT_COPIES = {"flash_attn_xentropy": 2.0}
_COPIES_TABLE = np.array([LOSS_PEAK_LOGIT_COPIES.get(n, np.nan) for n in CROSS_ENTROPY_IMPLS])
#: bytes of the fp32 softmax copy per logit kept next to the logits in the training dtype
SOFTMAX_COPY_BYTES = LOGIT_BYTES - 2.0


#: the tensor-parallel collectives of a vocabulary-parallel loss, per implementation, in forward
#: (the backward is local): bytes per token of each all-reduce it calls (0: no such call) and of
#: what each rank contributes to its one all-gather (0: none), fp32 per-token statistics, so
#: latency-bound. ``megatron_unfused``: three all-reduces, the max logit, the target logit and the
#: sum of exponentials, 4 bytes each (NVIDIA/Megatron-LM@d98e8a64
#: megatron/core/tensor_parallel/cross_entropy.py ``_VocabParallelCrossEntropy.forward`` lines
#: 130, 146, 150; the same three in megatron/mpu/cross_entropy.py of Megatron-LM 2020-2022).
#: ``megatron_fused``: the max, then the target logit and the sum concatenated into one
#: (megatron/core/fusions/fused_cross_entropy.py lines 94, 112: ``torch.cat((predicted_logits,
#: sum_exp_logits))``): 4 and 8 bytes. ``te_triton``: one all-gather of each rank's (max, sum,
#: target logit) triple, 12 bytes (TransformerEngine@v2.12 pytorch/triton/cross_entropy.py,
#: ``all_gather_into_tensor(m_d_X_y_gathered, m_d_X_y)``). ``torch_eager`` under TP is
#: torch's loss parallel (torch/distributed/tensor/parallel/loss.py: all-reduces of the max and
#: the sum of exponentials in ``_log_softmax``, of the picked logit in ``_nll_loss_forward``):
#: three of 4 bytes. ``flash_attn_xentropy`` with a process group: an all-gather of each rank's
#: log-sum-exp and an all-reduce of the losses (flash_attn/losses/cross_entropy.py), 4 and 4.
LOSS_TP_COLLECTIVES = {
    "megatron_unfused": ((4.0, 4.0, 4.0), 0.0),
    "megatron_fused": ((4.0, 8.0, 0.0), 0.0),
    "te_triton": ((0.0, 0.0, 0.0), 12.0),
    "torch_eager": ((4.0, 4.0, 4.0), 0.0),
    "flash_attn_xentropy": ((4.0, 0.0, 0.0), 4.0),
}
assert set(LOSS_TP_COLLECTIVES) == set(CROSS_ENTROPY_IMPLS)
_TP_TABLE = np.array([list(LOSS_TP_COLLECTIVES[n][0]) + [LOSS_TP_COLLECTIVES[n][1]] for n in CROSS_ENTROPY_IMPLS])


def _codes(impl) -> np.ndarray:
    """``impl`` as ``CROSS_ENTROPY_CODES``: one name or code, or an array of codes."""
    return np.asarray(CROSS_ENTROPY_CODES[impl]) if isinstance(impl, str) else np.asarray(impl, dtype=np.int64)


def loss_peak_bytes_per_logit(impl, act_bytes=2.0):
    """Bytes per logit the loss holds at its peak (``LOSS_PEAK_BYTES_PER_LOGIT``; copies of the
    logits, ``LOSS_PEAK_LOGIT_COPIES`` x ``act_bytes``; else the logits'
    ``act_bytes`` (the training dtype's activation bytes, ``compute.activation_bytes``) + an fp32
    softmax copy: ``memory.LOGIT_BYTES`` = 6 in 16-bit training) of ``impl``: a name or code, or
    an array of codes; ``act_bytes`` a number or an array broadcasting with them."""
    codes = _codes(impl)
    fixed, copies = _PEAK_TABLE[codes], _COPIES_TABLE[codes]
    act = np.asarray(act_bytes, dtype=float)
    return np.where(~np.isnan(fixed), fixed, np.where(np.isnan(copies), act + SOFTMAX_COPY_BYTES, copies * act))


#: bytes per logit a loss keeps for its backward from its forward until that backward runs (less
#: than its peak, ``loss_peak_bytes_per_logit``: the forward's temporaries are gone), where it
#: is not the logits' own ``act_bytes``. ``megatron_unfused`` / ``megatron_fused``: the fp32
#: softmax, ``ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)``
#: (NVIDIA/Megatron-LM@d98e8a64 megatron/core/tensor_parallel/cross_entropy.py line 181,
#: fusions/fused_cross_entropy.py line 119; ``calculate_logits_max`` casts to ``.float()``): 4.
#: ``torch_eager``: ``log_softmax`` saves its fp32 result and ``nll_loss`` saves that same tensor
#: as its ``self`` (PyTorch tools/autograd/derivatives.yaml ``_log_softmax``: ``result``,
#: ``nll_loss_forward``: ``self``), one tensor: 4. ``te_triton`` saves its input, over which
#: ``cross_entropy_kernel`` wrote the gradient (``ctx.save_for_backward(_input.detach())``,
#: TransformerEngine@v2.12 pytorch/triton/cross_entropy.py) and ``flash_attn_xentropy`` the
#: logits (``ctx.save_for_backward(logits, lse, labels)``, flash-attn
#: flash_attn/ops/triton/cross_entropy.py): the logits' dtype, ``act_bytes``.
LOSS_SAVED_BYTES_PER_LOGIT = {"megatron_unfused": 4.0, "megatron_fused": 4.0, "torch_eager": 4.0}
_SAVED_TABLE = np.array([LOSS_SAVED_BYTES_PER_LOGIT.get(n, np.nan) for n in CROSS_ENTROPY_IMPLS])


def loss_saved_bytes_per_logit(impl, act_bytes=2.0):
    """Bytes per logit ``impl`` (a name or code, or an array of codes) keeps from its forward to
    its backward (``LOSS_SAVED_BYTES_PER_LOGIT``, else the logits' ``act_bytes``)."""
    fixed = _SAVED_TABLE[_codes(impl)]
    return np.where(np.isnan(fixed), np.asarray(act_bytes, dtype=float), fixed)


def losses_held(gpipe, microbatches):
    """Losses the head's stage holds between their forward and backward at once, per row:
    GPipe runs all ``microbatches`` forwards before any backward (Huang et al. 2019), every
    other schedule runs the head's backward of a micro-batch before its next forward there
    (1F1B's last stage, interleaved's last chunk, ZB-H1/H2, ZB-V, DualPipe(V): their generated
    orders, tests/test_memory_rows.py), so holds 1. The step model (``memory_rows``) and the
    pooled composer (``heterogeneous.compose``) both count by it."""
    return np.where(np.asarray(gpipe, dtype=bool), np.maximum(np.asarray(microbatches, dtype=float), 1.0), 1.0)


def loss_freed_bytes(logits_per_micro_batch, impl, act_bytes, dualpipe):
    """Bytes of the head stage's loss (one micro-batch's logits at the loss's peak,
    ``loss_peak_bytes_per_logit`` x ``logits_per_micro_batch``) freed before any layer of that
    stage recomputes, so never in memory with its recompute buffer (the stage's peak holds the
    larger of the two): 0 under DualPipe(V) (``dualpipe``), whose head rank runs the other
    direction's backward while a loss is open. The step model (``memory_rows.loss_freed_bytes``)
    and the pooled composer (``heterogeneous.compose``) both count by it."""
    freed = np.asarray(logits_per_micro_batch, dtype=float) * loss_peak_bytes_per_logit(impl, act_bytes)
    return np.where(np.asarray(dualpipe, dtype=bool), 0.0, freed)


def held_loss_bytes_per_logit(impl, act_bytes=2.0, held=1.0, chunked=False):
    """Bytes per logit (of one micro-batch) the head stage holds at its loss's peak when ``held``
    micro-batches' losses have run their forward and not yet their backward (GPipe's last stage:
    all its m; 1F1B, interleaved, zero-bubble and DualPipe schedules: 1, the head's B follows its
    F before the next F of that chunk): one loss at its peak and the others' saved tensors,
    peak + (held - 1) x saved. A ``chunked`` loss (``ParallelConfig.loss_chunk_tokens``: fused
    linear cross-entropy) keeps nothing vocabulary-sized between its forward and backward (Liger
    ``LigerFusedLinearCrossEntropyFunction`` computes the gradients in its forward and saves the
    hidden-sized input gradient, not counted here), so only the one peak counts."""
    extra = np.where(np.asarray(chunked, dtype=bool), 0.0,
                     (np.asarray(held, dtype=float) - 1.0) * loss_saved_bytes_per_logit(impl, act_bytes))
    return loss_peak_bytes_per_logit(impl, act_bytes) + extra


def loss_traffic(impl):
    """(bytes per logit forward, backward, kernels forward, backward) of ``impl``: one
    implementation name or code, or an array of codes (one per configuration row)."""
    row = _TABLE[_codes(impl)]
    return row[..., 0], row[..., 1], row[..., 2], row[..., 3]


def loss_tp_collectives(impl):
    """(all-reduce bytes per token, shape (..., 3), one column per call, 0 where none; all-gather
    bytes per token each rank contributes, 0 where none) of ``impl``'s forward over the TP group
    (``LOSS_TP_COLLECTIVES``): one implementation name or code, or an array of codes."""
    row = _TP_TABLE[_codes(impl)]
    return row[..., :3], row[..., 3]
