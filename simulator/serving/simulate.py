"""One serving deployment -> a ``ServingReport`` (the single-row call of the shared evaluation)."""
from __future__ import annotations

from pathlib import Path

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from cost_models.params import serving_tp_splits_kv_heads
from cost_models.weight_formats import scale_block, slice_holds_whole_blocks

from hardware_specs.errors import InputError
from simulator.serving.context import ServingContext
from simulator.serving.deployment import Deployment, WorkerLayout, placement_error, refuse_too_many_gpus
from simulator.serving.aggregated import memory_columns, no_room_reason
from simulator.serving.disaggregated import largest_prefill_batch
from simulator.serving.evaluate import evaluate_agg_columns, evaluate_disagg_columns

#: decode-step parts, in the order reports list them
DECODE_PARTS = ("decode_attention_s", "decode_mlp_s", "decode_elementwise_s", "decode_lm_head_s", "decode_comm_s",
                "decode_kernel_fixed_s", "decode_host_s", "decode_draft_s")
MEMORY_PARTS = ("weights_bytes", "activations_bytes", "reserved_bytes", "kv_pool_bytes")


@dataclass(frozen=True)
class ServingReport:
    """What ``simulate_serving`` predicts for one deployment (SI units: seconds, bytes).

    Attributes:
        deployment: the input.
        context: model, system, stack and efficiency used.
        metrics: ttft_s, ttft_p90_s, tpot_s, latency_s, tokens_per_s_per_gpu,
            tokens_per_s_per_user, max_batch_per_rank (largest concurrency per attention-DP rank
            whose KV cache fits), fits.
        decode_breakdown_s: the decode step by part (``DECODE_PARTS``).
        memory_bytes: per GPU of the (decode) worker: weights, activations, reserve, KV pool.
        extra: mode-specific quantities (prefill share, KV transfer, prefill utilisation, ...).
    """

    deployment: Deployment
    context: ServingContext
    metrics: Mapping[str, float]
    decode_breakdown_s: Mapping[str, float]
    memory_bytes: Mapping[str, float]
    extra: Mapping[str, float] = field(default_factory=dict)

    @property
    def prior(self) -> bool:
        """Whether the efficiency behind the numbers is an unfitted prior."""
        return self.context.efficiency.prior

    def as_dict(self) -> dict[str, Any]:
        """The report as one mapping (SI units). A dense model has no routed experts, so its
        expert fields (``expert_format``, each layout's ``moe_tp`` / ``moe_ep``) are None: the
        keys stay, so dense and MoE reports share one shape, but no value pretends to a split."""
        d = self.deployment
        moe = self.context.model.moe is not None
        layouts = {}
        for name in ("layout", "prefill", "decode"):
            lay = getattr(d, name)
            if lay is not None:
                layouts[name] = {k: getattr(lay, k) if moe or not k.startswith("moe_") else None
                                 for k in ("tp", "pp", "adp", "moe_tp", "moe_ep", "batch")}
        return {
            "model": self.context.model.name, "system": self.context.cluster.name, "stack": self.context.stack.name,
            "gpu": self.context.cluster.gpu.name, "mode": d.mode, "isl": d.isl, "osl": d.osl,
            "dense_format": self.context.dense_format, "expert_format": self.context.expert_format if moe else None,
            "kv_bytes_per_element": self.context.kv_bytes, "gpus": d.gpus, "concurrency": d.concurrency,
            **self.context.draft_fields(),
            "tokens_per_step": self.context.tokens_per_step_at(d.osl),
            "workers": d.workers if d.mode == "agg" else None,
            "prefill_workers": d.prefill_workers if d.mode == "disagg" else None,
            "decode_workers": d.decode_workers if d.mode == "disagg" else None,
            **layouts, **dict(self.metrics), "decode_breakdown_s": dict(self.decode_breakdown_s),
            "memory_bytes": dict(self.memory_bytes), **dict(self.extra),
            # named as the training JSON names it (``paraplan.priors``): False where the times rest on
            # an unfitted prior (a written prior or hardware_specs/serving_efficiency/default.yaml)
            "efficiency_generation": self.context.efficiency.generation, "efficiency_fitted": not self.prior,
            # a prompt longer than any fitted: the TTFT extrapolates the fitted prefill rates
            "ttft_extrapolated": bool(self.context.efficiency.fitted_isl_max_tokens
                                      and d.isl > self.context.efficiency.fitted_isl_max_tokens),
            # how far the fitted model was off on measured runs of this engine and mode on this
            # generation (in-sample mean |error|, percent; None where none was fitted)
            "validation_error": self.context.validation_error(self.deployment.mode),
        }


def _check_layout(ctx: ServingContext, lay: WorkerLayout, prefix: str) -> None:
    model = ctx.model
    if model.num_heads % lay.tp:
        divisors = [t for t in range(1, model.num_heads + 1) if model.num_heads % t == 0 and t <= 64]
        raise InputError(f"--{prefix}tp", f"{lay.tp} does not divide the {model.num_heads} attention heads of {model.name}",
                         "use one of " + ", ".join(map(str, divisors)))
    if not serving_tp_splits_kv_heads(model, lay.tp):
        g = model.num_kv_heads
        ok = [t for t in range(1, min(model.num_heads, 64) + 1) if model.num_heads % t == 0
              and serving_tp_splits_kv_heads(model, t)]
        raise InputError(f"--{prefix}tp", f"{lay.tp} neither divides nor is a multiple of the {g} key/value heads of "
                         f"{model.name} (the engines' QKV projection splits whole K/V heads or replicates them)",
                         "use one of " + ", ".join(map(str, ok)))
    if lay.pp > model.num_layers:
        raise InputError(f"--{prefix}pp", f"{lay.pp} stages for {model.num_layers} layers", f"use at most {model.num_layers}")
    if model.moe is None:
        if (lay.moe_tp, lay.moe_ep) not in ((1, 1), (lay.tp * lay.adp, 1)):
            raise InputError(f"--{prefix}moe-ep", f"{model.name} has no experts", "drop --moe-tp / --moe-ep")
        if lay.adp > 1:
            raise InputError(f"--{prefix}adp", f"attention data parallelism needs a mixture-of-experts model; "
                             f"{model.name} is dense", "use more workers (--workers) instead")
        return
    if lay.moe_tp * lay.moe_ep != lay.tp * lay.adp:
        raise InputError(f"--{prefix}moe-ep", f"moe_tp x moe_ep = {lay.moe_tp * lay.moe_ep} must equal tp x adp = "
                         f"{lay.tp * lay.adp} (the expert group spans the worker)",
                         f"e.g. --{prefix}moe-tp 1 --{prefix}moe-ep {lay.tp * lay.adp}")
    beh = ctx.behaviour
    if not beh.runs_attention_split(lay.tp, lay.adp):
        raise InputError(f"--{prefix}adp", f"{ctx.stack.name} runs attention tensor-parallel or data-parallel over the "
                         f"whole worker, an attention-DP rank one GPU; tp {lay.tp} x adp {lay.adp} is not a layout it has "
                         "(stack input attention_dp_with_tp: false)",
                         f"use --{prefix}tp {lay.tp * lay.adp} --{prefix}adp 1, or --{prefix}tp 1 --{prefix}adp "
                         f"{lay.tp * lay.adp}, or --backend vllm / sglang")
    if not beh.runs_expert_split(lay.moe_tp, lay.moe_ep):
        group = lay.tp * lay.adp
        raise InputError(f"--{prefix}moe-ep", f"{ctx.stack.name} does not run the experts as etp{lay.moe_tp} x "
                         f"ep{lay.moe_ep}: it runs {beh.expert_splits_text(group)} over a worker's tp x adp = "
                         f"{group} GPUs (stack input expert_splits: {beh.expert_splits})",
                         f"use --{prefix}moe-ep {group} or --{prefix}moe-tp {group}, or --backend sglang / trtllm")
    if model.moe.num_experts % lay.moe_ep:
        raise InputError(f"--{prefix}moe-ep", f"{lay.moe_ep} does not divide the {model.moe.num_experts} experts",
                         "use a divisor of the expert count")
    if model.moe.expert_ffn_hidden_size % lay.moe_tp:
        raise InputError(f"--{prefix}moe-tp", f"{lay.moe_tp} does not divide the expert width "
                         f"{model.moe.expert_ffn_hidden_size}", "use more expert parallelism instead")
    width = model.moe.expert_ffn_hidden_size
    if not slice_holds_whole_blocks(width, lay.moe_tp, ctx.expert_format):
        block = scale_block(ctx.expert_format)
        raise InputError(f"--{prefix}moe-tp", f"expert tensor parallelism {lay.moe_tp} leaves {width // lay.moe_tp} of the "
                         f"expert width {width} per GPU, not a whole number of {ctx.expert_format}'s {block}-wide scale "
                         "blocks (the engines refuse to shard them)",
                         f"use more expert parallelism (--{prefix}moe-ep) and less --{prefix}moe-tp, or another "
                         "--expert-precision")


def _cols(lay: WorkerLayout) -> dict[str, np.ndarray]:
    return {k: np.array([float(getattr(lay, k))]) for k in ("tp", "pp", "adp", "moe_tp", "moe_ep", "batch")}


def _refuse_prefill_batch(ctx: ServingContext, dep: Deployment) -> None:
    """The ``InputError`` of a prefill batch that does not fit its rank: the weights alone leave no
    KV pool, or not one prompt fits, or at most k do, each k counted with its own step's
    activation workspace (``largest_prefill_batch``; the count had been taken with the workspace
    of the batch refused: 'at most 0' for 1,000 prompts on a tp4 worker that runs 300)."""
    lay = dep.prefill
    c = _cols(lay)
    cols = [c[k] for k in ("tp", "adp", "pp", "moe_tp", "moe_ep")]
    bare = memory_columns(ctx, *cols, float(dep.isl), 1.0, token_budget=0.0)      # no activations
    if bare["kv_pool_bytes"][0] <= 0:
        weights = float(bare["weights_bytes"][0])
        raise InputError("--prefill-tp", f"the weights ({weights / 2**30:.1f} GiB per GPU) leave no room for a KV cache "
                         f"on {ctx.cluster.gpu.name}", "raise --prefill-tp / --prefill-pp, or use a smaller weight format")
    most = largest_prefill_batch(ctx, *cols, float(dep.isl), lay.batch - 1)
    prompts = f"{lay.batch} prompt{'' if lay.batch == 1 else 's'} of {dep.isl} tokens"
    if most < 1:
        raise InputError("--prefill-batch", f"not even one prompt of {dep.isl} tokens fits a prefill rank beside the "
                         "weights and its step's activations", "shorten --isl, or raise --prefill-tp")
    raise InputError("--prefill-batch", f"{prompts} do not fit a prefill rank beside the weights and their step's "
                     f"activations (at most {most})", f"use --prefill-batch {most} or less, or raise --prefill-tp")


def _check_placement(ctx: ServingContext, dep: Deployment) -> None:
    """Refuse workers that do not sit whole in the cluster's NVLink domains (``placement_error``):
    they are priced as if they did."""
    if (split := placement_error(dep, ctx.cluster.gpus_per_node, ctx.cluster.name)) is not None:
        raise split


def simulate_serving(dep: Deployment, ctx: ServingContext | None = None, require_fit: bool = True) -> ServingReport:
    """Predict one deployment. With ``require_fit`` a batch whose KV cache does not fit is an
    ``InputError`` saying how many fit and what would make more fit."""
    ctx = ctx or ServingContext.build(dep.model, dep.system, dep.backend, dep.dense_format, dep.expert_format,
                                      dep.kv_cache_dtype, speculative_tokens=dep.speculative_tokens,
                                      draft_acceptance=dep.draft_acceptance, draft_head=dep.draft_model)
    for name in ("speculative_tokens", "draft_acceptance"):      # a given context must price what the deployment says
        said = getattr(dep, name)
        if said is not None and said != getattr(ctx, name):
            raise InputError(name, f"the deployment says {said!r}, the context was built with {getattr(ctx, name)!r}",
                             "build the context with the deployment's speculative settings, or pass no context")
    if (dep.draft_model is None) != (ctx.draft_head is None) or (
            dep.draft_model is not None and Path(dep.draft_model).resolve() not in
            (Path(ctx.draft_head.path).resolve(), (Path(ctx.draft_head.path) / "config.json").resolve())):
        raise InputError("draft_model", f"the deployment says {dep.draft_model!r}, the context was built with "
                         f"{ctx.draft_head.path if ctx.draft_head else None!r}",
                         "build the context with the deployment's draft head, or pass no context")
    ctx.check_request(dep.isl, dep.osl)
    gpus_domain = ctx.cluster.max_gpus
    if gpus_domain is not None and dep.gpus > gpus_domain:
        refuse_too_many_gpus(dep, gpus_domain, f"the {gpus_domain:,} GPUs of {ctx.cluster.name}")
    if dep.mode == "agg":
        _check_layout(ctx, dep.layout, "")
        _check_placement(ctx, dep)
        cols = _cols(dep.layout)
        cols.update(isl=np.array([float(dep.isl)]), osl=np.array([float(dep.osl)]))
        out = evaluate_agg_columns(ctx, cols)
        batch_lay, field_name = dep.layout, "--batch"
        extra_keys = ("prefill_work_s", "prefill_share_fraction", "join_s", "prefill_own_s", "wait_behind_s",
                      "queue_wait_s")
    else:
        _check_layout(ctx, dep.prefill, "prefill-")
        _check_layout(ctx, dep.decode, "decode-")
        _check_placement(ctx, dep)
        cols = {f"prefill_{k}": v for k, v in _cols(dep.prefill).items()}
        cols.update({f"decode_{k}": v for k, v in _cols(dep.decode).items()})
        cols.update(prefill_workers=np.array([float(dep.prefill_workers)]),
                    decode_workers=np.array([float(dep.decode_workers)]),
                    isl=np.array([float(dep.isl)]), osl=np.array([float(dep.osl)]))
        out = evaluate_disagg_columns(ctx, cols)
        batch_lay, field_name = dep.decode, "--decode-batch"
        extra_keys = ("prefill_own_s", "prefill_step_s", "kv_transfer_s", "prefill_utilization_fraction",
                      "queue_wait_s", "request_host_s")
        if out["prefill_max_batch_per_rank"][0] < dep.prefill.batch:
            _refuse_prefill_batch(ctx, dep)
    n_fit = float(out["max_batch_per_rank"][0])
    if require_fit and (out["kv_pool_bytes"][0] <= 0 or batch_lay.batch > n_fit):
        no_room = no_room_reason(out, 0, ctx.cluster.gpu.name)
        if out["kv_pool_bytes"][0] <= 0:
            raise InputError(field_name.replace("batch", "tp"), no_room, "raise tp / pp / moe-ep, or use a smaller weight format")
        # the KV one request holds as the stack admits it (memory_columns: isl + osl / 2, or
        # isl + osl where the engine reserves whole requests)
        per_req = float(out["kv_bytes_per_request"][0])
        fp8_hint = ", or --kv-cache-dtype fp8" if ctx.kv_bytes > 1.0 else ""
        if n_fit < 1:
            raise InputError(field_name, no_room, f"shorten --isl/--osl, raise tp/pp{fp8_hint}")
        # the stack's cap on running requests can bind before the KV pool does (memory_columns)
        kv_fit = int(out["kv_pool_bytes"][0] // max(per_req, 1.0))
        limit = (f"so at most {int(n_fit)} fit" if kv_fit <= n_fit else
                 f"room for {kv_fit}, but {ctx.stack.name} runs at most {int(n_fit)} requests at once "
                 "(max_running_requests)")
        raise InputError(field_name, f"{batch_lay.batch} requests per rank need "
                         f"{batch_lay.batch * per_req / 2**30:.1f} GiB of KV cache per GPU; "
                         f"{out['kv_pool_bytes'][0] / 2**30:.1f} GiB is free, {limit}",
                         f"use {field_name} {max(int(n_fit), 1)} or less"
                         + (f", more tp/pp{fp8_hint}" if kv_fit <= n_fit else ", or more workers"))
    metrics = {k: float(out[k][0]) for k in ("ttft_s", "ttft_p90_s", "tpot_s", "latency_s", "tokens_per_s_per_gpu",
                                              "tokens_per_s_per_user")}
    metrics["max_batch_per_rank"] = int(n_fit)     # a count of requests (memory_columns floors it)
    metrics["fits"] = bool(out["fits"][0])
    return ServingReport(
        deployment=dep, context=ctx, metrics=metrics,
        # the drafting part only where the step drafts
        decode_breakdown_s={k: float(out[k][0]) for k in DECODE_PARTS if k != "decode_draft_s" or ctx.speculative_tokens},
        memory_bytes={k: float(out[k][0]) for k in MEMORY_PARTS},
        extra={k: float(out[k][0]) for k in extra_keys if k in out},
    )
