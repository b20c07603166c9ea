"""MFU as every command shows it: percent of the GPU's dense 16-bit peak, the dtype in the name.

Model FLOPs utilisation is the model's FLOPs per step over the time the GPUs' peak would need.
The simulator computes it against the peak of the row's own GEMM dtype (``StepReport.mfu``, a
fraction); tables, JSON, CSV and sweeps show it against one reference instead, so an fp8 plan
and a bf16 plan compare on one scale: the GPU's dense bf16 peak (fp16 on GPUs without bf16,
e.g. V100; fp32 on CPUs), in percent, in a column that names it (``mfu_bf16_pct``). This is
the convention of PaLM (Chowdhery et al. 2022, appendix B: MFU against the accelerator's peak
of the training precision, bf16) and of Megatron-LM's reported utilisation. Pooled (mixed)
clusters use it too, with the reference peaks summed over the plan's GPUs
(``HeteroReport.mfu_reference``; ``reference_name`` names pools whose references differ).
"""
from __future__ import annotations

from hardware_specs.gpu_spec import GPUSpec

_REFERENCES = ("bf16", "fp16", "fp32")


def reference_dtype(gpu: GPUSpec) -> str:
    """The dtype whose peak MFU is shown against: bf16, else fp16, else fp32, else the first."""
    for dtype in _REFERENCES:
        if dtype in gpu.peak_flops_per_s:
            return dtype
    return next(iter(gpu.peak_flops_per_s))


def reference_name(gpus) -> str:
    """The reference dtype of several GPUs (a pooled cluster's): ``bf16`` when they share it,
    else their references joined (``bf16_fp16`` for A100 beside V100)."""
    refs = sorted({reference_dtype(g) for g in gpus})
    return "_".join(refs)


def mfu_column(gpu: GPUSpec, name: str = "mfu") -> str:
    """``mfu_bf16_pct`` (or ``hfu_...``) for ``gpu``."""
    return f"{name}_{reference_dtype(gpu)}_pct"


def mfu_pct(fraction, dtype: str, gpu: GPUSpec):
    """``fraction`` of the ``dtype`` peak (the simulator's ``mfu``) as percent of the reference
    peak (scalars or arrays)."""
    return 100.0 * fraction * gpu.peak_flops(dtype) / gpu.peak_flops(reference_dtype(gpu))
