"""``paraplan validate serving``: predict measured serving runs (TTFT, TPOT) and report the error.

The rows are those of ``serving_runs.csv`` (``../shared/validation/serving_README.md``):
AIConfigurator's measured deployments of vLLM, SGLang and TensorRT-LLM. How a row becomes a
prediction:

* model: the Hugging Face id in ``model_path`` maps to a preset (``MODEL_PRESETS``; the NVIDIA
  re-quantised checkpoints have their base model's architecture); an id not in that table is
  looked up by its name without checkpoint suffixes (``model_preset_for``: ``-Instruct``,
  ``-FP8``, ``-0528``...) in the model catalog's names and aliases (by name only: a file or
  folder of that name in the working directory is never the preset). A ``model_path`` written
  as a path (absolute, ``./``, or ending in ``config.json``), or an id with no preset that
  exists as a path, is read as that config.json / folder as given (``model_of``); a model that
  cannot be read skips its row with the reason, never the run.
* system: ``SYSTEMS`` maps the file's system names to cluster presets; a cluster preset's own
  name (``dgx-h100``) is that preset.
* fit: a layout whose weights leave no KV cache on a GPU, or no room for one request's, is
  skipped with that reason (``_no_room``; ``serve simulate`` refuses it, the engine would not
  start), on each worker of a disaggregated row.
* stack: the ``backend`` framework's serving stack (``TensorRT-LLM`` is ``trtllm``,
  ``catalog.framework_key``) covering ``backend_version``
  (``hardware_specs.catalog.serving_release_match``; a release no profile lists takes the
  newest profiled release before it, noted in the row's assumption); rows without a version
  get the framework's newest profile (``ASSUMPTIONS``). A TensorRT-LLM row whose version is an
  NVIDIA Dynamo tensorrtllm-runtime container tag (0.5-0.8, ``DYNAMO_TRTLLM_TAGS``) runs the
  TensorRT-LLM 1.x that container ships: the trtllm-1 profile, without a note.
* formats: ``gemm_quant_mode`` for attention and dense GEMMs, ``moe_quant_mode`` for routed
  experts, empty = 16-bit; except where ``model_path`` names a checkpoint whose stored formats
  are known (``checkpoints.CHECKPOINTS``, or a config.json's quantization_config) and the row's
  one label for both (gemm = moe) is that checkpoint's expert format, or the source's label of
  it (``SOURCE_LABELS``: nvfp4 for MXFP4 where no NVFP4 checkpoint of the model is known): the
  row served that release, priced in its formats with the KV cache it implies, the row's
  assumption saying so (``_release_formats``: Kimi-K2.5's int4 rows are bf16 with int4
  experts, gpt-oss-120b's fp4 rows bf16 with MXFP4 experts and a 16-bit KV cache).
* aggregated layout: ``tp_size``, ``pp_size``, ``attention_dp_size`` (empty or 0 = 1),
  ``moe_tp_size``, ``moe_ep_size`` (one of them 0 or empty = 1; both unset = the experts split
  tensor-parallel over the whole worker, the engines' default without expert parallelism);
  ``batch_size`` is the requests one attention-DP
  rank keeps in flight (the file's concurrency is batch_size x attention_dp_size for 98% of
  its aggregated rows); where the row's ``silicon_data_source`` states a
  ``silicon_concurrency`` that differs from batch_size x attention_dp_size (24 rows of the
  auto-gap-analysis files: e.g. 224 clients against batch 56 at tp 4, 448 against 14 at tp 2),
  the row's own fields disagree on the load one engine carries and it is skipped with that
  reason. A stated layout with moe_tp_size == moe_ep_size == M > 1 and tp_size x
  attention_dp_size == M x M beyond one node (64 = 8 x 8, 16 = 4 x 4 on 8-GPU H200 / B200
  nodes; tp or attention DP 1) is the export's squared form of a pure expert-parallel worker of
  M GPUs: the file holds the same measurements (TTFT and TPOT equal to 1e-6) a second time
  with the M-GPU layout in their fields (tp_size 1, attention_dp_size 8 or 4, experts over 8 or
  4; e.g. ``..._c64_tp8_0_ep8_0_976`` and ``..._c64_tp8_ep8_937``: 13 of the file's 152 such
  rows, all of the attention-DP form; in the source's full silicon_sample.csv, 116 of its 295
  have a twin and all 116 twins are the M-GPU expert-parallel worker), and the tp-form rows'
  own 2026-04-06 ids say ``tp8_ep8`` / ``tp4_ep4``.
  Such rows are read as tp / M (or attention DP / M), experts over M, the same clients
  (``_squared_expert_layout``). Inside one node (experts 2 x 2 at tp 4) the squared form is a
  valid layout and is read as stated, unless the row's family (backend, release, model, system)
  also states a squared layout beyond the node: then its export squared every expert-parallel
  worker (``_families_that_square``). The file's one such family, gpt-oss-120b on H200 under
  TensorRT-LLM gpt-oss-dev, writes ``tp2_ep2`` in its ids as tp 4 with experts 2 x 2, and those
  15 rows measure the TPOT of the stated-tp-2 rows of the same shape and load within 2.6% (5.90
  against 5.85 ms at 4 clients, 14.12 against 14.07 at 64, 1,024 x 1,024), where its 4-GPU worker
  (written tp 16) measures 16-35% less; SGLang's Qwen3.5-397B 2 x 2 rows on B300, whose family
  squares nothing, measure 0-6% above the family's tp-4 rows (4 GPUs, read as stated).
  Any other ``tp_size`` larger than the node is read as stated:
  attention tensor parallelism over tp GPUs of several nodes, its all-reduces crossing the
  NICs. A ``tp_size`` that does not divide the attention heads
  (24, 28, 36, 72 for DeepSeek's 128) cannot be a tensor-parallel split; such rows are skipped
  with that reason, as are expert layouts with moe_tp x moe_ep != tp x attention_dp_size, and
  expert splits the row's stack does not run (``ServingBehaviour.expert_splits``: vLLM runs a
  worker's experts all expert-parallel or all tensor-parallel; in the file no vLLM row, as read,
  mixes the two, while 17 TensorRT-LLM and 12 SGLang rows do, which those engines run).
  vLLM rows with attention data parallelism whose ``tp_size`` equals their
  ``attention_dp_size`` D (and ``moe_ep_size`` = D x D, ``moe_tp_size`` 1) describe vLLM's data-parallel
  deployment on D GPUs (``--data-parallel-size D --enable-expert-parallel``: D engine ranks of
  tensor parallelism 1, their experts in one expert-parallel group of DP x TP = D, vLLM docs
  "Data Parallel Deployment"); the source wrote the worker's GPU count D in ``tp_size`` (their
  ids read ``tpD_epD``), so they are read as tp 1, attention DP D, expert parallel D
  (``_vllm_data_parallel``). Read as 16 GPUs over two nodes instead, a 4-rank row's prefill
  would be bound by an inter-node all-to-all that the measured TTFT (a fifth of it) rules out.
  TensorRT-LLM's ``tensor_parallel_size`` is the engine's world size whether its attention is
  tensor-parallel or data-parallel: ``enable_attention_dp`` decides (TensorRT-LLM
  ``docs/source/features/parallel-strategy.md``: "TP-8: tensor_parallel_size: 8,
  enable_attention_dp: false; DP-8: tensor_parallel_size: 8, enable_attention_dp: true"; with
  DP the KV cache is partitioned over the ranks, with TP of an MLA / GQA model whose KV heads are
  fewer than the ranks it is replicated; ``tensorrt_llm/mapping.py``: moe_tp_size x moe_ep_size
  == tp_size, both unset = moe_tp_size tp_size, moe_ep_size 1). The file has no column for that
  flag: AIConfigurator writes attention DP as ``attention_dp_size`` > 1 (its generator sets
  ``enable_attention_dp`` exactly then, for MoE models: ``generator/rule_plugin/trtllm.rule``
  @095f58a), but a TensorRT-LLM MoE row with tp_size T > 1 and attention_dp_size 1 could also be
  an attention-DP engine recorded by its tensor_parallel_size. Where the reading matters most
  it is not decided: if the row's batch_size exceeds the requests the KV cache of T
  attention-TP GPUs admits (the prediction would queue clients for a KV slot, where T
  attention-DP ranks, each with its own KV cache, would carry batch_size / T each and hold
  about T times as many), the row is skipped with that reason
  (``_attention_dp_ambiguity``; e.g. tp 64 with 538 clients and tp 32 with 2,150 clients of
  DeepSeek-R1 at 8192 x 1024 on GB200, rows whose family of the same export, tp_size =
  moe_tp_size, also holds tp 24, 28, 36 here and 12, 20, 40, 48, 52 in the source's full
  silicon_sample.csv: no attention-TP split of 128 heads). A TensorRT-LLM MoE row whose batch
  fits under attention TP is read as stated.
* disaggregated rows need their worker counts and batch sizes (``prefill_num_workers``,
  ``prefill_batch_size``, ``decode_num_workers``, ``decode_batch_size``); without them they
  are skipped with the reason. They also need their load: the README defines ``batch_size`` as
  the requests in flight for aggregated rows only, and a decode worker's batch size is its
  launch setting (``--max-running-requests``, ``max_batch_size``). The file's disaggregated rows
  that state a ``silicon_concurrency`` (106 of 109) all ran decode_batch_size x
  decode_num_workers x decode_attention_dp_size clients, so that product is read as the load; a
  row that states no concurrency (``_c_`` in its id, none in ``silicon_data_source``; the 3
  auto-gap-analysis rows) is skipped with that reason (``_unstated_disagg_load``). For two of
  them the product is an implausible load, though not an impossible one. Qwen3-32B at 4,000 x
  1,000 on H100 with 5 prefill and 11 decode workers of one GPU, 528 clients, at the measured
  567 ms TTFT and 22.3 ms TPOT, would complete 528 / (0.567 + 999 x 0.0223) = 23.1 requests/s,
  whose prompts need 23.1 x 4,000 x 2 x 32.8e9 = 6.1 PFLOP/s of the 5 prefill GPUs: 61% of their
  9.9 PFLOP/s dense FP8 peak (5 x 1,978.9 TFLOP/s, ``hardware_specs/gpus/h100-sxm-80gb.yaml``),
  and at the fitted Hopper prefill GEMM fraction (``gemm_peak_fraction`` 0.637,
  ``hardware_specs/serving_efficiency/hopper.yaml``) 6.1 / (9.9 x 0.637) = 96% of what they
  reach. Prefill GPUs that busy queue the prompts for many prefill times, yet the measured TTFT
  is 2.7 one-prompt prefills (4,000 x 2 x 32.8e9 = 262 TFLOP over 1,978.9 x 0.637 TFLOP/s =
  208 ms). Qwen3-235B-A22B on vLLM at 4,000 x 1,000, 3 decode workers of tp 4 with batch 24:
  24 requests x top-8 of 128 experts touch 128 x (1 - (120/128)^24) = 101 experts a layer, whose
  FP8 weights with the rest of the model are 47 GB a GPU at tp 4, 14 ms a step at 3.35 TB/s
  before any KV cache is read; the measured TPOT is 11.4 ms, so the decode batch was smaller.

Rows are evaluated in groups sharing (model, system, stack, formats, mode), each group as numpy
columns through the same functions ``paraplan serve simulate`` and ``serve plan`` use.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from hardware_specs.catalog import framework_key, list_clusters, load_cluster, load_stack, serving_release_match
from hardware_specs.release_match import ReleaseMatch, release_numbers
from hardware_specs.yaml_files import is_file
from cost_models.weight_formats import canonical_format, slice_holds_whole_blocks
from hardware_specs.errors import InputError, as_float, digits_text, not_a_file
from hardware_specs.serving_efficiency import ServingEfficiency
from model_specs.catalog import load_model, load_preset
from paraplan.validation.csv_structure import (SHORT_ROW_COLUMN, check_csv_structure, header_names, id_text,
                                               mark_short_rows, strip_header)
from paraplan.validation.model_names import preset_named
from simulator.serving.aggregated import memory_columns, no_room_reason
from simulator.serving.checkpoints import checkpoint_names_fp8_kv, names_expert_checkpoint, stored_formats
from simulator.serving.context import ServingContext
from simulator.serving.disaggregated import prefill_memory
from simulator.serving.evaluate import evaluate_agg_columns, evaluate_disagg_columns

#: Hugging Face model ids of the file -> model presets (architecture from the public config.json)
MODEL_PRESETS = {
    "deepseek-ai/deepseek-r1": "deepseek-r1",
    "deepseek-ai/deepseek-v3": "deepseek-v3",
    "nvidia/deepseek-r1-nvfp4": "deepseek-r1",
    "nvidia/deepseek-v3.1-nvfp4": "deepseek-v3",
    "moonshotai/kimi-k2.5": "kimi-k2.5",
    "minimaxai/minimax-m2.5": "minimax-m2.5",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "meta-llama/llama-3.1-8b-instruct": "llama3.1-8b",
    "nvidia/llama-3.1-8b-instruct-fp8": "llama3.1-8b",
    "meta-llama/llama-3.1-70b": "llama3.1-70b",
    "qwen/qwen3-32b": "qwen3-32b",
    "nvidia/qwen3-32b-nvfp4": "qwen3-32b",
    "qwen/qwen3-235b-a22b-fp8": "qwen3-235b-a22b",
    "qwen/qwen3.5-397b-a17b": "qwen3.5-397b-a17b",
    "zhipuai/glm-5": "glm-5",
}
def model_preset_for(model_path) -> str | None:
    """The model preset a Hugging Face id names: ``MODEL_PRESETS`` first, else the repository
    name looked up as ``model_names.preset_named`` does (the part after ``org/``, then without
    its checkpoint suffixes one at a time: ``DeepSeek-R1-0528`` -> DeepSeek-R1,
    ``Llama-3.3-70B-Instruct-FP8`` -> Llama-3.3-70B, each also without a leading ``Meta-``);
    None when nothing matches."""
    key = str(model_path or "").strip().lower()
    if not key:
        return None
    if key in MODEL_PRESETS:
        return MODEL_PRESETS[key]
    return preset_named(key)


def _explicit_path(text: str) -> bool:
    """Whether a ``model_path`` is written as a file path, not a Hugging Face id: absolute,
    ``./`` / ``../`` / ``~`` relative, or ending in a model file's suffix (``config.json``)."""
    return (text.startswith(("/", "./", "../", "~", ".\\", "..\\")) or Path(text).is_absolute()
            or Path(text).suffix.lower() in (".json", ".yaml", ".yml"))


def model_of(model_path) -> tuple[str, object]:
    """(key, ModelSpec) of a row's ``model_path``; ``InputError`` with the reason the row is
    skipped. A path written as one (``_explicit_path``) is that config.json / model file or a
    folder holding a config.json, read as given (relative to the working directory only when
    written relative) and keyed by its resolved path; any other text is a Hugging Face id mapped
    to a preset (``model_preset_for``), which a file or folder of the same name never replaces;
    an id that maps to no preset is read as a path only where that path exists as given."""
    text = id_text(model_path)
    if not text:
        raise InputError("model_path", "model_path empty")
    if not _explicit_path(text):
        preset = model_preset_for(text.lower())
        if preset is not None:
            return preset, load_preset(preset)
        if not Path(text).exists():
            raise InputError("model_path", f"model_path {model_path!r} has no preset")
    path = Path(text).expanduser()
    try:
        spec = load_model(path)
    except InputError as exc:
        raise InputError("model_path", f"model_path {text!r} cannot be read: {exc}") from exc
    return str(path.resolve()), spec


#: the file's system names -> cluster presets (AIConfigurator's system names)
SYSTEMS = {"a100_sxm": "dgx-a100-80gb", "h100_sxm": "dgx-h100", "h200_sxm": "hgx-h200", "b200_sxm": "dgx-b200",
           "b300_sxm": "dgx-b300", "gb200": "gb200-nvl72", "gb300": "gb300-nvl72"}
#: AIConfigurator's TensorRT-LLM rows tagged with an NVIDIA Dynamo tensorrtllm-runtime container
#: release (0.5.1-rc0.pre3, 0.7.0.post2, 0.8.1.post1-3) rather than a TensorRT-LLM release: those
#: containers ship TensorRT-LLM 1.x (hardware_specs/stacks/trtllm-1.yaml), so the tag's release
#: line -> the stack that prices it. TensorRT-LLM's own 0.5-0.8 (2023-2024, TensorRT engines)
#: are other software, which ``serving_release_match`` places as older than every profile
DYNAMO_TRTLLM_TAGS = {(0, 5): "trtllm-1", (0, 7): "trtllm-1", (0, 8): "trtllm-1"}
#: what a prediction assumes where the row is silent, by cause
ASSUMPTIONS = {
    "no_version": "backend_version empty: the framework's newest serving stack",
}
REQUIRED_COLUMNS = ("id", "backend", "model_path", "system", "mode", "isl", "osl", "silicon_ttft_ms", "silicon_tpot_ms")
METRICS = ("ttft_ms", "tpot_ms")
_LAYOUT = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")



def _reference_file() -> str:
    """The file whose columns a CSV must have: the one the tool reads without PATH (the shared
    copy, else the bundled one), not a fixed path that may not exist."""
    from paraplan.validation.datasets import SERVING_RUNS, validation_file
    return str(validation_file(SERVING_RUNS))

#: columns read as text whatever their cells hold (weight formats, the release)
TEXT_COLUMNS = ("backend_version", "precision", "gemm_quant_mode", "moe_quant_mode")


def read_rows(path: str | Path) -> pd.DataFrame:
    """The rows of a serving-runs CSV; a missing column is an ``InputError`` naming it."""
    # a path (not an open file) that is missing, or a FIFO / device pandas would block on or read for ever
    if isinstance(path, (str, Path)) and not is_file(Path(path)):
        raise InputError("path", not_a_file(path), "check the path, or omit PATH for the bundled runs")
    short = check_csv_structure(path, REQUIRED_COLUMNS) if isinstance(path, (str, Path)) else {}
    try:
        # the text columns as text: an all-numeric column (every gemm_quant_mode -1) would load
        # as numbers, which ``_fmt`` takes for empty cells and prices as ``precision``'s format;
        # as text "-1" is an unknown weight format and its row is skipped. Empty cells stay NaN
        text = ({c: str for c in header_names(path) if c.strip() in TEXT_COLUMNS}
                or {c: str for c in TEXT_COLUMNS})
        df = mark_short_rows(strip_header(pd.read_csv(path, dtype=text)), short)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise InputError("path", f"malformed CSV {path}: {str(exc).splitlines()[0]}",
                         f"save the file as UTF-8 CSV with the columns of {_reference_file()}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise InputError("csv", f"column '{missing[0]}' missing in {path}",
                         f"use the columns of {_reference_file()}")
    for col in _LAYOUT + tuple(f"{s}_{c}" for s in ("prefill", "decode") for c in _LAYOUT + ("batch_size", "num_workers")) + ("batch_size",):
        if col not in df.columns:
            df[col] = np.nan
    for col in ("gemm_quant_mode", "moe_quant_mode", "precision", "backend_version"):
        if col not in df.columns:
            df[col] = None
    return df


#: the largest token count, parallel degree, batch size or worker count a row may state: a
#: whole-cluster deployment, a prompt of millions of tokens; a larger value is damage
MAX_ROW_VALUE = 2**24
#: columns whose stated value must be a whole number from 1 (batch sizes, worker counts, token
#: counts) or from 0 (parallel degrees: the file writes 0 for "not set", read as 1)
_FROM_ONE = ("isl", "osl", "batch_size") + tuple(f"{s}_{c}" for s in ("prefill", "decode")
                                                 for c in ("batch_size", "num_workers"))
_FROM_ZERO = _LAYOUT + tuple(f"{s}_{c}" for s in ("prefill", "decode") for c in _LAYOUT)


def _value_problem(row: dict) -> str | None:
    """Why a row's stated counts cannot describe a deployment (text, a fraction, a negative
    number, inf or a value past ``MAX_ROW_VALUE`` in a count or degree column), else None. An
    empty cell is not a problem here: each mode says which it needs."""
    for col in _FROM_ONE + _FROM_ZERO:
        v = row.get(col)
        if v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip()):
            continue
        if isinstance(v, (bool, np.bool_)):     # a column of true / false, which float() reads as 1 / 0
            return f"{col} '{str(v).lower()}' is not a number"
        try:
            x = as_float(v)         # a cell of 400 digits (read as an int) is inf, not OverflowError
        except (TypeError, ValueError):
            return f"{col} {v!r} is not a number"
        low = 1 if col in _FROM_ONE else 0
        if not math.isfinite(x) or x != round(x) or not low <= x <= MAX_ROW_VALUE:
            huge = digits_text(v)      # a 400-digit cell by its size, not as inf
            # an inf cell quoted as given, as validate published's reasons quote it: printed bare,
            # inf / -inf read as a value the report computed, not as the input it refuses
            given = f"({huge})" if huge else f"{x:g}" if math.isfinite(x) else repr(str(v))
            return f"{col} {given} is not a whole number from {low} to {MAX_ROW_VALUE:,}"
    return None


def _num(value) -> float:
    if isinstance(value, (bool, np.bool_)):     # true is no measurement (float(True) is 1)
        return math.nan
    try:
        v = as_float(value)
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def _not_a_number(value) -> bool:
    """Whether a cell holds text that is no number ('abc'), not an empty cell or a number."""
    shown = id_text(value)
    if not shown or shown.lower() == "nan":
        return False
    try:
        as_float(shown)
    except (TypeError, ValueError):
        return True
    return False


def _deg(value) -> float:
    """A parallel degree: empty or 0 means 1."""
    v = _num(value)
    return 1.0 if (math.isnan(v) or v == 0) else v


def _fmt(value, precision) -> str:
    if isinstance(value, str) and value.strip():
        return value.strip().lower()
    p = str(precision).strip().lower() if isinstance(precision, str) else ""
    return "bf16" if p in ("", "bf16", "fp16", "nan") else p


#: stored weight format -> the label the source writes it under: AIConfigurator's silicon rows
#: state openai/gpt-oss-120b, whose release stores its routed experts in MXFP4 and the rest in
#: bf16 (config.json quantization_config quant_method mxfp4, modules_to_not_convert self_attn,
#: router, embeddings, lm_head), as precision fp4 with gemm / moe quant modes nvfp4, the H100 /
#: H200 rows included, chips without FP4 tensor cores where the engines run those experts
#: weight-only (``hardware_specs/stacks/trtllm-1.yaml`` native_only_formats source); the file
#: names no NVFP4 export of the model. Such a label is read as the stored format only where no
#: checkpoint of the model storing the label's own format is known (``names_expert_checkpoint``)
SOURCE_LABELS = {"mxfp4": "nvfp4"}


def _release_formats(model_path, key: str, model, dense: str, expert: str, framework) -> tuple[str, str, str] | None:
    """(dense, expert, note): the formats a row is priced in where its ``model_path`` names a
    checkpoint whose stored formats are known and differ from the row's quant-mode columns, and
    the row's columns are one label for the whole model (``gemm_quant_mode`` = ``moe_quant_mode``,
    the source's ``precision``) naming that checkpoint's routed-expert format (itself, or the
    source's label of it: ``SOURCE_LABELS``). Such a row served the release, which keeps its
    attention, dense layers and shared experts in its own (16-bit) format: Kimi-K2.5's int4
    rows (``CHECKPOINTS`` moonshotai/Kimi-K2.5: bf16 with int4 weight-only routed experts) and
    gpt-oss-120b's fp4 rows (openai/gpt-oss-120b: bf16 with MXFP4 experts, no KV format named,
    so no FP8 KV cache). None where the row's own formats are priced: an unknown repository
    (a quantised export such as nvidia/...-NVFP4), experts the checkpoint does not store
    (Kimi-K2.5's fp4 rows: NVIDIA's NVFP4 export), or distinct dense and expert columns (read as
    stated: DeepSeek's fp8 GEMM / fp8_block MoE rows). The checkpoint: a Hugging Face id's
    ``CHECKPOINTS`` entry (``stored_formats``); a config.json read as given, its own
    quantization_config (``checkpoint_format`` / ``expert_checkpoint_format``, empty = 16-bit)."""
    if key == model.name:
        repo = id_text(model_path)
        stored = stored_formats(model, repo)
    else:
        repo = key
        stored_dense = model.checkpoint_format or "bf16"
        stored = (stored_dense, (model.expert_checkpoint_format or stored_dense) if model.moe is not None
                  else stored_dense)
    if stored is None:
        return None
    d, e = canonical_format(dense), canonical_format(expert)
    stored_dense, stored_expert = stored
    if (d, e) == stored or d != e:
        return None
    labelled = e != stored_expert
    if labelled and (SOURCE_LABELS.get(stored_expert) != e or names_expert_checkpoint(model, e)):
        return None
    names_fp8_kv = checkpoint_names_fp8_kv(model, stored_dense, stored_expert, str(framework), prequantised=True)
    kv = "an FP8 KV cache, which it names" if names_fp8_kv else "the stack's KV cache dtype (it names no KV format)"
    label = f", {e} being the source's label of {stored_expert}" if labelled else ""
    note = (f"weights priced as {repo} stores them: {stored_dense} attention and dense GEMMs, {stored_expert} routed "
            f"experts, {kv}; the row's quant modes {dense} / {expert} name the release's experts{label}, not "
            f"{d} throughout")
    return stored_dense, stored_expert, note


def _format_problem(row: dict) -> str | None:
    """Why a row's weight formats cannot be priced, naming the column (``gemm_quant_mode``,
    ``moe_quant_mode``, or ``precision`` where the quant column is empty and ``_fmt`` falls back
    to it): a format ``canonical_format`` does not know; else None. Checked per row, so one row's
    unknown format (e.g. w4afp8) skips that row, not the run (``_split_problem`` reads the expert
    format's scale block, which raised for the whole file)."""
    for col in ("gemm_quant_mode", "moe_quant_mode"):
        value, precision = row.get(col), row.get("precision")
        try:
            canonical_format(_fmt(value, precision))
        except InputError as exc:
            if isinstance(value, str) and value.strip():
                return f"{col}: unknown weight format {value.strip()!r} ({exc.fix})"
            return f"precision: unknown weight format {str(precision).strip()!r} ({col} empty; {exc.fix})"
    return None


@dataclass
class _Row:
    index: int
    key: tuple
    values: dict


def _expert_degrees(moe_tp_value, moe_ep_value, tp: float, adp: float) -> tuple[float, float]:
    """(moe_tp, moe_ep) as the row states them; both unset (empty or 0) = tensor-parallel experts
    over the whole worker (the engines' default without expert parallelism)."""
    mtp, mep = _num(moe_tp_value), _num(moe_ep_value)
    unset = lambda v: math.isnan(v) or v == 0
    if unset(mtp) and unset(mep):
        return tp * adp, 1.0
    return _deg(moe_tp_value), _deg(moe_ep_value)


def _vllm_data_parallel(backend, tp: float, adp: float, moe_tp: float, moe_ep: float) -> tuple[float, float, float]:
    """(tp, moe_tp, moe_ep) of a vLLM data-parallel row (see the module docstring): tp_size ==
    attention_dp_size = D > 1 with the experts over D x D means D ranks of tp 1, experts over D."""
    if framework_key(backend) == "vllm" and adp > 1 and tp == adp and moe_tp == 1 and moe_ep == tp * adp:
        return 1.0, 1.0, adp
    return tp, moe_tp, moe_ep


def _is_squared(tp: float, adp: float, moe_tp: float, moe_ep: float) -> bool:
    """Whether a stated layout has the export's squared shape: moe_tp == moe_ep == M > 1,
    tp x adp == M x M, one of tp / adp 1 (whether it is read so: ``_squared_expert_layout``)."""
    m = moe_tp
    return bool(m > 1 and moe_ep == m and tp * adp == m * m and min(tp, adp) == 1)


def _squared_expert_layout(tp: float, adp: float, moe_tp: float, moe_ep: float,
                           gpus_per_node: int, family_squares: bool = False) -> tuple[float, float, float, float]:
    """(tp, adp, moe_tp, moe_ep) of an aggregated row whose stated layout is the squared form of
    a pure expert-parallel worker of M GPUs (see the module docstring): moe_tp == moe_ep == M > 1,
    tp x adp == M x M beyond one node, one of tp / adp 1 -> the M-GPU worker, tp (or adp) / M,
    experts over M. Inside one node only where ``family_squares``: the row's family (backend,
    release, model, system) also states a squared layout beyond the node, so its export squared
    every expert-parallel worker. Any other layout is returned as stated."""
    m = moe_tp
    if _is_squared(tp, adp, moe_tp, moe_ep) and (m * m > gpus_per_node or family_squares):
        return (tp / m if tp > 1 else 1.0), (adp / m if adp > 1 else 1.0), 1.0, m
    return tp, adp, moe_tp, moe_ep


def _families_that_square(df: pd.DataFrame) -> set[tuple]:
    """(backend, backend_version, model_path, system) of the aggregated rows whose stated layout is
    squared beyond one node (``_squared_expert_layout``): the families whose export squared its
    expert-parallel workers, the in-node ones (experts 2 x 2 at tp 4) included."""
    out: set[tuple] = set()
    node_gpus: dict[str, int] = {}
    for r in df.to_dict("records"):
        if id_text(r.get("mode")).lower() != "agg":
            continue
        tp, adp = _deg(r.get("tp_size")), _deg(r.get("attention_dp_size"))
        moe_tp, moe_ep = _expert_degrees(r.get("moe_tp_size"), r.get("moe_ep_size"), tp, adp)
        if not _is_squared(tp, adp, moe_tp, moe_ep):
            continue
        key = id_text(r.get("system")).lower()
        system = SYSTEMS.get(key) or (key if key in list_clusters() else None)
        if system is None:
            continue
        if system not in node_gpus:
            node_gpus[system] = load_cluster(system).gpus_per_node
        if tp * adp > node_gpus[system]:
            out.add(_family(r))
    return out


def _family(r: dict) -> tuple:
    return tuple(id_text(r.get(c)) for c in ("backend", "backend_version", "model_path", "system"))


def _layout_problem(model, tp, adp, moe_tp, moe_ep, prefix: str, pp: float = 1.0) -> str | None:
    """Why a layout cannot be a valid split of ``model`` (None if it can): degrees that are not
    whole numbers >= 1, a tp that does not divide the heads, more pipeline stages than layers
    (as ``serve simulate`` refuses), an expert group that is not the worker."""
    degrees = (tp, adp, moe_tp, moe_ep, pp)
    if any(not math.isfinite(x) or x < 1 or x != int(x) for x in degrees):
        return f"{prefix}layout degrees must be whole numbers >= 1"
    if pp > model.num_layers:
        return (f"{prefix}pp_size {int(pp):,} is more pipeline stages than the {model.num_layers} layers "
                f"(not a pipeline split; the source's layout cannot be modelled)")
    if model.num_heads % int(tp):
        return (f"{prefix}tp_size {int(tp)} does not divide the {model.num_heads} attention heads "
                f"(not a tensor-parallel split; the source's layout cannot be modelled)")
    if model.moe is not None:
        if int(moe_tp) * int(moe_ep) != int(tp) * int(adp):
            return (f"{prefix}moe_tp_size x moe_ep_size = {int(moe_tp * moe_ep)} differs from tp_size x "
                    f"attention_dp_size = {int(tp * adp)} (the expert group must span the worker)")
        if model.moe.num_experts % int(moe_ep):
            return f"{prefix}moe_ep_size {int(moe_ep)} does not divide the {model.moe.num_experts} experts"
    return None


def _split_problem(stack, model, moe_tp, moe_ep, prefix: str, tp: float = 1.0, adp: float = 1.0,
                   expert_format: str = "bf16") -> str | None:
    """Why the stack's engine cannot run the row's expert split or attention split (None if it
    can): a measured row in such a split is read wrongly or mislabelled, so it is skipped with the
    reason, not predicted as a layout the engine never ran (``ServingBehaviour.expert_splits``,
    ``attention_dp_with_tp``)."""
    if not stack.serving.runs_attention_split(tp, adp):
        return (f"{prefix}tp_size {int(tp)} with attention_dp_size {int(adp)}: {stack.name} runs attention-DP ranks "
                "of one GPU (stack input attention_dp_with_tp)")
    if model.moe is None:
        return None
    if not slice_holds_whole_blocks(model.moe.expert_ffn_hidden_size, moe_tp, expert_format):
        return (f"{prefix}moe_tp_size {int(moe_tp)} leaves {model.moe.expert_ffn_hidden_size / moe_tp:g} of the expert width "
                f"per GPU, not whole {expert_format} scale blocks (the engines refuse to shard them)")
    if stack.serving.runs_expert_split(moe_tp, moe_ep):
        return None
    group = int(moe_tp * moe_ep)
    return (f"{prefix}expert split etp{int(moe_tp)} x ep{int(moe_ep)} is not one {stack.name} runs "
            f"({stack.serving.expert_splits_text(group)}; stack input expert_splits)")


def _unstated_disagg_load(row: dict) -> str | None:
    """The skip reason of a disaggregated row that states no concurrency (see the module
    docstring: its decode batch is a launch setting, not confirmed as the load), else None."""
    if math.isfinite(concurrency_of(row.get("silicon_data_source"))):
        return None
    return ("disaggregated row states no concurrency (none in silicon_data_source, its id's c field empty): "
            "decode_batch_size is the decode workers' launch setting, so the load it was measured at is unknown")


def _prepare(df: pd.DataFrame) -> tuple[list[_Row], dict[int, str], dict[str, object]]:
    """Rows that can be predicted (grouped by key), the skip reason of the others, and the
    models by key (a preset name, or a config.json's resolved path: ``model_of``)."""
    rows: list[_Row] = []
    skipped: dict[int, str] = {}
    stacks: dict[tuple, object] = {}
    models: dict[str, object] = {}
    clusters: dict[str, object] = {}
    squaring = _families_that_square(df)
    for i, r in enumerate(df.to_dict("records")):
        problem = id_text(r.get(SHORT_ROW_COLUMN)) and id_text(r.get(SHORT_ROW_COLUMN)) + " (a damaged row)"
        problem = problem or _value_problem(r)
        if problem:
            skipped[i] = problem
            continue
        try:
            preset, model = model_of(r.get("model_path"))
        except InputError as exc:
            # one row's model (an unknown id, a damaged config.json) skips that row, not the run
            skipped[i] = exc.message
            continue
        system_key = id_text(r.get("system")).lower()
        # AIConfigurator's system name, else a cluster preset's own name (never a file path)
        system = SYSTEMS.get(system_key) or (system_key if system_key in list_clusters() else None)
        if system is None:
            skipped[i] = (f"system {r.get('system')!r} has no cluster preset (one of {', '.join(SYSTEMS)}, or a "
                          f"preset of `paraplan hardware list`)" if system_key else "system empty")
            continue
        if not id_text(r.get("backend")):
            skipped[i] = "backend empty: no serving stack to price it on"
            continue
        mode = id_text(r.get("mode")).lower()
        isl, osl = _num(r.get("isl")), _num(r.get("osl"))
        if not (isl >= 1 and osl >= 1):
            skipped[i] = "isl / osl missing or < 1"
            continue
        version = r.get("backend_version")
        version = str(version).strip() if isinstance(version, str) and version.strip() else None
        skey = (str(r.get("backend")), version)
        if skey not in stacks:
            try:
                stacks[skey] = _release_match(*skey)
            except InputError as exc:
                stacks[skey] = exc
        match = stacks[skey]
        if isinstance(match, InputError):
            skipped[i] = str(match)
            continue
        stack = match.stack
        models.setdefault(preset, model)
        most = model.max_context_tokens
        if most and isl + osl > most:
            # as serve simulate (ServingContext.check_request): the engines refuse such a request
            skipped[i] = (f"isl {isl:,.0f} + osl {osl:,.0f} tokens exceed the {most:,}-token context of {model.name} "
                          f"(config.json max_position_embeddings)")
            continue
        problem = _format_problem(r)
        if problem:
            skipped[i] = problem
            continue
        dense, expert = _fmt(r.get("gemm_quant_mode"), r.get("precision")), _fmt(r.get("moe_quant_mode"), r.get("precision"))
        values = {"isl": isl, "osl": osl, "assumption": match.note if version else ASSUMPTIONS["no_version"]}
        release = _release_formats(r.get("model_path"), preset, model, dense, expert, framework_key(r.get("backend")))
        if release is not None:
            dense, expert, note = release
            values["assumption"] = "; ".join(x for x in (values["assumption"], note) if x)
        if mode == "agg":
            tp, pp, adp = _deg(r.get("tp_size")), _deg(r.get("pp_size")), _deg(r.get("attention_dp_size"))
            moe_tp, moe_ep = _expert_degrees(r.get("moe_tp_size"), r.get("moe_ep_size"), tp, adp)
            batch = _num(r.get("batch_size"))
            if math.isnan(_num(r.get("tp_size"))) or math.isnan(batch) or batch < 1:
                skipped[i] = "aggregated row without tp_size / batch_size"
                continue
            tp, moe_tp, moe_ep = _vllm_data_parallel(r.get("backend"), tp, adp, moe_tp, moe_ep)
            clients = concurrency_of(r.get("silicon_data_source"))
            if math.isfinite(clients) and abs(clients - batch * adp) > 0.5:
                skipped[i] = (f"batch_size x attention_dp_size = {batch * adp:g} differs from the "
                              f"silicon_concurrency = {clients:g} its silicon_data_source states "
                              f"(the requests one engine keeps in flight are ambiguous)")
                continue
            if system not in clusters:
                clusters[system] = load_cluster(system)
            stated_adp = adp
            tp, adp, moe_tp, moe_ep = _squared_expert_layout(tp, adp, moe_tp, moe_ep, clusters[system].gpus_per_node,
                                                             _family(r) in squaring)
            batch = batch * stated_adp / adp      # the same clients over fewer attention-DP ranks
            if model.moe is None:
                moe_tp, moe_ep = tp * adp, 1.0
            problem = (_layout_problem(model, tp, adp, moe_tp, moe_ep, "", pp)
                       or _split_problem(stack, model, moe_tp, moe_ep, "", tp, adp, expert))
            if problem:
                skipped[i] = problem
                continue
            values.update(tp=tp, pp=pp, adp=adp, moe_tp=moe_tp, moe_ep=moe_ep, batch=batch,
                          tp_may_be_world=float(framework_key(r.get("backend")) == "trtllm"
                                                and model.moe is not None and adp == 1 and tp > 1))
        elif mode == "disagg":
            need = ("prefill_num_workers", "prefill_batch_size", "decode_num_workers", "decode_batch_size", "prefill_tp_size",
                    "decode_tp_size")
            if any(math.isnan(_num(r.get(c))) for c in need):
                skipped[i] = "disaggregated row without worker counts and batch sizes"
                continue
            problem = _unstated_disagg_load(r)
            if problem:
                skipped[i] = problem
                continue
            problem = None
            for side in ("prefill", "decode"):
                tp, pp, adp = _deg(r.get(f"{side}_tp_size")), _deg(r.get(f"{side}_pp_size")), _deg(r.get(f"{side}_attention_dp_size"))
                moe_tp, moe_ep = _expert_degrees(r.get(f"{side}_moe_tp_size"), r.get(f"{side}_moe_ep_size"), tp, adp)
                tp, moe_tp, moe_ep = _vllm_data_parallel(r.get("backend"), tp, adp, moe_tp, moe_ep)
                if model.moe is None:
                    moe_tp, moe_ep = tp * adp, 1.0
                problem = (problem or _layout_problem(model, tp, adp, moe_tp, moe_ep, f"{side}_", pp)
                           or _split_problem(stack, model, moe_tp, moe_ep, f"{side}_", tp, adp, expert))
                values.update({f"{side}_tp": tp, f"{side}_pp": pp, f"{side}_adp": adp, f"{side}_moe_tp": moe_tp,
                               f"{side}_moe_ep": moe_ep, f"{side}_batch": max(_num(r.get(f"{side}_batch_size")), 1.0),
                               f"{side}_workers": max(_num(r.get(f"{side}_num_workers")), 1.0)})
            if problem:
                skipped[i] = problem
                continue
        else:
            shown = id_text(r.get("mode"))
            skipped[i] = (f"mode {shown!r} is neither agg nor disagg" if shown
                          else "mode empty (neither agg nor disagg)")
            continue
        rows.append(_Row(i, (preset, system, stack.name, dense, expert, mode), values))
    return rows, skipped, models


@dataclass
class Group:
    """Rows sharing (model, system, stack, formats, mode): one vectorized evaluation."""

    context: ServingContext
    mode: str
    index: np.ndarray
    columns: dict[str, np.ndarray]

    @property
    def generation(self) -> str:
        return self.context.cluster.gpu.generation


@dataclass
class Prepared:
    """A serving-runs table turned into evaluation groups, plus per-row skip reasons."""

    n: int
    groups: list[Group]
    reason: np.ndarray
    assumption: np.ndarray


_ROW_ONLY = ("assumption", "tp_may_be_world")


def _attention_dp_ambiguity(ctx: ServingContext, members: list[_Row]) -> list[str]:
    """Per aggregated row, why its tp_size cannot be read (see the module docstring), else "":
    a row flagged ``tp_may_be_world`` (TensorRT-LLM, MoE, tp T > 1, no attention DP) whose
    batch_size exceeds what the KV cache of T attention-TP GPUs admits: the prediction would then
    rest on which of the two engines ran, T attention-DP ranks (KV cache partitioned, TensorRT-LLM
    parallel-strategy docs) each carrying batch / T holding about T times the requests."""
    col = lambda k: np.array([m.values[k] for m in members], dtype=float)
    flag = col("tp_may_be_world") > 0
    if not flag.any():
        return [""] * len(members)
    tp, pp, moe_tp, moe_ep, batch, isl, osl = (col(k) for k in ("tp", "pp", "moe_tp", "moe_ep", "batch", "isl", "osl"))
    as_tp = memory_columns(ctx, tp, np.ones_like(tp), pp, moe_tp, moe_ep, isl, osl)["max_admitted_per_rank"]
    as_dp = memory_columns(ctx, np.ones_like(tp), tp, pp, moe_tp, moe_ep, isl, osl)["max_admitted_per_rank"]
    out = []
    for i in range(len(members)):
        if flag[i] and batch[i] > as_tp[i]:
            out.append(f"TensorRT-LLM tp_size {tp[i]:g} with attention_dp_size 1: as attention tensor parallelism "
                       f"its KV cache admits {as_tp[i]:g} of the batch_size {batch[i]:g} requests, as "
                       f"enable_attention_dp over the same {tp[i]:g} ranks (tensor_parallel_size is the world size "
                       f"either way) each rank carries {batch[i] / tp[i]:.3g} of {as_dp[i]:g}; the file has no "
                       f"column for the flag, so the layout is ambiguous")
        else:
            out.append("")
    return out


def _no_room(ctx: ServingContext, mode: str, members: list[_Row]) -> list[str]:
    """Per row, why its layout cannot hold the model and one request, else "": the weights leave
    no KV cache on a GPU, or not even one request's KV cache fits in what is left (``serve
    simulate`` refuses both; the engines fail to start). Aggregated rows on their layout;
    disaggregated rows on each worker's, the prefill worker's activations sized for its batch of
    whole prompts (``disaggregated.prefill_memory``)."""
    col = lambda k: np.array([m.values[k] for m in members], dtype=float)   # noqa: E731
    isl, osl = col("isl"), col("osl")
    sides = []
    if mode == "agg":
        sides.append(("", memory_columns(ctx, col("tp"), col("adp"), col("pp"), col("moe_tp"), col("moe_ep"), isl, osl)))
    else:
        sides.append(("prefill worker: ", prefill_memory(ctx, col("prefill_tp"), col("prefill_adp"), col("prefill_pp"),
                                                        col("prefill_moe_tp"), col("prefill_moe_ep"),
                                                        np.maximum(col("prefill_batch"), 1.0), isl)[0]))
        sides.append(("decode worker: ", memory_columns(ctx, col("decode_tp"), col("decode_adp"), col("decode_pp"),
                                                        col("decode_moe_tp"), col("decode_moe_ep"), isl, osl)))
    out = [""] * len(members)
    for i in range(len(members)):
        for side, mem in sides:
            why = no_room_reason(mem, i, ctx.cluster.gpu.name)
            if why:
                # the weights' case says what it means for the row: the layout cannot serve
                out[i] = side + why + (": the layout cannot serve the model" if mem["kv_pool_bytes"][i] <= 0 else "")
                break
    return out


def _release_match(backend: str, version: str | None) -> ReleaseMatch:
    """The stack a row's (backend, backend_version) is priced on: a Dynamo container tag of a
    TensorRT-LLM row (``DYNAMO_TRTLLM_TAGS``) names its stack; every other version is a
    release of the framework (``serving_release_match``)."""
    numbers = release_numbers(version) if version is not None else None
    if framework_key(backend) == "trtllm" and numbers is not None and numbers[:2] in DYNAMO_TRTLLM_TAGS:
        return ReleaseMatch(load_stack(DYNAMO_TRTLLM_TAGS[numbers[:2]]))
    return serving_release_match(backend, version)


def prepare(df: pd.DataFrame) -> Prepared:
    """Map every row to a group (or a skip reason); done once, evaluated many times by the fitter."""
    rows, skipped, models = _prepare(df)
    n = len(df)
    reason = np.array([""] * n, dtype=object)
    assumption = np.array([""] * n, dtype=object)
    for i, why in skipped.items():
        reason[i] = why
    by_key: dict[tuple, list[_Row]] = {}
    for row in rows:
        by_key.setdefault(row.key, []).append(row)
        assumption[row.index] = row.values["assumption"]
    groups = []
    for key, members in by_key.items():
        preset, system, stack, dense, expert, mode = key
        try:
            # the measured runs served quantised checkpoints: aiconfigurator's silicon rows in fp8 /
            # nvfp4 ran NVIDIA's ModelOpt exports (whose hf_quant_config.json names an FP8 KV
            # cache), never a 16-bit release quantised at load time, so a stack that reads the KV
            # dtype from the checkpoint priced them with an FP8 KV cache
            ctx = ServingContext.build(models[preset], load_cluster(system), stack, dense, expert, prequantised=True)
        except InputError as exc:
            for m in members:
                reason[m.index] = str(exc)
            continue
        why = _no_room(ctx, mode, members)
        if mode == "agg":
            why = [w or a for w, a in zip(why, _attention_dp_ambiguity(ctx, members))]
        for m, w in zip(members, why):
            if w:
                reason[m.index] = w
        members = [m for m, w in zip(members, why) if not w]
        if not members:
            continue
        cols = {k: np.array([m.values[k] for m in members], dtype=float)
                for k in members[0].values if k not in _ROW_ONLY}
        groups.append(Group(ctx, mode, np.array([m.index for m in members]), cols))
    return Prepared(n, groups, reason, assumption)


def evaluate_prepared(prep: Prepared, efficiency: Mapping[str, ServingEfficiency] | None = None,
                      generations: set[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT ms, TPOT ms) per row, NaN where skipped or outside ``generations``."""
    from dataclasses import replace
    ttft = np.full(prep.n, np.nan)
    tpot = np.full(prep.n, np.nan)
    for g in prep.groups:
        if generations is not None and g.generation not in generations:
            continue
        ctx = g.context
        if efficiency and g.generation in efficiency:
            ctx = replace(ctx, efficiency=efficiency[g.generation])
        out = evaluate_agg_columns(ctx, g.columns) if g.mode == "agg" else evaluate_disagg_columns(ctx, g.columns)
        ttft[g.index] = out["ttft_s"] * 1e3
        tpot[g.index] = out["tpot_s"] * 1e3
    return ttft, tpot


def predict(df: pd.DataFrame, efficiency: Mapping[str, ServingEfficiency] | None = None,
            progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """Predicted TTFT and TPOT (ms) per row, NaN where skipped; columns ``pred_ttft_ms``,
    ``pred_tpot_ms``, ``generation``, ``reason``, ``assumption``. ``efficiency`` overrides the
    serving efficiency per GPU generation (the fitter's candidates)."""
    prep = prepare(df)
    ttft, tpot = evaluate_prepared(prep, efficiency)
    generation = np.array([""] * prep.n, dtype=object)
    for g in prep.groups:
        generation[g.index] = g.generation
        if progress is not None:
            progress(len(g.index))
    return pd.DataFrame({"pred_ttft_ms": ttft, "pred_tpot_ms": tpot, "generation": generation,
                         "reason": prep.reason, "assumption": prep.assumption}, index=df.index)


#: the shortest TTFT or TPOT a row may state: no engine answers in less than a microsecond (a
#: smaller cell is damage, and its relative error would print as inf)
MIN_MEASURED_MS = 1e-3
#: the longest: a day (a larger cell is damage; 1e308 was scored as a -100% error)
MAX_MEASURED_MS = 86_400_000.0


def validate_rows(df: pd.DataFrame, efficiency=None, progress=None) -> pd.DataFrame:
    """One record per (row, metric): id, metric, status (ok | skipped), predicted, measured,
    rel_error = (predicted - measured) / measured, reason, plus the row's backend, system, mode,
    model and generation for grouping."""
    pred = predict(df, efficiency, progress)
    records = []
    first_of: dict[str, int] = {}
    for n, ((i, r), p) in enumerate(zip(df.iterrows(), pred.to_dict("records"))):
        rid = id_text(r.get("id"))
        repeat = rid in first_of if rid else False     # a copied row was scored twice under one id
        first_of.setdefault(rid, n)
        for metric, col, pcol in (("ttft_ms", "silicon_ttft_ms", "pred_ttft_ms"), ("tpot_ms", "silicon_tpot_ms", "pred_tpot_ms")):
            measured = _num(r.get(col))
            predicted = float("nan") if repeat else p[pcol]
            if repeat:
                p = {**p, "reason": f"id {rid} repeats data row {first_of[rid] + 1}"}
            # one output token has no time per output token (the engines report none; TPOT is 0 here)
            no_tpot = metric == "tpot_ms" and not math.isnan(predicted) and _num(r.get("osl")) == 1
            plausible = MIN_MEASURED_MS <= measured <= MAX_MEASURED_MS
            ok = not math.isnan(predicted) and plausible and not no_tpot
            reason = p["reason"] if not ok else ""
            if no_tpot:
                reason = "osl 1: a request of one output token has no time per output token"
            elif not math.isnan(predicted) and math.isnan(measured) and _not_a_number(r.get(col)):
                reason = f"{col} {id_text(r.get(col))[:40]!r} is not a number"      # as validate published says
            elif not math.isnan(predicted) and not measured > 0:
                reason = f"measured {metric} missing or <= 0"
            elif not math.isnan(predicted) and measured > MAX_MEASURED_MS:
                reason = f"measured {metric} {measured:g} is above {MAX_MEASURED_MS:g} ms (a day), not a measurement"
            elif not math.isnan(predicted) and not ok:
                reason = f"measured {metric} {measured:g} is below {MIN_MEASURED_MS:g} ms, not a measurement"
            records.append({
                "id": r.get("id"), "data_row": n + 1, "metric": metric, "status": "ok" if ok else "skipped",
                "predicted": float(predicted) if ok else None, "measured": measured if plausible else None,
                "rel_error": (predicted - measured) / measured if ok else None, "reason": reason,
                # in lower case, as they are priced: a 'VLLM' / 'AGG' row was a summary line of its own
                "backend": id_text(r.get("backend")).lower() or EMPTY_CELL,
                "system": id_text(r.get("system")).lower() or EMPTY_CELL,
                "mode": id_text(r.get("mode")).lower() or EMPTY_CELL,
                "model": id_text(r.get("model_path")) or EMPTY_CELL,
                "generation": p["generation"], "assumption": p["assumption"],
            })
    return pd.DataFrame.from_records(records)


GROUP_KEYS = ("backend", "system", "mode", "model")
#: how a row's empty backend / system / mode / model cell is shown (never as "nan")
EMPTY_CELL = "(empty)"


def summarize(results: pd.DataFrame, by=GROUP_KEYS) -> pd.DataFrame:
    """Per group: rows used and skipped, mean and worst |error| of TTFT and TPOT, in percent."""
    out = []
    for key, g in results.groupby(list(by), dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rec = dict(zip(by, key))
        # counted by position: an id may be empty or repeated (a repeat is skipped)
        ok_rows = set(g[g.status == "ok"].data_row)
        rec["rows_used"] = len(ok_rows)
        rec["rows_skipped"] = int(g.data_row.nunique() - len(ok_rows))
        for metric in METRICS:
            err = g[(g.metric == metric) & (g.status == "ok")].rel_error.astype(float).abs() * 100
            rec[f"{metric.removesuffix('_ms')}_mean_abs_err_pct"] = float(err.mean()) if len(err) else math.nan
            rec[f"{metric.removesuffix('_ms')}_worst_abs_err_pct"] = float(err.max()) if len(err) else math.nan
        out.append(rec)
    return pd.DataFrame.from_records(out)


def concurrency_of(source: str) -> float:
    """The ``silicon_concurrency=N`` a row's ``silicon_data_source`` states, NaN if absent."""
    m = re.search(r"silicon_concurrency=(\d+)", str(source))
    return float(m.group(1)) if m else math.nan
