"""``paraplan measure``: train the small GPT on local ranks with real DP/TP/PP and time it.

One step = ``global_batch / (dp * micro_batch)`` micro-batches per pipeline (gradient
accumulation; with ``pp > 1`` the 1F1B schedule of Narayanan et al. 2021, warm-up of
``pp - stage - 1`` forwards, then one-forward-one-backward, then cool-down), followed by the
data-parallel gradient reduction (no overlap) and Adam. Ranks are aligned by a barrier before
each step; a step's time is the slowest rank's; the reported time is the median over the
steps after ``warmup``.
"""
from __future__ import annotations

import math
import numbers
import os
import statistics
import time
from dataclasses import asdict, dataclass, fields, replace

from hardware_specs.errors import InputError, shown
from paraplan.measure.runtime import (LAUNCH_TIMEOUT_S, PROGRESS_KEY, check_threads_per_rank, choose_device, cpu_wait_fraction,
                                      foreign_load, launch, peak_memory_bytes, report_progress, require_torch,
                                      run_queue_wait_s, synchronize, system_busy_cpu_s)


#: largest values of a measured run (see ``RunConfig``)
RUN_LIMITS = {"dp": 128, "tp": 128, "pp": 128, "copies": 128, "micro_batch": 4096, "global_batch": 2**20,
              "num_layers": 1024, "hidden_size": 65536, "num_heads": 1024, "vocab_size": 2**20,
              "seq_len": 2**20, "steps": 100_000}
#: the most FLOPs a measured run may do, by device: minutes at the ~50-100 GFLOP/s a few CPU cores
#: reach in fp32, or at a GPU's ~100 TFLOP/s
RUN_FLOPS = {"cpu": 2e13, "cuda": 2e16}
#: the options a measured run's FLOPs grow with (``RunConfig.training_flops``), in the order an
#: error's fix lists them, and how ``paraplan measure`` spells those it has
RUN_SIZE_OPTIONS = ("seq_len", "hidden_size", "num_layers", "vocab_size", "global_batch", "steps", "copies")
RUN_SIZE_FLAGS = {"seq_len": "--seq-len", "hidden_size": "--hidden", "num_layers": "--layers",
                  "global_batch": "--global-batch", "steps": "--steps"}


def _run_flops(seq_len, hidden_size, num_layers, vocab_size, global_batch, steps, copies) -> float:
    """``RunConfig.training_flops`` of these sizes."""
    h, L, s, v = float(hidden_size), float(num_layers), float(seq_len), float(vocab_size)
    per_token = 6.0 * (12.0 * h * h * L + v * h) + 6.0 * s * h * L
    return per_token * s * float(global_batch) * float(steps) * float(copies)


#: the least seconds one transformer layer of the measured GPT costs a rank per micro-batch,
#: forward and backward, whatever its size: a small layer is bound by PyTorch's cost per operator
#: call (dispatch, autograd, a kernel launch on GPUs), not by its FLOPs. One layer of ``gpt.py``
#: is ~101 aten operator calls forward and backward (counted with a ``TorchDispatchMode`` over
#: ``GPTStage``: 152 at 1 layer, 253 at 2). On this project's 2-core VM (Intel Xeon, torch 2.13.0,
#: one thread a rank; 2026-12, /tmp/fx_measure/layer_cost.py) a layer of hidden 8, 1 head, 2
#: tokens took 394 us best of 15 (3.9 us a call), and 800 us inside ``paraplan measure --layers
#: 128 --hidden 8 --heads 1 --seq-len 2 --global-batch 8`` (0.82 s a step for 1,024 layer
#: passes). The floor is 1 us a call, 4x under the best seen here, so only runs that cannot
#: finish are refused on a faster host; recomputation (a second forward) is not counted.
LAYER_PASS_FLOOR_S = 101 * 1e-6


#: the fields of ``RunConfig`` that are whole numbers (a bool is refused, though Python counts it one)
WHOLE_FIELDS = ("dp", "tp", "pp", "micro_batch", "global_batch", "zero_stage", "num_layers", "hidden_size", "num_heads",
                "vocab_size", "seq_len", "steps", "warmup", "seed", "copies")
#: where a measured run's ranks may run (``runtime.choose_device``)
DEVICES = ("auto", "cpu", "cuda")


#: bytes of one weight (and of its gradient) by the runner's compute dtype
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
#: Adam's first and second moments, fp32 each (``torch.optim.Adam`` on an fp32 parameter)
ADAM_MOMENT_BYTES = 8
#: a 16-bit run's fp32 master weight and its fp32 gradient (``parallel.FlatOptimizer``)
MASTER_COPY_BYTES = 8


def _near_divisors(n: int, x: int) -> str:
    """The divisors of ``n`` nearest ``x`` from below and above, as '2 or 4' (for a fix)."""
    divisors = [d for d in range(1, int(n) + 1) if n % d == 0]
    below = [d for d in divisors if d < x]
    above = [d for d in divisors if d > x]
    return " or ".join(str(d) for d in (below[-1:] + above[:1]))


def _host_memory_bytes() -> float:
    """The memory this process may use, bytes: the machine's physical memory, or a container's
    smaller cgroup limit (``/sys/fs/cgroup/memory.max``, cgroup v2); 0 where neither says."""
    try:
        physical = float(os.sysconf("SC_PAGE_SIZE")) * float(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        physical = 0.0
    try:
        text = open("/sys/fs/cgroup/memory.max", encoding="ascii").read().strip()
        limit = float(text) if text.isdigit() else 0.0
    except (OSError, ValueError):
        limit = 0.0
    return min(v for v in (physical, limit) if v > 0) if (physical > 0 or limit > 0) else 0.0


@dataclass(frozen=True)
class RunConfig:
    """One measured run: parallel layout, batch, model size and how long to run.

    ``recompute`` is ``none`` or ``full`` (each layer's input kept, the layer recomputed in
    backward). ``zero_stage`` is 0 (all-reduce) or 1 (sharded Adam). ``threads_per_rank``
    defaults to ``cpu_count // 2`` so every rank, in any layout, is the same "device".
    ``copies`` runs that many independent instances of the job side by side, so a small job
    loads the host like a large one: CPU ranks share the chip's FLOPs and memory bandwidth
    (two busy single-thread ranks each get about half of what one gets alone), and the
    calibration measures every rank under that full load.
    """

    name: str = "run"
    dp: int = 1
    tp: int = 1
    pp: int = 1
    micro_batch: int = 1
    global_batch: int = 4
    zero_stage: int = 0
    recompute: str = "none"
    num_layers: int = 4
    hidden_size: int = 256
    num_heads: int = 4
    vocab_size: int = 1024
    seq_len: int = 128
    steps: int = 4
    warmup: int = 1
    seed: int = 0
    lr: float = 1e-4
    device: str = "auto"
    threads_per_rank: int | None = None
    copies: int = 1

    def __post_init__(self) -> None:
        self._check_types()
        for name in ("dp", "tp", "pp", "micro_batch", "global_batch", "steps", "copies", "num_layers", "hidden_size",
                     "num_heads", "vocab_size", "seq_len"):
            if int(getattr(self, name)) < 1:
                raise InputError(name, f"must be >= 1, got {getattr(self, name)}")
        # a measured run is a small model for seconds on this machine: larger values are typos
        # (and would run for hours or exhaust memory before saying so)
        for name, limit in RUN_LIMITS.items():
            if int(getattr(self, name)) > limit:
                raise InputError(name, f"{getattr(self, name)} is above {limit:,} for a measured run",
                                 "measure a smaller configuration")
        if self.threads_per_rank is not None:
            # a recorded run may come from a larger machine: the cores are checked where ranks start
            check_threads_per_rank(self.threads_per_rank, here=False)
        if self.warmup < 0 or self.warmup >= self.steps:
            raise InputError("warmup", f"must be below the {self.steps} steps and >= 0, got {self.warmup}",
                             "time at least one step after the warm-up ones: raise the steps or lower the warm-up")
        per_step = self.dp * self.micro_batch
        if self.global_batch % per_step:
            below = self.global_batch // per_step * per_step
            near = " or ".join(str(x) for x in (below, below + per_step) if x >= 1)
            raise InputError("global_batch", f"{self.global_batch} is not a multiple of dp x micro-batch = "
                             f"{self.dp} x {self.micro_batch} = {per_step}", f"use a multiple of {per_step}, e.g. {near}")
        if self.recompute not in ("none", "full"):
            raise InputError("recompute", f"measured runs support none or full, got {shown(self.recompute)}")
        if self.zero_stage not in (0, 1):
            raise InputError("zero_stage", f"measured runs support 0 or 1, got {self.zero_stage}")
        # the shape rules the ranks' model (measure/gpt.py, parallel.py) enforces, checked here
        # so a bad layout is one error line before any process starts, not a rank's traceback
        if self.hidden_size % self.num_heads:
            raise InputError("num_heads", f"the hidden size {self.hidden_size} is not divisible by {self.num_heads} heads",
                             f"use a head count dividing the hidden size, e.g. {_near_divisors(self.hidden_size, self.num_heads)}")
        if self.num_heads % self.tp:
            raise InputError("tp", f"{self.num_heads} heads are not divisible by tp={self.tp}",
                             f"use a tp dividing the head count, e.g. {_near_divisors(self.num_heads, self.tp)}")
        if self.vocab_size % self.tp:
            raise InputError("tp", f"the vocabulary of {self.vocab_size} is not divisible by tp={self.tp}",
                             f"use a tp dividing the vocabulary, e.g. {_near_divisors(self.vocab_size, self.tp)}")
        if self.num_layers < self.pp:
            raise InputError("pp", f"{self.num_layers} layers cannot fill {self.pp} pipeline stages",
                             f"use at most {self.num_layers} stages (one per layer), or more layers")

    def _check_types(self) -> None:
        """``InputError`` naming the first field of the wrong kind, before any other check reads
        it (a NaN degree failed with a ValueError, an infinite one with an OverflowError, the
        text '4' with a TypeError; 2.0 ranks, 1.5 warm-up steps, ``True`` sequences and a device
        'tpu' were taken, and a NaN or negative learning rate failed inside the ranks)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in WHOLE_FIELDS and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
                raise InputError(f.name, f"must be a whole number, got {shown(value)}", f"give {f.name} as an integer")
        if isinstance(self.lr, bool) or not isinstance(self.lr, numbers.Real) or not math.isfinite(self.lr) or self.lr <= 0:
            raise InputError("lr", f"must be a finite number above 0, got {shown(self.lr)}", "e.g. 1e-4")
        if int(self.seed) < 0:
            raise InputError("seed", f"must be >= 0, got {self.seed}", "give a seed of 0 or more, e.g. seed=0")
        if self.device not in DEVICES:
            raise InputError("device", f"unknown device {self.device!r}", "use " + ", ".join(DEVICES))
        for name in ("name", "recompute"):
            if not isinstance(getattr(self, name), str):
                raise InputError(name, f"must be text, got {shown(getattr(self, name))}",
                                 "give a label, e.g. name='dp2'" if name == "name" else "use 'none' or 'full'")

    def model_state_bytes_per_rank(self, dtype: str = "fp32") -> float:
        """A lower bound of the model states one rank holds, bytes, training in ``dtype`` (the
        runner's ``choose_device``: fp32 on CPU ranks, bf16 on CUDA ranks).

        Parameters: the rank's tp x pp share of the GPT's weight matrices (``gpt.py``: 12 h^2 a
        layer, the token embedding and the separate output head, 2 v h; biases and norms left
        out). Bytes per parameter, as ``parallel.FlatOptimizer`` allocates them: the weight and
        its gradient at the dtype's width w (4 fp32, 2 bf16/fp16); with ZeRO-1 the reduce-scattered
        gradient shard (w per parameter of the 1/dp shard); Adam's two fp32 moments (8 per
        shard parameter); with 16-bit weights the fp32 master copy and its fp32 gradient (8 per
        shard parameter). fp32 ZeRO-0: 4 + 4 + 8 = 16 bytes a parameter; bf16 ZeRO-0: 2 + 2 + 8 +
        8 = 20. Activations come on top."""
        if dtype not in DTYPE_BYTES:
            raise InputError("dtype", f"unknown dtype {dtype!r}", "use " + ", ".join(DTYPE_BYTES))
        h, L = float(self.hidden_size), float(self.num_layers)
        params = (12.0 * h * h * L + 2.0 * self.vocab_size * h) / (self.tp * self.pp)
        width = DTYPE_BYTES[dtype]
        shard = params / self.dp if self.zero_stage == 1 else params
        held = 2.0 * width * params + ADAM_MOMENT_BYTES * shard
        if self.zero_stage == 1:
            held += width * shard
        if width < 4:
            held += MASTER_COPY_BYTES * shard
        return held

    def training_flops(self) -> float:
        """FLOPs of the whole measured run, all steps: 6 x the weights a token multiplies (the
        12 h^2 of each layer and the output head's v h) per token, and the causal attention core
        (QK^T and AV, 2 x 2 s h a token per layer forward, half of it masked: 6 s h a token per
        layer for forward and backward), for global_batch x seq_len tokens a step."""
        return _run_flops(**{name: getattr(self, name) for name in RUN_SIZE_OPTIONS})

    def run_size_culprit(self, most: float) -> tuple[str, int | None]:
        """The size option that makes the run's FLOPs (``training_flops``) more than ``most``,
        and the largest value of it that fits with the others as they are (None where even 1
        does not): of the options above ``RunConfig``'s defaults, the one whose own excess
        multiplies the FLOPs most (its value at the default divides them most), so
        ``measure --steps 100000`` names --steps, not the model; "model" where none is above."""
        given = {name: int(getattr(self, name)) for name in RUN_SIZE_OPTIONS}
        total = _run_flops(**given)
        culprit, factor = "model", 1.0
        for name in RUN_SIZE_OPTIONS:           # in the order the fix lists them
            default = RUN_SIZE_DEFAULTS[name]
            if given[name] > default:
                ratio = total / _run_flops(**{**given, name: default})
                if ratio > factor:
                    culprit, factor = name, ratio
        if culprit == "model":
            return culprit, None
        low, high = 0, given[culprit]           # FLOPs grow with each option: bisect the most that fits
        while low < high:
            mid = (low + high + 1) // 2
            if _run_flops(**{**given, culprit: mid}) <= most:
                low = mid
            else:
                high = mid - 1
        # ... that the run takes: a hidden size the heads divide, a batch dp x micro-batch divides
        step = {"hidden_size": int(self.num_heads), "global_batch": int(self.dp) * int(self.micro_batch)}
        low -= low % step.get(culprit, 1)
        try:
            replace(self, **{culprit: low})
        except InputError:                      # none does (fewer steps than the warm-up): no number
            return culprit, None
        return culprit, low

    def min_run_seconds(self, kind: str, cores: int | None = None, threads_per_rank: int = 1) -> float:
        """A lower bound of the run's wall seconds from its operator calls alone: each rank runs
        ``ceil(num_layers / pp)`` layers forward and backward for each of ``num_microbatches``
        micro-batches a step, ``steps`` steps, at ``LAYER_PASS_FLOOR_S`` a layer at least. On a
        CPU (``kind`` not cuda) ranks whose threads outnumber the ``cores`` share them:
        ``copies * world_size * threads_per_rank / cores`` times longer. FLOPs are not counted
        (``training_flops`` bounds those)."""
        layers = -(-int(self.num_layers) // int(self.pp))
        seconds = float(self.steps) * self.num_microbatches * layers * LAYER_PASS_FLOOR_S
        if kind != "cuda":
            cores = cores or os.cpu_count() or 1
            seconds *= max(1.0, self.copies * self.world_size * int(threads_per_rank) / cores)
        return seconds

    def check_fits(self, kind: str, host_bytes: float, device_bytes: float = 0.0, dtype: str | None = None) -> None:
        """``InputError`` when even the lower bound of the model states
        (``model_state_bytes_per_rank`` in ``dtype``; default the runner's: bf16 on CUDA, fp32 on
        CPU) cannot fit: every process's share against the host's memory on CPU ranks, one rank's
        against one GPU's memory on CUDA ranks (0 = not known: no check); or when the run's FLOPs
        (``training_flops``) are more than ``RUN_FLOPS`` allows this kind of device, a run of many
        minutes that reads as a hang (seq_len 1,048,576 trained for hours on two CPU cores)."""
        per_rank = self.model_state_bytes_per_rank(dtype or ("bf16" if kind == "cuda" else "fp32"))
        if kind == "cuda":
            need, have, where = per_rank, device_bytes, "one GPU has"
        else:
            need, have, where = per_rank * self.world_size * self.copies, host_bytes, "this machine has"
        if have and need > have:
            raise InputError("model", f"the weights, gradients and Adam state alone need at least {need / 2**30:,.1f} GiB, "
                             f"{where} {have / 2**30:,.1f} GiB",
                             "measure a smaller model (--hidden, --layers, --seq-len), or more tp or pp")
        most = RUN_FLOPS["cuda" if kind == "cuda" else "cpu"]
        total = self.training_flops()
        if total > most:
            # named by the option that makes the run too big (--steps 100000 was refused as 'model')
            culprit, fits = self.run_size_culprit(most)
            others = [RUN_SIZE_FLAGS[n] for n in RUN_SIZE_OPTIONS if n != culprit and n in RUN_SIZE_FLAGS]
            if culprit == "model":
                fix = "measure a smaller run: lower " + ", ".join(others[:-1]) + f" or {others[-1]}"
            else:
                flag = RUN_SIZE_FLAGS.get(culprit, culprit)
                fix = (f"lower {flag}" + (f" to {fits:,} or less" if fits else "")
                       + ", or measure a smaller run: lower " + ", ".join(others[:-1]) + f" or {others[-1]}")
            raise InputError(culprit, f"the run is about {total:.2g} FLOPs, more than the {most:.0g} a measured run "
                             f"does in minutes on {'a GPU' if kind == 'cuda' else 'this CPU'}", fix)

    def check_finishes(self, kind: str, threads_per_rank: int = 1, timeout_s: float = LAUNCH_TIMEOUT_S) -> None:
        """``InputError`` when even ``min_run_seconds`` is past the launch's ``timeout_s``: many
        tiny layers times many micro-batches are bound by operator calls, not FLOPs (1,024
        layers of hidden 8 and 64 micro-batches a step passed the FLOPs check at ~100 s a step),
        and the ranks would be stopped at the limit after minutes of work."""
        need = self.min_run_seconds(kind, threads_per_rank=threads_per_rank)
        if need > timeout_s:
            layers = -(-int(self.num_layers) // int(self.pp))
            raise InputError("steps", f"the run needs at least {need:,.0f} s ({self.steps} steps x {self.num_microbatches} "
                             f"micro-batches x {layers} layers a rank, each at least {LAYER_PASS_FLOOR_S * 1e6:.0f} us "
                             f"of operator calls), more than the {timeout_s:.0f} s a measured run may take",
                             "measure fewer --steps or --layers, or fewer micro-batches a step: a smaller "
                             "--global-batch or a larger --micro-batch")

    @classmethod
    def from_dict(cls, config: dict) -> "RunConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(config) - known
        if unknown:
            raise InputError(f"config.{sorted(unknown)[0]}", "unknown key", "known: " + ", ".join(sorted(known)))
        return cls(**config)

    @property
    def world_size(self) -> int:
        """Ranks of one job (``dp * tp * pp``); ``copies * world_size`` processes are started."""
        return self.dp * self.tp * self.pp

    @property
    def num_microbatches(self) -> int:
        return self.global_batch // (self.dp * self.micro_batch)


#: ``RunConfig``'s default of each ``RUN_SIZE_OPTIONS`` (a run within them is far below ``RUN_FLOPS``)
RUN_SIZE_DEFAULTS = {f.name: f.default for f in fields(RunConfig) if f.name in RUN_SIZE_OPTIONS}


def _one_f_one_b(model, mesh, tokens, targets, act_like):
    """One pipeline step of 1F1B over ``len(tokens)`` micro-batches; accumulates gradients.

    Returns the step's loss on the last stage, ``None`` on the others.
    """
    from paraplan.measure.parallel import exchange
    m = len(tokens)
    first, last = mesh.is_first_stage, mesh.is_last_stage
    inputs, outputs, losses = [], [], []

    def recv_forward():
        return None if first else exchange(None, None, act_like, mesh.prev_rank)

    def forward(i, x):
        if x is not None:
            x.requires_grad_()
        out = model(tokens[i] if first else x, targets[i])
        if last:
            out = out / m
            losses.append(out.detach())
        inputs.append(x)
        outputs.append(out)
        return out

    def backward(grad):
        x, out = inputs.pop(0), outputs.pop(0)
        out.backward(grad)
        return None if first else x.grad

    warm = min(mesh.pp - mesh.pp_rank - 1, m)
    for i in range(warm):
        out = forward(i, recv_forward())
        exchange(out.detach(), mesh.next_rank, None, None)
    x = recv_forward() if m > warm else None
    for j in range(m - warm):
        out = forward(warm + j, x)
        grad = None if last else exchange(out.detach(), mesh.next_rank, act_like, mesh.next_rank)
        g_in = backward(grad)
        if j == m - warm - 1:
            if not first:
                exchange(g_in, mesh.prev_rank, None, None)
        else:
            x = None if first else exchange(g_in, mesh.prev_rank, act_like, mesh.prev_rank)
    for _ in range(warm):
        grad = exchange(None, None, act_like, mesh.next_rank)
        g_in = backward(grad)
        if not first:
            exchange(g_in, mesh.prev_rank, None, None)
    return sum(losses) if last else None


def forward_backward(model, mesh, tokens, targets, act_like):
    """Accumulate the gradients of all micro-batches ``tokens[i]``; returns the mean loss
    (a tensor) on the last pipeline stage, ``None`` elsewhere."""
    if mesh.pp > 1:
        return _one_f_one_b(model, mesh, tokens, targets, act_like)
    total = 0.0
    for i in range(len(tokens)):
        loss = model(tokens[i], targets[i]) / len(tokens)
        loss.backward()
        total = total + loss.detach()
    return total


def _train_worker(rank: int, world: int, device, choice, args: dict) -> dict:
    torch = require_torch()
    import torch.distributed as dist
    from paraplan.measure.gpt import GPTConfig, GPTStage
    from paraplan.measure.parallel import FlatOptimizer, build_mesh
    run = RunConfig(**{k: v for k, v in args.items() if k != PROGRESS_KEY})
    report_progress(args, rank, 0, run.steps, "building the model")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    baseline_mem = peak_memory_bytes(device)
    mesh = build_mesh(run.tp, run.dp, run.pp, run.copies)
    job = rank // run.world_size
    cfg = GPTConfig(run.num_layers, run.hidden_size, run.num_heads, run.vocab_size, run.seq_len)
    torch.manual_seed(run.seed + 1000 * mesh.pp_rank + mesh.tp_rank + 100_000 * job)
    model = GPTStage(cfg, mesh, recompute=run.recompute == "full").to(device=device, dtype=choice.torch_dtype)
    opt = FlatOptimizer(model, mesh, run.zero_stage, lr=run.lr)

    gen = torch.Generator().manual_seed(run.seed + 7 * mesh.dp_rank + 100_000 * job)  # same on a replica's ranks
    shape = (run.num_microbatches, run.micro_batch, run.seq_len)
    tokens = torch.randint(0, run.vocab_size, shape, generator=gen).to(device)
    targets = torch.randint(0, run.vocab_size, shape, generator=gen).to(device)
    act_like = torch.empty(run.micro_batch, run.seq_len, run.hidden_size, device=device, dtype=choice.torch_dtype)

    losses, times, phases = [], [], []
    for step in range(run.steps):
        report_progress(args, rank, step, run.steps,
                        f"step {step + 1} of {run.steps}" + (" (warm-up)" if step < run.warmup else ""))
        if step == run.warmup:
            dist.barrier()
            busy0, own0, wall0 = system_busy_cpu_s(), time.process_time(), time.perf_counter()
            wait0 = run_queue_wait_s()
        dist.barrier()
        synchronize(device)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss_sum = forward_backward(model, mesh, tokens, targets, act_like)
        synchronize(device)
        t1 = time.perf_counter()
        opt.reduce_gradients()
        synchronize(device)
        t2 = time.perf_counter()
        opt.step()
        synchronize(device)
        t3 = time.perf_counter()
        times.append(t3 - t0)
        phases.append((t1 - t0, t2 - t1, t3 - t2))
        if step == 0:
            opt.check_grads_in_place()
        if loss_sum is not None:
            losses.append(float(loss_sum))
    report_progress(args, rank, run.steps, run.steps, "done")
    dist.barrier()
    busy1, own_cpu, wall = system_busy_cpu_s(), time.process_time() - own0, time.perf_counter() - wall0
    waited = cpu_wait_fraction(wait0, run_queue_wait_s(), wall)
    worst_wait = torch.tensor([-1.0 if waited is None else waited], dtype=torch.float64, device=device)
    dist.all_reduce(worst_wait, op=dist.ReduceOp.MAX)
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    own_total = torch.tensor([own_cpu], dtype=torch.float64, device=device)
    dist.all_reduce(own_total)
    busy = None if busy0 is None or busy1 is None else busy1 - busy0
    return {"rank": rank, "step_times_s": slowest.cpu().tolist(), "losses": losses,
            "foreign_load": foreign_load(busy, float(own_total), wall),
            "cpu_wait_fraction": None if float(worst_wait) < 0 else float(worst_wait),
            "phase_s": [statistics.median(p[i] for p in phases[run.warmup:]) for i in range(3)],
            "peak_memory_bytes": peak_memory_bytes(device), "baseline_memory_bytes": baseline_mem,
            "local_params": sum(p.numel() for p in model.parameters())}


def run_measurement(config: dict, progress=None) -> dict:
    """Train the small GPT with ``config`` (keys of ``RunConfig``) and report its measured cost.

    Returns the run's config plus: ``world_size`` (ranks of one job), ``processes``,
    ``device``, ``backend``, ``dtype``, ``threads_per_rank``, ``step_times_s`` (slowest rank per
    step), ``measured_step_s`` (median after warm-up), ``tokens_per_s`` (of one job),
    ``foreign_load`` (share of the host's cores other processes used while the measured steps
    ran, see ``runtime.foreign_load``), ``cpu_wait_fraction`` (worst rank's share of that time
    its compute thread waited for a CPU another process held: the contention that matters),
    ``peak_memory_bytes`` (max over ranks: peak RSS on CPU, CUDA allocator peak on GPU), ``baseline_memory_bytes`` (the same before the model was
    built), ``loss_first`` / ``loss_last`` and ``params_per_rank`` (of one job).
    ``progress(done, total, label)``: called about once a second with the step rank 0 is on.
    Raises ``InputError`` if torch is missing or the config is invalid.
    """
    run = RunConfig.from_dict(dict(config))      # a bad configuration is said before torch loads
    torch = require_torch()
    choice = choose_device(run.device, threads_per_rank=run.threads_per_rank)
    device_bytes = float(torch.cuda.get_device_properties(0).total_memory) if choice.kind == "cuda" else 0.0
    run.check_fits(choice.kind, _host_memory_bytes(), device_bytes, dtype=choice.dtype)
    run.check_finishes(choice.kind, choice.threads_per_rank)
    processes = run.copies * run.world_size
    cores = os.cpu_count() or 1
    if choice.kind != "cuda" and processes * choice.threads_per_rank > cores:
        import warnings
        warnings.warn(f"{processes} ranks x {choice.threads_per_rank} thread{'s' if choice.threads_per_rank > 1 else ''} "
                      f"share {cores} core{'s' if cores > 1 else ''}: the step time includes their contention, not only the layout's cost",
                      stacklevel=2)
    ranks = launch(_train_worker, processes, asdict(run), choice, progress=progress)
    times = ranks[0]["step_times_s"]
    measured = statistics.median(times[run.warmup:])
    losses = next((r["losses"] for r in ranks if r["losses"]), [])
    result = asdict(run)
    result.update({
        "world_size": run.world_size, "processes": run.copies * run.world_size, "device": choice.kind,
        "backend": choice.backend, "dtype": choice.dtype, "threads_per_rank": choice.threads_per_rank,
        "step_times_s": times, "measured_step_s": measured,
        "tokens_per_s": run.global_batch * run.seq_len / measured,
        "peak_memory_bytes": max(r["peak_memory_bytes"] for r in ranks),
        "baseline_memory_bytes": max(r["baseline_memory_bytes"] for r in ranks),
        "foreign_load": ranks[0]["foreign_load"], "cpu_wait_fraction": ranks[0]["cpu_wait_fraction"],
        "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
        "params_per_rank": [r["local_params"] for r in ranks[:run.world_size]],
        # rank 0's median seconds in forward+backward (incl. TP/PP traffic), DP gradient
        # reduction, and optimizer step (incl. the ZeRO-1 all-gather)
        "phase_s": dict(zip(("forward_backward_s", "grad_reduce_s", "optimizer_s"), ranks[0]["phase_s"])),
        "phase_s_per_rank": [r["phase_s"] for r in ranks[:run.world_size]],
    })
    return result
