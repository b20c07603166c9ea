"""Achieved-efficiency model of one GPU generation (fitted, not guessed).

The roofline says what a chip could do; these factors say what kernels and collectives
achieve on it. There is one ``EfficiencyModel`` per generation (``ampere``, ``hopper``, ...),
stored in ``hardware_specs/efficiency/<generation>.yaml`` and refitted on the published runs by
``paraplan fit-efficiency`` (see ``paraplan/validation/fit.py``). Each factor has a physical
meaning, documented below, and is used in exactly one place in ``cost_models``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Mapping

from hardware_specs.errors import InputError, require_plausible


#: collective kinds whose bandwidth ``collective_bw_fraction`` may scale
COLLECTIVE_KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p")
#: the marker outputs put beside a number that rests on an unfitted model (``is_fitted`` false);
#: ``paraplan.priors.MARK`` is this, and the planner's ``--explain`` text uses it too
PRIOR_MARK = "*"


def prior_mark(prior: bool) -> str:
    """What follows a number that rests on an unfitted prior: ``" *"`` (``PRIOR_MARK`` with its
    leading space) where ``prior``, else ""."""
    return f" {PRIOR_MARK}" if prior else ""


@dataclass(frozen=True)
class EfficiencyModel:
    """Per-generation achieved-efficiency factors.

    Attributes:
        generation: key matching ``GPUSpec.generation``.
        gemm_peak_fraction: per dtype, the fraction of dense peak a large, well-shaped GEMM
            reaches (cuBLAS/cuBLASLt plateau). Dtypes not listed fall back to ``bf16``.
        gemm_half_dim: GEMM shape saturation: each of the three GEMM dimensions ``x`` scales
            the plateau by ``x / (x + gemm_half_dim)`` (tile quantisation and too few thread
            blocks for skinny or small GEMMs), in 16-bit elements; for the reduction dimension
            of a low-precision GEMM it is scaled by that dtype's peak rate over the 16-bit one
            (``cost_models.compute.compute_rates``).
        attention_peak_fraction: fraction of the bf16/fp16 peak reached by the fused (flash)
            attention core (FlashAttention-2 reports 50-73% on A100, FA3 ~75% on H100).
        hbm_fraction: fraction of peak HBM bandwidth reached by memory-bound kernels
            (norms, activations, dropout, optimizer step).
        optimizer_hbm_fraction: fraction of peak memory bandwidth the optimizer step reaches
            (a multi-tensor Adam streams seven arrays and computes little); 0 = the same as
            ``hbm_fraction``. ``paraplan calibrate`` measures it; the GPU fits leave it at 0.
        scaleup_fraction: achieved collective bus bandwidth / scale-up link bandwidth
            (NCCL busBW over NVLink).
        scaleout_fraction: achieved bus bandwidth / NIC bandwidth across nodes.
        kernel_overhead_s: fixed GPU time per kernel (launch latency, tail of the last wave),
            seconds, added to each kernel's work.
        cpu_issue_s: host time to issue one kernel from an eager framework (Python, dispatch,
            autograd bookkeeping), seconds. The host runs ahead of the GPU, so a pass takes the
            longer of its GPU time and its kernels x this: small layers become host-bound.
            CUDA graphs (``ParallelConfig.cuda_graphs``) replay a pass without it. 0 = never
            host-bound.
        exposed_softmax_fraction: fraction of the attention core's softmax exponentials
            (special-function units, ``GPUSpec.sfu_exp_per_s``) not hidden under its matmuls by
            the generation's usual fused attention kernel (``attention_kernel: auto``): 0 where
            it overlaps them (FlashAttention-3 / cuDNN's warp-specialised ping-pong on Hopper,
            Shah et al. 2024, section 3.1; on Blackwell FlashAttention-4 / cuDNN's tcgen05
            kernels pipeline the softmax of one tile under the matmuls of the next), 1 where the
            second matmul waits for the softmax of the first (FlashAttention-2 style kernels, the
            pre-Hopper generations). Blackwell's 0 is what the measured kernels require: at head
            dim 128 a score costs 2 x (128 + 128) = 512 matmul FLOPs and one exponential, so a
            B200 running them one after the other even at 100% of its 2.25 PFLOP/s BF16 peak and
            5e12 exponentials/s (``GPUSpec.sfu_exp_per_s``) reaches at most 512 / (512 / 2.25e15
            + 1 / 5e12) = 1,198 TFLOP/s, yet FlashAttention-4 reaches 1,605-1,613 TFLOP/s in BF16
            on B200 (71% of peak; Zadouri, Dao et al. 2026, FlashAttention-4, arXiv 2603.05451)
            and cuDNN 9.13 about 1.2 PFLOP/s (FlashAttention-4's "up to 1.3x over cuDNN"): only
            possible with the exponentials overlapped. NVIDIA's "Inside NVIDIA Blackwell Ultra"
            (2025), which B300/GB300's doubled SFU rate comes from, shows the serial schedule to
            motivate that rate; Blackwell Ultra's faster SFUs only widen the margin. Nor does
            cuDNN 9.22's SDPA benchmark of one release on both GB200 and GB300 (NVIDIA/cudnn-frontend
            ``benchmark/sdpa_benchmark_training/results/*/gb{200,300}``, bf16) call for a share:
            solving time per score = matmul FLOPs / (peak x ``sustained_tensor_fraction`` x a) +
            share / exp rate on both chips gives, over 45 forward and 40 backward pairs of rows
            (2K-76K tokens, head dims 128-256, causal and full), a forward share of 0.03-0.62
            (median 0.21), a backward one of -0.70 to 1.17 (median -0.19: GB300 mostly gains less
            than its 2,500 / 2,250 sustained tensor rate) and, forward and backward together as
            paraplan prices them, -0.22 to 0.65 (median 0.07); Llama-3's hd128 causal core at 8K
            measures (1.397 + 4.127) / (1.185 + 3.832) ms = 1.101 GB200 / GB300, against 1.111
            with no share. The forward's extra GB300 gain is no exponential term either: it does not
            shrink as the head dim grows (1.177 / 1.181 / 1.175 at head dims 128 / 192 / 256,
            where a share of 0.2 at a = 0.83 would give 1.185 / 1.171 / 1.149). A documented
            kernel property, not fitted (the fitter carries it through from the committed YAML). How much communication a run leaves exposed is not an
            efficiency factor either: it follows from the software stack's overlap switches
            (``ParallelConfig``, ``hardware_specs/stacks``).
        sync_skew_fraction: straggler wait at synchronisations. Ranks that must meet (a TP
            all-reduce, a pipeline send/recv, the DP gradient reduction) arrive at different
            times because their compute is jittered (OS noise, frequency changes, shared
            memory bandwidth); on average a rank waits this fraction of the compute it ran
            since the previous synchronisation. Summed over a step that is this fraction of the
            step's compute whenever the job has more than one rank. ~0 on dedicated GPUs (not
            fitted there); ``paraplan calibrate`` measures it on CPU hosts as the slope of a
            collective's mean time against the compute before it.
        collective_bw_fraction: per collective kind (``all_reduce``, ``reduce_scatter``,
            ``all_gather``, ``all_to_all``, ``p2p``), the bandwidth it reaches relative to the ring model at the
            all-reduce's bus bandwidth. Kinds not listed reach 1 (NCCL's rings run
            reduce-scatter and all-gather at the all-reduce's bus bandwidth). Measured by
            ``paraplan calibrate``: gloo's CPU reduce-scatter, for one, runs at ~0.3 of it.
        fitted_on: what these numbers were fitted on and how to refit them.
        fitted_factors: the factors the fitter fitted (empty: an unfitted prior).
        fit_objective: the weighted mean |predicted / measured - 1| the fit reached
            (``paraplan.validation.fit``), re-evaluated by tests/test_efficiency_fit.py.
        origin: where these factors were read from (the efficiency file's path, or "inline in
            <cluster file>"), for the prior footnote; "" when built in Python. Not a factor: not
            in a file's keys, equality or repr.
    """

    generation: str
    gemm_peak_fraction: Mapping[str, float]
    gemm_half_dim: float = 64.0
    attention_peak_fraction: float = 0.5
    hbm_fraction: float = 0.8
    optimizer_hbm_fraction: float = 0.0
    scaleup_fraction: float = 0.8
    scaleout_fraction: float = 0.8
    kernel_overhead_s: float = 5e-6
    cpu_issue_s: float = 0.0
    exposed_softmax_fraction: float = 1.0
    sync_skew_fraction: float = 0.0
    collective_bw_fraction: Mapping[str, float] = field(default_factory=dict)
    fitted_on: str = ""
    fitted_factors: tuple = ()
    fit_objective: float = float("nan")
    origin: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        where = f"efficiency {self.generation}"
        if "bf16" not in self.gemm_peak_fraction and "fp32" not in self.gemm_peak_fraction:
            raise InputError(f"{where}.gemm_peak_fraction", "must list bf16 (or fp32 for CPUs)")
        for dtype, value in self.gemm_peak_fraction.items():
            _check_fraction(f"{where}.gemm_peak_fraction.{dtype}", value)
        for name in ("attention_peak_fraction", "hbm_fraction", "scaleup_fraction",
                     "scaleout_fraction"):
            _check_fraction(f"{where}.{name}", getattr(self, name))
        _check_fraction(f"{where}.exposed_softmax_fraction", self.exposed_softmax_fraction, allow_zero=True)
        _check_fraction(f"{where}.sync_skew_fraction", self.sync_skew_fraction, allow_zero=True)
        _check_fraction(f"{where}.optimizer_hbm_fraction", self.optimizer_hbm_fraction, allow_zero=True)
        require_plausible(f"{where}.gemm_half_dim", self.gemm_half_dim, high=MAX_GEMM_HALF_DIM, allow_zero=True)
        require_plausible(f"{where}.kernel_overhead_s", self.kernel_overhead_s, high=MAX_PER_KERNEL_S, allow_zero=True)
        require_plausible(f"{where}.cpu_issue_s", self.cpu_issue_s, high=MAX_PER_KERNEL_S, allow_zero=True)
        for kind, value in self.collective_bw_fraction.items():
            if kind not in COLLECTIVE_KINDS:
                raise InputError(f"{where}.collective_bw_fraction.{kind}", "unknown collective kind",
                                 "use one of " + ", ".join(COLLECTIVE_KINDS))
            _check_fraction(f"{where}.collective_bw_fraction.{kind}", value)
        object.__setattr__(self, "gemm_peak_fraction", MappingProxyType(dict(self.gemm_peak_fraction)))
        object.__setattr__(self, "collective_bw_fraction", MappingProxyType(dict(self.collective_bw_fraction)))
        object.__setattr__(self, "fitted_factors", tuple(str(f) for f in (self.fitted_factors or ())))

    def __reduce__(self):
        """Pickle by field values, the read-only mappings as plain dicts (``__post_init__`` wraps
        them again), so a model (a calibrated cluster's own too) can cross to another process."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["gemm_peak_fraction"] = dict(values["gemm_peak_fraction"])
        values["collective_bw_fraction"] = dict(values["collective_bw_fraction"])
        return (_efficiency_model_from_fields, (values,))

    @property
    def is_fitted(self) -> bool:
        """Whether the factors were fitted to measured runs (else: an unfitted prior)."""
        return bool(self.fitted_factors)

    def gemm_fraction(self, dtype: str) -> float:
        """Plateau GEMM efficiency for ``dtype`` (falls back to bf16, then fp32)."""
        for key in (dtype, "bf16", "fp32"):
            if key in self.gemm_peak_fraction:
                return float(self.gemm_peak_fraction[key])
        raise InputError("dtype", f"no GEMM efficiency for {dtype}")

    @property
    def is_prior(self) -> bool:
        """True when these factors were not fitted: ``not is_fitted``, the one test of "unfitted"
        (``fitted_on`` is free text: "unfitted prior: ..." once read as fitted here). Predictions
        resting on them must say so next to their numbers."""
        return not self.is_fitted

    def collective_fraction(self, kind: str) -> float:
        """Bandwidth of collective ``kind`` relative to the all-reduce ring model (default 1)."""
        return float(self.collective_bw_fraction.get(kind, 1.0))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


#: the names ``fitted_factors`` may list: what the fitter (``paraplan.validation.fit_search.FIT_BOUNDS``,
#: ``joint_fit``) and ``paraplan calibrate`` write: the GEMM plateaus fitted as groups of dtypes
#: (gemm16 = bf16 and fp16, gemm8 = fp8, gemm_mx8 = mxfp8, gemm4 = nvfp4) and the factor fields
GEMM_FIT_GROUPS = ("gemm16", "gemm8", "gemm_mx8", "gemm4")
NOT_FACTORS = ("generation", "fitted_on", "fitted_factors", "fit_objective", "origin")
#: fields set by the loader, never read from a file's keys
NOT_FILE_KEYS = ("origin",)


def fittable_factor_names() -> tuple[str, ...]:
    """Every name ``EfficiencyModel.fitted_factors`` may hold (see ``GEMM_FIT_GROUPS``)."""
    return GEMM_FIT_GROUPS + tuple(n for n in EfficiencyModel.field_names() if n not in NOT_FACTORS)


#: plausibility bounds (``require_plausible``), far outside the fitter's physical ranges
#: (``paraplan.validation.fit_search.FIT_BOUNDS``: fractions from 0.15, per-kernel times to 40 us):
#: a fraction of 1e-300 or a per-kernel time of 1e30 s is a typo that would print 1e300 s steps
MIN_FRACTION = 1e-3
MAX_PER_KERNEL_S = 1.0
MAX_GEMM_HALF_DIM = 2.0**20


def _check_fraction(name: str, value: float, allow_zero: bool = False) -> None:
    require_plausible(name, value, MIN_FRACTION, allow_zero=allow_zero)
    if value > 1.0:
        raise InputError(name, f"is a fraction and must be <= 1, got {value}")


def _efficiency_model_from_fields(values: dict) -> EfficiencyModel:
    """``EfficiencyModel`` from its field values (unpickling)."""
    return EfficiencyModel(**values)
