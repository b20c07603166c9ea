"""What the CLI shows a new user: errors that say how to fix them, consistent units and labels."""
from __future__ import annotations

import csv
import io
import json
import re

import pytest
from click.testing import CliRunner

from paraplan.cli import main


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def plan_table(*args) -> tuple[list[str], str]:
    """The text table of ``paraplan plan *args`` (which must succeed): its lines and its header line."""
    table = run(*args)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    return lines, next(ln for ln in lines if ln.startswith("rank"))


def one_line_error(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_missing_input_files_say_how_to_fix_them(tmp_path):
    missing = tmp_path / "runs.csv"
    for args in (("validate", "published", missing), ("validate", "heterogeneous", tmp_path / "sailor.json"),
                 ("hardware", "show", tmp_path / "gpu.yaml")):
        line = one_line_error(run(*args))
        assert "no such file" in line and line.endswith(")") and "(check the path" in line, line


def test_plan_table_names_each_plan_by_its_config_label_and_fits_120_columns():
    from paraplan.api import config_label
    base = ["plan", "-m", "gpt3-1.3b", "-c", "dgx-a100-80gb", "-n", "8", "--global-batch", "32", "--top", "3"]
    lines, header = plan_table(*base)
    plans = json.loads(run(*base, "--json").stdout)["plans"]
    assert header.split()[:3] == ["rank", "config", "step_time_s"] and "n_gpus" not in header
    first = lines[lines.index(header) + 2]
    assert config_label(plans[0]) in first
    # four significant digits, trailing zeros kept: every step time has the same width
    assert f"{plans[0]['step_time_s']:#.4g}" in first
    assert max(len(ln) for ln in lines) <= 120


@pytest.mark.parametrize("model,gpus,batch", [("mixtral-8x7b", 16, 64), ("deepseek-v3", 256, 1024)])
def test_moe_plan_table_fits_120_columns_with_short_unit_carrying_names(model, gpus, batch):
    """An MoE label ('dp4 tp1 pp2 cp2 ep8 vpp17 mb1 z1', 32 characters) made mixtral-8x7b's table
    127 columns wide and DeepSeek-V3's (39) 134: the headers tokens_per_s_per_gpu (20) and
    headroom_gib (12) are wider than their numbers (7, 4), so such a table names them tokens/s/gpu
    etc., says which field each is, and --json keeps the long names."""
    base = ["plan", "-m", model, "-c", "dgx-h100", "-n", gpus, "--global-batch", batch, "--seq-len", 4096]
    lines, header = plan_table(*base)
    # the table, its legend of short names and the config legend (the lines up to the layer split)
    shown = lines[:next(i for i, ln in enumerate(lines) if ln.startswith("best plan"))]
    assert max(len(ln) for ln in shown) <= 120, max(shown, key=len)
    assert header.split() == ["rank", "config", "step_time_s", "tokens/s", "tokens/s/gpu", "mfu_bf16_pct",
                              "mem_gib", "free_gib"]
    legend = " ".join(ln.strip() for ln in lines if ln.startswith("columns: ") or ln.startswith("         "))
    for short, name in (("tokens/s/gpu", "tokens_per_s_per_gpu"), ("free_gib", "headroom_gib")):
        assert f"{short} = {name}" in legend
    plan = json.loads(run(*base, "--json", "--top", "1").stdout)["plans"][0]
    step, total, per_gpu, mfu, mem, free = (float(v.replace(",", ""))
                                            for v in lines[lines.index(header) + 2].split()[-6:])
    # the row's numbers are the json's: throughput per GPU = tokens/s over the GPU count
    assert per_gpu == pytest.approx(plan["tokens_per_s_per_gpu"], abs=0.05)
    assert per_gpu == pytest.approx(total / gpus, abs=0.1)
    assert free == pytest.approx(plan["headroom_gib"], abs=0.05)


def test_plan_table_folds_the_expert_tp_into_the_config_label():
    """21578cc gave the plan table an etp column for every model (a dense gpt3-1.3b too, where it
    is always 1), which pushed step_time_s out of the third place; the experts' TP is a degree like
    cp and ep, so it joins the label when > 1 ('ep8 etp2') and leaves the table's columns. A row
    at etp 1 is labelled as before, so the two layouts of one tp 2 ep 8 row are told apart."""
    from paraplan.api import config_label
    row = dict(dp=1, tp=2, pp=2, cp=4, ep=8, micro_batch=1, zero_stage=1)
    assert config_label({**row, "etp": 2}) == "dp1 tp2 pp2 cp4 ep8 etp2 mb1 z1"
    assert config_label({**row, "etp": 1}) == config_label(row) == "dp1 tp2 pp2 cp4 ep8 mb1 z1"
    base = ["plan", "-m", "mixtral-8x7b", "-c", "dgx-h100", "-n", "16", "--global-batch", "64", "--top", "40"]
    lines, header = plan_table(*base)
    plans = json.loads(run(*base, "--json").stdout)["plans"]
    assert "etp" not in header.split()
    body = lines[lines.index(header) + 2:][:len(plans)]
    for plan, line in zip(plans, body):
        assert (f" etp{plan['etp']} " in line) == (plan["etp"] > 1), line


def test_pooled_plan_shows_mfu_in_percent_like_every_other_table(tmp_path):
    pooled = tmp_path / "small.yaml"
    pooled.write_text("name: small-mixed\npools:\n  - {name: a100, cluster: dgx-a100-80gb, gpus: 16}\n"
                      "  - {name: h100, cluster: dgx-h100, gpus: 8}\n")
    base = ["plan", "-m", "gpt3-1.3b", "-c", pooled, "--global-batch", "64", "--max-micro-batch", "2"]
    text = run(*base, "--explain").stdout
    best = json.loads(run(*base, "--json").stdout)["comparison"][0]
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("plan "))
    assert header.split()[4] == "mfu_bf16_pct"
    row = next(ln for ln in lines if ln.startswith("best plan "))
    assert row.split()[-2] == f"{best['mfu_bf16_pct']:.1f}" and "mfu" not in best
    assert f"MFU {best['mfu_bf16_pct']:.1f}%" in text
    csv_header = run(*base, "--csv").stdout.splitlines()[0].split(",")
    assert "mfu_bf16_pct" in csv_header and "mfu" not in csv_header


def _help_examples(*command) -> list[list[str]]:
    """The ``paraplan ...`` example lines of ``command --help`` (continuations joined), as argv."""
    import shlex
    text = run(*command, "--help").stdout
    examples, current = [], None
    for line in text.splitlines():
        line = line.strip()
        if current is not None:
            current += " " + line.rstrip("\\")
        elif line.startswith("paraplan "):
            current = line.rstrip("\\")
        if current is not None and not line.endswith("\\"):
            examples.append(shlex.split(current)[1:])
            current = None
    return examples


def test_every_simulate_example_in_help_runs_and_fits():
    examples = [e for e in _help_examples() if e[0] == "simulate"] + _help_examples("simulate")
    assert len(examples) == 5
    for argv in examples:
        r = run(*argv)
        assert r.exit_code == 0, (argv, r.output)
        # single cluster: "fits: yes"; pooled: a fits column per stage, every stage "yes" (not
        # "tight": over the headroom a run keeps, nor "NO")
        if "fits: yes" not in r.stdout:
            lines = r.stdout.splitlines()
            head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["group", "stage"])
            stages = [ln.split() for ln in lines[head + 2:] if ln.strip() and ln.split()[0].isdigit()]
            assert stages and all(cells[-1] == "yes" for cells in stages), (argv, stages)


def test_serve_simulate_text_names_match_their_units():
    args = ["serve", "simulate", "-m", "llama3.1-70b", "-s", "dgx-h100", "--tp", "4", "--batch", "32"]
    text = run(*args).stdout
    data = json.loads(run(*args, "--json").stdout)
    rows = {ln.split()[0]: ln.split() for ln in text.splitlines() if ln.startswith("  ") and len(ln.split()) > 1}
    # decode parts under time_ms carry no "_s" suffix, and their times add up to the step
    assert "attention_s" not in rows and "step_ms" not in rows
    parts = ("attention", "mlp", "elementwise", "lm_head", "comm", "kernel_fixed", "host")
    assert sum(float(rows[p][1]) for p in parts) == pytest.approx(float(rows["step"][1]), abs=0.01)
    # a fraction is shown in percent under a _pct name (3 significant digits);
    # TPOT = decode step / (1 - prefill share x 31 / 32): the other 31 clients' prompts
    assert float(rows["prefill_share_pct"][1]) == pytest.approx(100 * data["prefill_share_fraction"], rel=1e-2)
    share = data["prefill_share_fraction"]
    assert float(rows["step"][1]) / (1 - share * 31 / 32) == pytest.approx(data["tpot_ms"], rel=1e-3)


def test_serve_simulate_memory_table_totals_what_the_engine_holds():
    def memory_rows(backend):
        text = run("serve", "simulate", "-m", "llama3.1-70b", "-s", "dgx-h100", "-b", backend, "--tp", 4,
                   "--batch", 64, "--isl", 2048, "--osl", 512).stdout
        block = text[text.index("memory per GPU"):text.index("why:")]
        return {ln.split()[0]: ln for ln in block.splitlines() if ln.startswith("  ") and ln.split()[0].isidentifier()}
    vllm = memory_rows("vllm")
    parts = sum(float(vllm[p].split()[1]) for p in ("weights", "activations", "reserved", "kv_pool"))
    # vLLM's gpu_memory_utilization 0.9 of the 80 GiB device: 72.00 GiB, 90.0% of HBM
    assert vllm["total"].split()[1:3] == ["72.00", "90.0"] and parts == pytest.approx(72.0, abs=0.02)
    assert vllm["total"].endswith("takes 0.9 of the device memory")
    # TensorRT-LLM's free_gpu_memory_fraction 0.9 of what weights, activations and its reserve leave
    trt = memory_rows("trtllm")
    weights, act, reserved = (float(trt[p].split()[1]) for p in ("weights", "activations", "reserved"))
    assert float(trt["kv_pool"].split()[1]) == pytest.approx(0.9 * (80 - weights - act - reserved), abs=0.02)
    assert float(trt["total"].split()[1]) == pytest.approx(weights + act + reserved + float(trt["kv_pool"].split()[1]),
                                                           abs=0.02)
    assert trt["total"].endswith("takes 0.9 of the free memory")


def test_plan_explain_prints_step_parts_in_seconds_with_fixed_decimals():
    text = run("plan", "-m", "gpt3-1.3b", "-c", "dgx-a100-80gb", "-n", "8", "--global-batch", "32", "--explain").stdout
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if "step-time part" in ln)
    rows = lines[start + 1:start + 14]
    assert rows[-1].split()[0] == "step_time_s"
    for row in rows:
        name, win, run_up, diff = row.split()
        assert all(re.fullmatch(r"[+-]?\d+\.\d{4}", v) for v in (win, run_up, diff)), row
        assert float(diff) == pytest.approx(float(run_up) - float(win), abs=1.5e-4)


def test_simulate_report_fits_120_columns_and_keeps_every_setting():
    r = run("simulate", "-m", "deepseek-v3", "-c", "h800-node", "-n", "2048", "--pp", "16", "--ep", "64",
            "--schedule", "dualpipe", "--uneven-layers", "--zero", "1", "--dtype", "fp8", "--global-batch", "15360")
    assert r.exit_code == 0, r.output
    assert max(len(ln) for ln in r.stdout.splitlines()) <= 120
    for setting in ("dp=128", "ep=64", "zero=1", "schedule=dualpipe", "dtype=fp8", "grad_accumulation_fusion=on",
                    "moe_load_imbalance=1", "fits: NO", "why: "):
        assert setting in r.stdout, setting


def test_catalog_listings_print_every_value_readably():
    models = run("models", "list").stdout.splitlines()
    header = models[0].split()
    col = header.index("params_b")
    mixtral = next(ln.split() for ln in models if ln.startswith("mixtral-8x7b "))
    assert mixtral[col] == "46.70"          # 46.70 B parameters, not "46.7" beside "140.62"
    show = run("hardware", "show", "h100-sxm-80gb").stdout.splitlines()
    fields = {ln.split()[0]: ln.split()[1:] for ln in show if ln.startswith("  ") and ln.split()}
    assert fields["collective_bw_fraction"] == ["-"]            # empty: "-", not a blank
    assert "[" not in " ".join(fields["fitted_factors"])        # a list, not its Python repr


def test_hardware_stacks_table_fits_120_columns():
    lines = run("hardware", "stacks").stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 120
    core = next(ln for ln in lines if ln.startswith("megatron-core "))
    from hardware_specs.catalog import load_stack
    v = load_stack("megatron-core").versions
    assert len(v) > 4 and f"{v[0]}, {v[1]} ... {v[-1]} ({len(v)})" in core    # first two and last named


def test_hardware_stacks_takes_a_serving_framework_as_serve_backend_does():
    """`serve --backend vllm` takes a framework; `hardware stacks vllm` said 'unknown stack'. It now
    shows the stack serve would use (the profile marked the default for an unstated version), and
    a name that is neither a stack nor a serving framework lists every stack it names."""
    from hardware_specs.catalog import load_stack
    from simulator.serving.context import ServingContext
    for framework, expected in (("vllm", "vllm-0.14"), ("sglang", "sglang-0.5"), ("trtllm", "trtllm-1")):
        served = ServingContext.build("llama3-8b", "dgx-h100", framework).stack.name
        assert served == expected
        out = run("hardware", "stacks", framework)
        assert out.exit_code == 0 and out.stdout.startswith(f"stack {expected} ({framework} ")
        shown = json.loads(run("hardware", "stacks", framework, "--json").stdout)
        assert shown["name"] == expected and shown["framework"] == framework
    assert run("hardware", "stacks", "vllm-0.11").stdout.startswith("stack vllm-0.11 (vllm 0.11")  # a name wins
    line = one_line_error(run("hardware", "stacks", "megatron-lm"))
    assert line == ("error: stack: no stack named 'megatron-lm' (the stacks of that name: megatron-lm-2019, "
                    "megatron-lm-2021, megatron-lm-2022)"), line
    line = one_line_error(run("hardware", "stacks", "megatron"))
    assert all(f"megatron-bridge-{v}" in line for v in ("25.09", "26.06.01")) and "megatron-core" in line
    assert load_stack("megatron-core").serving is None            # training frameworks resolve only by name
    assert one_line_error(run("hardware", "stacks", "nosuch")).startswith("error: stack: unknown stack 'nosuch'")


def test_an_overlong_blank_or_empty_name_is_an_unknown_name(tmp_path):
    """A 300-character name was an 'error: io: [Errno 36] File name too long' (the file check raised);
    a blank one 'meant' the first three stacks or models (every name starts with it) or listed
    every stack as 'the stacks of that name'; an empty model name was 'no such file' (it is the
    folder '.'). Each is now an unknown name listing the known ones (found by fuzz3)."""
    long = "a" * 300
    for args, field in ((("models", "show", long), "model: unknown model"),
                        (("hardware", "show", long), "NAME: unknown GPU or cluster"),
                        (("hardware", "stacks", long), "stack: unknown stack"),
                        (("serve", "simulate", "-m", "llama3-8b", "-s", "dgx-h100", "-b", long), "backend: "),
                        (("simulate", "-m", "gpt3-125m", "-c", long), "cluster: unknown cluster")):
        assert one_line_error(run(*args)).startswith(f"error: {field}"), args
    for args, field in ((("models", "show", " "), "model: unknown model ' '"),
                        (("models", "show", ""), "model: unknown model ''"),
                        (("hardware", "stacks", " "), "stack: unknown stack ' '")):
        line = one_line_error(run(*args))
        assert line.startswith(f"error: {field} (known: "), line
    line = one_line_error(run("models", "show", tmp_path))      # a folder without a config.json
    fix = ("(give a Hugging Face checkpoint folder (with its config.json), a model file, or a preset from "
           "`paraplan models list`)")
    assert line == f"error: model: {tmp_path} is a folder without a config.json {fix}"
    # a config.json that is a symlink loop, or a folder: the message names it, not the folder
    (tmp_path / "config.json").symlink_to(tmp_path / "config.json")
    assert one_line_error(run("models", "show", tmp_path)) == f"error: model: no such file {tmp_path}/config.json {fix}"
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").mkdir()
    assert one_line_error(run("models", "show", tmp_path)) == \
        f"error: model: {tmp_path}/config.json is a directory, not a file {fix}"


def test_validate_measured_table_shows_errors_in_percent(monkeypatch, tmp_path):
    import pandas as pd

    import paraplan.measure
    df = pd.DataFrame([{"name": "dp2", "dp": 2, "tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 4, "zero_stage": 0,
                        "recompute": "none", "measured_step_s": 0.5, "predicted_step_s": 0.45, "rel_error": -0.1,
                        "rel_error_spread": 0.02, "cpu_wait_fraction": 0.25}])
    monkeypatch.setattr(paraplan.measure, "compare_measured", lambda *a, **k: df)
    profile = tmp_path / "machine.yaml"
    profile.write_text("x")
    r = run("validate", "measured", profile)
    assert r.exit_code == 0, r.output
    header, _, row = r.stdout.splitlines()[:3]
    cells = dict(zip(header.split(), row.split()))
    assert cells["rel_error_pct"] == "-10.0" and cells["rel_error_spread_pct"] == "2.0"
    assert cells["cpu_wait_pct"] == "25.0" and cells["predicted_step_s"] == "0.4500"
    assert "mean |error| 10.0%" in r.stdout


def test_validate_heterogeneous_times_keep_four_significant_digits():
    lines = run("validate", "heterogeneous").stdout.splitlines()
    head = lines[0].split()
    i, j = head.index("pred_iter_s"), head.index("meas_iter_s")
    ok = [ln.split() for ln in lines[2:] if " ok " in ln]
    assert ok
    for cells in ok:
        for v in (cells[i], cells[j]):      # 2.000 and 1.700, not 2 and 1.7
            assert len(re.sub(r"^0\.0*|\.", "", v)) == 4, v


def test_skipped_reasons_are_counted_most_common_first_and_wrapped_to_120_columns():
    from collections import Counter

    from paraplan.commands.validate import _counted_reasons
    long = "dtype_norm empty on an FP8-capable GPU " * 6
    lines = _counted_reasons(Counter({"short": 3, long.strip(): 18, "": 1}))
    assert lines[0].startswith("     18  dtype_norm") and max(len(ln) for ln in lines) <= 120
    assert " ".join(ln[9:] for ln in lines[:-2]) == long.strip()     # wrapped, nothing lost
    assert lines[-2] == "      3  short" and lines[-1] == "      1  (no reason)"


def test_measure_prints_rounded_values_in_named_units(monkeypatch):
    import paraplan.measure
    result = {"measured_step_s": 0.318232132500043, "tokens_per_s": 1608.8884424640269,
              "peak_memory_bytes": 471552000.0, "cpu_wait_fraction": 0.2163937743930873}
    monkeypatch.setattr(paraplan.measure, "run_measurement", lambda config, progress=None: result)
    r = run("measure", "--tp", "2")
    assert r.exit_code == 0, r.output
    values = dict(ln.split() for ln in r.stdout.splitlines())
    assert values == {"measured_step_s": "0.3182", "tokens_per_s": "1,609", "peak_memory_gib": "0.439",
                      "cpu_wait_pct": "21.6"}


def test_plan_explain_shows_mfu_against_the_same_peak_as_the_table():
    base = ["plan", "-m", "gpt3-1.3b", "-c", "dgx-h100", "-n", "8", "--global-batch", "32", "--dtype", "fp8", "--top", "1"]
    best = json.loads(run(*base, "--json").stdout)["plans"][0]
    assert best["dtype"] == "fp8"
    # an fp8 plan: the table's mfu_bf16_pct is twice its share of the fp8 peak, and the explanation agrees
    assert f"MFU {best['mfu_bf16_pct']:.1f}% of the bf16 peak" in run(*base, "--explain").stdout


def test_simulate_on_a_cpu_shows_small_tflops_and_fp32_model_states():
    args = ["simulate", "-c", "cpu-local", "-m", "gpt3-125m", "--gpus", "2", "--dp", "2", "--global-batch", "8",
            "--dtype", "fp32", "--zero", "0"]
    rep = json.loads(run(*args, "--json").stdout)
    rows = {ln.split()[0]: ln.split()[1:] for ln in run(*args).stdout.splitlines() if ln.startswith("  ") and ln.split()}
    assert 0 < rep["model_tflops_per_gpu"] < 10
    assert rows["model_tflops_per_gpu"][0].rstrip("*") == f"{rep['model_tflops_per_gpu']:.3g}"    # not "0.0"
    assert rows["weights"][2:] == ["fp32", "weights"] and rows["gradients"][2:] == ["fp32", "gradients"]
    # fp32 training: 4-byte weights and no master copy, so Adam's two fp32 moments are twice the weights
    assert rep["memory_breakdown_bytes"]["optimizer_bytes"] == 2 * rep["memory_breakdown_bytes"]["weights_bytes"]


def test_step_times_of_a_thousand_seconds_and_more_print_without_a_bare_point_and_align_right():
    from paraplan.cli import four_significant
    assert [four_significant(v) for v in (1759.4, 2.0, 0.74962, 123.45)] == ["1759", "2.000", "0.7496", "123.5"]
    base = ["plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "8", "--global-batch", "16384", "--top", "2"]
    steps = [p["step_time_s"] for p in json.loads(run(*base, "--json").stdout)["plans"]]
    assert all(1000 <= s < 10000 for s in steps)         # 4 digits before the point: "1759", not "1759."
    lines = run(*base).stdout.splitlines()
    header = next(ln for ln in lines if ln.startswith("rank"))
    end = header.index("step_time_s") + len("step_time_s")
    rows = lines[lines.index(header) + 2:][:2]
    # right-aligned under its header, as a number column is
    assert [row[:end].split()[-1] for row in rows] == [f"{s:.0f}" for s in steps]


def test_a_degree_given_twice_and_a_negative_headroom_say_how_to_fix_them():
    twice = one_line_error(run("plan", "-m", "llama3-70b", "-c", "dgx-h100", "-n", 64, "--global-batch", 128,
                               "--fix", "pp=4,8", "--pp", 2))
    assert twice == ("error: --pp: given both as an option and in --fix pp=... "
                     "(give it once: --pp 2 or --fix pp=4,8)"), twice
    for value in ("-1", "nan"):
        line = one_line_error(run("simulate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", 64, "--tp", 8,
                                  "--pp", 4, "--global-batch", 128, "--headroom-gib", value))
        assert line.startswith("error: headroom_gib: must be a finite number >= 0") and line.endswith(
            "(give GiB to keep free, e.g. 4; 0 plans to the modelled peak)"), line


@pytest.mark.parametrize("fix, expected", [
    ("zero=5", "error: fix: zero=5 is out of range (ZeRO stages are 0-3)"),
    ("zero=-1", "error: fix: zero=-1 is out of range (ZeRO stages are 0-3)"),
    ("dp=0", "error: fix: dp=0 is out of range (dp is 1 to 16,777,216)"),             # MAX_GPUS = 2**24
    ("zero_shard_group=-2", "error: fix: zero_shard_group=-2 is out of range (zero_shard_group is 0 to 16,777,216)"),
])
def test_a_fixed_value_out_of_range_names_the_range(fix, expected):
    line = one_line_error(run("plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", 8, "--global-batch", 16, "--fix", fix))
    assert line == expected


def test_the_deepseek_v3_help_example_dispatches_as_deepseek_did_and_lands_near_its_report():
    """DeepSeek-V3 (arXiv 2412.19437) routes a token to at most 4 nodes (section 2.1.2) and sends
    it over IB once per node, to the GPU of the same in-node index, which forwards it over NVLink
    (section 3.2.2): --ep-dispatch-dedup. Its pre-training took 2,664 K H800 GPU hours for 14.8 T
    tokens (Table 1): 14.8e12 / (2.664e6 x 3600) = 1,543 tokens/s per GPU on average."""
    example = next(e for e in _help_examples("simulate") if "deepseek-v3" in e)
    assert "--ep-dispatch-dedup" in example and "--ep-comm-overlap" in example
    report = json.loads(run(*example, "--json").stdout)
    published = 14.8e12 / (2.664e6 * 3600)
    assert abs(published - 1543.2) < 0.1
    # the help's layout without the deduplicated dispatch predicted 1,060 (-31%); with it 1,359 (-12%);
    # without the two fully recomputed layers the example needed to fit before Megatron-Core's MoE
    # probabilities moved inside the experts (moe_probs_in_expert), DeepSeek's own recomputation
    # alone: 1,470 (-4.8%)
    assert abs(report["tokens_per_s_per_gpu"] / published - 1) < 0.1, report["tokens_per_s_per_gpu"]


def test_plan_csv_with_explain_says_the_explanation_would_be_lost():
    # the CSV holds plan rows only: --explain was dropped without a word (--emit already refuses it)
    for cluster in ("dgx-h100", "examples/clusters/a100-h100.yaml"):
        args = ["plan", "-m", "llama3-8b", "-c", cluster, "--global-batch", 64, "--csv", "--explain"]
        if cluster == "dgx-h100":
            args += ["-n", 8]
        line = one_line_error(run(*args))
        assert line == ("error: --csv: prints plan rows only, so --explain would print nothing (use --json, which "
                        "carries the explanation, or run --csv and --explain as two commands)"), line


def test_an_option_of_a_sibling_command_is_named_there():
    # `simulate --explain` suggested '--ep' and '--plan'; the option is plan's
    cases = {("simulate", "--explain"): "error: usage: paraplan simulate has no option '--explain'; 'paraplan plan' "
                                        "takes it (see 'paraplan simulate --help')",
             ("plan", "--gantt", "g.png"): "error: usage: paraplan plan has no option '--gantt'; 'paraplan simulate' "
                                           "takes it (see 'paraplan plan --help')",
             ("serve", "simulate", "--plot", "f.png"): "error: usage: paraplan serve simulate has no option '--plot'; "
                                                       "'paraplan serve plan' takes it (see 'paraplan serve simulate "
                                                       "--help')"}
    for args, expected in cases.items():
        assert one_line_error(CliRunner().invoke(main, list(args), prog_name="paraplan")) == expected
    # an option no sibling has keeps click's own message and its look-alikes
    assert one_line_error(run("simulate", "--explian")).startswith("error: usage: No such option '--explian'")


def test_one_gpu_and_one_sequence_are_counted_in_the_singular_and_degrees_group_in_the_export_summary():
    base = ("plan", "-m", "gpt3-1.3b", "-c", "dgx-h100", "-n", 1, "--global-batch", 1)
    assert run(*base).stdout.splitlines()[0] == ("plan: gpt3-1.3b on 1 x h100-sxm-80gb (dgx-h100); global batch "
                                                 "1 sequence x 2048 = 2,048 tokens")
    launch = run(*base, "--emit", "megatron").stdout.splitlines()
    assert launch[0].startswith("# paraplan plan: gpt3-1.3b on 1 GPU (h100-sxm-80gb, dgx-h100): dp=1 tp=1 pp=1, "
                                "micro_batch=1 global_batch=1 x 2048 tokens, zero=0 "), launch[0]
    assert any(line.startswith("# Launch on 1 GPU (dp=1 x tp=1 x pp=1 x cp=1):") for line in launch), launch[:4]
    from paraplan.exports.common import summary
    p = {"dp": 256, "tp": 1, "pp": 1, "vpp": 1, "cp": 2, "ep": 4, "micro_batch": 1, "global_batch": 512,
         "seq_len": 8192, "zero_stage": 1, "recompute": "none", "schedule": "1f1b", "dtype": "bf16",
         "model_name": "llama3-8b", "n_gpus": 512}
    assert summary(p) == ("paraplan plan: llama3-8b on 512 GPUs: dp=256 tp=1 pp=1 cp=2 ep=4, micro_batch=1 "
                          "global_batch=512 x 8192 tokens, zero=1 recompute=none schedule=1f1b dtype=bf16")


def test_the_plan_header_says_when_the_sequence_length_is_the_models_whole_context():
    # mixtral-8x22b's default seq_len is its 64K context window (no source states a training
    # length): 4Mi tokens are 64 sequences of 65536, and a third header line says where 65536 came from
    base = ("plan", "-m", "mixtral-8x22b", "-c", "dgx-h100", "-n", 64, "--global-batch-tokens", "4Mi", "--top", 1)
    lines = run(*base).stdout.splitlines()
    assert lines[0] == ("plan: mixtral-8x22b on 64 x h100-sxm-80gb (dgx-h100); global batch 64 sequences x 65536 = "
                        "4,194,304 tokens")
    assert lines[2] == ("sequence length 65536: mixtral-8x22b's default seq_len, its whole context window "
                        "(--seq-len sets another)")
    given = run(*base, "--seq-len", 4096).stdout.splitlines()
    assert given[0].endswith("global batch 1024 sequences x 4096 = 4,194,304 tokens")
    assert given[2].startswith("rank ")
    # a preset whose seq_len is below its context (llama3.1-8b: 8192 of 131072) gets no such line
    assert run("plan", "-m", "llama3.1-8b", "-c", "dgx-h100", "-n", 8, "--global-batch", 64,
               "--top", 1).stdout.splitlines()[2].startswith("rank ")


def test_a_fixed_tp_wider_than_a_node_says_to_raise_max_tp():
    """--tp 16 on 8-GPU H100 nodes is refused because --max-tp defaults to one node's GPUs; the
    error says so and names the option, which then runs the request (dp4 tp16 on 64 GPUs). The
    model is multi-head (GPT-22B, 64 heads): Llama-3-70B's 8 key/value heads refuse tp 16 on the
    default stack (test_a_fixed_tp_beyond_the_kv_heads_names_them)."""
    args = ("plan", "-m", "gpt-22b", "-c", "dgx-h100", "-n", 64, "--global-batch", 128, "--tp", 16)
    line = one_line_error(run(*args))
    assert line.startswith("error: gpus: ") and "raise --max-tp to 16" in line
    ok = run(*args, "--max-tp", 16, "--json", "--top", 1)
    assert ok.exit_code == 0, ok.output
    best = json.loads(ok.stdout)["plans"][0]
    assert (best["tp"], best["dp"]) == (16, 4)


def test_a_fixed_tp_beyond_the_kv_heads_names_them():
    """Llama-3-70B has 8 key/value heads, which Megatron-Core <= 0.15 splits whole over tp: a fixed
    tp 16 (with --max-tp 16) leaves no layout, and the error names the key/value heads, not only
    the 64 query heads tp 16 does divide."""
    line = one_line_error(run("plan", "-m", "llama3-70b", "-c", "dgx-h100", "-n", 64, "--global-batch", 128,
                              "--tp", 16, "--max-tp", 16))
    assert line.startswith("error: tp: tp=16 leaves no layout") and "the 8 key/value heads" in line


@pytest.mark.parametrize("request_args", [
    ("-m", "llama3-70b", "-c", "dgx-h100", "-n", "64", "--global-batch", "128", "--fix", "zero=1"),
    ("-m", "deepseek-v3", "-c", "dgx-h100", "-n", "256", "--global-batch", "512"),
    # its winner (dp8 tp2 pp16 ep8) runs etp 1, not megatron-core's default etp = tp: without --etp
    # the printed command priced etp 2 (29.27 s against the plan's 21.01 s)
    ("-m", "deepseek-v3", "-c", "dgx-h100", "-n", "256", "--global-batch", "1024"),
    ("-m", "gpt3-13b", "-c", "dgx2-v100", "-n", "32", "--global-batch", "64"),
    ("-m", "llama3-70b", "-c", "dgx-h100", "-n", "32", "--global-batch", "128", "--headroom-gib", "0"),
])
def test_plan_prints_the_simulate_command_of_its_best_plan_and_it_gives_the_same_step(request_args):
    """The table names a plan by abbreviations (off7, full2d1, hsdp8) that are simulate options
    under other names; the plan prints the best plan as a `paraplan simulate` command, which gives
    the plan's step time (Llama-3-70B on 64 H100, DeepSeek-V3 on 256 H100, GPT-3 13B on 32 V100 in
    fp16: whichever plan wins, simulate must give its step to 1e-9), and its fit: Llama-3-70B on
    32 H100 planned with --headroom-gib 0 fills 79.8 of 80 GiB, and the command without the
    headroom said "fits: NO (over by 3.77 GiB ...)" against simulate's 4 GiB."""
    import shlex
    text = run("plan", *request_args, "--top", 1)
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith("best plan as one run"))
    block = [lines[at + 1]]
    while block[-1].endswith("\\"):          # shell continuations, as it pastes into a shell
        block.append(lines[at + len(block) + 1])
    assert max(len(l) for l in block) <= 120
    command = shlex.split(" ".join(l.rstrip("\\") for l in block))
    assert command[:2] == ["paraplan", "simulate"]
    planned = json.loads(run("plan", *request_args, "--json", "--top", 1).stdout)["plans"][0]
    sim = run(*command[1:], "--json")
    assert sim.exit_code == 0, sim.output
    assert json.loads(sim.stdout)["step_time_s"] == pytest.approx(planned["step_time_s"], rel=1e-9)
    assert json.loads(sim.stdout)["fits"] is True


def test_plan_json_and_csv_rows_carry_the_recompute_layers_decrement_their_label_shows():
    """Among the top 400 of Llama-3-70B on 64 H100 (batch 128) a plan recomputes
    N layers per chunk on the first stage, one fewer per later stage (label fullNd1, which the
    legend explains); --json and --csv rows dropped the decrement, so a row read back named another
    plan (full recompute of N layers everywhere). The row is found by its fields, not pinned to a
    rank. Since Megatron-Core runs no ZeRO-2/3 under a pipeline (lacks zero2_with_pipeline) the
    ZeRO-3 pp 2 plans that carried the decrement (rank 26 of the open search) are gone, and the
    ZeRO-1 pp 4 ones that carry it rank 334th; recomputation is left to the search (``--fix
    recompute=full`` now pins every layer of each chunk, as simulate's --recompute full does), so
    the top 400 are listed."""
    args = ("plan", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "64", "--global-batch", "128", "--top", "400")
    rows = json.loads(run(*args, "--json").stdout)["plans"]
    i = next(k for k, r in enumerate(rows) if r["recompute_layers_decrement"] == 1)
    row = rows[i]
    assert row["recompute"] == "full" and row["recompute_num_layers"] >= 1
    csv_rows = list(csv.DictReader(io.StringIO(run(*args, "--csv").stdout)))
    assert csv_rows[i]["recompute_layers_decrement"] == "1"
    label = f" full{row['recompute_num_layers']}d1 "
    table = run(*args).stdout
    assert any(ln.split()[:1] == [str(i + 1)] and label in ln for ln in table.splitlines())
    assert "fullNdM: M fewer each later stage" in table


def test_a_slow_search_that_ends_in_a_refusal_writes_one_stderr_line(monkeypatch):
    """The search's progress bar appears after PROGRESS_AFTER_S; off a terminal click prints its
    label as a line of its own, so a search slower than that (a loaded machine) that ended in a
    refusal wrote 'evaluating configurations' above the error line. Off a terminal there is no bar
    (found by fuzz3: plan -m nemotron-3-nano -n 128 ... --emit megatron, 6 s on a loaded machine)."""
    import paraplan.commands.plan as plan_command
    monkeypatch.setattr(plan_command, "PROGRESS_AFTER_S", 0.0)
    line = one_line_error(run("plan", "-m", "mixtral-8x7b", "-c", "dgx-h100", "-n", "64", "--global-batch", "64",
                              "--emit", "torchtitan"))
    assert line.startswith("error: model: mixtral-8x7b's architecture is none of the torchtitan"), line


def test_a_best_plan_whose_host_memory_the_cluster_does_not_bound_says_so():
    """A cluster file without ``host: memory_gib`` (h800-node, hgx-h200) lets the search offload
    any amount: Llama-3-70B on 32 H800 at 128 sequences wins with 77 layers per chunk on the
    host, 368.5 GiB a GPU, 2,948 GiB a node, which no plan was checked against (on 2,048 H200
    Llama-3.1-405B's winner needs 3,854 GiB a node, 7% faster than the best plan within a DGX
    H200's 2 TB). ``simulate`` says "unchecked"; the plan now says it too, and not where the
    file states the node's memory (dgx-h100: 2,048 GiB, checked)."""
    from click.testing import CliRunner
    from paraplan.cli import main
    base = ["plan", "-m", "llama3-70b", "-n", "32", "--global-batch", "128", "--top", "1"]
    out = CliRunner().invoke(main, base + ["-c", "h800-node"])
    assert out.exit_code == 0, out.output
    best = json.loads(CliRunner().invoke(main, base + ["-c", "h800-node", "--json"]).stdout)["plans"][0]
    per_gpu = best["host_memory_gib"]
    assert best["offload_activation_layers"] > 0 and per_gpu > 256       # more than a node's 2 TB / 8 GPUs
    assert (f"note: the best plan keeps {per_gpu:,.1f} GiB per GPU in host memory, {8 * per_gpu:,.1f} GiB per "
            f"node of 8 GPUs, which no plan was checked against: h800-node states no host memory per node") in out.stdout
    checked = CliRunner().invoke(main, base + ["-c", "dgx-h100"])
    assert checked.exit_code == 0 and "offload" in checked.stdout and "which no plan was checked" not in checked.stdout


def test_a_best_plan_offloading_activations_over_pcie_says_no_measured_run_backs_it():
    # Llama-3-70B on 32 H100 at 128 sequences: the best plan offloads 72 layers' activations per
    # chunk over PCIe (dp32 pp 1 ZeRO-3; it was 4 layers per chunk at pp 2 x vpp 8 and ZeRO-2 until
    # the Megatron-Core stack refused ZeRO-2/3 under a pipeline, lacks zero2_with_pipeline, and 79
    # at pp 1 and ZeRO-2 before ZeRO-2 held the computing layer's whole gradient before its
    # reduce-scatter), which no public row measures (its offload rows are GB200/GB300 over
    # NVLink-C2C); the output says so beside the plan, and not for a plan without offload
    from click.testing import CliRunner
    from paraplan.cli import main
    base = ["plan", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "32", "--global-batch", "128", "--top", "3"]
    out = CliRunner().invoke(main, base)
    assert out.exit_code == 0, out.output
    assert "note: the best plan uses activation offload over PCIe (72 layers per chunk)" in out.stdout
    plain = CliRunner().invoke(main, base[:-1] + ["5", "--no-offload", "--json"])
    assert plain.exit_code == 0, plain.output
    assert json.loads(plain.stdout)["best_unmeasured_features"] == ""
    offloaded = CliRunner().invoke(main, base + ["--json"])
    assert json.loads(offloaded.stdout)["best_unmeasured_features"] == "activation offload over PCIe (72 layers per chunk)"
    rows = json.loads(plain.stdout)["plans"]
    # --no-offload keeps the rest of the memory search: some of the best plans recompute some
    # layers instead (the winner did until ZeRO-3's buffers held the computing layer's gradient,
    # and again, at ZeRO-3, since ZeRO-2's hold it too)
    assert all(r["offload_activation_layers"] == 0 for r in rows)
    r = next(r for r in rows if r["recompute_num_layers"] > 0)
    one = CliRunner().invoke(main, ["simulate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "32", "--json",
                                    "--tp", str(r["tp"]), "--pp", str(r["pp"]), "--vpp", str(r["vpp"]),
                                    "--schedule", str(r["schedule"]),
                                    "--cp", str(r["cp"]), "--micro-batch", str(r["micro_batch"]),
                                    "--global-batch", "128", "--zero", str(r["zero_stage"]), "--recompute", "full",
                                    "--recompute-num-layers", str(r["recompute_num_layers"]),
                                    "--sequence-parallel" if r["sequence_parallel"] else "--no-sequence-parallel",
                                    "--dtype", "bf16"])
    sim = json.loads(one.stdout)
    sim = sim if isinstance(sim, dict) else sim[0]
    assert sim["step_time_s"] == pytest.approx(r["step_time_s"], rel=1e-9)


def test_plan_prints_the_layers_per_chunk_it_priced_and_the_balanced_split_apart():
    # Llama-3-8B on 16 H100, pp 2 x vpp 2: the step model prices (and the exports launch) 8 layers
    # a chunk; the planner's dynamic-programming split of its per-layer costs (8, 9, 9, 6) was
    # printed as "the best plan's layers per model chunk" though no number above was priced on it
    args = ("plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "16", "--global-batch", "64", "--fix", "pp=2",
            "--fix", "vpp=2", "--top", "1")
    text = run(*args).stdout
    assert "as priced and exported (4 chunks; stage:first-last layer): 0:0-7 1:8-15 2:16-23 3:24-31" in text
    # the balanced split's note is printed once, wrapped at 120 columns (continuation lines indented 4)
    joined = text.replace("\n    ", " ")
    assert "not the one priced): 0:0-7 1:8-16 2:17-25 3:26-31" in joined
    assert text.count("a split minimising its slowest chunk") == 1
    data = json.loads(run(*args, "--json").stdout)
    assert data["stage_layers"] == [[0, 8], [8, 16], [16, 24], [24, 32]]
    assert data["balanced_stage_layers"] == [[0, 8], [8, 17], [17, 26], [26, 32]]


def test_the_printed_simulate_command_carries_the_headroom_exactly():
    """The plan's 'simulate' command writes --headroom-gib as Python reads it back: 1.23456789 (":g"
    alone wrote 1.23457), and 4 as 4."""
    import shlex

    from paraplan.commands.plan import simulate_command
    row = {"dp": 1, "tp": 8, "pp": 1, "cp": 1, "ep": 1, "micro_batch": 1, "global_batch": 64}
    for value, text in ((1.23456789, "1.23456789"), (4.0, "4"), (0.1 + 0.2, repr(0.1 + 0.2))):
        args = shlex.split(simulate_command(row, "llama3-8b", "dgx-h100", headroom_gib=value))
        assert args[args.index("--headroom-gib") + 1] == text and float(text) == value


def _dp_comm_row(*args):
    r = run("simulate", "-m", "llama3-8b", "-c", "dgx-h100", *args)
    assert r.exit_code == 0, r.output
    row = next(ln for ln in r.stdout.splitlines() if ln.split()[:1] == ["dp_comm_exposed_s"])
    j = run("simulate", "-m", "llama3-8b", "-c", "dgx-h100", *args, "--json")
    return row, json.loads(j.stdout)["time_breakdown_s"]["dp_comm_exposed_s"]


def test_dp_comm_row_names_dualpipe_s_copy_pair_exchange():
    """At dp = 1 there is no data-parallel reduction, yet DualPipe's dp_comm_exposed_s is its
    two model copies' gradient exchange (0.0505 s for 8B over 4 stages), which the row called a
    "data-parallel gradient reduction"; 1F1B at dp = 1 has none (0 s) and keeps the plain label."""
    row, value = _dp_comm_row("-n", "4", "--pp", "4", "--schedule", "dualpipe", "--global-batch", "8")
    assert value > 0 and "DualPipe's copy-pair gradient exchange" in row and "data-parallel" not in row
    plain, none = _dp_comm_row("-n", "4", "--pp", "4", "--global-batch", "8")
    assert none == 0.0 and "data-parallel gradient reduction" in plain and "DualPipe" not in plain
    both, with_dp = _dp_comm_row("-n", "8", "--pp", "4", "--schedule", "dualpipe", "--global-batch", "16")
    # (on one 8-GPU node the pair exchanges over NVLink, and at dp 2 each rank's ZeRO-1 shard is
    # half the gradient: the sum is not above the dp 1 exchange since the pair stopped being
    # priced on the NIC, session 55)
    assert with_dp > 0 and "DP + DualPipe copy-pair grad reductions" in both


def test_stage_memory_table_columns_carry_their_unit():
    """The per-stage memory table's columns are GiB, named with _gib like the main table's
    mem_gib (they were bare "weights grads optim ..."); each row's parts sum to its total."""
    r = run("simulate", "-m", "llama3-70b", "-c", "dgx-h100", "-n", "64", "--tp", "8", "--pp", "4", "--uneven-layers",
            "--global-batch", "64")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    at = lines.index("memory per GPU by pipeline stage (GiB)")
    header = lines[at + 1].split()
    assert header == ["stage", "layers", "in_flight", "weights_gib", "grads_gib", "optim_gib", "activ_gib",
                      "logits_gib", "other_gib", "total_gib"]
    rows = [ln.split() for ln in lines[at + 3:] if ln.strip()][:2]
    for row in rows:
        parts = [float(x) for x in row[3:9]]
        assert sum(parts) == pytest.approx(float(row[9]), abs=0.035)
    assert max(len(ln) for ln in lines) <= 120
