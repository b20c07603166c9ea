"""SGLang under attention data parallelism splits the LM head over the whole tp x adp group
(``ServingBehaviour.lm_head_split_over_attention_dp``): sgl-project/sglang
python/sglang/srt/models/deepseek_v2.py ``ParallelLMHead(..., use_attn_tp_group=enable_dp_lm_head)``
with ``enable_dp_lm_head`` False by default (server_args.py); vLLM (separate DP engines) and
TensorRT-LLM (``enable_lm_head_tp_in_adp`` False) do not."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from cost_models.inference_layers import layer_rates, lm_head_s
from cost_models.inference_step import lm_head_collectives, step_time
from cost_models.serving_memory import weight_bytes_per_gpu
from hardware_specs.catalog import load_stack
from simulator.serving.aggregated import memory_columns
from simulator.serving.context import ServingContext

GIB = 2**30
V, H = 129_280, 7_168                       # DeepSeek-R1 vocabulary and hidden size (config.json)
#: the head's share the 7 other GPUs of a tp 1 x adp 8 group hold: V h x 2 B x 7/8
SPARED = V * H * 2 * 7 / 8                  # 1,621,688,320 B = 1.51 GiB
#: one request's MLA KV cache at isl + osl / 2 = 1536 tokens (SGLang admits by prompt): 61 layers x
#: (512 latent + 64 rope) x 2 B
KV_REQUEST = 61 * (512 + 64) * 2 * 1536     # 107,937,792 B


@pytest.fixture(scope="module")
def sglang():
    return ServingContext.build("deepseek-r1", "hgx-h200", "sglang", "fp8_block", "fp8_block")


def _today(ctx):
    """The context with the head priced over the attention tp (the engine run with
    --enable-dp-lm-head, and paraplan before this field)."""
    return replace(ctx, stack=replace(ctx.stack, serving=replace(ctx.behaviour, lm_head_split_over_attention_dp=False)))


def test_each_stack_states_how_its_head_is_split_under_attention_dp():
    assert load_stack("sglang-0.5").serving.lm_head_split_over_attention_dp is True
    for name in ("trtllm-1", "vllm-0.11", "vllm-0.14"):
        assert load_stack(name).serving.lm_head_split_over_attention_dp is False


def test_sglang_holds_one_eighth_of_the_head_at_tp1_adp8_and_fits_more_requests(sglang):
    """paraplan serve simulate -m deepseek-r1 -s hgx-h200 -b sglang --tp 1 --adp 8 --moe-ep 8:
    93.91 GiB of weights a GPU and 368 requests a rank before; the head's 7/8 (1.51 GiB) fewer
    now, so floor(pool / KV per request) = 383."""
    new = memory_columns(sglang, 1.0, 8.0, 1.0, 1.0, 8.0, 1024.0, 1024.0)
    old = memory_columns(_today(sglang), 1.0, 8.0, 1.0, 1.0, 8.0, 1024.0, 1024.0)
    assert float(old["weights_bytes"]) - float(new["weights_bytes"]) == pytest.approx(SPARED, rel=1e-12)
    assert float(old["weights_bytes"]) / GIB == pytest.approx(93.91, abs=0.005)
    assert float(new["kv_bytes_per_request"]) == KV_REQUEST
    hbm = sglang.cluster.gpu.hbm_bytes
    pool_old = hbm - float(old["weights_bytes"]) - 10 * GIB       # mem_fraction 1 of total, 10 GiB reserve
    assert int(old["max_batch_per_rank"]) == math.floor(pool_old / KV_REQUEST) == 368
    assert int(new["max_batch_per_rank"]) == math.floor((pool_old + SPARED) / KV_REQUEST) == 383


def test_adp1_and_the_other_engines_keep_todays_numbers(sglang):
    model = sglang.model
    for adp in (1.0, np.array([1.0, 1.0])):
        a = weight_bytes_per_gpu(model, 8.0, adp, 1.0, 1.0, 8.0, "fp8_block", "fp8_block", True)
        b = weight_bytes_per_gpu(model, 8.0, adp, 1.0, 1.0, 8.0, "fp8_block", "fp8_block")
        assert np.array_equal(a, b)
    args = ("fp8_block", "fp8_block", 2.0, 8.0, 1.0, 1.0, 1.0, 8.0, np.array([0.0, 4096.0]), 2048.0,
            np.array([64.0, 8.0]), 1536.0)
    new = step_time(model, sglang.cluster, sglang.efficiency, sglang.behaviour, *args)
    old = step_time(model, sglang.cluster, sglang.efficiency, _today(sglang).behaviour, *args)
    for key in new:
        assert np.array_equal(new[key], old[key]), key
    # a pipeline's largest stage holds the embedding (V h / tp) whichever way the head is split
    a = weight_bytes_per_gpu(model, 1.0, 8.0, 2.0, 1.0, 8.0, "fp8_block", "fp8_block", True)
    b = weight_bytes_per_gpu(model, 1.0, 8.0, 2.0, 1.0, 8.0, "fp8_block", "fp8_block")
    assert a == b


def test_the_head_multiplies_the_group_tokens_against_its_vocab_shard(sglang):
    """tp 1 x adp 8, 32 logits a rank: each GPU multiplies 8 x 32 = 256 gathered rows against its
    V / 8 rows (FLOPs 2 x 256 x V h / 8, the same as one rank's 32 rows against all V), reads
    V h / 8 x 2 B of weights, and samples its own 32 rows."""
    rates = layer_rates(sglang.cluster.gpu, sglang.efficiency, "fp8_block", "fp8_block", 0)
    split = float(lm_head_s(sglang.model, rates, 1.0, 32.0, 8.0))
    gemm = max(2.0 * 256 * V * H / 8 / rates.head_flops_per_s,
               (V * H / 8 * 2.0 + 256 * (H + V / 8) * 2.0) / rates.hbm_bytes_per_s)
    sample = 32 * V * 4.0 * 3.0 / rates.hbm_bytes_per_s
    assert split == pytest.approx(gemm + sample, rel=1e-12)
    assert split < float(lm_head_s(sglang.model, rates, 1.0, 32.0))      # 1/8 of the weights read


def test_the_split_head_adds_its_gather_and_all_gather_to_the_step(sglang):
    """The decode step of tp 1 x adp 8 at 32 requests a rank gains the hidden-state gather (an
    all-reduce of 256 x h x 2 B over the 8 GPUs) and the logits' all-gather (256 x V x 2 B
    gathered on each GPU): on one 8-GPU NVLink domain a ring all-gather moves 7/8 of it."""
    model, cl, eff = sglang.model, sglang.cluster, sglang.efficiency
    comm, kernels = lm_head_collectives(model, cl, eff, sglang.behaviour, 1.0, 8.0, 32.0)
    assert float(kernels) == 2.0
    bw = cl.scaleup.group_bw_bytes_per_s(8.0) * eff.link_bw_fraction
    vocab_ag = 7 / 8 * 256 * V * 2.0 / bw + 7 * cl.scaleup.latency_s
    assert float(comm) > vocab_ag
    args = ("fp8_block", "fp8_block", 2.0, 1.0, 8.0, 1.0, 1.0, 8.0, 0.0, 0.0, 32.0, 1536.0)
    new = step_time(model, cl, eff, sglang.behaviour, *args)
    old = step_time(model, cl, eff, _today(sglang).behaviour, *args)
    assert float(new["comm_s"] - old["comm_s"]) == pytest.approx(float(comm), rel=1e-9)
    assert float(new["lm_head_s"]) < float(old["lm_head_s"])
    # no gather where the head is split over the attention tp alone (adp 1)
    assert float(lm_head_collectives(model, cl, eff, sglang.behaviour, 8.0, 1.0, 32.0)[0]) == 0.0
