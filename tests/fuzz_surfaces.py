"""Fuzz inputs for the surfaces ``test_fuzz``'s first generators do not reach.

The serving commands (every option at bad and edge values, precisions a GPU lacks, output
paths), the sweep runner (degrees of 0, unreachable or malformed schedulers), pooled clusters'
plans (``--plan`` files damaged or hostile, ``--group`` specs), the serving and Sailor validation
files, hardware / efficiency / stack values of finite but absurd magnitude (1e-300 links, 1e300 s
host times, denormal fractions), the layout fields' int64 edge, measurement shapes the ranks
would refuse, non-numeric axes of numeric plots, every command's ``--help``, Hugging Face
configs with a damaged ``rope_scaling`` (through ``simulate`` and the Megatron export's YaRN
flags), ``plan --emit`` and ``simulate --emit`` on odd shapes, gpt-oss served on GPUs without
FP4 / FP8, and odd names for ``hardware stacks`` and ``models show``.

Each generator returns ``(name, args, files)`` triples (``{tmp}`` is the case folder, in the
arguments and in the files' text); ``test_fuzz.generate`` turns them into cases and judges
them by the same contract. Values found to break the contract once are listed explicitly so
they stay covered whatever the seed.
"""
from __future__ import annotations

import copy
import csv
import io
import json
import random
from pathlib import Path

import pandas as pd
import yaml

from paraplan.sweeps.runner import chunk_key, chunks
from paraplan.sweeps.spec import spec_from_dict

REPO = Path(__file__).resolve().parents[1]
POOLED = str(REPO / "examples" / "clusters" / "a100-h100.yaml")
BOMB = "\n".join(["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
                 + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)])
DEEP_JSON = "[" * 100000 + "]" * 100000
#: command-line numbers no option should turn into an internal error
NUMBERS_BAD = ["0", "-1", "nan", "inf", "1e30", "abc", "", "1.5", "9" * 40]
NUMBERS_EDGE = ["1", "2", "3", "7", "64", "1000000", str(10**9), str(2**63)]
#: YAML scalars of absurd magnitude (written with a dot: PyYAML reads 1e-300 as a string)
ABSURD = ["1.0e-300", "1.0e+300", "4.9e-324", "1.0e-30", "1.0e+30"]
JSON_BAD = [-1, 0, 1e30, float("nan"), float("inf"), "abc", [], {}, True, None, 2**70, 0.5]


def safe_dump(data, **kwargs) -> str:
    """``yaml.safe_dump`` through libyaml's emitter when PyYAML has it (the same text, a few
    times faster: the generators dump hundreds of catalog files, some with 200 kB strings)."""
    return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), **kwargs)


def _catalog(kind: str, name: str) -> dict:
    return yaml.safe_load((REPO / "hardware_specs" / kind / f"{name}.yaml").read_text())


def _with_raw(data: dict, path: tuple, raw: str) -> str:
    """``data`` as YAML with the value at ``path`` replaced by the raw YAML text ``raw``."""
    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "__FUZZ__"
    return safe_dump(data, sort_keys=False).replace("'__FUZZ__'", raw).replace("__FUZZ__", raw)


def _cluster() -> dict:
    data = _catalog("clusters", "dgx-h100")
    data["gpu"] = _catalog("gpus", "h100-sxm-80gb")
    return data


# ------------------------------------------------------------------------------------------

SERVE_SIM = ["serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--batch", "16", "--json"]
SERVE_SIM_MOE = ["serve", "simulate", "-m", "mixtral-8x7b", "-s", "dgx-h100", "--tp", "2", "--json"]
SERVE_PLAN = ["serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8", "--max-batch", "16"]
SERVE_SIM_OPTIONS = ["--isl", "--osl", "--batch", "--tp", "--pp", "--workers", "--adp", "--moe-tp", "--moe-ep",
                     "--prefill-tp", "--prefill-batch", "--prefill-workers", "--decode-tp", "--decode-batch",
                     "--decode-workers", "--decode-moe-ep"]
SERVE_PLAN_OPTIONS = ["--isl", "--osl", "--ttft-ms", "--tpot-ms", "--max-batch", "--top", "-n"]
PRECISIONS = ["bf16", "fp16", "fp8", "fp8_block", "nvfp4", "mxfp4", "int4_wo"]
SYSTEMS = ["dgx-a100-80gb", "dgx2-v100", "cpu-local", "tpu-v3-pod", "mi300x-node", "gb200-nvl72"]


def serving_cases(rng: random.Random) -> list[tuple]:
    """serve simulate / plan: options at bad and edge values, weight formats a GPU lacks, outputs."""
    out = []
    pairs = [(opt, v) for opt in SERVE_SIM_OPTIONS for v in NUMBERS_BAD + NUMBERS_EDGE]
    for opt, v in rng.sample(pairs, 20):
        base = SERVE_SIM_MOE if "moe" in opt or "adp" in opt else SERVE_SIM
        mode = ["--mode", "disagg"] if opt.startswith(("--prefill", "--decode")) else []
        out.append((f"serve simulate {opt}={v!r}", base + mode + [opt, v], {}))
    pairs = [(opt, v) for opt in SERVE_PLAN_OPTIONS for v in NUMBERS_BAD + NUMBERS_EDGE + ["1e-300", "0.001"]]
    for opt, v in rng.sample(pairs, 12):
        out.append((f"serve plan {opt}={v!r}", SERVE_PLAN + [opt, v, "--json"], {}))
    combos = [(p, s) for p in PRECISIONS for s in SYSTEMS]
    for precision, system in rng.sample(combos, 6):
        out.append((f"serve simulate {precision} on {system}",
                    ["serve", "simulate", "-m", "llama3.1-8b", "-s", system, "--precision", precision,
                     "--kv-cache-dtype", rng.choice(["auto", "fp8", "bf16"]), "--json"], {}))
    for path in ("{tmp}/front.txt", "{tmp}/front", "{tmp}", "{tmp}/missing/front.png"):   # front.txt: was internal
        out.append((f"serve plan --plot {path}", SERVE_PLAN + ["--plot", path], {}))
    for path in ("{tmp}", "{tmp}/missing/front.csv"):
        out.append((f"serve plan --out {path}", SERVE_PLAN + ["--csv", "--out", path], {}))
    for backend, version in (("vllm", "0.0"), ("nope", ""), ("sglang", "99"), ("trtllm", "abc")):
        out.append((f"serve -b {backend} --backend-version {version!r}",
                    SERVE_SIM + ["-b", backend, "--backend-version", version], {}))
    return out


def sweep_runner_cases() -> list[tuple]:
    """Degrees of 0 in a simulate sweep (was a ZeroDivisionError) and schedulers Dask cannot reach."""
    spec = "models: [gpt3-125m]\nclusters: [dgx-h100]\ngpus: [8]\nglobal_batch: [16]\nsearch: simulate\n"
    out = []
    for key in ("tp", "pp", "cp"):
        out.append((f"sweep config {key}=0", ["sweep", "{tmp}/s.yaml", "--local", "--out", "{tmp}/out"],
                    {"s.yaml": spec + f"config: {{{key}: [0, 1]}}\n"}))
    out.append(("sweep --out ''", ["sweep", "{tmp}/s.yaml", "--local", "--out", ""], {"s.yaml": spec}))
    for address in ("nope://x", "tls://127.0.0.1:1", "tcp://host:notaport", "inproc://x"):
        out.append((f"sweep --scheduler {address}", ["sweep", "{tmp}/s.yaml", "--scheduler", address, "--out", "{tmp}/out"],
                    {"s.yaml": spec}))
    # a resumed sweep whose finished chunk file is damaged evaluates the chunk again (was an
    # internal ArrowInvalid, or a KeyError for a parquet of other columns)
    parsed = spec_from_dict(yaml.safe_load(spec))
    chunk_file = f"out/chunks/{chunk_key(parsed, chunks(parsed)[0])}.parquet"
    other = io.BytesIO()
    pd.DataFrame({"x": [1]}).to_parquet(other)
    for name, content in (("garbage", b"garbage"), ("empty", b""), ("other columns", other.getvalue())):
        out.append((f"sweep resumed over a chunk file of {name}", ["sweep", "{tmp}/s.yaml", "--local", "--out", "{tmp}/out"],
                    {"s.yaml": spec, chunk_file: content}))
    return out


POOLED_PLAN = {"global_batch": 64, "zero_stage": 1, "groups": [{"replicas": 4, "stages": [{"pool": "h100", "tp": 8, "layers": 32}]},
                                                              {"replicas": 2, "stages": [{"pool": "a100", "tp": 8, "layers": 16},
                                                                                         {"pool": "a100", "tp": 8, "layers": 16}]}]}
GROUPS = ["8x h100:tp8:pp4", "0x h100:tp8:pp1", "h100:tp0:pp1", "h100:tp3:pp1", "99999999999x h100:tp8:pp1",
          "nope:tp8:pp1", "h100:tp8:pp2:0,32", "h100:tp8:pp2:16", "a100:tp8:pp1:16 > h100:tp8:pp1", "h100:tp8:pp33", "",
          "h100:tp99999999999999999999:pp1", "h100:tp8:pp1:99999999999999999999"]


def pooled_cases(rng: random.Random) -> list[tuple]:
    """simulate on a pooled cluster: --group specs, and --plan files damaged or hostile."""
    sim = ["simulate", "-m", "llama3-8b", "-c", POOLED, "--json"]
    out = [(f"pooled --group {g!r}", sim + ["--global-batch", "64", "--group", g], {}) for g in GROUPS]
    paths = [(k,) for k in POOLED_PLAN] + [("groups", 0, k) for k in ("replicas", "stages")] \
        + [("groups", 1, "stages", 0, k) for k in ("pool", "tp", "layers")]
    for i in range(10):
        data, path = copy.deepcopy(POOLED_PLAN), rng.choice(paths)
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = rng.choice(JSON_BAD)
        out.append((f"pooled --plan {'.'.join(map(str, path))}={node[path[-1]]!r}", sim + ["--plan", "{tmp}/p.json"],
                    {"p.json": json.dumps(data)}))
    for value in (-1, "abc", [1], True):        # software not a mapping: was an internal TypeError
        out.append((f"pooled --plan software={value!r}", sim + ["--plan", "{tmp}/p.json"],
                    {"p.json": json.dumps({**POOLED_PLAN, "software": value})}))
    for name, text in (("deep.json", DEEP_JSON), ("deep.yaml", "[" * 100000 + "]" * 100000),   # were RecursionErrors
                       ("binary.json", b"\xff\xfe\x00{"), ("latin1.yaml", b"groups: caf\xe9\n"),
                       ("bomb.yaml", BOMB + "\ngroups: *i\n"), ("python.yaml", "groups: !!python/object/apply:os.getcwd []\n"),
                       ("empty.yaml", ""), ("list.json", "[]")):
        out.append((f"pooled --plan {name}", sim + ["--plan", "{tmp}/" + name], {name: text}))
    return out


def _sailor_runs() -> dict:
    data = json.loads((REPO / "paraplan" / "data" / "validation" / "heterogeneous" / "sailor_runs.json").read_text())
    mixed = next(r for r in data["runs"] if "RTX" in json.dumps(r["pipeline_list"]) or "Titan" in json.dumps(r["pipeline_list"]))
    return {"source": data.get("source", ""), "runs": [data["runs"][0], mixed]}


def _serving_rows() -> tuple[list[str], list[dict]]:
    with open(REPO / "paraplan" / "data" / "validation" / "serving_runs.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    agg = next(r for r in rows if r["mode"] == "agg")
    disagg = next(r for r in rows if r["mode"] == "disagg")
    return list(rows[0]), [agg, disagg]


def _csv(header: list[str], rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def validation_file_cases(rng: random.Random) -> list[tuple]:
    """validate heterogeneous (Sailor JSON) and serving (CSV) on damaged files; options at extremes."""
    het = ["validate", "heterogeneous", "{tmp}/h.json", "--json"]
    base = _sailor_runs()
    out = []
    structural = [((0, "pipeline_list", 0), True), ((0, "pipeline_list", 0), "abc"), ((0, "pipeline_list", 0, "dp"), [[1]]),
                  ((0, "pipeline_list", 0, "dp"), [float("inf")] * 4), ((0, "pipeline_list", 0, "tmp_per_stage", 0), {}),
                  ((0, "pipeline_list", 0, "tmp_per_stage", 0, 0), {"a": 1}), ((0, "pipeline_list", 0, "tmp_per_stage", 1), None),
                  ((1, "pipeline_list", 0, "tmp_per_stage", 0, 0, 1), float("inf")), ((1, "mbs"), float("nan"))]
    keys = ["mbs", "gbs", "real", "max_mem", "pipeline_list", "_file"]
    picks = structural + [((rng.randrange(2), rng.choice(keys)), rng.choice(JSON_BAD)) for _ in range(6)]
    for path, value in picks:           # the structural ones were internal AttributeError / KeyError / TypeError
        data = copy.deepcopy(base)
        node = data["runs"]
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        out.append((f"sailor {'/'.join(map(str, path))}={value!r}", het, {"h.json": json.dumps(data)}))
    for name, text in (("deep", DEEP_JSON), ("empty", ""), ("binary", b"\x00\xff" * 50), ("runs empty", '{"runs": []}')):
        out.append((f"sailor {name}", het, {"h.json": text}))
    for opt, value in (("--inter-node-gbps", "1e-300"), ("--inter-node-gbps", "0"), ("--inter-node-latency-us", "1e30"),
                       ("--intra-node-gb-per-s", "1e-300"), ("--inter-node-gbps", "nan")):
        out.append((f"validate heterogeneous {opt}={value}", ["validate", "heterogeneous", "--json", opt, value], {}))
    header, rows = _serving_rows()
    bad = ["", "nan", "-1", "0", "1e30", "inf", "abc", "1.5", "9" * 30, "\x00", '"']
    for i in range(9):
        picked = [dict(r) for r in rows]
        col, value = rng.choice(header), rng.choice(bad)
        rng.choice(picked)[col] = value
        out.append((f"serving csv {col}={value!r}", ["validate", "serving", "{tmp}/s.csv", "--json"], {"s.csv": _csv(header, picked)}))
    for name, text in (("empty", ""), ("binary", b"\x00\xff" * 100), ("bom", "\ufeff" + _csv(header, rows)),
                       ("duplicated ids", _csv(header, rows + rows)), ("one column", "id\nx\n")):
        out.append((f"serving csv {name}", ["validate", "serving", "{tmp}/s.csv", "--json"], {"s.csv": text}))
    # the default file with a --source that matches nothing: one stderr line (a 'reading' line came first)
    out.append(("validate published --source nope", ["validate", "published", "--source", "nope"], {}))
    out.append(("validate serving --backend nope", ["validate", "serving", "--backend", "nope"], {}))
    return out


#: cluster-file fields (with an inline GPU and efficiency model) set to absurd magnitudes
MAGNITUDE_PATHS = [("gpu", "peak_tflops", "bf16"), ("gpu", "hbm_gib"), ("gpu", "hbm_bw_tb_per_s"), ("gpu", "sfu_tera_exp_per_s"),
                   ("gpu", "sm_count"), ("scaleup", "bw_gb_per_s"), ("scaleout", "bw_gbit_per_s"), ("scaleup", "latency_us"),
                   ("scaleout", "latency_us"), ("host", "link_bw_gb_per_s"), ("oversubscription",),
                   ("efficiency", "hbm_fraction"), ("efficiency", "attention_peak_fraction"), ("efficiency", "scaleout_fraction"),
                   ("efficiency", "kernel_overhead_s"), ("efficiency", "cpu_issue_s")]


def magnitude_cases(rng: random.Random) -> list[tuple]:
    """Finite but absurd hardware, efficiency, serving-efficiency and stack values: each is refused
    with one line or gives finite, sane outputs (a 1e-300 Gb/s link printed 300-digit step times;
    a denormal efficiency fraction a null step time)."""
    cluster = _cluster()
    cluster["efficiency"] = _catalog("efficiency", "hopper")
    sim = ["simulate", "-m", "gpt3-125m", "-c", "{tmp}/c.yaml", "-n", "16", "--global-batch", "16", "--json"]
    serve = ["serve", "simulate", "-m", "llama3.1-8b", "-s", "{tmp}/c.yaml", "--tp", "2", "--json"]
    out = []
    for path in MAGNITUDE_PATHS:
        for raw in rng.sample(ABSURD, 2):
            cmd = rng.choice([sim, serve])
            out.append((f"magnitude {'.'.join(path)}={raw} ({cmd[0]})", cmd, {"c.yaml": _with_raw(cluster, path, raw)}))
    serving_eff = _catalog("serving_efficiency", "hopper")
    with_path = _cluster()
    with_path["gpu"]["generation"] = "{tmp}/se.yaml"        # a generation naming a file loads that profile
    for key, raw in (("decode_hbm_fraction", "1.0e-300"), ("gemm_peak_fraction", "4.9e-324"),
                     ("kernel_fixed_s", "1.0e+300"), ("request_host_s", "1.0e+300"), ("link_bw_fraction", "1.0e-30")):
        for cmd in (serve, ["serve", "plan", "-m", "llama3.1-8b", "-s", "{tmp}/c.yaml", "-n", "8", "--max-batch", "16"]):
            out.append((f"serving efficiency {key}={raw} ({cmd[1]})", cmd,
                        {"c.yaml": safe_dump(with_path), "se.yaml": _with_raw(serving_eff, (key,), raw)}))
    stack = _catalog("stacks", "sglang-0.5")
    for path, raw in ((("serving", "prefill_token_budget", "value", 60), ".inf"),      # was an internal OverflowError
                      (("serving", "host_step_s", "value"), "1.0e+300"), (("serving", "host_launch_s", "value"), "1.0e+300"),
                      (("serving", "runtime_reserved_gib", "value"), "1.0e+300")):
        out.append((f"stack {'.'.join(map(str, path))}={raw}",
                    ["serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "-b", "{tmp}/st.yaml", "--json"],
                    {"st.yaml": _with_raw(stack, path, raw)}))
    return out


#: Hugging Face configs a rope_scaling block is damaged in (a Llama-style model and a DeepSeek-V3
#: style MLA one: the Megatron export writes YaRN flags from both, differently)
HF_ROPE_BASES = {
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
              "intermediate_size": 4096, "num_attention_heads": 8, "num_hidden_layers": 4, "num_key_value_heads": 4,
              "vocab_size": 32000, "max_position_embeddings": 16384, "rope_theta": 500000.0},
    "deepseek_v3": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 1024,
                    "intermediate_size": 4096, "moe_intermediate_size": 512, "num_attention_heads": 8,
                    "num_hidden_layers": 4, "num_key_value_heads": 8, "vocab_size": 32000,
                    "max_position_embeddings": 16384, "n_routed_experts": 16, "num_experts_per_tok": 2,
                    "n_shared_experts": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1, "q_lora_rank": 256,
                    "kv_lora_rank": 128, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
                    "rope_theta": 10000.0}}
#: DeepSeek-V3's rope_scaling (its config.json), the block the keys are damaged in
ROPE_GOOD = {"factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
             "mscale_all_dim": 1.0}
#: JSON text of the damaged value: 1e400 is read as inf by Python's json, NaN is refused by the reader
ROPE_BAD = ["0", "-1", "-0.5", "NaN", "1e400", "1e30", "1e-300", "1180591620717411303424", '"8"', '""', "true", "null",
            "[4]", "{}", "0.5", "4096.5"]


def rope_scaling_cases(rng: random.Random) -> list[tuple]:
    """config.json with rope_scaling damaged (yarn / llama3 / linear / dynamic; a factor, the
    original context, beta_*, mscale* missing or zero, negative, nan, huge, text), through
    ``simulate`` and through ``plan --emit megatron`` (which writes YaRN flags from them)."""
    combos = [(base, kind, key, raw) for base in HF_ROPE_BASES for kind in ("yarn", "llama3", "linear", "dynamic")
              for key in list(ROPE_GOOD) + ["type", "rope_type"] for raw in ROPE_BAD + ["(missing)"]]
    out = []
    for base, kind, key, raw in rng.sample(combos, 12):
        rope = {"type": kind, **ROPE_GOOD} if kind == "yarn" else {"rope_type": kind, "factor": 8.0,
                                                                  "original_max_position_embeddings": 8192}
        rope[key] = "__FUZZ__"
        if raw == "(missing)":
            del rope[key]
        text = json.dumps({**HF_ROPE_BASES[base], "rope_scaling": rope}).replace('"__FUZZ__"', raw)
        if rng.random() < 0.5:
            args = ["simulate", "-m", "{tmp}/config.json", "-c", "dgx-h100", "-n", "8", "--global-batch", "8", "--json"]
        else:
            args = ["plan", "-m", "{tmp}/config.json", "-c", "dgx-h100", "-n", "8", "--global-batch", "8",
                    "--emit", "megatron"]
        out.append((f"hf {base} rope_scaling {kind} {key}={raw} ({args[0]})", args, {"config.json": text}))
    return out


#: plan requests of odd shapes (pp not dividing the layers, interleaving, MoE with ep, cp, fp8,
#: a GPU without FP8) whose winner is exported
EMIT_SHAPES = [("gpt3-125m", "dgx-h100", 16, 32, ["--pp", "4", "--vpp", "3"]),
               ("gpt3-125m", "dgx-h100", 16, 32, ["--pp", "5"]),
               ("gpt3-125m", "dgx-h100", 12, 12, ["--pp", "3", "--vpp", "2"]),
               ("gpt3-125m", "dgx-h100", 7, 7, []),
               ("llama3-8b", "dgx-h100", 24, 24, ["--pp", "3"]),
               ("llama3-8b", "dgx-h100", 16, 16, ["--cp", "4"]),
               ("llama3-8b", "dgx-h100", 16, 16, ["--dtype", "fp8"]),
               ("llama3-8b", "dgx-a100-80gb", 16, 16, ["--dtype", "fp8"]),
               ("mixtral-8x7b", "dgx-h100", 16, 16, ["--ep", "8", "--tp", "2"]),
               ("gpt-oss-20b", "dgx-h100", 16, 16, ["--ep", "8", "--dtype", "fp8"]),   # was refused (mxfp4 experts)
               ("gpt-oss-20b", "dgx-h100", 16, 16, ["--pp", "2", "--ep", "4"]),
               ("qwen3-30b-a3b", "dgx-h100", 16, 16, ["--ep", "16", "--cp", "2"])]


def emit_cases(rng: random.Random) -> list[tuple]:
    """``plan --emit megatron|torchtitan|deepspeed`` on the odd shapes of ``EMIT_SHAPES``, and
    ``simulate --emit`` on the same shapes entered as plans."""
    combos = [(shape, framework) for shape in EMIT_SHAPES for framework in ("megatron", "torchtitan", "deepspeed")]
    out = []
    for (model, cluster, gpus, batch, extra), framework in rng.sample(combos, 8):
        out.append((f"plan {model} {' '.join(extra)} --emit {framework}",
                    ["plan", "-m", model, "-c", cluster, "-n", str(gpus), "--global-batch", str(batch), *extra,
                     "--emit", framework], {}))
    for (model, cluster, gpus, batch, extra), framework in rng.sample(combos, 8):
        # the same shapes entered by hand: ``simulate --emit`` writes the plan as given or refuses it
        out.append((f"simulate {model} {' '.join(extra)} --emit {framework}",
                    ["simulate", "-m", model, "-c", cluster, "--gpus", str(gpus), "--global-batch", str(batch),
                     *extra, "--emit", framework], {}))
    return out


def gpt_oss_serving_cases(rng: random.Random) -> list[tuple]:
    """gpt-oss (MXFP4 experts by default) served on GPUs without FP4 or FP8 (A100, V100), the
    experts' format left to the checkpoint or given explicitly."""
    combos = [(model, system, precision, command) for model in ("gpt-oss-20b", "gpt-oss-120b")
              for system in ("dgx-a100-80gb", "dgx-a100-40gb", "dgx2-v100") for precision in [None] + PRECISIONS
              for command in ("simulate", "plan")]
    out = []
    for model, system, precision, command in rng.sample(combos, 8):
        args = ["serve", command, "-m", model, "-s", system, "--json"]
        args += ["--tp", "2"] if command == "simulate" else ["-n", "8", "--max-batch", "16"]
        args += ["--expert-precision", precision] if precision else []
        out.append((f"serve {command} {model} on {system} --expert-precision {precision}", args, {}))
    return out


#: odd names for the single-entry commands (``hardware stacks NAME``, ``models show NAME``)
ODD_NAMES = ["", " ", "nope", "megatron", "megatron-lm", "vllm", "VLLM", " sglang ", "trtllm", "vllm-99", "vllm-0.14",
             "deepspeed", "torchtitan", "m", "a" * 300, "*", "/dev/null", "{tmp}", "{tmp}/missing.yaml", "gpt-oss",
             "GPT-OSS-20B", "gpt_oss_20b", " gpt-oss-20b ", "deepseek", "-", "~", "nan"]


def name_cases(rng: random.Random) -> list[tuple]:
    """``hardware stacks NAME`` and ``models show NAME`` with unknown, partial, blank and path-like names."""
    combos = [(command, name) for command in (["hardware", "stacks"], ["models", "show"]) for name in ODD_NAMES]
    return [(f"{' '.join(command)} {name[:40]!r}", command + [name], {}) for command, name in rng.sample(combos, 12)]


#: well-formed inputs of the surfaces above, each of which must be answered (exit 0), with a
#: text its output must hold: a refusal passes the contract, so a surface that refused every
#: input would pass unseen (every plan of gpt-oss was refused until fuzz3)
ANSWERED = [
    (["plan", "-m", "gpt-oss-20b", "-c", "dgx-h100", "-n", "16", "--global-batch", "16", "--ep", "8", "--dtype", "fp8",
      "--emit", "megatron"], {}, "--expert-model-parallel-size 8"),
    (["plan", "-m", "gpt3-125m", "-c", "dgx-h100", "-n", "16", "--global-batch", "32", "--pp", "4", "--vpp", "3",
      "--emit", "megatron"], {}, "--num-virtual-stages-per-pipeline-rank 3"),
    (["plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "16", "--global-batch", "16", "--dtype", "fp8",
      "--emit", "torchtitan"], {}, "llama3_8b"),
    (["plan", "-m", "gpt3-125m", "-c", "dgx-h100", "-n", "8", "--global-batch", "8", "--emit", "deepspeed"], {},
     "train_batch_size"),
    (["plan", "-m", "{tmp}/config.json", "-c", "dgx-h100", "-n", "8", "--global-batch", "8", "--emit", "megatron"],
     {"config.json": json.dumps({**HF_ROPE_BASES["deepseek_v3"], "rope_scaling": {"type": "yarn", **ROPE_GOOD}})},
     "--rope-type yarn"),
    (["serve", "simulate", "-m", "gpt-oss-120b", "-s", "dgx2-v100", "--tp", "8", "--json"], {}, "mxfp4"),
    (["serve", "plan", "-m", "gpt-oss-20b", "-s", "dgx-a100-80gb", "-n", "8", "--max-batch", "16", "--json"], {},
     "mxfp4"),
    (["hardware", "stacks", "vllm"], {}, "stack vllm-0.14"),
    (["models", "show", "GPT-OSS-20B"], {}, "mxfp4"),
    (["plot", "breakdown", "-m", "gpt3-125m", "-c", "dgx-h100", "-n", "8", "--global-batch", "64", "-o", "{tmp}/f.png",
      "--title", "step time $\\propto 1/n$ per GPU"], {}, "wrote"),     # mathtext that parses is drawn
]


SIM_16 = ["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "16", "--tp", "2", "--pp", "2", "--global-batch", "32", "--json"]


def misc_cases() -> list[tuple]:
    """Single inputs that broke the contract once, and every command's --help."""
    out = [("plan -n 16777216 (nearby counts once took minutes)",
            ["plan", "-m", "gpt3-125m", "-c", "dgx-h100", "--global-batch", "32", "-n", "16777216"], {})]
    out.append(("serve disagg without a prefill queue (queue_wait_s was -1e-17)",
                ["serve", "simulate", "-m", "gpt3-13b", "-s", "dgx-h100", "--precision", "fp8", "--mode", "disagg",
                 "--decode-batch", "1", "--prefill-pp", "3", "--json"], {}))
    for opt in ("--recompute-num-layers", "--offload-activation-layers", "--loss-chunk-tokens", "--zero-shard-group",
                "--first-stage-layers"):                 # 2**63 overflowed ConfigBatch's int64 columns
        out.append((f"simulate {opt}=2**63", SIM_16 + [opt, str(2**63), "--recompute", "full"], {}))
    for kind, field, values in (("scaling", "gpu", "b200,h100-sxm-80gb"), ("scaling", "model", "gpt3-125m"),
                                ("bandwidth", "sequence_parallel", "true,false"), ("bandwidth", "recompute", "none,full")):
        out.append((f"plot {kind} --field {field}", ["plot", kind, "-m", "gpt3-125m", "-c", "dgx-h100", "-n", "8",
                                                       "--global-batch", "64", "-o", "{tmp}/f.png", "--field", field,
                                                       "--values", values], {}))
    for extra in (["--heads", "3"], ["--tp", "3"], ["--pp", "100"], ["--tp", "8"], ["--hidden", "255"]):     # checked before any rank starts (was a rank's traceback, exit 1)
        out.append((f"measure {' '.join(extra)}", ["measure", "--steps", "2", "--warmup", "0"] + extra, {}))
    for path in ([], ["serve"], ["serve", "simulate"], ["serve", "plan"], ["sweep"], ["plan"], ["simulate"], ["plot"],
                 ["validate"], ["validate", "published"], ["validate", "serving"], ["validate", "heterogeneous"],
                 ["validate", "measured"], ["measure"], ["calibrate"], ["hardware"], ["hardware", "list"],
                 ["hardware", "show"], ["hardware", "stacks"], ["models"], ["models", "list"], ["models", "show"]):
        out.append((f"{' '.join(path)} --help", path + ["--help"], {}))
    return out


#: an A100 + H100 pooled cluster whose "a100" pool is H100s too: its groups' stages all run at
#: one speed, so a one-stage group's pipeline is exactly its micro-batches x its stage
SAME_SPEED_POOLS = Path(POOLED).read_text().replace("cluster: dgx-a100-80gb", "cluster: dgx-h100")


def _published_with_run_id_prefix(prefix: str) -> str:
    """The bundled published-runs CSV's KOR22 rows with their run_id prefix replaced by ``prefix``."""
    with open(REPO / "paraplan" / "data" / "validation" / "published_runs.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["run_id"].startswith("KOR22")][:3]
    for row in rows:
        row["run_id"] = prefix + row["run_id"][len("KOR22"):]
    return _csv(list(rows[0]), rows)


#: single inputs a fuzz pass (session 42) found breaking the contract, each named by its fix's
#: commit message; ``test_fuzz`` also runs each alone, so a regression names its case
REGRESSIONS = [
    # a pooled plan whose critical group has one stage printed pipeline_bubble_s -4.4e-16
    ("pooled one-stage critical group: bubble -4e-16",
     ["simulate", "-m", "llama3-8b", "-c", "{tmp}/c.yaml", "--global-batch", "64", "--group", "2x a100:tp8:pp2",
      "--group", "h100:tp8:pp1", "--json"], {"c.yaml": SAME_SPEED_POOLS}),
    # a value of 0 (or false) on the scaling / bandwidth plots' logarithmic x axis was an internal
    # error (a divide by zero, then matplotlib's NaN axis limits or its log scale of 0)
    *[(f"plot {kind} --field {field} --values {values}",
       ["plot", kind, "-m", "gpt3-125m", "-c", "dgx-h100", "-n", "8", "--global-batch", "64", "-o", "{tmp}/f.png",
        "--field", field, "--values", values], {})
      for kind, field, values in (("scaling", "zero_stage", "0,1,2,3"), ("scaling", "flash_attention", "true,false"),
                                  ("bandwidth", "loss_chunk_tokens", "0,1024"))],
    # a --title whose $ signs pair up is mathtext to matplotlib: math it cannot parse was its
    # ValueError, an internal error, once the figure was drawn
    *[(f"plot {kind} --title {title!r}",
       ["plot", kind, "-m", "gpt3-125m", "-c", "dgx-h100", "-n", "8", "--global-batch", "64", "-o", "{tmp}/f.png",
        "--title", title], {})
      for kind, title in (("breakdown", "$x^$"), ("memory", "$\\frac{$"), ("breakdown", "$$"))],
    # a source (run_id prefix) whose $ signs pair up was drawn as mathtext by validate published
    # --plot: matplotlib's ValueError, an internal error after the table was printed
    ("validate published --plot, a source named '$x^$'", ["validate", "published", "{tmp}/runs.csv", "--plot", "{tmp}/v.png"],
     {"runs.csv": _published_with_run_id_prefix("$x^$")}),
]


def generate(rng: random.Random) -> list[tuple]:
    """Every triple of this module, in a fixed order for a given ``rng`` state."""
    return (serving_cases(rng) + sweep_runner_cases() + pooled_cases(rng) + validation_file_cases(rng)
            + magnitude_cases(rng) + misc_cases() + rope_scaling_cases(rng) + emit_cases(rng)
            + gpt_oss_serving_cases(rng) + name_cases(rng) + REGRESSIONS)
