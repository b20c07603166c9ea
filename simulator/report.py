"""``StepReport``: what one configuration costs, with its breakdowns."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping

#: step-time parts, in the order they are printed; they sum to ``step_time_s``.
TIME_PARTS = ("compute_s", "recompute_s", "tp_comm_exposed_s", "cp_comm_exposed_s", "ep_comm_exposed_s",
              "pp_comm_s",
              "zero3_comm_exposed_s", "pipeline_bubble_s", "dp_comm_exposed_s", "sync_wait_s", "optimizer_s",
              "offload_exposed_s")
#: memory parts per GPU; they sum to ``memory_bytes``.
MEMORY_PARTS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "logits_bytes",
                "recompute_buffers_bytes", "offload_buffers_bytes", "moe_dispatch_bytes", "zero3_buffers_bytes",
                "allocator_bytes")


@dataclass(frozen=True)
class StepReport:
    """One simulated training step.

    Attributes:
        step_time_s: seconds per optimizer step.
        time_breakdown_s: seconds per part (``TIME_PARTS``), summing to ``step_time_s``.
        memory_breakdown_bytes: peak bytes per GPU by part (``MEMORY_PARTS``), summing to
            ``memory_bytes``; on the pipeline stage with the most (``extras["memory_stage"]``).
        stage_memory: per pipeline stage, a dict of its ``layers``, ``in_flight`` (the most
            micro-batch chunk activation sets it holds), ``memory_bytes``, ``host_memory_bytes``
            (what offload keeps on the host for one GPU of it) and ``parts_bytes`` (by part).
        tokens_per_s, tokens_per_s_per_gpu: throughput.
        model_tflops_per_gpu, hardware_tflops_per_gpu: achieved TFLOP/s per GPU without / with
            recomputed FLOPs and the masked scores a materialised (unfused) attention core
            computes (the model FLOPs count the core's causal half); mfu, hfu as fractions of
            the dtype's dense peak.
        fits: peak memory <= HBM.
    """

    model: str
    cluster: str
    gpu: str
    n_gpus: int
    config: Mapping
    step_time_s: float
    time_breakdown_s: Mapping[str, float]
    tokens_per_step: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_flops: float
    hardware_flops: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    memory_bytes: float
    memory_breakdown_bytes: Mapping[str, float]
    hbm_bytes: float
    fits: bool
    num_microbatches: int
    layer_fwd_s: float
    layer_bwd_s: float
    layer_recompute_s: float
    extras: Mapping[str, float] = field(default_factory=dict)
    stage_memory: tuple = ()

    @property
    def headroom_bytes(self) -> float:
        return self.hbm_bytes - self.memory_bytes

    def as_dict(self) -> dict:
        d = asdict(self)
        d["config"] = dict(self.config)
        d["stage_memory"] = [dict(st, parts_bytes=dict(st["parts_bytes"])) for st in self.stage_memory]
        d["headroom_bytes"] = self.headroom_bytes
        return d
