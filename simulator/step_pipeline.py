"""The pipeline part of a training step: per-cell pass durations and the schedule's makespan.

For every row of a ``ConfigBatch`` the layers are placed on pipeline positions
(``simulator.stage_layout``); each (stage, chunk) cell's forward (F), input-gradient (B) and
weight-gradient (W) durations for one micro-batch are summed from the per-layer times
(``simulator.layer_times``), the embedding on the first position, the LM head, loss and
multi-token-prediction modules on the last, the point-to-point sends between positions, and
the exposed ZeRO traffic; then the makespan of one flush of the schedule is computed on its
dependency DAG (``simulator.pipeline.makespan``), rows grouped by (schedule, p, v, m).

The step's breakdown is taken on the busiest stage (the one with the most work per
micro-batch): its compute, recomputation and exposed communication times m; the pipeline
bubble is what the makespan adds on top (the issue's "makespan minus busiest stage").
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from simulator.config_batch import RECOMPUTE_CODES, RECOMPUTE_METHOD_CODES, SCHEDULE_CODES
from simulator.layout_string import parse_layout
from simulator.parallel_config import Recompute, RecomputeMethod
from simulator.pipeline.bound import flush_lower_bound_s
from simulator.pipeline.makespan import MIXED_W, flush_makespan_s, split_backward_counts, stage_work_s
from simulator.pipeline.schedules import ScheduleKind
from simulator.stage_layout import moe_layers_before, path_cells, position_layers, position_moe_layers

_CODE_TO_KIND = {code: ScheduleKind(s.value) for s, code in SCHEDULE_CODES.items()}
_FULL_CODE = RECOMPUTE_CODES[Recompute.FULL]
#: schedules whose every backward is a B and a later W (``PerLayer.b_split``); DualPipe splits
#: only some (``makespan.MIXED_W``)
SPLIT_W = (ScheduleKind.ZB_H1, ScheduleKind.ZB_H2, ScheduleKind.ZB_V)
#: per-layer parts summed over a cell for the busiest stage's breakdown
PART_KEYS = ("compute", "recompute", "tp", "cp", "ep", "z3")
#: the parts that differ where a backward runs as a B apart from its W (``PerLayer.parts`` holds
#: them as ``<name>_split`` too): compute (each pass's own host floor), the TP and EP traffic the
#: B exposes beyond its own GEMMs, and the ZeRO traffic that has only the B as its window
SPLIT_PARTS = ("compute", "tp", "ep", "z3")


def schedule_chunks(schedule_code: int, vpp: int) -> int:
    """Model chunks per stage the schedule runs: vpp for interleaved, 2 for ZB-V and DualPipe."""
    kind = _CODE_TO_KIND[int(schedule_code)]
    if kind == ScheduleKind.INTERLEAVED:
        return int(vpp)
    if kind in (ScheduleKind.ZB_V, ScheduleKind.DUALPIPE, ScheduleKind.DUALPIPE_V):
        return 2
    return 1


@dataclass(frozen=True)
class PerLayer:
    """Per-row, per-layer-kind times of one micro-batch (seconds): what a cell sums over its
    layers. ``f``, ``b``, ``w``: pass durations (exposed communication included); ``r``: the
    recomputation that runs just before ``b`` when every layer is treated alike; ``r_full`` /
    ``r_sel``: that of a layer recomputed in full / of one that recomputes only the selected
    operations; ``off_f`` / ``off_b``: the exposed host transfer of an offloaded layer in
    forward / backward; ``parts``: name -> (dense, moe) arrays of the breakdown parts per layer
    and micro-batch (``PART_KEYS``, ``recompute_full``, ``recompute_sel``, ``tp_total``, and
    ``<name>_split`` of the ``SPLIT_PARTS`` for the passes ``b_split``, ``w_split``);
    ``b_split``, ``w_split``, ``off_b_split``: ``b``, ``w`` and ``off_b`` of a backward whose W
    runs apart from its B (``layer_times``: the B pass is the only window of its exposed
    traffic), the durations of the zero-bubble schedules' B and W ops (None: as ``b``, ``w``);
    ``ep_unpaired``: part (``ep``, ``z3``, ``offload``) -> what one MoE layer's forward and
    backward with no partner micro-batch last beyond a paired pair under ``ep_comm_overlap``
    (``step_model.ep_unpaired_s``; 0 without)."""

    f: tuple
    b: tuple
    w: tuple
    r: tuple
    parts: dict
    r_full: tuple = None
    r_sel: tuple = None
    off_f: tuple = None
    off_b: tuple = None
    b_split: tuple = None
    w_split: tuple = None
    off_b_split: tuple = None
    ep_unpaired: dict = None


@dataclass(frozen=True)
class Ends:
    """Per-row durations of the model's ends (seconds, one micro-batch): embedding, LM head and
    loss, one MTP module's projection and head pass, the send/recv between positions, and the
    per-micro-batch data-parallel traffic of the embedding and output layer not hidden: ZeRO-3's
    gathers (``*_z3_f`` in forward) and, in backward (``*_z3_bw``, charged to W), ZeRO-3's
    gathers and gradient reductions and the gradient reductions of rows that reduce every
    micro-batch (ZeRO-2; DP / ZeRO-1 without no_sync). The ``z3`` in the names is the step
    report's part they land in, ``zero3_comm_exposed_s``. ``emb_tp``, ``head_tp``, ``mtp_tp``:
    the exposed tensor-parallel collectives inside the embedding's, the head's (with the loss)
    and one MTP module's passes above (``layer_times.ends_tp_collectives``), which the
    breakdown moves from compute to ``tp_comm_exposed_s``; ``*_tp_total``: all of them, hidden
    or not (``tp_comm_total_s``)."""

    emb_f: np.ndarray
    emb_b: np.ndarray
    emb_w: np.ndarray
    head_f: np.ndarray
    head_b: np.ndarray
    head_w: np.ndarray
    mtp_f: np.ndarray
    mtp_b: np.ndarray
    mtp_w: np.ndarray
    p2p: np.ndarray
    emb_z3_f: np.ndarray
    emb_z3_bw: np.ndarray
    head_z3_f: np.ndarray
    head_z3_bw: np.ndarray
    p2p_overlap: np.ndarray | bool = False
    emb_tp: np.ndarray | float = 0.0
    head_tp: np.ndarray | float = 0.0
    mtp_tp: np.ndarray | float = 0.0
    emb_tp_total: np.ndarray | float = 0.0
    head_tp_total: np.ndarray | float = 0.0
    mtp_tp_total: np.ndarray | float = 0.0


def _rows(x, idx):
    x = np.asarray(x, dtype=float)
    return x[idx] if x.ndim else np.full(len(idx), float(x))


def group_cells(model, kind: ScheduleKind, p: int, v: int, first, last, layout=None) -> dict:
    """Layer counts per (row, stage, chunk) cell for rows sharing (schedule, p, v): dense and MoE
    layers, the index of the cell's first layer (``start``), the MTP modules whose projection
    and head pass it runs (``mtp``), and 0/1 masks of the cells holding the embedding, the LM
    head, and positions that send forward / backward. Rows share the layout of their (first,
    last, layout string) triple, computed once per distinct triple."""
    first = np.atleast_1d(np.asarray(first, dtype=np.int64))
    last = np.atleast_1d(np.asarray(last, dtype=np.int64))
    rows = max(len(first), len(last))
    first, last = np.broadcast_to(first, (rows,)), np.broadcast_to(last, (rows,))
    def cells_of(a, c, text=""):
        return _layout_cells(model.num_layers, model.mtp_layers, model.moe, kind, p, v, int(a), int(c), text,
                             model.hybrid_pattern)

    if layout is None:
        if (first == first[0]).all() and (last == last[0]).all():
            # one layout for every row (the planner's usual case): read-only broadcast views
            one = cells_of(first[0], last[0])
            return {k: np.broadcast_to(x, (rows,) + x.shape) for k, x in one.items()}
        # a 1-D key per (first, last) pair: far cheaper than a row-wise unique
        span = int(max(first.max(), last.max())) + 1
        pairs, inverse = np.unique(first * span + last, return_inverse=True)
        inverse = inverse.reshape(-1)
        per_pair = [cells_of(key // span, key % span) for key in pairs]
        return {k: np.stack([cells[k] for cells in per_pair])[inverse] for k in per_pair[0]}
    texts, layout_id = np.unique(np.broadcast_to(np.asarray(layout, dtype=object).astype(str), (rows,)),
                                 return_inverse=True)
    layout_id = layout_id.reshape(-1)
    keys, inverse = np.unique(np.stack([first, last, layout_id], axis=1), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    per_key = [cells_of(a, c, str(texts[int(t)])) for a, c, t in keys]
    return {k: np.stack([cells[k] for cells in per_key])[inverse] for k in per_key[0]}


@lru_cache(maxsize=4096)
def _layout_cells(num_layers: int, mtp_layers: int, moe, kind: ScheduleKind, p: int, v: int, first: int,
                  last: int, layout: str = "", hybrid_pattern: str = "") -> dict:
    """``group_cells`` of one (first, last, layout) triple: (p, v) arrays, read-only (memoised)."""
    class _M:       # what stage_layout needs of the model
        pass
    m = _M()
    m.num_layers, m.mtp_layers, m.moe, m.hybrid_pattern = num_layers, mtp_layers, moe, hybrid_pattern
    cells_of_path = path_cells(kind, p, v)
    n_pos = len(cells_of_path)
    emb_pos = np.zeros(n_pos)
    head_pos = np.zeros(n_pos)
    mtp_pos = np.zeros(n_pos)
    if layout:
        spec = parse_layout(layout)
        lay = np.asarray(spec.layers(), dtype=np.int64)
        emb_pos[:] = spec.embedding
        head_pos[:] = spec.loss
        mtp_pos[:] = spec.mtp
    else:
        lay = position_layers(kind, p, v, num_layers + mtp_layers, first, last, mtp_layers)[0]
        emb_pos[0] = 1.0
        head_pos[-1] = 1.0
        mtp_pos[-1] = mtp_layers
    moe_n = position_moe_layers(m, lay[None])[0]
    start = np.cumsum(lay) - lay
    out = {k: np.zeros(p * v) for k in ("dense", "moe", "emb", "head", "mtp", "send_f", "send_b", "start")}
    paths = [cells_of_path]
    if kind == ScheduleKind.DUALPIPE:      # the second copy runs up the ranks on chunk 1
        paths.append((p - 1 - np.arange(p)) * v + 1)
    for cells in paths:
        out["dense"][cells] += lay - moe_n
        out["moe"][cells] += moe_n
        out["emb"][cells] += emb_pos
        out["head"][cells] += head_pos
        out["mtp"][cells] += mtp_pos
        out["start"][cells] = start
        if n_pos > 1:
            out["send_f"][cells[:-1]] += 1.0
            out["send_b"][cells[1:]] += 1.0
    for k in list(out):
        out[k] = out[k].reshape(p, v)
        out[k].setflags(write=False)
        if k in ("dense", "moe", "emb", "head", "mtp"):
            out["stage_" + k] = out[k].sum(axis=1, keepdims=True)   # (p, 1): per stage
            out["stage_" + k].setflags(write=False)
    return out


def _take(x, rows):
    """Rows ``rows`` of a per-row array; a broadcast view stays one."""
    x = np.asarray(x)
    if x.ndim and x.strides[0] == 0:
        return np.broadcast_to(x[0], (len(rows),) + x.shape[1:])
    return x[rows]


def layer_split_counts(model, batch, idx, cells: dict, v: int, stage_rc=None, offload=None) -> dict:
    """Per (row, stage, chunk) cell of the rows ``idx``: the layers recomputed in full
    (``rc_dense``, ``rc_moe``), the layer inputs kept for them (``rc_inputs``), and the layers
    whose activations are offloaded to the host (``off_dense``, ``off_moe``).

    Full recomputation (``recompute`` code 2) covers every layer unless
    ``recompute_num_layers`` N is set: ``block`` recomputes the first ``max(N - s k, 0)`` layers
    of each chunk on stage s (k = ``recompute_layers_decrement``) and keeps one input each;
    ``uniform`` recomputes every layer and keeps one input per group of N (Megatron
    ``--recompute-method``). Activation offload takes the next ``offload_activation_layers``
    layers of each chunk among those not recomputed, never the chunk's last (Transformer
    Engine's offload context offloads at most layers - 1). ``stage_rc`` ((rows, p)) and ``offload``
    ((rows,)) override the block counts per stage and the offloaded layers (the planner's
    search for the fewest that fit)."""
    dense, moe = cells["dense"], cells["moe"]
    n = dense + moe
    start = cells["start"]
    p = n.shape[1]
    rc_rows = _rows(batch.recompute, idx)
    off_rows = _rows(batch.offload_activation_layers, idx) if offload is None else np.asarray(offload, dtype=float)
    busy = (rc_rows == _FULL_CODE) | (off_rows > 0)
    if stage_rc is None and not busy.any():
        zero = np.broadcast_to(np.zeros((1, 1, 1)), n.shape)          # nothing recomputed in full or offloaded
        return {"rc_dense": zero, "rc_moe": zero, "rc_inputs": zero, "off_dense": zero, "off_moe": zero}
    nl_rows = _rows(batch.recompute_num_layers, idx)
    if stage_rc is None and not off_rows.any() and not nl_rows.any():
        # every layer of a fully recomputing row, none of the others: the cells themselves
        full = (rc_rows == _FULL_CODE)[:, None, None]
        rc_d = np.where(full, dense, 0.0)
        rc_m = np.where(full, moe, 0.0)
        zero = np.broadcast_to(np.zeros((1, 1, 1)), n.shape)
        return {"rc_dense": rc_d, "rc_moe": rc_m, "rc_inputs": rc_d + rc_m, "off_dense": zero, "off_moe": zero}
    if stage_rc is None and not busy.all():
        # only the rows that recompute in full or offload have counts: compute those, zeros elsewhere
        rows = np.flatnonzero(busy)
        part = layer_split_counts(model, batch, np.asarray(idx)[rows],
                                  {k: _take(cells[k], rows) for k in ("dense", "moe", "start")},
                                  v, offload=None if offload is None else off_rows[rows])
        out = {}
        for k, x in part.items():
            full = np.zeros(n.shape)
            full[rows] = x
            out[k] = full
        return out
    def per_row(x):
        return x[:, None, None]

    stage_n = None if stage_rc is None else np.asarray(stage_rc, dtype=float)[:, :, None]
    return split_counts(_moe_prefix(model), dense, moe, start, np.arange(p, dtype=float)[None, :, None],
                        per_row(rc_rows), per_row(nl_rows), per_row(_rows(batch.recompute_layers_decrement, idx)),
                        per_row(_rows(batch.recompute_method, idx)), per_row(off_rows), stage_n)


def split_counts(prefix, dense, moe, start, stage, rc, nl, dec, method, off, stage_rc=None) -> dict:
    """``layer_split_counts``' formula on arrays that broadcast to the cells: the cells' dense and
    MoE layers and first layer index, their stage's index, the row's recompute code,
    ``recompute_num_layers``, ``recompute_layers_decrement``, ``recompute_method`` code and
    offloaded layers, and (optional) the block count of the cell's stage; ``prefix``:
    ``_moe_prefix``. (The per-stage memory calls it on flat cells, the timing on (row, stage,
    chunk) arrays.)"""
    n = dense + moe
    uniform = method == RECOMPUTE_METHOD_CODES[RecomputeMethod.UNIFORM]
    full = rc == _FULL_CODE
    block_n = np.where(nl > 0, np.minimum(np.maximum(nl - stage * dec, 0.0), n), n)
    if stage_rc is not None:
        block_n = np.minimum(stage_rc, n)
    n_rc = np.where(full, np.where(uniform, n, block_n), 0.0)
    inputs = np.where(full & uniform & (nl > 0), np.ceil(n / np.maximum(nl, 1.0)), n_rc)
    rc_moe = _moe_between(prefix, start, n_rc)
    # Transformer Engine's offload context keeps the chunk's last layer (it offloads at most
    # layers - 1: get_cpu_offload_context's num_layers <= model_layers - 1)
    n_off = np.minimum(np.minimum(off, n - n_rc), np.maximum(n - 1.0, 0.0))
    off_moe = _moe_between(prefix, start + n_rc, n_off)
    return {"rc_dense": n_rc - rc_moe, "rc_moe": rc_moe + 0.0, "rc_inputs": inputs,
            "off_dense": n_off - off_moe, "off_moe": off_moe + 0.0}


@lru_cache(maxsize=64)
def _moe_prefix_cached(num_layers: int, mtp_layers: int, moe, hybrid_pattern: str = "") -> np.ndarray:
    class _M:
        pass
    m = _M()
    m.num_layers, m.mtp_layers, m.moe, m.hybrid_pattern = num_layers, mtp_layers, moe, hybrid_pattern
    out = moe_layers_before(np.arange(num_layers + mtp_layers + 1), m).astype(float)
    out.setflags(write=False)
    return out


def _moe_prefix(model) -> np.ndarray | None:
    """MoE layers before each layer index 0..L+mtp (None for a dense model)."""
    if model.moe is None:
        return None
    return _moe_prefix_cached(model.num_layers, model.mtp_layers, model.moe, model.hybrid_pattern)


def _moe_between(prefix, start, count):
    """MoE layers among layer indices [start, start + count), by the prefix table."""
    if prefix is None:
        return np.zeros(np.broadcast_shapes(np.shape(start), np.shape(count)))
    top = len(prefix) - 1
    a = np.clip(np.asarray(start, dtype=np.int64), 0, top)
    b = np.clip(np.asarray(start + count, dtype=np.int64), 0, top)
    return prefix[b] - prefix[a]


def cell_durations(model, cells: dict, per_layer: PerLayer, ends: Ends, idx, split: dict | None = None,
                   rows=None, w_apart: bool = False, sends: dict | None = None) -> tuple:
    """(f, b, w) seconds per (row, stage, chunk) for the rows ``idx`` of a group; ``split``:
    the cells' recomputed and offloaded layers (``layer_split_counts``; None = every layer
    recomputed as ``per_layer.r`` says and none offloaded); ``rows(x)``: ``_rows(x, idx)``
    (a caller's memo of the gathered rows); ``w_apart``: b and w of a B pass run apart from its
    W (``PerLayer.b_split``; the zero-bubble schedules' B and W ops) instead of the two halves
    of one fused backward; ``sends``: a dict to receive each cell's exposed forward and backward
    send (``exposed_sends``)."""
    rows = rows or (lambda x: _rows(x, idx))  # noqa: E731

    def lay(pair, dense=None, moe=None):
        d, m = (rows(x)[:, None, None] for x in pair)
        return (cells["dense"] if dense is None else dense) * d + (cells["moe"] if moe is None else moe) * m

    e = {name: rows(getattr(ends, name))[:, None, None] for name in Ends.__dataclass_fields__}
    apart = w_apart and per_layer.b_split is not None
    b_layer, w_layer = (per_layer.b_split, per_layer.w_split) if apart else (per_layer.b, per_layer.w)
    if split is None:
        rec = lay(per_layer.r)
        off_f = 0.0
    else:
        rec = (lay(per_layer.r_full, split["rc_dense"], split["rc_moe"])
               + lay(per_layer.r_sel, cells["dense"] - split["rc_dense"], cells["moe"] - split["rc_moe"]))
        off_f = lay(per_layer.off_f, split["off_dense"], split["off_moe"])
    off_b = offload_b_stall(cells, per_layer, split, rows, w_apart)
    f = lay(per_layer.f) + off_f + cells["emb"] * (e["emb_f"] + e["emb_z3_f"]) \
        + cells["head"] * (e["head_f"] + e["head_z3_f"]) + cells["mtp"] * e["mtp_f"]
    b = lay(b_layer) + rec + off_b + cells["emb"] * e["emb_b"] \
        + cells["head"] * e["head_b"] + cells["mtp"] * e["mtp_b"]
    w = lay(w_layer) + cells["emb"] * (e["emb_w"] + e["emb_z3_bw"]) \
        + cells["head"] * (e["head_w"] + e["head_z3_bw"]) + cells["mtp"] * e["mtp_w"]
    send_f, send_b = exposed_sends(e["p2p"], e["p2p_overlap"], f, lambda: b + w)
    if sends is not None:
        sends.update(f=send_f, b=send_b)
    return f + cells["send_f"] * send_f, b + cells["send_b"] * send_b, w


def offload_b_stall(cells: dict, per_layer: PerLayer, split: dict | None, rows, w_apart: bool = False):
    """(rows, p, v) seconds each cell's backward waits on the host link for its offloaded layers'
    activations (0.0 where none is offloaded): the part of ``cell_durations``' ``b`` that is
    reload stall, with ``w_apart`` as there (the B pass alone is the copy's window)."""
    if split is None:
        return 0.0
    apart = w_apart and per_layer.b_split is not None
    d, m = (rows(x)[:, None, None] for x in (per_layer.off_b_split if apart else per_layer.off_b))
    return split["off_dense"] * d + split["off_moe"] * m


def exposed_sends(p2p, overlap, f, bw):
    """(forward, backward) seconds of one send on a cell's critical path: the whole transfer,
    or with ``overlap`` (``step_model.p2p_overlap_applies``) only what it takes beyond the cell's
    own pass (``f``; ``bw()``, the fused backward, computed only when some row overlaps), which the
    next chunk's equal pass hides."""
    on = np.asarray(overlap, dtype=float) > 0
    if not on.any():                # no row overlaps (every schedule but interleaved): the whole send
        return p2p, p2p
    return (np.where(on, np.maximum(p2p - f, 0.0), p2p), np.where(on, np.maximum(p2p - bw(), 0.0), p2p))


def pipeline_pass(model, batch, m, per_layer: PerLayer, ends: Ends, exact: np.ndarray | None = None) -> dict:
    """Makespan of one flush and the busiest stage's parts, per row of ``batch``.

    ``exact``: rows whose makespan is computed on the DAG (default: all); the others get the
    bounds only (``makespan_s`` = the upper bound). Returns arrays: ``makespan_s``,
    ``makespan_lower_s``, ``makespan_upper_s``, ``busiest_stage``, ``stage_busy_s`` (busiest
    stage, one micro-batch), per ``PART_KEYS`` the busiest stage's part for one micro-batch
    (``part_<name>_s``), ``first_stage_layers``, ``last_stage_layers`` (layers on the first and
    last stage, for memory), ``first_stage_moe_layers``, ``last_stage_moe_layers``,
    ``first_window_f_s`` / ``first_window_bw_s`` (stage 0's forward and backward of one
    micro-batch: the windows DP traffic overlaps with) and ``stage_layers_max``.
    """
    n = len(batch)
    out = {k: np.zeros(n) for k in ("makespan_s", "makespan_lower_s", "makespan_upper_s", "busiest_stage",
                                    "stage_busy_s", "busiest_layers", "first_window_f_s", "first_window_bw_s",
                                    "ends_compute_s", "ends_p2p_s", "layer_f_s", "layer_bw_s", "layer_r_s",
                                    "layer_w_s", "busiest_tp_total_s", "part_weight_cast_s", "part_offload_s",
                                    "rc_dense_path", "rc_moe_path")}
    for name in PART_KEYS:
        out[f"part_{name}_s"] = np.zeros(n)
    if n == 0:
        return out
    exact = np.ones(n, dtype=bool) if exact is None else np.asarray(exact, dtype=bool)
    pp = np.asarray(batch.pp).astype(np.int64)
    vpp = np.asarray(batch.vpp).astype(np.int64)
    sched = np.asarray(batch.schedule).astype(np.int64)
    m_int = np.rint(np.asarray(m, dtype=float)).astype(np.int64)
    for idx, code, p, vp in _groups(sched, pp, vpp):
        kind = _CODE_TO_KIND[code]
        v = schedule_chunks(code, vp)
        mm = m_int[idx].astype(float)
        cells = group_cells(model, kind, p, v, _rows(batch.first_stage_layers, idx).astype(np.int64),
                            _rows(batch.last_stage_layers, idx).astype(np.int64), _layouts(batch, idx))
        split = layer_split_counts(model, batch, idx, cells, v)
        gathered = {}

        def rows(x, idx=idx, gathered=gathered):
            """``_rows(x, idx)``, gathered once per array of the group."""
            if id(x) not in gathered:
                gathered[id(x)] = (x, _rows(x, idx))        # (x kept: its id stays its own)
            return gathered[id(x)][1]

        # the zero-bubble schedules run W apart from B (DualPipe: some of its passes only)
        sends = {}
        f, b, w = cell_durations(model, cells, per_layer, ends, idx, split, rows, w_apart=kind in SPLIT_W,
                                 sends=sends)
        apart = None
        if kind in MIXED_W:
            _, b_apart, w_apart = cell_durations(model, cells, per_layer, ends, idx, split, rows, w_apart=True)
            apart = (b_apart, w_apart)
        # per micro-batch a stage runs every chunk once, except DualPipe (one chunk per direction)
        share = 0.5 if kind == ScheduleKind.DUALPIPE else 1.0
        stage_busy = stage_work_s(kind, f, b, w)                      # (rows, p)
        k = np.argmax(stage_busy, axis=1)
        busy = stage_busy[np.arange(len(idx)), k]
        ex = exact[idx]

        def flush_s(f, b, w, apart, rows_, work=None, mm=mm, ex=ex, m_group=m_int[idx], kind=kind, p=p, v=v):
            """(lower bound, estimate, makespan) of the rows ``rows_`` of the group: a lower
            bound: each stage waits for the first forward to reach it, runs all its passes, and
            its last backward still travels back to the first position while only the W passes
            it defers run (``pipeline.bound``); an estimate: every cell at the slowest cell's
            times, by the closed forms; the makespan: on the DAG for the exact rows, else the
            larger of the two."""
            lo = flush_lower_bound_s(kind, p, mm[rows_], v, f, b, w, work=work)
            hi = even_estimate_s(kind, p, mm[rows_], v, f.max(axis=(1, 2)), b.max(axis=(1, 2)), w.max(axis=(1, 2)))
            span = np.maximum(hi, lo)
            sel = np.flatnonzero(ex[rows_])
            for m_value in np.unique(m_group[rows_][sel]):
                sub = sel[m_group[rows_][sel] == m_value]
                span[sub] = flush_makespan_s(kind, p, int(m_value), v, f[sub], b[sub], w[sub],
                                             apart=None if apart is None else (apart[0][sub], apart[1][sub]))
            return lo, hi, span

        lo, hi, span = flush_s(f, b, w, apart, slice(None), work=stage_busy)
        # stage 0's backward of one micro-batch is the window the DP gradient reduction hides
        # under; an activation reload stall in it widens it only by what the makespan paid for
        # that stall. A 1F1B-like flush ends on stage 0's last backward, the one op every path
        # reaches, so the makespan pays its whole stall; the zero-bubble schedules and DualPipe
        # defer W passes and may end on another stage, absorbing stage 0's stall in their slack
        # while the window still counted it (ZB-H1 + offload ran faster than without, and a
        # faster host link slowed it). The stall paid: the makespan less that of the flush
        # without backward reload stalls (the forward ones, on the first forward every path
        # starts from, are always paid).
        stall0 = share * np.zeros(len(idx))
        paid = stall0
        if kind in SPLIT_W or kind in MIXED_W:
            stall_cells = offload_b_stall(cells, per_layer, split, rows, w_apart=kind in SPLIT_W)
            stall0 = share * np.sum(stall_cells, axis=-1)[..., 0] if np.ndim(stall_cells) else stall0
            stalled = np.flatnonzero(stall0 > 0)
            paid = np.zeros(len(idx))
            if len(stalled):
                b_free = (b - stall_cells)[stalled]
                apart_free = None
                if apart is not None:
                    apart_stall = offload_b_stall(cells, per_layer, split, rows, w_apart=True)
                    apart_free = ((apart[0] - apart_stall)[stalled], apart[1][stalled])
                free = flush_s(f[stalled], b_free, w[stalled], apart_free, stalled)[2]
                paid[stalled] = np.maximum(span[stalled] - free, 0.0)
        out["makespan_s"][idx] = span
        out["makespan_lower_s"][idx] = lo
        out["makespan_upper_s"][idx] = hi
        out["busiest_stage"][idx] = k
        out["stage_busy_s"][idx] = busy
        out["first_window_f_s"][idx] = share * f[:, 0, :].sum(axis=1)
        out["first_window_bw_s"][idx] = share * (b[:, 0, :] + w[:, 0, :]).sum(axis=1) - stall0 \
            + np.minimum(stall0, paid)
        rows_k = np.arange(len(idx))
        # the busiest stage's counts: the layouts' per-stage sums
        at_k = {name: cells["stage_" + name][rows_k, k, 0] for name in ("dense", "moe", "emb", "head", "mtp")}
        at_k.update({name: split[name].sum(axis=2)[rows_k, k] for name in split})
        out["busiest_layers"][idx] = at_k["dense"] + at_k["moe"]

        def per_layer_sum(pair, dense="dense", moe="moe"):
            d, mo = (rows(x) for x in pair)
            dn = at_k[dense] if isinstance(dense, str) else dense
            mn = at_k[moe] if isinstance(moe, str) else moe
            return dn * d + mn * mo

        e = {name: rows(getattr(ends, name)) for name in Ends.__dataclass_fields__}
        # the busiest stage's layers per micro-batch whose backward runs as a B apart from its
        # W (the makespan's ``b_split`` / ``w_split`` passes): its parts are those passes' parts,
        # so that they sum to the work the makespan holds and the bubble is the stage's idle
        # time (with the fused parts, the split B's extra exposed TP / EP traffic showed as bubble)
        n_split = split_layers(kind, p, mm, share, cells, split, rows_k, k, at_k)
        fused = {name: at_k[name] - n_split[name] for name in n_split}
        for name in PART_KEYS:
            if name in SPLIT_PARTS:
                out[f"part_{name}_s"][idx] = (per_layer_sum(per_layer.parts[name], fused["dense"], fused["moe"])
                                              + per_layer_sum(per_layer.parts[f"{name}_split"], n_split["dense"],
                                                              n_split["moe"]))
            elif name != "recompute":
                out[f"part_{name}_s"][idx] = per_layer_sum(per_layer.parts[name])
        # recomputation: full for the layers so covered, the selected operations for the others
        rec_full = per_layer_sum(per_layer.parts["recompute_full"], "rc_dense", "rc_moe")
        rec_sel = per_layer_sum(per_layer.parts["recompute_sel"], at_k["dense"] - at_k["rc_dense"],
                                at_k["moe"] - at_k["rc_moe"])
        out["part_recompute_s"][idx] = rec_full + rec_sel
        # the TP / EP traffic a full recomputation repeats, on the layers it covers
        out["part_tp_s"][idx] += per_layer_sum(per_layer.parts["tp_recompute"], "rc_dense", "rc_moe")
        out["part_ep_s"][idx] += per_layer_sum(per_layer.parts["ep_recompute"], "rc_dense", "rc_moe")
        # and the CP exchange a recomputed attention forward runs again
        out["part_cp_s"][idx] += (per_layer_sum(per_layer.parts["cp_recompute_full"], "rc_dense", "rc_moe")
                                  + per_layer_sum(per_layer.parts["cp_recompute_sel"], at_k["dense"] - at_k["rc_dense"],
                                                  at_k["moe"] - at_k["rc_moe"]))
        out["part_offload_s"][idx] = (per_layer_sum(per_layer.off_f, "off_dense", "off_moe")
                                      + per_layer_sum(per_layer.off_b, fused["off_dense"], fused["off_moe"])
                                      + per_layer_sum(per_layer.off_b_split, n_split["off_dense"], n_split["off_moe"]))
        out["rc_dense_path"][idx] = share * split["rc_dense"].sum(axis=(1, 2))
        out["rc_moe_path"][idx] = share * split["rc_moe"].sum(axis=(1, 2))
        out["part_z3_s"][idx] += at_k["emb"] * (e["emb_z3_f"] + e["emb_z3_bw"]) \
            + at_k["head"] * (e["head_z3_f"] + e["head_z3_bw"])
        out["part_weight_cast_s"][idx] = per_layer_sum(per_layer.parts["weight_cast"])
        out["busiest_tp_total_s"][idx] = (per_layer_sum(per_layer.parts["tp_total"])
                                          + per_layer_sum(per_layer.parts["tp_total_recompute"], "rc_dense", "rc_moe"))
        out["layer_f_s"][idx] = per_layer_sum(per_layer.f)
        out["layer_bw_s"][idx] = per_layer_sum(per_layer.b) + per_layer_sum(per_layer.w)
        out["layer_r_s"][idx] = (per_layer_sum(per_layer.r_full, "rc_dense", "rc_moe")
                                 + per_layer_sum(per_layer.r_sel, at_k["dense"] - at_k["rc_dense"],
                                                 at_k["moe"] - at_k["rc_moe"]))
        out["layer_w_s"][idx] = per_layer_sum(per_layer.w)
        # the ends' exposed TP collectives are in their passes: TP traffic, not compute
        ends_tp = at_k["emb"] * e["emb_tp"] + at_k["head"] * e["head_tp"] + at_k["mtp"] * e["mtp_tp"]
        out["part_tp_s"][idx] += ends_tp
        out["busiest_tp_total_s"][idx] += (at_k["emb"] * e["emb_tp_total"] + at_k["head"] * e["head_tp_total"]
                                           + at_k["mtp"] * e["mtp_tp_total"])
        out["ends_compute_s"][idx] = (at_k["emb"] * (e["emb_f"] + e["emb_b"] + e["emb_w"])
                                      + at_k["head"] * (e["head_f"] + e["head_b"] + e["head_w"])
                                      + at_k["mtp"] * (e["mtp_f"] + e["mtp_b"] + e["mtp_w"])) - ends_tp
        out["ends_p2p_s"][idx] = (cells["send_f"] * sends["f"] + cells["send_b"] * sends["b"]).sum(axis=2)[rows_k, k]
    return out


def split_layers(kind: ScheduleKind, p: int, m, share, cells: dict, split: dict, rows_k, k, at_k: dict) -> dict:
    """Per row, the busiest stage's (``k``) layers per micro-batch whose backward runs as a B
    apart from its W, by kind (``dense``, ``moe``, and the offloaded ``off_dense``,
    ``off_moe``): all of ``at_k``'s on the zero-bubble schedules (``SPLIT_W``); on DualPipe(V),
    per chunk its layers times the share of the chunk's m * share backward passes the recipe
    splits (``makespan.split_backward_counts``); none on the others."""
    names = ("dense", "moe", "off_dense", "off_moe")
    if kind in SPLIT_W:
        return {name: at_k[name] for name in names}
    if kind not in MIXED_W:
        return {name: 0.0 * at_k[name] for name in names}
    counts = {"dense": cells["dense"], "moe": cells["moe"], "off_dense": split["off_dense"],
              "off_moe": split["off_moe"]}
    q = split_backward_counts(kind, p)[k] / (np.asarray(m, dtype=float) * share)[:, None]     # (rows, v)
    return {name: (np.broadcast_to(counts[name], cells["dense"].shape)[rows_k, k, :] * q).sum(axis=1)
            for name in names}


def _layouts(batch, idx):
    """The layout strings of rows ``idx`` (None when no row of the batch has one)."""
    col = getattr(batch, "pipeline_layout", None)
    if col is None:
        return None
    col = np.asarray(col)
    if col.ndim == 0:
        return None if not col.item() else np.full(len(idx), col.item(), dtype=object)
    sub = col[idx]
    if col.dtype.kind == "U":
        return sub.astype(object) if (sub != "").any() else None
    return sub if (sub.astype(str) != "").any() else None


def key_groups(key):
    """Row indices of each distinct value of the 1-D integer ``key``, in increasing key order,
    rows in their own order (one sort of the key: far cheaper than a row-wise unique)."""
    key = np.asarray(key)
    if (key == key[0]).all():
        yield np.arange(len(key))
        return
    uniq, inverse = np.unique(key, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(uniq) + 1))
    for g in range(len(uniq)):
        yield order[bounds[g]:bounds[g + 1]]


def _groups(sched, pp, vpp):
    """(row indices, schedule code, pp, vpp) of each distinct (schedule, pp, vpp) among the rows."""
    for idx in key_groups((sched * 1_000_003 + pp) * 1_000_003 + vpp):
        i0 = idx[0]
        yield idx, int(sched[i0]), int(pp[i0]), int(vpp[i0])


def even_estimate_s(kind: ScheduleKind, p: int, m: int, v: int, f, b, w):
    """Makespan of a flush whose every cell has the same (f, b, w) (seconds per chunk and
    micro-batch), by the schedules' closed forms (``bubble_closed_form_s``): the estimate the
    planner orders candidates by before computing the DAG makespan of the best."""
    per_mb = (v if kind in (ScheduleKind.INTERLEAVED, ScheduleKind.ZB_V, ScheduleKind.DUALPIPE_V) else 1) * (f + b + w)
    return m * per_mb + bubble_closed_form_s(kind, p, v, f, b, w)


def bubble_closed_form_s(kind: ScheduleKind, p, v, f, b, w):
    """Idle time of a stage per flush with equal cells, closed forms (seconds); ``f``, ``b``,
    ``w`` are one micro-batch's forward, input-gradient and weight-gradient time of one chunk.

    GPipe / 1F1B: (p-1)(F+B+W) (Huang et al. 2019; Narayanan et al. 2021, eq. 1). Interleaved
    1F1B: (p-1)(F+B+W) of one chunk, i.e. the stage's bubble divided by v (Narayanan et al.
    2021, section 2.2.2). ZB-H1: (p-1)(F+B-W); ZB-H2: (p-1)(F+B-2W) floored at zero (Qi et al.
    2023, sections 2.1-2.2); ZB-V: the same with the stage's two chunks. DualPipe:
    (p/2-1)(F&B+B-3W) (DeepSeek-V3 report, arXiv 2412.19437, table 2), where, as in that
    table's 1F1B line (p-1)(F+B), B is the whole backward b + w and F&B one forward and one
    whole backward chunk run together, f + b + w here (no compute overlap is priced):
    (p/2-1)(f + 2b - w). The table's schedule takes W passes to fill what that leaves; where
    they are too short or too long to (f > 2b, or w > b), the fill costs (p/2-1)(f + b) or
    (p/2-1)(2f - w) instead, so the form is the largest of the three: with it the estimate
    stays at or above the event simulation's makespan (checked over p 2-24, m 2p-8p and f, b,
    w from 0 to 4 in ``tests/test_dualpipe_bubble.py``).
    """
    pm1 = np.asarray(p, dtype=float) - 1.0
    if kind in (ScheduleKind.GPIPE, ScheduleKind.ONE_F_ONE_B, ScheduleKind.INTERLEAVED):
        return pm1 * (f + b + w)
    if kind == ScheduleKind.ZB_H1:
        return pm1 * np.maximum(f + b - w, 0.0)
    if kind == ScheduleKind.ZB_H2:
        return pm1 * np.maximum(f + b - 2.0 * w, 0.0)
    if kind in (ScheduleKind.ZB_V, ScheduleKind.DUALPIPE_V):
        return pm1 * np.maximum(2.0 * (f + b) - 4.0 * w, 0.0)
    table = (f + b + w) + (b + w) - 3.0 * w                 # F&B + B - 3W, B = b + w
    return np.maximum(np.asarray(p, dtype=float) / 2.0 - 1.0, 0.0) * np.maximum(
        np.maximum(table, f + b), np.maximum(2.0 * f - w, 0.0))
