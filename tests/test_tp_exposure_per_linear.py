"""Each TP linear's collectives hide under that linear's own GEMMs (``layer_times.tp_exposed_per_linear``).

Megatron-LM's column-parallel linear (NVIDIA/Megatron-LM@d98e8a64 megatron/core/tensor_parallel/
layers.py ``LinearWithGradAccumulationAndAsyncCommunication.backward``) starts the re-gather of its
sequence-parallel input before its own data-gradient GEMM and waits for it after, then starts the
reduce-scatter of its input gradient before its own weight-gradient GEMM and waits for it before
returning; userbuffers (Transformer Engine ``ub_overlap_ag`` / ``ub_overlap_rs``) split each
collective into chunks pipelined with the GEMM it feeds. So no collective hides under another
linear's GEMMs. Hand-derived example (the physics review's): Llama-3 8B at tp 8 with sequence
parallelism, 8192 tokens, on a DGX H100: QKV (GQA, (4096 + 2 x 8 x 128) / 8 = 768 output columns a
rank) has data- and weight-gradient GEMMs of ~110 and ~100 us (~115 and ~105 us before the refit
f7c1ee2 took Hopper's per-kernel time 25.2 -> 20 us, 5.2 us off each GEMM) against an all-gather
and a reduce-scatter of ~188 us each (half of the 67 MB all-reduce): ~167 us exposed a layer
(~156 us before), which
pooling under the layer's 1.6 ms of gradient GEMMs hid. A linear's two backward collectives share its
two gradient GEMMs as one window.
"""
from __future__ import annotations

import numpy as np
import pytest

from cost_models.compute import compute_rates, gemm_time_s
from cost_models.topology import group_collective_time_s
from hardware_specs.catalog import load_cluster, load_efficiency
from model_specs.catalog import load_model
from simulator.config_batch import ATTENTION_KERNEL_CODES, CP_KIND_CODES
from simulator.layer_times import layer_times, tp_exposed_per_linear
from simulator.parallel_config import AttentionKernel, CPKind

TOKENS = 8192.0
TP = 8.0
H, FFN, KV, D = 4096, 14336, 8, 128


def _setup():
    cluster = load_cluster("dgx-h100")
    eff = load_efficiency("hopper")
    return load_model("llama3-8b"), cluster, eff, compute_rates(cluster.gpu, eff, "bf16")


def _layer(sp=True, tp_overlap=False, tp_backward_overlap=True):
    model, cluster, eff, rates = _setup()
    a = np.array
    return layer_times(model, cluster, eff, rates, a([TOKENS]), a([TP]), a([1.0]), a([sp]), a([0]), a([1.0]),
                       a([1.0]), a([1.0]), a([tp_overlap]), a([CP_KIND_CODES[CPKind.RING]]),
                       a([ATTENTION_KERNEL_CODES[AttentionKernel.AUTO]]), a([True]), a([False]),
                       tp_backward_overlap=a([tp_backward_overlap]))


def _hand():
    """(all-reduce seconds, {linear: (fwd, dgrad, wgrad) seconds}) of the example, from the
    shapes by hand: Y[t, n] = X[t, k] W[k, n]; dgrad (t, k, n); wgrad (k, n, t)."""
    model, cluster, eff, rates = _setup()
    assert (model.hidden_size, model.ffn_hidden_size, model.num_kv_heads, model.head_dim) == (H, FFN, KV, D)
    shapes = {"qkv": ((H + 2 * KV * D) / TP, H), "proj": (H, H / TP), "fc1": (2 * FFN / TP, H),
              "fc2": (H, FFN / TP)}
    gemms = {name: tuple(float(gemm_time_s(*mnk, rates)) for mnk in ((TOKENS, n, k), (TOKENS, k, n), (k, n, TOKENS)))
             for name, (n, k) in shapes.items()}
    ar = float(group_collective_time_s("all_reduce", np.array([TOKENS * H * 2.0]), np.array([TP]), np.array([1.0]),
                                       cluster, eff)[0])
    # a ring all-reduce moves 2 (n-1)/n of the 67.1 MB buffer; NVLink 4 on H100 is 450 GB/s a
    # direction, so it cannot take less than 261 us, and the fabric reaches well over half of that
    assert 2 * 7 / 8 * TOKENS * H * 2.0 / 450e9 < ar < 2 * 2 * 7 / 8 * TOKENS * H * 2.0 / 450e9
    return ar, gemms


def test_async_backward_exposes_what_exceeds_each_column_linears_own_gemms():
    ar, g = _hand()
    half = ar / 2.0
    out = _layer()
    # each column linear: its re-gather and reduce-scatter (one all-reduce's time) under its own
    # data- and weight-gradient GEMMs
    exposed_qkv = max(ar - g["qkv"][1] - g["qkv"][2], 0.0)
    exposed_fc1 = max(ar - g["fc1"][1] - g["fc1"][2], 0.0)
    # 376.6 - 110.1 - 99.7 = 166.8 us (156.4 us at 25.2 us a kernel: + 2 x 5.2 us since f7c1ee2)
    assert exposed_fc1 == 0.0 and 160e-6 < exposed_qkv < 175e-6
    # forward: both blocks' all-gather + reduce-scatter pairs (unpipelined); backward: the row-parallel
    # gradients' all-gathers (half an all-reduce each) and what QKV's own GEMMs leave
    expected = 2.0 * ar + 2.0 * half + exposed_qkv + exposed_fc1
    assert float(out["tp_exposed_dense"][0]) == pytest.approx(expected, rel=1e-9)
    # the layer's pooled gradient GEMMs (1.6 ms) would have hidden it all
    pooled = 2.0 * ar + 2.0 * half
    assert sum(d + w for _, d, w in g.values()) > 4.0 * half
    assert float(out["tp_exposed_dense"][0]) - pooled == pytest.approx(exposed_qkv, rel=1e-9)


def test_userbuffers_pipeline_each_collective_with_its_own_gemm():
    ar, g = _hand()
    half = ar / 2.0
    out = _layer(tp_overlap=True)
    gap = lambda t: max(half - t, 0.0)  # noqa: E731
    fwd = gap(g["qkv"][0]) + gap(g["proj"][0]) + gap(g["fc1"][0]) + gap(g["fc2"][0])
    bwd = (max(ar - g["qkv"][1] - g["qkv"][2], 0.0) + gap(g["proj"][1])
           + max(ar - g["fc1"][1] - g["fc1"][2], 0.0) + gap(g["fc2"][1]))
    assert float(out["tp_exposed_dense"][0]) == pytest.approx(fwd + bwd, rel=1e-9)
    assert fwd > 150e-6            # QKV's and the output projection's GEMMs are shorter than their collectives


def test_zero_bubble_b_pass_hides_the_column_collectives_under_their_own_data_gradient_gemms():
    ar, g = _hand()
    half = ar / 2.0
    out = _layer()
    split = float(out["b_split_dense"][0] - out["compute_bwd_split_dense"][0])
    # per block: the column linear's re-gather + reduce-scatter under its own dgrad; the output
    # gradient's all-gather exposed
    expected = sum(max(ar - g[c][1], 0.0) + half for c in ("qkv", "fc1"))
    assert expected > ar + 2.0 * 50e-6     # QKV's dgrad alone leaves ~261 us of its 377 us
    assert split == pytest.approx(expected, rel=1e-9)


def _pooled(tp_coll, sp, ub, async_b, blocks):
    """The former rule: the layer's whole TP traffic under the layer's whole GEMM time."""
    nb = sum(w for w, _ in blocks)
    f = sum(win["tp_col_gemm_fwd_s"] + win["tp_row_gemm_fwd_s"] for _, win in blocks)
    d = sum(win["tp_col_gemm_dgrad_s"] + win["tp_row_gemm_dgrad_s"] for _, win in blocks)
    w = sum(win["tp_col_gemm_wgrad_s"] + win["tp_row_gemm_wgrad_s"] for _, win in blocks)
    tp_fwd = nb * tp_coll
    tp_bwd = nb * tp_coll + np.where(sp, nb / 2.0 * tp_coll, 0.0)
    dep = np.where(sp, nb / 2.0 * tp_coll, 0.0)
    fwd = np.where(ub, np.maximum(tp_fwd - f, 0.0), tp_fwd)
    bwd = np.where(ub, np.maximum(tp_bwd - d - w, 0.0),
                   np.where(async_b, dep + np.maximum(tp_bwd - dep - d - w, 0.0), tp_bwd))
    split = np.where(ub, np.maximum(tp_bwd - d, 0.0),
                     np.where(async_b, dep + np.maximum(tp_bwd - dep - d, 0.0), tp_bwd))
    return fwd, bwd, split


def test_per_linear_exposure_is_never_below_the_pooled_one():
    rng = np.random.default_rng(0)
    n = 4000
    tp_coll = rng.uniform(0.0, 2.0, n)
    sp = rng.random(n) < 0.5
    ub = sp & (rng.random(n) < 0.5)
    async_b = rng.random(n) < 0.7
    keys = [f"tp_{e}_gemm_{p}_s" for e in ("col", "row") for p in ("fwd", "dgrad", "wgrad")]
    blocks = [(rng.choice([0.0, 0.3, 1.0], n), {k: rng.uniform(0.0, 1.5, n) for k in keys}) for _ in range(2)]
    per = tp_exposed_per_linear(tp_coll, sp, ub, async_b, blocks)
    pooled = _pooled(tp_coll, sp, ub, async_b, blocks)
    for p, q in zip(per, pooled):
        assert np.all(p >= q - 1e-12)
    fwd, bwd, split = per
    # a B pass without its W hides no more than the fused backward does
    assert np.all(split >= bwd - 1e-12)
    # and never more than all of the traffic
    nb = sum(w for w, _ in blocks)
    assert np.all(bwd <= nb * tp_coll * np.where(sp, 1.5, 1.0) + 1e-12)
    assert np.all(fwd <= nb * tp_coll + 1e-12)


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen2-57b-a14b", "deepseek-v2", "nemotron-h-8b"])
def test_other_layer_kinds_expose_at_least_the_pooled_traffic_and_at_most_all(name):
    model = load_model(name)
    cluster = load_cluster("dgx-h100")
    eff = load_efficiency("hopper")
    rates = compute_rates(cluster.gpu, eff, "bf16")
    a = np.array
    for sp, ub in ((True, False), (True, True), (False, False)):
        out = layer_times(model, cluster, eff, rates, a([1024.0, 4096.0]), a([2.0, 8.0]), a([1.0, 1.0]),
                          a([sp, sp]), a([0, 0]), a([1.0, 1.0]), a([1.0, 1.0]), a([1.0, 1.0]), a([ub, ub]),
                          a([CP_KIND_CODES[CPKind.RING]] * 2), a([ATTENTION_KERNEL_CODES[AttentionKernel.AUTO]] * 2),
                          a([True, True]), a([False, False]))
        for kind in ("dense", "moe"):
            exposed, total = out[f"tp_base_{kind}"], out[f"tp_total_base_{kind}"]
            assert np.all(np.isfinite(exposed)) and np.all(exposed >= 0.0) and np.all(exposed <= total + 1e-12)
