"""``read_runs`` keeps a version, an id or a stated size as the text written: pandas read a
``framework_version`` column of 26.10 as the float 26.1 whenever no row of the file held text
there, so the same row was priced on another release's stack (megatron-bridge 25.11's, not
26.08's) depending on the rows beside it."""
import csv

import pytest

from paraplan.validation.datasets import BUNDLED_DIR, PUBLISHED_RUNS
from paraplan.validation.published import read_runs, validate_rows

ROWS = list(csv.DictReader(open(BUNDLED_DIR / PUBLISHED_RUNS, newline="", encoding="utf-8")))
#: a Megatron-Bridge 26.06 row measured in tokens per second per GPU
MB = next(r for r in ROWS if r["framework"] == "megatron-bridge" and r["framework_version"] == "26.06"
          and r["measured_metric"] == "tokens_per_s_per_gpu")


def _write(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(ROWS[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_a_version_is_read_as_written_whatever_the_other_rows_hold(tmp_path):
    row = dict(MB, framework_version="26.10")
    alone = _write(tmp_path / "alone.csv", [row])
    beside = _write(tmp_path / "beside.csv", [row, dict(MB, id="X:tokens_per_s_per_gpu", run_id="X",
                                                            framework_version="26.04.01")])
    assert list(read_runs(alone).framework_version) == ["26.10"]
    a, b = validate_rows(read_runs(alone)), validate_rows(read_runs(beside))
    assert a.status.iloc[0] == "ok" and a.predicted.iloc[0] == b.predicted.iloc[0]
    # 26.10 has no profile: the newest profiled release before it is 26.08 (26.1 took 25.11's)
    assert "megatron-bridge 26.10 has no profile of its own" in a.assumptions.iloc[0]
    assert "the profile of 26.08" in a.assumptions.iloc[0]


@pytest.mark.parametrize("column, text", [("framework_version", "0.20"), ("run_id", "1.10"),
                                          ("params_b", "6.70"), ("id", "007")])
def test_text_columns_keep_their_digits(tmp_path, column, text):
    path = _write(tmp_path / "runs.csv", [dict(MB, **{column: text})])
    assert read_runs(path)[column].iloc[0] == text
