"""``ep_comm_overlap`` only where Megatron-Core's combined 1F1B runs (``simulator.ep_overlap_rules``):
``TransformerConfig.__post_init__`` asserts interleaving beside a pipeline, no full recomputation,
no ``moe`` recompute module, a bf16 / fp16 model and at most one MTP layer. ``simulate`` refuses
the rest with one line, the planner does not return them, and a sweep marks the point invalid."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from paraplan import api
from paraplan.cli import main
from simulator.ep_overlap_rules import ep_overlap_breaks, ep_overlap_runnable

QWEN = ["simulate", "-m", "qwen3-30b-a3b", "-c", "dgx-h100", "-n", "16", "--ep", "8", "--global-batch", "64"]


@pytest.mark.parametrize("extra, said, fix", [
    (["--pp", "2"], "pp=2 vpp=1 with ep=8", "use vpp >= 2 with pp > 1, or pp 1, or --no-ep-comm-overlap"),
    (["--recompute", "full"], "recompute full with ep=8", "recompute none or selective, or --no-ep-comm-overlap"),
    (["--recompute", "full", "--recompute-num-layers", "2"], "recompute full with ep=8",
     "recompute none or selective, or --no-ep-comm-overlap"),
    (["--recompute-modules", "moe"], "recompute_modules moe with ep=8",
     "drop moe from recompute_modules, or --no-ep-comm-overlap"),
    (["--dtype", "fp32"], "dtype fp32 with ep=8", "use bf16, fp16 or fp8, or --no-ep-comm-overlap"),
])
def test_simulate_refuses_each_combination_megatron_core_refuses_in_one_line(extra, said, fix):
    res = CliRunner().invoke(main, QWEN + ["--ep-comm-overlap", *extra])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: ep_comm_overlap: {said}: Megatron-Core's combined 1F1B")
    assert lines[0].endswith(f"({fix})")
    # the same plan without the switch runs
    assert CliRunner().invoke(main, QWEN + ["--no-ep-comm-overlap", *extra]).exit_code == 0


@pytest.mark.parametrize("extra", [
    ["--pp", "2", "--vpp", "2"],                    # interleaved beside the pipeline
    ["--recompute-modules", "moe_dispatch"],        # only the dispatch again, not the MoE block
    ["--recompute", "selective"],
    ["--pp", "2", "--schedule", "zb-h1"],           # orders its own passes: not combined 1F1B
    ["--pp", "2", "--ep", "1", "--recompute", "full"],   # ep 1: nothing to overlap, no flag written
])
def test_simulate_accepts_the_combinations_megatron_core_runs(extra):
    res = CliRunner().invoke(main, QWEN + ["--ep-comm-overlap", *extra, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["config"]["ep_comm_overlap"] is True


def test_more_than_one_mtp_layer_is_refused_and_one_is_not():
    qwen = load_model("qwen3-30b-a3b")
    fields = dict(gpus=16, ep=8, global_batch=64, ep_comm_overlap=True)
    with pytest.raises(InputError) as err:
        api.simulate(replace(qwen, mtp_layers=2), "dgx-h100", **fields)
    assert err.value.field == "ep_comm_overlap" and str(err.value).startswith("ep_comm_overlap: 2 MTP layers with ep=8")
    assert api.simulate(replace(qwen, mtp_layers=1), "dgx-h100", **fields).iloc[0].step_time_s > 0


def test_the_rules_on_arrays_match_the_asserts_row_by_row():
    # rows: (ep, pp, vpp, own schedule, full recompute, moe module, fp32, mtp)
    rows = np.array([(8, 1, 1, 0, 0, 0, 0, 1),      # runs
                     (8, 2, 1, 0, 0, 0, 0, 0),      # pipeline without interleaving
                     (8, 2, 2, 0, 0, 0, 0, 0),      # runs
                     (8, 1, 1, 0, 1, 0, 0, 0),      # full recompute
                     (8, 1, 1, 0, 0, 1, 0, 0),      # moe module
                     (8, 1, 1, 0, 0, 0, 1, 0),      # fp32
                     (8, 1, 1, 0, 0, 0, 0, 2),      # two MTP layers
                     (1, 2, 1, 0, 1, 1, 1, 2),      # ep 1: breaks nothing
                     (8, 4, 1, 1, 1, 0, 0, 0)])     # DualPipe / zero-bubble: not combined 1F1B
    ep, pp, vpp, own, full, moe, fp32, mtp = rows.T
    fields = dict(ep=ep, pp=pp, vpp=vpp, own_schedule=own, full_recompute=full, moe_recompute=moe,
                  full_precision=fp32, mtp_layers=mtp)
    assert ep_overlap_runnable(**fields).tolist() == [True, False, True, False, False, False, False, True, True]
    broken = ep_overlap_breaks(**fields)
    assert {k: np.flatnonzero(v).tolist() for k, v in broken.items()} == {
        "pipeline": [1], "full_recompute": [3], "moe_recompute": [4], "dtype": [5], "mtp": [6]}


def _plan(fixed, *switches):
    res = CliRunner().invoke(main, ["plan", "-m", "qwen3-30b-a3b", "-c", "dgx-h100", "-n", "16", "--global-batch", "64",
                                    "--top", "200", "--json", *fixed, *switches])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["plans"]


@pytest.mark.parametrize("fixed", [["--pp", "2"], ["--pp", "2", "--vpp", "2"]])
def test_the_planner_returns_no_plan_megatron_core_refuses_and_its_winner_resimulates(fixed):
    from tests.test_planner import _resimulate
    plans = _plan(fixed, "--ep-comm-overlap")
    assert plans
    for row in plans:
        assert row["ep"] == 1 or (row["vpp"] >= 2 and row["recompute"] != "full"), row
    best = plans[0]
    report = _resimulate(best, "qwen3-30b-a3b", "dgx-h100", 64, ["--ep-comm-overlap"])
    assert report["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-9)
    assert report["config"]["ep_comm_overlap"] is True


def test_without_the_switch_the_planner_still_searches_what_the_rules_prune():
    # the rule prunes something real: the same search with the switch off returns full
    # recomputation beside expert parallelism, which the switched-on search never does
    plans = _plan(["--pp", "2", "--vpp", "2"], "--no-ep-comm-overlap")
    assert any(r["ep"] > 1 and r["recompute"] == "full" for r in plans)


def test_a_sweep_marks_a_point_megatron_core_refuses_invalid_with_the_reason():
    grid = {"search": "simulate", "models": ["qwen3-30b-a3b"], "clusters": ["dgx-h100"], "gpus": [16],
            "global_batch": [64], "stacks": ["megatron-core"],
            "config": {"pp": [2], "vpp": [1, 2], "ep": [8], "ep_comm_overlap": [True]}}
    df = api.sweep_grid(grid).set_index("vpp")
    assert df.loc[2, "status"] in ("ok", "does not fit")
    assert df.loc[1, "status"] == "invalid"
    assert df.loc[1, "reason"].startswith("ep_comm_overlap: pp=2 vpp=1 with ep=8")
