"""The deduplicating dispatcher under DeepSeek-V3's node-limited (group-limited) routing.

DeepSeek-V3 (report sections 2.1.2, 3.2.2; config.json n_group 8, topk_group 4): 256 experts in
8 groups of 32; a token picks 4 groups, then its 8 experts among their 128. At ep 64 on 8-GPU
nodes (stride 1) a GPU holds 4 experts and a node 32: exactly one group. Under uniform routing:

* node: its group is chosen with probability 4/8, then hit unless all 8 experts avoid its 32 of
  the 128: p_node = 1/2 (1 - C(96, 8) / C(128, 8)); NIC copies a token = 7 p_node = 3.1754
  (plain top-k over all 256 experts gave 4.6328, beyond what the routing allows);
* GPU: p_gpu = 1/2 (1 - C(124, 8) / C(128, 8)); NVLink copies = (8 - 1) x 8 x p_gpu;
* a node holding two groups (ep 32, 8 experts a GPU, 64 a node): the number of its groups among
  the 4 is hypergeometric, 15/70, 40/70, 15/70 for 0, 1, 2, and it is missed with probability
  15/70 + 40/70 C(96, 8)/C(128, 8) + 15/70 C(64, 8)/C(128, 8).
"""
from math import comb

import numpy as np
import pytest

from cost_models import moe
from hardware_specs.catalog import load_cluster, load_efficiency


def test_node_limited_volumes_by_hand():
    p_node = 0.5 * (1.0 - comb(96, 8) / comb(128, 8))
    p_gpu = 0.5 * (1.0 - comb(124, 8) / comb(128, 8))
    nvlink, nic = moe.deduplicated_dispatch_volumes(1.0, 256, 8, 64, 1, 8, num_groups=8, group_topk=4)
    assert float(nic) == pytest.approx(7.0 * p_node, rel=1e-12)
    assert float(nic) == pytest.approx(3.1754, abs=1e-4)
    assert float(nvlink) == pytest.approx(7.0 * 8.0 * p_gpu, rel=1e-12)


def test_a_token_reaches_at_most_group_topk_nodes_holding_whole_groups():
    nodes = 8.0 * float(moe.group_limited_hit_probability(256, 8, 32, 8, 4))
    assert nodes <= 4.0
    assert float(moe.deduplicated_dispatch_volumes(1.0, 256, 8, 64, 1, 8, 8, 4)[1]) < 4.0


def test_a_node_holding_two_groups():
    miss = (15 + 40 * comb(96, 8) / comb(128, 8) + 15 * comb(64, 8) / comb(128, 8)) / 70
    assert float(moe.group_limited_hit_probability(256, 8, 64, 8, 4)) == pytest.approx(1.0 - miss, rel=1e-12)


def test_one_group_is_plain_top_k():
    m = np.array([4.0, 32.0])
    assert np.array_equal(moe.group_limited_hit_probability(256, 8, m, 1, 1),
                          moe.destination_hit_probability(256, 8, m))
    assert np.array_equal(moe.group_limited_hit_probability(256, 8, m, 8, 8),
                          moe.destination_hit_probability(256, 8, m))


def test_the_all_to_all_reads_the_groups():
    cluster, eff = load_cluster("dgx-h100"), load_efficiency("hopper")
    buf = float(moe.moe_dispatch_bytes(4096, 8, 7168, 1))
    kw = dict(dedup=True, num_experts=256, top_k=8)
    plain = moe.moe_all_to_all_time_s(buf, 64, 1, cluster, eff, **kw)
    limited = moe.moe_all_to_all_time_s(buf, 64, 1, cluster, eff, num_groups=8, group_topk=4, **kw)
    assert float(limited["dispatch_s"]) < float(plain["dispatch_s"])
