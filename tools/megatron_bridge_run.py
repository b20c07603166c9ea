"""One Megatron-Bridge release's performance presets, run from its own files (a subprocess of
``tools/megatron_bridge_presets.py``; prints a JSON list of rows).

    python tools/megatron_bridge_run.py TREE TAG CONTAINER

TREE holds ``scripts/performance`` and ``src/megatron/bridge`` as ``git archive TAG`` wrote them.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import re
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recorder  # noqa: E402
import megatron_bridge_defaults  # noqa: E402
from megatron_bridge_defaults import library_default  # noqa: E402

logging.disable(logging.CRITICAL)

GPUS = {
    "h100": ("h100-sxm-80gb", "NVIDIA H100 80GB HBM3", 9),
    "b200": ("b200", "NVIDIA B200", 10),
    "b300": ("b300", "NVIDIA B300 SXM6 AC", 10),
    "gb200": ("gb200", "NVIDIA GB200", 10),
    "gb300": ("gb300", "NVIDIA GB300", 10),
}
DTYPES = {"bf16": ("bf16", "none"), "fp8_cs": ("fp8", "tensorwise"), "fp8_sc": ("fp8", "blockwise"),
          "fp8_ss": ("fp8", "blockwise"), "fp8_ds": ("fp8", "delayed"),
          "fp8_mx": ("mxfp8", "mxfp8"), "nvfp4": ("nvfp4", "nvfp4")}
#: library modules run as they are (recipe logic); the rest of megatron.* is recorded
REAL_LIBRARY = ("megatron.bridge.recipes", "megatron.bridge.perf_recipes",
                "megatron.bridge.training.comm_overlap", "megatron.bridge.training.mixed_precision",
                "megatron.bridge.training.flex_dispatcher_backend", "megatron.bridge.utils.cuda_graph")
STUBBED = ("megatron", "transformers", "transformer_engine", "omegaconf", "nemo_run", "modelopt",
           "hydra", "datasets", "wandb", "huggingface_hub", "accelerate", "safetensors", "einops",
           "nvidia_resiliency_ext", "flash_attn", "peft", "diffusers", "qwen_vl_utils", "PIL", "lightning",
           "tensorstore", "zarr", "mamba_ssm", "causal_conv1d", "nvtx", "cuda", "apex", "deep_ep",
           "hybrid_ep", "flashinfer", "triton", "nemo", "pydantic", "typing_extensions_stub")


def _is_real(name: str) -> bool:
    if name.split(".")[0] in ("configs", "utils", "argument_parser"):
        return True
    if re.search(r"\.data(\.|$)", name) or name.endswith(".utils.finetune_utils"):
        return False
    return any(name == p or name.startswith(p + ".") for p in REAL_LIBRARY)


def _plain(v):
    """A recorded value as CSV text."""
    if isinstance(v, recorder.Missing):
        v = v.value()
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "|".join(str(_plain(x)) for x in v)
    if isinstance(v, recorder.Rec):
        return v.__dict__.get("_label", "")
    if hasattr(v, "name") and hasattr(v, "value") and type(v).__module__ != "builtins":
        return str(v.name)       # an Enum
    return str(v)


def _get(obj, path: str, default="__raise__"):
    """Read a dotted attribute; unset ones resolve through the library defaults."""
    cur = obj
    for part in path.split("."):
        if cur is None:
            return None
        if isinstance(cur, str):       # mixed_precision given by name
            return None
        if not isinstance(cur, (recorder.Rec, recorder.Missing)) and not hasattr(cur, part):
            if default == "__raise__":
                raise AttributeError(f"{path}: {type(cur).__name__} has no {part}")
            return default
        cur = getattr(cur, part)
    if isinstance(cur, recorder.Missing):
        try:
            return cur.value()
        except recorder.UnknownDefault:
            if default == "__raise__":
                raise
            return default
    return cur


def _resolver_for(tag):
    def resolve(owner, path):
        return library_default(tag, owner, path)
    return resolve


def _is_moe(cfg) -> bool:
    n = _get(cfg, "model.num_moe_experts", None)
    return bool(n) and n > 1


#: CUDA's number of hardware work queues when CUDA_DEVICE_MAX_CONNECTIONS is unset (CUDA C
#: Programming Guide, environment variables: default 8, at most 32)
CUDA_DEFAULT_CONNECTIONS = 8


def max_connections(cfg, tag: str, tp: int, cp: int, pp: int, dp: int, a2a: bool, co) -> int:
    """CUDA_DEVICE_MAX_CONNECTIONS the preset's processes run with.

    * v0.6.0: the flat recipe's own ``cfg.env_vars`` (src/megatron/bridge/perf_recipes/*/*/*.py).
    * v0.2.0 .. v0.5.1: scripts/performance/perf_plugins.py
      ``PerfEnvPlugin._set_num_cuda_device_max_connections``: 8, 32 with the DeepEP / HybridEP
      flex dispatcher, 32 on Blackwell (b200, b300, gb200, gb300); on Hopper 1 when tp > 1 or
      cp > 1 without MoE all-to-all overlap (kernel issue order for the TP/CP overlap).
    * v0.1.0rc3: src/megatron/bridge/training/comm_overlap.py
      ``CommOverlapConfig._set_num_cuda_device_max_connections`` (run by its ``setup`` when the
      config has a ``comm_overlap``): compute capability > 9 with tp or cp > 1 and dp or pp > 1:
      32; Hopper with tp or cp > 1 without all-to-all overlap: 1; else unset (CUDA's 8).
    """
    major = recorder.CONTEXT.device_major
    if tag >= "v0.6.0":
        env = _get(cfg, "env_vars", None) or {}
        value = env.get("CUDA_DEVICE_MAX_CONNECTIONS") if isinstance(env, dict) else None
        return int(value) if value not in (None, "") else CUDA_DEFAULT_CONNECTIONS
    if tag < "v0.2.0":
        if co is None:
            return CUDA_DEFAULT_CONNECTIONS
        if major > 9:
            return 32 if (tp > 1 or cp > 1) and (dp > 1 or pp > 1) else CUDA_DEFAULT_CONNECTIONS
        return 1 if (tp > 1 or cp > 1) and not a2a else CUDA_DEFAULT_CONNECTIONS
    flex = _get(cfg, "model.moe_flex_dispatcher_backend", None) \
        if _get(cfg, "model.moe_token_dispatcher_type", "") == "flex" else None
    connections = 32 if _plain(flex) in ("deepep", "hybridep") else CUDA_DEFAULT_CONNECTIONS
    if major >= 10:
        return 32
    return 1 if (tp > 1 or cp > 1) and not a2a else connections


def summarise(cfg, tag: str, dp: int, compute_dtype: str) -> dict:
    """The preset's switches as the run would see them after Megatron-Bridge's setup
    (src/megatron/bridge/training/comm_overlap.py CommOverlapConfig.setup)."""
    tp = int(_get(cfg, "model.tensor_model_parallel_size"))
    pp = int(_get(cfg, "model.pipeline_model_parallel_size"))
    vpp = _get(cfg, "model.virtual_pipeline_model_parallel_size", None)
    sp = bool(_get(cfg, "model.sequence_parallel"))
    co = _get(cfg, "comm_overlap", None)
    user_tp = bool(co is not None and _get(co, "tp_comm_overlap", False))
    # comm_overlap.py _get_model_comm_overlap_cfgs: TP overlap off when TP < 2 or without SP
    tp_overlap = user_tp and tp >= 2 and sp
    a2a = bool(co is not None and _get(co, "overlap_moe_expert_parallel_comm", None)) or \
        bool(_get(cfg, "model.overlap_moe_expert_parallel_comm", False))
    delay = bool(co is not None and _get(co, "delay_wgrad_compute", None))
    ddp_dist = bool(_get(cfg, "ddp.use_distributed_optimizer", False))
    fsdp = bool(_get(cfg, "ddp.use_megatron_fsdp", False))
    # _get_optimizer_overlap_cfgs: with a comm_overlap config and the distributed optimizer, DP > 1
    # turns grad-reduce and param-gather overlap on unless the recipe set them
    if co is not None and ddp_dist:
        ogr = _get(co, "overlap_grad_reduce", None)
        opg = _get(co, "overlap_param_gather", None)
        ogr = (dp > 1) if ogr is None else bool(ogr)
        opg = (dp > 1) if opg is None else bool(opg)
    else:
        ogr = bool(_get(cfg, "ddp.overlap_grad_reduce", False))
        opg = bool(_get(cfg, "ddp.overlap_param_gather", False))
    opg_step = bool(_get(cfg, "optimizer.overlap_param_gather_with_optimizer_step", False)) or \
        bool(co is not None and _get(co, "overlap_param_gather_with_optimizer_step", None))
    impl = _plain(_get(cfg, "model.cuda_graph_impl", "none")) or "none"
    scope = _get(cfg, "model.cuda_graph_scope", None)
    if isinstance(scope, str):
        scope = [scope]
    scope_txt = _plain(scope) if scope else ""
    full_iter = impl == "full_iteration" or (impl == "local" and "full_iteration" in scope_txt.split("|")) \
        or (impl == "none" and "full_iteration" in scope_txt.split("|") and tag >= "v0.6.0")
    if impl == "none" and not full_iter:
        scope_txt = ""
    mp = _get(cfg, "mixed_precision", None)
    if isinstance(mp, str):
        fp8_recipe, fp8_pg, fp4, fp4_pg = "", "", "", ""
        grad32_mp = None
    else:
        fp8 = _get(mp, "fp8", None)
        fp8_recipe = _plain(_get(mp, "fp8_recipe", "")) if fp8 else ""
        fp8_pg = _plain(_get(mp, "fp8_param_gather", False)) if fp8 else ""
        fp4 = _plain(_get(mp, "fp4_recipe", "")) if _get(mp, "fp4", None) else ""
        fp4_pg = _plain(_get(mp, "fp4_param_gather", False)) if fp4 else ""
        grad32_mp = _get(mp, "grad_reduce_in_fp32", None)
    # MixedPrecisionConfig.setup copies its grad_reduce_in_fp32 onto the DDP config
    # (src/megatron/bridge/training/mixed_precision.py update_config_with_precision_overrides)
    grad32 = grad32_mp if grad32_mp is not None else _get(cfg, "ddp.grad_reduce_in_fp32", None)
    moe = _is_moe(cfg)
    rg = _get(cfg, "model.recompute_granularity", None)
    offload = _get(cfg, "model.cpu_offloading_num_layers", None) if _get(cfg, "model.cpu_offloading", False) else None
    return {
        "sequence_parallel": _plain(sp),
        "tp_comm_overlap": _plain(tp_overlap),
        "moe_a2a_overlap": _plain(a2a) if moe else "",
        "delay_wgrad_compute": _plain(delay) if moe else "",
        "moe_dispatcher": _plain(_get(cfg, "model.moe_token_dispatcher_type", "")) if moe else "",
        "moe_flex_backend": (_plain(_get(cfg, "model.moe_flex_dispatcher_backend", ""))
                             if moe and _get(cfg, "model.moe_token_dispatcher_type", "") == "flex" else ""),
        "cuda_graph_impl": impl,
        "cuda_graph_scope": scope_txt,
        "cuda_graphs_full_iteration": _plain(full_iter),
        "megatron_fsdp": _plain(fsdp),
        "nccl_ub": _plain(bool(_get(cfg, "ddp.nccl_ub", False))),
        "cpu_offloading_layers": _plain(offload),
        "recompute_granularity": _plain(rg),
        "recompute_method": _plain(_get(cfg, "model.recompute_method", None)) if rg else "",
        "recompute_num_layers": _plain(_get(cfg, "model.recompute_num_layers", None)) if rg == "full" else "",
        "recompute_modules": _plain(_get(cfg, "model.recompute_modules", None)) if rg == "selective" else "",
        "grad_reduce_in_fp32": _plain(grad32),
        "use_distributed_optimizer": _plain(ddp_dist),
        "overlap_grad_reduce": _plain(ogr),
        "overlap_param_gather": _plain(opg),
        "overlap_param_gather_with_optimizer_step": _plain(opg_step),
        "fp8_recipe": fp8_recipe,
        "fp8_param_gather": fp8_pg,
        "fp4_recipe": fp4,
        "fp4_param_gather": fp4_pg,
        "optimizer": _plain(_get(cfg, "optimizer.optimizer", "")),
        "moe_router_fusion": _plain(_get(cfg, "model.moe_router_fusion", False)) if moe else "",
        "te_op_fuser": _plain(_get(cfg, "model.use_transformer_engine_op_fuser", False)) if moe else "",
        "cuda_device_max_connections": str(max_connections(
            cfg, tag, tp, int(_get(cfg, "model.context_parallel_size", 1) or 1), pp, dp, a2a, co)),
        "seq_length": _plain(_get(cfg, "model.seq_length", "")),
    }


# --- preset tables ---------------------------------------------------------------------------

_NAME_V3 = re.compile(r"^(?P<recipe>[A-Z0-9_]+?)_PRETRAIN_CONFIG_(?P<gpu>[A-Z0-9]+)_"
                      r"(?P<dtype>BF16|FP8_CS|FP8_MX|FP8_SC|NVFP4)(?:_(?P<variant>[A-Z0-9_]+))?$")
_NAME_V2 = re.compile(r"^(?P<recipe>[A-Z0-9_]+?)_(?P<gpu>GB300|GB200|B300|B200|H100)_"
                      r"(?P<dtype>BF16|FP8_CS|FP8_MX|FP8_SC|NVFP4)_BASE_CONFIG$")


def presets_v3(perf: Path):
    """(family, module, name, recipe, gpu, dtype, variant, WorkloadBaseConfig) of every pretraining
    preset exported by configs/<family>/__init__.py."""
    out = []
    for fam_dir in sorted(p for p in (perf / "configs").iterdir() if (p / "__init__.py").is_file()):
        family = fam_dir.name
        mod = importlib.import_module(f"configs.{family}")
        for name in sorted(dir(mod)):
            m = _NAME_V3.match(name)
            if m and m.group("gpu").lower() in GPUS:
                out.append((family, mod, name, m.group("recipe").lower(), m.group("gpu").lower(),
                            m.group("dtype").lower(), (m.group("variant") or "").lower(), getattr(mod, name)))
    return out


def presets_v2(perf: Path):
    out = []
    for fam_dir in sorted(p for p in (perf / "configs").iterdir() if p.is_dir()):
        family = fam_dir.name
        if not (fam_dir / "workload_base_configs.py").is_file():
            continue
        mod = importlib.import_module(f"configs.{family}.workload_base_configs")
        for name in sorted(dir(mod)):
            m = _NAME_V2.match(name)
            if m and "_SFT_" not in name and "_LORA_" not in name:
                out.append((family, mod, name, m.group("recipe").lower(), m.group("gpu").lower(),
                            m.group("dtype").lower(), "", getattr(mod, name)))
    return out


def default_variant_of(presets):
    """run_script's --config_variant defaults to v2, falling back to v1 (argument_parser.py,
    utils/utils.py get_workload_base_config), else the unversioned name."""
    by_key = {}
    for p in presets:
        by_key.setdefault((p[0], p[3], p[4], p[5]), set()).add(p[6])
    out = {}
    for key, variants in by_key.items():
        for choice in ("v2", "v1", ""):
            if choice in variants:
                out[key] = choice
                break
    return out


def run_v3(tree: Path, tag: str, container: str) -> list[dict]:
    perf = tree / "scripts" / "performance"
    overrides = importlib.import_module("utils.overrides")
    presets = presets_v3(perf)
    defaults = default_variant_of(presets)
    rows = []
    for family, mod, name, recipe, gpu, dtype, variant, base in presets:
        canonical, dev_name, major = GPUS[gpu]
        recorder.CONTEXT.device_name, recorder.CONTEXT.device_major = dev_name, major
        fn_name = f"{recipe}_pretrain_config_{gpu}"
        row = _base_row(container, tag, family, recipe, gpu, dtype, variant, base)
        row["default_variant"] = "true" if defaults.get((family, recipe, gpu, dtype)) == variant else "false"
        row["source"] = (f"NVIDIA-NeMo/Megatron-Bridge@{tag} scripts/performance/configs/{family}/ "
                         f"{name} + {fn_name}(precision='{dtype}')")
        fn = getattr(mod, fn_name, None)
        if fn is None:
            fn = _function_in_submodules(perf, family, fn_name)
            if fn is None:
                row["note"] = f"no {fn_name} in configs/{family}"
                rows.append(row)
                continue
            row["note"] = (f"{fn_name} is not exported by configs/{family}/__init__.py at this tag "
                           "(the launcher cannot select it); read from its module")
        try:
            kwargs = {"precision": dtype, "mock": True, "config_variant": variant or "v1"}
            import inspect
            params = inspect.signature(fn).parameters
            kwargs = {k: v for k, v in kwargs.items() if k in params}
            cfg = fn(**kwargs)
            _post_overrides(overrides, cfg, family, recipe, gpu, base.num_gpus, dtype, variant or "v1")
            dp = base.num_gpus // (base.tensor_model_parallel_size * base.pipeline_model_parallel_size
                                   * base.context_parallel_size)
            row.update(summarise(cfg, tag, dp, dtype))
            _check_degrees(cfg, row)
        except Exception as exc:    # recorded, not hidden: the row says why it has no switches
            row["note"] = (row["note"] + f" not executed: {type(exc).__name__}: {exc}").strip()[:300]
            if "--debug" in sys.argv:
                traceback.print_exc(file=sys.stderr)
        rows.append(row)
    return rows


def _function_in_submodules(perf: Path, family: str, fn_name: str):
    for path in sorted((perf / "configs" / family).glob("*.py")):
        if f"def {fn_name}(" in path.read_text():
            return getattr(importlib.import_module(f"configs.{family}.{path.stem}"), fn_name)
    return None


def _post_overrides(overrides, cfg, family, recipe, gpu, num_gpus, dtype, variant):
    """run_script.py's set_post_overrides (precision-aware optimizer for bf16 Adam,
    overlap_param_gather_with_optimizer_step for DP > 1 with interleaved PP)."""
    fn = getattr(overrides, "set_post_overrides", None)
    if fn is None:
        return
    import inspect
    params = inspect.signature(fn).parameters
    kwargs = dict(recipe=cfg, model_family_name=family, model_recipe_name=recipe, gpu=gpu, num_gpus=num_gpus,
                  compute_dtype=dtype, task="pretrain", user_gbs=None, config_variant=variant)
    fn(**{k: v for k, v in kwargs.items() if k in params})


def _check_degrees(cfg, row):
    """The executed recipe must end with the preset's own degrees."""
    for col, path in (("tp", "model.tensor_model_parallel_size"), ("pp", "model.pipeline_model_parallel_size"),
                      ("ep", "model.expert_model_parallel_size"), ("micro_batch", "train.micro_batch_size")):
        got = _plain(_get(cfg, path, ""))
        if got and row[col] != "" and got != str(row[col]):
            row["note"] = (row.get("note", "") + f" {col} ends {got} after the recipe function").strip()


def _base_row(container, tag, family, recipe, gpu, dtype, variant, base) -> dict:
    canonical = GPUS[gpu][0]
    paraplan_dtype, _ = DTYPES[dtype]
    return {
        "container": container, "tag": tag, "family": family, "recipe": recipe, "gpu_preset": gpu,
        "gpu": canonical, "compute_dtype": dtype, "dtype": paraplan_dtype, "variant": variant,
        "n_gpus": base.num_gpus, "tp": base.tensor_model_parallel_size, "pp": base.pipeline_model_parallel_size,
        "cp": base.context_parallel_size, "ep": base.expert_model_parallel_size,
        "etp": "" if base.expert_tensor_parallel_size is None else base.expert_tensor_parallel_size,
        "vpp": "" if base.virtual_pipeline_model_parallel_size is None else base.virtual_pipeline_model_parallel_size,
        "micro_batch": base.micro_batch_size, "global_batch": base.global_batch_size, "note": "",
    }


_FLAT = re.compile(r"^(?P<recipe>[a-z0-9_]+?)_pretrain_(?P<n>\d+)gpu_(?P<gpu>[a-z0-9]+)_"
                   r"(?P<dtype>bf16|fp8cs|fp8mx|fp8sc|nvfp4)(?:_(?P<variant>[a-z0-9_]+))?_config$")
_FLAT_DTYPE = {"bf16": "bf16", "fp8cs": "fp8_cs", "fp8mx": "fp8_mx", "fp8sc": "fp8_sc", "nvfp4": "nvfp4"}


def run_flat(tree: Path, tag: str, container: str) -> list[dict]:
    """v0.6.0: flat recipes src/megatron/bridge/perf_recipes/<family>/<gpu>/<model>.py, one function
    per (model, GPU count, GPU, precision[, variant]) that sets every switch itself; run_script.py
    adds the precision-aware optimizer for bf16 Adam only."""
    root = tree / "src" / "megatron" / "bridge" / "perf_recipes"
    rows = []
    for path in sorted(root.glob("*/*/*.py")):
        family, gpu = path.parent.parent.name, path.parent.name
        if gpu not in GPUS or path.stem == "__init__":
            continue
        mod = importlib.import_module(f"megatron.bridge.perf_recipes.{family}.{gpu}.{path.stem}")
        for name in sorted(n for n in vars(mod) if _FLAT.match(n)):
            m = _FLAT.match(name)
            if m.group("gpu") != gpu or getattr(getattr(mod, name), "__module__", "") != mod.__name__:
                continue
            dtype = _FLAT_DTYPE[m.group("dtype")]
            variant = m.group("variant") or ""
            recorder.CONTEXT.device_name, recorder.CONTEXT.device_major = GPUS[gpu][1], GPUS[gpu][2]
            row = {"container": container, "tag": tag, "family": family, "recipe": m.group("recipe"),
                   "gpu_preset": gpu, "gpu": GPUS[gpu][0], "compute_dtype": dtype, "dtype": DTYPES[dtype][0],
                   "variant": variant, "default_variant": "true" if not variant else "false",
                   "n_gpus": int(m.group("n")), "note": "",
                   "source": f"NVIDIA-NeMo/Megatron-Bridge@{tag} src/megatron/bridge/perf_recipes/{family}/{gpu}/"
                             f"{path.name} {name}()"}
            try:
                cfg = getattr(mod, name)()
                for col, attr in (("tp", "model.tensor_model_parallel_size"), ("pp", "model.pipeline_model_parallel_size"),
                                  ("cp", "model.context_parallel_size"), ("ep", "model.expert_model_parallel_size"),
                                  ("etp", "model.expert_tensor_parallel_size"),
                                  ("vpp", "model.virtual_pipeline_model_parallel_size"),
                                  ("micro_batch", "train.micro_batch_size"), ("global_batch", "train.global_batch_size")):
                    row[col] = _plain(_get(cfg, attr, ""))
                dp = row["n_gpus"] // (int(row["tp"]) * int(row["pp"]) * int(row["cp"] or 1))
                row.update(summarise(cfg, tag, dp, dtype))
            except Exception as exc:    # recorded, not hidden
                row["note"] = f"not executed: {type(exc).__name__}: {exc}"[:300]
                if "--debug" in sys.argv:
                    traceback.print_exc(file=sys.stderr)
            rows.append(row)
    return rows


_YAML_RECIPES = {   # run_script.py@v0.1.0rc3: model_name, model_size -> library pretrain_config module
    "deepseek_v3": "megatron.bridge.recipes.deepseek.deepseek_v3",
    "llama3_8b": "megatron.bridge.recipes.llama.llama3_8b",
    "llama3_70b": "megatron.bridge.recipes.llama.llama3_70b",
    "llama31_405b": "megatron.bridge.recipes.llama.llama31_405b",
    "qwen3_30b_a3b": "megatron.bridge.recipes.qwen.qwen3_30b_a3b",
    "qwen3_235b_a22b": "megatron.bridge.recipes.qwen.qwen3_235b_a22b",
}


def _set_tree(obj, values: dict) -> None:
    for key, value in values.items():
        if isinstance(value, dict) and "_target_" not in value:
            _set_tree(getattr(obj, key), value)
        elif not isinstance(value, dict):
            setattr(obj, key, value)


def _run_script_v010(recipe: str, gpu: str, compute: str, fp8: str | None, helpers, yaml_root, perf: dict):
    """scripts/performance/run_script.py main() at v0.1.0rc3, without the launch: the per-model
    branch, the userbuffers map, the YAML ConfigContainer section, then the perf_matrix entry
    (utils/helpers.py apply_perf_matrix_overrides)."""
    precision = helpers.get_precision_config(compute, fp8)
    lib = importlib.import_module(_YAML_RECIPES[recipe])
    comm = importlib.import_module("megatron.bridge.training.comm_overlap")
    if recipe == "deepseek_v3":
        enable_deepep = gpu == "h100"
        use_tokendrop = gpu in ("b200", "gb200")
        if use_tokendrop:
            enable_deepep = False
        pp, vp = (8, 4) if gpu == "h100" else (4, 8)
        cfg = lib.pretrain_config(mock=True, precision_config=precision, pipeline_parallelism=pp,
                                  virtual_pipeline_parallelism=vp, enable_deepep=enable_deepep,
                                  layout="Et|(tt|)*30mL")
        if gpu == "h100":       # A2A_1F1B
            cfg.comm_overlap.overlap_moe_expert_parallel_comm = True
            cfg.comm_overlap.delay_wgrad_compute = True
            cfg.model.moe_shared_expert_overlap = False
        else:
            cfg.comm_overlap.overlap_moe_expert_parallel_comm = False
            cfg.comm_overlap.delay_wgrad_compute = False
            cfg.model.moe_shared_expert_overlap = True
        if gpu == "h100":
            cfg.model.recompute_modules = ["mla_up_proj", "mlp"]
        elif gpu == "gb200":
            cfg.model.recompute_modules = ["mla_up_proj", "mlp", "moe_act"]
        if gpu in ("gb200", "b200"):
            cfg.comm_overlap.overlap_grad_reduce = True
        elif gpu == "h100":
            cfg.comm_overlap.overlap_grad_reduce = False
        note = "token drop (apply_moe_token_drop) on b200/gb200 by default" if use_tokendrop else ""
    elif recipe.startswith("qwen3"):
        cfg = lib.pretrain_config(mock=True, precision_config=precision,
                                  comm_overlap_config=comm.CommOverlapConfig(tp_comm_overlap=True))
        note = "token drop (apply_moe_token_drop) always"
    else:
        cfg = lib.pretrain_config(mock=True, precision_config=precision)
        note = ""
    ub = helpers.COMM_OVERLAP_CONFIG_MAP.get(recipe, {}).get(gpu, {}).get(compute)
    if ub is not None:
        cfg.comm_overlap.tp_comm_overlap_cfg = ub
    if compute == "bf16":
        cfg.optimizer.use_precision_aware_optimizer = True
    section = yaml_root.get("ConfigContainer") or {}
    _set_tree(cfg, {k: v for k, v in section.items() if k != "profiling"})
    cfg.train.micro_batch_size = perf.get("mbs", 1)
    cfg.train.global_batch_size = perf.get("gbs", 1)
    for key, attr, default in (("tp", "tensor_model_parallel_size", 1), ("pp", "pipeline_model_parallel_size", 1),
                               ("vp", "virtual_pipeline_model_parallel_size", None),
                               ("cp", "context_parallel_size", 1), ("ep", "expert_model_parallel_size", 1),
                               ("etp", "expert_tensor_parallel_size", None)):
        setattr(cfg.model, attr, perf.get(key, default))
    helpers.set_megatron_fsdp_overrides(cfg, perf)
    helpers.set_cuda_graph_overrides(cfg, perf)
    helpers.set_recompute_overrides(cfg, perf)
    cfg.model.sequence_parallel = bool(cfg.model.tensor_model_parallel_size > 1)
    if perf.get("cuda_graphs"):
        # Megatron-Core 0.14 enable_cuda_graph = per-layer graphs (the "local" implementation),
        # scope "full" = each whole transformer layer; not a full-iteration capture
        cfg.model.cuda_graph_impl = "local"
        cfg.model.cuda_graph_scope = "full"
    return cfg, note


def run_yaml(tree: Path, tag: str, container: str) -> list[dict]:
    """v0.1.0rc3 (25.09): scripts/performance/configs/<model>/<recipe>_llm_pretrain.yaml perf_matrix
    entries: gpu -> num_gpus_<n> -> common + one block per precision."""
    import yaml
    perf_dir = tree / "scripts" / "performance"
    helpers = importlib.import_module("utils.helpers")
    rows = []
    for path in sorted((perf_dir / "configs").glob("*/*_llm_pretrain.yaml")):
        recipe = path.name.replace("_llm_pretrain.yaml", "")
        root = yaml.safe_load(path.read_text())
        for gpu, by_n in (root.get("perf_matrix") or {}).items():
            if gpu not in GPUS:
                continue
            for n_key, block in by_n.items():
                common = block.get("common") or {}
                for dtype_key in [k for k in block if k != "common"]:
                    perf = {**common, **(block.get(dtype_key) or {})}
                    compute, _, fp8 = dtype_key.partition("_")
                    dtype = dtype_key if compute == "fp8" else "bf16"
                    recorder.CONTEXT.device_name, recorder.CONTEXT.device_major = GPUS[gpu][1], GPUS[gpu][2]
                    n = int(n_key.split("_")[-1])
                    row = {"container": container, "tag": tag, "family": path.parent.name, "recipe": recipe,
                           "gpu_preset": gpu, "gpu": GPUS[gpu][0], "compute_dtype": dtype,
                           "dtype": DTYPES[dtype][0], "variant": "", "default_variant": "true", "n_gpus": n,
                           "tp": perf.get("tp", 1), "pp": perf.get("pp", 1), "cp": perf.get("cp", 1),
                           "ep": perf.get("ep", 1), "etp": "" if perf.get("etp") is None else perf.get("etp"),
                           "vpp": "" if perf.get("vp") is None else perf.get("vp"),
                           "micro_batch": perf.get("mbs", ""), "global_batch": perf.get("gbs", ""),
                           "source": f"NVIDIA-NeMo/Megatron-Bridge@{tag} scripts/performance/configs/"
                                     f"{path.parent.name}/{path.name} perf_matrix.{gpu}.{n_key}.{dtype_key} "
                                     f"+ run_script.py main()", "note": ""}
                    try:
                        cfg, note = _run_script_v010(recipe, gpu, compute, fp8 or None, helpers, root, perf)
                        row["note"] = note
                        dp = n // (int(row["tp"]) * int(row["pp"]) * int(row["cp"] or 1))
                        row.update(summarise(cfg, tag, dp, dtype))
                    except Exception as exc:    # recorded, not hidden
                        row["note"] = f"not executed: {type(exc).__name__}: {exc}"[:300]
                        if "--debug" in sys.argv:
                            traceback.print_exc(file=sys.stderr)
                    rows.append(row)
    return rows


def main() -> int:
    tree, tag, container = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    recorder.install([tree / "scripts" / "performance", tree / "src"], _is_real, STUBBED)
    recorder.CONTEXT.resolver = _resolver_for(tag)
    megatron_bridge_defaults.TREE = tree
    if (tree / "scripts" / "performance" / "configs").is_dir() and \
            list((tree / "scripts" / "performance" / "configs").glob("*/*_llm_pretrain.yaml")):
        rows = run_yaml(tree, tag, container)
    elif tag == "v0.2.0":
        rows = run_v2(tree, tag, container)
    elif (tree / "src" / "megatron" / "bridge" / "perf_recipes").is_dir() and \
            not (tree / "scripts" / "performance" / "configs").is_dir():
        rows = run_flat(tree, tag, container)
    else:
        rows = run_v3(tree, tag, container)
    json.dump(rows, sys.stdout)
    return 0


def run_v2(tree: Path, tag: str, container: str) -> list[dict]:
    """v0.2.0: configs/<model>/workload_base_configs.py <MODEL>_<GPU>_<DTYPE>_BASE_CONFIG and
    configs/<model>/<model>_llm_pretrain.py <model>_<size>_<gpu>_config(precision); run_script.py
    then applies utils/helpers.py set_common_perf_overrides and set_user_overrides."""
    perf = tree / "scripts" / "performance"
    helpers = importlib.import_module("utils.helpers")
    rows = []
    for family, mod, name, recipe, gpu, dtype, variant, base in presets_v2(perf):
        recorder.CONTEXT.device_name, recorder.CONTEXT.device_major = GPUS[gpu][1], GPUS[gpu][2]
        fn_name = f"{recipe}_{gpu}_config"
        row = _base_row(container, tag, family, recipe, gpu, dtype, variant, base)
        row["default_variant"] = "true"
        row["source"] = (f"NVIDIA-NeMo/Megatron-Bridge@{tag} scripts/performance/configs/{family}/ "
                         f"workload_base_configs.py {name} + {family}_llm_pretrain.py {fn_name}(precision='{dtype}')")
        try:
            pre = importlib.import_module(f"configs.{family}.{family}_llm_pretrain")
            fn = getattr(pre, fn_name, None)
            if fn is None:
                row["note"] = f"no {fn_name} in configs/{family}/{family}_llm_pretrain.py"
                rows.append(row)
                continue
            cfg = fn(precision=dtype)
            helpers.set_common_perf_overrides(cfg)
            helpers.set_user_overrides(cfg, {"num_gpus": base.num_gpus, "compute_dtype": dtype,
                                             "model_name": family, "gpu": gpu})
            dp = base.num_gpus // (base.tensor_model_parallel_size * base.pipeline_model_parallel_size
                                   * base.context_parallel_size)
            row.update(summarise(cfg, tag, dp, dtype))
            _check_degrees(cfg, row)
        except Exception as exc:    # recorded, not hidden: the row says why it has no switches
            row["note"] = f"not executed: {type(exc).__name__}: {exc}"[:300]
            if "--debug" in sys.argv:
                traceback.print_exc(file=sys.stderr)
        rows.append(row)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
