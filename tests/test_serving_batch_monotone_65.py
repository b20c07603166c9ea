"""A larger decode batch never lowers tokens/s/GPU across the engine's all-reduce switch point.

vLLM and SGLang switch from the one-shot to the two-shot all-reduce at 512 KiB at <= 4 GPUs
(``oneshot_allreduce_max_bytes``), where their authors measured two-shot at least as fast; the
latency / bandwidth formulas still price two-shot ~37% dearer there, so one token more (Llama-3.1-70B
at tp 4: 33 x 8192 x 2 bytes = 528 KiB) made the step dearer and lowered tokens/s/GPU (868.54 ->
861.99 at batch 32 -> 33). At and above the switch the two-shot kernel is now priced at most at
the one-shot kernel's cost (``cost_models.inference_comm``)."""
import numpy as np
import pytest

from cost_models.inference_comm import allreduce_time_s
from paraplan.serving_api import serve_simulate, serving_context
from simulator.serving.evaluate import evaluate_agg_columns


def _agg(ctx, tp, batches, isl, osl):
    return evaluate_agg_columns(ctx, dict(tp=tp, pp=1, adp=1, moe_tp=tp, moe_ep=1,
                                          batch=np.asarray(batches, dtype=float), isl=isl, osl=osl))


@pytest.mark.parametrize("backend, batches, isl, osl", [
    ("vllm", range(24, 41), 1024, 1024),        # 32 tokens = 512 KiB: the switch
    ("vllm", range(24, 41), 128, 64),
    ("sglang", range(40, 56), 128, 64),         # was 866.51 -> 855.53 at 47 -> 48
    ("sglang", range(24, 41), 1024, 1024),
])
def test_tokens_per_gpu_do_not_fall_across_the_switch_at_tp4(backend, batches, isl, osl):
    ctx = serving_context("llama3.1-70b", "dgx-b200", backend)
    out = _agg(ctx, 4, batches, isl, osl)
    assert out["fits"].all()
    t = out["tokens_per_s_per_gpu"]
    assert np.all(np.diff(t) >= 0.0), list(zip(batches, t))


def test_serve_simulate_gives_the_planners_columns_across_the_switch():
    ctx = serving_context("llama3.1-70b", "dgx-b200", "vllm")
    cols = _agg(ctx, 4, [32, 33], 1024, 1024)
    for i, b in enumerate((32, 33)):
        row = serve_simulate("llama3.1-70b", "dgx-b200", backend="vllm", tp=4, batch=b).iloc[0]
        assert row["tokens_per_s_per_gpu"] == cols["tokens_per_s_per_gpu"][i]
        assert row["decode_comm_ms"] == 1e3 * cols["decode_comm_s"][i]
    # the numbers: 868.538 at 32, 861.994 (two-shot priced) at 33, now above 868.538
    assert cols["tokens_per_s_per_gpu"][1] > cols["tokens_per_s_per_gpu"][0] > 868.5


def test_all_reduce_just_below_and_above_the_switch_by_hand():
    # hardware_specs/clusters/dgx-b200.yaml: scaleup NVLink 900 GB/s, 3 us a hop;
    # hardware_specs/serving_efficiency/blackwell.yaml: link_bw_fraction 0.8 -> 720 GB/s achieved
    ctx = serving_context("llama3.1-70b", "dgx-b200", "vllm")
    cluster, eff, beh = ctx.cluster, ctx.efficiency, ctx.behaviour
    assert (cluster.scaleup.bw_bytes_per_s, cluster.scaleup.latency_s, eff.link_bw_fraction) == (900e9, 3e-6, 0.8)
    assert beh.oneshot_allreduce_max_bytes[4.0] == 524288     # vLLM: one-shot below 512 KiB at <= 4 GPUs

    def ar(tokens):
        msg = tokens * 8192 * 2.0
        oneshot, stated = beh.oneshot_allreduce(msg, 4, tokens)
        return float(allreduce_time_s(msg, 4, cluster, eff, True, oneshot, stated))

    # 31 tokens = 507,904 bytes: one-shot, 3 us + 3 x 507904 / 720e9 = 5.116 us
    assert ar(31) == pytest.approx(5.11627e-6, abs=1e-11)
    # 32 tokens = 524,288 bytes: the engine runs two-shot, 6 us + 1.5 x 524288 / 720e9 = 7.092 us,
    # priced at the one-shot kernel's 3 us + 3 x 524288 / 720e9 = 5.185 us
    assert ar(32) == pytest.approx(5.18453e-6, abs=1e-11)
    # 33 tokens = 540,672 bytes: two-shot 7.126 us (what was charged), one-shot 5.253 us
    assert ar(33) == pytest.approx(5.25280e-6, abs=1e-11)
    # the formulas cross at S = 3 us x 720 GB/s / 1.5 = 1.44 MB (~88 tokens): from there two-shot
    # is the cheaper, 96 tokens = 1,572,864 bytes: 6 us + 1.5 x 1572864 / 720e9 = 9.277 us
    # (one-shot 9.554 us)
    assert ar(96) == pytest.approx(9.27680e-6, abs=1e-11)
    # below the switch the engine's one-shot is priced even where two-shot would be cheaper:
    # TensorRT-LLM at 8 GPUs runs one-shot up to 128 tokens; 64 tokens = 1 MiB: one-shot
    # 3 us + 7 x 1048576 / 720e9 = 13.194 us, although two-shot would be 6 us + 1.75 x 1048576 / 720e9
    # = 8.549 us
    trt = serving_context("llama3.1-70b", "dgx-b200", "trtllm").behaviour
    msg = 64 * 8192 * 2.0
    oneshot, stated = trt.oneshot_allreduce(msg, 8, 64)
    assert bool(oneshot)
    assert float(allreduce_time_s(msg, 8, cluster, eff, True, oneshot, stated)) == pytest.approx(13.19449e-6,
                                                                                                 abs=1e-11)


@pytest.mark.parametrize("system", ["dgx-h100", "dgx-b200"])
def test_the_closed_loop_solves_rows_near_trtllms_switch_to_the_side_more_clients_put_them(system):
    """TensorRT-LLM runs one-shot up to 128 tokens, and two-shot is ~2.7x cheaper just above at 8
    GPUs: the requests decoding (the closed loop's fixed point) then sit near 128, and three passes
    stopped on either side (tp 8, isl 128 / osl 64 on H100: 834.5 -> 691.6 tokens/s/GPU from 153
    to 154 clients). The rows still moving after three passes are solved with up to twenty."""
    ctx = serving_context("llama3.1-70b", system, "trtllm")
    batches = list(range(140, 171))
    out = _agg(ctx, 8, batches, 128, 64)
    assert out["fits"].all()
    t = out["tokens_per_s_per_gpu"]
    assert np.all(np.diff(t) >= 0.0), list(zip(batches, t))
    # a row priced alone is the row priced among the others (each row's passes are its own)
    for i in (0, 13, 14, 30):
        alone = _agg(ctx, 8, [batches[i]], 128, 64)
        assert alone["tokens_per_s_per_gpu"][0] == t[i]
        assert alone["decoding_per_rank"][0] == out["decoding_per_rank"][i]
