"""The cost models against kernels and training steps measured on one H200 (tests/data/gpu_h200/,
written by tools/gpu_kernel_checks.py and tools/gpu_step_profile.py on 2026-12-04; the
operand check in tests/data/gpu_h200_operands/). Nothing here was fitted to these files: the
GPU profile is the datasheet's and the efficiency model is Hopper's, fitted on published runs.
Each bound sits at what was measured (docs/accuracy_training.md, "One H200 at hand")."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from paraplan.measure.gpu_record import (category_table, gemm_table, kernel_category, load_record,
                                         step_table)

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def record():
    return load_record(DATA / "gpu_h200")


@pytest.fixture(scope="module")
def cluster():
    return load_cluster("hgx-h200")


def test_the_record_is_an_h200_with_the_profiles_sm_count(record, cluster):
    assert record.env["name"] == "NVIDIA H200"
    assert record.env["sm_count"] == cluster.gpu.sm_count == 132


def test_large_bf16_gemms_match_the_wave_model_at_hoppers_plateau(record, cluster):
    # 47 GEMMs of >= 0.2 TFLOP: measured / predicted median 0.984, p10 0.94, p90 1.02, all
    # within 10%. Smaller ones are host-bound in back-to-back eager calls (a 1024^3 GEMM
    # measures 13 us, its roofline 3.6 us) and are not in this bound.
    g = gemm_table(record, cluster)
    big = g[(g["dtype"] == "bf16") & (g["flops"] >= 2e11)]
    assert len(big) >= 40
    assert 0.95 <= big["ratio"].median() <= 1.02
    assert (big["ratio"].sub(1.0).abs() <= 0.10).mean() >= 0.95


def test_the_shape_factor_orders_large_gemms_as_measured(record, cluster):
    # the tile-and-wave factor explains the spread of achieved rates: correlation 0.66 over the
    # large bf16 GEMMs (short K and partly idle last waves measured slowest)
    g = gemm_table(record, cluster)
    big = g[(g["dtype"] == "bf16") & (g["flops"] >= 2e11)]
    achieved = big["flops"] / big["time_s"]
    assert np.corrcoef(big["shape_factor"], achieved)[0, 1] >= 0.6


def test_fp8_gemms_run_at_hoppers_fitted_fp8_plateau(record, cluster):
    # these 46 large tensor-scaled fp8 GEMMs ran ~5% lower a fraction of their peak than bf16's
    # (median 1.054x the prediction while the fit held Hopper's fp8 plateau at the bf16 one, its
    # bound); since the pipeline sends are priced as the stacks run them the published rows fit
    # it at 0.6484 under bf16's 0.6844, and they measure median 0.998x (p10 0.95, p90 1.06).
    # Session 50's refit (0.6363) and session 51's (0.6243, with the model's ends paying their TP
    # collectives and Hopper's HBM fraction 0.589 -> 0.675) put the plateau under what these
    # kernels reach: median 0.961x; session 55's (TP collectives hidden per linear) put it back
    # at 0.6484: 0.998x again; session 69's (the ring attention's backward passes priced) at 0.6483,
    # 0.998x. The published FP8 rows now ask for the plateau these kernels reach; where a refit put
    # it lower (sessions 50, 51) it stood in for FP8 costs the step model does not price (the MoE
    # FP8 rows on Hopper, README "Where it misses"); recorded here, not hidden.
    g = gemm_table(record, cluster)
    big = g[(g["dtype"] == "fp8") & (g["flops"] >= 2e11)]
    assert len(big) >= 40
    assert 0.95 <= big["ratio"].median() <= 1.03


def test_gemm_timings_repeat_and_do_not_depend_on_operand_scale(record):
    # a fresh machine eight minutes later: the same bf16 grid measures within 1% (median), and with
    # the second operand scaled to std 0.02 (the GPT's initial weights) within 1% again
    again = pd.read_csv(DATA / "gpu_h200_operands" / "kernels.csv")
    first = record.kernels[(record.kernels["kind"] == "gemm") & (record.kernels["dtype"] == "bf16")]
    key = ["m", "n", "k"]
    rnd = again[again["backend"] == "cublas"].set_index(key)["time_s"]
    small = again[again["backend"] == "cublas_weights_std_0.02"].set_index(key)["time_s"]
    big = first.set_index(key)["flops"] >= 2e11
    assert abs((first.set_index(key)["time_s"] / rnd)[big].median() - 1.0) <= 0.02
    assert abs((rnd / small)[big].median() - 1.0) <= 0.02


def test_the_model_counts_every_gemm_launch_of_a_profiled_step(record, cluster):
    # the profiled steps launch exactly the GEMMs the cost models price: 4 linears x 3 passes
    # per layer and micro-batch plus the LM head's 3 (198, 102, 582, 294 and 51 launches),
    # counted by the layer-cost functions under ``kernel_counting_rates``, as the step model
    # counts the kernels the host issues
    table = category_table(record, cluster)
    gemm = table[table["category"] == "gemm"]
    assert len(gemm) == 5
    assert (gemm["predicted_kernels"] == gemm["measured_launches"]).all()


def test_a_power_capped_gemm_bound_step_gets_its_gemm_time_right(record, cluster):
    # l4-h4096: multi-ms GEMMs hold the 700 W cap as the grid does; its GEMMs' device time,
    # 70.5 ms, is predicted at 70.9 ms without the per-kernel overhead (the plain roofline sum).
    # The smaller models' short GEMMs between memory-bound kernels take 14-19% less time than the
    # roofline (they run at a higher clock than the power-capped grid, see the clock test below)
    table = category_table(record, cluster).set_index(["run", "category"])
    row = table.loc[("l4-h4096-s2048", "gemm")]
    overhead = efficiency_for_cluster(cluster).kernel_overhead_s
    roofline = row["predicted_s"] - row["predicted_kernels"] * overhead
    assert abs(roofline / row["measured_s"] - 1.0) <= 0.03


def test_measured_single_gpu_steps_are_predicted_within_the_recorded_bound(record, cluster):
    # six eager PyTorch steps of the small GPT on one H200: predicted 14-28% slow, mean 22.2%
    # (20.4% at Hopper's factors before the session-45 refit lowered its HBM fraction)
    table = step_table(record, cluster)
    assert len(table) == 6
    assert (table["rel_error"] > 0).all()
    assert table["rel_error"].max() <= 0.30
    assert table["rel_error"].abs().mean() <= 0.225


def test_hoppers_achieved_hbm_fraction_is_below_a_plain_copy(record, cluster):
    # a 1 GiB bf16 copy moves 4.24 TB/s, 0.884 of the datasheet's 4.8; the fitted fraction of
    # real memory-bound kernels (0.64) must not exceed it (layer norms measured 0.37-0.58)
    mem = record.kernels[(record.kernels["kind"] == "memory") & (record.kernels["backend"] == "copy")]
    copy_fraction = (mem["hbm_bytes"] / mem["time_s"]).max() / cluster.gpu.hbm_bw_bytes_per_s
    assert 0.85 <= copy_fraction <= 0.92
    assert efficiency_for_cluster(cluster).hbm_fraction <= copy_fraction


@pytest.mark.parametrize("name, category", [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64", "attention"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>", "optimizer"),
    ("void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float, false>", "memory"),
    ("Optimizer.step#Adam.step", "annotation"),
])
def test_kernel_categories(name, category):
    assert kernel_category(name) == category


def test_validate_measured_on_one_h200_repredicts_its_rows_and_stays_in_bound():
    # `paraplan validate measured hgx-h200` on the H200 (tests/data/gpu_h200_validate/, written
    # by tools/gpu_smoke_measured.sh): the three single-rank default layouts on
    # DEFAULT_MODEL_GPU, the seven 2-rank ones skipped. The device run recorded its predictions at
    # the Hopper factors of its day (+17.0%, +46.7%, +25.4%); the committed code re-predicts the
    # measured steps at +19.5%, +48.8% (four micro-batches of 2,048 tokens: the most kernels per
    # FLOP, each priced Hopper's fitted 25 us) and +27.8%
    from paraplan.measure.compare import CONFIG_COLUMNS, DEFAULT_MODEL_GPU, predict
    rows = pd.read_csv(DATA / "gpu_h200_validate" / "validate_measured_catalog.csv")
    assert list(rows["name"]) == ["single", "single-mb1x4", "single-recompute"]
    cluster = load_cluster("hgx-h200")
    errors = []
    for _, row in rows.iterrows():
        run = {**DEFAULT_MODEL_GPU, **{k: row[k] for k in CONFIG_COLUMNS}}
        errors.append(predict(run, cluster, "bf16").step_time_s / row["measured_step_s"] - 1.0)
    # the recorded errors are the recorded predictions' against the recorded measurements
    assert rows["rel_error"].to_numpy() == pytest.approx(rows["predicted_step_s"] / rows["measured_step_s"] - 1)
    errors = np.array(errors)
    assert (errors > 0).all() and errors.max() <= 0.50
    assert np.abs(errors).mean() <= 0.33


def test_validate_measured_against_the_h200s_own_calibration():
    # `paraplan calibrate --nprocs 1` then `validate measured` against that profile, on the H200
    # (tools/gpu_smoke_measured.sh). The committed code re-predicts the recorded rows from the
    # recorded profile: -0.9%, -6.4%, +5.1% (mean 4.1%). Two earlier calibrations on the same
    # machine, refitted from their timings (repeats/), give 8.0% and 6.9%, the micro-batch-1
    # layout -15..-19% there: its short kernels leave the GPU waiting on the host's ~7 us launches,
    # which no profile prices
    from paraplan.measure.compare import CONFIG_COLUMNS, DEFAULT_MODEL_GPU, predict
    folder = DATA / "gpu_h200_validate"
    rows = pd.read_csv(folder / "validate_measured_calibrated.csv")
    cluster = load_cluster(str(folder / "h200-calibrated.yaml"))
    for _, row in rows.iterrows():
        run = {**DEFAULT_MODEL_GPU, **{k: row[k] for k in CONFIG_COLUMNS}}
        assert predict(run, cluster, "bf16").step_time_s == pytest.approx(row["predicted_step_s"], rel=1e-9)
    by_name = rows.set_index("name")["rel_error"]
    assert abs(by_name["single"]) <= 0.05 and abs(by_name["single-recompute"]) <= 0.08
    assert abs(by_name["single-mb1x4"]) <= 0.25
    assert rows["rel_error"].abs().mean() <= 0.08


def test_the_h200s_own_calibration_loads_as_a_cluster():
    # `paraplan calibrate --nprocs 1` on the H200: its bf16 GEMM plateau (735 TFLOP/s, 0.74 of
    # the datasheet; its largest GEMMs measured 712-725) and copy bandwidth (4.39 TB/s, 0.91)
    # are what the kernel grid saw, and the per-kernel time is the GPU's own (1.0 us, replayed
    # from a CUDA graph), not the host's launch (recorded beside it)
    folder = DATA / "gpu_h200_validate"
    cluster = load_cluster(str(folder / "h200-calibrated.yaml"))
    assert cluster.gpus_per_node == 1
    assert 0.70 <= cluster.gpu.peak_flops("bf16") / 989.4e12 <= 0.78
    assert 0.85 <= cluster.gpu.hbm_bw_bytes_per_s / 4.8e12 <= 0.95
    summary = json.loads((folder / "h200-calibrated.calibration.json").read_text())["summary"]
    assert 0.3e-6 <= cluster.efficiency.kernel_overhead_s <= 3e-6 <= summary["host_launch_s"]


@pytest.mark.parametrize("profile", ["h200-calibrated.yaml", "repeats/h200-calibrated-repeat1.yaml",
                                     "repeats/h200-calibrated-repeat2.yaml"])
def test_the_recorded_profiles_are_what_the_committed_fitter_returns_on_their_timings(profile):
    # each profile's GEMM plateau and half-dimension, refitted from the raw timings recorded
    # beside it; the plateau lies within 5% of the rate the four largest GEMMs measured, and the
    # three calibrations within 3% of each other (the uncorrected fit read 590 and 759 TFLOP/s
    # from nearly the same timings)
    from paraplan.measure.fitting import fit_gemm
    folder = DATA / "gpu_h200_validate"
    path = folder / profile
    record = json.loads(path.with_name(path.stem + ".calibration.json").read_text())
    rank = record["ranks"][0]
    shapes = [tuple(s) for s in rank["gemm_shapes"]]
    fit = fit_gemm(shapes, rank["gemm_s"]["bf16"], rank["kernel_overhead_s"])
    cluster = load_cluster(str(path))
    assert fit.peak_flops_per_s == pytest.approx(cluster.gpu.peak_flops("bf16"), rel=1e-6)
    assert round(fit.half_dim, 2) == cluster.efficiency.gemm_half_dim
    flops = np.array([2.0 * m * n * k for m, n, k in shapes])
    rate = flops / np.array(rank["gemm_s"]["bf16"])
    assert abs(fit.peak_flops_per_s / np.median(rate[np.argsort(flops)[-4:]]) - 1) <= 0.05
    peaks = [load_cluster(str(folder / p)).gpu.peak_flops("bf16") for p in
             ("h200-calibrated.yaml", "repeats/h200-calibrated-repeat1.yaml", "repeats/h200-calibrated-repeat2.yaml")]
    assert max(peaks) / min(peaks) <= 1.03


def test_the_gemm_fit_recovers_a_known_plateau_and_half_dimension():
    # timings made from the model itself (plateau 700 TFLOP/s, half-dimension 64, 1 us a call)
    # on the CUDA grid: the fit returns them (the closed form divided by the shape factor where it
    # multiplied before 2026-12-04, which returned 575 TFLOP/s and 3 for these)
    from paraplan.measure.benchmarks import CUDA_GEMM_SHAPES
    from paraplan.measure.fitting import fit_gemm
    mnk = np.array(CUDA_GEMM_SHAPES, dtype=float)
    sat = np.prod(mnk / (mnk + 64.0), axis=1)
    times = 1e-6 + 2.0 * mnk.prod(axis=1) / (700e12 * sat)
    fit = fit_gemm(CUDA_GEMM_SHAPES, list(times), 1e-6)
    assert fit.peak_flops_per_s == pytest.approx(700e12, rel=0.01)
    assert fit.half_dim == pytest.approx(64.0, rel=0.05)
    assert fit.rms_rel_error < 0.01


def test_decode_gemms_match_the_serving_models_weight_read_roofline():
    # tools/gpu_decode_checks.py: the linear layers of Llama-3.1-8B (tp 1) and Llama-3.1-70B at
    # tp 8 at 1-512 tokens, replayed from CUDA graphs with cold weights. Serving's Hopper model
    # (fitted on engine rows, serving_runs.csv) prices each as weight bytes / (0.886 x 4.8 TB/s)
    # or FLOPs at its plateau, plus 6.1 us per kernel (the 2026-12-04 session-35 refit; 0.894 and
    # 6.0 us before): measured / predicted median 0.934 (bf16, 80 GEMMs; 0.940 before) and 0.935
    # (fp8, 48; 0.930), mean |log| 0.130 and 0.154 (0.121 / 0.138); per token count at <= 64
    # tokens (weight-read bound) 0.88-0.93 (bf16) and 0.83-0.88 (fp8); the largest weights
    # (235 MB) read at 0.88-0.89 of the datasheet's bandwidth
    from paraplan.measure.gpu_record import decode_table
    cluster = load_cluster("hgx-h200")
    d = decode_table(load_record(DATA / "gpu_h200"), cluster)
    assert (d["weight_copies"] * d["weight_bytes"] >= 4 * 60e6).all()      # cold: 4x the L2
    for dtype, median_bounds in (("bf16", (0.90, 0.98)), ("fp8", (0.88, 0.98))):
        ratio = d.loc[d["dtype"] == dtype, "ratio"]
        assert len(ratio) == {"bf16": 80, "fp8": 48}[dtype]
        assert median_bounds[0] <= ratio.median() <= median_bounds[1]
        assert np.abs(np.log(ratio)).mean() <= 0.16
    biggest = d[(d["dtype"] == "bf16") & (d["weight_bytes"] > 2e8) & (d["m"] <= 8)]
    achieved = biggest["weight_bytes"] / biggest["time_s"] / cluster.gpu.hbm_bw_bytes_per_s
    assert achieved.between(0.85, 0.92).all()


# ---- `paraplan validate gpu-record` -------------------------------------------------------------

def _cli(*args):
    from click.testing import CliRunner

    from paraplan.cli import main
    return CliRunner().invoke(main, ["validate", "gpu-record", *map(str, args)])


def _one_error_line(result, *needles):
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_cli_json_holds_every_compared_row_as_the_module_computes_it(record, cluster):
    import json
    result = _cli(DATA / "gpu_h200", "--cluster", "hgx-h200", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["gpu"] == "NVIDIA H200" and out["cluster"] == cluster.name
    assert [len(out[k]) for k in ("gemms", "decode_gemms", "steps", "categories")] == [211, 128, 6, 20]
    steps = step_table(record, cluster)
    assert [r["rel_error"] for r in out["steps"]] == pytest.approx(list(steps["rel_error"]), rel=1e-12)
    assert all(r["predicted_s"] is None for r in out["categories"] if r["category"] == "optimizer")


def test_cli_table_names_each_part_and_its_numbers():
    result = _cli(DATA / "gpu_h200", "--cluster", "hgx-h200")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "bf16   large     47         0.984" in text
    # 22.2% before session 51's refit (Hopper HBM 0.589 -> 0.675), 19.3% until session 55's (HBM 0.675 -> 0.6406),
    # 20.4% until the refit f7c1ee2 (HBM 0.6406 -> 0.5547, per kernel 25.2 -> 20 us), 20.0% until session 69's
    # (Hopper FP8 plateau 0.6363 -> 0.6483, HBM 0.5547 -> 0.5546)
    assert "mean |error| 20.1% over 6 runs" in text
    # 102 GEMM kernels each 5.2 us cheaper after the refit (per-kernel time 25.2 -> 20 us, the bf16
    # fraction unchanged): 0.07353 - 102 x 5.2e-6 = 0.07300 s; 0.07301 s since session 68's refit
    # (the bf16 plateau 0.6844 -> 0.6843)
    assert "l4-h4096-s2048   gemm          0.07054       102      0.07301             102" in text


def test_cli_without_a_cluster_is_one_error_line():
    _one_error_line(_cli(DATA / "gpu_h200"), "cluster", "--cluster hgx-h200")


def test_cli_on_a_folder_without_a_record_is_one_error_line(tmp_path):
    _one_error_line(_cli(tmp_path, "--cluster", "hgx-h200"), "folder", "env.json")


def _edit_first_run(folder, **changes):
    import json
    runs = json.loads((folder / "measured_runs.json").read_text())
    runs[0].update(changes)
    (folder / "measured_runs.json").write_text(json.dumps(runs))


def _edit_kernels(folder, **columns):
    frame = pd.read_csv(folder / "kernels.csv")
    for column, value in columns.items():
        frame[column] = value
    frame.to_csv(folder / "kernels.csv", index=False)


def _edit_env(folder, **changes):
    import json
    env = json.loads((folder / "env.json").read_text())
    env.update(changes)
    (folder / "env.json").write_text(json.dumps(env))


def test_cli_refuses_a_cluster_of_another_gpu():
    _one_error_line(_cli(DATA / "gpu_h200", "--cluster", "mi300x-node"), "cluster", "132 SMs", "304 SMs")


@pytest.mark.parametrize("damage, field", [
    (lambda d: (d / "kernels.csv").write_text("kind,dtype\ngemm,bf16\n"), "kernels.csv"),
    (lambda d: (d / "kernels.csv").write_bytes(b"\x00\xff\xfe garbage"), "kernels.csv"),
    (lambda d: (d / "env.json").write_text("{not json"), "folder"),
    (lambda d: (d / "measured_runs.json").write_text('[{"name": "x"}]'), "measured_runs.json[0]"),
    (lambda d: (d / "step_summary.csv").write_text(
        "run,eager_step_s,kernels,kernel_sum_s\nx,nan,3,0.1\n"), "step_summary.csv.eager_step_s"),
    (lambda d: (d / "decode_gemms.csv").write_text(
        "dtype,m,n,k,time_s,weight_bytes\nbf16,1,8,8,-1,128\n"), "decode_gemms.csv.time_s"),
    (lambda d: (d / "decode_gemms.csv").write_text(
        "dtype,m,n,k,time_s,weight_bytes\nbf16,abc,8,8,1e-5,128\n"), "decode_gemms.csv.m"),
    (lambda d: (d / "kernels.csv").write_text(
        "kind,dtype,m,n,k,time_s,flops,hbm_bytes\ngemm,bf16,8,inf,8,1e-5,1024,128\n"), "kernels.csv.n"),
    (lambda d: (d / "kernels.csv").write_text(
        "kind,dtype,m,n,k,time_s,flops,hbm_bytes\ngemm,bf16,8,1e300,8,1e-5,1024,128\n"), "kernels.csv.n"),
    (lambda d: (d / "kernels.csv").write_text(
        "kind,dtype,m,n,k,time_s,flops,hbm_bytes\ngemm,int4,8,8,8,1e-5,1024,128\n"), "kernels.csv: dtype"),
    # the recorded rates the GEMM table echoes: a negative or missing one was printed as measured
    (lambda d: _edit_kernels(d, tflops=-5.0), "kernels.csv.tflops"),
    (lambda d: _edit_kernels(d, gb_per_s=float("nan")), "kernels.csv.gb_per_s"),
    (lambda d: _edit_kernels(d, gb_per_s=0.0), "kernels.csv.gb_per_s"),
    (lambda d: (d / "measured_runs.json").write_text("null"), "measured_runs.json"),
    (lambda d: (d / "measured_runs.json").write_text('{"name": "x"}'), "measured_runs.json"),
    (lambda d: (d / "measured_runs.json").write_text("[" * 100_000), "folder"),
    (lambda d: _edit_first_run(d, num_layers="eight"), "measured_runs.json[0].num_layers"),
    (lambda d: _edit_first_run(d, num_layers=8.5), "measured_runs.json[0].num_layers"),
    (lambda d: _edit_first_run(d, measured_step_s=True), "measured_runs.json[0].measured_step_s"),
    (lambda d: _edit_first_run(d, phase_s=None), "measured_runs.json[0].measured_step_s / phase_s"),
    (lambda d: _edit_first_run(d, name=["a"]), "measured_runs.json[0].name"),
    (lambda d: _edit_first_run(d, recompute="bogus"), "measured_runs.json[0].recompute"),
    (lambda d: (d / "step_kernels.csv").write_text("run,kernel,launches,device_s\nx,,3,0.1\n"),
     "step_kernels.csv.kernel"),
    (lambda d: ((d / "kernels.csv").unlink(), (d / "kernels.csv").mkdir()), "kernels.csv"),
    # a GPU name that is not text was printed as the name, and the chip check against --cluster skipped
    (lambda d: _edit_env(d, name=["NVIDIA H100"]), "env.json.name"),
    (lambda d: _edit_env(d, name={}), "env.json.name"),
    (lambda d: _edit_env(d, name=float("nan")), "env.json.name"),
    (lambda d: _edit_env(d, name="  "), "env.json.name"),
    (lambda d: _edit_env(d, name=None), "env.json.name"),
])
def test_cli_on_a_damaged_record_is_one_error_line(tmp_path, damage, field):
    import shutil
    folder = tmp_path / "record"
    shutil.copytree(DATA / "gpu_h200", folder)
    damage(folder)
    _one_error_line(_cli(folder, "--cluster", "hgx-h200"), field)


def test_training_steps_hold_a_higher_clock_than_a_gemm_loop_at_the_power_cap():
    # tests/data/gpu_h200_clocks/ (tools/gpu_step_profile.py again, with nvidia-smi read every
    # 20 ms): back-to-back 8,192^3 GEMMs hold 1,515 MHz at 679 W (the 700 W cap, 675 TFLOP/s);
    # the training steps, whose GEMMs alternate with memory-bound kernels, run at 1,695-1,980 MHz
    # and 250-562 W, the small models at the 1,980 MHz maximum: why their short GEMMs beat the
    # power-capped grid's rate at the same shapes
    gemm = pd.read_csv(DATA / "gpu_h200_clocks" / "gemm_clock.csv").iloc[0]
    steps = pd.read_csv(DATA / "gpu_h200_clocks" / "step_summary.csv").set_index("run")
    assert gemm["power_w_median"] >= 0.95 * 700 and gemm["sm_clock_mhz_median"] <= 1600
    assert (steps["sm_clock_mhz_median"] > gemm["sm_clock_mhz_median"] * 1.1).all()
    assert (steps["power_w_median"] < gemm["power_w_median"]).all()
    assert (steps.loc[["l24-h1024-s2048", "l12-h768-s1024"], "sm_clock_mhz_median"] == 1980).all()


def test_cli_refuses_a_cluster_of_another_chip_with_the_same_sm_count():
    # an H100 SXM and an H200 both have 132 SMs: the chip's model number tells them apart
    _one_error_line(_cli(DATA / "gpu_h200", "--cluster", "dgx-h100"), "cluster", "NVIDIA H200", "h100-sxm-80gb")


def test_cli_says_a_missing_folder_is_missing():
    _one_error_line(_cli(DATA / "no_such_record", "--cluster", "hgx-h200"), "folder", "no such folder")


@pytest.mark.parametrize("name, cluster, sm_count", [
    ("NVIDIA GH200 480GB", "alps-gh200", 132),          # the superchip's GPU is the catalog's H100 96 GB
    ("NVIDIA H100 80GB HBM3", "dgx-h100", 132),
    ("NVIDIA A100-SXM4-80GB", "dgx-a100-80gb", 108),
])
def test_cli_accepts_a_record_of_the_clusters_own_chip(tmp_path, name, cluster, sm_count):
    import json
    import shutil
    from hardware_specs.catalog import load_cluster
    if load_cluster(cluster).gpu.sm_count not in (None, 0, sm_count):
        pytest.skip(f"{cluster}'s catalog SM count is not {sm_count}")
    record = tmp_path / "record"
    shutil.copytree(DATA / "gpu_h200", record)
    env = json.loads((record / "env.json").read_text())
    env.update(name=name, sm_count=sm_count)
    (record / "env.json").write_text(json.dumps(env))
    r = _cli(record, "--cluster", cluster)
    assert "error: cluster" not in r.output, r.output
    if "h100" in load_cluster(cluster).gpu.name:           # a Hopper record reads whole on a Hopper system
        assert r.exit_code == 0, r.output
