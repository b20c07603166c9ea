"""Plan search: the fastest parallel configurations of a model on a cluster that fit in memory.

``plan`` enumerates and prunes the configuration space (``search_space``), scores it with the
simulator's step model in chunks (``vectorized``), ranks what fits and splits the winner's
layers over its pipeline stages (``stage_assignment``).
"""
from planners.plan import OUTPUT_COLUMNS, PlanResult, parse_gpus, plan, row_config
from planners.search_space import RULES, SearchConstraints, enumerate_space
from planners.stage_assignment import (StageAssignment, assign_layers_ilp, assign_layers_to_stages,
                                       stage_assignment_for)

__all__ = ["OUTPUT_COLUMNS", "PlanResult", "RULES", "SearchConstraints", "StageAssignment",
           "assign_layers_ilp", "assign_layers_to_stages", "enumerate_space", "parse_gpus", "plan",
           "row_config", "stage_assignment_for"]
