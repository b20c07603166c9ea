"""Search aggregated and disaggregated serving layouts for the best tokens/s per GPU under an SLO.

Aggregated: every worker layout of ``space.worker_layouts`` (only the expert splits the
stack's engine runs) crossed with per-rank batches,
replicated over the GPUs (throughput per GPU is one worker's). Disaggregated: prefill layouts x
prompts per prefill step (1, 2, 4, 8), decode layouts x batches, and worker counts that fit
the GPUs (prefill counts up to 64, then a fixed geometric grid, the same for every GPU count,
each with as many decode workers as fit, every count up to 16 or a power of two). Both go through ``simulator.serving`` (the functions ``serve
simulate`` calls), column-wise: the decode and prefill sides are evaluated once per distinct
configuration, the closed loop once per combination. Decode configurations off the decode-only
Pareto front per worker size (tokens/s/GPU vs tokens/s/user) and prefill configurations off the
prefill front (requests/s per GPU vs one prompt's time) are left out of the combinations tabled
(the candidates and their Pareto front): a faster decode step also loads the prefill workers
more, so the TTFT objective can favour a configuration off those fronts, and the SLO search does
not rest on them. Under an SLO each pairing meeting it at a batch tried is searched over its
decode batches (``_disagg_slo_batches``), and then every pairing of any prefill configuration
that fits with any decode layout, unless an upper bound on its tokens/s (per GPU and in all,
with the TTFT objective's limits on the prefill queue) says it cannot beat the best found
(``_disagg_bound``): the optimum of either ranking is that of the search without the fronts.

The objective: the highest tokens/s per GPU among candidates whose mean TTFT <= ``ttft_ms`` and
TPOT <= ``tpot_ms``; the Pareto front of tokens/s/GPU against tokens/s/user (1 / TPOT) among
candidates meeting the TTFT objective, per mode.
"""
from __future__ import annotations

import numbers
import time
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from cost_models.worker_placement import most_beside, pair_fits, whole_workers
from cost_models.weight_formats import WEIGHT_FORMATS, weight_bytes
from hardware_specs.errors import InputError, as_given, is_finite, shown, whole_number
from hardware_specs.efficiency_model import prior_mark
from planners.serving.labels import prompts_per_step, worker_labels
from planners.serving.pareto import pareto_front
from planners.serving.progress import SILENT, Stages, in_chunks
from planners.serving.space import with_batches, worker_layouts
from simulator.serving.aggregated import evaluate_agg, memory_columns, synchronised_wait_s
from simulator.serving.disaggregated import combine, decode_side, mdc_mean_wait_s, prefill_side
from simulator.serving.deployment import MAX_BATCH, MAX_REQUEST_TOKENS

PREFILL_BATCHES = (1, 2, 4, 8)
#: the stride of the first pass over every batch a layout holds under an SLO (``_search_batches``):
#: every batch between two of its points is then evaluated where the objective stops being met or
#: TPOT / TTFT falls between them. Only a dip in the step time that begins and ends within one
#: stride is unseen: the engines' kernel switch points (one-shot / two-shot all-reduce at 128
#: tokens, the CUDA-graph batch, the token budget) are each a step that lasts to the next one,
#: hundreds of tokens apart. 8 keeps the pass to an eighth of the batches (DeepSeek-R1 on 64 GPUs:
#: ~100,000 aggregated batches, 1.3 s evaluated one by one)
BATCH_STEP = 8
#: prefill worker counts a disaggregated search pairs (those that fit): every count up to 64, then
#: four a doubling (64 x 2^(k/4), rounded) up to ``MAX_GPUS``. One grid for every GPU count, so
#: the counts tried on n GPUs are tried on n + 1 too (48 counts log-spaced up to the most that
#: fit had moved with n: 33 prefill workers, the best plan on 64 H100, was not tried on 65)
PREFILL_COUNTS = np.unique(np.concatenate([np.arange(1.0, 65.0), np.round(64.0 * 2.0 ** (np.arange(1, 25) / 4.0))]))
#: the largest GPU count one search covers (worker counts are enumerated up to it)
MAX_GPUS = 4096
#: the stages of each mode's search, in order, as ``plan_serving`` reports its progress
SEARCH_STAGES = {"agg": ("aggregated layouts", "aggregated batches"),
                 "disagg": ("disaggregated pairings", "disaggregated batches", "pairings the fronts dropped")}
#: columns of ``ServingPlan.candidates``
COLUMNS = ("mode", "layout", "prefill_layout", "decode_layout", "batch", "prefill_batch", "workers", "prefill_workers",
           "decode_workers", "gpus_used", "concurrency", "ttft_ms", "ttft_p90_ms", "tpot_ms", "tokens_per_s_per_gpu",
           "tokens_per_s_per_user", "meets_slo")


@dataclass(frozen=True, eq=False)
class RefusedBest:
    """The search's winner that the serving engine cannot launch as priced, kept beside the best
    layout it can (``paraplan.serving_launchable.engine_best``; the planner itself never sets it).

    Attributes:
        row: the winner's ``candidates`` row.
        refusal: the engine's reason, ``"field: message"`` as ``paraplan serve plan --json``'s
            ``engine_refused_best.engine_refuses`` gives it (``--mode: vLLM ships no router for
            disaggregated prefill and decode workers``).
    """

    row: pd.Series
    refusal: str


@dataclass
class ServingPlan:
    """Result of ``plan_serving``.

    Attributes:
        candidates: every fitting candidate (``COLUMNS``; layouts as labels, degrees in
            ``*_tp``/``*_pp``/... columns).
        front: the Pareto-front rows per mode among candidates meeting the TTFT objective.
        best: the winning row (None when nothing meets the SLO).
        why: lines explaining the winner (or what binds when nothing meets the SLO).
        evaluated: candidates scored; wall_s: seconds.
        engine_refused_best: None from the search; where a caller replaced ``best`` by the best
            layout the engine can launch (``with_best``, ``paraplan.serving_launchable``), the
            search's winner the engine refuses and why (``RefusedBest``).
        launch_refusal: None from the search; where a caller checked ``best`` against the engine
            (``paraplan.serving_launchable.engine_plan``), the one line ``serve plan`` prints when
            the engine cannot launch ``best`` as priced (vLLM's missing disaggregated router, a
            tensor x pipeline group spanning hosts, ...); None where it launches.
    """

    candidates: pd.DataFrame
    front: pd.DataFrame
    best: pd.Series | None
    why: list[str] = field(default_factory=list)
    evaluated: int = 0
    wall_s: float = 0.0
    engine_refused_best: RefusedBest | None = None
    launch_refusal: str | None = None


def _with_fitting_batches(cols: dict, max_batch: int, evaluate) -> tuple[dict, dict]:
    """``evaluate(cols)`` at the power-of-two batches of ``cols`` (``with_batches``) and, for each
    layout, also at the largest batch its KV cache holds (``max_batch_per_rank``, capped at
    ``max_batch``) where that is no power of two: Llama-3.1-70B at tp 2 on H100 (vLLM 0.14, fp8
    weights and KV cache, isl 1024 + osl 1024) holds 309 a rank, and batch 256 gives 2% fewer
    tokens/s. Returns the columns and outputs with those rows appended."""
    out = evaluate(cols)
    fit = np.minimum(out["max_batch_per_rank"], float(max_batch))
    extra = (cols["batch"] == 1.0) & (fit >= 1.0) & (2.0 ** np.round(np.log2(np.maximum(fit, 1.0))) != fit)
    if not extra.any():
        return cols, out
    return _appended(cols, out, np.flatnonzero(extra), np.broadcast_to(fit, extra.shape)[extra], evaluate)


def _appended(cols: dict, out: dict, rows: np.ndarray, batches: np.ndarray, evaluate) -> tuple[dict, dict]:
    """``cols`` / ``out`` with the layouts of ``rows`` evaluated again at ``batches``, appended."""
    more = {k: v[rows] for k, v in cols.items()}
    more["batch"] = np.asarray(batches, dtype=float)
    more_out = evaluate(more)
    n, n_more = cols["batch"].shape, more["batch"].shape
    cols = {k: np.concatenate([cols[k], more[k]]) for k in cols}
    out = {k: (np.concatenate([np.broadcast_to(out[k], n), np.broadcast_to(more_out[k], n_more)])
               if isinstance(out[k], np.ndarray) or np.isscalar(out[k]) else out[k]) for k in out}
    return cols, out


def _meets(out: dict, ttft_s: float, tpot_s: float) -> np.ndarray:
    """Whether each evaluated row fits and meets the objective (mean TTFT and TPOT, seconds)."""
    return (out["ttft_s"] <= ttft_s) & (out["tpot_s"] <= tpot_s) & out["fits"]


def _every_batch(lo: np.ndarray, hi: np.ndarray, step: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(row, batch): every ``step``-th whole batch from ``lo`` of each row, and ``hi`` itself,
    row by row (none where hi < lo)."""
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    n = np.where(hi >= lo, np.ceil((hi - lo) / step) + 1.0, 0.0).astype(np.int64)
    rows = np.repeat(np.arange(n.size), n)
    offset = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    return rows, np.minimum(lo[rows] + step * offset, hi[rows])


def _best_meeting(rows: np.ndarray, batch: np.ndarray, meets: np.ndarray, score: np.ndarray,
                  n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``n_rows``, the largest batch among ``batch`` (of row ``rows``) that ``meets``
    the objective, and the one meeting it with the highest ``score`` (the larger batch on a tie);
    0 where none meets it."""
    largest = np.zeros(n_rows)
    np.maximum.at(largest, rows[meets], batch[meets])
    top = np.full(n_rows, -np.inf)
    np.maximum.at(top, rows[meets], score[meets])
    at_top = meets & (score == top[rows])
    best = np.zeros(n_rows)
    np.maximum.at(best, rows[at_top], batch[at_top])
    return largest, best


def _search_batches(lo: np.ndarray, hi: np.ndarray, run, refine=None, part=None) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the largest whole batch in [lo, hi] meeting the objective and the one meeting it
    with the highest score (``_best_meeting``; 0 where none does), without assuming that meeting
    it is monotone in the batch. ``run(rows, batch)`` returns (meets, score, tpot_s, ttft_s)
    arrays. Every ``BATCH_STEP``-th batch from ``lo`` and ``hi`` are evaluated; then every batch between two
    neighbours where the objective stops being met, where TPOT or TTFT falls (the step time drops
    where the engine switches kernels), or where ``refine(rows, left, right)`` says so. Both
    passes are priced in chunks (``progress.in_chunks``), ``part(rows_done, rows)`` after each
    chunk of the first."""
    hi = np.floor(np.asarray(hi, dtype=float))
    rows, batch = _every_batch(lo, hi, BATCH_STEP)
    got = in_chunks(run, rows, batch, part)
    meets, score, tpot, ttft = (np.broadcast_to(v, batch.shape) for v in got[:4])
    # where ``run`` gives a fifth array (the requests a step carries, a disaggregated loop's
    # decoding count), ``refine`` looks between those rather than between the batches
    where = np.broadcast_to(got[4], batch.shape) if len(got) > 4 else batch
    left, right = slice(None, -1), slice(1, None)
    gap = (rows[left] == rows[right]) & (batch[right] - batch[left] > 1.0)
    turn = (meets[left] & ~meets[right]) | (tpot[right] < tpot[left]) | (ttft[right] < ttft[left])
    if refine is not None:
        turn = turn | refine(rows[left], where[left], where[right])
    fill = np.flatnonzero(gap & turn)
    at, more = _every_batch(batch[fill] + 1.0, batch[fill + 1] - 1.0)
    more_rows = rows[fill][at]
    m2, s2 = (np.broadcast_to(v, more.shape) for v in in_chunks(run, more_rows, more)[:2])
    return _best_meeting(np.concatenate([rows, more_rows]), np.concatenate([batch, more]),
                         np.concatenate([meets, m2]), np.concatenate([score, s2]), hi.size)


def _batches_meeting(cols: dict, out: dict, evaluate, ttft_s: float, tpot_s: float,
                     max_batch: int, part=None) -> tuple[np.ndarray, np.ndarray]:
    """Per layout (the rows of ``cols`` at batch 1), the largest batch up to the most its KV cache
    holds whose TTFT and TPOT meet the objective, and the one meeting it with the most tokens/s
    per GPU (0 where no batch does; ``_search_batches``). TPOT is not monotone in the batch: the
    step time drops where the engine switches kernels as the batch grows (TensorRT-LLM's
    two-shot all-reduce above 128 tokens: DeepSeek-R1 tp8-ep8 on H200, 128/128, TPOT 35.5 ms at
    batch 128, 33.8 at 160, at the serving factors of 2026-12-05), and a bisection that took
    "misses at batch b" for "misses above b" picked batch 16 at 447 tokens/s/GPU where batch 166
    met a 34 ms TPOT at 569 (before that day's refit). And with
    clients in a closed loop a faster GPU serves each client sooner, so a power of two can just
    miss a TTFT objective one client fewer meets (Qwen3-32B tp4 at batch 8, isl 8192, on H200:
    503 ms against H100's 498)."""
    first = cols["batch"] == 1.0
    one = {k: v[first] for k, v in cols.items()}
    hi = np.minimum(np.floor(np.broadcast_to(out["max_batch_per_rank"], first.shape)[first]), float(max_batch))

    def run(rows, batch):
        got = evaluate({**{k: v[rows] for k, v in one.items()}, "batch": batch})
        return _meets(got, ttft_s, tpot_s), got["tokens_per_s_per_gpu"], got["tpot_s"], got["ttft_s"]
    return _search_batches(np.ones(hi.shape), hi, run, part=part)


def _agg(ctx, gpus: int, isl: int, osl: int, max_batch: int, allow_pp: bool, ttft_ms: float | None = None,
         tpot_ms: float | None = None, stages: Stages = SILENT) -> pd.DataFrame:
    stages.start("aggregated layouts")
    layouts = worker_layouts(ctx.model, gpus, ctx.cluster.gpus_per_node, allow_pp, ctx.behaviour, ctx.expert_format)
    if len(layouts) == 0:
        return pd.DataFrame(columns=COLUMNS)
    evaluate = lambda c: evaluate_agg(ctx, c["tp"], c["adp"], c["pp"], c["moe_tp"], c["moe_ep"],   # noqa: E731
                                      c["batch"], isl, osl)
    cols = with_batches(layouts, max_batch)
    cols["layout_index"] = np.cumsum(cols["batch"] == 1.0) - 1.0     # rows run layout by layout from batch 1
    cols, out = _with_fitting_batches(cols, max_batch, evaluate)
    if ttft_ms is not None and tpot_ms is not None:
        # each layout also at the largest batch meeting the objective, where that is a new batch
        # (and at the batch meeting it with the most tokens/s/GPU, where TPOT dips below it)
        stages.start("aggregated batches")
        largest, top = _batches_meeting(cols, out, evaluate, ttft_ms / 1e3, tpot_ms / 1e3, max_batch, stages.part)
        first = np.flatnonzero(cols["batch"] == 1.0)
        # tried already: the powers of two and the layout's largest fitting batch
        fit = np.minimum(np.floor(np.broadcast_to(out["max_batch_per_rank"], cols["batch"].shape)[first]),
                         float(max_batch))
        for best, also in ((largest, None), (top, largest)):
            power = 2.0 ** np.round(np.log2(np.maximum(best, 1.0))) == best
            new = (best >= 1.0) & ~power & (best != fit) & ((best != also) if also is not None else True)
            if new.any():
                cols, out = _appended(cols, out, first[new], best[new], evaluate)
    worker_gpus = cols["tp"] * cols["pp"] * cols["adp"]
    # whole workers only: one straddling two NVLink domains would cross the NICs where it is
    # priced inside one (cost_models.worker_placement; 144 GB200: 8 x 16 GPUs, not 9)
    workers = whole_workers(gpus, worker_gpus, cols["tp"] * cols["adp"], ctx.cluster.gpus_per_node)
    moe = ctx.model.moe is not None
    keep = out["fits"] & (workers >= 1)
    df = pd.DataFrame({
        "mode": "agg", "layout": worker_labels(cols["tp"], cols["pp"], cols["adp"], cols["moe_tp"], cols["moe_ep"], moe),
        "tp": cols["tp"], "pp": cols["pp"], "adp": cols["adp"], "moe_tp": cols["moe_tp"], "moe_ep": cols["moe_ep"],
        "batch": cols["batch"], "workers": workers, "gpus_used": workers * worker_gpus,
        "concurrency": cols["batch"] * cols["adp"] * workers,
        "ttft_ms": out["ttft_s"] * 1e3, "ttft_p90_ms": out["ttft_p90_s"] * 1e3, "tpot_ms": out["tpot_s"] * 1e3,
        "tokens_per_s_per_gpu": out["tokens_per_s_per_gpu"], "tokens_per_s_per_user": out["tokens_per_s_per_user"],
        "max_batch_per_rank": out["max_batch_per_rank"],
    })
    return df[keep].reset_index(drop=True)


def _front_per_size(rows, sizes, x, y):
    """The rows of ``rows`` on the Pareto front of (x, y), found separately among the workers of
    each GPU count in ``sizes``, in ascending order."""
    keep = [rows[sizes[rows] == g][pareto_front(x[rows[sizes[rows] == g]], y[rows[sizes[rows] == g]])]
            for g in np.unique(sizes[rows])]
    return np.sort(np.concatenate(keep)) if keep else rows[:0]


def _per_row(side: dict, idx, ref: str) -> dict:
    """The per-row arrays of ``side`` (those shaped like ``side[ref]``) at rows ``idx``."""
    shape = side[ref].shape
    return {k: v[idx] for k, v in side.items() if isinstance(v, np.ndarray) and v.shape == shape}


def _worker_counts(gpus: int, gp: float, gd: float, domain: int) -> tuple[np.ndarray, np.ndarray]:
    """The (prefill, decode) worker counts a disaggregated search pairs for workers of ``gp`` and
    ``gd`` GPUs (no pipeline stages) on ``gpus`` in NVLink domains of ``domain``: prefill counts
    ``PREFILL_COUNTS`` (every one up to 64, then a fixed geometric grid); decode counts every one
    up to 16 and the powers of two (neither grid moves with the GPU count, so a pairing of them
    that fits in n GPUs is still tried in n + 1: more GPUs never lose it), and as many as fit
    beside each prefill count; only pairings whose workers all sit whole in the domains
    (``cost_models.worker_placement.pair_fits``)."""
    most = int(whole_workers(gpus, gp, gp, domain))
    n_p = PREFILL_COUNTS[PREFILL_COUNTS <= most]
    fill = most_beside(gpus, gp, gp, n_p, gd, gd, domain)
    counts = np.unique(np.concatenate([np.arange(1.0, 17.0),
                                       2.0 ** np.arange(0, int(np.log2(max(gpus // int(gd), 1))) + 1)]))
    np_ = np.concatenate([n_p, np.repeat(n_p, len(counts))])
    nd_ = np.concatenate([fill, np.tile(counts, len(n_p))])
    pairs = np.unique(np.stack([np_, nd_], axis=1), axis=0).reshape(-1, 2)
    pairs = pairs[(pairs[:, 1] >= 1) & (pairs[:, 0] * gp + pairs[:, 1] * gd <= gpus)
                  & pair_fits(gpus, gp, gp, pairs[:, 0], gd, gd, pairs[:, 1], domain)]
    return pairs[:, 0], pairs[:, 1]


@dataclass
class _DecodeTable:
    """The decode side (``decode_side``) of every decode layout that holds one request, at every
    batch from 1 up to the most its KV cache holds (at most ``max_batch``), layout after layout.

    Attributes:
        lay: the layouts' columns (tp, pp, adp, moe_tp, moe_ep, layout_index), one row a layout.
        hi: each layout's largest batch; start: the row of its batch 1 in ``d``.
        pos_of: the position in ``lay`` of each ``layout_index`` (-1: none holds a request).
        d: the decode side, row by row; falls_upto: TPOT falls (kernel switches) counted up to
            each row within its layout.
        rate: an upper bound on the requests/s one decode worker finishes with r requests
            decoding a rank, for any r in (b - 1, b] (b this row's batch) whose TPOT can meet the
            objective: b adp / ((osl - 1) TPOT_low), TPOT_low the lower of the whole-batch TPOTs
            at b - 1 and b (at b = 1: its own), where it fits and TPOT_low meets the objective (0
            elsewhere). A pairing's step carries the requests decoding r <= b, the closed loop's
            fixed point (``disaggregated.combine``), not the whole batch, so the running best of
            ``rate`` up to b bounds what it delivers at batch b (``_disagg_bound``). Sound where
            the step between two whole batches is no faster than at both ends (the engines'
            switch points fall at whole token counts).
        step_least: the least decode step of the layout at any batch (a lower bound on its step
            with any number of requests decoding).
    """

    lay: dict
    hi: np.ndarray
    start: np.ndarray
    pos_of: np.ndarray
    d: dict
    falls_upto: np.ndarray
    rate: np.ndarray
    step_least: np.ndarray

    def at(self, pos, batch) -> np.ndarray:
        return self.start[pos] + (np.asarray(batch) - 1.0).astype(np.int64)


def _decode_table(ctx, dcols: dict, dec: dict, max_batch: int, isl: int, osl: int, tpot_s: float) -> _DecodeTable:
    first = np.flatnonzero(dcols["batch"] == 1.0)           # one row a layout, in layout_index order
    hi = np.minimum(np.floor(dec["max_batch_per_rank"][first]), float(max_batch))
    holds = np.flatnonzero(dec["fits"][first] & (hi >= 1.0))
    lay = {k: dcols[k][first][holds] for k in ("tp", "pp", "adp", "moe_tp", "moe_ep", "layout_index")}
    hi = hi[holds]
    pos_of = np.full(first.size, -1, dtype=np.int64)
    pos_of[lay["layout_index"].astype(np.int64)] = np.arange(holds.size)
    l_rows, l_batch = _every_batch(np.ones(hi.size), hi)
    d = decode_side(ctx, lay["tp"][l_rows], lay["adp"][l_rows], lay["pp"][l_rows], lay["moe_tp"][l_rows],
                    lay["moe_ep"][l_rows], l_batch, isl, osl)
    d = {k: np.broadcast_to(v, l_batch.shape) for k, v in d.items() if isinstance(v, np.ndarray) or np.isscalar(v)}
    start = np.concatenate([[0], np.cumsum(hi)[:-1]]).astype(np.int64)
    same = np.concatenate([[False], l_rows[1:] == l_rows[:-1]])      # the row before is the batch below
    falls = np.concatenate([[0.0], (d["tpot_s"][1:] < d["tpot_s"][:-1]) & same[1:]])
    below = np.concatenate([d["tpot_s"][:1], d["tpot_s"][:-1]])
    tpot_low = np.where(same, np.minimum(below, d["tpot_s"]), d["tpot_s"])
    ok = d["fits"] & (tpot_low <= tpot_s)
    rate = np.where(ok, d["clients"] / (max(osl - 1.0, 1.0) * tpot_low), 0.0)
    seg = np.repeat(np.arange(hi.size), hi.astype(np.int64))
    least = np.full(hi.size, np.inf)
    np.minimum.at(least, seg, d["step_s"])
    return _DecodeTable(lay, hi, start, pos_of, d, np.cumsum(falls), rate, least[seg])


def _refine(ctx, table: _DecodeTable, pre: dict, pi, pos, npw, ndw, lo, hi, isl: int, osl: int, ttft_s: float,
            tpot_s: float, part=None):
    """``_search_batches`` over decode batches [lo, hi] of the pairings (prefill row ``pi``, decode
    layout at ``pos`` of ``table``, worker counts): every batch between two evaluated ones where
    the layout's TPOT falls is evaluated too, a fall between the requests their steps carry
    (``combine``'s ``decoding_per_rank``, at most the batch: a fall at whole-batch counts between
    the lower one rounded down and the upper one rounded up). Returns the largest batch meeting
    the objective and the best (0 where none does); ``part`` as ``_search_batches``'."""
    psel = _per_row(pre, pi, "pre_one_s")

    def run(rows, batch):
        at = table.at(pos[rows], batch)          # the decode rows, looked up once for every column
        got = combine(ctx, {k: v[at] for k, v in table.d.items()},
                      {k: v[rows] for k, v in psel.items()}, npw[rows], ndw[rows], isl, osl)
        return (_meets(got, ttft_s, tpot_s), got["tokens_per_s_per_gpu"], got["tpot_s"], got["ttft_s"],
                got["decoding_per_rank"])

    def refine(rows, left, right):
        top = np.minimum(np.ceil(right), table.hi[pos[rows]])
        return table.falls_upto[table.at(pos[rows], top)] > table.falls_upto[table.at(pos[rows], np.floor(left))]

    return _search_batches(lo, hi, run, refine=refine, part=part)


def _disagg_slo_batches(ctx, table: _DecodeTable, dcols: dict, pre: dict, pi, di, npw, ndw, out: dict, isl: int,
                        osl: int, ttft_s: float, tpot_s: float, part=None):
    """For each pairing (prefill row, decode layout, worker counts) meeting the objective at some
    batch tried, the largest decode batch up to the most its KV cache holds that meets it, and
    the one meeting it with the most tokens/s per GPU (``_search_batches``, for
    ``_batches_meeting``'s reasons: a TPOT that dips as the engine switches kernels, a power of
    two that just misses the TTFT objective on a faster GPU), searched from the largest batch
    tried that meets it (the batches below it were tried at the powers of two). Returns the
    pairings searched (pi, layout_index, npw, ndw) and the new rows (layout position in
    ``table``, batch, pi, npw, ndw)."""
    meets = _meets(out, ttft_s, tpot_s)
    rows = np.flatnonzero(meets)
    key = pd.DataFrame({"pi": pi[rows], "lid": dcols["layout_index"][di[rows]], "npw": npw[rows], "ndw": ndw[rows],
                        "batch": dcols["batch"][di[rows]], "row": rows})
    if rows.size == 0:
        empty = np.zeros(0)
        return (empty,) * 4, (np.zeros(0, dtype=np.int64), empty, np.zeros(0, dtype=np.int64), empty, empty)
    top = key.loc[key.groupby(["pi", "lid", "npw", "ndw"]).batch.idxmax(), "row"].to_numpy()
    d0 = di[top]
    pos = table.pos_of[dcols["layout_index"][d0].astype(np.int64)]
    tried = dcols["batch"][d0]
    largest, best = _refine(ctx, table, pre, pi[top], pos, npw[top], ndw[top], tried, table.hi[pos], isl, osl,
                            ttft_s, tpot_s, part)
    searched = (pi[top], dcols["layout_index"][d0], npw[top], ndw[top])
    return searched, _picks(largest, best, tried, pos, pi[top], npw[top], ndw[top])


def _picks(largest, best, tried, pos, pi, npw, ndw):
    """The new rows of a batch search: each pairing at its largest batch meeting the objective and
    at its best, where those are batches not yet tried."""
    picks = [(largest, largest != tried), (best, (best != tried) & (best != largest))]
    which = np.concatenate([np.flatnonzero(m & (b >= 1.0)) for b, m in picks])
    batch = np.concatenate([b[m & (b >= 1.0)] for b, m in picks])
    return pos[which], batch, pi[which], npw[which], ndw[which]


def _utilisation_within(slack_s, servers, service_s) -> np.ndarray:
    """The highest prefill utilisation whose M/D/c mean wait (``mdc_mean_wait_s``, increasing in it) is at
    most ``slack_s``: bisection, rounded up (so a bound that uses it stays one)."""
    lo, hi = np.zeros(np.shape(slack_s)), np.ones(np.shape(slack_s))
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        within = mdc_mean_wait_s(mid, servers, service_s) <= slack_s     # the mean alone: no p90 to take
        lo, hi = np.where(within, mid, lo), np.where(within, hi, mid)
    return hi


def _rate_upto(table: _DecodeTable, upto: np.ndarray, pos, most) -> np.ndarray:
    """The best ``rate`` of the layouts at ``pos`` of ``table`` at batches up to ``most`` (0 below 1)."""
    return np.where(most >= 1.0, upto[table.at(pos, np.maximum(most, 1.0))], 0.0)


def _synchronised_most(table: _DecodeTable, pos, d_workers, servers, service_s, slack_s, arrival_sync) -> np.ndarray:
    """The largest batch b of each layout at ``pos`` of ``table`` (0 if none) whose synchronised
    wait could stay within ``slack_s`` (seconds): ``synchronised_wait_s``, the function
    ``combine`` charges, at its b x adp x ``d_workers`` / ``servers`` clients per prefill server,
    each taking ``service_s``. With the step taken as the layout's least at any batch (a lower
    bound on the step of the requests decoding, which ``combine`` prices: any number from 1 to
    b) the wait, rising with clients and step, grows with b: bisection
    over the whole batches on that function itself, so the bound moves with the wait model (the
    hand inversion it replaces, (N / c - 1) x step <= 4 slack^2 / (sync^2 service), would not)."""
    adp = table.lay["adp"][pos]
    lo, hi = np.zeros(np.shape(pos)), table.hi[pos].astype(float)
    while np.any(lo < hi):
        mid = np.ceil(0.5 * (lo + hi))
        at = table.at(pos, np.maximum(mid, 1.0))
        wait = synchronised_wait_s(mid * adp * d_workers / servers, service_s, table.step_least[at], arrival_sync)
        within = wait <= slack_s
        lo, hi = np.where(within, mid, lo), np.where(within, hi, mid - 1.0)
    return lo


def _disagg_bound(ctx, table: _DecodeTable, pre: dict, p_ok: np.ndarray, gpus: int, searched, best_per_gpu: float,
                  best_total: float, isl: int, osl: int, ttft_s: float, tpot_s: float, part=None):
    """The SLO search over the pairings the fronts dropped: every prefill configuration that fits
    (``p_ok``) with every decode layout holding a request, at every worker count, each searched
    over its decode batches (``_refine``) unless a bound says it cannot beat the best found
    (``best_per_gpu`` tokens/s/GPU, ``best_total`` tokens/s in all: either ranking).

    The bound, from ``combine``: a closed loop of N clients finishes x <= min(prefill capacity
    n_p c mu, N / ((osl - 1) TPOT)) requests a second, and a pairing delivers x osl / its GPUs.
    Its TTFT is at least the host time + one prompt's prefill + the queue wait min(M/D/c wait,
    (N - n_p c) / (n_p c mu)), so meeting the TTFT objective with ``slack`` left after the first
    two needs N <= n_p c (1 + slack mu) or a utilisation whose M/D/c wait is within the slack
    (``_utilisation_within``). The decode side enters through each layout's ``rate`` (requests/s
    a worker can finish with any count decoding in (b - 1, b] whose TPOT can meet the objective):
    its steps carry the requests decoding, the loop's fixed point r <= b (``combine``), so a batch
    whose whole-batch TPOT misses the objective can still meet it, and a batch b can deliver the
    running best of ``rate`` up to b. The batches searched run from the first whose running best
    beats the best found to the most the TTFT bound allows.

    A decode-only front had dropped DeepSeek-R1's decode tp8-etp2xep4 at batches 16 and 32
    (tp8-etp4xep2 is faster there) and kept it at 64, which misses a 30 ms TPOT; at batch 59 it
    meets it and beats every pairing kept (121.5 against 117 tokens/s/GPU on 16 H200). Returns
    the new rows as ``_disagg_slo_batches``."""
    none = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))
    if table.hi.size == 0 or p_ok.size == 0:
        return none
    slack = ttft_s - ctx.efficiency.request_host_s - pre["pre_one_s"]
    p_ok = p_ok[slack[p_ok] >= 0.0]
    n_lay = table.hi.size
    lay_gpus = table.lay["tp"] * table.lay["pp"] * table.lay["adp"]
    seg = np.repeat(np.arange(n_lay), table.hi.astype(np.int64))
    rate_max = np.zeros(n_lay)
    np.maximum.at(rate_max, seg, table.rate)
    # each layout's best rate up to each batch
    upto = np.concatenate([np.maximum.accumulate(table.rate[s:s + int(h)]) for s, h in zip(table.start, table.hi)])
    done = pd.MultiIndex.from_arrays([np.asarray(v, dtype=float) for v in searched])
    sync = ctx.efficiency.arrival_sync(ctx.behaviour.mixed_batches, ctx.behaviour.chunked_prefill)
    found = []
    for gp in np.unique(pre["gpus"][p_ok]):
        ps = p_ok[pre["gpus"][p_ok] == gp]
        for gd in np.unique(lay_gpus):
            ls = np.flatnonzero((lay_gpus == gd) & (rate_max > 0.0))
            if ls.size == 0:
                continue
            n_p, n_d = _worker_counts(gpus, gp, gd, ctx.cluster.gpus_per_node)
            if n_p.size == 0:
                continue
            g = n_p * gp + n_d * gd
            floor = np.minimum(best_per_gpu, best_total / g)
            ok = np.minimum(n_p * (pre["mu_per_rank"] * pre["ranks"])[ps].max(), n_d * rate_max[ls].max()) * osl / g > floor
            if not ok.any():
                continue
            a, b, c = (v.ravel() for v in np.meshgrid(ps, ls, np.flatnonzero(ok), indexing="ij"))
            servers = n_p[c] * pre["ranks"][a]
            mu = pre["mu_per_rank"][a]
            capacity = servers * mu
            need = floor[c] * g[c] / osl                    # requests/s that would beat the best
            keep = np.minimum(capacity, n_d[c] * rate_max[b]) > need
            a, b, c, servers, mu, capacity, need = (v[keep] for v in (a, b, c, servers, mu, capacity, need))
            # within the TTFT objective: few enough clients to leave no queue beyond the slack,
            # or a utilisation whose wait stays within it
            # and a synchronised wait within it (``_synchronised_most``)
            b_sync = _synchronised_most(table, b, n_d[c], servers, 1.0 / mu, slack[a], sync)
            few = servers * (1.0 + slack[a] * mu)
            b_few = np.minimum(np.floor(few / (n_d[c] * table.lay["adp"][b])), b_sync)
            by_few = np.minimum(capacity, n_d[c] * _rate_upto(table, upto, b, b_few))
            loaded = capacity * _utilisation_within(slack[a], servers, 1.0 / mu)
            by_load = np.minimum(loaded, n_d[c] * _rate_upto(table, upto, b, b_sync))
            keep = np.maximum(by_few, by_load) > need
            found.append((a[keep], b[keep], n_p[c[keep]], n_d[c[keep]], need[keep],
                          np.where(by_load[keep] > need[keep], b_sync[keep], b_few[keep])))
    if not found:
        return none
    pi, pos, npw, ndw, need, most = (np.concatenate(v) for v in zip(*found))
    new = ~pd.MultiIndex.from_arrays([pi.astype(float), table.lay["layout_index"][pos], npw, ndw]).isin(done)
    pi, pos, npw, ndw, need, most = (v[new] for v in (pi, pos, npw, ndw, need, most))
    # the batches whose bound beats the best: a decode worker able to finish more than
    # need / n_d requests a second, from the first batch of the layout whose running best does
    # (the requests decoding at a larger batch may be any count up to it) to the most clients
    # the TTFT bound allows
    lo = np.zeros(pi.size)
    for p in np.unique(pos):
        at = np.flatnonzero(pos == p)
        seg = slice(table.start[p], table.start[p] + int(table.hi[p]))
        thr = np.maximum(need[at] / ndw[at], 0.0)      # and only batches that fit and can meet TPOT
        lo[at] = np.searchsorted(upto[seg], thr, side="right") + 1.0      # the layout's running best
    hi = most
    go = hi >= lo
    pi, pos, npw, ndw, lo, hi = (v[go] for v in (pi, pos, npw, ndw, lo, hi))
    if pi.size == 0:
        return none
    largest, best = _refine(ctx, table, pre, pi, pos, npw, ndw, lo, hi, isl, osl, ttft_s, tpot_s, part)
    return _picks(largest, best, np.zeros(pi.size), pos, pi, npw, ndw)


def _append_pairings(ctx, table: _DecodeTable, new, dcols: dict, dec: dict, pre: dict, pairs: dict, isl: int,
                     osl: int) -> tuple[dict, dict, dict]:
    """``dcols`` / ``dec`` with the decode rows of ``new`` (``_picks``) appended, and ``pairs``
    (pi, di, npw, ndw, dsel, out) with their pairings and closed loops."""
    pos, batch, pi_n, npw_n, ndw_n = new
    if pi_n.size == 0:
        return dcols, dec, pairs
    at = table.at(pos, batch)
    rows_d = {k: table.d[k][at] for k, v in dec.items()
              if isinstance(v, np.ndarray) and v.shape == dec["tpot_s"].shape and k in table.d}
    cols_d = {**{k: v[pos] for k, v in table.lay.items()}, "batch": batch}
    n0 = len(dcols["batch"])
    dcols = {k: np.concatenate([dcols[k], cols_d[k]]) for k in dcols}
    dec = {k: (np.concatenate([v, rows_d[k]]) if k in rows_d else v) for k, v in dec.items()}
    di_n = n0 + np.arange(len(pi_n))
    dsel_n = {k: dec[k][di_n] for k in pairs["dsel"]}
    out_n = combine(ctx, dsel_n, _per_row(pre, pi_n, "pre_one_s"), npw_n, ndw_n, isl, osl)
    n_old = pairs["pi"].shape
    out = pairs["out"]
    return dcols, dec, {
        "pi": np.concatenate([pairs["pi"], pi_n]), "di": np.concatenate([pairs["di"], di_n]),
        "npw": np.concatenate([pairs["npw"], npw_n]), "ndw": np.concatenate([pairs["ndw"], ndw_n]),
        "dsel": {k: np.concatenate([pairs["dsel"][k], dsel_n[k]]) for k in pairs["dsel"]},
        "out": {k: np.concatenate([np.broadcast_to(out[k], n_old), np.broadcast_to(out_n[k], pi_n.shape)]) for k in out}}


def _disagg(ctx, gpus: int, isl: int, osl: int, max_batch: int, ttft_ms: float | None = None,
            tpot_ms: float | None = None, stages: Stages = SILENT) -> pd.DataFrame:
    stages.start("disaggregated pairings")
    domain = ctx.cluster.gpus_per_node
    layouts = worker_layouts(ctx.model, max(gpus - 1, 1), domain, allow_pp=False, behaviour=ctx.behaviour,
                             expert_format=ctx.expert_format)
    if len(layouts) == 0 or gpus < 2:
        return pd.DataFrame(columns=COLUMNS)
    # decode side: layouts x batches, keep the decode-only front
    dcols = with_batches(layouts, max_batch)
    dcols["layout_index"] = np.cumsum(dcols["batch"] == 1.0) - 1.0     # rows run layout by layout from batch 1
    dcols, dec = _with_fitting_batches(dcols, max_batch, lambda c: decode_side(
        ctx, c["tp"], c["adp"], c["pp"], c["moe_tp"], c["moe_ep"], c["batch"], isl, osl))
    d_tps_gpu = dec["clients"] / dec["tpot_s"] / dec["gpus"]
    d_ok = np.flatnonzero(dec["fits"])
    # the decode-only front per worker size: a larger worker that beats a smaller one per GPU may
    # not fit beside the prefill workers in the budget (Llama-3.1-70B on 5 H100: decode tp4 at
    # batch 256 pruned tp2 at batch 128, the best plan on 4 GPUs, which then lost on 5)
    d_keep = _front_per_size(d_ok, dec["gpus"], 1.0 / dec["tpot_s"], d_tps_gpu)
    # prefill side: layouts x prompts per step, keep the prefill front
    pb = np.array(PREFILL_BATCHES, dtype=float)
    li, bi = np.meshgrid(np.arange(len(layouts)), np.arange(len(pb)), indexing="ij")
    li, bi = li.ravel(), bi.ravel()
    p = {k: layouts[li, n] for n, k in enumerate(("tp", "pp", "adp", "moe_tp", "moe_ep"))}
    pre = prefill_side(ctx, p["tp"], p["adp"], p["pp"], p["moe_tp"], p["moe_ep"], pb[bi], isl)
    rate_gpu = pre["mu_per_rank"] * pre["ranks"] / pre["gpus"]
    p_ok = np.flatnonzero(pre["fits"])
    p_keep = _front_per_size(p_ok, pre["gpus"], rate_gpu, -pre["pre_one_s"])
    if d_keep.size == 0 or p_keep.size == 0:
        return pd.DataFrame(columns=COLUMNS)
    # worker counts per distinct pair of worker sizes (``_worker_counts``)
    pi_all, di_all, npw_all, ndw_all = [], [], [], []
    for gp in np.unique(pre["gpus"][p_keep]):
        for gd in np.unique(dec["gpus"][d_keep]):
            np_, nd_ = _worker_counts(gpus, gp, gd, ctx.cluster.gpus_per_node)
            if np_.size == 0:
                continue
            ps = p_keep[pre["gpus"][p_keep] == gp]
            ds = d_keep[dec["gpus"][d_keep] == gd]
            a, b, c = np.meshgrid(ps, ds, np.arange(np_.size), indexing="ij")
            pi_all.append(a.ravel())
            di_all.append(b.ravel())
            npw_all.append(np_[c.ravel()])
            ndw_all.append(nd_[c.ravel()])
    if not pi_all:
        return pd.DataFrame(columns=COLUMNS)
    pi, di = np.concatenate(pi_all), np.concatenate(di_all)
    npw, ndw = np.concatenate(npw_all), np.concatenate(ndw_all)
    dsel, psel = _per_row(dec, di, "tpot_s"), _per_row(pre, pi, "pre_one_s")
    out = combine(ctx, dsel, psel, npw, ndw, isl, osl)
    if ttft_ms is not None and tpot_ms is not None:
        ttft_s, tpot_s = ttft_ms / 1e3, tpot_ms / 1e3
        table = _decode_table(ctx, dcols, dec, max_batch, isl, osl, tpot_s)
        pairs = {"pi": pi, "di": di, "npw": npw, "ndw": ndw, "dsel": dsel, "out": out}
        stages.start("disaggregated batches")
        searched, new = _disagg_slo_batches(ctx, table, dcols, pre, pi, di, npw, ndw, out, isl, osl, ttft_s, tpot_s,
                                            stages.part)
        dcols, dec, pairs = _append_pairings(ctx, table, new, dcols, dec, pre, pairs, isl, osl)
        # then every configuration the fronts dropped, where a bound says it could beat the best
        # found (tokens/s per GPU or in all: either ranking)
        o = pairs["out"]
        meets = _meets(o, ttft_s, tpot_s)
        best_per_gpu = o["tokens_per_s_per_gpu"][meets].max() if meets.any() else -np.inf
        best_total = (o["tokens_per_s_per_gpu"] * o["gpus"])[meets].max() if meets.any() else -np.inf
        stages.start("pairings the fronts dropped")
        new = _disagg_bound(ctx, table, pre, p_ok, gpus, searched, best_per_gpu, best_total, isl, osl, ttft_s, tpot_s,
                            stages.part)
        dcols, dec, pairs = _append_pairings(ctx, table, new, dcols, dec, pre, pairs, isl, osl)
        pi, di, npw, ndw, dsel, out = (pairs[k] for k in ("pi", "di", "npw", "ndw", "dsel", "out"))
    moe = ctx.model.moe is not None
    p_lab = np.array(worker_labels(p["tp"], p["pp"], p["adp"], p["moe_tp"], p["moe_ep"], moe))
    d_lab = np.array(worker_labels(dcols["tp"], dcols["pp"], dcols["adp"], dcols["moe_tp"], dcols["moe_ep"], moe))
    df = pd.DataFrame({
        "mode": "disagg", "prefill_layout": p_lab[pi], "decode_layout": d_lab[di],
        "prefill_tp": p["tp"][pi], "prefill_pp": p["pp"][pi], "prefill_adp": p["adp"][pi], "prefill_moe_tp": p["moe_tp"][pi],
        "prefill_moe_ep": p["moe_ep"][pi], "decode_tp": dcols["tp"][di], "decode_pp": dcols["pp"][di], "decode_adp": dcols["adp"][di],
        "decode_moe_tp": dcols["moe_tp"][di], "decode_moe_ep": dcols["moe_ep"][di],
        "prefill_batch": pb[bi][pi], "batch": dcols["batch"][di], "prefill_workers": npw, "decode_workers": ndw,
        "gpus_used": out["gpus"], "concurrency": dsel["clients"] * ndw,
        "ttft_ms": out["ttft_s"] * 1e3, "ttft_p90_ms": out["ttft_p90_s"] * 1e3, "tpot_ms": out["tpot_s"] * 1e3,
        "tokens_per_s_per_gpu": out["tokens_per_s_per_gpu"], "tokens_per_s_per_user": out["tokens_per_s_per_user"],
        "prefill_utilization_fraction": out["prefill_utilization_fraction"],
        "max_batch_per_rank": dsel["max_batch_per_rank"],
    })
    return df


def describe(row) -> str:
    """One candidate as ``paraplan serve simulate`` takes it: its mode, layouts, worker counts and
    batches (a disaggregated one's prefill batch too: without it the deployment is not determined)."""
    if row["mode"] == "agg":
        return f"agg {int(row['workers'])} x {row['layout']} at batch {int(row['batch'])} per rank"
    return (f"disagg prefill {row['prefill_layout']} x{int(row['prefill_workers'])} ({prompts_per_step(row['prefill_batch'])}"
            f") + decode {row['decode_layout']} x{int(row['decode_workers'])} at batch {int(row['batch'])} per rank")


def compared(ratio: float) -> str:
    """How a rate ``ratio`` times another reads beside it: ``"1.58x more"``, ``"1.58x less"``
    (the other over this one), and within 0.5%, where two decimals would print ``1.00x`` of two
    different rates, the gap in percent of the larger (``"0.1% less"``), or ``"about the same"``
    below 0.05%."""
    word = "more" if ratio > 1 else "less"
    times = max(ratio, 1 / ratio)
    if f"{times:.2f}" != "1.00":
        return f"{times:.2f}x {word}"
    gap_pct = 100 * (1 - 1 / times)
    return "about the same" if gap_pct < 0.05 else f"{gap_pct:.1f}% {word}"


def _why(best: pd.Series, cands: pd.DataFrame, ttft_ms: float, tpot_ms: float, gpus: int = 0,
         rank_by: str = "per-gpu", modes=None, prior: bool = False) -> list[str]:
    """The lines saying why ``best`` wins; each predicted time and rate carries ``PRIOR_MARK``
    where ``prior`` (the serving efficiency is an unfitted prior), as the CLI's table cells do."""
    m = prior_mark(prior)
    lines = []
    in_all = (f" ({best['tokens_per_s_per_gpu'] * best['gpus_used']:,.0f} tokens/s{m} in all on "
              f"{int(best['gpus_used'])} GPUs)" if rank_by == "total" else "")
    lines.append(f"why: {describe(best)} reaches "
                 f"{best['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU{m}{in_all} with TTFT {best['ttft_ms']:.0f} ms{m} and "
                 f"TPOT {best['tpot_ms']:.1f} ms{m} (SLO {ttft_ms:g} / {tpot_ms:g} ms)")
    meets = cands[cands.meets_slo]
    other = meets[meets["mode"] != best["mode"]]
    # compared in what ranks them: tokens/s per GPU used, or in all (--rank-by total)
    unit = "tokens/s in all" if rank_by == "total" else "tokens/s/GPU"
    score = ranking_key(cands, rank_by)
    best_score = float(score[best.name])
    if len(other):
        o = other.loc[score[other.index].idxmax()]
        o_score = float(score[o.name])
        # more than ``best`` only where ``best`` is not the search's winner (``with_best``: the
        # best layout an engine can launch)
        than = compared(o_score / max(best_score, 1e-9))
        lines.append(f"     the best {o['mode']} layout meeting the SLO reaches {o_score:,.0f} "
                     f"{unit}{m} ({than}) at TPOT {o['tpot_ms']:.1f} ms{m}, TTFT {o['ttft_ms']:.0f} ms{m}: "
                     f"{describe(o)}")
    elif modes is None or len(set(modes)) > 1:
        # only of a mode that was searched (--mode disagg searched no aggregated layout)
        lines.append(f"     no {'disagg' if best['mode'] == 'agg' else 'agg'} layout meets the SLO")
    # those missing the SLO (a ``with_best`` row is beaten by ones meeting it too)
    bigger = cands[(cands["mode"] == best["mode"]) & (score > best_score) & ~cands.meets_slo.astype(bool)]
    if len(bigger):
        t_bind = int((bigger.ttft_ms > ttft_ms).sum())
        p_bind = int((bigger.tpot_ms > tpot_ms).sum())
        binding = ("TPOT and TTFT both bind" if p_bind == t_bind else
                   f"{'TPOT' if p_bind > t_bind else 'TTFT'} is what binds")
        lines.append(f"     {len(bigger)} {best['mode']} candidates with more {unit} miss the SLO, "
                     f"{p_bind} on TPOT and {t_bind} on TTFT: {binding}")
    if gpus and best["gpus_used"] < gpus:
        # tokens/s/GPU ranks the layouts; the GPUs a layout leaves idle earn nothing, so say what
        # the whole allocation gives and which layout meeting the SLO gives it most
        total = meets.tokens_per_s_per_gpu * meets.gpus_used
        top = meets.loc[total.idxmax()]
        line = (f"     it uses {int(best['gpus_used'])} of the {gpus} GPUs ({gpus - int(best['gpus_used'])} idle): "
                f"{best['tokens_per_s_per_gpu'] * best['gpus_used']:,.0f} tokens/s{m} in all")
        if total.max() > best["tokens_per_s_per_gpu"] * best["gpus_used"] * (1 + 1e-9):
            line += (f"; the most in all meeting the SLO: {describe(top)}, {total.max():,.0f} tokens/s{m} on "
                     f"{int(top['gpus_used'])} GPUs" + (" (--rank-by total picks it)" if rank_by != "total" else ""))
        lines.append(line)
    return lines


def with_best(plan: ServingPlan, label, ttft_ms: float, tpot_ms: float, gpus: int, rank_by: str = "per-gpu",
              modes=("agg", "disagg"), prior: bool = False) -> ServingPlan:
    """``plan`` with the candidate at index ``label`` (one meeting the SLO) as its best and the
    why lines said of it: the best layout a caller can use where the search's winner is not one
    (``paraplan serve plan``: the best an engine can launch as priced); ``prior`` marks their
    numbers as resting on an unfitted serving prior."""
    best = plan.candidates.loc[label]
    return replace(plan, best=best, why=_why(best, plan.candidates, ttft_ms, tpot_ms, gpus, rank_by, modes, prior))


def _no_layout_error(cands: pd.DataFrame, ttft_ms: float, tpot_ms: float, gpus: int) -> InputError:
    best_tpot = cands.loc[cands.tpot_ms.idxmin()]
    best_ttft = cands.loc[cands.ttft_ms.idxmin()]
    meet_tpot = cands[cands.tpot_ms <= tpot_ms]
    if meet_tpot.empty:
        loose = np.ceil(best_tpot["tpot_ms"] * 10) / 10
        what = (f"no layout on {gpus} GPUs reaches TPOT {tpot_ms:g} ms: the fastest is "
                f"{best_tpot['tpot_ms']:.1f} ms ({best_tpot['mode']}, batch {int(best_tpot['batch'])})")
        fix = f"allow --tpot-ms {loose:g} or more, or use faster GPUs"
        at_loose = cands[cands.tpot_ms <= loose]
        if at_loose.ttft_ms.min() > ttft_ms:
            # the TTFT objective binds too: say so now, not after the user loosened TPOT
            need = np.ceil(at_loose.ttft_ms.min())
            what += f"; nor TTFT {ttft_ms:g} ms (the lowest of any layout is {best_ttft['ttft_ms']:.0f} ms)"
            fix = f"allow --tpot-ms {loose:g} and --ttft-ms {need:g} or more, or use faster GPUs"
        return InputError("--tpot-ms", what, fix)
    t = meet_tpot.loc[meet_tpot.ttft_ms.idxmin()]
    allow = f"allow --ttft-ms {np.ceil(t['ttft_ms']):g} or more"
    reach_ttft = cands[cands.ttft_ms <= ttft_ms]
    if len(reach_ttft):
        # layouts that start in time exist and all miss TPOT: TPOT is what binds; name the TPOT
        # the one with the lowest needs (rounded up, so that it meets it)
        r = reach_ttft.loc[reach_ttft.tpot_ms.idxmin()]
        need = np.ceil(r["tpot_ms"] * 10) / 10
        return InputError("--tpot-ms", f"no layout reaching TTFT {ttft_ms:g} ms meets TPOT {tpot_ms:g} ms: the "
                          f"fastest of them is {r['tpot_ms']:.2f} ms ({r['mode']}, batch {int(r['batch'])}); meeting "
                          f"TPOT {tpot_ms:g} ms the lowest TTFT is {t['ttft_ms']:.1f} ms",
                          f"allow --tpot-ms {need:g} or more, or {allow[6:]}")
    if best_ttft["ttft_ms"] < t["ttft_ms"]:
        # a layout missing the TPOT objective starts sooner, but none in time: both bind
        return InputError("--ttft-ms", f"no layout on {gpus} GPUs reaches TTFT {ttft_ms:g} ms: the lowest of any "
                          f"layout is {best_ttft['ttft_ms']:.1f} ms ({best_ttft['mode']}, batch "
                          f"{int(best_ttft['batch'])}, TPOT {best_ttft['tpot_ms']:.2f} ms), {t['ttft_ms']:.1f} ms "
                          f"meeting TPOT {tpot_ms:g} ms",
                          f"{allow}, or --ttft-ms {np.ceil(best_ttft['ttft_ms']):g} with --tpot-ms "
                          f"{np.ceil(best_ttft['tpot_ms'] * 10) / 10:g}, or use more or faster GPUs")
    # the TPOT objective costs nothing here: loosening it would not help
    return InputError("--ttft-ms", f"no layout on {gpus} GPUs reaches TTFT {ttft_ms:g} ms: the lowest is "
                      f"{t['ttft_ms']:.1f} ms ({t['mode']}, batch {int(t['batch'])})", f"{allow}, or use more or faster GPUs")


#: what ``plan_serving`` maximises among the candidates meeting the SLO: output tokens/s per GPU
#: the deployment uses, or in all on the GPUs given (a layout leaving GPUs idle earns nothing on them)
RANKINGS = ("per-gpu", "total")


def ranking_key(cands: pd.DataFrame, rank_by: str) -> pd.Series:
    """The score ``plan_serving`` ranks by: tokens/s/GPU, or tokens/s on all the GPUs used."""
    if rank_by == "total":
        return cands.tokens_per_s_per_gpu * cands.gpus_used
    return cands.tokens_per_s_per_gpu


def _unfit_fixes(ctx, gpus: int, isl: int, osl: int, max_batch: int, modes, allow_pp: bool) -> list[str]:
    """Aggregated workers (with pipeline stages where the smallest that fits has them), where
    the search left them out (--no-pp, or --mode disagg, whose workers have none) and they would
    fit on these GPUs; each option named only where the layout needs it (a pp-1 layout had been
    called one "with pipeline stages", and told to drop --no-pp)."""
    fixes = []
    if not allow_pp or "agg" not in modes:
        alt = _agg(ctx, gpus, isl, osl, max_batch, True)
        if len(alt):
            smallest = alt.assign(g=alt.tp * alt.pp * alt.adp).sort_values(["g", "pp"], kind="stable").iloc[0]
            staged = int(smallest.pp) > 1
            how = (["with --mode agg (or both)"] if "agg" not in modes else []) \
                + (["without --no-pp"] if staged and not allow_pp else [])
            if how:
                fixes.append(f"aggregated workers {'with pipeline stages ' if staged else ''}fit "
                             f"({smallest.layout}): plan " + " and ".join(how))
    return fixes


def _memory_by_role(ctx, most: int, isl: int, osl: int, modes, allow_pp: bool) -> dict[str, dict]:
    """The memory of every worker layout the search builds on at most ``most`` GPUs, per role:
    ``agg``, and ``prefill`` / ``decode`` for disaggregated serving (workers without pipeline
    stages; a prefill worker's step of one whole prompt, as ``prefill_side`` at 1 prompt per
    step). Each role holds ``memory_columns``'s columns and each layout's ``gpus``, ``label``,
    ``holds`` (its weights leave a KV pool) and ``fits`` (one request fits beside them: the
    search's own test at batch 1). The layouts on g GPUs are those of at most g here, so one call
    at the largest count answers for every smaller one (``_least_gpus``)."""
    domain, moe = ctx.cluster.gpus_per_node, ctx.model.moe is not None
    sides = []
    if "agg" in modes:
        sides.append(("agg", worker_layouts(ctx.model, most, domain, allow_pp, ctx.behaviour, ctx.expert_format),
                      osl, None))
    if "disagg" in modes and most >= 2:
        lay = worker_layouts(ctx.model, most - 1, domain, False, ctx.behaviour, ctx.expert_format)
        sides += [("prefill", lay, 1.0, float(isl)), ("decode", lay, osl, None)]
    roles = {}
    for role, lay, out_tokens, budget in sides:
        tp, pp, adp, moe_tp, moe_ep = (lay[:, k] for k in range(5))
        mem = memory_columns(ctx, tp, adp, pp, moe_tp, moe_ep, float(isl), float(out_tokens), token_budget=budget)
        mem = {k: np.broadcast_to(v, tp.shape) for k, v in mem.items()}
        holds = mem["kv_pool_bytes"] > 0
        roles[role] = {**mem, "gpus": tp * pp * adp, "layouts": lay, "label": np.array(worker_labels(tp, pp, adp, moe_tp, moe_ep, moe)),
                       "holds": holds, "fits": holds & (mem["max_batch_per_rank"] >= 1.0)}
    return roles


def _least_role_gpus(cols: dict, role: str, key: str, launchable=None) -> int | None:
    """The fewest GPUs of a layout of one role (``_memory_by_role``'s columns) that has ``key``
    and, where ``launchable`` is given, that the engine launches in ``role``; None where none.
    The engine is asked one GPU count at a time, smallest first, until one launches."""
    ok = cols[key]
    if launchable is None:
        return int(cols["gpus"][ok].min()) if ok.any() else None
    for g in np.unique(cols["gpus"][ok]):
        at = ok & (cols["gpus"] == g)
        if np.asarray(launchable(role, cols["layouts"][at]), dtype=bool).any():
            return int(g)
    return None


def _least_gpus(roles: dict, key: str, launchable=None) -> int | None:
    """The fewest GPUs on which some layout of ``roles`` (``_memory_by_role``) has ``key``
    ("holds" or "fits"): an aggregated worker's GPUs; a prefill and a decode worker's together
    (each of at most the rest); None where none has it. ``launchable(role, layouts)`` (as
    ``plan_serving``'s), where given, keeps only the layouts the engine can launch."""
    least = []
    if "agg" in roles:
        agg = _least_role_gpus(roles["agg"], "agg", key, launchable)
        least += [agg] if agg is not None else []
    if "decode" in roles:
        pre, dec = (_least_role_gpus(roles[r], r, key, launchable) for r in ("prefill", "decode"))
        least += [pre + dec] if pre is not None and dec is not None else []
    return int(min(least)) if least else None


def _add_gpus(ctx, roles: dict, what: str, launchable=None) -> list[str]:
    """The "add GPUs" fix of a search where nothing fits: the fewest GPUs on which ``what`` fits
    (``_least_gpus`` "fits"), and where ``launchable`` is given and the engine cannot launch a
    layout that fits there, the fewest on which it can (DeepSeek-R1 on H100 in FP8: fits on 10
    and 12, as workers of 10 / 12 GPUs that vLLM cannot place on hosts of 8; launches on 16)."""
    least = _least_gpus(roles, "fits")
    if least is None:
        return []
    if launchable is None:
        return [f"add GPUs ({what} fits on {least})"]
    runs = _least_gpus(roles, "fits", launchable)
    fw = ctx.stack.framework
    if runs == least:
        return [f"add GPUs ({what} fits on {least})"]
    if runs is None:
        return [f"add GPUs ({what} fits on {least}, but {fw} cannot launch any layout that fits)"]
    return [f"add GPUs ({what} fits on {least}, but {fw} launches none on fewer than {runs})"]


def _search_most(ctx) -> int:
    """The largest GPU count a search on ``ctx.cluster`` covers."""
    return min(MAX_GPUS, ctx.cluster.max_gpus or MAX_GPUS)


def _rebuilt(ctx, dense_format: str, expert_format: str, kv_cache_dtype: str):
    """``ctx`` with other weight formats or KV-cache dtype (``ServingContext.build``'s checks and
    rules: the KV dtype an ``auto`` takes from the checkpoint), or None where the stack refuses them."""
    from simulator.serving.context import ServingContext
    try:
        return ServingContext.build(ctx.model, ctx.cluster, ctx.stack, dense_format, expert_format, kv_cache_dtype,
                                    efficiency=ctx.efficiency, speculative_tokens=ctx.speculative_tokens,
                                    draft_acceptance=None if ctx.acceptance_is_prior else ctx.draft_acceptance,
                                    draft_head=ctx.draft_head, prequantised=ctx.prequantised,
                                    backend_version=ctx.backend_version)
    except InputError:
        return None


def _fits_within(ctx, gpus: int, isl: int, osl: int, modes, allow_pp: bool) -> bool:
    """Whether some layout the search builds on ``gpus`` GPUs holds the weights and one request."""
    least = _least_gpus(_memory_by_role(ctx, gpus, isl, osl, modes, allow_pp), "fits")
    return least is not None and least <= gpus


def _formats_that_fit(ctx, formats, experts: bool, gpus: int, isl: int, osl: int, modes, allow_pp: bool) -> list[str]:
    """The weight formats of ``formats`` with which some layout the search builds on ``gpus`` GPUs
    holds the weights and one request: as ``--expert-precision`` (``experts``) the experts' alone;
    as ``--precision`` every weight (the experts follow it, unless already smaller). Each is
    checked with the KV-cache dtype priced and with the one ``auto`` gives that format (an FP8 /
    NVFP4 checkpoint's 8-bit KV where the stack reads it): it must fit with both. A format the
    stack does not run on this GPU is left out. It listed every smaller format, fp8 among them
    for DeepSeek-R1 on 8 H100, where only nvfp4, mxfp4 and int4_wo fit."""
    g = ctx.model.int4_group_size
    fit = []
    for f in formats:
        if experts:
            dense, expert = ctx.dense_format, f
        else:
            dense = f
            expert = f if weight_bytes(f, g) <= weight_bytes(ctx.expert_format, g) else ctx.expert_format
        tried = [_rebuilt(ctx, dense, expert, kv) for kv in dict.fromkeys((ctx.kv_cache_dtype, "auto"))]
        if all(c is not None and _fits_within(c, gpus, isl, osl, modes, allow_pp) for c in tried):
            fit.append(f)
    return fit


def _nothing_fits_error(ctx, gpus: int, isl: int, osl: int, max_batch: int, modes, allow_pp: bool,
                        launchable=None) -> InputError:
    """The ``InputError`` of a search where no layout fits: what does not fit (the weights, or
    beside them one request's KV cache, ``_memory_by_role``) and what would make a layout fit;
    the GPUs to add, of a layout the engine launches where ``launchable`` (``plan_serving``'s) is given."""
    g = ctx.model.int4_group_size
    # only formats smaller than the one planned help (the suggestion named fp8 to an fp8 plan)
    # the option of the larger format: a MoE model's bulk is its experts (nvfp4 dense with bf16
    # experts was told to shrink --precision)
    experts = ctx.model.moe is not None and weight_bytes(ctx.expert_format, g) > weight_bytes(ctx.dense_format, g)
    held = max(weight_bytes(ctx.dense_format, g), weight_bytes(ctx.expert_format, g))
    smaller = [f for f in WEIGHT_FORMATS if weight_bytes(f, g) < held]
    what = (f"{ctx.expert_format} experts" if experts else f"{ctx.dense_format} weights")
    fit = _formats_that_fit(ctx, smaller, experts, gpus, isl, osl, modes, allow_pp)
    formats = ([f"a smaller weight format: {'--expert-precision' if experts else '--precision'} " + " / ".join(fit)]
               if fit else [])
    roles = _memory_by_role(ctx, _search_most(ctx), isl, osl, modes, allow_pp)
    least_held = _least_gpus(roles, "holds")
    if least_held is not None and least_held <= gpus:
        # the weights fit, one request's KV cache does not (a layout with room for none was
        # searched as if one fitted, and serve simulate refused it)
        fixes = ["shorten --isl / --osl"]
        if ctx.kv_bytes > 1.0:
            fp8 = _rebuilt(ctx, ctx.dense_format, ctx.expert_format, "fp8")
            if fp8 is not None and _fits_within(fp8, gpus, isl, osl, modes, allow_pp):
                fixes.append("--kv-cache-dtype fp8")
        fixes += _add_gpus(ctx, roles, "one request", launchable)
        fixes += _unfit_fixes(ctx, gpus, isl, osl, max_batch, modes, allow_pp) + formats
        # the layout closest to holding one request (largest share of it free), within the GPUs given
        best = None
        for role, cols in roles.items():
            within = cols["holds"] & (cols["gpus"] <= (gpus if role == "agg" else gpus - 1))
            share = np.where(within, cols["kv_pool_bytes"] / np.maximum(cols["kv_bytes_per_request"], 1.0), -1.0)
            i = int(np.argmax(share))
            if within[i] and (best is None or share[i] > best[0]):
                best = (share[i], role, cols["label"][i], cols["kv_bytes_per_request"][i], cols["kv_pool_bytes"][i])
        _, role, label, need, free = best
        where = label if role == "agg" else f"{role} worker {label}"
        return InputError("--gpus", f"no layout of {ctx.model.name} on {gpus} x {ctx.cluster.gpu.name} holds one "
                          f"request of {isl} + {osl} tokens beside its {what}: at best ({where}) its KV cache needs "
                          f"{need / 2**30:.1f} GiB per GPU and {free / 2**30:.1f} GiB is free", ", or ".join(fixes))
    fixes = _add_gpus(ctx, roles, "a layout", launchable) + _unfit_fixes(
        ctx, gpus, isl, osl, max_batch, modes, allow_pp) + formats
    return InputError("--gpus", f"no layout of {ctx.model.name} with {what} fits in {gpus} x {ctx.cluster.gpu.name}",
                      ", or ".join(fixes) or "use GPUs with more memory")


def plan_serving(ctx, gpus: int, isl: int, osl: int, ttft_ms: float, tpot_ms: float, modes=("agg", "disagg"),
                 max_batch: int = 1024, allow_pp: bool = True, rank_by: str = "per-gpu",
                 progress=None, launchable=None) -> ServingPlan:
    """Search ``modes`` on ``gpus`` GPUs of ``ctx.cluster`` for ``ctx.model`` at request shape
    (isl, osl) under the objective (mean TTFT <= ttft_ms, TPOT <= tpot_ms), the winner the most
    tokens/s per GPU used (``rank_by`` "per-gpu") or in all (``"total"``). Raises
    ``InputError`` naming the binding constraint when nothing fits or nothing meets the SLO.
    ``progress(done, total, step)`` hears of the work as it is done: each stage of
    ``SEARCH_STAGES`` of the modes searched, then the ranking, is ``progress.STAGE_UNITS`` units
    (``step`` its name), a batch search moving its stage as its chunks of rows are priced; ``done``
    never decreases and ends at ``total`` (thousands of GPUs take tens of seconds, 64 a few). ``launchable(role, layouts)``: whether the engine
    can launch each worker layout (rows tp, pp, adp, moe_tp, moe_ep) as an ``agg``, ``prefill`` or
    ``decode`` worker (``paraplan.serving_launchable.layout_launchable``, the engine's rules living
    above the planner); only the "add GPUs" advice of a search where nothing fits reads it, so it
    names a GPU count the engine can run. None: every layout counts."""
    if rank_by not in RANKINGS:
        raise InputError("--rank-by", f"unknown ranking {rank_by!r}", "use per-gpu or total")
    # a fractional max_batch never settled the batch bisection (64 .. 64.5 forever); 8.0 is 8
    # bounded before any float arithmetic (10**400 overflowed a float; serve plan's --max-batch range)
    gpus, isl, osl, max_batch = (whole_number(name, value, maximum=most) for name, value, most in (
        ("--gpus", gpus, None), ("--isl", isl, MAX_REQUEST_TOKENS), ("--osl", osl, MAX_REQUEST_TOKENS),
        ("--max-batch", max_batch, MAX_BATCH)))
    if isinstance(modes, str) or not modes or any(m not in ("agg", "disagg") for m in modes):
        raise InputError("--mode", f"modes must be a non-empty list of agg / disagg, got {shown(modes)}",
                         "search ('agg',), ('disagg',) or ('agg', 'disagg')")
    for name, value in (("--ttft-ms", ttft_ms), ("--tpot-ms", tpot_ms)):
        # True is an int to Python, and was taken as 1 ms
        # is_finite: np.isfinite raised TypeError on a Python int above 2**64 (ttft_ms=10**30)
        if isinstance(value, (bool, np.bool_)) or not (isinstance(value, numbers.Real) and is_finite(value)
                                                       and value > 0):
            raise InputError(name, f"must be a finite number > 0, got {shown(value)}")
    if not isinstance(allow_pp, (bool, np.bool_)):       # "no" is truthy: it had allowed pipeline stages
        raise InputError("allow_pp", f"must be True or False, got {shown(allow_pp)}")
    ctx.check_request(isl, osl)
    if gpus > MAX_GPUS:
        raise InputError("--gpus", f"{as_given(gpus)} GPUs is more than the {MAX_GPUS} a serving search covers",
                         "plan one deployment unit and replicate it")
    if ctx.cluster.max_gpus is not None and gpus > ctx.cluster.max_gpus:
        raise InputError("--gpus", f"{gpus} GPUs exceed the {ctx.cluster.max_gpus} of {ctx.cluster.name}")
    if "agg" not in modes and gpus < 2:      # not "nothing fits": the weights may well fit one GPU
        raise InputError("--gpus", f"disaggregated serving needs a prefill and a decode worker, at least 2 GPUs; "
                         f"got {gpus}", "use --gpus 2 or more, or --mode agg")
    t0 = time.perf_counter()
    parts = []
    evaluated = 0
    stages = Stages(progress, SEARCH_STAGES["agg"] * ("agg" in modes) + SEARCH_STAGES["disagg"] * ("disagg" in modes)
                    + ("ranking",))
    if "agg" in modes:
        a = _agg(ctx, gpus, isl, osl, max_batch, allow_pp, ttft_ms, tpot_ms, stages)
        evaluated += len(a)
        parts.append(a)
    if "disagg" in modes:
        d = _disagg(ctx, gpus, isl, osl, max_batch, ttft_ms, tpot_ms, stages)
        evaluated += len(d)
        parts.append(d)
    stages.start("ranking")
    parts = [p for p in parts if len(p)]
    if not parts:
        raise _nothing_fits_error(ctx, gpus, isl, osl, max_batch, modes, allow_pp, launchable)
    cands = pd.concat(parts, ignore_index=True, sort=False)
    cands["meets_slo"] = (cands.ttft_ms <= ttft_ms) & (cands.tpot_ms <= tpot_ms)
    fronts = []
    for mode, g in cands[cands.ttft_ms <= ttft_ms].groupby("mode"):
        idx = pareto_front(g.tokens_per_s_per_user.to_numpy(), g.tokens_per_s_per_gpu.to_numpy())
        fronts.append(g.iloc[idx])
    front = pd.concat(fronts, ignore_index=True) if fronts else cands.iloc[:0]
    meets = cands[cands.meets_slo]
    best = meets.loc[ranking_key(meets, rank_by).idxmax()] if len(meets) else None
    plan = ServingPlan(candidates=cands, front=front.sort_values(["mode", "tokens_per_s_per_user"]).reset_index(drop=True),
                       best=best, evaluated=evaluated, wall_s=time.perf_counter() - t0)
    if best is None:
        raise _no_layout_error(cands, ttft_ms, tpot_ms, gpus)
    plan.why = _why(best, cands, ttft_ms, tpot_ms, gpus, rank_by, modes, bool(ctx.efficiency.prior))
    stages.end()
    return plan
