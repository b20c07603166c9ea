"""Cells and header errors of the validation CSV files: a column of true / false is booleans to
pandas (float(True) is 1: gpus_per_node 'true' was modelled as one GPU per node), and the hint
of a file with the wrong columns names the file the tool actually reads."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from cli_results import one_line_error, run

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "paraplan/data/validation"


def _one_row(source: Path, target: Path, pick, **changes) -> Path:
    with open(source, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if pick(r)][:1]
    assert rows
    rows[0].update(changes)
    with open(target, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return target


def test_a_published_row_saying_true_where_a_number_goes_is_skipped(tmp_path):
    path = _one_row(DATA / "published_runs.csv", tmp_path / "t.csv", lambda r: r["run_id"].startswith("KOR22"),
                    gpus_per_node="true")
    result = run("validate", "published", path, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["status"] for r in rows] == ["skipped"] * len(rows) and rows
    assert all(r["reason"] == "gpus_per_node 'true' is not a number" for r in rows), rows


def test_a_serving_row_saying_true_where_a_count_goes_is_skipped(tmp_path):
    path = _one_row(DATA / "serving_runs.csv", tmp_path / "s.csv", lambda r: r["mode"] == "agg" and r["tp_size"],
                    tp_size="true")
    result = run("validate", "serving", path, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    rows = rows if isinstance(rows, list) else rows.get("rows", rows)
    assert rows and all("tp_size 'true' is not a number" in str(r.get("reason")) for r in rows), rows


def test_a_file_with_other_columns_is_told_to_copy_a_file_that_exists(tmp_path):
    # the hint named shared/validation/published_runs.csv and ../shared/validation/serving_runs.csv,
    # paths that exist only beside some checkouts
    import re
    from paraplan.validation.datasets import PUBLISHED_RUNS, SERVING_RUNS, validation_file
    path = tmp_path / "s.csv"
    path.write_text("a;b\n1;2\n")
    for which, name in (("published", PUBLISHED_RUNS), ("serving", SERVING_RUNS)):
        line = one_line_error(run("validate", which, path), "use the columns of")
        hinted = re.search(r"use the columns of (\S+)\)$", line).group(1)
        assert hinted == str(validation_file(name)) and Path(hinted).is_file(), line
