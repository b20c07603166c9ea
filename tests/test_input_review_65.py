"""Fixes from the session-65 input review of the training commands: an integer too large for a
float (``10**400``) in a sweep spec or a ``ParallelConfig`` field is the field's one-line error,
not ``OverflowError``; a bad value in a stack recipe is named at the recipe; a plan that the
scale-up domain tiling leaves without a layout names that rule, not the global batch."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from cli_results import one_line_error, run

from hardware_specs.errors import InputError
from paraplan import api

HUGE = 10**400
#: a sweep of one point that runs (each case replaces one key)
POINT = {"models": ["llama3-8b"], "clusters": ["dgx-h100"], "gpus": [8], "global_batch": [8], "search": "simulate"}


@pytest.mark.parametrize("key, value, line", [
    ("config", {"tp": [1, HUGE]},
     "error: config.tp: an integer of 401 digits is above the largest supported value 16,777,216 (check the number)"),
    ("config", {"moe_load_imbalance": HUGE},
     "error: config.moe_load_imbalance: an integer of 401 digits is above the largest supported value 1,048,576 "
     "(check the number)"),
    ("config", {"moe_load_imbalance": -HUGE},
     "error: config.moe_load_imbalance: must be between 1 (perfectly balanced) and 1,048,576, got a negative "
     "integer of 401 digits (correct config.moe_load_imbalance; the command's --help says what it takes)"),
    ("gpus", [HUGE],
     "error: gpus: an integer of 401 digits is above the largest supported value 16,777,216 (check the number)"),
    ("global_batch", [HUGE],
     "error: global_batch: an integer of 401 digits is above the largest supported value 1,099,511,627,776 "
     "(check the number)"),
    ("seq_len", [HUGE],
     "error: seq_len: an integer of 401 digits is above the largest supported value 1,073,741,824 (check the number)"),
])
def test_a_sweep_spec_holding_an_integer_too_large_for_a_float_is_its_keys_error(tmp_path, key, value, line):
    """``math.isfinite(10**400)`` raises OverflowError: the sweep exited 1 with 'error: internal:
    OverflowError: int too large to convert to float'; now the key's bound refuses it, exit 2,
    and nothing is written under --out."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**POINT, key: value}))
    out = tmp_path / "o"
    result = run("sweep", spec, "--out", out, "--local")
    assert one_line_error(result) == line
    assert not out.exists()


@pytest.mark.parametrize("field, line", [
    ("grad_bucket_elements", "grad_bucket_elements: must be a finite number >= 0, got an integer of 401 digits"),
    ("grad_bucket_elements_per_dp",
     "grad_bucket_elements_per_dp: must be a finite number >= 0, got an integer of 401 digits"),
    ("param_prefetch_forward", "param_prefetch_forward: must be a finite number >= 0, got an integer of 401 digits"),
    ("param_prefetch_backward", "param_prefetch_backward: must be a finite number >= 0, got an integer of 401 digits"),
    ("param_prefetch_max_elements",
     "param_prefetch_max_elements: must be a finite number >= 0, got an integer of 401 digits"),
    ("zero3_persistence_elements",
     "zero3_persistence_elements: must be a finite number >= 0, got an integer of 401 digits"),
    ("moe_load_imbalance",
     "moe_load_imbalance: must be between 1 (perfectly balanced) and 1,048,576, got an integer of 401 digits"),
    ("offload_optimizer_fraction", "offload_optimizer_fraction: must be in [0, 1], got an integer of 401 digits"),
])
def test_api_simulate_with_an_integer_too_large_for_a_float_names_the_field(field, line):
    """``float(10**400)`` raised a bare OverflowError out of ParallelConfig; now it reads as inf
    (``errors.as_float``) and the field's own check refuses it."""
    with pytest.raises(InputError) as caught:
        api.simulate("llama3-8b", "dgx-h100", gpus=8, global_batch=8, **{field: HUGE})
    assert str(caught.value) == line
    assert caught.value.field == field


BRIDGE = Path(__file__).resolve().parents[1] / "hardware_specs" / "stacks" / "megatron-bridge-26.04.yaml"


def _stack_with(tmp_path, recipes, **top) -> Path:
    """Megatron-Bridge 26.04's stack file with ``recipes`` in place of its own (and the top-level
    training values of ``top``)."""
    data = copy.deepcopy(yaml.safe_load(BRIDGE.read_text()))
    data["recipes"] = recipes
    for key, value in top.items():
        data["training"][key]["value"] = value
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("recipes, top, line", [
    ([{"models": ["llama3-8b"], "training": {"master_weights": "bogus"}, "source": "x"}], {},
     "error: stack megatron-bridge-26.04.recipes[0].training.master_weights: unknown value 'bogus' "
     "(choose one of fp32, bf16_remainder, param_dtype)"),
    # one recipe setting a flavour its own list leaves out
    ([{"models": ["llama3-8b"], "training": {"context_parallel_kind": "allgather", "context_parallel_kinds": ["ring"]},
       "source": "x"}], {},
     "error: stack megatron-bridge-26.04.recipes[0].training.context_parallel_kind: 'allgather' is not among the "
     "flavours the release runs (ring) (add it to training.context_parallel_kinds or choose one of them)"),
    # a flavour the stack's own list leaves out
    ([{"models": ["llama3-8b"], "training": {"context_parallel_kind": "allgather"}, "source": "x"}],
     {"context_parallel_kinds": ["ring"]},
     "error: stack megatron-bridge-26.04.recipes[0].training.context_parallel_kind: 'allgather' is not among the "
     "flavours the release runs (ring) (add it to training.context_parallel_kinds or choose one of them)"),
    # valid each on the defaults, not once the first has narrowed the list: named at the second
    ([{"models": ["llama3-8b"], "training": {"context_parallel_kinds": ["ring"]}, "source": "x"},
      {"models": ["llama3-8b"], "training": {"context_parallel_kind": "allgather"}, "source": "x"}], {},
     "error: stack megatron-bridge-26.04.recipes[1].training.context_parallel_kind: 'allgather' is not among the "
     "flavours the release runs (ring) (add it to training.context_parallel_kinds or choose one of them)"),
    # the stack's own value: its top-level block, not a bare training.<key>
    ([], {"master_weights": "bogus"},
     "error: stack megatron-bridge-26.04.training.master_weights: unknown value 'bogus' "
     "(choose one of fp32, bf16_remainder, param_dtype)"),
])
def test_a_bad_stack_recipe_value_is_named_at_the_recipe(tmp_path, recipes, top, line):
    """TrainingBehaviour's own checks named 'training.master_weights', the stack's top-level field
    (valid in this file): now the recipe (or block) that sets the value is named, as the other
    recipe errors are."""
    stack = _stack_with(tmp_path, recipes, **top)
    result = run("simulate", "-m", "llama3-8b", "-c", "dgx-b200", "-n", "8", "--global-batch", "8", "--stack", stack)
    assert one_line_error(result) == line


NVL72_4608 = ("plan", "-m", "nemotron-3-ultra-550b-a55b", "-c", "gb300-nvl72", "-n", "4608", "--global-batch", "4096")


def test_a_plan_no_layout_of_which_tiles_the_scaleup_domain_names_that_rule_not_the_batch():
    """Nemotron 3 Ultra on 4608 GB300 (64 NVL72 racks) at 4096 sequences: tp (2 key/value heads)
    and cp (2 x cp chunks of 8192 tokens) are powers of 2, and so is every dp dividing 4096, so no
    tp x cp x dp is a multiple of 72 (pp <= 108 layers leaves 43 or more GPUs to it). It said 'no
    layout of 4608 GPUs divides the global batch of 4096 sequences into dp x micro-batch', which
    dp 8 x micro-batch 1 does. The batches it suggests plan."""
    line = one_line_error(run(*NVL72_4608))
    assert line == (
        "error: gpus: no layout of nemotron-3-ultra-550b-a55b on 4608 GPUs dividing the global batch of 4096 "
        "sequences into dp x micro-batch tiles the 72-GPU scale-up domain: every communication group must divide "
        "72 or be a multiple of it, and in those layouts tp x cp x dp is 64, 128, 256, 512, so a data-parallel "
        "group would span domains unevenly (use a global batch of 4095 or 4104 sequences)")
    for batch in ("4095", "4104"):
        assert run(*NVL72_4608[:-1], batch).exit_code == 0


def test_a_fixed_dp_no_layout_of_which_tiles_the_scaleup_domain_names_that_rule_and_a_fix_that_plans():
    """With --dp 8 no batch helps (8 x tp x cp is a power of 2): the rule is named without the batch,
    and the fix offered is to free dp and use a batch the test above plans (a multiple of 9 in dp)."""
    line = one_line_error(run(*NVL72_4608, "--dp", "8"))
    assert line == (
        "error: gpus: no layout of nemotron-3-ultra-550b-a55b on 4608 GPUs tiles the 72-GPU scale-up domain: every "
        "communication group must divide 72 or be a multiple of it, and in those layouts tp x cp x dp is 64, 128, "
        "256, 512, so a data-parallel group would span domains unevenly (drop the fixed dp=8 and use a global "
        "batch of 4095 or 4104 sequences)")


def test_a_batch_that_no_layout_divides_still_names_the_batch():
    """Where the batch is the reason (no layout divides it even ignoring the 8-GPU domains), the
    batch message stays: llama3-70b on 1024 H100 at 1000 sequences, tp 8 pp 4 cp 2 fixed (dp 16)."""
    line = one_line_error(run("plan", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "1024", "--global-batch", "1000",
                              "--tp", "8", "--pp", "4", "--cp", "2", "--vpp", "2"))
    assert line == ("error: gpus: no layout of 1024 GPUs divides the global batch of 1000 sequences into dp x "
                    "micro-batch (the layouts of llama3-70b there have dp in 16) (fix fewer values (tp=8, pp=4, cp=2, "
                    "vpp=2))")


def test_recipes_that_only_work_together_load_and_apply_in_order(tmp_path):
    """A later recipe may rely on an earlier one's flavours: recipe 0 widens the kinds to ring and
    all-gather for llama3-8b, recipe 1 picks all-gather on B200. Applied in order (``training_for``)
    the pair is valid; checking recipe 1 alone on the stack's ring-only defaults refused the file."""
    from hardware_specs.catalog import BUILTIN_DIR
    from hardware_specs.stack_files import stack_from_dict
    data = yaml.safe_load((BUILTIN_DIR / "stacks" / "megatron-bridge-26.04.yaml").read_text())
    data["training"]["context_parallel_kinds"]["value"] = ["ring"]
    data["training"]["context_parallel_kind"]["value"] = "ring"
    data["recipes"] = [
        {"models": ["llama3-8b"], "training": {"context_parallel_kinds": ["ring", "allgather"]}, "source": "x"},
        {"models": ["llama3-8b"], "gpus": ["b200"], "training": {"context_parallel_kind": "allgather"}, "source": "x"}]
    stack = stack_from_dict(copy.deepcopy(data))
    b200 = stack.training_for("llama3-8b", "b200", "bf16")
    assert (b200.context_parallel_kind, tuple(b200.context_parallel_kinds)) == ("allgather", ("ring", "allgather"))
    assert stack.training_for("llama3-8b", "h100-sxm-80gb", "bf16").context_parallel_kind == "ring"
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run("simulate", "-m", "llama3-8b", "-c", "dgx-b200", "-n", "8", "--global-batch", "8", "--cp", "2",
                 "--stack", str(path))
    assert result.exit_code == 0, result.output
    # the flavour alone, with no recipe widening the kinds, is refused where it is applied, named at its recipe
    data["recipes"] = data["recipes"][1:]
    path.write_text(yaml.safe_dump(data))
    one_line_error(run("simulate", "-m", "llama3-8b", "-c", "dgx-b200", "-n", "8", "--global-batch", "8", "--cp", "2",
                       "--stack", str(path)), "recipes[0].training.context_parallel_kind")


@pytest.mark.parametrize("field", ["micro_batch", "dp", "ep", "vpp", "recompute_num_layers"])
def test_a_huge_integer_degree_is_quoted_by_its_size_not_its_401_digits(field):
    with pytest.raises(InputError) as info:
        api.simulate("llama3-8b", "dgx-h100", gpus=8, global_batch=8, **{field: 10**400})
    assert info.value.field == field
    assert "an integer of 401 digits is above the largest supported value" in str(info.value)
    assert len(str(info.value)) < 160
