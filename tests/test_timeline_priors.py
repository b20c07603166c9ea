"""``simulate --trace / --gantt``: timelines whose times rest on an unfitted efficiency prior
(MI300X: CDNA3, no fitted factor) say so in the Gantt title, the trace's ``otherData`` and the
"wrote ..." lines; on a fitted generation (H100: Hopper) they say nothing of a prior."""
from __future__ import annotations

import json
import re

import pytest

from cli_results import run
from hardware_specs.catalog import load_cluster
from paraplan import priors


@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)


@pytest.mark.parametrize("cluster, generation", [("mi300x-node", "cdna3"), ("dgx-h100", "hopper")])
def test_timelines_say_when_their_times_rest_on_the_prior(tmp_path, cluster, generation):
    prior = priors.is_prior(load_cluster(cluster))
    assert prior == (generation == "cdna3")
    trace, gantt = tmp_path / "t.json", tmp_path / "g.svg"
    r = run("simulate", "-m", "llama3-8b", "-c", cluster, "--global-batch", "64", "--tp", "1", "--pp", "2",
            "--trace", trace, "--gantt", gantt)
    assert r.exit_code == 0, r.output
    other = json.loads(trace.read_text())["otherData"]
    assert other["efficiency_generation"] == generation and other["efficiency_fitted"] is (not prior)
    words = f"[rests on the {generation} efficiency model, an unfitted prior]"
    title = [t for t in re.findall(r"<!-- (.*?) -->", gantt.read_text()) if "makespan" in t]
    assert len(title) == 1 and (words in title[0]) == prior
    wrote = [ln for ln in r.stderr.splitlines() if ln.startswith("wrote ")]
    assert len(wrote) == 2 and all((words in ln) == prior for ln in wrote)
    assert "unfitted" not in r.stderr or prior
