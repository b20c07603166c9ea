"""Planner rules that emptied the space, or priced what the launch refuses (review 2026-12-05):
a fixed ZeRO stage with one data-parallel rank, which schedule rule left no layout, and the
sequence-length rules of context and sequence parallelism."""
from __future__ import annotations

from dataclasses import replace as _replace

import numpy as np
import pytest

from hardware_specs.catalog import load_cluster
from hardware_specs.errors import InputError
from model_specs.catalog import load_model
from planners import SearchConstraints, enumerate_space, plan, row_config
from simulator.simulate import simulate


def test_a_fixed_zero_stage_with_one_data_parallel_rank_is_planned_as_simulate_runs_it():
    """``--dp 1 --zero 1`` (llama3-70b, 32 H100s, tp 8 pp 4, batch 8): the dominated_zero_without_dp
    prune dropped every row (ZeRO-1 with dp*cp = 1 shards nothing), though the request fixed the
    stage and simulate runs it; the error then blamed the global batch, which dp 1 x mb 1 divides."""
    fixed = {"dp": (1,), "tp": (8,), "pp": (4,), "zero_stage": (1,)}
    model = load_model("llama3-70b")
    space = enumerate_space(model, SearchConstraints(gpus=(32, 32), global_batch=8, max_tp=8, fixed=fixed))
    assert len(space) > 0 and space.pruned["dominated_zero_without_dp"] == 0
    assert set(space.columns["zero_stage"].tolist()) == {1} and set(space.columns["dp"].tolist()) == {1}
    result = plan("llama3-70b", "dgx-h100", 32, 8, fixed=fixed, max_plans=3, workers=1)
    best = result.best
    assert (best["dp"], best["tp"], best["pp"], best["zero_stage"]) == (1, 8, 4, 1)
    # the plan's number is simulate's for the same configuration
    sim = simulate(model, load_cluster("dgx-h100"), row_config(best, result.software[str(best["dtype"])]),
                   n_gpus=32)
    assert sim.step_time_s == pytest.approx(best["step_time_s"], rel=1e-9)
    # free, the prune still drops ZeRO 1-3 without data parallelism (never the best)
    free = enumerate_space(model, SearchConstraints(gpus=(32, 32), global_batch=8, max_tp=8,
                                                    fixed={k: v for k, v in fixed.items() if k != "zero_stage"}))
    assert free.pruned["dominated_zero_without_dp"] > 0 and set(free.columns["zero_stage"].tolist()) == {0}


@pytest.mark.parametrize("fixed, says, enough", [
    # DualPipe on pp 2: 2 sequences are at most 2 micro-batches (dp 1 x mb 1), under 2 x pp = 4
    ({"pp": (2,), "schedule": ("dualpipe",)},
     "dualpipe needs an even pp and an even number of micro-batches per step >= 2 x pp = 4", 4),
    # interleaved on pp 4: 2 micro-batches are no multiple of 4
    ({"pp": (4,), "schedule": ("interleaved",)}, "the micro-batches per step a multiple of pp = 4", 4),
])
def test_a_schedule_rule_that_leaves_no_layout_is_named_not_the_global_batch(fixed, says, enough):
    """llama3-8b on 8 H100s, global batch 2: dp 1 x micro-batch 1 divides the batch, so the error
    that "no layout of 8 GPUs divides the global batch of 2 sequences into dp x micro-batch" was
    false; the schedule's micro-batch rule emptied the space, and the batch it suggests plans."""
    schedules = fixed["schedule"]
    with pytest.raises(InputError) as err:
        plan("llama3-8b", "dgx-h100", 8, 2, fixed=fixed, schedules=schedules)
    e = err.value
    assert e.field == "schedule" and says in e.message and "divides the global batch" not in e.message, str(e)
    assert f"a global batch of {enough} sequences" in e.fix
    best = plan("llama3-8b", "dgx-h100", 8, enough, fixed=fixed, schedules=schedules, max_plans=3, workers=1).best
    m = enough // (best["dp"] * best["micro_batch"])
    assert best["schedule"] == schedules[0] and m % best["pp"] == 0 and m >= best["pp"]


def _one_error_line(args: list[str]) -> str:
    """The CLI's output for ``args``, checked to be one error line with exit code 2."""
    from click.testing import CliRunner
    from paraplan.cli import main
    res = CliRunner().invoke(main, args)
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    return lines[0]


def test_the_cli_names_dualpipes_micro_batch_rule_in_one_line_and_exits_2():
    line = _one_error_line(["plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "8", "--pp", "2",
                            "--schedule", "dualpipe", "--global-batch", "2"])
    assert line.startswith("error: schedule: ") and ">= 2 x pp = 4" in line


# ---- the sequence-length rules of context and sequence parallelism --------------------------

def test_the_sequence_rule_is_2cp_chunks_for_every_kind_and_seq_over_cp_over_tp_for_sp():
    from simulator.validate_config import cp_sequence_chunks, sequence_split_ok
    # Megatron-LM validate_args: seq_length % (2 * cp) == 0 (load-balanced ring: two chunks a rank)
    assert [int(cp_sequence_chunks(cp, "ring")) for cp in (1, 2, 4)] == [1, 4, 8]
    # Megatron's assert holds for every --cp-comm-type, a2a (Ulysses) included
    assert int(cp_sequence_chunks(4, "hybrid")) == 8 and int(cp_sequence_chunks(4, "ulysses")) == 8
    assert not sequence_split_ok(4098, 2, 1, False)          # 4098 = 4 x 1024 + 2
    assert not sequence_split_ok(4098, 2, 1, False, "ulysses")
    assert sequence_split_ok(8192, 4, 1, False) and not sequence_split_ok(8190, 2, 1, False)
    # sequence parallelism: each cp rank's seq/cp tokens over tp
    assert not sequence_split_ok(4097, 1, 2, True) and sequence_split_ok(4097, 1, 2, False)
    assert not sequence_split_ok(4100, 2, 8, True)           # 2050 tokens a cp rank, 2050 % 8 = 2
    assert sequence_split_ok(4100, 2, 2, True)               # 1025 each tp rank
    assert sequence_split_ok(4097, 1, 1, True)               # tp 1: no split
    # vectorised as the planner uses it
    got = sequence_split_ok(4100, np.array([[1], [2]]), np.array([2, 4, 8])[None, :], np.array([True, True, False]))
    assert got.tolist() == [[True, True, True], [True, False, True]]


@pytest.mark.parametrize("args, field, says", [
    (["--cp", "2", "--seq-len", "4098", "-n", "16"], "cp",
     "splits the sequence into 2 x cp = 4 equal chunks"),
    (["--tp", "2", "--sequence-parallel", "--seq-len", "4097", "-n", "8"], "sequence_parallel",
     "splits the 4097 tokens over tp=2"),
    (["--cp", "2", "--tp", "8", "--sequence-parallel", "--seq-len", "4100", "-n", "16"], "sequence_parallel",
     "splits the 2050 tokens of each cp rank (4100 / cp 2) over tp=8"),
])
def test_simulate_refuses_a_sequence_the_layout_cannot_split_in_one_line(args, field, says):
    """simulate priced ``--cp 2 --seq-len 4098`` and ``--tp 2 --sequence-parallel --seq-len 4097``,
    which Megatron-LM refuses (validate_args) or crashes on (mappings.py asserts)."""
    from click.testing import CliRunner
    from paraplan.cli import main
    res = CliRunner().invoke(main, ["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "--global-batch", "8", *args])
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith(f"error: {field}: ") and says in lines[0] and lines[0].endswith(")")


def test_the_planner_keeps_only_layouts_whose_sequence_splits_and_names_the_rule_when_none_is_left():
    base = load_model("llama3-8b")
    odd = _replace(base, seq_len=4097)
    space = enumerate_space(odd, SearchConstraints(gpus=(8, 8), global_batch=8, max_tp=8))
    cols = space.columns
    # 4097 tokens: no cp > 1 (2 x cp never divides an odd count), and sequence parallelism nowhere
    assert len(space) > 0 and (cols["cp"] == 1).all() and not cols["sequence_parallel"][cols["tp"] > 1].any()
    assert space.pruned["sequence"] > 0
    # 8190 = 2 x 4095: cp 2 needs 4 | 8190, which fails; cp 3 needs 6 | 8190 = 6 x 1365
    seq8190 = _replace(base, seq_len=8190)
    with pytest.raises(InputError) as err:
        plan(seq8190, "dgx-h100", 16, 32, fixed={"cp": (2,)})
    assert err.value.field == "cp" and "2 x cp the sequence of 8190 tokens" in err.value.message
    # every kept row is one check_config accepts: the same rule, the planner and simulate agree
    sp = _replace(base, seq_len=4100)
    space = enumerate_space(sp, SearchConstraints(gpus=(16, 16), global_batch=8, max_tp=8))
    c = space.columns
    on = c["sequence_parallel"].astype(bool)
    local = 4100 // c["cp"]
    assert ((4100 % (2 * c["cp"]) == 0) | (c["cp"] == 1)).all()
    assert (local[on] % c["tp"][on] == 0).all() and on.any()
    assert not (on & (c["tp"] == 8) & (c["cp"] == 2)).any()   # 2050 % 8 != 0


def test_plan_emit_megatron_never_writes_sequence_parallel_that_megatron_cannot_split():
    """``plan ... --seq-len 4097 --fix tp=2 --emit megatron`` wrote --seq-length 4097
    --tensor-model-parallel-size 2 --sequence-parallel, which asserts in
    tensor_parallel/mappings.py ``_reduce_scatter_along_first_dim``."""
    from click.testing import CliRunner
    from paraplan.cli import main
    res = CliRunner().invoke(main, ["plan", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "8", "--global-batch", "8",
                                    "--seq-len", "4097", "--fix", "tp=2", "--emit", "megatron"])
    assert res.exit_code == 0, res.output
    assert "--seq-length 4097" in res.stdout and "--tensor-model-parallel-size 2" in res.stdout
    assert "--sequence-parallel" not in res.stdout


def test_a_fixed_vpp_above_1_names_the_interleaved_rule_not_the_global_batch():
    """gpt3-1.3b on 4 H100s, global batch 6, --fix pp=4 --fix vpp=2: dp 1 x micro-batch 1
    divides 6, so "no layout of 4 GPUs divides the global batch of 6 sequences" was false; a vpp
    above 1 always runs interleaved, whose 6 micro-batches are no multiple of pp = 4. The batches
    the error suggests are the multiples of 4 nearest 6, 4 and 8, and both plan."""
    fixed = {"pp": (4,), "vpp": (2,)}
    with pytest.raises(InputError) as err:
        plan("gpt3-1.3b", "dgx-h100", 4, 6, fixed=fixed)
    e = err.value
    assert e.field == "schedule" and "divides the global batch" not in e.message, str(e)
    assert "under interleaved" in e.message and "a multiple of pp = 4" in e.message
    assert "a global batch of 4 or 8 sequences" in e.fix and "vpp=1" in e.fix
    for enough in (4, 8):
        best = plan("gpt3-1.3b", "dgx-h100", 4, enough, fixed=fixed, max_plans=3, workers=1).best
        assert best["schedule"] == "interleaved" and (enough // (best["dp"] * best["micro_batch"])) % 4 == 0
    # with vpp 1 fixed the same batch plans (1F1B has no such rule)
    assert plan("gpt3-1.3b", "dgx-h100", 4, 6, fixed={"pp": (4,), "vpp": (1,)}, max_plans=3, workers=1).best


def test_the_cli_names_the_interleaved_rule_for_a_fixed_vpp_in_one_line_and_exits_2():
    line = _one_error_line(["plan", "-m", "gpt3-1.3b", "-c", "dgx-h100", "-n", "4", "--global-batch", "6",
                            "--fix", "pp=4", "--fix", "vpp=2"])
    assert line.startswith("error: schedule: ") and "a multiple of pp = 4" in line


def test_check_sequence_split_raises_exactly_where_sequence_split_ok_is_false_and_names_the_failing_part():
    """One rule: the check refuses what the predicate refuses (the cp split first, then sp's split
    of each cp rank's tokens over tp) and the fix it offers passes the predicate."""
    import itertools
    import re
    from simulator.validate_config import check_sequence_split, sequence_split_ok
    for seq, cp, tp, sp, kind in itertools.product((4096, 4098, 4100, 4097, 6000), (1, 2, 3, 4), (1, 2, 3, 8),
                                                   (False, True), ("ring", "ulysses")):
        ok = bool(sequence_split_ok(seq, cp, tp, sp, kind))
        try:
            check_sequence_split(seq, cp, tp, sp, kind)
            assert ok, (seq, cp, tp, sp, kind)
        except InputError as err:
            assert not ok, (seq, cp, tp, sp, kind)
            assert err.field == ("sequence_parallel" if sequence_split_ok(seq, cp, 1, False, kind) else "cp")
            offered = re.search(r"choose (cp|tp) from ([0-9]+(?:, [0-9]+)*)", err.fix or "")
            for v in map(int, offered.group(2).split(", ")) if offered else ():
                args = (seq, v, 1, False, kind) if offered.group(1) == "cp" else (seq, cp, v, True, kind)
                assert sequence_split_ok(*args), (err, v)
    # hand-derived: 4100 tokens, ring cp 2 = 4 chunks of 1025; sp over tp 8 of 2050 a rank fails
    with pytest.raises(InputError, match="the 2050 tokens of each cp rank") as err:
        check_sequence_split(4100, 2, 8, True)
    assert "choose tp from 2, 5, 10, 25, 41, 50" in err.value.fix


def test_the_cp_a_sequence_split_error_suggests_runs_on_the_gpus_given():
    """8200 = 2^3 x 5^2 x 41 tokens: ring cp needs 2 x cp | 8200, i.e. cp | 4100 = 2^2 x 5^2 x 41;
    on 16 GPUs at tp 1, pp 1 cp must also divide 16 (a whole data-parallel degree): only 2 and 4.
    On 3 GPUs no cp > 1 does (3 does not divide 4100): the fix says so and what to change."""
    line = _one_error_line(["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "16", "--cp", "16", "--seq-len",
                            "8200", "--global-batch", "16"])
    assert "(choose cp from 2, 4, or a sequence length" in line
    line = _one_error_line(["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "3", "--cp", "3", "--seq-len",
                            "8200", "--global-batch", "16"])
    assert "choose cp from" not in line
    assert "no cp > 1 that divides the 3 GPUs left to cp x dp splits 8200 tokens" in line
    # Ulysses: the 32 query and 8 key/value heads of a tp-1 rank split over cp | 8, and cp | 24 GPUs: 2, 4, 8
    line = _one_error_line(["simulate", "-m", "llama3-8b", "-c", "dgx-h100", "-n", "24", "--cp", "24", "--cp-kind",
                            "ulysses", "--global-batch", "16"])
    assert "(choose cp from 2, 4, 8, or --cp-kind ring or hybrid)" in line
