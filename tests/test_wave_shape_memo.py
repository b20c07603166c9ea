"""``wave_shape_factor`` memoises small operands: the memo gives the unmemoised numbers bit for bit,
keeps every argument in its key, and hands out arrays a caller may write into."""
from __future__ import annotations

import numpy as np

from cost_models import compute
from cost_models.compute import wave_shape_factor


def _direct(m, n, k, sm_count, k_stage_scale=1.0, with_waves=False):
    m, n, k = (np.maximum(np.asarray(x, dtype=float), 1.0) for x in (m, n, k))
    return compute._wave_shape(m, n, k, sm_count, k_stage_scale, with_waves)


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_the_memoised_factor_is_the_computed_one_for_every_argument():
    cases = [(4096, 8192, 4096, 132), (np.array([1.0, 100.0, 4097.0]), 8192, np.array([[512.0], [40000.0]]), 132),
             (np.array([3000.0]), 0.0, 7, 108), (np.arange(1.0, 70.0), 256, 256, 132)]   # 69 elements: not memoised
    for m, n, k, sms in cases:
        for scale in (1.0, 0.5):
            assert _same(wave_shape_factor(m, n, k, sms, scale), _direct(m, n, k, sms, scale))
            got, want = wave_shape_factor(m, n, k, sms, scale, with_waves=True), _direct(m, n, k, sms, scale, True)
            assert all(_same(g, w) for g, w in zip(got, want))
    # the same shapes on a chip of other SMs, or another K stage, are other entries
    assert wave_shape_factor(4096, 256, 4096, 132, 1.0) != wave_shape_factor(4096, 256, 4096, 100, 1.0)
    assert wave_shape_factor(256, 256, 1024, 132, 1.0) != wave_shape_factor(256, 256, 1024, 132, 0.5)


def test_writing_into_a_returned_factor_leaves_the_next_call_unchanged():
    m = np.array([1000.0, 3000.0])
    first = wave_shape_factor(m, 4096, 4096, 132)
    want = first.copy()
    first[:] = -1.0
    assert _same(wave_shape_factor(m, 4096, 4096, 132), want)
    factor, fill = wave_shape_factor(m, 4096, 4096, 132, with_waves=True)
    fill_want = fill.copy()
    fill[:] = -1.0
    assert _same(wave_shape_factor(m, 4096, 4096, 132, with_waves=True)[1], fill_want)
