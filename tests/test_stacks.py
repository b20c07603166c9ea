"""The software-stack catalog: documented behaviour per framework release, loaded as data."""
import pytest

from hardware_specs.catalog import list_stacks, load_stack, stack_from_dict
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
