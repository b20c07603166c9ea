"""Serving exports (paraplan.exports.serving): the launch scripts of vLLM, SGLang and TensorRT-LLM
say the deployment that was priced: its GPUs, parallel degrees, engine settings and formats.

Each script is checked as bash (``bash -n``), its engine commands are read back option by option
and compared with the priced layout, and the engines' refusals are the layouts they cannot run.
"""
from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from hardware_specs.errors import InputError
from paraplan.exports import serving_matrix
from paraplan.exports.serving import emit_launch, emit_serving, engine_commands, refusal
from paraplan.exports.serving_flags import PROGRAMS, command_problems
from paraplan.exports.serving_common import CHECKPOINTS, launch_of, placement
from simulator.serving.context import ServingContext
from simulator.serving.deployment import Deployment, WorkerLayout
from simulator.serving.simulate import simulate_serving
from cli_results import one_line_error, run

ENGINE_PROGRAMS = {"vllm": ("vllm", "serve"), "sglang": ("-m", "sglang.launch_server"), "trtllm": ("trtllm-serve",)}


def deployment(model, system, backend, fmt, expert=None, mode="agg", isl=1024, osl=1024, **kw):
    ctx = ServingContext.build(model, system, backend, fmt, expert or fmt)
    dep = Deployment(model=model, system=system, backend=ctx.stack.name, mode=mode, isl=isl, osl=osl,
                     dense_format=ctx.dense_format, expert_format=ctx.expert_format, **kw)
    return ctx, dep, simulate_serving(dep, ctx)


def commands(script: str, program: tuple[str, ...]) -> list[dict]:
    """Each engine command of ``script`` as {option: [values]} (its words joined over the line
    continuations, environment assignments and the trailing ``&`` dropped)."""
    joined = script.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line.startswith("#") or not all(p in line.split() for p in program):
            continue
        words = shlex.split(line.rstrip("&").strip())
        opts: dict[str, list[str]] = {}
        key = "_program"
        for w in words:
            if w.startswith("-") and not w.lstrip("-").replace(".", "").isdigit():
                key = w
                opts.setdefault(key, [])
            else:
                opts.setdefault(key, []).append(w)
        out.append(opts)
    return out


def one(opts: dict, flag: str) -> str:
    values = opts[flag]
    assert len(values) == 1, (flag, values)
    return values[0]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
@pytest.mark.parametrize("backend, fmt", [("vllm", "fp8"), ("sglang", "fp8_block"), ("trtllm", "nvfp4")])
def test_scripts_are_valid_bash(tmp_path, backend, fmt):
    ctx, dep, rep = deployment("deepseek-r1", "dgx-b200", backend, fmt,
                               layout=WorkerLayout(tp=1, adp=8, moe_tp=1, moe_ep=8, batch=64), workers=2)
    path = tmp_path / "launch.sh"
    path.write_text(emit_serving(ctx, dep, rep.metrics))
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_vllm_attention_dp_expert_parallel_worker_reads_back_as_priced():
    # DeepSeek-R1 fp8 on one DGX B200: dp 8 ranks of tp 1, experts over all 8 (ep 8), 64 requests a rank
    ctx, dep, rep = deployment("deepseek-r1", "dgx-b200", "vllm", "fp8",
                               layout=WorkerLayout(tp=1, adp=8, moe_tp=1, moe_ep=8, batch=64))
    script = emit_serving(ctx, dep, rep.metrics)
    (cmd,) = commands(script, ENGINE_PROGRAMS["vllm"])
    assert one(cmd, "--tensor-parallel-size") == "1" and one(cmd, "--data-parallel-size") == "8"
    assert one(cmd, "--pipeline-parallel-size") == "1"
    assert cmd["--enable-expert-parallel"] == []
    # the settings the prediction assumed: vllm-0.14's budget on a >= 70 GiB GPU, its cap and share
    assert one(cmd, "--max-num-batched-tokens") == "8192" == str(ctx.token_budget)
    assert one(cmd, "--max-num-seqs") == "1024" and one(cmd, "--gpu-memory-utilization") == "0.9"
    assert one(cmd, "--max-model-len") == str(1024 + 1024 + 256)       # isl + osl and a re-tokenising slack
    # per-tensor fp8 of DeepSeek is no published checkpoint: the script asks for one
    assert 'MODEL="${MODEL:?set MODEL to a deepseek-r1 checkpoint storing fp8' in script
    assert "--precision fp8_block for deepseek-ai/DeepSeek-R1" in script
    # the benchmark runs the priced closed loop: 8 ranks x 64 requests
    assert "--max-concurrency 512" in script and "--random-input-len 1024" in script


def test_sglang_worker_sizes_and_memory_share():
    # SGLang: --tp-size is the worker's GPUs (tp x adp), dp attention splits it; mem_fraction_static
    # = (HBM - the 10 GiB reserve) / HBM on a B200 of 179 GiB... as the stack prices it
    ctx, dep, rep = deployment("deepseek-r1", "dgx-b200", "sglang", "fp8_block",
                               layout=WorkerLayout(tp=1, adp=8, moe_tp=2, moe_ep=4, batch=32))
    script = emit_serving(ctx, dep, rep.metrics)
    (cmd,) = commands(script, ENGINE_PROGRAMS["sglang"])
    assert one(cmd, "--tp-size") == "8" and one(cmd, "--attn-dp-size") == "8"
    # the dense MLPs per attention-DP rank (priced at tp 1), the priced clients admitted
    assert one(cmd, "--moe-dense-tp-size") == "1" and one(cmd, "--max-running-requests") == str(32 * 8)
    assert one(cmd, "--ep-size") == "4"
    hbm = ctx.cluster.gpu.hbm_bytes
    expected = (hbm - 10 * 2**30) / hbm
    assert float(one(cmd, "--mem-fraction-static")) == pytest.approx(expected, abs=5e-4)
    assert one(cmd, "--chunked-prefill-size") == str(ctx.token_budget)
    assert 'MODEL="${MODEL:-deepseek-ai/DeepSeek-R1}"' in script           # stores fp8_block as priced
    assert "--quantization" not in cmd


def test_trtllm_disaggregated_deployment_on_gb200():
    # 3 prefill workers of 4 GPUs (attention DP 4, ep 4) and one decode worker of 16 (DP 16, ep 16)
    ctx, dep, rep = deployment("deepseek-r1", "gb200-nvl72", "trtllm", "nvfp4", mode="disagg", isl=8192,
                               prefill=WorkerLayout(tp=1, adp=4, moe_tp=1, moe_ep=4, batch=1), prefill_workers=3,
                               decode=WorkerLayout(tp=1, adp=16, moe_tp=1, moe_ep=16, batch=64), decode_workers=1)
    launch = launch_of(ctx, dep, rep.metrics)
    # GB200 hosts have 4 GPUs: the prefill workers take hosts 0-2, the decode worker hosts 3-6
    assert launch.hosts == 7 and [(w.role, w.first_host, w.hosts) for w in launch.workers] == \
        [("prefill", 0, 1), ("prefill", 1, 1), ("prefill", 2, 1), ("decode", 3, 4)]
    script = emit_launch(launch)
    cmds = commands(script, ENGINE_PROGRAMS["trtllm"])
    servers = [c for c in cmds if "--tp_size" in c]
    assert sorted(one(c, "--tp_size") for c in servers) == ["16", "4", "4", "4"]
    assert all(one(c, "--ep_size") == one(c, "--tp_size") for c in servers)
    decode = next(c for c in servers if one(c, "--tp_size") == "16")
    assert decode["-np"][0] == "16"                                       # one MPI launch of 16 ranks
    assert one(decode, "--max_seq_len") == str(8192 + 1024 + 256)
    # context servers: one step takes each rank's priced prompt whole (no chunked prefill), and
    # they run without the overlap scheduler, as TensorRT-LLM's disaggregated examples do
    prefill = [c for c in servers if one(c, "--tp_size") == "4"]
    assert all(one(c, "--max_num_tokens") == "8192" for c in prefill)        # 1 prompt of 8,192 a step
    assert "# paraplan: prefill worker options as priced (stack trtllm-1)\nenable_attention_dp: true\n" \
        "disable_overlap_scheduler: true" in script
    assert "enable_attention_dp: true" in script and "cache_transceiver_config:" in script
    assert "context_servers:\n  num_instances: 3" in script and "generation_servers:\n  num_instances: 1" in script
    # no published checkpoint stores every GEMM in NVFP4 (NVIDIA's keep some attention 16-bit)
    assert 'MODEL="${MODEL:?set MODEL to a deepseek-r1 checkpoint storing nvfp4' in script
    assert "trtllm-serve disaggregated" in script.replace(" \\\n      ", " ")


def test_placement_packs_workers_on_hosts_without_sharing_a_gpu():
    lay = WorkerLayout(tp=2, batch=8)
    workers, hosts = placement([("agg", lay, 7)], 8)
    assert hosts == 2
    used = [(w.first_host, g) for w in workers for g in w.gpu_ids]
    assert len(used) == len(set(used)) == 14
    # ten ports apart (SGLang's attention-DP sockets take port + 233 .. 239)
    assert [w.port for w in workers] == [8000, 8010, 8020, 8030, 8000, 8010, 8020]
    big = WorkerLayout(tp=8, adp=2, moe_tp=1, moe_ep=16, batch=8)
    workers, hosts = placement([("prefill", lay, 1), ("decode", big, 1)], 8)
    assert hosts == 3 and workers[1].first_host == 1 and workers[1].hosts == 2
    with pytest.raises(InputError) as err:
        placement([("agg", WorkerLayout(tp=12, batch=1), 1)], 8)
    assert err.value.field == "agg.gpus"


def test_engines_refuse_layouts_they_cannot_run():
    ctx, dep, rep = deployment("qwen3-32b", "dgx-h100", "vllm", "fp8", mode="disagg",
                               prefill=WorkerLayout(tp=1, batch=1), decode=WorkerLayout(tp=4, batch=64))
    assert refusal(launch_of(ctx, dep, rep.metrics)).field == "--mode"
    # TensorRT-LLM attention-DP ranks are one GPU: the simulator refuses tp 2 x adp 4 (stack input
    # attention_dp_with_tp), and so does the export of such a deployment built by hand
    with pytest.raises(InputError) as err:
        deployment("deepseek-r1", "dgx-b200", "trtllm", "nvfp4", layout=WorkerLayout(tp=2, adp=4, moe_tp=1, moe_ep=8, batch=32))
    assert err.value.field == "--adp" and "attention_dp_with_tp" in err.value.message
    ctx = ServingContext.build("deepseek-r1", "dgx-b200", "trtllm", "nvfp4", "nvfp4")
    dep = Deployment(model="deepseek-r1", system="dgx-b200", backend="trtllm-1", dense_format="nvfp4",
                     expert_format="nvfp4", layout=WorkerLayout(tp=2, adp=4, moe_tp=1, moe_ep=8, batch=32))
    metrics = {"ttft_s": 1.0, "tpot_s": 0.02, "tokens_per_s_per_gpu": 1000.0}
    err = refusal(launch_of(ctx, dep, metrics))
    assert err.field == "--adp" and "tp 8 with adp 1, or tp 1 with adp 8" in err.fix
    with pytest.raises(InputError):
        emit_serving(ctx, dep, metrics)


def test_model_line_names_a_checkpoint_only_where_it_stores_the_priced_formats():
    assert CHECKPOINTS[("llama3.1-8b", "fp8", "fp8")] == "nvidia/Llama-3.1-8B-Instruct-FP8"
    # Kimi-K2.5 as released (int4 weight-only experts, the rest bf16): the formats its preset defaults to
    assert CHECKPOINTS[("kimi-k2.5", "bf16", "int4_wo")] == "moonshotai/Kimi-K2.5"
    assert CHECKPOINTS[("minimax-m2.5", "fp8_block", "fp8_block")] == "MiniMaxAI/MiniMax-M2.5"
    ctx, dep, rep = deployment("kimi-k2.5", "hgx-h200", "vllm", "bf16", "int4_wo",
                               layout=WorkerLayout(adp=8, moe_ep=8, moe_tp=1, batch=16))
    assert 'MODEL="${MODEL:-moonshotai/Kimi-K2.5}"' in emit_launch(launch_of(ctx, dep, rep.metrics))
    # fp8 Llama-3.1-70B: vLLM quantises the 16-bit release at load time, TensorRT-LLM cannot
    for backend, online in (("vllm", True), ("sglang", True), ("trtllm", False)):
        ctx, dep, rep = deployment("llama3.1-70b", "dgx-h100", backend, "fp8", layout=WorkerLayout(tp=4, batch=32))
        launch = launch_of(ctx, dep, rep.metrics)
        assert launch.online_fp8 is online
        script = emit_launch(launch)
        if online:
            assert 'MODEL="${MODEL:-meta-llama/Llama-3.1-70B-Instruct}"' in script
            assert "--quantization fp8" in script.replace(" \\\n      ", " ")
        else:
            assert "MODEL:?set MODEL to a llama3.1-70b checkpoint storing fp8" in script


def test_cli_serve_plan_emit_writes_the_runnable_best(tmp_path):
    out = tmp_path / "launch.sh"
    res = run("serve", "plan", "-m", "qwen3-32b", "-s", "dgx-h100", "-n", "16", "--isl", "4096", "--osl", "512",
              "--ttft-ms", "2000", "--tpot-ms", "40", "--emit", "--out", out)
    assert res.exit_code == 0, res.output
    script = out.read_text()
    assert script.startswith("#!/usr/bin/env bash") and "vllm serve" in script.replace(" \\\n      ", " ")
    # the vLLM winner is disaggregated, which vLLM cannot launch: the note says what was given up
    assert "best layout vllm can launch" in res.stderr


def test_cli_emit_refuses_json_beside_it():
    one_line_error(run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--emit", "--json"), "--emit")
    one_line_error(run("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8", "--emit", "--csv"), "--emit")


# --------------------------------------------------------------------------------------------
# the export matrix against the engines' real parsers (tools/verify_serving_exports.py)
# --------------------------------------------------------------------------------------------

VERIFIED = json.loads((Path(serving_matrix.__file__).with_name("serving_exports_verified.json")).read_text())
RECORDED = {c["id"]: c for c in VERIFIED["cases"]}
MATRIX = list(serving_matrix.launches())


@pytest.mark.parametrize("case_id, ctx, launch", MATRIX, ids=[m[0] for m in MATRIX])
def test_every_matrix_export_passes_the_engines_interface_table_and_is_valid_bash(tmp_path, case_id, ctx, launch):
    script = emit_launch(launch)                 # raises if a flag or YAML key is not in the table
    for argv in engine_commands(launch):
        assert command_problems(launch.framework, argv) == []
    if shutil.which("bash"):
        path = tmp_path / "launch.sh"
        path.write_text(script)
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def _worker_argvs(launch):
    """(worker, argv without the program) per engine command, in engine_commands' order."""
    from paraplan.exports.serving import engine_module
    mod = engine_module(launch.framework)
    skip = len(PROGRAMS[launch.framework])
    for w in launch.workers:
        for node in range(w.hosts):
            argv = mod.worker_command(launch, w, node)
            if argv:
                yield w, node, serving_matrix.concrete(argv)[skip:]


@pytest.mark.parametrize("case_id, ctx, launch", [m for m in MATRIX if m[2].framework in ("vllm", "sglang")],
                         ids=[m[0] for m in MATRIX if m[2].framework in ("vllm", "sglang")])
def test_matrix_exports_are_the_commands_the_real_parsers_accepted_and_mean_the_plan(case_id, ctx, launch):
    for k, (w, node, argv) in enumerate(_worker_argvs(launch)):
        rec = RECORDED.get(f"{case_id}#{k}")
        assert rec is not None and rec["argv"] == argv, \
            f"{case_id}#{k}: the export changed since it was verified; rerun tools/verify_serving_exports.py"
        assert rec["accepted"], rec["error"]
        f = rec["fields"]
        if launch.framework == "vllm":
            assert rec["post_parse"]["ok"], rec["post_parse"]            # validate + AsyncEngineArgs built
            assert (f["tensor_parallel_size"], f["pipeline_parallel_size"], f["data_parallel_size"]) == (w.tp, w.pp, w.adp)
            assert f["enable_expert_parallel"] == (launch.moe and w.moe_ep > 1)
            assert f["max_num_batched_tokens"] == ctx.token_budget and f["max_num_seqs"] == launch.max_running_requests
            assert f["gpu_memory_utilization"] == pytest.approx(ctx.behaviour.gpu_memory_fraction)
            assert f["kv_cache_dtype"] == {"fp8": "fp8", "bf16": "bfloat16", "fp16": "float16"}[launch.kv_cache_dtype]
            assert f["quantization"] == ("fp8" if launch.online_fp8 else None)
            # vLLM counts graph sizes in tokens: the priced batch x (1 + the drafts a request verifies)
            assert f["max_model_len"] == 2048 + 256
            assert f["max_cudagraph_capture_size"] == ctx.behaviour.cuda_graph_max_batch * (1 + ctx.speculative_tokens)
            # the drafts the plan priced: K tokens from the model's MTP module or an EAGLE-3 head
            spec = f["speculative_config"]
            if ctx.speculative_tokens == 0:
                assert spec is None
            else:
                assert spec["num_speculative_tokens"] == ctx.speculative_tokens
                assert spec["method"] == ("mtp" if ctx.draft_model == "mtp" else "eagle3")
                assert (spec.get("model") is None) == (ctx.draft_model == "mtp")
            if w.hosts > 1:       # the data-parallel ranks split over the hosts, the first host the head
                assert f["data_parallel_size_local"] * w.hosts == w.adp and f["data_parallel_address"] == "10.0.0.1"
        else:
            # SGLang: tp_size the stage's GPUs, attention DP within it, experts over ep_size ranks
            assert (f["tp_size"], f["pp_size"], f["attn_dp_size"], f["ep_size"]) == \
                (w.tp * w.adp, w.pp, w.adp, w.moe_ep if launch.moe else 1)
            if w.role != "prefill":
                assert f["max_running_requests"] == (launch.max_running_requests or w.batch) * w.adp
            # SGLang divides the chunk size by attn_dp_size: the aggregated and decode workers' is
            # the stack's (priced divided), a prefill worker's its priced prompts a step per group
            if w.role == "prefill":
                assert f["chunked_prefill_size"] == f["max_prefill_tokens"] == w.batch * 1024 * w.adp
            else:
                assert f["chunked_prefill_size"] == ctx.token_budget
            assert ctx.behaviour.rank_token_budget(ctx.token_budget, w.adp) == ctx.token_budget // w.adp
            hbm = ctx.cluster.gpu.hbm_bytes
            assert f["mem_fraction_static"] == pytest.approx((hbm - ctx.behaviour.runtime_reserved_gib * 2**30) / hbm,
                                                             abs=5e-4)
            assert f["disaggregation_mode"] == ("null" if w.role == "agg" else w.role)
            assert f["cuda_graph_max_bs_decode"] == ctx.behaviour.cuda_graph_max_batch
            # formats: the KV cache's dtype (16-bit: the model's, stated as --dtype), fp8 quantised at load
            assert f["kv_cache_dtype"] == {"fp8": "fp8_e4m3", "bf16": "bfloat16", "fp16": "auto"}[launch.kv_cache_dtype]
            if launch.kv_cache_dtype == "fp16":
                assert f["dtype"] == "float16"
            assert f["quantization"] == ("fp8" if launch.online_fp8 else None)
            assert f["context_length"] == 2048 + 256
            # drafts: SGLang runs MTP as EAGLE over the model's own module, K steps of top-1, K + 1 tokens verified
            if ctx.speculative_tokens == 0:
                assert f["speculative_algorithm"] is None
            else:
                k = ctx.speculative_tokens
                assert f["speculative_algorithm"] == ("EAGLE" if ctx.draft_model == "mtp" else "EAGLE3")
                assert (f["speculative_num_steps"], f["speculative_eagle_topk"], f["speculative_num_draft_tokens"]) == \
                    (k, 1, k + 1)
                assert (f["speculative_draft_model_path"] is None) == (ctx.draft_model == "mtp")
            if w.hosts > 1:
                assert (f["nnodes"], f["node_rank"]) == (w.hosts, node)


def test_the_record_names_the_releases_the_table_pins():
    assert VERIFIED["releases"] == {"vllm": "vllm 0.19.1", "sglang": "sglang 0.5.23"}
    assert len(RECORDED) == sum(1 for m in MATRIX if m[2].framework in ("vllm", "sglang")
                                for _ in _worker_argvs(m[2]))


# --------------------------------------------------------------------------------------------
# what the engines would do with a script that looked right (review, 2026-12-04)
# --------------------------------------------------------------------------------------------

def test_sglang_online_fp8_needs_the_16_bit_weights_to_fit_first():
    # Qwen3-235B on 2 H200 (attention DP 2, experts over both): 470 GB of 16-bit weights, ~235 GB
    # a GPU before SGLang quantises them; vLLM streams them layer by layer and can
    for backend, online in (("sglang", False), ("vllm", True)):
        ctx, dep, rep = deployment("qwen3-235b-a22b", "hgx-h200", backend, "fp8",
                                   layout=WorkerLayout(tp=1, adp=2, moe_tp=1, moe_ep=2, batch=4))
        launch = launch_of(ctx, dep, rep.metrics)
        assert launch.online_fp8 is online
        if not online:
            assert "SGLang loads the 16-bit weights before quantising them" in emit_launch(launch)


def test_a_prompt_longer_than_the_budget_is_one_step_where_the_engine_does_not_chunk():
    # TensorRT-LLM without chunked prefill refuses a prompt over max_num_tokens; the model prices
    # one whole 16k prompt a step, so the export allows it
    ctx, dep, rep = deployment("llama3.1-8b", "dgx-h100", "trtllm", "fp8", isl=16384, osl=256,
                               layout=WorkerLayout(tp=1, batch=8))
    (cmd,) = commands(emit_serving(ctx, dep, rep.metrics), ENGINE_PROGRAMS["trtllm"])
    assert one(cmd, "--max_num_tokens") == "16384" and ctx.token_budget == 8192


def test_a_16_bit_kv_cache_on_an_fp8_checkpoint_is_named_or_refused():
    # vLLM: --kv-cache-dtype bfloat16 (auto would take the checkpoint's FP8 KV); TensorRT-LLM
    # documents auto and fp8 only: refused naming the option
    ctx = ServingContext.build("llama3.1-8b", "dgx-h100", "vllm", "fp8", "fp8", "bf16")
    dep = Deployment(model="llama3.1-8b", system="dgx-h100", backend=ctx.stack.name, dense_format="fp8",
                     expert_format="fp8", kv_cache_dtype="bf16", layout=WorkerLayout(tp=1, batch=8))
    (cmd,) = commands(emit_serving(ctx, dep, simulate_serving(dep, ctx).metrics), ENGINE_PROGRAMS["vllm"])
    assert one(cmd, "--kv-cache-dtype") == "bfloat16"
    ctx = ServingContext.build("llama3.1-8b", "dgx-h100", "trtllm", "fp8", "fp8", "bf16")
    with pytest.raises(InputError) as err:
        emit_serving(ctx, dep, simulate_serving(dep, ctx).metrics)
    assert err.value.field == "--kv-cache-dtype"


def test_auto_kv_of_a_16_bit_release_quantised_at_load_is_16_bit_in_the_price_and_the_script():
    # Llama-3.1-70B is a 16-bit release; vLLM / SGLang quantise it with --quantization fp8, which
    # leaves the KV cache at the model dtype: 80 layers x (K, V) x 8 KV heads x 128 x 2 bytes
    from cost_models.kv_cache import kv_bytes_per_token_layer
    for backend, flag in (("vllm", "bfloat16"), ("sglang", "bfloat16")):
        ctx, dep, rep = deployment("llama3.1-70b", "dgx-h100", backend, "fp8", layout=WorkerLayout(tp=4, batch=32))
        assert (ctx.kv_cache_dtype, ctx.kv_bytes) == ("auto", 2)
        assert float(kv_bytes_per_token_layer(ctx.model, 1, ctx.kv_bytes)) * 80 == 80 * 2 * 8 * 128 * 2 == 327_680
        assert float(kv_bytes_per_token_layer(ctx.model, 4, ctx.kv_bytes)) * 80 == 327_680 / 4
        launch = launch_of(ctx, dep, rep.metrics)
        assert launch.online_fp8 and launch.kv_cache_dtype == launch.checkpoint_kv_dtype == "bf16"
        script = emit_launch(launch)
        assert "priced formats: weights fp8, KV cache bf16; the 16-bit checkpoint is quantised" in script
        (cmd,) = commands(script, ENGINE_PROGRAMS[backend])
        assert one(cmd, "--kv-cache-dtype") == flag and one(cmd, "--quantization") == "fp8"
        # the same KV pool holds half the requests of an FP8 KV cache (stated explicitly)
        fp8 = ServingContext.build("llama3.1-70b", "dgx-h100", backend, "fp8", "fp8", "fp8")
        assert fp8.kv_bytes == 1
        halved = simulate_serving(dep, fp8).metrics["max_batch_per_rank"]
        assert rep.metrics["max_batch_per_rank"] in (halved // 2, (halved + 1) // 2)
    res = run("serve", "simulate", "-m", "llama3.1-70b", "-s", "dgx-h100", "--tp", "4", "--batch", "32", "-b", "vllm",
              "--emit")
    assert res.exit_code == 0, res.output
    (cmd,) = commands(res.stdout, ENGINE_PROGRAMS["vllm"])
    assert one(cmd, "--kv-cache-dtype") == "bfloat16" and "KV cache bf16" in res.stdout
    # the API and serve plan price the same KV cache
    from paraplan.serving_api import serving_context
    assert serving_context("llama3.1-70b", "dgx-h100", "vllm", precision="fp8").kv_bytes == 2
    plan = run("serve", "plan", "-m", "llama3.1-70b", "-s", "dgx-h100", "-n", "4", "-b", "vllm", "--mode", "agg",
               "--json")
    assert plan.exit_code == 0, plan.output
    best = json.loads(plan.stdout)["best"]
    stated = {kv: json.loads(run("serve", "simulate", "-m", "llama3.1-70b", "-s", "dgx-h100", "-b", "vllm", "--tp",
                                 str(best["tp"]), "--kv-cache-dtype", kv, "--json").stdout)["max_batch_per_rank"]
              for kv in ("bf16", "fp8")}
    assert best["max_batch_per_rank"] == stated["bf16"] < stated["fp8"]


def test_auto_kv_of_a_quantised_export_is_the_fp8_its_config_names():
    from dataclasses import replace
    from model_specs.catalog import load_model
    # NVIDIA's ModelOpt export of Llama-3.1-8B (a known checkpoint): FP8 KV, no load-time quantisation
    ctx, dep, rep = deployment("llama3.1-8b", "dgx-h100", "vllm", "fp8", layout=WorkerLayout(tp=1, batch=8))
    launch = launch_of(ctx, dep, rep.metrics)
    assert (ctx.kv_bytes, launch.checkpoint, launch.online_fp8) == (1, "nvidia/Llama-3.1-8B-Instruct-FP8", False)
    assert launch.kv_cache_dtype == launch.checkpoint_kv_dtype == "fp8"
    # a model whose release stores per-tensor FP8 (config.json quant_algo FP8): served as stored
    stored = replace(load_model("llama3.1-70b"), checkpoint_format="fp8")
    ctx = ServingContext.build(stored, "dgx-h100", "vllm", "fp8", "fp8")
    assert (ctx.kv_cache_dtype, ctx.kv_bytes) == ("fp8", 1)
    # the caller states the checkpoint is a quantised export: never the 16-bit release quantised online
    ctx = ServingContext.build("llama3.1-70b", "dgx-h100", "vllm", "fp8", "fp8", prequantised=True)
    dep = Deployment(model="llama3.1-70b", system="dgx-h100", backend=ctx.stack.name, dense_format="fp8",
                     expert_format="fp8", layout=WorkerLayout(tp=4, batch=32))
    launch = launch_of(ctx, dep, simulate_serving(dep, ctx).metrics)
    assert (ctx.kv_bytes, launch.online_fp8, launch.checkpoint) == (1, False, None)
    assert launch.kv_cache_dtype == launch.checkpoint_kv_dtype == "fp8"
    # TensorRT-LLM cannot quantise at load time: its FP8 Llama-3.1-70B is a quantised export
    assert ServingContext.build("llama3.1-70b", "dgx-h100", "trtllm", "fp8", "fp8").kv_bytes == 1
    # a stack whose auto never reads the checkpoint stays 16-bit either way
    assert ServingContext.build("llama3.1-8b", "dgx-h100", "vllm-0.11", "fp8", "fp8").kv_bytes == 2


def test_the_serving_validation_states_its_runs_served_quantised_checkpoints():
    # aiconfigurator's fp8 rows of Llama-3.1-70B on vLLM ran NVIDIA's FP8 export: an FP8 KV cache
    import pandas as pd
    from paraplan.validation import serving as validation
    df = pd.read_csv(Path(validation.__file__).parents[1] / "data" / "validation" / "serving_runs.csv")
    groups = validation.prepare(df).groups
    assert groups and all(g.context.prequantised for g in groups)
    fp8 = [g.context for g in groups if g.context.model.name == "llama3.1-70b" and g.context.stack.framework == "vllm"
           and g.context.dense_format == "fp8"]
    assert fp8 and all(c.kv_bytes == 1 for c in fp8)


def test_the_scripts_release_note_reads_the_requested_backend_version():
    # the flags are vLLM 0.19.1's, SGLang 0.5.23's, TensorRT-LLM 1.x's (its main-branch source):
    # a requested release of another line is said in the script and on stderr, whichever profile
    # priced it (sglang 0.4.6 is priced by sglang-0.5, which covers 0.5.23, and said nothing)
    def note(*args):
        res = run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", *args, "--emit")
        assert res.exit_code == 0, res.output
        said = [ln[len("# note: "):] for ln in res.stdout.splitlines() if ln.startswith("# note: priced")]
        assert [f"note: {n}" for n in said] == [ln for ln in res.stderr.splitlines() if ln.startswith("note: priced")]
        return said[0] if said else ""
    assert note("-b", "sglang", "--backend-version", "0.4.6") == (
        "priced with stack sglang-0.5 (releases 0.5); the flags are sglang 0.5.23's: on 0.4.6 check them against "
        "its --help")
    for old in ("0.8.0", "0.5.0"):
        assert note("-b", "trtllm", "--backend-version", old) == (
            "priced with stack trtllm-1 (releases 1.0, 1.1, 1.2, 1.3, gpt-oss-dev); the flags are trtllm 1.x's: "
            f"on {old} check them against its --help")
    for same in (("-b", "trtllm", "--backend-version", "1.2.0"), ("-b", "trtllm"), ("-b", "sglang", "--backend-version",
                 "0.5.9"), ("-b", "vllm", "--backend-version", "0.19.0"), ("-b", "vllm")):
        assert note(*same) == "", same
    assert note("-b", "vllm", "--backend-version", "0.12.0").endswith("vllm 0.19.1's: on 0.12.0 check them against "
                                                                      "its --help")


def test_block_fp8_experts_are_never_split_below_a_128_wide_block():
    # Qwen3-235B's 1,536-wide experts over 8 GPUs: 192 each, which vLLM and SGLang refuse to shard
    with pytest.raises(InputError) as err:
        deployment("qwen3-235b-a22b", "hgx-h200", "vllm", "fp8_block", layout=WorkerLayout(tp=8, moe_tp=8, batch=8))
    assert err.value.field == "--moe-tp" and "128-wide scale blocks" in err.value.message
    from planners.serving.space import worker_layouts
    from model_specs.catalog import load_model
    lay = worker_layouts(load_model("qwen3-235b-a22b"), 8, 8, False, None, "fp8_block")
    assert len(lay) and ((1536 / lay[:, 3]) % 128 == 0).all()
    assert (worker_layouts(load_model("qwen3-235b-a22b"), 8, 8, False, None, "fp8")[:, 3] == 8).any()


def test_a_script_of_thousands_of_workers_is_refused_not_rendered_for_minutes():
    one_line_error(run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--workers", "5000", "--emit"),
                   "--emit", "5,000 engine instances")


def test_sglang_attention_dp_with_tensor_parallel_ranks_is_refused_for_moe_dense_layers():
    # SGLang runs DeepSeek's dense MLPs over all tp x adp GPUs or per rank (--moe-dense-tp-size
    # None or 1), never over the attention tp 2 the model prices
    ctx, dep, rep = deployment("deepseek-r1", "dgx-b200", "sglang", "fp8_block",
                               layout=WorkerLayout(tp=2, adp=4, moe_tp=2, moe_ep=4, batch=32))
    err = refusal(launch_of(ctx, dep, rep.metrics))
    assert err.field == "--tp" and "tp 1 with adp 8, or tp 8 with adp 1" in err.fix


def test_fp16_weights_keep_an_fp16_kv_cache_and_unwritten_stack_settings_are_refused(tmp_path):
    ctx, dep, rep = deployment("llama3.1-8b", "dgx-h100", "vllm", "fp16", layout=WorkerLayout(tp=1, batch=8))
    (cmd,) = commands(emit_serving(ctx, dep, rep.metrics), ENGINE_PROGRAMS["vllm"])
    assert one(cmd, "--dtype") == "float16" and one(cmd, "--kv-cache-dtype") == "float16"
    import re as _re
    from hardware_specs.stack_spec import StackSpec  # noqa: F401  (the file below is a stack file)
    text = (Path(__file__).parent.parent / "hardware_specs" / "stacks" / "sglang-0.5.yaml").read_text()
    text = text.replace("name: sglang-0.5", "name: sglang-held", 1)
    text = _re.sub(r"(  recv_interval_steps:\n    value: )1", r"\g<1>10", text)
    stack = tmp_path / "held.yaml"
    stack.write_text(text)
    one_line_error(run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "-b", stack, "--emit"),
                   "--emit", "recv_interval_steps 10")


def test_a_script_for_a_release_the_priced_profile_does_not_cover_says_so():
    # priced with vllm-0.11 (0.11-0.13), written with vLLM 0.19.1's flags: said in the script and
    # on stderr; the newest profile covers the pinned release and says nothing
    res = run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "-b", "vllm", "--backend-version", "0.12.0",
              "--emit")
    assert res.exit_code == 0, res.output
    assert "# note: priced with stack vllm-0.11 (releases 0.11, 0.12, 0.13); the flags are vllm 0.19.1's" in res.stdout
    assert "note: priced with stack vllm-0.11" in res.stderr
    res = run("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "-b", "vllm", "--emit")
    assert "# note: priced" not in res.stdout and "note: priced" not in res.stderr


def test_serve_plan_says_whether_its_winner_can_be_launched():
    ok = run("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8")
    assert "      its vllm launch script: add --emit (to this plan or to that command)" in ok.stdout
    # vLLM has no prefill / decode router: the headline is the best layout it can launch, the
    # disaggregated winner named beside it as the model's best vLLM cannot launch
    no = run("serve", "plan", "-m", "qwen3-32b", "-s", "dgx-h100", "-n", "16", "--isl", "4096", "--osl", "512",
             "--ttft-ms", "2000", "--tpot-ms", "40")
    assert "best vllm can launch: aggregated" in no.stdout
    assert ("the model's best, which vllm cannot launch as priced (--mode: vLLM ships no router for disaggregated "
            "prefill and decode workers): disagg prefill") in no.stdout


def _launchable_agg_best(model, system, gpus, ttft_ms, tpot_ms):
    """The aggregated candidate meeting the SLO with the most tokens/s/GPU: what vLLM, with no
    prefill / decode router, can launch at best (its README's disaggregated serving needs a proxy
    the project does not ship: vllm/docs/features/disagg_prefill.md)."""
    from paraplan.serving_api import serve_plan
    plan = serve_plan(model, system, gpus, ttft_ms=ttft_ms, tpot_ms=tpot_ms, backend="vllm")
    c = plan.candidates[plan.candidates["meets_slo"].astype(bool)]
    agg = c[c["mode"] == "agg"]
    # the search's winner: the most tokens/s/GPU meeting the SLO, whatever the engine launches
    return c.loc[c.tokens_per_s_per_gpu.idxmax()], agg.loc[agg.tokens_per_s_per_gpu.idxmax()]


def test_serve_plan_headlines_the_best_layout_vllm_can_launch_and_names_the_better_one_it_cannot():
    # Llama-3.1-70B on 8 H100 at TPOT 20 ms: the search's winner is disaggregated (vLLM cannot
    # launch it); the headline, --json's best and --emit are the best aggregated layout
    winner, agg = _launchable_agg_best("llama3.1-70b", "dgx-h100", 8, 1000.0, 20.0)
    assert winner["mode"] == "disagg" and winner.tokens_per_s_per_gpu > agg.tokens_per_s_per_gpu
    args = ("serve", "plan", "-m", "llama3.1-70b", "-s", "dgx-h100", "-n", "8", "--tpot-ms", "20", "-b", "vllm")
    text = run(*args).stdout
    head = text.split("best vllm can launch: ", 1)[1].splitlines()
    assert head[0].startswith(f"aggregated, {int(agg.workers)} x worker {agg.layout}, batch {int(agg.batch)} per rank")
    assert f"{agg.tokens_per_s_per_gpu:,.0f} tokens/s/GPU" in head[1]
    assert "its vllm launch script: add --emit" in head[3]
    assert (f"the model's best, which vllm cannot launch as priced (--mode: " in head[4]
            and f"{winner.tokens_per_s_per_gpu:,.0f} tokens/s/GPU "
                f"({winner.tokens_per_s_per_gpu / agg.tokens_per_s_per_gpu:.2f}x more than this one)" in head[4])
    assert "\nbest:" not in text and "cannot launch it as priced" not in text
    out = json.loads(run(*args, "--json").stdout)
    assert out["best"]["mode"] == "agg" and out["best"]["tokens_per_s_per_gpu"] == agg.tokens_per_s_per_gpu
    refused = out["engine_refused_best"]
    assert refused["mode"] == "disagg" and refused["tokens_per_s_per_gpu"] == winner.tokens_per_s_per_gpu
    assert refused["tokens_per_s"] == pytest.approx(winner.tokens_per_s_per_gpu * winner.gpus_used, rel=1e-12)
    assert refused["engine_refuses"].startswith("--mode: vLLM ships no router")
    # a winner vLLM launches has nothing beside it
    assert json.loads(run("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "-n", "8",
                          "--json").stdout)["engine_refused_best"] is None


def _bench_words(script: str) -> list[str]:
    """The words of the script's (commented) TensorRT-LLM benchmark command."""
    (line,) = [ln for ln in script.splitlines() if "tensorrt_llm.serve.scripts.benchmark_serving" in ln]
    return shlex.split(line.lstrip("#").strip())


def test_trtllm_benchmark_sends_the_priced_prompt_ids_so_a_context_server_takes_them_whole():
    # a context server's --max_num_tokens is exactly its priced prompts (1 x 1,024 a step per rank
    # here, no chunked prefill); the benchmark's random ids, decoded to text and re-tokenised by the
    # server with a BOS, would be 1,025 tokens and refused: it must send the ids themselves
    ctx, dep, rep = deployment("deepseek-r1", "gb200-nvl72", "trtllm", "nvfp4", mode="disagg", isl=1024,
                               prefill=WorkerLayout(tp=1, adp=4, moe_tp=1, moe_ep=4, batch=1), prefill_workers=2,
                               decode=WorkerLayout(tp=1, adp=16, moe_tp=1, moe_ep=16, batch=64), decode_workers=1)
    assert not ctx.behaviour.chunked_prefill
    script = emit_serving(ctx, dep, rep.metrics)
    servers = [c for c in commands(script, ENGINE_PROGRAMS["trtllm"]) if "--tp_size" in c]
    prefill = [c for c in servers if one(c, "--tp_size") == "4"]
    assert len(prefill) == 2 and all(one(c, "--max_num_tokens") == str(1 * 1024) for c in prefill)
    words = _bench_words(script)
    assert "--random-ids" in words and "--tokenize-on-client" in words
    assert words[words.index("--random-input-len") + 1] == "1024"
    # an aggregated engine without chunked prefill: one whole 16k prompt a step, sent as 16,384 ids
    ctx, dep, rep = deployment("llama3.1-8b", "dgx-h100", "trtllm", "bf16", isl=16384, osl=256,
                               layout=WorkerLayout(tp=1, batch=4))
    script = emit_serving(ctx, dep, rep.metrics)
    (cmd,) = commands(script, ENGINE_PROGRAMS["trtllm"])
    assert one(cmd, "--max_num_tokens") == "16384"
    words = _bench_words(script)
    assert "--tokenize-on-client" in words and words[words.index("--random-input-len") + 1] == "16384"
