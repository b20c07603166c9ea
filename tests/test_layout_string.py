"""Megatron layout strings: parsing, validation against a model, and the layouts they give the
step model (memory and time agree with the same layout given as first/last stage counts)."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from hardware_specs.catalog import load_cluster
from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from paraplan.cli import main
from simulator.layout_string import parse_layout
from simulator.parallel_config import ParallelConfig
from simulator.simulate import simulate
from simulator.validate_config import check_config


def test_deepseek_v3_layout_expands_to_32_positions_with_mtp_and_loss_alone():
    spec = parse_layout("Et*3|(tt|)*29,m|L")
    assert spec.positions == 32
    assert spec.decoder == (3,) + (2,) * 29 + (0, 0)
    assert spec.mtp == (0,) * 30 + (1, 0)
    assert spec.embedding == (1,) + (0,) * 31 and spec.loss == (0,) * 31 + (1,)
    assert sum(spec.decoder) == 61
    spec.check(61, 1, 32, "pp*vpp = 16*2")


def test_llama3_405b_author_layout_has_an_embedding_only_and_a_loss_only_chunk():
    # Llama 3 paper, section 3.3.2: the first chunk of the first stage holds only the embedding,
    # the last chunk of the last stage only the output projection and the loss
    spec = parse_layout("E|(t|)*126,L")
    assert spec.positions == 128
    assert spec.layers() == (0,) + (1,) * 126 + (0,)
    spec.check(126, 0, 128, "pp*vpp = 16*8")


@pytest.mark.parametrize("text, where", [
    ("Et*3|x|L", "unknown symbol"),
    ("E(tt|L", "unmatched '('"),
    ("Et)|L", "unmatched ')'"),
    ("Et*|L", "not followed by a count"),
    ("", "empty layout"),
    ("E" + "t*999999999" + "L", "too many symbols"),
])
def test_malformed_layouts_raise_an_input_error_naming_the_field(text, where):
    with pytest.raises(InputError) as exc:
        parse_layout(text)
    assert exc.value.field == "pipeline_layout" and where in exc.value.message


@pytest.mark.parametrize("text, message", [
    ("Et*3|t*4|t*4|t*4L", "decoder layers ('t')"),
    ("Et*8|t*8|t*8|t*8", "loss 'L'"),
    ("t*8|Et*8|t*8|t*8L", "embedding 'E'"),
    ("Et*16|t*16L", "positions"),
])
def test_layouts_that_do_not_place_the_model_are_refused(text, message):
    model = load_model("llama3-8b")
    config = ParallelConfig(pp=4, pipeline_layout=text, uneven_layers=True)
    with pytest.raises(InputError) as exc:
        check_config(model, config)
    assert exc.value.field == "pipeline_layout" and message in exc.value.message


def test_a_layout_string_equals_the_same_first_and_last_stage_counts():
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100")
    common = dict(dp=2, pp=4, global_batch=16, zero_stage=1)
    by_counts = simulate(model, cluster, ParallelConfig(first_stage_layers=6, last_stage_layers=6, **common))
    by_string = simulate(model, cluster, ParallelConfig(pipeline_layout="Et*6|t*10|t*10|t*6L", **common))
    assert by_string.step_time_s == pytest.approx(by_counts.step_time_s, rel=1e-12)
    assert by_string.memory_bytes == pytest.approx(by_counts.memory_bytes, rel=1e-12)
    assert [s["layers"] for s in by_string.stage_memory] == [6, 10, 10, 6]


def test_mtp_placed_alone_before_the_loss_moves_its_weights_and_an_embedding_copy_there():
    model, cluster = load_model("deepseek-v3"), load_cluster("h800-node")
    config = ParallelConfig(dp=8, pp=16, vpp=2, ep=8, global_batch=128, zero_stage=1, dtype="fp8",
                            pipeline_layout="Et*3|(tt|)*29,m|L")
    report = simulate(model, cluster, config)
    stages = report.stage_memory
    # positions 30 (rank 14, chunk 1: the MTP module) and 31 (rank 15, chunk 1: the loss)
    assert stages[14]["layers"] == 2 + 1 and stages[15]["layers"] == 2
    assert stages[15]["parts_bytes"]["logits_bytes"] > 0 and stages[14]["parts_bytes"]["logits_bytes"] > 0
    assert stages[13]["parts_bytes"]["logits_bytes"] == 0


def test_dualpipe_takes_61_layers_with_an_uneven_split_and_refuses_without():
    model = load_model("deepseek-v3")
    base = dict(dp=128, pp=16, ep=64, global_batch=15360, zero_stage=1, dtype="fp8", schedule="dualpipe")
    with pytest.raises(InputError) as exc:
        check_config(model, ParallelConfig(**base))
    assert exc.value.field == "schedule" and "--uneven-layers" in exc.value.fix
    check_config(model, ParallelConfig(uneven_layers=True, **base))
    # one model copy's 16 positions: 62 layers (61 + MTP) as ceil 4 with the two ends lighter
    report = simulate(model, load_cluster("h800-node"), ParallelConfig(uneven_layers=True, **base))
    layers = [s["layers"] for s in report.stage_memory]
    assert layers[0] == layers[-1] == 3 + 3 and set(layers[1:-1]) == {8} and sum(layers) == 2 * 62


def test_simulate_cli_refuses_a_bad_layout_in_one_line():
    result = CliRunner().invoke(main, ["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "--gpus", "8", "--pp", "4",
                                       "--global-batch", "8", "--pipeline-layout", "Et*8|t*8|t*8|t*9L"])
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: pipeline_layout:") and "Traceback" not in result.output


def test_first_or_last_stage_layers_alone_leave_the_other_edge_stage_among_the_middle_ones():
    # Megatron-Core: a count not given is no edge stage; the stages without one share the rest
    # evenly. 32 layers on 4 stages: first 2 -> 2, 10, 10, 10 (the last stage held 0 before:
    # 2, 15, 15, 0); last 2 -> 10, 10, 10, 2; both 5 and 3 -> 5, 12, 12, 3
    from simulator.pipeline.schedules import ScheduleKind
    from simulator.stage_layout import position_layers
    kind = ScheduleKind.ONE_F_ONE_B
    assert position_layers(kind, 4, 1, 32, first=2).tolist() == [[2, 10, 10, 10]]
    assert position_layers(kind, 4, 1, 32, last=2).tolist() == [[10, 10, 10, 2]]
    assert position_layers(kind, 4, 1, 32, first=5, last=3).tolist() == [[5, 12, 12, 3]]
    # rows of each kind together, as the planner's batches are
    got = position_layers(kind, 4, 1, 32, first=np.array([2, 0, 5, 0]), last=np.array([0, 2, 3, 0]))
    assert got.tolist() == [[2, 10, 10, 10], [10, 10, 10, 2], [5, 12, 12, 3], [8, 8, 8, 8]]


@pytest.mark.parametrize("fields, says", [
    (dict(first_stage_layers=28), "leave 4: do not divide evenly over the other 3 stages"),     # was 28, 2, 2, 0
    (dict(first_stage_layers=10, last_stage_layers=11), "leave 11: do not divide evenly over the other 2"),
    (dict(first_stage_layers=30, last_stage_layers=2), "leave 0: fewer than one each for the other 2 stages"),
    (dict(first_stage_layers=32), "leave 0: fewer than one each"),
    (dict(first_stage_layers=30, last_stage_layers=4), "leave -2 of the 32 layers"),
    (dict(first_stage_layers=5, vpp=2), "5 layers do not divide over the stage's 2 model chunks"),
    (dict(first_stage_layers=2, last_stage_layers=4, vpp=2), "the other stages' 13 layers each do not divide"),
])
def test_edge_stage_counts_megatron_core_refuses_are_refused(fields, says):
    # Megatron-Core's TransformerConfig ("Uneven PP"): counts > 0, the rest divides evenly over the
    # stages without a count, and with virtual stages each count and middle share divides by vpp
    from hardware_specs.errors import InputError
    model = load_model("llama3-8b")
    cfg = ParallelConfig(**{"dp": 2, "tp": 8, "pp": 4, "micro_batch": 1, "global_batch": 64, **fields})
    with pytest.raises(InputError) as info:
        simulate(model, load_cluster("dgx-h100"), cfg)
    assert says in str(info.value)


def test_edge_stage_counts_with_an_mtp_module_follow_megatron_core_on_decoder_layers():
    # DeepSeek-V3's 61 decoder layers and 1 MTP module on pp 4. Megatron-Core's counts are decoder
    # layers and the MTP module sits on the last stage beyond them; ours for the last stage counts
    # it. First 16 alone: 45 decoder layers, 15 a stage, the MTP module on top of the last
    # (16, 15, 15, 15 + MTP; it was refused, "leave 46"); first 14 alone leaves 47, which do not
    # divide by 3 (it was accepted); last 1 is the MTP module alone, no decoder layer
    from hardware_specs.errors import InputError
    from paraplan.exports.common import chunk_layers
    from simulator.pipeline.schedules import ScheduleKind
    from simulator.stage_layout import position_layers
    assert position_layers(ScheduleKind.ONE_F_ONE_B, 4, 1, 62, first=16, mtp=1).tolist() == [[16, 15, 15, 16]]
    assert chunk_layers(61, 4, 1, 1, first_stage_layers=16) == ((16, 15, 15, 15), (0, 0, 0, 1))
    assert chunk_layers(61, 4, 1, 1, first_stage_layers=13, last_stage_layers=13) == ((13, 18, 18, 12), (0, 0, 0, 1))
    model, cluster = load_model("deepseek-v3"), load_cluster("dgx-h100")
    base = dict(dp=128, tp=2, pp=4, ep=64, micro_batch=1, global_batch=1024, zero_stage=1, recompute="full",
                sequence_parallel=True)
    assert simulate(model, cluster, ParallelConfig(**base, first_stage_layers=16), n_gpus=1024).step_time_s > 0
    for fields, says in ((dict(first_stage_layers=14), "decoder layers 14 (first) leave 47: do not divide evenly"),
                         (dict(first_stage_layers=15, last_stage_layers=1), "leave no decoder layer beside its 1 MTP")):
        with pytest.raises(InputError) as info:
            simulate(model, cluster, ParallelConfig(**base, **fields), n_gpus=1024)
        assert says in str(info.value)


@pytest.mark.parametrize("schedule", ["zb-v", "dualpipe"])
def test_edge_stage_counts_are_refused_on_a_v_schedule(schedule):
    # a V runs the model's first and last chunks both on rank 0 and its middle on rank p-1, so
    # Megatron's first/last stage counts have no meaning there (--last-stage-layers 2 on zb-v put
    # 2 layers in the middle of the model)
    from hardware_specs.errors import InputError
    cfg = ParallelConfig(dp=2, tp=8, pp=4, micro_batch=1, global_batch=64, schedule=schedule, last_stage_layers=2)
    with pytest.raises(InputError) as info:
        simulate(load_model("llama3-8b"), load_cluster("dgx-h100"), cfg)
    assert "runs a V" in str(info.value)


def test_a_last_stage_count_with_mtp_and_virtual_stages_splits_its_decoder_layers_as_megatron_core():
    # 28 layers + 1 MTP, pp 4 x vpp 2, last stage 5 (4 decoder layers + the MTP): Megatron-Core
    # gives each of the last stage's chunks 4 // 2 = 2 decoder layers and the MTP on the last;
    # the step model split the 5 first and took the MTP from the last chunk (3, 1)
    from paraplan.exports.common import chunk_layers
    decoder, mtp = chunk_layers(28, 4, 2, 1, last_stage_layers=5)
    # the last stage holds chunks 3 and 7 of the interleaved path
    assert (decoder[3], decoder[7], mtp[7]) == (2, 2, 1) and sum(decoder) == 28
