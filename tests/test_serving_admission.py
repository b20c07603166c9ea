"""KV-cache admission of the aggregated serving model (``simulator.serving.aggregated``): how many
requests an engine admits past their first token and how many it keeps decoding, by the stack's
documented ``kv_admission``, with hand-derived pool arithmetic and Little's-law checks."""
import math

import numpy as np
import pytest

from hardware_specs.serving_efficiency import ServingEfficiency
from simulator.serving.aggregated import memory_columns
from simulator.serving.context import ServingContext
from simulator.serving.evaluate import evaluate_agg_columns

#: Llama-3.1-8B: 32 layers, 8 KV heads of 128 -> 2 x 8 x 128 = 2048 KV elements per token and layer
KV_ELEMENTS_PER_TOKEN = 2 * 8 * 128 * 32
PRIOR = ServingEfficiency(generation="hopper")


def _ctx(backend, fmt="fp8"):
    return ServingContext.build("llama3.1-8b", "dgx-h100", backend, fmt, fmt, efficiency=PRIOR)


def test_vllm_admits_the_prompts_whose_blocks_fit_and_keeps_the_mean_context_running():
    ctx = _ctx("vllm-0.14", "fp8_block")                       # no KV format in the checkpoint
    isl, osl = 8192, 8192
    mem = memory_columns(ctx, 1, 1, 1, 1, 1, isl, osl)
    pool = float(mem["kv_pool_bytes"])
    per_token = KV_ELEMENTS_PER_TOKEN * 2.0                      # bf16 KV: 'auto' is the model dtype
    assert mem["max_admitted_per_rank"] == math.floor(pool / (isl * per_token))
    assert mem["max_batch_per_rank"] == math.floor(pool / ((isl + osl / 2) * per_token))
    # 80 GiB H100, ~8.5 GB of fp8 weights: ~60 GiB of pool at 128 KiB of bf16 KV per token,
    # ~480k tokens: ~40 requests at 12,288 tokens held, ~60 prompts of 8192
    assert 35 <= mem["max_batch_per_rank"] <= 45 and 55 <= mem["max_admitted_per_rank"] <= 65


def test_kv_dtype_follows_a_modelopt_checkpoint_where_the_engine_release_reads_it():
    for stack in ("trtllm-1", "sglang-0.5", "vllm-0.14"):
        assert _ctx(stack, "fp8").kv_bytes == 1.0              # hf_quant_config kv_cache_quant_algo FP8
        assert _ctx(stack, "nvfp4").kv_bytes == 1.0
        assert _ctx(stack, "fp8_block").kv_bytes == 2.0        # the authors' block-FP8: 16-bit KV
    assert _ctx("vllm-0.11", "fp8").kv_bytes == 2.0            # before vLLM PR #29980: the model dtype


def test_trtllm_reserves_the_whole_request():
    ctx = _ctx("trtllm-1", "fp8")
    isl, osl = 8192, 8192
    mem = memory_columns(ctx, 1, 1, 1, 1, 1, isl, osl)
    pool = float(mem["kv_pool_bytes"])
    n = math.floor(pool / ((isl + osl) * KV_ELEMENTS_PER_TOKEN * 1.0))
    assert mem["max_batch_per_rank"] == mem["max_admitted_per_rank"] == n


def _agg(ctx, batch, isl, osl):
    cols = {"tp": 1, "pp": 1, "adp": 1, "moe_tp": 1, "moe_ep": 1, "batch": batch, "isl": isl, "osl": osl}
    return {k: float(np.asarray(v).ravel()[0]) for k, v in evaluate_agg_columns(ctx, cols).items()}


def test_admitted_requests_beyond_the_running_bound_take_turns_decoding():
    """vLLM, more clients than decode slots but prompts that fit: no wait before the first token;
    the rank finishes n_fit requests per gen steps of decode steps stretched by the other clients'
    prompts (1 - u (b - 1) / b), and the
    rest of each client's loop is decode time (Little's law)."""
    ctx = _ctx("vllm-0.14")
    isl, osl = 2048, 16384
    probe = memory_columns(ctx, 1, 1, 1, 1, 1, isl, osl)
    n_fit, n_admit = float(probe["max_batch_per_rank"]), float(probe["max_admitted_per_rank"])
    batch = math.floor((n_fit + n_admit) / 2)
    assert n_fit < batch <= n_admit
    out = _agg(ctx, batch, isl, osl)
    gen = osl - 1
    # a decode step is stretched by the other clients' prompts, (b - 1) / b of the prompt share
    others = (batch - 1) / batch
    x = n_fit * (1.0 - out["prefill_share_fraction"] * others) / (gen * out["decode_step_s"])
    assert out["tokens_per_s_per_gpu"] == pytest.approx(x * osl, rel=1e-6)
    assert out["queue_wait_s"] == 0.0
    assert out["tpot_s"] == pytest.approx((batch / x - out["ttft_s"]) / gen, rel=1e-6)
    assert out["tpot_s"] > out["decode_step_s"] * batch / n_fit * 0.99
    assert out["fits"] == 0.0                                # the planner still calls it over capacity


def test_clients_beyond_a_reserved_pool_wait_for_a_slot_before_their_first_token():
    """TensorRT-LLM GUARANTEED_NO_EVICT: n requests hold their isl + osl reservation; the other
    b - n clients wait (b - n) / X (Little's law) on top of the admitted requests' TTFT."""
    ctx = _ctx("trtllm-1")
    isl, osl = 8192, 8192
    n = float(memory_columns(ctx, 1, 1, 1, 1, 1, isl, osl)["max_batch_per_rank"])
    out_n = _agg(ctx, n, isl, osl)
    out = _agg(ctx, 2 * n, isl, osl)
    x = out["tokens_per_s_per_gpu"] / osl
    assert out["queue_wait_s"] == pytest.approx(n / x, rel=1e-9)
    assert out["ttft_s"] == pytest.approx(out_n["ttft_s"] + n / x, rel=1e-6)
    assert out["tpot_s"] == pytest.approx(out_n["tpot_s"], rel=1e-9)
