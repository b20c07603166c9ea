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


def _refused_first(plans: pd.DataFrame, framework: str, software, refused: int, runs: int) -> pd.DataFrame:
    """``refused`` rows ``framework`` refuses (in their ranked order), then ``runs`` rows it runs,
    then the rest: a table whose first runnable row is deep."""
    mod = exports.module(framework)
    ok = [mod.refusal(exports.plan_fields({**exports.with_stack_fields(r, software), "model": MODEL})) is None
          for r in plans.to_dict("records")]
    ok = pd.Series(ok, index=plans.index)
    table = pd.concat([plans[~ok].iloc[:refused], plans[ok].iloc[:runs], plans[~ok].iloc[refused:]])
    table = table.reset_index(drop=True)
    table.attrs.update(plans.attrs)
    return table


def test_the_cluster_a_table_names_is_read_once_per_call_not_once_per_row(small, monkeypatch):
    """Each row's launch hosts come from the cluster the table names: ``load_cluster`` ran for
    every row walked (23 s of 153 in a test walking ~51,000 rows). One table, one cluster: one read."""
    plans, software = small
    table = _refused_first(plans, "deepspeed", software, refused=40, runs=1)
    calls = []
    real = common.load_cluster
    monkeypatch.setattr(common, "load_cluster", lambda name: calls.append(name) or real(name))
    row, rank, _ = exports.best_runnable(table, "deepspeed", software=software, model=MODEL)
    assert rank == 40 and row["cluster"] == CLUSTER
    assert calls == [CLUSTER]
