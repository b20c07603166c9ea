"""Frame comparison for tests on large plan tables.

``pandas.testing.assert_frame_equal`` compares a categorical column twice: once value by value
(``_testing.assert_almost_equal`` boxes every element, about 15 microseconds a row with the
pyarrow-backed string categories the plan tables use, so several seconds on a table of 100,000
plans) and once as categories plus codes (``assert_categorical_equal``). With the category order
checked, equal categories and equal codes already mean equal values, so this helper checks each
categorical column by its categories (in order), ``ordered`` flag and codes, and hands everything
else (index, column names and order, the other columns' dtypes and values, ``check_exact`` and
the other keywords) to ``assert_frame_equal`` unchanged."""
from __future__ import annotations

import numpy as np
import pandas as pd


def assert_frame_equal(left: pd.DataFrame, right: pd.DataFrame, **kwargs) -> None:
    """``pd.testing.assert_frame_equal(left, right, **kwargs)`` with categorical columns compared
    by categories (in order), ``ordered`` and codes: the same verdict, without boxing each value."""
    assert isinstance(left, pd.DataFrame) and isinstance(right, pd.DataFrame)
    pd.testing.assert_index_equal(left.columns, right.columns)
    categorical = [i for i, (lt, rt) in enumerate(zip(left.dtypes, right.dtypes))
                   if isinstance(lt, pd.CategoricalDtype) or isinstance(rt, pd.CategoricalDtype)]
    if not categorical:
        pd.testing.assert_frame_equal(left, right, **kwargs)
        return
    left_codes, right_codes = left.copy(deep=False), right.copy(deep=False)
    for i in categorical:
        name = left.columns[i]
        lv, rv = left.iloc[:, i], right.iloc[:, i]
        assert isinstance(lv.dtype, pd.CategoricalDtype) and isinstance(rv.dtype, pd.CategoricalDtype), \
            f"column {name!r}: dtype {lv.dtype} != {rv.dtype}"
        assert lv.dtype == rv.dtype and lv.cat.ordered == rv.cat.ordered, f"column {name!r}: {lv.dtype} != {rv.dtype}"
        pd.testing.assert_index_equal(lv.cat.categories, rv.cat.categories, exact=True,
                                      obj=f"column {name!r} categories")
        assert len(lv) == len(rv), f"column {name!r}: {len(lv)} rows != {len(rv)}"
        lc, rc = lv.cat.codes.to_numpy(), rv.cat.codes.to_numpy()
        if not np.array_equal(lc, rc):
            row = int(np.flatnonzero(lc != rc)[0])
            raise AssertionError(f"column {name!r} differs first at row {row}: {lv.iloc[row]!r} != {rv.iloc[row]!r}")
        left_codes.isetitem(i, lc)
        right_codes.isetitem(i, rc)
    pd.testing.assert_frame_equal(left_codes, right_codes, **kwargs)
