"""The context-parallel flavour a stack's framework runs (``training.context_parallel_kind``).

Cited defaults: Megatron-Core's ``--cp-comm-type`` defaults to ``["p2p"]``, the ring
(NVIDIA/Megatron-LM@d98e8a64dd megatron/training/arguments.py:3221); torchtitan 0.2.0's
``context_parallel_rotate_method`` defaults to ``"allgather"`` (pytorch/torchtitan@v0.2.0
torchtitan/config/job_config.py:381) and 0.3.0's CP wrapper all-gathers K/V for FlexAttention
(torchtitan/distributed/context_parallel/api.py ``flex_cp_allgather``).
"""
from __future__ import annotations

import pytest

from hardware_specs.catalog import load_stack
from hardware_specs.errors import InputError
from hardware_specs.stack_files import stack_from_dict
from simulator.stack_defaults import stack_cp_kind


def test_each_stack_names_the_cp_flavour_its_framework_runs_with_its_source():
    for name in ("torchtitan", "torchtitan-compile"):
        stack = load_stack(name)
        assert stack.training.context_parallel_kind == "allgather"
        text = stack.citations["training.context_parallel_kind"]
        assert "job_config.py" in text and "context_parallel_rotate_method" in text
        assert "context_parallel/api.py" in text and "flex_cp_allgather" in text
    for name in ("megatron-core", "megatron-core-0.12", "nemo-24", "nemo-24.09", "megatron-bridge",
                 "megatron-bridge-25.09"):
        stack = load_stack(name)
        assert stack.training.context_parallel_kind == "ring"
        assert "arguments.py:3221" in stack.citations["training.context_parallel_kind"]
        assert "default=['p2p']" in stack.citations["training.context_parallel_kind"]
    # a release without context parallelism keeps the default and says it does not apply
    assert "not applicable" in load_stack("megatron-lm-2022").citations["training.context_parallel_kind"]
    with pytest.raises(InputError, match="training.context_parallel_kind: unknown flavour 'rings'"):
        stack_from_dict({"name": "x", "framework": "f", "training": {"context_parallel_kind": "rings"}})
    assert stack_cp_kind(load_stack("torchtitan")) == "allgather"
    assert stack_cp_kind(load_stack("megatron-core")) == "ring"

