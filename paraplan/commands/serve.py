"""``paraplan serve``: simulate one LLM serving deployment, or plan the best one under an SLO.

``serve simulate`` predicts TTFT, TPOT, request latency, tokens/s per GPU and per user, memory
per GPU and the largest concurrency that fits, for an aggregated or disaggregated deployment
(``simulator.serving``). ``serve plan`` searches layouts (``planners.serving``) and prints the
winner, why it wins, and the Pareto front of tokens/s/GPU against tokens/s/user, as a table,
``--json`` or ``--csv``, with ``--plot`` drawing the front.
"""
from __future__ import annotations

import io
import math
import shlex
from pathlib import Path

import click
import numpy as np
import pandas as pd

from cost_models.weight_formats import WEIGHT_FORMATS
from hardware_specs.errors import InputError
from paraplan import serving_priors
from paraplan.serving_inputs import check_dense, check_release
from paraplan.cli import (PROGRESS_AFTER_S, atomic_output_path, check_distinct_paths, check_image_path,
                          check_writable, dump_json, exact_number_text, format_table, lazy_bar, write_atomic)

POS = click.IntRange(min=1)
GIB = 2**30
PRECISIONS = WEIGHT_FORMATS          # the formats the serving cost model prices
PART_MEANING = {
    "decode_attention_s": "attention projections and the KV-cache read",
    "decode_mlp_s": "MLP / routed and shared experts (weight streaming)",
    "decode_elementwise_s": "norms, residual adds, rotary",
    "decode_lm_head_s": "LM head and sampling",
    "decode_comm_s": "tensor-parallel all-reduce / expert dispatch and combine",
    "decode_kernel_fixed_s": "fixed time per kernel",
    "decode_host_s": "host time not hidden (launches, scheduling)",
    "decode_draft_s": "the MTP module or EAGLE-3 head drafting the speculative tokens (k passes)",
}
MEMORY_MEANING = {
    "weights_bytes": "weights in their stored formats",
    "activations_bytes": "activation workspace of one step's token budget",
    "reserved_bytes": "CUDA context, communication buffers, graphs",
    "kv_pool_bytes": "KV-cache pool",
}
#: prefill utilisation above which serve simulate says the prefill side is the bottleneck
SATURATED_PREFILL = 0.99
#: the mode-specific metrics of ``ServingReport.extra``: (shown as, what); fractions in percent
EXTRA_MEANING = {
    "prefill_work_s": ("prefill_work_ms", "engine time one prompt's prefill adds to the shared steps"),
    "prefill_share_fraction": ("prefill_share_pct", "share of the engine's time on prompts (TPOT = decode step / "
                                                    "(1 - share x (b - 1) / b): the other clients' prompts)"),
    "prefill_own_s": ("prefill_own_ms", "one prompt's prefill run alone (part of TTFT)"),
    "prefill_step_s": ("prefill_step_ms", "a full prefill batch's step (the prefill workers' throughput)"),
    "kv_transfer_s": ("kv_transfer_ms", "one request's KV cache moved from prefill to decode worker"),
    "prefill_utilization_fraction": ("prefill_utilization_pct", "share of the prefill workers' capacity in use"),
    "join_s": ("join_ms", "TTFT spent joining the running batch (the engine's join / hold steps) and the request's "
                          "host time"),
    "wait_behind_s": ("wait_behind_ms", "TTFT spent behind the other clients' prompts (arriving in waves, or queued)"),
    "queue_wait_s": ("queue_wait_ms", "TTFT spent queued: for a prefill worker (disaggregated, waves included) or for "
                                      "a free KV-cache slot (aggregated)"),
    "request_host_s": ("request_host_ms", "the request's host time outside the engine's steps (the rest of TTFT)"),
}
_PLAN_COLUMNS = ("mode", "layout", "prefill_layout", "decode_layout", "batch", "prefill_batch", "workers",
                 "prefill_workers", "decode_workers", "gpus_used", "concurrency", "ttft_ms", "ttft_p90_ms", "tpot_ms",
                 "tokens_per_s_per_gpu", "tokens_per_s_per_user", "meets_slo")


@click.group("serve", short_help="Simulate or plan LLM inference deployments (TTFT, TPOT, tokens/s/GPU).")
def command() -> None:
    """Serving: how fast does a deployment answer, and which layout serves most tokens per GPU
    within a latency objective?

    \b
    Examples:
      paraplan serve simulate --model llama3.1-70b --system dgx-h100 --backend vllm --tp 4 --batch 32
      paraplan serve plan --model deepseek-r1 --system hgx-h200 --gpus 64 --isl 1024 --osl 1024 \\
          --ttft-ms 1000 --tpot-ms 30 --precision fp8
    """


def _common(f):
    opts = [
        click.option("--model", "-m", required=True, help="Model preset (paraplan models list), YAML or HF config.json."),
        click.option("--system", "-s", required=True, help="Cluster preset (paraplan hardware list) or YAML file."),
        click.option("--backend", "-b", default="vllm", show_default=True,
                     help="Serving stack: a framework (vllm, sglang, trtllm: its newest profile) or a stack name (vllm-0.11)."),
        click.option("--backend-version", metavar="VERSION", help="Release of the framework (picks the profile describing it)."),
        click.option("--isl", type=POS, default=1024, show_default=True, help="Input (prompt) tokens per request."),
        click.option("--osl", type=int, default=1024, show_default=True, callback=lambda ctx, param, v: _check_osl(v), help="Output tokens per request, 2 or more (the first comes with the prompt; TPOT times the rest)."),
        click.option("--precision", type=click.Choice(PRECISIONS), default=None,
                     help="Weight format of all GEMMs (default: the released checkpoint's where the preset states "
                          "one, its checkpoint_format in `paraplan models show NAME`: fp8_block for DeepSeek-V3 / R1, "
                          "Kimi-K2, MiniMax-M2.5; bf16 beside a checkpoint stating only its experts' format, "
                          "gpt-oss's MXFP4 and Kimi-K2.5's int4; else fp8 on GPUs with FP8 tensor cores, else bf16)."),
        click.option("--expert-precision", type=click.Choice(PRECISIONS), default=None,
                     help="Weight format of the routed experts, MoE models only (default: --precision if given, "
                          "else the checkpoint's format for its experts, expert_checkpoint_format: mxfp4 for "
                          "gpt-oss, int4_wo for Kimi-K2.5, fp8_block for DeepSeek-V3 / R1, Kimi-K2, MiniMax-M2.5; "
                          "else as --precision's default)."),
        click.option("--kv-cache-dtype", type=click.Choice(["auto", "bf16", "fp16", "fp8"]), default="auto", show_default=True,
                     help="KV-cache dtype (auto = as the engine decides: the 8-bit KV an fp8 / nvfp4 "
                          "(ModelOpt) checkpoint names where the stack reads it (its kv_dtype_from_checkpoint, "
                          "paraplan hardware stacks NAME), else the stack's default, 16-bit, as for a 16-bit "
                          "release the engine quantises to fp8 at load time (--quantization fp8); the header's KV "
                          "says which)."),
        click.option("--speculative-tokens", type=click.IntRange(min=0), default=None, metavar="K",
                     help="Speculative decoding: K tokens drafted per decode step, at most 16, and verified in one "
                          "pass (default: none, as every engine), by the model's own multi-token-prediction (MTP) "
                          "module (deepseek-v3, deepseek-r1, glm-5) or the EAGLE-3 head of --draft-model."),
        click.option("--draft-model", default=None, metavar="DIR",
                     help="Draft with this EAGLE-3 head (its config.json or folder, e.g. "
                          "examples/drafts/eagle3-llama3.1-8b): one decoder layer fusing three of the target's "
                          "hidden states, with its own KV cache and draft vocabulary, 16-bit. Needs "
                          "--speculative-tokens and --draft-acceptance (no prior is published for a head)."),
        click.option("--draft-acceptance", type=float, default=None, metavar="P",
                     help="Probability a drafted token is accepted (given the ones before it were); a step then "
                          "yields (1 - P^(K+1)) / (1 - P) tokens. Default 0.85, an unfitted prior (DeepSeek-V3 "
                          "report: 85-90% for its second token); give your own measured rate."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _context(opts):
    from hardware_specs.catalog import load_cluster
    from hardware_specs.errors import InputError
    from model_specs.catalog import load_model
    from paraplan.validation.serving import SYSTEMS, model_preset_for
    from simulator.serving.context import ServingContext, default_formats
    # the serving-runs file's spellings (a Hugging Face id, "b200_sxm") name the same presets; a
    # YAML or config.json path is read as given
    given = str(opts["model"])
    model = given
    if "/" in given and not Path(given).exists():      # a Hugging Face id, not a local file
        model = model_preset_for(given) or given
    system = SYSTEMS.get(str(opts["system"]).lower(), opts["system"])
    try:
        cluster = load_cluster(system)
    except InputError as e:
        if e.field != "cluster":
            raise
        raise InputError("system", e.message, e.fix) from None
    check_release(opts["backend"], opts["backend_version"], _option)
    spec = load_model(model) if isinstance(model, str) else model
    precision, expert = default_formats(spec, cluster.gpu, opts["precision"], opts["expert_precision"])
    ctx = ServingContext.build(spec, cluster, opts["backend"], precision, expert,
                               opts["kv_cache_dtype"], backend_version=opts["backend_version"],
                               speculative_tokens=opts["speculative_tokens"], draft_acceptance=opts["draft_acceptance"],
                               draft_head=opts["draft_model"])
    check_dense(ctx.model, opts["expert_precision"],
                {f"{p}{k}": opts.get(f"{p}{k}") for p in ("", "prefill_", "decode_") for k in ("moe_tp", "moe_ep")},
                _option)
    return ctx


def _say_release_note(opts, ctx) -> None:
    """A release no profile lists runs as the newest profiled release before it: say so, once the
    command has its answer (a request refused later prints its one error line only)."""
    if opts["backend_version"] and ctx.stack.framework.lower() == str(opts["backend"]).strip().lower():
        from hardware_specs.catalog import serving_release_match
        note = serving_release_match(opts["backend"], opts["backend_version"]).note
        if note:
            click.echo(f"note: {note}", err=True)


def _option(name: str) -> str:
    """A serving input's command-line spelling (``expert_precision`` -> ``--expert-precision``)."""
    return "-b" if name == "backend" else "--" + name.replace("_", "-")


def _acceptance_note(ctx) -> str:
    """Says so where a speculative TPOT rests on the unfitted draft acceptance."""
    return serving_priors.bracketed(serving_priors.acceptance_text(ctx))


def _extrapolation_note(ctx, isl: int) -> str:
    """Says so where a TTFT extrapolates the fitted prefill rates: a prompt longer than any the
    generation's serving efficiency was fitted on (``ServingEfficiency.fitted_isl_max_tokens``)."""
    most = ctx.efficiency.fitted_isl_max_tokens
    if most and isl > most and not ctx.efficiency.prior:
        return (f" [TTFT at isl {isl:,} extrapolates: the {ctx.cluster.gpu.generation} rows fitted reach isl "
                f"{int(most):,}]")
    return ""


def accuracy_line(ctx, mode: str, indent: str = "") -> str:
    """How well the fitted model predicted measured runs of this engine, mode and GPU generation
    (``ServingContext.validation_error``), or "" where none was fitted."""
    rec = ctx.validation_error(mode)
    if rec is None:
        return ""
    few = " (few rows: a rough guide)" if rec["rows"] < 20 else ""
    return (f"{indent}accuracy: on {rec['rows']} measured {ctx.stack.framework} {mode} runs of "
            f"{ctx.efficiency.generation} GPUs the model's TTFT is off by {rec['ttft_mean_abs_err_pct']:.0f}% on "
            f"average, its TPOT by {rec['tpot_mean_abs_err_pct']:.0f}% (in-sample; `paraplan validate serving`){few}")


def _check_osl(osl: int) -> int:
    """``--osl`` checked before any work (``deployment.check_osl``: simulate and plan say the same)."""
    from simulator.serving.deployment import check_osl
    check_osl(osl)
    return osl


def _prior_note(ctx) -> str:
    return serving_priors.bracketed(serving_priors.prior_text(ctx))


# --------------------------------------------------------------------------------------------
# simulate
# --------------------------------------------------------------------------------------------

def _layout(opts, prefix: str, where: str):
    from simulator.serving.deployment import worker_layout
    p = prefix.replace("-", "_")
    return worker_layout(opts[f"{p}tp"], opts[f"{p}pp"], opts[f"{p}adp"], opts[f"{p}moe_tp"], opts[f"{p}moe_ep"],
                         opts[f"{p}batch"], where, (f"--{prefix}moe-tp", f"--{prefix}moe-ep"))


def _layout_options(prefix: str, what: str):
    def deco(f):
        opts = [
            click.option(f"--{prefix}tp", type=POS, default=1, show_default=True, help=f"{what}: attention tensor parallelism."),
            click.option(f"--{prefix}pp", type=POS, default=1, show_default=True, help=f"{what}: pipeline stages."),
            click.option(f"--{prefix}adp", type=POS, default=1, show_default=True,
                         help=f"{what}: attention data-parallel ranks (MoE models)."),
            click.option(f"--{prefix}moe-tp", type=POS, default=None,
                         help=f"{what}: expert tensor parallelism, MoE models (default tp x adp / moe-ep; tp x adp "
                              "when neither is given)."),
            click.option(f"--{prefix}moe-ep", type=POS, default=None,
                         help=f"{what}: expert parallelism, MoE models (default tp x adp / moe-tp; 1 when neither "
                              "is given)."),
            click.option(f"--{prefix}batch", type=POS, default=1 if prefix == "prefill-" else 32, show_default=True,
                         help=f"{what}: " + ("prompts per prefill step per rank." if prefix == "prefill-"
                                              else "requests in flight per attention-DP rank.")),
        ]
        for o in reversed(opts):
            f = o(f)
        return f
    return deco


_AGG_ONLY = ("tp", "pp", "adp", "moe_tp", "moe_ep", "batch", "workers")


def _refuse_other_modes_options(mode: str) -> None:
    """An agg worker's option under --mode disagg (or a prefill / decode option under agg) was
    ignored without a word; name it instead."""
    from click.core import ParameterSource
    ctx = click.get_current_context()

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)

    if mode == "disagg":
        for name in _AGG_ONLY:
            if given(name):
                flag = "--" + name.replace("_", "-")
                sides = (f"--prefill-{flag[2:]} / --decode-{flag[2:]}" if name != "batch" else
                         "--prefill-batch / --decode-batch")
                raise InputError(flag, "sets the aggregated worker; a disaggregated deployment (--mode disagg) has "
                                 "prefill and decode workers", f"use {sides}, or drop --mode disagg")
    else:
        for name in ctx.params:
            if name.startswith(("prefill_", "decode_")) and given(name):
                flag = "--" + name.replace("_", "-")
                raise InputError(flag, f"sets a disaggregated worker; this deployment is aggregated (--mode {mode})",
                                 f"add --mode disagg, or use --{flag.split('-', 3)[3]}")


def _max_batch_meaning(ctx, m) -> str:
    """What bounds ``max_batch_per_rank``: the KV cache, or the stack's cap on running requests."""
    cap = ctx.behaviour.max_running_requests
    if cap and int(m["max_batch_per_rank"]) == cap:
        return f"largest concurrency per rank: {ctx.stack.name}'s max_running_requests (the KV cache would hold more)"
    return "largest concurrency per rank whose KV cache fits"


def _requests(n) -> str:
    """``n`` requests, in words ("1 request", "64 requests")."""
    return f"{int(n)} request{'' if int(n) == 1 else 's'}"


def _gpus(n) -> str:
    """``1 GPU``, ``8 GPUs``."""
    return f"{int(n)} GPU{'' if int(n) == 1 else 's'}"


def kv_text(ctx) -> str:
    """The KV cache a context prices, as serve simulate's and serve plan's headers say it
    ('KV 8-bit': ``auto`` resolved by the stack and the checkpoint)."""
    return f"KV {int(ctx.kv_bytes * 8)}-bit"


def render_simulation(report) -> str:
    """The human-readable table of one ``ServingReport``."""
    from planners.serving.labels import prompts_per_step, worker_label
    ctx, d, m = report.context, report.deployment, report.metrics
    moe = ctx.model.moe is not None

    def label(lay) -> str:
        return worker_label(lay.tp, lay.pp, lay.adp, lay.moe_tp, lay.moe_ep, moe)

    lines = [
        f"model    {ctx.model.name}  ({ctx.model.num_layers} layers, hidden {ctx.model.hidden_size}"
        + (f", {ctx.model.moe.num_experts} experts top-{ctx.model.moe.top_k}" if ctx.model.moe else "") + ")",
        f"system   {ctx.cluster.name}  ({ctx.cluster.gpu.name}, {_gpus(ctx.cluster.gpus_per_node)} per "
        f"{ctx.cluster.scaleup.kind} domain)",
        f"stack    {ctx.stack.name}  (weights {format_text(ctx.dense_format, ctx.cluster.gpu)}"
        + (f", experts {format_text(ctx.expert_format, ctx.cluster.gpu)}" if ctx.model.moe else "")
        + f", {kv_text(ctx)})",
    ]
    if d.mode == "agg":
        lines.append(f"layout   aggregated: {d.workers} x worker {label(d.layout)} ({_gpus(d.layout.gpus)}), "
                     f"{_requests(d.layout.batch)} per rank")
    else:
        lines.append(f"layout   disaggregated: {d.prefill_workers} x prefill {label(d.prefill)} "
                     f"({prompts_per_step(d.prefill.batch)}) + {d.decode_workers} x decode {label(d.decode)} "
                     f"({_requests(d.decode.batch)} per rank)")
    from simulator.serving.deployment import default_gpus, placement_note
    # without --gpus a worker larger than an NVLink domain is given the fewest GPUs on which the
    # workers sit whole (default_gpus), which can exceed their own: say so, as for --gpus
    held = d.gpus_given if d.gpus_given is not None else default_gpus(d, int(ctx.cluster.gpus_per_node))
    lines.append(f"load     isl {d.isl} / osl {d.osl} tokens, {_requests(d.concurrency)} in flight on {_gpus(d.gpus)}"
                 + ((f" (of {held} given, {held - d.gpus} idle)" if d.gpus_given is not None else
                     f" (held on {held}, {held - d.gpus} idle: its workers sit whole in NVLink domains)")
                    if held > d.gpus else ""))
    if note := placement_note(d, ctx.cluster):
        lines.append(f"place    {note}")
    if ctx.speculative_tokens:
        lines.append(f"decode   speculative: {ctx.drafter} drafts {ctx.speculative_tokens} token"
                     f"{'s' if ctx.speculative_tokens > 1 else ''} a step, each accepted with p = "
                     f"{ctx.draft_acceptance:.10g}{_acceptance_note(ctx)}: {ctx.tokens_per_step_at(d.osl):.2f} tokens a step")
    lines += ["", "latency and throughput" + _prior_note(ctx) + _extrapolation_note(ctx, d.isl)]
    rows = [["ttft_ms", f"{1e3 * m['ttft_s']:.1f}", "time to first token, mean"],
            ["ttft_p90_ms", f"{1e3 * m['ttft_p90_s']:.1f}", "time to first token, 90th percentile (queueing model)"],
            ["tpot_ms", f"{1e3 * m['tpot_s']:.2f}", "time per output token, mean"],
            ["latency_ms", f"{1e3 * m['latency_s']:.1f}", "request latency = TTFT + (osl - 1) x TPOT"],
            ["tokens_per_s_per_gpu", f"{m['tokens_per_s_per_gpu']:,.1f}", "output tokens/s per GPU"],
            ["tokens_per_s_per_user", f"{m['tokens_per_s_per_user']:,.1f}", "output tokens/s each user sees"],
            ["max_batch_per_rank", f"{int(m['max_batch_per_rank'])}", _max_batch_meaning(ctx, m)]]
    for k, v in report.extra.items():
        scale = 1e3 if k.endswith("_s") else 100.0       # seconds to ms, fractions to percent
        name, what = EXTRA_MEANING.get(k, (k[:-2] + "_ms" if k.endswith("_s") else k + "_pct", ""))
        rows.append([name, f"{scale * v:.3g}", what])
    lines.append(format_table(rows, ["metric", "value", "what"], align="lrl", indent="  ").rstrip())
    acc = accuracy_line(ctx, d.mode, "  ")
    if acc:
        lines.append(acc)
    step = sum(report.decode_breakdown_s.values())
    # the parts rest on the serving efficiency as the latencies above do: the same note beside them
    if ctx.speculative_tokens:
        lines += ["", f"decode step ({ctx.speculative_tokens + 1} tokens verified for every request of a rank, "
                      f"{ctx.tokens_per_step_at(d.osl):.2f} kept on average)" + _prior_note(ctx)]
    else:
        lines += ["", "decode step (one token for every request of a rank)" + _prior_note(ctx)]
    # part names without their "_s": the time_ms column carries the unit
    rows = [[k.removeprefix("decode_").removesuffix("_s"), f"{1e3 * v:.3f}", f"{100 * v / step:.1f}" if step > 0 else "-",
             PART_MEANING[k]] for k, v in report.decode_breakdown_s.items()]
    rows.append(["step", f"{1e3 * step:.3f}", "100.0", "one decode step"])
    lines.append(format_table(rows, ["part", "time_ms", "pct_of_step", "what"], align="lrrl", indent="  ").rstrip())
    hbm = ctx.cluster.gpu.hbm_bytes
    lines += ["", "memory per GPU" + (" (decode worker)" if d.mode == "disagg" else "")]
    rows = [[k.removesuffix("_bytes"), f"{v / GIB:.2f}", f"{100 * v / hbm:.1f}", MEMORY_MEANING[k]]
            for k, v in report.memory_bytes.items()]
    # the parts stop short of the HBM by what the stack leaves free (vLLM gpu_memory_utilization 0.9 of
    # the device, TensorRT-LLM free_gpu_memory_fraction 0.9 of what is free): say so, as a total
    held = sum(report.memory_bytes.values())
    b = ctx.behaviour
    rows.append(["total", f"{held / GIB:.2f}", f"{100 * held / hbm:.1f}",
                 f"held: {ctx.stack.name} takes {b.gpu_memory_fraction:g} of the "
                 f"{'device' if b.memory_fraction_of == 'total' else 'free'} memory"])
    rows.append(["hbm", f"{hbm / GIB:.2f}", "100.0", f"{ctx.cluster.gpu.name} device memory"])
    lines.append(format_table(rows, ["part", "mem_gib", "pct_of_hbm", "what"], align="lrrl", indent="  ").rstrip())
    biggest = max(report.decode_breakdown_s.items(), key=lambda kv: kv[1])
    lines += ["", f"why: the decode step is {1e3 * step:.2f} ms, {100 * biggest[1] / max(step, 1e-12):.0f}% of it "
                  f"{biggest[0].removeprefix('decode_')[:-2]} ({PART_MEANING[biggest[0]]})"]
    util = report.extra.get("prefill_utilization_fraction")
    if d.mode == "disagg" and util is not None and util >= SATURATED_PREFILL:
        # the decode side holds more clients than the prefill side serves: TTFT is their queue
        lines.append(f"     the prefill workers are saturated ({100 * util:.0f}% of their capacity): TTFT "
                     f"{report.metrics['ttft_s'] * 1e3:,.0f} ms is mostly the queue for them; add prefill workers or "
                     "lower the decode concurrency")
    return "\n".join(lines) + "\n"


@command.command("simulate", short_help="TTFT, TPOT, tokens/s and memory of one serving deployment.")
@_common
@click.option("--mode", type=click.Choice(["agg", "disagg"]), default="agg", show_default=True,
              help="agg: workers do prefill and decode; disagg: separate prefill and decode workers.")
@_layout_options("", "agg worker")
@click.option("--workers", type=POS, default=1, show_default=True, help="agg: identical workers.")
@_layout_options("prefill-", "disagg prefill worker")
@click.option("--prefill-workers", type=POS, default=1, show_default=True, help="disagg: prefill workers.")
@_layout_options("decode-", "disagg decode worker")
@click.option("--decode-workers", type=POS, default=1, show_default=True, help="disagg: decode workers.")
@click.option("--gpus", "gpus_given", type=POS, default=None,
              help="GPUs the deployment is given (default: its workers' own, or, where a worker is larger than "
                   "an NVLink domain, the fewest on which the workers sit whole). Workers sit whole in the NVLink "
                   "domains of these (cost_models/worker_placement.py); the rest stay idle.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as JSON (times in ms as serve plan's: ttft_ms, tpot_ms, latency_ms; memory in "
                   "bytes; shares as fractions, named _fraction: prefill_share_fraction, "
                   "prefill_utilization_fraction; a dense model's expert fields, expert_format and each layout's moe_tp / moe_ep, null).")
@click.option("--emit", is_flag=True,
              help="Print the backend's launch script for this deployment (bash: vllm serve, sglang.launch_server "
                   "or trtllm-serve with the settings priced) instead of the report.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False),
              help="Write the output here (atomically) instead of stdout.")
def simulate_cmd(as_json: bool, emit: bool, out_path: str | None, **opts) -> None:
    """How fast does one deployment of MODEL on SYSTEM serve requests of ISL prompt and OSL output
    tokens, with BATCH requests in flight per rank?

    Prints TTFT (mean and 90th percentile), TPOT, request latency, output tokens/s per GPU and
    per user, the decode step by part, memory per GPU and the largest concurrency that fits.

    \b
    Examples:
      paraplan serve simulate -m llama3.1-70b -s dgx-h100 -b vllm --tp 4 --batch 64 --isl 2048 --osl 512
      paraplan serve simulate -m deepseek-r1 -s gb200-nvl72 -b trtllm --precision nvfp4 --mode disagg \\
          --prefill-adp 4 --prefill-moe-ep 4 --prefill-workers 2 --decode-adp 16 --decode-moe-ep 16 --decode-batch 64
    """
    from simulator.serving.deployment import Deployment
    from simulator.serving.simulate import simulate_serving

    _refuse_other_modes_options(opts["mode"])
    if as_json and emit:
        raise InputError("--emit", "prints the launch script instead of the report, so --json would print nothing",
                         "run --emit and --json as two commands")
    if out_path is not None:
        check_writable(out_path, "--out")
    ctx = _context(opts)
    common = dict(model=opts["model"], system=opts["system"], backend=ctx.stack.name, mode=opts["mode"],
                  isl=opts["isl"], osl=opts["osl"], dense_format=ctx.dense_format, expert_format=ctx.expert_format,
                  kv_cache_dtype=opts["kv_cache_dtype"], speculative_tokens=ctx.speculative_tokens,
                  draft_acceptance=None if ctx.acceptance_is_prior else ctx.draft_acceptance,
                  draft_model=ctx.draft_head.path if ctx.draft_head is not None else None)
    common["gpus_given"] = opts["gpus_given"]
    if opts["mode"] == "agg":
        dep = Deployment(**common, layout=_layout(opts, "", "layout"), workers=opts["workers"])
    else:
        dep = Deployment(**common, prefill=_layout(opts, "prefill-", "prefill"), prefill_workers=opts["prefill_workers"],
                         decode=_layout(opts, "decode-", "decode"), decode_workers=opts["decode_workers"])
    report = simulate_serving(dep, ctx)
    if emit:
        from paraplan.exports.serving import emit_launch
        from paraplan.exports.serving_common import launch_of
        launch = launch_of(ctx, dep, report.metrics)
        text = emit_launch(launch, title="paraplan serve simulate --emit")
        if launch.priced_release_note:
            click.echo(f"note: {launch.priced_release_note}", err=True)
    elif as_json:
        text = dump_json(simulation_json(report))
    else:
        text = render_simulation(report)
    _say_release_note(opts, ctx)
    _write(text, out_path)


def _write(text: str, out_path: str | None) -> None:
    if out_path is not None:
        write_atomic(out_path, text)
        click.echo(f"wrote {out_path}", err=True)
    else:
        click.echo(text, nl=False)


def _seconds_to_ms(data: dict) -> dict:
    """``data`` with each ``*_s`` key renamed ``*_ms`` and its seconds (a number, or a mapping of
    them) in milliseconds; other keys (``tokens_per_s_per_gpu``, ``*_bytes``) as they are."""
    out = {}
    for k, v in data.items():
        if not k.endswith("_s"):
            out[k] = v
        elif isinstance(v, dict):
            out[k[:-2] + "_ms"] = _seconds_to_ms(v)
        else:
            out[k[:-2] + "_ms"] = None if v is None else 1e3 * v
    return out


def simulation_json(report) -> dict:
    """``ServingReport.as_dict()`` as ``serve simulate --json`` prints it: latencies in milliseconds
    under ``_ms`` names (``ttft_ms``, ``tpot_ms``, ``latency_ms``, ``decode_breakdown_ms``), the
    unit of ``serve plan``'s columns, of the --ttft-ms / --tpot-ms objectives and of ``validate
    serving``; memory in bytes, throughput in tokens/s, shares as fractions."""
    return _seconds_to_ms(report.as_dict())


# --------------------------------------------------------------------------------------------
# plan
# --------------------------------------------------------------------------------------------

#: the layouts' degrees, beside their labels, so --json / --csv need no label parsing
_DEGREE_COLUMNS = ("tp", "pp", "adp", "moe_tp", "moe_ep", "prefill_tp", "prefill_pp", "prefill_adp", "prefill_moe_tp",
                   "prefill_moe_ep", "decode_tp", "decode_pp", "decode_adp", "decode_moe_tp", "decode_moe_ep")


#: columns that count something: whole numbers in --json / --csv (empty where the mode has none)
_COUNT_COLUMNS = _DEGREE_COLUMNS + ("batch", "prefill_batch", "workers", "prefill_workers", "decode_workers",
                                    "gpus_used", "concurrency")


#: the expert split of each layout: meaningless on a dense model, so empty (null) there
_EXPERT_COLUMNS = tuple(c for c in _DEGREE_COLUMNS if "moe_" in c)


def _plan_rows(df, moe: bool):
    """The printed columns of ``df`` and its degrees, counts as whole numbers. On a dense model
    (``moe`` False) the expert-split columns stay, so --csv has one header for every model, but
    are empty: the search's moe_tp = tp, moe_ep = 1 are no split a user could set."""
    out = df[[c for c in _PLAN_COLUMNS + _DEGREE_COLUMNS if c in df.columns]].copy()
    for c in _COUNT_COLUMNS:
        if c in out:
            out[c] = pd.to_numeric(out[c]).astype("Int64")
    if not moe:
        for c in _EXPERT_COLUMNS:
            if c in out:
                out[c] = pd.NA
    return out


def _records(df, moe: bool) -> list[dict]:
    return [{k: (None if pd.isna(v) else int(v) if k in _COUNT_COLUMNS else v) for k, v in r.items()}
            for r in _plan_rows(df, moe).to_dict("records")]


def format_text(fmt: str, gpu) -> str:
    """A weight format as the header names it, with the math it runs in where ``gpu`` lacks the
    format's tensor cores (``nvfp4 weight-only in bf16`` on Hopper; ``cost_models.weight_formats``:
    the weights are dequantised in the kernel)."""
    from cost_models.weight_formats import canonical_format, compute_dtype, native_compute_dtype
    math_dtype = compute_dtype(fmt, gpu)
    if math_dtype == native_compute_dtype(fmt) or canonical_format(fmt) == "int4_wo":   # int4_wo says so itself
        return fmt
    return f"{fmt} weight-only in {math_dtype}"


#: a plan row's worker layout as ``serve simulate`` options, per mode (option, column)
_AGG_OPTIONS = (("--tp", "tp"), ("--pp", "pp"), ("--adp", "adp"), ("--moe-tp", "moe_tp"), ("--moe-ep", "moe_ep"),
                ("--batch", "batch"), ("--workers", "workers"))
_DISAGG_OPTIONS = tuple((f"--{side}-{opt}", f"{side}_{col}") for side in ("prefill", "decode")
                        for opt, col in (("tp", "tp"), ("pp", "pp"), ("adp", "adp"), ("moe-tp", "moe_tp"),
                                         ("moe-ep", "moe_ep"))) + (
    ("--prefill-batch", "prefill_batch"), ("--prefill-workers", "prefill_workers"), ("--decode-batch", "batch"),
    ("--decode-workers", "decode_workers"))


def simulate_command(row, opts: dict, moe: bool = True) -> str:
    """The ``paraplan serve simulate`` command that gives ``row`` (a ``serve plan`` row) again:
    the request's own model, system, backend, shape and formats, and the row's layout as the
    options ``serve simulate`` takes (the layout string's ``etpExepX`` is ``--moe-tp E --moe-ep X``).
    Options at their default (1, or not given) are left out, the expert split on a dense model
    (``moe`` False) too."""
    args = ["paraplan", "serve", "simulate", "-m", opts["model"], "-s", opts["system"], "-b", opts["backend"]]
    for name in ("backend_version", "precision", "expert_precision"):
        if opts.get(name) is not None:
            args += [f"--{name.replace('_', '-')}", str(opts[name])]
    if opts.get("kv_cache_dtype") not in (None, "auto"):
        args += ["--kv-cache-dtype", opts["kv_cache_dtype"]]
    for name in ("speculative_tokens", "draft_acceptance", "draft_model"):
        if opts.get(name) is not None:
            # a float as Python reads it back exactly, so the command gives the plan's numbers
            args += [f"--{name.replace('_', '-')}", exact_number_text(opts[name]) if isinstance(opts[name], float)
                     else str(opts[name])]
    args += ["--isl", str(opts["isl"]), "--osl", str(opts["osl"])]
    agg = row["mode"] == "agg"
    if not agg:
        args += ["--mode", "disagg"]
    for option, col in (_AGG_OPTIONS if agg else _DISAGG_OPTIONS):
        value = row.get(col) if hasattr(row, "get") else None
        if not moe and "moe" in option:
            continue
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        value = int(value)
        if value != 1 or option.endswith(("-batch", "--batch")):
            args += [option, str(value)]
    used, given = row.get("gpus_used") if hasattr(row, "get") else None, opts.get("gpus")
    if used is not None and given is not None and not (isinstance(used, float) and math.isnan(used)) \
            and int(used) < int(given):
        # the workers sit whole in the NVLink domains of the GPUs given, not always in their own
        args += ["--gpus", str(int(given))]
    return " ".join(shlex.quote(a) for a in args)


def _plan_without_drafting(ctx, gpus, opts, ttft_ms, tpot_ms, search, max_batch, no_pp, rank_by):
    """The same ``plan_serving`` search with ``--speculative-tokens 0`` (raises ``InputError``
    when nothing meets the objective)."""
    from dataclasses import replace

    from planners.serving import plan_serving
    return plan_serving(replace(ctx, speculative_tokens=0, draft_head=None), gpus, opts["isl"], opts["osl"],
                        ttft_ms, tpot_ms, modes=search, max_batch=max_batch, allow_pp=not no_pp, rank_by=rank_by)


def _without_drafting(plan, ctx, gpus, opts, ttft_ms, tpot_ms, search, max_batch, no_pp, rank_by) -> dict:
    """``{"best": the best row without speculative decoding (or None), "line": a sentence}``:
    the same search with ``--speculative-tokens 0``, compared by the plan's ranking."""
    from planners.serving.search import describe, ranking_key
    from dataclasses import replace
    try:
        other = _plan_without_drafting(ctx, gpus, opts, ttft_ms, tpot_ms, search, max_batch, no_pp, rank_by)
    except InputError:
        return {"best": None, "line": "without drafting (--speculative-tokens 0) no layout meets the objective: "
                                      "the drafts are what meets it"}
    # compared as the plan's best is: the best the engine can launch
    from paraplan.serving_launchable import engine_best
    other = engine_best(other, replace(ctx, speculative_tokens=0, draft_head=None),
                        launch_request({**opts, "rank_by": rank_by}), ttft_ms, tpot_ms, gpus, search)

    def key(row) -> float:
        return float(ranking_key(row, rank_by))
    what = "tokens/s" if rank_by == "total" else "tokens/s/GPU"
    gain = key(plan.best) / key(other.best) - 1.0
    b = other.best
    best = {"mode": b["mode"], "deployment": describe(b), "ttft_ms": float(b["ttft_ms"]), "tpot_ms": float(b["tpot_ms"]),
            "tokens_per_s_per_gpu": float(b["tokens_per_s_per_gpu"]), "gpus_used": int(b["gpus_used"])}
    verdict = (f"the drafts gain {100 * gain:.1f}%" if gain >= 0 else
               f"the drafts cost {-100 * gain:.1f}%: serve without them (--speculative-tokens 0)")
    return {"best": best, "line": f"without drafting (--speculative-tokens 0) the best is {describe(b)} at "
                                  f"{key(b):,.0f} {what}: {verdict}"}


def _refused_json(refused, opts: dict, gpus: int, moe: bool) -> dict | None:
    """``serve plan --json``'s ``engine_refused_best``: ``serving_launchable.refused_fields`` with
    the row's degrees as whole numbers (as ``best`` gives them) and the ``serve simulate`` command
    that prices it again (the engine refuses to launch it, the simulator does not), so the
    winner the engine refuses can be re-run from the JSON alone; None where there is none."""
    from paraplan.serving_launchable import refused_fields
    fields = refused_fields(refused)
    if fields is None:
        return None
    row = refused.row
    return {**_records(row.to_frame().T, moe)[0], **fields,
            "simulate_command": simulate_command(row, {**opts, "gpus": gpus}, moe=moe)}


def launch_request(opts: dict):
    """The ``LaunchRequest`` of a command's options (``--isl``, ``--osl``, ``--kv-cache-dtype``,
    ``--rank-by``): what ``paraplan.serving_launchable`` launches a plan's rows with."""
    from paraplan.serving_launchable import LaunchRequest
    return LaunchRequest(isl=opts["isl"], osl=opts["osl"], kv_cache_dtype=opts.get("kv_cache_dtype") or "auto",
                         rank_by=opts.get("rank_by") or "per-gpu")


def runnable_launch(plan, ctx, opts: dict):
    """(``ServingLaunch``, note): the best candidate meeting the SLO that the backend can launch
    as priced (``launchable_best``), and a note saying whether it is the winner, else its rank
    and how many tokens/s/GPU it gives up and why the winner cannot run."""
    from paraplan.serving_launchable import launchable_best, no_launch_error
    from planners.serving.search import ranking_key
    rank_by = opts.get("rank_by", "per-gpu")
    row, launch, rank, meeting, first_err = launchable_best(plan, ctx, launch_request(opts))
    if row is not None:
        if rank == 0:
            return launch, f"the winner runs in {ctx.stack.framework} as priced"
        loss = 1.0 - float(row["_score"]) / float(ranking_key(plan.best, rank_by))
        return launch, (f"best layout {ctx.stack.framework} can launch: rank {rank + 1} of {meeting} meeting the "
                        f"SLO, {100 * loss:.1f}% fewer tokens/s{'' if rank_by == 'total' else '/GPU'} than the "
                        f"winner ({first_err.field}: "
                        f"{first_err.message})")
    raise no_launch_error(ctx.stack.framework, meeting, first_err)


def render_plan(plan, ctx, gpus: int, ttft_ms: float, tpot_ms: float, top: int, opts: dict | None = None,
                unlaunchable: InputError | None = None) -> str:
    """The serve plan table; ``plan.engine_refused_best`` (``serving_launchable.engine_best``): the
    search's winner the engine cannot launch, said beside the best it can; ``unlaunchable``
    (``serving_launchable.engine_plan``): where no layout meeting the SLO launches, the error
    ``--emit`` raises, said in the headline in place of a launch --emit cannot give."""
    from planners.serving.labels import prompts_per_step
    from planners.serving.search import compared, describe
    b, refused = plan.best, plan.engine_refused_best
    lines = [f"serving plan for {ctx.model.name} on {gpus} x {ctx.cluster.gpu.name} ({ctx.cluster.name}), "
             f"stack {ctx.stack.name}, weights {format_text(ctx.dense_format, ctx.cluster.gpu)}"
             + (f" / experts {format_text(ctx.expert_format, ctx.cluster.gpu)}" if ctx.model.moe else "")
             + f", {kv_text(ctx)}",
             f"objective: mean TTFT <= {ttft_ms:g} ms, mean TPOT <= {tpot_ms:g} ms (p90 TTFT: the best line, --csv, --json); "
             f"{plan.evaluated:,} candidates scored in "
             f"{plan.wall_s:.2f} s" + _prior_note(ctx) + _extrapolation_note(ctx, int((opts or {}).get("isl") or 0)), ""]
    modes = sorted(set(plan.candidates["mode"])) if len(plan.candidates) else []
    accuracy = [a for a in (accuracy_line(ctx, m) for m in modes) if a]
    lines[2:2] = accuracy
    if ctx.speculative_tokens:
        kept = ctx.tokens_per_step_at(int((opts or {}).get("osl") or 2))
        lines.insert(2, f"decode: speculative, {ctx.drafter} drafts {ctx.speculative_tokens} token{'s' if ctx.speculative_tokens > 1 else ''} a step, acceptance "
                        f"{ctx.draft_acceptance:.10g}{_acceptance_note(ctx)}: {kept:.2f} tokens a step")
    head = "best:" if refused is None else f"best {ctx.stack.framework} can launch:"
    if b["mode"] == "agg":
        lines.append(f"{head} aggregated, {int(b['workers'])} x worker {b['layout']}, batch {int(b['batch'])} per rank "
                     f"({_requests(b['concurrency'])} in flight on {_gpus(b['gpus_used'])})")
    else:
        lines.append(f"{head} disaggregated, {int(b['prefill_workers'])} x prefill {b['prefill_layout']} "
                     f"({prompts_per_step(b['prefill_batch'])}) + {int(b['decode_workers'])} x decode "
                     f"{b['decode_layout']} (batch {int(b['batch'])} per rank; {_requests(b['concurrency'])} in flight "
                     f"on {_gpus(b['gpus_used'])})")
    # each number resting on an unfitted prior carries the mark, as training's tables do; the
    # legend under the front says what it means
    star = serving_priors.mark(ctx)
    lines.append(f"      TTFT {b['ttft_ms']:.0f} ms{star} (p90 {b['ttft_p90_ms']:.0f}{star}), TPOT {b['tpot_ms']:.1f} ms{star}, "
                 f"{b['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU{star}, {b['tokens_per_s_per_user']:.1f} tokens/s/user{star}")
    if opts is not None:
        lines.append(f"      as one deployment: {simulate_command(b, {**opts, 'gpus': gpus}, moe=ctx.model.moe is not None)}")
        from paraplan.serving_launchable import launch_refusal
        # one wording with ServingPlan.launch_refusal and --json's launch_refusal
        why_not = launch_refusal(b, ctx, launch_request(opts), unlaunchable)
        if why_not is None:
            lines.append(f"      its {ctx.stack.framework} launch script: add --emit (to this plan or to that command)")
        else:
            lines.append(f"      {why_not}")
    if refused is not None:
        r = refused.row
        # "1.58x more than this one", "0.1% more ...", never "1.00x" of two different rates
        more = compared(float(r["tokens_per_s_per_gpu"]) / float(b["tokens_per_s_per_gpu"]))
        more = "about the same as this one" if more == "about the same" else f"{more} than this one"
        lines.append(f"      the model's best, which {ctx.stack.framework} cannot launch as priced "
                     f"({refused.refusal}): {describe(r)}, TTFT {r['ttft_ms']:.0f} ms{star}, TPOT {r['tpot_ms']:.1f} ms{star}, "
                     f"{r['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU{star} ({more}) on {_gpus(r['gpus_used'])}")
    lines += plan.why
    front = plan.front
    lines += ["", f"Pareto front (tokens/s/GPU vs tokens/s/user, TTFT <= {ttft_ms:g} ms), per mode"]
    rows = []
    whole = front.sort_values(["mode", "tokens_per_s_per_user"])
    # the first rows of each mode, so a long aggregated front does not hide the other
    ordered = whole.groupby("mode", sort=False, group_keys=False).head(top) if top else whole
    for r in ordered.to_dict("records"):
        lay = r["layout"] if r["mode"] == "agg" else f"P {r['prefill_layout']} x{int(r['prefill_workers'])} / D {r['decode_layout']} x{int(r['decode_workers'])}"
        # a disaggregated row is only determined with its prefill batch (serve simulate --prefill-batch)
        prefill_batch = "-" if r["mode"] == "agg" else int(r["prefill_batch"])
        rows.append([r["mode"], lay, int(r["batch"]), prefill_batch, int(r["gpus_used"]), f"{r['ttft_ms']:.0f}{star}",
                     f"{r['tpot_ms']:.1f}{star}", f"{r['tokens_per_s_per_gpu']:,.0f}{star}",
                     f"{r['tokens_per_s_per_user']:.1f}{star}", "yes" if r["meets_slo"] else "no"])
    lines.append(format_table(rows, ["mode", "layout", "batch", "prefill_batch", "gpus_used", "ttft_ms", "tpot_ms",
                                     "tokens_per_s_per_gpu", "tokens_per_s_per_user", "meets_slo"], align="llrrrrrrrl",
                              indent="  ").rstrip())
    # --top cuts each mode's front at its most interactive end: say so, or the table reads as the
    # whole front (DeepSeek-R1 on 64 B200 printed 40 of 56 disaggregated rows, up to 93.9 of 131.3
    # tokens/s/user, where --csv and --json hold all 70)
    left = []
    for mode, rest in whole.groupby("mode", sort=False):
        if top and len(rest) > top:
            cut = rest["tokens_per_s_per_user"].iloc[top:]
            left.append(f"{len(cut)} {mode} row{'' if len(cut) == 1 else 's'} from {cut.min():.1f} to "
                        f"{cut.max():.1f} tokens/s/user")
    if left:
        lines.append(f"  (--top {top} rows of each mode; left out: {', '.join(left)}; --top 0 prints them, "
                     "--csv and --json hold every row)")
    if star:
        lines.append(serving_priors.legend(ctx))
    return "\n".join(lines) + "\n"


@command.command("plan", short_help="Best serving layout under a TTFT / TPOT objective, and the Pareto front.")
@_common
@click.option("--gpus", "-n", type=POS, required=True, help="GPUs available.")
@click.option("--ttft-ms", type=click.FloatRange(min=0, min_open=True), default=1000.0, show_default=True,
              help="Mean time-to-first-token objective, ms (the mean; each layout's p90 is in --csv / --json).")
@click.option("--tpot-ms", type=click.FloatRange(min=0, min_open=True), default=50.0, show_default=True,
              help="Mean time-per-output-token objective, ms.")
@click.option("--mode", "modes", type=click.Choice(["agg", "disagg", "both"]), default="both", show_default=True,
              help="Which deployments to search.")
@click.option("--max-batch", type=click.IntRange(1, 2**24), default=1024, show_default=True, help="Largest per-rank batch (requests in flight) tried: powers of two, the most each layout's KV cache holds, and each aggregated layout's largest meeting the SLO. A disaggregated prefill worker's prompts per step (1, 2, 4, 8) are searched apart from it.")
@click.option("--no-pp", is_flag=True, help="Do not try pipeline parallelism.")
@click.option("--rank-by", type=click.Choice(["per-gpu", "total"]), default="per-gpu", show_default=True,
              help="What the winner maximises among layouts meeting the SLO: output tokens/s per GPU the deployment "
                   "uses (per-gpu), or tokens/s in all on the GPUs given (total: a layout that leaves GPUs idle "
                   "earns nothing on them).")
@click.option("--top", type=click.IntRange(min=0), default=40, show_default=True,
              help="Front rows printed per mode (0 = all).")
@click.option("--json", "as_json", is_flag=True,
              help="The request, best row, why, and the front as JSON (a dense model's expert_format and "
                   "*moe_tp / *moe_ep null).")
@click.option("--csv", "as_csv", is_flag=True,
              help="The front as CSV (the same columns for every model; a dense one's *moe_tp / *moe_ep empty).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), help="Write the output here (atomically) instead of stdout.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Draw the Pareto front to this PNG/SVG/PDF.")
@click.option("--emit", is_flag=True,
              help="Print the launch script of the best layout the backend can run (bash: vllm serve, "
                   "sglang.launch_server or trtllm-serve with the settings priced, and the benchmark that measures "
                   "it) instead of the table; stderr says if it is not the winner.")
def plan_cmd(gpus: int, ttft_ms: float, tpot_ms: float, modes: str, max_batch: int, no_pp: bool, rank_by: str, top: int,
             as_json: bool, as_csv: bool, out_path: str | None, plot_path: str | None, emit: bool, **opts) -> None:
    """Which layout serves MODEL on GPUS GPUs of SYSTEM with the most output tokens/s per GPU while
    mean TTFT <= TTFT_MS and TPOT <= TPOT_MS?

    Searches aggregated workers (tensor / pipeline / attention-data / expert parallelism, batch)
    and disaggregated prefill + decode pools (their layouts, batches and worker counts). Prints
    the winner, why it wins over the best of the other mode and what binds, and the Pareto front
    of tokens/s/GPU against tokens/s/user among layouts meeting the TTFT objective.

    A layout reads tpT[-ppP][-adpA][-etpExepX]: attention tensor parallelism T, pipeline stages
    P, attention data-parallel ranks A and, for MoE models, how the experts are split over the
    worker's T x A GPUs: expert tensor parallelism E x expert parallelism X (E x X = T x A).
    `serve simulate` takes it as --tp T --pp P --adp A --moe-tp E --moe-ep X; the table's best
    row is printed as that command ("as one deployment: ...").

    \b
    Examples:
      paraplan serve plan -m deepseek-r1 -s hgx-h200 -n 64 --isl 1024 --osl 1024 --ttft-ms 1000 --tpot-ms 30
      paraplan serve plan -m llama3.1-70b -s dgx-b200 -n 8 --precision nvfp4 --csv --out front.csv --plot front.png
      paraplan serve plan -m deepseek-r1 -s dgx-b200 -n 64 --tpot-ms 30 --precision fp8_block -b sglang \\
          --emit --out launch.sh      # then on each host: HOSTS="h0 h1 ..." HOST_INDEX=i bash launch.sh
    """
    from planners.serving import plan_serving

    if as_json and as_csv:
        raise InputError("--json", "give --json or --csv, not both", "drop one of the two")
    if emit and (as_json or as_csv):
        raise InputError("--emit", f"prints the launch script instead of the table, so {'--json' if as_json else '--csv'} "
                         "would print nothing", "run them as two commands")
    check_distinct_paths({"--out": out_path, "--plot": plot_path})
    if out_path is not None:
        check_writable(out_path, "--out")
    if plot_path is not None:
        check_image_path(plot_path, "--plot")      # matplotlib picks the format by the suffix
    ctx = _context(opts)
    moe = ctx.model.moe is not None     # a dense model's expert fields are null in --json, empty in --csv
    search = ("agg", "disagg") if modes == "both" else (modes,)
    # a bar once the search runs past PROGRESS_AFTER_S (DeepSeek-R1 on 64 B200: 2-4 s on two shared
    # cores, 4,096 GPUs ~24 s), and only on a terminal, as plan's
    with lazy_bar(f"searching layouts for {gpus:,} GPUs", PROGRESS_AFTER_S) as bar:
        try:
            from paraplan.serving_launchable import layout_launchable
            plan = plan_serving(ctx, gpus, opts["isl"], opts["osl"], ttft_ms, tpot_ms, modes=search,
                                max_batch=max_batch, allow_pp=not no_pp, rank_by=rank_by,
                                progress=bar,
                                # "add GPUs" names a count whose layouts the engine launches
                                launchable=layout_launchable(ctx, launch_request(opts)))
        except InputError as exc:
            if not ctx.speculative_tokens:
                raise
            # the drafts may be what misses the objective (a low acceptance): say so
            from planners.serving.search import describe
            try:
                plain = _plan_without_drafting(ctx, gpus, opts, ttft_ms, tpot_ms, search, max_batch, no_pp, rank_by)
            except InputError:
                raise exc from None
            raise InputError(exc.field, exc.message, f"{exc.fix}; or serve without drafting (--speculative-tokens 0): "
                             f"{describe(plain.best)} meets it at {plain.best['tokens_per_s_per_gpu']:,.0f} "
                             "tokens/s/GPU") from None
    opts["rank_by"] = rank_by
    unlaunchable = None
    if not emit:
        # the headline is the best layout the engine can launch as priced (vLLM has no router for
        # disaggregated workers); a better winner it cannot launch is said beside it. --emit
        # picks the same layout and says what it gives up (runnable_launch)
        from paraplan.serving_launchable import engine_plan
        plan, unlaunchable = engine_plan(plan, ctx, launch_request(opts), ttft_ms, tpot_ms, gpus, search)
    without = None
    if ctx.speculative_tokens and not emit:
        # drafting can cost more than it yields (a compute-bound step at high concurrency): the
        # same search without it, for comparison (the plan itself keeps what was asked)
        without = _without_drafting(plan, ctx, gpus, opts, ttft_ms, tpot_ms, search, max_batch, no_pp, rank_by)
        plan.why.append(without["line"])
    if emit:
        from paraplan.exports.serving import emit_launch
        launch, note = runnable_launch(plan, ctx, opts)
        click.echo(f"paraplan: {note}", err=True)
        if launch.priced_release_note:
            click.echo(f"note: {launch.priced_release_note}", err=True)
        text = emit_launch(launch, title=f"paraplan serve plan --emit: {note}; {gpus} GPUs, TTFT <= {ttft_ms:g} ms, "
                                         f"TPOT <= {tpot_ms:g} ms")
    elif as_json:
        from paraplan.serving_launchable import refused_fields
        best = {k: plan.best[k] for k in plan.best.index if k in _PLAN_COLUMNS or "_" in k}
        best.update(_records(plan.best.to_frame().T, moe)[0])     # with every degree, as whole numbers
        if best.get("max_batch_per_rank") is not None:      # a count of requests, as serve simulate --json
            best["max_batch_per_rank"] = int(best["max_batch_per_rank"])
        # what was asked, as `plan --json` echoes its request: a saved answer says what it answers
        request = {"model": ctx.model.name, "system": ctx.cluster.name, "gpu": ctx.cluster.gpu.name, "gpus": gpus,
                   "isl": opts["isl"], "osl": opts["osl"], "ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "modes": list(search),
                   "max_batch": max_batch, "pipeline_parallel": not no_pp, "rank_by": rank_by, "stack": ctx.stack.name,
                   "dense_format": ctx.dense_format, "expert_format": ctx.expert_format if moe else None,
                   "kv_cache_dtype": opts["kv_cache_dtype"], **ctx.draft_fields(),
                   "tokens_per_step": ctx.tokens_per_step_at(opts["osl"])}
        text = dump_json({"request": request, "best": best, "why": plan.why, "front": _records(plan.front, moe),
                          "evaluated": plan.evaluated, "efficiency_fitted": not ctx.efficiency.prior,
                          # the KV cache priced (``auto`` resolved by the stack and the checkpoint), as
                          # serve simulate --json gives it; the request echoes what was asked
                          "kv_bytes_per_element": ctx.kv_bytes,
                          # how far the fitted model was off on measured runs of this engine, per mode
                          "validation_error": {m: ctx.validation_error(m) for m in search},
                          "without_drafting": None if without is None else without["best"],
                          # the search's winner the engine cannot launch as priced (null where it can)
                          "engine_refused_best": _refused_json(plan.engine_refused_best, opts, gpus, moe),
                          # why the engine cannot launch best as priced (null where it can), as
                          # the text's line under the headline
                          "launch_refusal": plan.launch_refusal})
    elif as_csv:
        buf = io.StringIO()
        rows = _plan_rows(plan.front, moe)
        # as the training CSVs: whether the numbers rest on fitted factors or on the prior
        # a speculative plan's rows rest on its drafts and their acceptance too
        for k, v in serving_priors.label_columns(ctx).items():
            rows[k] = v
        rows.to_csv(buf, index=False)
        text = buf.getvalue()
    else:
        text = render_plan(plan, ctx, gpus, ttft_ms, tpot_ms, top, opts, unlaunchable)
    if plot_path is not None:
        from paraplan.serving_plots import serving_pareto
        title = f"{ctx.model.name} on {gpus} x {ctx.cluster.gpu.name}, isl {opts['isl']} / osl {opts['osl']}, TTFT <= {ttft_ms:g} ms"
        atomic_output_path(plot_path, lambda tmp: serving_pareto(plan.front, tmp, tpot_ms=tpot_ms, title=title,
                                                                    note="\n".join(serving_priors.notes(ctx))), "--plot")
    _say_release_note(opts, ctx)
    if out_path is not None:
        write_atomic(out_path, text)
        click.echo(f"wrote {out_path}", err=True)
    else:
        click.echo(text, nl=False)
    if plot_path is not None:
        click.echo(f"wrote {plot_path}", err=True)
