"""Pipeline sends on the real placement and under the interleaved schedule's overlap.

* ``topology.p2p_stage_time_s``: the stages of a pipeline sit one after the other from a node's
  first GPU, ``stride`` ranks apart; the slowest boundary sets the send, so it is an NVLink
  transfer only when all stride x stages ranks share one node.
* ``step_pipeline.exposed_sends``: with Megatron-LM's ``overlap_p2p_comm`` (the stack's
  ``pipeline_p2p_overlap``) an interleaved stage's send runs while its next chunk computes, so
  only what it takes beyond the chunk's pass shows; 1F1B pays it whole.
"""
import numpy as np
import pytest

from cost_models.topology import p2p_stage_time_s, tier_bandwidths
from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from paraplan import api
from simulator.step_pipeline import exposed_sends

CLUSTER = load_cluster("dgx-h100")
EFF = efficiency_for_cluster(CLUSTER)


def _hand(nbytes, tier):
    bw_i, lat_i, bw_o, lat_o = tier_bandwidths(CLUSTER, EFF)
    frac = EFF.collective_fraction("p2p")
    return nbytes / (bw_i * frac) + lat_i if tier == "nvlink" else nbytes / (bw_o * frac) + lat_o


def test_a_pipeline_that_outgrows_its_node_sends_over_the_nic_even_with_a_stride_below_the_node():
    nbytes = 2048 * 4096 * 2.0                      # one micro-batch of gpt3-6.7b, 16-bit, tp 1
    # 8 stages one GPU apart fill one 8-GPU node: NVLink
    assert float(p2p_stage_time_s(nbytes, 1, 8, CLUSTER, EFF)) == pytest.approx(_hand(nbytes, "nvlink"), rel=1e-12)
    # 16 stages one GPU apart: stage 7 -> 8 crosses nodes (the model had priced it NVLink)
    assert float(p2p_stage_time_s(nbytes, 1, 16, CLUSTER, EFF)) == pytest.approx(_hand(nbytes, "nic"), rel=1e-12)
    # tp 4, pp 4 on two nodes: stage 1 -> 2 (ranks 4-7 -> 8-11) crosses; tp 4, pp 2 does not
    assert float(p2p_stage_time_s(nbytes / 4, 4, 4, CLUSTER, EFF)) == pytest.approx(_hand(nbytes / 4, "nic"), rel=1e-12)
    assert float(p2p_stage_time_s(nbytes / 4, 4, 2, CLUSTER, EFF)) == pytest.approx(_hand(nbytes / 4, "nvlink"),
                                                                                   rel=1e-12)
    # simulate prices the send of gpt3-6.7b on 16 H100 at pp 16 over the NIC: ~0.40 ms, not 50 us
    report, _, _ = api.simulate_report("gpt3-6.7b", "dgx-h100", gpus=16, pp=16, global_batch=64)
    assert report.extras["p2p_per_microbatch_s"] == pytest.approx(_hand(nbytes, "nic"), rel=1e-9)
    assert report.extras["p2p_per_microbatch_s"] == pytest.approx(16.78e6 / 42.5e9 + 5e-6, rel=0.01)


def test_an_overlapped_send_shows_only_beyond_its_chunks_pass():
    p2p = np.array([1.0, 1.0, 3.0])
    f, bw = np.array([2.0, 0.5, 2.0]), np.array([4.0, 0.25, 2.5])
    send_f, send_b = exposed_sends(p2p, np.array([1, 1, 1]), f, lambda: bw)
    assert send_f.tolist() == [0.0, 0.5, 1.0] and send_b.tolist() == [0.0, 0.75, 0.5]
    send_f, send_b = exposed_sends(p2p, np.array([0, 0, 0]), f, lambda: bw)      # not overlapped: whole
    assert send_f.tolist() == p2p.tolist() and send_b.tolist() == p2p.tolist()


def test_megatron_core_hides_interleaved_sends_and_a_2022_megatron_pays_them():
    # llama2-13b on 16 H100, tp 1 pp 4 vpp 10 (NeMo 24.07's recipe): each 42 MB send crosses
    # the NIC (~1 ms) under a one-layer chunk of several ms
    run = dict(gpus=16, pp=4, vpp=10, global_batch=128, schedule="interleaved")
    core = api.simulate("llama2-13b", "dgx-h100", stack="megatron-core", **run).iloc[0]
    old = api.simulate("llama2-13b", "dgx-h100", stack="megatron-core", pipeline_p2p_overlap=False, **run).iloc[0]
    assert core.pp_comm_s == 0.0 and old.pp_comm_s > 0.0
    assert core.step_time_s < old.step_time_s
    # 1F1B never overlaps its sends (Megatron turns the overlap off without virtual stages)
    flat = dict(run, vpp=1, schedule="1f1b")
    a = api.simulate("llama2-13b", "dgx-h100", stack="megatron-core", **flat).iloc[0]
    b = api.simulate("llama2-13b", "dgx-h100", stack="megatron-core", pipeline_p2p_overlap=False, **flat).iloc[0]
    assert a.pp_comm_s == b.pp_comm_s > 0.0 and a.step_time_s == b.step_time_s


def test_the_planner_prices_overlapped_sends_as_simulate_does():
    plans = api.plan("llama2-13b", "dgx-h100", 16, global_batch=128, stack="megatron-core",
                     fixed={"pp": 4, "vpp": 10, "tp": 1})
    best = plans.iloc[0]
    again = api.simulate("llama2-13b", "dgx-h100", stack="megatron-core", gpus=16, tp=1, pp=4, vpp=10,
                         global_batch=128, micro_batch=int(best.micro_batch), zero_stage=int(best.zero_stage),
                         recompute=best.recompute, sequence_parallel=bool(best.sequence_parallel),
                         schedule="interleaved", cp=int(best.cp)).iloc[0]
    assert best.step_time_s == again.step_time_s
