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
(12 bytes): 18 bytes per parameter, the count behind Korthikanti's Figure 1. Two stack
behaviours change it: a gradient buffer in the 16-bit parameter dtype (2 bytes; Megatron-Core
DDP without ``grad_reduce_in_fp32``), and FP8 parameters (Megatron ``--fp8-param-gather``),
whose quantised tensors replace the 16-bit working weights (``model_state_bytes``).
ZeRO (Rajbhandari et al. 2020) shards optimizer states (stage 1), then gradients (2), then
weights (3) over the data-parallel group.
"""
from __future__ import annotations

import numpy as np

from cost_models.params import kv_heads_per_tp_rank
from model_specs.model_spec import ModelSpec

WEIGHT_BYTES = 2.0
#: fp32 main gradients, the default gradient buffer (``model_state_bytes(grad_bytes=...)``)
GRAD_BYTES = 4.0
OPTIMIZER_BYTES = 12.0
#: low-precision training keeps an extra 8-bit copy of the weights for the GEMMs.
LOW_PRECISION_WEIGHT_COPY_BYTES = 1.0
#: the caching allocator's fragmentation, as a fraction of the tensors' bytes.
ALLOCATOR_FRAGMENTATION = 0.05
#: CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers per GPU, bytes (``runtime_reserved_bytes``).
RUNTIME_RESERVED_BYTES = 1.5 * 2**30
#: bytes per logit kept for the loss on the last stage (16-bit logits + fp32 softmax copy).
LOGIT_BYTES = 6.0


#: operations a selective recomputation may recompute in every layer (Megatron
#: ``--recompute-modules``), in the order of their bits in a modules mask. ``mlp``: the dense
#: layers' whole MLP block (Megatron's ``mlp``: it checkpoints the MLP on its input, the
#: pre-MLP norm's output); ``moe``: the MoE layers' whole MoE block, router, dispatch, experts,
#: shared experts and combine (Megatron's ``moe``; NVIDIA/Megatron-LM@core_v0.14.0
#: megatron/core/transformer/transformer_layer.py ``recompute_mlp`` for non-MoE MLPs and
#: megatron/core/transformer/moe/moe_layer.py ``moe_layer_recompute``).
#: ``every_second_linear``: PyTorch's per-operation selective checkpointing as torchtitan runs it
#: (pytorch/torchtitan@v0.2.0 torchtitan/distributed/activation_checkpoint.py ``_apply_op_sac``:
#: of the ``aten.mm`` calls of a block, counted in forward order, the outputs of the 1st, 3rd,
#: ... are saved and the 2nd, 4th, ... rerun in backward): the key, output and MLP up projections
#: of a Llama block (wq, wk, wv, wo, w1, w3, w2), with the RoPE rotation and residual adds
#: between them (``layer_costs.every_second_linear_forward``).
#: ``mlp_fc1``: the dense layers' MLP input projections (the gate and up GEMMs, one fused GEMM)
#: and the activation, the MLP output projection's output not rerun since no backward reads it:
#: what a remat policy that saves every matmul output but the MLP's inputs' reruns (MaxText
#: ``save_dot_except_mlpwi`` / ``save_dot_except_mlp``, AI-Hypercomputer/maxtext@8e55ab1aa
#: MaxText/layers/models.py; JAX drops recomputation whose output no gradient needs). It drops
#: what ``mlp`` drops.
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mlp_act", "mla_up_proj", "moe_dispatch", "mlp", "moe",
                     "every_second_linear", "mlp_fc1")
MODULE_BITS = {name: 1 << i for i, name in enumerate(RECOMPUTE_MODULES)}
#: the modules mask of Megatron's plain ``--recompute-granularity selective``
SELECTIVE_DEFAULT = MODULE_BITS["core_attn"]
#: which kept tensors (``activation_terms``) each module drops (``moe``'s routed-expert tensors
#: are dropped by ``moe.moe_activation_bytes_per_layer``, its shared experts' by
#: ``moe_block_modules``)
MODULE_DROPS = {"core_attn": ("core",), "layernorm": ("norm_outputs",), "mlp_act": ("mlp_act_out",),
                "mla_up_proj": ("qkv", "attn_k"), "moe_dispatch": (), "mlp": ("mlp_fc1_out", "mlp_fc1_up", "mlp_act_out"),
                "moe": (), "every_second_linear": ("attn_k", "mlp_fc1_up"),
                "mlp_fc1": ("mlp_fc1_out", "mlp_fc1_up", "mlp_act_out")}
#: each kept tensor that some module drops -> the bits of the modules that drop it (``MODULE_DROPS``
#: turned around: a tensor is dropped when the mask has any of these bits)
DROPPED_BY = {name: sum(MODULE_BITS[m] for m, drops in MODULE_DROPS.items() if name in drops)
              for name in {n for drops in MODULE_DROPS.values() for n in drops}}


def moe_block_modules(modules):
    """The modules mask to apply to the activation terms of an MoE layer's shared experts: they
    are part of the MoE block (recomputed with ``moe``), not a dense MLP (``mlp`` and ``mlp_fc1``
    leave them)."""
    modules = np.asarray(modules, dtype=np.int64)
    mlp, moe, fc1 = MODULE_BITS["mlp"], MODULE_BITS["moe"], MODULE_BITS["mlp_fc1"]
    return (modules & ~(mlp | fc1)) | np.where((modules & moe) != 0, mlp, 0)


def activation_terms(model: ModelSpec, micro_batch, seq_len, tp, cp, sp, flash_attention=True, ffn=None,
                     gemm_input_bytes=None, element_bytes=2.0) -> dict:
    """The tensors one layer keeps for its backward, bytes for one micro-batch on one GPU, by name.

    Korthikanti et al. 2022 (section 4, eq. 1-2) per term, tokens = micro_batch * seq / cp:

    * ``norm_inputs``: the two norms' 16-bit inputs (4h per token), split by tp only under
      sequence parallelism; a parallel block's norms read the same x, stored once (2h);
    * ``norm_outputs``: the norms' outputs, the QKV and first-MLP GEMMs' inputs (2h, each in
      ``gemm_input_bytes``: 1 byte under FP8 recipes, which keep only the quantised copy;
      default ``element_bytes``); a parallel block's shared norm: one output feeds both (h);
    * ``dropout_masks``: two 1-byte masks (2h), with ``ModelSpec.hidden_dropout``;
    * ``qkv``, ``attn_k``: the attention core's 16-bit inputs: the queries and values
      2(a + g)d / tp and apart the keys 2gd / tp (a per-operation checkpoint recomputes the key
      projection, ``every_second_linear``), or for multi-latent attention the up-projected
      queries, keys and values 2a(2 d_qk + d_v) / tp (``attn_k`` 0);
    * ``mla_latents``: the compressed query and key/value latents (the up-projections' inputs,
      ``gemm_input_bytes`` each, not split by TP);
    * ``attn_out``: the output projection's input, a d_v / tp elements in ``gemm_input_bytes``;
    * ``core``: what the attention core keeps: fused (flash) attention its fp32 log-sum-exp
      per query and head (4a / tp); the materialised softmax its probabilities (2 a s b), with
      ``ModelSpec.attention_dropout`` also the mask and the dropped copy (3 a s b);
    * ``mlp_fc1_out``, ``mlp_fc1_up``: the first MLP GEMM's output the activation's backward
      reads (plain 2f, 16-bit, / tp; gated, the gate half 2f in ``mlp_fc1_out`` and the up half
      2f in ``mlp_fc1_up``, which ``every_second_linear`` recomputes);
    * ``mlp_act_out``: the activation's output, the second GEMM's input (f in
      ``gemm_input_bytes``, / tp);
    * ``layer_input``: what full recomputation keeps instead of all of them: 2h (/ tp with SP).

    ``ffn`` overrides the MLP width (a MoE layer's shared experts). ``element_bytes``: bytes of a
    stored activation element (2 in 16-bit training, 4 in fp32; the 16-bit sizes above scale,
    the masks stay 1 byte and the log-sum-exp 4). 16-bit with flash off and no MLA this is
    Korthikanti's s b h (34 + 5 a s / h) (10 + 24 + 5as/h).
    """
    b = np.asarray(micro_batch, dtype=float)
    s_local = np.asarray(seq_len, dtype=float) / np.asarray(cp, dtype=float)
    tp = np.asarray(tp, dtype=float)
    e = float(element_bytes) / 2.0      # 16-bit element sizes below, scaled for fp32 training
    gb = np.asarray(element_bytes if gemm_input_bytes is None else gemm_input_bytes, dtype=float)
    hidden_dropout = 2.0 if model.hidden_dropout else 0.0
    attention_dropout = 1.0 if model.attention_dropout else 0.0
    tokens = b * s_local
    h, a, g, d = model.hidden_size, model.num_heads, model.num_kv_heads, model.head_dim
    f = model.ffn_hidden_size if ffn is None else ffn
    split = np.where(sp, tp, 1.0)
    if model.mla is not None:
        m = model.mla
        qk, v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
        qkv = e * tokens * 2.0 * a * (2.0 * qk + v) / tp
        latents = tokens * gb * (m.q_lora_rank + m.kv_lora_rank) + 0.0 * tp
        keys = 0.0 * qkv
    else:
        v = d
        g_rank = kv_heads_per_tp_rank(g, tp)         # whole heads, replicated when tp exceeds them
        qkv = e * tokens * (2.0 * a * d / tp + 2.0 * g_rank * d)
        keys = e * tokens * 2.0 * g_rank * d
        latents = 0.0 * tokens * tp
    score = np.where(flash_attention, tokens * a * 4.0 / tp,
                     (2.0 * e + attention_dropout * (2.0 * e + 1.0)) * a * s_local
                     * np.asarray(seq_len, dtype=float) * b / tp)
    # a parallel block's norms both read x: one stored input; one shared norm: one stored output
    # (``ModelSpec.parallel_attention_mlp`` / ``parallel_shared_norm``)
    norm_inputs = 1.0 if model.parallel_attention_mlp else 2.0
    norm_outputs = 1.0 if model.parallel_shared_norm else 2.0
    return {
        "norm_inputs": e * tokens * h * 2.0 * norm_inputs / split,
        "norm_outputs": tokens * h * norm_outputs * gb / split,
        "dropout_masks": tokens * h * hidden_dropout / split,
        "qkv": qkv,
        "attn_k": keys,
        "mla_latents": latents,
        "attn_out": tokens * a * v * gb / tp,
        "core": score,
        "mlp_fc1_out": e * tokens * 2.0 * f / tp,
        "mlp_fc1_up": e * tokens * (2.0 if model.gated_mlp else 0.0) * f / tp,
        "mlp_act_out": tokens * f * gb / tp,
        "layer_input": e * tokens * h * 2.0 / split,
    }


def kept_bytes(terms: dict, modules) -> np.ndarray:
    """Bytes a layer keeps when the operations of the ``modules`` mask (``MODULE_BITS``) are
    recomputed in backward: every term of ``activation_terms`` but the layer input, less those
    the modules drop (``MODULE_DROPS``)."""
    modules = np.asarray(modules, dtype=np.int64)
    total = 0.0
    for name, value in terms.items():
        if name == "layer_input":
            continue
        bits = DROPPED_BY.get(name)
        dropped = False if bits is None else (modules & bits) != 0
        total = total + np.where(dropped, 0.0, value)
    return total


def pinned_bytes(nbytes):
    """Host bytes a pinned copy of a tensor of ``nbytes`` takes: PyTorch's caching host allocator
    rounds every pinned allocation up to the next power of two (pytorch/pytorch
    aten/src/ATen/core/CachingHostAllocator.h: "Round up the allocation to the nearest power of
    two to improve reuse", ``c10::llvm::PowerOf2Ceil``; the default, which pytorch/pytorch#171662
    and vllm-project/vllm#56410 discuss), and Transformer Engine's CPU offloading allocates one
    pinned tensor per offloaded activation (NVIDIA/TransformerEngine
    transformer_engine/pytorch/cpu_offload.py: ``torch.empty_like(tensor, device="cpu",
    pin_memory=True)``). Arrays broadcast; 0 stays 0."""
    b = np.asarray(nbytes, dtype=float)
    safe = np.where(b > 0, b, 1.0)
    return np.where(b > 0, 2.0 ** np.ceil(np.log2(safe)), 0.0)


def pinned_kept_bytes(terms: dict, modules) -> np.ndarray:
    """``kept_bytes`` as pinned host copies: each kept term taken as one tensor, rounded up by
    ``pinned_bytes`` (what an offloaded layer holds in host memory)."""
    return kept_bytes({k: pinned_bytes(v) for k, v in terms.items()}, modules)


def effective_modules(recompute, modules, selective=SELECTIVE_DEFAULT):
    """The modules mask a layer that is not recomputed in full uses: the named modules, else
    under ``selective`` (code 1) what the stack's selective checkpointing recomputes
    (``selective``, per row allowed: ``ParallelConfig.selective_modules``; Megatron's attention
    core by default), else none."""
    rc = np.asarray(recompute)
    modules = np.asarray(modules, dtype=np.int64)
    return np.where(modules != 0, modules, np.where(rc == 1, np.asarray(selective, dtype=np.int64), 0))


def activation_bytes_per_layer(model: ModelSpec, micro_batch, seq_len, tp, cp, sp, recompute,
                               flash_attention=True, ffn=None, modules=0, gemm_input_bytes=None, element_bytes=2.0,
                               selective=SELECTIVE_DEFAULT, pinned=False):
    """Activation bytes one layer keeps for one micro-batch on one GPU.

    ``recompute``: 0 none, 1 selective, 2 full (arrays allowed): full keeps the layer input,
    the others ``kept_bytes`` of ``activation_terms`` under ``effective_modules`` (``selective``:
    the stack's selective modules mask). ``ffn``
    overrides the MLP width (e.g. the routed tokens' expert MLPs; see
    ``moe_activation_bytes_per_layer``). ``element_bytes``: see ``activation_terms``. ``pinned``:
    each tensor as its pinned host copy takes it (``pinned_bytes``: an offloaded layer's host bytes).
    """
    terms = activation_terms(model, micro_batch, seq_len, tp, cp, sp, flash_attention, ffn, gemm_input_bytes,
                             element_bytes)
    if pinned:       # the same tensors as pinned host copies (``pinned_bytes``)
        terms = {k: pinned_bytes(v) for k, v in terms.items()}
    kept = kept_bytes(terms, effective_modules(recompute, modules, selective))
    return np.where(np.asarray(recompute) == 2, terms["layer_input"], kept)


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


def model_state_bytes(params_local, zero_stage, dp_shard, low_precision=False, full_precision=False,
                      copy_bytes=None, moment_bytes=4.0, grad_bytes=GRAD_BYTES, fp8_param_gather=False,
                      zero3_master_params=False, master_bytes=4.0):
    """(weights, gradients, optimizer) bytes on one GPU for ``params_local`` parameters.

    ``full_precision`` (fp32 training): 4-byte weights and gradients and 8 bytes of Adam
    moments, no separate master copy (16 bytes per parameter).

    ``params_local`` are the parameters this GPU owns before ZeRO (already split by TP/PP/EP);
    ``dp_shard`` is the size of the group ZeRO shards over. ``copy_bytes``: bytes per parameter
    of the quantised weight copies a low-precision recipe keeps (``low_precision.
    weight_copy_bytes_per_param``); None = ``LOW_PRECISION_WEIGHT_COPY_BYTES`` when
    ``low_precision``. ``moment_bytes``: bytes of each Adam moment (4 fp32; 2 when they are kept in
    BF16, DeepSeek-V3 report section 3.3.2, Megatron ``--exp-avg-dtype bf16
    --exp-avg-sq-dtype bf16``), beside the fp32 master weight.

    ``grad_bytes`` (arrays allowed): bytes per parameter of the gradient buffer, 4 (fp32) or 2
    (the 16-bit parameter dtype): Megatron-Core DDP allocates it as ``torch.float if
    grad_reduce_in_fp32 else param.dtype`` (NVIDIA/Megatron-LM@core_v0.14.0
    megatron/core/distributed/distributed_data_parallel.py, line 234); fp32 training keeps 4.
    ``fp8_param_gather`` (arrays allowed): the quantised copies (``copy_bytes``, when there are
    any) are the only weights the model holds, no 16-bit working copy (Megatron
    ``--fp8-param-gather``: the parameter is a Transformer Engine Float8Tensor whose row-wise
    data lives in the distributed optimizer's uint8 parameter buffer, plus its transpose on
    Hopper, or an MXFP8Tensor with row- and column-wise data; the fp32 master copy stays in the
    optimizer). Parameters without a quantised copy (embedding, LM head) keep 2 bytes.

    ``zero3_master_params`` (arrays allowed): at ZeRO-3 the sharded parameter is the fp32 master
    itself, kept once (counted in the optimizer's 4 + 2 x ``moment_bytes``), and no 16-bit shard
    is kept: the 16-bit copy exists only while a layer is gathered (``zero3_buffers``). PyTorch
    FSDP with a ``MixedPrecisionPolicy`` / ``MixedPrecision`` ``param_dtype``: the sharded
    parameters stay fp32 and are cast at the all-gather, FSDP "does not require any extra memory
    to keep a high-precision copy of the parameters for the optimizer step"
    (pytorch/pytorch v2.13.0 torch/distributed/fsdp/_fully_shard/_fsdp_api.py
    ``MixedPrecisionPolicy``). So 16 / n bytes a parameter instead of 18 / n (2 / n 16-bit weight
    shard + 16 / n of gradients and optimizer; DeepSpeed ZeRO-3 and Megatron-FSDP keep the 16-bit
    shard beside the fp32 master). Only the 16-bit working shard goes: quantised copies
    (``copy_bytes``) are counted as before; ZeRO-0/1/2 and fp32 training are unchanged (their
    weights are whole, or already one fp32 copy).

    ``master_bytes`` (arrays allowed): bytes per parameter of the optimizer's master copy, 4 (an
    fp32 copy: ``OPTIMIZER_BYTES`` = 4 + 2 x 4), 2 (Apex ``DistributedFusedAdam``'s int16 remainder
    beside a bf16 weight, NVIDIA/apex@810ffae3 apex/contrib/optimizers/distributed_fused_adam.py
    :447-453 ``param_remainders_shard``; or a bf16 master beside FP8 primary weights, ``:439-445``
    ``params_shard`` in the optimizer's bf16), 0 (an optimizer in the weights' dtype keeps none,
    ``store_params=False``). Ignored in fp32 training.
    """
    p = np.asarray(params_local, dtype=float)
    z = np.asarray(zero_stage)
    n = np.asarray(dp_shard, dtype=float)
    if copy_bytes is None:
        copy_bytes = LOW_PRECISION_WEIGHT_COPY_BYTES if low_precision else 0.0
    copy_bytes = np.asarray(copy_bytes, dtype=float)
    quantised_only = np.asarray(fp8_param_gather, dtype=bool) & (copy_bytes > 0)
    no_16bit_shard = quantised_only | (np.asarray(zero3_master_params, dtype=bool) & (z >= 3))
    weight_bytes = np.where(no_16bit_shard, copy_bytes, WEIGHT_BYTES + copy_bytes)
    optimizer_bytes = (OPTIMIZER_BYTES - 2.0 * (4.0 - np.asarray(moment_bytes, dtype=float))
                       - (4.0 - np.asarray(master_bytes, dtype=float)))
    grad_bytes = np.asarray(grad_bytes, dtype=float)
    if full_precision:
        weight_bytes, optimizer_bytes = 4.0, 2.0 * np.asarray(moment_bytes, dtype=float)
        grad_bytes = GRAD_BYTES
    weights = p * weight_bytes / np.where(z >= 3, n, 1.0)
    grads = p * grad_bytes / np.where(z >= 2, n, 1.0)
    optimizer = p * optimizer_bytes / np.where(z >= 1, n, 1.0)
    return weights, grads, optimizer


def runtime_reserved_bytes(gpu) -> float:
    """Bytes the runtime holds on one device beside the tensors: ``RUNTIME_RESERVED_BYTES`` on a
    GPU (its CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers); 0 on a host CPU
    (``GPUSpec.is_cpu``: CPU ranks on gloo, as ``paraplan calibrate`` measures them), which
    creates no CUDA context, loads no cuBLAS/cuDNN and allocates no NCCL buffers: gloo's
    buffers are the tensors it sends. (The 1.5 GiB made ``validate measured`` predict 3.5-6.5x a
    CPU rank's measured peak.)"""
    return 0.0 if gpu is not None and gpu.is_cpu else RUNTIME_RESERVED_BYTES


def allocator_allowance_bytes(tensor_bytes, reserved_bytes: float = RUNTIME_RESERVED_BYTES):
    """Fragmentation plus runtime reservations (``reserved_bytes``, ``runtime_reserved_bytes``
    of the device) on top of the live tensors, bytes."""
    return np.asarray(tensor_bytes, dtype=float) * ALLOCATOR_FRAGMENTATION + reserved_bytes
