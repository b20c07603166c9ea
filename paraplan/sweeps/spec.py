"""A sweep specification: the grid of what-ifs one ``paraplan sweep SPEC.yaml`` evaluates.

A spec file (YAML) lists, per axis, the values to try; every combination is one point::

    kind: training                 # training | serving (a serving grid: see serving_spec)
    search: best                   # best: the planner's best plan per point; simulate: each
                                   #   combination of the config grid below, simulated as given
    models: [llama3-8b, llama3-70b]
    clusters: [dgx-h100, dgx-a100-80gb]
    gpus: [64, 128, 256]
    global_batch_tokens: [1048576, 4194304]   # or global_batch: [sequences, ...]
    seq_len: [8192]                # optional (default: each model's)
    stacks: [megatron-core]        # software stacks (hardware_specs/stacks; default megatron-core,
                                   #   as paraplan simulate and plan)
    dtypes: [bf16]                 # GEMM dtypes (best: the planner tries each; simulate: an axis;
                                   #   default auto: each GPU's 16-bit type, bf16 or fp16 on V100)
    config:                        # simulate: a grid over ParallelConfig fields;
      tp: [1, 2, 4, 8]             # best: values the planner may use (like --fix)
      pp: [1, 2, 4]
    chunk_points: 500              # most points per task (one vectorized evaluation; default 500
                                   #   for simulate, 4 for best, whose points are a plan search each;
                                   #   content-defined cuts make chunks about half that on average)

Points are numbered in the order of that product (models outermost, config innermost); the
result has one row per point. Unknown keys, empty axes and wrong types are ``InputError``s
naming the key.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from hardware_specs.yaml_files import exists, is_file, parse_yaml
from hardware_specs.errors import InputError, as_given, check_spec_size, is_finite, shown, suggest
from model_specs.model_spec import SIZE_LIMITS
from planners.search_space import FIXABLE
from simulator.parallel_config import (MAX_GLOBAL_BATCH, MAX_GPUS, MAX_MOE_LOAD_IMBALANCE, AttentionKernel, CPKind,
                                      Recompute, Schedule)

#: what a point evaluates: a training step (``simulator``; this module's ``SweepSpec``) or a
#: serving deployment search (``serving_spec.ServingSweepSpec``: serve plan's best per point)
TRAINING_KINDS = ("training",)
SERVING_KINDS = ("serving",)
SEARCHES = ("best", "simulate")
#: ParallelConfig fields a spec's ``config`` may set (plus the planner's search in ``best``)
CONFIG_KEYS = ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "zero_stage", "recompute",
               "sequence_parallel", "schedule", "cp_kind", "attention_kernel", "overlap_grad_reduce",
               "overlap_param_gather", "tp_comm_overlap", "ep_comm_overlap", "ep_dispatch_dedup", "flash_attention",
               "grad_accumulation_fusion", "zero3_recompute_gather", "moe_load_imbalance", "zero_shard_group")
#: the config keys the planner can fix: its own list, so the two cannot drift
PLANNER_KEYS = tuple(FIXABLE)
#: the dtype a point runs unless the spec lists others: the cluster GPU's 16-bit type
#: (``cost_models.compute.sixteen_bit_dtype``), as ``paraplan simulate`` and ``plan`` default
AUTO_DTYPE = "auto"
_AXES = ("models", "clusters", "gpus", "global_batch", "global_batch_tokens", "seq_len", "stacks", "dtypes")
_KEYS = ("kind", "search", "config", "chunk_points", "description") + _AXES
#: most points one spec may hold (a typo in an axis should not start a week of work)
MAX_POINTS = 10_000_000
DEFAULT_CHUNK_POINTS = 500
#: a best point is a whole plan search (about 0.5 s for a dense 70B model on a 2-core machine), so
#: a best sweep's chunks are small: the progress bar moves every few seconds, not every 500 searches
DEFAULT_BEST_CHUNK_POINTS = 4



def _refuse_repeats(name: str, values, key=repr) -> None:
    """An axis listing a value twice (equal under ``key``) evaluates every point of it twice
    (identical rows)."""
    seen = set()
    for v in values or ():
        key_v = key(v)
        if key_v in seen:
            raise InputError(name, f"lists {v!r} twice", "list each value once")
        seen.add(key_v)

@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep grid (see the module docstring for the keys)."""

    models: tuple[str, ...]
    clusters: tuple[str, ...]
    gpus: tuple[int, ...]
    global_batch: tuple[int, ...] = ()
    global_batch_tokens: tuple[int, ...] = ()
    seq_len: tuple[int | None, ...] = (None,)
    stacks: tuple[str, ...] = ("megatron-core",)
    dtypes: tuple[str, ...] = (AUTO_DTYPE,)
    config: Mapping[str, tuple] = field(default_factory=dict)
    kind: str = "training"
    search: str = "best"
    chunk_points: int = DEFAULT_CHUNK_POINTS
    description: str = ""

    def __post_init__(self) -> None:
        if self.kind in SERVING_KINDS:
            raise InputError("kind", "a serving sweep is a serving_spec.ServingSweepSpec",
                             "build it with spec_from_dict({'kind': 'serving', ...})")
        if self.kind not in TRAINING_KINDS:
            raise InputError("kind", f"unknown kind {self.kind!r}", "use training or serving")
        if self.search not in SEARCHES:
            raise InputError("search", f"unknown search {self.search!r}", "use best or simulate")
        if bool(self.global_batch) == bool(self.global_batch_tokens):
            raise InputError("global_batch", "give global_batch (sequences) or global_batch_tokens, one of them")
        for name in ("models", "clusters", "gpus", "seq_len", "stacks", "dtypes", "global_batch",
                     "global_batch_tokens"):
            values = getattr(self, name)
            if not values and name not in ("global_batch", "global_batch_tokens"):
                raise InputError(name, "is empty", "list at least one value")
            _refuse_repeats(name, values)
        allowed = PLANNER_KEYS if self.search == "best" else CONFIG_KEYS
        for key, values in self.config.items():
            if key not in allowed:
                raise InputError(f"config.{key}", f"not a field a {self.search} sweep sets", suggest(key, allowed))
            if not values:
                raise InputError(f"config.{key}", "is empty", "list at least one value")
            _refuse_repeats(f"config.{key}", values)
        if not 1 <= self.chunk_points <= 1_000_000:
            raise InputError("chunk_points", f"must be between 1 and 1,000,000, got {shown(self.chunk_points)}")
        if self.n_points > MAX_POINTS:
            raise InputError("spec", f"{self.n_points:,} points, more than {MAX_POINTS:,}", "sweep fewer values")

    @property
    def batches(self) -> tuple[tuple[str, int], ...]:
        """(``global_batch`` or ``global_batch_tokens``, value) per batch of the grid."""
        key = "global_batch" if self.global_batch else "global_batch_tokens"
        return tuple((key, v) for v in (self.global_batch or self.global_batch_tokens))

    @property
    def config_grid(self) -> tuple[dict, ...]:
        """The config combinations of a simulate sweep (one empty dict for a best sweep)."""
        if self.search == "best" or not self.config:
            return ({},)
        keys = list(self.config)
        return tuple(dict(zip(keys, values)) for values in itertools.product(*(self.config[k] for k in keys)))

    @property
    def n_points(self) -> int:
        n = len(self.models) * len(self.clusters) * len(self.gpus) * len(self.batches) * len(self.seq_len) \
            * len(self.stacks)
        if self.search == "simulate":
            n *= len(self.dtypes)
            for values in self.config.values():
                n *= len(values)
        return n

    def points(self) -> Iterator[dict]:
        """Every point as a dict of its axis values (and ``config`` for a simulate sweep), in order."""
        dtypes = self.dtypes if self.search == "simulate" else (None,)
        for model, cluster, gpus, (bkey, batch), seq_len, stack, dtype in itertools.product(
                self.models, self.clusters, self.gpus, self.batches, self.seq_len, self.stacks, dtypes):
            for config in self.config_grid:
                yield {"model": model, "cluster": cluster, "gpus": gpus, bkey: batch, "seq_len": seq_len,
                       "stack": stack, "dtype": dtype, "config": config}


#: largest value of each integer axis (the bounds of ``ParallelConfig`` and ``ModelSpec``)
_LIMITS = {"gpus": MAX_GPUS, "global_batch": MAX_GLOBAL_BATCH, "global_batch_tokens": 2**62,
           "seq_len": SIZE_LIMITS["seq_len"]}


def _values(data: Mapping, key: str, kind, allow_none: bool = False) -> tuple:
    raw = data.get(key)
    if raw is None:
        return ()
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for item in items:
        if item is None and allow_none:
            out.append(None)
            continue
        if kind is int:
            if key == "global_batch_tokens" and isinstance(item, str):
                # as on the command line: 16Mi is 16,777,216 tokens, 4M is 4,000,000
                from paraplan.commands.token_count import parse_token_count
                parsed = parse_token_count(item[:40])
                if parsed is None or len(item) > 40:
                    raise InputError(key, f"{item[:40]!r} is not a token count", "write e.g. 4194304, 4Mi or 4M")
                if parsed > _LIMITS[key]:
                    raise InputError(key, f"{parsed:,} is above the largest supported value {_LIMITS[key]:,}",
                                     "check the number")
                item = parsed
            # an int is whole however large: math.isfinite(10**400) raises OverflowError, so only a
            # float is asked whether it is finite (a huge int is then above the axis's limit)
            if isinstance(item, bool) or not isinstance(item, (int, float)) \
                    or (isinstance(item, float) and not math.isfinite(item)) or item != int(item) or item < 1:
                raise InputError(key, f"expected whole numbers >= 1, got {shown(item)}")
            if int(item) > _LIMITS[key]:
                raise InputError(key, f"{as_given(item)} is above the largest supported value {_LIMITS[key]:,}",
                                 "check the number")
            out.append(int(item))
        elif kind is str:
            if isinstance(item, bool) or not isinstance(item, (str, int)):
                raise InputError(key, f"expected names, got {shown(item)}")
            out.append(str(item))
    return tuple(out)


_INT_CONFIG = ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "zero_stage", "zero_shard_group")
#: config keys that take one of a few names: a misspelt one is the spec's error (ParallelConfig's
#: own check and message), not a column of invalid rows
_ENUM_CONFIG = {"recompute": Recompute, "schedule": Schedule, "cp_kind": CPKind, "attention_kernel": AttentionKernel}
_BOOL_CONFIG = ("sequence_parallel", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
                "ep_comm_overlap", "ep_dispatch_dedup", "flash_attention", "grad_accumulation_fusion",
                "zero3_recompute_gather")


def _config_values(value: Any, key: str) -> tuple:
    """The values of one config axis, each of the type its ``ParallelConfig`` field takes (their
    ranges are the configuration's to check, point by point)."""
    if key not in CONFIG_KEYS:      # before its values: a misspelt key is named as such
        raise InputError(f"config.{key}", "not a field a sweep sets", suggest(key, CONFIG_KEYS))
    items = value if isinstance(value, list) else [value]
    for item in items:
        if key in _INT_CONFIG:
            ok = not isinstance(item, bool) and isinstance(item, (int, float)) \
                and (isinstance(item, int) or math.isfinite(item)) and item == int(item)
            what = "whole numbers"
        elif key in _BOOL_CONFIG:
            ok, what = isinstance(item, bool), "true or false"
        elif key == "moe_load_imbalance":
            number = not isinstance(item, bool) and isinstance(item, (int, float))
            ok = number and is_finite(item)
            what = "finite numbers"
            # outside [1, MAX] no point of the grid can run (ParallelConfig's bound, whatever the
            # model): the spec's error before anything starts, as a degree below 1 is, not a sweep
            # of 'invalid' rows (0, -1 and 1e23 ran the grid; only 10**400, too large for a float
            # and so not finite, was refused here)
            if number and (isinstance(item, int) or ok) and not 1 <= item <= MAX_MOE_LOAD_IMBALANCE:
                if item > 1:
                    raise InputError(f"config.{key}", f"{as_given(item)} is above the largest supported value "
                                     f"{MAX_MOE_LOAD_IMBALANCE:,}", "check the number")
                raise InputError(f"config.{key}", f"must be between 1 (perfectly balanced) and "
                                 f"{MAX_MOE_LOAD_IMBALANCE:,}, got {shown(item)}")
        else:
            ok, what = isinstance(item, str), "names"
        if not ok:
            raise InputError(f"config.{key}", f"expected {what}, got {shown(item)}")
        if key in _INT_CONFIG:
            # no point of the grid can run a degree or micro-batch below 1 or a ZeRO stage past 3
            # (a ZeRO shard group of 0 shards over every data-parallel rank)
            low, high = {"zero_stage": (0, 3), "zero_shard_group": (0, None)}.get(key, (1, None))
            if item < low or (high is not None and item > high):
                raise InputError(f"config.{key}", f"{shown(item)} is out of range",
                                 {"zero_stage": "ZeRO stages are 0 to 3",
                                  "zero_shard_group": "a ZeRO shard group is 0 (every rank) or >= 1 ranks"}.get(
                                     key, "degrees and micro-batches are >= 1"))
            if high is None and item > MAX_GPUS:
                # ParallelConfig's bound (and the CLI's): above it the product of the degrees
                # overflowed numpy's integers deep in the run, after its chunk folder was made
                raise InputError(f"config.{key}", f"{as_given(item)} is above the largest supported value {MAX_GPUS:,}",
                                 "check the number")
        names = [e.value for e in _ENUM_CONFIG.get(key, ())]
        if names and str(item).lower() not in names:
            raise InputError(f"config.{key}", f"unknown value {item!r}", "choose one of " + ", ".join(names))
    # enum names are matched whatever their case, as ParallelConfig does; kept lower-case so the
    # checks that compare them (refuse_options_without_effect) see one spelling
    return tuple(int(i) if key in _INT_CONFIG else str(i).lower() if key in _ENUM_CONFIG else i for i in items)


def spec_from_dict(data: Mapping[str, Any]):
    """A ``SweepSpec`` from a parsed spec mapping (keys as in the module docstring); with
    ``kind: serving`` a ``serving_spec.ServingSweepSpec``."""
    if not isinstance(data, Mapping):
        raise InputError("spec", "must be a mapping of keys (models:, clusters:, gpus:, ...)")
    kind = data.get("kind", "training")
    if not isinstance(kind, str) or kind not in TRAINING_KINDS + SERVING_KINDS:
        # before the keys: a spec of the other kind is named as an unknown kind, not by its keys
        raise InputError("kind", f"unknown kind {kind!r}", "use training or serving (lower case)")
    if kind in SERVING_KINDS:
        from paraplan.sweeps.serving_spec import serving_spec_from_dict
        return serving_spec_from_dict(data)
    unknown = [str(k) for k in data if k not in _KEYS]
    if unknown:
        raise InputError(unknown[0], "unknown key", suggest(unknown[0], _KEYS))
    config = data.get("config") or {}
    if not isinstance(config, Mapping):
        raise InputError("config", "must be a mapping of ParallelConfig field: values")
    best = data.get("search", "best") == "best"
    chunk = data.get("chunk_points", DEFAULT_BEST_CHUNK_POINTS if best else DEFAULT_CHUNK_POINTS)
    if isinstance(chunk, bool) or not isinstance(chunk, int):
        raise InputError("chunk_points", f"expected a whole number, got {shown(chunk)}")
    for key in ("kind", "search", "description"):
        if key in data and not isinstance(data[key], str):
            raise InputError(key, f"expected text, got {shown(data[key])}")
    return SweepSpec(
        models=_values(data, "models", str), clusters=_values(data, "clusters", str), gpus=_values(data, "gpus", int),
        global_batch=_values(data, "global_batch", int), global_batch_tokens=_values(data, "global_batch_tokens", int),
        seq_len=_values(data, "seq_len", int, allow_none=True) or (None,),
        stacks=_values(data, "stacks", str) or ("megatron-core",),
        dtypes=_values(data, "dtypes", str) or (AUTO_DTYPE,),
        config={str(k): _config_values(v, str(k)) for k, v in config.items()},
        kind=data.get("kind", "training"), search=data.get("search", "best"), chunk_points=chunk,
        description=data.get("description", ""))


def check_names(spec: SweepSpec) -> None:
    """Raise the catalog's ``InputError`` (with its did-you-mean), under the axis's key, for a
    model, cluster or stack the spec names that does not load: a misspelt name is the spec's
    error, not a column of invalid rows found after the run."""
    if spec.kind in SERVING_KINDS:
        from paraplan.sweeps.serving_spec import check_serving_names
        check_serving_names(spec)
        return
    from hardware_specs.catalog import load_cluster, load_stack
    from model_specs.catalog import load_model
    from hardware_specs.gpu_spec import KNOWN_DTYPES
    for dtype in spec.dtypes:
        if dtype != AUTO_DTYPE and dtype not in KNOWN_DTYPES:
            raise InputError("dtypes", f"unknown dtype {dtype!r}", suggest(dtype, (AUTO_DTYPE,) + KNOWN_DTYPES))
    for key, names, load in (("models", spec.models, load_model), ("clusters", spec.clusters, load_cluster),
                             ("stacks", spec.stacks, load_stack)):
        for name in names:
            try:
                load(name)
            except InputError as exc:
                # the catalog's own field when it names one inside the file (a model file's
                # hidden_size), else the axis (a misspelt name)
                raise InputError(exc.field if "." in (exc.field or "") else key, exc.message, exc.fix) from None


def load_spec(path: str | Path) -> SweepSpec:
    """Read a sweep spec YAML file (the catalog's safe reader: no anchors bombs, no tags)."""
    p = Path(path)
    if exists(p) and not is_file(p):   # a FIFO blocks on open and /dev/zero never ends: read neither
        raise InputError("spec", f"{path} is not a regular file", "give a sweep spec YAML file")
    check_spec_size(p, "spec")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError("spec", f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError("spec", f"{path} is not UTF-8 text", "save it as UTF-8") from None
    return spec_from_dict(parse_yaml(text, "spec", p))
