"""Groups that straddle a scale-up domain are refused (simulate) and not searched (plan), as tp is.

``group_span`` gives every group of a kind the first group's shape; a group whose run of
consecutive ranks (``topology.group_blocks``) neither divides the domain nor is a multiple of it
holds a different share of NVLink and NIC members than the first one, and the step waits for it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from cli_results import one_line_error, run
from cost_models.topology import group_blocks, group_collective_time_s, groups_tile_node

REPO = Path(__file__).resolve().parents[1]


def _six_gpu_nodes(tmp_path):
    text = (REPO / "hardware_specs" / "clusters" / "dgx-h100.yaml").read_text()
    path = tmp_path / "six.yaml"
    path.write_text(text.replace("name: dgx-h100", "name: six-per-node", 1).replace("gpus_per_node: 8", "gpus_per_node: 6", 1))
    return path


def test_group_blocks_are_the_runs_of_consecutive_ranks_of_megatrons_order():
    # tp fastest, then cp, dp (tp-cp-dp-pp); the experts' grid etp fastest, then ep
    blocks = dict(group_blocks(tp=2, cp=3, dp=4, ep=4, etp=2, zero_shard_group=2))
    assert {k: int(v) for k, v in blocks.items()} == {"tp": 2, "etp": 2, "ep": 8, "cp": 6,
                                                      "zero_shard_group": 4, "dp": 24}


def test_the_reviewers_expert_group_straddles_two_nvl72_racks():
    # 144 GPUs, ep 16: ranks 64-79 hold 8 GPUs in each of two 72-GPU racks
    assert not groups_tile_node(72, 144, tp=1, cp=1, dp=144, ep=16)
    assert groups_tile_node(72, 144, tp=1, cp=1, dp=144, ep=8)            # 72 = 9 groups of 8
    assert groups_tile_node(72, 64, tp=1, cp=1, dp=64, ep=16)             # one rack: anything goes
    # 256 GPUs with groups of 64: straddle racks of 72, tile the 64 a rack holds of a segmented job
    assert not groups_tile_node(72, 256, tp=1, cp=1, dp=64, ep=64)
    assert groups_tile_node(64, 256, tp=1, cp=1, dp=64, ep=64)
    # vectorised, as the planner calls it
    np.testing.assert_array_equal(groups_tile_node(8, 24, np.array([1, 2, 1]), 1, np.array([24, 12, 12])),
                                  [True, True, False])   # dp group of 12 ranks on 8-GPU nodes: 8 + 4


def test_a_straddling_expert_group_is_refused_where_it_was_priced_all_on_nvlink():
    from hardware_specs import load_cluster
    from hardware_specs.catalog import efficiency_for_cluster
    c = load_cluster("gb200-nvl72")
    eff = efficiency_for_cluster(c)
    bw_intra = c.scaleup.bw_bytes_per_s * eff.scaleup_fraction
    b = 256 * 2 ** 20
    # what the group was priced at: 16 ranks on NVLink, 15/16 of the buffer at NVLink speed and
    # 15 steps of its latency (0.39 ms); ranks 64-79 send half their buffer over one NIC each
    flat = 15 / 16 * b / bw_intra + 15 * c.scaleup.latency_s
    assert np.isclose(float(group_collective_time_s("all_to_all", b, 16, 1, c, eff)), flat, rtol=1e-9)
    one_line_error(run("simulate", "-m", "qwen3-30b-a3b", "-c", "gb200-nvl72", "-n", 144, "--ep", 16,
                       "--global-batch", 144, "--zero", 1), "error: ep: ",
                   "ep x etp = 16 does not tile the 72-GPU scale-up domain of gb200-nvl72: with 144 GPUs an "
                   "expert-parallel group would span two domains")
    assert run("simulate", "-m", "qwen3-30b-a3b", "-c", "gb200-nvl72", "-n", 144, "--ep", 8,
               "--global-batch", 144, "--zero", 1).exit_code == 0


def test_context_shard_and_data_parallel_groups_that_straddle_are_refused(tmp_path):
    c = _six_gpu_nodes(tmp_path)
    # cp ring of tp 2 x cp 2 = 4 ranks on 6-GPU nodes: ranks 4-7 across two nodes
    one_line_error(run("simulate", "-m", "llama3-8b", "-c", c, "-n", 12, "--tp", 2, "--cp", 2,
                       "--global-batch", 12), "error: cp: ", "tp x cp = 4 does not tile the 6-GPU")
    # HSDP shard group of 4 of 12 data-parallel ranks: ranks 4-7 again
    one_line_error(run("simulate", "-m", "llama3-8b", "-c", c, "-n", 12, "--zero", 3, "--zero-shard-group", 4,
                       "--global-batch", 12), "error: zero_shard_group: ", "tp x zero_shard_group = 4")
    assert run("simulate", "-m", "llama3-8b", "-c", c, "-n", 12, "--zero", 3, "--zero-shard-group", 6,
               "--global-batch", 12).exit_code == 0
    # a data-parallel group of 9 ranks per stage on 6-GPU nodes (pp 2, 18 GPUs): 6 + 3 GPUs
    one_line_error(run("simulate", "-m", "llama3-8b", "-c", c, "-n", 18, "--pp", 2, "--global-batch", 18),
                   "error: dp: ", "tp x cp x dp = 9 does not tile the 6-GPU")


def test_plan_ranks_only_layouts_simulate_takes():
    from hardware_specs import load_cluster
    from model_specs import load_model
    from planners.plan import plan
    from simulator.parallel_config import ParallelConfig
    from simulator.validate_config import check_cluster
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("gb200-nvl72")
    res = plan(model, cluster, 144, 144, assign_stages=False, fixed={"ep": (8, 16)})
    assert set(res.plans.ep) == {8} and res.pruned["scaleup"] > 0
    for _, r in res.plans.head(20).iterrows():
        check_cluster(cluster, ParallelConfig(tp=int(r.tp), pp=int(r.pp), dp=int(r.dp), cp=int(r.cp), ep=int(r.ep),
                                               micro_batch=int(r.micro_batch), global_batch=144))


def test_check_cluster_and_the_planner_apply_one_group_tiling_rule():
    """check_cluster refuses a layout exactly where ``groups_tile_node`` is False and names the
    first group ``group_tiling`` finds untiled; the planner's space on 6-GPU domains (12 and 18
    GPUs, fixed shard groups 2, 3, 4 and 6, expert parallelism) keeps exactly the layouts whose
    every group tiles, ep and the ZeRO shard group included."""
    import itertools
    import dataclasses
    import pytest
    from cost_models.topology import group_tiling
    from hardware_specs import load_cluster
    from hardware_specs.errors import InputError
    from model_specs import load_model
    from planners import SearchConstraints, enumerate_space
    from simulator.parallel_config import ParallelConfig
    from simulator.validate_config import check_cluster
    six = dataclasses.replace(load_cluster("dgx-h100"), gpus_per_node=6)
    seen = set()
    for tp, cp, dp, ep, zsg in itertools.product((1, 2, 3, 4), (1, 2), (1, 2, 3, 4, 6), (1, 2, 4), (0, 2, 3)):
        if (dp * cp) % ep or (zsg and (dp * cp) % zsg) or (zsg and zsg >= dp * cp):
            continue
        c = ParallelConfig(tp=tp, cp=cp, dp=dp, ep=ep, zero_stage=3 if zsg else 1, zero_shard_group=zsg,
                           global_batch=dp * 4)
        tiles = bool(groups_tile_node(6, c.n_gpus, tp, cp, dp, ep, 1, zsg))
        untiled = [name for name, _, ok in group_tiling(6, c.n_gpus, tp, cp, dp, ep, 1, zsg) if not bool(ok)]
        try:
            check_cluster(six, c)
            assert tiles, c
        except InputError as err:
            assert not tiles and err.field == untiled[0], (c, err)
            seen.add(err.field)
    assert seen == {"tp", "ep", "cp", "zero_shard_group", "dp"}
    model = load_model("qwen3-30b-a3b")
    for n in (12, 18):
        space = enumerate_space(model, SearchConstraints(
            gpus=(n, n), global_batch=72, max_tp=6, scaleup_gpus=6,
            fixed={"zero_shard_group": (0, 2, 3, 4, 6), "ep": (1, 2, 4, 8)}))
        cols = space.columns
        assert len(cols["tp"]) > 0
        ok = groups_tile_node(6, cols["dp"] * cols["tp"] * cols["pp"] * cols["cp"], cols["tp"], cols["cp"],
                              cols["dp"], cols["ep"], 1, cols["zero_shard_group"])
        assert bool(np.all(ok)), n
        assert space.pruned.get("scaleup", 0) > 0
