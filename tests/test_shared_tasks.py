"""``vectorized._Shared``: the next chunk's memory tasks are shared by a pool's workers and the
process that joins them later; every task runs once and the results come back in task order."""
from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from planners.vectorized import _Shared

pytestmark = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")


def _square_and_pid(x):
    return x * x, os.getpid()      # (which process ran it varies run to run)


def _fail_on_three(x):
    if x == 3:
        raise ValueError("task 3")
    return x


def test_every_task_runs_once_in_order_in_the_workers_or_here():
    shared = _Shared(mp.get_context("fork").Pool(1), _square_and_pid, _square_and_pid, list(range(40)), 1)
    out = shared.run_rest()
    assert [v for v, _ in out] == [x * x for x in range(40)]


def test_a_worker_error_is_raised_here():
    shared = _Shared(mp.get_context("fork").Pool(1), _fail_on_three, _fail_on_three, [3], 1)
    with pytest.raises(ValueError, match="task 3"):
        shared.run_rest()


def test_each_result_is_reported_once():
    seen = []
    shared = _Shared(mp.get_context("fork").Pool(1), _square_and_pid, _square_and_pid, list(range(12)), 1)
    out = shared.run_rest(seen.append)
    assert sorted(v for v, _ in seen) == sorted(v for v, _ in out) == [x * x for x in range(12)]
