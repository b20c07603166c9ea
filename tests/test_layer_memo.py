"""``simulator.layer_memo``: each distinct layer key is evaluated once a process."""
import numpy as np

from simulator import layer_memo


class _Counted:
    """A row-wise stand-in for ``layer_times``: out = 2 * tokens + tp, and the rows it saw."""

    def __init__(self):
        self.rows = []

    def __call__(self, model, cluster, eff, rates, tokens, tp, flag):
        tokens = np.asarray(tokens, dtype=float)
        self.rows.append(len(tokens))
        return {"f": 2.0 * tokens + np.asarray(tp), "const": 7.0}


def test_a_key_seen_before_is_not_evaluated_again_and_outputs_match():
    layer_memo.clear()
    fn, ctx = _Counted(), (object(), object(), object(), "rates")
    out = layer_memo.remembered(fn, *ctx, np.array([4096.0, 2048.0]), np.array([2.0, 4.0]), True)
    # 2 x 4096 + 2 = 8194, 2 x 2048 + 4 = 4100; the scalar output spread to every row
    assert out["f"].tolist() == [8194.0, 4100.0] and out["const"].tolist() == [7.0, 7.0]
    # (2048, 4) was seen; (1024, 8) is new, twice in this call: evaluated once, one row
    out = layer_memo.remembered(fn, *ctx, np.array([2048.0, 1024.0, 1024.0]), np.array([4.0, 8.0, 8.0]), True)
    assert out["f"].tolist() == [4100.0, 2056.0, 2056.0]
    assert fn.rows == [2, 1]


def test_another_context_or_flag_is_another_key():
    layer_memo.clear()
    fn = _Counted()
    model, cluster, eff = object(), object(), object()
    layer_memo.remembered(fn, model, cluster, eff, "bf16", np.array([1.0]), np.array([1.0]), True)
    layer_memo.remembered(fn, model, cluster, eff, "fp8", np.array([1.0]), np.array([1.0]), True)
    layer_memo.remembered(fn, model, cluster, eff, "fp8", np.array([1.0]), np.array([1.0]), False)
    assert fn.rows == [1, 1, 1]
    layer_memo.clear()


def test_the_memo_starts_afresh_past_its_size(monkeypatch):
    layer_memo.clear()
    monkeypatch.setattr(layer_memo, "MAX_KEYS", 2)
    fn, ctx = _Counted(), (object(), object(), object(), "rates")
    layer_memo.remembered(fn, *ctx, np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0]), True)
    # 3 keys > 2: a new context clears the memo, so the first context's keys are evaluated again
    layer_memo.remembered(fn, object(), object(), object(), "rates", np.array([1.0]), np.array([1.0]), True)
    layer_memo.remembered(fn, *ctx, np.array([1.0]), np.array([1.0]), True)
    assert fn.rows == [3, 1, 1]
    layer_memo.clear()
