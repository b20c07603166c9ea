"""Review 46 of ``paraplan validate published``: damaged or new input rows are skipped with the
reason (or the file refused) instead of predicted on a default the row contradicts."""
from __future__ import annotations

import pytest

from paraplan.validation.published import Skip, row_inputs


def _row(**overrides):
    """Llama 3.1 8B on 8 H100 (data parallel), every needed column stated."""
    row = {"id": "X-1:tokens_per_s_per_gpu", "run_id": "X-1", "gpu_profile": "h100-sxm-80gb",
           "dtype_norm": "bf16", "zero_norm": "1", "flops_convention": "none", "model": "Llama 3.1 8B",
           "layers": 32, "hidden": 4096, "ffn_hidden": 14336, "heads": 32, "kv_heads": 8,
           "vocab": 128256, "seq_len": 8192, "moe_experts": "", "moe_topk": "", "n_gpus": 8,
           "tp": 1, "pp": 1, "dp": 8, "cp": "", "ep": "", "vpp": "", "micro_batch": 1,
           "global_batch": 64, "recompute": "none", "seq_parallel": "n",
           "measured_metric": "tokens_per_s_per_gpu", "measured_value": 10000.0}
    row.update(overrides)
    return row


def _mixtral_row(**overrides):
    """Mixtral 8x7B (architecture from its preset) on 64 H100, tp 2 ep 8."""
    return _row(**{"model": "Mixtral 8x7B", "layers": "", "hidden": "", "ffn_hidden": "", "heads": "",
                   "kv_heads": "", "vocab": "", "seq_len": 4096, "moe_experts": "8", "moe_topk": "2",
                   "n_gpus": 64, "tp": 2, "dp": 32, "ep": 8, "global_batch": 256, **overrides})


@pytest.mark.parametrize("text", ["ZeRO-3", "yes"])
def test_text_in_zero_norm_skips_the_row_instead_of_running_the_stacks_default(text):
    # was read as "not stated": a ZeRO-3 row predicted at ZeRO-0/1 (+33.8% error, silently)
    with pytest.raises(Skip, match=f"^zero_norm '{text}' is not a number$"):
        row_inputs(_row(zero_norm=text))


def test_a_stated_zero_norm_is_used_and_a_blank_one_is_the_stacks_default():
    assert row_inputs(_row(zero_norm="3")).config.zero_stage == 3
    blank = row_inputs(_row(zero_norm=""))
    assert blank.config.zero_stage == 1
    assert "zero=1 (megatron-core's default)" in blank.assumptions


def test_moe_experts_without_a_number_skips_the_row_instead_of_taking_the_presets_experts():
    assert row_inputs(_mixtral_row()).model.moe.num_experts == 8
    with pytest.raises(Skip, match="^moe_experts 'eight' is not a number$"):
        row_inputs(_mixtral_row(moe_experts="eight"))
    with pytest.raises(Skip, match="^moe_topk 'two' is not a number$"):
        row_inputs(_mixtral_row(moe_topk="two"))
