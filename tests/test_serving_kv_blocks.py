"""A request's KV cache is held in the engine's whole blocks (pages), not per token: vLLM
allocates blocks of 16 tokens on CUDA (vllm/platforms/cuda.py check_and_update_config: an unset
--block-size becomes 16), so a request of 1 + 2 tokens holds a whole 16-token block. Llama-3.1-70B
at tp 1 was said to have room for 2,956 such requests in 1.8 GiB where about 368 fit."""
from __future__ import annotations

import numpy as np
import pytest

from cli_results import completed
from cost_models.kv_cache import kv_held_tokens
from hardware_specs.errors import InputError
from hardware_specs.serving_behaviour import ServingBehaviour
from simulator.serving.aggregated import memory_columns
from simulator.serving.context import ServingContext

#: Llama-3.1-70B KV per token at tp 1, 16-bit: 80 layers x (K + V) x 8 KV heads x 128 x 2 bytes
KV_PER_TOKEN_70B = 80 * 2 * 8 * 128 * 2


def test_held_tokens_round_up_to_whole_blocks():
    assert KV_PER_TOKEN_70B == 327_680
    np.testing.assert_array_equal(kv_held_tokens(np.array([1.0, 2.0, 16.0, 17.0, 1024.0]), 16),
                                  [16.0, 16.0, 16.0, 32.0, 1024.0])
    np.testing.assert_array_equal(kv_held_tokens(np.array([1.0, 2.5]), 1), [1.0, 2.5])


def test_each_stack_states_its_engines_default_block():
    # vLLM --block-size 16 (CUDA), SGLang --page-size 1, TensorRT-LLM tokens_per_block 32
    for stack, block in (("vllm", 16), ("sglang", 1), ("trtllm", 32)):
        ctx = ServingContext.build("llama3.1-70b", "dgx-h100", stack, "bf16")
        assert ctx.behaviour.kv_block_tokens == block, stack
    with pytest.raises(InputError, match="kv_block_tokens"):
        ServingBehaviour(kv_block_tokens=0)


def test_a_three_token_request_holds_a_whole_vllm_block():
    ctx = ServingContext.build("llama3.1-70b", "dgx-h100", "vllm", "fp8")     # serve simulate's default
    assert ctx.kv_bytes == 2.0          # a 16-bit KV cache, as the per-token count above
    mem = memory_columns(ctx, np.array([1.0]), np.array([1.0]), np.array([1.0]), np.array([1.0]), np.array([1.0]),
                         1.0, 2.0)
    # isl 1 + osl 2: a running request's mean context 1 + 2 / 2 = 2 tokens, in one 16-token block
    assert mem["kv_bytes_per_request"][0] == 16 * KV_PER_TOKEN_70B
    pool = mem["kv_pool_bytes"][0]
    assert mem["max_batch_per_rank"][0] == pool // (16 * KV_PER_TOKEN_70B)
    # about 1.8 GiB free: ~368 requests of 5.24 MB, not ~2,950 of 2 tokens' 655 kB
    assert 360 <= mem["max_batch_per_rank"][0] <= 375


def test_serve_simulate_says_how_many_whole_block_requests_fit():
    res = completed("serve", "simulate", "-m", "llama3.1-70b", "-s", "dgx-h100", "--isl", "1", "--osl", "2",
                    "--batch", "3000")
    assert res.returncode == 2
    assert "room for 2956" not in res.stderr and "so at most 3" in res.stderr, res.stderr
