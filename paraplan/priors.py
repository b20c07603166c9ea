"""Saying so when a number rests on an unfitted efficiency model (a prior).

Every time the simulator predicts uses the GPU generation's efficiency model
(``hardware_specs/efficiency/<generation>.yaml``). Most are fitted to published runs; a few
(CDNA2/CDNA3, TPU v3/v4, Volta, Turing, the generic CPU) are priors no measured run has checked
(``EfficiencyModel.is_fitted`` is false: no ``fitted_factors``). Outputs put a marker beside such numbers: tables a
``MARK`` and a footnote, JSON and CSV an ``efficiency_fitted`` field.
"""
from __future__ import annotations

from pathlib import Path

from hardware_specs.catalog import efficiency_for_cluster
from hardware_specs.efficiency_model import PRIOR_MARK, prior_mark

#: the marker beside a number that rests on a prior (explained by ``footnote``)
MARK = PRIOR_MARK


def is_prior(cluster) -> bool:
    """Whether the cluster's times rest on an unfitted efficiency model."""
    return not efficiency_for_cluster(cluster).is_fitted


def json_fields(cluster) -> dict:
    """``efficiency_generation``, ``efficiency_fitted`` and what it was fitted on."""
    eff = efficiency_for_cluster(cluster)
    return {"efficiency_generation": eff.generation, "efficiency_fitted": bool(eff.is_fitted),
            "efficiency_fitted_on": " ".join(str(eff.fitted_on).split())}


def mark(cluster) -> str:
    """``MARK`` (with a leading space) for a prior, else nothing."""
    return prior_mark(is_prior(cluster))


def mark_text() -> str:
    """The marker as appended to a table cell."""
    return f" {MARK}"


def footnote(cluster) -> str | None:
    """The line explaining ``MARK``, or None for a fitted model."""
    if not is_prior(cluster):
        return None
    eff = efficiency_for_cluster(cluster)
    return (f"{MARK} rests on the {eff.generation} efficiency model, an unfitted prior "
            f"({' '.join(str(eff.fitted_on).split()) or 'no fit recorded'}): no measured run has checked it; "
            f"read it as a sketch ({efficiency_source(eff)})")


def efficiency_source(eff) -> str:
    """Where the efficiency factors were read: their ``origin`` (a file, or inline in a cluster
    file), else the built-in file of their generation."""
    if not eff.origin:
        return f"hardware_specs/efficiency/{eff.generation}.yaml"
    from hardware_specs.catalog import BUILTIN_DIR
    for prefix in ("", "inline in "):       # a built-in file as the repository names it
        if eff.origin.startswith(prefix):
            try:
                rest = Path(eff.origin[len(prefix):]).resolve().relative_to(BUILTIN_DIR.parent)
            except (OSError, ValueError):
                continue
            return prefix + rest.as_posix()
    return eff.origin
