"""The plan search space: every configuration of a job, enumerated with numpy, with pruning counts.

The raw space is the product of

    ordered factorisations dp*tp*pp*cp = n for every GPU count n asked for
    x ep (divisors of the expert count; 1 for dense models)
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

from model_specs.model_spec import ModelSpec
from simulator.config_batch import RECOMPUTE_CODES, SCHEDULE_CODES
from simulator.parallel_config import Recompute, Schedule
from simulator.step_model import LAYER_KEY_FIELDS

#: why a candidate was removed, in the order the rules are applied (keys of ``SearchSpace.pruned``).
RULES = {
    "fixed": "a value the request fixed or excluded (--fix, --tp, ...)",
    "max_tp": "tp above the maximum (default: GPUs per node, the NVLink domain)",
    "heads": "tp does not divide the attention heads",
    "kv_heads": "tp and the key/value heads do not divide each other",
    "ffn": "tp does not divide the FFN width",
    "layers": "pp above the layer count, or pp*vpp not dividing the layers (or layers + 2)",
    "sequence": "cp does not divide the sequence length",
    "batch": "dp*micro_batch does not divide the global batch (or, interleaved, the micro-batch count is not a multiple of pp)",
    "experts": "ep does not divide the experts, or does not divide dp*cp*tp",
    "vpp_needs_pp": "virtual pipeline stages with pp = 1",
    "schedule": "schedule does not match vpp (interleaved needs vpp > 1; vpp > 1 is always interleaved)",
    "sp_needs_tp": "sequence parallel on with tp = 1 (the same configuration as off)",
    "dominated_zero_without_dp": "ZeRO 1-3 with a data-parallel group of 1 (nothing to shard: ZeRO-0 or worse)",
    "hsdp": "hybrid sharding whose shard group is not a proper divisor (>= 2) of dp*cp",
    "memory": "does not fit in HBM minus the headroom (evaluated)",
}

RECOMPUTE_NAMES = tuple(r.value for r in Recompute)           # index = code
SCHEDULE_NAMES = tuple(s.value for s in Schedule)             # index = code
DEFAULT_SCHEDULES = (Schedule.ONE_F_ONE_B.value, Schedule.INTERLEAVED.value)
#: the fields a request may fix (``--fix name=value``) and the axis each belongs to.
FIXABLE = ("dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "zero_stage", "recompute",
           "sequence_parallel", "schedule", "zero_shard_group")


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


@dataclass(frozen=True)
class SearchSpace:
    """The surviving rows as int64 columns (codes for recompute and schedule), one dtype-free
    row per configuration; evaluate once per dtype.

    ``pruned`` maps each rule of ``RULES`` (except ``memory``) to the raw configurations it
    removed; ``raw_size`` = sum(pruned) + len(self) * len(dtypes).
    """

    columns: Mapping[str, np.ndarray]
    pruned: Mapping[str, int]
    raw_size: int
    dtypes: tuple[str, ...]
    global_batch: int

    def __len__(self) -> int:
        return int(len(self.columns["dp"]))


class _Counter:
    """Applies rules in order to a stage's rows; counts each dropped row once, scaled."""

    def __init__(self, pruned: dict):
        self.pruned = pruned

    def apply(self, rules: list[tuple[str, np.ndarray]], n_rows: int, scale: int) -> np.ndarray:
        return self.apply2d(rules, (n_rows,), scale)

    def apply2d(self, rules: list[tuple[str, np.ndarray]], shape: tuple, scale: int) -> np.ndarray:
        alive = np.ones(shape, dtype=bool)
        for name, ok in rules:
            fail = alive & ~np.asarray(ok, dtype=bool)
            self.pruned[name] = self.pruned.get(name, 0) + int(np.count_nonzero(fail)) * scale
            alive &= ~fail
        return alive


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


def _allowed(fixed: Mapping[str, tuple], name: str, values: np.ndarray) -> np.ndarray:
    if name not in fixed:
        return np.ones(len(values), dtype=bool)
    return np.isin(values, np.asarray(fixed[name]))


def _factorisations(lo: int, hi: int) -> tuple[np.ndarray, ...]:
    """All ordered (dp, tp, pp, cp) with dp*tp*pp*cp = n, lo <= n <= hi."""
    if hi - lo < 16:      # a few counts: a grid over each count's divisors is cheapest
        parts = []
        for n in range(lo, hi + 1):
            d = divisors(n)
            tp, pp, cp = (a.ravel() for a in np.meshgrid(d, d, d, indexing="ij"))
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


def micro_batch_candidates(global_batch: int, max_micro_batch: int | None) -> np.ndarray:
    mb = divisors(global_batch)
    return mb[mb <= max_micro_batch] if max_micro_batch else mb


def vpp_candidates(num_layers: int) -> np.ndarray:
    return np.union1d(divisors(num_layers), divisors(num_layers + 2))


def enumerate_space(model: ModelSpec, c: SearchConstraints) -> SearchSpace:
    """Enumerate and prune the configurations of ``model`` under constraints ``c``."""
    L, gbs, fixed = model.num_layers, c.global_batch, coded(c.fixed)
    experts = model.moe.num_experts if model.moe is not None else 1
    ep_raw = divisors(experts) if model.moe is not None else np.ones(1, dtype=np.int64)
    mb_raw = micro_batch_candidates(gbs, c.max_micro_batch)
    vpp_raw = vpp_candidates(L)
    sched_raw = np.array([SCHEDULE_CODES[Schedule(s)] for s in c.schedules], dtype=np.int64)
    sp_raw = np.array([0, 1], dtype=np.int64)
    zero_raw = np.arange(4, dtype=np.int64)
    rc_raw = np.array([RECOMPUTE_CODES[r] for r in Recompute], dtype=np.int64)
    n_dt = len(c.dtypes)
    later = [len(ep_raw), len(mb_raw), len(vpp_raw), len(sched_raw) * 2 * 4 * len(rc_raw), n_dt]

    def scale(stage: int) -> int:
        return int(np.prod(later[stage:], dtype=np.int64))

    pruned: dict[str, int] = {}
    count = _Counter(pruned)

    dp, tp, pp, cp = _factorisations(*c.gpus)
    raw_size = len(dp) * scale(0)
    h, kv = model.num_heads, model.num_kv_heads
    ok = count.apply([
        ("fixed", _allowed(fixed, "dp", dp) & _allowed(fixed, "tp", tp) & _allowed(fixed, "pp", pp)
         & _allowed(fixed, "cp", cp)),
        ("max_tp", tp <= c.max_tp),
        ("heads", h % tp == 0),
        ("kv_heads", (kv % tp == 0) | (tp % kv == 0)),
        ("ffn", model.ffn_hidden_size % tp == 0),
        ("layers", pp <= L),
        ("sequence", model.seq_len % cp == 0),
        ("batch", gbs % dp == 0),
    ], len(dp), scale(0))
    cols = {"dp": dp[ok], "tp": tp[ok], "pp": pp[ok], "cp": cp[ok]}

    cols = _cross(cols, ep_raw, "ep")
    ok = count.apply([
        ("fixed", _allowed(fixed, "ep", cols["ep"])),
        ("experts", (experts % cols["ep"] == 0) & ((cols["dp"] * cols["cp"] * cols["tp"]) % cols["ep"] == 0)),
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
    chunks = p * v
    m = gbs // (cols["dp"] * cols["micro_batch"])
    ok = count.apply([
        ("fixed", _allowed(fixed, "vpp", v)),
        ("vpp_needs_pp", (v == 1) | (p > 1)),
        ("layers", (v == 1) | (L % chunks == 0) | ((L + 2) % chunks == 0)),
        ("batch", (v == 1) | (m % p == 0)),
    ], len(v), scale(3))
    cols = _keep(cols, ok)

    # the last four axes together: one (rows x combinations) mask, one gather
    sched, sp, zero, rc = (a.ravel() for a in np.meshgrid(sched_raw, sp_raw, zero_raw, rc_raw, indexing="ij"))
    t = cols["tp"][:, None]
    inter = (sched == SCHEDULE_CODES[Schedule.INTERLEAVED])[None, :]
    shard = cols["dp"] * cols["cp"]
    if model.moe is not None:     # expert states shard over dp*cp*tp/ep (expert data parallel)
        shard = np.maximum(shard, shard * cols["tp"] // cols["ep"])
    shape = (len(cols["dp"]), len(sched))
    dominated = np.full(shape, c.prune_dominated)

    def grid(mask):
        return np.broadcast_to(mask, shape)

    two_chunks = np.isin(sched, [SCHEDULE_CODES[Schedule.ZB_V], SCHEDULE_CODES[Schedule.DUALPIPE]])[None, :]
    ok = count.apply2d([
        ("fixed", grid(_allowed(fixed, "schedule", sched)[None, :])),
        ("schedule", grid(inter == (cols["vpp"] > 1)[:, None])),
        ("layers", grid(~two_chunks | (2 * cols["pp"] <= L + model.mtp_layers)[:, None])),   # 2 chunks per rank
        ("fixed", grid(_allowed(fixed, "sequence_parallel", sp)[None, :])),
        ("sp_needs_tp", grid((sp == 0)[None, :] | (t > 1))),
        ("fixed", grid(_allowed(fixed, "zero_stage", zero)[None, :])),
        ("dominated_zero_without_dp", ~dominated | (zero == 0)[None, :] | (shard > 1)[:, None]),
        ("fixed", grid(_allowed(fixed, "recompute", rc)[None, :])),
    ], shape, n_dt)
    rows, combo = np.nonzero(ok)
    cols = {k: v[rows] for k, v in cols.items()}
    cols.update(schedule=sched[combo], sequence_parallel=sp[combo], zero_stage=zero[combo], recompute=rc[combo])
    cols, raw_size = _hsdp_axis(cols, c, fixed, count, raw_size, n_dt)
    # rows that share a layer key (step_model.LAYER_KEY_FIELDS) next to each other: the step
    # model then computes each layer's costs once per run of equal keys (stable, so the order
    # within a key is the enumeration's)
    order = np.lexsort([cols[k] for k in reversed(LAYER_KEY_FIELDS) if k in cols])
    cols = {k: v[order] for k, v in cols.items()}

    return SearchSpace(columns=cols, pruned={k: pruned.get(k, 0) for k in RULES if k != "memory"},
                       raw_size=raw_size, dtypes=tuple(c.dtypes), global_batch=gbs)


def _hsdp_axis(cols: dict, c: SearchConstraints, fixed: Mapping, count: _Counter, raw_size: int, n_dt: int):
    """Every ZeRO 2-3 row (1-3 when ``--fix zero_shard_group`` asks) again with its states sharded
    over groups of G data-parallel ranks
    (``zero_shard_group``): one node's, ``hsdp_gpus / tp``, or the values ``--fix`` gives, when
    G is a proper divisor >= 2 of dp*cp. The raw size grows by the rows tried; those removed
    are counted under ``hsdp`` (and the plain rows under ``fixed`` when only HSDP is asked)."""
    n = len(cols["dp"])
    cols["zero_shard_group"] = np.zeros(n, dtype=np.int64)
    if "zero_shard_group" in fixed:
        groups = [int(v) for v in fixed["zero_shard_group"] if int(v) > 0]
        keep_plain = 0 in fixed["zero_shard_group"]
    else:
        groups = [None] if c.hsdp_gpus else []
        keep_plain = True
    if not groups:
        return cols, raw_size
    dpc = cols["dp"] * cols["cp"]
    # searched with ZeRO-2/3, whose per-layer and per-micro-batch collectives it keeps inside a
    # node; ZeRO-1 only when asked for (its traffic is one reduction per step either way)
    candidate = np.flatnonzero(cols["zero_stage"] >= (1 if "zero_shard_group" in fixed else 2))
    parts = [cols] if keep_plain else []
    if not keep_plain:
        count.pruned["fixed"] = count.pruned.get("fixed", 0) + n * n_dt
    for g in groups:
        group = (c.hsdp_gpus // cols["tp"] if g is None else np.full(n, g, dtype=np.int64))[candidate]
        raw_size += len(candidate) * n_dt
        ok = count.apply([("hsdp", (group >= 2) & (group < dpc[candidate]) & (dpc[candidate] % np.maximum(group, 1) == 0))],
                         len(candidate), n_dt)
        extra = {k: v[candidate[ok]] for k, v in cols.items()}
        extra["zero_shard_group"] = group[ok]
        parts.append(extra)
    return {k: np.concatenate([p[k] for p in parts]) for k in cols}, raw_size


def divisibility_only(model: ModelSpec, gpus: tuple[int, int], global_batch: int, max_tp: int,
                      fixed: Mapping[str, tuple] | None = None) -> dict[str, np.ndarray]:
    """The (dp, tp, pp, cp) factorisations that pass every degree rule, batch aside.

    Used to say what would make an infeasible request feasible; ``dp`` is returned so the
    caller can test batch sizes.
    """
    dp, tp, pp, cp = _factorisations(*gpus)
    fixed = coded(fixed or {})
    h, kv = model.num_heads, model.num_kv_heads
    ok = (_allowed(fixed, "dp", dp) & _allowed(fixed, "tp", tp) & _allowed(fixed, "pp", pp)
          & _allowed(fixed, "cp", cp) & (tp <= max_tp) & (h % tp == 0) & ((kv % tp == 0) | (tp % kv == 0))
          & (model.ffn_hidden_size % tp == 0) & (pp <= model.num_layers) & (model.seq_len % cp == 0))
    return {"dp": dp[ok], "tp": tp[ok], "pp": pp[ok], "cp": cp[ok], "n": (dp * tp * pp * cp)[ok]}
