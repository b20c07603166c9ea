"""Flat (stage, chunk) cells: every row keeps exactly its own p x v cells, their per-stage sums
are the layouts', and a batch's memory is the memory of each of its rows alone (rows that share
their dynamic parts, and rows evaluated in one flat batch, never change one another's figures)."""
from __future__ import annotations

import numpy as np

from hardware_specs.catalog import efficiency_for_cluster, load_cluster
from model_specs.catalog import load_model
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig, Recompute, Schedule
from simulator.stage_cells import row_bounds, stage_cell_batches
from simulator.step_model import memory_parts

MODEL = load_model("llama3-8b")           # 32 layers
CLUSTER = load_cluster("dgx-h100")


def _configs():
    out = []
    for pp, vpp, schedule in ((1, 1, Schedule.ONE_F_ONE_B), (2, 1, Schedule.ONE_F_ONE_B),
                              (4, 2, Schedule.INTERLEAVED), (4, 1, Schedule.ZB_V), (8, 1, Schedule.DUALPIPE)):
        for zero, rc in ((1, Recompute.SELECTIVE), (3, Recompute.FULL), (0, Recompute.NONE)):
            out.append(ParallelConfig(dp=2, tp=2, pp=pp, vpp=vpp, schedule=schedule, zero_stage=zero, recompute=rc,
                                      micro_batch=1, global_batch=32))
    return out


def test_every_row_keeps_its_own_p_times_v_cells_and_the_layouts_stage_sums():
    batch = ConfigBatch.from_configs(_configs())
    seen = []
    for idx, fc in stage_cell_batches(MODEL, batch, max_cells=40):      # small batches: several yielded
        seen.extend(idx.tolist())
        bounds = row_bounds(fc.row)
        stages = np.diff(np.append(bounds, len(fc)))
        np.testing.assert_array_equal(stages, np.asarray(batch.pp)[idx])
        np.testing.assert_array_equal(np.bincount(fc.cell_stage, minlength=len(fc)), fc.chunks)
        layers = fc.stage_sum(fc.cell["dense"] + fc.cell["moe"])
        np.testing.assert_array_equal(layers, fc.stage["stage_dense"] + fc.stage["stage_moe"])
        # every row places all 32 layers (DualPipe twice: each rank holds both directions' copies)
        per_row = np.add.reduceat(layers, bounds)
        dual = np.asarray(batch.schedule)[idx] == ConfigBatch.from_configs([_configs()[-1]]).schedule[0]
        np.testing.assert_array_equal(per_row, np.where(dual, 64, 32))
        sub = fc.take(np.array([len(fc) - 1, 0]))
        assert list(sub.chunks) == [fc.chunks[-1], fc.chunks[0]] and len(sub.cell_stage) == sub.chunks.sum()
    assert sorted(seen) == list(range(len(batch)))


def test_a_batch_gives_each_row_the_memory_it_has_alone():
    eff = efficiency_for_cluster(CLUSTER)
    configs = _configs() * 2          # duplicates: rows that share their dynamic parts
    together = memory_parts(MODEL, CLUSTER, eff, ConfigBatch.from_configs(configs), fit_limit_bytes=40 * 2**30)
    # at 40 GiB both searches choose counts on some rows (the case this test is about)
    assert (together["_recompute_num_layers"] > 0).any() and (together["_offload_activation_layers"] > 0).any()
    for i, c in enumerate(configs):
        alone = memory_parts(MODEL, CLUSTER, eff, ConfigBatch.from_configs([c]), fit_limit_bytes=40 * 2**30)
        for key in ("memory_bytes", "memory_stage", "activations_bytes", "recompute_buffers_bytes",
                    "_recompute_num_layers", "_recompute_layers_decrement", "_offload_activation_layers"):
            assert together[key][i] == alone[key][0], (key, c)


def test_stage_chains_count_the_cells_before_each_stage_on_its_path():
    """llama3-8b (32 dense layers) on 4 stages, 1F1B: 8 layers a stage, the embedding on
    stage 0, the head on stage 3; stages 1 and 2 share a count vector, so only stage 2 (the
    later one: the chains before it are longer) is kept. Before stage 2: 16 layers, the
    embedding, the forward sends of stages 0-1 and the backward send of stage 1; before
    stage 3: 24 layers, 3 and 2 sends. ZB-H1 defers W passes past the drain: no backward
    chain. DualPipe's two paths meet the stages in opposite orders: every stage is kept."""
    from simulator.pipeline.schedules import ScheduleKind
    from simulator.stage_cells import stage_chains
    from simulator.step_bounds import _COUNTS
    model, keys = load_model("llama3-8b"), _COUNTS + ("cells",)
    c = stage_chains(model, ScheduleKind.ONE_F_ONE_B, 4, 1, 0, 0, "", keys)
    assert c.chains.shape == (1, 3, 12)
    np.testing.assert_array_equal(c.chains[0], [[0] * 12,
                                                [16, 0, 1, 0, 0, 2, 16, 0, 1, 0, 0, 1],
                                                [24, 0, 1, 0, 0, 3, 24, 0, 1, 0, 0, 2]])
    zb = stage_chains(model, ScheduleKind.ZB_H1, 4, 1, 0, 0, "", keys)
    np.testing.assert_array_equal(zb.chains[0][:, :6], c.chains[0][:, :6])
    assert not zb.chains[0][:, 6:].any()
    assert stage_chains(model, ScheduleKind.DUALPIPE, 4, 2, 0, 0, "", keys).chains.shape == (2, 4, 12)
