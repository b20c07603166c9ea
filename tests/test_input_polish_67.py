"""Session 67's polish of input and output lines: each test pins the exact line a user now sees
(booleans spelled as a YAML file or a flag spells them, ...)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hardware_specs.errors import InputError, shown
from cli_results import one_line_error, run

ROOT = Path(__file__).resolve().parents[1]


def _edited(tmp_path, source: Path, old: str, new: str) -> Path:
    text = source.read_text()
    assert old in text
    path = tmp_path / source.name
    path.write_text(text.replace(old, new))
    return path


def test_an_error_quotes_a_boolean_as_yaml_writes_it_and_anything_else_as_repr():
    assert [shown(v) for v in (True, False, np.bool_(True), 1, 2.5, "true", 10**40)] == \
        ["true", "false", "true", "1", "2.5", "'true'", "an integer of 41 digits"]


@pytest.mark.parametrize("old, new, line", [
    ("gpus_per_node: 8", "gpus_per_node: true",
     "error: cluster dgx-h100.gpus_per_node: expected a whole number, got true"),
    ("oversubscription: 1.0", "oversubscription: true",
     "error: cluster dgx-h100.oversubscription: expected a number, got true"),
    ("rail_optimized: true", "rail_optimized: 5",
     "error: cluster dgx-h100.rail_optimized: expected true or false, got 5"),
])
def test_a_cluster_field_of_the_wrong_kind_is_named_in_the_files_words(tmp_path, old, new, line):
    # 'expected int, got True': Python's type name and spelling of a YAML 'true'
    path = _edited(tmp_path, ROOT / "hardware_specs/clusters/dgx-h100.yaml", old, new)
    got = one_line_error(run("hardware", "show", path))
    assert got.startswith(line + " (")


def test_a_model_count_given_as_true_is_quoted_as_true(tmp_path):
    path = _edited(tmp_path, ROOT / "model_specs/presets/llama3-8b.yaml", "num_layers: 32", "num_layers: true")
    got = one_line_error(run("simulate", "-m", path, "-c", "dgx-h100", "-n", 8, "--global-batch", 8))
    assert got.startswith("error: model llama3-8b.num_layers: expected an integer, got true (")


def test_a_pool_count_given_as_true_is_quoted_as_true(tmp_path):
    path = tmp_path / "mix.yaml"
    path.write_text("name: mix\npools:\n  - {name: a100, cluster: dgx-a100-80gb, gpus: true}\n"
                    "  - {name: h100, cluster: dgx-h100, gpus: 16}\n")
    got = one_line_error(run("hardware", "show", path))
    assert got.startswith("error: pools.a100.gpus: must be a positive integer, got true (")


def test_a_whole_number_check_quotes_a_boolean_as_true():
    from hardware_specs.errors import whole_number
    with pytest.raises(InputError) as err:
        whole_number("tp", True)
    assert str(err.value) == "tp: must be a whole number >= 1, got true"
