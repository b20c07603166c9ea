"""``validate measured`` on a machine with fewer ranks than a default layout needs (one GPU):
the layouts that fit are measured, the others skipped with the reason, none fitting is one
error line (paraplan/measure/compare.py ``_fitting_configs``)."""
import pytest

from hardware_specs.errors import InputError
from paraplan.measure.compare import DEFAULT_CONFIGS, _fitting_configs


def test_one_gpu_keeps_the_single_rank_layouts_and_names_the_rest():
    kept, skipped = _fitting_configs(DEFAULT_CONFIGS, 1)
    assert [c["name"] for c in kept] == ["single", "single-mb1x4", "single-recompute"]
    assert len(skipped) == len(DEFAULT_CONFIGS) - 3
    assert ("tp2", "needs 2 ranks, this machine runs 1") in skipped


def test_two_ranks_keep_every_default_layout():
    kept, skipped = _fitting_configs(DEFAULT_CONFIGS, 2)
    assert len(kept) == len(DEFAULT_CONFIGS) and skipped == []


def test_no_layout_fitting_is_an_input_error():
    with pytest.raises(InputError, match="no configuration fits the 1 rank"):
        _fitting_configs([{"name": "tp4", "tp": 4}], 1)


@pytest.mark.parametrize("kind, visible, ranks, expected", [("cpu", 0, 2, 2), ("cuda", 1, 8, 1), ("cuda", 4, 2, 2)])
def test_a_job_uses_no_more_ranks_than_the_profile_or_the_visible_gpus(monkeypatch, kind, visible, ranks, expected):
    # a CPU host runs the calibrated profile's ranks; a CUDA host at most the GPUs it sees (an
    # 8-GPU catalog node on a one-GPU machine runs one rank)
    import types

    import paraplan.measure.compare as compare
    import paraplan.measure.runtime as runtime
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(device_count=lambda: visible))
    monkeypatch.setattr(runtime, "choose_device", lambda device="auto", **_: types.SimpleNamespace(kind=kind))
    monkeypatch.setattr(compare, "require_torch", lambda: fake_torch)
    assert compare._slots(ranks) == expected
