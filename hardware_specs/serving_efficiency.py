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
from dataclasses import dataclass, fields

from hardware_specs.errors import InputError

#: the factors the fitter moves, with the (low, high) range it searches; a fitted value at a
#: bound means the physics is missing something, so the fitter reports it.
FIT_RANGES = {
    "decode_hbm_fraction": (0.3, 0.98),
    "gemm_peak_fraction": (0.2, 0.95),
    "attention_peak_fraction": (0.1, 0.9),
    "kernel_fixed_s": (0.5e-6, 20e-6),
    "arrival_sync": (0.1, 20.0),
}


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
        arrival_sync: how synchronised the clients of a closed concurrency loop stay: the wait
            of a prompt behind the others is arrival_sync x the geometric mean of the
            fully-synchronised and the independent-arrival waits
            (``simulator.serving.aggregated``); 1 = exactly that geometric mean.
        link_bw_fraction: achieved bus bandwidth / link bandwidth of collectives (NCCL busBW
            over NVLink and InfiniBand, nccl-tests: ~0.8); not fitted.
        fitted_on: what the numbers were fitted on, with the in-sample and cross-validated error.
        prior: True for a hand-set profile no measurement has been fitted to (predictions that
            rest on it say so).
    """

    generation: str
    decode_hbm_fraction: float = 0.8
    gemm_peak_fraction: float = 0.6
    attention_peak_fraction: float = 0.4
    kernel_fixed_s: float = 4e-6
    arrival_sync: float = 1.0
    link_bw_fraction: float = 0.8
    fitted_on: str = ""
    prior: bool = False

    def __post_init__(self) -> None:
        where = f"serving_efficiency {self.generation}"
        for name in ("decode_hbm_fraction", "gemm_peak_fraction", "attention_peak_fraction", "link_bw_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 < value <= 1.0):
                raise InputError(f"{where}.{name}", f"is a fraction in (0, 1], got {value!r}")
        if isinstance(self.arrival_sync, bool) or not isinstance(self.arrival_sync, (int, float)) \
                or not (0.0 <= self.arrival_sync < 1000.0):
            raise InputError(f"{where}.arrival_sync", f"must be a number in [0, 1000), got {self.arrival_sync!r}")
        v = self.kernel_fixed_s
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise InputError(f"{where}.kernel_fixed_s", f"must be a finite number of seconds >= 0, got {v!r}")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
