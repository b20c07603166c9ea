"""MoE, expert parallelism, context parallelism and low-precision cost functions, by hand.

A toy GPU and cluster with round numbers (1 PFLOP/s bf16, 3 TB/s HBM, 400 GB/s NVLink, 50 GB/s
NIC, 8 GPUs per node, zero latency and overhead, efficiency 1) make every expected value a
short calculation written out next to its assertion.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cost_models import context_parallel as cpm
from cost_models import low_precision as lp
from cost_models import moe
from cost_models.compute import compute_rates, gemm_time_s
from cost_models.params import total_params
from hardware_specs.cluster_spec import ClusterSpec, NetworkTier
from hardware_specs.efficiency_model import EfficiencyModel
from hardware_specs.errors import InputError
from hardware_specs.gpu_spec import GPUSpec
from model_specs import load_model
from simulator.parallel_config import ParallelConfig
from simulator.validate_config import check_config

NVLINK = 400e9
NIC = 50e9


@pytest.fixture(scope="module")
def cluster():
    gpu = GPUSpec(name="toy", generation="toy", peak_flops_per_s={"bf16": 1e15, "fp8": 2e15},
                  hbm_bytes=80e9, hbm_bw_bytes_per_s=3e12, scaleup_bw_bytes_per_s=NVLINK,
                  scaleup_domain_size=8)
    return ClusterSpec(name="toy", gpu=gpu, gpus_per_node=8, scaleup=NetworkTier("nvlink", NVLINK, 0.0),
                       scaleout=NetworkTier("infiniband", NIC, 0.0))


@pytest.fixture(scope="module")
def eff():
    return EfficiencyModel(generation="toy", gemm_peak_fraction={"bf16": 1.0}, gemm_half_dim=64,
                           attention_peak_fraction=1.0, hbm_fraction=1.0, scaleup_fraction=1.0,
                           scaleout_fraction=1.0, kernel_overhead_s=0.0)


@pytest.fixture(scope="module")
def rates(cluster, eff):
    return compute_rates(cluster.gpu, eff, "bf16")


@pytest.fixture(scope="module")
def dsv3():
    return load_model("deepseek-v3")


# ---- parameter counts ------------------------------------------------------------------------

def test_deepseek_v3_total_is_671b_and_active_37b(dsv3):
    # DeepSeek-V3 report: 671B total, 37B activated per token (MTP module excluded).
    assert total_params(dsv3) == pytest.approx(671e9, rel=0.01)
    assert total_params(dsv3, active=True) == pytest.approx(37e9, rel=0.03)


def test_deepseek_v3_mtp_module_by_hand(dsv3):
    # One MTP module (report section 2.2; HF config num_nextn_predict_layers 1): the 2h x h
    # projection, its two input RMSNorms, one MoE layer (256 routed + 1 shared expert of 3 x h x
    # 2048, router, MLA, two norms) and a final norm; embedding and head are shared.
    from cost_models.params import moe_layer_params, mtp_params
    h = 7168
    assert dsv3.mtp_layers == 1
    assert mtp_params(dsv3) == 2 * h * h + 2 * h + moe_layer_params(dsv3) + h
    experts = 257 * 3 * h * 2048
    assert experts < moe_layer_params(dsv3) < experts + 0.3e9     # MLA + router ~0.19B
    assert total_params(dsv3) == pytest.approx(671e9, rel=0.01)    # the 671B exclude it


def test_mixtral_8x7b_total_is_46_7b_and_active_12_9b():
    # Mistral AI: 46.7B total, 12.9B active (2 of 8 experts).
    m = load_model("mixtral-8x7b")
    assert total_params(m) == pytest.approx(46.7e9, rel=0.01)
    assert total_params(m, active=True) == pytest.approx(12.9e9, rel=0.01)


# ---- tokens per expert -------------------------------------------------------------------------

def test_tokens_per_expert_deepseek_v3_ep64_with_imbalance_and_capacity():
    # 4096 routed tokens per GPU x top-8 over 256 experts; each of the 4 local experts gets
    # copies from all 64 EP ranks: 4096 * 8 * 64 / 256 = 8192 rows.
    assert moe.moe_tokens_per_expert(4096, 8, 256, 64) == 8192
    # busiest 1.5x the mean: 12288; capacity factor 1.25 caps it at 1.25 * 8192 = 10240
    assert moe.moe_tokens_per_expert(4096, 8, 256, 64, load_imbalance=1.5) == 12288
    assert moe.moe_tokens_per_expert(4096, 8, 256, 64, load_imbalance=1.5, capacity_factor=1.25) == 10240
    # a generous capacity does not bind: 1.5 < 2.0
    assert moe.moe_tokens_per_expert(4096, 8, 256, 64, load_imbalance=1.5, capacity_factor=2.0) == 12288
    # expert TP 2: the expert's rows are gathered over both ETP ranks: 16384
    assert moe.moe_tokens_per_expert(4096, 8, 256, 64, etp=2) == 16384


@given(tokens=st.integers(1, 1 << 16), k=st.sampled_from([1, 2, 4, 8]),
       e_log=st.integers(3, 8), ep_log=st.integers(0, 3), etp=st.sampled_from([1, 2, 4]))
def test_local_experts_process_exactly_the_gpus_own_routed_copies_times_etp(tokens, k, e_log, ep_log, etp):
    experts, ep = 2 ** e_log, 2 ** ep_log
    per_expert = moe.moe_tokens_per_expert(tokens, k, experts, ep, etp=etp)
    assert per_expert * experts / ep == pytest.approx(tokens * k * etp)


def test_tokens_per_expert_takes_arrays():
    got = moe.moe_tokens_per_expert(np.array([1024, 4096]), 2, 8, np.array([8, 4]))
    np.testing.assert_allclose(got, [1024 * 2 * 8 / 8, 4096 * 2 * 4 / 8])


# ---- grouped GEMM ------------------------------------------------------------------------------

def test_grouped_gemm_is_slower_per_flop_than_one_gemm_of_the_same_total(rates):
    # 16 experts x M=512 vs one GEMM M=8192, N=4096, K=7168: same FLOPs, both compute-bound
    # (per expert 3.0e10 FLOP / 8.7e14 = 35 us > 70 MB / 3 TB/s = 23 us). Only the M factor
    # of the shape efficiency differs: ratio = (8192/8256) / (512/576) = 1.1163.
    grouped = moe.grouped_gemm_time_s(512, 4096, 7168, 16, rates)
    big = gemm_time_s(8192, 4096, 7168, rates)
    assert grouped / big == pytest.approx((8192 / 8256) / (512 / 576), rel=1e-9)
    # 64 experts x M=128: memory-bound on the weights, slower still
    assert moe.grouped_gemm_time_s(128, 4096, 7168, 64, rates) > grouped


# ---- MoE block compute -------------------------------------------------------------------------

def test_deepseek_v3_moe_block_flops_by_hand(dsv3, rates):
    # 4096 tokens on one GPU (tp 1): router 2*4096*256*7168 = 15,032,385,536;
    # routed 2*4096*8*3*7168*2048 = 2,886,218,022,912 (SwiGLU: 3 matrices);
    # shared (1 x 2048) 2*4096*3*7168*2048 = 360,777,252,864.
    c = moe.moe_mlp_costs(dsv3, rates, 4096, ep=64, etp=1)
    assert c["router_flops_fwd"] == 15_032_385_536
    assert c["gemm_flops_fwd"] == 15_032_385_536 + 2_886_218_022_912 + 360_777_252_864
    assert c["expert_rows"] == 4096 * 8          # 4 local experts x 8192 rows


def test_moe_flops_per_gpu_times_tp_do_not_depend_on_ep_etp_tp(dsv3, rates):
    base = moe.moe_mlp_costs(dsv3, rates, 4096, ep=64, etp=1)["gemm_flops_fwd"]
    for ep, etp, tp in [(8, 1, 1), (32, 2, 2), (64, 4, 4)]:
        got = moe.moe_mlp_costs(dsv3, rates, 4096, ep=ep, etp=etp, tp=tp)["gemm_flops_fwd"] * tp
        assert got == pytest.approx(base, rel=1e-12)


def test_imbalance_slows_the_busiest_rank_but_not_a_single_rank(dsv3, rates):
    t = lambda ep, imb: moe.moe_mlp_costs(dsv3, rates, 4096, ep=ep, etp=1, load_imbalance=imb)["gemm_fwd_s"]  # noqa: E731
    assert t(64, 1.5) > t(64, 1.0)
    assert t(1, 1.5) == t(1, 1.0)           # all experts local: the GPU's rows are exact


def test_moe_costs_take_array_degrees(dsv3, rates):
    c = moe.moe_mlp_costs(dsv3, rates, 4096, ep=np.array([8, 64]), etp=np.array([1, 1]))
    assert c["gemm_fwd_s"].shape == (2,)
    np.testing.assert_allclose(c["gemm_flops_fwd"], c["gemm_flops_fwd"][0])


# ---- all-to-all ------------------------------------------------------------------------------

DSV3_BUFFER = 4096 * 8 * 7168 * 2          # 469,762,048 bytes


def test_deepseek_v3_dispatch_bytes_per_gpu_at_ep64(dsv3, rates):
    # 4096 tokens routed per GPU per micro-batch, top-8, hidden 7168, bf16 dispatch:
    # buffer = 4096*8*7168*2 = 469,762,048 B; 1/64 stays local, so
    # sent = 469,762,048 * 63/64 = 462,422,016 B per all-to-all (combine the same).
    assert DSV3_BUFFER == 469_762_048
    assert moe.moe_dispatch_bytes(4096, 8, 7168, 2) == 469_762_048
    assert moe.moe_dispatch_bytes_sent(4096, 8, 7168, 2, 64) == 462_422_016
    # fp8 dispatch halves it
    assert moe.moe_dispatch_bytes_sent(4096, 8, 7168, 1, 64) == 231_211_008
    # the block reports the same buffer; with tp 2 and SP each GPU routes half of 8192 tokens
    assert moe.moe_mlp_costs(dsv3, rates, 4096, ep=64, etp=1)["a2a_dispatch_buffer_bytes"] == 469_762_048
    assert moe.moe_mlp_costs(dsv3, rates, 8192, ep=64, etp=1, tp=2)["a2a_dispatch_buffer_bytes"] == 469_762_048


def test_deepseek_v3_all_to_all_time_over_8_nodes(cluster, eff):
    # EP 64, stride 1: 8 ranks per node, 8 nodes. Of the buffer B, 7/64 goes over NVLink and
    # 56/64 over the NIC, both at once: max(B*7/64/400e9, B*56/64/50e9) = 8.22083584e-3 s.
    one = max(DSV3_BUFFER * 7 / 64 / NVLINK, DSV3_BUFFER * 56 / 64 / NIC)
    assert one == pytest.approx(8.22083584e-3, rel=1e-12)
    t = moe.moe_all_to_all_time_s(DSV3_BUFFER, 64, 1, cluster, eff)
    assert t["dispatch_s"] == pytest.approx(one)
    assert t["fwd_s"] == pytest.approx(2 * one)          # dispatch + combine
    assert t["bwd_s"] == pytest.approx(2 * one)
    half = moe.moe_all_to_all_time_s(DSV3_BUFFER, 64, 1, cluster, eff, overlap=0.5)
    assert half["fwd_exposed_s"] == pytest.approx(one)
    # the busiest rank receiving 1.2x the mean takes 1.2x as long
    skew = moe.moe_all_to_all_time_s(DSV3_BUFFER, 64, 1, cluster, eff, load_imbalance=1.2)
    assert skew["dispatch_s"] == pytest.approx(1.2 * one)


def test_destination_hit_probability_is_the_hypergeometric_complement():
    from math import comb
    # Qwen3-30B-A3B: 128 experts, top-8. A GPU of EP 16 holds 8 experts; a node of 8 such GPUs 64
    assert moe.destination_hit_probability(128, 8, 8) == pytest.approx(1 - comb(120, 8) / comb(128, 8), rel=1e-12)
    assert moe.destination_hit_probability(128, 8, 64) == pytest.approx(1 - comb(64, 8) / comb(128, 8), rel=1e-12)
    # the numbers: 0.41228... and 0.99690...
    assert moe.destination_hit_probability(128, 8, 8) == pytest.approx(0.4122820507, rel=1e-9)
    assert moe.destination_hit_probability(128, 8, 64) == pytest.approx(0.9969041357, rel=1e-9)
    # a destination holding every expert is always hit; one holding none never; top-1 = m / E
    assert moe.destination_hit_probability(64, 6, 64) == 1.0
    assert moe.destination_hit_probability(64, 6, 0) == 0.0
    assert moe.destination_hit_probability(64, 1, np.array([8.0, 16.0])) == pytest.approx([0.125, 0.25])


def test_deduplicated_dispatch_sends_a_token_once_per_node_over_the_nic(cluster, eff):
    # Qwen3-30B-A3B on EP 16 over two 8-GPU nodes, 4096 bf16 tokens of hidden 2048 per GPU:
    # one copy of the tokens is T = 4096 * 2048 * 2 = 16,777,216 B. Per-pair (Megatron alltoall):
    # 8 copies, half to the other node: NIC 4 T. Deduplicated (DeepEP / HybridEP): the other node
    # is needed with p_node = 0.99690..., so NIC = 0.99690 T; NVLink = (R - 1) N p_gpu T
    # = 7 * 2 * 0.41228 T = 5.77195 T (own-node copies plus forwarding on arrival).
    token = 4096 * 2048 * 2
    intra, inter = moe.deduplicated_dispatch_volumes(token, 128, 8, 16, 1, 8)
    assert inter == pytest.approx(0.9969041357 * token, rel=1e-9)
    assert intra == pytest.approx(7 * 2 * 0.4122820507 * token, rel=1e-9)
    buffer = moe.moe_dispatch_bytes(4096, 8, 2048, 2)
    per_pair = moe.moe_all_to_all_time_s(buffer, 16, 1, cluster, eff)
    dedup = moe.moe_all_to_all_time_s(buffer, 16, 1, cluster, eff, dedup=True, num_experts=128, top_k=8)
    assert per_pair["dispatch_s"] == pytest.approx(max(buffer * 7 / 16 / NVLINK, buffer * 8 / 16 / NIC))
    assert dedup["dispatch_s"] == pytest.approx(max(intra / NVLINK, inter / NIC))
    assert per_pair["dispatch_s"] / dedup["dispatch_s"] == pytest.approx(4 / 0.9969041357, rel=1e-9)
    # per row: the switch is an array like every other column
    both = moe.moe_all_to_all_time_s(buffer, 16, 1, cluster, eff, dedup=np.array([False, True]),
                                     num_experts=128, top_k=8)
    assert both["dispatch_s"] == pytest.approx([float(per_pair["dispatch_s"]), float(dedup["dispatch_s"])])


def test_top1_routing_has_nothing_to_deduplicate_across_nodes():
    # one expert per token: the NIC carries (N - 1) / N of the tokens either way
    intra, inter = moe.deduplicated_dispatch_volumes(1.0, 64, 1, 32, 1, 8)
    assert inter == pytest.approx(3 / 4)
    # NVLink: own-node copies (7/32) plus the forwarded remote arrivals (3/4 * 7/8)
    assert intra == pytest.approx(7 / 32 + 3 / 4 * 7 / 8)


def test_ep_inside_the_nvlink_domain_and_expert_tp_widening_it(cluster, eff):
    # EP 8 stride 1 fits one node: B * 7/8 / 400e9 = 1.02760448e-3 s
    inside = moe.moe_all_to_all_time_s(DSV3_BUFFER, 8, 1, cluster, eff)
    assert inside["dispatch_s"] == pytest.approx(DSV3_BUFFER * 7 / 8 / NVLINK)
    # etp 2 spreads the same EP group over 16 ranks (2 nodes): 4/8 of B crosses the NIC while
    # 3/8 moves on NVLink, plus the ETP all-gather of 2B (half of it moves) over NVLink
    wide = moe.moe_all_to_all_time_s(DSV3_BUFFER, 8, 2, cluster, eff)
    assert wide["dispatch_s"] == pytest.approx(max(DSV3_BUFFER * 3 / 8 / NVLINK, DSV3_BUFFER * 4 / 8 / NIC))
    assert wide["etp_s"] == pytest.approx(2 * (2 * DSV3_BUFFER) / 2 / NVLINK)


# ---- MoE memory -------------------------------------------------------------------------------

def test_expert_states_shard_by_ep_and_zero_over_expert_dp(dsv3):
    # dp 16, cp 2, tp 4 = 128 ranks folded into ep 32 x etp 1 -> edp 4
    assert moe.expert_data_parallel_size(16, 2, 4, 32, 1) == 4
    _, expert = moe.moe_layer_params_local(dsv3, tp=1, ep=64, etp=1)
    assert expert == 256 * 3 * 7168 * 2048 / 64          # 176,160,768 (4 experts)
    w, g, o = moe.expert_model_state_bytes(expert, 1, dp=256, cp=1, tp=1, ep=64, etp=1)
    assert (w, g) == (2 * expert, 4 * expert)
    assert o == pytest.approx(12 * expert / 4)           # ZeRO-1 over edp = 256/64 = 4


def test_moe_routed_activation_bytes_by_hand(dsv3):
    # micro-batch 1 x 4096 tokens, tp 1, cp 1, ep 64: rows = 4096*8 = 32768
    # router 4096*256*8 = 8,388,608; expert input 32768*7168*2 = 469,762,048;
    # SwiGLU intermediates 32768*6*2048 = 402,653,184; expert outputs at source 469,762,048
    expected = 8_388_608 + 469_762_048 + 402_653_184 + 469_762_048
    assert moe.moe_activation_bytes_per_layer(dsv3, 1, 4096, 1, 1, 64, 1, 0) == expected
    assert moe.moe_activation_bytes_per_layer(dsv3, 1, 4096, 1, 1, 64, 1, 2) == 0
    # Megatron-Core >= 0.13 scales the activation's output by the probabilities inside the
    # experts: the 469,762,048 bytes of expert outputs at the source are not kept
    assert moe.moe_activation_bytes_per_layer(dsv3, 1, 4096, 1, 1, 64, 1, 0, probs_in_expert=True) == \
        8_388_608 + 469_762_048 + 402_653_184


def test_megatron_core_0_13_keeps_no_expert_outputs_for_the_probabilities_gradient(dsv3):
    """The stack input moe_probs_in_expert (NVIDIA/Megatron-LM !2668, core_v0.13.0) moves only
    memory: DeepSeek-V3 pp16 ep64 DualPipe on H800 (17 micro-batches x 4 layers in flight on a
    middle stage) keeps 68 x 4096 x 8 x 7168 x 2 bytes = 29.75 GiB less, the step time equal."""
    from hardware_specs.catalog import load_cluster, load_stack
    from simulator.simulate import simulate
    from simulator.stack_defaults import stack_config_fields
    cluster = load_cluster("h800-node")
    reports = {}
    for name in ("megatron-core-0.12", "megatron-core"):
        fields = stack_config_fields(load_stack(name), "fp8", dsv3.name, cluster.gpu.name)
        assert fields["moe_probs_in_expert"] is (name == "megatron-core")
        config = ParallelConfig(**{**fields, "dp": 128, "pp": 16, "ep": 64, "global_batch": 15360, "dtype": "fp8",
                                   "schedule": "dualpipe", "uneven_layers": True, "recompute_modules": ("mla_up_proj",),
                                   "zero_stage": 1})
        reports[name] = simulate(dsv3, cluster, config, 2048)
    old, new = reports["megatron-core-0.12"], reports["megatron-core"]
    assert new.step_time_s == old.step_time_s
    saved = old.memory_breakdown_bytes["activations_bytes"] - new.memory_breakdown_bytes["activations_bytes"]
    assert saved == pytest.approx(68 * 4096 * 8 * 7168 * 2, rel=1e-12)


# ---- config validation ------------------------------------------------------------------------

def test_experts_not_divisible_by_ep_is_rejected_naming_ep(dsv3):
    with pytest.raises(InputError) as err:
        check_config(dsv3, ParallelConfig(dp=48, ep=3, global_batch=48))   # 256 % 3 != 0
    assert err.value.field == "ep"
    assert "ep" in str(err.value)


# ---- context parallelism: ring ----------------------------------------------------------------

def test_ring_attention_step_bytes_llama3_70b_at_128k():
    # Llama-3 70B at 128K tokens with cp 16, tp 8, micro-batch 1: tokens_local = 131072/16
    # = 8192; 8 kv heads / tp 8 = 1 per rank; head_dim 128; bf16.
    # K + V per step = 8192 * 1 * (128 + 128) * 2 = 4,194,304 B (4 MiB).
    assert cpm.ring_attention_comm_bytes(8192, 8, 128, tp=8, bytes_per_element=2) == 4_194_304
    m = load_model("llama3-70b")
    assert cpm.ring_attention_step_bytes(m, 8192, 8) == 4_194_304
    # 15 steps forward: 62,914,560 B; backward K/V + dK/dV: 125,829,120 B
    fwd, bwd = cpm.ring_attention_volume_bytes(4_194_304, 16)
    assert (fwd, bwd) == (62_914_560, 125_829_120)


def test_ring_bytes_for_mla_use_per_head_k_and_v(dsv3):
    # DeepSeek-V3 MLA: 128 heads of K 192 (128 nope + 64 rope) and V 128; tp 8 -> 16 heads:
    # 4096 * 16 * (192 + 128) * 2 = 41,943,040 B
    assert cpm.ring_attention_step_bytes(dsv3, 4096, 8) == 41_943_040


def test_ring_time_exposes_only_what_the_attention_step_does_not_hide(cluster, eff):
    # cp 16 at stride tp 8: every member on its own node -> NIC: 4 MiB / 50e9 = 8.388608e-5 s
    step = 4_194_304 / NIC
    t = cpm.ring_attention_time_s(4_194_304, 16, 8, core_fwd_s=16 * 5e-5, core_bwd_s=16 * 2e-4,
                                  cluster=cluster, eff=eff)
    assert t["step_s"] == pytest.approx(step)
    assert t["fwd_s"] == pytest.approx(15 * step)
    assert t["fwd_exposed_s"] == pytest.approx(15 * (step - 5e-5))       # 5.0829e-4 s
    assert t["bwd_exposed_s"] == 0.0                                     # 2*step < 2e-4 per step
    # the same ring inside one node (cp 8, tp 1) runs at NVLink speed
    inside = cpm.ring_attention_time_s(4_194_304, 8, 1, 0.0, 0.0, cluster, eff)
    assert inside["step_s"] == pytest.approx(4_194_304 / NVLINK)


# ---- context parallelism: Ulysses and hybrid ------------------------------------------------

def test_ulysses_moves_4_n_h_over_p_per_layer():
    # MHA, 32 heads x 128 = h 4096, sequence N = 32768 over P = 8: tokens_local 4096.
    # Q, K, V, O buffers = 4 * 4096 * 4096 * 2 = 134,217,728 B = 4*N*h/P elements x 2 B.
    got = cpm.ulysses_comm_bytes(4096, 32, 32, 128, tp=1, cp=8)
    assert got == 4 * 4096 * 4096 * 2 == 4 * 32768 * 4096 // 8 * 2
    # GQA with 8 kv heads over cp 16: K and V replicated to 16 heads
    assert cpm.ulysses_comm_bytes(1, 32, 8, 128, tp=1, cp=16) == (32 * 256 + 16 * 256) * 2



def test_ulysses_backward_moves_out_dout_then_dq_dk_dv(cluster, eff):
    """Transformer Engine AttnFuncWithCPAndQKVOA2A.backward (NVIDIA/TransformerEngine@015d22571b
    context_parallel.py) all-to-alls [out, dout] before the kernel and [dq, dk, dv] after it:
    five buffers against forward's four (q, k, v, out). llama3-8b at tp 1 (32 query heads,
    8 K/V heads, head_dim 128): forward 32*256 + 8*256 = 80*128 elements a token, backward
    32*(2*128 + 128) + 8*256 = 112*128, 1.4x. On the toy cluster (8 GPUs a node on 400 GB/s
    NVLink, no latency) an all-to-all over 8 ranks sends 7/8 of its buffer."""
    tokens = 131072 // 8
    fwd_bytes = tokens * 80 * 128 * 2          # 335,544,320
    bwd_bytes = tokens * 112 * 128 * 2         # 469,762,048
    assert cpm.ulysses_comm_bytes(tokens, 32, 8, 128, tp=1, cp=8) == fwd_bytes
    assert cpm.ulysses_bwd_comm_bytes(tokens, 32, 8, 128, tp=1, cp=8) == bwd_bytes
    # MHA: 5 buffers against 4
    assert cpm.ulysses_bwd_comm_bytes(1, 32, 32, 128, tp=1, cp=8) == 5 * 32 * 128 * 2
    got = cpm.context_parallel_costs(load_model("llama3-8b"), "ulysses", tokens_local=tokens, cp=8, tp=1,
                                     core_fwd_s=1e-3, core_bwd_s=2.5e-3, cluster=cluster, eff=eff)
    assert got["fwd_exposed_s"] == pytest.approx(fwd_bytes * 7 / 8 / NVLINK)
    assert got["bwd_exposed_s"] == pytest.approx(bwd_bytes * 7 / 8 / NVLINK)
    assert got["bwd_s"] / got["fwd_s"] == pytest.approx(1.4)

def test_ulysses_needs_heads_divisible_by_tp_times_cp():
    assert not cpm.ulysses_heads_ok(32, 32, 8, 8)
    assert cpm.ulysses_heads_ok(64, 64, 8, 8)


def test_hybrid_puts_ulysses_inside_the_node_and_ring_across():
    assert cpm.hybrid_cp_split(16, 1, 8, 64) == (8.0, 2.0)
    assert cpm.hybrid_cp_split(16, 8, 8, 64) == (1.0, 16.0)
    u, r = cpm.hybrid_cp_split(np.array([4, 8]), np.array([2, 2]), 8, 64)
    np.testing.assert_array_equal(u, [4, 4])
    np.testing.assert_array_equal(r, [1, 2])


def test_context_parallel_costs_select_by_kind_and_vanish_at_cp1(cluster, eff):
    m = load_model("llama3-70b")
    args = dict(tokens_local=8192, tp=8, core_fwd_s=1e-3, core_bwd_s=2.5e-3, cluster=cluster, eff=eff)
    ring = cpm.context_parallel_costs(m, "ring", cp=16, **args)
    assert ring["ring_step_bytes"] == 4_194_304
    assert ring["fwd_s"] == pytest.approx(15 * 4_194_304 / NIC)
    codes = np.array([0, 1, 2, 0])
    many = cpm.context_parallel_costs(m, codes, cp=np.array([16, 8, 16, 1]),
                                      **{**args, "tp": np.array([8, 1, 1, 8])})
    assert many["fwd_s"].shape == (4,)
    assert many["fwd_s"][3] == 0.0 and many["bwd_exposed_s"][3] == 0.0
    assert many["ulysses_bytes"][1] > 0 and many["ring_step_bytes"][1] == 0


# ---- low precision ----------------------------------------------------------------------------

def test_quantise_bytes_per_element_per_recipe():
    # read 2 B bf16 once + per copy (amax pass +) write
    assert lp.quantise_bytes_per_element("fp8", "activation") == 4.0            # 2 + 1 + 1
    assert lp.quantise_bytes_per_element("fp8", "activation", transposed_copy=False) == 3.0
    assert lp.quantise_bytes_per_element("fp8", "grad", scaling="current") == 6.0
    assert lp.quantise_bytes_per_element("mxfp8", "weight") == 2 + 2 * (1 + 1 / 32)   # 4.0625
    assert lp.quantise_bytes_per_element("nvfp4", "activation") == 2 + 2 * (2 + 0.5625)  # 7.125
    assert lp.quantise_bytes_per_element("nvfp4", "weight") == 2 + 2 + 2 * 0.5625       # 5.125
    assert lp.quantise_bytes_per_element("bf16", "activation") == 0.0


def test_cast_bytes_per_gemm_mxfp8_by_pass():
    # Y[4096, 8192] = X[4096, 8192] W[8192, 8192]
    # fprop: (4096*8192 + 8192*8192) * 4.0625 = 408,944,640; dgrad: 4096*8192 * 4.0625 =
    # 136,314,880; wgrad reuses the column-wise copies: 0
    assert lp.cast_bytes_per_gemm(4096, 8192, 8192, "mxfp8", "fprop") == 408_944_640
    assert lp.cast_bytes_per_gemm(4096, 8192, 8192, "mxfp8", "fprop", include_weights=False) == 136_314_880
    assert lp.cast_bytes_per_gemm(4096, 8192, 8192, "mxfp8", "dgrad") == 136_314_880
    assert lp.cast_bytes_per_gemm(4096, 8192, 8192, "mxfp8", "wgrad") == 0
    assert lp.cast_bytes_per_gemm(4096, 8192, 8192, "bf16", "fprop") == 0
    with pytest.raises(ValueError):
        lp.cast_bytes_per_gemm(1, 1, 1, "fp8", "forward")


def test_linear_cast_bytes_of_a_gated_mlp_by_pass():
    from cost_models.layer_costs import linear_cast_bytes, mlp_gemm_shapes
    # Llama-3-70B MLP on one GPU, 4096 tokens: up+gate (57344, 8192), down (8192, 28672)
    shapes = mlp_gemm_shapes(8192, 28672, True, 1)
    fp8 = linear_cast_bytes(4096, shapes, "fp8", [True, True], [True, False])
    # fused producers (norm, activation) write the two 1-byte FP8 copies instead of 2 bf16
    # bytes: nothing extra; weights 4 B each (read 2, write 1 + transposed 1); the down
    # projection's output gradient quantised alone: 4096 * 8192 * 4 B
    assert float(fp8["fprop"]) == 0.0
    assert float(fp8["weights"]) == (8192 * 57344 + 28672 * 8192) * 4.0
    assert float(fp8["dgrad"]) == 4096 * 8192 * 4.0
    # kernels: the fused producers launch none (delayed scaling), the down projection's
    # output gradient one cast-transpose
    assert float(fp8["fprop_kernels"]) == 0.0 and float(fp8["dgrad_kernels"]) == 1.0
    mx = linear_cast_bytes(4096, shapes, "mxfp8", [True, False], [False, False])
    # MXFP8 copies carry 1/32 byte of scale per element; the norm writes its 16-bit output and a
    # kernel quantises it after (TE normalization.cpp Impl::UNFUSED), so the "fused" input costs
    # what a standalone one does: read 2 + write 2 * 1.03125 = 4.0625 B, one kernel each
    assert float(mx["fprop"]) == 4096 * (8192 + 28672) * 4.0625
    assert float(mx["dgrad"]) == (4096 * 57344 + 4096 * 8192) * 4.0625
    assert float(mx["fprop_kernels"]) == 2.0 and float(mx["dgrad_kernels"]) == 2.0
    bf16 = linear_cast_bytes(4096, shapes, "bf16", [False, False], [False, False])
    assert all(float(v) == 0.0 for v in bf16.values())


def test_weight_copies_and_op_table():
    assert lp.weight_copy_bytes_per_param("fp8") == 2.0
    assert lp.weight_copy_bytes_per_param("fp8", transposed_copy=False) == 1.0
    assert lp.weight_copy_bytes_per_param("mxfp8") == 2.0625
    assert lp.weight_copy_bytes_per_param("nvfp4") == 1.125
    assert lp.weight_copy_bytes_per_param("bf16") == 0.0
    for recipe in ("fp8", "mxfp8", "nvfp4"):
        assert lp.OP_DTYPES[recipe]["attention_core"].startswith("bf16")
        assert lp.OP_DTYPES[recipe]["optimizer"].startswith("fp32")


# ---- element-wise kernels ----------------------------------------------------------------------

def test_elementwise_bytes_per_pass_by_hand(rates):
    """Per token, in 2-byte elements: the norm and residual-dropout kernels move 11 h forward
    (two norms 2 h, two dropout-adds 3.5 h) and 17 h backward (two norm backwards 3 h, two
    dropout backwards 2.5 h, the residual stream's two gradient sums at the forks 3 h), split by
    tp under SP; a SwiGLU activation moves 3 f / tp forward and 5 f / tp backward (read
    gradient, gate, up; write both gradients), a GeLU 2 f / tp and 3 f / tp. The gated toy uses
    RoPE: its attention block also rotates the 8 + 8 query and key heads of 128 channels (read
    and write, 2 bytes: 4 bytes per channel, / tp) forward and backward, and the fused core's
    backward adds D = rowsum(dO * O) (4 bytes per v channel) and its fp32 dQ accumulator (zero,
    read, write 16-bit dQ: 10 bytes per q channel) on its 8 / tp heads; the plain toy (learned
    positions) rotates nothing. Toy HBM 3 TB/s, no launch cost."""
    from cost_models.layer_costs import attention_block_costs, dense_mlp_costs
    from model_specs import ModelSpec
    h, f, tokens, tp = 1024, 4096, 2048, 4
    gated = ModelSpec("g", 2, h, 8, 8, f, 1000, 2048, gated_mlp=True)
    plain = ModelSpec("p", 2, h, 8, 8, f, 1000, 2048)
    bw = 3e12
    rope = tokens * (8 + 8) * 128 / tp * 4
    core = tokens * 8 / tp * (4 * 128 + 10 * 128)
    for sp, split in ((False, 1), (True, tp)):
        attn = attention_block_costs(gated, rates, tokens, 2048, tp, sp)
        assert attn["elem_fwd_s"] == pytest.approx((tokens * 2 * 5.5 * h / split + rope) / bw)
        assert attn["elem_bwd_s"] == pytest.approx((tokens * 2 * 8.5 * h / split + rope + core) / bw)
        learned = attention_block_costs(plain, rates, tokens, 2048, tp, sp)
        assert learned["elem_fwd_s"] == pytest.approx(tokens * 2 * 5.5 * h / split / bw)
        assert learned["elem_bwd_s"] == pytest.approx((tokens * 2 * 8.5 * h / split + core) / bw)
        g = dense_mlp_costs(gated, rates, tokens, tp, sp)
        assert g["elem_fwd_s"] == pytest.approx(tokens * 2 * (3 * f / tp + 5.5 * h / split) / bw)
        assert g["elem_bwd_s"] == pytest.approx(tokens * 2 * (5 * f / tp + 8.5 * h / split) / bw)
        p = dense_mlp_costs(plain, rates, tokens, tp, sp)
        assert p["elem_bwd_s"] == pytest.approx(tokens * 2 * (3 * f / tp + 8.5 * h / split) / bw)


def test_rotary_bytes_by_hand():
    """RoPE reads and writes the query and key heads a GPU holds, 2 bytes each: Llama-3 8B
    (32 query, 8 key heads of 128) at tp 2 over 8192 tokens: 8192 x (32 + 8) x 128 / 2 x 4 =
    83,886,080 bytes; multi-latent attention rotates only its decoupled channels (DeepSeek-V3:
    128 heads x 64 at tp 1 plus the one shared 64-channel key: 4096 tokens x 8256 x 4 =
    135,266,304); a learned-position model none."""
    from cost_models.layer_costs import rotary_bytes
    from model_specs import ModelSpec
    llama = ModelSpec("l", 32, 4096, 32, 8, 14336, 128256, 8192, gated_mlp=True)
    assert llama.position_embedding == "rope"
    assert float(rotary_bytes(llama, 8192, 2)) == 83_886_080
    dsv3 = load_model("deepseek-v3")
    assert (dsv3.num_heads, dsv3.mla.qk_rope_head_dim) == (128, 64)
    assert float(rotary_bytes(dsv3, 4096, 1)) == 4096 * (128 * 64 + 64) * 4 == 135_266_304
    gpt = ModelSpec("p", 2, 1024, 8, 8, 4096, 1000, 2048)
    assert gpt.position_embedding == "learned"
    assert float(rotary_bytes(gpt, 8192, 1)) == 0.0


def test_packed_row_copies_by_hand(rates):
    """llm-foundry's flash path gathers q, k, v into packed rows and scatters the output back:
    MPT-760M's layer (h 1536, 12 heads of 128) over 2048 tokens at tp 1. Forward: gathers read
    and write 3 x 1536 channels (4 bytes each), the output is zero-filled and scattered (6 bytes
    per channel): 2048 x (4 x 4608 + 6 x 1536) = 56,623,104 bytes, 9 passes over the 16-bit
    h-wide rows (2048 x 1536 x 2 = 6,291,456 bytes); backward: the output gradient's gather (4)
    and three zero-fill + scatters (6): 2048 x (6 x 4608 + 4 x 1536) = 69,206,016, 11 passes.
    The attention block's element-wise time grows by exactly that at the toy 3 TB/s."""
    from cost_models.layer_costs import attention_block_costs, unpad_copy_bytes
    from model_specs import ModelSpec
    mpt = ModelSpec("mpt-760m", 24, 1536, 12, 12, 6144, 50368, 2048)
    fwd, bwd = unpad_copy_bytes(mpt, 2048, 1)
    assert (float(fwd), float(bwd)) == (56_623_104, 69_206_016)
    assert (float(fwd) / 6_291_456, float(bwd) / 6_291_456) == (9.0, 11.0)
    plain = attention_block_costs(mpt, rates, 2048, 2048, 1, False)
    packed = attention_block_costs(mpt, rates, 2048, 2048, 1, False, unpad=True)
    assert float(packed["elem_fwd_s"] - plain["elem_fwd_s"]) == pytest.approx(56_623_104 / 3e12)
    assert float(packed["elem_bwd_s"] - plain["elem_bwd_s"]) == pytest.approx(69_206_016 / 3e12)
    assert float(packed["core_fwd_s"]) == float(plain["core_fwd_s"])


def test_llm_foundry_is_the_stack_that_copies_packed_rows_and_the_config_carries_it():
    from hardware_specs.catalog import list_stacks, load_stack
    from simulator.stack_defaults import stack_config_fields
    copying = [n for n in list_stacks() if load_stack(n).training is not None and load_stack(n).training.attention_unpad]
    assert copying == ["llm-foundry"]
    assert stack_config_fields(load_stack("llm-foundry"))["attention_unpad"] is True
    assert stack_config_fields(load_stack("megatron-core"))["attention_unpad"] is False


def test_backward_adds_its_residual_sums_and_the_fused_cores_kernels_to_the_launch_count(cluster, eff):
    """Counted with free work (``compute.kernel_counting_rates``): a block's backward launches the
    forward's element-wise kernels (8 / 2 a block) plus the residual fork's gradient sum (1);
    the fused attention core's backward adds its pre-processing and dQ conversion (2), the
    materialised core does not (its score passes are counted there)."""
    from cost_models.compute import kernel_counting_rates
    from cost_models.layer_costs import attention_block_costs, dense_mlp_costs
    from model_specs import ModelSpec
    counting = kernel_counting_rates(compute_rates(cluster.gpu, eff, "bf16"))
    m = ModelSpec("g", 2, 1024, 8, 8, 4096, 1000, 2048, gated_mlp=True)
    fused = attention_block_costs(m, counting, 2048, 2048, 1, False)
    unfused = attention_block_costs(m, counting, 2048, 2048, 1, False, flash_attention=False)
    assert (float(fused["elem_fwd_s"]), float(fused["elem_bwd_s"]), float(unfused["elem_bwd_s"])) == (4.0, 7.0, 5.0)
    mlp = dense_mlp_costs(m, counting, 2048, 1, False)
    assert (float(mlp["elem_fwd_s"]), float(mlp["elem_bwd_s"])) == (4.0, 5.0)


def test_fp8_gemm_shape_factor_scales_only_the_reduction_dimension_by_the_rate():
    """A tile's K-pipeline prologue is worth (fp8 peak / bf16 peak) times as many K elements in
    fp8. By hand on H100 (132 SMs, 989.4 / 1978.9 dense TFLOP/s) with plateaus 0.7 (bf16) and 0.6
    (fp8), a compute-bound (8192, 8192, 1024) GEMM: 64x64 tiles waste least, 16384 tiles in
    ceil(16384 / 132) = 125 waves (16384 / 16500 busy); K factor 1024 / (1024 + 128 x scale)."""
    from hardware_specs.catalog import load_gpu
    gpu = load_gpu("h100-sxm-80gb")
    assert gpu.sm_count == 132
    eff = EfficiencyModel(generation="toy", gemm_peak_fraction={"bf16": 0.7, "fp8": 0.6}, hbm_fraction=1.0,
                          kernel_overhead_s=0.0)
    bf16, fp8 = compute_rates(gpu, eff, "bf16"), compute_rates(gpu, eff, "fp8")
    assert fp8.k_stage_scale == pytest.approx(1978.9 / 989.4, rel=1e-3) and bf16.k_stage_scale == 1.0
    m = n = 8192.0
    k = 1024.0
    waves = 16384 / (125 * 132)
    assert gemm_time_s(m, n, k, fp8) == pytest.approx(
        2 * m * n * k / (1978.9e12 * 0.6 * waves * k / (k + 128 * 1978.9 / 989.4)), rel=1e-6)
    assert gemm_time_s(m, n, k, bf16) == pytest.approx(2 * m * n * k / (989.4e12 * 0.7 * waves * k / (k + 128)), rel=1e-6)


def test_a_skinny_gemm_splits_k_to_fill_the_sms():
    """(1024, 384, 8192) on A100 (108 SMs): 256x128 tiles give 4 x 3 = 12 tiles, split-K 9 ways
    fills all 108 SMs with 8192/9-deep K loops; 64x64 tiles give 96 tiles, no split, 96 of 108
    SMs busy with the full K. The better: 910.2 / (910.2 + 128) against 96/108 x 8192 / 8320."""
    from cost_models.compute import wave_shape_factor
    f = wave_shape_factor(1024, 384, 8192, 108)
    split9 = (8192 / 9) / (8192 / 9 + 128)
    no_split = 96 / 108 * 8192 / (8192 + 128)
    assert float(f) == pytest.approx(max(split9, no_split), rel=1e-9)
    assert split9 > no_split


def test_model_flops_of_mla_do_not_grow_with_tp_though_its_down_projections_run_on_every_rank():
    # DeepSeek-V3 on 2,048 H800, pp 16, ep 8: model FLOPs per token were 2.606e11, 2.663e11,
    # 2.775e11, 3.001e11 at tp 1, 2, 4, 8 (MFU up to 15% high at tp 8): the step multiplied each
    # rank's FLOPs by tp, and MLA's down-projections run whole on every rank. By hand, per token
    # and layer, forward: 2 x 7168 x (1536 + 512 + 64) = 30,277,632 FLOPs, counted tp - 1 times
    # too many over 61 layers + 1 MTP layer, forward and backward (x 3): at tp 2 that is
    # 3 x 62 x 30,277,632 = 5.632e9 of the 5.7e9 per token gap.
    from cost_models.layer_costs import mla_duplicated_flops_fwd
    from model_specs.catalog import load_model as get_model
    from simulator.parallel_config import ParallelConfig
    from simulator import simulate
    from hardware_specs.catalog import load_cluster
    model = get_model("deepseek-v3")
    assert float(mla_duplicated_flops_fwd(model, 1.0)) == 2 * 7168 * (1536 + 512 + 64) == 30_277_632
    cluster = load_cluster("h800-node")
    per_token = []
    for tp in (1, 2, 8):
        cfg = ParallelConfig(dp=2048 // (16 * tp), tp=tp, pp=16, ep=8, micro_batch=1, global_batch=15360,
                             zero_stage=1, recompute="full", dtype="fp8")
        r = simulate(model, cluster, cfg, n_gpus=2048)
        per_token.append(r.model_flops / r.tokens_per_step)
    assert per_token[1] == pytest.approx(per_token[0], rel=1e-12)
    assert per_token[2] == pytest.approx(per_token[0], rel=1e-12)
    # and 6 x the 37.55 B active parameters is most of it (the rest: attention scores, the head)
    assert 6 * 37.55e9 < per_token[0] < 1.2 * 6 * 37.55e9


@pytest.mark.parametrize("tp, cp, heads_per_rank", [(1, 64, 32), (8, 8, 4), (1, 3, 32)])
def test_ulysses_refuses_a_cp_that_does_not_divide_each_tp_ranks_heads(tp, cp, heads_per_rank):
    # DeepSpeed-Ulysses gives each of the cp ranks an equal share of a tp rank's query heads:
    # Llama-3-8B's 32 heads take cp 1, 2, 4, ... 32 at tp 1 and cp up to 4 at tp 8 (these were
    # priced: cp 64 over 32 heads, 4 heads over cp 8, 32 heads over cp 3)
    from hardware_specs.catalog import load_cluster
    from hardware_specs.errors import InputError
    from model_specs.catalog import load_model
    from simulator import simulate
    from simulator.parallel_config import ParallelConfig
    assert not cpm.ulysses_heads_ok(32, 8, tp, cp)
    model = load_model("llama3-8b")
    cfg = ParallelConfig(dp=1, tp=tp, cp=cp, cp_kind="ulysses", micro_batch=1, global_batch=8)
    with pytest.raises(InputError) as info:
        simulate(model, load_cluster("dgx-h100"), cfg, n_gpus=tp * cp)
    assert f"cp={cp} does not divide the {heads_per_rank} query" in str(info.value)
    # 8 KV heads: tp 2 leaves 16 query and 4 KV heads a rank, which cp 4 divides
    ok = ParallelConfig(dp=1, tp=2, cp=4, cp_kind="ulysses", micro_batch=1, global_batch=8)
    assert cpm.ulysses_heads_ok(32, 8, 2, 4) and simulate(model, load_cluster("dgx-h100"), ok, n_gpus=8).step_time_s > 0


def test_flex_dispatcher_has_no_sort_and_unsort_passes(rates):
    # Qwen3-30B-A3B (hidden 2048, 128 experts, top-8), 4 x 4096 tokens a GPU, ep 8: the GPU
    # receives 8 x 16384 x 8 / 128 = 8192 rows for each of its 16 experts = 131,072 rows of
    # 2048 x 2 B = 4 KiB; a pass reads or writes 131,072 x 4096 = 536,870,912 B, and the
    # all-to-all dispatcher's sort and unsort (read + write each) make 4 passes = 2,147,483,648 B
    # a layer and micro-batch, forward and again backward. Megatron's flex dispatcher (DeepEP /
    # HybridEP) has none (core_v0.16.1 token_dispatcher.py: sort_chunks_by_idxs only in
    # MoEAlltoAllTokenDispatcher; MoEFlexTokenDispatcher.dispatch_postprocess passes through).
    qwen = load_model("qwen3-30b-a3b")
    alltoall = moe.moe_mlp_costs(qwen, rates, 4 * 4096.0, ep=8, etp=1)
    flex = moe.moe_mlp_costs(qwen, rates, 4 * 4096.0, ep=8, etp=1, dispatch_dedup=True)
    sort_s = 2_147_483_648 / 3e12                      # toy HBM 3 TB/s, efficiency 1, no overhead
    assert alltoall["elem_fwd_s"] - flex["elem_fwd_s"] == pytest.approx(sort_s, rel=1e-12)
    assert alltoall["elem_bwd_s"] - flex["elem_bwd_s"] == pytest.approx(sort_s, rel=1e-12)
    # per row: a batch mixing the two dispatchers prices each row by its own
    both = moe.moe_mlp_costs(qwen, rates, np.array([4 * 4096.0] * 2), ep=np.array([8.0, 8.0]),
                             etp=np.array([1.0, 1.0]), dispatch_dedup=np.array([False, True]))
    np.testing.assert_allclose(both["elem_fwd_s"], [alltoall["elem_fwd_s"], flex["elem_fwd_s"]], rtol=1e-12)
