"""Accelerator profile: peak FLOP/s per dtype, HBM size and bandwidth, scale-up link."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from hardware_specs.errors import InputError, require_plausible, require_positive, shown

#: dtypes a GPU profile may list; a GEMM in dtype X runs at ``peak_flops_per_s[X]``.
KNOWN_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4")

#: plausibility bounds of a profile's rates and sizes (``require_plausible``): far past any chip
#: either way (cpu-generic has 2e11 FLOP/s and 2e10 bytes/s; a B200 4.5e15 FLOP/s, 180 GiB), so
#: only typos and unit slips fall outside
MIN_RATE_PER_S = 1e3          # FLOP/s, exponentials/s, bytes/s of memory and links
MAX_RATE_PER_S = 1e21         # the same: 1 ZFLOP/s or 1 ZB/s, 10^5 x a B200's FP8 peak
MIN_HBM_BYTES, MAX_HBM_BYTES = 2.0**20, 2.0**50      # 1 MiB .. 1 PiB
MAX_SM_COUNT = 2**20
#: largest GPU count a hardware file may state (a cluster's per node or in all, a GPU's scale-up
#: domain, which a generic node takes as its gpus_per_node): 2**24, over a hundred times the
#: largest clusters built (a larger value is a typo; ``ParallelConfig`` has the same bound)
MAX_CLUSTER_GPUS = 2**24
#: generations whose tensor cores read per-tensor FP8 operands in any layout (compute capability
#: 10.x-11.x; ``GPUSpec.fp8_gemm_any_layout``). A consumer Blackwell part (12.x) is not one.
FP8_ANY_LAYOUT_GENERATIONS = frozenset({"blackwell"})


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator kind, as its datasheet states it (dense, no sparsity).

    Attributes:
        name: canonical name, e.g. ``h100-sxm-80gb``.
        generation: efficiency-model key, e.g. ``ampere``, ``hopper``, ``blackwell``.
        peak_flops_per_s: dense peak FLOP/s per dtype (see ``KNOWN_DTYPES``).
        hbm_bytes: device memory in bytes.
        hbm_bw_bytes_per_s: peak device-memory bandwidth in bytes/s.
        scaleup_bw_bytes_per_s: scale-up (NVLink / Infinity Fabric / ICI) bandwidth per GPU,
            one direction, bytes/s.
        scaleup_domain_size: GPUs reachable over the scale-up fabric in the usual system.
        source: datasheet citation.
        sfu_exp_per_s: exponentials per second of the special-function units (``MUFU.EX2``),
            which compute the softmax inside fused attention; None where not known (then the
            attention core is timed by its matrix FLOPs alone).
        sm_count: streaming multiprocessors (compute units): a GEMM's output tiles run in waves
            of this many (``cost_models.compute.gemm_shape_factor``); None where the chip has no
            such units in this sense (CPUs, TPUs), which then use the smooth shape factor.
        sync_mma_peak_fraction: share of the best attention kernel's tensor rate that portable
            kernels reach: those not written for the chip's asynchronous tensor-core pipeline,
            i.e. FlashAttention-2 (warp-synchronous ``mma.sync``) and Triton-compiled kernels
            such as Mamba-2's SSD scan. Hopper's full rate needs the warpgroup ``wgmma``
            instructions and ``mma.sync`` reaches about 2/3 of it (Shah et al. 2024,
            FlashAttention-3, section 2.2); on Blackwell, FlashAttention-4 runs up to 2.7x
            faster than Triton's attention on B200 (Zadouri et al. 2026, FlashAttention-4),
            about 0.37. 1.0 where the portable path is the chip's native one (Volta to Ada) or
            not known.
        sustained_tensor_fraction: share of the datasheet's dense tensor rates (``peak_flops_per_s``)
            the part holds in the systems it is measured in, where runs of the same software
            show it below the datasheet (a power or clock limit the datasheet does not state);
            the cost models run at ``sustained_flops``, MFU stays of the datasheet's peak.
            1.0 where the datasheet's rates hold or nothing says otherwise.
    """

    name: str
    generation: str
    peak_flops_per_s: Mapping[str, float]
    hbm_bytes: float
    hbm_bw_bytes_per_s: float
    scaleup_bw_bytes_per_s: float
    scaleup_domain_size: int
    source: str = ""
    vendor: str = ""
    sfu_exp_per_s: float | None = None
    sm_count: int | None = None
    sync_mma_peak_fraction: float = 1.0
    sustained_tensor_fraction: float = 1.0

    def __post_init__(self) -> None:
        where = f"gpu {self.name}"
        if not self.peak_flops_per_s:
            raise InputError(f"{where}.peak_flops_per_s", "must list at least one dtype")
        for dtype, value in self.peak_flops_per_s.items():
            if dtype not in KNOWN_DTYPES:
                raise InputError(f"{where}.peak_flops_per_s.{dtype}", "unknown dtype",
                                 "use one of " + ", ".join(KNOWN_DTYPES))
            require_plausible(f"{where}.peak_flops_per_s.{dtype}", value, MIN_RATE_PER_S, MAX_RATE_PER_S)
        require_plausible(f"{where}.hbm_bytes", self.hbm_bytes, MIN_HBM_BYTES, MAX_HBM_BYTES)
        require_plausible(f"{where}.hbm_bw_bytes_per_s", self.hbm_bw_bytes_per_s, MIN_RATE_PER_S, MAX_RATE_PER_S)
        require_plausible(f"{where}.scaleup_bw_bytes_per_s", self.scaleup_bw_bytes_per_s, MIN_RATE_PER_S, MAX_RATE_PER_S)
        require_positive(f"{where}.scaleup_domain_size", self.scaleup_domain_size)
        if int(self.scaleup_domain_size) != self.scaleup_domain_size:
            raise InputError(f"{where}.scaleup_domain_size", f"must be a whole number, got {shown(self.scaleup_domain_size)}")
        if self.scaleup_domain_size > MAX_CLUSTER_GPUS:
            size = self.scaleup_domain_size     # 1e30 read as an int would print 31 digits
            raise InputError(f"{where}.scaleup_domain_size", f"{f'{int(size):,}' if size < 1e15 else f'{float(size):g}'} is above "
                             f"the largest supported value {MAX_CLUSTER_GPUS:,}", "check the number")
        object.__setattr__(self, "scaleup_domain_size", int(self.scaleup_domain_size))
        if self.sfu_exp_per_s is not None:
            require_plausible(f"{where}.sfu_exp_per_s", self.sfu_exp_per_s, MIN_RATE_PER_S, MAX_RATE_PER_S)
        if self.sm_count is not None:
            require_plausible(f"{where}.sm_count", self.sm_count, 1, MAX_SM_COUNT)
            if int(self.sm_count) != self.sm_count:
                raise InputError(f"{where}.sm_count", f"must be a whole number, got {shown(self.sm_count)}")
            object.__setattr__(self, "sm_count", int(self.sm_count))
        require_positive(f"{where}.sync_mma_peak_fraction", self.sync_mma_peak_fraction)
        if self.sync_mma_peak_fraction > 1.0:
            raise InputError(f"{where}.sync_mma_peak_fraction", f"must be at most 1, got {shown(self.sync_mma_peak_fraction)}",
                             "it is a share of the dense tensor peak")
        require_positive(f"{where}.sustained_tensor_fraction", self.sustained_tensor_fraction)
        if self.sustained_tensor_fraction > 1.0:
            raise InputError(f"{where}.sustained_tensor_fraction",
                             f"must be at most 1, got {shown(self.sustained_tensor_fraction)}",
                             "it is a share of the datasheet's rates; raise peak_tflops instead")
        # a fraction times the slowest peak is a rate too: bounded as a peak stated directly
        # is (1e-30 gave 4.6e29 s steps while bf16: 1e-15 was refused)
        slowest_dtype = min(self.peak_flops_per_s, key=lambda d: float(self.peak_flops_per_s[d]))
        slowest = float(self.peak_flops_per_s[slowest_dtype])
        for name in ("sustained_tensor_fraction", "sync_mma_peak_fraction"):
            rate = slowest * float(getattr(self, name))
            if rate < MIN_RATE_PER_S:
                raise InputError(f"{where}.{name}", f"{getattr(self, name)!r} times the {slowest_dtype} peak "
                                 f"({slowest:g} FLOP/s) is {rate:g} FLOP/s, below the plausible minimum "
                                 f"{MIN_RATE_PER_S:g}", "check the number: it is a share of the peak, e.g. 0.67")
        object.__setattr__(self, "peak_flops_per_s", MappingProxyType(dict(self.peak_flops_per_s)))

    @property
    def fp8_gemm_any_layout(self) -> bool:
        """Whether the tensor cores run per-tensor FP8 GEMMs on operands in either layout (not only
        "TN", both K-major), so Transformer Engine keeps one FP8 copy of a tensor and no transposed
        one: compute capability 10.x and 11.x (NVIDIA/TransformerEngine@v2.14.1
        transformer_engine/common/transformer_engine.cpp:1099-1110
        ``nvte_is_non_tn_fp8_gemm_supported``; pytorch/csrc/quantizer.cpp:574-584 ``with_transpose
        = columnwise_usage && !is_non_tn_fp8_gemm_supported``). By generation
        (``FP8_ANY_LAYOUT_GENERATIONS``): the catalog's ``blackwell`` parts are all data-centre
        ones (B200/GB200 10.0, B300/GB300 10.3); Hopper and earlier need the transposed copy."""
        return self.generation in FP8_ANY_LAYOUT_GENERATIONS

    @property
    def is_cpu(self) -> bool:
        """Whether this "GPU" is a host CPU (generation ``cpu``: the ``cpu-generic`` preset, and the
        device ``paraplan calibrate`` writes for CPU ranks on gloo), which has no CUDA runtime."""
        return self.generation == "cpu"

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; error naming the dtypes this chip has if absent."""
        try:
            return float(self.peak_flops_per_s[dtype])
        except KeyError:
            raise InputError("dtype", f"{self.name} has no {dtype} peak",
                             "choose one of " + ", ".join(self.peak_flops_per_s)) from None

    def sustained_flops(self, dtype: str) -> float:
        """FLOP/s the cost models run ``dtype``'s tensor work at: the datasheet's dense peak
        times ``sustained_tensor_fraction``."""
        return self.peak_flops(dtype) * self.sustained_tensor_fraction
