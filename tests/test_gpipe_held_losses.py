"""GPipe's last stage holds every in-flight micro-batch's loss between its forward and its
backward: one loss at its peak plus, for each of the other m - 1, what the loss implementation
saves for backward (Megatron's and torch's fp32 softmax, 4 bytes a logit; TE's in-place gradient
and flash-attn's saved logits, the logits' dtype). Other schedules run the head's backward before
its next forward, so hold one; a chunked (fused linear) loss saves nothing vocabulary-sized."""
from __future__ import annotations

import numpy as np
import pytest

from cost_models.cross_entropy import held_loss_bytes_per_logit, loss_saved_bytes_per_logit
from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs import ModelSpec
from planners.vectorized import config_batch
from simulator.heterogeneous.compose import stage_memory_parts
from simulator.parallel_config import ParallelConfig
from simulator.pipeline.schedules import B, BW, F, make_schedule
from simulator.step_model import memory_parts

CLUSTER = load_cluster("dgx-h100")
EFF = efficiency_for_cluster(CLUSTER)
H, S, VOCAB = 1024, 2048, 32000
MODEL = ModelSpec("gpt-8x1024", 8, H, 16, 16, 4 * H, VOCAB, S)


def test_saved_bytes_per_logit_per_implementation():
    # Megatron (both) and torch eager keep an fp32 softmax / log-softmax: 4 whatever the dtype
    for impl in ("megatron_unfused", "megatron_fused", "torch_eager"):
        assert loss_saved_bytes_per_logit(impl, 2.0) == loss_saved_bytes_per_logit(impl, 4.0) == 4.0
    # TE and flash-attn keep a logits-sized tensor in the logits' dtype
    for impl in ("te_triton", "flash_attn_xentropy"):
        assert loss_saved_bytes_per_logit(impl, 2.0) == 2.0
        assert loss_saved_bytes_per_logit(impl, 4.0) == 4.0
    # peak of one (6 in bf16) + 7 saved (4 each) = 34; torch eager's peak is 12: 12 + 28 = 40
    assert held_loss_bytes_per_logit("megatron_fused", 2.0, 8.0) == 34.0
    assert held_loss_bytes_per_logit("torch_eager", 2.0, 8.0) == 40.0
    assert held_loss_bytes_per_logit("te_triton", 2.0, 8.0) == 6.0 + 7 * 2.0
    assert held_loss_bytes_per_logit("megatron_fused", 2.0, 8.0, chunked=True) == 6.0
    assert held_loss_bytes_per_logit("megatron_fused", 2.0, 1.0) == 6.0


def _head_losses_held(kind, p, m, v):
    """Most micro-batches whose forward ran and backward did not on the head's cell, any stage."""
    s = make_schedule(kind, p, m, v)
    last, pos, most = s.path_length - 1, s.op_position, 0
    for st in range(p):
        cur = 0
        for k, u in zip(s.op_kind[s.stage_ptr[st]:s.stage_ptr[st + 1]], pos[s.stage_ptr[st]:s.stage_ptr[st + 1]]):
            if u == last:
                cur += 1 if k == F else -1 if k in (B, BW) else 0
                most = max(most, cur)
    return most


@pytest.mark.parametrize("kind, v, held", [("gpipe", 1, 8), ("1f1b", 1, 1), ("interleaved", 2, 1), ("zb-h1", 1, 1),
                                           ("zb-h2", 1, 1), ("zb-v", 2, 1), ("dualpipe", 2, 1),
                                           ("dualpipev", 2, 1)])
def test_only_gpipe_holds_several_losses(kind, v, held):
    assert _head_losses_held(kind, 4, 8, v) == held


def _logits(schedule, impl="megatron_fused", chunk=0):
    # one stage, tp 2, micro-batch 1, global batch 8: m = 8
    batch = config_batch({"dp": np.array([1]), "tp": np.array([2]), "pp": np.array([1]), "cp": np.array([1]),
                          "micro_batch": np.array([1]), "zero_stage": np.array([0])}, "bf16", 8,
                         defaults={"cross_entropy": impl, "schedule": schedule, "loss_chunk_tokens": chunk})
    return memory_parts(MODEL, CLUSTER, EFF, batch)["logits_bytes"][0]


@pytest.mark.parametrize("schedule, impl, per_logit", [("gpipe", "megatron_fused", 6.0 + 7 * 4.0),
                                                       ("gpipe", "torch_eager", 12.0 + 7 * 4.0),
                                                       ("gpipe", "te_triton", 6.0 + 7 * 2.0),
                                                       ("1f1b", "megatron_fused", 6.0)])
def test_step_model_and_pooled_model_hold_gpipes_losses(schedule, impl, per_logit):
    expected = S * VOCAB / 2 * per_logit
    assert _logits(schedule, impl) == pytest.approx(expected, rel=1e-12)
    settings = ParallelConfig(tp=2, micro_batch=1, global_batch=8, schedule=schedule, cross_entropy=impl)
    in_flight = 8.0 if schedule == "gpipe" else 1.0
    pooled = stage_memory_parts(MODEL, settings, np.array([1e8]), 0, np.array([1.0]), np.array([2.0]), np.array([1.0]),
                                "none", np.array([0.0]), np.array([0.0]), np.array([8]), np.array([in_flight]),
                                np.array([1.0]))
    assert pooled["logits_bytes"][0] == pytest.approx(expected, rel=1e-12)


def test_a_chunked_loss_keeps_one_chunk_under_gpipe():
    assert _logits("gpipe", chunk=512) == pytest.approx(512 * VOCAB / 2 * 6.0, rel=1e-12)


@pytest.mark.parametrize("chunk", [S, 2 * S])
def test_a_chunk_as_large_as_the_micro_batch_is_the_whole_loss_under_gpipe(chunk):
    # one micro-batch holds S tokens: a 'chunk' of S or more cuts nothing (the torchtitan export
    # writes the unchunked CrossEntropyLoss for it), so GPipe holds all 8 losses, 6 + 7 x 4 a logit
    assert _logits("gpipe", chunk=chunk) == pytest.approx(S * VOCAB / 2 * (6.0 + 7 * 4.0), rel=1e-12)
