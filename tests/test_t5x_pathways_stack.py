"""The t5x-pathways-2022 stack: JAX + T5X on Pathways as PaLM 540B ran it (arXiv 2204.02311
section 4), the one training stack that holds a multi-query key/value head whole on every
model-parallel rank, so PaLM's own layout (tp 12 over one K/V head) can be entered."""
import json

import pytest

from cli_results import one_line_error, run
from cost_models.layer_costs import attention_gemm_shapes
from cost_models.params import kv_heads_per_tp_rank, replicated_kv_params_per_tp_rank
from hardware_specs.catalog import load_stack
from hardware_specs.errors import InputError
from model_specs import load_model
from paraplan.exports.common import refuse_kv_head_replication
from simulator.stack_defaults import stack_config_fields

STACK = "t5x-pathways-2022"
PALM = ("-m", "palm-540b", "-c", "tpu-v4-pod", "--gpus", 6144, "--tp", 12, "--global-batch", 2048,
        "--zero", 3, "--recompute", "full")


def test_the_stack_states_palms_documented_sharding():
    t = load_stack(STACK).training
    assert t.kv_head_replication and t.default_zero_stage == 3 and t.recipe_recompute == "full"
    assert {"pipeline", "context_parallel"} <= set(t.lacks)
    assert t.attention_kernel == "materialized" and t.fp8_recipe == "none"
    # section 4: 'each pair of hosts exchange approximately 1.3 GB of gradients'; a host holds
    # 1/768 of a pod's copy of PaLM's 540.35B weights: 1.41 GB in bf16, 2.81 GB in fp32
    per_host = 540.35e9 / 768
    assert round(per_host * 2 / 1e9, 2) == 1.41 and round(per_host * 4 / 1e9, 2) == 2.81
    assert stack_config_fields(load_stack(STACK), "bf16")["grad_reduce_bytes"] == 2.0


def test_palms_one_kv_head_is_priced_whole_on_each_of_its_12_model_parallel_ranks():
    palm = load_model("palm-540b")
    h, a, d = palm.hidden_size, palm.num_heads, palm.head_dim        # 18432, 48, 256
    assert (h, a, palm.num_kv_heads, d) == (18432, 48, 1, 256)
    assert float(kv_heads_per_tp_rank(1, 12)) == 1.0
    (n_qkv, k_qkv), (n_out, k_out) = attention_gemm_shapes(palm, 12)
    # Q: 48 heads / 12 = 4 heads x 256 = 1024 columns a rank; K and V: the whole head, 2 x 256
    assert (float(n_qkv), float(k_qkv)) == (4 * 256 + 2 * 256, 18432) == (1536, 18432)
    assert (float(n_out), float(k_out)) == (18432, 1024)
    # per token a rank's K/V projections take 2 x 512 x 18432 = 18,874,368 forward FLOPs, 12x the
    # 1,572,864 a split of the head would leave; their bf16 weights 2 x 18432 x 256 x 2 bytes
    assert 2 * 2 * d * h == 18_874_368 and 2 * 2 * d * h // 12 == 1_572_864
    assert 2 * h * d * 2 == 18_874_368
    # the weights a rank holds beyond its 1/12 share: 2 h d (1 - 1/12) = 8,650,752 a layer
    assert float(replicated_kv_params_per_tp_rank(palm, 12)) == 2 * h * d * 11 / 12 == 8_650_752


def test_palms_published_layout_simulates_on_the_stack_and_is_refused_on_the_default():
    result = run("simulate", *PALM, "--stack", STACK, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    c = report["config"]
    assert (c["dp"], c["tp"], c["pp"], c["zero_stage"], c["kv_head_replication"]) == (512, 12, 1, 3, True)
    # PaLM section 4.1: 238.3K tokens/s, 46.2% MFU (PaLM's convention); the unfitted tpu-v4 prior
    # lands within 10% of both (220.7K tokens/s and 42.8% when this test was written)
    tokens_per_s, mfu_pct = report["tokens_per_s"], report["mfu_palm_bf16_pct"]
    assert abs(tokens_per_s / 238_300 - 1) < 0.10 and abs(mfu_pct / 46.2 - 1) < 0.10, (tokens_per_s, mfu_pct)
    one_line_error(run("simulate", *PALM), "error: tp: tp=12 is more than the 1 key/value heads of palm-540b",
                   STACK)


@pytest.mark.parametrize("release", ["Megatron-LM", "torchtitan 0.3.0", "DeepSpeed 0.19.8"])
def test_an_export_refuses_a_plan_that_holds_kv_heads_whole_over_tp(release):
    llama = load_model("llama3-70b")                  # 8 key/value heads
    refuse_kv_head_replication({"tp": 8}, llama, release)
    with pytest.raises(InputError) as err:
        refuse_kv_head_replication({"tp": 16}, llama, release)
    assert err.value.field == "tp" and "each of llama3-70b's 8 key/value heads whole on 2 ranks" in str(err.value)
    assert release in str(err.value)


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "deepspeed"])
def test_plan_emit_refuses_tp_beyond_the_kv_heads_in_one_line(framework):
    result = run("plan", "-m", "llama3-70b", "-c", "dgx-h100", "-n", 256, "--global-batch", 512, "--stack", STACK,
                 "--max-tp", 16, "--fix", "tp=16", "--fix", "pp=1", "--fix", "zero=1", "--no-memory-search",
                 "--emit", framework)
    one_line_error(result, "refused: 10 by tp", "choose tp dividing 8")


def test_plan_searches_tp_beyond_the_kv_heads_on_this_stack_only():
    def tps(stack):
        result = run("plan", "-m", "palm-540b", "-c", "dgx-h100", "-n", 1024, "--global-batch", 2048, "--stack", stack,
                     "--fix", "zero=3", "--fix", "pp=1", "--fix", "recompute=full", "--top", 50, "--json")
        assert result.exit_code == 0, result.output
        return {p["tp"] for p in json.loads(result.stdout)["plans"]}
    assert tps("megatron-core") == {1}                  # one key/value head: whole heads over tp
    assert {2, 4, 8} <= tps(STACK)                      # the head replicated on every tp rank
