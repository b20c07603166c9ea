"""What the CLI shows a new user: errors that say how to fix them, consistent units and labels."""
from __future__ import annotations

from click.testing import CliRunner

from paraplan.cli import main


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_missing_input_files_say_how_to_fix_them(tmp_path):
    missing = tmp_path / "runs.csv"
    for args in (("validate", "published", missing), ("validate", "heterogeneous", tmp_path / "sailor.json"),
                 ("hardware", "show", tmp_path / "gpu.yaml")):
        line = one_line_error(run(*args))
        assert "no such file" in line and line.endswith(")") and "(check the path" in line, line
