"""A chosen plan as the launch configuration of the framework that will run it.

``emit(plan_row, framework)`` turns one plan (a row of ``paraplan.api.simulate`` /
``paraplan.api.plan``, a ``planners.PlanResult`` (its winner), a ``StepReport``, or a plain
dict of ``ParallelConfig`` fields plus ``model`` and ``seq_len``) into

* ``megatron``: Megatron-LM ``pretrain_gpt.py`` flags, as bash arrays to splice into a launch
  script (``MODEL_ARGS``, ``PARALLEL_ARGS``, ``TRAINING_ARGS``);
* ``torchtitan``: a torchtitan job TOML (``[training]``, ``[parallelism]``,
  ``[activation_checkpoint]``, ...);
* ``deepspeed``: a DeepSpeed config JSON (batch sizes, ZeRO stage, precision, activation
  checkpointing, AutoTP / pipeline / Ulysses / AutoEP degrees).

Only option names the frameworks define are written; the allowlists below
(``MEGATRON_OPTIONS``, ``TORCHTITAN_KEYS``, ``DEEPSPEED_KEYS``) name them and where they are
defined, and the tests check every emitted name against them. A plan a framework cannot run
as planned (a schedule it lacks, ZeRO-2/3 beside a pipeline in Megatron-LM or DeepSpeed,
plain DDP beside TP in torchtitan, ...) raises ``InputError`` naming the field, rather than
emitting a different plan; ``RUNNABLE`` states the same limits as planner restrictions, so
``paraplan.api.best_plan_for(framework, ...)`` finds the best plan a framework can run.

How the plan's fields map (the same plan in all three):

================  =========================================  =====================================  ==============================================
plan field        Megatron-LM                                torchtitan                             DeepSpeed
================  =========================================  =====================================  ==============================================
dp                implied: world / (tp*pp*cp)                data_parallel_shard_degree (ZeRO>=1)   implied: train_batch / (micro * accumulation)
                                                             or _replicate_degree (ZeRO-0)
tp                --tensor-model-parallel-size               tensor_parallel_degree                 tensor_parallel.autotp_size
pp, vpp           --pipeline-model-parallel-size,            pipeline_parallel_degree,              pipeline.stages (vpp 1 only)
                  --num-layers-per-virtual-pipeline-stage    pipeline_parallel_split_points
cp                --context-parallel-size, --cp-comm-type    context_parallel_degree                sequence_parallel_size (Ulysses)
ep, etp           --expert-model-parallel-size,              expert_parallel_degree                 expert_parallel.autoep_size,
                  --expert-tensor-parallel-size                                                     expert_parallel.expert_tensor_parallel_size
micro_batch       --micro-batch-size                         pipeline_parallel_microbatch_size      train_micro_batch_size_per_gpu
                                                             (pp>1) or local_batch_size (pp=1)
global_batch      --global-batch-size                        global_batch_size                      train_batch_size
zero_stage        1: --use-distributed-optimizer;            0: replicate; 1-2: shard, reshard      zero_optimization.stage
                  2/3 (pp=1): Megatron-FSDP strategy         "never"; 3: shard, reshard "always"
recompute         --recompute-granularity (+ method/layers)  activation_checkpoint.mode             activation_checkpointing section (+ pipeline.
                                                                                                    activation_checkpoint_interval 1 for full)
================  =========================================  =====================================  ==============================================

``attention_kernel`` is not emitted: it describes the attention kernel the framework's stack
ships (TE / cuDNN for Megatron-LM, PyTorch SDPA for torchtitan, whatever the model code calls
under DeepSpeed), which no option of the three selects; plan with the kernel the target stack
runs.

torchtitan has no ZeRO-1: FSDP2 without resharding after forward (ZeRO-2-like) is the closest
and is what ZeRO-1 and ZeRO-2 plans emit. torchtitan always pairs TP with sequence parallelism.
DeepSpeed's config cannot say *which* activations to recompute; "selective" writes the
``activation_checkpointing`` section with ``pipeline.activation_checkpoint_interval = 0``
(the model code checkpoints the attention core), "full" sets the interval to 1 (every layer).
"""
from __future__ import annotations

import json
import shlex
from dataclasses import fields as dc_fields
from typing import Any, Mapping

from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from model_specs.model_spec import ModelSpec
from simulator.parallel_config import ParallelConfig, Recompute, Schedule
from simulator.report import StepReport

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")

#: Megatron-LM options this module may write: ``megatron/training/arguments.py`` of
#: NVIDIA/Megatron-LM (core_r0.13+; ``--use-megatron-fsdp`` and ``--data-parallel-sharding-strategy``
#: from Megatron-FSDP, ``--fp4-format`` / ``--fp4-recipe`` from the FP4 arguments).
MEGATRON_OPTIONS = frozenset({
    # model
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--kv-channels",
    "--group-query-attention", "--num-query-groups", "--swiglu", "--untie-embeddings-and-output-weights",
    "--seq-length", "--max-position-embeddings", "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--moe-expert-capacity-factor",
    "--moe-token-dispatcher-type", "--moe-grouped-gemm",
    "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim",
    "--v-head-dim", "--window-size",
    # parallelism
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank", "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split", "--context-parallel-size", "--cp-comm-type",
    "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--sequence-parallel",
    "--use-distributed-optimizer", "--use-megatron-fsdp", "--data-parallel-sharding-strategy",
    "--no-gradient-accumulation-fusion", "--ckpt-format", "--overlap-grad-reduce", "--overlap-param-gather",
    "--tp-comm-overlap",
    # training
    "--micro-batch-size", "--global-batch-size", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--bf16", "--fp16", "--fp8-format", "--fp8-recipe", "--fp4-format", "--fp4-recipe",
    "--attention-backend",
})
#: allowed values of Megatron options with a fixed set of choices.
MEGATRON_CHOICES = {
    "--recompute-granularity": {"full", "selective"},
    "--recompute-method": {"uniform", "block"},
    "--fp8-format": {"e4m3", "hybrid"},
    "--fp8-recipe": {"tensorwise", "delayed", "mxfp8", "blockwise"},
    "--fp4-format": {"e2m1"},
    "--fp4-recipe": {"nvfp4"},
    "--cp-comm-type": {"p2p", "a2a", "allgather", "a2a+p2p"},
    "--data-parallel-sharding-strategy": {"no_shard", "optim", "optim_grads", "optim_grads_params"},
    "--ckpt-format": {"torch", "torch_dist", "zarr", "fsdp_dtensor"},
    "--attention-backend": {"flash", "fused", "unfused", "local", "auto"},
    "--moe-token-dispatcher-type": {"allgather", "alltoall", "flex"},
}

#: torchtitan job-config keys this module may write, by TOML table: the dataclasses of
#: ``torchtitan/config/job_config.py`` (pytorch/torchtitan, the TOML job configs of 2025; the
#: split points name torchtitan's decoder blocks ``layers.<i>``, as its Llama and DeepSeek models do).
TORCHTITAN_KEYS = {
    "job": {"description"},
    "model": {"converters"},
    "training": {"local_batch_size", "global_batch_size", "seq_len", "mixed_precision_param"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "enable_async_tensor_parallel", "pipeline_parallel_degree",
                    "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size",
                    "pipeline_parallel_split_points", "context_parallel_degree",
                    "context_parallel_rotate_method", "expert_parallel_degree"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
    "float8": {"recipe_name"},
}
#: torchtitan values with a fixed set of choices; schedules are the names of
#: ``torch.distributed.pipelining.schedules.get_schedule_class``.
TORCHTITAN_CHOICES = {
    ("parallelism", "fsdp_reshard_after_forward"): {"default", "always", "never"},
    ("parallelism", "pipeline_parallel_schedule"): {"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS",
                                                    "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"},
    ("parallelism", "context_parallel_rotate_method"): {"allgather", "alltoall"},
    ("activation_checkpoint", "mode"): {"selective", "full", "none"},
    ("training", "mixed_precision_param"): {"bfloat16", "float32"},
    ("float8", "recipe_name"): {"tensorwise", "rowwise", "rowwise_with_gw_hp"},
}

#: DeepSpeed config keys this module may write, as dotted paths: ``deepspeed/runtime/constants.py``
#: and ``config.py`` (deepspeedai/DeepSpeed: batch, ZeRO, bf16/fp16, ``pipeline`` from
#: ``get_pipeline_config``, ``sequence_parallel_size`` for Ulysses), ``runtime/activation_
#: checkpointing/config.py``, ``runtime/tensor_parallel`` (AutoTP ``autotp_size``) and
#: ``module_inject/auto_ep_config.py`` (AutoEP).
DEEPSPEED_KEYS = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "zero_optimization", "zero_optimization.stage", "zero_optimization.overlap_comm",
    "zero_optimization.contiguous_gradients", "zero_optimization.reduce_scatter",
    "bf16", "bf16.enabled", "fp16", "fp16.enabled",
    "activation_checkpointing", "activation_checkpointing.partition_activations",
    "activation_checkpointing.contiguous_memory_optimization", "activation_checkpointing.cpu_checkpointing",
    "pipeline", "pipeline.stages", "pipeline.activation_checkpoint_interval",
    "tensor_parallel", "tensor_parallel.autotp_size",
    "sequence_parallel_size",
    "expert_parallel", "expert_parallel.enabled", "expert_parallel.autoep_size",
    "expert_parallel.expert_tensor_parallel_size",
})

_CONFIG_FIELDS = tuple(f.name for f in dc_fields(ParallelConfig))

#: what each framework can run, as planner restrictions (``api.plan`` keywords): a plan runs
#: in the framework when it satisfies any one of the listed sets. Mirrors the checks of the
#: emitters below (``paraplan.api.best_plan_for`` searches each set and keeps the fastest).
RUNNABLE = {
    # the distributed optimizer (ZeRO-1) runs with any pipeline; Megatron-FSDP (ZeRO-2/3) without one
    "megatron": ({"zero_stage": [0, 1]}, {"pp": 1}),
    # plain DDP only without model parallelism; FSDP2 (ZeRO >= 1) with everything
    "torchtitan": ({"zero_stage": [1, 2, 3]}, {"tp": 1, "pp": 1, "cp": 1}),
    # one 1F1B schedule, ZeRO <= 1 beside a pipeline, Ulysses (not ring) sequence parallelism.
    # Its ZeRO-3 gathers a fully recomputed layer a third time, which the planner (FSDP-style
    # ZeRO-3) does not cost, so ZeRO-3 plans are offered only without full recomputation
    "deepspeed": ({"vpp": 1, "zero_stage": [0, 1], "cp": 1}, {"pp": 1, "cp": 1, "zero_stage": [0, 1, 2]},
                  {"pp": 1, "cp": 1, "zero_stage": [3], "recompute": ["none", "selective"]}),
}


# --------------------------------------------------------------------------------------------
# The plan, normalised
# --------------------------------------------------------------------------------------------

def plan_fields(plan_row: Any) -> dict:
    """The plan as a dict: every ``ParallelConfig`` field (validated), plus ``model`` (a
    ``ModelSpec`` or None), ``seq_len``, and the prediction fields the row carries.

    ``plan_row``: a row (Series / dict) of ``api.simulate`` or ``api.plan``, a one-row
    DataFrame, a ``StepReport``, or a ``planners.PlanResult`` (its winner).
    """
    if hasattr(plan_row, "plans") and hasattr(plan_row, "seq_len"):   # a planners.PlanResult: its winner
        result = plan_row
        if len(result.plans) == 0:
            raise InputError("plan", "the search found no plan", "relax the request")
        plan_row = {**result.plans.iloc[0].to_dict(), "model": result.model, "seq_len": result.seq_len,
                    "cluster": result.cluster, "gpu": result.gpu}
    if isinstance(plan_row, StepReport):
        row = {**plan_row.as_dict(), **dict(plan_row.config)}
        row["seq_len"] = int(round(plan_row.tokens_per_step / plan_row.config["global_batch"]))
    elif hasattr(plan_row, "to_dict"):      # pandas Series (or a one-row DataFrame)
        row = plan_row.to_dict()
        if row and all(isinstance(v, dict) for v in row.values()):   # DataFrame.to_dict()
            if len(plan_row) != 1:
                raise InputError("plan", f"expected one plan, got {len(plan_row)} rows", "pass plans.iloc[0]")
            row = plan_row.iloc[0].to_dict()
    elif isinstance(plan_row, Mapping):
        row = dict(plan_row)
    else:
        raise InputError("plan", f"cannot read a plan from {type(plan_row).__name__}",
                         "pass a row of paraplan.api.plan/simulate, a StepReport or a dict")
    if isinstance(row.get("config"), Mapping):
        row = {**row, **row["config"]}
    config_kwargs = {k: _plain(row[k]) for k in _CONFIG_FIELDS if k in row and _present(row[k])}
    for required in ("tp", "pp", "micro_batch", "global_batch"):
        if required not in config_kwargs:
            raise InputError(required, "missing from the plan row", "pass a full plan row (it names every degree)")
    if "dp" not in config_kwargs:
        n = row.get("n_gpus") or row.get("gpus")
        if n is None:
            raise InputError("dp", "missing from the plan row")
        config_kwargs["dp"] = int(n) // (config_kwargs["tp"] * config_kwargs["pp"] * int(config_kwargs.get("cp", 1)))
    config = ParallelConfig(**config_kwargs)
    out = config.as_dict()
    model = row.get("model")
    if isinstance(model, ModelSpec):
        spec = model
    elif isinstance(model, str) and model:
        try:
            spec = load_model(model)
        except InputError:
            spec = None                      # a name the catalog does not know: parallel flags only
    else:
        spec = None
    seq_len = row.get("seq_len")
    if not _present(seq_len):
        tokens = row.get("global_batch_tokens") or row.get("tokens_per_step")
        seq_len = int(round(tokens / config.global_batch)) if _present(tokens) else (spec.seq_len if spec else None)
    if seq_len is None:
        raise InputError("seq_len", "missing from the plan row", "add seq_len (tokens per sequence)")
    out["seq_len"] = int(seq_len)
    out["model"] = spec
    out["model_name"] = spec.name if spec is not None else (model if isinstance(model, str) else "")
    out["n_gpus"] = config.n_gpus
    for key in ("cluster", "gpu", "step_time_s", "tokens_per_s", "mfu", "memory_gib"):
        if key in row and _present(row[key]):
            out[key] = _plain(row[key])
    return out


def _present(v: Any) -> bool:
    if v is None:
        return False
    try:
        return not (isinstance(v, float) and v != v)
    except TypeError:
        return True


def _plain(v: Any) -> Any:
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 0) == 0:
        return v.item()
    return v


def _summary(p: dict) -> str:
    parts = [f"dp={p['dp']} tp={p['tp']} pp={p['pp']}"]
    for k in ("vpp", "cp", "ep"):
        if p[k] > 1:
            parts.append(f"{k}={p[k]}")
    parts.append(f"micro_batch={p['micro_batch']} global_batch={p['global_batch']} x {p['seq_len']} tokens")
    parts.append(f"zero={p['zero_stage']} recompute={p['recompute']} schedule={p['schedule']} dtype={p['dtype']}")
    head = f"{p['model_name'] or 'model'} on {p['n_gpus']} GPUs"
    if p.get("gpu"):
        head += f" ({p['gpu']}{', ' + p['cluster'] if p.get('cluster') else ''})"
    pred = ""
    if "step_time_s" in p:
        pred = f"; predicted {p['step_time_s']:.2f} s/step"
        if "tokens_per_s" in p:
            pred += f", {p['tokens_per_s']:,.0f} tokens/s"
        if "mfu" in p:
            pred += f", MFU {100 * p['mfu']:.1f}%"
    return f"paraplan plan: {head}: " + ", ".join(parts) + pred


# --------------------------------------------------------------------------------------------
# Megatron-LM
# --------------------------------------------------------------------------------------------

def _moe_layer_freq(model: ModelSpec) -> str | None:
    moe = model.moe
    if moe.first_dense_layers == 0 and moe.moe_layer_frequency == 1:
        return None
    pattern = [0] * moe.first_dense_layers
    for i in range(model.num_layers - moe.first_dense_layers):
        pattern.append(1 if i % moe.moe_layer_frequency == 0 else 0)
    if moe.moe_layer_frequency == 1:
        return f"([0]*{moe.first_dense_layers}+[1]*{model.num_layers - moe.first_dense_layers})"
    return "[" + ",".join(map(str, pattern)) + "]"


def _megatron_model_args(m: ModelSpec, seq_len: int) -> list[tuple[str, Any]]:
    args: list[tuple[str, Any]] = [("--num-layers", m.num_layers), ("--hidden-size", m.hidden_size),
                                   ("--ffn-hidden-size", m.ffn_hidden_size), ("--num-attention-heads", m.num_heads)]
    if m.mla is None and m.head_dim * m.num_heads != m.hidden_size:
        args.append(("--kv-channels", m.head_dim))
    if m.mla is None and m.num_kv_heads < m.num_heads:
        args += [("--group-query-attention", None), ("--num-query-groups", m.num_kv_heads)]
    if m.mla is not None:
        args += [("--multi-latent-attention", None), ("--kv-lora-rank", m.mla.kv_lora_rank),
                 ("--qk-head-dim", m.mla.qk_nope_head_dim), ("--qk-pos-emb-head-dim", m.mla.qk_rope_head_dim),
                 ("--v-head-dim", m.mla.v_head_dim)]
        if m.mla.q_lora_rank:
            args.append(("--q-lora-rank", m.mla.q_lora_rank))
    if m.gated_mlp:
        args.append(("--swiglu", None))
    if not m.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    if m.moe is not None:
        # all-to-all dispatch and grouped expert GEMMs: the MoE layer paraplan's cost model prices
        args += [("--num-experts", m.moe.num_experts), ("--moe-router-topk", m.moe.top_k),
                 ("--moe-ffn-hidden-size", m.moe.expert_ffn_hidden_size),
                 ("--moe-token-dispatcher-type", "alltoall"), ("--moe-grouped-gemm", None)]
        if m.moe.num_shared_experts:
            width = m.moe.shared_expert_ffn_hidden_size or m.moe.expert_ffn_hidden_size
            args.append(("--moe-shared-expert-intermediate-size", m.moe.num_shared_experts * width))
        freq = _moe_layer_freq(m)
        if freq is not None:
            args.append(("--moe-layer-freq", freq))
        if m.moe.capacity_factor:
            args.append(("--moe-expert-capacity-factor", m.moe.capacity_factor))
    args += [("--seq-length", seq_len), ("--max-position-embeddings", max(seq_len, 1))]
    return args


def _megatron_args(p: dict) -> tuple[list, list, list]:
    model: ModelSpec | None = p["model"]
    schedule = Schedule(p["schedule"])
    if schedule not in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED):
        raise InputError("schedule", f"Megatron-LM has no {schedule.value} pipeline schedule",
                         "choose 1f1b or interleaved (vpp > 1), or emit torchtitan")
    parallel: list[tuple[str, Any]] = [("--tensor-model-parallel-size", p["tp"]),
                                       ("--pipeline-model-parallel-size", p["pp"])]
    if p["vpp"] > 1:
        if model is None:
            parallel.append(("--num-virtual-stages-per-pipeline-rank", p["vpp"]))
        elif model.num_layers % (p["pp"] * p["vpp"]) == 0:
            parallel.append(("--num-layers-per-virtual-pipeline-stage", model.num_layers // (p["pp"] * p["vpp"])))
        else:   # L + 2 chunks: the embedding and the loss count as one layer each
            parallel += [("--num-virtual-stages-per-pipeline-rank", p["vpp"]),
                         ("--account-for-embedding-in-pipeline-split", None),
                         ("--account-for-loss-in-pipeline-split", None)]
    if p["cp"] > 1:
        parallel += [("--context-parallel-size", p["cp"]),
                     ("--cp-comm-type", {"ring": "p2p", "ulysses": "a2a", "hybrid": "a2a+p2p"}[p["cp_kind"]])]
    if p["ep"] > 1 or (model is not None and model.moe is not None):
        parallel.append(("--expert-model-parallel-size", p["ep"]))
        parallel.append(("--expert-tensor-parallel-size", p["etp"]))
    if p["sequence_parallel"] and p["tp"] > 1:
        parallel.append(("--sequence-parallel", None))
    zero = p["zero_stage"]
    if zero >= 2 and p["pp"] > 1:
        raise InputError("zero_stage", f"Megatron-LM shards gradients (ZeRO-{zero}) only with Megatron-FSDP, which "
                         "does not run with pipeline parallelism", "use zero_stage <= 1 with pp > 1, or pp = 1")
    if zero >= 1:
        parallel.append(("--use-distributed-optimizer", None))
    if zero >= 2:
        parallel += [("--use-megatron-fsdp", None),
                     ("--data-parallel-sharding-strategy", "optim_grads" if zero == 2 else "optim_grads_params"),
                     ("--ckpt-format", "fsdp_dtensor")]
    # Megatron-FSDP needs autograd's own accumulation; the plan's prediction then includes it
    # only if the plan says so (``grad_accumulation_fusion``), so say it whenever it is off
    if zero >= 2 or not p.get("grad_accumulation_fusion", True):
        parallel.append(("--no-gradient-accumulation-fusion", None))
    if p["overlap_grad_reduce"] and p["dp"] * p["cp"] > 1:
        parallel.append(("--overlap-grad-reduce", None))
    if p["overlap_param_gather"] and zero >= 1 and p["dp"] * p["cp"] > 1:
        parallel.append(("--overlap-param-gather", None))
    if p["tp_comm_overlap"] and p["tp"] > 1:
        parallel.append(("--tp-comm-overlap", None))

    training: list[tuple[str, Any]] = [("--micro-batch-size", p["micro_batch"]),
                                       ("--global-batch-size", p["global_batch"])]
    recompute = Recompute(p["recompute"])
    if recompute == Recompute.FULL:
        training += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                     ("--recompute-num-layers", 1)]
    elif recompute == Recompute.SELECTIVE:
        training.append(("--recompute-granularity", "selective"))
    dtype = p["dtype"]
    if dtype == "fp16":
        training.append(("--fp16", None))
    elif dtype != "fp32" and dtype != "tf32":
        training.append(("--bf16", None))
    if dtype == "fp8":
        training += [("--fp8-format", "hybrid")]
    elif dtype == "mxfp8":
        training += [("--fp8-format", "e4m3"), ("--fp8-recipe", "mxfp8")]
    elif dtype == "nvfp4":
        training += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
    if not p["flash_attention"]:
        training.append(("--attention-backend", "unfused"))

    model_args = _megatron_model_args(model, p["seq_len"]) if model is not None else [
        ("--seq-length", p["seq_len"]), ("--max-position-embeddings", p["seq_len"])]
    return model_args, parallel, training


def _bash_array(name: str, args: list[tuple[str, Any]]) -> str:
    lines = [f"{name}=("]
    for flag, value in args:
        lines.append(f"    {flag}" if value is None else f"    {flag} {shlex.quote(str(value))}")
    lines.append(")")
    return "\n".join(lines)


def emit_megatron(plan_row: Any) -> str:
    """Megatron-LM ``pretrain_gpt.py`` flags for the plan, as three bash arrays.

    Example output (abridged)::

        PARALLEL_ARGS=(
            --tensor-model-parallel-size 8
            --pipeline-model-parallel-size 4
            --num-layers-per-virtual-pipeline-stage 4
            --sequence-parallel
            --use-distributed-optimizer
            ...
        )

    Launch with ``torchrun ... pretrain_gpt.py "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}"
    "${TRAINING_ARGS[@]}"`` plus data, tokenizer and optimizer flags; the data-parallel size is
    what is left of the world size (dp = world / (tp * pp * cp)). Model flags are written when
    the row names a catalog model; normalisation, position embeddings and biases are not in
    ``ModelSpec`` and stay the user's to set.
    """
    p = plan_fields(plan_row)
    model_args, parallel, training = _megatron_args(p)
    world = p["n_gpus"]
    nodes_hint = f"{world} GPUs in all (dp={p['dp']} x tp={p['tp']} x pp={p['pp']} x cp={p['cp']})"
    header = [f"# {_summary(p)}",
              "# Megatron-LM flags written by paraplan (paraplan.exports.emit_megatron).",
              f"# Launch on {nodes_hint}:",
              '#   torchrun --nnodes N --nproc-per-node G pretrain_gpt.py "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" \\',
              '#       "${TRAINING_ARGS[@]}" <data, tokenizer, optimizer and checkpoint flags>']
    body = [_bash_array("MODEL_ARGS", model_args), _bash_array("PARALLEL_ARGS", parallel),
            _bash_array("TRAINING_ARGS", training)]
    return "\n".join(header) + "\n" + "\n".join(body) + "\n"


# --------------------------------------------------------------------------------------------
# torchtitan
# --------------------------------------------------------------------------------------------

_TITAN_SCHEDULES = {
    Schedule.GPIPE: "GPipe", Schedule.ONE_F_ONE_B: "1F1B", Schedule.INTERLEAVED: "Interleaved1F1B",
    Schedule.ZB_H1: "InterleavedZeroBubble", Schedule.ZB_V: "ZBVZeroBubble", Schedule.DUALPIPE: "DualPipeV",
}


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))      # a TOML basic string is JSON-compatible for these values


def _torchtitan_tables(p: dict) -> dict[str, dict[str, Any]]:
    dp, tp, pp, cp, ep = p["dp"], p["tp"], p["pp"], p["cp"], p["ep"]
    zero = p["zero_stage"]
    schedule = Schedule(p["schedule"])
    if pp > 1 and schedule not in _TITAN_SCHEDULES:
        raise InputError("schedule", f"torchtitan has no {schedule.value} pipeline schedule",
                         "choose gpipe, 1f1b, interleaved, zb-h1, zb-v or dualpipe")
    if zero == 0 and dp * cp > 1 and (tp > 1 or pp > 1 or cp > 1):
        raise InputError("zero_stage", "torchtitan runs plain DDP (ZeRO-0) only without TP, PP or CP "
                         "(with CP it shards over the CP ranks)", "use a plan with zero_stage >= 1 (FSDP) for torchtitan")
    if p["dtype"] == "fp16":
        raise InputError("dtype", "torchtitan trains in bfloat16 or float32, not fp16", "use bf16")
    if p["dtype"] in ("mxfp8", "nvfp4"):
        raise InputError("dtype", f"this export writes torchtitan's float8 converter only, not {p['dtype']}",
                         "use fp8 or bf16")
    tables: dict[str, dict[str, Any]] = {"job": {"description": _summary(p)}}
    if p["dtype"] == "fp8":
        tables["model"] = {"converters": ["float8"]}
    training: dict[str, Any] = {}
    if pp > 1:   # the pipeline splits each rank's batch into micro-batches itself
        training["local_batch_size"] = p["global_batch"] // dp
    else:        # torchtitan accumulates gradients when global > local * dp
        training["local_batch_size"] = p["micro_batch"]
    training["global_batch_size"] = p["global_batch"]
    training["seq_len"] = p["seq_len"]
    training["mixed_precision_param"] = "float32" if p["dtype"] in ("fp32", "tf32") else "bfloat16"
    tables["training"] = training
    par: dict[str, Any] = {}
    if zero == 0:
        par["data_parallel_replicate_degree"] = dp
        par["data_parallel_shard_degree"] = 1
    else:
        par["data_parallel_replicate_degree"] = 1
        par["data_parallel_shard_degree"] = dp
        par["fsdp_reshard_after_forward"] = "always" if zero == 3 else "never"
    par["tensor_parallel_degree"] = tp
    if tp > 1:
        par["enable_async_tensor_parallel"] = bool(p["tp_comm_overlap"])
    par["pipeline_parallel_degree"] = pp
    if pp > 1:
        par["pipeline_parallel_schedule"] = _TITAN_SCHEDULES[schedule]
        par["pipeline_parallel_microbatch_size"] = p["micro_batch"]
        model: ModelSpec | None = p["model"]
        chunks = pp * (2 if schedule in (Schedule.ZB_V, Schedule.DUALPIPE) else p["vpp"])
        if model is None:
            if chunks > pp * 2:
                raise InputError("vpp", "the split points of a pipeline with more than 2 chunks per rank need "
                                 "the model's layer count", "pass a plan row that names a catalog model")
        else:   # explicit split points: the module starting each chunk after the first
            par["pipeline_parallel_split_points"] = [f"layers.{(i * model.num_layers) // chunks}"
                                                     for i in range(1, chunks)]
    par["context_parallel_degree"] = cp
    if cp > 1:
        par["context_parallel_rotate_method"] = "alltoall" if p["cp_kind"] == "ulysses" else "allgather"
    if ep > 1:
        par["expert_parallel_degree"] = ep
    tables["parallelism"] = par
    ac: dict[str, Any] = {"mode": Recompute(p["recompute"]).value}
    if ac["mode"] == "selective":
        ac["selective_ac_option"] = "op"
    tables["activation_checkpoint"] = ac
    if p["dtype"] == "fp8":
        tables["float8"] = {"recipe_name": "tensorwise"}
    return tables


def emit_torchtitan(plan_row: Any) -> str:
    """A torchtitan job TOML for the plan (load it with ``--job.config_file``).

    ``[model]`` name / flavor / tokenizer and ``[optimizer]``, ``[checkpoint]`` stay the
    user's: the file carries the plan's parallelism, batch and recomputation only. ZeRO-1 and
    ZeRO-2 both write FSDP2 with ``fsdp_reshard_after_forward = "never"``, ZeRO-3 ``"always"``.
    """
    p = plan_fields(plan_row)
    tables = _torchtitan_tables(p)
    lines = [f"# {_summary(p)}", "# torchtitan job config written by paraplan (paraplan.exports.emit_torchtitan);",
             "# add [model] name/flavor/tokenizer_path, [optimizer] and [checkpoint] for your run.", ""]
    for table, values in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# DeepSpeed
# --------------------------------------------------------------------------------------------

def _deepspeed_config(p: dict) -> dict:
    dp, tp, pp, cp = p["dp"], p["tp"], p["pp"], p["cp"]
    zero = p["zero_stage"]
    if pp > 1 and zero >= 2:
        raise InputError("zero_stage", f"DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only, not {zero}",
                         "use a plan with zero_stage <= 1, or pp = 1")
    if p["vpp"] > 1 or Schedule(p["schedule"]) not in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED):
        raise InputError("schedule" if p["vpp"] == 1 else "vpp",
                         f"DeepSpeed's pipeline engine has one schedule (1F1B, one stage per rank), not "
                         f"{p['schedule']}" + (f" with vpp={p['vpp']}" if p["vpp"] > 1 else ""),
                         "use a plan with vpp 1 and the 1f1b schedule, or emit megatron/torchtitan")
    accumulation = p["global_batch"] // (p["micro_batch"] * dp)
    cfg: dict[str, Any] = {
        "train_batch_size": p["global_batch"],
        "train_micro_batch_size_per_gpu": p["micro_batch"],
        "gradient_accumulation_steps": accumulation,
        "zero_optimization": {"stage": zero, "overlap_comm": bool(p["overlap_grad_reduce"]),
                              "contiguous_gradients": True, "reduce_scatter": True},
        "bf16": {"enabled": p["dtype"] not in ("fp16", "fp32", "tf32")},
        "fp16": {"enabled": p["dtype"] == "fp16"},
    }
    if tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": tp}
    recompute = Recompute(p["recompute"])
    cfg["pipeline"] = {"stages": pp, "activation_checkpoint_interval": 1 if recompute == Recompute.FULL else 0}
    if cp > 1:
        if p["cp_kind"] != "ulysses":
            raise InputError("cp_kind", f"DeepSpeed's sequence parallelism is Ulysses (all-to-all), not {p['cp_kind']}",
                             "use cp_kind ulysses for DeepSpeed, or emit megatron/torchtitan")
        cfg["sequence_parallel_size"] = cp
    if p["ep"] > 1:
        cfg["expert_parallel"] = {"enabled": True, "autoep_size": p["ep"],
                                  "expert_tensor_parallel_size": p["etp"]}
    if recompute != Recompute.NONE:
        cfg["activation_checkpointing"] = {"partition_activations": bool(p["sequence_parallel"] and tp > 1),
                                           "contiguous_memory_optimization": False, "cpu_checkpointing": False}
    return cfg


def emit_deepspeed(plan_row: Any) -> str:
    """A DeepSpeed config JSON for the plan (``deepspeed.initialize(config=...)``).

    Written for a DeepSpeed-native run: AutoTP for tensor parallelism, ``PipelineModule`` for
    pipeline stages (its ``num_stages`` must equal ``pipeline.stages``), Ulysses for context
    parallelism, AutoEP for experts. ``train_batch_size = micro * accumulation * dp`` where dp
    is the data-parallel size DeepSpeed derives (world / (tp * pp * cp)). With
    Megatron-DeepSpeed, keep the batch, ZeRO, precision and checkpointing keys and give the
    degrees as Megatron flags (``emit_megatron``) instead of ``tensor_parallel`` /
    ``sequence_parallel_size``.
    """
    return json.dumps(_deepspeed_config(plan_fields(plan_row)), indent=2) + "\n"


# --------------------------------------------------------------------------------------------

_EMITTERS = {"megatron": emit_megatron, "torchtitan": emit_torchtitan, "deepspeed": emit_deepspeed}


def emit(plan_row: Any, framework: str) -> str:
    """The plan as ``framework``'s launch configuration: ``megatron`` (bash arrays of flags),
    ``torchtitan`` (TOML) or ``deepspeed`` (JSON)."""
    key = str(framework).strip().lower()
    if key not in _EMITTERS:
        raise InputError("--emit", f"unknown framework {framework!r}", "choose megatron, torchtitan or deepspeed")
    return _EMITTERS[key](plan_row)


def file_suffix(framework: str) -> str:
    """The usual file suffix of ``framework``'s output (``.sh``, ``.toml``, ``.json``)."""
    return {"megatron": ".sh", "torchtitan": ".toml", "deepspeed": ".json"}[framework]
