"""Per-layer compute times and FLOPs on one GPU, for one micro-batch.

``tokens`` is the number of tokens one GPU processes per micro-batch in a layer
(micro_batch * seq_len / cp). Tensor parallelism ``tp`` splits heads and FFN columns
(Megatron, Shoeybi et al. 2019); without sequence parallelism the norms and dropouts run
replicated on every TP rank, with it they are split by ``tp`` (Korthikanti et al. 2022, section 4.2).
"""
from __future__ import annotations

import math

import numpy as np

from cost_models.compute import (ComputeRates, attention_core_exponentials, attention_core_flops, attention_time_s,
                                 linear_gemm_times_s, materialised_attention_core_flops, materialised_attention_time_s,
                                 memory_bound_time_s)
from cost_models.cross_entropy import loss_traffic
from cost_models.params import kv_heads_per_tp_rank
from cost_models.low_precision import (ELEMENT_BYTES, SOURCE_BYTES, quantise_bytes_per_element,
                                       quantise_kernels, quantised_copies)
from model_specs.model_spec import ModelSpec

#: memory-bound traffic per token of the parts that sequence parallelism splits, in units of
#: ``hidden`` activation elements: two norms (read + write: 4) and two fused
#: bias-dropout-residual adds (read 2, write 1, 1-byte mask = 0.5: 7).
REPLICATED_ELEMENTWISE_UNITS = 11.0
#: backward: where the residual stream forks (it feeds a block's norm and the residual add),
#: autograd sums the gradients of the two branches before passing them on: one add kernel per
#: block reading both and writing the sum (3; PyTorch's engine, torch/csrc/autograd/
#: input_buffer.cpp ``InputBuffer::add``, accumulates a tensor's gradients from several uses;
#: no framework fuses it into the norm's backward: Transformer Engine's LayerNormLinear returns
#: the norm's input gradient alone, NVIDIA/TransformerEngine@v2.12 transformer_engine/pytorch/
#: module/layernorm_linear.py).
RESIDUAL_FORK_UNITS_BWD = 3.0
#: the same parts in backward: two norm backwards (read the output gradient and the saved
#: input, write the input gradient: 6), two dropout backwards (read the gradient and the
#: mask, write: 5; the residual branch passes the gradient on untouched) and the two sums of
#: the residual stream's gradients at the forks (``RESIDUAL_FORK_UNITS_BWD``: 6).
REPLICATED_ELEMENTWISE_UNITS_BWD = 11.0 + 2.0 * RESIDUAL_FORK_UNITS_BWD
#: backward kernels per block beyond the forward's (``ELEMENTWISE_KERNELS_FWD`` / 2): the
#: residual fork's sum.
RESIDUAL_FORK_KERNELS_BWD = 1.0
#: activation-function traffic per token in units of ``ffn`` elements, forward / backward:
#: plain (GeLU): read x, write y / read dy and x, write dx; gated (SwiGLU): read gate and up,
#: write y / read dy, gate and up, write both gradients.
ACTIVATION_UNITS = {False: (2.0, 3.0), True: (3.0, 5.0)}
#: the same as separate eager PyTorch ops (``unfused_block_ops``): torchtitan's gated MLP
#: ``F.silu(self.w1(x)) * self.w3(x)`` (pytorch/torchtitan@v0.2.0 torchtitan/models/llama3/model/
#: model.py FeedForward.forward): forward SiLU reads and writes (2), the product reads both and
#: writes (3): 5 units, 2 kernels; backward the product's two gradients each read the output
#: gradient and the other factor and write (6), SiLU's backward reads its gradient and input and
#: writes (3): 9 units, 3 kernels (a fused SwiGLU: 3 and 5 units, one kernel each way)
UNFUSED_GATED_ACTIVATION_UNITS = (5.0, 9.0)
UNFUSED_GATED_ACTIVATION_EXTRA_KERNELS = (1.0, 2.0)
#: HBM bytes per rotated channel of a fused RoPE kernel: it reads the 16-bit channel and writes it
#: rotated, 2 + 2 (``rotary_bytes``)
FUSED_ROPE_BYTES_PER_CHANNEL = 4.0
#: HBM bytes per rotated channel of RoPE as torchtitan runs it eagerly (``apply_rotary_emb``,
#: same file): ``.float()`` reads 2 and writes 4, the complex product reads 4 and writes 4 a
#: channel, ``.type_as`` reads 4 and writes 2: 20, three kernels per rotated tensor; backward the
#: same three in reverse (cast up, conjugate product, cast down): 20.
UNFUSED_ROPE_BYTES_PER_CHANNEL = 20.0
UNFUSED_ROPE_KERNELS_PER_TENSOR = 3.0
#: HBM bytes per rotated channel of Megatron-Core's eager RoPE (``_rotate_half`` and
#: ``_apply_rotary_pos_emb_bshd``, NVIDIA/Megatron-LM@core_v0.17.0 megatron/core/models/common/
#: embeddings/rope_utils.py lines 73-126), forward / backward, 16-bit. Forward, in elements per
#: channel: ``t * cos_`` reads and writes (2), ``-x2`` reads and writes the half (1), ``torch.cat
#: ((-x2, x1))`` (2), ``* sin_`` (2), the sum reads two and writes one (3), ``torch.cat((t,
#: t_pass))`` copies (2): 12 elements, 24 bytes, 6 kernels. Backward: the gradient times ``sin_``
#: (2), the negated half (1), ``torch.chunk``'s gradient concatenated (2), times ``cos_`` (2), the
#: two paths' gradients summed (3): 10 elements, 20 bytes, 5 kernels (the concatenations'
#: gradients are views). The fused kernel's 4 bytes and 1 kernel a tensor each way are already
#: in ``rotary_bytes`` and ``ELEMENTWISE_KERNELS_FWD``.
MEGATRON_EAGER_ROPE_BYTES_PER_CHANNEL = (24.0, 20.0)
#: kernels per rotated tensor (query, key) of that eager RoPE, forward / backward; forward adds
#: ``cos_`` and ``sin_`` (``torch.cos`` / ``torch.sin``, ``* mscale``, ``.to``: 6 kernels a call,
#: rope_utils.py lines 122-123), whose bytes (a seq x rot_dim fp32 table, 1 / (batch x heads) of
#: the passes above) are left out
MEGATRON_EAGER_ROPE_KERNELS_PER_TENSOR = (12.0, 5.0)


#: the parallel block's forward adds (``ModelSpec.parallel_attention_mlp``), in ``hidden``
#: elements per token: EleutherAI/gpt-neox megatron/model/transformer.py
#: ``ParallelTransformerLayer.forward`` (``gpt_j_residual``) runs the attention branch's
#: bias-dropout alone (read 1, write 1, mask 0.5: 2.5; its partial sum cannot take the replicated
#: residual before the reduction), the MLP branch's bias-dropout-add onto it (3.5) and, after
#: the one reduction, ``residual + self.reduce(output)`` (read 2, write 1: 3): 9 units in three
#: kernels, where the sequential block's two bias-dropout-adds are 7 in two.
PARALLEL_BLOCK_ADD_UNITS = (9.0, 3.0)
SEQUENTIAL_BLOCK_ADD_UNITS = (7.0, 2.0)


def parallel_block_elementwise(model: ModelSpec):
    """(forward units, backward units, forward kernels, backward kernels) a parallel block
    (``ModelSpec.parallel_attention_mlp``) adds per layer to the sequential block's memory-bound
    passes (``REPLICATED_ELEMENTWISE_UNITS`` and its backward), in ``hidden`` elements per token;
    all zero for a sequential block.

    Forward: the adds (``PARALLEL_BLOCK_ADD_UNITS``: +2 units, +1 kernel) and, with one shared
    norm (``parallel_shared_norm``), one norm fewer (read + write: -2, -1 kernel). Backward: a
    shared norm's one backward fewer (-3, -1 kernel). The dropout backwards stay two, and so do
    the sums of the residual stream's gradients (``RESIDUAL_FORK_UNITS_BWD``): a shared norm's
    output feeds two GEMMs and x feeds the norm and the residual (one sum each); two norms of the
    same x make x feed three uses (two sums, PyTorch's ``InputBuffer::add`` pairwise). The
    residual add and the reduction pass their gradient on untouched."""
    if not model.parallel_attention_mlp:
        return 0.0, 0.0, 0.0, 0.0
    fwd = PARALLEL_BLOCK_ADD_UNITS[0] - SEQUENTIAL_BLOCK_ADD_UNITS[0]
    kernels = PARALLEL_BLOCK_ADD_UNITS[1] - SEQUENTIAL_BLOCK_ADD_UNITS[1]
    if model.parallel_shared_norm:
        return fwd - 2.0, -3.0, kernels - 1.0, -1.0
    return fwd, 0.0, kernels, 0.0


def norms_per_layer(model: ModelSpec) -> float:
    """Norms one layer runs: two, one for a parallel block with a shared norm."""
    return 1.0 if model.parallel_shared_norm else 2.0


def activation_units(model: ModelSpec, unfused=False):
    """(forward units, backward units, forward kernels beyond one, backward kernels beyond one)
    of the MLP activation in units of ``ffn`` elements: ``ACTIVATION_UNITS``, or for a gated
    one run as eager ops (``unfused``, per row allowed) ``UNFUSED_GATED_ACTIVATION_UNITS`` and
    its extra kernels."""
    fwd, bwd = ACTIVATION_UNITS[bool(model.gated_mlp)]
    eager = np.asarray(unfused, dtype=bool) & bool(model.gated_mlp)
    return (np.where(eager, UNFUSED_GATED_ACTIVATION_UNITS[0], fwd), np.where(eager, UNFUSED_GATED_ACTIVATION_UNITS[1], bwd),
            np.where(eager, UNFUSED_GATED_ACTIVATION_EXTRA_KERNELS[0], 0.0),
            np.where(eager, UNFUSED_GATED_ACTIVATION_EXTRA_KERNELS[1], 0.0))
#: kernels per layer outside the GEMMs and attention (norms, activation, adds, rotary, casts).
ELEMENTWISE_KERNELS_FWD = 8.0
#: HBM bytes per query row, head and channel of the memory-bound kernels around a fused
#: attention backward (16-bit O, dO, dQ; fp32 accumulator), in bytes per v channel and per
#: q/k channel. FlashAttention-2's backward first computes D = rowsum(dO * O) (Dao 2023,
#: arXiv 2307.08691, Algorithm 2) in its own kernel, which also zeroes the fp32 dQ accumulator
#: the main kernel adds into, and a last kernel converts that accumulator to 16-bit dQ
#: (Dao-AILab/flash-attention@v2.4.2 csrc/flash_attn/src/flash_bwd_launch_template.h
#: ``compute_dot_do_o<Clear_dQaccum>``, ``convert_dQ``; flash_api.cpp: ``dq_accum`` in
#: float32). FlashAttention-3 keeps the same two kernels (hopper/flash_bwd_launch_template.h:
#: ``flash_bwd_preprocess``, ``flash_bwd_postprocess``). Per v channel: read dO and O (2 + 2);
#: per q/k channel: zero the accumulator (4), read it (4), write dQ (2).
ATTENTION_BWD_BYTES_PER_V_CHANNEL = 4.0
ATTENTION_BWD_BYTES_PER_QK_CHANNEL = 10.0
#: their kernels: the pre-processing and the conversion
ATTENTION_BWD_EXTRA_KERNELS = 2.0


#: kernels of the packed-sequence copies around a variable-length attention call
#: (``unpad_copy_bytes``): forward, three gathers and the output's zero fill and scatter;
#: backward, the output gradient's gather and three zero fills and scatters.
UNPAD_KERNELS = (5.0, 7.0)


def unpad_copy_bytes(model: ModelSpec, tokens, tp):
    """(forward, backward) HBM bytes of the copies a stack makes to hand the attention core packed
    (unpadded) rows, per attention block, ``tokens`` rows, 16-bit.

    llm-foundry's flash path (mosaicml/llm-foundry@8c8dd48 llmfoundry/models/layers/attention.py
    ``flash_attn_fn``) gathers the query, key and value rows into new tensors with flash-attn's
    ``bert_padding.index_first_axis`` and writes the output back with ``pad_input``, whatever the
    padding (Dao-AILab/flash-attention@v2.4.2 flash_attn/bert_padding.py). Forward: each gather
    reads and writes its channels (4 bytes per q/k/v channel); the output is zero-filled, then
    scattered into (read and write: 6 per output channel). Backward: the output gradient is
    gathered (4 per output channel); each input's gradient is zero-filled and scattered into (6
    per q/k/v channel).
    """
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    qk, v = _attention_dims(model)
    kv_heads = model.num_kv_heads if model.mla is None else model.num_heads
    inputs = model.num_heads * qk / tp + kv_heads_per_tp_rank(kv_heads, tp) * (qk + v)
    output = model.num_heads * v / tp
    return tokens * (4.0 * inputs + 6.0 * output), tokens * (6.0 * inputs + 4.0 * output)


def rotary_bytes(model: ModelSpec, tokens, tp):
    """HBM bytes of rotary position embedding in one attention block's forward (and again in
    its backward, which rotates the query and key gradients back), for ``tokens`` rows.

    The rotation reads the query and key heads the GPU holds and writes them rotated, 16-bit:
    2 x 2 bytes per channel (Megatron-Core ``apply_rotary_pos_emb`` on the query and on the key,
    fused into one kernel each with ``apply_rope_fusion``: NVIDIA/Megatron-LM@core_v0.15.0
    megatron/core/transformer/attention.py, megatron/core/models/common/embeddings/
    rope_utils.py; Transformer Engine's ``FusedRoPEFunc`` writes the whole head, rotated and
    passed-through channels). Multi-latent attention rotates only its decoupled RoPE channels
    (``qk_rope_head_dim`` per query head and one shared key head; DeepSeek-V2 report, arXiv
    2405.04434, section 2.1.3). Zero without RoPE (learned, ALiBi or no position encoding)."""
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    if model.position_embedding != "rope":
        return 0.0 * tokens * tp
    if model.mla is not None:
        channels = model.num_heads * model.mla.qk_rope_head_dim / tp + model.mla.qk_rope_head_dim
    else:
        channels = (model.num_heads / tp + kv_heads_per_tp_rank(model.num_kv_heads, tp)) * model.head_dim
    return tokens * channels * FUSED_ROPE_BYTES_PER_CHANNEL


def yarn_concentration_factor(model: ModelSpec) -> float:
    """YaRN's attention (concentration) factor, the ``mscale`` Megatron-Core multiplies the cosine
    and sine by: 1 without YaRN or with a factor <= 1; 0.1 ln(factor) + 1 when ``rope_mscale`` or
    ``rope_mscale_all_dim`` is not stated (0 here, None in Megatron-Core: gpt-oss, factor 32:
    1.3466); otherwise (0.1 mscale ln f + 1) / (0.1 mscale_all_dim ln f + 1) (DeepSeek-V3's 1.0 /
    1.0: 1). NVIDIA/Megatron-LM@core_v0.17.0 megatron/core/models/common/embeddings/
    yarn_rotary_pos_embedding.py ``_yarn_get_mscale``, ``_yarn_get_concentration_factor``
    (lines 252-271)."""
    factor = float(model.rope_scaling_factor)
    if model.rope_scaling != "yarn" or factor <= 1.0:
        return 1.0
    if not model.rope_mscale or not model.rope_mscale_all_dim:
        return 0.1 * math.log(factor) + 1.0
    return (0.1 * model.rope_mscale * math.log(factor) + 1.0) / (0.1 * model.rope_mscale_all_dim * math.log(factor) + 1.0)


def eager_yarn_rope(model: ModelSpec, yarn_rope_eager):
    """Where (per row of ``yarn_rope_eager``) the attention block runs Megatron-Core's eager RoPE:
    the stack falls back from the fused kernel when YaRN's ``yarn_concentration_factor`` is not 1
    (``TrainingBehaviour.yarn_rope_eager``) and the model rotates its heads through
    ``Attention`` (RoPE, no multi-latent attention: MLA's fused path takes a cos/sin cache already
    scaled by mscale, ``fused_apply_mla_rope_for_q/kv``, NVIDIA/Megatron-LM@core_v0.17.0
    megatron/core/transformer/multi_latent_attention.py)."""
    applies = (model.position_embedding == "rope" and model.mla is None
               and yarn_concentration_factor(model) != 1.0)
    return np.asarray(yarn_rope_eager, dtype=bool) & applies


def eager_yarn_rope_extra(model: ModelSpec, tokens, tp):
    """(forward bytes, backward bytes, forward kernels, backward kernels) that Megatron-Core's eager
    RoPE adds to one attention block for ``tokens`` rows beyond the fused kernel's
    (``MEGATRON_EAGER_ROPE_BYTES_PER_CHANNEL`` and ``_KERNELS_PER_TENSOR`` less the fused 4 bytes
    and 1 kernel): over the query heads and the key heads the GPU holds (``rotary_bytes``'s
    channels), forward 20 and backward 16 bytes a channel, 11 and 4 kernels a tensor."""
    channel_rows = rotary_bytes(model, tokens, tp) / FUSED_ROPE_BYTES_PER_CHANNEL
    fwd_b, bwd_b = MEGATRON_EAGER_ROPE_BYTES_PER_CHANNEL
    fwd_k, bwd_k = MEGATRON_EAGER_ROPE_KERNELS_PER_TENSOR
    tensors = 2.0 if model.position_embedding == "rope" else 0.0
    return (channel_rows * (fwd_b - FUSED_ROPE_BYTES_PER_CHANNEL), channel_rows * (bwd_b - FUSED_ROPE_BYTES_PER_CHANNEL),
            tensors * (fwd_k - 1.0), tensors * (bwd_k - 1.0))


def _attention_dims(model: ModelSpec):
    """(qk_dim, v_dim) per head."""
    if model.mla is not None:
        return model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim, model.mla.v_head_dim
    return model.head_dim, model.head_dim


def attention_gemm_shapes(model: ModelSpec, tp):
    """[(n, k), ...] of the attention projections per token row, TP-split (M = tokens)."""
    h, a, g, d = model.hidden_size, model.num_heads, model.num_kv_heads, model.head_dim
    tp = np.asarray(tp, dtype=float)
    if model.mla is not None:
        m = model.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        shapes = []
        if m.q_lora_rank:
            shapes += [(m.q_lora_rank + 0 * tp, h + 0 * tp), (a * qk / tp, m.q_lora_rank + 0 * tp)]
        else:
            shapes += [(a * qk / tp, h + 0 * tp)]
        shapes += [(m.kv_lora_rank + m.qk_rope_head_dim + 0 * tp, h + 0 * tp),
                   (a * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank + 0 * tp),
                   (h + 0 * tp, a * m.v_head_dim / tp)]
        return shapes
    # K and V: whole heads, replicated when tp exceeds them (params.kv_heads_per_tp_rank)
    return [(a * d / tp + 2 * kv_heads_per_tp_rank(g, tp) * d, h + 0 * tp), (h + 0 * tp, a * d / tp)]


def mlp_gemm_shapes(hidden: int, ffn, gated: bool, tp):
    """[(n, k), ...] of one MLP's GEMMs per token row, TP-split."""
    tp = np.asarray(tp, dtype=float)
    up = (2 if gated else 1) * np.asarray(ffn, dtype=float) / tp
    return [(up, hidden + 0 * tp), (hidden + 0 * tp, np.asarray(ffn, dtype=float) / tp)]


def linear_cast_bytes(tokens, shapes, dtype: str, input_fused, grad_fused, current_scaling=False, groups=1.0,
                      seq_split=1.0, input_sharded=None, grad_sharded=None, transposed_copy=True,
                      rht_cast_fusion=False):
    """HBM bytes and kernels of the quantisation of the linear layers ``shapes`` ([(n, k), ...],
    Y[tokens, n] = X[tokens, k] W[k, n]) for one micro-batch, by pass: a dict with
    ``fprop`` (inputs X), ``weights`` (W, once per optimizer step: Transformer Engine caches
    the quantised weights across micro-batches) and ``dgrad`` (output gradients dY) in bytes, and
    ``fprop_kernels`` / ``dgrad_kernels``; the weight-gradient GEMM reuses the stored
    column-wise copies (``low_precision``).

    ``input_fused[i]`` / ``grad_fused[i]``: the kernel that produces X (a norm) or dY writes the
    quantised copies itself in place of its 16-bit output (delayed scaling in Transformer
    Engine's LayerNormLinear), so only the copies' bytes beyond that 16-bit write are extra.
    Under per-tensor current scaling (``current_scaling``, per row allowed) and the block-scaled
    recipes the norm writes its 16-bit output (and the amax) and a kernel quantises it after
    (``low_precision.FUSED_QUANTISE_KERNELS``): the read of that output and the copies' writes.
    Otherwise a standalone kernel pays ``quantise_bytes_per_element`` (current scaling: its
    amax read too). ``groups``: tensors each operand is split into, each quantised by its own
    kernels (a grouped GEMM's per-expert inputs: Transformer Engine's ``split_quantize`` runs one
    quantisation per split for these recipes, NVIDIA/TransformerEngine@v2.12 and @v2.14
    pytorch/csrc/extensions/cast.cpp ``multi_tensor_quantize_impl``; one fused kernel for
    delayed scaling, counted as one; NVFP4 grouped kernels over every split, the amax's and the
    cast's, NVIDIA/TransformerEngine@71bbefb cast.cpp ``nvte_group_hadamard_transform_amax`` and
    ``nvte_group_hadamard_transform_cast_fusion``, counted as one tensor's, at the release's
    per-tensor bytes). Kernel counts are the tensor kernels
    (``low_precision.quantise_kernels``). ``seq_split``: the sequence-parallel degree (1 without
    sequence parallelism); operands flagged in ``input_sharded`` / ``grad_sharded`` are quantised
    on the GPU's sequence shard, ``tokens / seq_split`` rows, before the all-gather that gives
    the GEMM its full rows (Transformer Engine gathers the FP8 copy: a column-parallel layer's
    input, a row-parallel layer's output gradient; transformer_engine/pytorch/module/
    layernorm_linear.py@v2.12 ``gather_along_first_dim(..., quantizer=...)``).
    ``transposed_copy``: per-tensor ``fp8`` writes a transposed copy besides the row-wise one
    (Hopper); False where the GPU runs FP8 GEMMs in any layout (``ComputeRates.fp8_transposed_copy``
    from ``GPUSpec.fp8_gemm_any_layout``, Blackwell): one copy, so a standalone current-scaling
    cast is 2 read + 2 amax read + 1 write = 5 B/element (not 6), after a norm 2 + 1 = 3 (not 4),
    delayed scaling 3 (not 4). ``rht_cast_fusion`` (per row allowed): Transformer Engine writes an
    NVFP4 operand's two copies in one kernel (``low_precision.NVFP4_RHT_FUSED_KERNELS``: 5.125
    B/element, 2 kernels, not 7.125 and 3). NVFP4 is never quantised by the norm: its amax of the
    Hadamard transform keeps the norm unfused (``low_precision.FUSED_QUANTISE_KERNELS``), so a
    norm-fed NVFP4 input pays the standalone cost. Zero for 16/32-bit dtypes.
    """
    tokens = np.asarray(tokens, dtype=float)
    current = np.asarray(current_scaling, dtype=bool)
    copies = quantised_copies(dtype, transposed_copy)
    zero = 0.0 * tokens * current
    out = {"fprop": zero, "weights": zero, "dgrad": zero, "fprop_kernels": zero, "dgrad_kernels": zero}
    if not copies:
        return out
    write = copies * ELEMENT_BYTES.get(dtype, 0.0)
    separate = dtype != "fp8" or current          # the norm writes 16-bit output; a kernel quantises it
    fused_extra = np.where(separate, SOURCE_BYTES + write, max(0.0, write - SOURCE_BYTES))
    t = transposed_copy
    # the switch that picks between two costs: current scaling for fp8, the fused kernel for nvfp4
    # (a stack's FP8 recipe is set on its nvfp4 rows too, where it means nothing)
    rht = np.asarray(rht_cast_fusion, dtype=bool)
    switch = current if dtype == "fp8" else rht & (dtype == "nvfp4")
    on = dict(scaling="current") if dtype == "fp8" else dict(rht_cast_fusion=True)
    per_act = np.where(switch, quantise_bytes_per_element(dtype, "activation", transposed_copy=t, **on),
                       quantise_bytes_per_element(dtype, "activation", transposed_copy=t))
    per_grad = np.where(switch, quantise_bytes_per_element(dtype, "grad", transposed_copy=t, **on),
                        quantise_bytes_per_element(dtype, "grad", transposed_copy=t))
    per_weight = quantise_bytes_per_element(dtype, "weight", transposed_copy=t)
    alone = quantise_kernels(dtype, current, rht_cast_fusion=rht)
    fused = quantise_kernels(dtype, current, fused=True, rht_cast_fusion=rht)
    if dtype == "nvfp4":                          # the norm stays unfused: the standalone cost
        fused_extra = per_act
    # delayed scaling's per-expert quantisation is one multi-tensor kernel, NVFP4's grouped kernels
    split = np.where(((dtype == "fp8") & ~current) | (dtype == "nvfp4"), 1.0, np.asarray(groups, dtype=float))
    input_sharded = input_sharded or [False] * len(shapes)
    grad_sharded = grad_sharded or [False] * len(shapes)
    local = tokens / np.asarray(seq_split, dtype=float)
    for (n, k), x_fused, g_fused, x_local, g_local in zip(shapes, input_fused, grad_fused, input_sharded,
                                                         grad_sharded):
        out["fprop"] = out["fprop"] + (local if x_local else tokens) * k * (fused_extra if x_fused else per_act)
        out["weights"] = out["weights"] + np.asarray(k * n, dtype=float) * per_weight
        out["dgrad"] = out["dgrad"] + (local if g_local else tokens) * n * (fused_extra if g_fused else per_grad)
        out["fprop_kernels"] = out["fprop_kernels"] + split * (fused if x_fused else alone)
        out["dgrad_kernels"] = out["dgrad_kernels"] + split * (fused if g_fused else alone)
    return out


def cast_times(cast_bytes: dict, rates: ComputeRates) -> dict:
    """Seconds of the quantisation kernels of ``linear_cast_bytes``: bytes at the memory rate plus
    each kernel's fixed time (the weights' casts run once per step, their kernels not counted)."""
    return {"cast_fwd_s": memory_bound_time_s(cast_bytes["fprop"], rates, cast_bytes["fprop_kernels"]),
            "weight_cast_s": cast_bytes["weights"] / rates.hbm_bytes_per_s,
            "cast_bwd_s": memory_bound_time_s(cast_bytes["dgrad"], rates, cast_bytes["dgrad_kernels"])}


def block_cast_bytes(tokens, shapes, dtype: str, current_scaling, tp, sp, transposed_copy=True,
                     rht_cast_fusion=False) -> dict:
    """``linear_cast_bytes`` of a block of column-parallel projections that read the block's norm,
    then one row-parallel projection (attention, dense MLP, Mamba mixer, shared experts): the
    norm produces the first projections' inputs (fused where the recipe allows), every other
    operand is quantised alone; under sequence parallelism the column-parallel inputs and the
    row-parallel output gradient are quantised on the sequence shard before their all-gather."""
    n_in = len(shapes) - 1
    return linear_cast_bytes(tokens, shapes, dtype, [True] * n_in + [False], [False] * len(shapes), current_scaling,
                             seq_split=np.where(sp, tp, 1.0), input_sharded=[True] * n_in + [False],
                             grad_sharded=[False] * n_in + [True], transposed_copy=transposed_copy,
                             rht_cast_fusion=rht_cast_fusion)


def _linear_times(tokens, shapes, rates: ComputeRates) -> dict:
    """Forward, data-gradient and weight-gradient seconds and forward FLOPs of the linear layers
    ``shapes`` ([(n, k), ...]) for ``tokens`` rows.

    Also the same seconds of the block's tensor-parallel ends apart, the windows its TP
    collectives can hide under (``simulator.layer_times``): ``tp_col_gemm_{fwd,dgrad,wgrad}_s``,
    the column-parallel entry (every linear but the last: QKV, MLA's projections, fc1 / gate-up,
    Mamba's in_proj), and ``tp_row_gemm_{fwd,dgrad,wgrad}_s``, the row-parallel exit (the last
    linear: the attention output projection, fc2, out_proj)."""
    out = {"gemm_fwd_s": 0.0, "gemm_dgrad_s": 0.0, "gemm_wgrad_s": 0.0, "gemm_flops_fwd": 0.0,
           **{f"tp_{end}_gemm_{p}_s": 0.0 for end in ("col", "row") for p in ("fwd", "dgrad", "wgrad")}}
    for i, (n, k) in enumerate(shapes):
        fwd, dgrad, wgrad = linear_gemm_times_s(tokens, n, k, rates)
        end = "row" if i == len(shapes) - 1 else "col"
        for p, t in (("fwd", fwd), ("dgrad", dgrad), ("wgrad", wgrad)):
            out[f"gemm_{p}_s"] = out[f"gemm_{p}_s"] + t
            out[f"tp_{end}_gemm_{p}_s"] = out[f"tp_{end}_gemm_{p}_s"] + t
        out["gemm_flops_fwd"] = out["gemm_flops_fwd"] + 2.0 * tokens * n * k
    return out


def fused_softmax_kernel_available(tokens, seq_len, heads_per_gpu):
    """Whether Megatron's fused scale-mask-softmax kernel takes a causal score tensor, per row.

    ``FusedScaleMaskSoftmax.is_kernel_available`` (NVIDIA/Megatron-LM megatron/model/fused_softmax.py,
    2021-2023, and its Megatron-DeepSpeed copy) runs the fused CUDA kernel only when the key
    length is in (16, 4096], query and key lengths are multiples of 4 and the (sequence, head)
    pairs per GPU, micro_batch x heads / tp, are a multiple of 4 (the kernel's batches per
    block: 4 warps of one row each for keys over 128); otherwise it falls back to the separate
    PyTorch scale, mask and softmax ops. One sequence of a 16-head model at tp 8 has 2 pairs:
    unfused.
    """
    s = np.asarray(seq_len, dtype=float)
    pairs = np.rint(np.asarray(tokens, dtype=float) / s * np.asarray(heads_per_gpu, dtype=float))
    return (s > 16) & (s <= 4096) & (np.mod(s, 4) == 0) & (np.mod(pairs, 4) == 0)


def attention_block_costs(model: ModelSpec, rates: ComputeRates, tokens, seq_len, tp, sp, softmax_exposed=None,
                          flash_attention=True, softmax_fusion=True, mma_share=1.0, current_scaling=False,
                          unpad=False, softmax_scale_pass=True, unfused_ops=False, yarn_rope_eager=False,
                          rht_cast_fusion=False):
    """Forward/backward seconds and FLOPs of one attention block (no communication).

    ``softmax_exposed``: share of the attention core's softmax exponentials added to its
    matmuls (``compute.attention_time_s``), per row; None = ``rates.softmax_exposed``.
    ``mma_share``: share of the attention matrix rate the kernel's instructions reach, per row
    (``compute.attention_time_s``).
    ``flash_attention`` False (per row allowed): the unfused core of 2020-2022 Megatron
    (``compute.materialised_attention_time_s``), its scale, mask and softmax one fused kernel
    unless ``softmax_fusion`` is False (three passes, 2019-2020) or the shape rules the kernel out
    (``fused_softmax_kernel_available``: PyTorch's ops in fp32 instead).
    ``softmax_scale_pass`` (per row allowed): fp32 scores are scaled by their own op before the
    mask; False: the mask runs in place on the score GEMM's output (``compute.
    materialised_attention_time_s``; no effect on 16-bit scores or a fused core).
    ``unpad`` (per row allowed): the stack copies the query, key and value rows into packed
    tensors for the core and the output back (``unpad_copy_bytes``; element-wise time).
    ``unfused_ops`` (per row allowed): RoPE, the key/value repetition and the output's layout
    copy run as eager ops (``unfused_attention_bytes``, each way).
    ``yarn_rope_eager`` (per row allowed): the stack runs RoPE eagerly for a YaRN model whose
    concentration factor is not 1 (``eager_yarn_rope``, ``eager_yarn_rope_extra``).
    ``rht_cast_fusion`` (per row allowed): NVFP4's two copies in one kernel (``linear_cast_bytes``).

    Returns a dict with ``gemm_fwd_s``, ``gemm_dgrad_s``, ``gemm_wgrad_s``, ``core_fwd_s``,
    ``core_bwd_s``, ``elem_fwd_s``, ``elem_bwd_s``, ``gemm_flops_fwd``, ``core_flops_fwd`` (causal:
    the model FLOPs), ``core_masked_flops_fwd`` (what the kernel computes beyond them: the masked
    scores of a materialised core, ``materialised_attention_core_flops`` less ``core_flops_fwd``;
    0 for a fused core, which skips the masked tiles) and the quantisation times ``cast_fwd_s``,
    ``cast_bwd_s``, ``weight_cast_s`` (``linear_cast_bytes``: every projection but the output one
    reads a norm's output; the output projection's input and all output gradients come from the
    attention core or the residual and are quantised by their own kernel).
    """
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    shapes = attention_gemm_shapes(model, tp)
    casts = cast_times(block_cast_bytes(tokens, shapes, rates.dtype, current_scaling, tp, sp,
                                        rates.fp8_transposed_copy, rht_cast_fusion), rates)
    gemms = _linear_times(tokens, shapes, rates)
    qk, v = _attention_dims(model)
    core_flops = attention_core_flops(tokens, seq_len, model.num_heads / tp, qk, v,
                                      model.sliding_window, model.sliding_window_layer_fraction)
    core_fwd, core_bwd = attention_time_s(core_flops, rates, attention_core_exponentials(core_flops, qk, v),
                                          softmax_exposed, mma_share)
    heads = model.num_heads / tp
    if not np.all(flash_attention):
        mat_fwd, mat_bwd = materialised_attention_time_s(
            tokens, seq_len, heads, qk, v, rates, softmax_fusion, model.attention_dropout,
            fused_softmax_kernel_available(tokens, seq_len, heads), softmax_scale_pass)
        core_fwd = np.where(flash_attention, core_fwd, mat_fwd)
        core_bwd = np.where(flash_attention, core_bwd, mat_bwd)
    # the materialised core computes the masked scores too (the whole square); a fused kernel
    # skips the masked tiles: hardware FLOPs only, model FLOPs keep the causal count
    masked_flops = np.where(flash_attention, 0.0,
                            materialised_attention_core_flops(tokens, seq_len, heads, qk, v) - core_flops)
    split = np.where(sp, tp, 1.0)
    row = tokens * model.hidden_size * rates.act_bytes / split
    rope = rotary_bytes(model, tokens, tp)
    # a fused core's backward adds its pre- and post-processing kernels (the materialised core's
    # score passes are in ``materialised_attention_time_s``)
    flash = np.asarray(flash_attention, dtype=float)
    core_extra = flash * tokens * heads * (ATTENTION_BWD_BYTES_PER_V_CHANNEL * v + ATTENTION_BWD_BYTES_PER_QK_CHANNEL * qk)
    copies = np.asarray(unpad, dtype=float)
    copy_fwd, copy_bwd = unpad_copy_bytes(model, tokens, tp)
    eager = np.asarray(unfused_ops, dtype=float)
    eager_bytes, eager_kernels = unfused_attention_bytes(model, tokens, tp)
    yarn = eager_yarn_rope(model, yarn_rope_eager).astype(float)
    yarn_fwd, yarn_bwd, yarn_kernels_fwd, yarn_kernels_bwd = eager_yarn_rope_extra(model, tokens, tp)
    elem_fwd = memory_bound_time_s(row * REPLICATED_ELEMENTWISE_UNITS / 2 + rope + copies * copy_fwd + eager * eager_bytes
                                   + yarn * yarn_fwd,
                                   rates, ELEMENTWISE_KERNELS_FWD / 2 + copies * UNPAD_KERNELS[0] + eager * eager_kernels
                                   + yarn * yarn_kernels_fwd)
    elem_bwd = memory_bound_time_s(row * REPLICATED_ELEMENTWISE_UNITS_BWD / 2 + rope + core_extra + copies * copy_bwd
                                   + eager * eager_bytes + yarn * yarn_bwd,
                                   rates, ELEMENTWISE_KERNELS_FWD / 2 + RESIDUAL_FORK_KERNELS_BWD
                                   + flash * ATTENTION_BWD_EXTRA_KERNELS + copies * UNPAD_KERNELS[1]
                                   + eager * eager_kernels + yarn * yarn_kernels_bwd)
    # FLOPs are the per-GPU share (x tp = the block's): a projection every TP rank runs whole
    # counts once, not tp times
    flops_fwd = gemms["gemm_flops_fwd"] - mla_duplicated_flops_fwd(model, tokens) * (1.0 - 1.0 / tp)
    return {**gemms, "gemm_flops_fwd": flops_fwd, "core_fwd_s": core_fwd, "core_bwd_s": core_bwd,
            "elem_fwd_s": elem_fwd, "elem_bwd_s": elem_bwd, "core_flops_fwd": core_flops,
            "core_masked_flops_fwd": masked_flops, **casts}


def mla_duplicated_flops_fwd(model: ModelSpec, tokens):
    """Forward FLOPs of multi-latent attention's down-projections for ``tokens`` rows: the
    query's (hidden -> q_lora_rank, when the queries are compressed) and the key/value's (hidden
    -> kv_lora_rank + rope dims). Megatron-Core builds their weights unsplit on every
    tensor-parallel rank (``TELinear``, parallel_mode duplicated, in its MLA layer specs;
    Megatron-Bridge maps them as replicated), so the model's FLOPs count them once, not tp times.
    Without sequence parallelism each rank runs them on the whole sequence; with it, on its
    sequence shard (Megatron-Core's MLA forward), which ``attention_gemm_shapes`` does not
    distinguish: the step prices them whole either way. 0 without MLA."""
    tokens = np.asarray(tokens, dtype=float)
    if model.mla is None:
        return 0.0 * tokens
    m = model.mla
    return 2.0 * tokens * model.hidden_size * ((m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim)


def dense_mlp_costs(model: ModelSpec, rates: ComputeRates, tokens, tp, sp, ffn=None, current_scaling=False,
                    unfused_ops=False, rht_cast_fusion=False):
    """Seconds and FLOPs of one dense MLP block: ``gemm_fwd_s``, ``gemm_dgrad_s``,
    ``gemm_wgrad_s``, ``elem_fwd_s`` and ``elem_bwd_s`` (element-wise kernels), ``gemm_flops_fwd``
    and the quantisation times ``cast_fwd_s``, ``cast_bwd_s``, ``weight_cast_s`` (the up
    projection reads the norm's output: fused, Transformer Engine's LayerNormLinear; the down
    projection's input and both output gradients are quantised by their own kernels: Megatron-Core
    runs the MLP as TE LayerNormColumnParallelLinear, its own fused bias-activation kernel and TE
    RowParallelLinear, NVIDIA/Megatron-LM@core_v0.15.0 megatron/core/models/gpt/gpt_layer_specs.py
    and transformer/mlp.py, not TE's LayerNormMLP that would fuse the activation's casts).
    ``unfused_ops`` (per row allowed): a gated activation as eager ops
    (``UNFUSED_GATED_ACTIVATION_UNITS``). ``rht_cast_fusion``: as ``attention_block_costs``.
    """
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    ffn = model.ffn_hidden_size if ffn is None else ffn
    shapes = mlp_gemm_shapes(model.hidden_size, ffn, model.gated_mlp, tp)
    casts = cast_times(block_cast_bytes(tokens, shapes, rates.dtype, current_scaling, tp, sp,
                                        rates.fp8_transposed_copy, rht_cast_fusion), rates)
    gemms = _linear_times(tokens, shapes, rates)
    act_fwd, act_bwd, extra_fwd, extra_bwd = activation_units(model, unfused_ops)
    split = np.where(sp, tp, 1.0)
    replicated = model.hidden_size / split
    units_fwd, units_bwd = REPLICATED_ELEMENTWISE_UNITS / 2, REPLICATED_ELEMENTWISE_UNITS_BWD / 2
    kernels_fwd, kernels_bwd = ELEMENTWISE_KERNELS_FWD / 2, ELEMENTWISE_KERNELS_FWD / 2 + RESIDUAL_FORK_KERNELS_BWD
    if model.parallel_attention_mlp:
        # the layer's parallel-block differences, carried by its MLP block
        d_fwd, d_bwd, dk_fwd, dk_bwd = parallel_block_elementwise(model)
        units_fwd, units_bwd = units_fwd + d_fwd, units_bwd + d_bwd
        kernels_fwd, kernels_bwd = kernels_fwd + dk_fwd, kernels_bwd + dk_bwd
    elem_fwd = memory_bound_time_s(tokens * rates.act_bytes * (act_fwd * ffn / tp + replicated * units_fwd),
                                   rates, kernels_fwd + extra_fwd)
    elem_bwd = memory_bound_time_s(tokens * rates.act_bytes * (act_bwd * ffn / tp + replicated * units_bwd),
                                   rates, kernels_bwd + extra_bwd)
    return {**gemms, "elem_fwd_s": elem_fwd, "elem_bwd_s": elem_bwd, **casts}


def lm_head_costs(model: ModelSpec, rates: ComputeRates, tokens, tp, cross_entropy="megatron_unfused"):
    """Output layer + loss on the last stage: ``fwd_s``, ``dgrad_s`` (the input gradient with the
    loss backward), ``wgrad_s`` (the output layer's weight gradient), ``bwd_s`` (their sum),
    ``flops_fwd``, ``loss_fwd_s`` and ``loss_bwd_s`` (the loss alone, included in the others).

    Pass 16-bit ``rates``: low-precision recipes keep the output layer in BF16 (``low_precision``).
    ``cross_entropy``: the loss implementation (a name of ``CROSS_ENTROPY_IMPLS`` or an array of
    its codes, one per row): its bytes per logit and kernels each way (``cost_models.cross_entropy``)
    over the ``tokens x vocab / tp`` logits this GPU holds.
    """
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    vocab_local = model.vocab_size / tp
    fwd, dgrad, wgrad = linear_gemm_times_s(tokens, vocab_local, model.hidden_size, rates)
    bytes_fwd, bytes_bwd, kernels_fwd, kernels_bwd = loss_traffic(cross_entropy)
    logits = tokens * vocab_local
    loss_fwd = memory_bound_time_s(logits * bytes_fwd, rates, kernels_fwd)
    loss_bwd = memory_bound_time_s(logits * bytes_bwd, rates, kernels_bwd)
    return {"fwd_s": fwd + loss_fwd, "dgrad_s": dgrad + loss_bwd, "wgrad_s": wgrad, "bwd_s": dgrad + wgrad + loss_bwd,
            "flops_fwd": 2.0 * tokens * vocab_local * model.hidden_size,
            "loss_fwd_s": loss_fwd, "loss_bwd_s": loss_bwd}


def mtp_projection_costs(model: ModelSpec, rates: ComputeRates, tokens, tp):
    """The projection of one multi-token-prediction module: ``fwd_s``, ``dgrad_s``, ``wgrad_s``,
    ``bwd_s``, ``flops_fwd``.

    DeepSeek-V3 report (arXiv 2412.19437), section 2.2: each MTP module normalises the
    previous depth's hidden state and the next token's embedding, concatenates them and
    projects 2h -> h (a column-parallel GEMM here, split over ``tp``) before its transformer
    layer; the two RMSNorms are memory-bound passes over 2h elements per token.
    """
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    h = model.hidden_size
    fwd, dgrad, wgrad = linear_gemm_times_s(tokens, h / tp, 2 * h, rates)
    norms = memory_bound_time_s(tokens * 2 * h * 2 * rates.act_bytes, rates, 2)
    return {"fwd_s": fwd + norms, "dgrad_s": dgrad + 2.0 * norms, "wgrad_s": wgrad,
            "bwd_s": dgrad + wgrad + 2.0 * norms, "flops_fwd": 2.0 * tokens * (h / tp) * 2 * h}


def embedding_costs(model: ModelSpec, rates: ComputeRates, tokens):
    """Input embedding lookup (forward) and gradient scatter (backward) on the first stage."""
    tokens = np.asarray(tokens, dtype=float)
    fwd = memory_bound_time_s(tokens * model.hidden_size * 2 * rates.act_bytes, rates, 1)
    bwd = memory_bound_time_s(tokens * model.hidden_size * (rates.act_bytes + 8), rates, 2)
    return {"fwd_s": fwd, "bwd_s": bwd}


# ---- what a selective recomputation repeats (``memory.RECOMPUTE_MODULES``) ---------------------

def norm_forward_s(model: ModelSpec, rates: ComputeRates, tokens, tp, sp):
    """Forward seconds of a layer's two norms (each reads and writes its h-wide rows; split by
    tp under sequence parallelism; one with a parallel block's shared norm, ``norms_per_layer``):
    what recomputing ``layernorm`` repeats."""
    tokens = np.asarray(tokens, dtype=float)
    split = np.where(sp, np.asarray(tp, dtype=float), 1.0)
    return norms_per_layer(model) * memory_bound_time_s(tokens * model.hidden_size * rates.act_bytes * 2.0 / split, rates, 1)


def block_projections_in_order(model: ModelSpec, tp, ffn=None):
    """[(n, k), ...] of one transformer block's projections as separate matmuls in forward order,
    TP-split: the query, key and value projections, the output projection, then the MLP's gate,
    up and down projections (a plain MLP: its two), as torchtitan's Llama block issues them
    (pytorch/torchtitan@v0.2.0 torchtitan/models/llama3/model/model.py: ``wq``, ``wk``, ``wv``,
    ``wo``; ``w1``, ``w3``, ``w2``). Multi-latent attention: its projections in
    ``attention_gemm_shapes`` order."""
    h, a, g, d = model.hidden_size, model.num_heads, model.num_kv_heads, model.head_dim
    tp = np.asarray(tp, dtype=float)
    f = np.asarray(model.ffn_hidden_size if ffn is None else ffn, dtype=float)
    if model.mla is not None:
        attention = attention_gemm_shapes(model, tp)
    else:
        g_rank = kv_heads_per_tp_rank(g, tp)
        attention = [(a * d / tp, h + 0 * tp), (g_rank * d, h + 0 * tp), (g_rank * d, h + 0 * tp),
                     (h + 0 * tp, a * d / tp)]
    if model.gated_mlp:
        mlp = [(f / tp, h + 0 * tp), (f / tp, h + 0 * tp), (h + 0 * tp, f / tp)]
    else:
        mlp = [(f / tp, h + 0 * tp), (h + 0 * tp, f / tp)]
    return attention + mlp


def every_second_linear_forward(model: ModelSpec, rates: ComputeRates, tokens, tp, sp, ffn=None, with_mlp=True,
                                unfused_ops=False):
    """(seconds, FLOPs, kernels) of what a per-operation checkpoint that keeps every other
    matmul's output repeats in backward beyond the norms and the activation (``memory``
    ``every_second_linear``): the forward GEMMs of the 2nd, 4th, 6th ... projection of
    ``block_projections_in_order`` (a Llama block: the key, output and up projections, 36% of the
    8B's forward projection FLOPs), the RoPE rotation of the queries and keys (``rotary_bytes``)
    and the two residual adds (read 2, write 1 row of h each; split by tp under sequence
    parallelism), whose outputs the policy does not keep either (pytorch/torchtitan@v0.2.0
    torchtitan/distributed/activation_checkpoint.py ``_apply_op_sac``: ``aten.mm`` outputs are
    saved except when the block's mm count is even). ``with_mlp`` False: the attention block's
    projections only (an MoE layer, whose experts are grouped matmuls outside that count).
    ``unfused_ops`` (per row allowed): the eager RoPE, key/value repetition and layout copy rerun
    too (``unfused_attention_bytes``)."""
    tokens = np.asarray(tokens, dtype=float)
    shapes = block_projections_in_order(model, tp, ffn)
    n_attention = len(shapes) - (3 if model.gated_mlp else 2)      # the MLP's projections come last
    seconds = 0.0 * tokens
    flops = 0.0 * tokens
    kernels = 0.0
    for index, (n, k) in enumerate(shapes, start=1):
        if index % 2 or (index > n_attention and not with_mlp):
            continue
        seconds = seconds + linear_gemm_times_s(tokens, n, k, rates)[0]
        flops = flops + 2.0 * tokens * n * k
        kernels += 1.0
    split = np.where(sp, np.asarray(tp, dtype=float), 1.0)
    residual = 2.0 * 3.0 * tokens * model.hidden_size * rates.act_bytes / split
    rope = rotary_bytes(model, tokens, tp)
    rope_kernels = 2.0 if model.position_embedding == "rope" else 0.0
    eager = np.asarray(unfused_ops, dtype=float)
    eager_bytes, eager_kernels = unfused_attention_bytes(model, tokens, tp)
    seconds = seconds + memory_bound_time_s(residual + rope + eager * eager_bytes, rates,
                                            2.0 + rope_kernels + eager * eager_kernels)
    return seconds, flops, kernels + 2.0 + rope_kernels + eager * eager_kernels


def activation_forward_s(model: ModelSpec, rates: ComputeRates, rows, ffn_local, unfused=False):
    """Forward seconds of the MLP activation function over ``rows`` rows of ``ffn_local``
    columns (``ACTIVATION_UNITS``; a gated one as eager ops with ``unfused``, per row allowed:
    ``UNFUSED_GATED_ACTIVATION_UNITS``): what recomputing ``mlp_act`` repeats."""
    units, _, extra_kernels, _ = activation_units(model, unfused)
    return memory_bound_time_s(np.asarray(rows, dtype=float) * units * np.asarray(ffn_local, dtype=float)
                               * rates.act_bytes, rates, 1.0 + extra_kernels)


def unfused_attention_bytes(model: ModelSpec, tokens, tp):
    """(HBM bytes, kernels) that one attention block's forward adds (and its backward again)
    when RoPE, the grouped-query key/value repetition and the output's layout copy run as eager
    PyTorch ops (torchtitan's ``Attention.forward``, pytorch/torchtitan@v0.2.0
    torchtitan/models/llama3/model/model.py), beyond the fused kernels' bytes the block already
    counts: RoPE ``UNFUSED_ROPE_BYTES_PER_CHANNEL`` less the fused kernel's ``rotary_bytes``;
    ``repeat_kv`` (heads / kv heads > 1) copies the keys and the values to every query head
    (read 2 g d, write 2 a d each; backward sums them back); ``output.transpose(1, 2)
    .contiguous()`` copies the attention output (read and write 2 a d; backward the attention
    kernel makes its gradient contiguous). Per token and GPU (/ tp); multi-latent attention:
    none of these (not Llama's code)."""
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    if model.mla is not None:
        return 0.0 * tokens * tp, 0.0 * tp
    a, g, d = model.num_heads, model.num_kv_heads, model.head_dim
    rope = rotary_bytes(model, tokens, tp) * (UNFUSED_ROPE_BYTES_PER_CHANNEL / FUSED_ROPE_BYTES_PER_CHANNEL - 1.0)
    # per GPU: the K/V heads it holds (whole ones above tp = g) and its share of the query heads
    repeat = 2.0 * (2.0 * kv_heads_per_tp_rank(g, tp) * d + 2.0 * a * d / tp) if a > g else 0.0 * tp
    layout = 4.0 * a * d / tp
    rope_kernels = 2.0 * (UNFUSED_ROPE_KERNELS_PER_TENSOR - 1.0) if model.position_embedding == "rope" else 0.0
    return rope + tokens * (repeat + layout), rope_kernels + (2.0 if a > g else 0.0) + 1.0 + 0.0 * tp


def mla_up_projection_forward(model: ModelSpec, rates: ComputeRates, tokens, tp):
    """(seconds, FLOPs) of multi-latent attention's up-projections in forward (query latent to
    queries, key/value latent to keys and values; ``attention_gemm_shapes``): what recomputing
    ``mla_up_proj`` repeats; zero without MLA."""
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    if model.mla is None:
        return 0.0 * tokens * tp, 0.0 * tokens * tp
    m, a = model.mla, model.num_heads
    shapes = [(a * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank + 0.0 * tp)]
    if m.q_lora_rank:
        shapes.append((a * (m.qk_nope_head_dim + m.qk_rope_head_dim) / tp, m.q_lora_rank + 0.0 * tp))
    seconds = sum(linear_gemm_times_s(tokens, n, k, rates)[0] for n, k in shapes)
    flops = sum(2.0 * tokens * n * k for n, k in shapes)
    return seconds, flops
