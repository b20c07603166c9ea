"""One test of "unfitted": ``EfficiencyModel.is_prior`` read ``fitted_on`` for the words "not
fitted" while ``is_fitted`` reads ``fitted_factors``; the CDNA2/3, Volta and TPU v4 files say
"unfitted prior: ..." with no fitted factor, so the pooled-cluster paths (which asked
``is_prior``) labelled an MI300X pool fitted. Both now give one answer for every generation file,
and the pooled outputs label the MI300X pool."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cli_results import run
from hardware_specs.catalog import load_efficiency

REPO = Path(__file__).resolve().parents[1]
GENERATIONS = sorted((REPO / "hardware_specs" / "efficiency").glob("*.yaml"))
MI_H100 = """
name: mi-h100
pools:
  - {name: mi, cluster: mi300x-node, gpus: 16}
  - {name: h100, cluster: dgx-h100, gpus: 16}
links:
  - {between: [mi, h100], kind: infiniband, bw_gbit_per_s: 200, latency_us: 5}
"""


@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)


@pytest.fixture
def mixed(tmp_path):
    p = tmp_path / "mi-h100.yaml"
    p.write_text(MI_H100)
    return p


@pytest.mark.parametrize("path", GENERATIONS, ids=lambda p: p.stem)
def test_every_generation_file_gives_one_answer_to_is_it_fitted(path):
    """Fitted exactly when the file lists fitted factors (what the fitter writes), whatever its
    ``fitted_on`` text says: a file whose ``fitted_on`` says "not fitted" or "unfitted prior"
    (with an empty ``fitted_factors: []`` or none) reads as a prior, one that lists factors never."""
    eff = load_efficiency(str(path))
    data = yaml.safe_load(path.read_text())
    listed = bool(data.get("fitted_factors"))
    assert eff.is_fitted == listed and eff.is_prior == (not listed)
    says_unfitted = any(w in str(data.get("fitted_on", "")) for w in ("unfitted prior", "not fitted"))
    assert says_unfitted == (not listed), data.get("fitted_on")
    assert eff.is_prior == says_unfitted


def test_the_unfitted_prior_files_read_as_priors():
    for gen in ("cdna2", "cdna3", "volta", "tpu-v4", "tpu-v3", "turing", "cpu"):
        assert load_efficiency(gen).is_prior, gen
    for gen in ("ampere", "hopper", "blackwell"):
        assert not load_efficiency(gen).is_prior, gen


def test_hardware_show_labels_the_mi300x_pool_a_prior(mixed):
    r = run("hardware", "show", mixed, "--json")
    assert r.exit_code == 0, r.output
    fitted = {p["name"]: p["efficiency_fitted"] for p in json.loads(r.stdout)["pools"]}
    assert fitted == {"mi": False, "h100": True}


def test_pooled_simulate_labels_the_mi300x_pool(mixed):
    args = ("simulate", "-m", "llama3-8b", "-c", mixed, "--global-batch", "64", "--group", "1x mi:tp8:pp2",
            "--group", "1x h100:tp8:pp2", "--zero", "1")
    j = run(*args, "--json")
    assert j.exit_code == 0, j.output
    assert json.loads(j.stdout)["prior_pools"] == ["mi"]
    t = run(*args)
    assert "unfitted efficiency prior of mi" in t.stdout


def test_pooled_plan_names_the_mi300x_pool_and_its_rows_agree(mixed):
    args = ("plan", "-m", "llama3-8b", "-c", mixed, "--global-batch", "64", "--top", "3")
    j = run(*args, "--json")
    assert j.exit_code == 0, j.output
    data = json.loads(j.stdout)
    assert data["efficiency_prior_pools"] == ["mi"]
    for p in data["plans"]:                 # a row is fitted exactly when it runs on no MI300X pool
        assert p["efficiency_fitted"] == ("mi" not in p["pools"].split("+")), p["pools"]
    assert "note: numbers on mi rest on an unfitted efficiency prior" in run(*args).stdout


def test_pooled_plan_comparison_rows_and_their_plans_say_whether_they_rest_on_the_prior(mixed):
    """The comparison (best plan, only mi, only h100) and best_plan / fastest_pool_only /
    largest_pool_only carry ``efficiency_fitted``: False exactly where the row's plan places a
    stage on the MI300X pool; the table marks those rows' tokens/s."""
    args = ("plan", "-m", "llama3-8b", "-c", mixed, "--global-batch", "64", "--top", "3")
    data = json.loads(run(*args, "--json").stdout)

    def on_mi(plan):
        return any(st["pool"] == "mi" for g in plan["groups"] for st in g["stages"])

    plans = {"best plan": data["best_plan"], "only mi (fastest GPU)": data["fastest_pool_only"],
             "only h100 (as many GPUs as mi)": data["largest_pool_only"]}
    assert [r["plan"] for r in data["comparison"]] == list(plans)
    for row in data["comparison"]:
        plan = plans[row["plan"]]
        assert row["efficiency_fitted"] == plan["efficiency_fitted"] == (not on_mi(plan)), row["plan"]
    assert [r["efficiency_fitted"] for r in data["comparison"]][1:] == [False, True]
    text = run(*args).stdout
    for row in data["comparison"]:
        line = next(ln for ln in text.splitlines() if ln.startswith(row["plan"]))
        assert (f"{row['tokens_per_s']:,.0f} *" in line) == (not row["efficiency_fitted"]), line
