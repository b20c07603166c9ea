"""A capacity factor c caps the busiest rank's rows everywhere, not only in the expert GEMMs.

GShard (Lepikhin et al. 2020, section 2.2): senders drop the rows beyond c x mean per expert
*before* the dispatch, so the busiest EP rank receives, keeps and sends back at most
``min(imbalance, c)`` times the mean (``moe.capped_rank_imbalance``).

Hand count, Mixtral 8x7B (h 4096, 8 experts, top-2), one micro-batch of 4,096 tokens,
tp = cp = etp = 1, ep 8, imbalance 2: routed = 4,096, mean rows 8,192. Dropless the busiest rank
receives 16,384 rows; with c = 1 it receives 8,192 (the mean), with c = 1.5 12,288.
Dispatch buffers (sent + received rows) x 4,096 x 2 bytes: dropless (8,192 + 16,384) x 8,192 =
201,326,592; c = 1: (8,192 + 8,192) x 8,192 = 134,217,728; c = 1.5: 167,772,160.
Dispatched input kept for fc1's weight gradient: rows x 4,096 x 2 bytes (the other terms at
rows x (2 x 14,336 + 14,336) x 2 bytes), so c = 1 keeps half the row terms of dropless at
imbalance 2.
"""
import dataclasses

import numpy as np
import pytest

from cost_models import moe
from hardware_specs.catalog import load_cluster, load_efficiency
from model_specs.catalog import load_model
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate

MIXTRAL = load_model("mixtral-8x7b").with_seq_len(4096)


def with_capacity(c):
    return dataclasses.replace(MIXTRAL, moe=dataclasses.replace(MIXTRAL.moe, capacity_factor=c))


def test_capped_rank_imbalance():
    assert float(moe.capped_rank_imbalance(2.0, 8, 0.0)) == 2.0
    assert float(moe.capped_rank_imbalance(2.0, 8, 1.0)) == 1.0
    assert float(moe.capped_rank_imbalance(2.0, 8, 1.5)) == 1.5
    assert float(moe.capped_rank_imbalance(1.2, 8, 1.5)) == 1.2
    assert float(moe.capped_rank_imbalance(2.0, 1, 1.5)) == 1.0     # all experts local


@pytest.mark.parametrize("c, expected", [(0.0, 201_326_592), (1.0, 134_217_728), (1.5, 167_772_160)])
def test_dispatch_buffer_is_capped(c, expected):
    assert float(moe.moe_dispatch_buffer_bytes(with_capacity(c), 1, 4096, 1, 1, 1, 2.0, 8)) == expected


def test_kept_rows_are_capped():
    rows_bytes = 4_096 * 2 + 2 * 14_336 * 2 + 14_336 * 2       # per row: input, fc1 output, act output
    drop = float(moe.moe_activation_bytes_per_layer(with_capacity(0.0), 1, 4096, 1, 1, 8, 1, 0, 2.0))
    capped = float(moe.moe_activation_bytes_per_layer(with_capacity(1.0), 1, 4096, 1, 1, 8, 1, 0, 2.0))
    assert drop - capped == (16_384 - 8_192) * rows_bytes


def test_all_to_all_volume_is_capped():
    cluster, eff = load_cluster("dgx-h100"), load_efficiency("hopper")
    buf = float(moe.moe_dispatch_bytes(4096, 2, 4096, 2))
    mean = moe.moe_all_to_all_time_s(buf, 8, 1, cluster, eff, load_imbalance=1.0)
    capped = moe.moe_all_to_all_time_s(buf, 8, 1, cluster, eff, load_imbalance=2.0, capacity_factor=1.0)
    dropless = moe.moe_all_to_all_time_s(buf, 8, 1, cluster, eff, load_imbalance=2.0)
    assert float(capped["fwd_s"]) == float(mean["fwd_s"])
    assert float(dropless["fwd_s"]) > float(capped["fwd_s"])


def test_simulate_at_capacity_one_ignores_imbalance_beyond_it():
    """c = 1: imbalance 2 drops every row beyond the mean, so the step equals the balanced one."""
    cluster = load_cluster("dgx-h100")
    m = with_capacity(1.0)

    def run(imb):
        config = ParallelConfig(dp=16, ep=8, pp=4, micro_batch=1, global_batch=256, zero_stage=1,
                                recompute="full", moe_load_imbalance=imb)
        return simulate(m, cluster, config)
    one, two = run(1.0), run(2.0)
    assert two.step_time_s == one.step_time_s
    assert two.time_breakdown_s == one.time_breakdown_s
    assert two.stage_memory[0]["parts_bytes"] == one.stage_memory[0]["parts_bytes"]
