"""The plan search space: every configuration of a job, enumerated with numpy, with pruning counts.

The raw space is the product of

    ordered factorisations dp*tp*pp*cp = n for every GPU count n asked for
    x ep (divisors of the expert count; 1 for dense models)
    x expert TP (``SearchConstraints.expert_tp_choices``: the row's tp, 1, or tp at ep 1 and 1
      with ep > 1; a choice giving the etp of an earlier one is pruned as ``etp_repeat``)
    x micro-batch (divisors of the global batch)
    x vpp (1 and the divisors of L and L + 2, L = layers)
    x schedule x sequence parallel {off, on} x ZeRO {0..3} x recompute {none, selective, full}
    x ZeRO shard group {all dp*cp ranks, one node's (HSDP)} for ZeRO 2-3 x dtype

It is expanded one axis at a time; at each step a row that breaks a rule is dropped and
counted, with the size of the axes not yet expanded, under the first rule it breaks (so the
counts add up to the raw size). The rules mirror ``simulator.validate_config.check_config`` and
``ParallelConfig``'s own checks, so every surviving row is a valid configuration; a few more
drop rows that can never win (named ``dominated_*``). Nothing here evaluates a cost.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from math import isqrt
from typing import Mapping

import numpy as np

from cost_models.context_parallel import ulysses_heads_ok
from cost_models.params import tp_splits_kv_heads
from cost_models.sharding import largest_zero_group
from cost_models.topology import groups_tile_node
from hardware_specs.errors import InputError
from hardware_specs.stack_spec import EXPERT_TP_DEFAULTS
from model_specs.model_spec import ModelSpec
from simulator.config_batch import RECOMPUTE_CODES, SCHEDULE_CODES
from simulator.parallel_config import Recompute, Schedule
from simulator.stack_defaults import expert_tp_for
from simulator.ep_overlap_rules import FULL_PRECISION_DTYPES, ep_overlap_runnable
from simulator.stack_support import ZERO_BUBBLE_SCHEDULES, lacked_use
from simulator.step_model import LAYER_KEY_FIELDS
from simulator.validate_config import needs_uneven_split, sequence_split_ok

#: why a candidate was removed, in the order the rules are applied (keys of ``SearchSpace.pruned``).
RULES = {
    "fixed": "a value the request fixed or excluded (--fix, --tp, ...)",
    "max_tp": "tp above the maximum (default: GPUs per node, the NVLink domain)",
    "heads": "tp does not divide the attention heads (or, with Ulysses context parallelism, tp x cp does not)",
    "kv_heads": "tp does not divide the key/value heads (or, on a stack that replicates them over tp, is not a multiple of them)",
    "ffn": "tp does not divide the FFN width",
    "scaleup": "on more GPUs than one scale-up domain (GPUs per node), a group's run of consecutive ranks neither "
               "divides nor is a multiple of the domain: tp, ep, tp x cp (context-parallel ring), tp x "
               "zero_shard_group or tp x cp x dp (data-parallel group); such a group would span domains unevenly "
               "(`simulate` refuses it, topology.groups_tile_node)",
    "layers": "pp above the layer count, or (interleaved) pp*vpp not dividing the layers (or layers + 2); with vpp = 1 the layers need not split evenly over the stages; or a model chunk holding fewer layers than the full recomputation fixed with recompute_num_layers covers (`simulate` refuses it)",
    "sequence": "2 x cp does not divide the sequence length (ring, hybrid and all-gather context parallelism: two "
                "chunks per rank; cp under Ulysses), or, with "
                "sequence parallelism, tp does not divide the seq_len / cp tokens of a cp rank",
    "batch": "dp*micro_batch does not divide the global batch (or, interleaved, the micro-batch count is not a multiple of pp)",
    "experts": "ep does not divide the experts, or ep*etp does not divide dp*cp*tp (or, where the stack carves EP "
               "out of data parallelism, dp)",
    "etp_repeat": "an expert tensor-parallel choice giving the etp an earlier choice gives the row (etp tp and "
                  "etp 1 at tp 1): the same configuration",
    "vpp_needs_pp": "virtual pipeline stages with pp = 1",
    "schedule": "schedule does not match vpp (interleaved needs vpp > 1; vpp > 1 is always interleaved)",
    "dualpipe": "DualPipe without an even pp and an even micro-batch count >= 2 pp (its schedule pairs rank i with p-1-i)",
    "one_stage": "a zero-bubble schedule (ZB-H1, ZB-H2, ZB-V) with pp = 1: one stage has no bubble to fill and "
                 "runs as 1F1B, which the search has (`simulate` refuses it)",
    "flush_size": "a pipeline whose flush has more operations than the step model builds in seconds "
                  "(pipeline.makespan.flush_within_limit: hundreds of stages, or ZB-H2 / ZB-V beyond ~100)",
    "sp_needs_tp": "sequence parallel on with tp = 1 (the same configuration as off)",
    "dominated_zero_without_dp": "ZeRO 1-3 with a data-parallel group of 1 (nothing to shard: ZeRO-0 or worse), "
                                 "unless the request fixed the ZeRO stage",
    "zero2_is_zero1": "ZeRO-2 on a stack that keeps the gradients whole to the last micro-batch (zero2_grad_reduce "
                      "last_microbatch): it runs and is priced as ZeRO-1, which the search has",
    "hsdp": "hybrid sharding whose shard group is not a proper divisor (>= 2) of dp*cp, or is the group "
            "another value of the axis already gives the row",
    "stack": "uses a parallelism, schedule, ZeRO stage or recomputation the software stack lacks (its training.lacks)",
    "ep_overlap": "with ep_comm_overlap on, ep > 1 and a 1F1B, interleaved or GPipe schedule, a combination "
                  "Megatron-Core's combined 1F1B refuses: pp > 1 "
                  "without vpp >= 2, a full recomputation, an fp32 / tf32 search, or more than one MTP layer "
                  "(simulator.ep_overlap_rules; `simulate` refuses it), in every searched dtype (a row only "
                  "some dtypes refuse is counted under memory for those)",
    "memory": "does not fit in HBM minus the headroom (evaluated)",
}

RECOMPUTE_NAMES = tuple(r.value for r in Recompute)           # index = code
SCHEDULE_NAMES = tuple(s.value for s in Schedule)             # index = code
DEFAULT_SCHEDULES = (Schedule.ONE_F_ONE_B.value, Schedule.INTERLEAVED.value)
#: the fields a request may fix (``--fix name=value``) and the axis each belongs to.
FIXABLE = ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch", "zero_stage", "recompute",
           "sequence_parallel", "schedule", "zero_shard_group", "cp_kind")


def divisors(n: int) -> np.ndarray:
    """Sorted divisors of ``n`` (>= 1) as an int64 array."""
    small = np.arange(1, isqrt(n) + 1, dtype=np.int64)
    small = small[n % small == 0]
    return np.unique(np.concatenate([small, n // small]))


class _DivisorTable:
    """Divisors of every integer up to ``n_max`` in CSR form, for vectorized expansion."""

    def __init__(self, n_max: int):
        counts = np.zeros(n_max + 1, dtype=np.int64)
        d = np.arange(1, n_max + 1, dtype=np.int64)
        multiples = [np.arange(k, n_max + 1, k, dtype=np.int64) for k in d]
        owners = np.concatenate(multiples)                      # the multiple
        divs = np.repeat(d, [len(m) for m in multiples])        # its divisor
        order = np.lexsort((divs, owners))
        self.flat = divs[order]
        np.add.at(counts, owners, 1)
        self.counts = counts
        self.offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])

    def expand(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, divisor) for every divisor of every ``q[row]``."""
        c = self.counts[q]
        rows = np.repeat(np.arange(len(q)), c)
        starts = np.repeat(np.cumsum(c) - c, c)
        pos = self.offsets[q][rows] + (np.arange(int(c.sum())) - starts)
        return rows, self.flat[pos]


@lru_cache(maxsize=4)
def _divisor_table(n_max: int) -> _DivisorTable:
    return _DivisorTable(n_max)


@dataclass(frozen=True)
class SearchConstraints:
    """What the user asked for, in the planner's terms.

    Attributes:
        gpus: inclusive range of GPU counts (lo, hi); (n, n) for exactly n.
        global_batch: sequences per optimizer step.
        max_tp: largest tensor-parallel degree.
        fixed: field -> allowed values (each field one of ``FIXABLE``).
        dtypes: GEMM dtypes to try.
        schedules: pipeline schedules to try (``interleaved`` applies to vpp > 1 only).
        max_micro_batch: largest micro-batch (None: any divisor of the global batch).
        prune_dominated: drop the ``dominated_*`` rows (never the best; counted).
        hsdp_gpus: GPUs of one hybrid-sharding group (a node): ZeRO 2-3 rows are also tried
            sharded over the ``hsdp_gpus / tp`` data-parallel ranks in it and replicated across
            (``zero_shard_group``); 0 = not searched.
        kv_head_replication: the stack replicates key/value heads over tp, so tp may also be a
            multiple of them (the stack's ``TrainingBehaviour.kv_head_replication``); False = tp
            must divide them, as ``check_config`` requires.
        zero2_is_zero1: the stack keeps ZeRO-2's gradients whole to the last micro-batch
            (``zero2_grad_reduce: last_microbatch``), so a ZeRO-2 row is its ZeRO-1 row again:
            not searched unless ``fixed`` asks for ZeRO-2.
        stack_lacks: what the stack cannot run (``TrainingBehaviour.lacks``, for any searched
            dtype): rows that use one are not searched, as ``check_config`` refuses them.
        cp_kinds: the context-parallel flavours the searched rows run at cp > 1 (one per searched
            dtype: the stack's ``context_parallel_kind``, or the one ``--fix cp_kind`` gives):
            a cp must split the sequence as each of them needs (``sequence_split_ok``) and, for
            Ulysses, the tp rank's query and key/value heads (``ulysses_heads_ok``), as ``check_config``
            requires.
            The flavour itself is not an axis of the space (``cp_kind`` is taken out of ``fixed``).
        recompute_num_layers: the layers a chunk recomputes when the request fixes a full
            recomputation of N layers (``plan(recompute_num_layers=N)``): a layout whose largest
            model chunk holds fewer than N is not searched, as ``check_config`` refuses it
            (``most_layers_per_chunk``); 0 = every layer of a chunk, nothing pruned.
        scaleup_gpus: GPUs of one scale-up domain (the cluster's ``gpus_per_node``): a layout
            whose tensor-, context-, expert-, data-parallel or ZeRO shard groups do not tile it
            is not searched (``topology.groups_tile_node``), as ``check_cluster`` refuses it;
            0 = not checked.
        expert_tp_choices: the expert tensor-parallel degrees an MoE row is searched at, each
            ``"tp"`` (the row's tp: the experts split over the tensor-parallel group) or ``"one"``
            (whole experts on each expert rank), the stack's default first
            (``simulator.stack_defaults.searched_expert_tp``: the default, plus ``one`` where the
            release folds EP and lets the user set etp); a choice giving the same etp as an
            earlier one at a row's tp (tp 1) is not searched twice. A dense model runs etp 1.
        ep_comm_overlap: the rows run ``ep_comm_overlap`` in every searched dtype: rows with
            ep > 1 that Megatron-Core's combined 1F1B refuses (``simulator.ep_overlap_rules``) in
            every searched dtype are not searched, as ``check_config`` refuses them; a row only
            some dtypes refuse is dropped for those dtypes with the rows that do not fit
            (``planners.vectorized``, ``ep_overlap_rules.batch_runnable``).
        ep_carved_from_dp: the stack cuts the EP groups out of the data-parallel ranks
            (Megatron-Core <= 0.9, ``ParallelConfig.ep_carved_from_dp``): an ep not dividing dp
            is not searched, as ``check_config`` refuses it.
    """

    gpus: tuple[int, int]
    global_batch: int
    max_tp: int
    fixed: Mapping[str, tuple] = field(default_factory=dict)
    dtypes: tuple[str, ...] = ("bf16",)
    schedules: tuple[str, ...] = DEFAULT_SCHEDULES
    max_micro_batch: int | None = None
    prune_dominated: bool = True
    hsdp_gpus: int = 0
    kv_head_replication: bool = False
    zero2_is_zero1: bool = False
    stack_lacks: tuple[str, ...] = ()
    scaleup_gpus: int = 0
    cp_kinds: tuple[str, ...] = ("ring",)
    recompute_num_layers: int = 0
    expert_tp_choices: tuple[str, ...] = ("one",)
    ep_carved_from_dp: bool = False
    ep_comm_overlap: bool = False


@dataclass(frozen=True)
class SearchSpace:
    """The surviving rows as int64 columns (codes for recompute and schedule), one dtype-free
    row per configuration; evaluate once per dtype. May be one chunk of a larger space
    (``enumerate_chunks``).

    ``pruned`` maps each rule of ``RULES`` (except ``memory``) to the raw configurations it
    removed; ``raw_size`` = sum(pruned) + ``space_rows`` * len(dtypes), where ``space_rows``
    counts the rows of the whole space (of all chunks; None: this one is the whole space).
    """

    columns: Mapping[str, np.ndarray]
    pruned: Mapping[str, int]
    raw_size: int
    dtypes: tuple[str, ...]
    global_batch: int
    space_rows: int | None = None

    @property
    def total_rows(self) -> int:
        """Rows of the whole space this chunk belongs to."""
        return len(self) if self.space_rows is None else int(self.space_rows)

    def __len__(self) -> int:
        return int(len(self.columns["dp"]))


class _Counter:
    """Applies rules in order to a stage's rows; counts each dropped row once, scaled."""

    def __init__(self, pruned: dict):
        self.pruned = pruned

    def apply(self, rules: list[tuple[str, np.ndarray]], n_rows: int, scale: int) -> np.ndarray:
        return self.apply2d(rules, (n_rows,), scale)

    def apply2d(self, rules: list[tuple[str, "np.ndarray | _Gathered"]], shape: tuple, scale: int) -> np.ndarray:
        """The rows (of ``shape``) every rule keeps; each rule's count is of the rows it drops
        that no earlier rule dropped. A ``_Gathered`` mask is spread out only while it is
        applied, so one (rows x combinations) mask is held at a time."""
        alive = np.ones(shape, dtype=bool)
        for name, ok in rules:
            if isinstance(ok, _Gathered):
                ok = None if ok.table.all() else ok.full()
            else:
                ok = np.asarray(ok, dtype=bool)
                ok = None if _repeats_all_true(ok) else ok
            if ok is None:                     # drops nothing: no pass over (rows x combinations)
                self.pruned[name] = self.pruned.get(name, 0)
                continue
            fail = alive > ok                  # alive & ~ok, in one pass
            self.pruned[name] = self.pruned.get(name, 0) + int(np.count_nonzero(fail)) * scale
            alive &= ok
        return alive


@dataclass(frozen=True)
class _Gathered:
    """A (rows x combinations) mask held as a small table and the indices that spread it:
    ``table[rows][:, cols]`` (None: that axis as it is). ``_Counter.apply2d`` builds it when it
    applies the rule and drops it after."""

    table: np.ndarray
    rows: np.ndarray | None = None
    cols: np.ndarray | None = None

    def full(self) -> np.ndarray:
        t = self.table if self.rows is None else self.table[self.rows]
        return t if self.cols is None else t[:, self.cols]


def _repeats_all_true(ok: np.ndarray) -> bool:
    """Whether ``ok`` is a mask repeated along an axis (a broadcast view: stride 0, as ``grid``
    and ``_by_combination`` give a rule of one axis) that is true everywhere, read from one
    slice; False for a mask held in full (checking it would cost what applying it does)."""
    if ok.ndim == 0:
        return bool(ok)
    if all(st != 0 for st in ok.strides):
        return False
    return bool(ok[tuple(slice(0, 1) if st == 0 else slice(None) for st in ok.strides)].all())


def coded(fixed: Mapping[str, tuple]) -> dict[str, tuple]:
    """``fixed`` with recompute and schedule names as their codes and flags as 0/1."""
    out = {}
    for name, values in fixed.items():
        if name == "recompute":
            values = tuple(RECOMPUTE_CODES[Recompute(str(v).lower())] for v in values)
        elif name == "schedule":
            values = tuple(SCHEDULE_CODES[Schedule(str(v).lower())] for v in values)
        elif name == "sequence_parallel":
            values = tuple(int(bool(v)) for v in values)
        out[name] = tuple(values)
    return out


def _all_kinds(c: "SearchConstraints", rule) -> np.ndarray:
    """``rule(kind)`` (a mask) for every context-parallel flavour ``c`` searches, all true."""
    return np.logical_and.reduce([np.asarray(rule(k), dtype=bool) for k in c.cp_kinds])


def _allowed(fixed: Mapping[str, tuple], name: str, values: np.ndarray) -> np.ndarray:
    if name not in fixed:
        return np.ones(len(values), dtype=bool)
    return np.isin(values, np.asarray(fixed[name]))


#: largest GPU count the divisor table of ``_factorisations`` covers (its size grows as n log n);
#: above it a range is searched count by count, at most ``MAX_COUNTS_ABOVE_TABLE`` counts
MAX_TABLE_GPUS = 2**17
MAX_COUNTS_ABOVE_TABLE = 4096


def _factorisations(lo: int, hi: int) -> tuple[np.ndarray, ...]:
    """All ordered (dp, tp, pp, cp) with dp*tp*pp*cp = n, lo <= n <= hi."""
    if hi - lo < 16 or hi > MAX_TABLE_GPUS:   # a few counts, or large ones: each count's divisors
        parts = []
        for n in range(lo, hi + 1):
            d = divisors(n)
            # (tp, pp) pairs first, then cp: d_3(n) x d(n) candidates instead of d(n)**3
            tp, pp = (a.ravel() for a in np.meshgrid(d, d, indexing="ij"))
            ok = n % (tp * pp) == 0
            tp, pp = np.repeat(tp[ok], len(d)), np.repeat(pp[ok], len(d))
            cp = np.tile(d, int(ok.sum()))
            ok = n % (tp * pp * cp) == 0
            tp, pp, cp = tp[ok], pp[ok], cp[ok]
            parts.append((n // (tp * pp * cp), tp, pp, cp))
        return tuple(np.concatenate(x) for x in zip(*parts))
    table = _divisor_table(hi)
    n = np.arange(lo, hi + 1, dtype=np.int64)
    r, tp = table.expand(n)
    n = n[r]
    r, pp = table.expand(n // tp)
    n, tp = n[r], tp[r]
    r, cp = table.expand(n // (tp * pp))
    n, tp, pp = n[r], tp[r], pp[r]
    return n // (tp * pp * cp), tp, pp, cp


def _cross(cols: dict, values: np.ndarray, name: str) -> dict:
    """Every row of ``cols`` paired with every entry of ``values`` (as column ``name``)."""
    n, k = len(next(iter(cols.values()))), len(values)
    out = {key: np.repeat(col, k) for key, col in cols.items()}
    out[name] = np.tile(values, n)
    return out


def _keep(cols: dict, mask: np.ndarray) -> dict:
    return {k: v[mask] for k, v in cols.items()}


def _by_combination(n_rows: int, keys: list[np.ndarray], rule) -> _Gathered:
    """(rows, combinations): ``rule(i)``, a mask over the ``n_rows`` base rows for combination
    ``i``, computed once per distinct value of the combinations' ``keys`` (the columns of the
    last axes the rule reads: a rule reading the schedule alone sees 2 distinct values among the
    dozens of (schedule, sp, ZeRO, recompute, shard) combinations) and spread to every
    combination (spread out when applied); what a rule of (rows x combinations) arrays gives,
    with per-row work only."""
    _, first, col = np.unique(np.stack(keys, axis=1), axis=0, return_index=True, return_inverse=True)
    masks = [np.broadcast_to(np.asarray(rule(int(i)), dtype=bool), (n_rows,)) for i in first]
    return _Gathered(np.stack(masks, axis=1), cols=col.ravel())


def _by_schedule(sched: np.ndarray, n_rows: int, rule) -> _Gathered:
    """``_by_combination`` of ``rule(code)``, a rule reading the combination's schedule code only."""
    return _by_combination(n_rows, [sched], lambda i: rule(int(sched[i])))


def _flush_sizes(sched: np.ndarray, pp: np.ndarray, m: np.ndarray, vpp: np.ndarray) -> _Gathered:
    """(rows, combinations): whether each row's flush under each combination's schedule is within
    what the step model builds in seconds (``pipeline.makespan.flush_within_limit``; one stage
    always is)."""
    from simulator.pipeline.makespan import flush_within_limit
    return _by_schedule(sched, len(pp), lambda code: flush_within_limit(SCHEDULE_NAMES[code], pp, m, vpp))


def micro_batch_candidates(global_batch: int, max_micro_batch: int | None) -> np.ndarray:
    mb = divisors(global_batch)
    return mb[mb <= max_micro_batch] if max_micro_batch else mb


def largest_chunk_layers(layers: int, pp: np.ndarray, vpp: np.ndarray, sched: np.ndarray) -> np.ndarray:
    """Layers of the largest model chunk of rows split as evenly as possible (the planner's
    ``uneven_layers`` rows; ``validate_config.most_layers_per_chunk``): ceil(``layers`` /
    positions), positions = pp * vpp (DualPipe: pp per model copy; ZB-V: 2 pp). ``layers``
    counts the MTP modules; ``sched``: schedule codes; broadcasting arrays."""
    positions = np.where(sched == SCHEDULE_CODES[Schedule.DUALPIPE], pp,
                         np.where(sched == SCHEDULE_CODES[Schedule.ZB_V], 2 * pp, pp * vpp))
    return -(-layers // positions)


def vpp_candidates(num_layers: int) -> np.ndarray:
    return np.union1d(divisors(num_layers), divisors(num_layers + 2))


#: most raw (dp, tp, pp, cp) factorisations one request may span (all GPU counts of a range):
#: 1,024-4,096 GPUs has 0.5 million, 1-65,536 has 14 million; a wider request is refused
#: before anything is built (the raw space is this times the other axes)
MAX_FACTORISATIONS = 5_000_000
#: surviving rows per chunk ``enumerate_chunks`` yields: bounds the memory of a large search
#: (about 100 bytes per row for the columns and the sort) independently of its size
SPACE_CHUNK_ROWS = 2_000_000

_SMALL_PRIMES = np.array([p for p in range(2, 4097) if all(p % q for q in range(2, isqrt(p) + 1))], dtype=np.int64)


def factorisation_count(lo: int, hi: int, stop_above: int | None = None) -> int:
    """Ordered factorisations dp*tp*pp*cp = n summed over lo <= n <= hi (the divisor function
    d_4: for n = prod p^e it is prod C(e + 3, 3)), without building them; counting stops early,
    returning a partial sum, once it passes ``stop_above``. For hi <= 4096**2."""
    total = 0
    primes = _SMALL_PRIMES[_SMALL_PRIMES * _SMALL_PRIMES <= hi]
    for block in range(lo, hi + 1, 1 << 16):
        rest = np.arange(block, min(hi, block + (1 << 16) - 1) + 1, dtype=np.int64)
        count = np.ones(len(rest), dtype=np.int64)
        for p in primes:
            e = np.zeros(len(rest), dtype=np.int64)
            hit = rest % p == 0
            while hit.any():
                e += hit
                rest = np.where(hit, rest // p, rest)
                hit &= rest % p == 0
            count *= (e + 1) * (e + 2) * (e + 3) // 6
        # what remains is 1 or one prime above sqrt(hi) (exponent 1: C(4, 3) = 4)
        total += int((count * np.where(rest > 1, 4, 1)).sum())
        if stop_above is not None and total > stop_above:
            break
    return total


def enumerate_space(model: ModelSpec, c: SearchConstraints) -> SearchSpace:
    """Enumerate and prune the configurations of ``model`` under constraints ``c`` (one space)."""
    return next(enumerate_chunks(model, c, max_rows=None))


def enumerate_chunks(model: ModelSpec, c: SearchConstraints, max_rows: int | None = SPACE_CHUNK_ROWS):
    """The pruned space of ``model`` under ``c`` in chunks of at most about ``max_rows`` rows
    (None: one chunk), each sorted by the layer key; every chunk carries the whole space's
    ``pruned`` counts and ``raw_size``. Always yields at least one (possibly empty) chunk."""
    base = enumerate_base(model, c, max_rows)
    for i in range(base.n_chunks):
        yield base.chunk(i)[0]


def enumerate_base(model: ModelSpec, c: SearchConstraints, max_rows: int | None = SPACE_CHUNK_ROWS) -> "SpaceBase":
    """Apply every rule to the configurations of ``model`` under ``c`` without building the
    rows: a ``SpaceBase`` builds them chunk by chunk (or picked rows) on demand.

    Raises ``InputError`` when the request spans more than ``MAX_FACTORISATIONS`` GPU layouts.
    """
    L, gbs, fixed = model.num_layers, c.global_batch, coded(c.fixed)
    lacks = c.stack_lacks
    lo, hi = c.gpus
    n_factorisations = factorisation_count(lo, hi, stop_above=MAX_FACTORISATIONS)
    if hi > MAX_TABLE_GPUS and hi - lo + 1 > MAX_COUNTS_ABOVE_TABLE:
        raise InputError("gpus", f"{lo}-{hi} is {hi - lo + 1:,} GPU counts; above {MAX_TABLE_GPUS:,} GPUs a search "
                         f"covers at most {MAX_COUNTS_ABOVE_TABLE:,}", "search a narrower range of GPU counts")
    if n_factorisations > MAX_FACTORISATIONS:
        raise InputError("gpus", f"{lo}-{hi} GPUs have more than {MAX_FACTORISATIONS:,} dp x tp x pp x cp "
                         "layouts, more than one search covers", "search a narrower range of GPU counts")
    experts = model.moe.num_experts if model.moe is not None else 1
    ep_raw = divisors(experts) if model.moe is not None else np.ones(1, dtype=np.int64)
    etp_choices = tuple(c.expert_tp_choices) if model.moe is not None else ("one",)
    if not etp_choices or set(etp_choices) - set(EXPERT_TP_DEFAULTS):
        raise ValueError(f"expert_tp_choices {etp_choices!r}: each one of {EXPERT_TP_DEFAULTS}")
    mb_raw = micro_batch_candidates(gbs, c.max_micro_batch)
    vpp_raw = vpp_candidates(L)
    sched_raw = np.array([SCHEDULE_CODES[Schedule(s)] for s in c.schedules], dtype=np.int64)
    sp_raw = np.array([0, 1], dtype=np.int64)
    zero_raw = np.arange(4, dtype=np.int64)
    rc_raw = np.array([RECOMPUTE_CODES[r] for r in Recompute], dtype=np.int64)
    hsdp_raw = _hsdp_choices(c, fixed)
    n_dt = len(c.dtypes)
    later = [len(ep_raw) * len(etp_choices), len(mb_raw), len(vpp_raw),
             len(sched_raw) * 2 * 4 * len(rc_raw) * (1 if hsdp_raw is None else len(hsdp_raw)), n_dt]

    def scale(stage: int) -> int:
        return int(np.prod(later[stage:], dtype=np.int64))

    pruned: dict[str, int] = {}
    count = _Counter(pruned)

    dp, tp, pp, cp = _factorisations(lo, hi)
    raw_size = len(dp) * scale(0)
    h, kv = model.num_heads, model.num_kv_heads
    ok = count.apply([
        ("fixed", _allowed(fixed, "dp", dp) & _allowed(fixed, "tp", tp) & _allowed(fixed, "pp", pp)
         & _allowed(fixed, "cp", cp)),
        ("max_tp", tp <= c.max_tp),
        ("heads", h % tp == 0),
        ("kv_heads", tp_splits_kv_heads(kv, tp, c.kv_head_replication)),
        ("ffn", model.ffn_hidden_size % tp == 0),
        # every group tiles the scale-up domain (check_cluster's rule: topology.groups_tile_node),
        # here with ep 1 and no shard group: the tp, cp and dp groups; the ep and the shard group
        # are checked by the same rule where their axes are crossed in
        ("scaleup", groups_tile_node(c.scaleup_gpus, dp * tp * pp * cp, tp, cp, dp) if c.scaleup_gpus else True),
        ("layers", pp <= L),
        # the searched context-parallel flavours' sequence split (validate_config.sequence_split_ok:
        # 2 * cp equal chunks for every flavour)
        ("sequence", _all_kinds(c, lambda k: sequence_split_ok(model.seq_len, cp, tp, False, k))),
        # Ulysses splits each tp rank's query and key/value heads over cp (check_config's rule)
        ("heads", _all_kinds(c, lambda k: (cp == 1) | (k != "ulysses") | ulysses_heads_ok(h, kv, tp, cp))),
        ("batch", gbs % dp == 0),
        ("stack", ~lacked_use(lacks, pp=pp, cp=cp)),
    ], len(dp), scale(0))
    cols = {"dp": dp[ok], "tp": tp[ok], "pp": pp[ok], "cp": cp[ok]}

    # each ep crossed with each searched expert TP choice (``SearchConstraints.expert_tp_choices``)
    cols = _cross(cols, np.arange(len(ep_raw) * len(etp_choices), dtype=np.int64), "ep")
    choice = cols["ep"] % len(etp_choices)
    cols["ep"] = ep_raw[cols["ep"] // len(etp_choices)]
    by_choice = np.stack([expert_tp_for(e, cols["tp"], cols["ep"]) for e in etp_choices])
    cols["etp"] = np.take_along_axis(by_choice, choice[None, :], 0)[0]
    # a choice whose etp an earlier choice already gives this row (tp 1: tp and one agree)
    repeat = (by_choice == cols["etp"][None, :]) & (np.arange(len(etp_choices))[:, None] < choice[None, :])
    ok = count.apply([
        ("fixed", _allowed(fixed, "ep", cols["ep"]) & _allowed(fixed, "etp", cols["etp"])),
        ("etp_repeat", ~repeat.any(axis=0)),
        ("experts", (experts % cols["ep"] == 0)
         & ((cols["dp"] * cols["cp"] * cols["tp"]) % (cols["ep"] * cols["etp"]) == 0)
         & (not c.ep_carved_from_dp or (cols["dp"] % cols["ep"] == 0))),
        ("stack", ~lacked_use(lacks, ep=cols["ep"])),
        # and with the expert-parallel group (ep x etp) too
        ("scaleup", groups_tile_node(c.scaleup_gpus, cols["dp"] * cols["tp"] * cols["pp"] * cols["cp"], cols["tp"],
                                     cols["cp"], cols["dp"], ep=cols["ep"], etp=cols["etp"])
         if c.scaleup_gpus else np.ones(len(cols["ep"]), dtype=bool)),
    ], len(cols["ep"]), scale(1))
    cols = _keep(cols, ok)

    cols = _cross(cols, mb_raw, "micro_batch")
    ok = count.apply([
        ("fixed", _allowed(fixed, "micro_batch", cols["micro_batch"])),
        ("batch", (gbs // cols["dp"]) % cols["micro_batch"] == 0),
    ], len(cols["dp"]), scale(2))
    cols = _keep(cols, ok)

    cols = _cross(cols, vpp_raw, "vpp")
    v, p = cols["vpp"], cols["pp"]
    m = gbs // (cols["dp"] * cols["micro_batch"])
    ok = count.apply([
        ("fixed", _allowed(fixed, "vpp", v)),
        ("vpp_needs_pp", (v == 1) | (p > 1)),
        ("layers", ~needs_uneven_split(L, p, v, Schedule.INTERLEAVED)),
        ("batch", (v == 1) | (m % p == 0)),
        ("stack", ~lacked_use(lacks, vpp=v)),
    ], len(v), scale(3))
    cols = _keep(cols, ok)

    # the last axes together: one (rows x combinations) mask
    if hsdp_raw is None:
        sched, sp, zero, rc = (a.ravel() for a in np.meshgrid(sched_raw, sp_raw, zero_raw, rc_raw, indexing="ij"))
        hs = np.zeros(len(sched), dtype=np.int64)
    else:
        sched, sp, zero, rc, hs = (a.ravel() for a in np.meshgrid(sched_raw, sp_raw, zero_raw, rc_raw, hsdp_raw,
                                                                  indexing="ij"))
    shard = largest_zero_group(cols["dp"], cols["cp"], cols["tp"], cols["ep"], cols["etp"], model.moe is not None)
    n_base = len(cols["dp"])
    shape = (n_base, len(sched))

    def grid(mask):
        return np.broadcast_to(mask, shape)

    two_chunks = (SCHEDULE_CODES[Schedule.ZB_V], SCHEDULE_CODES[Schedule.DUALPIPE])
    zero_bubble = np.isin(sched, [SCHEDULE_CODES[Schedule(s)] for s in ZERO_BUBBLE_SCHEDULES])
    m_all = gbs // (cols["dp"] * cols["micro_batch"])
    ok = count.apply2d([
        ("fixed", grid(_allowed(fixed, "schedule", sched)[None, :])),
        ("schedule", _by_schedule(sched, n_base, lambda code: (code == SCHEDULE_CODES[Schedule.INTERLEAVED])
                                  == (cols["vpp"] > 1))),
        # ZB-V: 2 chunks per rank on one copy (2 pp positions); DualPipe: pp positions per copy
        ("layers", _by_schedule(sched, n_base, lambda code: (code not in two_chunks)
                                | ((1 if code == SCHEDULE_CODES[Schedule.DUALPIPE] else 2) * cols["pp"]
                                   <= L + model.mtp_layers))),
        # DualPipe pairs rank i with p-1-i and feeds micro-batches from both ends
        # (``pipeline.schedules``): an even p and an even m >= 2p
        ("dualpipe", _by_schedule(sched, n_base, lambda code: (code != SCHEDULE_CODES[Schedule.DUALPIPE])
                                  | ((cols["pp"] % 2 == 0) & (m_all % 2 == 0) & (m_all >= 2 * cols["pp"])))),
        ("one_stage", _by_combination(n_base, [zero_bubble], lambda i: ~zero_bubble[i] | (cols["pp"] > 1))),
        # a full recomputation of N layers a chunk needs a chunk of at least N layers (check_config)
        ("layers", _by_schedule(sched, n_base, lambda code: largest_chunk_layers(L + model.mtp_layers, cols["pp"], cols["vpp"],
                                                                         code) >= c.recompute_num_layers)),
        ("flush_size", _flush_sizes(sched, cols["pp"], m_all, cols["vpp"])),
        ("fixed", grid(_allowed(fixed, "sequence_parallel", sp)[None, :])),
        ("sp_needs_tp", _by_combination(n_base, [sp], lambda i: (sp[i] == 0) | (cols["tp"] > 1))),
        # sequence parallelism splits each cp rank's seq_len / cp tokens over tp (check_config's rule)
        ("sequence", _by_combination(n_base, [sp], lambda i: _all_kinds(c, lambda k: sequence_split_ok(
            model.seq_len, cols["cp"], cols["tp"], bool(sp[i] == 1), k)))),
        ("fixed", grid(_allowed(fixed, "zero_stage", zero)[None, :])),
        # a ZeRO stage the request fixed is kept (as zero2_is_zero1 keeps a fixed ZeRO-2): simulate
        # runs it, and dropping it left ``--dp 1 --zero 1`` no layout, blamed on the global batch
        ("dominated_zero_without_dp", _by_combination(n_base, [zero], lambda i: (not c.prune_dominated)
                                                      | (zero[i] == 0) | (shard > 1) | ("zero_stage" in fixed))),
        ("zero2_is_zero1", grid(((zero != 2) | (not c.zero2_is_zero1) | ("zero_stage" in fixed))[None, :])),
        ("fixed", grid(_allowed(fixed, "recompute", rc)[None, :])),
        *_hsdp_rules(cols, c, fixed, zero, hs),
        ("stack", _by_combination(n_base, [sp, zero, zero_bubble, rc], lambda i: ~lacked_use(
            lacks, pp=cols["pp"], sequence_parallel=bool(sp[i] == 1) & (cols["tp"] > 1),
            moe_tp_without_sp=(model.moe is not None) & bool(sp[i] == 0) & (cols["tp"] > 1),
            zero_stage=zero[i], zero_bubble=zero_bubble[i], selective=rc[i] == RECOMPUTE_CODES[Recompute.SELECTIVE]))),
        # the planner's selective rows recompute the stack's selective modules, never ``moe``
        ("ep_overlap", _by_combination(n_base, [zero_bubble, rc], lambda i: (not c.ep_comm_overlap) | ep_overlap_runnable(
            ep=cols["ep"], pp=cols["pp"], vpp=cols["vpp"], own_schedule=zero_bubble[i],
            full_recompute=rc[i] == RECOMPUTE_CODES[Recompute.FULL], moe_recompute=False,
            full_precision=all(d in FULL_PRECISION_DTYPES for d in c.dtypes), mtp_layers=model.mtp_layers))),
    ], shape, n_dt)
    pruned = {k: pruned.get(k, 0) for k in RULES if k != "memory"}
    combos = {"schedule": sched, "sequence_parallel": sp, "zero_stage": zero, "recompute": rc}
    if hsdp_raw is not None:
        combos["hsdp_choice"] = hs

    # Order: each chunk's rows sorted by the layer key (step_model.LAYER_KEY_FIELDS: tp, cp,
    # micro_batch, sequence_parallel, recompute, ep, ...), stably (within a key, enumeration
    # order), so the step model computes each layer's costs once per run of equal keys. The key
    # is split into the base rows' major part (tp, cp, micro_batch) and minor part (ep), and
    # the combinations' part (sequence_parallel, recompute) that sits between them.
    uniques = {k: np.unique(v) for k, v in cols.items()}
    major = _codes(cols, uniques, [k for k in LAYER_KEY_FIELDS[:LAYER_KEY_FIELDS.index("sequence_parallel")]])
    minor = _codes(cols, uniques, [k for k in LAYER_KEY_FIELDS[LAYER_KEY_FIELDS.index("recompute") + 1:]])
    base_order = np.lexsort((minor, major))          # stable: equal keys keep enumeration order
    cols = {k: v[base_order] for k, v in cols.items()}
    major = major[base_order]
    ok = ok[base_order]
    # combinations grouped by their key part (stable): axis 1 of ``grouped`` is that part
    middle = np.unique(sp * len(rc_raw) + np.searchsorted(rc_raw, rc), return_inverse=True)[1].ravel()
    by_middle = np.argsort(middle, kind="stable")
    n_middle = int(middle.max()) + 1           # every (sp, rc) pair has the same combinations
    per_row = np.count_nonzero(ok, axis=1)
    total = int(per_row.sum())
    if max_rows is None or total <= max_rows:
        bounds = [0, len(per_row)]
    else:
        ends = np.searchsorted(np.cumsum(per_row), np.arange(max_rows, total, max_rows), side="right")
        bounds = [0] + sorted(set(int(e) for e in ends if 0 < e < len(per_row))) + [len(per_row)]
    offsets = np.concatenate([[0], np.cumsum(per_row)])[bounds]
    return SpaceBase(columns=cols, combos=combos, ok=ok, major=major, middle=middle, by_middle=by_middle,
                     n_middle=n_middle,
                     bounds=tuple(bounds), offsets=tuple(int(o) for o in offsets), pruned=pruned,
                     raw_size=raw_size, dtypes=tuple(c.dtypes), global_batch=gbs, total=total,
                     hsdp_gpus=int(c.hsdp_gpus))


@dataclass(frozen=True)
class SpaceBase:
    """A pruned search space before its rows are built: the base rows (every axis but the
    last four, sorted by their layer-key part) and, per base row, which of the combinations of
    the last four axes (schedule, sequence parallel, ZeRO, recompute) survive.

    ``chunk(i)`` builds chunk ``i``'s rows (base rows ``bounds[i]:bounds[i+1]``) as a
    ``SearchSpace`` sorted by the layer key (``step_model.LAYER_KEY_FIELDS``; within a key,
    enumeration order); together the chunks hold every row once, chunk ``i``'s numbered from
    ``offsets[i]`` (one chunk: the whole space in that order). ``pick`` builds chosen rows;
    ``rank`` numbers rows in the order of the whole space, however it is chunked.
    """

    columns: Mapping[str, np.ndarray]
    combos: Mapping[str, np.ndarray]
    ok: np.ndarray
    major: np.ndarray
    middle: np.ndarray
    by_middle: np.ndarray
    n_middle: int
    bounds: tuple[int, ...]
    offsets: tuple[int, ...]
    pruned: Mapping[str, int]
    raw_size: int
    dtypes: tuple[str, ...]
    global_batch: int
    total: int
    hsdp_gpus: int = 0

    @property
    def n_chunks(self) -> int:
        return len(self.bounds) - 1

    def chunk(self, i: int) -> tuple[SearchSpace, np.ndarray, np.ndarray]:
        """(chunk ``i`` as a ``SearchSpace``, its base-row index and combination index per row)."""
        start, stop = self.bounds[i], self.bounds[i + 1]
        grouped = self.ok[start:stop][:, self.by_middle].reshape(stop - start, self.n_middle,
                                                                   self.ok.shape[1] // self.n_middle)
        mid, rows, j = np.nonzero(grouped.transpose(1, 0, 2))           # middle key part major
        combo = self.by_middle[mid * grouped.shape[2] + j]
        rows += start
        # then the major part first: base rows are sorted by (major, minor), so a stable sort by
        # major alone gives (major, middle, minor, enumeration order)
        major = self.major[rows]
        if len(major) and major.max() < 2**16:
            major = major.astype(np.uint16)          # numpy sorts 16-bit keys stably by radix
        order = np.argsort(major, kind="stable")
        rows, combo = rows[order], combo[order]
        return self.pick(rows, combo), rows, combo

    def rank(self, rows: np.ndarray, combo: np.ndarray) -> np.ndarray:
        """Numbers increasing with the rows' order in the whole, unchunked space: layer key
        (major part of the base row, the combination's middle part, then the base row, which
        carries the minor part and the enumeration order), then the combination."""
        rows, combo = np.asarray(rows, dtype=np.int64), np.asarray(combo, dtype=np.int64)
        n_base, n_combo = len(self.major), len(self.middle)
        return ((self.major[rows] * self.n_middle + self.middle[combo]) * n_base + rows) * n_combo + combo

    def pick(self, rows: np.ndarray, combo: np.ndarray) -> SearchSpace:
        """The configurations (base row ``rows[k]``, combination ``combo[k]``) as a space, in
        the order given."""
        columns = {k: v[rows] for k, v in self.columns.items()}
        columns.update({k: v[combo] for k, v in self.combos.items() if k != "hsdp_choice"})
        choice = self.combos["hsdp_choice"][combo] if "hsdp_choice" in self.combos else np.zeros(len(rows), np.int64)
        columns["zero_shard_group"] = _shard_group(choice, columns["tp"], self.hsdp_gpus)
        return SearchSpace(columns=columns, pruned=self.pruned, raw_size=self.raw_size, dtypes=self.dtypes,
                           global_batch=self.global_batch, space_rows=self.total)


def _codes(cols: Mapping[str, np.ndarray], uniques: Mapping[str, np.ndarray], names) -> np.ndarray:
    """The values of ``names`` (first most significant) as one dense integer code per row."""
    key = np.zeros(len(next(iter(cols.values()))), dtype=np.int64)
    for name in names:
        if name in cols:
            u = uniques[name]
            key = key * len(u) + np.searchsorted(u, cols[name])
    return key


#: the ``hsdp_choice`` combination value meaning "one node's data-parallel ranks"
_NODE_GROUP = -1


def _hsdp_choices(c: SearchConstraints, fixed: Mapping) -> np.ndarray | None:
    """Values of the hybrid-sharding axis: 0 (shard over every dp*cp rank), ``_NODE_GROUP``
    (``hsdp_gpus / tp`` ranks) when searched, and the group sizes ``--fix zero_shard_group``
    names; None when the axis has only 0. Where ``--fix zero_shard_group`` names sizes, 0 is on the
    axis only if it is one of them: its rows would all be pruned as ``fixed``, and counting them
    made a fixed group widen the reported space beyond the unrestricted one (the same rows survive,
    in the same order)."""
    named = {int(v) for v in fixed.get("zero_shard_group", ())}
    values = {0} if not named or 0 in named else set()
    if c.hsdp_gpus:
        values.add(_NODE_GROUP)
    values.update(named)
    return None if values == {0} else np.array(sorted(values), dtype=np.int64)


def _shard_group(choice, tp, hsdp_gpus: int) -> np.ndarray:
    """``zero_shard_group`` of a row from its ``hsdp_choice`` and tensor-parallel degree."""
    # broadcast first: without hsdp_gpus the node group is 0, and it must still take tp's shape
    # (--fix zero_shard_group with --no-hsdp had returned one row for every (tp, dp*cp) pair)
    choice, tp = np.broadcast_arrays(np.asarray(choice, dtype=np.int64), np.asarray(tp, dtype=np.int64))
    node = hsdp_gpus // np.maximum(tp, 1) if hsdp_gpus else np.zeros_like(choice)
    return np.where(choice == _NODE_GROUP, node, choice)


def _hsdp_rules(cols: dict, c: SearchConstraints, fixed: Mapping, zero, hs) -> list:
    """The rules of the hybrid-sharding axis over (base rows x combinations): a value ``--fix``
    excludes is ``fixed``; a shard group that is not a proper divisor >= 2 of dp*cp, or is asked
    of ZeRO-0 (ZeRO-1 too unless ``--fix zero_shard_group`` names it: one reduction per step
    gains little from it), is ``hsdp``."""
    # the rules read a base row's (tp, cp, dp, pp, ep) only: evaluated once per distinct tuple (a
    # few dozen against millions of base rows), then spread to the rows
    names = ("tp", "cp", "dp", "pp", "ep")
    spans = [int(cols[k].max()) + 1 if len(cols[k]) else 1 for k in names]
    code = np.zeros(len(cols["tp"]), dtype=np.int64)
    for k, s in zip(names, spans):
        code = code * s + cols[k]
    distinct, inverse = np.unique(code, return_inverse=True)
    inverse = inverse.reshape(-1)
    parts = {}
    for k, s in zip(reversed(names), reversed(spans)):
        parts[k], distinct = (distinct % s)[:, None], distinct // s
    tp = parts["tp"]
    group = _shard_group(hs[None, :], tp, c.hsdp_gpus)
    dpc = parts["dp"] * parts["cp"]
    g = int(c.scaleup_gpus)
    rules = []
    if "zero_shard_group" in fixed:
        allowed = np.isin(group, np.asarray(fixed["zero_shard_group"], dtype=np.int64))
        rules.append(("fixed", _Gathered(allowed, rows=inverse)))
    min_zero = 1 if "zero_shard_group" in fixed else 2
    # a named group of all dp*cp ranks is ZeRO over all of them, as simulate reads it; the search
    # keeps it under the name given unless 0 is named too (then the row of group 0 is that plan)
    named = {int(v) for v in fixed.get("zero_shard_group", ())}
    whole = (group == dpc) if named and 0 not in named else np.zeros_like(group, dtype=bool)
    valid = (group == 0) | ((zero[None, :] >= min_zero) & (group >= 2) & ((group < dpc) | whole)
                            & (dpc % np.maximum(group, 1) == 0))
    # an axis value giving a row the group an earlier value gives it (one node's ranks, 8 / tp,
    # and a --fix zero_shard_group of the same size) is the same configuration again
    axis = np.unique(hs)
    axis_group = _shard_group(axis[None, :], tp, c.hsdp_gpus)
    repeat = np.zeros(axis_group.shape, dtype=bool)
    for j in range(1, len(axis)):        # a handful of axis values
        repeat[:, j] = (axis_group[:, :j] == axis_group[:, j:j + 1]).any(axis=1)
    valid &= ~repeat[:, np.searchsorted(axis, hs)]
    rules.append(("hsdp", _Gathered(valid, rows=inverse)))
    if g:   # every group, the shard group's tp x group consecutive ranks too (check_cluster's rule)
        tiles = groups_tile_node(g, dpc * tp * parts["pp"], tp, parts["cp"], parts["dp"], ep=parts["ep"],
                                 zero_shard_group=group)
        rules.append(("scaleup", _Gathered(tiles, rows=inverse)))
    return rules


def divisibility_only(model: ModelSpec, gpus: tuple[int, int], global_batch: int, max_tp: int,
                      fixed: Mapping[str, tuple] | None = None,
                      kv_head_replication: bool = False) -> dict[str, np.ndarray]:
    """The (dp, tp, pp, cp) factorisations that pass every degree rule, batch aside.

    Used to say what would make an infeasible request feasible; ``dp`` is returned so the
    caller can test batch sizes.
    """
    dp, tp, pp, cp = _factorisations(*gpus)
    fixed = coded(fixed or {})
    h, kv = model.num_heads, model.num_kv_heads
    ok = (_allowed(fixed, "dp", dp) & _allowed(fixed, "tp", tp) & _allowed(fixed, "pp", pp)
          & _allowed(fixed, "cp", cp) & (tp <= max_tp) & (h % tp == 0) & tp_splits_kv_heads(kv, tp, kv_head_replication)
          & (model.ffn_hidden_size % tp == 0) & (pp <= model.num_layers)
          & sequence_split_ok(model.seq_len, cp, tp, False))
    return {"dp": dp[ok], "tp": tp[ok], "pp": pp[ok], "cp": cp[ok], "n": (dp * tp * pp * cp)[ok]}
