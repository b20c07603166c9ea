"""The memory-bound passes a load-balanced causal ring (Transformer Engine ``cp_comm_type="p2p"``)
runs beyond one fused attention call, by hand (``cost_models.context_parallel``)."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from cost_models import context_parallel as cpm
from model_specs import load_model
from toy_hardware import toy_cluster, toy_efficiency

# Llama3-8B at 1M tokens on CP16 x TP4 (the NeMo long-sequence B200 row): 65,536 tokens a rank,
# 32 / 4 = 8 query heads, 8 / 4 = 2 K/V heads, head dim 128.
T, H, G, D = 65536, 8, 2, 128
Q = T * H * D            # 67,108,864 elements of Q (and of O)
KV = T * G * (D + D)     # 33,554,432 elements of K and V together


def test_forward_bytes_are_the_merge_per_later_step_plus_kv_staging():
    fwd, _ = cpm.ring_attention_extra_bytes(T, H, G, D, D, 16)
    # 15 later steps x 10 B x O (= Q here) merge + 4 B x KV staging once
    # = 15 x 671,088,640 + 134,217,728 (the half copies overlap the other stream's kernel)
    assert fwd == pytest.approx(15 * 10 * Q + 4 * KV)
    assert fwd == pytest.approx(10_200_547_328)


def test_backward_bytes_are_gradient_accumulation_plus_q_o_do_half_copies():
    _, bwd = cpm.ring_attention_extra_bytes(T, H, G, D, D, 16)
    # per later step, the step on Q's second half: 6 B x (Q / 2 + KV) accumulation (half of dQ, all
    # of dK/dV) + 2 B x (Q + 2 O) half copies = 402,653,184 + 402,653,184 = 805,306,368; the step on
    # K/V's first half, 6 B x (Q + KV / 2) + 2 B x KV = 503,316,480 + 67,108,864, is the cheaper
    assert bwd == pytest.approx(15 * (6 * (Q / 2 + KV) + 2 * 3 * Q) + 4 * KV)
    assert bwd == pytest.approx(15 * 805_306_368 + 134_217_728)


def test_backward_takes_the_costlier_of_the_two_kinds_of_later_step():
    # 1 query head and 4 K/V heads of 128 a rank, t = 1,000 tokens: q = 128,000, kv = 1,024,000
    # elements. Q-half step: 6 B x (q / 2 + kv) + 2 B x 3q = 6,528,000 + 768,000 = 7,296,000;
    # K/V-half step: 6 B x (q + kv / 2) + 2 B x kv = 3,840,000 + 2,048,000 = 5,888,000. The ring
    # waits for its slowest rank, so the Q-half step is priced, plus 4 B x kv of staging.
    t = 1000
    _, bwd = cpm.ring_attention_extra_bytes(t, 1, 4, 128, 128, 2)
    assert bwd == pytest.approx(7_296_000 + 4 * 1_024_000)
    # 8 query heads and 1 K/V head of 64 (q = 512,000, kv = 128,000): Q-half 6 x 384,000 + 2 x
    # 1,536,000 = 5,376,000 against K/V-half 6 x 576,000 + 256,000 = 3,712,000
    _, bwd = cpm.ring_attention_extra_bytes(t, 8, 1, 64, 64, 2)
    assert bwd == pytest.approx(5_376_000 + 4 * 128_000)


def test_no_ring_no_extra_bytes_and_arrays_work():
    fwd, bwd = cpm.ring_attention_extra_bytes(np.array([T, T]), H, G, D, D, np.array([1, 2]))
    assert fwd[0] == 0 and bwd[0] == 0
    assert fwd[1] == pytest.approx(10 * Q + 4 * KV)
    assert bwd[1] == pytest.approx(6 * (Q / 2 + KV) + 6 * Q + 4 * KV)


def test_compute_time_is_launches_plus_bytes_over_achieved_bandwidth():
    rates = SimpleNamespace(kernel_overhead_s=5e-6, hbm_bytes_per_s=5e12)
    fwd, bwd = cpm.ring_attention_compute_s(T, H, G, D, D, 16, rates)
    assert fwd == pytest.approx(15 * 2 * 5e-6 + 10_200_547_328 / 5e12)
    assert bwd == pytest.approx(15 * 2 * 5e-6 + (15 * 805_306_368 + 134_217_728) / 5e12)


def test_hybrid_prices_the_ring_passes_on_the_shapes_after_the_ulysses_exchange():
    """Hybrid CP runs the ring over ``r = cp / u`` ranks on what the Ulysses all-to-all leaves a
    rank: ``u`` times the tokens and ``1 / u`` of the query heads; K/V heads fewer than ``u`` are
    replicated up to ``u`` first, so each rank ends with one. 8 GPUs a node, 8,192 tokens a rank."""
    rates = SimpleNamespace(kernel_overhead_s=5e-6, hbm_bytes_per_s=5e12)
    t, launches = 8192, 2 * 5e-6

    def costs(model, cp, tp):
        return cpm.context_parallel_costs(model, np.array([2, 0]), t, cp, tp, 1e-3, 2e-3, toy_cluster(),
                                          toy_efficiency(), rates=rates)

    # Llama3-8B (32 query, 8 K/V heads of 128), cp 8 x tp 2: u = gcd(8, 8 / 2, 32 / 2) = 4, r = 2.
    # After the exchange 4t tokens of 16 / 4 = 4 query heads and 4 / 4 = 1 K/V head: one later step
    # of Q = O = 4t x 4 x 128 = 2048t, KV = 4t x 1 x 256 = 1024t elements.
    c = costs(load_model("llama3-8b"), 8, 2)
    fwd_bytes = 10 * 2048 * t + 4 * 1024 * t
    bwd_bytes = 6 * (1024 + 1024) * t + 2 * 3 * 2048 * t + 4 * 1024 * t
    assert c["fwd_compute_s"][0] == pytest.approx(launches + fwd_bytes / 5e12)
    assert c["bwd_compute_s"][0] == pytest.approx(launches + bwd_bytes / 5e12)
    # the pure ring beside it (same row array): 7 later steps of t tokens, 16 query and 4 K/V heads
    assert c["fwd_compute_s"][1] == pytest.approx(7 * launches + (7 * 10 * 2048 * t + 4 * 1024 * t) / 5e12)

    # 2 K/V heads, cp 16 x tp 1: u = gcd(16, 8, 32) = 8 > 2 K/V heads, replicated to 8, one a rank;
    # 8t tokens of 32 / 8 = 4 query heads, r = 2: Q = 8t x 4 x 128 = 4096t, KV = 8t x 1 x 256 = 2048t
    c = costs(replace(load_model("llama3-8b"), num_kv_heads=2), 16, 1)
    fwd_bytes = 10 * 4096 * t + 4 * 2048 * t
    bwd_bytes = 6 * (2048 + 2048) * t + 2 * 3 * 4096 * t + 4 * 2048 * t
    assert c["fwd_compute_s"][0] == pytest.approx(launches + fwd_bytes / 5e12)
    assert c["bwd_compute_s"][0] == pytest.approx(launches + bwd_bytes / 5e12)
