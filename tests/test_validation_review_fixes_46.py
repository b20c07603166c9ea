"""Review 46 of ``paraplan validate published``: damaged or new input rows are skipped with the
reason (or the file refused) instead of predicted on a default the row contradicts."""
from __future__ import annotations

from functools import lru_cache

import pytest

from paraplan.validation.published import Skip, row_inputs
from published_row import llama31_8b_row


def _row(**overrides):
    """Llama 3.1 8B on 8 H100 (data parallel), every needed column stated."""
    return llama31_8b_row(**overrides)


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


@lru_cache(maxsize=None)
def _bundled_runs():
    from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
    from paraplan.validation.published import read_runs
    return read_runs(validation_file(PUBLISHED_RUNS))


def _kor22_22b_row(**overrides):
    """KOR22's GPT-22B step-time row, whose ``model`` names the dense preset gpt-22b."""
    df = _bundled_runs()
    row = df[df.id == "KOR22-T5-22B-full:iter_time_s"].iloc[0].to_dict()
    row.update(overrides)
    return row


def test_a_dense_preset_row_stating_experts_is_skipped_not_predicted_dense():
    # the row was predicted as the dense gpt-22b, its moe_experts 8 / moe_topk 2 ignored
    assert row_inputs(_kor22_22b_row(layers="")).model.moe is None
    with pytest.raises(Skip, match="^row states 8 experts; preset gpt-22b has none$"):
        row_inputs(_kor22_22b_row(moe_experts="8", moe_topk="2"))
    with pytest.raises(Skip, match="^row states moe_topk 2; preset gpt-22b has no experts$"):
        row_inputs(_kor22_22b_row(moe_topk=2))


def test_a_moe_preset_row_stating_other_experts_runs_the_rows_experts():
    # the converse: the row's own columns win over its MoE preset's (noted by the preset line)
    moe = row_inputs(_mixtral_row(moe_experts="16", moe_topk="4")).model.moe
    assert (moe.num_experts, moe.top_k) == (16, 4)


def _reasons(*rows):
    from paraplan.validation.predict import prepare
    reasons = {}
    prepare(list(rows), on_skip=reasons.__setitem__)
    return reasons


def test_a_share_of_peak_above_100_percent_is_skipped_as_a_damaged_cell():
    # MAX_MEASURED_VALUE (1e12) was the only cap: an MFU of 415 percent was scored as an error
    mfu = _kor22_22b_row(id="m", measured_metric="mfu", flops_convention="korthikanti_model", measured_value=415.0)
    hfu = dict(mfu, id="h", measured_metric="hfu", measured_value=100.5)
    fine = dict(mfu, id="f", measured_value=41.5)
    assert _reasons(mfu, hfu, fine) == {0: "mfu 415 is above 100 percent, not a measurement (a damaged cell)",
                                        1: "hfu 100.5 is above 100 percent, not a measurement (a damaged cell)"}


def test_tflops_per_gpu_above_the_gpus_peak_at_the_rows_precision_is_skipped():
    # A100's fp16 dense tensor-core peak is 312 TFLOP/s
    row = _kor22_22b_row(id="t", measured_metric="tflops_per_gpu", flops_convention="korthikanti_model",
                         measured_value=313.0)
    assert _reasons(row, dict(row, id="u", measured_value=311.0)) == {
        0: "tflops_per_gpu 313 is above a100-sxm-80gb's fp16 peak of 312 TFLOP/s, not a measurement (a damaged cell)"}


def _fields(header: str) -> int:
    """Columns of a CSV header line (the shared files gain columns between sessions)."""
    import csv
    return len(next(csv.reader([header])))


def _bundled_lines(rows: int) -> list[str]:
    """The header and first ``rows`` data lines of the bundled published runs (one line each)."""
    from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file
    return validation_file(PUBLISHED_RUNS).read_text(encoding="utf-8").splitlines()[:rows + 1]


def test_a_file_that_ends_inside_its_last_row_is_one_error_line(tmp_path):
    # the cut-off row was predicted with its lost columns (framework, ...) on defaults
    from cli_results import one_line_error, run
    lines = _bundled_lines(3)
    path = tmp_path / "cut.csv"
    path.write_text("\n".join(lines[:-1] + [lines[-1].rsplit(",", 4)[0]]), encoding="utf-8")
    n = _fields(lines[0])                     # the cut row lost its last 4 fields
    one_line_error(run("validate", "published", path),
                   f"error: path: cut.csv ends inside data row 3 ({n - 4} of {n} fields, no final newline): the file "
                   "was cut off (copy the whole file again)")
    whole = tmp_path / "whole.csv"            # a complete last row without a final newline is whole
    whole.write_text("\n".join(lines), encoding="utf-8")
    assert run("validate", "published", whole).exit_code == 0


def test_a_short_row_inside_the_file_is_skipped_with_its_field_count(tmp_path):
    from paraplan.validation.published import read_runs, validate_rows
    lines = _bundled_lines(3)
    path = tmp_path / "short.csv"
    path.write_text("\n".join([lines[0], lines[1].rsplit(",", 4)[0], "", lines[2], lines[3]]) + "\n", encoding="utf-8")
    out = validate_rows(read_runs(path))
    assert list(out.status) == ["skipped", "ok", "ok"]
    n = _fields(lines[0])
    assert out.reason[0] == f"row has {n - 4} of {n} fields (a damaged row)"


def test_a_short_serving_row_is_skipped_with_its_field_count(tmp_path):
    from paraplan.validation.datasets import SERVING_RUNS, validation_file
    from paraplan.validation.serving import read_rows, validate_rows
    lines = validation_file(SERVING_RUNS).read_text(encoding="utf-8").splitlines()[:3]
    path = tmp_path / "short.csv"
    path.write_text("\n".join([lines[0], lines[1].rsplit(",", 3)[0], lines[2]]) + "\n", encoding="utf-8")
    out = validate_rows(read_rows(path))
    first = out[out.id == out.id.iloc[0]]
    n = _fields(lines[0])
    assert set(first.status) == {"skipped"} and set(first.reason) == {f"row has {n - 3} of {n} fields (a damaged row)"}
    assert "ok" in set(out[out.id != out.id.iloc[0]].status)


# ---- validate heterogeneous ----------------------------------------------------------------------

@lru_cache(maxsize=None)
def _sailor_runs():
    from paraplan.validation import heterogeneous as het
    from paraplan.validation.datasets import HETEROGENEOUS_RUNS, validation_file
    return tuple(het.read_runs(validation_file(HETEROGENEOUS_RUNS)))


def _sailor_run(folder: str, **changes) -> dict:
    """A copy of the first bundled run whose ``_file`` holds ``folder``."""
    import copy
    run = copy.deepcopy(next(r for r in _sailor_runs() if folder in r["_file"]))
    run.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del run[key]
    return run


def _by_metric(records):
    return {r["metric"]: r for r in records}


def test_a_run_whose_folder_names_an_unknown_model_is_skipped_not_matched_by_layer_count():
    from paraplan.validation import heterogeneous as het
    # 34 layers: it was predicted as GPT-Neo-2.7B, with no note
    run = _sailor_run("/GPT-NEO/N2/", _file="sailor/x/y/LLAMA/N2/plan.json")
    records = het.validate_runs([run])
    assert {r["status"] for r in records} == {"skipped"}
    assert records[0]["reason"] == ("the folder names the model 'LLAMA', which has no architecture here "
                                    "(known: OPT-350, GPT-NEO)")
    # the university cluster's folders name no model: its runs keep the layer-count match
    mit = het.validate_runs([_sailor_run("/mit/N2/")])
    assert {r["status"] for r in mit} == {"ok"}
    assert het.named_model_folder("sailor/Planner/simulations/validation/mit/N2/plan_config_N2_D1.json") is None
    assert het.named_model_folder("a/clariden/OPT-350/N4/plan.json") == "OPT-350"


def test_a_run_without_its_peak_memory_still_has_its_iteration_time_scored_and_vice_versa():
    from paraplan.validation import heterogeneous as het
    whole = _by_metric(het.validate_runs([_sailor_run("/OPT-350/N4/")]))
    no_mem = _by_metric(het.validate_runs([_sailor_run("/OPT-350/N4/", max_mem=None)]))
    assert no_mem["iter_time_s"] == whole["iter_time_s"] and no_mem["iter_time_s"]["status"] == "ok"
    assert no_mem["peak_memory_bytes"]["status"] == "skipped"
    assert no_mem["peak_memory_bytes"]["reason"] == "max_mem is None, not a positive number"
    no_time = _by_metric(het.validate_runs([_sailor_run("/OPT-350/N4/", real="1.5")]))
    assert no_time["peak_memory_bytes"] == whole["peak_memory_bytes"]
    assert no_time["iter_time_s"]["reason"] == "real is '1.5', not a positive number"
    neither = het.validate_runs([_sailor_run("/OPT-350/N4/", real=None, max_mem=None)])
    assert [r["reason"] for r in neither] == ["real is None, not a positive number"] * 2


def test_runs_without_a_file_path_get_an_id_each_not_one_shared_question_mark():
    from paraplan.validation import heterogeneous as het
    first = _sailor_run("/OPT-350/N4/", _file=None)
    second = _sailor_run("/GPT-NEO/N2/", _file=None)
    records = het.validate_runs([first, second, "not a run"])
    assert [(r["id"], r["metric"], r["status"]) for r in records] == [
        ("?#1", "iter_time_s", "ok"), ("?#1", "peak_memory_bytes", "ok"),
        ("?#2", "iter_time_s", "ok"), ("?#2", "peak_memory_bytes", "ok"),
        ("?#3", "iter_time_s", "skipped"), ("?#3", "peak_memory_bytes", "skipped")]
    # a run listed twice under its path is still scored once
    twice = het.validate_runs([_sailor_run("/OPT-350/N4/")] * 2)
    assert [r["status"] for r in twice] == ["ok", "ok", "skipped", "skipped"]


def test_enum_columns_are_read_in_any_case_as_framework_and_recompute_are():
    from paraplan.validation.published import validate_rows
    import pandas as pd
    lower = row_inputs(_kor22_22b_row())
    upper = row_inputs(_kor22_22b_row(dtype_norm="FP16", measured_metric="ITER_TIME_S", gpu_profile="A100-SXM-80GB"))
    # 'FP16' was skipped as "a100-sxm-80gb has no FP16 peak", 'ITER_TIME_S' as no training metric
    assert (upper.config.dtype, upper.metric, upper.cluster_name) == ("fp16", "iter_time_s", lower.cluster_name)
    mfu = _kor22_22b_row(id="m", measured_metric="MFU", flops_convention="KORTHIKANTI_MODEL", measured_value=41.5)
    assert row_inputs(mfu).convention == "korthikanti_model"
    # a time row's speed error keeps its sign with an upper-case metric (it was read as a rate)
    rows = validate_rows(pd.DataFrame([_kor22_22b_row(), _kor22_22b_row(id="u", measured_metric="ITER_TIME_S")]))
    assert list(rows.metric) == ["iter_time_s", "iter_time_s"]
    assert rows.speed_error[1] == pytest.approx(rows.speed_error[0]) and rows.status[1] == "ok"


def test_a_source_named_all_cannot_be_read_as_the_summarys_total_row():
    import pandas as pd

    from paraplan.validation.published import summarize
    results = pd.DataFrame({"source": ["ALL", "KOR22", "KOR22"], "status": ["ok", "ok", "skipped"],
                            "rel_error": [0.10, -0.30, None]})
    summary = summarize(results)
    assert list(summary.source) == ["ALL (source)", "KOR22", "ALL"]
    assert list(summary.rows_ok) == [1, 1, 2] and list(summary.rows_skipped) == [0, 1, 1]
    assert summary.mean_abs_err_pct.iloc[-1] == pytest.approx(20.0)      # the total: (10 + 30) / 2


def test_the_cli_table_shows_a_source_named_all_apart_from_the_total(tmp_path):
    from cli_results import run
    lines = _bundled_lines(2)
    path = tmp_path / "all.csv"
    path.write_text("\n".join(lines + [lines[1].replace("KOR22-T5-22B-full", "ALL-1")]) + "\n", encoding="utf-8")
    out = run("validate", "published", path)
    assert out.exit_code == 0
    table = [ln.split("  ")[0] for ln in out.stdout.splitlines() if ln.startswith(("ALL", "KOR22"))]
    assert table == ["ALL (source)", "KOR22", "ALL"], out.stdout       # was: ALL, KOR22, ALL


def test_a_whitespace_only_line_is_blank_and_moves_no_short_row_mark(tmp_path):
    """pandas skips a line of spaces as blank; counted as a short row it shifted every later mark
    one row down, and a whole row after it was skipped as short."""
    from paraplan.validation.csv_structure import check_csv_structure
    path = tmp_path / "ws.csv"
    path.write_text("a,b,c\n1,2,3\n   \n4,5\n7,8,9\n")
    # pandas' rows: 0 = 1,2,3; 1 = 4,5 (short); 2 = 7,8,9
    assert check_csv_structure(path) == {1: "row has 2 of 3 fields"}


def test_blank_lines_above_the_header_are_skipped_as_pandas_skips_them(tmp_path):
    """pandas reads the header below leading blank lines; the structure check took the first
    (blank) line for a header of 0 fields and refused every data row as having too many
    ("data row 2 of x.csv has 39 fields, the header 0 (fix that row: a stray comma, ...)")."""
    from cli_results import run
    lines = _bundled_lines(2)
    plain, blank = tmp_path / "plain.csv", tmp_path / "blank.csv"
    plain.write_text("\n".join(lines) + "\n", encoding="utf-8")
    blank.write_text("\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    got, want = run("validate", "published", blank, "--json"), run("validate", "published", plain, "--json")
    assert got.exit_code == 0, got.stderr
    assert got.stdout == want.stdout and '"status": "ok"' in got.stdout
