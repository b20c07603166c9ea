"""A written serving prior's ``donor`` and the file a report names:

* an empty ``donor:`` (YAML null) was read as the text "None" and reports said "its factors are
  None's fitted ones": null is no donor (the report then points at the file itself); an empty
  ``fitted_on:`` is not "None" (which made ``prior: false`` a fit with nothing fitted);
* a fitted profile (``prior: false`` and ``fitted_on``) naming a donor is refused, one line;
* the report named ``hardware_specs/serving_efficiency/<generation>.yaml`` even where a user's
  ``PARAPLAN_HARDWARE_PATH`` file was the one loaded: it names the file actually loaded."""
from __future__ import annotations

import re

import pytest

from hardware_specs.catalog import BUILTIN_DIR, load_serving_efficiency
from hardware_specs.efficiency_files import serving_efficiency_from_dict
from hardware_specs.errors import InputError
from paraplan.serving_priors import prior_text

SHIPPED = BUILTIN_DIR / "serving_efficiency"


def _ctx(generation, efficiency):
    gpu = type("Gpu", (), {"generation": generation})
    return type("Ctx", (), {"cluster": type("Cluster", (), {"gpu": gpu}), "efficiency": efficiency})


def test_an_empty_donor_is_no_donor_not_none():
    eff = serving_efficiency_from_dict({"generation": "ampere", "prior": True, "donor": None, "fitted_on": "x"})
    assert eff.donor == "" and eff.prior is True
    text = prior_text(_ctx("ampere", eff))
    assert "None" not in text and "fitted ones" not in text


def test_an_empty_fitted_on_does_not_make_a_fit():
    assert serving_efficiency_from_dict({"generation": "ampere", "prior": False, "fitted_on": None}).prior is True


@pytest.mark.parametrize("donor", ["hopper", 7, ["hopper"]])
def test_a_fitted_profile_naming_a_donor_or_a_non_text_donor_is_one_line(donor):
    with pytest.raises(InputError) as err:
        serving_efficiency_from_dict({"generation": "ampere", "prior": False, "fitted_on": "runs", "donor": donor})
    assert err.value.field == "serving_efficiency.donor" and "\n" not in str(err.value)


def test_the_report_names_the_users_file_that_was_loaded(tmp_path, monkeypatch):
    user = tmp_path / "serving_efficiency"
    user.mkdir()
    text = (SHIPPED / "ampere.yaml").read_text()
    assert "donor: hopper\n" in text
    (user / "ampere.yaml").write_text(text.replace("donor: hopper\n", "donor:\n"))
    monkeypatch.setenv("PARAPLAN_HARDWARE_PATH", str(tmp_path))
    eff = load_serving_efficiency("ampere")
    assert eff.donor == "" and eff.origin == str(user / "ampere.yaml")
    line = prior_text(_ctx("ampere", eff))
    assert line.endswith(f"see {(user / 'ampere.yaml').resolve()}") and "None" not in line
    # the user's prior with its donor kept: the donor, and the user's file, not the shipped one
    # (the shipped value moves with each refit of Hopper, the donor: replace whatever it holds)
    edited, n = re.subn(r"^decode_hbm_fraction: .*$", "decode_hbm_fraction: 0.5", text, flags=re.M)
    assert n == 1
    (user / "ampere.yaml").write_text(edited)
    eff = load_serving_efficiency("ampere")
    assert eff.decode_hbm_fraction == 0.5
    line = prior_text(_ctx("ampere", eff))
    assert "hopper's fitted ones" in line and str((user / "ampere.yaml").resolve()) in line
    assert "hardware_specs/serving_efficiency/ampere.yaml" not in line


def test_a_shipped_prior_is_named_relative_to_the_repository_as_before():
    line = prior_text(_ctx("cdna3", load_serving_efficiency("cdna3")))
    assert line.endswith("its factors are hopper's fitted ones (hardware_specs/serving_efficiency/cdna3.yaml)")
    line = prior_text(_ctx("newgen", load_serving_efficiency("newgen")))
    assert line.endswith("see hardware_specs/serving_efficiency/default.yaml")


def test_origin_is_not_a_file_key_nor_part_of_equality():
    with pytest.raises(InputError, match="unknown key"):
        serving_efficiency_from_dict({"generation": "ampere", "origin": "x"})
    assert load_serving_efficiency("hopper") == load_serving_efficiency(str(SHIPPED / "hopper.yaml"))
