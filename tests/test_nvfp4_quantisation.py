"""NVFP4 quantisation as Transformer Engine runs it (arXiv 2509.25149 section 4; TE's
``NVFP4Quantizer::quantize_impl``): an activation or output gradient needs a row-wise copy and a
column-wise copy of its random Hadamard transform, each E2M1 (0.5 byte) with an E4M3 scale per 16
elements (0.0625). One kernel takes both amaxes in one read of the 16-bit tensor (2 bytes); TE 2.12
then casts each copy from its own read: 2 + 2 x (2 + 0.5625) = 7.125 bytes, 3 kernels; TE 2.14 on
writes both from one read: 2 + 2 + 2 x 0.5625 = 5.125 bytes, 2 kernels (``nvfp4_rht_cast_fusion``).
The norm before a projection never quantises an NVFP4 input (TE's normalization.cpp keeps it
unfused for the Hadamard amax), so a norm-fed input costs the same as a standalone one."""
from __future__ import annotations

import pytest

from cost_models.layer_costs import block_cast_bytes
from cost_models.low_precision import quantise_bytes_per_element, quantise_kernels
from hardware_specs.catalog import load_stack
from simulator.stack_defaults import stack_config_fields

T = 8192                                   # tokens of one micro-batch
QKV, O = (8192 + 2 * 1024, 8192), (8192, 8192)   # Llama 3 70B at tp 1: (n, k) of the projections


def test_bytes_an_element_by_release():
    assert quantise_bytes_per_element("nvfp4", "activation") == 7.125
    assert quantise_bytes_per_element("nvfp4", "grad") == 7.125
    assert quantise_bytes_per_element("nvfp4", "activation", rht_cast_fusion=True) == 5.125
    assert quantise_bytes_per_element("nvfp4", "grad", rht_cast_fusion=True) == 5.125
    # weights: 2-D 16x16 blocks, one amax serves both layouts, no transform
    assert quantise_bytes_per_element("nvfp4", "weight") == 5.125
    assert quantise_bytes_per_element("nvfp4", "weight", rht_cast_fusion=True) == 5.125


def test_kernels_by_release_and_the_norm_never_fuses():
    assert quantise_kernels("nvfp4") == 3.0
    assert quantise_kernels("nvfp4", fused=True) == 3.0
    assert quantise_kernels("nvfp4", rht_cast_fusion=True) == 2.0
    assert quantise_kernels("nvfp4", fused=True, rht_cast_fusion=True) == 2.0
    assert quantise_kernels("mxfp8", fused=True) == 1.0          # other recipes unchanged


@pytest.mark.parametrize("fusion, per_element, kernels", [(False, 7.125, 3.0), (True, 5.125, 2.0)])
def test_an_attention_blocks_casts_by_hand(fusion, per_element, kernels):
    # forward: the norm-fed QKV input (T x 8192) and the output projection's input (T x 8192);
    # backward: the output gradients of both (T x 10240 and T x 8192)
    casts = block_cast_bytes(T, [QKV, O], "nvfp4", False, 1, False, False, fusion)
    assert casts["fprop"] == pytest.approx(T * (8192 + 8192) * per_element, rel=1e-12)
    assert casts["dgrad"] == pytest.approx(T * (10240 + 8192) * per_element, rel=1e-12)
    assert casts["fprop_kernels"] == 2 * kernels
    assert casts["dgrad_kernels"] == 2 * kernels
    assert casts["weights"] == pytest.approx((10240 * 8192 + 8192 * 8192) * 5.125, rel=1e-12)


def test_megatron_bridge_releases_from_26_04_pin_the_fused_kernel():
    def fused(name):
        return stack_config_fields(load_stack(name), "nvfp4")["nvfp4_rht_cast_fusion"]
    assert not fused("megatron-bridge-26.02") and not fused("megatron-bridge-26.02.01")   # TE 2.12
    for name in ("megatron-bridge-26.04", "megatron-bridge-26.04.01", "megatron-bridge-26.06",
                 "megatron-bridge-26.06.01", "megatron-bridge"):                      # TE 2.14 - 2.17
        assert fused(name), name


def test_a_stacks_fp8_recipe_does_not_change_its_nvfp4_casts():
    # Megatron-Bridge's stacks set FP8 current scaling ("tensorwise") for every run; an nvfp4
    # run's casts are NVFP4's whatever the FP8 recipe says
    for fusion, per_element in ((False, 7.125), (True, 5.125)):
        casts = block_cast_bytes(T, [QKV, O], "nvfp4", True, 1, False, False, fusion)
        assert casts["fprop"] == pytest.approx(T * (8192 + 8192) * per_element, rel=1e-12)


def test_layer_ops_shows_the_stacks_casts():
    from paraplan.api import layer_ops

    def casts(stack):
        ops = layer_ops("llama3-70b", "gb300-nvl72", tp=1, micro_batch=1, dtype="nvfp4", stack=stack)
        return ops[ops.op.str.contains("quantisation")].set_index("pass").bytes
    mlp = 8192 * (8192 + 28672)                     # the MLP's inputs: up (norm-fed) and down
    attn = 8192 * (8192 + 8192)                     # QKV (norm-fed) and the output projection
    assert casts("megatron-bridge-26.04")["forward"] == pytest.approx((attn + mlp) * 5.125, rel=1e-9)
    assert casts("megatron-bridge-26.02")["forward"] == pytest.approx((attn + mlp) * 7.125, rel=1e-9)


def test_grouped_expert_inputs_are_quantised_by_grouped_kernels():
    # 16 local experts' rows: one grouped amax and one grouped cast (TE 2.14), not 2 per expert
    from cost_models.layer_costs import linear_cast_bytes
    casts = linear_cast_bytes(1024, [(2048, 1024), (1024, 1024)], "nvfp4", [False, False], [False, False], False,
                              16, rht_cast_fusion=True)
    assert casts["fprop_kernels"] == 2 * 2.0
    assert casts["fprop"] == pytest.approx(1024 * (1024 + 1024) * 5.125, rel=1e-12)
    mx = linear_cast_bytes(1024, [(2048, 1024), (1024, 1024)], "mxfp8", [False, False], [False, False], False, 16)
    assert mx["fprop_kernels"] == 2 * 16.0                       # MXFP8 splits: one kernel each

