"""Parameter counts of a transformer, per layer kind and in total.

Formulas: attention projections Q, K, V, O (GQA: K and V have ``num_kv_heads`` heads);
MLP 2 (plain) or 3 (gated, SwiGLU) matrices of ``hidden x ffn``; multi-latent attention per
DeepSeek-V2 (arXiv 2405.04434, section 2.1); MoE routed + shared experts + router.
Biases are ignored; layer norms count 2*h per layer.
"""
from __future__ import annotations

import numpy as np

from model_specs.model_spec import ModelSpec


def linear_attention_params(model: ModelSpec) -> int:
    """Weights of one linear-attention (Gated DeltaNet) block, count: the fused q/k/v/z input
    projection (h x (2 nk dk + 2 nv dv)), the per-head gate projections (h x 2 nv), the causal
    convolution over q, k, v ((2 nk dk + nv dv) x kernel) and the output projection
    (nv dv x h) (Yang et al. 2025, arXiv 2412.06464, section 3; Qwen3-Next's layer). 0 for a
    model without linear attention."""
    la = model.linear_attention
    if la is None:
        return 0
    h = model.hidden_size
    qk = la.num_key_heads * la.key_head_dim
    v = la.num_value_heads * la.value_head_dim
    return h * (2 * qk + 2 * v) + h * 2 * la.num_value_heads + (2 * qk + v) * la.conv_kernel + v * h


def softmax_attention_params(model: ModelSpec) -> int:
    """Weights of one softmax-attention block (projections only), count."""
    h, a, g, d = model.hidden_size, model.num_heads, model.num_kv_heads, model.head_dim
    if model.mla is not None:
        m = model.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            q = h * m.q_lora_rank + m.q_lora_rank * a * qk + m.q_lora_rank
        else:
            q = h * a * qk
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
        kv += m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + a * m.v_head_dim * h
    return h * a * d + 2 * h * g * d + a * d * h


def attention_params(model: ModelSpec) -> int:
    """Weights of one attention block (projections only), count; for a model mixing linear
    and softmax attention layers, the mean over its layers (rounded)."""
    full = softmax_attention_params(model)
    la = model.linear_attention
    if la is None:
        return full
    return int(round((1.0 - la.layer_fraction) * full + la.layer_fraction * linear_attention_params(model)))


def kv_heads_per_tp_rank(kv_heads, tp):
    """K/V heads one tensor-parallel rank holds: ``kv_heads / tp``, or one whole head when tp
    exceeds them (a rank computes the attention of its query heads against their group's K and
    V, so the group's head is replicated over the tp / kv_heads ranks sharing it). vLLM, SGLang
    and TensorRT-LLM replicate KV heads this way (``cost_models.kv_cache``); a training stack only
    when its ``TrainingBehaviour.kv_head_replication`` says so (``tp_splits_kv_heads``):
    Megatron-Core <= 0.15 refuses tp > num_query_groups, and 0.16+ sub-shards the QKV
    activations instead of replicating the weights."""
    kv_heads = np.asarray(kv_heads, dtype=float)
    return kv_heads / np.minimum(np.asarray(tp, dtype=float), kv_heads)


def tp_splits_kv_heads(kv_heads, tp, replication):
    """Whether tensor degree ``tp`` can split ``kv_heads`` key/value heads: tp divides them, or,
    where the software stack replicates heads over tp (``replication``, the stack's
    ``kv_head_replication``), tp is a multiple of them. Scalars or numpy arrays (the planner's
    mask and ``simulator.validate_config.check_config`` call this one predicate)."""
    kv_heads, tp = np.asarray(kv_heads), np.asarray(tp)
    return (kv_heads % tp == 0) | (np.asarray(replication, dtype=bool) & (tp % kv_heads == 0))


def serving_tp_splits_kv_heads(model: ModelSpec, tp) -> bool:
    """Whether a serving engine runs ``model``'s attention at tensor degree ``tp``: vLLM's and
    SGLang's ``QKVParallelLinear`` (and TensorRT-LLM's attention) take tp dividing the key/value
    heads, or a multiple of them (each head replicated on tp / heads ranks); any other tp would
    leave a fraction of a head a GPU. Multi-latent attention has no K/V heads to split: any tp
    the query heads allow."""
    if model.mla is not None:
        return True
    return bool(tp_splits_kv_heads(model.num_kv_heads, tp, True))


def replicated_kv_params_per_tp_rank(model: ModelSpec, tp):
    """K and V projection weights one tensor-parallel rank holds beyond its 1 / tp share of
    ``attention_params`` (per layer, the mean over a hybrid model's layers): 2 h d (heads held
    - g / tp) when tp > g (``kv_heads_per_tp_rank``), else 0. Llama-3.1-405B (h 16,384, d 128,
    g 8) at tp 16: 2 x 16,384 x 128 x (1 - 0.5) = 2,097,152 a layer. Multi-latent attention has
    no K/V heads to replicate (its up-projections split over the query heads): 0."""
    tp = np.asarray(tp, dtype=float)
    if model.mla is not None:
        return 0.0 * tp
    g = model.num_kv_heads
    extra = 2.0 * model.hidden_size * model.head_dim * (kv_heads_per_tp_rank(g, tp) - g / tp)
    la = model.linear_attention
    return extra * (1.0 - la.layer_fraction) if la is not None else extra


def mlp_params(hidden: int, ffn: int, gated: bool) -> int:
    """Weights of one MLP (or one expert), count."""
    return (3 if gated else 2) * hidden * ffn


def hybrid_layer_params(model: ModelSpec) -> dict:
    """{kind: weights} of one layer of each kind of a hybrid pattern, each with its one norm
    (h): ``mamba`` (``mamba.mamba_params``), ``attention``, ``mlp``, ``moe`` (routed and shared
    experts, router)."""
    from cost_models.mamba import mamba_params
    h = model.hidden_size
    out = {"mamba": (mamba_params(model) if model.mamba is not None else 0) + h,
           "attention": softmax_attention_params(model) + h,
           "mlp": mlp_params(h, model.ffn_hidden_size, model.gated_mlp) + h}
    if model.moe is not None:
        out["moe"] = moe_block_params(model) + h
        out["moe_active"] = moe_block_params(model, active=True) + h
    return out


def dense_layer_params(model: ModelSpec) -> int:
    """One dense transformer layer: attention + MLP + two norms (a hybrid pattern: the mean of
    its layers without routed experts, rounded)."""
    if model.hybrid_pattern:
        from cost_models.mamba import non_moe_kind_shares
        per = hybrid_layer_params(model)
        return int(round(sum(w * per[k] for k, w in non_moe_kind_shares(model).items())))
    ffn = model.ffn_hidden_size
    if model.moe is not None and model.moe.dense_ffn_hidden_size:
        ffn = model.moe.dense_ffn_hidden_size
    return attention_params(model) + mlp_params(model.hidden_size, ffn, model.gated_mlp) + 2 * model.hidden_size


def routed_expert_width(model: ModelSpec) -> int:
    """The width routed experts take tokens at and tokens travel between GPUs at: the MoE's
    ``latent_size`` (LatentMoE), else the hidden size."""
    return (model.moe.latent_size if model.moe is not None else 0) or model.hidden_size


def latent_projection_params(model: ModelSpec) -> int:
    """The two latent_size x hidden projections of one LatentMoE layer (down before the
    dispatch, up after the combine; Megatron-Bridge@067f987 ``theoretical_memory_utils.py``:
    ``2 * hidden_size * moe_latent_size`` per MoE layer); 0 without a latent size."""
    moe = model.moe
    return 2 * model.hidden_size * moe.latent_size if moe is not None and moe.latent_size else 0


def moe_block_params(model: ModelSpec, active: bool = False) -> int:
    """The MoE block of a layer: routed experts (``active=True``: the top-k a token uses) at
    their width (``routed_expert_width``), the latent projections when there are any, shared
    experts, their sigmoid gate (h x 1, ``MoESpec.shared_expert_gate``) and the router (h x E); no
    attention, no norms."""
    moe, h = model.moe, model.hidden_size
    experts = moe.top_k if active else moe.num_experts
    routed = experts * mlp_params(routed_expert_width(model), moe.expert_ffn_hidden_size, model.gated_mlp)
    shared_ffn = moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size
    shared = moe.num_shared_experts * mlp_params(h, shared_ffn, model.gated_mlp)
    gate = h if moe.shared_expert_gate else 0
    return routed + latent_projection_params(model) + shared + gate + h * moe.num_experts


def moe_layer_params(model: ModelSpec, active: bool = False) -> int:
    """One MoE layer; ``active=True`` counts only the top-k routed experts a token uses."""
    if model.moe is None:
        return dense_layer_params(model)
    if model.hybrid_pattern:        # an E layer: the MoE block alone
        return hybrid_layer_params(model)["moe_active" if active else "moe"]
    return attention_params(model) + moe_block_params(model, active) + 2 * model.hidden_size


def expert_params_per_moe_layer(model: ModelSpec) -> int:
    """Routed-expert weights of one MoE layer (the part sharded by expert parallelism)."""
    if model.moe is None:
        return 0
    return model.moe.num_experts * mlp_params(routed_expert_width(model), model.moe.expert_ffn_hidden_size,
                                              model.gated_mlp)


def embedding_params(model: ModelSpec) -> int:
    """Input embedding table (V x h)."""
    return model.vocab_size * model.hidden_size


def lm_head_params(model: ModelSpec) -> int:
    """Output projection; zero when tied to the input embedding."""
    return 0 if model.tied_embeddings else model.vocab_size * model.hidden_size


def mtp_projection_params(model: ModelSpec) -> int:
    """One multi-token-prediction module outside its transformer layer: the 2h x h projection
    and the two RMSNorms before it (DeepSeek-V3 report, section 2.2); the embedding and the
    output head are shared with the main model."""
    h = model.hidden_size
    return 2 * h * h + 2 * h


def mtp_params(model: ModelSpec) -> int:
    """All multi-token-prediction modules (each: projection + one layer of the model's last
    kind + a final norm). Not part of ``total_params``: DeepSeek-V3's 671B excludes its
    14B MTP module (report, section 4.2 / the Hugging Face model card)."""
    if model.mtp_layers == 0:
        return 0
    layer = moe_layer_params(model) if model.num_moe_layers else dense_layer_params(model)
    # the module's layer attends by softmax even in a model mixing in linear attention (Qwen3.5;
    # cost_models.inference_step.mtp_layer_model), not by the mean over the model's layer kinds
    layer += softmax_attention_params(model) - attention_params(model)
    return model.mtp_layers * (mtp_projection_params(model) + layer + model.hidden_size)


def total_params(model: ModelSpec, active: bool = False) -> int:
    """All parameters (``active=True``: those one token uses, for MoE)."""
    if model.hybrid_pattern:
        per = hybrid_layer_params(model)
        if model.moe is not None:
            per["moe"] = per["moe_active" if active else "moe"]
        layers = sum(n * per[kind] for kind, n in model.hybrid_counts().items() if n)
        return layers + embedding_params(model) + lm_head_params(model) + model.hidden_size
    layers = model.num_dense_layers * dense_layer_params(model)
    layers += model.num_moe_layers * moe_layer_params(model, active=active)
    return layers + embedding_params(model) + lm_head_params(model) + model.hidden_size


def layer_param_tensors(model: ModelSpec) -> int:
    """Parameter tensors of one dense transformer layer as frameworks hold them: fused QKV, output
    projection, MLP in (gate and up fused) and out, each with a bias when the architecture has
    linear biases (GPT-2/3, OPT, BLOOM), and two norms (LayerNorm: weight and bias; RMSNorm:
    weight). GPT-3: 4 x 2 + 2 x 2 = 12; Llama: 4 + 2 = 6."""
    return len(layer_param_tensor_shapes(model))


def norm_tensors(model: ModelSpec) -> int:
    """Parameter tensors of one norm: LayerNorm's weight and bias, RMSNorm's weight."""
    return 2 if model.normalization == "layernorm" else 1


def layer_param_tensor_shapes(model: ModelSpec) -> tuple[tuple[int, bool], ...]:
    """(elements, split by tensor parallelism) of each parameter tensor of one dense layer, in
    the layout ``layer_param_tensors`` counts: fused QKV weight (h x (a + 2g) d) and its bias,
    output projection (a d x h) and its bias, MLP in (h x ffn, twice when gated) and its bias,
    MLP out (ffn x h) and its bias, then the two norms' weights (and biases for LayerNorm).
    Megatron's column-parallel layers (QKV, MLP in) split weight and bias over the TP ranks; the
    row-parallel ones (output, MLP out) split the weight and keep the bias whole; norms are
    whole. GPT-3 175B (h 12,288): 3 x 12,288^2, 36,864, 12,288^2, 12,288, 4 x 12,288^2, 49,152,
    4 x 12,288^2, 12,288, 12,288 x 4."""
    h, a, g, d = model.hidden_size, model.num_heads, model.num_kv_heads, model.head_dim
    gate = 2 if model.gated_mlp else 1
    ffn = model.ffn_hidden_size
    biased = bool(model.linear_bias)
    qkv = (a + 2 * g) * d
    out = [(h * qkv, True)] + ([(qkv, True)] if biased else [])
    out += [(a * d * h, True)] + ([(h, False)] if biased else [])
    out += [(gate * h * ffn, True)] + ([(gate * ffn, True)] if biased else [])
    out += [(ffn * h, True)] + ([(h, False)] if biased else [])
    out += [(h, False)] * (2 * norm_tensors(model))
    return tuple(out)
