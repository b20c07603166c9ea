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


def _pad_header(source: Path, target: Path, names: tuple[str, ...]) -> Path:
    """``source`` with a space before each of ``names`` in its header line (as a hand-edited
    ``a, b`` header writes them); the data rows unchanged."""
    lines = source.read_text().splitlines(keepends=True)
    lines[0] = ",".join(f" {n}" if n in names else n for n in lines[0].rstrip("\r\n").split(",")) + "\n"
    target.write_text("".join(lines))
    return target


def _predictions(path: Path) -> list[dict]:
    result = run("validate", "published" if path.name.startswith("pub") else "serving", path, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_spaces_around_a_published_column_name_do_not_drop_the_column(tmp_path):
    # ' framework' was looked up as 'framework', found missing, and the row ran on megatron-core
    # (1.2497 s) instead of the stated megatron-lm 2022 stack (1.4075 s)
    plain = _one_row(DATA / "published_runs.csv", tmp_path / "pub.csv", lambda r: r["run_id"] == "KOR22-T5-22B-full")
    padded = _pad_header(plain, tmp_path / "pub_padded.csv",
                         ("framework", "framework_version", "gpus_per_node", "scaleout_gbps_per_gpu", "tp"))
    want = _predictions(plain)
    assert want[0]["status"] == "ok" and "framework not stated" not in want[0]["assumptions"], want
    assert _predictions(padded) == want


def test_spaces_around_a_serving_column_name_do_not_drop_the_column(tmp_path):
    plain = _one_row(DATA / "serving_runs.csv", tmp_path / "serv.csv",
                     lambda r: r["mode"] == "agg" and r["tp_size"] not in ("", "0", "1") and r["backend_version"])
    padded = _pad_header(plain, tmp_path / "serv_padded.csv", ("tp_size", "backend_version", "precision"))
    want = _predictions(plain)
    assert want and all(r["status"] == "ok" for r in want), want
    assert _predictions(padded) == want
