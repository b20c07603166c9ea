"""The Python serving API says what its numbers rest on, as ``serve`` does on the command line:
``serve_plan``'s best / candidates / front carry ``efficiency_fitted`` (and, drafting, the
draft columns) and its ``why`` the prior notes; ``serve_simulate`` / ``serve_sweep`` rows carry
``speculative_tokens``, ``draft_acceptance`` and ``draft_acceptance_is_prior`` as
``serve simulate --json`` does. One helper (``paraplan.serving_priors``) serves both."""
from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from cli_results import run
from cost_models.speculative import MTP_ACCEPTANCE_PRIOR
from hardware_specs.catalog import load_serving_efficiency
from paraplan.serving_api import serve_plan, serve_simulate, serve_sweep

DRAFT_COLUMNS = ("speculative_tokens", "draft_acceptance", "draft_acceptance_is_prior", "draft_model")


@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)


@pytest.mark.parametrize("system, generation", [("mi300x-node", "cdna3"), ("dgx-h100", "hopper")])
def test_serve_plan_labels_every_table_and_notes_a_prior_in_why(system, generation):
    """CDNA3 has no fitted serving profile (the default prior), Hopper has one: the columns are
    the negation of the profile's ``prior`` and only the prior gets a note naming the generation."""
    prior = load_serving_efficiency(generation).prior
    assert prior == (generation == "cdna3")
    plan = serve_plan("llama3.1-8b", system, 8)
    assert bool(plan.best["efficiency_fitted"]) is (not prior)
    for table in (plan.candidates, plan.front):
        assert len(table) and (table["efficiency_fitted"] == (not prior)).all()
    notes = [w for w in plan.why if "unfitted prior" in w]
    assert len(notes) == (1 if prior else 0)
    if prior:
        assert f"no serving measurement of {generation} GPUs was fitted" in notes[0]
    assert not set(DRAFT_COLUMNS) & set(plan.front.columns)      # no drafting, no draft columns


@pytest.mark.parametrize("acceptance", [None, 0.7])
def test_a_speculative_serve_plan_says_whether_its_acceptance_is_the_prior(acceptance):
    """The MTP acceptance left out is the 0.85 prior (cost_models.speculative), one given is not;
    the API's front rows agree with serve plan --csv's on every label column."""
    extra = {} if acceptance is None else {"draft_acceptance": acceptance}
    plan = serve_plan("deepseek-v3", "dgx-b200", 8, speculative_tokens=2, **extra)
    want = {"efficiency_fitted": True, "speculative_tokens": 2, "draft_model": "mtp",
            "draft_acceptance": MTP_ACCEPTANCE_PRIOR if acceptance is None else acceptance,
            "draft_acceptance_is_prior": acceptance is None}
    assert {k: plan.best[k] for k in want} == want
    assert all((plan.front[k] == v).all() for k, v in want.items())
    assert any("draft acceptance is an unfitted prior" in w for w in plan.why) == (acceptance is None)
    args = ["serve", "plan", "-m", "deepseek-v3", "-s", "dgx-b200", "-n", "8", "--speculative-tokens", "2", "--csv"]
    if acceptance is not None:
        args += ["--draft-acceptance", str(acceptance)]
    cli = pd.read_csv(io.StringIO(run(*args).stdout))
    assert {k: cli[k].iloc[0] for k in want} == want


@pytest.mark.parametrize("acceptance", [None, 0.7])
def test_serve_simulate_rows_carry_the_draft_columns_of_serve_simulate_json(acceptance):
    extra = {} if acceptance is None else {"draft_acceptance": acceptance}
    row = serve_simulate("deepseek-v3", "dgx-b200", adp=8, moe_ep=8, batch=16, speculative_tokens=2, **extra).iloc[0]
    args = ["serve", "simulate", "-m", "deepseek-v3", "-s", "dgx-b200", "--adp", "8", "--moe-ep", "8", "--batch", "16",
            "--speculative-tokens", "2", "--json"] + ([] if acceptance is None else ["--draft-acceptance", str(acceptance)])
    cli = json.loads(run(*args).stdout)
    assert row["draft_acceptance_is_prior"] == (acceptance is None)
    for k in DRAFT_COLUMNS + ("efficiency_fitted",):
        assert row[k] == cli[k], k
    assert row["tpot_ms"] == pytest.approx(cli["tpot_ms"], rel=1e-12)


def test_serve_sweep_rows_carry_them_too_none_where_nothing_is_drafted():
    rows = serve_sweep(dict(model="deepseek-v3", system="dgx-b200", adp=8, moe_ep=8, batch=16),
                       "speculative_tokens", [0, 2])
    assert list(rows["speculative_tokens"]) == [0, 2]
    assert rows["draft_acceptance_is_prior"].iloc[0] is None and rows["draft_acceptance_is_prior"].iloc[1] == True  # noqa: E712
    assert pd.isna(rows["draft_acceptance"].iloc[0]) and rows["draft_acceptance"].iloc[1] == MTP_ACCEPTANCE_PRIOR
