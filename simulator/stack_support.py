"""Whether a plan uses only what its software stack can run (``TrainingBehaviour.lacks``).

A release that has no pipeline engine, no sharded optimizer or no context parallelism cannot run
a plan that needs one, however fast the model says it would be: ``simulate`` refuses such a plan
with one line (``check_stack_features``) and the planner does not search it (``lacked_use``, the
same test on its columns). The features are ``hardware_specs.stack_spec.STACK_FEATURES``; each
stack file cites where its release shows an absence.
"""
from __future__ import annotations

import numpy as np

from hardware_specs.errors import InputError
from hardware_specs.stack_spec import STACK_FEATURES

#: one bit per feature, for ``ConfigBatch``'s integer column
FEATURE_BITS = {name: 1 << i for i, name in enumerate(STACK_FEATURES)}
#: schedules the ``zero_bubble_schedules`` feature names
ZERO_BUBBLE_SCHEDULES = ("zb-h1", "zb-h2", "zb-v", "dualpipe")
#: the plan field each feature is set by, and how to avoid it
_FIELD_AND_FIX = {
    "pipeline": ("pp", "use pp 1"),
    "interleaved_schedule": ("vpp", "use vpp 1 (plain 1F1B)"),
    "zero_bubble_schedules": ("schedule", "use the 1f1b schedule"),
    "sequence_parallel": ("sequence_parallel", "turn sequence parallelism off"),
    "context_parallel": ("cp", "use cp 1"),
    "expert_parallel": ("ep", "use ep 1"),
    "zero1": ("zero_stage", "use ZeRO stage 0, or 2 where the stack shards with FSDP"),
    "zero2": ("zero_stage", "use a lower ZeRO stage"),
    "zero3": ("zero_stage", "use a lower ZeRO stage"),
    "zero2_with_pipeline": ("zero_stage", "use ZeRO stage 0 or 1 with pp > 1, or pp 1"),
    "selective_recompute": ("recompute", "recompute none or full"),
    "partial_recompute": ("recompute_num_layers", "recompute every layer (recompute_num_layers 0)"),
    "activation_offload": ("offload_activation_layers", "offload no activations"),
    "optimizer_offload": ("offload_optimizer_fraction", "keep the optimizer on the GPU"),
    "moe_tp_without_sp": ("sequence_parallel", "use --sequence-parallel, or tp 1"),
}


def _above_one(x):
    return x > 1


def _positive(x):
    return x > 0


def _flag(x):
    return x.astype(bool)


#: ``features_in_use``'s one-field features: argument -> (feature, test of its value)
_FIELD_TESTS = {"pp": ("pipeline", _above_one), "vpp": ("interleaved_schedule", _above_one),
                "cp": ("context_parallel", _above_one), "ep": ("expert_parallel", _above_one),
                "zero_bubble": ("zero_bubble_schedules", _flag), "sequence_parallel": ("sequence_parallel", _flag),
                "selective": ("selective_recompute", _flag), "partial_recompute": ("partial_recompute", _flag),
                "offload_activation_layers": ("activation_offload", _positive),
                "offload_optimizer_fraction": ("optimizer_offload", _positive),
                "moe_tp_without_sp": ("moe_tp_without_sp", _flag)}


def lacks_mask(names) -> int:
    """The ``FEATURE_BITS`` mask of feature names."""
    return sum(FEATURE_BITS[n] for n in names)


def lacks_names(mask: int) -> tuple[str, ...]:
    """The feature names of a ``FEATURE_BITS`` mask."""
    return tuple(n for n in STACK_FEATURES if int(mask) & FEATURE_BITS[n])


def lacks_feature(mask, name: str):
    """Whether each ``FEATURE_BITS`` mask of ``mask`` (a ``ConfigBatch.stack_lacks`` column) has
    feature ``name``."""
    return (np.asarray(mask, dtype=np.int64) & FEATURE_BITS[name]) != 0


def features_in_use(*, pp=None, vpp=None, zero_bubble=None, sequence_parallel=None, cp=None, ep=None,
                    zero_stage=None, selective=None, partial_recompute=None, offload_activation_layers=None,
                    offload_optimizer_fraction=None, moe_tp_without_sp=None) -> dict:
    """Feature name -> whether a plan uses it (bools, or numpy masks broadcast from array
    arguments), for the features the given fields decide; a field left None decides nothing
    (the planner tests each axis as it builds it). ``zero_bubble``: the schedule is one of
    ``ZERO_BUBBLE_SCHEDULES``; ``selective``: the plan recomputes selectively;
    ``partial_recompute``: it recomputes some layers of each chunk in full and not the others
    (the block method with a layer count); ``moe_tp_without_sp``: a model with MoE layers runs
    tp > 1 without sequence parallelism."""
    given = dict(moe_tp_without_sp=moe_tp_without_sp, pp=pp, vpp=vpp, cp=cp, ep=ep, zero_bubble=zero_bubble, sequence_parallel=sequence_parallel,
                 selective=selective, partial_recompute=partial_recompute,
                 offload_activation_layers=offload_activation_layers,
                 offload_optimizer_fraction=offload_optimizer_fraction)
    used = {feature: test(np.asarray(given[field])) for field, (feature, test) in _FIELD_TESTS.items()
            if given[field] is not None}
    if zero_stage is not None:
        z = np.asarray(zero_stage)
        used["zero1"], used["zero2"], used["zero3"] = z == 1, z == 2, z == 3
        if pp is not None:
            used["zero2_with_pipeline"] = (z >= 2) & (np.asarray(pp) > 1)
    return used


def lacked_use(lacks, **plan_fields):
    """Whether a plan (or each row of array ``plan_fields``, see ``features_in_use``) uses a
    feature of ``lacks``: a bool array of the fields' broadcast shape (0-d for scalars)."""
    given = [np.asarray(v) for v in plan_fields.values() if v is not None]
    out = np.zeros(np.broadcast_shapes(*(g.shape for g in given)) if given else (), dtype=bool)
    for name, used in features_in_use(**plan_fields).items():
        if name in lacks:
            out = out | used
    return out


def check_stack_features(config, moe: bool = False) -> None:
    """Raise ``InputError`` if ``config`` (a ``ParallelConfig``) uses a feature its stack lacks
    (``ParallelConfig.stack_lacks``), naming the plan field and how to avoid it. ``moe``: the
    model has MoE layers (for ``moe_tp_without_sp``)."""
    c = config
    if not c.stack_lacks:
        return
    used = features_in_use(pp=c.pp, vpp=c.vpp, zero_bubble=c.schedule.value in ZERO_BUBBLE_SCHEDULES,
                           sequence_parallel=c.sequence_parallel and c.tp > 1, cp=c.cp, ep=c.ep,
                           zero_stage=c.zero_stage, selective=c.recompute.value == "selective",
                           partial_recompute=(c.recompute.value == "full" and c.recompute_num_layers > 0
                                              and c.recompute_method.value == "block"),
                           offload_activation_layers=c.offload_activation_layers,
                           offload_optimizer_fraction=c.offload_optimizer_fraction,
                           moe_tp_without_sp=moe and c.tp > 1 and not c.sequence_parallel)
    for name in STACK_FEATURES:
        if name in c.stack_lacks and bool(used.get(name, False)):
            field, fix = _FIELD_AND_FIX[name]
            raise InputError(field, f"the software stack has no {STACK_FEATURES[name]} (its training.lacks "
                             f"lists {name})", f"{fix}, or a stack that has it: paraplan hardware stacks")
