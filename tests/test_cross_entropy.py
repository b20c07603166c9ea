"""The loss's HBM traffic as each stack runs it: the implementation is a stack input
(``TrainingBehaviour.cross_entropy``), its bytes per logit are counted from its code
(``cost_models.cross_entropy``), and the output layer's time grows by exactly those bytes.
Toy GPU: 3 TB/s HBM, efficiency 1, so every expected time is bytes / 3e12 (plus the kernels'
launch overhead where one is set)."""
from __future__ import annotations

import numpy as np
import pytest

from cost_models import layer_costs
from cost_models.compute import compute_rates
from cost_models.cross_entropy import CROSS_ENTROPY_CODES, CROSS_ENTROPY_TRAFFIC, loss_traffic
from hardware_specs.catalog import load_stack
from hardware_specs.cluster_spec import ClusterSpec, NetworkTier
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError
from hardware_specs.gpu_spec import GPUSpec
from hardware_specs.stack_spec import CROSS_ENTROPY_IMPLS, TrainingBehaviour
from model_specs import load_model
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate
from simulator.stack_defaults import stack_config_fields

HBM = 3e12
#: Llama-3-8B's 128,256-entry vocabulary over 8,192 tokens at tp 1
LOGITS = 8192 * 128_256


def _cluster():
    gpu = GPUSpec(name="toy", generation="toy", peak_flops_per_s={"bf16": 1e15}, hbm_bytes=80e9,
                  hbm_bw_bytes_per_s=HBM, scaleup_bw_bytes_per_s=400e9, scaleup_domain_size=8)
    return ClusterSpec(name="toy", gpu=gpu, gpus_per_node=8, scaleup=NetworkTier("nvlink", 400e9, 0.0),
                       scaleout=NetworkTier("infiniband", 50e9, 0.0))


def _eff(kernel_overhead_s=0.0):
    return EfficiencyModel(generation="toy", gemm_peak_fraction={"bf16": 1.0}, gemm_half_dim=64,
                           attention_peak_fraction=1.0, hbm_fraction=1.0, scaleup_fraction=1.0,
                           scaleout_fraction=1.0, kernel_overhead_s=kernel_overhead_s)


def test_bytes_per_logit_as_counted_from_each_implementation():
    """Forward / backward bytes per logit and vocabulary-sized kernels (module docstring):
    Megatron eager 2+4 cast, 4 max, 8 subtract, 8 exp, 4 sum, 8 divide = 38 / 8 multiply + 6
    cast back = 14; Megatron-Core native fusion 6 + 8 + 8 = 22 / 10; Transformer Engine's Triton
    2 + 4 = 6 / 4; eager F.cross_entropy 6 + 16 = 22 / 4 zero fill + 16 + 6 = 26 (3
    vocabulary-sized kernels: the zero fill, the softmax backward, the cast); flash-attn's
    xentropy 4 / 4."""
    got = {k: (t.bytes_per_logit_fwd, t.bytes_per_logit_bwd, t.kernels_fwd, t.kernels_bwd)
           for k, t in CROSS_ENTROPY_TRAFFIC.items()}
    assert got == {"megatron_unfused": (38.0, 14.0, 6.0, 2.0), "megatron_fused": (22.0, 10.0, 3.0, 1.0),
                   "te_triton": (6.0, 4.0, 2.0, 1.0), "torch_eager": (22.0, 26.0, 2.0, 3.0),
                   "flash_attn_xentropy": (4.0, 4.0, 1.0, 1.0)}
    assert set(got) == set(CROSS_ENTROPY_IMPLS)
    # names and per-row codes give the same numbers
    codes = np.array([CROSS_ENTROPY_CODES["te_triton"], CROSS_ENTROPY_CODES["megatron_unfused"]])
    fwd, bwd, kf, kb = loss_traffic(codes)
    assert list(fwd) == [6.0, 38.0] and list(bwd) == [4.0, 14.0] and list(kf) == [2.0, 6.0]


def test_llama3_8b_loss_time_by_hand():
    """Llama-3-8B at tp 1 over 8,192 tokens: 1,050,673,152 logits. Megatron's eager loss moves
    38 x that = 39,925,579,776 bytes forward (13.3085 ms at 3 TB/s) and 14,709,424,128 backward
    (4.9031 ms); the native fusion 23,114,809,344 (7.7049 ms) and 10,506,731,520 (3.5022 ms).
    Fused vs unfused differ by exactly 16 and 4 bytes a logit; the GEMMs do not move."""
    llama = load_model("llama3-8b")
    assert llama.vocab_size == 128_256
    rates = compute_rates(_cluster().gpu, _eff(), "bf16")
    unfused = layer_costs.lm_head_costs(llama, rates, 8192.0, 1, "megatron_unfused")
    fused = layer_costs.lm_head_costs(llama, rates, 8192.0, 1, "megatron_fused")
    assert float(unfused["loss_fwd_s"]) == pytest.approx(39_925_579_776 / HBM)
    assert float(unfused["loss_bwd_s"]) == pytest.approx(14_709_424_128 / HBM)
    assert float(fused["loss_fwd_s"]) == pytest.approx(23_114_809_344 / HBM)
    assert float(fused["loss_bwd_s"]) == pytest.approx(10_506_731_520 / HBM)
    assert float(unfused["fwd_s"] - fused["fwd_s"]) == pytest.approx(16 * LOGITS / HBM)
    assert float(unfused["dgrad_s"] - fused["dgrad_s"]) == pytest.approx(4 * LOGITS / HBM)
    assert float(unfused["wgrad_s"]) == float(fused["wgrad_s"])
    assert float(unfused["flops_fwd"]) == float(fused["flops_fwd"])
    # tp 8 holds an eighth of the vocabulary: an eighth of the bytes
    tp8 = layer_costs.lm_head_costs(llama, rates, 8192.0, 8, "megatron_unfused")
    assert float(tp8["loss_fwd_s"]) == pytest.approx(39_925_579_776 / 8 / HBM)


def test_each_vocabulary_sized_kernel_pays_its_launch():
    """With 5 us a kernel, Transformer Engine's two forward kernels cost 10 us on top of their
    bytes and Megatron's eager six 30 us."""
    llama = load_model("llama3-8b")
    rates = compute_rates(_cluster().gpu, _eff(5e-6), "bf16")
    te = layer_costs.lm_head_costs(llama, rates, 8192.0, 1, "te_triton")
    eager = layer_costs.lm_head_costs(llama, rates, 8192.0, 1, "megatron_unfused")
    assert float(te["loss_fwd_s"]) == pytest.approx(6 * LOGITS / HBM + 2 * 5e-6)
    assert float(eager["loss_fwd_s"]) == pytest.approx(38 * LOGITS / HBM + 6 * 5e-6)
    assert float(te["loss_bwd_s"]) == pytest.approx(4 * LOGITS / HBM + 1 * 5e-6)


def test_simulate_step_grows_by_the_loss_bytes_of_every_micro_batch():
    """Llama-3-8B on one toy GPU, 4 micro-batches of 1 x 8,192 tokens, nothing to overlap:
    the step under Megatron's eager loss is longer than under the native fusion by
    4 x (16 + 4) x 1,050,673,152 / 3e12 = 28.018 ms."""
    llama = load_model("llama3-8b")
    base = dict(dp=1, tp=1, pp=1, micro_batch=1, global_batch=4, dtype="bf16", zero_stage=0)
    steps = {impl: simulate(llama, _cluster(), ParallelConfig(**base, cross_entropy=impl), efficiency=_eff()).step_time_s
             for impl in ("megatron_unfused", "megatron_fused")}
    assert steps["megatron_unfused"] - steps["megatron_fused"] == pytest.approx(4 * 20 * LOGITS / HBM, rel=1e-9)


def test_the_stacks_say_which_loss_runs():
    """Megatron-LM 2019-2022, Megatron-DeepSpeed and Megatron-Core without its flag run the eager
    loss; NeMo 24.07's Llama 3 and Nemotron recipes turn the native fusion on (GPT-3's do not);
    every Megatron-Bridge performance preset runs Transformer Engine's; llm-foundry flash-attn's."""
    for name in ("megatron-lm-2019", "megatron-lm-2021", "megatron-lm-2022", "megatron-deepspeed", "megatron-core"):
        assert stack_config_fields(load_stack(name))["cross_entropy"] == "megatron_unfused", name
    nemo = load_stack("nemo-24")
    assert nemo.training_for("LLAMA3-70B (NeMo 24.07)").cross_entropy == "megatron_fused"
    assert nemo.training_for("Nemotron-22B (NeMo 24.07)").cross_entropy == "megatron_fused"
    assert nemo.training_for("GPT3-20B (NeMo 24.07)").cross_entropy == "megatron_unfused"
    assert load_stack("nemo-24.09").training_for("Llama 3.1 70B").cross_entropy == "megatron_fused"
    assert load_stack("nemo-24.09").training_for("Grok-1 314B (dgxc proxy/full)").cross_entropy == "megatron_unfused"
    bridge = load_stack("megatron-bridge-26.04")
    assert bridge.training_for("gpt-oss-120b", "b200", "bf16").cross_entropy == "te_triton"
    assert stack_config_fields(load_stack("llm-foundry"))["cross_entropy"] == "flash_attn_xentropy"
    assert stack_config_fields(load_stack("torchtitan"))["cross_entropy"] == "torch_eager"


def test_an_unknown_implementation_is_refused_with_the_field_named():
    with pytest.raises(InputError, match="training.cross_entropy: unknown implementation"):
        TrainingBehaviour(cross_entropy="liger")
    with pytest.raises(InputError, match="cross_entropy: unknown implementation"):
        ParallelConfig(cross_entropy="fused")


def test_the_eager_torch_loss_holds_twelve_bytes_a_logit_at_its_peak():
    """``F.cross_entropy(logits.float())``'s backward holds log_softmax's saved fp32 output, the
    zero-filled fp32 gradient and the fp32 input gradient at once: 12 bytes a logit, where the
    catalog's default is 6. Llama-3-8B, one micro-batch of 2 x 8,192 tokens, tp 1: the logits
    part grows by 16,384 x 128,256 x 6 bytes and nothing else moves."""
    from cost_models.cross_entropy import loss_peak_bytes_per_logit
    assert float(loss_peak_bytes_per_logit("torch_eager")) == 12.0
    # the others hold the 16-bit logits and an fp32 softmax (6), flash-attn's loss the logits and
    # their 16-bit gradient (4)
    assert {n: float(loss_peak_bytes_per_logit(n)) for n in CROSS_ENTROPY_IMPLS if n != "torch_eager"} == {
        n: (4.0 if n == "flash_attn_xentropy" else 6.0) for n in CROSS_ENTROPY_IMPLS if n != "torch_eager"}
    llama = load_model("llama3-8b")
    base = dict(dp=1, tp=1, pp=1, micro_batch=2, global_batch=2, dtype="bf16", zero_stage=0)
    reports = {impl: simulate(llama, _cluster(), ParallelConfig(**base, cross_entropy=impl), efficiency=_eff())
               for impl in ("torch_eager", "megatron_unfused")}
    parts = {impl: r.memory_breakdown_bytes for impl, r in reports.items()}
    assert parts["torch_eager"]["logits_bytes"] - parts["megatron_unfused"]["logits_bytes"] == pytest.approx(
        2 * 8192 * llama.vocab_size * 6.0, rel=1e-12)
    assert llama.vocab_size == 128_256
    for part in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes"):
        assert parts["torch_eager"][part] == pytest.approx(parts["megatron_unfused"][part], rel=1e-12)
