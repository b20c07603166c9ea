"""The ``paraplan`` command line: catalogs, simulate, validate, and one-line errors (exit 2)."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import click
import pandas as pd
import pytest
from click.testing import CliRunner

from paraplan.cli import DiscoveringGroup, main
from simulator.report import MEMORY_PARTS, TIME_PARTS
from paraplan.validation.datasets import PUBLISHED_RUNS, validation_file

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = validation_file(PUBLISHED_RUNS)
SIM = ["simulate", "--model", "llama3-70b", "--cluster", "dgx-h100"]
PLAN_64 = ["--gpus", "64", "--tp", "4", "--pp", "4", "--micro-batch", "1", "--global-batch", "128"]


@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)


def run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def assert_one_line_error(result, *needles):
    """Exit 2, exactly one non-empty stderr line starting 'error:', no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ---- the group --------------------------------------------------------------------------------

def test_version_flag_prints_the_package_version():
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("paraplan ")


def test_group_discovers_the_command_modules():
    result = run("--help")
    assert result.exit_code == 0
    for name in ("hardware", "models", "simulate", "validate"):
        assert name in result.stdout


def test_group_without_subcommand_prints_help_not_an_error():
    for args in ([], ["hardware"]):
        result = run(*args)
        assert result.exit_code == 0 and "Usage:" in result.stdout and not result.stderr


def _all_commands(cmd: click.Command, path=()):
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from _all_commands(cmd.get_command(ctx, name), path + (name,))


def test_every_command_help_says_what_it_answers_and_gives_an_example():
    for path, cmd in _all_commands(main):
        result = run(*path, "--help")
        assert result.exit_code == 0, path
        assert "Example" in result.stdout, f"paraplan {' '.join(path)} --help lacks an example"
        assert "paraplan " in result.stdout.split("Example", 1)[1], path


def test_module_with_a_missing_dependency_is_skipped_quietly(tmp_path, monkeypatch):
    pkg = tmp_path / "fakecmds"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "needs_torch.py").write_text("import torch_that_is_not_installed\nimport click\n"
                                        "command = click.Command('needs-torch')\n")
    (pkg / "hello.py").write_text("import click\n@click.command('hello')\ndef command():\n"
                                  "    '''Say hello.'''\n    click.echo('hi')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    group = DiscoveringGroup("t", package="fakecmds")
    runner = CliRunner()
    listing = runner.invoke(group, ["--help"])
    assert listing.exit_code == 0 and "hello" in listing.stdout
    assert "Traceback" not in listing.output and "needs-torch" not in listing.stdout
    assert runner.invoke(group, ["hello"]).stdout == "hi\n"
    missing = runner.invoke(group, ["needs-torch"])
    assert_one_line_error(missing, "needs-torch", "unavailable")


def test_keyboard_interrupt_prints_one_line_and_exits_2(monkeypatch):
    import paraplan.commands.simulate as sim_cmd

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sim_cmd, "simulate", interrupted)
    assert_one_line_error(run(*SIM, *PLAN_64), "interrupted")


def test_unexpected_exception_is_one_line_with_exit_1_and_debug_env_reraises(monkeypatch):
    import paraplan.commands.simulate as sim_cmd

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(sim_cmd, "simulate", broken)
    result = run(*SIM, *PLAN_64)
    assert result.exit_code == 1
    assert result.stderr.strip().count("\n") == 0 and "RuntimeError: boom" in result.stderr
    assert "Traceback" not in result.output
    debug = run(*SIM, *PLAN_64, env={"PARAPLAN_DEBUG": "1"})
    assert isinstance(debug.exception, RuntimeError)


# ---- hardware and models ---------------------------------------------------------------------

def test_hardware_list_shows_datasheet_values():
    result = run("hardware", "list")
    assert result.exit_code == 0
    h100 = next(ln for ln in result.stdout.splitlines() if ln.startswith("h100-sxm-80gb "))
    assert "989.4" in h100 and "hopper" in h100 and "3.35" in h100
    assert "bf16_tflops" in result.stdout and "scaleout_gbit_per_s" in result.stdout
    assert any(ln.startswith("dgx-h100 ") for ln in result.stdout.splitlines())


def test_hardware_list_json_has_gpus_and_clusters():
    data = json.loads(run("hardware", "list", "--json").stdout)
    gpus = {g["name"]: g for g in data["gpus"]}
    assert gpus["h100-sxm-80gb"]["bf16_tflops"] == 989.4
    assert gpus["a100-sxm-80gb"]["fp8_tflops"] is None
    clusters = {c["name"]: c for c in data["clusters"]}
    assert clusters["dgx-h100"]["scaleout_gbit_per_s"] == 400.0
    assert clusters["dgx-h100"]["gpus_per_node"] == 8


def test_hardware_list_says_which_generations_rest_on_a_prior():
    # the list gave no sign that MI300X, TPU or V100 numbers come from unfitted efficiency models
    gpus = {g["name"]: g for g in json.loads(run("hardware", "list", "--json").stdout)["gpus"]}
    trained = {n for n, g in gpus.items() if g["efficiency_fitted"]}
    served = {n for n, g in gpus.items() if g["serving_efficiency_fitted"]}
    assert {"a100-sxm-80gb", "h100-sxm-80gb", "b200", "gb200"} <= trained
    assert not {"mi300x", "mi250x", "tpu-v3", "tpu-v4", "v100-sxm-32gb", "cpu-generic"} & trained
    assert {"h100-sxm-80gb", "h200-sxm-141gb", "b200", "gb200"} <= served
    assert not {"a100-sxm-80gb", "mi300x", "tpu-v4"} & served          # no serving runs fitted there
    mi300x = next(ln for ln in run("hardware", "list").stdout.splitlines() if ln.startswith("mi300x "))
    assert mi300x.split()[-2:] == ["False", "False"]


def test_hardware_show_gpu_lists_fields_with_units_and_efficiency_model():
    result = run("hardware", "show", "h100-sxm-80gb")
    assert result.exit_code == 0
    for needle in ("989.40", "hbm_gib", "hbm_bw_tb_per_s", "scaleup_bw_gb_per_s", "efficiency model",
                   "gemm_peak_fraction", "kernel_overhead_s"):
        assert needle in result.stdout


def test_hardware_show_cluster_json():
    data = json.loads(run("hardware", "show", "dgx-h100", "--json").stdout)
    assert data["kind"] == "cluster"
    assert data["scaleout"]["bw_gbit_per_s"] == 400.0 and data["scaleup"]["bw_gb_per_s"] == 450.0
    assert data["gpu"]["peak_tflops"]["bf16"] == 989.4
    assert data["efficiency"]["generation"] == "hopper"


def test_hardware_show_of_a_never_fitted_efficiency_model_prints_no_nan():
    # a calibrated cluster file's inline efficiency has no fit objective (NaN in the dataclass):
    # shown as "-" / null, not as the number nan (fuzz seeds 303 and 404)
    path = str(Path(__file__).parent / "data" / "measured_calibration.yaml")
    table = run("hardware", "show", path)
    assert table.exit_code == 0 and "nan" not in table.stdout.lower()
    assert json.loads(run("hardware", "show", path, "--json").stdout)["efficiency"]["fit_objective"] is None
    fitted = json.loads(run("hardware", "show", "dgx-h100", "--json").stdout)["efficiency"]["fit_objective"]
    assert 0 < fitted < 1


def test_hardware_show_unknown_name_suggests_close_names():
    line = assert_one_line_error(run("hardware", "show", "h100"), "did you mean", "h100-sxm-80gb")
    assert "unknown" in line


def test_hardware_show_of_a_folder_says_it_is_a_folder(tmp_path, monkeypatch):
    line = assert_one_line_error(run("hardware", "show", str(tmp_path)), "is a folder")
    assert "unknown GPU" not in line
    assert_one_line_error(run("simulate", "--model", "llama3-8b", "--cluster", str(tmp_path), "--gpus", "8",
                              "--global-batch", "8"), "cluster", "is a directory")
    assert_one_line_error(run("hardware", "stacks", str(tmp_path)), "stack", "is a directory")
    (tmp_path / "dgx-h100").mkdir()     # a folder named like a catalog entry does not hide the entry
    monkeypatch.chdir(tmp_path)
    assert run("hardware", "show", "dgx-h100").exit_code == 0


def test_models_list_contains_presets_with_parameter_counts():
    result = run("models", "list")
    assert result.exit_code == 0
    row = next(ln for ln in result.stdout.splitlines() if ln.startswith("llama3.1-405b "))
    assert "126" in row and "16384" in row
    data = {m["name"]: m for m in json.loads(run("models", "list", "--json").stdout)}
    assert data["llama3.1-405b"]["params_b"] == pytest.approx(405.85, abs=0.05)
    assert data["mixtral-8x7b"]["experts"] == 8 and data["mixtral-8x7b"]["top_k"] == 2
    assert data["mixtral-8x7b"]["active_params_b"] < data["mixtral-8x7b"]["params_b"]


def test_models_list_active_params_count_embedding_and_lm_head_as_the_published_figures_do():
    """Mixtral 8x7B, by hand: 32 layers x (attention 2 x 4096^2 + 2 x 4096 x 1024, two of eight
    experts 2 x 3 x 4096 x 14336, router 8 x 4096, two norms 2 x 4096) + embedding and LM head
    2 x 32000 x 4096 + final norm 4096 = 12,879,925,248: Mistral's "12.9B active" (without the
    embedding and head, 12.75B, it would read 12.7 or 12.8). DeepSeek-V3, by hand: 61 layers x
    (MLA 7168 x 1536 + 1536 x 128 x 192 + 7168 x 576 + 512 x 128 x 256 + 128 x 128 x 7168, its
    norms 1536 + 512, two layer norms 2 x 7168, nine 3 x 7168 x 2048 MLPs: eight routed + one
    shared, or the 3 x 7168 x 18432 dense MLP of the first three, the same size) + 58 routers
    256 x 7168 + embedding and LM head 2 x 129280 x 7168 + final norm 7168 = 37,552,282,624, the
    report's "37B activated" (1.5% above 37.0: the report states whole billions)."""
    data = {m["name"]: m for m in json.loads(run("models", "list", "--json").stdout)}
    mixtral, dsv3 = data["mixtral-8x7b"]["active_params_b"], data["deepseek-v3"]["active_params_b"]
    assert mixtral == 12.88 and mixtral == pytest.approx(12.9, rel=0.01)
    assert dsv3 == 37.55 and int(dsv3) == 37
    shown = json.loads(run("models", "show", "deepseek-v3", "--json").stdout)
    assert shown["active_params"] == 37_552_282_624
    assert json.loads(run("models", "show", "mixtral-8x7b", "--json").stdout)["active_params"] == 12_879_925_248
    footnote = " ".join(run("models", "list").stdout.split("\n\n")[-1].split())
    assert footnote.startswith("active_params_b: parameters one token uses, input embedding and LM head included")
    assert "input embedding and the LM head" in " ".join(run("models", "list", "--help").stdout.split())


def test_models_show_reads_a_hugging_face_config(tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
           "num_key_value_heads": 2, "intermediate_size": 1536, "vocab_size": 32000,
           "max_position_embeddings": 2048}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    data = json.loads(run("models", "show", path, "--json").stdout)
    assert data["num_layers"] == 4 and data["num_kv_heads"] == 2 and data["params"] > 0


def test_models_show_unknown_and_malformed(tmp_path):
    assert_one_line_error(run("models", "show", "lama3-70b"), "model", "did you mean")
    bad = tmp_path / "model.json"
    bad.write_text('{"model_type": "llama", "hidden_size": ')
    assert_one_line_error(run("models", "show", bad), "malformed JSON")


# ---- simulate -----------------------------------------------------------------------------------

def test_simulate_prints_an_aligned_table():
    result = run(*SIM, *PLAN_64)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for needle in ("llama3-70b", "dgx-h100", "dp=4 tp=4 pp=4", "time_s", "pct_of_step", "step_time_s",
                   "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu_bf16_pct", "hfu_bf16_pct", "mem_gib",
                   "pct_of_hbm", "fits: ", "why: "):
        assert needle in out, needle
    for part in TIME_PARTS:
        assert part in out


def test_simulate_json_parts_sum_to_the_step():
    result = run(*SIM, *PLAN_64, "--json")
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["step_time_s"] > 0
    assert d["config"]["dp"] == 4 and d["n_gpus"] == 64
    assert math.isclose(sum(d["time_breakdown_s"][k] for k in TIME_PARTS), d["step_time_s"], rel_tol=1e-9)
    assert math.isclose(sum(d["memory_breakdown_bytes"][k] for k in MEMORY_PARTS), d["memory_bytes"], rel_tol=1e-9)
    # fits is "peak memory leaves the required headroom free" (simulator.headroom.fits), a JSON
    # bool. This row cannot fit 80 GiB: tp 4 x pp 4 with no ZeRO leaves about 4.5e9 parameters
    # on the first stage at 2 (bf16 weights) + 4 (fp32 gradients) + 12 (fp32 master and Adam
    # moments) = 18 bytes each, 82 GB before any activation (168.5 GB in all, of 85.9 GB)
    assert d["headroom_bytes"] == pytest.approx(d["hbm_bytes"] - d["memory_bytes"], rel=1e-12)
    assert d["fits"] is (d["headroom_bytes"] >= d["headroom_required_bytes"]) is False


def test_simulate_global_batch_tokens_and_seq_len_override():
    d = json.loads(run(*SIM, "--gpus", 64, "--tp", 8, "--pp", 4, "--seq-len", 4096,
                       "--global-batch-tokens", 4096 * 64, "--json").stdout)
    assert d["config"]["global_batch"] == 64 and d["config"]["dp"] == 2
    assert d["tokens_per_step"] == 4096 * 64


@pytest.mark.parametrize("args, needles", [
    (["simulate", "--model", "llama3-70b", "--cluster", "dgx-h10", *PLAN_64], ["cluster", "did you mean", "dgx-h100"]),
    (["simulate", "--model", "lama3-70b", "--cluster", "dgx-h100", *PLAN_64], ["model", "did you mean"]),
    ([*SIM, "--gpus", 24, "--tp", 3, "--pp", 4, "--global-batch", 8], ["tp", "attention heads"]),
    # Llama-3.1-405B's 8 key/value heads: the default stack (megatron-core) splits whole heads over tp
    (["simulate", "--model", "llama3.1-405b", "--cluster", "dgx-h100", "--gpus", 1024, "--tp", 16, "--pp", 8,
      "--sequence-parallel", "--recompute", "selective", "--micro-batch", 1, "--global-batch", 512],
     ["tp=16 is more than the 8 key/value heads of llama3.1-405b", "choose tp from 1, 2, 4, 8"]),
    ([*SIM, "--gpus", 64, "--dp", 2, "--tp", 4, "--pp", 4, "--global-batch", 128], ["dp", "64 GPUs"]),
    ([*SIM, "--gpus", 60, "--tp", 8, "--global-batch", 8], ["--gpus", "tp*pp*cp"]),
    ([*SIM, "--gpus", 64, "--tp", 4, "--pp", 4, "--global-batch", 127], ["global_batch", "divisible"]),
    ([*SIM, "--tp", 0, "--global-batch", 8], ["--tp"]),
    ([*SIM, "--micro-batch", -1, "--global-batch", 8], ["--micro-batch"]),
    ([*SIM, "--gpus", 0, "--global-batch", 8], ["--gpus"]),
    ([*SIM, "--tp", 8], ["--global-batch", "missing"]),
    ([*SIM, "--global-batch-tokens", 1000], ["--global-batch-tokens", "multiple"]),
    ([*SIM, "--dtype", "fp9", "--global-batch", 8], ["--dtype"]),
    ([*SIM, "--tp", 8, "--dtype", "nvfp4", "--global-batch", 8], ["dtype", "h100"]),
    ([*SIM, "--tpp", 4, "--global-batch", 8], ["--tpp"]),
    (["simulat"], ["simulate"]),
])
def test_simulate_bad_input_is_one_line_exit_2(args, needles):
    assert_one_line_error(run(*args), *needles)


def test_simulate_malformed_cluster_yaml_and_model_json(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("name: mine\ngpu: [h100-sxm-80gb\ngpus_per_node: 8\n")
    assert_one_line_error(run("simulate", "--model", "llama3-8b", "--cluster", cluster, "--global-batch", 8),
                          "cluster", "malformed YAML")
    model = tmp_path / "config.json"
    model.write_text('{"model_type": "llama", "num_hidden_layers": 4,,}')
    assert_one_line_error(run("simulate", "--model", model, "--cluster", "dgx-h100", "--global-batch", 8),
                          "model", "malformed JSON")


def test_simulate_trace_and_gantt_files(tmp_path):
    trace, gantt = tmp_path / "step.json", tmp_path / "step.png"
    result = run(*SIM, *PLAN_64, "--trace", trace, "--gantt", gantt)
    try:
        import simulator.pipeline.trace  # noqa: F401
        import simulator.pipeline.gantt  # noqa: F401
    except ImportError:
        assert_one_line_error(result, "not available")
        return
    assert result.exit_code == 0, result.output
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["pid"] for e in events if e.get("ph") == "X"} == {0, 1, 2, 3}
    assert gantt.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step.json", "step.png"]   # no temp files
    # the note's idle share is the mean over the trace's stages (it was labelled 'bubble', beside a
    # breakdown whose pipeline_bubble_s is the busiest stage's idle). The busiest stage idles
    # least, so the mean over the 4 stages is at least the breakdown's share of the step (11.5%
    # against 8.1% at the committed factors of 2026-12-05)
    ops = [e for e in events if e.get("ph") == "X"]
    makespan_us = max(e["ts"] + e["dur"] for e in ops)
    mean_idle_pct = 100 * (1 - sum(e["dur"] for e in ops) / (4 * makespan_us))
    note = next(ln for ln in result.stderr.splitlines() if ln.startswith("wrote trace"))
    shown = float(re.search(r"mean stage idle ([\d.]+)%", note).group(1))
    assert shown == pytest.approx(mean_idle_pct, abs=0.05)
    assert "pipeline_bubble_s above is the busiest stage's idle" in note and " bubble " not in note
    part = {ln.split()[0]: ln.split() for ln in result.stdout.splitlines() if ln.strip().endswith(("idle stages)", "one optimizer step"))}
    bubble_s, bubble_pct = float(part["pipeline_bubble_s"][1]), float(part["pipeline_bubble_s"][2])
    assert bubble_pct == pytest.approx(100 * bubble_s / float(part["step_time_s"][1]), abs=0.05)
    assert 0 < bubble_pct < shown


def test_simulate_trace_into_missing_folder_fails_before_simulating(tmp_path):
    assert_one_line_error(run(*SIM, *PLAN_64, "--trace", tmp_path / "nope" / "t.json"), "--trace")


# ---- validate published -------------------------------------------------------------------------

@pytest.fixture()
def small_runs_csv(tmp_path):
    if not PUBLISHED.is_file():
        pytest.skip(f"{PUBLISHED} not present")
    df = pd.read_csv(PUBLISHED)
    ok = df[df["id"].isin(["KOR22-T5-22B-full:iter_time_s", "KOR22-T5-22B-selsp:iter_time_s",
                           "KOR22-T5-22B-selsp:mfu"])]
    assert len(ok) == 3
    skip = ok.iloc[[0]].copy()
    skip["id"] = "SKIPME:gpu_hours"
    skip["run_id"] = "SKIPME-run"
    skip["measured_metric"] = "gpu_hours"
    path = tmp_path / "runs.csv"
    pd.concat([ok, skip]).to_csv(path, index=False)
    return path


def test_validate_published_prints_per_source_table_and_skip_reasons(small_runs_csv):
    result = run("validate", "published", small_runs_csv)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "mean_abs_err_pct" in out and "worst_abs_err_pct" in out
    kor = next(ln for ln in out.splitlines() if ln.startswith("KOR22"))
    assert kor.split()[1:3] == ["3", "0"]
    assert next(ln for ln in out.splitlines() if ln.startswith("SKIPME")).split()[1:3] == ["0", "1"]
    assert "'gpu_hours' is not a training-step metric" in out
    listed = run("validate", "published", small_runs_csv, "--list-skipped").stdout
    assert "SKIPME:gpu_hours" in listed


def test_a_skipped_row_without_an_id_is_listed_by_its_position_not_as_nan(small_runs_csv, tmp_path):
    df = pd.read_csv(small_runs_csv)
    df.loc[df["id"] == "SKIPME:gpu_hours", "id"] = ""        # read back as missing (NaN)
    path = tmp_path / "no_id.csv"
    df.to_csv(path, index=False)
    listed = run("validate", "published", path, "--list-skipped")
    assert listed.exit_code == 0, listed.output
    line = next(ln for ln in listed.stdout.splitlines() if "gpu_hours" in ln)
    assert line.split("  ")[1].strip() == f"(no id: data row {len(df)})" and "nan" not in listed.stdout.lower()


ROW_KEYS = {"id", "status", "predicted", "measured", "rel_error", "reason"}


def test_validate_published_json_rows(small_runs_csv):
    result = run("validate", "published", small_runs_csv, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 4 and all(ROW_KEYS <= set(r) for r in rows)
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 3
    for r in ok:
        assert r["predicted"] > 0 and r["reason"] is None
        assert r["rel_error"] == pytest.approx((r["predicted"] - r["measured"]) / r["measured"])
    skipped = next(r for r in rows if r["status"] == "skipped")
    assert skipped["predicted"] is None and skipped["rel_error"] is None and skipped["reason"]


def test_validate_published_csv_and_source_filter(small_runs_csv):
    result = run("validate", "published", small_runs_csv, "--csv", "--source", "KOR22")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert ROW_KEYS <= set(lines[0].split(","))
    assert len(lines) == 4 and all(",ok," in ln for ln in lines[1:])
    assert_one_line_error(run("validate", "published", small_runs_csv, "--json", "--csv"), "--json or --csv")
    assert_one_line_error(run("validate", "published", small_runs_csv, "--source", "NOPE"), "--source")


def test_validate_fail_above_gates_ci_on_the_mean_error(small_runs_csv):
    """--fail-above PCT: exit 0 at or below the mean |error| of the predicted rows, exit 1 with one
    'regression:' line above it (the table still printed); exit 2 stays for bad input."""
    rows = json.loads(run("validate", "published", small_runs_csv, "--json").stdout)
    errs = [abs(r["rel_error"]) for r in rows if r["status"] == "ok"]
    mean_pct = 100 * sum(errs) / len(errs)
    passed = run("validate", "published", small_runs_csv, "--fail-above", f"{mean_pct + 0.01:.4f}")
    assert passed.exit_code == 0 and "regression" not in passed.stderr
    failed = run("validate", "published", small_runs_csv, "--fail-above", f"{mean_pct - 0.01:.4f}")
    assert failed.exit_code == 1 and "mean_abs_err_pct" in failed.stdout
    assert failed.stderr.strip() == (f"regression: all rows: mean |error| {mean_pct:.2f}% over 3 rows is above "
                                     f"--fail-above {float(f'{mean_pct - 0.01:.4f}'):g}%")
    nothing = run("validate", "published", small_runs_csv, "--source", "SKIPME", "--fail-above", "50")
    assert nothing.exit_code == 1 and nothing.stderr.strip() == "regression: all rows: no row predicted"
    assert_one_line_error(run("validate", "published", small_runs_csv, "--fail-above", "-1"), "--fail-above")
    het = run("validate", "heterogeneous", "--fail-above", "1", "--json")
    assert het.exit_code == 1 and het.stderr.startswith("regression: iter_time_s: mean |error|")


def test_validate_a_csv_with_a_header_and_no_rows_is_one_line_not_an_internal_error(small_runs_csv, tmp_path):
    # the per-source table grouped an empty frame (KeyError: 'source'); serving likewise ('backend')
    header_only = tmp_path / "header.csv"
    header_only.write_text(small_runs_csv.read_text().splitlines()[0] + "\n")
    for args in ((), ("--json",), ("--fail-above", "5")):
        assert_one_line_error(run("validate", "published", header_only, *args),
                              f"error: PATH: {header_only} has a header but no rows")
    from paraplan.validation.datasets import SERVING_RUNS, validation_file
    serving_header = tmp_path / "serving_header.csv"
    serving_header.write_text(validation_file(SERVING_RUNS).read_text().splitlines()[0] + "\n")
    assert_one_line_error(run("validate", "serving", serving_header), "error: PATH:", "has a header but no rows")


def test_validate_published_out_writes_atomically(small_runs_csv, tmp_path):
    out = tmp_path / "errors.json"
    result = run("validate", "published", small_runs_csv, "--json", "--out", out)
    assert result.exit_code == 0 and result.stdout == ""
    assert len(json.loads(out.read_text())) == 4
    # a failing run leaves the previous file untouched and no temp file behind
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"\xff\xfe\x00garbage\x81\x82")
    out.write_text("previous")
    assert_one_line_error(run("validate", "published", bad, "--json", "--out", out), "error: path: malformed CSV")
    assert out.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["runs.csv", "errors.json", "bad.csv"])
    missing_dir = tmp_path / "nope" / "x.csv"
    assert_one_line_error(run("validate", "published", small_runs_csv, "--csv", "--out", missing_dir), "--out")
    assert not missing_dir.parent.exists()


def test_validate_published_malformed_csv(tmp_path):
    no_cols = tmp_path / "cols.csv"
    no_cols.write_text("a,b\n1,2\n")
    assert_one_line_error(run("validate", "published", no_cols), "lacks column")
    garbage = tmp_path / "garbage.csv"
    garbage.write_bytes(bytes(range(256)) * 4)
    assert_one_line_error(run("validate", "published", garbage), "error: path: malformed CSV", "garbage.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert_one_line_error(run("validate", "published", empty), "error: path: malformed CSV", "empty.csv")
    assert_one_line_error(run("validate", "published", tmp_path / "missing.csv"), "no such file")


# ---- the installed entry point ------------------------------------------------------------------

def test_installed_entry_point_runs_and_reports_errors_on_one_line():
    exe = shutil.which("paraplan")
    if exe is None:
        pytest.skip("paraplan is not installed (pip install -e .)")
    ok = subprocess.run([exe, *SIM, *PLAN_64, "--json"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["step_time_s"] > 0
    env = {k: v for k, v in os.environ.items() if k != "PARAPLAN_DEBUG"}
    bad = subprocess.run([exe, "models", "show", "no-such-model"], capture_output=True, text=True, timeout=60,
                         env=env)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: model: ")
    assert "Traceback" not in bad.stderr


def test_measure_commands_are_registered_and_explain_themselves():
    from click.testing import CliRunner
    from paraplan.cli import main
    runner = CliRunner()
    for args in (["calibrate", "--help"], ["measure", "--help"], ["validate", "measured", "--help"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
        assert "Example" in result.output


def test_moe_ep_and_cp_divisibility_errors_are_one_line_exit_2():
    # in-process (cli_results.completed); the real ``simulate`` process with a one-line error is
    # test_moe_tp_needs_sp's, the installed entry point test_installed_entry_point_runs_...'s
    from cli_results import completed
    cases = [
        (["--model", "deepseek-v3", "--cluster", "h800-node", "--gpus", "2048", "--tp", "1", "--pp", "16",
          "--ep", "48", "--global-batch", "1536"], "error: ep: ep=48 does not divide the 256 experts"),
        (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "24", "--cp", "3", "--global-batch", "8"],
         # ring CP: 2 x cp = 6 equal chunks (Megatron-LM asserts seq_length % (2 * cp) == 0); 8192 = 6 x 1365 + 2
         "error: cp: ring context parallelism splits the sequence into 2 x cp = 6 equal chunks"),
    ]
    for args, expected in cases:
        proc = completed("simulate", *args)
        assert proc.returncode == 2
        assert proc.stderr.strip().startswith(expected)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_validate_published_without_a_path_reads_the_bundled_file_when_no_shared_copy(tmp_path):
    from paraplan.validation.datasets import BUNDLED_DIR
    env = {"PARAPLAN_VALIDATION_DIR": str(tmp_path)}          # an empty "shared" folder
    default = run("validate", "published", "--source", "KOR22-T5", "--json", env=env)
    assert default.exit_code == 0, default.output
    assert str(BUNDLED_DIR / PUBLISHED_RUNS) in default.stderr
    explicit = run("validate", "published", BUNDLED_DIR / PUBLISHED_RUNS, "--source", "KOR22-T5", "--json")
    rows = json.loads(default.stdout)
    assert rows == json.loads(explicit.stdout)
    assert len(rows) >= 8 and all(r["status"] == "ok" and math.isfinite(r["rel_error"]) for r in rows)


def test_validate_published_without_a_path_fails_its_gate_with_one_stderr_line(tmp_path):
    # the default file's 'reading <file>' line came before the 'regression:' line, two lines where
    # --fail-above's help promises one; off a terminal (CI) the gate's line is the only one
    env = {"PARAPLAN_VALIDATION_DIR": str(tmp_path)}          # an empty "shared" folder
    failed = run("validate", "published", "--source", "KOR22-T5", "--fail-above", "0", env=env)
    assert failed.exit_code == 1 and "mean_abs_err_pct" in failed.stdout, failed.output
    lines = failed.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("regression: all rows: mean |error|"), failed.stderr
    passed = run("validate", "published", "--source", "KOR22-T5", "--fail-above", "100", env=env)
    assert passed.exit_code == 0 and passed.stderr == "", passed.output


def test_a_timeline_of_too_many_operations_is_refused_before_any_work(tmp_path):
    import time
    t0 = time.process_time()
    for flag, name in (("--gantt", "g.png"), ("--trace", "t.json")):
        result = run("simulate", "-m", "gpt3-125m", "-c", "dgx-h100", "--pp", "4", "--global-batch", "100000",
                     flag, tmp_path / name)
        assert_one_line_error(result, flag, "operations")
        assert not (tmp_path / name).exists()
    assert time.process_time() - t0 < 2.0
    assert_one_line_error(run("simulate", "-m", "gpt3-125m", "-c", "dgx-h100", "--pp", "2", "--global-batch", "8",
                              "--gantt", tmp_path / "g.txt"), "--gantt", "image format")


def test_a_step_of_a_million_micro_batches_is_answered_quickly_and_finite():
    import time
    t0 = time.process_time()
    result = run("simulate", "-m", "gpt3-125m", "-c", "dgx-h100", "--pp", "4", "--global-batch", "1000000", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["step_time_s"] > 0 and math.isfinite(report["step_time_s"])
    assert time.process_time() - t0 < 5.0


# ---- honest defaults: priors, headroom, MFU ---------------------------------------------------------

def test_numbers_on_an_unfitted_efficiency_model_carry_the_marker_and_the_field():
    prior = run("simulate", "-m", "llama3-8b", "-c", "mi300x-node", "--gpus", "8", "--global-batch", "64")
    fitted = run("simulate", "-m", "llama3-8b", "-c", "dgx-h100", "--gpus", "8", "--global-batch", "64")
    assert prior.exit_code == fitted.exit_code == 0
    step = next(ln for ln in prior.stdout.splitlines() if ln.strip().startswith("step_time_s"))
    assert step.split()[1].endswith("*") or step.split()[2] == "*"
    assert "unfitted prior" in prior.stdout and "cdna3" in prior.stdout
    assert "*" not in fitted.stdout and "prior" not in fitted.stdout
    data = json.loads(run("simulate", "-m", "llama3-8b", "-c", "mi300x-node", "--gpus", "8", "--global-batch", "64",
                          "--json").stdout)
    assert data["efficiency_fitted"] is False and data["efficiency_generation"] == "cdna3"
    plan = json.loads(run("plan", "-m", "llama3-8b", "-c", "mi300x-node", "-n", "16", "--global-batch", "64",
                          "--json", "--top", "2").stdout)
    assert plan["request"]["efficiency_fitted"] is False and plan["plans"][0]["efficiency_fitted"] is False
    table = run("plan", "-m", "llama3-8b", "-c", "mi300x-node", "-n", "16", "--global-batch", "64", "--top", "2")
    assert "unfitted prior" in table.stdout.splitlines()[-1]
    # the plan table marks MFU as simulate does: it is a time on the prior divided into the FLOPs
    lines = table.stdout.splitlines()
    header = next(ln for ln in lines if ln.startswith("rank "))
    first = next(ln for ln in lines if ln.strip().startswith("1 "))
    mfu_at = header.index("mfu_bf16_pct") + len("mfu_bf16_pct")      # right-aligned column
    assert first[:mfu_at].rstrip().endswith("*"), (header, first)
    assert float(first[:mfu_at].split()[-2]) == pytest.approx(plan["plans"][0]["mfu_bf16_pct"], abs=0.05)
    sim_mfu = next(ln for ln in prior.stdout.splitlines() if ln.strip().startswith("mfu_bf16_pct"))
    assert sim_mfu.rstrip().endswith("*")


def test_plan_explain_marks_the_winner_and_runner_up_numbers_on_a_prior_as_the_table_does():
    args = ("plan", "-m", "llama3-8b", "-c", "{}", "-n", "16", "--global-batch", "64", "--explain")
    prior = run(*(a.format("mi300x-node") for a in args))
    assert prior.exit_code == 0, prior.output
    lines = prior.stdout.splitlines()
    plan = json.loads(run("plan", "-m", "llama3-8b", "-c", "mi300x-node", "-n", "16", "--global-batch", "64",
                          "--json", "--top", "1").stdout)["plans"][0]
    for label in ("winner:", "runner-up:"):
        perf = lines[next(i for i, ln in enumerate(lines) if ln.startswith(label)) + 1]
        # time, throughput and MFU rest on the cdna3 prior; memory does not (the table marks the same cells)
        assert re.search(r"[\d.]+ s/step \*, [\d,]+ tokens/s \*, MFU [\d.]+% \* of the bf16 peak, [\d.]+ GiB/GPU$",
                         perf.split("  (")[0]), perf
    win = lines[next(i for i, ln in enumerate(lines) if ln.startswith("winner:")) + 1]
    assert f"{plan['step_time_s']:.4g} s/step *, {plan['tokens_per_s']:,.0f} tokens/s *" in win
    fitted = run(*(a.format("dgx-h100") for a in args))
    assert fitted.exit_code == 0 and " *" not in fitted.stdout and "unfitted prior" not in fitted.stdout


def test_plan_json_writes_a_single_gpu_count_as_a_number_and_a_range_as_min_max():
    base = ("plan", "-m", "llama3-8b", "-c", "dgx-h100", "--global-batch", "64", "--json", "--top", "1")
    single = json.loads(run(*base, "-n", "16").stdout)
    assert single["request"]["gpus"] == 16
    ranged = json.loads(run(*base, "-n", "8-16").stdout)
    assert ranged["request"]["gpus"] == {"min": 8, "max": 16}
    # stage_layers is half-open: llama3-8b's 32 layers on one stage are [0, 32), the table's 0:0-31
    assert single["stage_layers"] == [[0, 32]]
    table = run("plan", "-m", "llama3-8b", "-c", "dgx-h100", "--global-batch", "64", "-n", "16", "--top", "1").stdout
    assert "0:0-31" in table
    help_text = "".join(run("plan", "--help").stdout.split())      # as wrapped: compare without spaces
    assert '{"min":lo,"max":hi}' in help_text and "[start,end)" in help_text and "end-exclusive" in help_text


@pytest.mark.parametrize("extra, field, fix", [
    (("--schedule", "zb-h1"), "schedule", "drop --schedule, or set --pp 2 or more"),
    (("--schedule", "zb-h2"), "schedule", "drop --schedule, or set --pp 2 or more"),
    (("--schedule", "zb-v"), "schedule", "drop --schedule, or set --pp 2 or more"),
    (("--cp-kind", "ulysses"), "cp_kind", "drop --cp-kind, or set --cp 2 or more"),
    (("--cp-kind", "hybrid"), "cp_kind", "drop --cp-kind, or set --cp 2 or more"),
    (("--recompute-method", "uniform"), "recompute_method", "drop --recompute-method, or set --recompute full and --recompute-num-layers N"),
    (("--recompute", "full", "--recompute-method", "uniform"), "recompute_method", "drop --recompute-method, or set --recompute full and --recompute-num-layers N"),
    (("--recompute", "selective", "--recompute-method", "uniform"), "recompute_method", "drop --recompute-method, or set --recompute full and --recompute-num-layers N"),
    # ran as interleaved, and with sequence parallelism off
    (("--pp", "2", "--vpp", "2", "--schedule", "1f1b"), "schedule", "drop --schedule, or give --schedule interleaved, or --vpp 1"),
    (("--sequence-parallel",), "sequence_parallel", "drop --sequence-parallel, or set --tp 2 or more"),
    # printed vpp=4 beside the step of vpp 1 (ZB-V and DualPipe run two chunks per stage anyway)
    *((("--pp", "2", "--vpp", "4", "--schedule", s), "vpp", "set vpp 1, or the interleaved schedule")
      for s in ("gpipe", "zb-h1", "zb-h2", "zb-v", "dualpipe")),
])
def test_simulate_refuses_an_option_the_run_would_not_use(extra, field, fix):
    # each was printed in the config beside a step time it did not change (llama3-8b on 8 H100s:
    # 7.197 s and 184.7 GiB with and without it; uniform with full but no N: 9.321 s as block)
    base = ("simulate", "-m", "llama3-8b", "-c", "dgx-h100", "--gpus", "8", "--global-batch", "64")
    assert_one_line_error(run(*base, *extra), f"error: {field}: ", f"({fix})")


def test_simulate_keeps_the_options_where_they_change_the_run():
    base = ("simulate", "-m", "llama3-8b", "-c", "dgx-h100", "--gpus", "8", "--global-batch", "64", "--json")
    plain = json.loads(run(*base).stdout)
    # GPipe on one stage keeps all of a step's micro-batches' activations (64 sequences over dp 8:
    # 8 micro-batches of one), 1F1B one: 8x the activations, the model states the same
    gpipe = json.loads(run(*base, "--schedule", "gpipe").stdout)
    act = "activations_bytes"
    assert gpipe["memory_breakdown_bytes"][act] == pytest.approx(8 * plain["memory_breakdown_bytes"][act], rel=1e-9)
    for part in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
        assert gpipe["memory_breakdown_bytes"][part] == plain["memory_breakdown_bytes"][part]
    # the defaults given explicitly are what runs anyway
    for extra in (("--schedule", "1f1b"), ("--cp-kind", "ring"), ("--recompute-method", "block")):
        assert json.loads(run(*base, *extra).stdout)["step_time_s"] == plain["step_time_s"]
    # and where they matter they are taken: on one stage of 32 equal layers, uniform groups of 4
    # recompute every layer (the step of --recompute-num-layers 32), block recomputes the first 4,
    # i.e. 4/32 of the recomputation that every layer adds
    full = (*base, "--recompute", "full", "--recompute-num-layers")
    every = json.loads(run(*full, "32").stdout)["step_time_s"]
    uniform = json.loads(run(*full, "4", "--recompute-method", "uniform").stdout)["step_time_s"]
    block = json.loads(run(*full, "4").stdout)["step_time_s"]
    assert every > plain["step_time_s"] * 1.1
    assert uniform == pytest.approx(every, rel=1e-12)
    assert block == pytest.approx(plain["step_time_s"] + 4 / 32 * (every - plain["step_time_s"]), rel=1e-9)
    # ZB-H1 on two stages fills part of 1F1B's bubble with weight-gradient passes; Ulysses context
    # parallelism exchanges heads by all-to-all the attention core cannot hide, the ring hides its
    # K/V blocks here
    one_f = json.loads(run(*base, "--pp", "2").stdout)
    zb = json.loads(run(*base, "--pp", "2", "--schedule", "zb-h1").stdout)
    assert zb["config"]["schedule"] == "zb-h1"
    assert 0 < zb["time_breakdown_s"]["pipeline_bubble_s"] < one_f["time_breakdown_s"]["pipeline_bubble_s"]
    assert zb["step_time_s"] < one_f["step_time_s"]
    ring = json.loads(run(*base, "--cp", "2").stdout)
    ulysses = json.loads(run(*base, "--cp", "2", "--cp-kind", "ulysses").stdout)
    assert ulysses["config"]["cp_kind"] == "ulysses" and ring["time_breakdown_s"]["cp_comm_exposed_s"] == 0.0
    assert ulysses["time_breakdown_s"]["cp_comm_exposed_s"] > 0


def test_simulate_and_plan_keep_the_default_headroom_unless_told_otherwise():
    from simulator.headroom import DEFAULT_HEADROOM_FRACTION
    base = ["simulate", "-m", "llama3-8b", "-c", "mi300x-node", "--gpus", "8", "--global-batch", "64", "--zero", "0",
            "--json"]
    kept = json.loads(run(*base).stdout)
    assert kept["headroom_required_bytes"] == pytest.approx(DEFAULT_HEADROOM_FRACTION * kept["hbm_bytes"])
    # 186.8 GiB of 192: fits in HBM, but not with the 9.6 GiB a run keeps free
    assert kept["memory_bytes"] < kept["hbm_bytes"] and kept["fits"] is False
    assert json.loads(run(*base, "--headroom-gib", "0").stdout)["fits"] is True
    plan = json.loads(run("plan", "-m", "gpt3-1.3b", "-c", "dgx-a100-80gb", "-n", "8", "--global-batch", "32",
                          "--json").stdout)
    hbm = 80 * 2**30
    assert plan["request"]["memory_limit_bytes"] == pytest.approx((1 - DEFAULT_HEADROOM_FRACTION) * hbm)
    assert all(p["memory_gib"] * 2**30 <= (1 - DEFAULT_HEADROOM_FRACTION) * hbm for p in plan["plans"])
    for bad in ("-1", "nan", "inf", "200"):
        assert_one_line_error(run(*base, "--headroom-gib", bad), "headroom_gib")


def test_mfu_is_percent_of_the_bf16_peak_in_every_command():
    sim = json.loads(run(*SIM, *PLAN_64, "--json").stdout)
    table = run(*SIM, *PLAN_64).stdout
    shown = float(next(ln for ln in table.splitlines() if ln.strip().startswith("mfu_bf16_pct")).split()[1])
    assert shown == pytest.approx(sim["mfu_bf16_pct"], abs=0.05) and "mfu" not in sim
    fp8 = json.loads(run(*SIM, *PLAN_64, "--dtype", "fp8", "--json").stdout)
    # an fp8 plan's MFU against the bf16 peak: its FLOPs over the bf16 rate, so above its fp8-peak share
    assert 0 < fp8["mfu_bf16_pct"] < 200 and fp8["mfu_bf16_pct"] > sim["mfu_bf16_pct"]


def test_ep_comm_overlap_switch_hides_the_all_to_all_the_layers_compute_covers():
    # Mixtral on 64 H100, ep 8 within a node, dp 32, m = 256 / 32 = 8: a paired forward's and
    # backward's dispatch/combine are shorter than the other pass's expert GEMMs, so with the
    # switch on only the unpaired first forward and last backward expose theirs (Megatron-Core's
    # combined 1F1B), one micro-batch's worth, off / 8; the step loses the rest (the all-to-all
    # is on no other path)
    base = ["simulate", "-m", "mixtral-8x7b", "-c", "dgx-h100", "-n", "64", "--tp", "2", "--ep", "8",
            "--global-batch", "256", "--json"]
    off = json.loads(run(*base, "--no-ep-comm-overlap").stdout)
    on = json.loads(run(*base, "--ep-comm-overlap").stdout)
    exposed_off = off["time_breakdown_s"]["ep_comm_exposed_s"]
    assert exposed_off > 0.1
    assert on["time_breakdown_s"]["ep_comm_exposed_s"] == pytest.approx(exposed_off / 8, rel=1e-9)
    assert on["step_time_s"] == pytest.approx(off["step_time_s"] - exposed_off * 7 / 8, rel=1e-9)
    assert on["config"]["ep_comm_overlap"] is True and off["config"]["ep_comm_overlap"] is False


def test_ep_dispatch_dedup_switch_cuts_the_cross_node_all_to_all_about_fourfold():
    # Qwen3-30B-A3B (128 experts, top-8) on ep 16 over two 8-GPU H100 nodes: per pair, 4 of a
    # token's 8 copies cross the NIC; deduplicated, one copy per needed node (p = 0.99690):
    # the NIC-bound transfer is 4 / 0.99690 = 4.01x shorter; the 15 peer start-ups of each
    # all-to-all are the same in both, so the exposed time shrinks by a little less
    base = ["simulate", "-m", "qwen3-30b-a3b", "-c", "dgx-h100", "-n", "16", "--ep", "16",
            "--global-batch", "64", "--no-ep-comm-overlap", "--json"]
    off = json.loads(run(*base, "--no-ep-dispatch-dedup").stdout)
    on = json.loads(run(*base, "--ep-dispatch-dedup").stdout)
    assert on["config"]["ep_dispatch_dedup"] is True and off["config"]["ep_dispatch_dedup"] is False
    ratio = off["time_breakdown_s"]["ep_comm_exposed_s"] / on["time_breakdown_s"]["ep_comm_exposed_s"]
    assert 3.0 < ratio < 4.02


def test_json_and_csv_together_is_the_same_one_line_error_in_every_command():
    # plan named the field --json; serve plan and the validate commands said 'usage'
    want = "error: --json: give --json or --csv, not both (drop one of the two)"
    for args in (["plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "8", "--global-batch", "8"],
                 ["serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8"],
                 ["validate", "published"], ["validate", "serving"], ["validate", "heterogeneous"]):
        line = assert_one_line_error(run(*args, "--json", "--csv"))
        assert line == want, (args, line)


def test_hardware_show_lists_every_fitted_factor_with_its_value():
    """fitted_factors names cpu_issue_s, the host's per-kernel issue time fitted jointly over
    Ampere, Hopper and Blackwell (56.2 us, hardware_specs/efficiency/hopper.yaml); the table and the
    JSON now show its value, as they show kernel_overhead_s (20 us after the refit f7c1ee2, was 25.2 us;
    hardware_specs/efficiency/hopper.yaml kernel_overhead_s: 2.0e-05)."""
    data = json.loads(run("hardware", "show", "dgx-h100", "--json").stdout)["efficiency"]
    assert "cpu_issue_s" in data["fitted_factors"]
    assert data["cpu_issue_s"] == pytest.approx(56.2e-6) and data["kernel_overhead_s"] == pytest.approx(20e-6)
    table = run("hardware", "show", "dgx-h100").stdout
    assert re.search(r"cpu_issue_s\s+5\.62e-05", table)


def _fifo_with_unblocker(tmp_path, *paths):
    """A FIFO (or one at each of ``paths``), and a stop function for a thread that opens their
    write ends (and closes them at once) whenever a reader waits on one: a command that wrongly
    opens a FIFO gets an empty file and fails the test instead of blocking it for ever."""
    import errno
    import threading
    import time

    fifos = [Path(p) for p in paths] or [tmp_path / "spec.fifo"]
    for fifo in fifos:
        os.mkfifo(fifo)
    stop = threading.Event()

    def unblock():
        while not stop.is_set():
            for fifo in fifos:
                try:
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                except OSError as exc:
                    if exc.errno != errno.ENXIO:     # ENXIO: no reader yet
                        raise
            time.sleep(0.05)

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()

    def done():
        stop.set()
        thread.join()
    return fifos[0], done


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("args, field", [
    # `sweep FIFO` and `validate serving FIFO` blocked on open (and /dev/zero read until memory ran
    # out): neither loader checked for a regular file, as every other file option does
    (["sweep", "{fifo}", "--out", "{tmp}/out", "--local"], "error: spec: "),
    (["validate", "serving", "{fifo}"], "error: path: "),
])
def test_a_fifo_or_device_as_an_input_file_is_one_line_not_a_hang(tmp_path, args, field):
    fifo, done = _fifo_with_unblocker(tmp_path)
    try:
        for path in (fifo, "/dev/zero"):
            line = assert_one_line_error(run(*[a.format(fifo=path, tmp=tmp_path) for a in args]))
            assert line.startswith(field), line
            assert str(path) in line
    finally:
        done()
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("args, field", [
    (["serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8", "--out", "{out}"], "--out"),
    (["validate", "heterogeneous", "--out", "{out}"], "--out"),
    (SIM + ["-n", "16", "--pp", "2", "--global-batch", "16", "--trace", "{out}"], "--trace"),
])
def test_an_output_that_is_a_fifo_or_device_is_refused_not_replaced(tmp_path, args, field):
    # the atomic writer renamed its temp file over whatever the path named: a FIFO became a regular
    # file, and as root `--out /dev/full` replaced the device node itself
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    link = tmp_path / "to-null"
    link.symlink_to(os.devnull)
    for out in (fifo, link):
        line = assert_one_line_error(run(*[a.format(out=out) for a in args]))
        assert line.startswith(f"error: {field}: {out} is not a regular file"), line
    assert fifo.is_fifo() and link.is_symlink() and Path(os.devnull).is_char_device()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.fifo", "to-null"]    # no temp file left


@pytest.mark.parametrize("args, field", [
    (["serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--tp", "1", "--batch", "8", "--out", "-"], "--out"),
    (["validate", "heterogeneous", "--json", "--out", "-"], "--out"),
    (SIM + ["-n", "16", "--pp", "2", "--global-batch", "16", "--trace", "-"], "--trace"),
])
def test_a_dash_output_is_refused_not_written_as_a_file_named_dash(tmp_path, monkeypatch, args, field):
    # `--out -` (standard output to many tools) wrote a file named '-' in the working folder
    monkeypatch.chdir(tmp_path)
    assert_one_line_error(run(*args), f"error: {field}: '-' is not standard output here: it would write a file "
                                      "named '-' (give a file name, or leave the option out to print to the terminal)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_a_hardware_folder_is_not_a_catalog_entry(tmp_path):
    # `hardware list` and `hardware stacks` blocked for ever on a FIFO named *.yaml in a
    # PARAPLAN_HARDWARE_PATH folder: the listing took every *.yaml name, the model catalog only files
    for kind in ("gpus", "clusters", "stacks"):
        (tmp_path / kind).mkdir()
    fifos = [tmp_path / kind / "fifo-entry.yaml" for kind in ("gpus", "clusters", "stacks")]
    _, done = _fifo_with_unblocker(tmp_path, *fifos)
    env = {"PARAPLAN_HARDWARE_PATH": str(tmp_path)}
    try:
        for args in (["hardware", "list", "--json"], ["hardware", "stacks", "--json"]):
            result = run(*args, env=env)
            assert result.exit_code == 0, result.output
            assert "fifo-entry" not in result.stdout
        assert_one_line_error(run("hardware", "show", "fifo-entry", env=env),
                              "error: NAME: unknown GPU or cluster 'fifo-entry'")
    finally:
        done()


@pytest.mark.parametrize("command", ["published", "serving", "heterogeneous"])
@pytest.mark.parametrize("limit", ["nan", "inf"])
def test_validate_fail_above_refuses_a_limit_that_can_never_trip(command, limit):
    # FloatRange(min=0) let NaN through: `validate heterogeneous --fail-above nan` exited 0 with no
    # 'regression:' line (a mean is never above NaN), a CI gate silently off; inf likewise never trips
    line = assert_one_line_error(run("validate", command, "--fail-above", limit))
    assert line.startswith(f"error: --fail-above: must be a finite percentage, got {limit}"), line


@pytest.mark.parametrize("value", ["nan", "inf", "1e400"])
@pytest.mark.parametrize("args, field", [
    (["plot", "breakdown", "--field", "pp", "--values", "1,2,{v}"], "pp"),
    (["plot", "scaling", "--values", "{v},64"], "gpus"),
])
def test_plot_values_not_an_integer_are_one_line_not_an_internal_error(tmp_path, value, args, field):
    # api.coerce_value took float('nan') / float('inf') for an integer field and called int() on it:
    # exit 1, 'error: internal: ValueError: cannot convert float NaN to integer'
    out = tmp_path / "p.png"
    line = assert_one_line_error(run(*[a.format(v=value) for a in args], "-m", "llama3-8b", "-c", "dgx-h100",
                                     "-n", "64", "--global-batch", "512", "-o", out))
    assert line.startswith(f"error: {field}: expected an integer, got '{value}'"), line
    assert not out.exists()


@pytest.mark.parametrize("field, value, says", [
    ("scaleout_gbit_per_s", "0", "must be > 0, got 0.0"),
    ("scaleout_gbit_per_s", "1e30", "1e+30 is above the plausible maximum 8e+12"),
    ("scaleup_gbit_per_s", "-1", "must be > 0, got -1.0"),
    ("scaleup_gbit_per_s", "1e-9", "1e-09 is below the plausible minimum 8e-06"),
    ("gpus", "1e30", "1,000,000,000,000,000,000,000,000,000,000 is above the largest supported value 16,777,216"),
    ("seq_len", "1e30", "is above the largest supported value 1,073,741,824"),
    ("global_batch_tokens", "1e30", "is above the largest supported value 9,007,199,254,740,992"),
    ("tp", "1e30", "is above the largest supported value 16,777,216"),
])
def test_plot_names_the_swept_field_in_its_own_units(tmp_path, field, value, says):
    # 'error: network.infiniband.bw_bytes_per_s: must be > 0, got 0.0' for --field
    # scaleout_gbit_per_s --values 100,0, and '1.25e+38 ... above the plausible maximum 1e+21' in
    # bytes/s for 1e30 Gb/s; gpus, seq_len and global_batch_tokens were named dp, model.seq_len and
    # global_batch, tp 1e30 as '16 GPUs do not divide by tp*pp*cp = 1e30'
    out = tmp_path / "p.png"
    first = "524288" if field == "global_batch_tokens" else "1"
    line = assert_one_line_error(run("plot", "breakdown", "--field", field, "--values", f"{first},{value}", "-m",
                                     "llama3-8b", "-c", "dgx-h100", "-n", "16", "--global-batch", "64", "-o", out))
    assert line.startswith(f"error: {field}: ") and says in line, line
    assert not out.exists()


def test_validate_published_skips_a_row_whose_scaleout_bandwidth_is_invalid(small_runs_csv, tmp_path):
    # one row with scaleout_gbps_per_gpu 0 (or -4, 1e-30) ended the whole run: exit 2 with
    # 'error: network.infiniband.bw_bytes_per_s: must be > 0', where every other bad cell of a row
    # (gpus_per_node 0, inf, ...) skips that row with its reason
    df = pd.read_csv(small_runs_csv)
    df["scaleout_gbps_per_gpu"] = df["scaleout_gbps_per_gpu"].astype(object)
    df.loc[0, "scaleout_gbps_per_gpu"] = "0"
    df.loc[1, "scaleout_gbps_per_gpu"] = "1e-30"
    path = tmp_path / "bad-scaleout.csv"
    df.to_csv(path, index=False)
    result = run("validate", "published", path, "--json")
    assert result.exit_code == 0, result.output
    rows = {r["id"]: r for r in json.loads(result.stdout)}
    for i in (0, 1):
        row = rows[df.loc[i, "id"]]
        assert row["status"] == "skipped"
        assert row["reason"].startswith("cluster invalid (gpus_per_node / scaleout_gbps_per_gpu): "), row["reason"]
    assert rows[df.loc[2, "id"]]["status"] == "ok"


def test_a_library_warning_is_one_warning_line_not_pythons_format(monkeypatch):
    # `plot memory ... --title $'a\x01b'` printed matplotlib's UserWarning in Python's format:
    # '/.../paraplan/commands/plot.py:154: UserWarning: Glyph 1 () missing from font(s) ...' and
    # then the source line 'atomic_output_path(out, lambda tmp: fig.savefig(...))'
    import warnings

    import paraplan.commands.models as models_cmd

    def warning_list():
        warnings.warn("a library's\nwarning", UserWarning)
        return ["llama3-8b"]

    monkeypatch.setattr(models_cmd, "list_models", warning_list)
    result = run("models", "list")
    assert result.exit_code == 0, result.output
    assert result.stderr == "warning: a library's warning\n"
    assert warnings.showwarning is not None and "paraplan" not in getattr(warnings.showwarning, "__module__", "")


def test_a_pipeline_flush_too_large_to_build_is_refused_in_a_line_not_minutes(tmp_path):
    """ZB-H2 over 256 stages is 3 x 256 x min(m, 6 x 256) = 1,179,648 operations, built one by one
    in Python (about 30,000 a second): it was minutes and gigabytes; now one line, exit 2, at
    once. 128 stages (294,912 operations) are still simulated; the planner does not search the
    ones over the limit (rule ``flush_size``)."""
    import time
    from simulator.pipeline.makespan import flush_ops, flush_within_limit
    assert int(flush_ops("zb-h2", 256, 2048, 1)) == 3 * 256 * 6 * 256 == 1_179_648
    assert int(flush_ops("zb-h2", 128, 2048, 1)) == 294_912 and bool(flush_within_limit("zb-h2", 128, 2048, 1))
    assert int(flush_ops("interleaved", 1024, 2048, 2)) == 3 * 1024 * 2 * 2048
    assert not bool(flush_within_limit("interleaved", 1024, 2048, 2))
    assert bool(flush_within_limit("1f1b", 1024, 10**6, 1)) and bool(flush_within_limit("gpipe", 10**4, 10**6, 1))
    preset = Path(__file__).resolve().parents[1] / "model_specs" / "presets" / "llama3-8b.yaml"
    deep = tmp_path / "deep.yaml"
    deep.write_text(re.sub(r"(?m)^num_layers: .*$", "num_layers: 1024", preset.read_text()))
    start = time.monotonic()
    r = run("simulate", "--model", deep, "--cluster", "dgx-h100", "--gpus", 256, "--pp", 256, "--schedule", "zb-h2",
            "--global-batch", 2048, "--seq-len", 1024)
    assert r.exit_code == 2 and time.monotonic() - start < 30
    assert re.fullmatch(r"error: pp: a zb-h2 flush over 256 stages is 1,179,648 operations to build, more than the "
                        r"300,000 the step model builds in seconds \(use fewer pipeline stages .*1f1b / interleaved "
                        r"schedule\)\n", r.output)
    from planners.search_space import RULES
    assert "flush_size" in RULES


def test_plan_json_prices_the_model_file_it_was_given_not_a_preset_of_its_name(tmp_path):
    # --json looked the model up again by its name: a file named after no preset was refused, one
    # named after a preset got the preset's stage layout (32 layers for a 12-layer llama3-8b)
    own = tmp_path / "own.yaml"
    own.write_text("name: myllama\nnum_layers: 2\nhidden_size: 256\nnum_heads: 4\nffn_hidden_size: 1024\n"
                   "vocab_size: 1000\nseq_len: 128\n")
    out = run("plan", "-m", own, "-c", "dgx-h100", "-n", 8, "--global-batch", 8, "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["request"]["model"] == "myllama"
    layers = data["stage_layers"]
    assert layers and layers[0][0] == 0 and layers[-1][1] == 2
    preset = Path(__file__).resolve().parents[1] / "model_specs" / "presets" / "llama3-8b.yaml"
    short = tmp_path / "short.yaml"
    short.write_text(re.sub(r"(?m)^num_layers:.*$", "num_layers: 12", preset.read_text()))
    out = run("plan", "-m", short, "-c", "dgx-h100", "-n", 8, "--global-batch", 8, "--pp", 2, "--json")
    assert out.exit_code == 0, out.output
    stages = json.loads(out.stdout)["stage_layers"]
    assert stages[0][0] == 0 and stages[-1][1] == 12
