"""The searches' progress: ``plan_serving`` reports its stages and, within a batch search, the
candidates priced chunk by chunk (DeepSeek-R1 on 64 B200 searched 2-4 s with no bar below 512
GPUs, 1.2 s of it one call); ``serve plan`` and pooled ``plan`` show it as ``plan`` does (a bar
on stderr past ``PROGRESS_AFTER_S``, on a terminal only: nothing in a pipe or beside --json)."""
from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import paraplan.cli as cli
import paraplan.commands.plan as plan_command
import paraplan.commands.serve as serve_command
from paraplan.cli import main
from paraplan.serving_api import serving_context
from planners.serving import progress as serving_progress
from planners.serving.progress import STAGE_UNITS, Stages, in_chunks
from planners.serving.search import plan_serving

POOLED = str(Path(__file__).resolve().parents[1] / "examples" / "clusters" / "a100-h100.yaml")
SERVE = ("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8", "--isl", "1024", "--osl", "1024",
         "--ttft-ms", "1000", "--tpot-ms", "50")
POOLED_PLAN = ("plan", "-m", "gpt3-1.3b", "-c", POOLED, "--global-batch", "512")


def _search(progress=None, modes=("agg", "disagg")):
    return plan_serving(serving_context("llama3.1-8b", "dgx-h100"), 8, 1024, 1024, 1000.0, 50.0, modes=modes,
                        progress=progress)


def test_in_chunks_joins_the_pieces_as_one_call_and_counts_the_rows(monkeypatch):
    monkeypatch.setattr(serving_progress, "CHUNK_ROWS", 3)
    rows, batch = np.arange(10), np.arange(10.0) + 1.0
    run = lambda r, b: (b * 2.0 > 9.0, b + r, 7.0)         # noqa: E731 (a scalar column, as combine's)
    parts = []
    got = in_chunks(run, rows, batch, lambda done, n: parts.append((done, n)))
    assert parts == [(3, 10), (6, 10), (9, 10), (10, 10)]
    assert got[0].tolist() == [False] * 4 + [True] * 6
    assert got[1].tolist() == [1.0 + 2.0 * k for k in range(10)]
    assert got[2].tolist() == [7.0] * 10


def test_stages_rise_to_the_total_and_pass_over_a_skipped_stage():
    seen = []
    stages = Stages(lambda d, t, s: seen.append((d, t, s)), ("a", "b", "c"))
    stages.start("a")
    stages.part(1, 3)
    stages.part(3, 3)           # the stage's last chunk: one unit short of its end
    stages.start("c")           # "b" found nothing to price
    stages.part(1, 2)
    stages.end()
    assert seen == [(0, 300, "a"), (33, 300, "a, 1 of 3 candidates"), (99, 300, "a, 3 of 3 candidates"),
                    (200, 300, "c"), (250, 300, "c, 1 of 2 candidates"), (300, 300, "done")]


def test_a_serving_search_reports_each_stage_then_the_candidates_it_prices():
    seen = []
    plan = _search(lambda done, total, step="": seen.append((done, total, step)))
    # both modes: 2 aggregated stages + 3 disaggregated + the ranking, STAGE_UNITS each
    assert {t for _, t, _ in seen} == {6 * STAGE_UNITS}
    starts = [(d, s) for d, _, s in seen if d % STAGE_UNITS == 0]
    assert starts == [(0, "aggregated layouts"), (100, "aggregated batches"), (200, "disaggregated pairings"),
                      (300, "disaggregated batches"), (400, "pairings the fronts dropped"), (500, "ranking"),
                      (600, "done")]
    done = [d for d, _, _ in seen]
    assert done == sorted(set(done)) and done[-1] == 600
    # one chunk each here: a batch search's stage stops one unit short of its end, all priced
    for d, _, step in seen:
        if d % STAGE_UNITS:
            assert d % STAGE_UNITS == STAGE_UNITS - 1
            n_done, n = (int(x.replace(",", "")) for x in re.fullmatch(r".*, ([\d,]+) of ([\d,]+) candidates", step)
                         .groups())
            assert n_done == n > 0
    assert plan.best is not None
    only = []
    _search(lambda done, total, step="": only.append((done, total, step)), modes=("disagg",))
    assert [s for d, _, s in only if d % STAGE_UNITS == 0] == ["disaggregated pairings", "disaggregated batches",
                                                                "pairings the fronts dropped", "ranking", "done"]
    assert only[-1][:2] == (400, 400)


def test_pricing_in_chunks_moves_the_stage_and_changes_no_number(monkeypatch):
    whole = _search().candidates
    monkeypatch.setattr(serving_progress, "CHUNK_ROWS", 256)
    seen = []
    chunked = _search(lambda done, total, step="": seen.append((done, total, step)))
    assert chunked.candidates.equals(whole)
    agg = [(d, s) for d, _, s in seen if 100 < d < 200]
    n = int(re.search(r"of ([\d,]+) candidates", agg[0][1]).group(1).replace(",", ""))
    assert n > 256 * 4          # several chunks
    # each chunk of 256: the stage's share of the candidates priced, at most 99 of its 100 units
    expected = sorted({100 + min(STAGE_UNITS * min(256 * k, n) // n, STAGE_UNITS - 1)
                       for k in range(1, -(-n // 256) + 1)} - {100})
    assert [d for d, _ in agg] == expected
    done = [d for d, _, _ in seen]
    assert done == sorted(set(done)) and seen[-1] == (600, 600, "done")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _on_a_terminal(monkeypatch, capsys, args) -> tuple[str, str]:
    """``paraplan args`` with stderr a terminal and the bar due at once: (stdout, stderr)."""
    monkeypatch.setattr(serve_command, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(plan_command, "PROGRESS_AFTER_S", 0.0)
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    with pytest.raises(SystemExit) as end:
        main(list(args), prog_name="paraplan")
    assert end.value.code in (0, None)
    return capsys.readouterr().out, err.getvalue()


@pytest.mark.parametrize("args", [SERVE, POOLED_PLAN], ids=["serve plan", "pooled plan"])
def test_on_a_terminal_the_bar_rises_to_100_percent_and_stdout_carries_none_of_it(monkeypatch, capsys, args):
    out, err = _on_a_terminal(monkeypatch, capsys, args + ("--json",))
    shares = [int(x) for x in re.findall(r"(\d+)%", err)]
    assert len(set(shares)) >= 3, err           # moving, not 0 then 100
    assert shares == sorted(shares) and shares[-1] == 100
    json.loads(out)                             # the JSON alone
    assert "%" not in out


@pytest.mark.parametrize("args", [SERVE, POOLED_PLAN], ids=["serve plan", "pooled plan"])
@pytest.mark.parametrize("fmt", [(), ("--json",), ("--csv",)], ids=["table", "json", "csv"])
def test_off_a_terminal_no_bar_is_written(monkeypatch, args, fmt):
    monkeypatch.setattr(serve_command, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(plan_command, "PROGRESS_AFTER_S", 0.0)
    res = CliRunner().invoke(main, list(args + fmt))
    assert res.exit_code == 0, res.output
    assert res.stderr == ""
    assert "searching" not in res.stdout and not re.search(r"\d%\s*$", res.stdout, re.M)
    if fmt == ("--json",):
        json.loads(res.stdout)


def test_the_bar_waits_for_progress_after_s(monkeypatch, capsys):
    # a search faster than PROGRESS_AFTER_S shows no bar even on a terminal
    monkeypatch.setattr(cli, "stderr_is_a_terminal", lambda: True)
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    bar = cli.LazyBar("searching", after_s=3600.0)
    for k in range(5):
        bar(k, 4)
    bar.close()
    assert err.getvalue() == ""
