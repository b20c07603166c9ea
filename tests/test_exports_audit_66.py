"""Session 66's audit of the launch exports against the frameworks' own start-up checks.

A plan Megatron-LM would refuse at start-up is refused by the export, naming the field, never
written: Megatron-Core builds biased expert MLPs only without expert tensor parallelism
(Megatron-LM d98e8a64dd megatron/core/transformer/transformer_config.py:2612-2615,
``TransformerConfig.__post_init__``: ``if self.num_moe_experts is not None and
self.add_bias_linear: assert self.expert_tensor_parallel_size == 1, "Bias in Moe is only
supported when ETP==1"``). The export keeps gpt-oss's linear biases (it writes no
``--disable-bias-linear``), so every gpt-oss plan with etp > 1 was written as a launch that
stops in ``core_transformer_config_from_args``; run through the real parse_args +
validate_args + core_transformer_config_from_args (``tools/megatron_probe.py verify`` in a
``git archive`` of d98e8a64dd), the emitted flags of
``plan -m gpt-oss-120b -c dgx-h100 -n 64 --global-batch 256 --fix tp=2 --fix etp=2 --emit megatron``
raised exactly that AssertionError.
"""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from paraplan import api, exports
from paraplan.exports import megatron
from tests.cli_results import one_line_error, run

#: gpt-oss-120b on 16 H100: dp 4 x tp 2 x pp 2, 128 experts over ep 4 (ep x etp divides dp x tp = 8)
GPT_OSS = dict(model="gpt-oss-120b", cluster="dgx-h100", gpus=16, tp=2, pp=2, ep=4, micro_batch=1,
               global_batch=64, zero_stage=1, sequence_parallel=True, recompute="full")


def _row(**kw):
    return api.simulate(**kw).iloc[0].to_dict()


def test_megatron_refuses_a_biased_moe_split_over_expert_tensor_parallel_ranks():
    row = _row(**GPT_OSS, etp=2)
    err = exports.refusal(row, "megatron")
    assert err is not None and err.field == "etp"
    assert "Bias in Moe is only supported when ETP==1" in str(err) and "etp=2" in str(err)
    with pytest.raises(InputError) as raised:
        megatron.emit(row)
    assert raised.value.field == "etp"


def test_the_same_biased_moe_plan_with_whole_experts_is_written_with_its_biases_and_etp_1():
    argv, _ = megatron.command(_row(**GPT_OSS, etp=1))
    assert "--disable-bias-linear" not in argv            # gpt-oss's projections keep their biases
    assert argv[argv.index("--expert-tensor-parallel-size") + 1] == "1"
    assert argv[argv.index("--expert-model-parallel-size") + 1] == "4"
    assert argv[argv.index("--tensor-model-parallel-size") + 1] == "2"


def test_an_unbiased_moe_keeps_its_expert_tensor_parallel_split():
    # Mixtral's projections have no bias (--disable-bias-linear): Megatron builds etp 2 experts
    row = _row(model="mixtral-8x7b", cluster="dgx-h100", gpus=16, tp=2, pp=1, ep=4, etp=2, micro_batch=1,
               global_batch=64, zero_stage=1, sequence_parallel=True, recompute="full", seq_len=4096)
    argv, _ = megatron.command(row)
    assert "--disable-bias-linear" in argv
    assert argv[argv.index("--expert-tensor-parallel-size") + 1] == "2"


def test_cli_emit_megatron_of_gpt_oss_fixed_at_etp_2_names_etp_and_writes_nothing():
    result = run("plan", "-m", "gpt-oss-120b", "-c", "dgx-h100", "-n", 64, "--global-batch", 256,
                 "--fix", "tp=2", "--fix", "etp=2", "--emit", "megatron")
    line = one_line_error(result, "--emit", "by etp", "--fix etp=1")
    assert "none of the" in line
    assert "MODEL_ARGS" not in result.stdout
