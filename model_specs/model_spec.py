"""Transformer architecture as a frozen value object (dense or mixture-of-experts)."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hardware_specs.errors import InputError, shown

#: largest value of each size (a larger one is a typo): well above every published model (2025:
#: 128 layers, width 18432 / 25600 FFN in Grok-1 class models, 256k vocabularies, 1M-token
#: contexts, 384 experts) and small enough that every count stays exact in int64 and every
#: FLOP, byte and time count finite in float64. Layers: 1,024, above the deepest published
#: transformer (DeepNet's 1,000-layer research models, Wang et al. 2022, arXiv 2203.00555); the
#: planner's stage assignment and schedule peaks grow faster than linearly with the layer count
#: (512 layers on 1,024 GPUs: 10 s; 1,024: 21 s; 2,048: over a minute, which read as a hang)
#: the weight formats a released checkpoint may state (``checkpoint_format``; the serving cost
#: model's ``cost_models.weight_formats.WEIGHT_FORMATS``, which a test holds equal)
CHECKPOINT_FORMATS = ("bf16", "fp16", "fp8", "fp8_block", "nvfp4", "mxfp4", "int4_wo")
SIZE_LIMITS = {"num_layers": 2**10, "hidden_size": 2**22, "num_heads": 2**16, "num_kv_heads": 2**16,
               "ffn_hidden_size": 2**24, "vocab_size": 2**28, "seq_len": 2**30, "head_dim": 2**16,
               "sliding_window": 2**30, "mtp_layers": 2**10, "max_context_tokens": 2**30,
               "num_experts": 2**16, "top_k": 2**16, "expert_ffn_hidden_size": 2**24, "num_shared_experts": 2**16,
               "shared_expert_ffn_hidden_size": 2**24, "first_dense_layers": 2**10, "dense_ffn_hidden_size": 2**24,
               "moe_layer_frequency": 2**16, "latent_size": 2**22, "q_lora_rank": 2**22, "kv_lora_rank": 2**22,
               "qk_nope_head_dim": 2**16, "qk_rope_head_dim": 2**16, "v_head_dim": 2**16,
               "state_size": 2**16, "num_groups": 2**16, "conv_kernel": 2**10, "chunk_size": 2**16}


def check_size(field: str, value, minimum: int = 1, size: str | None = None) -> int:
    """``value`` as an int in [minimum, ``SIZE_LIMITS[size]``] (``size`` defaults to the last part
    of ``field``), else ``InputError`` naming ``field``."""
    name = size or field.rsplit(".", 1)[-1]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(field, f"must be an integer >= {minimum}, got {shown(value)}")
    if value < minimum:
        raise InputError(field, f"must be >= {minimum}, got {value}")
    limit = SIZE_LIMITS.get(name)
    if limit is not None and value > limit:
        raise InputError(field, f"{value:,} is above the largest supported value {limit:,}", "check the number")
    return value


#: position encodings a ``ModelSpec`` may name (``learned``: a learned absolute table, GPT-2/3).
POSITION_EMBEDDINGS = ("rope", "learned", "alibi", "none")
#: YaRN's parameters as ModelSpec fields (config.json rope_scaling keys without the ``rope_`` prefix)
YARN_FIELDS = ("rope_original_max_position_embeddings", "rope_beta_fast", "rope_beta_slow", "rope_mscale",
               "rope_mscale_all_dim")
NORMALIZATIONS = ("rmsnorm", "layernorm")
#: MLP activations; ``swiglu`` / ``geglu`` are gated (three matrices), the others are not.
GATED_ACTIVATIONS = ("swiglu", "geglu")
PLAIN_ACTIVATIONS = ("gelu", "relu", "squared_relu")
ROUTER_SCORES = ("softmax", "sigmoid")


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts part of a model.

    Attributes:
        num_experts: routed experts per MoE layer.
        top_k: routed experts each token goes to.
        expert_ffn_hidden_size: FFN width of one routed expert.
        num_shared_experts: always-on experts (DeepSeek, Qwen2-MoE), each ``shared_expert_ffn_hidden_size`` wide.
        shared_expert_ffn_hidden_size: FFN width of one shared expert (0 = same as a routed one).
        first_dense_layers: leading layers that use a dense MLP (DeepSeek-V3: 3).
        dense_ffn_hidden_size: FFN width of those dense layers (0 = ``ModelSpec.ffn_hidden_size``).
        moe_layer_frequency: every n-th layer (after the dense ones) is MoE (1 = all).
        capacity_factor: expert capacity as a multiple of the even share; 0 = dropless.
        router_score: how the router turns logits into expert weights: ``softmax`` (Mixtral,
            Qwen) or ``sigmoid`` (DeepSeek-V3 report, section 2.1.2). It does not change the
            cost; it names the model a framework must build.
        latent_size: width the routed experts work at (LatentMoE; 0 = the hidden size): each MoE
            layer projects its tokens from the hidden size down to it before dispatch and back
            up after the combine (two latent_size x hidden matrices outside the experts), so the
            experts are latent_size x ffn and tokens travel between GPUs latent_size wide; the
            shared experts stay at the hidden size (Megatron-Core ``moe_latent_size``;
            Megatron-Bridge@067f987 ``training/utils/flop_utils.py`` ``moe_layer_flops`` and
            ``theoretical_memory_utils.py``; NVIDIA Nemotron 3 white paper, arXiv 2512.20856).
        expert_bias: aux-loss-free load balancing (DeepSeek-V3 report, section 2.1.2; config.json
            ``topk_method: noaux_tc`` / ``e_score_correction_bias``, MiniMax-M2 ``use_routing_bias``):
            a per-expert bias added to the scores for the top-k choice only, nudged after each step
            toward even loads (Megatron-LM ``--moe-router-enable-expert-bias``). Sigmoid scores only.
        topk_scaling_factor: what the chosen experts' weights (renormalised or not) are multiplied by
            (config.json ``routed_scaling_factor``; DeepSeek-V3 2.5); 1.0 = none.
        num_groups, group_topk: group-limited routing (config.json ``n_group`` / ``topk_group``;
            DeepSeek-V3 8 / 4): the experts split into ``num_groups`` equal groups, each token picks
            the ``group_topk`` best groups, then its top-k experts among them; 1 / 1 = plain top-k.
            A group is ranked by its best score without ``expert_bias`` (config.json ``topk_method``
            ``group_limited_greedy``, DeepSeek-V2) and by the sum of its two best with it
            (``noaux_tc``, DeepSeek-V3; transformers' modeling_deepseek ``get_topk``).
        topk_renormalized: whether the chosen experts' weights are divided by their sum before
            ``topk_scaling_factor`` (config.json ``norm_topk_prob``; true: Mixtral and gpt-oss, whose
            softmax over the chosen k is the same, Qwen3 MoE, DeepSeek-V3 / R1, Kimi K2; false:
            DeepSeek-V2 and Qwen2-57B-A14B, whose softmax runs over all experts, Grok-1, Llama 4's
            unnormalised sigmoid of its top-1). Megatron-LM softmax routers: ``--moe-router-pre-softmax``
            when false (moe_utils.py ``topk_routing_with_score_function``).
        probs_on_input: the router's weight scales the expert's input instead of its output (Llama 4:
            transformers ``Llama4TextMoe`` multiplies the routed tokens by the score before the
            experts; with a gated expert the two differ). Megatron-LM: ``--moe-apply-probs-on-input``,
            top-1 routers only (megatron/core/transformer/moe/experts.py asserts ``moe_router_topk`` 1).
        None of these changes the cost; they name the router a framework must build.
        shared_expert_gate: the shared experts' output is scaled by a per-token sigmoid gate, a
            hidden x 1 projection (Qwen2-MoE / Qwen1.5-MoE, Qwen3-Next, Qwen3.5: transformers
            ``Qwen2MoeSparseMoeBlock.shared_expert_gate = nn.Linear(hidden_size, 1, bias=False)``,
            ``F.sigmoid(self.shared_expert_gate(x)) * shared_expert_output``, unconditional in
            those classes). Counted as ``hidden`` parameters per MoE layer
            (``cost_models.params.moe_block_params``). Megatron-LM: ``--moe-shared-expert-gate``
            (NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/moe/shared_experts.py
            ``gate_weight`` of shape (1, hidden_size), sigmoid of its product scaling the output).
    """

    num_experts: int
    top_k: int
    expert_ffn_hidden_size: int
    num_shared_experts: int = 0
    shared_expert_ffn_hidden_size: int = 0
    first_dense_layers: int = 0
    dense_ffn_hidden_size: int = 0
    moe_layer_frequency: int = 1
    capacity_factor: float = 0.0
    router_score: str = "softmax"
    latent_size: int = 0
    expert_bias: bool = False
    topk_scaling_factor: float = 1.0
    num_groups: int = 1
    group_topk: int = 1
    topk_renormalized: bool = True
    probs_on_input: bool = False
    shared_expert_gate: bool = False

    def __post_init__(self) -> None:
        if self.router_score not in ROUTER_SCORES:
            raise InputError("moe.router_score", f"unknown router score {self.router_score!r}",
                             "choose one of " + ", ".join(ROUTER_SCORES))
        for name in ("num_experts", "top_k", "expert_ffn_hidden_size", "moe_layer_frequency"):
            check_size(f"moe.{name}", getattr(self, name))
        if self.top_k > self.num_experts:
            raise InputError("moe.top_k", f"{self.top_k} > num_experts {self.num_experts}")
        for name in ("num_shared_experts", "shared_expert_ffn_hidden_size", "first_dense_layers",
                     "dense_ffn_hidden_size", "latent_size"):
            check_size(f"moe.{name}", getattr(self, name), minimum=0)
        cf = self.capacity_factor
        if isinstance(cf, bool) or not isinstance(cf, (int, float)) or not 0 <= cf <= self.num_experts:
            raise InputError("moe.capacity_factor", f"must be between 0 (dropless) and num_experts "
                             f"{self.num_experts}, got {shown(cf)}")
        if not isinstance(self.expert_bias, bool):
            raise InputError("moe.expert_bias", f"must be true or false, got {shown(self.expert_bias)}")
        if not isinstance(self.probs_on_input, bool):
            raise InputError("moe.probs_on_input", f"must be true or false, got {shown(self.probs_on_input)}")
        if not isinstance(self.shared_expert_gate, bool):
            raise InputError("moe.shared_expert_gate", f"must be true or false, got {shown(self.shared_expert_gate)}")
        if self.shared_expert_gate and not self.num_shared_experts:
            raise InputError("moe.shared_expert_gate", "gates the shared experts' output, and num_shared_experts is 0",
                             "set num_shared_experts, or shared_expert_gate: false")
        if not isinstance(self.topk_renormalized, bool):
            raise InputError("moe.topk_renormalized", f"must be true or false, got {shown(self.topk_renormalized)}",
                             "write the checkpoint's config.json norm_topk_prob")
        if self.expert_bias and self.router_score != "sigmoid":
            # Megatron-LM TransformerConfig.__post_init__: the bias is for sigmoid-type scores only
            raise InputError("moe.expert_bias", "aux-loss-free expert bias needs router_score sigmoid, "
                             f"got {self.router_score}", "set router_score: sigmoid or expert_bias: false")
        sf = self.topk_scaling_factor
        if isinstance(sf, bool) or not isinstance(sf, (int, float)) or not (np.isfinite(sf) and 0 < sf <= 1e6):
            raise InputError("moe.topk_scaling_factor", f"must be a finite number > 0, got {shown(sf)}")
        check_size("moe.num_groups", self.num_groups)
        check_size("moe.group_topk", self.group_topk, size="num_groups")
        if self.num_experts % self.num_groups:
            raise InputError("moe.num_groups", f"{self.num_groups} groups do not divide the {self.num_experts} experts")
        if self.group_topk > self.num_groups:
            raise InputError("moe.group_topk", f"{self.group_topk} > num_groups {self.num_groups}")
        if self.group_topk * (self.num_experts // self.num_groups) < self.top_k:
            raise InputError("moe.group_topk", f"{self.group_topk} groups of {self.num_experts // self.num_groups} "
                             f"experts hold fewer than top_k {self.top_k}")


@dataclass(frozen=True)
class MLASpec:
    """DeepSeek multi-latent attention projection sizes (DeepSeek-V2 paper, section 2.1)."""

    q_lora_rank: int          # 0 = no query compression
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def __post_init__(self) -> None:
        check_size("mla.q_lora_rank", self.q_lora_rank, minimum=0)
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            check_size(f"mla.{name}", getattr(self, name))


@dataclass(frozen=True)
class LinearAttentionSpec:
    """Linear-attention (Gated DeltaNet) layers mixed with full attention (Qwen3-Next / Qwen3.5;
    Yang et al. 2025, "Gated Delta Networks", arXiv 2412.06464).

    Such a layer keeps a fixed-size recurrent state per sequence instead of a KV cache that
    grows with the context: ``num_value_heads`` matrices of ``key_head_dim x value_head_dim``
    (plus a short causal convolution over the last ``conv_kernel`` inputs).

    Attributes:
        layer_fraction: share of the layers that are linear attention (Qwen3.5: 3 of every 4,
            ``full_attention_interval`` 4 -> 0.75).
        num_key_heads, key_head_dim: query/key heads and their width.
        num_value_heads, value_head_dim: value heads and their width.
        conv_kernel: causal convolution width over the q, k, v projections.
        state_bytes: bytes per recurrent-state element (4: fp32 state, config ``mamba_ssm_dtype``).
    """

    layer_fraction: float
    num_key_heads: int
    key_head_dim: int
    num_value_heads: int
    value_head_dim: int
    conv_kernel: int = 4
    state_bytes: float = 4.0

    def __post_init__(self) -> None:
        lf = self.layer_fraction
        if isinstance(lf, bool) or not isinstance(lf, (int, float)) or not 0.0 < lf < 1.0:     # false for nan too
            raise InputError("linear_attention.layer_fraction", f"must be in (0, 1): some layers stay full attention, "
                             f"got {shown(lf)}")
        # integers within the sizes a model may have, as MambaSpec checks its own (1.5 heads, or
        # 2**40, passed and broke the cost model later)
        for name, size in (("num_key_heads", "num_heads"), ("key_head_dim", "head_dim"), ("num_value_heads", "num_heads"),
                           ("value_head_dim", "head_dim"), ("conv_kernel", "conv_kernel")):
            check_size(f"linear_attention.{name}", getattr(self, name), size=size)
        sb = self.state_bytes
        # NaN passed "<= 0" and crashed the serving memory model as an internal error
        if isinstance(sb, bool) or not isinstance(sb, (int, float)) or not 0.0 < sb <= 8.0:
            raise InputError("linear_attention.state_bytes", f"must be a number of bytes per state element in (0, 8] "
                             f"(4: an fp32 state), got {shown(sb)}", "write 4 for float32, 2 for bfloat16")


#: layer symbols of Megatron-Core's hybrid layer pattern (``--hybrid-override-pattern``,
#: megatron/core/models/hybrid/hybrid_layer_allocation.py): each character is one layer holding
#: one block behind its own pre-norm and residual add
HYBRID_SYMBOLS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


@dataclass(frozen=True)
class MambaSpec:
    """The Mamba-2 mixer of a hybrid model's ``M`` layers (Dao & Gu 2024, "Transformers are SSMs",
    arXiv 2405.21060, section 7: the Mamba-2 block; Megatron-Core ``MambaMixer``).

    Attributes:
        num_heads: SSM heads (H; ``mamba_num_heads``).
        head_dim: channels per head (P; ``mamba_head_dim``); the inner width d_inner = H * P.
        state_size: state dimension per channel (N; ``ssm_state_size`` / ``mamba_state_dim``).
        num_groups: groups sharing the B and C projections (G; ``n_groups``), like GQA's kv groups.
        conv_kernel: width of the depthwise causal convolution over x, B, C (``conv_kernel``, 4).
        chunk_size: chunk length Q of the SSD algorithm (section 6; Megatron's default 128).
    """

    num_heads: int
    head_dim: int
    state_size: int
    num_groups: int
    conv_kernel: int = 4
    chunk_size: int = 128

    def __post_init__(self) -> None:
        for name in ("num_heads", "head_dim", "state_size", "num_groups", "conv_kernel", "chunk_size"):
            check_size(f"mamba.{name}", getattr(self, name), size=name if name != "num_heads" else "num_heads")
        if self.num_heads % self.num_groups:
            raise InputError("mamba.num_groups", f"num_heads {self.num_heads} is not a multiple of num_groups "
                             f"{self.num_groups}", "each group must hold whole heads")

    @property
    def d_inner(self) -> int:
        """Inner width H * P (``expand`` x hidden in the Mamba papers)."""
        return self.num_heads * self.head_dim


def parse_hybrid_pattern(pattern, num_layers: int, field: str = "model.hybrid_pattern") -> str:
    """``pattern`` validated against ``num_layers``: one ``HYBRID_SYMBOLS`` character per layer
    (Megatron's ``|`` pipeline-stage separators are dropped); ``InputError`` naming ``field``."""
    if not isinstance(pattern, str):
        raise InputError(field, f"expected text such as 'M*M-', got {shown(pattern)}", "quote it")
    text = pattern.replace("|", "").strip()
    bad = sorted({c for c in text if c not in HYBRID_SYMBOLS})
    if bad:
        raise InputError(field, f"unknown layer symbol(s) {''.join(bad)!r}",
                         "use " + ", ".join(f"{k} = {v}" for k, v in HYBRID_SYMBOLS.items()))
    if len(text) != num_layers:
        raise InputError(field, f"{len(text)} layer symbols for num_layers {num_layers}",
                         "give one symbol per layer")
    return text


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer.

    Attributes:
        name: preset or user name.
        num_layers: transformer layers (l).
        hidden_size: model width (h).
        num_heads: attention (query) heads (a).
        num_kv_heads: key/value heads (g); == num_heads for MHA, 1 for MQA, between for GQA.
        head_dim: per-head width (d); usually h / a (with ``mla``: qk_nope + qk_rope, required).
        ffn_hidden_size: dense MLP width (f).
        vocab_size: vocabulary (V).
        seq_len: default training sequence length (s).
        max_context_tokens: the longest context the model serves, prompt plus output tokens
            (Hugging Face config.json ``max_position_embeddings``, which the engines take as their
            default maximum model length: vLLM ``_get_and_verify_max_len`` in vllm/config/model.py
            derives ``max_model_len`` from it and refuses a request whose prompt plus output
            exceeds it); 0 = not stated (nothing is checked).
        gated_mlp: SwiGLU-style MLP with three matrices (True) or plain two-matrix MLP.
        tied_embeddings: input embedding and LM head share weights.
        moe: mixture-of-experts part, or None for a dense model.
        mla: multi-latent attention sizes, or None for standard attention.
        sliding_window: attention window in tokens for windowed layers (0 = full attention).
        sliding_window_layer_fraction: fraction of layers that use the window.
        mtp_layers: multi-token-prediction modules trained alongside (DeepSeek-V3 report,
            section 2.2: each is a projection, one transformer layer and a pass through the
            shared output head); 0 = none.
        attention_dropout: dropout on the attention probabilities (a stored mask and dropped
            copy when the scores are materialised; Korthikanti et al. 2022, section 4).
        hidden_dropout: dropout after the attention and MLP blocks (two stored 1-byte masks per
            layer). Both default on, as in Korthikanti's accounting; models trained without
            set them off (their activation memory omits those tensors).

    Architecture details that decide which model a framework builds (the launch exports write
    them, ``paraplan.exports``; the cost model reads only the parameter tensors they imply).
    Unstated, they follow ``gated_mlp``: a gated MLP comes with the Llama layout (RoPE, RMSNorm,
    no biases, SwiGLU), a plain one with the GPT-2/3 layout (learned positions, LayerNorm,
    biases, GELU):

        position_embedding: ``rope``, ``learned`` (absolute table, GPT-2/3, OPT), ``alibi``
            (BLOOM, MPT) or ``none``.
        rotary_fraction: share of each head's channels that RoPE rotates (GPT-NeoX: 0.25).
        rope_theta: RoPE's base frequency (config.json ``rope_theta``: Llama 3 500000, Mixtral
            and Qwen3 1000000, Llama 1/2 10000); 0 = not stated.
        rope_scaling: RoPE's frequency scaling for long contexts (config.json
            ``rope_scaling.rope_type``: ``llama3`` for Llama 3.1, ``yarn``, ...); empty = none.
        rope_scaling_factor: that scaling's ``factor`` (Llama 3.1: 8); 0 = not stated.
        rope_original_max_position_embeddings, rope_beta_fast, rope_beta_slow, rope_mscale,
            rope_mscale_all_dim: YaRN's parameters (config.json ``rope_scaling`` keys
            ``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``, ``mscale``,
            ``mscale_all_dim``; Peng et al. 2023, YaRN, arXiv 2309.00071). DeepSeek-V3: 4096, 32,
            1, 1.0, 1.0 with factor 40. 0 = not stated (Hugging Face's YaRN treats an absent
            ``mscale`` / ``mscale_all_dim`` the same as 0); only with ``rope_scaling: yarn``.
        expert_checkpoint_format: the weight format the released checkpoint stores the routed
            experts in (config.json ``quantization_config.quant_method``, which gpt-oss applies
            to the experts only: ``mxfp4``); ``paraplan serve`` serves them in it unless told
            otherwise. Empty = not stated.
        checkpoint_format: the weight format the released checkpoint stores its attention and
            dense GEMMs in, where it is not 16-bit (config.json ``quantization_config``: ``fp8``
            with ``weight_block_size`` [128, 128] is ``fp8_block``, DeepSeek-V3 / R1);
            ``paraplan serve`` serves the model in it by default on GPUs with that format's tensor
            cores. Empty = 16-bit or not stated.
        int4_group_size: weights per 16-bit scale of the checkpoint's int4 weight-only format
            (config.json ``quantization_config`` group_size: compressed-tensors
            ``config_groups.*.weights.group_size``, GPTQ ``group_size``, AWQ ``q_group_size``;
            Kimi-K2.5: 32); 0 = 128, the usual AWQ / GPTQ group (``cost_models.weight_formats``).
        normalization: ``rmsnorm`` or ``layernorm``.
        linear_bias: every linear layer has a bias (GPT-2/3, OPT, BLOOM, GPT-NeoX, gpt-oss).
        qkv_bias: the query/key/value projection has a bias even when the others do not (Qwen2).
        activation: the MLP activation; empty = ``swiglu`` for a gated MLP, ``gelu`` otherwise.
        glu_clamp_limit: the gated MLP clamps its two halves before the activation, the gate to
            at most this value and the linear half to [-limit, limit] (gpt-oss: config.json
            ``swiglu_limit`` 7.0; model card arXiv 2508.10925 section 2.2); 0 = no clamp. The
            clamp's cost depends on the stack (``TrainingBehaviour.glu_clamp_eager``).
        linear_attention: linear-attention layers mixed in (``LinearAttentionSpec``), or None
            when every layer is softmax attention. The attention fields above then describe the
            full-attention layers.
        hybrid_pattern: a hybrid Mamba-Transformer's layer list, one ``HYBRID_SYMBOLS``
            character per layer (Megatron's ``hybrid_override_pattern``; Nemotron-H, Nemotron 3):
            ``M`` a Mamba-2 mixer, ``*`` self-attention, ``-`` an MLP of ``ffn_hidden_size``,
            ``E`` a MoE block (``moe``); each alone behind a pre-norm, so a layer here is half a
            transformer layer. Empty = every layer attention + MLP/MoE.
        mamba: the ``M`` layers' mixer (``MambaSpec``); required when the pattern has ``M``.
        parallel_attention_mlp: the "parallel" block y = x + Attention(LN(x)) + MLP(LN(x)) instead
            of the sequential y = h + MLP(LN(h)), h = x + Attention(LN(x)) (PaLM, Chowdhery et al.
            2022, arXiv 2204.02311, section 2 "Parallel Layers"; GPT-J; GPT-NeoX / Pythia,
            config.json ``use_parallel_residual``; Falcon ``parallel_attn`` /
            ``new_decoder_architecture``; Cohere Command-R; Phi-1/1.5/2). Its effects on the cost
            (each a count, nothing fitted): the attention output projection and the MLP down
            projection leave their outputs un-reduced and the sum is reduced once, one
            tensor-parallel reduction per layer forward instead of two (EleutherAI/gpt-neox
            megatron/model/transformer.py ``ParallelTransformerLayer``: both row-parallel layers
            built with ``parallel_output=self.gpt_j_residual`` and ``output = residual +
            self.reduce(output)``); the column-parallel inputs keep their own collectives
            (``simulator.layer_times.tp_exposed_per_linear``); both norms read the same x, so
            it is stored once (``cost_models.memory.activation_terms``); the branches' adds
            follow that code (``cost_models.layer_costs.parallel_block_elementwise``). The input
            GEMMs are not fused (PaLM's "can be fused"): no stack file documents a fused
            QKV + MLP-input GEMM, so each stays its own linear. Dense layers only.
        parallel_shared_norm: with ``parallel_attention_mlp``, the two branches read one norm's
            output (PaLM, GPT-J, Falcon-7B, Command-R, Phi); false: each its own norm of the same
            x (GPT-NeoX-20B and Pythia: ``input_layernorm`` and ``post_attention_layernorm``,
            transformers GPTNeoXLayer; Falcon's ``new_decoder_architecture``: ``ln_attn`` /
            ``ln_mlp``). One norm: one norm kernel each way and one stored norm output fewer.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    seq_len: int = 2048
    max_context_tokens: int = 0
    head_dim: int = 0
    gated_mlp: bool = False
    tied_embeddings: bool = False
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    sliding_window: int = 0
    sliding_window_layer_fraction: float = 0.0
    mtp_layers: int = 0
    position_embedding: str = ""
    rotary_fraction: float = 1.0
    rope_theta: float = 0.0
    rope_scaling: str = ""
    rope_scaling_factor: float = 0.0
    rope_original_max_position_embeddings: int = 0
    rope_beta_fast: float = 0.0
    rope_beta_slow: float = 0.0
    rope_mscale: float = 0.0
    rope_mscale_all_dim: float = 0.0
    expert_checkpoint_format: str = ""
    checkpoint_format: str = ""
    int4_group_size: int = 0
    normalization: str = ""
    linear_bias: bool | None = None
    qkv_bias: bool = False
    activation: str = ""
    glu_clamp_limit: float = 0.0
    source: str = ""
    attention_dropout: bool = True
    hidden_dropout: bool = True
    linear_attention: LinearAttentionSpec | None = None
    hybrid_pattern: str = ""
    mamba: MambaSpec | None = None
    parallel_attention_mlp: bool = False
    parallel_shared_norm: bool = False

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size",
                     "vocab_size", "seq_len"):
            check_size(f"model.{name}", getattr(self, name))
        for name in ("head_dim", "sliding_window", "max_context_tokens"):
            check_size(f"model.{name}", getattr(self, name), minimum=0)
        if self.mla is not None:
            # MLA's query / key heads are qk_nope + qk_rope wide (DeepSeek-V2 paper section 2.1.3;
            # the HF import, hf_families._deepseek, sets the same), not hidden_size / num_heads
            # (DeepSeek-V3: 192, not 56)
            qk = self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
            if self.head_dim == 0:
                object.__setattr__(self, "head_dim", qk)
            elif self.head_dim != qk:
                raise InputError("model.head_dim", f"{self.head_dim} is not mla.qk_nope_head_dim "
                                 f"{self.mla.qk_nope_head_dim} + qk_rope_head_dim {self.mla.qk_rope_head_dim} = {qk}",
                                 f"write head_dim: {qk}, or leave it out")
        if self.head_dim == 0:
            if self.hidden_size % self.num_heads:
                raise InputError("model.head_dim", f"hidden_size {self.hidden_size} is not divisible "
                                 f"by num_heads {self.num_heads}", "give head_dim explicitly")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.head_dim < 1:
            raise InputError("model.head_dim", "must be >= 1")
        if self.num_heads % self.num_kv_heads:
            raise InputError("model.num_kv_heads", f"num_heads {self.num_heads} is not a multiple of "
                             f"num_kv_heads {self.num_kv_heads}")
        if not isinstance(self.mtp_layers, int) or isinstance(self.mtp_layers, bool) or self.mtp_layers < 0:
            raise InputError("model.mtp_layers", f"must be an integer >= 0, got {shown(self.mtp_layers)}")
        check_size("model.mtp_layers", self.mtp_layers, minimum=0)
        if not 0.0 <= self.sliding_window_layer_fraction <= 1.0:       # false for nan too
            raise InputError("model.sliding_window_layer_fraction", "must be in [0, 1]")
        if not (0.0 <= self.glu_clamp_limit < float("inf")):            # false for nan too
            raise InputError("model.glu_clamp_limit", f"must be a finite number >= 0, got {shown(self.glu_clamp_limit)}",
                             "give the clamp value, or 0 for none")
        if self.glu_clamp_limit and not self.gated_mlp:
            raise InputError("model.glu_clamp_limit", "only a gated MLP (gated_mlp: true) clamps its halves",
                             "set glu_clamp_limit: 0 or gated_mlp: true")
        self._check_architecture()
        self._check_hybrid()
        self._check_parallel_block()
        if self.moe is not None and not self.hybrid_pattern and self.moe.first_dense_layers >= self.num_layers:
            # was silently a dense model (no MoE layer), as the Hugging Face import already refuses
            raise InputError("model.moe.first_dense_layers", f"{self.moe.first_dense_layers} dense layers of "
                             f"{self.num_layers} leave no mixture-of-experts layer",
                             f"set first_dense_layers below {self.num_layers}, or drop moe: for a dense model")

    def _check_parallel_block(self) -> None:
        for name in ("parallel_attention_mlp", "parallel_shared_norm"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"model.{name}", f"must be true or false, got {shown(getattr(self, name))}")
        if self.parallel_shared_norm and not self.parallel_attention_mlp:
            raise InputError("model.parallel_shared_norm", "a shared norm needs the parallel block",
                             "set parallel_attention_mlp: true, or parallel_shared_norm: false")
        if self.parallel_attention_mlp and (self.moe is not None or self.hybrid_pattern):
            raise InputError("model.parallel_attention_mlp", "the parallel block is modelled for dense "
                             "attention + MLP layers only", "drop moe: / hybrid_pattern, or set it false")

    def _check_hybrid(self) -> None:
        if not self.hybrid_pattern:
            if self.mamba is not None:
                raise InputError("model.mamba", "a Mamba mixer needs the layer pattern",
                                 "give hybrid_pattern (M = Mamba, * = attention, - = MLP, E = MoE)")
            return
        text = parse_hybrid_pattern(self.hybrid_pattern, self.num_layers)
        object.__setattr__(self, "hybrid_pattern", text)
        if "M" in text and self.mamba is None:
            raise InputError("model.mamba", "the hybrid pattern has Mamba layers (M) but no mamba: sizes",
                             "add mamba: {num_heads, head_dim, state_size, num_groups}")
        if "E" in text and self.moe is None:
            raise InputError("model.moe", "the hybrid pattern has MoE layers (E) but no moe: sizes", "add moe:")
        if self.moe is not None and "E" not in text:
            raise InputError("model.hybrid_pattern", "moe: is given but the pattern has no MoE layer (E)")
        for name in ("mla", "linear_attention"):
            if getattr(self, name) is not None:
                raise InputError(f"model.{name}", "not supported together with a hybrid layer pattern")
        if self.mtp_layers:
            raise InputError("model.mtp_layers", "multi-token prediction is not modelled for hybrid patterns",
                             "set mtp_layers: 0")

    def _check_architecture(self) -> None:
        # unstated details follow the MLP: a gated MLP comes with the Llama layout, a plain one
        # with the GPT-2/3 layout (cost_models.params.layer_param_tensors assumes the same)
        gated = self.gated_mlp
        if not self.position_embedding:
            object.__setattr__(self, "position_embedding", "rope" if gated else "learned")
        if not self.normalization:
            object.__setattr__(self, "normalization", "rmsnorm" if gated else "layernorm")
        if self.linear_bias is None:
            object.__setattr__(self, "linear_bias", not gated)
        for name, allowed in (("position_embedding", POSITION_EMBEDDINGS), ("normalization", NORMALIZATIONS)):
            if getattr(self, name) not in allowed:
                raise InputError(f"model.{name}", f"unknown value {getattr(self, name)!r}",
                                 "choose one of " + ", ".join(allowed))
        if not 0.0 < self.rotary_fraction <= 1.0:
            raise InputError("model.rotary_fraction", f"must be in (0, 1], got {shown(self.rotary_fraction)}")
        for name in ("rope_theta", "rope_scaling_factor", *YARN_FIELDS):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1e12:
                raise InputError(f"model.{name}", f"must be a number from 0 to 1e12 (0 = not stated), got {shown(value)}",
                                 "write the checkpoint's value, or 0")
        for name in ("checkpoint_format", "expert_checkpoint_format"):
            value = getattr(self, name)
            if not isinstance(value, str) or (value and value not in CHECKPOINT_FORMATS):
                raise InputError(f"model.{name}", f"unknown weight format {value!r}",
                                 "use one of " + ", ".join(CHECKPOINT_FORMATS) + ", or leave it out (16-bit)")
        g = self.int4_group_size
        if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g <= 1 << 20:
            raise InputError("model.int4_group_size", f"must be a whole number of weights per scale from 0 to "
                             f"{1 << 20} (0 = 128), got {shown(g)}", "write the checkpoint's group_size, or 0")
        if self.expert_checkpoint_format and self.moe is None:
            raise InputError("model.expert_checkpoint_format", "set on a model without experts",
                             "drop it, or add the moe: block")
        if not isinstance(self.rope_scaling, str):
            raise InputError("model.rope_scaling", f"must be text (llama3, yarn, ...), got {shown(self.rope_scaling)}")
        if self.rope_scaling != "yarn" and any(getattr(self, name) for name in YARN_FIELDS):
            raise InputError("model.rope_scaling", f"YaRN parameters set with rope_scaling {self.rope_scaling!r}",
                             "set rope_scaling: yarn, or drop the rope_beta_* / rope_mscale* / "
                             "rope_original_max_position_embeddings fields")
        if (self.rope_theta or self.rope_scaling) and self.position_embedding != "rope":
            raise InputError("model.rope_theta", f"set on a model with {self.position_embedding} positions",
                             "drop rope_theta / rope_scaling, or set position_embedding: rope")
        if not self.activation:
            object.__setattr__(self, "activation", "swiglu" if self.gated_mlp else "gelu")
        allowed = GATED_ACTIVATIONS if self.gated_mlp else PLAIN_ACTIVATIONS
        if self.activation not in allowed:
            kind = "a gated" if self.gated_mlp else "a plain (two-matrix)"
            raise InputError("model.activation", f"{self.activation!r} is not {kind} MLP activation",
                             "choose one of " + ", ".join(allowed) + " (or change gated_mlp)")
        if self.linear_bias and not self.qkv_bias:
            object.__setattr__(self, "qkv_bias", True)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def num_moe_layers(self) -> int:
        """Layers with a routed-expert MLP."""
        if self.moe is None:
            return 0
        if self.hybrid_pattern:
            return self.hybrid_pattern.count("E")
        rest = self.num_layers - self.moe.first_dense_layers
        return max(0, (rest + self.moe.moe_layer_frequency - 1) // self.moe.moe_layer_frequency)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    def hybrid_counts(self) -> dict:
        """{kind: layers} of a hybrid pattern (``HYBRID_SYMBOLS`` kinds); empty otherwise."""
        return {kind: self.hybrid_pattern.count(sym) for sym, kind in HYBRID_SYMBOLS.items()} \
            if self.hybrid_pattern else {}

    def is_moe_layer(self):
        """(num_layers,) booleans: which decoder layers hold routed experts."""
        if self.moe is None:
            return np.zeros(self.num_layers, dtype=bool)
        if self.hybrid_pattern:
            return np.array([c == "E" for c in self.hybrid_pattern], dtype=bool)
        i = np.arange(self.num_layers)
        first, freq = self.moe.first_dense_layers, self.moe.moe_layer_frequency
        return (i >= first) & ((i - first) % freq == 0)

    def with_seq_len(self, seq_len: int) -> "ModelSpec":
        return replace(self, seq_len=int(seq_len))
