"""A sweep row's reason in the spec's words: the planners' errors name command-line options
(``raise --max-tp to 16``, ``shorten --isl / --osl``), which a spec has no such spelling for;
a row names the setting instead (``max_tp``, ``isl / osl``: the spec's key where it has one)."""
from __future__ import annotations

import re

#: a command-line option: two dashes at a word's start, then lower-case words joined by dashes
_OPTION = re.compile(r"(?<![\w./-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")


def sweep_reason(exc: BaseException | str) -> str:
    """``exc`` as text, with each ``--some-option`` written as the setting ``some_option``."""
    return _OPTION.sub(lambda m: m.group(1).replace("-", "_"), str(exc))
