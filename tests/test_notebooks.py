"""The what-if notebooks execute end to end (nbclient), fast, and match their generator.

Runs in the default test session (CI runs ``pytest`` after ``pip install -e .[test]``, whose
test extra brings nbclient, nbformat and ipykernel). The kernel is this interpreter, so the
notebooks see the installed paraplan. ``PARAPLAN_FIGURES=<folder>`` makes the notebooks also
write their figures there as PNG files, to look at.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
MAX_WALL_S = 60.0          # each notebook, kernel start included


def _generator():
    spec = importlib.util.spec_from_file_location("build_notebooks", NOTEBOOKS / "build_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory, monkeypatch_module):
    """A kernelspec that runs this interpreter (not whatever ``python`` is first on PATH)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / "paraplan-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "paraplan test", "language": "python"}))
    monkeypatch_module.setenv("JUPYTER_PATH", str(root))
    monkeypatch_module.setenv("PYTHONPATH", str(REPO))
    monkeypatch_module.setenv("MPLBACKEND", "Agg")
    return "paraplan-test"


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_every_notebook_is_written_by_the_generator():
    # notebooks kept as jupytext percent scripts (a .py twin) are not written by the generator
    on_disk = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb") if not p.with_suffix(".py").is_file())
    assert on_disk == sorted(GENERATOR.NOTEBOOKS), "run python notebooks/build_notebooks.py"
    for name, cells in GENERATOR.NOTEBOOKS.items():
        saved = nbformat.read(NOTEBOOKS / name, as_version=4)
        built = GENERATOR.build(cells)
        assert [(c.cell_type, c.source) for c in saved.cells] == [(c.cell_type, c.source) for c in built.cells], \
            f"{name} is stale: run python notebooks/build_notebooks.py"


@pytest.mark.parametrize("name", sorted(GENERATOR.NOTEBOOKS))
def test_notebook_executes_without_errors_in_under_a_minute(name, kernel_name):
    nb = GENERATOR.build(GENERATOR.NOTEBOOKS[name])
    client = NotebookClient(nb, timeout=MAX_WALL_S, kernel_name=kernel_name,
                            resources={"metadata": {"path": str(REPO)}})
    t0 = time.perf_counter()
    client.execute()            # raises CellExecutionError on the first failing cell
    wall = time.perf_counter() - t0
    assert wall < MAX_WALL_S, f"{name} took {wall:.0f} s"
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{name} shows no figure"
    conclusions = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    assert conclusions, f"{name} renders no conclusions"
    for text in conclusions:     # every value in the prose was computed
        assert not re.search(r"\bnan\b|\binf\b", text.lower()), text
