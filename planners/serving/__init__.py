"""Serving plan search: the best tokens/s per GPU meeting a TTFT / TPOT objective, aggregated
and disaggregated, and the Pareto front of tokens/s per GPU against tokens/s per user."""
from planners.serving.pareto import pareto_front
from planners.serving.search import ServingPlan, plan_serving

__all__ = ["ServingPlan", "pareto_front", "plan_serving"]
