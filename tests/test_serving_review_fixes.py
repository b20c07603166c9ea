"""Four serving checks a review found broken, each against hand-derived values: a prompt's last
chunk carries what is left of it; a tensor degree that splits no whole K/V head is refused; an
engine that runs whole prompts sizes its activations for the prompt it runs; and a pipeline's
largest stage holds ceil(L / pp) layers."""
from __future__ import annotations

import numpy as np
import pytest

from cost_models.inference_step import step_time
from cost_models.kv_cache import kv_bytes_per_request, largest_stage_share
from cost_models.params import serving_tp_splits_kv_heads
from cost_models.serving_memory import activation_bytes_per_gpu, weight_bytes_per_gpu
from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from simulator.serving.aggregated import memory_columns
from simulator.serving.context import ServingContext
from simulator.serving.deployment import Deployment, WorkerLayout
from simulator.serving.evaluate import evaluate_agg_columns
from simulator.serving.simulate import simulate_serving


def _agg(ctx, isl, batch=1.0, osl=128, tp=1):
    return evaluate_agg_columns(ctx, {"tp": tp, "pp": 1, "adp": 1, "moe_tp": tp, "moe_ep": 1, "batch": batch,
                                      "isl": isl, "osl": osl})


def test_a_prompt_one_token_past_the_budget_pays_one_token_more_not_a_whole_chunk():
    """Llama-3.1-8B on one H100, vLLM (chunks of the 8,192-token budget), one client: 8,193
    tokens run as a full chunk of 8,192 and a chunk of 1 (nothing else decodes beside a lone
    client's prompt), where a second full chunk was charged (TTFT 263.5 -> 477.0 ms)."""
    ctx = ServingContext.build("llama3.1-8b", "dgx-h100", "vllm", "fp8", "fp8")
    budget = float(ctx.behaviour.rank_token_budget(ctx.token_budget, 1))
    assert budget == 8192.0
    whole, past = _agg(ctx, budget), _agg(ctx, budget + 1)
    common = (ctx.model, ctx.cluster, ctx.efficiency, ctx.behaviour, ctx.dense_format, ctx.expert_format,
              ctx.kv_bytes, 1.0, 1.0, 1.0, 1.0, 1.0)
    keys = (budget + 1) / 2.0
    full = step_time(*common, budget, keys, 0.0, budget + 1 + 64.0)["step_s"]
    one = step_time(*common, 1.0, keys, 0.0, budget + 1 + 64.0)["step_s"]
    assert past["prefill_own_s"][0] == pytest.approx(full + one, rel=1e-12)
    assert whole["prefill_own_s"][0] < past["prefill_own_s"][0] < 1.1 * whole["prefill_own_s"][0]


def test_a_lone_clients_prompt_rides_with_no_decodes():
    """With one client nothing decodes while its prompt runs: its TTFT does not grow with osl
    (255.7 ms at osl 2 against 257.0 at osl 120,000 when one decode rode along)."""
    ctx = ServingContext.build("llama3.1-8b", "dgx-h100", "vllm", "fp8", "fp8")
    short, long = _agg(ctx, 8000.0, osl=2), _agg(ctx, 8000.0, osl=120_000)
    assert short["prefill_own_s"][0] == pytest.approx(long["prefill_own_s"][0], rel=1e-12)


@pytest.mark.parametrize("model, tp, runs", [
    ("nemotron-4-15b", 6, False),    # 8 K/V heads: 6 neither divides nor is a multiple of them
    ("nemotron-4-15b", 12, False),
    ("nemotron-4-15b", 4, True),     # 8 / 4 = 2 heads a GPU
    ("nemotron-4-15b", 16, True),    # each head on 2 GPUs
    ("deepseek-r1", 16, True),       # multi-latent attention: no K/V heads to split
])
def test_serving_tp_must_split_whole_kv_heads(model, tp, runs):
    assert serving_tp_splits_kv_heads(load_model(model), tp) is runs


def test_simulate_refuses_a_tp_that_leaves_a_fraction_of_a_kv_head():
    dep = Deployment(model="nemotron-4-15b", system="dgx-h100", backend="vllm", mode="agg", isl=1024, osl=128,
                     layout=WorkerLayout(tp=6, batch=4))
    with pytest.raises(InputError) as err:
        simulate_serving(dep)
    assert err.value.field == "--tp" and "8 key/value heads" in str(err.value)


def test_an_engine_running_whole_prompts_sizes_its_activations_for_the_prompt():
    """TensorRT-LLM (no chunked prefill) at isl 30,000 runs the prompt in one step of 30,000
    tokens (its export's --max_num_tokens): the workspace is the one of 30,000 tokens, not the
    8,192-token budget, and only 15 requests of Llama-3.1-70B fit at tp 2 on H100 (16 before)."""
    ctx = ServingContext.build("llama3.1-70b", "dgx-h100", "trtllm", "fp8", "fp8")
    assert not ctx.behaviour.chunked_prefill
    mem = memory_columns(ctx, 2.0, 1.0, 1.0, 2.0, 1.0, 30_000.0, 200.0)
    assert mem["activations_bytes"] == pytest.approx(activation_bytes_per_gpu(ctx.model, 2.0, 1.0, 1.0, 30_000.0),
                                                     rel=1e-12)
    assert mem["max_batch_per_rank"] == 15


@pytest.mark.parametrize("layers, pp, share", [(80, 3, 27 / 80), (80, 4, 20 / 80), (61, 16, 4 / 61), (32, 1, 1.0)])
def test_the_largest_stage_holds_ceil_layers_over_pp(layers, pp, share):
    assert largest_stage_share(layers, pp) == pytest.approx(share, rel=1e-15)


def test_weights_and_kv_per_gpu_are_the_largest_stages():
    """Llama-3.1-70B at pp 3: the largest stage holds 27 of the 80 layers, not 26.67."""
    model = load_model("llama3.1-70b")
    one = weight_bytes_per_gpu(model, 1.0, 1.0, 1.0, 1.0, 1.0, "fp8", "fp8")
    three = weight_bytes_per_gpu(model, 1.0, 1.0, 3.0, 1.0, 1.0, "fp8", "fp8")
    embed = model.vocab_size * model.hidden_size * 2.0 * 2.0          # 16-bit embedding and head
    assert three - embed / 2.0 == pytest.approx((one - embed) * 27.0 / 80.0, rel=1e-12)
    kv1 = kv_bytes_per_request(model, 1.0, 1536.0, 1.0, 1.0)
    kv3 = kv_bytes_per_request(model, 1.0, 1536.0, 1.0, 3.0)
    assert kv3 == pytest.approx(kv1 * 27.0 / 80.0, rel=1e-12)
    assert np.all(largest_stage_share(80, np.array([1, 2, 3, 5])) * np.array([1, 2, 3, 5]) >= 1.0)
