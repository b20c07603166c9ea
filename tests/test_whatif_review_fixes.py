"""Fixes from a review of the Python what-if API (``paraplan.api``, ``paraplan.plots``): rows
that said a configuration fits where ``paraplan simulate`` said NO (host memory), GB200 NVL72
jobs in Slurm segments checked against the whole rack's host memory, scaling plots that joined
several models' rows into one line, and GPU what-ifs (HBM capacity, bandwidth, peak FLOPs)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hardware_specs.errors import InputError
from paraplan import api
from paraplan.cli import main

GIB = 2**30

# Llama 3.1 405B on 512 H100 at tp 4 with every layer's activations offloaded to the host
OFFLOAD_405B = dict(gpus=512, tp=4, pp=1, micro_batch=8, global_batch_tokens=16 * 2**20, zero_stage=3,
                    sequence_parallel=True, offload_activation_layers=126)


def test_api_rows_say_no_where_the_host_memory_offload_needs_is_more_than_the_node_holds():
    """The row said ``fits`` True where ``paraplan simulate`` says NO: its ``fits`` never read the
    host check. Hand bound: Megatron keeps, per layer and micro-batch, at least the MLP's input and
    its three bf16 intermediates (SwiGLU gate, up, fc2's input: Korthikanti et al. 2022 section
    4.1's counting), 2 x s x b x (h + 3 ffn) / tp bytes with sequence parallelism: 8192 x 8 x
    (16384 + 3 x 53248) x 2 / 4 = 5.4 GiB; 126 layers: >= 677 GiB per GPU, >= 5,414 GiB for a DGX
    node's 8 GPUs, more than its 2 TB (2,048 GiB, DGX H100 datasheet)."""
    row = api.simulate("llama3.1-405b", "dgx-h100", **OFFLOAD_405B).iloc[0]
    bound_gib = 126 * 2 * 8192 * 8 * (16384 + 3 * 53248) / 4 / GIB
    assert bound_gib == pytest.approx(677.25, abs=0.01)
    assert row.host_memory_gib >= bound_gib and 8 * row.host_memory_gib > 2048
    assert row.memory_gib < 0.95 * 80          # HBM alone fits: only the host says no
    assert bool(row.fits) is False
    assert list(api.ROW_COLUMNS) == list(api.simulate("llama3.1-405b", "dgx-h100", **OFFLOAD_405B).columns)
    # the CLI's verdict and host memory per GPU
    out = CliRunner().invoke(main, ["simulate", "-m", "llama3.1-405b", "-c", "dgx-h100", "-n", "512", "--tp", "4",
                                    "--pp", "1", "--micro-batch", "8", "--global-batch-tokens", str(16 * 2**20),
                                    "--zero", "3", "--sequence-parallel", "--offload-activation-layers", "126",
                                    "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["fits"] is False
    assert data["extras"]["host_memory_bytes"] / GIB == pytest.approx(row.host_memory_gib, rel=1e-12)
    # a sweep row (the same function) says so too
    swept = api.sweep(dict(model="llama3.1-405b", cluster="dgx-h100", **OFFLOAD_405B),
                      "micro_batch", [8])
    assert bool(swept.fits.iloc[0]) is False and swept.host_memory_gib.iloc[0] == row.host_memory_gib


def test_a_multi_rack_gb200_job_in_segments_has_its_trays_share_of_the_racks_host_memory():
    """256 GPUs on GB200 NVL72 sit 64 in each of four racks (16 of 18 trays, Slurm segments:
    ``hardware_specs.placement``); those trays' Grace CPUs hold 16,093 GiB x 64 / 72 = 14,304.9
    GiB and 18.4 TB/s x 64 / 72 = 16.36 TB/s, not the whole rack's. Llama 3 70B at tp 1, mb 2,
    ZeRO-3 with 47 layers offloaded needs 14,393.75 GiB on a rack's 64 GPUs: more than its trays
    hold, so it does not fit (it fitted against 16,093 GiB and was the planner's winner)."""
    from hardware_specs.catalog import load_cluster
    from hardware_specs.placement import placed_cluster
    rack = load_cluster("gb200-nvl72")
    placed = placed_cluster(rack, 256)
    assert placed.gpus_per_node == 64
    assert placed.host.memory_bytes / GIB == pytest.approx(16093 * 64 / 72) == pytest.approx(14304.89, abs=0.01)
    assert placed.host.memory_bw_bytes_per_s == pytest.approx(18400e9 * 64 / 72)
    assert placed.host.link_bw_bytes_per_s == rack.host.link_bw_bytes_per_s      # each GPU's own link
    assert placed_cluster(rack, 72) is rack and placed_cluster(rack, 8) is rack  # inside one rack: node_host_share
    fields = dict(gpus=256, tp=1, pp=1, micro_batch=2, global_batch_tokens=4 * 2**20, zero_stage=3,
                  offload_activation_layers=47)
    report = api.simulate_report("llama3-70b", "gb200-nvl72", **fields)[0]
    node_gib = report.extras["host_memory_node_bytes"] / GIB
    assert node_gib == pytest.approx(64 * report.extras["host_memory_bytes"] / GIB)
    assert 14304.89 < node_gib < 16093
    assert not report.extras["host_fits"]
    assert bool(api.simulate("llama3-70b", "gb200-nvl72", **fields).fits.iloc[0]) is False
    out = CliRunner().invoke(main, ["simulate", "-m", "llama3-70b", "-c", "gb200-nvl72", "-n", "256", "--tp", "1",
                                    "--pp", "1", "--micro-batch", "2", "--global-batch-tokens", str(4 * 2**20),
                                    "--zero", "3", "--offload-activation-layers", "47"])
    assert out.exit_code == 0, out.output
    assert "of 14,305 GiB" in out.output and "fits: NO (the host memory" in out.output
    # the planner's winner now fits its trays' host memory, and simulate agrees
    best = api.best_plan("llama3-70b", "gb200-nvl72", 256, 4 * 2**20).iloc[0]
    assert bool(best.fits) is True and 64 * best.host_memory_gib <= 16093 * 64 / 72


def _two_model_rows():
    """Rows of two models at 64, 128, 256 GPUs on one cluster, as a notebook concatenates two
    sweeps (tokens/s: model a scales linearly from 1,000, model b from 300 at 90% a doubling)."""
    import pandas as pd
    rows = []
    for model, first, keep in (("a", 1000.0, 1.0), ("b", 300.0, 0.9)):
        for k, n in enumerate((64, 128, 256)):
            rows.append(dict(model=model, cluster="dgx-h100", gpu="h100-sxm-80gb", n_gpus=n,
                             tokens_per_s=first * 2**k * keep**k, mfu_bf16_pct=40.0 * keep**k, fits=True))
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0)       # in no order


def test_scaling_draws_one_line_per_model_where_the_rows_hold_several():
    """Six rows of two models were one zig-zag line through both; now one line per model (the
    column that varies), each its own model's points in GPU order, and ``hue=`` names it."""
    from paraplan import plots
    rows = _two_model_rows()
    for fig in (plots.scaling(rows), plots.scaling(rows, hue="model")):
        ax = fig.axes[0]
        lines = {ln.get_label(): ln for ln in ax.get_lines() if ln.get_label() in ("a", "b")}
        assert set(lines) == {"a", "b"}
        assert list(lines["a"].get_xdata()) == [64, 128, 256]
        assert list(lines["a"].get_ydata()) == [1000.0, 2000.0, 4000.0]
        assert list(lines["b"].get_ydata()) == pytest.approx([300.0, 540.0, 972.0])
        # each series' share of its own linear scaling: b at 256 GPUs is 0.9^2 = 81%
        texts = [t.get_text() for t in ax.texts]
        assert texts.count("100%") == 4 and "81%" in texts and "90%" in texts
    # a sweep over clusters varies cluster and gpu together: the cluster tells the lines apart
    import pandas as pd
    both = pd.concat([rows[rows.model == "a"], rows[rows.model == "a"].assign(cluster="hgx-h200", gpu="h200")])
    labels = {ln.get_label() for ln in plots.scaling(both).axes[0].get_lines()}
    assert {"dgx-h100", "hgx-h200"} <= labels
    # two models on two clusters: no one column tells four series apart: name hue=
    four = pd.concat([rows, rows.assign(cluster="hgx-h200", gpu="h200")])
    with pytest.raises(InputError) as err:
        plots.scaling(four)
    assert err.value.field == "hue" and "model and cluster" in str(err.value) and "\n" not in str(err.value)


def test_scaling_against_a_column_of_names_says_x_must_be_numeric_and_points_to_breakdown():
    """x='cluster' said 'none of the 6 rows has a finite cluster'."""
    from paraplan import plots
    with pytest.raises(InputError) as err:
        plots.scaling(_two_model_rows(), x="model")
    message = str(err.value)
    assert err.value.field == "x" and "not numeric" in message and "plots.breakdown" in message
    assert "finite" not in message and "\n" not in message


BASE_70B = dict(model="llama3-70b", cluster="dgx-h100", gpus=64, tp=8, pp=4, micro_batch=1, global_batch=128,
                zero_stage=1, recompute="selective", sequence_parallel=True)


def test_more_hbm_never_slows_the_best_plan_and_a_plan_fits_below_95_percent_of_it():
    """``hbm_gib`` was 'unknown field'. A what-if of the GPU's memory: the search over 141 GiB
    holds every plan the one over 80 GiB holds, so its best is no slower; a configuration's peak
    does not depend on the HBM it runs in, and it fits while it is at most 95% of it (the 5%
    headroom, ``simulator.headroom``)."""
    swept = api.sweep(dict(model="llama3-70b", cluster="dgx-h100", gpus=256, global_batch_tokens=4 * 2**20),
                      "hbm_gib", [80, 141], best=True)
    assert list(swept.hbm_gib) == [80.0, 141.0] and swept.fits.all()
    assert swept.step_time_s.iloc[1] <= swept.step_time_s.iloc[0]
    rows = api.sweep(BASE_70B, "hbm_gib", [80, 141])
    peak = float(rows.memory_gib.iloc[0])
    assert rows.memory_gib.iloc[1] == peak and rows.step_time_s.iloc[1] == rows.step_time_s.iloc[0]
    edge = api.sweep(BASE_70B, "hbm_gib", [peak / 0.95 * (1 - 1e-6), peak / 0.95 * (1 + 1e-6)])
    assert list(edge.fits) == [False, True]


def test_hbm_bandwidth_and_peak_flops_what_ifs_scale_the_parts_they_bound():
    """``hbm_tb_per_s`` (TB/s, as ``serving_api`` names it): the optimizer step streams Adam's
    states through HBM, so twice the bandwidth halves it exactly (bytes / bandwidth). The
    ``peak_flops_scale`` factor: compute at twice the peak takes at least half as long (the
    memory-bound kernels do not speed up) and less than before, and MFU is of the doubled peak:
    MFU_2 = MFU_1 x step_1 / (2 step_2)."""
    bw = api.sweep(BASE_70B, "hbm_tb_per_s", [3.35, 6.7])
    assert list(bw.hbm_tb_per_s) == [3.35, 6.7]
    assert bw.optimizer_s.iloc[1] == pytest.approx(bw.optimizer_s.iloc[0] / 2, rel=1e-12)
    assert bw.step_time_s.iloc[1] < bw.step_time_s.iloc[0]
    # the H100 SXM's own 3.35 TB/s (datasheet) gives the catalog's numbers
    plain = api.simulate(**BASE_70B).iloc[0]
    assert bw.step_time_s.iloc[0] == pytest.approx(plain.step_time_s, rel=1e-12)
    fl = api.sweep(BASE_70B, "peak_flops_scale", [1, 2])
    assert fl.step_time_s.iloc[0] == pytest.approx(plain.step_time_s, rel=1e-12)
    c1, c2 = fl.compute_s
    assert c1 / 2 <= c2 < c1
    s1, s2 = fl.step_time_s
    assert fl.mfu_bf16_pct.iloc[1] == pytest.approx(fl.mfu_bf16_pct.iloc[0] * s1 / (2 * s2), rel=1e-9)


@pytest.mark.parametrize("field, value, words", [
    ("hbm_gib", -80, "must be > 0"), ("hbm_gib", float("nan"), "finite"), ("hbm_tb_per_s", float("inf"), "finite"),
    ("hbm_tb_per_s", "3.35", "must be a number"), ("peak_flops_scale", 0, "must be > 0"),
    ("peak_flops_scale", True, "must be a number"), ("hbm_gib", 1e12, "plausible maximum")])
def test_gpu_what_ifs_refuse_what_is_not_a_positive_finite_number_in_one_line_naming_the_field(field, value, words):
    with pytest.raises(InputError) as err:
        api.simulate(**BASE_70B, **{field: value})
    assert err.value.field == field and words in str(err.value) and "\n" not in str(err.value)
