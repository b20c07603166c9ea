"""paraplan.notebook_helpers: what the what-if notebooks share."""
from __future__ import annotations

import pytest

from paraplan import notebook_helpers as nh


def test_figures_go_to_the_folder_named_by_the_environment_and_nowhere_without_it(monkeypatch, tmp_path):
    monkeypatch.delenv("PARAPLAN_FIGURES", raising=False)
    assert nh.figures_dir() is None and nh.fig_path("a.png") is None
    monkeypatch.setenv("PARAPLAN_FIGURES", str(tmp_path))
    assert nh.fig_path("a.png") == str(tmp_path / "a.png")


def test_pct_is_the_relative_change_from_b_to_a_in_percent():
    assert nh.pct(110.0, 100.0) == pytest.approx(10.0)
    assert nh.pct(75.0, 100.0) == pytest.approx(-25.0)
