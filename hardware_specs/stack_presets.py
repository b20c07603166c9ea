"""A framework release's own performance presets: which parallel layout it runs each model in,
on each GPU kind, in each precision (data: ``stacks/megatron_bridge_presets.csv``, one row per
release x preset, written by ``tools/megatron_bridge_presets.py`` from the releases' own code; see
``stacks/README.md``, "Megatron-Bridge performance presets per release").

A release's performance page reports runs of these presets. When a published run leaves its
precision unstated but its layout (GPUs, TP, PP, CP, EP, virtual stages, micro and global batch,
Megatron-FSDP or not) is the layout of that release's presets for the model and GPU kind in one
precision only, the run's precision is that preset's: a fact of the release, read from its files
(``precision_of_layout``). Layouts the release runs in several precisions say nothing.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from hardware_specs.stack_spec import StackSpec, model_key

PRESETS_CSV = Path(__file__).resolve().parent / "stacks" / "megatron_bridge_presets.csv"
#: the framework whose presets the file lists
PRESET_FRAMEWORK = "megatron-bridge"
#: the releases' compute-dtype names in the order the stack files take their primary preset (the
#: summary pages' "FP8" is current scaling, FP8-CS; tools/megatron_bridge_stacks.py)
COMPUTE_ORDER = ("bf16", "fp8_cs", "fp8_sc", "fp8_ss", "fp8_ds", "fp8_mx", "nvfp4")


@dataclass(frozen=True)
class Layout:
    """A run's parallel layout as a preset states it (virtual stages 1 = not interleaved)."""

    n_gpus: int
    tp: int
    pp: int
    cp: int
    ep: int
    vpp: int
    micro_batch: int
    global_batch: int
    fsdp: bool


@dataclass(frozen=True)
class MemorySavings:
    """What a preset trades compute for memory with (the release's recipe values, Megatron's
    names): ``recompute`` granularity (``""`` none, ``selective``, ``full``), ``recompute_method``
    and ``recompute_num_layers`` (full), ``recompute_modules`` (selective: Megatron's
    ``--recompute-modules`` names, e.g. ``layernorm``, ``moe_act``, ``mla_up_proj``, ``mlp``,
    ``moe``), ``offload_layers`` (Transformer Engine activation offloading,
    ``cpu_offloading_num_layers``; 0 = none), ``distributed_optimizer`` (Megatron's
    ``use_distributed_optimizer``: optimizer states sharded over data parallelism, ZeRO-1) and
    ``fp8_param_gather`` (an FP8 / MXFP8 preset keeps its layers' weights only quantised; None
    where the preset's precision has no such switch)."""

    recompute: str = ""
    recompute_method: str = ""
    recompute_num_layers: int = 0
    recompute_modules: tuple = ()
    offload_layers: int = 0
    distributed_optimizer: bool = True
    fp8_param_gather: bool | None = None


@dataclass(frozen=True)
class Preset:
    """One performance preset of one release: model recipe, GPU kind, paraplan dtype
    (``bf16``, ``fp8``, ``mxfp8``, ``nvfp4``), the release's compute-dtype name, layout, source,
    and its recomputation / activation offloading (``MemorySavings``)."""

    container: str
    model: str          # model_key of the Bridge recipe name, e.g. "llama31405b"
    gpu: str
    dtype: str
    compute_dtype: str
    layout: Layout
    source: str
    savings: MemorySavings = MemorySavings()


def _int(text: str, default: int = 1) -> int:
    text = (text or "").strip()
    return int(float(text)) if text else default


@lru_cache(maxsize=1)
def all_presets(path: str = str(PRESETS_CSV)) -> tuple[Preset, ...]:
    """Every executed preset in the file (rows noted 'not executed' have no layout to trust)."""
    out = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if "not executed" in row.get("note", ""):
                continue
            layout = Layout(n_gpus=_int(row["n_gpus"]), tp=_int(row["tp"]), pp=_int(row["pp"]),
                            cp=_int(row["cp"]), ep=_int(row["ep"]), vpp=_int(row["vpp"]),
                            micro_batch=_int(row["micro_batch"]), global_batch=_int(row["global_batch"]),
                            fsdp=row["megatron_fsdp"].strip().lower() == "true")
            savings = MemorySavings(
                recompute=(row.get("recompute_granularity") or "").strip().lower(),
                recompute_method=(row.get("recompute_method") or "").strip().lower(),
                recompute_num_layers=_int(row.get("recompute_num_layers", ""), 0),
                recompute_modules=tuple(sorted(m.strip() for m in (row.get("recompute_modules") or "").split("|")
                                               if m.strip())),
                offload_layers=_int(row.get("cpu_offloading_layers", ""), 0),
                distributed_optimizer=(row.get("use_distributed_optimizer") or "").strip().lower() == "true",
                fp8_param_gather={"true": True, "false": False}.get((row.get("fp8_param_gather") or "").strip().lower()))
            out.append(Preset(container=row["container"].strip(), model=model_key(row["recipe"]),
                              gpu=row["gpu"].strip().lower(), dtype=row["dtype"].strip().lower(),
                              compute_dtype=row["compute_dtype"].strip(), layout=layout,
                              source=row["source"].strip(), savings=savings))
    return tuple(out)


def presets_for(stack: StackSpec, model_name: str, gpu: str) -> tuple[Preset, ...]:
    """The presets of the releases ``stack`` describes for ``model_name`` on ``gpu`` (empty for a
    stack whose framework publishes no preset file)."""
    if stack.framework != PRESET_FRAMEWORK:
        return ()
    versions, key, gpu = set(stack.versions), model_key(model_name), str(gpu).lower()
    return tuple(p for p in _presets_by_model_gpu().get((key, gpu), ()) if p.container in versions)


@lru_cache(maxsize=1)
def _presets_by_model_gpu() -> Mapping[tuple[str, str], tuple[Preset, ...]]:
    """``all_presets`` by (model key, GPU kind), each in file order, read-only: built once
    rather than scanning every preset per call (validation asks for every row)."""
    out: dict[tuple[str, str], tuple[Preset, ...]] = {}
    for p in all_presets():
        out[(p.model, p.gpu)] = out.get((p.model, p.gpu), ()) + (p,)
    return MappingProxyType(out)


def precision_of_layout(stack: StackSpec, model_name: str, gpu: str, layout: Layout) -> tuple[set, tuple]:
    """(paraplan dtypes, presets) of the release's presets for the model and GPU kind whose layout
    is ``layout`` (presets in ``COMPUTE_ORDER``): one dtype = the run's precision; several =
    ambiguous; none = no such preset."""
    matches = sorted((p for p in presets_for(stack, model_name, gpu) if p.layout == layout),
                     key=lambda p: (COMPUTE_ORDER.index(p.compute_dtype) if p.compute_dtype in COMPUTE_ORDER
                                    else len(COMPUTE_ORDER), p.source))
    return {p.dtype for p in matches}, tuple(matches)


def memory_savings_of_layout(stack: StackSpec, model_name: str, gpu: str, layout: Layout, dtype: str,
                             container: str | None = None) -> tuple[MemorySavings | None, tuple]:
    """(savings, presets): the memory settings (``MemorySavings``) of the release's presets
    for the model and GPU kind that run ``layout`` in ``dtype`` (only release ``container`` when
    the file has presets of it), when they all agree; ``None`` when no preset runs that layout
    in that precision or they disagree (the release then says nothing about the run). A layout
    no preset runs at its global batch takes the presets with every other degree equal: what a
    GPU holds depends on its micro-batch and degrees, and the releases' pages publish some
    presets at a larger global batch than their code's default."""
    candidates = [p for p in presets_for(stack, model_name, gpu) if p.dtype == dtype]
    matches = [p for p in candidates if p.layout == layout]
    if not matches:
        matches = [p for p in candidates if replace(p.layout, global_batch=layout.global_batch) == layout]
    if container is not None and any(p.container == container for p in matches):
        matches = [p for p in matches if p.container == container]
    found = {p.savings for p in matches}
    if len(found) != 1:
        return None, tuple(matches)
    return found.pop(), tuple(matches)
