"""Hybrid sharded data parallelism (HSDP): a 70B model sharded over 8 ranks and replicated over
32 by hand (bytes and collective volumes), and its two limits: one group is plain ZeRO, groups
of one are plain data parallelism."""
from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models import sharding
from cost_models.topology import group_collective_time_s
from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.step_model import evaluate

P = 70e9
MODEL = load_model("llama3-70b")
CLUSTER = load_cluster("dgx-h100")
EFF = efficiency_for_cluster(CLUSTER)


def test_70b_sharded_over_8_and_replicated_over_32_by_hand():
    t = sharding.hsdp_step_traffic(P, 3, 256, 8, micro_batches=4)
    assert (t["shard"], t["replicas"]) == (8, 32)
    # ZeRO-3 inside the group: all-gather the 16-bit parameters twice per micro-batch (forward and
    # backward), reduce-scatter the fp32 gradients once per micro-batch
    assert t["gather_buffer_bytes"] == 2 * P and t["gathers"] == 8
    assert t["reduce_scatter_buffer_bytes"] == 4 * P and t["reduce_scatters"] == 4
    assert t["wire_bytes_intra"] == pytest.approx((8 * 2 * P + 4 * 4 * P) * 7 / 8)
    # across groups: each rank's 1/8 gradient shard all-reduced over the 32 replicas
    assert t["all_reduce_buffer_bytes"] == pytest.approx(4 * P / 8)
    assert t["wire_bytes_inter"] == pytest.approx(4 * P / 8 * 2 * 31 / 32)


def test_one_group_is_zero3_and_groups_of_one_are_plain_data_parallelism():
    zero3 = sharding.hsdp_step_traffic(P, 3, 256, 256, micro_batches=4)
    assert zero3["all_reduce_buffer_bytes"] == 0 and zero3["wire_bytes_inter"] == 0
    assert zero3["wire_bytes_intra"] == pytest.approx(32 * P * 255 / 256)
    assert sharding.hsdp_step_traffic(P, 3, 256, 0, micro_batches=4) == zero3
    ddp = sharding.hsdp_step_traffic(P, 3, 256, 1, micro_batches=4)
    assert ddp["wire_bytes_intra"] == 0
    assert ddp["wire_bytes_inter"] == pytest.approx(4 * P * 2 * 255 / 256)     # a ring all-reduce


def _eval(**kw):
    base = dict(dp=256, tp=1, pp=1, micro_batch=1, global_batch=1024, zero_stage=3, recompute="full")
    base.update(kw)
    return {k: v[0] for k, v in evaluate(MODEL, CLUSTER, EFF, ConfigBatch.from_configs([ParallelConfig(**base)])).items()}


def test_step_model_memory_and_cross_group_all_reduce_of_hsdp():
    hsdp, full = _eval(zero_shard_group=8), _eval()
    p = hsdp["params_local"]
    assert hsdp["weights_bytes"] == pytest.approx(p * 2 / 8, rel=1e-12)
    assert hsdp["gradients_bytes"] == pytest.approx(p * 4 / 8, rel=1e-12)
    assert hsdp["optimizer_bytes"] == pytest.approx(p * 12 / 8, rel=1e-12)
    assert full["weights_bytes"] == pytest.approx(p * 2 / 256, rel=1e-12)
    # after the flush only the shards' all-reduce across the 32 replicas (stride 8 ranks: a node)
    cross = group_collective_time_s("all_reduce", p * 4 / 8, 32, 8, CLUSTER, EFF)
    assert hsdp["dp_comm_total_s"] == pytest.approx(float(cross), rel=1e-12)
    assert full["dp_comm_total_s"] == 0.0
    # the per-layer gathers stay inside a node (NVLink) instead of crossing 32 nodes
    assert hsdp["zero3_comm_exposed_s"] < full["zero3_comm_exposed_s"]


def test_a_group_of_all_ranks_equals_plain_zero():
    assert _eval(zero_shard_group=256) == pytest.approx(_eval())


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_groups_of_one_rank_equal_plain_data_parallelism(zero):
    hsdp, ddp = _eval(zero_stage=zero, zero_shard_group=1), _eval(zero_stage=0)
    for key in ("memory_bytes", "weights_bytes", "gradients_bytes", "optimizer_bytes", "step_time_s",
                "dp_comm_exposed_s", "zero3_comm_exposed_s", "optimizer_s"):
        assert hsdp[key] == pytest.approx(ddp[key], rel=1e-12), key


def test_a_shard_group_must_divide_the_data_parallel_ranks_and_needs_zero():
    with pytest.raises(InputError) as exc:
        ParallelConfig(dp=12, zero_stage=3, zero_shard_group=8, global_batch=12)
    assert exc.value.field == "zero_shard_group"
    with pytest.raises(InputError) as exc:
        ParallelConfig(dp=16, zero_stage=0, zero_shard_group=8, global_batch=16)
    assert "zero_stage" in exc.value.fix


@pytest.mark.parametrize("dp, cp, tp, ep, etp, expected", [
    (1, 1, 8, 1, 1, 8),     # whole experts on each of the 8 tp ranks: 8 expert-data-parallel ranks
    (1, 1, 8, 1, 8, 1),     # every expert sliced 8 ways (etp 8): one rank holds each slice
    (1, 1, 8, 2, 4, 1),     # ep 2 x etp 4 covers the 8 GPUs: nothing shared
    (2, 1, 8, 1, 4, 4),     # 2 x 8 / 4 expert ranks beat the 2 data-parallel ones
    (4, 2, 1, 8, 1, 8),     # ep 8 over dp x cp = 8: the dense states' 8 ranks
])
def test_largest_zero_group_takes_the_experts_group_with_its_expert_tensor_parallelism(dp, cp, tp, ep, etp,
                                                                                       expected):
    """ZeRO shards a MoE model's expert states over dp * cp * tp / (ep * etp) ranks; with etp the
    experts are sliced over tp ranks, which then hold no common state to shard."""
    assert sharding.largest_zero_group(dp, cp, tp, ep, etp, True) == expected
    # a dense model shards over dp * cp alone
    assert sharding.largest_zero_group(dp, cp, tp, ep, etp, False) == dp * cp


def test_out_of_memory_advice_offers_zero_only_where_it_shards_something():
    """Mixtral 8x7B on 8 H100 at tp 8, dp 1: with etp 1 every tp rank holds the whole experts, so
    ZeRO can shard them over 8 ranks; with etp 8 each rank holds its own slice and ZeRO has
    nothing to shard, so the advice leaves it out."""
    from click.testing import CliRunner
    from paraplan.cli import main

    def advice(etp):
        out = CliRunner().invoke(main, ["simulate", "-m", "mixtral-8x7b", "-c", "dgx-h100", "-n", "8", "--tp", "8",
                                        "--etp", str(etp), "--sequence-parallel", "--zero", "0", "--global-batch", "8"])
        assert out.exit_code == 0, out.output
        return " ".join(out.stdout.split("fits: NO", 1)[1].split("\nwhy:", 1)[0].split())

    assert advice(1).endswith("try recompute (--recompute-num-layers), offload, or a ZeRO stage)")
    assert advice(8).endswith("try recompute (--recompute-num-layers) or offload)")
