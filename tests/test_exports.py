"""Launch configs from plans: Megatron-LM flags, torchtitan TOML, DeepSpeed JSON (paraplan.exports).

The three outputs are read back into plan fields (degrees, micro/global batch, recompute, ZeRO
stage) with the frameworks' own semantics and compared with the plan; every emitted name is
checked against the documented allowlists of the frameworks' real option names.
"""
from __future__ import annotations

import json
import shlex
import tomllib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hardware_specs.errors import InputError
from paraplan import api, exports

MODEL, CLUSTER, GPUS, TOKENS = "llama3-70b", "dgx-h100", 256, 4 * 2**20


# ---- reading the outputs back ----------------------------------------------------------------

def megatron_flags(text: str) -> dict[str, str | None]:
    """flag -> value (None for store_true flags) from the emitted bash arrays."""
    flags: dict[str, str | None] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("--"):
            assert line == "" or line.startswith("#") or line.endswith("=(") or line == ")", line
            continue
        parts = shlex.split(line)
        assert parts[0] not in flags, f"{parts[0]} given twice"
        assert len(parts) <= 2, line
        flags[parts[0]] = parts[1] if len(parts) == 2 else None
    return flags


def megatron_plan(text: str, world: int) -> dict:
    f = megatron_flags(text)
    tp = int(f["--tensor-model-parallel-size"])
    pp = int(f["--pipeline-model-parallel-size"])
    cp = int(f.get("--context-parallel-size") or 1)
    if "--num-layers-per-virtual-pipeline-stage" in f:
        vpp = int(f["--num-layers"]) // (pp * int(f["--num-layers-per-virtual-pipeline-stage"]))
    else:
        vpp = int(f.get("--num-virtual-stages-per-pipeline-rank") or 1)
    granularity = f.get("--recompute-granularity")
    if "--data-parallel-sharding-strategy" in f:
        zero = {"optim": 1, "optim_grads": 2, "optim_grads_params": 3}[f["--data-parallel-sharding-strategy"]]
    else:
        zero = 1 if "--use-distributed-optimizer" in f else 0
    return {"dp": world // (tp * pp * cp), "tp": tp, "pp": pp, "cp": cp, "vpp": vpp,
            "ep": int(f.get("--expert-model-parallel-size") or 1),
            "micro_batch": int(f["--micro-batch-size"]), "global_batch": int(f["--global-batch-size"]),
            "recompute": granularity or "none", "zero_stage": {zero}, "seq_len": int(f["--seq-length"])}


def torchtitan_plan(text: str) -> dict:
    doc = tomllib.loads(text)
    par, train = doc["parallelism"], doc["training"]
    pp = par["pipeline_parallel_degree"]
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    stages = len(par.get("pipeline_parallel_split_points", [])) + 1
    micro = par["pipeline_parallel_microbatch_size"] if pp > 1 else train["local_batch_size"]
    if dp == 1 and par["context_parallel_degree"] == 1:
        zero = {0, 1, 2, 3}                  # nothing to shard: every stage is the same run
    elif par["data_parallel_shard_degree"] == 1 and par["data_parallel_replicate_degree"] > 1:
        zero = {0}
    else:
        zero = {3} if par["fsdp_reshard_after_forward"] == "always" else {1, 2}
    return {"dp": dp, "tp": par["tensor_parallel_degree"], "pp": pp, "cp": par["context_parallel_degree"],
            "vpp": stages // pp if pp > 1 and "pipeline_parallel_split_points" in par else 1,
            "ep": par.get("expert_parallel_degree", 1), "micro_batch": micro,
            "global_batch": train["global_batch_size"], "recompute": doc["activation_checkpoint"]["mode"],
            "zero_stage": zero, "seq_len": train["seq_len"]}


def deepspeed_plan(text: str, world: int) -> dict:
    cfg = json.loads(text)
    tp = cfg.get("tensor_parallel", {}).get("autotp_size", 1)
    pp = cfg.get("pipeline", {}).get("stages", 1)
    cp = cfg.get("sequence_parallel_size", 1)
    dp = cfg["train_batch_size"] // (cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"])
    assert dp * tp * pp * cp == world
    if cfg.get("pipeline", {}).get("activation_checkpoint_interval", 0) >= 1:
        recompute = "full"
    else:
        recompute = "selective" if "activation_checkpointing" in cfg else "none"
    return {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "vpp": 1,
            "ep": cfg.get("expert_parallel", {}).get("autoep_size", 1),
            "micro_batch": cfg["train_micro_batch_size_per_gpu"], "global_batch": cfg["train_batch_size"],
            "recompute": recompute, "zero_stage": {cfg["zero_optimization"]["stage"]}}


def expected(row) -> dict:
    return {k: int(row.get(k, 1)) for k in ("dp", "tp", "pp", "cp", "vpp", "ep", "micro_batch", "global_batch")} | {
        "recompute": str(row["recompute"])}


def assert_names(plan: dict, text_plan: dict, framework: str) -> None:
    for key, value in expected(plan).items():
        assert text_plan[key] == value, (framework, key, text_plan[key], value)
    assert int(plan["zero_stage"]) in text_plan["zero_stage"], (framework, plan["zero_stage"], text_plan["zero_stage"])


# ---- allowlists and value ranges -------------------------------------------------------------

def check_megatron(text: str) -> None:
    for flag, value in megatron_flags(text).items():
        assert flag in exports.MEGATRON_OPTIONS, flag
        if flag in exports.MEGATRON_CHOICES:
            assert value in exports.MEGATRON_CHOICES[flag], (flag, value)
        elif value is not None and value.lstrip("-").isdigit():
            assert int(value) >= 1, (flag, value)


def check_torchtitan(text: str) -> None:
    doc = tomllib.loads(text)
    for table, values in doc.items():
        assert table in exports.TORCHTITAN_KEYS, table
        for key, value in values.items():
            assert key in exports.TORCHTITAN_KEYS[table], (table, key)
            if (table, key) in exports.TORCHTITAN_CHOICES:
                assert value in exports.TORCHTITAN_CHOICES[(table, key)], (table, key, value)
            elif isinstance(value, int) and not isinstance(value, bool):
                assert value >= 1, (table, key, value)


def check_deepspeed(text: str) -> None:
    cfg = json.loads(text)

    def walk(d, prefix=""):
        for key, value in d.items():
            path = prefix + key
            assert path in exports.DEEPSPEED_KEYS, path
            if isinstance(value, dict):
                walk(value, path + ".")
            elif isinstance(value, int) and not isinstance(value, bool) and not path.endswith(
                    ("zero_optimization.stage", "activation_checkpoint_interval")):
                assert value >= 1, (path, value)
    walk(cfg)
    assert cfg["zero_optimization"]["stage"] in (0, 1, 2, 3)
    assert not (cfg["bf16"]["enabled"] and cfg["fp16"]["enabled"])


CHECK = {"megatron": check_megatron, "torchtitan": check_torchtitan, "deepspeed": check_deepspeed}


def read_back(text: str, framework: str, world: int) -> dict:
    if framework == "megatron":
        return megatron_plan(text, world)
    if framework == "torchtitan":
        return torchtitan_plan(text)
    return deepspeed_plan(text, world)


# ---- the Llama-3-70B on 256 H100 plan --------------------------------------------------------

@pytest.fixture(scope="module")
def common_plan():
    """The planner's best Llama-3-70B plan on 256 H100 that all three frameworks run as planned."""
    row = api.best_plan(MODEL, CLUSTER, GPUS, TOKENS, vpp=1, zero_stage=1, cp=1).iloc[0]
    assert row.fits and row.n_gpus == GPUS
    return row


@pytest.fixture(scope="module")
def winner():
    return api.best_plan(MODEL, CLUSTER, GPUS, TOKENS).iloc[0]


def test_llama70b_plan_is_named_identically_by_megatron_torchtitan_and_deepspeed(common_plan):
    for framework in exports.FRAMEWORKS:
        text = exports.emit(common_plan, framework)
        CHECK[framework](text)
        assert_names(common_plan, read_back(text, framework, GPUS), framework)


def test_emitted_names_are_the_frameworks_documented_options(common_plan, winner):
    for row in (common_plan, winner):
        for framework in exports.FRAMEWORKS:
            try:
                text = exports.emit(row, framework)
            except InputError:
                continue
            CHECK[framework](text)


def test_megatron_flags_carry_the_model_and_the_sequence_length(common_plan):
    flags = megatron_flags(exports.emit_megatron(common_plan))
    assert flags["--num-layers"] == "80" and flags["--hidden-size"] == "8192"
    assert flags["--num-query-groups"] == "8" and "--group-query-attention" in flags
    assert flags["--seq-length"] == "8192" and "--swiglu" in flags
    assert "--use-distributed-optimizer" in flags            # ZeRO-1


def test_interleaved_winner_splits_layers_the_same_in_megatron_and_torchtitan():
    row = api.simulate(MODEL, CLUSTER, gpus=GPUS, global_batch_tokens=TOKENS, tp=8, pp=4, vpp=5, zero_stage=1,
                       recompute="selective", sequence_parallel=True).iloc[0]
    mg = megatron_plan(exports.emit_megatron(row), GPUS)
    tt = torchtitan_plan(exports.emit_torchtitan(row))
    assert mg["vpp"] == tt["vpp"] == 5
    doc = tomllib.loads(exports.emit_torchtitan(row))
    assert doc["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert doc["parallelism"]["pipeline_parallel_split_points"][0] == "layers.4"
    with pytest.raises(InputError) as err:
        exports.emit_deepspeed(row)
    assert err.value.field == "vpp"


def test_zero2_beside_a_pipeline_is_refused_by_megatron_and_deepspeed_but_runs_in_torchtitan():
    row = api.simulate(MODEL, CLUSTER, gpus=GPUS, global_batch_tokens=TOKENS, tp=4, pp=4, zero_stage=2,
                       sequence_parallel=True, recompute="selective").iloc[0]
    for framework in ("megatron", "deepspeed"):
        with pytest.raises(InputError) as err:
            exports.emit(row, framework)
        assert err.value.field == "zero_stage"
    doc = tomllib.loads(exports.emit_torchtitan(row))
    assert doc["parallelism"]["fsdp_reshard_after_forward"] == "never"


def test_zero3_without_pipeline_maps_to_fsdp_in_all_three():
    row = api.simulate(MODEL, CLUSTER, gpus=GPUS, global_batch_tokens=TOKENS, tp=2, zero_stage=3,
                       recompute="full", sequence_parallel=True).iloc[0]
    flags = megatron_flags(exports.emit_megatron(row))
    assert flags["--data-parallel-sharding-strategy"] == "optim_grads_params" and "--use-megatron-fsdp" in flags
    assert flags["--recompute-granularity"] == "full" and flags["--recompute-method"] == "uniform"
    assert flags["--recompute-num-layers"] == "1"
    doc = tomllib.loads(exports.emit_torchtitan(row))
    assert doc["parallelism"]["fsdp_reshard_after_forward"] == "always"
    assert doc["activation_checkpoint"]["mode"] == "full"
    cfg = json.loads(exports.emit_deepspeed(row))
    assert cfg["zero_optimization"]["stage"] == 3 and cfg["pipeline"]["activation_checkpoint_interval"] == 1
    for framework in exports.FRAMEWORKS:
        assert_names(row, read_back(exports.emit(row, framework), framework, GPUS), framework)


def test_moe_plan_names_experts_in_every_framework():
    row = api.simulate("mixtral-8x7b", CLUSTER, gpus=64, global_batch=64, tp=2, ep=8, zero_stage=1,
                       recompute="full", sequence_parallel=True).iloc[0]
    flags = megatron_flags(exports.emit_megatron(row))
    assert flags["--num-experts"] == "8" and flags["--moe-router-topk"] == "2"
    assert flags["--expert-model-parallel-size"] == "8"
    assert tomllib.loads(exports.emit_torchtitan(row))["parallelism"]["expert_parallel_degree"] == 8
    assert json.loads(exports.emit_deepspeed(row))["expert_parallel"]["autoep_size"] == 8


def test_dtypes_map_to_precision_flags():
    base = dict(gpus=64, global_batch=128, tp=8, pp=1, zero_stage=1)
    fp8 = api.simulate(MODEL, CLUSTER, dtype="fp8", **base).iloc[0]
    flags = megatron_flags(exports.emit_megatron(fp8))
    assert flags["--fp8-format"] == "hybrid" and "--bf16" in flags
    assert tomllib.loads(exports.emit_torchtitan(fp8))["model"]["converters"] == ["float8"]
    fp16 = api.simulate(MODEL, CLUSTER, dtype="fp16", **base).iloc[0]
    assert "--fp16" in megatron_flags(exports.emit_megatron(fp16))
    assert json.loads(exports.emit_deepspeed(fp16))["fp16"]["enabled"] is True
    with pytest.raises(InputError) as err:
        exports.emit_torchtitan(fp16)
    assert err.value.field == "dtype"


def test_best_plan_for_each_framework_is_runnable_there(winner):
    for framework in exports.FRAMEWORKS:
        row = api.best_plan_for(framework, MODEL, CLUSTER, GPUS, TOKENS).iloc[0]
        text = exports.emit(row, framework)
        CHECK[framework](text)
        assert row.tokens_per_s <= winner.tokens_per_s * (1 + 1e-9)


def test_emit_reads_a_planner_result_and_a_step_report():
    import planners
    result = planners.plan(MODEL, CLUSTER, GPUS, global_batch_tokens=TOKENS, fixed={"vpp": 1, "zero_stage": 1,
                                                                                    "cp": 1})
    best = result.plans.iloc[0]
    assert megatron_plan(exports.emit(result, "megatron"), GPUS)["tp"] == int(best.tp)
    report, _, _ = api.simulate_report(MODEL, CLUSTER, gpus=64, global_batch=128, tp=8, pp=1, zero_stage=1)
    assert deepspeed_plan(exports.emit(report, "deepspeed"), 64)["tp"] == 8


def test_unknown_framework_and_incomplete_rows_are_input_errors(common_plan):
    with pytest.raises(InputError) as err:
        exports.emit(common_plan, "colossalai")
    assert err.value.field == "--emit"
    with pytest.raises(InputError) as err:
        exports.emit({"model": MODEL, "dp": 8}, "megatron")
    assert err.value.field in ("tp", "pp", "micro_batch", "global_batch")


# ---- any valid plan: emitted or refused, never misnamed --------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2]),
       vpp=st.sampled_from([1, 2, 4]), zero=st.integers(0, 3), mb=st.sampled_from([1, 2]),
       recompute=st.sampled_from(["none", "selective", "full"]), sp=st.booleans(),
       cp_kind=st.sampled_from(["ring", "ulysses"]))
def test_every_plan_is_emitted_with_its_own_fields_or_refused_with_a_named_field(tp, pp, cp, vpp, zero, mb, recompute,
                                                                                  sp, cp_kind):
    world = 64
    dp = world // (tp * pp * cp)
    vpp = vpp if pp > 1 else 1
    row = {"model": "llama3-8b", "seq_len": 8192, "dp": dp, "tp": tp, "pp": pp, "cp": cp, "vpp": vpp,
           "micro_batch": mb, "global_batch": dp * mb * pp * 4, "zero_stage": zero, "recompute": recompute,
           "sequence_parallel": sp, "cp_kind": cp_kind}
    for framework in exports.FRAMEWORKS:
        try:
            text = exports.emit(row, framework)
        except InputError as exc:
            assert exc.field in ("zero_stage", "vpp", "schedule", "cp_kind", "dtype")
            continue
        CHECK[framework](text)
        assert_names(row, read_back(text, framework, world), framework)
