"""Time the weight GEMMs of LLM decode steps on the GPU at hand (serving's cost model checks).

``python tools/gpu_decode_checks.py OUTDIR`` writes ``OUTDIR/decode_gemms.csv``: for the linear
layers of Llama-3.1-8B (tp 1) and Llama-3.1-70B at tp 8 (their public config.json shapes) and
1-512 tokens in flight, the device time of one GEMM ``x[M, K] @ W[K, N]`` in bf16 and, for
M >= 16, with fp8 (e4m3, tensor-scaled ``torch._scaled_mm``) weights and activations. Each is
timed as engines run decode: 20 calls captured in one CUDA graph, the graph replayed until
>= 20 ms have passed (no host issue in the time), the median of three such timings per call.
The calls cycle through copies of the weight that together exceed four times the L2 cache, so
each call reads its weight from HBM as a decode step does (each layer its own weights), not from
the L2 a replayed single weight would stay in.
``tests/data/gpu_h200/decode_gemms.csv`` holds one such run; ``tests/test_gpu_h200_record.py``
compares ``cost_models.inference_layers.gemm_s`` with it. Runs on a CPU too (eager, tiny).
"""
from __future__ import annotations

import csv
import statistics
import sys
import time
from pathlib import Path

import torch

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu_decode_out")
OUT.mkdir(parents=True, exist_ok=True)
GPU = torch.cuda.is_available()
DEV = torch.device("cuda" if GPU else "cpu")

#: (model, layer, N, K) per GPU: Llama-3.1-8B (hidden 4096, 32 heads, 8 KV heads of 128, ffn
#: 14336) at tp 1; Llama-3.1-70B (hidden 8192, 64 heads, 8 KV heads, ffn 28672) at tp 8
LAYERS = [("llama3.1-8b", "qkv", 6144, 4096), ("llama3.1-8b", "o", 4096, 4096),
          ("llama3.1-8b", "gate_up", 28672, 4096), ("llama3.1-8b", "down", 4096, 14336),
          ("llama3.1-70b-tp8", "qkv", 1280, 8192), ("llama3.1-70b-tp8", "o", 8192, 1024),
          ("llama3.1-70b-tp8", "gate_up", 7168, 8192), ("llama3.1-70b-tp8", "down", 8192, 3584)]
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
CALLS_PER_GRAPH = 20
#: weight copies cycled through exceed this many bytes (the H200's L2 is 60 MB)
COLD_BYTES = 256 * 2**20


def time_graphed(fn) -> float:
    """Device seconds per call of ``fn`` replayed from a CUDA graph (eager on a CPU)."""
    for _ in range(3):
        fn()
    if not GPU:
        t0 = time.perf_counter()
        for _ in range(CALLS_PER_GRAPH):
            fn()
        return (time.perf_counter() - t0) / CALLS_PER_GRAPH
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS_PER_GRAPH):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    reps = max(1, int(0.02 / max(time.perf_counter() - t0, 1e-6)))
    out = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3 / (reps * CALLS_PER_GRAPH))
    return statistics.median(out)


def main() -> None:
    rows = []
    one = torch.ones((), device=DEV, dtype=torch.float32)
    for model, layer, n, k in LAYERS:
        n_, k_ = (n, k) if GPU else (n // 32, k // 32)
        copies = max(1, -(-COLD_BYTES // (2 * n_ * k_))) if GPU else 1
        ws = [torch.randn(k_, n_, device=DEV, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
        w8ts = ([(torch.randn(n_, k_, device=DEV) * 0.02).to(torch.float8_e4m3fn) for _ in range(2 * copies)]
                if GPU else None)
        for m in TOKENS:
            x = torch.randn(m, k_, device=DEV, dtype=torch.bfloat16)
            turn = iter(range(10**9))
            t = time_graphed(lambda: x @ ws[next(turn) % copies])
            rows.append({"model": model, "layer": layer, "dtype": "bf16", "m": m, "n": n_, "k": k_, "time_s": t,
                         "weight_bytes": 2.0 * n_ * k_, "weight_copies": copies})
            if GPU and m >= 16:
                x8 = x.to(torch.float8_e4m3fn)
                t = time_graphed(lambda: torch._scaled_mm(x8, w8ts[next(turn) % len(w8ts)].t(), scale_a=one,
                                                          scale_b=one, out_dtype=torch.bfloat16))
                rows.append({"model": model, "layer": layer, "dtype": "fp8", "m": m, "n": n_, "k": k_, "time_s": t,
                             "weight_bytes": 1.0 * n_ * k_, "weight_copies": 2 * copies})
        print(f"{model} {layer} done", flush=True)
        with open(OUT / "decode_gemms.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
