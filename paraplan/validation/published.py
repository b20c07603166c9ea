"""Predict the measured rows of a published-runs CSV and compare (``paraplan validate published``).

A row is turned into (model, cluster, software stack, parallel config) from its own columns
only. Where a column is empty the row is skipped with the reason, except for these documented
defaults, each recorded in the row's ``assumptions``:

- architecture: the model preset the ``model`` column names (as written, or as a checkpoint's or
  Hugging Face id's name: ``meta-llama/Llama-3.1-405B``, ``Qwen3-30B-A3B-Base``,
  ``model_names.preset_named``) supplies what the columns lack
  when it has the row's layers, hidden size and heads (its vocabulary, key/value heads, whether
  its MLP is gated, and the details no column holds: dropout, norm, biases, positions,
  activation); mixture-of-experts rows and rows without an architecture take the
  whole architecture from that preset (a row stating experts or a top-k whose preset is dense is
  skipped: the preset cannot say its router or expert width). Otherwise ``ffn_hidden`` empty is 4 * hidden, ``kv_heads``
  empty is heads, and the MLP is gated when the model family is one that uses SwiGLU
  (``GATED_FAMILIES``: a fact about the named architecture, never inferred from ffn != 4h);
- ``n_gpus`` empty: dp * tp * pp * cp when dp, tp and pp are stated;
- ``dp`` empty: n_gpus / (tp * pp * cp); on a per-GPU rate row (``PER_GPU_RATE_METRICS``) whose
  n_gpus contradicts dp * tp * pp * cp, the printed degrees are kept and the GPU count is their
  product (what one GPU does depends on its layout, not on the number of replicas);
  ``vpp`` empty: 1;  ``cp`` empty: 1;
  ``micro_batch`` empty: 1;  ``zero_norm`` empty: the stack's default sharding; ``zero_norm`` 0
  from a ``zero_stage`` cell that only records a Megatron-FSDP switch off ("ddp (FSDP=0)",
  ``FSDP_OFF_ONLY``): the optimizer sharding of the release's preset with the row's layout
  (``use_distributed_optimizer``), else the stack's default distributed optimizer (ZeRO-1/2),
  since "FSDP off" does not say the optimizer states were replicated;
- software stack: the ``framework`` and ``framework_version`` columns name it
  (``hardware_specs.catalog.release_match_for``: a release no profile lists takes the newest
  profiled release before it, noted); its documented behaviour sets overlap, kernels,
  fusion, gradient-reduction dtype and whether its recipes turn sequence parallelism on with
  tp > 1 (``simulator.stack_defaults``). A row's own ``seq_parallel`` column wins. An empty
  framework runs the default stack (megatron-core), noted, except that a tp beyond the model's
  key/value heads (which that stack refuses, ``kv_head_replication``) is taken as replicated
  over tp, since the run used it (PaLM 540B: one head, tp 12), noted;
- pipeline layouts whose layers do not divide: ceil(layers / stages) a stage, less the shortfall
  taken one layer at a time from the ends inwards (last, first, second-to-last, ...;
  ``simulator.stage_layout``: 126 layers on 16 stages are 7, 8 x 14, 7), as published runs lay
  them out;
- ``recompute`` empty: full when the row's FLOP convention, or that of another row of the same
  run (``run_conventions``: a run's time row and its TFLOP/s row measure one step), counts the
  recomputed forward pass (megatron_hw_eq3), else what the stack release's own performance
  preset with the row's layout and precision recomputes, offloads and keeps of its FP8 weights
  (``stack_presets.memory_savings_of_layout``; modules the model does not price are noted),
  else, on a stack without presets, what its published recipes recompute
  (``TrainingBehaviour.recipe_recompute``: MaxText's DGX Cloud recipes' remat policy), else none;
- ``vocab`` empty: the vocabulary of the preset the ``model`` column names, when it has the row's
  shape; for another shape of that model (a candidate or proxy) only when the row's stated
  ``params_b`` confirms it (``row_model._check_family_vocab``);
- ``dtype_norm`` empty: bf16 (fp16 on V100, which has no bf16) on GPUs whose only training
  tensor-core rate is 16-bit; on FP8-capable GPUs (Hopper, Blackwell), since bf16 and fp8 GEMMs
  differ 2x in rate, the precision of the stack release's own performance preset with the row's
  layout when it runs that layout in one precision only, else the row is skipped
  (``row_precision``).

The cluster is the system the row's ``gpu`` text names when the catalog has it (``NAMED_SYSTEMS``:
the validation README has that column say what is known of the hardware and its network, e.g.
"A100-SXM-80GB (Jean Zay)"), else the usual system of the row's GPU kind (``SYSTEM_FOR_GPU``; a
kind with no system preset gets a generic node of its generation, ``catalog.generic_cluster``),
with the row's ``gpus_per_node`` and ``scaleout_gbps_per_gpu`` when it states them. One
hardware profile per GPU kind, one efficiency model per generation, nothing keyed to a row or
source.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from hardware_specs.catalog import DEFAULT_TRAINING_STACK, generic_cluster, load_cluster, load_gpu, load_stack, release_match_for
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.errors import InputError, not_a_file
from hardware_specs.gpu_spec import KNOWN_DTYPES
from hardware_specs.placement import placed_cluster
from hardware_specs.stack_presets import Layout, memory_savings_of_layout
from model_specs.model_spec import ModelSpec
from paraplan.validation.csv_structure import (SHORT_ROW_COLUMN, check_csv_structure, header_names, id_text,
                                               mark_short_rows, strip_header)
from paraplan.validation.flops_conventions import CONVENTIONS
from paraplan.validation.row_model import (NUMERIC_COLUMNS, Skip, _check_family_vocab, _directly_named_preset,
                                           _experts, _int, _measured, _named_preset_or_none, _num, _preset_for,
                                           _same_architecture_preset, _says_without_mtp, _stated_params, _str)
from paraplan.validation.row_precision import unstated_dtype
from simulator.ep_overlap_rules import check_ep_comm_overlap
from simulator.parallel_config import ParallelConfig
from simulator.stack_defaults import (stack_config_fields, stack_cp_kind, stack_expert_tp, stack_sequence_parallel,
                                      stack_zero_stage)
from simulator.stage_layout import chunk_layers
from simulator.validate_config import check_config, placed_and_checked

#: the usual system of each GPU kind (validation README: "Cluster presets should carry the
#: usual fabric of each system").
SYSTEM_FOR_GPU = {
    "v100-sxm-32gb": "dgx2-v100",
    "a100-sxm-40gb": "dgx-a100-40gb",
    "a100-sxm-80gb": "dgx-a100-80gb",
    "h100-sxm-80gb": "dgx-h100",
    "h200-sxm-141gb": "hgx-h200",
    "h800-sxm-80gb": "h800-node",
    "b200": "dgx-b200",
    "b300": "dgx-b300",
    "gb200": "gb200-nvl72",
    "gb300": "gb300-nvl72",
    "mi250x": "frontier-mi250x",
    "mi300x": "mi300x-node",
    "tpu-v3": "tpu-v3-pod",
    "tpu-v4": "tpu-v4-pod",
}

#: other spellings of the precisions a row's ``dtype_norm`` names (``gpu_spec.KNOWN_DTYPES``): PyTorch's
#: dtype names, llm-foundry's ``precision`` values
DTYPE_SPELLINGS = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
                   "amp_bf16": "bf16", "amp_fp16": "fp16", "amp_fp8": "fp8"}

#: named systems with a cluster preset of their own, as a row's ``gpu`` text names them (lower
#: case) -> the preset; its fabric differs from the usual system of the GPU kind
NAMED_SYSTEMS = {
    "jean zay": "jean-zay-a100",     # BLOOM (arXiv 2211.05100) 3.4.1: 4 x 100 Gb/s Omni-Path per 8-GPU node
}


def named_system(gpu_text: str, gpu: str) -> str | None:
    """The cluster preset of the system ``gpu_text`` names (``NAMED_SYSTEMS``), when that
    preset's GPU is the row's canonical kind ``gpu``; else None."""
    text = str(gpu_text or "").lower()
    for name, preset in NAMED_SYSTEMS.items():
        if name in text and load_cluster(preset).gpu.name == gpu:
            return preset
    return None


REQUIRED_COLUMNS = ("id", "run_id", "gpu_profile", "dtype_norm", "zero_norm", "flops_convention",
                    "model", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len",
                    "moe_experts", "moe_topk", "n_gpus", "tp", "pp", "dp", "cp", "ep", "vpp",
                    "micro_batch", "global_batch", "recompute", "seq_parallel", "measured_metric",
                    "measured_value")

#: metrics that are a rate per GPU (what one GPU does; the GPU count only scales the rest)
PER_GPU_RATE_METRICS = ("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "hfu")
#: metrics that are a duration (larger is slower); every other training metric is a rate
TIME_METRICS = ("iter_time_s", "layer_fwd_bwd_time_ms")
TRAINING_METRICS = ("iter_time_s", "tokens_per_s_per_gpu", "tokens_per_s", "tflops_per_gpu", "mfu",
                    "hfu", "layer_fwd_bwd_time_ms")


#: model families whose MLP is gated (SwiGLU / GeGLU), from their papers and public configs:
#: PaLM (Chowdhery et al. 2022, section 2: SwiGLU, ffn = 4h), LLaMA and Llama 2/3 (Touvron et al.
#: 2023), Mistral / Mixtral, Qwen, DeepSeek, Grok-1, Gemma. GPT, OPT, BLOOM, MPT, Gopher, MT-NLG
#: and Nemotron-4 (squared ReLU) are not gated.
GATED_FAMILIES = ("palm", "llama", "mistral", "mixtral", "qwen", "deepseek", "grok", "gemma")
#: model families built with the parallel attention + MLP block (``ModelSpec.parallel_attention_mlp``)
#: and one shared norm, for rows no preset describes: PaLM (Chowdhery et al. 2022, section 2
#: "Parallel Layers": y = x + MLP(LayerNorm(x)) + Attention(LayerNorm(x))), GPT-J (Hugging Face
#: GPTJBlock: one ``ln_1`` feeds both). GPT-NeoX-20B is a preset (two norms).
PARALLEL_SHARED_NORM_FAMILIES = ("palm", "gpt-j")
#: a ``zero_stage`` cell that records only a Megatron-FSDP switch set off ("ddp (FSDP=0)"): the
#: source's table says nothing about the optimizer's sharding
FSDP_OFF_ONLY = re.compile(r"\bfsdp\s*=\s*0\b", re.IGNORECASE)
#: the stack a row with an empty ``framework`` column runs (noted in its assumptions)
DEFAULT_STACK = DEFAULT_TRAINING_STACK
#: a row whose notes carry its source's word that the number is a known performance regression
#: (a footnote such as Megatron-Bridge's 26.06.01 "Performance regression in GPT-OSS 120B
#: pre-training is a known issue", cudnn-frontend issue 256: a grouped-GEMM kernel 10x slower in
#: one library release) measures a bug the source expects fixed, not the stack's behaviour
KNOWN_REGRESSION_NOTE = re.compile(r"performance regression\b.*\bknown issue", re.IGNORECASE)


@dataclass
class RowInputs:
    model: ModelSpec
    cluster_name: str
    config: ParallelConfig
    metric: str
    convention: str
    assumptions: list[str] = field(default_factory=list)
    cluster: ClusterSpec | None = None
    stack: str = DEFAULT_STACK



def _reference_file() -> str:
    """The file whose columns a CSV must have: the one the tool reads without PATH (the shared
    copy, else the bundled one), not a fixed path that may not exist."""
    from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
    return str(validation_file(PUBLISHED_RUNS))

def _text_dtypes(p: Path) -> dict[str, type]:
    """``str`` for every column outside ``NUMERIC_COLUMNS``: a version, an id or a stated size is
    text as written. Left to pandas, a ``framework_version`` column of 26.10 and 0.20 became the
    floats 26.1 and 0.2 whenever no row of the file held text there (so a row's stack depended on
    the other rows); ``params_b`` 6.70 lost the digit that states its precision."""
    return {c: str for c in header_names(p) if c.strip() not in NUMERIC_COLUMNS}


def read_runs(path: str | Path) -> pd.DataFrame:
    """Read a published-runs CSV; a missing file or column is an ``InputError``."""
    p = Path(path)
    if not p.is_file():
        raise InputError("path", not_a_file(path), "check the path, or omit PATH for the bundled runs")
    short = check_csv_structure(p, REQUIRED_COLUMNS)
    try:
        df = mark_short_rows(strip_header(pd.read_csv(p, dtype=_text_dtypes(p))), short)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise InputError("path", f"malformed CSV {path}: {str(exc).splitlines()[0]}",
                         f"save the file as UTF-8 CSV with the columns of {_reference_file()}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise InputError("path", f"{path} lacks column(s) {', '.join(missing)}",
                         f"use the columns of {_reference_file()}")
    return df


def _enum(row, col) -> str:
    """A column naming one of a fixed set (metric, FLOP convention, GPU profile, precision), in
    lower case, as the names are written: 'ITER_TIME_S' and 'FP16' were skipped as unknown or as
    a precision the GPU lacks, while framework and recompute were read in any case."""
    return _str(row, col).lower()


def row_inputs(row, run_conventions=frozenset()) -> RowInputs:
    """Model, cluster and config of one row; raises ``Skip`` with the reason if not predictable.

    ``run_conventions``: the FLOP conventions of all rows of the row's run (``run_conventions``),
    which say whether the run recomputed activations when its own row does not."""
    if _str(row, SHORT_ROW_COLUMN):       # its lost columns would run on defaults
        raise Skip(_str(row, SHORT_ROW_COLUMN) + " (a damaged row)")
    metric = _enum(row, "measured_metric")
    if KNOWN_REGRESSION_NOTE.search(_str(row, "notes")):
        raise Skip("the source marks this measurement as a known performance regression (see notes): "
                   "it measures a bug, not the stack")
    if metric not in TRAINING_METRICS:
        raise Skip(f"metric '{metric}' is not a training-step metric" if metric else "metric empty: not a training-step metric")
    conv = _enum(row, "flops_convention")
    if metric in ("tflops_per_gpu", "mfu", "hfu") and conv not in CONVENTIONS:
        # an empty cell is not the convention 'none' a reader could look up
        raise Skip(f"FLOP convention '{conv}' cannot be converted" if conv else
                   f"flops_convention empty: {metric} cannot be converted without the FLOP count it was "
                   f"computed with (one of {', '.join(CONVENTIONS)})")
    conv = conv or "none"
    gpu = _enum(row, "gpu_profile")
    if not gpu:
        raise Skip("gpu_profile empty (GPU kind not known)")
    try:
        load_gpu(gpu)
    except InputError as exc:
        raise Skip(f"no GPU profile for '{gpu}'" + (f" ({exc.fix})" if exc.fix else "")) from None
    assumptions: list[str] = []
    preset = None
    if _str(row, "moe_experts") or _str(row, "moe_topk") or _int(row, "layers") is None:
        try:
            preset = _preset_for(row)
        except Skip:
            if _int(row, "layers") is None:
                raise
            raise Skip("a mixture-of-experts row needs its model's preset (expert width, shared experts and leading "
                       f"dense layers are not columns of the file), and no model preset is named "
                       f"'{_str(row, 'model').split('(')[0].strip()}'") from None
        assumptions.append(f"architecture from preset {preset.name}")
    needed = {"layers": _int(row, "layers"), "hidden": _int(row, "hidden"), "heads": _int(row, "heads"),
              "seq_len": _int(row, "seq_len"), "vocab": _int(row, "vocab"), "n_gpus": _int(row, "n_gpus"),
              "tp": _int(row, "tp"), "pp": _int(row, "pp")}
    if preset is not None:
        for key, value in (("layers", preset.num_layers), ("hidden", preset.hidden_size),
                           ("heads", preset.num_heads), ("vocab", preset.vocab_size),
                           ("seq_len", preset.seq_len)):
            if needed[key] is None:
                needed[key] = value
    kin = None       # a differently shaped model of the family the row names, whose tokenizer it may share
    if preset is None and needed["vocab"] is None and needed["layers"] is not None:
        vocab_preset = _same_architecture_preset(row, needed)
        if vocab_preset is not None:
            needed["vocab"] = vocab_preset.vocab_size
            assumptions.append(f"vocab={vocab_preset.vocab_size} from preset {vocab_preset.name} "
                               "(same layers, hidden, heads)")
        elif _stated_params(row) is not None:
            kin = _named_preset_or_none(row)
            if kin is not None and kin.moe is None:
                needed["vocab"] = kin.vocab_size      # provisional: checked against params_b below
            else:
                kin = None
    if metric != "layer_fwd_bwd_time_ms":
        needed["global_batch"] = _int(row, "global_batch")
    if needed["n_gpus"] is None and not _str(row, "n_gpus") and None not in (_int(row, "dp"), needed["tp"], needed["pp"]):
        # the layout states every degree, so it states the GPU count
        needed["n_gpus"] = _int(row, "dp") * needed["tp"] * needed["pp"] * (_int(row, "cp") or 1)
        assumptions.append(f"n_gpus={needed['n_gpus']} (dp*tp*pp*cp; the cell is empty)")
    empty = [k for k, v in needed.items() if v is None]
    if empty:
        raise Skip("needed field(s) empty: " + ", ".join(empty))
    h = needed["hidden"]
    if preset is not None:
        # the row's own columns win; the preset fills what the columns cannot say (a GQA preset's
        # key/value heads stay unless the row states its own heads differently)
        same_heads = _int(row, "heads") is None or _int(row, "heads") == preset.num_heads
        kv = _int(row, "kv_heads") or (preset.num_kv_heads if same_heads else needed["heads"])
        moe = preset.moe
        if moe is None:
            _dense_preset_states_no_experts(row, preset)
        else:
            # the preset's leading dense layers, at most all but one of the row's (a ModelSpec
            # refuses a MoE block with no MoE layer, so this is set together with num_layers)
            first_dense = min(moe.first_dense_layers, max(0, needed["layers"] - 1))
            moe = replace(moe, num_experts=_experts(row) or moe.num_experts,
                          top_k=_int(row, "moe_topk") or moe.top_k, first_dense_layers=first_dense)
        model = replace(preset, num_layers=needed["layers"], hidden_size=needed["hidden"],
                        num_heads=needed["heads"], num_kv_heads=kv, seq_len=needed["seq_len"],
                        vocab_size=needed["vocab"], moe=moe,
                        head_dim=preset.head_dim if (needed["hidden"], needed["heads"])
                        == (preset.hidden_size, preset.num_heads) else 0)
        if model.mtp_layers and _says_without_mtp(row):
            model = replace(model, mtp_layers=0)
            assumptions.append("mtp_layers=0 (the run is labelled without MTP)")
        elif model.mtp_layers:
            assumptions.append(f"mtp_layers={model.mtp_layers} from preset {preset.name}")
        try:
            model = replace(model)    # re-validate
        except InputError as exc:
            raise Skip(f"architecture invalid: {exc}") from None
        return _config_inputs(row, model, needed, metric, conv, gpu, assumptions, run_conventions)
    ffn = _str(row, "ffn_hidden")
    if ffn and _num(row, "ffn_hidden") is None:
        raise Skip(f"ffn_hidden '{ffn}' is not a number")
    ffn_size = _int(row, "ffn_hidden")
    shape_preset = _same_architecture_preset(row, needed)
    if ffn_size is None:
        ffn_size = shape_preset.ffn_hidden_size if shape_preset is not None else 4 * h
        assumptions.append(f"ffn_hidden={ffn_size}" + (f" from preset {shape_preset.name}" if shape_preset else "=4h"))
    kv = _int(row, "kv_heads")
    if kv is None:
        kv = shape_preset.num_kv_heads if shape_preset is not None else needed["heads"]
        assumptions.append(f"kv_heads={kv}" + (f" from preset {shape_preset.name}" if shape_preset else "=heads"))
    if shape_preset is not None:
        gated = shape_preset.gated_mlp
    else:
        family = _str(row, "model").lower()
        gated = any(f in family for f in GATED_FAMILIES)
        assumptions.append(f"gated_mlp={gated} (model family)")
    tokenizer_source = shape_preset or kin
    name = _str(row, "model") or _str(row, "run_id")
    if shape_preset is not None and _directly_named_preset(row) is None:
        # named as a checkpoint or Hugging Face id of the preset (meta-llama/Llama-3.1-405B): the
        # preset's name, which the stacks' recipes and presets list
        name = shape_preset.name
    try:
        if shape_preset is not None:
            # the model the row names, at the row's own sizes: what its columns cannot say
            # (dropout, norm, biases, positions, activation) is that model's, not a generic default
            model = replace(shape_preset, name=name, num_layers=needed["layers"], hidden_size=h,
                            num_heads=needed["heads"], num_kv_heads=kv, ffn_hidden_size=ffn_size,
                            vocab_size=needed["vocab"], seq_len=needed["seq_len"])
            assumptions.append(f"architecture details (dropout, norm, biases, positions) from preset "
                               f"{shape_preset.name} (same layers, hidden, heads)")
        else:
            model = ModelSpec(name=name, num_layers=needed["layers"],
                              hidden_size=h, num_heads=needed["heads"], num_kv_heads=kv,
                              ffn_hidden_size=ffn_size, vocab_size=needed["vocab"], seq_len=needed["seq_len"],
                              gated_mlp=gated,
                              tied_embeddings=tokenizer_source.tied_embeddings if tokenizer_source is not None else False)
            if any(f in _str(row, "model").lower() for f in PARALLEL_SHARED_NORM_FAMILIES):
                model = replace(model, parallel_attention_mlp=True, parallel_shared_norm=True)
                assumptions.append("parallel attention + MLP block, one shared norm (model family)")
    except InputError as exc:
        raise Skip(f"architecture invalid: {exc}") from None
    if kin is not None:
        assumptions.append(_check_family_vocab(row, model, kin))
    return _config_inputs(row, model, needed, metric, conv, gpu, assumptions, run_conventions)


def _dense_preset_states_no_experts(row, preset: ModelSpec) -> None:
    """``Skip`` when a row whose ``model`` names a dense preset states experts or a top-k: the
    preset cannot say the row's router, expert width or shared experts, and predicting the dense
    model ignored the row's own columns (KOR22's GPT-22B with moe_experts 8 ran dense)."""
    experts, top_k = _experts(row), _int(row, "moe_topk")
    if experts is not None:
        raise Skip(f"row states {experts} experts; preset {preset.name} has none")
    if top_k is not None:
        raise Skip(f"row states moe_topk {top_k}; preset {preset.name} has no experts")


def row_cluster(gpu: str, gpus_per_node=None, scaleout_gbps_per_gpu=None, system: str | None = None) -> ClusterSpec:
    """The cluster a row ran on: the named ``system`` preset (``named_system``), else the usual
    system of its GPU kind (``SYSTEM_FOR_GPU``, else a generic node of its generation), with the
    row's GPUs per node (NVLink domain) and scale-out bandwidth per GPU (Gb/s, one direction)
    where it states them."""
    return _row_cluster(gpu, gpus_per_node, scaleout_gbps_per_gpu, system)


@lru_cache(maxsize=256)
def _row_cluster(gpu: str, gpus_per_node, scaleout_gbps_per_gpu, system) -> ClusterSpec:
    """``row_cluster``, memoised on its (hashable, immutable) arguments: a published file names a
    few dozen distinct clusters over its thousand rows (no module-level dict that only grows)."""
    if system is not None:
        base = load_cluster(system)
    else:
        base = load_cluster(SYSTEM_FOR_GPU[gpu]) if gpu in SYSTEM_FOR_GPU else generic_cluster(gpu)
    cluster = base
    if gpus_per_node is not None or scaleout_gbps_per_gpu is not None:
        out = base.scaleout
        if scaleout_gbps_per_gpu is not None:
            # the row's own links: a communicator bandwidth measured on the preset's goes
            out = replace(out, bw_bytes_per_s=scaleout_gbps_per_gpu * 1e9 / 8, communicator_bus_bw_bytes_per_s=None)
        per_node = int(gpus_per_node) if gpus_per_node is not None else base.gpus_per_node
        cluster = base.with_domain_size(per_node, name=f"{base.name}[{per_node}/node,{out.bw_bytes_per_s * 8 / 1e9:g}Gb/s]",
                                        scaleout=out)
    return cluster


def _row_stack(row, assumptions):
    """The software stack the row's framework columns name (``release_match_for``; a release no
    profile lists is noted in the row's assumptions)."""
    framework, version = _str(row, "framework"), _str(row, "framework_version")
    if not framework:
        assumptions.append(f"stack={DEFAULT_STACK} (framework not stated)")
        return load_stack(DEFAULT_STACK)
    try:
        match = release_match_for(framework, version or None)
    except InputError as exc:
        raise Skip(f"software stack: {exc}") from None
    stack = match.stack
    if match.note:
        assumptions.append(f"stack={stack.name} ({match.note})")
    elif not version:
        assumptions.append(f"stack={stack.name} ({framework} version not stated)")
    return stack


def run_conventions(records) -> dict:
    """{run_id: frozenset of the FLOP conventions its rows state}."""
    out: dict = {}
    for row in records:
        run = _str(row, "run_id")
        if run:
            out.setdefault(run, set()).add(_enum(row, "flops_convention") or "none")
    return {run: frozenset(c) for run, c in out.items()}


def _config_inputs(row, model, needed, metric, conv, gpu, assumptions, run_conventions=frozenset()) -> RowInputs:
    """The parallel configuration part of ``row_inputs``."""
    tp, pp, n = needed["tp"], needed["pp"], needed["n_gpus"]
    cp = _int(row, "cp") or 1
    dp = _int(row, "dp")
    if dp is None:
        if n % (tp * pp * cp):
            raise Skip("dp empty and n_gpus not divisible by tp*pp*cp")
        dp = n // (tp * pp * cp)
        assumptions.append("dp=n/(tp*pp*cp)")
    if metric == "layer_fwd_bwd_time_ms":
        dp = 1
        n = tp * pp * cp
    elif dp * tp * pp * cp != n:
        ep_col = _int(row, "ep") or 1
        if model.moe is not None and dp * tp * pp * cp * ep_col == n:
            # older MoE layouts carve EP out of data parallelism: the row's dp is the
            # expert-data-parallel degree, the full data-parallel degree is dp * ep
            dp = dp * ep_col
            assumptions.append("dp column = expert-data-parallel degree (dp = dp * ep)")
        elif metric in PER_GPU_RATE_METRICS:
            # what one GPU does depends on its own layout (tp, pp, cp, micro-batches = global
            # batch / (dp * micro_batch)), not on how many GPUs the source says ran it: the
            # printed degrees are kept and the GPU count is their product
            assumptions.append(f"n_gpus {n} contradicts dp*tp*pp*cp = {dp * tp * pp * cp}: the per-GPU rate of "
                               "the printed layout is predicted on dp*tp*pp*cp GPUs")
            n = dp * tp * pp * cp
        else:
            raise Skip(f"dp*tp*pp*cp = {dp * tp * pp * cp} != n_gpus {n}")
    stack = _row_stack(row, assumptions)
    mbs = _int(row, "micro_batch")
    if mbs is None:
        mbs = 1
        assumptions.append("micro_batch=1")
    gbs = needed.get("global_batch") or mbs * dp
    vpp = _int(row, "vpp") or 1
    ep = _int(row, "ep") or 1
    system = named_system(_str(row, "gpu"), gpu)
    try:    # a row's own scale-out bandwidth of 0, -4 or 1e-30 Gb/s: this row is skipped, not the run
        cluster = row_cluster(gpu, _int(row, "gpus_per_node"), _num(row, "scaleout_gbps_per_gpu"), system)
    except InputError as exc:
        raise Skip(f"cluster invalid (gpus_per_node / scaleout_gbps_per_gpu): {exc}") from None
    if system is not None:
        assumptions.append(f"cluster={system} (the system the gpu column names)")
    placed = placed_cluster(cluster, n)
    if _int(row, "gpus_per_node") is None and placed.gpus_per_node != cluster.gpus_per_node:
        # a multi-rack GB200 / GB300 job placed as Megatron-Bridge's launcher asks Slurm for it
        # (NVLink racks of several trays), a TPU job larger than a pod in equal ICI slices
        per_domain = placed.gpus_per_node
        cluster = row_cluster(gpu, per_domain, _num(row, "scaleout_gbps_per_gpu"), system)
        # the trays it holds have their share of the rack's host memory (placement.segment_host)
        cluster = replace(cluster, host=placed.host)
        assumptions.append(f"{per_domain} chips per ICI slice ({n // per_domain} slices over the data-centre "
                           "network, hardware_specs.placement)" if cluster.scaleup.kind == "ici" else
                           f"{per_domain} GPUs per {cluster.scaleup.kind} domain (Slurm --segment of "
                           f"{per_domain // cluster.launch_gpus_per_host} hosts, hardware_specs.placement)")
    stated_zero = _int(row, "zero_norm", minimum=0)
    dtype = DTYPE_SPELLINGS.get(_enum(row, "dtype_norm"), _enum(row, "dtype_norm"))
    if dtype and dtype not in KNOWN_DTYPES:
        raise Skip(f"dtype_norm '{_str(row, 'dtype_norm')}' is not a precision (one of {', '.join(KNOWN_DTYPES)})")
    if not dtype:
        layout = Layout(n_gpus=n, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, micro_batch=mbs, global_batch=gbs,
                        fsdp=stated_zero == 3)
        dtype, why = unstated_dtype(stack, gpu, "fp8" in cluster.gpu.peak_flops_per_s, model.name, layout,
                                    fsdp_stated=stated_zero is not None)
        if dtype is None:
            raise Skip(why)
        assumptions.append(why)
    try:    # a precision the row's GPU has no tensor cores for (nvfp4 on an A100): this row is skipped
        cluster.gpu.peak_flops(dtype)
    except InputError as exc:
        raise Skip(f"dtype_norm {dtype}: {exc.message}") from None
    zero = stated_zero
    # what the release's own preset with the row's layout and precision shards, recomputes and
    # offloads (``stack_presets.memory_savings_of_layout``: a fact of the release, from its files)
    layout = Layout(n_gpus=n, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, micro_batch=mbs, global_batch=gbs,
                    fsdp=stated_zero == 3)
    savings, presets = memory_savings_of_layout(stack, model.name, gpu, layout, dtype,
                                                container=_str(row, "framework_version") or None)
    if zero == 0 and FSDP_OFF_ONLY.search(_str(row, "zero_stage")):
        # the source's table has a Megatron-FSDP on/off column and nothing on the optimizer's
        # sharding: "FSDP=0" rules out ZeRO-3, not the distributed optimizer its presets run
        if savings is not None:
            zero = 1 if savings.distributed_optimizer and dp * cp > 1 else 0
            why = f"its preset with this layout: use_distributed_optimizer={savings.distributed_optimizer}"
        else:
            # the release's own default, not a recipe's Megatron-FSDP (which the row rules out)
            default = stack.training.default_zero_stage if stack.training is not None else 0
            zero = default if dp * cp > 1 and default in (1, 2) else 0
            why = f"{stack.name}'s default"
        if zero:
            assumptions.append(f"zero={zero} ({why}; the row's zero_stage '{_str(row, 'zero_stage')}' says only "
                               "that Megatron-FSDP was off)")
    if zero is None:
        zero = stack_zero_stage(stack, dp, cp, model.name, gpu, dtype)
        assumptions.append(f"zero={zero} ({stack.name}'s default)")
    rc = _str(row, "recompute").split("(")[0].strip().lower()
    recipe_savings: dict = {}
    if not rc:
        if conv == "megatron_hw_eq3":
            rc = "full"
            assumptions.append("recompute=full")
        elif "megatron_hw_eq3" in run_conventions:
            rc = "full"
            assumptions.append("recompute=full (the run's TFLOP/s row counts the recomputed forward pass)")
        else:
            rc, recipe_savings = _recipe_memory_savings(stack, savings, presets, assumptions)
    if rc not in ("none", "selective", "full"):
        raise Skip(f"recompute '{rc}' unknown")
    sp_cell = _str(row, "seq_parallel").lower()
    if sp_cell and sp_cell not in ("y", "n"):   # 'perhaps' was read as off
        raise Skip(f"seq_parallel '{_str(row, 'seq_parallel')}' is not y or n")
    sp = sp_cell == "y"
    if not sp_cell and stack_sequence_parallel(stack, tp, model.name, gpu, dtype, model.moe is not None):
        sp = True
        assumptions.append(f"sequence_parallel ({stack.name} recipes turn it on with tp > 1)"
                           if stack_sequence_parallel(stack, tp, model.name, gpu, dtype) else
                           f"sequence_parallel ({stack.name} runs MoE layers with tp > 1 only with it)")
    if gbs % (dp * mbs):
        raise Skip(f"global_batch {gbs} not divisible by dp*micro_batch {dp * mbs}")
    if model.moe is None and ep > 1:
        raise Skip("ep > 1 for a model without experts")
    software = {**stack_config_fields(stack, dtype, model.name, gpu), **recipe_savings}
    g = model.num_kv_heads
    if not _str(row, "framework") and not software["kv_head_replication"] and tp > g and tp % g == 0:
        # the run used this layout on a framework the source does not name, so that framework
        # replicated the heads; the default stack would refuse it (check_config)
        software["kv_head_replication"] = True
        assumptions.append(f"kv heads replicated over tp {tp} ({g} key/value head{'s' if g > 1 else ''}; framework not "
                           f"stated; the default stack {stack.name} would refuse)")
    # the context-parallel flavour the row's stack runs, as `paraplan simulate --stack` prices it
    # (torchtitan all-gathers K/V, Megatron-Core's --cp-comm-type defaults to the p2p ring)
    cp_kind = stack_cp_kind(stack, model.name, gpu, dtype) if cp > 1 else "ring"
    if cp_kind != "ring":
        assumptions.append(f"cp_kind={cp_kind} ({stack.name}'s context_parallel_kind)")
    # the expert tensor-parallel degree the stack runs when the row states none (Megatron-Core
    # <= 0.9 splits the experts over the whole TP group: TrainingBehaviour.expert_tp_default)
    etp = stack_expert_tp(stack, tp, model.moe is not None, model.name, gpu, dtype, ep)
    if etp > 1:
        assumptions.append(f"etp={etp} ({stack.name}'s expert_tp_default: the experts split over the tp group)")
    try:
        config = ParallelConfig(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, micro_batch=mbs, global_batch=gbs,
                                zero_stage=zero, recompute=rc, sequence_parallel=sp or (model.moe is not None and tp > 1),
                                dtype=dtype, uneven_layers=True, cp_kind=cp_kind, **software)
        recipe = [r.source for r in stack.recipes_for(model.name, gpu, dtype)]
        if recipe:
            assumptions.append(f"{stack.name} recipe for this model: " + "; ".join(recipe))
    except InputError as exc:
        raise Skip(f"configuration invalid: {exc}") from None
    if config.ep_comm_overlap:
        try:
            check_ep_comm_overlap(config, model.mtp_layers)
        except InputError as exc:
            # Megatron-Core asserts on this combination, so the run cannot have had the overlap
            # its stack's recipes turn on
            config = replace(config, ep_comm_overlap=False)
            assumptions.append(f"ep_comm_overlap off (on in {stack.name}'s recipes, but {exc.message})")
    try:
        check_config(model, config)
    except InputError as exc:
        raise Skip(f"configuration invalid: {exc}") from None
    try:    # the groups must tile the cluster's scale-up domains, as simulate and the planner require
        placed_and_checked(cluster, config)
    except InputError as exc:
        raise Skip(f"layout does not fit the cluster: {exc}") from None
    uneven = uneven_split_text(model, config)
    if uneven:
        assumptions.append(uneven)
    return RowInputs(model, cluster.name, config, metric, conv, assumptions, cluster=cluster, stack=stack.name)


def _runs(counts: tuple[int, ...]) -> str:
    """``7, 8 x 14, 7`` for (7, 8, ..., 8, 7): equal neighbours as ``value x count``."""
    out, i = [], 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        out.append(f"{counts[i]} x {j - i}" if j - i > 1 else str(counts[i]))
        i = j
    return ", ".join(out)


def uneven_split_text(model, config) -> str:
    """The assumption a row makes when its decoder layers do not split evenly over its model
    chunks and the row states no split (rows run with ``uneven_layers``: every chunk
    ``ceil(layers / chunks)`` with the shortfall taken from the ends inwards,
    ``simulator.stage_layout.chunk_layers``); "" where the chunks are equal or the row gives
    its own first / last stage layers or layout."""
    if config.pp == 1 or config.first_stage_layers or config.last_stage_layers or config.pipeline_layout:
        return ""
    decoder, _ = chunk_layers(model.num_layers, config.pp, config.vpp, model.mtp_layers,
                              schedule=config.schedule.value)
    if len(set(decoder)) == 1:
        return ""
    return (f"uneven pipeline split: {model.num_layers} layers on {len(decoder)} model chunks as {_runs(decoder)} "
            "(the ends lighter, simulator.stage_layout; the row states no split)")


#: Megatron ``--recompute-modules`` names -> paraplan's (``cost_models.memory.RECOMPUTE_MODULES``);
#: ``moe_act`` is the experts' activation, which paraplan's ``mlp_act`` covers with the dense one
RECIPE_RECOMPUTE_MODULES = {"core_attn": "core_attn", "layernorm": "layernorm", "moe_act": "mlp_act",
                            "mla_up_proj": "mla_up_proj", "mlp": "mlp", "moe": "moe"}


def _recipe_memory_savings(stack, savings, presets, assumptions) -> tuple[str, dict]:
    """(recompute, ParallelConfig keywords) for a row that states no recomputation: what the stack
    release's own performance preset with the row's layout and precision recomputes and offloads
    (``savings``, ``presets``: ``stack_presets.memory_savings_of_layout``); for a stack without
    presets, what its published recipes recompute (``TrainingBehaviour.recipe_recompute``, e.g.
    MaxText's save-the-projections remat policy); else none. Modules the model does not price
    (Megatron's ``shared_experts``, ``mhc``) are noted."""
    kw: dict = {}
    if savings is not None and savings.fp8_param_gather is not None:
        kw["fp8_param_gather"] = savings.fp8_param_gather
    recipe = stack.training.recipe_recompute if stack.training is not None else "none"
    if savings is None and recipe != "none":
        # a stack without per-layout presets whose published recipes all recompute one way
        assumptions.append(f"recompute={recipe} ({stack.name}'s performance recipes"
                           + (f": {stack.training.selective_checkpoint}" if recipe == "selective" else "") + ")")
        return recipe, kw
    if savings is None or (not savings.recompute and not savings.offload_layers):
        assumptions.append("recompute=none" + (f" (as {stack.name}'s preset with this layout)" if savings else ""))
        return "none", kw
    rc = savings.recompute or "none"
    said = []
    if rc == "full":
        kw.update(recompute_method=savings.recompute_method or "block",
                  recompute_num_layers=savings.recompute_num_layers)
        said.append(f"recompute=full ({savings.recompute_method or 'block'}, "
                    f"{savings.recompute_num_layers or 'all'} layers)")
    elif rc == "selective":
        named = savings.recompute_modules or ("core_attn",)     # Megatron's default module list
        ours = tuple(sorted({RECIPE_RECOMPUTE_MODULES[m] for m in named if m in RECIPE_RECOMPUTE_MODULES}))
        missing = [m for m in named if m not in RECIPE_RECOMPUTE_MODULES]
        if ours:
            kw["recompute_modules"] = ours
        else:
            rc = "none"
        said.append(f"recompute modules {'|'.join(named)}"
                    + (f" ({', '.join(missing)} not modelled: memory over, time under-estimated)" if missing else ""))
    if savings.offload_layers:
        kw["offload_activation_layers"] = savings.offload_layers
        said.append(f"activations of {savings.offload_layers} layers offloaded to the host")
    assumptions.append("; ".join(said) + f" ({stack.name}'s own preset with this layout: {presets[0].source})")
    return rc, kw


def metric_from_prediction(inputs: RowInputs, report) -> float:
    """Convert a simulated step into the row's metric with the row's FLOP convention."""
    m, cfg, metric = inputs.model, inputs.config, inputs.metric
    t = report.step_time_s
    n = cfg.n_gpus
    if metric == "iter_time_s":
        return t
    if metric == "layer_fwd_bwd_time_ms":
        return 1e3 * (report.layer_fwd_s + report.layer_bwd_s + report.layer_recompute_s)
    if metric == "tokens_per_s":
        return cfg.global_batch * m.seq_len / t
    if metric == "tokens_per_s_per_gpu":
        return cfg.global_batch * m.seq_len / t / n
    flops = CONVENTIONS[inputs.convention](m, cfg.global_batch)
    per_gpu = flops / t / n
    if metric == "tflops_per_gpu":
        return per_gpu / 1e12
    peak = inputs.cluster.gpu.peak_flops(cfg.dtype)
    return 100.0 * per_gpu / peak          # mfu / hfu are in percent


def speed_error(metric: str, predicted, measured):
    """Predicted speed over measured speed, minus 1: positive when the model predicts the run
    faster than it ran, whatever the metric. ``rel_error`` (predicted / measured - 1) has the
    opposite sign for a duration (``TIME_METRICS``) than for a rate, so averaging it over a
    run's time row and its rate row cancels; for a duration this is measured / predicted - 1."""
    if metric in TIME_METRICS:
        return measured / predicted - 1.0
    return predicted / measured - 1.0


#: what a cross-validated prediction that rests on no fit of its own generation says of itself
#: whether a cross-validated prediction of each basis rests on a fitted efficiency model
#: (``EfficiencyModel.is_fitted`` of the model ``fit._held_out_prediction`` builds): a fit, or a
#: neighbour's fit on the generation's datasheet (its fitted factors kept); "none" is the middle
#: of every range (no fitted factors) or the generation's own unfitted prior
CV_BASIS_FITTED = {"fit": True, "neighbour": True, "none": False}
CV_BASIS_NOTES = {
    "neighbour": "cross-validated by the neighbouring GPU generation's fit without this source "
                 "(too few rows of its own generation from other sources)",
    "none": "cross-validated by no fit: no other source of this GPU generation or its neighbour "
            "(the middle of each factor's range, an unfitted prior)",
}


def validate_rows(df: pd.DataFrame, efficiency_by_generation=None, progress=None, cross_validate: bool = False,
                  cv_progress=None, report=None) -> pd.DataFrame:
    """One output row per input row: id, status, predicted, measured, rel_error, speed_error
    (``speed_error``: + = predicted faster), reason, efficiency_fitted (whether the efficiency
    model behind ``predicted`` is fitted, ``EfficiencyModel.is_fitted``; None for a skipped row), ...

    Rows are predicted together (``predict.predict``: one step-model call per model, cluster
    and dtype); ``progress(done, total)`` hears of the work as it is done: each row read, then
    the rows of each step-model call (``total`` = rows + rows predicted, known once they are
    read; it was called once per row after all of them were predicted, so a bar sat at 0% and
    then leapt to 100%). With ``cross_validate`` each
    source's rows are predicted by efficiency models fitted without that source
    (``fit.cross_validate``, minutes: one joint refit of every generation per source): ``predicted``,
    ``rel_error`` and ``efficiency_fitted`` are then the cross-validated ones, ``in_sample_predicted`` /
    ``in_sample_rel_error`` those of the committed models; ``cv_progress(done, total, source)``
    after each (``total``: the sources held out, those with a predicted row reported).

    ``report``: one bool per row of ``df``, the rows returned (default all). Every row is still
    read, so a cross-validated fit without a source uses every other source's rows of ``df`` (a
    filter applied before, ``--source KOR22``, left each held-out fit no other source at all);
    only the sources of reported rows are held out.
    """
    from paraplan.validation.predict import predict, prepare

    records = df.to_dict("records")
    shown = [True] * len(records) if report is None else [bool(x) for x in report]
    if len(shown) != len(records):
        raise ValueError(f"report has {len(shown)} values for {len(records)} rows")
    reasons: dict[int, str] = {}
    n = len(records)
    read = None if progress is None else (lambda i: progress(i, 2 * n))     # at most n rows to predict
    prepared = prepare(records, on_skip=lambda i, why: reasons.__setitem__(i, why), progress=read)
    total = n + len(prepared)
    done = None if progress is None else (lambda rows: progress(n + rows, total))
    pred, outs = (predict(prepared, efficiency_by_generation, with_outputs=True, progress=done) if len(prepared)
                  else ([], {"fits": [], "efficiency_fitted": []}))
    in_sample = pred
    basis = None
    if cross_validate and len(prepared):
        from paraplan.validation.fit import cross_validate as loso, held_out_basis
        predicted_rows = [i for i in range(len(records)) if i not in reasons]     # prepared's rows, in order
        held = {prepared.sources[j] for j, i in enumerate(predicted_rows) if shown[i]}
        refitted = []

        def each(src: str) -> None:
            refitted.append(src)
            cv_progress(len(refitted), len(held), src)
        if cv_progress is not None:
            cv_progress(0, len(held), "")       # before the first refit, minutes away
        pred = loso(prepared, progress=None if cv_progress is None else each, held_out=held)
        basis = held_out_basis(prepared)
    by_id = {}
    for j, row_id in enumerate(prepared.ids):
        inp = prepared.inputs[j]
        by_id[j] = (pred[j], inp, outs["fits"][j], in_sample[j], basis[j] if basis else "",
                    CV_BASIS_FITTED[basis[j]] if basis else bool(outs["efficiency_fitted"][j]))
    out, j = [], 0
    for i, row in enumerate(records):
        if not shown[i]:
            j += i not in reasons
            continue
        rec = {"id": row.get("id"), "run_id": id_text(row.get("run_id")) or None, "source": source_of(row.get("run_id")),
               "gpu_profile": row.get("gpu_profile"), "metric": row.get("measured_metric"),
               "status": "skipped", "predicted": None, "measured": _measured(row),
               "rel_error": None, "speed_error": None, "reason": reasons.get(i, ""), "assumptions": "",
               "efficiency_fitted": None}
        if i not in reasons:
            value, inp, fits, own, held_out, fitted = by_id[j]
            j += 1
            rec.update(status="ok", predicted=float(value), rel_error=(float(value) - rec["measured"]) / rec["measured"],
                       metric=inp.metric, speed_error=speed_error(inp.metric, float(value), rec["measured"]),
                       assumptions="; ".join(inp.assumptions), generation=inp.cluster.gpu.generation,
                       fits=bool(fits), stack=inp.stack, cluster=inp.cluster.name, efficiency_fitted=fitted)
            if cross_validate:
                rec.update(in_sample_predicted=float(own), in_sample_rel_error=(float(own) - rec["measured"]) / rec["measured"],
                           cv_basis=held_out)
                if held_out != "fit":
                    rec["assumptions"] = "; ".join(filter(None, [rec["assumptions"], CV_BASIS_NOTES[held_out]]))
        out.append(rec)
    if progress is not None:
        progress(total, total)
    return pd.DataFrame(out)


def source_of(run_id) -> str:
    """The source a row belongs to: its run_id's text before the first '-' ("(no run_id)" for an
    empty cell, which pandas reads as NaN: it printed as the source "nan")."""
    return id_text(run_id).split("-")[0] or "(no run_id)"


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Per source: rows used, skipped, mean and worst absolute relative error (percent); with
    cross-validated results also the in-sample mean (``in_sample_mean_abs_err_pct``) beside the
    cross-validated one (``mean_abs_err_pct``)."""
    cv = "in_sample_rel_error" in results

    def stats(name, g):
        ok = g[g.status == "ok"]
        err = ok.rel_error.abs() * 100
        rec = {"source": name, "rows_ok": len(ok), "rows_skipped": int((g.status != "ok").sum()),
               "mean_abs_err_pct": err.mean() if len(ok) else np.nan,
               "worst_abs_err_pct": err.max() if len(ok) else np.nan}
        if cv:
            rec["in_sample_mean_abs_err_pct"] = (ok.in_sample_rel_error.abs() * 100).mean() if len(ok) else np.nan
        return rec

    rows = [stats(shown_source(src), g) for src, g in results.groupby("source", sort=True)]
    rows.append(stats(TOTAL_ROW, results))
    return pd.DataFrame(rows)


#: the summary's row over every source (``--fail-above`` gates on it)
TOTAL_ROW = "ALL"


def shown_source(source: str) -> str:
    """A source as the summary names it: one whose run_id prefix is ``ALL`` (in any case) is
    ``ALL (source)``, so that it cannot be read as the total row (``TOTAL_ROW``)."""
    return f"{source} (source)" if source.upper() == TOTAL_ROW else source
