"""``paraplan simulate --emit``: the launch of exactly the layout a user entered (a published run's
degrees, stage layers, recomputation), where ``plan --emit`` writes only the search's pick.

Layouts: Llama 3.1 405B on 16,384 H100 (arXiv 2407.21783 Table 4: TP 8, CP 1, PP 16, DP 128,
seq 8,192, 16M tokens a batch; the first and last stage one layer fewer, section 3.3.2) and
Megatron-LM's 1T GPT on 3,072 A100 (arXiv 2104.04473 Table 1 / sc21 run_table_1.sh: TP 8, PP 64,
micro-batch 1, global batch 3,072, full uniform recompute, fp16).
"""
from __future__ import annotations

from click.testing import CliRunner

from paraplan import api, exports
from paraplan.cli import main

LLAMA_LAYOUT = "Et*1|(t*2|)*62t*1L"
LLAMA = ["-m", "llama3.1-405b", "-c", "dgx-h100", "-n", "16384", "--tp", "8", "--pp", "16", "--vpp", "4",
         "--seq-len", "8192", "--global-batch-tokens", "16Mi", "--sequence-parallel", "--pipeline-layout", LLAMA_LAYOUT,
         "--zero", "1"]
GPT_1T = ["-m", "megatron-1t", "-c", "dgx-a100-80gb", "-n", "3072", "--tp", "8", "--pp", "64", "--micro-batch", "1",
          "--global-batch", "3072", "--recompute", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1",
          "--dtype", "fp16", "--stack", "megatron-lm-2021", "--zero", "0"]


def run(*args):
    return CliRunner().invoke(main, ["simulate", *args])


def flag_values(text: str) -> dict[str, str]:
    """Megatron flags of an export: ``--flag value`` (or ``--flag`` alone: "")."""
    out = {}
    for line in text.splitlines():
        words = line.strip().split(None, 1)
        if words and words[0].startswith("--"):
            out[words[0]] = words[1].strip("'") if len(words) > 1 else ""
    return out


def test_llama3_405b_table4_layout_exports_its_degrees_batch_and_layout_to_megatron():
    r = run(*LLAMA, "--emit", "megatron")
    assert r.exit_code == 0, r.output
    f = flag_values(r.stdout)
    assert f["--tensor-model-parallel-size"] == "8" and f["--pipeline-model-parallel-size"] == "16"
    assert f["--pipeline-model-parallel-layout"] == LLAMA_LAYOUT
    # Megatron sets vpp = the layout's stages // pp (megatron/training/arguments.py, validate_args):
    # 1 + 62 + 1 = 64 stages over pp 16 is vpp 4, holding 1 + 62 x 2 + 1 = 126 layers
    assert f["--num-layers"] == "126"
    # 16Mi tokens of 8,192: 2,048 sequences, micro-batch 1 (16 a data-parallel rank at dp 128)
    assert (f["--micro-batch-size"], f["--global-batch-size"], f["--seq-length"]) == ("1", "2048", "8192")
    assert "--sequence-parallel" in f and "--use-distributed-optimizer" in f and "--bf16" in f
    assert not any(k.startswith("--recompute") for k in f)      # the paper states no recomputation
    # the same file the API writes for the same row
    row = api.simulate("llama3.1-405b", "dgx-h100", gpus=16384, tp=8, pp=16, vpp=4, seq_len=8192,
                       global_batch_tokens=16 * 2**20, sequence_parallel=True, pipeline_layout=LLAMA_LAYOUT,
                       zero_stage=1).iloc[0]
    assert r.stdout == exports.emit(row, "megatron")


def test_megatron_1t_narayanan_table1_layout_exports_uniform_full_recompute_in_fp16():
    r = run(*GPT_1T, "--emit", "megatron")
    assert r.exit_code == 0, r.output
    f = flag_values(r.stdout)
    assert (f["--tensor-model-parallel-size"], f["--pipeline-model-parallel-size"]) == ("8", "64")
    assert (f["--micro-batch-size"], f["--global-batch-size"], f["--seq-length"]) == ("1", "3072", "2048")
    assert (f["--recompute-granularity"], f["--recompute-method"], f["--recompute-num-layers"]) == ("full", "uniform", "1")
    assert "--fp16" in f and "--use-distributed-optimizer" not in f     # ZeRO-0 as in 2021
    assert "--num-virtual-stages-per-pipeline-rank" not in f           # 1F1B, not interleaved
    assert "dp=6 tp=8 pp=64" in r.stdout.splitlines()[0]               # 3,072 / (8 x 64)


def test_a_layout_the_framework_cannot_run_is_refused_in_one_line():
    # BLOOM-176B's ALiBi: Megatron-LM has no such position embedding (its --position-embedding-type
    # choices are learned_absolute, rope, mrope, yarn, none)
    r = run("-m", "bloom-176b", "-c", "jean-zay-a100", "-n", "384", "--tp", "4", "--pp", "12", "--micro-batch", "2",
            "--global-batch", "2048", "--recompute", "full", "--zero", "1", "--stack", "megatron-deepspeed",
            "--emit", "megatron")
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and r.output.startswith("error: model: Megatron-LM has no ALiBi")


def test_emit_with_json_is_refused_and_a_prior_is_named_in_the_header():
    r = run(*GPT_1T, "--emit", "megatron", "--json")
    assert r.exit_code == 2 and r.output.startswith("error: --emit: ")
    # V100 (Volta) rests on an unfitted prior: the launch's first line says so beside the prediction
    r = run("-m", "gpt3-1.3b", "-c", "dgx2-v100", "-n", "16", "--tp", "2", "--global-batch", "64", "--emit", "megatron")
    assert r.exit_code == 0, r.output
    assert "dp=8 tp=2 pp=1" in r.stdout.splitlines()[0]
    assert "(on an unfitted prior efficiency model" in r.stdout.splitlines()[0]


def test_a_refused_launch_writes_no_trace(tmp_path):
    # the refusal comes before --trace writes the timeline: exit 2 leaves nothing behind (it
    # wrote a 993,162-byte trace of BLOOM-176B's 12 stages, then refused)
    trace = tmp_path / "t.json"
    r = run("-m", "bloom-176b", "-c", "jean-zay-a100", "-n", "384", "--tp", "4", "--pp", "12", "--micro-batch", "2",
            "--global-batch", "2048", "--recompute", "full", "--zero", "1", "--stack", "megatron-deepspeed",
            "--emit", "megatron", "--trace", str(trace))
    assert r.exit_code == 2 and r.output.startswith("error: model: Megatron-LM has no ALiBi")
    assert not trace.exists()
    # an accepted one writes both: the launch on stdout and the trace of its 2 stages
    r = run(*GPT3_1B_V100, "--emit", "megatron", "--trace", str(trace))
    assert r.exit_code == 0, r.output
    assert "dp=4 tp=2 pp=2" in r.stdout.splitlines()[0]
    assert trace.stat().st_size > 0
    import json
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert {e.get("pid") for e in events if e.get("ph") == "X"} == {0, 1}


GPT3_1B_V100 = ["-m", "gpt3-1.3b", "-c", "dgx2-v100", "-n", "16", "--tp", "2", "--pp", "2", "--global-batch", "64"]


def test_torchtitan_emit_without_stack_is_priced_on_torchtitan_s_profile_as_plan_emit_is():
    # plan --emit torchtitan prices on torchtitan-0.3 without --stack; simulate --emit did not
    # (megatron-core, with a note): the same launch as --stack torchtitan-0.3 now, and no note
    args = ["-m", "llama3-8b", "-c", "dgx-h100", "--gpus", "8", "--global-batch", "64", "--emit", "torchtitan"]
    plain, explicit = run(*args), run(*args, "--stack", "torchtitan-0.3")
    core = run(*args, "--stack", "megatron-core", "--zero", "3")
    assert plain.exit_code == explicit.exit_code == core.exit_code == 0, (plain.output, core.output)
    assert plain.stdout == explicit.stdout and "stack profile" not in plain.stderr
    assert "predicted on the megatron-core stack profile (megatron-core), not torchtitan's" in core.stderr
    # the header's step differs between the two profiles (FSDP2's gathers are priced as torchtitan runs them)
    assert plain.stdout.splitlines()[0] != core.stdout.splitlines()[0]
