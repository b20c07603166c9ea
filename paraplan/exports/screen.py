"""The rows of a ranked plan table that a framework refuses for certain, found by column
conditions over the whole table at once (numpy), so ``best_runnable`` boxes, validates and
checks one row at a time only the others (DeepSpeed refused the first 8,469 of llama3-70b's
13,500 plans on 64 H100, each through ``plan_fields`` and ``refusal``).

A condition here is a sufficient one: a row it marks fails one of the framework's own checks
(``refusal``), whichever of its checks fails first; it never decides the field a refusal names
(the order of the checks does), so it serves to skip rows, not to count them. Each framework
module's ``screened(col)`` lists its conditions beside the checks they mirror; ``col(name)`` is
the value ``plan_fields`` reads on every row (``column``), or None where the table does not
give it as plain numbers or text (then no condition on it marks a row).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

import numpy as np
import pandas as pd

from simulator.parallel_config import ParallelConfig

#: the ``ParallelConfig`` defaults: what ``plan_fields`` reads for a field a row leaves out
_DEFAULTS = {name: (field.default.value if isinstance(field.default, Enum) else field.default)
             for name, field in ParallelConfig.__dataclass_fields__.items()}


def column(plans: pd.DataFrame, name: str, software: Mapping[str, Mapping] | None,
           context: Mapping[str, Any]) -> np.ndarray | None:
    """Field ``name`` of every row as ``plan_fields`` reads it from ``{**software[dtype], **row,
    **context}`` (``best_runnable``'s row): the context's value, else the row's own (a missing
    value, None or NaN: the ``ParallelConfig`` default), else the stack's for the row's dtype,
    else the default. A float array for numbers and booleans, an object array of text for text;
    None where a value is neither (or the field has no default)."""
    default = _DEFAULTS.get(name)
    n = len(plans)
    if name == "dp" and name not in context and name not in plans.columns:
        return None                                     # plan_fields works it out from n_gpus
    if name in context:
        value = context[name]
        values = np.full(n, default if value is None or (isinstance(value, float) and value != value) else value,
                         dtype=object)
    elif name in plans.columns:
        series = plans[name]
        if series.dtype.kind in "biuf":
            values = series.to_numpy(dtype=float)
            if default is not None and not isinstance(default, str):
                values = np.where(np.isnan(values), float(default), values)
            return values if not np.isnan(values).any() else None
        if series.dtype.kind != "O":
            return None
        values = series.to_numpy(dtype=object)
        if not all(isinstance(v, str) for v in pd.unique(values)):
            return None                                 # None, NaN, enums, tuples: not screened
    else:
        keys = plans["dtype"].astype(str).to_numpy() if "dtype" in plans.columns else np.full(n, "None")
        values = np.full(n, default, dtype=object)
        for key in pd.unique(keys):                     # once per dtype, not per row
            value = dict((software or {}).get(str(key), {})).get(name)
            if value is not None and not (isinstance(value, float) and value != value):
                values[keys == key] = value
    kinds = {type(v) for v in pd.unique(values)} if n else set()
    if kinds and all(issubclass(k, str) for k in kinds):
        return values
    if kinds and all(issubclass(k, (bool, int, float, np.bool_, np.integer, np.floating)) for k in kinds):
        return values.astype(float)
    return None


def refused_rows(plans: pd.DataFrame, screened: Callable, software: Mapping[str, Mapping] | None,
                 context: Mapping[str, Any]) -> np.ndarray:
    """Which rows of ``plans`` the framework whose ``screened(col)`` is given refuses for certain
    (a boolean array; all False where a condition's columns are not plain)."""
    cache: dict[str, np.ndarray | None] = {}

    def col(name: str) -> np.ndarray | None:
        if name not in cache:
            cache[name] = column(plans, name, software, context)
        return cache[name]

    marked = np.zeros(len(plans), dtype=bool)
    for condition in screened(col):
        if condition is not None:
            marked |= condition
    return marked


def any_of(col: Callable, names: tuple[str, ...]) -> np.ndarray | None:
    """Rows where any of the number fields ``names`` is set (non-zero); None when one is not plain."""
    out = None
    for name in names:
        v = col(name)
        if v is None or v.dtype == object:
            return None
        out = (v != 0) if out is None else (out | (v != 0))
    return out


def where(*parts: np.ndarray | None) -> np.ndarray | None:
    """The rows where every part holds; None when a part is None (its column is not plain)."""
    if any(p is None for p in parts):
        return None
    out = parts[0]
    for p in parts[1:]:
        out = out & p
    return out


def number(col: Callable, name: str) -> np.ndarray | None:
    v = col(name)
    return None if v is None or v.dtype == object else v


def text_in(col: Callable, name: str, values: tuple[str, ...]) -> np.ndarray | None:
    """Rows whose text field ``name`` is exactly one of ``values`` (another spelling, which the
    config may still read as one of them, is not marked)."""
    v = col(name)
    return None if v is None or v.dtype != object else np.isin(v, values)


def effective_zero(col: Callable) -> np.ndarray | None:
    """The ZeRO stage ``plan_fields`` launches: a ZeRO-2 row priced as ZeRO-1
    (``zero2_grad_last_microbatch``) is 1."""
    zero, last = number(col, "zero_stage"), number(col, "zero2_grad_last_microbatch")
    if zero is None or last is None:
        return None
    return np.where((zero == 2) & (last != 0), 1.0, zero)
