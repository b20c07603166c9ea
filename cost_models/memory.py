"""Memory per GPU: model states under ZeRO, activations under recomputation, allocator allowance.

Activations follow Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models" (MLSys 2023), section 4: per layer and micro-batch s*b*h*(34 + 5*a*s/h) bytes in 16-bit
training; with tensor parallelism t the 24*s*b*h part and the 5*a*s^2*b score part divide by t,
the remaining 10*s*b*h (norm inputs, dropout masks, GEMM inputs before the TP split) divides by
t only with sequence parallelism; selective recomputation drops the score part; full
recomputation keeps only the 2*s*b*h layer input. The formula is written per term so that GQA,
gated MLPs and fused (flash) attention, which stores no score matrix, fall out of it.

Model states: mixed-precision Adam keeps 16-bit weights (2 bytes), fp32 main gradients
(4 bytes, Megatron's gradient buffers) and fp32 master weights, momentum and variance
(12 bytes): 18 bytes per parameter, the count behind Korthikanti's Figure 1.
ZeRO (Rajbhandari et al. 2020) shards optimizer states (stage 1), then gradients (2), then
weights (3) over the data-parallel group.
"""
from __future__ import annotations

import numpy as np

from model_specs.model_spec import ModelSpec

WEIGHT_BYTES = 2.0
GRAD_BYTES = 4.0
OPTIMIZER_BYTES = 12.0
#: low-precision training keeps an extra 8-bit copy of the weights for the GEMMs.
LOW_PRECISION_WEIGHT_COPY_BYTES = 1.0
#: the caching allocator's fragmentation, as a fraction of the tensors' bytes.
ALLOCATOR_FRAGMENTATION = 0.05
#: CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers per GPU, bytes.
RUNTIME_RESERVED_BYTES = 1.5 * 2**30
#: bytes per logit kept for the loss on the last stage (16-bit logits + fp32 softmax copy).
LOGIT_BYTES = 6.0


def activation_bytes_per_layer(model: ModelSpec, micro_batch, seq_len, tp, cp, sp, recompute,
                               flash_attention=True, ffn=None, element_bytes=2.0):
    """Activation bytes one layer keeps for one micro-batch on one GPU.

    ``recompute``: 0 none, 1 selective, 2 full (arrays allowed). ``ffn`` overrides the MLP
    width (e.g. the routed tokens' expert MLPs; see ``moe_activation_bytes_per_layer``).
    ``element_bytes``: bytes of a stored activation element (2 in 16-bit training, 4 in fp32);
    dropout masks stay 1 byte and the fused kernel's log-sum-exp 4 bytes either way.
    """
    b = np.asarray(micro_batch, dtype=float)
    s_local = np.asarray(seq_len, dtype=float) / np.asarray(cp, dtype=float)
    tp = np.asarray(tp, dtype=float)
    tokens = b * s_local
    h, a, g, d = model.hidden_size, model.num_heads, model.num_kv_heads, model.head_dim
    f = model.ffn_hidden_size if ffn is None else ffn
    split = np.where(sp, tp, 1.0)
    e = float(element_bytes) / 2.0      # 16-bit element sizes below, scaled for fp32 training
    hidden_dropout = 1.0 if getattr(model, "hidden_dropout", True) else 0.0
    dropout = 1.0 if getattr(model, "attention_dropout", True) else 0.0
    # norm inputs (4), QKV input (2), MLP input (2), two 1-byte dropout masks (2)
    replicated = tokens * h * (8.0 * e + 2.0 * hidden_dropout) / split
    mlp = (6.0 if model.gated_mlp else 4.0) * f
    sharded = e * tokens * (2.0 * a * d + 4.0 * g * d + 2.0 * a * d + mlp) / tp
    # fused attention keeps an fp32 log-sum-exp per query and head; the materialised softmax
    # keeps its probabilities, and with dropout its mask and dropped copy (5 a s^2 b bytes)
    score = np.where(flash_attention, tokens * a * 4.0 / tp,
                     (2.0 * e + dropout * (2.0 * e + 1.0)) * a * s_local * np.asarray(seq_len, dtype=float) * b / tp)
    full_layer = replicated + sharded + score
    selective = replicated + sharded        # the attention core is recomputed: nothing kept
    layer_input = 2.0 * e * tokens * h / split
    rc = np.asarray(recompute)
    return np.where(rc == 2, layer_input, np.where(rc == 1, selective, full_layer))


def in_flight_microbatches(pp, vpp, num_microbatches, schedule_is_gpipe=False):
    """Micro-batches whose activations the first pipeline stage holds at its peak.

    1F1B holds min(m, p); interleaved 1F1B holds p * (1 + (p-1)/(p*v)) layer-chunks' worth
    (Korthikanti et al. 2022, eq. 5 and the text after it); GPipe holds all m.
    """
    pp = np.asarray(pp, dtype=float)
    vpp = np.asarray(vpp, dtype=float)
    m = np.asarray(num_microbatches, dtype=float)
    one_f_one_b = np.minimum(m, pp) * np.where(vpp > 1, 1.0 + (pp - 1.0) / (pp * vpp), 1.0)
    return np.where(schedule_is_gpipe, m, one_f_one_b)


def model_state_bytes(params_local, zero_stage, dp_shard, low_precision=False, full_precision=False):
    """(weights, gradients, optimizer) bytes on one GPU for ``params_local`` parameters.

    ``full_precision`` (fp32 training): 4-byte weights and gradients and 8 bytes of Adam
    moments, no separate master copy (16 bytes per parameter).

    ``params_local`` are the parameters this GPU owns before ZeRO (already split by TP/PP/EP);
    ``dp_shard`` is the size of the group ZeRO shards over.
    """
    p = np.asarray(params_local, dtype=float)
    z = np.asarray(zero_stage)
    n = np.asarray(dp_shard, dtype=float)
    weight_bytes = WEIGHT_BYTES + (LOW_PRECISION_WEIGHT_COPY_BYTES if low_precision else 0.0)
    optimizer_bytes = OPTIMIZER_BYTES
    if full_precision:
        weight_bytes, optimizer_bytes = 4.0, 8.0
    weights = p * weight_bytes / np.where(z >= 3, n, 1.0)
    grads = p * GRAD_BYTES / np.where(z >= 2, n, 1.0)
    optimizer = p * optimizer_bytes / np.where(z >= 1, n, 1.0)
    return weights, grads, optimizer


def allocator_allowance_bytes(tensor_bytes):
    """Fragmentation plus runtime reservations on top of the live tensors, bytes."""
    return np.asarray(tensor_bytes, dtype=float) * ALLOCATOR_FRAGMENTATION + RUNTIME_RESERVED_BYTES
