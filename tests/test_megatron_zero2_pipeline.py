"""Megatron-Core, Megatron-Bridge and NeMo run ZeRO-2/3 only at pp 1 (``lacks: zero2_with_pipeline``).

Their distributed optimizer is ZeRO-1; gradients (and parameters) are sharded only by an FSDP, and
none of theirs runs under a pipeline: ``--use-torch-fsdp2`` asserts pp 1 (NVIDIA/Megatron-LM@d98e8a64dd
megatron/training/arguments.py:1034-1035, core_v0.12.0 :513-514), Megatron-FSDP v2 raises on
pipeline_model_parallel_size != 1 (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py:627-638),
Megatron-FSDP v1's device meshes are (dp_cp, tp) / (outer_fsdp_dp, dp_cp, tp) with no pipeline axis
(:405-458), and NeMo 1.x's FSDP strategy asserts 'FSDP does not support pipeline parallelism'
(NVIDIA/NeMo@r2.0.0rc1 nemo/collections/nlp/parts/nlp_overrides.py:803). The Megatron export refuses
the same plan (paraplan/exports/megatron.py). So the planner must not rank such a layout and
``simulate`` refuses it in one line naming the fix.
"""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from hardware_specs.catalog import list_stacks, load_stack
from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from paraplan.cli import main
from planners.plan import plan
from simulator.parallel_config import ParallelConfig
from simulator.stack_defaults import stack_config_fields
from simulator.validate_config import check_config

MEGATRON_FSDP_FRAMEWORKS = ("megatron-core", "megatron-bridge", "nemo")


def _training_stacks():
    for name in list_stacks():
        spec = load_stack(name)
        if spec.training is not None:
            yield name, spec


def test_every_megatron_family_stack_refuses_zero2_or_3_under_a_pipeline():
    seen = set()
    for name, spec in _training_stacks():
        lacks = spec.training.lacks
        if spec.framework in MEGATRON_FSDP_FRAMEWORKS:
            assert "zero2_with_pipeline" in lacks, name
            assert "zero2_with_pipeline" in spec.citations["training.lacks"], name
            seen.add(spec.framework)
        elif spec.framework == "megatron-lm":
            # Megatron-LM 2019-2022 had no ZeRO-2/3 at all (no distributed optimizer before
            # d07d29df14, 2022-06): the catalog says so with zero2 and zero3, which refuse pp 1 too
            assert {"zero2", "zero3"} <= set(lacks), name
        elif spec.framework == "megatron-deepspeed":
            assert "zero2_with_pipeline" in lacks, name         # DeepSpeed's PipelineEngine asserts ZeRO < 2
    assert seen == set(MEGATRON_FSDP_FRAMEWORKS)


@pytest.mark.parametrize("stack", ["megatron-core", "megatron-core-0.12", "megatron-bridge", "nemo-24"])
@pytest.mark.parametrize("zero", [2, 3])
def test_check_config_refuses_zero2_or_3_with_pp_above_1_and_keeps_pp_1_and_zero1(stack, zero):
    model = load_model("llama3-8b")

    def config(zero_stage, pp):
        return ParallelConfig(**{**stack_config_fields(load_stack(stack), "bf16"), "dp": 8, "tp": 1, "pp": pp,
                                 "micro_batch": 1, "global_batch": 64, "zero_stage": zero_stage})

    with pytest.raises(InputError) as err:
        check_config(model, config(zero, 2))
    assert err.value.field == "zero_stage" and "zero2_with_pipeline" in str(err.value)
    assert "use ZeRO stage 0 or 1 with pp > 1, or pp 1" in str(err.value)
    check_config(model, config(zero, 1))          # pp 1: Megatron-FSDP runs it
    check_config(model, config(1, 2))             # the distributed optimizer under a pipeline: runs


def test_simulate_refuses_the_reviewer_s_rank_1_plan_in_one_line():
    """The former rank 1 of ``plan -m llama3-70b -c dgx-h100 -n 512 --global-batch-tokens 4Mi``:
    ``dp64 tp4 pp2 vpp41 mb1 z2 sp`` under the default megatron-core stack."""
    out = CliRunner().invoke(main, ["simulate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "512", "--tp", "4",
                                    "--pp", "2", "--vpp", "41", "--micro-batch", "1", "--global-batch", "512",
                                    "--zero", "2", "--sequence-parallel", "--dtype", "bf16"])
    assert out.exit_code == 2
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: zero_stage:"), out.output
    assert "zero2_with_pipeline" in lines[0] and "use ZeRO stage 0 or 1 with pp > 1, or pp 1" in lines[0]


def test_the_default_stack_plans_no_zero2_or_3_layout_with_a_pipeline():
    """Llama 3 70B on 512 H100 at 4Mi tokens a step: before, 8 of the top 10 were ZeRO-2 with
    pp 2 or 4 (rank 1 ``dp64 tp4 pp2 vpp41 mb1 z2 sp``), which Megatron cannot launch."""
    result = plan("llama3-70b", "dgx-h100", 512, global_batch_tokens=4 * 2**20)
    plans = result.plans
    assert len(plans) > 0
    assert not ((plans["zero_stage"] >= 2) & (plans["pp"] > 1)).any()
    # the distributed optimizer (ZeRO-1) under a pipeline, and ZeRO-3 at pp 1, stay in the search
    assert ((plans["zero_stage"] == 1) & (plans["pp"] > 1)).any()
    assert ((plans["zero_stage"] == 3) & (plans["pp"] == 1)).any()
