"""Where the public validation files are: ``../shared/validation/`` beside the checkout when it
is there (the current files, which grow between releases), else the copy bundled in
``paraplan/data/validation/`` (so a fresh clone, or an installed package, can reproduce the
accuracy table on its own; ``paraplan/data/SOURCES.md`` states where each file comes from and
its license). ``tests/test_bundled_data.py`` checks that every bundled row is the shared row of
the same id, unchanged.
"""
from __future__ import annotations

import os
from pathlib import Path

#: the copy shipped with the package
BUNDLED_DIR = Path(__file__).resolve().parents[1] / "data" / "validation"
#: ``../shared/validation`` relative to the project root (the checkout holding ``paraplan/``)
SHARED_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "validation"
#: published training runs, measured serving runs, mixed-cluster (Sailor) runs
PUBLISHED_RUNS = "published_runs.csv"
SERVING_RUNS = "serving_runs.csv"
HETEROGENEOUS_RUNS = "heterogeneous/sailor_runs.json"


def shared_dir() -> Path:
    """The shared validation folder: ``$PARAPLAN_VALIDATION_DIR`` if set, else ``../shared/validation``."""
    env = os.environ.get("PARAPLAN_VALIDATION_DIR")
    return Path(env) if env else SHARED_DIR


def validation_file(name: str) -> Path:
    """Path of validation file ``name`` (e.g. ``published_runs.csv``): the shared copy when it
    exists, else the bundled one."""
    shared = shared_dir() / name
    return shared if shared.is_file() else BUNDLED_DIR / name
