"""A serving sweep specification: the grid of serving what-ifs one ``paraplan sweep SPEC.yaml``
with ``kind: serving`` evaluates, each point ``paraplan serve plan``'s best deployment::

    kind: serving
    search: best                  # the only serving search: serve plan's best layout per point
    models: [llama3.1-70b, deepseek-r1]
    systems: [dgx-h100, dgx-b200]
    gpus: [8, 16]                 # GPUs the deployment may use
    backends: [vllm, sglang]      # engines (a framework or a stack name; default vllm)
    isl: [1024, 8192]             # prompt tokens per request (default 1024)
    osl: [1024]                   # output tokens per request (default 1024)
    ttft_ms: [1000]               # time-to-first-token objective, ms (default 1000)
    tpot_ms: [30, 50]             # time-per-output-token objective, ms (default 50)
    precisions: [auto, fp8]       # weight formats (auto: serve plan's default; default auto)
    modes: [both]                 # agg, disagg or both (default both)
    chunk_points: 4               # points per task (each a serve plan search; default 4)

Points are the product of the axes in that order (models outermost, modes innermost); the
result has one row per point: the point's values, then the winning deployment (mode, layouts,
batch, workers, TTFT / TPOT in ms, tokens/s per GPU and per user), or its status and the
one-line reason no layout met the objective. Unknown keys, empty or repeated axes and wrong
types are ``InputError``s naming the key.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from cost_models.weight_formats import WEIGHT_FORMATS
from hardware_specs.errors import InputError, shown, suggest, whole_number, yaml_exponent_hint
from paraplan.sweeps.spec import DEFAULT_BEST_CHUNK_POINTS, _refuse_repeats
from planners.serving.search import MAX_GPUS as SERVING_MAX_GPUS

#: the weight formats an axis may name besides ``auto`` (``paraplan serve plan --precision``)
SERVING_PRECISIONS = ("auto",) + WEIGHT_FORMATS
#: what ``modes`` may list, and the searched modes of each
SERVING_MODES = {"agg": ("agg",), "disagg": ("disagg",), "both": ("agg", "disagg")}
#: the axes with their defaults (None: required)
SERVING_AXES = {"models": None, "systems": None, "gpus": None, "backends": ("vllm",), "isl": (1024,),
                "osl": (1024,), "ttft_ms": (1000.0,), "tpot_ms": (50.0,), "precisions": ("auto",),
                "modes": ("both",)}
SERVING_KEYS = ("kind", "search", "chunk_points", "description") + tuple(SERVING_AXES)
#: largest values of the whole-number axes (``serve plan``'s own bounds: 2^24 GPUs or tokens)
_MAX_WHOLE = 2**24
#: most points one serving spec may hold (each is a plan search of ~0.1-1 s)
MAX_SERVING_POINTS = 100_000


@dataclass(frozen=True)
class ServingSweepSpec:
    """A validated serving sweep grid (see the module docstring for the keys)."""

    models: tuple[str, ...]
    systems: tuple[str, ...]
    gpus: tuple[int, ...]
    backends: tuple[str, ...] = ("vllm",)
    isl: tuple[int, ...] = (1024,)
    osl: tuple[int, ...] = (1024,)
    ttft_ms: tuple[float, ...] = (1000.0,)
    tpot_ms: tuple[float, ...] = (50.0,)
    precisions: tuple[str, ...] = ("auto",)
    modes: tuple[str, ...] = ("both",)
    chunk_points: int = DEFAULT_BEST_CHUNK_POINTS
    description: str = ""
    kind: str = "serving"
    search: str = "best"
    #: what the runner's chunk key and evaluation read of a training spec (none here)
    config: Mapping[str, tuple] = field(default_factory=dict)
    dtypes: tuple = ()

    def __post_init__(self) -> None:
        if self.kind != "serving":
            raise InputError("kind", f"a serving sweep has kind serving, got {shown(self.kind)}")
        if self.search != "best":
            raise InputError("search", f"a serving sweep searches best (serve plan's best deployment per point), "
                             f"got {shown(self.search)}",
                             "use search: best; one deployment over many values: paraplan.serving_api.serve_sweep")
        for name in SERVING_AXES:
            values = getattr(self, name)
            if not values:
                raise InputError(name, "is empty", "list at least one value")
            # LLAMA3.1-8B is llama3.1-8b
            _refuse_repeats(name, values, key=lambda v: v.strip().lower() if isinstance(v, str) else repr(v))
        for p in self.precisions:
            if p not in SERVING_PRECISIONS:
                raise InputError("precisions", f"unknown weight format {p!r}", suggest(p, SERVING_PRECISIONS))
        for m in self.modes:
            if m not in SERVING_MODES:
                raise InputError("modes", f"unknown mode {m!r}", "choose agg, disagg or both")
        for o in self.osl:
            if o < 2:
                raise InputError("osl", f"must be 2 or more, got {o}", "the first token comes with the prompt; "
                                 "TPOT times the rest")
        if not 1 <= self.chunk_points <= 1_000_000:
            raise InputError("chunk_points", f"must be between 1 and 1,000,000, got {shown(self.chunk_points)}")
        if self.n_points > MAX_SERVING_POINTS:
            raise InputError("spec", f"{self.n_points:,} points, more than {MAX_SERVING_POINTS:,} "
                             "(each is a serve plan search)", "sweep fewer values")

    @property
    def n_points(self) -> int:
        return math.prod(len(getattr(self, name)) for name in SERVING_AXES)

    def points(self) -> Iterator[dict]:
        """Every point as a dict of its axis values (singular keys), in order."""
        for (model, system, gpus, backend, isl, osl, ttft, tpot, precision, mode) in itertools.product(
                *(getattr(self, name) for name in SERVING_AXES)):
            yield {"model": model, "system": system, "gpus": gpus, "backend": backend, "isl": isl, "osl": osl,
                   "ttft_ms": ttft, "tpot_ms": tpot, "precision": precision, "modes": mode}


def _axis(data: Mapping, key: str) -> tuple:
    raw = data.get(key)
    if raw is None:
        return SERVING_AXES[key] or ()
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for item in items:
        if key in ("gpus", "isl", "osl"):
            value = whole_number(key, item)
            most = SERVING_MAX_GPUS if key == "gpus" else _MAX_WHOLE     # serve plan's own bound on GPUs
            if value > most:
                raise InputError(key, f"expected whole numbers in [1, {most:,}], got {shown(item)}")
            out.append(value)
        elif key in ("ttft_ms", "tpot_ms"):
            if isinstance(item, bool) or not isinstance(item, (int, float)) or not math.isfinite(item) \
                    or not 0 < item <= 1e7:
                raise InputError(key, f"expected milliseconds in (0, 1e7], got {shown(item)}", yaml_exponent_hint(item))
            out.append(float(item))
        else:
            if isinstance(item, bool) or not isinstance(item, str) or not item.strip():
                raise InputError(key, f"expected names, got {shown(item)}")
            out.append(item.strip().lower() if key in ("precisions", "modes") else item.strip())
    return tuple(out)


def serving_spec_from_dict(data: Mapping[str, Any]) -> ServingSweepSpec:
    """A ``ServingSweepSpec`` from a parsed spec mapping (keys as in the module docstring)."""
    unknown = [str(k) for k in data if k not in SERVING_KEYS]
    if unknown:
        raise InputError(unknown[0], "not a key of a serving sweep", suggest(unknown[0], SERVING_KEYS))
    for key in ("models", "systems", "gpus"):
        if data.get(key) is None:
            raise InputError(key, "missing", f"list the {key} to sweep")
    chunk = data.get("chunk_points", DEFAULT_BEST_CHUNK_POINTS)
    if isinstance(chunk, bool) or not isinstance(chunk, int):
        raise InputError("chunk_points", f"expected a whole number, got {shown(chunk)}")
    for key in ("kind", "search", "description"):
        if key in data and not isinstance(data[key], str):
            raise InputError(key, f"expected text, got {shown(data[key])}")
    return ServingSweepSpec(**{name: _axis(data, name) for name in SERVING_AXES}, chunk_points=chunk,
                            description=data.get("description", ""), search=data.get("search", "best"))


def check_serving_names(spec: ServingSweepSpec) -> None:
    """The catalog's ``InputError`` under the axis's key for a model, system or engine that does
    not load (a misspelt name is the spec's error, found before the run)."""
    from hardware_specs.catalog import load_cluster, load_stack, serving_frameworks
    from model_specs.catalog import load_model
    for key, names, load in (("models", spec.models, load_model), ("systems", spec.systems, load_cluster)):
        for name in names:
            try:
                load(name)
            except InputError as exc:
                raise InputError(exc.field if "." in (exc.field or "") else key, exc.message, exc.fix) from None
    frameworks = serving_frameworks()
    for name in spec.backends:
        if name.strip().lower() in frameworks:
            continue
        try:
            stack = load_stack(name)
        except InputError:
            raise InputError("backends", f"unknown serving engine {name!r}",
                             suggest(name.strip().lower(), sorted(frameworks))) from None
        if stack.serving is None:
            raise InputError("backends", f"stack {stack.name} has no serving section",
                             "choose a serving stack: vllm, sglang or trtllm")
