"""Efficiency-model files: the fitted training factors of a GPU generation
(``hardware_specs/efficiency/*.yaml``, ``EfficiencyModel``) and the fitted serving factors
(``hardware_specs/serving_efficiency/*.yaml``, ``ServingEfficiency``), from their mappings.
Unknown or mistyped keys raise an ``InputError`` naming the key."""
from __future__ import annotations

from hardware_specs.efficiency_model import NOT_FILE_KEYS, EfficiencyModel, fittable_factor_names
from hardware_specs.errors import InputError, file_float, shown
from hardware_specs.serving_efficiency import ServingEfficiency


#: keys of older efficiency files, read and ignored: the exposed shares of DP / TP / EP traffic
#: were fitted until the software-stack catalog replaced them (``hardware_specs/stacks``)
LEGACY_EFFICIENCY_KEYS = ("exposed_dp_fraction", "exposed_tp_fraction", "exposed_ep_fraction")


def efficiency_from_dict(data: dict, where: str = "efficiency", origin: str = "") -> EfficiencyModel:
    """Build an ``EfficiencyModel`` from a file's mapping; ``origin``: where it was read (the
    file, or "inline in <cluster file>"), which the unfitted-prior footnote names."""
    known = set(EfficiencyModel.field_names()) - set(NOT_FILE_KEYS)
    data = {k: v for k, v in data.items() if k not in LEGACY_EFFICIENCY_KEYS}
    unknown = set(data) - known
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "unknown key",
                         "known keys: " + ", ".join(sorted(known)))
    if "generation" not in data:
        raise InputError(f"{where}.generation", "missing")
    for key in ("generation", "fitted_on"):
        if key in data and (isinstance(data[key], bool) or not isinstance(data[key], (str, int))):
            raise InputError(f"{where}.{key}", f"expected text, got {shown(data[key])}", "quote it")
    if not isinstance(data.get("gemm_peak_fraction"), dict):
        raise InputError(f"{where}.gemm_peak_fraction", "must be a mapping dtype: fraction")
    if not isinstance(data.get("collective_bw_fraction", {}), dict):
        raise InputError(f"{where}.collective_bw_fraction", "must be a mapping kind: fraction",
                         "e.g. {reduce_scatter: 0.3}")
    for group in ("gemm_peak_fraction", "collective_bw_fraction"):
        for key, value in (data.get(group) or {}).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"{where}.{group}.{key}", f"expected a number, got {shown(value)}")
    kwargs = dict(data)
    for key, value in list(kwargs.items()):
        if key == "fitted_factors":
            if not isinstance(value, (list, tuple)):
                raise InputError(f"{where}.fitted_factors", "must be a list of factor names")
            # a name no fit writes (or any text at all) made the model "fitted": the unfitted-
            # prior marker vanished from every number resting on it
            known_factors = fittable_factor_names()
            for name in value:
                if not isinstance(name, str) or name not in known_factors:
                    raise InputError(f"{where}.fitted_factors", f"{name!r} is not a fitted factor",
                                     "list only factors a fit set: " + ", ".join(known_factors))
            if value and not str(data.get("fitted_on") or "").strip():
                raise InputError(f"{where}.fitted_on", "missing, while fitted_factors lists factors",
                                 "say what the factors were fitted on, or drop fitted_factors (an unfitted prior)")
            kwargs[key] = tuple(value)
        elif key not in ("generation", "gemm_peak_fraction", "collective_bw_fraction", "fitted_on"):
            # as the serving file's reader: true was float(True) = 1 (kernel_overhead_s: true gave
            # 1 s per kernel, a 13,553 s step) and "0.5" was read as the number 0.5
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"{where}.{key}", f"expected a number, got {shown(value)}",
                                 "write it as a number, unquoted")
            kwargs[key] = file_float(f"{where}.{key}", value)
    return EfficiencyModel(**kwargs, origin=str(origin))


def serving_efficiency_from_dict(data: dict, where: str = "serving_efficiency", origin: str = "") -> ServingEfficiency:
    """Build a ``ServingEfficiency`` from a catalog mapping (unknown or mistyped keys name the key);
    ``origin``: the file it was read from, which reports on a prior name.

    An empty ``donor:`` or ``fitted_on:`` (YAML null) is "" (no donor, nothing fitted), not the
    text "None" (a prior then named "None's fitted ones" as its donor); a donor on a fitted
    profile (``prior: false`` with ``fitted_on``) is refused: only a written prior borrows."""
    known = set(ServingEfficiency.file_keys())
    unknown = set(data) - known
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "unknown key", "known keys: " + ", ".join(sorted(known)))
    if data.get("generation") is None:
        raise InputError(f"{where}.generation", "missing")
    data = {k: ("" if v is None and k in ("fitted_on", "donor") else v) for k, v in data.items()}
    kwargs = dict(data)
    for key, value in kwargs.items():
        if key == "donor" and (isinstance(value, bool) or not isinstance(value, str)):
            raise InputError(f"{where}.donor", f"expected a generation's name, got {shown(value)}",
                             "name the fitted generation whose factors the prior holds, or leave donor out")
        if key in ("generation", "fitted_on", "donor"):
            kwargs[key] = str(value).strip() if key == "donor" else str(value)
        elif key == "prior":
            if not isinstance(value, bool):
                raise InputError(f"{where}.prior", f"must be true or false, got {shown(value)}")
        elif key == "validation_error_pct":
            if not isinstance(value, dict):
                raise InputError(f"{where}.{key}", f"expected a mapping, got {shown(value)}")
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"{where}.{key}", f"expected a number, got {shown(value)}")
            kwargs[key] = file_float(f"{where}.{key}", value)
    # fitted only with its fit record: prior: false and what it was fitted on (a file without them,
    # a user's hand-written profile, is a prior, as a training file without fitted_factors is)
    kwargs["prior"] = not (data.get("prior") is False and bool(str(data.get("fitted_on", "")).strip()))
    if kwargs.get("donor") and not kwargs["prior"]:
        raise InputError(f"{where}.donor", f"a fitted profile (prior: false, fitted_on) names a donor "
                         f"({kwargs['donor']!r}); only a written prior holds another generation's factors",
                         "drop donor from a fit, or set prior: true for a prior")
    return ServingEfficiency(**kwargs, origin=str(origin))
