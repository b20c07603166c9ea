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
    # the zero-bubble schedules run no forward beside a backward: every pass alone
    assert _passes(4, 1, Schedule.ZB_H1, 16) == 16.0
    # DualPipe on 8 ranks (deepseek-ai/DualPipe dualpipe.py step, rank 0): steps 1-3 run
    # (4 - 1) x 2 + 1 x 2 + (4 - 1) = 11 forwards alone (of m = 20, the example's), 3p/2 - 1
    assert _passes(8, 1, Schedule.DUALPIPE, 20) == 11.0
    assert _passes(8, 1, Schedule.DUALPIPE, 8) == 8.0        # all of them when m is smaller


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


@pytest.mark.parametrize("extra", [dict(offload_activation_layers=40), dict(zero_stage=3)])
def test_one_micro_batch_pairs_nothing_with_offload_or_zero3_either(extra):
    # m = 64 / (8 x 8) = 1: the switch must change nothing, also where the passes hide an offload
    # copy or ZeRO-3 traffic (the lone passes' longer windows hide more of it: each part as off)
    fields = dict(gpus=8, ep=8, micro_batch=8, global_batch=64, **extra)
    reports = [api.simulate_report("qwen3-30b-a3b", "dgx-h100", ep_comm_overlap=on, **fields)[0] for on in (False, True)]
    off, on = reports
    assert on.num_microbatches == 1
    assert on.step_time_s == pytest.approx(off.step_time_s, rel=1e-12)
    for part in ("ep_comm_exposed_s", "offload_exposed_s", "zero3_comm_exposed_s"):
        assert on.time_breakdown_s[part] == pytest.approx(off.time_breakdown_s[part], rel=1e-9, abs=1e-12)


def test_a_pairs_exposure_is_what_the_other_passes_compute_leaves():
    # Qwen3-30B-A3B on 16 H100, ep 16 over two nodes, CUDA graphs (no host floor): one MoE layer's
    # dispatch + combine a (the same bytes each way: the backward's a2a mirrors the forward's)
    # exceeds the forward's compute f but not the backward's b + w, so a pair exposes
    # max(a - (b + w), 0) + max(a - f, 0) = a - f
    import numpy as np
    from cost_models.compute import compute_rates
    from hardware_specs.catalog import efficiency_for_cluster, load_cluster
    from model_specs.catalog import load_model
    from simulator.step_model import _layer_times
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("dgx-h100")
    eff = efficiency_for_cluster(cluster)
    config = ParallelConfig(dp=16, tp=1, pp=1, ep=16, micro_batch=1, global_batch=64, ep_comm_overlap=True,
                            cuda_graphs=True)
    batch = ConfigBatch.from_configs([config])
    lay = _layer_times(model, cluster, eff, compute_rates(cluster.gpu, eff, batch.dtype), batch,
                       np.array([float(model.seq_len)]))
    a_f, a_b = float(lay["ep_fwd_traffic_moe"][0]), float(lay["ep_bwd_traffic_moe"][0])
    f, b, w = float(lay["compute_fwd_moe"][0]), float(lay["compute_bwd_moe"][0]), float(lay["w_moe"][0])
    assert a_f == a_b and f < a_f < b + w
    assert float(lay["ep_base_moe"][0]) == pytest.approx(a_b - f, rel=1e-12)
    # a forward and a backward with no partner expose both whole: 2a less the pair's a - f
    assert float(lay["ep_unpaired_f_moe"][0]) + float(lay["ep_unpaired_b_moe"][0]) == pytest.approx(
        a_f + a_b - (a_b - f), rel=1e-12)


def test_a_mixed_dtype_search_keeps_the_expert_parallel_rows_the_other_dtype_runs():
    # bf16 alone and bf16 beside fp32 (whose model the combined 1F1B refuses): the bf16 rows with
    # ep > 1 stay, so the best plan is the same; no fp32 row runs the switch with ep > 1
    import json
    from click.testing import CliRunner
    from paraplan.cli import main

    def plans(*dtypes):
        args = ["plan", "-m", "qwen3-30b-a3b", "-c", "dgx-h100", "-n", "16", "--global-batch", "64",
                "--ep-comm-overlap", "--top", "200", "--json"]
        for d in dtypes:
            args += ["--dtype", d]
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)["plans"]

    one, two = plans("bf16"), plans("bf16", "fp32")
    assert one[0]["ep"] > 1
    assert two[0]["step_time_s"] == pytest.approx(one[0]["step_time_s"], rel=1e-12)
    assert not [r for r in two if r["dtype"] == "fp32" and r["ep"] > 1]


def test_simulates_table_says_what_the_expert_part_holds_under_the_overlap():
    from click.testing import CliRunner
    from paraplan.cli import main
    base = ["simulate", "-m", "mixtral-8x7b", "-c", "dgx-h100", "-n", "64", "--tp", "2", "--ep", "8",
            "--global-batch", "256"]
    lines = {}
    for switch in ("--ep-comm-overlap", "--no-ep-comm-overlap"):
        res = CliRunner().invoke(main, [*base, switch])
        assert res.exit_code == 0, res.output
        lines[switch] = next(ln for ln in res.output.splitlines() if ln.strip().startswith("ep_comm_exposed_s"))
    assert lines["--ep-comm-overlap"].endswith("all-to-all the fwd/bwd pairs leave + the unpaired passes' (overlap on)")
    assert lines["--no-ep-comm-overlap"].endswith("expert-parallel dispatch/combine all-to-all not hidden")
