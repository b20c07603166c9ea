"""Serving traffic on the links it really crosses: expert slices under attention DP, the KV
cache's receiving side and the NVLink domains a disaggregated deployment spans, pipeline
hand-offs between domains. Values derived by hand in each test."""
import numpy as np
import pytest

from cost_models.inference_comm import all_to_all_time_s, kv_transfer_time_s, link_rates
from cost_models.inference_layers import ACT_BYTES
from cost_models.inference_step import layer_collectives, pipeline_domain_crossings
from hardware_specs.catalog import load_cluster, load_serving_efficiency, load_stack
from model_specs.catalog import load_model
from paraplan.serving_api import serve_sweep
from simulator.serving.deployment import Deployment, WorkerLayout
from simulator.serving.disaggregated import kv_same_domain_share
from simulator.serving.simulate import simulate_serving


def _moe_comm(model_name, moe_tp, moe_ep, tokens=64.0, adp=8.0):
    model = load_model(model_name)
    cluster = load_cluster("hgx-h200")
    eff = load_serving_efficiency(cluster.gpu.generation)
    beh = load_stack("sglang-0.5").serving
    comm, _ = layer_collectives(model, cluster, eff, beh, tokens, 1.0, adp, moe_ep, 0.0, 1.0, moe_tp)
    return float(comm), model, cluster, eff


@pytest.mark.parametrize("moe_tp, moe_ep", [(8, 1), (2, 4), (4, 2)])
def test_a_token_reaches_every_gpu_holding_a_slice_of_its_experts(moe_tp, moe_ep):
    # DeepSeek-R1 routes a token to 8 experts; over 8 attention-DP ranks an expert cut in moe_tp
    # slices needs the token on min(8, moe_ep) groups x moe_tp slices = all 8 GPUs, as with ep 8
    split, model, cluster, eff = _moe_comm("deepseek-r1", moe_tp, moe_ep)
    ep8, *_ = _moe_comm("deepseek-r1", 1, 8)
    assert split == pytest.approx(ep8, rel=1e-12)
    # by hand: dispatch + combine, each GPU sending 64 tokens x 8 copies x 7168 x 2 B, 7/8 of it off-GPU
    by_hand = 2.0 * float(all_to_all_time_s(64 * 8 * model.hidden_size * ACT_BYTES, 8.0, cluster, eff))
    assert split == pytest.approx(by_hand, rel=1e-12)


def test_a_top_two_token_reaches_two_groups_of_slices():
    # Mixtral routes to 2 experts: with moe_tp 2 x moe_ep 4 a token reaches 2 groups x 2 slices
    # = 4 of the 8 GPUs; with moe_ep 8 only 2
    split, model, cluster, eff = _moe_comm("mixtral-8x7b", 2, 4)
    ep8, *_ = _moe_comm("mixtral-8x7b", 1, 8)
    payload = 64 * model.hidden_size * ACT_BYTES
    assert split == pytest.approx(2.0 * float(all_to_all_time_s(4 * payload, 8.0, cluster, eff)), rel=1e-12)
    assert ep8 == pytest.approx(2.0 * float(all_to_all_time_s(2 * payload, 8.0, cluster, eff)), rel=1e-12)


def test_the_side_with_fewer_gpus_sets_the_kv_transfer_rate():
    cluster = load_cluster("dgx-h100")
    eff = load_serving_efficiency(cluster.gpu.generation)
    _, _, bw_nic, lat_nic = link_rates(cluster, eff)
    size = 4.29e9          # Llama-3.1-8B, 32,768 tokens of 16-bit KV: 32 x 2 x 8 x 128 x 2 B a token
    one_nic = size / bw_nic + lat_nic
    assert float(kv_transfer_time_s(size, 8, False, cluster, eff, receiver_gpus=1)) == pytest.approx(one_nic)
    assert float(kv_transfer_time_s(size, 1, False, cluster, eff, receiver_gpus=8)) == pytest.approx(one_nic)
    assert float(kv_transfer_time_s(size, 8, False, cluster, eff, receiver_gpus=8)) == pytest.approx(
        size / (8 * bw_nic) + lat_nic)


def _disagg(prefill_tp, decode_tp, prefill_workers=1, system="dgx-h100", model="llama3.1-8b"):
    dep = Deployment(model=model, system=system, backend="vllm", mode="disagg", isl=32768, osl=256,
                     dense_format="bf16", expert_format="bf16", kv_cache_dtype="bf16",
                     prefill=WorkerLayout(tp=prefill_tp, batch=1, where="prefill"), prefill_workers=prefill_workers,
                     decode=WorkerLayout(tp=decode_tp, batch=8, where="decode"), decode_workers=1)
    return simulate_serving(dep).extra["kv_transfer_s"]


def test_a_kv_cache_moves_no_faster_from_eight_gpus_to_one_than_from_one_to_eight():
    # 9 GPUs on 8-GPU nodes: over the NICs either way, through the single GPU's NIC
    assert _disagg(8, 1) == pytest.approx(_disagg(1, 8), rel=1e-12)


@pytest.mark.parametrize("pre, dec, p_workers, d_workers, share", [
    (4, 4, 1, 1, 1.0),          # the whole deployment in one 8-GPU domain
    (2, 2, 2, 2, 1.0),          # 8 GPUs: still one domain
    (8, 8, 1, 1, 0.0),          # a worker fills a domain: the pair cannot share one
    (4, 4, 3, 1, 1.0 / 3.0),    # 16 GPUs: 4 of the 12 others sit beside a prefill worker
    (2, 4, 3, 2, 4.0 / 10.0),   # 14 GPUs: a decode worker's domain holds 4 of the 10 others
    (1, 4, 12, 1, 1.0 / 3.0),   # 16 GPUs: 4 of the 12 one-GPU prefill workers beside the decode worker
    (2, 6, 3, 1, 1.0 / 3.0),    # 12 GPUs: one of the three prefill workers fits beside it
])
def test_the_share_of_kv_transfers_inside_a_domain_follows_the_deployment(pre, dec, p_workers, d_workers, share):
    assert float(kv_same_domain_share(pre, dec, p_workers, d_workers, 8)) == pytest.approx(share)


def test_three_prefill_workers_beside_one_decode_worker_mostly_cross_the_nics():
    # dgx-h100, tp 4 each: one prefill worker's transfers in three share a node with the decode
    # worker (NVLink), the others cross the NICs
    cluster = load_cluster("dgx-h100")
    eff = load_serving_efficiency(cluster.gpu.generation)
    size = 32768 * 80 * 2 * 8 * 128 * 2        # Llama-3.1-70B, 16-bit KV
    inside = float(kv_transfer_time_s(size, 4, True, cluster, eff))
    outside = float(kv_transfer_time_s(size, 4, False, cluster, eff))
    got = _disagg(4, 4, prefill_workers=3, model="llama3.1-70b")
    assert got == pytest.approx(inside / 3 + 2 * outside / 3, rel=1e-9)
    assert _disagg(4, 4, prefill_workers=1, model="llama3.1-70b") == pytest.approx(inside, rel=1e-9)


@pytest.mark.parametrize("stage, pp, crossings", [
    (4, 4, 2),      # two stages a node, two nodes: node 0 -> 1 and back
    (4, 2, 0),      # both stages in one node
    (8, 2, 2),      # a stage per node
    (2, 8, 2),      # four stages a node
    (16, 3, 3),     # a stage spans two nodes: every hand-off leaves one
    (4, 1, 0),
])
def test_pipeline_hand_offs_leave_a_domain_once_per_domain_the_pipeline_spans(stage, pp, crossings):
    assert float(pipeline_domain_crossings(stage, pp, 8)) == crossings


def test_a_pipeline_over_two_nodes_feels_the_nic():
    # tp 4 x pp 4 on 8-GPU nodes: two hand-offs a round leave the node, so a slower NIC slows
    # the step and a faster one speeds it (the model priced them all on NVLink before)
    out = serve_sweep(dict(model="llama3.1-70b", system="dgx-h100", tp=4, pp=4, batch=64, isl=8192, osl=256),
                      "scaleout_gbit_per_s", [10, 400, 10000])
    tpot = out["tpot_ms"].to_numpy()
    assert tpot[0] > tpot[1] > tpot[2]
    assert np.all(np.isfinite(tpot))


def test_with_every_stage_busy_each_stage_sends_all_its_micro_batches_over_its_own_link():
    # Llama-3.1-70B, tp 4 x pp 4 on 8-GPU nodes, 64 requests: 4 micro-batches of 16 a round; the
    # stages whose link leaves the node send all 4 over the NIC (4 NIC hand-offs a round, not the
    # 2 NIC + 2 NVLink of one request's path), the layers' collectives as at pp 1 (80 = 4 x 20)
    from cost_models.inference_comm import p2p_time_s
    from cost_models.inference_step import step_time
    model = load_model("llama3.1-70b")
    cluster = load_cluster("dgx-h100")
    eff = load_serving_efficiency(cluster.gpu.generation)
    beh = load_stack("vllm-0.14").serving
    out = step_time(model, cluster, eff, beh, "fp8", "fp8", 1.0, 4.0, 1.0, 4.0, 1.0, 1.0, 0.0, 0.0, 64.0, 2048.0)
    layers, _ = layer_collectives(model, cluster, eff, beh, 16.0, 4.0, 1.0, 1.0, 80.0, 0.0)
    nic = float(p2p_time_s(16 * model.hidden_size * ACT_BYTES, True, cluster, eff))
    assert float(out["comm_s"]) == pytest.approx(float(layers) + 4 * nic, rel=1e-12)
