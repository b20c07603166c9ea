"""Pipeline-parallel serving: a request is never split across micro-batches, and a step's parts
add up to it."""
import pytest

from cost_models.inference_step import STEP_PARTS, step_time
from hardware_specs.catalog import load_cluster, load_serving_efficiency, load_stack
from model_specs.catalog import load_model


def _step(model, pp, batch, prefill=0.0):
    cluster = load_cluster("dgx-b200")
    eff = load_serving_efficiency(cluster.gpu.generation)
    beh = load_stack("vllm-0.14").serving
    return step_time(model, cluster, eff, beh, "fp8_block", "fp8_block", 1.0, 8, 1, pp, 1, 8, prefill, prefill / 2,
                     float(batch), 2048.0)


@pytest.mark.parametrize("name", ["deepseek-r1", "llama3.1-70b"])
def test_one_request_through_more_stages_is_never_faster(name):
    # one request cannot be cut into pp micro-batches: it crosses every stage at batch 1, so the
    # round reads the same weights (for a MoE the same experts: one token's top-k, not half a
    # token's) plus a hand-off per stage
    model = load_model(name)
    steps = [float(_step(model, pp, 1)["step_s"]) for pp in (1, 2, 4, 8)]
    assert all(a <= b for a, b in zip(steps, steps[1:])), steps
    # and the MLP part is the same at every pp: one token's experts at every depth
    mlps = [float(_step(model, pp, 1)["mlp_s"]) for pp in (1, 2, 4, 8)]
    assert mlps == pytest.approx([mlps[0]] * 4, rel=1e-12)


def test_with_as_many_requests_as_stages_each_micro_batch_holds_one():
    model = load_model("deepseek-r1")
    # 4 requests, 4 stages: 4 micro-batches of one request, so the layers' MLP is one token's
    # and the LM head runs 4 times a round; the 61 layers split 16 / 15 / 15 / 15 at best, and
    # the 16-layer stage paces the round: 4 x 16 = 64 one-token layer passes, not 61
    four = _step(model, 4, 4)
    one = _step(model, 1, 1)
    assert float(four["mlp_s"]) == pytest.approx(float(one["mlp_s"]) * 64 / 61, rel=1e-12)
    assert float(four["lm_head_s"]) == pytest.approx(4 * float(one["lm_head_s"]), rel=1e-12)


@pytest.mark.parametrize("pp, passes", [(2, 80), (3, 81), (4, 80), (6, 84)])
def test_the_largest_stage_paces_a_round_with_every_stage_busy(pp, passes):
    # Llama-3.1-70B's 80 layers on pp stages, one request a micro-batch: the round is pp times
    # the largest stage's ceil(80 / pp) layers (pp 3: 3 x 27 = 81 one-request layer passes; pp 6:
    # 6 x 14 = 84), where an even split would give 80
    model = load_model("llama3.1-70b")
    busy = _step(model, pp, pp)
    alone = _step(model, 1, 1)
    for part in ("attention_s", "mlp_s", "elementwise_s"):
        assert float(busy[part]) == pytest.approx(float(alone[part]) * passes / 80, rel=1e-12), part
    # fewer requests than stages: one request's trip through all 80 layers, however they split
    trip = _step(model, pp, 1)
    assert float(trip["mlp_s"]) == pytest.approx(float(alone["mlp_s"]), rel=1e-12)


@pytest.mark.parametrize("pp, batch, prefill", [(1, 8, 0.0), (2, 1, 0.0), (4, 16, 0.0), (4, 3, 512.0), (2, 0, 4096.0)])
def test_a_steps_parts_add_up_to_it(pp, batch, prefill):
    out = _step(load_model("deepseek-r1"), pp, batch, prefill)
    assert sum(float(out[p]) for p in STEP_PARTS) == pytest.approx(float(out["step_s"]), rel=1e-9)
