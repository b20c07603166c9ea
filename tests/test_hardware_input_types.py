"""Types and bounds of hand-written hardware files: a boolean or a quoted number where a number
goes, a fraction that makes a rate below any real GPU's, fitted_factors naming no fitted factor.
Each was accepted and changed the predictions (or hid the unfitted-prior marker)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cli_results import one_line_error, run

REPO = Path(__file__).resolve().parents[1]


def _cluster_with_efficiency(tmp_path: Path, **changes) -> Path:
    """dgx-h100 with hopper's efficiency written inline, ``changes`` applied to it."""
    cluster = yaml.safe_load((REPO / "hardware_specs/clusters/dgx-h100.yaml").read_text())
    eff = yaml.safe_load((REPO / "hardware_specs/efficiency/hopper.yaml").read_text())
    for key, value in changes.items():
        if value is None:
            eff.pop(key, None)
        else:
            eff[key] = value
    cluster["efficiency"] = eff
    path = tmp_path / "cl.yaml"
    path.write_text(yaml.safe_dump(cluster))
    return path


def _simulate(cluster, *extra):
    return run("simulate", "-m", "gpt-22b", "-c", cluster, "-n", "16", "--tp", "8", "--global-batch", "16", *extra)


@pytest.mark.parametrize("key, value, quoted", [("kernel_overhead_s", True, "true"), ("cpu_issue_s", True, "true"),
                                                ("hbm_fraction", "0.5", "'0.5'"),
                                                ("kernel_overhead_s", "2.52e-05", "'2.52e-05'")])
def test_an_efficiency_factor_is_a_number_not_a_boolean_or_text(tmp_path, key, value, quoted):
    # kernel_overhead_s: true was float(True) = 1 s per kernel: a 13,553 s step
    path = _cluster_with_efficiency(tmp_path, **{key: value})
    one_line_error(_simulate(path), f"efficiency.{key}", f"expected a number, got {quoted} (")


def _gpu_file(tmp_path: Path, **changes) -> Path:
    gpu = yaml.safe_load((REPO / "hardware_specs/gpus/h100-sxm-80gb.yaml").read_text())
    for key, value in changes.items():
        if isinstance(value, dict):
            gpu[key] = {**gpu[key], **value}
        else:
            gpu[key] = value
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(gpu))
    return path


@pytest.mark.parametrize("value, quoted", [(True, "true"), ("989", "'989'")])
def test_a_gpu_peak_is_a_number_not_a_boolean_or_text(tmp_path, value, quoted):
    # bf16: true was float(True): a 1 TFLOP/s H100; the error quotes it as the file spells it
    from hardware_specs.catalog import load_gpu
    from hardware_specs.errors import InputError
    with pytest.raises(InputError, match=f"peak_tflops.bf16: expected a number, got {quoted} \\("):
        load_gpu(str(_gpu_file(tmp_path, peak_tflops={"bf16": value})))


@pytest.mark.parametrize("key", ["sustained_tensor_fraction", "sync_mma_peak_fraction"])
def test_a_fraction_of_the_peak_makes_no_rate_below_a_peak_stated_directly(tmp_path, key):
    # 1e-30 gave 4.6e29 s steps, while a GPU stating the same rate (bf16: 1e-15) was refused
    from hardware_specs.catalog import load_gpu
    from hardware_specs.errors import InputError
    with pytest.raises(InputError, match=f"{key}: 1e-30 times the .* below the plausible minimum"):
        load_gpu(str(_gpu_file(tmp_path, **{key: 1e-30})))
    assert getattr(load_gpu(str(_gpu_file(tmp_path, **{key: 0.5}))), key) == 0.5


def test_fitted_factors_name_only_factors_a_fit_sets_and_say_what_they_were_fitted_on(tmp_path):
    # fitted_factors: [not_a_factor] on an inlined prior removed the unfitted-prior marker (* and
    # efficiency_fitted true in JSON)
    one_line_error(_simulate(_cluster_with_efficiency(tmp_path, fitted_factors=["not_a_factor"])),
                   "efficiency.fitted_factors", "'not_a_factor' is not a fitted factor", "gemm16")
    one_line_error(_simulate(_cluster_with_efficiency(tmp_path, fitted_factors=["gemm16"], fitted_on=None)),
                   "efficiency.fitted_on", "missing, while fitted_factors lists factors")


def test_every_name_the_fitter_writes_is_a_fitted_factor():
    from hardware_specs.efficiency_model import fittable_factor_names
    from paraplan.validation.fit_search import FIT_BOUNDS
    assert set(FIT_BOUNDS) <= set(fittable_factor_names())


def test_the_prior_footnote_names_the_efficiency_the_cluster_file_states(tmp_path):
    # it named hardware_specs/efficiency/hopper.yaml while the cluster's inline factors were used
    path = _cluster_with_efficiency(tmp_path, fitted_factors=None, fitted_on="my own guesses")
    result = _simulate(path)
    assert result.exit_code == 0, result.output
    footnote = [ln for ln in result.output.splitlines() if "unfitted prior" in ln]
    assert footnote and f"(inline in {path})" in footnote[-1], result.output
    assert "hardware_specs/efficiency/hopper.yaml" not in result.output
    built_in = run("simulate", "-m", "gpt-22b", "-c", "dgx2-v100", "-n", "16", "--tp", "8", "--global-batch", "16")
    assert "read it as a sketch (hardware_specs/efficiency/volta.yaml)" in built_in.output, built_in.output
