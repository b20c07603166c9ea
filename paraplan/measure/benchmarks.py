"""Microbenchmarks run inside one rank: kernel overhead, GEMM, memory, attention, collectives.

Each function returns plain numbers (seconds, bytes, FLOPs) so the results can cross process
boundaries as JSON; the fits live in ``fitting.py``. Shapes are sized by device: the CPU set
keeps the whole calibration under about a minute on two cores, the CUDA set reaches the
tensor-core plateau. Every timing is the minimum over a few repeated batches, which filters
out preemption by the other ranks and the OS.
"""
from __future__ import annotations

import time
from typing import Callable

from paraplan.measure.runtime import require_torch, synchronize

CPU_GEMM_SHAPES = [(128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
                   (64, 1024, 1024), (1024, 64, 1024), (1024, 1024, 64), (32, 512, 512),
                   (2048, 256, 1024), (256, 1024, 4096), (4096, 256, 256)]
CUDA_GEMM_SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
                    (256, 8192, 8192), (8192, 256, 8192), (8192, 8192, 256), (16384, 4096, 4096),
                    (64, 4096, 4096), (4096, 12288, 4096)]
# (batch, heads, seq, head_dim)
CPU_ATTENTION_SHAPES = [(4, 4, 128, 64), (2, 4, 256, 64), (1, 4, 512, 64)]
CUDA_ATTENTION_SHAPES = [(8, 16, 1024, 128), (4, 16, 2048, 128), (2, 16, 4096, 128)]


def time_call(fn: Callable[[], object], device, target_s: float = 0.05, batches: int = 3,
              max_reps: int = 10_000) -> float:
    """Seconds per call of ``fn``: min over ``batches`` of the mean of a batch lasting ~target_s."""
    fn()
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    once = max(time.perf_counter() - t0, 1e-7)
    reps = int(min(max_reps, max(1, target_s / once)))
    best = float("inf")
    for _ in range(batches):
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        synchronize(device)
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def kernel_overhead_s(device, dtype) -> float:
    """Fixed cost of one tiny eager op (dispatch + launch), seconds."""
    torch = require_torch()
    x = torch.ones(8, device=device, dtype=dtype)
    y = torch.empty_like(x)
    return time_call(lambda: torch.add(x, x, out=y), device, target_s=0.02)


def gemm_times(device, dtype, shapes) -> list[float]:
    """Seconds per ``(m, k) @ (k, n)`` for each ``(m, n, k)``."""
    torch = require_torch()
    out = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)
        c = torch.empty(m, n, device=device, dtype=dtype)
        out.append(time_call(lambda: torch.matmul(a, b, out=c), device))
    return out


def memory_bandwidth(device, dtype, nbytes: float) -> dict[str, float]:
    """Achieved bytes/s of streaming kernels on ``nbytes``-sized tensors.

    ``copy`` (read + write) and ``add`` (2 reads + write) give the machine's streaming
    bandwidth; ``layernorm``, ``gelu`` and ``adam`` are the memory-bound kernels of a training
    step, whose bandwidth relative to the streaming one is the efficiency model's
    ``hbm_fraction``. Bytes counted are the compulsory traffic of each kernel.
    """
    torch = require_torch()
    import torch.nn.functional as F
    elt = torch.tensor([], dtype=dtype).element_size()
    n = int(nbytes // elt)
    width = 1024
    x = torch.randn(n // width, width, device=device, dtype=dtype)
    y = torch.empty_like(x)
    z = torch.empty_like(x)
    size = x.numel() * elt
    w = torch.ones(width, device=device, dtype=dtype)
    b = torch.zeros(width, device=device, dtype=dtype)
    p, g = (torch.randn(n // 4, device=device, dtype=torch.float32) for _ in range(2))
    opt = torch.optim.Adam([torch.nn.Parameter(p)], lr=1e-4)
    opt.param_groups[0]["params"][0].grad = g

    results = {
        "copy": 2 * size / time_call(lambda: y.copy_(x), device),
        "add": 3 * size / time_call(lambda: torch.add(x, y, out=z), device),
        "layernorm": 2 * size / time_call(lambda: F.layer_norm(x, (width,), w, b), device),
        "gelu": 2 * size / time_call(lambda: F.gelu(x), device),
        # Adam reads param, grad, m, v and writes param, m, v: 7 fp32 streams.
        "adam": 7 * p.numel() * 4 / time_call(opt.step, device),
    }
    return results


def attention_times(device, dtype, shapes, causal: bool) -> list[float]:
    """Seconds for forward + backward of ``scaled_dot_product_attention`` per (b, a, s, d)."""
    torch = require_torch()
    import torch.nn.functional as F
    out = []
    for bsz, heads, seq, dim in shapes:
        q, k, v = (torch.randn(bsz, heads, seq, dim, device=device, dtype=dtype, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(bsz, heads, seq, dim, device=device, dtype=dtype)

        def step():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            o.backward(grad)
        out.append(time_call(step, device, target_s=0.1))
    return out


def allreduce_times(device, dtype, sizes_bytes, group=None) -> list[float]:
    """Seconds per ``all_reduce`` of each message size, all ranks of ``group`` taking part."""
    torch = require_torch()
    import torch.distributed as dist
    elt = torch.tensor([], dtype=dtype).element_size()
    out = []
    for nbytes in sizes_bytes:
        buf = torch.ones(max(1, int(nbytes // elt)), device=device, dtype=dtype)

        def op():
            dist.all_reduce(buf, group=group)
        dist.barrier(group=group)
        # Every rank must run the same number of repetitions: agree on rank 0's estimate.
        op()
        synchronize(device)
        t0 = time.perf_counter()
        op()
        synchronize(device)
        reps = torch.tensor([max(1, min(200, int(0.05 / max(time.perf_counter() - t0, 1e-7))))])
        dist.broadcast(reps, src=0, group=group)
        best = float("inf")
        for _ in range(3):
            dist.barrier(group=group)
            synchronize(device)
            t0 = time.perf_counter()
            for _ in range(int(reps)):
                op()
            synchronize(device)
            best = min(best, (time.perf_counter() - t0) / int(reps))
        out.append(best)
    return out


def sendrecv_times(device, dtype, sizes_bytes) -> list[float]:
    """Seconds per one-way transfer between ranks 0 and 1 (ping-pong round trip / 2)."""
    torch = require_torch()
    import torch.distributed as dist
    rank = dist.get_rank()
    elt = torch.tensor([], dtype=dtype).element_size()
    out = []
    for nbytes in sizes_bytes:
        buf = torch.ones(max(1, int(nbytes // elt)), device=device, dtype=dtype)
        reps = 10
        best = float("inf")
        for _ in range(3):
            dist.barrier()
            synchronize(device)
            t0 = time.perf_counter()
            for _ in range(reps):
                if rank == 0:
                    dist.send(buf, 1)
                    dist.recv(buf, 1)
                elif rank == 1:
                    dist.recv(buf, 0)
                    dist.send(buf, 0)
            synchronize(device)
            best = min(best, (time.perf_counter() - t0) / reps / 2)
        out.append(best)
    return out
