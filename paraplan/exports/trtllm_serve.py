"""A priced serving deployment as TensorRT-LLM ``trtllm-serve`` commands (bash + YAML).

Each worker is one ``trtllm-serve`` engine (PyTorch backend) of tp x adp x pp GPUs.
TensorRT-LLM's ``tensor_parallel_size`` is the GPUs of one pipeline stage whether attention is
tensor-parallel or data-parallel over them; ``enable_attention_dp`` makes it data-parallel
(docs/source/features/parallel-strategy.md: "TP-8: tensor_parallel_size 8, enable_attention_dp
false; DP-8: tensor_parallel_size 8, enable_attention_dp true"), so an attention-DP rank is one
GPU and a layout with both tp > 1 and adp > 1 is refused. The experts take
``moe_expert_parallel_size`` (``--ep_size``) x ``moe_tensor_parallel_size`` =
tensor_parallel_size (tensorrt_llm/mapping.py). The engine settings the prediction assumed go
on the command line (``--max_batch_size``, ``--max_num_tokens``, ``--max_seq_len``,
``--kv_cache_free_gpu_memory_fraction``) and in the ``--extra_llm_api_options`` YAML (KV dtype,
CUDA-graph batch, overlap scheduler, attention DP, the experts' split). A worker spanning hosts
is started once, from its first host, under MPI (``mpirun`` + ``trtllm-llmapi-launch``). A
disaggregated deployment starts context (prefill) and generation (decode) servers with a KV
cache transceiver and ``trtllm-serve disaggregated`` in front of them.
"""
from __future__ import annotations

from hardware_specs.errors import InputError
from paraplan.exports.serving_common import FRONT_PORT, ServingLaunch, Worker

FRAMEWORK = "trtllm"
RELEASE = "TensorRT-LLM 1.x (PyTorch backend)"
#: TensorRT-LLM's default max_batch_size (BuildConfig), for a stack file stating no running cap
TRTLLM_DEFAULT_MAX_BATCH = 2048
#: what the disaggregated config calls each role
SERVER_ROLE = {"prefill": "context_servers", "decode": "generation_servers"}


def layout_text(w: Worker) -> str:
    size = w.tp * w.adp
    parts = [f"tp {size}" + (" (attention DP)" if w.adp > 1 else "")] + ([f"pp {w.pp}"] if w.pp > 1 else [])
    return " x ".join(parts) + (f", experts ep {w.moe_ep}" + (f" x etp {w.moe_tp}" if w.moe_tp > 1 else "")
                                if w.moe_ep > 1 else "")


def refusal(launch: ServingLaunch) -> InputError | None:
    for w in launch.workers:
        if w.adp > 1 and w.tp > 1:
            return InputError("--adp" if w.role == "agg" else f"--{w.role}-adp", f"TensorRT-LLM's attention data parallelism runs one GPU per rank "
                              f"(enable_attention_dp); tp {w.tp} x adp {w.adp} is not a layout it has",
                              f"use tp {w.tp * w.adp} with adp 1, or tp 1 with adp {w.tp * w.adp}")
    return None


def _config_name(w: Worker) -> str:
    return f"paraplan_{w.role}.yaml"


def role_file(launch: ServingLaunch, w: Worker) -> dict[str, str]:
    """The ``--extra_llm_api_options`` YAML of a role (the same for every worker of it)."""
    # context (prefill) servers run without the overlap scheduler, as TensorRT-LLM's
    # disaggregated examples start them and as they are priced (the stack's
    # context_overlap_scheduler, ``ServingBehaviour.context_only``)
    overlap = launch.overlap(w)
    lines = [f"# paraplan: {w.role} worker options as priced (stack {launch.stack})",
             f"enable_attention_dp: {'true' if w.adp > 1 else 'false'}",
             f"disable_overlap_scheduler: {'false' if overlap else 'true'}",
             f"enable_chunked_prefill: {'true' if launch.chunked_prefill else 'false'}",
             "kv_cache_config:",
             f"  dtype: {_kv_dtype(launch)}",
             f"  free_gpu_memory_fraction: {launch.memory_fraction:g}",
             "cuda_graph_config:",
             f"  max_batch_size: {min(launch.cuda_graph_max_batch, _max_batch(launch))}",
             "  enable_padding: true"]
    if launch.moe:
        lines.append(f"moe_tensor_parallel_size: {w.moe_tp}")
    if launch.speculative_tokens and launch.draft_model_path:
        raise InputError("--emit", "the TensorRT-LLM export writes MTP speculative decoding only: its EAGLE-3 "
                         "settings (EagleDecodingConfig) are not in the flag table the exports are checked against",
                         "emit with -b vllm or -b sglang, or add speculative_config (decoding_type: Eagle) yourself")
    if launch.speculative_tokens:
        # the checkpoint's MTP module, run num_nextn_predict_layers times when the checkpoint has
        # one (tensorrt_llm/llmapi/llm_args.py MTPDecodingConfig: EAGLE-style MTP for
        # single-layer checkpoints)
        lines += ["speculative_config:", "  decoding_type: MTP",
                  f"  num_nextn_predict_layers: {launch.speculative_tokens}"]
    if w.role != "agg":
        lines += ["cache_transceiver_config:", "  backend: DEFAULT"]
    return {_config_name(w): "\n".join(lines) + "\n"}


def _kv_dtype(launch: ServingLaunch) -> str:
    """``fp8``, or ``auto`` where it gives the priced 16-bit KV cache; a 16-bit KV cache on a
    checkpoint whose ``auto`` is FP8 is refused (TensorRT-LLM documents ``auto`` and ``fp8``)."""
    if launch.kv_cache_dtype == "fp8":
        return "fp8"
    if launch.checkpoint_kv_dtype == "fp8":
        raise InputError("--kv-cache-dtype", "TensorRT-LLM takes an FP8 / NVFP4 checkpoint's FP8 KV cache (kv_cache_config "
                         "dtype auto or fp8); a 16-bit one is not a setting it documents",
                         "price --kv-cache-dtype auto or fp8 for TensorRT-LLM")
    return "auto"


def _max_batch(launch: ServingLaunch) -> int:
    """``--max_batch_size``: the stack's running cap, else TensorRT-LLM's own default."""
    return launch.max_running_requests or TRTLLM_DEFAULT_MAX_BATCH


def shared_files(launch: ServingLaunch) -> dict[str, str]:
    """Each role's options YAML, and the disaggregated front end's config (its host names
    expand when the script runs)."""
    files: dict = {}
    for role in ("agg", "prefill", "decode"):
        workers = launch.role(role)
        if workers:
            files.update(role_file(launch, workers[0]))
    if launch.mode == "agg":
        return files
    lines = ["hostname: 0.0.0.0", f"port: {FRONT_PORT}", "backend: pytorch"]
    for role in ("prefill", "decode"):
        servers = launch.role(role)
        lines += [f"{SERVER_ROLE[role]}:", f"  num_instances: {len(servers)}", "  urls:"]
        lines += [f'    - "${{HOST[{w.first_host}]}}:{w.port}"' for w in servers]
    files["paraplan_disagg.yaml"] = ("\n".join(lines) + "\n", True)
    return files


def worker_command(launch: ServingLaunch, w: Worker, node_rank: int) -> list[str]:
    """``trtllm-serve`` of worker ``w`` (on its first host; under MPI when it spans hosts)."""
    err = refusal(launch)
    if err is not None:
        raise err
    if node_rank > 0:
        return []            # the MPI launch on the worker's first host starts this host's ranks
    argv = []
    if w.hosts > 1:
        hosts = ",".join(f"${{HOST[{w.first_host + k}]}}:{launch.gpus_per_host}" for k in range(w.hosts))
        argv += ["mpirun", "-H", hosts, "-np", str(w.gpus), "trtllm-llmapi-launch"]
    argv += ["trtllm-serve", "$MODEL", "--backend", "pytorch", "--host", "0.0.0.0", "--port", str(w.port),
             "--tp_size", str(w.tp * w.adp), "--pp_size", str(w.pp)]
    if launch.moe:
        argv += ["--ep_size", str(w.moe_ep)]
    # without chunked prefill a prompt longer than max_num_tokens is refused ("The sum of prompt
    # length ... should not exceed max_num_tokens"): at least one prompt (a prefill worker's
    # priced prompts) a step, as the model prices it. No slack for a re-tokenised prompt: the
    # priced activations are sized for exactly these tokens (``disaggregated.prefill_memory``),
    # and the benchmark sends isl ids as they are (``bench_command``: ``--tokenize-on-client``)
    argv += ["--max_batch_size", str(_max_batch(launch)), "--max_num_tokens", str(launch.step_tokens(w)),
             "--max_seq_len", str(launch.max_model_len),
             "--kv_cache_free_gpu_memory_fraction", f"{launch.memory_fraction:g}",
             "--extra_llm_api_options", f"$WORKDIR/{_config_name(w)}"]
    return argv


def front_command(launch: ServingLaunch) -> list[str] | None:
    if launch.mode == "agg":
        return None
    return ["trtllm-serve", "disaggregated", "-c", "$WORKDIR/paraplan_disagg.yaml"]


def bench_command(launch: ServingLaunch, host: str, port: int, concurrency: int) -> list[str]:
    """TensorRT-LLM's serving benchmark (the vLLM script's port): ``concurrency`` clients in a
    closed loop, isl random token ids, exactly osl output tokens.

    ``--tokenize-on-client`` sends the ids themselves: without it the script's RandomDataset
    decodes them to text (``return_text=not args.tokenize_on_client``) and the server
    re-tokenises that, adding the BOS token, so each prompt reaches it as isl + 1 tokens, over a
    context server's ``--max_num_tokens`` of exactly its priced prompts (refused without chunked
    prefill). The flag's help: "Tokenize on client instead of server ... to let the server run
    exactly the same ISL specified by cli" (NVIDIA/TensorRT-LLM
    tensorrt_llm/serve/scripts/benchmark_serving.py@0228a71223416496ff056a157936bad2e42c762f;
    its deployment guides' benchmark scripts, e.g. docs/source/deployment-guide/
    deployment-guide-for-deepseek-r1-on-trtllm.md, pass it beside ``--random-ids``)."""
    return ["python", "-m", "tensorrt_llm.serve.scripts.benchmark_serving", "--model", "$MODEL", "--host", host,
            "--port", str(port), "--dataset-name", "random", "--random-ids", "--tokenize-on-client",
            "--random-input-len", str(launch.isl),
            "--random-output-len", str(launch.osl), "--ignore-eos", "--max-concurrency", str(concurrency),
            "--num-prompts", str(10 * concurrency)]
