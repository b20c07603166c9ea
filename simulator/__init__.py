"""Simulator: one configuration -> step time, breakdown, memory, MFU (above cost_models)."""
from simulator.parallel_config import AttentionKernel, CPKind, ParallelConfig, Recompute, Schedule
from simulator.report import StepReport
from simulator.simulate import simulate

__all__ = ["AttentionKernel", "CPKind", "ParallelConfig", "Recompute", "Schedule", "StepReport", "simulate"]
