"""The validation files bundled in ``paraplan/data/validation`` are the shared ones (or a
prefix of them in time: every bundled row is the shared row of the same id, unchanged)."""
import json

import pandas as pd
import pytest

from paraplan.validation.datasets import (BUNDLED_DIR, HETEROGENEOUS_RUNS, PUBLISHED_RUNS, SERVING_RUNS,
                                          shared_dir, validation_file)


def test_resolver_prefers_the_shared_copy_and_falls_back_to_the_bundled_one(tmp_path, monkeypatch):
    monkeypatch.setenv("PARAPLAN_VALIDATION_DIR", str(tmp_path))
    assert validation_file(PUBLISHED_RUNS) == BUNDLED_DIR / PUBLISHED_RUNS
    (tmp_path / PUBLISHED_RUNS).write_text("id\n")
    assert validation_file(PUBLISHED_RUNS) == tmp_path / PUBLISHED_RUNS


@pytest.mark.parametrize("name", [PUBLISHED_RUNS, SERVING_RUNS])
def test_every_bundled_csv_row_equals_the_shared_row_of_its_id(name):
    shared = shared_dir() / name
    if not shared.is_file():
        pytest.skip("../shared/validation not beside the checkout")
    ours = pd.read_csv(BUNDLED_DIR / name, dtype=str, keep_default_na=False)
    theirs = pd.read_csv(shared, dtype=str, keep_default_na=False)
    assert ours.id.is_unique
    missing_columns = set(ours.columns) - set(theirs.columns)
    assert not missing_columns
    merged = ours.merge(theirs[list(ours.columns)], on="id", how="left", suffixes=("", "_shared"),
                        indicator=True)
    assert (merged["_merge"] == "both").all(), "bundled ids missing from the shared file"
    for col in ours.columns:
        if col != "id":
            differ = merged[merged[col] != merged[col + "_shared"]]
            assert differ.empty, f"{name}: column {col} differs on {differ.id.head(3).tolist()}"


def test_bundled_heterogeneous_runs_are_the_shared_ones():
    shared = shared_dir() / HETEROGENEOUS_RUNS
    if not shared.is_file():
        pytest.skip("../shared/validation not beside the checkout")
    ours = {e["_file"]: e for e in json.loads((BUNDLED_DIR / HETEROGENEOUS_RUNS).read_text())["runs"]}
    theirs = {e["_file"]: e for e in json.loads(shared.read_text())["runs"]}
    assert ours and all(theirs.get(k) == v for k, v in ours.items())
