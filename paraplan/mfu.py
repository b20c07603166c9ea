"""MFU as every command shows it; the convention lives in ``hardware_specs.mfu_reference`` so
the planner's explanation (a lower layer) shows it the same way."""
import pandas as pd

from hardware_specs.gpu_spec import GPUSpec
from hardware_specs.mfu_reference import mfu_column, mfu_pct, reference_dtype
from paraplan.validation.flops_conventions import palm_6n_attn

#: what each MFU counts, one line each (``paraplan simulate`` prints them under its table)
MFU_NOTES = ("mfu counts causal attention at half, s/2 keys a query (Megatron-Core's model FLOPs)",
             "mfu_palm counts 6N + 12 L H Q T a token: H heads x Q head dim, the full sequence T (PaLM app. B)")


def mfu_pct_columns(df: pd.DataFrame, gpu: GPUSpec) -> pd.DataFrame:
    """``df`` with the planner's ``mfu`` (and ``hfu``), fractions of each row's own dtype peak,
    replaced in place by ``mfu_bf16_pct`` (``hfu_...``): percent of ``gpu``'s reference peak, as
    every command shows MFU (``hardware_specs.mfu_reference``)."""
    out = df.copy()
    for name in ("mfu", "hfu"):
        if name in out.columns:
            pct = [float(mfu_pct(float(m), str(d), gpu)) for m, d in zip(out[name], out["dtype"])]
            out.insert(out.columns.get_loc(name), mfu_column(gpu, name), pct)
            out = out.drop(columns=name)
    return out


def palm_columns(report, model, gpu: GPUSpec) -> dict:
    """``palm_tflops_per_gpu`` and ``mfu_palm_bf16_pct`` (``mfu_column(gpu, "mfu_palm")``) of a
    simulated step: its model FLOPs in PaLM's convention (Chowdhery et al. 2022, "PaLM", arXiv
    2204.02311, appendix B: 6 N + 12 L H Q T a token, H heads of width Q, attention over the
    full sequence T, as the Llama 3 paper's Table 4 MFU cites it;
    ``flops_conventions.palm_6n_attn``) over the step time and GPUs, TFLOP/s, and as percent of the reference peak. ``model`` is the simulated one
    (its ``seq_len``); the step's sequences are ``report.tokens_per_step / seq_len``."""
    flops = palm_6n_attn(model, report.tokens_per_step / model.seq_len)
    dtype = report.config["dtype"]
    # the report's mfu is model_flops / (step x GPUs x the dtype's peak): the same peak
    fraction = report.mfu * flops / report.model_flops if report.model_flops > 0 else 0.0
    return {"palm_tflops_per_gpu": flops / report.step_time_s / report.n_gpus / 1e12,
            mfu_column(gpu, "mfu_palm"): float(mfu_pct(fraction, dtype, gpu))}


__all__ = ["MFU_NOTES", "mfu_column", "mfu_pct", "mfu_pct_columns", "palm_columns", "reference_dtype"]
