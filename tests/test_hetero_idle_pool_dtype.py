"""A pooled plan that leaves a pool idle simulates as it was planned: since each set of pools
plans in its own default dtype, the best plan of Llama-3-8B (128 sequences) on 64 H100 + 16
V100 is H100-only in bf16. ``simulate --plan`` of it failed (the V100, which it does not use,
was asked for its bf16 peak), and ``--group`` of the same plan ran fp16 (the whole file's
common dtype: 565,487 instead of 565,503 tokens/s). Both, and the API, now give the plan's
dtype and step time."""
from __future__ import annotations

import json

import pytest

from cli_results import one_line_error, run
from hardware_specs.catalog import load_cluster, load_pooled_cluster
from model_specs.catalog import load_model
from planners.heterogeneous import plan_heterogeneous
from simulator.heterogeneous import simulate_heterogeneous

HV = """
name: h100-v100
pools:
  - {name: h100, cluster: dgx-h100, gpus: 64}
  - {name: v100, cluster: dgx2-v100, gpus: 16}
"""


@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)


@pytest.fixture(scope="module")
def hv(tmp_path_factory):
    p = tmp_path_factory.mktemp("hv") / "hv.yaml"
    p.write_text(HV)
    return p


@pytest.fixture(scope="module")
def planned(hv):
    r = run("plan", "-m", "llama3-8b", "-c", hv, "--global-batch", "128", "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _group_args(best: dict) -> list[str]:
    """``--group`` and the shared options of a plan file's one-segment groups."""
    args = []
    for g in best["groups"]:
        (pool,) = {st["pool"] for st in g["stages"]}
        (tp,) = {st["tp"] for st in g["stages"]}
        layers = ",".join(str(st["layers"]) for st in g["stages"])
        args += ["--group", f"{g['replicas']}x {pool}:tp{tp}:pp{len(g['stages'])}:{layers}"]
    args += ["--global-batch", best["global_batch"], "--micro-batch", best["micro_batch"], "--zero",
             best["zero_stage"], "--recompute", best["recompute"],
             "--sequence-parallel" if best["sequence_parallel"] else "--no-sequence-parallel"]
    return args


def test_the_best_plan_leaving_the_v100_idle_simulates_as_planned(hv, planned, tmp_path):
    best = planned["best_plan"]
    # the premise: the best plan uses only the H100, whose own default dtype is bf16 (the V100
    # has none, so the whole file's common dtype is fp16)
    assert {st["pool"] for g in best["groups"] for st in g["stages"]} == {"h100"}
    h100, v100 = load_cluster("dgx-h100").gpu, load_cluster("dgx2-v100").gpu
    assert "bf16" in h100.peak_flops_per_s and "bf16" not in v100.peak_flops_per_s
    assert best["dtype"] == planned["request"]["dtype"] == "bf16"
    step = planned["comparison"][0]["step_time_s"]
    plan_file = tmp_path / "best.json"
    plan_file.write_text(json.dumps(planned))
    from_file = run("simulate", "-m", "llama3-8b", "-c", hv, "--plan", plan_file, "--json")
    assert from_file.exit_code == 0, from_file.output
    from_group = run("simulate", "-m", "llama3-8b", "-c", hv, *_group_args(best), "--json")
    assert from_group.exit_code == 0, from_group.output
    for r in (from_file, from_group):
        data = json.loads(r.stdout)
        assert data["plan"]["dtype"] == "bf16"
        assert data["step_time_s"] == step
        assert data["tokens_per_s"] == planned["comparison"][0]["tokens_per_s"]
    # the API on the whole file, with the planner's plan object
    model, cluster = load_model("llama3-8b"), load_pooled_cluster(str(hv))
    res = plan_heterogeneous(model, cluster, 128)
    rep = simulate_heterogeneous(model, cluster, res.best)
    assert rep.step_time_s == res.best_report.step_time_s == step
    assert res.best.dtype == "bf16"


def test_a_given_dtype_is_checked_only_on_the_pools_the_plan_uses(hv, planned):
    """--dtype bf16 on an H100-only group of a file with a V100 pool runs (the V100 is idle); on
    a group that uses the V100 it is one line naming that pool."""
    best = planned["best_plan"]
    r = run("simulate", "-m", "llama3-8b", "-c", hv, *_group_args(best), "--dtype", "bf16", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["plan"]["dtype"] == "bf16" and data["step_time_s"] == planned["comparison"][0]["step_time_s"]
    bad = run("simulate", "-m", "llama3-8b", "-c", hv, "--global-batch", "16", "--group", "8x v100:tp2:pp1",
              "--dtype", "bf16")
    one_line_error(bad, "pools.v100.dtype", "no bf16 peak")


def test_a_plan_without_a_dtype_runs_the_default_of_the_pools_it_uses(hv, tmp_path):
    """A hand-written plan file that states no dtype: on the V100 it runs fp16 (the V100's
    first of bf16, fp16, fp32; it was bf16, the plan's field default, and failed), on the
    H100 bf16 (not the file's common fp16)."""
    for pool, tp, want in (("v100", 4, "fp16"), ("h100", 2, "bf16")):
        plan_file = tmp_path / f"{pool}.yaml"
        plan_file.write_text(f"micro_batch: 1\nglobal_batch: 16\nzero_stage: 1\nrecompute: full\n"
                             f"groups:\n  - replicas: 4\n    stages: [{{pool: {pool}, tp: {tp}, layers: 32}}]\n")
        r = run("simulate", "-m", "llama3-8b", "-c", hv, "--plan", plan_file, "--json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["plan"]["dtype"] == want
