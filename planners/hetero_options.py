"""The search options of ``plan_heterogeneous`` checked before any search (one ``InputError`` each).

What each guards against (session 66's audit, ``tests/test_hetero_audit_66.py``): ``keep=0`` (or
-1, nan) silently dropped every mix and returned a slower best plan (Llama-3-8B on 16 A100 + 16
H100: 3.717 s instead of 2.887 s); ``top=0`` said no plan fits in memory, ``top=-1`` returned the
whole table and ``top=1.5`` raised a pandas TypeError; ``zeros=5`` and ``recomputes=['bogus']``
raised TypeError / ValueError, ``zeros=(0.5,)`` was truncated to ZeRO-0, a string of recompute
modes was read letter by letter, ``recomputes=[]`` was silently the default search and
``sequence_parallel=('yes',)`` or an empty tuple reached the stack check as a truthy string or as
"every setting asked for is one the stack lacks". Each is now refused naming the argument.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from hardware_specs.errors import InputError, shown, whole_number
from simulator.parallel_config import Recompute

#: the ZeRO stages the pooled model prices (``simulator.heterogeneous.compose``)
POOLED_ZERO_STAGES = (0, 1)


def _listed(field: str, values, example: str) -> list:
    """``values`` as a non-empty list: a list, tuple, set or array; a string or a scalar is refused."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InputError(field, f"must be a list, got {shown(values)}", f"e.g. {field}={example}")
    out = list(values)
    if not out:
        raise InputError(field, "names no value", f"give at least one (e.g. {field}={example}), or leave it out")
    return out


def search_counts(keep, top) -> tuple[int, int]:
    """``keep`` (mixes per shared key that reach the exact score) and ``top`` (rows kept), each a
    whole number >= 1."""
    return whole_number("keep", keep), whole_number("top", top)


def zero_stages(zeros) -> tuple[int, ...]:
    """The ZeRO stages to search: whole numbers, each 0 or 1."""
    out = []
    for z in _listed("zeros", zeros, "(0, 1)"):
        stage = whole_number("zeros", z, minimum=0)
        if stage not in POOLED_ZERO_STAGES:
            raise InputError("zero_stage", f"ZeRO-{stage} is not modelled across pools yet", "use ZeRO 0 or 1")
        out.append(stage)
    return tuple(out)


def sequence_parallel_modes(modes) -> tuple[bool, ...]:
    """Sequence parallelism off and / or on: booleans only (a string is truthy whatever it says)."""
    out = []
    for s in _listed("sequence_parallel", modes, "(False, True)"):
        if not isinstance(s, (bool, np.bool_)):
            raise InputError("sequence_parallel", f"must be True or False, got {shown(s)}", "e.g. sequence_parallel=(False, True)")
        out.append(bool(s))
    return tuple(out)


def recompute_modes(recomputes) -> tuple[Recompute, ...]:
    """The recomputation modes to search (None: every one); names or ``Recompute`` members."""
    if recomputes is None:
        return tuple(Recompute)
    known = [r.value for r in Recompute]
    out = []
    for r in _listed("recomputes", recomputes, "['none', 'full']"):
        if isinstance(r, Recompute):
            out.append(r)
        elif isinstance(r, str) and r in known:
            out.append(Recompute(r))
        else:
            raise InputError("recomputes", f"unknown recomputation {r!r}", f"use {', '.join(known)}")
    return tuple(out)
