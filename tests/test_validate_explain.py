"""``paraplan validate published --explain ID``: one row as the simulator reads it, and the step
behind its prediction; the numbers are the ones ``validate published`` reports for that row."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from paraplan.cli import main
from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file

ITER_ROW = "KOR22-T5-1T-selsp:iter_time_s"
MFU_ROW = "KOR22-T5-1T-selsp:mfu"
SKIPPED_ROW = "KOR22-530B-2240-full:mfu"        # no global batch in the source


@pytest.fixture(scope="module")
def kor22_csv(tmp_path_factory):
    """The public file's KOR22 rows (every row of the run, so FLOP-convention checks see the same
    rows), as a small file: the command reads and predicts it in a second."""
    df = pd.read_csv(validation_file(PUBLISHED_RUNS), dtype=str, keep_default_na=False)
    path = tmp_path_factory.mktemp("explain") / "kor22.csv"
    df[df["run_id"].str.startswith("KOR22")].to_csv(path, index=False)
    return path


def _run(*args):
    return CliRunner().invoke(main, ["validate", "published", *map(str, args)])


def _validated(csv) -> dict:
    res = _run(csv, "--json")
    assert res.exit_code == 0, res.output
    return {r["id"]: r for r in json.loads(res.stdout)}


@pytest.mark.parametrize("row_id", [ITER_ROW, MFU_ROW])
def test_the_explained_prediction_is_the_one_validate_reports(kor22_csv, row_id):
    res = _run(kor22_csv, "--explain", row_id, "--json")
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    listed = _validated(kor22_csv)[row_id]
    assert shown["status"] == "ok" and shown["metric"] == listed["metric"]
    assert shown["predicted"] == pytest.approx(listed["predicted"], rel=1e-12)
    assert shown["rel_error"] == pytest.approx(listed["rel_error"], rel=1e-9)
    assert shown["measured"] == listed["measured"]
    # the step behind it: an iteration-time row's prediction is the step time itself
    if row_id == ITER_ROW:
        assert shown["step"]["step_time_s"] == pytest.approx(shown["predicted"], rel=1e-12)
        assert sum(shown["step"]["time_breakdown_s"].values()) == pytest.approx(shown["predicted"], rel=1e-9)
    assert shown["stack"] == "megatron-lm-2022" and "tp8 pp64" in shown["config"]


def test_the_table_names_the_row_its_error_and_its_reading(kor22_csv):
    res = _run(kor22_csv, "--explain", ITER_ROW)
    assert res.exit_code == 0, res.output
    listed = _validated(kor22_csv)[ITER_ROW]
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["row", ITER_ROW]
    assert f"{100 * listed['rel_error']:+.2f}%" in lines[1]
    assert lines[2].startswith("read as  dp1 tp8 pp64 mb1") and "stack megatron-lm-2022" in lines[2]
    assert any(line.startswith("  step_time_s") for line in lines)        # simulate's breakdown follows


def test_a_skipped_row_says_why_and_is_not_an_error(kor22_csv):
    res = _run(kor22_csv, "--explain", SKIPPED_ROW)
    assert res.exit_code == 0, res.output
    assert res.stdout == f"row {SKIPPED_ROW}: skipped: needed field(s) empty: global_batch\n"
    shown = json.loads(_run(kor22_csv, "--explain", SKIPPED_ROW, "--json").stdout)
    assert shown["status"] == "skipped" and shown["measured"] == 42.1


@pytest.mark.parametrize("args, field", [
    (["--explain", "KOR22-T5-1T-selsp:iter_time"], "--explain"),      # a typo: the closest ids suggested
    (["--explain", " "], "--explain"),
    (["--explain", ITER_ROW, "--source", "KOR22"], "--source"),
    (["--explain", ITER_ROW, "--csv"], "--csv"),
    (["--explain", ITER_ROW, "--cross-validate"], "--cross-validate"),
])
def test_bad_explain_input_is_one_line(kor22_csv, args, field):
    res = _run(kor22_csv, *args)
    assert res.exit_code == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), res.stderr
    if args[1] == "KOR22-T5-1T-selsp:iter_time":
        assert ITER_ROW in lines[0]
