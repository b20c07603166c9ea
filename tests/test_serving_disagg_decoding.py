"""Disaggregated TPOT prices the requests decoding, not every client (Little's law).

A closed loop of N clients on a prefill-bound deployment has most of them waiting for or in their
prefill: the decode workers' steps carry r = X / ranks x (osl - 1) x TPOT(r) requests, the fixed
point ``combine`` solves (as the aggregated model does, ``aggregated.decoding_requests``). Priced
at the whole batch, llama3.1-70b fp8 on 2 x tp4 H100 (isl 8192, osl 256, 64 clients) gave TPOT
27.97 ms with 14.4 of the 64 requests decoding by Little's law on its own output.
"""
import numpy as np
import pytest

from paraplan.serving_api import serving_context
from simulator.serving.disaggregated import decode_step, decode_side, evaluate_disagg

ISL, OSL = 8192.0, 256.0


@pytest.fixture(scope="module")
def ctx():
    return serving_context("llama3.1-70b", "dgx-h100", "vllm", precision="fp8")


def _run(ctx, batch, isl=ISL, osl=OSL):
    # prefill tp4 x1 (one prompt a step), decode tp4 x1 at ``batch`` clients
    return evaluate_disagg(ctx, 4, 1, 1, 4, 1, 1, 1, 4, 1, 1, 4, 1, np.atleast_1d(batch), 1, isl, osl)


def _rate(out, osl=OSL):
    """Requests/s the loop completes, from its tokens/s per GPU."""
    return out["tokens_per_s_per_gpu"][0] * np.ravel(out["gpus"])[0] / osl


def test_the_decode_batch_is_the_loops_fixed_point_by_hand(ctx):
    out = _run(ctx, 64.0)
    r, tpot = out["decoding_per_rank"][0], out["tpot_s"][0]
    # TPOT is one decode step of the r requests decoding (step_time at r, context isl + osl / 2)
    step, per_step = decode_step(ctx, 4.0, 1.0, 1.0, 4.0, 1.0, np.array([r]), ISL, OSL)
    assert tpot == pytest.approx(step["step_s"][0] / per_step, rel=1e-12)
    # Little's law on the output: decoding = X x (osl - 1) x TPOT, within 1%
    assert r == pytest.approx(_rate(out) * (OSL - 1.0) * tpot, rel=0.01)
    # the hand fixed point: prefill-bound, X ~ 0.991 / 0.4846 s prompt step = 2.045 /s
    # (utilisation 0.991); the step is about affine in r through t(64) = 28.18 ms and
    # t(14.4) = 15.66 ms (a = 12.03 ms, c = 0.2523 ms a request), so r = 2.045 x 255 x (a + c r)
    # -> r = 0.5214 x 12.03 / (1 - 0.5214 x 0.2523) = 7.2, TPOT = 12.03 + 0.2523 x 7.2 = 13.85 ms
    # (the whole batch priced gave 28.18). At the session-59 refit (Hopper decode HBM 0.9065 ->
    # 0.8947, prefill GEMM 0.626 -> 0.634): prompt step 0.49 -> 0.4846 s, X 2.02 -> 2.045 /s,
    # t(64) 27.97 -> 28.18 ms, t(14.4) 15.65 -> 15.66 ms, a 12.07 -> 12.03 ms, c 0.2485 ->
    # 0.2523 ms, r 7.1 -> 7.2, TPOT 13.84 -> 13.85 ms
    assert _rate(out) == pytest.approx(2.045, rel=0.01)
    assert r == pytest.approx(7.2, rel=0.05)
    assert tpot * 1e3 == pytest.approx(13.85, rel=0.01)


@pytest.mark.parametrize("batch", [1.0, 4.0, 16.0, 32.0, 64.0])
@pytest.mark.parametrize("isl", [16.0, 1024.0, 8192.0])
def test_tpot_is_never_above_the_whole_batch_step(ctx, batch, isl):
    out = _run(ctx, batch, isl)
    full = decode_side(ctx, 4, 1, 1, 4, 1, np.array([batch]), isl, OSL)
    assert out["tpot_s"][0] <= full["tpot_s"][0] * (1 + 1e-12)
    assert 1.0 <= out["decoding_per_rank"][0] <= batch
    little = _rate(out) * (OSL - 1.0) * out["tpot_s"][0]
    if out["decoding_per_rank"][0] > 1.0:
        assert out["decoding_per_rank"][0] == pytest.approx(little, rel=0.01)
    else:                   # a step carries at least one request
        assert little <= 1.0 + 1e-9


def test_with_prefill_not_the_bottleneck_every_client_decodes(ctx):
    # isl 16, osl 4096: a request spends ~0.1% of its loop before its first token, so all but
    # that share of the 64 clients decode and TPOT is the whole batch's step
    osl = 4096.0
    out = _run(ctx, 64.0, 16.0, osl)
    full = decode_side(ctx, 4, 1, 1, 4, 1, np.array([64.0]), 16.0, osl)
    assert out["decoding_per_rank"][0] >= 0.99 * 64.0
    assert out["tpot_s"][0] == pytest.approx(full["tpot_s"][0], rel=0.01)
    assert out["prefill_utilization_fraction"][0] < 0.05
    # exactly those not in their TTFT (Little's law over the whole loop)
    share = (osl - 1.0) * out["tpot_s"][0] / out["latency_s"][0]
    assert out["decoding_per_rank"][0] == pytest.approx(64.0 * share, rel=1e-4)


def test_one_row_is_the_same_evaluated_alone_or_beside_others(ctx):
    # the passes stop per row, so a plan's columns and serve simulate's single row agree exactly
    batches = np.array([1.0, 16.0, 64.0, 128.0])
    many = evaluate_disagg(ctx, 4, 1, 1, 4, 1, 1, 1, 4, 1, 1, 4, 1, batches, 1, ISL, OSL)
    for i, b in enumerate(batches):
        one = _run(ctx, b)
        for key in ("ttft_s", "tpot_s", "tokens_per_s_per_gpu", "decoding_per_rank"):
            assert one[key][0] == many[key][i]
