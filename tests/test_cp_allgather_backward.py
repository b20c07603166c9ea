"""What all-gather CP's backward has of K/V (``training.cp_allgather_backward``), by hand.

Regather (Transformer Engine ``AttnFuncWithCPAndKVAllGather``; torch's SDPA context_parallel,
torchtitan 0.2): backward all-gathers K/V again. Saved (torch ``flex_cp_allgather`` before
FlexAttention, torchtitan 0.3): the gathered K/V stay an activation, backward only
reduce-scatters dK/dV. Toy cluster as ``test_cp_allgather``: every collective bytes / bandwidth.
"""
from __future__ import annotations

import pytest

from cost_models import context_parallel as cpm
from hardware_specs.catalog import load_stack
from hardware_specs.errors import InputError
from hardware_specs.stack_spec import TrainingBehaviour
from model_specs import load_model

from toy_hardware import NVLINK, toy_cluster, toy_efficiency

MIB = 2**20


@pytest.fixture(scope="module")
def toy():
    return toy_cluster(), toy_efficiency()


def test_saved_backward_only_reduce_scatters_and_keeps_cp_times_the_local_kv(toy):
    cl, eff = toy
    # Llama 3 8B, tp 2, seq 8192 over cp 4: 2048 x 4 heads x 256 x 2 B = 4 MiB local K/V, 16 MiB
    # gathered; a ring all-gather / reduce-scatter of 16 MiB moves 12 MiB: 12 MiB / 400 GB/s each
    step = cpm.ring_attention_step_bytes(load_model("llama3-8b"), 2048, tp=2)
    one = 12 * MIB / NVLINK
    assert cpm.allgather_attention_time_s(step, 4, 2, cl, eff, saves_kv=False) == pytest.approx((one, 2 * one))
    assert cpm.allgather_attention_time_s(step, 4, 2, cl, eff, saves_kv=True) == pytest.approx((one, one))
    # saved: 16 MiB a layer kept to its backward; the transient is the 16 MiB dK/dV alone
    assert cpm.allgather_saved_kv_bytes(step, 4, True) == 16 * MIB
    assert cpm.allgather_saved_kv_bytes(step, 4, False) == 0
    assert cpm.allgather_buffer_bytes(step, 4, True) == 16 * MIB
    assert cpm.allgather_buffer_bytes(step, 4, False) == 32 * MIB
    m = load_model("llama3-8b")
    args = dict(tokens_local=2048, cp=4, tp=2, core_fwd_s=1e-3, core_bwd_s=2e-3, cluster=cl, eff=eff)
    saved = cpm.context_parallel_costs(m, "allgather", allgather_saves_kv=True, **args)
    regather = cpm.context_parallel_costs(m, "allgather", **args)
    assert saved["bwd_exposed_s"] == pytest.approx(one) and regather["bwd_exposed_s"] == pytest.approx(2 * one)
    # a recomputed core attention alone gathers again where backward regathers (it saved only
    # the local K/V), not where the gathered K/V were saved; a layer recomputed in full gathers
    # again in either case (its forward's exposed gather once more: layer_times)
    assert saved["core_attn_recompute_s"] == 0 and regather["core_attn_recompute_s"] == pytest.approx(one)
    assert saved["fwd_exposed_s"] == pytest.approx(one) and regather["fwd_exposed_s"] == pytest.approx(one)


def test_simulate_saved_holds_the_gathered_kv_of_every_layer_and_drops_a_backward_gather():
    from paraplan import api
    run = lambda saves, rc: api.simulate("llama3-8b", "dgx-h100", gpus=8, tp=2, cp=4, cp_kind="allgather",  # noqa: E731
                                         cp_allgather_saves_kv=saves, recompute=rc, global_batch=2,
                                         micro_batch=1, stack="torchtitan").iloc[0]
    s, r = run(True, "none"), run(False, "none")
    # one micro-batch in flight, 32 layers x 16 MiB kept; the transient (32 MiB regathering, 16
    # saved) is the layer computing's and hides under the logits the loss frees first (pp 1)
    assert (s["activations_gib"] - r["activations_gib"]) * 2**30 == pytest.approx(32 * 16 * MIB)
    assert s["recompute_buffers_gib"] == r["recompute_buffers_gib"] == 0.0
    # 2 micro-batches x 32 layers: the forward gather, then backward gather + reduce-scatter (equal
    # bytes, both ring collectives over the same group): saved exposes 2 of regather's 3
    assert s["cp_comm_exposed_s"] == pytest.approx(2 / 3 * r["cp_comm_exposed_s"])
    # full recomputation: the recomputed forward gathers again in both (memory as regather);
    # saved then runs gather, gather, reduce-scatter (3 units) where regather runs 4
    sf, rf = run(True, "full"), run(False, "full")
    assert sf["cp_comm_exposed_s"] == pytest.approx(3 / 4 * rf["cp_comm_exposed_s"])
    assert sf["step_time_s"] < rf["step_time_s"]
    assert sf["activations_gib"] + sf["recompute_buffers_gib"] == pytest.approx(
        rf["activations_gib"] + rf["recompute_buffers_gib"])


def test_stacks_state_what_their_backward_does_with_the_source():
    for name in ("torchtitan", "torchtitan-compile"):
        st = load_stack(name)
        assert st.training.cp_allgather_backward == "regather"
        assert "_templated_ring_attention_backward" in st.citations["training.cp_allgather_backward"]
    for name in ("megatron-core", "nemo-24.09", "megatron-bridge"):
        st = load_stack(name)
        assert st.training.cp_allgather_backward == "regather"
        assert "context_parallel.py" in st.citations["training.cp_allgather_backward"]
    with pytest.raises(InputError):
        TrainingBehaviour(cp_allgather_backward="kept")
