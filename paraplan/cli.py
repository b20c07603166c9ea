"""The ``paraplan`` command: a click group whose subcommands are discovered, not listed.

Every module in :mod:`paraplan.commands` that defines a module attribute ``command`` (a
``click.Command`` or ``click.Group``) becomes a subcommand under that command's name. Modules
are imported lazily, when a command is looked up, so ``paraplan simulate`` does not pay for the
planner's imports; a module that cannot be imported (a missing optional dependency such as
``torch``) is skipped without a traceback, and asking for its command says why.

Errors: bad input never shows a traceback. ``InputError``, click usage errors, missing files,
malformed YAML/JSON/CSV and Ctrl-C each print one line to stderr,
``error: <field>: <message> (<fix>)``, and exit with code 2. Any other exception is a bug: one
line, exit code 1. Set ``PARAPLAN_DEBUG=1`` to get the traceback instead.

Shared helpers for command modules live here too: :func:`write_atomic` (file outputs are
written to a temporary file in the target's folder and renamed over it, so a failed run never
leaves a half-written file), :func:`json_safe` and :func:`format_table`.
"""
from __future__ import annotations

import csv
from contextlib import contextmanager
import enum
import errno
import importlib
import json
import math
import os
import pkgutil
import re
import sys
import warnings
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import click
import yaml

from hardware_specs.errors import InputError

DEBUG_ENV = "PARAPLAN_DEBUG"
EXIT_BAD_INPUT = 2
EXIT_BUG = 1


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("paraplan")
    except PackageNotFoundError:   # running from a source tree that was never installed
        return "unknown (not installed)"


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip() not in ("", "0", "false", "no")


# --------------------------------------------------------------------------------------------
# Helpers for command modules
# --------------------------------------------------------------------------------------------

def exact_number_text(x: float) -> str:
    """``x`` as a command-line option Python reads back exactly: the short ``:g`` form where it is
    exact (4 as ``4``), else ``repr`` (``:g`` keeps 6 digits: 0.71234567 became 0.712346)."""
    short = f"{x:g}"
    return short if float(short) == x else repr(float(x))


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _refuse_special(target: Path, field: str) -> None:
    """An existing output that is not a regular file (a device such as /dev/full or /dev/stdout, a
    FIFO, a link to either) is refused: the temp file renamed over it would replace the device
    node or pipe itself with a regular file (as root, /dev/full becomes a file). So is ``-``, which
    many tools read as standard output and which had been written as a file named ``-``."""
    if str(target) == "-":
        raise InputError(field, "'-' is not standard output here: it would write a file named '-'",
                         "give a file name, or leave the option out to print to the terminal")
    if os.path.exists(target) and not target.is_dir() and not os.path.isfile(target):
        raise InputError(field, f"{target} is not a regular file",
                         "give the path of an ordinary file")
    if os.path.islink(target):
        # the temp file renamed over a link replaces the link, not the file it points to (and
        # --out /dev/stdout with stdout redirected to a file replaced /dev/stdout itself)
        raise InputError(field, f"{target} is a link: the output would replace the link, not its target",
                         "give the path of an ordinary file (the link's target), or leave the option out")


#: option (click parameter name) -> the catalog kind its value loads as, for the files it reads
_CATALOG_INPUTS = {"cluster": "clusters", "system": "clusters", "cluster_path": "clusters",
                   "stack": "stacks", "backend": "stacks"}


def files_read_by(param_name: str, value: Any) -> set[str]:
    """The real paths of the files an input option's ``value`` makes the command read, resolved
    as its loader resolves it: a file itself; a folder (a Hugging Face checkpoint or an EAGLE-3
    head given to -m / --draft-model) its ``config.json``; a cluster (a catalog name or a file)
    also the GPU file it names and, pooled, each pool's cluster and GPU files
    (``hardware_specs.catalog.files_read``). Pure: nothing is recorded between calls."""
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        return set()
    found: set[str] = set()
    try:
        if os.path.isdir(value):
            inner = os.path.join(value, "config.json")
            if os.path.isfile(inner):
                found.add(os.path.realpath(inner))
        elif os.path.isfile(value):
            found.add(os.path.realpath(value))
        kind = _CATALOG_INPUTS.get(param_name)
        if kind is not None:
            from hardware_specs.catalog import files_read
            found.update(os.path.realpath(p) for p in files_read(kind, str(value)))
    except (OSError, ValueError):
        pass
    return found


def _refuse_input(target: Path, field: str) -> None:
    """An output naming a file another option of the same command reads (``serve plan -m m.yaml
    --out m.yaml`` replaced the model file with the report; ``--out DRAFT/config.json`` the
    draft head given as its folder; ``--out g.yaml`` the GPU file the cluster names) is refused:
    the options are the running command's own (click's context), nothing is kept between commands."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or not os.path.exists(target):
        return
    key = os.path.realpath(target)
    for param in ctx.command.params:
        if field in getattr(param, "opts", ()):
            continue                                    # the output option itself
        value = ctx.params.get(param.name)
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if key in files_read_by(param.name, item):
                name = param.opts[0] if getattr(param, "opts", None) else param.name
                if not name.startswith("-"):
                    name = name.upper()                 # an argument: as its help shows it
                raise InputError(field, f"{target} is also the file read by {name}", "write the output elsewhere")


def output_folder(path: str | os.PathLike, field: str = "--out") -> Path:
    """The existing folder ``path`` is to be written in, else the ``InputError`` naming ``field``:
    a missing folder, a path through a regular file (``o/h.json/x.json`` had been told that
    folder o/h.json 'does not exist'), or a name the system refuses (a file name over 255 bytes
    printed ``error: io: [Errno 36] File name too long``, naming no option)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        if not folder.is_dir():
            if folder.exists():
                raise InputError(field, f"{folder} is a file, not a folder", "give a path in a folder")
            raise InputError(field, f"folder {folder} does not exist", "create it first or pick another path")
        os.path.lexists(target)         # raises what the name alone makes impossible (too long)
        target.is_dir()
    except OSError as exc:
        shown = str(path) if len(str(path)) <= 60 else str(path)[:57] + "..."
        raise InputError(field, f"cannot write {shown}: {exc.strerror or exc}",
                         "give a shorter file name" if exc.errno == errno.ENAMETOOLONG else "pick another path") from None
    return folder


def _temp_prefix(target: Path) -> str:
    """The prefix of the temp file an output is written to before its rename: the name's first
    100 characters (a name near the system's 255-byte limit made the temp name too long)."""
    return f".{target.name[:100]}."


def check_writable(path: str | os.PathLike, field: str = "--out") -> None:
    """Fail early (before long work) if ``path``'s folder is missing or not writable; writes nothing
    that stays."""
    if str(path) == "":         # Path("") is ".", which was said to be a folder
        raise InputError(field, "the file name is empty", "give a file name")
    if not str(path).strip():   # --out " " wrote a file named " " into the working folder, "wrote  " said
        raise InputError(field, "the file name is only spaces or tabs", "give a file name")
    target = Path(path)
    folder = output_folder(path, field)
    if target.is_dir() or str(path).endswith(("/", os.sep)):
        raise InputError(field, f"{path} is a folder", "give a file name")
    _refuse_special(target, field)
    _refuse_input(target, field)
    try:
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=".tmp", dir=folder)
    except OSError as exc:
        raise InputError(field, f"cannot write in {folder}: {exc.strerror}") from None
    os.close(fd)
    os.unlink(tmp)


def check_distinct_paths(outputs: dict, inputs: dict | None = None) -> None:
    """Fail when two output options name one file, or an output names an input file: the later
    write would replace the earlier (``serve plan --out X --plot X`` kept the report and lost
    the figure, both said written) or the input. ``outputs`` / ``inputs``: option -> path or None."""
    seen: dict[str, str] = {}
    for field, path in (inputs or {}).items():
        if path is not None:
            seen.setdefault(os.path.realpath(path), field)
    for field, path in outputs.items():
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise InputError(field, f"{path} is also the file of {seen[key]}", "give each output its own file")
        seen[key] = field


#: image formats figures are written in (by the file's suffix)
IMAGE_SUFFIXES = (".png", ".svg", ".pdf")


def check_image_path(path: str | os.PathLike, field: str = "--out") -> None:
    """``check_writable`` for a figure, whose format the suffix names (.png, .svg or .pdf)."""
    suffix = Path(path).suffix.lower()
    if suffix not in IMAGE_SUFFIXES:
        raise InputError(field, f"cannot tell an image format from {str(path)!r}",
                         "end the name in " + ", ".join(IMAGE_SUFFIXES))
    check_writable(path, field)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` all at once: a temp file in the same folder, then ``os.replace``.

    The folder must exist (it is not created: a typo in it should be an error, not a new tree).
    On any failure the temp file is removed and ``path`` is left as it was.
    """
    target = Path(path)
    folder = output_folder(path, "--out")
    _refuse_special(target, "--out")
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=".tmp", dir=folder)
    try:
        os.chmod(tmp, _umask_mode())      # mkstemp makes 0600; give the file ordinary permissions
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8", "newline": ""})) as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def atomic_output_path(path: str | os.PathLike, write, field: str = "--out") -> Path:
    """Run ``write(tmp_path)`` for a writer that needs a file name (matplotlib, trace writers),
    then rename the result over ``path``; nothing is left behind if ``write`` fails."""
    target = Path(path)
    folder = output_folder(path, field)
    if str(path).endswith(("/", os.sep)):
        raise InputError(field, f"{path} is a folder", "give a file name")
    _refuse_special(target, field)
    _refuse_input(target, field)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem[:100]}.", suffix=target.suffix[:32] or ".tmp", dir=folder)
    os.close(fd)
    try:
        os.chmod(tmp, _umask_mode())
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def json_safe(value: Any) -> Any:
    """``value`` with numpy scalars made Python numbers and NaN/inf made ``None`` (valid JSON)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def dump_json(value: Any) -> str:
    return json.dumps(json_safe(value), indent=2, allow_nan=False) + "\n"


def four_significant(value: float) -> str:
    """``value`` with 4 significant digits, trailing zeros kept so a column's widths agree
    (``2.000``, ``0.7496``), and no bare trailing point from 1,000 up (``1759``, not ``1759.``)."""
    text = f"{value:#.4g}"
    return text[:-1] if text.endswith(".") else text


#: characters never printed inside a table cell
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\n\r]")


def format_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], align: str | None = None,
                 indent: str = "") -> str:
    """A plain aligned text table. ``align``: one char per column, ``l`` or ``r`` (default: text
    left, numbers right)."""
    # a control character from a damaged file (a NUL, a newline) would break the table's lines
    cells = [[("-" if c is None else _CONTROL.sub("?", str(c))) for c in row] for row in rows]
    if align is None:
        align = "".join("r" if rows and all(_is_number(r[i]) or r[i] is None for r in rows) else "l"
                        for i in range(len(headers)))
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values):
        parts = [v.rjust(w) if a == "r" else v.ljust(w) for v, w, a in zip(values, widths, align)]
        return (indent + "  ".join(parts)).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out) + "\n"


def _is_number(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, float)):
        return True
    return bool(re.fullmatch(r"[-+]?[\d,]*\.?\d+(e[-+]?\d+)?%?", str(x).strip()))


# --------------------------------------------------------------------------------------------
# One-line errors
# --------------------------------------------------------------------------------------------

#: seconds between the progress lines a long command writes when stderr is not a terminal
PROGRESS_LINE_S = 10.0


class ProgressLines:
    """Progress for a log: off a terminal (a log, CI) a click progress bar is hidden, so a long
    command printed nothing for minutes; this writes ``"<text> in N s"`` to ``stream`` at most
    every ``interval_s`` seconds instead (nothing on a terminal, where the bar shows, and nothing
    once the work is done). Used by ``StepBar`` and ``paraplan sweep``."""

    def __init__(self, stream=None, interval_s: float | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.interval_s = PROGRESS_LINE_S if interval_s is None else float(interval_s)
        self.t0 = self.said = time.perf_counter()

    @property
    def on_terminal(self) -> bool:
        return is_a_terminal(self.stream)

    def __call__(self, done: int, total: int, text: str) -> None:
        if self.on_terminal or done >= total:
            return
        now = time.perf_counter()
        if now - self.said >= self.interval_s:
            self.said = now
            click.echo(f"{text} in {now - self.t0:.0f} s", file=self.stream)


class StepBar:
    """``progress(done, total, label)`` as a click progress bar on stderr (``stream``), opened at
    the first report (a command that fails on its input before any work prints only its error
    line) and closed by ``close``; off a terminal, where the bar is hidden, a line every
    ``PROGRESS_LINE_S`` seconds (``ProgressLines``), counting ``unit`` ("3 of 10 steps").
    ``warnings`` collected meanwhile are printed after it, one line each. ``quiet``: off a
    terminal the hidden bar does not print its label either (click writes it as a line of its
    own: noise on every fast run of a command that reports progress only in case it is long)."""

    def __init__(self, label: str, stream=None, interval_s: float | None = None, unit: str = "steps",
                 quiet: bool = False):
        self.label = label
        self.unit = unit
        self.quiet = quiet
        self.bar = None
        self.stream = sys.stderr if stream is None else stream
        self.lines = ProgressLines(self.stream, interval_s)

    def __call__(self, done: int, total: int, step: str = "") -> None:
        if self.bar is None:
            self.bar = click.progressbar(length=max(int(total), 1), label=self.label, file=self.stream, show_pos=True,
                                         item_show_func=lambda text: text,
                                         hidden=self.quiet and not self.lines.on_terminal)
            self.bar.__enter__()
            self.lines = ProgressLines(self.stream, self.lines.interval_s)    # time from the first report
        self.bar.length = max(int(total), 1)
        self.bar.update(int(done) - self.bar.pos, step)
        share = 100 * int(done) // max(int(total), 1)
        self.lines(int(done), int(total), f"{self.label}: {int(done):,} of {int(total):,} {self.unit} ({share}%)"
                                          + (f", {step}," if step else ""))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


#: seconds a search runs before ``LazyBar`` shows its bar (a search faster than that shows none)
PROGRESS_AFTER_S = 1.0


class LazyBar:
    """``progress(done, total, step="")`` as a click progress bar on stderr that appears only once
    the work has run ``after_s`` seconds (a fast search shows none) and only where stderr is a
    terminal: elsewhere click prints the label as a line of its own, so a slow search that ended
    in a refusal wrote two stderr lines, the label and the error, and a piped ``--json`` run a
    line of noise. ``step`` (where given) is shown beside the bar. Used by ``plan`` (one GPU
    kind and pooled) and ``serve plan``."""

    def __init__(self, label: str, after_s: float):
        self.label = label
        self.after_s = after_s
        self.t0 = time.perf_counter()
        self.bar = None
        self.shown = 0

    def __call__(self, done: int, total: int, step: str = "") -> None:
        done, total = int(done), max(int(total), 1)
        if self.bar is None:
            if time.perf_counter() - self.t0 < self.after_s or done >= total or not stderr_is_a_terminal():
                return
            self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr,
                                         item_show_func=lambda text: text or None)
            self.bar.__enter__()
        self.bar.length = total
        self.bar.update(done - self.shown, step)
        self.shown = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def is_a_terminal(stream) -> bool:
    """Whether ``stream`` is a terminal (False for a stream without ``isatty``: CliRunner's, a file)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def stderr_is_a_terminal() -> bool:
    return is_a_terminal(sys.stderr)


@contextmanager
def step_bar(label: str, unit: str = "steps", quiet: bool = False):
    """A ``StepBar`` for the work in the block (its progress lines counting ``unit``; ``quiet``:
    no label line off a terminal), closed when it ends; the warnings the work raises are collected
    meanwhile and printed after the bar, one line each (``echo_warnings``)."""
    with _warnings_after(StepBar(label, unit=unit, quiet=quiet)) as bar:
        yield bar


@contextmanager
def lazy_bar(label: str, after_s: float):
    """A ``LazyBar`` for the work in the block, closed when it ends; the warnings the work raises
    printed after it, as ``step_bar`` prints them."""
    with _warnings_after(LazyBar(label, after_s)) as bar:
        yield bar


@contextmanager
def _warnings_after(bar):
    """``bar`` for the block, closed when it ends, then the warnings the block raised, one line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield bar
        finally:
            bar.close()
    echo_warnings(caught)


def echo_warnings(caught) -> None:
    """Each caught warning as one ``warning: ...`` line on stderr (not Python's format, which
    repeats the source line that raised it)."""
    for w in caught:
        click.echo(f"warning: {_one_line(str(w.message))}", err=True)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` for the CLI: a warning no ``step_bar`` collects (a library's, such
    as matplotlib's missing-glyph one) is one ``warning: ...`` line too, not Python's two-line
    format naming a source file and repeating its code."""
    click.echo(f"warning: {_one_line(str(message))}", err=True)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _usage_field(exc: click.UsageError) -> tuple[str, str]:
    """(field, message) of a click usage error."""
    if isinstance(exc, click.BadParameter) and exc.param is not None:
        param = exc.param
        field = param.opts[0] if getattr(param, "opts", None) else param.name or "argument"
        if isinstance(param, click.Argument):
            field = (param.name or "argument").upper()
        if isinstance(exc, click.MissingParameter):
            return field, "missing"
        return field, exc.message
    if isinstance(exc, click.BadParameter) and exc.param_hint:
        hint = exc.param_hint if isinstance(exc.param_hint, str) else " / ".join(exc.param_hint)
        return hint.strip("'\""), exc.message
    return "usage", exc.format_message()


def _siblings_with_option(ctx: click.Context, opt: str) -> list[str]:
    """Paths of the commands beside ``ctx``'s in its group (``paraplan plan`` beside ``paraplan
    simulate``) that take option ``opt``."""
    parent = ctx.parent
    if parent is None or not isinstance(parent.command, click.Group):
        return []
    group = parent.command
    found = []
    for name in sorted(group.list_commands(parent)):      # the CLI loads its commands lazily
        sub = group.get_command(parent, name)
        if (sub is not None and name != ctx.info_name and not isinstance(sub, click.Group)
                and any(opt in p.opts or opt in p.secondary_opts for p in sub.params)):
            found.append(f"{parent.command_path} {name}")
    return found


def error_line(exc: BaseException) -> tuple[str, int]:
    """The one-line message and exit code for an exception escaping a command."""
    if isinstance(exc, InputError):
        if not exc.fix:
            # every error line ends in a fix; where the check that raised it names none, point at
            # the value and at where the inputs are described
            exc = InputError(exc.field, exc.message, f"correct {exc.field}; the command's --help says what it takes")
        return f"error: {_one_line(str(exc))}", EXIT_BAD_INPUT
    if isinstance(exc, click.NoSuchOption) and exc.ctx is not None:
        # an option of a sibling command (simulate --explain, serve simulate --plot): name it
        # there rather than suggest look-alikes of this command
        elsewhere = _siblings_with_option(exc.ctx, exc.option_name)
        if elsewhere:
            return (f"error: usage: {exc.ctx.command_path} has no option '{exc.option_name}'; "
                    f"{', '.join(repr(p) for p in elsewhere)} {'take' if len(elsewhere) > 1 else 'takes'} it "
                    f"(see '{exc.ctx.command_path} --help')"), EXIT_BAD_INPUT
    if isinstance(exc, click.UsageError):
        field, message = _usage_field(exc)
        path = exc.ctx.command_path if exc.ctx is not None else "paraplan"
        return f"error: {field}: {_one_line(message.rstrip('.'))} (see '{path} --help')", EXIT_BAD_INPUT
    if isinstance(exc, click.ClickException):
        return f"error: {_one_line(exc.format_message())}", exc.exit_code or EXIT_BAD_INPUT
    if isinstance(exc, (KeyboardInterrupt, click.Abort, EOFError)):
        return "error: interrupted: stopped before finishing (no output file was written)", EXIT_BAD_INPUT
    if isinstance(exc, FileNotFoundError):
        return (f"error: path: no such file {exc.filename or exc} (check the path)"), EXIT_BAD_INPUT
    if isinstance(exc, (IsADirectoryError, NotADirectoryError, PermissionError)):
        return f"error: path: {exc.strerror}: {exc.filename} (check the path and its permissions)", EXIT_BAD_INPUT
    if isinstance(exc, yaml.YAMLError):
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return f"error: yaml: malformed YAML{where}: {_one_line(getattr(exc, 'problem', None) or exc)} " \
               f"(fix the file's syntax)", EXIT_BAD_INPUT
    if isinstance(exc, json.JSONDecodeError):
        return f"error: json: malformed JSON at line {exc.lineno}: {exc.msg} (fix the file's syntax)", EXIT_BAD_INPUT
    if isinstance(exc, (csv.Error, UnicodeDecodeError)) or _is_pandas_parse_error(exc):
        return f"error: csv: malformed input: {_one_line(str(exc).splitlines()[0] if str(exc) else exc)} " \
               f"(check the file is a UTF-8 CSV with a header row)", EXIT_BAD_INPUT
    if isinstance(exc, OSError):
        return f"error: io: {_one_line(exc)} (check the path and free space)", EXIT_BAD_INPUT
    return (f"error: internal: {type(exc).__name__}: {_one_line(exc)} "
            f"(a bug in paraplan; rerun with {DEBUG_ENV}=1 for the traceback)"), EXIT_BUG


def _is_pandas_parse_error(exc: BaseException) -> bool:
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(exc, (pd.errors.ParserError, pd.errors.EmptyDataError))


# click >= 8.2 raises this when a group is called without a subcommand (shows help, exits 2).
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _Interrupted(Exception):
    """Ctrl-C inside a command, carried past click's own handler (which prints a blank line)."""


# --------------------------------------------------------------------------------------------
# The group
# --------------------------------------------------------------------------------------------

class DiscoveringGroup(click.Group):
    """A click group that finds its subcommands in ``paraplan.commands`` and reports errors on
    one line."""

    def __init__(self, *args, package: str = "paraplan.commands", **kwargs):
        super().__init__(*args, **kwargs)
        self.package = package
        self._scanned = False
        self._unavailable: dict[str, str] = {}   # module name -> why it could not be imported

    # -- discovery ---------------------------------------------------------------------------
    def _module_names(self) -> list[str]:
        pkg = importlib.import_module(self.package)
        return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))

    def _load(self, module_name: str) -> click.Command | None:
        try:
            module = importlib.import_module(f"{self.package}.{module_name}")
        except ImportError as exc:   # a missing optional dependency: skip quietly
            if debug_enabled():
                raise
            self._unavailable[module_name] = f"{type(exc).__name__}: {exc}"
            return None
        except Exception as exc:     # a broken command module must not take the others down
            if debug_enabled():
                raise
            self._unavailable[module_name] = f"{type(exc).__name__}: {_one_line(exc)}"
            return None
        cmd = getattr(module, "command", None)
        if not isinstance(cmd, click.Command):
            return None
        if cmd.name not in self.commands:
            self.add_command(cmd)
        return cmd

    def _scan(self) -> None:
        if not self._scanned:
            for name in self._module_names():
                self._load(name)
            self._scanned = True

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._scan()
        return sorted(self.commands)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        guess = cmd_name.replace("-", "_")
        if guess in self._module_names():
            cmd = self._load(guess)
            if cmd is not None and cmd.name == cmd_name:
                return cmd
        self._scan()
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if guess in self._unavailable:
            why = self._unavailable[guess]
            fix = ("install the optional dependency it needs, e.g. pip install -e '.[measure]'"
                   if why.startswith(("ImportError", "ModuleNotFoundError"))
                   else f"rerun with {DEBUG_ENV}=1 for the traceback")
            raise InputError(cmd_name, f"command unavailable: {why}", fix)
        return None

    # -- errors ------------------------------------------------------------------------------
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _Interrupted() from exc

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            with warnings.catch_warnings():     # restored on return: an embedding caller keeps its own
                warnings.showwarning = _show_warning
                rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except SystemExit:
            raise
        except BaseException as exc:  # noqa: BLE001 - the one place that turns errors into lines
            if debug_enabled():
                raise
            if isinstance(exc, _NO_ARGS_IS_HELP) and exc.ctx is not None:
                click.echo(exc.ctx.get_help())   # bare `paraplan` or `paraplan hardware`: help, not an error
                sys.exit(0)
            if isinstance(exc, _Interrupted):
                exc = KeyboardInterrupt()
            message, code = error_line(exc)
            try:
                sys.stdout.flush()
            except Exception:  # noqa: BLE001 - a closed pipe must not hide the message
                pass
            click.echo(message, err=True)
            sys.exit(code)
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(cls=DiscoveringGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(_version(), "--version", "-V", prog_name="paraplan", message="%(prog)s %(version)s")
def main() -> None:
    """paraplan: how fast, and in how much memory, does a parallel plan train or serve a transformer?

    Predicts the step time, throughput, MFU and per-GPU memory of a training configuration, and
    the TTFT, TPOT and tokens/s per GPU of a serving deployment, from hardware, model and
    software-stack catalogs; searches for the best plan of either; and checks the predictions
    against published runs.

    \b
    Examples:
      paraplan hardware list
      paraplan models show llama3-70b
      paraplan simulate -m llama3-70b -c dgx-h100 -n 64 --tp 8 --pp 4 --zero 1 --sequence-parallel --global-batch 128
      paraplan plan -m llama3-70b -c dgx-h100 -n 512 --global-batch-tokens 4194304
      paraplan serve plan -m deepseek-r1 -s dgx-b200 --gpus 64 --isl 1024 --osl 1024 --tpot-ms 30
      paraplan validate published

    Errors print one line and exit 2; set PARAPLAN_DEBUG=1 to see the traceback.
    """


def commands() -> Iterable[str]:
    """Names of the discovered subcommands (for tests and docs)."""
    return main.list_commands(click.Context(main))


if __name__ == "__main__":   # pragma: no cover
    main()
