"""The planner's memory search: the fewest recomputed or offloaded layers that make a row fit.

Rows that recompute in full and fit only with some recomputation get, per stage, the fewest
layers per chunk that keep the stage under the limit (Megatron's ``--recompute-num-layers`` N =
the largest stage's need, ``--recompute-layers-decrement`` the steepest per-stage decrease that
still fits); rows that do not fit without full recomputation get the fewest offloaded layers per
chunk that make them fit, when the cluster has a host link. Both by bisection, started with two
probes around the linear estimate (memory falls about linearly with the layers recomputed), on
the stages / rows still open only. The stage memory (``simulator.stage_memory``) evaluates.
"""
from __future__ import annotations

import numpy as np

from cost_models import memory
from simulator.config_batch import RECOMPUTE_CODES, RECOMPUTE_METHOD_CODES
from simulator.parallel_config import Recompute, RecomputeMethod
from simulator.stage_cells import StageCells, ranges, row_bounds

_UNIFORM = RECOMPUTE_METHOD_CODES[RecomputeMethod.UNIFORM]
_FULL = RECOMPUTE_CODES[Recompute.FULL]


#: the dynamic parts a stage total reads
_TOTAL_KEYS = ("activations_bytes", "recompute_buffers_bytes", "offload_buffers_bytes")


def recompute_beyond_loss(recompute_bytes, loss_freed_bytes=0.0):
    """Bytes the recompute buffer adds to a stage's peak (``recompute_bytes`` less the loss's
    logits freed before it, ``loss_freed_bytes``: ``memory_rows.loss_freed_bytes``, 0 on a stage
    without logits): the two are never in memory at once, so the stage holds the larger, the
    logits counted in full with the static parts and the recompute buffer for its excess."""
    return np.maximum(recompute_bytes - loss_freed_bytes, 0.0)


def stage_total(static_tensors, dynamic: dict, reserved_bytes: float = memory.RUNTIME_RESERVED_BYTES,
                loss_freed=0.0) -> np.ndarray:
    """Stage totals (bytes) with the allocator's allowance (``reserved_bytes``: the device's
    runtime reserve, ``memory.runtime_reserved_bytes``): the static tensors plus the
    activations, recompute and offload buffers of ``dynamic``, the recompute buffer beyond the
    logits freed before it (``loss_freed``, per stage: ``recompute_beyond_loss``)."""
    tensors = static_tensors + dynamic["activations_bytes"] \
        + recompute_beyond_loss(dynamic["recompute_buffers_bytes"], loss_freed) + dynamic["offload_buffers_bytes"]
    return tensors + memory.allocator_allowance_bytes(tensors, reserved_bytes)


def fewest_that_fit(prm: dict, idx, fc: StageCells, limit, out: dict, static_tensors, dyn: dict, row_max,
                    offload_ok, dynamic, partial_ok=True, reserved_bytes: float = memory.RUNTIME_RESERVED_BYTES,
                    loss_freed=None) -> dict:
    """The dynamic parts of the batch's stages after the search (``dyn``: as enumerated, per
    stage of ``fc``, whose rows are ``idx`` of the batch; its arrays are updated in place, so
    they must be the caller's own): per stage, bisection on the fewest
    recomputed layers per chunk whose stage total fits ``limit`` (bytes); per row, on the
    fewest offloaded layers per chunk that make it fit; on the rows that need it. The counts
    chosen are written to ``out`` (``_recompute_num_layers``, ``_recompute_layers_decrement``,
    ``_offload_activation_layers``, batch rows).

    ``prm``: the rows' split inputs (``rc``, ``nl``, ``method``, ``off`` codes);
    ``static_tensors``: per stage, the bytes that do not depend on the counts; ``row_max``:
    each row's largest chunk (layers); ``offload_ok``: per row, whether the cluster can take
    offloaded activations; ``partial_ok``: per row, whether the stack recomputes some layers
    only (``stack_support``: not where it lacks ``partial_recompute``); ``dynamic(pos, counts_key, counts, keys)``: the dynamic parts
    ``keys`` (default all) of stages ``pos`` with ``counts`` per stage (``counts_key``
    ``stage_rc``: the block counts, ``offload``: the offloaded layers per chunk); ``reserved_bytes``:
    the device's runtime reserve (``memory.runtime_reserved_bytes``); ``loss_freed``: per stage,
    the logits freed before its recomputation (``stage_total``; None: none)."""
    if not len(row_max) or row_max.max() <= 0:
        return dyn
    freed = np.zeros(len(static_tensors)) if loss_freed is None else np.asarray(loss_freed, dtype=float)
    bounds = row_bounds(fc.row)
    n_stages = np.diff(np.append(bounds, len(fc)))
    rc, nl = prm["rc"], prm["nl"]

    def totals(pos, stage_rc=None, offload=None):
        kind, counts = ("stage_rc", stage_rc) if offload is None else ("offload", offload)
        return stage_total(static_tensors[pos], dynamic(pos, kind, counts, _TOTAL_KEYS), reserved_bytes, freed[pos])

    changed = []          # (stages, their dynamic parts) the search chose

    def replace(pos, counts_key, counts):
        changed.append((pos, dynamic(pos, counts_key, counts)))

    # every row's stage totals as enumerated (full recomputation of every layer where asked)
    t_given = stage_total(static_tensors, dyn, reserved_bytes, freed)
    peak_given = np.maximum.reduceat(t_given, bounds)
    enumerated_full = (rc == _FULL) & (nl == 0) & (prm["method"] != _UNIFORM)
    if enumerated_full.any():
        # rows that fit recomputing every layer but not recomputing none: the fewest layers per
        # chunk N_s per stage s that fit, by bisection between 1 and every layer (a row that fits
        # without recomputation stays the "every layer" point of the memory / time trade-off; one
        # that does not fit even so is dropped by the planner)
        cand = np.flatnonzero(enumerated_full & (peak_given <= limit) & partial_ok)
        pos = ranges(bounds[cand], n_stages[cand])
        t0 = totals(pos, stage_rc=np.zeros(len(pos)))
        middle = _row_peaks(t0, n_stages[cand]) > limit
        rows = cand[middle]
        keep = np.repeat(middle, n_stages[cand])
        pos, t0 = pos[keep], t0[keep]
        if len(rows):
            n_max = row_max[fc.row[pos]]
            lo = np.where(t0 <= limit, 0.0, 1.0)
            hi = np.where(t0 <= limit, 0.0, n_max)
            # memory falls about linearly with the layers recomputed: two probes around the linear
            # estimate settle most stages, bisection the rest
            guess = np.ceil(n_max * (t0 - limit) / np.maximum(t0 - t_given[pos], 1.0))
            lo, hi = _bisect(lambda g, open_: totals(pos[open_], stage_rc=g) <= limit, lo, hi, guess)
            need = hi
            rb = np.cumsum(n_stages[rows]) - n_stages[rows]
            top = np.maximum(_row_peaks(need, n_stages[rows]), 1.0)
            top_s = np.repeat(top, n_stages[rows])
            at = fc.local[pos].astype(float)
            with np.errstate(divide="ignore", invalid="ignore"):
                slack = np.where(at > 0, (top_s - need) / at, np.inf)
            dec = np.floor(np.minimum.reduceat(slack, rb))
            dec = np.where(np.isfinite(dec), np.maximum(dec, 0.0), 0.0)
            # every stage recomputes every layer (the first stage all of them and no later stage
            # fewer): the enumerated "full"; a first stage needing every layer with later stages
            # needing fewer keeps its decrement (N = the largest chunk, each later stage M fewer)
            covers_all = (top >= row_max[rows]) & ((dec == 0) | (n_stages[rows] == 1))
            counts = np.where(np.repeat(covers_all, n_stages[rows]), n_max,
                              np.maximum(top_s - at * np.repeat(dec, n_stages[rows]), 0.0))
            out["_recompute_num_layers"][idx[rows]] = np.where(covers_all, 0.0, top)
            out["_recompute_layers_decrement"][idx[rows]] = np.where(covers_all | (n_stages[rows] == 1), 0.0, dec)
            replace(pos, "stage_rc", counts)
    offloadable = (rc != _FULL) & offload_ok & (prm["off"] == 0) & (peak_given > limit)
    if offloadable.any():
        # the dynamic parts are never negative: a row whose static parts alone do not fit never fits
        r = np.flatnonzero(offloadable)
        t_static = stage_total(static_tensors[ranges(bounds[r], n_stages[r])],
                               dict.fromkeys(("activations_bytes", "recompute_buffers_bytes", "offload_buffers_bytes"),
                                             0.0), reserved_bytes)
        offloadable[r] = _row_peaks(t_static, n_stages[r]) <= limit
    if offloadable.any():
        rows = np.flatnonzero(offloadable)
        lo = np.ones(len(rows))
        hi = np.maximum(row_max[rows] - 1.0, 1.0)
        t_lo = peak_given[rows]

        def end_totals(r, g):
            """The first and the last stage's totals of rows ``r`` (of ``rows``) with ``g`` layers
            offloaded per chunk (the same stage twice on a one-stage row)."""
            first = bounds[rows[r]]
            return totals(first, offload=g), totals(first + n_stages[rows[r]] - 1, offload=g)

        def middle_peaks(r, g):
            """Each row's peak over its stages other than the first and the last (-inf when it
            has none), ``g`` layers offloaded per chunk: with ``end_totals``, the row's peak (a
            stage's total depends on its own inputs only, and a maximum on its operands, not
            their order)."""
            inner = n_stages[rows[r]] - 2
            out = np.full(len(r), -np.inf)
            has = inner > 0
            if has.any():
                rr = r[has]
                pos = ranges(bounds[rows[rr]] + 1, inner[has])
                out[has] = _row_peaks(totals(pos, offload=np.repeat(g[has], inner[has])), inner[has])
            return out

        def fits(r, g):
            """Whether rows ``r`` peak within the limit with ``g`` layers offloaded per chunk:
            a row whose first or last stage is over is settled without its other stages (the
            first stage holds the most in-flight sets, the last the logits)."""
            first, last = end_totals(r, g)
            ok = ~((first > limit) | (last > limit))
            ok[ok] = np.maximum(np.maximum(first[ok], last[ok]), middle_peaks(r[ok], g[ok])) <= limit
            return ok

        # rows that fit offloading all they may (the others are dropped): most of the rows
        # over the limit as enumerated are over at an end stage even so
        first, last = end_totals(np.arange(len(rows)), hi)
        over = (first > limit) | (last > limit)
        rows, lo, hi, t_lo = rows[~over], lo[~over], hi[~over], t_lo[~over]
        t_hi = np.maximum(np.maximum(first[~over], last[~over]), middle_peaks(np.arange(len(rows)), hi))
        reach = t_hi <= limit
        rows, lo, hi, t_lo, t_hi = rows[reach], lo[reach], hi[reach], t_lo[reach], t_hi[reach]
        if len(rows):
            guess = np.ceil(hi * (t_lo - limit) / np.maximum(t_lo - t_hi, 1.0))
            lo, hi = _bisect(lambda g, r: fits(r, g), lo, hi, guess)
            out["_offload_activation_layers"][idx[rows]] = hi
            pos = ranges(bounds[rows], n_stages[rows])
            replace(pos, "offload", np.repeat(hi, n_stages[rows]))
    for pos, part in changed:
        for k in dyn:
            dyn[k][pos] = part[k]
    return dyn


def _row_peaks(x, n_stages) -> np.ndarray:
    """Per row, the largest of per-stage ``x`` laid out row after row, ``n_stages`` each."""
    if not len(n_stages):
        return np.zeros(0)
    return np.maximum.reduceat(x, np.cumsum(n_stages) - n_stages)


def _bisect(fits, lo, hi, guess):
    """The smallest count in [lo, hi] for which ``fits(counts, elements)`` (monotone; evaluated
    on the element indices ``elements`` only) holds, elementwise: first two probes at the
    ``guess`` and next to it, then bisection on the elements still open; (lo, hi) with lo == hi."""
    def probe(g, at):
        lo_at, hi_at = lo[at], hi[at]
        g = np.clip(g[at], lo_at, hi_at)
        ok = fits(g, at)
        hi[at] = np.where(ok, g, hi_at)
        lo[at] = np.where(ok, lo_at, g + 1.0)
        return ok

    lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
    guess = np.broadcast_to(np.asarray(guess, dtype=float), lo.shape)
    at = np.flatnonzero(lo < hi)
    if len(at):
        ok = probe(guess, at)
        second = np.array(guess, copy=True)
        second[at] = np.where(ok, guess[at] - 1.0, guess[at] + 1.0)
        at = np.flatnonzero(lo < hi)
        if len(at):
            probe(second, at)
    at = np.flatnonzero(lo < hi)
    while len(at):
        probe(np.floor((lo + hi) / 2.0), at)
        at = np.flatnonzero(lo < hi)
    return lo, hi
