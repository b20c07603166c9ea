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

# (m, n, k): generic squares and skinny shapes, plus the transformer-layer shapes of the small
# measured GPT (m = tokens of a micro-batch, n/k = hidden or 4*hidden).
CPU_GEMM_SHAPES = [(128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
                   (64, 1024, 1024), (1024, 64, 1024), (1024, 1024, 64), (512, 768, 256),
                   (512, 1024, 256), (512, 256, 1024), (2048, 1024, 256)]
CUDA_GEMM_SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
                    (256, 8192, 8192), (8192, 256, 8192), (8192, 8192, 256), (16384, 4096, 4096),
                    (64, 4096, 4096), (4096, 12288, 4096)]
#: operand layouts of one linear layer's three GEMMs: forward X W^T, input gradient dY W,
#: weight gradient dY^T X. BLAS speed differs by layout, and training runs all three.
GEMM_LAYOUTS = ("nt", "nn", "tn")
# (batch, heads, seq, head_dim)
CPU_ATTENTION_SHAPES = [(4, 4, 128, 64), (2, 4, 256, 64), (1, 4, 512, 64)]
CUDA_ATTENTION_SHAPES = [(8, 16, 1024, 128), (4, 16, 2048, 128), (2, 16, 4096, 128)]


def _agree_min(value: int, device) -> int:
    """The smallest ``value`` over all ranks (every rank must run the same repetitions)."""
    torch = require_torch()
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def _barrier() -> None:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def time_call(fn: Callable[[], object], device, target_s: float = 0.02, batches: int = 5,
              max_reps: int = 10_000) -> float:
    """Seconds per call of ``fn``: min over ``batches`` of the mean of a batch lasting ~target_s.

    When several ranks are running, every rank calls this at the same time, and each batch
    starts behind a barrier with the same repetition count everywhere: all ranks are busy
    during every timed batch, so the result is one device's speed while its neighbours work
    (on a CPU host, ranks share FLOPs and memory bandwidth).
    """
    fn()
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    once = max(time.perf_counter() - t0, 1e-7)
    reps = _agree_min(int(min(max_reps, max(1, target_s / once))), device)
    best = float("inf")
    for _ in range(batches):
        _barrier()
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        synchronize(device)
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


#: operand bytes each timing cycles through, so a kernel finds its inputs outside the
#: per-core caches as it does in a training step (a GEMM that reuses one hot 2 MB operand set
#: runs ~25% faster on CPU than the same GEMM in training).
COLD_BYTES = {"cpu": 64 * 2**20, "cuda": 256 * 2**20}
_VIEW_OPS = {"aten.empty", "aten.empty_like", "aten.empty_strided", "aten.detach", "aten._unsafe_view"}


def _set_count(bytes_per_set: float, device) -> int:
    """Operand sets that fill ``COLD_BYTES`` (at least 1, at most 64)."""
    return int(min(64, max(1, COLD_BYTES[device.type] // max(bytes_per_set, 1))))


def _operand_sets(make, bytes_per_set: float, device) -> list:
    """As many operand sets from ``make(i)`` (``i``: the set's index) as fill ``COLD_BYTES``."""
    return [make(i) for i in range(_set_count(bytes_per_set, device))]


def _random_buffer(device, dtype, numel: int):
    """One buffer of ``numel`` random values that the operand sets are cut from, set ``i``
    from ``i`` x its size on, so no two sets overlap.

    Operands cut from one buffer are as cache-cold as freshly drawn ones (each set lies in its
    own memory) and GEMM or attention time does not depend on the values, but drawing them
    afresh for every set costs more than the timing: ``torch.randn`` makes ~85 M values/s on
    one core of this project's 2-core VM, 0.2 s per 64 MB of operands, ~6 s of each
    calibration sweep's 33 GEMM timings (measured 2026-12-03)."""
    torch = require_torch()
    return torch.randn(int(numel), device=device, dtype=dtype)


def _cut(buffer, offset: int, shape):
    """``buffer[offset:offset + prod(shape)]`` viewed as ``shape``."""
    size = 1
    for d in shape:
        size *= int(d)
    return buffer[offset:offset + size].view(*shape)


def _cycling(sets: list, call) -> Callable[[], object]:
    state = {"i": 0}

    def fn():
        state["i"] = (state["i"] + 1) % len(sets)
        return call(*sets[state["i"]])
    return fn


#: tiny kernels in the CUDA graph ``kernel_overhead_s`` replays
GRAPH_KERNELS = 200


def host_launch_s(device, dtype) -> float:
    """Seconds per launch of a stream of tiny kernels launched one by one from Python (CUDA):
    the rate at which the host issues work, which bounds a step only when its kernels are
    shorter than this. Recorded by ``paraplan calibrate`` for the audit, not priced."""
    torch = require_torch()
    x = torch.ones(8, device=device, dtype=dtype)
    y = torch.empty_like(x)
    return time_call(lambda: torch.add(x, x, out=y), device, target_s=0.005)


def kernel_overhead_s(device, dtype) -> float:
    """Fixed cost of one kernel in an eager training step, seconds.

    CPU: ops run synchronously, so each kernel pays dispatch and autograd bookkeeping in full;
    measured as the time of a tiny Linear-GELU-LayerNorm forward + backward divided by the
    kernels it runs (top-level non-view ops, counted with the profiler). CUDA: launches are
    asynchronous, and in a step whose kernels outlast a launch the host runs ahead of the GPU,
    so what each kernel adds is the GPU's own fixed cost between kernels: measured as the time
    per kernel of a CUDA graph of ``GRAPH_KERNELS`` tiny kernels, replayed (no host launch in
    it). The host's launch rate (``host_launch_s``) is kept beside it in the calibration record.
    """
    torch = require_torch()
    import torch.nn.functional as F
    if device.type == "cuda":
        x = torch.ones(8, device=device, dtype=dtype)
        y = torch.empty_like(x)
        torch.add(x, x, out=y)
        synchronize(device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(GRAPH_KERNELS):
                torch.add(x, x, out=y)
        return time_call(graph.replay, device, target_s=0.01) / GRAPH_KERNELS
    x = torch.randn(8, 8, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(8, 8, device=device, dtype=dtype, requires_grad=True)
    b, ln_w, ln_b = (torch.zeros(8, device=device, dtype=dtype, requires_grad=True) for _ in range(3))

    def chain():
        F.layer_norm(F.gelu(F.linear(x, w, b)), (8,), ln_w, ln_b).sum().backward()
    chain()
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountKernels(TorchDispatchMode):
        """Counts the aten ops that reach a backend kernel (views launch nothing)."""
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not getattr(func, "is_view", False) and str(func.overloadpacket) not in _VIEW_OPS:
                CountKernels.count += 1
            return func(*args, **(kwargs or {}))
    with CountKernels():
        chain()
    return time_call(chain, device, target_s=0.01) / max(CountKernels.count, 1)


def gemm_times(device, dtype, shapes) -> list[float]:
    """Seconds per GEMM of each ``(m, n, k)`` (2mnk FLOPs), averaged over ``GEMM_LAYOUTS``,
    with cache-cold operands (``COLD_BYTES``)."""
    torch = require_torch()
    elt = torch.tensor([], dtype=dtype).element_size()
    # the inputs of every shape's operand sets are cut from one random buffer (each shape and
    # layout is timed on its own); the outputs are fresh, as before
    inputs = [m * k + k * n for m, n, k in shapes]
    buffer = _random_buffer(device, dtype, max(
        _set_count((m * k + k * n + m * n) * elt, device) * size for (m, n, k), size in zip(shapes, inputs)))
    out = []
    for (m, n, k), size in zip(shapes, inputs):
        total = 0.0
        for layout in GEMM_LAYOUTS:
            def make(i, layout=layout, m=m, n=n, k=k, size=size):
                a = _cut(buffer, i * size, (k, m) if layout[0] == "t" else (m, k))
                b = _cut(buffer, i * size + m * k, (n, k) if layout[1] == "t" else (k, n))
                return (a.t() if layout[0] == "t" else a, b.t() if layout[1] == "t" else b,
                        torch.empty(m, n, device=device, dtype=dtype))
            sets = _operand_sets(make, (m * k + k * n + m * n) * elt, device)
            total += time_call(_cycling(sets, lambda a, b, c: torch.matmul(a, b, out=c)), device)
        out.append(total / len(GEMM_LAYOUTS))
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
    # the runner's optimizer (``parallel.FlatOptimizer``): fused Adam on CUDA, the default on CPU
    opt = torch.optim.Adam([torch.nn.Parameter(p)], lr=1e-4, **({"fused": True} if device.type == "cuda" else {}))
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
    elt = torch.tensor([], dtype=dtype).element_size()
    # q, k, v and the output gradient of every set cut from one random buffer (the gradients
    # and outputs the step makes are fresh, as before)
    buffer = _random_buffer(device, dtype, max(
        _set_count(8 * b * a * s * d * elt, device) * 4 * b * a * s * d for b, a, s, d in shapes))
    out = []
    for bsz, heads, seq, dim in shapes:
        def make(i, shape=(bsz, heads, seq, dim)):
            size = bsz * heads * seq * dim
            return tuple(_cut(buffer, (4 * i + j) * size, shape).detach().requires_grad_(j < 3) for j in range(4))

        def step(q, k, v, grad):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(grad)
        sets = _operand_sets(make, 8 * bsz * heads * seq * dim * elt, device)
        out.append(time_call(_cycling(sets, step), device, target_s=0.03))
    return out


#: collective kinds ``collective_times_in_step`` measures
STEP_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "p2p")


def collective_times_in_step(device, dtype, kind: str, sizes_bytes, calls: int = 16,
                             compute_gap_s: float = 0.002, gaps_out: list | None = None) -> list[float]:
    """Mean seconds of one collective ``kind`` of each size, issued the way a training step does.

    Each call follows ``compute_gap_s`` of GEMM work on every rank and is timed on its own; the
    mean over ``calls`` is returned. Unlike a tight loop's best batch, this includes what a
    step pays: ranks arriving at slightly different times, waking the communication threads,
    and the occasional stall (on a loaded CPU host these make the mean several times the
    minimum for small messages). ``bytes`` is the full buffer (``all_reduce``), the gathered /
    reduced buffer (``all_gather`` / ``reduce_scatter``) or the message (``p2p``: rank 0 sends
    to rank 1 and back in turn; the receiver's wait is the sample). If ``gaps_out`` is a list,
    the measured mean compute gap (seconds) before each size's calls is appended to it.
    """
    torch = require_torch()
    import torch.distributed as dist
    from paraplan.measure.parallel import all_gather_into, reduce_scatter_into
    rank, world = dist.get_rank(), dist.get_world_size()
    elt = torch.tensor([], dtype=dtype).element_size()
    side = 256 if device.type == "cpu" else 2048
    a = torch.randn(side, side, device=device, dtype=dtype)
    b = torch.randn(side, side, device=device, dtype=dtype)
    for _ in range(3):      # warm up (cuBLAS handles, caches) before sizing the gap
        a @ b
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    synchronize(device)
    per_gemm = max((time.perf_counter() - t0) / 10, 1e-7)
    gemms = _agree_min(max(1, int(round(compute_gap_s / per_gemm))), device)
    out = []
    for nbytes in sizes_bytes:
        n = max(world, int(nbytes // elt) // world * world)
        # cache-cold buffers, as a step's gradients and activations are (``COLD_BYTES``);
        # zeros, so that repeated sums stay finite in 16-bit
        sets = [(torch.zeros(n, device=device, dtype=dtype), torch.zeros(n // world, device=device, dtype=dtype))
                for _ in range(int(min(64, max(1, COLD_BYTES[device.type] // (n * elt)))))]
        full, shard = sets[0]
        call = {
            "all_reduce": lambda: dist.all_reduce(full),
            "reduce_scatter": lambda: reduce_scatter_into(shard, full),
            "all_gather": lambda: all_gather_into(full, shard),
        }.get(kind)
        samples, gaps = [], []
        _barrier()
        for i in range(calls + 1):
            full, shard = sets[i % len(sets)]
            g0 = time.perf_counter()
            for _ in range(gemms):
                a @ b
            synchronize(device)
            t = time.perf_counter()
            gaps.append(t - g0)
            if kind == "p2p":
                sender = i % 2
                if rank == sender:
                    dist.send(full, 1 - sender)
                elif rank == 1 - sender:
                    dist.recv(full, sender)
            else:
                call()
            synchronize(device)
            if i and (kind != "p2p" or rank == 1 - i % 2):   # first call warms up
                samples.append(time.perf_counter() - t)
        out.append(float(sum(samples) / len(samples)) if samples else float("nan"))
        if gaps_out is not None:
            gaps_out.append(float(sum(gaps[1:]) / max(len(gaps) - 1, 1)))
    return out
