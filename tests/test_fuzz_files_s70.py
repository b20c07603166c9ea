"""User-supplied files a fuzz pass (session 70) found breaking the one-line error contract.

An integer of hundreds of digits (YAML and JSON read ``10**400`` as a Python int) in a number
field of a model file, a GPU's peak, a training or serving efficiency factor, or a serving
stack's counts reached ``float()`` or numpy as an int no float holds: ``OverflowError``, exit 1, "error: internal".
Each is now one ``error: <field>: ...`` line with exit 2. And a serving validation row with
inf in a count column was skipped with a reason that printed the inf bare, as if the report had
computed it; it is now quoted as the cell gave it.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from cli_results import one_line_error, run

REPO = Path(__file__).resolve().parents[1]
HUGE = 10**400


@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)


def _yaml_with(data: dict, path: tuple, value) -> str:
    """``data`` dumped as YAML with ``value`` (a Python int of any size) at ``path``."""
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "__HUGE__"
    return yaml.safe_dump(data, sort_keys=False).replace("'__HUGE__'", str(value)).replace("__HUGE__", str(value))


def _catalog(kind: str, name: str) -> dict:
    return yaml.safe_load((REPO / "hardware_specs" / kind / f"{name}.yaml").read_text())


@pytest.mark.parametrize("preset, path", [
    ("llama3-8b", ("rope_theta",)),
    ("deepseek-v3", ("rope_scaling_factor",)),
    ("deepseek-v3", ("moe", "topk_scaling_factor")),
    ("gpt-oss-20b", ("glu_clamp_limit",)),
])
@pytest.mark.parametrize("sign", [1, -1])
def test_a_model_files_float_field_of_400_digits_is_one_error_line(tmp_path, preset, path, sign):
    data = yaml.safe_load((REPO / "model_specs" / "presets" / f"{preset}.yaml").read_text())
    model = tmp_path / "m.yaml"
    model.write_text(_yaml_with(data, path, sign * HUGE))
    line = one_line_error(run("simulate", "-m", model, "-c", "dgx-h100", "-n", "8", "--global-batch", "8"),
                          f".{path[-1]}: ", "integer of 401 digits", "beyond the largest number")
    assert "internal" not in line


@pytest.mark.parametrize("sign", [1, -1])
def test_a_gpu_files_peak_of_400_digits_is_one_error_line(tmp_path, sign):
    gpu = tmp_path / "g.yaml"
    gpu.write_text(_yaml_with(_catalog("gpus", "h100-sxm-80gb"), ("peak_tflops", "bf16"), sign * HUGE))
    one_line_error(run("hardware", "show", gpu), "error: gpu h100-sxm-80gb.peak_tflops.bf16: ",
                   "integer of 401 digits", "TFLOP/s")


@pytest.mark.parametrize("factor", ["attention_peak_fraction", "gemm_half_dim", "kernel_overhead_s"])
def test_a_cluster_files_efficiency_factor_of_400_digits_is_one_error_line(tmp_path, factor):
    cluster = _catalog("clusters", "dgx-h100")
    cluster["efficiency"] = _catalog("efficiency", "hopper")
    path = tmp_path / "c.yaml"
    path.write_text(_yaml_with(cluster, ("efficiency", factor), HUGE))
    one_line_error(run("simulate", "-m", "gpt3-125m", "-c", path, "-n", "8", "--global-batch", "8"),
                   f"efficiency.{factor}: ", "integer of 401 digits")


@pytest.mark.parametrize("path", [("decode_hbm_fraction",), ("kernel_fixed_s",), ("validation_error_pct", "vllm agg", "ttft")])
def test_a_serving_efficiency_files_number_of_400_digits_is_one_error_line(tmp_path, path):
    cluster = _catalog("clusters", "dgx-h100")
    cluster["gpu"] = _catalog("gpus", "h100-sxm-80gb")
    cluster["gpu"]["generation"] = str(tmp_path / "se.yaml")     # a generation naming a file loads that profile
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "se.yaml").write_text(_yaml_with(_catalog("serving_efficiency", "hopper"), path, HUGE))
    one_line_error(run("serve", "simulate", "-m", "llama3.1-8b", "-s", tmp_path / "c.yaml", "--tp", "2", "--json"),
                   f".{path[0]}: ", "integer of 401 digits")


@pytest.mark.parametrize("path, field", [
    (("serving", "prefill_token_budget", "value", 0), "serving.prefill_token_budget"),   # the tier an H100 does not use
    (("serving", "prefill_token_budget", "value", 70), "serving.prefill_token_budget"),
    (("serving", "max_running_requests", "value", 70), "serving.max_running_requests"),
    (("serving", "cuda_graph_max_batch", "value"), "serving.cuda_graph_max_batch"),
    (("serving", "oneshot_allreduce_max_tokens", "value"), "serving.oneshot_allreduce_max_tokens"),
    (("serving", "oneshot_allreduce_max_bytes", "value", 8), "serving.oneshot_allreduce_max_bytes"),
])
def test_a_serving_stacks_count_of_400_digits_is_one_error_line(tmp_path, path, field):
    stack = tmp_path / "s.yaml"
    stack.write_text(_yaml_with(_catalog("stacks", "vllm-0.14"), path, HUGE))
    line = one_line_error(run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "-b", stack, "--json"),
                          field, "integer of 401 digits")
    assert "internal" not in line


def test_a_serving_stacks_count_may_be_as_large_as_the_bound_and_no_larger(tmp_path):
    from hardware_specs.serving_behaviour import MAX_ENGINE_COUNT
    for value, refused in ((MAX_ENGINE_COUNT, False), (MAX_ENGINE_COUNT + 1, True)):
        stack = tmp_path / "s.yaml"
        stack.write_text(_yaml_with(_catalog("stacks", "vllm-0.14"), ("serving", "cuda_graph_max_batch", "value"), value))
        result = run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "-b", stack, "--json")
        if refused:
            one_line_error(result, "serving.cuda_graph_max_batch: must be a whole number from 0 to 2,147,483,648")
        else:
            assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("cell", ["inf", "-inf"])
def test_a_serving_rows_inf_count_is_quoted_in_its_skip_reason(tmp_path, cell):
    from paraplan.validation.datasets import SERVING_RUNS, validation_file
    with validation_file(SERVING_RUNS).open(newline="") as fh:
        records = list(csv.reader(fh))[:3]
    records[1][records[0].index("pp_size")] = cell
    path = tmp_path / "s.csv"
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows(records)
    rows = json.loads(run("validate", "serving", path, "--json").stdout)
    reasons = {r["reason"] for r in rows if r["id"] == records[1][records[0].index("id")]}
    assert reasons == {f"pp_size '{cell}' is not a whole number from 0 to 16,777,216"}
    listed = run("validate", "serving", path, "--list-skipped")
    assert listed.exit_code == 0 and f"pp_size '{cell}' is not" in listed.stdout


# ---- messages that quoted a huge number in full or without its sign (the fuzz pass's leftovers) ----

def test_a_huge_negative_integer_is_quoted_by_its_size_and_its_sign():
    from hardware_specs.errors import digits_text, shown
    assert digits_text(HUGE) == "an integer of 401 digits"
    assert digits_text(-HUGE) == "a negative integer of 401 digits"
    assert shown([-HUGE, 3]) == "[a negative integer of 401 digits, 3]"
    assert digits_text(-12345) is None       # an ordinary negative number is written out


@pytest.mark.parametrize("serving", [False, True])
def test_a_sweeps_chunk_points_of_400_digits_is_quoted_by_its_size(serving):
    from hardware_specs.errors import InputError
    from paraplan.sweeps.spec import spec_from_dict
    from test_sweeps import GRID, SERVING
    data = {**(SERVING if serving else GRID), "chunk_points": -HUGE}
    with pytest.raises(InputError) as err:
        spec_from_dict(data)
    text = str(err.value)
    assert text.startswith("chunk_points: must be between 1 and 1,000,000, got a negative integer of 401 digits")
    assert len(text) < 200


def test_a_pools_gpu_count_of_minus_1e308_is_one_short_line(tmp_path):
    pooled = yaml.safe_load((REPO / "examples" / "clusters" / "a100-h100.yaml").read_text())
    pooled["pools"][0]["gpus"] = -1.0e308
    path = tmp_path / "pooled.yaml"
    path.write_text(yaml.safe_dump(pooled, sort_keys=False))
    line = one_line_error(run("hardware", "show", path), "gpus", "a negative integer of 309 digits")
    assert len(line) < 200, line


@pytest.mark.parametrize("kind", ["published", "serving", "heterogeneous"])
def test_an_empty_path_is_named_as_empty_not_as_a_directory(kind):
    # Path("") is the working directory, so it read "is a directory, not a file"
    line = one_line_error(run("validate", kind, ""), "an empty name is not a file")
    assert "directory" not in line, line
