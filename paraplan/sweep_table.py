"""The table of a one-field sweep (``paraplan.api.sweep``, ``paraplan.serving_api.serve_sweep``):
one row per swept value, a value that could not run keeping its row with its numbers empty."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

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
    (``config``, ``model``) too: there is no row to type them by; ``df[c].isna().all()`` holds."""
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
        if kind in "iub" and df[c].isna().any():
            df[c] = pd.array([r.get(c) for r in rows], dtype="Int64" if kind != "b" else "boolean")
    return df
