"""Run serving command lines through the real vLLM / SGLang argument parsers.

Run it with an interpreter that has the engine installed (``tools/serving_flags.py`` documents
the scratch environment: the engines' wheels installed with ``--no-deps`` plus the light
pure-Python packages their parser modules import; torch CPU is enough, no GPU is needed)::

    python tools/serving_probe.py parse vllm  < argv.json     # argv: a JSON list, no program name
    python tools/serving_probe.py parse sglang argv.json
    python tools/serving_probe.py flags vllm                  # every option of the parser

``parse`` prints one JSON object: ``accepted`` (bool), ``exit_code`` (the parser's exit status
when it refused the command line, else 0), ``error`` (its message), ``fields`` (the parsed
values of the plan's parallelism / batching / memory / quantisation / KV / speculative /
disaggregation settings), ``changed`` (every value that differs from the parser's default) and
``post_parse`` (what the engine's own offline post-parse step answered, see below).

Post-parse steps that run offline:

* vLLM: ``validate_parsed_serve_args`` (``vllm serve``'s ``validate``) and
  ``AsyncEngineArgs.from_cli_args`` (builds the engine-args dataclass, running its
  ``__post_init__``). ``EngineArgs.create_engine_config`` is not run: it loads the model's
  Hugging Face config (network or a local checkpoint) and queries the device.
* SGLang (0.5.23): ``ServerArgs.from_cli_args`` then ``ServerArgs.resolve_once`` (what
  ``launch_server.run_server`` calls), which runs the resolution pipeline
  (``sglang/srt/arg_groups/pipeline.py: run_resolution_pipeline``). Its model-independent
  checks run first; with ``--model-path dummy`` (or ``none``) it stops there, otherwise it goes
  on to read the model's config (network or a local checkpoint) and the device, which offline
  fails: the error is reported as it is (``post_parse.ok`` false) without making the command
  line a refusal. ``--dummy-model`` replaces the model path by ``dummy`` for that reason.
  ``resolved_here`` holds the values the pipeline settled on this machine (no GPU).

vLLM chooses its platform (CUDA, ROCm, CPU, ...) by probing the machine; the parser's
``--device``-related defaults need one, so before building the parser this script installs a
stand-in platform object that says "cuda" and does nothing else (vLLM itself swaps the platform
object the same way for ``vllm bench``). Nothing else is patched.
"""
from __future__ import annotations

import argparse
import contextlib
import enum
import io
import json
import sys

#: the plan's settings, by parser ``dest``.
FIELDS = {
    "vllm": [
        "model_tag", "model", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
        "data_parallel_size_local", "data_parallel_rank", "data_parallel_address", "data_parallel_rpc_port",
        "data_parallel_backend", "enable_expert_parallel", "all2all_backend", "enable_eplb",
        "decode_context_parallel_size", "prefill_context_parallel_size",
        "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "max_model_len",
        "gpu_memory_utilization", "kv_cache_memory_bytes", "kv_cache_dtype", "block_size", "enable_prefix_caching",
        "quantization", "dtype", "max_cudagraph_capture_size", "cudagraph_capture_sizes", "enforce_eager",
        "compilation_config", "async_scheduling", "speculative_config", "kv_transfer_config",
        "distributed_executor_backend", "nnodes", "node_rank", "master_addr", "master_port",
    ],
    "sglang": [
        "model_path", "tp_size", "pp_size", "dp_size", "enable_dp_attention", "attn_dp_size", "ep_size",
        "moe_dense_tp_size", "moe_a2a_backend", "moe_runner_backend", "enable_eplb", "ep_num_redundant_experts",
        "enable_dp_lm_head", "nnodes", "node_rank", "dist_init_addr",
        "max_running_requests", "chunked_prefill_size", "max_prefill_tokens", "enable_mixed_chunk",
        "context_length", "mem_fraction_static", "max_total_tokens", "kv_cache_dtype", "page_size",
        "quantization", "dtype", "cuda_graph_max_bs", "cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill", "cuda_graph_bs", "disable_cuda_graph",
        "disable_overlap_schedule", "speculative_algorithm", "speculative_num_steps",
        "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_draft_model_path",
        "disaggregation_mode", "disaggregation_transfer_backend", "disaggregation_bootstrap_port",
        "disaggregation_ib_device", "disable_radix_cache", "host", "port",
    ],
}


def _offline_platform() -> None:
    import vllm.platforms as platforms
    from vllm.platforms.interface import Platform, PlatformEnum

    class OfflineCuda(Platform):  # says "cuda" so the parser's defaults resolve; never runs anything
        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"
        dispatch_key = "CUDA"
        ray_device_key = "GPU"

    platforms.current_platform = OfflineCuda()


def build_parser(engine: str):
    """``(parser, argv prefix)``: the parser the engine's launch command builds."""
    if engine == "vllm":
        # vllm/entrypoints/cli/main.py: a FlexibleArgumentParser with one subparser per command;
        # ServeSubcommand.subparser_init adds make_arg_parser (FrontendArgs + AsyncEngineArgs) + --grpc.
        from vllm.entrypoints.cli.serve import ServeSubcommand
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        _offline_platform()
        top = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
        sub = top.add_subparsers(required=False, dest="subparser")
        serve = ServeSubcommand().subparser_init(sub)
        return top, serve, ["serve"]
    if engine == "sglang":
        # python/sglang/launch_server.py -> sglang.srt.server_args.prepare_server_args:
        # argparse.ArgumentParser() + ServerArgs.add_cli_args
        from sglang.srt.server_args import ServerArgs
        parser = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        return parser, parser, []
    raise SystemExit(f"unknown engine {engine!r} (vllm or sglang)")


def _jsonable(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, enum.Enum):
        return _jsonable(v.value)
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple, set, frozenset)):
        items = [_jsonable(x) for x in v]
        return sorted(items, key=str) if isinstance(v, (set, frozenset)) else items
    if hasattr(v, "__dataclass_fields__"):
        import dataclasses
        return _jsonable({f.name: getattr(v, f.name) for f in dataclasses.fields(v)})
    if hasattr(v, "model_dump"):
        return _jsonable(v.model_dump())
    return repr(v)


def _type_name(t) -> str | None:
    if t is None:
        return None
    name = getattr(t, "__qualname__", None) or type(t).__name__
    inner = []
    for cell in getattr(t, "__closure__", None) or ():
        try:
            c = cell.cell_contents
        except ValueError:
            continue
        if isinstance(c, type) or callable(c):
            inner.append(getattr(c, "__qualname__", None) or type(c).__name__)
    short = {"_optional_type": "optional", "parse_dataclass": "json_dataclass"}
    base = short.get(name.rsplit(".", 1)[-1], name)
    return f"{base}({', '.join(inner)})" if inner else base


_ACTIONS = {"_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
            "_StoreConstAction": "store_const", "_AppendAction": "append", "_CountAction": "count",
            "BooleanOptionalAction": "boolean_optional", "_HelpAction": "help", "_VersionAction": "version"}


def dump_flags(engine: str) -> dict:
    _, parser, _ = build_parser(engine)
    out = {}
    for act in parser._actions:
        kind = type(act).__name__
        if kind == "_HelpAction":
            continue
        longs = [s for s in act.option_strings if s.startswith("--") and not s.startswith("--no-")]
        key = longs[0] if longs else (act.option_strings[0] if act.option_strings else act.dest)
        out[key] = {
            "option_strings": list(act.option_strings),
            "dest": act.dest,
            "action": _ACTIONS.get(kind, kind),
            "type": _type_name(act.type),
            "choices": None if act.choices is None else [_jsonable(c) for c in act.choices],
            "nargs": act.nargs,
            "default": _jsonable(act.default),
            "required": bool(act.required),
            "deprecated": bool(getattr(act, "deprecated", False)),
        }
    return out


def value_sets(engine: str) -> dict:
    """Values a flag takes that its parser does not list as ``choices`` but a later check does."""
    if engine == "vllm":
        from vllm.model_executor.layers import quantization as q
        return {"--quantization": {
            "values": sorted(q.QUANTIZATION_METHODS), "deprecated": sorted(q.DEPRECATED_QUANTIZATION_METHODS),
            "checked_by": "vllm/config/model.py ModelConfig._verify_quantization (at create_engine_config):"
                          " must be one of QUANTIZATION_METHODS and, for a checkpoint whose config.json has a"
                          " quantization_config, equal the method detected from it (omit the flag to take it)"}}
    return {}


def parse(engine: str, argv: list[str]) -> dict:
    top, parser, prefix = build_parser(engine)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = top.parse_args(prefix + list(argv))
    except SystemExit as exc:
        msg = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        return {"accepted": False, "exit_code": exc.code, "error": msg[-1] if msg else ""}
    except Exception as exc:  # a type= function raising something other than ArgumentTypeError
        return {"accepted": False, "exit_code": 1, "error": f"{type(exc).__name__}: {exc}"}
    values = vars(ns)
    defaults = {a.dest: a.default for a in parser._actions if a.dest != "help"}
    result = {
        "accepted": True, "exit_code": 0, "error": None,
        "fields": {k: _jsonable(values.get(k)) for k in FIELDS[engine] if k in values},
        "changed": {k: _jsonable(v) for k, v in sorted(values.items())
                    if k in defaults and v != defaults[k] and k != "subparser"},
        "post_parse": post_parse(engine, ns),
        "warnings": [ln for ln in err.getvalue().splitlines() if ln.strip()][-20:],
    }
    return result


def post_parse(engine: str, ns) -> dict:
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
            if engine == "vllm":
                from vllm.engine.arg_utils import AsyncEngineArgs
                from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args
                validate_parsed_serve_args(ns)
                AsyncEngineArgs.from_cli_args(ns)
                ran = "validate_parsed_serve_args + AsyncEngineArgs.from_cli_args"
            else:
                from sglang.srt.arg_groups.overrides import resolving_view
                from sglang.srt.server_args import ServerArgs
                ran = "ServerArgs.from_cli_args + ServerArgs.resolve_once (arg_groups/pipeline.py)"
                obj = ServerArgs.from_cli_args(ns)
                obj.resolve_once()
                view = resolving_view(obj)
                after = {k: _jsonable(getattr(view, k)) for k in FIELDS[engine] if hasattr(view, k)}
    except BaseException as exc:  # noqa: BLE001 - report whatever the engine raised
        return {"ok": False, "ran": ran if "ran" in dir() else engine, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    result = {"ok": True, "ran": ran}
    if engine == "sglang":
        # __post_init__ fills unset values from the machine it runs on (here: no GPU)
        result["resolved_here"] = after
    return result


def _dummy(argv: list[str]) -> list[str]:
    out = list(argv)
    for i, x in enumerate(out[:-1]):
        if x in ("--model-path", "--model"):
            out[i + 1] = "dummy"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["parse", "flags"])
    ap.add_argument("engine", choices=["vllm", "sglang"])
    ap.add_argument("--dummy-model", action="store_true",
                    help="sglang: replace the --model-path value by 'dummy' so resolution stops after its"
                         " model-independent checks")
    ap.add_argument("argv_file", nargs="?", help="JSON list of arguments (default: stdin); for parse."
                    " A JSON list of lists runs each and prints a list")
    a = ap.parse_intermixed_args()
    if a.mode == "flags":
        result = {"flags": dump_flags(a.engine), "value_sets": value_sets(a.engine)}
    else:
        data = json.loads(open(a.argv_file).read() if a.argv_file else sys.stdin.read())
        many = bool(data) and all(isinstance(x, list) for x in data)
        if a.dummy_model:
            data = [_dummy(x) for x in data] if many else _dummy(data)
        result = [parse(a.engine, x) for x in data] if many else parse(a.engine, data)
    sys.stdout.write("@@JSON@@" + json.dumps(result, sort_keys=True, default=repr) + "\n")


if __name__ == "__main__":
    main()
