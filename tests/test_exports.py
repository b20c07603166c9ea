"""Launch configs from plans (paraplan.exports): the shared part and the choice of a plan.

Each framework's own parser / validator runs on the exports in test_exports_megatron.py,
test_exports_torchtitan.py and test_exports_deepspeed.py; here: the plan normalisation, the
stage layout rule, the refusal contract (one InputError naming the field, never a different
plan), the read-back of the degrees from every output, and ``--emit`` picking the best plan a
framework runs and saying what it costs.
"""
from __future__ import annotations

import json
import re
import shlex

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hardware_specs.errors import InputError
from paraplan import api, exports
from paraplan.cli import main as cli
from paraplan.exports import matrix, megatron_table, torchtitan
from paraplan.exports.common import chunk_layers, stage_layer_counts

MODEL, CLUSTER, GPUS, TOKENS = "llama3-70b", "dgx-h100", 256, 4 * 2**20


# ---- reading the outputs back ----------------------------------------------------------------

def megatron_flags(text: str) -> dict[str, str | None]:
    """flag -> value (None for switches) from the emitted bash arrays."""
    flags: dict[str, str | None] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("--"):
            assert line == "" or line.startswith(("#", "export ")) or line.endswith("=(") or line == ")", line
            continue
        parts = shlex.split(line)
        assert parts[0] not in flags, f"{parts[0]} given twice"
        flags[parts[0]] = " ".join(parts[1:]) if len(parts) > 1 else None
    return flags


def read_back(text: str, framework: str, row: dict) -> dict:
    """The plan's degrees, batch and recomputation as the framework will read them."""
    p = exports.plan_fields(row)
    if framework == "megatron":
        f = megatron_flags(text)
        tp, pp = int(f["--tensor-model-parallel-size"]), int(f["--pipeline-model-parallel-size"])
        cp = int(f.get("--context-parallel-size") or 1)
        if "--num-virtual-stages-per-pipeline-rank" in f:
            vpp = int(f["--num-virtual-stages-per-pipeline-rank"])
        elif "--pipeline-model-parallel-layout" in f:
            vpp = megatron_table.layout_stages(f["--pipeline-model-parallel-layout"]) // pp
        else:
            vpp = 1
        return {"dp": p["n_gpus"] // (tp * pp * cp), "tp": tp, "pp": pp, "cp": cp, "vpp": vpp,
                "micro_batch": int(f["--micro-batch-size"]), "global_batch": int(f["--global-batch-size"]),
                "recompute": f.get("--recompute-granularity") or "none"}
    if framework == "torchtitan":
        v = torchtitan.settings(row)
        par, tr = v["parallelism"], v["training"]
        pp = par["pipeline_parallel_degree"]
        parts = len(par.get("module_fqns_per_model_part") or [None] * pp)
        return {"dp": par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"],
                "tp": par["tensor_parallel_degree"], "pp": pp, "cp": par["context_parallel_degree"],
                "vpp": parts // pp, "micro_batch": par.get("pipeline_parallel_microbatch_size", tr["local_batch_size"]),
                "global_batch": tr["global_batch_size"], "recompute": v["activation_checkpoint"]}
    cfg = json.loads(text)
    pp = cfg.get("pipeline", {}).get("stages", 1)
    cp = cfg.get("sequence_parallel_size", 1)
    tp = cfg.get("tensor_parallel", {}).get("autotp_size", 1)
    dp = cfg.get("data_parallel_size", p["n_gpus"] // (tp * pp * cp))
    distinct = cfg["train_batch_size"] // (tp if pp == 1 and cp == 1 else 1)
    recompute = ("none" if "activation_checkpointing" not in cfg else
                 "full" if cfg.get("pipeline", {}).get("activation_checkpoint_interval", 0) >= 1 or
                 p["recompute"] == "full" else "selective")
    return {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "vpp": 1, "micro_batch": cfg["train_micro_batch_size_per_gpu"],
            "global_batch": distinct, "recompute": recompute}


def expected(row: dict) -> dict:
    p = exports.plan_fields(row)
    return {k: p[k] for k in ("dp", "tp", "pp", "cp", "vpp", "micro_batch", "global_batch", "recompute")}


# ---- the matrix: every framework exports the plan it was given, or refuses it ---------------

@pytest.mark.parametrize("name, row, refused", list(matrix.MATRIX), ids=[m[0] for m in matrix.MATRIX])
def test_every_matrix_plan_is_exported_with_its_own_degrees_or_refused_on_the_expected_field(name, row, refused):
    for framework in exports.FRAMEWORKS:
        if framework in refused:
            with pytest.raises(InputError) as err:
                exports.emit(row, framework)
            assert err.value.field == refused[framework], (framework, err.value)
            assert not exports.can_run(row, framework)
            continue
        text = exports.emit(row, framework)
        assert exports.can_run(row, framework)
        assert read_back(text, framework, row) == expected(row), framework


def test_every_framework_refuses_something_and_accepts_something_in_the_matrix():
    for framework in exports.FRAMEWORKS:
        refused = [name for name, _, r in matrix.MATRIX if framework in r]
        accepted = ([name for name, _, r in matrix.MATRIX if framework not in r]
                    + [name for name, _ in matrix.without_sequence_parallel(framework)])
        assert len(accepted) >= 8, (framework, accepted)
        assert framework == "megatron" or refused


# ---- the stage layout ------------------------------------------------------------------------

def test_61_deepseek_layers_and_one_mtp_module_on_pp4_take_15_16_16_14_plus_mtp():
    assert stage_layer_counts(61, 4, mtp_layers=1) == (15, 16, 16, 14)


@settings(max_examples=300, deadline=None)
@given(layers=st.integers(2, 130), pp=st.integers(2, 16), vpp=st.integers(1, 4), mtp=st.integers(0, 2))
def test_layout_holds_every_layer_and_no_chunk_exceeds_the_step_models_slowest_stage(layers, pp, vpp, mtp):
    """The rule: every chunk holds at least one transformer layer (decoder layer or MTP module),
    except that the first may hold only the embedding and the last only the loss; so at most
    layers + MTP + 2 chunks, and anything beyond is refused on pp."""
    chunks = pp * vpp
    try:
        decoder, mtp_of = chunk_layers(layers, pp, vpp, mtp)
    except InputError as err:
        assert err.field == "pp" and layers + mtp + 2 < chunks
        return
    assert layers + mtp + 2 >= chunks
    assert stage_layer_counts(layers, pp, vpp, mtp) == decoder
    assert sum(decoder) == layers and sum(mtp_of) == mtp and len(decoder) == len(mtp_of) == chunks
    units = [d + m for d, m in zip(decoder, mtp_of)]
    assert min(units[1:-1], default=1) >= 1                     # no empty chunk inside the path
    empty = [i for i, u in enumerate(units) if u == 0]           # only the embedding or only the loss
    assert set(empty) <= {0, chunks - 1} and len(empty) == max(0, chunks - layers - mtp)
    assert max(units) == -(-(layers + mtp) // chunks)            # ceil((L + mtp) / chunks)
    assert max(units) - min(units) <= 1
    # the MTP modules follow the last decoder layer
    first_mtp = next((i for i, m in enumerate(mtp_of) if m), chunks)
    assert all(d == 0 for d in decoder[first_mtp + 1:])


def test_126_layers_on_128_chunks_put_the_embedding_and_the_loss_alone_on_the_end_chunks():
    # Llama 3 405B on pp 16 x vpp 8 (Llama 3 paper, section 3.3.2), and one layer short: the loss alone
    assert stage_layer_counts(126, 16, 8) == (0,) + (1,) * 126 + (0,)
    assert stage_layer_counts(127, 16, 8) == (1,) * 127 + (0,)
    with pytest.raises(InputError) as err:
        stage_layer_counts(125, 16, 8)
    assert err.value.field == "pp" and "at most layers + 2" in err.value.message
    # 61 DeepSeek-V3 layers and the MTP module on 64 chunks: the MTP module and the loss each alone
    decoder, mtp = chunk_layers(61, 16, 4, 1)
    assert decoder == (0,) + (1,) * 61 + (0, 0) and mtp == (0,) * 62 + (1, 0)


def test_the_layout_is_the_step_models_own():
    from simulator.pipeline.schedules import ScheduleKind
    from simulator.stage_layout import position_layers
    for layers, pp, vpp, mtp in ((61, 4, 1, 1), (126, 16, 1, 0), (32, 4, 3, 0), (80, 4, 5, 0)):
        kind = ScheduleKind.INTERLEAVED if vpp > 1 else ScheduleKind.ONE_F_ONE_B
        units = position_layers(kind, pp, vpp, layers + mtp)[0].tolist()
        assert list(stage_layer_counts(layers, pp, vpp, mtp)) == units[:-1] + [units[-1] - mtp]


def test_first_and_last_stage_counts_from_the_plan_are_kept_and_the_rest_split():
    # the last stage's count includes the MTP module, as the step model counts it
    assert stage_layer_counts(61, 4, mtp_layers=1, first_stage_layers=13, last_stage_layers=13) == (13, 18, 18, 12)
    with pytest.raises(InputError) as err:
        stage_layer_counts(8, 4, first_stage_layers=7, last_stage_layers=1)
    assert err.value.field == "first_stage_layers"


# ---- the plan normalisation ------------------------------------------------------------------

def test_incomplete_rows_unknown_frameworks_and_missing_models_are_input_errors():
    with pytest.raises(InputError) as err:
        exports.emit({"model": MODEL, "dp": 8}, "megatron")
    assert err.value.field in ("tp", "pp", "micro_batch", "global_batch")
    with pytest.raises(InputError) as err:
        exports.emit(matrix.MATRIX[0][1], "colossalai")
    assert err.value.field == "--emit"
    with pytest.raises(InputError) as err:
        exports.emit({**matrix.MATRIX[0][1], "model": "no-such-model"}, "megatron")
    assert err.value.field == "model"


def test_emit_reads_a_planner_result_a_step_report_and_a_simulate_row():
    import planners
    # (without the memory search the winner neither offloads nor recomputes partially: a plan
    # every framework here runs)
    result = planners.plan(MODEL, CLUSTER, 64, global_batch=128, fixed={"zero_stage": [1], "pp": [1]},
                           memory_search=False, hsdp=False)
    best = result.plans.iloc[0]
    assert megatron_flags(exports.emit(result, "megatron"))["--tensor-model-parallel-size"] == str(int(best.tp))
    report, _, _ = api.simulate_report(MODEL, CLUSTER, gpus=64, global_batch=128, tp=8, pp=1, zero_stage=1)
    assert json.loads(exports.emit(report, "deepspeed"))["tensor_parallel"]["autotp_size"] == 8
    # (torchtitan's data-parallel sharding is FSDP2: a ZeRO-2 row priced on its own stack)
    row = api.simulate(MODEL, CLUSTER, gpus=64, global_batch=128, tp=8, pp=1, zero_stage=2,
                       recompute="full", stack="torchtitan").iloc[0]
    assert torchtitan.settings(row)["parallelism"]["tensor_parallel_degree"] == 8
    core_row = api.simulate(MODEL, CLUSTER, gpus=64, global_batch=128, tp=8, pp=1, zero_stage=1,
                            recompute="full").iloc[0]
    assert "# paraplan plan: llama3-70b on 64 GPUs" in exports.emit(core_row, "megatron")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2]),
       vpp=st.sampled_from([1, 2, 4]), zero=st.integers(0, 3), mb=st.sampled_from([1, 2]),
       recompute=st.sampled_from(["none", "selective", "full"]), sp=st.booleans(),
       cp_kind=st.sampled_from(["ring", "ulysses"]))
def test_any_plan_is_emitted_with_its_own_degrees_or_refused_with_a_named_field(tp, pp, cp, vpp, zero, mb,
                                                                              recompute, sp, cp_kind):
    dp = 64 // (tp * pp * cp)
    row = {"model": "llama3-8b", "seq_len": 8192, "dp": dp, "tp": tp, "pp": pp, "cp": cp,
           "vpp": vpp if pp > 1 else 1, "micro_batch": mb, "global_batch": dp * mb * pp * 4, "zero_stage": zero,
           "recompute": recompute, "sequence_parallel": sp, "cp_kind": cp_kind}
    for framework in exports.FRAMEWORKS:
        try:
            text = exports.emit(row, framework)
        except InputError as exc:
            assert exc.field in ("zero_stage", "vpp", "schedule", "cp", "cp_kind", "tp", "recompute", "megatron",
                                 "sequence_parallel"), exc
            continue
        assert read_back(text, framework, row) == expected(row), framework


# ---- choosing the plan a framework runs ------------------------------------------------------

@pytest.fixture(scope="module")
def ranked():
    return api.plan(MODEL, CLUSTER, GPUS, TOKENS)


def test_best_runnable_skips_plans_the_framework_refuses_and_prices_the_difference(ranked):
    winner = ranked.iloc[0]
    for framework in exports.FRAMEWORKS:
        row, rank, slowdown = exports.best_runnable(ranked, framework)
        assert exports.can_run(row, framework)
        for earlier in ranked.iloc[:rank].to_dict("records"):
            assert not exports.can_run(earlier, framework)
        # step time over the winner's, minus 1 (one global batch: the inverse tokens/s ratio)
        assert slowdown == pytest.approx(ranked.iloc[rank].step_time_s / winner.step_time_s - 1, rel=1e-9)
        assert slowdown >= 0.0
    # torchtitan cannot run selective recomputation: among such plans it finds none
    pinned = ranked[(ranked.recompute == "selective") & (ranked.cp == 1)].reset_index(drop=True)
    assert len(pinned) > 0
    with pytest.raises(InputError) as err:
        exports.best_runnable(pinned, "torchtitan")
    assert err.value.field == "--emit" and "recompute" in err.value.message


def test_a_model_a_framework_cannot_build_is_refused_once_not_per_plan():
    import pandas as pd
    rows = pd.DataFrame([dict(matrix.MATRIX[0][1], tokens_per_s=2.0), dict(matrix.MATRIX[0][1], tokens_per_s=1.0)])
    with pytest.raises(InputError) as err:
        exports.best_runnable(rows, "torchtitan")
    assert err.value.field == "model"


def test_best_plan_for_resimulates_the_best_runnable_row(ranked):
    """The plan is the fastest DeepSpeed runs by its exact time, which simulate gives it to 1e-9:
    its row in the table (0-based rank 12,348) carried the closed-form estimate (27.04 s against
    simulate's 26.34), which its rank and slowdown were priced with."""
    from functools import partial

    from hardware_specs.catalog import efficiency_for_cluster, load_cluster
    from model_specs.catalog import load_model
    from planners.refine import refine_table
    cl = load_cluster(CLUSTER)
    software = ranked.attrs["software"]
    refine = partial(refine_table, load_model(MODEL), cl, efficiency_for_cluster(cl), software=software)
    for framework in ("deepspeed",):
        best = api.best_plan_for(framework, MODEL, CLUSTER, GPUS, TOKENS)
        rank = best.attrs["rank"]
        row, planned_rank, slowdown = exports.best_runnable(ranked, framework, software=software, refine=refine)
        assert row["pipeline_exact"] and api.config_label(row) == best.iloc[0].config
        assert best.iloc[0].step_time_s == pytest.approx(row["step_time_s"], rel=1e-9)
        assert best.iloc[0].tokens_per_s == pytest.approx(row["tokens_per_s"], rel=1e-9)
        assert (planned_rank, slowdown) == (rank, best.attrs["slowdown"])
        # ranked and priced by that time
        tps = best.iloc[0].tokens_per_s
        assert rank == int((ranked["tokens_per_s"] > tps).sum())
        assert best.attrs["slowdown"] == pytest.approx(ranked.iloc[0].tokens_per_s / tps - 1, rel=1e-9)
        assert exports.can_run(best.iloc[0], framework)
        # given the same request's table, it picks and re-simulates the same row without searching
        given = api.best_plan_for(framework, MODEL, CLUSTER, GPUS, TOKENS, plans=ranked)
        assert given.attrs["rank"] == rank and given.attrs["slowdown"] == best.attrs["slowdown"]
        pd.testing.assert_frame_equal(given, best)
        # and it ranks within the table it is given (the rows before the runnable one dropped)
        rest = api.best_plan_for(framework, MODEL, CLUSTER, GPUS, TOKENS, plans=ranked.iloc[rank:])
        assert rest.attrs["rank"] == 0 and rest.iloc[0].config == best.iloc[0].config


def _simulated(row: dict, spec, cl, stack: str):
    config = {k: row[k] for k in api.CONFIG_FIELDS if k in row}
    return api.simulate(spec, cl, stack=stack, **config).iloc[0]


@pytest.mark.parametrize("framework, model, gpus, batch, from_estimated", [
    ("deepspeed", "llama3-70b", 64, 128, False),   # the first plan it runs is rank 8,965, by an estimated time
    ("megatron", "llama3-8b", 16, 32, True),
    ("torchtitan", "llama3-70b", 64, 128, True),
    ("megatron", "mixtral-8x7b", 32, 64, True),
])
def test_the_plan_a_framework_runs_is_its_fastest_by_the_exact_time_simulate_gives(framework, model, gpus, batch,
                                                                                      from_estimated):
    """The ranked table times exactly only the rows that can rank near its top; a framework that
    cannot run those takes the fastest row it runs by its exact time, with simulate's numbers
    (it had taken the first it runs by the table's estimate: DeepSpeed's llama3-70b plan on 64
    H100 was printed at 30.02 s/step, simulate 28.48). Megatron and torchtitan run a plan near
    the top: past the table's last exact row, the same holds."""
    from functools import partial

    import numpy as np

    from hardware_specs.catalog import efficiency_for_cluster, load_cluster
    from model_specs.catalog import load_model
    from planners import plan
    from planners.refine import refine_table
    spec, cl = load_model(model), load_cluster(CLUSTER)
    stack = exports.default_stack(framework)
    result = plan(spec, cl, gpus, batch, stack=stack)
    plans = result.plans
    if from_estimated:
        plans = plans.iloc[int(np.flatnonzero(plans["pipeline_exact"].to_numpy())[-1]) + 1:]
    context = dict(software=result.software, model=spec, seq_len=spec.seq_len)
    first, _, _ = exports.best_runnable(plans, framework, **context)
    assert not first["pipeline_exact"]              # the first plan it runs has an estimated time
    refine = partial(refine_table, spec, cl, efficiency_for_cluster(cl), software=result.software)
    row, rank, slowdown = exports.best_runnable(plans, framework, refine=refine, **context)
    assert row["pipeline_exact"] and exports.can_run(row, framework)
    simulated = _simulated(row, spec, cl, stack)
    assert row["step_time_s"] == pytest.approx(simulated["step_time_s"], rel=1e-9)
    assert row["tokens_per_s"] == pytest.approx(simulated["tokens_per_s"], rel=1e-9)
    # no plan it runs is faster: every one whose lower bound is not above, simulated
    below = plans[plans["step_time_lower_s"] <= row["step_time_s"] * (1 + 1e-9)].to_dict("records")
    runs = [r for r in below if exports.can_run({**exports.with_stack_fields(r, result.software), "model": spec,
                                                 "seq_len": spec.seq_len}, framework)]
    assert runs
    assert all(_simulated(r, spec, cl, stack)["step_time_s"] >= row["step_time_s"] * (1 - 1e-12) for r in runs)
    # its rank and slowdown are those of its exact time
    tps = plans["tokens_per_s"].to_numpy()
    assert rank == int(np.count_nonzero(tps > row["tokens_per_s"]))
    assert slowdown == pytest.approx(max(0.0, tps[0] / row["tokens_per_s"] - 1), rel=1e-9, abs=1e-12)


def test_cli_emit_prints_the_launch_and_says_how_much_slower_than_the_winner_it_is():
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else CliRunner()
    args = ["plan", "-m", MODEL, "-c", CLUSTER, "-n", "64", "--global-batch", "128", "--fix", "recompute=selective",
            "--fix", "pp=1", "--fix", "zero=1", "--emit"]
    ok = runner.invoke(cli, args + ["megatron"])
    assert ok.exit_code == 0, ok.output
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in ok.stdout and "the unrestricted winner" in ok.stderr
    # torchtitan's stack ranks the search, and it has no ZeRO-1 (FSDP2 shards the parameters too)
    bad = runner.invoke(cli, args + ["torchtitan"])
    assert bad.exit_code == 2
    assert re.fullmatch(r"error: zero_stage: .*training\.lacks lists zero1.*\n", bad.stderr)
    slower = runner.invoke(cli, ["plan", "-m", MODEL, "-c", CLUSTER, "-n", "64", "--global-batch", "128",
                                 "--emit", "deepspeed"])
    assert slower.exit_code == 0, slower.output
    cfg = json.loads(slower.stdout)
    assert cfg["train_micro_batch_size_per_gpu"] >= 1
    note = re.search(r"rank (\d+) of \d+, ([\d.]+)% slower|the unrestricted winner runs", slower.stderr)
    assert note, slower.stderr
    # the plan is the fastest DeepSpeed runs by its exact time, and its header, rank and slowdown
    # are simulate's numbers (it had printed rank 8965 at 30.02 s/step, the table's estimate, for
    # the plan simulate times at 28.48 s)
    best = api.best_plan_for("deepspeed", MODEL, CLUSTER, 64, 128 * 8192)
    plan = best.iloc[0]
    assert f"dp={plan.dp} tp={plan.tp} pp={plan.pp}," in slower.stderr
    assert f"predicted {plan.step_time_s:.2f} s/step, {plan.tokens_per_s:,.0f} tokens/s" in slower.stderr
    assert note.group(1) == str(best.attrs["rank"] + 1) and note.group(2) == f"{100 * best.attrs['slowdown']:.1f}"


def test_cli_emit_of_a_torchtitan_plan_runs_its_per_operation_checkpointing_and_megatron_refuses_it():
    """Plans priced on --stack torchtitan recompute what its SelectiveAC reruns; --emit torchtitan
    writes that policy (it had refused every selective plan), --emit megatron, which has no such
    policy, refuses them all with one line."""
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else CliRunner()
    args = ["plan", "-m", "llama3-8b", "-c", CLUSTER, "-n", "8", "--global-batch", "16", "--stack", "torchtitan",
            "--fix", "recompute=selective", "--no-memory-search", "--emit"]
    ok = runner.invoke(cli, args + ["torchtitan"])
    assert ok.exit_code == 0, ok.output
    assert "config.activation_checkpoint = SelectiveAC.Config()" in ok.stdout
    bad = runner.invoke(cli, args + ["megatron"])
    assert bad.exit_code == 2
    assert re.fullmatch(r"error: --emit: none of the \d+ plans that fit runs in megatron as planned "
                        r"\(refused: \d+ by recompute_modules\) .*\n", bad.stderr)
    # the API's path reads the stack the same way: the selective plan runs in torchtitan
    best = api.best_plan_for("torchtitan", "llama3-8b", "dgx-h100", 8, 16 * 8192, stack="torchtitan",
                             fixed={"recompute": ["selective"]}, memory_search=False)
    assert best.attrs["rank"] == 0 and best.iloc[0]["recompute"] == "selective"


def test_cli_emit_torchtitan_ranks_and_predicts_on_the_torchtitan_stack_unless_told_otherwise():
    """``plan --emit torchtitan`` without --stack priced its plans on Megatron-Core's behaviour and
    wrote that step into the torchtitan job: Llama-3-8B on 16 H100 at 64 sequences, the same plan
    (dp16 z2), "predicted 3.53 s/step" where the torchtitan profile gives 3.94 s (+12%; on 512
    H100 at a 4Mi batch 7.68 s against 8.90 s, +16%, and a plan the torchtitan profile ranks
    5% behind its own best). Now the emitted framework's own profile prices the search (the
    profile of the release the export writes, torchtitan-0.3), and a --stack of another framework
    is named beside the prediction."""
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else CliRunner()
    args = ["plan", "-m", "llama3-8b", "-c", CLUSTER, "-n", "16", "--global-batch", "64", "--emit", "torchtitan"]

    def predicted(stdout):
        return float(re.search(r"predicted ([\d.]+) s/step", stdout).group(1))

    ok = runner.invoke(cli, args)
    assert ok.exit_code == 0, ok.output
    assert "stack profile" not in ok.stderr
    plan_row = api.plan("llama3-8b", CLUSTER, 16, global_batch=64, stack="torchtitan-0.3").iloc[0]
    assert f"dp={int(plan_row.dp)} tp={int(plan_row.tp)} pp={int(plan_row.pp)}" in ok.stdout
    fields = {k: (plan_row[k].item() if hasattr(plan_row[k], "item") else plan_row[k])
              for k in ("dp", "tp", "pp", "cp", "vpp", "micro_batch", "zero_stage", "recompute",
                        "recompute_num_layers", "offload_activation_layers", "sequence_parallel", "schedule")}
    own = api.simulate("llama3-8b", CLUSTER, gpus=16, global_batch=64, stack="torchtitan-0.3", **fields).iloc[0]
    other = api.simulate("llama3-8b", CLUSTER, gpus=16, global_batch=64, stack="megatron-core", **fields).iloc[0]
    assert predicted(ok.stdout) == pytest.approx(own.step_time_s, abs=0.005)
    assert own.step_time_s > 1.05 * other.step_time_s          # the two profiles differ on this plan
    told = runner.invoke(cli, args + ["--stack", "megatron-core"])
    assert told.exit_code == 0, told.output
    # priced on Megatron-Core: one of its plans' steps (the best torchtitan runs as priced: not
    # necessarily ``other``, whose ZeRO-2 Megatron prices with whole parameters, FSDP2 does not)
    core_steps = api.plan("llama3-8b", CLUSTER, 16, global_batch=64, stack="megatron-core")["step_time_s"]
    assert min(abs(core_steps - predicted(told.stdout))) < 0.005
    assert predicted(told.stdout) >= other.step_time_s - 0.005 or plan_row.zero_stage != 2
    assert "ranked and predicted on the megatron-core stack profile (megatron-core), not torchtitan's" in told.stderr
    mega = runner.invoke(cli, args[:-1] + ["megatron"])
    assert mega.exit_code == 0 and "stack profile" not in mega.stderr


def test_405b_plans_on_126_plus_2_chunks_run_in_megatron_with_their_embedding_and_loss_chunks():
    """The review's request (plan -m llama3.1-405b -c dgx-h100 -n 16384 --global-batch-tokens
    16777216): its winner ran 126 layers on pp 16 x vpp 8 = 128 chunks and --emit megatron
    refused it ('cannot lay 126 layers on 128 pipeline chunks'), emitting rank 20, 5.7% slower.
    No plan of the request is refused for its chunk layout now, and the 128-chunk ones export
    the plan's own layout."""
    plans = api.plan("llama3.1-405b", "dgx-h100", 16384, 16777216)
    top = plans.iloc[:200].to_dict("records")
    for rec in top:
        err = exports.refusal({**rec, "model": "llama3.1-405b"}, "megatron")
        assert err is None or "pipeline chunks" not in err.message and "layout" not in err.message, (rec["config"], err)
    ends = [r for r in top if r["pp"] * r["vpp"] == 128]
    assert ends
    for rec in ends[:5]:
        row = {**rec, "model": "llama3.1-405b"}
        if exports.can_run(row, "megatron"):
            flags = megatron_flags(exports.emit(row, "megatron"))
            assert flags["--pipeline-model-parallel-layout"] == "E|(t|)*126,L"


def test_cli_emit_with_a_table_output_is_refused_before_the_search_not_silently_dropped():
    # --emit prints the launch instead of the table; a --json beside it used to vanish without a word
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else CliRunner()
    args = ["plan", "-m", MODEL, "-c", CLUSTER, "-n", "64", "--global-batch", "128", "--emit", "megatron"]
    for extra in (["--json"], ["--csv"], ["--pareto"], ["--explain"], ["--json", "--pareto"]):
        bad = runner.invoke(cli, args + extra)
        assert bad.exit_code == 2, (extra, bad.output)
        assert bad.stdout == ""
        assert bad.stderr == (f"error: --emit: prints the launch instead of the table, so {' / '.join(extra)} would "
                              f"print nothing (run --emit and {extra[0]} as two commands)\n")


# ---- the launch line: hosts and GPUs per host from the cluster --------------------------------

def _launch_line(text: str) -> str:
    return next(line for line in text.splitlines() if "torchrun" in line)


@pytest.mark.parametrize("cluster, dp, tp, expected", [
    # 64 x 8 = 512 GPUs on DGX H100 hosts of 8: 64 hosts; the rendezvous endpoint stays a placeholder
    ("dgx-h100", 64, 8, "torchrun --nnodes 64 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:PORT "),
    # GB200 NVL72: a 72-GPU NVLink domain is 18 compute trays of 4 GPUs; 144 GPUs = 36 trays
    ("gb200-nvl72", 18, 8, "torchrun --nnodes 36 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:PORT "),
    # 4 GPUs, fewer than one host: one host of 4 processes, no rendezvous
    ("dgx-h100", 1, 4, "torchrun --nnodes 1 --nproc-per-node 4 pretrain_gpt.py"),
    # 12 GPUs do not fill 8-GPU hosts: the counts stay placeholders
    ("dgx-h100", 3, 4, "torchrun --nnodes N --nproc-per-node G --rdzv-backend c10d --rdzv-endpoint HOST:PORT "),
    # no cluster: nothing known
    (None, 64, 8, "torchrun --nnodes N --nproc-per-node G "),
])
def test_megatron_launch_line_names_the_plans_hosts_and_gpus_per_host(cluster, dp, tp, expected):
    row = dict(model="llama3-70b", seq_len=8192, dp=dp, tp=tp, pp=1, micro_batch=1, global_batch=8 * dp,
               zero_stage=1, recompute="full", sequence_parallel=True)
    if cluster:
        row["cluster"] = cluster
    assert expected in _launch_line(exports.emit(row, "megatron"))


def test_torchtitan_launch_line_names_the_plans_hosts_and_a_rows_own_gpus_per_host_wins():
    row = dict(model="llama3-70b", cluster="dgx-h100", seq_len=8192, dp=32, tp=8, pp=1, micro_batch=1,
               global_batch=256, zero_stage=2, zero2_gather_every_microbatch=True, recompute="full",
               sequence_parallel=True)
    assert ("torchrun --nnodes 32 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:PORT "
            "-m torchtitan.train") in _launch_line(exports.emit(row, "torchtitan"))
    # a row that carries its own gpus_per_host (the CLI passes the loaded cluster's) wins
    assert "--nnodes 64 --nproc-per-node 4 " in _launch_line(exports.emit({**row, "gpus_per_host": 4}, "torchtitan"))


def test_plan_emit_megatron_launches_on_the_searched_clusters_hosts():
    res = CliRunner().invoke(cli, ["plan", "-m", MODEL, "-c", CLUSTER, "-n", str(GPUS), "--global-batch-tokens",
                                   str(TOKENS), "--emit", "megatron"])
    assert res.exit_code == 0, res.output
    assert "#   torchrun --nnodes 32 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:PORT pretrain_gpt.py" \
        in res.output


def test_export_header_says_when_the_prediction_rests_on_an_unfitted_prior():
    """MI300X (cdna3) has no fitted efficiency model: the table marks its numbers with * and a
    footnote; the launch's first line, which repeats the predicted step time and MFU, says so too
    (it printed 'predicted 8.23 s/step, ... MFU 68.4% of the bf16 peak' bare). H100's does not."""
    from click.testing import CliRunner

    from paraplan.cli import main
    lines = {}
    for cluster in ("mi300x-node", "dgx-h100"):
        result = CliRunner().invoke(main, ["plan", "-m", "llama3-8b", "-c", cluster, "-n", "8", "--global-batch", "16",
                                           "--emit", "megatron"])
        assert result.exit_code == 0, result.output
        lines[cluster] = result.stdout.splitlines()[0]
    assert "predicted" in lines["mi300x-node"] and "unfitted prior" in lines["mi300x-node"]
    assert "predicted" in lines["dgx-h100"] and "prior" not in lines["dgx-h100"]
    # the same from a paraplan.api row, which carries efficiency_fitted
    row = api.simulate("llama3-8b", "mi300x-node", gpus=8, global_batch=16, zero_stage=2, stack="torchtitan").iloc[0]
    assert bool(row.efficiency_fitted) is False
    assert "unfitted prior" in exports.emit(row, "torchtitan").splitlines()[0]


def test_emit_slowdown_is_the_step_time_ratio_as_explain_says_it():
    """``--emit``'s "% slower than the unrestricted winner" is the step time over the winner's,
    minus 1, as ``--explain``'s "% slower" (``explain.slower_share``); it was the throughput lost,
    1 - mine/best: 48.5% for 28.84 s/step against 14.84 s/step, which is 94.3% slower."""
    from planners.explain import slower_share
    tokens = 128 * 8192                              # one global batch: tokens per step
    refused = dict(model="llama3-70b", seq_len=8192, dp=16, tp=4, pp=1, micro_batch=1, global_batch=128,
                   zero_stage=3, recompute="none", sequence_parallel=True)   # DeepSpeed has no Megatron SP
    runs = {**refused, "sequence_parallel": False}
    table = pd.DataFrame([dict(refused, step_time_s=14.84, tokens_per_s=tokens / 14.84),
                          dict(runs, step_time_s=28.84, tokens_per_s=tokens / 28.84)])
    row, rank, slowdown = exports.best_runnable(table, "deepspeed")
    assert rank == 1 and not row["sequence_parallel"]
    # 28.84 / 14.84 = 1.94340..., so 94.34% slower (not 1 - 14.84/28.84 = 48.5%)
    assert slowdown == pytest.approx(14.00 / 14.84, rel=1e-12)
    assert f"{100 * slowdown:.1f}" == "94.3"
    assert slower_share(28.84, 14.84) == pytest.approx(slowdown, rel=1e-12)
