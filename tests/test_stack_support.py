"""What a software stack cannot run is neither simulated nor planned (``TrainingBehaviour.lacks``).

Megatron-LM 2021 (v2.5) has no distributed optimizer, no sequence parallelism, no selective
recomputation and no context parallelism; DeepSpeed's pipeline engine asserts ZeRO < 2 with pp > 1.
A plan on such a stack that uses one could not be launched, so ``simulate`` refuses it with one
line and the planner never ranks it.
"""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from hardware_specs.catalog import load_stack
from hardware_specs.errors import InputError
from hardware_specs.stack_files import stack_from_dict
from hardware_specs.stack_spec import STACK_FEATURES, TrainingBehaviour
from model_specs.catalog import load_model
from paraplan.cli import main
from planners.heterogeneous import plan_heterogeneous
from planners.plan import plan
from planners.search_space import SearchConstraints, enumerate_space
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.stack_defaults import stack_config_fields
from simulator.stack_support import check_stack_features, features_in_use, lacked_use, lacks_mask, lacks_names
from simulator.validate_config import check_config

MEGATRON_2021_LACKS = ("zero_bubble_schedules", "sequence_parallel", "context_parallel", "expert_parallel",
                       "zero1", "zero2", "zero3", "selective_recompute", "activation_offload", "optimizer_offload")


def test_features_in_use_reads_each_field_elementwise():
    used = features_in_use(pp=np.array([1, 2, 4]), zero_stage=np.array([2, 1, 3]), cp=np.array([1, 1, 2]))
    assert used["pipeline"].tolist() == [False, True, True]
    assert used["context_parallel"].tolist() == [False, False, True]
    assert used["zero1"].tolist() == [False, True, False]
    # ZeRO >= 2 together with pp > 1: only the third row (ZeRO-2 at pp 1 is not)
    assert used["zero2_with_pipeline"].tolist() == [False, False, True]
    assert "sequence_parallel" not in used           # a field not given decides nothing
    lacks = ("context_parallel", "zero2_with_pipeline")
    assert lacked_use(lacks, pp=np.array([1, 2, 4]), zero_stage=np.array([2, 1, 3]),
                      cp=np.array([1, 1, 2])).tolist() == [False, False, True]
    # broadcast shapes, as the planner's (rows x combinations) grid uses them
    grid = lacked_use(("zero1",), pp=np.array([[1], [2]]), zero_stage=np.array([[0, 1, 2]]))
    assert grid.shape == (2, 3) and grid.tolist() == [[False, True, False]] * 2
    assert lacked_use((), cp=4).shape == () and not lacked_use((), cp=4)


def test_masks_round_trip_through_a_config_batch():
    c = ParallelConfig(stack_lacks=("zero3", "context_parallel"))
    assert c.stack_lacks == ("context_parallel", "zero3")          # STACK_FEATURES order
    assert lacks_names(lacks_mask(c.stack_lacks)) == c.stack_lacks
    assert ConfigBatch.from_configs([c]).row(0).stack_lacks == c.stack_lacks
    with pytest.raises(InputError, match="unknown feature 'ring'"):
        ParallelConfig(stack_lacks=("ring",))


def test_the_old_stacks_say_what_their_releases_lack_and_current_ones_lack_nothing():
    assert load_stack("megatron-lm-2021").training.lacks == MEGATRON_2021_LACKS
    assert "pipeline" in load_stack("megatron-lm-2019").training.lacks
    lm22 = load_stack("megatron-lm-2022").training.lacks
    assert "sequence_parallel" not in lm22 and "interleaved_schedule" not in lm22 and "zero1" in lm22
    for name in ("deepspeed-2021", "gpt-neox-2022", "megatron-deepspeed"):
        lacks = load_stack(name).training.lacks
        assert "zero2_with_pipeline" in lacks and "interleaved_schedule" in lacks and "zero3" not in lacks
    # Megatron-Core runs everything but MoE layers at tp > 1 without sequence parallelism, and
    # ZeRO-2/3 (an FSDP: torch FSDP2, Megatron-FSDP; NeMo 1.x's FSDP strategy) only at pp 1
    for name in ("megatron-core", "megatron-core-0.12", "megatron-bridge", "megatron-bridge-25.09"):
        assert load_stack(name).training.lacks == ("zero2_with_pipeline", "moe_tp_without_sp"), name
    # NeMo 24.07 / 24.09 run Megatron-Core 0.8 / 0.9, before its hybrid CPU optimizer (core_v0.12)
    for name in ("nemo-24", "nemo-24.09"):
        assert load_stack(name).training.lacks == ("zero2_with_pipeline", "optimizer_offload", "moe_tp_without_sp")
    assert load_stack("pytorch-ddp").training.lacks == ()
    # FSDP shards the parameters too (or nothing): no ZeRO-1; llm-foundry's MPT runs no context
    # parallelism either (its stack file, unverified in Composer)
    for name in ("torchtitan", "torchtitan-0.3", "torchtitan-compile", "pytorch-fsdp"):
        assert load_stack(name).training.lacks == ("zero1",)
    assert load_stack("llm-foundry").training.lacks == ("context_parallel", "zero1")
    # every built-in file's entry names only known features and cites its source
    for name in ("megatron-lm-2019", "megatron-lm-2021", "megatron-lm-2022", "deepspeed-2021", "gpt-neox-2022",
                 "megatron-deepspeed", "metaseq-2022"):
        spec = load_stack(name)
        assert set(spec.training.lacks) <= set(STACK_FEATURES)
        assert spec.citations["training.lacks"].strip()


def test_a_stack_file_with_an_unknown_feature_is_refused():
    with pytest.raises(InputError) as err:
        stack_from_dict({"name": "mine", "framework": "x", "training": {"lacks": ["warp_drive"]}})
    assert err.value.field == "stack mine.training.lacks" and "unknown feature 'warp_drive'" in err.value.message
    with pytest.raises(InputError, match="list of names"):
        stack_from_dict({"name": "mine", "framework": "x", "training": {"lacks": "cp"}})
    assert TrainingBehaviour(lacks=["zero1"]).lacks == ("zero1",)


def _config(stack: str, **plan) -> ParallelConfig:
    return ParallelConfig(**stack_config_fields(load_stack(stack), "bf16", "llama3-8b"), **plan)


@pytest.mark.parametrize("stack, plan_fields, field", [
    ("megatron-lm-2021", dict(dp=4, tp=2, cp=2), "cp"),
    ("megatron-lm-2021", dict(dp=8, tp=2, sequence_parallel=True), "sequence_parallel"),
    ("megatron-lm-2021", dict(dp=8, tp=2, zero_stage=1), "zero_stage"),
    ("megatron-lm-2021", dict(dp=8, tp=2, recompute="selective"), "recompute"),
    ("megatron-lm-2021", dict(dp=8, tp=2, offload_activation_layers=2), "offload_activation_layers"),
    ("megatron-lm-2019", dict(dp=4, tp=2, pp=2), "pp"),
    ("megatron-lm-2019", dict(dp=8, tp=2, recompute="full", recompute_num_layers=4), "recompute_num_layers"),
    ("megatron-deepspeed", dict(dp=4, tp=2, pp=2, zero_stage=2), "zero_stage"),
    ("megatron-deepspeed", dict(dp=4, tp=2, pp=2, vpp=2), "vpp"),
])
def test_simulate_refuses_a_plan_using_what_its_stack_lacks(stack, plan_fields, field):
    model = load_model("llama3-8b")
    c = _config(stack, micro_batch=1, global_batch=64, **plan_fields)
    with pytest.raises(InputError) as err:
        check_config(model, c, 16)
    assert err.value.field == field and "training.lacks" in err.value.message


def test_what_the_stack_has_still_runs():
    model = load_model("llama3-8b")
    for stack, fields_ in (("megatron-lm-2021", dict(dp=4, tp=2, pp=2, vpp=2, recompute="full")),
                           ("megatron-lm-2022", dict(dp=8, tp=2, sequence_parallel=True, recompute="selective")),
                           ("megatron-deepspeed", dict(dp=4, tp=2, pp=2, zero_stage=1)),
                           ("megatron-deepspeed", dict(dp=8, tp=2, zero_stage=2)),       # ZeRO-2 without a pipeline
                           # Megatron-Core: ZeRO-3 (Megatron-FSDP) at pp 1, the distributed optimizer under a
                           # pipeline (ZeRO-3 with pp 2 is refused: lacks zero2_with_pipeline)
                           ("megatron-core", dict(dp=4, tp=2, cp=2, zero_stage=3)),
                           ("megatron-core", dict(dp=2, tp=2, cp=2, pp=2, zero_stage=1))):
        c = _config(stack, micro_batch=1, global_batch=64, **fields_)
        check_config(model, c, 16)
        check_stack_features(c)


def test_the_cli_says_so_on_one_line_with_exit_2():
    out = CliRunner().invoke(main, ["simulate", "-m", "llama3-8b", "-c", "dgx-a100-80gb", "-n", "16", "--tp", "2",
                                    "--cp", "2", "--global-batch", "64", "--stack", "megatron-lm-2021"])
    assert out.exit_code == 2
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cp: the software stack has no context parallelism")


def test_the_planner_never_ranks_what_the_stack_lacks_and_prunes_only_those_rows():
    model = load_model("llama3-8b")
    lacks = load_stack("megatron-lm-2021").training.lacks
    every = enumerate_space(model, SearchConstraints(gpus=(32, 32), global_batch=64, max_tp=8))
    within = enumerate_space(model, SearchConstraints(gpus=(32, 32), global_batch=64, max_tp=8, stack_lacks=lacks))
    cols = within.columns
    assert (cols["cp"] == 1).all() and (cols["zero_stage"] == 0).all() and (cols["sequence_parallel"] == 0).all()
    assert (cols["recompute"] != 1).all()                                     # code 1 = selective
    assert within.pruned["stack"] > 0 and every.pruned["stack"] == 0
    assert within.raw_size == every.raw_size
    # the rows kept are exactly the full space's rows that use none of it
    e = every.columns
    keep = ~lacked_use(lacks, pp=e["pp"], cp=e["cp"], ep=e["ep"], vpp=e["vpp"], zero_stage=e["zero_stage"],
                       sequence_parallel=(e["sequence_parallel"] == 1) & (e["tp"] > 1), selective=e["recompute"] == 1)
    assert len(within) == int(keep.sum()) < len(every)


def test_a_plan_on_an_old_stack_ranks_runnable_rows_that_simulate_accepts():
    result = plan("llama3-70b", "dgx-a100-80gb", 64, 256, stack="megatron-lm-2021", max_plans=30)
    p = result.plans
    assert len(p) > 0 and (p["zero_stage"] == 0).all() and (p["cp"] == 1).all()
    assert (p["recompute"] != "selective").all() and (p["offload_activation_layers"] == 0).all()
    assert not p["sequence_parallel"].astype(bool).any()
    model = load_model("llama3-70b")
    for rank in range(min(5, len(p))):
        check_config(model, result.config(rank), 64)
    with pytest.raises(InputError) as err:
        plan("llama3-70b", "dgx-a100-80gb", 64, 256, stack="megatron-lm-2021", fixed={"cp": 2})
    assert err.value.field == "cp" and "training.lacks lists context_parallel" in err.value.message


def test_the_cross_pool_search_keeps_to_the_stack():
    r = plan_heterogeneous("llama3-8b", "examples/clusters/a100-h100.yaml", 64, stack="megatron-lm-2021")
    assert len(r.plans) > 0 and (r.plans["zero_stage"] == 0).all()
    assert (r.plans["recompute"] != "selective").all() and not r.plans["sequence_parallel"].astype(bool).any()
    with pytest.raises(InputError, match="no pipeline parallelism"):
        plan_heterogeneous("llama3-8b", "examples/clusters/a100-h100.yaml", 64, stack="megatron-lm-2019")
    with pytest.raises(InputError) as err:
        plan_heterogeneous("llama3-8b", "examples/clusters/a100-h100.yaml", 64, stack="megatron-lm-2021", zeros=(1,))
    assert err.value.field == "zero_stage"


def test_hardware_stacks_prints_what_a_release_lacks_as_names():
    out = CliRunner().invoke(main, ["hardware", "stacks", "megatron-lm-2022"])
    assert out.exit_code == 0
    line = next(ln for ln in out.output.splitlines() if ln.strip().startswith("lacks "))
    assert "context_parallel, expert_parallel, zero1, zero2, zero3" in line and "d898a8991d" in line
    line = next(ln for ln in CliRunner().invoke(main, ["hardware", "stacks", "megatron-core"]).output.splitlines()
                if ln.strip().startswith("lacks "))
    # only these: ZeRO >= 2 needs pp 1 (an FSDP), MoE at tp > 1 needs sequence parallelism
    assert line.split()[1:3] == ["zero2_with_pipeline,", "moe_tp_without_sp"], line


def test_nothing_fits_names_what_the_stack_lacks_and_suggests_nothing_it_cannot_run():
    """Llama 3 70B on 64 A100 under Megatron-LM 2019 (tensor and data parallelism only, no ZeRO,
    no offload): the smallest layout, tp 8 with full recomputation, needs 169.7 GiB. More GPUs
    only add replicas of it and the stack cannot offload the optimizer, so neither is suggested;
    the features it lacks are."""
    with pytest.raises(InputError) as err:
        plan("llama3-70b", "dgx-a100-80gb", 64, 256, stack="megatron-lm-2019")
    assert err.value.field == "memory" and "tp=8 pp=1" in err.value.message
    assert "a stack that has pipeline parallelism (pp > 1), ZeRO-1" in err.value.fix
    assert "more GPUs" not in err.value.fix and "optimizer states on the host" not in err.value.fix
    with pytest.raises(InputError) as err:
        plan("llama3-70b", "dgx-a100-80gb", 8, 256)          # Megatron-Core: more GPUs do help
    assert "more GPUs (32 fit)" in err.value.fix and "a stack that has" not in err.value.fix


def test_a_cross_pool_plan_with_sequence_parallelism_the_stack_lacks_is_refused():
    out = CliRunner().invoke(main, ["simulate", "-m", "llama3-70b", "-c", "examples/clusters/a100-h100.yaml",
                                    "--global-batch", "512", "--group", "4x h100:tp8:pp4", "--group", "2x a100:tp8:pp8",
                                    "--recompute", "full", "--sequence-parallel", "--stack", "megatron-lm-2021"])
    assert out.exit_code == 2, out.output
    assert out.output.strip().startswith("error: sequence_parallel: the software stack has no Megatron sequence")
    ok = CliRunner().invoke(main, ["simulate", "-m", "llama3-70b", "-c", "examples/clusters/a100-h100.yaml",
                                   "--global-batch", "512", "--group", "4x h100:tp8:pp4", "--group", "2x a100:tp8:pp8",
                                   "--recompute", "full", "--stack", "megatron-lm-2021"])
    assert ok.exit_code == 0, ok.output


def test_when_only_what_the_stack_lacks_would_lay_the_model_out_the_error_says_so():
    with pytest.raises(InputError) as err:
        plan("llama3-8b", "dgx-h100", 16, 128, stack="megatron-lm-2021", schedules=("zb-h1", "zb-h2"))
    assert err.value.field == "stack" and "zero-bubble and DualPipe schedules" in err.value.message
    with pytest.raises(InputError) as err:          # each alone is fine; together DeepSpeed's engine refuses them
        plan("llama3-8b", "dgx-h100", 16, 128, stack="deepspeed-2021", fixed={"zero_stage": 2, "pp": 2})
    assert err.value.field == "stack" and "ZeRO-2 or ZeRO-3 together with pipeline parallelism" in err.value.message


def test_the_torchtitan_export_refuses_zero1_priced_with_whole_parameters_whatever_the_stack_flag():
    """meta-internal-2023 states FSDP's ZeRO-2 (regathers) and still offers ZeRO-1: its ZeRO-1 plan
    is priced with whole parameters, which torchtitan's 'never' would regather 32 times."""
    from paraplan import api
    from paraplan.exports import torchtitan
    row = api.simulate("llama3-8b", "dgx-h100", gpus=16, global_batch=512, zero_stage=1,
                       stack="meta-internal-2023").iloc[0]
    assert row["zero2_gather_every_microbatch"]
    with pytest.raises(InputError) as err:
        torchtitan.emit(row)
    assert err.value.field == "zero_stage" and "32 micro-batches" in err.value.message


def test_the_memory_search_recomputes_every_layer_where_the_stack_cannot_recompute_some():
    """Llama 3 8B on 8 A100-40GB: Megatron-LM 2021 (the block method) fits with 13 of 32 layers
    recomputed; Megatron-LM 2019, whose checkpointing covers every layer of a chunk, is never
    given a count, and what it ranks simulate accepts."""
    v21 = plan("llama3-8b", "dgx-a100-40gb", 8, 64, stack="megatron-lm-2021", max_plans=20).plans
    v19 = plan("llama3-8b", "dgx-a100-40gb", 8, 64, stack="megatron-lm-2019", max_plans=20)
    assert (v21["recompute_num_layers"] > 0).any()
    assert (v19.plans["recompute_num_layers"] == 0).all() and (v19.plans["pp"] == 1).all()
    model = load_model("llama3-8b")
    for rank in range(min(5, len(v19.plans))):
        check_config(model, v19.config(rank), 8)


@pytest.mark.parametrize("entry", [["pipeline"], {"pipeline": True}, 3])
def test_a_stack_lacks_entry_that_is_not_a_feature_name_is_an_input_error(entry, tmp_path):
    # a nested list used to reach ``entry in STACK_FEATURES`` and raise a bare TypeError
    # (unhashable), which the CLI reported as an internal bug (exit 1)
    with pytest.raises(InputError, match="stack_lacks: each entry must be a feature name") as err:
        ParallelConfig(stack_lacks=[entry])
    assert "choose from pipeline" in str(err.value)
    from paraplan import api
    with pytest.raises(InputError, match="stack_lacks"):
        api.simulate("llama3-8b", "dgx-h100", gpus=16, tp=8, global_batch=16, stack_lacks=[entry])
    import json
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"global_batch": 64, "zero_stage": 1, "groups": [
        {"replicas": 4, "stages": [{"pool": "h100", "tp": 8, "layers": 32}]}], "software": {"stack_lacks": [entry]}}))
    out = CliRunner().invoke(main, ["simulate", "-m", "llama3-8b", "-c", "examples/clusters/a100-h100.yaml",
                                    "--plan", str(plan_file)])
    assert out.exit_code == 2, out.output
    assert out.output.strip().startswith("error: stack_lacks: each entry must be a feature name"), out.output


def test_a_sweep_over_stack_lacks_with_a_nested_list_raises_an_input_error_or_records_it():
    from paraplan import api
    base = dict(model="llama3-8b", cluster="dgx-h100", gpus=16, tp=8, global_batch=16)
    with pytest.raises(InputError, match="stack_lacks"):
        api.sweep(base, "stack_lacks", [[["pipeline"]]])
    df = api.sweep(base, "stack_lacks", [[["pipeline"]]], on_error="skip")
    assert len(df) == 1 and "each entry must be a feature name" in df["error"].iloc[0]
