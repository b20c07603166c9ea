"""Load GPU, cluster and efficiency profiles from YAML files (the catalogs are data).

Built-in entries live in ``hardware_specs/gpus``, ``hardware_specs/clusters`` and
``hardware_specs/efficiency``, one file per entry. A user adds hardware by dropping a file in
one of those folders, in a folder named by the ``PARAPLAN_HARDWARE_PATH`` environment variable
(``:``-separated; each folder holds ``gpus/``, ``clusters/`` and/or ``efficiency/``), or by passing
a file path wherever a name is accepted.

File units are human units named in the key (``peak_tflops``, ``hbm_gib``, ``bw_gbit_per_s``,
``latency_us``); the loaders convert to SI (FLOP/s, bytes, bytes/s, seconds).

GPU file keys: name, vendor, generation, peak_tflops {dtype: TFLOP/s dense}, hbm_gib (or hbm_gb),
hbm_bw_tb_per_s, scaleup_bw_gb_per_s (per GPU, one direction), scaleup_domain_size, source,
and optionally sfu_tera_exp_per_s (special-function-unit exponentials per second, 1e12/s) and
sm_count (streaming multiprocessors / compute units) and sync_mma_peak_fraction (share of the
tensor peak reached by warp-synchronous mma.sync, default 1) and sustained_tensor_fraction (share
of the datasheet's dense tensor rates the part holds where runs of the same software measure it
below them, default 1).

Cluster file keys: name, description, gpu (a catalog name, or an inline GPU mapping),
efficiency (optional inline efficiency mapping, as ``paraplan calibrate`` writes), gpus_per_node, scaleup {kind, bw_gb_per_s,
latency_us} (optional: defaults to the GPU's link), scaleout {kind, bw_gbit_per_s or
bw_gb_per_s, latency_us, and optionally communicator_busbw_gb_per_s: the most bus bandwidth one
NCCL communicator was measured to reach across nodes, where the fabric's collectives fall short
of its links}, rail_optimized, oversubscription, max_gpus, source, and optionally host
{link, link_bw_gb_per_s (per GPU, one direction), memory_gib (per node), memory_bw_gb_per_s (per
node), source} for offload, and gpus_per_host (GPUs one host drives, for the launch exports, where a
scale-up domain spans several hosts; default gpus_per_node).

Pooled cluster files (a mixed cluster) list ``pools`` instead: each pool has a name, ``gpus`` (its
GPU count) and either ``cluster`` (a catalog cluster or file giving its GPU and fabric; other keys
of the pool override that file's) or the cluster keys above inline; ``links`` optionally list
the network between two pools: ``between: [a, b]``, ``bw_gbit_per_s`` (or ``bw_gb_per_s``) per
GPU one direction, ``latency_us``, ``kind``. Pools without a link use the slower of their
scale-out tiers (``hardware_specs.pools``). ``load_cluster`` refuses a pooled file (it is not
one ``ClusterSpec``); ``load_pooled_cluster`` reads both kinds.

Stack file keys (``hardware_specs/stacks``): name, framework, versions (list, spelled as the
validation files spell ``framework_version``), description, default_when_version_unstated and
unstated_version_reason (optional), training {behaviour: value or {value, source}}, serving
{...}; see ``stack_spec.py``. ``stack_for(framework, version)`` maps a run to its stack.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from hardware_specs.cluster_spec import MAX_LATENCY_S, ClusterSpec, HostSpec, NetworkTier
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError, check_name, check_spec_size, not_a_file, require_plausible, require_positive, suggest
from hardware_specs.gpu_spec import MAX_HBM_BYTES, MAX_RATE_PER_S, MIN_HBM_BYTES, MIN_RATE_PER_S, GPUSpec
from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.serving_efficiency import ServingEfficiency
from hardware_specs.pools import Pool, PooledCluster, PoolLink
from hardware_specs.release_match import ReleaseMatch, match_release
from hardware_specs.stack_spec import RecipeOverride, StackSpec, TrainingBehaviour

BUILTIN_DIR = Path(__file__).resolve().parent
GIB = 2**30


def _search_dirs(kind: str) -> list[Path]:
    dirs = [BUILTIN_DIR / kind]
    for extra in os.environ.get("PARAPLAN_HARDWARE_PATH", "").split(os.pathsep):
        if extra:
            dirs.append(Path(extra) / kind)
    return dirs


#: most values a catalog file may hold once its aliases are expanded (the largest built-in file
#: has about a hundred): a few anchors can otherwise stand for billions of values ("billion
#: laughs"), which any later walk over the data would take minutes to visit
MAX_YAML_VALUES = 100_000


def _expanded_size(node, memo: dict, limit: int, depth: int = 0) -> int:
    """Values a composed YAML node stands for with every alias expanded (stops past ``limit``)."""
    key = id(node)
    if key in memo:
        if memo[key] is None:
            raise InputError("yaml", "an anchor refers to itself (a recursive structure)",
                             "write the values out instead of using an alias")
        return memo[key]
    if depth > 200:
        raise InputError("yaml", "values nested more than 200 deep", "flatten the file")
    memo[key] = None
    total = 1
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [x for pair in node.value for x in pair]
    else:
        children = []
    for child in children:
        total += _expanded_size(child, memo, limit, depth + 1)
        if total > limit:
            break
    memo[key] = total
    return total


def _repeated_key(node) -> Any:
    """The second occurrence of a key repeated within one mapping of the node tree, or None
    (merge keys ``<<`` aside; each node visited once, so aliases cost nothing)."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            keys = set()
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    if (k.tag, k.value) in keys:
                        return k
                    keys.add((k.tag, k.value))
                stack.append(v)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
    return None


def parse_yaml(text: str, what: str, path: Path | str) -> Any:
    """``yaml.safe_load`` of one document, refusing alias bombs, recursive anchors and runaway
    nesting with an ``InputError`` naming ``what`` (python tags are refused by the safe loader)."""
    loader = None
    try:
        loader = yaml.SafeLoader(text)     # its reader refuses control characters (a binary file) at once
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}, MAX_YAML_VALUES) > MAX_YAML_VALUES:
            raise InputError(what, f"{path} holds more than {MAX_YAML_VALUES:,} values (anchors and aliases "
                             "counted as expanded)", "write fewer values, and no nested aliases")
        twice = _repeated_key(node)
        if twice is not None:     # yaml.safe_load keeps the last silently: the first value would be ignored
            raise InputError(what, f"{path} line {twice.start_mark.line + 1}: key '{twice.value}' appears twice "
                             "in one mapping", "keep one of them")
        return loader.construct_document(node)
    except yaml.reader.ReaderError as exc:
        raise InputError(what, f"{path} holds a control character (#x{exc.character:04x}) at position {exc.position}: "
                         "not YAML text", "give the YAML file itself (a binary file is not one)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or ""
        raise InputError(what, f"malformed YAML in {path}{where}{': ' + problem if problem else ''}",
                         "fix the file's syntax") from None
    except RecursionError:
        raise InputError(what, f"{path} nests values too deeply", "flatten the file") from None
    except InputError:
        raise
    except ValueError:   # an integer of more than 4,300 digits: Python refuses to convert it
        raise InputError(what, f"{path} holds an integer of more than 4,300 digits, which no value can be",
                         "write numbers of a sensible size") from None
    finally:
        if loader is not None:
            loader.dispose()


def is_dir(path: Path) -> bool:
    """``path.is_dir()``, False for a name the system cannot look up (as ``is_file``): a folder
    given where a spec file or catalog name is expected is reported as a folder."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


def is_file(path: Path) -> bool:
    """``path.is_file()``, False for a name the system cannot look up (a 300-character catalog name
    raised ENAMETOOLONG, reported as an 'io' error instead of an unknown name)."""
    try:
        return Path(path).is_file()
    except OSError:
        return False


def exists(path: Path) -> bool:
    """``path.exists()``, False for a name the system cannot look up (as ``is_file``)."""
    try:
        return Path(path).exists()
    except OSError:
        return False


def read_yaml(path: Path, what: str) -> dict[str, Any]:
    """Parse one YAML mapping; malformed files raise ``InputError`` naming the file."""
    check_spec_size(path, what)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(what, f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(what, f"{path} is not UTF-8 text (byte {exc.start})", "save it as UTF-8") from None
    data = parse_yaml(text, what, path)
    if not isinstance(data, dict):
        raise InputError(what, f"{path} must hold a YAML mapping (key: value lines)")
    return data


def _entries(kind: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in _search_dirs(kind):
        try:
            stamp = d.stat().st_mtime_ns
        except OSError:
            continue
        for stem, p in _listing(str(d), stamp):
            found.setdefault(stem, p)
    return found


@lru_cache(maxsize=None)
def _listing(folder: str, stamp: int) -> tuple:
    """(stem, path) of a folder's YAML files, memoised per folder and modification time (adding
    or removing a file changes the folder's mtime, so a user's new entry is seen at once). Only
    regular files (as the model catalog): a FIFO named x.yaml would block the listing that reads it."""
    return tuple((p.stem, p) for p in sorted(Path(folder).glob("*.yaml")) if is_file(p))


def _resolve(kind: str, name_or_path: str, what: str) -> Path:
    if not isinstance(name_or_path, (str, os.PathLike)):    # None, 5, a dict from Python callers
        raise InputError(what, f"expected a catalog name or a YAML file path, got {type(name_or_path).__name__}",
                         f"give the {what} as text, e.g. a name from `paraplan hardware list`")
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or is_file(candidate):
        if not is_file(candidate):
            listing = "paraplan hardware stacks" if kind == "stacks" else "paraplan hardware list"
            raise InputError(what, not_a_file(name_or_path), f"check the path, or give a name from `{listing}`")
        return candidate
    entries = _entries(kind)
    key = name_or_path.strip().lower()
    if key in entries:
        return entries[key]
    if name_or_path.strip() and is_dir(candidate):   # a folder of the same name as a catalog entry is not in the way
        listing = "paraplan hardware stacks" if kind == "stacks" else "paraplan hardware list"
        raise InputError(what, not_a_file(name_or_path), f"give a YAML file, or a name from `{listing}`")
    raise InputError(what, f"unknown {what} '{name_or_path}'", suggest(key, entries))


def _get(data: dict, key: str, where: str, kind=float, default: Any = ...) -> Any:
    if key not in data or data[key] is None:
        if default is ...:
            raise InputError(f"{where}.{key}", "missing", f"add '{key}:' to the file")
        return default
    value = data[key]
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            raise ValueError
        if kind is int:
            # an integer, or a float / string holding one (never truncate 1.5 to 1)
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            return int(float(value)) if not isinstance(value, int) else value
        if kind is float and isinstance(value, bool):
            raise ValueError
        if kind is str and (isinstance(value, bool) or not isinstance(value, (str, int))):
            raise ValueError                   # text (a bare number reads as its digits)
        return kind(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{where}.{key}", f"expected {kind.__name__}, got {value!r}") from None


def _optional_tera(data: dict, key: str, where: str) -> float | None:
    value = _get(data, key, where, float, None)
    if value is not None and not value > 0:
        raise InputError(f"{where}.{key}", f"must be > 0, got {value:g}", f"remove '{key}:' if unknown")
    return None if value is None else value * 1e12


def refuse_unknown_keys(data: dict, known, where: str) -> None:
    """``InputError`` naming the first key of ``data`` not in ``known`` (a typo such as
    ``gpus_per_nod`` would otherwise leave the default in place without a word)."""
    unknown = sorted(str(k) for k in set(data) - set(known))
    if unknown:
        hint = suggest(unknown[0], known)
        raise InputError(f"{where}.{unknown[0]}", "unknown key",
                         (hint + " " if hint.startswith("did you mean") else "") + "known keys: " + ", ".join(sorted(known)))


#: the keys of a GPU file, of a one-kind cluster file, of its network tiers and of a pooled file
GPU_KEYS = ("name", "vendor", "generation", "peak_tflops", "hbm_gib", "hbm_gb", "hbm_bw_tb_per_s",
            "scaleup_bw_gb_per_s", "scaleup_domain_size", "source", "sfu_tera_exp_per_s", "sm_count",
            "sync_mma_peak_fraction", "sustained_tensor_fraction")
CLUSTER_KEYS = ("name", "gpu", "efficiency", "gpus_per_node", "scaleup", "scaleout", "max_gpus", "rail_optimized",
                "oversubscription", "source", "description", "host", "gpus_per_host")
TIER_KEYS = ("kind", "bw_gbit_per_s", "bw_gb_per_s", "latency_us", "communicator_busbw_gb_per_s", "source")
POOLED_KEYS = ("name", "pools", "links", "description", "source")
LINK_KEYS = ("between", "bw_gbit_per_s", "bw_gb_per_s", "latency_us", "kind")


def gpu_from_dict(data: dict, where: str = "gpu") -> GPUSpec:
    """Build a ``GPUSpec`` from a catalog mapping (human units, see module docstring)."""
    name = check_name(f"{where}.name", _get(data, "name", where, str))
    where = f"gpu {name}"
    refuse_unknown_keys(data, GPU_KEYS, where)
    peaks = data.get("peak_tflops")
    if not isinstance(peaks, dict) or not peaks:
        raise InputError(f"{where}.peak_tflops", "missing", "add a mapping of dtype: dense TFLOP/s")
    peak_flops = {}
    for dtype, tflops in peaks.items():
        if tflops is None:
            continue
        try:
            value = float(tflops)
        except (TypeError, ValueError):
            raise InputError(f"{where}.peak_tflops.{dtype}", f"expected a number, got {tflops!r}") from None
        _check_in_file_unit(f"{where}.peak_tflops.{dtype}", value, 1e12, "the dense peak in TFLOP/s, or leave the dtype out")
        peak_flops[str(dtype)] = value * 1e12
    if "hbm_gib" in data and "hbm_gb" in data:
        raise InputError(f"{where}.hbm_gb", "given with hbm_gib", "keep one: hbm_gib (GiB, the catalog's) or hbm_gb (GB)")
    if "hbm_gb" not in data:        # the catalog's key; hbm_gb (decimal GB) is the alternative
        if "hbm_gib" not in data:
            raise InputError(f"{where}.hbm_gib", "missing", "add 'hbm_gib:' (the GPU memory in GiB) to the file")
        hbm_bytes = _number_in_file_unit(data, "hbm_gib", where, ..., GIB, "the GPU memory in GiB",
                                         bounds_si=(MIN_HBM_BYTES, MAX_HBM_BYTES)) * GIB
    else:
        hbm_bytes = _number_in_file_unit(data, "hbm_gb", where, ..., 1e9, "the GPU memory in GB",
                                         bounds_si=(MIN_HBM_BYTES, MAX_HBM_BYTES)) * 1e9
    return GPUSpec(
        name=name,
        vendor=_get(data, "vendor", where, str, ""),
        generation=_get(data, "generation", where, str),
        peak_flops_per_s=peak_flops,
        hbm_bytes=hbm_bytes,
        hbm_bw_bytes_per_s=_number_in_file_unit(data, "hbm_bw_tb_per_s", where, ..., 1e12,
                                                "the memory bandwidth in TB/s") * 1e12,
        scaleup_bw_bytes_per_s=_number_in_file_unit(data, "scaleup_bw_gb_per_s", where, ..., 1e9,
                                                    "the scale-up link's bandwidth per GPU, one direction, in GB/s") * 1e9,
        scaleup_domain_size=_get(data, "scaleup_domain_size", where, int),
        source=_get(data, "source", where, str, ""),
        sfu_exp_per_s=_optional_tera(data, "sfu_tera_exp_per_s", where),
        sm_count=_get(data, "sm_count", where, float, None),
        sync_mma_peak_fraction=_get(data, "sync_mma_peak_fraction", where, float, 1.0),
        sustained_tensor_fraction=_get(data, "sustained_tensor_fraction", where, float, 1.0),
    )


def _check_in_file_unit(field: str, value: float, si_per_unit: float, fix: str, allow_zero: bool = False,
                        bounds_si: tuple[float, float] | None = None) -> None:
    """Refuse ``value`` (in the file's unit) unless it is a plausible rate (or, ``allow_zero``, a
    latency; or a quantity within ``bounds_si``), naming ``field`` as the file spells it and the
    unit to use (``fix``). ``si_per_unit``: bytes/s, FLOP/s, seconds or bytes per file unit."""
    try:
        if bounds_si is not None:
            require_plausible(field, value, low=bounds_si[0] / si_per_unit, high=bounds_si[1] / si_per_unit)
        elif allow_zero:      # a latency: 0 .. MAX_LATENCY_S
            require_plausible(field, value, high=MAX_LATENCY_S / si_per_unit, allow_zero=True)
        else:                 # a rate of at least MIN_RATE_PER_S bytes/s
            require_plausible(field, value, low=MIN_RATE_PER_S / si_per_unit, high=MAX_RATE_PER_S / si_per_unit)
    except InputError as err:
        raise InputError(err.field, err.message, fix) from None


def _number_in_file_unit(data: dict, key: str, where: str, default: Any, si_per_unit: float, fix: str,
                         allow_zero: bool = False, bounds_si: tuple[float, float] | None = None):
    """``data[key]`` checked in the file's unit (``_check_in_file_unit``), or ``default`` when absent."""
    value = _get(data, key, where, default=default)
    if value is not None:
        _check_in_file_unit(f"{where}.{key}", value, si_per_unit, fix, allow_zero, bounds_si)
    return value


def _tier_from_dict(data: Any, where: str, default_kind: str) -> NetworkTier:
    if not isinstance(data, dict):
        raise InputError(where, "must be a mapping with kind, bw_gbit_per_s (or bw_gb_per_s), latency_us")
    refuse_unknown_keys(data, TIER_KEYS, where)
    if "bw_gbit_per_s" in data and "bw_gb_per_s" in data:
        raise InputError(f"{where}.bw_gb_per_s", "given with bw_gbit_per_s",
                         "keep one: bw_gbit_per_s (Gb/s) or bw_gb_per_s (GB/s)")
    if "bw_gbit_per_s" in data:
        bw = _number_in_file_unit(data, "bw_gbit_per_s", where, ..., 1e9 / 8,
                          "the link's bandwidth per GPU, one direction, in Gb/s") * 1e9 / 8
    else:
        bw = _number_in_file_unit(data, "bw_gb_per_s", where, ..., 1e9,
                          "the link's bandwidth per GPU, one direction, in GB/s") * 1e9
    busbw = _number_in_file_unit(data, "communicator_busbw_gb_per_s", where, None, 1e9,
                         "a measured all-reduce bus bandwidth across nodes in GB/s, or leave the key out")
    latency = _number_in_file_unit(data, "latency_us", where, 5.0, 1e-6,
                           "one message's start-up time in microseconds", allow_zero=True)
    return NetworkTier(kind=_get(data, "kind", where, str, default_kind), bw_bytes_per_s=bw,
                       latency_s=latency * 1e-6,
                       communicator_bus_bw_bytes_per_s=None if busbw is None else busbw * 1e9)


def _host_from_dict(data: Any, where: str) -> HostSpec | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise InputError(where, "must be a mapping with link, link_bw_gb_per_s, memory_gib, memory_bw_gb_per_s, source")
    unknown = set(data) - {"link", "link_bw_gb_per_s", "memory_gib", "memory_bw_gb_per_s", "source"}
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "unknown key",
                         "known: link, link_bw_gb_per_s, memory_gib, memory_bw_gb_per_s, source")
    memory = _get(data, "memory_gib", where, float, None)
    memory_bw = _get(data, "memory_bw_gb_per_s", where, float, None)
    for key, value in (("memory_gib", memory), ("memory_bw_gb_per_s", memory_bw)):
        if value is not None:
            require_positive(f"{where}.{key}", value)
    link_bw = _get(data, "link_bw_gb_per_s", where)
    require_positive(f"{where}.link_bw_gb_per_s", link_bw)
    return HostSpec(link=_get(data, "link", where, str), link_bw_bytes_per_s=link_bw * 1e9,
                    memory_bytes=None if memory is None else memory * GIB,
                    memory_bw_bytes_per_s=None if memory_bw is None else memory_bw * 1e9,
                    source=_get(data, "source", where, str, ""))


def beside_file(ref: str, base_dir: Path | None) -> str:
    """``ref`` (a catalog name or a YAML path) as written, or, when it is a relative YAML path
    that names a file in ``base_dir`` (the directory of the file that refers to it), that file:
    a cluster file and the GPU file it names can sit side by side and be used from anywhere."""
    candidate = Path(ref)
    if base_dir is None or candidate.is_absolute() or candidate.suffix not in (".yaml", ".yml"):
        return ref
    beside = Path(base_dir) / candidate
    return str(beside) if is_file(beside) else ref


def cluster_from_dict(data: dict, where: str = "cluster", base_dir: Path | None = None) -> ClusterSpec:
    """Build a ``ClusterSpec`` from a catalog mapping; the GPU is looked up by name, or read from
    a YAML path (relative paths first beside the cluster file, ``base_dir``; see ``beside_file``)."""
    name = _get(data, "name", where, str)
    if not name.strip():        # a model file refuses an empty name; a cluster took one
        raise InputError(f"{where}.name", "is empty", "give the cluster a name")
    check_name(f"{where}.name", name)
    where = f"cluster {name}"
    if "pools" not in data:
        refuse_unknown_keys(data, CLUSTER_KEYS, where)
    if "pools" in data:
        raise InputError(where, f"lists {len(data['pools']) if isinstance(data['pools'], list) else 'its'} pools: "
                         "it is a pooled (mixed) cluster, not one GPU kind",
                         "pass it to paraplan plan / simulate; in Python: planners.heterogeneous.plan_heterogeneous"
                         "(model, hardware_specs.catalog.load_pooled_cluster(path), ...), or "
                         "simulator.heterogeneous.simulate_heterogeneous for one plan")
    gpu_entry = data.get("gpu")
    gpu = gpu_from_dict(gpu_entry, f"{where}.gpu") if isinstance(gpu_entry, dict) \
        else load_gpu(beside_file(_get(data, "gpu", where, str), base_dir))
    eff_entry = data.get("efficiency")
    efficiency = None
    if eff_entry is not None:
        if not isinstance(eff_entry, dict):
            raise InputError(f"{where}.efficiency", "must be a mapping of efficiency factors")
        efficiency = efficiency_from_dict(eff_entry, f"{where}.efficiency")
    gpus_per_node = _get(data, "gpus_per_node", where, int)
    if "scaleup" in data:
        scaleup = _tier_from_dict(data["scaleup"], f"{where}.scaleup", "nvlink")
    else:
        scaleup = NetworkTier("nvlink", gpu.scaleup_bw_bytes_per_s, 3e-6)
    scaleout = _tier_from_dict(data.get("scaleout"), f"{where}.scaleout", "infiniband")
    max_gpus = _get(data, "max_gpus", where, int, None)
    return ClusterSpec(
        name=name, gpu=gpu, gpus_per_node=gpus_per_node, scaleup=scaleup, scaleout=scaleout,
        rail_optimized=_get(data, "rail_optimized", where, bool, default=True),
        oversubscription=_get(data, "oversubscription", where, default=1.0),
        max_gpus=max_gpus,
        source=_get(data, "source", where, str, ""), description=_get(data, "description", where, str, ""),
        efficiency=efficiency, host=_host_from_dict(data.get("host"), f"{where}.host"),
        gpus_per_host=_get(data, "gpus_per_host", where, int, None),
    )


_POOL_KEYS = ("name", "gpus", "cluster")


def _pool_error(exc: InputError, pool: str, cluster_where: str) -> InputError:
    """``exc`` re-raised with its field under ``pools.<pool>`` (the pool named, the file prefix dropped)."""
    field = exc.field
    for prefix in (cluster_where + ".", cluster_where):
        if field.startswith(prefix):
            field = field[len(prefix):]
            break
    field = field.lstrip(".") or "cluster"
    return InputError(f"pools.{pool}.{field}", exc.message, exc.fix)


def pool_from_dict(data: dict, index: int, base_dir: Path | None = None) -> Pool:
    """One entry of a pooled cluster file's ``pools`` list (see the module docstring); relative
    cluster and GPU paths are looked for beside the pooled file (``base_dir``) first."""
    if not isinstance(data, dict):
        raise InputError(f"pools[{index}]", "must be a mapping with name, gpus and cluster (or gpu, gpus_per_node, ...)")
    name = _get(data, "name", f"pools[{index}]", str, "").strip()
    if not name:
        raise InputError(f"pools[{index}].name", "missing", "give every pool a name")
    if "gpus" not in data or data["gpus"] is None:
        raise InputError(f"pools.{name}.gpus", "missing", "add 'gpus:' (the pool's GPU count)")
    gpus = data["gpus"]
    if isinstance(gpus, bool) or not isinstance(gpus, (int, float)) or gpus != gpus or gpus in (float("inf"), float("-inf")):
        raise InputError(f"pools.{name}.gpus", f"must be a positive integer, got {gpus!r}")
    base_where = f"cluster {name}"
    try:
        if data.get("cluster") is not None:
            ref = str(data["cluster"])
            base_path = _resolve("clusters", beside_file(ref, base_dir), "cluster")
            base = dict(read_yaml(base_path, "cluster"))
            if "pools" in base:
                raise InputError("cluster", f"'{ref}' is itself a pooled cluster", "name a one-kind cluster")
            base.update({k: v for k, v in data.items() if k not in _POOL_KEYS})
            base_where = f"cluster {base.get('name', ref)}"
            gpu_ref = base.get("gpu")
            if isinstance(gpu_ref, str) and "gpu" not in data:     # the named cluster's own GPU file
                base["gpu"] = beside_file(gpu_ref, base_path.parent)
            cluster = cluster_from_dict(base, base_dir=base_dir)
        else:
            body = {k: v for k, v in data.items() if k not in ("gpus", "cluster")}
            cluster = cluster_from_dict(body, base_dir=base_dir)
    except InputError as exc:
        raise _pool_error(exc, name, base_where) from None
    return Pool(name=name, cluster=cluster, gpus=gpus if isinstance(gpus, int) else float(gpus))


def _link_from_dict(data: dict, index: int) -> PoolLink:
    if not isinstance(data, dict):
        raise InputError(f"links[{index}]", "must be a mapping with between, bw_gbit_per_s, latency_us")
    ends = data.get("between")
    if not isinstance(ends, (list, tuple)) or len(ends) != 2:
        raise InputError(f"links[{index}].between", f"must name two pools, got {ends!r}", "write between: [a, b]")
    where = f"links.{ends[0]}-{ends[1]}"
    refuse_unknown_keys(data, LINK_KEYS, where)
    if "bw_gbit_per_s" in data and "bw_gb_per_s" in data:
        raise InputError(f"{where}.bw_gb_per_s", "given with bw_gbit_per_s",
                         "keep one: bw_gbit_per_s (Gb/s) or bw_gb_per_s (GB/s)")
    if "bw_gbit_per_s" in data:
        bw = _number_in_file_unit(data, "bw_gbit_per_s", where, ..., 1e9 / 8,
                          "the link's bandwidth per GPU, one direction, in Gb/s") * 1e9 / 8
    else:
        bw = _number_in_file_unit(data, "bw_gb_per_s", where, ..., 1e9,
                          "the link's bandwidth per GPU, one direction, in GB/s") * 1e9
    latency = _number_in_file_unit(data, "latency_us", where, 10.0, 1e-6,
                           "one message's start-up time in microseconds", allow_zero=True)
    return PoolLink(pools=(str(ends[0]), str(ends[1])), bw_bytes_per_s=bw, latency_s=latency * 1e-6,
                    kind=_get(data, "kind", where, str, "ethernet"))


def pooled_cluster_from_dict(data: dict, where: str = "cluster", base_dir: Path | None = None) -> PooledCluster:
    """Build a ``PooledCluster`` from a pooled cluster mapping (``pools`` and ``links``); relative
    paths in its pools are looked for beside the file first (``base_dir``)."""
    name = check_name(f"{where}.name", _get(data, "name", where, str))
    refuse_unknown_keys(data, POOLED_KEYS, f"cluster {name}")
    pools = data.get("pools")
    if not isinstance(pools, list) or not pools:
        raise InputError(f"cluster {name}.pools", "must be a list of pools", "add at least one pool")
    links = data.get("links") or []
    if not isinstance(links, list):
        raise InputError(f"cluster {name}.links", "must be a list of links")
    return PooledCluster(name=name, pools=tuple(pool_from_dict(p, i, base_dir) for i, p in enumerate(pools)),
                         links=tuple(_link_from_dict(l, i) for i, l in enumerate(links)),
                         description=_get(data, "description", where, str, ""), source=_get(data, "source", where, str, ""))

#: keys of older efficiency files, read and ignored: the exposed shares of DP / TP / EP traffic
#: were fitted until the software-stack catalog replaced them (``hardware_specs/stacks``)
LEGACY_EFFICIENCY_KEYS = ("exposed_dp_fraction", "exposed_tp_fraction", "exposed_ep_fraction")


def efficiency_from_dict(data: dict, where: str = "efficiency") -> EfficiencyModel:
    known = set(EfficiencyModel.field_names())
    data = {k: v for k, v in data.items() if k not in LEGACY_EFFICIENCY_KEYS}
    unknown = set(data) - known
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "unknown key",
                         "known keys: " + ", ".join(sorted(known)))
    if "generation" not in data:
        raise InputError(f"{where}.generation", "missing")
    for key in ("generation", "fitted_on"):
        if key in data and (isinstance(data[key], bool) or not isinstance(data[key], (str, int))):
            raise InputError(f"{where}.{key}", f"expected text, got {data[key]!r}", "quote it")
    if not isinstance(data.get("gemm_peak_fraction"), dict):
        raise InputError(f"{where}.gemm_peak_fraction", "must be a mapping dtype: fraction")
    if not isinstance(data.get("collective_bw_fraction", {}), dict):
        raise InputError(f"{where}.collective_bw_fraction", "must be a mapping kind: fraction",
                         "e.g. {reduce_scatter: 0.3}")
    for group in ("gemm_peak_fraction", "collective_bw_fraction"):
        for key, value in (data.get(group) or {}).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"{where}.{group}.{key}", f"expected a number, got {value!r}")
    kwargs = dict(data)
    for key, value in list(kwargs.items()):
        if key == "fitted_factors":
            if not isinstance(value, (list, tuple)):
                raise InputError(f"{where}.fitted_factors", "must be a list of factor names")
            kwargs[key] = tuple(str(v) for v in value)
        elif key not in ("generation", "gemm_peak_fraction", "collective_bw_fraction", "fitted_on"):
            try:
                kwargs[key] = float(value)
            except (TypeError, ValueError):
                raise InputError(f"{where}.{key}", f"expected a number, got {value!r}") from None
    return EfficiencyModel(**kwargs)


def _behaviour_values(section: Any, where: str) -> tuple[dict, dict]:
    """(values, citations) of a stack section whose entries are ``key: value`` or
    ``key: {value: ..., source: "..."}``."""
    if not isinstance(section, dict):
        raise InputError(where, "must be a mapping of behaviour: value")
    values, citations = {}, {}
    for key, entry in section.items():
        if isinstance(entry, dict):
            if "value" not in entry:
                raise InputError(f"{where}.{key}", "a mapping entry needs 'value:' (and 'source:')")
            values[str(key)] = entry["value"]
            if entry.get("source"):
                citations[f"{where.split('.')[-1]}.{key}"] = str(entry["source"])
        else:
            values[str(key)] = entry
    return values, citations


def _training_from_dict(values: dict, where: str) -> TrainingBehaviour:
    defaults = {f: getattr(TrainingBehaviour(), f) for f in StackSpec.training_keys()}
    unknown = set(values) - set(defaults)
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "unknown behaviour",
                         "known: " + ", ".join(sorted(defaults)))
    kwargs = {}
    for key, value in values.items():
        kind = type(defaults[key])
        if kind is bool:
            if not isinstance(value, bool):
                raise InputError(f"{where}.{key}", f"must be true or false, got {value!r}")
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{where}.{key}", f"expected a whole number, got {value!r}")
        elif kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"{where}.{key}", f"expected a number, got {value!r}")
            value = float(value)
        else:
            value = str(value)
        kwargs[key] = value
    return TrainingBehaviour(**kwargs)


def _serving_from_dict(values: dict, where: str) -> ServingBehaviour:
    defaults = ServingBehaviour()
    known = ServingBehaviour.keys()
    unknown = set(values) - set(known)
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "unknown behaviour", "known: " + ", ".join(sorted(known)))
    kwargs = {}
    for key, value in values.items():
        default = getattr(defaults, key)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise InputError(f"{where}.{key}", f"must be true or false, got {value!r}")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{where}.{key}", f"expected a whole number, got {value!r}")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"{where}.{key}", f"expected a number, got {value!r}")
            value = float(value)
        elif isinstance(default, str):
            value = str(value)
        elif key == "prefill_token_budget":
            if isinstance(value, int) and not isinstance(value, bool):
                value = {0.0: value}
            elif not isinstance(value, dict):
                raise InputError(f"{where}.{key}", "must be tokens or a mapping of HBM GiB -> tokens",
                                 "e.g. {0: 2048, 70: 8192}")
        kwargs[key] = value
    try:
        return ServingBehaviour(**kwargs)
    except InputError as exc:
        raise InputError(f"{where}.{exc.field.split('.', 1)[-1]}", exc.message, exc.fix) from None


#: the top-level keys of a stack file
STACK_KEYS = ("name", "framework", "versions", "description", "training", "serving", "recipes",
              "default_when_version_unstated", "unstated_version_reason", "source")


def stack_from_dict(data: dict, where: str = "stack") -> StackSpec:
    """Build a ``StackSpec`` from a catalog mapping (see ``hardware_specs.stack_spec``)."""
    name = check_name(f"{where}.name", _get(data, "name", where, str))
    where = f"stack {name}"
    refuse_unknown_keys(data, STACK_KEYS, where)
    citations: dict[str, str] = {}
    training = serving = None
    if data.get("training") is not None:
        values, cites = _behaviour_values(data["training"], f"{where}.training")
        training = _training_from_dict(values, f"{where}.training")
        citations.update(cites)
    if data.get("serving") is not None:
        values, cites = _behaviour_values(data["serving"], f"{where}.serving")
        serving = _serving_from_dict(values, f"{where}.serving")
        citations.update(cites)
    versions = data.get("versions") or []
    if not isinstance(versions, list):
        versions = [versions]
    for v in versions:
        if not isinstance(v, str):
            # YAML reads 26.10 as the number 26.1: a release must stay as spelled
            raise InputError(f"{where}.versions", f"version {v!r} is not a string",
                             'quote it as the validation files spell it, e.g. "26.10"')
        # a release is printed in tables and written into launch scripts' comments: a newline
        # there would end the comment and run what follows
        check_name(f"{where}.versions", v)
    unstated = data.get("default_when_version_unstated", False)
    if not isinstance(unstated, bool):
        raise InputError(f"{where}.default_when_version_unstated", f"must be true or false, got {unstated!r}")
    if unstated and not str(data.get("unstated_version_reason") or "").strip():
        raise InputError(f"{where}.unstated_version_reason", "missing",
                         "say why runs without a stated version are this stack")
    recipes = []
    for i, entry in enumerate(data.get("recipes") or []):
        here = f"{where}.recipes[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("models"), list) or not entry["models"]:
            raise InputError(f"{here}.models", "must list the model names the recipe is for")
        if not str(entry.get("source") or "").strip():
            raise InputError(f"{here}.source", "missing", "cite the recipe file")
        if training is None or not isinstance(entry.get("training"), dict):
            raise InputError(f"{here}.training", "must be a mapping of behaviour: value")
        overrides = {}
        for key, value in entry["training"].items():
            overrides[key] = getattr(_training_from_dict({key: value}, f"{here}.training"), key)
        for sel in ("gpus", "dtypes"):
            if entry.get(sel) is not None and not isinstance(entry[sel], list):
                raise InputError(f"{here}.{sel}", "must be a list")
        recipes.append(RecipeOverride(models=tuple(str(m) for m in entry["models"]), training=overrides,
                                      source=str(entry["source"]), gpus=tuple(entry.get("gpus") or ()),
                                      dtypes=tuple(entry.get("dtypes") or ())))
    return StackSpec(name=name, framework=_get(data, "framework", where, str), versions=tuple(versions),
                     description=_get(data, "description", where, str, ""), training=training, serving=serving,
                     citations=citations, default_when_version_unstated=unstated, recipes=tuple(recipes))


@lru_cache(maxsize=None)
def _load_gpu_cached(path: str, mtime: float) -> GPUSpec:
    return gpu_from_dict(read_yaml(Path(path), "gpu"))


@lru_cache(maxsize=None)
def _load_cluster_cached(path: str, mtime: float) -> ClusterSpec:
    return cluster_from_dict(read_yaml(Path(path), "cluster"), base_dir=Path(path).parent)


@lru_cache(maxsize=None)
def _load_pooled_cached(path: str, mtime: float) -> PooledCluster:
    return pooled_cluster_from_dict(read_yaml(Path(path), "cluster"), base_dir=Path(path).parent)


@lru_cache(maxsize=None)
def _load_efficiency_cached(path: str, mtime: float) -> EfficiencyModel:
    return efficiency_from_dict(read_yaml(Path(path), "efficiency"))


def serving_efficiency_from_dict(data: dict, where: str = "serving_efficiency") -> ServingEfficiency:
    """Build a ``ServingEfficiency`` from a catalog mapping (unknown or mistyped keys name the key)."""
    known = set(ServingEfficiency.field_names())
    unknown = set(data) - known
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "unknown key", "known keys: " + ", ".join(sorted(known)))
    if "generation" not in data:
        raise InputError(f"{where}.generation", "missing")
    kwargs = dict(data)
    for key, value in kwargs.items():
        if key in ("generation", "fitted_on"):
            kwargs[key] = str(value)
        elif key == "prior":
            if not isinstance(value, bool):
                raise InputError(f"{where}.prior", f"must be true or false, got {value!r}")
        elif key == "validation_error_pct":
            if not isinstance(value, dict):
                raise InputError(f"{where}.{key}", f"expected a mapping, got {value!r}")
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"{where}.{key}", f"expected a number, got {value!r}")
            kwargs[key] = float(value)
    return ServingEfficiency(**kwargs)


@lru_cache(maxsize=None)
def _load_serving_efficiency_cached(path: str, mtime: float) -> ServingEfficiency:
    return serving_efficiency_from_dict(read_yaml(Path(path), "serving_efficiency"))


def load_serving_efficiency(generation_or_path: str) -> ServingEfficiency:
    """The serving-kernel efficiency of a GPU generation (or from a YAML file path). A
    generation without a fitted file gets ``default.yaml``, a hand-set prior (``prior: true``)."""
    candidate = Path(generation_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        p = _resolve("serving_efficiency", generation_or_path, "serving_efficiency")
    else:
        entries = _entries("serving_efficiency")
        key = generation_or_path.strip().lower()
        p = entries.get(key) or entries.get("default")
        if p is None:
            raise InputError("serving_efficiency", f"no profile for generation '{generation_or_path}' and no default.yaml",
                             "add hardware_specs/serving_efficiency/<generation>.yaml")
        if p.stem == "default":
            from dataclasses import replace
            return replace(_load_serving_efficiency_cached(str(p), p.stat().st_mtime), generation=key, prior=True)
    return _load_serving_efficiency_cached(str(p), p.stat().st_mtime)


def serving_efficiency_path(generation: str) -> Path:
    """Where the fitted serving-efficiency file of ``generation`` lives (it may not exist yet)."""
    return BUILTIN_DIR / "serving_efficiency" / f"{generation}.yaml"


def list_serving_stacks() -> list[str]:
    """Stacks with a ``serving`` section."""
    return sorted(n for n in _entries("stacks") if load_stack(n).serving is not None)


def serving_stack_for(framework: str, version: str | None = None) -> StackSpec:
    """The serving stack of ``framework`` (vllm, sglang, trtllm) describing release ``version``
    (``serving_release_match``'s profile)."""
    return serving_release_match(framework, version).stack


def serving_frameworks() -> set[str]:
    """The frameworks (lower case) that have serving stacks: what ``-b`` names besides a stack."""
    return {_framework_key(load_stack(n).framework) for n in _entries("stacks") if load_stack(n).serving is not None}


def serving_release_match(framework: str, version: str | None = None) -> ReleaseMatch:
    """The serving stack of ``framework`` (vllm, sglang, trtllm) describing release ``version``
    (a listed release or a patch / rc / post release of one, ``StackSpec.covers``; a release no
    profile lists: the newest profiled release before it, ``release_match.match_release``, with
    a note saying so); with no version, the framework's stack marked
    ``default_when_version_unstated``. A release no rule places is an ``InputError`` listing the
    known ones."""
    key = str(framework).strip().lower()
    candidates = [load_stack(n) for n in sorted(_entries("stacks"))]
    candidates = [s for s in candidates if s.serving is not None and _framework_key(s.framework) == _framework_key(key)]
    if not candidates:
        known = sorted({load_stack(n).framework for n in _entries("stacks") if load_stack(n).serving is not None})
        raise InputError("backend", f"no serving stack for framework '{framework}'", suggest(key, known))
    if _unstated(version):
        chosen = [s for s in candidates if s.default_when_version_unstated]
        if len(chosen) == 1:
            return ReleaseMatch(chosen[0])
        return ReleaseMatch(candidates[-1])
    match = match_release(candidates, key, str(version).strip())
    if match is not None:
        return match
    known = sorted({v for s in candidates for v in s.versions})
    raise InputError("backend_version", f"no {framework} serving stack for release {version!r}",
                     "known: " + ", ".join(known))


@lru_cache(maxsize=None)
def _load_stack_cached(path: str, mtime: float) -> StackSpec:
    return stack_from_dict(read_yaml(Path(path), "stack"))


def load_gpu(name_or_path: str) -> GPUSpec:
    """The GPU profile named ``name_or_path`` (catalog name or YAML file path)."""
    p = _resolve("gpus", name_or_path, "gpu")
    return _load_gpu_cached(str(p), p.stat().st_mtime)


def load_cluster(name_or_path: str) -> ClusterSpec:
    """The cluster profile named ``name_or_path`` (catalog name or YAML file path)."""
    p = _resolve("clusters", name_or_path, "cluster")
    return _load_cluster_cached(str(p), p.stat().st_mtime)


def is_pooled(name_or_path: str) -> bool:
    """Whether the cluster named ``name_or_path`` is a pooled (mixed) cluster file."""
    p = _resolve("clusters", name_or_path, "cluster")
    data = read_yaml(p, "cluster")
    return "pools" in data


def load_pooled_cluster(name_or_path: str, gpus: int | None = None) -> PooledCluster:
    """The cluster named ``name_or_path`` as pools: a pooled file as written, a one-kind
    cluster as one pool of ``gpus`` GPUs (default: its ``max_gpus``)."""
    p = _resolve("clusters", name_or_path, "cluster")
    if "pools" in read_yaml(p, "cluster"):
        if gpus is not None:
            raise InputError("gpus", f"cluster {p.stem} lists its pools and their GPU counts",
                             "drop --gpus, or edit the pools' gpus")
        return _load_pooled_cached(str(p), p.stat().st_mtime)
    cluster = _load_cluster_cached(str(p), p.stat().st_mtime)
    count = gpus if gpus is not None else cluster.max_gpus
    if count is None:
        raise InputError("gpus", f"cluster {cluster.name} is one GPU kind without a GPU count",
                         "give the GPU count (--gpus)")
    return PooledCluster.single(cluster, count)


def load_efficiency(generation_or_path: str) -> EfficiencyModel:
    """The efficiency model of a GPU generation (or from a YAML file path)."""
    p = _resolve("efficiency", generation_or_path, "efficiency")
    return _load_efficiency_cached(str(p), p.stat().st_mtime)


#: the training stack a configuration runs when none is named (simulate, plan, the Python API,
#: a published row whose framework is empty): the current Megatron-Core profile
DEFAULT_TRAINING_STACK = "megatron-core"


def load_stack(name_or_path: str) -> StackSpec:
    """The software stack named ``name_or_path`` (catalog name or YAML file path)."""
    p = _resolve("stacks", name_or_path, "stack")
    return _load_stack_cached(str(p), p.stat().st_mtime)


#: scale-out bandwidth per GPU (Gb/s, one direction) of a generation's usual system, for a
#: generic node of a GPU kind with no system preset: one NIC per GPU at the generation's
#: InfiniBand rate (EDR 100 for Volta DGX-1/2 era, HDR 200 for Ampere, NDR 400 for Hopper and
#: Blackwell; NVIDIA DGX A100/H100/B200 reference architectures).
GENERIC_SCALEOUT_GBIT = {"volta": 100.0, "ampere": 200.0, "hopper": 400.0, "blackwell": 400.0}


def generic_cluster(gpu_name: str) -> ClusterSpec:
    """A node of ``gpu_name``'s generation when no system preset exists: its scale-up domain
    (``scaleup_domain_size`` GPUs over its own link) and one NIC per GPU at the generation's
    usual rate (``GENERIC_SCALEOUT_GBIT``)."""
    gpu = load_gpu(gpu_name)
    gbit = GENERIC_SCALEOUT_GBIT.get(gpu.generation, 200.0)
    return ClusterSpec(name=f"generic-{gpu.name}", gpu=gpu, gpus_per_node=int(gpu.scaleup_domain_size),
                       scaleup=NetworkTier("nvlink", gpu.scaleup_bw_bytes_per_s, 3e-6),
                       scaleout=NetworkTier("infiniband", gbit * 1e9 / 8, 5e-6),
                       description=f"generic {gpu.generation} node: {gpu.scaleup_domain_size} x {gpu.name}, "
                                   f"{gbit:g} Gb/s per GPU", source="paraplan generic node (catalog.generic_cluster)")


def _framework_key(name: str) -> str:
    """A framework name as matched: case, spaces, '-' and '_' ignored (``Megatron_LM`` is
    ``megatron-lm``, ``TensorRT-LLM`` is not ``trtllm``: no other aliasing)."""
    return "".join(ch for ch in str(name).strip().lower() if ch not in " -_")


def _unstated(version: Any) -> bool:
    """True for a version cell that says nothing (None, empty, NaN)."""
    if version is None:
        return True
    if isinstance(version, float):
        return version != version
    return not str(version).strip() or str(version).strip().lower() == "nan"


def stack_for(framework: str, version: Any = None) -> StackSpec:
    """The built-in stack that describes ``framework`` at ``version`` (``release_match_for``'s
    profile)."""
    return release_match_for(framework, version).stack


def release_match_for(framework: str, version: Any = None) -> ReleaseMatch:
    """The built-in stack that describes ``framework`` at ``version``, as the validation files
    spell them (``framework`` / ``framework_version`` columns), with a note when the profile does
    not list that release.

    A listed release (or a patch / rc / post release of one) gets its profile; another release
    the newest profiled release before it (``release_match.match_release``: the catalog holds a
    profile where behaviour changed, so a release between two behaves as the earlier). A
    version the source does not state resolves only to the framework's stack marked
    ``default_when_version_unstated``. Raises ``InputError`` naming ``framework`` or
    ``framework_version`` (with the known values) when nothing matches.
    """
    # the catalog's folder listed once, not once per stack (validation asks for every row)
    entries = _entries("stacks")
    stacks = [_load_stack_cached(str(p), p.stat().st_mtime) for p in (entries[n] for n in sorted(entries))]
    if _unstated(framework):
        raise InputError("framework", "not stated, so no software stack applies",
                         "name one of: " + ", ".join(sorted({s.framework for s in stacks})))
    fw = str(framework).strip().lower()
    mine = [s for s in stacks if _framework_key(s.framework) == _framework_key(fw)]
    if not mine:
        raise InputError("framework", f"no software stack for framework {framework!r}",
                         suggest(fw, sorted({s.framework for s in stacks})))
    if _unstated(version):
        chosen = [s for s in mine if s.default_when_version_unstated]
        if len(chosen) == 1:
            return ReleaseMatch(chosen[0])
        known = sorted({v for s in mine for v in s.versions})
        raise InputError("framework_version", f"{framework} needs a version (its stacks differ by release)",
                         "known: " + ", ".join(known))
    key = str(version).strip()
    match = match_release(mine, fw, key)
    if match is not None:
        return match
    known = sorted({v for s in mine for v in s.versions})
    raise InputError("framework_version", f"no {framework} stack for version {key!r}",
                     "known: " + ", ".join(known))


def efficiency_for(gpu: GPUSpec) -> EfficiencyModel:
    """The efficiency model of ``gpu``'s generation (a generation the catalog has no model for
    is the GPU file's ``generation`` field's error, not an "unknown efficiency")."""
    if str(gpu.generation).strip().lower() not in _entries("efficiency"):
        raise InputError("gpu.generation", f"no efficiency model for generation {gpu.generation!r} of {gpu.name}",
                         suggest(str(gpu.generation).strip().lower(), list_efficiency_models()))
    return load_efficiency(gpu.generation)


def efficiency_for_cluster(cluster: ClusterSpec) -> EfficiencyModel:
    """The cluster's own measured efficiency model if it has one, else its GPU generation's."""
    return cluster.efficiency if cluster.efficiency is not None else efficiency_for(cluster.gpu)


def list_gpus() -> list[str]:
    return sorted(_entries("gpus"))


def list_clusters() -> list[str]:
    return sorted(_entries("clusters"))


def list_stacks() -> list[str]:
    return sorted(_entries("stacks"))


def list_efficiency_models() -> list[str]:
    return sorted(_entries("efficiency"))


def cluster_path(name: str) -> Path:
    return _resolve("clusters", name, "cluster")


def efficiency_path(generation: str) -> Path:
    return _resolve("efficiency", generation, "efficiency")
