"""A mixed step's token budget holds its decodes and prompts together
(``simulator.serving.step_budget``, ``simulator.serving.aggregated.evaluate_agg``).

vLLM V1 (vllm/v1/core/sched/scheduler.py ``Scheduler.schedule``) and TensorRT-LLM
(cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp) schedule the running decodes first, each
taking 1 + k tokens (its last token and k drafts) of ``max_num_batched_tokens`` /
``max_num_tokens``, and give the prompts what is left; SGLang's mixed chunk
(schedule_policy.py ``PrefillAdder``) takes one token per running request off the chunk. The
numbers below are derived by hand from those rules."""
import dataclasses

import numpy as np

from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.serving_efficiency import ServingEfficiency
from simulator.serving.context import ServingContext
from simulator.serving.evaluate import evaluate_agg_columns
from simulator.serving.step_budget import budget_tokens_per_decode, decodes_per_step, prompt_step

VLLM = ServingBehaviour(decode_budget_share="with_drafts")
SGLANG_MIXED = ServingBehaviour(decode_budget_share="one_per_request")


def test_riders_with_drafts_leave_the_prompts_what_is_left_of_the_budget():
    # 547 decodes x (1 + 8 drafts) = 4923 tokens of 8192: 3269 prompt tokens (the repro)
    per = budget_tokens_per_decode(VLLM, 8)
    assert per == 9.0
    prompt, riders = prompt_step(VLLM, 8192.0, 547.0, per, 547.0 * 256.0, 256.0, chunked=True)
    assert float(prompt) == 8192 - 547 * 9 == 3269
    assert float(riders) == 547
    # fewer prompt tokens waiting than the room: all of them
    prompt, _ = prompt_step(VLLM, 8192.0, 100.0, 1.0, 1024.0, 1024.0, chunked=True)
    assert float(prompt) == 1024


def test_decodes_beyond_the_budget_wait_for_a_later_step():
    # 8192 / 9 = 910.2: a step holds 910 decodes of 8 drafts; with a prompt waiting the step
    # keeps room for one prompt token, floor(8191 / 9) = 910 decodes ride and 8192 - 8190 = 2 are prompt
    assert float(decodes_per_step(VLLM, 8192.0, 8)) == 910
    prompt, riders = prompt_step(VLLM, 8192.0, 1000.0, 9.0, 1e6, 256.0, chunked=True)
    assert float(riders) == 910 and float(prompt) == 2
    assert float(prompt) + float(riders) * 9 <= 8192
    # an unchunked engine (TensorRT-LLM's default) schedules a whole prompt only beside the
    # decodes that leave room for it: 8192-token budget, 1024-token prompts, 4 tokens a decode:
    # floor((8192 - 1024) / 4) = 1792 decodes ride, and (8192 - 1792 x 4) / 1024 = 1 prompt
    prompt, riders = prompt_step(VLLM, 8192.0, 2000.0, 4.0, 8 * 1024.0, 1024.0, chunked=False)
    assert float(riders) == 1792 and float(prompt) == 1024
    # 1000 decodes of 4 tokens leave 4192: 4 whole prompts of 1024
    prompt, riders = prompt_step(VLLM, 8192.0, 1000.0, 4.0, 8 * 1024.0, 1024.0, chunked=False)
    assert float(riders) == 1000 and float(prompt) == 4096


def test_sglang_mixed_chunk_takes_one_token_a_running_request_and_runs_every_decode():
    assert budget_tokens_per_decode(SGLANG_MIXED, 8) == 1.0
    assert np.isinf(decodes_per_step(SGLANG_MIXED, 8192.0, 8))
    prompt, riders = prompt_step(SGLANG_MIXED, 8192.0, 547.0, 1.0, 1e6, 256.0, chunked=True)
    assert float(prompt) == 8192 - 547 and float(riders) == 547


def test_the_priced_mixed_step_holds_no_more_than_the_exported_budget():
    """The issue's repro: DeepSeek-R1 on an HGX H200, vLLM, attention DP 8, 547 requests per
    rank, MTP with 8 drafts: the step a prompt is packed into held 8192 prompt tokens and
    547 x 9 = 4923 decode tokens, 13115 against the 8192 of --max-num-batched-tokens."""
    ctx = ServingContext.build("deepseek-r1", "hgx-h200", "vllm-0.14", "fp8_block", "fp8_block", speculative_tokens=8)
    cols = {"tp": 1, "pp": 1, "adp": 8, "moe_tp": 1, "moe_ep": 8, "batch": 547, "isl": 256, "osl": 1024}
    out = {k: float(np.asarray(v).ravel()[0]) for k, v in evaluate_agg_columns(ctx, cols).items()}
    riders, prompt = out["packed_decode_requests"], out["packed_prefill_tokens"]
    assert riders > 500                                     # most of the 547 clients are decoding
    assert prompt + riders * 9 <= 8192 + 1e-9
    # the room left: 8192 - 9 x riders, every waiting prompt token (547 x 256) being more
    assert abs(prompt - (8192 - 9 * riders)) < 1e-6


def _agg(ctx, batch, isl, osl):
    cols = {"tp": 1, "pp": 1, "adp": 8, "moe_tp": 1, "moe_ep": 8, "batch": batch, "isl": isl, "osl": osl}
    return {k: np.asarray(v, dtype=float).ravel() for k, v in evaluate_agg_columns(ctx, cols).items()}


def test_ttft_never_decreases_as_more_decodes_share_the_budget():
    """Prompts of 8192 tokens on vLLM's 8192-token budget with 8 drafts a decode: every decode
    riding a prompt's chunk takes 9 of its tokens, so with more clients (more riders) the prompt
    needs more, never fewer, steps and its TTFT cannot fall; the priced chunk steps never exceed
    the budget."""
    ctx = ServingContext.build("deepseek-r1", "hgx-h200", "vllm-0.14", "fp8_block", "fp8_block", speculative_tokens=8)
    batches = np.array([2.0, 8.0, 16.0, 32.0, 48.0])       # 48: the most whose KV cache fits
    out = _agg(ctx, batches, np.full(5, 8192.0), np.full(5, 1024.0))
    ttft, own = out["ttft_s"], out["prefill_own_s"]
    assert np.all(np.diff(ttft) >= 0) and np.all(np.diff(own) >= 0), (ttft, own)
    assert np.all(out["packed_prefill_tokens"] + 9 * out["packed_decode_requests"] <= 8192 + 1e-9)
    # 48 clients: the decodes riding take 9 x riders tokens, the chunk 8192 - 9 x riders < 8192,
    # so the prompt no longer fits one step: its own prefill is longer than at 2 clients' one step
    assert out["packed_decode_requests"][-1] > 1 and out["packed_prefill_tokens"][-1] < 8192
    assert own[-1] > own[0]


def test_a_stack_field_names_how_decodes_share_the_budget():
    from hardware_specs.catalog import load_stack
    assert load_stack("vllm-0.14").serving.decode_budget_share == "with_drafts"
    assert load_stack("vllm-0.11").serving.decode_budget_share == "with_drafts"
    assert load_stack("trtllm-1").serving.decode_budget_share == "with_drafts"
    assert load_stack("sglang-0.5").serving.decode_budget_share == "one_per_request"
    try:
        dataclasses.replace(VLLM, decode_budget_share="all")
    except Exception as err:                      # InputError: an unknown value is refused
        assert "decode_budget_share" in str(err)
    else:
        raise AssertionError("an unknown decode_budget_share was accepted")
