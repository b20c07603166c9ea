"""Achieved efficiency of inference kernels on one GPU generation (fitted, few, physical).

The training factors (``efficiency_model.py``) describe training kernels: large forward and
backward GEMMs, fused attention with its backward, gradient collectives. Serving runs other
kernels: batched GEMV-like decode GEMMs and paged attention that stream weights and KV cache
from HBM, prefill GEMMs over a prompt chunk, small latency-bound all-reduces. Their factors
live here, one file per generation in ``hardware_specs/serving_efficiency/<generation>.yaml``,
written by ``python -m paraplan.validation.serving_fit`` (committed values are what it returns).

What an engine does per step on the host (scheduling, launches) is not here: it is a documented
input of the software stack (``hardware_specs.serving_behaviour``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Mapping

from hardware_specs.efficiency_model import MAX_PER_KERNEL_S, MIN_FRACTION
from hardware_specs.errors import InputError, shown

#: the factors the fitter moves, with the (low, high) range it searches: fractions anywhere up
#: to the datasheet peak; a fitted value at a bound means the physics is missing something, so
#: the fitter reports it.
FIT_RANGES = {
    "decode_hbm_fraction": (0.3, 1.0),
    "gemm_peak_fraction": (0.2, 1.0),
    "attention_peak_fraction": (0.1, 1.0),
    "kernel_fixed_s": (0.5e-6, 20e-6),
    "expert_fixed_s": (0.0, 2e-6),
    "arrival_sync_chunked": (0.1, 40.0),
    "arrival_sync_whole": (0.1, 40.0),
    "arrival_sync_alone": (0.1, 40.0),
    "request_host_s": (0.0, 0.4),
}
#: plausibility bound of the host time per request, far past ``FIT_RANGES`` (fractions use the
#: training model's ``MIN_FRACTION``, per-kernel times its ``MAX_PER_KERNEL_S``): outside is a typo
MAX_REQUEST_HOST_S = 10.0


@dataclass(frozen=True)
class ServingEfficiency:
    """Per-generation achieved-efficiency factors of inference kernels.

    Attributes:
        generation: key matching ``GPUSpec.generation``.
        decode_hbm_fraction: fraction of peak HBM bandwidth reached by the memory-bound decode
            kernels (weight streaming in small-batch GEMMs and grouped expert GEMMs, paged
            attention reading the KV cache, linear-attention state updates).
        gemm_peak_fraction: fraction of the dtype's dense peak reached by prefill GEMMs over a
            chunk of thousands of tokens (the plateau).
        attention_peak_fraction: fraction of the 16-bit dense peak reached by the prefill
            attention core (FlashAttention / FlashInfer / TRT-LLM FMHA over a prompt chunk).
        kernel_fixed_s: fixed GPU time per kernel of a step (launch gap inside a CUDA graph,
            ramp-up and tail of a short kernel), seconds.
        expert_fixed_s: fixed GPU time per active routed expert a GPU holds, per MoE layer and
            step, on top of streaming its weights (``cost_models.inference_layers.moe_block_s``):
            the grouped expert GEMMs run at least one weight tile per active expert slice, and
            its start-up and drain do not shrink with the slice, so experts split tensor-
            parallel (every GPU holds a slice of every active expert) pay it on each GPU, where
            bytes alone would make them as cheap as whole experts split expert-parallel. The
            fused-MoE kernel tables AIConfigurator collected (ai-dynamo/aiconfigurator@095f58a,
            ``systems/data/{h200_sxm,b200_sxm}/moe/*/moe_perf.parquet``) show it: at the same
            bytes a GPU, moe_tp 8 is 0.3-0.75 us per extra active expert slice slower than
            ep 8 (SGLang 0.5.9, TensorRT-LLM 1.2.0rc5), seconds.
        arrival_sync_chunked, arrival_sync_whole, arrival_sync_alone: how synchronised the
            clients of a closed concurrency loop stay, by how the engine's scheduler interleaves
            prompts with decodes (``ServingBehaviour``): prompts chunked into steps shared with
            decodes (vLLM), whole prompts in steps shared with decodes (TensorRT-LLM), prompt
            batches run alone while decodes pause (SGLang). The wait of a prompt behind the
            others is this factor x the geometric mean of the fully-synchronised and the
            independent-arrival waits (``simulator.serving.aggregated``); 1 = exactly that mean.
            Finer interleaving spreads the clients out; pausing decodes keeps them in step.
        request_host_s: time of one request outside the engine's steps, seconds: the client's
            HTTP request and the first streamed event, the API server's tokenisation of the
            prompt and detokenisation of the first token, the hand-over between the server and
            engine processes (vLLM's API server and EngineCore, SGLang's TokenizerManager,
            Scheduler and DetokenizerManager, Dynamo's frontend and worker). Every request's
            TTFT carries it once, at any load: the part of the first token's time that no GPU
            step explains (measured TTFT at 1-4 clients is 1.5-8x the modelled prefill).
            Fitted: a host-side time of the serving systems measured on the generation.
        link_bw_fraction: achieved bus bandwidth / link bandwidth of collectives (NCCL busBW
            over NVLink and InfiniBand, nccl-tests: ~0.8); not fitted.
        fitted_on: what the numbers were fitted on, with the in-sample and cross-validated error.
        donor: of a written prior (``prior: true``), the fitted generation whose factors it holds
            (``paraplan.validation.serving_fit.write_serving_priors``): reports name it beside
            the prior's numbers. "" for a fit and for a hand-set profile (``default.yaml``).
        fitted_isl_max_tokens: the longest prompt among the rows fitted (0 = not recorded): a
            TTFT at a longer prompt extrapolates the fitted prefill rates, and reports say so.
        prior: True for a hand-set profile no measurement has been fitted to (predictions that
            rest on it say so). The default: a profile is fitted only where it says so with its
            fit record (``prior: false`` and ``fitted_on``, as the fitter writes them; a
            training file likewise needs ``fitted_factors``), never by leaving the key out.
        validation_error_pct: per serving engine and mode (``"sglang agg"``), the in-sample
            error of the fitted rows of this generation, as ``(key, rows, ttft, tpot)`` tuples
            (a mapping ``{key: {rows, ttft, tpot}}`` is read as such; TTFT and TPOT mean |error|
            in percent), written by the fitter; reports print it beside a deployment's TTFT and
            TPOT (how far to trust them: TTFT of SGLang ~45%, TPOT ~15%). Tuples keep the
            profile hashable and picklable, as a frozen spec is.
        origin: the file it was read from (``hardware_specs.catalog.load_serving_efficiency``;
            "" for a profile built in memory, e.g. by the fitter): reports on a prior name the
            file actually loaded, a user's ``PARAPLAN_HARDWARE_PATH`` one included. Not a file
            key, and not part of equality or the hash (the same factors from two files are the
            same profile), as ``EfficiencyModel.origin``.
    """

    generation: str
    decode_hbm_fraction: float = 0.8
    gemm_peak_fraction: float = 0.6
    attention_peak_fraction: float = 0.4
    kernel_fixed_s: float = 4e-6
    expert_fixed_s: float = 0.0
    arrival_sync_chunked: float = 1.0
    arrival_sync_whole: float = 1.0
    arrival_sync_alone: float = 1.0
    request_host_s: float = 0.02
    link_bw_fraction: float = 0.8
    fitted_on: str = ""
    donor: str = ""
    fitted_isl_max_tokens: float = 0.0
    prior: bool = True
    validation_error_pct: tuple = ()
    origin: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        where = f"serving_efficiency {self.generation}"
        errs = self.validation_error_pct
        if isinstance(errs, Mapping):
            if not all(isinstance(r, Mapping) and set(r) == {"rows", "ttft", "tpot"} for r in errs.values()):
                raise InputError(f"{where}.validation_error_pct", f"expected {{key: {{rows, ttft, tpot}}}}, got {shown(errs)}")
            errs = tuple((k, r["rows"], r["ttft"], r["tpot"]) for k, r in errs.items())
        if not isinstance(errs, (tuple, list)):
            raise InputError(f"{where}.validation_error_pct", f"expected a mapping, got {type(errs).__name__}")
        for rec in errs:
            if not (isinstance(rec, (tuple, list)) and len(rec) == 4 and isinstance(rec[0], str)
                    # the range first: an int of 400 digits compares, where math.isfinite raised OverflowError
                    and all(not isinstance(v, bool) and isinstance(v, (int, float)) and 0 <= v <= 1e6 and math.isfinite(v)
                            for v in rec[1:])):
                raise InputError(f"{where}.validation_error_pct", f"expected (key, rows, ttft, tpot) numbers, got {shown(rec)}")
        object.__setattr__(self, "validation_error_pct",
                           tuple((str(k), float(n), float(t), float(p)) for k, n, t, p in errs))
        for name in ("decode_hbm_fraction", "gemm_peak_fraction", "attention_peak_fraction", "link_bw_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (MIN_FRACTION <= value <= 1.0):
                raise InputError(f"{where}.{name}", f"is a fraction in [{MIN_FRACTION:g}, 1], got {shown(value)}")
        for name in ("arrival_sync_chunked", "arrival_sync_whole", "arrival_sync_alone"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 <= value < 1000.0):
                raise InputError(f"{where}.{name}", f"must be a number in [0, 1000), got {shown(value)}")
        v = self.fitted_isl_max_tokens
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1e8:
            raise InputError(f"{where}.fitted_isl_max_tokens", f"must be a number of tokens in [0, 1e8], got {shown(v)}")
        for name, most in (("kernel_fixed_s", MAX_PER_KERNEL_S), ("expert_fixed_s", MAX_PER_KERNEL_S),
                           ("request_host_s", MAX_REQUEST_HOST_S)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or v > most:
                raise InputError(f"{where}.{name}", f"must be a finite number of seconds in [0, {most:g}], got {shown(v)}")

    def validation_error(self, framework: str, mode: str) -> Mapping[str, float] | None:
        """``validation_error_pct`` of ``framework`` (vllm, sglang, trtllm) in ``mode`` (agg,
        disagg), None where no fitted row of this generation ran it."""
        return self.validation_errors().get(f"{framework} {mode}")

    def validation_errors(self) -> dict[str, dict[str, float]]:
        """``validation_error_pct`` as ``{key: {"rows", "ttft", "tpot"}}``."""
        return {k: {"rows": n, "ttft": t, "tpot": p} for k, n, t, p in self.validation_error_pct}

    @staticmethod
    def arrival_sync_field(mixed_batches: bool, chunked_prefill: bool) -> str:
        """The name of the synchronisation factor of an engine whose scheduler mixes prompts into
        decode steps (``mixed_batches``) in chunks (``chunked_prefill``) or not."""
        if not mixed_batches:
            return "arrival_sync_alone"
        return "arrival_sync_chunked" if chunked_prefill else "arrival_sync_whole"

    def arrival_sync(self, mixed_batches: bool, chunked_prefill: bool) -> float:
        """That factor's value (``arrival_sync_field``)."""
        return getattr(self, self.arrival_sync_field(mixed_batches, chunked_prefill))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def file_keys(cls) -> tuple[str, ...]:
        """The keys a serving-efficiency file may hold (every field but ``origin``)."""
        return tuple(n for n in cls.field_names() if n != "origin")
