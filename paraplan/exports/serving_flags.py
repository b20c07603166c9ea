"""The serving engines' launch interfaces as data (``serving_flags.json``), and a check of an
export's command against them.

``serving_flags.json`` is written by ``tools/serving_flags.py`` from vLLM's and SGLang's real
argument parsers at the pinned releases (every option's flag strings, type, choices and arity)
and, for TensorRT-LLM (which cannot be installed without its CUDA wheel), from its source: the
``trtllm-serve`` click options and the LLM-args fields its ``--extra_llm_api_options`` YAML is
validated against (pydantic ``extra="forbid"``: an unknown key is an error). ``check_command``
holds one engine command of an export to that table: every option exists, takes a value when it
needs one and none when it is a switch, and each value has the option's type and is one of its
choices; ``check_trtllm_yaml`` holds an options YAML to the LLM-args fields.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import yaml

from hardware_specs.errors import InputError

TABLE = Path(__file__).with_name("serving_flags.json")
#: words before the first option in each engine's command (program and positional arguments)
PROGRAMS = {"vllm": ("vllm", "serve"), "sglang": ("python", "-m", "sglang.launch_server"), "trtllm": ("trtllm-serve",)}


@functools.lru_cache(maxsize=1)
def table() -> dict:
    """The parsed ``serving_flags.json`` (read once; treat as read-only)."""
    return json.loads(TABLE.read_text())


def release(engine: str) -> str:
    """The release the table was read from: ``vLLM 0.19.1``, ``SGLang 0.5.23``, or TensorRT-LLM's source."""
    src = table()["engines"][engine]["source"]
    if engine == "trtllm":
        return "TensorRT-LLM main-branch source (" + ", ".join(src.get("read_from", [])[:1]) + ")"
    return f"{src['package']} {src['version']}"


@functools.lru_cache(maxsize=4)
def options(engine: str) -> dict[str, dict]:
    """Every option string of ``engine``'s launch command -> its table entry."""
    eng = table()["engines"][engine]
    entries = eng["serve_options"] if engine == "trtllm" else eng["flags"]
    out = {}
    for key, entry in entries.items():
        for name in entry.get("option_strings") or ([key] if key.startswith("-") else []):
            out[name] = entry
    return out


def _takes_value(entry: dict) -> bool:
    if "is_flag" in entry:                       # click
        return not entry["is_flag"]
    return entry.get("nargs") != 0


def _value_problem(entry: dict, value: str) -> str | None:
    if "$" in value:                             # a variable the script sets: checked where it is set
        return None
    kind = str(entry.get("type") or "")
    try:
        if kind in ("int", "human_readable_int") or kind.endswith("(int)"):
            int(value)
        elif kind == "float" or kind.endswith("(float)"):
            float(value)
    except ValueError:
        return f"{value!r} is not a {kind}"
    choices = entry.get("choices")
    if choices and value not in [str(c) for c in choices]:
        return f"{value!r} is not one of {', '.join(map(str, choices))}"
    return None


def command_problems(engine: str, argv: list[str]) -> list[str]:
    """What ``engine``'s parser would reject in ``argv`` (the engine's command, program first),
    by the table; empty when it accepts every option."""
    program = PROGRAMS[engine]
    words = list(argv)
    if tuple(words[:len(program)]) != program:
        return [f"the command does not start with {' '.join(program)}"]
    words = words[len(program):]
    known = options(engine)
    problems: list[str] = []
    positional = 1                               # the model (vLLM, TensorRT-LLM); SGLang takes --model-path
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            if engine == "sglang" or positional == 0:
                problems.append(f"unexpected argument {word!r}")
            positional -= 1
            i += 1
            continue
        entry = known.get(word)
        if entry is None:
            problems.append(f"{word}: no such option")
            i += 1
            continue
        if _takes_value(entry):
            if i + 1 >= len(words) or words[i + 1].startswith("--"):
                problems.append(f"{word}: needs a value")
                i += 1
                continue
            why = _value_problem(entry, words[i + 1])
            if why:
                problems.append(f"{word}: {why}")
            i += 2
        else:
            i += 1
    return problems


def check_command(engine: str, argv: list[str]) -> None:
    """Raise ``InputError`` naming the first option ``engine``'s parser would reject."""
    problems = command_problems(engine, argv)
    if problems:
        raise InputError("--emit", f"the {engine} command would be refused: {problems[0]}",
                         "report this: the export and tools/serving_flags.py's table disagree")


def trtllm_yaml_problems(text: str) -> list[str]:
    """Keys of an ``--extra_llm_api_options`` YAML that TensorRT-LLM's LLM args do not have
    (top level, and one level into the nested configs the table lists)."""
    eng = table()["engines"]["trtllm"]
    data = yaml.safe_load(text) or {}
    top, nested = eng["llm_args"], eng["nested"]
    problems = []
    for key, value in data.items():
        if key not in top:
            problems.append(f"{key}: not an LLM-args field")
            continue
        model = top[key].get("model")
        if isinstance(value, dict) and model in nested:
            fields = nested[model]["fields"]
            problems += [f"{key}.{sub}: not a {model} field" for sub in value if sub not in fields]
    return problems
