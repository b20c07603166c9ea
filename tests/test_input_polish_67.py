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
    # inside a list or tuple too (a link's between: [a100, true, h100] had quoted Python's True)
    assert [shown(v) for v in (["a100", True, 3], ("x", False), ("x",), [])] == \
        ["['a100', true, 3]", "('x', false)", "('x',)", "[]"]


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


@pytest.mark.parametrize("ratio, text", [(1 / 1.58, "1.58x less"), (1.58, "1.58x more"), (953 / 954, "0.1% less"),
                                         (1.003, "0.3% more"), (1.0, "about the same"), (1.0004, "about the same"),
                                         (1 / 1.006, "1.01x less")])
def test_a_ratio_that_two_decimals_print_as_1_00_is_said_in_percent(ratio, text):
    from planners.serving.search import compared
    assert compared(ratio) == text


def test_serve_plans_why_line_does_not_say_1_00x_less_of_a_different_rate():
    # Llama-3-8B on 16 H100, isl 2048 / osl 32, SLO 5 s / 100 ms: agg 954 tokens/s/GPU, disagg 953,
    # printed '(1.00x less)'; '(0.1% less)' after the fix, and at session 72's refit agg 957 (batch
    # 128), disagg 956, less than 0.05% apart: '(about the same)'
    from paraplan.serving_api import serve_plan
    plan = serve_plan("llama3-8b", "dgx-h100", 16, isl=2048, osl=32, ttft_ms=5000, tpot_ms=100)
    assert plan.why[1].startswith("     the best disagg layout meeting the SLO reaches 956 tokens/s/GPU (about the same) at")
    assert plan.why[0].startswith("why: agg 16 x tp1 at batch 128 per rank reaches 957 tokens/s/GPU")
    assert "1.00x" not in " ".join(plan.why)


@pytest.mark.parametrize("value", [0, -4])
def test_a_model_file_stating_head_dim_0_is_refused_not_read_as_unstated(tmp_path, value):
    # head_dim: 0 ran as hidden_size / num_heads = 128 (ModelSpec's 'not stated')
    path = _edited(tmp_path, ROOT / "model_specs/presets/llama3-8b.yaml", "num_kv_heads: 8",
                   f"num_kv_heads: 8\nhead_dim: {value}")
    got = one_line_error(run("simulate", "-m", path, "-c", "dgx-h100", "-n", 8, "--global-batch", 8))
    assert got == (f"error: model llama3-8b.head_dim: must be >= 1, got {value} "
                   "(give the channels per head, or leave head_dim out for hidden_size / num_heads)")


def test_a_model_file_without_head_dim_still_takes_hidden_size_over_num_heads():
    from model_specs.catalog import model_from_dict
    spec = model_from_dict({"name": "m", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
                            "ffn_hidden_size": 128, "vocab_size": 1000, "seq_len": 128})
    assert spec.head_dim == 16


def _two_pools(tmp_path, first_pool: str, links: str):
    """A pooled file of ``first_pool`` (a flow mapping) and 8 H100 named h100, then ``links``."""
    path = tmp_path / "mix.yaml"
    path.write_text(f"name: mix\npools:\n  - {first_pool}\n  - {{name: h100, cluster: dgx-h100, gpus: 8}}\n{links}")
    return path


QUOTE_FIX = "(quote it: YAML reads an unquoted 010, 1.5 or true as a number or a boolean)"


@pytest.mark.parametrize("pools, links, line", [
    # name: 010 was pool '8' (YAML 1.1 octal); name: 1 pool '1', while name: 1.5 was refused
    ("{name: 010, cluster: dgx-a100-80gb, gpus: 8}", "",
     f"error: pools[0].name: expected a pool name (text), got 8 {QUOTE_FIX}"),
    ("{name: 1, cluster: dgx-a100-80gb, gpus: 8}", "",
     f"error: pools[0].name: expected a pool name (text), got 1 {QUOTE_FIX}"),
    # between: [1.5, true] found the pools named '1.5' and 'True' (str() of what YAML read)
    ("{name: '1.5', cluster: dgx-a100-80gb, gpus: 8}", "links:\n  - {between: [1.5, h100], bw_gbit_per_s: 200}\n",
     f"error: links[0].between: expected a pool name (text), got 1.5 {QUOTE_FIX}"),
    ("{name: a100, cluster: dgx-a100-80gb, gpus: 8}", "links:\n  - {between: [a100, true], bw_gbit_per_s: 200}\n",
     f"error: links[0].between: expected a pool name (text), got true {QUOTE_FIX}"),
    # a link's missing end asks for the link's two pools, not for every pool's name (review)
    ("{name: a100, cluster: dgx-a100-80gb, gpus: 8}", "links:\n  - {between: [a100, null], bw_gbit_per_s: 200}\n",
     "error: links[0].between: missing (name the two pools it joins: between: [a, b])"),
    ("{name: a100, cluster: dgx-a100-80gb, gpus: 8}", "links:\n  - {between: [a100, true, h100], bw_gbit_per_s: 200}\n",
     "error: links[0].between: must name two pools, got ['a100', true, 'h100'] (write between: [a, b])"),
])
def test_a_pool_name_is_text_in_the_pool_and_in_a_link(tmp_path, pools, links, line):
    assert one_line_error(run("hardware", "show", _two_pools(tmp_path, pools, links))) == line


def test_a_quoted_number_is_a_pool_name_in_the_pool_a_link_and_a_group(tmp_path):
    path = _two_pools(tmp_path, "{name: '010', cluster: dgx-a100-80gb, gpus: 8}",
                      "links:\n  - {between: ['010', h100], bw_gbit_per_s: 200, latency_us: 5}\n")
    from hardware_specs.catalog import load_pooled_cluster
    cluster = load_pooled_cluster(str(path))
    assert [p.name for p in cluster.pools] == ["010", "h100"] and cluster.links[0].pools == ("010", "h100")
    res = run("simulate", "-m", "llama3-8b", "-c", path, "--global-batch", 16, "--group", "1x 010:tp8:pp1")
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("text, line", [
    ("name: mix\npools:\n  - {name: a100, cluster: dgx-a100-80gb, gpus: 8}\n  - {name: h100, cluster: dgx-h100, gpus: 8}\n"
     "links:\n  - {between: [a100, h100], latency_us: 5}\n",
     "error: links.a100-h100.bw_gbit_per_s: missing "
     "(add the bandwidth per GPU, one direction: bw_gbit_per_s (Gb/s) or bw_gb_per_s (GB/s))"),
    ("name: box\ngpu: h100-sxm-80gb\ngpus_per_node: 8\nscaleout: {kind: roce, latency_us: 5}\n",
     "error: cluster box.scaleout.bw_gbit_per_s: missing "
     "(add the bandwidth per GPU, one direction: bw_gbit_per_s (Gb/s) or bw_gb_per_s (GB/s))"),
])
def test_a_link_or_tier_without_a_bandwidth_names_both_of_its_keys(tmp_path, text, line):
    # it said 'bw_gb_per_s: missing (add 'bw_gb_per_s:' to the file)', the key the README's files do not write
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert one_line_error(run("hardware", "show", path)) == line


def test_a_link_names_its_own_bad_field(tmp_path):
    path = _two_pools(tmp_path, "{name: a100, cluster: dgx-a100-80gb, gpus: 8}",
                      "links:\n  - {between: [a100, h100], bw_gbit_per_s: 200, latency_us: -5}\n")
    assert one_line_error(run("hardware", "show", path)) == \
        "error: links.a100-h100.latency_us: must be >= 0, got -5.0 (one message's start-up time in microseconds)"


def test_plan_at_a_sequence_too_long_to_fit_names_it_and_the_length_that_fits():
    # --seq-len 1000000000 said only 'nothing fits in 76.0 GiB per GPU ... needs 63065.0 GiB (use the
    # optimizer states on the host ...)'
    got = one_line_error(run("plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", 16, "--global-batch", 4,
                             "--seq-len", 1000000000))
    assert got.startswith("error: memory: nothing fits in 76.0 GiB per GPU (80 GiB HBM - 4 GiB headroom) at "
                          "1,000,000,000-token sequences (longer than the model's 8,192-token context): the smallest")
    assert "(use sequences of at most 8,192 tokens (--seq-len 8192 fits), or the optimizer states" in got


def test_plan_on_a_pooled_cluster_at_a_sequence_too_long_to_fit_names_it():
    # 'no plan of llama3-8b fits any pool of a100-h100 in memory (add GPUs, ... or use a smaller global batch)'
    got = one_line_error(run("plan", "-m", "llama3-8b", "-c", ROOT / "examples/clusters/a100-h100.yaml",
                             "--global-batch", 4, "--seq-len", 1000000000))
    assert got == ("error: memory: no plan of llama3-8b at 1,000,000,000-token sequences (longer than the model's "
                   "8,192-token context) fits any pool of a100-h100 in memory (add GPUs, allow recomputation or ZeRO, "
                   "or use a smaller global batch or shorter sequences)")
