"""``paraplan sweep``: the grid, its chunks, resuming, and the same rows on Dask as in-process."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from hardware_specs.errors import InputError
from paraplan import api
from paraplan.cli import main
from paraplan.sweeps import run_sweep, spec_from_dict
from paraplan.sweeps.runner import chunk_key, chunks

REPO = Path(__file__).resolve().parents[1]
GRID = {"search": "simulate", "models": ["llama3-8b", "mixtral-8x7b"], "clusters": ["dgx-h100", "mi300x-node"],
        "gpus": [16, 32], "global_batch_tokens": [1048576], "stacks": ["megatron-core"],
        "config": {"tp": [1, 2, 4], "pp": [1, 2], "ep": [1, 8], "zero_stage": [0, 1], "recompute": ["none", "full"]},
        "chunk_points": 37}


def test_points_are_the_product_of_the_axes_in_order():
    spec = spec_from_dict(GRID)
    points = list(spec.points())
    assert spec.n_points == len(points) == 2 * 2 * 2 * 1 * 3 * 2 * 2 * 2 * 2
    assert points[0]["model"] == "llama3-8b" and points[-1]["model"] == "mixtral-8x7b"
    assert points[0]["config"] == {"tp": 1, "pp": 1, "ep": 1, "zero_stage": 0, "recompute": "none"}
    parts = chunks(spec)      # in point order, at most chunk_points each (cut by the points' values)
    assert [q for c in parts for q in c] == list(enumerate(points)) and max(len(c) for c in parts) == 37


def test_a_best_sweep_reports_progress_every_few_plan_searches_not_every_500():
    # a best point is a plan search (~0.5 s); 500 of them in one chunk left the bar still for minutes
    best = {k: v for k, v in GRID.items() if k not in ("config", "chunk_points")}
    sizes = [len(c) for c in chunks(spec_from_dict({**best, "search": "best"}))]
    assert sum(sizes) == 8 and max(sizes) <= 4
    sizes = [len(c) for c in chunks(spec_from_dict({**best, "search": "best", "chunk_points": 8}))]
    assert sum(sizes) == 8 and max(sizes) <= 8
    assert [len(c) for c in chunks(spec_from_dict({**best, "search": "simulate"}))] == [8]


@pytest.mark.parametrize("change, field", [({"models": []}, "models"), ({"kind": "inference"}, "kind"),
                                           ({"config": {"tq": [1]}}, "config.tq"),
                                           ({"gpus": [0]}, "gpus"), ({"global_batch": [8]}, "global_batch"),
                                           ({"stacks": [1.5]}, "stacks"), ({"chunk_points": 0}, "chunk_points"),
                                           ({"nope": 1}, "nope"),
                                           # a repeated value evaluated every point of it twice
                                           ({"models": ["llama3-8b", "llama3-8b"]}, "models"),
                                           ({"gpus": [8, 8]}, "gpus")])
def test_a_bad_spec_is_one_input_error_naming_the_key(change, field):
    with pytest.raises(InputError) as err:
        spec_from_dict({**GRID, **change})
    assert err.value.field == field


def test_a_misspelt_config_key_is_named_as_such_not_as_a_bad_value():
    # config values were type-checked before the key: {tpp: [1]} read "expected names, got 1"
    with pytest.raises(InputError) as err:
        spec_from_dict({**GRID, "config": {"tpp": [1]}})
    assert str(err.value) == "config.tpp: not a field a sweep sets (did you mean tp, pp, vpp?)"


def test_a_misspelt_config_value_or_a_repeated_key_fails_the_spec(tmp_path):
    """recompute: [full, sel] made half the points 'invalid' rows; a key written twice kept the
    last silently (models: twice swept only the second list)."""
    with pytest.raises(InputError) as err:
        spec_from_dict({**GRID, "config": {"tp": [1], "recompute": ["full", "sel"]}})
    assert str(err.value) == "config.recompute: unknown value 'sel' (choose one of none, selective, full)"
    with pytest.raises(InputError) as err:
        spec_from_dict({**GRID, "config": {"schedule": ["1F1B", "zero-bubble"]}})
    assert err.value.field == "config.schedule" and "'zero-bubble'" in err.value.message
    assert spec_from_dict({**GRID, "config": {"schedule": ["1F1B"], "cp_kind": ["ring"]}}).config["schedule"] == ("1f1b",)   # matched whatever the case, kept lower-case (its checks compare one spelling)
    twice = tmp_path / "twice.yaml"
    twice.write_text("models: [llama3-8b]\nmodels: [llama3-70b]\nclusters: [dgx-h100]\ngpus: [8]\nglobal_batch: [8]\n")
    result = CliRunner().invoke(main, ["sweep", str(twice), "--out", str(tmp_path / "out"), "--local"])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: spec: {twice} line 2: key 'models' appears twice in one mapping (keep one of them)"


@pytest.mark.parametrize("axis, name, message", [
    ("models", "llama3-8bb", "unknown model 'llama3-8bb'"),
    ("clusters", "dgx-h1000", "unknown cluster 'dgx-h1000'"),
    ("stacks", "megatron", "unknown stack 'megatron'")])
def test_an_unknown_name_fails_the_sweep_before_it_runs(tmp_path, axis, name, message):
    """A misspelt name was a column of invalid / infeasible rows and exit 0; it is the spec's
    error, with the catalog's did-you-mean, exit 2, and no results written."""
    grid = {**GRID, axis: [*GRID.get(axis, ["megatron-core"]), name]}
    with pytest.raises(InputError) as err:
        api.sweep_grid(grid)
    assert err.value.field == axis and err.value.message == message and "did you mean" in err.value.fix
    import yaml
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(grid))
    result = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "out"), "--local"])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {axis}: {message} (did you mean")
    assert not (tmp_path / "out").exists()          # refused before the output folder is made


def test_simulated_points_equal_api_simulate_row_by_row():
    df = api.sweep_grid(GRID)
    spec = spec_from_dict(GRID)
    assert len(df) == spec.n_points and list(df["point"]) == list(range(spec.n_points))
    assert set(df["status"]) <= {"ok", "invalid", "does not fit"} and (df["status"] == "ok").sum() > 20
    assert df.loc[df.status == "invalid", "reason"].str.len().gt(0).all()
    ok = df[df.status == "ok"].sample(8, random_state=18)
    for _, row in ok.iterrows():       # api.simulate applies the point's stack as the sweep does
        one = api.simulate(row.model, row.cluster, gpus=int(row.gpus), tp=int(row.tp), pp=int(row.pp), ep=int(row.ep),
                           zero_stage=int(row.zero_stage), recompute=row.recompute, dtype=row["dtype"],
                           global_batch_tokens=int(row.global_batch_tokens), stack=row["stack"]).iloc[0]
        assert row.memory_gib == pytest.approx(one.memory_gib, rel=1e-12)
        assert row.step_time_s == pytest.approx(one.step_time_s, rel=1e-9)
        assert row.mfu_bf16_pct == pytest.approx(one.mfu_bf16_pct, rel=1e-9)
        assert row.config == one.config           # the label simulate and plan print
    assert (df.loc[df.status == "invalid", "config"] == "").all()
    assert bool(df[df.cluster == "mi300x-node"]["efficiency_fitted"].any()) is False
    assert bool(df[df.cluster == "dgx-h100"]["efficiency_fitted"].all()) is True
    # a point that cannot run keeps its axis values: its row says which grid point failed
    bad = df[df.status == "invalid"]
    axes = ["model", "cluster", "gpus", "tp", "pp", "ep", "zero_stage", "recompute", "dtype", "global_batch_tokens"]
    assert len(bad) and bad[axes].notna().all().all()
    assert not bad.duplicated(axes).any()
    assert set(bad["dtype"]) <= {"bf16"}          # resolved per GPU, as the rows that ran


def test_finished_chunks_are_not_recomputed(tmp_path, monkeypatch):
    spec = spec_from_dict(GRID)
    first = run_sweep(spec, tmp_path, local=True)
    files = sorted((tmp_path / "chunks").glob("*.parquet"))
    assert len(files) == len(chunks(spec)) and {f.stem for f in files} == {chunk_key(spec, c) for c in chunks(spec)}
    files[0].unlink()                                   # one chunk lost: only it is evaluated again
    calls = []
    import paraplan.sweeps.runner as runner
    real = runner.evaluate_chunk
    monkeypatch.setattr(runner, "evaluate_chunk", lambda *a: calls.append(1) or real(*a))
    again = run_sweep(spec, tmp_path, local=True)
    assert len(calls) == 1
    pd.testing.assert_frame_equal(first, again)


def test_an_edited_model_cluster_or_gpu_file_is_evaluated_again(tmp_path):
    """The chunk's name hashed the file's path, not what it held: num_layers 32 -> 64 in the
    model file reran as the 32-layer rows (4.21 s, 66.7 GiB, ok) where a fresh folder gave 7.89 s
    and 128 GiB, does not fit. The same for a cluster file and the GPU file it names."""
    import os
    import shutil

    def edit(path, old, new):      # and a later modification time, however coarse the clock
        path.write_text(path.read_text().replace(old, new))
        os.utime(path, (path.stat().st_mtime + 1,) * 2)
    model = tmp_path / "mymodel.yaml"
    shutil.copy(REPO / "model_specs" / "presets" / "llama3-8b.yaml", model)
    gpu = tmp_path / "mygpu.yaml"
    shutil.copy(REPO / "hardware_specs" / "gpus" / "h100-sxm-80gb.yaml", gpu)
    cluster = tmp_path / "mycluster.yaml"
    cluster.write_text((REPO / "hardware_specs" / "clusters" / "dgx-h100.yaml").read_text()
                       .replace("name: dgx-h100", "name: mycluster").replace("gpu: h100-sxm-80gb", "gpu: mygpu.yaml"))
    spec = spec_from_dict({"search": "simulate", "models": [str(model)], "clusters": [str(cluster)], "gpus": [16],
                           "global_batch": [64], "config": {"tp": [1], "pp": [2], "zero_stage": [1]}})
    out = tmp_path / "out"
    first = run_sweep(spec, out, local=True).iloc[0]
    edit(model, "num_layers: 32", "num_layers: 64")
    deeper = run_sweep(spec, out, local=True).iloc[0]
    assert deeper.memory_gib > 1.8 * first.memory_gib and deeper.step_time_s > 1.8 * first.step_time_s
    assert deeper.status == "does not fit"
    pd.testing.assert_series_equal(deeper, run_sweep(spec, tmp_path / "fresh", local=True).iloc[0])
    edit(gpu, "hbm_gib: 80", "hbm_gib: 160")
    assert run_sweep(spec, out, local=True).iloc[0].status == "ok"
    edit(cluster, "bw_gbit_per_s: 400", "bw_gbit_per_s: 100")
    assert run_sweep(spec, out, local=True).iloc[0].step_time_s > deeper.step_time_s
    assert len(list((out / "chunks").glob("*.parquet"))) == 4


def test_dask_local_cluster_gives_the_in_process_rows(tmp_path):
    # two worker threads (worker processes cost ~5 s to start on 2 cores; the chunk tasks and
    # their results go through the same scheduler either way; benchmarks/sweep_speed.py runs
    # worker processes)
    distributed = pytest.importorskip("dask.distributed")
    # the grid at 16 GPUs alone: 192 points in 12 chunks for the two workers, every model x cluster
    # x status of the whole grid among them (the 32-GPU half repeats them: ok, invalid and does
    # not fit on both models and both clusters), each of the three runs half as long
    spec = spec_from_dict({**GRID, "gpus": [16]})
    assert len(chunks(spec)) >= 4
    local = run_sweep(spec, local=True)
    # mixtral-8x7b has invalid points too: megatron-core (Megatron-Core >= 0.10) runs etp = tp where
    # the point states none (a760eee), and tp 2 pp 2 ep 8 on 16 GPUs (dp 4) needs ep*etp = 8*2 = 16
    # to divide dp*cp*tp = 4*1*2 = 8 (tp 4 pp 2: 32 and 8), which it does not
    assert set(map(tuple, local[["model", "cluster", "status"]].drop_duplicates().to_numpy())) == \
        {(m, c, s) for m in GRID["models"] for c in GRID["clusters"] for s in ("ok", "invalid", "does not fit")}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        remote = run_sweep(spec, tmp_path, client=client)
        # the same scheduler by its address (--scheduler): the connection made in its own thread
        by_address = run_sweep(spec, tmp_path / "by_address", scheduler=cluster.scheduler_address)
    pd.testing.assert_frame_equal(local, remote)
    pd.testing.assert_frame_equal(local, by_address)


def test_cli_writes_parquet_and_csv_with_one_row_per_point(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("search: simulate\nmodels: [gpt3-1.3b]\nclusters: [dgx-h100]\ngpus: [8]\n"
                    "global_batch: [64]\nconfig: {tp: [1, 2], zero_stage: [0, 1, 2]}\n")
    result = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "out"), "--local"])
    assert result.exit_code == 0, result.output
    parquet = pd.read_parquet(tmp_path / "out" / "results.parquet")
    csv = pd.read_csv(tmp_path / "out" / "results.csv")
    assert len(parquet) == len(csv) == 6 and "6 points" in result.stdout
    assert {"step_time_s", "tokens_per_s", "memory_gib", "mfu_bf16_pct"} <= set(parquet.columns)
    help_text = CliRunner().invoke(main, ["sweep", "--help"]).stdout
    for key in ("models, clusters, gpus", "global_batch | global_batch_tokens", "seq_len, stacks, dtypes", "search",
                "config", "kind, chunk_points, description"):
        assert key in help_text, key          # the keys are taught where the user looks, not in a source file
    bad = CliRunner().invoke(main, ["sweep", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "o2")])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: spec")


def test_a_simulate_sweep_takes_simulates_expert_switches_as_config_axes():
    # mixtral-8x7b, 16 x H100, ep 8, selective recomputation (Megatron-Core's combined 1F1B refuses
    # a full one): the switches change only the expert all-to-all's exposure,
    # so the step with both on is never slower, and the rows equal api.simulate with the switch
    grid = {"search": "simulate", "models": ["mixtral-8x7b"], "clusters": ["dgx-h100"], "gpus": [16],
            "global_batch_tokens": [1048576],
            "config": {"ep": [8], "zero_stage": [1], "recompute": ["selective"], "ep_comm_overlap": [False, True],
                       "ep_dispatch_dedup": [False, True]}}
    df = api.sweep_grid(grid)
    assert df["step_time_s"].notna().all() and "invalid" not in set(df["status"])    # timed, fit or not
    off, on = df.iloc[0], df.iloc[3]
    assert on.ep_comm_exposed_s < off.ep_comm_exposed_s and on.step_time_s < off.step_time_s
    one = api.simulate("mixtral-8x7b", "dgx-h100", gpus=16, ep=8, zero_stage=1, recompute="selective",
                       global_batch_tokens=1048576, ep_comm_overlap=True, ep_dispatch_dedup=True).iloc[0]
    assert on.step_time_s == pytest.approx(one.step_time_s, rel=1e-9)
    with pytest.raises(InputError) as err:
        spec_from_dict({**grid, "config": {"ep_comm_overlap": ["yes"]}})
    assert err.value.field == "config.ep_comm_overlap"


def test_a_sweep_without_dtypes_runs_each_gpu_in_its_16_bit_type():
    """V100 has no bf16 peak: a spec that lists no dtypes ran every point in bf16 and turned each
    V100 point into 'dtype: v100-sxm-32gb has no bf16 peak'; the default is now each GPU's 16-bit
    type (fp16 there, bf16 on H100), as paraplan simulate and plan default."""
    grid = dict(kind="training", search="simulate", models=["llama3-8b"], clusters=["dgx2-v100", "dgx-h100"],
                gpus=[16], global_batch_tokens=[2**20], config={"tp": [8], "zero_stage": [1]})
    df = api.sweep_grid(grid)
    assert list(df["status"]) == ["ok", "ok"] and list(df["dtype"]) == ["fp16", "bf16"]
    one = api.simulate("llama3-8b", "dgx2-v100", gpus=16, tp=8, zero_stage=1, global_batch_tokens=2**20).iloc[0]
    assert df.step_time_s.iloc[0] == pytest.approx(float(one.step_time_s), rel=1e-9)
    assert df.mfu_fp16_pct.iloc[0] == pytest.approx(float(one.mfu_fp16_pct), rel=1e-9)
    best = api.sweep_grid({**grid, "search": "best", "config": {}})
    assert best.status.iloc[0] == "ok" and best["dtype"].iloc[0] == "fp16"


def test_a_best_sweep_row_holds_every_field_the_planner_set_so_it_reproduces_the_plan(tmp_path):
    """Llama-3-70B on 32 H100, batch 128: the best plan offloads the activations of 72 layers per
    chunk at pp 1 and ZeRO-3 (4 at pp 2 x vpp 8 and ZeRO-2 until Megatron-Core refused ZeRO-2/3
    under a pipeline, lacks zero2_with_pipeline; 79 at pp 1 until ZeRO-2 held the computing
    layer's whole gradient before its reduce-scatter; on 64 H100 it offloaded 37 until the copies
    began to take turns with the NIC traffic on the PCIe link). The sweep row had no offload_activation_layers column (nor
    zero_shard_group, recompute_num_layers, recompute_layers_decrement), so it named a plan that
    does not fit; its columns are now paraplan plan's."""
    from planners.plan import OUTPUT_COLUMNS
    grid = {"models": ["llama3-70b"], "clusters": ["dgx-h100"], "gpus": [32], "global_batch": [128]}
    row = api.sweep_grid(grid).iloc[0]
    assert (row.tp, row.pp, row.vpp, row.zero_stage, row.offload_activation_layers) == (1, 1, 1, 3, 72)
    planned = api.plan("llama3-70b", "dgx-h100", gpus=32, global_batch=128).iloc[0]
    for k in OUTPUT_COLUMNS:
        if k != "mfu":
            assert row[k] == planned[k], k
    assert row.config == planned.config == "dp32 tp1 pp1 mb1 z3 off72"   # plan --csv's label too
    one = api.simulate("llama3-70b", "dgx-h100", gpus=32, tp=1, pp=1, micro_batch=1, global_batch=128,
                       zero_stage=3, offload_activation_layers=72).iloc[0]
    assert one.memory_gib == pytest.approx(row.memory_gib, rel=1e-9) and row.memory_gib <= 76.0
    # without the offload the same layout does not fit in the 76 GiB the search allows
    plain = api.simulate("llama3-70b", "dgx-h100", gpus=32, tp=1, pp=1, micro_batch=1, global_batch=128,
                         zero_stage=3).iloc[0]
    assert plain.memory_gib > 76.0

    import yaml
    spec = tmp_path / "best.yaml"
    spec.write_text(yaml.safe_dump(grid))
    result = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "out"), "--local"])
    assert re.fullmatch(r"1 point in [\d.]+ s \((0\.\d+|[1-9][\d.]*) points/s\): 1 ok", result.stdout.splitlines()[0])
    csv_row = pd.read_csv(tmp_path / "out" / "results.csv").iloc[0]
    assert csv_row.offload_activation_layers == 72 and csv_row.recompute_layers_decrement == 0


def _best_in_a_daemon(queue):
    try:
        row = api.plan("llama3-70b", "dgx-h100", gpus=2048, global_batch=2048).iloc[0]
        queue.put((row.tokens_per_s, row.tp, row.pp, row.cp, row.zero_stage))
    except BaseException as exc:  # noqa: BLE001 - the parent asserts on what happened
        queue.put(f"{type(exc).__name__}: {exc}")


def test_a_best_search_runs_inside_a_daemonic_process_as_a_dask_worker_is():
    # A sweep's Dask workers (LocalCluster processes=True, the CLI's default) are daemonic, and a
    # daemonic process may not fork: `search: best` stopped every such sweep with "daemonic
    # processes are not allowed to have children". The search there runs alone, and finds what
    # it finds in this process (2,048 H100: a space past the size that forks a pool).
    import multiprocessing as mp
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("needs the fork start method")
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_best_in_a_daemon, args=(queue,), daemon=True)
    child.start()
    got = queue.get(timeout=240)
    child.join(timeout=30)
    here = api.plan("llama3-70b", "dgx-h100", gpus=2048, global_batch=2048).iloc[0]
    assert got == (here.tokens_per_s, here.tp, here.pp, here.cp, here.zero_stage)


def _listener(answer: bytes | None):
    """A TCP server on a free local port that is no Dask scheduler: it sends ``answer`` to each
    connection, or accepts and stays silent (None). Returns (address, stop)."""
    import socket
    import threading
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if answer is not None:
                try:
                    conn.sendall(answer * 10)
                except OSError:
                    pass
    threading.Thread(target=serve, daemon=True).start()

    def stop():
        server.close()
        for c in held:
            c.close()
    return f"tcp://127.0.0.1:{server.getsockname()[1]}", stop


@pytest.mark.parametrize("answer", [b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", None])
def test_a_scheduler_address_where_no_scheduler_answers_is_one_input_error_and_leaves_no_folder(
        tmp_path, monkeypatch, answer):
    # An HTTP server's reply made Dask read a garbage frame length (MemoryError: 3.07 EiB, an
    # internal error); a server that accepted and stayed silent held the handshake for ever.
    # Both are the address's fault, said as such, and the output folder this run made is gone.
    import paraplan.sweeps.runner as runner
    # the answering server's reply fails the handshake at once (it must do so within the 3 s, or
    # the run would stop on the wait, not on Dask's error); the silent one is only ever stopped
    # by the wait, whatever its length, so it waits 0.5 s, not 3
    monkeypatch.setattr(runner, "SCHEDULER_ANSWER_S", 3.0 if answer is not None else 0.5)
    address, stop = _listener(answer)
    try:
        spec = spec_from_dict({**GRID, "config": {"tp": [1]}})
        out = tmp_path / "new" / "sweep"
        out.parent.mkdir()
        with pytest.raises(InputError) as info:
            run_sweep(spec, out, scheduler=address)
        assert info.value.field == "--scheduler" and "no Dask scheduler answered" in str(info.value)
        # which of the two ways it failed: Dask's error for the answering server, the wait for the silent one
        assert ("stayed silent" in str(info.value)) == (answer is None)
        assert not out.exists() and out.parent.is_dir()
    finally:
        stop()


def test_a_sweep_off_a_terminal_says_how_far_it_is(tmp_path, monkeypatch):
    # a long sweep into a log printed nothing until it ended (the bar shows on terminals only);
    # it now writes a line every PROGRESS_LINE_S seconds (0 here: after every chunk but the last)
    import paraplan.commands.sweep as sweep_command
    import yaml
    monkeypatch.setattr(sweep_command, "PROGRESS_LINE_S", 0.0)
    spec = tmp_path / "spec.yaml"
    grid = {**GRID, "gpus": [16], "chunk_points": 40}        # 192 points, 9 chunks: the lines are per chunk
    spec.write_text(yaml.safe_dump(grid))
    result = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "out"), "--local"])
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("swept ")]
    n = spec_from_dict(grid).n_points
    assert len(lines) >= len(chunks(spec_from_dict(grid))) - 1 >= 3
    assert lines and all(re.fullmatch(rf"swept [\d,]+ of {n:,} points \(\d+%\) in \d+ s", ln) for ln in lines)
    assert re.match(rf"{n:,} points in ", result.stdout)


def test_a_chunk_that_cannot_be_written_names_it_and_leaves_no_hidden_file(tmp_path):
    import pandas as pd

    from paraplan.sweeps.runner import _write_whole
    target = tmp_path / "abc.parquet"
    target.mkdir()                       # something in the way: the rename fails after the write
    with pytest.raises(InputError, match=f"cannot write {target}: is a directory") as err:
        _write_whole(lambda p: pd.DataFrame({"a": [1]}).to_parquet(p, index=False), target)
    assert err.value.field == "--out"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["abc.parquet"]


def test_a_model_file_with_a_bad_field_is_named_by_that_field_not_as_the_models_axis(tmp_path):
    # hidden_size .nan in a model file listed under models: was reported as "models: expected an
    # integer", naming neither the file's field nor the file
    text = (REPO / "model_specs/presets/llama3.1-70b.yaml").read_text()
    bad = tmp_path / "nan.yaml"
    bad.write_text(re.sub(r"(?m)^hidden_size: .*$", "hidden_size: .nan", text, count=1))
    from paraplan.sweeps.spec import check_names
    with pytest.raises(InputError) as err:
        check_names(spec_from_dict({**GRID, "models": [str(bad)]}))
    assert err.value.field == "model llama3.1-70b.hidden_size"
    with pytest.raises(InputError) as err:
        check_names(spec_from_dict({**GRID, "models": ["llama3-8bb"]}))
    assert err.value.field == "models" and "did you mean" in str(err.value)


SERVING = {"kind": "serving", "models": ["llama3.1-8b", "llama3.1-70b"], "systems": ["dgx-h100"], "gpus": [8],
           "backends": ["vllm", "trtllm"], "tpot_ms": [20, 2]}


def test_a_serving_sweep_row_is_serve_plans_best_deployment_for_that_point(tmp_path):
    from paraplan.serving_api import serve_plan
    spec = spec_from_dict(SERVING)
    assert spec.n_points == 2 * 1 * 1 * 2 * 2 and max(len(c) for c in chunks(spec)) <= 4
    df = run_sweep(spec, tmp_path / "out", local=True)
    assert list(df["point"]) == list(range(8))
    ok = df[df.status == "ok"]
    # a 2 ms TPOT is below any layout's decode step: those points keep their row with the reason
    assert set(ok.tpot_slo_ms) == {20.0} and len(ok) == 4
    bad = df[df.status == "infeasible"]
    assert len(bad) == 4 and bad.reason.str.contains("TPOT").all() and bad.tokens_per_s_per_gpu.isna().all()
    for _, row in ok.iterrows():
        plan = serve_plan(row.model, "dgx-h100", 8, ttft_ms=1000.0, tpot_ms=20.0, backend=row.backend)
        # vLLM ships no router for disaggregated workers: its row is the best aggregated layout
        # meeting the SLO, a better disaggregated winner named beside it
        c = plan.candidates[plan.candidates.meets_slo.astype(bool)]
        if row.backend == "vllm":
            c = c[c["mode"] == "agg"]
        best = c.loc[c.tokens_per_s_per_gpu.idxmax()]
        assert row["mode"] == best["mode"] and row.tokens_per_s_per_gpu == best.tokens_per_s_per_gpu
        assert row.ttft_ms == best.ttft_ms and row.tpot_ms == best.tpot_ms <= 20.0
        assert row.concurrency == best.concurrency and row.gpus_used <= 8
        assert row.tokens_per_s == pytest.approx(best.tokens_per_s_per_gpu * best.gpus_used, rel=1e-12)
        met = plan.candidates[plan.candidates.meets_slo.astype(bool)]
        winner = met.loc[met.tokens_per_s_per_gpu.idxmax()]        # the search's, launched or not
        refused = row.backend == "vllm" and winner["mode"] == "disagg"
        assert (row.engine_refuses != "") == refused
        # serving_api.serve_plan answers as the sweep row: its best is the row, the refused winner beside it
        assert plan.best.tokens_per_s_per_gpu == row.tokens_per_s_per_gpu
        assert (plan.engine_refused_best is not None) == refused
        if refused:
            assert row.engine_refuses.startswith("mode: vLLM ships no router")
            assert row.engine_refused_tokens_per_s_per_gpu == winner.tokens_per_s_per_gpu > row.tokens_per_s_per_gpu
            assert row.engine_refused_best.startswith("disagg prefill")
        else:
            assert pd.isna(row.engine_refused_best) and pd.isna(row.engine_refused_tokens_per_s_per_gpu)
    # a rerun reads the finished chunks back: the same table
    pd.testing.assert_frame_equal(run_sweep(spec, tmp_path / "out", local=True), df)


def test_a_serving_sweep_row_is_the_best_layout_its_engine_can_launch(tmp_path):
    """Llama-3.1-70B on 8 H100 at TPOT 20 ms: the search's winner is disaggregated, which vLLM
    cannot launch (no prefill / decode router); vLLM's row is its best aggregated layout, so it does
    not outrank an engine that launches its own; with only disaggregated layouts searched, nothing
    vLLM launches meets the objective: the row is 'unlaunchable'."""
    from paraplan.serving_api import serve_plan
    spec = spec_from_dict({"kind": "serving", "models": ["llama3.1-70b"], "systems": ["dgx-h100"], "gpus": [8],
                           "backends": ["vllm"], "tpot_ms": [20], "modes": ["both", "disagg"]})
    df = run_sweep(spec, tmp_path / "out", local=True)
    plan = serve_plan("llama3.1-70b", "dgx-h100", 8, ttft_ms=1000.0, tpot_ms=20.0, backend="vllm")
    c = plan.candidates
    agg = c[(c["mode"] == "agg") & c.meets_slo.astype(bool)]
    both, disagg = df.iloc[0], df.iloc[1]
    winner = plan.engine_refused_best.row         # the search's winner, which vLLM cannot launch
    assert winner["mode"] == "disagg" and both.modes == "both" and disagg.modes == "disagg"
    assert both.status == "ok" and both["mode"] == "agg" == plan.best["mode"]
    assert both.tokens_per_s_per_gpu == agg.tokens_per_s_per_gpu.max() < winner.tokens_per_s_per_gpu
    assert both.tokens_per_s_per_gpu == plan.best.tokens_per_s_per_gpu
    assert both.engine_refused_tokens_per_s_per_gpu == winner.tokens_per_s_per_gpu
    assert disagg.status == "unlaunchable" and disagg.reason.startswith("mode: vLLM ships no router")
    pd.testing.assert_frame_equal(run_sweep(spec, tmp_path / "out", local=True), df)


def test_a_serving_sweep_leaves_a_dense_models_expert_split_empty_and_keeps_an_moe_models(tmp_path):
    """As serve plan --json gives null: a dense winner's moe_tp / moe_ep / expert_format are
    <NA> in the table's nullable Int64 / string columns (empty in the CSV), an MoE winner's are
    its split, as whole numbers; the search and every other column are serve plan's."""
    from paraplan.serving_api import serve_plan
    spec = spec_from_dict({"kind": "serving", "models": ["llama3.1-8b", "qwen3-30b-a3b"], "systems": ["dgx-h100"],
                           "gpus": [8], "backends": ["vllm"], "tpot_ms": [20], "modes": ["agg"]})
    df = run_sweep(spec, tmp_path / "out", local=True)
    assert (df.status == "ok").all()
    assert str(df.moe_tp.dtype) == str(df.moe_ep.dtype) == "Int64" and str(df.expert_format.dtype) == "string"
    dense, moe = df.set_index("model").loc["llama3.1-8b"], df.set_index("model").loc["qwen3-30b-a3b"]
    assert pd.isna(dense.moe_tp) and pd.isna(dense.moe_ep) and pd.isna(dense.expert_format)
    best = serve_plan("qwen3-30b-a3b", "dgx-h100", 8, ttft_ms=1000.0, tpot_ms=20.0, modes="agg", backend="vllm").best
    assert (moe.moe_tp, moe.moe_ep, moe.expert_format) == (int(best.moe_tp), int(best.moe_ep), "fp8")
    assert dense.tp >= 1 and dense.tokens_per_s_per_gpu > 0
    from paraplan.sweeps.runner import write_results
    write_results(df, tmp_path / "out")
    csv = pd.read_csv(tmp_path / "out" / "results.csv")
    assert csv.set_index("model").loc["llama3.1-8b", ["moe_tp", "moe_ep", "expert_format"]].isna().all()
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out" / "results.parquet"), df)


@pytest.mark.parametrize("change, message", [
    ({"search": "simulate"}, "search: a serving sweep searches best"),
    ({"clusters": ["dgx-h100"]}, "clusters: not a key of a serving sweep"),
    ({"precisions": ["fp9"]}, "precisions: unknown weight format 'fp9'"),
    ({"modes": ["mixed"]}, "modes: unknown mode 'mixed'"),
    ({"osl": [1]}, "osl: must be 2 or more"),
    ({"ttft_ms": [float("nan")]}, "ttft_ms: expected milliseconds"),
    ({"gpus": [0]}, "gpus: must be a whole number >= 1"),
    ({"backends": ["vllm", "vllm"]}, "backends: lists 'vllm' twice"),
    ({"systems": None}, "systems: missing"),
])
def test_a_bad_serving_spec_is_one_input_error_naming_the_key(change, message):
    data = {**SERVING, **change}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(InputError) as err:
        spec_from_dict(data)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("axis, name, message", [("models", "lama3.1-8b", "models: "),
                                                 ("systems", "dgx-h10", "systems: "),
                                                 ("backends", "vlm", "backends: unknown serving engine 'vlm'")])
def test_a_misspelt_serving_name_fails_before_the_run(tmp_path, axis, name, message):
    import yaml
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SERVING, axis: [name]}))
    result = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "out"), "--local"])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {message}"), result.output
    assert not (tmp_path / "out").exists()


def test_a_damaged_chunk_file_is_evaluated_again_not_trusted(tmp_path):
    # a chunk without its model column, or with an "ok" row that lost its step time, was reused:
    # the results had blank models and ok rows without numbers
    spec = spec_from_dict(GRID)
    first = run_sweep(spec, tmp_path, local=True)
    files = sorted((tmp_path / "chunks").glob("*.parquet"))
    a = pd.read_parquet(files[0]).drop(columns=["model", "cluster"])
    a.to_parquet(files[0], index=False)
    b = pd.read_parquet(files[1])
    b.loc[b.status == "ok", "step_time_s"] = float("nan")
    b.to_parquet(files[1], index=False)
    c = pd.read_parquet(files[2])
    c["gpus"] = c["gpus"] * 2                       # rows that are not this chunk's points
    c.to_parquet(files[2], index=False)
    again = run_sweep(spec, tmp_path, local=True)
    pd.testing.assert_frame_equal(again, first)


def test_the_chunks_folder_may_not_be_a_link_and_a_blocked_result_stops_the_run_before_it_starts(tmp_path):
    import yaml
    (tmp_path / "o1").mkdir()
    (tmp_path / "o1" / "chunks").symlink_to(tmp_path)         # the chunk files would land in tmp_path
    with pytest.raises(InputError, match="chunks is a symbolic link"):
        run_sweep(spec_from_dict(GRID), tmp_path / "o1", local=True)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(GRID))
    (tmp_path / "o2" / "results.csv").mkdir(parents=True)
    result = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "o2"), "--local"])
    assert result.exit_code == 2 and "results.csv: it is a directory" in result.stderr
    # nothing written: no chunks evaluated, no results.parquet beside the blocked csv
    assert sorted(p.name for p in (tmp_path / "o2").iterdir()) == ["results.csv"]


def test_a_damaged_serving_chunk_is_evaluated_again(tmp_path):
    # one point, TPOT 20 ms (its row "ok"): each damage below is to that row, and a damaged chunk
    # is evaluated again whatever else it holds (the 2 ms point's infeasible row beside it made
    # each of the six evaluations two searches and could not fail the test)
    spec = spec_from_dict({**SERVING, "models": ["llama3.1-8b"], "backends": ["vllm"], "tpot_ms": [20]})
    first = run_sweep(spec, tmp_path, local=True)
    assert list(first.status) == ["ok"]
    (chunk,) = sorted((tmp_path / "chunks").glob("*.parquet"))
    good = pd.read_parquet(chunk)
    for damage in ("nan number", "status int", "status odd", "backend swapped", "extra column"):
        damaged = good.copy()
        if damage == "nan number":
            damaged.loc[damaged.status == "ok", "tokens_per_s_per_gpu"] = float("nan")
        elif damage == "status int":          # crashed the resume (pyarrow could not write it back)
            damaged["status"] = 1
        elif damage == "status odd":
            damaged["status"] = "okay"
        elif damage == "backend swapped":
            damaged["backend"] = damaged["backend"].iloc[::-1].to_numpy()
            damaged.loc[damaged.index[0], "backend"] = "trtllm"
        else:
            damaged["junk"] = "x"
        damaged.to_parquet(chunk, index=False)
        pd.testing.assert_frame_equal(run_sweep(spec, tmp_path, local=True), first)


def test_a_misspelt_kind_a_chunks_file_and_a_name_twice_in_other_case_are_named(tmp_path):
    with pytest.raises(InputError, match="^kind: unknown kind 'Serving'"):
        spec_from_dict({**SERVING, "kind": "Serving"})
    with pytest.raises(InputError, match="^models: lists 'LLAMA3.1-8B' twice"):
        spec_from_dict({**SERVING, "models": ["llama3.1-8b", "LLAMA3.1-8B"]})
    (tmp_path / "chunks").write_text("")
    with pytest.raises(InputError, match="chunks is a file"):
        run_sweep(spec_from_dict(GRID), tmp_path, local=True)


def test_more_local_workers_than_the_cores_can_run_is_refused_and_leaves_no_folder(tmp_path):
    # 1,024 worker processes on 2 cores had not started within a minute (leaking semaphores and
    # leaving an empty chunks/ folder); at most four a core are started, never more than chunks
    import os
    spec = spec_from_dict({**GRID, "config": {"tp": [1]}})
    out = tmp_path / "sweep"
    too_many = 4 * (os.cpu_count() or 1) + 1
    with pytest.raises(InputError) as info:
        run_sweep(spec, out, workers=too_many)
    assert info.value.field == "--workers" and f"at most {too_many - 1}" in str(info.value)
    assert not out.exists()


@pytest.mark.parametrize("written, hint", [
    ("1e7", " (YAML reads 1e7 as text: write 1.0e+7)"),
    ("1.0e7", " (YAML reads 1.0e7 as text: write 1.0e+7)"),
    ("5E-3", " (YAML reads 5E-3 as text: write 5.0e-3)"),
    ("'500'", ""),            # quoted digits: text, but no exponent to blame
    ("abc", ""),
])
def test_a_latency_bound_read_as_text_gets_a_hint_only_for_an_exponent_and_the_hint_parses(tmp_path, written, hint):
    """PyYAML reads 1e7 and 1.0e7 as text (only 1.0e+7 is a number): the hint says so and its
    spelling reads back as the number meant; text without an exponent gets no such hint."""
    import yaml
    spec = tmp_path / "spec.yaml"
    body = yaml.safe_dump({k: v for k, v in SERVING.items() if k != "ttft_ms"})
    spec.write_text(body + f"ttft_ms: [{written}]\n")
    result = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "out"), "--local"])
    shown = yaml.safe_load(f"x: [{written}]")["x"][0]
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: ttft_ms: expected milliseconds in (0, 1e7], got {shown!r}")
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n"), result.stderr
    assert (hint in result.stderr) if hint else ("YAML" not in result.stderr), result.stderr
    if hint:
        fixed = yaml.safe_load("x: " + hint.split("write ")[1].rstrip(")"))["x"]
        assert fixed == float(written) and isinstance(fixed, float)
