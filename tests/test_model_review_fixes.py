"""Model-spec fixes from a review of the presets and the Hugging Face config import: each test
failed before its fix."""
from __future__ import annotations

import pytest

from model_specs import load_model
from paraplan.exports.megatron import _model_args


# --- the DeepSeek-V3-style routers score by sigmoid ---------------------------------------------

@pytest.mark.parametrize("name", ["deepseek-r1", "kimi-k2.5", "glm-5", "minimax-m2.5"])
def test_sigmoid_routed_presets_say_so_and_the_megatron_export_writes_it(name):
    # each config.json states scoring_func sigmoid (DeepSeek-R1, Kimi-K2.5 text_config and GLM-5
    # also topk_method noaux_tc); unstated, router_score defaulted to softmax and the Megatron
    # export launched --moe-router-score-function softmax
    model = load_model(name)
    assert model.moe.router_score == "sigmoid"
    assert dict(_model_args(model, 4096))["--moe-router-score-function"] == "sigmoid"
