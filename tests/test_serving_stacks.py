"""Serving stacks in the software-stack catalog: documented behaviour with a citation per value,
the per-generation serving efficiency files, and model presets for the serving file."""
import pytest

from hardware_specs.catalog import (list_serving_stacks, load_serving_efficiency, load_stack, serving_stack_for,
                                    stack_from_dict)
from hardware_specs.errors import InputError
from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.serving_efficiency import FIT_RANGES
from hardware_specs.stack_spec import StackSpec
from model_specs.catalog import load_model


def test_every_serving_stack_cites_each_behaviour():
    names = list_serving_stacks()
    assert {"vllm-0.11", "vllm-0.14", "sglang-0.5", "trtllm-1"} <= set(names)
    for name in names:
        stack = load_stack(name)
        assert isinstance(stack.serving, ServingBehaviour)
        cited = {k.split(".", 1)[1] for k in stack.citations if k.startswith("serving.")}
        assert cited == set(StackSpec.serving_keys()), f"{name}: uncited {set(StackSpec.serving_keys()) - cited}"


def test_the_documented_differences_between_engines():
    vllm, sglang, trt = (load_stack(n).serving for n in ("vllm-0.14", "sglang-0.5", "trtllm-1"))
    assert vllm.mixed_batches and trt.mixed_batches and not sglang.mixed_batches
    assert vllm.chunked_prefill and not trt.chunked_prefill
    assert not load_stack("vllm-0.11").serving.overlap_scheduler and vllm.overlap_scheduler
    # token budgets by device memory: vLLM 2048 below 70 GiB, SGLang 16384 above 160 GB
    assert vllm.token_budget(40 * 2**30) == 2048 and vllm.token_budget(80 * 2**30) == 8192
    assert sglang.token_budget(180 * 2**30) == 16384 and trt.token_budget(180 * 2**30) == 8192
    # KV admission: blocks for the prompt (vLLM, SGLang) or the whole request (TRT-LLM's
    # GUARANTEED_NO_EVICT); the KV dtype of a ModelOpt checkpoint is read by all but vLLM < 0.14
    assert (vllm.kv_admission, sglang.kv_admission, trt.kv_admission) == ("prompt", "prompt", "full_request")
    assert vllm.kv_dtype_from_checkpoint and sglang.kv_dtype_from_checkpoint and trt.kv_dtype_from_checkpoint
    assert not load_stack("vllm-0.11").serving.kv_dtype_from_checkpoint
    # the all-reduce kernel: vLLM and SGLang switch to two-shot by bytes (custom_all_reduce.cuh),
    # TensorRT-LLM runs one-shot up to 128 tokens (MIN_LATENCY, kOneShotMaxToken)
    assert dict(vllm.oneshot_allreduce_max_bytes) == dict(sglang.oneshot_allreduce_max_bytes) == {
        2.0: 8 * 2**20, 4.0: 512 * 2**10, 8.0: 256 * 2**10}
    assert vllm.oneshot_allreduce_max_tokens == sglang.oneshot_allreduce_max_tokens == 0
    assert trt.oneshot_allreduce_max_tokens == 128 and dict(trt.oneshot_allreduce_max_bytes) == {8.0: 64 * 2**20}


def test_a_release_maps_to_the_stack_that_lists_it():
    assert serving_stack_for("vllm", "0.12.0").name == "vllm-0.11"
    assert serving_stack_for("vllm", "0.19.0").name == "vllm-0.14"
    assert serving_stack_for("trtllm", "1.2.0rc6.post3").name == "trtllm-1"
    assert serving_stack_for("trtllm", "0.8.1.post1").name == "trtllm-1"     # the oldest profile, noted below
    assert serving_stack_for("sglang", None).name == "sglang-0.5"              # newest when unknown
    with pytest.raises(InputError, match="no serving stack for framework 'tgi'"):
        serving_stack_for("tgi", "3.0")


def test_serving_section_errors_name_the_field():
    with pytest.raises(InputError, match="serving.cuda_graphs: unknown mode 'sometimes'"):
        stack_from_dict({"name": "x", "framework": "f", "serving": {"cuda_graphs": "sometimes"}})
    with pytest.raises(InputError, match="serving.no_such: unknown behaviour"):
        stack_from_dict({"name": "x", "framework": "f", "serving": {"no_such": 1}})
    with pytest.raises(InputError, match="serving.gpu_memory_fraction: must be in"):
        stack_from_dict({"name": "x", "framework": "f", "serving": {"gpu_memory_fraction": 1.5}})
    with pytest.raises(InputError, match="serving.kv_admission: unknown value 'lazy'"):
        stack_from_dict({"name": "x", "framework": "f", "serving": {"kv_admission": "lazy"}})
    with pytest.raises(InputError, match="serving.mixed_batches: must be true or false"):
        stack_from_dict({"name": "x", "framework": "f", "serving": {"mixed_batches": "yes"}})
    with pytest.raises(InputError, match="serving.native_only_formats: must be a list of weight formats"):
        stack_from_dict({"name": "x", "framework": "f", "serving": {"native_only_formats": ["fp9"]}})
    from cost_models.weight_formats import WEIGHT_FORMATS
    from hardware_specs.serving_behaviour import STACK_WEIGHT_FORMATS
    assert STACK_WEIGHT_FORMATS == WEIGHT_FORMATS        # the data layer's copy of the cost model's list
    s = stack_from_dict({"name": "x", "framework": "f",
                         "serving": {"prefill_token_budget": {"value": {0: 1024, 40: 4096}, "source": "docs"}}})
    assert s.serving.token_budget(80 * 2**30) == 4096 and s.citations["serving.prefill_token_budget"] == "docs"


def test_fitted_serving_efficiency_is_inside_its_ranges_and_not_at_a_bound():
    for gen in ("hopper", "blackwell"):
        eff = load_serving_efficiency(gen)
        assert not eff.prior and eff.fitted_on
        for name, (lo, hi) in FIT_RANGES.items():
            value = getattr(eff, name)
            assert lo < value < hi
            assert (value - lo) / (hi - lo) > 0.01 and (hi - value) / (hi - lo) > 0.01, (gen, name, value)
    prior = load_serving_efficiency("ampere")          # no fitted file: the prior, flagged
    assert prior.prior and prior.generation == "ampere"


def test_the_fixed_time_per_active_expert_is_a_checked_number_of_seconds_with_a_prior():
    from hardware_specs.serving_efficiency import ServingEfficiency
    for bad in (-1e-7, 1e300, float("nan"), True):
        with pytest.raises(InputError, match="expert_fixed_s: must be a finite number of seconds"):
            ServingEfficiency(generation="hopper", expert_fixed_s=bad)
    assert ServingEfficiency(generation="hopper").expert_fixed_s == 0.0     # absent: no such cost
    # the hand-set prior (default.yaml), which a generation no serving donor reaches gets; an
    # unmeasured generation of the catalog holds its donor's fitted value (Hopper's 2.838e-7 since
    # the session-72 refit, 2.934e-7 since session 65's, 2.895e-7 since session 59's, 2.955e-7 before it: serving_efficiency/hopper.yaml)
    assert load_serving_efficiency("a-new-generation").expert_fixed_s == pytest.approx(3e-7)
    assert load_serving_efficiency("ampere").expert_fixed_s == load_serving_efficiency("hopper").expert_fixed_s
    assert load_serving_efficiency("ampere").expert_fixed_s == pytest.approx(2.838e-7)


@pytest.mark.parametrize("name, total_b, active_b", [
    ("deepseek-r1", 671, 37.6), ("kimi-k2.5", 1026, 32.9), ("minimax-m2.5", 229, 11.0),
    ("qwen3-32b", 32.8, 32.8), ("qwen3.5-397b-a17b", 396, 16.8), ("glm-5", 743, 41.1),
])
def test_serving_presets_have_their_published_sizes(name, total_b, active_b):
    from cost_models.params import total_params
    m = load_model(name)
    assert total_params(m) / 1e9 == pytest.approx(total_b, rel=0.01)
    assert total_params(m, active=True) / 1e9 == pytest.approx(active_b, rel=0.02)
    assert "config.json" in m.source


def test_linear_attention_layers_keep_a_fixed_state_not_a_growing_cache():
    from cost_models.kv_cache import kv_bytes_per_request
    m = load_model("qwen3.5-397b-a17b")
    assert m.linear_attention.layer_fraction == 0.75
    short, long = (kv_bytes_per_request(m, 1, n, 2.0) for n in (1000, 2000))
    # only the 15 full-attention layers grow: 2 KV heads x 256 x 2 bytes x 2 (K, V) per token
    assert long - short == pytest.approx(1000 * 15 * 2 * 2 * 256 * 2)
    # 45 linear layers x 64 value heads x 128 x 128 fp32 state (+ conv state)
    assert short > 45 * 64 * 128 * 128 * 4


def test_sglang_chunked_prefill_size_follows_every_memory_step():
    """SGLang's ServerArgs._handle_gpu_memory_settings reads gpu_mem in MiB (torch total_memory /
    2**20) and picks chunked_prefill_size 2048 below 35 * 1024 MiB, 4096 below 60 * 1024, 8192
    below 160 * 1024, 16384 above: 35 / 60 / 160 GiB, so an A100 40GB (40 GiB) takes 4096."""
    from hardware_specs.catalog import load_gpu
    sglang = load_stack("sglang-0.5").serving
    gib = 2**30
    steps = [(34.99, 2048), (35.0, 4096), (59.99, 4096), (60.0, 8192), (159.99, 8192), (160.0, 16384)]
    assert [sglang.token_budget(g * gib) for g, _ in steps] == [want for _, want in steps]
    a100 = load_gpu("a100-sxm-40gb")
    assert a100.hbm_bytes == 40 * gib
    assert sglang.token_budget(a100.hbm_bytes, "a100-sxm-40gb") == 4096
    assert sglang.token_budget(load_gpu("v100-sxm-32gb").hbm_bytes, "v100-sxm-32gb") == 2048


def test_tensorrt_llm_0x_is_older_than_its_1x_profile_and_dynamo_tags_are_placed_by_the_validation():
    # trtllm-1 listed Dynamo's container tags (0.5, 0.7, 0.8) as TensorRT-LLM releases: TensorRT-LLM
    # 0.8.0 (2024, TensorRT engines) read as the 1.x PyTorch backend with no note
    import pandas as pd
    from pathlib import Path
    from hardware_specs.catalog import serving_release_match
    from hardware_specs.release_match import release_numbers
    from paraplan.validation import serving as validation
    trt = load_stack("trtllm-1")
    assert min(n for v in trt.versions if (n := release_numbers(v)) is not None) == (1, 0)
    for release in ("0.8.0", "0.5.0", "0.8.1.post1"):
        assert not trt.covers(release)
        match = serving_release_match("trtllm", release)
        assert match.stack.name == "trtllm-1"
        assert match.note == f"trtllm {release} is older than every profile: trtllm-1, the profile of 1.0, the oldest"
    assert serving_release_match("trtllm", "1.2.0rc6").note == ""
    # the measured rows tagged with Dynamo containers keep the trtllm-1 profile without a note
    df = pd.read_csv(Path(validation.__file__).parents[1] / "data" / "validation" / "serving_runs.csv",
                     dtype={"backend_version": str})
    tags = sorted({v for v in df[df.backend == "trtllm"].backend_version.dropna() if (release_numbers(v) or (1,))[0] == 0})
    assert tags == ["0.5.1-rc0.pre3", "0.7.0.post2", "0.8.1.post1", "0.8.1.post2", "0.8.1.post3"]
    for tag in tags:
        assert validation._release_match("trtllm", tag) == serving_release_match("trtllm", None) == \
            validation._release_match("trtllm", None)
        assert validation._release_match("trtllm", tag).note == ""
    # a vLLM / SGLang 0.x release is that framework's own
    assert validation._release_match("sglang", "0.5.9") == serving_release_match("sglang", "0.5.9")
