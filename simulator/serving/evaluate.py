"""One evaluation for every caller: numpy columns of deployments -> serving metrics.

``evaluate_agg_columns`` and ``evaluate_disagg_columns`` take a mapping of equal-length columns
(``AGG_COLUMNS`` / ``DISAGG_COLUMNS``) and a ``ServingContext``; ``serve simulate`` passes one
row, ``serve plan`` thousands, ``validate serving`` the rows of one group, all through these
two functions, so they agree exactly.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from hardware_specs.errors import InputError
from simulator.serving.aggregated import evaluate_agg
from simulator.serving.disaggregated import evaluate_disagg

AGG_COLUMNS = ("tp", "pp", "adp", "moe_tp", "moe_ep", "batch", "isl", "osl")
_SIDE = ("tp", "pp", "adp", "moe_tp", "moe_ep", "batch", "workers")
DISAGG_COLUMNS = tuple(f"prefill_{c}" for c in _SIDE) + tuple(f"decode_{c}" for c in _SIDE) + ("isl", "osl")


def _columns(cols: Mapping[str, np.ndarray], names) -> list[np.ndarray]:
    missing = [n for n in names if n not in cols]
    if missing:
        raise InputError("columns", f"missing column '{missing[0]}'", "give " + ", ".join(names))
    arrays = [np.atleast_1d(np.asarray(cols[n], dtype=float)) for n in names]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [np.broadcast_to(a, shape) for a in arrays]


def evaluate_agg_columns(ctx, cols: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Aggregated metrics for columns ``AGG_COLUMNS`` (see ``simulator.serving.aggregated``)."""
    tp, pp, adp, moe_tp, moe_ep, batch, isl, osl = _columns(cols, AGG_COLUMNS)
    out = evaluate_agg(ctx, tp, adp, pp, moe_tp, moe_ep, batch, isl, osl)
    out["gpus_per_worker"] = tp * pp * adp
    return out


def evaluate_disagg_columns(ctx, cols: Mapping[str, np.ndarray], kv_link_free: bool = False) -> dict[str, np.ndarray]:
    """Disaggregated metrics for columns ``DISAGG_COLUMNS`` (see ``simulator.serving.disaggregated``)."""
    (ptp, ppp, padp, pmtp, pmep, pb, pw, dtp, dpp, dadp, dmtp, dmep, db, dw, isl, osl) = _columns(cols, DISAGG_COLUMNS)
    out = evaluate_disagg(ctx, ptp, padp, ppp, pmtp, pmep, pb, pw, dtp, dadp, dpp, dmtp, dmep, db, dw, isl, osl,
                          kv_link_free=kv_link_free)
    out["gpus"] = ptp * ppp * padp * pw + dtp * dpp * dadp * dw
    return out
