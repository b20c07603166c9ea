"""A priced serving deployment as vLLM ``vllm serve`` commands (bash).

Each worker is one ``vllm serve`` engine: ``--tensor-parallel-size`` tp x ``--pipeline-parallel-
size`` pp GPUs per data-parallel rank and ``--data-parallel-size`` adp ranks (attention data
parallelism of an MoE model; vLLM docs "Data Parallel Deployment"). Its experts run over all
dp x tp ranks, expert-parallel with ``--enable-expert-parallel``, else tensor-parallel
(vllm/model_executor/layers/fused_moe/config.py ``FusedMoEParallelConfig.make``; the stack's
``expert_splits: all_ep_or_all_tp``): any other split is refused. A worker whose data-parallel
ranks span hosts starts one engine per host (``--data-parallel-size-local``,
``--data-parallel-start-rank``, ``--data-parallel-address``; the others ``--headless``); one
whose tensor or pipeline group spans hosts needs Ray and is refused. Disaggregated deployments
are refused: vLLM moves KV caches between engines (``--kv-transfer-config``) but ships no
prefill / decode router. The engine settings the prediction assumed are passed explicitly
(token budget, running-request cap, memory share, KV dtype, CUDA-graph sizes), so a release
with other defaults still runs the plan as priced. Flags are checked against
``serving_flags.json`` (the parser of the release it names).
"""
from __future__ import annotations

import json

from hardware_specs.errors import InputError
from paraplan.exports.serving_common import ServingLaunch, Worker

FRAMEWORK = "vllm"
RELEASE = "vLLM 0.19.1"
#: the data-parallel coordinator's port on a multi-host worker's first host
DP_RPC_PORT = 13345
KV_DTYPE = {"fp8": "fp8", "bf16": "bfloat16", "fp16": "float16"}


def layout_text(w: Worker) -> str:
    parts = [f"tp {w.tp}"] + ([f"pp {w.pp}"] if w.pp > 1 else []) + ([f"dp {w.adp}"] if w.adp > 1 else [])
    return " x ".join(parts) + (f", experts ep {w.moe_ep}" if w.moe_ep > 1 else "")


def mode_refusal(mode: str) -> InputError | None:
    """Why vLLM cannot run any launch of serving ``mode`` (``agg`` / ``disagg``), or None: the
    part of ``refusal`` that depends on the mode alone, so a search can set aside every
    candidate of a mode at once (``paraplan.serving_launchable.launchable_best``)."""
    if mode == "disagg":
        return InputError("--mode", "vLLM ships no router for disaggregated prefill and decode workers",
                          "export the aggregated plan (serve plan --mode agg), or plan with -b sglang / -b trtllm")
    return None


def refusal(launch: ServingLaunch) -> InputError | None:
    """Why vLLM cannot run ``launch`` as priced, or None."""
    err = mode_refusal(launch.mode)
    if err is not None:
        return err
    for w in launch.workers:
        group = w.tp * w.adp
        if launch.moe and not (w.moe_ep == 1 or w.moe_ep == group):
            return InputError("--moe-ep" if w.role == "agg" else f"--{w.role}-moe-ep", f"vLLM runs a worker's experts all expert-parallel (ep {group}) or "
                              f"all tensor-parallel (ep 1), not ep {w.moe_ep}", "choose one of the two")
        if w.hosts > 1 and (w.tp * w.pp > launch.gpus_per_host or launch.gpus_per_host % (w.tp * w.pp)):
            return InputError("--tp" if w.role == "agg" else f"--{w.role}-tp", f"a tensor x pipeline group of {w.tp * w.pp} GPUs spans hosts of "
                              f"{launch.gpus_per_host}; vLLM runs that only under Ray", "keep tp x pp within a host")
    return None


def _quantisation(launch: ServingLaunch) -> list[str]:
    # a pre-quantised checkpoint carries its quantization_config, which vLLM reads: no flag
    return ["--quantization", "fp8"] if launch.online_fp8 else []


def worker_command(launch: ServingLaunch, w: Worker, node_rank: int) -> list[str]:
    """``vllm serve`` for node ``node_rank`` of worker ``w``."""
    err = refusal(launch)
    if err is not None:
        raise err
    argv = ["vllm", "serve", "$MODEL", "--host", "0.0.0.0", "--port", str(w.port),
            "--tensor-parallel-size", str(w.tp), "--pipeline-parallel-size", str(w.pp)]
    if w.adp > 1:
        argv += ["--data-parallel-size", str(w.adp)]
        if w.hosts > 1:
            local = w.adp // w.hosts
            argv += ["--data-parallel-size-local", str(local), "--data-parallel-start-rank", str(node_rank * local),
                     "--data-parallel-address", f"${{HOST[{w.first_host}]}}", "--data-parallel-rpc-port",
                     str(DP_RPC_PORT)]
            if node_rank > 0:
                argv.append("--headless")
    if launch.moe and w.moe_ep > 1:
        argv.append("--enable-expert-parallel")
    argv += ["--dtype", launch.model_dtype] + _quantisation(launch)
    # the KV dtype priced, named: "auto" would take an FP8 checkpoint's FP8 KV cache
    argv += ["--kv-cache-dtype", KV_DTYPE[launch.kv_cache_dtype],
             "--max-model-len", str(launch.max_model_len),
             "--max-num-batched-tokens", str(launch.step_tokens(w)),
             "--gpu-memory-utilization", f"{launch.memory_fraction:g}"]
    if launch.max_running_requests:
        argv += ["--max-num-seqs", str(launch.max_running_requests)]
    # vLLM counts its capture sizes in tokens: k + 1 a request when speculating
    # (vllm/config/vllm.py: max_cudagraph_capture_size from max_num_seqs x decode_query_len)
    argv += ["--max-cudagraph-capture-size", str(launch.cuda_graph_max_batch * (1 + launch.speculative_tokens))]
    argv.append("--async-scheduling" if launch.overlap(w) else "--no-async-scheduling")
    if launch.speculative_tokens and launch.draft_model_path:
        # an EAGLE-3 head (vllm/config/speculative.py: method "eagle3", "model" its folder)
        argv += ["--speculative-config",
                 json.dumps({"method": "eagle3", "model": "$DRAFT_MODEL",
                             "num_speculative_tokens": launch.speculative_tokens}, separators=(",", ":"))]
    elif launch.speculative_tokens:
        # the checkpoint's MTP module as the drafter, run k times for k > its modules
        # (vllm/config/speculative.py: method "mtp"; "num_speculative_tokens > 1 will run multiple
        # times of forward on same MTP layer")
        argv += ["--speculative-config",
                 json.dumps({"method": "mtp", "num_speculative_tokens": launch.speculative_tokens}, separators=(",", ":"))]
    return argv


def shared_files(launch: ServingLaunch) -> dict[str, str]:
    return {}


def front_command(launch: ServingLaunch) -> list[str] | None:
    """None: one worker is its own front end; several identical workers need an HTTP load
    balancer over their ports (vLLM has none of its own for separate engines)."""
    return None


def bench_command(launch: ServingLaunch, host: str, port: int, concurrency: int) -> list[str]:
    """vLLM's serving benchmark: a closed loop of ``concurrency`` clients, prompts of isl random
    tokens and exactly osl output tokens each."""
    return ["vllm", "bench", "serve", "--model", "$MODEL", "--host", host, "--port", str(port),
            "--dataset-name", "random", "--random-input-len", str(launch.isl), "--random-output-len", str(launch.osl),
            "--ignore-eos", "--max-concurrency", str(concurrency), "--num-prompts", str(10 * concurrency)]
