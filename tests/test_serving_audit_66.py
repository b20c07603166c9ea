"""Serving surfaces a user audit (session 66) found broken: an output path of blanks written as a
file named " " into the working folder. Each test asserts the exact error line and exit code."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from paraplan.cli import main

REPO = Path(__file__).resolve().parents[1]
SIM = ["serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100"]


def _run(args):
    result = CliRunner().invoke(main, args)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    return result, lines


# --- an output path of blanks -------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    SIM,
    [*SIM, "--emit"],
    ["serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8", "--max-batch", "16", "--csv"],
])
@pytest.mark.parametrize("blank", [" ", "   ", "\t"])
def test_an_output_path_of_blanks_is_refused_and_nothing_is_written(tmp_path, monkeypatch, args, blank):
    """``--out " "`` wrote the report to a file named " " in the working folder and said
    "wrote  " (exit 0)."""
    monkeypatch.chdir(tmp_path)
    result, lines = _run([*args, "--out", blank])
    assert result.exit_code == 2
    assert lines == ["error: --out: the file name is only spaces or tabs (give a file name)"]
    assert list(tmp_path.iterdir()) == []


def test_validate_serving_refuses_an_output_path_of_blanks(tmp_path, monkeypatch):
    runs = REPO / "paraplan" / "data" / "validation" / "serving_runs.csv"
    small = tmp_path / "runs.csv"
    small.write_text("".join(runs.read_text().splitlines(keepends=True)[:3]))
    monkeypatch.chdir(tmp_path)
    result, lines = _run(["validate", "serving", str(small), "--out", " "])
    assert result.exit_code == 2
    assert lines == ["error: --out: the file name is only spaces or tabs (give a file name)"]
    assert [p.name for p in tmp_path.iterdir()] == ["runs.csv"]
