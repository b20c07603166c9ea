"""The memoised lookups validation runs per row answer as the plain scans they replace:
presets_for reads an index of the presets file by (model, GPU), model_key a memo."""
import pytest

from hardware_specs.catalog import list_stacks, load_stack
from hardware_specs.stack_presets import PRESET_FRAMEWORK, all_presets, presets_for
from hardware_specs.stack_spec import model_key


def test_presets_for_answers_as_a_scan_of_every_preset():
    stacks = [load_stack(n) for n in list_stacks() if load_stack(n).framework == PRESET_FRAMEWORK]
    assert stacks
    pairs = {(p.model, p.gpu) for p in all_presets()} | {("llama370b", "no-such-gpu")}
    for stack in stacks:
        versions = set(stack.versions)
        for model, gpu in sorted(pairs):
            scan = tuple(p for p in all_presets() if p.container in versions and p.model == model and p.gpu == gpu)
            assert presets_for(stack, model, gpu.upper()) == scan


@pytest.mark.parametrize("name, key", [("LLAMA3_70B (Megatron-Bridge)", "llama370b"), ("llama3-70b", "llama370b"),
                                       ("Qwen3 30B-A3B", "qwen330ba3b"), (5, "5"), ("", "")])
def test_model_key_by_hand_twice(name, key):
    assert model_key(name) == key
    assert model_key(name) == key
