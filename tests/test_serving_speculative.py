"""Speculative decoding with the model's MTP module: accepted tokens per step (Leviathan et al.
2023), the verification step and the draft passes by hand, the closed loop's TPOT, memory, the
CLI's refusals and the engines' launch settings."""
import dataclasses
import json

import numpy as np
import pytest
import yaml
from cli_results import completed

from cost_models.inference_step import STEP_PARTS, step_time
from cost_models.speculative import MTP_ACCEPTANCE_PRIOR, expected_tokens_per_step
from hardware_specs.catalog import load_cluster
from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.serving_efficiency import ServingEfficiency
from hardware_specs.stack_spec import StackSpec
from model_specs.catalog import load_model
from simulator.serving.context import ServingContext
from simulator.serving.deployment import Deployment, WorkerLayout
from simulator.serving.simulate import simulate_serving

#: no fixed per-kernel time, no host time: a decode step is pure roofline
PURE = ServingEfficiency(generation="hopper", decode_hbm_fraction=0.8, gemm_peak_fraction=0.6,
                         attention_peak_fraction=0.5, kernel_fixed_s=0.0, arrival_sync_chunked=1.0)
QUIET = StackSpec(name="quiet", framework="test", serving=ServingBehaviour(host_step_s=0.0, host_launch_s=0.0))


def _llama_with_mtp():
    """Llama-3.1-8B with one MTP module (a dense model, so every token reads the same weights)."""
    return dataclasses.replace(load_model("llama3.1-8b"), mtp_layers=1)


@pytest.mark.parametrize("k, p, expected", [
    (0, 0.85, 1.0),                      # no drafts: one token a step
    (1, 0.85, 1.85),                     # 1 + p
    (3, 0.8, 1 + 0.8 + 0.64 + 0.512),    # 1 + p + p^2 + p^3 = 2.952
    (2, 1.0, 3.0),                       # every draft accepted: k + 1
    (4, 0.0, 1.0),                       # none accepted: the main model's token alone
])
def test_tokens_per_step_is_the_geometric_sum_of_acceptances(k, p, expected):
    assert float(expected_tokens_per_step(k, p)) == pytest.approx(expected, rel=1e-12)


def _h100_step_args(decodes: float, context: float):
    """``step_time``'s arguments for the Llama-8B with an MTP module on one H100 (bf16, 16-bit KV,
    no prompt tokens): ``decodes`` requests of ``context`` tokens each."""
    cluster = load_cluster("dgx-h100")
    return cluster, (_llama_with_mtp(), cluster, PURE, QUIET.serving, "bf16", "bf16", 2.0, 1, 1, 1, 1, 1, 0.0, 0.0,
                     decodes, context)


def test_verification_of_one_draft_at_batch_1_reads_the_weights_once_and_the_draft_pass_reads_one_layer_and_the_head():
    cluster, args = _h100_step_args(1.0, 1.0)
    plain = step_time(*args)
    spec = step_time(*args, draft_tokens=1)
    # two tokens through a memory-bound model: the same weight bytes (their activations, < 1%)
    assert spec["step_s"] - spec["draft_s"] == pytest.approx(plain["step_s"], rel=0.01)
    # the draft pass by hand: the 2h x h projection, one layer (q and o h x h, k and v h x 1024,
    # gate/up/down 3 h f) and the LM head V x h, all bf16, read once at the achieved bandwidth
    h, f, V = 4096, 14336, 128256
    draft_bytes = 2.0 * (2 * h * h + (2 * h * h + 2 * h * 1024 + 3 * h * f) + V * h)
    expected = draft_bytes / (cluster.gpu.hbm_bw_bytes_per_s * PURE.decode_hbm_fraction)
    assert float(spec["draft_s"]) == pytest.approx(expected, rel=0.01)
    assert expected == pytest.approx(1.554e9 / (3.35e12 * 0.8), rel=0.001)    # 0.777e9 weights x 2 bytes
    # the parts still add up to the step
    assert sum(float(spec[p]) for p in STEP_PARTS) == pytest.approx(float(spec["step_s"]), rel=1e-9)


def test_verifying_k_drafts_scales_the_gemm_rows_but_reads_the_kv_cache_once():
    # a long context at batch 64: the KV read is large; the GEMMs see 64 (k + 1) rows
    _, args = _h100_step_args(64.0, 8192.0)
    one = step_time(*args)
    three = step_time(*args, draft_tokens=2)
    # attention: projections of 3x the rows, the same cache bytes; never 3x the one-token step
    assert float(three["attention_s"]) < 1.5 * float(one["attention_s"])
    assert float(three["attention_s"]) > float(one["attention_s"])
    # the MLP at 192 rows is still bandwidth-bound on H100 (2 x 192 FLOPs a 2-byte weight, far
    # below the ~590 FLOP/byte ridge): the same weights, 3x the rows' activations (h in, 2f out)
    h, f = 4096, 14336
    weights, rows = 3 * h * f * 2.0, (h + 2 * f) * 2.0
    assert float(three["mlp_s"]) / float(one["mlp_s"]) == pytest.approx((weights + 192 * rows) / (weights + 64 * rows),
                                                                        rel=1e-9)


def _deployment(**extra):
    return Deployment(model="deepseek-r1", system="dgx-b200", backend="trtllm", isl=1024, osl=1024,
                      dense_format="fp8_block", expert_format="fp8_block",
                      layout=WorkerLayout(tp=8, moe_tp=8, moe_ep=1, batch=1), **extra)


def test_one_client_sees_the_step_divided_by_the_tokens_it_yields():
    rep = simulate_serving(_deployment(speculative_tokens=2, draft_acceptance=0.7))
    step = sum(rep.decode_breakdown_s.values())
    # one client: no other prompts slow its decode, TPOT = step / (tokens a step over its 1023
    # decoded tokens): E(2, 0.7) = 2.19 a step uncapped, and the renewal limit of the capped
    # decode E[S(n)] = n / E + c, c = p / (1 - r) - 3 r (1 - p) / (1 - r)^2 with r = 0.7^3 = 0.343
    # (cost_models.speculative): c = 0.35028, 1023 / (467.1233 + 0.3503) = 2.18836 a step
    assert rep.context.tokens_per_step == pytest.approx(2.19)
    c = 0.7 / 0.657 - 3 * 0.343 * 0.3 / 0.657 ** 2
    assert c == pytest.approx(0.35028, abs=1e-5)
    kept = 1023 / (1023 / 2.19 + c)
    assert rep.context.tokens_per_step_at(1024) == pytest.approx(kept, rel=1e-12)
    assert kept == pytest.approx(2.18836, abs=1e-5)
    assert rep.metrics["tpot_s"] == pytest.approx(step / kept, rel=1e-9)
    assert "decode_draft_s" in rep.decode_breakdown_s and rep.decode_breakdown_s["decode_draft_s"] > 0


def test_zero_drafts_is_the_plain_engine_and_the_drafter_adds_its_weights_and_kv():
    plain = simulate_serving(_deployment())
    zero = simulate_serving(_deployment(speculative_tokens=0))
    assert zero.metrics == plain.metrics
    assert "decode_draft_s" not in plain.decode_breakdown_s
    spec = simulate_serving(_deployment(speculative_tokens=1))
    # DeepSeek-R1's MTP module: a MoE layer split over 8 GPUs (256 experts x 3 x 7168 x 2048 at
    # one byte) plus its 2h x h projection; about 1.4 GiB a GPU
    grown = spec.memory_bytes["weights_bytes"] - plain.memory_bytes["weights_bytes"]
    assert grown == pytest.approx((256 * 3 * 7168 * 2048 / 8 + 2 * 7168 * 7168) * 1.0, rel=0.06)
    # its own KV cache (one more layer of 61) and the weights leave room for fewer requests
    assert spec.metrics["max_batch_per_rank"] < plain.metrics["max_batch_per_rank"]


@pytest.mark.parametrize("batch", [1, 16, 128])
def test_a_higher_acceptance_never_slows_decoding_and_none_accepted_always_does(batch):
    def run(**extra):
        dep = _deployment(**extra).with_(layout=WorkerLayout(tp=8, moe_tp=8, moe_ep=1, batch=batch))
        return simulate_serving(dep).metrics

    plain = run()
    tpots = [run(speculative_tokens=2, draft_acceptance=p)["tpot_s"] for p in (0.0, 0.3, 0.6, 0.9, 1.0)]
    assert all(a >= b for a, b in zip(tpots, tpots[1:]))
    # drafts that are never accepted are pure extra work: one token a step, a longer step
    assert tpots[0] > plain["tpot_s"]


def test_context_refuses_drafts_without_an_mtp_module_and_acceptances_outside_0_1():
    from hardware_specs.errors import InputError
    with pytest.raises(InputError, match="no multi-token-prediction module"):
        ServingContext.build("llama3.1-70b", "dgx-h100", "vllm", "bf16", speculative_tokens=1)
    for bad in (float("nan"), -0.1, 1.5, float("inf")):
        with pytest.raises(InputError, match="must be a probability"):
            ServingContext.build("deepseek-r1", "dgx-b200", "vllm", "fp8_block", speculative_tokens=1,
                                 draft_acceptance=bad)
    ctx = ServingContext.build("deepseek-r1", "dgx-b200", "vllm", "fp8_block", speculative_tokens=1)
    assert ctx.acceptance_is_prior and ctx.draft_acceptance == MTP_ACCEPTANCE_PRIOR


def _cli(*args):
    """In-process (``paraplan serve`` keeps a real subprocess test in test_serving_eagle3)."""
    return completed(*args)


@pytest.mark.parametrize("args, field", [
    (("-m", "llama3.1-8b", "--speculative-tokens", "1"), "--speculative-tokens"),
    (("-m", "deepseek-r1", "--tp", "8", "--draft-acceptance", "0.8"), "--draft-acceptance"),
    (("-m", "deepseek-r1", "--tp", "8", "--speculative-tokens", "1", "--draft-acceptance", "nan"), "--draft-acceptance"),
    (("-m", "deepseek-r1", "--tp", "8", "--speculative-tokens", "17"), "--speculative-tokens"),
])
def test_cli_refuses_bad_speculation_in_one_line(args, field):
    out = _cli("serve", "simulate", "-s", "dgx-b200", *args)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"error: {field}:")
    assert "Traceback" not in out.stderr


def test_cli_says_the_acceptance_is_a_prior_and_plan_agrees_with_simulate():
    out = _cli("serve", "simulate", "-m", "deepseek-r1", "-s", "dgx-b200", "-b", "trtllm", "--tp", "8", "--batch", "4",
               "--speculative-tokens", "1")
    assert out.returncode == 0, out.stderr
    assert "unfitted prior" in out.stdout and "1.85 tokens a step" in out.stdout
    plan = _cli("serve", "plan", "-m", "deepseek-r1", "-s", "dgx-b200", "-b", "trtllm", "--gpus", "8", "--isl", "1024",
                "--osl", "1024", "--tpot-ms", "40", "--speculative-tokens", "2", "--draft-acceptance", "0.6", "--json")
    assert plan.returncode == 0, plan.stderr
    j = json.loads(plan.stdout)
    assert j["request"]["speculative_tokens"] == 2 and j["request"]["draft_acceptance"] == 0.6
    # E(2, 0.6) = 1.96 uncapped; over 1023 decoded tokens n / (n / E + c), c = p / (1 - r) -
    # 3 r (1 - p) / (1 - r)^2 with r = 0.6^3 = 0.216: c = 0.34361, 1.95871 a step
    c = 0.6 / 0.784 - 3 * 0.216 * 0.4 / 0.784 ** 2
    assert j["request"]["tokens_per_step"] == pytest.approx(1023 / (1023 / 1.96 + c), rel=1e-12)
    assert j["request"]["tokens_per_step"] == pytest.approx(1.95871, abs=1e-5)
    best = j["best"]
    again = _cli("serve", "simulate", "-m", "deepseek-r1", "-s", "dgx-b200", "-b", "trtllm", "--isl", "1024", "--osl",
                 "1024", "--speculative-tokens", "2", "--draft-acceptance", "0.6", "--json",
                 *(["--tp", best["tp"], "--adp", best["adp"], "--moe-tp", best["moe_tp"], "--moe-ep", best["moe_ep"],
                    "--pp", best["pp"], "--batch", best["batch"], "--workers", best["workers"]]
                   if best["mode"] == "agg" else
                   ["--mode", "disagg"] + [x for side in ("prefill", "decode") for key in ("tp", "adp", "moe_tp", "moe_ep", "pp")
                                            for x in (f"--{side}-{key.replace('_', '-')}", best[f"{side}_{key}"])]
                   + ["--prefill-batch", best["prefill_batch"], "--decode-batch", best["batch"],
                      "--prefill-workers", best["prefill_workers"], "--decode-workers", best["decode_workers"]]))
    assert again.returncode == 0, again.stderr
    sim = json.loads(again.stdout)
    assert sim["tpot_ms"] == pytest.approx(best["tpot_ms"], rel=1e-9)
    assert sim["ttft_ms"] == pytest.approx(best["ttft_ms"], rel=1e-9)
    assert sim["tokens_per_s_per_gpu"] == pytest.approx(best["tokens_per_s_per_gpu"], rel=1e-9)


def test_each_engine_is_told_to_draft_with_the_mtp_module():
    from paraplan.exports.serving import engine_commands
    from paraplan.exports.trtllm_serve import shared_files
    from paraplan.exports.serving_flags import trtllm_yaml_problems
    from paraplan.exports.serving_matrix import launches
    seen = {}
    for case_id, ctx, launch in launches():
        if launch.speculative_tokens and not launch.draft_model_path:      # EAGLE-3: test_serving_eagle3
            seen[launch.framework] = (launch, engine_commands(launch))
    vllm_launch, (argv,) = seen["vllm"]
    i = argv.index("--speculative-config")
    assert json.loads(argv[i + 1]) == {"method": "mtp", "num_speculative_tokens": 2}
    sglang_launch, (argv,) = seen["sglang"]
    got = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--speculative")}
    assert got == {"--speculative-algorithm": "EAGLE", "--speculative-num-steps": "1", "--speculative-eagle-topk": "1",
                   "--speculative-num-draft-tokens": "2"}
    trt_launch, _ = seen["trtllm"]
    (text,) = shared_files(trt_launch).values()
    assert yaml.safe_load(text)["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 3}
    assert trtllm_yaml_problems(text) == []


def test_a_request_with_one_token_left_gains_no_more_from_drafts():
    # osl 2: one token after the first; every draft accepted (E = 4) cannot yield more than it
    # has left, so the longer speculating step never beats the plain one
    dep = _deployment(speculative_tokens=3, draft_acceptance=1.0).with_(osl=2)
    spec, plain = simulate_serving(dep), simulate_serving(_deployment().with_(osl=2))
    assert spec.metrics["latency_s"] > plain.metrics["latency_s"]
    step = sum(spec.decode_breakdown_s.values())
    assert spec.metrics["tpot_s"] == pytest.approx(step, rel=1e-9)       # one token a step


@pytest.mark.parametrize("osl, kept_at_085", [
    # osl 3: two tokens after the first. E[S(2)] = 1 + P(X = 1) E[S(1)] = 1 + 0.15 = 1.15 steps
    (3, 2 / 1.15),
    # osl 4: three left. E[S(3)] = 1 + 0.15 E[S(2)] + 0.85 x 0.15 E[S(1)] = 1 + 0.1725 + 0.1275 = 1.3
    (4, 3 / 1.3),
])
def test_at_a_few_tokens_left_the_step_keeps_the_exact_mean_and_acceptance_never_slows(osl, kept_at_085):
    # the decode of n = osl - 1 tokens takes E[S(n)] steps (cost_models.speculative): at
    # p = 0.85 fewer tokens a step than min(E, n) = n said (1.739 against 2, 2.308 against 3); at
    # p = 1 one step of k + 1 = 4 holds all n
    runs = [simulate_serving(_deployment(speculative_tokens=3, draft_acceptance=p).with_(osl=osl)) for p in (0.85, 1.0)]
    assert [r.as_dict()["tokens_per_step"] for r in runs] == pytest.approx([kept_at_085, osl - 1], rel=1e-12)
    for r in runs:
        step = sum(r.decode_breakdown_s.values())
        assert r.metrics["tpot_s"] == pytest.approx(step / r.as_dict()["tokens_per_step"], rel=1e-9)
    assert runs[1].metrics["tpot_s"] < runs[0].metrics["tpot_s"]
    # at a long output the capped last steps cost little: 1023 tokens at 3.183 a step, E = 3.187
    long = simulate_serving(_deployment(speculative_tokens=3, draft_acceptance=0.85))
    assert long.as_dict()["tokens_per_step"] == pytest.approx(3.18259, abs=1e-5)
    assert long.as_dict()["tokens_per_step"] < expected_tokens_per_step(3, 0.85)


def test_the_first_draft_pass_reads_the_kept_tokens_and_a_prompt_runs_the_module_once():
    model = load_model("deepseek-r1")
    cluster = load_cluster("dgx-b200")
    from hardware_specs.catalog import load_serving_efficiency
    eff = load_serving_efficiency("blackwell")
    args = (model, cluster, eff, QUIET.serving, "fp8_block", "fp8_block", 1.0, 8, 1, 1, 8, 1)
    drafts = [float(step_time(*args, 0.0, 0.0, 64.0, 2048.0, draft_tokens=2, kept_tokens=e)["draft_s"])
              for e in (1.0, 2.0, 3.0)]
    assert drafts[0] < drafts[1] < drafts[2]          # more kept tokens: a larger first pass
    prompt = step_time(*args, 4096.0, 2048.0, 0.0, 0.0, draft_tokens=2)
    assert float(prompt["draft_s"]) > 0.0             # the module over the prompt: its KV and first draft
    assert float(step_time(*args, 4096.0, 2048.0, 0.0, 0.0)["draft_s"]) == 0.0


def test_a_context_that_disagrees_with_the_deployment_on_speculation_is_refused():
    from hardware_specs.errors import InputError
    ctx = ServingContext.build("deepseek-r1", "dgx-b200", "trtllm", "fp8_block", speculative_tokens=1)
    with pytest.raises(InputError, match="the deployment says 2") as err:
        simulate_serving(_deployment(speculative_tokens=2), ctx)
    assert err.value.field == "speculative_tokens"
    assert simulate_serving(_deployment(speculative_tokens=1), ctx).context is ctx


def test_vllm_is_told_its_graph_sizes_in_tokens():
    from paraplan.exports.serving import engine_commands
    from paraplan.exports.serving_matrix import launches
    for _, _, launch in launches():
        if launch.framework == "vllm":
            (argv, *_) = engine_commands(launch)
            size = int(argv[argv.index("--max-cudagraph-capture-size") + 1])
            assert size == launch.cuda_graph_max_batch * (1 + launch.speculative_tokens)
