"""The calibration's GEMM and attention operands: as many sets as fill ``COLD_BYTES``, each in
memory of its own, cut from one random buffer (``paraplan.measure.benchmarks``)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from paraplan.measure import benchmarks as bm  # noqa: E402

CPU = torch.device("cpu")


def test_set_count_fills_the_cold_bytes_between_one_and_sixty_four_sets():
    # 128^3 fp32: 3 x 128 x 128 x 4 = 196,608 bytes a set; 64 MiB holds 341, capped at 64
    assert bm._set_count(3 * 128 * 128 * 4, CPU) == 64
    # 1024^3 fp32: 12 MiB a set; 64 MiB holds 5 (64 // 12)
    assert bm._set_count(3 * 1024 * 1024 * 4, CPU) == 5
    # a set larger than the cold bytes still gets one
    assert bm._set_count(2 * bm.COLD_BYTES["cpu"], CPU) == 1


def _span(t) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def test_operand_sets_cut_from_one_buffer_never_share_memory_and_keep_their_shapes():
    m, n, k = 96, 64, 32
    size = m * k + k * n
    sets = bm._set_count((m * k + k * n + m * n) * 4, CPU)
    buffer = bm._random_buffer(CPU, torch.float32, sets * size)
    assert buffer.numel() == sets * size and torch.isfinite(buffer).all()
    spans = []
    for i in range(sets):
        a = bm._cut(buffer, i * size, (k, m)).t()        # a transposed-layout input, as gemm_times cuts it
        b = bm._cut(buffer, i * size + m * k, (k, n))
        assert tuple(a.shape) == (m, k) and tuple(b.shape) == (k, n)
        spans += [_span(a), _span(b)]
    spans.sort()
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))
    # together they cover the buffer exactly: nothing drawn is left unused
    assert spans[0][0] == buffer.data_ptr() and spans[-1][1] == buffer.data_ptr() + buffer.numel() * 4
