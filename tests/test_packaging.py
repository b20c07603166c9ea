"""A non-editable install (``pip install .``, a wheel) carries every data file the code reads.

setuptools copies only the ``[tool.setuptools.package-data]`` patterns beside the Python
modules; a file under a package that no pattern matches is absent from a wheel, and the code
that opens it fails only there (``hardware_specs/stacks/megatron_bridge_presets.csv`` was, so
``validate published`` could not price the Megatron-Bridge rows from a wheel). This checks the
repository's files against the patterns, without building anything.
"""
from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _package_data() -> dict[str, list[str]]:
    with open(REPO / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["tool"]["setuptools"]["package-data"]


def _tracked_data_files(package: str) -> list[str]:
    root = REPO / package
    out = []
    for path in root.rglob("*"):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".py", ".pyc"):
            continue
        out.append(path.relative_to(root).as_posix())
    return sorted(out)


def test_every_data_file_under_a_package_is_in_its_package_data():
    patterns = _package_data()
    missing = []
    for package in ("hardware_specs", "model_specs", "paraplan", "cost_models", "simulator", "planners"):
        globs = patterns.get(package, [])
        for rel in _tracked_data_files(package):
            if not any(fnmatch.fnmatch(rel, g) and rel.count("/") == g.count("/") for g in globs):
                missing.append(f"{package}/{rel}")
    assert missing == [], f"data files a wheel would leave out (add a package-data pattern): {missing}"


def test_the_presets_csv_is_matched():
    # the file that was missing from wheels, by name: a pattern of its folder covers it
    rel = "stacks/megatron_bridge_presets.csv"
    assert (REPO / "hardware_specs" / rel).is_file()
    assert any(fnmatch.fnmatch(rel, g) for g in _package_data()["hardware_specs"])
