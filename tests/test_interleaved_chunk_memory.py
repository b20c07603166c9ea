"""Interleaved (and other multi-chunk) stages whose chunks hold different layers: the
activation peak is that of the chunk sets actually in flight in the schedule's order, each
chunk with its own layers, not the stage's mean chunk times the peak count.

Hand derivation (Megatron's interleaved 1F1B, Narayanan et al. 2021 section 2.2.2): stage s of
p warms up with 2 (p - s - 1) + (v - 1) p forwards, chunk 0's micro-batch group first, then
alternates one forward, one backward; a backward of the last chunk releases first. At p = 2,
v = 2, stage 0 runs F c0 mb0, F c0 mb1, F c1 mb0, F c1 mb1 (held [2, 2]), F c0 mb2 ([3, 2]),
B c1 mb0 ([3, 1]), F c0 mb3 ([4, 1]), ...; stage 1 runs F c0 mb0, F c0 mb1 ([2, 0]), F c1 mb0
([2, 1]), B c1 mb0, F c1 mb1 ([2, 1]), B c1 mb1, F c0 mb2 ([3, 0]), ...
"""
from __future__ import annotations

import numpy as np
import pytest

from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs import ModelSpec
from model_specs.catalog import load_model
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig
from simulator.pipeline.makespan import peak_held_chunks, peak_in_flight
from simulator.simulate import simulate

H, A, S = 1024, 16, 2048
MODEL = ModelSpec("gpt-8x1024", 8, H, A, A, 4 * H, 32000, S)
CLUSTER = load_cluster("dgx-h100")
KEPT = S * (34 * H + 4 * A)          # bytes one layer keeps per micro-batch (test_stage_memory's derivation)
INPUT = S * 2 * H                    # what a fully recomputed layer keeps


def _weighted_peak(held, layers):
    return int(max(np.asarray(h) @ np.asarray(layers) for h in held))


def test_held_chunk_vectors_give_the_hand_derived_interleaved_peaks():
    held = peak_held_chunks("interleaved", 2, 16, 2)
    # the unweighted peak is peak_in_flight's (5 and 3 chunk sets)
    assert tuple(int(h.sum(axis=1).max()) for h in held) == peak_in_flight("interleaved", 2, 16, 2) == (5, 3)
    # 'Et*16|t*4|t*4|t*16L': stage 0 chunks (16, 4), stage 1 (4, 16): [4, 1] -> 68, [2, 1] -> 24
    # layer-sets (the stage's mean chunk said 5 / 2 x 20 = 50 and 3 / 2 x 20 = 30)
    assert _weighted_peak(held[0], [16, 4]) == 4 * 16 + 1 * 4 == 68
    assert _weighted_peak(held[1], [4, 16]) == 2 * 4 + 1 * 16 == 24
    # v = 3: stage 0 warms up with 2 + 4 forwards ([2, 2, 2]), then F c0 mb2 ([3, 2, 2]); the
    # even split of 40 layers over 6 positions (uneven layers) is (6, 7, 7) on stage 0 and
    # (7, 7, 6) on stage 1: 3 x 6 + 2 x 7 + 2 x 7 = 46 and (stage 1: [3, 0, 0] after F c0 mb2
    # past [2, 2, 1]) 3 x 7 + 2 x 7 = 35 layer-sets (the mean chunk: 7 / 3 x 20, 5 / 3 x 20)
    held3 = peak_held_chunks("interleaved", 2, 16, 3)
    assert _weighted_peak(held3[0], [6, 7, 7]) == 46
    assert _weighted_peak(held3[1], [7, 7, 6]) == 35


@pytest.mark.parametrize("kind,p,v", [("interleaved", 4, 2), ("interleaved", 8, 4), ("zb-v", 4, 2),
                                      ("dualpipe", 4, 2), ("1f1b", 4, 1)])
def test_held_vectors_sum_to_the_peak_count(kind, p, v):
    for m in (4, 8, 32, 1000):
        held = peak_held_chunks(kind, p, m, v)
        assert tuple(int(h.sum(axis=1).max()) for h in held) == peak_in_flight(kind, p, m, v)


def _cfg(**kw):
    base = dict(dp=1, pp=2, vpp=2, micro_batch=1, global_batch=8, flash_attention=True, cuda_graphs=True,
                pipeline_layout="Et*3|t*1|t*1|t*3L")
    base.update(kw)
    return ParallelConfig(**base)


def _acts(config):
    return [s["parts_bytes"]["activations_bytes"] for s in simulate(MODEL, CLUSTER, config).stage_memory]


def test_unequal_chunks_hold_the_sets_in_flight_in_the_schedules_order():
    # m = 8, chunks (3, 1) on stage 0 and (1, 3) on stage 1: stage 0's peak [4, 1] -> 13 layers
    # (the mean chunk said 5 / 2 x 4 = 10), stage 1's [2, 1] -> 5 (said 3 / 2 x 4 = 6)
    assert _acts(_cfg()) == pytest.approx([13 * KEPT, 5 * KEPT], rel=1e-12)
    # equal chunks: the mean chunk is exact (5 / 2 x 4 = 10, 3 / 2 x 4 = 6 layer-sets)
    assert _acts(_cfg(pipeline_layout="Et*2|t*2|t*2|t*2L")) == pytest.approx([10 * KEPT, 6 * KEPT], rel=1e-12)


def test_full_recomputation_keeps_the_chunk_weighted_layer_inputs():
    # every layer recomputed keeps its input: the same sets, input bytes a layer
    assert _acts(_cfg(recompute="full")) == pytest.approx([13 * INPUT, 5 * INPUT], rel=1e-12)
    # one layer of each chunk recomputed: chunk (3, 1) keeps 2 KEPT + 1 INPUT a set and 1 INPUT
    # (the chunk's one layer); stage 0 at [4, 1], [3, 2] or [2, 2]: 4 (2 KEPT + INPUT) + INPUT
    acts = _acts(_cfg(recompute="full", recompute_num_layers=1))
    assert acts[0] == pytest.approx(max(4 * (2 * KEPT + INPUT) + INPUT, 3 * (2 * KEPT + INPUT) + 2 * INPUT), rel=1e-12)
    # stage 1, chunks (1, 3): [2, 1] -> 2 INPUT + (2 KEPT + INPUT); [3, 0] -> 3 INPUT
    assert acts[1] == pytest.approx(max(2 * INPUT + 2 * KEPT + INPUT, 3 * INPUT), rel=1e-12)


def test_gpt3_13b_embedding_heavy_layout_of_the_review():
    # 'Et*16|t*4|t*4|t*16L' at tp 8 pp 2 vpp 2, 16 micro-batches: stage 0 holds 68 layer-sets,
    # stage 1 24, where the even layout 'Et*10|t*10|t*10|t*10L' holds 50 and 30
    model, cluster = load_model("gpt3-13b"), load_cluster("dgx-h100")
    base = dict(tp=8, pp=2, vpp=2, dp=1, global_batch=16, zero_stage=0, sequence_parallel=True)
    uneven = [s["parts_bytes"]["activations_bytes"] for s in simulate(
        model, cluster, ParallelConfig(pipeline_layout="Et*16|t*4|t*4|t*16L", **base)).stage_memory]
    even = [s["parts_bytes"]["activations_bytes"] for s in simulate(
        model, cluster, ParallelConfig(pipeline_layout="Et*10|t*10|t*10|t*10L", **base)).stage_memory]
    assert uneven[0] / even[0] == pytest.approx(68 / 50, rel=1e-12)
    assert uneven[1] / even[1] == pytest.approx(24 / 30, rel=1e-12)


def test_the_planners_batch_and_simulate_agree_on_unequal_chunks():
    # the batch path (rows sharing dynamic parts, the search's memo) gives each row what
    # simulate gives it alone
    from simulator.step_model import memory_parts
    configs = [_cfg(pipeline_layout=lay, recompute=r, global_batch=g)
               for lay in ("Et*3|t*1|t*1|t*3L", "Et*2|t*2|t*2|t*2L", "Et*1|t*3|t*3|t*1L")
               for r in ("none", "selective", "full") for g in (4, 8, 16)]
    configs += [_cfg(pipeline_layout="", vpp=3, uneven_layers=True, global_batch=g) for g in (6, 12)]
    batch = ConfigBatch.from_configs(configs)
    got = memory_parts(MODEL, CLUSTER, efficiency_for_cluster(CLUSTER), batch)["memory_bytes"]
    want = [simulate(MODEL, CLUSTER, c).memory_bytes for c in configs]
    np.testing.assert_array_equal(got, want)
