"""An export's refusal names only what ``paraplan plan`` takes: every ``--option`` a refusal's
fix tells the user to plan with is an option of ``plan --help``, every ``--fix NAME=`` a key the
``--fix`` help lists. DeepSpeed's ZeRO-3 + full recomputation refusal asked for
"plan with zero3_recompute_gather", which plan has no option for: a stack whose ZeRO-3 gathers
again for the recomputation (``zero3_recompute_gather: true`` in
hardware_specs/stacks/deepspeed-2021.yaml) is the way to plan it."""
import ast
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from hardware_specs.errors import InputError
from paraplan.cli import main
from paraplan.exports import deepspeed, matrix

EXPORTS = Path(__file__).resolve().parents[1] / "paraplan" / "exports"
TRAINING_EXPORTS = ("deepspeed.py", "megatron.py", "torchtitan.py", "common.py", "screen.py", "matrix.py",
                    "megatron_table.py")


def _plan_help() -> tuple[set, set]:
    text = CliRunner().invoke(main, ["plan", "--help"], terminal_width=200).output
    options = set(re.findall(r"(--[a-z][a-z0-9-]*)", text))
    names = re.search(r"Names:\s*(.*?)\.", " ".join(text.split())).group(1).split()
    return options, set(names)


def _plan_hints(text: str) -> list[str]:
    """The ``--options`` a fix tells the user to give ``plan``: after "plan with", "plan without"
    or "paraplan plan" in the same clause."""
    out = []
    for clause in re.split(r"[;]|, or emit|, or run", text):
        m = re.search(r"(?:paraplan plan|plan with|plan without)(.*)", clause)
        if m:
            out += re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", m.group(1))
    return out


def _literals(path: Path) -> list[str]:
    """The string literals of a module, adjacent pieces joined (f-strings by their constant parts)."""
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            out.append("".join(v.value for v in node.values if isinstance(v, ast.Constant)))
    return out


def test_the_deepspeed_zero3_full_recompute_refusal_names_what_plan_takes():
    row = dict(next(r for n, r in matrix.without_sequence_parallel() if n == "zero3-deepspeed-no-sp"))
    row.update(recompute="full", zero3_recompute_gather=False)
    with pytest.raises(InputError) as err:
        deepspeed.emit(row)
    fix = err.value.fix or ""
    assert "--stack deepspeed-2021" in fix and "plan with zero3_recompute_gather" not in fix
    options, _ = _plan_help()
    assert set(_plan_hints(fix)) <= options
    deepspeed.emit({**row, "zero3_recompute_gather": True})       # what that stack prices: emitted


def test_every_option_an_export_refusal_names_is_an_option_of_plan():
    options, fix_names = _plan_help()
    missing = []
    for name in TRAINING_EXPORTS:
        for text in _literals(EXPORTS / name):
            missing += [(name, o, text) for o in _plan_hints(text) if o not in options]
            missing += [(name, k, text) for k in re.findall(r"--fix ([a-z_]+)=", text) if k not in fix_names]
    assert not missing, missing
