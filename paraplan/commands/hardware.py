"""``paraplan hardware list|show``: the GPU and cluster catalogs, in human units.

File units are converted back from the SI values the loaders produce: TFLOP/s, GiB, TB/s,
GB/s per GPU one direction for scale-up links, Gb/s per GPU for scale-out NICs, microseconds.
"""
from __future__ import annotations

import math

from pathlib import Path

import click

from hardware_specs.catalog import (efficiency_for, efficiency_for_cluster, is_pooled, list_clusters,
                                    list_gpus, load_cluster, load_gpu, load_pooled_cluster,
                                    load_serving_efficiency)
from hardware_specs.yaml_files import is_dir, is_file, read_yaml
from hardware_specs.pools import PooledCluster
from hardware_specs.cluster_spec import ClusterSpec, HostSpec, NetworkTier
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError, not_a_file, suggest
from hardware_specs.gpu_spec import KNOWN_DTYPES, GPUSpec
from paraplan.cli import dump_json, format_table

GIB = 2**30


def _r(x: float, nd: int = 3) -> float:
    return float(round(x, nd))


def gpu_row(gpu: GPUSpec) -> dict:
    """The ``hardware list`` columns of one GPU (human units in the names)."""
    peak = gpu.peak_flops_per_s
    return {
        "name": gpu.name,
        "generation": gpu.generation,
        "bf16_tflops": _r(peak["bf16"] / 1e12, 2) if "bf16" in peak else None,
        "fp16_tflops": _r(peak["fp16"] / 1e12, 2) if "fp16" in peak else None,
        "fp8_tflops": _r(peak["fp8"] / 1e12, 2) if "fp8" in peak else None,
        "hbm_gib": _r(gpu.hbm_bytes / GIB, 2),
        "hbm_bw_tb_per_s": _r(gpu.hbm_bw_bytes_per_s / 1e12, 3),
        "scaleup_bw_gb_per_s": _r(gpu.scaleup_bw_bytes_per_s / 1e9, 1),
        # whether training / serving times on this GPU rest on fitted factors or on a prior
        "efficiency_fitted": _fitted(lambda: efficiency_for(gpu).is_fitted),
        "serving_efficiency_fitted": _fitted(lambda: not load_serving_efficiency(gpu.generation).prior),
    }


def _fitted(read) -> bool | None:
    """``read()`` as a bool; None where the generation has no efficiency profile to read."""
    try:
        return bool(read())
    except InputError:
        return None


def gpu_detail(gpu: GPUSpec) -> dict:
    """Every field of a GPU profile, in file units."""
    return {
        "name": gpu.name,
        "vendor": gpu.vendor,
        "generation": gpu.generation,
        "peak_tflops": {d: _r(gpu.peak_flops_per_s[d] / 1e12, 2) for d in KNOWN_DTYPES
                        if d in gpu.peak_flops_per_s},
        "hbm_gib": _r(gpu.hbm_bytes / GIB, 3),
        "hbm_bw_tb_per_s": _r(gpu.hbm_bw_bytes_per_s / 1e12, 3),
        "scaleup_bw_gb_per_s": _r(gpu.scaleup_bw_bytes_per_s / 1e9, 2),
        "scaleup_domain_size": gpu.scaleup_domain_size,
        "sfu_tera_exp_per_s": None if gpu.sfu_exp_per_s is None else _r(gpu.sfu_exp_per_s / 1e12, 3),
        # GEMM tiles run in waves of sm_count (None: the smooth shape factor); portable
        # (mma.sync / Triton) attention kernels reach sync_mma_peak_fraction of the tensor rate
        "sm_count": gpu.sm_count,
        "sync_mma_peak_fraction": gpu.sync_mma_peak_fraction,
        "sustained_tensor_fraction": gpu.sustained_tensor_fraction,
        "source": gpu.source,
    }


def _tier(t: NetworkTier) -> dict:
    out = {"kind": t.kind, "bw_gbit_per_s": _r(t.bw_bytes_per_s * 8 / 1e9, 1),
           "bw_gb_per_s": _r(t.bw_bytes_per_s / 1e9, 2), "latency_us": _r(t.latency_s * 1e6, 3)}
    if t.communicator_bus_bw_bytes_per_s is not None:
        out["communicator_busbw_gb_per_s"] = _r(t.communicator_bus_bw_bytes_per_s / 1e9, 3)
    if t.mesh_peer_bw_bytes_per_s is not None:
        out["mesh_peer_bw_gb_per_s"] = _r(t.mesh_peer_bw_bytes_per_s / 1e9, 3)
    if t.torus_dims is not None:
        out["torus_dims"] = list(t.torus_dims)
        out["links_per_chip"] = t.links_per_chip
    return out


def cluster_row(c: ClusterSpec) -> dict:
    """The ``hardware list`` columns of one cluster."""
    return {
        "name": c.name,
        "gpu": c.gpu.name,
        "gpus_per_node": c.gpus_per_node,
        "scaleup_gbit_per_s": _r(c.scaleup.bw_bytes_per_s * 8 / 1e9, 1),
        "scaleout_gbit_per_s": _r(c.scaleout.bw_bytes_per_s * 8 / 1e9, 1),
        "scaleup_latency_us": _r(c.scaleup.latency_s * 1e6, 3),
        "scaleout_latency_us": _r(c.scaleout.latency_s * 1e6, 3),
    }


def pooled_row(c: PooledCluster) -> dict:
    """The ``hardware list`` columns of a pooled (mixed) cluster: its pools in the GPU column."""
    return {
        "name": c.name,
        "gpu": " + ".join(f"{p.gpus}x {p.cluster.gpu.name}" for p in c.pools),
        "gpus_per_node": "/".join(str(p.gpus_per_node) for p in c.pools),
        "scaleup_gbit_per_s": "/".join(f"{p.cluster.scaleup.bw_bytes_per_s * 8 / 1e9:g}" for p in c.pools),
        "scaleout_gbit_per_s": "/".join(f"{p.cluster.scaleout.bw_bytes_per_s * 8 / 1e9:g}" for p in c.pools),
        "scaleup_latency_us": "/".join(f"{p.cluster.scaleup.latency_s * 1e6:g}" for p in c.pools),
        "scaleout_latency_us": "/".join(f"{p.cluster.scaleout.latency_s * 1e6:g}" for p in c.pools),
    }


def pooled_detail(c: PooledCluster) -> dict:
    """Every pool (its fabric, GPU and efficiency model) and every pair's link, in file units."""
    pools = []
    for p in c.pools:
        eff = efficiency_for_cluster(p.cluster)
        pools.append({"name": p.name, "gpus": p.gpus, "gpus_per_node": p.gpus_per_node, "cluster": p.cluster.name,
                      "gpu": gpu_detail(p.cluster.gpu), "scaleup": _tier(p.cluster.scaleup),
                      "scaleout": _tier(p.cluster.scaleout), "oversubscription": p.cluster.oversubscription,
                      "efficiency_generation": eff.generation, "efficiency_fitted": not eff.is_prior})
    links = []
    names = c.pool_names
    explicit = {frozenset(l.pools) for l in c.links}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            tier = c.link(a, b)
            bw, lat = c.path(a, b)
            links.append({"between": [a, b], "explicit": frozenset((a, b)) in explicit, **_tier(tier),
                          "path_bw_gbit_per_s": _r(bw * 8 / 1e9, 1), "path_latency_us": _r(lat * 1e6, 3)})
    return {"name": c.name, "description": c.description, "total_gpus": c.total_gpus, "pools": pools,
            "links": links, "source": c.source}


def _load_cluster_row(name: str) -> dict:
    return pooled_row(load_pooled_cluster(name)) if is_pooled(name) else cluster_row(load_cluster(name))


def efficiency_detail(eff: EfficiencyModel) -> dict:
    return {
        "generation": eff.generation,
        "gemm_peak_fraction": dict(eff.gemm_peak_fraction),
        "gemm_half_dim": eff.gemm_half_dim,
        "attention_peak_fraction": eff.attention_peak_fraction,
        "hbm_fraction": eff.hbm_fraction,
        "scaleup_fraction": eff.scaleup_fraction,
        "scaleout_fraction": eff.scaleout_fraction,
        "kernel_overhead_s": eff.kernel_overhead_s,
        # the host's time to issue one kernel from an eager framework (0: no host bound)
        "cpu_issue_s": eff.cpu_issue_s,
        "fitted_factors": list(eff.fitted_factors),
        # NaN in the dataclass means "never fitted": shown as null, not as a number
        "fit_objective": eff.fit_objective if math.isfinite(eff.fit_objective) else None,
        "exposed_softmax_fraction": eff.exposed_softmax_fraction,
        "optimizer_hbm_fraction": eff.optimizer_hbm_fraction,
        "sync_skew_fraction": eff.sync_skew_fraction,
        "collective_bw_fraction": dict(eff.collective_bw_fraction),
        "fitted_on": eff.fitted_on,
        "fitted": eff.is_fitted,
    }


def host_detail(h: HostSpec | None) -> dict | None:
    """The host block of a cluster (offload): each GPU's link to host memory (GB/s one
    direction) and the node's host memory (GiB) and its bandwidth (GB/s); None = not stated."""
    if h is None:
        return None
    return {
        "link": h.link,
        "link_bw_gb_per_s": _r(h.link_bw_bytes_per_s / 1e9, 3),
        "memory_gib": None if h.memory_bytes is None else _r(h.memory_bytes / GIB, 3),
        "memory_bw_gb_per_s": None if h.memory_bw_bytes_per_s is None else _r(h.memory_bw_bytes_per_s / 1e9, 3),
        # a PCIe switch's link to the CPU (GB/s one direction; None = as fast as each GPU's own) and
        # the GPUs behind it: offload copies get min(link, uplink / gpus_per_uplink)
        "uplink_bw_gb_per_s": None if h.uplink_bw_bytes_per_s is None else _r(h.uplink_bw_bytes_per_s / 1e9, 3),
        "gpus_per_uplink": h.gpus_per_uplink,
        "source": h.source,
    }


def cluster_detail(c: ClusterSpec) -> dict:
    return {
        "name": c.name,
        "description": c.description,
        "gpu": gpu_detail(c.gpu),
        "gpus_per_node": c.gpus_per_node,
        # GPUs one host (one torchrun agent) drives; None = the scale-up domain is one host
        "gpus_per_host": c.gpus_per_host,
        "scaleup": _tier(c.scaleup),
        "scaleout": _tier(c.scaleout),
        "rail_optimized": c.rail_optimized,
        "oversubscription": c.oversubscription,
        "max_gpus": c.max_gpus,
        "host": host_detail(c.host),
        "source": c.source,
    }


def _load_all(names, loader, row, what):
    rows = []
    for name in names:
        try:
            rows.append(row(loader(name)))
        except InputError as exc:   # one broken user file must not hide the rest of the catalog
            click.echo(f"warning: skipped {what} {name}: {exc}", err=True)
    return rows


def _efficiency_or_none(gpu: GPUSpec) -> tuple[EfficiencyModel | None, str]:
    try:
        return efficiency_for(gpu), ""
    except InputError as exc:
        return None, str(exc)


def _resolve_entry(name: str) -> tuple[str, GPUSpec | ClusterSpec]:
    """A GPU or a cluster by catalog name or YAML path (a cluster file has a ``gpu`` key)."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") or is_file(path):
        if not is_file(path):
            raise InputError("NAME", not_a_file(name), "check the path, or give a name from `paraplan hardware list`")
        data = read_yaml(path, "hardware")
        if "pools" in data:
            return "pooled", load_pooled_cluster(name)
        if "gpu" in data or any(k in data for k in ("gpus_per_node", "scaleup", "scaleout")):
            return "cluster", load_cluster(name)      # a cluster file without its gpu says so
        if "peak_tflops" not in data and any(k in data for k in ("num_layers", "hidden_size", "serving", "training")):
            raise InputError("NAME", f"{name} is neither a GPU nor a cluster file (it reads as a model or a stack)",
                             "give a GPU or cluster YAML (see hardware_specs/gpus, hardware_specs/clusters)")
        return "gpu", load_gpu(name)
    key = name.strip().lower()
    if key in list_gpus():
        return "gpu", load_gpu(key)
    if key in list_clusters():
        if is_pooled(key):
            return "pooled", load_pooled_cluster(key)
        return "cluster", load_cluster(key)
    if name.strip() and is_dir(path):
        raise InputError("NAME", f"{name} is a folder, not a GPU or cluster file",
                         "give a GPU or cluster YAML, or a name from `paraplan hardware list`")
    raise InputError("NAME", f"unknown GPU or cluster '{name}'", suggest(key, list_gpus() + list_clusters()))


def _versions_text(versions) -> str:
    """Up to four releases listed; more as the first two ... the last (and how many)."""
    if len(versions) <= 4:
        return ", ".join(versions) or "-"
    return f"{versions[0]}, {versions[1]} ... {versions[-1]} ({len(versions)})"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3].rstrip() + "..."


def _table(rows: list[dict]) -> str:
    if not rows:
        return "  (none)\n"
    return format_table([list(r.values()) for r in rows], list(rows[0]))


def _kv_lines(d: dict, indent: str = "  ") -> list[str]:
    width = max(len(k) for k in d)
    lines = []
    for k, v in d.items():
        if isinstance(v, dict):
            v = "  ".join(f"{kk} {vv}" for kk, vv in v.items())
        elif isinstance(v, (list, tuple)):
            v = ", ".join(str(x) for x in v)
        if v is None or v == "":        # an empty dict or list too: say there is nothing
            v = "-"
        lines.append(f"{indent}{k.ljust(width)}  {v}")
    return lines


def _gpu_text(g: dict) -> list[str]:
    peaks = g["peak_tflops"]
    out = [f"gpu {g['name']} ({g['vendor'] or 'unknown vendor'}, generation {g['generation']})",
           "  peak_tflops (dense, per dtype):"]
    out += [f"    {d.ljust(6)} {v:>9.2f}" for d, v in peaks.items()]
    rest = {k: v for k, v in g.items()
            if k not in ("kind", "name", "vendor", "generation", "peak_tflops", "efficiency")}
    return out + _kv_lines(rest)


def _eff_text(e: dict | None, why: str, label: str) -> list[str]:
    if e is None:
        return [f"efficiency model: none ({why})"]
    return [f"efficiency model ({label}):"] + _kv_lines(e)


@click.group("hardware", short_help="GPU and cluster profiles: list them, show one.")
def command() -> None:
    """Which accelerators and systems paraplan knows, and their datasheet numbers.

    Profiles are YAML files (hardware_specs/gpus, hardware_specs/clusters); add one by dropping a
    file there or in a folder named by PARAPLAN_HARDWARE_PATH.

    \b
    Example:
      paraplan hardware list
      paraplan hardware show dgx-h100
    """


@command.command("list", short_help="Table of every GPU and cluster profile.")
@click.option("--json", "as_json", is_flag=True, help="Print {gpus: [...], clusters: [...]} as JSON.")
def list_cmd(as_json: bool) -> None:
    """Which GPUs and clusters are in the catalog, with their headline numbers.

    GPU columns: dense peak TFLOP/s, HBM GiB and TB/s, scale-up GB/s per GPU one direction, and
    whether the generation's training and serving efficiency models are fitted to measured runs
    (False: an unfitted prior; its numbers are marked * where printed).
    Cluster columns: GPUs per scale-up node, per-GPU link Gb/s and latency in microseconds.

    \b
    Example:
      paraplan hardware list --json
    """
    gpus = _load_all(list_gpus(), load_gpu, gpu_row, "gpu")
    clusters = _load_all(list_clusters(), lambda n: n, _load_cluster_row, "cluster")
    if as_json:
        click.echo(dump_json({"gpus": gpus, "clusters": clusters}), nl=False)
        return
    click.echo("GPUs (dense peaks, no sparsity)")
    click.echo(_table(gpus), nl=False)
    click.echo("\nClusters (bandwidth per GPU, one direction)")
    click.echo(_table(clusters), nl=False)


@command.command("show", short_help="Every field of one GPU or cluster, with units.")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print every field as JSON.")
def show_cmd(name: str, as_json: bool) -> None:
    """Every number paraplan uses for one GPU or cluster, with units, and the fitted efficiency
    model of its GPU generation.

    NAME is a catalog name (see `paraplan hardware list`) or a YAML file path.

    \b
    Example:
      paraplan hardware show h100-sxm-80gb
    """
    kind, spec = _resolve_entry(name)
    if kind == "pooled":
        detail = {"kind": "pooled", **pooled_detail(spec)}
        click.echo(dump_json(detail) if as_json else _pooled_text(detail), nl=False)
        return
    gpu = spec if kind == "gpu" else spec.gpu
    own = kind == "cluster" and spec.efficiency is not None
    eff, why = (spec.efficiency, "") if own else _efficiency_or_none(gpu)
    label = f"measured on {spec.name}" if own else f"generation {gpu.generation}"
    eff_d = efficiency_detail(eff) if eff is not None else None
    if kind == "gpu":
        detail = {"kind": "gpu", **gpu_detail(spec), "efficiency": eff_d}
    else:
        detail = {"kind": "cluster", **cluster_detail(spec), "efficiency": eff_d}
    if as_json:
        click.echo(dump_json(detail), nl=False)
        return
    lines: list[str] = []
    if kind == "gpu":
        lines += _gpu_text(detail)
    else:
        d = detail
        lines.append(f"cluster {d['name']}: {d['description'] or '-'}")
        for tier in ("scaleup", "scaleout"):
            t = d[tier]
            lines.append(f"  {tier.ljust(16)}  {t['kind']}: {t['bw_gbit_per_s']:g} Gb/s "
                         f"({t['bw_gb_per_s']:g} GB/s) per GPU one direction, latency {t['latency_us']:g} us")
            if "communicator_busbw_gb_per_s" in t:
                lines.append(f"  {'':16}  one communicator measured at {t['communicator_busbw_gb_per_s']:g} GB/s "
                             "of bus bandwidth across nodes, at most (see the cluster file)")
            if "mesh_peer_bw_gb_per_s" in t:
                lines.append(f"  {'':16}  full mesh, no switch: {t['mesh_peer_bw_gb_per_s']:g} GB/s to each peer "
                             "one direction (mesh_peer_bw_gb_per_s)")
            if "torus_dims" in t:
                lines.append(f"  {'':16}  torus {' x '.join(map(str, t['torus_dims']))}, {t['links_per_chip']} links a chip "
                             f"of {t['bw_gb_per_s'] / t['links_per_chip']:.3g} GB/s one way: a group runs on the links "
                             "of the axes it spans (torus_dims, links_per_chip)")
        lines += _kv_lines({k: d[k] for k in ("gpus_per_node", "gpus_per_host", "rail_optimized",
                                               "oversubscription", "max_gpus", "source")})
        if d["host"] is None:
            lines.append("  host: - (not stated; offload is refused)")
        else:
            lines.append("  host (link per GPU one direction; memory per node):")
            lines += _kv_lines(d["host"], "    ")
        lines.append("")
        lines += _gpu_text(d["gpu"])
    lines.append("")
    lines += _eff_text(eff_d, why, label)
    click.echo("\n".join(lines))


def _pooled_text(d: dict) -> str:
    """Pools (GPU, count, node, tiers, efficiency model) and the links between them."""
    lines = [f"cluster {d['name']}: {d['description'] or '-'}", f"  {d['total_gpus']} GPUs in {len(d['pools'])} pools", ""]
    rows = []
    for p in d["pools"]:
        g = p["gpu"]
        peak = g["peak_tflops"].get("bf16") or g["peak_tflops"].get("fp16") or g["peak_tflops"].get("fp32")
        rows.append([p["name"], g["name"], p["gpus"], p["gpus_per_node"], f"{peak:g}", f"{g['hbm_gib']:g}",
                     f"{p['scaleup']['kind']} {p['scaleup']['bw_gbit_per_s']:g}",
                     f"{p['scaleout']['kind']} {p['scaleout']['bw_gbit_per_s']:g}",
                     p["efficiency_generation"] + ("" if p["efficiency_fitted"] else " (prior, not fitted)")])
    # both tiers in Gb/s, as `hardware list` and the api what-ifs (scaleup_gbit_per_s) name them (was GB/s for NVLink)
    lines.append(format_table(rows, ["pool", "gpu", "gpus", "gpus_per_node", "peak_16bit_tflops", "hbm_gib",
                                     "scaleup_gbit_per_s", "scaleout_gbit_per_s", "efficiency"],
                              align="llrrrrlll", indent="  ").rstrip())
    if d["links"]:
        lines += ["", "  links between pools (per GPU, one direction; path = slowest of NIC, link, NIC)"]
        rows = [[" - ".join(l["between"]), "file" if l["explicit"] else "slower scale-out", l["kind"],
                 f"{l['bw_gbit_per_s']:g}", f"{l['latency_us']:g}", f"{l['path_bw_gbit_per_s']:g}"] for l in d["links"]]
        lines.append(format_table(rows, ["pools", "from", "kind", "bw_gbit_per_s", "latency_us", "path_gbit_per_s"],
                                  align="llllrr", indent="  ").rstrip())
    if d["source"]:
        lines += ["", f"  source: {d['source']}"]
    return "\n".join(lines) + "\n"


def _stack_named(name: str):
    """The stack ``name`` means: a catalog name or stack file, else a serving framework (``vllm``,
    ``sglang``, ``trtllm``) resolved as ``serve --backend NAME`` resolves it
    (``hardware_specs.catalog.serving_stack_for`` with no version: the profile marked the
    default), else an error listing every stack of that framework or starting with the name."""
    from hardware_specs.catalog import list_stacks, load_stack, serving_stack_for
    try:
        return load_stack(name)
    except InputError as err:
        if Path(name).suffix in (".yaml", ".yml") or is_file(Path(name)):
            raise
        unknown = err
    try:
        return serving_stack_for(name)
    except InputError:
        pass
    key = name.strip().lower()
    matching = [n for n in list_stacks() if n.startswith(key) or load_stack(n).framework.lower() == key]
    if matching and key:                # a blank name is the start of every stack's: unknown, not all of them
        raise InputError("stack", f"no stack named '{name}'",
                         "the stacks of that name: " + ", ".join(matching)) from None
    raise unknown


@command.command("stacks", short_help="The software stacks: what each framework release does, cited.")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print every stack (or NAME) with its behaviour and citations as JSON.")
def stacks_cmd(name: str | None, as_json: bool) -> None:
    """Which software stacks paraplan knows (``--stack`` on simulate and plan), or every documented
    behaviour of one with the framework file or page it comes from.

    A stack is data (hardware_specs/stacks/*.yaml): DP overlap and buckets, gradient dtype,
    ZeRO-3 prefetch, TP/EP overlap, attention kernel, fusion, CUDA graphs, plus what the
    release's recipes for particular models set on top.

    \b
    Example:
      paraplan hardware stacks
      paraplan hardware stacks megatron-bridge
      paraplan hardware stacks vllm      # a serving framework: the stack serve --backend vllm uses
    """
    from collections.abc import Mapping
    from dataclasses import asdict

    from hardware_specs.catalog import list_stacks, load_stack
    # an empty name is a name no stack has, not "all of them"
    stacks = [_stack_named(name)] if name is not None else [load_stack(n) for n in list_stacks()]
    data = [{"name": s.name, "framework": s.framework, "versions": list(s.versions), "description": s.description,
             "training": asdict(s.training) if s.training is not None else None,
             "serving": ({k: (dict(v) if isinstance(v, Mapping) else v)
                          for k, v in ((k, getattr(s.serving, k)) for k in s.serving.keys())}
                         if s.serving is not None else None),
             "recipes": [{"models": list(r.models), "gpus": list(r.gpus), "dtypes": list(r.dtypes),
                          "training": dict(r.training), "source": r.source} for r in s.recipes],
             "citations": dict(s.citations)} for s in stacks]
    if as_json:
        click.echo(dump_json(data if name is None else data[0]), nl=False)
        return
    if name is None:
        rows = [[d["name"], d["framework"], _versions_text(d["versions"])] for d in data]
        # the description fills what is left of 120 columns (all of it: hardware stacks NAME)
        room = max(120 - sum(max(len(r[i]) for r in rows + [["stack", "framework", "versions"]]) + 2 for i in range(3)), 30)
        rows = [r + [_clip(d["description"], room)] for r, d in zip(rows, data)]
        click.echo(format_table(rows, ["stack", "framework", "versions", "description"], align="llll"), nl=False)
        return
    d = data[0]
    releases = ", ".join(d["versions"]) or ("runs that state no version" if stacks[0].default_when_version_unstated
                                            else "no release: chosen by name only")
    lines = [f"stack {d['name']} ({d['framework']} {releases}): {d['description']}"]
    for key, value in (d["training"] or {}).items():
        if isinstance(value, (tuple, list)):          # the features a release lacks: names, or none
            value = ", ".join(value) or "-"
        lines.append(f"  {key:32s} {value!s:>12}  {d['citations'].get('training.' + key, '')}")
    for key, value in (d.get("serving") or {}).items():
        lines.append(f"  {key:32s} {value!s:>12}  {d['citations'].get('serving.' + key, '')}")
    for r in d["recipes"]:
        sel = ", ".join(r["models"]) + (f" on {', '.join(r['gpus'])}" if r["gpus"] else "") + \
            (f" in {', '.join(r['dtypes'])}" if r["dtypes"] else "")
        lines.append(f"  recipe for {sel}: {r['training']}  ({r['source']})")
    click.echo("\n".join(lines))
