"""gpt-oss's YaRN RoPE under Megatron-Core: Transformer Engine's fused RoPE cannot take YaRN's
mscale != 1, so Megatron-Core (core_v0.16.0 on) and Megatron-Bridge (v0.2.0 on) rotate the
queries and keys with the eager ``_apply_rotary_pos_emb_bshd`` (NVIDIA/Megatron-LM@core_v0.17.0
megatron/core/models/common/embeddings/rope_utils.py lines 73-126, 279-284). Toy GPU: 3 TB/s
HBM, efficiency 1, no kernel overhead, so every expected time is bytes / 3e12."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cost_models import layer_costs
from cost_models.compute import compute_rates
from hardware_specs.catalog import load_stack
from hardware_specs.cluster_spec import ClusterSpec, NetworkTier
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.gpu_spec import GPUSpec
from model_specs import load_model
from simulator.stack_defaults import stack_config_fields

HBM = 3e12


@pytest.fixture(scope="module")
def rates():
    gpu = GPUSpec(name="toy", generation="toy", peak_flops_per_s={"bf16": 1e15}, hbm_bytes=80e9,
                  hbm_bw_bytes_per_s=HBM, scaleup_bw_bytes_per_s=400e9, scaleup_domain_size=8)
    eff = EfficiencyModel(generation="toy", gemm_peak_fraction={"bf16": 1.0}, gemm_half_dim=64,
                          attention_peak_fraction=1.0, hbm_fraction=1.0, scaleup_fraction=1.0,
                          scaleout_fraction=1.0, kernel_overhead_s=0.0)
    return compute_rates(gpu, eff, "bf16")


def test_concentration_factor_as_megatron_core_computes_it():
    """gpt-oss: factor 32, mscale not stated (Megatron-Bridge yarn_mscale None): 0.1 ln 32 + 1 =
    1.34657; DeepSeek-V3's mscale = mscale_all_dim = 1.0: 1; no YaRN: 1."""
    assert layer_costs.yarn_concentration_factor(load_model("gpt-oss-120b")) == pytest.approx(0.1 * math.log(32) + 1)
    assert layer_costs.yarn_concentration_factor(load_model("gpt-oss-120b")) == pytest.approx(1.34657, abs=1e-5)
    assert layer_costs.yarn_concentration_factor(load_model("deepseek-v3")) == 1.0
    assert layer_costs.yarn_concentration_factor(load_model("llama3-8b")) == 1.0


def test_eager_rope_adds_its_passes_to_one_attention_block(rates):
    """gpt-oss-120b at tp 1 over 4,096 tokens: 64 query + 8 key heads of 64 channels = 4,608
    rotated channels a token. Eager forward 12 16-bit elements a channel (24 bytes) against the
    fused 4 bytes: 20 x 4096 x 4608 = 377,487,360 bytes, 0.125829 ms; backward 20 - 4 = 16 bytes:
    301,989,888 bytes, 0.100663 ms. GEMMs and the attention core are untouched."""
    oss = load_model("gpt-oss-120b")
    args = (oss, rates, np.array([4096.0]), 4096.0, np.array([1.0]), np.array([False]))
    fused = layer_costs.attention_block_costs(*args)
    eager = layer_costs.attention_block_costs(*args, yarn_rope_eager=np.array([True]))
    assert float(eager["elem_fwd_s"][0] - fused["elem_fwd_s"][0]) == pytest.approx(377_487_360 / HBM)
    assert float(eager["elem_bwd_s"][0] - fused["elem_bwd_s"][0]) == pytest.approx(301_989_888 / HBM)
    for key in ("gemm_fwd_s", "gemm_dgrad_s", "gemm_wgrad_s", "core_fwd_s", "core_bwd_s", "gemm_flops_fwd"):
        assert np.array_equal(eager[key], fused[key]), key
    # tp 8: 8 query heads and one key head a GPU: 9 x 64 = 576 channels, 20 x 4096 x 576 bytes
    args8 = (oss, rates, np.array([4096.0]), 4096.0, np.array([8.0]), np.array([True]))
    d8 = (layer_costs.attention_block_costs(*args8, yarn_rope_eager=np.array([True]))["elem_fwd_s"]
          - layer_costs.attention_block_costs(*args8)["elem_fwd_s"])
    assert float(d8[0]) == pytest.approx(20 * 4096 * 576 / HBM)


def test_kernel_counts():
    """Forward per tensor: mul, neg, cat, mul, add, cat (6) and cos, sin with their mscale products
    and casts (6) against the fused kernel's 1: 11 more, x 2 tensors = 22; backward mul, neg, cat,
    mul, add (5) against 1: 4 more, x 2 = 8."""
    _, _, kf, kb = layer_costs.eager_yarn_rope_extra(load_model("gpt-oss-120b"), 4096.0, 1.0)
    assert (kf, kb) == (22.0, 8.0)


def test_no_effect_where_the_fused_path_runs(rates):
    """Multi-latent attention (DeepSeek-V3: its own fused MLA RoPE) and a model whose factor is 1
    pay nothing whatever the stack says."""
    for name in ("deepseek-v3", "llama3-8b"):
        model = load_model(name)
        args = (model, rates, np.array([4096.0]), 4096.0, np.array([8.0]), np.array([True]))
        a = layer_costs.attention_block_costs(*args)
        b = layer_costs.attention_block_costs(*args, yarn_rope_eager=np.array([True]))
        assert np.array_equal(a["elem_fwd_s"], b["elem_fwd_s"]) and np.array_equal(a["elem_bwd_s"], b["elem_bwd_s"])


def test_the_stacks_say_where_rope_is_eager():
    """Megatron-Core from core_v0.16.0 and Megatron-Bridge from 25.11 (v0.2.0) run it eagerly;
    25.09 (v0.1.0rc3 on core 0.14) and the older Megatron stacks keep the fused kernel."""
    assert stack_config_fields(load_stack("megatron-core"))["yarn_rope_eager"] is True
    assert stack_config_fields(load_stack("megatron-core-0.12"))["yarn_rope_eager"] is False
    assert load_stack("megatron-bridge-26.04").training_for("gpt-oss-120b", "gb300", "bf16").yarn_rope_eager is True
    assert load_stack("megatron-bridge-25.11").training.yarn_rope_eager is True
    assert load_stack("megatron-bridge-25.09").training.yarn_rope_eager is False
    assert load_stack("torchtitan").training.yarn_rope_eager is False


def test_step_time_by_hand_and_the_batched_path_agrees():
    """gpt-oss-120b on 8 H100 (tp 1, pp 1, ep 8, one 4,096-token micro-batch a GPU, CUDA graphs so
    the host issue bound is out): Megatron-Bridge 26.04's eager RoPE adds 36 layers x (4096 x
    4608 channels x (20 + 16) bytes at Hopper's fitted HBM rate + 30 kernels at its fitted
    per-kernel time) = 36 x (679.5 MB / (3.35 TB/s x 0.5547) + 30 x 20 us) = 34.76 ms (HBM fraction
    0.5547 and 20 us a kernel since the refit f7c1ee2; 38.61 ms at 0.6406 and 25.2 us from session
    55's, 38.03 ms at 0.675 from session 51's, 39.61 ms at 0.589 before); the batched evaluation the planner and sweeps run (ConfigBatch)
    gives the same step time as simulate."""
    from paraplan import api
    from hardware_specs.catalog import load_cluster, load_efficiency
    base = dict(gpus=8, global_batch=8, micro_batch=1, tp=1, pp=1, ep=8, zero_stage=1,
                stack="megatron-bridge-26.04", cuda_graphs=True)
    on = api.simulate("gpt-oss-120b", "dgx-h100", **base).iloc[0]
    off = api.simulate("gpt-oss-120b", "dgx-h100", yarn_rope_eager=False, **base).iloc[0]
    assert bool(on.yarn_rope_eager) and not bool(off.yarn_rope_eager)
    eff, gpu = load_efficiency("hopper"), load_cluster("dgx-h100").gpu
    hand = 36 * (4096 * 4608 * 36 / (gpu.hbm_bw_bytes_per_s * eff.hbm_fraction) + 30 * eff.kernel_overhead_s)
    assert hand == pytest.approx(0.03476, abs=1e-5)
    assert float(on.step_time_s - off.step_time_s) == pytest.approx(hand, rel=1e-9)
    swept = api.sweep(dict(model="gpt-oss-120b", cluster="dgx-h100", **base), "yarn_rope_eager", [True, False])
    assert list(swept.step_time_s) == pytest.approx([float(on.step_time_s), float(off.step_time_s)], rel=1e-12)
