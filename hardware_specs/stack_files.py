"""Software-stack files (``hardware_specs/stacks/*.yaml``) into ``StackSpec``.

Keys: name, framework, versions (list, spelled as the validation files spell
``framework_version``), description, default_when_version_unstated and unstated_version_reason
(optional), training {behaviour: value or {value, source}}, serving {...}, recipes (per-model
overrides of training behaviours, each with its source); see ``stack_spec.py`` for what each
behaviour means. Every value is type-checked against the behaviour's default; an unknown
behaviour is refused with the known ones listed.
"""
from __future__ import annotations

import math
from typing import Any

from hardware_specs.errors import InputError, check_name, shown
from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.stack_spec import RecipeOverride, StackSpec, TrainingBehaviour, behaviour_error, feature_names
from hardware_specs.yaml_files import get_field, refuse_unknown_keys


def _behaviour_values(section: Any, where: str) -> tuple[dict, dict]:
    """(values, citations) of a stack section whose entries are ``key: value`` or
    ``key: {value: ..., source: "..."}``."""
    if not isinstance(section, dict):
        raise InputError(where, "must be a mapping of behaviour: value")
    values, citations = {}, {}
    for key, entry in section.items():
        if isinstance(entry, dict):
            if "value" not in entry:
                raise InputError(f"{where}.{key}", "a mapping entry needs 'value:' (and 'source:')")
            values[str(key)] = entry["value"]
            if entry.get("source"):
                citations[f"{where.split('.')[-1]}.{key}"] = str(entry["source"])
        else:
            values[str(key)] = entry
    return values, citations


def _number(value: Any, field: str) -> float:
    """``value`` as a finite float, read as the cluster and GPU loaders read numbers (``get_field``:
    PyYAML reads 1e-3, without a dot, as the string '1e-3')."""
    try:
        number = get_field({"value": value}, "value", field, float)
    except InputError:
        number = math.nan
    if not math.isfinite(number):
        raise InputError(field, f"expected a number, got {shown(value)}", "write a finite number, e.g. 0.001 or 1e-3")
    return number


def _training_from_dict(values: dict, where: str) -> TrainingBehaviour:
    default = TrainingBehaviour()  # built once: not once per behaviour (50 validations each)
    defaults = {f: getattr(default, f) for f in StackSpec.training_keys()}
    unknown = set(values) - set(defaults)
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "unknown behaviour",
                         "known: " + ", ".join(sorted(defaults)))
    kwargs = {}
    for key, value in values.items():
        kind = type(defaults[key])
        if kind is bool:
            if not isinstance(value, bool):
                raise InputError(f"{where}.{key}", f"must be true or false, got {shown(value)}")
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{where}.{key}", f"expected a whole number, got {shown(value)}")
        elif kind is float:
            value = _number(value, f"{where}.{key}")
        elif kind is tuple:
            if key == "context_parallel_kinds" and (value is None or value == []):
                # not "'allgather' is not among the flavours the release runs ()" on the other key
                raise InputError(f"{where}.{key}", f"lists no flavour (got {shown(value)})",
                                 "list the flavours the release runs; a release without context parallelism "
                                 "says lacks: [context_parallel]")
            if value is None:
                value = []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InputError(f"{where}.{key}", f"expected a list of names, got {shown(value)}")
            value = feature_names(value, f"{where}.{key}") if key == "lacks" else tuple(value)
        else:
            value = str(value)
        kwargs[key] = value
    try:
        return TrainingBehaviour(**kwargs)
    except InputError as error:     # its own checks name training.<key>: say which block set it
        raise behaviour_error(error, where) from None


def _serving_from_dict(values: dict, where: str) -> ServingBehaviour:
    defaults = ServingBehaviour()
    known = ServingBehaviour.keys()
    unknown = set(values) - set(known)
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "unknown behaviour", "known: " + ", ".join(sorted(known)))
    kwargs = {}
    for key, value in values.items():
        default = getattr(defaults, key)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise InputError(f"{where}.{key}", f"must be true or false, got {shown(value)}")
        elif key == "max_running_requests":
            if isinstance(value, bool) or not isinstance(value, (int, dict)):
                raise InputError(f"{where}.{key}", "must be requests or a mapping of HBM GiB -> requests",
                                 "e.g. 1024, or {0: 256, 70: 1024}")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{where}.{key}", f"expected a whole number, got {shown(value)}")
        elif isinstance(default, float):
            value = _number(value, f"{where}.{key}")
        elif isinstance(default, str):
            value = str(value)
        elif key == "prefill_token_budget":
            if isinstance(value, int) and not isinstance(value, bool):
                value = {0.0: value}
            elif not isinstance(value, dict):
                raise InputError(f"{where}.{key}", "must be tokens or a mapping of HBM GiB -> tokens",
                                 "e.g. {0: 2048, 70: 8192}")
        kwargs[key] = value
    try:
        return ServingBehaviour(**kwargs)
    except InputError as exc:
        raise InputError(f"{where}.{exc.field.split('.', 1)[-1]}", exc.message, exc.fix) from None


#: the top-level keys of a stack file
STACK_KEYS = ("name", "framework", "versions", "description", "training", "serving", "recipes",
              "default_when_version_unstated", "unstated_version_reason", "source")


def stack_from_dict(data: dict, where: str = "stack") -> StackSpec:
    """Build a ``StackSpec`` from a catalog mapping (see ``hardware_specs.stack_spec``)."""
    name = check_name(f"{where}.name", get_field(data, "name", where, str))
    where = f"stack {name}"
    refuse_unknown_keys(data, STACK_KEYS, where)
    citations: dict[str, str] = {}
    training = serving = None
    if data.get("training") is not None:
        values, cites = _behaviour_values(data["training"], f"{where}.training")
        training = _training_from_dict(values, f"{where}.training")
        citations.update(cites)
    if data.get("serving") is not None:
        values, cites = _behaviour_values(data["serving"], f"{where}.serving")
        serving = _serving_from_dict(values, f"{where}.serving")
        citations.update(cites)
    versions = data.get("versions") or []
    if not isinstance(versions, list):
        versions = [versions]
    for v in versions:
        if not isinstance(v, str):
            # YAML reads 26.10 as the number 26.1: a release must stay as spelled
            raise InputError(f"{where}.versions", f"version {v!r} is not a string",
                             'quote it as the validation files spell it, e.g. "26.10"')
        # a release is printed in tables and written into launch scripts' comments: a newline
        # there would end the comment and run what follows
        check_name(f"{where}.versions", v)
    unstated = data.get("default_when_version_unstated", False)
    if not isinstance(unstated, bool):
        raise InputError(f"{where}.default_when_version_unstated", f"must be true or false, got {shown(unstated)}")
    if unstated and not str(data.get("unstated_version_reason") or "").strip():
        raise InputError(f"{where}.unstated_version_reason", "missing",
                         "say why runs without a stated version are this stack")
    recipes = []
    for i, entry in enumerate(data.get("recipes") or []):
        here = f"{where}.recipes[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("models"), list) or not entry["models"]:
            raise InputError(f"{here}.models", "must list the model names the recipe is for")
        if not str(entry.get("source") or "").strip():
            raise InputError(f"{here}.source", "missing", "cite the recipe file")
        if training is None or not isinstance(entry.get("training"), dict):
            raise InputError(f"{here}.training", "must be a mapping of behaviour: value")
        overrides = {}
        for key, value in entry["training"].items():
            overrides[key] = getattr(_training_from_dict({key: value}, f"{here}.training"), key)
        # the recipes' fields together (a context_parallel_kind its kinds list) are checked where
        # ``StackSpec.training_for`` applies the matching recipes in order, not one recipe alone on
        # the defaults: a later recipe may rely on an earlier one's kinds
        for sel in ("gpus", "dtypes"):
            if entry.get(sel) is not None and not isinstance(entry[sel], list):
                raise InputError(f"{here}.{sel}", "must be a list")
        recipes.append(RecipeOverride(models=tuple(str(m) for m in entry["models"]), training=overrides,
                                      source=str(entry["source"]), gpus=tuple(entry.get("gpus") or ()),
                                      dtypes=tuple(entry.get("dtypes") or ())))
    return StackSpec(name=name, framework=get_field(data, "framework", where, str), versions=tuple(versions),
                     description=get_field(data, "description", where, str, ""), training=training, serving=serving,
                     citations=citations, default_when_version_unstated=unstated, recipes=tuple(recipes))
