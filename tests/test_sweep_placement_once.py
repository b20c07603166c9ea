"""A simulate sweep places and checks a job on its cluster (``placed_and_checked``) once per
distinct (GPUs, tp, cp, dp, ep, etp, ZeRO shard group, offload) of a group: points that differ only
in fields the placement does not read (batch, micro-batch, recompute) share its verdict, and an
invalid placement's error text reaches every point it refuses."""
from __future__ import annotations

from paraplan.sweeps import evaluate as ev
from paraplan.sweeps import spec_from_dict


def _count(monkeypatch):
    calls = []
    real = ev.placed_and_checked

    def placed(cluster, config):
        calls.append((config.n_gpus, config.tp))
        return real(cluster, config)

    monkeypatch.setattr(ev, "placed_and_checked", placed)
    return calls


def test_one_placement_per_distinct_layout(monkeypatch):
    spec = spec_from_dict({"kind": "training", "search": "simulate", "models": ["llama3-8b"],
                           "clusters": ["dgx-h100"], "gpus": [8], "global_batch": [64, 128],
                           "config": {"tp": [1, 2], "micro_batch": [1, 2], "recompute": ["full", "selective"]}})
    points = list(enumerate(spec.points()))
    calls = _count(monkeypatch)
    df = ev.evaluate_points(points, "training", "simulate")
    assert len(df) == 16 and df["n_gpus"].notna().all()
    # 8 GPUs at tp 1 (dp 8) and tp 2 (dp 4): two layouts, whatever the batch, micro-batch or recompute
    assert sorted(calls) == [(8, 1), (8, 2)]


def test_a_refused_placement_refuses_each_of_its_points(monkeypatch):
    # 12 GPUs on 8-GPU DGX H100 nodes at tp 4, pp 1: dp 3, a data-parallel group of tp x cp x dp =
    # 12 ranks, neither a divisor nor a multiple of the 8-GPU NVLink domain: refused by check_cluster
    spec = spec_from_dict({"kind": "training", "search": "simulate", "models": ["llama3-8b"],
                           "clusters": ["dgx-h100"], "gpus": [12], "global_batch": [48, 96],
                           "config": {"tp": [4], "pp": [1], "micro_batch": [1, 2]}})
    points = list(enumerate(spec.points()))
    calls = _count(monkeypatch)
    df = ev.evaluate_points(points, "training", "simulate")
    assert calls == [(12, 4)]
    assert len(df) == 4 and (df["status"] == "invalid").all()
    assert df["reason"].nunique() == 1
    assert df["reason"].iloc[0].startswith("dp: tp x cp x dp = 12 does not tile the 8-GPU scale-up domain")
