"""The candidate plans of a heterogeneous search, as ``hetero_pipelines.Pipelines`` tables.

Three families, each over every layer key (tensor-parallel degree per pool, micro-batch,
recomputation, sequence parallelism) and ZeRO stage 0-2:

* ``single_pool``: one pool alone: ``d`` replicas of a ``pp``-stage pipeline, ``d`` dividing
  the step's micro-batches (as Megatron needs), any ``pp`` up to the layers, any number of GPUs
  up to the pool's. The baselines "only the fastest pool" and "only the largest pool".
* ``data_parallel_mix`` (Poplar, HexiScale): every pool of a set runs its own replicas of its
  own pipeline (all of its GPUs), each pool's replicas taking a share of the batch in
  proportion to their speed; gradients are reduced across pools.
* ``pipeline_mix`` (Metis, Sailor): replicas of one pipeline whose first stages are on one pool
  and last stages on another, the layers split by each pool's speed, as many replicas as both
  pools hold (and divide the micro-batches). The stage counts that use both pools in proportion,
  and (``pipeline_mix_smaller``) those of every smaller size of either pool, so that growing a
  pool never drops a split it had.

The mixes are enumerated in full and ranked by a pipeline-time estimate (the split's slowest
stage x (micro-batches + stages - 1)); the best ``keep`` per layer key and ZeRO stage go on to
the exact score (``compose``). The smaller pools' splits are laid out only where a lower bound
of their estimate could reach those ``keep`` (``heterogeneous._estimate_floor``), which picks
the same ones as laying out all.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from cost_models.params import tp_splits_kv_heads
from cost_models.topology import tp_tiles_node
from model_specs.model_spec import ModelSpec
from planners.hetero_pipelines import Pipelines
from planners.search_space import divisors


@dataclass(frozen=True)
class Keys:
    """The layer keys of a search, (K,) arrays: pool, tp, micro_batch, recompute code, sp."""

    pool: np.ndarray
    tp: np.ndarray
    micro_batch: np.ndarray
    recompute: np.ndarray
    sequence_parallel: np.ndarray

    def __len__(self) -> int:
        return int(len(self.pool))


def tp_options(model: ModelSpec, max_tp: int, kv_head_replication: bool = False) -> np.ndarray:
    """Tensor-parallel degrees up to ``max_tp`` that split heads, kv heads (a multiple of them
    only where the stack replicates them, ``kv_head_replication``) and the FFN."""
    t = np.array([x for x in (1, 2, 4, 8, 16, 32, 64) if x <= max_tp], dtype=np.int64)
    ok = (model.num_heads % t == 0) & (model.ffn_hidden_size % t == 0) & tp_splits_kv_heads(
        model.num_kv_heads, t, kv_head_replication)
    return t[ok]


def make_keys(model: ModelSpec, pools, max_tp, micro_batches, recomputes, sps,
              kv_head_replication: bool = False) -> Keys:
    """Every (pool, tp, micro-batch, recompute, sp) key; sp only where tp > 1; tp only where its
    groups tile the pool's nodes (``tp_tiles_node``)."""
    rows = []
    for p, pool in enumerate(pools):
        tps = tp_options(model, min(max_tp, pool.gpus_per_node, pool.gpus), kv_head_replication)
        for tp in tps[tp_tiles_node(pool.gpus_per_node, tps, pool.gpus)]:
            for mb, rc, sp in itertools.product(micro_batches, recomputes, sps):
                if sp and tp == 1:
                    continue
                rows.append((p, tp, mb, rc, sp))
    a = np.array(rows, dtype=np.int64).reshape(-1, 5)
    return Keys(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4].astype(bool))


def _pipelines(plan, replicas, micro_batches, pools, keys, tps, stages) -> Pipelines:
    return Pipelines(plan=np.asarray(plan, dtype=np.int64), replicas=np.asarray(replicas, dtype=np.int64),
                     micro_batches=np.asarray(micro_batches, dtype=float),
                     seg_pool=np.asarray(pools, dtype=np.int64), seg_key=np.asarray(keys, dtype=np.int64),
                     seg_tp=np.asarray(tps, dtype=np.int64), seg_stages=np.asarray(stages, dtype=np.int64))


def single_pool(model: ModelSpec, keys: Keys, pool: int, gpus: int, global_batch: int, zeros) -> tuple[Pipelines, np.ndarray]:
    """One pool alone: (pipelines, zero stage per plan); one group per plan. Every replica count
    that divides the step's micro-batches (each replica the same count), and the most replicas
    that fit where that count does not divide them: the shares then give some replicas one
    micro-batch more (micro-batches NaN, as the data-parallel mixes; 64 sequences over 24
    replicas of tp 2 on 48 A100s, which the same GPUs written as two pools of 24 found)."""
    L = model.num_layers
    parts = []
    for k in np.flatnonzero(keys.pool == pool):
        tp, mb = int(keys.tp[k]), int(keys.micro_batch[k])
        M = global_batch // mb
        ds = divisors(M)
        pp = np.arange(1, min(L, gpus // tp) + 1)
        PP, D = np.meshgrid(pp, ds, indexing="ij")
        PP, D = PP.ravel(), D.ravel()
        fit = D * tp * PP <= gpus
        PP, D = PP[fit], D[fit]
        fill = gpus // (tp * pp)                              # the most replicas of each depth
        uneven = (fill <= M) & (M % np.maximum(fill, 1) != 0) & (fill > 0)
        PP = np.concatenate([PP, pp[uneven]])
        D = np.concatenate([D, fill[uneven]])
        m_each = np.where(M % D == 0, M // D, -1)              # -1: from the shares
        for z in zeros:
            keep = (z == 0) | (D > 1)
            n = int(keep.sum())
            parts.append(np.stack([np.full(n, k), np.full(n, tp), PP[keep], D[keep], m_each[keep], np.full(n, z)],
                                  axis=1))
    a = np.concatenate(parts) if parts else np.zeros((0, 6), dtype=np.int64)
    n = len(a)
    m = np.where(a[:, 4] > 0, a[:, 4], np.nan)
    pipes = _pipelines(np.arange(n), a[:, 3], m, np.full((n, 1), pool), a[:, 0:1], a[:, 1:2], a[:, 2:3])
    return pipes, a[:, 5]


def pool_templates(model: ModelSpec, keys: Keys, pool: int, gpus: int) -> np.ndarray:
    """(key, tp, pp, replicas) of every pipeline that fills a pool with as many replicas as fit."""
    L = model.num_layers
    out = []
    for k in np.flatnonzero(keys.pool == pool):
        tp = int(keys.tp[k])
        for pp in range(1, min(L, gpus // tp) + 1):
            out.append((k, tp, pp, gpus // (tp * pp)))
    return np.array(out, dtype=np.int64).reshape(-1, 4)


def data_parallel_mix(keys: Keys, chosen: dict, global_batch: int) -> tuple[Pipelines, np.ndarray]:
    """Every combination of one kept template per pool (``chosen[pool][(mb, rc, sp, zero)]`` =
    template rows), under a shared micro-batch, recomputation, sp and ZeRO stage, with no more
    replicas than the step has micro-batches. Micro-batches are left to the shares (NaN).

    A tp-1 template (no sequence parallelism to have) is filed under both sp settings, so that
    it joins the other pools' templates of either; a combination of tp-1 templates only is then
    built under sp off alone (under sp on it would be the same plan again)."""
    pools = sorted(chosen)
    shared = set.intersection(*(set(chosen[p]) for p in pools))
    rows = []        # (plan, pool, key, tp, pp, d)
    zero_of_plan = []
    plan = 0
    for shared_key in sorted(shared):
        lists = [chosen[p][shared_key] for p in pools]
        for combo in itertools.product(*lists):
            if sum(t[3] for t in combo) > global_batch // shared_key[0]:
                continue
            if shared_key[2] and all(t[1] == 1 for t in combo):
                continue
            for p, t in zip(pools, combo):
                rows.append((plan, p, t[0], t[1], t[2], t[3]))
            zero_of_plan.append(shared_key[3])
            plan += 1
    a = np.array(rows, dtype=np.int64).reshape(-1, 6)
    n = len(a)
    pipes = _pipelines(a[:, 0], a[:, 5], np.full(n, np.nan), a[:, 1:2], a[:, 2:3], a[:, 3:4], a[:, 4:5])
    return pipes, np.array(zero_of_plan, dtype=np.int64)


def _largest_divisor_table(M: int, n_max: int) -> np.ndarray:
    """t[r] = the largest divisor of M that is <= r (0 for r = 0), r = 0..n_max."""
    t = np.zeros(n_max + 1, dtype=np.int64)
    ds = divisors(M)
    t[ds[ds <= n_max]] = ds[ds <= n_max]
    return np.maximum.accumulate(t)


def _matched_pairs(keys: Keys, a: int, b: int, usable=None):
    """(I, J, ta, tb): every pair of a key of pool ``a`` and one of pool ``b`` a pipeline can
    join (same micro-batch and recomputation, sp alike unless one side has tp 1), of the keys
    ``usable`` (a (K,) mask; None: all) allows."""
    usable = np.ones(len(keys), dtype=bool) if usable is None else np.asarray(usable, dtype=bool)
    ia = np.flatnonzero((keys.pool == a) & usable)
    ib = np.flatnonzero((keys.pool == b) & usable)
    I, J = np.meshgrid(ia, ib, indexing="ij")
    I, J = I.ravel(), J.ravel()
    ta, tb = keys.tp[I], keys.tp[J]
    sp_ok = (keys.sequence_parallel[I] == keys.sequence_parallel[J]) | (ta == 1) | (tb == 1)
    match = (keys.micro_batch[I] == keys.micro_batch[J]) & (keys.recompute[I] == keys.recompute[J]) & sp_ok
    return I[match], J[match], ta[match], tb[match]


def _proportional_counts(L: int, ta, tb, gpus_a: int, gpus_b: int):
    """(pair, k_a, k_b): for every pair and ``k_a``, the ``k_b`` (rounded down or up) that gives
    both pools the same share of their GPUs."""
    ka = np.arange(1, L)
    P, K = np.meshgrid(np.arange(len(ta)), ka, indexing="ij")
    P, K = P.ravel(), K.ravel()
    ta_, tb_ = ta[P], tb[P]
    ideal = K * gpus_b * ta_ / (gpus_a * tb_)
    rows = []
    for kb in (np.maximum(1, np.floor(ideal)), np.maximum(1, np.ceil(ideal))):
        kb = kb.astype(np.int64)
        rows.append((P, K, kb))
    P = np.concatenate([r[0] for r in rows])
    K = np.concatenate([r[1] for r in rows])
    KB = np.concatenate([r[2] for r in rows])
    ta_, tb_ = ta[P], tb[P]
    ok = (K * ta_ <= gpus_a) & (K + KB <= L) & (KB * tb_ <= gpus_b)
    # the floor and the ceiling coincide for whole-number ideals: keep one
    first_half = np.arange(len(P)) < len(P) // 2
    dup = ~first_half & (KB == np.concatenate([KB[: len(P) // 2]] * 2))
    ok &= ~dup
    return P[ok], K[ok], KB[ok]


def _fill_counts(L: int, stages_cut, tp_cut, gpus_cut: int, tp_fill, gpus_fill: int, ds):
    """(row, stages_cut, stages_fill) for every row and replica count ``d`` in ``ds`` whose
    ``d`` replicas of ``stages_cut`` stages fit the cut pool: ``stages_fill`` is the most stages
    ``d`` replicas fill on the other pool (at most the layers left)."""
    R, D = np.meshgrid(np.arange(len(stages_cut)), ds, indexing="ij")
    R, D = R.ravel(), D.ravel()
    sc = stages_cut[R]
    sf = np.minimum(gpus_fill // (D * tp_fill[R]), L - sc)
    ok = (D * sc * tp_cut[R] <= gpus_cut) & (sf >= 1)
    return R[ok], sc[ok], sf[ok]


def _smaller_pool_counts(L: int, mb, ta, tb, gpus_a: int, gpus_b: int, global_batch: int):
    """(pair, k_a, k_b): the proportional splits of the pools cut to what a pipeline mix holds
    of them. ``d`` replicas of ``k_a`` stages hold ``d k_a t_a`` GPUs of pool ``a``; the
    proportional ``k_b`` of pool ``a`` cut to that size fills pool ``b`` with the ``d``
    replicas (``floor(gpus_b / (d t_b))``); likewise with ``b`` cut. Every replica count ``d``
    (a divisor of the step's micro-batches) and every ``k`` of the cut pool."""
    ka = np.arange(1, L)
    out = []
    for m in np.unique(mb):
        ds = divisors(global_batch // int(m))
        PK, KK = np.meshgrid(np.flatnonzero(mb == m), ka, indexing="ij")
        PK, KK = PK.ravel(), KK.ravel()
        r, k_a, k_b = _fill_counts(L, KK, ta[PK], gpus_a, tb[PK], gpus_b, ds)          # pool a cut
        out.append((PK[r], k_a, k_b))
        r, k_b, k_a = _fill_counts(L, KK, tb[PK], gpus_b, ta[PK], gpus_a, ds)          # pool b cut
        out.append((PK[r], k_a, k_b))
    if not out:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    return tuple(np.concatenate([o[i] for o in out]) for i in range(3))


def _mix_pipelines(keys: Keys, a: int, b: int, I, J, ta, tb, P, K, KB, gpus_a: int, gpus_b: int,
                   global_batch: int, zeros) -> tuple[Pipelines, np.ndarray]:
    """The pipelines of (pair, k_a, k_b) rows, with as many replicas as both pools hold and
    divide the step's micro-batches, per ZeRO stage."""
    ta_, tb_ = ta[P], tb[P]
    room = np.minimum(gpus_a // (K * ta_), gpus_b // (KB * tb_))
    mb = keys.micro_batch[I[P]]
    d = np.zeros(len(P), dtype=np.int64)
    for m in np.unique(mb):
        sel = mb == m
        d[sel] = _largest_divisor_table(global_batch // int(m), max(gpus_a, gpus_b))[room[sel]]
    out = []
    for z in zeros:
        keep = (d >= 1) & ((z == 0) | (d > 1))
        out.append(np.stack([I[P][keep], J[P][keep], ta_[keep], tb_[keep], K[keep], KB[keep], d[keep],
                             (global_batch // mb[keep]) // d[keep], np.full(int(keep.sum()), z)], axis=1))
    r = np.concatenate(out) if out else np.zeros((0, 9), dtype=np.int64)
    n = len(r)
    pipes = _pipelines(np.arange(n), r[:, 6], r[:, 7], np.stack([np.full(n, a), np.full(n, b)], axis=1),
                       r[:, 0:2], r[:, 2:4], r[:, 4:6])
    return pipes, r[:, 8]


def pipeline_mix(model: ModelSpec, keys: Keys, a: int, b: int, gpus_a: int, gpus_b: int, global_batch: int,
                 zeros, usable=None) -> tuple[Pipelines, np.ndarray]:
    """Replicas of pipelines whose first ``k_a`` stages are on pool ``a`` and last ``k_b`` on
    pool ``b`` (same micro-batch, recomputation and sp; each pool its own tp). ``k_b`` is the
    count (rounded down or up) that gives both pools the same share of their GPUs; the replicas
    are as many as both pools hold and divide the step's micro-batches. Only the keys ``usable``
    allows (a (K,) mask; None: all) take part."""
    I, J, ta, tb = _matched_pairs(keys, a, b, usable)
    P, K, KB = _proportional_counts(model.num_layers, ta, tb, gpus_a, gpus_b)
    return _mix_pipelines(keys, a, b, I, J, ta, tb, P, K, KB, gpus_a, gpus_b, global_batch, zeros)


def pipeline_mix_smaller(model: ModelSpec, keys: Keys, a: int, b: int, gpus_a: int, gpus_b: int,
                         global_batch: int, zeros, usable=None) -> tuple[Pipelines, np.ndarray]:
    """The pipeline mixes of smaller pools that ``pipeline_mix`` of these lacks, so that growing
    a pool keeps the splits that fill a smaller size of it (not every split of every smaller
    size: the rounded-up proportional count of a smaller pool, and the proportional counts of
    sizes between two replica counts' fills, are not reproduced): a mix with ``d`` replicas of ``k_a`` stages holds only
    ``d k_a t_a`` GPUs of pool ``a``, and on a pool of that size the proportional ``k_b`` is the
    one that fills pool ``b`` with the ``d`` replicas. So, for every replica count ``d`` (a
    divisor of the step's micro-batches) and every ``k_a`` whose replicas fit pool ``a``, the
    ``k_b`` that ``d`` replicas fill (at most the layers left); likewise every ``k_b`` with the
    ``k_a`` that fills pool ``a``. The replicas, as in ``pipeline_mix``, are as many as both
    pools hold (at least ``d``). Each (pair, k_a, k_b) once, none of ``pipeline_mix``'s (of the
    same ``usable`` keys)."""
    L = model.num_layers
    I, J, ta, tb = _matched_pairs(keys, a, b, usable)
    P0, K0, KB0 = _proportional_counts(L, ta, tb, gpus_a, gpus_b)
    P, K, KB = _smaller_pool_counts(L, keys.micro_batch[I], ta, tb, gpus_a, gpus_b, global_batch)
    width = np.int64(L + 1)
    code = np.setdiff1d((P * width + K) * width + KB, (P0 * width + K0) * width + KB0)   # sorted, unique
    P, K, KB = code // (width * width), (code // width) % width, code % width
    return _mix_pipelines(keys, a, b, I, J, ta, tb, P, K, KB, gpus_a, gpus_b, global_batch, zeros)
