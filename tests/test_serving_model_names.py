"""A serving row's Hugging Face id names its architecture: the file's ids through ``MODEL_PRESETS``,
other checkpoints of the same models (instruction-tuned, quantised, dated releases) through the
model catalog's names and aliases (``paraplan.validation.serving.model_preset_for``)."""
from __future__ import annotations

import pandas as pd
import pytest

from paraplan.validation.serving import MODEL_PRESETS, SYSTEMS, model_preset_for, predict


@pytest.mark.parametrize("model_path, preset", [
    ("deepseek-ai/DeepSeek-R1", "deepseek-r1"),                      # the file's table
    ("deepseek-ai/DeepSeek-R1-0528", "deepseek-r1"),                 # a dated release
    ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"),
    ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3"),                    # alias: same architecture
    ("meta-llama/Llama-3.3-70B-Instruct", "llama3.1-70b"),           # alias: same architecture
    ("nvidia/Llama-3.3-70B-Instruct-FP8", "llama3.1-70b"),           # a quantised export of it
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama3.1-8b"),        # Meta- prefix
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b"),
    ("moonshotai/Kimi-K2-Thinking", "kimi-k2"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),        # a version suffix
    ("openai/gpt-oss-20b", "gpt-oss-20b"),
])
def test_checkpoint_names_resolve_to_their_architecture(model_path, preset):
    assert model_preset_for(model_path) == preset


@pytest.mark.parametrize("model_path", ["deepseek-ai/DeepSeek-V3.2-Exp", "Qwen/Qwen3-VL-8B-Instruct", "foo/bar", "", None])
def test_other_architectures_resolve_to_nothing(model_path):
    """V3.2 adds a sparse-attention indexer: not V3's architecture, so not matched by name."""
    assert model_preset_for(model_path) is None


def test_every_table_entry_resolves_to_itself():
    for path, preset in MODEL_PRESETS.items():
        assert model_preset_for(path) == preset


def test_a_row_of_a_checkpoint_not_in_the_table_is_predicted_as_its_architecture():
    row = {"id": "r", "backend": "vllm", "backend_version": "0.19.0", "model_path": "meta-llama/Llama-3.1-70B",
           "system": "h200_sxm", "precision": "fp8", "mode": "agg", "isl": 1024, "osl": 1024,
           "gemm_quant_mode": "fp8", "moe_quant_mode": "", "batch_size": 8, "tp_size": 4, "pp_size": 1,
           "attention_dp_size": 1, "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0}
    both = predict(pd.DataFrame([row, {**row, "id": "s", "model_path": "nvidia/Llama-3.3-70B-Instruct-FP8"}]))
    assert both.reason.tolist() == ["", ""]
    assert both.pred_tpot_ms[0] == both.pred_tpot_ms[1] > 0


def test_a100_rows_have_a_system():
    assert SYSTEMS["a100_sxm"] == "dgx-a100-80gb"
