"""``exports.best_runnable`` reads a ranked table of tens of thousands of rows: what it does once
per call stays once per call, and its choice is the one a plain walk of the rows in rank order
makes (each row through ``plan_fields`` and the framework's ``refusal``, the first that runs)."""
from __future__ import annotations

import pandas as pd
import pytest

from hardware_specs.errors import InputError
from paraplan import api, exports
from paraplan.exports import common

MODEL, CLUSTER, GPUS, BATCH = "llama3-8b", "dgx-h100", 16, 32


@pytest.fixture(scope="module")
def small():
    """The ranked plans of a small request (about 7,000 rows) and their stack fields."""
    plans = api.plan(MODEL, CLUSTER, GPUS, global_batch=BATCH)
    return plans, plans.attrs["software"]


def _brute_force(plans: pd.DataFrame, framework: str, software, **context):
    """The reference: every row in rank order, boxed, normalised and refused one at a time; the
    first that runs with its rank, or the refusal counts by field (first met first among equal
    counts) and the first fix met of the most common field."""
    mod = exports.module(framework)
    reasons: dict[str, int] = {}
    fixes: dict[str, str] = {}
    for rank, rec in enumerate(plans.to_dict("records")):
        row = {**exports.with_stack_fields(rec, software), **context}
        err = mod.refusal(exports.plan_fields(row))
        if err is None:
            return rank, row
        if err.field == "model":
            raise err
        reasons[err.field] = reasons.get(err.field, 0) + 1
        fixes.setdefault(err.field, err.fix)
    return None, (reasons, fixes)


@pytest.fixture(scope="module")
def runnable(small):
    """framework -> per row of the ``small`` table, whether the framework's own ``refusal`` lets it
    run, walked row by row once per framework (about 2 s each; the tests of this file asked for
    the same walk seven times)."""
    plans, software = small
    masks: dict[str, pd.Series] = {}

    def get(framework: str) -> pd.Series:
        if framework not in masks:
            mod = exports.module(framework)
            ok = [mod.refusal(exports.plan_fields({**exports.with_stack_fields(r, software), "model": MODEL})) is None
                  for r in plans.to_dict("records")]
            masks[framework] = pd.Series(ok, index=plans.index)
        return masks[framework]
    return get


def _refused_first(plans: pd.DataFrame, ok: pd.Series, refused: int, runs: int) -> pd.DataFrame:
    """``refused`` rows the framework refuses (``ok`` false, in their ranked order), then ``runs``
    rows it runs, then the rest: a table whose first runnable row is deep."""
    table = pd.concat([plans[~ok].iloc[:refused], plans[ok].iloc[:runs], plans[~ok].iloc[refused:]])
    table = table.reset_index(drop=True)
    table.attrs.update(plans.attrs)
    return table


def test_the_cluster_a_table_names_is_read_once_per_call_not_once_per_row(small, runnable, monkeypatch):
    """Each row's launch hosts come from the cluster the table names: ``load_cluster`` ran for
    every row walked (23 s of 153 in a test walking ~51,000 rows). One table, one cluster: one read."""
    plans, software = small
    table = _refused_first(plans, runnable("deepspeed"), refused=40, runs=1)
    calls = []
    real = common.load_cluster
    monkeypatch.setattr(common, "load_cluster", lambda name: calls.append(name) or real(name))
    row, rank, _ = exports.best_runnable(table, "deepspeed", software=software, model=MODEL)
    assert rank == 40 and row["cluster"] == CLUSTER
    assert calls == [CLUSTER]


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "deepspeed"])
def test_the_rows_skipped_by_column_conditions_are_rows_the_framework_refuses(small, framework):
    """``best_runnable`` skips unboxed the rows ``exports.screen`` marks: every one of them is a
    row the framework's own ``refusal`` refuses, row by row, over a whole ranked table."""
    from paraplan.exports import screen
    plans, software = small
    context = {"model": MODEL}
    mod = exports.module(framework)
    marked = screen.refused_rows(plans, mod.screened, software, context)
    assert marked.any()                 # the conditions do mark rows here
    for rec in plans[marked].to_dict("records"):
        row = {**exports.with_stack_fields(rec, software), **context}
        assert mod.refusal(exports.plan_fields(row)) is not None, row["config"]


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "deepspeed"])
def test_the_best_runnable_row_is_the_first_a_row_by_row_walk_finds(small, runnable, framework):
    """The row, its rank and the slowdown are those of the plain walk (the reference), on a table
    whose first runnable row comes after 300 it refuses, and on the table as ranked."""
    plans, software = small
    for table in (_refused_first(plans, runnable(framework), refused=300, runs=2), plans):
        rank, expected = _brute_force(table, framework, software, model=MODEL)
        row, got_rank, slowdown = exports.best_runnable(table, framework, software=software, model=MODEL)
        assert got_rank == rank and row == expected
        # step time over row 0's, minus 1, never below 0 (the rows moved ahead may be slower)
        assert slowdown == pytest.approx(max(0.0, table.iloc[0].tokens_per_s / table.iloc[rank].tokens_per_s - 1),
                                         rel=1e-12)


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "deepspeed"])
def test_when_no_row_runs_the_refusals_are_counted_as_the_row_by_row_walk_counts_them(small, runnable, framework):
    """The message names the count of every refusing field (most first, ties in the order first
    met) and the fix of the most common: the walk's, over the rows the framework refuses."""
    plans, software = small
    table = _refused_first(plans, runnable(framework), refused=400, runs=0).iloc[:400]
    rank, (reasons, fixes) = _brute_force(table, framework, software, model=MODEL)
    assert rank is None
    ranked = sorted(reasons.items(), key=lambda kv: -kv[1])
    with pytest.raises(InputError) as err:
        exports.best_runnable(table, framework, software=software, model=MODEL)
    assert err.value.field == "--emit"
    assert "refused: " + ", ".join(f"{n} by {field}" for field, n in ranked) in err.value.message
    assert err.value.fix.startswith(f"for {ranked[0][0]}: {fixes[ranked[0][0]]}; or ")
