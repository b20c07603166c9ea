"""Multi-rack GB200 / GB300 rows are priced with the placement their launcher asked Slurm for."""
from __future__ import annotations

from cost_models.topology import groups_tile_node
from hardware_specs.placement import segment_gpus


def test_segment_gpus_is_megatron_bridges_segment_rule():
    # trays of 4 GPUs, 18 per NVL72 rack: the largest divisor of the tray count that is <= 18
    assert segment_gpus(256, 4, 72) == 64      # 64 trays: segments of 16
    assert segment_gpus(128, 4, 72) == 64      # 32 trays: 16
    assert segment_gpus(144, 4, 72) == 72      # 36 trays: 18, whole racks
    assert segment_gpus(200, 4, 72) == 40      # 50 trays: 10
    assert segment_gpus(64, 4, 72) == 72       # one rack: the domain is unchanged
    assert segment_gpus(16, 8, 8) == 8         # a DGX node is one host
    assert segment_gpus(258, 4, 72) == 72      # not whole trays: unchanged


def test_published_multi_rack_rows_are_placed_in_segments_their_groups_tile():
    from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
    from paraplan.validation.predict import prepare
    from paraplan.validation.published import read_runs
    records = [r for r in read_runs(validation_file(PUBLISHED_RUNS)).to_dict("records")
               if str(r["gpu"]).startswith(("DGX-GB200", "DGX-GB300")) and r["n_gpus"] > 72]
    assert records
    skipped = {}
    p = prepare(records, on_skip=skipped.__setitem__)
    assert len(p.inputs) + len(skipped) == len(records) and len(p.inputs) >= 90
    assert not [w for w in skipped.values() if "domain" in w or "tile" in w]
    for inp in p.inputs:
        c = inp.config
        assert inp.cluster.gpus_per_node == 64, (inp.cluster.name, c.n_gpus)
        assert groups_tile_node(64, c.n_gpus, c.tp, c.cp, c.dp, c.ep, c.etp, c.zero_shard_group)
        # on whole racks of 72 their groups of 64 (or 128) would straddle
        assert not groups_tile_node(72, c.n_gpus, c.tp, c.cp, c.dp, c.ep, c.etp, c.zero_shard_group)


def test_simulate_plan_and_sweep_place_a_multi_rack_job_in_its_segments_as_the_validation_does(tmp_path):
    """Llama-3-70B on 128 GB200 at tp 2 (dp 64) and DeepSeek-V3 on 256 with ep 64: groups of 64 and
    128 ranks tile the 64 GPUs a rack Megatron-Bridge's Slurm segments give these jobs, not racks
    of 72, so simulate runs them (they had been refused as straddling racks), priced exactly as
    the same cluster stating 64 GPUs a domain; plan and a sweep point give the same numbers, and
    144 GPUs (whole racks of 72) still refuse an expert group of 16 across two racks."""
    from dataclasses import replace

    import pytest

    from hardware_specs.catalog import load_cluster
    from hardware_specs.errors import InputError
    from hardware_specs.placement import placed_cluster
    from paraplan import api

    nvl72 = load_cluster("gb200-nvl72")
    assert placed_cluster(nvl72, 128).gpus_per_node == 64 and placed_cluster(nvl72, 144) is nvl72
    assert placed_cluster(load_cluster("dgx-h100"), 1024).gpus_per_node == 8
    sixty_four = replace(nvl72, gpus_per_node=64)
    one = api.simulate("llama3-70b", "gb200-nvl72", gpus=128, tp=2, global_batch=256, zero_stage=1).iloc[0]
    same = api.simulate("llama3-70b", sixty_four, gpus=128, tp=2, global_batch=256, zero_stage=1).iloc[0]
    assert one.step_time_s == same.step_time_s and one.memory_gib == same.memory_gib
    best = api.plan("deepseek-v3", "gb200-nvl72", gpus=256, global_batch=1024, ep=[64]).iloc[0]
    again = api.simulate("deepseek-v3", "gb200-nvl72", gpus=256, tp=int(best.tp), pp=int(best.pp), ep=64,
                         cp=int(best.cp), vpp=int(best.vpp), micro_batch=int(best.micro_batch), global_batch=1024,
                         zero_stage=int(best.zero_stage), recompute=str(best.recompute),
                         offload_activation_layers=int(best.offload_activation_layers),
                         zero_shard_group=int(best.zero_shard_group), sequence_parallel=bool(best.sequence_parallel),
                         recompute_num_layers=int(best.recompute_num_layers),
                         recompute_layers_decrement=int(best.recompute_layers_decrement)).iloc[0]
    assert again.step_time_s == pytest.approx(best.step_time_s, rel=1e-9)
    grid = {"models": ["llama3-70b"], "clusters": ["gb200-nvl72"], "gpus": [128], "global_batch": [256],
            "search": "simulate", "config": {"tp": [2], "zero_stage": [1]}}
    row = api.sweep_grid(grid).iloc[0]
    assert row.step_time_s == one.step_time_s and row.memory_gib == one.memory_gib
    with pytest.raises(InputError, match="ep x etp = 16 does not tile the 72-GPU"):
        api.simulate("qwen3-30b-a3b", "gb200-nvl72", gpus=144, ep=16, global_batch=144, zero_stage=1)
    with pytest.raises(InputError, match="plan each GPU count on its own"):
        api.plan("llama3-70b", "gb200-nvl72", gpus=(128, 144), global_batch=288)


def test_a_plans_gpu_range_shares_one_placement_or_is_refused():
    """128 GPUs sit 64 a rack, 144 whole racks of 72: one search cannot cover both; 130-131 GPUs
    (not whole trays of 4) and 256 alone keep one placement each; an NVSwitch node has none."""
    from hardware_specs.catalog import load_cluster
    import pytest
    from hardware_specs.errors import InputError
    from planners.plan import _placed_for_range
    nvl72, dgx = load_cluster("gb200-nvl72"), load_cluster("dgx-h100")
    # 128, 132, 136, 140, 144 GPUs: 32, 33, 34, 35, 36 trays, segments of 16, 11, 17, 7, 18 trays
    with pytest.raises(InputError, match="sit 28, 44, 64, 68, 72 GPUs a 72-GPU domain"):
        _placed_for_range(nvl72, 128, 144)
    assert _placed_for_range(nvl72, 130, 131) is nvl72
    assert _placed_for_range(nvl72, 256, 256).gpus_per_node == 64
    assert _placed_for_range(nvl72, 8, 72) is nvl72
    assert _placed_for_range(dgx, 8, 1024) is dgx


def test_simulate_and_the_sweep_place_each_configuration_once(monkeypatch):
    """One helper places and checks a job (``placed_and_checked``): 128 GPUs sit 64 a rack, 144 with
    ep 16 is refused naming ep; a sweep of two configurations places each once (it placed each
    three times, with its own copy of simulate's placement-then-check)."""
    import pytest
    import hardware_specs.placement as placement
    from hardware_specs.catalog import load_cluster
    from hardware_specs.errors import InputError
    from paraplan import api
    from simulator.parallel_config import ParallelConfig
    from simulator.validate_config import placed_and_checked
    nvl72 = load_cluster("gb200-nvl72")
    assert placed_and_checked(nvl72, ParallelConfig(dp=64, tp=2, global_batch=256)).gpus_per_node == 64
    with pytest.raises(InputError) as err:
        placed_and_checked(nvl72, ParallelConfig(dp=144, ep=16, global_batch=144))
    assert err.value.field == "ep"
    calls = []
    real = placement.placed_cluster
    monkeypatch.setattr(placement, "placed_cluster", lambda c, n: calls.append(n) or real(c, n))
    grid = {"models": ["llama3-70b"], "clusters": ["gb200-nvl72"], "gpus": [128], "global_batch": [256],
            "search": "simulate", "config": {"tp": [2, 4], "zero_stage": [1]}}
    rows = api.sweep_grid(grid)
    assert len(rows) == 2 and calls == [128, 128]


def test_simulate_and_plan_say_where_a_multi_rack_job_sits_and_say_nothing_otherwise():
    from click.testing import CliRunner

    from paraplan.cli import main
    note = ("128 GPUs sit 64 in each 72-GPU NVLink domain of gb200-nvl72 (Slurm segments of 16 hosts, "
            "as Megatron-Bridge's launcher asks: hardware_specs/placement.py)")
    sim = CliRunner().invoke(main, ["simulate", "-m", "llama3-70b", "-c", "gb200-nvl72", "-n", "128", "--tp", "2",
                                    "--global-batch", "256"])
    assert sim.exit_code == 0 and f"gpus     128  ({note})" in sim.output
    plan = CliRunner().invoke(main, ["plan", "-m", "llama3-70b", "-c", "gb200-nvl72", "-n", "128",
                                     "--global-batch", "256", "--top", "1"])
    assert plan.exit_code == 0 and note in plan.output.splitlines()[:5]
    whole = CliRunner().invoke(main, ["simulate", "-m", "llama3-70b", "-c", "gb200-nvl72", "-n", "144", "--tp", "2",
                                      "--global-batch", "288"])
    # whole racks: said too (README: multi-rack jobs' reports say where they sit)
    assert whole.exit_code == 0 and ("144 GPUs sit in 2 whole 72-GPU NVLink domains of gb200-nvl72 (Slurm segments "
                                     "of 18 hosts, a domain each") in whole.output
    one = CliRunner().invoke(main, ["simulate", "-m", "llama3-70b", "-c", "gb200-nvl72", "-n", "64", "--tp", "2",
                                    "--global-batch", "128"])
    assert one.exit_code == 0 and "NVLink domain" not in one.output
