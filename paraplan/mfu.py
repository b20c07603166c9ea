"""MFU as every command shows it; the convention lives in ``hardware_specs.mfu_reference`` so
the planner's explanation (a lower layer) shows it the same way."""
import pandas as pd

from hardware_specs.gpu_spec import GPUSpec
from hardware_specs.mfu_reference import mfu_column, mfu_pct, reference_dtype


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


__all__ = ["mfu_column", "mfu_pct", "mfu_pct_columns", "reference_dtype"]
