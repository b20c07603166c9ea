"""A FLOP-derived row is checked against its run's iteration-time row too.

DGX Cloud's NeMo 24.11 benchmarks (DGXC2411) pair each run's mfu with an iter_time_s, no
tokens/s/GPU. Nemotron-4's MFU there counts GQA attention as full multi-head: in the Megatron
FLOP formula (megatron_core_model convention; NVIDIA/Megatron-LM training.py
num_floating_point_operations) the per-layer bracket is (1 + g/a + s/h) + ffn/h + V/(2 L h),
and with g/a -> 1 (MHA) instead of the model's 8 KV heads:

  15B  (h 6144, L 32, 48 heads, s 4096, ffn 4h, V 256000):
       GQA 1 + 1/6 + 2/3 + 4 + 0.651042 = 6.484375; MHA 2 + 2/3 + 4 + 0.651042 = 7.317708
       ratio 1.12851
  340B (h 18432, L 96, 96 heads, s 4096, ffn 4h, V 256000):
       GQA 1 + 1/12 + 2/9 + 4 + 0.072338 = 5.377894; MHA 2 + 2/9 + 4 + 0.072338 = 6.294560
       ratio 1.17045
"""

import pytest

from paraplan.validation.predict import _convention_mismatches

RATIO_15B = 7.317708 / 6.484375
RATIO_340B = 6.294560 / 5.377894
NEMOTRON_MFU = {**{f"DGXC2411-15b-{r}:mfu": RATIO_15B
                   for r in ("bf16-16g", "bf16-256g", "bf16-512g", "bf16-1024g", "bf16-2048g", "fp8-64g", "fp8-128g")},
                **{f"DGXC2411-340b-{r}:mfu": RATIO_340B for r in ("bf16-128g", "bf16-512g", "fp8-512g", "fp8-1024g")}}


def test_hand_ratios():
    assert RATIO_15B == pytest.approx(1.1285, abs=1e-4)
    assert RATIO_340B == pytest.approx(1.1705, abs=1e-4)


def test_iter_time_row_is_the_partner():
    # one run: an mfu row (scale 2.0, power -1: metric = 2 / time) and an iter_time row of 1.0 s;
    # an mfu of 2.0 agrees with it, 2.4 counts 1.2x the FLOPs
    conv = [(2.0, -1.0, False), (1.0, 1.0, False)]
    assert _convention_mismatches(["r", "r"], ["mfu", "iter_time_s"], [2.0, 1.0], conv) == {}
    out = _convention_mismatches(["r", "r"], ["mfu", "iter_time_s"], [2.4, 1.0], conv)
    assert list(out) == [0] and "1.200x" in out[0] and "the run's iter_time_s row is used" in out[0]
    # a tokens/s/GPU row, where the run has one, stays the partner
    conv3 = conv + [(3.0, -1.0, False)]
    out = _convention_mismatches(["r"] * 3, ["mfu", "iter_time_s", "tokens_per_s_per_gpu"], [2.4, 1.0, 2.4 * 1.5],
                                 conv3)
    assert out == {}


def test_nemotron4_dgxc_mfu_rows_skipped_at_the_hand_ratio(bundled_prepared):
    _, _, skipped = bundled_prepared        # the bundled published_runs.csv, every row prepared
    flops = {k: v for k, v in skipped.items() if "FLOPs of convention" in v}
    for rid, ratio in NEMOTRON_MFU.items():
        assert "iter_time_s row is used" in flops[rid]
        stated = float(flops[rid].split("counted ")[1].split("x")[0])
        assert stated == pytest.approx(ratio, abs=0.002)     # measured values rounded in the source
    # no other run's FLOP-derived row is left out through an iteration-time partner
    assert {k for k, v in flops.items() if "iter_time_s row" in v} == set(NEMOTRON_MFU)
