"""What recomputation and offload change in a pipeline stage's memory, for ``stage_memory``.

Per layer and micro-batch the activation bytes a layer keeps (``layer_activation_bytes``:
everything less the recomputed operations; a layer recomputed in full keeps its input); per
cell the layers recomputed in full and offloaded (``split_cells``); per stage the activations
of its peak of in-flight chunk sets, what recomputation brings back during a backward, the
offload staging buffers and the host copy (``dynamic_parts``). Rows equal in everything these
read share them (``distinct_dynamic_rows``), and the memory search evaluates them once per
distinct (stage, count) (``shared_dynamic``).
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from cost_models import memory, moe as moe_costs, offload
from cost_models.compute import LOW_PRECISION, activation_bytes
from cost_models.distinct import distinct_elements
from cost_models.low_precision import saved_gemm_input_bytes_per_element
from model_specs.model_spec import ModelSpec
from simulator.config_batch import RECOMPUTE_CODES
from simulator.parallel_config import Recompute
from simulator.stage_cells import StageCells, ranges, row_bounds
from simulator.step_pipeline import _layouts, _rows, split_counts

_FULL = RECOMPUTE_CODES[Recompute.FULL]


def layer_activation_bytes(model: ModelSpec, dtype: str, mbs, tp, cp, sp, rc, flash_attention, ep, etp, imbalance,
                           modules, selective=memory.SELECTIVE_DEFAULT, probs_in_expert=False) -> dict:
    """Per layer and micro-batch on one GPU, bytes: ``kept_dense`` / ``kept_moe`` (a layer not
    recomputed in full, the selected operations recomputed), ``input`` (a layer recomputed in
    full keeps only its input), ``full_dense`` / ``full_moe`` (everything: what a recomputed
    layer materialises during its backward), ``host_dense`` / ``host_moe`` (a kept layer's
    tensors as pinned host copies: what offloading it holds in host memory), ``dispatch`` (one
    MoE layer's transient token exchange buffers). ``selective``: what a selective recomputation recomputes when no modules
    are named (the stack's, ``ParallelConfig.selective_modules``, as a modules mask).
    ``probs_in_expert``: ``ParallelConfig.moe_probs_in_expert``."""
    s = float(model.seq_len)
    eb = activation_bytes(dtype)            # 2 in 16-bit training, 4 in fp32
    gb = saved_gemm_input_bytes_per_element(dtype) if dtype in LOW_PRECISION else eb
    mods = memory.effective_modules(rc, modules, selective)
    dense_ffn = (model.moe.dense_ffn_hidden_size or model.ffn_hidden_size) if model.moe else None

    def kept(ffn, recompute, m, pinned=False):
        return memory.activation_bytes_per_layer(model, mbs, s, tp, cp, sp, recompute, flash_attention, ffn, m, gb, eb,
                                                 pinned=pinned)

    not_full = np.where(np.asarray(rc) == 2, np.where(mods != 0, 1, 0), rc)   # what the other layers do
    if model.hybrid_pattern:
        return _hybrid_activation_bytes(model, mbs, s, tp, cp, sp, rc, not_full, mods, flash_attention, ep, etp,
                                        imbalance, gb, eb, probs_in_expert)
    out = {"kept_dense": kept(dense_ffn, not_full, mods), "full_dense": kept(dense_ffn, 0, 0),
           "host_dense": kept(dense_ffn, not_full, mods, pinned=True),
           "input": memory.activation_terms(model, mbs, s, tp, cp, sp, flash_attention, element_bytes=eb)["layer_input"]}
    if model.moe is not None:
        shared_ffn = max(model.moe.num_shared_experts * (model.moe.shared_expert_ffn_hidden_size
                                                         or model.moe.expert_ffn_hidden_size), 1)
        routed = partial(moe_costs.moe_activation_bytes_per_layer, model, mbs, s, tp, cp, ep, etp)
        # (a mask emptied by ``moe_block_modules`` recomputes nothing there: not the default core_attn)
        block_mods = memory.moe_block_modules(mods)
        out["kept_moe"] = (kept(shared_ffn, np.where(block_mods != 0, not_full, 0), block_mods)
                           + routed(not_full, imbalance, mods, gb, probs_in_expert, element_bytes=eb))
        out["host_moe"] = (kept(shared_ffn, np.where(block_mods != 0, not_full, 0), block_mods, pinned=True)
                           + routed(not_full, imbalance, mods, gb, probs_in_expert, pinned=True, element_bytes=eb))
        out["full_moe"] = kept(shared_ffn, 0, 0) + routed(0, imbalance, 0, gb, probs_in_expert, element_bytes=eb)
        out["dispatch"] = moe_costs.moe_dispatch_buffer_bytes(model, mbs, s, tp, cp, etp, imbalance, ep, eb) + 0.0 * tp
    else:
        out["kept_moe"], out["full_moe"], out["dispatch"] = out["kept_dense"], out["full_dense"], 0.0 * tp
        out["host_moe"] = out["host_dense"]
    return {k: np.asarray(v, dtype=float) + 0.0 * np.asarray(tp, dtype=float) for k, v in out.items()}



#: ``memory.activation_terms`` of one transformer layer split by block: a hybrid layer holds
#: one block behind one pre-norm, so it keeps half of the per-layer norm and mask terms
_ATTENTION_TERMS = ("qkv", "attn_k", "mla_latents", "attn_out", "core")
_MLP_TERMS = ("mlp_fc1_out", "mlp_fc1_up", "mlp_act_out")
_HALVED_TERMS = ("norm_inputs", "norm_outputs", "dropout_masks")


def _block_terms(terms: dict, names) -> dict:
    out = {k: terms[k] for k in names}
    out.update({k: terms[k] / 2.0 for k in _HALVED_TERMS})
    out["layer_input"] = terms["layer_input"]
    return out


def _hybrid_activation_bytes(model: ModelSpec, mbs, s, tp, cp, sp, rc, not_full, mods, flash_attention, ep, etp,
                             imbalance, gb, eb, probs_in_expert=False) -> dict:
    """``layer_activation_bytes`` of a hybrid pattern: the dense slot the share-weighted mean of
    its Mamba (``mamba.mamba_activation_terms``), attention and MLP layers, the moe slot an E
    layer's MoE block alone (shared experts as an MLP, routed experts as for any MoE layer)."""
    from cost_models import mamba
    kept_mods = memory.effective_modules(not_full, mods)

    def kept_and_full(terms):
        """(bytes kept by a layer not recomputed in full, everything it materialises, the kept
        tensors as pinned host copies)"""
        return (memory.kept_bytes(terms, kept_mods), memory.kept_bytes(terms, 0),
                memory.pinned_kept_bytes(terms, kept_mods))

    layer = memory.activation_terms(model, mbs, s, tp, cp, sp, flash_attention, None, gb, eb)
    parts = {"attention": kept_and_full(_block_terms(layer, _ATTENTION_TERMS)),
             "mlp": kept_and_full(_block_terms(layer, _MLP_TERMS))}
    if model.mamba is not None:
        parts["mamba"] = kept_and_full(mamba.mamba_activation_terms(model, mbs, s, tp, cp, sp, gb, eb))
    shares = mamba.non_moe_kind_shares(model)
    out = {"kept_dense": sum(shares[k] * v[0] for k, v in parts.items()),
           "full_dense": sum(shares[k] * v[1] for k, v in parts.items()),
           "host_dense": sum(shares[k] * v[2] for k, v in parts.items()), "input": layer["layer_input"]}
    if model.moe is not None:
        moe = model.moe
        shared_ffn = max(moe.num_shared_experts * (moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size), 1)
        shared_terms = _block_terms(memory.activation_terms(model, mbs, s, tp, cp, sp, flash_attention, shared_ffn,
                                                            gb, eb), _MLP_TERMS)
        shared = (memory.kept_bytes(shared_terms, memory.moe_block_modules(kept_mods)),
                  memory.kept_bytes(shared_terms, 0),
                  memory.pinned_kept_bytes(shared_terms, memory.moe_block_modules(kept_mods)))
        routed = partial(moe_costs.moe_activation_bytes_per_layer, model, mbs, s, tp, cp, ep, etp)
        out["kept_moe"] = shared[0] + routed(not_full, imbalance, mods, gb, probs_in_expert, element_bytes=eb)
        out["host_moe"] = shared[2] + routed(not_full, imbalance, mods, gb, probs_in_expert, pinned=True, element_bytes=eb)
        out["full_moe"] = shared[1] + routed(0, imbalance, 0, gb, probs_in_expert, element_bytes=eb)
        out["dispatch"] = moe_costs.moe_dispatch_buffer_bytes(model, mbs, s, tp, cp, etp, imbalance, ep, eb) + 0.0 * tp
    else:
        out["kept_moe"], out["full_moe"], out["dispatch"] = out["kept_dense"], out["full_dense"], 0.0 * tp
        out["host_moe"] = out["host_dense"]
    return {k: np.asarray(v, dtype=float) + 0.0 * np.asarray(tp, dtype=float) for k, v in out.items()}


def distinct_dynamic_rows(batch, act: dict, rc_group):
    """(first row of each distinct key, each row's key) over the rows of ``batch``, the key
    being everything a stage's dynamic parts read: the layout (schedule, pp, vpp, first and
    last stage layers, layout string), the micro-batches per step (the in-flight chunk sets),
    the recomputation and offload settings and the per-layer activation bytes."""
    n = len(batch)

    def col(x):
        return np.broadcast_to(np.asarray(x, dtype=float), (n,))

    m = np.rint(np.asarray(batch.global_batch, dtype=float)
                / (np.asarray(batch.dp, dtype=float) * np.asarray(batch.micro_batch, dtype=float)))
    cols = [col(getattr(batch, f)) for f in ("schedule", "pp", "vpp", "first_stage_layers", "last_stage_layers",
                                              "recompute", "recompute_num_layers", "recompute_layers_decrement",
                                              "recompute_method", "offload_activation_layers")]
    cols += [col(m), col(rc_group)] + [col(act[k]) for k in ("kept_dense", "kept_moe", "input", "full_dense",
                                                               "full_moe")]
    if "cp_buffers" in act and np.any(np.asarray(act["cp_buffers"]) > 0):
        cols.append(col(act["cp_buffers"]))
    layouts = _layouts(batch, np.arange(n))
    if layouts is not None:
        cols.append(np.asarray(layouts, dtype=object).astype(str))
    # each row's key numbered in order of first appearance (``distinct.distinct_elements``:
    # small whole numbers packed into one integer, the other columns hashed one at a time)
    found = distinct_elements(cols, min_elements=1)
    if found is None:           # no row, or no column that varies: one key
        return np.zeros(min(n, 1), dtype=np.int64), np.zeros(n, dtype=np.int64)
    return found



def split_inputs(batch, idx) -> dict:
    """Per row of ``idx``: what the layer split counts read (recompute code, num layers,
    decrement, method code, offloaded layers)."""
    return {"rc": _rows(batch.recompute, idx), "nl": _rows(batch.recompute_num_layers, idx),
            "dec": _rows(batch.recompute_layers_decrement, idx), "method": _rows(batch.recompute_method, idx),
            "off": _rows(batch.offload_activation_layers, idx)}


def split_cells(prefix, prm: dict, fc: StageCells, stage_rc=None, offload=None, given: bool = False):
    """Per cell of ``fc``: the layers recomputed in full and offloaded
    (``step_pipeline.split_counts``), None when no cell has any. ``stage_rc`` (per stage of
    ``fc``) and ``offload`` (per stage: its row's count) override the rows' block counts and
    offloaded layers (the search). ``given``: the rows as enumerated, where a row that
    recomputes every layer of every cell (``recompute full`` without a count, nothing
    offloaded) takes the cells' own counts (``layer_split_counts``' direct path)."""
    row = fc.cell_row
    rc, nl, off = prm["rc"], prm["nl"], prm["off"]
    if stage_rc is None and offload is None and not ((rc == _FULL) | (off > 0)).any():
        return None
    busy = None
    if stage_rc is None and offload is None:
        busy_rows = (rc == _FULL) | (off > 0)
        if not busy_rows.all():
            # only the rows that recompute in full or offload have counts: those cells, zeros elsewhere
            bounds = row_bounds(fc.row)
            ends = np.append(fc.first_cell, len(fc.cell_stage))[np.append(bounds[1:], len(fc))]
            r = np.flatnonzero(busy_rows)
            starts = fc.first_cell[bounds[r]]
            busy = ranges(starts, ends[r] - starts)
            row = row[busy]
    pick = (lambda x: x) if busy is None else (lambda x: x[busy])   # noqa: E731
    dense, moe = pick(fc.cell["dense"]), pick(fc.cell["moe"])
    out = split_counts(prefix, dense, moe, pick(fc.cell["start"]), pick(fc.local[fc.cell_stage]).astype(float),
                       rc[row], nl[row], prm["dec"][row], prm["method"][row],
                       off[row] if offload is None else pick(offload[fc.cell_stage]),
                       None if stage_rc is None else pick(stage_rc[fc.cell_stage]))
    if given:
        every = ((rc == _FULL) & (nl == 0) & (off == 0))[row]
        if every.any():
            out["rc_dense"] = np.where(every, dense, out["rc_dense"])
            out["rc_moe"] = np.where(every, moe, out["rc_moe"])
            out["rc_inputs"] = np.where(every, dense + moe, out["rc_inputs"])
    if busy is not None:
        for k, x in out.items():
            full = np.zeros(len(fc.cell_stage))
            full[busy] = x
            out[k] = full
    return out



def dynamic_parts(ctx, sidx, fc: StageCells, split) -> dict:
    """What recomputation and offload change, per stage of ``fc``: ``activations_bytes``,
    ``recompute_buffers_bytes``, ``offload_buffers_bytes``, and ``host`` (offloaded activations)."""
    a = {k: x[sidx] for k, x in ctx.act.items()}
    if split is None:
        zero = np.zeros(len(fc))
        per_stage = dict.fromkeys(("rc_dense", "rc_moe", "rc_inputs", "off_dense", "off_moe"), zero)
    else:
        per_stage = {k: fc.stage_sum(x) for k, x in split.items()}
    offd, offm = per_stage["off_dense"], per_stage["off_moe"]
    kept_d = fc.stage["stage_dense"] - per_stage["rc_dense"] - offd
    kept_m = fc.stage["stage_moe"] - per_stage["rc_moe"] - offm
    sets = fc.in_flight / fc.chunks
    held = sets * (kept_d * a["kept_dense"] + kept_m * a["kept_moe"] + per_stage["rc_inputs"] * a["input"])
    host = sets * (offd * a["host_dense"] + offm * a["host_moe"])
    if fc.held_first is not None and (fc.chunks > 1).any():
        held, host = _unequal_chunks(fc, split, a, held, host)
    return {
        "activations_bytes": held,
        # the transients of the layer computing: a recomputed layer's full activations and the
        # context-parallel exchange buffers (``stage_context``), which coexist in its backward and,
        # like it, never with the loss's logits (``memory_search.recompute_beyond_loss``)
        "recompute_buffers_bytes": _recompute_buffer(fc, split, a, ctx.per_row["rc_group"][sidx],
                                                     (per_stage["rc_dense"] + per_stage["rc_moe"] + offd + offm) > 0)
        + np.where(fc.stage["stage_dense"] + fc.stage["stage_moe"] > 0, a.get("cp_buffers", 0.0), 0.0),
        "offload_buffers_bytes": offload.OFFLOAD_STAGING_LAYERS * np.maximum(
            np.where(offd > 0, a["kept_dense"], 0.0), np.where(offm > 0, a["kept_moe"], 0.0)),
        # in host memory each offloaded tensor is a pinned copy, rounded up (``memory.pinned_bytes``)
        "host": host,
    }


def _unequal_chunks(fc: StageCells, split, a: dict, held, host):
    """``held`` (activation bytes) and ``host`` (offloaded copies) per stage of ``fc``, those of
    the stages whose chunks hold different bytes a set replaced by their schedule's peak with
    each chunk's own (``StageCells.held_peak``): the in-flight sets are not spread evenly over
    the chunks (interleaved 1F1B's first stage warms up on chunk 0 before chunk 1: a heavier
    first chunk, the embedding stage's of an uneven layout, peaks higher than the stage's mean
    chunk says). Equal chunks keep ``sets`` times the stage's layers (the same numbers)."""
    cell_a = {k: a[k][fc.cell_stage] for k in ("kept_dense", "kept_moe", "input", "host_dense", "host_moe")}
    if split is None:
        zero = np.zeros(len(fc.cell_stage))
        split = dict.fromkeys(("rc_dense", "rc_moe", "rc_inputs", "off_dense", "off_moe"), zero)
    per_cell = ((fc.cell["dense"] - split["rc_dense"] - split["off_dense"]) * cell_a["kept_dense"]
                + (fc.cell["moe"] - split["rc_moe"] - split["off_moe"]) * cell_a["kept_moe"]
                + split["rc_inputs"] * cell_a["input"])
    per_cell_host = split["off_dense"] * cell_a["host_dense"] + split["off_moe"] * cell_a["host_moe"]
    out = []
    for total, x in ((held, per_cell), (host, per_cell_host)):
        uneven = np.flatnonzero((fc.chunks > 1) & (fc.stage_max(x) != fc.stage_min(x)))
        if len(uneven):
            total = np.array(total, dtype=float, copy=True)
            total[uneven] = fc.held_peak(x, uneven)
        out.append(total)
    return out[0], out[1]



def _recompute_buffer(fc: StageCells, split, a: dict, group, busy) -> np.ndarray:
    """Per stage of ``fc``, bytes recomputation brings back at the stage's backward, beyond what
    it keeps:

    * a layer that recomputes selected operations materialises them again during its backward:
      its full activations less what it kept (the first layer a backward reaches is one of these
      unless the chunk recomputes every layer);
    * a fully recomputed layer (``uniform``: its group of layers) materialises its full
      activations less its input (stored already), less what the same micro-batch's layers of
      that chunk that keep their activations have freed by then (their backward runs first, the
      recomputed layers being the chunk's first).

    The larger of the two, over the stage's chunks. With nothing recomputed in full or offloaded
    (``busy`` false) that is the selected operations of one layer of each kind the stage holds."""
    sel = np.maximum(np.where(fc.stage["stage_dense"] > 0, a["full_dense"] - a["kept_dense"], 0.0),
                     np.where(fc.stage["stage_moe"] > 0, a["full_moe"] - a["kept_moe"], 0.0))
    sel = np.maximum(sel, 0.0)
    if split is None or not busy.any():
        return sel
    # the stages with a layer recomputed in full or offloaded, chunk by chunk (on the others the
    # chunk-by-chunk maximum is the stage's ``sel``)
    pos = np.flatnonzero(busy)
    counts = np.diff(np.append(fc.first_cell, len(fc.cell_stage)))
    cells = ranges(fc.first_cell[pos], counts[pos]) if len(pos) < len(fc) else slice(None)
    cell_stage = np.repeat(pos, counts[pos])
    c = {k: a[k][cell_stage] for k in ("full_dense", "full_moe", "kept_dense", "kept_moe", "input")}
    rc_d, rc_m = split["rc_dense"][cells], split["rc_moe"][cells]
    full = np.maximum(np.where(rc_d > 0, c["full_dense"], 0.0), np.where(rc_m > 0, c["full_moe"], 0.0))
    kept_d = fc.cell["dense"][cells] - rc_d - split["off_dense"][cells]
    kept_m = fc.cell["moe"][cells] - rc_m - split["off_moe"][cells]
    kept = kept_d * c["kept_dense"] + kept_m * c["kept_moe"]
    rc_need = np.where(rc_d + rc_m > 0, np.maximum(group[cell_stage] * full - c["input"] - kept, 0.0), 0.0)
    sel_need = np.maximum(np.where(kept_d > 0, c["full_dense"] - c["kept_dense"], 0.0),
                          np.where(kept_m > 0, c["full_moe"] - c["kept_moe"], 0.0))
    per_cell = np.maximum(rc_need, np.maximum(sel_need, 0.0))
    out = np.array(sel, copy=True)
    out[pos] = np.maximum.reduceat(per_cell, np.cumsum(counts[pos]) - counts[pos])
    return out



#: ``dynamic_parts``' outputs, in the order ``shared_dynamic``'s store holds them
_DYNAMIC = ("activations_bytes", "recompute_buffers_bytes", "offload_buffers_bytes", "host")
#: largest (stage, count) key space ``shared_dynamic`` memoises (its index, 4 bytes a key, is
#: allocated zeroed and touched only where keys fall)
MEMO_MAX_KEYS = 16_000_000


def shared_dynamic(prefix, prm: dict, cells: StageCells, ctx, rows, shared):
    """``dynamic(pos, counts_key, counts)``: the dynamic parts of the stages ``pos`` (of the
    batch's stages) with ``counts`` (``split_cells``'s ``stage_rc`` or ``offload``, per stage),
    evaluated once per distinct (shared stage, count) on the distinct rows' stages ``cells``
    (their rows: batch rows ``rows``, split inputs ``prm``); ``shared``: per stage, the stage of
    ``cells`` whose dynamic parts it shares (every input of those is the same).

    A (shared stage, count) pair's parts are a function of that pair alone (every operation is
    per stage), so they are memoised across calls: the memory search's probes revisit many
    pairs (on DeepSeek-V3 over 1,024-1,536 GPUs 45% of each probe's distinct pairs were
    evaluated by an earlier probe). The memo's index is direct-addressed by ``count *
    len(cells) + stage`` (counts at most ``top``, the largest chunk of ``cells``), so a probe
    needs no hash table either; ``keys``: the parts wanted (the search's probes need no
    ``host``); without the memo (a key space over ``MEMO_MAX_KEYS``, or counts that are not
    whole numbers in [0, top]) each call evaluates its distinct pairs afresh."""
    n_cells = len(cells)
    top = int(np.max(cells.cell["dense"] + cells.cell["moe"])) if n_cells else 0
    span = top + 1
    # counts_key -> [index (1 + place in the store; 0: not yet), store (place, part), places filled]
    memo: dict = {}

    def evaluate(stages, counts_key, counts):
        sub = cells.take(stages)
        return dynamic_parts(ctx, rows[sub.row], sub, split_cells(prefix, prm, sub, **{counts_key: counts}))

    def memoised(pos, counts_key, whole, keys):
        # count-major: a probe's counts (``whole``: int64) fall in a narrow range, so its lookups
        # stay in a few stretches of the index
        key = whole * n_cells + shared[pos]
        if counts_key not in memo:
            memo[counts_key] = [np.zeros(n_cells * span, dtype=np.int32), np.zeros((0, len(_DYNAMIC))), 0]
        entry = memo[counts_key]
        index = entry[0]
        at = index[key]
        unseen = at == 0
        if unseen.any():
            missing = key[unseen]
            # one occurrence per distinct missing key (the last write of a key wins), no hash table
            mark = -np.arange(1, len(missing) + 1, dtype=np.int32)
            index[missing] = mark
            new = missing[index[missing] == mark]
            known = entry[2]
            index[new] = np.arange(known + 1, known + len(new) + 1, dtype=np.int32)
            part = evaluate(new % n_cells, counts_key, (new // n_cells).astype(float))
            if known + len(new) > entry[1].shape[0]:
                # the store grows by doubling: each part is copied in once, not the whole store
                grown = np.empty((max(2 * entry[1].shape[0], known + len(new)), len(_DYNAMIC)))
                grown[:known] = entry[1][:known]
                entry[1] = grown
            for j, k in enumerate(_DYNAMIC):
                entry[1][known:known + len(new), j] = part[k]
            entry[2] = known + len(new)
            at[unseen] = index[missing]
        at -= 1
        # a key's parts lie side by side in the store: one gather of whole rows (one cache line
        # a key, where a gather per part reads one each)
        found = np.take(entry[1], at, axis=0)
        return {k: found[:, j] for j, k in enumerate(_DYNAMIC) if k in keys}

    def dynamic(pos, counts_key, counts, keys=_DYNAMIC):
        counts = np.asarray(counts, dtype=float)
        with np.errstate(invalid="ignore"):          # a NaN or inf count is not whole: no memo
            whole = counts.astype(np.int64)
        if len(pos) and (whole == counts).all() and whole.min() >= 0:
            if n_cells * span <= MEMO_MAX_KEYS and whole.max() <= top:
                return memoised(pos, counts_key, whole, keys)
            key = shared[pos] * (int(counts.max()) + 1) + counts.astype(np.int64)
            # (a hash table: a sort of the keys cost more than the parts it saves)
            inverse, distinct = pd.factorize(key)
            first = np.empty(len(distinct), dtype=np.int64)
            first[inverse[::-1]] = np.arange(len(key) - 1, -1, -1)    # each key's first stage
        else:
            first, inverse = np.arange(len(pos)), slice(None)
        part = evaluate(shared[pos[first]], counts_key, counts[first])
        return {k: x[inverse] for k, x in part.items()}

    return dynamic
