"""``paraplan sweep``: fixes from a review of the command (its rows hold the plan's detail
columns, and a grid point that runs as another configuration is marked invalid)."""
from __future__ import annotations

import pytest

from paraplan import api
from paraplan.sweeps import run_sweep, spec_from_dict


def test_a_sweep_row_holds_the_plans_host_memory_and_pipeline_exactness():
    """The winner dp128 tp2 mb4 z3 off63 offloads 63 layers' activations, 134 GiB of host memory
    a GPU: the sweep row had no column for it, where ``plan --csv`` has ``host_memory_gib``."""
    df = api.sweep_grid({"search": "best", "models": ["gpt3-175b"], "clusters": ["dgx-a100-80gb"], "gpus": [256],
                         "global_batch": [1536]})
    row = df.iloc[0]
    assert row.offload_activation_layers > 0 and row.host_memory_gib > 100
    assert bool(row.pipeline_exact) is True
    from planners.plan import DETAIL_COLUMNS
    assert set(DETAIL_COLUMNS) <= set(df.columns)
    # a simulated point's row holds them too (what the step model gives for its configuration)
    grid = api.sweep_grid({"search": "simulate", "models": ["llama3-8b"], "clusters": ["dgx-h100"], "gpus": [8],
                           "global_batch": [64], "config": {"tp": [1, 2], "pp": [1, 2]}})
    for _, r in grid.iterrows():
        report = api.simulate_report("llama3-8b", "dgx-h100", gpus=8, global_batch=64, tp=int(r.tp), pp=int(r.pp))[0]
        host = max(s["host_memory_bytes"] for s in report.stage_memory) / 2**30
        assert r.host_memory_gib == pytest.approx(host, rel=1e-12, abs=1e-12)
    assert grid.pipeline_exact.notna().all() and grid.host_memory_gib.notna().all()


def test_a_simulated_grid_point_that_would_run_as_another_configuration_is_invalid_with_simulates_reason():
    """Grid 1f1b with vpp 2 ran interleaved (its row said interleaved and equalled another point's),
    sequence_parallel true at tp 1 ran off (its row said False), while zb-h1 with vpp 2 was
    invalid: each row's columns now are its grid point's, and ``paraplan simulate``'s refusal is
    the reason."""
    from click.testing import CliRunner
    from paraplan.cli import main
    config = {"tp": [1, 2], "pp": [2], "vpp": [1, 2], "schedule": ["1f1b", "interleaved", "zb-h1"],
              "sequence_parallel": [False, True]}
    df = api.sweep_grid({"search": "simulate", "models": ["llama3-8b"], "clusters": ["dgx-h100"], "gpus": [16],
                         "global_batch": [64], "stacks": ["megatron-core"], "config": config})
    one_f_one_b = df[(df.schedule == "1f1b") & (df.vpp == 2)]
    no_sp = df[(df.tp == 1) & df.sequence_parallel.astype(bool)]
    assert len(one_f_one_b) == 4 and (one_f_one_b.status == "invalid").all()
    assert len(no_sp) == 6 and (no_sp.status == "invalid").all()
    for rows, flags in ((one_f_one_b[one_f_one_b.tp == 2], ["--tp", "2", "--vpp", "2", "--schedule", "1f1b"]),
                        (no_sp[no_sp.schedule == "interleaved"], ["--tp", "1", "--vpp", "2", "--schedule", "interleaved",
                                                                  "--sequence-parallel"])):
        out = CliRunner().invoke(main, ["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16",
                                        "--pp", "2", "--global-batch", "64", *flags])
        assert out.exit_code != 0
        for reason in rows.reason:
            assert reason and reason in out.output
    ran = df[df.status != "invalid"]
    assert len(ran) > 0 and not ran.duplicated(["step_time_s", "memory_gib"]).any()
    # every row that ran shows its own grid point's values
    for _, row in ran.iterrows():
        assert row.schedule != "1f1b" or row.vpp == 1
        assert not (row.tp == 1 and bool(row.sequence_parallel))
