"""gpt-oss's clamped GLU: the model states the clamp, the stack says whether it costs separate
passes (Megatron-Core's eager clamp and concatenation before the fused activation), and the
MoE block's element-wise time grows by exactly those bytes. Toy GPU: 3 TB/s HBM, efficiency 1,
no kernel overhead, so every expected time is bytes / 3e12."""
from __future__ import annotations

import numpy as np
import pytest

from cost_models import moe
from cost_models.compute import compute_rates
from hardware_specs.catalog import load_stack
from hardware_specs.cluster_spec import ClusterSpec, NetworkTier
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError
from hardware_specs.gpu_spec import GPUSpec
from model_specs import ModelSpec, load_model
from simulator.layer_times import layer_times
from simulator.stack_defaults import stack_config_fields
from cost_models.memory import MODULE_BITS

HBM = 3e12


@pytest.fixture(scope="module")
def cluster():
    gpu = GPUSpec(name="toy", generation="toy", peak_flops_per_s={"bf16": 1e15}, hbm_bytes=80e9,
                  hbm_bw_bytes_per_s=HBM, scaleup_bw_bytes_per_s=400e9, scaleup_domain_size=8)
    return ClusterSpec(name="toy", gpu=gpu, gpus_per_node=8, scaleup=NetworkTier("nvlink", 400e9, 0.0),
                       scaleout=NetworkTier("infiniband", 50e9, 0.0))


@pytest.fixture(scope="module")
def eff():
    return EfficiencyModel(generation="toy", gemm_peak_fraction={"bf16": 1.0}, gemm_half_dim=64,
                           attention_peak_fraction=1.0, hbm_fraction=1.0, scaleup_fraction=1.0,
                           scaleout_fraction=1.0, kernel_overhead_s=0.0)


def test_clamp_bytes_by_hand():
    """16,384 rows of a 2,880-wide half in bf16: forward clamps read and write each half
    (4 x 2880) and the concatenation reads and writes both (4 x 2880): 8 x 16384 x 2880 x 2 =
    754,974,720 bytes; backward two masked gradients (3 x 2880 each) and the split's gradient
    written whole (4 x 2880): 10 x ... = 943,718,400 bytes."""
    fwd, bwd = moe.glu_clamp_bytes(16384, 2880, 2)
    assert (float(fwd), float(bwd)) == (754_974_720.0, 943_718_400.0)


def test_eager_clamp_adds_its_passes_to_the_moe_block_and_nothing_else(cluster, eff):
    """gpt-oss-120b at tp 1, ep 1, etp 1 over 4,096 tokens: every token goes to 4 experts, so
    16,384 rows of 2,880 columns per GLU half; the clamp adds 754,974,720 / 3e12 = 0.25166 ms
    forward and 943,718,400 / 3e12 = 0.31457 ms backward, and leaves the GEMMs alone."""
    oss = load_model("gpt-oss-120b")
    assert oss.glu_clamp_limit == 7.0
    rates = compute_rates(cluster.gpu, eff, "bf16")
    fused = moe.moe_mlp_costs(oss, rates, 4096.0, 1, 1)
    eager = moe.moe_mlp_costs(oss, rates, 4096.0, 1, 1, glu_clamp_eager=True)
    assert float(fused["expert_rows"]) == 16384.0
    assert float(eager["elem_fwd_s"] - fused["elem_fwd_s"]) == pytest.approx(754_974_720 / HBM)
    assert float(eager["elem_bwd_s"] - fused["elem_bwd_s"]) == pytest.approx(943_718_400 / HBM)
    for key in ("gemm_fwd_s", "gemm_dgrad_s", "gemm_wgrad_s", "gemm_flops_fwd"):
        assert float(eager[key]) == float(fused[key]), key
    # a model without a clamp pays nothing whatever the stack says
    plain = ModelSpec(**{**{f: getattr(oss, f) for f in ("name", "num_layers", "hidden_size", "num_heads",
                                                             "num_kv_heads", "ffn_hidden_size", "vocab_size",
                                                             "seq_len", "head_dim", "gated_mlp", "moe",
                                                             "linear_bias")}, "glu_clamp_limit": 0.0})
    a = moe.moe_mlp_costs(plain, rates, 4096.0, 1, 1)
    b = moe.moe_mlp_costs(plain, rates, 4096.0, 1, 1, glu_clamp_eager=True)
    assert float(a["elem_fwd_s"]) == float(b["elem_fwd_s"]) and float(a["elem_bwd_s"]) == float(b["elem_bwd_s"])


def test_recomputing_the_activation_repeats_the_clamp(cluster, eff):
    """Megatron-Core checkpoints the whole bias_act_func, clamp included: recomputing mlp_act
    (Megatron-Bridge's ``moe_act``) on gpt-oss adds the clamp's forward 0.25166 ms to the
    layer's recompute when the stack clamps eagerly."""
    oss = load_model("gpt-oss-120b")
    rates = compute_rates(cluster.gpu, eff, "bf16")
    args = (oss, cluster, eff, rates, np.array([4096.0]), np.array([1.0]), np.array([1.0]), np.array([False]),
            np.array([1]), np.array([1.0]), np.array([1.0]), np.array([1.0]), np.array([False]), np.array([0]),
            np.array([0]), np.array([True]), np.array([False]))
    kw = dict(modules=np.array([MODULE_BITS["mlp_act"]]))
    from simulator.config_batch import RECOMPUTE_CODES
    from simulator.parallel_config import Recompute
    sel = np.array([RECOMPUTE_CODES[Recompute.SELECTIVE]])
    args = args[:8] + (sel,) + args[9:]
    fused = layer_times(*args, **kw)
    eager = layer_times(*args, glu_clamp_eager=np.array([True]), **kw)
    assert float(eager["r_moe"][0] - fused["r_moe"][0]) == pytest.approx(754_974_720 / HBM)
    assert float(eager["f_moe"][0] - fused["f_moe"][0]) == pytest.approx(754_974_720 / HBM)


def test_the_stacks_say_where_the_clamp_is_eager():
    """Megatron-Core clamps eagerly unless its op fuser runs Transformer Engine's fused op; the
    Megatron-Bridge 26.06 presets turn the fuser on for GPT-OSS 120B in MXFP8 on GB200 and GB300
    (not on B300, not in BF16); stacks with no clamped model keep the default (no passes)."""
    assert stack_config_fields(load_stack("megatron-core"))["glu_clamp_eager"] is True
    bridge = load_stack("megatron-bridge-26.06")
    assert bridge.training_for("gpt-oss-120b", "gb300", "mxfp8").glu_clamp_eager is False
    assert bridge.training_for("gpt-oss-120b", "gb200", "mxfp8").glu_clamp_eager is False
    assert bridge.training_for("gpt-oss-120b", "b300", "mxfp8").glu_clamp_eager is True
    assert bridge.training_for("gpt-oss-120b", "gb300", "bf16").glu_clamp_eager is True
    assert load_stack("megatron-bridge-26.04").training_for("gpt-oss-120b", "gb300", "bf16").glu_clamp_eager is True
    assert load_stack("megatron-lm-2022").training.glu_clamp_eager is False


def test_the_clamp_limit_is_checked():
    base = dict(name="m", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, ffn_hidden_size=128,
                vocab_size=100, gated_mlp=True)
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(InputError, match="model.glu_clamp_limit: must be a finite number >= 0"):
            ModelSpec(**base, glu_clamp_limit=bad)
    with pytest.raises(InputError, match="model.glu_clamp_limit: only a gated MLP"):
        ModelSpec(**{**base, "gated_mlp": False}, glu_clamp_limit=7.0)
    assert ModelSpec(**base, glu_clamp_limit=7.0).glu_clamp_limit == 7.0
