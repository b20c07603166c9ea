"""Serving inputs that would change nothing, refused with one message whether they come from
``paraplan serve`` or from :mod:`paraplan.serving_api` (the API had run them silently: a
release beside a stack name ran that stack, expert options on a dense model were ignored).

Each check takes ``spell``, how the caller names an input (``--expert-precision`` on the command
line, ``expert_precision`` in Python), so the error names what the user typed.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from hardware_specs.errors import InputError
from model_specs.model_spec import ModelSpec

Spell = Callable[[str], str]


def keyword(name: str) -> str:
    """A Python keyword's spelling: itself."""
    return name


def names_a_stack(backend: str) -> bool:
    """Whether ``backend`` is a stack the catalog or a file holds (an unknown name is left to
    ``ServingContext.build``, which names the frameworks it might mean)."""
    from hardware_specs.catalog import load_stack
    try:
        load_stack(str(backend))
    except InputError:
        return False
    return True


def check_release(backend: Any, backend_version: str | None, spell: Spell = keyword) -> None:
    """``InputError`` where ``backend_version`` names no release, or is given with a ``backend``
    naming one stack profile (``vllm-0.11``): a release cannot choose among profiles there, and
    was ignored."""
    if backend_version is None:
        return
    from hardware_specs.catalog import framework_key, _unstated, serving_frameworks
    if _unstated(backend_version):
        raise InputError(spell("backend_version"), f"{backend_version!r} names no release",
                         f"give a release such as 0.11.0, or leave {spell('backend_version')} out for the newest "
                         "profile")
    if isinstance(backend, str) and framework_key(backend) not in serving_frameworks() and names_a_stack(backend):
        raise InputError(spell("backend_version"), f"{spell('backend')} {backend} names one stack profile, so a "
                         "release cannot choose among profiles",
                         f"pass the framework ({spell('backend')} vllm, sglang or trtllm) with "
                         f"{spell('backend_version')}, or drop it")


def check_dense(model: ModelSpec, expert_precision: str | None = None,
                expert_split: Mapping[str, Any] | None = None, spell: Spell = keyword) -> None:
    """``InputError`` where ``model`` is dense (no routed experts) and an expert option is given:
    an expert split (``expert_split``: option name -> value, None for not given) or
    ``expert_precision``. Refused, not ignored: it would change nothing (an expert split equal to
    tp x adp passed silently; the weights stayed in the dense format whatever
    ``expert_precision`` said)."""
    if model.moe is not None:
        return
    given = [name for name, value in (expert_split or {}).items() if value is not None]
    if given:
        raise InputError(spell(given[0]), f"{model.name} is dense: it has no routed experts to split",
                         f"drop {spell('moe_tp')} / {spell('moe_ep')} (the MLP splits as {spell('tp')})")
    if expert_precision:
        raise InputError(spell("expert_precision"), f"{model.name} is dense: it has no routed experts",
                         f"drop {spell('expert_precision')}, or set the weights' format with {spell('precision')}")
