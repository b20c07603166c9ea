"""Megatron-LM exports of selective recomputation: each module its own argument, and the plans
Megatron-LM's TransformerConfig refuses (delayed FP8 scaling with layernorm / moe_act recompute,
the overlapped expert all-to-all with the moe module recomputed) refused before they are written."""
from __future__ import annotations

import subprocess

import pytest

from hardware_specs.errors import InputError
from paraplan import api, exports
from paraplan.exports import megatron
from paraplan.exports.megatron_table import check_command

LLAMA = dict(model="llama3-70b", cluster="dgx-h100", gpus=64, tp=8, pp=1, global_batch=64, zero_stage=1,
             sequence_parallel=True)


def _row(**kw):
    return api.simulate(**kw).iloc[0].to_dict()


def test_each_recomputed_module_is_its_own_argument_in_argv_and_in_the_bash_array(tmp_path):
    row = _row(**LLAMA, recompute_modules="core_attn,layernorm")
    argv, env = megatron.command(row)
    i = argv.index("--recompute-modules")
    assert argv[i + 1:i + 3] == ["core_attn", "layernorm"] and argv[i + 3].startswith("--")
    assert exports.refusal(row, "megatron") is None and check_command(argv, 64, env) == []
    script = tmp_path / "launch.sh"
    script.write_text(megatron.emit(row))
    # bash reads the array as Megatron's argparse will see it: two words after the flag
    out = subprocess.run(["bash", "-c", f'source "{script}" >/dev/null; for a in "${{TRAINING_ARGS[@]}}"; do '
                          'echo "$a"; done'], capture_output=True, text=True, check=True).stdout.splitlines()
    j = out.index("--recompute-modules")
    assert out[j + 1:j + 3] == ["core_attn", "layernorm"]


def test_delayed_fp8_with_layernorm_recompute_is_refused_as_megatron_refuses_it():
    row = _row(**LLAMA, dtype="fp8", recompute_modules="layernorm")
    reason = exports.refusal(row, "megatron")
    assert reason is not None and "fp8_delayed_recompute" in str(reason)
    with pytest.raises(InputError):
        megatron.emit(row)
    # the same plan recomputing only the attention core runs
    assert exports.refusal(_row(**LLAMA, dtype="fp8", recompute_modules="core_attn"), "megatron") is None


def test_the_overlapped_expert_all_to_all_with_the_moe_module_recomputed_is_refused():
    moe = dict(model="mixtral-8x7b", cluster="dgx-h100", gpus=64, tp=2, ep=8, seq_len=4096, global_batch=256,
               zero_stage=1, sequence_parallel=True, ep_comm_overlap=True)
    # simulate refuses the plan (simulator.ep_overlap_rules); a row that reached the export with
    # the switch on anyway is still refused by its table's rule
    with pytest.raises(InputError) as err:
        _row(**moe, recompute_modules="moe")
    assert err.value.field == "ep_comm_overlap"
    row = {**_row(**{**moe, "ep_comm_overlap": False}, recompute_modules="moe"), "ep_comm_overlap": True}
    reason = exports.refusal(row, "megatron")
    assert reason is not None and "ep_a2a_overlap_keeps_moe" in str(reason)
    assert exports.refusal(_row(**moe, recompute_modules="mlp_act"), "megatron") is None   # Megatron's moe_act


def test_list_flags_are_the_ones_megatrons_parser_reads_as_lists():
    # argparse nargs in the committed table (tools/megatron_flags.py reads them from arguments.py):
    # '+' for both list flags the export writes, none for a degree, 3 for the batch ramp-up
    assert megatron.takes_list("--recompute-modules")
    assert megatron.takes_list("--hierarchical-context-parallel-sizes")
    assert megatron.takes_list("--rampup-batch-size")
    assert not megatron.takes_list("--tensor-model-parallel-size")
    assert not megatron.takes_list("--recompute-granularity")
    assert not megatron.takes_list("--no-such-flag")
