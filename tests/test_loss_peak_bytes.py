"""The loss's peak bytes per logit on the last stage: the logits in the training dtype and an
fp32 softmax copy (6 bytes in 16-bit training, 8 in fp32), or an implementation's own peak
(torch's eager loss: 12; flash-attn's fused loss: the logits and their gradient, 4), priced the same by the one-kind step model and the pooled model."""
from __future__ import annotations

import numpy as np
import pytest

from cost_models import memory
from cost_models.cross_entropy import CROSS_ENTROPY_CODES, loss_peak_bytes_per_logit
from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs import ModelSpec
from planners.vectorized import config_batch
from simulator.heterogeneous.compose import stage_memory_parts
from simulator.parallel_config import ParallelConfig
from simulator.step_model import memory_parts

CLUSTER = load_cluster("dgx-h100")
EFF = efficiency_for_cluster(CLUSTER)
H, S, VOCAB = 1024, 2048, 32000
MODEL = ModelSpec("gpt-8x1024", 8, H, 16, 16, 4 * H, VOCAB, S)


def test_bytes_per_logit_follow_the_training_dtype_unless_the_implementation_fixes_them():
    assert loss_peak_bytes_per_logit("megatron_fused") == memory.LOGIT_BYTES == 6.0
    assert loss_peak_bytes_per_logit("megatron_unfused", 4.0) == 8.0       # fp32 logits + fp32 softmax
    assert loss_peak_bytes_per_logit("torch_eager", 2.0) == loss_peak_bytes_per_logit("torch_eager", 4.0) == 12.0
    codes = np.array([CROSS_ENTROPY_CODES["te_triton"], CROSS_ENTROPY_CODES["torch_eager"]])
    assert loss_peak_bytes_per_logit(codes, np.array([4.0, 2.0])).tolist() == [8.0, 12.0]
    # flash-attn's fused loss (llm-foundry): no fp32 softmax, the 16-bit logits it saved and the
    # 16-bit gradient its backward writes into a new tensor: 2 + 2 (fp32 logits: 4 + 4)
    assert loss_peak_bytes_per_logit("flash_attn_xentropy") == 4.0
    assert loss_peak_bytes_per_logit("flash_attn_xentropy", 4.0) == 8.0
    codes = np.array([CROSS_ENTROPY_CODES["flash_attn_xentropy"], CROSS_ENTROPY_CODES["megatron_fused"]])
    assert loss_peak_bytes_per_logit(codes, 2.0).tolist() == [4.0, 6.0]


@pytest.mark.parametrize("dtype, impl, per_logit", [("bf16", "megatron_fused", 6.0), ("fp32", "megatron_fused", 8.0),
                                                    ("tf32", "te_triton", 8.0), ("bf16", "torch_eager", 12.0),
                                                    ("bf16", "flash_attn_xentropy", 4.0)])
def test_step_model_and_pooled_model_keep_the_same_logits(dtype, impl, per_logit):
    # one stage, tp 2, micro-batch 1: S x VOCAB / 2 logits on the GPU
    expected = S * VOCAB / 2 * per_logit
    batch = config_batch({"dp": np.array([1]), "tp": np.array([2]), "pp": np.array([1]), "cp": np.array([1]),
                          "micro_batch": np.array([1]), "zero_stage": np.array([0])}, dtype, 8,
                         defaults={"cross_entropy": impl})
    assert memory_parts(MODEL, CLUSTER, EFF, batch)["logits_bytes"][0] == pytest.approx(expected, rel=1e-12)
    settings = ParallelConfig(tp=2, micro_batch=1, global_batch=8, dtype=dtype, cross_entropy=impl)
    pooled = stage_memory_parts(MODEL, settings, np.array([1e8]), 0, np.array([1.0]), np.array([2.0]), np.array([1.0]),
                                "none", np.array([0.0]), np.array([0.0]), np.array([8]), np.array([1.0]),
                                np.array([1.0]))
    assert pooled["logits_bytes"][0] == pytest.approx(expected, rel=1e-12)
