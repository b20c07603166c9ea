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
