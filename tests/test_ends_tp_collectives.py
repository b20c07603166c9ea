"""The model's ends pay their tensor-parallel collectives, as Megatron-LM runs them.

With tp > 1 the vocabulary-parallel embedding all-reduces its [tokens, h] output (under sequence
parallelism, without a learned position table, reduce-scatters it, and all-gathers the gradient
back); the output layer takes its input through ``copy_to_tensor_model_parallel_region``
(all-reduce of the input gradient in backward), or under sequence parallelism all-gathers it in
forward and re-gathers it + reduce-scatters the input gradient in backward; the loss all-reduces
three [tokens] fp32 statistics (NVIDIA/Megatron-LM@d98e8a64 megatron/core/tensor_parallel/
layers.py, cross_entropy.py; ``simulator.layer_times.ends_tp_collectives``). The expected times
below are the ring formulas on the DGX H100 file's NVLink (450 GB/s x the Hopper scale-up
fraction 0.8, 3 us a hop), each NCCL protocol's line written out, not read from the code.
"""
from __future__ import annotations

import numpy as np
import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs.model_spec import ModelSpec
from simulator.layer_times import ends_tp_collectives
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate

CLUSTER = load_cluster("dgx-h100")
EFF = efficiency_for_cluster(CLUSTER)
LAYERS, H, SEQ, MB = 4, 2048, 2048, 4
TOKENS = MB * SEQ


def _model(position_embedding="none", mtp_layers=0):
    """``paraplan.measure``'s GPT shape (MHA, 4h GELU MLP, untied head)."""
    return ModelSpec(name="ends-gpt", num_layers=LAYERS, hidden_size=H, num_heads=16, num_kv_heads=16,
                     ffn_hidden_size=4 * H, vocab_size=32768, seq_len=SEQ, gated_mlp=False, tied_embeddings=False,
                     position_embedding=position_embedding, attention_dropout=False, hidden_dropout=False,
                     mtp_layers=mtp_layers, source="test")


def ring_all_reduce_s(nbytes, n):
    """NCCL's ring all-reduce on one NVLink node: the least of its three protocols'
    base + 2(n-1) hops + 2(n-1)/n x bytes / bus bandwidth (nccl_protocols' table: LL 6.6 us
    base, 0.6/3.4 of the hop, half the bandwidth capped at 141 GB/s on Hopper; LL128 14 us,
    1.9/3.4, 120/128 of it; Simple 8.4 us, the hop, all of it)."""
    bw = 450e9 * 0.8                      # dgx-h100.yaml NVLink x hopper scaleup_fraction
    hop = 3e-6                            # dgx-h100.yaml scale-up latency
    assert CLUSTER.scaleup.group_bw_bytes_per_s(n) * EFF.scaleup_fraction == pytest.approx(bw)
    assert CLUSTER.scaleup.latency_s == pytest.approx(hop) and EFF.collective_fraction("all_reduce") == 1.0
    steps, share = 2.0 * (n - 1), 2.0 * (n - 1) / n
    lines = (6.6e-6 + steps * hop * 0.6 / 3.4 + share * nbytes / min(bw * 0.5, 141e9),
             14.0e-6 + steps * hop * 1.9 / 3.4 + share * nbytes / (bw * 120 / 128),
             8.4e-6 + steps * hop + share * nbytes / bw)
    return min(lines)


def _step(tp, sp=False, m=2, position_embedding="none", **kw):
    config = ParallelConfig(dp=1, tp=tp, pp=1, micro_batch=MB, global_batch=MB * m, sequence_parallel=sp,
                            dtype="bf16", schedule="1f1b", tp_comm_overlap=False, tp_backward_overlap=False,
                            cross_entropy="megatron_unfused", recompute="none", **kw)
    return simulate(_model(position_embedding), CLUSTER, config, n_gpus=tp)


def test_tp2_without_sequence_parallelism_adds_two_activation_all_reduces_and_three_loss_all_reduces():
    """Per micro-batch: 4 activation all-reduces a layer (2 forward, 2 backward), the embedding's
    forward all-reduce, the output layer's input-gradient all-reduce, and the loss's three
    [tokens] fp32 all-reduces; nothing overlaps (``tp_backward_overlap`` off)."""
    ar = ring_all_reduce_s(TOKENS * H * 2, 2)
    small = ring_all_reduce_s(TOKENS * 4, 2)
    m = 2
    layers_only = m * 4 * LAYERS * ar
    expected = m * ((4 * LAYERS + 2) * ar + 3 * small)
    report = _step(2, m=m)
    assert report.extras["tp_comm_total_s"] == pytest.approx(expected, rel=1e-9)
    assert report.time_breakdown_s["tp_comm_exposed_s"] == pytest.approx(expected, rel=1e-9)
    # what the ends add to what the layers alone paid
    assert report.extras["tp_comm_total_s"] - layers_only == pytest.approx(m * (2 * ar + 3 * small), rel=1e-9)
    assert sum(report.time_breakdown_s.values()) == pytest.approx(report.step_time_s, rel=1e-12)


@pytest.mark.parametrize("position_embedding, emb_forward", [("none", 0.5), ("learned", 1.0)])
def test_tp8_with_sequence_parallelism_prices_the_ends_reduce_scatters_and_gathers(position_embedding, emb_forward):
    """Under sequence parallelism (a reduce-scatter or all-gather = half an all-reduce, as the
    layers' pairs): a layer 2 forward + 3 backward all-reduces' worth; the embedding reduce-
    scatters (all-reduces, then splits, with a learned position table) and all-gathers the
    gradient; the output layer all-gathers its input, re-gathers it and reduce-scatters the
    gradient; the loss's three small all-reduces."""
    ar = ring_all_reduce_s(TOKENS * H * 2, 8)
    small = ring_all_reduce_s(TOKENS * 4, 8)
    m = 2
    ends = (emb_forward + 0.5) * ar + (0.5 + 1.0) * ar + 3 * small
    expected = m * (5 * LAYERS * ar + ends)
    report = _step(8, sp=True, m=m, position_embedding=position_embedding)
    assert report.extras["tp_comm_total_s"] == pytest.approx(expected, rel=1e-9)
    assert report.time_breakdown_s["tp_comm_exposed_s"] == pytest.approx(expected, rel=1e-9)


def test_tp1_ends_pay_nothing():
    report = _step(1)
    assert report.extras["tp_comm_total_s"] == 0.0
    assert report.time_breakdown_s["tp_comm_exposed_s"] == 0.0


def test_the_ends_collectives_lengthen_the_step_by_what_they_expose():
    """The step grows by the ends' exposed collectives (pp = 1: every pass is on the one stage),
    and compute stays where it was: the same step at tp 2 with the collectives of the ends
    taken out by hand is the step less m x (2 all-reduces + 3 small ones)."""
    ar = ring_all_reduce_s(TOKENS * H * 2, 2)
    small = ring_all_reduce_s(TOKENS * 4, 2)
    a, b = _step(2, m=2), _step(2, m=3)
    # one more micro-batch adds one more micro-batch's passes: its TP part grows by the
    # layers' 4 L all-reduces and the ends' 2 + 3 small ones
    grow = b.time_breakdown_s["tp_comm_exposed_s"] - a.time_breakdown_s["tp_comm_exposed_s"]
    assert grow == pytest.approx((4 * LAYERS + 2) * ar + 3 * small, rel=1e-9)
    assert (b.time_breakdown_s["compute_s"] - a.time_breakdown_s["compute_s"]) > 0


def test_output_layer_backward_collective_hides_under_its_gradient_gemms_with_async_backward():
    """``tp_backward_overlap``: the output layer's backward collectives (one all-reduce's time)
    run under its data- and weight-gradient GEMMs; what exceeds them stays exposed, as the
    layers' column-parallel linears. The embedding's collectives never hide."""
    t = np.array([10.0, 10.0, 10.0])
    out = ends_tp_collectives(np.array([2, 2, 2]), np.array([False, False, True]), t, np.array([3.0, 3.0, 3.0]),
                              np.array([4.0, 4.0, 4.0]), np.array([True, False, True]), np.array([1.0, 1.0, 1.0]))
    assert out["head_b"].tolist() == [3.0, 10.0, 3.0]          # 10 - 3 - 4, or all of it
    assert out["head_f"].tolist() == [1.0, 1.0, 6.0]           # the loss; + the input's all-gather (SP)
    assert out["emb_f"].tolist() == [10.0, 10.0, 5.0]          # all-reduce; reduce-scatter (SP)
    assert out["emb_b"].tolist() == [0.0, 0.0, 5.0]            # identity; all-gather of the gradient (SP)
    assert out["head_total"].tolist() == [11.0, 11.0, 16.0]
    assert out["emb_total"].tolist() == [10.0, 10.0, 10.0]


def test_mtp_modules_pay_the_shared_output_layers_collectives():
    """An MTP module passes the shared output layer and the loss again: the same collectives."""
    from simulator.config_batch import ConfigBatch
    from simulator.step_model import _layer_times
    from cost_models.compute import compute_rates
    config = ParallelConfig(dp=1, tp=2, pp=1, micro_batch=MB, global_batch=MB, dtype="bf16", recompute="none",
                            tp_backward_overlap=False)
    model = _model(mtp_layers=1)
    batch = ConfigBatch.from_configs([config])
    lay = _layer_times(model, CLUSTER, EFF, compute_rates(CLUSTER.gpu, EFF, "bf16"), batch, np.array([TOKENS]))
    ar = ring_all_reduce_s(TOKENS * H * 2, 2)
    small = ring_all_reduce_s(TOKENS * 4, 2)
    assert lay["mtp_tp_total_s"][0] == pytest.approx(ar + 3 * small, rel=1e-9)
    assert lay["head_tp_total_s"][0] == pytest.approx(ar + 3 * small, rel=1e-9)
    assert lay["emb_tp_total_s"][0] == pytest.approx(ar, rel=1e-9)


def test_planner_rows_match_simulate_with_the_ends_collectives():
    """The planner evaluates the same step model: its tp 2 and tp 8 rows take simulate's step."""
    from planners import plan, row_config
    result = plan(_model(), CLUSTER, 8, 16, dtypes=("bf16",), assign_stages=False, max_plans=None,
                  fixed={"pp": 1})
    rows = result.plans
    checked = 0
    for tp in (2, 8):
        sel = rows[(rows["tp"] == tp) & rows["pipeline_exact"]]
        for _, row in sel.head(2).iterrows():
            report = simulate(_model(), CLUSTER, row_config(row, result.software["bf16"]), n_gpus=8)
            assert row["step_time_s"] == pytest.approx(report.step_time_s, rel=1e-9)
            checked += 1
    assert checked >= 2
