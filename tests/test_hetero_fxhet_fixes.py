"""Pooled-cluster fixes: an unknown pool in a --group is named (not "lists no pool"); a schedule
the pooled model lacks is refused as such before its vpp is asked for."""
from __future__ import annotations

import pytest

from cli_results import one_line_error, run, write_small_mixed



@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)


@pytest.fixture
def small(tmp_path):
    return write_small_mixed(tmp_path)


def test_a_group_on_only_an_unknown_pool_names_it_with_a_suggestion(small):
    # was "cluster small.pools: lists no pool": the pools it uses were taken before names were checked
    one_line_error(run("simulate", "-m", "llama3-8b", "-c", small, "--global-batch", "64",
                       "--group", "1x h200:tp8:pp1"), "pools.h200", "unknown pool", "h100")


@pytest.mark.parametrize("schedule", ["interleaved", "zb-h1", "dualpipe"])
def test_a_schedule_pooled_plans_lack_is_refused_as_such(small, schedule):
    # interleaved asked for a --vpp that pooled clusters then refuse
    r = run("simulate", "-m", "llama3-8b", "-c", small, "--global-batch", "64",
            "--group", "1x a100:tp8:pp2:20,12", "--schedule", schedule)
    one_line_error(r, "schedule", f"{schedule} is not modelled across unequal stages", "use 1f1b or gpipe")
    assert "vpp" not in r.output


AH = """
name: ah
pools:
  - {name: a100, cluster: dgx-a100-80gb, gpus: 16}
  - {name: h100, cluster: dgx-h100, gpus: 16}
"""


def test_a_planned_seq_len_travels_with_the_plan_file(tmp_path):
    import json
    cl = tmp_path / "ah.yaml"
    cl.write_text(AH)
    planned = json.loads(run("plan", "-m", "llama3-8b", "-c", cl, "--global-batch", "64", "--seq-len", "4096",
                             "--json").stdout)
    assert planned["best_plan"]["seq_len"] == 4096 == planned["request"]["seq_len"]
    f = tmp_path / "p.json"
    f.write_text(json.dumps(planned))
    sim = run("simulate", "-m", "llama3-8b", "-c", cl, "--plan", f, "--json")
    assert sim.exit_code == 0, sim.output
    # the plan's own step at 4096 tokens (the model's default 8192 ran it at about twice that)
    step = json.loads(sim.stdout)["step_time_s"]
    assert step == pytest.approx(planned["comparison"][0]["step_time_s"], rel=1e-12)
    same = run("simulate", "-m", "llama3-8b", "-c", cl, "--plan", f, "--seq-len", "4096", "--json")
    assert json.loads(same.stdout)["step_time_s"] == step
    one_line_error(run("simulate", "-m", "llama3-8b", "-c", cl, "--plan", f, "--seq-len", "8192"),
                   "--seq-len", "8192 differs from the plan file's seq_len 4096")
    bad = dict(planned["best_plan"], seq_len=0)
    f.write_text(json.dumps(bad))
    one_line_error(run("simulate", "-m", "llama3-8b", "-c", cl, "--plan", f), "--plan.seq_len", "positive integer")


ONE_NODE = """
name: one
pools:
  - {name: h100, cluster: dgx-h100, gpus: 8}
  - {name: a100, cluster: dgx-a100-80gb, gpus: 8}
"""


def _step(cl, *groups):
    import json
    args = [a for g in groups for a in ("--group", g)]
    r = run("simulate", "-m", "gpt3-1.3b", "-c", cl, "--global-batch", "64", "--json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["step_time_s"]


def test_groups_sharing_one_node_reduce_over_nvlink_as_one_group(tmp_path):
    # 4 replicas of tp 2 on one 8-GPU node are one placement however they are grouped: the
    # data-parallel ring stays on NVLink (two groups were priced over the scale-out network: 6.5% slower)
    cl = tmp_path / "one.yaml"
    cl.write_text(ONE_NODE)
    assert _step(cl, "2x h100:tp2:pp1", "2x h100:tp2:pp1") == _step(cl, "4x h100:tp2:pp1")


def test_pools_of_part_nodes_are_not_merged_into_more_whole_nodes():
    # two 12-GPU H100 pools are each one 8-GPU node and one 4-GPU node: two tp-8 groups at most
    # in all (the merge had them as one 24-GPU pool: "1x h1+h2 tp8 pp3", three tp-8 stages)
    from hardware_specs.catalog import load_cluster
    from hardware_specs.pools import Pool, PooledCluster
    from planners.heterogeneous import canonical, plan_heterogeneous
    from simulator.heterogeneous.unit_costs import pool_efficiencies
    h100 = load_cluster("dgx-h100")
    cl = PooledCluster("tw12", (Pool("h1", h100, 12), Pool("h2", h100, 12)))
    merged, _ = canonical(cl, pool_efficiencies(cl, {}))
    assert merged.pool_names == ("h1", "h2")
    whole = PooledCluster("tw16", (Pool("h1", h100, 16), Pool("h2", h100, 16)))
    assert canonical(whole, pool_efficiencies(whole, {}))[0].pool_names == ("h1+h2",)
    result = plan_heterogeneous("llama3-70b", cl, 16)
    for i in range(len(result.plans)):
        plan, scored_on = result.row_plan(i)
        tp8 = sum(g.replicas for g in plan.groups for st in g.stages if st.tp == 8)
        assert tp8 <= 2, result.plans.iloc[i]["layout"]
        assert set(plan.pools_used()) <= {"h1", "h2"}
