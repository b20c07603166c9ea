"""Serving simulator: one deployment (or numpy columns of many) -> TTFT, TPOT, throughput, memory.

``simulate_serving`` for one ``Deployment``; ``evaluate_agg_columns`` / ``evaluate_disagg_columns``
for columns of layouts (what ``serve plan`` and ``validate serving`` call).
"""
from simulator.serving.context import ServingContext
from simulator.serving.deployment import Deployment, WorkerLayout
from simulator.serving.evaluate import evaluate_agg_columns, evaluate_disagg_columns
from simulator.serving.simulate import ServingReport, simulate_serving

__all__ = ["Deployment", "ServingContext", "ServingReport", "WorkerLayout", "evaluate_agg_columns",
           "evaluate_disagg_columns", "simulate_serving"]
