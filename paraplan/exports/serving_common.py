"""What every serving export shares: a priced deployment as the engine processes to start.

``launch_of(context, deployment, metrics)`` turns a ``simulator.serving`` deployment (the one
``serve simulate`` priced, or ``serve plan``'s winner) into a ``ServingLaunch``: which
checkpoint to load (one storing the weight formats that were priced), the engine settings the
prediction assumed (token budget, running-request cap, memory share, KV-cache dtype, CUDA-graph
batch), and where each worker runs (``placement``: workers packed onto hosts of
``gpus_per_host`` GPUs, a worker larger than a host spanning whole hosts). The engine modules
(``vllm_serve``, ``sglang_serve``, ``trtllm_serve``) write that as their own command lines, and
``render_script`` wraps them in one bash script that every host of the deployment runs with its
own ``HOST_INDEX``.
"""
from __future__ import annotations

from pathlib import Path

import re

import shlex
from dataclasses import dataclass
from typing import Mapping

from hardware_specs.errors import InputError
from hardware_specs.release_match import release_numbers

#: the checkpoint a launch loads, the one its prediction priced (``simulator.serving.checkpoints``)
from simulator.serving.checkpoints import CHECKPOINTS, KV_NAMING_FORMATS, served_checkpoint

#: first port of the workers on a host; a host's k-th worker listens on BASE_PORT + PORT_STRIDE k:
#: SGLang binds its internal sockets from port + 233 to port + 239 when attention DP runs on one
#: node (sglang/srt/server_args.py ``PortArgs.init_new``), so workers one port apart collide
BASE_PORT = 8000
PORT_STRIDE = 10
#: the router / disaggregated front end's port on host 0 (above every worker's and SGLang's
#: bootstrap ports, 8998 + k)
FRONT_PORT = 9100
#: extra tokens of context beyond isl + osl: a benchmark's random prompt re-tokenised by the
#: server can come out a few tokens longer, and a request over the context length is refused
CONTEXT_SLACK_TOKENS = 256
#: the most engine instances one script starts
MAX_EMIT_WORKERS = 4096
#: the release whose flags each engine's export writes (``serving_flags.json``): vLLM's and
#: SGLang's read from their installed parsers; TensorRT-LLM's table is read from its 1.x
#: main-branch source without a release tag, so its release line, 1.x
PINNED_RELEASES = {"vllm": "0.19.1", "sglang": "0.5.23", "trtllm": "1.x"}
SIXTEEN_BIT = ("bf16", "fp16")


@dataclass(frozen=True)
class Worker:
    """One engine instance: ``role`` (``agg``, ``prefill`` or ``decode``), its index within the
    role, its layout's degrees, the hosts it runs on (``first_host`` .. + ``hosts`` - 1), the
    GPU ids it uses on each (all of them when it spans hosts) and its HTTP port."""

    role: str
    index: int
    tp: int
    pp: int
    adp: int
    moe_tp: int
    moe_ep: int
    batch: int
    first_host: int
    hosts: int
    gpu_ids: tuple[int, ...]
    port: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.adp

    @property
    def name(self) -> str:
        return f"{self.role}{self.index}"


@dataclass(frozen=True)
class ServingLaunch:
    """A priced serving deployment, as an engine must be started to run it as priced.

    Attributes:
        model_name: the model preset; ``checkpoint`` its Hugging Face repository storing the
            priced formats, or None (the script then asks for ``MODEL``); ``online_fp8``: load a
            16-bit checkpoint and quantise to per-tensor FP8 at start (``--quantization fp8``).
        dense_format, expert_format, kv_cache_dtype: as priced (``auto`` resolved: ``bf16``,
            ``fp16`` or ``fp8``); ``model_dtype``: the activations' 16-bit dtype.
        isl, osl: the request shape priced; ``max_model_len`` = isl + osl.
        token_budget, max_running_requests (0 = the engine derives it from the KV pool),
        cuda_graph_max_batch, memory_fraction (the engine's own memory setting, in its meaning),
        overlap_scheduler, chunked_prefill: the stack behaviour the prediction assumed;
            ``context_overlap_scheduler`` the overlap scheduler of a prefill worker
            (``ServingBehaviour.context_only``, as priced), read through ``overlap``.
        speculative_tokens: tokens the model's MTP module (or the EAGLE-3 head at
            ``draft_model_path``, its folder, absolute; "" = the MTP module) drafts a step (0 = no
            speculative decoding), written in each engine's own speculative-decoding setting;
            ``draft_acceptance`` the acceptance the TPOT assumed, ``acceptance_is_prior`` whether
            it is the unfitted prior.
        device_env: the variable pinning a single-host worker to its GPUs (``CUDA_VISIBLE_DEVICES``),
            "" where the accelerator reads none the script can set (TPU: each worker has a host
            to itself, ``launch_of``).
        workers: every engine instance and where it runs; ``hosts``: hosts in all;
        ``gpus_per_host``.
        stack, framework: the serving stack priced and its framework.
        predicted: the prediction's headline numbers (ttft_ms, tpot_ms, tokens_per_s_per_gpu,
            concurrency), quoted in the script's header; ``prior``: they rest on an unfitted prior.
    """

    model_name: str
    checkpoint: str | None
    online_fp8: bool
    dense_format: str
    expert_format: str
    kv_cache_dtype: str
    checkpoint_kv_dtype: str
    model_dtype: str
    moe: bool
    mode: str
    isl: int
    osl: int
    token_budget: int
    max_running_requests: int
    cuda_graph_max_batch: int
    memory_fraction: float
    overlap_scheduler: bool
    chunked_prefill: bool
    workers: tuple[Worker, ...]
    hosts: int
    gpus_per_host: int
    stack: str
    framework: str
    system: str
    gpu: str
    predicted: Mapping[str, float]
    prior: bool
    max_context_tokens: int = 0
    online_fp8_refused: str = ""
    priced_release_note: str = ""
    speculative_tokens: int = 0
    draft_acceptance: float = 0.0
    acceptance_is_prior: bool = False
    draft_model_path: str = ""
    draft_checkpoint: str = ""
    device_env: str = "CUDA_VISIBLE_DEVICES"
    context_overlap_scheduler: bool = True

    @property
    def max_model_len(self) -> int:
        """The engine's context length: isl + osl and ``CONTEXT_SLACK_TOKENS``, within the model's."""
        want = int(self.isl + self.osl + CONTEXT_SLACK_TOKENS)
        return min(want, self.max_context_tokens) if self.max_context_tokens else want

    def step_tokens(self, w: "Worker") -> int:
        """Tokens one step of worker ``w`` must be allowed (per attention-DP rank): the stack's
        token budget, and for an engine that does not chunk prompts at least one whole prompt
        (the model prices one prompt a step when it is longer than the budget); a prefill
        worker's ``batch`` prompts a step, exactly (the disaggregated model prices them in one
        step, and no more)."""
        need = self.token_budget
        if w.role == "prefill":
            return int(w.batch * self.isl)         # exactly the priced prompts, no more
        if not self.chunked_prefill:
            need = max(need, self.isl)
        return int(need)

    def overlap(self, w: "Worker") -> bool:
        """Whether worker ``w`` runs the overlap scheduler, as priced: a prefill worker as a
        context-only one (``ServingBehaviour.context_only``), the others as the stack says."""
        return self.context_overlap_scheduler if w.role == "prefill" else self.overlap_scheduler

    def role(self, name: str) -> tuple[Worker, ...]:
        return tuple(w for w in self.workers if w.role == name)


def placement(layouts: list[tuple[str, object, int]], gpus_per_host: int) -> tuple[tuple[Worker, ...], int]:
    """Workers packed onto hosts in the order given: ``layouts`` is (role, WorkerLayout, count)
    per role. A worker of at most one host's GPUs takes the next free block of GPUs on the
    current host (a new host when they do not fit); a larger worker takes whole hosts of its
    own, ceil(gpus / gpus_per_host). Returns the workers and the hosts used."""
    n = int(gpus_per_host)
    workers: list[Worker] = []
    host, next_gpu, slot = 0, 0, 0
    for role, lay, count in layouts:
        g = lay.tp * lay.pp * lay.adp
        for i in range(int(count)):
            if g <= n:
                if next_gpu + g > n:
                    host, next_gpu, slot = host + 1, 0, 0
                ids = tuple(range(next_gpu, next_gpu + g))
                workers.append(Worker(role, i, lay.tp, lay.pp, lay.adp, lay.moe_tp, lay.moe_ep, lay.batch, host, 1,
                                      ids, BASE_PORT + PORT_STRIDE * slot))
                next_gpu, slot = next_gpu + g, slot + 1
            else:
                if next_gpu:
                    host, next_gpu, slot = host + 1, 0, 0
                span = -(-g // n)
                if g % n:
                    raise InputError(f"{role}.gpus", f"a worker of {g} GPUs does not fill whole hosts of {n}",
                                     f"use a worker of a multiple of {n} GPUs, or of at most {n}")
                workers.append(Worker(role, i, lay.tp, lay.pp, lay.adp, lay.moe_tp, lay.moe_ep, lay.batch, host, span,
                                      tuple(range(n)), BASE_PORT))
                host += span
    hosts = host + (1 if next_gpu else 0)
    return tuple(workers), max(hosts, 1)


def resolved_kv_dtype(context) -> str:
    """The KV-cache dtype the prediction used: ``fp8``, or the 16-bit dtype (``bf16``/``fp16``;
    ``auto`` is the model's activation dtype, fp16 for fp16 weights)."""
    if context.kv_bytes <= 1:
        return "fp8"
    if context.kv_cache_dtype == "fp16" or (context.kv_cache_dtype == "auto" and context.dense_format == "fp16"):
        return "fp16"
    return "bf16"


def engine_memory_fraction(behaviour, hbm_bytes: float) -> float:
    """The engine's memory setting that gives the KV pool the prediction assumed
    (``cost_models.serving_memory.kv_pool_bytes_per_gpu``): the stack's ``gpu_memory_fraction``
    for an engine that states it (vLLM ``gpu_memory_utilization``, TensorRT-LLM
    ``free_gpu_memory_fraction``); for one that keeps ``runtime_reserved_gib`` out of the device
    memory and counts the activations inside it (SGLang), (fraction x memory - reserve) / memory,
    the share the simulator's pool fraction x memory - reserve - weights leaves weights and KV."""
    if behaviour.reserve_covers_activations and behaviour.memory_fraction_of == "total":
        reserve = behaviour.runtime_reserved_gib * 2**30
        return round(max(0.0, min(1.0, (behaviour.gpu_memory_fraction * hbm_bytes - reserve) / hbm_bytes)), 3)
    return round(float(behaviour.gpu_memory_fraction), 3)


#: the GPU vendors a launch script's entry point runs on where the engine's stack file allows more:
#: SGLang's ``sglang.launch_server`` is its CUDA / ROCm entry point (its TPU port is a separate
#: project with another one); TensorRT-LLM's stack file states NVIDIA alone (``gpu_vendors``,
#: refused by ``ServingContext.build``); vLLM's ``vllm serve`` is the same on every platform
SCRIPT_VENDORS = {"sglang": ("nvidia", "amd")}


def unexpressed_settings(behaviour) -> list[str]:
    """Stack settings the exports do not write (an engine run with its defaults would not have
    them): scheduler holds and a stack without CUDA graphs."""
    out = []
    if behaviour.context_wait_steps:
        out.append(f"context_wait_steps {behaviour.context_wait_steps}")
    if behaviour.recv_interval_steps != 1:
        out.append(f"recv_interval_steps {behaviour.recv_interval_steps}")
    if behaviour.cuda_graphs == "none":
        out.append("cuda_graphs none")
    return out


def launch_of(context, deployment, metrics: Mapping[str, float]) -> ServingLaunch:
    """The ``ServingLaunch`` of ``deployment`` as priced in ``context`` (a ``ServingContext``),
    with the prediction's ``metrics`` (seconds, as ``ServingReport.metrics``)."""
    model, beh, cluster = context.model, context.behaviour, context.cluster
    moe = model.moe is not None
    framework = context.stack.framework.lower()
    vendor = (cluster.gpu.vendor or "").lower()
    if vendor and framework in SCRIPT_VENDORS and vendor not in SCRIPT_VENDORS[framework]:
        raise InputError("--emit", f"the {framework} launch script runs on {' or '.join(SCRIPT_VENDORS[framework])} GPUs, "
                         f"not on {cluster.name}'s {cluster.gpu.name} ({vendor})",
                         "emit for a system of those GPUs" + (", or use -b vllm (its TPU build takes vllm serve)"
                                                              if vendor == "google" else ""))
    unwritten = unexpressed_settings(beh)
    if unwritten:
        raise InputError("--emit", f"stack {context.stack.name} sets {', '.join(unwritten)}, which the launch export "
                         "does not write (the engine would run without it)",
                         "emit with the framework's own profile (-b vllm / sglang / trtllm), or add the flag by hand")
    # the checkpoint the prediction priced (its KV dtype included: ServingContext.build)
    checkpoint, online = served_checkpoint(model, context.dense_format, context.expert_format, framework,
                                           context.prequantised)
    if deployment.mode == "agg":
        groups = [("agg", deployment.layout, deployment.workers)]
    else:
        groups = [("prefill", deployment.prefill, deployment.prefill_workers),
                  ("decode", deployment.decode, deployment.decode_workers)]
    per_host = cluster.launch_gpus_per_host
    workers, hosts = placement(groups, per_host)
    predicted = {"ttft_ms": 1e3 * float(metrics["ttft_s"]), "tpot_ms": 1e3 * float(metrics["tpot_s"]),
                 "tokens_per_s_per_gpu": float(metrics["tokens_per_s_per_gpu"]),
                 "concurrency": float(deployment.concurrency)}
    refused = ""
    if online and framework == "sglang":
        # SGLang 0.5.23 builds FP8 weights from the 16-bit ones on the GPU after loading them
        # (sglang/srt/layers/quantization/fp8.py ``create_weights`` without a meta-device path):
        # the 16-bit weights of each GPU must fit first
        from cost_models.serving_memory import weight_bytes_per_gpu
        limit = beh.gpu_memory_fraction * cluster.gpu.hbm_bytes
        for w in workers:
            need = float(weight_bytes_per_gpu(model, w.tp, w.adp, w.pp, w.moe_tp, w.moe_ep, "bf16", "bf16",
                                              beh.lm_head_split_over_attention_dp))
            if need > limit:
                online, checkpoint = False, None
                refused = (f"SGLang loads the 16-bit weights before quantising them, {need / 2**30:.0f} GiB a GPU of "
                           f"{w.name}, more than the GPU holds")
                break
    tpu = vendor == "google"
    if tpu:
        _refuse_shared_tpu_hosts(workers, cluster, per_host)
    if len(workers) > MAX_EMIT_WORKERS:
        raise InputError("--emit", f"the deployment starts {len(workers):,} engine instances, above the "
                         f"{MAX_EMIT_WORKERS:,} one script launches", "emit a smaller deployment, or one worker and replicate it")
    return ServingLaunch(
        model_name=model.name, checkpoint=checkpoint, online_fp8=online, dense_format=context.dense_format,
        expert_format=context.expert_format, kv_cache_dtype=resolved_kv_dtype(context),
        checkpoint_kv_dtype=_checkpoint_kv(context, checkpoint, online),
        model_dtype="float16" if context.dense_format == "fp16" else "bfloat16", moe=moe, mode=deployment.mode,
        isl=deployment.isl, osl=deployment.osl, token_budget=int(context.token_budget),
        max_running_requests=int(beh.max_running_requests), cuda_graph_max_batch=int(beh.cuda_graph_max_batch),
        memory_fraction=engine_memory_fraction(beh, cluster.gpu.hbm_bytes), overlap_scheduler=bool(beh.overlap_scheduler),
        context_overlap_scheduler=bool(beh.context_only().overlap_scheduler),
        chunked_prefill=bool(beh.chunked_prefill),
        workers=workers, hosts=hosts, gpus_per_host=per_host, stack=context.stack.name,
        framework=framework, system=cluster.name, gpu=cluster.gpu.name, predicted=predicted,
        prior=bool(context.efficiency.prior), max_context_tokens=int(model.max_context_tokens or 0),
        online_fp8_refused=refused, priced_release_note=_release_note(context.stack, framework,
                                                                      context.backend_version),
        speculative_tokens=int(context.speculative_tokens), draft_acceptance=float(context.draft_acceptance),
        acceptance_is_prior=bool(context.acceptance_is_prior),
        draft_model_path=str(Path(context.draft_head.path).resolve()) if context.draft_head is not None else "",
        draft_checkpoint=context.draft_head.checkpoint if context.draft_head is not None else "",
        device_env="" if tpu else "CUDA_VISIBLE_DEVICES")


def _refuse_shared_tpu_hosts(workers, cluster, per_host: int) -> None:
    """``InputError`` where two workers would share a TPU host. The script pins a worker to its
    GPUs with ``CUDA_VISIBLE_DEVICES``, which TPU runtimes do not read; the variables that give
    a process a subset of a host's chips (``TPU_VISIBLE_CHIPS`` / ``TPU_VISIBLE_DEVICES``,
    ``TPU_CHIPS_PER_PROCESS_BOUNDS``, ``TPU_PROCESS_BOUNDS``, a mesh-controller port each) belong
    to the TPU runtime, depend on the chips' topology, and are not in vLLM's TPU documentation,
    so the export does not guess them. A worker with a host to itself needs no pinning."""
    count: dict[int, int] = {}
    for w in workers:
        for host in range(w.first_host, w.first_host + w.hosts):
            count[host] = count.get(host, 0) + 1
    host, most = max(count.items(), key=lambda kv: (kv[1], -kv[0]))
    if most > 1:
        raise InputError("--emit", f"{most} workers would share host {host} of {cluster.name} ({per_host} "
                         f"{cluster.gpu.name} chips), and the script cannot pin a worker to TPU chips: TPU runtimes "
                         "ignore CUDA_VISIBLE_DEVICES, and the runtime's chip-bounds variables are not documented by "
                         "vLLM", f"emit workers that fill a host each (tp x pp = {per_host}), or start them yourself "
                         "with the TPU runtime's TPU_VISIBLE_CHIPS / TPU_PROCESS_BOUNDS settings")


def _release_line(release: str) -> tuple[int, ...] | None:
    """The release line of ``release``: its first two numbers (``0.19.1`` -> (0, 19)), or its
    stated ones (``1.x`` -> (1,)); None for a tag without numbers."""
    numbers = release_numbers(release)
    return None if numbers is None else numbers[:2]


def _release_note(stack, framework: str, requested: str | None = None) -> str:
    """'' when the flags the export writes (``PINNED_RELEASES``) are of the release line priced,
    else a note saying which release was priced and whose flags are written: the line of the
    ``requested`` release (``--backend-version``) where one was asked for, else of the priced
    stack profile's releases."""
    pinned = PINNED_RELEASES.get(framework)
    if pinned is None:
        return ""
    line = _release_line(pinned)
    priced = [requested] if requested is not None else list(stack.versions)
    if any((mine := _release_line(v)) is not None and mine[:len(line)] == line for v in priced):
        return ""
    return (f"priced with stack {stack.name} (releases {', '.join(stack.versions) or 'unstated'}); the flags are "
            f"{framework} {pinned}'s: on {requested or 'an older release'} check them against its --help")


def _checkpoint_kv(context, checkpoint: str | None, online: bool) -> str:
    """The KV dtype an engine left at ``auto`` would give with the checkpoint loaded: FP8 where the
    stack takes it from a ModelOpt FP8 / NVFP4 checkpoint (``kv_dtype_from_checkpoint``), else
    the 16-bit model dtype (a 16-bit release quantised at load time names no KV format). It is
    the priced one except where SGLang's online FP8 was refused after pricing (the weights do
    not fit in 16-bit) and a quantised checkpoint is asked for instead."""
    quantised = KV_NAMING_FORMATS & {context.dense_format, context.expert_format}
    if context.behaviour.kv_dtype_from_checkpoint and quantised and not online:
        return "fp8"
    return "fp16" if context.dense_format == "fp16" else "bf16"


# --------------------------------------------------------------------------------------------
# the script
# --------------------------------------------------------------------------------------------

def shell_word(word: str) -> str:
    """``word`` quoted for bash; a word holding ``$`` (a variable the script sets) in double
    quotes so that it expands, everything else as ``shlex.quote`` does."""
    if "$" in word:
        return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return shlex.quote(word)


def command_line(argv: list[str], indent: str = "  ") -> str:
    """``argv`` as a bash command: the program and its positional words on one line, then one
    option and its value per continued line (a further word after an option's value, such as
    the next of several URLs or the program an MPI launcher starts, on a line of its own)."""
    parts: list[list[str]] = []
    for word in argv:
        flag_open = parts and parts[-1][0].startswith("-") and len(parts[-1]) == 1
        program = parts and len(parts) == 1 and not parts[0][0].startswith("-")
        if parts and not word.startswith("-") and (flag_open or program):
            parts[-1].append(word)
        else:
            parts.append([word])
    lines = [" ".join(shell_word(w) for w in p) for p in parts]
    return (" \\\n" + indent + "  ").join(lines)


def _model_line(launch: ServingLaunch) -> str:
    if launch.checkpoint is not None:
        return f'MODEL="${{MODEL:-{launch.checkpoint}}}"'
    fmt = launch.dense_format if not launch.moe or launch.expert_format == launch.dense_format else \
        f"{launch.dense_format} weights and {launch.expert_format} experts"
    known = [(key, repo) for key, repo in CHECKPOINTS.items() if key[0] == launch.model_name]
    hint = ""
    if known:
        (_, dense, expert), repo = known[0]
        hint = f"; or plan with --precision {dense}" + (f" --expert-precision {expert}" if expert != dense else "") + \
            f" for {repo}"
    why = f" ({launch.online_fp8_refused})" if launch.online_fp8_refused else ""
    return (f'MODEL="${{MODEL:?set MODEL to a {launch.model_name} checkpoint storing {fmt}, the formats priced'
            f'{why}{hint}}}"')


#: a path the script may write between double quotes as it is (no $, quote, backslash, backtick)
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._/+@=:, -]+")


def _draft_model_line(launch: ServingLaunch) -> str:
    """The EAGLE-3 head's weights as the script's ``DRAFT_MODEL``: the Hugging Face repository its
    config names (``DraftHead.checkpoint``) unless set; else whoever runs the script sets it (the
    folder the head was priced from may hold only its config, on another machine)."""
    if launch.draft_checkpoint and _PLAIN_PATH.fullmatch(launch.draft_checkpoint):
        return f'DRAFT_MODEL="${{DRAFT_MODEL:-{launch.draft_checkpoint}}}"'
    return ('DRAFT_MODEL="${DRAFT_MODEL:?set DRAFT_MODEL to the weights of the EAGLE-3 head priced (a folder or a '
            'Hugging Face repository; its config.json stated none)}"')


#: control characters (a newline among them): never inside a script's comment line
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

def render_script(launch: ServingLaunch, engine, title: str) -> str:
    """The deployment as one bash script: a header with what was priced, then per host the
    workers it starts (``HOST_INDEX`` picks the host, ``HOSTS`` names them all), the router or
    disaggregated front end on host 0, and the benchmark that measures what was predicted."""
    p = launch.predicted
    out = ["#!/usr/bin/env bash",
           f"# {title}",
           f"# paraplan serving plan for {engine.RELEASE}: {launch.model_name} on {launch.hosts} host(s) of "
           f"{launch.gpus_per_host} x {launch.gpu} ({launch.system}), stack {launch.stack}",
           f"# predicted: TTFT {p['ttft_ms']:.0f} ms, TPOT {p['tpot_ms']:.1f} ms, {p['tokens_per_s_per_gpu']:,.0f} "
           f"tokens/s/GPU at {int(p['concurrency'])} requests in flight (isl {launch.isl}, osl {launch.osl})"
           + (" [rests on an unfitted prior]" if launch.prior else ""),
           f"# priced formats: weights {launch.dense_format}"
           + (f", experts {launch.expert_format}" if launch.moe else "") + f", KV cache {launch.kv_cache_dtype}"
           + ("; the 16-bit checkpoint is quantised to FP8 at load time" if launch.online_fp8 else ""),
           *([f"# note: {launch.priced_release_note}"] if launch.priced_release_note else []),
           f"# engine settings as priced: token budget {launch.token_budget}, "
           + (f"at most {launch.max_running_requests} running requests, " if launch.max_running_requests else "")
           + f"memory setting {launch.memory_fraction:g}, CUDA graphs up to batch {launch.cuda_graph_max_batch}",
           *([f"# speculative decoding: {'the EAGLE-3 head in DRAFT_MODEL' if launch.draft_model_path else 'the MTP module'} "
              f"drafts {launch.speculative_tokens} token(s) a step; the TPOT "
              f"assumes each is accepted with p = {launch.draft_acceptance!r}"
              + (" [an unfitted prior: measure yours]" if launch.acceptance_is_prior else " (as given)")]
             if launch.speculative_tokens else []),
           "#",
           "# Run on every host with HOST_INDEX set (0 .. " + str(launch.hosts - 1) + ") and HOSTS naming the hosts in order:",
           f"#   HOSTS=\"{' '.join(f'node{i}' for i in range(launch.hosts))}\" HOST_INDEX=0 bash this.sh",
           "# workers:"]
    for w in launch.workers:
        where = (f"host {w.first_host}, GPUs {w.gpu_ids[0]}-{w.gpu_ids[-1]}" if w.hosts == 1 else
                 f"hosts {w.first_host}-{w.first_host + w.hosts - 1} (all GPUs)")
        out.append(f"#   {w.name}: {engine.layout_text(w)}, {w.batch} "
                   f"{'prompts per step' if w.role == 'prefill' else 'requests'} per rank; {where}; port {w.port}")
    # a comment stays one line whatever text it quotes (a newline would end it and run the rest)
    out = [_CONTROL.sub(" ", line) if line.startswith("#") else line for line in out]
    out += ["set -euo pipefail",
            _model_line(launch),
            *([_draft_model_line(launch)] if launch.draft_model_path else []),
            'read -r -a HOST <<< "${HOSTS:-localhost}"',
            'HOST_INDEX="${HOST_INDEX:-0}"',
            'WORKDIR="${WORKDIR:-$(pwd)}"']
    if launch.hosts > 1:
        out += [f'if [ "${{#HOST[@]}}" -lt {launch.hosts} ]; then',
                f'  echo "HOSTS must name the {launch.hosts} hosts of this deployment" >&2; exit 2', "fi"]
    for name, body in engine.shared_files(launch).items():
        text, expand = body if isinstance(body, tuple) else (body, False)
        # a file naming the hosts expands ${HOST[i]} when the script runs; others are literal
        marker = "PARAPLAN_EOF" if expand else "'PARAPLAN_EOF'"
        out += [f"cat > \"$WORKDIR/{name}\" <<{marker}", text.rstrip("\n"), "PARAPLAN_EOF"]
    out.append('case "$HOST_INDEX" in')
    on_host: dict[int, list[Worker]] = {}
    for w in launch.workers:
        for host in range(w.first_host, w.first_host + w.hosts):
            on_host.setdefault(host, []).append(w)
    for host in range(launch.hosts):
        out.append(f"  {host})")
        for w in on_host.get(host, []):
            node_rank = host - w.first_host
            argv = engine.worker_command(launch, w, node_rank)
            if not argv:
                out.append(f"    # {w.name}: started from host {w.first_host}")
                continue
            env = ("" if w.hosts > 1 or not launch.device_env
                   else f"{launch.device_env}={','.join(str(i) for i in w.gpu_ids)} ")
            out.append(f"    # {w.name}" + (f", node {node_rank} of {w.hosts}" if w.hosts > 1 else ""))
            out.append("    " + env + command_line(argv, indent="    ") + " &")
        if host == 0:
            front = engine.front_command(launch)
            if front:
                out.append("    # the front end clients talk to (port " + str(FRONT_PORT) + ")")
                out.append("    " + command_line(front, indent="    ") + " &")
        out.append("    ;;")
    out += ["  *) echo \"HOST_INDEX must be 0 .. " + str(launch.hosts - 1) + "\" >&2; exit 2 ;;", "esac"]
    out.append("# measure what was predicted once the servers answer (a closed loop at the priced concurrency):")
    front = engine.front_command(launch) is not None
    if front or len(launch.workers) == 1:
        w = launch.workers[0]
        targets = [("${HOST[0]}" if front else f"${{HOST[{w.first_host}]}}", FRONT_PORT if front else w.port,
                    int(launch.predicted["concurrency"]))]
    else:       # separate engines without a router: each its own share of the clients
        out.append("# (no router over the workers: one benchmark per worker, each with its share of the clients)")
        targets = [(f"${{HOST[{w.first_host}]}}", w.port, w.batch * w.adp) for w in launch.workers]
    for host_expr, port, clients in targets:
        out.append("#   " + " ".join(shell_word(x) for x in engine.bench_command(launch, host_expr, port, clients)))
    out += ["wait", ""]
    return "\n".join(out)
