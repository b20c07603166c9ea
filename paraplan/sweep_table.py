"""The table of a one-field sweep (``paraplan.api.sweep``, ``paraplan.serving_api.serve_sweep``):
one row per swept value, a value that could not run keeping its row with its numbers empty."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd


def sweep_table(rows: Sequence[Mapping[str, Any]], failed: Sequence[bool],
                template: Sequence[str]) -> pd.DataFrame:
    """``rows`` as a DataFrame with every result column, in the order the successful rows give
    them (``template``, the columns of a successful row, where none succeeded).

    A failed row (``failed``) holds only its sweep keys and error; its result columns are empty.
    Without a failure the dtypes are ``pd.DataFrame(rows)``'s (integers stay int64). Where a
    failure leaves a hole in a column the successful rows hold as integers or booleans, that
    column is pandas' nullable ``Int64`` / ``boolean`` (``<NA>`` in the hole; ``tp`` stays 8, not
    8.0); float columns hold NaN, text and object columns NaN/None. Where no value ran the result
    columns are all NaN, dtype float64 (pandas' type for a column no row fills), the text ones
    (``config``, ``model``) too: there is no row to type them by; ``df[c].isna().all()`` holds.
    A column whose values are not all integers (booleans) and holes, e.g. a swept column given
    ``[nan, "80", 40]``, keeps the values as given (not cast)."""
    ok = [r for r, bad in zip(rows, failed) if not bad]
    columns = list(dict.fromkeys(k for r in (ok or [dict.fromkeys(template)]) for k in r))
    columns += [k for r in rows for k in r if k not in columns]       # a failed row's own keys
    columns = list(dict.fromkeys(columns))
    df = pd.DataFrame(list(rows), columns=columns)
    if not ok or len(ok) == len(rows):
        return df
    typed = pd.DataFrame(ok, columns=columns)
    for c in columns:
        kind = typed[c].dtype.kind
        values = [r.get(c) for r in rows]
        if kind in "iub" and df[c].isna().any() and all(_missing(v) or _fits(v, kind) for v in values):
            df[c] = pd.array(values, dtype="Int64" if kind != "b" else "boolean")
    return df


def _missing(value: Any) -> bool:
    """None, NaN or pandas' NA: a hole the nullable dtype holds as ``<NA>``."""
    return value is None or value is pd.NA or (isinstance(value, (float, np.floating)) and np.isnan(value))


def _fits(value: Any, kind: str) -> bool:
    """``value`` is what a nullable column of numpy ``kind`` ("i"/"u" integers, "b" booleans)
    holds as it is: a column whose values are not all such (a swept ``["80", 40]``, a failed
    row's NaN beside them) keeps the values as given, an object column, rather than raise."""
    if kind == "b":
        return isinstance(value, (bool, np.bool_))
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
