"""Predict the Sailor runs (mixed consumer GPUs, GH200) and compare (``paraplan validate heterogeneous``).

Each entry of ``sailor_runs.json`` (github eth-easl/sailor@cf2c8e3, see its README) is one plan:
a pipeline whose stage s has ``dp`` replicas, replica j on a node slice of a GPU kind with a
tensor-parallel degree; ``real`` seconds per iteration and ``max_mem`` peak bytes were measured.
A run becomes a ``HeteroPlan`` on a ``PooledCluster`` from its own fields only:

- replica j of every stage forms pipeline j; identical pipelines form one replica group; each
  replica runs gbs / (mbs x dp) micro-batches (as the run did);
- Sailor counts the embedding and the LM head as layers (26 for OPT-350M, 34 for
  GPT-Neo-2.7B): the first stage's count less one and the last stage's less one are its
  transformer layers;
- the model: the run's folder names it (``OPT-350``, ``GPT-NEO``; a folder naming another model
  is skipped), else (``mit/N2/...``, a folder of several models) its layer count does;
  the shapes are those Sailor's launch script passes to Megatron-DeepSpeed (OPT-350M: 24 layers,
  hidden 1024, 16 heads; GPT-Neo-2.7B: 32 layers, hidden 2560, 32 heads), sequence 2048,
  GPT-2 BPE vocabulary (50257) padded to a multiple of 128 x tp (Megatron's
  ``_vocab_size_with_padding``), a separate LM head;
- the software: ``hardware_specs/stacks/megatron-deepspeed.yaml`` (gradients all-reduced once
  after the last micro-batch, materialised attention scores, synchronous TP all-reduces) and
  the launch script's and fork's settings: fp32 weights and gradients (neither --fp16 nor
  --bf16) with TF32 GEMMs, ZeRO 0, no recomputation, no gradient-accumulation fusion, the fp32
  scores masked in place and soft-maxed by PyTorch's ops with no scale op (``SOFTMAX_FUSION``,
  ``SOFTMAX_SCALE_PASS``), and the fork's DeepSpeed pipeline engine, whose stage-boundary
  sends and receives block one after the other (``PIPE_EXCHANGE_BLOCKING``);
- the hardware: ``GH-96`` is the Alps GH200 node (``alps-gh200``: 4 GH200 per node, NVLink
  150 GB/s per pair, one 200 Gb/s Slingshot NIC per GPU; CSCS docs); slices of different sizes
  are separate pools (``alps-gh200-x2``, ``alps-gh200-x4``), a node apart. ``Titan-RTX``,
  ``RTX-3090`` and ``RTX-2080`` are the GPUs of those names; Sailor's cluster config gives its
  ``RTX-2080`` 11 GiB (basic_cluster_config.json ``mem_per_gpu`` 11811160064), the memory of
  the RTX 2080 Ti (the RTX 2080 has 8 GB, less than the 9.4 GB N4_D4 measured on it), so
  ``rtx-2080-ti`` is used. Their node slice is the run's (2 or 8 GPUs), joined by PCIe.

The university cluster's network is not stated. It is an input, ``inter_node_gbps`` (Gb/s per
node, shared by the node slice's GPUs; default ``DEFAULT_INTER_NODE_GBPS``), with
``inter_node_latency_us``. Turing GPUs (Titan RTX, RTX 2080 Ti) rest on the unfitted Turing
prior (``hardware_specs/efficiency/turing.yaml``) and the RTX 3090 on the ampere model fitted on
A100 runs: every such number says so (``efficiency_fitted: false`` / ``assumptions``).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from hardware_specs.catalog import load_cluster, load_gpu, load_stack
from simulator.stack_defaults import stack_config_fields
from hardware_specs.cluster_spec import ClusterSpec, NetworkTier
from hardware_specs.errors import InputError, json_int, not_a_file, shown, unique_keys
from hardware_specs.pools import Pool, PooledCluster
from model_specs.model_spec import ModelSpec
from simulator.heterogeneous import HeteroPlan, ReplicaGroup, StagePlacement, simulate_heterogeneous

#: Gb/s per node of the university cluster's network (not stated by the source): 1 Gb/s
#: Ethernet. The runs' own measured gradient all-reduce times (``red_grads``, not the
#: iteration times validated here) imply 0.8-1.0 Gb/s per node: N4_D4 reduces 4 fp32 replicas
#: of OPT-350M at tp 8 (2 x 3/4 x 204 MB per GPU, 8 GPUs per NIC) in 21.6 s, N6_D6 six in 22.6 s.
DEFAULT_INTER_NODE_GBPS = 1.0
#: one-message latency of NCCL over TCP sockets on such a network, microseconds
DEFAULT_INTER_NODE_LATENCY_US = 50.0
#: metrics compared, per run
METRICS = ("iter_time_s", "peak_memory_bytes")
#: row keys of --json
ROW_KEYS = ("id", "metric", "status", "predicted", "measured", "rel_error", "reason", "efficiency_fitted",
            "assumptions")

#: Sailor's GPU kinds -> catalog GPU (consumer cards: their server slice is built here)
CONSUMER_GPUS = {"Titan-RTX": "titan-rtx", "RTX-2080": "rtx-2080-ti", "RTX-3090": "rtx-3090"}
#: Sailor's GPU kinds -> catalog cluster (whole nodes of a known system)
SYSTEMS = {"GH-96": "alps-gh200"}
#: architectures of Sailor's launch arguments (run_opt.slurm GPT_ARGS; training_config_gpt_neo27.json)
ARCHITECTURES = {
    # Sailor's layers apply no dropout to the attention probabilities (megatron/model/opt_model.py
    # and gpt_neo_model.py: the softmax output goes straight into the bmm); its OPT layer has its
    # residual dropouts commented out, its GPT-Neo layer keeps them (resid_dropout, mlp drop)
    "OPT-350": dict(name="opt-350m", num_layers=24, hidden_size=1024, num_heads=16, hidden_dropout=False),
    "GPT-NEO": dict(name="gpt-neo-2.7b", num_layers=32, hidden_size=2560, num_heads=32, hidden_dropout=True),
}
GPT2_VOCAB = 50257
STACK = "megatron-deepspeed"
#: fp32 training whose GEMMs cuBLAS may run in TF32: the runs' image, nvcr.io/nvidia/pytorch:24.10
#: (sailor Dockerfile), sets TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (MONAI, docs/source/
#: precision_accelerating.md: "the [NGC] container includes a layer ENV
#: TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1"); Turing GPUs, without TF32, run fp32
DTYPE = "tf32"
#: fp32 training: the gradients the DeepSpeed engine all-reduces are fp32 (the stack file's 2
#: bytes describe its fp16 runs)
GRAD_REDUCE_BYTES = 4.0
#: Sailor's fork comments the fused weight-gradient accumulation out
#: (third_party/Megatron-DeepSpeed/megatron/core/tensor_parallel/layers.py, "TODO: temporary commented")
GRAD_ACCUMULATION_FUSION = False
#: Megatron's FusedScaleMaskSoftmax runs its fused kernel on 16-bit inputs only
#: (megatron/model/fused_softmax.py is_kernel_available: ``self.input_in_float16``): these fp32
#: runs take the unfused path (masked_fill, then torch's softmax)
SOFTMAX_FUSION = False
#: and scale none: Sailor's attention layers build ``FusedScaleMaskSoftmax`` with ``coeff = None``
#: (third_party/Megatron-DeepSpeed/megatron/model/opt_model.py and gpt_neo_model.py, with
#: ``norm_factor = 1.0`` in the score ``baddbmm``), so ``forward_torch_softmax`` runs
#: ``attention_mask_func``'s ``masked_fill_`` in place on the score view, then the softmax: no
#: scale op, and autograd's ``CopySlices`` around the mask's backward
SOFTMAX_SCALE_PASS = False
#: the image replaces DeepSpeed 0.16.5's pipeline engine and p2p with the fork's (sailor
#: Dockerfile: COPY deepspeed/pipe_engine.py, deepspeed/p2p.py): ``p2p.send``/``recv`` assert
#: ``async_op == False`` and call ``dist.send``/``dist.recv``, and DeepSpeed's ``TrainSchedule``
#: puts ``SendGrad`` + ``RecvActivation`` (and ``RecvGrad`` + ``SendActivation``) in one step, so
#: every stage boundary costs a stage two transfers one after the other
PIPE_EXCHANGE_BLOCKING = True


def read_runs(path) -> list[dict]:
    """The runs of a Sailor-format JSON file ({"runs": [...]} or a list); one-line errors."""
    p = Path(path)
    if not p.is_file():
        raise InputError("PATH", not_a_file(path), "check the path, or omit PATH for the bundled runs")
    try:
        data = json.loads(p.read_text(), parse_int=json_int, object_pairs_hook=unique_keys)
    except InputError as exc:
        raise InputError("PATH", f"{path}: {exc.message}", exc.fix) from None
    except json.JSONDecodeError as exc:
        raise InputError("PATH", f"malformed JSON in {path} at line {exc.lineno}: {exc.msg}", "fix the file") from None
    except UnicodeDecodeError:
        raise InputError("PATH", f"{path} is not UTF-8 text", "give the sailor_runs.json file") from None
    except RecursionError:
        raise InputError("PATH", f"{path} nests values too deeply", "give the sailor_runs.json file") from None
    runs = data.get("runs") if isinstance(data, dict) else data
    if not isinstance(runs, list) or not runs:
        raise InputError("PATH", f"{path} holds no list of runs", "give a file with {\"runs\": [...]}")
    return runs


#: the largest measurement a run may state: a day per iteration, a petabyte of memory
MEASURED_LIMITS = {"real": 86400.0, "max_mem": 2.0**50}
#: the smallest plausible measurement of each: a training iteration of a microsecond or a peak of
#: less than a byte is damage (its relative error printed as inf)
MEASURED_MINIMA = {"real": 1e-6, "max_mem": 1.0}


def _number(run: dict, key: str, rid: str, positive=True) -> float:
    v = run.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
        raise ValueError(f"{key} is {v!r}, not a positive number")
    if key in MEASURED_LIMITS and v > MEASURED_LIMITS[key]:
        raise ValueError(f"{key} is {v!r}, above the largest plausible measurement {MEASURED_LIMITS[key]:g}")
    if positive and key in MEASURED_MINIMA and v < MEASURED_MINIMA[key]:
        raise ValueError(f"{key} is {v!r}, below the smallest plausible measurement {MEASURED_MINIMA[key]:g}")
    return float(v)


def _whole_number(run: dict, key: str, rid: str) -> int:
    """A count (micro-batch size, global batch): a positive whole number, or ValueError."""
    v = _number(run, key, rid)
    if v != int(v) or v > 2**53:
        raise ValueError(f"{key} is {run.get(key)!r}, not a whole number of sequences")
    return int(v)


#: the folders of Sailor's validation set that name a system, not a model (README: ``mit/N2/...``
#: holds plans of several models, told apart by their layer counts; ``clariden/<model>/N4/...``)
SYSTEM_FOLDERS = ("mit", "clariden")
#: a folder of nodes (``N4``): the folder above it names the model, unless it is a system's
NODES_FOLDER = re.compile(r"N\d+")


def named_model_folder(path: str) -> str | None:
    """The folder a run's ``_file`` path names its model by: the one above its ``N<nodes>``
    folder (``clariden/OPT-350/N4/plan.json`` -> ``OPT-350``), None when that folder is a
    system's (``SYSTEM_FOLDERS``) or the path has no such folder."""
    parts = str(path).split("/")
    for i in range(len(parts) - 2, 0, -1):
        if NODES_FOLDER.fullmatch(parts[i]):
            above = parts[i - 1]
            return None if above.lower() in SYSTEM_FOLDERS else above
    return None


def architecture(run: dict, total_layers: int) -> tuple[str, dict]:
    """(key, architecture) of a run: from its folder name, else (a folder naming no model, as the
    university cluster's ``mit/N2/...``) from its layer count; ValueError for a folder naming a
    model not in ``ARCHITECTURES`` (a LLAMA run was predicted as GPT-Neo-2.7B by its layers)."""
    name = str(run.get("_file", ""))
    for key, arch in ARCHITECTURES.items():
        if f"/{key}/" in name.upper().replace("OPT-350M", "OPT-350"):
            if arch["num_layers"] + 2 != total_layers:
                raise ValueError(f"the folder names {key} ({arch['num_layers'] + 2} layers with embedding and head) "
                                 f"but the plan lists {total_layers}: inconsistent at the source")
            return key, arch
    folder = named_model_folder(name)
    if folder is not None:
        raise ValueError(f"the folder names the model {folder!r}, which has no architecture here "
                         f"(known: {', '.join(ARCHITECTURES)})")
    for key, arch in ARCHITECTURES.items():
        if arch["num_layers"] + 2 == total_layers:
            return key, arch
    raise ValueError(f"{total_layers} layers (with embedding and head) match no known architecture")


def model_for(arch: dict, tp: int) -> ModelSpec:
    """The run's model with Megatron's padded vocabulary for tensor-parallel degree ``tp``."""
    multiple = 128 * tp
    vocab = int(math.ceil(GPT2_VOCAB / multiple) * multiple)
    h = arch["hidden_size"]
    return ModelSpec(name=arch["name"], num_layers=arch["num_layers"], hidden_size=h, num_heads=arch["num_heads"],
                     num_kv_heads=arch["num_heads"], ffn_hidden_size=4 * h, vocab_size=vocab, seq_len=2048,
                     gated_mlp=False, tied_embeddings=False, attention_dropout=False,
                     hidden_dropout=arch["hidden_dropout"],
                     source="eth-easl/sailor@cf2c8e3 run_opt.slurm / training configs; GPT-2 BPE vocabulary")


def _slice_cluster(kind: str, slice_gpus: int, inter_node_gbps: float, latency_us: float,
                   intra_node_gb_per_s: float | None = None) -> ClusterSpec:
    """A consumer GPU's node slice: PCIe inside (the GPU profile's link, or
    ``intra_node_gb_per_s``), the node's network shared by the slice's GPUs outside."""
    gpu = load_gpu(CONSUMER_GPUS[kind])
    intra = gpu.scaleup_bw_bytes_per_s if intra_node_gb_per_s is None else intra_node_gb_per_s * 1e9
    return ClusterSpec(
        name=f"{gpu.name}-x{slice_gpus}", gpu=gpu, gpus_per_node=slice_gpus,
        scaleup=NetworkTier("pcie", intra, 5e-6),
        scaleout=NetworkTier("ethernet", inter_node_gbps * 1e9 / 8 / slice_gpus, latency_us * 1e-6),
        rail_optimized=False, source="the university cluster's network is an input (--inter-node-gbps)",
        description=f"{slice_gpus} {gpu.name} per node, PCIe, {inter_node_gbps:g} Gb/s per node")


#: the largest layer index a run may list (a model of a million layers is no model)
MAX_LAYER_INDEX = 1_000_000


def run_inputs(run: dict, inter_node_gbps: float = DEFAULT_INTER_NODE_GBPS,
               inter_node_latency_us: float = DEFAULT_INTER_NODE_LATENCY_US, intra_node_gb_per_s: float | None = None):
    """(model, cluster, plan, assumptions) of one Sailor run; ValueError says why it cannot be."""
    rid = str(run.get("_file", "?"))
    pipes = run.get("pipeline_list")
    if not isinstance(pipes, list) or len(pipes) != 1:
        raise ValueError("needs exactly one entry in pipeline_list")
    pipe = pipes[0]
    if not isinstance(pipe, dict):
        raise ValueError("the pipeline_list entry is not a JSON object")
    layers = pipe.get("layers_per_stage")
    stages = pipe.get("tmp_per_stage")
    dp = pipe.get("dp")
    if not (isinstance(layers, list) and isinstance(stages, list) and isinstance(dp, list)) or \
            not (len(layers) == len(stages) == len(dp)) or not layers:
        raise ValueError("layers_per_stage, tmp_per_stage and dp must be lists of one entry per stage")
    S = len(layers)
    stated = pipe.get("num_stages")
    if stated is not None and (isinstance(stated, bool) or stated != S):
        raise ValueError(f"num_stages {stated!r} but {S} stages listed in layers_per_stage")
    if any(isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < MAX_LAYER_INDEX
           for stage in layers if isinstance(stage, list) for x in stage):
        # only the counts are used (the public file repeats index 29 where 19 belongs), but an
        # index must be a layer's: a whole number from 0
        raise ValueError(f"layers_per_stage holds an entry that is not a layer index (whole numbers 0 to "
                         f"{MAX_LAYER_INDEX - 1:,})")
    if any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in dp):
        raise ValueError(f"dp holds {dp!r}: data-parallel degrees are whole numbers >= 1")
    if len(set(dp)) != 1:
        raise ValueError(f"stages have different data-parallel degrees {dp}")
    d = int(dp[0])
    counts = [len(l) if isinstance(l, list) else -1 for l in layers]
    if any(c < 1 for c in counts) or any(not isinstance(s, list) or len(s) != d for s in stages):
        raise ValueError("every stage needs its layers and one entry per replica")
    transformer = list(counts)
    transformer[0] -= 1           # the embedding, counted as a layer by Sailor
    transformer[-1] -= 1          # the LM head
    if any(c < 1 for c in transformer):
        raise ValueError("a stage holds no transformer layer")
    key, arch = architecture(run, sum(counts))
    mbs = _whole_number(run, "mbs", rid)
    gbs = _whole_number(run, "gbs", rid)
    if gbs % (mbs * d):
        raise ValueError(f"gbs {gbs} is not a multiple of mbs x dp = {mbs * d}")
    m = gbs // (mbs * d)
    # replica j of every stage: (kind, node slice, tp)
    chains = []
    for j in range(d):
        chain = []
        for s in range(S):
            entry = stages[s][j]
            try:
                vms, tp = entry[0], entry[1]
                kind, slice_gpus = str(vms[0][0]), vms[0][1]
            except (TypeError, ValueError, IndexError, KeyError, OverflowError):     # not [[[kind, gpus, zone]], tp]
                raise ValueError(f"cannot read stage {s} replica {j}: {entry!r}") from None
            for what, value in (("tp", tp), ("GPU count", slice_gpus)):
                # as dp and mbs: int() would read 4.9, '4' and true as 4, 4 and 1 and score
                # another run than the one the file states
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"stage {s} replica {j}: {what} {value!r} is not a whole number")
            if tp < 1 or slice_gpus < 1:
                raise ValueError(f"stage {s} replica {j}: tp {tp} and {slice_gpus} GPUs must be >= 1")
            if slice_gpus % tp:
                raise ValueError(f"stage {s} replica {j}: tp {tp} does not divide its {slice_gpus} GPUs")
            if kind not in CONSUMER_GPUS and kind not in SYSTEMS:
                raise ValueError(f"unknown GPU kind {kind!r}")
            chain.append((kind, slice_gpus, tp))
        chains.append(tuple(chain))
    tps = {c[2] for chain in chains for c in chain}
    if len(tps) != 1:
        raise ValueError(f"tensor-parallel degrees differ across stages {sorted(tps)}: one padded vocabulary")
    model = model_for(arch, tps.pop())
    # pools: one per (kind, slice), named after both (every GH200 slice was 'alps-gh200', so a run
    # with GH200 slices of two sizes was refused as a pool named twice); GPUs = what the run places there
    pool_of = {}
    gpus = {}
    for chain in chains:
        for kind, slice_gpus, tp in chain:
            name = f"{SYSTEMS.get(kind) or CONSUMER_GPUS[kind]}-x{slice_gpus}"
            pool_of[(kind, slice_gpus)] = name
            gpus[name] = gpus.get(name, 0) + slice_gpus
    pools = []
    for (kind, slice_gpus), name in pool_of.items():
        if kind in SYSTEMS:
            cluster = load_cluster(SYSTEMS[kind])
        else:
            cluster = _slice_cluster(kind, slice_gpus, inter_node_gbps, inter_node_latency_us, intra_node_gb_per_s)
        pools.append(Pool(name, cluster, gpus[name]))
    pooled = PooledCluster(name=f"sailor:{rid}", pools=tuple(pools))
    groups = {}
    for chain in chains:
        groups[chain] = groups.get(chain, 0) + 1
    fields_ = stack_config_fields(load_stack(STACK), DTYPE)
    own = ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "flash_attention", "attention_kernel",
           "grad_accumulation_fusion", "grad_reduce_bytes")
    plan = HeteroPlan(
        groups=tuple(ReplicaGroup(stages=tuple(StagePlacement(pool_of[(k, sg)], tp, n)
                                               for (k, sg, tp), n in zip(chain, transformer)),
                                  replicas=count, micro_batches=m) for chain, count in groups.items()),
        micro_batch=mbs, global_batch=gbs, zero_stage=0, recompute="none", sequence_parallel=False, dtype=DTYPE,
        **{k: fields_[k] for k in own if k in fields_},
        software={**{k: v for k, v in fields_.items() if k not in own and k not in ("dtype", "sequence_parallel")},
                  "softmax_fusion": SOFTMAX_FUSION, "softmax_scale_pass": SOFTMAX_SCALE_PASS,
                  "pipe_exchange_blocking": PIPE_EXCHANGE_BLOCKING})
    assert plan.settings.grad_reduce_bytes == GRAD_REDUCE_BYTES and not plan.settings.grad_accumulation_fusion
    assumptions = [f"model {model.name} as Megatron-DeepSpeed builds it (vocab {model.vocab_size}, no attention "
                   "dropout" + ("" if model.hidden_dropout else ", no residual dropout") + ")",
                   f"stack {STACK}: fp32 weights with TF32 GEMMs (NGC image), ZeRO 0, fp32 gradients all-reduced "
                   "after the backward, scores materialised (no fused attention; fp32 mask in place and softmax, "
                   "no scale op), TP all-reduces exposed, stage-boundary send and receive blocking one after the other "
                   "(DeepSpeed's pipeline engine)"]
    if any(k in CONSUMER_GPUS for chain in chains for k, _, _ in chain):
        intra = "each card's PCIe link" if intra_node_gb_per_s is None else f"{intra_node_gb_per_s:g} GB/s"
        assumptions.append(f"network not stated: {inter_node_gbps:g} Gb/s per node, {inter_node_latency_us:g} us "
                           f"(--inter-node-gbps); inside a node {intra}")
    system_slices = {}
    for kind, slice_gpus in pool_of:
        if kind in SYSTEMS:
            system_slices.setdefault(kind, []).append(slice_gpus)
    for kind, sizes in system_slices.items():
        if len(sizes) > 1:
            assumptions.append(f"{kind} slices of {' and '.join(map(str, sorted(sizes)))} GPUs are separate pools: "
                               f"a stage boundary between them crosses {SYSTEMS[kind]}'s scale-out network")
    if any(k == "RTX-2080" for chain in chains for k, _, _ in chain):
        assumptions.append("RTX-2080 read as rtx-2080-ti (11 GiB in Sailor's cluster config)")
    if any(k == "RTX-3090" for chain in chains for k, _, _ in chain):
        assumptions.append("rtx-3090 on the ampere efficiency model fitted on A100 runs")
    return model, pooled, plan, assumptions


def _check_input(name: str, value, allow_zero: bool = False, low: float = 0.0, high: float = 1e9) -> None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(name, f"expected a number, got {shown(value)}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise InputError(name, f"must be a positive finite number, got {shown(value)}", "give the value in the option's unit")
    if (v > 0 and v < low) or v > high:       # the network tier refuses such links (cluster_spec's bounds)
        raise InputError(name, f"{value!r} is outside the plausible range {low:g} to {high:g}",
                         "check the number and its unit")


#: the run's key holding each metric's measurement
MEASURED_KEYS = {"iter_time_s": "real", "peak_memory_bytes": "max_mem"}


def _measurements(run: dict, rid: str) -> tuple[dict, dict]:
    """({metric: measured value}, {metric: why it has none}) of a run: a run without ``max_mem``
    still has its iteration time scored (one ValueError lost both). ValueError when neither
    metric has a measurement (the first one's reason)."""
    measured, unmeasured = {}, {}
    for metric, key in MEASURED_KEYS.items():
        try:
            measured[metric] = _number(run, key, rid)
        except ValueError as exc:
            unmeasured[metric] = str(exc)
    if not measured:
        raise ValueError(unmeasured[METRICS[0]])
    return measured, unmeasured


def run_id(run, position: int) -> str:
    """A run's id: its ``_file``; without one ``?#<position in the file, from 1>``, so that two
    such runs are two ids (both were scored as ``?``)."""
    if isinstance(run, dict) and "_file" in run:
        return str(run["_file"])
    return f"?#{position}"


def _skipped(rid: str, metric: str, reason: str) -> dict:
    """The record of a metric that is not scored, with the reason."""
    return {"id": rid, "metric": metric, "status": "skipped", "predicted": None, "measured": None,
            "rel_error": None, "reason": reason, "efficiency_fitted": None, "assumptions": []}


def validate_runs(runs: list[dict], inter_node_gbps: float = DEFAULT_INTER_NODE_GBPS,
                  inter_node_latency_us: float = DEFAULT_INTER_NODE_LATENCY_US, intra_node_gb_per_s: float | None = None,
                  progress=None) -> list[dict]:
    """One record per run and metric (``ROW_KEYS``); a run that cannot be modelled gets status
    ``skipped`` and the reason."""
    _check_input("--inter-node-gbps", inter_node_gbps, low=1e-3)          # 1 Mb/s
    _check_input("--inter-node-latency-us", inter_node_latency_us, allow_zero=True, high=1e7)   # 10 s
    if intra_node_gb_per_s is not None:
        _check_input("--intra-node-gb-per-s", intra_node_gb_per_s, low=1e-3)   # 1 MB/s
    records = []
    seen: dict[tuple, str] = {}
    listed: set[str] = set()
    for position, run in enumerate(runs, start=1):
        rid = run_id(run, position)
        try:
            if not isinstance(run, dict):
                raise ValueError("not a JSON object")
            if rid in listed:          # a copied run was scored twice
                raise ValueError(f"run {rid} is listed twice; the first is scored")
            listed.add(rid)
            measured, unmeasured = _measurements(run, rid)
            model, cluster, plan, assumptions = run_inputs(run, inter_node_gbps, inter_node_latency_us,
                                                           intra_node_gb_per_s)
            report = simulate_heterogeneous(model, cluster, plan)
        except (ValueError, InputError) as exc:
            for metric in METRICS:
                records.append(_skipped(rid, metric, str(exc)))
            if progress:
                progress()
            continue
        if not unmeasured:
            twin = seen.get((measured["iter_time_s"], measured["peak_memory_bytes"]))
            if twin is not None:
                assumptions = assumptions + [f"measured numbers identical to {twin}: probably a copy error at the source"]
            seen[(measured["iter_time_s"], measured["peak_memory_bytes"])] = rid
        prior = bool(report.prior_pools)
        if prior:
            assumptions = assumptions + [f"rests on the unfitted efficiency prior of {', '.join(report.prior_pools)}"]
        predicted = {"iter_time_s": report.step_time_s, "peak_memory_bytes": report.memory_bytes}
        for metric in METRICS:
            if metric in unmeasured:
                records.append(_skipped(rid, metric, unmeasured[metric]))
                continue
            records.append({"id": rid, "metric": metric, "status": "ok", "predicted": predicted[metric],
                            "measured": measured[metric],
                            "rel_error": predicted[metric] / measured[metric] - 1.0, "reason": None,
                            "efficiency_fitted": not prior, "assumptions": list(assumptions)})
        if progress:
            progress()
    return records


def summary(records: list[dict]) -> list[dict]:
    """Mean and worst |error| per system (clariden GH200 / mit mixed) and metric, percent."""
    groups: dict[tuple, list[float]] = {}
    priors: dict[tuple, bool] = {}
    for r in records:
        if r["status"] != "ok":
            continue
        system = "gh200 (clariden)" if "/clariden/" in r["id"] else ("mixed (mit)" if "/mit/" in r["id"] else "other")
        for key in ((system, r["metric"]), ("all", r["metric"])):
            groups.setdefault(key, []).append(abs(r["rel_error"]) * 100.0)
            priors[key] = priors.get(key, False) or not r["efficiency_fitted"]
    out = []
    for (system, metric), errs in sorted(groups.items()):
        out.append({"runs": system, "metric": metric, "n": len(errs), "mean_abs_err_pct": sum(errs) / len(errs),
                    "worst_abs_err_pct": max(errs), "efficiency_fitted": not priors[(system, metric)]})
    return out
