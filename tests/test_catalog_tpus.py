"""TPU v5e, v5p, v6e (Trillium) and TPU7x (Ironwood) in the catalog: the numbers read back as
Google's Cloud TPU system architecture pages state them (cloud.google.com/tpu/docs/v5e, v5p, v6e,
tpu7x; the v6e DCN from the TPU7x page's comparison table), a roofline value derived by hand from the code's own formula,
and the unfitted-prior marking the chips inherit from the tpu-v4 efficiency model they share."""
import json

import pytest
from click.testing import CliRunner

from cost_models.compute import compute_rates, gemm_roofline_s
from hardware_specs.catalog import efficiency_for, load_cluster, load_gpu, load_serving_efficiency
from paraplan import priors
from paraplan.cli import main

GIB = 2**30


@pytest.mark.parametrize("name, peaks_tflops, hbm_gib, hbm_tb_per_s", [
    ("tpu-v5e", {"bf16": 197}, 16, 0.819),
    ("tpu-v5p", {"bf16": 459}, 95, 2.765),
    ("tpu-v6e", {"bf16": 918}, 32, 1.638),
    ("tpu7x", {"bf16": 2307, "fp8": 4614}, 192, 7.38),
])
def test_peaks_and_memory_read_back_as_the_cloud_tpu_pages_state_them(name, peaks_tflops, hbm_gib, hbm_tb_per_s):
    gpu = load_gpu(name)
    assert gpu.vendor == "google"
    # int8 has no dtype here, and v5p / v6e list FP8 at the bf16 rate (see the files): TPU7x alone has fp8
    assert set(gpu.peak_flops_per_s) == set(peaks_tflops)
    for dtype, tflops in peaks_tflops.items():
        assert gpu.peak_flops(dtype) == pytest.approx(tflops * 1e12, rel=1e-12)
    assert gpu.hbm_bytes == hbm_gib * GIB
    assert gpu.hbm_bw_bytes_per_s == pytest.approx(hbm_tb_per_s * 1e12, rel=1e-12)
    assert gpu.sm_count is None          # no SMs: GEMMs take the smooth shape factor


@pytest.mark.parametrize("name, ici_bidir_gb_per_s, pod_allreduce_tb_per_s, pod_chips", [
    ("tpu-v5e", 400, 51.2, 256),
    ("tpu-v5p", 1200, None, None),        # the v5p page gives no pod all-reduce bandwidth
    ("tpu-v6e", 800, 102.4, 256),
    ("tpu7x", 1200, None, None),          # nor does the TPU7x page
])
def test_ici_is_half_the_bidirectional_figure_and_the_pod_all_reduce_bandwidth_per_chip(
        name, ici_bidir_gb_per_s, pod_allreduce_tb_per_s, pod_chips):
    bw = load_gpu(name).scaleup_bw_bytes_per_s
    assert bw == pytest.approx(ici_bidir_gb_per_s / 2 * 1e9, rel=1e-12)
    if pod_allreduce_tb_per_s is not None:
        # the rule tpu-v3 / tpu-v4 were written by: pod all-reduce bandwidth / chips
        assert bw == pytest.approx(pod_allreduce_tb_per_s * 1e12 / pod_chips, rel=1e-12)


@pytest.mark.parametrize("cluster, chips, per_host, dcn_gbit_per_chip", [
    ("tpu-v5e-pod", 256, 8, 25),      # 2 x 100 Gbps NICs per 8-chip host; 6.4 Tbps / 256 chips
    ("tpu-v5p-pod", 6144, 4, 50),     # largest v5p slice 16x16x24 (pod 8960); 50 Gbps DCN per chip
    ("tpu-v6e-pod", 256, 8, 100),
    ("tpu7x-pod", 9216, 4, 100),      # the 9216-chip pod as one ICI domain (no slice limit published)
])
def test_pod_presets_state_the_ici_domain_hosts_and_dcn(cluster, chips, per_host, dcn_gbit_per_chip):
    c = load_cluster(cluster)
    assert c.scaleup.kind == "ici" and c.scaleout.kind == "ethernet"
    assert c.scaleup.bw_bytes_per_s == c.gpu.scaleup_bw_bytes_per_s
    assert c.gpus_per_node == chips == c.gpu.scaleup_domain_size
    assert c.gpus_per_host == per_host
    assert c.scaleout.bw_bytes_per_s == pytest.approx(dcn_gbit_per_chip * 1e9 / 8, rel=1e-12)
    if cluster == "tpu-v5e-pod":
        assert c.scaleout.bw_bytes_per_s * 256 == pytest.approx(6.4e12 / 8, rel=1e-12)


def test_a_large_bf16_gemm_on_v6e_is_two_mnk_over_peak_plateau_and_smooth_shape_factor():
    gpu = load_gpu("tpu-v6e")
    eff = efficiency_for(gpu)
    m = n = k = 8192
    # by hand: 2MNK / (918 TFLOP/s x the prior's bf16 plateau x prod x / (x + half_dim)),
    # the shape factor cost_models.compute.gemm_shape_factor applies on a chip without SMs
    h = eff.gemm_half_dim
    shape = (m / (m + h)) * (n / (n + h)) * (k / (k + h))
    expected = 2 * m * n * k / (918e12 * eff.gemm_fraction("bf16") * shape)
    # compute-bound: even 4 bytes per element of all three matrices moves in well under that
    assert 3 * m * n * 4 / (1.638e12 * eff.hbm_fraction) < expected / 2
    assert gemm_roofline_s(m, n, k, compute_rates(gpu, eff, "bf16")) == pytest.approx(expected, rel=1e-12)
    # v5e shares the prior, so the same GEMM is exactly the peak ratio slower
    v5e = load_gpu("tpu-v5e")
    slow = gemm_roofline_s(m, n, k, compute_rates(v5e, efficiency_for(v5e), "bf16"))
    assert slow / expected == pytest.approx(918 / 197, rel=1e-12)


@pytest.mark.parametrize("cluster", ["tpu-v5e-pod", "tpu-v5p-pod", "tpu-v6e-pod", "tpu7x-pod"])
def test_the_new_tpus_rest_on_tpu_v4s_unfitted_prior_and_say_so(cluster):
    c = load_cluster(cluster)
    # were tpu-v4 ever fitted (on v4 rows), these chips must get a key of their own: this fails then
    assert priors.is_prior(c) and priors.mark(c) == " *"
    assert priors.json_fields(c)["efficiency_fitted"] is False
    assert priors.footnote(c) == priors.footnote(load_cluster("tpu-v4-pod"))
    assert "rests on the tpu-v4 efficiency model, an unfitted prior" in priors.footnote(c)
    assert load_serving_efficiency(c.gpu.generation).prior is True


def _simulate(cluster, *extra):
    r = CliRunner().invoke(main, ["simulate", "-m", "llama3-8b", "-c", cluster, "-n", "256", "--tp", "2", "--cp", "2",
                                  "--micro-batch", "1", "--global-batch", "512", "--zero", "3",
                                  "--sequence-parallel", *extra])
    assert r.exit_code == 0, r.output
    return r.output


def test_simulate_marks_the_step_and_v6e_over_v5e_lies_between_the_hbm_and_peak_ratios():
    text = _simulate("tpu-v6e-pod")
    assert any(line.split()[:1] == ["step_time_s"] and "*" in line for line in text.splitlines())
    assert "* rests on the tpu-v4 efficiency model, an unfitted prior" in text
    v6e, v5e = (json.loads(_simulate(c, "--json")) for c in ("tpu-v6e-pod", "tpu-v5e-pod"))
    assert v6e["efficiency_fitted"] is False and v6e["efficiency_generation"] == "tpu-v4"
    # the same layout: compute scales between the HBM ratio (1638 / 819 = 2) for memory-bound
    # kernels and the bf16 peak ratio (918 / 197 = 4.66) for the GEMMs; the ICI collectives by 2
    compute = v5e["time_breakdown_s"]["compute_s"] / v6e["time_breakdown_s"]["compute_s"]
    assert 1638 / 819 < compute < 918 / 197
    # (the total: the part hidden under the backward pass's compute differs, as the compute does)
    tp = v5e["extras"]["tp_comm_total_s"] / v6e["extras"]["tp_comm_total_s"]
    assert tp == pytest.approx(400 / 200, rel=0.05)
