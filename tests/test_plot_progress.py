"""``paraplan plot`` reports progress on stderr as plan / sweep / validate do (``paraplan.cli.StepBar``:
a bar on a terminal, a line every ``PROGRESS_LINE_S`` seconds off one): a --best sweep over ten
batches ran 17 s with nothing on stderr."""
from __future__ import annotations

import functools

from click.testing import CliRunner

import paraplan.cli as cli
from paraplan import api
from paraplan.cli import main


def test_a_sweep_reports_each_value(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "PROGRESS_LINE_S", 0.0)       # a line at every report
    res = CliRunner().invoke(main, ["plot", "breakdown", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "16", "--tp", "2",
                                    "--global-batch", "32", "--field", "pp", "--values", "1,2,4",
                                    "-o", str(tmp_path / "b.png")])
    assert res.exit_code == 0, res.output
    assert "wrote" in res.stdout and "values of pp" not in res.stdout
    for done in (0, 1, 2):     # the last report (3 of 3) is the end: no line
        assert f"plotting 3 values of pp: {done} of 3 values" in res.stderr, res.stderr


def test_a_plan_search_reports_its_configurations(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "PROGRESS_LINE_S", 0.0)
    # smaller chunks than the planner's: this search of 6,246 configurations reports at 2 of its 3
    # chunks (the planner calls progress per chunk; chunks of 256 reported 24 times at 4x the time)
    real = api._planner()
    monkeypatch.setattr(api, "_planner", lambda: functools.partial(real, chunk_rows=2048, space_chunk_rows=2048))
    res = CliRunner().invoke(main, ["plot", "pareto", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "16",
                                    "--global-batch", "64", "-o", str(tmp_path / "p.png")])
    assert res.exit_code == 0, res.output
    assert "evaluating configurations: " in res.stderr and " configurations (" in res.stderr, res.stderr


def test_api_sweep_calls_progress_before_and_after_each_value():
    seen = []
    api.sweep(dict(model="llama3-8b", cluster="dgx-h100", gpus=16, global_batch=32), "tp", [1, 2],
              progress=lambda done, total: seen.append((done, total)))
    assert seen == [(0, 2), (1, 2), (2, 2)]
