"""``plan_heterogeneous``: the fastest training plan on a mixed cluster, next to each pool alone.

    result = plan_heterogeneous("llama3-70b", load_pooled_cluster("a100-h100.yaml"),
                                global_batch_tokens=4 * 2**20)
    result.best                 # HeteroPlan of the fastest plan that fits
    result.comparison()         # best mixed plan vs only the fastest pool vs only the largest pool
    print(result.explain)       # where the time goes on each pool

Search: for every subset of the pools (so adding a pool can never lower the best plan: the
plans without it are still candidates, each subset in the dtype it would run alone unless the
request fixes one), pools the cost model cannot tell apart (same GPU,
fabric and efficiency model, joined at their own scale-out speed) are merged into one, and a
set of at most ``MAX_UNMERGED_POOLS`` is searched unmerged as well (``searched_forms``: the
merged pool runs one pipeline shape, so a faster link that lets pools merge must not drop the
mixes across them); a single pool gets every pipeline of every tensor-parallel degree, depth
and replica count (``hetero_candidates.single_pool``), a set of pools the data-parallel and
pipeline mixes. Every candidate's layers are split by each pool's speed (``hetero_split``) and
it is scored by ``simulator.heterogeneous.compose``, the function ``simulate_heterogeneous``
uses: the table's numbers are the simulator's. A plan found on merged pools is exported on the
file's own pools (``planners.hetero_unmerge``), with its simulation there.
"""
from __future__ import annotations

import functools
import itertools
import time
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from hardware_specs.catalog import load_stack
from hardware_specs.mfu_reference import reference_name
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError, shown, whole_number
from hardware_specs.pools import Pool, PooledCluster
from hardware_specs.stack_spec import StackSpec
from model_specs.model_spec import ModelSpec
from planners import hetero_candidates as cand
from planners import hetero_idle
from planners import hetero_options as opts
from planners import hetero_unmerge as unmerge
from planners.hetero_explain import explain_text, layout_text
from planners.hetero_pipelines import Layout, Pipelines, fits_memory, lay_out, layer_cap_bound, might_fit
from planners.infeasible import sequence_text
from planners.plan import resolve_global_batch
from simulator import headroom
from simulator.config_batch import RECOMPUTE_CODES
from simulator.heterogeneous.compose import compose
from simulator.heterogeneous.plan import HeteroPlan, ReplicaGroup, StagePlacement, plan_switches
from simulator.heterogeneous.report import HeteroReport
from simulator.heterogeneous.simulate import model_and_pools, simulate_heterogeneous
from simulator.stack_support import lacked_use
from simulator.heterogeneous.unit_costs import pool_efficiencies, unit_costs
from simulator.parallel_config import ParallelConfig, Recompute
from simulator.stack_defaults import stack_config_fields

GIB = 2**30
_RECOMPUTE_NAMES = {code: r.value for r, code in RECOMPUTE_CODES.items()}
#: kinds of plan in the ranked table
SINGLE, DP_MIX, PP_MIX = "single-pool", "data-parallel mix", "pipeline mix"
#: ranked-table columns (units in the names)
TABLE_COLUMNS = ("kind", "pools", "n_gpus", "layout", "micro_batch", "zero_stage", "recompute", "sequence_parallel",
                 "dtype", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "mfu_reference", "memory_gib")
#: templates per pool and shared key that enter the data-parallel mixes, and pipeline mixes per
#: shared key that reach the exact score
DEFAULT_KEEP = 6
#: sets of at most this many pools keep, in their data-parallel mixes, each pool's templates that
#: a smaller size of it keeps (``_templates_kept``)
MAX_PACKED_POOLS = 2
#: sequences per step the search accepts (its micro-batch candidates are the batch's divisors)
MAX_GLOBAL_BATCH = 10**8


@dataclass(frozen=True)
class Scored:
    """The fitting, scored candidates of one family on one set of pools."""

    kind: str
    cluster: PooledCluster
    layout: Layout
    out: Mapping[str, np.ndarray]
    zero: np.ndarray
    fits: np.ndarray
    units: object
    settings: ParallelConfig
    #: merged pool of ``cluster`` -> the pools of the file it joins (``merged_members``); empty
    #: where ``cluster`` is the file's own pools
    members: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class HeteroPlanResult:
    """The outcome of one heterogeneous search.

    Attributes:
        plans: every fitting candidate scored, best first (``TABLE_COLUMNS``).
        best: the fastest plan; best_report: its simulation (per stage and per pool).
        fastest_pool, largest_pool: names; fastest_only / largest_only: (plan, report) of the
            best plan using only that pool (None if nothing fits there); pool_only: the same for
            every pool, by name.
        evaluated: candidates scored exactly; wall_s: seconds for the search.
    """

    model: str
    cluster: str
    pools: tuple
    global_batch: int
    seq_len: int
    dtype: str                  # the best plan's (``plan_heterogeneous``'s ``dtype``)
    plans: pd.DataFrame
    best: HeteroPlan
    best_report: HeteroReport
    fastest_pool: str
    largest_pool: str
    fastest_only: tuple | None
    largest_only: tuple | None
    evaluated: int
    wall_s: float
    explain: str = ""
    prior_pools: tuple = field(default=())
    #: the reference dtype the ``mfu_reference`` columns are of (``hardware_specs.mfu_reference``)
    mfu_reference_dtype: str = "bf16"
    row_plans: tuple = field(default=(), repr=False)
    pool_only: Mapping = field(default_factory=dict, repr=False)
    #: per pool of the file: GPUs the best plan uses, the idle rest and why (``hetero_idle.pool_use``)
    pool_use: tuple = field(default=())

    def row_plan(self, i: int) -> tuple[HeteroPlan, PooledCluster]:
        """Row ``i`` of ``plans`` as a plan and the pools of the file it runs on (a plan found on
        merged pools is exported on the pools they join: ``_on_file_pools``)."""
        return self.row_plans[i]

    def pool_only_rows(self) -> list[tuple[str, tuple | None]]:
        """(label, (plan, report) or None) of the fastest pool alone and the largest pool alone;
        one row when they are the same pool (one pool, or the fastest also has the most GPUs)."""
        if self.fastest_pool == self.largest_pool:
            return [(f"only {self.fastest_pool} (fastest GPU, most GPUs)", self.fastest_only)]
        sizes = {name: gpus for name, _, gpus in self.pools}
        # with equal counts the "largest" is the other pool of as many GPUs, not one of more
        most = ("most GPUs" if sizes.get(self.largest_pool, 0) > sizes.get(self.fastest_pool, 0)
                else f"as many GPUs as {self.fastest_pool}")
        return [(f"only {self.fastest_pool} (fastest GPU)", self.fastest_only),
                (f"only {self.largest_pool} ({most})", self.largest_only)]

    def comparison(self) -> pd.DataFrame:
        """Best plan vs only the fastest pool vs only the largest pool: GPUs, step, tokens/s, MFU
        in percent of the reference (bf16) peaks as every output shows it (``mfu_bf16_pct``,
        ``hardware_specs.mfu_reference``), the best plan's gain over each (percent) and
        ``efficiency_fitted``: False where a pool the row runs on rests on an unfitted prior
        (None for a row with no plan)."""
        mfu_col = f"mfu_{self.mfu_reference_dtype}_pct"
        rows = [("best plan", self.best_report)]
        for label, pair in self.pool_only_rows():
            rows.append((label, pair[1] if pair else None))
        base = self.best_report.tokens_per_s
        data = []
        for label, rep in rows:
            if rep is None:
                data.append({"plan": label, "n_gpus": 0, "step_time_s": np.nan, "tokens_per_s": 0.0, mfu_col: np.nan,
                             "best_gain_pct": np.nan, "efficiency_fitted": None})
                continue
            data.append({"plan": label, "n_gpus": rep.n_gpus, "step_time_s": rep.step_time_s,
                         "tokens_per_s": rep.tokens_per_s, mfu_col: 100.0 * rep.mfu_reference,
                         "best_gain_pct": 100.0 * (base / rep.tokens_per_s - 1.0),
                         "efficiency_fitted": not rep.prior_pools})
        return pd.DataFrame(data)


# --------------------------------------------------------------------------------------------
# Pools the cost model cannot tell apart
# --------------------------------------------------------------------------------------------

def _merge_groups(cluster: PooledCluster, effs) -> list[list[Pool]]:
    """The pools of ``cluster`` in groups of interchangeable ones (``canonical``), each group in
    the file's order."""
    pools = list(cluster.pools)
    eff_of = dict(zip(cluster.pool_names, effs))
    groups: list[list[Pool]] = []
    for p in pools:
        for g in groups:
            q = g[0]
            if q.cluster != p.cluster or eff_of[q.name] != eff_of[p.name]:
                continue
            # only whole nodes merge: two 12-GPU pools (8 + 4 each) are not 24 GPUs of three
            # nodes (tp8 x 3 stages), nor two 4-GPU pools one NVLink node of 8
            if q.gpus % q.gpus_per_node or p.gpus % p.gpus_per_node:
                continue
            # what compose reads of a link is the path through it (the slower of the NICs and
            # the link): a link faster than the pools' own NICs is their own tier to it
            if cluster.path(q.name, p.name) != cluster.path(q.name, q.name):
                continue
            if all(cluster.path(q.name, o.name) == cluster.path(p.name, o.name)
                   for o in pools if o.name not in (q.name, p.name)):
                g.append(p)
                break
        else:
            groups.append([p])
    return groups


def canonical(cluster: PooledCluster, effs) -> tuple[PooledCluster, tuple]:
    """``cluster`` with interchangeable pools merged (GPU counts added), and their efficiency models.

    Two pools are interchangeable when each is whole nodes, their ``ClusterSpec`` and efficiency model are equal,
    the path between them (``PooledCluster.path``: the slower of their NICs and the link, the
    link's latency) is their own scale-out path and every other pool reaches both over equal
    paths: then no cost in ``compose`` can tell a stage on one from a stage on the other (a link
    faster than the NICs is no faster path, so it merges the pools as their own tier does). The merge is lossy for the search (the merged pool's replicas
    share one pipeline shape), so ``searched_forms`` scores small sets unmerged too.
    """
    groups = _merge_groups(cluster, effs)
    eff_of = dict(zip(cluster.pool_names, effs))
    if all(len(g) == 1 for g in groups):
        return cluster, tuple(effs)
    merged = tuple(Pool("+".join(p.name for p in g), g[0].cluster, sum(p.gpus for p in g)) for g in groups)
    first = {g[0].name: m.name for g, m in zip(groups, merged)}
    links = tuple(replace(l, pools=(first[l.pools[0]], first[l.pools[1]])) for l in cluster.links
                  if l.pools[0] in first and l.pools[1] in first)
    out = PooledCluster(cluster.name, merged, links, cluster.description, cluster.source)
    return out, tuple(eff_of[g[0].name] for g in groups)


def merged_members(cluster: PooledCluster, effs) -> dict[str, tuple[Pool, ...]]:
    """Each pool ``canonical`` merges (by its name there) -> the pools of ``cluster`` it joins,
    in the file's order (``planners.hetero_unmerge`` maps a plan on it back onto them)."""
    return {"+".join(p.name for p in g): tuple(g) for g in _merge_groups(cluster, effs) if len(g) > 1}


#: sets of pools a merge would join that are also searched as they are: the merged pool runs one
#: pipeline shape (one tensor-parallel degree) for all its replicas, so the families across the
#: separate pools (a pipeline whose segments take different degrees, each pool its own replicas)
#: are lost in it. The data-parallel mix over n pools tries ``keep``^n template combinations per
#: key, so larger sets are searched merged only (12 interchangeable pools merged are one pool)
MAX_UNMERGED_POOLS = 3


def searched_forms(cluster: PooledCluster, effs) -> list[tuple[PooledCluster, tuple]]:
    """The forms of a set of pools the search scores: merged (``canonical``) and, when a merge
    joined pools and the set has at most ``MAX_UNMERGED_POOLS``, as it is too. Every plan of the
    separate pools is then a candidate whether or not their link lets them merge, so a faster
    link never gives a slower best plan (each plan's step only shortens with the link; the one
    caveat is the estimate that ranks pipeline mixes before the exact score, ``keep``)."""
    canon, canon_effs = canonical(cluster, effs)
    forms = [(canon, canon_effs)]
    if len(canon.pools) < len(cluster.pools) <= MAX_UNMERGED_POOLS:
        forms.append((cluster, tuple(effs)))
    return forms


def signature(cluster: PooledCluster, effs) -> str:
    """What the search of a set of pools depends on, without the pools' names or (up to
    ``MAX_UNMERGED_POOLS`` pools) their order: each pool's ``ClusterSpec``, GPU count and
    efficiency model, and the tier between every two pools. Sets with one signature score the
    same candidates (the families try every order of the pools), so one of them is searched."""
    names = cluster.pool_names
    n = len(names)
    tier = {}
    for a, b in itertools.combinations(range(n), 2):
        t = cluster.link(names[a], names[b])
        tier[a, b] = tier[b, a] = (t.bw_bytes_per_s, t.latency_s)
    pools = [(p.cluster, p.gpus, e) for p, e in zip(cluster.pools, effs)]
    orders = itertools.permutations(range(n)) if n <= MAX_UNMERGED_POOLS else (tuple(range(n)),)
    return min(repr(tuple(pools[i] for i in o)) + repr(tuple(tier[o[i], o[j]] for i, j in
                                                            itertools.combinations(range(n), 2)))
               for o in orders)


# --------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------

def _score(model, cluster, effs, settings, units, pipes: Pipelines, zero, limits, gbs_mb, ring_all: bool, kind: str,
           top: int):
    P = int(pipes.plan.max()) + 1 if len(pipes) else 0
    ring = np.ones((P, len(cluster.pools)), dtype=bool) if ring_all else None
    layout = lay_out(model, cluster, effs, settings, units, pipes, zero, limits, ring, refine=max(int(top), 1))
    kept = np.flatnonzero(layout.plan_ok)
    if len(kept) == 0:
        return None
    total = gbs_mb[kept] if np.ndim(gbs_mb) else gbs_mb
    # every plan that can reach the ranked table (its ``top`` rows) or be a pool's best is
    # priced exactly (``compose``'s ``exact_top``): the table's numbers are the simulator's
    out = compose(model, cluster, effs, settings, units, layout.blocks, layout.groups, zero[kept], total,
                  exact_top=max(int(top), 1))
    return Scored(kind, cluster, layout, out, zero[kept], np.asarray(out["fits"], dtype=bool), units, settings)


def _estimate(layout: Layout, pipes: Pipelines, M):
    """Per plan: the pipeline-time estimate (slowest stage x (micro-batches + stages - 1)) of its
    slowest group, for ranking mixes before the exact score."""
    pp = pipes.seg_stages.sum(axis=1)
    m = np.where(np.isnan(pipes.micro_batches), M / np.maximum(pipes.replicas, 1), pipes.micro_batches)
    est = layout.slowest_s * (m + pp - 1.0)
    P = int(pipes.plan.max()) + 1
    out = np.full(P, -np.inf)
    np.maximum.at(out, pipes.plan, est)
    return out


def _top_per_key(score, key_rows, keep: int) -> np.ndarray:
    """Indices of the ``keep`` lowest finite scores within each distinct row of ``key_rows``."""
    finite = np.isfinite(score)
    idx = np.flatnonzero(finite)
    if len(idx) == 0:
        return idx
    keys = np.asarray(key_rows)[idx]
    order = np.lexsort((score[idx],) + tuple(keys[:, c] for c in range(keys.shape[1] - 1, -1, -1)))
    idx, keys = idx[order], keys[order]
    new = np.ones(len(idx), dtype=bool)
    new[1:] = np.any(keys[1:] != keys[:-1], axis=1)
    run_start = np.maximum.accumulate(np.where(new, np.arange(len(idx)), 0))
    return idx[(np.arange(len(idx)) - run_start) < keep]


def _templates_kept(slowest_s, shared, cells, replicas, keep: int, min_replicas: int = 1,
                    smaller_sizes: bool = True) -> np.ndarray:
    """Indices of the templates (one pool's, one ZeRO stage) that enter the data-parallel mixes:
    the ``keep`` best rates (``replicas`` / ``slowest_s``, 0 where the template does not fit) of each
    ``shared`` key on this pool (``_top_per_key``), and each template that fits and ranks among the ``keep`` best of
    its key on some smaller pool where it has the same ``replicas`` of ``cells`` GPUs (tp x pp).

    The cut at this pool's size alone let a pipeline that packs a smaller pool exactly fall out
    when the pool grew past it (Llama-3-8B, 32 sequences: tp 8 x 2 replicas is the mix's H200 side
    on 16 H200 + 16 B200; on 20 H200 it leaves 4 idle and fell out of the 6 kept), so the smaller
    cluster's best mix was no candidate on the larger one. A template's chance is best on the
    smallest pool where it has its replicas (``replicas x cells`` GPUs), since every other
    template's replicas only grow with the pool: it is kept where fewer than ``keep`` templates of
    its key rank above it there (ties by row order, as ``_top_per_key``). A competitor's time per
    replica there is its ``slowest_s`` here: exact for ZeRO 0, whose layout does not depend on the
    replicas. Pairs are formed within a key, of the templates that fit only. ``smaller_sizes``
    False: this pool's own cut alone (``MAX_PACKED_POOLS``)."""
    ok = np.isfinite(slowest_s)
    rate = np.where(ok, replicas / np.where(ok, slowest_s, 1.0), 0.0)
    kept = _top_per_key(-rate, shared, keep)
    pos = np.flatnonzero(rate > 0)
    if not smaller_sizes or len(pos) == 0:
        return kept
    cells, replicas = np.asarray(cells, dtype=np.int64)[pos], np.asarray(replicas, dtype=np.int64)[pos]
    r, s = rate[pos], np.asarray(slowest_s, dtype=float)[pos]
    _, grp = np.unique(np.asarray(shared)[pos], axis=0, return_inverse=True)
    grp = np.asarray(grp).ravel()
    gpus = replicas * cells                             # the smallest pool where a row has its replicas
    order = np.argsort(grp, kind="stable")              # each key's rows, in row order
    size = np.bincount(grp)
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    per = size[grp]
    i = np.repeat(np.arange(len(pos)), per)
    first = np.concatenate([[0], np.cumsum(per)[:-1]])
    j = order[start[grp][i] + np.arange(len(i)) - np.repeat(first, per)]
    d_j = gpus[i] // cells[j]
    rate_j = np.where(d_j >= min_replicas, d_j / s[j], -np.inf)      # -inf: no template there
    ahead = (j != i) & ((rate_j > r[i]) | ((rate_j == r[i]) & (j < i)))
    small = pos[np.bincount(i[ahead], minlength=len(pos)) < keep]
    # this pool's own cut first, in its order (the mixes it gave are built as before)
    return np.concatenate([kept, np.setdiff1d(small, kept)])


def _shared_key(keys, pipes: Pipelines, zero) -> np.ndarray:
    """(P, 4) per one-group plan: micro-batch, recomputation, sp of its first segment, ZeRO stage."""
    k = pipes.seg_key[:, 0]
    return np.stack([keys.micro_batch[k], keys.recompute[k], keys.sequence_parallel[k].astype(np.int64),
                     np.asarray(zero, dtype=np.int64)], axis=1)


def _estimate_floor(model: ModelSpec, units, pipes: Pipelines) -> np.ndarray:
    """Per one-group plan, a floor of ``_estimate``: a stage of ``n`` layers of key ``k`` takes
    at least ``n`` x (forward + backward + weight gradient of ``k``) (its sends, embedding, head
    and gradient accumulation add to that), so whatever split of the ``L`` layers the slowest
    stage takes at least ``L / sum(1 / tau)`` over the stages, times (micro-batches + stages - 1)."""
    tau = units["fwd_s"] + units["bwd_s"] + units["w_s"]
    rate = (pipes.seg_stages / tau[pipes.seg_key]).sum(axis=1)
    pp = pipes.seg_stages.sum(axis=1)
    return model.num_layers / rate * (pipes.micro_batches + pp - 1.0)


def _keep_threshold(score, key_rows, keep: int, query_rows) -> np.ndarray:
    """Per row of ``query_rows``: the ``keep``-th lowest finite ``score`` among the rows of
    ``key_rows`` equal to it (inf where fewer). A candidate scoring above it cannot be among
    ``_top_per_key``'s ``keep`` of its key, with or without it. Thresholds carry a relative
    margin of 1e-9 against rounding between a floor and the estimate."""
    key_rows, query_rows = np.asarray(key_rows, dtype=np.int64), np.asarray(query_rows, dtype=np.int64)
    if len(key_rows) == 0:
        return np.full(len(query_rows), np.inf)
    # one integer per row (columns are small non-negative integers): mixed radix by column maxima
    radix = np.maximum(key_rows.max(axis=0), query_rows.max(axis=0, initial=0)) + 1
    code = lambda rows: np.ravel_multi_index(tuple(rows.T), tuple(radix))  # noqa: E731
    best = _top_per_key(score, key_rows, keep)
    best_code = code(key_rows[best])
    groups, ids = np.unique(best_code, return_inverse=True)
    count = np.bincount(ids, minlength=len(groups))
    worst = np.full(len(groups), -np.inf)
    np.maximum.at(worst, ids, score[best])
    thr = np.append(np.where(count >= keep, worst * (1.0 + 1e-9), np.inf), np.inf)
    q = code(query_rows)
    at = np.minimum(np.searchsorted(groups, q), len(groups) - 1) if len(groups) else np.zeros(len(q), dtype=np.int64)
    found = (groups[at] == q) if len(groups) else np.zeros(len(q), dtype=bool)
    return thr[np.where(found, at, len(groups))]


def _concat(p: Pipelines, q: Pipelines) -> Pipelines:
    """The plans of ``p`` then those of ``q`` (renumbered after ``p``'s)."""
    off = int(p.plan.max()) + 1 if len(p) else 0
    return Pipelines(plan=np.concatenate([p.plan, q.plan + off]),
                     replicas=np.concatenate([p.replicas, q.replicas]),
                     micro_batches=np.concatenate([p.micro_batches, q.micro_batches]),
                     seg_pool=np.concatenate([p.seg_pool, q.seg_pool]), seg_key=np.concatenate([p.seg_key, q.seg_key]),
                     seg_tp=np.concatenate([p.seg_tp, q.seg_tp]), seg_stages=np.concatenate([p.seg_stages, q.seg_stages]))


def _subset(pipes: Pipelines, plans: np.ndarray) -> tuple[Pipelines, np.ndarray]:
    """The groups of ``plans`` (renumbered 0..), and the old plan index of each new plan."""
    plans = np.asarray(plans)
    keep = np.isin(pipes.plan, plans)
    new_index = np.full(int(pipes.plan.max()) + 1, -1)
    new_index[np.sort(plans)] = np.arange(len(plans))
    sub = Pipelines(plan=new_index[pipes.plan[keep]], replicas=pipes.replicas[keep],
                    micro_batches=pipes.micro_batches[keep], seg_pool=pipes.seg_pool[keep],
                    seg_key=pipes.seg_key[keep], seg_tp=pipes.seg_tp[keep], seg_stages=pipes.seg_stages[keep])
    return sub, np.sort(plans)


class _Steps:
    """``progress(done, total)`` as the search's steps end (``to``): only where ``done`` rises."""

    def __init__(self, progress, total: int):
        self.progress, self.total = progress, total
        self.done = self.said = 0

    def to(self, done: int) -> None:
        self.done = done
        if self.progress is not None and done > self.said:
            self.said = done
            self.progress(done, self.total)


def search_steps(n_pools: int) -> int:
    """The steps of ``_search_pools`` on ``n_pools`` pools, as ``plan_heterogeneous`` counts its
    progress: one pool, one; more, each pool's pipeline templates, the data-parallel mixes and,
    on two pools, the pipeline mixes each way round (0 -> 1 and 1 -> 0)."""
    return 1 if n_pools == 1 else n_pools + 1 + 2 * (n_pools == 2)


def _search_pools(model, cluster, effs, settings, search, limits, gbs, keep, top, tick=None) -> list[Scored]:
    """Score every candidate family that uses all the pools of ``cluster`` (a canonical subset);
    ``tick()`` after each of its ``search_steps`` but the last."""
    tick = tick or (lambda: None)
    keys = cand.make_keys(model, cluster.pools, search["max_tp"], search["micro_batches"], search["recomputes"],
                          search["sps"], settings.kv_head_replication)
    if len(keys) == 0:
        return []
    units = unit_costs(model, cluster, effs, keys.pool, keys.tp, keys.micro_batch, keys.recompute,
                       keys.sequence_parallel, settings)
    zeros = search["zeros"]
    M_of_key = gbs // keys.micro_batch
    # the plans a key's lightest stage rules out (large micro-batches) skip the layout
    cap_bound = layer_cap_bound(model, cluster, settings, units, max(zeros), sum(p.gpus for p in cluster.pools),
                                limits)
    usable = cap_bound.layers(np.arange(len(keys))) >= 1.0 - 1e-9          # keys whose stage can hold a layer

    def fitting(p: Pipelines, z: np.ndarray) -> tuple[Pipelines, np.ndarray]:
        """The plans of ``p`` (and their ZeRO stages) that ``might_fit``."""
        if len(p) == 0:
            return p, z
        ok = np.flatnonzero(might_fit(p, cap_bound, settings, model.num_layers))
        if len(ok) == len(z):
            return p, z
        sub, old = _subset(p, ok)
        return sub, z[old]

    results = []
    if len(cluster.pools) == 1:
        pipes, zero = fitting(*cand.single_pool(model, keys, 0, cluster.pools[0].gpus, gbs, zeros))
        if len(pipes):
            mb = keys.micro_batch[pipes.seg_key[:, 0]]
            r = _score(model, cluster, effs, settings, units, pipes, zero, limits, gbs // mb, False, SINGLE, top)
            if r is not None:
                results.append(r)
        return results
    # data-parallel mixes: per pool, the fastest pipelines (as many replicas as fit) per shared key
    chosen = {}
    for p, pool in enumerate(cluster.pools):
        tmpl = cand.pool_templates(model, keys, p, pool.gpus)
        if len(tmpl) == 0:
            return results
        per_key = {}
        for z in zeros:
            rows = tmpl if z == 0 else tmpl[tmpl[:, 3] > 1]
            if len(rows) == 0:
                continue
            n = len(rows)
            pipes = Pipelines(plan=np.arange(n), replicas=rows[:, 3], micro_batches=np.full(n, np.nan),
                              seg_pool=np.full((n, 1), p), seg_key=rows[:, 0:1], seg_tp=rows[:, 1:2],
                              seg_stages=rows[:, 2:3])
            lay = lay_out(model, cluster, effs, settings, units, pipes, np.full(n, z), limits, None)
            k = rows[:, 0]
            shared = np.stack([keys.micro_batch[k], keys.recompute[k], keys.sequence_parallel[k].astype(np.int64)], axis=1)
            # on two pools, also the templates that a smaller size of this pool keeps (``_templates_kept``);
            # on more, this size's cut only: the extras would multiply the mixes over three pools
            best = _templates_kept(lay.slowest_s, shared, rows[:, 1] * rows[:, 2], rows[:, 3], keep, 1 + (z > 0),
                                   smaller_sizes=len(cluster.pools) <= MAX_PACKED_POOLS)
            for i in best:
                sk = (int(shared[i, 0]), int(shared[i, 1]), int(shared[i, 2]), int(z))
                per_key.setdefault(sk, []).append(tuple(int(x) for x in rows[i]))
                if keys.tp[k[i]] == 1 and shared[i, 2] == 0:     # tp 1 serves either sp setting
                    per_key.setdefault((sk[0], sk[1], 1, sk[3]), []).append(tuple(int(x) for x in rows[i]))
        chosen[p] = per_key
        tick()
    pipes, zero = cand.data_parallel_mix(keys, chosen, gbs)
    if len(pipes):
        r = _score(model, cluster, effs, settings, units, pipes, zero, limits, gbs // keys.micro_batch[pipes.seg_key[
            np.searchsorted(pipes.plan, np.arange(int(pipes.plan.max()) + 1)), 0]], True, DP_MIX, top)
        if r is not None:
            results.append(r)
    # pipeline mixes (two pools): the best by estimated pipeline time per shared key, exactly scored;
    # the smaller pools' splits are laid out only where their estimate's floor could make the best
    if len(cluster.pools) == 2:
        tick()          # the data-parallel mixes are scored (on more pools, the last step)
        def estimated(p: Pipelines, z: np.ndarray) -> np.ndarray:
            """Each pipeline's estimated time (``_estimate``) from its layout."""
            return _estimate(lay_out(model, cluster, effs, settings, units, p, z, limits, None), p,
                             M_of_key[p.seg_key[:, 0]])

        for a, b in ((0, 1), (1, 0)):
            if a:
                tick()          # the mixes the other way round are scored
            ga, gb = cluster.pools[a].gpus, cluster.pools[b].gpus
            pipes, zero = fitting(*cand.pipeline_mix(model, keys, a, b, ga, gb, gbs, zeros, usable))
            more, more_zero = fitting(*cand.pipeline_mix_smaller(model, keys, a, b, ga, gb, gbs, zeros, usable))
            est = np.zeros(0)
            shared = np.zeros((0, 4), dtype=np.int64)
            if len(pipes):
                est, shared = estimated(pipes, zero), _shared_key(keys, pipes, zero)
            if len(more):
                more_shared = _shared_key(keys, more, more_zero)
                floor = _estimate_floor(model, units, more)
                reach = floor <= _keep_threshold(est, shared, keep, more_shared)
                if reach.any():
                    more, old = _subset(more, np.flatnonzero(reach))
                    more_zero, more_shared = more_zero[old], more_shared[old]
                    reach = fits_memory(model, cluster, settings, units, more, more_zero, limits)
                if reach.any():
                    more, old = _subset(more, np.flatnonzero(reach))
                    more_zero, more_shared = more_zero[old], more_shared[old]
                    est = np.concatenate([est, estimated(more, more_zero)])
                    pipes, zero = _concat(pipes, more), np.concatenate([zero, more_zero])
                    shared = np.concatenate([shared, more_shared])
            if len(pipes) == 0:
                continue
            best = _top_per_key(est, shared, keep)
            if len(best) == 0:
                continue
            sub, old = _subset(pipes, best)
            mb = keys.micro_batch[sub.seg_key[:, 0]]
            r = _score(model, cluster, effs, settings, units, sub, zero[old], limits, gbs // mb, False, PP_MIX, top)
            if r is not None:
                results.append(r)
    return results


# --------------------------------------------------------------------------------------------
# The search
# --------------------------------------------------------------------------------------------

def common_dtype(cluster: PooledCluster, dtype: str | None, required: bool = True) -> str | None:
    """``dtype`` if every pool's GPU has it, else the first of bf16, fp16, fp32 they all have
    (None, not an error, where they share none and ``required`` is False)."""
    have = [set(p.cluster.gpu.peak_flops_per_s) for p in cluster.pools]
    if dtype is not None:
        for p, h in zip(cluster.pools, have):
            if dtype not in h:
                raise InputError(f"pools.{p.name}.dtype", f"{p.cluster.gpu.name} has no {dtype} peak",
                                 "choose one of " + ", ".join(sorted(h)))
        return dtype
    for d in ("bf16", "fp16", "fp32"):
        if all(d in h for h in have):
            return d
    if not required:
        return None
    raise InputError("dtype", "the pools' GPUs share no 16- or 32-bit dtype", "give --dtype")


def plan_dtype(pools: PooledCluster, dtype: str | None = None, required: bool = False) -> str | None:
    """The GEMM dtype a plan on exactly the pools of ``pools`` runs: ``dtype`` where the request
    gives one, else the first of bf16, fp16, fp32 all their GPUs have, as those pools would run
    alone (so a V100 pool beside H100 does not move the H100-only plans to fp16). ``plan_heterogeneous``
    gives each searched set of pools this dtype, and ``paraplan simulate`` a plan on the pools
    it uses, so a planned plan simulates to the same numbers. None where they share none and
    ``required`` is False (else an ``InputError``)."""
    return dtype or common_dtype(pools, None, required=required)


#: pools a search across pools covers: it tries every subset of them (2^n), so 12 pools are 4,096
#: subsets (a few seconds on 2 cores) and 20 were a million (five minutes without a word)
MAX_SEARCHED_POOLS = 12


def _within_stack(search: dict, lacks: tuple, stack_name: str) -> dict:
    """``search`` without the ZeRO stages, recomputation and sequence parallelism the stack lacks
    (``TrainingBehaviour.lacks``); an ``InputError`` when the stack lacks pipelines (the search
    lays them out) or a choice the request left nothing of."""
    if not lacks:
        return search
    if "pipeline" in lacks:
        raise InputError("stack", f"{stack_name} has no pipeline parallelism, which plans across pools lay out",
                         "plan it with a stack that has it (paraplan hardware stacks)")
    selective = RECOMPUTE_CODES[Recompute.SELECTIVE]
    out = dict(search,
               zeros=tuple(z for z in search["zeros"] if not lacked_use(lacks, zero_stage=z)),
               recomputes=tuple(r for r in search["recomputes"] if not lacked_use(lacks, selective=r == selective)),
               sps=tuple(sp for sp in search["sps"] if not lacked_use(lacks, sequence_parallel=sp)))
    for key, field_name in (("zeros", "zero_stage"), ("recomputes", "recompute"), ("sps", "sequence_parallel")):
        if not out[key]:
            raise InputError(field_name, f"every {field_name} asked for is one {stack_name} lacks (its training.lacks)",
                             "ask for others, or plan with a stack that has them")
    return out


def plan_heterogeneous(model: ModelSpec | str, cluster: PooledCluster | str, global_batch: int | None = None, *,
                       global_batch_tokens: int | None = None, dtype: str | None = None, max_tp: int | None = None,
                       max_micro_batch: int | None = None, micro_batches=None, recomputes=None, zeros=(0, 1),
                       sequence_parallel=(False, True), headroom_gib: float | None = None,
                       efficiency: Mapping[str, EfficiencyModel] | None = None, keep: int = DEFAULT_KEEP,
                       top: int = 20, stack: StackSpec | str = "megatron-core",
                       progress=None) -> HeteroPlanResult:
    """Search the plans of ``model`` on the pools of ``cluster``; the best fitting one, next to
    the best on only the fastest pool and only the largest pool.

    Args:
        model, cluster: specs or names / files (a one-kind cluster is one pool of its max_gpus).
        global_batch / global_batch_tokens: sequences (or tokens) per step.
        dtype: GEMM dtype every plan runs (every pool must have it). Default: each set of pools
            searched runs the first of bf16, fp16, fp32 all its GPUs have, as it would alone, so
            a pool without bf16 (V100) does not move the plans of the others to fp16 (adding a
            pool never changes the plans without it); ``HeteroPlanResult.dtype`` is the best
            plan's, the table's ``dtype`` column each plan's.
        max_tp: largest tensor-parallel degree (default and at most: each pool's node).
        max_micro_batch: largest micro-batch tried (None: every divisor of the global batch, as
            ``planners.plan``; a plan whose stages cannot hold their layers at ``layer_cap_bound``
            is dropped before its layout, so micro-batches too large to fit cost little);
            micro_batches: the micro-batches to try instead (each must divide the global batch).
        recomputes: recomputation modes (default none, selective, full); zeros: ZeRO stages (0-1).
        headroom_gib: memory to leave free on every GPU, GiB (None: ``simulator.headroom``'s
            default, 5% of each pool's HBM).
        efficiency: pool name -> efficiency model override.
        keep: mixes per shared key that reach the exact score (see module docstring), and each
            pool's pipelines per shared key in the data-parallel mixes (``_templates_kept``).
        top: rows of the ranked table kept.
        stack: the software stack every plan runs (``hardware_specs/stacks``, name or spec): its
            behaviour fields, with its recipes for the model (GPU-specific recipes only when every
            pool has the same GPU kind). Pooled plans never search context parallelism: every
            stage runs cp 1 (``ReplicaGroup`` / ``StagePlacement`` have no cp degree and a plan's
            ``software`` may not set ``cp_kind``, ``simulator.heterogeneous.plan.UNMODELLED_FIELDS``),
            so the stack's ``context_parallel_kind`` prices nothing here: its flavour at cp 1 is
            ``ring`` (``simulator.stack_defaults.run_cp_kind``), as on one GPU kind, and a
            torchtitan (all-gather) stack plans exactly as a ring one.
        progress: called as ``progress(done, total)`` as the search goes, ``done`` rising to
            ``total``: the steps (``search_steps``) of every distinct set of the pools searched
            (a pool's templates, the data-parallel mixes, the pipeline mixes each way), so the
            CLI's bar moves within the set of all the pools, most of a search (two pools of 256:
            1.4 of 2 s), not once at its end.

    Raises ``InputError`` when nothing fits or the request is malformed (naming the pool at fault).
    """
    t0 = time.perf_counter()
    # the search's options checked as planners.plan checks them: stack=None failed as an
    # AttributeError, max_tp inf / nan / '8' inside int(), micro_batches=5 as a TypeError, and
    # micro_batches=0 (or []) was silently the default search
    if not isinstance(stack, (str, StackSpec)):
        raise InputError("stack", f"expected a stack name or file, got {type(stack).__name__}",
                         "e.g. stack='megatron-core' (paraplan hardware stacks)")
    max_tp, max_micro_batch = (None if v is None else whole_number(name, v) for name, v in (
        ("max_tp", max_tp), ("max_micro_batch", max_micro_batch)))
    if micro_batches is not None:
        if isinstance(micro_batches, (str, bytes)) or not isinstance(micro_batches, Iterable):
            raise InputError("micro_batches", f"must be a list of micro-batch sizes, got {shown(micro_batches)}",
                             "e.g. micro_batches=[1, 2], or leave it out to try every divisor of the global batch")
        micro_batches = [whole_number("micro_batches", mb) for mb in micro_batches]
        if not micro_batches:
            raise InputError("micro_batches", "names no micro-batch size",
                             "give at least one, or leave it out to try every divisor of the global batch")
    keep, top = opts.search_counts(keep, top)
    zeros = opts.zero_stages(zeros)
    sequence_parallel = opts.sequence_parallel_modes(sequence_parallel)
    recomputes = opts.recompute_modes(recomputes)
    model, cluster = model_and_pools(model, cluster)
    if model.moe is not None or model.mtp_layers:
        raise InputError("model", f"{model.name}: plans across pools cover dense models without MTP for now",
                         "plan it on one pool with paraplan plan")
    gbs = resolve_global_batch(model.seq_len, global_batch, global_batch_tokens)
    if gbs > MAX_GLOBAL_BATCH:
        raise InputError("global_batch", f"{gbs} sequences per step is beyond any training run",
                         f"use at most {MAX_GLOBAL_BATCH:,} sequences")
    if dtype is not None:
        common_dtype(cluster, dtype)         # every pool has it, or one error naming the pool
    else:
        for p in cluster.pools:              # every pool alone runs some dtype
            common_dtype(cluster.subset((p.name,)), None)
    if headroom_gib is not None:
        headroom.headroom_gib(float("inf"), headroom_gib)      # negative, nan, inf: one error, up front
    effs_all = pool_efficiencies(cluster, efficiency)
    mbs = cand.divisors(gbs)
    if micro_batches is not None:
        for mb in micro_batches:
            if gbs % mb:
                raise InputError("micro_batch", f"{mb} does not divide the global batch of {gbs} sequences",
                                 "choose a divisor of the global batch")
        mbs = np.array(sorted(set(micro_batches)), dtype=np.int64)
    elif max_micro_batch is not None:
        mbs = mbs[mbs <= max_micro_batch]
    search = {"max_tp": int(max_tp or 10**9), "micro_batches": tuple(int(x) for x in mbs),
              "recomputes": tuple(RECOMPUTE_CODES[r] for r in recomputes), "sps": sequence_parallel, "zeros": zeros}
    stack_spec = load_stack(stack) if isinstance(stack, str) else stack
    kinds = {p.cluster.gpu.name for p in cluster.pools}
    kind = kinds.pop() if len(kinds) == 1 else None
    settings_of: dict[str, ParallelConfig] = {}

    def settings_for(d: str) -> ParallelConfig:
        """The stack's settings for plans in dtype ``d`` (its recipe for the model in ``d``)."""
        if d not in settings_of:
            software = stack_config_fields(stack_spec, d, model.name, kind)
            if software.get("grad_reduce_every_microbatch"):
                raise InputError("stack", f"{stack_spec.name} reduces gradients on every micro-batch; across pools "
                                 "that is not modelled yet", "plan with a stack that reduces once per step (megatron-core)")
            settings_of[d] = ParallelConfig(dtype=d, **software)
        return settings_of[d]

    # the stack's checks up front, in the dtype the whole file shares (else its first pool's)
    whole = dtype or common_dtype(cluster, None, required=False) or common_dtype(
        cluster.subset(cluster.pool_names[:1]), None)
    search = _within_stack(search, settings_for(whole).stack_lacks, stack_spec.name)
    scored: list[Scored] = []
    seen = set()
    names = cluster.pool_names
    if len(names) > MAX_SEARCHED_POOLS:
        raise InputError("cluster", f"{cluster.name} has {len(names)} pools; the search tries every subset of them "
                         f"(2^{len(names)}) and covers at most {MAX_SEARCHED_POOLS} (14 took 11 s, 20 five minutes)",
                         "merge pools of one GPU kind and fabric into one pool, or plan on fewer pools")
    seen_single: dict[str, str] = {}     # signature of a one-pool subset -> the pool searched for it
    alias: dict[str, str] = {}           # pool whose search was skipped -> the identical pool searched
    forms = []                           # (subset, its efficiencies, form, its efficiencies): one a signature
    for size in range(1, len(names) + 1):
        for subset in itertools.combinations(names, size):
            sub = cluster.subset(subset)
            sub_effs = tuple(effs_all[names.index(n)] for n in subset)
            for form, form_effs in searched_forms(sub, sub_effs):
                sig = signature(form, form_effs)
                if size == 1:
                    alias.setdefault(subset[0], seen_single.setdefault(sig, subset[0]))
                if sig not in seen:
                    seen.add(sig)
                    forms.append((sub, sub_effs, form, form_effs))
    steps = _Steps(progress, sum(search_steps(len(form.pools)) for _, _, form, _ in forms))
    for sub, sub_effs, form, form_effs in forms:
        end = steps.done + search_steps(len(form.pools))
        limits = np.array([p.cluster.gpu.hbm_bytes - headroom.headroom_gib(p.cluster.gpu.hbm_bytes, headroom_gib) * GIB
                           for p in form.pools])
        # the set's own dtype (as it would run alone) unless the request fixes one
        sub_dtype = plan_dtype(form, dtype)
        if sub_dtype is not None:        # else its GPUs share no dtype: no plan spans them all
            found = _search_pools(model, form, form_effs, settings_for(sub_dtype), search, limits, gbs, keep, top,
                                  tick=lambda: steps.to(min(steps.done + 1, end)))
            members = merged_members(sub, sub_effs) if form is not sub else {}
            scored += [replace(f, members=members) for f in found] if members else found
        steps.to(end)
    table, refs = _ranked(scored, model, gbs, top, cluster, effs_all)
    if table.empty:
        raise InputError("memory", f"no plan of {model.name} at {sequence_text(model)} fits any pool of "
                         f"{cluster.name} in memory",
                         "add GPUs, allow recomputation or ZeRO, or use a smaller global batch or shorter sequences")
    evaluated = sum(len(s.zero) for s in scored)
    best_plan, best_cluster = refs[0]
    best_report = simulate_heterogeneous(model, best_cluster, best_plan, _eff_map(best_cluster, cluster, effs_all))
    pairs = {}
    for name in cluster.pool_names:
        pick = _best_single(scored, alias.get(name, name), gbs)
        if pick is not None and alias.get(name, name) != name:
            pick = _relabel(pick[0], alias[name], name), cluster.subset((name,))
        if pick is not None:
            plan_, cl_ = pick
            pairs[name] = (plan_, simulate_heterogeneous(model, cl_, plan_, _eff_map(cl_, cluster, effs_all)))
        else:
            pairs[name] = None
    # "fastest GPU": the highest peak; between GPUs of one peak, the one whose pool alone runs
    # this model faster per GPU (the row then answers "what if I kept only my fastest GPUs")
    per_gpu = {n: pr[1].tokens_per_s_per_gpu for n, pr in pairs.items() if pr is not None}
    fastest = cluster.fastest_pool(dtype, per_gpu)      # None: each GPU's own default dtype
    largest = cluster.largest_pool(tie_avoids=fastest.name)
    result = HeteroPlanResult(
        model=model.name, cluster=cluster.name, pools=tuple((p.name, p.cluster.gpu.name, p.gpus) for p in cluster.pools),
        global_batch=gbs, seq_len=model.seq_len, dtype=best_plan.dtype, plans=table, best=best_plan, best_report=best_report,
        fastest_pool=fastest.name, largest_pool=largest.name, fastest_only=pairs[fastest.name],
        largest_only=pairs[largest.name], evaluated=evaluated, wall_s=time.perf_counter() - t0,
        prior_pools=tuple(p.name for p, e in zip(cluster.pools, effs_all) if e.is_prior), row_plans=tuple(refs),
        pool_only=pairs, mfu_reference_dtype=reference_name(p.cluster.gpu for p in cluster.pools),
        pool_use=hetero_idle.pool_use(
            cluster, best_plan, best_report, scored, gbs,
            lambda s, plan: simulate_heterogeneous(model, s.cluster, plan, _eff_map(s.cluster, cluster, effs_all)),
            plan_from_layout, layout_text))
    return replace(result, explain=explain_text(result))


def _relabel(plan: HeteroPlan, old: str, new: str) -> HeteroPlan:
    """``plan`` with every stage on pool ``old`` moved to pool ``new`` (a pool the search skipped
    because it is identical to ``old``: same spec, GPU count and efficiency, so the same best plan)."""
    groups = tuple(replace(g, stages=tuple(replace(st, pool=new) if st.pool == old else st for st in g.stages))
                   for g in plan.groups)
    return replace(plan, groups=groups)


def _eff_map(sub: PooledCluster, full: PooledCluster, effs_all) -> dict:
    """Efficiency overrides for ``sub``'s pools (pools of ``full``: exported plans name no merged pool)."""
    return {p.name: effs_all[full.pool_names.index(p.name)] for p in sub.pools}


def _on_file_pools(model: ModelSpec, s: Scored, plan: HeteroPlan, full: PooledCluster, effs_all):
    """A plan of ``s`` found on merged pools as the same plan on the file's pools (``hetero_unmerge``),
    the pools it uses (in the file's order) and its simulation there: (plan, pools, report)."""
    placements = unmerge.place(plan, s.members)
    counts = None
    if unmerge.splits(placements):      # run the merged plan's shares in the split groups
        first = {p.name: s.members[p.name][0].name if p.name in s.members else p.name for p in s.cluster.pools}
        merged = simulate_heterogeneous(model, s.cluster, plan, {m: effs_all[full.pool_names.index(n)]
                                                                 for m, n in first.items()})
        counts = [(g["micro_batches_busiest_replica"], g["micro_batches_total"]) for g in merged.groups]
    real = unmerge.unmerged(plan, placements, counts)
    used = set(real.pools_used())
    pools = full.subset([n for n in full.pool_names if n in used])
    return real, pools, simulate_heterogeneous(model, pools, real, _eff_map(pools, full, effs_all))


def _ranked_order(df: pd.DataFrame) -> pd.DataFrame:
    """The table's ranking: most tokens/s first, then fewer GPUs, then less memory (stable)."""
    return df.sort_values(["tokens_per_s", "n_gpus", "memory_gib"], ascending=[False, True, True], kind="stable")


def _ranked(scored: list[Scored], model: ModelSpec, gbs: int, top: int, full: PooledCluster, effs_all):
    """The ranked table of every fitting candidate (best first), and the plans of its first ``top`` rows.

    A row found on merged pools (``canonical``) is exported on the file's own pools
    (``_on_file_pools``) with the numbers of that plan's simulation there: equal to the merged
    plan's where no pipeline crosses from one member to another (a split pipeline's sends run
    over the scale-out path), and the rows are ranked again on them."""
    frames = []
    for si, s in enumerate(scored):
        ok = np.flatnonzero(s.fits)
        if len(ok) == 0:
            continue
        o = s.out
        frames.append(pd.DataFrame({
            "src_": si, "plan_": ok, "kind": s.kind, "pools": "+".join(s.cluster.pool_names),
            "n_gpus": o["n_gpus"][ok].astype(np.int64), "step_time_s": o["step_time_s"][ok],
            "tokens_per_s": o["tokens_per_s"][ok], "tokens_per_s_per_gpu": o["tokens_per_s"][ok] / o["n_gpus"][ok],
            "mfu": o["mfu"][ok], "mfu_reference": o["mfu_reference"][ok], "memory_gib": o["memory_bytes"][ok] / GIB, "zero_stage": s.zero[ok]}))
    if not frames:
        return pd.DataFrame(columns=TABLE_COLUMNS), []
    df = pd.concat(frames, ignore_index=True)
    df = _ranked_order(df).head(top).reset_index(drop=True)
    refs = []
    layouts, recs, sps, mbs, dts = [], [], [], [], []
    for i, row in enumerate(df.itertuples(index=False)):
        s = scored[row.src_]
        plan, pools = plan_from_layout(s, int(row.plan_), gbs), s.cluster
        if s.members:
            plan, pools, rep = _on_file_pools(model, s, plan, full, effs_all)
            df.loc[i, ["pools", "n_gpus", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "mfu_reference",
                       "memory_gib"]] = ["+".join(pools.pool_names), rep.n_gpus, rep.step_time_s, rep.tokens_per_s,
                                         rep.tokens_per_s_per_gpu, rep.mfu, rep.mfu_reference, rep.memory_bytes / GIB]
        refs.append((plan, pools))
        layouts.append(layout_text(plan))
        recs.append(plan.recompute.value)
        sps.append(plan.sequence_parallel)
        mbs.append(plan.micro_batch)
        dts.append(plan.dtype)
    df["layout"] = layouts
    df["recompute"] = recs
    df["sequence_parallel"] = sps
    df["micro_batch"] = mbs
    df["dtype"] = dts
    if any(s.members for s in scored):
        order = _ranked_order(df).index
        df, refs = df.loc[order].reset_index(drop=True), [refs[i] for i in order]
    return df[list(TABLE_COLUMNS)], refs


def plan_from_layout(s: Scored, plan_index: int, gbs: int) -> HeteroPlan:
    """Candidate ``plan_index`` of a scored family as a ``HeteroPlan``."""
    b, g, u = s.layout.blocks, s.layout.groups, s.units
    groups = []
    first_row = None
    sp = False
    for gi in np.flatnonzero(g.plan == plan_index):
        rows = np.flatnonzero(b.group == gi)
        first_row = rows[0] if first_row is None else first_row
        stages = []
        for r in rows:
            k = b.key[r]
            sp = sp or bool(u.sequence_parallel[k])
            stages += [StagePlacement(s.cluster.pools[int(u.pool[k])].name, int(u.tp[k]), int(b.layers[r]))] * int(b.count[r])
        m = g.micro_batches[gi]
        groups.append(ReplicaGroup(stages=tuple(stages), replicas=int(g.replicas[gi]),
                                   micro_batches=None if np.isnan(m) else int(m)))
    k0 = b.key[first_row]
    st = s.settings
    return HeteroPlan(groups=tuple(groups), micro_batch=int(u.micro_batch[k0]), global_batch=gbs,
                      zero_stage=int(s.zero[plan_index]), recompute=_RECOMPUTE_NAMES[int(u.recompute[k0])],
                      sequence_parallel=sp, dtype=st.dtype,
                      **plan_switches({k: getattr(st, k) for k in _stack_switches()}))


@functools.lru_cache(maxsize=1)
def _stack_switches() -> tuple[str, ...]:
    """The ``ParallelConfig`` fields a stack sets (the plan carries them from the settings)."""
    return tuple(stack_config_fields(load_stack("megatron-core")))


def _best_single(scored: list[Scored], pool: str, gbs: int):
    """The fastest fitting single-pool plan on ``pool`` (as a plan and its one-pool cluster)."""
    best = None
    for s in scored:
        if s.kind != SINGLE or s.members or s.cluster.pool_names != (pool,):
            continue
        ok = np.flatnonzero(s.fits)
        if len(ok) == 0:
            continue
        i = ok[np.argmax(s.out["tokens_per_s"][ok])]
        tps = s.out["tokens_per_s"][i]
        if best is None or tps > best[0]:
            best = (tps, s, int(i))
    if best is None:
        return None
    _, s, i = best
    return plan_from_layout(s, i, gbs), s.cluster
