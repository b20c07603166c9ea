"""``serving_fit --write-priors`` on a damaged or incomplete serving_efficiency folder (a tmp copy;
``serving_fit.serving_efficiency_path`` points there, the repository is never written):

* a damaged file is one line ``error: <field>: <what> (<fix>)`` and exit 2, nothing written, as
  ``paraplan.validation.fit.main`` does (it printed a traceback and exited 1);
* what a line prints is what then loads: a generation no donor reaches has its stale written
  prior removed, so ``default.yaml`` stands in (the old file, donor 'hopper', stayed and loaded);
* the fallback of the generations the training chain names no donor for (TPUs, CPU) follows the
  chain's own rule: it joins at Hopper and walks ``NEIGHBOUR`` (hopper -> blackwell,
  paraplan/validation/fit.py) to the first fitted generation;
* a generation with no file at all (a fitted file gone missing) gets a prior only with a line
  saying so."""
from __future__ import annotations

import pytest
import yaml

from hardware_specs.catalog import BUILTIN_DIR
from paraplan.validation import serving_fit
from paraplan.validation.serving_fit import PARAMS

SHIPPED = BUILTIN_DIR / "serving_efficiency"
UNMEASURED = ("ampere", "cdna2", "cdna3", "cdna4", "cpu", "tpu-v3", "tpu-v4", "turing", "volta")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    for p in SHIPPED.glob("*.yaml"):
        (tmp_path / p.name).write_text(p.read_text())
    monkeypatch.setattr(serving_fit, "serving_efficiency_path", lambda g: tmp_path / f"{g}.yaml")
    monkeypatch.setattr(serving_fit, "fit_all", lambda *a, **k: pytest.fail("--write-priors must not fit"))
    return tmp_path


def _snapshot(folder):
    return {p.name: p.read_text() for p in folder.glob("*.yaml")}


@pytest.mark.parametrize("damaged", ["hopper.yaml", "volta.yaml"])
def test_a_damaged_file_is_one_line_exit_2_and_nothing_written(folder, capsys, damaged):
    for p in folder.glob("*.yaml"):      # a rewrite of any prior would show
        if yaml.safe_load(p.read_text()).get("prior") is True:
            p.write_text(p.read_text() + "# stale\n")
    path = folder / damaged              # volta: the last prior read
    path.write_text(path.read_text().replace("decode_hbm_fraction: ", "decode_hbm_fraction: [oops\n#", 1))
    before = _snapshot(folder)
    assert serving_fit.main(["--write-priors"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: serving_efficiency: malformed YAML in ") and damaged in err
    assert "(fix the file's syntax)" in err
    assert _snapshot(folder) == before


def test_with_no_fitted_generation_the_stale_priors_go_and_default_stands_in(folder, capsys):
    for gen in ("hopper", "blackwell"):
        (folder / f"{gen}.yaml").unlink()
    assert serving_fit.main(["--write-priors"]) == 0
    out = capsys.readouterr().out
    for gen in UNMEASURED:
        assert f"{gen}: no fitted serving generation to borrow from; default.yaml stands in" in out
    # printed "default.yaml stands in": no written prior is left to load instead
    assert sorted(p.name for p in folder.glob("*.yaml")) == ["default.yaml"]


def test_without_hopper_the_fallback_walks_on_to_blackwell_and_says_so(folder, capsys):
    """hopper.yaml missing: the TPUs and the CPU (no training neighbour) join the chain at Hopper
    and walk NEIGHBOUR["hopper"] = "blackwell" (paraplan/validation/fit.py); their files then
    hold Blackwell's fitted factors and name it, not the old 'hopper' donor."""
    (folder / "hopper.yaml").unlink()
    blackwell = yaml.safe_load((SHIPPED / "blackwell.yaml").read_text())
    assert serving_fit.main(["--write-priors"]) == 0
    out = capsys.readouterr().out
    for gen in ("cpu", "tpu-v3", "tpu-v4"):
        data = yaml.safe_load((folder / f"{gen}.yaml").read_text())
        assert data["donor"] == "blackwell" and data["prior"] is True
        for p in (*PARAMS, "link_bw_fraction"):
            assert data[p] == blackwell[p], p
        assert "hopper -> blackwell" in data["fitted_on"] and "from hopper (not fitted)" in data["fitted_on"]
    # a fitted generation's missing file is not turned into a prior silently
    assert ("warning: hopper: no serving file at all" in out
            and "if hopper was fitted, restore its file or refit (--write) instead" in out)
    assert yaml.safe_load((folder / "hopper.yaml").read_text())["prior"] is True


def test_the_fallback_rule_itself():
    fitted = {"blackwell"}
    assert serving_fit.donor_chain("cpu", fitted) == ["cpu", "hopper", "blackwell"]
    assert serving_fit.donor_chain("cpu", {"hopper", "blackwell"}) == ["cpu", "hopper"]
    assert serving_fit.donor_chain("hopper", fitted) == ["hopper", "blackwell"]
    assert serving_fit.donor_chain("hopper", set()) == ["hopper"]
    assert serving_fit.donor_chain("tpu-v4", {"ampere"}) == ["tpu-v4"]     # Hopper's walk never reaches Ampere
