"""ZeRO-3 / FSDP under a pipeline as torchtitan runs it (``zero3_under_pipeline: once_per_step``):
each stage's parameters gathered once a step and kept whole, whole gradients accumulated and
reduce-scattered once after the stage's last backward (torchtitan ``apply_fsdp``'s
``reshard_after_forward = not pp_enabled``; torch.distributed.pipelining ``stage.py``
``backward_maybe_with_nosync`` / ``_post_backward``). Expected values by hand from the stage's
parameters and the collective cost function the step model calls."""
from dataclasses import replace

import pytest

from cost_models import params
from cost_models.topology import group_collective_time_s
from hardware_specs.catalog import efficiency_for_cluster, list_stacks, load_cluster, load_stack
from model_specs import load_model
from planners.plan import plan, row_config
from simulator import simulate
from simulator.parallel_config import ParallelConfig
from simulator.stack_defaults import stack_config_fields

MODEL = load_model("gpt3-1.3b")          # 24 layers, tied embedding: stage 0 holds it and 12 layers
CLUSTER = load_cluster("dgx-h100")
EFF = efficiency_for_cluster(CLUSTER)
DP, PP, N = 8, 2, 16
TORCHTITAN = stack_config_fields(load_stack("torchtitan"), "bf16")


def _config(**kw):
    # the gather exposed in full (no prefetch under the first forward), so the parts add up exactly
    fields = {**TORCHTITAN, "overlap_param_gather": False, **kw}
    fields.setdefault("global_batch", 64)
    return ParallelConfig(dp=fields.pop("dp", DP), tp=1, pp=fields.pop("pp", PP), micro_batch=1,
                          zero_stage=fields.pop("zero_stage", 3),
                          recompute="none", dtype="bf16", **fields)


def _stage0_params():
    return MODEL.num_layers // PP * params.dense_layer_params(MODEL) + params.embedding_params(MODEL)


def test_only_torchtitan_gathers_once_per_step_under_a_pipeline():
    # its eager profiles (0.2.0, 0.3.0) and its torch.compile one: compile changes the kernels,
    # not the FSDP policy
    for name in list_stacks():
        training = load_stack(name).training
        if training is not None:
            torchtitan = name in ("torchtitan", "torchtitan-0.3", "torchtitan-compile")
            assert training.zero3_under_pipeline == ("once_per_step" if torchtitan else "per_microbatch"), name
    assert TORCHTITAN["zero3_once_per_step"] is True
    assert stack_config_fields(load_stack("pytorch-fsdp"), "bf16")["zero3_once_per_step"] is False


def test_one_gather_and_one_reduce_scatter_of_the_first_stage_a_step_whatever_the_micro_batches():
    p0 = _stage0_params()
    assert p0 == 12 * 50_335_744 + 102_926_336
    # all-gather of stage 0's bf16 weights and reduce-scatter of its fp32 gradients over the 8
    # data-parallel ranks (two nodes' GPU 0..7 of one pipeline stage: tp 1), and the tied
    # embedding's gradient all-reduce between the first and the last stage, 8 ranks apart
    gather = group_collective_time_s("all_gather", p0 * 2.0, DP, 1, CLUSTER, EFF)
    reduce = group_collective_time_s("reduce_scatter", p0 * 4.0, DP, 1, CLUSTER, EFF)
    tied = group_collective_time_s("all_reduce", params.embedding_params(MODEL) * 4.0, 2, DP, CLUSTER, EFF)
    for gbs in (64, 128):                                   # 8 and 16 micro-batches
        r = simulate(MODEL, CLUSTER, _config(global_batch=gbs), n_gpus=N)
        assert r.num_microbatches == gbs // DP
        assert r.time_breakdown_s["zero3_comm_exposed_s"] == 0.0
        assert r.time_breakdown_s["dp_comm_exposed_s"] == pytest.approx(float(gather + reduce + tied), rel=1e-12)
    # the reduce-scatter after the last backward overlaps nothing, whatever overlap_grad_reduce says
    assert simulate(MODEL, CLUSTER, _config(overlap_grad_reduce=False), n_gpus=N).step_time_s == \
        simulate(MODEL, CLUSTER, _config(overlap_grad_reduce=True), n_gpus=N).step_time_s


def test_per_microbatch_zero3_pays_per_micro_batch_and_the_switch_changes_nothing_without_a_pipeline():
    per_mb = [simulate(MODEL, CLUSTER, _config(global_batch=gbs, zero3_once_per_step=False), n_gpus=N)
              for gbs in (64, 128)]
    z3 = [r.time_breakdown_s["zero3_comm_exposed_s"] for r in per_mb]
    assert z3[0] > 0.0 and z3[1] == pytest.approx(2.0 * z3[0], rel=1e-12)   # m times one micro-batch's
    # per micro-batch the stage keeps only the fp32 shard, the optimizer's master (FSDP2 keeps no
    # 16-bit shard: ``zero3_master_params``), the fp32 gradient shard and the moments: 16 / dp
    mem = per_mb[0].memory_breakdown_bytes
    assert mem["weights_bytes"] == 0.0
    assert mem["gradients_bytes"] + mem["optimizer_bytes"] == pytest.approx(_stage0_params() * 16.0 / DP, rel=1e-12)
    # pp 1: FSDP as without a pipeline, whichever the stack's behaviour
    on = simulate(MODEL, CLUSTER, _config(pp=1, dp=16, zero3_once_per_step=True), n_gpus=N)
    off = simulate(MODEL, CLUSTER, _config(pp=1, dp=16, zero3_once_per_step=False), n_gpus=N)
    assert on.step_time_s == off.step_time_s and on.memory_bytes == off.memory_bytes
    assert on.time_breakdown_s["zero3_comm_exposed_s"] > 0.0


def test_a_stage_gathered_once_holds_whole_weights_and_gradients_and_a_sharded_optimizer():
    p0 = _stage0_params()
    mem = simulate(MODEL, CLUSTER, _config(), n_gpus=N).memory_breakdown_bytes
    assert mem["weights_bytes"] == pytest.approx(p0 * 2.0, rel=1e-12)        # bf16, not / dp
    assert mem["gradients_bytes"] == pytest.approx(p0 * 4.0, rel=1e-12)      # fp32 (reduce_dtype), not / dp
    assert mem["optimizer_bytes"] == pytest.approx(p0 * 12.0 / DP, rel=1e-12)  # master + Adam, sharded


def _planner_rows_against_simulate(zero: int):
    """torchtitan's plans at pp 2, tp 1 and ZeRO ``zero``, each of the first four re-simulated:
    yields (row, report) after checking the row's step time and memory are simulate's."""
    result = plan(MODEL, CLUSTER, N, 64, stack="torchtitan", fixed={"zero_stage": zero, "pp": 2, "tp": 1},
                  dtypes=("bf16",), assign_stages=False, max_plans=None)
    plans = result.plans
    assert len(plans) >= 1
    software = result.software["bf16"]
    assert software["zero3_once_per_step"] is True
    for i in range(min(4, len(plans))):
        row = plans.iloc[i]
        report = simulate(MODEL, CLUSTER, row_config(row, software), n_gpus=N)
        assert row["step_time_s"] == pytest.approx(report.step_time_s, rel=1e-9)
        assert row["memory_gib"] * 2**30 == pytest.approx(report.memory_bytes, rel=1e-9)
        yield row, report, software


def test_planner_rows_of_torchtitan_zero3_under_a_pipeline_equal_simulate():
    rows = list(_planner_rows_against_simulate(3))
    for _, report, _ in rows:
        assert report.time_breakdown_s["zero3_comm_exposed_s"] == 0.0
    # the same search per micro-batch holds a dp-th of the weights and gradients
    first, _, software = rows[0]
    per_mb = simulate(MODEL, CLUSTER, replace(row_config(first, software), zero3_once_per_step=False), n_gpus=N)
    assert per_mb.memory_breakdown_bytes["weights_bytes"] < report.memory_breakdown_bytes["weights_bytes"]


# ---- ZeRO-2 (FSDP with reshard_after_forward False, torchtitan's "never") under the pipeline:
# the runtime turns the gradient sync off for every backward but the last whatever the reshard
# policy, so the stage reduce-scatters once after the flush, as ZeRO-3 there


def test_zero2_under_a_pipeline_reduce_scatters_the_stage_once_after_the_flush_whatever_the_micro_batches():
    p0 = _stage0_params()
    # no per-micro-batch reduce-scatter is left in the layers; after the flush: one all-gather
    # of stage 0's bf16 weights (fully exposed: overlap_param_gather off), one reduce-scatter of
    # its fp32 gradients over the 8 data-parallel ranks, exposed, and the tied embedding's
    # all-reduce between the first and the last stage
    gather = group_collective_time_s("all_gather", p0 * 2.0, DP, 1, CLUSTER, EFF)
    reduce = group_collective_time_s("reduce_scatter", p0 * 4.0, DP, 1, CLUSTER, EFF)
    tied = group_collective_time_s("all_reduce", params.embedding_params(MODEL) * 4.0, 2, DP, CLUSTER, EFF)
    for gbs in (64, 128):                                   # 8 and 16 micro-batches
        r = simulate(MODEL, CLUSTER, _config(zero_stage=2, global_batch=gbs), n_gpus=N)
        assert r.num_microbatches == gbs // DP
        assert r.time_breakdown_s["zero3_comm_exposed_s"] == 0.0
        assert r.time_breakdown_s["dp_comm_exposed_s"] == pytest.approx(float(gather + reduce + tied), rel=1e-12)
    # torchtitan has no ZeRO-2 distinct from ZeRO-3 under a pipeline: one run, one price
    for overlap in (False, True):
        z2 = simulate(MODEL, CLUSTER, _config(zero_stage=2, overlap_param_gather=overlap), n_gpus=N)
        z3 = simulate(MODEL, CLUSTER, _config(zero_stage=3, overlap_param_gather=overlap), n_gpus=N)
        assert z2.step_time_s == z3.step_time_s and z2.memory_bytes == z3.memory_bytes
        assert z2.time_breakdown_s == z3.time_breakdown_s


def test_zero2_under_a_pipeline_holds_the_stage_s_whole_gradients():
    p0 = _stage0_params()
    mem = simulate(MODEL, CLUSTER, _config(zero_stage=2), n_gpus=N).memory_breakdown_bytes
    assert mem["weights_bytes"] == pytest.approx(p0 * 2.0, rel=1e-12)
    assert mem["gradients_bytes"] == pytest.approx(p0 * 4.0, rel=1e-12)      # not / dp: accumulated whole
    assert mem["optimizer_bytes"] == pytest.approx(p0 * 12.0 / DP, rel=1e-12)
    # priced per micro-batch (a stack that does not defer it) the gradients are sharded
    per_mb = simulate(MODEL, CLUSTER, _config(zero_stage=2, zero3_once_per_step=False), n_gpus=N).memory_breakdown_bytes
    assert per_mb["gradients_bytes"] == pytest.approx(p0 * 4.0 / DP, rel=1e-12)


def test_zero2_per_micro_batch_is_unchanged_without_a_pipeline_or_without_the_stack_s_deferral():
    # pp 1: ZeRO-2 reduce-scatters every micro-batch whichever the stack's behaviour
    on = simulate(MODEL, CLUSTER, _config(zero_stage=2, pp=1, dp=16, zero3_once_per_step=True), n_gpus=N)
    off = simulate(MODEL, CLUSTER, _config(zero_stage=2, pp=1, dp=16, zero3_once_per_step=False), n_gpus=N)
    assert on.step_time_s == off.step_time_s and on.memory_bytes == off.memory_bytes
    # per micro-batch under the pipeline, the after-flush traffic is the gather and the tied
    # all-reduce only (a ZeRO-2 that keeps its parameters whole), or the tied all-reduce alone
    # (FSDP's, which gathers them in every micro-batch's forward instead), and the micro-batches'
    # reduce-scatters grow with their count
    p0 = _stage0_params()
    gather = group_collective_time_s("all_gather", p0 * 2.0, DP, 1, CLUSTER, EFF)
    tied = group_collective_time_s("all_reduce", params.embedding_params(MODEL) * 4.0, 2, DP, CLUSTER, EFF)
    r = simulate(MODEL, CLUSTER, _config(zero_stage=2, zero3_once_per_step=False, zero2_gather_every_microbatch=False),
                 n_gpus=N)
    assert r.time_breakdown_s["dp_comm_exposed_s"] == pytest.approx(float(gather + tied), rel=1e-12)
    r = simulate(MODEL, CLUSTER, _config(zero_stage=2, zero3_once_per_step=False, zero2_gather_every_microbatch=True),
                 n_gpus=N)
    assert r.time_breakdown_s["dp_comm_exposed_s"] == pytest.approx(float(tied), rel=1e-12)


def test_planner_rows_of_torchtitan_zero2_under_a_pipeline_equal_simulate():
    for _, report, _ in _planner_rows_against_simulate(2):
        # stage 0 holds its whole fp32 gradients (ZeRO-1's states, not 1/dp of them): 4 bytes
        # for each of its layers' parameters and the embedding's
        stage0 = report.stage_memory[0]
        held = stage0["layers"] * params.dense_layer_params(MODEL) + params.embedding_params(MODEL)
        assert stage0["parts_bytes"]["gradients_bytes"] == pytest.approx(held * 4.0, rel=1e-12)
