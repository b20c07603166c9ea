"""``paraplan sweep``: fixes from a review of the command (its rows hold the plan's detail
columns, and a grid point that runs as another configuration is marked invalid)."""
from __future__ import annotations

import pytest

from paraplan import api
from paraplan.sweeps import run_sweep, spec_from_dict


def test_a_sweep_row_holds_the_plans_host_memory_and_pipeline_exactness():
    """GPT-3 175B on 256 H100: the best plan offloads activations to host memory (on 2026-12-06,
    dp32 tp8 mb16 z2 off86 sp, 183 GiB a GPU; the winner has changed with the model before, so
    only "offloads, over 100 GiB" is asserted): the sweep row had no column for it, where
    ``plan --csv`` has ``host_memory_gib``."""
    df = api.sweep_grid({"search": "best", "models": ["gpt3-175b"], "clusters": ["dgx-h100"], "gpus": [256],
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
    from paraplan.sweeps.reasons import sweep_reason
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
        for reason in rows.reason:      # in the spec's words: settings, not --options
            assert reason and reason in sweep_reason(out.output)
    ran = df[df.status != "invalid"]
    assert len(ran) > 0 and not ran.duplicated(["step_time_s", "memory_gib"]).any()
    # every row that ran shows its own grid point's values
    for _, row in ran.iterrows():
        assert row.schedule != "1f1b" or row.vpp == 1
        assert not (row.tp == 1 and bool(row.sequence_parallel))


def _edit(path, old, new):
    """Replace text in a file, with a later modification time however coarse the clock."""
    import os
    path.write_text(path.read_text().replace(old, new))
    os.utime(path, (path.stat().st_mtime + 1,) * 2)


def test_an_edited_model_file_of_a_serving_sweep_is_evaluated_again(tmp_path):
    """A serving chunk's key held the model's path, not what it loads to: num_layers 32 -> 64 in
    the file gave the 32-layer numbers again on a rerun into the same folder."""
    import shutil
    from pathlib import Path
    import pandas as pd
    model = tmp_path / "mymodel.yaml"
    shutil.copy(Path(__file__).resolve().parents[1] / "model_specs" / "presets" / "llama3.1-8b.yaml", model)
    spec = spec_from_dict({"kind": "serving", "models": [str(model)], "systems": ["dgx-h100"], "gpus": [8],
                           "modes": ["agg"]})
    out = tmp_path / "out"
    first = run_sweep(spec, out, local=True)
    _edit(model, "num_layers: 32", "num_layers: 64")
    deeper = run_sweep(spec, out, local=True)
    assert deeper.tokens_per_s_per_gpu.iloc[0] < 0.8 * first.tokens_per_s_per_gpu.iloc[0]
    pd.testing.assert_frame_equal(deeper, run_sweep(spec, tmp_path / "fresh", local=True))


def test_a_code_change_is_evaluated_again_not_read_from_the_old_chunks(tmp_path, monkeypatch):
    """The key held the package version, 0.1.0 in an editable install whatever the code: an
    edited formula returned the old numbers on a rerun into the same folder."""
    import sys
    import paraplan.sweeps.runner as runner
    package = tmp_path / "src" / "paraplan_fake_pkg"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("X = 1\n")
    (package / "data" / "fit.yaml").write_text("a: 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.setattr(runner, "CODE_PACKAGES", ("paraplan_fake_pkg",))
    digests = [runner.code_digest.__wrapped__()]
    _edit(package / "__init__.py", "X = 1", "X = 2")
    digests.append(runner.code_digest.__wrapped__())
    _edit(package / "data" / "fit.yaml", "a: 1", "a: 2")
    digests.append(runner.code_digest.__wrapped__())
    assert len(set(digests)) == 3
    sys.modules.pop("paraplan_fake_pkg", None)
    monkeypatch.undo()
    # and the key holds it: another digest evaluates every chunk again
    spec = spec_from_dict({"search": "simulate", "models": ["llama3-8b"], "clusters": ["dgx-h100"], "gpus": [8],
                           "global_batch": [64], "config": {"tp": [1, 2]}})
    run_sweep(spec, tmp_path / "out", local=True)
    calls = []
    real = runner.evaluate_chunk
    monkeypatch.setattr(runner, "evaluate_chunk", lambda *a: calls.append(1) or real(*a))
    run_sweep(spec, tmp_path / "out", local=True)
    assert calls == []
    monkeypatch.setattr(runner, "code_digest", lambda: "edited")
    run_sweep(spec, tmp_path / "out", local=True)
    assert len(calls) == len(runner.chunks(spec))


def test_a_value_inserted_into_an_inner_axis_evaluates_little_more_than_the_new_points(tmp_path, monkeypatch):
    """The points' indices were in the chunk key and chunks were index ranges: tp [1, 4] ->
    [1, 2, 4] renumbered every later point and evaluated the whole grid again. Chunks are now cut
    and keyed by the points' own values; the table equals a fresh run's."""
    import pandas as pd
    import paraplan.sweeps.runner as runner
    # one cluster (the outer axes gpus and pp still put blocks of points after each inserted
    # value; a second cluster only repeated the grid: 96 points evaluated three times over)
    grid = {"search": "simulate", "models": ["llama3-8b"], "clusters": ["dgx-h100"], "gpus": [16, 32],
            "global_batch": [64], "config": {"pp": [1, 2], "tp": [1, 4], "zero_stage": [0, 1],
                                             "recompute": ["none", "full"]}, "chunk_points": 4}
    run_sweep(spec_from_dict(grid), tmp_path / "out", local=True)
    wider = spec_from_dict({**grid, "config": {**grid["config"], "tp": [1, 2, 4]}})
    evaluated = []
    real = runner.evaluate_chunk
    monkeypatch.setattr(runner, "evaluate_chunk",
                        lambda *a: evaluated.extend(p for _, p in a[-1]) or real(*a))
    again = run_sweep(wider, tmp_path / "out", local=True)
    new = [p for p in evaluated if p["config"]["tp"] == 2]
    old = len(evaluated) - len(new)
    assert wider.n_points == 48
    assert len(new) == wider.n_points // 3 and old <= len(new)        # of the 32 points there already
    monkeypatch.undo()
    pd.testing.assert_frame_equal(again, run_sweep(wider, tmp_path / "fresh", local=True))


def test_a_grid_value_in_capitals_is_refused_or_run_as_its_lower_case_twin():
    """ParallelConfig reads enum names whatever their case; the sweep keeps them lower-case, so
    the check that refuses a point run as another configuration sees 1F1B as 1f1b (it had let
    1F1B with vpp 2 run as interleaved, and refused the default Ring at cp 1)."""
    from paraplan.sweeps.reasons import sweep_reason
    from paraplan.sweeps.spec import spec_from_dict
    base = {"search": "simulate", "models": ["llama3-8b"], "clusters": ["dgx-h100"], "gpus": [16],
            "global_batch": [64]}
    spec = spec_from_dict({**base, "config": {"schedule": ["1F1B", "ZB-H1"], "cp_kind": ["Ring"]}})
    assert spec.config["schedule"] == ("1f1b", "zb-h1") and spec.config["cp_kind"] == ("ring",)
    # a path whose component starts with two dashes is not an option
    assert sweep_reason("/tmp/--foo.yaml not found; raise --max-tp") == "/tmp/--foo.yaml not found; raise max_tp"
