"""``planners.hetero_refine.refine_split`` tries every one-layer neighbour of the min-max split,
however much slower its slowest stage, so a layer moved from a slow pool to a fast one wins
where the flush's fill and drain save more than the slowest stage costs.

By hand: two stages, one class each, 5 layers, no sends or ends; a layer takes 1 s on stage 0 and
1.5 s on stage 1 (forward a third, backward two thirds). The min-max split is [3, 2] (3 s and 3 s;
[4, 1] is 4 s and 1.5 s, [2, 3] is 2 s and 4.5 s). One micro-batch crosses every stage forward
and back, so its flush is the sum of the stages: [3, 2] 3 + 3 = 6 s, [4, 1] 4 + 1.5 = 5.5 s, and
[4, 1] wins although its slowest stage is 33% above the min-max split's. Before, neighbours more
than 0.1% above the min-max's slowest stage were not tried (GPT-3 1.3B on 8 A100 + 6 H100: a
faster link lowered the best plan; tests/test_hetero_dp_keep.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from planners.hetero_refine import refine_split
from planners.hetero_split import split_layers
from simulator.heterogeneous.group_makespan import group_makespans_s
from simulator.parallel_config import Schedule

TAU = np.array([[1.0, 1.5]])          # s per layer, stage 0 then stage 1
MULT = np.array([[1, 1]])
POS = np.array([[0, 1]])
CAP = np.array([[5.0, 5.0]])
ZERO = np.zeros((1, 2))


def _refined(micro_batches):
    split = split_layers(MULT, TAU, ZERO, CAP, 5)
    out = refine_split(Schedule.ONE_F_ONE_B, split, MULT, POS, CAP, TAU / 3, ZERO, 2 * TAU / 3, ZERO, ZERO,
                       np.array([2]), np.array([float(micro_batches)]), TAU, ZERO)
    return split, out


def _flush(layers, micro_batches):
    t = np.asarray(layers, dtype=float)[None, :] * TAU
    return float(group_makespans_s(Schedule.ONE_F_ONE_B, t / 3, 2 * t / 3, np.array([2]),
                                   np.array([float(micro_batches)]))[0])


def test_min_max_split_by_hand():
    split, _ = _refined(1)
    assert split.layers_hi[0].tolist() == [3, 2] and split.slowest_s[0] == pytest.approx(3.0)


def test_one_micro_batch_flushes_in_the_sum_of_the_stages():
    assert _flush([3, 2], 1) == pytest.approx(6.0)
    assert _flush([4, 1], 1) == pytest.approx(5.5)
    assert _flush([2, 3], 1) == pytest.approx(6.5)


def test_a_neighbour_far_above_the_min_max_slowest_stage_wins_on_its_flush():
    _, out = _refined(1)
    assert out.layers_hi[0].tolist() == [4, 1]
    assert out.count_hi[0].tolist() == [1, 1] and out.count_lo[0].tolist() == [0, 0]
    # the refined split's slowest stage, in split_layers' model: 4 x 1 s
    assert out.slowest_s[0] == pytest.approx(4.0)


def test_with_many_micro_batches_the_slowest_stage_rules_and_min_max_stays():
    # 8 micro-batches: each pays the slowest stage, so [4, 1]'s 4 s loses to [3, 2]'s 3 s
    assert _flush([4, 1], 8) > _flush([3, 2], 8)
    _, out = _refined(8)
    assert out.layers_hi[0].tolist() == [3, 2]
