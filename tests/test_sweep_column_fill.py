"""A simulate sweep writes its priced rows' columns over the whole batch (array arithmetic and
one read of each configuration field), not one ``ParallelConfig.as_dict`` and one
``mfu_pct`` per row; the values are those of the definitions."""
from __future__ import annotations

import pytest

from paraplan.sweeps import evaluate as ev
from paraplan.sweeps import spec_from_dict
from simulator.parallel_config import ParallelConfig

GIB = 2**30


def _points():
    spec = spec_from_dict({"kind": "training", "search": "simulate", "models": ["llama3-8b"],
                           "clusters": ["dgx-h100"], "gpus": [8], "global_batch": [64, 128],
                           "config": {"tp": [1, 2], "micro_batch": [1, 2], "recompute": ["full", "selective"]}})
    return list(enumerate(spec.points()))


def test_priced_rows_are_filled_without_a_dict_per_row(monkeypatch):
    calls = []
    real = ParallelConfig.as_dict

    def as_dict(self):
        calls.append(1)
        return real(self)

    monkeypatch.setattr(ParallelConfig, "as_dict", as_dict)
    df = ev.evaluate_points(_points(), "training", "simulate")
    assert len(df) == 16 and df["n_gpus"].notna().all()
    # the label's defaults (``paraplan.api.config_labels``) read one; the 16 rows none
    assert len(calls) <= 1


def test_filled_columns_follow_their_definitions():
    df = ev.evaluate_points(_points(), "training", "simulate")
    assert len(df) == 16 and df["n_gpus"].notna().all()
    # an H100 SXM holds 80 GiB of HBM3 (the dgx-h100 file's hbm_gib); what a row uses plus what
    # it leaves is all of it
    assert (df["memory_gib"] + df["headroom_gib"]).to_numpy() == pytest.approx(80.0, abs=1e-9)
    # the grid's own values come back as the configuration's fields: tp, micro_batch, the
    # recompute mode's name, dp = 8 GPUs / tp, n_gpus = dp x tp x pp x cp = 8
    assert sorted(set(df["tp"])) == [1, 2] and sorted(set(df["micro_batch"])) == [1, 2]
    assert set(df["recompute"]) == {"full", "selective"}
    assert (df["dp"] * df["tp"] == 8).all() and (df["n_gpus"] == 8).all()
    assert set(df["schedule"]) <= {"1f1b", "interleaved", "gpipe"} and set(df["dtype"]) == {"bf16"}
    # tokens a second over the job's 8 GPUs: the per-GPU column is the job's over 8
    assert df["tokens_per_s_per_gpu"].to_numpy() == pytest.approx(df["tokens_per_s"].to_numpy() / 8, rel=1e-12)
    # a row fits exactly when its status says so
    assert ((df["status"] == "ok") == df["fits"].astype(bool)).all()
