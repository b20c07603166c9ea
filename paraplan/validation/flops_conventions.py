"""FLOP-count conventions that published runs use to report TFLOP/s, MFU and HFU.

Each function returns FLOPs per optimizer step for global batch ``B`` sequences of length
``s``; formulas as the validation README defines them (sources in each docstring).
"""
from __future__ import annotations

from cost_models.params import embedding_params, total_params
from model_specs.model_spec import ModelSpec


def megatron_hw_eq3(m: ModelSpec, B: float) -> float:
    """Narayanan et al. 2021, eq. 3: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)); counts full recompute."""
    s, l, h, V = m.seq_len, m.num_layers, m.hidden_size, m.vocab_size
    return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def korthikanti_model(m: ModelSpec, B: float) -> float:
    """Korthikanti et al. 2022: model FLOPs 72 B s l h^2 (1 + s/(6h) + V/(12 l h))."""
    s, l, h, V = m.seq_len, m.num_layers, m.hidden_size, m.vocab_size
    return 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


def korthikanti_hw(m: ModelSpec, B: float) -> float:
    """Korthikanti et al. 2022: hardware FLOPs with selective recompute, s/(3h) attention term."""
    s, l, h, V = m.seq_len, m.num_layers, m.hidden_size, m.vocab_size
    return 72.0 * B * s * l * h * h * (1 + s / (3 * h) + V / (12 * l * h))


def _megatron_core(m: ModelSpec, B: float, causal: bool) -> float:
    """Megatron-Core model FLOPs: 12 B s l h^2 [(1 + g/a + s/h)(a d / h) + k (f/h) mult + V/(2 l h)].

    MoE layers count the top-k routed plus shared experts; dense layers their own FFN; MLA
    counts its own projections (DeepSeek-V2 section 2.1) in place of the first term. Each
    multi-token-prediction module adds one layer of the last kind, its 2h -> h projection
    (12 B s h^2 for 6 x 2h^2 parameters x tokens) and another output layer (6 B s h V).
    Sliding-window layers count at most the window's keys per query in the score term (how
    Megatron-Bridge counts GPT-OSS from release 26.06; earlier releases counted its gated
    MLP as a plain one and every layer as full attention, 17% fewer FLOPs, and their
    TFLOP/s rows cannot be converted exactly).
    """
    s, l, h, V = m.seq_len, m.num_layers, m.hidden_size, m.vocab_size
    a, g, d = m.num_heads, m.num_kv_heads, m.head_dim
    mult = 1.5 if m.gated_mlp else 1.0
    keys = s / (2.0 if causal else 1.0)      # keys each query attends to, on average
    if m.hybrid_pattern:
        return _megatron_hybrid(m, B, keys)
    if m.sliding_window:
        # windowed layers (GPT-OSS: every other one) attend to at most the window
        frac = m.sliding_window_layer_fraction
        keys = (1.0 - frac) * keys + frac * min(keys, m.sliding_window)
    score = keys / h
    if m.mla is not None:
        ml = m.mla
        qk = ml.qk_nope_head_dim + ml.qk_rope_head_dim
        q = (h * ml.q_lora_rank + ml.q_lora_rank * a * qk) if ml.q_lora_rank else h * a * qk
        kv = h * (ml.kv_lora_rank + ml.qk_rope_head_dim) + ml.kv_lora_rank * a * (ml.qk_nope_head_dim + ml.v_head_dim)
        proj = (q + kv + a * ml.v_head_dim * h) / (2.0 * h * h)   # 12 B s l h^2 * x = 6 * params * tokens
        attn = proj + score * a * (qk + ml.v_head_dim) / (2.0 * h)
    else:
        attn = (1 + g / a + score) * (a * d / h)
    if m.moe is not None:
        moe = m.moe
        shared_f = moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size
        moe_term = (moe.top_k * moe.expert_ffn_hidden_size + moe.num_shared_experts * shared_f) / h * mult
        if moe.latent_size:
            # LatentMoE: the routed experts run latent_size wide, plus the h x latent projections
            # down and up (Megatron-LM training.py num_floating_point_operations, "Routed experts
            # run on moe_latent_size" / "Up proj and down proj", at d98e8a64dd: 6 h (k f e r / h
            # + 2 r) a token with e = 2 mult, which is 12 h^2 (k f mult r / h + r) / h here)
            routed = moe.top_k * moe.expert_ffn_hidden_size * mult * moe.latent_size / h + moe.latent_size
            moe_term = (routed + moe.num_shared_experts * shared_f * mult) / h
        dense_f = moe.dense_ffn_hidden_size or m.ffn_hidden_size
        dense_term = dense_f / h * mult
        mlp = (m.num_moe_layers * moe_term + m.num_dense_layers * dense_term) / l
        last_mlp = moe_term if m.num_moe_layers else dense_term
    else:
        mlp = last_mlp = m.ffn_hidden_size / h * mult
    main = 12.0 * B * s * l * h * h * (attn + mlp + V / (2.0 * l * h))
    mtp = m.mtp_layers * 12.0 * B * s * h * h * (attn + last_mlp + 1.0 + V / (2.0 * h))
    return main + mtp


def _megatron_hybrid(m: ModelSpec, B: float, keys: float) -> float:
    """Model FLOPs per step of a hybrid pattern as Megatron-Bridge counts them
    (``hybrid_flops`` in src/megatron/bridge/training/utils/flop_utils.py@067f987): 3 x the
    forward, per token

    * Mamba layer: 2h(2 d_in + 2 G N + H) + 7 d_in N + 2 d_in h, with d_in taken as 2h (the
      counter's expand-2 assumption, not H P: Nemotron 3 Nano's 5376 against its 4096, so this
      is the source's convention, not the FLOPs executed; ``cost_models.mamba`` counts those);
    * attention layer: 4 h (a d)(1 + g/a) + 4 (a d) x keys, keys the keys each query sees: s,
      or s/2 for the causal convention (the counter's 2 (a d) s is the causal form);
    * MLP layer: 4 h f m; MoE layer: 4 h m (k f_expert + shared f_shared), or with LatentMoE
      (latent width r) 4 r m k f_expert + 4 h r + 4 h m shared f_shared (``moe_layer_flops``);
    * logits: 2 h V.
    """
    h, V = m.hidden_size, m.vocab_size
    n = m.hybrid_counts()
    mult = 1.5 if m.gated_mlp else 1.0
    ad = m.num_heads * m.head_dim
    per_token = n["attention"] * (4.0 * h * ad * (1.0 + m.num_kv_heads / m.num_heads) + 4.0 * ad * keys)
    per_token += n["mlp"] * 4.0 * h * m.ffn_hidden_size * mult
    if m.mamba is not None:
        mb, d_in = m.mamba, 2.0 * h
        per_token += n["mamba"] * (2.0 * h * (2.0 * d_in + 2.0 * mb.num_groups * mb.state_size + mb.num_heads)
                                   + 7.0 * d_in * mb.state_size + 2.0 * d_in * h)
    if m.moe is not None:
        moe = m.moe
        shared = moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size)
        width = moe.latent_size or h           # LatentMoE's routed experts run latent_size wide
        routed = 4.0 * width * mult * moe.top_k * moe.expert_ffn_hidden_size
        if moe.latent_size:
            routed += 4.0 * h * moe.latent_size      # the projections down to and up from the latent
        per_token += n["moe"] * (routed + 4.0 * h * mult * shared)
    per_token += 2.0 * h * V
    return 3.0 * B * m.seq_len * per_token


def megatron_core_model(m: ModelSpec, B: float) -> float:
    return _megatron_core(m, B, causal=False)


def megatron_core_model_causal(m: ModelSpec, B: float) -> float:
    return _megatron_core(m, B, causal=True)


def palm_6n_attn(m: ModelSpec, B: float) -> float:
    """PaLM appendix B (Chowdhery et al. 2022, arXiv 2204.02311): per token 6 N + 12 L H Q T,
    N the parameters that take part in matmuls, L layers, H attention heads, Q the head
    dimension, T the sequence length: the Q.K^T and A.V matmuls, 2 x 2 H Q T FLOPs a token
    forward, x 3 with backward, over the full sequence. H Q is ``num_heads x head_dim``, not
    ``hidden_size`` (Qwen3-32B: 64 x 128 = 8192 against hidden 5120). With multi-latent
    attention the two matmuls have different widths: Q.K^T ``head_dim`` (= qk_nope + qk_rope)
    and A.V ``mla.v_head_dim`` a head, so the term is 6 L H (head_dim + v_head_dim) T, which is
    12 L H Q T when the two are equal.

    The input embedding is a table lookup, not a matmul, so an untied input table is not in
    N; a tied one is, once, as the output layer's matrix. (The validation README notes that
    sources differ here; llm-foundry's MFU and tokens/s columns agree to 0.6% on average over
    its 110 runs with this N, and differ by up to 29% on its small models with the input table
    counted as well.)
    """
    N = total_params(m, active=True) - (0 if m.tied_embeddings else embedding_params(m))
    v_head_dim = m.mla.v_head_dim if m.mla is not None else m.head_dim
    attn = 6.0 * m.num_layers * m.num_heads * (m.head_dim + v_head_dim) * m.seq_len
    return B * m.seq_len * (6.0 * N + attn)


CONVENTIONS = {
    "megatron_hw_eq3": megatron_hw_eq3,
    "korthikanti_model": korthikanti_model,
    "korthikanti_hw": korthikanti_hw,
    "megatron_core_model": megatron_core_model,
    "megatron_core_model_causal": megatron_core_model_causal,
    "palm_6n_attn": palm_6n_attn,
}
