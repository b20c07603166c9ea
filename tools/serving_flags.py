"""Regenerate ``paraplan/exports/serving_flags.json``: the launch-command interfaces of vLLM
(``vllm serve``), SGLang (``python -m sglang.launch_server``) and TensorRT-LLM (``trtllm-serve``,
its ``--extra_llm_api_options`` YAML and ``trtllm-serve disaggregated -c``), at pinned versions,
as data. CI cannot install the engines, so exports are checked against this table.

How each part is made:

* vLLM and SGLang: their real argument parsers, built in an interpreter that has the engines'
  wheels (``--python``; see ``tools/serving_probe.py``), dumped option by option (flag strings,
  ``dest``, action, type, choices, nargs, default). The scratch environment (what worked, with the
  system's torch 2.13.0+cpu, Python 3.11)::

      python -m venv --system-site-packages /tmp/s/venv-serve      # system site: torch (CPU), numpy, pydantic
      /tmp/s/venv-serve/bin/pip install --no-deps vllm==0.19.1 sglang==0.5.23
      # then, --no-deps, the light packages the parser modules import (the versions PyPI gave):
      # cbor2 6.3.0, transformers 5.25.0, huggingface-hub 2.4.0, httpcore2 2.17.0, truststore 0.10.5,
      # httpx2 2.17.0, gguf 0.19.0, msgspec 0.23.0, pybase64 1.5.1, cachetools 8.0.3, uvloop 0.23.0,
      # openai 3.63.0, openai-harmony 0.0.8, prometheus-client 0.26.0, partial-json-parser 0.2.1.1.post7,
      # fastapi 0.165.0, starlette 1.10.0, annotated-doc 0.0.7, llguidance 1.9.1, diskcache 5.6.3,
      # xgrammar 0.2.9, apache-tvm-ffi 0.1.15.post2, uvicorn 0.55.0, watchfiles 1.3.0,
      # model-hosting-container-standards 0.1.16
      # SGLang's resolution pipeline also imports (--no-deps, sglang's pins): sentencepiece==0.2.1
      # compressed-tensors==0.18.0 loguru (0.7.3)

  That is enough for the parsers and vLLM's post-parse step, not for SGLang's: ``resolve_once``
  imports ``sglang.srt.configs`` (``internvl_utils``: ``import torchvision.transforms``), and no
  torchvision loads here. PyPI's only Linux wheels are CUDA builds (torchvision 0.28.0, the
  release for torch 2.13, is ``0.28.0+cu130``): its ``_C.so`` links ``libtorch_cuda.so`` and
  ``libc10_cuda.so``, which the CPU torch lacks, and ``import torchvision`` then fails
  (``RuntimeError: operator torchvision::nms does not exist``, ``_meta_registrations.py``),
  which also breaks ``import sglang`` (transformers sees torchvision installed and imports it), so
  leave it out. The CPU wheel (download.pytorch.org) or a CUDA torch is needed; until then every
  SGLang record's ``post_parse`` is ``ModuleNotFoundError: No module named 'torchvision'``.
  Note that with ``--model-path dummy`` SGLang 0.5.23's pipeline returns after its
  model-independent checks (``sglang/srt/arg_groups/pipeline.py`` lines 105-109, the
  ``"none", "dummy"`` return), before its data-parallel, MoE/A2A, speculative and
  PD-disaggregation handlers. (sglang 0.5.23's metadata pins torch==2.14.1 and
  transformers==5.19.0; the parsers ran with torch 2.13.0+cpu and transformers 5.25.0.)

  Unless ``--no-verify``, a few command lines are also run through the real parsers and the
  engines' offline post-parse steps (``serving_probe.py parse``) and stored under ``verified``.
* TensorRT-LLM cannot be installed without its CUDA wheel (the PyPI sdists are stubs that
  point at pypi.nvidia.com), so ``--trtllm-src`` (a checkout of NVIDIA/TensorRT-LLM at the
  release tag) is read with ``ast``, nothing imported: the click options of the ``serve`` and
  ``disaggregated`` commands (``tensorrt_llm/commands/serve.py``), the pydantic fields of the
  LLM-args models (``tensorrt_llm/llmapi/llm_args.py``) and the disaggregated config keys
  (``tensorrt_llm/llmapi/disagg_utils.py``). Without ``--trtllm-src`` the committed table's
  ``trtllm`` section is kept as it is.

Usage::

    python tools/serving_flags.py --python /tmp/s/venv-serve/bin/python \\
        [--trtllm-src /path/to/TensorRT-LLM --trtllm-tag v1.2.1]
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "paraplan" / "exports" / "serving_flags.json"
PROBE = ROOT / "tools" / "serving_probe.py"

PINS = {"vllm": "0.19.1", "sglang": "0.5.23"}
COMMANDS = {"vllm": "vllm serve", "sglang": "python -m sglang.launch_server"}
PARSERS = {
    "vllm": "vllm/entrypoints/cli/serve.py ServeSubcommand.subparser_init -> vllm/entrypoints/openai/cli_args.py"
            " make_arg_parser (FrontendArgs.add_cli_args + AsyncEngineArgs.add_cli_args) on a"
            " FlexibleArgumentParser subparser, plus --grpc",
    "sglang": "sglang/srt/server_args.py prepare_server_args: argparse.ArgumentParser + ServerArgs.add_cli_args",
}

#: command lines run through the real parsers at generation time: (id, argv, accepted?).
CASES = {
    "vllm": [
        ("tp-pp", ["m", "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"], True),
        ("dp-ep-fp8", ["m", "-tp", "2", "--data-parallel-size", "4", "--enable-expert-parallel",
                       "--quantization", "fp8", "--kv-cache-dtype", "fp8", "--max-num-seqs", "256",
                       "--max-num-batched-tokens", "8192", "--gpu-memory-utilization", "0.92",
                       "--max-model-len", "32768", "--max-cudagraph-capture-size", "512",
                       "--async-scheduling"], True),
        ("nixl", ["m", "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'], True),
        ("mtp", ["m", "--speculative-config", '{"method":"mtp","num_speculative_tokens":1}'], True),
        ("bad-kv-dtype", ["m", "--kv-cache-dtype", "fp8_e4m3fn"], False),
        # --quantization has no parser choices: ModelConfig._verify_quantization refuses it later
        ("quant-unchecked-by-parser", ["m", "--quantization", "fp9"], True),
        ("bad-int", ["m", "--tensor-parallel-size", "two"], False),
    ],
    "sglang": [
        ("tp", ["--model-path", "m", "--tp-size", "4"], True),
        ("dp-attention-ep", ["--model-path", "m", "--tp-size", "8", "--dp-size", "8", "--enable-dp-attention",
                             "--ep-size", "8", "--moe-a2a-backend", "deepep", "--kv-cache-dtype", "fp8_e4m3",
                             "--max-running-requests", "512", "--chunked-prefill-size", "8192",
                             "--mem-fraction-static", "0.85", "--cuda-graph-max-bs-decode", "256",
                             "--context-length", "32768", "--quantization", "fp8"], True),
        ("attn-dp", ["--model-path", "m", "--tp-size", "8", "--attn-dp-size", "8", "--ep-size", "8"], True),
        ("pd-prefill", ["--model-path", "m", "--disaggregation-mode", "prefill",
                        "--disaggregation-transfer-backend", "nixl"], True),
        ("eagle-mtp", ["--model-path", "m", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1",
                       "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2"], True),
        ("bad-kv-dtype", ["--model-path", "m", "--kv-cache-dtype", "fp8"], False),
        ("bad-mode", ["--model-path", "m", "--disaggregation-mode", "both"], False),
    ],
}


def _probe(python: str, mode: str, engine: str, stdin: str | None = None, extra=()) -> object:
    # a fixed hash seed: some choices lists are built from sets, whose order follows string hashing
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run([python, str(PROBE), mode, engine, *extra], input=stdin, capture_output=True,
                          text=True, cwd=ROOT, env=env)
    if proc.returncode != 0 or "@@JSON@@" not in proc.stdout:
        sys.exit(f"serving_probe.py {mode} {engine} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.split("@@JSON@@", 1)[1])


def _version(python: str, dist: str) -> str:
    return subprocess.run([python, "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                          check=True, capture_output=True, text=True).stdout.strip()


def _strip_random(v):
    """Drop values the engines fill at random (vLLM's KV-transfer engine_id) so reruns agree."""
    if isinstance(v, dict):
        return {k: _strip_random(x) for k, x in v.items() if k not in ("engine_id", "kv_port")}
    if isinstance(v, list):
        return [_strip_random(x) for x in v]
    return v


def argparse_engine(python: str, engine: str, verify: bool) -> dict:
    version = _version(python, engine)
    if version != PINS[engine]:
        sys.exit(f"{engine} {version} is installed in {python}; the pin is {PINS[engine]}")
    dumped = _probe(python, "flags", engine)
    flags = dumped["flags"]
    out = {"source": {"package": engine, "version": version, "index": "pypi.org",
                      "parser": PARSERS[engine],
                      "generated": "tools/serving_probe.py flags: the installed parser's actions"
                                   + (" (vLLM's platform replaced by an offline stand-in that says 'cuda',"
                                      " see serving_probe.py)" if engine == "vllm" else "")},
           "command": COMMANDS[engine], "flags": flags}
    if dumped["value_sets"]:
        out["value_sets"] = dumped["value_sets"]
    if verify:
        cases = CASES[engine]
        extra = ["--dummy-model"] if engine == "sglang" else []
        got = _probe(python, "parse", engine, json.dumps([argv for _, argv, _ in cases]), extra)
        records, wrong = [], []
        for (cid, argv, expect), res in zip(cases, got):
            if res["accepted"] != expect:
                wrong.append(f"{engine} {cid}: expected accepted={expect}, got {res}")
            rec = {"id": cid, "argv": argv, "accepted": res["accepted"], "exit_code": res["exit_code"],
                   "error": res["error"]}
            if res["accepted"]:
                rec["changed"] = _strip_random(res["changed"])
                pp = res["post_parse"]
                rec["post_parse"] = {"ran": pp["ran"], "ok": pp["ok"], "error": pp.get("error")}
            records.append(rec)
        if wrong:
            sys.exit("the real parser disagrees with the expected outcomes:\n  " + "\n  ".join(wrong))
        out["verified"] = {"cases": records,
                           "note": "argv run through the real parser and its offline post-parse step"
                                   + (" (with --model-path dummy: SGLang's resolution stops after its"
                                      " model-independent checks)" if engine == "sglang" else "")}
    return out


# ---- TensorRT-LLM, by reading its source ----------------------------------------------------

def _lit(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return {"expr": ast.unparse(node)}


def click_options(tree: ast.Module, command: str) -> dict:
    """The ``@click.option`` s of the function decorated ``@click.command(command)``."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        decs = [d for d in fn.decorator_list if isinstance(d, ast.Call)]
        names = [_lit(d.args[0]) for d in decs if ast.unparse(d.func).endswith("command") and d.args]
        if command not in names:
            continue
        out = {}
        for d in decs:
            fname = ast.unparse(d.func)
            if not (fname.endswith("option") or fname.endswith("argument")):
                continue
            strings = [a.value for a in d.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            opts = [s for s in strings if s.startswith("-")]
            dest_given = [s for s in strings if not s.startswith("-")]
            kw = {k.arg: k.value for k in d.keywords}
            key = next((s for s in opts if s.startswith("--")), opts[0] if opts else strings[0])
            spec = {"kind": "argument" if fname.endswith("argument") else "option", "option_strings": opts,
                    # click: an explicit name, else the first long option (stable sort on dash count)
                    "dest": dest_given[0] if dest_given else sorted(opts or strings, key=lambda o: -(len(o) - len(
                        o.lstrip("-"))))[0].lstrip("-").replace("-", "_"),
                    "is_flag": bool(_lit(kw["is_flag"])) if "is_flag" in kw else False,
                    "multiple": bool(_lit(kw["multiple"])) if "multiple" in kw else False,
                    "type": None, "choices": None,
                    "default": _lit(kw["default"]) if "default" in kw else None}
            t = kw.get("type")
            if t is not None:
                spec["type"] = ast.unparse(t)
                if isinstance(t, ast.Call) and ast.unparse(t.func).split(".")[-1] in ("Choice", "ChoiceWithAlias"):
                    spec["choices"] = _lit(t.args[0]) if t.args else None
                    if len(t.args) > 1:
                        spec["aliases"] = _lit(t.args[1])
            out[key] = spec
        return out
    raise SystemExit(f"no @click.command({command!r}) found")


def _model_config(cls: ast.ClassDef) -> dict | None:
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and any(getattr(t, "id", None) == "model_config" for t in stmt.targets):
            v = stmt.value
            if isinstance(v, ast.Call):
                return {k.arg: _lit(k.value) for k in v.keywords}
            return _lit(v) if not isinstance(_lit(v), dict) or "expr" not in _lit(v) else None
    return None


def pydantic_models(tree: ast.Module) -> dict:
    """Every class: its bases, model_config and annotated fields (type, default / default_factory)."""
    out = {}
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        fields = {}
        for stmt in cls.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            name = stmt.target.id
            if name.startswith("_") or ast.unparse(stmt.annotation).startswith("ClassVar"):
                continue
            f = {"type": ast.unparse(stmt.annotation)}
            v = stmt.value
            if v is None:
                f["required"] = True
            elif isinstance(v, ast.Call) and ast.unparse(v.func) in ("Field", "pydantic.Field", "PrivateAttr"):
                kw = {k.arg: k.value for k in v.keywords}
                if "default" in kw:
                    f["default"] = _lit(kw["default"])
                elif v.args:
                    f["default"] = _lit(v.args[0])
                    if f["default"] == Ellipsis:
                        f = {"type": f["type"], "required": True}
                if "default_factory" in kw:
                    f["default_factory"] = ast.unparse(kw["default_factory"])
                if "alias" in kw:
                    f["alias"] = _lit(kw["alias"])
                if "status" in kw:
                    f["status"] = _lit(kw["status"])
                if "default" not in f and "default_factory" not in f and not v.args:
                    f["required"] = True
            else:
                f["default"] = _lit(v)
            fields[name] = f
        out[cls.name] = {"bases": [ast.unparse(b) for b in cls.bases], "model_config": _model_config(cls),
                         "fields": fields, "line": cls.lineno}
    return out


def _jsonsafe(v):
    if v is Ellipsis:
        return "..."
    if isinstance(v, dict):
        return {str(k): _jsonsafe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set)):
        return [_jsonsafe(x) for x in v]
    if isinstance(v, (bytes, complex)):
        return repr(v)
    return v


def _resolved_fields(models: dict, name: str) -> dict:
    """A model's fields with those of its bases in the same file (later classes override)."""
    m = models.get(name)
    if m is None:
        return {}
    out = {}
    for b in m["bases"]:
        out.update(_resolved_fields(models, b))
    out.update(m["fields"])
    return out


def _forbids_extra(models: dict, name: str) -> bool | None:
    m = models.get(name)
    if m is None:
        return None
    cfg = m["model_config"] or {}
    if isinstance(cfg, dict) and "extra" in cfg:
        return cfg["extra"] == "forbid"
    for b in m["bases"]:
        r = _forbids_extra(models, b)
        if r is not None:
            return r
    return None


NESTED = ["KvCacheConfig", "CudaGraphConfig", "MoeConfig", "CacheTransceiverConfig", "SchedulerConfig",
          "DynamicBatchConfig", "AttentionDpConfig", "MTPDecodingConfig", "EagleDecodingConfig",
          "TorchCompileConfig", "BuildConfig"]


def trtllm_from_source(src: Path, tag: str) -> dict:
    commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    serve = ast.parse((src / "tensorrt_llm/commands/serve.py").read_text())
    llm_args = ast.parse((src / "tensorrt_llm/llmapi/llm_args.py").read_text())
    models = pydantic_models(llm_args)
    disagg_path = src / "tensorrt_llm/llmapi/disagg_utils.py"
    disagg = pydantic_models(ast.parse(disagg_path.read_text())) if disagg_path.exists() else {}
    torch_fields = _resolved_fields(models, "TorchLlmArgs")
    nested = {}
    for n in NESTED:
        for pool in (models, disagg):
            if n in pool:
                nested[n] = {"fields": _resolved_fields(pool, n), "extra_forbid": _forbids_extra(pool, n),
                             "line": pool[n]["line"]}
    return _jsonsafe({
        "source": {"repository": "NVIDIA/TensorRT-LLM", "tag": tag, "commit": commit,
                   "generated": "tools/serving_flags.py: ast over tensorrt_llm/commands/serve.py,"
                                " tensorrt_llm/llmapi/llm_args.py and tensorrt_llm/llmapi/disagg_utils.py"},
        "command": "trtllm-serve",
        "serve_options": click_options(serve, "serve"),
        "disaggregated_options": click_options(serve, "disaggregated"),
        "llm_args": torch_fields,
        "nested": nested,
        "disagg_config_classes": {k: v for k, v in disagg.items() if v["fields"]},
        "extra_forbid": _forbids_extra(models, "TorchLlmArgs"),
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default="/tmp/s/venv-serve/bin/python",
                    help="interpreter with vllm and sglang installed (see above)")
    ap.add_argument("--trtllm-src", help="a NVIDIA/TensorRT-LLM checkout at --trtllm-tag")
    ap.add_argument("--trtllm-tag", help="the release tag of --trtllm-src (for the record)")
    ap.add_argument("--only", choices=["vllm", "sglang", "trtllm"], action="append",
                    help="regenerate only these engines, keeping the others from the committed table")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--no-verify", action="store_true", help="do not run the sample command lines")
    a = ap.parse_args()
    old = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else {"engines": {}}
    engines = dict(old.get("engines", {}))
    todo = a.only or ["vllm", "sglang", "trtllm"]
    for engine in ("vllm", "sglang"):
        if engine in todo:
            engines[engine] = argparse_engine(a.python, engine, not a.no_verify)
    if "trtllm" in todo and a.trtllm_src:
        if not a.trtllm_tag:
            sys.exit("--trtllm-tag is required with --trtllm-src")
        engines["trtllm"] = trtllm_from_source(Path(a.trtllm_src), a.trtllm_tag)
    table = {"generated_by": "tools/serving_flags.py", "engines": engines}
    Path(a.out).write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.out}: " + ", ".join(
        f"{k} {len(v.get('flags') or v.get('serve_options') or {})} options" for k, v in sorted(engines.items())))


if __name__ == "__main__":
    main()
