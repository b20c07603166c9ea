"""``serve plan --plot``: a front that rests on an unfitted prior (the default serving efficiency
of a generation nothing was fitted to, the MTP acceptance left out) says so on the figure, as
the training figures do (``paraplan.plots.prior_note``); a fitted one carries no such line."""
from __future__ import annotations

import re

import pytest

from cli_results import run


@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)


def _figure_texts(path) -> list[str]:
    """The texts of a matplotlib SVG (drawn as glyph paths, each preceded by its text as a comment)."""
    return re.findall(r"<!-- (.*?) -->", path.read_text())


@pytest.mark.parametrize("args, want", [
    (["-m", "llama3.1-8b", "-s", "mi300x-node"], ["no serving measurement of cdna3 GPUs was fitted"]),
    (["-m", "llama3.1-8b", "-s", "dgx-h100"], []),
    (["-m", "deepseek-v3", "-s", "dgx-b200", "--speculative-tokens", "2"],
     ["the draft acceptance is an unfitted prior"]),
    (["-m", "deepseek-v3", "-s", "dgx-b200", "--speculative-tokens", "2", "--draft-acceptance", "0.7"], []),
], ids=["cdna3-prior", "hopper-fitted", "mtp-acceptance-prior", "acceptance-given"])
def test_the_serving_pareto_figure_names_the_priors_it_rests_on(tmp_path, args, want):
    svg = tmp_path / "front.svg"
    r = run("serve", "plan", *args, "-n", "8", "--plot", svg)
    assert r.exit_code == 0, r.output
    texts = _figure_texts(svg)
    assert any("isl 1024 / osl 1024" in t for t in texts)           # the title: the texts are read
    priors = [t for t in texts if "unfitted prior" in t]
    assert len(priors) == len(want)
    for w in want:
        assert any(w in t for t in priors), (w, priors)
