"""A plan as a Megatron-LM ``pretrain_gpt.py`` launch: environment plus flags.

Written for Megatron-LM main at the commit ``megatron_flags.json`` names (``RELEASE``); every
flag is one its parser defines there, and ``megatron_table.check_command`` holds the output to
the ``validate_args`` / ``TransformerConfig`` / micro-batch rules recorded with it.

What the output states, and why:

* the environment: ``CUDA_DEVICE_MAX_CONNECTIONS=1`` when TP or CP > 1 (``validate_args``
  asserts it before Blackwell, so TP/SP communication is issued ahead of the GEMMs it overlaps),
  never with Megatron-FSDP (which asserts the opposite);
* the model, so that the model built is the model planned: layers, widths, heads, GQA groups or
  the MLA projections, RoPE / learned positions, RMSNorm / LayerNorm, biases, the MLP
  activation, experts, their router score, shared experts, dense-layer pattern, MTP modules,
  sliding windows, untied embeddings, sequence length;
* the degrees: TP, PP (with the plan's stage layout: ``--decoder-first/last-pipeline-num-
  layers`` for one chunk per rank, ``--pipeline-model-parallel-layout`` with virtual stages
  or a chunk holding only the embedding, only MTP modules or only the loss),
  virtual stages, CP with its communication type (``p2p`` ring, ``a2a`` Ulysses, ``a2a+p2p``
  with ``--hierarchical-context-parallel-sizes`` inner x outer), EP, expert TP, sequence
  parallelism;
* ZeRO: 1 = the distributed optimizer; 2 / 3 = Megatron-FSDP (``optim_grads`` /
  ``optim_grads_params``), which has no pipeline axis;
* the batch, recomputation (``selective`` recomputes the attention core, Megatron's default
  ``--recompute-modules core_attn``; ``full`` recomputes every layer: uniform, 1 layer per
  checkpoint), precision, the communication overlaps the plan priced (gradient reduce with its
  bucket size, parameter gather, TP, expert all-to-all), the gradient-reduction dtype,
  ``--no-gradient-accumulation-fusion`` only when the plan priced the unfused path, and
  ``--cross-entropy-loss-fusion`` when the plan priced Megatron's fused loss (a plan priced on
  another loss, Transformer Engine's included, is refused).

Not written (the user's): data, tokenizer (its vocabulary must be the model's), optimizer,
learning-rate schedule and checkpoint flags. ``attention_kernel`` selects nothing in Megatron-LM
(TE / cuDNN attention is what it runs).
"""
from __future__ import annotations

import shlex
from typing import Any

from cost_models.context_parallel import hybrid_cp_split
from hardware_specs.errors import InputError
from model_specs.model_spec import ModelSpec
from paraplan.exports import megatron_table
from paraplan.exports import screen
from paraplan.exports.common import (chunk_layers, gpus_text, plan_fields, refuse_kv_head_replication, require_model,
                                     selective_recompute_modules, summary, torchrun_head)
from simulator.parallel_config import Recompute, Schedule
from simulator.stage_layout import layout_string

NAME = "megatron"
SUFFIX = ".sh"


def release() -> str:
    """The Megatron-LM source the flags are written for (from the committed table)."""
    src = megatron_table.table()["source"]
    return f"Megatron-LM {src['ref']} @ {src['commit'][:12]} ({src['date']})"


# ---- what Megatron-LM cannot run as planned --------------------------------------------------

def refusal(p: dict) -> InputError | None:
    """Why Megatron-LM cannot run the plan ``p`` (a ``plan_fields`` dict) as planned, or None."""
    try:
        argv, env = _command(p)
    except InputError as exc:
        return exc
    problems = megatron_table.check_command(argv, p["n_gpus"], env)
    if problems:
        field, fix = _RULE_FIELDS.get(problems[0].split(":")[0], (
            "megatron", "choose a plan Megatron-LM can run (paraplan plan --emit megatron picks one)"))
        return InputError(field, f"Megatron-LM would reject the export: {problems[0]}", fix)
    return None


#: the plan field a broken table rule is the plan's own choice of, and its fix (the rules Megatron
#: checks only when the model runs: ``tools/megatron_flags.py`` marks them runtime)
_RULE_FIELDS = {
    "moe_tp_needs_sp": ("sequence_parallel", "plan with sequence_parallel 1, or tp 1"),
    "a2a_cp_divides_heads": ("cp", "choose cp dividing the query and the key/value heads of a TP rank, "
                                   "or cp_kind ring"),
}


def can_run(plan_row: Any) -> bool:
    """Whether Megatron-LM can run the plan as planned."""
    return refusal(plan_fields(plan_row)) is None


def screened(col) -> list:
    """Column conditions under which ``_command`` refuses a plan for certain (``exports.screen``;
    ``col(name)``: the field on every row), each one of ``_refuse_plan``'s checks."""
    pp, zero = screen.number(col, "pp"), screen.effective_zero(col)
    return [
        screen.any_of(col, ("recompute_layers_decrement", "offload_activation_layers")),   # _refuse_memory_features
        screen.text_in(col, "schedule", ("gpipe", "zb-h1", "zb-h2", "zb-v", "dualpipe")),   # 1f1b / interleaved only
        screen.where(None if zero is None else zero >= 2, None if pp is None else pp > 1),  # Megatron-FSDP: no pp
    ]


def grad_bucket_elements(p: dict) -> int:
    """The plan's gradient bucket, elements: ``max(grad_bucket_elements, per_dp * dp)``."""
    return int(max(p["grad_bucket_elements"], p["grad_bucket_elements_per_dp"] * p["dp"]))


#: Megatron-LM's ``--recompute-modules`` name of each ``memory.RECOMPUTE_MODULES`` entry it has
_MODULE_NAMES = {"core_attn": "core_attn", "layernorm": "layernorm", "mla_up_proj": "mla_up_proj", "mlp_act": "moe_act",
                 "mlp": "mlp", "moe": "moe"}


def _refuse_memory_features(p: dict, model: ModelSpec) -> None:
    """The memory features of a plan that Megatron-LM cannot run as the step model prices them."""
    if p.get("recompute_layers_decrement"):
        raise InputError("recompute_layers_decrement", "Megatron-LM recomputes the same number of layers on every "
                         "stage (NeMo's activations_checkpoint_layers_per_pipeline lowers it stage by stage)",
                         "plan with recompute_layers_decrement 0, or run the plan in NeMo")
    modules = set(p.get("recompute_modules") or ())
    if not modules and Recompute(p["recompute"]) == Recompute.SELECTIVE:
        modules = set(selective_recompute_modules(p))
    if (modules and Recompute(p["recompute"]) == Recompute.FULL and p.get("recompute_num_layers")
            and p.get("recompute_method") == "block"):
        # the plan prices its modules on the layers the block method leaves out; Megatron-Core
        # reads recompute_modules only under granularity 'selective' (megatron/core/transformer/
        # transformer_layer.py:473-475 at d98e8a64dd), so those layers would keep every activation
        raise InputError("recompute_modules", "Megatron-LM recomputes modules only under --recompute-granularity "
                         "selective; beside full recomputation of some layers the other layers would recompute "
                         "nothing", "plan without recompute_modules, or recompute every layer in full")
    if "every_second_linear" in modules:
        raise InputError("recompute_modules", "Megatron-LM has no per-operation checkpoint that recomputes every "
                         "second projection (torchtitan's selective policy, which this plan prices)",
                         "plan with --stack megatron-core (its selective is the attention core), or recompute "
                         "none or full")
    if "mlp_fc1" in modules:
        raise InputError("recompute_modules", "Megatron-LM's 'mlp' recomputes the whole MLP; it has no module that "
                         "reruns only its input projections and activation (MaxText's save-the-projections remat "
                         "policy, which this plan prices)", "plan with --stack megatron-core, or name mlp instead")
    if "moe_dispatch" in modules:
        raise InputError("recompute_modules", "Megatron-LM has no module that recomputes only the MoE dispatch "
                         "(its 'moe' recomputes the whole MoE layer)", "drop moe_dispatch")
    if "mlp_act" in modules and model.moe is None:
        raise InputError("recompute_modules", "Megatron-LM recomputes the activation only of expert MLPs "
                         "('moe_act'); its dense 'mlp' recomputes the whole MLP", "drop mlp_act for a dense model")
    if p.get("offload_activation_layers"):
        raise InputError("offload_activation_layers", "this Megatron-LM release offloads named modules "
                         "(--fine-grained-activation-offloading --offload-modules), not whole layers' activations",
                         "plan without activation offload, or use Transformer Engine's CPU offload context yourself")
    if p.get("offload_optimizer_fraction") and p["zero_stage"] != 1:
        raise InputError("offload_optimizer_fraction", "Megatron-LM offloads the distributed optimizer's states "
                         "(--optimizer-cpu-offload needs --use-distributed-optimizer)", "plan with zero_stage 1")
    if (p.get("offload_optimizer_fraction") and p.get("fp8_param_gather")
            and (p["dtype"] == "mxfp8" or (p["dtype"] == "fp8" and p.get("fp8_current_scaling")))):
        raise InputError("offload_optimizer_fraction", "Megatron-LM offloads the optimizer beside FP8 parameter "
                         "gathers only with the delayed-scaling recipe (validate_args), and the plan prices "
                         + ("MXFP8" if p["dtype"] == "mxfp8" else "current scaling"),
                         "plan without fp8_param_gather, or without optimizer offload")
    if p.get("zero_shard_group") and p["zero_stage"] != 1:
        raise InputError("zero_shard_group", "Megatron-LM replicates only the distributed optimizer across groups "
                         "(--num-distributed-optimizer-instances)", "plan HSDP with zero_stage 1, or emit torchtitan")
    if p.get("optimizer_moment_bytes", 4.0) == 2.0 and p["zero_stage"] == 0:
        # bf16 moments are --use-precision-aware-optimizer, which get_megatron_optimizer refuses
        # without the distributed optimizer (megatron/core/optimizer/__init__.py:1057-1060 at
        # d98e8a64dd); Megatron-FSDP (ZeRO-2/3) turns the distributed optimizer on itself
        raise InputError("optimizer_moment_bytes", "Megatron-LM keeps Adam moments in bf16 only with the precision-"
                         "aware optimizer, which raises '--use-precision-aware-optimizer only supported with "
                         "distributed optimizer' at ZeRO-0", "plan with zero_stage >= 1, or optimizer_moment_bytes 4")
    if p["dtype"] not in ("fp32", "tf32") and (p.get("master_weight_bytes", 4.0) != 4.0
                                              or p.get("moments_in_param_dtype")):
        # Megatron's optimizers step an fp32 main copy (megatron/core/optimizer/distrib_optimizer.py
        # shard_main_param = shard_model_param.clone().float()); Apex's remainders and NeMo's bf16
        # optimizer dtype (the stack's master_weights) are NeMo 1.x's, not Megatron-LM's
        field = "master_weight_bytes" if p.get("master_weight_bytes", 4.0) != 4.0 else "moments_in_param_dtype"
        raise InputError(field, "the plan prices NeMo 1.x's optimizer state (Apex's bf16 remainders or an optimizer "
                         "in the weights' dtype); Megatron-LM keeps an fp32 master copy and fp32 moments, "
                         "more memory than planned", "plan with --stack megatron-core for a Megatron export")
    if p.get("zero_shard_group") and model.moe is not None:
        _refuse_expert_hsdp(p)
    if p.get("loss_chunk_tokens"):
        raise InputError("loss_chunk_tokens", "Megatron-LM's fused cross-entropy takes the whole micro-batch's logits",
                         "plan with loss_chunk_tokens 0")
    if p.get("fp8_param_gather") and p["dtype"] in ("fp8", "mxfp8") and p["zero_stage"] == 0:
        raise InputError("fp8_param_gather", "Megatron-LM keeps the weights in FP8 only with the distributed "
                         "optimizer or FSDP (--fp8-param-gather, megatron/training/arguments.py)",
                         "plan with zero_stage >= 1, or without fp8_param_gather")


def _refuse_expert_hsdp(p: dict) -> None:
    """Refuse hybrid-sharded ZeRO-1 of an MoE model whose expert data-parallel group does not
    split into the optimizer instances: Megatron-Core divides both data-parallel groups, the
    dense one and the experts' (``world / (etp x ep x pp)``, parallel_state.py:880 at d98e8a64dd),
    into ``--num-distributed-optimizer-instances`` and asserts "Expert data parallel size should
    be divisible by partial DistOpt shard factor" (megatron/core/parallel_state.py:1447-1449)."""
    instances = p["dp"] * p["cp"] // p["zero_shard_group"]
    expert_dp = p["n_gpus"] // (p["etp"] * p["ep"] * p["pp"])
    if expert_dp % instances:
        raise InputError("zero_shard_group", f"Megatron-LM splits the expert data-parallel group (world / (etp x ep x "
                         f"pp) = {expert_dp}) into the {instances} distributed-optimizer instances too, and asserts "
                         "it divides (parallel_state.py: 'Expert data parallel size should be divisible by partial "
                         "DistOpt shard factor')", "choose zero_shard_group so that dp x cp / zero_shard_group "
                         f"divides {expert_dp}, or plan without HSDP")


#: the flags of each loss a plan may price that Megatron-LM runs: its eager
#: ``vocab_parallel_cross_entropy`` is the default (``cross_entropy_loss_fusion`` False,
#: megatron/core/model_parallel_config.py:320; language_module.py:173), the fused one
#: ``--cross-entropy-loss-fusion`` with the default ``native`` implementation (:325)
_LOSS_FLAGS = {"megatron_unfused": [], "megatron_fused": [("--cross-entropy-loss-fusion", None)]}


def _refuse_plan(p: dict, model: ModelSpec) -> None:
    refuse_kv_head_replication(p, model, "Megatron-LM")
    _refuse_memory_features(p, model)
    if p.get("ep_carved_from_dp") and p["ep"] > 1 and p["tp"] * p["cp"] != p["etp"]:
        # priced on a carved-EP release (Megatron-Core <= 0.9: EP cut out of dp in the rank order
        # tp-cp-ep-dp-pp, members tp x cp apart); the Megatron-LM this export targets folds EP
        # (a separate expert RankGenerator tp=etp, ep, dp: members etp apart), so its all-to-all
        # runs over other ranks than the ones priced
        raise InputError("ep", f"the plan prices Megatron-Core <= 0.9's EP groups carved out of data parallelism "
                         f"(members tp x cp = {p['tp'] * p['cp']} ranks apart); the Megatron-LM this export targets "
                         f"folds them, members etp = {p['etp']} apart", "plan on a stack that folds EP (megatron-core), "
                         "or cp 1")
    if model.moe is not None and model.moe.latent_size:
        raise InputError("model", "LatentMoE (moe.latent_size): this export does not write Megatron-Core's "
                         "moe_latent_size, so its launch would build experts at the hidden size",
                         "set moe_latent_size in the launch by hand from the plan's parallel degrees")
    if model.moe is not None and model.linear_bias and p["etp"] > 1:
        # the export leaves the linear biases on (no --disable-bias-linear), and Megatron-Core
        # builds biased experts only unsplit: TransformerConfig.__post_init__ asserts
        # expert_tensor_parallel_size == 1 when num_moe_experts and add_bias_linear
        # (megatron/core/transformer/transformer_config.py:2612-2615 at d98e8a64dd)
        raise InputError("etp", f"{model.name}'s expert MLPs have biases, which Megatron-LM builds only without expert "
                         f"tensor parallelism (TransformerConfig: 'Bias in Moe is only supported when ETP==1'), and "
                         f"the plan splits each expert over etp={p['etp']}", "plan with etp 1 (--fix etp=1)")
    if model.hybrid_pattern:
        raise InputError("model", "hybrid Mamba models: not supported by this export (Megatron-LM builds them with "
                         "pretrain_mamba.py and --hybrid-override-pattern, which this export does not write)",
                         "write the hybrid launch by hand from the plan's parallel degrees")
    if model.linear_attention is not None:
        raise InputError("model", "linear-attention layers (Gated DeltaNet, model.linear_attention): this export "
                         "does not write Megatron-LM's --experimental-attention-variant / --linear-attention-freq, "
                         "so its launch would build every layer with softmax attention",
                         "write the hybrid-attention launch by hand from the plan's parallel degrees")
    if model.parallel_attention_mlp:
        # megatron/core/transformer/transformer_layer.py TransformerLayer: the attention and its
        # residual add (self_attn_bda), then the pre-MLP norm and the MLP: sequential only
        raise InputError("model", f"{model.name} runs attention and MLP in parallel (model.parallel_attention_mlp), "
                         "and Megatron-LM's TransformerLayer builds them one after the other",
                         "emit another framework, or write the launch by hand (GPT-NeoX: gpt_j_residual)")
    if p["cuda_graphs"]:
        raise InputError("cuda_graphs", "this export does not capture CUDA graphs (--cuda-graph-impl and its "
                         "module list are the user's)", "plan without cuda_graphs, then add them by hand")
    if p["grad_reduce_every_microbatch"]:
        raise InputError("grad_reduce_every_microbatch", "Megatron-LM reduces gradients once per step, not after "
                         "every micro-batch", "plan without grad_reduce_every_microbatch")
    schedule = Schedule(p["schedule"])
    if schedule not in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED):
        raise InputError("schedule", f"Megatron-LM's training loop has no {schedule.value} pipeline schedule",
                         "choose 1f1b or interleaved (vpp > 1), or emit torchtitan")
    if p["zero_stage"] == 2 and p.get("zero2_gather_every_microbatch", False):
        raise InputError("zero_stage", "the plan priced ZeRO-2 as FSDP runs it, parameters gathered again in every "
                         "micro-batch's forward; Megatron-FSDP optim_grads keeps them whole and gathers once a step",
                         "plan ZeRO-2 on a Megatron stack, or emit torchtitan")
    if p["zero_stage"] >= 2 and p["pp"] > 1:
        raise InputError("zero_stage", f"Megatron-LM shards gradients (ZeRO-{p['zero_stage']}) with Megatron-FSDP, "
                         "whose device meshes (DP-CP, TP, EP) have no pipeline axis",
                         "use zero_stage <= 1 with pp > 1, or pp = 1")
    if not p["flash_attention"] and p["cp"] > 1:
        # Transformer Engine v2.14 transformer_engine/pytorch/attention/dot_product_attention/
        # utils.py:768-772: under context parallelism UnfusedDotProductAttention is disabled, so
        # --attention-backend unfused (the materialised attention priced) leaves no backend to run
        raise InputError("flash_attention", "the plan prices materialised (unfused) attention, which Transformer "
                         "Engine disables under context parallelism ('Disabling UnfusedDotProductAttention as it "
                         "does not support context parallelism')", "plan with flash_attention on, or cp 1")
    loss = p.get("cross_entropy", "megatron_unfused")
    if loss == "te_triton":
        raise InputError("cross_entropy", "the plan prices Transformer Engine's fused cross-entropy (Megatron-Bridge's "
                         "cross_entropy_fusion_impl 'te'), which Megatron-LM's validate_args rejects ('Transformer "
                         "Engine cross entropy loss fusion is disabled due to stability issues', "
                         "megatron/training/arguments.py:1697-1702)", "plan with --stack megatron-core (Megatron-LM's "
                         "own vocab-parallel loss), or run the plan in Megatron-Bridge")
    if loss not in _LOSS_FLAGS:
        raise InputError("cross_entropy", f"Megatron-LM computes the loss with its vocab-parallel cross-entropy, eager "
                         f"or fused, not the plan's {loss}", "plan with cross_entropy megatron_unfused or "
                         "megatron_fused (a Megatron stack: --stack megatron-core)")
    if model.position_embedding == "alibi":
        raise InputError("model", f"Megatron-LM has no ALiBi position embedding ({model.name} uses it)",
                         "emit another framework, or plan a RoPE / learned-position model")
    if model.activation in ("relu", "geglu"):
        raise InputError("model", f"Megatron-LM's GPT builds no {model.activation} MLP ({model.name} uses it; "
                         "it offers gelu, swiglu, squared-relu and quick-geglu)", "emit another framework")
    # MoE with tp > 1 without sequence parallelism, and Ulysses heads that do not divide over cp,
    # are the table's runtime rules (``moe_tp_needs_sp``, ``a2a_cp_divides_heads``): ``refusal``
    # reports them naming the plan's field (``_RULE_FIELDS``)


# ---- the command ---------------------------------------------------------------------------

#: MLATransformerConfig's YaRN fields that no Megatron-LM flag reaches at the pinned commit
#: (megatron/core/transformer/transformer_config.py: original_max_position_embeddings 4096, beta_fast
#: 32, beta_slow 1): core_transformer_config_from_args copies only the arguments named like a field,
#: and the parser names these --yarn-original-max-position-embeddings / --yarn-beta-fast /
#: --yarn-beta-slow (dests yarn_*, read only for --position-embedding-type yarn, non-MLA models).
MLA_YARN_FIXED = {"rope_original_max_position_embeddings": ("original_max_position_embeddings", 4096),
                  "rope_beta_fast": ("beta_fast", 32.0), "rope_beta_slow": ("beta_slow", 1.0)}


def _rope_note(m: ModelSpec) -> str:
    """What the flags cannot say about the model's RoPE (its base unstated, a scaling other than
    Llama 3.1's or YaRN, a YaRN parameter Megatron-LM fixes for MLA, YaRN beside MTP without
    MLA), so a checkpoint is not loaded under Megatron-LM's defaults silently; empty if nothing."""
    if m.position_embedding != "rope":
        return ""
    notes = []
    if not m.rope_theta:
        notes.append(f"{m.name}'s RoPE base is not in its model spec: Megatron-LM's --rotary-base defaults to "
                     "10000; set it to the checkpoint's config.json rope_theta")
    if m.rope_scaling == "yarn" and m.mla is not None:
        for field, (config_field, fixed) in MLA_YARN_FIXED.items():
            stated = getattr(m, field)
            if stated and stated != fixed:
                notes.append(f"{m.name}'s YaRN {config_field} is {stated:g}, but Megatron-LM's MLA config fixes "
                             f"it at {fixed:g} (no flag sets MLATransformerConfig.{config_field}); "
                             "set it in the model provider")
            elif not stated:
                notes.append(f"{m.name}'s YaRN {config_field} is not in its model spec: Megatron-LM's MLA "
                             f"config uses {fixed:g}; check the checkpoint's config.json rope_scaling")
    elif m.rope_scaling == "yarn" and m.mtp_layers:
        notes.append(f"{m.name} scales RoPE as 'yarn', which Megatron-LM builds with --position-embedding-type "
                     "yarn, refused beside MTP (validate_args); these flags keep plain RoPE")
    elif m.rope_scaling and m.rope_scaling not in ("llama3", "yarn"):
        notes.append(f"{m.name} scales RoPE as '{m.rope_scaling}'"
                     + (f" (factor {m.rope_scaling_factor:g})" if m.rope_scaling_factor else "")
                     + ", which these flags do not set")
    return "; ".join(notes)


#: YaRN flags every YaRN model states when its spec gives the value (flag, ModelSpec field)
_YARN_FLAGS = (("--rotary-scaling-factor", "rope_scaling_factor"), ("--mscale", "rope_mscale"),
               ("--mscale-all-dim", "rope_mscale_all_dim"))
#: and the ones only a non-MLA model's ``--position-embedding-type yarn`` reads
_NON_MLA_YARN_FLAGS = (("--yarn-original-max-position-embeddings", "rope_original_max_position_embeddings"),
                       ("--yarn-beta-fast", "rope_beta_fast"), ("--yarn-beta-slow", "rope_beta_slow"))


def _yarn_args(m: ModelSpec) -> list[tuple[str, Any]]:
    """YaRN's flags (Megatron-LM@d98e8a64 megatron/training/arguments.py). MLA (DeepSeek-V3):
    ``--rope-type yarn`` (MLATransformerConfig.rope_type; core_transformer_config_from_args allows
    it only with MLA), ``--rotary-scaling-factor`` (the parser's default 1.0 replaces the config's
    40, so it is always said), ``--mscale`` and ``--mscale-all-dim`` (default 0.0; DeepSeek-V3's
    1.0 also scales MLA's softmax, multi_latent_attention.py ``_yarn_get_mscale``); the other
    three are fixed (``MLA_YARN_FIXED``, a header note when the model's differ). Other attention:
    ``--position-embedding-type yarn`` with ``--yarn-original-max-position-embeddings``,
    ``--yarn-beta-fast``, ``--yarn-beta-slow`` (argument_utils._apply_yarn_config_from_args), not
    beside MTP (validate_args). Unstated parameters keep Megatron-LM's defaults."""
    if m.rope_scaling != "yarn" or (m.mla is None and m.mtp_layers):
        return []                                   # YaRN beside MTP without MLA: said in the header (_rope_note)
    flags = (() if m.mla is not None else _NON_MLA_YARN_FLAGS) + _YARN_FLAGS
    head = [("--rope-type", "yarn")] if m.mla is not None else []
    return head + [(flag, getattr(m, field)) for flag, field in flags if getattr(m, field)]


def _model_args(m: ModelSpec, seq_len: int, dedup_dispatch: bool = False) -> list[tuple[str, Any]]:
    """The architecture's flags; ``dedup_dispatch``: the plan priced DeepEP's once-per-GPU-and-node
    expert dispatch (``cost_models.moe.deduplicated_dispatch_volumes``), Megatron's ``flex``
    dispatcher, instead of the ``alltoall`` one (one row per token and expert)."""
    args: list[tuple[str, Any]] = [("--num-layers", m.num_layers), ("--hidden-size", m.hidden_size),
                                   ("--ffn-hidden-size", m.ffn_hidden_size), ("--num-attention-heads", m.num_heads)]
    if m.mla is not None:
        args += [("--multi-latent-attention", None), ("--kv-lora-rank", m.mla.kv_lora_rank),
                 ("--qk-head-dim", m.mla.qk_nope_head_dim), ("--qk-pos-emb-head-dim", m.mla.qk_rope_head_dim),
                 ("--v-head-dim", m.mla.v_head_dim)]
        if m.mla.q_lora_rank:
            args.append(("--q-lora-rank", m.mla.q_lora_rank))
    else:
        if m.head_dim * m.num_heads != m.hidden_size:
            args.append(("--kv-channels", m.head_dim))
        if m.num_kv_heads < m.num_heads:
            args += [("--group-query-attention", None), ("--num-query-groups", m.num_kv_heads)]
    yarn_positions = m.rope_scaling == "yarn" and m.mla is None and not m.mtp_layers
    args.append(("--position-embedding-type", "yarn" if yarn_positions else
                 {"rope": "rope", "learned": "learned_absolute", "none": "none"}[m.position_embedding]))
    if m.position_embedding == "rope" and m.rotary_fraction < 1.0:
        args.append(("--rotary-percent", m.rotary_fraction))
    if m.position_embedding == "rope" and m.rope_theta:
        # Megatron-LM's --rotary-base defaults to 10000: Llama 3's 500000 must be said
        args.append(("--rotary-base", int(round(m.rope_theta))))
    if m.rope_scaling == "llama3":
        # Llama 3.1's frequency scaling (Megatron-LM --use-rope-scaling, --rope-scaling-factor, default 8)
        args.append(("--use-rope-scaling", None))
        if m.rope_scaling_factor:
            args.append(("--rope-scaling-factor", m.rope_scaling_factor))
    args += _yarn_args(m)
    args.append(("--normalization", "RMSNorm" if m.normalization == "rmsnorm" else "LayerNorm"))
    if not m.linear_bias:
        args.append(("--disable-bias-linear", None))
        if m.qkv_bias:
            args.append(("--add-qkv-bias", None))
    if m.activation == "swiglu":
        args.append(("--swiglu", None))
    elif m.activation == "squared_relu":
        args.append(("--squared-relu", None))
    if not m.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    if m.sliding_window and m.sliding_window_layer_fraction > 0:
        args.append(("--window-size", f"({m.sliding_window},0)"))
        if m.sliding_window_layer_fraction < 1.0:
            # every k-th layer (1-based) keeps full attention: a window on 1 - 1/k of the layers
            k = 1.0 / (1.0 - m.sliding_window_layer_fraction)
            if abs(k - round(k)) > 1e-9:
                raise InputError("model", f"a window on {m.sliding_window_layer_fraction:.3g} of the layers is not "
                                 "one full-attention layer every k (--window-attn-skip-freq)", "emit another framework")
            args.append(("--window-attn-skip-freq", int(round(k))))
    if m.moe is not None:
        # all-to-all dispatch and grouped expert GEMMs: the MoE layer paraplan's cost model prices
        args += [("--num-experts", m.moe.num_experts), ("--moe-router-topk", m.moe.top_k),
                 ("--moe-ffn-hidden-size", m.moe.expert_ffn_hidden_size),
                 ("--moe-router-score-function", m.moe.router_score),
                 *([("--moe-token-dispatcher-type", "flex"), ("--moe-flex-dispatcher-backend", "deepep")]
                   if dedup_dispatch else [("--moe-token-dispatcher-type", "alltoall")]),
                 ("--moe-grouped-gemm", None)]
        if m.moe.num_shared_experts:
            width = m.moe.shared_expert_ffn_hidden_size or m.moe.expert_ffn_hidden_size
            args.append(("--moe-shared-expert-intermediate-size", m.moe.num_shared_experts * width))
            if m.moe.shared_expert_gate:
                # Qwen2-MoE's sigmoid gate on the shared expert (Megatron-LM shared_experts.py
                # gate_weight (1, hidden), used when TransformerConfig.moe_shared_expert_gate)
                args.append(("--moe-shared-expert-gate", None))
        freq = _moe_layer_freq(m)
        if freq is not None:
            args.append(("--moe-layer-freq", freq))
        if m.moe.capacity_factor:
            args.append(("--moe-expert-capacity-factor", m.moe.capacity_factor))
        args += _router_args(m.moe)
    if m.mtp_layers:
        args.append(("--mtp-num-layers", m.mtp_layers))
    args += [("--seq-length", seq_len), ("--max-position-embeddings", max(seq_len, 1))]
    return args


def _router_args(moe) -> list[tuple[str, Any]]:
    """The router beyond plain top-k, as Megatron-LM names it (TransformerConfig at the pinned
    commit): softmax before the top-k when the chosen weights are not renormalised, the
    aux-loss-free expert bias (its update rate left at Megatron's default 1e-3, the rate
    DeepSeek-V3 used), the weights' scaling factor, and group-limited routing (1 group of all the
    experts is plain top-k, so nothing is written for it).

    Renormalisation, as moe_utils.py ``topk_routing_with_score_function`` computes the weights:
    a softmax router with ``--moe-router-pre-softmax`` softmaxes over all experts and keeps the
    chosen k probabilities as they are, without it softmaxes over the chosen k logits (= the
    chosen probabilities divided by their sum; TransformerConfig requires pre-softmax at top-1);
    a sigmoid router divides the chosen scores by their sum whenever top_k > 1, with no switch.
    A router outside these is refused rather than built another way."""
    args: list[tuple[str, Any]] = []
    renorm, k = moe.topk_renormalized, moe.top_k
    if moe.router_score == "softmax" and not renorm:
        args.append(("--moe-router-pre-softmax", None))
    elif moe.router_score == "softmax" and k == 1:
        raise InputError("model", "its softmax top-1 router is renormalised (moe.topk_renormalized), so weighs every "
                         "token 1.0, which Megatron-LM cannot build (top-1 needs --moe-router-pre-softmax, whose "
                         "weight is the probability)", "emit another framework, or set moe.topk_renormalized: false "
                         "if the checkpoint's norm_topk_prob is false")
    elif moe.router_score == "sigmoid" and renorm != (k > 1):
        raise InputError("model", f"Megatron-LM's sigmoid router {'divides' if k > 1 else 'does not divide'} the chosen "
                         f"{k} scores by their sum, its router {'does' if renorm else 'does not'} "
                         f"(moe.topk_renormalized {str(renorm).lower()})", "emit another framework")
    if moe.probs_on_input:
        if k != 1:
            raise InputError("model", f"its router weighs each expert's input, which Megatron-LM applies to top-1 "
                             f"routers only (--moe-apply-probs-on-input), not top-{k}", "emit another framework")
        args.append(("--moe-apply-probs-on-input", None))
    if moe.expert_bias:
        args.append(("--moe-router-enable-expert-bias", None))
    if moe.topk_scaling_factor != 1.0:
        args.append(("--moe-router-topk-scaling-factor", moe.topk_scaling_factor))
    if moe.num_groups > 1:
        # moe_utils.group_limited_topk ranks a group by the sum of its top-(k / group_topk) scores;
        # the model ranks it by its best one (group_limited_greedy) or its two best (noaux_tc,
        # the expert-bias router): MoESpec's num_groups
        per_group, ranks_by = k // moe.group_topk, (2 if moe.expert_bias else 1)
        if per_group != ranks_by:
            raise InputError("model", f"its router ranks each of the {moe.num_groups} expert groups by "
                             f"{'the sum of its two best scores' if ranks_by == 2 else 'its best score'}, "
                             f"Megatron-LM by the sum of its top {per_group} (top-k {k} / group top-k "
                             f"{moe.group_topk})", "emit another framework")
        args += [("--moe-router-num-groups", moe.num_groups), ("--moe-router-group-topk", moe.group_topk)]
    return args


def _moe_layer_freq(model: ModelSpec) -> str | None:
    """``--moe-layer-freq``: None when every layer is MoE, else the 0/1 pattern (1 = MoE)."""
    moe = model.moe
    if moe.first_dense_layers == 0 and moe.moe_layer_frequency == 1:
        return None
    rest = model.num_layers - moe.first_dense_layers
    if moe.moe_layer_frequency == 1:
        return f"([0]*{moe.first_dense_layers}+[1]*{rest})"
    pattern = [0] * moe.first_dense_layers + [1 if i % moe.moe_layer_frequency == 0 else 0 for i in range(rest)]
    return "[" + ",".join(map(str, pattern)) + "]"


def pipeline_layout_args(num_layers: int, pp: int, vpp: int = 1, mtp_layers: int = 0,
                         first_stage_layers: int = 0, last_stage_layers: int = 0) -> list[tuple[str, Any]]:
    """The flags that put the plan's layers on Megatron-LM's pipeline stages.

    The layout is the step model's (``common.chunk_layers``). Stage counts the plan fixes
    (``first_stage_layers`` / ``last_stage_layers`` > 0, the last counting the MTP modules as
    the step model does) become ``--decoder-first-pipeline-num-layers`` /
    ``--decoder-last-pipeline-num-layers`` (decoder layers only). Otherwise: even chunks need
    only ``--num-virtual-stages-per-pipeline-rank`` (vpp > 1); one chunk per rank with equal
    middle stages takes the two flags (61 DeepSeek-V3 layers + MTP on pp 4: first 15, last 14,
    middle 16); any other layout, among them a chunk holding only the embedding or only the
    loss, is written chunk by chunk as ``--pipeline-model-parallel-layout``
    (``layout_string``), which Megatron-LM takes alone: it derives the virtual stages from the
    string and refuses it beside ``--num-virtual-stages-per-pipeline-rank``,
    ``--num-layers-per-virtual-pipeline-stage`` (megatron/training/arguments.py
    ``validate_args``), ``--decoder-first/last-pipeline-num-layers`` and
    ``--account-for-embedding/loss-in-pipeline-split`` (``TransformerConfig.__post_init__``).
    """
    if pp == 1:
        return []
    virtual = [("--num-virtual-stages-per-pipeline-rank", vpp)] if vpp > 1 else []
    if first_stage_layers or last_stage_layers:
        args = []
        if first_stage_layers:
            args.append(("--decoder-first-pipeline-num-layers", first_stage_layers))
        if last_stage_layers:
            args.append(("--decoder-last-pipeline-num-layers", last_stage_layers - mtp_layers))
        return virtual + args
    decoder, mtp = chunk_layers(num_layers, pp, vpp, mtp_layers)
    mtp_last = mtp[-1] == mtp_layers               # Megatron's own split builds the MTP modules last
    if mtp_last and min(decoder) >= 1 and len(set(decoder)) == 1:
        return virtual
    middle = decoder[1:-1]
    if mtp_last and min(decoder) >= 1 and vpp == 1 and len(set(middle)) <= 1:
        mid = middle[0] if middle else None
        args = []
        if mid is not None and decoder[0] != mid:
            args.append(("--decoder-first-pipeline-num-layers", decoder[0]))
        if mid is None or decoder[-1] != mid:
            args.append(("--decoder-last-pipeline-num-layers", decoder[-1]))
        return args
    return [("--pipeline-model-parallel-layout", layout_string(decoder, mtp))]


def _command(p: dict) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` of the plan; raises ``InputError`` when Megatron-LM cannot run it as planned."""
    return _flat(_groups(p)), _environment(p)


def _groups(p: dict) -> list[tuple[str, list[tuple[str, Any]]]]:
    model = require_model(p, "Megatron-LM")
    _refuse_plan(p, model)
    parallel: list[tuple[str, Any]] = [("--tensor-model-parallel-size", p["tp"]),
                                       ("--pipeline-model-parallel-size", p["pp"])]
    if p.get("pipeline_layout"):
        parallel.append(("--pipeline-model-parallel-layout", p["pipeline_layout"]))
    else:
        parallel += pipeline_layout_args(model.num_layers, p["pp"], p["vpp"], model.mtp_layers,
                                         p["first_stage_layers"], p["last_stage_layers"])
    if p["cp"] > 1:
        kind = p["cp_kind"]
        parallel += [("--context-parallel-size", p["cp"]),
                     ("--cp-comm-type", {"ring": "p2p", "ulysses": "a2a", "hybrid": "a2a+p2p", "allgather": "all_gather"}[kind])]
        if kind == "hybrid":
            inner, outer = _hybrid_split(p, model)
            parallel.append(("--hierarchical-context-parallel-sizes", f"{inner} {outer}"))
    if model.moe is not None:
        parallel += [("--expert-model-parallel-size", p["ep"]), ("--expert-tensor-parallel-size", p["etp"])]
    if p["sequence_parallel"] and p["tp"] > 1:
        parallel.append(("--sequence-parallel", None))
    zero = p["zero_stage"]
    if zero == 1:
        parallel.append(("--use-distributed-optimizer", None))
        if p.get("zero_shard_group"):
            # the distributed optimizer sharded within groups and replicated across them
            parallel.append(("--num-distributed-optimizer-instances", p["dp"] * p["cp"] // p["zero_shard_group"]))
    elif zero >= 2:
        parallel += [("--use-megatron-fsdp", None),
                     ("--data-parallel-sharding-strategy", "optim_grads" if zero == 2 else "optim_grads_params"),
                     ("--ckpt-format", "fsdp_dtensor")]
    if not p["grad_accumulation_fusion"]:
        parallel.append(("--no-gradient-accumulation-fusion", None))
    reduces = p["dp"] * p["cp"] > 1
    if p["overlap_grad_reduce"] and reduces:
        parallel.append(("--overlap-grad-reduce", None))
        if p["overlap_param_gather"] and zero >= 1:
            parallel.append(("--overlap-param-gather", None))
        bucket = grad_bucket_elements(p)
        # Megatron-Core's own default is max(40e6, 1e6 dp) elements; write any other bucket the plan priced
        if zero <= 1 and bucket and (p["grad_bucket_elements"], p["grad_bucket_elements_per_dp"]) != (40e6, 1e6):
            parallel.append(("--ddp-bucket-size", bucket))
    if p["dtype"] not in ("fp16", "fp32", "tf32") and p["grad_reduce_bytes"] == 2:
        parallel.append(("--grad-reduce-in-bf16", None))
    elif p["dtype"] == "fp16" and p["grad_reduce_bytes"] == 4:
        parallel.append(("--accumulate-allreduce-grads-in-fp32", None))
    if p["ep_comm_overlap"] and p["ep"] > 1:
        parallel.append(("--overlap-moe-expert-parallel-comm", None))
    if p["tp_comm_overlap"] and p["tp"] > 1 and p["sequence_parallel"]:
        parallel.append(("--tp-comm-overlap", None))

    training: list[tuple[str, Any]] = [("--micro-batch-size", p["micro_batch"]),
                                       ("--global-batch-size", p["global_batch"])]
    recompute = Recompute(p["recompute"])
    if recompute == Recompute.FULL:
        if p.get("recompute_num_layers"):
            training += [("--recompute-granularity", "full"), ("--recompute-method", p["recompute_method"]),
                         ("--recompute-num-layers", p["recompute_num_layers"])]
        else:
            training += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                         ("--recompute-num-layers", 1)]
    elif recompute == Recompute.SELECTIVE:
        training.append(("--recompute-granularity", "selective"))
        modules = [_MODULE_NAMES[m] for m in p.get("recompute_modules") or ()]
        if modules and modules != ["core_attn"]:
            training.append(("--recompute-modules", " ".join(modules)))
    if p.get("optimizer_moment_bytes", 4.0) == 2.0:
        training += [("--use-precision-aware-optimizer", None), ("--exp-avg-dtype", "bf16"),
                     ("--exp-avg-sq-dtype", "bf16")]
    if p.get("offload_optimizer_fraction"):
        # validate_args: the hybrid-device optimizer reuses the precision-aware optimizer's code
        # path, so offload needs the flag (its moments stay fp32 unless the plan says bf16)
        if p.get("optimizer_moment_bytes", 4.0) != 2.0:
            training.append(("--use-precision-aware-optimizer", None))
        training += [("--optimizer-cpu-offload", None),
                     ("--optimizer-offload-fraction", p["offload_optimizer_fraction"])]
    training += _LOSS_FLAGS[p.get("cross_entropy", "megatron_unfused")]
    dtype = p["dtype"]
    if dtype == "fp16":
        training.append(("--fp16", None))
    elif dtype not in ("fp32", "tf32"):
        training.append(("--bf16", None))
    if dtype == "fp8":
        training.append(("--fp8-format", "hybrid"))
        if p.get("fp8_current_scaling"):
            # per-tensor current scaling, as priced (Megatron-Core's default recipe is delayed)
            training.append(("--fp8-recipe", "tensorwise"))
    elif dtype == "mxfp8":
        training += [("--fp8-format", "e4m3"), ("--fp8-recipe", "mxfp8")]
    if dtype in ("fp8", "mxfp8") and p.get("fp8_param_gather"):
        # the plan counted FP8 weights only, no bf16 copy; MXFP8 all-gathers through the gradient
        # buffer, as Megatron-Bridge's bf16_with_mxfp8_mixed pairs them
        training.append(("--fp8-param-gather", None))
        if dtype == "mxfp8":
            training.append(("--reuse-grad-buf-for-mxfp8-param-ag", None))
    elif dtype == "nvfp4":
        training += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
    if not p["flash_attention"]:
        training.append(("--attention-backend", "unfused"))
        if not p["softmax_fusion"]:
            training.append(("--no-masked-softmax-fusion", None))
    model_args = _model_args(model, p["seq_len"], bool(p["ep_dispatch_dedup"] and p["ep"] > 1))
    return [("MODEL_ARGS", model_args), ("PARALLEL_ARGS", parallel),
            ("TRAINING_ARGS", training)]


def _hybrid_split(p: dict, model: ModelSpec) -> tuple[int, int]:
    """(Ulysses, ring) sizes of hybrid CP, as the cost model splits them on the plan's cluster."""
    cluster = p.get("cluster")
    if not cluster:
        raise InputError("cp_kind", "hybrid context parallelism is sized by the scale-up domain, and the plan "
                         "names no cluster", "pass a plan row with its cluster (api.simulate / api.plan rows have it)")
    from hardware_specs.catalog import load_cluster
    gpus_per_node = load_cluster(cluster).gpus_per_node
    inner, outer = hybrid_cp_split(p["cp"], p["tp"], gpus_per_node, model.num_heads)
    return int(inner), int(outer)


def _environment(p: dict) -> dict[str, str]:
    if (p["tp"] > 1 or p["cp"] > 1) and p["zero_stage"] < 2:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return {}


def takes_list(flag: str) -> bool:
    """Whether Megatron-LM's parser takes ``flag``'s value as a list (argparse ``nargs`` '+', '*'
    or a count above 1 in the committed table): such values are written one argv word per
    element (``--recompute-modules layernorm moe_act``); quoted as one word, Megatron-LM's
    TransformerConfig refused 'layernorm moe_act' as one unknown module."""
    nargs = megatron_table.table()["flags"].get(flag, {}).get("nargs")
    return nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1)


def _flat(groups) -> list[str]:
    argv: list[str] = []
    for _, args in groups:
        for flag, value in args:
            argv.append(flag)
            if value is not None:
                argv += str(value).split(" ") if takes_list(flag) else [str(value)]
    return argv


def command(plan_row: Any) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)``: the plan's ``pretrain_gpt.py`` arguments and environment variables."""
    p = plan_fields(plan_row)
    return _command(p)


def _bash_array(name: str, args: list[tuple[str, Any]]) -> str:
    lines = [f"{name}=("]
    for flag, value in args:
        if value is None:
            lines.append(f"    {flag}")
        elif takes_list(flag):
            lines.append(f"    {flag} " + " ".join(shlex.quote(word) for word in str(value).split(" ")))
        else:
            lines.append(f"    {flag} {shlex.quote(str(value))}")
    lines.append(")")
    return "\n".join(lines)


def emit(plan_row: Any, note: str = "") -> str:
    """Megatron-LM launch lines for the plan: ``export`` lines for the environment it needs and
    three bash arrays of ``pretrain_gpt.py`` flags (``MODEL_ARGS``, ``PARALLEL_ARGS``,
    ``TRAINING_ARGS``). Raises ``InputError`` (one line, naming the field) for a plan
    Megatron-LM cannot run as planned.

    Example output (abridged)::

        export CUDA_DEVICE_MAX_CONNECTIONS=1
        PARALLEL_ARGS=(
            --tensor-model-parallel-size 8
            --pipeline-model-parallel-size 4
            --num-virtual-stages-per-pipeline-rank 5
            ...
    """
    p = plan_fields(plan_row)
    err = refusal(p)
    if err is not None:
        raise err
    groups = _groups(p)
    env = _environment(p)
    world = p["n_gpus"]
    header = [f"# {summary(p)}",
              f"# Megatron-LM flags for {release()}, written by paraplan (paraplan.exports.megatron).",
              f"# Launch on {gpus_text(world)} (dp={p['dp']} x tp={p['tp']} x pp={p['pp']} x cp={p['cp']}):",
              f'#   {torchrun_head(p)} pretrain_gpt.py "${{MODEL_ARGS[@]}}" "${{PARALLEL_ARGS[@]}}" \\',
              '#       "${TRAINING_ARGS[@]}" <data, tokenizer, optimizer and checkpoint flags>',
              f"# The tokenizer must have the model's {p['model'].vocab_size} tokens (Megatron-LM pads the "
              "vocabulary to a multiple of 128 x tp)."]
    if note:
        header.append(f"# {note}")
    rope_note = _rope_note(p["model"])
    if rope_note:
        header.append(f"# {rope_note}")
    if p["model"].glu_clamp_limit:
        # Megatron-LM's training flags have no clamp (TransformerConfig.activation_func_clamp_value
        # is set from code: Megatron-Bridge's GPT-OSS provider sets 7.0, quick-GeGLU, offset 1)
        header.append(f"# {p['model'].name} clamps its GLU at {p['model'].glu_clamp_limit:g} "
                      "(activation_func_clamp_value), which no Megatron-LM flag sets: these flags build an "
                      "unclamped SwiGLU of the same sizes, without the clamp's passes the plan priced; set "
                      "the clamp in TransformerConfig or run the model from Megatron-Bridge's GPT-OSS provider.")
    if not env:
        header.append("# No CUDA_DEVICE_MAX_CONNECTIONS: "
                      + ("Megatron-FSDP requires it unset." if p["zero_stage"] >= 2 else "neither TP nor CP > 1."))
    lines = header + [f"export {k}={v}" for k, v in env.items()] + [_bash_array(n, a) for n, a in groups]
    return "\n".join(lines) + "\n"
