"""A disaggregated KV transfer carries what the busiest GPU link sends or receives (review
2026-12, bug 4): a decode tp above the KV heads, or MLA's latent on every tp rank, makes every
receiving GPU need a replicated piece, which one unsplit copy over the smaller side's links
understated (Qwen3-235B, tp 4 -> tp 8: 2.47 ms, not 4.93)."""
import pytest

from cost_models.inference_comm import kv_busiest_link_bytes, link_rates
from hardware_specs.catalog import load_cluster, load_serving_efficiency
from simulator.serving.deployment import Deployment, WorkerLayout
from simulator.serving.simulate import simulate_serving

B = 394.3e6


@pytest.mark.parametrize("shards, tp_p, pp_p, tp_d, pp_d, want", [
    (4, 4, 1, 8, 1, B / 2),       # a head a decode GPU (B/4), each prefill GPU sends its head twice (B/2)
    (4, 4, 1, 4, 1, B / 4),       # a head each side: one shard a link
    (8, 8, 1, 1, 1, B),           # distinct shards, 8 -> 1: the single receiver takes all of it
    (8, 1, 1, 8, 1, B),           # 1 -> 8: the single sender sends all of it
    (1, 8, 1, 8, 1, B),           # MLA tp 8 -> tp 8: every decode GPU needs the whole latent
    (1, 1, 1, 8, 1, 8 * B),       # MLA tp 1 -> tp 8: one GPU sends the latent 8 times
    (1, 8, 1, 1, 1, B),           # MLA tp 8 -> tp 1: the replicas share the sending, B/8 each; the receiver B
    (8, 2, 2, 4, 1, B / 4),       # distinct shards over 4 GPUs each side (pp 2 splits the layers)
    (4, 2, 1, 8, 2, B),           # send B x 2 / 2 = B; receive B / (2 x 4) = B/8: the senders bind
])
def test_the_busiest_link_carries_the_larger_of_its_send_and_receive(shards, tp_p, pp_p, tp_d, pp_d, want):
    assert float(kv_busiest_link_bytes(B, shards, tp_p, pp_p, tp_d, pp_d)) == pytest.approx(want, rel=1e-12)


def test_qwen3_235b_from_tp4_to_tp8_moves_two_heads_a_prefill_link():
    # 94 layers x 2 x 4 KV heads x 128 x 1 B (fp8) x 4,096 tokens = 394.3 MB one copy; 4 KV heads
    # on 8 decode GPUs: each prefill GPU's head goes to 2 of them, 197.1 MB a link over the NICs
    dep = Deployment(model="qwen3-235b-a22b", system="hgx-h200", backend="sglang", mode="disagg", isl=4096, osl=512,
                     kv_cache_dtype="fp8",
                     prefill=WorkerLayout(tp=4, moe_ep=4, moe_tp=1, batch=1, where="prefill"), prefill_workers=2,
                     decode=WorkerLayout(tp=8, moe_ep=8, moe_tp=1, batch=32, where="decode"), decode_workers=1)
    copy = 94 * 2 * 4 * 128 * 1.0 * 4096
    assert copy == pytest.approx(394.3e6, rel=1e-3)
    cluster = load_cluster("hgx-h200")
    _, _, bw_nic, lat_nic = link_rates(cluster, load_serving_efficiency(cluster.gpu.generation))
    got = simulate_serving(dep).extra["kv_transfer_s"]
    assert got == pytest.approx(copy / 2 / bw_nic + lat_nic, rel=1e-9)
