"""Run the what-if notebooks from their jupytext sources and save the executed ``.ipynb``.

Each notebook is kept as ``notebooks/<name>.py``, a jupytext percent script (the reviewable
source of truth), paired with ``notebooks/<name>.ipynb``, the same cells executed with their
outputs. After editing a ``.py``, refresh its pair:

    python tools/notebooks.py notebooks/gpu_comparison.py     # one notebook
    python tools/notebooks.py                                  # every notebooks/*.py
    PARAPLAN_FIGURES=/tmp/figs python tools/notebooks.py       # also save the figures as PNG

``tests/test_notebooks.py`` executes every ``notebooks/*.py`` and fails when a ``.ipynb`` no
longer has its ``.py``'s cells. ``jupytext --sync`` keeps the cells paired too, but does not
execute.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
#: the pairing written into each notebook's metadata (``jupytext --sync`` reads it).
FORMATS = "ipynb,py:percent"


def sources() -> list[Path]:
    """Every notebook source: ``notebooks/*.py``."""
    return sorted(NOTEBOOKS.glob("*.py"))


def load(path: Path) -> nbformat.NotebookNode:
    """The notebook a percent script describes (no outputs), with stable cell ids."""
    nb = jupytext.read(path, fmt="py:percent")
    nb.metadata.setdefault("jupytext", {})["formats"] = FORMATS
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for i, cell in enumerate(nb.cells):       # stable ids: re-executing changes outputs only
        cell["id"] = f"cell-{i:02d}"
    return nb


def cells(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """(cell type, source) of every cell: what the pairing must keep equal."""
    return [(c.cell_type, c.source) for c in nb.cells]


def execute(nb: nbformat.NotebookNode, timeout_s: float = 120, kernel_name: str = "python3") -> nbformat.NotebookNode:
    """Run ``nb`` in a fresh kernel with the repository as working directory (raises
    ``nbclient.exceptions.CellExecutionError`` at the first failing cell)."""
    NotebookClient(nb, timeout=timeout_s, kernel_name=kernel_name,
                   resources={"metadata": {"path": str(REPO)}}).execute()
    return nb


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path, help="percent scripts to run (default: every notebooks/*.py)")
    args = ap.parse_args(argv)
    # the kernel imports this tree's paraplan, not an installed one
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    for path in args.paths or sources():
        nb = execute(load(path))
        # the kernel's own language_info (version) would make every refresh a diff
        nb.metadata["language_info"] = {"name": "python"}
        nbformat.write(nb, path.with_suffix(".ipynb"))
        print(f"wrote {path.with_suffix('.ipynb')} (executed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
