"""A token count on the command line: an integer, or an integer with a decimal (k, M, G) or a
binary (Ki, Mi, Gi) suffix. ``4Mi`` is 4,194,304 tokens (what "a 4M-token batch" of 4,096- or
8,192-token sequences means, e.g. Llama 3's), ``4M`` is 4,000,000."""
from __future__ import annotations

import re

import click

#: multiplier of each suffix
SUFFIXES = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
_PATTERN = re.compile(r"^\s*([0-9]+)(Ki|Mi|Gi|k|K|M|G)?\s*$")


def parse_token_count(text: str) -> int | None:
    """The number of tokens ``text`` names, or None if it is not a token count."""
    match = _PATTERN.match(text)
    if match is None:
        return None
    return int(match.group(1)) * SUFFIXES[match.group(2) or ""]


class TokenCount(click.ParamType):
    """Click type of ``--global-batch-tokens``: a positive token count (``parse_token_count``)."""

    name = "TOKENS"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            count = value
        else:
            count = parse_token_count(str(value))
            if count is None:
                self.fail(f"{value!r} is not a token count (e.g. 4194304, 4Mi, 4M or 512k)", param, ctx)
        if count < 1:
            self.fail(f"{value!r} is not a positive number of tokens", param, ctx)
        return count


TOKENS = TokenCount()
