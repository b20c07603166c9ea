"""Evaluate an elementwise cost function once per distinct input, for the planner's batches.

A search's rows repeat a few group shapes and message sizes many times over: on DeepSeek-V3
over 1,024-4,096 H100 the collective times of the memory and timing phases take 80.8 M
elements with 180 k distinct (bytes, group size, stride) triples among them. A function that
is elementwise (every output element a function of the same element of each input, no
reduction across elements) gives each element the same number whether it is computed on the
whole array or on one representative of its value, so ``once_per_distinct`` computes it on the
first occurrence of each distinct combination of the inputs and spreads the result back.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

#: fewest elements worth deduplicating: below this the hash tables cost more than the function
MIN_ELEMENTS = 4096


def distinct_elements(arrays, min_elements: int = MIN_ELEMENTS) -> tuple[np.ndarray, np.ndarray] | None:
    """(first index of each distinct combination, each element's combination) over 1-D arrays
    of one length (scalars and broadcast columns, constant, are left out of the key), the
    combinations numbered in order of first appearance; None when there is nothing to gain
    (fewer than ``min_elements`` elements, or no column that varies)."""
    cols = [a for a in arrays if a.ndim == 1 and a.strides[0] != 0]
    if not cols:
        return None
    n = len(cols[0])
    if n < max(min_elements, 1):
        return None
    code, radix, hashed = None, 1, []
    for c in cols:
        # whole numbers (group sizes, strides, most byte counts) are digits of one integer key
        if c.dtype.kind in "iuf":
            with np.errstate(invalid="ignore"):          # non-finite values: not whole, hashed
                whole = c.astype(np.int64)
            if c.dtype.kind == "f" and not (whole == c).all():
                hashed.append(c)
                continue
            lo, hi = int(whole.min()), int(whole.max())
            if lo >= 0 and radix * (hi + 1) < 2 ** 62:
                code = whole if code is None else code * (hi + 1) + whole
                radix *= hi + 1
                continue
        hashed.append(c)
    for c in hashed:
        values, uniques = pd.factorize(c, use_na_sentinel=False)
        if radix * len(uniques) >= 2 ** 62:
            code = pd.factorize(code)[0]
            radix = int(code.max()) + 1
        code = values.astype(np.int64) if code is None else code * len(uniques) + values
        radix *= len(uniques)
    code = pd.factorize(code)[0]
    n_distinct = int(code.max()) + 1
    first = np.empty(n_distinct, dtype=np.int64)
    first[code[::-1]] = np.arange(n - 1, -1, -1)     # the last write of a key is its first element
    return first, code


def once_per_distinct(fn, *args):
    """``fn(*args)`` for an elementwise ``fn`` of array and scalar arguments, computed on one
    element per distinct combination of the array arguments when that saves work (1-D arrays of
    one length; otherwise, or with a non-array result, ``fn(*args)`` itself): the same numbers,
    element by element. Arguments other than numpy arrays (scalars, specs) pass through as given."""
    arrays = [a for a in args if isinstance(a, np.ndarray) and a.ndim]
    if not arrays or any(a.ndim != 1 or len(a) != len(arrays[0]) for a in arrays):
        return fn(*args)
    found = distinct_elements(arrays)
    if found is None or len(found[0]) * 2 > len(arrays[0]):
        return fn(*args)
    first, inverse = found
    out = fn(*(a[first] if isinstance(a, np.ndarray) and a.ndim else a for a in args))
    if not isinstance(out, np.ndarray) or out.shape != first.shape:
        return fn(*args)
    return out[inverse]
