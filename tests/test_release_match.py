"""A framework release no stack profile lists is described by the newest profiled release before
it (``hardware_specs.release_match``), and the choice is said next to the prediction."""
from __future__ import annotations

import pandas as pd
import pytest

from hardware_specs.catalog import release_match_for, serving_release_match, stack_for
from hardware_specs.errors import InputError
from hardware_specs.release_match import release_numbers
from paraplan.validation.published import validate_rows
from paraplan.validation.serving import predict as predict_serving


@pytest.mark.parametrize("text, numbers", [
    ("25.02.01", (25, 2, 1)), ("v0.5.10.post1", (0, 5, 10)), ("1.2.0rc6.post3", (1, 2, 0)),
    ("2022", (2022,)), (" 24.09 ", (24, 9)), ("nightly-5b8c30d", None),
    # Megatron-LM's git tags of Megatron-Core releases, and a container image reference
    ("core_r0.5.0", (0, 5, 0)), ("core_v0.12.0", (0, 12, 0)), ("nvcr.io/nvidia/nemo:24.09", (24, 9)),
])
def test_release_numbers_reads_the_leading_numeric_components(text, numbers):
    assert release_numbers(text) == numbers


@pytest.mark.parametrize("framework, version, stack, note", [
    # listed, or a patch of a listed release: no note
    ("nemo", "24.09", "nemo-24.09", ""),
    ("megatron-bridge", "26.02.01", "megatron-bridge-26.02.01", ""),
    ("megatron-core", "0.12.1", "megatron-core-0.12", ""),
    ("megatron-core", "0.13.1", "megatron-core", ""),
    # listed (since 2026-12-07 NeMo 24.12-25.04 have profiles of their own: Megatron-Core 0.10-0.12)
    ("nemo", "24.12", "nemo-24.12", ""),
    ("nemo", "25.02.01", "nemo-24.12", ""),
    ("nemo", "25.04.01", "nemo-25.04", ""),
    # between two profiles: the earlier one
    ("nemo", "24.11", "nemo-24.09", "the profile of 24.09, the newest profiled release before it"),
    ("nemo", "25.03", "nemo-24.12", "the profile of 25.02, the newest profiled release before it"),
    ("megatron-bridge", "26.05", "megatron-bridge-26.04.01", "the profile of 26.04.01"),
    ("megatron-bridge", "25.10", "megatron-bridge-25.09", "the profile of 25.09"),
    ("megatron-lm", "2020", "megatron-lm-2019", "the profile of 2019"),
    # after the newest: the newest; years and release numbers are not compared
    ("megatron-bridge", "26.10", "megatron-bridge", "the profile of 26.08"),
    ("megatron-core", "0.21", "megatron-core", "the profile of 0.19"),
    ("megatron-core", "2025", "megatron-core-0.12", "the profile of 2024"),
    # before the oldest: the oldest
    ("nemo", "24.05", "nemo-24", "older than every profile: nemo-24, the profile of 24.07, the oldest"),
    ("megatron-lm", "2018", "megatron-lm-2019", "older than every profile"),
    # numbered unlike every profile: the framework's only (or default) profile
    ("deepspeed", "0.14.0", "deepspeed-2021", "numbered unlike every profile: deepspeed-2021"),
])
def test_training_release_resolves_to_the_newest_profile_before_it(framework, version, stack, note):
    match = release_match_for(framework, version)
    assert match.stack.name == stack
    assert stack_for(framework, version).name == stack
    if note:
        assert note in match.note and f"{framework} {version}" in match.note
    else:
        assert match.note == ""


@pytest.mark.parametrize("framework, version, stack, note", [
    ("vllm", "0.12.0", "vllm-0.11", ""),
    ("vllm", "0.20.1", "vllm-0.14", "the profile of 0.19, the newest profiled release before it"),
    ("vllm", "0.10.2", "vllm-0.11", "older than every profile: vllm-0.11, the profile of 0.11"),
    ("sglang", "0.4.6.post1", "sglang-0.5", "older than every profile"),
    ("sglang", "0.6.0", "sglang-0.5", "the profile of 0.5"),
    ("trtllm", "1.4.0rc1", "trtllm-1", "the profile of 1.3"),
    ("trtllm", "main", "trtllm-1", "numbered unlike every profile: trtllm-1, the framework's default profile"),
])
def test_serving_release_resolves_to_the_newest_profile_before_it(framework, version, stack, note):
    match = serving_release_match(framework, version)
    assert match.stack.name == stack
    assert (note in match.note) if note else match.note == ""


def test_a_framework_with_several_profiles_and_none_default_still_refuses_an_unnumbered_release():
    with pytest.raises(InputError, match=r"^framework_version: no megatron-lm stack for version 'main'"):
        release_match_for("megatron-lm", "main")


def test_megatron_lm_releases_numbered_as_megatron_core_take_the_megatron_core_profiles():
    # Megatron-LM tags v0.11.0 (2025-03-14) .. v0.15.3 and core_r0.x / core_v0.x are the
    # Megatron-Core they ship; its own releases were v1.0 (2020) .. v2.6 (2021)
    got = release_match_for("megatron-lm", "core_r0.12.0")
    assert got.stack.name == "megatron-core-0.12"
    assert got.note == "megatron-lm core_r0.12.0 is a Megatron-Core release: megatron-core-0.12, the profile that lists it"
    assert release_match_for("megatron-lm", "0.15.3").stack.name == "megatron-core"
    assert release_match_for("megatron-lm", "2022").stack.name == "megatron-lm-2022"
    # a container image reference names its tag
    assert release_match_for("nemo", "nvcr.io/nvidia/nemo:24.09").stack.name == "nemo-24.09"
    # Megatron-Bridge's library releases name the containers that ship them (25.09 = 0.1.0rc3 ...
    # 26.08 = 0.6.0); one between two takes the earlier
    assert release_match_for("megatron-bridge", "v0.6.0").stack.name == release_match_for("megatron-bridge", "26.08").stack.name
    assert release_match_for("megatron-bridge", "0.4.2").stack.name == "megatron-bridge-26.04.01"
    assert release_match_for("megatron-bridge", "0.4.1").stack.name == "megatron-bridge-26.04"


def _training_row(version: str) -> dict:
    return {"id": f"R-{version}:iter_time_s", "run_id": f"R-{version}", "gpu_profile": "h100-sxm-80gb",
            "dtype_norm": "bf16", "zero_norm": "1", "flops_convention": "none", "source": "hand-made",
            "model": "GPT 5B", "params_b": "", "layers": 24, "hidden": 4096, "ffn_hidden": 16384, "heads": 32,
            "kv_heads": 32, "vocab": 50304, "seq_len": 2048, "moe_experts": "", "moe_topk": "", "gpu": "H100",
            "n_gpus": 8, "tp": 2, "pp": 1, "dp": 4, "cp": 1, "ep": "", "vpp": 1, "micro_batch": 2,
            "global_batch": 64, "recompute": "none", "seq_parallel": "y", "zero_stage": "1", "dtype": "bf16",
            "measured_metric": "iter_time_s", "measured_value": 1.0, "notes": "", "framework": "nemo",
            "framework_version": version, "gpus_per_node": 8, "scaleout_gbps_per_gpu": 400}


def test_a_validation_row_of_an_unprofiled_release_is_predicted_as_the_earlier_profile_and_says_so():
    out = validate_rows(pd.DataFrame([_training_row("24.11"), _training_row("24.09")]))
    assert list(out.status) == ["ok", "ok"]
    assert out.predicted[0] == out.predicted[1]            # 24.11 behaves as 24.09
    assert "nemo-24.09" in out.assumptions[0] and "newest profiled release before it" in out.assumptions[0]
    assert "profiled release" not in out.assumptions[1]


def test_a_serving_row_of_an_unprofiled_release_is_predicted_and_says_which_profile():
    row = {"id": "r", "backend": "vllm", "backend_version": "0.20.0", "model_path": "meta-llama/Llama-3.1-70B",
           "system": "h200_sxm", "precision": "fp8", "mode": "agg", "isl": 1024, "osl": 1024,
           "gemm_quant_mode": "fp8", "moe_quant_mode": "", "batch_size": 8, "tp_size": 4, "pp_size": 1,
           "attention_dp_size": 1, "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0}
    newer = predict_serving(pd.DataFrame([row]))
    listed = predict_serving(pd.DataFrame([{**row, "backend_version": "0.19.0"}]))
    assert newer.pred_tpot_ms[0] == listed.pred_tpot_ms[0] > 0
    assert "vllm-0.14" in newer.assumption[0] and listed.assumption[0] == ""


def test_serve_simulate_says_which_profile_an_unprofiled_release_runs_as():
    from click.testing import CliRunner

    from paraplan.cli import main
    args = ["serve", "simulate", "--model", "llama3.1-70b", "--system", "dgx-h100", "--backend", "vllm",
            "--tp", "4", "--batch", "8", "--json"]
    newer = CliRunner().invoke(main, args + ["--backend-version", "0.20.1"])
    listed = CliRunner().invoke(main, args + ["--backend-version", "0.19.0"])
    assert newer.exit_code == listed.exit_code == 0
    assert newer.stdout == listed.stdout                    # the same profile, the same numbers
    assert "note: vllm 0.20.1 has no profile of its own: vllm-0.14" in newer.stderr
    assert "note:" not in listed.stderr
    # a request refused after the profile is chosen prints its one error line, not the note too
    refused = CliRunner().invoke(main, args[:-5] + ["--tp", "3", "--batch", "8", "--backend-version", "0.20.1"])
    assert refused.exit_code == 2
    lines = [ln for ln in refused.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --tp: 3")


@pytest.mark.parametrize("framework, version, stack", [
    ("Megatron_LM", "2022", "megatron-lm-2022"), ("megatron deepspeed", "2023", "megatron-deepspeed"),
    ("LLM-Foundry", None, "llm-foundry"), ("NeMo", "24.09", "nemo-24.09"),
])
def test_framework_names_match_whatever_their_case_and_separators(framework, version, stack):
    assert stack_for(framework, version).name == stack


def test_serving_framework_names_match_whatever_their_case():
    assert serving_release_match("SGLang", "0.5.9").stack.name == "sglang-0.5"
    assert serving_release_match("vLLM", "0.12.0").stack.name == "vllm-0.11"


def test_a_listed_release_wins_over_a_profile_it_reads_as_a_patch_of():
    """26.02.01 starts with 26.02 + '.', so the 26.02 profile 'covers' it, but it has its own."""
    from hardware_specs.catalog import list_stacks, load_stack
    from hardware_specs.release_match import match_release
    bridge = [load_stack(n) for n in list_stacks() if load_stack(n).framework == "megatron-bridge"]
    assert [s.name for s in bridge].index("megatron-bridge-26.02") < [s.name for s in bridge].index("megatron-bridge-26.02.01")
    match = match_release(bridge, "megatron-bridge", "26.02.01")
    assert match.stack.name == "megatron-bridge-26.02.01" and match.note == ""


@pytest.mark.parametrize("version", ["26.04.01", "26.04.1", "26.4.1", "v26.04.001"])
def test_a_release_is_compared_number_by_number_not_as_text(version):
    """26.04.1 and 26.4.1 are the release 26.04.01, which has its own profile: the text prefix
    read 26.04.1 as a patch of 26.04 (the 26.04 profile, no note) and 26.4.1 as an unlisted release
    after 26.04.01 (the right profile, but a note that it had none of its own)."""
    match = release_match_for("megatron-bridge", version)
    assert (match.stack.name, match.note) == ("megatron-bridge-26.04.01", "")


@pytest.mark.parametrize("listed, version, covered, listed_as_is", [
    ("26.04", "26.4", True, True), ("26.04.01", "V26.4.1", True, True),
    ("26.04", "26.04.02", True, False), ("26.04", "26.4.2-rc1", True, False),
    ("0.19", "0.19.post1", True, False), ("0.5.1", "0.5.1-rc0", True, False), ("0.6.3", "v0.6.3+cu118", True, False),
    ("1.2.0rc6", "1.2.0rc6.post3", True, False), ("nightly", "nightly-5b8c30d", True, False),
    ("0.5.1", "0.5.10", False, False), ("26.04", "26.40", False, False), ("26.04", "260.4", False, False),
    ("1.2.0rc6", "1.2.0.1", False, False), ("0.19", "0.19x", False, False),
])
def test_covers_compares_the_numbers_then_what_follows_them(listed, version, covered, listed_as_is):
    from dataclasses import replace

    from hardware_specs.catalog import load_stack
    stack = replace(load_stack("megatron-bridge-26.04"), versions=(listed,))
    assert stack.covers(version) is covered
    assert stack.lists(version) is listed_as_is


@pytest.mark.parametrize("text, numbers", [
    ("sha256:0a1b", None), ("commit:1234abc", None), ("nvcr.io/nvidia/nemo@sha256:24ab9f", None),
    ("24.09:latest", (24, 9)), ("nemo:25.04.01", (25, 4, 1)),
])
def test_only_an_image_tag_that_reads_as_a_release_is_taken_from_after_a_colon(text, numbers):
    # a digest or a commit after ':' is no release (the framework's default profile, as before)
    assert release_numbers(text) == numbers


def test_container_tags_and_library_releases_are_compared_each_with_its_own_kind():
    # Megatron-Bridge's profiles list containers (25.09 .. 26.08) and the library releases they
    # ship (0.1.0rc3 .. 0.6.0): a container older than every profile is not 'after' 0.6.0
    got = release_match_for("megatron-bridge", "25.07")
    assert got.stack.name == "megatron-bridge-25.09"
    assert "older than every profile" in got.note
    assert release_match_for("megatron-bridge", "1.0.0").stack.name == release_match_for("megatron-bridge", "26.08").stack.name
