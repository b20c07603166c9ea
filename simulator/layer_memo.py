"""``layer_times`` remembered across calls: each distinct layer key is evaluated once a process.

A search calls the step model's per-layer times (``simulator.layer_times.layer_times``) from
its memory phase's floors, its timing and its refinement, each call once per run of equal
layer keys of its rows (``step_model._once_per_run``). On DeepSeek-V3 over 1,024-4,096 H100
(``benchmarks/range_search_speed.py``) a search's ~220 calls evaluated 48,587 runs of only
25,674 distinct keys (docs/search_speed.md, 2026-12-03). ``layer_times`` is row-wise (each
output row is a function of that row's inputs alone), so a key's outputs are the same whichever
batch it comes in: this keeps every key's outputs and evaluates only the keys not seen before.

Keys are the inputs' values as float64 bytes (whole numbers and flags are exact in float64;
two rows share a key only if every input is equal), within a context of the model, cluster,
efficiency model (by identity, held while remembered) and ``ComputeRates`` (by value). A
forked worker starts with its parent's keys.
"""
from __future__ import annotations

import numpy as np

#: keys remembered per process, and contexts, before the memo starts afresh (a key's outputs
#: are ~70 float64: 100,000 keys ~56 MB; a range search over 1,024-4,096 GPUs has ~26,000)
MAX_KEYS = 100_000
MAX_CONTEXTS = 32


class _Table:
    """One context's keys (bytes -> row) and outputs (one growing array per output name)."""

    def __init__(self, pinned: tuple):
        self.pinned = pinned                # the model, cluster and eff the ids refer to
        self.index: dict[bytes, int] = {}
        self.columns: dict[str, np.ndarray] = {}
        self.size = 0

    def store(self, out: dict, n: int) -> bool:
        """Append ``n`` rows of outputs ``out``; False (nothing stored) when their names or
        dtypes are not the table's."""
        values = {k: np.broadcast_to(np.asarray(v), (n,)) for k, v in out.items()}
        if self.columns and (values.keys() != self.columns.keys()
                             or any(values[k].dtype != c.dtype for k, c in self.columns.items())):
            return False
        need = self.size + n
        if not self.columns or need > len(next(iter(self.columns.values()))):
            cap = max(need, 2 * (len(next(iter(self.columns.values()))) if self.columns else 0), 64)
            for k, v in values.items():
                grown = np.empty(cap, dtype=v.dtype)
                if k in self.columns:
                    grown[:self.size] = self.columns[k][:self.size]
                self.columns[k] = grown
        for k, v in values.items():
            self.columns[k][self.size:need] = v
        self.size = need
        return True


_TABLES: dict[tuple, _Table] = {}


def clear() -> None:
    """Forget every remembered key."""
    _TABLES.clear()


def remembered(fn, model, cluster, eff, rates, *args) -> dict:
    """``fn(model, cluster, eff, rates, *args)`` (``layer_times``: a dict of per-row outputs;
    ``args`` arrays of one length or scalars), its rows for keys seen before taken from the
    memo, the others evaluated (once per distinct key) and remembered."""
    n = max((len(a) for a in args if np.ndim(a)), default=1)
    if n == 0:
        return fn(model, cluster, eff, rates, *args)
    context = (id(model), id(cluster), id(eff), rates)
    table = _TABLES.get(context)
    if table is None:
        if len(_TABLES) >= MAX_CONTEXTS or sum(t.size for t in _TABLES.values()) > MAX_KEYS:
            clear()
        table = _TABLES[context] = _Table((model, cluster, eff))
    try:
        keys = np.stack([np.broadcast_to(np.asarray(a, dtype=np.float64), (n,)) for a in args], axis=1)
    except (TypeError, ValueError):         # an input that is not numbers (a name): not remembered
        return fn(model, cluster, eff, rates, *args)
    raw = np.ascontiguousarray(keys).view(np.dtype((np.void, keys.shape[1] * 8))).ravel().tolist()
    index = table.index
    at = np.fromiter((index.get(k, -1) for k in raw), dtype=np.int64, count=n)
    miss = np.flatnonzero(at < 0)
    if len(miss):
        # each missing key once (a call's rows are runs of distinct keys, but a key may recur)
        first_of: dict[bytes, int] = {}
        new = [i for i in miss.tolist() if first_of.setdefault(raw[i], i) == i]
        rows = np.asarray(new, dtype=np.int64)
        out = fn(model, cluster, eff, rates, *(np.asarray(a)[rows] if np.ndim(a) else a for a in args))
        if not table.store(out, len(rows)):
            return fn(model, cluster, eff, rates, *args)
        for j, i in enumerate(new):
            index[raw[i]] = table.size - len(rows) + j
        at[miss] = [index[raw[i]] for i in miss.tolist()]
    return {k: c[at] for k, c in table.columns.items()}
