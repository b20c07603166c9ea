"""Result rows record the hardware they were priced on: a training row's ``hbm_tb_per_s`` and
``peak_flops_scale``, a serving row's ``hbm_gib``, ``hbm_tb_per_s`` and link bandwidths. Rows of
``api.simulate`` / ``api.plan`` with ``hbm_tb_per_s=6.7, peak_flops_scale=2`` had no column saying
so (only a sweep over that field added one), so concatenated sweeps could not be told apart.

Datasheet values (hand): H100 SXM 80 GB, 3.35 TB/s HBM3 (NVIDIA H100 Tensor Core GPU datasheet);
DGX H100: 400 Gb/s ConnectX-7 NIC per GPU, 18 NVLink-4 links x 25 GB/s each way = 450 GB/s =
3,600 Gb/s per GPU (NVIDIA DGX H100 user guide, NVLink 4 spec)."""
from __future__ import annotations

import pytest

from paraplan import api
from paraplan.serving_api import serve_simulate, serving_row_columns

_KW = dict(gpus=64, tp=8, pp=4, global_batch=128, zero_stage=1, recompute="selective")


def test_a_training_row_records_the_hbm_bandwidth_and_peak_scale_it_ran_on():
    own = api.simulate("llama3-70b", "dgx-h100", **_KW).iloc[0]
    what_if = api.simulate("llama3-70b", "dgx-h100", hbm_tb_per_s=6.7, peak_flops_scale=2.0, **_KW).iloc[0]
    assert own["hbm_tb_per_s"] == pytest.approx(3.35) and own["peak_flops_scale"] == 1.0
    assert what_if["hbm_tb_per_s"] == pytest.approx(6.7) and what_if["peak_flops_scale"] == 2.0


def test_the_new_columns_follow_every_existing_one():
    cols = list(api.ROW_COLUMNS)
    assert cols[-3:] == ["efficiency_fitted", "hbm_tb_per_s", "peak_flops_scale"]
    assert list(api.simulate("llama3-70b", "dgx-h100", **_KW).columns) == cols


def test_plan_rows_record_the_what_ifs_too():
    plans = api.plan("llama3-70b", "dgx-h100", 64, 128 * 8192, hbm_tb_per_s=6.7, peak_flops_scale=2.0, max_plans=5)
    assert list(plans["hbm_tb_per_s"]) == pytest.approx([6.7] * len(plans)) and (plans["peak_flops_scale"] == 2.0).all()
    plans = api.plan("llama3-70b", "dgx-h100", 64, 128 * 8192, max_plans=5)
    assert list(plans["hbm_tb_per_s"]) == pytest.approx([3.35] * len(plans)) and (plans["peak_flops_scale"] == 1.0).all()


def test_a_sweep_over_a_gpu_what_if_keeps_one_column_of_it():
    df = api.sweep(dict(model="llama3-70b", cluster="dgx-h100", **_KW), "hbm_tb_per_s", [3.35, 6.7])
    assert list(df.columns).count("hbm_tb_per_s") == 1 and list(df["hbm_tb_per_s"]) == pytest.approx([3.35, 6.7])
    assert list(df["peak_flops_scale"]) == [1.0, 1.0]
    bad = api.sweep(dict(model="llama3-70b", cluster="dgx-h100", **_KW), "peak_flops_scale", [-1, -2],
                    on_error="skip")
    assert list(bad.columns).count("peak_flops_scale") == 1 and list(bad["peak_flops_scale"]) == [-1, -2]


def test_a_serving_row_records_the_hardware_it_ran_on():
    own = serve_simulate("llama3.1-8b", "dgx-h100").iloc[0]
    assert (own["hbm_gib"], own["hbm_tb_per_s"]) == (80.0, pytest.approx(3.35))
    assert (own["scaleout_gbit_per_s"], own["scaleup_gbit_per_s"]) == (pytest.approx(400.0), pytest.approx(3600.0))
    what_if = serve_simulate("llama3.1-8b", "dgx-h100", hbm_tb_per_s=6.7, hbm_gib=141, scaleout_gbit_per_s=800,
                             scaleup_gbit_per_s=7200).iloc[0]
    assert (what_if["hbm_gib"], what_if["hbm_tb_per_s"]) == (141.0, pytest.approx(6.7))
    assert (what_if["scaleout_gbit_per_s"], what_if["scaleup_gbit_per_s"]) == (pytest.approx(800.0),
                                                                                pytest.approx(7200.0))
    cols = serving_row_columns(False)
    assert cols[-4:] == ["hbm_gib", "hbm_tb_per_s", "scaleout_gbit_per_s", "scaleup_gbit_per_s"]
    assert list(serve_simulate("llama3.1-8b", "dgx-h100").columns) == cols
