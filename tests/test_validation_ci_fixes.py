"""The "CI regression of predicted vs measured" use case: ``validate serving`` / ``published`` /
``measured`` as a CI gate over a user's CSV (a row's model, the machine-readable outputs, the
assumptions a prediction rests on)."""
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from paraplan.cli import main

#: one measured AIConfigurator row (serving_runs.csv): Qwen3-32B on GB200, TensorRT-LLM 1.3.0rc1, tp 2
QWEN_ROW = {"id": "r", "backend": "trtllm", "backend_version": "1.3.0rc1", "model_path": "Qwen/Qwen3-32B",
            "system": "gb200", "mode": "agg", "isl": 2000, "osl": 500, "batch_size": 1, "tp_size": 2,
            "pp_size": 1, "attention_dp_size": 0, "moe_tp_size": 0, "moe_ep_size": 0,
            "silicon_ttft_ms": 102.757, "silicon_tpot_ms": 8.0697}
#: Qwen3-32B's Hugging Face config.json (Qwen/Qwen3-32B on the Hub: 64 layers, hidden 5120)
QWEN_CONFIG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 5120,
               "intermediate_size": 25600, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
               "num_hidden_layers": 64, "vocab_size": 151936, "max_position_embeddings": 40960,
               "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "bfloat16"}


def _serving_csv(path: Path, *rows: dict) -> Path:
    pd.DataFrame([{**QWEN_ROW, **r} for r in rows]).to_csv(path, index=False)
    return path


def _serving_json(csv: Path, *args) -> list[dict]:
    res = CliRunner().invoke(main, ["validate", "serving", str(csv), "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _by_id(rows: list[dict]) -> dict[str, dict]:
    return {(r["id"], r["metric"]): r for r in rows}


def test_a_model_path_to_a_config_json_is_that_file_whatever_the_working_directory_holds(tmp_path, monkeypatch):
    # the working directory holds a config.json (a checkpoint folder, a CI checkout) and a folder
    # named as the preset; neither may stand in for a row's model, nor abort the run
    cwd = tmp_path / "cwd"
    (cwd / "qwen3-32b").mkdir(parents=True)
    (cwd / "config.json").write_text(json.dumps(QWEN_CONFIG))
    (cwd / "qwen3-32b" / "config.json").write_text(json.dumps({**QWEN_CONFIG, "num_hidden_layers": 2}))
    mine = tmp_path / "ckpt"
    mine.mkdir()
    (mine / "config.json").write_text(json.dumps(QWEN_CONFIG))
    csv = _serving_csv(tmp_path / "runs.csv", {"id": "preset"}, {"id": "file", "model_path": str(mine / "config.json")},
                       {"id": "folder", "model_path": str(mine)},
                       {"id": "missing", "model_path": str(tmp_path / "nowhere" / "config.json")},
                       {"id": "damaged", "model_path": str(tmp_path / "runs.csv")})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    clean = _by_id(_serving_json(csv))
    monkeypatch.chdir(cwd)
    got = _by_id(_serving_json(csv))
    for rid in ("preset", "file", "folder"):
        for metric in ("ttft_ms", "tpot_ms"):
            assert got[rid, metric]["status"] == "ok", got[rid, metric]
            # the preset id is the 64-layer preset, not the 2-layer folder of its name in the cwd;
            # the file is the Hub's config of the same model: the same prediction
            assert got[rid, metric]["predicted"] == clean[rid, metric]["predicted"]
            assert got[rid, metric]["predicted"] == pytest.approx(clean["preset", metric]["predicted"], rel=1e-9)
    for rid in ("missing", "damaged"):
        assert got[rid, "ttft_ms"]["status"] == "skipped"
        assert got[rid, "ttft_ms"]["reason"].startswith("model_path "), got[rid, "ttft_ms"]["reason"]


def test_validate_serving_json_and_csv_carry_the_assumption_each_predicted_row_rests_on(tmp_path):
    # a row without backend_version is priced on the framework's newest stack: the text table
    # says so, and so must the machine-readable rows (a CI job reads those, not the table)
    csv = _serving_csv(tmp_path / "runs.csv", {"id": "stated"}, {"id": "unstated", "backend_version": ""},
                       {"id": "skipped", "model_path": "acme/secret-13b", "backend_version": ""})
    rows = _serving_json(csv)
    assert list(rows[0]) == ["id", "metric", "status", "predicted", "measured", "rel_error", "reason", "assumptions"]
    got = {r["id"]: r["assumptions"] for r in rows}
    assert got["stated"] is None and got["skipped"] is None
    assert got["unstated"] == "backend_version empty: the framework's newest serving stack"
    res = CliRunner().invoke(main, ["validate", "serving", str(csv), "--csv"])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(__import__("io").StringIO(res.stdout), dtype=str, keep_default_na=False)
    assert list(table.columns)[-1] == "assumptions"
    assert set(table[table.id == "unstated"].assumptions) == {"backend_version empty: the framework's newest serving stack"}
    assert set(table[table.id != "unstated"].assumptions) == {""}
    help_text = CliRunner().invoke(main, ["validate", "serving", "--help"]).output
    assert "assumptions" in help_text


# --- validate measured: what the predictions assumed, a subset of layouts, a CI gate -------------

MEASURED_PROFILE = Path(__file__).parent / "data" / "measured_calibration.yaml"   # name: measured-calibration


@pytest.fixture
def measured_without_torch_runs(monkeypatch):
    """``validate measured`` with every run replaced: each layout 'measures' 0.2 s a step in fp32 on
    the CPU, and the simulator predicts 0.3 s (rel_error +50%); the layouts asked are recorded."""
    pytest.importorskip("torch")
    from dataclasses import asdict
    from types import SimpleNamespace

    import paraplan.measure.compare as compare
    import paraplan.measure.train as train
    asked = []

    def fake_run(cfg, progress=None):
        asked.append(cfg["name"])
        run = asdict(train.RunConfig(**cfg))
        return {**run, "device": "cpu", "dtype": "fp32", "measured_step_s": 0.2, "step_times_s": [0.2] * run["steps"],
                "tokens_per_s": run["global_batch"] * run["seq_len"] / 0.2, "peak_memory_bytes": 2**20,
                "baseline_memory_bytes": 0, "cpu_wait_fraction": 0.0, "foreign_load": 0.0,
                "phase_s": {"forward_backward_s": 0.15, "grad_reduce_s": 0.0, "optimizer_s": 0.05}}
    monkeypatch.setattr(train, "run_measurement", fake_run)
    monkeypatch.setattr(compare, "predict", lambda run, cluster, dtype: SimpleNamespace(
        step_time_s=0.3, memory_bytes=2**20, time_breakdown_s={}))
    return asked


def _measured(*args):
    return CliRunner().invoke(main, ["validate", "measured", str(MEASURED_PROFILE), "--rounds", "1", *args])


def test_validate_measured_says_which_profile_dtype_device_and_model_its_predictions_assumed(
        measured_without_torch_runs, tmp_path):
    res = _measured("--layout", "dp2", "--layout", "single")
    assert res.exit_code == 0, res.output
    # the default CPU GPT (compare.DEFAULT_MODEL): 4 layers, hidden 256, 128 tokens, vocabulary 1024
    assert res.stdout.splitlines()[0] == ("predicted on hardware profile measured-calibration, fp32 on cpu; "
                                          "GPT of 4 layers, hidden 256, seq_len 128 tokens, vocab 1024")
    out = tmp_path / "m.csv"
    assert _measured("--layout", "dp2", "--csv", "--out", str(out)).exit_code == 0
    row = pd.read_csv(out).iloc[0]
    assert {k: row[k] for k in ("hardware_profile", "dtype", "device", "num_layers", "hidden_size", "seq_len_tokens",
                                "vocab_size")} == {"hardware_profile": "measured-calibration", "dtype": "fp32",
                                                   "device": "cpu", "num_layers": 4, "hidden_size": 256,
                                                   "seq_len_tokens": 128, "vocab_size": 1024}


def test_validate_measured_runs_the_layouts_named_and_gates_on_their_mean_step_time_error(measured_without_torch_runs):
    asked = measured_without_torch_runs
    # (0.3 - 0.2) / 0.2 = +50% on every layout: the mean |error| is 50%
    res = _measured("--layout", "tp2", "--layout", "single", "--fail-above", "49")
    assert asked == ["tp2", "single"]
    assert res.exit_code == 1, res.output
    assert res.stderr.strip().splitlines()[-1] == (
        "regression: step time: mean |error| 50.00% over 2 rows is above --fail-above 49%")
    assert _measured("--layout", "tp2", "--fail-above", "51").exit_code == 0
    bad = _measured("--layout", "tp3")
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines()[-1] == (
        "error: --layout: unknown layout 'tp3' (known: single, single-mb1x4, single-recompute, dp2, dp2-mb1x2, "
        "dp2-zero1, tp2, tp2-recompute, pp2-mb1x4, pp2-mb2x4)")
    assert "--fail-above" in CliRunner().invoke(main, ["validate", "measured", "--help"]).output


# --- validate published: a megatron-core row without its version --------------------------------

def test_a_megatron_core_row_without_a_version_is_predicted_on_the_default_profile_as_one_without_a_framework(tmp_path):
    # README: framework_version empty = not known. A row that names megatron-core but not the
    # release was skipped ("needs a version") while a row naming no framework at all ran on the
    # default training stack, megatron-core (catalog DEFAULT_TRAINING_STACK): the same profile
    from paraplan.validation.datasets import BUNDLED_DIR, PUBLISHED_RUNS
    from paraplan.validation.published import read_runs, validate_rows
    df = pd.read_csv(BUNDLED_DIR / PUBLISHED_RUNS, dtype=str, keep_default_na=False)
    # its precision stated: the 2024 release's preset for this benchmark (megatron-core-0.12) is
    # not the default profile's, so the row must say it ran bf16 for either profile to price it
    row = df[df.run_id == "MEG24-H100-1.7B"].iloc[[0]].assign(dtype_norm="bf16", dtype="bf16")
    unstated = row.assign(id="unstated", framework_version="")
    silent = row.assign(id="silent", framework="", framework_version="")
    path = tmp_path / "runs.csv"
    pd.concat([unstated, silent]).to_csv(path, index=False)
    got = {r["id"]: r for r in validate_rows(read_runs(path)).to_dict("records")}
    assert got["unstated"]["status"] == "ok", got["unstated"]["reason"]
    assert got["unstated"]["predicted"] == got["silent"]["predicted"]
    assert "stack=megatron-core (megatron-core version not stated)" in got["unstated"]["assumptions"]


def test_validate_published_help_says_what_source_is_and_how_source_matches():
    # published.source_of: the run_id's text before its first '-'; --source: str.startswith
    text = " ".join(CliRunner().invoke(main, ["validate", "published", "--help"]).output.split())
    assert "source (the run_id's text before its first '-'" in text
    assert "plain case-sensitive text prefix" in text and "KOR22-T5 only those" in text
