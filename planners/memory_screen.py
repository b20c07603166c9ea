"""Which rows of a chunk skip the per-stage memory model: the range-search screen.

A chunk of a large search (``space_scoring.score_space``) may leave out of its memory phase
(``vectorized._memory_of``) the rows that the rows other chunks of the same search keep rule
out (``Screen``, ``screen_for``). A row is screened out when ``time_pruning.excluded`` shows,
by its floor for any memory search outcome ``f'`` (``step_bounds.step_time_floor_any_memory_s``,
computed once per configuration but for its ZeRO fields: ``_floor_any_memory_s``) and its memory
lower bound ``b`` (``memory_rows.static_lower_bound_bytes``), that it cannot be among those
rows' ``kept_rows``. This is sound by ``planners/time_pruning.py``'s module docstring:
``f' <= f`` and ``b <= m`` (the row's own floor and memory once modelled), and each condition
holding for ``(f', b)`` holds for ``(f, m)``, so a row excluded by its stand-ins is excluded
whether it fits or not. Nor is the screen final: a screened row is an open row of its chunk's
branch and bound (``vectorized._time_and_refine``) and gets the memory model
(``vectorized._with_late``) unless the chunk's own timed rows show it skippable. The kept rows
and their numbers are therefore those of modelling every row; only ``Evaluated.fitting`` turns
into a lower bound (``Evaluated.unchecked`` counts the rows never modelled).

``_rescreened`` applies a chunk's last screen to every task of it, so which rows are screened
does not depend on the workers or their timing. ``seed_screen`` screens a search's first
chunk, which no other chunk's kept rows can screen, by a floor quantile: it only orders the
work (no soundness rests on it, by the above).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

import numpy as np

from hardware_specs.cluster_spec import ClusterSpec
from hardware_specs.efficiency_model import EfficiencyModel
from model_specs.model_spec import ModelSpec
from planners.search_space import SearchSpace
from planners.time_pruning import compact_summary, excluded, held_by_row, kept_summary
from simulator.config_batch import ConfigBatch
from simulator.memory_rows import static_lower_bound_bytes
from simulator.step_bounds import step_time_floor_any_memory_s

if TYPE_CHECKING:
    from planners.vectorized import _ChunkResult, _Job


@dataclass(frozen=True)
class Screen:
    """What a chunk's memory phase screens its rows against: ``time_pruning.kept_summary`` of
    the rows other chunks of the same search keep (``compact_summary``'s, with ``keep`` 1: one
    per task handed to a worker), with ``keep`` and the tokens per step (``screen_for``). A row
    whose floor for any memory search outcome (``step_bounds.step_time_floor_any_memory_s``)
    and memory lower bound (``memory_rows.static_lower_bound_bytes``) show it cannot be among
    those rows' ``kept_rows`` (``time_pruning.excluded``, sound with a lesser floor and memory)
    skips the per-stage memory model; it is checked again against the chunk's own timed rows
    once they are refined (``vectorized._time_and_refine``), and modelled then if it could change
    them."""

    summary: Mapping[str, np.ndarray]
    keep: int
    tokens_per_step: float


def screen_for(kept: tuple, keep: int, tokens_per_step: float) -> Screen | None:
    """The ``Screen`` of the rows other chunks keep, ``kept`` (tokens/s, memory bytes, GPU
    counts); None when they are fewer than ``keep`` (no row can be ruled out then)."""
    if kept is None or len(kept[0]) < keep:
        return None
    return Screen(compact_summary(kept_summary(*kept, keep), keep), 1, tokens_per_step)


#: a search's first chunk, which no other chunk's kept rows can screen, gives the per-stage model
#: first to the rows with the lowest floors for any memory search outcome (``seed_screen``): at
#: least this many times the rows kept, and at least ``SEED_MIN_SHARE`` of the rows past the
#: memory lower bound; the others wait as screened rows (``vectorized._time_and_refine``). On
#: DeepSeek-V3 over 1,024-4,096 GPUs 99% of the first chunk's rows its own timed rows cannot rule
#: out are within its 585 k lowest such floors, of 1.42 M (keep 200 k).
SEED_KEEP_TIMES = 3
SEED_MIN_SHARE = 0.25
#: rows of a space sampled to place ``seed_screen``'s threshold (a fixed seed: the same rows
#: every run)
SEED_SAMPLE_ROWS = 65_536


def seed_screen(model: ModelSpec, cluster: ClusterSpec, eff: EfficiencyModel, space: SearchSpace,
                global_batch: int, memory_limit_bytes: float, keep: int, defaults: tuple = ()) -> Screen | None:
    """A ``Screen`` for a chunk that no other chunk's kept rows screen: it rules out the rows
    whose floor for any memory search outcome is above the ``q``-quantile of those floors over
    the rows the memory lower bound passes (estimated on ``SEED_SAMPLE_ROWS`` rows), ``q`` =
    max(``SEED_KEEP_TIMES`` x ``keep`` / those rows, ``SEED_MIN_SHARE``). No soundness rests on
    it: a row it rules out is given the memory model all the same unless the chunk's own timed
    rows show it skippable (``vectorized._time_and_refine``). None when it would rule out nothing."""
    from planners.vectorized import config_batch   # noqa: PLC0415 - vectorized imports this module
    n = len(space)
    if n == 0:
        return None
    tokens = float(global_batch) * float(model.seq_len)
    rows = np.sort(np.random.default_rng(18).choice(n, min(n, SEED_SAMPLE_ROWS), replace=False))
    cols = {k: v[rows] for k, v in space.columns.items()}
    floors, passing = [], 0
    for d, dtype in enumerate(space.dtypes):
        batch = config_batch(cols, dtype, global_batch, defaults=defaults[d] if defaults else None)
        ok = np.flatnonzero(np.asarray(static_lower_bound_bytes(model, cluster, eff, batch)) <= memory_limit_bytes)
        passing += len(ok)
        if len(ok):
            floors.append(np.asarray(step_time_floor_any_memory_s(model, cluster, eff, batch.take(ok)), dtype=float))
    if not floors:
        return None
    share = max(SEED_KEEP_TIMES * keep / max(passing * n / len(rows), 1.0), SEED_MIN_SHARE)
    if share >= 1.0:
        return None
    threshold_s = float(np.quantile(np.concatenate(floors), share))
    # ``excluded`` with one held rate, tokens / threshold, that every count and memory clears
    gpus = np.unique(space.columns["dp"] * space.columns["tp"] * space.columns["pp"] * space.columns["cp"])
    summary = {"top": np.array([tokens / threshold_s]), "gpus": gpus, "best": np.full(len(gpus), np.inf),
               "memory": np.array([-np.inf]), "most": np.array([np.inf])}
    return Screen(summary, 1, tokens)


def _no_screened() -> dict:
    return {"rows": np.zeros(0, dtype=np.int64), "dtype_index": np.zeros(0, dtype=np.int64), "floor_s": np.zeros(0),
            "memory_lower_bytes": np.zeros(0)}


#: searched fields a row's floor for any memory search outcome does not read (ZeRO's traffic is
#: left out of it, and the shard group only sizes that traffic)
_NOT_IN_FLOOR_ANY = ("zero_stage", "zero_shard_group")


def _floor_any_memory_s(job: _Job, batch: ConfigBatch, ids: np.ndarray, at_rows: np.ndarray | None = None) -> np.ndarray:
    """``step_time_floor_any_memory_s`` of the rows ``batch`` (the space's rows ``ids``; with
    ``at_rows``, of the rows ``at_rows`` of ``batch``, the space's rows ``ids``), computed once
    per distinct row but for ``_NOT_IN_FLOOR_ANY`` (the ZeRO stages and shard groups of a
    configuration: ~6 rows each on DeepSeek-V3 over 1,024-4,096 GPUs) and spread back (the
    floor is row-wise)."""
    keys = [np.asarray(v)[ids] for k, v in job.columns.items() if k not in _NOT_IN_FLOOR_ANY]
    order = np.lexsort(keys[::-1])
    change = np.zeros(len(ids), dtype=bool)
    change[:1] = True
    for k in keys:
        sk = k[order]
        change[1:] |= sk[1:] != sk[:-1]
    group = np.empty(len(ids), dtype=np.int64)
    group[order] = np.cumsum(change) - 1
    first = np.full(int(group.max()) + 1 if len(ids) else 0, len(ids), dtype=np.int64)
    np.minimum.at(first, group, np.arange(len(ids)))
    at = np.sort(first)                      # the first row of each, in the batch's order (its runs)
    place = np.empty(len(first), dtype=np.int64)
    place[np.argsort(first)] = np.arange(len(first))
    picked = batch.take(at if at_rows is None else at_rows[at])
    floor = np.array(step_time_floor_any_memory_s(job.model, job.cluster, job.eff, picked), dtype=float)
    return floor[place[group]]


def _rescreened(job: _Job, screen: Screen, res: "_ChunkResult") -> "_ChunkResult":
    """``res`` with the rows it modelled that ``screen`` rules out moved to its screened rows
    (their memory results dropped: they count as unchecked, as if screened at first)."""
    cand = res.candidates
    if not len(cand["rows"]):
        return res
    out = _screened_out(job, screen, cand["rows"], cand["floor_s"], cand["memory_lower_bytes"])
    if not out.any():
        return res
    # (``bound_pruned`` stays: it matters only when nothing fits, and a screen needs fitting rows)
    stay = ~np.isin(res.fit_rows, cand["rows"][out], assume_unique=True)
    screened = {k: np.concatenate([res.screened[k], cand[k][out]]) for k in res.screened}
    # in row order, as if screened at first (the branch and bound breaks ties by position)
    order = np.argsort(screened["rows"], kind="stable")
    return replace(res, fit_rows=res.fit_rows[stay], memory={k: v[stay] for k, v in res.memory.items()},
                   floor_s=None if res.floor_s is None else res.floor_s[stay],
                   screened={k: v[order] for k, v in screened.items()},
                   candidates={k: v[~out] for k, v in cand.items()})


def _screened_out(job: _Job, screen: Screen, ids: np.ndarray, floor_any: np.ndarray,
                  lower_bytes: np.ndarray) -> np.ndarray:
    """Mask of the rows ``ids`` (their floor for any memory search outcome, memory lower bound)
    that ``screen`` rules out (``time_pruning.excluded``)."""
    c = job.columns
    n_gpus = c["dp"][ids] * c["tp"][ids] * c["pp"][ids] * c["cp"][ids]
    return excluded(floor_any, screen.tokens_per_step, screen.keep, *held_by_row(lower_bytes, n_gpus, screen.summary))
