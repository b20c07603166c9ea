"""The CDNA3 parts run their donor generation's (Hopper's) fitted efficiency on the share of
their datasheet tensor rate they sustain (gpus/mi300x.yaml, gpus/mi325x.yaml): the ratio of the
two parts' results in one cross-vendor matmul benchmark (stas00/ml-engineering@744d01e1,
"Maximum Achievable Matmul FLOPS comparison table", bf16: MI300X 51.4%, MI325X 60.4% at 1,000 W,
H100 SXM 80.3% of their datasheets). MFU stays of the datasheet's peak."""
import pytest

from hardware_specs.catalog import load_gpu
from paraplan import api

HOPPER_GEMM16 = 0.6843      # efficiency/cdna3.yaml = efficiency/hopper.yaml's fitted bf16 plateau
HOPPER_HBM = 0.5546         # and its fitted HBM fraction (0.5547 until session 69's refit)


@pytest.mark.parametrize("gpu, measured_pct", [("mi300x", 51.4), ("mi325x", 60.4)])
def test_each_part_sustains_its_matmul_share_relative_to_the_h100(gpu, measured_pct):
    assert load_gpu(gpu).sustained_tensor_fraction == pytest.approx(measured_pct / 80.3, abs=0.005)


@pytest.mark.parametrize("cluster, sustained, hbm_tb_per_s", [("mi300x-node", 0.64, 5.3), ("mi325x-node", 0.75, 6.0)])
def test_the_gemm_plateau_is_datasheet_times_sustained_times_the_donor_fraction(cluster, sustained, hbm_tb_per_s):
    """bf16 plateau: 1,307.4 TFLOP/s x 0.64 x 0.6843 = 572.58 on the MI300X, x 0.75 = 670.99 on
    the MI325X; the memory-bound kernels get 5.3 (6.0) TB/s x 0.5546, unchanged by the clock."""
    ops = api.layer_ops("llama3-70b", cluster, tp=8, micro_batch=1, seq_len=8192)
    row = ops.iloc[0]
    assert row["peak_tflop_per_s"] == pytest.approx(1307.4)
    assert row["achieved_peak_tflop_per_s"] == pytest.approx(1307.4 * sustained * HOPPER_GEMM16, rel=1e-9)
    assert row["achieved_hbm_tb_per_s"] == pytest.approx(hbm_tb_per_s * HOPPER_HBM, rel=1e-4)


def test_mfu_is_of_the_datasheet_peak_and_the_numbers_say_they_rest_on_a_prior():
    row = api.simulate("llama3-8b", "mi325x-node", gpus=8, global_batch=64).iloc[0]
    assert row["mfu_bf16_pct"] == pytest.approx(100 * row["model_tflops_per_gpu"] / 1307.4, rel=1e-9)
    assert not row["efficiency_fitted"]
