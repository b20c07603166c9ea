"""Serving surfaces a user audit (session 66) found broken: a release tag the stack catalog lists
(vllm-0.14's ``nightly``) refused as "not a release", and an output path of blanks written as a
file named " " into the working folder. Each test asserts the exact error line and exit code, or
the exact agreement of ``serve plan`` and ``serve simulate`` on the same deployment."""
from __future__ import annotations

import json
import re
import shlex
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


# --- a tag a serving profile lists is a release the user may name ------------------------------

@pytest.mark.parametrize("version", ["nightly", "Nightly", "nightly-5b8c30d62b754b57"])
def test_a_tag_the_vllm_profile_lists_or_covers_prices_that_profile(version):
    """vllm-0.14.yaml lists ``nightly`` among its releases (`paraplan hardware stacks vllm-0.14`
    shows it) and the serving-runs file spells it ``nightly-<hash>``, which the profile covers; both
    were refused ("'nightly' is not a release", exit 2). They price vllm-0.14 exactly as vLLM's
    default (vllm-0.14 too), with no note: the profile lists the tag."""
    tagged, lines = _run([*SIM, "--backend-version", version, "--json"])
    assert tagged.exit_code == 0, tagged.output
    assert lines == []
    plain, _ = _run([*SIM, "--json"])
    a, b = json.loads(tagged.stdout), json.loads(plain.stdout)
    assert a["stack"] == b["stack"] == "vllm-0.14"
    for key in ("ttft_ms", "ttft_p90_ms", "tpot_ms", "tokens_per_s_per_gpu", "max_batch_per_rank"):
        assert a[key] == b[key]


def test_the_api_takes_the_listed_tag_as_the_cli_does():
    from paraplan.serving_api import serve_simulate
    tagged = serve_simulate("llama3.1-8b", "dgx-h100", backend_version="nightly").iloc[0]
    plain = serve_simulate("llama3.1-8b", "dgx-h100").iloc[0]
    assert tagged["backend"] == "vllm-0.14"
    assert tagged["tpot_ms"] == plain["tpot_ms"] and tagged["ttft_ms"] == plain["ttft_ms"]


@pytest.mark.parametrize("backend, version", [
    ("sglang", "nightly"),          # no SGLang profile lists it
    ("vllm", "gpt-oss-dev"),        # a tag of the serving-runs file no profile lists
    ("vllm", "nightly2"),           # not the listed tag, nor one following it with '.', '-', '+'
    ("vllm", "nightlyrc2"),         # StackSpec.covers takes an rc suffix for the files' cells, a user's tag not
    ("vllm", "vnightly"),           # nor a leading v
    ("vllm", "vvvnightly"),
    ("vllm", "nightly-"),           # a separator with nothing after it
    ("vllm", "nightly 0.11"),       # two words: covers() reads them as a build of the tag
    ("vllm", "nightly\n2"),
])
def test_a_tag_no_profile_of_the_framework_lists_is_still_refused(backend, version):
    result, lines = _run([*SIM, "-b", backend, "--backend-version", version])
    assert result.exit_code == 2
    assert lines == [f"error: --backend-version: {version!r} is not a release (give one such as 0.11.0 or 1.2.0rc6 "
                     "(numbers separated by dots, an optional rc / post / dev suffix), or leave it out for the newest "
                     "profile)"]


def test_a_plan_on_the_nightly_tag_prints_a_command_that_reprices_its_best_exactly():
    """serve plan --backend-version nightly prints its best as a serve simulate command carrying the
    tag; that command (which was refused) gives the plan's numbers to the last bit."""
    plan_args = ["serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8", "--max-batch", "64",
                 "--backend-version", "nightly"]
    text, _ = _run(plan_args)
    assert text.exit_code == 0, text.output
    command = re.search(r"as one deployment: paraplan (serve simulate .*)", text.stdout).group(1)
    assert "--backend-version nightly" in command
    best = json.loads(_run([*plan_args, "--json"])[0].stdout)["best"]
    sim, lines = _run([*shlex.split(command), "--json"])
    assert sim.exit_code == 0 and lines == []
    report = json.loads(sim.stdout)
    for key in ("ttft_ms", "ttft_p90_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_user"):
        assert report[key] == best[key]
    assert report["ttft_p90_ms"] >= report["ttft_ms"] and report["tokens_per_s_per_gpu"] > 0


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
