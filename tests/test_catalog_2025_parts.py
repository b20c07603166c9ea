"""The accelerators shipped since 2025 in the catalog: AMD Instinct MI355X / MI350X (CDNA 4) and
NVIDIA H20 (Hopper), with an 8-GPU preset each.

* The rates read back are the published ones their files cite (AMD's MI355X / MI350X pages and
  Hot Chips 2025; the HGX H20 specification sheet as the press reported it): dense, per dtype,
  and each AMD rate is CUs x FLOP a clock x peak clock (256 x 4,096 bf16 at 2.4 / 2.2 GHz).
* CDNA 4 rests on its own unfitted priors, written by the fitter's rowless rule from Blackwell
  (``paraplan.validation.fit.ROWLESS_DONOR``), and every output says so as MI325X's do; H20 runs
  the fitted Hopper factors and says nothing.
* A decode step at batch 1 on H20 is the weights it reads over 4.0 TB/s x Hopper's fitted decode
  HBM fraction, plus the model's fixed time per kernel."""
from __future__ import annotations

import pytest

from hardware_specs.catalog import list_clusters, list_gpus, load_cluster, load_efficiency, load_gpu, \
    load_serving_efficiency
from paraplan import api, serving_api

TERA = 1e12
GIB = 2**30


@pytest.fixture(autouse=True)
def _no_user_hardware_path(monkeypatch):
    monkeypatch.delenv("PARAPLAN_HARDWARE_PATH", raising=False)


# --- the datasheet numbers, read back ---------------------------------------------------------

@pytest.mark.parametrize("name, clock_ghz, fp32, bf16, fp8, fp4", [
    ("mi355x", 2.4, 157.3, 2516.6, 5033.2, 10066.3),    # AMD: 157.3 TF, 2.5 / 5.0 / 10.1 PF dense
    ("mi350x", 2.2, 144.2, 2306.9, 4613.7, 9227.5),     # AMD: 144.2 TF, 2.3 / 4.6 / 9.2 PF dense
])
def test_cdna4_peaks_are_the_datasheets_and_cus_times_flop_a_clock_times_clock(name, clock_ghz, fp32, bf16, fp8, fp4):
    gpu = load_gpu(name)
    assert gpu.generation == "cdna4" and gpu.vendor == "amd" and gpu.sm_count == 256
    for dtype, tflops, flop_a_clock in (("fp32", fp32, 256), ("bf16", bf16, 4096), ("fp16", bf16, 4096),
                                        ("fp8", fp8, 8192), ("mxfp8", fp8, 8192), ("nvfp4", fp4, 16384)):
        assert gpu.peak_flops(dtype) == pytest.approx(tflops * TERA, rel=1e-12), dtype
        # the published figure is the clock formula, to AMD's rounding (to 0.1 TFLOP/s: 157.3 for 157.29, 144.2 for 144.18)
        assert gpu.peak_flops(dtype) == pytest.approx(256 * flop_a_clock * clock_ghz * 1e9, abs=0.05 * TERA), dtype
    assert "tf32" not in gpu.peak_flops_per_s          # CDNA 4 has no TF32 GEMM
    assert gpu.hbm_bytes == 288 * GIB and gpu.hbm_bw_bytes_per_s == 8.0 * TERA
    # 7 Infinity Fabric links x 153.6 GB/s bidirectional = 1,075 GB/s (Hot Chips 2025), per direction
    assert gpu.scaleup_bw_bytes_per_s == pytest.approx(7 * 153.6e9 / 2) and gpu.scaleup_domain_size == 8


def test_mi355x_sustains_its_measured_matmul_share_relative_to_its_donors_b200():
    # stas00/ml-engineering@744d01e1 MAMF table, bf16: MI355X 1,565.0 of 2,516.6; B200 1,745.0 of 2,250
    share = (1565.0 / 2516.6) / (1745.0 / 2250.0)
    assert share == pytest.approx(0.80, abs=0.005)
    assert load_gpu("mi355x").sustained_tensor_fraction == pytest.approx(share, abs=0.005)
    assert load_gpu("mi350x").sustained_tensor_fraction == load_gpu("mi355x").sustained_tensor_fraction


def test_h20_peaks_are_the_spec_sheets_and_it_is_hopper():
    gpu = load_gpu("h20")
    assert gpu.generation == "hopper" and gpu.sm_count == 78
    for dtype, tflops in (("fp32", 44), ("tf32", 74), ("bf16", 148), ("fp16", 148), ("fp8", 296)):
        assert gpu.peak_flops(dtype) == tflops * TERA, dtype
    assert gpu.hbm_bytes == 96 * GIB and gpu.hbm_bw_bytes_per_s == 4.0 * TERA
    assert gpu.scaleup_bw_bytes_per_s == 900e9 / 2 and gpu.scaleup_domain_size == 8
    assert gpu.sustained_tensor_fraction == 1.0 and gpu.sfu_exp_per_s is None
    h100 = load_gpu("h100-sxm-80gb")
    assert h100.peak_flops("bf16") / gpu.peak_flops("bf16") == pytest.approx(6.685, abs=1e-3)


@pytest.mark.parametrize("cluster, gpu, mesh_gb_per_s, nic_gbit, kind", [
    ("mi355x-node", "mi355x", 76.8, 400, "roce"),         # one Pollara 400 per GPU
    ("mi350x-node", "mi350x", 76.8, 400, "roce"),
    ("hgx-h20", "h20", None, 400, "infiniband"),          # HGX H200's CX-7 per GPU, the stated analogue
])
def test_each_part_has_an_8_gpu_preset_with_its_nic(cluster, gpu, mesh_gb_per_s, nic_gbit, kind):
    c = load_cluster(cluster)
    assert c.gpu == load_gpu(gpu) and c.gpus_per_node == 8
    assert c.scaleout.kind == kind and c.scaleout.bw_bytes_per_s == nic_gbit * 1e9 / 8
    assert c.scaleup.bw_bytes_per_s == c.gpu.scaleup_bw_bytes_per_s
    if mesh_gb_per_s is None:
        assert c.scaleup.mesh_peer_bw_bytes_per_s is None
    else:      # a full mesh: 7 peers x one link each is the GPU's whole scale-up rate
        assert c.scaleup.mesh_peer_bw_bytes_per_s == pytest.approx(mesh_gb_per_s * 1e9)
        assert 7 * c.scaleup.mesh_peer_bw_bytes_per_s == pytest.approx(c.scaleup.bw_bytes_per_s)
    assert gpu in list_gpus() and cluster in list_clusters()


# --- what the numbers rest on -------------------------------------------------------------------

def test_cdna4_prior_is_what_the_fitter_writes_from_blackwell():
    from paraplan.validation.fit import ROWLESS_DONOR, rowless_prior
    from paraplan.validation.serving_fit import _yaml, serving_prior
    from hardware_specs.catalog import serving_efficiency_path
    assert ROWLESS_DONOR["cdna4"] == "blackwell"
    committed, expected, donor = load_efficiency("cdna4"), rowless_prior("cdna4"), load_efficiency("blackwell")
    assert not committed.is_fitted and "unfitted prior" in committed.fitted_on and "blackwell" in committed.fitted_on
    for name in ("gemm_half_dim", "attention_peak_fraction", "hbm_fraction", "kernel_overhead_s", "cpu_issue_s"):
        assert getattr(committed, name) == pytest.approx(getattr(expected, name), rel=1e-3), name
        assert getattr(committed, name) == pytest.approx(getattr(donor, name), rel=1e-3), name
    for dtype in ("bf16", "fp8", "mxfp8", "nvfp4"):
        assert committed.gemm_fraction(dtype) == pytest.approx(donor.gemm_fraction(dtype), rel=1e-3), dtype
    serving = load_serving_efficiency("cdna4")
    assert serving.prior and serving.donor == "blackwell"
    assert serving_efficiency_path("cdna4").read_text() == _yaml(serving_prior("cdna4"))


@pytest.mark.parametrize("cluster, prior", [("mi355x-node", True), ("mi350x-node", True), ("mi325x-node", True),
                                            ("hgx-h20", False), ("dgx-h100", False)])
def test_training_outputs_say_whether_they_rest_on_an_unfitted_prior(cluster, prior):
    row = api.simulate("llama3-8b", cluster, gpus=8, global_batch=64).iloc[0]
    assert bool(row["efficiency_fitted"]) is (not prior)
    assert row["step_time_s"] > 0 and row["mfu_bf16_pct"] > 0


@pytest.mark.parametrize("system, generation", [("mi355x-node", "cdna4"), ("mi325x-node", "cdna3")])
def test_the_cli_marks_cdna4_numbers_as_it_marks_mi325xs(system, generation):
    from click.testing import CliRunner
    from paraplan.cli import main as cli
    out = CliRunner().invoke(cli, ["simulate", "-m", "llama3-8b", "-c", system, "-n", "8", "--global-batch", "64"])
    assert out.exit_code == 0, out.output
    assert "step_time_s" in out.output and f"rests on the {generation} efficiency model, an unfitted prior" in out.output
    serve = CliRunner().invoke(cli, ["serve", "simulate", "-m", "llama3.1-8b", "-s", system, "--tp", "1"])
    assert serve.exit_code == 0, serve.output
    assert f"no serving measurement of {generation} GPUs was fitted" in serve.output


# --- a hand-derived roofline --------------------------------------------------------------------

def test_h20_batch_1_decode_is_the_weights_over_4_tb_per_s_times_hoppers_decode_fraction():
    """Llama 3.1 8B, bf16, batch 1: each decode step reads every weight but the input embedding
    (a row lookup) once. Per layer: q, o 4,096 x 4,096, k, v 4,096 x 1,024, gate / up / down
    4,096 x 14,336; 32 layers, and the 128,256 x 4,096 LM head. At 2 bytes over 4.0 TB/s x
    Hopper's fitted ``decode_hbm_fraction`` (cost_models.inference_layers.gemm_s: a batch-1 GEMM
    is traffic-bound), plus the KV cache it reads and a fixed time per kernel."""
    h, kv, f, layers, vocab = 4096, 1024, 14336, 32, 128256
    weight_bytes = 2.0 * (layers * (2 * h * h + 2 * h * kv + 3 * h * f) + vocab * h)
    assert weight_bytes == pytest.approx(15.01e9, rel=1e-3)
    frac = load_serving_efficiency("hopper").decode_hbm_fraction
    roofline_ms = 1e3 * weight_bytes / (4.0e12 * frac)
    row = serving_api.serve_simulate("llama3.1-8b", "hgx-h20", isl=128, osl=128, tp=1, batch=1,
                                     precision="bf16").iloc[0]
    moved_ms = row["decode_attention_ms"] + row["decode_mlp_ms"] + row["decode_elementwise_ms"] + row["decode_lm_head_ms"]
    # the KV cache read (at most 256 tokens x 32 layers x 2 x 1,024 x 2 bytes = 33.6 MB) and the
    # activations are under 0.5% beside 15 GB of weights
    assert roofline_ms <= moved_ms <= roofline_ms * 1.005
    # 15.01 GB / (4 TB/s x 0.8791) = 4.269 ms and the fixed kernel time (session 72's refit; 4.194 at 0.8949)
    assert moved_ms == pytest.approx(4.278, abs=0.01)
    # the MLP alone: 32 x 3 x 4,096 x 14,336 x 2 bytes
    assert row["decode_mlp_ms"] == pytest.approx(1e3 * 2.0 * layers * 3 * h * f / (4.0e12 * frac), rel=1e-3)
    # the rest of the step is the model's fixed time per kernel (and no host time at batch 1 here)
    step_ms = moved_ms + row["decode_kernel_fixed_ms"] + row["decode_comm_ms"] + row["decode_host_ms"]
    assert row["decode_kernel_fixed_ms"] > 0 and row["decode_comm_ms"] == 0
    assert row["tpot_ms"] >= step_ms * (1 - 1e-9)
    # H20's HBM is 4.0 / 3.35 = 1.19x the H100's: the same weights move that much faster
    h100 = serving_api.serve_simulate("llama3.1-8b", "dgx-h100", isl=128, osl=128, tp=1, batch=1,
                                      precision="bf16").iloc[0]
    assert h100["decode_mlp_ms"] / row["decode_mlp_ms"] == pytest.approx(4.0 / 3.35, rel=1e-3)
