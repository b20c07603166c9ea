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
