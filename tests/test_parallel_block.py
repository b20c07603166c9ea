"""The parallel attention + MLP block (``ModelSpec.parallel_attention_mlp``; PaLM, GPT-J, GPT-NeoX).

Hand-derived from the code's formulas: a layer's tensor-parallel collectives are counted in
all-reduces of the [tokens, h] 16-bit activations (``layer_times``: ``tp_coll``; a
sequence-parallel all-gather or reduce-scatter is half of one). The sequential block runs two
row-parallel reductions forward (attention output, MLP output) and two column-parallel input
gradient reductions backward; the parallel block reduces the sum of its two outputs once
(EleutherAI/gpt-neox ``ParallelTransformerLayer``: ``parallel_output=self.gpt_j_residual``,
``residual + self.reduce(output)``) and keeps the column-parallel ones.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cost_models import layer_costs, memory
from cost_models.compute import compute_rates, memory_bound_time_s
from cost_models.topology import group_collective_time_s
from hardware_specs.catalog import load_cluster, load_efficiency
from hardware_specs.errors import InputError
from model_specs import load_model, model_from_hf_config
from simulator.config_batch import ATTENTION_KERNEL_CODES, CP_KIND_CODES
from simulator.layer_times import layer_times
from simulator.parallel_config import AttentionKernel, CPKind

TOKENS = 2048.0
H = 6144                       # GPT-NeoX-20B


def _models():
    """(sequential, parallel with two norms, parallel with one shared norm) at GPT-NeoX-20B's shapes."""
    par2 = load_model("gpt-neox-20b")
    return (replace(par2, parallel_attention_mlp=False), par2, replace(par2, parallel_shared_norm=True))


def _setup():
    cluster = load_cluster("dgx-a100-80gb")
    eff = load_efficiency("ampere")
    return cluster, eff, compute_rates(cluster.gpu, eff, "bf16")


def _layer(model, tp, sp=False, tp_backward_overlap=False, rc=0):
    cluster, eff, rates = _setup()
    a = np.array
    return layer_times(model, cluster, eff, rates, a([TOKENS]), a([float(tp)]), a([1.0]), a([sp]), a([rc]), a([1.0]),
                       a([1.0]), a([1.0]), a([False]), a([CP_KIND_CODES[CPKind.RING]]),
                       a([ATTENTION_KERNEL_CODES[AttentionKernel.AUTO]]), a([True]), a([False]),
                       tp_backward_overlap=a([tp_backward_overlap]))


def _all_reduce_s(tp):
    cluster, eff, _ = _setup()
    return float(group_collective_time_s("all_reduce", np.array([TOKENS * H * 2.0]), np.array([float(tp)]),
                                         np.array([1.0]), cluster, eff)[0])


def test_ring_all_reduce_bytes_of_a_layer_halve_in_forward_for_2_and_8_way_tp():
    # a ring all-reduce sends 2 (g - 1) / g of the buffer per GPU (``collectives``): tokens x h x 2 B
    # = 2048 x 6144 x 2 = 25,165,824 B; g = 2: 25,165,824 B each, g = 8: 44,040,192 B each.
    # Forward per layer: sequential two (50,331,648 / 88,080,384 B), parallel one (25,165,824 /
    # 44,040,192 B); backward two either way (the column-parallel input gradients)
    buffer = TOKENS * H * 2.0
    assert buffer == 25_165_824
    for g, sent in ((2, 25_165_824), (8, 44_040_192)):
        assert 2 * (g - 1) / g * buffer == sent
    seq, par2, par1 = _models()
    for tp in (2, 8):
        ar = _all_reduce_s(tp)
        s, p2, p1 = (_layer(m, tp) for m in (seq, par2, par1))
        # tp_total_recompute_*: the forward's collectives (what a full recompute repeats)
        assert s["tp_total_recompute_dense"][0] == pytest.approx(2.0 * ar, rel=1e-12)
        for p in (p2, p1):
            assert p["tp_total_recompute_dense"][0] == pytest.approx(1.0 * ar, rel=1e-12)
            assert p["tp_total_recompute_dense"][0] == pytest.approx(s["tp_total_recompute_dense"][0] / 2.0, rel=1e-12)
            # forward + backward: 4 all-reduces -> 3
            assert p["tp_total_base_dense"][0] == pytest.approx(3.0 * ar, rel=1e-12)
        assert s["tp_total_base_dense"][0] == pytest.approx(4.0 * ar, rel=1e-12)
        # nothing overlapped (tp_backward_overlap off, no userbuffers): all of it exposed
        assert p2["tp_base_dense"][0] == pytest.approx(3.0 * ar, rel=1e-12)


def test_sequence_parallel_pairs_one_reduce_scatter_and_its_all_gather_instead_of_two():
    # sequential: forward 2 all-gathers + 2 reduce-scatters (2 all-reduces' time), backward 2
    # column re-gather + reduce-scatter pairs (2) and 2 output-gradient all-gathers (1): 5;
    # parallel: forward 2 all-gathers + 1 reduce-scatter (1.5), backward 2 + 1 all-gather (2.5): 4
    seq, par2, _ = _models()
    ar = _all_reduce_s(8)
    s, p = _layer(seq, 8, sp=True), _layer(par2, 8, sp=True)
    assert s["tp_total_base_dense"][0] == pytest.approx(5.0 * ar, rel=1e-12)
    assert p["tp_total_base_dense"][0] == pytest.approx(4.0 * ar, rel=1e-12)
    assert p["tp_total_recompute_dense"][0] == pytest.approx(1.5 * ar, rel=1e-12)


def test_full_recompute_repeats_the_one_forward_reduction():
    seq, par2, _ = _models()
    ar = _all_reduce_s(8)
    s, p = _layer(seq, 8, rc=2), _layer(par2, 8, rc=2)
    assert s["tp_recompute_dense"][0] == pytest.approx(2.0 * ar, rel=1e-12)
    assert p["tp_recompute_dense"][0] == pytest.approx(1.0 * ar, rel=1e-12)


def test_a_parallel_block_stores_x_once_and_a_shared_norm_one_output_fewer():
    seq, par2, par1 = _models()
    s, p2, p1 = (memory.activation_terms(m, 1.0, 2048, 1.0, 1.0, False) for m in (seq, par2, par1))
    # 16-bit: the two norm inputs 2 x 2048 x 6144 x 2 B; the parallel block's norms read the same x
    assert float(s["norm_inputs"]) == 50_331_648 and float(p2["norm_inputs"]) == float(p1["norm_inputs"]) == 25_165_824
    assert float(s["norm_outputs"]) == float(p2["norm_outputs"]) == 50_331_648
    assert float(p1["norm_outputs"]) == 25_165_824
    kept = [float(memory.activation_bytes_per_layer(m, 1.0, 2048, 1.0, 1.0, False, 0)) for m in (seq, par2, par1)]
    assert kept[0] - kept[1] == 25_165_824 and kept[0] - kept[2] == 2 * 25_165_824
    # full recompute keeps the layer input alone: the same for all three
    full = {float(memory.activation_bytes_per_layer(m, 1.0, 2048, 1.0, 1.0, False, 2)) for m in (seq, par2, par1)}
    assert full == {25_165_824.0}


def test_elementwise_passes_by_hand_at_tp_1():
    # per token in h-wide 16-bit rows, the MLP block carries the layer's differences:
    # two norms: fwd 5.5 + 2 (GPT-NeoX's adds: 2.5 + 3.5 + 3 = 9 against 7), kernels 4 + 1;
    # one shared norm: fwd 5.5 + 2 - 2, bwd 8.5 - 3, kernels 4 + 1 - 1 / 5 - 1
    _, _, rates = _setup()
    seq, par2, par1 = _models()
    f = seq.ffn_hidden_size
    act_fwd, act_bwd = layer_costs.ACTIVATION_UNITS[False]
    for model, (units_f, units_b, k_f, k_b) in ((seq, (5.5, 8.5, 4.0, 5.0)), (par2, (7.5, 8.5, 5.0, 5.0)),
                                                (par1, (5.5, 5.5, 4.0, 4.0))):
        got = layer_costs.dense_mlp_costs(model, rates, TOKENS, 1.0, False)
        assert float(got["elem_fwd_s"]) == pytest.approx(
            float(memory_bound_time_s(TOKENS * 2.0 * (act_fwd * f + H * units_f), rates, k_f)), rel=1e-12)
        assert float(got["elem_bwd_s"]) == pytest.approx(
            float(memory_bound_time_s(TOKENS * 2.0 * (act_bwd * f + H * units_b), rates, k_b)), rel=1e-12)
    # the layernorm recompute repeats one norm instead of two
    one = float(layer_costs.norm_forward_s(par1, rates, TOKENS, 1.0, False))
    assert float(layer_costs.norm_forward_s(seq, rates, TOKENS, 1.0, False)) == pytest.approx(2.0 * one, rel=1e-12)


@pytest.mark.parametrize("tp, sp", [(1, False), (2, False), (8, False), (2, True), (8, True)])
def test_shared_norm_parallel_block_never_slower_than_sequential(tp, sp):
    seq, par2, par1 = _models()
    s, p1 = _layer(seq, tp, sp=sp), _layer(par1, tp, sp=sp)
    for key in ("f_dense", "b_dense", "w_dense", "r_full_dense"):
        assert p1[key][0] <= s[key][0] + 1e-15, key
    if tp > 1:
        # two norms: the all-reduce it saves outweighs GPT-NeoX's extra add kernel
        p2 = _layer(par2, tp, sp=sp)
        assert p2["f_dense"][0] + p2["b_dense"][0] < s["f_dense"][0] + s["b_dense"][0]


def test_tp_1_changes_only_the_norms_and_adds():
    _, _, rates = _setup()
    seq, par2, par1 = _models()
    s = _layer(seq, 1)
    for m in (par2, par1):
        p = _layer(m, 1)
        d_f = float(layer_costs.dense_mlp_costs(m, rates, TOKENS, 1.0, False)["elem_fwd_s"]
                    - layer_costs.dense_mlp_costs(seq, rates, TOKENS, 1.0, False)["elem_fwd_s"])
        d_b = float(layer_costs.dense_mlp_costs(m, rates, TOKENS, 1.0, False)["elem_bwd_s"]
                    - layer_costs.dense_mlp_costs(seq, rates, TOKENS, 1.0, False)["elem_bwd_s"])
        assert p["f_dense"][0] - s["f_dense"][0] == pytest.approx(d_f, rel=1e-9, abs=1e-15)
        assert p["b_dense"][0] - s["b_dense"][0] == pytest.approx(d_b, rel=1e-9, abs=1e-15)
        assert p["w_dense"][0] == s["w_dense"][0]
        assert p["tp_total_base_dense"][0] == s["tp_total_base_dense"][0] == 0.0
    # two norms at tp 1: GPT-NeoX's third add kernel makes the forward a little longer
    assert _layer(par2, 1)["f_dense"][0] > s["f_dense"][0]


def test_model_spec_checks_and_readers():
    seq, par2, _ = _models()
    with pytest.raises(InputError) as err:
        replace(seq, parallel_shared_norm=True)
    assert err.value.field == "model.parallel_shared_norm"
    with pytest.raises(InputError) as err:
        replace(load_model("mixtral-8x7b"), parallel_attention_mlp=True)
    assert err.value.field == "model.parallel_attention_mlp"
    with pytest.raises(InputError):
        replace(seq, parallel_attention_mlp=1)
    assert (par2.parallel_attention_mlp, par2.parallel_shared_norm) == (True, False)
    config = {"model_type": "gpt_neox", "num_hidden_layers": 44, "hidden_size": 6144, "num_attention_heads": 64,
              "intermediate_size": 24576, "vocab_size": 50432, "rotary_pct": 0.25}
    # transformers GPTNeoXConfig: use_parallel_residual defaults to true
    assert model_from_hf_config(config).parallel_attention_mlp is True
    assert model_from_hf_config({**config, "use_parallel_residual": False}).parallel_attention_mlp is False
    # every other preset stays sequential
    assert not load_model("llama3-70b").parallel_attention_mlp and not load_model("gpt3-175b").parallel_attention_mlp


def test_serving_parallel_block_runs_one_all_reduce_per_layer():
    from cost_models.inference_step import layer_collectives
    from hardware_specs.catalog import load_serving_efficiency
    from hardware_specs.serving_behaviour import ServingBehaviour
    seq, par2, _ = _models()
    cluster = load_cluster("dgx-h100")
    eff = load_serving_efficiency("hopper")
    behaviour = ServingBehaviour()
    tp, T = np.array([8.0]), np.array([256.0])
    s, sk = layer_collectives(seq, cluster, eff, behaviour, T, tp, np.array([1.0]), 1.0, 1.0, 0.0)
    p, pk = layer_collectives(par2, cluster, eff, behaviour, T, tp, np.array([1.0]), 1.0, 1.0, 0.0)
    assert s[0] > 0.0
    assert p[0] == pytest.approx(s[0] / 2.0, rel=1e-12)
    assert pk[0] == sk[0] / 2.0
