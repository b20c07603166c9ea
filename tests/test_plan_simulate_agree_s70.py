"""The planner and the simulator agree exactly, through the commands a user runs: each top row of
``paraplan plan --json`` re-run as the ``paraplan simulate`` command the plan prints for it, and
each ``serve plan`` row (front, best, and layouts off the front) re-run as its ``serve simulate``
command, give the same step time, memory and rates to 1e-9.

The cases are the axes test_planner.py and the serving plan tests leave out, drawn from a seeded
random differential run of session 70 (about 9,000 training rows, 2,900 serving rows and 1,100
pooled rows, no difference): AMD and TPU clusters, fp8 / mxfp8 / nvfp4, every context-parallel
flavour, zero-bubble and DualPipe schedules, FSDP / DeepSpeed / MaxText stacks, expert
parallelism with etp 1 and the dispatch switch, activation offload over NVLink-C2C, and
disaggregated serving whose workers are placed in the NVLink domains of the GPUs given (--gpus)."""
from __future__ import annotations

import json
import shlex

import pytest
from click.testing import CliRunner

from hardware_specs.catalog import load_cluster, load_stack
from model_specs.catalog import load_model
from paraplan.cli import main
from paraplan.commands import serve as serve_command
from paraplan.commands.plan import simulate_command
from simulator.stack_defaults import run_cp_kind

GIB = 2**30
REL = 1e-9


def _run(args: list[str]) -> dict:
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, (args, res.output)
    return json.loads(res.stdout)


def _option(args: list[str], name: str):
    return args[args.index(name) + 1] if name in args else None


@pytest.mark.parametrize("model, cluster, gpus, gbs, extra", [
    # MI300X in fp8, Ulysses context parallelism fixed
    ("llama3-8b", "mi300x-node", 16, 32, ["--dtype", "fp8", "--fix", "cp_kind=ulysses", "--fix", "cp=2"]),
    # Blackwell's block-scaled dtypes, experts over 8 GPUs at etp 1, deduplicated dispatch
    ("qwen3-30b-a3b", "dgx-b200", 16, 64, ["--dtype", "mxfp8", "--dtype", "nvfp4", "--fix", "ep=8", "--fix", "etp=1",
                                           "--ep-dispatch-dedup"]),
    # FSDP (torchtitan) on A100 40 GB, the all-gather context-parallel flavour
    ("gpt3-13b", "dgx-a100-40gb", 16, 32, ["--stack", "torchtitan", "--fix", "cp_kind=allgather"]),
    # hybrid Mamba / attention / MoE layers on zero-bubble pipelines
    ("nemotron-3-nano", "dgx-h100", 32, 64, ["--fix", "schedule=zb-h2", "--fix", "pp=2"]),
    # a hybrid context-parallel ring (Ulysses inside, ring across)
    ("llama3-70b", "hgx-h200", 64, 64, ["--fix", "cp_kind=hybrid", "--fix", "cp=4", "--seq-len", "32768"]),
    # TPU v4 under MaxText
    ("gpt3-1.3b", "tpu-v4-pod", 64, 128, ["--stack", "maxtext"]),
    # TPU v5e's 2D torus: every group on the links of the axes it spans, tp and dp free
    ("llama3-8b", "tpu-v5e-pod", 64, 128, ["--stack", "maxtext"]),
    # V100 in fp16 under DeepSpeed 2021, ZeRO-3 fixed
    ("gpt3-1.3b", "dgx2-v100", 32, 64, ["--stack", "deepspeed-2021", "--fix", "zero=3"]),
    # activation offload over NVLink-C2C (every top row offloads: off79, off73)
    ("llama3-70b", "gb200-nvl72", 8, 32, ["--fix", "recompute=none"]),
    # a range of GPU counts with the frontier rows (--pareto) and a headroom of 0
    ("mixtral-8x7b", "dgx-h100", "16-32", 32, ["--pareto", "--headroom-gib", "0"]),
])
def test_plan_rows_rerun_as_their_simulate_command_give_the_same_numbers(model, cluster, gpus, gbs, extra):
    args = ["plan", "-m", model, "-c", cluster, "-n", gpus, "--global-batch", gbs, "--json", "--top", 4, *extra]
    out = _run(args)
    rows = out["plans"][:4] + out.get("pareto_memory", [])[:3] + out.get("pareto_gpus", [])[:3]
    assert rows
    spec, cl = load_model(model), load_cluster(cluster)
    seq_len = _option(args, "--seq-len")
    seq_len = None if seq_len is None else int(seq_len)
    stack_name = _option(args, "--stack") or "megatron-core"
    switches = {"ep_dispatch_dedup": True} if "--ep-dispatch-dedup" in args else {}
    stack = load_stack(stack_name).with_training(**switches)
    headroom = _option(args, "--headroom-gib")
    headroom = None if headroom is None else float(headroom)
    for row in rows:
        assert row["pipeline_exact"]
        default_kind = run_cp_kind(int(row["cp"]), None, stack, spec.name, cl.gpu.name, str(row["dtype"]))
        command = simulate_command(row, model, cluster, seq_len, stack_name, switches, headroom, spec.num_layers,
                                   default_kind, moe=spec.moe is not None)
        sim = _run(shlex.split(command)[1:] + ["--json"])
        assert sim["fits"], command
        assert sim["step_time_s"] == pytest.approx(row["step_time_s"], rel=REL), command
        assert sim["memory_bytes"] == pytest.approx(row["memory_gib"] * GIB, rel=REL), command
        assert sim["tokens_per_s"] == pytest.approx(row["tokens_per_s"], rel=REL), command
    if model == "llama3-70b" and cluster == "gb200-nvl72":
        assert all(r["offload_activation_layers"] > 0 for r in rows)      # the case exercises offload


SERVE_KEYS = ("ttft_ms", "ttft_p90_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_user")


@pytest.mark.parametrize("model, system, backend, gpus, extra", [
    # MoE on NVL72 in nvfp4, both modes: disaggregated rows on fewer GPUs than given (--gpus)
    ("deepseek-r1", "gb200-nvl72", "trtllm", 24, ["--precision", "nvfp4", "--isl", "4096", "--osl", "1024"]),
    # a dense model with an EAGLE-3 head and its own acceptance rate
    ("llama3.1-8b", "dgx-h100", "sglang", 8, ["--speculative-tokens", "3", "--draft-model",
                                               "examples/drafts/eagle3-llama3.1-8b", "--draft-acceptance", "0.7"]),
    # MI300X, fp8 KV cache, pipelines allowed, 12 GPUs (1.5 nodes)
    ("qwen3-32b", "mi300x-node", "vllm", 12, ["--kv-cache-dtype", "fp8", "--isl", "8192", "--osl", "512"]),
])
def test_serve_plan_rows_rerun_as_their_serve_simulate_command_give_the_same_numbers(model, system, backend, gpus,
                                                                                     extra):
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    extra = [str(repo / e) if e.startswith("examples/") else e for e in extra]
    args = ["serve", "plan", "-m", model, "-s", system, "-b", backend, "-n", gpus, "--json", "--top", 0,
            "--ttft-ms", 5000, "--tpot-ms", 100, *extra]
    out = _run(args)
    opts = {"model": model, "system": system, "backend": backend, "gpus": gpus,
            "isl": int(_option(extra, "--isl") or 1024), "osl": int(_option(extra, "--osl") or 1024)}
    for name in ("precision", "kv_cache_dtype", "speculative_tokens", "draft_model", "draft_acceptance"):
        value = _option(extra, "--" + name.replace("_", "-"))
        if value is not None:
            opts[name] = float(value) if name == "draft_acceptance" else int(value) if name == "speculative_tokens" \
                else value
    front = out["front"]
    rows = [out["best"], *front[::max(1, len(front) // 8)]]
    modes = {r["mode"] for r in rows}
    moe = load_model(model).moe is not None
    placed = 0
    for row in rows:
        command = serve_command.simulate_command(row, opts, moe=moe)
        placed += "--gpus" in command
        sim = _run(shlex.split(command)[1:] + ["--json"])
        for key in SERVE_KEYS:
            assert sim[key] == pytest.approx(row[key], rel=REL), (command, key)
    if model == "deepseek-r1":
        assert modes == {"agg", "disagg"} and placed      # both modes, and workers placed in the GPUs given
