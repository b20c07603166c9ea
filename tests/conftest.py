"""Fixtures several test modules share (computed once per test session)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def bundled_rows_by_generation():
    """The bundled published runs, prepared for prediction and split by GPU generation."""
    from paraplan.validation.datasets import BUNDLED_DIR, PUBLISHED_RUNS
    from paraplan.validation.fit import by_generation
    from paraplan.validation.predict import prepare
    from paraplan.validation.published import read_runs
    return by_generation(prepare(read_runs(BUNDLED_DIR / PUBLISHED_RUNS).to_dict("records")))


def cores_for_this_worker() -> int:
    """Cores one test may keep busy: all of them in a plain run, an equal share of them when
    pytest-xdist runs several workers (``-n``), so tests that start their own processes (the
    notebooks' kernels, the fuzz cases) do not oversubscribe the machine."""
    import os
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return max(1, (os.cpu_count() or 1) // max(1, workers))
