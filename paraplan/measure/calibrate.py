"""``paraplan calibrate``: measure this machine and write it as a catalog cluster file.

N local ranks (one per GPU, or N CPU processes splitting the cores) run the microbenchmarks of
``benchmarks.py`` at the same time, so each rank sees the machine as it is during a parallel
training run (shared memory bandwidth on CPU). The result is a cluster YAML with an inline
``gpu:`` (peak FLOP/s = fitted GEMM plateau, memory = measured streaming bandwidth and this
rank's share of RAM / the device memory, scale-up link = measured all-reduce bus bandwidth) and
an inline ``efficiency:`` model, loadable by ``hardware_specs.catalog.load_cluster(path)``.

Raw timings and fit residuals go next to it in ``<name>.calibration.json`` for auditing.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import yaml

from hardware_specs.efficiency_model import MIN_FRACTION
from hardware_specs.errors import InputError, safe_name
from paraplan.measure import benchmarks as bm
from paraplan.measure.fitting import fit_alpha_beta, fit_gemm, ring_allreduce_bus_bw
from paraplan.measure.runtime import (choose_device, cpu_wait_fraction, foreign_load, launch, report_progress,
                                      require_torch, run_queue_wait_s, synchronize, system_busy_cpu_s)

GIB = 2**30
#: How the cost models count the FLOPs of causal attention relative to full attention. The
#: attention efficiency is fitted under the same convention so that prediction = measurement.
ATTENTION_CAUSAL_FLOP_FACTOR = 0.5
#: compute before each calibrated collective (``benchmarks.collective_times_in_step``), and the
#: gaps whose small all-reduces measure the straggler wait (``sync_skew_fraction``): seconds
COLLECTIVE_GAP_S = 0.002
SKEW_GAPS_S = (0.001, 0.008, 0.032, 0.064)
#: all-reduce sizes (bytes) whose slopes are averaged, and seconds spent per (size, gap)
SKEW_SIZES = (4096, 524288)
SKEW_SECONDS_PER_GAP = 0.6
ALLREDUCE_SIZES = {"cpu": [2**k for k in range(12, 26, 2)], "cuda": [2**k for k in range(16, 31, 2)]}
MEMORY_BYTES = {"cpu": 128 * 2**20, "cuda": 2 * GIB}
#: share of the time a rank waited for a CPU held by another process above which a
#: calibration warns (see ``runtime.cpu_wait_fraction``).
LOADED_MACHINE = 0.15
#: root-mean-square relative error of the primary dtype's GEMM fit above which a calibration
#: warns: its timings do not follow the plateau-and-saturation model the cost models evaluate
#: (a busy or throttling machine, or a library that switches kernels between the shapes), so
#: the profile's GEMM rates are that uncertain
POOR_GEMM_FIT = 0.15
#: sweeps over the GEMM and memory benchmarks; each timing keeps its best sweep, so a burst of
#: foreign load during one sweep does not end up in the catalog.
SWEEPS = 2


def _dtypes_to_calibrate(kind: str) -> list[str]:
    return ["fp32"] if kind == "cpu" else ["bf16", "fp16"]


def calibration_steps(kind: str, world: int, sweeps: int) -> int:
    """The steps ``_calibration_worker`` reports its progress in: the kernel overhead, one per
    dtype and sweep of GEMMs, one per sweep of memory bandwidth, attention, and with more than
    one rank one per sweep and kind of collective and one per skew gap."""
    steps = 1 + len(_dtypes_to_calibrate(kind)) * sweeps + sweeps + 1
    if world > 1:
        steps += sweeps * len(bm.STEP_COLLECTIVES) + len(SKEW_GAPS_S)
    return steps


def _calibration_worker(rank: int, world: int, device, choice, args: dict) -> dict:
    """One rank's microbenchmarks; compute phases run on all ranks at once, then collectives."""
    torch = require_torch()
    import torch.distributed as dist
    names = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    dtype = names[choice.dtype]
    kind = choice.kind
    out: dict = {"rank": rank}
    sweeps = int(args.get("sweeps", SWEEPS))
    total, done = calibration_steps(kind, world, sweeps), 0

    def step(label: str) -> None:        # the next step starts: say so (rank 0, when asked)
        report_progress(args, rank, done, total, label)

    dist.barrier()
    busy0, own0, wall0 = system_busy_cpu_s(), time.process_time(), time.perf_counter()
    wait0 = run_queue_wait_s()
    step("kernel launch overhead")
    out["kernel_overhead_s"] = bm.kernel_overhead_s(device, dtype)
    if kind == "cuda":
        out["host_launch_s"] = bm.host_launch_s(device, dtype)
    done += 1
    shapes = bm.CPU_GEMM_SHAPES if kind == "cpu" else bm.CUDA_GEMM_SHAPES
    out["gemm_shapes"] = shapes
    out["gemm_s"] = {}
    for name in _dtypes_to_calibrate(kind):
        for sweep in range(sweeps):
            step(f"{name} GEMMs, pass {sweep + 1} of {sweeps}")
            dist.barrier()
            times = bm.gemm_times(device, names[name], shapes)
            best = out["gemm_s"].get(name, times)
            out["gemm_s"][name] = [min(x, y) for x, y in zip(best, times)]
            done += 1
    for sweep in range(sweeps):
        step(f"memory bandwidth, pass {sweep + 1} of {sweeps}")
        dist.barrier()
        bw = bm.memory_bandwidth(device, dtype, MEMORY_BYTES[kind])
        best = out.get("memory_bytes_per_s", bw)
        out["memory_bytes_per_s"] = {k: max(best[k], bw[k]) for k in bw}
        done += 1
    att_shapes = bm.CPU_ATTENTION_SHAPES if kind == "cpu" else bm.CUDA_ATTENTION_SHAPES
    out["attention_shapes"] = att_shapes
    step("attention")
    dist.barrier()
    out["attention_causal_s"] = bm.attention_times(device, dtype, att_shapes, causal=True)
    out["attention_full_s"] = bm.attention_times(device, dtype, att_shapes, causal=False)
    done += 1
    synchronize(device)
    dist.barrier()
    own = torch.tensor([time.process_time() - own0], dtype=torch.float64, device=device)
    dist.all_reduce(own)
    busy1 = system_busy_cpu_s()
    wall = time.perf_counter() - wall0
    out["foreign_load"] = foreign_load(None if busy0 is None or busy1 is None else busy1 - busy0, float(own), wall)
    out["cpu_wait_fraction"] = cpu_wait_fraction(wait0, run_queue_wait_s(), wall)
    if world > 1:
        sizes = ALLREDUCE_SIZES[kind]
        out["collective_bytes"] = sizes
        # Mean cost of one collective issued between compute phases, as a training step issues
        # them (arrival skew and wake-ups included); see benchmarks.collective_times_in_step.
        # like the GEMMs, each mean keeps its best sweep: a burst of foreign load (another
        # VM on the host) during one sweep triples every collective it touches
        gaps_run: list[float] = []
        out["collective_s"] = {}
        for sweep in range(sweeps):
            for kind_ in bm.STEP_COLLECTIVES:
                step(f"{kind_.replace('_', '-')} between {world} ranks, pass {sweep + 1} of {sweeps}")
                times = bm.collective_times_in_step(device, dtype, kind_, sizes, compute_gap_s=COLLECTIVE_GAP_S,
                                                    gaps_out=gaps_run)
                best = out["collective_s"].get(kind_, times)
                out["collective_s"][kind_] = [min(x, y) for x, y in zip(best, times)]
                done += 1
        out["collective_gap_s"] = float(np.mean(gaps_run))
        # the longer ranks compute between two synchronisations, the longer the first waits
        # for the last: the slope of a small all-reduce's mean time against the gap
        out["skew_gaps_s"] = list(SKEW_GAPS_S)
        out["skew_sizes"] = list(SKEW_SIZES)
        out["skew_allreduce_s"], out["skew_measured_gaps_s"] = [], []
        for gap in SKEW_GAPS_S:
            step(f"straggler wait after {gap * 1e3:g} ms of compute")
            measured_gaps: list[float] = []
            out["skew_allreduce_s"].append(bm.collective_times_in_step(
                device, dtype, "all_reduce", SKEW_SIZES, calls=int(max(12, SKEW_SECONDS_PER_GAP / gap)),
                compute_gap_s=gap, gaps_out=measured_gaps))
            out["skew_measured_gaps_s"].append(float(np.mean(measured_gaps)))
            done += 1
    step("done")
    if kind == "cuda":
        out["device_name"] = torch.cuda.get_device_name(device)
        major, minor = torch.cuda.get_device_capability(device)
        out["generation"] = f"sm{major}{minor}"
        out["device_memory_bytes"] = float(torch.cuda.get_device_properties(device).total_memory)
    return out


def _best_over_ranks(ranks: list[dict], key: str):
    """Element-wise minimum over ranks of a per-rank timing (or dict of timings).

    All ranks ran the benchmark at the same time on identical devices, so each is a sample of
    the same quantity under the same load; the minimum discards samples a foreign process
    preempted (calibration machines are often shared).
    """
    first = ranks[0][key]
    if isinstance(first, dict):
        return {k: _best_over_ranks([{key: r[key][k]} for r in ranks], key) for k in first}
    if isinstance(first, list):
        return [min(r[key][i] for r in ranks) for i in range(len(first))]
    return min(r[key] for r in ranks)


def _best_bandwidth_over_ranks(ranks: list[dict], key: str) -> dict:
    return {k: max(r[key][k] for r in ranks) for k in ranks[0][key]}


def attention_backward_ratio() -> float:
    """Backward / forward FLOPs of the attention core, as the cost models count it."""
    try:
        from cost_models.compute import ATTENTION_BACKWARD_RATIO
        return float(ATTENTION_BACKWARD_RATIO)
    except ImportError:       # cost models not installed: FlashAttention-2's five vs two matmuls
        return 2.5


def attention_flops(shape, causal: bool) -> float:
    """Forward + backward FLOPs of attention on (b, a, s, d), counted as the cost models do:
    forward ``4 b a s^2 d`` (QK^T and PV) times the causal factor, backward ``ratio`` x forward."""
    b, a, s, d = shape
    fwd = 4.0 * b * a * s * s * d * (ATTENTION_CAUSAL_FLOP_FACTOR if causal else 1.0)
    return fwd * (1.0 + attention_backward_ratio())


def _host_ram_bytes() -> float:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def measured_skew_fraction(slope: float) -> float:
    """The straggler wait per second of compute before a synchronisation (``sync_skew_fraction``)
    from the slope of a small all-reduce's time against the compute gap before it, clipped to
    [0, 1]; a slope under a thousandth is below what these few timings resolve (and below the
    efficiency model's plausible minimum for a fraction, ``MIN_FRACTION``): no measured wait, 0.
    (A measured 0.0006 had made the calibrated cluster file unloadable.)"""
    skew = float(np.clip(slope, 0.0, 1.0))
    return 0.0 if skew < MIN_FRACTION else skew


def _fraction(x: float) -> float:
    """Clamp a measured ratio into the (0, 1] range an efficiency factor must lie in."""
    return float(min(1.0, max(MIN_FRACTION, x)))


def summarize(ranks: list[dict], world: int, choice) -> dict:
    """Fit the per-rank raw timings into GPU, network and efficiency numbers (SI units)."""
    kind = choice.kind
    overhead = _best_over_ranks(ranks, "kernel_overhead_s")
    shapes = [tuple(s) for s in ranks[0]["gemm_shapes"]]
    gemm_s = _best_over_ranks(ranks, "gemm_s")
    fits = {name: fit_gemm(shapes, times, overhead) for name, times in gemm_s.items()}
    primary = _dtypes_to_calibrate(kind)[0]
    # The catalog's peak is the fitted plateau (not the single best shape), so the plateau
    # fraction is 1 by construction and the shape saturation carries the small-GEMM loss.
    peaks = {name: f.peak_flops_per_s for name, f in fits.items()}

    mem = _best_bandwidth_over_ranks(ranks, "memory_bytes_per_s")
    stream_bw = max(mem["copy"], mem["add"])
    kernel_bw = statistics.median([mem["layernorm"], mem["gelu"], mem["adam"]])

    att_shapes = [tuple(s) for s in ranks[0]["attention_shapes"]]
    att_causal = _best_over_ranks(ranks, "attention_causal_s")
    att_full = _best_over_ranks(ranks, "attention_full_s")
    # Forward is one kernel, backward two (cost_models.compute.attention_time_s).
    att_tput = [attention_flops(sh, True) / max(t - 3 * overhead, 0.5 * t) for sh, t in zip(att_shapes, att_causal)]
    # One fraction for all shapes: the median shape (short sequences reach less, long more).
    attention_fraction = _fraction(statistics.median(att_tput) / peaks[primary])

    kind_fractions: dict[str, float] = {}
    collective_fits: dict[str, dict] = {}
    if world > 1:
        sizes = ranks[0]["collective_bytes"]
        # regress on the compute gaps actually run (a GPU's GEMM count only approximates them)
        gaps = np.mean([r.get("skew_measured_gaps_s", r["skew_gaps_s"]) for r in ranks], axis=0)
        skew_t = np.mean([r["skew_allreduce_s"] for r in ranks], axis=0)      # [gap, size]
        skew = measured_skew_fraction(np.mean(np.polyfit(gaps, skew_t, 1)[0]))
        # every rank's mean is a sample of the same cost (the wait for the other ranks included);
        # the straggler wait for the calibration's own compute gap is charged separately
        mean_s = {k: [max(1e-6, statistics.fmean(x for x in (r["collective_s"][k][i] for r in ranks) if x == x)
                          - skew * float(np.mean([r.get("collective_gap_s", COLLECTIVE_GAP_S) for r in ranks])))
                      for i in range(len(sizes))] for k in ranks[0]["collective_s"]}
        kind_fits = {k: fit_alpha_beta(sizes, t) for k, t in mean_s.items()}
        collective_fits = {k: vars(f) for k, f in kind_fits.items()}
        bus_bw = ring_allreduce_bus_bw(kind_fits["all_reduce"].bw_bytes_per_s, world)
        # A ring all-reduce takes 2 (n-1) latency-bound steps.
        latency = kind_fits["all_reduce"].alpha_s / (2 * (world - 1))
        # Bandwidth of the other kinds relative to the ring model at the all-reduce's bus
        # bandwidth: a ring reduce-scatter / all-gather moves (n-1)/n of the buffer, p2p all of it.
        ring_share = {"reduce_scatter": (world - 1) / world, "all_gather": (world - 1) / world, "p2p": 1.0}
        for k, share in ring_share.items():
            if k in kind_fits:
                kind_fractions[k] = round(_fraction(share * kind_fits[k].bw_bytes_per_s / bus_bw), 4)
    else:
        bus_bw, latency, skew = stream_bw / 2, 0.0, 0.0   # one rank: "communication" is a local copy

    if kind == "cuda":
        memory_bytes = ranks[0]["device_memory_bytes"]
    else:
        memory_bytes = _host_ram_bytes() / world
    return {
        "peak_flops_per_s": peaks, "gemm_fits": {k: vars(v) for k, v in fits.items()},
        "gemm_half_dim": fits[primary].half_dim, "kernel_overhead_s": overhead,
        "host_launch_s": _best_over_ranks(ranks, "host_launch_s") if "host_launch_s" in ranks[0] else None,
        "stream_bw_bytes_per_s": stream_bw, "hbm_fraction": _fraction(kernel_bw / stream_bw),
        "optimizer_hbm_fraction": _fraction(mem["adam"] / stream_bw),
        "memory_bytes_per_s": mem, "memory_bytes": memory_bytes,
        "attention_flops_per_s": att_tput, "attention_peak_fraction": attention_fraction,
        "attention_full_s": att_full, "attention_causal_s": att_causal,
        "collective_fits": collective_fits, "allreduce_bus_bw_bytes_per_s": bus_bw,
        "link_latency_s": latency, "collective_bw_fraction": kind_fractions, "sync_skew_fraction": skew,
        "foreign_load": ranks[0].get("foreign_load"),
        "cpu_wait_fraction": max((r["cpu_wait_fraction"] for r in ranks if r.get("cpu_wait_fraction") is not None),
                                 default=None),
    }


def cluster_mapping(summary: dict, ranks: list[dict], world: int, choice, name: str) -> dict:
    """The catalog cluster mapping (human units, see ``hardware_specs.catalog``)."""
    torch = require_torch()
    kind = choice.kind
    if kind == "cuda":
        gpu_name = safe_name("local-" + ranks[0]["device_name"].lower())
        generation, vendor = ranks[0]["generation"], "nvidia"
        link_kind = "nccl"
    else:
        gpu_name, generation, vendor = "local-cpu", "cpu", platform.processor() or "cpu"
        link_kind = "gloo-loopback"
    host = platform.node()
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    how = (f"paraplan calibrate on {host} ({when}), torch {torch.__version__}, {world} {kind} ranks x "
           f"{choice.threads_per_rank} threads, {choice.backend}")
    link_gb = round(summary["allreduce_bus_bw_bytes_per_s"] / 1e9, 4)
    link_us = round(summary["link_latency_s"] * 1e6, 2)
    return {
        "name": name,
        "description": f"This machine as measured: {world} local {kind} ranks ({choice.dtype})",
        "gpu": {
            "name": gpu_name, "vendor": vendor, "generation": generation,
            "peak_tflops": {k: round(v / 1e12, 6) for k, v in summary["peak_flops_per_s"].items()},
            "hbm_gib": round(summary["memory_bytes"] / GIB, 3),
            "hbm_bw_tb_per_s": round(summary["stream_bw_bytes_per_s"] / 1e12, 6),
            "scaleup_bw_gb_per_s": link_gb,
            "scaleup_domain_size": world,
            "source": how,
        },
        "gpus_per_node": world,
        "scaleup": {"kind": link_kind, "bw_gb_per_s": link_gb, "latency_us": link_us},
        # One host: there is no second tier; reuse the local link so every group is costed alike.
        "scaleout": {"kind": link_kind, "bw_gb_per_s": link_gb, "latency_us": link_us},
        "rail_optimized": True,
        "oversubscription": 1.0,
        "max_gpus": world,
        "source": how,
        "efficiency": {
            "generation": generation,
            "gemm_peak_fraction": {k: 1.0 for k in summary["peak_flops_per_s"]},
            "gemm_half_dim": round(summary["gemm_half_dim"], 2),
            "attention_peak_fraction": round(summary["attention_peak_fraction"], 4),
            "hbm_fraction": round(summary["hbm_fraction"], 4),
            "optimizer_hbm_fraction": round(summary["optimizer_hbm_fraction"], 4),
            "scaleup_fraction": 1.0,
            "scaleout_fraction": 1.0,
            "kernel_overhead_s": float(f"{summary['kernel_overhead_s']:.3g}"),
            "sync_skew_fraction": round(summary["sync_skew_fraction"], 4),
            "collective_bw_fraction": summary["collective_bw_fraction"],
            "fitted_on": how + "; refit with paraplan calibrate (paraplan.measure.run_calibration)",
            # what this calibration measured (a fitted model, not a prior: paraplan.priors)
            "fitted_factors": ["gemm_half_dim", "attention_peak_fraction", "hbm_fraction", "optimizer_hbm_fraction",
                               "kernel_overhead_s", "sync_skew_fraction", "collective_bw_fraction"],
        },
    }


def calibration_warnings(summary: dict, primary_dtype: str) -> list[str]:
    """What a calibration's ``summary`` (``summarize``) should warn about: ranks that waited for
    CPUs other processes held (above ``LOADED_MACHINE`` of the time) and a GEMM fit of
    ``primary_dtype`` whose timings scatter more than ``POOR_GEMM_FIT`` (rms) around it."""
    out = []
    wait = summary.get("cpu_wait_fraction")
    if wait is not None and wait > LOADED_MACHINE:
        out.append(f"ranks waited {wait:.0%} of the calibration for CPUs other processes held; "
                   "the numbers are pessimistic, rerun on a quiet machine")
    fit = summary.get("gemm_fits", {}).get(primary_dtype)
    if fit is not None and fit["rms_rel_error"] > POOR_GEMM_FIT:
        out.append(f"the {primary_dtype} GEMM timings scatter {fit['rms_rel_error']:.0%} (rms) around the fitted "
                   f"plateau and shape model; its GEMM rates are that uncertain: rerun on a quiet machine "
                   f"(or with more sweeps)")
    return out


def run_calibration(out_path, nprocs: int = 2, name: str | None = None, device: str = "auto",
                    threads_per_rank: int | None = None, sweeps: int = SWEEPS, progress=None) -> Path:
    """Measure this machine with ``nprocs`` local ranks and write a catalog cluster YAML.

    Args:
        out_path: where to write the cluster file (``.yaml``); the raw timings go to
            ``<stem>.calibration.json`` beside it.
        nprocs: local ranks (GPUs on a CUDA host; CPU processes splitting the cores otherwise).
        name: cluster name; defaults to the file stem.
        device: ``auto``, ``cpu`` or ``cuda``.
        threads_per_rank: CPU threads per rank (default ``cpu_count // nprocs``).
        sweeps: passes over the GEMM, memory and collective benchmarks, each keeping its best
            (default ``SWEEPS``; one pass is ~40% quicker on a CPU host and more exposed to a
            burst of foreign load, which the sidecar's ``cpu_wait_fraction`` reports).
        progress: ``progress(done, total, label)``, called about once a second while the ranks
            measure (``calibration_steps`` steps; ``runtime.launch``).

    Returns the path written. Raises ``InputError`` if torch is missing.
    """
    from paraplan.measure.runtime import MAX_LOCAL_PROCESSES
    if not 1 <= int(nprocs) <= MAX_LOCAL_PROCESSES:
        raise InputError("nprocs", f"must be between 1 and {MAX_LOCAL_PROCESSES}, got {nprocs}")
    require_torch()
    out_path = Path(out_path)
    if out_path.suffix not in (".yaml", ".yml"):
        raise InputError("out_path", f"{out_path} must end in .yaml or .yml", "e.g. local-cpu.yaml")
    choice = choose_device(device, local_ranks=nprocs, threads_per_rank=threads_per_rank)
    if not 1 <= int(sweeps) <= 16:
        raise InputError("sweeps", f"must be between 1 and 16, got {sweeps}")
    from paraplan.measure.runtime import MeasurementTimeout
    try:
        ranks = launch(_calibration_worker, int(nprocs), {"sweeps": int(sweeps)}, choice, progress=progress)
    except MeasurementTimeout as exc:     # its default fix names measure's options
        raise MeasurementTimeout(exc.timeout_s, "rerun when other processes are not holding this machine's cores, "
                                 "or calibrate fewer ranks (--nprocs) or sweeps") from None
    summary = summarize(ranks, int(nprocs), choice)
    for message in calibration_warnings(summary, _dtypes_to_calibrate(choice.kind)[0]):
        warnings.warn(message, stacklevel=2)
    mapping = cluster_mapping(summary, ranks, int(nprocs), choice, name or safe_name(out_path.stem, "local"))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    header = ("# Written by paraplan calibrate (paraplan/measure/calibrate.py); regenerate rather "
              "than edit.\n")
    raw = {"world_size": int(nprocs), "device": vars(choice), "summary": summary, "ranks": ranks}
    # the profile last: it is what commands load, and it never stands without its timings
    _write_together({sidecar_path(out_path): json.dumps(raw, indent=1, default=_json_default),
                     out_path: header + yaml.safe_dump(mapping, sort_keys=False, width=120)})
    return out_path


def _write_together(texts: dict[Path, str]) -> None:
    """Write each file whole, in order: all to temp files beside them first, then renamed into
    place, so a failure while writing leaves no file changed and none half-written."""
    from paraplan.cli import _umask_mode
    temps: list[tuple[str, Path]] = []
    try:
        for path, text in texts.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            temps.append((tmp, path))
            os.chmod(tmp, _umask_mode())      # mkstemp makes 0600; give the file ordinary permissions
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
        for tmp, path in temps:
            os.replace(tmp, path)
    finally:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)


def sidecar_path(cluster_path) -> Path:
    """Where ``run_calibration`` puts the raw timings of ``cluster_path``."""
    p = Path(cluster_path)
    return p.with_name(p.stem + ".calibration.json")


def _json_default(obj):
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
