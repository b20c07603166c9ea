"""``paraplan.serving_api``: serving what-ifs from Python give serve simulate's and serve plan's
numbers, sweep one input at a time, and keep a value that cannot run as a row with its reason."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from hardware_specs.errors import InputError
from paraplan.cli import main
from paraplan.serving_api import serve_plan, serve_simulate, serve_sweep

BASE = {"model": "llama3.1-70b", "system": "dgx-h100", "tp": 4, "batch": 64, "isl": 2048, "osl": 512}


def _cli(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_a_deployment_row_is_serve_simulates_numbers_with_units_in_its_names():
    row = serve_simulate(**BASE).iloc[0]
    got = _cli("serve", "simulate", "-m", "llama3.1-70b", "-s", "dgx-h100", "--tp", 4, "--batch", 64,
               "--isl", 2048, "--osl", 512, "--json")
    for key in ("ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_user"):
        assert row[key] == pytest.approx(got[key] if key in got else 1e3 * got[key[:-3] + "_s"], rel=1e-12), key
    parts = [c for c in row.index if c.startswith("decode_") and c.endswith("_ms")]
    # the decode step's parts add up to the step: TPOT at one client is the step / 1 (no other prompts)
    one = serve_simulate(**{**BASE, "batch": 1}).iloc[0]
    assert sum(one[c] for c in parts) == pytest.approx(one["tpot_ms"], rel=1e-9)
    assert row["efficiency_fitted"] and row["validation_tpot_err_pct"] > 0
    assert all(c.endswith(("_ms", "_gib", "_pct", "_s", "_per_gpu", "_per_user", "_per_rank", "_per_element"))
               or c in ("model", "system", "gpu", "backend", "dense_format", "expert_format", "isl", "osl", "tp", "pp",
                        "adp", "moe_tp", "moe_ep", "batch", "workers", "gpus", "concurrency", "fits",
                        "efficiency_fitted", "speculative_tokens", "draft_acceptance", "draft_acceptance_is_prior",
                        "draft_model") for c in row.index)


def test_a_sweep_of_memory_bandwidth_never_slows_decoding_and_a_value_that_cannot_run_keeps_its_row():
    hbm = serve_sweep(BASE, "hbm_tb_per_s", [2.0, 3.35, 5.0, 8.0])
    assert list(hbm.swept_hbm_tb_per_s) == [2.0, 3.35, 5.0, 8.0] and (hbm.error == "").all()
    assert np.all(np.diff(hbm.tpot_ms.to_numpy()) < 0)
    # the catalog's own bandwidth is the catalog's numbers
    assert hbm.tpot_ms.iloc[1] == pytest.approx(serve_simulate(**BASE).tpot_ms.iloc[0], rel=1e-12)
    tps = serve_sweep(BASE, "tp", [1, 3, 8])
    assert tps.error.iloc[1].startswith("tp: 3 does not divide the 64 attention heads")
    assert tps.error.iloc[0].startswith("batch: 64 requests per rank need")     # 70B on one H100: no room
    assert np.isnan(tps.tpot_ms.iloc[1]) and tps.error.iloc[2] == "" and tps.tpot_ms.iloc[2] > 0
    with pytest.raises(InputError, match="cannot sweep"):
        serve_sweep(BASE, "hbm", [1.0])
    with pytest.raises(InputError, match="not an input"):
        serve_simulate(**BASE, hbm=3.0)


def test_a_plan_from_python_is_serve_plans():
    plan = serve_plan("llama3.1-8b", "dgx-h100", 8, isl=1024, osl=256, ttft_ms=2000.0, tpot_ms=40.0)
    got = _cli("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", 8, "--isl", 1024, "--osl", 256,
               "--ttft-ms", 2000, "--tpot-ms", 40, "--json")
    assert plan.best["tokens_per_s_per_gpu"] == pytest.approx(got["best"]["tokens_per_s_per_gpu"], rel=1e-12)
    assert plan.best["batch"] == got["best"]["batch"]


@pytest.mark.parametrize("kwargs, message", [
    # a fractional max_batch never settled the batch bisection: the call hung
    ({"max_batch": 64.5}, "max_batch: must be a whole number >= 1"),
    ({"max_batch": 0}, "max_batch: must be a whole number >= 1"),
    # bad modes were reported as "--gpus: no layout ... fits"
    ({"modes": ("bogus",)}, "modes: modes must be a non-empty list"),
    ({"modes": ()}, "modes: modes must be a non-empty list"),
])
def test_a_plan_with_a_bad_search_bound_names_it(kwargs, message):
    with pytest.raises(InputError, match=message):
        serve_plan("llama3.1-8b", "hgx-h200", 8, **kwargs)
    # one mode as a string is that mode
    assert set(serve_plan("llama3.1-8b", "hgx-h200", 8, modes="agg").candidates["mode"]) == {"agg"}


@pytest.mark.parametrize("field", ["moe_tp", "moe_ep"])
def test_a_zero_or_negative_expert_split_is_named_not_divided_by(field):
    for bad in (0, -1):
        with pytest.raises(InputError, match=f"^{field}: must be a whole number >= 1"):
            serve_simulate("deepseek-r1", "hgx-h200", tp=8, **{field: bad})


def test_a_long_serving_search_reports_its_phases():
    # 4,096 GPUs of DeepSeek-R1 searched for ~25 s with nothing on the screen
    from paraplan.serving_api import serving_context
    from planners.serving.search import plan_serving
    seen = []
    plan = plan_serving(serving_context("llama3.1-8b", "dgx-h100"), 8, 1024, 1024, 1000.0, 50.0,
                        progress=lambda done, total, step="": seen.append((done, total, step)))
    # each stage STAGE_UNITS (100), a batch search's stage moving as its candidates are priced
    # (tests/test_search_progress.py)
    assert [(d, t, s) for d, t, s in seen if d % 100 == 0] == [
        (0, 600, "aggregated layouts"), (100, 600, "aggregated batches"), (200, 600, "disaggregated pairings"),
        (300, 600, "disaggregated batches"), (400, 600, "pairings the fronts dropped"), (500, 600, "ranking"),
        (600, 600, "done")]
    assert plan.best is not None


def test_bad_sweep_and_plan_arguments_from_python_are_input_errors():
    with pytest.raises(InputError, match="^modes: "):
        serve_plan("llama3.1-8b", "dgx-h100", 8, modes=None)
    with pytest.raises(InputError, match="^values: "):
        serve_sweep(dict(model="llama3.1-8b", system="dgx-h100"), "batch", None)
    with pytest.raises(InputError, match="^base: "):
        serve_sweep({"system": "dgx-h100"}, "batch", [1])
    with pytest.raises(InputError, match="^base: "):
        serve_sweep([1], "batch", [1])


# ---- a dense model has no expert split: its expert fields are missing, as serve simulate /
# serve plan --json give null, in the type each table holds its degrees in


def test_a_dense_deployment_row_has_no_expert_split_and_an_moe_one_keeps_its_own_as_integers():
    dense = serve_simulate(**BASE)
    assert str(dense.moe_tp.dtype) == str(dense.moe_ep.dtype) == "Int64"
    row = dense.iloc[0]
    assert pd.isna(row["moe_tp"]) and pd.isna(row["moe_ep"]) and row["expert_format"] is None
    got = _cli("serve", "simulate", "-m", "llama3.1-70b", "-s", "dgx-h100", "--tp", 4, "--batch", 64,
               "--isl", 2048, "--osl", 512, "--json")
    assert got["layout"]["moe_tp"] is None and got["layout"]["moe_ep"] is None and got["expert_format"] is None
    moe = serve_simulate("qwen3-235b-a22b", "hgx-h200", backend="sglang", tp=2, adp=4, moe_tp=2, moe_ep=4,
                         batch=16).iloc[0]
    assert (moe["moe_tp"], moe["moe_ep"], moe["expert_format"]) == (2, 4, "fp8")
    # a sweep over both models: one Int64 column, <NA> for the dense row
    swept = serve_sweep({"model": "llama3.1-8b", "system": "dgx-h100", "tp": 2, "batch": 8}, "model",
                        ["llama3.1-8b", "qwen3-30b-a3b"])
    assert (swept.error == "").all() and str(swept.moe_tp.dtype) == "Int64"
    assert swept.moe_tp.isna().tolist() == [True, False] and swept.moe_ep.isna().tolist() == [True, False]
    assert pd.isna(swept.expert_format.iloc[0]) and swept.expert_format.iloc[1] == "fp8"


def test_a_dense_plan_leaves_the_expert_split_nan_and_changes_nothing_else():
    from planners.serving.search import plan_serving
    from paraplan.serving_api import serving_context
    plan = serve_plan("llama3.1-8b", "dgx-h100", 8, isl=1024, osl=256, ttft_ms=2000.0, tpot_ms=40.0)
    expert = [c for c in plan.candidates.columns if c.endswith(("moe_tp", "moe_ep"))]
    assert {"moe_tp", "moe_ep", "prefill_moe_tp", "decode_moe_ep"} <= set(expert)
    for table in (plan.candidates, plan.front):
        assert table[expert].isna().all().all() and all(table[c].dtype == float for c in expert)
    assert all(pd.isna(plan.best[c]) for c in expert if c in plan.best.index)
    got = _cli("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", 8, "--isl", 1024, "--osl", 256,
               "--ttft-ms", 2000, "--tpot-ms", 40, "--json")
    assert all(got["best"].get(c) is None for c in expert)
    # the search itself is untouched: the same rows, every other column equal
    ctx = serving_context("llama3.1-8b", "dgx-h100")
    raw = plan_serving(ctx, 8, 1024, 256, 2000.0, 40.0, modes=("agg", "disagg"))
    assert (raw.candidates["moe_ep"].dropna() == 1.0).all()        # what the planner used: moe_ep 1
    # (the API adds what the rows rest on: efficiency_fitted, as serve plan --csv)
    assert (plan.candidates["efficiency_fitted"] == True).all()      # noqa: E712   hopper's fitted profile
    pd.testing.assert_frame_equal(plan.candidates.drop(columns=expert + ["efficiency_fitted"]),
                                  raw.candidates.drop(columns=expert))
    # an MoE model's plan keeps its split
    moe = serve_plan("qwen3-30b-a3b", "dgx-h100", 8, modes="agg", tpot_ms=20.0)
    assert moe.front["moe_ep"].notna().all() and moe.best["moe_ep"] >= 1


@pytest.mark.parametrize("tb_per_s", [1e5, 1e-5])
def test_hbm_bandwidth_what_if_is_the_training_apis_with_its_unit_in_the_fix(tb_per_s):
    # one what-if for the memory bandwidth (paraplan.api.what_if_gpu): 1e5 TB/s (a bytes/s value
    # given as TB/s) and 1e-5 TB/s are out of its 1e-3 .. 1e3 bounds, and the fix names the unit
    from paraplan.api import what_if_gpu
    from hardware_specs.catalog import load_gpu
    with pytest.raises(InputError) as training:
        what_if_gpu(load_gpu("h100-sxm-80gb"), hbm_tb_per_s=tb_per_s)
    with pytest.raises(InputError) as serving:
        serve_simulate(**BASE, hbm_tb_per_s=tb_per_s)
    assert serving.value.field == "hbm_tb_per_s"
    assert (serving.value.message, serving.value.fix) == (training.value.message, training.value.fix)
    assert "TB/s of device-memory bandwidth" in serving.value.fix


def test_hbm_bandwidth_what_if_scales_the_memory_bound_decode():
    # 3.35 TB/s is the H100 SXM datasheet's: the what-if at the same value is the catalog's
    # deployment, and at 2 x it the memory-bound decode step is faster
    base, same = serve_simulate(**BASE).iloc[0], serve_simulate(**BASE, hbm_tb_per_s=3.35).iloc[0]
    assert same.tpot_ms == pytest.approx(base.tpot_ms, rel=1e-12)
    assert serve_simulate(**BASE, hbm_tb_per_s=6.7).iloc[0].tpot_ms < base.tpot_ms


def test_an_hbm_capacity_what_if_is_the_gpu_with_that_much_memory(tmp_path):
    # the training API sweeps hbm_gib; the serving one refused it ("cannot sweep 'hbm_gib'").
    # An H100 with 141 GiB (the catalog's H100 file with hbm_gib: 141, passed as gpu=) is the what-if's
    # deployment in every column; only the memory moves: vLLM keeps gpu_memory_utilization 0.9 of the
    # HBM, so the KV pool grows by 0.9 x (141 - 80) = 54.9 GiB and the batch a rank holds with it
    from pathlib import Path
    src = Path(__file__).resolve().parents[1] / "hardware_specs" / "gpus" / "h100-sxm-80gb.yaml"
    text = src.read_text()
    assert "\nhbm_gib: 80\n" in text
    yaml = tmp_path / "h100-141.yaml"
    yaml.write_text(text.replace("\nhbm_gib: 80\n", "\nhbm_gib: 141\n"))
    swept = serve_sweep(BASE, "hbm_gib", [80, 141])
    assert list(swept.swept_hbm_gib) == [80, 141] and (swept.error == "").all()
    catalog, by_file = serve_simulate(**BASE).iloc[0], serve_simulate(**BASE, gpu=str(yaml)).iloc[0]
    for row, want in ((swept.iloc[0], catalog), (swept.iloc[1], by_file)):
        for col in want.index:
            assert str(row[col]) == str(want[col]), col
    assert swept.kv_pool_gib.iloc[1] - swept.kv_pool_gib.iloc[0] == pytest.approx(0.9 * (141 - 80), rel=1e-9)
    assert swept.max_batch_per_rank.iloc[1] > 2 * swept.max_batch_per_rank.iloc[0]
    assert swept.tpot_ms.iloc[1] == swept.tpot_ms.iloc[0]       # the bandwidth and FLOP/s are the same
    with pytest.raises(InputError) as bad:
        serve_simulate(**BASE, hbm_gib="141")
    assert bad.value.field == "hbm_gib"


def test_serve_simulate_gpus_errors_name_the_keyword_not_the_cli_flag():
    """The API takes ``gpus=``; its errors had said ``--gpus`` (as batch=0 says ``batch``, not
    ``--batch``). tp 4 is 4 GPUs, so gpus=2 is too few; 9 workers of 16 GB200 hold 8 on 144."""
    from hardware_specs.errors import InputError
    from paraplan import serving_api
    with pytest.raises(InputError) as info:
        serving_api.serve_simulate("llama3-70b", "dgx-h100", tp=4, gpus=2)
    assert info.value.field == "gpus" and "--gpus" not in str(info.value) and "give gpus 4" in str(info.value)
    with pytest.raises(InputError) as info:
        serving_api.serve_simulate("deepseek-r1", "gb200-nvl72", precision="nvfp4", backend="trtllm", adp=16,
                                   moe_ep=16, batch=16, workers=9)
    # 9 workers of 16 need a third rack: 72 + 72 + 16 = 160 GPUs
    assert "(gpus 160, the rest idle)" in str(info.value) and "--gpus" not in str(info.value)
