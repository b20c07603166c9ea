"""KV-cache (and recurrent-state) bytes per request, per GPU.

Softmax attention keeps, per layer and token, a key and a value per KV head: 2 x g x d
elements (MHA: g = a; GQA: g < a; Ainslie et al. 2023, arXiv 2305.13245). Tensor parallelism
splits the KV heads over the tp GPUs; when tp exceeds g each GPU still holds one head (the
heads are replicated, as vLLM, SGLang and TensorRT-LLM do).

Multi-latent attention keeps one compressed latent of kv_lora_rank plus the decoupled rope key
of qk_rope_head_dim per layer and token, shared by all heads (DeepSeek-V2, arXiv 2405.04434,
section 2.1.2), so tensor parallelism does not split it: every GPU of the group holds it.

Sliding-window layers keep at most ``window`` tokens. Linear-attention layers keep a fixed
recurrent state per request (``LinearAttentionSpec``): value heads x key dim x value dim state
elements plus the causal convolution's last kernel-1 inputs, split over tp by heads.

All functions take numpy arrays or scalars for tp and the context length.
"""
from __future__ import annotations

import numpy as np

from cost_models.params import kv_heads_per_tp_rank
from model_specs.model_spec import ModelSpec


def _f(x):
    return np.asarray(x, dtype=float)


def kv_heads_per_gpu(model: ModelSpec, tp):
    """KV heads one GPU holds under tensor parallelism tp (at least one: replicated above g;
    ``params.kv_heads_per_tp_rank``, as training prices it)."""
    return kv_heads_per_tp_rank(model.num_kv_heads, tp)


def layer_counts(model: ModelSpec) -> tuple[float, float, float]:
    """(full-attention, sliding-window, linear-attention) layer counts (fractional for mixes)."""
    la = model.linear_attention
    linear = model.num_layers * la.layer_fraction if la is not None else 0.0
    softmax = model.num_layers - linear
    window = softmax * model.sliding_window_layer_fraction if model.sliding_window else 0.0
    return softmax - window, window, linear


def kv_bytes_per_token_layer(model: ModelSpec, tp, kv_bytes: float):
    """KV bytes one GPU stores per token for one softmax-attention layer."""
    if model.mla is not None:
        return _f(tp) * 0.0 + (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * kv_bytes
    return 2.0 * kv_heads_per_gpu(model, tp) * model.head_dim * kv_bytes


def linear_state_bytes_per_layer(model: ModelSpec, tp, conv_bytes: float = 2.0):
    """Recurrent-state bytes one GPU stores per request for one linear-attention layer."""
    la = model.linear_attention
    if la is None:
        return _f(tp) * 0.0
    tp = _f(tp)
    state = la.num_value_heads / tp * la.key_head_dim * la.value_head_dim * la.state_bytes
    conv_channels = (2 * la.num_key_heads * la.key_head_dim + la.num_value_heads * la.value_head_dim) / tp
    return state + (la.conv_kernel - 1) * conv_channels * conv_bytes


def largest_stage_share(num_layers: int, pp):
    """Share of a model's layers its largest pipeline stage holds: ceil(L / pp) / L (an 80-layer
    model on pp 3: 27 / 80, not 1 / 3). numpy-friendly in ``pp``."""
    pp = np.maximum(_f(pp), 1.0)
    return np.ceil(num_layers / pp) / float(num_layers)


def kv_bytes_per_request(model: ModelSpec, tp, context_tokens, kv_bytes: float, pp=1):
    """Bytes one GPU holds for one request whose context is ``context_tokens`` long (its share
    of the layers under pipeline parallelism pp, the largest stage's ``largest_stage_share``):
    full layers x context, window layers x min(context, window), linear layers x their fixed
    state."""
    full, window, linear = layer_counts(model)
    per_token = kv_bytes_per_token_layer(model, tp, kv_bytes)
    ctx = _f(context_tokens)
    tokens = full * ctx + (window * np.minimum(ctx, model.sliding_window) if window else 0.0)
    return ((tokens * per_token + linear * linear_state_bytes_per_layer(model, tp))
            * largest_stage_share(model.num_layers, pp))


def kv_held_tokens(context_tokens, block_tokens: int = 1):
    """Tokens' worth of KV cache a request of ``context_tokens`` tokens holds where the engine
    allocates whole blocks of ``block_tokens`` tokens: ceil(context / block) x block (vLLM's
    PagedAttention blocks, Kwon et al. 2023, "Efficient Memory Management for LLM Serving with
    PagedAttention", Sec. 4.1; SGLang pages; TensorRT-LLM ``tokens_per_block``). A block of 1
    is the context itself."""
    ctx = _f(context_tokens)
    if block_tokens <= 1:
        return ctx
    return np.ceil(ctx / block_tokens) * block_tokens


def kv_bytes_per_token_model(model: ModelSpec, kv_bytes: float):
    """KV bytes of one token over all layers of the whole model (one copy, unsplit): what a
    disaggregated prefill worker ships to a decode worker per prompt token (window layers
    counted in full, an upper bound; linear layers excluded: their state is per request)."""
    full, window, _ = layer_counts(model)
    if model.mla is not None:
        per_layer = (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * kv_bytes
    else:
        per_layer = 2.0 * model.num_kv_heads * model.head_dim * kv_bytes
    return (full + window) * per_layer


def kv_shards(model: ModelSpec) -> float:
    """Distinct pieces tensor parallelism cuts a softmax layer's KV cache into: its KV heads
    (tp above them replicates heads, ``kv_heads_per_gpu``), or 1 for MLA, whose latent every tp
    rank holds whole (``kv_bytes_per_token_layer``)."""
    return 1.0 if model.mla is not None else float(model.num_kv_heads)


def linear_state_bytes_model(model: ModelSpec) -> float:
    """Recurrent-state bytes of one request over all linear-attention layers (unsplit)."""
    _, _, linear = layer_counts(model)
    return float(linear * linear_state_bytes_per_layer(model, 1))
