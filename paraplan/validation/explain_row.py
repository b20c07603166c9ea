"""One published row, explained: the model, cluster, stack and configuration it is read as, the
simulated step behind its prediction (``simulator.simulate``, the same numbers ``validate
published`` converts: the planner and the simulator agree exactly), and its error.

``validate published --explain ID`` prints it; a user who sees a row off by 9% can read where
that row's time goes without rebuilding the row by hand.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from paraplan.validation.csv_structure import id_text, index_of_id
from paraplan.validation.predict import prepare
from paraplan.validation.published import RowInputs, metric_from_prediction, speed_error
from simulator.report import StepReport
from simulator.simulate import simulate


@dataclass(frozen=True)
class ExplainedRow:
    """A predicted row: its inputs, the simulated step and the converted metric (``predicted``);
    or a skipped row: ``reason`` set, the rest None."""

    row_id: str
    metric: str
    measured: float | None
    reason: str = ""
    inputs: RowInputs | None = None
    report: StepReport | None = None
    predicted: float | None = None

    @property
    def rel_error(self) -> float | None:
        """(predicted - measured) / measured, as ``validate published`` reports it."""
        if self.predicted is None or not self.measured:
            return None
        return (self.predicted - self.measured) / self.measured

    @property
    def speed_error(self) -> float | None:
        """Predicted speed / measured speed - 1 (+ = predicted faster)."""
        if self.predicted is None or not self.measured:
            return None
        return speed_error(self.metric, self.predicted, self.measured)


def explain_row(df: pd.DataFrame, row_id: str) -> ExplainedRow:
    """The row of ``df`` whose ``id`` is ``row_id``, predicted as ``validate published`` predicts it.

    Raises ``InputError`` for an id no row has (with the closest ids) or one several rows share."""
    wanted = id_text(row_id)
    index = index_of_id(df["id"], wanted, "paraplan validate published --json")
    records = df.to_dict("records")
    row = records[index]
    try:
        measured = float(row.get("measured_value"))
    except (TypeError, ValueError):
        measured = None
    # the rows validate published predicts, with its reasons for the rest (prepare: the row's own
    # checks and those against the other rows, a repeated id or a run counting FLOPs otherwise)
    reasons: dict[int, str] = {}
    prepared = prepare(records, on_skip=lambda i, why: reasons.__setitem__(i, why))
    if index in reasons:
        metric = str(row.get("measured_metric") or "").strip().lower()
        return ExplainedRow(wanted, metric, measured, reason=reasons[index] or "skipped")
    j = [id_text(x) for x in prepared.ids].index(wanted)
    inputs = prepared.inputs[j]
    report = simulate(inputs.model, inputs.cluster, inputs.config)
    return ExplainedRow(wanted, inputs.metric, float(prepared.measured[j]), inputs=inputs, report=report,
                        predicted=float(metric_from_prediction(inputs, report)))
