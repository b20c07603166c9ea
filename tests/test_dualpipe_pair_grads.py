"""DualPipe's two model copies: pipeline rank r holds stage r of one copy and stage p-1-r of the
other, so each stage's gradient is split between ranks r and p-1-r and the pair sums them before
the optimizer step (deepseek-ai/DualPipe@030ce4325f examples/example_dualpipe.py 168-177:
``p0.grad += p1all[pp_size - 1 - rank]; p1.grad += p0all[pp_size - 1 - rank]``). The step priced
no such exchange: dp_comm 0 at dp 1. Expected values derived by hand."""
import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from cost_models.params import dense_layer_params
from model_specs import load_model
from nccl_by_hand import ring_s
from paraplan import api
from simulator import simulate
from simulator.parallel_config import ParallelConfig

CLUSTER = load_cluster("dgx-h100")
EFF = efficiency_for_cluster(CLUSTER)
LLAMA = load_model("llama3-8b")
#: llama3-8b: one layer 4096 x (2 x 4096 + 2 x 1024) + 3 x 4096 x 14336 + 2 x 4096 norms
LAYER = 4096 * (2 * 4096 + 2 * 1024) + 3 * 4096 * 14336 + 2 * 4096
EMBED = 128256 * 4096


def _config(pp, schedule="dualpipe"):
    return ParallelConfig(dp=1, tp=1, pp=pp, micro_batch=1, global_batch=4 * pp, zero_stage=1, schedule=schedule)


def test_dualpipe_pair_all_reduce_inside_a_node():
    """pp 4 on one DGX H100: rank 0 holds 8 layers and the embedding of copy A and 8 layers and the
    LM head of copy B: 2 x (8 x 218,112,000 + 525,336,576) = 4,540,465,152 parameters, fp32
    gradients (18.16 GB). With dp 1 there is no DP reduction; the first and the last rank (3
    apart, one node) all-reduce those bytes: a 2-rank ring moves 2 x 1/2 x 18.16 GB over NVLink at
    450 GB/s x 0.8 in two steps, 50.5 ms, all of it exposed. 1F1B on the same layout has one copy
    and nothing to pair."""
    assert dense_layer_params(LLAMA) == LAYER == 218_112_000    # the parameter count the step uses, by hand
    params = 2 * (8 * LAYER + EMBED)
    dual = simulate(LLAMA, CLUSTER, _config(4), n_gpus=4)
    assert dual.extras["params_local"] == params == 4_540_465_152
    nbytes = params * 4.0
    bw = CLUSTER.scaleup.bw_bytes_per_s * EFF.scaleup_fraction
    expected = ring_s(nbytes, 2, 0, bw, CLUSTER.scaleup.latency_s, CLUSTER.scaleout.latency_s)
    assert expected == pytest.approx(nbytes / 360e9, rel=1e-3)
    assert dual.extras["dp_comm_total_s"] == pytest.approx(expected, rel=1e-6)
    assert dual.time_breakdown_s["dp_comm_exposed_s"] == pytest.approx(expected, rel=1e-6)
    assert simulate(LLAMA, CLUSTER, _config(4, "1f1b"), n_gpus=4).extras["dp_comm_total_s"] == 0.0


def test_dualpipe_pair_all_reduce_across_nodes():
    """pp 16 on two DGX H100s: rank 0 and rank 15 sit on different nodes, so the pair's
    2 x (2 x 218,112,000 + 525,336,576) = 1,923,121,152 fp32 gradients (7.69 GB) cross the NIC
    at 50 GB/s x 0.85 = 42.5 GB/s in two steps: 181 ms."""
    params = 2 * (2 * LAYER + EMBED)
    dual = simulate(LLAMA, CLUSTER, _config(16), n_gpus=16)
    assert dual.extras["params_local"] == params
    nbytes = params * 4.0
    bw = CLUSTER.scaleout.bw_bytes_per_s * EFF.scaleout_fraction
    expected = ring_s(nbytes, 0, 2, bw, CLUSTER.scaleup.latency_s, CLUSTER.scaleout.latency_s, 39.0e9)
    assert expected == pytest.approx(nbytes / 42.5e9, rel=1e-3)
    assert dual.extras["dp_comm_total_s"] == pytest.approx(expected, rel=1e-6)


def test_the_planner_prices_the_pair_as_simulate_does():
    """The planner scores the same layout with the same step model: its step equals simulate's
    (dp 2, pp 4, ZeRO-1: the pair then sums each rank's half of the reduced gradients)."""
    fixed = dict(tp=1, pp=4, cp=1, micro_batch=1, zero_stage=1, recompute="full", sequence_parallel=False, vpp=1)
    ranked = api.plan("llama3-8b", "dgx-h100", 8, global_batch=16, schedules=("dualpipe",), **fixed)
    top = ranked.iloc[0]
    assert (top.schedule, top.dp) == ("dualpipe", 2)
    same = dict(fixed, recompute_num_layers=int(top.recompute_num_layers),
                recompute_layers_decrement=int(top.recompute_layers_decrement))
    row = api.simulate("llama3-8b", "dgx-h100", gpus=8, global_batch=16, schedule="dualpipe", **same).iloc[0]
    assert float(top.step_time_s) == pytest.approx(float(row.step_time_s), rel=1e-9)
    assert float(top.dp_comm_exposed_s) == pytest.approx(float(row.dp_comm_exposed_s), rel=1e-9)
    one = api.simulate("llama3-8b", "dgx-h100", gpus=8, global_batch=16, schedule="1f1b", **same).iloc[0]
    assert float(row.dp_comm_exposed_s) > float(one.dp_comm_exposed_s) + 0.02
