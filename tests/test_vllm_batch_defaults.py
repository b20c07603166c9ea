"""vLLM's batch defaults by GPU: 8192 tokens a step and 1024 running requests only on a device of
>= 70 GiB that is no A100; 2048 / 256 elsewhere (vllm/engine/arg_utils.py
EngineArgs.get_batch_defaults, OpenAI API server: ``device_memory >= 70 * GiB_bytes and "a100"
not in device_name``)."""
import pytest

from hardware_specs.catalog import load_stack
from hardware_specs.errors import InputError
from hardware_specs.stack_files import stack_from_dict
from paraplan.exports.serving import emit_launch
from paraplan.exports.serving_common import launch_of
from paraplan.serving_api import serve_simulate
from simulator.serving.context import ServingContext
from simulator.serving.deployment import Deployment, WorkerLayout
from simulator.serving.simulate import simulate_serving


@pytest.mark.parametrize("stack", ["vllm-0.11", "vllm-0.14"])
@pytest.mark.parametrize("system, tokens, requests", [
    ("dgx-a100-40gb", 2048, 256),      # under 70 GiB
    ("dgx-a100-80gb", 2048, 256),      # 80 GiB, but an A100
    ("dgx-h100", 8192, 1024),          # 80 GiB, no A100
    ("hgx-h200", 8192, 1024),
])
def test_the_batch_defaults_follow_vllms_memory_and_a100_rule(stack, system, tokens, requests):
    ctx = ServingContext.build("llama3.1-8b", system, stack)
    assert (ctx.token_budget, ctx.behaviour.max_running_requests) == (tokens, requests)


def test_an_a100_of_40_gib_runs_at_most_256_requests_a_rank():
    # the KV cache of Llama-3.1-8B holds 846 requests of 128 + 128 tokens on a 40 GiB A100: it was
    # planned at 512 with vLLM's 1024-request default of >= 70 GiB devices
    row = serve_simulate("llama3.1-8b", "dgx-a100-40gb", backend="vllm", tp=1, batch=256, isl=128, osl=128).iloc[0]
    assert row.max_batch_per_rank == 256 and row.fits
    with pytest.raises(InputError, match="at most 256 requests"):
        serve_simulate("llama3.1-8b", "dgx-a100-40gb", backend="vllm", tp=1, batch=512, isl=128, osl=128)


def test_the_vllm_export_on_an_a100_writes_the_defaults_it_was_planned_with():
    ctx = ServingContext.build("llama3.1-8b", "dgx-a100-80gb", "vllm", "bf16")
    dep = Deployment(model="llama3.1-8b", system="dgx-a100-80gb", backend=ctx.stack.name, mode="agg", isl=1024,
                     osl=1024, dense_format=ctx.dense_format, expert_format=ctx.expert_format,
                     layout=WorkerLayout(tp=1, batch=64))
    script = emit_launch(launch_of(ctx, dep, simulate_serving(dep, ctx).metrics))
    words = script.replace("\\\n", " ").split()
    assert words[words.index("--max-num-seqs") + 1] == "256"
    assert words[words.index("--max-num-batched-tokens") + 1] == "2048"


def _stack(serving):
    return stack_from_dict({"name": "s", "framework": "vllm", "versions": ["1"], "serving": serving})


def test_a_stack_states_the_running_request_cap_by_memory_or_as_one_number():
    s = _stack({"max_running_requests": {"value": {0: 128, 40: 512}, "source": "docs"},
                "smallest_tier_gpus": {"value": ["h100"], "source": "docs"}}).serving
    assert s.running_requests(30 * 2**30, "a100-sxm-40gb") == 128
    assert s.running_requests(80 * 2**30, "a100-sxm-80gb") == 512
    assert s.running_requests(80 * 2**30, "H100-SXM-80GB") == 128          # named: the smallest tier
    assert s.token_budget(80 * 2**30, "h100-sxm-80gb") == 8192             # a budget of one tier
    assert _stack({"max_running_requests": {"value": 64, "source": "docs"}}).serving.running_requests(1e12) == 64
    for bad in ({0: -1}, {0: 1.5}, {"x": 4}, {}, True):
        with pytest.raises(InputError, match="max_running_requests"):
            _stack({"max_running_requests": {"value": bad, "source": "docs"}})
    with pytest.raises(InputError, match="smallest_tier_gpus"):
        _stack({"smallest_tier_gpus": {"value": "a100", "source": "docs"}})


def test_only_vllm_names_gpus_that_skip_the_large_defaults():
    assert load_stack("vllm-0.14").serving.smallest_tier_gpus == ("a100",)
    assert load_stack("sglang-0.5").serving.smallest_tier_gpus == ()
