"""The stage that computes the loss never holds its logits and the recompute buffer at once: a
micro-batch's backward there starts with the loss's and the LM head's backward, which free the
logits, before the chunk's last layer is recomputed. Its peak holds the larger of the two (GPipe's
other held losses stay), except under DualPipe, whose head rank runs the other direction's
backward while a loss is open."""
from __future__ import annotations

import numpy as np
import pytest

from paraplan.api import simulate_report
from planners.vectorized import config_batch
from simulator.memory_rows import loss_freed_bytes
from simulator.pipeline.schedules import B, BW, F, make_schedule

GIB = 2.0 ** 30


def _other_backwards_while_a_loss_is_open(kind, p, m, v):
    """Backward ops of cells other than the head's that run on a stage while one of the head's
    losses has run its forward and not its backward (every stage, the generated order)."""
    s = make_schedule(kind, p, m, v)
    last, pos, count = s.path_length - 1, s.op_position, 0
    for st in range(p):
        a, b = s.stage_ptr[st], s.stage_ptr[st + 1]
        open_ = 0
        for k, u in zip(s.op_kind[a:b], pos[a:b]):
            if u == last:
                open_ += 1 if k == F else -1 if k in (B, BW) else 0
            elif k in (B, BW) and open_ > 0:
                count += 1
    return count


@pytest.mark.parametrize("kind, v, overlaps", [("gpipe", 1, False), ("1f1b", 1, False), ("interleaved", 2, False),
                                               ("zb-h1", 1, False), ("zb-h2", 1, False), ("zb-v", 2, False),
                                               ("dualpipe", 2, True), ("dualpipev", 2, True)])
def test_only_dualpipe_recomputes_another_chunk_while_a_loss_is_open(kind, v, overlaps):
    assert (_other_backwards_while_a_loss_is_open(kind, 4, 8, v) > 0) == overlaps


def _freed(schedule):
    # llama3-8b's vocabulary 128,256, 8,192 tokens, tp 8, Megatron's fused loss
    batch = config_batch({"dp": np.array([1]), "tp": np.array([8]), "pp": np.array([2]), "cp": np.array([1]),
                          "micro_batch": np.array([1]), "zero_stage": np.array([0])}, "bf16", 8,
                         defaults={"cross_entropy": "megatron_fused", "schedule": schedule})
    return loss_freed_bytes(batch, 8192 * 128256 / 8, 2.0)[0]


def test_the_freed_logits_are_one_micro_batchs_loss_peak_and_none_under_dualpipe():
    # Megatron's loss peaks at 6 B a logit in bf16 (the logits and an fp32 softmax), GPipe too
    # (its other held losses are not freed: they stay in logits_bytes)
    for schedule in ("1f1b", "gpipe", "zb-h1"):
        assert _freed(schedule) == pytest.approx(8192 * 128256 / 8 * 6.0, rel=1e-12)
    assert _freed("dualpipe") == 0.0


def test_the_last_stage_holds_the_larger_of_its_logits_and_the_recompute_buffer():
    # llama3-70b, tp 8 pp 4, uniform groups of 4 layers recomputed: the last stage's logits,
    # 8,192 x 128,256 / 8 x 6 B = 0.734 GiB, are freed before its last group (1.03 GiB) is
    # recomputed, so its tensors are 27.218 - 0.734 = 26.484 GiB, x 1.05 + 1.5 GiB reserve =
    # 29.31 GiB; the job's peak moves to stage 0 (29.56 GiB, unchanged: no logits there)
    report, _, _ = simulate_report("llama3-70b", "dgx-h100", gpus=64, tp=8, pp=4, micro_batch=1, global_batch=128,
                                   sequence_parallel=True, zero_stage=1, recompute="full", recompute_num_layers=4,
                                   recompute_method="uniform")
    stages = {s["stage"] if "stage" in s else i: s for i, s in enumerate(report.stage_memory)}
    last = stages[3]
    assert last["parts_bytes"]["logits_bytes"] == pytest.approx(8192 * 128256 / 8 * 6.0, rel=1e-9)
    assert last["memory_bytes"] / GIB == pytest.approx(29.31, abs=0.005)
    assert report.memory_bytes / GIB == pytest.approx(29.56, abs=0.005)
    # the parts still sum to the total: the recompute buffer shows what it adds beyond the logits
    assert sum(last["parts_bytes"].values()) == pytest.approx(last["memory_bytes"], rel=1e-12)
    assert last["parts_bytes"]["recompute_buffers_bytes"] / GIB == pytest.approx(1.03 - 0.734, abs=0.005)


def test_one_stage_torchtitan_run_drops_the_recompute_buffer_under_its_larger_logits():
    # llama3-8b on 8 H100, torchtitan (torch eager loss: 12 B a logit, 8,192 x 128,256 x 12 B =
    # 11.74 GiB of logits), ZeRO-3, full recomputation: the one-layer recompute buffer (1.00 GiB)
    # comes after the logits are freed: 36.20 - 1.00 x 1.05 = 35.15 GiB
    report, _, _ = simulate_report("llama3-8b", "dgx-h100", gpus=8, stack="torchtitan", micro_batch=1,
                                   global_batch=8, zero_stage=3, recompute="full")
    parts = report.memory_breakdown_bytes
    assert parts["logits_bytes"] == pytest.approx(8192 * 128256 * 12.0, rel=1e-9)
    assert parts["recompute_buffers_bytes"] == 0.0
    assert report.memory_bytes / GIB == pytest.approx(35.15, abs=0.01)
