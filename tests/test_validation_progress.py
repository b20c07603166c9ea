"""Progress of the long validation paths, and the validate examples a user runs from --help."""
from __future__ import annotations

import json
import re
import shlex

import numpy as np
import pandas as pd
from click.testing import CliRunner

from paraplan.cli import main
from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
from paraplan.validation.predict import prepare
from paraplan.validation.published import read_runs, validate_rows


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_validate_rows_reports_rows_read_then_rows_predicted_per_step_model_call():
    """`validate published` drew its bar from one call per row made after every row was predicted:
    0% for the whole 5 s of work, then 100% at once, with an ETA of 3 hours (1 row in 4.9 s, 1,502
    to go). The calls now follow the work: each row read (of 2n, an upper bound), then the rows
    of each step-model call (of n + rows predicted)."""
    df = read_runs(validation_file(PUBLISHED_RUNS))
    df = df[df["run_id"].astype(str).str.startswith("KOR22")]
    n = len(df)
    prepared = prepare(df.to_dict("records"))
    calls = []
    results = validate_rows(df, progress=lambda done, total: calls.append((done, total)))
    reading, predicting = calls[:n], calls[n:]
    assert reading == [(i, 2 * n) for i in range(1, n + 1)]
    total = n + len(prepared)
    assert total == n + int((results.status == "ok").sum())
    sizes = [len(idx) for *_, idx in prepared.groups]
    assert len(sizes) >= 2          # the predicting phase moves in steps, not at once
    assert predicting == [(n + int(s), total) for s in np.cumsum(sizes)] + [(total, total)]


def test_validate_published_json_off_a_terminal_carries_no_progress_text():
    r = run("validate", "published", "--source", "KOR22", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert rows and all(row["source"] == "KOR22" for row in rows)
    assert "predicting" not in r.stderr and "\r" not in r.stderr and "%" not in r.stderr


def test_cross_validate_off_a_terminal_writes_a_line_per_refit(monkeypatch):
    """--cross-validate takes minutes; its click bar was hidden off a terminal, so a log got
    nothing until the end. It now writes step_bar's lines there (every PROGRESS_LINE_S seconds,
    0 here: at each refit but the last)."""
    import paraplan.cli
    import paraplan.validation.fit as fit
    from paraplan.validation.predict import predict
    monkeypatch.setattr(paraplan.cli, "PROGRESS_LINE_S", 0.0)
    seen = []

    def refits(prepared, progress=None, held_out=None, **_):      # the committed models, no refit
        for src in sorted(held_out):
            seen.append(src)
            progress(src)
        return predict(prepared)
    monkeypatch.setattr(fit, "cross_validate", refits)
    r = run("validate", "published", "--cross-validate", "--json")
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("refitting without each source: ")]
    k = len(seen)
    assert k >= 10 and len(lines) == k        # 0 of k (before the first refit) to k - 1 of k
    assert re.fullmatch(rf"refitting without each source: 0 of {k} sources \(0%\) in \d+ s", lines[0])
    assert re.fullmatch(rf"refitting without each source: 1 of {k} sources \(\d+%\), without {seen[0]}, in \d+ s",
                        lines[1])
    json.loads(r.stdout)


def test_serving_fit_cross_validation_says_each_refit_of_how_many(monkeypatch, capsys):
    import paraplan.validation.serving_fit as sf
    df = pd.DataFrame({"silicon_ttft_ms": [10.0, 20.0, 30.0], "silicon_tpot_ms": [1.0, 2.0, 3.0],
                       "backend": ["vllm", "sglang", "vllm"], "mode": ["agg"] * 3, "id": ["a", "b", "c"]})

    class Prep:
        groups = ()
    monkeypatch.setattr(sf, "fit_all", lambda *a, **k: {})
    monkeypatch.setattr(sf, "evaluate_prepared", lambda prep, profiles: (np.array([11.0, 22.0, 33.0]),
                                                                          np.array([1.1, 2.2, 3.3])))
    cv = sf.cross_validate(df, "backend", {}, Prep(), maxiter=7)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "  refitting without each of 2 backend values (7 Nelder-Mead iterations each)"
    assert re.fullmatch(r"  held out backend=sglang: 1 rows \(1 of 2, \d+ s\)", err[1])
    assert re.fullmatch(r"  held out backend=vllm: 2 rows \(2 of 2, \d+ s\)", err[2])
    assert sorted(cv.rel_error.round(6)) == [0.1] * 6


def _help_examples(*command) -> list[list[str]]:
    text = run(*command, "--help").stdout
    return [shlex.split(ln.strip(), comments=True)[1:] for ln in text.splitlines() if ln.strip().startswith("paraplan ")]


def test_validate_help_examples_run_from_any_folder(tmp_path, monkeypatch):
    """From /tmp, `validate published runs.csv ...`, `validate serving ../shared/validation/serving_runs.csv`
    and `validate serving --explain ID` were refused (no such file, no such row): examples name
    the bundled data and a real row id now."""
    monkeypatch.chdir(tmp_path)
    examples = _help_examples("validate") + [e for e in _help_examples("validate", "serving") if "--plot" not in e]
    examples += [e for e in _help_examples("validate", "published") if "--out" in e]
    assert len(examples) == 8
    for argv in examples:
        r = run(*argv)
        assert r.exit_code == 0, (argv, r.output)
    assert json.loads((tmp_path / "serving_errors.json").read_text())
    assert (tmp_path / "errors.csv").read_text().startswith("id,")
