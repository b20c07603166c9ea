"""Software-stack profile: what a framework release does, as documented behaviour (data).

Speed depends on the framework as much as on the chip: whether the data-parallel gradient
reduction overlaps the backward pass, which attention kernel runs, whether gradient
accumulation is fused into the weight-gradient GEMM, and so on. Each built-in stack is one YAML
file in ``hardware_specs/stacks/`` (one per framework and release where behaviour changed);
every value carries the citation (framework code or docs) it comes from. Nothing here is
fitted: the hardware efficiency stays one model per GPU generation, fitted across stacks.

A stack has a ``training`` section (``TrainingBehaviour``, read by the training simulator as the
defaults of a ``ParallelConfig``'s software fields) and/or a ``serving`` section
(``ServingBehaviour``, read by the serving simulator).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping

from hardware_specs.errors import InputError
from hardware_specs.serving_behaviour import ServingBehaviour

#: attention kernels a training stack may run (``ParallelConfig.attention_kernel`` and
#: ``flash_attention``): ``serial`` = FlashAttention-2 (softmax between a tile's two matmuls),
#: ``pipelined`` = FlashAttention-3 / cuDNN fused attention on Hopper+ (softmax hidden under the
#: matmuls), ``auto`` = the GPU generation's usual kernel, ``materialized`` = no fused kernel
#: (the score matrix is written to memory, 2020-2022 Megatron).
ATTENTION_KERNELS = ("auto", "serial", "pipelined", "materialized")
#: how ZeRO-2 / FSDP SHARD_GRAD_OP reduce sharded gradients: after every micro-batch's backward
#: (DeepSpeed stage 2, FSDP), or once after the last one (Megatron's distributed optimizer keeps
#: full gradients in its buffer until then, which is ZeRO-1's traffic).
ZERO2_REDUCE = ("every_microbatch", "last_microbatch")


@dataclass(frozen=True)
class TrainingBehaviour:
    """What a training framework release does by default (documented, not fitted).

    Attributes:
        overlap_grad_reduce: DP gradient buckets reduce while the backward pass still runs
            (PyTorch DDP buckets; Megatron-Core ``overlap_grad_reduce``); False = one reduction
            after the backward (Megatron-LM 2019-2021, Megatron-DeepSpeed without buckets).
        overlap_param_gather: the distributed optimizer's (ZeRO-1/2) parameter all-gather, and
            ZeRO-3/FSDP parameter gathers, are prefetched under compute.
        grad_reduce_bytes: bytes per gradient element in the DP reduction (4 = fp32 main
            gradients, Megatron-Core / FSDP ``reduce_dtype=float32``; 2 = reduced in the 16-bit
            training dtype, DeepSpeed fp16 / Megatron-LM fp16 without
            ``--accumulate-allreduce-grads-in-fp32``).
        zero2_grad_reduce: ``every_microbatch`` or ``last_microbatch`` (see ``ZERO2_REDUCE``).
        tp_comm_overlap: tensor-parallel collectives overlap the GEMMs (Transformer Engine
            userbuffers / ``--tp-comm-overlap``).
        ep_comm_overlap: expert-parallel dispatch/combine all-to-all overlaps compute
            (DeepEP / ``--overlap-moe-expert-parallel-comm``, DualPipe).
        attention_kernel: one of ``ATTENTION_KERNELS``.
        grad_accumulation_fusion: the weight-gradient GEMM accumulates into the fp32 gradient
            buffer in place (Megatron ``--gradient-accumulation-fusion``).
        sequence_parallel_with_tp: Megatron sequence parallelism is on whenever tp > 1 (the
            stack's recipes turn it on).
        zero3_recompute_gather: under ZeRO-3 with full recomputation, the recompute forward
            gathers each layer's parameters again (DeepSpeed's per-module release).
        cuda_graphs: the step is captured in CUDA graphs (no per-kernel launch gap).
        fp8_recipe: ``delayed`` / ``tensorwise`` / ``blockwise`` / ``mxfp8`` / ``none``.
    """

    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    grad_reduce_bytes: float = 4.0
    zero2_grad_reduce: str = "every_microbatch"
    tp_comm_overlap: bool = False
    ep_comm_overlap: bool = False
    attention_kernel: str = "auto"
    grad_accumulation_fusion: bool = True
    sequence_parallel_with_tp: bool = False
    zero3_recompute_gather: bool = False
    cuda_graphs: bool = False
    fp8_recipe: str = "delayed"

    def __post_init__(self) -> None:
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise InputError("training.attention_kernel", f"unknown kernel {self.attention_kernel!r}",
                             "choose one of " + ", ".join(ATTENTION_KERNELS))
        if self.zero2_grad_reduce not in ZERO2_REDUCE:
            raise InputError("training.zero2_grad_reduce", f"unknown value {self.zero2_grad_reduce!r}",
                             "choose one of " + ", ".join(ZERO2_REDUCE))
        if self.grad_reduce_bytes not in (2.0, 4.0):
            raise InputError("training.grad_reduce_bytes", f"must be 2 or 4, got {self.grad_reduce_bytes!r}")


@dataclass(frozen=True)
class StackSpec:
    """One software stack (framework and release).

    Attributes:
        name: catalog name, e.g. ``megatron-core-0.13``.
        framework: the framework as the validation files name it (``megatron-core``, ``nemo``,
            ``torchtitan``, ``vllm``, ...).
        versions: releases this profile describes (as sources state them: a release, a container
            tag or a year).
        description: one line for people.
        training: training behaviour, None for a serving-only stack.
        serving: serving behaviour (``ServingBehaviour``), None for a training-only stack.
        citations: per behaviour key, where the framework documents it (file and commit, or docs
            page).
    """

    name: str
    framework: str
    versions: tuple[str, ...] = ()
    description: str = ""
    training: TrainingBehaviour | None = None
    serving: ServingBehaviour | None = None
    citations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.training is None and self.serving is None:
            raise InputError(f"stack {self.name}", "has neither a training nor a serving section")
        object.__setattr__(self, "versions", tuple(str(v) for v in self.versions))
        object.__setattr__(self, "citations", MappingProxyType(dict(self.citations)))

    @classmethod
    def training_keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(TrainingBehaviour))

    @classmethod
    def serving_keys(cls) -> tuple[str, ...]:
        return ServingBehaviour.keys()

    def covers(self, version: str | None) -> bool:
        """Whether this profile describes release ``version`` (a listed release, or one that
        starts with a listed release followed by ``.``, ``-``, ``+`` or ``rc``)."""
        if version is None:
            return False
        v = str(version).strip().lower().lstrip("v")
        for listed in self.versions:
            lv = listed.lower().lstrip("v")
            if v == lv or any(v.startswith(lv + sep) for sep in (".", "-", "+", "rc")):
                return True
        return False
