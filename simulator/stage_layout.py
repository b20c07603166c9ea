"""Which transformer layers each pipeline stage holds: the layout the makespan is computed on.

A micro-batch's forward visits the pipeline's *positions* in layer order (``PipelineSchedule.paths``:
one position per stage for 1F1B-like schedules, ``p * v`` for interleaved and V-shaped ones,
``p`` per model copy for DualPipe). Each position holds a contiguous run of layers; the
embedding runs on the first position and the LM head with the loss on the last. Multi-token-
prediction modules (DeepSeek-V3 report, section 2.2) come after the last decoder layer and are
built on the last stage (Megatron-Core builds them in the post-process stage).

Layouts, per row:

* ``first_stage_layers`` / ``last_stage_layers`` > 0: Megatron's
  ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``: the first
  and/or last stage hold that many layers (split evenly over their chunks), the other stages
  (an edge stage whose count is not given among them) share the rest evenly, as Megatron-Core
  requires them to (``validate_config``).
* otherwise an even split when the layers divide; when they do not, every position holds
  ``ceil(L / positions)`` layers except that the shortfall is taken one layer at a time from the
  ends of the path inwards (last, first, second-to-last, ...): the first and last stages also
  carry the embedding and the LM head, and this is how published runs lay out layer counts that
  do not divide (Llama 3 405B, 126 layers on 16 stages: 7, 8 x 14, 7; Llama 3 paper, section 3.3.2).

Every function is vectorized over rows (numpy arrays), for one (schedule, p, v) at a time.
"""
from __future__ import annotations

import numpy as np

from hardware_specs.errors import InputError
from simulator.pipeline.schedules import TWO_CHUNK, ScheduleKind, schedule_paths


def _ceil_div(a, b):
    return -(-a // b)


def path_cells(kind: ScheduleKind, p: int, v: int) -> np.ndarray:
    """(positions,) cell index ``stage * v + chunk`` of each forward position of one path
    (for DualPipe: of the first model copy; the second mirrors it): the schedule's own path."""
    return schedule_paths(kind, p, v)[0]


def position_stages(kind: ScheduleKind, p: int, v: int) -> np.ndarray:
    """Stage of each forward position of one path."""
    return path_cells(kind, p, v) // v


def _deficit_order(n: int) -> np.ndarray:
    """Positions 0..n-1 ordered from the ends inwards: n-1, 0, n-2, 1, ..."""
    order = np.empty(n, dtype=np.int64)
    lo, hi, k = 0, n - 1, 0
    while lo <= hi:
        order[k] = hi
        k += 1
        hi -= 1
        if lo <= hi:
            order[k] = lo
            k += 1
            lo += 1
    return order


def _spread(total, n: int) -> np.ndarray:
    """(rows, n) layer counts: ``total`` (rows,) over n positions, ceil each, shortfall taken
    from the ends inwards."""
    total = np.asarray(total, dtype=np.int64)
    c = _ceil_div(total, n)
    short = c * n - total
    rank = np.empty(n, dtype=np.int64)
    rank[_deficit_order(n)] = np.arange(n)
    return c[:, None] - (rank[None, :] < short[:, None])


def position_layers(kind: ScheduleKind, p: int, v: int, num_layers: int, first=0, last=0, mtp: int = 0) -> np.ndarray:
    """(rows, positions) layers each forward position holds, per row.

    ``num_layers`` counts every transformer layer (the ``mtp`` MTP modules included, which follow
    the decoder on the last position); ``first`` / ``last`` (scalars or (rows,) arrays, 0 = not
    set) are the first and last stages' layer counts, the last's with the MTP modules. When the
    last is not set, the stages without a count share the decoder layers and the MTP modules go
    on top of the last one's share, as Megatron-Core builds them.
    """
    first = np.atleast_1d(np.asarray(first, dtype=np.int64))
    last = np.atleast_1d(np.asarray(last, dtype=np.int64))
    rows = max(len(first), len(last))
    first, last = np.broadcast_to(first, (rows,)), np.broadcast_to(last, (rows,))
    stages = position_stages(kind, p, v)
    n_pos = len(stages)
    out = _spread(np.full(rows, num_layers), n_pos)
    custom = (first > 0) | (last > 0)
    if not custom.any() or p == 1:
        return out
    is_first, is_last = stages == 0, stages == p - 1
    chunks = int(is_first.sum())            # positions per stage
    rest_total = num_layers - first - last
    # an edge stage whose count is not set is one of the middle stages (Megatron-Core:
    # ``pipeline_parallel_size`` less one per count given)
    for first_set in (False, True):
        for last_set in (False, True):
            rows_ = np.flatnonzero(custom & ((first > 0) == first_set) & ((last > 0) == last_set))
            if not len(rows_):
                continue
            middle = ~((is_first & first_set) | (is_last & last_set))
            lay = np.zeros((len(rows_), n_pos), dtype=np.int64)
            if first_set:
                lay[:, is_first] = _spread(first[rows_], chunks)
            if last_set:
                # the last stage's decoder layers over its chunks, the MTP modules on top of the
                # last one (Megatron-Core: num_layers_in_last_pipeline_stage // vp_size a chunk)
                lay[:, is_last] = _spread(last[rows_] - int(mtp), chunks)
                lay[:, -1] += int(mtp)
            if middle.any():
                extra = 0 if last_set else int(mtp)     # MTP on top of the last middle stage's share
                lay[:, middle] = _spread(np.maximum(rest_total[rows_] - extra, 0), int(middle.sum()))
                lay[:, -1] += extra
            out[rows_] = lay
    return out


def moe_layers_before(index, model) -> np.ndarray:
    """Mixture-of-experts layers among layer indices ``[0, index)`` (MTP layers, which follow the
    decoder, take the kind of the last decoder layer)."""
    index = np.asarray(index, dtype=np.int64)
    moe = model.moe
    if moe is None:
        return np.zeros_like(index)
    pattern = getattr(model, "hybrid_pattern", "")
    if pattern:     # a hybrid layer list: the E layers, counted by a prefix sum (no MTP layers)
        prefix = np.concatenate([[0], np.cumsum([c == "E" for c in pattern])])
        return prefix[np.clip(index, 0, len(pattern))]
    fd, q, L = moe.first_dense_layers, moe.moe_layer_frequency, model.num_layers
    decoder = np.minimum(index, L)
    count = _ceil_div(np.maximum(decoder - fd, 0), q)
    last_is_moe = L - 1 >= fd and (L - 1 - fd) % q == 0
    return count + (np.maximum(index - L, 0) if last_is_moe else 0)


def position_moe_layers(model, layers: np.ndarray) -> np.ndarray:
    """(rows, positions) MoE layers per position, given ``position_layers``."""
    end = np.cumsum(layers, axis=1)
    start = end - layers
    return moe_layers_before(end, model) - moe_layers_before(start, model)


def chunk_layers(num_layers: int, pp: int, vpp: int = 1, mtp_layers: int = 0,
                 first_stage_layers: int = 0, last_stage_layers: int = 0,
                 schedule: str | None = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(decoder, mtp)``: decoder layers and MTP modules of each model chunk the plan's pipeline
    runs, in layer order (for interleaving chunk ``c`` runs on pipeline rank ``c mod pp``; ZB-V /
    DualPipe run two chunks per rank in a V). The embedding is on the first chunk, the LM head
    and the loss on the last.

    The layout is the step model's own (``simulator.stage_layout.position_layers``, one formula
    for the prediction and the launch): ``first_stage_layers`` / ``last_stage_layers`` > 0 fix
    the first / last stage's layers (MTP modules counted in the last), the other stages sharing
    the rest; otherwise every chunk holds ``ceil((L + mtp) / chunks)`` layers except that the
    shortfall is taken from the ends inwards. The ``mtp_layers`` MTP modules are the last of
    those layers (they follow the decoder). For 61 DeepSeek-V3 layers plus one MTP module on
    pp 4 that is 15 | 16 | 16 | 14 + MTP.

    A chunk may hold no transformer layer only at an end of the path: the first chunk then holds
    only the embedding, the last only the LM head and the loss. Llama 3 405B on pp 16 x vpp 8
    (126 layers on 128 chunks) is that layout: embedding | 126 x one layer | loss (Llama 3 paper,
    arXiv 2407.21783, section 3.3.2). Any other empty chunk raises ``InputError``.
    """
    kind = ScheduleKind(schedule or (ScheduleKind.INTERLEAVED.value if vpp > 1 else ScheduleKind.ONE_F_ONE_B.value))
    chunks_per_stage = vpp if kind == ScheduleKind.INTERLEAVED else 2 if kind in TWO_CHUNK else 1
    positions = pp * chunks_per_stage if kind != ScheduleKind.DUALPIPE else pp
    if pp < 1 or num_layers + mtp_layers + 2 < positions:
        raise InputError("pp", f"cannot lay {num_layers} layers{f' and {mtp_layers} MTP modules' if mtp_layers else ''}"
                         f" on {positions} pipeline chunks (at most layers + 2: an embedding-only first chunk and "
                         "a loss-only last one)", "choose fewer pipeline stages or virtual stages")
    units = [int(n) for n in position_layers(kind, pp, chunks_per_stage, num_layers + mtp_layers,
                                             int(first_stage_layers or 0), int(last_stage_layers or 0),
                                             mtp_layers)[0]]
    # the MTP modules are the last mtp_layers layers of the path
    mtp, left = [0] * len(units), mtp_layers
    for i in range(len(units) - 1, -1, -1):
        mtp[i] = min(max(units[i], 0), left)
        left -= mtp[i]
    decoder = [u - m for u, m in zip(units, mtp)]
    inner_empty = [i for i, u in enumerate(units) if u < 1 and 0 < i < len(units) - 1]
    if min(units) < 0 or inner_empty or sum(decoder) != num_layers or left:
        field = "first_stage_layers" if first_stage_layers or last_stage_layers else "pp"
        raise InputError(field, f"the layout {units} (layers per chunk, {mtp_layers} MTP) does not hold the "
                         f"{num_layers} layers with at least one in every chunk but an embedding-only first and a "
                         "loss-only last", "choose other stage counts or fewer stages")
    return tuple(decoder), tuple(mtp)


def layout_string(decoder: tuple[int, ...], mtp: tuple[int, ...] = ()) -> str:
    """Megatron-LM's ``--pipeline-model-parallel-layout`` for chunks holding ``decoder`` decoder
    layers and ``mtp`` MTP modules, in layer order: ``E`` the embedding (first chunk), ``t`` a
    decoder layer, ``m`` an MTP module, ``L`` the loss (last chunk), ``|`` between chunks;
    ``x*n`` repeats a symbol and ``(...|)*n`` a run of equal chunks, a comma closing the run
    (megatron/core/transformer/pipeline_parallel_layer_layout.py ``parse_str_to_list``).
    Llama 3 405B on pp 16 x vpp 8: ``E|(t|)*126,L``."""
    mtp = tuple(mtp) or (0,) * len(decoder)

    def run(symbol: str, n: int) -> str:
        return "" if n == 0 else symbol if n == 1 else f"{symbol}*{n}"

    chunks = [run("t", d) + run("m", m) for d, m in zip(decoder, mtp)]
    chunks[0] = "E" + chunks[0]
    chunks[-1] = chunks[-1] + "L"
    out, i = [], 0
    while i < len(chunks) - 1:                     # every chunk but the last is followed by '|'
        j = i
        while j + 1 < len(chunks) - 1 and chunks[j + 1] == chunks[i]:
            j += 1
        n = j - i + 1
        out.append(f"({chunks[i]}|)*{n}," if n > 1 else f"{chunks[i]}|")
        i = j + 1
    return "".join(out) + chunks[-1]
