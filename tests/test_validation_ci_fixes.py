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
