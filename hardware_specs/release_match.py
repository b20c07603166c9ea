"""Which software-stack profile describes a framework release that no profile lists.

The stack catalog holds one profile per framework release where documented behaviour changed
(``hardware_specs/stacks/README.md``), each listing the releases it describes (``versions``; a
patch, rc or post release of a listed one is covered too, ``StackSpec.covers``; releases compare
number by number, so 26.4.1, 26.04.1 and 26.04.01 are one release). A release
between two profiles therefore behaves as the earlier one until the later one's change: a run
of NeMo 24.11 is described by the NeMo 24.09 profile, vLLM 0.20 by the profile that lists 0.19.

``match_release`` applies that rule and says, in a note for the row or the command's output,
when the profile was not listed for the release:

* a listed (or covered) release: that profile, no note;
* otherwise the profile of the newest listed release before it, of the same numbering scheme
  (years such as ``2022``, container tags such as ``24.09`` and release numbers such as ``0.12``
  are not compared with each other);
* a release older than every listed one: the oldest profile, noted as such;
* a release that starts with no number (``main``), or whose numbering no profile shares: the
  framework's profile marked ``default_when_version_unstated``, or its only profile; with
  neither, ``None`` (the caller reports the known releases).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from hardware_specs.stack_spec import StackSpec, release_parts

#: what a release a user names looks like: dot-separated numbers (an optional leading v), then
#: pre / post / dev suffixes, each with an optional number, and a local label after "+" (PEP
#: 440's spellings and the engines' tags: 0.11.0, v0.5.10.post1, 1.2.0rc6.post3, 0.5.1-rc0.pre3,
#: 1.1.0-dev.2, 0.6.3+cu118)
_RELEASE = re.compile(r"v?\d+(?:\.\d+)*(?:[.\-_]?(?:a|b|c|rc|alpha|beta|pre|preview|post|dev)(?:[.\-_]?\d+)?)*"
                      r"(?:\+[a-z0-9]+(?:[.\-_][a-z0-9]+)*)?", re.IGNORECASE)
#: a first component this large is a year (Megatron-LM 2021), not a release number (0.12, 24.09)
_YEAR_FROM = 1000
#: a first component from this up is a container's year-month tag (NeMo 24.09, Megatron-Bridge
#: 26.08), not a library release (Megatron-Bridge 0.6.0, vLLM 0.12, PyTorch 2.13): a profile
#: listing both (Megatron-Bridge's containers and the library releases they ship) compares each
#: with its own kind
_CONTAINER_FROM = 20


@dataclass(frozen=True)
class ReleaseMatch:
    """The profile chosen for a release; ``note`` says why when the profile does not list it
    (empty when it does)."""
    stack: StackSpec
    note: str = ""


def release_numbers(version) -> tuple[int, ...] | None:
    """The leading numeric components of a release string, for ordering: ``'25.02.01'`` ->
    (25, 2, 1), ``'v0.5.10.post1'`` -> (0, 5, 10), ``'1.2.0rc6'`` -> (1, 2, 0), ``'2022'`` ->
    (2022,); ``None`` when it does not start with a number."""
    return release_parts(version)[0]


def looks_like_release(version) -> bool:
    """Whether ``version`` (text) is spelled as a release (``_RELEASE``): ``nope``, ``latest``,
    ``-1``, ``1e30`` or two lines are not. The validation files' own cells (``gpt-oss-dev``,
    ``nightly-5b8c30d6``) are read by ``match_release`` without this test."""
    return isinstance(version, str) and _RELEASE.fullmatch(version.strip()) is not None


def _scheme(numbers: tuple[int, ...]) -> str:
    if numbers[0] >= _YEAR_FROM:
        return "year"
    return "container" if numbers[0] >= _CONTAINER_FROM else "release"


def match_release(stacks: Sequence[StackSpec], framework: str, version) -> ReleaseMatch | None:
    """The profile among ``stacks`` (all of ``framework``) that describes ``version``; see the
    module docstring. ``None`` when no rule picks one. A listed release is found before a
    covered one (Megatron-Bridge 26.02.01 has its own profile, though it also reads as a patch
    of 26.02)."""
    for stack in stacks:
        if stack.lists(version):
            return ReleaseMatch(stack)
    for stack in stacks:
        if stack.covers(version):
            return ReleaseMatch(stack)
    wanted = release_numbers(version)
    listed = [(numbers, release, stack) for stack in stacks for release in stack.versions
              if (numbers := release_numbers(release)) is not None]
    if wanted is not None:
        same = [entry for entry in listed if _scheme(entry[0]) == _scheme(wanted)]
        earlier = [entry for entry in same if entry[0] <= wanted]
        if earlier:
            _, release, stack = max(earlier, key=lambda entry: entry[0])
            return ReleaseMatch(stack, f"{framework} {version} has no profile of its own: {stack.name}, the "
                                       f"profile of {release}, the newest profiled release before it")
        if same:
            _, release, stack = min(same, key=lambda entry: entry[0])
            return ReleaseMatch(stack, f"{framework} {version} is older than every profile: {stack.name}, "
                                       f"the profile of {release}, the oldest")
    defaults = [stack for stack in stacks if stack.default_when_version_unstated]
    fallback = defaults[0] if len(defaults) == 1 else (stacks[0] if len(stacks) == 1 else None)
    if fallback is None:
        return None
    return ReleaseMatch(fallback, f"{framework} {version} is numbered unlike every profile: {fallback.name}, "
                                  f"the framework's default profile")
