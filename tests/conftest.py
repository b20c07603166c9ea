"""Fixtures several test modules share (computed once per test session)."""
from __future__ import annotations

import gc

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Move what each collected module keeps alive out of the garbage collector's reach.

    Collecting ~300 test modules imports numpy, pandas, scipy and the whole package and rewrites
    every module's asserts; the allocations of the rewrite trigger full collections that walk all
    those long-lived objects again and again. Freezing them after each module took a worker's
    collection from 18.3 s to 11.3 s on a 2-core VM (and the whole suite from 231 s to 204 s),
    with the same tests collected and run."""
    yield
    gc.freeze()


def pytest_collection_finish(session):
    """Free the garbage made while collecting (frozen objects are never collected), then freeze
    what the tests keep alive for the whole session."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Hand the frozen objects back to the garbage collector when the session ends, after
    pytest's own last collections (its unraisable-exception check collects 5 times at cleanup;
    cleanups run last registered first, so this one, registered before pytest's, runs after
    them). Unfrozen first, those 5 full collections walked every object collection keeps alive:
    1.2 s per worker; frozen, they walk only what the tests made, where their garbage is."""
    config.add_cleanup(gc.unfreeze)


@pytest.fixture(scope="session")
def bundled_prepared():
    """The bundled published runs prepared for prediction, with why each left-out row is left
    out: (rows as dicts, ``predict.Prepared``, {row id: skip reason}). Preparing every row takes
    seconds; under ``--dist loadscope`` a worker prepares them once for all its modules."""
    from paraplan.validation.datasets import BUNDLED_DIR, PUBLISHED_RUNS
    from paraplan.validation.predict import prepare
    from paraplan.validation.published import read_runs
    records = read_runs(BUNDLED_DIR / PUBLISHED_RUNS).to_dict("records")
    skipped: dict = {}
    prepared = prepare(records, on_skip=lambda i, reason: skipped.__setitem__(records[i]["id"], reason))
    return records, prepared, skipped


@pytest.fixture(scope="session")
def bundled_rows_by_generation(bundled_prepared):
    """The bundled published runs, prepared for prediction and split by GPU generation."""
    from paraplan.validation.fit import by_generation
    return by_generation(bundled_prepared[1])


def cores_for_this_worker() -> int:
    """Cores one test may keep busy: all of them in a plain run, an equal share of them when
    pytest-xdist runs several workers (``-n``), so tests that start their own processes (the
    notebooks' kernels, the fuzz cases) do not oversubscribe the machine."""
    import os
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return max(1, (os.cpu_count() or 1) // max(1, workers))


@pytest.fixture
def two_cores_and_no_ranks(monkeypatch):
    """A 2-core machine (a CPU measurement starts at most 8 ranks there), and no rank ever
    started: ``paraplan measure`` / ``calibrate`` refusals are checked before any launch."""
    torch = pytest.importorskip("torch")
    import os

    import torch.multiprocessing as mp
    if torch.cuda.is_available():
        pytest.skip("a CUDA host's ranks are GPUs, not bounded by its cores")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(mp, "start_processes", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ranks started")))
