"""Speculative decoding with an EAGLE-3 draft head (``model_specs.draft_head``): the head read
from its config.json, its weights and draft passes by hand, the refusals, plan = simulate, and
the engines' launch settings."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_results import completed

from cost_models.inference_layers import gemm_s, layer_rates
from cost_models.inference_step import STEP_PARTS, eagle_draft_pass, step_time
from cost_models.serving_memory import draft_head_weight_bytes_per_gpu
from hardware_specs.catalog import load_cluster
from hardware_specs.errors import InputError
from hardware_specs.serving_behaviour import ServingBehaviour
from hardware_specs.serving_efficiency import ServingEfficiency
from model_specs.catalog import load_model
from model_specs.draft_head import load_draft_head
from simulator.serving.context import ServingContext
from simulator.serving.deployment import Deployment, WorkerLayout
from simulator.serving.simulate import simulate_serving

REPO = Path(__file__).resolve().parents[1]
HEAD_8B = REPO / "examples" / "drafts" / "eagle3-llama3.1-8b"
#: no fixed per-kernel time, no host time: a pass is pure roofline
PURE = ServingEfficiency(generation="hopper", decode_hbm_fraction=0.8, gemm_peak_fraction=0.6,
                         attention_peak_fraction=0.5, kernel_fixed_s=0.0, arrival_sync_chunked=1.0)
QUIET = ServingBehaviour(host_step_s=0.0, host_launch_s=0.0)


def test_the_head_is_one_llama_layer_at_the_targets_width_with_a_32k_draft_vocabulary():
    head = load_draft_head(HEAD_8B)
    assert load_draft_head(HEAD_8B / "config.json") == head
    m = head.layer
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim) == (1, 4096, 32, 8, 128)
    assert (m.ffn_hidden_size, m.vocab_size, m.gated_mlp, head.fused_states) == (14336, 32000, True, 3)
    head.check_target(load_model("llama3.1-8b"))


def test_its_weights_by_hand():
    # fc 3h x h; q k v from the 2h input 2h x (32 + 2 x 8) x 128; o 32 x 128 x h; gate/up/down
    # 3 h f; output head 32,000 x h: 424,673,280 parameters at 2 bytes, and three h-wide norms
    h, f = 4096, 14336
    params = 3 * h * h + 2 * h * 48 * 128 + 32 * 128 * h + 3 * h * f + 32000 * h
    assert params == 424_673_280
    head = load_draft_head(HEAD_8B)
    assert draft_head_weight_bytes_per_gpu(head, 1) == 2 * params + 3 * h * 2
    assert draft_head_weight_bytes_per_gpu(head, 4) == 2 * params / 4 + 3 * h * 2


def test_the_first_pass_adds_the_fused_projection_by_hand():
    head = load_draft_head(HEAD_8B)
    cluster = load_cluster("dgx-h100")
    rates = layer_rates(cluster.gpu, PURE, "bf16", "bf16")
    args = (head, cluster, PURE, QUIET, rates, 2.0, 1, 1, 1.0, 1024.0)
    first, _ = eagle_draft_pass(*args)
    later, _ = eagle_draft_pass(*args, fuse=False)
    # one token: the 3h x h projection reads its 2-byte weights once, memory-bound
    h = 4096
    by_hand = (3 * h * h * 2 + (3 * h + h) * 2) / (cluster.gpu.hbm_bw_bytes_per_s * 0.8)
    assert float(first - later) == pytest.approx(by_hand, rel=1e-9)
    assert float(first - later) == pytest.approx(
        float(gemm_s(1.0, 3.0 * h * h, rates.dense_flops_per_s, 2.0, rates, 3 * h, h)), rel=1e-12)
    # the later pass: the layer and the head, about 0.75 GB of 16-bit weights at 2.68 TB/s
    assert float(later) == pytest.approx(2 * (424_673_280 - 3 * h * h) / (3.35e12 * 0.8), rel=0.02)


def test_a_speculating_step_prices_the_head_not_an_mtp_module_and_its_parts_add_up():
    head = load_draft_head(HEAD_8B)
    cluster = load_cluster("dgx-h100")
    args = (load_model("llama3.1-8b"), cluster, PURE, QUIET, "fp8", "fp8", 1.0, 1, 1, 1, 1, 1, 0.0, 0.0, 8.0, 2048.0)
    spec = step_time(*args, draft_tokens=3, kept_tokens=2.0, draft_head=head)
    rates = layer_rates(cluster.gpu, PURE, "bf16", "bf16")
    first, _ = eagle_draft_pass(head, cluster, PURE, QUIET, rates, 1.0, 1, 1, 8.0, 2048.0, 2.0)
    later, _ = eagle_draft_pass(head, cluster, PURE, QUIET, rates, 1.0, 1, 1, 8.0, 2048.0, fuse=False)
    assert float(spec["draft_s"]) == pytest.approx(float(first + 2 * later), rel=1e-12)
    assert sum(float(spec[p]) for p in STEP_PARTS) == pytest.approx(float(spec["step_s"]), rel=1e-9)


def _deployment(**extra):
    return Deployment(model="llama3.1-8b", system="dgx-h100", backend="vllm", isl=1024, osl=1024, dense_format="bf16",
                      expert_format="bf16", layout=WorkerLayout(tp=1, batch=8), **extra)


def test_the_head_adds_its_weights_and_one_layer_of_kv_and_acceptance_decides_the_gain():
    plain = simulate_serving(_deployment())
    spec = simulate_serving(_deployment(speculative_tokens=3, draft_acceptance=0.7, draft_model=str(HEAD_8B)))
    grown = spec.memory_bytes["weights_bytes"] - plain.memory_bytes["weights_bytes"]
    assert grown == draft_head_weight_bytes_per_gpu(load_draft_head(HEAD_8B), 1)
    assert spec.metrics["max_batch_per_rank"] < plain.metrics["max_batch_per_rank"]
    assert spec.context.tokens_per_step == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    assert spec.metrics["tpot_s"] < plain.metrics["tpot_s"]
    # nothing accepted: the head's passes and the 4-token verification cost without a gain
    none = simulate_serving(_deployment(speculative_tokens=3, draft_acceptance=0.0, draft_model=str(HEAD_8B)))
    assert none.metrics["tpot_s"] > plain.metrics["tpot_s"]


def test_refusals_name_the_option():
    with pytest.raises(InputError, match="--draft-acceptance: missing"):
        ServingContext.build("llama3.1-8b", "dgx-h100", "vllm", "bf16", speculative_tokens=2, draft_head=str(HEAD_8B))
    with pytest.raises(InputError, match="--draft-model: given without --speculative-tokens"):
        ServingContext.build("llama3.1-8b", "dgx-h100", "vllm", "bf16", draft_acceptance=0.7, draft_head=str(HEAD_8B))
    with pytest.raises(InputError, match="8192 wide, llama3.1-8b 4096"):
        ServingContext.build("llama3.1-8b", "dgx-h100", "vllm", "bf16", speculative_tokens=2, draft_acceptance=0.7,
                             draft_head=str(REPO / "examples" / "drafts" / "eagle3-llama3.3-70b"))


def test_a_config_that_is_not_an_eagle3_head_is_refused(tmp_path):
    target = json.loads(HEAD_8B.joinpath("config.json").read_text())
    plain = {k: v for k, v in target.items() if k not in ("architectures", "draft_vocab_size")}
    (tmp_path / "config.json").write_text(json.dumps({**plain, "architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(InputError, match="is not an EAGLE-3 draft head"):
        load_draft_head(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**target, "draft_vocab_size": 0}))
    with pytest.raises(InputError, match="draft_vocab_size: must be a whole number >= 1"):
        load_draft_head(tmp_path)
    # the speculators format holds the layer's config apart
    (tmp_path / "config.json").write_text(json.dumps({"speculators_model_type": "eagle3", "draft_vocab_size": 32000,
                                                      "transformer_layer_config": plain}))
    import dataclasses
    assert load_draft_head(tmp_path).layer == dataclasses.replace(load_draft_head(HEAD_8B).layer, name=tmp_path.name)


def _cli(*args):
    """In-process (``test_a_speculative_plan_that_misses_its_objective_says_the_plain_engine_meets_it``
    keeps ``paraplan serve`` in a real process)."""
    return completed(*args)


def _process(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "paraplan.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def test_plan_agrees_with_simulate_and_says_which_head_drafts():
    common = ("-m", "llama3.1-8b", "-s", "dgx-h100", "--isl", "1024", "--osl", "1024", "--speculative-tokens", "3",
              "--draft-acceptance", "0.7", "--draft-model", HEAD_8B)
    plan = _cli("serve", "plan", *common, "--gpus", "8", "--tpot-ms", "5", "--mode", "agg", "--json")
    assert plan.returncode == 0, plan.stderr
    best = json.loads(plan.stdout)["best"]
    sim = _cli("serve", "simulate", *common, "--tp", best["tp"], "--batch", best["batch"], "--workers", best["workers"],
               "--json")
    assert sim.returncode == 0, sim.stderr
    got = json.loads(sim.stdout)
    assert got["tpot_ms"] == pytest.approx(best["tpot_ms"], rel=1e-9)
    assert got["ttft_ms"] == pytest.approx(best["ttft_ms"], rel=1e-9)
    assert Path(got["draft_model"]) == HEAD_8B            # the folder: --draft-model takes it back
    assert json.loads(plan.stdout)["request"]["draft_model"] == got["draft_model"]
    text = _cli("serve", "simulate", *common, "--batch", "8")
    assert "the EAGLE-3 head eagle3-llama3.1-8b drafts 3 tokens a step" in text.stdout


def test_vllm_and_sglang_are_told_to_draft_with_the_head_and_tensorrt_llm_is_refused_in_one_line(tmp_path):
    from paraplan.exports.serving import engine_commands
    from paraplan.exports.serving_matrix import concrete, launches
    seen = {launch.framework: concrete(engine_commands(launch)[0]) for _, _, launch in launches()
            if launch.draft_model_path}
    argv = seen["vllm"]
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "method": "eagle3", "model": "org/eagle3-draft", "num_speculative_tokens": 3}
    argv = seen["sglang"]
    got = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--speculative")}
    assert got == {"--speculative-algorithm": "EAGLE3", "--speculative-draft-model-path": "org/eagle3-draft",
                   "--speculative-num-steps": "2", "--speculative-eagle-topk": "1",
                   "--speculative-num-draft-tokens": "3"}
    args = ("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--speculative-tokens", "2",
            "--draft-acceptance", "0.7", "--draft-model", HEAD_8B, "--emit")
    script = _cli(*args, "-b", "vllm")
    assert script.returncode == 0, script.stderr
    # the weights' repository the head's config names (the priced folder holds only the config)
    assert 'DRAFT_MODEL="${DRAFT_MODEL:-yuhuili/EAGLE3-LLaMA3.1-Instruct-8B}"' in script.stdout
    assert '"model":"$DRAFT_MODEL"' in script.stdout.replace("\\", "")
    out = tmp_path / "launch.sh"
    refused = _cli(*args, "-b", "trtllm", "--out", out)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("error: --emit: the TensorRT-LLM export writes MTP speculative decoding only")
    assert not out.exists()


def test_the_api_takes_the_head_as_a_context_input():
    from paraplan.serving_api import serve_simulate
    row = serve_simulate("llama3.1-8b", "dgx-h100", tp=1, batch=8, speculative_tokens=3, draft_acceptance=0.7,
                         draft_model=str(HEAD_8B)).iloc[0]
    plain = serve_simulate("llama3.1-8b", "dgx-h100", tp=1, batch=8).iloc[0]
    assert row.tpot_ms < plain.tpot_ms and np.isfinite(row.tpot_ms)


def test_a_head_whose_config_names_no_repository_must_be_given_its_weights(tmp_path):
    data = json.loads(HEAD_8B.joinpath("config.json").read_text())
    data.pop("_name_or_path")
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert load_draft_head(tmp_path).checkpoint == "" and load_draft_head(HEAD_8B).checkpoint.startswith("yuhuili/")
    script = _cli("serve", "simulate", "-m", "llama3.1-8b", "-s", "dgx-h100", "--speculative-tokens", "2",
                  "--draft-acceptance", "0.7", "--draft-model", tmp_path, "-b", "sglang", "--emit")
    assert script.returncode == 0, script.stderr
    assert 'DRAFT_MODEL="${DRAFT_MODEL:?set DRAFT_MODEL to the weights of the EAGLE-3 head priced' in script.stdout


def test_on_a_last_pipeline_stage_the_head_brings_its_own_embedding():
    # pp > 1: the target's embedding sits on the first stage, the head on the last needs a copy
    one = simulate_serving(_deployment(speculative_tokens=2, draft_acceptance=0.7, draft_model=str(HEAD_8B)))
    import dataclasses
    two_dep = dataclasses.replace(_deployment(speculative_tokens=2, draft_acceptance=0.7, draft_model=str(HEAD_8B)),
                                  layout=WorkerLayout(tp=1, pp=2, batch=8))
    plain_two = dataclasses.replace(_deployment(), layout=WorkerLayout(tp=1, pp=2, batch=8))
    grown = simulate_serving(two_dep).memory_bytes["weights_bytes"] - simulate_serving(plain_two).memory_bytes[
        "weights_bytes"]
    head = draft_head_weight_bytes_per_gpu(load_draft_head(HEAD_8B), 1)
    assert grown == pytest.approx(head + 128256 * 4096 * 2, rel=1e-12)
    assert one.memory_bytes["weights_bytes"] > 0


def test_a_disaggregated_plan_with_the_head_is_what_simulate_gives():
    from paraplan.serving_api import serving_context
    from planners.serving.search import plan_serving
    ctx = serving_context("llama3.1-8b", "dgx-h100", speculative_tokens=2, draft_acceptance=0.7,
                          draft_model=str(HEAD_8B))
    best = plan_serving(ctx, 4, 1024, 1024, 2000.0, 10.0, modes=("disagg",)).best
    lay = lambda p: WorkerLayout(tp=int(best[p + "tp"]), pp=int(best[p + "pp"]), batch=int(  # noqa: E731
        best["prefill_batch" if p == "prefill_" else "batch"]))
    dep = Deployment(model="llama3.1-8b", system="dgx-h100", backend=ctx.stack.name, mode="disagg", isl=1024,
                     osl=1024, dense_format=ctx.dense_format, expert_format=ctx.expert_format, speculative_tokens=2,
                     draft_acceptance=0.7, draft_model=str(HEAD_8B), prefill=lay("prefill_"),
                     prefill_workers=int(best["prefill_workers"]), decode=lay("decode_"),
                     decode_workers=int(best["decode_workers"]))
    rep = simulate_serving(dep)
    assert 1e3 * rep.metrics["tpot_s"] == pytest.approx(best["tpot_ms"], rel=1e-9)
    assert 1e3 * rep.metrics["ttft_s"] == pytest.approx(best["ttft_ms"], rel=1e-9)
    # the head's own KV cache of the prompt moves with the target's
    assert rep.extra["kv_transfer_s"] > simulate_serving(Deployment(
        **{**dep.__dict__, "speculative_tokens": None, "draft_acceptance": None, "draft_model": None})).extra[
        "kv_transfer_s"]


def test_a_speculative_plan_says_what_the_same_search_gives_without_drafting():
    # drafting can cost more than it yields; serve plan priced only what was asked
    common = ("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "--gpus", "1", "--tpot-ms", "50",
              "--speculative-tokens", "3", "--draft-model", HEAD_8B)
    good = json.loads(_cli(*common, "--draft-acceptance", "0.7", "--json").stdout)
    plain = json.loads(_cli("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "--gpus", "1", "--tpot-ms", "50",
                            "--json").stdout)["best"]
    assert good["without_drafting"]["tokens_per_s_per_gpu"] == pytest.approx(plain["tokens_per_s_per_gpu"], rel=1e-12)
    assert any("the drafts gain" in line for line in good["why"])
    bad = _cli(*common, "--draft-acceptance", "0.2")
    assert "the drafts cost" in bad.stdout and "serve without them (--speculative-tokens 0)" in bad.stdout


def test_a_speculative_plan_that_misses_its_objective_says_the_plain_engine_meets_it():
    out = _process("serve", "plan", "-m", "llama3.1-8b", "-s", "dgx-h100", "--gpus", "1", "--tpot-ms", "5",
               "--speculative-tokens", "3", "--draft-model", HEAD_8B, "--draft-acceptance", "0")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "or serve without drafting (--speculative-tokens 0): agg 1 x tp1" in out.stderr


def test_odd_draft_model_values_are_input_errors():
    from paraplan.serving_api import serve_simulate
    for bad, message in ((5, "expected the path of an EAGLE-3 head's config.json, got int"), ("", "is empty")):
        with pytest.raises(InputError, match=f"^draft_model: {message}"):
            serve_simulate("llama3.1-8b", "dgx-h100", speculative_tokens=3, draft_acceptance=0.7, draft_model=bad)
    # 3.0 drafted tokens is 3, as the other whole numbers
    import numpy as np
    a = serve_simulate("llama3.1-8b", "dgx-h100", speculative_tokens=3.0, draft_acceptance=0.7, draft_model=str(HEAD_8B))
    b = serve_simulate("llama3.1-8b", "dgx-h100", speculative_tokens=np.int64(3), draft_acceptance=0.7,
                       draft_model=str(HEAD_8B))
    assert float(a.tpot_ms.iloc[0]) == float(b.tpot_ms.iloc[0])
