"""Rows that share their stages' dynamic parts (``stage_activations.distinct_dynamic_rows``):
equal keys exactly when every column the dynamic parts read is equal, whichever way a column
is keyed (whole numbers packed into one integer, other values hashed); and the memory search's
memo of (stage, count) dynamic parts (``shared_dynamic``) changes no output bit."""
from __future__ import annotations

import numpy as np

from simulator.stage_activations import distinct_dynamic_rows


class _Columns:
    """The columns ``distinct_dynamic_rows`` reads, as a ``ConfigBatch`` holds them."""

    def __init__(self, **cols):
        self.__dict__.update(cols)

    def __len__(self):
        return len(self.pp)


def _batch(**changes):
    n = 7
    cols = dict(schedule=np.ones(n), pp=np.full(n, 4.0), vpp=np.ones(n), first_stage_layers=np.full(n, 15.0),
                last_stage_layers=np.full(n, 16.0), recompute=np.full(n, 2.0), recompute_num_layers=np.zeros(n),
                recompute_layers_decrement=np.zeros(n), recompute_method=np.zeros(n),
                offload_activation_layers=np.zeros(n), global_batch=np.full(n, 8.0), dp=np.full(n, 2.0),
                micro_batch=np.full(n, 2.0))
    for name, (row, value) in changes.items():
        cols[name][row] = value
    return _Columns(**cols), n


def test_rows_share_a_key_exactly_when_every_read_column_is_equal():
    batch, n = _batch(recompute_num_layers=(1, 3.0),        # a packed whole-number column differs
                      first_stage_layers=(5, 3e6),           # too large to pack: hashed, differs
                      dp=(4, 4.0), micro_batch=(4, 1.0),     # 8 / (4 * 1) = 8 / (2 * 2): the same m
                      offload_activation_layers=(6, 0.5))    # not a whole number: hashed, differs
    act = {k: np.full(n, 1.5e9) for k in ("kept_dense", "kept_moe", "input", "full_dense", "full_moe")}
    act["kept_dense"][2] = 1.5e9 + 0.25                     # a float column differs in its fraction
    first, code = distinct_dynamic_rows(batch, act, np.ones(n))
    # rows 0, 3 and 4 equal in every column read; 1, 2, 5 and 6 each differ in one
    assert code.tolist() == [0, 1, 2, 0, 0, 3, 4]
    assert first.tolist() == [0, 1, 2, 5, 6]


def test_constant_columns_give_one_key():
    batch, n = _batch()
    act = {k: np.float64(2.0e9) for k in ("kept_dense", "kept_moe", "input", "full_dense", "full_moe")}
    first, code = distinct_dynamic_rows(batch, act, np.float64(1.0))
    assert code.tolist() == [0] * n and first.tolist() == [0]


def _searched_sample(monkeypatch, memo_keys: int) -> dict:
    """The memory search's outputs on a DeepSeek-V3 sample (1,024-1,032 GPUs: recomputation and
    offload searched) with ``shared_dynamic``'s memo allowed ``memo_keys`` keys (0: none)."""
    from hardware_specs.catalog import efficiency_for_cluster, load_cluster
    from model_specs.catalog import load_model
    from planners.search_space import SearchConstraints, enumerate_space
    from planners.vectorized import config_batch
    from simulator import stage_activations
    from simulator.step_model import memory_parts

    monkeypatch.setattr(stage_activations, "MEMO_MAX_KEYS", memo_keys)
    model, cluster = load_model("deepseek-v3"), load_cluster("dgx-h100")
    space = enumerate_space(model, SearchConstraints(gpus=(1024, 1032), global_batch=4096, max_tp=8))
    rows = np.sort(np.random.default_rng(18).choice(len(space), 3000, replace=False))
    batch = config_batch({k: v[rows] for k, v in space.columns.items()}, "bf16", 4096)
    return memory_parts(model, cluster, efficiency_for_cluster(cluster), batch,
                        fit_limit_bytes=cluster.gpu.hbm_bytes * 0.95)


def test_memoised_search_probes_give_every_output_bit_for_bit(monkeypatch):
    memo = _searched_sample(monkeypatch, 10**9)
    fresh = _searched_sample(monkeypatch, 0)
    # the search chose counts on this sample (both kinds), so the memo was read back
    assert (memo["_recompute_num_layers"] > 0).sum() > 50 and (memo["_offload_activation_layers"] > 0).sum() > 50
    assert memo.keys() == fresh.keys()
    for k in memo:
        assert np.array_equal(np.asarray(memo[k]), np.asarray(fresh[k])), k
