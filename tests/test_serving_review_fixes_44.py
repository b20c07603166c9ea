"""Serving checks a review (session 44) found broken, each against hand-derived values or an
exact invariant between the planner and ``serve simulate``."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hardware_specs.errors import InputError
from planners.serving import plan_serving
from simulator.serving.context import ServingContext
from simulator.serving.deployment import Deployment, WorkerLayout
from simulator.serving.evaluate import evaluate_agg_columns
from simulator.serving.simulate import simulate_serving

REPO = Path(__file__).resolve().parents[1]


def _ctx(model, system, backend, fmt, expert=None):
    return ServingContext.build(model, system, backend, fmt, expert or fmt)


# --- a layout with room for no request ------------------------------------------------------

def test_a_layout_whose_kv_pool_holds_no_request_does_not_fit():
    """Llama-3.1-70B in fp8 on one H100 (vLLM) at isl 32,000 + osl 1,000: the weights leave 1.8 GiB,
    one request needs 5.0 GiB of KV cache, so max_batch_per_rank is 0 and batch 1 does not fit
    (it was flagged as fitting: the count had been raised to 1 before the test)."""
    ctx = _ctx("llama3.1-70b", "dgx-h100", "vllm", "fp8")
    out = evaluate_agg_columns(ctx, {"tp": 1.0, "pp": 1.0, "adp": 1.0, "moe_tp": 1.0, "moe_ep": 1.0, "batch": 1.0,
                                     "isl": 32000.0, "osl": 1000.0})
    assert out["kv_pool_bytes"][0] > 0 and out["max_batch_per_rank"][0] == 0
    assert not out["fits"][0]
    with pytest.raises(InputError, match="not even one request fits"):
        simulate_serving(Deployment(model="llama3.1-70b", system="dgx-h100", backend="vllm", dense_format="fp8",
                                    expert_format="fp8", isl=32000, osl=1000, layout=WorkerLayout(tp=1, batch=1)))


@pytest.mark.parametrize("model, system, backend, fmt, isl, osl, ttft, tpot", [
    ("llama3.1-70b", "dgx-h100", "vllm", "fp8", 32000, 1000, 100000.0, 1000.0),
    ("qwen3-235b-a22b", "hgx-h200", "vllm", "nvfp4", 4096, 64, 5000.0, 100.0),
])
def test_plan_drops_layouts_with_room_for_no_request_and_says_what_fits(model, system, backend, fmt, isl, osl, ttft,
                                                                        tpot):
    """On one GPU no layout holds one request (the plan picked tp1 at batch 1, max_batch_per_rank
    0, and serve simulate refused it): the error says the KV cache is what does not fit and the
    GPU count that holds one; on that count the plan's every row holds its batch and the winner
    simulates without error."""
    ctx = _ctx(model, system, backend, fmt)
    with pytest.raises(InputError) as err:
        plan_serving(ctx, 1, isl, osl, ttft, tpot)
    assert err.value.field == "--gpus"
    assert f"holds one request of {isl} + {osl} tokens beside its {fmt} weights" in err.value.message
    assert "add GPUs (one request fits on 2)" in err.value.fix
    plan = plan_serving(ctx, 2, isl, osl, ttft, tpot)
    agg = plan.candidates[plan.candidates["mode"] == "agg"]
    assert (agg.batch <= agg.max_batch_per_rank).all() and (plan.candidates.max_batch_per_rank >= 1).all()
    best = plan.best
    assert best["max_batch_per_rank"] >= best["batch"] >= 1
    rep = simulate_serving(Deployment(model=model, system=system, backend=backend, dense_format=fmt,
                                      expert_format=fmt, isl=isl, osl=osl,
                                      layout=WorkerLayout(tp=int(best.tp), pp=int(best.pp), adp=int(best.adp),
                                                          moe_tp=int(best.moe_tp), moe_ep=int(best.moe_ep),
                                                          batch=int(best.batch)),
                                      workers=int(best.workers)), ctx)
    assert rep.metrics["tokens_per_s_per_gpu"] == pytest.approx(best.tokens_per_s_per_gpu, rel=1e-12)


# --- CUDA-graph coverage under pipeline stages ----------------------------------------------

def test_a_cuda_graph_covers_each_pipeline_micro_batch_not_the_ranks_batch():
    """TensorRT-LLM captures decode graphs up to 128 requests. On pp 8, 256 requests run as 8
    micro-batches of 32, each a forward of its own replaying the 32-request graph: the step equals
    the one with no graph limit at all (it had launched every kernel eagerly, 8.2 ms of host time
    in a 13 ms step)."""
    from dataclasses import replace

    from cost_models.inference_step import step_time
    ctx = _ctx("llama3.1-8b", "dgx-b200", "trtllm", "fp8")
    assert ctx.behaviour.cuda_graph_max_batch == 128
    unlimited = replace(ctx.behaviour, cuda_graph_max_batch=10**9)

    def step(beh, reqs, pp):
        return step_time(ctx.model, ctx.cluster, ctx.efficiency, beh, ctx.dense_format, ctx.expert_format,
                         ctx.kv_bytes, 1.0, 1.0, pp, 1.0, 1.0, 0.0, 0.0, reqs, 2176.0)

    for part in ("step_s", "host_s"):
        assert step(ctx.behaviour, 256.0, 8.0)[part] == step(unlimited, 256.0, 8.0)[part]
    # 8 x 129 requests: each micro-batch past the limit, launched eagerly
    assert step(ctx.behaviour, 8 * 129.0, 8.0)["host_s"] > step(unlimited, 8 * 129.0, 8.0)["host_s"]


def test_doubling_the_batch_on_pipeline_stages_does_not_cut_tokens_per_gpu():
    """The review's case: Llama-3.1-8B on 8 B200 stages (TensorRT-LLM), isl 128, osl 4096: batch
    256 gave 2,454 tokens/s/GPU against batch 128's 3,652."""
    ctx = _ctx("llama3.1-8b", "dgx-b200", "trtllm", "fp8")
    out = evaluate_agg_columns(ctx, {"tp": 1.0, "pp": 8.0, "adp": 1.0, "moe_tp": 1.0, "moe_ep": 1.0,
                                     "batch": np.array([128.0, 256.0]), "isl": 128.0, "osl": 4096.0})
    assert out["fits"].all()
    assert out["tokens_per_s_per_gpu"][1] >= out["tokens_per_s_per_gpu"][0]


# --- the plan's "as one deployment" command carries its floats exactly ------------------------

@pytest.mark.parametrize("p", [0.71234567, 0.1 + 0.2, 1.0 / 3.0])
def test_the_simulate_command_of_a_plan_row_writes_floats_that_read_back_exactly(p):
    import shlex

    from paraplan.commands.serve import simulate_command
    opts = {"model": "deepseek-r1", "system": "dgx-b200", "backend": "sglang", "speculative_tokens": 2,
            "draft_acceptance": p, "isl": 1024, "osl": 1024}
    args = shlex.split(simulate_command({"mode": "agg", "tp": 1.0, "batch": 8.0}, opts))
    assert float(args[args.index("--draft-acceptance") + 1]) == p      # 0.712346 had been written


def test_the_plans_command_with_an_odd_acceptance_gives_the_plans_numbers_exactly():
    import json
    import shlex

    from click.testing import CliRunner

    from paraplan.cli import main
    request = ["serve", "plan", "-m", "deepseek-r1", "-s", "dgx-b200", "-n", "8", "-b", "sglang",
               "--speculative-tokens", "2", "--draft-acceptance", "0.71234567", "--ttft-ms", "5000", "--tpot-ms", "100"]
    text = CliRunner().invoke(main, request)
    assert text.exit_code == 0, text.output
    line = next(ln for ln in text.stdout.splitlines() if "as one deployment:" in ln)
    command = shlex.split(line.split("as one deployment:", 1)[1])
    best = json.loads(CliRunner().invoke(main, request + ["--json"]).stdout)["best"]
    sim = CliRunner().invoke(main, command[1:] + ["--json"])
    assert sim.exit_code == 0, sim.output
    got = json.loads(sim.stdout)
    for key in ("ttft_ms", "tpot_ms", "tokens_per_s_per_gpu"):
        assert got[key] == pytest.approx(best[key], rel=1e-13, abs=0.0), key


# --- more GPUs never lose a disaggregated plan ----------------------------------------------

def test_the_prefill_counts_tried_do_not_depend_on_the_gpu_count():
    from planners.serving.search import MAX_GPUS, PREFILL_COUNTS
    assert np.array_equal(PREFILL_COUNTS[:64], np.arange(1.0, 65.0))
    assert PREFILL_COUNTS[-1] == MAX_GPUS and np.all(np.diff(PREFILL_COUNTS) > 0)


def test_more_gpus_never_give_a_worse_disaggregated_plan_past_64_prefill_workers():
    """Llama-3.1-8B on H100 (TensorRT-LLM), isl 4096, osl 256, TTFT 500 ms, TPOT 20 ms: when this
    was found 33 tp1 prefill + 5 tp4 decode workers reached 2,144 tokens/s/GPU on 64 GPUs; on
    65-71, 100, 129 and 130 the search tried 48 prefill counts log-spaced up to the most that fit,
    33 not among them, and its best was worse (2,138 on 66). (Session 58's factors and fixed-point
    decode batch: 34 prefill + 10 tp2 decode, 2,546.7 on 64-66, 51 + 15 and 2,551.4 on 100 and
    130.) Session 66: 28 prefill workers and 2,545.446 on 64-66, 49 and 2,549.712 on 100 and 130;
    with the 48 log-spaced counts put back, 2,545.401 on 65 and 66 (35), 2,541.1 on 67, 2,549.697 on
    100 and 129, 2,545.372 on 130: the chain 64 < 65 < 130 fails there twice, at the count just past
    64 and at the largest, so those three of the eight counts it checked are run (the suite's time)."""
    ctx = _ctx("llama3.1-8b", "dgx-h100", "trtllm", "fp8")
    best = [plan_serving(ctx, n, 4096, 256, 500.0, 20.0, modes=("disagg",)).best["tokens_per_s_per_gpu"]
            for n in (64, 65, 130)]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(best, best[1:])), best


# --- the nothing-fits error suggests only what fits -------------------------------------------

def _fits_something(ctx, gpus, isl=1024, osl=1024):
    """Whether ``plan_serving`` finds a layout that fits (it may still miss a loose objective)."""
    try:
        plan_serving(ctx, gpus, isl, osl, 1e6, 1e6)
    except InputError as err:
        if err.field == "--gpus":
            return False
        raise
    return True


def test_the_nothing_fits_error_names_only_formats_that_fit_and_the_gpus_that_would():
    """DeepSeek-R1 (fp8_block checkpoint, 671B) on 8 H100 with vLLM: fp8 is a hair smaller than
    fp8_block and fits no better, yet it was suggested with nvfp4, mxfp4 and int4_wo; and 'add
    GPUs' said nothing of how many. Each format named fits on 8 GPUs, the one left out does not,
    and the count named is the least that fits."""
    ctx = _ctx("deepseek-r1", "dgx-h100", "vllm", "fp8_block")
    with pytest.raises(InputError) as err:
        plan_serving(ctx, 8, 1024, 1024, 1e6, 1e6)
    # 10: a pipeline of 5 or 10 stages (every depth is searched, not only powers of two)
    assert err.value.fix == "add GPUs (a layout fits on 10), or a smaller weight format: --precision nvfp4 / mxfp4 / int4_wo"
    for fmt, fits in (("fp8", False), ("nvfp4", True), ("mxfp4", True), ("int4_wo", True)):
        assert _fits_something(_ctx("deepseek-r1", "dgx-h100", "vllm", fmt), 8) is fits, fmt
    assert not _fits_something(ctx, 9) and _fits_something(ctx, 10)


# --- a prefill batch that does not fit says how many do ---------------------------------------

def _disagg_dep(prefill_tp, prefill_batch, fmt="fp8"):
    return Deployment(model="llama3.1-70b", system="dgx-h100", backend="vllm", mode="disagg", isl=1024, osl=1024,
                      dense_format=fmt, expert_format=fmt, prefill=WorkerLayout(tp=prefill_tp, batch=prefill_batch),
                      decode=WorkerLayout(tp=4, batch=32))


def test_a_prefill_batch_too_large_names_the_largest_that_fits_with_its_own_workspace():
    """Llama-3.1-70B fp8, prefill tp 4 on H100: 1,000 prompts of 1,024 tokens said 'at most 0'
    (the count taken beside the 1,024,000-token workspace of the batch refused) though 300 run.
    The largest k counted with its own k x 1,024-token workspace, by brute force over every k."""
    from simulator.serving.aggregated import memory_columns
    ctx = _ctx("llama3.1-70b", "dgx-h100", "vllm", "fp8")
    k = np.arange(1.0, 1001.0)
    mem = memory_columns(ctx, 4.0, 1.0, 1.0, 4.0, 1.0, 1024.0, 1.0, token_budget=k * 1024.0)
    most = int(k[(mem["kv_pool_bytes"] > 0) & (mem["max_batch_per_rank"] >= k)].max())
    assert 300 < most < 1000
    with pytest.raises(InputError) as err:
        simulate_serving(_disagg_dep(4, 1000), ctx)
    assert err.value.field == "--prefill-batch" and f"(at most {most})" in err.value.message
    assert err.value.fix == f"use --prefill-batch {most} or less, or raise --prefill-tp"
    simulate_serving(_disagg_dep(4, most), ctx)           # the count named runs
    with pytest.raises(InputError, match=f"at most {most}"):
        simulate_serving(_disagg_dep(4, most + 1), ctx)


def test_a_prefill_worker_whose_weights_do_not_fit_says_so():
    """Llama-3.1-70B in bf16 (131 GiB) on one H100: '1 prompts ... (at most 0) (lower
    --prefill-batch ...)' blamed the batch; the weights are what does not fit."""
    ctx = _ctx("llama3.1-70b", "dgx-h100", "vllm", "bf16")
    with pytest.raises(InputError) as err:
        simulate_serving(_disagg_dep(1, 1, "bf16"), ctx)
    assert err.value.field == "--prefill-tp"
    assert err.value.message.startswith("the weights (131.4 GiB per GPU) leave no room for a KV cache")


# --- the Python API refuses arguments of the wrong kind ---------------------------------------

@pytest.mark.parametrize("kwargs, field", [
    (dict(backend_version=5), "backend_version"),
    (dict(hbm_tb_per_s="3"), "hbm_tb_per_s"),          # isl="1024" was refused, "3" TB/s read as 3
    (dict(hbm_tb_per_s=True), "hbm_tb_per_s"),
    (dict(scaleup_gbit_per_s="900"), "scaleup_gbit_per_s"),
    (dict(precision=8), "precision"),
    (dict(draft_acceptance="0.7", speculative_tokens=1), "draft_acceptance"),
    (dict(isl="1024"), "isl"),
])
def test_serve_simulate_refuses_an_argument_of_the_wrong_kind(kwargs, field):
    from paraplan.serving_api import serve_simulate
    with pytest.raises(InputError) as err:
        serve_simulate("llama3.1-8b", "dgx-h100", **kwargs)
    assert err.value.field == field and err.value.message.startswith("must be")


@pytest.mark.parametrize("kwargs, field", [
    (dict(allow_pp="no"), "allow_pp"),                  # a truthy string had allowed pipeline stages
    (dict(allow_pp=1), "allow_pp"),
    (dict(ttft_ms=True), "ttft_ms"),                    # True was 1 ms
    (dict(tpot_ms="50"), "tpot_ms"),
    (dict(backend_version=5), "backend_version"),
])
def test_serve_plan_refuses_an_argument_of_the_wrong_kind(kwargs, field):
    from paraplan.serving_api import serve_plan
    with pytest.raises(InputError) as err:
        serve_plan("llama3.1-405b", "dgx-h100", 16, **kwargs)
    assert err.value.field == field and err.value.message.startswith("must be")


def test_serve_plan_takes_numpy_scalar_slos_as_the_numbers_they_are():
    """np.int64(20) / np.float32(100) were refused as "must be a finite number > 0" (only Python's
    int and float passed); a notebook sweep hands them over. They plan exactly as 20 and 100."""
    from paraplan.serving_api import serve_plan
    plain = serve_plan("llama3.1-8b", "dgx-h100", 2, ttft_ms=100, tpot_ms=20)
    numpy = serve_plan("llama3.1-8b", "dgx-h100", 2, ttft_ms=np.float32(100), tpot_ms=np.int64(20))
    pd.testing.assert_series_equal(numpy.best, plain.best)


# --- --backend-version must name a release -----------------------------------------------------

@pytest.mark.parametrize("version", ["nope", "-1", "latest", "1e30", "0.1\n2", "0.11.0 0.12.0"])
def test_serve_simulate_refuses_a_backend_version_that_is_no_release(version):
    """They ran as the newest profile with a note on stderr and exit 0."""
    from click.testing import CliRunner

    from paraplan.cli import main
    result = CliRunner().invoke(main, ["serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100",
                                       "--backend-version", version])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: --backend-version: {version!r} is not a release")


@pytest.mark.parametrize("version", ["0.11.0", "0.15.1", "1.2.0rc6.post3", "v0.5.10.post1", "0.5.1-rc0.pre3",
                                     "1.1.0-dev.2", "0.6.3+cu118"])
def test_a_release_spelled_as_the_engines_tag_them_is_taken(version):
    from hardware_specs.release_match import looks_like_release
    assert looks_like_release(version)
    ServingContext.build("llama3.1-8b", "dgx-h100", "vllm", "fp8", "fp8", backend_version=version)


def test_the_validation_files_tags_that_are_no_release_still_price_there():
    """The serving-runs file's gpt-oss-dev and nightly-<hash> cells are read by the validation
    path (serving_release_match: the profile covering nightly-<hash>, else the framework's
    default profile); a user's --backend-version takes the first too (tests/test_serving_audit_66.py)."""
    import pandas as pd

    from hardware_specs.catalog import serving_release_match
    from hardware_specs.release_match import looks_like_release
    from pathlib import Path
    runs = Path(__file__).resolve().parents[1] / "paraplan" / "data" / "validation" / "serving_runs.csv"
    df = pd.read_csv(runs, dtype={"backend_version": str}, low_memory=False)
    cells = df[["backend", "backend_version"]].dropna().drop_duplicates()
    odd = cells[~cells.backend_version.map(looks_like_release)]
    assert set(odd.backend_version) == {"gpt-oss-dev", "nightly-5b8c30d62b754b57"}
    for backend, version in odd.itertuples(index=False):
        assert serving_release_match(backend, version).stack.serving is not None


# --- a deployment too large names what makes it so --------------------------------------------

@pytest.mark.parametrize("kwargs, field", [
    (dict(layout=WorkerLayout(tp=10**20)), "--tp"),             # blamed on 'workers'
    (dict(layout=WorkerLayout(pp=10**8)), "--pp"),
    (dict(layout=WorkerLayout(tp=8), workers=10**7), "--workers"),
    (dict(mode="disagg", prefill=WorkerLayout(tp=1), decode=WorkerLayout(tp=10**8)), "--decode-tp"),
    (dict(mode="disagg", prefill=WorkerLayout(tp=1), decode=WorkerLayout(tp=1), prefill_workers=10**8),
     "--prefill-workers"),
])
def test_a_deployment_above_the_largest_names_the_degree_or_count_that_makes_it_so(kwargs, field):
    with pytest.raises(InputError) as err:
        Deployment(model="llama3.1-8b", system="dgx-h100", backend="vllm", **kwargs)
    assert err.value.field == field


def test_serve_simulate_blames_a_huge_tp_on_tp():
    from click.testing import CliRunner

    from paraplan.cli import main
    result = CliRunner().invoke(main, ["serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100",
                                       "--tp", "99999999999999999999"])
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("error: --tp: a worker of tp 99,999,999,999,999,999,999 x pp 1 x adp 1")
    assert result.stderr.strip().endswith("(use a smaller --tp)")


# --- TPU launch scripts do not pin chips with a CUDA variable ----------------------------------

def _emit(*args):
    from click.testing import CliRunner

    from paraplan.cli import main
    return CliRunner().invoke(main, ["serve", "simulate", "-m", "llama3.1-8b", "-b", "vllm", "--batch", "8", *args,
                                     "--emit"])


def test_a_tpu_script_with_workers_sharing_a_host_is_refused():
    """Four tp1 workers on one 4-chip TPU v4 host were each started with CUDA_VISIBLE_DEVICES=i,
    which a TPU runtime does not read: all four would reach for the same chips."""
    result = _emit("-s", "tpu-v4-pod", "--workers", "4")
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --emit: 4 workers would share host 0 of tpu-v4-pod")
    assert "CUDA_VISIBLE_DEVICES" in lines[0]


def test_a_tpu_script_with_a_host_per_worker_sets_no_cuda_variable_and_gpus_keep_theirs():
    tpu = _emit("-s", "tpu-v4-pod", "--tp", "4", "--workers", "2")
    assert tpu.exit_code == 0, tpu.output
    assert tpu.stdout.count("vllm serve") == 2 and "VISIBLE" not in tpu.stdout
    gpu = _emit("-s", "dgx-h100", "--workers", "2")
    assert gpu.exit_code == 0, gpu.output
    assert "CUDA_VISIBLE_DEVICES=0 vllm serve" in gpu.stdout and "CUDA_VISIBLE_DEVICES=1 vllm serve" in gpu.stdout


@pytest.mark.parametrize("args, field", [
    (("--tp", "8", "--batch", "8"), "--tp"),                        # one worker: was blamed on --workers
    (("--tp", "2", "--workers", "3", "--batch", "8"), "--workers"),
    # a prefill worker too large for the cluster is named, though the decode side has more GPUs
    (("--mode", "disagg", "--prefill-tp", "8", "--decode-tp", "1", "--decode-workers", "20"), "--prefill-tp"),
    (("--mode", "disagg", "--decode-tp", "8"), "--decode-tp"),     # --workers is refused under disagg
])
def test_a_deployment_above_a_clusters_max_gpus_names_what_makes_it_so(tmp_path, args, field):
    """A cluster file's ``max_gpus`` ceiling blamed --workers whatever made the deployment too large."""
    from click.testing import CliRunner

    from paraplan.cli import main
    from tests.cli_results import one_line_error
    text = (REPO / "hardware_specs" / "clusters" / "dgx-h100.yaml").read_text()
    cluster = tmp_path / "small.yaml"
    cluster.write_text(text.replace("gpus_per_node: 8", "gpus_per_node: 8\nmax_gpus: 4", 1))
    result = CliRunner().invoke(main, ["serve", "simulate", "-m", "llama3.1-70b", "-s", str(cluster), *args])
    one_line_error(result, f"error: {field}: ", "above the 4 GPUs of dgx-h100")


def test_an_aggregated_fix_without_pipeline_stages_is_not_said_to_have_them():
    # Llama-3.1-70B in bf16 (141 GB) on 3 H100: a disaggregated plan needs a prefill and a decode
    # worker of 2 GPUs each; one aggregated tp2 worker (70.6 GB a GPU) fits. The fix had called
    # tp2 a layout "with pipeline stages"
    with pytest.raises(InputError) as err:
        plan_serving(_ctx("llama3.1-70b", "dgx-h100", "vllm", "bf16"), 3, 1024, 1024, 1000.0, 50.0, modes=("disagg",))
    assert err.value.fix.startswith("add GPUs (a layout fits on 4), or aggregated workers fit (tp2): "
                                    "plan with --mode agg (or both), or a smaller weight format")
