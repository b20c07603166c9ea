"""A weight-format column whose every cell is a number is still text: ``validate serving`` read
gemm_quant_mode / moe_quant_mode / precision without forcing text, so a column of -1 (or 0, inf,
1e30) loaded as numbers, which ``_fmt`` took for empty cells and priced as the ``precision``
column's format (every row "ok"), while one cell -1 among text cells was skipped as an unknown
weight format. Read as text, a numeric cell is an unknown format wherever it stands; an empty
cell stays empty."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cli_results import run

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "paraplan/data/validation/serving_runs.csv"


def _rows(target: Path, **changes) -> Path:
    """Three bundled aggregated rows that state their weight formats, with ``changes`` in every row."""
    with open(RUNS, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["mode"] == "agg" and r["gemm_quant_mode"]][:3]
    assert len(rows) == 3
    for r in rows:
        r.update(changes)
    with open(target, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return target


def _records(path: Path) -> list[dict]:
    result = run("validate", "serving", path, "--json")
    assert result.exit_code == 0, result.output
    return [r for r in json.loads(result.stdout) if r["metric"] == "ttft_ms"]


@pytest.mark.parametrize("cell", ["-1", "0", "inf", "1e30"])
def test_a_numeric_format_column_is_an_unknown_format_in_every_row(tmp_path, cell):
    rows = _records(_rows(tmp_path / "q.csv", gemm_quant_mode=cell, moe_quant_mode=cell))
    assert [r["status"] for r in rows] == ["skipped"] * 3
    assert all(r["reason"].startswith(f"gemm_quant_mode: unknown weight format '{cell}'") for r in rows), rows


def test_a_numeric_precision_under_empty_format_columns_is_an_unknown_format(tmp_path):
    rows = _records(_rows(tmp_path / "p.csv", gemm_quant_mode="", moe_quant_mode="", precision="-1"))
    assert [r["status"] for r in rows] == ["skipped"] * 3
    assert all(r["reason"].startswith("precision: unknown weight format '-1' (gemm_quant_mode empty") for r in rows)


def test_empty_format_cells_stay_empty_and_take_the_precision(tmp_path):
    base = _records(_rows(tmp_path / "b.csv"))
    empty = _records(_rows(tmp_path / "e.csv", gemm_quant_mode="", moe_quant_mode=""))
    assert [r["status"] for r in base] == [r["status"] for r in empty] == ["ok"] * 3
    # the three rows state fp8 in precision and in both format columns: the same predictions
    assert [r["predicted"] for r in empty] == [r["predicted"] for r in base]
