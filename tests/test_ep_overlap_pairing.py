"""The overlapped expert all-to-all as Megatron-Core's combined 1F1B runs it
(``--overlap-moe-expert-parallel-comm``, core_v0.14+ ``pipeline_parallel/combined_1f1b.py``):
one micro-batch's forward beside another's backward, so a pass with no partner exposes all of
its all-to-alls. Without a pipeline "the forward step for the first microbatch is executed
alone" and so is the last backward; with an interleaved pipeline stage 0's warm-up forwards,
(p - 1) x 2 + (v - 1) x p + 1 chunk passes (``schedules.py``: one extra micro-batch before the
1F1B phase when the overlap is on), and as many cool-down backwards."""
import numpy as np
import pytest

from paraplan import api
from simulator.config_batch import ConfigBatch
from simulator.parallel_config import ParallelConfig, Schedule
from simulator.step_model import ep_unpaired_passes


def _passes(pp, vpp, schedule, m):
    config = ParallelConfig(dp=1, tp=1, pp=pp, vpp=vpp, schedule=schedule, micro_batch=1, global_batch=m)
    return float(ep_unpaired_passes(ConfigBatch.from_configs([config]), np.array([float(m)]))[0])


def test_unpaired_chunk_passes_follow_megatrons_warm_up_count():
    # no pipeline: the first forward and the last backward, whatever m (m = 1 pairs nothing)
    assert _passes(1, 1, Schedule.ONE_F_ONE_B, 1) == 1.0
    assert _passes(1, 1, Schedule.ONE_F_ONE_B, 64) == 1.0
    # interleaved p 4, v 4: (4 - 1) x 2 + (4 - 1) x 4 + 1 = 19 of the 64 x 4 chunk passes
    assert _passes(4, 4, Schedule.INTERLEAVED, 64) == 19.0
    # ... and all of them when there are fewer: m 2 x v 4 = 8 < 19
    assert _passes(4, 4, Schedule.INTERLEAVED, 2) == 8.0
    # a plain 1F1B pipeline by the same rule at v = 1: (8 - 1) x 2 + 1 = 15
    assert _passes(8, 1, Schedule.ONE_F_ONE_B, 64) == 15.0
    # GPipe runs every forward before any backward: nothing pairs
    assert _passes(4, 1, Schedule.GPIPE, 16) == 16.0
    # the zero-bubble schedules and DualPipe order their own passes: not counted
    assert _passes(4, 1, Schedule.ZB_H1, 16) == 0.0


def _ep_exposed(overlap: bool, global_batch: int, cuda_graphs: bool = True, **layout) -> tuple[float, float, int]:
    # CUDA graphs by default: no host issue floor under the passes, so the all-to-alls alone
    # tell the passes apart (the floor is checked apart below)
    report, _, _ = api.simulate_report("qwen3-30b-a3b", "dgx-h100", micro_batch=1, global_batch=global_batch,
                                       ep_comm_overlap=overlap, cuda_graphs=cuda_graphs, **layout)
    return report.time_breakdown_s["ep_comm_exposed_s"], report.step_time_s, report.num_microbatches


def test_without_a_pipeline_the_overlap_leaves_one_micro_batchs_all_to_alls():
    # Qwen3-30B-A3B on 8 H100, ep 8, m = 64 / 8 = 8: the layers' compute covers a pair's
    # all-to-alls, so what stays exposed is the lone first forward's and last backward's, one
    # micro-batch's worth: off / m; the step loses the rest
    layout = dict(gpus=8, ep=8)
    off, step_off, m = _ep_exposed(False, 64, **layout)
    on, step_on, _ = _ep_exposed(True, 64, **layout)
    assert m == 8 and off > 0.05
    assert on == pytest.approx(off / m, rel=1e-9)
    assert step_on == pytest.approx(step_off - off + on, rel=1e-9)
    # one micro-batch: nothing to pair, the switch changes nothing, also where the host's eager
    # kernel issue bounds the passes (a lone pass is at least its issue time either way)
    for graphs in (True, False):
        off1, step_off1, m1 = _ep_exposed(False, 8, cuda_graphs=graphs, **layout)
        on1, step_on1, _ = _ep_exposed(True, 8, cuda_graphs=graphs, **layout)
        assert m1 == 1 and step_on1 == pytest.approx(step_off1, rel=1e-12)
        if graphs:
            assert on1 == pytest.approx(off1, rel=1e-9)


def test_an_interleaved_pipeline_exposes_stage_zeros_warm_up_and_cool_down():
    # 48 MoE layers on pp 2 x vpp 2: 12 a chunk. Stage 0 runs (2 - 1) x 2 + (2 - 1) x 2 + 1 = 5
    # chunk forwards and 5 backwards alone, 60 layer passes each way; off, the stage exposes its
    # 24 layers' all-to-alls every micro-batch: 24 x m x A, so on = 60 x A = off x 60 / (24 m)
    layout = dict(gpus=16, pp=2, vpp=2, ep=8)
    off4, _, m4 = _ep_exposed(False, 32, **layout)
    on4, _, _ = _ep_exposed(True, 32, **layout)
    on8, _, m8 = _ep_exposed(True, 64, **layout)
    assert (m4, m8) == (4, 8)
    assert on4 == pytest.approx(off4 * 60 / (24 * m4), rel=1e-9)
    assert on8 == pytest.approx(on4, rel=1e-9)          # the pairs hide theirs: more pairs add nothing
    # m = 2: 2 x 2 = 4 chunk passes, all in the warm-up (< 5): nothing pairs
    off2, _, m2 = _ep_exposed(False, 16, **layout)
    on2, _, _ = _ep_exposed(True, 16, **layout)
    assert m2 == 2 and on2 == pytest.approx(off2, rel=1e-9)
