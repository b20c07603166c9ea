"""What the what-if notebooks (``notebooks/*.py``) share: table display settings, where their
figures go, and how they state a computed conclusion.

Figures are also written as PNG to the folder named by ``PARAPLAN_FIGURES`` when it is set
(``tools/notebooks.py`` documents it); IPython is imported only when a conclusion is shown, so
this module imports without it.
"""
from __future__ import annotations

import os


def show_tables() -> None:
    """pandas display settings the notebooks' tables are written for (wide rows, 3 digits)."""
    import pandas as pd
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 40)
    pd.set_option("display.precision", 3)


def figures_dir() -> str | None:
    """The folder every figure is also saved to as PNG (``PARAPLAN_FIGURES``), or None."""
    return os.environ.get("PARAPLAN_FIGURES") or None


def fig_path(name: str) -> str | None:
    """Where figure ``name`` is saved, or None when no figures folder is set."""
    folder = figures_dir()
    return os.path.join(folder, name) if folder else None


def say(text: str) -> None:
    """Render a conclusion (an f-string of computed values) as Markdown."""
    from IPython.display import Markdown, display
    display(Markdown(text))


def pct(a, b):
    """Relative change from b to a, in percent."""
    return 100.0 * (a / b - 1.0)
