"""``paraplan simulate``: one model, one cluster, one parallel configuration -> one step.

Every ``ParallelConfig`` field is an option; the output is a table (header, step-time
breakdown, throughput, memory per GPU, fits, why) or, with ``--json``, ``StepReport.as_dict()``.
``--trace`` / ``--gantt`` run the event-level pipeline simulator (``simulator.pipeline``) on the
same configuration and write a Chrome/Perfetto trace or a PNG timeline.
"""
from __future__ import annotations


import textwrap

import click

from cost_models.compute import FULL_PRECISION, sixteen_bit_dtype
from cost_models.sharding import largest_zero_group
from hardware_specs.catalog import load_cluster, load_stack
from hardware_specs.placement import placement_note
from hardware_specs.errors import InputError, suggest
from hardware_specs.gpu_spec import KNOWN_DTYPES
from model_specs.catalog import load_model
from model_specs.model_spec import ModelSpec
from paraplan import mfu as mfu_units
from paraplan import priors
from paraplan.cli import atomic_output_path, check_distinct_paths, check_image_path, check_writable, dump_json, format_table
from paraplan.commands.token_count import TOKENS
from planners.plan import whole_sequences_fix
from simulator.parallel_config import (MAX_GLOBAL_BATCH, MAX_GPUS, AttentionKernel, CPKind, ParallelConfig, Recompute,
                                       RecomputeMethod, Schedule)
from simulator import headroom
from simulator.report import StepReport
from simulator.simulate import simulate
from simulator.stack_defaults import (check_default_expert_tp, run_cp_kind, stack_config_fields, stack_expert_tp,
                                      stack_sequence_parallel, stack_zero_stage)

GIB = 2**30

#: what each step-time part is, for the table (keys are ``TIME_PARTS``).
TIME_MEANING = {
    "compute_s": "fwd + bwd compute: GEMMs, attention, elementwise, LM head, grad accum.",
    "recompute_s": "activation recomputation in backward",
    "tp_comm_exposed_s": "tensor-parallel collectives not hidden under GEMMs",
    "cp_comm_exposed_s": "context-parallel K/V exchange not hidden under attention",
    "ep_comm_exposed_s": "expert-parallel dispatch/combine all-to-all not hidden",
    "pp_comm_s": "pipeline send/recv between stages not hidden under the next chunk",
    "zero3_comm_exposed_s": "ZeRO-3 / FSDP gathers and per-micro-batch grad reductions, not hidden",
    "pipeline_bubble_s": "pipeline fill and drain (idle stages)",
    "dp_comm_exposed_s": "data-parallel gradient reduction (tied embedding's too) not hidden",
    "sync_wait_s": "waiting for the slowest rank at synchronisations (compute jitter)",
    "optimizer_s": "optimizer step (Adam, memory-bound)",
    "offload_exposed_s": "host offload transfers (and host optimizer step) not hidden",
}
#: ``dp_comm_exposed_s`` under DualPipe, which also sums its two model copies' gradients (the
#: pair of ranks holding mirror stages) after the data-parallel reduction
#: (``step_model.dualpipe_pair_all_reduce_s``), at any dp
DUALPIPE_DP_MEANING = {
    "dp_comm_exposed_s": "DP + DualPipe copy-pair grad reductions (tied embedding's too) not hidden",
}
#: the same with no data-parallel group to reduce over (dp = cp = 1): the pair exchange alone
DUALPIPE_NO_DP_MEANING = {
    "dp_comm_exposed_s": "DualPipe's copy-pair gradient exchange (tied embedding's too) not hidden",
}

#: ``ep_comm_exposed_s`` under ``ep_comm_overlap`` with expert parallelism, priced as Megatron-Core's
#: combined 1F1B (``step_model.ep_unpaired_s``)
EP_OVERLAP_MEANING = {
    "ep_comm_exposed_s": "all-to-all the fwd/bwd pairs leave + the unpaired passes' (overlap on)",
}


def time_meaning(report: StepReport) -> dict:
    """``TIME_MEANING`` as it applies to ``report``'s configuration (DualPipe's pair exchange is
    in ``dp_comm_exposed_s``; under ``ep_comm_overlap`` the expert all-to-alls the pairs of passes
    leave and those of the passes with no partner are in ``ep_comm_exposed_s``)."""
    c = report.config
    out = dict(TIME_MEANING)
    if c.get("ep_comm_overlap") and c.get("ep", 1) > 1:
        out.update(EP_OVERLAP_MEANING)
    if c.get("schedule") == "dualpipe" and c.get("pp", 1) >= 2:
        out.update(DUALPIPE_DP_MEANING if c["dp"] * c["cp"] > 1 else DUALPIPE_NO_DP_MEANING)
    return out


#: fp32 / tf32 training keeps 4-byte weights and gradients and no master copy
#: (``cost_models.memory.model_state_bytes``, ``full_precision``)
FULL_PRECISION_MEANING = {
    "weights_bytes": "fp32 weights",
    "gradients_bytes": "fp32 gradients",
    "optimizer_bytes": "Adam m and v (fp32 training: no master copy; less what is offloaded)",
}
MEMORY_MEANING = {
    "weights_bytes": "16-bit weights (and the 8-bit copies of low-precision GEMMs)",
    "gradients_bytes": "fp32 main gradients",
    "optimizer_bytes": "master weights (if kept), Adam m and v (less what is offloaded)",
    "activations_bytes": "stored activations of in-flight micro-batches",
    "logits_bytes": "logits kept for the loss (and each MTP head)",
    "recompute_buffers_bytes": "the computing layer's recompute and CP buffers beyond the freed logits",
    "offload_buffers_bytes": "staging of activation copies to and from the host",
    "moe_dispatch_bytes": "one MoE layer's token exchange buffers",
    "zero3_buffers_bytes": "ZeRO-3 gathered layers or LM head; ZeRO-2/3 their unsharded gradient",
    "allocator_bytes": "allocator fragmentation + CUDA/NCCL workspaces",
}
#: a gradient buffer in the weights' 16-bit dtype (``ParallelConfig.grad_buffer_bytes`` 2: Megatron-LM
#: 2021/2022 fp16, DeepSpeed fp16): the row holds 2 bytes a parameter, not the fp32 main gradients
SIXTEEN_BIT_GRADS_MEANING = {"gradients_bytes": "16-bit gradients (the stack keeps no fp32 main gradients)"}
#: what differs on a host CPU device (``GPUSpec.is_cpu``: no CUDA runtime, ``memory.runtime_reserved_bytes``)
CPU_MEMORY_MEANING = {"allocator_bytes": "allocator fragmentation"}


# --------------------------------------------------------------------------------------------
# Building the inputs
# --------------------------------------------------------------------------------------------

def _at_most(option: str, value: int, largest: int) -> int:
    """``value``, or the error naming the ``option`` typed when it is above ``largest`` (the
    configuration named the field it becomes, global_batch for --global-batch-tokens)."""
    if value > largest:
        raise InputError(option, f"{value:,} is above the largest supported value {largest:,}", "check the number")
    return value


#: options ParallelConfig bounds by the largest job (a degree, or sequences per micro-batch)
_BOUNDED_OPTIONS = ("gpus", "dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch")


def check_bounds(opts: dict) -> None:
    """Each degree option at most the largest job, before any is multiplied (--cp 10**21 was told
    to use a multiple of 32,000,000,000,000,000,000,000 GPUs)."""
    for name in _BOUNDED_OPTIONS:
        if opts.get(name) is not None:
            _at_most(f"--{name.replace('_', '-')}", opts[name], MAX_GPUS)


def _global_batch(global_batch: int | None, global_batch_tokens: int | None, seq_len: int) -> int:
    if global_batch is not None and global_batch_tokens is not None:
        raise InputError("--global-batch", "give --global-batch or --global-batch-tokens, not both",
                         "give --global-batch SEQUENCES or --global-batch-tokens TOKENS")
    if global_batch is not None:
        return _at_most("--global-batch", global_batch, MAX_GLOBAL_BATCH)
    if global_batch_tokens is None:
        raise InputError("--global-batch", "missing",
                         "give --global-batch SEQUENCES or --global-batch-tokens TOKENS")
    _at_most("--global-batch-tokens", global_batch_tokens, MAX_GLOBAL_BATCH * seq_len)
    if global_batch_tokens % seq_len:
        raise InputError("--global-batch-tokens", f"{global_batch_tokens} is not a multiple of the sequence "
                         f"length {seq_len}", whole_sequences_fix(global_batch_tokens, seq_len))
    return global_batch_tokens // seq_len


def _data_parallel(dp: int | None, gpus: int | None, tp: int, pp: int, cp: int) -> int:
    if dp is not None:
        return dp
    if gpus is None:
        return 1
    per_replica = tp * pp * cp
    if gpus % per_replica:
        raise InputError("--gpus", f"{gpus} GPUs do not divide by tp*pp*cp = {tp}*{pp}*{cp} = {per_replica}",
                         f"use a multiple of {per_replica} GPUs or give --dp")
    return gpus // per_replica


#: software switches that default to the ``--stack``'s behaviour and override it when given
SWITCH_OPTIONS = ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "ep_comm_overlap",
                  "ep_dispatch_dedup",
                  "flash_attention", "attention_kernel", "grad_accumulation_fusion", "zero3_recompute_gather")


#: schedules that run as 1F1B on one pipeline stage: the zero-bubble splits only fill bubbles
#: between stages, and ZB-V's two chunks on one rank are the layers in order (GPipe is not
#: among them: it keeps every micro-batch's activations, so it still differs at pp 1)
_ONE_STAGE_AS_1F1B = (Schedule.ZB_H1.value, Schedule.ZB_H2.value, Schedule.ZB_V.value)


#: the expert-communication switches, shared by ``simulate`` and ``plan`` (one meaning, one help)
ep_comm_overlap_option = click.option(
    "--ep-comm-overlap/--no-ep-comm-overlap", default=None,
    help="MoE dispatch/combine all-to-alls overlap compute, only what exceeds the layer's compute "
         "is exposed (DeepSeek-V3's DualPipe chunk pairs, DeepEP, Megatron's "
         "--overlap-moe-expert-parallel-comm); default: the stack's.")
ep_dispatch_dedup_option = click.option(
    "--ep-dispatch-dedup/--no-ep-dispatch-dedup", default=None,
    help="The MoE dispatcher sends a token once per destination GPU and once per destination node "
         "(forwarded over NVLink inside it) instead of once per chosen expert: DeepEP / HybridEP, "
         "Megatron's --moe-token-dispatcher-type flex; default: the stack's.")
#: the help of ``--stack``: what it takes (``hardware_specs.catalog.load_stack``)
STACK_HELP = ("Software stack: a catalog name (see `paraplan hardware stacks`) or a stack YAML file "
              "(the format of hardware_specs/stacks/*.yaml)")


def refuse_options_without_effect(opts: dict) -> None:
    """Refuse a value the user chose that the run would not use (the table would print it beside
    numbers it did not change, or another value it ran instead): a zero-bubble schedule on one
    stage, 1f1b with a vpp (run interleaved), sequence parallelism at tp 1, a CP flavour without CP,
    the uniform recompute method without a full recomputation of N layers. The command line
    refuses them, and a ``search: simulate`` sweep marks such a grid point ``invalid`` with this
    reason (``paraplan.sweeps.evaluate``: its row would otherwise show the configuration that ran,
    not its grid point's); the API, planner and validation rows keep the degenerate but valid
    configurations (a --fix schedule over a pp range that includes 1).

    ``opts``: the values the user set, by ``ParallelConfig`` field (``pp``, ``tp``, ``cp`` always;
    ``vpp``, ``schedule``, ``sequence_parallel``, ``cp_kind``, ``recompute_method``,
    ``recompute``, ``recompute_num_layers`` where set)."""
    if opts["pp"] == 1 and opts.get("schedule") in _ONE_STAGE_AS_1F1B:
        raise InputError("schedule", f"{opts['schedule']} with pp 1 runs as 1f1b (one stage has no pipeline "
                         "bubble to fill)", "drop --schedule, or set --pp 2 or more")
    if opts.get("vpp", 1) > 1 and opts.get("schedule") == Schedule.ONE_F_ONE_B.value:
        # ParallelConfig runs a vpp with the default 1f1b as interleaved: a 1f1b asked for is not
        raise InputError("schedule", f"1f1b runs one model chunk per stage; --vpp {opts['vpp']} would run "
                         "interleaved instead", "drop --schedule, or give --schedule interleaved, or --vpp 1")
    if opts.get("sequence_parallel") and opts["tp"] == 1:
        raise InputError("sequence_parallel", "sequence parallelism splits activations over the tensor-parallel "
                         "ranks: with tp 1 it would run off", "drop --sequence-parallel, or set --tp 2 or more")
    if opts["cp"] == 1 and (opts.get("cp_kind") or CPKind.RING.value) != CPKind.RING.value:
        raise InputError("cp_kind", f"{opts['cp_kind']} context parallelism with cp 1 changes nothing",
                         "drop --cp-kind, or set --cp 2 or more")
    if opts.get("recompute_method") == "uniform" and not (opts["recompute"] == Recompute.FULL.value
                                                          and opts.get("recompute_num_layers")):
        raise InputError("recompute_method", "uniform groups the --recompute-num-layers N layers of a full "
                         "recomputation; without both it changes nothing",
                         "drop --recompute-method, or set --recompute full and --recompute-num-layers N")


def refuse_switches_without_effect(opts: dict, model: ModelSpec, flash_attention: bool) -> None:
    """Refuse a software switch the user turned on that prices nothing in this run (the header
    would print it beside a step it did not change): a fused-attention kernel (``serial`` /
    ``pipelined``) where the attention core is the materialised one (``flash_attention`` off, by
    --no-flash-attention or the stack's: ``layer_times`` reads the kernel only for the fused
    core), and the expert all-to-all switches on a model without experts. ``flash_attention``:
    the value the run takes, the stack's unless the user set it."""
    kernel = opts.get("attention_kernel")
    if kernel not in (None, AttentionKernel.AUTO.value) and not flash_attention:
        raise InputError("attention_kernel", f"{kernel} is a fused (flash) attention kernel, and this run's attention "
                         "core is the materialised one (flash_attention off): it changes nothing",
                         "drop --attention-kernel, or give --flash-attention")
    if model.moe is None:
        for key in ("ep_comm_overlap", "ep_dispatch_dedup"):
            if opts.get(key):
                refuse_expert_switch_on_dense(key, model)


def refuse_expert_switch_on_dense(key: str, model: ModelSpec) -> None:
    """The error for the expert switch ``key`` (``ep_comm_overlap`` / ``ep_dispatch_dedup``)
    turned on for ``model``, which has no experts (``simulate`` and ``plan`` say it alike)."""
    flag = "--" + key.replace("_", "-")
    raise InputError(key, f"{model.name} has no experts, so there is no expert all-to-all for {flag} to change",
                     f"drop {flag}, or use an MoE model")


#: what an offload feature's note says of the validation files (``plan`` and ``simulate`` alike)
UNMEASURED_NOTE = "which no measured run in the validation files exercises"


def unmeasured_features(fields: dict, cluster) -> str:
    """The features of the configuration ``fields`` (a plan row or ``StepReport.config``) that no
    row of the validation files measures, whose time is the cost model's alone: activation offload
    over a PCIe host link (the public offload rows are GB200 / GB300 over NVLink-C2C), optimizer
    offload; '' when none."""
    parts = []
    host = getattr(cluster, "host", None)
    from cost_models.offload import is_pcie_link
    pcie = host is not None and is_pcie_link(host.link)
    layers = int(fields.get("offload_activation_layers") or 0)
    if pcie and layers > 0:
        parts.append(f"activation offload over PCIe ({layers} layer{'' if layers == 1 else 's'} per chunk)")
    if float(fields.get("offload_optimizer_fraction") or 0.0) > 0:
        parts.append("optimizer offload")
    return " and ".join(parts)


def build_inputs(opts: dict) -> tuple[ModelSpec, object, ParallelConfig, int | None]:
    """(model, cluster, config, n_gpus) from the command's options; errors name the option."""
    check_bounds(opts)
    model = load_model(opts["model"])
    if opts["seq_len"] is not None:
        model = model.with_seq_len(opts["seq_len"])
    cluster = load_cluster(opts["cluster"])
    if opts.get("dtype") is None:           # the GPU's 16-bit type, as `paraplan plan` searches
        opts = {**opts, "dtype": sixteen_bit_dtype(cluster.gpu)}
    gpus = opts["gpus"]
    if gpus is not None and cluster.max_gpus is not None and gpus > cluster.max_gpus:
        raise InputError("--gpus", f"{gpus} GPUs exceed the {cluster.max_gpus} of cluster {cluster.name}")
    tp, pp, cp = opts["tp"], opts["pp"], opts["cp"]
    dp = _data_parallel(opts["dp"], gpus, tp, pp, cp)
    gbs = _global_batch(opts["global_batch"], opts["global_batch_tokens"], model.seq_len)
    schedule = opts["schedule"]
    if schedule is None:
        schedule = Schedule.INTERLEAVED.value if opts["vpp"] > 1 else Schedule.ONE_F_ONE_B.value
    refuse_options_without_effect(opts)
    # the software stack's documented behaviour, then every switch the user set explicitly
    stack = load_stack(opts["stack"])
    software = stack_config_fields(stack, opts["dtype"], model.name, cluster.gpu.name)
    for key in SWITCH_OPTIONS:
        if opts.get(key) is not None:
            software[key] = opts[key]
    refuse_switches_without_effect(opts, model, software["flash_attention"])
    if opts.get("optimizer_moment_bytes") is not None:
        # an explicit moment width overrides a stack that keeps the moments in the weights' dtype
        software["moments_in_param_dtype"] = False
    sp = opts["sequence_parallel"]
    if sp is None:
        sp = stack_sequence_parallel(stack, tp, model.name, cluster.gpu.name, opts["dtype"], model.moe is not None)
    zero = opts["zero"]
    if zero is None:        # the stack's documented sharding, as `validate published` reads a row
        zero = stack_zero_stage(stack, dp, cp, model.name, cluster.gpu.name, opts["dtype"])
    # the flavour given, else the one the stack's framework runs (ring at cp 1: nothing to price)
    cp_kind = run_cp_kind(cp, opts.get("cp_kind"), stack, model.name, cluster.gpu.name, opts["dtype"])
    etp = opts.get("etp")
    if etp is None:         # the stack's expert TP, as `validate published` reads a row and `plan` searches
        etp = stack_expert_tp(stack, tp, model.moe is not None, model.name, cluster.gpu.name, opts["dtype"],
                              opts["ep"])
        check_default_expert_tp(stack, model, cluster.gpu.name, opts["dtype"], dp, cp, tp, opts["ep"], etp)
    config = ParallelConfig(
        dp=dp, tp=tp, pp=pp, cp=cp, ep=opts["ep"], etp=etp, vpp=opts["vpp"],
        micro_batch=opts["micro_batch"], global_batch=gbs, zero_stage=zero,
        recompute=opts["recompute"], sequence_parallel=sp, dtype=opts["dtype"],
        schedule=schedule, cp_kind=cp_kind, moe_load_imbalance=opts["moe_load_imbalance"],
        first_stage_layers=opts.get("first_stage_layers") or 0, last_stage_layers=opts.get("last_stage_layers") or 0,
        uneven_layers=bool(opts.get("uneven_layers")),
        recompute_num_layers=opts.get("recompute_num_layers") or 0,
        recompute_method=opts.get("recompute_method") or "block",
        recompute_layers_decrement=opts.get("recompute_layers_decrement") or 0,
        recompute_modules=opts.get("recompute_modules") or (),
        offload_activation_layers=opts.get("offload_activation_layers") or 0,
        offload_optimizer_fraction=opts.get("offload_optimizer_fraction") or 0.0,
        zero_shard_group=opts.get("zero_shard_group") or 0,
        pipeline_layout=opts.get("pipeline_layout") or "",
        loss_chunk_tokens=opts.get("loss_chunk_tokens") or 0,
        optimizer_moment_bytes=opts.get("optimizer_moment_bytes") or 4.0, **software,
    )
    cluster.gpu.peak_flops(config.dtype)      # a dtype the chip lacks is an input error, up front
    if opts.get("zero3_recompute_gather") and (config.zero_stage < 3 or config.recompute != Recompute.FULL):
        # step_model prices the third gather only for ZeRO-3 rows recomputing layers in full
        what = f"zero={config.zero_stage}" if config.zero_stage < 3 else f"recompute={config.recompute.value}"
        raise InputError("zero3_recompute_gather", "the third gather is ZeRO-3's for a fully recomputed layer's "
                         f"forward, and this run has {what}: it changes nothing",
                         "drop --zero3-recompute-gather, or give --zero 3 and --recompute full")
    return model, cluster, config, gpus


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------

def _on_off(x: bool) -> str:
    return "on" if x else "off"


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}" if whole > 0 else "-"


def why_line(report: StepReport, star: str = "") -> str:
    """One line naming the largest non-compute part of the step; ``star`` (``priors.mark``)
    follows the seconds it cites, as it follows them in the step-time table above it."""
    parts = {k: v for k, v in report.time_breakdown_s.items() if k != "compute_s"}
    name, value = max(parts.items(), key=lambda kv: kv[1])
    step = report.step_time_s
    compute = report.time_breakdown_s.get("compute_s", 0.0)
    if value <= 0:
        return f"why: the step is all compute ({_pct(compute, step)}%): nothing exposed to hide"
    return (f"why: compute is {_pct(compute, step)}% of the step; the largest other part is {name} = "
            f"{value:.4g} s{star} ({_pct(value, step)}%): {time_meaning(report).get(name, name)}")


def _tflops(value: float) -> str:
    """One decimal, or three significant digits below 10 TFLOP/s (a CPU's 0.0144, not 0.0)."""
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def _wrapped(settings: str, first: str = " " * 9, width: int = 120) -> list[str]:
    """``name=value`` settings as lines of at most ``width`` characters, aligned under ``first``
    (a NUL joins words that stay on one line; it prints as a space)."""
    return [line.replace("\0", " ") for line in textwrap.wrap(
        settings, width=width, initial_indent=first, subsequent_indent=" " * len(first),
        break_long_words=False, break_on_hyphens=False)]


def _tp_overlap_text(c: dict) -> str:
    """``tp_comm_overlap`` as the header shows it: a switch that is on but priced as off (it
    pipelines only sequence parallelism's collectives: ``simulator.layer_times.tp_overlap_applies``)
    says so."""
    from simulator.layer_times import tp_overlap_applies
    on = bool(c["tp_comm_overlap"])
    if on and not bool(tp_overlap_applies(on, c["sequence_parallel"], c["tp"])):
        return "on (no effect without sequence parallelism)".replace(" ", "\0")     # kept on one line
    return _on_off(on)


_ADVICE_ALL = "try recompute (--recompute-num-layers), offload, more tp/pp, uneven stages, or a ZeRO stage"


def _or_list(items: list[str]) -> str:
    """``a``, ``a or b``, ``a, b, or c``."""
    if len(items) <= 2:
        return " or ".join(items)
    return ", ".join(items[:-1]) + ", or " + items[-1]


def memory_advice(model: ModelSpec, cluster, config: ParallelConfig) -> str:
    """What a configuration that does not fit may still trade for memory on these GPUs: only the
    options not already at their most (the fixed list advised ZeRO, recompute and offload to a
    ZeRO-3 run recomputing and offloading everything already):

    * recompute, unless every layer of every chunk is recomputed in full (``full`` with no
      ``recompute_num_layers`` cap below the largest chunk, or ``uniform`` groups, and no
      per-stage decrement);
    * activation / optimizer offload, where the cluster has a host, unless every layer of a chunk
      is offloaded / the whole optimizer is (fraction 1);
    * more tp/pp, unless there is no data-parallel replica left to turn into one (dp = 1);
    * uneven stages, with a pipeline (pp > 1) not already laid out unevenly;
    * a (higher) ZeRO stage, below ZeRO-3 and with a group to shard over (dp * cp > 1, or the
      expert data-parallel group of a MoE model).

    * a smaller micro-batch, where it is above 1 (activations shrink with it).

    With none left: more GPUs, or a shorter sequence.
    """
    from simulator.validate_config import most_layers_per_chunk
    most = most_layers_per_chunk(model, config)
    n = config.recompute_num_layers
    full_everywhere = (config.recompute == Recompute.FULL and config.recompute_layers_decrement == 0
                       and (n == 0 or n >= most or config.recompute_method == RecomputeMethod.UNIFORM))
    options = [] if full_everywhere else ["recompute (--recompute-num-layers)"]
    if cluster.host is not None:
        act = config.offload_activation_layers < most
        opt = config.offload_optimizer_fraction < 1.0
        if act and opt:
            options.append("offload")
        elif act:
            options.append("activation offload (--offload-activation-layers)")
        elif opt:
            options.append("optimizer offload (--offload-optimizer-fraction)")
    if config.dp > 1:
        options.append("more tp/pp")
    uneven = bool(config.uneven_layers or config.pipeline_layout or config.first_stage_layers
                  or config.last_stage_layers)
    if config.pp > 1 and not uneven:
        options.append("uneven stages")
    shard = largest_zero_group(config.dp, config.cp, config.tp, config.ep, config.etp, model.moe is not None)
    if config.zero_stage < 3 and shard > 1:
        options.append("a ZeRO stage" if config.zero_stage == 0 else "a higher ZeRO stage")
    if config.micro_batch > 1:
        options.append("a smaller micro-batch (--micro-batch)")
    if not options:
        return "nothing left to trade on these GPUs: use more GPUs, or a shorter sequence"
    return "try " + _or_list(options)


def zero_source(stack_name: str, model: ModelSpec, cluster, config: ParallelConfig) -> str:
    """Where a ZeRO stage the user did not give came from (``stack_zero_stage``), for the table:
    the stack's default, a recipe of the stack for this model, or no data parallelism to shard."""
    return zero_source_text(stack_name, model.name, cluster.gpu.name, config.dp, config.cp, config.dtype)


def zero_source_text(stack_name: str, model_name: str, gpu: str | None, dp: int, cp: int, dtype: str) -> str:
    """Where the ZeRO stage ``stack_zero_stage(stack, dp, cp, model_name, gpu, dtype)`` comes
    from, for a table: ``dp * cp`` of 1 (nothing to shard), the release's ``default_zero_stage``,
    or a recipe of the stack for the model (on ``gpu``; None: a pooled cluster of several GPU
    kinds, where only GPU-independent recipes apply). One-kind and pooled ``simulate`` print it."""
    if dp * cp <= 1:
        return "dp*cp is 1: nothing to shard"
    stack = load_stack(stack_name)
    chosen = stack_zero_stage(stack, dp, cp, model_name, gpu, dtype)
    whose = (f"{stack.name}'s default" if chosen == stack_zero_stage(stack, dp, cp)
             else f"{stack.name}'s recipe for {model_name}" + (f" on {gpu}" if gpu else ""))
    return f"{whose}; --zero sets another"


def cp_kind_source(stack_name: str, config: ParallelConfig) -> str:
    """Where a context-parallel flavour the user did not give came from (``stack_cp_kind``), for
    the table: the stack's default at cp > 1; "" at cp 1 (no flavour runs)."""
    if config.cp <= 1:
        return ""
    return f"{load_stack(stack_name).name}'s default; --cp-kind sets another"


def etp_source(stack_name: str, model: ModelSpec, config: ParallelConfig, gpu: str | None = None) -> str:
    """Where an expert tensor-parallel degree the user did not give came from (``stack_expert_tp``),
    for the table: the stack's default for an MoE model (a carved-EP release, Megatron-Core <= 0.9,
    runs etp = tp only); "" for a dense model (etp 1, nothing to split). ``gpu``: the cluster's GPU
    name, whose recipe the default was read from (``stack_expert_tp``)."""
    if model.moe is None:
        return ""
    stack = load_stack(stack_name)
    name = stack.name
    if config.ep_carved_from_dp:
        return f"{name}'s default: it runs etp = tp only"
    training = stack.training_for(model.name, gpu, config.dtype)
    if training is not None and training.expert_tp_default == "tp_without_ep":
        # torchtitan has no expert-TP setting: it shards the experts over tp without expert parallelism
        return f"{name}: experts split over tp at ep 1, whole with ep > 1; no etp setting"
    return f"{name}'s default; --etp sets another"


def memory_meaning(config: dict, cluster) -> dict:
    """``MEMORY_MEANING`` as it applies to ``config`` (``StepReport.config``) on ``cluster``: fp32
    training's 4-byte weights and gradients, a 16-bit gradient buffer (the gradients row was
    labelled "fp32 main gradients" at 2 bytes a parameter), a CPU device's allocator."""
    sixteen_bit_grads = (config["dtype"] not in FULL_PRECISION
                         and float(config.get("grad_buffer_bytes", 4.0)) == 2.0)
    return {**MEMORY_MEANING, **(FULL_PRECISION_MEANING if config["dtype"] in FULL_PRECISION else {}),
            **(SIXTEEN_BIT_GRADS_MEANING if sixteen_bit_grads else {}),
            **(CPU_MEMORY_MEANING if cluster.gpu.is_cpu else {})}


#: settings the header names only when they are not their default (``ParallelConfig``'s), each
#: moving the step or the memory: (field, default)
_SETTINGS_WHEN_SET = (("zero_shard_group", 0), ("recompute_num_layers", 0), ("recompute_method", "block"),
                      ("recompute_layers_decrement", 0), ("recompute_modules", ()),
                      ("offload_activation_layers", 0), ("offload_optimizer_fraction", 0.0),
                      ("first_stage_layers", 0), ("last_stage_layers", 0), ("uneven_layers", False),
                      ("pipeline_layout", ""), ("loss_chunk_tokens", 0), ("optimizer_moment_bytes", 4.0))


def _given_settings_text(c: dict) -> str:
    """`` name=value`` for each of ``_SETTINGS_WHEN_SET`` that ``c`` (``StepReport.config``) sets
    off its default, as ``--json``'s ``config`` holds it (the header printed ``zero=3`` alike for
    ZeRO-3 over all ranks and HSDP, ``recompute=full`` for two recomputed layers a chunk)."""
    out = []
    for name, default in _SETTINGS_WHEN_SET:
        value = c.get(name, default)
        if isinstance(value, (list, tuple)):
            if tuple(value) != tuple(default):
                out.append(f"{name}={','.join(str(v) for v in value)}")
        elif isinstance(value, bool):
            if value != default:
                out.append(f"{name}={_on_off(value)}")
        elif value != default:
            out.append(f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}")
    return "".join(" " + piece.replace(" ", "\0") for piece in out)


def render(report: StepReport, model: ModelSpec, cluster, headroom_gib: float | None = None,
           config: ParallelConfig | None = None, zero_note: str = "", cp_note: str = "",
           etp_note: str = "") -> str:
    """The human-readable table for one ``StepReport``; ``config``: its configuration, for the
    advice when it does not fit (``memory_advice``; None: the whole list); ``zero_note``: where
    the ZeRO stage came from when the user did not give it (``zero_source``); ``cp_note``: the
    same for the context-parallel flavour (``cp_kind_source``); ``etp_note``: the same for the
    expert tensor-parallel degree (``etp_source``)."""
    c = report.config
    step = report.step_time_s
    lines = [
        f"model    {report.model}  ({model.num_layers} layers, hidden {model.hidden_size}, seq_len {model.seq_len})",
        f"cluster  {report.cluster}  ({report.gpu}, {cluster.gpus_per_node} GPUs per node)",
        f"gpus     {report.n_gpus}" + (f"  ({note})" if (note := placement_note(cluster, report.n_gpus)) else ""),
        *_wrapped(f"dp={c['dp']} tp={c['tp']} pp={c['pp']} cp={c['cp']} ep={c['ep']} etp={c['etp']}"
                  + (f" ({etp_note})" if etp_note else "") + f" vpp={c['vpp']}  "
                  f"micro_batch={c['micro_batch']} global_batch={c['global_batch']} "
                  f"({report.num_microbatches} micro-batch{'' if report.num_microbatches == 1 else 'es'}, "
                  f"{report.tokens_per_step:,.0f} tokens/step)", first="config   "),
        *_wrapped(f"zero={c['zero_stage']}" + (f" ({zero_note})" if zero_note else "") + f" recompute={c['recompute']} sequence_parallel={_on_off(c['sequence_parallel'])} "
                  f"dtype={c['dtype']} schedule={c['schedule']} flash_attention={_on_off(c['flash_attention'])} "
                  f"attention_kernel={c['attention_kernel']} "
                  f"overlap_grad_reduce={_on_off(c['overlap_grad_reduce'])} "
                  f"overlap_param_gather={_on_off(c['overlap_param_gather'])} tp_comm_overlap={_tp_overlap_text(c)} "
                  f"ep_comm_overlap={_on_off(c['ep_comm_overlap'])} ep_dispatch_dedup={_on_off(c['ep_dispatch_dedup'])} "
                  f"cp_kind={c['cp_kind']}" + (f" ({cp_note})" if cp_note else "") + f" moe_load_imbalance={c['moe_load_imbalance']:g} "
                  f"grad_accumulation_fusion={_on_off(c['grad_accumulation_fusion'])}"
                  + (f" zero3_recompute_gather={_on_off(c['zero3_recompute_gather'])}" if c["zero_stage"] >= 3 else "")
                  + _given_settings_text(c)),
        "",
        "step time",
    ]
    decimals = 4 if step >= 1 else 6
    star = priors.mark(cluster)
    meaning = time_meaning(report)
    rows = [[k, f"{v:.{decimals}f}{star}", _pct(v, step), meaning.get(k, "")]
            for k, v in report.time_breakdown_s.items()]
    rows.append(["step_time_s", f"{step:.{decimals}f}{star}", "100.0", "one optimizer step"])
    lines.append(format_table(rows, ["part", "time_s", "pct_of_step", "what"], align="lrrl", indent="  ").rstrip())

    lines += ["", "throughput"]
    dtype = c["dtype"]
    rows = [["tokens_per_s", f"{report.tokens_per_s:,.0f}{star}"],
            ["tokens_per_s_per_gpu", f"{report.tokens_per_s_per_gpu:,.1f}{star}"],
            ["model_tflops_per_gpu", f"{_tflops(report.model_tflops_per_gpu)}{star}"],
            ["hardware_tflops_per_gpu", f"{_tflops(report.hardware_tflops_per_gpu)}{star}"],
            [mfu_units.mfu_column(cluster.gpu), f"{mfu_units.mfu_pct(report.mfu, dtype, cluster.gpu):.1f}{star}"],
            [mfu_units.mfu_column(cluster.gpu, 'hfu'), f"{mfu_units.mfu_pct(report.hfu, dtype, cluster.gpu):.1f}{star}"]]
    palm = mfu_units.palm_columns(report, model, cluster.gpu)
    rows += [["palm_tflops_per_gpu", f"{_tflops(palm['palm_tflops_per_gpu'])}{star}"],
             [mfu_units.mfu_column(cluster.gpu, "mfu_palm"), f"{palm[mfu_units.mfu_column(cluster.gpu, 'mfu_palm')]:.1f}{star}"]]
    lines.append(format_table(rows, ["metric", "value"], align="lr", indent="  ").rstrip())
    lines += [f"  ({note})" for note in mfu_units.MFU_NOTES]

    hbm = report.hbm_bytes
    stage = int(report.extras.get("memory_stage", 0))
    lines += ["", f"memory per GPU (peak, on pipeline stage {stage} of {c['pp']})"]
    meaning = memory_meaning(c, cluster)
    rows = [[k.removesuffix("_bytes"), f"{v / GIB:.2f}", _pct(v, hbm), meaning.get(k, "")]
            for k, v in report.memory_breakdown_bytes.items()]
    rows.append(["total", f"{report.memory_bytes / GIB:.2f}", _pct(report.memory_bytes, hbm), "peak bytes per GPU"])
    rows.append(["hbm", f"{hbm / GIB:.2f}", "100.0", f"{report.gpu} device memory"])
    lines.append(format_table(rows, ["part", "mem_gib", "pct_of_hbm", "what"], align="lrrl", indent="  ").rstrip())
    if report.stage_memory and len(report.stage_memory) > 1:
        lines += ["", "memory per GPU by pipeline stage (GiB)"]
        lines.append(stage_memory_table(report.stage_memory))
    host = report.extras.get("host_memory_bytes", 0.0)
    if host > 0:
        from hardware_specs.placement import placed_cluster
        from simulator.config_batch import gpus_on_a_node, node_host_share
        # the hosts of the GPUs the job holds in each domain (a 256-GPU job on NVL72: 16 of 18 trays)
        placed = placed_cluster(cluster, report.n_gpus)
        node = report.extras.get("host_memory_node_bytes", 0.0)
        limit = placed.host.memory_bytes if placed.host is not None else None
        on_node = gpus_on_a_node(report.n_gpus, placed.gpus_per_node)
        share = float(node_host_share(on_node, placed.gpus_per_node, placed.gpus_per_host))
        per_host = placed.gpus_per_host or placed.gpus_per_node
        hosts = (f" (its {share * placed.gpus_per_node / per_host:.0f} of the node's "
                 f"{placed.gpus_per_node // per_host} {per_host}-GPU hosts)") if share < 1.0 else ""
        stated = f" of {limit * share / GIB:,.0f} GiB{hosts}" if limit else \
            " (host memory per node not in the cluster file: unchecked)"
        lines.append(f"host memory for offload: {host / GIB:.2f} GiB per GPU, {node / GIB:,.1f} GiB on the job's "
                     f"fullest node{stated}")

    lines.append("")
    free = report.headroom_bytes / GIB
    keep = headroom.headroom_gib(report.hbm_bytes, headroom_gib)
    if headroom.report_fits(report, keep):
        lines.append(f"fits: yes ({free:.2f} GiB free per GPU; the run keeps {keep:.2f} GiB headroom)")
    elif headroom.fits(report.memory_bytes, report.hbm_bytes, keep):
        lines.append("fits: NO (the host memory offload needs exceeds the node's; offload less)")
    else:
        big_name, big = max(report.memory_breakdown_bytes.items(), key=lambda kv: kv[1])
        lines += textwrap.wrap(
            f"fits: NO (over by {keep - free:.2f} GiB per GPU on stage {stage} with the {keep:.2f} GiB "
            f"headroom a run keeps; largest part {big_name.removesuffix('_bytes')} {big / GIB:.2f} GiB; "
            f"{memory_advice(model, cluster, config) if config is not None else _ADVICE_ALL})",
            width=120, subsequent_indent=" " * 6, break_long_words=False)
    lines += textwrap.wrap(why_line(report, star), width=120, subsequent_indent=" " * 5, break_long_words=False)
    unmeasured = unmeasured_features(report.config, cluster)
    if unmeasured:      # as plan notes it beside its best plan
        lines += textwrap.wrap(f"note: {unmeasured}, {UNMEASURED_NOTE}: offload_exposed_s rests on the link and "
                               "overlap model alone", width=120, subsequent_indent=" " * 6, break_long_words=False)
    note = priors.footnote(cluster)
    if note:
        lines.append(note)
    return "\n".join(lines) + "\n"


#: memory parts shown per stage (the rest are folded into "other")
_STAGE_COLUMNS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "logits_bytes")


def stage_memory_table(stages) -> str:
    """One row per pipeline stage: its layers, in-flight chunk sets and memory parts (GiB);
    runs of identical stages are folded into one row (``1-13``)."""
    rows, prev, start = [], None, 0
    keyed = []
    for i, st in enumerate(stages):
        parts = st["parts_bytes"]
        other = sum(v for k, v in parts.items() if k not in _STAGE_COLUMNS)
        cells = [f"{st['layers']:g}", f"{st['in_flight']:g}"] + [f"{parts[k] / GIB:.2f}" for k in _STAGE_COLUMNS] \
            + [f"{other / GIB:.2f}", f"{st['memory_bytes'] / GIB:.2f}"]
        keyed.append(cells)
    for i, cells in enumerate(keyed + [None]):
        if cells != prev:
            if prev is not None:
                label = str(start) if i - 1 == start else f"{start}-{i - 1}"
                rows.append([label] + prev)
            prev, start = cells, i
    # GiB per GPU, named like the main memory table's mem_gib
    headers = ["stage", "layers", "in_flight"] + [f"{name}_gib" for name in
                                                  ("weights", "grads", "optim", "activ", "logits", "other", "total")]
    return format_table(rows, headers, align="l" + "r" * (len(headers) - 1), indent="  ").rstrip()


def json_dict(report: StepReport, cluster, headroom_gib: float, model: ModelSpec | None = None) -> dict:
    """``StepReport.as_dict()`` as the command prints it: ``fits`` with the headroom a run keeps
    (``headroom_required_bytes``), MFU/HFU in percent of the reference peak (``paraplan.mfu``)
    and whether the efficiency model behind every time is fitted (``efficiency_fitted``); with
    ``model``, also in PaLM's FLOP convention (``paraplan.mfu.palm_columns``)."""
    data = report.as_dict()
    data["headroom_required_bytes"] = headroom_gib * GIB
    data["fits"] = headroom.report_fits(report, headroom_gib)
    dtype = report.config["dtype"]
    for name in ("mfu", "hfu"):
        data[mfu_units.mfu_column(cluster.gpu, name)] = float(mfu_units.mfu_pct(data.pop(name), dtype, cluster.gpu))
    if model is not None:
        data.update(mfu_units.palm_columns(report, model, cluster.gpu))
    data.update(priors.json_fields(cluster))
    # what the step uses that no measured run exercises ('' none), as plan's best_unmeasured_features
    data["unmeasured_features"] = unmeasured_features(report.config, cluster)
    return data


# --------------------------------------------------------------------------------------------
# Event-level timeline (--trace / --gantt)
# --------------------------------------------------------------------------------------------

def _pipeline_api():
    """The ``simulator.pipeline`` functions the timeline needs, or an 'unavailable' error."""
    try:
        from simulator.pipeline.event_sim import simulate_schedule
        from simulator.pipeline.schedules import make_schedule
        from simulator.pipeline.trace import write_chrome_trace
    except ImportError as exc:
        raise InputError("--trace/--gantt", f"pipeline timelines are not available in this installation ({exc})",
                         "update paraplan, or drop the option") from None
    return make_schedule, simulate_schedule, write_chrome_trace


_SCHEDULE_FIELDS = {"p": "--pp", "m": "--global-batch", "v": "--vpp", "num_layers": "--pp"}
#: most pipeline operations a Gantt chart draws (past a few thousand boxes a 24-inch-wide
#: picture shows no single operation, and matplotlib takes seconds per ten thousand), and a
#: trace holds (100,000 events is ~15 MB of JSON, about what Perfetto's web UI opens quickly)
MAX_GANTT_OPS = 5_000
MAX_TRACE_OPS = 100_000


def check_timeline_size(config: ParallelConfig, trace_path: str | None, gantt_path: str | None) -> None:
    """Refuse a timeline with more operations than can be drawn or opened (before any work)."""
    from simulator.config_batch import SCHEDULE_CODES
    from simulator.event_level import pipeline_ops
    from simulator.step_pipeline import schedule_chunks
    ops = pipeline_ops(config, config.num_microbatches)
    # the schedule's chunks per stage: vpp for interleaved 1F1B, 2 for ZB-V and DualPipe
    chunks = schedule_chunks(SCHEDULE_CODES[config.schedule], int(config.vpp))
    casts = ops - 3 * int(config.pp) * chunks * int(config.num_microbatches)
    counted = (f"3 x pp {config.pp} x {chunks} chunk{'s' if chunks > 1 else ''} per stage x "
               f"{config.num_microbatches:,} micro-batches" + (f" + {casts:,} weight casts" if casts else ""))
    for field, path, limit in (("--gantt", gantt_path, MAX_GANTT_OPS), ("--trace", trace_path, MAX_TRACE_OPS)):
        if path is not None and ops > limit:
            raise InputError(field, f"the schedule has up to {ops:,} operations ({counted}), more than the "
                             f"{limit:,} a timeline shows",
                             "use a smaller global batch (fewer micro-batches) to look at the schedule")


def pipeline_timeline(model: ModelSpec, config: ParallelConfig, cluster):
    """The configuration's schedule simulated event by event (see ``simulator.event_level``)."""
    _pipeline_api()   # a clear error if the pipeline package is missing
    from simulator.event_level import pipeline_timeline as timeline
    try:
        return timeline(model, config, cluster)
    except InputError as exc:
        raise InputError(_SCHEDULE_FIELDS.get(exc.field, exc.field), exc.message, exc.fix) from None


def write_timelines(model, config, report, trace_path: str | None, gantt_path: str | None, cluster) -> list[str]:
    """Write the requested timeline files atomically; returns one note line per file."""
    write_chrome_trace = _pipeline_api()[2]
    if gantt_path is not None:
        try:
            from simulator.pipeline.gantt import draw_gantt
        except ImportError as exc:
            raise InputError("--gantt", f"Gantt charts are not available in this installation ({exc})",
                             "install matplotlib, or drop --gantt") from None
    schedule, result = pipeline_timeline(model, config, cluster)
    # the times rest on the cluster's efficiency model: an unfitted prior says so beside them
    # (the title, the trace's otherData and the lines below), as the step-time tables do
    eff = priors.json_fields(cluster)
    prior = (f" [rests on the {eff['efficiency_generation']} efficiency model, an unfitted prior]"
             if priors.is_prior(cluster) else "")
    # the low-precision weight casts run before the flush (the step model's pipeline fill)
    casts = result.prologue.duration_s if result.prologue is not None else 0.0
    cast_note = f" ({casts:.4g} s of {result.prologue.name}s, then the flush)" if casts > 0 else ""
    # the passes with no partner micro-batch under ep_comm_overlap are in the step, not drawn
    unpaired = float(report.extras.get("ep_unpaired_s", 0.0))
    undrawn = (f"; not drawn: the step's {unpaired:.4g} s that the warm-up and cool-down passes with no partner "
               "micro-batch add under --ep-comm-overlap (their whole all-to-all)") if unpaired > 0 else ""
    summary = (f"{schedule.kind.value} p={schedule.p} m={schedule.m} v={schedule.v}: makespan "
               f"{result.makespan_s:.4g} s{cast_note}, mean stage idle {100 * result.bubble_fraction:.1f}%{undrawn}"
               f"{prior}")
    notes = []
    if trace_path is not None:
        names = [f"stage {i}" for i in range(schedule.p)]
        atomic_output_path(trace_path, lambda tmp: write_chrome_trace(tmp, result, schedule, names, eff), "--trace")
        # the mean over stages, which counts the lighter stages' waits: not the breakdown's
        # pipeline_bubble_s, the busiest stage's idle
        notes.append(f"wrote trace {trace_path} ({summary}; pipeline_bubble_s above is the busiest stage's idle); "
                     "open it in https://ui.perfetto.dev")
    if gantt_path is not None:
        title = (f"{report.model} on {report.n_gpus}x {report.gpu}: {summary}")
        atomic_output_path(gantt_path, lambda tmp: draw_gantt(result, schedule, tmp, title=title), "--gantt")
        notes.append(f"wrote gantt {gantt_path} ({summary})")
    return notes


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------

POS = click.IntRange(min=1)


def _not_empty(value: str | None, option: str, comma_list: bool = False) -> str | None:
    """``value`` unless the option was given empty (or, for a comma list, with an empty item):
    an empty --recompute-modules ran as if none had been named, though the option implies
    selective recomputation."""
    if value is None:
        return None
    if not value.strip():
        raise InputError(option, "is empty", "name what it should be, or leave the option out")
    if comma_list and any(not item.strip() for item in value.split(",")):
        raise InputError(option, f"an empty item in {value!r}", "give one name between each pair of commas")
    return value

@click.command("simulate", short_help="Step time, throughput, MFU and memory of one configuration.")
@click.option("--model", "-m", required=True, help="Model preset (see `paraplan models list`), YAML file, or HF config.json.")
@click.option("--cluster", "-c", required=True, help="Cluster name (see `paraplan hardware list`) or YAML file.")
@click.option("--gpus", "-n", type=POS, metavar="N", help="GPUs in the job; checked against dp*tp*pp*cp. Without --dp, dp = gpus/(tp*pp*cp).")
@click.option("--seq-len", type=POS, metavar="N", help="Sequence length in tokens (default: the model's).")
@click.option("--dp", type=POS, metavar="N", help="Data-parallel degree (default: from --gpus, else 1).")
@click.option("--tp", type=POS, metavar="N", default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--pp", type=POS, metavar="N", default=1, show_default=True, help="Pipeline-parallel stages.")
@click.option("--cp", type=POS, metavar="N", default=1, show_default=True, help="Context-parallel degree.")
@click.option("--ep", type=POS, metavar="N", default=1, show_default=True,
              help="Expert-parallel degree (MoE; ep*etp must divide dp*cp*tp: experts fold over the data, "
                   "context and tensor ranks, Megatron-Core MoE parallel folding).")
@click.option("--etp", type=POS, metavar="N", default=None,
              help="Expert tensor-parallel degree (MoE; default: the stack's expert_tp_default, tp where the "
                   "release splits the experts over the tensor-parallel group, else 1).")
@click.option("--vpp", type=POS, metavar="N", default=1, show_default=True, help="Virtual stages (chunks) per pipeline rank; > 1 means interleaved 1F1B.")
@click.option("--micro-batch", type=POS, metavar="N", default=1, show_default=True, help="Sequences per micro-batch per data-parallel rank.")
@click.option("--global-batch", type=POS, metavar="N", help="Sequences per optimizer step (whole job).")
@click.option("--global-batch-tokens", type=TOKENS, help="Tokens per optimizer step (instead of --global-batch; a multiple of seq_len): 4194304, 4Mi (= 4,194,304) or 4M (= 4,000,000).")
@click.option("--zero", type=click.IntRange(0, 3), metavar="{0,1,2,3}", default=None,
              help="ZeRO stage: 0 DDP, 1 optimizer states, 2 + gradients, 3 + weights sharded "
                   "(default: the --stack's default_zero_stage for this model, GPU and dtype, e.g. 1 for "
                   "megatron-core, 3 for torchtitan; 0 when dp*cp is 1).")
@click.option("--recompute", type=click.Choice([r.value for r in Recompute]), default="none", show_default=True, help="Activation recomputation.")
@click.option("--stack", default="megatron-core", show_default=True, metavar="NAME|FILE",
              help=STACK_HELP + " whose documented behaviour (overlap, kernels, fusion, gradient dtype, "
                   "its recipe for this model) the run has. The switches below override it one by one.")
@click.option("--sequence-parallel/--no-sequence-parallel", default=None, help="Megatron sequence parallelism alongside TP (default: the stack's recipes).")
@click.option("--dtype", type=click.Choice(list(KNOWN_DTYPES)), default=None,
              help="GEMM dtype [default: the GPU's 16-bit type, bf16 (fp16 on V100 and Turing), as `paraplan plan`].")
@click.option("--schedule", type=click.Choice([s.value for s in Schedule]), help="Pipeline schedule (default 1f1b, interleaved when --vpp > 1).")
@click.option("--overlap-grad-reduce/--no-overlap-grad-reduce", default=None, help="DP gradient reduction overlaps backward.")
@click.option("--overlap-param-gather/--no-overlap-param-gather", default=None, help="ZeRO parameter all-gathers prefetched under compute.")
@click.option("--tp-comm-overlap/--no-tp-comm-overlap", default=None, help="TP collectives overlap the GEMMs (userbuffers / async TP).")
@ep_comm_overlap_option
@ep_dispatch_dedup_option
@click.option("--cp-kind", type=click.Choice([k.value for k in CPKind]), default=None,
              help="Context-parallel flavour (default: the --stack's context_parallel_kind, the one its framework "
                   "runs: ring for Megatron-Core / NeMo / Megatron-Bridge (--cp-comm-type p2p), allgather for "
                   "torchtitan).")
@click.option("--moe-load-imbalance", type=click.FloatRange(min=1.0), metavar="RATIO", default=1.0, show_default=True, help="Busiest expert-parallel rank's routed rows / the mean over the EP group (1 = balanced; at most min(ep, experts / top_k), when every token's experts sit on the busiest rank); capped at the model's moe.capacity_factor; no effect at --ep 1, where every expert is local.")
@click.option("--flash-attention/--no-flash-attention", default=None, help="Fused attention core (no stored score matrix).")
@click.option("--attention-kernel", type=click.Choice([k.value for k in AttentionKernel]), default=None,
              help="How the fused attention kernel meets its softmax: auto = the GPU generation's usual kernel; "
                   "serial = softmax between the two matmuls (FlashAttention-2, e.g. llm-foundry); "
                   "pipelined = softmax hidden under the matmuls (FlashAttention-3).")
@click.option("--grad-accumulation-fusion/--no-grad-accumulation-fusion", default=None,
              help="Weight-gradient GEMMs accumulate into the gradient buffer in place (Megatron default); "
                   "off = an extra read-add-write of the gradients per micro-batch (plain PyTorch); "
                   "default: the stack's.")
@click.option("--zero3-recompute-gather/--no-zero3-recompute-gather", default=None,
              help="ZeRO-3 with full recompute gathers each layer's parameters a third time for the "
                   "recompute forward (DeepSpeed ZeRO-3); off = PyTorch FSDP, where one gather serves both; "
                   "default: the stack's.")
@click.option("--headroom-gib", type=float, default=None,
              help="Memory a run keeps free per GPU, GiB; fits means peak memory + headroom <= HBM "
                   "[default: 5% of HBM, see simulator/headroom.py].")
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False),
              help="Pooled (mixed) clusters: the plan as a YAML/JSON file (groups of replicas whose stages name "
                   "pools; the best_plan of `paraplan plan --json`, run at its seq_len: a different --seq-len is an error).")
@click.option("--group", "groups", multiple=True, metavar="SPEC",
              help="Pooled clusters: one replica group, '[Nx] POOL:tpT:ppK[:L1,L2,..] [> POOL:...]' (repeatable); "
                   "groups without micro-batch counts share the batch in proportion to their speed.")
@click.option("--first-stage-layers", type=click.IntRange(0), default=0, metavar="N",
              help="Layers on the first pipeline stage (Megatron --decoder-first-pipeline-num-layers; the stages "
                   "without a count share the rest evenly, as Megatron-Core requires); 0 = not set.")
@click.option("--last-stage-layers", type=click.IntRange(0), default=0, metavar="N",
              help="Layers on the last pipeline stage (Megatron --decoder-last-pipeline-num-layers); 0 = not set.")
@click.option("--uneven-layers", is_flag=True,
              help="Allow layer counts that do not divide over the stages: each stage holds ceil(layers / stages) "
                   "less the shortfall, taken one layer at a time from the ends inwards (last, first, "
                   "second-to-last, ...): 24 layers on 5 stages are 5,5,5,5,4; on 7 stages 3,3,4,4,4,3,3.")
@click.option("--pipeline-layout", metavar="LAYOUT", callback=lambda ctx, param, v: _not_empty(v, "--pipeline-layout"),
              help="Megatron layout string (--pipeline-model-parallel-layout): stages in forward order separated by "
                   "'|', E embedding, t layer, m MTP module, L loss, x*n and (...)*n repeat; e.g. 'Et*3|(tt|)*29,m|L'.")
@click.option("--recompute-num-layers", type=click.IntRange(0), metavar="N",
              help="With --recompute full: layers per model chunk recomputed (Megatron --recompute-num-layers); "
                   "0 = every layer.")
@click.option("--recompute-method", type=click.Choice(["block", "uniform"]),
              help="block: the first N layers of each chunk, the rest keep their activations; uniform: every layer "
                   "in groups of N, one input kept per group [default: block].")
@click.option("--recompute-layers-decrement", type=click.IntRange(0), metavar="K",
              help="Stage s recomputes max(N - s*K, 0) layers per chunk (NeMo activations_checkpoint_layers_per_pipeline).")
@click.option("--recompute-modules", metavar="LIST", callback=lambda ctx, param, v: _not_empty(v, "--recompute-modules", True),
              help="Operations recomputed in the layers not recomputed in full, comma-separated: core_attn, layernorm, "
                   "mlp_act, mla_up_proj, moe_dispatch, mlp (dense layers' whole MLP), moe (MoE layers' whole MoE block) "
                   "(Megatron --recompute-modules), every_second_linear (torchtitan's per-operation policy: every "
                   "second projection), mlp_fc1 (the dense MLP's input projections and activation: MaxText's "
                   "save-the-projections remat); implies selective. Without it, selective recomputes what the "
                   "stack's selective checkpointing does (core_attn; torchtitan: layernorm,mlp_act,"
                   "every_second_linear; maxtext: core_attn,layernorm,mlp_fc1).")
@click.option("--offload-activation-layers", type=click.IntRange(0), metavar="N",
              help="Layers per model chunk whose activations go to host memory between forward and backward "
                   "(Megatron/TE --cpu-offloading-num-layers), over the cluster's host link.")
@click.option("--offload-optimizer-fraction", type=click.FloatRange(0.0, 1.0), metavar="F",
              help="Share of the optimizer states and step kept on the host (ZeRO-Offload, Megatron "
                   "--optimizer-offload-fraction).")
@click.option("--zero-shard-group", type=click.IntRange(0), metavar="G",
              help="Hybrid sharding (HSDP): ZeRO shards over groups of G of the dp*cp ranks and replicates across "
                   "groups; 0 = all of them.")
@click.option("--optimizer-moment-bytes", type=click.Choice(["2", "4"]), callback=lambda c, p, v: None if v is None else float(v),
              help="Bytes per Adam moment: 4 (fp32) or 2 (BF16 moments, DeepSeek-V3; Megatron --exp-avg-dtype bf16) "
                   "[default: 4, or the weights' dtype where the stack keeps its optimizer there]; given, it overrides the stack.")
@click.option("--loss-chunk-tokens", type=click.IntRange(0), metavar="N",
              help="Compute the loss over chunks of N tokens (chunked / fused linear cross-entropy): only one chunk's "
                   "logits exist at a time; 0 = all at once.")
@click.option("--json", "as_json", is_flag=True, help="Print StepReport.as_dict() as JSON (SI units: seconds, bytes, FLOPs).")
@click.option("--emit", type=click.Choice(["megatron", "torchtitan", "deepspeed"]), default=None,
              help="Print this plan's launch instead of the report (Megatron-LM: env + flags; torchtitan 0.3.0: a "
                   "config module; DeepSpeed 0.19.8: JSON, recipe on stderr), as `paraplan plan --emit` writes its "
                   "plans; a plan the framework cannot run as given is refused in one line. Without --stack "
                   "the plan is priced on the framework's profile (torchtitan: torchtitan-0.3), as plan --emit's.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), help="Write the event-level pipeline timeline as a Chrome/Perfetto trace (JSON).")
@click.option("--gantt", "gantt_path", type=click.Path(dir_okay=False), help="Draw the event-level pipeline timeline to an image (.png, .svg or .pdf).")
@click.pass_context
def command(ctx: click.Context, as_json: bool, emit: str | None, trace_path: str | None, gantt_path: str | None,
            plan_path: str | None, groups: tuple[str, ...], headroom_gib: float | None, **opts) -> None:
    """How long one training step of MODEL takes on CLUSTER with this parallel plan, where the
    time goes, and whether it fits in memory.

    Prints the step-time breakdown (seconds and % of step), throughput (tokens/s, TFLOP/s per
    GPU, MFU, HFU), memory per GPU by part (GiB and % of HBM) and one line on why.

    A pooled (mixed) cluster file takes the plan from --plan or --group instead of the degrees:
    replica groups of pipelines whose stages sit on pools; it prints the step of the slowest
    group, each group and stage, and where the time goes per pool.

    \b
    Examples:
      paraplan simulate --model llama3-70b --cluster dgx-h100 --gpus 64 \\
          --tp 8 --pp 4 --zero 1 --micro-batch 1 --global-batch 128 --recompute selective --sequence-parallel
      paraplan simulate -m llama3.1-405b -c dgx-h100 -n 8192 --tp 8 --pp 16 --global-batch 2048 --sequence-parallel \\
          --first-stage-layers 7 --last-stage-layers 7 --zero 1 --recompute full --recompute-num-layers 2
      paraplan simulate -m deepseek-v3 -c h800-node -n 2048 --pp 16 --ep 64 --schedule dualpipe \\
          --uneven-layers --zero 1 --dtype fp8 --global-batch 15360 --optimizer-moment-bytes 2 \\
          --recompute-modules layernorm,mla_up_proj,mlp_act,moe_dispatch --ep-comm-overlap --ep-dispatch-dedup
      # from a paraplan checkout (examples/ is not installed with the package):
      paraplan simulate -m llama3-70b -c examples/clusters/a100-h100.yaml --global-batch 512 \\
          --group "16x h100:tp8:pp2" --group "8x a100:tp8:pp4" --zero 1 --sequence-parallel
    """
    from hardware_specs.catalog import is_pooled
    check_distinct_paths({"--trace": trace_path, "--gantt": gantt_path}, {"--plan": plan_path})
    if emit is not None and as_json:
        raise InputError("--emit", "prints the launch instead of the report, so --json would print nothing",
                         "run --emit and --json as two commands")
    if emit is not None and is_pooled(opts["cluster"]):
        raise InputError("--emit", "exports a plan on one GPU kind; a pooled plan has no framework launch",
                         "simulate one pool's plan with its degrees")
    if is_pooled(opts["cluster"]):
        _simulate_pooled(ctx, opts, plan_path, groups, as_json, trace_path, gantt_path, headroom_gib)
        return
    if plan_path is not None or groups:
        raise InputError("--plan" if plan_path else "--group", f"{opts['cluster']} is one GPU kind",
                         "give its degrees (--tp, --pp, ...), or a pooled cluster file")
    if emit is not None and ctx.get_parameter_source("stack") == click.core.ParameterSource.DEFAULT:
        # as `plan --emit`: without --stack the plan is priced on the exported framework's profile
        # (torchtitan-0.3 for torchtitan; the default Megatron-Core where paraplan has none)
        from paraplan.exports import default_stack
        opts["stack"] = default_stack(emit)
    for field, path in (("--trace", trace_path), ("--gantt", gantt_path)):
        if path is not None:
            _pipeline_api()
            (check_image_path if field == "--gantt" else check_writable)(path, field)
    model, cluster, config, gpus = build_inputs(opts)
    keep_gib = headroom.headroom_gib(cluster.gpu.hbm_bytes, headroom_gib)      # a bad value fails first
    check_timeline_size(config, trace_path, gantt_path)
    report = simulate(model, cluster, config, n_gpus=gpus)
    # a plan the framework cannot run is refused before --trace / --gantt write anything
    launch = emit_launch(report, model, cluster, opts["stack"], emit) if emit is not None else None
    notes: list[str] = []
    if trace_path is not None or gantt_path is not None:
        notes = write_timelines(model, config, report, trace_path, gantt_path, cluster)
    if launch is not None:
        click.echo(launch, nl=False)
    elif as_json:
        click.echo(dump_json(json_dict(report, cluster, keep_gib, model)), nl=False)
    else:
        note = zero_source(opts["stack"], model, cluster, config) if opts["zero"] is None else ""
        cp_note = cp_kind_source(opts["stack"], config) if opts.get("cp_kind") is None else ""
        etp_note = etp_source(opts["stack"], model, config, cluster.gpu.name) if opts.get("etp") is None else ""
        click.echo(render(report, model, cluster, keep_gib, config, note, cp_note, etp_note), nl=False)
    for note in notes:
        click.echo(note, err=True)


def emit_launch(report: StepReport, model: ModelSpec, cluster, stack: str, framework: str) -> str:
    """The launch of exactly the plan ``report`` simulated, for ``framework`` (``paraplan.exports``):
    the layout a user entered (a published run's degrees, stage layers, recomputation), not the
    search's pick that ``plan --emit`` writes. A plan the framework cannot run as given raises the
    export's ``InputError``; DeepSpeed's recipe, and a note when the plan was priced on another
    framework's stack profile, go to stderr."""
    from paraplan import exports
    from paraplan.api import report_row
    exports.check_hardware(cluster.gpu, framework)
    spec = load_stack(stack)
    row = report_row(report, model, cluster, spec.name)
    row.update(model=model, gpus_per_host=cluster.launch_gpus_per_host)
    # the step printed in the header is the stack's behaviour, not the framework's
    return write_launch(row, framework, stack_profile_note(spec, framework, "predicted"))


def stack_profile_note(spec, framework: str, what: str) -> str:
    """"<what> on the X stack profile (its framework), not <framework>'s", with the release paraplan
    has no profile of, where the plan was priced on a stack that is not ``framework``'s; else ""."""
    from paraplan import exports
    if spec.framework in exports.STACK_FRAMEWORKS.get(framework, ()):
        return ""
    return (f"{what} on the {spec.name} stack profile ({spec.framework}), not {framework}'s"
            + ("" if framework in exports.FRAMEWORK_STACKS else f": paraplan has no profile of the {framework} release "
               "this export targets"))


def write_launch(row: dict, framework: str, note: str) -> str:
    """``framework``'s launch of plan ``row`` (``paraplan.exports.emit``, ``note`` in its header),
    the note and the framework's launch recipe (``exports.launch_notes``) echoed to stderr."""
    from paraplan import exports
    text = exports.emit(row, framework, note=note)
    if note:
        click.echo(f"paraplan: {note}", err=True)
    recipe = exports.launch_notes(row, framework, note)
    if recipe:
        click.echo(recipe, err=True, nl=False)
    return text


#: options that describe a one-kind plan; a pooled cluster's plan comes from --plan / --group
_DEGREE_OPTIONS = ("gpus", "dp", "tp", "pp", "cp", "ep", "etp", "vpp")
#: options that set a stage's layers: on a pooled cluster each stage states its own
_LAYER_OPTIONS = ("first_stage_layers", "last_stage_layers", "uneven_layers", "pipeline_layout")


def _simulate_pooled(ctx, opts, plan_path, groups, as_json, trace_path, gantt_path, headroom_gib=None) -> None:
    """``simulate`` on a pooled cluster (see ``paraplan.commands._hetero``)."""
    from click.core import ParameterSource

    from hardware_specs.catalog import load_pooled_cluster
    from paraplan.commands import _hetero
    from simulator.heterogeneous import HeteroPlan, plan_switches, simulate_heterogeneous
    from simulator.heterogeneous.plan import UNMODELLED_FIELDS

    for name in _DEGREE_OPTIONS:
        if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None):
            raise InputError(f"--{name.replace('_', '-')}", "a pooled cluster's plan comes from --plan or --group",
                             "drop it and describe the groups")
    if trace_path or gantt_path:
        raise InputError("--trace" if trace_path else "--gantt", "timelines are drawn for one-kind clusters only")
    # the options the pooled model does not read are refused, not run without a word
    given = [n for n in _LAYER_OPTIONS + UNMODELLED_FIELDS
             if ctx.get_parameter_source(n) not in (ParameterSource.DEFAULT, None)]
    for name in given:
        flag = f"--{name.replace('_', '-')}"
        if name in _LAYER_OPTIONS:
            raise InputError(flag, "a pooled plan's stages state their own layers",
                             "give them in --group 'POOL:tpT:ppK:L1,L2,...' or in the --plan file")
        raise InputError(flag, "not modelled on pooled clusters", "drop it, or simulate one GPU kind with its degrees")
    if (plan_path is None) == (not groups):
        raise InputError("--plan", "give the plan of a pooled cluster as --plan FILE or --group SPEC (one of them)",
                         "e.g. --group '8x h100:tp8:pp4'")
    model = load_model(opts["model"])
    cluster = load_pooled_cluster(opts["cluster"])
    data = _hetero.read_plan_file(plan_path) if plan_path is not None else None
    seq_len = _hetero.plan_seq_len(data, opts.get("seq_len"))      # the plan file's, as planned
    if seq_len:
        model = model.with_seq_len(seq_len)
    plan_groups = (_hetero.groups_from_data(data) if data is not None
                   else tuple(_hetero.parse_group(g, model) for g in groups))
    stated = data.get("dtype") if data is not None else None
    if opts.get("dtype") is None:
        if stated in KNOWN_DTYPES:      # the plan file's own (one it does not know fails in HeteroPlan)
            opts = {**opts, "dtype": stated}
        else:
            # the dtype `paraplan plan` gives a plan on the pools this one uses (not the whole
            # file's: a V100 pool the plan leaves idle moved an H100-only plan to fp16)
            from planners.heterogeneous import plan_dtype
            used = {st.pool for g in plan_groups for st in g.stages}
            for g in plan_groups:        # an unknown pool is named before the pools it uses are taken
                for st in g.stages:
                    if st.pool not in cluster.pool_names:
                        raise InputError(f"pools.{st.pool}", f"unknown pool in cluster {cluster.name}",
                                         suggest(st.pool, cluster.pool_names))
            default = plan_dtype(cluster.subset([n for n in cluster.pool_names if n in used]), required=True)
            opts = {**opts, "dtype": default}
            if data is not None and stated is None:
                data["dtype"] = default
    # the stack's behaviour (GPU-specific recipes only when every pool has the same GPU kind),
    # then every switch set explicitly
    stack = load_stack(opts["stack"])
    kinds = {p.cluster.gpu.name for p in cluster.pools}
    gpu = kinds.pop() if len(kinds) == 1 else None
    software = stack_config_fields(stack, opts["dtype"], model.name, gpu)
    for key in SWITCH_OPTIONS:
        if opts.get(key) is not None:
            software[key] = opts[key]
    refuse_switches_without_effect(opts, model, software["flash_attention"])
    sp = opts["sequence_parallel"]
    if sp is None:
        behaviour = stack.training_for(model.name, gpu, opts["dtype"])
        # (a MoE model on a stack that cannot run tp > 1 without it: on, ``stack_sequence_parallel``)
        sp = bool(behaviour is not None and (behaviour.sequence_parallel_with_tp
                                             or (model.moe is not None and "moe_tp_without_sp" in behaviour.lacks)))
    zero = opts["zero"]
    zero_defaulted = zero is None and (data is None or data.get("zero_stage") is None)
    if zero_defaulted:
        # the stack's documented sharding over the plan's data-parallel replicas, as on one GPU
        # kind (``stack_zero_stage``); a plan file's own zero_stage wins over it
        zero = stack_zero_stage(stack, sum(g.replicas for g in plan_groups), 1, model.name, gpu, opts["dtype"])
        if zero > 1:
            raise InputError("--zero", f"{stack.name}'s default ZeRO-{zero} across pools is not modelled yet",
                             "give --zero 0 or 1")
    shared = dict(micro_batch=opts["micro_batch"], zero_stage=zero, recompute=opts["recompute"],
                  sequence_parallel=sp, dtype=opts["dtype"], schedule=opts["schedule"] or "1f1b",
                  **plan_switches(software))
    gbs = None
    if opts["global_batch"] is not None or opts["global_batch_tokens"] is not None:
        gbs = _global_batch(opts["global_batch"], opts["global_batch_tokens"], model.seq_len)
    if data is not None:
        if ctx.get_parameter_source("stack") not in (ParameterSource.DEFAULT, None):
            data.update(plan_switches(software))          # an explicit --stack replaces the file's switches
        for key, value in shared.items():     # options given on the command line override the file
            if ctx.get_parameter_source(_OPTION_OF.get(key, key)) not in (ParameterSource.DEFAULT, None):
                data[key] = value
        if gbs is not None:
            data["global_batch"] = gbs
        if data.get("zero_stage") is None:
            data["zero_stage"] = zero
        plan = _hetero.plan_from_data(data)
    else:
        plan = HeteroPlan(groups=plan_groups, global_batch=gbs, **shared)
    for pool in cluster.pools:      # a bad --headroom-gib fails before anything is computed
        headroom.headroom_gib(pool.cluster.gpu.hbm_bytes, headroom_gib)
    # a stage over its GPU's memory is shown (fits NO), not refused, as on a one-kind cluster
    report = simulate_heterogeneous(model, cluster, plan)
    if as_json:
        click.echo(dump_json(_hetero.report_json(report, headroom_gib)), nl=False)
    else:
        # where a ZeRO stage neither --zero nor the plan file gave came from, as on one GPU kind
        note = (zero_source_text(opts["stack"], model.name, gpu, sum(g.replicas for g in plan_groups), 1,
                                 opts["dtype"]) if zero_defaulted else "")
        click.echo(_hetero.render_report(report, model, cluster, headroom_gib, note), nl=False)


_OPTION_OF = {"zero_stage": "zero"}
