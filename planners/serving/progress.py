"""How far a serving search has got, for ``plan_serving(progress=...)``: its stages in order, and
within a batch search the rows priced so far, evaluated in chunks so that the count moves.

DeepSeek-R1 on 64 B200 (SGLang, NVFP4, isl / osl 1024, TTFT 1 s, TPOT 30 ms) searched for 2.2 s,
1.2 s of it one call pricing 491,792 pairings' batches: reported per phase, the bar sat still
for that second. Priced ``CHUNK_ROWS`` rows at a time it moves eight times within it.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

#: rows of candidates (a layout or pairing at one batch) a batch search prices in one call: the
#: count its progress moves by. Each row is priced alone (no row reads another), so chunks give
#: the same numbers as one call
CHUNK_ROWS = 65_536
#: progress units per stage: ``Stages`` reports ``stage x STAGE_UNITS + the share of its rows priced``
STAGE_UNITS = 100


class Stages:
    """``report(done, total, step)`` over ``names``, the stages of one search in the order they
    run: ``STAGE_UNITS`` each, ``start(name)`` at the beginning of one, ``part(rows_done, rows)``
    within it (the batch search's candidates priced, at most one unit short of the stage's end,
    which the next ``start`` or ``end`` reports; ``step`` then counts them), ``end()`` at the end
    of the search. ``done`` rises from one report to the next; a stage skipped (no layout to
    price) is passed over by the next ``start``. ``report`` None: silent."""

    def __init__(self, report: Callable[..., None] | None, names):
        self.report = report
        self.names = tuple(names)
        self.total = STAGE_UNITS * len(self.names)
        self.at = -1          # the last ``done`` reported
        self.step: str | None = None

    def _say(self, done: int, step: str) -> None:
        if self.report is not None and done > self.at:
            self.at = done
            self.report(done, self.total, step)

    def start(self, name: str) -> None:
        if name in self.names:
            self.step = name
            self._say(STAGE_UNITS * self.names.index(name), name)

    def part(self, rows_done: int, rows: int) -> None:
        if self.report is not None and self.step is not None:
            share = min(STAGE_UNITS * int(rows_done) // max(int(rows), 1), STAGE_UNITS - 1)
            self._say(STAGE_UNITS * self.names.index(self.step) + share,
                      f"{self.step}, {int(rows_done):,} of {int(rows):,} candidates")

    def end(self) -> None:
        self._say(self.total, "done")


SILENT = Stages(None, ())


def in_chunks(run, rows: np.ndarray, batch: np.ndarray, part: Callable[[int, int], None] | None = None) -> tuple:
    """``run(rows, batch)`` (a tuple of per-row arrays or scalars) over ``CHUNK_ROWS`` rows at a
    time, the pieces joined row by row; ``part(rows_done, rows)`` after each chunk."""
    n = int(np.size(batch))
    if n <= CHUNK_ROWS:
        got = run(rows, batch)
        if part is not None:
            part(n, n)
        return got
    pieces = []
    for s in range(0, n, CHUNK_ROWS):
        e = min(s + CHUNK_ROWS, n)
        pieces.append(tuple(np.broadcast_to(v, (e - s,)) for v in run(rows[s:e], batch[s:e])))
        if part is not None:
            part(e, n)
    return tuple(np.concatenate(col) for col in zip(*pieces))
