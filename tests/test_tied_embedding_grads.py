"""A tied input embedding and LM head split over pipeline stages: the shared weight's gradient
is all-reduced between the first and the last stage after the data-parallel reduction, exposed
(Megatron-Core ``finalize_model_grads`` -> ``_allreduce_word_embedding_grads``; Megatron-LM v2.5
``train_step``; DeepSpeed's ``ReduceTiedGrads``). Expected values derived by hand."""
from dataclasses import replace

import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs import load_model
from simulator import simulate
from simulator.parallel_config import ParallelConfig
from nccl_by_hand import ring_s

CLUSTER = load_cluster("dgx-a100-80gb")
EFF = efficiency_for_cluster(CLUSTER)


def _config(pp, **kw):
    return ParallelConfig(dp=1, tp=8, pp=pp, micro_batch=1, global_batch=64, zero_stage=0, recompute="full",
                          dtype="fp16", grad_reduce_bytes=2, **kw)


def test_gpt3s_tied_embedding_gradient_crosses_nodes_once_between_the_pipeline_ends():
    """GPT-3 175B at tp 8, pp 8, dp 1 on DGX A100s: its 50,257 x 12,288 embedding, 1/8 a GPU,
    fp16 gradients: 154.4 MB all-reduced by the first and the last stage (56 ranks apart, on two
    nodes, one member each). A 2-rank ring moves 2 x 1/2 x 157.3 MB over the NIC at 200 Gb/s x
    0.85 = 21.25 GB/s in two cross-node steps: 7.27 ms plus Simple's 8.4 us and 2 x 5 us. With
    dp 1 nothing else is reduced, so that is all of dp_comm; with pp 1 there is nothing to tie."""
    gpt3 = load_model("gpt3-175b")
    assert gpt3.tied_embeddings
    nbytes = gpt3.vocab_size * gpt3.hidden_size / 8 * 2
    assert nbytes == pytest.approx(154.4e6, rel=1e-3)
    bw = CLUSTER.scaleout.bw_bytes_per_s * EFF.scaleout_fraction
    expected = ring_s(nbytes, 0, 2, bw, CLUSTER.scaleup.latency_s, CLUSTER.scaleout.latency_s, 39.0e9)
    assert expected == pytest.approx(nbytes / 21.25e9 + 8.4e-6 + 2 * 5e-6, rel=1e-9)
    tied = simulate(gpt3, CLUSTER, _config(8), n_gpus=64)
    assert tied.extras["dp_comm_total_s"] == pytest.approx(expected, rel=1e-6)
    assert tied.time_breakdown_s["dp_comm_exposed_s"] == pytest.approx(expected, rel=1e-6)
    one_stage = simulate(gpt3, CLUSTER, ParallelConfig(dp=8, tp=8, pp=1, micro_batch=1, global_batch=64,
                                                       zero_stage=1, recompute="full", dtype="fp16",
                                                       grad_reduce_bytes=2), n_gpus=64)
    untied = replace(gpt3, tied_embeddings=False)
    assert simulate(untied, CLUSTER, _config(8), n_gpus=64).extras["dp_comm_total_s"] == 0.0
    assert one_stage.extras["dp_comm_total_s"] > 0.0       # its own DP reduction, no tied term to add


@pytest.mark.parametrize("tp, pp", [(1, 8), (2, 4), (1, 6)])
def test_a_pipeline_inside_one_node_all_reduces_its_tied_embedding_over_nvlink(tp, pp):
    """GPT-3 6.7B on one DGX A100 at pp 8 (tp 1): the first and the last stage are ranks 0 and 7
    of the same node, yet the pair's stride of 7 (above half the node) had it priced as one
    member per node, on the NIC: 38.8 ms, where a 2-rank ring on NVLink moves 2 x 1/2 x
    50,257 x 4,096 x 4 = 823.4 MB at 300 GB/s x 0.8 = 240 GB/s: 3.43 ms plus its two NVLink
    steps. The same for tp 2 pp 4 (ranks 0-1 and 6-7, stride 6) and pp 6 on six of the 8 GPUs
    (stride 5). With dp 1, this all-reduce is all of dp_comm."""
    model = load_model("gpt3-6.7b")
    assert model.tied_embeddings
    nbytes = model.vocab_size * model.hidden_size / tp * 4
    bw = CLUSTER.scaleup.bw_bytes_per_s * EFF.scaleup_fraction
    assert bw == pytest.approx(240e9, rel=1e-9)
    expected = ring_s(nbytes, 2, 0, bw, CLUSTER.scaleup.latency_s, CLUSTER.scaleout.latency_s)
    assert expected == pytest.approx(nbytes / 240e9, rel=0.01)
    config = ParallelConfig(dp=1, tp=tp, pp=pp, micro_batch=1, global_batch=64, zero_stage=0, recompute="full",
                            grad_reduce_bytes=4)
    result = simulate(model, CLUSTER, config, n_gpus=tp * pp)
    assert result.extras["dp_comm_total_s"] == pytest.approx(expected, rel=1e-6)
    # across nodes it is the NIC's: tp 1 pp 16 on two nodes, ranks 0 and 15
    across = simulate(model, CLUSTER, replace(config, tp=1, pp=16), n_gpus=16).extras["dp_comm_total_s"]
    nic = CLUSTER.scaleout.bw_bytes_per_s * EFF.scaleout_fraction
    assert across == pytest.approx(ring_s(model.vocab_size * model.hidden_size * 4, 0, 2, nic,
                                          CLUSTER.scaleup.latency_s, CLUSTER.scaleout.latency_s, 39.0e9), rel=1e-6)
