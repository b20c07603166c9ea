"""``launchable_best`` (serve plan's headline, every serving sweep point) builds and checks a
launch per candidate in rank order until one launches; a vLLM plan's disaggregated candidates
all fail on the mode alone (vLLM ships no router for them), so it built up to 5,000 of them
(1.6 s for llama3.1-70b on 64 H100s, disaggregated only). Those rows are now set aside at once,
with the same row, rank and refusal."""
from __future__ import annotations

import pytest

import paraplan.serving_launchable as serve
from paraplan.serving_api import serving_context
from planners.serving.search import plan_serving, ranking_key

OPTS = serve.LaunchRequest(isl=4096, osl=512)


@pytest.fixture
def built(monkeypatch):
    calls = []
    real = serve.launch_of_row

    def counting(row, ctx, opts):
        calls.append(row.name)
        return real(row, ctx, opts)
    monkeypatch.setattr(serve, "launch_of_row", counting)
    return calls


def _ranked(plan):
    meets = plan.candidates[plan.candidates["meets_slo"].astype(bool)]
    return meets.assign(_score=ranking_key(meets, "per-gpu")).sort_values("_score", ascending=False, kind="stable")


def test_a_disaggregated_only_vllm_plan_builds_one_launch(built):
    ctx = serving_context("llama3.1-8b", "dgx-h100", "vllm")
    plan = plan_serving(ctx, 8, 4096, 512, 2000, 10, modes=("disagg",))
    row, launch, rank, meeting, err = serve.launchable_best(plan, ctx, OPTS)
    assert row is None and launch is None and rank is None and meeting == len(_ranked(plan)) > 1
    assert err.field == "--mode" and "no router" in err.message
    assert len(built) == 1          # the winner, for its refusal; not every candidate


def test_a_vllm_plan_won_by_a_disaggregated_layout_launches_the_first_aggregated_one(built):
    ctx = serving_context("llama3.1-8b", "dgx-h100", "vllm")
    plan = plan_serving(ctx, 8, 4096, 512, 2000, 10, modes=("agg", "disagg"))
    ranked = _ranked(plan)
    assert ranked.iloc[0]["mode"] == "disagg"
    # the first aggregated row in rank order (every aggregated row launches in vLLM here)
    first_agg = int((ranked["mode"] == "agg").to_numpy().argmax())
    assert first_agg > 0
    row, launch, rank, _, err = serve.launchable_best(plan, ctx, OPTS)
    assert rank == first_agg and row.name == ranked.index[first_agg] and row["mode"] == "agg"
    assert launch is not None and launch.mode == "agg"
    assert err.field == "--mode"
    assert built == [ranked.index[0], ranked.index[first_agg]]


def test_the_launchability_rules_load_without_the_command_line():
    """``serve plan``, the serving sweeps and ``serving_api.serve_plan`` share one module; it takes a
    ``LaunchRequest``, not click's option dict, so the Python API uses it with no CLI loaded."""
    import subprocess
    import sys
    code = ("import sys, paraplan.serving_launchable, paraplan.serving_api; "
            "print(sorted(m for m in ('click', 'paraplan.cli', 'paraplan.commands.serve') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
