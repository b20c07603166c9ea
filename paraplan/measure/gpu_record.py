"""A recorded GPU measurement, compared with the cost models (no torch needed).

``tools/gpu_kernel_checks.py`` and ``tools/gpu_step_profile.py`` write, on a machine with a CUDA
GPU, timed kernels (GEMMs, memory-bound kernels, attention), single-GPU training steps of the
small GPT (``paraplan.measure``) and a kernel-by-kernel profile of one step of each. This module
reads such a folder (``tests/data/gpu_h200/`` is one, taken on an H200) and puts the cost models'
numbers beside the measured ones:

* ``gemm_table``: each timed GEMM against ``cost_models.compute.gemm_roofline_s`` (the plateau
  times the tile-and-wave shape factor, or the HBM bound; no launch overhead, since back-to-back
  calls overlap their launches);
* ``step_table``: each measured step against ``simulator.simulate`` of the same model, layout and
  batch on the catalog system of that GPU (``paraplan.measure.compare.predict``);
* ``decode_table``: each decode GEMM (``tools/gpu_decode_checks.py``) against the serving cost
  model's ``inference_layers.gemm_s`` plus its per-kernel time, at the generation's fitted serving
  factors;
* ``category_table``: the profiled step's device time and launches split into GEMMs, attention,
  memory-bound kernels and the optimizer's, against the cost models' time and kernel count of the
  same parts (``cost_models.layer_costs``, counted with ``compute.kernel_counting_rates``).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hardware_specs.errors import InputError, shown

#: kernel-name patterns of each category of a profiled step (cuBLAS/cuBLASLt GEMM kernels are
#: named nvjet_*, sm90_xmma_*, cutlass_*; cuDNN's and FlashAttention's attention kernels carry
#: sdpa / fmha / flash; PyTorch's foreach optimizer kernels are multi_tensor_apply_kernel)
CATEGORY_PATTERNS = (("gemm", r"nvjet|gemm|cutlass|xmma"), ("attention", r"sdpa|fmha|flash|cudnn"),
                     ("optimizer", r"multi_tensor_apply"))
CATEGORIES = ("gemm", "attention", "memory", "optimizer")


def kernel_category(name: str) -> str:
    """``gemm``, ``attention``, ``optimizer``, ``memory`` (every other kernel, memset and copy
    included) or ``annotation`` (a profiler range such as ``Optimizer.step#Adam.step``, not a
    kernel: its time is already in the kernels it spans)."""
    if "#" in name or name.startswith("ProfilerStep"):
        return "annotation"
    for category, pattern in CATEGORY_PATTERNS:
        if re.search(pattern, name):
            return category
    return "memory"


@dataclass(frozen=True)
class GpuRecord:
    """The files of one recorded run (see the module docstring); absent parts are empty."""

    env: dict
    kernels: pd.DataFrame
    runs: tuple
    step_kernels: pd.DataFrame
    step_summary: pd.DataFrame
    launch: pd.DataFrame
    decode_gemms: pd.DataFrame


#: columns each recorded file must have (a file may be absent; a damaged one is an input error)
REQUIRED_COLUMNS = {"kernels.csv": ("kind", "dtype", "m", "n", "k", "time_s", "flops", "hbm_bytes"),
                    "step_kernels.csv": ("run", "kernel", "launches", "device_s"),
                    "step_summary.csv": ("run", "eager_step_s", "kernels", "kernel_sum_s"),
                    "launch.csv": ("mode", "kernels", "seconds_per_kernel"),
                    "decode_gemms.csv": ("dtype", "m", "n", "k", "time_s", "weight_bytes")}
#: keys each measured run (``measured_runs.json``) must carry
RUN_KEYS = ("name", "num_layers", "hidden_size", "num_heads", "vocab_size", "seq_len", "dp", "tp", "pp",
            "micro_batch", "global_batch", "zero_stage", "recompute", "dtype", "measured_step_s", "phase_s")
#: every time column, each of which must be finite and positive
TIME_COLUMNS = ("time_s", "device_s", "eager_step_s", "seconds_per_kernel")


def _read_csv(folder: Path, name: str) -> pd.DataFrame:
    path = folder / name
    if path.exists() and not path.is_file():
        raise InputError(name, "is not a file", "remove it, or rewrite it with the tools/gpu_*.py scripts")
    if not path.is_file():
        return pd.DataFrame()
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise InputError(name, f"cannot be read as CSV ({type(exc).__name__})",
                         "rewrite it with the tools/gpu_*.py scripts") from None
    missing = [c for c in REQUIRED_COLUMNS[name] if c not in frame.columns]
    if missing:
        raise InputError(name, f"has no column {missing[0]!r}", "rewrite it with the tools/gpu_*.py scripts")
    _require_positive(frame, [c for c in TIME_COLUMNS if c in frame.columns], name)
    if name == "kernels.csv":
        # the recorded rates too: the GEMM table echoes them (-5 TFLOP/s, NaN GB/s were printed as measured)
        _require_positive(frame[frame["kind"] == "gemm"], ("m", "n", "k", "flops") +
                          tuple(c for c in ("tflops", "gb_per_s") if c in frame.columns), name)
    elif name == "decode_gemms.csv":
        _require_positive(frame, ("m", "n", "k", "weight_bytes"), name)
    elif name == "step_kernels.csv":
        _require_positive(frame, ("launches",), name)
        if not all(isinstance(k, str) and k.strip() for k in frame["kernel"]) or \
                not all(isinstance(r, str) and r.strip() for r in frame["run"]):
            raise InputError(f"{name}.kernel", "has an empty kernel or run name", "rewrite the file, or remove that row")
    return frame


#: the largest value a recorded column may hold: a measured kernel or step is under a day, a
#: shape or count far under 1e15 (larger ones are damage, and would print as such)
MAX_RECORDED = 1e15
MAX_RECORDED_S = 86400.0
#: the shortest time a record may hold: no kernel or step takes less than a nanosecond (a smaller
#: value is damage, and its relative error would print as inf)
MIN_RECORDED_S = 1e-9


def _require_positive(frame: pd.DataFrame, columns, where: str) -> None:
    """``InputError`` unless every value of ``columns`` is a finite positive number within
    ``MAX_RECORDED`` (``MAX_RECORDED_S`` for seconds)."""
    for column in columns:
        values = pd.to_numeric(frame[column], errors="coerce")
        limit = MAX_RECORDED_S if column in TIME_COLUMNS else MAX_RECORDED
        least = MIN_RECORDED_S if column in TIME_COLUMNS else 0.0
        if not (np.isfinite(values) & (values > least) & (values <= limit)).all():
            raise InputError(f"{where}.{column}", f"has a value that is not a finite number above {least:g} and up to "
                             f"{limit:g}", "rewrite the file, or remove that row")


#: the whole-number keys of a measured run, each at least 1 (``zero_stage`` at least 0)
RUN_INTEGERS = ("num_layers", "hidden_size", "num_heads", "vocab_size", "seq_len", "dp", "tp", "pp", "micro_batch",
                "global_batch", "zero_stage")


def _check_run(run, where: str) -> None:
    """``InputError`` naming the first key of a measured run that is missing or of the wrong
    kind (the run's size and layout are checked again by ``simulate``)."""
    fix = "rewrite it with tools/gpu_kernel_checks.py"
    if not isinstance(run, dict):
        raise InputError(where, "is not a JSON object", fix)
    missing = [k for k in RUN_KEYS if k not in run]
    if missing:
        raise InputError(where, f"has no {missing[0]!r}", fix)
    for key in ("name", "recompute", "dtype"):
        if not isinstance(run[key], str) or not run[key].strip():
            raise InputError(f"{where}.{key}", "is not a non-empty string", fix)
    for key in RUN_INTEGERS:
        value = run[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "zero_stage" else 1) \
                or value > MAX_RECORDED:
            raise InputError(f"{where}.{key}", f"is not a whole number in range, got {shown(value)}", fix)
    # the runner's own rules (ZeRO 0 or 1, recompute none or full, the shapes its GPT shards):
    # a run the runner cannot produce is damage, and would be priced as a layout never measured
    from paraplan.measure.train import RunConfig
    layout = {k: run[k] for k in RUN_KEYS if k in RunConfig.__dataclass_fields__}
    try:
        RunConfig(**layout)
    except InputError as exc:
        raise InputError(f"{where}.{exc.field}", f"{exc.message}, which paraplan.measure's runner cannot have run",
                         fix) from None
    phases = run["phase_s"]
    values = [run["measured_step_s"]] + ([phases.get(k) for k in ("forward_backward_s", "optimizer_s")]
                                         if isinstance(phases, dict) else [None])
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not MIN_RECORDED_S <= value <= MAX_RECORDED_S:
            raise InputError(f"{where}.measured_step_s / phase_s", "is not a finite positive number of seconds",
                             fix)


def _check_env(env: dict) -> None:
    """``InputError`` unless ``env.json`` names the GPU as non-empty text: any other value was
    printed as the GPU's name, and the chip's model number in it (``check_record_gpu``) was then
    not compared with ``--cluster``'s GPU."""
    name = env.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError("env.json.name", f"is not the GPU's name as non-empty text, got {repr(name)[:80]}",
                         "rewrite it with tools/gpu_kernel_checks.py on the CUDA GPU that was measured")


#: the files a record folder may hold (what ``load_record`` reads)
RECORD_FILES = ("env.json", "measured_runs.json", "kernels.csv", "step_kernels.csv", "step_summary.csv",
                "launch.csv", "decode_gemms.csv")


def load_record(folder) -> GpuRecord:
    """Read a folder written by ``tools/gpu_kernel_checks.py`` (and, optionally, the profile and
    decode scripts). A missing or damaged file raises ``InputError``, naming it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError("folder", f"no such folder {folder}", "pass a folder written by tools/gpu_kernel_checks.py")
    if not (folder / "env.json").is_file():
        raise InputError("folder", f"{folder} has no env.json", "pass a folder written by tools/gpu_kernel_checks.py")
    runs_path = folder / "measured_runs.json"
    if runs_path.exists() and not runs_path.is_file():
        raise InputError("measured_runs.json", "is not a file", "remove it, or rewrite it with tools/gpu_kernel_checks.py")
    try:
        env = json.loads((folder / "env.json").read_text())
        runs = json.loads(runs_path.read_text()) if runs_path.is_file() else []
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InputError("folder", f"a JSON file of {folder} cannot be read ({type(exc).__name__})",
                         "rewrite it with tools/gpu_kernel_checks.py") from None
    if not isinstance(env, dict):
        raise InputError("env.json", "is not a JSON object", "rewrite it with tools/gpu_kernel_checks.py")
    _check_env(env)
    if not isinstance(runs, list):
        raise InputError("measured_runs.json", "is not a JSON list of runs", "rewrite it with tools/gpu_kernel_checks.py")
    for i, run in enumerate(runs):
        _check_run(run, f"measured_runs.json[{i}]")
    return GpuRecord(env, _read_csv(folder, "kernels.csv"), tuple(runs), _read_csv(folder, "step_kernels.csv"),
                     _read_csv(folder, "step_summary.csv"), _read_csv(folder, "launch.csv"),
                     _read_csv(folder, "decode_gemms.csv"))


#: a superchip's GPU that the catalog lists under another chip's name (GH200: an H100 with 96 GB)
CHIP_ALIASES = {"gh200": "h100"}


def check_record_gpu(record: GpuRecord, cluster) -> None:
    """``InputError`` unless the record was measured on ``cluster``'s GPU: the same SM count and
    the chip's model number (H200 in "NVIDIA H200") in the catalog GPU's name. The SM count
    alone lets an H200 record be read as an H100 (132 SMs each)."""
    name = str(record.env.get("name", "?"))
    sm_count = record.env.get("sm_count")
    if isinstance(sm_count, int) and cluster.gpu.sm_count and sm_count != cluster.gpu.sm_count:
        raise InputError("cluster", f"the record's GPU ({name}, {sm_count} SMs) is not "
                         f"{cluster.name}'s ({cluster.gpu.name}, {cluster.gpu.sm_count} SMs)",
                         "pass the catalog system of the GPU that was measured")
    chip = re.search(r"\b([A-Z]{1,2}\d{2,4})\b", name)
    model = chip.group(1).lower() if chip else ""
    catalog = cluster.gpu.name.lower()
    if model and model not in catalog and CHIP_ALIASES.get(model, model) not in catalog:
        raise InputError("cluster", f"the record's GPU ({name}) is not {cluster.name}'s ({cluster.gpu.name})",
                         "pass the catalog system of the GPU that was measured")


def gemm_table(record: GpuRecord, cluster) -> pd.DataFrame:
    """The timed GEMMs with ``predicted_s`` (``gemm_roofline_s`` in the row's dtype on
    ``cluster``'s GPU and its generation's efficiency model), ``ratio`` = measured / predicted
    and ``shape_factor`` (``wave_shape_factor``)."""
    from cost_models.compute import compute_rates, gemm_roofline_s, gemm_shape_factor
    from hardware_specs.catalog import efficiency_for_cluster
    eff = efficiency_for_cluster(cluster)
    g = record.kernels[record.kernels["kind"] == "gemm"].copy()
    g["predicted_s"] = np.nan
    g["shape_factor"] = np.nan
    for dtype in g["dtype"].unique():
        rows = g["dtype"] == dtype
        rates = compute_rates(cluster.gpu, eff, dtype)
        m, n, k = (g.loc[rows, c].to_numpy(float) for c in ("m", "n", "k"))
        g.loc[rows, "predicted_s"] = gemm_roofline_s(m, n, k, rates)
        g.loc[rows, "shape_factor"] = gemm_shape_factor(m, n, k, rates.half_dim, rates.k_half_dim, rates.sm_count,
                                                        rates.k_stage_scale)
    g["ratio"] = g["time_s"] / g["predicted_s"]
    return g.reset_index(drop=True)


def step_table(record: GpuRecord, cluster) -> pd.DataFrame:
    """One row per measured run: ``measured_step_s``, ``predicted_step_s`` (``simulate``),
    ``rel_error`` = predicted / measured - 1, and the measured phases."""
    from paraplan.measure.compare import predict
    rows = []
    for run in record.runs:
        report = predict(run, cluster, run["dtype"])
        rows.append({"name": run["name"], "measured_step_s": run["measured_step_s"],
                     "predicted_step_s": report.step_time_s,
                     "rel_error": report.step_time_s / run["measured_step_s"] - 1.0,
                     "measured_forward_backward_s": run["phase_s"]["forward_backward_s"],
                     "measured_optimizer_s": run["phase_s"]["optimizer_s"],
                     "predicted_optimizer_s": report.time_breakdown_s["optimizer_s"]})
    return pd.DataFrame(rows)


def _predicted_parts(run: dict, rates) -> dict:
    """GEMM, attention-core and memory-bound seconds (or kernels, under counting rates) of one
    step's forward and backward passes of ``run``'s model, no recomputation."""
    from cost_models import layer_costs
    from paraplan.measure.compare import model_spec
    model = model_spec(run)
    tokens = run["micro_batch"] * run["seq_len"]
    micro_batches = run["global_batch"] // (run["micro_batch"] * run["dp"])
    attn = layer_costs.attention_block_costs(model, rates, tokens, model.seq_len, 1, False, flash_attention=True)
    mlp = layer_costs.dense_mlp_costs(model, rates, tokens, 1, False)
    head = layer_costs.lm_head_costs(model, rates, tokens, 1)
    emb = layer_costs.embedding_costs(model, rates, tokens)

    def total(d, *keys):
        return float(sum(np.sum(d[k]) for k in keys))
    gemm_keys = ("gemm_fwd_s", "gemm_dgrad_s", "gemm_wgrad_s")
    elem_keys = ("elem_fwd_s", "elem_bwd_s")
    loss = total(head, "loss_fwd_s", "loss_bwd_s")
    layers = model.num_layers
    return {"gemm": micro_batches * (layers * (total(attn, *gemm_keys) + total(mlp, *gemm_keys))
                                     + total(head, "fwd_s", "bwd_s") - loss),
            "attention": micro_batches * layers * total(attn, "core_fwd_s", "core_bwd_s"),
            "memory": micro_batches * (layers * (total(attn, *elem_keys) + total(mlp, *elem_keys)) + loss
                                       + total(emb, "fwd_s", "bwd_s"))}


def category_table(record: GpuRecord, cluster) -> pd.DataFrame:
    """Per profiled run and category: measured device seconds and launches, and the cost models'
    seconds and kernel count of the same part (``nan`` for the optimizer's, which the simulator
    prices as one memory-bound pass, not per kernel). Runs with recomputation are left out (the
    predicted parts are the passes without it)."""
    from cost_models.compute import compute_rates, kernel_counting_rates
    from hardware_specs.catalog import efficiency_for_cluster
    if record.step_kernels.empty:
        return pd.DataFrame()
    runs = {r["name"]: r for r in record.runs}
    eff = efficiency_for_cluster(cluster)
    k = record.step_kernels.assign(category=record.step_kernels["kernel"].map(kernel_category))
    k = k[k["category"] != "annotation"]
    rows = []
    for name, group in k.groupby("run", sort=False):
        run = runs.get(name)
        if run is None or run.get("recompute", "none") != "none":
            continue
        rates = compute_rates(cluster.gpu, eff, run["dtype"])
        seconds = _predicted_parts(run, rates)
        kernels = _predicted_parts(run, kernel_counting_rates(rates))
        measured = group.groupby("category").agg(device_s=("device_s", "sum"), launches=("launches", "sum"))
        for category in CATEGORIES:
            got = measured.loc[category] if category in measured.index else None
            rows.append({"run": name, "category": category,
                         "measured_s": float(got["device_s"]) if got is not None else 0.0,
                         "measured_launches": int(got["launches"]) if got is not None else 0,
                         "predicted_s": seconds.get(category, np.nan),
                         "predicted_kernels": kernels.get(category, np.nan)})
    return pd.DataFrame(rows)


def decode_table(record: GpuRecord, cluster) -> pd.DataFrame:
    """The decode GEMMs with ``predicted_s`` (``inference_layers.gemm_s`` + ``kernel_fixed_s`` at
    the serving efficiency of ``cluster``'s GPU generation, weights and activations in the row's
    dtype) and ``ratio`` = measured / predicted."""
    from cost_models.inference_layers import gemm_s, layer_rates
    from hardware_specs.catalog import load_serving_efficiency
    d = record.decode_gemms.copy()
    if d.empty:
        return d
    eff = load_serving_efficiency(cluster.gpu.generation)
    d["predicted_s"] = np.nan
    for dtype in d["dtype"].unique():
        rows = d["dtype"] == dtype
        rates = layer_rates(cluster.gpu, eff, dtype, dtype)
        x = d[rows]
        d.loc[rows, "predicted_s"] = gemm_s(x["m"], x["n"] * x["k"], rates.dense_flops_per_s, rates.dense_weight_bytes,
                                            rates, x["k"], x["n"]) + rates.kernel_fixed_s
    d["ratio"] = d["time_s"] / d["predicted_s"]
    return d
