"""Memory of a serving worker per GPU: weights, activation workspace, runtime reserve, KV cache.

Weights per GPU: the largest pipeline stage holds ceil(num_layers / pp) layers. In a layer, attention weights
are split over tp (``inference_layers.attention_weights_per_gpu``; replicated over attention
data parallelism), dense MLPs and shared experts over tp, routed experts over the expert group:
E/moe_ep experts per GPU, each cut moe_tp ways. Embedding and LM head are vocabulary-parallel
over tp, in 16-bit; under attention data parallelism an engine that splits an untied head over
the whole tp x adp group (``ServingBehaviour.lm_head_split_over_attention_dp``: SGLang) holds
V h / (tp adp) of it. Bytes per element come from the weight formats.

Activation workspace: the engines size it by a dummy forward of their per-step token budget
(vLLM profiles ``max_num_batched_tokens``, TensorRT-LLM ``max_num_tokens``): the hidden state,
residual and norm output (3 x h), the QKV and attention outputs, the MLP's gate-up output
(2 x ffn / tp) and the routed tokens' copies, 16-bit.

KV-cache pool: what the stack's memory rule leaves (``ServingBehaviour``):
``total``: fraction x HBM - weights - workspace - reserve; ``free``: fraction x (HBM - weights -
workspace - reserve). The largest concurrency that fits is that pool over one request's KV
bytes (``cost_models.kv_cache``) at the length the stack's admission rule holds for it
(``simulator.serving.aggregated``: isl + osl / 2 on average for engines that admit on the
prompt, vLLM and SGLang; isl + osl for those that reserve the whole request, TensorRT-LLM).
"""
from __future__ import annotations

import numpy as np

from cost_models.inference_layers import ACT_BYTES, attention_weights_per_gpu, linear_attention_weights_per_gpu
from cost_models.kv_cache import largest_stage_share, layer_counts
from cost_models.params import latent_projection_params, routed_expert_width
from cost_models.weight_formats import weight_bytes
from hardware_specs.serving_behaviour import ServingBehaviour
from model_specs.draft_head import DraftHead
from model_specs.model_spec import ModelSpec

GIB = 2**30


def _f(x):
    return np.asarray(x, dtype=float)


def _moe_mlp_bytes(model: ModelSpec, tp, moe_tp, moe_ep, wd: float, we: float):
    """Bytes one GPU holds of one routed-expert layer's MLP: its 1/moe_ep of the experts (each a
    1/moe_tp slice), its 1/tp of the shared experts, the router and LatentMoE's projections
    whole."""
    moe = model.moe
    mats = 3.0 if model.gated_mlp else 2.0
    h = model.hidden_size
    experts = moe.num_experts / moe_ep * mats * routed_expert_width(model) * moe.expert_ffn_hidden_size / moe_tp
    shared_ffn = moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size)
    return (experts * we + mats * h * shared_ffn / tp * wd
            + (h * moe.num_experts + latent_projection_params(model)) * ACT_BYTES)


def mtp_weight_bytes_per_gpu(model: ModelSpec, tp, moe_tp, moe_ep, dense_format: str, expert_format: str):
    """Bytes one GPU of the last pipeline stage holds of the model's multi-token-prediction
    modules when the engine drafts with them (``cost_models.speculative``): per module its 2h x h
    projection whole (``inference_step.mtp_draft_pass``), one layer of the model's last kind split
    as the other layers are, and three norms (DeepSeek-V3 report, section 2.2; embedding and
    head shared with the main model)."""
    tp, moe_tp, moe_ep = _f(tp), _f(moe_tp), _f(moe_ep)
    wd, we = weight_bytes(dense_format, model.int4_group_size), weight_bytes(expert_format, model.int4_group_size)
    h = model.hidden_size
    mats = 3.0 if model.gated_mlp else 2.0
    attn = attention_weights_per_gpu(model, tp) * wd
    if model.num_moe_layers:
        mlp = _moe_mlp_bytes(model, tp, moe_tp, moe_ep, wd, we)
    else:
        mlp = mats * h * model.ffn_hidden_size / tp * wd
    return float(model.mtp_layers) * (2.0 * h * h * wd + attn + mlp + 3.0 * h * ACT_BYTES)


def draft_head_weight_bytes_per_gpu(head: DraftHead, tp, pp=1, target: ModelSpec | None = None):
    """Bytes one GPU holds of an EAGLE-3 draft head (``model_specs.draft_head``), 16-bit and split
    over tp like the target: the projection fusing ``fused_states`` target states (s h x h); per
    decoder layer its query / key / value projections from the 2h-wide [embedding; hidden] input
    (2h x (a + 2g) d), the output projection (a d x h), the MLP (3 h f gated, else 2 h f) and two
    norms; the output head over the draft vocabulary (V_draft x h) and its final norm. The
    embedding is the ``target``'s (the engines share it): where pp > 1 the head runs on the last
    stage and the embedding sits on the first, so the last holds its own copy (V h / tp)."""
    m = head.layer
    tp = _f(tp)
    h, a, g = m.hidden_size, m.num_heads, m.num_kv_heads
    dh = m.head_dim or h // a
    mats = 3.0 if m.gated_mlp else 2.0
    per_layer = 2.0 * h * (a + 2.0 * g) * dh + a * dh * h + mats * h * m.ffn_hidden_size
    split = float(head.fused_states) * h * h + m.num_layers * per_layer + m.vocab_size * h
    norms = (2.0 * m.num_layers + 1.0) * h
    own = (split / tp + norms) * ACT_BYTES
    if target is None:
        return own
    return own + np.where(np.asarray(pp) > 1, target.vocab_size * target.hidden_size / tp * ACT_BYTES, 0.0)


def lm_head_dp_share(model: ModelSpec, adp, head_over_attention_dp: bool):
    """Attention-DP ranks whose GPUs share one LM head's vocabulary split (numpy-friendly): adp
    where the engine splits the head over the whole tp x adp group
    (``ServingBehaviour.lm_head_split_over_attention_dp``) and the head is its own matrix, else 1
    (a tied head is the input embedding, vocabulary-parallel over the attention tp: SGLang
    ``lm_head = model.embed_tokens``)."""
    adp = _f(adp)
    if not head_over_attention_dp or model.tied_embeddings:
        return np.ones(adp.shape)
    return np.maximum(adp, 1.0)


def weight_bytes_per_gpu(model: ModelSpec, tp, adp, pp, moe_tp, moe_ep, dense_format: str, expert_format: str,
                         head_over_attention_dp: bool = False):
    """Bytes of weights one GPU holds (the largest stage: ceil(layers / pp) of the layers, in the
    model's mean mix of layer kinds, plus embedding and head). The embedding is V h / tp (16-bit)
    on the first stage; an untied head V h / tp on the last, or V h / (tp adp) with
    ``head_over_attention_dp`` (``lm_head_dp_share``; SGLang ``ParallelLMHead(...,
    use_attn_tp_group=enable_dp_lm_head)``, default False: the vocabulary over the full
    tp_size = tp x adp group). With pp > 1 the largest stage holds the larger of the two."""
    head_dp = lm_head_dp_share(model, adp, head_over_attention_dp)
    tp, pp, moe_tp, moe_ep = _f(tp), _f(pp), _f(moe_tp), _f(moe_ep)
    wd, we = weight_bytes(dense_format, model.int4_group_size), weight_bytes(expert_format, model.int4_group_size)
    h = model.hidden_size
    mats = 3.0 if model.gated_mlp else 2.0
    full, window, linear = layer_counts(model)
    n = float(model.num_layers)
    attn = (full + window) * attention_weights_per_gpu(model, tp)
    if linear:
        attn = attn + linear * linear_attention_weights_per_gpu(model, tp)
    n_moe = float(model.num_moe_layers)
    n_dense = n - n_moe
    dense_ffn = model.ffn_hidden_size
    if model.moe is not None and model.moe.dense_ffn_hidden_size:
        dense_ffn = model.moe.dense_ffn_hidden_size
    dense = n_dense * mats * h * dense_ffn / tp
    layers = (attn + dense) * wd
    if n_moe:
        layers = layers + n_moe * _moe_mlp_bytes(model, tp, moe_tp, moe_ep, wd, we)
    embed = model.vocab_size * h / tp * ACT_BYTES * (1.0 if model.tied_embeddings else 2.0)
    total = layers * largest_stage_share(model.num_layers, pp) + embed * np.where(pp > 1, 0.5 if not model.tied_embeddings
                                                                                  else 1.0, 1.0)
    if not np.any(head_dp > 1.0):
        return total
    # the head's (adp - 1) / adp the group's other ranks hold; with pp > 1 the largest stage keeps
    # the embedding (V h / tp), the larger of the two
    spared = model.vocab_size * h / tp * ACT_BYTES * (1.0 - 1.0 / head_dp)
    return total - np.where(pp > 1, 0.0, spared)


def activation_bytes_per_gpu(model: ModelSpec, tp, adp, moe_ep, token_budget):
    """Activation workspace of a forward over ``token_budget`` tokens on one GPU, bytes."""
    t = _f(token_budget)
    tp = _f(tp)
    h = model.hidden_size
    qkv = (model.num_heads + 2 * model.num_kv_heads) * model.head_dim / tp
    ffn = model.ffn_hidden_size
    if model.moe is not None:
        ffn = max(model.moe.dense_ffn_hidden_size or 0, model.moe.expert_ffn_hidden_size * model.moe.top_k)
    per_token = 3.0 * h + qkv + model.num_heads * model.head_dim / tp + 2.0 * ffn / tp
    return t * per_token * ACT_BYTES


def kv_pool_bytes_per_gpu(hbm_bytes: float, weights, activations, behaviour: ServingBehaviour):
    """Bytes left for the KV cache on one GPU under the stack's memory rule (may be <= 0)."""
    reserve = behaviour.runtime_reserved_gib * GIB
    if behaviour.reserve_covers_activations:
        activations = 0.0
    if behaviour.memory_fraction_of == "free":
        return behaviour.gpu_memory_fraction * (hbm_bytes - _f(weights) - _f(activations) - reserve)
    return behaviour.gpu_memory_fraction * hbm_bytes - _f(weights) - _f(activations) - reserve
