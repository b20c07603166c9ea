"""A recomputed attention forward runs its context-parallel exchange again.

Megatron-Core's selective ``core_attn`` recomputation checkpoints Transformer Engine's whole
DotProductAttention call, whose context-parallel forward (``attn_forward_func_with_cp``) holds
the K/V exchange, and a layer recomputed in full re-runs its whole forward; only all-gather CP
that saved the gathered K/V (torch's ``flex_cp_allgather``, torchtitan 0.3) lets a recomputed
core attention read them instead of gathering again.

Hand count on all-gather CP, where the forward's K/V all-gather, backward's all-gather and
backward's dK/dV reduce-scatter move the same bytes over the same group (one unit each,
``test_cp_allgather_backward``): regathering, no recomputation 2 units a layer (forward 1,
backward 2: 3), full recomputation one more (4): 4/3; saved: 2 units (forward gather, backward
reduce-scatter), full recomputation 3: 3/2, selective core_attn 2 (nothing gathered again).
"""
import pytest

from paraplan import api


def _cp_exposed_s(recompute, saves_kv=False, modules=None, kind="allgather", cp=8):
    extra = {"recompute_modules": modules} if modules else {}
    row = api.simulate("llama3-8b", "dgx-h100", gpus=16, tp=1, cp=cp, seq_len=32768, global_batch=2,
                       micro_batch=1, cp_kind=kind, cp_allgather_saves_kv=saves_kv, recompute=recompute,
                       stack="megatron-core", **extra).iloc[0]
    return row["cp_comm_exposed_s"], row["step_time_s"]


def test_full_recomputation_gathers_again_whether_or_not_backward_regathers():
    none, _ = _cp_exposed_s("none")
    full, _ = _cp_exposed_s("full")
    assert full == pytest.approx(4 / 3 * none)
    none_saved, _ = _cp_exposed_s("none", saves_kv=True)
    full_saved, _ = _cp_exposed_s("full", saves_kv=True)
    assert none_saved == pytest.approx(2 / 3 * none)
    assert full_saved == pytest.approx(3 / 2 * none_saved)


def test_recomputed_core_attention_gathers_again_unless_the_gathered_kv_were_saved():
    none, _ = _cp_exposed_s("none")
    core, _ = _cp_exposed_s("selective", modules="core_attn")
    assert core == pytest.approx(4 / 3 * none)
    none_saved, _ = _cp_exposed_s("none", saves_kv=True)
    core_saved, _ = _cp_exposed_s("selective", saves_kv=True, modules="core_attn")
    assert core_saved == pytest.approx(none_saved)
    # recomputing the layer norms alone runs no attention forward again
    norms, _ = _cp_exposed_s("selective", modules="layernorm")
    assert norms == pytest.approx(none)


@pytest.mark.parametrize("kind,cp", [("ring", 16), ("ulysses", 8)])
def test_the_exchange_repeats_for_every_flavour_and_counts_in_the_step(kind, cp):
    none, step_none = _cp_exposed_s("none", kind=kind, cp=cp)
    full, step_full = _cp_exposed_s("full", kind=kind, cp=cp)
    core, step_core = _cp_exposed_s("selective", modules="core_attn", kind=kind, cp=cp)
    # Ulysses' forward all-to-alls move 4 buffers, backward's 5: full adds about 4/9 (latency
    # terms aside); the ring at cp 16 exposes part of its forward steps, and again when recomputed
    if kind == "ulysses":
        assert full / none == pytest.approx(13 / 9, rel=0.03)
    assert core == pytest.approx(full) and full > 1.2 * none
    assert step_full > step_core > step_none
