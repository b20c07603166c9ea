"""paraplan.api helpers: table labels."""
from __future__ import annotations

import pytest

from hardware_specs.errors import InputError
from paraplan import api


def test_config_labels_of_a_table_equal_config_label_row_by_row():
    import pandas as pd
    from simulator.parallel_config import ParallelConfig
    rows = [dict(dp=8, tp=8, pp=4, vpp=5, micro_batch=1, zero_stage=1, recompute="selective",
                 sequence_parallel=True),
            dict(dp=2, tp=1, pp=16, cp=2, ep=8, micro_batch=2, zero_stage=0, recompute="full",
                 sequence_parallel=False, schedule="dualpipe", dtype="fp8", attention_kernel="serial"),
            dict(dp=64, tp=2, pp=1, micro_batch=4, zero_stage=3, schedule="zb-h2", dtype="mxfp8",
                 attention_kernel="pipelined"),
            dict(dp=32, tp=8, pp=16, micro_batch=1, zero_stage=2, zero_shard_group=8, recompute="full",
                 recompute_num_layers=2, recompute_layers_decrement=1, offload_activation_layers=3,
                 sequence_parallel=True),
            dict(dp=128, tp=1, pp=1, cp=2, micro_batch=1, zero_stage=3, offload_activation_layers=24)]
    table = pd.DataFrame(rows)          # columns a row lacks are NaN in the table: fill as a plan table has them
    defaults = ParallelConfig().as_dict()
    table = table.fillna({k: defaults[k] for k in table.columns if k in defaults}).infer_objects()
    table = table.astype({k: int for k in ("dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "zero_stage",
                                           "zero_shard_group", "recompute_num_layers", "recompute_layers_decrement",
                                           "offload_activation_layers")})
    expected = [api.config_label({**defaults, **r}) for r in table.to_dict("records")]
    assert list(api.config_labels(table)) == expected
    assert expected[0] == "dp8 tp8 pp4 vpp5 mb1 z1 sel sp"
    assert expected[1] == "dp2 tp1 pp16 cp2 ep8 mb2 z0 full dualpipe fp8 attn-serial"
    # the memory features a plan needs are in its label
    assert expected[3] == "dp32 tp8 pp16 mb1 z2 hsdp8 full2d1 off3 sp"
    assert expected[4] == "dp128 tp1 pp1 cp2 mb1 z3 off24"
    # a table without the optional columns takes the defaults
    bare = pd.DataFrame([dict(dp=4, tp=2, pp=1, micro_batch=1, zero_stage=1)])
    assert list(api.config_labels(bare)) == ["dp4 tp2 pp1 mb1 z1"]


def test_best_plan_keeps_two_plans_and_finds_the_winner_of_the_whole_ranking():
    """``best_plan`` searches keeping ``BEST_PLAN_KEEP`` plans (the planner then times only rows
    that can be among them): its winner and numbers are row 0 of the full ranking, and its
    explanation names the same runner-up."""
    import pytest
    for model, cluster, gpus, tokens in (("llama3-8b", "dgx-h100", 16, 2**20), ("mixtral-8x7b", "dgx-h100", 16, 2**20)):
        ranked = api.plan(model, cluster, gpus, tokens)
        best = api.best_plan(model, cluster, gpus, tokens)
        # hundreds of times what best_plan keeps (Mixtral: 1,159 plans since Megatron-Core refuses
        # ZeRO-2/3 with pp > 1, lacks zero2_with_pipeline; 2,628 before)
        assert len(ranked) > 500 * api.BEST_PLAN_KEEP
        top = ranked.iloc[0]
        assert best.iloc[0].config == top.config
        assert float(best.iloc[0].tokens_per_s) == pytest.approx(float(top.tokens_per_s), rel=1e-9)
        runner_up = lambda text: [line for line in text.splitlines() if line.startswith("runner-up")]
        assert runner_up(best.attrs["explain"]) == runner_up(ranked.attrs["explain"]) != []


def _cli_json(*args):
    import json

    from click.testing import CliRunner

    from paraplan.cli import main
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_simulate_runs_the_default_stack_as_the_cli_does():
    """``api.simulate`` runs Megatron-Core's documented behaviour unless told otherwise, as
    ``paraplan simulate`` does: DeepSeek-V3's 8 routed experts per rank (256 / ep 32) run their
    grouped GEMMs on Transformer Engine's 4 compute streams (hardware_specs/stacks/megatron-core.yaml
    grouped_gemm_streams: 4). It had left every software field at ParallelConfig's defaults (1
    stream): 18.537 s where the command line says 18.270 s for the same configuration."""
    import pytest
    row = api.simulate("deepseek-v3", "dgx-h100", gpus=256, pp=8, ep=32, global_batch=512, zero_stage=1,
                       recompute="full").iloc[0]
    cli = _cli_json("simulate", "-m", "deepseek-v3", "-c", "dgx-h100", "-n", 256, "--pp", 8, "--ep", 32,
                    "--global-batch", 512, "--zero", 1, "--recompute", "full", "--json")
    assert row.stack == "megatron-core"
    assert row.grouped_gemm_streams == cli["config"]["grouped_gemm_streams"] == 4
    assert float(row.step_time_s) == pytest.approx(cli["step_time_s"], rel=1e-12)
    # a field given by name still overrides the stack: one stream runs the 8 local experts' GEMMs
    # one after another, so the step is longer than on four
    one = api.simulate("deepseek-v3", "dgx-h100", gpus=256, pp=8, ep=32, global_batch=512, zero_stage=1,
                       recompute="full", grouped_gemm_streams=1).iloc[0]
    assert one.grouped_gemm_streams == 1
    assert float(one.step_time_s) > float(row.step_time_s) * 1.005


def test_best_plan_is_the_planners_winner_with_the_planners_numbers_for_moe():
    """``best_plan`` re-simulates the winner on the stack the planner scored it with: for
    DeepSeek-V3 on 256 H100 it reported 12.72 s for a plan the planner ranks at 11.47 s. (The
    winner is ZeRO-1 since ZeRO-2's per-micro-batch reduction also moves the embedding's and the
    output layer's gradients, 464M parameters a rank each at tp 2: ZeRO-2 won before. Since the
    pipeline sends are priced on their placement, pp 16 at dp 8 won over pp 32 at dp 2 cp 2; since
    session 51's refit and the ends' TP collectives, pp 32 at dp 2 cp 2 offloading one layer's
    activations won again; since session 55 hides each TP collective under its own linear's GEMMs
    only, pp 16 at dp 8 wins by 0.2%: 11.488 s against 11.509 s.)"""
    import pytest
    ranked = api.plan("deepseek-v3", "dgx-h100", 256, global_batch=512, max_plans=2)
    best = api.best_plan("deepseek-v3", "dgx-h100", 256, global_batch=512)
    assert best.iloc[0].config == ranked.iloc[0].config == "dp8 tp2 pp16 ep8 mb1 z1 full sp"
    assert float(best.iloc[0].step_time_s) == pytest.approx(float(ranked.iloc[0].step_time_s), rel=1e-9)


def test_simulate_defaults_to_the_gpus_16_bit_type_on_v100():
    """A V100 has no bf16 peak (fp16 125 TFLOP/s, hardware_specs/gpus): without a dtype,
    ``api.simulate`` and ``paraplan simulate`` run fp16 as ``paraplan plan`` searches it, instead
    of refusing the bf16 default the user never gave."""
    import pytest
    row = api.simulate("gpt3-13b", "dgx2-v100", gpus=32, tp=8, global_batch=64).iloc[0]
    fp16 = api.simulate("gpt3-13b", "dgx2-v100", gpus=32, tp=8, global_batch=64, dtype="fp16").iloc[0]
    assert row["dtype"] == "fp16"
    assert float(row.step_time_s) == float(fp16.step_time_s)
    cli = _cli_json("simulate", "-m", "gpt3-13b", "-c", "dgx2-v100", "-n", 32, "--tp", 8, "--global-batch", 64,
                    "--json")
    assert cli["config"]["dtype"] == "fp16"
    assert cli["step_time_s"] == pytest.approx(float(row.step_time_s), rel=1e-12)
    assert cli["mfu_fp16_pct"] == pytest.approx(float(row.mfu_fp16_pct), rel=1e-9)


def test_api_rows_show_mfu_as_every_command_does_in_percent_of_the_bf16_peak():
    """An fp8 plan's MFU in ``paraplan.api`` rows is percent of the H100's dense bf16 peak
    (989.4 TFLOP/s) in a column that names it, as ``paraplan simulate`` / ``plan`` / ``sweep`` show
    it; the rows had ``mfu``, a fraction of the fp8 peak (1,978.9 TFLOP/s): half the number the
    command line printed for the same plan."""
    import pytest
    kwargs = dict(gpus=64, tp=8, pp=4, global_batch=128, zero_stage=1, recompute="selective",
                  sequence_parallel=True, dtype="fp8")
    row = api.simulate("llama3-70b", "dgx-h100", **kwargs).iloc[0]
    assert "mfu" not in row.index and "hfu" not in row.index
    hand = 100 * float(row.model_tflops_per_gpu) / 989.4
    assert float(row.mfu_bf16_pct) == pytest.approx(hand, rel=1e-3)
    assert float(row.hfu_bf16_pct) > float(row.mfu_bf16_pct)
    cli = _cli_json("simulate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", 64, "--tp", 8, "--pp", 4,
                    "--global-batch", 128, "--zero", 1, "--recompute", "selective", "--sequence-parallel",
                    "--dtype", "fp8", "--json")
    assert float(row.mfu_bf16_pct) == pytest.approx(cli["mfu_bf16_pct"], rel=1e-12)
    # the planner's table: the same column, the same convention
    plans = api.plan("llama3-8b", "dgx-h100", 8, global_batch=16, dtype="fp8", max_plans=1)
    top = plans.iloc[0]
    assert "mfu" not in plans.columns
    check = api.simulate("llama3-8b", "dgx-h100", **{k: top[k] for k in api.CONFIG_FIELDS if k in plans.columns}).iloc[0]
    assert float(top.mfu_bf16_pct) == pytest.approx(float(check.mfu_bf16_pct), rel=1e-9)
    assert float(top.mfu_bf16_pct) == pytest.approx(100 * float(check.model_tflops_per_gpu) / 989.4, rel=1e-3)


def test_export_header_states_mfu_of_the_bf16_peak_for_an_fp8_plan():
    """``--emit``'s first line gives an fp8 plan's MFU as the table does (percent of the bf16
    peak), not as a share of the fp8 peak (half the number)."""
    import re

    import pytest

    from paraplan import exports
    row = api.simulate("llama3-70b", "dgx-h100", gpus=64, tp=8, pp=4, global_batch=128, zero_stage=1,
                       recompute="selective", sequence_parallel=True, dtype="fp8").iloc[0]
    first = exports.emit(row, "megatron").splitlines()[0]
    shown = float(re.search(r"MFU ([\d.]+)% of the bf16 peak", first).group(1))
    assert shown == pytest.approx(float(row.mfu_bf16_pct), abs=0.05)


def test_sweep_over_the_software_stack():
    """``stack`` is a sweep field: each row runs that stack's documented behaviour, as
    ``paraplan simulate --stack``: torchtitan's eager cross-entropy and unfused gradient
    accumulation make Llama-3-8B on 8 H100 (ZeRO-2, which torchtitan runs as FSDP2; 16 x 8192
    tokens) slower than on Megatron-Core, and its eager block ops (RoPE, repeat_kv, the output's layout copy,
    the SwiGLU product: 409,600 bytes a token and layer and 17 kernels a layer and micro-batch
    beyond the fused ones) 0.137 s more: 16,384 tokens x 32 layers x 409,600 bytes at 3.35 TB/s x
    0.5547 (Hopper's fitted HBM fraction since the refit f7c1ee2; 0.6406 from session 55's, 0.675
    from session 51's, 0.5891 before) = 0.1156 s, and 1,088 kernels x 20 us (25.2 us before
    f7c1ee2) = 0.0218 s."""
    import pytest
    df = api.sweep(dict(model="llama3-8b", cluster="dgx-h100", gpus=8, global_batch=16, zero_stage=2),
                   "stack", ["megatron-core", "torchtitan"])
    assert list(df["stack"]) == ["megatron-core", "torchtitan"]
    assert list(df["cross_entropy"]) == ["megatron_unfused", "torch_eager"]
    cli = _cli_json("simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", 8, "--global-batch", 16, "--zero", 2,
                    "--stack", "torchtitan", "--json")
    assert float(df.step_time_s.iloc[1]) == pytest.approx(cli["step_time_s"], rel=1e-12)
    # the eager block ops, derived: bytes at Hopper's fitted HBM rate plus their kernels at its
    # fitted per-kernel time (one stage: every layer of every micro-batch is on the critical path)
    from hardware_specs.catalog import load_cluster, load_efficiency
    eff, gpu = load_efficiency("hopper"), load_cluster("dgx-h100").gpu
    tokens, layers = 16 * 8192 / 8, 32
    hand = (tokens * layers * 409_600 / (gpu.hbm_bw_bytes_per_s * eff.hbm_fraction)
            + 16 / 8 * layers * 17 * eff.kernel_overhead_s)
    assert hand == pytest.approx(0.1156 + 0.0218, abs=2e-4)
    fused = api.simulate("llama3-8b", "dgx-h100", gpus=8, global_batch=16, zero_stage=2, stack="torchtitan",
                         unfused_block_ops=False).iloc[0]
    assert float(df.step_time_s.iloc[1]) - float(fused.step_time_s) == pytest.approx(hand, rel=1e-3)
    # the rest of torchtitan's extra time is its eager loss and unfused gradient accumulation
    assert float(fused.step_time_s) > float(df.step_time_s.iloc[0])


def test_a_scaleout_what_if_keeps_a_fabrics_measured_communicator_shortfall():
    # jean-zay-a100 states 50 Gb/s per GPU and a measured communicator bandwidth below it: the
    # what-if at its own 50 Gb/s is the catalog, and more bandwidth is never slower (dropping the
    # measurement made 50 Gb/s 15% faster than the catalog, 30 Gb/s faster too)
    from paraplan import api
    base = dict(model="gpt3-13b", cluster="jean-zay-a100", gpus=64, tp=4, pp=2, global_batch=256, micro_batch=1,
                zero_stage=1)
    catalog = api.simulate(**base).step_time_s.iloc[0]
    swept = api.sweep(base, "scaleout_gbit_per_s", [30, 50, 100]).step_time_s.tolist()
    assert swept[1] == pytest.approx(catalog, rel=1e-12)
    assert swept[0] > swept[1] > swept[2]
    spec = api.what_if_cluster("jean-zay-a100", scaleout_gbit_per_s=100)
    cat = api.what_if_cluster("jean-zay-a100")
    assert spec.scaleout.communicator_bus_bw_bytes_per_s == pytest.approx(2 * cat.scaleout.communicator_bus_bw_bytes_per_s)


def test_whole_floats_of_a_sweep_row_simulate_as_their_integers():
    # a sweep's rows hold recompute_num_layers, offload_activation_layers, zero_shard_group ... as
    # floats (a missing value makes the column float); fed back, they run as the integers they hold
    kw = dict(gpus=8, global_batch=16, recompute="full")
    as_float = api.simulate("llama3-8b", "dgx-h100", tp=2.0, recompute_num_layers=2.0, grouped_gemm_streams=1.0,
                            loss_chunk_tokens=0.0, **kw).step_time_s.iloc[0]
    as_int = api.simulate("llama3-8b", "dgx-h100", tp=2, recompute_num_layers=2, **kw).step_time_s.iloc[0]
    assert as_float == as_int
    from hardware_specs.errors import InputError
    for bad in (2.5, float("nan"), float("inf")):
        with pytest.raises(InputError) as err:
            api.simulate("llama3-8b", "dgx-h100", recompute_num_layers=bad, **kw)
        assert err.value.field == "recompute_num_layers"


@pytest.mark.parametrize("kwargs, field", [
    # int() raised ValueError / OverflowError / TypeError, or truncated 4096.7 to 4096 silently
    ({"tp": float("nan")}, "tp"), ({"tp": [1, 2]}, "tp"), ({"tp": True}, "tp"), ({"gpus": float("nan")}, "gpus"),
    ({"global_batch": float("inf")}, "global_batch"), ({"seq_len": 4096.7}, "seq_len"),
])
def test_python_callers_get_an_input_error_naming_a_bad_number(kwargs, field):
    from hardware_specs.errors import InputError
    args = {"gpus": 8, "global_batch": 8, **kwargs}
    with pytest.raises(InputError, match=f"^{field}: must be a whole number >= 1"):
        api.simulate("llama3-8b", "dgx-h100", **args)


def test_python_callers_get_an_input_error_for_a_model_or_cluster_that_is_not_a_name():
    from hardware_specs.errors import InputError
    with pytest.raises(InputError, match="^model: expected a preset name or a file path, got NoneType"):
        api.simulate(None, "dgx-h100", gpus=8, global_batch=8)
    with pytest.raises(InputError, match="^cluster: expected a catalog name or a YAML file path, got dict"):
        api.simulate("llama3-8b", {"gpus_per_node": 8}, gpus=8, global_batch=8)
    with pytest.raises(InputError, match="^global_batch_tokens: must be a whole number"):
        api.plan("llama3-8b", "dgx-h100", 8, global_batch_tokens=float("nan"))
    import numpy as np   # a numpy integer is a whole number
    assert float(api.simulate("llama3-8b", "dgx-h100", gpus=8, global_batch=8, tp=np.int64(2)).step_time_s.iloc[0]) > 0


@pytest.mark.parametrize("kwargs, field", [
    ({"max_tp": float("nan")}, "max_tp"), ({"max_tp": True}, "max_tp"), ({"max_micro_batch": "x"}, "max_micro_batch"),
    ({"schedules": ["nope"]}, "schedules"), ({"schedules": []}, "schedules"), ({"stack": None}, "stack"),
    ({"fixed": [1]}, "fixed"), ({"chunk_rows": 0}, "chunk_rows"), ({"prune_dominated": "no"}, "prune_dominated"),
    ({"headroom_gib": "5"}, "headroom_gib"),
])
def test_the_planners_own_options_from_python_are_checked_by_name(kwargs, field):
    # nan, 'x', True or [1] went on into int(), a ufunc or dict() and came out as Python's errors
    from hardware_specs.errors import InputError
    with pytest.raises(InputError, match=f"^{field}: "):
        api.plan("llama3-8b", "dgx-h100", 8, global_batch=8, **kwargs)


def test_a_schedule_given_as_one_string_and_gpus_as_a_whole_float_are_taken():
    one = api.plan("llama3-8b", "dgx-h100", 8.0, global_batch=8, schedules="1f1b")
    assert len(one) and set(one.schedule) == {"1f1b"}


@pytest.mark.parametrize("kwargs, field", [({"micro_batch": True}, "micro_batch"), ({"zero_stage": True}, "zero_stage"),
                                           ({"scaleout_gbit_per_s": "400"}, "scaleout_gbit_per_s")])
def test_bools_and_text_are_not_degrees_or_bandwidths(kwargs, field):
    from hardware_specs.errors import InputError
    with pytest.raises(InputError, match=f"^{field}: "):
        api.simulate("llama3-8b", "dgx-h100", gpus=8, global_batch=8, **kwargs)


@pytest.mark.parametrize("schedule", ["gpipe", "zb-h1", "zb-h2", "zb-v", "dualpipe"])
def test_a_vpp_with_a_schedule_of_its_own_chunks_is_refused_not_printed_beside_the_step_of_vpp_1(schedule):
    # each row said vpp=4 with the step time, memory and bubble of vpp 1 (ZB-V and DualPipe run two
    # chunks per stage by construction, the others one); the default 1f1b still runs as interleaved
    from hardware_specs.errors import InputError
    with pytest.raises(InputError, match=f"^vpp: {schedule} runs "):
        api.simulate("llama3-8b", "dgx-h100", gpus=16, global_batch=64, pp=2, vpp=4, schedule=schedule)
    assert api.simulate("llama3-8b", "dgx-h100", gpus=16, global_batch=64, pp=2, vpp=4).iloc[0].schedule == "interleaved"


def test_a_gpu_spec_changed_under_its_catalog_name_is_applied_and_an_identical_one_changes_nothing():
    # the what-if compared names only, so 1.5x the HBM bandwidth under "h100-sxm-80gb" was ignored
    from dataclasses import replace as _replace
    from hardware_specs.catalog import load_gpu as _load_gpu
    gpu = _load_gpu("h100-sxm-80gb")
    kw = dict(model="mixtral-8x22b", cluster="dgx-h100", gpus=64, tp=2, pp=4, ep=8, global_batch=64, seq_len=4096,
              zero_stage=1)
    simulate = api.simulate
    base = float(simulate(**kw)["step_time_s"].iloc[0])
    assert float(simulate(**kw, gpu=gpu)["step_time_s"].iloc[0]) == base
    faster = float(simulate(**kw, gpu=_replace(gpu, hbm_bw_bytes_per_s=1.5 * gpu.hbm_bw_bytes_per_s))["step_time_s"].iloc[0])
    renamed = _replace(gpu, name="h100-fast-hbm", hbm_bw_bytes_per_s=1.5 * gpu.hbm_bw_bytes_per_s)
    assert faster < base
    assert faster == float(simulate(**kw, gpu=renamed)["step_time_s"].iloc[0])


@pytest.mark.parametrize("call, field", [
    (lambda: __import__("paraplan.serving_api").serving_api.serve_simulate("llama3.1-8b", "dgx-h100", backend=None),
     "backend"),
    (lambda: api.sweep_grid(None), "spec"),
    (lambda: api.sweep_grid([1]), "spec"),
    (lambda: api.simulate("llama3-8b", "dgx-h100", gpus=8, global_batch=8, efficiency="x"), "efficiency"),
    (lambda: api.simulate("llama3-8b", "dgx-h100", gpus=8, global_batch=8, recompute_modules=5), "recompute_modules"),
    (lambda: api.sweep(dict(model="llama3-8b", cluster="dgx-h100", gpus=8, global_batch=8), "tp", 5), "values"),
    (lambda: api.sweep(None, "tp", [1]), "base"),
    (lambda: api.config_label({}), "dp"),
    (lambda: api.plan("llama3-8b", "dgx-h100", 8, global_batch=8, bogus=1), "bogus"),
])
def test_api_arguments_of_the_wrong_kind_are_input_errors_naming_them(call, field):
    # each reached numpy, pathlib or the planner as a TypeError / AttributeError / KeyError
    with pytest.raises(InputError) as err:
        call()
    assert err.value.field == field


def test_build_config_takes_a_model_name_as_simulate_does():
    assert api.build_config("llama3-8b", 8, tp=2, global_batch=8).dp == 4


@pytest.mark.parametrize("field, flag", [("ep_dispatch_dedup", "--ep-dispatch-dedup"),
                                         ("ep_comm_overlap", "--ep-comm-overlap")])
def test_plan_takes_the_stack_switches_the_cli_plan_takes(field, flag):
    """README: every stack switch can be overridden on plan too, the expert all-to-all's
    --ep-comm-overlap and --ep-dispatch-dedup. `paraplan plan --ep-dispatch-dedup` sets it on
    the stack (StackSpec.with_training); api.plan(ep_dispatch_dedup=True) refused it ('the planner
    does not search this field'), and its advice (simulate the winner with it) priced the winner
    of a search without it (DeepSeek-V3 on 1,024 H100: 18.65 s against 14.08 s)."""
    import json

    from click.testing import CliRunner

    from hardware_specs.catalog import load_stack
    from paraplan.cli import main
    args = ("deepseek-v3", "dgx-h100", 256)
    ranked = api.plan(*args, global_batch=512, max_plans=2, **{field: True})
    via_stack = api.plan(*args, global_batch=512, max_plans=2,
                         stack=load_stack("megatron-core").with_training(**{field: True}))
    plain = api.plan(*args, global_batch=512, max_plans=2)
    r = CliRunner().invoke(main, ["plan", "-m", "deepseek-v3", "-c", "dgx-h100", "-n", "256", "--global-batch", "512",
                                  "--json", "--top", "1", flag])
    assert r.exit_code == 0, r.output
    cli = json.loads(r.output)["plans"][0]
    assert ranked.iloc[0]["step_time_s"] == cli["step_time_s"] == via_stack.iloc[0]["step_time_s"]
    assert ranked.iloc[0]["step_time_s"] != plain.iloc[0]["step_time_s"]       # the switch is priced
