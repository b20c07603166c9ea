"""One measured serving row, explained: the model, system, stack, weight formats and layout it is
read as, and the parts of the prediction behind its TTFT and TPOT (the outputs of
``simulator.serving.evaluate`` for that row: the decode step by part, the prefill's own time and
share, the queueing), with the measured values and the errors ``validate serving`` reports.

``validate serving --explain ID`` prints it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from paraplan.validation.csv_structure import id_text, index_of_id
from paraplan.validation.serving import prepare, validate_rows
from simulator.serving.evaluate import evaluate_agg_columns, evaluate_disagg_columns


@dataclass(frozen=True)
class ExplainedServingRow:
    """A row's reading and prediction (``records``: ``validate serving``'s two records of the row,
    TTFT then TPOT; ``parts``: the evaluation's outputs for the row, None when skipped)."""

    row_id: str
    records: tuple
    reading: dict = field(default_factory=dict)
    layout: dict = field(default_factory=dict)
    parts: dict | None = None


def explain_serving_row(df: pd.DataFrame, row_id: str) -> ExplainedServingRow:
    """The row of ``df`` whose ``id`` is ``row_id``, predicted as ``validate serving`` predicts it.

    Raises ``InputError`` for an id no row has (with the closest ids) or one several rows share."""
    df = df.reset_index(drop=True)
    wanted = id_text(row_id)
    i = index_of_id(df["id"], wanted, "paraplan validate serving --json")
    row = df.iloc[[i]].reset_index(drop=True)
    records = tuple(validate_rows(row).to_dict("records"))
    prep = prepare(row)
    if not prep.groups:
        return ExplainedServingRow(wanted, records)
    group = prep.groups[0]
    ctx = group.context
    evaluate = evaluate_agg_columns if group.mode == "agg" else evaluate_disagg_columns
    out = evaluate(ctx, group.columns)
    parts = {k: float(np.asarray(v, dtype=float).reshape(-1)[0]) for k, v in out.items()}
    reading = {"model": ctx.model.name, "system": ctx.cluster.name, "gpu": ctx.cluster.gpu.name,
               "stack": ctx.stack.name, "mode": group.mode, "dense_format": ctx.dense_format,
               "expert_format": ctx.expert_format if ctx.model.moe is not None else None}
    layout = {k: float(v[0]) for k, v in group.columns.items()}
    return ExplainedServingRow(wanted, records, reading, layout, parts)
