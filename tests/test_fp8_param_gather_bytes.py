"""``--fp8-param-gather`` gathers the quantised copy: Megatron keeps each FP8 layer weight as a
Transformer Engine Float8Tensor whose data sits in the distributed optimizer's uint8 parameter
buffer, and the ZeRO parameter all-gather moves that buffer, 1 byte an element; the embedding and
the output layer have no FP8 copy and stay bf16 (step_model.gathered_layer_weight_bytes)."""
import pytest

from paraplan import api

RUN = dict(gpus=256, tp=8, pp=4, global_batch=256, seq_len=8192, zero_stage=1, sequence_parallel=True,
           recompute="selective", dtype="fp8", overlap_param_gather=False)


def _report(fp8_gather):
    report, _, _ = api.simulate_report("llama3-70b", "dgx-h100", fp8_param_gather=fp8_gather, **RUN)
    return report


def test_fp8_param_gather_moves_one_byte_per_layer_weight():
    """llama3-70b (h 8192, FFN 28672, 8 KV heads of 128, vocab 128256): a layer holds
    2 h^2 (Q, O) + 2 x h x 1024 (K, V) + 3 x h x 28672 (gated MLP) + 2 h (norms) = 855,654,400
    elements, 1/8 of them a GPU at tp 8; the first of 4 stages holds 20 layers and the 128256 x
    8192 / 8 embedding. ZeRO-1 over dp 8, whose members are tp = 8 ranks apart, one a node: the
    all-gather runs at one NIC, 50 GB/s x 0.85. Unoverlapped, the step's exposed DP time drops by
    7/8 x (20 x 855,654,400 / 8 elements x (2 - 1) byte) / 42.5 GB/s; the embedding's bf16 bytes
    and the ring's latency are the same both ways."""
    off, on = _report(False), _report(True)
    layers = 20 * 855_654_400 / 8
    assert off.extras["params_local"] == pytest.approx(layers + 128256 * 8192 / 8, rel=1e-12)
    saved = 7.0 / 8.0 * layers * (2.0 - 1.0) / (50e9 * 0.85)
    assert (off.time_breakdown_s["dp_comm_exposed_s"] - on.time_breakdown_s["dp_comm_exposed_s"]
            == pytest.approx(saved, rel=1e-6))
    assert off.extras["dp_comm_total_s"] - on.extras["dp_comm_total_s"] == pytest.approx(saved, rel=1e-6)


def test_mxfp8_param_gather_moves_the_16_bit_weights():
    """Megatron-Core gathers an MXFP8 run's parameters in bf16 through the gradient buffer
    (Transformer Engine cannot expose an MXFP8Tensor's raw data to the parameter buffer), so the
    DP time is the bf16 run's: nothing saved."""
    run = {**RUN, "dtype": "mxfp8"}
    off = api.simulate_report("llama3-70b", "gb200-nvl72", fp8_param_gather=False, **run)[0]
    on = api.simulate_report("llama3-70b", "gb200-nvl72", fp8_param_gather=True, **run)[0]
    assert on.extras["dp_comm_total_s"] == pytest.approx(off.extras["dp_comm_total_s"], rel=1e-12)

