"""Every example line in every command's ``--help`` is a line a shell accepts as written: a note
beside an example is a ``#`` comment (``hardware stacks``' '(a serving framework: ...)' note was a
syntax error when pasted: 'Syntax error: "(" unexpected')."""
from __future__ import annotations

import shutil
import subprocess

import click
import pytest

from paraplan.cli import main


def _examples(cmd: click.Command, path: list[str]) -> list[tuple[str, str]]:
    """(command path, example) for each ``paraplan ...`` line of the description (above
    ``Options:``; continuation lines ending in a backslash joined), in ``cmd`` and its subcommands."""
    text = cmd.get_help(click.Context(cmd, info_name=" ".join(path))).split("\nOptions:")[0]
    found, current = [], None
    for line in text.splitlines():
        line = line.strip()
        if current is None and line.startswith("paraplan ") and not line.startswith("paraplan:"):
            current = ""
        if current is not None:
            current += line.removesuffix("\\").rstrip() + " "
            if not line.endswith("\\"):
                found.append((" ".join(path), current.strip()))
                current = None
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        found += _examples(sub, path + [name])
    return found


def test_the_help_lists_examples_under_several_commands():
    examples = _examples(main, ["paraplan"])
    commands = {where for where, _ in examples}
    assert len(examples) >= 40 and {"paraplan", "paraplan simulate", "paraplan hardware stacks"} <= commands


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to parse the lines")
def test_every_help_example_parses_as_a_shell_line():
    for where, line in _examples(main, ["paraplan"]):
        parsed = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True)
        assert parsed.returncode == 0, (where, line, parsed.stderr)


def test_the_plot_scaling_example_draws_only_plans_that_fit(tmp_path):
    """The scaling figure's help example ran Llama-3-70B at tp 8, pp 4, ZeRO-1 without sequence
    parallelism or recomputation: 3 of its 4 GPU counts (64-256) did not fit in 80 GB, so the
    figure a user copied from the help was mostly unfit points. With sequence parallelism and
    selective recomputation all four fit (50.1 / 43.5 / 40.1 / 38.5 GiB a GPU on 64-512 H100)."""
    from click.testing import CliRunner
    line = next(ex for where, ex in _examples(main, ["paraplan"]) if ex.startswith("paraplan plot scaling"))
    args = line.split()[1:]
    args[args.index("-o") + 1] = str(tmp_path / "scaling.png")
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "(scaling, 4 rows)" in res.output and "fit" not in res.output
    assert (tmp_path / "scaling.png").stat().st_size > 0
