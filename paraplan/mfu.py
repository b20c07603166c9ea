"""MFU as every command shows it; the convention lives in ``hardware_specs.mfu_reference`` so
the planner's explanation (a lower layer) shows it the same way."""
from hardware_specs.mfu_reference import mfu_column, mfu_pct, reference_dtype

__all__ = ["mfu_column", "mfu_pct", "reference_dtype"]
