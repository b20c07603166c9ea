"""The mixed-cluster notebook: its executed .ipynb is its jupytext script, run to the end."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

jupytext = pytest.importorskip("jupytext")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "heterogeneous_a100_h100"


def test_the_executed_notebook_is_its_script_with_outputs():
    script = jupytext.read(NOTEBOOK.with_suffix(".py"))
    saved = nbformat.read(NOTEBOOK.with_suffix(".ipynb"), as_version=4)
    assert [(c.cell_type, c.source) for c in saved.cells] == [(c.cell_type, c.source) for c in script.cells], \
        "re-execute: the .ipynb is stale"
    outputs = [o for c in saved.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    prose = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    assert len(prose) == 2 and not any(re.search(r"\bnan\b|\binf\b", t.lower()) for t in prose)
