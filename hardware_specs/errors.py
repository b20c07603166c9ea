"""The one error type for bad user input, shared by every layer.

A ``InputError`` names the offending field and says how to fix it; the CLI prints
``error: <field>: <message>`` on one line and exits with code 2.
"""
from __future__ import annotations

import difflib
import math
import numbers
import os
import re
import sys
from typing import Any, Iterable, Mapping

import numpy as np


class InputError(ValueError):
    """Bad input: a field, what is wrong with it, and (optionally) the fix."""

    def __init__(self, field: str, message: str, fix: str | None = None):
        self.field = field
        self.message = message
        self.fix = fix
        text = f"{field}: {message}"
        if fix:
            text += f" ({fix})"
        super().__init__(text)

    def __reduce__(self):
        # rebuilt from its fields: an error raised in a search's worker process reaches the
        # parent (the default pickling passes only the text, and the parent's pool hangs)
        return (type(self), (self.field, self.message, self.fix))


def missing_value(value) -> str | None:
    """``"pandas NA"`` / ``"pandas NaT"`` when ``value`` is pandas' missing-value marker (a cell
    of a DataFrame row read with ``.to_dict()`` or ``.iloc``), else None. Neither is a value of
    any field: ``pd.NA``'s truth value raises ``TypeError`` ('boolean value of NA is ambiguous')
    wherever a check reads it, so an entry point refuses it by name (``refuse_missing``). (Only
    when pandas is loaded: a value cannot be one of its markers otherwise.)"""
    pandas = sys.modules.get("pandas")
    if pandas is None:
        return None
    if value is pandas.NA:
        return "pandas NA"
    if value is pandas.NaT:
        return "pandas NaT"
    return None


def refuse_missing(values: Mapping[str, Any]) -> None:
    """``InputError`` naming the first of ``values`` (argument: value) that is pandas' missing
    value (``missing_value``); None, the "not given" of many arguments, passes."""
    for name, value in values.items():
        kind = missing_value(value)
        if kind is not None:
            raise InputError(name, f"missing value ({kind})", "give a value or leave the argument out")


def suggest(name: str, known: Iterable[str]) -> str:
    """A 'did you mean' hint listing the closest known names, or all names if none is close."""
    known = sorted(known)
    key = name.strip().lower()
    # a blank name starts every name: list them rather than 'mean' the first three
    prefixed = [k for k in known if key and (k.startswith(key) or key.startswith(k))]
    close = prefixed[:3] + [k for k in difflib.get_close_matches(key, known, n=3, cutoff=0.4)
                            if k not in prefixed]
    close = close[:3]
    if close:
        return "did you mean " + ", ".join(close) + "?"
    listed = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
    return f"known: {listed}"


#: a number in exponent notation that PyYAML (YAML 1.1) reads as text: 1e7, 1.0e7, 5E-3 (only a
#: mantissa with a dot and a signed exponent, 1.0e+7, is read as a number)
_YAML_TEXT_EXPONENT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def yaml_exponent_hint(value) -> str | None:
    """The fix for a number PyYAML read as text because of its exponent (``'1e7'`` ->
    ``"YAML reads 1e7 as text: write 1.0e+7"``); None for anything else (``'500'``, ``'abc'``, 7)."""
    if not isinstance(value, str) or not _YAML_TEXT_EXPONENT.match(value.strip()):
        return None
    mantissa, exponent = re.split("[eE]", value.strip())
    mantissa = mantissa if "." in mantissa and not mantissa.endswith(".") else mantissa.rstrip(".") + ".0"
    sign = "" if exponent[0] in "+-" else "+"
    return f"YAML reads {value.strip()} as text: write {mantissa}e{sign}{exponent}"


#: what a name read from a user's file may hold: it is printed in tables and written into launch
#: scripts (comments, messages, arguments), where a newline or a shell metacharacter such as
#: ``$(...)`` would run as a command
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


def check_name(field: str, name: str) -> str:
    """``name`` if it is a safe name (``SAFE_NAME``), else ``InputError``."""
    if not SAFE_NAME.match(name):
        cut = name if len(name) <= 40 else name[:40] + "..."
        raise InputError(field, f"{cut!r} is not a name: letters, digits and . _ + - only, at most 128, "
                         "starting with a letter or digit", "rename it with those characters only")
    return name


def safe_name(text: str, fallback: str = "model") -> str:
    """``text`` made a safe name (``SAFE_NAME``): every other character becomes '-' (for names a
    file does not state but its path gives, e.g. a Hugging Face checkpoint folder)."""
    name = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-._+")[:128]
    return name or fallback


#: the largest model, hardware, stack, plan or sweep file read (the catalog's are a few KB; a
#: Hugging Face config.json tens of KB): a 300 MB file took 90 s to be refused as not a mapping
MAX_SPEC_BYTES = 16 * 2**20


def check_spec_size(path, what: str) -> None:
    """``InputError`` for a spec file larger than ``MAX_SPEC_BYTES`` (before reading it)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return                  # the reader names what is wrong with the path
    if size > MAX_SPEC_BYTES:
        raise InputError(what, f"{path} is {size / 2**20:,.0f} MiB; a spec file is at most {MAX_SPEC_BYTES // 2**20} MiB",
                         "give the model, hardware or plan file itself")


def as_float(value) -> float:
    """``float(value)``, an integer too large for a float (``10**400``: Python raises
    ``OverflowError``) read as ``inf`` with its sign, so each check that refuses a non-finite
    number refuses it too; ``TypeError`` / ``ValueError`` as float() raises them."""
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


def file_float(field: str, value, fix: str = "check the number") -> float:
    """``float(value)`` of a number read from an input file, with ``InputError`` naming ``field``
    for an integer too large for any float (YAML and JSON read ``10**400`` as a Python int, and
    ``float()`` of it raised ``OverflowError``, an internal error); ``TypeError`` / ``ValueError``
    as ``float()`` raises them, for the caller's own message."""
    try:
        return float(value)
    except OverflowError:
        raise InputError(field, f"{shown(value)} is beyond the largest number a file may hold "
                         f"({sys.float_info.max:.3g})", fix) from None


def is_finite(value) -> bool:
    """``math.isfinite`` for any real number, False (not ``OverflowError``) for an integer too
    large for a float, and (not numpy's ``TypeError``) for a Python int above 2**64."""
    return math.isfinite(as_float(value))


def require_positive(field: str, value: float, allow_zero: bool = False) -> None:
    """Raise ``InputError`` unless ``value`` is a positive (or non-negative) finite number; an
    integer too large for a float (``10**400``) is above the largest supported value."""
    try:
        v = as_float(value)
    except (TypeError, ValueError):
        raise InputError(field, f"expected a number, got {shown(value)}") from None
    huge = isinstance(value, numbers.Integral) and v in (float("inf"), float("-inf"))
    if huge and v > 0:
        raise InputError(field, f"{shown(value)} is above the largest supported value "
                         f"{sys.float_info.max:.3g}", "check the number")
    if v != v or (v in (float("inf"), float("-inf")) and not huge):
        raise InputError(field, f"must be finite, got {shown(value)}")
    if allow_zero and v < 0:
        raise InputError(field, f"must be >= 0, got {shown(value)}")
    if not allow_zero and v <= 0:
        raise InputError(field, f"must be > 0, got {shown(value)}")


def require_plausible(field: str, value: float, low: float = 0.0, high: float = float("inf"),
                      allow_zero: bool = False) -> None:
    """``require_positive``, then ``low <= value <= high``: bounds many orders of magnitude past
    any real hardware, so a value outside them is a typo or a unit slip. Without them a finite
    but absurd input (a link of 1e-300 bytes/s) gives finite but absurd outputs (steps of 1e290 s)."""
    if isinstance(value, numbers.Integral) and value > high:     # 10**400: its bound, not float's
        raise InputError(field, f"{shown(value)} is above the plausible maximum {high:g}",
                         "check the number and its unit")
    require_positive(field, value, allow_zero=allow_zero)
    v = as_float(value)
    if (v > 0 or not allow_zero) and v < low:
        raise InputError(field, f"{value!r} is below the plausible minimum {low:g}", "check the number and its unit")
    if v > high:
        raise InputError(field, f"{value!r} is above the plausible maximum {high:g}", "check the number and its unit")


#: the longest integer literal an input file may hold: every count, size or limit paraplan reads
#: has fewer digits (Python refuses to convert integers of more than 4,300 digits at all)
MAX_INT_DIGITS = 30


def whole_number(field: str, value, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int when it is a whole number >= ``minimum`` (an int, an integral float, a
    numpy integer), else ``InputError`` naming ``field``: nan, inf, 4096.7, a list, an array or
    True are neither truncated nor left to int()'s ValueError / OverflowError / TypeError. An
    integer is whole however large (``10**400`` had raised ``OverflowError`` in ``math.isfinite``):
    above ``maximum`` (where given) it is refused as above the largest supported value, as the
    training options are, and a caller without one bounds it before any float arithmetic."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) \
            or not (isinstance(value, numbers.Integral) or math.isfinite(value)) \
            or value != int(value) or value < minimum:
        raise InputError(field, f"must be a whole number >= {minimum}, got {shown(value)}")
    if maximum is not None and value > maximum:
        raise InputError(field, f"{as_given(value)} is above the largest supported value {maximum:,}",
                         "check the number")
    return int(value)


def digits_text(value) -> str | None:
    """``"an integer of 401 digits"`` (``"a negative integer of ..."`` below zero) for an integer of
    more than ``MAX_INT_DIGITS`` digits, which an error message gives by its size rather than in
    full (Python will not even write one of over 4,300 digits); None for anything else."""
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)) \
            or abs(int(value)) < 10**MAX_INT_DIGITS:
        return None
    size = abs(int(value))
    kind = "a negative integer" if value < 0 else "an integer"
    return f"{kind} of {len(str(size)):,} digits" if size < 10**4000 else f"{kind} of over 4,000 digits"


def shown(value) -> str:
    """``value`` as an error message quotes it, spelled as a user types it in a YAML file or a
    flag: ``true`` / ``false`` for a boolean (Python's ``repr`` says ``True``, which no input file
    or flag of paraplan takes), ``digits_text`` for a huge integer, a list or tuple item by item
    the same way, ``repr`` otherwise."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        items = ", ".join(shown(v) for v in value)
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' if len(value) == 1 else ''})"
    return digits_text(value) or repr(value)


#: an integer of more digits than this is quoted by its size (``digits_text``), not in full: a
#: message stays one readable line, and Python will not write one of over 4,300 digits at all
MAX_QUOTED_DIGITS = 40


def as_given(value) -> str:
    """A number as an error message quotes it: an integer with thousands separators (by its
    number of digits above ``MAX_QUOTED_DIGITS``), a float as Python writes it (``1e+30``, not
    the 31-digit integer ``int(1e30)`` is)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        if abs(int(value)) >= 10**MAX_QUOTED_DIGITS:
            return digits_text(value)
        return f"{int(value):,}"
    return repr(float(value)) if isinstance(value, numbers.Real) else repr(value)


def unique_keys(pairs: list) -> dict:
    """A JSON object's ``object_pairs_hook``: the keys as a dict, ``InputError`` when one appears
    twice (json's default keeps the last silently, where the YAML reader refuses the same file)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise InputError("json", f"key {key!r} appears twice", "keep one of them")
        out[key] = value
    return out


def json_int(literal: str) -> int:
    """``json.loads(..., parse_int=json_int)``: an integer literal, refused with an
    ``InputError`` when it has more than ``MAX_INT_DIGITS`` digits (a damaged or hostile file)."""
    digits = len(literal.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise InputError("json", f"an integer of {digits:,} digits is not a plausible value",
                         "write numbers of a sensible size")
    return int(literal)


def not_a_file(path) -> str:
    """What is wrong with ``path`` where a regular file was expected: missing, a directory, or
    something else (a FIFO, a device), for an ``InputError`` message."""
    from pathlib import Path
    if str(path) == "":                 # Path("") is the working directory: say what was given
        return "an empty name is not a file"
    p = Path(str(path))
    try:
        if not p.exists():
            return f"no such file {path}"
        if p.is_dir():
            return f"{path} is a directory, not a file"
    except OSError:
        return f"no such file {path}"
    return f"{path} is not a regular file"

