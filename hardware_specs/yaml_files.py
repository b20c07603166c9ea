"""Reading spec files safely: one YAML document per file, and the typed fields inside it.

``parse_yaml`` is ``yaml.safe_load`` that refuses what a damaged or hostile file can hold (alias
bombs, recursive anchors, runaway nesting, repeated keys, binary bytes, integers of thousands of
digits) with an ``InputError`` naming the file; ``read_yaml`` reads a file into one mapping;
``get_field`` / ``optional_tera`` / ``refuse_unknown_keys`` check the keys and values of such a
mapping. Every catalog (GPUs, clusters, efficiency models, software stacks) and the model
presets read their files through these.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hardware_specs.errors import InputError, check_spec_size, shown, suggest

#: most values a catalog file may hold once its aliases are expanded (the largest built-in file
#: has about a hundred): a few anchors can otherwise stand for billions of values ("billion
#: laughs"), which any later walk over the data would take minutes to visit
MAX_YAML_VALUES = 100_000


def _expanded_size(node, memo: dict, limit: int, depth: int = 0) -> int:
    """Values a composed YAML node stands for with every alias expanded (stops past ``limit``)."""
    key = id(node)
    if key in memo:
        if memo[key] is None:
            raise InputError("yaml", "an anchor refers to itself (a recursive structure)",
                             "write the values out instead of using an alias")
        return memo[key]
    if depth > 200:
        raise InputError("yaml", "values nested more than 200 deep", "flatten the file")
    memo[key] = None
    total = 1
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [x for pair in node.value for x in pair]
    else:
        children = []
    for child in children:
        total += _expanded_size(child, memo, limit, depth + 1)
        if total > limit:
            break
    memo[key] = total
    return total


def _repeated_key(node) -> Any:
    """The second occurrence of a key repeated within one mapping of the node tree, or None
    (merge keys ``<<`` aside; each node visited once, so aliases cost nothing)."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            keys = set()
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    if (k.tag, k.value) in keys:
                        return k
                    keys.add((k.tag, k.value))
                stack.append(v)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
    return None


#: the folders of the files that ship with paraplan (catalogs, model presets): ``read_yaml`` parses
#: those with libyaml's C parser where PyYAML has it (loading the 31 stack files, as a process's
#: first serving call does, took 0.99 CPU s, 0.44 s with it; PyYAML's text parsing alone 1.5 s
#: against 0.1 s). Both parsers read every shipped file the same (tests/test_yaml_parsers.py); the
#: checks below run on the composed nodes either way, and a text the C parser refuses is parsed
#: again in pure Python, so an error reads as it always did. Files given by path keep the
#: pure-Python parser.
BUNDLED_FOLDERS = tuple(Path(__file__).resolve().parents[1] / name for name in ("hardware_specs", "model_specs"))
_FAST_LOADER = getattr(yaml, "CSafeLoader", None)


def _bundled(path: Path | str) -> bool:
    """Whether ``path`` is a file shipped in ``BUNDLED_FOLDERS``."""
    try:
        resolved = Path(path).resolve()
    except (OSError, ValueError, RuntimeError):
        return False
    return any(resolved.is_relative_to(folder) for folder in BUNDLED_FOLDERS)


def parse_yaml(text: str, what: str, path: Path | str, fast: bool = False) -> Any:
    """``yaml.safe_load`` of one document, refusing alias bombs, recursive anchors and runaway
    nesting with an ``InputError`` naming ``what`` (python tags are refused by the safe loader).
    ``fast``: compose with libyaml's C parser when PyYAML has it (shipped files only), and parse
    again in pure Python if it refuses the text, for the pure-Python parser's error."""
    if fast and _FAST_LOADER is not None:
        try:
            return _parse_with(_FAST_LOADER, text, what, path)
        except InputError:
            pass                           # the pure-Python parse below says it as it always has
    return _parse_with(yaml.SafeLoader, text, what, path)


def _parse_with(loader_class, text: str, what: str, path: Path | str) -> Any:
    """``parse_yaml`` with ``loader_class`` (``yaml.SafeLoader`` or its libyaml twin)."""
    loader = None
    try:
        loader = loader_class(text)     # its reader refuses control characters (a binary file) at once
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}, MAX_YAML_VALUES) > MAX_YAML_VALUES:
            raise InputError(what, f"{path} holds more than {MAX_YAML_VALUES:,} values (anchors and aliases "
                             "counted as expanded)", "write fewer values, and no nested aliases")
        twice = _repeated_key(node)
        if twice is not None:     # yaml.safe_load keeps the last silently: the first value would be ignored
            raise InputError(what, f"{path} line {twice.start_mark.line + 1}: key '{twice.value}' appears twice "
                             "in one mapping", "keep one of them")
        return loader.construct_document(node)
    except yaml.reader.ReaderError as exc:
        raise InputError(what, f"{path} holds a control character (#x{exc.character:04x}) at position {exc.position}: "
                         "not YAML text", "give the YAML file itself (a binary file is not one)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or ""
        raise InputError(what, f"malformed YAML in {path}{where}{': ' + problem if problem else ''}",
                         "fix the file's syntax") from None
    except RecursionError:
        raise InputError(what, f"{path} nests values too deeply", "flatten the file") from None
    except InputError:
        raise
    except ValueError:   # an integer of more than 4,300 digits: Python refuses to convert it
        raise InputError(what, f"{path} holds an integer of more than 4,300 digits, which no value can be",
                         "write numbers of a sensible size") from None
    finally:
        if loader is not None:
            loader.dispose()


def is_dir(path: Path) -> bool:
    """``path.is_dir()``, False for a name the system cannot look up (as ``is_file``): a folder
    given where a spec file or catalog name is expected is reported as a folder."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


def is_file(path: Path) -> bool:
    """``path.is_file()``, False for a name the system cannot look up (a 300-character catalog name
    raised ENAMETOOLONG, reported as an 'io' error instead of an unknown name)."""
    try:
        return Path(path).is_file()
    except OSError:
        return False


def exists(path: Path) -> bool:
    """``path.exists()``, False for a name the system cannot look up (as ``is_file``)."""
    try:
        return Path(path).exists()
    except OSError:
        return False


def read_yaml(path: Path, what: str) -> dict[str, Any]:
    """Parse one YAML mapping; malformed files raise ``InputError`` naming the file."""
    check_spec_size(path, what)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(what, f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(what, f"{path} is not UTF-8 text (byte {exc.start})", "save it as UTF-8") from None
    data = parse_yaml(text, what, path, fast=_bundled(path))
    if not isinstance(data, dict):
        raise InputError(what, f"{path} must hold a YAML mapping (key: value lines)")
    return data


def get_field(data: dict, key: str, where: str, kind=float, default: Any = ...) -> Any:
    if key not in data or data[key] is None:
        if default is ...:
            raise InputError(f"{where}.{key}", "missing", f"add '{key}:' to the file")
        return default
    value = data[key]
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            raise ValueError
        if kind is int:
            # an integer, or a float / string holding one (never truncate 1.5 to 1)
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            return int(float(value)) if not isinstance(value, int) else value
        if kind is float and isinstance(value, bool):
            raise ValueError
        if kind is str and (isinstance(value, bool) or not isinstance(value, (str, int))):
            raise ValueError                   # text (a bare number reads as its digits)
        return kind(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{where}.{key}", f"expected {_KIND_WORDS.get(kind, kind.__name__)}, got {shown(value)}") from None


#: a field's kind as its error says it: in the words of a YAML file, not Python's type names
_KIND_WORDS = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}


def optional_tera(data: dict, key: str, where: str) -> float | None:
    value = get_field(data, key, where, float, None)
    if value is not None and not value > 0:
        raise InputError(f"{where}.{key}", f"must be > 0, got {value:g}", f"remove '{key}:' if unknown")
    return None if value is None else value * 1e12


def refuse_unknown_keys(data: dict, known, where: str) -> None:
    """``InputError`` naming the first key of ``data`` not in ``known`` (a typo such as
    ``gpus_per_nod`` would otherwise leave the default in place without a word)."""
    unknown = sorted(str(k) for k in set(data) - set(known))
    if unknown:
        hint = suggest(unknown[0], known)
        raise InputError(f"{where}.{unknown[0]}", "unknown key",
                         (hint + " " if hint.startswith("did you mean") else "") + "known keys: " + ", ".join(sorted(known)))
