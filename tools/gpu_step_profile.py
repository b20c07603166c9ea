"""Profile one training step of the small GPT on the GPU at hand, kernel by kernel.

``python tools/gpu_step_profile.py OUTDIR`` trains each size of ``tools/gpu_kernel_checks.py``'s
``MEASURED`` list on one GPU (the same ``paraplan.measure`` model, optimizer and loop, in this
process) and writes:

- ``OUTDIR/step_kernels.csv``: per run and kernel name, the launches and their summed device
  time in one profiled step (``torch.profiler``), so the step's device time splits into GEMMs,
  attention, element-wise kernels and the optimizer;
- ``OUTDIR/step_summary.csv``: per run, the median eager step time (no profiler, 6 steps after
  3 warm-up), the profiled step's kernel count and summed kernel time (the difference is the time
  the GPU waited between kernels: launch gaps and host work), and the median SM clock and board
  power nvidia-smi read every 20 ms over the timed steps;
- ``OUTDIR/launch.csv``: device time per kernel of 2,000 one-element adds replayed from a CUDA
  graph (the GPU's own per-kernel cost, no host in the loop) against the same adds issued eagerly.

``tests/data/gpu_h200/`` holds one such run. Runs on a CPU too (no kernels are recorded there),
so the script can be checked where no GPU is.
"""
from __future__ import annotations

import csv
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu_profile_out")
OUT.mkdir(parents=True, exist_ok=True)
GPU = torch.cuda.is_available()
DEV = torch.device("cuda" if GPU else "cpu")
DTYPE = torch.bfloat16 if GPU else torch.float32


def log(msg):
    print(msg, flush=True)
    with open(OUT / "profile_log.txt", "a") as f:
        f.write(msg + "\n")


def sync():
    if GPU:
        torch.cuda.synchronize()


def clock_sampler():
    """nvidia-smi sampling the SM clock and board power every 20 ms (None without a GPU)."""
    if not GPU:
        return None
    import subprocess
    return subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                             "-lms", "20"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def clock_samples(sampler):
    """(median SM clock in MHz, median power in W) of what ``sampler`` read; ('', '') if none."""
    if sampler is None:
        return "", ""
    sampler.terminate()
    try:
        out, _ = sampler.communicate(timeout=10)
    except Exception:      # noqa: BLE001
        sampler.kill()
        return "", ""
    pairs = []
    for line in out.splitlines():
        try:
            clock, power = (float(x) for x in line.split(","))
            pairs.append((clock, power))
        except ValueError:
            continue
    if not pairs:
        return "", ""
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def launch_cost():
    if not GPU:
        return
    x = torch.zeros(1, device=DEV)
    n = 2000
    for _ in range(10):
        x.add_(1.0)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            x.add_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            x.add_(1.0)
    rows = []
    for mode in ("graph", "eager"):
        times = []
        for _ in range(5):
            sync()
            t0 = time.perf_counter()
            if mode == "graph":
                g.replay()
            else:
                for _ in range(n):
                    x.add_(1.0)
            sync()
            times.append((time.perf_counter() - t0) / n)
        rows.append({"mode": mode, "kernels": n, "seconds_per_kernel": statistics.median(times)})
    with open(OUT / "launch.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    log(f"launch: {rows}")


def profile_runs():
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from gpu_kernel_checks import MEASURED
    from paraplan.measure.gpt import GPTConfig, GPTStage
    from paraplan.measure.parallel import FlatOptimizer, build_mesh
    from paraplan.measure.train import forward_backward

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    mesh = build_mesh(1, 1, 1)
    kernel_rows, summary = [], []
    for spec in MEASURED:
        spec = dict(spec)
        name = spec.pop("name")
        if not GPU:
            spec.update(num_layers=2, hidden_size=64, num_heads=4, vocab_size=256, seq_len=64)
        try:
            cfg = GPTConfig(spec["num_layers"], spec["hidden_size"], spec["num_heads"], spec["vocab_size"],
                            spec["seq_len"])
            torch.manual_seed(0)
            model = GPTStage(cfg, mesh, recompute=spec.get("recompute") == "full").to(device=DEV, dtype=DTYPE)
            opt = FlatOptimizer(model, mesh, 0, lr=1e-4)
            m = spec["global_batch"] // spec["micro_batch"]
            shape = (m, spec["micro_batch"], spec["seq_len"])
            tokens = torch.randint(0, spec["vocab_size"], shape).to(DEV)
            targets = torch.randint(0, spec["vocab_size"], shape).to(DEV)

            def step():
                opt.zero_grad()
                forward_backward(model, mesh, tokens, targets, None)
                opt.reduce_gradients()
                opt.step()

            for _ in range(3):
                step()
            times = []
            sampler = clock_sampler()
            for _ in range(6):
                sync()
                t0 = time.perf_counter()
                step()
                sync()
                times.append(time.perf_counter() - t0)
            clock_mhz, power_w = clock_samples(sampler)
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if GPU else [])
            with profile(activities=acts) as prof:
                step()
                sync()
            with open(OUT / "profile_tables.txt", "a") as f:
                f.write(f"== {name}\n" + prof.key_averages().table(sort_by="self_device_time_total", row_limit=40) + "\n")
            n_kernels, kernel_s = 0, 0.0
            for evt in prof.key_averages():
                dev_us = float(getattr(evt, "self_device_time_total", 0.0) or 0.0)
                if getattr(evt, "device_type", None) is None or str(evt.device_type) != "DeviceType.CUDA":
                    continue
                kernel_rows.append({"run": name, "kernel": evt.key[:200], "launches": int(evt.count),
                                    "device_s": dev_us / 1e6})
                n_kernels += int(evt.count)
                kernel_s += dev_us / 1e6
            summary.append({"run": name, "eager_step_s": statistics.median(times), "kernels": n_kernels,
                            "kernel_sum_s": kernel_s, "sm_clock_mhz_median": clock_mhz, "power_w_median": power_w})
            log(f"{name}: eager {statistics.median(times) * 1e3:.2f} ms, {n_kernels} kernels, "
                f"kernel time {kernel_s * 1e3:.2f} ms")
            del model, opt
            if GPU:
                torch.cuda.empty_cache()
        except Exception:      # noqa: BLE001 - a device run keeps going past a broken size
            log(f"{name} FAILED\n{traceback.format_exc()}")
        for fname, rows in (("step_kernels.csv", kernel_rows), ("step_summary.csv", summary)):
            if rows:
                with open(OUT / fname, "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=list(rows[0]))
                    w.writeheader()
                    w.writerows(rows)
    dist.destroy_process_group()


def gemm_clock():
    """The SM clock and power under back-to-back 8,192^3 bf16 GEMMs for about 2 s
    (``gemm_clock.csv``), to set beside the training steps' (``step_summary.csv``)."""
    if not GPU:
        return
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync()
    sampler = clock_sampler()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < 2.0:
        for _ in range(20):
            a @ b
        sync()
        n += 20
    seconds = time.perf_counter() - t0
    clock_mhz, power_w = clock_samples(sampler)
    row = {"tflops": n * 2.0 * 8192**3 / seconds / 1e12, "sm_clock_mhz_median": clock_mhz, "power_w_median": power_w}
    with open(OUT / "gemm_clock.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    log(f"gemm clock: {row}")


if __name__ == "__main__":
    for part in (launch_cost, gemm_clock, profile_runs):
        t0 = time.perf_counter()
        try:
            part()
            log(f"part {part.__name__} done in {time.perf_counter() - t0:.1f} s")
        except Exception:      # noqa: BLE001
            log(f"part {part.__name__} FAILED\n{traceback.format_exc()}")
