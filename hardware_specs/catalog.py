"""Find and load GPU, cluster, efficiency and software-stack profiles (the catalogs are data).

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
latency_us, and on a full mesh with no switch mesh_peer_bw_gb_per_s: one peer's links, one
direction, or on a torus of direct links (TPU ICI) torus_dims: the domain's shape, first axis
fastest, and links_per_chip: two per axis} (optional: defaults to the GPU's link), scaleout {kind, bw_gbit_per_s or
bw_gb_per_s, latency_us, and optionally communicator_busbw_gb_per_s: the most bus bandwidth one
NCCL communicator was measured to reach across nodes, where the fabric's collectives fall short
of its links}, rail_optimized, oversubscription, max_gpus, source, and optionally host
{link, link_bw_gb_per_s (per GPU, one direction), memory_gib (per node), memory_bw_gb_per_s (per
node), source, and where GPUs sit behind a shared PCIe switch uplink gpus_per_uplink (GPUs per
uplink, default 1) and uplink_bw_gb_per_s (one direction, default link_bw_gb_per_s)} for offload, and gpus_per_host (GPUs one host drives, for the launch exports, where a
scale-up domain spans several hosts; default gpus_per_node).

Pooled cluster files (a mixed cluster) list ``pools`` instead: each pool has a name, ``gpus`` (its
GPU count) and either ``cluster`` (a catalog cluster or file giving its GPU and fabric; other keys
of the pool override that file's) or the cluster keys above inline; ``links`` optionally list
the network between two pools: ``between: [a, b]``, ``bw_gbit_per_s`` (or ``bw_gb_per_s``) per
GPU one direction, ``latency_us``, ``kind``. Pools without a link use the slower of their
scale-out tiers (``hardware_specs.pools``). ``load_cluster`` refuses a pooled file (it is not
one ``ClusterSpec``); ``load_pooled_cluster`` reads both kinds.

Stack files (``hardware_specs/stacks``) are parsed by ``hardware_specs.stack_files``, efficiency
files by ``hardware_specs.efficiency_files``, and every file is read through
``hardware_specs.yaml_files`` (safe YAML, typed fields). ``stack_for(framework, version)`` maps a
run to its stack.
"""
from __future__ import annotations

import os
import re
from copy import deepcopy
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from hardware_specs.cluster_spec import (HOST_LINKS, MAX_HOST_MEMORY_BYTES, MAX_LATENCY_S, NETWORK_KINDS, ClusterSpec,
                                         HostSpec, NetworkTier, is_host_link)
from hardware_specs.efficiency_files import efficiency_from_dict, serving_efficiency_from_dict
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError, check_name, file_float, not_a_file, require_plausible, shown, suggest
from hardware_specs.gpu_spec import MAX_HBM_BYTES, MAX_RATE_PER_S, MIN_HBM_BYTES, MIN_RATE_PER_S, GPUSpec
from hardware_specs.pools import Pool, PooledCluster, PoolLink
from hardware_specs.release_match import ReleaseMatch, match_release, release_numbers
from hardware_specs.serving_efficiency import ServingEfficiency
from hardware_specs.stack_files import stack_from_dict
from hardware_specs.stack_spec import StackSpec
from hardware_specs.yaml_files import get_field, is_dir, is_file, optional_tera, read_yaml, refuse_unknown_keys

BUILTIN_DIR = Path(__file__).resolve().parent
GIB = 2**30


def _search_dirs(kind: str) -> list[Path]:
    dirs = [BUILTIN_DIR / kind]
    for extra in os.environ.get("PARAPLAN_HARDWARE_PATH", "").split(os.pathsep):
        if extra:
            dirs.append(Path(extra) / kind)
    return dirs


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


#: the keys of a GPU file, of a one-kind cluster file, of its network tiers and of a pooled file
GPU_KEYS = ("name", "vendor", "generation", "peak_tflops", "hbm_gib", "hbm_gb", "hbm_bw_tb_per_s",
            "scaleup_bw_gb_per_s", "scaleup_domain_size", "source", "sfu_tera_exp_per_s", "sm_count",
            "sync_mma_peak_fraction", "sustained_tensor_fraction")
CLUSTER_KEYS = ("name", "gpu", "efficiency", "gpus_per_node", "scaleup", "scaleout", "max_gpus", "rail_optimized",
                "oversubscription", "source", "description", "host", "gpus_per_host")
TIER_KEYS = ("kind", "bw_gbit_per_s", "bw_gb_per_s", "latency_us", "communicator_busbw_gb_per_s",
             "mesh_peer_bw_gb_per_s", "torus_dims", "links_per_chip", "source")
POOLED_KEYS = ("name", "pools", "links", "description", "source")
LINK_KEYS = ("between", "bw_gbit_per_s", "bw_gb_per_s", "latency_us", "kind")


def gpu_from_dict(data: dict, where: str = "gpu") -> GPUSpec:
    """Build a ``GPUSpec`` from a catalog mapping (human units, see module docstring)."""
    name = check_name(f"{where}.name", get_field(data, "name", where, str))
    where = f"gpu {name}"
    refuse_unknown_keys(data, GPU_KEYS, where)
    peaks = data.get("peak_tflops")
    if not isinstance(peaks, dict) or not peaks:
        raise InputError(f"{where}.peak_tflops", "missing", "add a mapping of dtype: dense TFLOP/s")
    peak_flops = {}
    for dtype, tflops in peaks.items():
        if tflops is None:
            continue
        # a number, as get_field reads one (bf16: true was float(True) = 1 TFLOP/s), and not
        # quoted text: a peak is written as the datasheet's number
        if isinstance(tflops, bool) or not isinstance(tflops, (int, float)):
            raise InputError(f"{where}.peak_tflops.{dtype}", f"expected a number, got {shown(tflops)}",
                             "write the dense peak in TFLOP/s as a number, unquoted")
        field, fix = f"{where}.peak_tflops.{dtype}", "the dense peak in TFLOP/s, or leave the dtype out"
        value = file_float(field, tflops, fix)          # 10**400: refused, not float()'s OverflowError
        _check_in_file_unit(field, value, 1e12, fix)
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
        vendor=get_field(data, "vendor", where, str, ""),
        generation=get_field(data, "generation", where, str),
        peak_flops_per_s=peak_flops,
        hbm_bytes=hbm_bytes,
        hbm_bw_bytes_per_s=_number_in_file_unit(data, "hbm_bw_tb_per_s", where, ..., 1e12,
                                                "the memory bandwidth in TB/s") * 1e12,
        scaleup_bw_bytes_per_s=_number_in_file_unit(data, "scaleup_bw_gb_per_s", where, ..., 1e9,
                                                    "the scale-up link's bandwidth per GPU, one direction, in GB/s") * 1e9,
        scaleup_domain_size=get_field(data, "scaleup_domain_size", where, int),
        source=get_field(data, "source", where, str, ""),
        sfu_exp_per_s=optional_tera(data, "sfu_tera_exp_per_s", where),
        sm_count=get_field(data, "sm_count", where, float, None),
        sync_mma_peak_fraction=get_field(data, "sync_mma_peak_fraction", where, float, 1.0),
        sustained_tensor_fraction=get_field(data, "sustained_tensor_fraction", where, float, 1.0),
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
    value = get_field(data, key, where, default=default)
    if value is not None:
        _check_in_file_unit(f"{where}.{key}", value, si_per_unit, fix, allow_zero, bounds_si)
    return value


def _network_kind(data: dict, where: str, default: str) -> str:
    """``data["kind"]`` (``default`` where absent) if it is one of ``NETWORK_KINDS``, else an
    ``InputError`` naming ``where.kind`` (a misspelled ``nvlink`` silently lost the placement of
    jobs on NVLink racks, ``hardware_specs.placement``)."""
    kind = get_field(data, "kind", where, str, default)
    if kind not in NETWORK_KINDS:
        raise InputError(f"{where}.kind", f"unknown kind {kind!r}",
                         "choose from " + ", ".join(NETWORK_KINDS) + _closest(kind, NETWORK_KINDS))
    return kind


def _closest(name: str, known) -> str:
    """'; did you mean X?' where a known name is close to ``name``, else ''."""
    hint = suggest(name, known)
    return "; " + hint if hint.startswith("did you mean") else ""


def _bandwidth(data: dict, where: str) -> float:
    """A network tier's or a pool link's bandwidth per GPU, one direction, in bytes/s, from
    ``bw_gbit_per_s`` (Gb/s) or ``bw_gb_per_s`` (GB/s): one of them, checked in its own unit. With
    neither, the error names both (it had said only "bw_gb_per_s: missing", where the README's
    files write bw_gbit_per_s)."""
    if "bw_gbit_per_s" in data and "bw_gb_per_s" in data:
        raise InputError(f"{where}.bw_gb_per_s", "given with bw_gbit_per_s",
                         "keep one: bw_gbit_per_s (Gb/s) or bw_gb_per_s (GB/s)")
    if data.get("bw_gbit_per_s") is None and data.get("bw_gb_per_s") is None:
        raise InputError(f"{where}.bw_gbit_per_s", "missing",
                         "add the bandwidth per GPU, one direction: bw_gbit_per_s (Gb/s) or bw_gb_per_s (GB/s)")
    if "bw_gbit_per_s" in data:
        return _number_in_file_unit(data, "bw_gbit_per_s", where, ..., 1e9 / 8,
                                    "the link's bandwidth per GPU, one direction, in Gb/s") * 1e9 / 8
    return _number_in_file_unit(data, "bw_gb_per_s", where, ..., 1e9,
                                "the link's bandwidth per GPU, one direction, in GB/s") * 1e9


def _tier_from_dict(data: Any, where: str, default_kind: str) -> NetworkTier:
    if not isinstance(data, dict):
        raise InputError(where, "must be a mapping with kind, bw_gbit_per_s (or bw_gb_per_s), latency_us")
    refuse_unknown_keys(data, TIER_KEYS, where)
    bw = _bandwidth(data, where)
    busbw = _number_in_file_unit(data, "communicator_busbw_gb_per_s", where, None, 1e9,
                         "a measured all-reduce bus bandwidth across nodes in GB/s, or leave the key out")
    latency = _number_in_file_unit(data, "latency_us", where, 5.0, 1e-6,
                           "one message's start-up time in microseconds", allow_zero=True)
    peer = _number_in_file_unit(data, "mesh_peer_bw_gb_per_s", where, None, 1e9,
                        "on a full mesh with no switch, one peer's links in GB/s one direction; "
                        "leave the key out for a switch")
    dims = data.get("torus_dims")
    if dims is not None:
        if not isinstance(dims, list):
            raise InputError(f"{where}.torus_dims", f"{dims!r} is not a list", "give the torus shape, e.g. [16, 16, 16]")
        dims = tuple(dims)
    try:
        return NetworkTier(kind=_network_kind(data, where, default_kind), bw_bytes_per_s=bw,
                           latency_s=latency * 1e-6,
                           communicator_bus_bw_bytes_per_s=None if busbw is None else busbw * 1e9,
                           mesh_peer_bw_bytes_per_s=None if peer is None else peer * 1e9,
                           torus_dims=dims, links_per_chip=data.get("links_per_chip"))
    except InputError as err:
        # NetworkTier's own rules (a peer's links above the tier's) name its SI field: name the
        # file's key instead (its message already speaks GB/s)
        if err.field.endswith(".mesh_peer_bw_bytes_per_s"):
            raise InputError(f"{where}.mesh_peer_bw_gb_per_s", err.message, err.fix) from None
        for key in ("torus_dims", "links_per_chip"):
            if err.field.endswith(f".{key}"):
                raise InputError(f"{where}.{key}", err.message, err.fix) from None
        raise


def _host_from_dict(data: Any, where: str) -> HostSpec | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise InputError(where, "must be a mapping with link, link_bw_gb_per_s, memory_gib, memory_bw_gb_per_s, source")
    unknown = set(data) - {"link", "link_bw_gb_per_s", "memory_gib", "memory_bw_gb_per_s", "source",
                           "uplink_bw_gb_per_s", "gpus_per_uplink"}
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "unknown key",
                         "known: link, link_bw_gb_per_s, memory_gib, memory_bw_gb_per_s, source, "
                         "uplink_bw_gb_per_s, gpus_per_uplink")
    # checked in the file's units (GiB, GB/s) against HostSpec's SI bounds, so an error names
    # the key the file has, not host.memory_bw_bytes_per_s
    memory = _number_in_file_unit(data, "memory_gib", where, None, GIB, "the node's host memory in GiB, "
                                  "or leave the key out", bounds_si=(0.0, MAX_HOST_MEMORY_BYTES))
    memory_bw = _number_in_file_unit(data, "memory_bw_gb_per_s", where, None, 1e9,
                                     "the node's host memory bandwidth in GB/s, or leave the key out")
    link_bw = _number_in_file_unit(data, "link_bw_gb_per_s", where, ..., 1e9,
                                   "each GPU's link to the host, one direction, in GB/s")
    uplink_bw = _number_in_file_unit(data, "uplink_bw_gb_per_s", where, None, 1e9,
                                     "the bandwidth of one PCIe switch's link to the CPU, one direction, in GB/s, "
                                     "or leave the key out")
    link = get_field(data, "link", where, str)
    if not is_host_link(link):
        # the offload model reads the name (a PCIe link's encoding and packets): a misspelled
        # one was taken at its raw rate
        raise InputError(f"{where}.link", f"unknown link {link!r}", "choose from " + ", ".join(HOST_LINKS)
                         + " (e.g. pcie-gen5-x16)" + _closest(link, ("nvlink-c2c", "pcie-gen3-x16", "pcie-gen4-x16",
                                                                      "pcie-gen5-x16", "pcie-gen6-x16")))
    return HostSpec(link=link, link_bw_bytes_per_s=link_bw * 1e9,
                    memory_bytes=None if memory is None else memory * GIB,
                    memory_bw_bytes_per_s=None if memory_bw is None else memory_bw * 1e9,
                    source=get_field(data, "source", where, str, ""),
                    uplink_bw_bytes_per_s=None if uplink_bw is None else uplink_bw * 1e9,
                    gpus_per_uplink=get_field(data, "gpus_per_uplink", where, int, 1))


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
    name = get_field(data, "name", where, str)
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
        else load_gpu(beside_file(get_field(data, "gpu", where, str), base_dir))
    eff_entry = data.get("efficiency")
    efficiency = None
    if eff_entry is not None:
        if not isinstance(eff_entry, dict):
            raise InputError(f"{where}.efficiency", "must be a mapping of efficiency factors")
        efficiency = efficiency_from_dict(eff_entry, f"{where}.efficiency", origin=f"inline in {where}")
    gpus_per_node = get_field(data, "gpus_per_node", where, int)
    if "scaleup" in data:
        scaleup = _tier_from_dict(data["scaleup"], f"{where}.scaleup", "nvlink")
    else:
        scaleup = NetworkTier("nvlink", gpu.scaleup_bw_bytes_per_s, 3e-6)
    scaleout = _tier_from_dict(data.get("scaleout"), f"{where}.scaleout", "infiniband")
    max_gpus = get_field(data, "max_gpus", where, int, None)
    return ClusterSpec(
        name=name, gpu=gpu, gpus_per_node=gpus_per_node, scaleup=scaleup, scaleout=scaleout,
        rail_optimized=get_field(data, "rail_optimized", where, bool, default=True),
        oversubscription=get_field(data, "oversubscription", where, default=1.0),
        max_gpus=max_gpus,
        source=get_field(data, "source", where, str, ""), description=get_field(data, "description", where, str, ""),
        efficiency=efficiency, host=_host_from_dict(data.get("host"), f"{where}.host"),
        gpus_per_host=get_field(data, "gpus_per_host", where, int, None),
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


def _pool_name(value, field: str, missing_fix: str = "give every pool a name") -> str:
    """A pool's name as a pooled file writes it (its own ``name:`` or an end of a link's
    ``between``): text only. YAML reads an unquoted 010 as the number 8, 1:20 as 80, true as a
    boolean, so a number was taken by the digits YAML made of it (pool '8' for ``name: 010``) and
    a link's ``between: [1.5, true]`` found pools named '1.5' and 'True'."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(field, "missing", missing_fix)
    if not isinstance(value, str):
        raise InputError(field, f"expected a pool name (text), got {shown(value)}",
                         "quote it: YAML reads an unquoted 010, 1.5 or true as a number or a boolean")
    return value.strip()


def pool_from_dict(data: dict, index: int, base_dir: Path | None = None) -> Pool:
    """One entry of a pooled cluster file's ``pools`` list (see the module docstring); relative
    cluster and GPU paths are looked for beside the pooled file (``base_dir``) first."""
    if not isinstance(data, dict):
        raise InputError(f"pools[{index}]", "must be a mapping with name, gpus and cluster (or gpu, gpus_per_node, ...)")
    name = _pool_name(data.get("name"), f"pools[{index}].name")
    if "gpus" not in data or data["gpus"] is None:
        raise InputError(f"pools.{name}.gpus", "missing", "add 'gpus:' (the pool's GPU count)")
    gpus = data["gpus"]
    if isinstance(gpus, bool) or not isinstance(gpus, (int, float)) or gpus != gpus or gpus in (float("inf"), float("-inf")):
        raise InputError(f"pools.{name}.gpus", f"must be a positive integer, got {shown(gpus)}")
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
        raise InputError(f"links[{index}].between", f"must name two pools, got {shown(ends)}", "write between: [a, b]")
    ends = [_pool_name(end, f"links[{index}].between", "name the two pools it joins: between: [a, b]") for end in ends]
    where = f"links.{ends[0]}-{ends[1]}"
    refuse_unknown_keys(data, LINK_KEYS, where)
    bw = _bandwidth(data, where)
    latency = _number_in_file_unit(data, "latency_us", where, 10.0, 1e-6,
                           "one message's start-up time in microseconds", allow_zero=True)
    return PoolLink(pools=(ends[0], ends[1]), bw_bytes_per_s=bw, latency_s=latency * 1e-6,
                    kind=_network_kind(data, where, "ethernet"))


def pooled_cluster_from_dict(data: dict, where: str = "cluster", base_dir: Path | None = None) -> PooledCluster:
    """Build a ``PooledCluster`` from a pooled cluster mapping (``pools`` and ``links``); relative
    paths in its pools are looked for beside the file first (``base_dir``)."""
    name = check_name(f"{where}.name", get_field(data, "name", where, str))
    refuse_unknown_keys(data, POOLED_KEYS, f"cluster {name}")
    pools = data.get("pools")
    if not isinstance(pools, list) or not pools:
        raise InputError(f"cluster {name}.pools", "must be a list of pools", "add at least one pool")
    links = data.get("links") or []
    if not isinstance(links, list):
        raise InputError(f"cluster {name}.links", "must be a list of links")
    return PooledCluster(name=name, pools=tuple(pool_from_dict(p, i, base_dir) for i, p in enumerate(pools)),
                         links=tuple(_link_from_dict(l, i) for i, l in enumerate(links)),
                         description=get_field(data, "description", where, str, ""), source=get_field(data, "source", where, str, ""))


def files_read(kind: str, name_or_path: str) -> frozenset[Path]:
    """The files loading ``name_or_path`` as a ``kind`` ("clusters", "gpus", "stacks",
    "efficiency") reads: the file itself and, for a cluster, the GPU file it names and, for a
    pooled cluster, each pool's cluster and GPU files (resolved as the loaders resolve them). A
    pure function of the files on disk (nothing is recorded); a name or file that does not
    resolve or parse reads nothing here (loading it says why). The CLI refuses an output that
    would replace one of these."""
    try:
        path = _resolve(kind, name_or_path, kind)
    except (InputError, OSError, TypeError, ValueError):
        return frozenset()
    found = {path}
    if kind != "clusters":
        return frozenset(found)

    def gpu_of(entry: dict, base: Path) -> None:
        ref = entry.get("gpu")
        if isinstance(ref, str):
            found.update(files_read("gpus", beside_file(ref, base)))

    try:
        data = read_yaml(path, "cluster")
    except (InputError, OSError):
        return frozenset(found)
    gpu_of(data, path.parent)
    pools = data.get("pools")
    for pool in pools if isinstance(pools, list) else ():
        if not isinstance(pool, dict):
            continue
        gpu_of(pool, path.parent)
        ref = pool.get("cluster")
        if ref is not None:
            try:
                base_path = _resolve("clusters", beside_file(str(ref), path.parent), "cluster")
                found.add(base_path)
                base = read_yaml(base_path, "cluster")
            except (InputError, OSError):
                continue
            if "gpu" not in pool:
                gpu_of(base, base_path.parent)
    return frozenset(found)


@lru_cache(maxsize=None)
def _load_gpu_cached(path: str, mtime: float) -> GPUSpec:
    return gpu_from_dict(read_yaml(Path(path), "gpu"))


@lru_cache(maxsize=None)
def _cluster_file_data(path: str, mtime: float) -> dict[str, Any]:
    """A cluster file parsed once per (path, modification time), as the loaded specs are cached:
    one ``simulate`` or ``plan`` asked whether it is pooled, which GPU file it names and then
    loaded it, parsing the one file three times (a catalog cluster's parse cost as much as
    the rest of a refused fuzz input). Callers that build from it get a ``deepcopy``; a file
    that does not parse raises each time (``lru_cache`` keeps no exception)."""
    return read_yaml(Path(path), "cluster")


@lru_cache(maxsize=None)
def _load_cluster_cached(path: str, mtime: float, gpu_mtime: float | None = None) -> ClusterSpec:
    cluster = cluster_from_dict(deepcopy(_cluster_file_data(path, mtime)), base_dir=Path(path).parent)
    if cluster.efficiency is not None:      # the footnote names the file the factors are in
        cluster = replace(cluster, efficiency=replace(cluster.efficiency, origin=f"inline in {path}"))
    return cluster


@lru_cache(maxsize=None)
def _cluster_gpu_file(path: str, mtime: float) -> str | None:
    """The GPU file a cluster file names (None: its GPU is written inline, or the file does not
    load; loading the cluster then says why)."""
    try:
        ref = _cluster_file_data(path, mtime).get("gpu")
        return str(_resolve("gpus", beside_file(ref, Path(path).parent), "gpu")) if isinstance(ref, str) else None
    except (InputError, AttributeError):
        return None


def _cluster_stamp(p: Path) -> tuple[float, float | None]:
    """The modification times of a cluster file and of the GPU file it names: the cache of loaded
    clusters is keyed on both, so an edited GPU file reloads the clusters that name it (keyed on
    the cluster file's alone, the old GPU stayed in them for the life of the process)."""
    mtime = p.stat().st_mtime
    gpu_file = _cluster_gpu_file(str(p), mtime)
    try:
        return mtime, None if gpu_file is None else Path(gpu_file).stat().st_mtime
    except OSError:
        return mtime, None


@lru_cache(maxsize=None)
def _load_pooled_cached(path: str, mtime: float) -> PooledCluster:
    return pooled_cluster_from_dict(deepcopy(_cluster_file_data(path, mtime)), base_dir=Path(path).parent)


@lru_cache(maxsize=None)
def _load_efficiency_cached(path: str, mtime: float) -> EfficiencyModel:
    return efficiency_from_dict(read_yaml(Path(path), "efficiency"), origin=path)


@lru_cache(maxsize=None)
def _load_serving_efficiency_cached(path: str, mtime: float) -> ServingEfficiency:
    return serving_efficiency_from_dict(read_yaml(Path(path), "serving_efficiency"), origin=path)


def load_serving_efficiency(generation_or_path: str) -> ServingEfficiency:
    """The serving-kernel efficiency of a GPU generation (or from a YAML file path). A
    generation no serving run measured has a written prior (``prior: true``, its donor's fitted
    factors: ``paraplan.validation.serving_fit.write_serving_priors``), which a user's file for
    the generation (``PARAPLAN_HARDWARE_PATH``) replaces, as it would where none is shipped; a
    generation with neither gets ``default.yaml``, a hand-set prior (``prior: true``)."""
    candidate = Path(generation_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        p = _resolve("serving_efficiency", generation_or_path, "serving_efficiency")
    else:
        entries = _entries("serving_efficiency")
        key = generation_or_path.strip().lower()
        p = entries.get(key) or entries.get("default")
        if p is not None and p.stem == key and p.parent == BUILTIN_DIR / "serving_efficiency" \
                and _load_serving_efficiency_cached(str(p), p.stat().st_mtime).prior:
            # a shipped prior yields to the user's own profile of the generation
            user = [d / p.name for d in _search_dirs("serving_efficiency")[1:] if is_file(d / p.name)]
            p = user[0] if user else p
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
    return {framework_key(load_stack(n).framework) for n in _entries("stacks") if load_stack(n).serving is not None}


#: a release tag that is no number (``nightly``, ``nightly-5b8c30d6``): one word
_RELEASE_TAG = re.compile(r"[a-z][a-z0-9._+\-]*", re.IGNORECASE)


def serving_profile_lists_tag(framework: str, version: str) -> bool:
    """Whether ``version`` is a tag, not a numbered release, that a serving profile of
    ``framework`` lists, or a build of one (``_tag_names``: vllm-0.14 lists ``nightly``, and so
    the serving-runs file's ``nightly-5b8c30d6``): a user may give it as a release. A
    numbered spelling is judged by ``release_match.looks_like_release`` alone (``covers`` reads
    ``0.11.0 0.12.0`` as a build of 0.11)."""
    text = str(version).strip()
    if release_numbers(text) is not None or not _RELEASE_TAG.fullmatch(text):
        return False
    key = framework_key(framework)
    return any(framework_key(s.framework) == key and any(_tag_names(listed, text) for listed in s.versions)
               for s in (load_stack(n) for n in sorted(_entries("stacks"))) if s.serving is not None)


def _tag_names(listed: str, tag: str) -> bool:
    """Whether ``tag`` is the listed tag itself or a build of it: the listed tag followed by ``-``,
    ``.`` or ``+`` and more (``nightly-5b8c30d6`` of ``nightly``), case aside. Stricter than
    ``StackSpec.covers``, which reads the validation files' cells and so takes a leading ``v``
    and an ``rc`` suffix (``vnightly``, ``nightlyrc2`` are no tags a profile lists)."""
    listed, tag = listed.lower(), tag.lower()
    if release_numbers(listed) is not None:
        return False
    return tag == listed or (tag.startswith(listed) and len(tag) > len(listed) + 1 and tag[len(listed)] in "-.+")


def serving_release_match(framework: str, version: str | None = None) -> ReleaseMatch:
    """The serving stack of ``framework`` (vllm, sglang, trtllm) describing release ``version``
    (a listed release or a patch / rc / post release of one, ``StackSpec.covers``; a release no
    profile lists: the newest profiled release before it, ``release_match.match_release``, with
    a note saying so); with no version, the framework's stack marked
    ``default_when_version_unstated``. A release no rule places is an ``InputError`` listing the
    known ones."""
    key = str(framework).strip().lower()
    candidates = [load_stack(n) for n in sorted(_entries("stacks"))]
    candidates = [s for s in candidates if s.serving is not None and framework_key(s.framework) == framework_key(key)]
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
    return _load_cluster_cached(str(p), *_cluster_stamp(p))


def is_pooled(name_or_path: str) -> bool:
    """Whether the cluster named ``name_or_path`` is a pooled (mixed) cluster file."""
    p = _resolve("clusters", name_or_path, "cluster")
    return "pools" in _cluster_file_data(str(p), p.stat().st_mtime)


def load_pooled_cluster(name_or_path: str, gpus: int | None = None) -> PooledCluster:
    """The cluster named ``name_or_path`` as pools: a pooled file as written, a one-kind
    cluster as one pool of ``gpus`` GPUs (default: its ``max_gpus``)."""
    p = _resolve("clusters", name_or_path, "cluster")
    if "pools" in _cluster_file_data(str(p), p.stat().st_mtime):
        if gpus is not None:
            raise InputError("gpus", f"cluster {p.stem} lists its pools and their GPU counts",
                             "drop --gpus, or edit the pools' gpus")
        return _load_pooled_cached(str(p), p.stat().st_mtime)
    return one_pool(_load_cluster_cached(str(p), *_cluster_stamp(p)), gpus)


def one_pool(cluster: ClusterSpec, gpus: int | None = None) -> PooledCluster:
    """A one-kind ``cluster`` as one pool of ``gpus`` GPUs (default: its ``max_gpus``);
    ``InputError`` where neither gives a count."""
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


#: a framework's full name -> the key its stacks are filed under (TensorRT-LLM's stack files
#: name it ``trtllm``, as AIConfigurator's rows do; its own documentation writes TensorRT-LLM)
_FRAMEWORK_FULL_NAMES = {"tensorrtllm": "trtllm"}


def framework_key(name) -> str:
    """A framework or serving backend name as the stack catalog matches it: case, spaces, '-' and
    '_' ignored (``Megatron_LM`` is ``megatron-lm``, ``vLLM`` is ``vllm``), and ``TensorRT-LLM``
    is ``trtllm`` (``_FRAMEWORK_FULL_NAMES``)."""
    key = "".join(ch for ch in str(name).strip().lower() if ch not in " -_")
    return _FRAMEWORK_FULL_NAMES.get(key, key)


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
    version the source does not state resolves to the framework's stack marked
    ``default_when_version_unstated``, else to its only stack (noted). Raises ``InputError`` naming ``framework`` or
    ``framework_version`` (with the known values) when nothing matches.
    """
    # the catalog's folder listed once, not once per stack (validation asks for every row); each
    # file's mtime still read per call, so an edited stack file is seen at once
    entries = _entries("stacks")
    stamped = tuple((str(p), p.stat().st_mtime) for p in (entries[n] for n in sorted(entries)))
    if _unstated(framework):
        stacks = _stacks_indexed(stamped)[0]
        raise InputError("framework", "not stated, so no software stack applies",
                         "name one of: " + ", ".join(sorted({s.framework for s in stacks})))
    fw = str(framework).strip().lower()
    key = None if _unstated(version) else str(version).strip()
    match = _release_match_cached(stamped, fw, key)
    if match is not None:
        return match
    stacks, by_framework = _stacks_indexed(stamped)
    mine = by_framework.get(framework_key(fw), ())
    if not mine:
        raise InputError("framework", f"no software stack for framework {framework!r}",
                         suggest(fw, sorted({s.framework for s in stacks})))
    known = sorted({v for s in mine for v in s.versions})
    if key is None:
        raise InputError("framework_version", f"{framework} needs a version (its stacks differ by release)",
                         "known: " + ", ".join(known))
    raise InputError("framework_version", f"no {framework} stack for version {key!r}",
                     "known: " + ", ".join(known))


@lru_cache(maxsize=16)
def _stacks_indexed(stamped: tuple[tuple[str, float], ...]) -> tuple[tuple[StackSpec, ...], MappingProxyType]:
    """The catalog's stacks (``stamped``: (path, mtime) in name order) and, read-only, each
    framework key (``framework_key``) -> its stacks in that order: built once per catalog state
    rather than once per ``release_match_for`` call (validation asks for every row)."""
    stacks = tuple(_load_stack_cached(path, mtime) for path, mtime in stamped)
    by_framework: dict[str, tuple[StackSpec, ...]] = {}
    for s in stacks:
        k = framework_key(s.framework)
        by_framework[k] = by_framework.get(k, ()) + (s,)
    return stacks, MappingProxyType(by_framework)


@lru_cache(maxsize=4096)
def _release_match_cached(stamped: tuple[tuple[str, float], ...], fw: str, key: str | None) -> ReleaseMatch | None:
    """``release_match_for``'s answer for framework ``fw`` (stripped, lower case) at release
    ``key`` (stripped; ``None``: not stated) in the catalog state ``stamped``; ``None`` where
    nothing matches (the caller raises the error). A pure function of its arguments (the stack
    files' contents are keyed by their mtimes), so memoised."""
    by_framework = _stacks_indexed(stamped)[1]
    mine = by_framework.get(framework_key(fw), ())
    if not mine:
        return None
    numbers = release_numbers(key) if key is not None else None
    if framework_key(fw) == "megatronlm" and numbers is not None and numbers[0] == 0:
        # Megatron-LM's releases since 2025 (v0.11.0, core_r0.x / core_v0.x tags) are numbered as
        # the Megatron-Core they ship (NVIDIA/Megatron-LM tags v0.11.0 2025-03-14, v0.15.3
        # 2026-02-06; its own releases were v1.0-v2.6, 2020-2021): the megatron-core profiles
        core = match_release(list(by_framework.get("megatroncore", ())), "megatron-core", key)
        if core is not None:
            return ReleaseMatch(core.stack, f"{fw} {key} is a Megatron-Core release: "
                                            + (core.note or f"{core.stack.name}, the profile that lists it"))
    if key is None:
        chosen = [s for s in mine if s.default_when_version_unstated]
        if len(chosen) == 1:
            return ReleaseMatch(chosen[0])
        if len(mine) == 1:
            # one profile describes every release the catalog knows of the framework: the same
            # rule ``match_release`` applies to a release numbered unlike every profile ("main")
            return ReleaseMatch(mine[0], f"{fw} version not stated; the framework's only profile")
        return None
    return match_release(list(mine), fw, key)


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
