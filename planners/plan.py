"""``plan``: the fastest parallel configurations of a model on a cluster that fit in memory.

    result = plan("llama3.1-405b", "dgx-h100", gpus=16384, global_batch_tokens=16 * 2**20)
    result.top(10)            # ranked table (see OUTPUT_COLUMNS)
    result.best_config        # the winner as a ParallelConfig
    result.stage_layers       # the winner's layers per (virtual) pipeline stage
    print(result.explain)     # why it wins, and what each pruning rule removed

Steps: enumerate and prune the space (``search_space``), score every survivor with the
simulator's step model in chunks (``vectorized``), keep what fits under HBM minus the headroom,
rank by tokens/s (the step time, as the batch is fixed), split the winner's layers over its
stages (``stage_assignment``) and write the explanation (``explain``). A request with no
valid or fitting configuration raises ``InputError`` saying what would make it feasible
(``infeasible``).
"""
from __future__ import annotations

import functools
import numbers
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from hardware_specs.catalog import efficiency_for_cluster, load_cluster, load_stack
from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.stack_spec import StackSpec
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.placement import placed_cluster
from hardware_specs.errors import InputError, as_given, shown, whole_number
from model_specs.catalog import load_model
from model_specs.model_spec import ModelSpec
from planners import infeasible
from planners.explain import explain_text, memory_feature_notes
from planners.refine import MAX_EXACT, TOP_EXACT, refine_exact
from planners.search_space import (DEFAULT_SCHEDULES, FIXABLE, RECOMPUTE_NAMES, SCHEDULE_NAMES,
                                   SPACE_CHUNK_ROWS, enumerate_base, largest_chunk_layers,
                                   SearchConstraints)
from planners.stage_assignment import StageAssignment, stage_assignment_for
from planners.space_scoring import kept_rows, score_space
from planners.time_pruning import FRONTIER_MIN_SHARE
from planners.vectorized import DEFAULT_CHUNK_ROWS, Evaluated, evaluate_space
from simulator import headroom
from simulator.parallel_config import MAX_GLOBAL_BATCH, MAX_GPUS, CPKind, ParallelConfig, Schedule
from simulator.report import TIME_PARTS
from simulator.stack_defaults import (check_stack_cp_kind, run_cp_kind, searched_expert_tp, stack_config_fields,
                                      stack_cp_kind)
from simulator.step_model import LAYER_KEY_FIELDS

GIB = 2**30
#: fitting plans a search keeps by default (``plan(max_plans=...)``), besides both frontiers: the
#: ranked table a user reads is its top, and every plan kept must be modelled and timed, so a
#: search keeping fewer needs fewer of its rows modelled (DeepSeek-V3 over 1,024-4,096 H100 on 2
#: cores: 200,000 plans ~16 s, 50,000 ~10 s, 20,000 ~8.6 s; docs/search_speed.md). A study that
#: needs every fitting plan asks for them: ``max_plans=None`` (notebooks/llama3_70b_on_256_h100.py).
MAX_PLANS = 20_000
#: the ranked table's columns (units in the names; mfu is a fraction of the dtype's peak).
OUTPUT_COLUMNS = ("n_gpus", "dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "global_batch", "zero_stage",
                  "zero_shard_group", "recompute", "recompute_num_layers", "recompute_layers_decrement",
                  "offload_activation_layers", "sequence_parallel", "schedule", "cp_kind", "dtype", "step_time_s",
                  "tokens_per_s",
                  "tokens_per_s_per_gpu", "mfu", "memory_gib", "headroom_gib")
#: what machine-readable plan rows add: host memory, whether the pipeline time is the exact
#: makespan (else the ranking estimate), and the step by part (``simulator.report.TIME_PARTS``)
DETAIL_COLUMNS = ("host_memory_gib", "pipeline_exact") + TIME_PARTS
_CONFIG_COLUMNS = ("dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "global_batch", "zero_stage",
                   "recompute", "sequence_parallel", "schedule", "dtype")
_ALIASES = {"zero": "zero_stage", "mb": "micro_batch", "micro-batch": "micro_batch", "sp": "sequence_parallel",
            "sequence-parallel": "sequence_parallel", "micro_batch_size": "micro_batch"}


@dataclass(frozen=True)
class PlanResult:
    """The outcome of one search.

    Attributes:
        model, cluster, gpu: names.
        gpus: the GPU counts searched, inclusive (lo, hi).
        global_batch: sequences per step; seq_len: tokens per sequence.
        plans: the fitting configurations, best first (``OUTPUT_COLUMNS``, ``pipeline_exact``,
            then the step-time parts of ``simulator.report.TIME_PARTS``, seconds): all of them up
            to ``max_plans``; beyond, the fastest ``max_plans`` by the estimated step time plus
            every plan on the throughput-vs-memory frontier (``pareto("memory")``) and on the
            throughput-vs-GPUs frontier (``pareto("gpus")``) (``fitting`` counts them all). Rows with ``pipeline_exact`` False carry the
            closed-form estimate of their pipeline makespan (they cannot rank among the best:
            ``refine_exact``).
        pruned: rule -> raw configurations it removed (``search_space.RULES``, incl. memory: the
            rows shown not to fit).
        raw_size: configurations in the unpruned space; evaluated: rows scored.
        memory_limit_bytes: HBM minus the headroom; hbm_bytes: the GPU's memory.
        wall_s: seconds the search took; eval_s: of which scoring with the step model;
            eval_cpu_s: CPU seconds of that scoring in this process.
        stage_assignment: the winner's layers per (virtual) stage.
        explain: why the winner wins and what the pruning removed (text).
        fitting: configurations shown to fit in memory; fit_unchecked: configurations whose
            memory was never evaluated, because their step-time floor (for any memory search
            outcome) could not rank among the plans kept from the space's earlier chunks
            (``memory_screen.Screen``): each may fit or not, so ``fitting`` is then "at least"
            (``fit_exact``); ``plan(count_fitting=True)`` evaluates them all.
    """

    model: str
    cluster: str
    gpu: str
    gpus: tuple[int, int]
    global_batch: int
    seq_len: int
    plans: pd.DataFrame
    pruned: Mapping[str, int]
    raw_size: int
    evaluated: int
    memory_limit_bytes: float
    hbm_bytes: float
    wall_s: float
    eval_s: float = 0.0
    eval_cpu_s: float = 0.0
    stage_assignment: StageAssignment | None = None
    explain: str = ""
    dtypes: tuple[str, ...] = field(default=("bf16",))
    stack: str = "megatron-core"
    software: Mapping[str, Mapping] = field(default_factory=dict)
    fitting: int = 0
    fit_unchecked: int = 0

    @property
    def fit_exact(self) -> bool:
        """Whether ``fitting`` is the exact count of fitting configurations (else a lower bound:
        ``fit_unchecked`` rows were never given the memory model)."""
        return self.fit_unchecked == 0

    @property
    def evals_per_s(self) -> float:
        """Configurations scored per second of scoring."""
        return self.evaluated / self.eval_s if self.eval_s > 0 else float("inf")

    @property
    def search_configs_per_s(self) -> float:
        """Configurations scored per second of the whole search (enumeration to explanation)."""
        return self.evaluated / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def best(self) -> dict:
        """The winning row as a dict."""
        return self.plans.iloc[0].to_dict()

    def config(self, rank: int = 0) -> ParallelConfig:
        """The configuration ranked ``rank`` (0 = best) as a validated ``ParallelConfig``, with
        the software stack's fields it was scored with."""
        row = self.plans.iloc[rank]
        return row_config(row, self.software.get(str(row["dtype"])))

    @property
    def best_config(self) -> ParallelConfig:
        return self.config(0)

    @property
    def stage_layers(self) -> tuple[tuple[int, int], ...] | None:
        """Half-open layer ranges of the winner's pp*vpp stages (chunk c on rank c mod pp)."""
        return None if self.stage_assignment is None else self.stage_assignment.stage_layers

    def top(self, n: int = 10, detailed: bool = False) -> pd.DataFrame:
        """The ``n`` best plans, ``OUTPUT_COLUMNS`` only (``detailed``: with ``DETAIL_COLUMNS``,
        the step by part and whether its pipeline time is the exact makespan)."""
        return self.plans.loc[:, self.columns(detailed)].head(n).reset_index(drop=True)

    def columns(self, detailed: bool = False) -> list[str]:
        """``OUTPUT_COLUMNS``, and with ``detailed`` the ``DETAIL_COLUMNS`` the plans carry."""
        return list(OUTPUT_COLUMNS) + ([c for c in DETAIL_COLUMNS if c in self.plans] if detailed else [])

    def pareto(self, by: str = "memory", detailed: bool = False) -> pd.DataFrame:
        """Frontier of throughput against ``memory`` (GiB per GPU) or ``gpus`` (GPU count)
        (``OUTPUT_COLUMNS``; ``detailed``: with ``DETAIL_COLUMNS``, as ``top``).

        A plan is on the memory frontier when no plan with less memory has as many tokens/s and
        it has more than ``time_pruning.FRONTIER_MIN_SHARE`` of the best plan's tokens/s; on the
        GPU frontier, when no smaller GPU count reaches its tokens/s (one best plan per count).
        """
        df = self.plans
        if by == "memory":
            mask = frontier_mask(df["memory_gib"].to_numpy(dtype=float), df["tokens_per_s"].to_numpy(dtype=float))
            order = df[mask].sort_values(["memory_gib", "tokens_per_s"], ascending=[True, False], kind="stable")
            return order.loc[:, self.columns(detailed)].reset_index(drop=True)
        if by != "gpus":
            raise InputError("pareto", f"unknown axis {by!r}", "use 'memory' or 'gpus'")
        order = df.drop_duplicates("n_gpus", keep="first").sort_values("n_gpus", kind="stable")
        tps = order["tokens_per_s"].to_numpy()
        running = np.maximum.accumulate(np.concatenate([[-np.inf], tps[:-1]]))
        return order.loc[tps > running, self.columns(detailed)].reset_index(drop=True)


def frontier_mask(cost: np.ndarray, value: np.ndarray, min_share: float | None = FRONTIER_MIN_SHARE) -> np.ndarray:
    """True for the rows on the frontier of ``value`` (higher is better: tokens/s) against
    ``cost`` (lower is better: GiB per GPU): no row with less or equal cost (earlier in a stable
    order on equal cost) has as much value, and the row has more than ``min_share`` of the
    largest value (``min_share`` None: no floor); a row with NaN in either is never on it and
    moves no other row. The one rule of ``PlanResult.pareto("memory")`` (``plan --pareto``) and of
    ``paraplan.plots.pareto``: ``refine_exact`` gives exactly the rows over
    ``FRONTIER_MIN_SHARE`` that can be on it their exact pipeline makespan, so every row this
    keeps from a plan table is what ``simulate`` says of it."""
    cost = np.asarray(cost, dtype=float)
    value = np.asarray(value, dtype=float)
    mask = np.zeros(len(value), dtype=bool)
    # a row with NaN in either column is never on the frontier and takes no part in it (a NaN
    # carried by maximum.accumulate dropped every row after it)
    known = np.flatnonzero(~(np.isnan(cost) | np.isnan(value)))
    if not len(known):
        return mask
    cost, value = cost[known], value[known]
    order = np.lexsort((-value, cost))          # by cost ascending, then value descending (stable)
    ranked = value[order]
    running = np.maximum.accumulate(np.concatenate([[-np.inf], ranked[:-1]]))
    if min_share is not None:
        running = np.maximum(running, min_share * np.max(value))
    mask[known[order]] = ranked > running
    return mask


def row_config(row, software: Mapping | None = None) -> ParallelConfig:
    """A ranked-table row as a ``ParallelConfig``; ``software``: the stack fields it ran with
    (``PlanResult.software`` for its dtype), else ``ParallelConfig``'s defaults. At cp 1 the
    context-parallel flavour is ``ring`` (nothing runs; ``simulate`` without --cp-kind says so);
    at cp > 1 the row's ``cp_kind`` column, else ``software``'s (``stack_defaults.run_cp_kind``)."""
    software = dict(software or {})
    cp = int(row["cp"])
    if "cp_kind" in row or "cp_kind" in software:
        # the row's flavour (its cp_kind column), else the search's; ring at cp 1 (run_cp_kind)
        given = row["cp_kind"] if "cp_kind" in row else software.get("cp_kind")
        software["cp_kind"] = run_cp_kind(cp, given if cp > 1 else None)
    return ParallelConfig(
        dp=int(row["dp"]), tp=int(row["tp"]), pp=int(row["pp"]), cp=int(row["cp"]), ep=int(row["ep"]),
        vpp=int(row["vpp"]), micro_batch=int(row["micro_batch"]), global_batch=int(row["global_batch"]),
        zero_stage=int(row["zero_stage"]), recompute=str(row["recompute"]),
        sequence_parallel=bool(row["sequence_parallel"]), dtype=str(row["dtype"]), schedule=str(row["schedule"]),
        uneven_layers=True, **{f: int(row[f]) for f in _SEARCHED_FIELDS if f in row}, **dict(software or {}))


def _pinned_recompute(defaults: tuple, fixed: Mapping[str, tuple], num_layers) -> tuple:
    """The per-dtype fields the search's rows take (``defaults``) with a recomputation the
    caller fixed to exactly ``full`` pinned as ``simulate`` runs it: ``num_layers`` (None or 0:
    every layer of each chunk; N: the block method on N layers) and no partial recomputation
    chosen by the memory search (``stack_lacks`` ``partial_recompute``, which that search
    reads; ``PlanResult.software`` keeps the stack's own fields)."""
    if num_layers is not None:
        num_layers = whole_number("recompute_num_layers", num_layers)
    if tuple(str(getattr(r, "value", r)) for r in fixed.get("recompute", ())) != ("full",):
        if num_layers:
            raise InputError("recompute_num_layers", "counts the layers of a full recomputation",
                             "fix recompute to full (--recompute full), or leave it out")
        return defaults
    out = []
    for d in defaults:
        d = {**d, "stack_lacks": tuple(sorted(set(d.get("stack_lacks", ())) | {"partial_recompute"}))}
        if num_layers:
            d.update(recompute="full", recompute_num_layers=num_layers)
        out.append(d)
    return tuple(out)


#: plan fields the search sets per row besides the enumerated ones (memory search, HSDP axis)
_SEARCHED_FIELDS = ("recompute_num_layers", "recompute_layers_decrement", "offload_activation_layers",
                    "zero_shard_group", "etp")


# --------------------------------------------------------------------------------------------
# Request parsing
# --------------------------------------------------------------------------------------------

def parse_gpus(gpus) -> tuple[int, int]:
    """``1024``, ``"1024"``, ``"256-1024"`` or ``(256, 1024)`` -> inclusive (lo, hi)."""
    if isinstance(gpus, (tuple, list)) and len(gpus) == 2:
        lo, hi = gpus
    elif isinstance(gpus, str) and "-" in gpus.strip().lstrip("-"):
        parts = gpus.split("-")
        if len(parts) != 2:
            raise InputError("gpus", f"cannot read {gpus!r}", "give a count (1024) or a range (256-1024)")
        lo, hi = parts
    else:
        lo = hi = gpus
    try:
        # a whole float (8.0, as api.simulate and serve_plan take it) or a numpy integer is a count
        lo, hi = (whole_number("gpus", v) if isinstance(v, numbers.Real) and not isinstance(v, bool)
                  else int(str(v).strip()) for v in (lo, hi))
    except (ValueError, InputError):
        raise InputError("gpus", f"cannot read {gpus!r}", "give a count (1024) or a range (256-1024)") from None
    if lo < 1 or hi < lo:
        raise InputError("gpus", f"{gpus!r} is not a positive count or an increasing range",
                         "give a count (1024) or a range (256-1024)")
    if hi > MAX_GPUS:
        raise InputError("gpus", f"{hi:,} is above the largest supported job ({MAX_GPUS:,} GPUs)", "check the number")
    return lo, hi


def normalise_fixed(fixed: Mapping | None) -> dict[str, tuple]:
    """Field -> tuple of allowed values; names may use the CLI aliases (zero, mb, sp)."""
    out: dict[str, tuple] = {}
    for key, value in (fixed or {}).items():
        name = _ALIASES.get(str(key).strip().lower(), str(key).strip().lower().replace("-", "_"))
        if name not in FIXABLE:
            raise InputError("fix", f"cannot fix {key!r}", "fixable: " + ", ".join(FIXABLE))
        values = tuple(value) if isinstance(value, (list, tuple, set, frozenset)) else (value,)
        out[name] = tuple(_fixed_value(name, v) for v in values)
    return out


def dtype_names(dtypes, field: str = "dtypes",
                hint: str = "e.g. dtypes=['bf16', 'fp8'], or leave it out for the GPU's 16-bit type"
                ) -> tuple[str, ...] | None:
    """``dtypes`` as a tuple of names (None: the GPU's 16-bit type): one name is one dtype, not
    its letters ('fp8' searched 'f', 'p', '8'); anything but names (5, a mapping, [5], []) is an
    ``InputError`` on ``field`` rather than a TypeError in the dtype loop."""
    if dtypes is None:
        return None
    if isinstance(dtypes, str):
        return (dtypes,)
    if isinstance(dtypes, Iterable) and not isinstance(dtypes, Mapping):
        values = tuple(dtypes)
        if values and all(isinstance(v, str) for v in values):
            return values
    raise InputError(field, f"must be a dtype name or a list of them, got {shown(dtypes)}", hint)


def searched_schedules(schedules: Iterable[str], fixed: Mapping[str, tuple]) -> tuple[str, ...]:
    """The schedule axis a request searches: ``schedules``, or, where ``--fix schedule=...`` names
    some, only those (in the order ``schedules`` + fixed lists them). A fixed dimension restricts
    the space: searching the other schedules too only to prune them as ``fixed`` would count
    configurations no one asked for, and a fixed schedule outside ``schedules`` (DualPipe, ZB-V)
    would make the reported space larger than the unrestricted search's. The rows that survive,
    and their order, are the same either way (the others all fell to the ``fixed`` rule)."""
    if isinstance(schedules, str) or not isinstance(schedules, Iterable):
        schedules = (schedules,)
    names = []
    for s in schedules:
        if str(s).lower() not in SCHEDULE_NAMES:
            raise InputError("schedules", f"unknown schedule {s!r}", "choose from " + ", ".join(SCHEDULE_NAMES))
        names.append(Schedule(str(s).lower()).value)
    if not names:
        raise InputError("schedules", "is empty", "give at least one schedule, e.g. ('1f1b', 'interleaved')")
    if "schedule" not in fixed:
        return tuple(dict.fromkeys(names))
    chosen = [Schedule(s).value for s in fixed["schedule"]]
    if not chosen:      # an empty list searched no schedule and reached numpy ('need at least one array to stack')
        raise InputError("schedule", "schedule= leaves no layout: the fixed list is empty",
                         "drop the fixed schedule or change it")
    return tuple(s for s in dict.fromkeys(names + chosen) if s in chosen)


def _fixed_value(name: str, v):
    if name == "recompute":
        if str(v).lower() not in RECOMPUTE_NAMES:
            raise InputError("fix", f"recompute={v!r}", "choose one of " + ", ".join(RECOMPUTE_NAMES))
        return str(v).lower()
    if name == "schedule":
        if str(v).lower() not in SCHEDULE_NAMES:
            raise InputError("fix", f"schedule={v!r}", "choose one of " + ", ".join(SCHEDULE_NAMES))
        return str(v).lower()
    if name == "cp_kind":
        kinds = [k.value for k in CPKind]
        if str(getattr(v, "value", v)).strip().lower() not in kinds:
            raise InputError("fix", f"cp_kind={v!r}", "choose one of " + ", ".join(kinds))
        return str(getattr(v, "value", v)).strip().lower()
    if name == "sequence_parallel":
        text = str(v).strip().lower()
        if text in ("1", "true", "on", "yes", "y"):
            return True
        if text in ("0", "false", "off", "no", "n"):
            return False
        raise InputError("fix", f"sequence_parallel={v!r}", "use on or off")
    try:
        as_int = int(str(v).strip())
    except ValueError:
        raise InputError("fix", f"{name}={v!r} is not an integer") from None
    if as_int < (0 if name in ("zero_stage", "zero_shard_group") else 1) or (name == "zero_stage" and as_int > 3) \
            or as_int > MAX_GPUS:
        raise InputError("fix", f"{'zero' if name == 'zero_stage' else name}={v} is out of range", "ZeRO stages are 0-3"
                         if name == "zero_stage" else f"{name} is {int(name != 'zero_shard_group')} to {MAX_GPUS:,}")
    return as_int


def resolve_global_batch(seq_len: int, global_batch: int | None, global_batch_tokens: int | None) -> int:
    """Sequences per step from a count of sequences or of tokens (a multiple of ``seq_len``)."""
    if global_batch is None and global_batch_tokens is None:
        raise InputError("global_batch", "give the global batch in sequences or in tokens (one of them)",
                         "pass global_batch (sequences) or global_batch_tokens (tokens)")
    if global_batch is not None and global_batch_tokens is not None:
        raise InputError("global_batch", "give the global batch in sequences or in tokens (one of them)",
                         "pass global_batch (sequences) or global_batch_tokens (tokens), not both")
    if global_batch is not None:
        if not 1 <= whole_number("global_batch", global_batch) <= MAX_GLOBAL_BATCH:
            raise InputError("global_batch", f"must be between 1 and {MAX_GLOBAL_BATCH:,}, got {as_given(global_batch)}")
        return int(global_batch)
    tokens = whole_number("global_batch_tokens", global_batch_tokens)
    if tokens > MAX_GLOBAL_BATCH * seq_len:
        raise InputError("global_batch_tokens", f"{tokens:,} tokens is more than {MAX_GLOBAL_BATCH:,} sequences",
                         "check the number")
    if tokens < seq_len or tokens % seq_len:
        raise InputError("global_batch_tokens", f"{tokens} tokens is not a whole number of {seq_len}-token sequences",
                         whole_sequences_fix(tokens, seq_len))
    return tokens // seq_len


def whole_sequences_fix(tokens: int, seq_len: int) -> str:
    """How to give a token count that is a whole number of ``seq_len``-token sequences: the
    nearest one, and, for a round decimal count such as 4,000,000 ("4M"), its binary reading
    (4Mi = 4,194,304) where that one is whole."""
    k = max(1, round(tokens / seq_len))
    fix = f"use e.g. {k * seq_len} = {k} x {seq_len}"
    for decimal, binary, suffix in ((10**9, 2**30, "Gi"), (10**6, 2**20, "Mi"), (10**3, 2**10, "Ki")):
        if tokens % decimal == 0:
            count = tokens // decimal * binary
            if count % seq_len == 0:
                fix += f", or {tokens // decimal}{suffix} = {count} = {count // seq_len} x {seq_len}"
            break
    return fix


def default_dtype(cluster: ClusterSpec) -> str:
    peaks = cluster.gpu.peak_flops_per_s
    for d in ("bf16", "fp16", "fp32"):
        if d in peaks:
            return d
    return next(iter(peaks))


# --------------------------------------------------------------------------------------------
# The search
# --------------------------------------------------------------------------------------------

def plan(model: ModelSpec | str, cluster: ClusterSpec | str, gpus, global_batch: int | None = None, *,
         global_batch_tokens: int | None = None, max_tp: int | None = None, fixed: Mapping | None = None,
         headroom_gib: float | None = None, dtypes: Iterable[str] | None = None,
         schedules: Iterable[str] = DEFAULT_SCHEDULES, max_micro_batch: int | None = None,
         efficiency: EfficiencyModel | None = None, prune_dominated: bool = True,
         chunk_rows: int = DEFAULT_CHUNK_ROWS, workers: int | None = None,
         progress: Callable[[int, int], None] | None = None, assign_stages: bool = True,
         stack: str = "megatron-core", max_plans: int | None = MAX_PLANS,
         space_chunk_rows: int | None = SPACE_CHUNK_ROWS, memory_search: bool = True, hsdp: bool = True,
         prune_by_time: bool = True, count_fitting: bool = False, top: int = TOP_EXACT,
         recompute_num_layers: int | None = None) -> PlanResult:
    """Rank every valid configuration of ``model`` on ``gpus`` GPUs of ``cluster`` that fits.

    Args:
        model, cluster: specs or catalog names / files.
        gpus: a count, or a range ``"256-1024"`` / ``(256, 1024)`` of counts to compare.
        global_batch / global_batch_tokens: sequences (or tokens) per optimizer step.
        max_tp: largest tensor-parallel degree (default: the cluster's GPUs per node).
        fixed: field -> value or values to allow (``search_space.FIXABLE``; aliases zero, mb, sp).
        headroom_gib: memory to leave free per GPU, GiB (None: ``simulator.headroom``'s default,
            5% of HBM).
        dtypes: GEMM dtypes to try (default: the GPU's 16-bit type).
        schedules: pipeline schedules (``interleaved`` is used for vpp > 1, the others for vpp = 1).
        max_micro_batch: largest micro-batch (default: any divisor of the global batch).
        efficiency: override the cluster's efficiency model.
        prune_dominated: drop configurations that cannot win (counted in ``pruned``).
        chunk_rows, workers, progress: see ``vectorized.evaluate_space``.
        assign_stages: split the winner's layers over its stages.
        stack: the software stack every plan runs (``hardware_specs/stacks``, name or
            ``StackSpec``): its documented
            overlap, kernels, fusion and gradient dtype, with its recipe for this model.
        max_plans: keep at most this many fitting plans in ``PlanResult.plans`` (the fastest),
            plus every plan on the throughput-vs-memory and throughput-vs-GPUs frontiers
            (``PlanResult.pareto``), so memory stays bounded on large searches (None: keep all).
        space_chunk_rows: rows of the space built and scored at a time (bounds the memory of a
            large search; None: the whole space at once).
        recompute_num_layers: with ``fixed`` recompute exactly ``full``, the layers each chunk
            recomputes (None or 0: every layer, as ``paraplan simulate --recompute full``; N:
            Megatron's block method on N layers, as ``simulate --recompute-num-layers N``); a
            recomputation fixed to full is then not thinned by the memory search (its offload
            choice stays). Only a search that leaves recompute open (or allows more than full)
            gives its fully recomputing plans the fewest layers that fit.
        memory_search: give every fully recomputing plan that fits only with some recomputation
            the fewest recomputed layers per chunk that fit (stage by stage:
            ``recompute_num_layers`` and ``recompute_layers_decrement``; one that fits without
            any stays the recompute-every-layer point of the memory / time trade-off)
            and every plan that does not fit otherwise the fewest offloaded layers that do (on a
            cluster with a host link).
        hsdp: also try ZeRO 2-3 sharded within each node and replicated across nodes.
        prune_by_time: time (step model) only the fitting rows that can be among the kept
            ``max_plans``, frontier and per-count plans, lowest step-time floor first
            (``time_pruning``); the plans and every number are the same as timing them all.
            A search over more than one space chunk also skips the memory model on the rows
            of a chunk whose floor shows they cannot be among the rows earlier chunks keep
            (``memory_screen.Screen``): ``fitting`` then counts the rows shown to fit and
            ``fit_unchecked`` the others.
        count_fitting: give every row the memory model, so ``fitting`` is the exact count of
            fitting configurations (slower on a large search; the plans are the same).
        top: the plans a caller shows: the fastest ``max(top, refine.TOP_EXACT)`` get the exact
            pipeline makespan (``simulate``'s numbers, ranked by them), at most
            ``refine.MAX_EXACT + top`` rows computed exactly in all (rows beyond keep
            ``pipeline_exact`` False and the estimate).

    Raises ``InputError`` naming what would make the request feasible when nothing fits.
    """
    t0 = time.perf_counter()
    model = load_model(model) if isinstance(model, str) else model
    cluster = load_cluster(cluster) if isinstance(cluster, str) else cluster
    eff = efficiency if efficiency is not None else efficiency_for_cluster(cluster)
    # the search's own options, checked as the command line checks them (a Python caller's nan,
    # 2.5, True or "1f1b" went on into int(), a ufunc or a per-letter schedule lookup)
    max_tp, max_micro_batch, max_plans, workers = (None if v is None else whole_number(name, v) for name, v in (
        ("max_tp", max_tp), ("max_micro_batch", max_micro_batch), ("max_plans", max_plans), ("workers", workers)))
    chunk_rows = whole_number("chunk_rows", chunk_rows)
    top = max(whole_number("top", top), TOP_EXACT)
    refine = functools.partial(refine_exact, top=top, max_rows=MAX_EXACT + top)
    space_chunk_rows = None if space_chunk_rows is None else whole_number("space_chunk_rows", space_chunk_rows)
    for name, flag in (("prune_dominated", prune_dominated), ("assign_stages", assign_stages),
                       ("memory_search", memory_search), ("hsdp", hsdp), ("prune_by_time", prune_by_time),
                       ("count_fitting", count_fitting)):
        if not isinstance(flag, (bool, np.bool_)):
            raise InputError(name, f"must be True or False, got {shown(flag)}")
    if headroom_gib is not None:        # text or a bool refused here, as simulate does (simulator.headroom)
        headroom.headroom_gib(float("inf"), headroom_gib)
    if fixed is not None and not isinstance(fixed, Mapping):
        raise InputError("fixed", f"must be a mapping of field -> value(s), got {shown(fixed)}", "e.g. fixed={'tp': 8}")
    if isinstance(schedules, str):                    # "1f1b" is one schedule, not four letters
        schedules = (schedules,)
    if not isinstance(stack, (str, StackSpec)):
        raise InputError("stack", f"expected a stack name or file, got {type(stack).__name__}",
                         "e.g. stack='megatron-core' (paraplan hardware stacks)")
    lo, hi = parse_gpus(gpus)
    if cluster.max_gpus is not None and hi > cluster.max_gpus:
        raise InputError("gpus", f"{hi} GPUs exceed the {cluster.max_gpus} of cluster {cluster.name}",
                         f"ask for at most {cluster.max_gpus}")
    cluster = _placed_for_range(cluster, lo, hi)
    gbs = resolve_global_batch(model.seq_len, global_batch, global_batch_tokens)
    dtypes = tuple(dict.fromkeys(dtype_names(dtypes) or (default_dtype(cluster),)))
    for d in dtypes:
        cluster.gpu.peak_flops(d)               # a dtype the GPU lacks is an input error
    headroom_gib = headroom.headroom_gib(cluster.gpu.hbm_bytes, headroom_gib)
    limit = cluster.gpu.hbm_bytes - headroom_gib * GIB
    fixed = normalise_fixed(fixed)
    schedules = searched_schedules(schedules, fixed)
    stack_spec = load_stack(stack) if isinstance(stack, str) else stack
    # the context-parallel flavour the rows run at cp > 1: the one fixed, else the stack's for each
    # dtype (``simulate`` without --cp-kind runs the same); one a search, not an axis
    kinds = fixed.pop("cp_kind", None)
    if kinds is not None and len(set(kinds)) > 1:
        raise InputError("fix", f"cp_kind={','.join(kinds)}: a search runs one context-parallel flavour",
                         "fix one (--fix cp_kind=ring), and search the other in a second run")
    if kinds:
        for d in dtypes:        # a flavour the stack cannot run is not searched (simulate refuses it)
            check_stack_cp_kind(stack_spec, kinds[0], model.name, cluster.gpu.name, d, flag="--fix cp_kind=")
    defaults = tuple({**stack_config_fields(stack_spec, d, model.name, cluster.gpu.name),
                      "cp_kind": kinds[0] if kinds else stack_cp_kind(stack_spec, model.name, cluster.gpu.name, d)}
                     for d in dtypes)
    software = dict(zip(dtypes, defaults))        # what the plans run (PlanResult.software)
    # the expert tensor-parallel degrees the rows run: the stack's (tp or 1: simulate without --etp
    # runs it), and 1 too where the release lets the user set it (``searched_expert_tp``)
    etp_choices = {searched_expert_tp(stack_spec, model.moe is not None, model.name, cluster.gpu.name, d)
                   for d in dtypes}
    if len(etp_choices) > 1:
        raise InputError("dtypes", f"{stack_spec.name} runs different expert tensor-parallel degrees for "
                         f"{', '.join(dtypes)}: a search runs one set", "search each dtype on its own")
    defaults = _pinned_recompute(defaults, fixed, recompute_num_layers)
    pinned_layers = int(recompute_num_layers or 0)    # _pinned_recompute refused it without full
    constraints = SearchConstraints(
        gpus=(lo, hi), global_batch=gbs, max_tp=int(max_tp or cluster.gpus_per_node),
        fixed=fixed, dtypes=dtypes, schedules=schedules,
        max_micro_batch=max_micro_batch, prune_dominated=prune_dominated,
        hsdp_gpus=cluster.gpus_per_node if hsdp else 0,
        # a tp the stack would refuse for any searched dtype is not searched (check_config agrees)
        kv_head_replication=all(d["kv_head_replication"] for d in defaults),
        # ZeRO-2 priced as ZeRO-1 for every searched dtype: the same rows twice
        zero2_is_zero1=all(d["zero2_grad_last_microbatch"] for d in defaults),
        # what the stack cannot run for any searched dtype is not searched (check_config agrees)
        stack_lacks=tuple(sorted(set().union(*(d["stack_lacks"] for d in defaults)))),
        # tp whose groups would span scale-up domains unevenly is not searched (check_cluster agrees)
        scaleup_gpus=cluster.gpus_per_node,
        # a cp whose sequence (or, Ulysses, heads) split the flavour refuses is not searched
        cp_kinds=tuple(dict.fromkeys(d["cp_kind"] for d in defaults)),
        # a full recomputation of N layers a chunk needs chunks of N layers (check_config agrees)
        recompute_num_layers=pinned_layers,
        # an MoE row's expert TP: the stack's default (tp or 1), and 1 where the release folds EP
        expert_tp_choices=etp_choices.pop(),
        # an ep a carved-EP release (Megatron-Core <= 0.9) cannot cut out of dp is not searched
        ep_carved_from_dp=any(d["ep_carved_from_dp"] for d in defaults),
        # a row Megatron-Core's combined 1F1B refuses is not searched with the switch on (check_config agrees)
        ep_comm_overlap=model.moe is not None and all(d["ep_comm_overlap"] for d in defaults))

    # the space is built and scored chunk by chunk; only the rows a result can show are kept
    base = enumerate_base(model, constraints, space_chunk_rows)
    if base.total == 0 and pinned_layers:
        _chunks_too_small(model, constraints, space_chunk_rows)
    if base.total == 0:
        raise infeasible.no_layout(model, constraints, cluster.gpus_per_node)
    if kinds and kinds[0] != CPKind.RING.value and not base.ok[base.columns["cp"] > 1].any():
        # a flavour fixed where no searched row runs cp > 1 prices nothing: simulate refuses it
        lacks = "context_parallel" in constraints.stack_lacks
        if kinds[0] == CPKind.ULYSSES.value and not lacks and any(int(v) > 1 for v in fixed.get("cp", (2,))):
            # cp > 1 was open, but no searched tp leaves a cp dividing the heads (ulysses_heads_ok)
            raise InputError("cp_kind", "ulysses context parallelism runs no searched layout with cp > 1: Ulysses "
                             "needs the query and key/value heads of a TP rank divisible by cp (the "
                             f"{model.num_heads} query and {model.num_kv_heads} key/value heads of {model.name} "
                             "over tp, then over cp)", "allow a smaller tp, or --fix cp_kind=ring or hybrid")
        raise InputError("cp_kind", f"{kinds[0]} context parallelism with cp 1 changes nothing",
                         f"drop --fix cp_kind ({stack_spec.name} runs no context parallelism)" if lacks else
                         "drop --fix cp_kind, or allow cp 2 or more (--cp 2)")
    if base.n_chunks == 1:        # the whole space at once: every fitting row, scored once
        space = base.chunk(0)[0]
        ev = evaluate_space(model, cluster, eff, space, gbs, limit, chunk_rows=chunk_rows, workers=workers,
                            progress=progress, defaults=defaults, memory_search=memory_search, refine=refine,
                            keep=max_plans if prune_by_time else None)
        if ev.fitting == 0:
            if ev.bound_pruned:       # the smallest footprint, over every row
                ev = evaluate_space(model, cluster, eff, space, gbs, limit, chunk_rows=chunk_rows, workers=workers,
                                    defaults=defaults, memory_search=memory_search, prune_by_bound=False)
            raise infeasible.nothing_fits(model, cluster, eff, constraints, space, ev, limit, headroom_gib)
        plans = _ranked_table(space, ev, gbs, cluster.gpu.hbm_bytes)
        if max_plans is not None and len(plans) > max_plans:
            keep = kept_rows(plans["tokens_per_s"].to_numpy(), plans["memory_gib"].to_numpy(),
                             plans["n_gpus"].to_numpy(), max_plans)
            plans = plans[keep].reset_index(drop=True)
        plans = plans.drop(columns="_row")
        evaluated, fitting, eval_s, eval_cpu_s = ev.evaluated, ev.fitting, ev.wall_s, ev.cpu_s
        unchecked = ev.unchecked
    else:                         # chunk by chunk: only the rows a result can show are kept
        scored = score_space(model, cluster, eff, base, limit, max_plans, chunk_rows=chunk_rows, workers=workers,
                             progress=progress, defaults=defaults, refine=refine,
                             memory_search=memory_search, prune_by_time=prune_by_time,
                             count_fitting=count_fitting)
        if scored.fitting == 0:
            if scored.bound_pruned:   # the smallest footprint, over every row
                scored = score_space(model, cluster, eff, base, limit, max_plans, chunk_rows=chunk_rows,
                                     workers=workers, defaults=defaults, memory_search=memory_search,
                                     prune_by_bound=False)
            row, combo, dtype_index = scored.min_memory_pick
            host = scored.host_bound      # (bytes, base row, combination, dtype index, offloaded layers)
            # the two nearest rows as a space of their own: the one over the limit at 0, the
            # host-bound one at 1 (each -1 when there is none)
            smallest = base.pick(np.array([max(row, 0), host[1] if host else 0]),
                                 np.array([max(combo, 0), host[2] if host else 0]))
            ev = Evaluated(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), {}, scored.evaluated,
                           scored.min_memory_bytes, 0 if row >= 0 else -1, dtype_index,
                           min_memory_offload=scored.min_memory_offload,
                           host_bound=(host[0], 1, host[3], host[4]) if host else ())
            raise infeasible.nothing_fits(model, cluster, eff, constraints, smallest, ev, limit, headroom_gib)
        plans = _kept_table(model, cluster, eff, base, scored, limit, max_plans, defaults, memory_search, workers,
                            refine)
        evaluated, fitting, eval_s, eval_cpu_s = scored.evaluated, scored.fitting, scored.wall_s, scored.cpu_s
        unchecked = scored.unchecked
    plans = _with_cp_kind(plans, software)
    pruned = dict(base.pruned)
    pruned["memory"] = evaluated - fitting - unchecked
    result = PlanResult(
        model=model.name, cluster=cluster.name, gpu=cluster.gpu.name, gpus=(lo, hi), global_batch=gbs,
        seq_len=model.seq_len, plans=plans, pruned=pruned, raw_size=base.raw_size, evaluated=evaluated,
        memory_limit_bytes=limit, hbm_bytes=cluster.gpu.hbm_bytes, wall_s=0.0, eval_s=eval_s,
        eval_cpu_s=eval_cpu_s, dtypes=dtypes, stack=stack_spec.name, software=software,
        fitting=fitting, fit_unchecked=unchecked)
    stages = None
    if assign_stages and not model.hybrid_pattern:
        # a hybrid Mamba model has no per-layer assignment (stage_assignment_for refuses it): its
        # winner keeps the even split the search priced, as a plan without assigned stages does
        stages = stage_assignment_for(model, cluster, eff, result.best_config, limit)
    notes = memory_feature_notes(model, cluster, eff, result.best_config, limit)
    result = replace(result, stage_assignment=stages, wall_s=time.perf_counter() - t0)
    split_times = None
    if stages is not None:
        split_times = _split_times(model, cluster, eff, result)
    return replace(result, explain=explain_text(result, model, notes, gpu=cluster.gpu, prior=not eff.is_fitted,
                                                split_times_s=split_times))


def _with_cp_kind(plans: pd.DataFrame, software: Mapping[str, Mapping]) -> pd.DataFrame:
    """``plans`` with the ``cp_kind`` column (after ``schedule``): the context-parallel flavour
    each row prices, the search's for its dtype (``software``: the one fixed, else the stack's)
    at cp > 1 and ``ring`` at cp 1 (``stack_defaults.run_cp_kind``), so a row, its JSON and the
    simulate command printed for it say which flavour its step time is."""
    dtype = plans["dtype"].astype(str).to_numpy()
    kinds = np.full(len(plans), run_cp_kind(1), dtype=object)
    multi = plans["cp"].to_numpy() > 1
    for d in np.unique(dtype[multi]):
        kinds[multi & (dtype == d)] = run_cp_kind(2, software[str(d)].get("cp_kind"))
    plans.insert(plans.columns.get_loc("schedule") + 1, "cp_kind", pd.Categorical(kinds, [k.value for k in CPKind]))
    return plans


def _chunks_too_small(model: ModelSpec, constraints: SearchConstraints, space_chunk_rows) -> None:
    """Raise, when only ``constraints.recompute_num_layers`` emptied the space, the one-line
    error ``simulate`` gives such a layout, with the largest N any searched layout's chunks
    hold (``check_config``: a chunk recomputes at most its own layers)."""
    base = enumerate_base(model, replace(constraints, recompute_num_layers=0), space_chunk_rows)
    if base.total == 0:
        return
    largest = largest_chunk_layers(model.num_layers + model.mtp_layers, base.columns["pp"][:, None],
                                   base.columns["vpp"][:, None], base.combos["schedule"][None, :])
    most = int(largest[base.ok].max())
    raise InputError("recompute_num_layers", f"{constraints.recompute_num_layers} layers per model chunk, but no "
                     f"searched layout of {model.name} has a chunk that large: the largest holds at most {most}",
                     f"give at most {most}, or allow fewer pipeline stages")


def _split_times(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, result) -> tuple:
    """(the winner's, the balanced split's) slowest stage per micro-batch as ``simulate`` prices
    them (``explain.split_stage_time_s``); the balanced split's is None where it is the winner's
    own or cannot be laid out (a layout the configuration refuses)."""
    from planners.explain import priced_chunks, split_stage_time_s
    config = result.best_config
    won = split_stage_time_s(model, cluster, eff, config)
    balanced = [tuple(int(x) for x in r) for r in result.stage_assignment.stage_layers]
    if balanced == (priced_chunks(result.plans.iloc[0], model) or balanced):
        return won, None
    try:
        return won, split_stage_time_s(model, cluster, eff, config, balanced)
    except InputError:
        return won, None


#: order of the ranked table: fastest first; among equal step times the smaller footprint, then
#: the earlier dtype and enumeration row (``_row``), so the order is total and reproducible
_RANK_BY, _RANK_ASCENDING = ["tokens_per_s", "memory_gib", "dtype", "_row"], [False, True, True, True]


def _placed_for_range(cluster: ClusterSpec, lo: int, hi: int) -> ClusterSpec:
    """The cluster as jobs of ``lo``..``hi`` GPUs use it (``placement.placed_cluster``: a job of
    several NVL72 racks in its Slurm segments), as ``simulate`` places each; a range whose sizes
    are placed differently (128 GPUs: 64 a rack; 144: 72) cannot share one search."""
    placed = placed_cluster(cluster, hi)
    # only a range reaching past one NVLink domain of several hosts can be placed in segments
    # (``placement.segment_gpus``); any size placed differently from the cluster is such a size
    if lo != hi and hi > cluster.gpus_per_node and cluster.scaleup.kind == "nvlink" and \
            cluster.launch_gpus_per_host < cluster.gpus_per_node:
        sizes = sorted({placed_cluster(cluster, n).gpus_per_node for n in range(max(lo, 1), hi + 1)})
        if len(sizes) > 1:
            raise InputError("gpus", f"jobs of {lo}-{hi} GPUs on {cluster.name} sit {', '.join(map(str, sizes))} "
                             f"GPUs a {cluster.gpus_per_node}-GPU domain (Slurm segments, hardware_specs.placement)",
                             "plan each GPU count on its own")
    return placed


def _kept_table(model, cluster, eff, base, scored, limit: float, max_plans: int | None, defaults: tuple,
                memory_search: bool = True, workers: int | None = None, refine=refine_exact) -> pd.DataFrame:
    """The ranked table of the rows ``kept_rows`` keeps over the whole space: those rows are
    rebuilt and scored again with the step model (row-wise, so with the very numbers the search
    found), one dtype at a time, each sorted by the layer key, over ``workers`` processes
    (``evaluate_space``); then the ones that can rank get their exact pipeline makespan
    (``refine``: ``refine_exact``, with the caller's ``top``)."""
    keep = kept_rows(scored.tokens_per_s, scored.memory_bytes, scored.n_gpus, max_plans)
    tables = []
    for d in np.unique(scored.dtype_index[keep]):
        sel = keep & (scored.dtype_index == d)
        space = base.pick(scored.base_rows[sel], scored.combos[sel])
        order = np.lexsort([space.columns[k] for k in reversed(LAYER_KEY_FIELDS) if k in space.columns])
        space = replace(space, columns={k: v[order] for k, v in space.columns.items()},
                        dtypes=(space.dtypes[d],))
        own = (defaults[d],) if defaults else ()
        if scored.timed is not None:
            ev = _refined_from_scoring(model, cluster, eff, space, base.global_batch, scored, sel, order, own,
                                       refine)
        else:
            ev = evaluate_space(model, cluster, eff, space, base.global_batch, limit, workers=workers, defaults=own,
                                memory_search=memory_search, refine=refine)
        table = _ranked_table(space, ev, base.global_batch, cluster.gpu.hbm_bytes,
                              row_ids=scored.positions[sel][order])
        table["dtype"] = pd.Categorical([base.dtypes[d]] * len(table), categories=list(base.dtypes))
        tables.append(table)
    plans = tables[0] if len(tables) == 1 else pd.concat(tables, ignore_index=True)
    plans = plans.sort_values(_RANK_BY, ascending=_RANK_ASCENDING, kind="stable", ignore_index=True)
    return plans.drop(columns="_row")


def _refined_from_scoring(model, cluster, eff, space, global_batch: int, scored, sel: np.ndarray,
                          order: np.ndarray, defaults: tuple, refine=refine_exact) -> Evaluated:
    """What ``evaluate_space(..., refine=refine_exact)`` of ``space`` (the scored rows ``sel``,
    in ``order``, one dtype; every one fits) gives, from the scoring's own outputs: the step
    model is row-wise, so each row's memory, search counts and times as timed are the ones the
    search gave it (``scored.timed``), and the rows the search's refinement computed exactly
    seed ``refine_exact``'s cache with those exact outputs; the refinement over these rows then
    runs as on a fresh evaluation, computing only the exact rows the search did not."""
    n = len(order)
    timed = {k: v[sel][order] for k, v in scored.timed.items()}
    ev = Evaluated(np.arange(n), np.zeros(n, dtype=np.int64), timed, n, np.inf, -1, -1, fitting=n)
    place = np.full(len(scored.exact), -1)
    place[scored.exact] = np.arange(int(np.count_nonzero(scored.exact)))
    at = place[np.flatnonzero(sel)[order]]
    known = at >= 0
    values = {k: np.where(known, v[np.maximum(at, 0)], 0.0) if len(v) else np.zeros(n)
              for k, v in scored.exact_outputs.items()}
    return refine(model, cluster, eff, space, global_batch, ev, defaults=defaults,
                  cache=(np.arange(n), known, values))


def _ranked_table(space, ev, gbs: int, hbm_bytes: float, row_ids: np.ndarray | None = None) -> pd.DataFrame:
    """The fitting rows of ``ev`` as the ranked table (``_RANK_BY`` order), with ``_row``, each
    row's number in the whole space (``row_ids[row]``; default the row itself)."""
    cols = space.columns
    r = ev.rows
    out = ev.outputs
    order = np.lexsort((r, ev.dtype_index, out["memory_bytes"], -out["tokens_per_s"]))
    r = r[order]
    dp, tp, pp, cp = (cols[k][r] for k in ("dp", "tp", "pp", "cp"))
    mem = out["memory_bytes"][order]
    data = {
        "n_gpus": dp * tp * pp * cp, "dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": cols["ep"][r],
        # the expert TP the row ran (tp or 1, ``SearchConstraints.expert_tp_choices``)
        "etp": cols["etp"][r] if "etp" in cols else np.ones(len(r), np.int64),
        "vpp": cols["vpp"][r], "micro_batch": cols["micro_batch"][r],
        "global_batch": np.full(len(r), gbs, dtype=np.int64), "zero_stage": cols["zero_stage"][r],
        "zero_shard_group": cols["zero_shard_group"][r] if "zero_shard_group" in cols else np.zeros(len(r), np.int64),
        "recompute": pd.Categorical.from_codes(cols["recompute"][r], RECOMPUTE_NAMES),
        "recompute_num_layers": out["recompute_num_layers"][order].astype(np.int64),
        "recompute_layers_decrement": out["recompute_layers_decrement"][order].astype(np.int64),
        "offload_activation_layers": out["offload_activation_layers"][order].astype(np.int64),
        "sequence_parallel": cols["sequence_parallel"][r].astype(bool),
        "schedule": pd.Categorical.from_codes(cols["schedule"][r], SCHEDULE_NAMES),
        "dtype": pd.Categorical.from_codes(ev.dtype_index[order], list(space.dtypes)),
        "step_time_s": out["step_time_s"][order], "tokens_per_s": out["tokens_per_s"][order],
        "tokens_per_s_per_gpu": out["tokens_per_s_per_gpu"][order], "mfu": out["mfu"][order],
        "memory_gib": mem / GIB, "headroom_gib": (hbm_bytes - mem) / GIB,
        "host_memory_gib": out["host_memory_bytes"][order] / GIB,
        "pipeline_exact": out["pipeline_exact"][order].astype(bool),
        "step_time_lower_s": out["step_time_lower_s"][order],
    }
    for k in TIME_PARTS:
        data[k] = out[k][order]
    data["_row"] = r if row_ids is None else np.asarray(row_ids)[r]
    return pd.DataFrame(data)
