"""A GPU profile's ``sustained_tensor_fraction``: the share of its datasheet's dense tensor rates
the part holds where runs of the same software measure it below them (GB200: B200's rates).

Hand-derived: GB200's datasheet gives 5,000 TFLOP/s FP8 dense; at 0.9 the cost models run
4,500 TFLOP/s, exactly DGX B200's datasheet rate, so every tensor rate of the two parts is
equal, while MFU stays of the datasheet's 5,000. The SFU's exponential rate (5e12/s for both in
NVIDIA's Blackwell Ultra brief) is not scaled.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models.compute import compute_rates
from cost_models.inference_layers import layer_rates
from hardware_specs.catalog import efficiency_for, load_gpu, load_serving_efficiency
from hardware_specs.errors import InputError


def test_gb200_datasheet_peaks_kept_and_sustained_at_b200s_rates():
    gb200, b200 = load_gpu("gb200"), load_gpu("b200")
    assert gb200.sustained_tensor_fraction == 0.9
    assert b200.sustained_tensor_fraction == 1.0
    assert gb200.peak_flops("fp8") == pytest.approx(5000e12, rel=1e-12)      # datasheet, for MFU
    assert gb200.sustained_flops("fp8") == pytest.approx(4500e12, rel=1e-12)
    assert gb200.sustained_flops("bf16") == pytest.approx(2250e12, rel=1e-12)
    assert b200.sustained_flops("fp8") == b200.peak_flops("fp8")


@pytest.mark.parametrize("dtype", ["bf16", "fp8", "mxfp8", "nvfp4"])
def test_training_rates_of_gb200_equal_b200s(dtype):
    eff = efficiency_for(load_gpu("b200"))
    gb, b = compute_rates(load_gpu("gb200"), eff, dtype), compute_rates(load_gpu("b200"), eff, dtype)
    assert gb.gemm_flops_per_s == pytest.approx(b.gemm_flops_per_s, rel=1e-12)
    assert gb.attn_flops_per_s == pytest.approx(b.attn_flops_per_s, rel=1e-12)
    assert gb.exp_per_s == b.exp_per_s == 5e12
    # the K-direction scale is a ratio of two peaks of one part: the clock cancels
    assert gb.k_half_dim == pytest.approx(b.k_half_dim, rel=1e-12)
    assert gb.gemm_flops_per_s == pytest.approx(
        load_gpu("b200").peak_flops(dtype) * eff.gemm_fraction(dtype), rel=1e-12)


def test_serving_rates_of_gb200_equal_b200s():
    eff = load_serving_efficiency("blackwell")
    gb = layer_rates(load_gpu("gb200"), eff, "fp8", "nvfp4")
    b = layer_rates(load_gpu("b200"), eff, "fp8", "nvfp4")
    for field in ("dense_flops_per_s", "expert_flops_per_s", "head_flops_per_s",
                  "attention_flops_per_s", "mla_decode_flops_per_s"):
        assert getattr(gb, field) == pytest.approx(getattr(b, field), rel=1e-12), field


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.2, float("nan"), float("inf")])
def test_a_fraction_outside_0_1_is_named(bad):
    with pytest.raises(InputError) as err:
        replace(load_gpu("b200"), sustained_tensor_fraction=bad)
    assert err.value.field == "gpu b200.sustained_tensor_fraction"


def test_the_file_key_is_read_and_checked(tmp_path):
    text = ("name: my-gpu\ngeneration: hopper\npeak_tflops: {bf16: 1000}\nhbm_gib: 80\n"
            "hbm_bw_tb_per_s: 3.35\nscaleup_bw_gb_per_s: 450\nscaleup_domain_size: 8\n")
    ok = tmp_path / "my-gpu.yaml"
    ok.write_text(text + "sustained_tensor_fraction: 0.8\n")
    assert load_gpu(str(ok)).sustained_flops("bf16") == pytest.approx(800e12, rel=1e-12)
    bad = tmp_path / "bad-gpu.yaml"
    bad.write_text(text.replace("my-gpu", "bad-gpu") + "sustained_tensor_fraction: 80\n")
    with pytest.raises(InputError) as err:
        load_gpu(str(bad))
    assert err.value.field == "gpu bad-gpu.sustained_tensor_fraction"
    assert "at most 1" in str(err.value)
