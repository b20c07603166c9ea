"""A priced serving deployment as SGLang ``python -m sglang.launch_server`` commands (bash).

Each worker is one SGLang server over tp x adp x pp GPUs: ``--tp-size`` is the GPUs of one
pipeline stage (tp x adp), ``--attn-dp-size`` adp splits attention into adp data-parallel groups
of tp GPUs each (sglang/srt/arg_groups/parallel_hook.py at 0.5.23: attn_dp_size divides tp_size;
the older spelling ``--dp-size N --enable-dp-attention`` is rewritten to it), which also divides
the engine's ``--chunked-prefill-size`` among the groups (the stack input
``token_budget_split_over_attention_dp``), and ``--ep-size`` moe_ep puts the experts over the same
ranks with moe_tp = tp_size / ep_size. A worker spanning hosts
starts one process per host (``--nnodes``, ``--node-rank``, ``--dist-init-addr``). Several
aggregated workers are put behind ``sglang_router`` (``--worker-urls``); a disaggregated
deployment starts prefill and decode servers (``--disaggregation-mode``) and the router in
``--pd-disaggregation`` mode with each prefill server's bootstrap port. The engine settings the
prediction assumed (token budget ``--chunked-prefill-size``, memory share
``--mem-fraction-static``, KV dtype, decode CUDA-graph batch ``--cuda-graph-max-bs-decode``) are
passed explicitly. Flags are those of SGLang 0.5.23 (``serving_flags.json``).
"""
from __future__ import annotations

from hardware_specs.errors import InputError
from paraplan.exports.serving_common import FRONT_PORT, PORT_STRIDE, ServingLaunch, Worker

FRAMEWORK = "sglang"
RELEASE = "SGLang 0.5.23"
#: the torch.distributed rendezvous port of a multi-host worker, on its first host
DIST_PORT = 5000
#: first prefill bootstrap port on a host (SGLang's default 8998), one per prefill server
BOOTSTRAP_PORT = 8998


def layout_text(w: Worker) -> str:
    parts = [f"tp {w.tp * w.adp}"] + ([f"dp-attention {w.adp}"] if w.adp > 1 else []) + \
        ([f"pp {w.pp}"] if w.pp > 1 else [])
    return " x ".join(parts) + (f", experts ep {w.moe_ep}" if w.moe_ep > 1 else "")


def refusal(launch: ServingLaunch) -> InputError | None:
    """SGLang runs a MoE model's dense MLP layers and shared experts over the whole tp_size or
    data-parallel (``--moe-dense-tp-size`` None or 1; sglang/srt/arg_groups/validation_hook.py:
    "moe_dense_tp_size only supports None, 1, or tp_size"); the model prices them split by the
    attention tp. With attention DP that is exact only at tp 1 (``--moe-dense-tp-size 1``)."""
    for w in launch.workers:
        if launch.moe and w.adp > 1 and w.tp > 1:
            return InputError("--tp" if w.role == "agg" else f"--{w.role}-tp",
                              f"with attention DP SGLang runs the dense MLP layers over all {w.tp * w.adp} GPUs or "
                              f"none (--moe-dense-tp-size), not over the attention tp {w.tp} priced",
                              f"use tp 1 with adp {w.tp * w.adp}, or tp {w.tp * w.adp} with adp 1")
    return None


def _bootstrap_port(w: Worker, launch: ServingLaunch) -> int:
    """One bootstrap port per prefill server on a host (its slot on the host)."""
    return BOOTSTRAP_PORT + (w.port - launch.workers[0].port) // PORT_STRIDE if w.hosts == 1 else BOOTSTRAP_PORT


def _kv_dtype(launch: ServingLaunch) -> str:
    """The KV dtype priced, named (SGLang has no 16-bit float16 KV choice: ``auto`` gives the
    model dtype when the checkpoint names no KV format)."""
    if launch.kv_cache_dtype == "fp8":
        return "fp8_e4m3"
    if launch.kv_cache_dtype == "bf16":
        return "bfloat16"
    if launch.checkpoint_kv_dtype == "fp8":
        raise InputError("--kv-cache-dtype", "SGLang has no float16 KV-cache setting, and auto takes this checkpoint's "
                         "FP8 KV cache", "price --kv-cache-dtype bf16 or fp8")
    return "auto"


def worker_command(launch: ServingLaunch, w: Worker, node_rank: int) -> list[str]:
    """``sglang.launch_server`` for node ``node_rank`` of worker ``w``."""
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "$MODEL", "--host", "0.0.0.0", "--port", str(w.port),
            "--tp-size", str(w.tp * w.adp)]
    if w.pp > 1:
        argv += ["--pp-size", str(w.pp)]
    if w.adp > 1:
        argv += ["--attn-dp-size", str(w.adp)]
        if launch.moe:
            argv += ["--moe-dense-tp-size", "1"]        # dense MLPs per rank, as priced at tp 1
    if launch.moe and w.moe_ep > 1:
        argv += ["--ep-size", str(w.moe_ep)]
    if w.hosts > 1:
        argv += ["--nnodes", str(w.hosts), "--node-rank", str(node_rank),
                 "--dist-init-addr", f"${{HOST[{w.first_host}]}}:{DIST_PORT}"]
    argv += ["--dtype", launch.model_dtype]
    if launch.online_fp8:
        argv += ["--quantization", "fp8"]
    # SGLang divides the chunk size among the attention-DP groups (the stack input
    # token_budget_split_over_attention_dp, which the aggregated model prices); a prefill worker
    # takes its priced prompts a step in each group, so its size is that times the groups
    budget = launch.token_budget if w.role != "prefill" else launch.step_tokens(w) * w.adp
    argv += ["--kv-cache-dtype", _kv_dtype(launch),
             "--context-length", str(launch.max_model_len),
             "--chunked-prefill-size", str(budget)]
    if w.role == "prefill":
        argv += ["--max-prefill-tokens", str(budget)]
    argv += ["--mem-fraction-static", f"{launch.memory_fraction:g}",
             "--cuda-graph-max-bs-decode", str(launch.cuda_graph_max_batch)]
    if w.role != "prefill":
        # per engine, divided among the attention-DP groups as the chunk size is; without a cap in
        # the stack, the priced clients (SGLang otherwise derives one from the pool, at most 4,096)
        cap = launch.max_running_requests or w.batch
        argv += ["--max-running-requests", str(cap * w.adp)]
    if not launch.overlap(w):
        argv.append("--disable-overlap-schedule")
    if launch.speculative_tokens:
        # one draft a step along one chain (top-k 1). DeepSeek-V3 / GLM MTP runs as EAGLE, SGLang
        # taking the draft layer from the model's own checkpoint (sglang/srt/arg_groups/
        # speculative_hook.py ``_handle_eagle_family``: speculative_draft_model_path = model_path);
        # an EAGLE-3 head as EAGLE3 from its own folder
        k = launch.speculative_tokens
        argv += ["--speculative-algorithm", "EAGLE3" if launch.draft_model_path else "EAGLE"]
        if launch.draft_model_path:
            argv += ["--speculative-draft-model-path", "$DRAFT_MODEL"]
        argv += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", str(k + 1)]
    if w.role != "agg":
        argv += ["--disaggregation-mode", w.role]
        if w.role == "prefill":
            argv += ["--disaggregation-bootstrap-port", str(_bootstrap_port(w, launch))]
    return argv


def shared_files(launch: ServingLaunch) -> dict[str, str]:
    return {}


def _url(w: Worker) -> str:
    return f"http://${{HOST[{w.first_host}]}}:{w.port}"


def front_command(launch: ServingLaunch) -> list[str] | None:
    """The router: over the aggregated workers (several), or the prefill and decode servers."""
    base = ["python", "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", str(FRONT_PORT)]
    if launch.mode == "agg":
        if len(launch.workers) == 1:
            return None
        return base + ["--worker-urls"] + [_url(w) for w in launch.workers]
    argv = base + ["--pd-disaggregation"]
    for w in launch.role("prefill"):
        argv += ["--prefill", _url(w), str(_bootstrap_port(w, launch))]
    for w in launch.role("decode"):
        argv += ["--decode", _url(w)]
    return argv


def bench_command(launch: ServingLaunch, host: str, port: int, concurrency: int) -> list[str]:
    """SGLang's serving benchmark: ``concurrency`` clients in a closed loop, prompts of exactly
    isl and outputs of exactly osl tokens (range ratio 1)."""
    return ["python", "-m", "sglang.bench_serving", "--backend", "sglang", "--host", host, "--port", str(port),
            "--dataset-name", "random", "--random-input-len", str(launch.isl), "--random-output-len", str(launch.osl),
            "--random-range-ratio", "1", "--max-concurrency", str(concurrency), "--num-prompts", str(10 * concurrency)]
