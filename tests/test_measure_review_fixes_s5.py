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


@pytest.mark.parametrize("threads", [0, -1, 1.5, "abc", 10**6])
def test_run_config_refuses_a_thread_count_a_rank_cannot_use(threads):
    from paraplan.measure.train import RunConfig
    with pytest.raises(InputError) as err:
        RunConfig(threads_per_rank=threads)
    assert err.value.field == "threads_per_rank"
