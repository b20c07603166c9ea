"""Review of the measured path (session 5): a damaged calibration sidecar's thread count, the
launcher's option names and limits, SIGTERM during a measurement, the rank-failure message, and
``validate gpu-record``'s layouts. Nothing here trains more than a tiny GPT for a few steps."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hardware_specs.errors import InputError

from cli_results import one_line_error, run

DATA = Path(__file__).parent / "data"


# --- a calibration sidecar's device.threads_per_rank --------------------------------------------

@pytest.mark.parametrize("threads", ["-1", "0", "1.5", '"abc"', "true", "100000"])
def test_a_damaged_sidecar_thread_count_is_one_line_naming_the_files_field(monkeypatch, tmp_path, threads):
    pytest.importorskip("torch")
    import paraplan.measure.train
    monkeypatch.setattr(paraplan.measure.train, "launch",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("ranks started")))
    profile = tmp_path / "measured_calibration.yaml"
    shutil.copyfile(DATA / "measured_calibration.yaml", profile)
    side = tmp_path / "measured_calibration.calibration.json"
    side.write_text('{"device": {"kind": "cpu", "threads_per_rank": %s}}' % threads)
    line = one_line_error(run("validate", "measured", profile, "--steps", "2", "--warmup", "0", "--rounds", "1"))
    assert line.startswith(f"error: {side}: device.threads_per_rank: must be a whole number of CPU threads from 1 to ")
    assert "rerun `paraplan calibrate" in line


def test_the_sidecar_thread_count_is_read_when_it_is_sound(tmp_path):
    import os

    from paraplan.measure.compare import _calibrated_threads
    profile = tmp_path / "m.yaml"
    side = tmp_path / "m.calibration.json"
    cores = os.cpu_count() or 1
    side.write_text('{"device": {"threads_per_rank": %d}}' % cores)
    assert _calibrated_threads(profile) == cores
    side.write_text('{"device": {}}')
    assert _calibrated_threads(profile) is None


@pytest.mark.parametrize("threads", [0, -1, 1.5, "abc", True])
def test_run_config_refuses_a_thread_count_a_rank_cannot_use(threads):
    from paraplan.measure.train import RunConfig
    with pytest.raises(InputError) as err:
        RunConfig(threads_per_rank=threads)
    assert err.value.field == "threads_per_rank"


def test_a_thread_count_above_this_machines_cores_is_refused_where_ranks_start():
    """A recorded run (an 8-thread H200 host) stays a valid RunConfig; starting it here is not."""
    import os
    pytest.importorskip("torch")
    from paraplan.measure.runtime import choose_device
    from paraplan.measure.train import RunConfig
    cores = os.cpu_count() or 1
    assert RunConfig(threads_per_rank=cores + 1).threads_per_rank == cores + 1
    with pytest.raises(InputError, match=f"from 1 to {cores} .this machine's cores., got {cores + 1}"):
        choose_device("cpu", threads_per_rank=cores + 1)


# --- a rank's failure: one stderr line ----------------------------------------------------------

def _stderr_lines(text: str) -> list[str]:
    return [ln for ln in text.replace("\r", "\n").splitlines() if ln.strip() and not ln.startswith("training")]


def test_a_rank_failure_reaches_stderr_as_our_line_alone(tmp_path):
    """torch warns 'Terminating process N via signal SIGTERM' for each rank it stops after one
    failed; that warning was a second stderr line before the error (~5 s: two tiny ranks)."""
    pytest.importorskip("torch")
    import os
    import subprocess
    import sys
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    out = subprocess.run([sys.executable, str(tests / "_failing_rank_worker.py")], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert out.returncode == 2, out
    assert _stderr_lines(out.stderr) == ["error: ProcessRaisedException"], out.stderr


def test_the_spawn_log_is_silenced_only_inside_a_launch():
    import logging

    from paraplan.measure.runtime import _quiet_spawn_log
    log = logging.getLogger("torch.multiprocessing.spawn")
    assert not log.disabled
    with _quiet_spawn_log():
        assert log.disabled
    assert not log.disabled


# --- SIGTERM during a measurement ---------------------------------------------------------------

def test_sigterm_is_raised_as_an_interrupt_once_and_held_back_while_ranks_start():
    import signal

    from paraplan.measure.runtime import _SigtermStop, _stop_on_sigterm
    stop = _SigtermStop()
    with pytest.raises(KeyboardInterrupt):
        stop(signal.SIGTERM, None)
    stop(signal.SIGTERM, None)          # a second one while cleaning up: ignored
    held = _SigtermStop()
    with pytest.raises(KeyboardInterrupt):
        with held.deferred():
            held(signal.SIGTERM, None)  # during the start: recorded, not raised
            assert held.pending
    previous = signal.getsignal(signal.SIGTERM)
    with _stop_on_sigterm() as installed:
        assert signal.getsignal(signal.SIGTERM) is installed
    assert signal.getsignal(signal.SIGTERM) is previous


def test_sigterm_stops_the_ranks_and_removes_the_folder(tmp_path):
    """A tiny dp=2 run (hidden 32, one layer, 100,000 steps: it would train for minutes) killed
    with SIGTERM once rank 0 reports progress: one error line, exit 2 (as Ctrl-C), no rank left
    running in the command's process group, no paraplan-measure-* folder left in its TMPDIR.
    (Before, the command died at once and its ranks trained on, orphaned, holding its stderr.)"""
    pytest.importorskip("torch")
    import os
    import signal
    import subprocess
    import sys
    import time
    import shutil
    import tempfile
    # a short TMPDIR: the ranks' rendezvous socket lives there, and a path past the AF_UNIX limit
    # (108 bytes; pytest-xdist's tmp_path is that long) fails the launch before any rank starts
    tmp = Path(tempfile.mkdtemp(prefix="ppm-", dir="/tmp" if Path("/tmp").is_dir() else None))
    repo = Path(__file__).parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo), "TMPDIR": str(tmp)}
    env.pop("PARAPLAN_DEBUG", None)
    err_path = tmp_path / "stderr.txt"

    def running(pgid):                              # the group's live (not zombie) processes
        out = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout
        return [ln for ln in out.splitlines() if ln.split()[0] == str(pgid) and not ln.split()[1].startswith("Z")]
    with open(err_path, "w") as err_file:
        # stderr to a file: ranks left behind would hold a pipe open
        p = subprocess.Popen([sys.executable, "-m", "paraplan.cli", "measure", "--dp", "2", "--global-batch", "2",
                              "--layers", "1", "--hidden", "32", "--heads", "1", "--seq-len", "8",
                              "--steps", "100000", "--warmup", "0"],
                             cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err_file, text=True,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 180           # a loaded CI host starts torch slowly
        while not list(tmp.glob("paraplan-measure-*/progress")):
            assert p.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline, "the ranks never reported progress"
            time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
        deadline = time.monotonic() + 10            # the fork server exits once its parent has gone
        while running(p.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = running(p.pid)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)        # whatever the command left behind
        except ProcessLookupError:
            pass
        p.wait()
    err = err_path.read_text()
    leftover = list(tmp.glob("paraplan-measure-*"))
    shutil.rmtree(tmp, ignore_errors=True)
    assert p.returncode == 2, err
    assert _stderr_lines(err) == ["error: interrupted: stopped before finishing (no output file was written)"], err
    assert not leftover
    assert not left


# --- the launcher's limits, named by the user's option ------------------------------------------
# (the two_cores_and_no_ranks fixture: tests/conftest.py)

def test_calibrate_names_nprocs_not_the_launchers_world_size(two_cores_and_no_ranks, tmp_path):
    line = one_line_error(run("calibrate", "--out", tmp_path / "m.yaml", "--nprocs", "9"))
    assert line == ("error: --nprocs: 9 CPU ranks on 2 cores; a CPU measurement starts at most 4 a core "
                    "(8 here) (use a smaller --nprocs)")
    assert not (tmp_path / "m.yaml").exists()


def test_calibrate_help_states_the_real_limit():
    from paraplan.measure.runtime import max_cpu_ranks
    text = " ".join(run("calibrate", "--help").output.split())
    assert f"at most 4 a core on a CPU ({max_cpu_ranks()} on this machine)" in text


def test_validate_measured_names_the_profiles_field_not_world_size(two_cores_and_no_ranks, tmp_path):
    profile = tmp_path / "measured_calibration.yaml"
    text = (DATA / "measured_calibration.yaml").read_text()
    profile.write_text(text.replace("\ngpus_per_node: 2\n", "\ngpus_per_node: 64\n")
                       .replace("\nmax_gpus: 2\n", "\nmax_gpus: 64\n"))
    line = one_line_error(run("validate", "measured", profile, "--steps", "2", "--warmup", "0", "--rounds", "1"))
    assert line.startswith(f"error: {profile}: gpus_per_node: 64 CPU ranks on 2 cores; a CPU measurement starts at "
                           "most 4 a core (8 here) (calibrate this machine")


# --- validate gpu-record: only layouts the measured runner can produce ----------------------------

@pytest.mark.parametrize("key, value, says", [
    ("zero_stage", 3, "measured_runs.json[0].zero_stage: measured runs support 0 or 1, got 3"),
    ("recompute", "selective", "measured_runs.json[0].recompute: measured runs support none or full, got 'selective'"),
])
def test_gpu_record_refuses_a_run_the_measured_runner_cannot_produce(tmp_path, key, value, says):
    import json
    folder = tmp_path / "rec"
    shutil.copytree(DATA / "gpu_h200", folder)
    runs = json.loads((folder / "measured_runs.json").read_text())
    runs[0][key] = value
    (folder / "measured_runs.json").write_text(json.dumps(runs))
    line = one_line_error(run("validate", "gpu-record", folder, "--cluster", "hgx-h200"))
    assert line.startswith(f"error: {says}, which paraplan.measure's runner cannot have run")


# --- the priced spec is the trained GPT -----------------------------------------------------------

def test_the_priced_spec_has_no_position_table_and_no_dropout_as_gpt_py():
    """gpt.py trains no position embedding and no dropout; ModelSpec's GPT-2 defaults priced
    the dropout masks (their learned position table is priced by no cost model: the embedding
    is V x h and the position field only switches RoPE, so it alone moves nothing). Hand-derived for the CPU default model's 'single' layout (4 layers, 4 x 128 tokens,
    h 256, no recompute, one micro-batch in flight): the two 1-byte hidden-dropout masks a layer
    (Korthikanti et al. 2022), L b s h 2 = 4 x 4 x 128 x 256 x 2 = 262,144 bytes, plus the
    allocator's 5%, are what the prediction drops (the attention scores are never materialised:
    no attention-dropout bytes)."""
    from dataclasses import replace

    from cost_models.memory import ALLOCATOR_FRAGMENTATION
    from hardware_specs.catalog import load_cluster
    from paraplan.measure import compare
    from simulator import simulate
    run = {**compare.DEFAULT_MODEL, "dp": 1, "tp": 1, "pp": 1, "micro_batch": 4, "global_batch": 4,
           "zero_stage": 0, "recompute": "none"}
    spec = compare.model_spec(run)
    assert (spec.position_embedding, spec.attention_dropout, spec.hidden_dropout) == ("none", False, False)
    assert (spec.normalization, spec.activation, spec.linear_bias, spec.tied_embeddings) == ("layernorm", "gelu", True,
                                                                                              False)
    cluster = load_cluster(str(DATA / "measured_calibration.yaml"))
    config = compare.parallel_config(run, "fp32")
    now = simulate(spec, cluster, config, n_gpus=1)
    before = simulate(replace(spec, position_embedding="learned", attention_dropout=True, hidden_dropout=True),
                      cluster, config, n_gpus=1)
    masks = 4 * 4 * 128 * 256 * 2
    assert before.memory_bytes - now.memory_bytes == pytest.approx(masks * (1 + ALLOCATOR_FRAGMENTATION), rel=1e-9)
    learned = simulate(replace(spec, position_embedding="learned"), cluster, config, n_gpus=1)
    assert (learned.memory_bytes, learned.step_time_s) == (now.memory_bytes, now.step_time_s)
    assert now.step_time_s == pytest.approx(before.step_time_s, rel=1e-9)   # the step's time does not move
