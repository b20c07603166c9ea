"""The files shipped with paraplan are parsed with libyaml's C parser where PyYAML has it
(``yaml_files.read_yaml``): it must read each of them exactly as the pure-Python parser does,
and a text it refuses must give the pure-Python parser's own error."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from hardware_specs import yaml_files
from hardware_specs.errors import InputError

SHIPPED = sorted(p for folder in yaml_files.BUNDLED_FOLDERS for p in folder.rglob("*.yaml"))
needs_libyaml = pytest.mark.skipif(getattr(yaml, "CSafeLoader", None) is None, reason="PyYAML built without libyaml")


def _same(a, b) -> bool:
    """Equal documents, types included (1 is not 1.0 nor True), NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def test_the_shipped_files_are_the_catalogs_and_presets():
    names = {p.parent.name for p in SHIPPED}
    assert {"gpus", "clusters", "stacks", "efficiency", "serving_efficiency", "presets"} <= names
    assert len(SHIPPED) >= 150


@needs_libyaml
def test_both_parsers_read_every_shipped_file_the_same():
    for path in SHIPPED:
        text = path.read_text(encoding="utf-8")
        slow = yaml_files.parse_yaml(text, "file", path)
        fast = yaml_files.parse_yaml(text, "file", path, fast=True)
        assert _same(slow, fast), path
        assert _same(slow, yaml.load(text, Loader=yaml.CSafeLoader)), path


def test_read_yaml_takes_the_fast_parser_for_shipped_files_only(tmp_path, monkeypatch):
    calls = []
    real = yaml_files.parse_yaml
    monkeypatch.setattr(yaml_files, "parse_yaml", lambda text, what, path, fast=False: calls.append(fast) or
                        real(text, what, path, fast))
    shipped = next(p for p in SHIPPED if p.parent.name == "gpus")
    copy = tmp_path / shipped.name
    copy.write_text(shipped.read_text())
    assert yaml_files.read_yaml(shipped, "gpu") == yaml_files.read_yaml(copy, "gpu")
    assert calls == [True, False]


@needs_libyaml
@pytest.mark.parametrize("text", ["a: [1, 2\nb: 3\n", "a: 1\na: 2\n", "a: \x01\n", "a: &x [*x]\n",
                                  "- &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
                                      f"- &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                                      for p, c in zip("abcdef", "bcdefg")),
                                  "a: " + "9" * 5000 + "\n", "a:\n\tb: 1\n", "{" * 300 + "}" * 300],
                         ids=["unclosed", "repeated key", "control character", "recursive anchor", "alias bomb",
                              "5000 digits", "tab indent", "300 deep"])
def test_a_text_the_fast_parser_refuses_gives_the_pure_python_error(text):
    with pytest.raises(InputError) as slow:
        yaml_files.parse_yaml(text, "gpu", Path("x.yaml"))
    with pytest.raises(InputError) as fast:
        yaml_files.parse_yaml(text, "gpu", Path("x.yaml"), fast=True)
    assert (fast.value.field, fast.value.message, fast.value.fix) == (slow.value.field, slow.value.message,
                                                                      slow.value.fix)
