"""The software-stack catalog: documented behaviour per framework release, loaded as data."""
import pytest

from hardware_specs.catalog import list_stacks, load_stack
from hardware_specs.stack_files import stack_from_dict
from hardware_specs.errors import InputError
from hardware_specs.stack_spec import StackSpec


def test_every_builtin_stack_loads_and_cites_each_behaviour_it_sets():
    assert "megatron-core" in list_stacks()
    for name in list_stacks():
        stack = load_stack(name)
        assert stack.name == name
        assert stack.training is not None or stack.serving is not None
        if stack.training is not None:
            cited = {k.split(".", 1)[1] for k in stack.citations if k.startswith("training.")}
            assert cited == set(StackSpec.training_keys()), f"{name}: uncited {set(StackSpec.training_keys()) - cited}"


def test_stack_file_errors_name_the_field():
    with pytest.raises(InputError, match="training.overlap_grad_reduce: must be true or false"):
        stack_from_dict({"name": "x", "framework": "f", "training": {"overlap_grad_reduce": "yes"}})
    with pytest.raises(InputError, match="training.no_such: unknown behaviour"):
        stack_from_dict({"name": "x", "framework": "f", "training": {"no_such": 1}})
    with pytest.raises(InputError, match="attention_kernel: unknown kernel"):
        stack_from_dict({"name": "x", "framework": "f", "training": {"attention_kernel": "fa9"}})
    with pytest.raises(InputError, match="neither a training nor a serving"):
        stack_from_dict({"name": "x", "framework": "f"})
    with pytest.raises(InputError, match="unknown stack"):
        load_stack("no-such-stack")


def test_a_behaviour_entry_carries_its_value_and_source():
    s = stack_from_dict({"name": "x", "framework": "f",
                         "training": {"grad_reduce_bytes": {"value": 2, "source": "docs p. 3"}}})
    assert s.training.grad_reduce_bytes == 2.0
    assert s.citations["training.grad_reduce_bytes"] == "docs p. 3"


# ---- stack_for: a published run's (framework, framework_version) -> one stack -------------------

import math  # noqa: E402

import pandas as pd  # noqa: E402

from hardware_specs.catalog import stack_for  # noqa: E402
from hardware_specs.stack_spec import TrainingBehaviour  # noqa: E402
from paraplan.validation.datasets import BUNDLED_DIR, PUBLISHED_RUNS, validation_file  # noqa: E402

#: (framework, framework_version) pairs of the published file that map to no stack, and why
#: (``None`` = the cell is empty)
UNMAPPED = {
    (None, None): "rows without a framework: PaLM / Gopher on TPU and the FasterTransformer "
                  "inference rows; no stack describes them",
}


def _cell(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) or not str(v).strip() else str(v)


def _published_pairs(path=None):
    df = pd.read_csv(path or validation_file(PUBLISHED_RUNS), dtype=str, keep_default_na=False)
    return sorted({(_cell(f), _cell(v)) for f, v in zip(df["framework"], df["framework_version"])},
                  key=str)


def test_every_published_framework_version_resolves_to_one_stack_or_is_listed_as_unmapped():
    """Each release the bundled rows name (those the accuracy bounds were set on) has a stack that
    lists it. A release the shared file names since must resolve to its framework's stack (the
    newest profiled release before it, noted on its rows) or be refused with the reason; until a
    stack lists it this test skips, naming it, for its behaviour to be read and recorded."""
    pairs = _published_pairs(BUNDLED_DIR / PUBLISHED_RUNS)
    assert len(pairs) >= 20          # the file names 20+ framework releases
    for fw, version in pairs:
        if (fw, version) in UNMAPPED:
            with pytest.raises(InputError):
                stack_for(fw or "", version)
            continue
        stack = stack_for(fw, version)
        assert stack.framework == fw
        assert version in stack.versions or (version is None and stack.default_when_version_unstated)
    assert set(UNMAPPED) <= set(pairs), "an UNMAPPED entry no longer occurs in the published file"
    unlisted = []
    for fw, version in sorted(set(_published_pairs()) - set(pairs), key=str):
        try:
            stack = stack_for(fw or "", version)
        except InputError as exc:          # its rows are skipped with this reason
            assert exc.field in ("framework", "framework_version") and exc.message
            unlisted.append(f"{fw} {version} (refused: {exc.message})")
            continue
        assert stack.framework == fw
        if not (version in stack.versions or (version is None and stack.default_when_version_unstated)):
            unlisted.append(f"{fw} {version} (priced as {stack.name})")
    if unlisted:
        pytest.skip("published_runs.csv names release(s) no stack lists yet: " + "; ".join(unlisted))


def test_stack_for_maps_releases_to_the_stack_that_lists_them():
    assert stack_for("megatron-lm", "2019").name == "megatron-lm-2019"
    assert stack_for("megatron-lm", "2022").name == "megatron-lm-2022"
    assert stack_for("megatron-bridge", "26.02.01").name == "megatron-bridge-26.02.01"
    assert stack_for("megatron-bridge", "26.08").name == "megatron-bridge"
    assert stack_for("megatron-core", "2024").name == "megatron-core-0.12"
    assert stack_for("megatron-core", "0.12").name == "megatron-core-0.12"
    assert stack_for("megatron-core", "0.13").name == "megatron-core"
    assert stack_for("nemo", "24.09").name == "nemo-24.09"
    assert stack_for("nemo", "24.07").name == "nemo-24"
    assert stack_for("llm-foundry", float("nan")).name == "llm-foundry"
    assert stack_for(" Megatron-LM ", " 2021 ").name == "megatron-lm-2021"


def test_nemo_25_releases_run_megatron_core_0_10_and_later_with_folded_expert_parallelism():
    """NeMo 24.12 ships Megatron-Core core_r0.10.0 (NVIDIA/NeMo@v2.1.0 Dockerfile.ci:57), 25.02 0.11.1
    (@v2.2.1 requirements/manifest.json -> Megatron-LM f62eb5b5c2) and 25.04 0.12.0rc4 (@v2.3.0 ->
    3cdfd613e6): all build the expert groups with their own rank generator (core_r0.10.0
    parallel_state.py:655-661), so the DGX Cloud rows of v25.01.1-v25.05.05 no longer run as NeMo 24.09's
    carved EP. Expert TP stays tp unless set (NeMo 2.1 megatron_init.py:361-362; Megatron-Core
    --expert-tensor-parallel-size default None = tp); the 25.04 performance configs and dgxc-benchmarking
    launch scripts set etp 1 for DeepSeek-V3 (launch.sh:104,117) and Grok-1 on H100 (grok1/launch.sh:112),
    not for Grok-1 on GB200 (ET 4 = tp) or Llama 4 (llama4_e128.py: 4 = tp)."""
    from simulator.stack_defaults import stack_expert_tp
    assert stack_for("nemo", "24.12").name == "nemo-24.12"
    assert stack_for("nemo", "25.02.01").name == "nemo-24.12"
    assert stack_for("nemo", "25.04.00").name == "nemo-25.04"
    assert stack_for("nemo", "25.04.01").name == "nemo-25.04"
    for name in ("nemo-24.12", "nemo-25.04"):
        assert load_stack(name).training.expert_parallel_layout == "folded"
        assert load_stack(name).training.expert_tp_default == "tp"
    assert load_stack("nemo-24.09").training.expert_parallel_layout == "carved_from_dp"
    new = load_stack("nemo-25.04")
    assert stack_expert_tp(new, 2, True, "DeepSeek-V3 671B", "h100-sxm-80gb", "bf16", 64) == 1
    assert stack_expert_tp(new, 2, True, "DeepSeek-V3 671B", "gb200", "bf16", 32) == 1
    assert stack_expert_tp(new, 4, True, "Grok-1 314B", "h100-sxm-80gb", "bf16", 8) == 1
    assert stack_expert_tp(new, 4, True, "Grok-1 314B", "gb200", "bf16", 8) == 4
    assert stack_expert_tp(new, 4, True, "Llama 4 Maverick 400B", "h100-sxm-80gb", "bf16", 128) == 4
    assert stack_expert_tp(load_stack("nemo-24.12"), 4, True, "Grok-1 314B (dgxc proxy/full)", "h100-sxm-80gb", "bf16", 8) == 4


def test_the_nemo_25_stacks_differ_from_nemo_24_09_only_where_they_cite_a_change():
    """Every other field is nemo-24.09's value, its source marked as carried, not re-read; the
    optimizer is NeMo 2's Megatron-Core one (an fp32 master), not NeMo 1.x's Apex remainders."""
    old = load_stack("nemo-24.09")
    changed = {"expert_parallel_layout", "expert_tp_default", "moe_probs_in_expert", "ep_comm_overlap",
               "ep_dispatch_dedup", "lacks", "master_weights"}
    for name in ("nemo-24.12", "nemo-25.04"):
        new = load_stack(name)
        differ = {k for k in StackSpec.training_keys() if getattr(new.training, k) != getattr(old.training, k)}
        assert differ == {"expert_parallel_layout", "master_weights"}, name
        for key, text in new.citations.items():
            if key.split(".")[-1] not in changed and not key.startswith("recipes"):
                assert "carried from nemo-24.09 (not re-read at this release)" in text, (name, key)


def test_stack_for_errors_name_the_field_and_list_what_is_known():
    with pytest.raises(InputError, match=r"^framework: no software stack for framework 'jax'"):
        stack_for("jax", "0.4")
    with pytest.raises(InputError, match=r"^framework: not stated, so no software stack applies \(name one of: deepspeed"):
        stack_for(float("nan"), None)
    # a release numbered unlike every profile, of a framework with no default profile
    with pytest.raises(InputError, match=r"^framework_version: no megatron-lm stack for version 'main' "
                                         r"\(known: 2019, 2021, 2022\)"):
        stack_for("megatron-lm", "main")
    with pytest.raises(InputError, match=r"^framework_version: megatron-lm needs a version"):
        stack_for("megatron-lm", None)
    # NeMo's one profile takes rows that do not state the version (noted in their assumptions)
    assert stack_for("nemo", "").name == "nemo-24"


def test_no_release_is_claimed_by_two_stacks_and_at_most_one_stack_per_framework_takes_unstated_versions():
    claimed, unstated = {}, {}
    for name in list_stacks():
        s = load_stack(name)
        for v in s.versions:
            key = (s.framework, v)
            assert key not in claimed, f"{key} in both {claimed.get(key)} and {name}"
            claimed[key] = name
        if s.default_when_version_unstated:
            assert s.framework not in unstated, f"{s.framework}: {unstated.get(s.framework)} and {name}"
            unstated[s.framework] = name


def test_a_version_yaml_would_read_as_a_number_is_rejected_with_the_fix():
    with pytest.raises(InputError, match=r"versions: version 26.1 is not a string \(quote it"):
        stack_from_dict({"name": "x", "framework": "f", "versions": [26.10], "training": {}})
    with pytest.raises(InputError, match="unstated_version_reason: missing"):
        stack_from_dict({"name": "x", "framework": "f", "default_when_version_unstated": True,
                         "training": {}})


def test_new_behaviour_fields_are_validated_with_the_field_named():
    with pytest.raises(InputError, match=r"training.default_zero_stage: expected a whole number"):
        stack_from_dict({"name": "x", "framework": "f", "training": {"default_zero_stage": True}})
    with pytest.raises(InputError, match=r"training.default_zero_stage: must be 0, 1, 2 or 3"):
        TrainingBehaviour(default_zero_stage=4)
    with pytest.raises(InputError, match=r"training.grad_bucket_elements: must be >= 0"):
        TrainingBehaviour(grad_bucket_elements=-1.0)
    with pytest.raises(InputError, match=r"training.grad_bucket_elements: must be finite"):
        TrainingBehaviour(grad_bucket_elements=float("inf"))
    with pytest.raises(InputError, match=r"training.param_prefetch_layers_forward: must be <= 8"):
        TrainingBehaviour(param_prefetch_layers_forward=64.0)
    with pytest.raises(InputError, match=r"training.param_prefetch_layers_backward: must be finite"):
        TrainingBehaviour(param_prefetch_layers_backward=float("nan"))
    with pytest.raises(InputError, match=r"training.fp8_recipe: unknown recipe 'fp4'"):
        TrainingBehaviour(fp8_recipe="fp4")
    with pytest.raises(InputError, match=r"training.zero01_grad_reduce: unknown value 'sometimes'"):
        TrainingBehaviour(zero01_grad_reduce="sometimes")
    b = stack_from_dict({"name": "x", "framework": "f",
                         "training": {"default_zero_stage": 3, "grad_bucket_elements": 6553600}}).training
    assert (b.default_zero_stage, b.grad_bucket_elements) == (3, 6553600.0)


def test_every_builtin_citation_names_a_source_or_says_it_is_unverified_or_not_applicable():
    # a citation is a repository@ref path (or a pinned release read as installed: torch 2.13.0,
    # torchtitan 0.3.0, the test extra's), a paper/docs reference, or an explicit
    # "not applicable" / "NOT STATED" / "unverified"; never an empty or bare claim
    markers = ("@", "arXiv", "docs.pytorch.org", "not applicable", "NOT STATED", "unverified",
               "pytorch/pytorch v2.13.0", "pytorch/pytorch#", "torchtitan==0.3.0")
    for name in list_stacks():
        for key, text in load_stack(name).citations.items():
            assert len(text) >= 20 and any(m in text for m in markers), f"{name} {key}: {text!r}"


def _table_cell(value):
    if isinstance(value, tuple):
        return ", ".join(value) if value else "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return str(int(value)) if value == int(value) else f"{value:g}"
    return {"every_microbatch": "every", "last_microbatch": "last"}.get(str(value), str(value))


def test_the_readme_table_of_release_wide_values_matches_the_stack_files():
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[1] / "hardware_specs" / "stacks" / "README.md").read_text()
    all_lines = readme.splitlines()
    start = next(i for i, ln in enumerate(all_lines) if ln.startswith("| behaviour |"))
    lines = [all_lines[start]]
    for ln in all_lines[start + 2:]:
        if not ln.startswith("| `"):
            break
        lines.append(ln)
    header = [c.strip() for c in lines[0].strip("|").split("|")][1:]
    # the table lists the training stacks (serving-only stacks have no training values)
    assert header == [n for n in list_stacks() if load_stack(n).training is not None]
    rows = {ln.split("|")[1].strip().strip("`"): [c.strip() for c in ln.strip("|").split("|")][1:]
            for ln in lines[1:] if ln.split("|")[1].strip().strip("`") in StackSpec.training_keys()}
    assert set(rows) == set(StackSpec.training_keys())
    for key, cells in rows.items():
        assert cells == [_table_cell(getattr(load_stack(n).training, key)) for n in header], key


def test_a_release_recipe_for_a_model_overrides_the_release_defaults():
    """NeMo 24.07's Llama 3 70B recipe turns on userbuffers TP overlap (launcher
    conf/training/llama/llama3_70b.yaml), its Llama 3 8B recipe does not; model names match
    whatever their spelling."""
    nemo = load_stack("nemo-24")
    assert nemo.training.tp_comm_overlap is False
    assert nemo.training_for("llama3-70b").tp_comm_overlap is True
    assert nemo.training_for("LLAMA3-70B (NeMo 24.07)").tp_comm_overlap is True
    assert nemo.training_for("llama3-8b").tp_comm_overlap is False
    assert nemo.training_for(None) is nemo.training
    with pytest.raises(InputError, match=r"recipes\[0\]\.source: missing"):
        stack_from_dict({"name": "x", "framework": "f", "training": {"tp_comm_overlap": False},
                         "recipes": [{"models": ["a"], "training": {"tp_comm_overlap": True}}]})
    with pytest.raises(InputError, match="must be true or false"):
        stack_from_dict({"name": "x", "framework": "f", "training": {"tp_comm_overlap": False},
                         "recipes": [{"models": ["a"], "training": {"tp_comm_overlap": "on"}, "source": "x y z"}]})


def test_deepspeeds_pipeline_engine_stacks_pay_both_directions_of_a_stage_crossing():
    # DeepSpeed's PipelineEngine sends and receives one after the other (blocking dist.send /
    # dist.recv in each TrainSchedule step); Megatron posts both together (batch_isend_irecv)
    from simulator.stack_defaults import stack_config_fields
    blocking = {n for n in list_stacks() if load_stack(n).training is not None
                and stack_config_fields(load_stack(n))["pipe_exchange_blocking"]}
    assert blocking == {"megatron-deepspeed", "gpt-neox-2022", "deepspeed-2021"}


@pytest.mark.parametrize("kinds", [[], None])
def test_a_stack_file_listing_no_cp_flavour_is_refused_on_that_key(kinds):
    """context_parallel_kinds: [] or null had been refused on the other key ("training.
    context_parallel_kind: 'allgather' is not among the flavours the release runs ()"), naming no
    stack; a release without context parallelism says lacks: [context_parallel]."""
    with pytest.raises(InputError) as info:
        stack_from_dict({"name": "tt", "framework": "torchtitan",
                         "training": {"context_parallel_kind": "allgather", "context_parallel_kinds": kinds}})
    assert info.value.field == "stack tt.training.context_parallel_kinds"
    assert "lacks: [context_parallel]" in str(info.value) and "\n" not in str(info.value)


def test_a_stack_files_duplicate_cp_flavours_are_listed_once():
    """[allgather, allgather, ring] is the flavours allgather and ring; the refusal's advice had
    said "use --cp-kind allgather or use --cp-kind allgather or use --cp-kind ring"."""
    from simulator.stack_defaults import check_stack_cp_kind
    s = stack_from_dict({"name": "tt", "framework": "torchtitan",
                         "training": {"context_parallel_kind": "allgather",
                                      "context_parallel_kinds": ["allgather", "allgather", "ring"]}})
    assert s.training.context_parallel_kinds == ("allgather", "ring")
    with pytest.raises(InputError) as info:
        check_stack_cp_kind(s, "ulysses")
    assert str(info.value).count("use --cp-kind allgather") == 1
