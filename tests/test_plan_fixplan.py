"""Plan-search fixes: pinned full recomputation vs chunk sizes, the context-parallel flavour
a plan carries, and API pass-throughs (review of the cp_kind / recompute changes)."""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from planners import plan

# llama3-8b: 32 decoder layers, no MTP (model_specs catalog). A chunk of a pp x vpp layout
# split as evenly as possible holds ceil(32 / (pp * vpp)) layers: pp 1 -> 32, pp 2 -> 16.


def test_pinned_full_recompute_keeps_only_chunks_that_hold_n_layers():
    result = plan("llama3-8b", "dgx-h100", 16, 64, fixed={"recompute": "full"}, recompute_num_layers=20,
                  max_plans=None)
    chunks = -(-32 // (result.plans["pp"] * result.plans["vpp"]))
    assert len(result.plans) and (chunks >= 20).all()
    assert set(result.plans["pp"]) == {1}          # only pp 1 chunks (32 layers) hold 20


def test_pinned_full_recompute_with_no_chunk_large_enough_names_the_largest():
    with pytest.raises(InputError) as err:
        plan("llama3-8b", "dgx-h100", 16, 64, fixed={"recompute": "full", "pp": 2}, recompute_num_layers=20)
    assert err.value.field == "recompute_num_layers"
    assert "at most 16" in str(err.value) and "vpp" not in str(err.value)


def test_pinned_full_recompute_of_a_whole_chunk_still_plans():
    result = plan("llama3-8b", "dgx-h100", 16, 64, fixed={"recompute": "full", "pp": 2}, recompute_num_layers=16)
    assert set(zip(result.plans["pp"], result.plans["vpp"])) == {(2, 1)}
