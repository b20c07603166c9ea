"""A cluster file is parsed once per process and modification time, like the specs loaded from it.

``simulate`` and ``plan`` ask whether the cluster is pooled, which GPU file it names, and then
load it: three questions about one file, each of which parsed it again (a third of a refused
fuzz input's CPU time for a shipped cluster; three pure-Python parses for a file given by path).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from click.testing import CliRunner

import hardware_specs.catalog as catalog
import hardware_specs.yaml_files as yaml_files
from paraplan.cli import main

REPO = Path(__file__).resolve().parents[1]


def _count_parses(monkeypatch, path: Path) -> list:
    """A list that grows by one each time ``path`` is parsed by the catalog's YAML reader."""
    seen = []
    real = yaml_files.read_yaml

    def counting(p, what):
        if Path(p).resolve() == path.resolve():
            seen.append(what)
        return real(p, what)

    monkeypatch.setattr(catalog, "read_yaml", counting)
    return seen


def test_one_simulate_of_a_cluster_file_given_by_path_parses_it_once(tmp_path, monkeypatch):
    path = tmp_path / "my-cluster.yaml"
    shutil.copy(REPO / "hardware_specs" / "clusters" / "dgx-h100.yaml", path)
    parses = _count_parses(monkeypatch, path)
    args = ["simulate", "-m", "gpt3-125m", "-c", str(path), "--gpus", "8", "--global-batch", "64", "--json"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    assert parses == ["cluster"]            # is it pooled, its GPU file, the cluster: one parse
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0 and parses == ["cluster"]   # the same file again: none
    assert json.loads(second.stdout) == json.loads(first.stdout)


def test_an_edited_cluster_file_is_parsed_again_and_read_as_edited(tmp_path, monkeypatch):
    """Keyed on the modification time, as the loaded clusters are: a file rewritten as a pooled
    one is read as pooled."""
    path = tmp_path / "c.yaml"
    shutil.copy(REPO / "hardware_specs" / "clusters" / "dgx-h100.yaml", path)
    parses = _count_parses(monkeypatch, path)
    assert catalog.is_pooled(str(path)) is False
    path.write_text(path.read_text() + "pools: []\n")
    stamp = path.stat().st_mtime
    os.utime(path, (stamp + 10, stamp + 10))
    assert catalog.is_pooled(str(path)) is True
    assert parses == ["cluster", "cluster"]
