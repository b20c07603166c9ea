"""A simulate sweep reads its stack file once per (stack, dtype, tp) of a group and the cluster's
efficiency model once per group, not once per point (each is a catalog lookup and a file load)."""
from __future__ import annotations

from paraplan.sweeps import evaluate as ev
from paraplan.sweeps import spec_from_dict


def test_stack_and_efficiency_loads_per_group(monkeypatch):
    spec = spec_from_dict({"kind": "training", "search": "simulate", "models": ["llama3-8b"],
                           "clusters": ["dgx-h100"], "gpus": [8, 16], "global_batch": [64],
                           "config": {"tp": [1, 2], "pp": [1, 2]}})
    points = list(enumerate(spec.points()))
    assert len(points) == 8                     # 2 GPU counts x 2 tp x 2 pp, one group
    calls = {"stack": 0, "eff": 0}
    real_stack, real_eff = ev.load_stack, ev.efficiency_for_cluster

    def stack(*a, **k):
        calls["stack"] += 1
        return real_stack(*a, **k)

    def eff(*a, **k):
        calls["eff"] += 1
        return real_eff(*a, **k)

    monkeypatch.setattr(ev, "load_stack", stack)
    monkeypatch.setattr(ev, "efficiency_for_cluster", eff)
    df = ev.evaluate_points(points, "training", "simulate")
    assert len(df) == 8 and (df.status == "ok").sum() >= 1
    # one (model, cluster, stack, dtype) group: one stack load (its fields read for tp 1 and tp 2
    # and its default ZeRO stage from the same spec), one efficiency model
    assert calls == {"stack": 1, "eff": 1}
