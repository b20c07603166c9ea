"""Where no swept value ran, the result columns are float64 NaN (text ones too), and the
docstring says so; it said object dtype, which no such table had (``api.sweep`` of tp 3 and 5 of
llama3-8b on 8 H100s, both failing: 119 float64 result columns, none object)."""
from __future__ import annotations

import numpy as np

from paraplan.sweep_table import sweep_table


def test_no_value_ran_gives_float_nan_columns_as_documented():
    rows = [{"sweep_field": "tp", "sweep_value": 3, "error": "tp: 3 does not divide 8"},
            {"sweep_field": "tp", "sweep_value": 5, "error": "tp: 5 does not divide 8"}]
    df = sweep_table(rows, [True, True], ["sweep_field", "sweep_value", "config", "step_time_s", "tp"])
    for c in ("config", "step_time_s", "tp"):
        assert df[c].dtype == np.float64 and df[c].isna().all(), (c, df[c].dtype)
    doc = sweep_table.__doc__
    assert "float64" in doc and "object dtype" not in doc
