"""Process and device plumbing shared by calibration and measured training runs.

Everything that depends on where the code runs lives here: whether torch is installed, which
device / collective backend / dtype to use (CUDA + nccl + bf16 when a GPU is present, CPU +
gloo + fp32 otherwise), how many CPU threads each local rank gets, launching N local ranks with
``torch.multiprocessing`` on a free port, and reading a rank's peak memory.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import resource
import signal
import socket
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from hardware_specs.errors import InputError, shown

#: ranks that share this machine in the reference setup; CPU threads are split among them so
#: that a one-rank baseline and a two-rank run see the same per-rank "device".
DEFAULT_LOCAL_RANKS = 2
#: most local processes one measurement starts: one per GPU of the largest nodes (72 in an
#: NVL72 rack) with room to spare; on a CPU host each also takes its own cores' worth of threads
MAX_LOCAL_PROCESSES = 128
#: CPU ranks a measurement starts per core (2 cores: 8, the smallest 3-D layout dp2 x tp2 x pp2).
#: Ranks beyond the cores time their contention, not the layout, and their start-up grows with
#: their count (each forks, joins gloo's rendezvous and builds its tp/dp/pp groups): on the 2-core
#: VM 128 ranks ran past two minutes, 64 took 96 s, and 32 (``measure --dp 2 --tp 2 --pp 8
#: --layers 8``, allowed at 16 a core) ran for minutes with no progress shown before rank 0's first step
MAX_RANKS_PER_CORE = 4
#: seconds one launch of ranks (a measured run, a calibration) may run before its ranks are stopped
LAUNCH_TIMEOUT_S = 600.0


class MeasurementTimeout(InputError):
    """A launch's ranks did not finish within its time limit and were stopped. An ``InputError``
    (the run asked was too long for this machine, or other processes slowed it), so the CLI says
    so on one line with a fix; it was a ``TimeoutError``, an ``OSError``, reported as a file
    problem ('check the path and free space')."""

    def __init__(self, timeout_s: float, fix: str | None = None):
        self.timeout_s = float(timeout_s)
        super().__init__("time", f"the ranks did not finish within {self.timeout_s:.0f} s and were stopped",
                         fix or "measure a shorter run (fewer --steps, --layers, or micro-batches a step), or rerun "
                                "when other processes are not holding this machine's cores")

    def __reduce__(self):
        return (type(self), (self.timeout_s, self.fix))


def require_torch():
    """Import torch, or raise the ``InputError`` that tells the user how to install it."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputError("torch", "PyTorch is not installed",
                         "pip install 'paraplan[measure]' or pip install torch==2.13.0") from None
    return torch


def check_threads_per_rank(value, field: str = "threads_per_rank", fix: str | None = None,
                           here: bool = True) -> int:
    """``value`` as CPU threads for one rank (``torch.set_num_threads``): a whole number >= 1 and,
    with ``here`` (ranks about to start on this machine), at most this machine's cores; else
    ``InputError`` naming ``field`` (a rank failed on it with a torch traceback)."""
    cores = os.cpu_count() or 1
    whole = not isinstance(value, bool) and isinstance(value, int)
    if here and not (whole and 1 <= value <= cores):
        raise InputError(field, f"must be a whole number of CPU threads from 1 to {cores} (this machine's cores), "
                         f"got {shown(value)}", fix or f"use 1 to {cores}")
    if not (whole and value >= 1):
        raise InputError(field, f"must be a whole number of CPU threads >= 1, got {shown(value)}", fix)
    return value


@dataclass(frozen=True)
class DeviceChoice:
    """Where ranks run: ``kind`` cpu|cuda, collective ``backend``, compute ``dtype`` (paraplan name)."""

    kind: str
    backend: str
    dtype: str
    threads_per_rank: int

    @property
    def torch_dtype(self):
        torch = require_torch()
        return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[self.dtype]


def choose_device(device: str = "auto", local_ranks: int = DEFAULT_LOCAL_RANKS,
                  threads_per_rank: int | None = None) -> DeviceChoice:
    """CUDA/nccl/bf16 if a GPU is visible (or ``device='cuda'``), else CPU/gloo/fp32.

    ``threads_per_rank`` defaults to ``cpu_count // local_ranks`` so each CPU rank owns its cores.
    """
    torch = require_torch()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise InputError("device", f"unknown device {device!r}", "use auto, cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("device", "CUDA requested but torch sees no GPU", "use device='cpu'")
    if threads_per_rank is None:
        threads_per_rank = max(1, (os.cpu_count() or 1) // max(1, local_ranks))
    check_threads_per_rank(threads_per_rank)
    if device == "cuda":
        return DeviceChoice("cuda", "nccl", "bf16", threads_per_rank)
    return DeviceChoice("cpu", "gloo", "fp32", threads_per_rank)


def torch_device(choice: DeviceChoice, local_rank: int):
    torch = require_torch()
    if choice.kind == "cuda":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def synchronize(device) -> None:
    """Wait for queued device work (CUDA kernels are asynchronous; CPU ops are not)."""
    if device.type == "cuda":
        require_torch().cuda.synchronize(device)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_memory_bytes(device) -> float:
    """Peak memory of this rank: CUDA allocator high-water mark, or the process's peak RSS."""
    if device.type == "cuda":
        return float(require_torch().cuda.max_memory_allocated(device))
    # Linux reports ru_maxrss in KiB.
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024.0


def system_busy_cpu_s() -> float | None:
    """CPU-seconds all cores of this host have been busy since boot (Linux ``/proc/stat``),
    counting hypervisor steal; ``None`` where unavailable."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    ticks = [float(x) for x in fields]
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user]
    busy = sum(ticks[:3]) + sum(ticks[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


def foreign_load(busy_delta_s: float | None, own_cpu_s: float, wall_s: float) -> float | None:
    """Fraction of the host's cores that processes other than ours kept busy over ``wall_s``.

    0 means the machine was ours; a measurement with a large value was taken on a shared,
    loaded machine and is weak evidence about the simulator.
    """
    if busy_delta_s is None or wall_s <= 0:
        return None
    return max(0.0, busy_delta_s - own_cpu_s) / ((os.cpu_count() or 1) * wall_s)


def machine_fingerprint(device_kind: str = "cpu") -> str:
    """A short description of this machine for baselines: CPU model, cores, torch, device."""
    torch = require_torch()
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = f", {torch.cuda.get_device_name(0)}" if device_kind == "cuda" and torch.cuda.is_available() else ""
    return f"{model} x{os.cpu_count()}{gpu}, torch {torch.__version__.split('+')[0]}, {device_kind}"


def run_queue_wait_s() -> float | None:
    """Seconds the calling thread has spent runnable but waiting for a CPU (Linux schedstat);
    ``None`` where unavailable. Its growth over a measurement is time another process took."""
    for path in ("/proc/thread-self/schedstat", "/proc/self/schedstat"):
        try:
            return int(Path(path).read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue
    return None


def cpu_wait_fraction(wait0: float | None, wait1: float | None, wall_s: float) -> float | None:
    """Share of ``wall_s`` this thread waited for a CPU; above ~0.15 the timing is not evidence."""
    if wait0 is None or wait1 is None or wall_s <= 0:
        return None
    return max(0.0, wait1 - wait0) / wall_s


#: the key of a launch's ``args`` naming the file rank 0 reports its progress to
PROGRESS_KEY = "progress_path"


def report_progress(args: dict, rank: int, done: int, total: int, label: str) -> None:
    """Rank 0 records that ``done`` of ``total`` steps are finished, ``label`` the next (a launch
    with a ``progress`` callback reads it, ``read_progress``); a no-op on other ranks and when
    nobody asked."""
    path = args.get(PROGRESS_KEY)
    if rank != 0 or not path:
        return
    tmp = Path(f"{path}.tmp")
    tmp.write_text(f"{int(done)}\t{int(total)}\t{label}")
    os.replace(tmp, path)           # the reader never sees a half-written line


def read_progress(path) -> tuple[int, int, str] | None:
    """``(done, total, label)`` as ``report_progress`` last wrote it, or None before it did."""
    try:
        done, total, label = Path(path).read_text().split("\t", 2)
        return int(done), int(total), label
    except (OSError, ValueError):
        return None


def _worker_entry(rank: int, world_size: int, port: int, choice_dict: dict, fn: Callable,
                  args: dict, out_dir: str) -> None:
    torch = require_torch()
    import torch.distributed as dist
    choice = DeviceChoice(**choice_dict)
    torch.set_num_threads(choice.threads_per_rank)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    device = torch_device(choice, rank)
    kwargs = {"device_id": device} if choice.kind == "cuda" else {}
    dist.init_process_group(choice.backend, rank=rank, world_size=world_size, **kwargs)
    try:
        result = fn(rank, world_size, device, choice, args)
        if result is not None:
            Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.barrier()
        dist.destroy_process_group()


#: what the fork server (``multiprocessing``'s ``forkserver`` start method) imports once: every
#: launch's ranks are then forked from a process that has torch loaded, where a spawned rank
#: imports it itself (on this project's 2-core VM a launch of two ranks that return at once
#: took 7.2 s spawned, most of it two torch imports; a calibration and three measured
#: configurations launch four times). ``__main__`` first, as spawn would load it.
FORKSERVER_PRELOAD = ("__main__", "torch", "torch.distributed", "paraplan.measure.calibrate",
                      "paraplan.measure.train", "paraplan.measure.selfcheck")


def start_method() -> str:
    """``forkserver`` where the platform has it (Linux), preloading ``FORKSERVER_PRELOAD``; else
    ``spawn``. Never ``fork``: the caller may hold threads (a notebook kernel, CUDA), and a
    forked rank would inherit them. The fork server starts with this process's environment at
    the first launch and serves every later one."""
    import multiprocessing
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(FORKSERVER_PRELOAD))
    return "forkserver"


#: what a rank's exception says when its device or the host ran out of memory (PyTorch's CPU
#: allocator, its CUDA allocator, Python's MemoryError)
OUT_OF_MEMORY_SIGNS = ("can't allocate memory", "out of memory", "memoryerror")


def _kill(processes) -> None:
    """SIGKILL every rank still running and reap it (a second at most each)."""
    for proc in processes:
        if proc.is_alive():
            proc.kill()
    for proc in processes:
        proc.join(timeout=1.0)


class _SigtermStop:
    """SIGTERM raised as ``KeyboardInterrupt`` in the main thread (once), so a killed measurement
    stops its ranks and removes its folder as Ctrl-C does; held back inside ``deferred()``."""

    def __init__(self):
        self.defer = False
        self.pending = False
        self.raised = False

    def __call__(self, signum, frame):
        if self.raised:
            return               # cleanup after the first is under way
        if self.defer:
            self.pending = True
            return
        self.raised = True
        raise KeyboardInterrupt("SIGTERM")

    @contextlib.contextmanager
    def deferred(self):
        self.defer = True
        try:
            yield
        finally:
            self.defer = False
        if self.pending and not self.raised:
            self.raised = True
            raise KeyboardInterrupt("SIGTERM")


@contextlib.contextmanager
def _stop_on_sigterm():
    """``_SigtermStop`` as the SIGTERM handler for the block, the previous handler restored after.
    Outside the main thread (where Python cannot install handlers) nothing is installed.

    The CLI then reports it as Ctrl-C: one ``error: interrupted`` line and exit 2, the code of
    every other way a paraplan command stops early, not the shell's 143 (128 + SIGTERM), which
    would also say the process died without cleaning up."""
    stopper = _SigtermStop()
    if threading.current_thread() is not threading.main_thread():
        yield stopper
        return
    previous = signal.signal(signal.SIGTERM, stopper)
    try:
        yield stopper
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _quiet_spawn_log():
    """torch's ``torch.multiprocessing.spawn`` logger silenced for the block: when one rank fails
    it warns 'Terminating process N via signal SIGTERM' for each other rank, a second stderr line
    beside the one error a failed measurement reports. Its previous state is restored after."""
    log = logging.getLogger("torch.multiprocessing.spawn")
    before = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = before


def max_cpu_ranks() -> int:
    """Most CPU ranks one measurement starts on this machine: ``MAX_RANKS_PER_CORE`` a core, at
    most ``MAX_LOCAL_PROCESSES``."""
    return min(MAX_LOCAL_PROCESSES, MAX_RANKS_PER_CORE * (os.cpu_count() or 1))


def check_local_ranks(n: int, kind: str, field: str = "world_size", fix: str = "use fewer ranks") -> None:
    """``InputError`` naming ``field`` (the option or profile field the caller's user gave) when
    one measurement cannot start ``n`` local processes: 1 to ``MAX_LOCAL_PROCESSES``, and on a CPU
    (``kind`` not cuda) at most ``MAX_RANKS_PER_CORE`` a core."""
    if not 1 <= int(n) <= MAX_LOCAL_PROCESSES:
        raise InputError(field, f"{n} local processes; a measurement starts 1 to {MAX_LOCAL_PROCESSES}", fix)
    cores = os.cpu_count() or 1
    if kind != "cuda" and n > MAX_RANKS_PER_CORE * cores:
        # 128 ranks on 2 cores ran past two minutes (64: 96 s) timing little but contention
        raise InputError(field, f"{n} CPU ranks on {cores} cores; a CPU measurement starts at most "
                         f"{MAX_RANKS_PER_CORE} a core ({MAX_RANKS_PER_CORE * cores} here)", fix)


def launch(fn: Callable, world_size: int, args: dict, choice: DeviceChoice,
           timeout_s: float = LAUNCH_TIMEOUT_S, progress: Callable[[int, int, str], None] | None = None) -> list[Any]:
    """Run ``fn(rank, world_size, device, choice, args)`` in ``world_size`` new processes
    (``start_method``).

    ``fn`` must be a module-level function; each rank's JSON-serialisable return value is
    collected (``None`` where a rank returned nothing), in rank order. ``progress(done, total,
    label)`` is called about once a second with what rank 0 reported (``report_progress``).
    Ranks still running after ``timeout_s`` are killed and ``MeasurementTimeout`` raised.
    """
    check_local_ranks(world_size, choice.kind)
    if progress is not None:            # at once: the ranks' start-up and rendezvous take seconds
        progress(0, 1, f"starting {world_size} rank{'s' if world_size > 1 else ''}")
    torch = require_torch()
    import torch.multiprocessing as mp
    if choice.kind == "cuda" and world_size > torch.cuda.device_count():
        raise InputError("world_size", f"{world_size} ranks but only {torch.cuda.device_count()} GPUs")
    with _stop_on_sigterm() as stopper, _quiet_spawn_log(), \
            tempfile.TemporaryDirectory(prefix="paraplan-measure-") as out_dir:
        progress_path = Path(out_dir, "progress")
        if progress is not None:
            args = {**args, PROGRESS_KEY: str(progress_path)}
        seen = None

        def poll():
            nonlocal seen
            now = read_progress(progress_path) if progress is not None else None
            if now is not None and now != seen:
                seen = now
                progress(*now)
        last_error: Exception | None = None
        for _attempt in range(3):      # a port taken between free_port() and bind: retry
            ctx = None
            try:
                with stopper.deferred():     # every rank started is known before SIGTERM stops us
                    ctx = mp.start_processes(_worker_entry, nprocs=world_size, join=False,
                                             args=(world_size, free_port(), asdict(choice), fn, args, out_dir),
                                             start_method=start_method())
                deadline = time.monotonic() + timeout_s
                while not ctx.join(timeout=1.0):
                    poll()
                    if time.monotonic() > deadline:
                        _kill(ctx.processes)
                        raise MeasurementTimeout(timeout_s)
                last_error = None
                break
            except KeyboardInterrupt:
                # Ctrl-C, or SIGTERM (``_stop_on_sigterm``): the ranks would train on, orphaned,
                # and write into the folder about to be removed
                if ctx is not None:
                    _kill(ctx.processes)
                raise
            except mp.ProcessExitedException as exc:
                if getattr(exc, "signal_name", None) == "SIGKILL":
                    # Linux's out-of-memory killer ends a rank with SIGKILL, no exception of its own
                    raise InputError("config", "a rank was killed (SIGKILL), most likely by the out-of-memory killer",
                                     "measure a smaller model or fewer ranks") from None
                raise
            except mp.ProcessRaisedException as exc:
                text = str(exc).lower()
                if any(sign in text for sign in OUT_OF_MEMORY_SIGNS):
                    # a rank that runs out of memory is a configuration too large for this machine
                    # (the estimate ``RunConfig`` checks first is a lower bound), not a bug
                    raise InputError("config", "a rank ran out of memory on this machine",
                                     "measure a smaller model or fewer ranks") from None
                if "address already in use" not in text:
                    raise
                last_error = exc
        if last_error is not None:
            raise last_error
        poll()
        results = []
        for rank in range(world_size):
            p = Path(out_dir, f"rank{rank}.json")
            results.append(json.loads(p.read_text()) if p.exists() else None)
        return results
