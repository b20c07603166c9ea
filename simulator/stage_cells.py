"""Every row's (stage, chunk) cells in flat arrays, for the per-stage memory and its search.

Rows of one ``ConfigBatch`` differ in stages p and chunks per stage v (schedule, pp, vpp), so
a (rows, P, V) array padded to the largest p and v is mostly padding (7 % of its cells were
real on the 70B / 256-GPU search). Here each row keeps only its own p v cells, stage by stage:
a per-stage quantity is a segment sum or maximum (``np.add.reduceat``) over that stage's
chunks, a per-row one over that row's stages; layer counts are small integers, so the sums
are exact and the same whatever their order.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: most cells one batch of ``stage_cell_batches`` holds (bounds the working memory)
MAX_CELLS = 1_000_000
#: per-cell arrays (``group_cells``' layer counts and first layer index)
CELL_KEYS = ("dense", "moe", "start")
#: per-stage arrays (``group_cells``' ``stage_*`` sums)
STAGE_KEYS = ("stage_dense", "stage_moe", "stage_emb", "stage_head", "stage_mtp")


@dataclass(frozen=True)
class StageCells:
    """Cells of some stages of some rows, flat.

    Per stage (length S): ``row`` (the row, 0..rows-1 of the batch being evaluated),
    ``local`` (its index 0..p-1 in the row), ``first_cell`` (offset of its chunks in the cell
    arrays), ``in_flight`` (peak chunk sets held, ``makespan.peak_in_flight``), ``chunks`` (v),
    and ``stage[k]`` (``STAGE_KEYS``). Per cell: ``cell_stage`` (position of its stage in the
    stage arrays) and ``cell[k]`` (``CELL_KEYS``). Where v > 1, ``held_first`` and
    ``held_count`` (per stage) place its K vectors of per-chunk held sets
    (``makespan.peak_held_chunks``: K times v numbers) in ``held_table``, which the stages of
    one (schedule, p, m, v) share (K 0 where v is 1: ``held_peak`` is not asked there)."""

    row: np.ndarray
    local: np.ndarray
    first_cell: np.ndarray
    in_flight: np.ndarray
    chunks: np.ndarray
    stage: dict
    cell_stage: np.ndarray
    cell: dict
    held_first: np.ndarray | None = None
    held_count: np.ndarray | None = None
    held_table: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.row)

    @property
    def cell_row(self) -> np.ndarray:
        return self.row[self.cell_stage]

    def stage_sum(self, x) -> np.ndarray:
        """Per stage, the sum of the per-cell ``x`` over its chunks."""
        return np.add.reduceat(x, self.first_cell) if len(self.row) else np.zeros(0)

    def stage_max(self, x) -> np.ndarray:
        """Per stage, the largest of the per-cell ``x`` over its chunks."""
        return np.maximum.reduceat(x, self.first_cell) if len(self.row) else np.zeros(0)

    def stage_min(self, x) -> np.ndarray:
        """Per stage, the smallest of the per-cell ``x`` over its chunks."""
        return np.minimum.reduceat(x, self.first_cell) if len(self.row) else np.zeros(0)

    def held_peak(self, x, stages) -> np.ndarray:
        """Per stage at positions ``stages`` (each with v > 1), the most its in-flight chunk
        sets hold when a set of chunk c holds the per-cell ``x``: ``max_k held[k] @ x`` over its
        ``makespan.peak_held_chunks`` vectors, gathered from ``held_table`` (no loop per stage)."""
        stages = np.asarray(stages, dtype=np.int64)
        if not len(stages):
            return np.zeros(0)
        k = self.held_count[stages].astype(np.int64)
        v = self.chunks[stages].astype(np.int64)
        size = k * v
        entries = ranges(self.held_first[stages], size)
        owner = np.repeat(np.arange(len(stages)), size)
        within = np.arange(len(entries)) - np.repeat(np.cumsum(size) - size, size)
        cell = self.first_cell[stages][owner] + within % v[owner]
        vec = np.repeat(v, k)                                  # one v-long vector after another
        sums = np.add.reduceat(self.held_table[entries] * np.asarray(x, dtype=float)[cell], np.cumsum(vec) - vec)
        return np.maximum.reduceat(sums, np.cumsum(k) - k)

    def view(self, stages, row) -> "StageCells":
        """The stages at positions ``stages`` (repeats allowed), renumbered to rows ``row``,
        sharing these cells: only ``take`` and the per-stage arrays may be read from it."""
        return StageCells(row, self.local[stages], self.first_cell[stages], self.in_flight[stages],
                          self.chunks[stages], {k: x[stages] for k, x in self.stage.items()}, self.cell_stage,
                          self.cell, *self._held(stages))

    def take(self, stages) -> "StageCells":
        """The stages at positions ``stages``, with their cells (copied, in that order)."""
        stages = np.asarray(stages, dtype=np.int64)
        counts = self.chunks[stages].astype(np.int64)          # a stage's cells are its chunks
        first = np.cumsum(counts) - counts
        cells = ranges(self.first_cell[stages], counts)
        return StageCells(self.row[stages], self.local[stages], first, self.in_flight[stages], self.chunks[stages],
                          {k: x[stages] for k, x in self.stage.items()}, np.repeat(np.arange(len(stages)), counts),
                          {k: x[cells] for k, x in self.cell.items()}, *self._held(stages))

    def _held(self, stages) -> tuple:
        """(held_first, held_count, held_table) of the stages at ``stages`` (the table shared)."""
        if self.held_first is None:
            return None, None, None
        return self.held_first[stages], self.held_count[stages], self.held_table


def ranges(starts, counts) -> np.ndarray:
    """The concatenated integer ranges [start, start + count)."""
    counts = np.asarray(counts, dtype=np.int64)
    offset = np.cumsum(counts) - counts
    return np.repeat(np.asarray(starts, dtype=np.int64) - offset, counts) + np.arange(int(counts.sum()))


def row_bounds(row: np.ndarray) -> np.ndarray:
    """Offsets of each row's first stage in stage arrays ordered by row (every row present)."""
    return np.flatnonzero(np.r_[True, row[1:] != row[:-1]])


def stage_cell_batches(model, batch, max_cells: int = MAX_CELLS):
    """The rows of ``batch`` in batches of at most about ``max_cells`` cells: yields ``(idx,
    cells)`` with ``idx`` the batch rows and ``cells`` a ``StageCells`` of all their stages,
    ordered by row (``row`` indexes ``idx``)."""
    from simulator.pipeline.makespan import peak_held_chunks, peak_in_flight_rows
    from simulator.step_pipeline import (
        _CODE_TO_KIND,
        _groups,
        _layout_cells,
        _layouts,
        _rows,
        group_cells,
        schedule_chunks,
    )
    n_rows = len(batch)
    if n_rows == 0:
        return
    pp = np.asarray(batch.pp).astype(np.int64)
    vpp = np.asarray(batch.vpp).astype(np.int64)
    sched = np.asarray(batch.schedule).astype(np.int64)
    m_all = np.rint(np.asarray(batch.global_batch, dtype=float)
                    / (np.asarray(batch.dp, dtype=float) * np.asarray(batch.micro_batch, dtype=float)))
    m_all = np.broadcast_to(m_all, (n_rows,))
    # one (first, last) pair and no layout string in the whole batch (the planner's usual case):
    # every row of a group has its group's (p, v) cells, read once from ``_layout_cells``' memo
    first_all = np.broadcast_to(np.asarray(batch.first_stage_layers), (n_rows,))
    last_all = np.broadcast_to(np.asarray(batch.last_stage_layers), (n_rows,))
    one_layout = ((first_all == first_all[0]).all() and (last_all == last_all[0]).all()
                  and _layouts(batch, np.arange(n_rows)) is None)
    pending, size = [], 0
    for idx, code, p, vp in _groups(sched, pp, vpp):
        kind = _CODE_TO_KIND[code]
        v = schedule_chunks(code, vp)
        # rows of a group one batch at a time, at most max_cells cells each
        step = max(max_cells // (p * v), 1)
        for lo in range(0, len(idx), step):
            part = idx[lo:lo + step]
            if pending and size + len(part) * p * v > max_cells:
                yield _flatten(pending)
                pending, size = [], 0
            if one_layout:        # (p, v) arrays that every row of ``part`` shares
                g = _layout_cells(model.num_layers, model.mtp_layers, model.moe, kind, p, v, int(first_all[0]),
                                  int(last_all[0]), "", model.hybrid_pattern)
            else:
                g = group_cells(model, kind, p, v, _rows(batch.first_stage_layers, part).astype(np.int64),
                                _rows(batch.last_stage_layers, part).astype(np.int64), _layouts(batch, part))
            m_values, m_index = np.unique(m_all[part], return_inverse=True)
            m_index = m_index.reshape(-1)
            in_flight = peak_in_flight_rows(kind, p, m_values, v)[m_index]
            # per distinct m, each stage's held-set vectors (one flush per (kind, p, m, v))
            held = [peak_held_chunks(kind, p, int(m), v) for m in m_values] if v > 1 else None
            pending.append((part, p, v, g, in_flight, held, m_index))
            size += len(part) * p * v
    if pending:
        yield _flatten(pending)


def _flatten(groups):
    """(idx, StageCells) of the groups' rows, ordered as listed; a group's cells are (rows, p, v)
    arrays or (p, v) arrays every row of it shares (written into the flat arrays in place)."""
    idx = np.concatenate([g[0] for g in groups])
    n = np.array([len(g[0]) for g in groups], dtype=np.int64)
    p = np.array([g[1] for g in groups], dtype=np.int64)
    v = np.array([g[2] for g in groups], dtype=np.int64)
    stage_end, cell_end = np.cumsum(n * p), np.cumsum(n * p * v)
    n_stages, n_cells = int(stage_end[-1]), int(cell_end[-1])
    stages_per_row = np.repeat(p, n)
    row = np.repeat(np.arange(len(idx)), stages_per_row)
    first_stage = np.repeat(np.cumsum(stages_per_row) - stages_per_row, stages_per_row)
    local = np.arange(n_stages) - first_stage                     # 0..p-1 in each row
    chunks = np.repeat(v, n * p).astype(float)
    cells_per_stage = np.repeat(v, n * p)
    cell_stage = np.repeat(np.arange(n_stages), cells_per_stage)
    first_cell = np.cumsum(cells_per_stage) - cells_per_stage       # every stage has v >= 1 cells
    in_flight = np.concatenate([g[4].reshape(-1) for g in groups])
    stage = {k: np.empty(n_stages) for k in STAGE_KEYS}
    cell = {k: np.empty(n_cells) for k in CELL_KEYS}
    # each group's distinct held-set vectors, once, in one table; a stage points at its own
    held_first, held_count = np.zeros(n_stages, dtype=np.int64), np.zeros(n_stages, dtype=np.int64)
    tables, filled = [], 0
    for (g_idx, g_p, g_v, _, _, held, m_index), s1 in zip(groups, stage_end.tolist()):
        if held is None:
            continue
        first = np.empty((len(held), g_p), dtype=np.int64)
        count = np.empty((len(held), g_p), dtype=np.int64)
        for j, per_stage in enumerate(held):
            for st, vectors in enumerate(per_stage):
                first[j, st], count[j, st] = filled, len(vectors)
                tables.append(vectors.reshape(-1))
                filled += vectors.size
        s0 = s1 - len(g_idx) * g_p
        held_first[s0:s1] = first[m_index].reshape(-1)
        held_count[s0:s1] = count[m_index].reshape(-1)
    held_table = np.concatenate(tables).astype(float) if tables else np.zeros(0)
    for (g_idx, g_p, g_v, g_cells, *_), s1, c1 in zip(groups, stage_end.tolist(), cell_end.tolist()):
        g_n = len(g_idx)
        s0, c0 = s1 - g_n * g_p, c1 - g_n * g_p * g_v
        for k in STAGE_KEYS:
            stage[k][s0:s1].reshape(g_n, g_p, 1)[...] = g_cells[k]
        for k in CELL_KEYS:
            cell[k][c0:c1].reshape(g_n, g_p, g_v)[...] = g_cells[k]
    return idx, StageCells(row, local, first_cell, in_flight, chunks, stage, cell_stage, cell, held_first, held_count,
                           held_table)


def distinct_stage_counts(model, batch, keys=STAGE_KEYS + ("sends",), chains: bool = False):
    """The rows of ``batch`` grouped by layout (schedule, p, v, first and last stage layers,
    layout string): yields ``(rows, counts, share)`` with ``counts`` the layout's distinct
    per-stage count vectors (stages, ``keys``: ``STAGE_KEYS``, ``sends``, the stage's
    forward and backward sends, and ``cells``, its chunks' layer counts, sorted: v columns)
    and ``share`` the part of a stage's chunks one micro-batch runs (DualPipe: half). A
    uniform layout has about three distinct stages, whatever p.

    ``chains``: also yields the layout's ``StageChains`` (each stage's distinct count vector,
    and the cells the forward and backward chains before it cross)."""
    from simulator.step_pipeline import _CODE_TO_KIND, _groups, _layouts, _rows, key_groups, schedule_chunks
    from simulator.pipeline.schedules import ScheduleKind
    n = len(batch)
    if n == 0:
        return
    sched, pp, vpp = (np.broadcast_to(np.asarray(getattr(batch, f)).astype(np.int64), (n,))
                      for f in ("schedule", "pp", "vpp"))
    for idx, code, p, vp in _groups(sched, pp, vpp):
        kind, v = _CODE_TO_KIND[code], schedule_chunks(code, vp)
        share = 0.5 if kind == ScheduleKind.DUALPIPE else 1.0
        first = _rows(batch.first_stage_layers, idx).astype(np.int64)
        last = _rows(batch.last_stage_layers, idx).astype(np.int64)
        layouts = _layouts(batch, idx)
        texts, text = ((np.zeros(1, dtype=object), np.zeros(len(idx), dtype=np.int64)) if layouts is None
                       else np.unique(layouts.astype(str), return_inverse=True))
        text = text.reshape(-1)
        span = int(max(first.max(), last.max())) + 1
        for mine in key_groups((text * span + first) * span + last):
            r = mine[0]
            args = (model, kind, p, v, int(first[r]), int(last[r]), str(texts[text[r]] or ""), tuple(keys))
            if chains:
                yield idx[mine], _stage_counts(*args), share, stage_chains(*args)
            else:
                yield idx[mine], _stage_counts(*args), share


@dataclass(frozen=True)
class StageChains:
    """Of one layout, per stage that can hold a flush's largest start + work + drain (every
    stage, or on a one-path schedule the last of each distinct count vector): which of
    ``_stage_counts``' distinct count vectors it has (``stage``), and the cells the chains
    before it cross (``chains``, (paths, stages, 12)):
    over each path's positions before the stage's first one, the counts of dense layers, MoE
    layers, embeddings, heads, MTP layers and forward sends (the forward chain), then the same
    with the backward sends (the backward chain; zero on the schedules that split a backward
    into B and W, whose deferred W passes may run while it descends). ``pipeline.bound``'s
    start and, fused, drain of a stage on a path are these counts times the cells' per-count
    forward and backward times."""

    stage: np.ndarray
    chains: np.ndarray


def stage_chains(model, kind, p: int, v: int, first: int, last: int, layout: str, keys: tuple) -> StageChains:
    """The layout's ``StageChains`` (memoised per layout)."""
    return _stage_chains_cached(model.num_layers, model.mtp_layers, model.moe, kind, p, v, first, last, layout, keys,
                                getattr(model, "hybrid_pattern", ""))


@lru_cache(maxsize=4096)
def _stage_chains_cached(num_layers, mtp_layers, moe, kind, p, v, first, last, layout, keys,
                         hybrid_pattern="") -> StageChains:
    from simulator.pipeline.bound import FUSED, _first_positions
    from simulator.pipeline.schedules import schedule_paths
    from simulator.step_pipeline import _layout_cells
    cells = _layout_cells(num_layers, mtp_layers, moe, kind, p, v, first, last, layout, hybrid_pattern)
    distinct = _stage_counts_cached(num_layers, mtp_layers, moe, kind, p, v, first, last, layout, keys,
                                    hybrid_pattern)
    per_stage = _stage_count_matrix(cells, keys)
    # each stage's row of the distinct vectors (np.unique sorted them: equal rows match exactly)
    stage = np.argmax((per_stage[:, None, :] == distinct[None, :, :]).all(axis=2), axis=1)
    paths, firsts = schedule_paths(kind, p, v), _first_positions(kind, p, v)
    common = [cells[k].reshape(-1) for k in ("dense", "moe", "emb", "head", "mtp")]
    per_cell = np.stack(common + [cells["send_f"].reshape(-1)] + common + [cells["send_b"].reshape(-1)], axis=1)
    if kind not in FUSED:
        per_cell[:, 6:] = 0.0
    chains = np.zeros((len(paths), p, 12))
    for i, (path, first_pos) in enumerate(zip(paths, firsts)):
        chains[i] = np.concatenate([np.zeros((1, 12)), np.cumsum(per_cell[path], axis=0)])[first_pos]
    # the chains only grow along a path, so on a one-path schedule (stages met in order) a
    # stage before another with the same count vector never holds the larger sum: keep the
    # last stage of each vector (about three, whatever p)
    keep = np.arange(p)
    if len(paths) == 1 and (np.diff(firsts[0]) > 0).all():
        keep = np.array(sorted({int(d): k for k, d in enumerate(stage)}.values()), dtype=np.int64)
    stage, chains = stage[keep], np.ascontiguousarray(chains[:, keep, :])
    stage.setflags(write=False)
    chains.setflags(write=False)
    return StageChains(stage, chains)


def _stage_counts(model, kind, p: int, v: int, first: int, last: int, layout: str, keys: tuple) -> np.ndarray:
    """Distinct rows of the layout's (stages, ``keys``) count matrix (memoised per layout)."""
    return _stage_counts_cached(model.num_layers, model.mtp_layers, model.moe, kind, p, v, first, last, layout, keys,
                                getattr(model, "hybrid_pattern", ""))


@lru_cache(maxsize=4096)
def _stage_counts_cached(num_layers, mtp_layers, moe, kind, p, v, first, last, layout, keys,
                         hybrid_pattern="") -> np.ndarray:
    from simulator.step_pipeline import _layout_cells
    cells = _layout_cells(num_layers, mtp_layers, moe, kind, p, v, first, last, layout, hybrid_pattern)
    out = np.unique(_stage_count_matrix(cells, keys), axis=0)
    out.setflags(write=False)
    return out


def _stage_count_matrix(cells: dict, keys: tuple) -> np.ndarray:
    """(p, ``keys``) per-stage counts of a layout's cells (``distinct_stage_counts``)."""
    columns = []
    for k in keys:
        if k == "cells":
            columns += list(np.sort(cells["dense"] + cells["moe"], axis=1).T)
        else:
            columns.append((cells["send_f"] + cells["send_b"]).sum(axis=1) if k == "sends" else cells[k][:, 0])
    return np.stack(columns, axis=1).astype(float)
