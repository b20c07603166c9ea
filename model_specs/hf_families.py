"""One builder per Hugging Face ``model_type`` family: each reads its family's keys from a
``ConfigReader`` and returns the ``ModelSpec`` fields (``FAMILIES``, which ``model_specs/hf_config.py``
dispatches on; the keys each reads are listed in that module's docstring).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from hardware_specs.errors import InputError, shown
from model_specs.hf_config_fields import (ConfigReader, attention_head_fields, dense_ffn_width, fraction_field,
                                          moe_layer_layout, rotary_fraction_field, sliding_window_fields,
                                          stated_head_dim, training_seq_len)
from model_specs.model_spec import MambaSpec, MLASpec, MoESpec, check_size

def _llama_like(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    # bounded before the per-layer layouts below walk the layers
    num_layers = check_size(f"{cfg.where}.num_hidden_layers", cfg.get_int("num_hidden_layers"),
                            size="num_layers")
    window, fraction = sliding_window_fields(cfg, num_layers, family)
    return dict(
        num_layers=num_layers,
        hidden_size=cfg.get_int("hidden_size"),
        **attention_head_fields(cfg),
        ffn_hidden_size=cfg.get_int("intermediate_size"),
        vocab_size=cfg.get_int("vocab_size"),
        seq_len=training_seq_len(cfg, seq_len),
        gated_mlp=True,
        position_embedding="rope",
        normalization="rmsnorm",
        tied_embeddings=cfg.get_bool("tie_word_embeddings", False),
        sliding_window=window,
        sliding_window_layer_fraction=fraction,
        # share of each head that RoPE rotates: transformers' RoPE initialisation reads
        # partial_rotary_factor for every family (Nemotron / Minitron 0.5); Megatron's --rotary-percent
        rotary_fraction=rotary_fraction_field(cfg),
        # Qwen2 always biases q/k/v (transformers' Qwen2Attention); others say attention_bias
        qkv_bias=True if family in ("qwen2", "qwen2_moe") else cfg.get_bool("attention_bias", False),
        linear_bias=cfg.get_bool("mlp_bias", False) and cfg.get_bool("attention_bias", False),
    )


def _nemotron(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    fields = _llama_like(cfg, family, seq_len)
    fields["head_dim"] = stated_head_dim(cfg, "head_dim", "kv_channels")
    fields["gated_mlp"] = False      # squared-ReLU two-matrix MLP
    # transformers NemotronConfig(partial_rotary_factor=0.5): RoPE on half of each head unless stated
    # (NeMo's NemotronConfig rotary_percent 0.5 likewise); was read as full rotation
    fields["rotary_fraction"] = rotary_fraction_field(cfg, default=0.5)
    fields.update(normalization="layernorm", activation="squared_relu")
    return fields


#: transformers NemotronHConfig ``layers_block_type`` names -> ``HYBRID_SYMBOLS``
_NEMOTRON_H_BLOCKS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _nemotron_h(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    """Nemotron-H / Nemotron 3 (model_type nemotron_h), a hybrid Mamba-Transformer: the layer list
    from ``hybrid_override_pattern`` (M Mamba-2, * attention, - MLP, E MoE) or ``layers_block_type``
    (mamba / attention / mlp / moe, newer configs); squared-ReLU MLPs of ``intermediate_size``,
    attention without positions, the Mamba-2 mixer of ``mamba_num_heads`` x ``mamba_head_dim``,
    ``ssm_state_size``, ``n_groups``, ``conv_kernel``, ``chunk_size``; MoE blocks of
    ``n_routed_experts`` top-``num_experts_per_tok`` of ``moe_intermediate_size``, shared experts of
    ``moe_shared_expert_intermediate_size``, routed at ``moe_latent_size`` when given (LatentMoE),
    sigmoid-scored, as the nemotron-h-* / nemotron-3-nano presets. The MTP block of Nemotron 3
    Super / Ultra (num_nextn_predict_layers) is not modelled: ModelSpec has no MTP for hybrids."""
    pattern = cfg.data.get("hybrid_override_pattern")
    if pattern is not None and not isinstance(pattern, str):      # was reported as missing
        raise InputError(f"{cfg.where}.hybrid_override_pattern", f"expected text such as 'M*M-', got {str(pattern)[:80]}",
                         "write the checkpoint's pattern (M = Mamba, * = attention, - = MLP, E = MoE)")
    blocks = cfg.data.get("layers_block_type")
    if pattern is None and blocks is not None and not isinstance(blocks, list):
        raise InputError(f"{cfg.where}.layers_block_type", f"expected a list of block names, got {str(blocks)[:80]}",
                         "list one of " + ", ".join(_NEMOTRON_H_BLOCKS) + " per layer")
    if pattern is None and blocks is not None:
        # a list or mapping entry is not a block name (and not hashable: it raised TypeError)
        unknown = sorted({str(b)[:40] for b in blocks if not isinstance(b, str) or b not in _NEMOTRON_H_BLOCKS})
        if unknown:
            raise InputError(f"{cfg.where}.layers_block_type", f"unknown block {unknown[0]!r}",
                             "use " + ", ".join(_NEMOTRON_H_BLOCKS))
        pattern = "".join(_NEMOTRON_H_BLOCKS[b] for b in blocks)
    if not pattern:
        raise InputError(f"{cfg.where}.hybrid_override_pattern", "missing",
                         "give the layer pattern (M = Mamba, * = attention, - = MLP, E = MoE)")
    num_layers = cfg.get_int("num_hidden_layers", default=len(pattern))
    hidden = cfg.get_int("hidden_size")
    fields = dict(num_layers=num_layers, hybrid_pattern=pattern, hidden_size=hidden, **attention_head_fields(cfg),
                  ffn_hidden_size=cfg.get_int("intermediate_size"), vocab_size=cfg.get_int("vocab_size"),
                  seq_len=training_seq_len(cfg, seq_len), gated_mlp=False, activation="squared_relu",
                  position_embedding="none", normalization="rmsnorm",
                  linear_bias=cfg.get_bool("mlp_bias", False) and cfg.get_bool("attention_bias", False),
                  tied_embeddings=cfg.get_bool("tie_word_embeddings", False))
    fields["head_dim"] = stated_head_dim(cfg, "head_dim", "attention_head_dim")
    if "M" in pattern:
        fields["mamba"] = MambaSpec(num_heads=cfg.get_int("mamba_num_heads"), head_dim=cfg.get_int("mamba_head_dim"),
                                    state_size=cfg.get_int("ssm_state_size"), num_groups=cfg.get_int("n_groups"),
                                    conv_kernel=cfg.get_int("conv_kernel", default=4),
                                    chunk_size=cfg.get_int("chunk_size", default=128))
    if "E" in pattern:
        shared = cfg.get_int("moe_shared_expert_intermediate_size", default=0)
        fields["moe"] = MoESpec(num_experts=cfg.get_int("n_routed_experts"), top_k=cfg.get_int("num_experts_per_tok"),
                                expert_ffn_hidden_size=cfg.get_int("moe_intermediate_size"),
                                num_shared_experts=cfg.get_int("n_shared_experts", default=1) if shared else 0,
                                shared_expert_ffn_hidden_size=shared, router_score="sigmoid",
                                latent_size=cfg.get_int("moe_latent_size", default=0),
                                topk_renormalized=cfg.get_bool("norm_topk_prob", True),
                                # the gate's e_score_correction_bias (Megatron-Bridge nemotron_h_bridge.py
                                # sets moe_router_enable_expert_bias) and routed_scaling_factor
                                expert_bias=True,
                                topk_scaling_factor=cfg.get_float("routed_scaling_factor", 1.0))
    return fields


def _mixtral(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    fields = _llama_like(cfg, family, seq_len)
    fields["moe"] = MoESpec(num_experts=cfg.get_int("num_local_experts"),
                            top_k=cfg.get_int("num_experts_per_tok"),
                            expert_ffn_hidden_size=fields["ffn_hidden_size"])
    return fields


def _minimax_m2(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    """MiniMax-M2 / M2.5 / M2.7 (model_type minimax_m2): Mixtral's layout with GQA heads of an
    explicit ``head_dim`` and a sigmoid-scored router (``scoring_func``); RoPE over ``rotary_dim``
    of each head (64 of 128). Every layer must be softmax attention (``attn_type_list`` all 1;
    0 is MiniMax-01's lightning attention) and no shared expert (``shared_intermediate_size`` 0),
    as in the released M2 configs; anything else is refused. The MTP modules (num_mtp_modules 3)
    are not modelled, as in the minimax-m2.5 preset."""
    fields = _mixtral(cfg, family, seq_len)
    kinds = cfg.get_int_list("attn_type_list")
    if cfg.has("attn_type_list") and len(kinds) != fields["num_layers"]:
        # one kind per layer: a list of [1] (or 100 entries) for 4 layers was read as all softmax
        raise InputError(f"{cfg.where}.attn_type_list", f"expected one attention kind per layer ({fields['num_layers']}), "
                         f"got {len(kinds)}", "write the checkpoint's attn_type_list")
    other = sorted({k for k in kinds if k not in (0, 1)})
    if other:           # was reported as lightning attention
        raise InputError(f"{cfg.where}.attn_type_list", f"unknown attention kind {other[0]} (1 = softmax, 0 = lightning)",
                         "write the checkpoint's attn_type_list")
    if any(k != 1 for k in kinds):
        raise InputError(f"{cfg.where}.attn_type_list", "lightning (linear) attention layers (0) are not modelled",
                         "write a model YAML file with linear_attention")
    if cfg.get_int("shared_intermediate_size", default=0):
        raise InputError(f"{cfg.where}.shared_intermediate_size", "a MiniMax shared expert is not read",
                         "write a model YAML file with moe.num_shared_experts")
    score = cfg.data.get("scoring_func", "softmax")
    if score not in ("softmax", "sigmoid"):
        raise InputError(f"{cfg.where}.scoring_func", f"unknown router scoring {score!r}", "use softmax or sigmoid")
    # use_routing_bias: transformers MiniMaxM2SparseMoeBlock adds e_score_correction_bias to the
    # sigmoid scores for the top-k choice only (aux-loss-free balancing); no scaling, no groups
    bias = cfg.get_bool("use_routing_bias", False)
    if bias and score != "sigmoid":
        raise InputError(f"{cfg.where}.use_routing_bias", f"a routing bias is read with sigmoid scores, got {score}",
                         "write the checkpoint's scoring_func")
    fields["moe"] = replace(fields["moe"], router_score=score, expert_bias=bias)
    # the sizes rotary_dim is checked against, checked first (0 heads raised ZeroDivisionError; a
    # negative head_dim or hidden_size was reported as a wrong rotary_dim)
    for key, value, least in (("num_attention_heads", fields["num_heads"], 1), ("hidden_size", fields["hidden_size"], 1),
                              ("head_dim", fields["head_dim"], 0)):
        if value < least:
            raise InputError(f"{cfg.where}.{key}", f"must be >= {least}, got {value}", "write the checkpoint's value")
    head_dim = fields["head_dim"] or fields["hidden_size"] // fields["num_heads"]
    if cfg.has("rotary_dim") and not cfg.has("partial_rotary_factor"):
        rotary = cfg.get_int("rotary_dim")
        if not 0 < rotary <= head_dim:
            raise InputError(f"{cfg.where}.rotary_dim", f"must be 1 to head_dim {head_dim}, got {rotary}")
        fields["rotary_fraction"] = rotary / head_dim
    return fields


def _llama4(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    """Llama 4's language model (model_type llama4_text, the ``text_config`` of Llama-4-Scout /
    Maverick), as transformers' Llama4TextConfig lays it out: MoE layers at ``moe_layers``, else
    every ``interleave_moe_layer_step``-th layer from step - 1 (Maverick: 1, 3, ..., 47); each has
    ``num_local_experts`` routed experts and one always-on shared expert, all ``intermediate_size``
    wide, sigmoid-scored; the other layers a dense MLP of ``intermediate_size_mlp``. The RoPE layers
    (``no_rope_layers`` 1, by default all but every ``no_rope_layer_interval``-th = 4th) attend within
    ``attention_chunk_size`` chunks, modelled as a window of that size, as the llama4-* presets do."""
    fields = _llama_like(cfg, family, seq_len)
    num_layers = fields["num_layers"]
    dense = cfg.get_int("intermediate_size_mlp")
    expert = cfg.get_int("intermediate_size")
    fields["ffn_hidden_size"] = dense
    if cfg.has("moe_layers"):
        moe_layers = cfg.get_int_list("moe_layers")
    else:
        step = cfg.get_int("interleave_moe_layer_step", default=1)
        if step < 1:
            raise InputError(f"{cfg.where}.interleave_moe_layer_step", f"must be >= 1, got {step}")
        moe_layers = list(range(step - 1, num_layers, step))
    outside = sorted(i for i in moe_layers if not 0 <= i < num_layers)
    if outside:
        raise InputError(f"{cfg.where}.moe_layers", f"layer {outside[0]} is not one of the {num_layers} layers",
                         f"list layer indices 0 to {num_layers - 1}")
    first_dense, freq = moe_layer_layout(num_layers, moe_layers)
    fields["moe"] = MoESpec(num_experts=cfg.get_int("num_local_experts"), top_k=cfg.get_int("num_experts_per_tok"),
                            expert_ffn_hidden_size=expert, num_shared_experts=1, shared_expert_ffn_hidden_size=expert,
                            first_dense_layers=first_dense, dense_ffn_hidden_size=dense_ffn_width(fields, first_dense, freq),
                            moe_layer_frequency=freq, router_score="sigmoid", probs_on_input=True,
                            # transformers Llama4TextMoe: the sigmoid of the top-1 logit, not divided by a sum
                            topk_renormalized=False)
    chunk = cfg.get_int("attention_chunk_size", default=0)
    if chunk < 0:
        raise InputError(f"{cfg.where}.attention_chunk_size", f"must be a number of tokens >= 0, got {chunk}")
    layer_types = cfg.data.get("layer_types")
    if isinstance(layer_types, list) and layer_types:             # checked by sliding_window_fields
        chunked = sum(1 for t in layer_types if t == "chunked_attention")
    elif cfg.has("no_rope_layers"):
        flags = cfg.get_int_list("no_rope_layers")
        if len(flags) != num_layers or any(f not in (0, 1) for f in flags):
            raise InputError(f"{cfg.where}.no_rope_layers", f"expected {num_layers} flags of 0 or 1, got {str(flags)[:80]}",
                             "write the checkpoint's no_rope_layers")
        chunked = sum(flags)
    else:
        interval = cfg.get_int("no_rope_layer_interval", default=4)
        if interval < 1:
            raise InputError(f"{cfg.where}.no_rope_layer_interval", f"must be >= 1, got {interval}")
        chunked = sum(1 for i in range(num_layers) if (i + 1) % interval != 0)
    if chunk and chunked:
        fields["sliding_window"], fields["sliding_window_layer_fraction"] = chunk, chunked / num_layers
    return fields


#: model_types whose shared expert is scaled by a sigmoid gate (``MoESpec.shared_expert_gate``)
_SHARED_EXPERT_GATE_FAMILIES = ("qwen2_moe", "qwen3_next", "qwen3_5_moe_text")


def _qwen_moe(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    fields = _llama_like(cfg, family, seq_len)
    num_layers = fields["num_layers"]
    step = cfg.get_int("decoder_sparse_step", default=1)
    if step < 1:
        raise InputError(f"{cfg.where}.decoder_sparse_step", f"must be >= 1, got {step}")
    dense_only = set(cfg.get_int_list("mlp_only_layers"))
    outside = sorted(i for i in dense_only if not 0 <= i < num_layers)
    if outside:         # a layer index the model does not have was ignored without a word
        raise InputError(f"{cfg.where}.mlp_only_layers", f"layer {outside[0]} is not one of the {num_layers} layers",
                         f"list layer indices 0 to {num_layers - 1}")
    moe_layers = [i for i in range(num_layers) if (i + 1) % step == 0 and i not in dense_only]
    first_dense, freq = moe_layer_layout(num_layers, moe_layers)
    shared = cfg.get_int("shared_expert_intermediate_size", default=0)
    fields["moe"] = MoESpec(
        num_experts=cfg.get_int("num_experts"),
        top_k=cfg.get_int("num_experts_per_tok"),
        expert_ffn_hidden_size=cfg.get_int("moe_intermediate_size"),
        num_shared_experts=1 if shared > 0 else 0,
        shared_expert_ffn_hidden_size=shared,
        first_dense_layers=first_dense,
        dense_ffn_hidden_size=dense_ffn_width(fields, first_dense, freq),
        moe_layer_frequency=freq,
        # absent: false, transformers' Qwen2MoeConfig / Qwen3MoeConfig default (softmax over all experts)
        topk_renormalized=cfg.get_bool("norm_topk_prob", False),
        # the shared expert's sigmoid gate: built unconditionally, no config key, by Qwen2-MoE's,
        # Qwen3-Next's and Qwen3.5-MoE's sparse blocks (transformers Qwen2MoeSparseMoeBlock /
        # Qwen3NextSparseMoeBlock: shared_expert_gate = nn.Linear(hidden_size, 1, bias=False));
        # Qwen3-MoE has no shared expert
        shared_expert_gate=shared > 0 and family in _SHARED_EXPERT_GATE_FAMILIES,
    )
    return fields


def _deepseek(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    fields = _llama_like(cfg, family, seq_len)
    num_layers = fields["num_layers"]
    # Multi-latent attention: every query head has its own (decompressed) key and value.
    fields["num_kv_heads"] = fields["num_heads"]
    nope = cfg.get_int("qk_nope_head_dim")
    rope = cfg.get_int("qk_rope_head_dim")
    fields["mla"] = MLASpec(q_lora_rank=cfg.get_int("q_lora_rank", default=0),
                            kv_lora_rank=cfg.get_int("kv_lora_rank"),
                            qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                            v_head_dim=cfg.get_int("v_head_dim"))
    fields["head_dim"] = nope + rope
    # multi-token-prediction modules shipped with the weights (DeepSeek-V3: 1)
    fields["mtp_layers"] = cfg.get_int("num_nextn_predict_layers", default=0)
    if cfg.has("n_routed_experts"):
        # absent: sigmoid for deepseek_v3 / kimi_k2, whose transformers router (DeepseekV3TopkRouter)
        # always scores by sigmoid and has no scoring_func field; softmax for DeepSeek-V2's
        score = cfg.data.get("scoring_func", "sigmoid" if family in ("deepseek_v3", "kimi_k2") else "softmax")
        if score not in ("softmax", "sigmoid"):
            raise InputError(f"{cfg.where}.scoring_func", f"unknown router scoring {score!r}",
                             "use softmax or sigmoid")
        first_k = cfg.get_int("first_k_dense_replace", default=0)
        if not 0 <= first_k <= num_layers:
            raise InputError(f"{cfg.where}.first_k_dense_replace", f"must be 0 to the {num_layers} layers, got {first_k}")
        freq = cfg.get_int("moe_layer_freq", default=1)
        if freq < 1:
            raise InputError(f"{cfg.where}.moe_layer_freq", f"must be >= 1, got {freq}")
        moe_layers = [i for i in range(num_layers) if i >= first_k and i % freq == 0]
        first_dense, layout_freq = moe_layer_layout(num_layers, moe_layers)
        expert = cfg.get_int("moe_intermediate_size")
        fields["moe"] = MoESpec(
            num_experts=cfg.get_int("n_routed_experts"),
            top_k=cfg.get_int("num_experts_per_tok"),
            expert_ffn_hidden_size=expert,
            num_shared_experts=cfg.get_int("n_shared_experts", default=0),
            shared_expert_ffn_hidden_size=expert,
            first_dense_layers=first_dense,
            dense_ffn_hidden_size=dense_ffn_width(fields, first_dense, layout_freq),
            moe_layer_frequency=layout_freq,
            router_score=score,
            **_deepseek_router(cfg, family, score),
        )
    return fields


#: DeepSeek ``topk_method`` values: ``greedy`` plain top-k (DeepSeek-V2-Lite), ``group_limited_greedy``
#: top-k within the ``topk_group`` best of ``n_group`` groups (DeepSeek-V2), ``noaux_tc`` that and an
#: aux-loss-free bias (``e_score_correction_bias``) added for the choice (DeepSeek-V3, Kimi K2)
_TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")


def _deepseek_router(cfg: ConfigReader, family: str, score: str) -> dict[str, Any]:
    """The MoESpec router fields of a DeepSeek-family config: ``topk_method`` (absent: ``noaux_tc``
    for deepseek_v3 / kimi_k2, whose transformers router always has the bias, else ``greedy``),
    ``n_group`` / ``topk_group`` (read unless greedy), ``routed_scaling_factor`` (absent: 1) and
    ``norm_topk_prob`` (absent: true for deepseek_v3 / kimi_k2, transformers' DeepseekV3Config
    default; false for deepseek_v2, DeepseekV2Config's)."""
    method = cfg.data.get("topk_method", "noaux_tc" if family in ("deepseek_v3", "kimi_k2") else "greedy")
    if method not in _TOPK_METHODS:
        raise InputError(f"{cfg.where}.topk_method", f"unknown top-k method {str(method)[:40]!r}",
                         "use " + ", ".join(_TOPK_METHODS))
    if method == "noaux_tc" and score != "sigmoid":
        raise InputError(f"{cfg.where}.topk_method", f"noaux_tc's expert bias is read with sigmoid scores, got {score}",
                         "write the checkpoint's scoring_func")
    groups = (1, 1) if method == "greedy" else (cfg.get_int("n_group", default=1), cfg.get_int("topk_group", default=1))
    return dict(expert_bias=method == "noaux_tc", num_groups=groups[0], group_topk=groups[1],
                topk_scaling_factor=cfg.get_float("routed_scaling_factor", 1.0),
                topk_renormalized=cfg.get_bool("norm_topk_prob", family in ("deepseek_v3", "kimi_k2")))


def _gpt_oss(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    fields = _llama_like(cfg, family, seq_len)
    fields["moe"] = MoESpec(num_experts=cfg.get_int("num_local_experts", "num_experts"),
                            top_k=cfg.get_int("experts_per_token", "num_experts_per_tok"),
                            expert_ffn_hidden_size=fields["ffn_hidden_size"])
    fields["linear_bias"] = True     # biased attention and expert projections (model card, section 2)
    fields["glu_clamp_limit"] = cfg.get_float("swiglu_limit", default=0.0)
    return fields


#: GPT-2-era layout: learned absolute positions, LayerNorm, biased linear layers.
_GPT_STYLE = dict(position_embedding="learned", normalization="layernorm", linear_bias=True)


def _gpt2(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    hidden = cfg.get_int("n_embd")
    return dict(num_layers=cfg.get_int("n_layer"), hidden_size=hidden, **attention_head_fields(cfg, "n_head"),
                ffn_hidden_size=cfg.get_int("n_inner", default=4 * hidden), vocab_size=cfg.get_int("vocab_size"),
                seq_len=training_seq_len(cfg, seq_len), tied_embeddings=cfg.get_bool("tie_word_embeddings", True),
                **_GPT_STYLE)


#: the MLP activations of OPT checkpoints: relu (OPTConfig's default, the facebook/opt-* models),
#: gelu (the facebook/galactica-* models, OPT's architecture)
_OPT_ACTIVATIONS = ("relu", "gelu")


def _opt_activation(cfg: ConfigReader) -> str:
    """OPT's ``activation_function`` (relu when absent); any other value was read as gelu."""
    value = cfg.data.get("activation_function", "relu")
    if not isinstance(value, str) or value not in _OPT_ACTIVATIONS:
        raise InputError(f"{cfg.where}.activation_function", f"unknown OPT activation {str(value)[:40]!r}",
                         "use " + " or ".join(_OPT_ACTIVATIONS))
    return value


def _opt(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    hidden = cfg.get_int("hidden_size")
    # OPTConfig's word_embed_proj_dim (hidden_size when absent): a narrower one makes the token
    # embedding and the LM head that wide, with project_in / project_out linear layers to and from
    # the hidden size (transformers OPTDecoder; facebook/opt-350m: 512 against 1024). A ModelSpec's
    # embedding is hidden_size wide, so reading it as such overstated opt-350m's parameters by 7.8%.
    proj = cfg.get_int("word_embed_proj_dim", default=hidden)
    if proj != hidden:
        raise InputError(f"{cfg.where}.word_embed_proj_dim", f"an embedding {proj} wide, projected to and from "
                         f"hidden_size {hidden}, is not modelled (paraplan's embedding is hidden_size wide)",
                         "use an OPT checkpoint whose word_embed_proj_dim equals hidden_size")
    return dict(num_layers=cfg.get_int("num_hidden_layers"), hidden_size=hidden,
                **attention_head_fields(cfg), ffn_hidden_size=cfg.get_int("ffn_dim"), vocab_size=cfg.get_int("vocab_size"),
                seq_len=training_seq_len(cfg, seq_len), tied_embeddings=cfg.get_bool("tie_word_embeddings", True),
                **{**_GPT_STYLE, "linear_bias": cfg.get_bool("enable_bias", True)},
                activation=_opt_activation(cfg))


def _bloom(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    hidden = cfg.get_int("hidden_size", "n_embed")
    return dict(num_layers=cfg.get_int("n_layer", "num_hidden_layers"), hidden_size=hidden,
                **attention_head_fields(cfg, "n_head"), ffn_hidden_size=4 * hidden, vocab_size=cfg.get_int("vocab_size"),
                seq_len=training_seq_len(cfg, seq_len), tied_embeddings=cfg.get_bool("tie_word_embeddings", True),
                **{**_GPT_STYLE, "position_embedding": "alibi"})


def _gpt_neox(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    return dict(num_layers=cfg.get_int("num_hidden_layers"), hidden_size=cfg.get_int("hidden_size"),
                **attention_head_fields(cfg), ffn_hidden_size=cfg.get_int("intermediate_size"),
                vocab_size=cfg.get_int("vocab_size"), seq_len=training_seq_len(cfg, seq_len),
                tied_embeddings=cfg.get_bool("tie_word_embeddings", False),
                **{**_GPT_STYLE, "position_embedding": "rope"}, rotary_fraction=fraction_field(cfg, "rotary_pct"),
                # transformers GPTNeoXConfig ``use_parallel_residual`` (default true; Pythia and
                # GPT-NeoX-20B true): GPTNeoXLayer's attention and MLP read their own norms
                # (input_layernorm, post_attention_layernorm) of the same x
                parallel_attention_mlp=cfg.get_bool("use_parallel_residual", True))


#: MPT's attention kinds -> key/value heads (llm-foundry llmfoundry/models/layers/attention.py:
#: MultiheadAttention, MultiQueryAttention, GroupedQueryAttention, which needs attn_config.kv_n_heads)
_MPT_ATTENTION = ("multihead_attention", "multiquery_attention", "grouped_query_attention")
#: MPT's dense MLPs (llm-foundry llmfoundry/models/layers/ffn.py, registered ffn types): mptmlp
#: (up, act, down), mptglu (act(gate) * up, then down: three matrices), te_ln_mlp (Transformer
#: Engine's LayerNormMLP: mptmlp's two matrices, GELU); the MoE types (torch_dmoe, mb_moe, mb_dmoe)
#: are not read
_MPT_FFNS = ("mptmlp", "mptglu", "te_ln_mlp")
#: ffn_act_fn name (a torch.nn.functional function; llm-foundry's default gelu) -> activation of a
#: plain / a gated (mptglu) MLP
_MPT_ACTIVATIONS = {"gelu": ("gelu", "geglu"), "relu": ("relu", None), "silu": (None, "swiglu")}


def _mpt_section(cfg: ConfigReader, key: str) -> ConfigReader:
    """``attn_config`` / ``ffn_config`` as a reader (empty when absent)."""
    value = cfg.data.get(key)
    if value is not None and not isinstance(value, dict):
        raise InputError(f"{cfg.where}.{key}", f"expected a mapping, got {shown(str(value)[:40])}", f"write the checkpoint's {key}")
    return ConfigReader(value or {}, f"{cfg.where}.{key}")


def _mpt_text(section: ConfigReader, key: str, default: str, allowed) -> str:
    value = section.data.get(key, default)
    if not isinstance(value, str) or value not in allowed:
        raise InputError(f"{section.where}.{key}", f"unknown MPT {key} {str(value)[:40]!r}",
                         "use " + ", ".join(allowed) + ", or write a model YAML file")
    return value


def _mpt(cfg: ConfigReader, family: str, seq_len: int | None) -> dict[str, Any]:
    """MPT (model_type mpt) as llm-foundry's MPTConfig lays it out (llmfoundry/models/mpt/
    configuration_mpt.py; defaults in llmfoundry/models/utils/config_defaults.py): attn_config.attn_type
    multi-head, multi-query or grouped-query (kv_n_heads), positions learned, ALiBi or RoPE
    (attn_config.rope, rope_theta, default 10000), attn_config.sliding_window_size (-1 = none) on every
    layer; ffn_config.ffn_type mptmlp, mptglu (gated) or te_ln_mlp of ffn_config.ffn_hidden_size,
    else int(d_model * expansion_ratio), which llm-foundry's resolve_ffn_hidden_size refuses unless
    whole (a ratio of 3.5 is allowed); activation ffn_config.ffn_act_fn.name (gelu); norm_type's
    layernorm or rmsnorm; no_bias, with attention_bias for the qkv projection. Per-block overrides
    (block_overrides) and mixture-of-experts ffn types are refused."""
    hidden = cfg.get_int("d_model")
    attn, ffn = _mpt_section(cfg, "attn_config"), _mpt_section(cfg, "ffn_config")
    if cfg.data.get("block_overrides"):
        raise InputError(f"{cfg.where}.block_overrides", "per-block MPT overrides are not read",
                         "write a model YAML file with the ModelSpec fields")
    heads = attention_head_fields(cfg, "n_heads")
    kind = _mpt_text(attn, "attn_type", "multihead_attention", _MPT_ATTENTION)
    if kind == "grouped_query_attention":
        if not attn.has("kv_n_heads"):     # llm-foundry's GroupedQueryAttention has no default
            raise InputError(f"{attn.where}.kv_n_heads", "missing for grouped_query_attention",
                             "add the checkpoint's kv_n_heads")
        heads["num_kv_heads"] = attn.get_int("kv_n_heads")
    else:
        heads["num_kv_heads"] = 1 if kind == "multiquery_attention" else heads["num_heads"]
    ffn_type = _mpt_text(ffn, "ffn_type", "mptmlp", _MPT_FFNS)
    gated = ffn_type == "mptglu"
    if ffn.has("ffn_hidden_size"):
        width = ffn.get_int("ffn_hidden_size")
    else:
        ratio = cfg.get_float("expansion_ratio", 4.0)
        width = int(hidden * ratio)
        if width != hidden * ratio:
            raise InputError(f"{cfg.where}.expansion_ratio", f"d_model {hidden} x {ratio:g} = {hidden * ratio:g} is not "
                             "a whole FFN width (llm-foundry refuses it too)", "write the checkpoint's expansion_ratio")
    act = ffn.data.get("ffn_act_fn")
    act_name = "gelu"
    if act is not None:
        act_name = act.get("name") if isinstance(act, dict) else act
        if ffn_type == "te_ln_mlp":     # llm-foundry's build_te_ln_mlp refuses one
            raise InputError(f"{ffn.where}.ffn_act_fn", "te_ln_mlp takes no activation (Transformer Engine's GELU)",
                             "drop ffn_act_fn")
    activation = _MPT_ACTIVATIONS.get(act_name, (None, None))[gated] if isinstance(act_name, str) else None
    if activation is None:
        usable = [n for n, pair in _MPT_ACTIVATIONS.items() if pair[gated]]
        raise InputError(f"{ffn.where}.ffn_act_fn", f"activation {str(act_name)[:40]!r} is not read for a{' gated' if gated else ''} "
                         f"{ffn_type} MLP", "use name " + " or ".join(usable))
    norm = _mpt_text(cfg, "norm_type", "low_precision_layernorm", _MPT_NORMS)
    no_bias = cfg.get_bool("no_bias", False)
    qkv_bias = cfg.get_bool("attention_bias", not no_bias)
    if not no_bias and not qkv_bias:
        raise InputError(f"{cfg.where}.attention_bias", "biased layers with an unbiased qkv projection are not modelled",
                         "write a model YAML file with linear_bias / qkv_bias")
    fields = dict(num_layers=cfg.get_int("n_layers"), hidden_size=hidden, **heads,
                  ffn_hidden_size=width, vocab_size=cfg.get_int("vocab_size"), gated_mlp=gated, activation=activation,
                  seq_len=training_seq_len(cfg, seq_len), tied_embeddings=cfg.get_bool("tie_word_embeddings", True),
                  position_embedding=_mpt_positions(cfg), normalization="rmsnorm" if "rmsnorm" in norm else "layernorm",
                  linear_bias=not no_bias, qkv_bias=qkv_bias)
    if fields["position_embedding"] == "rope":
        fields["rope_theta"] = attn.get_float("rope_theta", 10000.0)
    window = attn.get_int("sliding_window_size", default=-1)
    if window != -1:
        if window < 1:
            raise InputError(f"{attn.where}.sliding_window_size", f"must be -1 (none) or a number of tokens >= 1, got {window}")
        fields["sliding_window"], fields["sliding_window_layer_fraction"] = window, 1.0
    return fields


#: norm_type values of llm-foundry's norm registry (llmfoundry/models/layers/norm.py)
_MPT_NORMS = ("layernorm", "low_precision_layernorm", "rmsnorm", "low_precision_rmsnorm", "triton_rmsnorm")


def _mpt_positions(cfg: ConfigReader) -> str:
    attn = cfg.data.get("attn_config") or {}
    if isinstance(attn, dict) and attn.get("alibi"):
        return "alibi"
    if isinstance(attn, dict) and attn.get("rope"):
        return "rope"
    return "learned" if cfg.get_bool("learned_pos_emb", True) else "none"



FAMILIES: dict[str, Callable[[ConfigReader, str, int | None], dict[str, Any]]] = {
    "llama": _llama_like, "mistral": _llama_like, "qwen2": _llama_like, "qwen3": _llama_like,
    # Llama's parameter tensors under other names: Phi-3 / Phi-4 fuse qkv and gate/up (transformers
    # Phi3Attention qkv_proj, Phi3MLP gate_up_proj); OLMo 2 moves the norms after each block and
    # adds q/k RMSNorms (Olmo2Attention q_norm, k_norm: 2 x h weights a layer, not counted)
    "phi3": _llama_like, "olmo2": _llama_like,
    "nemotron": _nemotron, "nemotron_h": _nemotron_h,
    "mixtral": _mixtral, "minimax_m2": _minimax_m2, "llama4_text": _llama4,
    "qwen2_moe": _qwen_moe, "qwen3_moe": _qwen_moe,
    # Kimi K2 (model_type kimi_k2) is DeepSeek-V3's architecture (config.json architectures
    # DeepseekV3ForCausalLM) with other sizes (Kimi Team 2025, arXiv 2507.20534, section 2.3)
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek, "kimi_k2": _deepseek,
    "gpt_oss": _gpt_oss,
    "gpt2": _gpt2, "opt": _opt, "bloom": _bloom, "gpt_neox": _gpt_neox, "mpt": _mpt,
}

