"""Serving workers sit whole in NVLink domains (cost_models.worker_placement): the planner counts
only those, and serve simulate refuses a count that cannot be placed so. Numbers are counted by
hand from the domain sizes (GB200 NVL72: 72 GPUs a rack; DGX H100: 8 a node)."""
import numpy as np
import pytest
from click.testing import CliRunner

from cost_models.worker_placement import most_beside, pair_fits, whole_workers
from paraplan.cli import main


@pytest.mark.parametrize("gpus, worker, stage, domain, want", [
    (144, 16, 16, 72, 8),      # 4 whole 16-GPU workers a rack (64 of 72), not 144 // 16 = 9
    (144, 64, 64, 72, 2),
    (144, 8, 8, 72, 18),       # 8 divides 72: as before
    (144, 128, 128, 72, 1),    # rack 0 and 56 GPUs of rack 1
    (288, 128, 128, 72, 2),    # each from a rack's first GPU: racks 0-1 and 2-3
    (16, 16, 16, 72, 1),       # inside one rack: as before
    (24, 4, 4, 8, 6),          # 8-GPU nodes, a worker dividing the node: as before
    (24, 6, 2, 8, 3),          # tp 2 x pp 3: one to a node, not 24 // 6 = 4
    (24, 3, 1, 8, 6),          # pp 3: two to a node, not 8
    (12, 12, 4, 8, 1),         # tp 4 x pp 3 on 12 H100: node 0 and 4 GPUs of node 1
    (24, 12, 4, 8, 1),         # the second would start mid-node
    (32, 12, 4, 8, 2),
])
def test_whole_workers_counts_by_hand(gpus, worker, stage, domain, want):
    assert whole_workers(gpus, worker, stage, domain) == want


def test_whole_workers_is_vectorised():
    got = whole_workers(144.0, np.array([16.0, 32.0, 64.0]), np.array([16.0, 32.0, 64.0]), 72)
    assert got.tolist() == [8.0, 4.0, 2.0]


def test_disaggregated_workers_sit_whole_too():
    # decode 64 in rack 0 leaves 8 GPUs there: no 16-GPU prefill worker; rack 1 holds 4 of them
    assert most_beside(144, 64, 64, 1, 16, 16, 72) == 4
    assert bool(pair_fits(144, 16, 16, 4, 64, 64, 1, 72))
    assert not bool(pair_fits(144, 16, 16, 5, 64, 64, 1, 72))     # 80 + 64 <= 144, but the 5th straddles
    # 8 prefill workers of 4 beside a 64-GPU decode worker: 2 in rack 0's last 8 GPUs, 6 in rack 1
    assert bool(pair_fits(144, 4, 4, 8, 64, 64, 1, 72))
    assert most_beside(144, 64, 64, 3, 4, 4, 72) == -1           # 3 decode workers of 64 do not fit
    # 3 decode workers of 32: 2 in rack 0 (8 GPUs left: 2 prefill of 4), 1 in rack 1 (40 left: 10)
    assert most_beside(144, 32, 32, 3, 4, 4, 72) == 12
    assert bool(pair_fits(144, 4, 4, 12, 32, 32, 3, 72))
    assert not bool(pair_fits(144, 4, 4, 13, 32, 32, 3, 72))
    # a 128-GPU decode worker (72 + 56) leaves 16 GPUs of rack 1: 4 prefill workers of 4
    assert most_beside(144, 128, 128, 1, 4, 4, 72) == 4


R1 = ["-m", "deepseek-r1", "-s", "gb200-nvl72", "-b", "trtllm", "--precision", "nvfp4", "--isl", "1024", "--osl", "1024"]


def test_simulate_refuses_workers_straddling_racks():
    res = CliRunner().invoke(main, ["serve", "simulate", *R1, "--adp", "16", "--moe-ep", "16", "--batch", "144",
                                    "--workers", "9"])
    assert res.exit_code == 2
    assert "at most 8" in res.output and "NVLink domain" in res.output


def test_simulate_takes_them_on_enough_gpus():
    res = CliRunner().invoke(main, ["serve", "simulate", *R1, "--adp", "16", "--moe-ep", "16", "--batch", "16",
                                    "--workers", "9", "--gpus", "216", "--json"])
    assert res.exit_code == 0, res.output


def test_plan_counts_whole_workers_only():
    from planners.serving.search import _agg
    from simulator.serving.context import ServingContext
    ctx = ServingContext.build("deepseek-r1", "gb200-nvl72", "trtllm", "nvfp4", "nvfp4")
    df = _agg(ctx, 144, 1024, 1024, 1, allow_pp=False)
    sixteen = df[(df.tp == 1) & (df.adp == 16)]
    assert len(sixteen) and (sixteen.workers == 8).all() and (sixteen.gpus_used == 128).all()


def test_api_serve_simulate_takes_the_gpus_given():
    from hardware_specs.errors import InputError
    from paraplan import serving_api
    args = dict(precision="nvfp4", backend="trtllm", isl=1024, osl=1024, adp=16, moe_ep=16, batch=16)
    with pytest.raises(InputError, match="at most 8"):       # 2 racks hold 4 whole workers of 16 each
        serving_api.serve_simulate("deepseek-r1", "gb200-nvl72", workers=9, **args)
    row = serving_api.serve_simulate("deepseek-r1", "gb200-nvl72", workers=9, gpus=216, **args).iloc[0]
    assert row["workers"] == 9


@pytest.mark.parametrize("gpus, ok", [(10**30, False), (2**24 + 1, False), (2**24, True)])
def test_simulate_refuses_gpus_above_the_largest_supported(gpus, ok):
    """--gpus had no ceiling: 10**30 ran, its domain count a rounded float. The workers' own GPUs
    stop at simulator.parallel_config.MAX_GPUS = 2**24 = 16,777,216; the GPUs given stop there too
    (a cap of serve plan's 4096 would refuse 1,024 workers of 8 given their own 8,192)."""
    from hardware_specs.errors import InputError
    from simulator.serving.deployment import Deployment, worker_layout
    lay = worker_layout(16, 1, 1, None, None, 16)
    make = lambda: Deployment(model="deepseek-v3", system="gb200-nvl72", backend="vllm", layout=lay,  # noqa: E731
                              workers=9, gpus_given=gpus)
    if ok:
        assert make().gpus_given == 2**24
        return
    with pytest.raises(InputError, match="above the largest supported 16,777,216"):
        make()
    res = CliRunner().invoke(main, ["serve", "simulate", "-m", "deepseek-v3", "-s", "gb200-nvl72", "--tp", "16",
                                    "--workers", "9", "--gpus", str(gpus)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert res.output.startswith("error: --gpus:")


@pytest.mark.parametrize("workers, worker, stage, domain, want", [
    (1, 80, 16, 72, 88),       # 4 stages of 16 on rack 1 (64), the fifth on rack 2: 72 + 16
    (2, 80, 16, 72, 232),      # the second starts at rack 3: 72 + 72 + 72 + 16
    (9, 16, 16, 72, 160),      # 4 + 4 to a rack, the ninth on rack 3's first 16
    (8, 16, 16, 72, 136),      # 72 + 64
    (3, 8, 8, 8, 24), (1, 128, 128, 72, 128)])
def test_least_gpus_by_hand(workers, worker, stage, domain, want):
    from cost_models.worker_placement import least_gpus
    assert least_gpus(workers, worker, stage, domain) == want
    assert whole_workers(want, worker, stage, domain) >= workers > whole_workers(want - 1, worker, stage, domain)


def test_a_worker_given_too_few_gpus_is_one_worker_and_the_fix_names_the_gpus_that_hold_it():
    res = CliRunner().invoke(main, ["serve", "simulate", "-m", "deepseek-v3", "-s", "gb200-nvl72", "--tp", "16",
                                    "--pp", "5", "--gpus", "87"])
    assert res.exit_code == 2
    assert "1 worker of 80 GPUs does not sit whole in 87 GPUs" in res.output and "--gpus 88" in res.output


def test_disagg_refusal_counts_decode_workers_placed_first_too():
    """3 prefill workers of 4 and decode workers of 32 GB200 on 172 GPUs (2 racks + 28): decode
    first sits 2 to a rack (4), the prefill workers in the 8 free GPUs of each rack; prefill first
    leaves 60 GPUs of rack 1 (1 decode worker) + 2 on rack 2 = 3. The refusal of 5 had said
    "at most 3" (prefill first only); 4 runs."""
    base = ["serve", "simulate", "-m", "qwen3-235b-a22b", "-s", "gb200-nvl72", "-b", "sglang", "--mode", "disagg",
            "--prefill-adp", "4", "--prefill-moe-ep", "4", "--prefill-workers", "3", "--decode-adp", "32",
            "--decode-moe-ep", "32", "--gpus", "172"]
    res = CliRunner().invoke(main, [*base, "--decode-workers", "5"])
    assert res.exit_code == 2 and "at most 4 do" in res.output and "--decode-workers 4" in res.output, res.output
    assert CliRunner().invoke(main, [*base, "--decode-workers", "4"]).exit_code == 0
