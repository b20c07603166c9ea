"""Measure, on the GPU at hand, the kernels paraplan's cost models price, and time the small GPT.

Run on a machine with one CUDA GPU (``python tools/gpu_kernel_checks.py OUTDIR``); it writes
``OUTDIR/kernels.csv`` (one row per timed kernel: kind, shape, dtype, backend, seconds per call,
FLOPs and HBM bytes per call as the cost models count them), ``OUTDIR/sustained.csv`` (a long
8192^3 bf16 GEMM loop, TFLOP/s and the SM clock per second), ``OUTDIR/measured_runs.json``
(``paraplan.measure.run_measurement`` of a few single-GPU GPT sizes) and ``OUTDIR/env.json``.
``tests/data/gpu_h200/`` holds one such run; ``tests/test_gpu_kernels_h200.py`` compares the
cost models with it. Each part is independent: a part that fails is logged and the rest runs.

Timing: CUDA events around ``reps`` back-to-back calls after three warm-up calls, ``reps`` sized
so one timing lasts >= 20 ms; the median of three such timings. Operands are random normal (zeros
run measurably faster on tensor cores: lower switching power).
Runs on a CPU too (tiny shapes) so the script itself can be checked where no GPU is.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu_checks_out")
OUT.mkdir(parents=True, exist_ok=True)
DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
GPU = DEV.type == "cuda"
SCALE = 1 if GPU else 64          # shrink every size on a CPU dry run
LOG = open(OUT / "log.txt", "a")


def log(*parts):
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


def sync():
    if GPU:
        torch.cuda.synchronize()


def time_call(fn, min_total_s=0.02, max_reps=500):
    """Seconds per call of ``fn`` (median of three timings of back-to-back calls)."""
    for _ in range(3):
        fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    one = max(time.perf_counter() - t0, 1e-6)
    reps = int(min(max_reps, max(3, min_total_s / one)))
    out = []
    for _ in range(3):
        if GPU:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3 / reps)
        else:
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            out.append((time.perf_counter() - t0) / reps)
    return sorted(out)[1], reps


ROWS: list[dict] = []
FIELDS = ["kind", "dtype", "backend", "m", "n", "k", "batch", "heads", "seq", "head_dim", "pass", "elements",
          "time_s", "reps", "flops", "hbm_bytes", "tflops", "gb_per_s"]


def record(**row):
    t = row["time_s"]
    row.setdefault("flops", 0.0)
    row.setdefault("hbm_bytes", 0.0)
    row["tflops"] = row["flops"] / t / 1e12 if row["flops"] else ""
    row["gb_per_s"] = row["hbm_bytes"] / t / 1e9 if row["hbm_bytes"] else ""
    ROWS.append(row)


def flush_rows():
    with open(OUT / "kernels.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in ROWS:
            w.writerow(r)


def part(fn):
    t0 = time.perf_counter()
    try:
        fn()
        log(f"part {fn.__name__} done in {time.perf_counter() - t0:.1f} s")
    except Exception:      # noqa: BLE001 - a device run keeps going past a broken part
        log(f"part {fn.__name__} FAILED after {time.perf_counter() - t0:.1f} s\n{traceback.format_exc()}")
    flush_rows()
    if GPU:
        torch.cuda.empty_cache()


def env():
    info = {"torch": torch.__version__, "device": DEV.type, "python": sys.version.split()[0]}
    if GPU:
        p = torch.cuda.get_device_properties(0)
        info.update(name=p.name, sm_count=p.multi_processor_count, memory_bytes=p.total_memory,
                    capability=list(torch.cuda.get_device_capability(0)), cuda=torch.version.cuda,
                    cudnn=torch.backends.cudnn.version())
        try:
            info["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit",
                 "--format=csv"], capture_output=True, text=True, timeout=30).stdout
        except Exception as exc:      # noqa: BLE001
            info["nvidia_smi"] = repr(exc)
    (OUT / "env.json").write_text(json.dumps(info, indent=1))
    log(json.dumps(info))


def gemm_shapes():
    shapes = set()
    for m in (1024, 4096, 16384):
        for h in (1024, 2048, 4096, 8192):
            for n, k in ((3 * h, h), (h, h), (4 * h, h), (h, 4 * h)):
                shapes.add((m, n, k))          # forward
                shapes.add((m, k, n))          # data gradient
                shapes.add((k, n, m))          # weight gradient (reduction over the tokens)
    for m in (64, 128, 256, 512):
        shapes.add((m, 4096, 4096))
        shapes.add((m, 8192, 8192))
    shapes.update({(8192, 50304, 2048), (8192, 32768, 4096), (8192, 3000, 4096), (16384, 16384, 128),
                   (16384, 16384, 256), (4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384)})
    return sorted(shapes)


def gemm_bf16(weight_std=1.0, backend="cublas"):
    for m, n, k in gemm_shapes():
        m_, n_, k_ = (max(8, x // SCALE) for x in (m, n, k))
        a = torch.randn(m_, k_, device=DEV, dtype=torch.bfloat16)
        b = torch.randn(k_, n_, device=DEV, dtype=torch.bfloat16) * weight_std
        t, reps = time_call(lambda: a @ b)
        record(kind="gemm", dtype="bf16", backend=backend, m=m_, n=n_, k=k_, time_s=t, reps=reps,
               flops=2.0 * m_ * n_ * k_, hbm_bytes=2.0 * (m_ * k_ + k_ * n_ + m_ * n_))
        del a, b


def gemm_fp8():
    if not GPU:
        return
    one = torch.ones((), device=DEV, dtype=torch.float32)
    for m, n, k in gemm_shapes():
        if min(m, n, k) < 16 or n % 16 or k % 16:
            continue
        a = torch.randn(m, k, device=DEV).to(torch.float8_e4m3fn)
        bt = torch.randn(n, k, device=DEV).to(torch.float8_e4m3fn)
        t, reps = time_call(lambda: torch._scaled_mm(a, bt.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        record(kind="gemm", dtype="fp8", backend="cublaslt", m=m, n=n, k=k, time_s=t, reps=reps,
               flops=2.0 * m * n * k, hbm_bytes=1.0 * (m * k + k * n) + 2.0 * m * n)
        del a, bt


def memory_kernels():
    n = (512 * 2**20) // SCALE        # elements (1 GiB of bf16 on a GPU)
    x = torch.randn(n, device=DEV, dtype=torch.bfloat16)
    y = torch.randn(n, device=DEV, dtype=torch.bfloat16)
    z = torch.empty_like(x)
    for name, fn, moved in (("copy", lambda: z.copy_(x), 2), ("add", lambda: torch.add(x, y, out=z), 3),
                            ("gelu", lambda: torch.nn.functional.gelu(x), 2), ("mul_scalar", lambda: x * 1.5, 2)):
        t, reps = time_call(fn)
        record(kind="memory", dtype="bf16", backend=name, elements=n, time_s=t, reps=reps, hbm_bytes=moved * 2.0 * n)
    for width in (1024, 4096, 8192):
        rows = n // width
        xx = x.view(rows, width)
        ln = torch.nn.LayerNorm(width, device=DEV, dtype=torch.bfloat16)
        t, reps = time_call(lambda: ln(xx))
        record(kind="memory", dtype="bf16", backend=f"layernorm_{width}", elements=n, time_s=t, reps=reps,
               hbm_bytes=2 * 2.0 * n)
    xf = torch.randn(n // 2, device=DEV, dtype=torch.float32)
    zf = torch.empty_like(xf)
    t, reps = time_call(lambda: zf.copy_(xf))
    record(kind="memory", dtype="fp32", backend="copy", elements=n // 2, time_s=t, reps=reps, hbm_bytes=2 * 4.0 * n / 2)
    # launch cost: many tiny kernels back to back (the host issues faster than they run only if
    # it is fast): seconds per launch of a 1-element add, device-timed and wall-timed
    tiny = torch.zeros(1, device=DEV)
    t, reps = time_call(lambda: tiny.add_(1.0), min_total_s=0.05, max_reps=20000)
    record(kind="launch", dtype="fp32", backend="add_1_element", elements=1, time_s=t, reps=reps)


def attention():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    shapes = [(4, 16, 2048, 128), (2, 32, 4096, 128), (1, 32, 8192, 128), (8, 16, 1024, 64), (16, 12, 1024, 64),
              (4, 32, 2048, 128), (2, 8, 4096, 64)]
    backends = {"default": None}
    if GPU:
        backends.update(flash=SDPBackend.FLASH_ATTENTION, cudnn=SDPBackend.CUDNN_ATTENTION,
                        efficient=SDPBackend.EFFICIENT_ATTENTION)
    F = torch.nn.functional
    for b, h, s, d in shapes:
        b_, s_ = max(1, b // (4 if not GPU else 1)), max(16, s // SCALE)
        q, k, v = (torch.randn(b_, h, s_, d, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        grad = torch.randn(b_, h, s_, d, device=DEV, dtype=torch.bfloat16)
        # causal core FLOPs as the cost model counts them: QK^T and PV, half the square
        fwd_flops = 2 * 2.0 * b_ * h * s_ * s_ * d / 2
        for name, backend in backends.items():
            ctx = sdpa_kernel(backend) if backend is not None else None
            try:
                if ctx is not None:
                    ctx.__enter__()

                def fwd():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)

                def fwd_bwd():
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    out.backward(grad)
                with torch.no_grad():
                    t, reps = time_call(fwd)
                record(kind="attention", dtype="bf16", backend=name, batch=b_, heads=h, seq=s_, head_dim=d,
                       **{"pass": "fwd"}, time_s=t, reps=reps, flops=fwd_flops)
                t, reps = time_call(fwd_bwd)
                record(kind="attention", dtype="bf16", backend=name, batch=b_, heads=h, seq=s_, head_dim=d,
                       **{"pass": "fwd_bwd"}, time_s=t, reps=reps, flops=3.5 * fwd_flops)
            except Exception as exc:      # noqa: BLE001 - a backend may not support a shape
                log(f"attention {name} {(b_, h, s_, d)}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            finally:
                if ctx is not None:
                    ctx.__exit__(None, None, None)
            q.grad = k.grad = v.grad = None


def sustained():
    """8192^3 bf16 GEMMs back to back for ~12 s: TFLOP/s and SM clock each second (power and
    thermal throttling show as a falling clock)."""
    if not GPU:
        return
    n = 8192
    a = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
    rows = []
    t_end = time.perf_counter() + 12
    while time.perf_counter() < t_end:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(60):
            a @ b
        end.record()
        end.synchronize()
        s = start.elapsed_time(end) / 1e3
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                                "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10).stdout
            clock, power, temp = (x.strip() for x in q.strip().split(","))
        except Exception:      # noqa: BLE001
            clock = power = temp = ""
        rows.append({"elapsed_s": round(time.perf_counter() - t_end + 12, 2),
                     "tflops": 60 * 2.0 * n**3 / s / 1e12, "sm_clock_mhz": clock, "power_w": power, "temp_c": temp})
    with open(OUT / "sustained.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


MEASURED = [
    {"name": "l8-h2048-s2048", "num_layers": 8, "hidden_size": 2048, "num_heads": 16, "vocab_size": 32768,
     "seq_len": 2048, "micro_batch": 4, "global_batch": 8},
    {"name": "l8-h2048-s2048-recompute", "num_layers": 8, "hidden_size": 2048, "num_heads": 16,
     "vocab_size": 32768, "seq_len": 2048, "micro_batch": 4, "global_batch": 8, "recompute": "full"},
    {"name": "l4-h4096-s2048", "num_layers": 4, "hidden_size": 4096, "num_heads": 32, "vocab_size": 32768,
     "seq_len": 2048, "micro_batch": 2, "global_batch": 4},
    {"name": "l24-h1024-s2048", "num_layers": 24, "hidden_size": 1024, "num_heads": 16, "vocab_size": 50304,
     "seq_len": 2048, "micro_batch": 4, "global_batch": 8},
    {"name": "l12-h768-s1024", "num_layers": 12, "hidden_size": 768, "num_heads": 12, "vocab_size": 50304,
     "seq_len": 1024, "micro_batch": 8, "global_batch": 16},
    {"name": "l4-h256-s128", "num_layers": 4, "hidden_size": 256, "num_heads": 4, "vocab_size": 1024,
     "seq_len": 128, "micro_batch": 4, "global_batch": 4},
]


def measured_runs():
    from paraplan.measure import run_measurement
    results = []
    for cfg in MEASURED:
        cfg = dict(cfg, steps=10, warmup=4)
        name = cfg.pop("name")
        if not GPU:
            cfg.update(num_layers=2, hidden_size=64, num_heads=4, vocab_size=256, seq_len=64, steps=3, warmup=1)
        t0 = time.perf_counter()
        try:
            r = run_measurement(dict(cfg, name=name))
            results.append(r)
            log(f"measured {name}: {r['measured_step_s']:.4f} s/step, peak {r['peak_memory_bytes'] / 2**30:.2f} GiB "
                f"({time.perf_counter() - t0:.1f} s)")
        except Exception:      # noqa: BLE001
            log(f"measured {name} FAILED\n{traceback.format_exc()}")
        (OUT / "measured_runs.json").write_text(json.dumps(results, indent=1, default=str))


def gemm_bf16_weights_002():
    """The bf16 grid again with the second operand scaled to std 0.02 (the GPT's initial
    weights): a GEMM's power, and so the clock it holds, depends on its operands' bits."""
    gemm_bf16(weight_std=0.02, backend="cublas_weights_std_0.02")


def clocks():
    """The SM clock, power and temperature now (``clocks.csv``, one row per call)."""
    if not GPU:
        return
    q = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.applications.graphics,power.draw,temperature.gpu,"
                        "clocks_throttle_reasons.active", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=10).stdout.strip()
    with open(OUT / "clocks.csv", "a") as f:
        f.write(f"{time.time():.1f},{q}\n")


#: parts in the order they run (``GPU_CHECK_PARTS=gemm_bf16,clocks`` runs a subset)
PARTS = (env, clocks, gemm_bf16, clocks, memory_kernels, attention, gemm_fp8, measured_runs, sustained,
         gemm_bf16_weights_002, clocks)

if __name__ == "__main__":
    t_start = time.perf_counter()
    wanted = os.environ.get("GPU_CHECK_PARTS")
    for p in PARTS:
        if wanted is None or p.__name__ in wanted.split(","):
            part(p)
    log(f"all parts in {time.perf_counter() - t_start:.1f} s")
