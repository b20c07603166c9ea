"""``paraplan serve simulate|plan`` and ``paraplan validate serving``: outputs and one-line errors."""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from paraplan.cli import main

SIM = ["serve", "simulate", "--model", "llama3.1-70b", "--system", "dgx-h100", "--backend", "vllm"]
PLAN = ["serve", "plan", "--model", "llama3.1-8b", "--system", "dgx-h100", "--gpus", "8", "--isl", "1024",
        "--osl", "256", "--ttft-ms", "2000", "--tpot-ms", "40"]


@pytest.fixture(autouse=True)
def _no_debug_env(monkeypatch):
    monkeypatch.delenv("PARAPLAN_DEBUG", raising=False)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _memoized_run(*request):
    """``run(*request, *extra)``, each ``extra`` (no output files) run once: the tests of a module
    that read the same search's table, JSON or CSV share one run of each."""
    results = {}

    def planned_run(*extra):
        if extra not in results:
            results[extra] = run(*request, *extra)
        return results[extra]
    return planned_run


@pytest.fixture(scope="module")
def planned():
    """The llama3.1-8b search ``PLAN`` six tests read (9 runs of about 0.18 s, now 3)."""
    return _memoized_run(*PLAN)


#: DeepSeek-R1 on 64 B200 at a 30 ms TPOT: the request whose front two tests cut with --top
R1_PLAN = ("serve", "plan", "-m", "deepseek-r1", "-s", "dgx-b200", "-n", 64, "--tpot-ms", 30)


@pytest.fixture(scope="module")
def r1_planned():
    """``R1_PLAN``: two tests read its ``--top 2`` table (a run is about 1.3 s)."""
    return _memoized_run(*R1_PLAN)


def one_line_error(result, *needles):
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_simulate_prints_latency_throughput_memory_and_why():
    r = run(*SIM, "--tp", "4", "--batch", "32", "--isl", "2048", "--osl", "512")
    assert r.exit_code == 0, r.output
    for needle in ("ttft_ms", "ttft_p90_ms", "tpot_ms", "tokens_per_s_per_gpu", "max_batch_per_rank", "kv_pool", "why:"):
        assert needle in r.stdout


def test_simulate_json_is_consistent():
    r = run(*SIM, "--tp", "4", "--batch", "32", "--json")
    d = json.loads(r.stdout)
    assert d["mode"] == "agg" and d["layout"]["tp"] == 4 and d["gpus"] == 4
    assert d["latency_ms"] == pytest.approx(d["ttft_ms"] + 1023 * d["tpot_ms"])
    assert d["tokens_per_s_per_user"] == pytest.approx(1e3 / d["tpot_ms"])
    # latencies in ms, as serve plan reports them; no seconds key is left
    assert not [k for k in d if k.endswith("_s")]
    # TPOT = decode step / (1 - share x (b - 1) / b): the other 31 clients' prompts stretch it
    assert sum(d["decode_breakdown_ms"].values()) == pytest.approx(
        d["tpot_ms"] * (1 - d["prefill_share_fraction"] * 31 / 32), rel=1e-9)
    # the share is named with its unit (a fraction; the table shows it as prefill_share_pct)
    assert "prefill_share" not in d and 0.0 < d["prefill_share_fraction"] < 1.0
    assert d["max_batch_per_rank"] >= 32 and d["fits"] is True


def test_a_dense_models_json_has_no_expert_split_and_an_moe_models_keeps_its_own():
    """A dense model has no routed experts: serve simulate --json printed layout moe_tp = tp,
    moe_ep = 1 and an expert_format, values no option could change. They are null (keys kept, so
    dense and MoE reports share one shape); an MoE deployment's are the split and format given."""
    dense = json.loads(run(*SIM, "--tp", "4", "--batch", "16", "--isl", "1024", "--osl", "512", "--json").stdout)
    assert dense["expert_format"] is None and dense["dense_format"] == "fp8"
    assert dense["layout"] == {"tp": 4, "pp": 1, "adp": 1, "moe_tp": None, "moe_ep": None, "batch": 16}
    disagg = json.loads(run(*SIM, "--mode", "disagg", "--prefill-tp", "2", "--decode-tp", "4", "--json").stdout)
    for side in ("prefill", "decode"):
        assert disagg[side]["moe_tp"] is None and disagg[side]["moe_ep"] is None, side
    moe = json.loads(run("serve", "simulate", "-m", "qwen3-235b-a22b", "-s", "hgx-h200", "-b", "sglang",
                         "--precision", "bf16", "--expert-precision", "fp8", "--tp", "2", "--adp", "4",
                         "--moe-tp", "2", "--moe-ep", "4", "--batch", "16", "--json").stdout)
    assert (moe["dense_format"], moe["expert_format"]) == ("bf16", "fp8")
    assert moe["layout"] == {"tp": 2, "pp": 1, "adp": 4, "moe_tp": 2, "moe_ep": 4, "batch": 16}


def test_a_dense_models_plan_leaves_the_expert_columns_empty_and_an_moe_plan_fills_them(planned):
    """serve plan --json: null expert fields for a dense model (request, best, every front row);
    --csv: the same header for every model, the dense model's expert columns empty. An MoE
    model's rows carry their real splits: moe_tp x moe_ep spans the worker's tp x adp GPUs."""
    expert_cols = [f"{side}{k}" for side in ("", "prefill_", "decode_") for k in ("moe_tp", "moe_ep")]
    dense = json.loads(planned("--json").stdout)
    assert dense["request"]["expert_format"] is None
    for row in [dense["best"]] + dense["front"]:
        assert all(row[c] is None for c in expert_cols), row
        assert row["tp"] is not None or row["decode_tp"] is not None     # the other degrees stay
    csv = pd.read_csv(io.StringIO(planned("--csv").stdout))
    assert set(expert_cols) <= set(csv.columns) and csv[expert_cols].isna().all().all()
    assert csv.loc[csv["mode"] == "agg", "tp"].notna().all()
    moe_plan = ["serve", "plan", "-m", "qwen3-235b-a22b", "-s", "hgx-h200", "-n", "8", "--isl", "1024", "--osl", "256",
                "--ttft-ms", "2000", "--tpot-ms", "40"]
    moe = json.loads(run(*moe_plan, "--json").stdout)
    assert moe["request"]["expert_format"] == moe["request"]["dense_format"] == "fp8"
    for row in [moe["best"]] + moe["front"]:
        sides = ("",) if row["mode"] == "agg" else ("prefill_", "decode_")
        for side in sides:
            assert row[f"{side}moe_tp"] * row[f"{side}moe_ep"] == row[f"{side}tp"] * row[f"{side}adp"], row
    assert any(r["mode"] == "agg" and r["moe_ep"] > 1 for r in moe["front"])     # a real split, not the default
    moe_csv = pd.read_csv(io.StringIO(run(*moe_plan, "--csv").stdout))
    assert list(moe_csv.columns) == list(csv.columns)
    agg = moe_csv[moe_csv["mode"] == "agg"]
    assert (agg["moe_tp"] * agg["moe_ep"] == agg["tp"] * agg["adp"]).all()


def test_simulate_disaggregated():
    r = run("serve", "simulate", "--model", "deepseek-r1", "--system", "gb200-nvl72", "--backend", "trtllm",
            "--precision", "nvfp4", "--mode", "disagg", "--prefill-adp", "4", "--prefill-moe-ep", "4",
            "--prefill-workers", "2", "--decode-adp", "16", "--decode-moe-ep", "16", "--decode-batch", "32", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["mode"] == "disagg" and d["gpus"] == 24 and d["concurrency"] == 512
    assert d["kv_transfer_ms"] > 0
    # the prefill workers' utilisation is named with its unit (a fraction; the table: _pct)
    assert "prefill_utilization" not in d and 0.0 < d["prefill_utilization_fraction"] <= 1.0
    text = run("serve", "simulate", "--model", "deepseek-r1", "--system", "gb200-nvl72", "--backend", "trtllm",
               "--precision", "nvfp4", "--mode", "disagg", "--prefill-adp", "4", "--prefill-moe-ep", "4",
               "--prefill-workers", "2", "--decode-adp", "16", "--decode-moe-ep", "16", "--decode-batch", "32").stdout
    shown = [ln.split() for ln in text.splitlines() if ln.strip().startswith("prefill_utilization")]
    assert shown and shown[0][0] == "prefill_utilization_pct"
    assert float(shown[0][1]) == pytest.approx(100 * d["prefill_utilization_fraction"], rel=1e-2)


@pytest.mark.parametrize("args, needles", [
    (["--model", "no-such-model"], ["error: model: unknown model 'no-such-model'"]),
    (["--system", "no-such-cluster"], ["error: system: unknown cluster 'no-such-cluster'"]),
    (["--tp", "3"], ["error: --tp: 3 does not divide the 64 attention heads", "use one of"]),
    (["--tp", "4", "--batch", "5000", "--isl", "8192"], ["error: --batch: 5000 requests per rank need", "at most"]),
    (["--adp", "2"], ["error: --adp: attention data parallelism needs a mixture-of-experts model"]),
    # was ignored: the weights stayed in --precision's format (found by fuzz3)
    (["--expert-precision", "mxfp4"], ["error: --expert-precision: ", "is dense: it has no routed experts"]),
    (["--isl", "0"], ["error: --isl:"]),
    (["--batch", "nan"], ["error: --batch:"]),
])
def test_simulate_bad_input_is_one_line_exit_2(args, needles):
    base = list(SIM)
    for flag in ("--model", "--system"):
        if flag in args:
            base[base.index(flag) + 1] = args[args.index(flag) + 1]
            i = args.index(flag)
            args = args[:i] + args[i + 2:]
    one_line_error(run(*base, *args), *needles)


def test_the_serving_files_model_and_system_names_are_accepted():
    """``deepseek-ai/DeepSeek-R1`` on ``b200_sxm`` (serving_runs.csv's spellings) is the same
    deployment as ``deepseek-r1`` on ``dgx-b200``."""
    layout = ["--backend", "trtllm", "--tp", "8", "--batch", "8", "--json"]
    by_file = run("serve", "simulate", "--model", "deepseek-ai/DeepSeek-R1", "--system", "b200_sxm", *layout)
    by_preset = run("serve", "simulate", "--model", "deepseek-r1", "--system", "dgx-b200", *layout)
    assert by_file.exit_code == 0, by_file.output
    a, b = json.loads(by_file.stdout), json.loads(by_preset.stdout)
    assert a["tpot_ms"] == b["tpot_ms"] > 0 and a["ttft_ms"] == b["ttft_ms"] > 0


def test_moe_layout_errors_name_the_field():
    base = ["serve", "simulate", "--model", "deepseek-r1", "--system", "hgx-h200", "--backend", "sglang"]
    one_line_error(run(*base, "--tp", "8", "--moe-ep", "3"), "error: --moe-ep: 3 does not divide tp x adp = 8")
    one_line_error(run(*base, "--tp", "8", "--moe-tp", "2", "--moe-ep", "2"), "error: --moe-ep: moe_tp x moe_ep = 4 must equal")


def test_plan_table_json_csv_and_plot(tmp_path, planned):
    r = planned()
    assert r.exit_code == 0, r.output
    # the model's best is disaggregated (prefill tp1 x4 + decode tp1 x3 at batch 762: 10,088
    # tokens/s/GPU on 7 GPUs, about 579 of each rank's 762 requests decoding at TPOT 24.7 ms, by
    # Little's law) and vLLM runs no disaggregated router: the best line is the best vLLM
    # launches, the aggregated 8 x tp1 (10,070), with the model's best beside it
    assert "best vllm can launch: aggregated" in r.stdout and "why:" in r.stdout and "Pareto front" in r.stdout
    assert "the model's best, which vllm cannot launch as priced" in r.stdout
    j = json.loads(planned("--json").stdout)
    assert j["best"]["tpot_ms"] <= 40 and j["best"]["ttft_ms"] <= 2000
    refused = j["engine_refused_best"]
    assert refused["mode"] == "disagg" and refused["tpot_ms"] <= 40 and refused["ttft_ms"] <= 2000
    assert refused["tokens_per_s_per_gpu"] > j["best"]["tokens_per_s_per_gpu"]
    assert {row["mode"] for row in j["front"]} <= {"agg", "disagg"}
    out = tmp_path / "front.csv"
    png = tmp_path / "front.png"
    r = run(*PLAN, "--csv", "--out", out, "--plot", png)
    assert r.exit_code == 0, r.output
    front = pd.read_csv(out)
    assert {"tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_ms", "tpot_ms", "mode"} <= set(front.columns)
    assert png.stat().st_size > 10_000


def test_plan_json_echoes_the_request_it_answers():
    j = json.loads(run(*PLAN, "--no-pp", "--json").stdout)
    assert j["request"].pop("stack").startswith("vllm-")          # vllm's newest profile, whichever it is
    assert j["request"] == {"model": "llama3.1-8b", "system": "dgx-h100", "gpu": "h100-sxm-80gb", "gpus": 8,
                            "isl": 1024, "osl": 256, "ttft_ms": 2000.0, "tpot_ms": 40.0, "modes": ["agg", "disagg"],
                            "max_batch": 1024, "pipeline_parallel": False, "rank_by": "per-gpu",
                            "dense_format": "fp8", "expert_format": None, "kv_cache_dtype": "auto",
                            "speculative_tokens": 0, "draft_acceptance": None, "draft_acceptance_is_prior": None, "draft_model": None,
                            "tokens_per_step": 1.0}


def test_plan_slo_no_layout_meets_names_the_binding_constraint():
    line = one_line_error(run(*PLAN[:-4], "--ttft-ms", "2000", "--tpot-ms", "0.5"), "error: --tpot-ms: no layout on 8 GPUs reaches TPOT 0.5 ms")
    assert "allow --tpot-ms" in line
    one_line_error(run(*PLAN[:-4], "--ttft-ms", "0.01", "--tpot-ms", "100"), "error: --ttft-ms:", "allow --ttft-ms")


def test_plan_bad_output_folder_fails_before_the_search(tmp_path):
    one_line_error(run(*PLAN, "--csv", "--out", tmp_path / "missing" / "x.csv"), "error: --out: folder")


def test_validate_serving_fail_above_gates_on_ttft_and_tpot_each(tmp_path):
    from paraplan.validation.datasets import SERVING_RUNS, validation_file
    df = pd.read_csv(validation_file(SERVING_RUNS))
    path = tmp_path / "rows.csv"
    df[df.model_path == "openai/gpt-oss-120b"].to_csv(path, index=False)
    records = json.loads(run("validate", "serving", path, "--json").stdout)
    mean = {m: 100 * np.mean([abs(r["rel_error"]) for r in records if r["metric"] == m and r["status"] == "ok"])
            for m in ("ttft_ms", "tpot_ms")}
    assert run("validate", "serving", path, "--fail-above", f"{max(mean.values()) + 0.01:.4f}").exit_code == 0
    between = (mean["ttft_ms"] + mean["tpot_ms"]) / 2        # only the metric whose mean is the larger fails
    r = run("validate", "serving", path, "--fail-above", f"{between:.4f}")
    worse = max(mean, key=mean.get)
    assert r.exit_code == 1 and r.stderr.startswith(f"regression: {worse}: mean |error| {mean[worse]:.2f}%")
    assert ";" not in r.stderr


def test_validate_serving_table_json_and_csv(tmp_path):
    from paraplan.validation.datasets import SERVING_RUNS, validation_file
    df = pd.read_csv(validation_file(SERVING_RUNS))
    small = df[df.model_path.isin(["openai/gpt-oss-120b", "zhipuai/GLM-5"])]
    path = tmp_path / "rows.csv"
    small.to_csv(path, index=False)
    r = run("validate", "serving", path)
    assert r.exit_code == 0, r.output
    assert "per backend and mode" in r.stdout and "disaggregated row without worker counts" in r.stdout
    records = json.loads(run("validate", "serving", path, "--json").stdout)
    assert len(records) == 2 * len(small)
    assert set(records[0]) == {"id", "metric", "status", "predicted", "measured", "rel_error", "reason", "assumptions"}
    assert {r["metric"] for r in records} == {"ttft_ms", "tpot_ms"}
    ok = [r for r in records if r["status"] == "ok"]
    assert ok and all(r["rel_error"] == pytest.approx((r["predicted"] - r["measured"]) / r["measured"]) for r in ok)
    skipped = [r for r in records if r["status"] == "skipped"]
    assert skipped and all(r["reason"] for r in skipped)
    out = tmp_path / "v.csv"
    assert run("validate", "serving", path, "--csv", "--out", out).exit_code == 0
    assert list(pd.read_csv(out).columns) == ["id", "metric", "status", "predicted", "measured", "rel_error", "reason",
                                              "assumptions"]


def test_validate_serving_bad_inputs(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,backend\nx,vllm\n")
    one_line_error(run("validate", "serving", bad), "error: csv: column 'model_path' missing")
    one_line_error(run("validate", "serving", tmp_path / "none.csv"), "error:")
    one_line_error(run("validate", "serving", "--backend", "tgi"), "error: --backend: no row has backend 'tgi'")


def test_a_stack_file_of_ones_own_sets_the_engine_hold_flags(tmp_path):
    # a deployment run with TensorRT-LLM batch_wait_timeout_iters 20 (and a token ratio its
    # batch never reaches) is described by a copy of the catalog stack with context_wait_steps
    # 20, passed as --backend FILE: four clients, so other requests are decoding and the
    # prompt waits 20 decode steps more (1.5 + 20 steps before it joins a batch, not 1.5)
    from pathlib import Path

    import yaml
    src = yaml.safe_load((Path(__file__).resolve().parents[1] / "hardware_specs/stacks/trtllm-1.yaml").read_text())
    src["name"] = "trtllm-1-batch-wait"
    src["serving"]["context_wait_steps"] = {"value": 20, "source": "our launch config: batch_wait_timeout_iters 20"}
    own = tmp_path / "trtllm-batch-wait.yaml"
    own.write_text(yaml.safe_dump(src))
    args = ["serve", "simulate", "-m", "llama3.1-70b", "-s", "dgx-b200", "--tp", "4", "--batch", "4",
            "--precision", "fp8", "--json"]
    base = json.loads(run(*args, "--backend", "trtllm-1").output)
    held = json.loads(run(*args, "--backend", own).output)
    assert held["stack"] == "trtllm-1-batch-wait"
    rise = held["ttft_ms"] - base["ttft_ms"]
    # the decode step is at most the TPOT (TPOT = step / (1 - the other clients' prompt share)), so the 20 steps
    # add at most 20 TPOTs, and at four clients the prompt share is small: most of that
    assert 0.9 * 20 * held["tpot_ms"] < rise <= 20 * held["tpot_ms"]
    # the README gives this example's two TTFTs (it said 242.3 after a refit moved the held one to 242.2;
    # the session-58 refit, Blackwell's decode HBM fraction 0.8536 -> 0.8455, 107.0 -> 242.2 to 107.3 -> 243.1;
    # the session-59 refit, 0.8455 -> 0.8807 and request host 10.26 -> 8.90 ms, 107.3 -> 243.1 to 103.8 -> 238.3)
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    assert f"`context_wait_steps: 20` this prints TTFT {base['ttft_ms']:.1f} -> {held['ttft_ms']:.1f} ms" in readme
    # a bad value in such a file is a one-line error naming the field
    src["serving"]["context_wait_steps"] = {"value": 1.5, "source": "typo"}
    own.write_text(yaml.safe_dump(src))
    one_line_error(run(*args, "--backend", own), "context_wait_steps")
    src["serving"]["context_wait_steps"] = {"value": -1, "source": "typo"}
    own.write_text(yaml.safe_dump(src))
    one_line_error(run(*args, "--backend", own), "context_wait_steps", "whole number of steps")


def test_plan_prints_each_disaggregated_rows_prefill_batch_so_serve_simulate_reproduces_it(planned):
    # the front's disaggregated rows differ by their prefill batch too; a table without it sent a
    # user to serve simulate's default --prefill-batch 1 and another TTFT
    table = planned().stdout.splitlines()
    header = next(ln for ln in table if ln.strip().startswith("mode "))
    assert header.split()[:4] == ["mode", "layout", "batch", "prefill_batch"]
    # the first disaggregated row of the front, e.g. "disagg  P tp1 x4 / D tp1 x3  878  8  7  562 ..."
    cells = next(ln for ln in table if ln.strip().startswith("disagg  P tp")).split()
    p_tp, p_workers = int(cells[2][2:]), int(cells[3][1:])
    d_tp, d_workers = int(cells[6][2:]), int(cells[7][1:])
    batch, prefill_batch, ttft_ms = int(cells[8]), int(cells[9]), float(cells[11])
    assert prefill_batch > 1             # the plan packs prompts: serve simulate's default 1 is another deployment
    # the "why" lines name the best disaggregated layout with its prefill batch, as the best layout or
    # after an aggregated best
    named = (f"disagg prefill tp{p_tp} x{p_workers} ({prefill_batch} prompts per step) + "
             f"decode tp{d_tp} x{d_workers} at batch {batch} per rank")
    # (the best line above may name it too: the model's best, which vllm cannot launch)
    why_lines = table[next(i for i, ln in enumerate(table) if ln.startswith("why: ")):]
    why = next(ln for ln in why_lines if named in ln)
    assert why.startswith("why: " + named) or why.endswith(named)
    front = json.loads(planned("--json").stdout)["front"]
    planned = next(r for r in front if r["mode"] == "disagg" and r["prefill_workers"] == p_workers
                   and r["decode_workers"] == d_workers and r["prefill_tp"] == p_tp and r["decode_tp"] == d_tp
                   and r["batch"] == batch)
    assert planned["prefill_batch"] == prefill_batch
    # the table's TTFT is the same row's (whole milliseconds), not another deployment's
    assert ttft_ms == round(planned["ttft_ms"])
    sim = ["serve", "simulate", "--model", "llama3.1-8b", "--system", "dgx-h100", "--isl", "1024", "--osl", "256",
           "--mode", "disagg", "--prefill-tp", p_tp, "--prefill-workers", p_workers, "--decode-tp", d_tp,
           "--decode-workers", d_workers, "--decode-batch", batch, "--json"]
    got = json.loads(run(*sim, "--prefill-batch", prefill_batch).stdout)
    assert got["ttft_ms"] == pytest.approx(planned["ttft_ms"], rel=1e-9)
    assert got["tpot_ms"] == pytest.approx(planned["tpot_ms"], rel=1e-9)
    default = json.loads(run(*sim).stdout)        # --prefill-batch 1: another deployment
    assert abs(default["ttft_ms"] / planned["ttft_ms"] - 1) > 0.05


def test_kv_cache_dtype_help_says_what_auto_picks_and_the_header_shows_it():
    # auto is not always 16-bit: vllm 0.14 reads an fp8 checkpoint's FP8 KV, 0.11 does not
    help_text = " ".join(run("serve", "simulate", "--help").stdout.split())
    assert "auto = the stack's default, 16-bit" not in help_text
    assert "the 8-bit KV an fp8 / nvfp4 (ModelOpt) checkpoint names" in help_text
    args = ["serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--precision", "fp8"]
    assert "KV 8-bit" in run(*args, "-b", "vllm-0.14").stdout
    assert "KV 16-bit" in run(*args, "-b", "vllm-0.11").stdout
    assert "KV 16-bit" in run(*args, "-b", "vllm-0.14", "--precision", "bf16").stdout


def test_plan_csv_says_whether_its_numbers_rest_on_the_prior(planned):
    # the table and --json said so for a GPU without serving measurements (MI300X); the CSV did not
    prior = pd.read_csv(io.StringIO(run("serve", "plan", "-m", "llama3.1-8b", "-s", "mi300x-node", "-n", "8",
                                        "--csv").stdout))
    fitted = pd.read_csv(io.StringIO(planned("--csv").stdout))
    assert prior["efficiency_fitted"].tolist() == [False] * len(prior) and len(prior) > 0
    assert fitted["efficiency_fitted"].tolist() == [True] * len(fitted) and len(fitted) > 0


def test_serving_json_names_the_prior_as_the_training_json_does(planned):
    # serving JSON said efficiency_is_prior, training JSON efficiency_fitted (its negation); now both
    # say efficiency_fitted: False on MI300X (no serving measurements, default.yaml), True on H100
    prior = ["-m", "llama3.1-8b", "-s", "mi300x-node"]
    sim = json.loads(run("serve", "simulate", *prior, "--json").stdout)
    plan = json.loads(run("serve", "plan", *prior, "-n", "8", "--json").stdout)
    fitted_sim = json.loads(run(*SIM, "--tp", "4", "--batch", "32", "--json").stdout)
    fitted_plan = json.loads(planned("--json").stdout)
    assert sim["efficiency_fitted"] is False and plan["efficiency_fitted"] is False
    assert fitted_sim["efficiency_fitted"] is True and fitted_plan["efficiency_fitted"] is True
    assert not any("efficiency_is_prior" in d for d in (sim, plan, fitted_sim, fitted_plan))


def test_serving_json_counts_are_integers(planned):
    # max_batch_per_rank printed as 911.0 / 658.0; requests are counted in whole numbers. Llama 3.1
    # 70B fp8 on H100 under vLLM 0.14, tp4 (the 16-bit release quantised at load time: a 16-bit KV
    # cache): 53.42 GiB of KV pool / (1024 + 512 tokens x 80 layers x 2 x 2 KV heads per GPU x 128
    # x 2 bytes = 120 MiB) = 455.9 -> 455
    d = json.loads(run(*SIM, "--tp", "4", "--batch", "32", "--json").stdout)
    assert d["max_batch_per_rank"] == 455 and type(d["max_batch_per_rank"]) is int
    assert d["max_batch_per_rank"] == d["memory_bytes"]["kv_pool_bytes"] // (1536 * 80 * 2 * 2 * 128 * 2)
    for key in ("gpus", "concurrency", "workers", "isl", "osl"):
        assert type(d[key]) is int, key
    # (a dense model's expert split is null: no split to count)
    assert all(v is None or type(v) is int for v in d["layout"].values()) and d["layout"]["moe_ep"] is None
    best = json.loads(planned("--json").stdout)["best"]
    assert type(best["max_batch_per_rank"]) is int and best["max_batch_per_rank"] >= best["batch"]
    for key in ("batch", "gpus_used", "concurrency"):
        assert type(best[key]) is int, key
    counts = [k for k in best if k.endswith(("tp", "pp", "adp", "ep", "workers", "batch"))]
    assert all(best[k] is None or type(best[k]) is int for k in counts), {k: best[k] for k in counts}


def test_max_batch_says_when_the_engines_running_request_cap_binds_not_the_kv_cache():
    # DeepSeek-R1 fp8 on B200, tp1-adp16: 102.8 GiB of KV pool holds 2044 requests of 1024 + 512
    # tokens (50.3 MiB each); vLLM 0.14 runs at most max_num_seqs = 1024, which is what bounds
    args = ["serve", "simulate", "-m", "deepseek-r1", "-s", "dgx-b200", "--precision", "fp8", "--tp", "1", "--adp", "16",
            "--moe-tp", "16", "--moe-ep", "1"]
    line = one_line_error(run(*args, "--batch", "100000"), "error: --batch:")
    assert line == ("error: --batch: 100000 requests per rank need 5026.2 GiB of KV cache per GPU; 102.8 GiB is free, "
                    "room for 2044, but vllm-0.14 runs at most 1024 requests at once (max_running_requests) "
                    "(use --batch 1024 or less, or more workers)")
    row = next(ln for ln in run(*args, "--batch", "64").stdout.splitlines() if ln.strip().startswith("max_batch_per_rank"))
    assert row.split()[1] == "1024" and "vllm-0.14's max_running_requests (the KV cache would hold more)" in row
    # where the KV cache binds, the message and the row say so as before
    dense = ["serve", "simulate", "-m", "llama3.1-70b", "-s", "dgx-h100", "--tp", "4", "--kv-cache-dtype", "fp8"]
    assert one_line_error(run(*dense, "--batch", "100000")).endswith("so at most 911 fit (use --batch 911 or less, more tp/pp)")
    row = next(ln for ln in run(*dense).stdout.splitlines() if ln.strip().startswith("max_batch_per_rank"))
    assert row.split()[1] == "911" and row.rstrip().endswith("largest concurrency per rank whose KV cache fits")


@pytest.mark.parametrize("args, line", [
    (["--mode", "disagg", "--tp", "4", "--batch", "16"],
     "error: --tp: sets the aggregated worker; a disaggregated deployment (--mode disagg) has prefill and decode "
     "workers (use --prefill-tp / --decode-tp, or drop --mode disagg)"),
    (["--mode", "disagg", "--batch", "16"],
     "error: --batch: sets the aggregated worker; a disaggregated deployment (--mode disagg) has prefill and decode "
     "workers (use --prefill-batch / --decode-batch, or drop --mode disagg)"),
    (["--tp", "4", "--decode-tp", "8"],
     "error: --decode-tp: sets a disaggregated worker; this deployment is aggregated (--mode agg) "
     "(add --mode disagg, or use --tp)"),
    (["--tp", "4", "--prefill-workers", "3"],
     "error: --prefill-workers: sets a disaggregated worker; this deployment is aggregated (--mode agg) "
     "(add --mode disagg, or use --workers)"),
])
def test_simulate_names_an_option_of_the_other_mode_instead_of_ignoring_it(args, line):
    # --mode disagg --tp 4 --batch 16 ran a tp1 prefill + tp1 decode deployment at decode batch 32 and
    # then failed on --decode-batch, an option the user never gave
    assert one_line_error(run("serve", "simulate", "-m", "llama3.1-70b", "-s", "dgx-h100", *args)) == line
    # the same values on the matching options run
    assert run("serve", "simulate", "-m", "llama3.1-70b", "-s", "dgx-h100", "--tp", "4", "--batch", "16").exit_code == 0


def test_hardware_stacks_json_writes_the_all_reduce_switch_points():
    # a mapping-valued serving behaviour is written as a JSON object, not refused by the encoder
    out = json.loads(run("hardware", "stacks", "vllm-0.14", "--json").stdout)["serving"]
    assert out["oneshot_allreduce_max_bytes"] == {"2.0": 8388608.0, "4.0": 524288.0, "8.0": 262144.0}
    assert out["prefill_token_budget"] == {"0.0": 2048, "70.0": 8192}


def test_the_header_says_when_a_format_runs_weight_only():
    # Hopper has no FP4 tensor cores, Ampere no FP8 ones: the weights are dequantised in the kernel
    # and the GEMMs run in bf16 (cost_models.weight_formats.compute_dtype)
    hopper = run("serve", "simulate", "-m", "deepseek-r1", "-s", "dgx-h100", "--precision", "nvfp4", "--tp", 8).stdout
    assert "(weights nvfp4 weight-only in bf16, experts nvfp4 weight-only in bf16, KV 8-bit)" in hopper
    # (Llama-3.1-70B's 16-bit release quantised at load time keeps its 16-bit KV cache)
    ampere = run(*SIM[:4], "--system", "dgx-a100-80gb", "--tp", 4, "--precision", "fp8").stdout
    assert "(weights fp8 weight-only in bf16, KV 16-bit)" in ampere
    native = run(*SIM, "--tp", 4).stdout            # fp8 on H100: its own tensor cores
    assert "(weights fp8, KV 16-bit)" in native
    plan = run("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-a100-80gb", "-n", 1, "--precision", "fp8").stdout
    # (serve plan's default checkpoint for Llama-3.1-8B fp8 is NVIDIA's FP8 export, whose
    # hf_quant_config.json names an FP8 KV cache, which vLLM reads: simulator/serving/checkpoints.py)
    assert plan.splitlines()[0].endswith("weights fp8 weight-only in bf16, KV 8-bit")


def test_a_request_longer_than_the_models_context_is_refused_by_simulate_and_plan():
    # DeepSeek-R1 config.json max_position_embeddings 163,840 (yarn: 4,096 x 40)
    line = one_line_error(run("serve", "simulate", "-m", "deepseek-r1", "-s", "dgx-b200", "--tp", "8",
                              "--isl", "1000000"), "error: --isl: 1,000,000 prompt + 1,024 output tokens exceed")
    assert "163,840-token context of deepseek-r1" in line and "keep --isl + --osl <= 163,840" in line
    # Qwen3-32B: 40,960; the output pushes it over, so --osl is named
    one_line_error(run("serve", "plan", "-m", "qwen3-32b", "-s", "dgx-b200", "-n", "8", "--isl", "32768",
                       "--osl", "16384"), "error: --osl: 32,768 prompt + 16,384 output tokens exceed the 40,960-token")


def test_one_output_token_and_disaggregation_on_one_gpu_are_refused_with_the_reason():
    """--osl 1 printed TPOT 0.00 ms and 0 tokens/s per user (TPOT is the gap between output
    tokens; one has none), and serve plan took TPOT 0 as meeting any objective. --mode disagg on
    one GPU said the model did not fit (add GPUs or a smaller weight format) when it needs two
    workers; llama3.1-8b fits one H100 aggregated."""
    sim = ["serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--tp", "1", "--batch", "4", "--isl", "1024"]
    one_line_error(run(*sim, "--osl", "1"), "error: --osl: 1 output token has no time per output token (TPOT)",
                   "use --osl 2 or more")
    assert json.loads(run(*sim, "--osl", "2", "--json").stdout)["tpot_ms"] > 0
    plan = ["serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "1", "--isl", "1024", "--osl", "256"]
    one_line_error(run(*plan, "--osl", "1"), "error: --osl:")
    one_line_error(run(*plan, "--mode", "disagg"),
                   "error: --gpus: disaggregated serving needs a prefill and a decode worker, at least 2 GPUs; got 1",
                   "or --mode agg")
    assert json.loads(run(*plan, "--json").stdout)["best"]["mode"] == "agg"


def test_the_context_check_admits_exactly_the_window_and_skips_models_that_do_not_state_one():
    from hardware_specs.errors import InputError
    from model_specs.hf_config import model_from_hf_config
    from simulator.serving.context import ServingContext
    ctx = ServingContext.build("llama3.1-8b", "dgx-h100", "vllm", "bf16")
    assert ctx.model.max_context_tokens == 131072
    ctx.check_request(131072 - 1024, 1024)              # prompt + output = the window: served
    with pytest.raises(InputError, match="--osl"):
        ctx.check_request(131072 - 1024, 1025)
    ServingContext.build("gpt-175b", "dgx-h100", "vllm", "bf16").check_request(10**6, 10**6)    # not stated
    # a Hugging Face config.json carries its window into the spec
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
           "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 32768}
    assert model_from_hf_config(cfg).max_context_tokens == 32768


@pytest.mark.parametrize("mode", ["agg", "disagg"])
def test_plan_prints_the_serve_simulate_command_of_its_best_row_and_it_gives_the_same_numbers(mode):
    """A plan's layout string (``tp1-adp16-etp16xep1``) names the experts' split etp x ep, which
    ``serve simulate`` takes as --moe-tp / --moe-ep: the plan prints the command that runs its best
    row as one deployment, and that command prints the plan's TTFT, TPOT and tokens/s/GPU.
    DeepSeek-R1 on 64 B200 at TPOT <= 30 ms (aggregated and disaggregated winners): each option
    of the command carries the best row's value of the same field, and options equal to 1 (the
    default) are left out."""
    import shlex
    request = ["serve", "plan", "-m", "deepseek-r1", "-s", "dgx-b200", "-n", 64, "--tpot-ms", 30, "--mode", mode]
    text = run(*request, "--top", 1)
    assert text.exit_code == 0, text.output
    line = next(l for l in text.stdout.splitlines() if "as one deployment:" in l)
    command = shlex.split(line.split("as one deployment:", 1)[1])
    assert command[:3] == ["paraplan", "serve", "simulate"]
    best = json.loads(run(*request, "--json").stdout)["best"]
    options = {command[i]: command[i + 1] for i in range(3, len(command) - 1) if command[i].startswith("--")}
    fields = {"agg": {"--tp": "tp", "--adp": "adp", "--moe-tp": "moe_tp", "--moe-ep": "moe_ep", "--batch": "batch",
                      "--workers": "workers"},
              "disagg": {f"--{stage}-{flag}": f"{stage}_{key}" for stage in ("prefill", "decode")
                         for flag, key in (("tp", "tp"), ("adp", "adp"), ("moe-tp", "moe_tp"), ("moe-ep", "moe_ep"))}
              | {"--prefill-batch": "prefill_batch", "--decode-batch": "batch", "--prefill-workers": "prefill_workers",
                 "--decode-workers": "decode_workers"}}[mode]
    for flag, key in fields.items():
        assert int(options.get(flag, 1)) == int(best[key]), (flag, key)
    assert options.get("--mode", "agg") == mode
    sim = run(*command[1:], "--json")
    assert sim.exit_code == 0, sim.output
    got = json.loads(sim.stdout)          # serve simulate --json and serve plan's both in ms
    assert got["ttft_ms"] == pytest.approx(best["ttft_ms"], rel=1e-9)
    assert got["tpot_ms"] == pytest.approx(best["tpot_ms"], rel=1e-9)
    assert got["tokens_per_s_per_gpu"] == pytest.approx(best["tokens_per_s_per_gpu"], rel=1e-9)
    assert got["gpus"] == best["gpus_used"]


def test_plan_top_applies_to_each_mode_of_the_front(r1_planned):
    """The front is printed 'per mode', aggregated rows first: --top 2 cut it after the two
    aggregated rows (of 12) and showed no disaggregated one (12 too) for DeepSeek-R1 on 64 B200."""
    text = r1_planned("--top", 2)
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    head = next(i for i, l in enumerate(lines) if l.split()[:2] == ["mode", "layout"])
    # the table's rows, then the note on the rows --top left out
    modes = [l.split()[0] for l in lines[head + 2:] if l.strip() and not l.lstrip().startswith("(--top")]
    assert modes == ["agg", "agg", "disagg", "disagg"]


def test_plan_table_says_which_front_rows_top_left_out(r1_planned):
    """--top cuts each mode's front at its most interactive end; the table said nothing of it, so
    DeepSeek-R1 on 64 B200 read as a front ending at 93.9 tokens/s/user where --json's went on to
    131.3. The note counts each mode's rows left out and their tokens/s/user range, from --json."""
    front = json.loads(r1_planned("--json").stdout)["front"]
    left = []
    for mode in ("agg", "disagg"):
        users = sorted(r["tokens_per_s_per_user"] for r in front if r["mode"] == mode)
        assert len(users) > 2, mode
        left.append(f"{len(users) - 2} {mode} rows from {users[2]:.1f} to {users[-1]:.1f} tokens/s/user")
    text = r1_planned("--top", 2).stdout
    assert f"(--top 2 rows of each mode; left out: {', '.join(left)}; --top 0 prints them" in text, text
    every = r1_planned("--top", 0).stdout
    lines = every.splitlines()
    head = next(i for i, l in enumerate(lines) if l.split()[:2] == ["mode", "layout"])
    assert len([l for l in lines[head + 2:] if l.split()[:1] in (["agg"], ["disagg"])]) == len(front)
    assert "left out" not in every


def test_simulate_header_names_the_scale_up_fabric_and_counts_gpus_in_the_singular():
    """An MI300X node's 8 GPUs share an Infinity Fabric domain, not an NVLink one; one GPU is
    '1 GPU'."""
    text = run("serve", "simulate", "-m", "llama3.1-8b", "-s", "mi300x-node", "--tp", 1, "--batch", 4).stdout
    assert "(mi300x, 8 GPUs per infinity-fabric domain)" in text and "NVLink" not in text
    assert "tp1 (1 GPU)," in text and "in flight on 1 GPU\n" in text


def test_gpt_oss_is_served_with_its_checkpoints_mxfp4_experts_unless_told_otherwise():
    """gpt-oss-120b ships its routed experts in MXFP4 (config.json quantization_config; 4.25 bits a
    parameter) and famously serves from one 80 GB GPU; the experts defaulted to --precision's fp8
    and the command said 'the weights (109.9 GiB per GPU) leave no room for a KV cache'. By hand:
    36 x 128 experts x 3 x 2880^2 = 114.7 B parameters x 4.25 / 8 bytes = 56.73 GiB, + 0.96 B
    attention parameters in bf16 as released (1.79 GiB) + embedding and LM head 2 x 201088 x 2880
    in bf16 (2.16 GiB) = 60.7 GiB."""
    args = ("serve", "simulate", "-m", "gpt-oss-120b", "-s", "dgx-h100", "--tp", 1, "--batch", 8)
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert "experts mxfp4 weight-only in bf16" in r.stdout
    data = json.loads(run(*args, "--json").stdout)
    assert data["expert_format"] == "mxfp4"
    assert data["dense_format"] == "bf16"          # the released checkpoint's attention, not fp8
    assert data["memory_bytes"]["weights_bytes"] / 2**30 == pytest.approx(60.7, abs=0.1)
    # --precision names every GEMM's format, the experts' too, as before
    one_line_error(run(*args, "--precision", "fp8"), "--tp", "leave no room for a KV cache")


def test_a_disaggregated_deployment_whose_prefill_is_saturated_says_so():
    # one prefill worker for 1,000 decode workers of 600 requests: TTFT is 2.6 hours of queue,
    # printed without a word; the reason now names the saturated prefill side
    from click.testing import CliRunner
    from paraplan.cli import main
    out = CliRunner().invoke(main, ["serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--mode", "disagg",
                                    "--prefill-workers", "1", "--decode-workers", "1000", "--decode-batch", "600"])
    assert out.exit_code == 0, out.output
    assert "the prefill workers are saturated (100% of their capacity)" in out.stdout
    calm = CliRunner().invoke(main, ["serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--mode", "disagg",
                                     "--prefill-workers", "1", "--decode-workers", "1", "--decode-batch", "8"])
    assert calm.exit_code == 0 and "saturated" not in calm.stdout


def test_an_expert_split_on_a_dense_model_is_refused_even_when_it_equals_tp():
    # --moe-tp 4 with --tp 4 changed nothing on a dense model and passed silently (--moe-ep was refused)
    from click.testing import CliRunner
    from paraplan.cli import main
    for args in (["--tp", "4", "--moe-tp", "4"], ["--mode", "disagg", "--decode-moe-ep", "1"]):
        r = CliRunner().invoke(main, ["serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", *args])
        assert r.exit_code == 2 and "is dense: it has no routed experts to split" in r.stderr, r.output


@pytest.mark.parametrize("backend, precision, bits", [("trtllm", "nvfp4", 8), ("vllm", "bf16", 16)])
def test_serve_plan_says_which_kv_cache_it_priced(backend, precision, bits):
    # `--kv-cache-dtype auto` is resolved by the stack and the checkpoint; the plan's header and JSON
    # must say what was priced, as serve simulate's header does: TensorRT-LLM reads the KV dtype of
    # an NVFP4 ModelOpt export, which names an FP8 KV cache (1 byte an element, 8-bit); vLLM's 16-bit
    # release keeps the model's 16-bit KV (2 bytes). Before, the header named only the weights and the
    # JSON echoed "auto"
    args = ["serve", "plan", "-m", "llama3.1-70b", "-s", "dgx-b200", "-n", 8, "-b", backend, "--precision", precision]
    out = run(*args)
    assert out.exit_code == 0, out.output
    assert f"KV {bits}-bit" in out.output.splitlines()[0]
    data = json.loads(run(*args, "--json").output)
    assert data["kv_bytes_per_element"] == bits / 8
    assert data["request"]["kv_cache_dtype"] == "auto"          # the request echoes what was asked
