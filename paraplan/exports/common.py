"""What every framework export shares: the plan as one validated dict, its one-line summary,
and the plan's pipeline stage layout.

``plan_fields`` accepts a row of ``paraplan.api.simulate`` / ``paraplan.api.plan``, a one-row
DataFrame, a ``StepReport``, a ``planners.PlanResult`` (its winner) or a plain dict of
``ParallelConfig`` fields plus ``model`` and ``seq_len``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields as dc_fields
from typing import Any, Mapping

from hardware_specs.catalog import load_cluster, load_gpu
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.errors import InputError
from hardware_specs.mfu_reference import mfu_pct, reference_dtype
from model_specs.catalog import load_model
from model_specs.model_spec import ModelSpec
from simulator.parallel_config import ParallelConfig
from simulator.report import StepReport
from simulator.stage_layout import chunk_layers  # noqa: F401 - the launch's layout is the step model's

CONFIG_FIELDS = tuple(f.name for f in dc_fields(ParallelConfig))


def plan_fields(plan_row: Any, cluster_hosts: Callable[[str], int | None] | None = None) -> dict:
    """The plan as a dict: every ``ParallelConfig`` field (validated; the stage layout's
    ``first_stage_layers`` / ``last_stage_layers`` among them, 0 = the step model's rule),
    ``model`` (a ``ModelSpec``), ``model_name``, ``seq_len``, ``n_gpus``, ``gpus_per_host`` (of
    the cluster the row names, or the row's own; None = unknown), and the prediction
    fields it carries (``step_time_s``, ``tokens_per_s``, ``mfu``, ``efficiency_fitted``, ...).
    A ZeRO-2 row priced as ZeRO-1 (``zero2_grad_last_microbatch``) is ZeRO-1 here.
    ``cluster_hosts``: the GPUs per host of a catalog cluster name (default
    ``cluster_gpus_per_host``, which loads the cluster file); a caller reading many rows of one
    cluster passes it memoised, so the file is read once, not once per row."""
    row = _row(plan_row)
    if isinstance(row.get("config"), Mapping):
        row = {**row, **row["config"]}
    config_kwargs = {k: _plain(row[k]) for k in CONFIG_FIELDS if k in row and _present(row[k])}
    for required in ("tp", "pp", "micro_batch", "global_batch"):
        if required not in config_kwargs:
            raise InputError(required, "missing from the plan row", "pass a full plan row (it names every degree)")
    if "dp" not in config_kwargs:
        n = row.get("n_gpus") or row.get("gpus")
        if n is None:
            raise InputError("dp", "missing from the plan row", "add dp (or n_gpus)")
        config_kwargs["dp"] = int(n) // (config_kwargs["tp"] * config_kwargs["pp"] * int(config_kwargs.get("cp", 1)))
    if config_kwargs.get("zero_stage") == 2 and config_kwargs.get("zero2_grad_last_microbatch"):
        # priced as ZeRO-1 (the stack keeps ZeRO-2's gradients whole to the last micro-batch, its
        # only gradient sharding a distributed optimizer): launched as what was priced
        config_kwargs["zero_stage"] = 1
    config = ParallelConfig(**config_kwargs)
    out = config.as_dict()
    spec = _model(row.get("model"))
    seq_len = row.get("seq_len")
    if not _present(seq_len):
        tokens = row.get("global_batch_tokens") or row.get("tokens_per_step")
        seq_len = int(round(tokens / config.global_batch)) if _present(tokens) else (spec.seq_len if spec else None)
    if seq_len is None:
        raise InputError("seq_len", "missing from the plan row", "add seq_len (tokens per sequence)")
    out["seq_len"] = int(seq_len)
    out["model"] = spec
    out["model_name"] = spec.name if spec is not None else str(row.get("model") or "")
    out["n_gpus"] = config.n_gpus
    mfu_cols = [k for k in row if isinstance(k, str) and k.startswith("mfu_") and k.endswith("_pct")]
    for key in ("cluster", "gpu", "step_time_s", "tokens_per_s", "mfu", *mfu_cols, "memory_gib", "efficiency_fitted"):
        if key in row and _present(row[key]):
            out[key] = _plain(row[key])
    out["gpus_per_host"] = _gpus_per_host(row, cluster_hosts or cluster_gpus_per_host)
    return out


def cluster_gpus_per_host(name: str) -> int | None:
    """GPUs per host of the catalog cluster ``name`` (``ClusterSpec.launch_gpus_per_host``); None
    for a name the catalog does not know."""
    try:
        return load_cluster(name).launch_gpus_per_host
    except InputError:
        return None


def _gpus_per_host(row: Mapping, cluster_hosts: Callable[[str], int | None]) -> int | None:
    """GPUs per host of the plan's cluster: the row's ``gpus_per_host``, else the catalog
    cluster's it names (``cluster_hosts``); None when unknown."""
    if _present(row.get("gpus_per_host")):
        return int(row["gpus_per_host"])
    cluster = row.get("cluster")
    if isinstance(cluster, ClusterSpec):
        return cluster.launch_gpus_per_host
    if isinstance(cluster, str) and cluster:
        return cluster_hosts(cluster)
    return None


def launch_hosts(p: dict) -> tuple[int, int] | None:
    """``(nnodes, nproc_per_node)`` of the plan's ``torchrun`` launch: the plan's GPUs over hosts
    of the cluster's ``gpus_per_host`` (a plan smaller than one host runs on one); None when the
    cluster is unknown or the GPUs do not fill whole hosts."""
    per_host, n = p.get("gpus_per_host"), int(p["n_gpus"])
    if not per_host:
        return None
    if n <= per_host:
        return 1, n
    if n % per_host:
        return None
    return n // per_host, int(per_host)


def torchrun_head(p: dict) -> str:
    """``torchrun --nnodes ... --nproc-per-node ...`` for the plan; placeholders (``N``, ``G``)
    only where the cluster does not say, and the rendezvous endpoint, which no plan knows,
    for a launch on more than one host."""
    hosts = launch_hosts(p)
    if hosts is None:
        return "torchrun --nnodes N --nproc-per-node G --rdzv-backend c10d --rdzv-endpoint HOST:PORT"
    nnodes, nproc = hosts
    if nnodes == 1:
        return f"torchrun --nnodes 1 --nproc-per-node {nproc}"
    return f"torchrun --nnodes {nnodes} --nproc-per-node {nproc} --rdzv-backend c10d --rdzv-endpoint HOST:PORT"


def require_model(p: dict, framework: str) -> ModelSpec:
    """The plan's model; an export builds the model, so a plan without one is refused."""
    if p["model"] is None:
        raise InputError("model", f"the {framework} export builds the model, but the plan names no catalog model "
                         f"({p['model_name'] or 'none'!s})", "pass a row whose model is a catalog name or a ModelSpec")
    return p["model"]


def with_stack_fields(row: Mapping, software: Mapping | None) -> dict:
    """A ranked plan row under the stack fields it was priced with, ``software`` per dtype
    (``PlanResult.software``, ``api.plan``'s ``.attrs["software"]``): a ranked row carries only
    its searched fields, and an export reads the rest (compile, FSDP resharding, recomputation).
    The row's own values win."""
    return {**dict((software or {}).get(str(row.get("dtype")), {})), **row}


def _row(plan_row: Any) -> dict:
    if hasattr(plan_row, "plans") and hasattr(plan_row, "seq_len"):   # a planners.PlanResult: its winner
        result = plan_row
        if len(result.plans) == 0:
            raise InputError("plan", "the search found no plan", "relax the request")
        winner = with_stack_fields(result.plans.iloc[0].to_dict(), getattr(result, "software", None))
        return {**winner, "model": result.model, "seq_len": result.seq_len,
                "cluster": result.cluster, "gpu": result.gpu}
    if isinstance(plan_row, StepReport):
        row = {**plan_row.as_dict(), **dict(plan_row.config)}
        row["seq_len"] = int(round(plan_row.tokens_per_step / plan_row.config["global_batch"]))
        return row
    if hasattr(plan_row, "to_dict"):      # pandas Series (or a one-row DataFrame)
        row = plan_row.to_dict()
        software = getattr(plan_row, "attrs", {}).get("software")
        if row and all(isinstance(v, dict) for v in row.values()):   # DataFrame.to_dict()
            if len(plan_row) != 1:
                raise InputError("plan", f"expected one plan, got {len(plan_row)} rows", "pass plans.iloc[0]")
            row = plan_row.iloc[0].to_dict()
        if isinstance(software, Mapping):     # an api.plan row: the stack fields it was priced with
            row = with_stack_fields(row, software)
        return row
    if isinstance(plan_row, Mapping):
        return dict(plan_row)
    raise InputError("plan", f"cannot read a plan from {type(plan_row).__name__}",
                     "pass a row of paraplan.api.plan/simulate, a StepReport or a dict")


def _model(model: Any) -> ModelSpec | None:
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, str) and model:
        try:
            return load_model(model)
        except InputError:
            return None                      # a name the catalog does not know
    return None


def _present(v: Any) -> bool:
    if v is None:
        return False
    return not (isinstance(v, float) and v != v)


def _plain(v: Any) -> Any:
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 0) == 0:
        return v.item()
    return v


def gpus_text(n: int) -> str:
    """``1 GPU``, ``64 GPUs``."""
    return f"{n} GPU{'' if n == 1 else 's'}"


def summary(p: dict) -> str:
    """One line naming the plan and its prediction (the first line of every export): groups
    separated by commas (degrees; batch; ZeRO, recompute, schedule, dtype; memory features)."""
    parts = [" ".join([f"dp={p['dp']} tp={p['tp']} pp={p['pp']}"] + [f"{k}={p[k]}" for k in ("vpp", "cp", "ep")
                                                                       if p[k] > 1])]
    parts.append(f"micro_batch={p['micro_batch']} global_batch={p['global_batch']} x {p['seq_len']} tokens")
    parts.append(f"zero={p['zero_stage']} recompute={p['recompute']} schedule={p['schedule']} dtype={p['dtype']}")
    # the memory features in use (recompute_num_layers, hybrid sharding, ...) are part of the plan too
    used = [f"{k}={','.join(map(str, v)) if isinstance(v, (tuple, list)) else _plain(v)}"
            for k, v in ((k, p.get(k)) for k in MEMORY_FEATURES)
            if _present(v) and v and v != _NOT_USED.get(k)]
    if used:
        parts.append(" ".join(used))
    head = f"{p['model_name'] or 'model'} on {gpus_text(p['n_gpus'])}"
    if p.get("gpu"):
        head += f" ({p['gpu']}{', ' + p['cluster'] if p.get('cluster') else ''})"
    pred = ""
    if "step_time_s" in p:
        pred = f"; predicted {p['step_time_s']:.2f} s/step"
        if "tokens_per_s" in p:
            pred += f", {p['tokens_per_s']:,.0f} tokens/s"
        mfu = _mfu_text(p)
        if mfu:
            pred += f", MFU {mfu}"
        if p.get("efficiency_fitted") is False:       # as the tables' * and footnote (paraplan.priors)
            pred += " (on an unfitted prior efficiency model: no measured run has checked it)"
    return f"paraplan plan: {head}: " + ", ".join(parts) + pred


def _mfu_text(p: dict) -> str:
    """The plan's MFU as every command shows it, ``45.6% of the bf16 peak`` (``paraplan.mfu``):
    from an ``mfu_<ref>_pct`` field, else the simulator's ``mfu`` (a fraction of the plan dtype's
    own peak) converted with the named GPU's peaks, else that fraction as it is."""
    for key, value in p.items():
        if key.startswith("mfu_") and key.endswith("_pct") and _present(value):
            return f"{float(value):.1f}% of the {key[len('mfu_'):-len('_pct')]} peak"
    if "mfu" not in p:
        return ""
    gpu_name = p.get("gpu")
    if gpu_name:
        try:
            gpu = load_gpu(str(gpu_name))
        except InputError:
            gpu = None
        if gpu is not None:
            return f"{float(mfu_pct(float(p['mfu']), str(p['dtype']), gpu)):.1f}% of the {reference_dtype(gpu)} peak"
    return f"{100 * float(p['mfu']):.1f}% of the {p['dtype']} peak"


def stage_layer_counts(num_layers: int, pp: int, vpp: int = 1, mtp_layers: int = 0,
                       first_stage_layers: int = 0, last_stage_layers: int = 0,
                       schedule: str | None = None) -> tuple[int, ...]:
    """Decoder layers of each model chunk the plan's pipeline runs, in layer order
    (``chunk_layers``' first half: the MTP modules not counted; 0 for a chunk holding only
    the embedding, only MTP modules or only the loss)."""
    return chunk_layers(num_layers, pp, vpp, mtp_layers, first_stage_layers, last_stage_layers, schedule)[0]


#: the memory features a plan may use (``ParallelConfig`` fields; 0 / empty = not used)
MEMORY_FEATURES = ("recompute_num_layers", "recompute_layers_decrement", "recompute_modules",
                   "offload_activation_layers", "offload_optimizer_fraction", "zero_shard_group", "pipeline_layout",
                   "loss_chunk_tokens", "optimizer_moment_bytes")
#: their values that mean "not used" (0 / empty otherwise)
_NOT_USED = {"optimizer_moment_bytes": 4.0}


def selective_recompute_modules(p: dict) -> tuple:
    """What a selective plan ``p`` recomputes as it was priced: its ``recompute_modules``, else the
    ``selective_modules`` of the stack it was priced on (Megatron's ``core_attn`` when the row
    does not say)."""
    return tuple(p.get("recompute_modules") or p.get("selective_modules") or ("core_attn",))


def refuse_memory_features(p: dict, release: str, supported: tuple = ()) -> None:
    """Raise ``InputError`` naming the first memory feature of plan ``p`` that ``release`` cannot
    run as planned (those in ``supported`` are handled by the caller)."""
    for name in MEMORY_FEATURES:
        if name in supported or not p.get(name) or p.get(name) == _NOT_USED.get(name):
            continue
        raise InputError(name, f"this {release} export does not write {name} (the plan uses {p[name]!r})",
                         f"plan without it (paraplan plan --no-memory-search / --no-hsdp), or emit megatron")


def refuse_kv_head_replication(p: dict, model: ModelSpec, release: str) -> None:
    """Raise ``InputError`` (field ``tp``) when plan ``p`` holds each key/value head whole on the
    tp / kv_heads ranks sharing it (tp does not divide the model's key/value heads, priced on a
    stack whose ``kv_head_replication`` is on, e.g. t5x-pathways-2022): ``release`` splits whole
    heads over tp (Megatron-Core, torchtitan, DeepSpeed's Megatron model code) or sub-shards them,
    so it cannot run the K/V layout the plan was priced with."""
    kv, tp = model.num_kv_heads, p["tp"]
    if model.mla is not None or kv % tp == 0 or tp % kv:
        return                      # whole heads split over tp, or a tp the framework's own checks refuse
    raise InputError("tp", f"tp={tp} holds each of {model.name}'s {kv} key/value head{'s' if kv > 1 else ''} "
                     f"whole on {tp // kv} ranks (priced replicated: the plan's stack replicates key/value heads), "
                     f"which {release} does not do",
                     f"plan on a stack that splits whole heads (--stack megatron-core), or choose tp dividing {kv}")
