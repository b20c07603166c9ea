"""Megatron-LM's training-argument interface as data, and the check of a command line against it.

Megatron-LM's ``pretrain_gpt.py`` parser (``megatron/training/arguments.py``) is not on the
package index (megatron-core does not hold it), so ``tools/megatron_flags.py`` reads it from the
source at a pinned commit and writes ``megatron_flags.json`` beside this module:

* ``flags``: every option the parser defines, with ``dest``, ``action`` (``store``,
  ``store_true``, ``store_false``, ...), ``type`` (``int``, ``float``, ``str`` or the name of a
  custom parser), ``choices``, ``nargs`` and ``default``;
* ``derived``: values ``validate_args`` computes before its checks (``data_parallel_size``);
* ``rules``: the checks of ``validate_args``, ``TransformerConfig.__post_init__``, the
  micro-batch calculator and the parallel-state initialisation that the exports rely on, each
  as ``when`` / ``require`` expressions over the arguments' ``dest`` names plus ``world_size``
  and ``env_<NAME>`` (environment variables), with the source it states; ``"runtime": true``
  marks a check the real code makes only when the model runs (Megatron-Core's MoE layer,
  Transformer Engine's attention), which the probe cannot trigger;
* ``verified``: the export command lines the tool ran through the real ``parse_args``,
  ``validate_args``, ``core_transformer_config_from_args`` and micro-batch calculator, and what
  they answered.

``check_command`` parses a command line the way argparse would with that table and returns
every rule it breaks (an empty list when Megatron-LM would accept it). Expressions use a small
safe evaluator (names, numbers, strings, lists, arithmetic, comparisons, ``and``/``or``/``not``,
``in``, ``is None`` and the functions ``prod``, ``len``, ``int``, ``max`` and the layout-string readers
``layout_stages``, ``layout_count``, ``layout_mtp_placed``); nothing is ``eval``-ed.
"""
from __future__ import annotations

import ast
import json
import math
import operator
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from hardware_specs.errors import InputError

TABLE_PATH = Path(__file__).resolve().parent / "megatron_flags.json"


@lru_cache(maxsize=1)
def _table() -> dict:
    """The committed interface table (``megatron_flags.json``)."""
    try:
        return json.loads(TABLE_PATH.read_text())
    except (OSError, ValueError) as exc:
        raise InputError("megatron_flags.json", f"cannot read the Megatron-LM flag table ({exc})",
                         "regenerate it with tools/megatron_flags.py") from None


def table() -> dict:
    """The committed interface table (``megatron_flags.json``)."""
    return _table()


# ---- the command line -------------------------------------------------------------------------

_CASTS = {"int": int, "float": float}


def parse_command(argv: Iterable[str], t: Mapping | None = None) -> tuple[dict, list[str]]:
    """``(namespace, problems)``: the parser's defaults overlaid with ``argv``, as argparse
    would set them, and every flag that argparse would reject (unknown, repeated, a missing or
    extra value, a value of the wrong type or outside its choices)."""
    t = table() if t is None else t
    flags = t["flags"]
    custom = t.get("custom_types", {})
    ns = dict(_defaults(t))
    problems: list[str] = []
    argv = list(argv)
    seen: set[str] = set()
    i = 0
    while i < len(argv):
        flag = argv[i]
        i += 1
        spec = flags.get(flag)
        if spec is None:
            problems.append(f"{flag}: not a Megatron-LM argument")
            continue
        if flag in seen:
            problems.append(f"{flag}: given twice")
        seen.add(flag)
        action = spec["action"]
        if action in ("store_true", "store_false", "store_const"):
            ns[spec["dest"]] = spec.get("const", action == "store_true")
            continue
        values = []
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        nargs = spec.get("nargs")
        if nargs in (None, "?") and len(values) != 1 or nargs == "+" and not values or \
                isinstance(nargs, int) and len(values) != nargs:
            problems.append(f"{flag}: expects {'one value' if nargs is None else nargs} value(s), got {values}")
            continue
        kind = spec.get("type") or "str"
        cast = _CASTS.get(kind, str)
        try:
            typed = [cast(v) for v in values]
        except ValueError:
            problems.append(f"{flag}: {values} is not of type {kind}")
            continue
        if kind in custom and not all(re.match(custom[kind], v.replace(" ", "")) for v in values):
            problems.append(f"{flag}: {values} is not in the format of {kind}")
            continue
        choices = spec.get("choices")
        if choices is not None and any(v not in choices for v in typed):
            problems.append(f"{flag}: {values} not among its choices {choices}")
            continue
        ns[spec["dest"]] = typed if nargs in ("+", "*") or isinstance(nargs, int) else typed[0]
    return ns, problems


_DEFAULTS: dict[int, tuple[Mapping, dict]] = {}


def _defaults(t: Mapping) -> dict:
    """The parser's defaults by ``dest`` (computed once per table object)."""
    cached = _DEFAULTS.get(id(t))
    if cached is None or cached[0] is not t:
        cached = (t, {spec["dest"]: spec.get("default") for spec in t["flags"].values()})
        _DEFAULTS[id(t)] = cached
    return cached[1]


def check_command(argv: Iterable[str], world_size: int, env: Mapping[str, str] | None = None,
                  table: Mapping | None = None) -> list[str]:
    """Every flag problem and broken rule of ``argv`` launched on ``world_size`` GPUs with the
    environment ``env``; empty when the table (default: the committed one) says Megatron-LM
    accepts it."""
    t = _table() if table is None else table
    ns, problems = parse_command(argv, t)
    if problems:            # argparse exits before validate_args sees anything
        return problems
    names = dict(ns)
    names["world_size"] = int(world_size)
    for key, value in (env or {}).items():
        names[f"env_{key}"] = str(value)
    for var in t.get("environment", ()):
        names.setdefault(f"env_{var}", None)
    for name, expr in t["derived"].items():
        names[name] = evaluate(expr, names)
    for rule in t["rules"]:
        if rule.get("when") and not evaluate(rule["when"], names):
            continue
        if not evaluate(rule["require"], names):
            problems.append(f"{rule['id']}: {rule['message']} ({rule['source']})")
    return problems


# ---- the expression evaluator -----------------------------------------------------------------

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Mod: operator.mod, ast.Div: operator.truediv}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
           ast.NotIn: lambda a, b: a not in b, ast.Is: operator.is_, ast.IsNot: operator.is_not}
def _unrolled(layout: str) -> list[str]:
    """A ``--pipeline-model-parallel-layout`` string as its chunks (``x*n`` and ``(...)*n``
    repeat; ``,`` is cosmetic), e.g. ``"Et*3|(tt|)*2,mL"`` -> ``["Ettt", "tt", "tt", "mL"]``."""
    s = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        s = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), s)
    return s.split("|")


def layout_stages(layout: str) -> int:
    """Chunks of a pipeline layout string."""
    return len(_unrolled(layout))


def layout_count(layout: str, symbol: str) -> int:
    """How often ``symbol`` (``E``, ``t``, ``m``, ``L``) occurs in a pipeline layout string."""
    return sum(chunk.count(symbol) for chunk in _unrolled(layout))


def layout_mtp_placed(layout: str, pp: int) -> bool:
    """Whether a pipeline layout string places its MTP modules (``m``) as Megatron-Core builds
    them (``PipelineParallelLayerLayout.validate_layer_layout``): after every decoder layer, all
    in one chunk, and that chunk the last virtual stage of its pipeline rank (chunk ``c`` is
    virtual stage ``c // pp`` of rank ``c % pp``). True for a layout without MTP modules."""
    chunks = _unrolled(layout)
    holding = [c for c, chunk in enumerate(chunks) if "m" in chunk]
    if not holding:
        return True
    flat = "".join(chunks)
    return (len(holding) == 1 and "t" not in flat[flat.index("m"):]
            and holding[0] // pp == len(chunks) // pp - 1)


_FUNCS = {"prod": math.prod, "len": len, "int": int, "max": max, "layout_stages": layout_stages,
          "layout_count": layout_count, "layout_mtp_placed": layout_mtp_placed}


def evaluate(expr: str, names: Mapping[str, Any]) -> Any:
    """The value of the rule expression ``expr`` with ``names`` bound (see the module docstring)."""
    return _eval(_parsed(expr), names)


@lru_cache(maxsize=512)
def _parsed(expr: str) -> ast.AST:
    return ast.parse(expr, mode="eval").body


def _eval(node: ast.AST, names: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise KeyError(f"rule names unknown argument {node.id!r}")
        return names[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, names) for e in node.elts]
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, names) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, names)
        if isinstance(node.op, ast.Not):
            return not v
        if isinstance(node.op, ast.USub):
            return -v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left, names), _eval(node.right, names))
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, names)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, names) if _eval(node.test, names) else _eval(node.orelse, names)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
        return _FUNCS[node.func.id](*(_eval(a, names) for a in node.args))
    raise ValueError(f"unsupported expression {ast.dump(node)}")
