"""A serving-efficiency profile is fitted only where it says so with its fit record
(``prior: false`` and ``fitted_on``, what ``paraplan.validation.serving_fit`` writes), as a
training file is fitted only with ``fitted_factors``: a user's file with no fit record (or the
dataclass built without one) read as fitted, and serve simulate printed efficiency_fitted true
for numbers no measurement had checked."""
from __future__ import annotations

import json

import pytest
import yaml

from cli_results import run
from hardware_specs.catalog import load_serving_efficiency, serving_efficiency_path
from hardware_specs.efficiency_files import serving_efficiency_from_dict
from hardware_specs.serving_efficiency import ServingEfficiency


@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)


@pytest.mark.parametrize("generation, fitted", [("hopper", True), ("blackwell", True), ("default", False)])
def test_the_committed_profiles_read_as_their_fit_records_say(generation, fitted):
    data = yaml.safe_load(serving_efficiency_path(generation).read_text())
    assert (data.get("prior") is False and bool(data.get("fitted_on"))) == fitted   # the record itself
    assert load_serving_efficiency(generation).prior is (not fitted)


@pytest.mark.parametrize("data", [
    {"generation": "cdna3"},                                        # no record at all
    {"generation": "cdna3", "prior": False},                        # says fitted, but fitted on nothing
    {"generation": "cdna3", "fitted_on": "measured runs"},          # a record, but no prior: false
    {"generation": "cdna3", "prior": True, "fitted_on": "x"},
], ids=["bare", "prior-false-only", "fitted-on-only", "prior-true"])
def test_a_profile_without_its_fit_record_is_a_prior(data):
    assert serving_efficiency_from_dict(data).prior is True
    assert serving_efficiency_from_dict({**data, "prior": False, "fitted_on": "runs"}).prior is False
    assert ServingEfficiency(generation="cdna3").prior is True       # built without a record


@pytest.mark.parametrize("text, fitted", [("generation: cdna3\n", False),
                                          ("generation: cdna3\nprior: false\nfitted_on: my runs\n", True)])
def test_serve_simulate_with_a_users_profile_labels_it_by_its_record(tmp_path, monkeypatch, text, fitted):
    (tmp_path / "serving_efficiency").mkdir()
    (tmp_path / "serving_efficiency" / "cdna3.yaml").write_text(text)
    monkeypatch.setenv("PARAPLAN_HARDWARE_PATH", str(tmp_path))
    r = run("serve", "simulate", "-m", "llama3.1-8b", "-s", "mi300x-node", "--batch", "16", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["efficiency_generation"] == "cdna3" and out["efficiency_fitted"] is fitted
    text_out = run("serve", "simulate", "-m", "llama3.1-8b", "-s", "mi300x-node", "--batch", "16").stdout
    assert ("rests on an unfitted prior" in text_out) == (not fitted)
