"""What stays fixed while layouts vary: model, system, stack, efficiency, formats, KV dtype.

``ServingContext.build`` loads the catalogs once and checks what does not depend on a layout
(the weight formats exist, the model can be served); ``check_request`` checks a request's
length against the model's context; the evaluation functions then take
numpy columns of layouts (``simulator.serving.evaluate``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from cost_models.speculative import (MAX_SPECULATIVE_TOKENS, MTP_ACCEPTANCE_PRIOR, decode_tokens_per_step,
                                     expected_tokens_per_step)
from cost_models.weight_formats import canonical_format, kv_dtype_bytes, native_compute_dtype, runs_natively
from hardware_specs.catalog import (load_cluster, load_serving_efficiency, load_stack, serving_profile_lists_tag,
                                    serving_stack_for)
from hardware_specs.yaml_files import is_file
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.errors import InputError, shown, whole_number
from hardware_specs.release_match import looks_like_release
from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.serving_efficiency import ServingEfficiency
from hardware_specs.stack_spec import StackSpec
from cost_models.kv_cache import kv_bytes_per_token_layer
from cost_models.serving_memory import draft_head_weight_bytes_per_gpu, mtp_weight_bytes_per_gpu
from model_specs.catalog import load_model
from model_specs.draft_head import DraftHead, load_draft_head
from model_specs.model_spec import ModelSpec
from simulator.serving.checkpoints import checkpoint_names_fp8_kv
from simulator.serving.deployment import check_osl


@dataclass(frozen=True)
class ServingContext:
    """The fixed inputs of a serving evaluation.

    Attributes:
        model, cluster: the model and the system.
        stack: the serving stack (framework release) whose documented behaviour applies.
        efficiency: the GPU generation's serving efficiency (fitted, or a prior).
        dense_format, expert_format: weight formats (canonical names).
        kv_bytes: bytes per KV-cache element.
        token_budget: tokens one step may process on this GPU (the stack's budget).
        kv_cache_dtype: the KV-cache dtype priced, ``auto`` resolved by the stack and checkpoint
            rules of ``build`` (``fp8``, ``bf16``, ``fp16``; ``auto`` = the 16-bit model dtype).
        speculative_tokens: tokens drafted per decode step, by the model's MTP modules or the
            ``draft_head`` (0 = no speculative decoding; ``cost_models.speculative``).
        draft_acceptance: probability a drafted token is accepted (given the ones before it were).
        acceptance_is_prior: the acceptance is ``speculative.MTP_ACCEPTANCE_PRIOR`` (unfitted),
            not a value the user measured.
        draft_head: the EAGLE-3 head that drafts (``model_specs.draft_head``), or None: the
            model's own MTP modules draft.
        backend_version: the release of the stack's framework the caller asked to price (the
            stack is its profile), or None (the stack as named, or the framework's default).
        prequantised: the caller stated that the checkpoint served stores the weight formats (a
            quantised export, never the 16-bit release quantised at load time:
            ``simulator.serving.checkpoints.served_checkpoint``).
    """

    model: ModelSpec
    cluster: ClusterSpec
    stack: StackSpec
    efficiency: ServingEfficiency
    dense_format: str
    expert_format: str
    kv_bytes: float
    token_budget: int
    kv_cache_dtype: str = "auto"
    speculative_tokens: int = 0
    draft_acceptance: float = MTP_ACCEPTANCE_PRIOR
    acceptance_is_prior: bool = True
    draft_head: DraftHead | None = None
    prequantised: bool = False
    backend_version: str | None = None

    @property
    def draft_model(self) -> str | None:
        """What drafts, for JSON / CSV: the EAGLE-3 head's folder, "mtp" for the model's own MTP
        modules, None when not speculating (the value ``--draft-model`` / ``Deployment.draft_model``
        takes back, "mtp" aside)."""
        if not self.speculative_tokens:
            return None
        return "mtp" if self.draft_head is None else self.draft_head.path

    @property
    def drafter(self) -> str:
        """What drafts, in words: "the MTP module" or "the EAGLE-3 head NAME"."""
        return "the MTP module" if self.draft_head is None else f"the EAGLE-3 head {self.draft_head.name}"

    def draft_weight_bytes(self, tp, moe_tp, moe_ep, pp=1):
        """Bytes per GPU of the drafter's weights when speculating (0 otherwise): the EAGLE-3
        head's (``serving_memory.draft_head_weight_bytes_per_gpu``; on a last pipeline stage,
        pp > 1, with its own copy of the target's embedding, which sits on the first) or the MTP
        modules' on the last stage (``serving_memory.mtp_weight_bytes_per_gpu``)."""
        if not self.speculative_tokens:
            return 0.0 * np.asarray(tp, dtype=float)
        if self.draft_head is not None:
            return draft_head_weight_bytes_per_gpu(self.draft_head, tp, pp, self.model)
        return mtp_weight_bytes_per_gpu(self.model, tp, moe_tp, moe_ep, self.dense_format, self.expert_format)

    def draft_kv_bytes_per_token(self, tp):
        """KV-cache bytes per context token the drafter keeps of its own layers (0 when not
        speculating): one full-attention layer per MTP module, or the EAGLE-3 head's layers."""
        if not self.speculative_tokens:
            return 0.0 * np.asarray(tp, dtype=float)
        if self.draft_head is not None:
            layer = self.draft_head.layer
            return kv_bytes_per_token_layer(layer, tp, self.kv_bytes) * layer.num_layers
        return kv_bytes_per_token_layer(self.model, tp, self.kv_bytes) * self.model.mtp_layers

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens a decoding request gains per step (1 without speculative decoding)."""
        return float(expected_tokens_per_step(self.speculative_tokens, self.draft_acceptance))

    def tokens_per_step_within(self, tokens_left):
        """Mean tokens a request gains per step over its decode of the ``tokens_left`` (n) tokens
        it still generates: n / E[S(n)] (``speculative.decode_tokens_per_step``: the last steps
        stop at n, so a short decode keeps fewer than min(E, n) a step; 1 without drafting).
        Numpy-friendly."""
        return decode_tokens_per_step(tokens_left, self.speculative_tokens, self.draft_acceptance)

    def tokens_per_step_at(self, osl) -> float:
        """Mean tokens a decoding request of ``osl`` output tokens keeps per step: the first comes
        from its prefill, so n = osl - 1 (at least 1) are left for the decode steps, which take
        E[S(n)] steps on average (``tokens_per_step_within``). Exact, not a bound: at k = 3,
        p = 0.85 it is 1.739 at osl 3 (min(E, n) said 2) and 3.183 at osl 1024 (E = 3.187)."""
        return float(self.tokens_per_step_within(max(float(osl) - 1.0, 1.0)))

    def draft_fields(self) -> dict:
        """What a report says of the drafting its TPOT rests on: ``speculative_tokens``, and where
        it drafts the ``draft_acceptance`` and whether that is the unfitted prior
        (``draft_acceptance_is_prior``; both None without drafts), and ``draft_model``."""
        k = self.speculative_tokens
        return {"speculative_tokens": k, "draft_acceptance": self.draft_acceptance if k else None,
                "draft_acceptance_is_prior": self.acceptance_is_prior if k else None,
                "draft_model": self.draft_model}

    def validation_error(self, mode: str) -> dict | None:
        """How far the fitted model was off on measured runs of this engine in ``mode`` (agg,
        disagg) on this GPU generation (``ServingEfficiency.validation_error_pct``): rows and
        in-sample mean |error| of TTFT and TPOT in percent, or None (a prior, or none fitted)."""
        rec = None if self.efficiency.prior else self.efficiency.validation_error(self.stack.framework, mode)
        if rec is None:
            return None
        return {"rows": int(rec["rows"]), "ttft_mean_abs_err_pct": rec["ttft"], "tpot_mean_abs_err_pct": rec["tpot"]}

    @cached_property
    def behaviour(self) -> ServingBehaviour:
        """The stack's serving behaviour on this cluster's GPU (``ServingBehaviour.on_gpu``: the
        token budget and running-request cap of its memory and name)."""
        return self.stack.serving.on_gpu(self.cluster.gpu.hbm_bytes, self.cluster.gpu.name)

    def check_request(self, isl: int, osl: int) -> None:
        """Refuse a request with fewer than 2 output tokens (no TPOT), or one longer than the
        model's context: prompt + output tokens above ``ModelSpec.max_context_tokens``
        (config.json ``max_position_embeddings``; the engines refuse such a request, vLLM with
        "This model's maximum context length is ..."); no length is refused for a model that
        does not state its context."""
        check_osl(osl)
        most = self.model.max_context_tokens
        if most and isl + osl > most:
            name = "--isl" if isl >= most else "--osl"
            raise InputError(name, f"{isl:,} prompt + {osl:,} output tokens exceed the {most:,}-token context of "
                             f"{self.model.name} (its max_context_tokens: max_position_embeddings in a config.json)",
                             f"keep --isl + --osl <= {most:,}")

    @classmethod
    def build(cls, model: str | ModelSpec, system: str | ClusterSpec, backend: str | StackSpec,
              dense_format: str | None = None, expert_format: str | None = None, kv_cache_dtype: str = "auto",
              backend_version: str | None = None, efficiency: ServingEfficiency | None = None,
              speculative_tokens: int | None = None, draft_acceptance: float | None = None,
              draft_head: DraftHead | str | None = None, prequantised: bool = False) -> "ServingContext":
        """Load and check the fixed inputs. ``backend`` is a stack name (``vllm-0.14``), a
        framework (``vllm``, ``sglang``, ``trtllm``: the profile covering ``backend_version``,
        else the newest) or a ``StackSpec``. ``speculative_tokens`` (default: the stack's, 0 in
        every engine's profile) drafts that many tokens a step with the model's MTP modules,
        each accepted with probability ``draft_acceptance`` (default: the unfitted
        ``MTP_ACCEPTANCE_PRIOR``); with ``draft_head`` (a ``DraftHead`` or the path of its
        config.json) that EAGLE-3 head drafts instead, and ``draft_acceptance`` must be given
        (no prior is published for a head's per-token acceptance). ``kv_cache_dtype`` ``auto`` is
        the stack's default, or FP8 where the stack reads the KV dtype of the checkpoint
        (``kv_dtype_from_checkpoint``) and the checkpoint served is a quantised FP8 / NVFP4 export
        (``checkpoints.checkpoint_names_fp8_kv``: the model's release storing the format, a known
        export, or ``prequantised``: the caller states so), not a 16-bit release quantised at load
        time."""
        if backend_version is not None and not looks_like_release(backend_version) and not (
                isinstance(backend, str) and isinstance(backend_version, str)
                and serving_profile_lists_tag(backend, backend_version)):
            # a release no rule places had run as the newest profile, with a note on stderr and exit 0;
            # a tag a profile lists (vllm-0.14's ``nightly``) is one it places, as `hardware stacks` shows
            raise InputError("--backend-version", f"{backend_version!r} is not a release",
                             "give one such as 0.11.0 or 1.2.0rc6 (numbers separated by dots, an optional rc / post "
                             "/ dev suffix), or leave it out for the newest profile")
        m = model if isinstance(model, ModelSpec) else load_model(model)
        if m.hybrid_pattern:
            raise InputError("model", f"{m.name} is a hybrid Mamba model: serving it is not modelled (its Mamba "
                             "layers keep a fixed-size state per request, not a KV cache)",
                             "serve a transformer model, or simulate its training with `paraplan simulate`")
        c = system if isinstance(system, ClusterSpec) else load_cluster(system)
        if isinstance(backend, StackSpec):
            stack = backend
        else:
            try:
                stack = load_stack(backend)
            except InputError:
                # a stack file's own error (a bad value, a missing file) is the one to report,
                # not "no framework named FILE"
                if Path(backend).suffix in (".yaml", ".yml") or is_file(Path(backend)):
                    raise
                stack = serving_stack_for(backend, backend_version)
        if stack.serving is None:
            raise InputError("backend", f"stack {stack.name} has no serving section",
                             "choose a serving stack: vllm, sglang or trtllm")
        vendors = stack.serving.gpu_vendors
        if vendors and c.gpu.vendor.lower() not in vendors:
            raise InputError("backend", f"{stack.name} runs on {', '.join(vendors)} GPUs, not on {c.name}'s "
                             f"{c.gpu.name} ({c.gpu.vendor or 'unknown vendor'})",
                             "choose an engine that runs there (vllm or sglang), or a system of those GPUs"
                             if c.gpu.vendor else "state the GPU file's vendor (e.g. vendor: nvidia)")
        if draft_head is not None and not isinstance(draft_head, (str, Path, DraftHead)):
            raise InputError("--draft-model", f"expected the path of an EAGLE-3 head's config.json, got "
                             f"{type(draft_head).__name__}", "give its folder or config.json as text")
        if isinstance(draft_head, str) and not draft_head.strip():     # "" is no path (not the working folder)
            raise InputError("--draft-model", "is empty", "give an EAGLE-3 head's folder or config.json")
        head = load_draft_head(draft_head) if isinstance(draft_head, (str, Path)) else draft_head
        if head is not None:
            head.check_target(m)
        k, p, prior = speculation(m, stack, speculative_tokens, draft_acceptance, head)
        dense = canonical_format(dense_format, "dense_format")
        expert = canonical_format(expert_format if expert_format is not None else dense_format, "expert_format")
        for fmt, field_name in ((dense, "precision"), (expert, "expert-precision")):
            if fmt in stack.serving.native_only_formats and not runs_natively(fmt, c.gpu):
                stored = " (the checkpoint's format)" if fmt in (m.checkpoint_format, m.expert_checkpoint_format) else ""
                raise InputError(f"--{field_name}", f"{stack.name} serves {fmt} weights{stored} only on GPUs with "
                                 f"{native_compute_dtype(fmt)} tensor cores; {c.name}'s {c.gpu.name} has none",
                                 f"give --{field_name} int4_wo (or bf16 where it fits), or an engine with weight-only "
                                 f"{fmt} kernels (vllm)")
        kv = stack.serving.kv_cache_dtype if kv_cache_dtype in (None, "auto") else kv_cache_dtype
        if kv == "fp8" and "fp8" in stack.serving.native_only_formats and "fp8" not in c.gpu.peak_flops_per_s:
            # the same support matrix lists no FP8 of any kind on the GPU, the KV cache included
            raise InputError("--kv-cache-dtype", f"{stack.name} has no FP8 kernels on {c.name}'s {c.gpu.name}, an "
                             "FP8 KV cache included", "give --kv-cache-dtype auto (16-bit there), or -b vllm")
        if kv == "auto" and stack.serving.kv_dtype_from_checkpoint and \
                checkpoint_names_fp8_kv(m, dense, expert, stack.framework, prequantised):
            # NVFP4 and per-tensor FP8 checkpoints are NVIDIA ModelOpt exports, whose
            # hf_quant_config.json states kv_cache_quant_algo FP8 (the FP8 export's example in
            # ModelOpt's docs: {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}); a 16-bit
            # release quantised at load time names none and keeps the model dtype
            kv = "fp8"
        eff = efficiency if efficiency is not None else load_serving_efficiency(c.gpu.generation)
        return cls(model=m, cluster=c, stack=stack, efficiency=eff, dense_format=dense, expert_format=expert,
                   kv_bytes=kv_dtype_bytes(kv), token_budget=stack.serving.token_budget(c.gpu.hbm_bytes, c.gpu.name),
                   kv_cache_dtype=kv, speculative_tokens=k, draft_acceptance=p, acceptance_is_prior=prior,
                   draft_head=head, prequantised=bool(prequantised),
                   backend_version=backend_version.strip() if backend_version is not None else None)


def default_formats(model: ModelSpec, gpu, precision: str | None = None,
                    expert_precision: str | None = None) -> tuple[str, str]:
    """(dense, expert) weight formats of a deployment: ``precision`` / ``expert_precision`` where
    given; else the released checkpoint's (``ModelSpec.checkpoint_format``,
    ``expert_checkpoint_format``: DeepSeek's block FP8), served as stored and weight-only in 16-bit
    on a GPU without their tensor cores (vLLM runs FP8 checkpoints on Ampere with its weight-only
    FP8 Marlin kernels; gpt-oss's MXFP4 experts on Hopper alike); a checkpoint stating only its
    experts' format keeps the rest 16-bit; else fp8 on GPUs with FP8 tensor cores, else bf16. The
    experts default to ``precision``, else their checkpoint format, else the dense format."""
    dense_stored, expert_stored = model.checkpoint_format, model.expert_checkpoint_format
    dense = (precision or dense_stored or ("bf16" if expert_stored else None)
             or ("fp8" if "fp8" in gpu.peak_flops_per_s else "bf16"))
    return dense, expert_precision or precision or expert_stored or dense


def speculation(model: ModelSpec, stack: StackSpec, speculative_tokens, draft_acceptance,
                draft_head: DraftHead | None = None) -> tuple[int, float, bool]:
    """(drafts per step, acceptance, whether the acceptance is the unfitted prior), checked:
    drafts need the model's own MTP modules (``ModelSpec.mtp_layers``: config.json
    ``num_nextn_predict_layers``, Qwen3.5's ``mtp_num_hidden_layers``) or an
    EAGLE-3 ``draft_head``, whose acceptance must be given; a separate small draft model is not
    modelled."""
    given = stack.serving.speculative_tokens if speculative_tokens is None else speculative_tokens
    # the stack's default is the stack file's value, not an option the user never typed
    field = "--speculative-tokens" if speculative_tokens is not None \
        else f"stack {stack.name}.serving.speculative_tokens"
    try:
        k = whole_number(field, given, minimum=0)      # 3.0 and numpy integers are 3
    except InputError:
        k = -1
    if not 0 <= k <= MAX_SPECULATIVE_TOKENS:
        raise InputError(field, f"must be a whole number in [0, {MAX_SPECULATIVE_TOKENS}], got {shown(given)}",
                         "use 1-3 drafted tokens a step, as the engines' MTP examples do" if speculative_tokens
                         is not None else f"set it to 0-{MAX_SPECULATIVE_TOKENS} in the stack file, or override "
                         "it with --speculative-tokens")
    if draft_acceptance is None:
        p, prior = MTP_ACCEPTANCE_PRIOR, True
    else:
        p, prior = draft_acceptance, False
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or not 0.0 <= p <= 1.0:
            raise InputError("--draft-acceptance", f"must be a probability in [0, 1], got {shown(p)}",
                             f"give the measured share of drafted tokens accepted, e.g. {MTP_ACCEPTANCE_PRIOR}")
        p = float(p)
    if draft_head is not None:
        if not k:
            raise InputError("--draft-model", "given without --speculative-tokens",
                             "add --speculative-tokens 1 (or more) to draft with the head")
        if prior:
            raise InputError("--draft-acceptance", f"missing: no published prior for the EAGLE-3 head "
                             f"{draft_head.name}'s per-token acceptance on your requests",
                             "measure it (the engine logs the accepted share of drafted tokens) and give "
                             "--draft-acceptance, e.g. 0.7")
    elif k and not model.mtp_layers:
        # mtp_layers 0 is either a checkpoint without MTP (Kimi K2: num_nextn_predict_layers 0) or one
        # whose modules are not modelled (MiniMax-M2.5's num_mtp_modules 3): said as the spec states it
        raise InputError(field, f"{model.name}'s model spec has no multi-token-prediction "
                         "module to draft with (mtp_layers 0)",
                         "use --speculative-tokens 0, an EAGLE-3 head (--draft-model DIR, e.g. "
                         "examples/drafts/eagle3-llama3.1-8b), or a model with MTP layers (deepseek-v3, deepseek-r1, "
                         "glm-5, qwen3.5-397b-a17b)")
    if not k and not prior:
        raise InputError("--draft-acceptance", "given without --speculative-tokens",
                         "add --speculative-tokens 1 (or more) to price speculative decoding")
    return k, p, prior
