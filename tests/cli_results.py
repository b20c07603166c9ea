"""Running the CLI in-process from a test, and the one-line error contract (``error: <field>:
<what> (<fix>)`` on stderr, exit 2, no traceback), shared by the CLI test modules."""
from __future__ import annotations

import subprocess

from click.testing import CliRunner

from paraplan.cli import main

#: a small pooled cluster: 16 A100 (two DGX A100 nodes) and 8 H100 (one DGX H100)
SMALL_MIXED = """
name: small-mixed
pools:
  - {name: a100, cluster: dgx-a100-80gb, gpus: 16}
  - {name: h100, cluster: dgx-h100, gpus: 8}
"""


def write_small_mixed(folder):
    """``SMALL_MIXED`` written to ``folder``/small.yaml; returns the path."""
    path = folder / "small.yaml"
    path.write_text(SMALL_MIXED)
    return path


def run(*args):
    """``paraplan ARGS`` in-process (arguments stringified, as a shell passes them)."""
    return CliRunner().invoke(main, [str(a) for a in args])


def completed(*args) -> subprocess.CompletedProcess:
    """``paraplan ARGS`` in-process, answered as ``subprocess.run(..., capture_output=True,
    text=True)`` answers (returncode, stdout, stderr apart), so a test written against a
    subprocess keeps its assertions without paying an interpreter start and the imports per call.
    An exception the CLI does not turn into its one-line error propagates (a subprocess would
    have exited 1 with a traceback)."""
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return subprocess.CompletedProcess(["paraplan", *map(str, args)], result.exit_code, result.stdout, result.stderr)


def one_line_error(result, *needles) -> str:
    """Exit 2, exactly one non-empty stderr line starting 'error: ', no traceback, each needle in
    it; returns that line."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
