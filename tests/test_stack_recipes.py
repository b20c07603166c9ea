"""Megatron-Bridge stack recipes against the framework's own performance presets
(hardware_specs/stacks/megatron_bridge_presets.csv, written by tools/megatron_bridge_presets.py)."""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

from hardware_specs.catalog import load_stack, stack_for

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import megatron_bridge_stacks as gen  # noqa: E402

CSV = REPO / "hardware_specs" / "stacks" / "megatron_bridge_presets.csv"
ROWS = list(csv.DictReader(CSV.open()))


_STACKS: dict = {}


def _stack(container):
    if container not in _STACKS:
        _STACKS[container] = stack_for("megatron-bridge", container)
    return _STACKS[container]


# hand-copied from the releases' preset code (values checked against the CSV row named)
@pytest.mark.parametrize("container, model, gpu, dtype, expected", [
    # v0.2.0 deepseek/workload_base_configs.py DEEPSEEK_V3_H100_FP8_CS_BASE_CONFIG: moe_a2a_overlap=True,
    # DeepEP; deepseek_llm_pretrain.py turns off grad-reduce overlap on H100
    ("25.11", "DeepSeekV3 (w/ MTP)", "h100-sxm-80gb", "fp8",
     dict(ep_comm_overlap=True, overlap_grad_reduce=False, tp_comm_overlap=False, cuda_graphs=False)),
    # v0.5.0 DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2: full-iteration CUDA graphs, HybridEP, a2a overlap
    ("26.06", "deepseek-v3", "gb300", "mxfp8",
     dict(ep_comm_overlap=True, cuda_graphs=True, default_zero_stage=1, grad_reduce_bytes=2.0)),
    # v0.1.0rc3 llama3_70b_llm_pretrain.yaml perf_matrix.gb200.num_gpus_64.bf16: use_megatron_fsdp,
    # cpu_offloading_num_layers 20, TP 1 (no userbuffers)
    ("25.09", "LLAMA3_70B", "gb200", "bf16",
     dict(default_zero_stage=3, tp_comm_overlap=False, cuda_graphs=False)),
    # v0.2.0 llama3_llm_pretrain.py llama3_70b_b200_config: fp8_mx turns overlap_param_gather off
    # ('keeping this enabled causes NaN grad norm'); TP 2 with userbuffers
    ("25.11", "llama3-70b", "b200", "mxfp8",
     dict(overlap_param_gather=False, tp_comm_overlap=True, default_zero_stage=1)),
    # v0.1.0rc3 llama31_405b h100 fp8_ds: TP 8 userbuffers, delayed scaling
    ("25.09", "LLAMA3.1_405B", "h100-sxm-80gb", "fp8",
     dict(tp_comm_overlap=True, fp8_recipe="tensorwise")),
    # v0.6.0 perf_recipes/qwen/gb300/qwen3_moe.py qwen3_235b_a22b_pretrain_64gpu_gb300_fp8mx_config:
    # _enable_hybridep_full_iteration_mxfp8 (full-iteration graphs) and MoE a2a overlap
    ("26.08", "Qwen3_235B_a22B", "gb300", "mxfp8",
     dict(cuda_graphs=True, ep_comm_overlap=True, tp_comm_overlap=False)),
    # v0.4.2 LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2: Megatron-FSDP with 40 offloaded layers
    ("26.04.01", "LLAMA3_70B", "gb200", "fp8", dict(default_zero_stage=3, tp_comm_overlap=False)),
    # v0.4.2 GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2: PP 4 EP 8, no overlap switches
    ("26.04.01", "GPT OSS 120B", "h100-sxm-80gb", "bf16",
     dict(ep_comm_overlap=False, cuda_graphs=False, tp_comm_overlap=False, default_zero_stage=1)),
])
def test_a_release_gives_its_presets_switches(container, model, gpu, dtype, expected):
    t = _stack(container).training_for(model, gpu, dtype)
    assert {k: getattr(t, k) for k in expected} == expected


def test_the_hand_copied_presets_are_the_csv_rows():
    """The CSV says the same as the cases above (one row each)."""
    def row(container, recipe, gpu, compute, **extra):
        got = [r for r in ROWS if (r["container"], r["recipe"], r["gpu"], r["compute_dtype"]) ==
               (container, recipe, gpu, compute) and r["default_variant"] == "true"
               and all(r[k] == v for k, v in extra.items())]
        assert len(got) == 1, (container, recipe, gpu, compute, len(got))
        return got[0]
    r = row("25.11", "deepseek_v3", "h100-sxm-80gb", "fp8_cs")
    assert (r["n_gpus"], r["tp"], r["pp"], r["ep"], r["vpp"], r["moe_flex_backend"], r["moe_a2a_overlap"]) == \
        ("1024", "2", "8", "64", "4", "deepep", "true")
    r = row("26.06", "deepseek_v3", "gb300", "fp8_mx")
    assert (r["variant"], r["global_batch"], r["cuda_graph_impl"], r["moe_flex_backend"]) == \
        ("v2", "4096", "full_iteration", "hybridep")
    r = row("25.09", "llama3_70b", "gb200", "bf16")
    assert (r["megatron_fsdp"], r["cpu_offloading_layers"], r["tp"]) == ("true", "20", "1")
    r = row("26.04.01", "llama3_70b", "gb200", "fp8_cs")
    assert (r["megatron_fsdp"], r["cpu_offloading_layers"], r["micro_batch"], r["global_batch"]) == \
        ("true", "40", "2", "256")
    r = row("26.08", "qwen3_235b_a22b", "gb300", "fp8_mx", n_gpus="64")
    assert (r["pp"], r["ep"], r["vpp"], r["cuda_graph_impl"]) == ("4", "32", "12", "full_iteration")
    r = row("25.09", "llama31_405b", "h100-sxm-80gb", "fp8_ds")
    assert (r["fp8_recipe"], r["tp"], r["cp"]) == ("delayed", "8", "2")


def test_every_release_maps_to_one_stack_and_every_stack_cites_the_release_code():
    tags = {"25.09": "v0.1.0rc3", "25.11": "v0.2.0", "26.02": "v0.3.0", "26.02.01": "v0.3.1", "26.04": "v0.4.0",
            "26.04.01": "v0.4.2", "26.06": "v0.5.0", "26.06.01": "v0.5.1", "26.08": "v0.6.0"}
    assert sorted({r["container"] for r in ROWS}) == sorted(tags)
    for container, tag in tags.items():
        stack = _stack(container)
        assert container in stack.versions
        assert all(f"Megatron-Bridge@{tag}" in r.source for r in stack.recipes
                   if container == stack.versions[0])


def _csv_behaviour(row):
    """The TrainingBehaviour values a CSV row states (stack defaults where the row is silent)."""
    b = {"tp_comm_overlap": False, "ep_comm_overlap": False, "cuda_graphs": False, "grad_reduce_bytes": 2.0,
         "bf16_grads_in_fp32": False, "default_zero_stage": 1, "overlap_param_gather": True,
         "overlap_grad_reduce": True}
    if row["dtype"] == "fp8":
        b["fp8_recipe"] = "tensorwise"
    b.update(gen.behaviour(row))
    return b


def test_every_csv_preset_resolves_to_the_values_the_csv_states_or_is_not_the_primary_one():
    """Consistency of the stack files with the CSV: the default preset of every (release, model, GPU,
    dtype) gives exactly its switches through training_for; a preset that differs is a non-default
    variant, another FP8 recipe of the same dtype, or a larger GPU count of the same release."""
    primary = gen.primary_rows(ROWS)
    checked = differing = 0
    for row in ROWS:
        if "not executed" in row["note"]:
            continue
        stack = _stack(row["container"])
        t = stack.training_for(gen.model_name(row["recipe"]), row["gpu"], row["dtype"])
        want = _csv_behaviour(row)
        got = {k: getattr(t, k) for k in want}
        key = (row["container"], row["recipe"], row["gpu"], row["dtype"])
        if primary.get(key) is row:
            assert got == want, (key, row["source"])
            checked += 1
        elif got != want:
            p = primary[key]
            assert row["default_variant"] == "false" or row["compute_dtype"] != p["compute_dtype"] \
                or int(row["n_gpus"]) > int(p["n_gpus"]), (key, row["source"])
            differing += 1
    assert checked == len(primary) >= 1500
    assert differing < len(ROWS) // 4


def test_models_absent_from_a_release_keep_the_release_defaults():
    stack = _stack("25.09")          # 25.09 has no GPT-OSS preset
    assert stack.training_for("gpt-oss-120b", "gb200", "bf16") == stack.training
    assert stack.training_for("llama3-70b", "a100-sxm-80gb", "bf16") == stack.training
