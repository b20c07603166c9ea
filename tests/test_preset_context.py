"""A preset of a model with a public config.json states its context (``max_context_tokens``).

``ModelSpec.max_context_tokens`` 0 means "not stated": ``serve`` then checks no request against
it, so a preset that left it out priced a 500k-token prompt on an 8k-context model while the
same model's config.json (or its Llama 3.1 sibling) refused it.
"""
from __future__ import annotations

import pytest

from model_specs import list_models, load_model
from tests.cli_results import one_line_error, run

#: config.json max_position_embeddings of presets that once left it out (source of each fact)
STATED_CONTEXT = {
    "llama3-8b": (8192, "Hugging Face meta-llama/Meta-Llama-3-8B config.json"),
    "llama3-70b": (8192, "Hugging Face meta-llama/Meta-Llama-3-70B config.json"),
    "llama2-7b": (4096, "Hugging Face meta-llama/Llama-2-7b-hf config.json"),
    "llama2-13b": (4096, "Hugging Face meta-llama/Llama-2-13b-hf config.json"),
    "llama2-70b": (4096, "Hugging Face meta-llama/Llama-2-70b-hf config.json"),
    "llama-7b": (2048, "Hugging Face huggyllama/llama-7b config.json"),
    "llama-13b": (2048, "Hugging Face huggyllama/llama-13b config.json"),
    "llama-33b": (2048, "Hugging Face huggyllama/llama-30b config.json"),
    "llama-65b": (2048, "Hugging Face huggyllama/llama-65b config.json"),
    "gpt-neox-20b": (2048, "Hugging Face EleutherAI/gpt-neox-20b config.json"),
    "deepseek-v2": (4096 * 40, "Hugging Face deepseek-ai/DeepSeek-V2 config.json (yarn: 4096 x 40)"),
    "qwen2-57b-a14b": (131072, "Hugging Face Qwen/Qwen2-57B-A14B config.json"),
    "nemotron-3-nano": (262144, "Hugging Face nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json"),
    "grok-1": (8192, "github xai-org/grok-1 run.py sequence_len (no config.json)"),
}

#: presets left without a context, each for want of a public checkpoint config stating one
NO_PUBLIC_CONFIG = {
    **{n: "a paper's or Megatron-LM's training shape, no released checkpoint" for n in (
        "gpt-175b", "gpt-1t", "gpt-22b", "mt-nlg-530b", "megatron-1.7b", "megatron-3.6b", "megatron-7.5b",
        "megatron-18b", "megatron-39b", "megatron-76b", "megatron-145b", "megatron-310b", "megatron-530b",
        "megatron-1t")},
    "nemotron-8b": "NeMo-Framework-Launcher training config, no released checkpoint",
    "nemotron-22b": "NeMo-Framework-Launcher training config, no released checkpoint",
    "nemotron-4-15b": "weights not released",
    "nemotron-4-340b": "released as a NeMo checkpoint without a Hugging Face config.json",
    "palm-540b": "weights not released (Chowdhery et al. 2022 state the 2,048-token training sequence only)",
}


@pytest.mark.parametrize("name", sorted(STATED_CONTEXT))
def test_preset_states_its_config_context(name):
    assert load_model(name).max_context_tokens == STATED_CONTEXT[name][0]


def test_every_preset_without_a_context_has_a_reason():
    missing = {n for n in list_models() if load_model(n).max_context_tokens == 0}
    assert missing == set(NO_PUBLIC_CONFIG)
    for name in missing:
        source = load_model(name).source
        assert "Hugging Face" not in source and "config.json" not in source, name


def test_a_prompt_beyond_llama3_8b_context_is_refused():
    line = one_line_error(run("serve", "simulate", "-m", "llama3-8b", "-s", "dgx-h100", "--tp", 1, "--batch", 1,
                              "--isl", 500000, "--osl", 2),
                          "error: --isl: 500,000 prompt + 2 output tokens exceed the 8,192-token context of llama3-8b")
    assert "keep --isl + --osl <= 8,192" in line
    # the last prompt that fits (8,190 + 2 = 8,192) is priced
    assert run("serve", "simulate", "-m", "llama3-8b", "-s", "dgx-h100", "--tp", 1, "--batch", 1,
               "--isl", 8190, "--osl", 2).exit_code == 0
