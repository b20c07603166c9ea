"""Per-expert GEMMs on several streams (``moe.grouped_gemm_time_s(streams=...)``,
``TrainingBehaviour.grouped_gemm_streams``), by hand.

Toy chip: 4 SMs, a plateau of 7.5497472e13 FLOP/s, 0.5 us per kernel launch. One expert's GEMM
is (m, n, k) = (192, 192, 1024): 2 x 192 x 192 x 1024 = 75,497,472 FLOPs = 1 us at the plateau.
Tile choice (``compute.wave_shape_factor``, k prologue 128): 64 x 64 tiles cut it into 9 tiles
with no padding, 3 waves of 4 SMs of which the last holds one tile: wave fill 9 / 12 = 0.75,
prologue 1024 / 1152, factor 2/3 (the best tile: 128 x 128 gives 4 padded tiles, 0.5625 x
1024 / 1152 = 0.5; 256 x 128 split-K 2 gives 0.5625 x 512 / 640 = 0.45). So the GEMM runs
1 / (2/3) = 1.5 us, of which its work (the wave term taken out) is 1.5 x 0.75 = 1.125 us and the
idle tail of its last wave 0.375 us; with its launch, 2 us.
"""
from __future__ import annotations

import pytest

from cost_models import moe
from cost_models.compute import ComputeRates, gemm_time_s, kernel_counting_rates, wave_shape_factor
from hardware_specs.catalog import load_stack
from hardware_specs.errors import InputError
from hardware_specs.stack_spec import TrainingBehaviour
from simulator.parallel_config import ParallelConfig

M, N, K = 192, 192, 1024
US = 1e-6


def _rates(hbm_bytes_per_s=1e30):
    return ComputeRates(gemm_flops_per_s=7.5497472e13, attn_flops_per_s=1e15, hbm_bytes_per_s=hbm_bytes_per_s,
                        half_dim=64.0, kernel_overhead_s=0.5 * US, operand_bytes=2.0, sm_count=4)


def test_the_toy_gemm_fills_three_quarters_of_its_waves():
    factor, fill = wave_shape_factor(M, N, K, 4, with_waves=True)
    assert float(fill) == 0.75
    assert float(factor) == pytest.approx(0.75 * 1024 / 1152, rel=1e-12)
    assert float(gemm_time_s(M, N, K, _rates())) == pytest.approx(2.0 * US, rel=1e-12)


def test_one_stream_is_todays_serial_sum_bit_for_bit():
    rates = _rates()
    serial = gemm_time_s(M, N, K, rates, count=8.0)
    assert float(moe.grouped_gemm_time_s(M, N, K, 8, rates)) == float(serial)
    assert float(moe.grouped_gemm_time_s(M, N, K, 8, rates, streams=1)) == float(serial)
    assert float(serial) == pytest.approx(16.0 * US, rel=1e-12)


def test_four_streams_pay_the_tail_and_launch_once_per_round_of_four():
    # 8 experts on 4 streams: work 8 x 1.125 = 9 us, two rounds of (0.375 tail + 0.5 launch)
    rates = _rates()
    assert float(moe.grouped_gemm_time_s(M, N, K, 8, rates, streams=4)) == pytest.approx(10.75 * US, rel=1e-12)
    # 6 experts: 6.75 us of work, still two rounds (ceil(6 / 4)): 8.5 us
    assert float(moe.grouped_gemm_time_s(M, N, K, 6, rates, streams=4)) == pytest.approx(8.5 * US, rel=1e-12)
    # more streams than experts: one round
    assert float(moe.grouped_gemm_time_s(M, N, K, 2, rates, streams=4)) == pytest.approx(
        (2 * 1.125 + 0.375 + 0.5) * US, rel=1e-12)


def test_memory_bound_gemms_share_the_bandwidth_and_only_their_launches_overlap():
    # operands (192 x 1024 + 1024 x 192) x 2 bytes + output 192 x 192 x 2 = 860,160 bytes;
    # at 4.3008e11 B/s that is 2 us > the 1.5 us compute: no idle tail, only launches overlap
    rates = _rates(hbm_bytes_per_s=4.3008e11)
    assert float(moe.grouped_gemm_time_s(M, N, K, 8, rates)) == pytest.approx(8 * 2.5 * US, rel=1e-12)
    assert float(moe.grouped_gemm_time_s(M, N, K, 8, rates, streams=4)) == pytest.approx(
        (8 * 2.0 + 2 * 0.5) * US, rel=1e-12)


def test_streams_broadcast_over_arrays():
    got = moe.grouped_gemm_time_s(M, N, K, 8, _rates(), streams=[1, 4])
    assert got[0] == pytest.approx(16.0 * US, rel=1e-12) and got[1] == pytest.approx(10.75 * US, rel=1e-12)


def test_the_launch_count_under_kernel_counting_rates_is_the_launches_over_the_rounds():
    count = kernel_counting_rates(_rates())
    assert float(moe.grouped_gemm_time_s(M, N, K, 8, count)) == 8.0
    assert float(moe.grouped_gemm_time_s(M, N, K, 8, count, streams=4)) == 2.0


def test_transformer_engine_stacks_run_four_streams_whatever_the_work_queues():
    """TE's grouped linear runs its per-expert GEMMs on 4 streams; CUDA_DEVICE_MAX_CONNECTIONS=1
    (DeepSeek-V3 on H100 at tp 2, Megatron-LM's examples) only fixes their start order, so it
    does not make them serial; stacks without TE's grouped linear keep 1."""
    bridge = load_stack("megatron-bridge-26.04")
    assert bridge.training.grouped_gemm_streams == 4
    assert bridge.training_for("qwen3-30b-a3b", "h100-sxm-80gb", "fp8").grouped_gemm_streams == 4
    assert bridge.training_for("deepseek-v3", "h100-sxm-80gb", "bf16").grouped_gemm_streams == 4
    assert bridge.training_for("deepseek-v3", "gb200", "bf16").grouped_gemm_streams == 4
    assert load_stack("megatron-core").training.grouped_gemm_streams == 4
    assert load_stack("megatron-lm-2022").training.grouped_gemm_streams == 1


def test_stream_counts_are_validated():
    with pytest.raises(InputError, match="grouped_gemm_streams"):
        TrainingBehaviour(grouped_gemm_streams=0)
    with pytest.raises(InputError, match="grouped_gemm_streams"):
        ParallelConfig(dp=1, grouped_gemm_streams=0)
    assert ParallelConfig(dp=1, grouped_gemm_streams=4).grouped_gemm_streams == 4


def test_a_batch_mixing_stream_counts_matches_row_by_row_and_streams_only_shorten_the_expert_gemms():
    """Qwen3-30B-A3B (128 experts, 8 local at EP 16) on H100: the step with 4 streams is shorter
    than with 1, its FLOPs are the same, and a mixed batch gives each row its own value."""
    import numpy as np

    from hardware_specs.catalog import efficiency_for_cluster, load_cluster
    from model_specs import load_model
    from simulator.config_batch import ConfigBatch
    from simulator.step_model import evaluate
    spec, cl = load_model("qwen3-30b-a3b"), load_cluster("dgx-h100")
    eff = efficiency_for_cluster(cl)
    configs = [ParallelConfig(dp=16, ep=16, micro_batch=1, global_batch=64, dtype="bf16", grouped_gemm_streams=s)
               for s in (1, 4, 1)]
    together = evaluate(spec, cl, eff, ConfigBatch.from_configs(configs))
    alone = [evaluate(spec, cl, eff, ConfigBatch.from_configs([c])) for c in configs]
    step = np.broadcast_to(together["step_time_s"], (3,))
    for i in range(3):
        assert step[i] == np.asarray(alone[i]["step_time_s"]).reshape(-1)[0]
    assert step[1] < step[0] == step[2]
